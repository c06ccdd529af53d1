//! How failures reach Java: every export runs through [`call`], which resolves its outcome with
//! one jni [`ErrorPolicy`] ([`Policy`]). An engine error, a failure of the JNI layer itself and
//! a Rust panic all become one `harp.HarpException` carrying a stable kind (the engine's
//! [`Error::kind`] names plus [`JNI_KINDS`]), the rank, the operation (collective, sequence
//! number, label) and the message; for a panic also the Rust backtrace, captured by a panic
//! hook on the panicking thread; for an exception a Java `KvCombiner` threw, that exception as
//! its cause ([`crate::kv_combiner::take_cause`]). Nothing unwinds into the JVM.

use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};
use std::sync::OnceLock;

use harp::wire::Op;
use harp::Error;
use jni::errors::ErrorPolicy;
use jni::objects::{JThrowable, JValue};
use jni::{jni_sig, jni_str, Env, EnvUnowned};

/// A Rust panic (the message is the panic's; the exception carries the backtrace).
pub const PANIC: &str = "panic";
/// A closed or never valid handle.
pub const CLOSED: &str = "closed";
/// A failure of a JNI call itself (out of memory in the JVM, a missing class, …).
pub const JNI: &str = "jni";
/// The kinds the JNI layer adds to the engine's [`Error::KINDS`].
pub const JNI_KINDS: [&str; 3] = [PANIC, CLOSED, JNI];

/// An error on its way to Java (boxed: it travels in every `Result` of the layer).
#[derive(Debug)]
pub struct Failure(Box<Detail>);

/// The fields of `harp.HarpException`.
#[derive(Debug)]
struct Detail {
    kind: &'static str,
    /// The reporting worker's rank, −1 when unknown.
    rank: i64,
    /// The collective's name (`allreduce`, …), empty when none.
    op: String,
    /// The operation's sequence number on its worker, −1 when unknown.
    seq: i64,
    label: String,
    msg: String,
    backtrace: String,
}

impl Failure {
    fn new(kind: &'static str, msg: String) -> Failure {
        Failure(Box::new(Detail {
            kind,
            rank: -1,
            op: String::new(),
            seq: -1,
            label: String::new(),
            msg,
            backtrace: String::new(),
        }))
    }
}

#[cfg(test)]
impl Failure {
    /// The message Java would get.
    pub fn message(&self) -> &str {
        &self.0.msg
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let mut failure = Failure::new(e.kind(), e.to_string());
        let f = &mut failure.0;
        if let Some(ctx) = e.op_context() {
            f.rank = ctx.rank as i64;
            f.op = ctx.op.to_string();
            f.seq = ctx.seq as i64;
            f.label = ctx.label.clone();
        }
        if let Error::Poisoned { rank, .. } | Error::Startup { rank, .. } = &e {
            f.rank = *rank as i64;
        }
        failure
    }
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Failure {
        Failure::new(JNI, format!("JNI: {e}"))
    }
}

/// A bad argument found by the JNI layer (kind `config`, as the engine's own argument errors).
pub fn fail(msg: impl Into<String>) -> Failure {
    Error::config(msg).into()
}

/// A handle that was closed or never valid.
pub fn closed(msg: impl Into<String>) -> Failure {
    Failure::new(CLOSED, msg.into())
}

/// What an export knows about its call (the worker's rank, the collective and its label); it
/// completes failures that do not name them, panics included.
pub struct Scope {
    rank: Cell<i64>,
    op: Cell<&'static str>,
    label: RefCell<String>,
}

impl Scope {
    fn new() -> Scope {
        Scope {
            rank: Cell::new(-1),
            op: Cell::new(""),
            label: RefCell::new(String::new()),
        }
    }

    /// The call is on behalf of the worker with this rank.
    pub fn worker(&self, rank: usize) {
        self.rank.set(rank as i64);
    }

    /// The call runs collective `op` labelled `label`.
    pub fn op(&self, op: Op, label: &str) {
        self.named(op.name(), label);
    }

    /// The call runs the operation the engine names `op` (a collective's name, or `events` for
    /// the event calls), labelled `label`.
    pub fn named(&self, op: &'static str, label: &str) {
        self.op.set(op);
        *self.label.borrow_mut() = label.to_string();
    }

    fn complete(&self, mut failure: Failure) -> Failure {
        let f = &mut failure.0;
        if f.rank < 0 {
            f.rank = self.rank.get();
        }
        if f.op.is_empty() {
            f.op = self.op.get().to_string();
            if f.label.is_empty() {
                f.label = self.label.borrow().clone();
            }
        }
        failure
    }
}

