//! Events and termination detection with real `harp` processes on loopback (`harp
//! events-check`): a random workload with sleeps in handlers, a late joiner and a slow hop
//! during the detection waves, checked after every phase (sent = handled = detected, nothing
//! afterwards); a worker that dies or hangs fails every worker within the timeout, naming it.

mod common;

use common::harp;

use std::time::{Duration, Instant};

/// The final error line of rank `r` in the launcher's stderr.
fn error_line(err: &str, r: usize) -> &str {
    err.lines()
        .find(|l| l.starts_with(&format!("harp: error: rank {r}:")))
        .unwrap_or_else(|| panic!("rank {r} reported nothing:\n{err}"))
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

/// Runs `harp events-check` on 3 workers with `--timeout timeout` and `fault`, which must fail
/// within `within`, without a panic; returns the launcher's stderr.
fn failing(timeout: &str, fault: &[&str], within: Duration) -> String {
    let t0 = Instant::now();
    let mut args = vec!["events-check", "--workers", "3", "--timeout", timeout];
    args.extend_from_slice(fault);
    let o = harp(&args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{err}");
    assert!(t0.elapsed() < within, "{:?}", t0.elapsed());
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn a_worker_that_dies_fails_every_worker_naming_it() {
    let err = failing("20", &["--die-rank", "1"], Duration::from_secs(15));
    for r in [0, 2] {
        let line = error_line(&err, r);
        assert!(line.contains("rank 1 is gone: connection"), "{line}");
    }
}

#[test]
fn a_hung_handler_fails_every_worker_within_the_timeout_naming_it() {
    let err = failing("2", &["--hang-rank", "2"], Duration::from_secs(20));
    let line = error_line(&err, 0);
    assert!(
        line.contains("run_until_quiet': timed out after 2.0 s waiting for rank 2"),
        "{line}"
    );
    let line = error_line(&err, 1);
    assert!(line.contains("waiting for rank 2"), "{line}");
}

/// Flow control with real processes: two fast senders and a slow receiver with a 256 KiB
/// window; an allreduce and a barrier pass while the event lane is full; at most one window of
/// event bytes is ever queued from one sender, and every event arrives in order.
#[test]
fn flow_control_bounds_the_receivers_queue_and_lets_collectives_pass() {
    let o = harp(&[
        "events-check",
        "--workers",
        "3",
        "--timeout",
        "20",
        "--flood",
        "8388608",
        "--event-window",
        "262144",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{}\n{out}",
        String::from_utf8_lossy(&o.stderr)
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("flood: 8388608 bytes of events from each of 2 senders"))
        .unwrap_or_else(|| panic!("{out}"));
    let peak: u64 = line
        .split("at most ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(peak > 0 && peak <= 262_144, "{line}");
}

/// A receiver that dies while its senders wait for credit fails them at once, naming it; one
/// that is alive but takes nothing fails them after the timeout, naming it.
#[test]
fn senders_blocked_on_credit_fail_naming_a_dead_or_stuck_receiver() {
    let flood = [
        "--flood",
        "8388608",
        "--event-window",
        "262144",
        "--die-rank",
        "0",
    ];
    let err = failing("20", &flood, Duration::from_secs(15));
    for r in [1, 2] {
        let line = error_line(&err, r);
        assert!(line.contains("'send_event': rank 0 is gone"), "{line}");
    }
    let mut flood = flood;
    flood[4] = "--hang-rank";
    let err = failing("2", &flood, Duration::from_secs(20));
    for r in [1, 2] {
        let line = error_line(&err, r);
        assert!(
            line.contains("'send_event': rank 0 has not taken the events this worker sent it for 2.0 s (the 262144-byte event window to it is full)"),
            "{line}"
        );
    }
}
