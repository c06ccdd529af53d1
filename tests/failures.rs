//! Failure paths with real processes: a worker whose job fails outside the collectives tells
//! its peers why, a root that fails before the automatic broadcast is named at once, a send
//! blocked on a stopped peer reports it silent, workers computing outside the collectives
//! notice a killed or stopped peer within the timeout, and killing the launcher kills its
//! workers.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn harp() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harp"));
    c.env("HARP_LOG", "warn");
    c
}

fn run(args: &[&str]) -> Output {
    harp().args(args).output().expect("harp runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The final error line of rank `r` in the launcher's stderr.
fn error_line(err: &str, r: usize) -> &str {
    err.lines()
        .find(|l| l.starts_with(&format!("harp: error: rank {r}:")))
        .unwrap_or_else(|| panic!("rank {r} reported nothing:\n{err}"))
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harp-fail-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// 30 points of dimension 2, one per line.
fn points(dir: &Path, last: &str) -> PathBuf {
    let pts = dir.join("pts.txt");
    let mut text: String = (0..29).map(|i| format!("{i} {}\n", i % 5)).collect();
    text.push_str(last);
    std::fs::write(&pts, text).unwrap();
    pts
}

/// The root cannot read its --init file. The local launcher sees it before starting any
/// worker and says so in one line; workers started from a hosts file (and in Java) all fail
/// at once with the cause, agreed before the broadcast of the centroids (without the agreement
/// the others learned it from rank 0's abort in the CLI and waited for the timeout in Java).
#[test]
fn a_missing_init_file_fails_every_worker_at_once_naming_rank_0() {
    let dir = tmpdir("init");
    let pts = points(&dir, "1 1\n");
    let missing = dir.join("no-such-init.txt");
    let (pts, missing, out) = (s(&pts), s(&missing), s(&dir.join("out")));
    let job = [
        "kmeans",
        "--input",
        &pts,
        "--init",
        &missing,
        "--output",
        &out,
        "--timeout",
        "300",
    ];
    let o = run(&[&job[..], &["--workers", "4"]].concat());
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "one line, no worker started: {err}");
    assert!(err.starts_with("harp: error: --init: cannot read"), "{err}");
    // Without the launcher: rank 0 says what it could not read; the others, that worker 0
    // failed and why.
    let hosts = hosts_file(&dir, &free_ports(3));
    let mut kids = Vec::new();
    for rank in ["0", "1", "2"] {
        let mut c = harp();
        c.args(["worker", "--hosts", &hosts, "--rank", rank])
            .args(job);
        c.env("HARP_SECRET", "s3cret-s3cret-s3cret");
        kids.push(c.stderr(Stdio::piped()).spawn().unwrap());
    }
    let errs: Vec<String> = kids
        .into_iter()
        .map(|k| stderr(&k.wait_with_output().unwrap()))
        .collect();
    for err in &errs[1..] {
        assert!(
            err.contains("harp: error: worker 0 failed: ") && err.contains("no-such-init.txt"),
            "{err}"
        );
        assert!(!err.contains("timed out"), "{err}");
    }
}

/// A worker whose input is malformed fails outside any collective; the others name it and
/// quote its error (file and line) instead of "connection closed".
#[test]
fn an_input_error_on_one_worker_is_quoted_by_every_other_worker() {
    let dir = tmpdir("input");
    let pts = points(&dir, "5 x\n");
    let init = dir.join("init.txt");
    std::fs::write(&init, "0 0\n1 1\n").unwrap();
    let o = run(&[
        "kmeans",
        "--workers",
        "3",
        "--input",
        &s(&pts),
        "--init",
        &s(&init),
        "--output",
        &s(&dir.join("out")),
        "--timeout",
        "300",
    ]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    let cause = format!("rank 2 is gone: it failed: rank 2: {}:30:", pts.display());
    for r in 0..2 {
        let line = error_line(&err, r);
        assert!(line.contains(&cause), "rank {r}: {line}");
    }
}

fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

fn hosts_file(dir: &Path, ports: &[u16]) -> String {
    let path = dir.join("hosts");
    let mut f = std::fs::File::create(&path).unwrap();
    for p in ports {
        writeln!(f, "127.0.0.1:{p}").unwrap();
    }
    s(&path)
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) on a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Three `harp worker` processes of `hosts` running `job` then `more` (stderr piped), with
/// the environment variable `env` set when given.
fn workers(hosts: &str, job: &[&str], more: &[&str], env: Option<(&str, &str)>) -> Vec<Child> {
    (0..3)
        .map(|r| {
            let mut c = harp();
            c.args(["worker", "--hosts", hosts, "--rank", &r.to_string()])
                .args(job)
                .args(more)
                .env("HARP_SECRET", "failures-test-secret")
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            if let Some((k, v)) = env {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect()
}

/// A stopped worker (SIGSTOP) in the middle of large allreduces: the peers whose sends to it
/// block report it silent, like the receivers, never a receive-side "did not send" timeout.
#[test]
fn a_send_blocked_on_a_stopped_worker_reports_it_silent() {
    let dir = tmpdir("stop");
    let hosts = hosts_file(&dir, &free_ports(3));
    let bench = ["--job", "stop", "bench", "allreduce", "--bytes", "64m"];
    let mut kids = workers(
        &hosts,
        &bench,
        &["--reps", "100000", "--timeout", "6"],
        None,
    );
    std::thread::sleep(Duration::from_millis(2500));
    let victim = kids.remove(1);
    signal(victim.id(), libc::SIGSTOP);
    let outs: Vec<Output> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    signal(victim.id(), libc::SIGKILL);
    let _ = victim.wait_with_output();
    for (i, o) in outs.iter().enumerate() {
        let err = stderr(o);
        assert!(!o.status.success(), "survivor {i} succeeded");
        assert!(
            err.contains("rank 1 has been silent"),
            "survivor {i}: {err}"
        );
        assert!(!err.contains("did not send"), "survivor {i}: {err}");
    }
}

/// Three workers compute (sleep 60 s) outside the collectives after start-up; rank 1 is
/// killed (`SIGKILL`) or stopped (`SIGSTOP`). Ranks 0 and 2 must end within about the 4 s
/// timeout, failed and naming rank 1 (rank 2, with no connection to rank 1, learns it from
/// rank 0), not when they reach their next collective a minute later.
fn computing_workers_notice(sig: i32, name: &str, says: &str) {
    let dir = tmpdir(name);
    let hosts = hosts_file(&dir, &free_ports(3));
    let bench = ["--job", name, "bench", "allreduce", "--bytes", "1k"];
    let compute = Some(("HARP_COMPUTE_BEFORE_JOB", "60"));
    let mut kids = workers(&hosts, &bench, &["--reps", "3", "--timeout", "4"], compute);
    // Started (rank 1 has connected to rank 0) and computing.
    std::thread::sleep(Duration::from_millis(2000));
    let victim = kids.remove(1);
    let t0 = Instant::now();
    signal(victim.id(), sig);
    let outs: Vec<(Output, Duration)> = kids
        .into_iter()
        .map(|k| {
            let o = k.wait_with_output().unwrap();
            (o, t0.elapsed())
        })
        .collect();
    signal(victim.id(), libc::SIGKILL);
    let _ = victim.wait_with_output();
    for ((o, took), r) in outs.iter().zip([0, 2]) {
        let err = stderr(o);
        assert!(!o.status.success(), "rank {r} succeeded: {err}");
        assert!(
            *took < Duration::from_secs(20),
            "rank {r} ended {took:?} after the signal: {err}"
        );
        let line = error_line(&err, r);
        assert!(line.contains("computing"), "rank {r}: {line}");
        assert!(line.contains(says), "rank {r}: {line}");
    }
}

#[test]
fn a_killed_peer_ends_the_computing_workers_within_the_timeout() {
    computing_workers_notice(libc::SIGKILL, "kill-computing", "rank 1 is gone");
}

#[test]
fn a_stopped_peer_ends_the_computing_workers_within_the_timeout() {
    computing_workers_notice(libc::SIGSTOP, "stop-computing", "rank 1 has been silent");
}

/// The pids of the running (not zombie) children of `parent`.
fn children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some((ppid, state)) = stat(pid) {
            if ppid == parent && state != 'Z' {
                out.push(pid);
            }
        }
    }
    out
}

/// (parent pid, state) of `pid`, if it exists.
fn stat(pid: u32) -> Option<(u32, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let mut f = after.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((ppid, state))
}

fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(_, st)| st != 'Z' && st != 'X')
}

/// Starts a long local benchmark on 3 workers and returns the launcher and its workers' pids.
/// The callers wait for the launcher.
#[allow(clippy::zombie_processes)]
fn long_job() -> (Child, Vec<u32>) {
    let mut launcher = harp()
        .args(["bench", "allreduce", "--workers", "3", "--bytes", "1m"])
        .args(["--reps", "10000000", "--timeout", "10"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let kids = children(launcher.id());
        if kids.len() == 3 {
            // Let them connect and start working.
            std::thread::sleep(Duration::from_millis(1000));
            return (launcher, kids);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = launcher.kill();
            let _ = launcher.wait();
            panic!("workers did not start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to 10 s for every pid to be gone; returns those still alive.
fn survivors(pids: &[u32]) -> Vec<u32> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if pids.iter().all(|&p| !alive(p)) {
            return Vec::new();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        signal(p, libc::SIGKILL);
    }
    left
}

#[test]
fn killing_the_launcher_with_sigkill_kills_its_workers() {
    let (mut launcher, kids) = long_job();
    assert!(kids.iter().all(|&p| alive(p)));
    signal(launcher.id(), libc::SIGKILL);
    let _ = launcher.wait();
    assert_eq!(
        survivors(&kids),
        Vec::<u32>::new(),
        "workers outlived the launcher"
    );
}

#[test]
fn stopping_the_launcher_with_sigterm_stops_its_workers_and_says_so() {
    let (launcher, kids) = long_job();
    signal(launcher.id(), libc::SIGTERM);
    let o = launcher.wait_with_output().unwrap();
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(err.contains("stopped by signal 15"), "{err}");
    assert_eq!(
        survivors(&kids),
        Vec::<u32>::new(),
        "workers outlived the launcher"
    );
}
