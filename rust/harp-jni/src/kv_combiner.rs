//! `harp.KvCombiner`: a key-value combiner written in Java. The engine calls
//! `byte[] combine(byte[] key, byte[] acc, byte[] other)` on whatever thread combines (a task's
//! thread or one of the engine's), attaching it to the JVM; a Java exception fails the
//! operation with the exception's class and message, and the exception itself becomes the cause
//! of the `HarpException` the caller gets ([`take_cause`]). This is the slow path: every
//! combination crosses JNI twice and copies the key and both values.

use std::sync::Mutex;

use harp::data::kv::{Key, KvCombiner, Value};
use harp::Error;
use jni::objects::{JByteArray, JObject, JThrowable, JValue};
use jni::refs::Global;
use jni::{jni_sig, jni_str, JavaVM};

pub struct JavaKvCombiner {
    vm: JavaVM,
    obj: Global<JObject<'static>>,
    name: String,
    /// The rank of the worker whose table it combines: the workers of a local job share one
    /// JVM, and theirs may fail alike, with the same text.
    rank: usize,
}

impl JavaKvCombiner {
    pub fn new(
        vm: JavaVM,
        obj: Global<JObject<'static>>,
        name: String,
        rank: usize,
    ) -> JavaKvCombiner {
        JavaKvCombiner {
            vm,
            obj,
            name,
            rank,
        }
    }
}

/// The bytes Java sees for a key: 8 or 4 little-endian bytes for i64/i32 keys, the bytes of a
/// str key.
fn key_bytes(key: Key<'_>) -> Vec<u8> {
    match key {
        Key::I64(v) => v.to_le_bytes().to_vec(),
        Key::I32(v) => v.to_le_bytes().to_vec(),
        Key::Str(s) => s.to_vec(),
    }
}

impl KvCombiner for JavaKvCombiner {
    fn name(&self) -> &str {
        &self.name
    }

    fn combine(
        &self,
        key: Key<'_>,
        acc: Value<'_>,
        other: Value<'_>,
        out: &mut Vec<u8>,
    ) -> harp::Result<()> {
        let failed = |what: String| {
            Error::data(format!(
                "Java combiner {} failed on key {key}: {what}",
                self.name
            ))
        };
        let got = call_java(&self.vm, self.rank, failed, |env| {
            let k = env.byte_array_from_slice(&key_bytes(key))?;
            let a = env.byte_array_from_slice(acc.payload)?;
            let b = env.byte_array_from_slice(other.payload)?;
            let r = env
                .call_method(
                    &self.obj,
                    jni_str!("combine"),
                    jni_sig!("([B[B[B)[B"),
                    &[JValue::Object(&k), JValue::Object(&a), JValue::Object(&b)],
                )?
                .l()?;
            if r.is_null() {
                return Ok(None);
            }
            let r = env.cast_local::<JByteArray>(r)?;
            Ok(Some(env.convert_byte_array(&r)?))
        })?;
        match got {
            Some(bytes) => {
                out.extend_from_slice(&bytes);
                Ok(())
            }
            None => Err(failed("it returned null".into())),
        }
    }
}

/// Runs `f` (a call into a Java combiner) on this thread, attached to the JVM: a Java
/// exception becomes the error `failed` makes of its class and message, and is kept as the
/// cause of the `HarpException` worker `rank`'s caller gets ([`take_cause`]).
pub(crate) fn call_java<T>(
    vm: &JavaVM,
    rank: usize,
    failed: impl Fn(String) -> Error,
    f: impl FnOnce(&mut jni::Env<'_>) -> Result<T, jni::errors::Error>,
) -> harp::Result<T> {
    match vm.attach_current_thread(f) {
        Ok(v) => Ok(v),
        Err(jni::errors::Error::CaughtJavaException {
            exception,
            name,
            msg,
            ..
        }) => {
            let e = failed(format!("{name}: {msg}"));
            keep_cause(rank, e.to_string(), exception);
            Err(e)
        }
        Err(e) => Err(failed(e.to_string())),
    }
}

/// How many Java exceptions thrown by combiners wait for their `HarpException` at most: a
/// combination that fails on several threads at once keeps one per thread, and the oldest go
/// when the error that reports them was another's.
const CAUSES_KEPT: usize = 16;

/// A Java exception thrown by a combiner: the rank of the worker whose table it combined, the
/// engine error text it became, and the exception.
type Cause = (usize, String, Global<JThrowable<'static>>);

/// The Java exceptions thrown by combiners. The engine's error is text (it may run on any
/// thread and travel through a collective); the export that reports it finds its exception
/// here by its worker's rank and that text.
static CAUSES: Mutex<Vec<Cause>> = Mutex::new(Vec::new());

fn keep_cause(rank: usize, text: String, exception: Global<JThrowable<'static>>) {
    let mut causes = CAUSES.lock().unwrap_or_else(|p| p.into_inner());
    if causes.len() == CAUSES_KEPT {
        causes.remove(0);
    }
    causes.push((rank, text, exception));
}

/// The Java exception thrown by a combiner of worker `rank` whose failure a `data` error with
/// message `msg` reports (the engine may prefix the combiner's text with where it happened),
/// taken out of the registry: it becomes the cause of the `HarpException`.
pub fn take_cause(rank: usize, msg: &str) -> Option<Global<JThrowable<'static>>> {
    let mut causes = CAUSES.lock().unwrap_or_else(|p| p.into_inner());
    let at = causes
        .iter()
        .rposition(|(r, text, _)| *r == rank && msg.ends_with(text.as_str()))?;
    Some(causes.remove(at).2)
}
