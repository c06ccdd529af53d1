//! Non-blocking collectives across real processes over TCP on loopback: a peer killed
//! (SIGKILL) or stopped (SIGSTOP) while operations are in flight fails every pending handle of
//! the other workers within the timeout, each error naming it. The test runs this test binary
//! again as the workers (the environment variable `HARP_NB_WORKER` set to the rank).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use harp::worker::runtime;
use harp::{Array, Collectives, Config, DType, Listener, Opts, Table, Topology, Worker};

const TIMEOUT_SECS: u64 = 3;
const VICTIM: usize = 2;
const WORKERS: usize = 3;

/// One worker process: binds, prints its port, reads the host list, starts; the victim then
/// waits to be killed or stopped, the others start three operations and print each handle's
/// outcome as `OUTCOME <i> <seconds> <ok|error text>`.
fn worker(rank: usize) {
    let rt = runtime(1).unwrap();
    let cfg = Config {
        op_timeout: Duration::from_secs(TIMEOUT_SECS),
        ..Config::default()
    };
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let l = Listener::bind(rt.handle(), any, &cfg).unwrap();
    println!("PORT {}", l.addr.port());
    let mut hosts = String::new();
    std::io::stdin().read_line(&mut hosts).unwrap();
    let hosts = hosts.split_whitespace().map(String::from).collect();
    let w = Worker::start(
        rt.handle().clone(),
        cfg,
        Topology::flat(hosts),
        rank,
        "nonblocking-processes",
        b"nonblocking-processes-secret-0123",
        l,
    )
    .unwrap();
    println!("READY");
    if rank == VICTIM {
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    // Wait for the parent's go (the victim is dead or stopped by then).
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let table = || {
        let mut t = Table::default();
        t.add(0, Array::zeros(w.pool(), DType::F64, 1000)).unwrap();
        t
    };
    let t0 = Instant::now();
    let a = w.allreduce_start("a", table(), Opts::default()).unwrap();
    let b = w.rotate_start("b", table(), None).unwrap();
    let c = w.barrier_start("c").unwrap();
    let outcome = |i: usize, r: harp::Result<()>| {
        let secs = t0.elapsed().as_secs_f64();
        let text = r.err().map(|e| e.to_string()).unwrap_or("ok".into());
        println!("OUTCOME {i} {secs:.2} {text}");
    };
    outcome(0, a.wait().map(drop));
    outcome(1, b.wait().map(drop));
    outcome(2, c.wait());
    w.close();
}

/// The lines a child prints, read on a thread of their own.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next line with `prefix`, from it on, within `secs` (the test harness may print its own
/// words before it on the same line).
fn expect(rx: &mpsc::Receiver<String>, prefix: &str, secs: u64) -> String {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(prefix) => return l[l.find(prefix).unwrap()..].to_string(),
            Ok(_) => continue,
            Err(e) => panic!("no line {prefix:?} within {secs} s: {e}"),
        }
    }
}

/// Starts the workers, kills or stops the victim with `signal`, and checks the others.
fn run(test: &str, signal: &str) {
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<Child> = (0..WORKERS)
        .map(|r| {
            Command::new(&exe)
                .args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env("HARP_NB_WORKER", r.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = children.iter_mut().map(lines).collect();
    let ports: Vec<String> = outs
        .iter()
        .map(|o| expect(o, "PORT ", 60)[5..].to_string())
        .collect();
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    for c in &mut children {
        writeln!(c.stdin.as_mut().unwrap(), "{}", hosts.join(" ")).unwrap();
    }
    for o in &outs {
        expect(o, "READY", 30);
    }
    let pid = children[VICTIM].id().to_string();
    let st = Command::new("kill").args([signal, &pid]).status().unwrap();
    assert!(st.success(), "kill {signal} {pid}");
    let t0 = Instant::now();
    for (r, c) in children.iter_mut().enumerate() {
        if r != VICTIM {
            writeln!(c.stdin.as_mut().unwrap(), "go").unwrap();
        }
    }
    // A killed peer is seen at once, a stopped one after half the timeout plus a heartbeat
    // interval; both well within the timeout and a margin for a loaded machine.
    let limit = TIMEOUT_SECS + 5;
    for (r, o) in outs.iter().enumerate() {
        if r == VICTIM {
            continue;
        }
        for i in 0..3 {
            let line = expect(o, "OUTCOME ", limit);
            let mut f = line.splitn(4, ' ');
            let (_, n, _secs, text) = (f.next(), f.next(), f.next(), f.next().unwrap());
            assert_eq!(n, Some(i.to_string().as_str()), "rank {r}: {line}");
            assert!(text.contains("rank 2"), "rank {r}, handle {i}: {text}");
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(limit),
        "{:?}",
        t0.elapsed()
    );
    for (r, c) in children.iter_mut().enumerate() {
        if r == VICTIM {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
        let st = c.wait().unwrap();
        if r != VICTIM {
            assert!(st.success(), "rank {r} exited with {st}");
        }
    }
}

/// Runs `test` as a worker when this process is one (returns true), else false.
fn as_worker() -> bool {
    match std::env::var("HARP_NB_WORKER") {
        Ok(r) => {
            worker(r.parse().unwrap());
            true
        }
        Err(_) => false,
    }
}

#[test]
fn a_killed_peer_fails_every_pending_handle_across_processes() {
    if !as_worker() {
        run(
            "a_killed_peer_fails_every_pending_handle_across_processes",
            "-KILL",
        );
    }
}

#[test]
fn a_stopped_peer_fails_every_pending_handle_across_processes() {
    if !as_worker() {
        run(
            "a_stopped_peer_fails_every_pending_handle_across_processes",
            "-STOP",
        );
    }
}
