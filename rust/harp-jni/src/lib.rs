//! The only native library the Java side loads: a thin shell over the `harp` engine.
//!
//! Every export goes through [`call`]: engine errors and Rust panics become a Java
//! `harp.HarpException` carrying the message, the worker's rank and the operation (the panic
//! message is kept); nothing unwinds into the JVM. Native objects are handles (`long`) into a
//! process-wide registry: ids are never reused, so a closed or stale handle is an exception,
//! never a crash. One tokio runtime serves every worker of the process; each worker has its own
//! pool, connections and sequence numbers (several mappers of one JVM are independent).
//!
//! The contract of each method is documented in `docs/jni-contract.md`.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use harp::collective::{
    AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, ReduceAlgorithm,
};
use harp::{
    Array, Combiner, Config, DType, Error, Listener, Partitioner, Pool, Table, Topology, Worker,
};
use jni::errors::ThrowRuntimeExAndDefault;
use jni::objects::{JByteArray, JByteBuffer, JClass, JIntArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::{Env, EnvUnowned};

mod kmeans;

/// An error on its way to Java: message, rank (-1 when unknown) and operation ("" when none).
struct Failure {
    msg: String,
    rank: i64,
    op: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let (rank, op) = match &e {
            Error::Timeout { ctx, .. }
            | Error::Silent { ctx, .. }
            | Error::PeerLost { ctx, .. }
            | Error::OpMismatch { ctx, .. } => (ctx.rank as i64, ctx.op.to_string()),
            Error::Poisoned { rank, .. } | Error::Startup { rank, .. } => {
                (*rank as i64, String::new())
            }
            _ => (-1, String::new()),
        };
        Failure {
            msg: e.to_string(),
            rank,
            op,
        }
    }
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Failure {
        Failure {
            msg: format!("JNI: {e}"),
            rank: -1,
            op: String::new(),
        }
    }
}

fn fail(msg: impl Into<String>) -> Failure {
    Failure {
        msg: msg.into(),
        rank: -1,
        op: String::new(),
    }
}

/// The error type handed to jni's own policy (only JNI-internal failures reach it).
#[derive(Debug)]
struct JniOnly(jni::errors::Error);
impl std::fmt::Display for JniOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl std::error::Error for JniOnly {}
impl From<jni::errors::Error> for JniOnly {
    fn from(e: jni::errors::Error) -> Self {
        JniOnly(e)
    }
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

/// Runs one export: `f` may fail or panic; both become a `harp.HarpException`
/// (message encoded as `rank \t operation \t text`, decoded by its Java constructor).
fn call<'l, T: Default>(
    env: &mut EnvUnowned<'l>,
    f: impl FnOnce(&mut Env<'l>) -> Result<T, Failure>,
) -> T {
    env.with_env(|env| -> Result<T, JniOnly> {
        let res = match catch_unwind(AssertUnwindSafe(|| f(env))) {
            Ok(r) => r,
            Err(p) => Err(fail(format!("Rust panic: {}", panic_message(&*p)))),
        };
        match res {
            Ok(v) => Ok(v),
            Err(e) => {
                if !env.exception_check() {
                    env.throw_new(
                        jni::jni_str!("harp/HarpException"),
                        jni::strings::JNIString::from(format!("{}\t{}\t{}", e.rank, e.op, e.msg)),
                    )?;
                }
                Ok(T::default())
            }
        }
    })
    .resolve::<ThrowRuntimeExAndDefault>()
}

// ---- handles -------------------------------------------------------------------------------

struct TableEntry {
    pool: Pool,
    table: Mutex<Table>,
}

struct WorkerEntry {
    worker: Worker,
    tag: String,
}

enum Obj {
    Listener(Mutex<Option<Listener>>),
    Worker(Arc<WorkerEntry>),
    Table(Arc<TableEntry>),
}

fn registry() -> &'static Mutex<HashMap<i64, Obj>> {
    static R: OnceLock<Mutex<HashMap<i64, Obj>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

fn insert(o: Obj) -> i64 {
    static NEXT: AtomicI64 = AtomicI64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, o);
    id
}

