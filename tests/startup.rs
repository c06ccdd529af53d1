//! Start-up at scale and under a connection flood, with real worker processes on loopback:
//! hundreds of workers dial rank 0 at once (more than the accept loop's 64 pending
//! connections), and a stranger opens and abandons connections to a worker's port in a loop
//! while a small job starts.

mod common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{harp, ok, s, tmpdir};

/// `harp bench OP --workers P --bytes 1k --reps 2 --json --timeout 60`, which must succeed.
fn bench_json(op: &str, p: usize) -> serde_json::Value {
    let p = p.to_string();
    let out = ok(harp(&[
        "bench",
        op,
        "--workers",
        &p,
        "--bytes",
        "1k",
        "--reps",
        "2",
        "--json",
        "--timeout",
        "60",
    ]));
    serde_json::from_str(out.trim()).expect("one JSON object")
}

/// 200 local worker processes: a barrier and a 1 KiB allreduce. Every worker dials rank 0 at
/// start, so rank 0 takes 199 connections at once, three times the pending cap.
#[test]
fn two_hundred_workers_start_and_run_a_barrier_and_an_allreduce() {
    for op in ["barrier", "allreduce"] {
        let t0 = Instant::now();
        let j = bench_json(op, 200);
        assert_eq!(j["op"], op, "{j}");
        assert_eq!(j["workers"], 200, "{j}");
        eprintln!(
            "{op} on 200 workers: {:.1} s in all",
            t0.elapsed().as_secs_f64()
        );
    }
}

/// Connections open on first use: in a ring job (a rotate, with the dissemination barrier
/// before each repetition) a worker other than rank 0 holds its connection to rank 0 and
/// those to its ring and barrier partners, 2 log2 p + 1 at most, not p - 1.
#[test]
fn a_ring_job_opens_connections_only_to_the_peers_it_talks_to() {
    let p = 32;
    let j = bench_json("rotate", p);
    assert_eq!(j["workers"], p, "{j}");
    // Every worker connects to rank 0 at start-up.
    assert_eq!(j["connections_rank0"], (p - 1) as f64, "{j}");
    let others = j["connections_max_others"].as_f64().expect("a count");
    let mean = j["connections_mean"].as_f64().expect("a count");
    // Rank 0, and rank ± 2^k for k < 5 (the ring's neighbours are the first of them).
    assert!(
        (3.0..=11.0).contains(&others),
        "a worker other than rank 0 holds {others} connections: {j}"
    );
    assert!(mean < 12.0, "{j}");
}

/// A stranger connects to rank 0's port as fast as it can, leaving each connection idle or
/// closing it at once, while a 4-worker job starts on a hosts file: the job starts and runs.
#[test]
fn a_connection_flood_does_not_keep_a_small_job_from_starting() {
    let dir = tmpdir("flood");
    let ports: Vec<u16> = {
        let ls: Vec<TcpListener> = (0..4)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
    };
    let hosts = dir.join("hosts");
    let mut f = std::fs::File::create(&hosts).unwrap();
    for p in &ports {
        writeln!(f, "127.0.0.1:{p}").unwrap();
    }
    drop(f);
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, made, port) = (stop.clone(), made.clone(), ports[0]);
        std::thread::spawn(move || {
            // Idle connections kept open (up to 1000 at a time), and as many closed at once.
            let mut idle = std::collections::VecDeque::new();
            let until = Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                if let Ok(c) = TcpStream::connect(("127.0.0.1", port)) {
                    made.fetch_add(1, Ordering::Relaxed);
                    idle.push_back(c);
                    if idle.len() > 1000 {
                        idle.pop_front();
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if let Ok(c) = TcpStream::connect(("127.0.0.1", port)) {
                    made.fetch_add(1, Ordering::Relaxed);
                    drop(c);
                }
            }
        })
    };
    let hosts = s(&hosts);
    let spawn = |r: usize| {
        Command::new(env!("CARGO_BIN_EXE_harp"))
            .args(["worker", "--hosts", &hosts, "--rank", &r.to_string()])
            .args(["--job", "flood", "bench", "allreduce", "--bytes", "1k"])
            .args(["--reps", "3", "--timeout", "60"])
            .env("HARP_SECRET", "flood-test-secret-0123456789")
            .env("HARP_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Rank 0 first (it listens from its start); the others dial once the flood is on it.
    let mut kids = vec![spawn(0)];
    let until = Instant::now() + Duration::from_secs(30);
    while made.load(Ordering::Relaxed) < 300 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = made.load(Ordering::Relaxed);
    kids.extend((1..4).map(spawn));
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    let n = made.load(Ordering::Relaxed);
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert!(
        before >= 300,
        "the flood made only {before} connections before the peers dialed"
    );
    eprintln!("the job started and ran beside {n} stranger connections");
}
