//! `harp.Native`: starting a worker (listen, then start), the shared runtime and log
//! subscriber, the vocabularies shared with Java (names, never codes; listed in
//! [`crate::vocabulary`]) and the self-test of the error mapping.

use std::sync::{Arc, OnceLock};

use harp::error::OpContext;
use harp::wire::Op;
use harp::{Config, Error, Listener, Topology, Worker};
use jni::objects::{JByteArray, JClass, JString};
use jni::sys::{jint, jlong};
use jni::{Env, EnvUnowned};

use crate::convert::{jstr, new_jstring};
use crate::errors::{call, fail, Failure};
use crate::handles::{insert, listener_port, take_listener, Obj, WorkerEntry};
use crate::vocabulary::{canonical, names};

fn runtime() -> Result<&'static harp::worker::Runtime, Failure> {
    static RT: OnceLock<harp::worker::Runtime> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = harp::worker::runtime(2)?;
    Ok(RT.get_or_init(|| rt))
}

/// `harp.log.level`: a level, or a filter with directives (`harp=debug,warn`). A lone word
/// that is not a level would parse as a filter for a target of that name and silence every
/// log line; it is refused instead.
fn check_log_level(level: &str) -> Result<(), Failure> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let word = level.trim();
    let lone = !word.contains(['=', ',', '[', ':']);
    if (lone && !LEVELS.contains(&word.to_ascii_lowercase().as_str()))
        || tracing_subscriber::EnvFilter::try_new(word).is_err()
    {
        return Err(fail(format!(
            "harp.log.level: '{level}' is not a level ({}) or a filter such as harp=debug,warn",
            LEVELS.join(", ")
        )));
    }
    Ok(())
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
            // Container logs are files: no colour codes in them.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init();
    });
}

fn config(env: &Env<'_>, options: &JString<'_>) -> Result<Config, Failure> {
    let mut cfg = Config::default();
    cfg.apply(&jstr(env, options)?)?;
    Ok(cfg)
}

/// Binds a listening socket on `host` (port 0: an ephemeral port). Returns a listener handle.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_listen<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    host: JString<'l>,
    options: JString<'l>,
) -> jlong {
    call(&mut env, |env, _| {
        let host = jstr(env, &host)?;
        let cfg = config(env, &options)?;
        let addr = format!("{host}:0")
            .parse()
            .map_err(|e| fail(format!("bad listen address {host}: {e}")))?;
        let l = Listener::bind(runtime()?.handle(), addr, &cfg)?;
        Ok(insert(Obj::Listener(l)))
    })
}

/// The port a listener is bound to.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_listenerPort<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jint {
    call(&mut env, |_, _| Ok(jint::from(listener_port(h)?)))
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
    call(&mut env, |env, scope| {
        let hosts = jstr(env, &hosts)?;
        let job = jstr(env, &job)?;
        let log = jstr(env, &log)?;
        let cfg = config(env, &options)?;
        let secret = env.convert_byte_array(&secret)?;
        let (level, tag) = log.split_once('|').unwrap_or(("warn", log.as_str()));
        check_log_level(level)?;
        init_logging(level);
        let rank = usize::try_from(rank).map_err(|_| fail(format!("bad rank {rank}")))?;
        scope.worker(rank);
        let l = take_listener(listener)?;
        let topo = Topology::parse(&hosts, "<worker list>")?;
        let span = tracing::info_span!("harp", worker = %tag);
        let _g = span.enter();
        let rt = runtime()?.handle().clone();
        let w = Worker::start(rt, cfg, topo, rank, &job, &secret, l)?;
        // `harp.net.measure`: the network model at start, as `harp worker` does.
        w.calibrate_at_start()?;
        Ok(insert(Obj::Worker(Arc::new(WorkerEntry {
            worker: w,
            tag: tag.to_string(),
            abort: std::sync::Mutex::new(None),
        }))))
    })
}

/// The names of `vocabulary`, one per line.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_names<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    vocabulary: JString<'l>,
) -> JString<'l> {
    call(&mut env, |env, _| {
        let v = names(&jstr(env, &vocabulary)?)?;
        new_jstring(env, &v.join("\n"))
    })
}

/// `name` parsed by the engine's parser for `vocabulary` and printed back with its own name.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_canonicalName<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    vocabulary: JString<'l>,
    name: JString<'l>,
) -> JString<'l> {
    call(&mut env, |env, _| {
        let c = canonical(&jstr(env, &vocabulary)?, &jstr(env, &name)?)?;
        new_jstring(env, &c)
    })
}

/// Tests of the error mapping: 0 an engine error, 1 a panic with a formatted message, 2
/// succeeds (returns 2), 3 a communication error (rank 3, `allreduce #12 'sums'`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Native_selfTest<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    kind: jint,
) -> jint {
    call(&mut env, |_, _| match kind {
        0 => Err(Error::data(format!("engine error number {}", 42)).into()),
        1 => panic!("deliberate panic number {}", 7),
        3 => Err(Error::PeerLost {
            ctx: OpContext {
                rank: 3,
                op: Op::Allreduce.name(),
                seq: 12,
                label: "sums".into(),
                group: None,
            },
            peer: 1,
            reason: "self-test".into(),
        }
        .into()),
        _ => Ok(kind),
    })
}
