//! `harp.Events`: the engine's events (`harp::events`) for Java: sending to one worker, to all
//! or by label, taking the next event (without waiting or with a timeout), the label hash, and
//! `run_until_quiet` with a Java handler called back on the caller's own thread.
//!
//! Payloads: a direct `ByteBuffer` is sent straight from its memory (no copy); a `byte[]` (or
//! the array of a heap buffer) is copied once into a pooled buffer (JNI gives no stable pointer
//! into the Java heap across a blocking call). A received payload is copied once from the
//! pooled receive buffer into a new `byte[]` (the engine's buffer goes back to the pool at once).

use std::time::Duration;

use harp::events::{check_label_receivers, label_receivers, Handler};
use harp::{Error, Worker};
use jni::objects::{JByteArray, JByteBuffer, JClass, JObject, JString, JValue};
use jni::sys::{jint, jlong};
use jni::{jni_sig, jni_str, Env, EnvUnowned};

use crate::convert::{jstr, new_array, new_longs};
use crate::errors::{call, fail, Failure, Scope};
use crate::handles::worker;
use crate::table::direct_bytes;

/// Where a send goes (`mode` of `Events.send`).
const TO_ONE: jint = 0;
const TO_ALL: jint = 1;
const LABELED: jint = 2;

/// Runs the event call `what` on worker `w`, naming it in any failure (operation `events`, the
/// engine's own name for the event lane's calls).
fn on_worker<'l, T>(
    env: &mut Env<'l>,
    scope: &Scope,
    w: jlong,
    what: &str,
    body: impl FnOnce(&mut Env<'l>, &Worker) -> Result<T, Failure>,
) -> Result<T, Failure> {
    scope.named("events", what);
    let we = worker(w)?;
    scope.worker(we.worker.rank());
    let span = tracing::info_span!("harp", worker = %we.tag);
    let _g = span.enter();
    body(env, &we.worker)
}

fn usize_arg(v: jint, what: &str) -> Result<usize, Failure> {
    usize::try_from(v).map_err(|_| fail(format!("{what} must be >= 0, got {v}")))
}

/// Sends `length` bytes: from the direct buffer `direct` (its first `length` bytes) when it is
/// not null, else from `array[offset .. offset + length]`. `mode`: 0 to worker `dst`, 1 to every
/// worker, 2 labeled `label` to `copies` workers. Returns the receivers (labeled), else null.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Events_send<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    mode: jint,
    dst: jint,
    label: JString<'l>,
    copies: jint,
    array: JByteArray<'l>,
    direct: JByteBuffer<'l>,
    offset: jint,
    length: jint,
) -> JObject<'l> {
    let what = match mode {
        TO_ONE => "send_event",
        TO_ALL => "send_event_to_all",
        _ => "send_labeled",
    };
    call(&mut env, |env, scope| {
        on_worker(env, scope, w, what, |env, wk| {
            let copied;
            let payload: &[u8] = if !direct.is_null() {
                direct_bytes(env, &direct, length)?
            } else if !array.is_null() {
                let len = usize_arg(length, "the payload length")?;
                let off = usize_arg(offset, "the payload offset")?;
                let n = array.len(env)?;
                if off.checked_add(len).is_none_or(|end| end > n) {
                    return Err(fail(format!(
                        "payload range {off}..+{len} outside the {n}-byte array"
                    )));
                }
                let mut buf = wk.pool().get(len);
                // SAFETY: `buf` holds `len` initialised bytes; i8 and u8 have one layout.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<i8>(), len) };
                array.get_region(env, offset, dst)?;
                copied = buf;
                &copied
            } else {
                return Err(fail(format!("{what}: the payload is null")));
            };
            match mode {
                TO_ONE => {
                    let to = usize::try_from(dst).map_err(|_| {
                        fail(format!(
                            "{what}: no worker {dst} (the job has {})",
                            wk.size()
                        ))
                    })?;
                    wk.send_event(to, payload)?;
                    Ok(JObject::null())
                }
                TO_ALL => {
                    wk.send_event_to_all(payload)?;
                    Ok(JObject::null())
                }
                LABELED => {
                    let label = jstr(env, &label)?;
                    let copies = usize::try_from(copies).unwrap_or(0);
                    let to = wk.send_labeled(&label, copies, payload)?;
                    let to: Vec<jint> = to.into_iter().map(|r| r as jint).collect();
                    Ok(new_array(env, &to)?.into())
                }
                _ => Err(fail(format!("unknown send mode {mode}"))),
            }
        })
    })
}

/// The Java values of an event: its label (null when none) and its payload copied into a new
/// `byte[]`.
fn java_parts<'l>(
    env: &mut Env<'l>,
    ev: &harp::events::Event,
) -> jni::errors::Result<(JString<'l>, JByteArray<'l>)> {
    let label = match &ev.label {
        Some(l) => env.new_string(l)?,
        None => JString::default(),
    };
    Ok((label, env.byte_array_from_slice(ev.payload())?))
}

/// A Java `harp.Event` for `ev`.
fn java_event<'l>(env: &mut Env<'l>, ev: &harp::events::Event) -> Result<JObject<'l>, Failure> {
    let (label, payload) = java_parts(env, ev)?;
    Ok(env.new_object(
        jni_str!("harp/Event"),
        jni_sig!("(ILjava/lang/String;[B)V"),
        &[
            JValue::Int(ev.src as jint),
            JValue::from(&label),
            JValue::from(&payload),
        ],
    )?)
}

