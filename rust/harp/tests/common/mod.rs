//! Running the workers of one job, one thread each: in process, or over TCP on loopback.
#![allow(dead_code)] // each test binary uses some of these

use std::net::SocketAddr;
use std::sync::{Mutex, Once};
use std::time::Duration;

use harp::worker::runtime;
use harp::{Config, Listener, Topology, Worker};

/// The job secret of [`tcp_job`].
pub const SECRET: &[u8] = b"tcp-job-test-secret-0123456789ab";

/// A configuration with `op_timeout` (the deadline of every wait inside a collective).
pub fn config(op_timeout: Duration) -> Config {
    Config {
        op_timeout,
        ..Config::default()
    }
}

/// Runs `f` on every worker of an in-process job of `p` workers, each on its own thread, and
/// returns the results in rank order. `f` owns its worker: it closes, aborts or drops it.
pub fn on_workers<T: Send>(p: usize, cfg: Config, f: impl Fn(Worker) -> T + Sync) -> Vec<T> {
    let workers = Worker::in_process(p, cfg).expect("in-process workers");
    let f = &f;
    std::thread::scope(|s| {
        let threads: Vec<_> = workers.into_iter().map(|w| s.spawn(move || f(w))).collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("worker thread panicked"))
            .collect()
    })
}

/// Runs `f` on each worker of a TCP job on loopback (one thread each; rank r uses `cfgs[r]`;
/// the listeners on a shared runtime of two I/O threads), returning its result in rank order. `route(r, addrs)` gives the addresses rank r dials (the
/// real ones, or a proxy's).
pub fn tcp_job<T: Send>(
    cfgs: &[Config],
    route: impl Fn(usize, &[SocketAddr]) -> Vec<SocketAddr>,
    f: impl Fn(harp::Result<Worker>) -> T + Sync,
) -> Vec<T> {
    let rt = runtime(2).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let listeners: Vec<Listener> = cfgs
        .iter()
        .map(|c| Listener::bind(rt.handle(), any, c).unwrap())
        .collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.addr).collect();
    let f = &f;
    let out = std::thread::scope(|s| {
        let threads: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let hosts = route(r, &addrs).iter().map(|a| a.to_string()).collect();
                let (cfg, handle) = (cfgs[r].clone(), rt.handle().clone());
                s.spawn(move || {
                    f(Worker::start(
                        handle,
                        cfg,
                        Topology::flat(hosts),
                        r,
                        "tcp-job",
                        SECRET,
                        l,
                    ))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("worker thread"))
            .collect()
    });
    drop(rt);
    out
}

/// A model of `p` workers whose pairs differ up to 50× in bandwidth (a pattern of slow pairs),
/// for runs in which the network-aware algorithms must be chosen.
pub fn uneven_model(p: usize) -> harp::NetModel {
    let pairs = |f: &dyn Fn(usize, usize) -> f64| -> Vec<f64> {
        (0..p * p)
            .map(|k| if k / p == k % p { 0.0 } else { f(k / p, k % p) })
            .collect()
    };
    let bandwidth = pairs(&|i, j| if (3 * i + j) % 4 == 1 { 2e6 } else { 1e8 });
    harp::NetModel::new(p, pairs(&|i, j| 1e-4 * (1 + (i + j) % 3) as f64), bandwidth).unwrap()
}

/// [`on_workers`] with `f` given each worker (holding [`uneven_model`] when `model`), which is
/// closed after a success and aborted with the error after a failure.
pub fn run_apps<T: Send>(
    p: usize,
    model: bool,
    f: impl Fn(&Worker) -> harp::Result<T> + Sync,
) -> Vec<harp::Result<T>> {
    on_workers(p, config(Duration::from_secs(30)), |w| {
        if model {
            w.set_net_model(Some(uneven_model(p))).unwrap();
        }
        let r = f(&w);
        match &r {
            Ok(_) => w.close(),
            Err(e) => w.abort(&e.to_string()),
        }
        r
    })
}