/// Runs one export. `f` may fail or panic; either way Java gets a `harp.HarpException` (and
/// `T::default()`, which it never sees). A Java exception already pending (a callback threw)
/// is left to propagate as it is.
pub fn call<'l, T: Default>(
    env: &mut EnvUnowned<'l>,
    f: impl FnOnce(&mut Env<'l>, &Scope) -> Result<T, Failure>,
) -> T {
    install_panic_hook();
    let scope = Scope::new();
    env.with_env(|env| f(env, &scope))
        .resolve_with::<Policy, _>(|| &scope)
}

/// The one error policy of the library (see the module documentation).
pub struct Policy;

impl<T: Default> ErrorPolicy<T, Failure> for Policy {
    type Captures<'unowned_env_local: 'native_method, 'native_method> = &'native_method Scope;

    fn on_error<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        scope: &mut &'native_method Scope,
        err: Failure,
    ) -> jni::errors::Result<T> {
        throw(env, scope.complete(err));
        Ok(T::default())
    }

    fn on_panic<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        scope: &mut &'native_method Scope,
        payload: Box<dyn std::any::Any + Send + 'static>,
    ) -> jni::errors::Result<T> {
        let msg = panic_message(&*payload);
        let mut f = Failure::new(PANIC, format!("Rust panic: {msg}"));
        if let Some(p) = LAST_PANIC
            .try_with(|l| l.borrow_mut().take())
            .ok()
            .flatten()
        {
            // Only this panic's record: an older one may be left by a panic caught elsewhere.
            if p.msg == msg {
                f.0.msg = format!("Rust panic at {}: {msg}", p.location);
                f.0.backtrace = p.backtrace.to_string();
            }
        }
        throw(env, scope.complete(f));
        Ok(T::default())
    }
}

/// Throws `f` as a `harp.HarpException`, unless a Java exception is already pending. If the
/// exception cannot be built, whatever the JVM raised instead (or a RuntimeException with the
/// message) is what Java sees: never nothing.
fn throw(env: &mut Env<'_>, Failure(f): Failure) {
    if env.exception_check() {
        return;
    }
    let built = new_exception(env, &f).and_then(|e| {
        with_cause(env, &e, &f)?;
        env.throw(e)
    });
    if built.is_ok() || env.exception_check() {
        return;
    }
    let text = jni::strings::JNIString::from(format!("{}: {}", f.kind, f.msg));
    let _ = env.throw_new(jni_str!("java/lang/RuntimeException"), text);
}

fn new_exception<'l>(env: &mut Env<'l>, f: &Detail) -> jni::errors::Result<JThrowable<'l>> {
    let kind = env.new_string(f.kind)?;
    let op = env.new_string(&f.op)?;
    let label = env.new_string(&f.label)?;
    let msg = env.new_string(&f.msg)?;
    let backtrace = env.new_string(&f.backtrace)?;
    let obj = env.new_object(
        jni_str!("harp/HarpException"),
        jni_sig!("(Ljava/lang/String;ILjava/lang/String;JLjava/lang/String;Ljava/lang/String;Ljava/lang/String;)V"),
        &[
            JValue::from(&kind),
            JValue::Int(f.rank.clamp(-1, i32::MAX as i64) as i32),
            JValue::from(&op),
            JValue::Long(f.seq),
            JValue::from(&label),
            JValue::from(&msg),
            JValue::from(&backtrace),
        ],
    )?;
    env.cast_local::<JThrowable>(obj)
}

/// Makes the Java exception a combiner threw, if `f` reports one, the cause of `e` (unchanged:
/// the same object, with its own stack trace).
fn with_cause(env: &mut Env<'_>, e: &JThrowable<'_>, f: &Detail) -> jni::errors::Result<()> {
    if f.kind != "data" {
        return Ok(());
    }
    let Ok(rank) = usize::try_from(f.rank) else {
        return Ok(());
    };
    let Some(cause) = crate::kv_combiner::take_cause(rank, &f.msg) else {
        return Ok(());
    };
    env.call_method(
        e,
        jni_str!("initCause"),
        jni_sig!("(Ljava/lang/Throwable;)Ljava/lang/Throwable;"),
        &[JValue::Object(&cause)],
    )?;
    Ok(())
}

/// The last panic seen on a thread, recorded by the hook for [`Policy::on_panic`].
struct PanicRecord {
    msg: String,
    location: String,
    backtrace: Backtrace,
}

thread_local! {
    static LAST_PANIC: RefCell<Option<PanicRecord>> = const { RefCell::new(None) };
}

/// Installs (once per process) a panic hook that records each panic's backtrace on its own
/// thread, then runs the previous hook (which prints the panic to stderr as before).
fn install_panic_hook() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let record = PanicRecord {
                msg: panic_message(info.payload()),
                location: info
                    .location()
                    .map_or_else(|| "an unknown place".into(), ToString::to_string),
                backtrace: Backtrace::force_capture(),
            };
            // The thread may be tearing down its thread-locals: then there is nowhere to keep it.
            let _ = LAST_PANIC.try_with(|l| *l.borrow_mut() = Some(record));
            previous(info);
        }));
    });
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".into()
    }
}
