//! The I/O driver (`Config::io_driver`) over real sockets on loopback: with either driver a job
//! gives the sequential model's results, and a worker that computes between collectives for
//! longer than the silence limit is not reported silent (with `caller`, the background thread
//! drives its heartbeats while no operation runs), while a worker that is really stopped still
//! is (`tests/failures.rs` at the CLI level).

use harp::Collectives;
use std::time::{Duration, Instant};

use harp::check::{self, Faults, Spec};
use harp::config::IoDriver;
use harp::{Config, Worker};

mod common;
use common::tcp_job;

fn cfg(io_driver: IoDriver, op_timeout: Duration) -> Config {
    Config {
        io_driver,
        op_timeout,
        connect_timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

/// Every collective of `harp check` (two rounds), p = 4, gives the model's tables with either
/// driver, and with the two drivers mixed in one job.
#[test]
fn both_drivers_give_the_models_results() {
    use IoDriver::{Caller, Threads};
    for drivers in [
        [Caller; 4],
        [Threads; 4],
        [Caller, Threads, Caller, Threads],
    ] {
        let cfgs: Vec<Config> = drivers
            .iter()
            .map(|&d| cfg(d, Duration::from_secs(30)))
            .collect();
        let spec = Spec {
            rounds: 2,
            ..Spec::default()
        };
        let out = tcp_job(
            &cfgs,
            |_, a| a.to_vec(),
            |w| {
                let w = w.expect("start");
                let r = check::run(&w, &spec, &Faults::default(), &mut |_, _| Ok(()));
                w.close();
                r
            },
        );
        for (r, o) in out.into_iter().enumerate() {
            let report = o.unwrap_or_else(|e| panic!("{drivers:?}: rank {r}: {e}"));
            assert_eq!(
                report.verified,
                2 * check::CHECKS_PER_ROUND,
                "{drivers:?}: rank {r}"
            );
        }
    }
}

/// Rank 1 computes for twice the operation timeout between two barriers while ranks 0 and 2
/// wait in the second one: they time out after the operation timeout knowing rank 1 is alive
/// (its heartbeats kept coming while it computed), not after the silence limit (half the
/// timeout) calling it silent.
#[test]
fn a_worker_computing_between_collectives_is_alive_not_silent() {
    for driver in [IoDriver::Caller, IoDriver::Threads] {
        let timeout = Duration::from_millis(1000); // silence limit 500 ms
        let cfgs = vec![cfg(driver, timeout); 3];
        let out = tcp_job(
            &cfgs,
            |_, a| a.to_vec(),
            |w| -> (usize, Duration, harp::Result<()>) {
                let w: Worker = w.expect("start");
                w.barrier("before").expect("first barrier");
                let t0 = Instant::now();
                if w.rank() == 1 {
                    std::thread::sleep(2 * timeout);
                }
                let res = w.barrier("after");
                (w.rank(), t0.elapsed(), res)
            },
        );
        for (r, waited, res) in out.into_iter().filter(|o| o.0 != 1) {
            let e = res.expect_err("rank 1 never came").to_string();
            assert!(
                e.contains("timed out after 1.0 s waiting for rank 1 (it is alive"),
                "{driver:?}: rank {r}: {e}"
            );
            assert!(
                waited >= Duration::from_millis(950),
                "{driver:?}: rank {r} failed after {waited:?}: {e}"
            );
        }
    }
}