/// Every WARN event's message, from every thread of the test binary, once [`keep_warnings`]
/// has installed the subscriber that keeps them.
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct KeepWarnings;

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        if f.name() == "message" {
            self.0 = format!("{v:?}");
        }
    }
}

impl tracing::Subscriber for KeepWarnings {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        if *e.metadata().level() == tracing::Level::WARN {
            let mut m = Message(String::new());
            e.record(&mut m);
            WARNINGS.lock().unwrap().push(m.0);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Installs (once per test binary) the global subscriber that keeps WARN messages.
pub fn keep_warnings() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| tracing::subscriber::set_global_default(KeepWarnings).unwrap());
}

/// The warnings so far that contain `text`.
pub fn warnings_with(text: &str) -> Vec<String> {
    let w = WARNINGS.lock().unwrap();
    w.iter().filter(|m| m.contains(text)).cloned().collect()
}

/// Every worker failed; returns rank `r`'s error text.
pub fn all_failed<T>(v: Vec<harp::Result<T>>, r: usize) -> String {
    let texts: Vec<String> = v
        .into_iter()
        .map(|x| match x {
            Ok(_) => panic!("a worker succeeded"),
            Err(e) => e.to_string(),
        })
        .collect();
    texts[r].clone()
}

/// Checkpoints under `dir` every `every` iterations, resuming or not, and worker `fail.1`
/// failing after iteration `fail.0`.
pub fn recovery(
    dir: &std::path::Path,
    every: usize,
    resume: bool,
    fail: Option<(usize, usize)>,
) -> harp::checkpoint::Recovery {
    harp::checkpoint::Recovery {
        every,
        dir: Some(dir.to_string_lossy().into_owned()),
        resume,
        fail_after: fail.map(|(i, r)| (i, Some(r))),
        job: String::new(),
    }
}

/// The checkpoint directories under `dir` with a manifest, by iteration.
pub fn complete(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| dir.join(n).join("manifest.json").exists())
        .collect();
    v.sort();
    v
}

/// Runs `run` (a job of `p` workers given its recovery options) with checkpoints under `dir`
/// every `every` iterations and the last worker failing after iteration `fail`: every worker
/// fails, the last with the injected failure, and the complete checkpoints are then those of
/// iterations `saved`.
pub fn fails_after<T>(
    p: usize,
    dir: &std::path::Path,
    (every, fail): (usize, usize),
    saved: &[u64],
    run: impl FnOnce(harp::checkpoint::Recovery) -> Vec<harp::Result<T>>,
) {
    let e = all_failed(run(recovery(dir, every, false, Some((fail, p - 1)))), p - 1);
    let injected = format!("injected failure after iteration {fail}");
    assert!(e.contains(&injected), "{p} workers: {e}");
    let names: Vec<String> = saved
        .iter()
        .map(|&i| harp::checkpoint::dir_name(i))
        .collect();
    assert_eq!(complete(dir), names, "{p} workers");
}

/// A configuration with the recalibration on drift `on` or off, and a small measurement.
pub fn drift_config(on: bool) -> Config {
    Config {
        net_recalibrate: on,
        net_measure_bytes: 128 * 1024,
        net_measure_time: Duration::from_secs(10),
        ..config(Duration::from_secs(30))
    }
}

/// Runs `f` on 3 in-process workers that hold a model promising 10 TB/s (every measured time
/// drifts from it), with the recalibration on drift `on` ([`drift_config`]); returns each
/// worker's result and whether it still held that model at the end.
pub fn with_drifting_model<T: Send>(on: bool, f: impl Fn(&Worker) -> T + Sync) -> Vec<(T, bool)> {
    let promise = harp::NetModel::uniform(3, 1e-9, 1e13);
    on_workers(3, drift_config(on), |w| {
        w.set_net_model(Some(promise.clone())).unwrap();
        let out = f(&w);
        let kept = w.net_model().as_deref() == Some(&promise);
        w.close();
        (out, kept)
    })
}
