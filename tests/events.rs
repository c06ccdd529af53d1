//! Events and termination detection with real `harp` processes on loopback (`harp
//! events-check`): a random workload with sleeps in handlers, a late joiner and a slow hop
//! during the detection waves, checked after every phase (sent = handled = detected, nothing
//! afterwards); a worker that dies or hangs fails every worker within the timeout, naming it.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn harp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harp"))
        .args(args)
        .env("HARP_LOG", "warn")
        .output()
        .expect("harp runs")
}

#[test]
fn the_workload_terminates_exactly_on_1_to_4_workers() {
    for workers in 1..=4 {
        for seed in ["1", "77"] {
            let w = workers.to_string();
            let o = harp(&[
                "events-check",
                "--workers",
                &w,
                "--timeout",
                "20",
                "--phases",
                "5",
                "--hops",
                "9",
                "--delay-ms",
                "2",
                "--seed",
                seed,
            ]);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{workers} workers, seed {seed}: {}\n{out}",
                String::from_utf8_lossy(&o.stderr)
            );
            let phases: Vec<&str> = out
                .lines()
                .filter(|l| l.contains("events sent = handled = detected"))
                .collect();
            assert_eq!(phases.len(), 5, "{out}");
            // The workload really ran (more than the initial events on some phase).
            let most = phases
                .iter()
                .map(|l| l.split(' ').nth(2).unwrap().parse::<u64>().unwrap())
                .max()
                .unwrap();
            assert!(most > 3 * workers as u64, "{out}");
        }
    }
}

#[test]
fn a_worker_that_dies_fails_every_worker_naming_it() {
    let t0 = Instant::now();
    let o = harp(&[
        "events-check",
        "--workers",
        "3",
        "--timeout",
        "20",
        "--die-rank",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    for r in [0, 2] {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("harp: error: rank {r}:")))
            .unwrap_or_else(|| panic!("rank {r} reported nothing:\n{err}"));
        assert!(line.contains("rank 1 is gone: connection closed"), "{line}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_hung_handler_fails_every_worker_within_the_timeout_naming_it() {
    let t0 = Instant::now();
    let o = harp(&[
        "events-check",
        "--workers",
        "3",
        "--timeout",
        "2",
        "--hang-rank",
        "2",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    let line = err
        .lines()
        .find(|l| l.starts_with("harp: error: rank 0:"))
        .unwrap_or_else(|| panic!("rank 0 reported nothing:\n{err}"));
    assert!(
        line.contains("run_until_quiet': timed out after 2.0 s waiting for rank 2"),
        "{line}"
    );
    let line = err
        .lines()
        .find(|l| l.starts_with("harp: error: rank 1:"))
        .unwrap_or_else(|| panic!("rank 1 reported nothing:\n{err}"));
    assert!(line.contains("waiting for rank 2"), "{line}");
}