fn stale(kind: &str, h: i64) -> Failure {
    fail(format!("{kind} handle {h} is closed or was never valid"))
}

fn worker(h: i64) -> Result<Arc<WorkerEntry>, Failure> {
    match registry().lock().unwrap_or_else(|e| e.into_inner()).get(&h) {
        Some(Obj::Worker(w)) => Ok(w.clone()),
        _ => Err(stale("worker", h)),
    }
}

fn table(h: i64) -> Result<Arc<TableEntry>, Failure> {
    match registry().lock().unwrap_or_else(|e| e.into_inner()).get(&h) {
        Some(Obj::Table(t)) => Ok(t.clone()),
        _ => Err(stale("table", h)),
    }
}

fn runtime() -> Result<&'static harp::worker::Runtime, Failure> {
    static RT: OnceLock<harp::worker::Runtime> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = harp::worker::runtime(2)?;
    Ok(RT.get_or_init(|| rt))
}

fn init_logging(level: &str) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let filter =
            tracing_subscriber::EnvFilter::try_new(level).unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_target(false)
            .try_init();
    });
}

fn jstr(env: &Env<'_>, s: &JString<'_>) -> Result<String, Failure> {
    Ok(s.try_to_string(env)?)
}

fn ints(env: &Env<'_>, a: &JIntArray<'_>) -> Result<Option<Vec<i32>>, Failure> {
    if a.is_null() {
        return Ok(None);
    }
    let n = a.len(env)?;
    let mut v = vec![0i32; n];
    a.get_region(env, 0, &mut v)?;
    Ok(Some(v))
}

fn dtype(code: jint) -> Result<DType, Failure> {
    DType::from_u8(u8::try_from(code).map_err(|_| fail(format!("bad element type {code}")))?)
        .map_err(Failure::from)
}

// ---- exports -------------------------------------------------------------------------------

/// Binds a listening socket on `host` (port 0: an ephemeral port). Returns a listener handle.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_listen<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    host: JString<'l>,
    options: JString<'l>,
) -> jlong {
    call(&mut env, |env| {
        let host = jstr(env, &host)?;
        let mut cfg = Config::default();
        cfg.apply(&jstr(env, &options)?)?;
        let addr = format!("{host}:0")
            .parse()
            .map_err(|e| fail(format!("bad listen address {host}: {e}")))?;
        let l = Listener::bind(runtime()?.handle(), addr, &cfg)?;
        Ok(insert(Obj::Listener(Mutex::new(Some(l)))))
    })
}

/// The port a listener is bound to.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_listenerPort<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jint {
    call(&mut env, |_| {
        match registry().lock().unwrap_or_else(|e| e.into_inner()).get(&h) {
            Some(Obj::Listener(l)) => l
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|l| l.addr.port() as jint)
                .ok_or_else(|| stale("listener", h)),
            _ => Err(stale("listener", h)),
        }
    })
}

/// Connects rank `rank` of the cluster in `hosts` (hosts-file text) using the listener (which is
/// consumed), authenticates with `secret`, runs the handshake. Returns a worker handle.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Native_start<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    listener: jlong,
    hosts: JString<'l>,
    rank: jint,
    job: JString<'l>,
    secret: JByteArray<'l>,
    options: JString<'l>,
    log: JString<'l>,
) -> jlong {
    call(&mut env, |env| {
        let hosts = jstr(env, &hosts)?;
        let job = jstr(env, &job)?;
        let log = jstr(env, &log)?;
        let mut cfg = Config::default();
        cfg.apply(&jstr(env, &options)?)?;
        let secret = env.convert_byte_array(&secret)?;
        let (level, tag) = log.split_once('|').unwrap_or(("warn", log.as_str()));
        init_logging(level);
        let l = match registry()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&listener)
        {
            Some(Obj::Listener(l)) => l
                .into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .ok_or_else(|| stale("listener", listener))?,
            _ => return Err(stale("listener", listener)),
        };
        let topo = Topology::parse(&hosts, "<worker list>")?;
        let rank = usize::try_from(rank).map_err(|_| fail(format!("bad rank {rank}")))?;
        let span = tracing::info_span!("harp", worker = %tag);
        let _g = span.enter();
        let w = Worker::start(
            runtime()?.handle().clone(),
            cfg,
            topo,
            rank,
            &job,
            &secret,
            l,
        )?;
        Ok(insert(Obj::Worker(Arc::new(WorkerEntry {
            worker: w,
            tag: tag.to_string(),
        }))))
    })
}