/// The next event as a `harp.Event`, or null: without waiting (`timeout_ms` < 0) or waiting at
/// most `timeout_ms` milliseconds.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Events_take<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    timeout_ms: jlong,
) -> JObject<'l> {
    let what = if timeout_ms < 0 {
        "try_event"
    } else {
        "wait_event"
    };
    call(&mut env, |env, scope| {
        on_worker(env, scope, w, what, |env, wk| {
            let got = match u64::try_from(timeout_ms) {
                Err(_) => wk.try_event()?,
                Ok(ms) => wk.wait_event(Duration::from_millis(ms))?,
            };
            match got {
                Some(ev) => java_event(env, &ev),
                None => Ok(JObject::null()),
            }
        })
    })
}

/// `[queued bytes now, most bytes ever queued from one sender]` of worker `w`'s events
/// (`Worker::events_stats`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Events_stats<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
) -> JObject<'l> {
    call(&mut env, |env, _| {
        let s = worker(w)?.worker.events_stats();
        Ok(new_longs(env, &[s.queued_bytes, s.peak_sender_bytes])?.into())
    })
}

/// The engine's receivers of `label` sent as `copies` copies among `workers`
/// (`harp::events::label_receivers`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Events_labelReceivers<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    label: JString<'l>,
    copies: jint,
    workers: jint,
) -> JObject<'l> {
    call(&mut env, |env, _| {
        let label = jstr(env, &label)?;
        let workers = usize_arg(workers, "the number of workers")?;
        let copies = usize_arg(copies, "copies")?;
        check_label_receivers(copies, workers)?;
        let to: Vec<jint> = label_receivers(&label, copies, workers)
            .into_iter()
            .map(|r| r as jint)
            .collect();
        Ok(new_array(env, &to)?.into())
    })
}

/// Calls the Java adapter (`harp.Events.Adapter`): `String event(int, String, byte[])` and
/// `String idle()` return null, or the description of what the user's handler threw; `int busy()`
/// returns 1 or 0, or -1 when the handler threw (then `String describe()` says what).
struct JavaHandler<'a, 'l> {
    env: &'a mut Env<'l>,
    adapter: &'a JObject<'l>,
    rank: usize,
}

impl JavaHandler<'_, '_> {
    fn outcome(&self, got: jni::errors::Result<Option<String>>) -> harp::Result<()> {
        match got {
            Ok(None) => Ok(()),
            Ok(Some(thrown)) => Err(Error::data(format!(
                "rank {}: run_until_quiet: the Java event handler threw {thrown}",
                self.rank
            ))),
            Err(e) => Err(Error::data(format!(
                "rank {}: run_until_quiet: calling the Java event handler failed: {e}",
                self.rank
            ))),
        }
    }
}

/// The text of a `String` a Java call returned (null: none).
fn returned(env: &mut Env<'_>, v: JObject<'_>) -> jni::errors::Result<Option<String>> {
    if v.is_null() {
        return Ok(None);
    }
    let s = env.cast_local::<JString>(v)?;
    Ok(Some(s.try_to_string(env)?))
}

impl Handler for JavaHandler<'_, '_> {
    fn event(&mut self, ev: harp::events::Event) -> harp::Result<()> {
        let adapter = self.adapter;
        let got = self.env.with_local_frame(4, |env| {
            let (label, payload) = java_parts(env, &ev)?;
            let r = env
                .call_method(
                    adapter,
                    jni_str!("event"),
                    jni_sig!("(ILjava/lang/String;[B)Ljava/lang/String;"),
                    &[
                        JValue::Int(ev.src as jint),
                        JValue::from(&label),
                        JValue::from(&payload),
                    ],
                )?
                .l()?;
            returned(env, r)
        });
        self.outcome(got)
    }

    fn idle(&mut self) -> harp::Result<()> {
        let adapter = self.adapter;
        let got = self.env.with_local_frame(2, |env| {
            let r = env
                .call_method(
                    adapter,
                    jni_str!("idle"),
                    jni_sig!("()Ljava/lang/String;"),
                    &[],
                )?
                .l()?;
            returned(env, r)
        });
        self.outcome(got)
    }

    fn busy(&mut self) -> harp::Result<bool> {
        let adapter = self.adapter;
        // 1: busy, 0: not, -1: the handler threw (kept by the adapter; `describe()` says what).
        let got = self.env.with_local_frame(2, |env| {
            let r = env
                .call_method(adapter, jni_str!("busy"), jni_sig!("()I"), &[])?
                .i()?;
            if r >= 0 {
                return Ok((r == 1, None));
            }
            let d = env
                .call_method(
                    adapter,
                    jni_str!("describe"),
                    jni_sig!("()Ljava/lang/String;"),
                    &[],
                )?
                .l()?;
            Ok((false, returned(env, d)?))
        });
        let (busy, thrown) = match got {
            Ok((busy, thrown)) => (busy, Ok(thrown)),
            Err(e) => (false, Err(e)),
        };
        self.outcome(thrown).map(|()| busy)
    }
}

/// `Worker::run_until_quiet_with` calling the Java `adapter` for each event and idle step, on
/// this thread. Returns `[events, handled, waves]` (`harp::events::Quiet`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Events_runUntilQuiet<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    adapter: JObject<'l>,
) -> JObject<'l> {
    call(&mut env, |env, scope| {
        on_worker(env, scope, w, "run_until_quiet", |env, wk| {
            if adapter.is_null() {
                return Err(fail("run_until_quiet: the handler is null"));
            }
            let mut h = JavaHandler {
                env,
                adapter: &adapter,
                rank: wk.rank(),
            };
            let q = wk.run_until_quiet_with(&mut h)?;
            Ok(new_longs(h.env, &[q.events, q.handled, q.waves])?.into())
        })
    })
}
