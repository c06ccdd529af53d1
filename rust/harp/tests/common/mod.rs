//! Running the workers of one in-process job, one thread each.

use std::time::Duration;

use harp::{Config, Worker};

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