/// Orderly shutdown of a worker (tells the peers it is leaving). Closing twice is an error.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_close<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) {
    call(&mut env, |_| {
        let obj = registry()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&h);
        match obj {
            Some(Obj::Worker(w)) => match Arc::try_unwrap(w) {
                Ok(entry) => {
                    entry.worker.close();
                    Ok(())
                }
                Err(w) => {
                    // A collective is still running on another thread: keep it usable.
                    registry()
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(h, Obj::Worker(w));
                    Err(fail("worker is still in a collective on another thread"))
                }
            },
            Some(Obj::Table(_)) | Some(Obj::Listener(_)) => Ok(()),
            None => Err(stale("native", h)),
        }
    })
}

/// Failure shutdown of a worker: every peer's pending and later collectives fail quoting
/// `reason` (the user code's exception, say).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_abort<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
    reason: JString<'l>,
) {
    call(&mut env, |env| {
        let reason = jstr(env, &reason)?;
        let obj = registry()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&h);
        match obj {
            Some(Obj::Worker(w)) => {
                // Still in use on another thread: dropping our reference is all we can do.
                if let Ok(entry) = Arc::try_unwrap(w) {
                    entry.worker.abort(&reason);
                }
                Ok(())
            }
            _ => Err(stale("worker", h)),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_rank<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jint {
    call(&mut env, |_| Ok(worker(h)?.worker.rank() as jint))
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_size<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jint {
    call(&mut env, |_| Ok(worker(h)?.worker.size() as jint))
}

/// Pool counters of a worker: allocations, reuses, bytes held, bytes in use.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_poolStats<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jlong {
    call(&mut env, |_| {
        Ok(worker(h)?.worker.pool().stats().allocations as jlong)
    })
}

/// A new empty table whose buffers come from the worker's pool. Combiner: 0 sum, 1 min, 2 max,
/// 3 keep-first, 4 reject.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_tableNew<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    combiner: jint,
) -> jlong {
    call(&mut env, |_| {
        let pool = worker(w)?.worker.pool().clone();
        let c = match combiner {
            0 => Combiner::Sum,
            1 => Combiner::Min,
            2 => Combiner::Max,
            3 => Combiner::KeepFirst,
            4 => Combiner::Reject,
            _ => return Err(fail(format!("unknown combiner {combiner}"))),
        };
        Ok(insert(Obj::Table(Arc::new(TableEntry {
            pool,
            table: Mutex::new(Table::new(c)),
        }))))
    })
}

fn view<'l>(env: &mut Env<'l>, a: &mut Array) -> Result<JByteBuffer<'l>, Failure> {
    let len = a.bytes().len();
    // Never null, even for an empty partition (pool buffers give an aligned dangling pointer).
    let ptr = a.bytes_mut().as_mut_ptr();
    // SAFETY: the buffer lives as long as the partition stays in its table; the Java side
    // invalidates its views (generation check) whenever the table changes.
    Ok(unsafe { env.new_direct_byte_buffer(ptr, len) }?)
}

/// Creates (or replaces) partition `pid` with `length` zeroed elements of `dtype` and returns a
/// direct buffer over its bytes (native byte order).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_tableCreate<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    pid: jint,
    dt: jint,
    length: jint,
) -> JByteBuffer<'l> {
    call(&mut env, |env| {
        let e = table(t)?;
        let pid = u32::try_from(pid)
            .map_err(|_| fail(format!("partition ids must be >= 0, got {pid}")))?;
        let n = usize::try_from(length).map_err(|_| fail(format!("bad length {length}")))?;
        let mut tb = e.table.lock().unwrap_or_else(|e| e.into_inner());
        tb.put(pid, Array::zeros(&e.pool, dtype(dt)?, n));
        let a = tb.get_mut(pid).expect("just inserted");
        view(env, a)
    })
}

/// A direct buffer over partition `pid`, or null when the table has no such partition.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_tableGet<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    pid: jint,
) -> JByteBuffer<'l> {
    call(&mut env, |env| {
        let e = table(t)?;
        let mut tb = e.table.lock().unwrap_or_else(|e| e.into_inner());
        match u32::try_from(pid).ok().and_then(|p| tb.get_mut(p)) {
            Some(a) => view(env, a),
            None => Ok(JByteBuffer::default()),
        }
    })
}

/// Element type code of partition `pid`, or -1 when absent.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_tableType<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    pid: jint,
) -> jint {
    call(&mut env, |_| {
        let e = table(t)?;
        let tb = e.table.lock().unwrap_or_else(|e| e.into_inner());
        Ok(u32::try_from(pid)
            .ok()
            .and_then(|p| tb.get(p))
            .map_or(-1, |a| a.dtype() as jint))
    })
}

/// Partition ids in ascending order.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_tableIds<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
) -> JIntArray<'l> {
    call(&mut env, |env| {
        let ids: Vec<i32> = table(t)?
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ids()
            .into_iter()
            .map(|i| i as i32)
            .collect();
        let arr = env.new_int_array(ids.len())?;
        arr.set_region(env, 0, &ids)?;
        Ok(arr)
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_tableRemove<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    pid: jint,
) -> jboolean {
    call(&mut env, |_| {
        let e = table(t)?;
        let removed = u32::try_from(pid)
            .ok()
            .and_then(|p| e.table.lock().unwrap_or_else(|e| e.into_inner()).remove(p))
            .is_some();
        Ok(removed)
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_tableClear<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
) {
    call(&mut env, |_| {
        table(t)?
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    })
}

/// Frees a table (its buffers go back to the pool). Closing twice is an error.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_tableFree<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
) {
    call(&mut env, |_| {
        match registry()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&t)
        {
            Some(Obj::Table(_)) => Ok(()),
            Some(other) => {
                registry()
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(t, other);
                Err(stale("table", t))
            }
            None => Err(stale("table", t)),
        }
    })
}

/// Operation codes of [`Java_harp_Native_collective`] (the same as `harp.Native.OP_*`).
mod op {
    pub const BARRIER: i32 = 1;
    pub const BROADCAST: i32 = 2;
    pub const REDUCE: i32 = 3;
    pub const GATHER: i32 = 4;
    pub const SCATTER: i32 = 5;
    pub const ALLGATHER: i32 = 6;
    pub const ALLREDUCE: i32 = 7;
    pub const REDUCE_SCATTER: i32 = 8;
    pub const REGROUP: i32 = 9;
    pub const PUSH: i32 = 10;
    pub const PULL: i32 = 11;
    pub const ROTATE: i32 = 12;
}

fn partitioner(ids: Option<Vec<i32>>, owners: Option<Vec<i32>>) -> Result<Partitioner, Failure> {
    match (ids, owners) {
        (Some(i), Some(o)) if i.len() == o.len() => Ok(Partitioner::Map(Arc::new(
            // A negative owner becomes an out-of-range one, which the engine reports.
            i.into_iter()
                .zip(o)
                .map(|(a, b)| (a as u32, usize::try_from(b).unwrap_or(usize::MAX)))
                .collect(),
        ))),
        (None, None) => Ok(Partitioner::Modulo),
        _ => Err(fail(
            "partition map: ids and owners must have the same length",
        )),
    }
}

/// Runs collective `op` on worker `w` with table `t` (and `t2` for push/pull: `t` local, `t2`
/// global). `algo` selects the algorithm (0 default); `total` is the known partition count for
/// allgather (0 unknown); `ids`/`owners` give an explicit partition → worker map (null: modulo;
/// for regroup, `algo` 1 asks the master to decide); for rotate, `owners` is the permutation.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Native_collective<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    op: jint,
    label: JString<'l>,
    t: jlong,
    t2: jlong,
    root: jint,
    algo: jint,
    total: jint,
    ids: JIntArray<'l>,
    owners: JIntArray<'l>,
) {
    call(&mut env, |env| {
        let label = jstr(env, &label)?;
        let ids = ints(env, &ids)?;
        let owners = ints(env, &owners)?;
        let we = worker(w)?;
        let span = tracing::info_span!("harp", worker = %we.tag);
        let _g = span.enter();
        let wk = &we.worker;
        let root = usize::try_from(root).map_err(|_| fail(format!("bad root {root}")))?;
        if op == op::BARRIER {
            return Ok(wk.barrier(&label)?);
        }
        let te = table(t)?;
        let mut tb = te.table.lock().unwrap_or_else(|e| e.into_inner());
        match op {
            op::BROADCAST => {
                let a = match algo {
                    0 => BroadcastAlgorithm::Auto,
                    1 => BroadcastAlgorithm::Chain,
                    2 => BroadcastAlgorithm::Binomial,
                    3 => BroadcastAlgorithm::OneByOne,
                    _ => return Err(fail(format!("unknown broadcast algorithm {algo}"))),
                };
                wk.broadcast(&label, &mut tb, root, a)?
            }
            op::REDUCE => {
                let a = if algo == 2 {
                    ReduceAlgorithm::ScatterGather
                } else {
                    ReduceAlgorithm::Binomial
                };
                wk.reduce(&label, &mut tb, root, a)?
            }
            op::GATHER => wk.gather(&label, &mut tb, root)?,
            op::SCATTER => wk.scatter(&label, &mut tb, root, &partitioner(ids, owners)?)?,
            op::ALLGATHER => {
                let a = if total > 0 {
                    AllgatherAlgorithm::KnownTotal(total as usize)
                } else {
                    AllgatherAlgorithm::Ring
                };
                wk.allgather(&label, &mut tb, a)?
            }
            op::ALLREDUCE => {
                let a = match algo {
                    0 => AllreduceAlgorithm::Auto,
                    1 => AllreduceAlgorithm::BidirectionalExchange,
                    2 => AllreduceAlgorithm::RegroupAllgather,
                    _ => return Err(fail(format!("unknown allreduce algorithm {algo}"))),
                };
                wk.allreduce(&label, &mut tb, a)?
            }
            op::REDUCE_SCATTER => wk.reduce_scatter(&label, &mut tb, &partitioner(ids, owners)?)?,
            op::REGROUP if algo == 1 => wk.regroup(&label, &mut tb, None)?,
            op::REGROUP => wk.regroup(&label, &mut tb, Some(&partitioner(ids, owners)?))?,
            op::PUSH | op::PULL => {
                if t == t2 {
                    return Err(fail("push/pull need two different tables"));
                }
                let ge = table(t2)?;
                let mut gt = ge.table.lock().unwrap_or_else(|e| e.into_inner());
                let p = partitioner(ids, owners)?;
                if op == op::PUSH {
                    wk.push(&label, &tb, &mut gt, &p)?
                } else {
                    wk.pull(&label, &mut tb, &gt, &p)?
                }
            }
            op::ROTATE => {
                let map: Option<Vec<usize>> = owners.map(|o| {
                    o.into_iter()
                        .map(|x| usize::try_from(x).unwrap_or(usize::MAX))
                        .collect()
                });
                wk.rotate(&label, &mut tb, map.as_deref())?
            }
            _ => return Err(fail(format!("unknown collective {op}"))),
        }
        Ok(())
    })
}

/// For the tests of the error mapping: kind 0 returns an engine error, 1 panics with a
/// formatted message, 2 succeeds.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_selfTest<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    kind: jint,
) -> jint {
    call(&mut env, |_| match kind {
        0 => Err(Failure::from(Error::data(format!(
            "engine error number {}",
            42
        )))),
        1 => panic!("deliberate panic number {}", 7),
        _ => Ok(kind),
    })
}
