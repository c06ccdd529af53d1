//! Multi-worker behaviour with real processes and real sockets on loopback: every collective and
//! algorithm against a sequential model for p = 1…8, worker failures (killed, aborted, stopped),
//! authentication, hosts-file mode and the benchmark's output.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use harp::check::{CHECKS_PER_ROUND, KV_CHECKS_PER_ROUND};

fn harp() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harp"));
    c.env("HARP_LOG", "warn");
    c
}

fn run(args: &[&str]) -> Output {
    harp().args(args).output().expect("harp runs")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The final error line of rank `r` in the launcher's stderr.
fn error_line(err: &str, r: usize) -> &str {
    err.lines()
        .find(|l| l.starts_with(&format!("harp: error: rank {r}:")))
        .unwrap_or_else(|| panic!("rank {r} reported nothing:\n{err}"))
}

/// `harp check --groups` on 5 processes: every collective on the groups [4, 2, 0] and [1, 3]
/// at the same time, against the model, then a barrier of the whole job.
#[test]
fn group_collectives_over_tcp_match_the_model() {
    let o = run(&[
        "check",
        "--workers",
        "5",
        "--seed",
        "7",
        "--rounds",
        "1",
        "--groups",
        "--timeout",
        "60",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains(&format!("{CHECKS_PER_ROUND} results verified on 5 workers")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "check: {CHECKS_PER_ROUND} results verified in group [4, 2, 0] (groups [[4, 2, 0], [1, 3]])"
        )),
        "{out}"
    );
}

/// `harp netmap` on 3 processes writes a model of every pair that the engine parses back; a
/// job started with `--net-measure start` measures before it runs.
#[test]
fn netmap_writes_the_model_and_jobs_can_measure_at_start() {
    let dir = std::env::temp_dir().join(format!("harp-netmap-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("net.txt");
    let o = run(&[
        "netmap",
        "--workers",
        "3",
        "--net-measure-bytes",
        "131072",
        "--output",
        file.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("latency, ms") && out.contains("bandwidth, Mbit/s"),
        "{out}"
    );
    assert!(out.contains("host intake, Mbit/s"), "{out}");
    // 6 ordered pairs × 128 KiB (0.75 MiB), then 3 intake phases of 128 KiB to 2 × 128 KiB.
    let mib: f64 = out
        .split(" MiB of timed transfers")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {out}"));
    assert!((1.1..=1.5).contains(&mib), "{mib} MiB: {out}");
    let model = harp::NetModel::parse(&std::fs::read_to_string(&file).unwrap(), "net.txt").unwrap();
    assert_eq!(model.workers(), 3);
    assert!(
        (0..3).all(|u| model.host(u).is_some()),
        "host intakes written"
    );
    assert!(model.bandwidth(0, 2).is_finite() && model.latency(2, 1) > 0.0);
    let o = run(&[
        "check",
        "--workers",
        "3",
        "--rounds",
        "1",
        "--net-measure",
        "cached",
        "--net-cache-dir",
        dir.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let cached = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("net-")
        })
        .count();
    assert_eq!(cached, 1, "the measured model is in the cache");
    let o = run(&["check", "--workers", "2", "--net-measure", "sometimes"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("expected off, start or cached"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn check_p(p: usize) {
    let ps = p.to_string();
    let seed = (100 + p).to_string();
    let o = run(&[
        "check",
        "--workers",
        &ps,
        "--seed",
        &seed,
        "--rounds",
        "2",
        "--timeout",
        "60",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "p={p}: {out}\n{err}");
    let (n, kv) = (2 * CHECKS_PER_ROUND, 2 * KV_CHECKS_PER_ROUND);
    assert!(
        out.contains(&format!("{n} results verified on {p} workers")),
        "{out}"
    );
    // Key-value and edge tables (harp::check::run_kv, run_edges) over TCP too.
    assert!(
        out.contains(&format!("{kv} key-value results verified on {p} workers")),
        "{out}"
    );
    assert!(
        out.contains(&format!("{kv} edge-table results verified on {p} workers")),
        "{out}"
    );
}

/// Over TCP with a network model file given to every worker (`--net-model`): uneven rates for
/// p = 4 and 7 and a uniform one for p = 5; the network-aware algorithms and the automatic
/// choices under the model match the sequential model.
#[test]
fn collectives_match_the_model_under_a_net_model_file() {
    let dir = std::env::temp_dir().join(format!("harp-cluster-netmodel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (p, uneven) in [(4, true), (5, false), (7, true)] {
        let mut lat = vec![1e-4; p * p];
        let mut bw = vec![25e6; p * p];
        for i in 0..p {
            for j in 0..p {
                if uneven {
                    bw[i * p + j] = 25e6 / [1.0, 2.0, 4.0][(i * 7 + j * 3 + i * j) % 3];
                    lat[i * p + j] = 5e-5 * (1 + (i + j) % 4) as f64;
                }
            }
        }
        let file = dir.join(format!("m{p}.txt"));
        let model = harp::NetModel::new(p, lat, bw).unwrap();
        std::fs::write(&file, model.to_text()).unwrap();
        let (ps, f) = (p.to_string(), file.display().to_string());
        let o = run(&[
            "check",
            "--workers",
            &ps,
            "--rounds",
            "2",
            "--timeout",
            "60",
            "--net-model",
            &f,
        ]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "p={p}: {out}\n{err}");
        assert!(
            out.contains(&format!(
                "{} results verified on {p} workers",
                2 * CHECKS_PER_ROUND
            )),
            "{out}"
        );
    }
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "workers 2\nlatency_s\n0 1e-4\n1e-4 zero\n").unwrap();
    let o = run(&[
        "check",
        "--workers",
        "2",
        "--net-model",
        &bad.display().to_string(),
    ]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("bad.txt:4") && err.contains("not a number"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn collectives_match_the_model_p1() {
    check_p(1);
}
#[test]
fn collectives_match_the_model_p2() {
    check_p(2);
}
#[test]
fn collectives_match_the_model_p3() {
    check_p(3);
}
#[test]
fn collectives_match_the_model_p4() {
    check_p(4);
}
#[test]
fn collectives_match_the_model_p5() {
    check_p(5);
}
#[test]
fn collectives_match_the_model_p6() {
    check_p(6);
}
#[test]
fn collectives_match_the_model_p7() {
    check_p(7);
}
#[test]
fn collectives_match_the_model_p8() {
    check_p(8);
}

#[test]
fn an_aborted_worker_fails_every_worker_naming_it() {
    let o = run(&[
        "check",
        "--workers",
        "4",
        "--die-rank",
        "2",
        "--die-at",
        "5",
        "--timeout",
        "20",
    ]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    for r in [0, 1, 3] {
        let line = error_line(&err, r);
        assert!(
            line.contains("rank 2 is gone"),
            "rank {r} does not name rank 2: {line}"
        );
    }
    assert!(err.contains("4 of 4 workers failed"), "{err}");
}

#[test]
fn a_stopped_worker_is_reported_silent_by_everyone() {
    let t0 = Instant::now();
    let o = run(&[
        "check",
        "--workers",
        "4",
        "--stall-rank",
        "1",
        "--stall-at",
        "7",
        "--timeout",
        "4",
    ]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    for r in [0, 2, 3] {
        let line = error_line(&err, r);
        assert!(line.contains("rank 1 has been silent"), "rank {r}: {line}");
    }
    assert!(
        err.contains("worker 1 was stopped (not running) and was killed when the job failed"),
        "{err}"
    );
    // The others fail at about timeout/2 (2 s) and exit; the stopped worker is then killed at
    // once, not after the launcher's grace of timeout + 5 s (9 s more).
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "took {:?}",
        t0.elapsed()
    );
}

fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

fn hosts_file(dir: &std::path::Path, ports: &[u16]) -> String {
    let path = dir.join("hosts");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "#rack a").unwrap();
    for (i, p) in ports.iter().enumerate() {
        if i == ports.len() / 2 {
            writeln!(f, "#rack b").unwrap();
        }
        writeln!(f, "127.0.0.1:{p}").unwrap();
    }
    path.to_string_lossy().into_owned()
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("harp-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn hosts_file_mode_runs_a_benchmark_and_prints_json() {
    let dir = tmpdir("hosts");
    let hosts = hosts_file(&dir, &free_ports(3));
    let kids: Vec<_> = (0..3)
        .map(|r| {
            harp()
                .args([
                    "worker",
                    "--hosts",
                    &hosts,
                    "--rank",
                    &r.to_string(),
                    "--job",
                    "t1",
                ])
                .args([
                    "bench",
                    "broadcast",
                    "--bytes",
                    "1m",
                    "--reps",
                    "3",
                    "--json",
                    "--timeout",
                    "30",
                ])
                .env("HARP_SECRET", "s3cret-s3cret-s3cret")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {:?}", text(o));
    }
    let (out, _) = text(&outs[0]);
    let j: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(j["op"], "broadcast");
    assert_eq!(j["algorithm"], "chain");
    assert_eq!(j["workers"], 3);
    assert_eq!(j["bytes"], 1 << 20);
    assert!(j["median_s"].as_f64().unwrap() > 0.0);
    // CPU per call: a broadcast of 1 MiB takes some, and not more than the wall time allows
    // (the three workers' mean, in µs, over at most the 2 cores of a machine or more).
    let (user, sys) = (
        j["cpu_user_us_per_call"].as_f64().unwrap(),
        j["cpu_sys_us_per_call"].as_f64().unwrap(),
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(user + sys > 0.0 && user >= 0.0 && sys >= 0.0, "{j}");
    assert!(
        user + sys <= j["max_s"].as_f64().unwrap() * 1e6 * cores + 1e4,
        "{j}"
    );
    assert!(text(&outs[1]).0.is_empty(), "only rank 0 prints results");
}

#[test]
fn a_peer_without_the_secret_is_dropped_and_the_job_still_runs() {
    let dir = tmpdir("auth");
    let ports = free_ports(2);
    let hosts = hosts_file(&dir, &ports);
    let job = |r: usize, secret: &str| {
        harp()
            .args([
                "worker",
                "--hosts",
                &hosts,
                "--rank",
                &r.to_string(),
                "--job",
                "t2",
            ])
            .args([
                "check",
                "--rounds",
                "1",
                "--timeout",
                "30",
                "--connect-timeout",
                "20",
            ])
            .env("HARP_SECRET", secret)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let master = job(0, "right-secret-0123456789");
    // An impostor claiming rank 1 with the wrong secret: it must be refused, and must fail.
    let impostor = job(1, "wrong-secret-0123456789")
        .wait_with_output()
        .unwrap();
    assert!(!impostor.status.success());
    assert!(
        text(&impostor).1.contains("failed to prove the job secret"),
        "{:?}",
        text(&impostor)
    );
    // A stray client sending garbage is dropped too.
    {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", ports[0])).unwrap();
        let _ = s.write_all(&[7u8; 64]);
    }
    let real = job(1, "right-secret-0123456789")
        .wait_with_output()
        .unwrap();
    let m = master.wait_with_output().unwrap();
    assert!(real.status.success(), "{:?}", text(&real));
    assert!(m.status.success(), "{:?}", text(&m));
    let (out, err) = text(&m);
    assert!(out.contains("results verified on 2 workers"), "{out}");
    assert!(
        err.contains("dropped connection"),
        "master did not log the rejected peers: {err}"
    );
}

#[test]
fn a_worker_killed_during_a_large_broadcast_fails_the_others() {
    let dir = tmpdir("kill");
    let hosts = hosts_file(&dir, &free_ports(3));
    let mut kids: Vec<_> = (0..3)
        .map(|r| {
            harp()
                .args([
                    "worker",
                    "--hosts",
                    &hosts,
                    "--rank",
                    &r.to_string(),
                    "--job",
                    "t3",
                ])
                .args([
                    "bench",
                    "allreduce",
                    "--bytes",
                    "64m",
                    "--reps",
                    "1000",
                    "--timeout",
                    "20",
                ])
                .env("HARP_SECRET", "k-0123456789abcdef")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let victim = kids.remove(1);
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(victim.id() as i32, libc::SIGKILL) };
    let _ = victim.wait_with_output();
    for (i, k) in kids.into_iter().enumerate() {
        let o = k.wait_with_output().unwrap();
        let (_, err) = text(&o);
        assert!(!o.status.success(), "survivor {i} succeeded");
        // Every rep is a barrier then the allreduce: under load the kill can land in either.
        assert!(
            err.contains("rank 1 is gone")
                && (err.contains("allreduce") || err.contains("barrier")),
            "survivor {i}: {err}"
        );
    }
}

#[test]
fn bad_hosts_files_and_arguments_are_clear_errors() {
    let dir = tmpdir("bad");
    let f = dir.join("hosts");
    std::fs::write(&f, "127.0.0.1:1\nnot-a-host\n").unwrap();
    let o = harp()
        .args([
            "worker",
            "--hosts",
            f.to_str().unwrap(),
            "--rank",
            "0",
            "check",
        ])
        .env("HARP_SECRET", "x-0123456789abcdef")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains(&format!(
            "{}:2: expected host:port [rack], found 'not-a-host'",
            f.display()
        )),
        "{:?}",
        text(&o)
    );
    let o = harp()
        .args([
            "worker",
            "--hosts",
            f.to_str().unwrap(),
            "--rank",
            "0",
            "check",
        ])
        .env_remove("HARP_SECRET")
        .output()
        .unwrap();
    assert!(text(&o).1.contains("no job secret"), "{:?}", text(&o));
    let o = run(&[
        "bench",
        "allreduce",
        "--workers",
        "2",
        "--algorithm",
        "nope",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("unknown allreduce algorithm 'nope'"),
        "{:?}",
        text(&o)
    );
    let o = run(&["bench", "allreduce", "--workers", "0"]);
    assert!(
        text(&o).1.contains("--workers must be between 1 and 256"),
        "{:?}",
        text(&o)
    );
    let o = run(&["bench", "allreduce", "--workers", "2", "--inner", "0"]);
    assert!(
        !o.status.success() && text(&o).1.contains("invalid value '0' for '--inner"),
        "{:?}",
        text(&o)
    );
}

/// `--inner K`: K back-to-back calls per repetition, reported per call.
#[test]
fn bench_times_back_to_back_calls() {
    let o = run(&[
        "bench",
        "allreduce",
        "--workers",
        "3",
        "--bytes",
        "1k",
        "--reps",
        "3",
        "--inner",
        "20",
        "--json",
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
    let j: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    assert_eq!(j["inner"], 20);
    assert_eq!(j["reps"], 3);
    let (min, med) = (
        j["min_s"].as_f64().unwrap(),
        j["median_s"].as_f64().unwrap(),
    );
    assert!(min > 0.0 && min <= med, "{j}");
}

/// The pids of the launcher `launcher`'s worker processes whose command line holds `--rank R`.
fn worker_pid(launcher: u32, rank: usize) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let rank_arg = args
            .windows(2)
            .any(|w| w[0] == b"--rank" && w[1] == rank.to_string().as_bytes());
        if ppid == Some(launcher) && rank_arg {
            return Some(pid);
        }
    }
    None
}

/// A local PageRank job that runs until stopped, writing into `out`: the launcher's child.
/// `extra` flags are passed on.
fn long_job(dir: &std::path::Path, out: &std::path::Path, extra: &[&str]) -> std::process::Child {
    let edges = dir.join("edges.txt");
    let text: String = (0..200)
        .map(|i| format!("{i} {}\n", (i * 7 + 1) % 200))
        .collect();
    std::fs::write(&edges, text).unwrap();
    let child = harp()
        .args(["pagerank", "--workers", "3", "--iterations", "100000000"])
        .args(["--input", edges.to_str().unwrap(), "--output"])
        .arg(out)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until the staging directory is there (the job is writing into the output).
    let until = Instant::now() + Duration::from_secs(30);
    while !out.join("_temporary").exists() {
        assert!(Instant::now() < until, "no staging after 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    child
}

/// The launcher's SIGTERM and SIGINT are a clean stop, and a master killed with SIGKILL is
/// cleaned up after by the launcher: either way the job fails and leaves no staging
/// (`_temporary`), no `_SUCCESS` and no output directory it created.
#[test]
fn a_stopped_launcher_or_a_killed_master_leaves_no_staging() {
    let dir = tmpdir("staging");
    for how in ["SIGTERM", "SIGINT", "master SIGKILL"] {
        let out = dir.join(format!("out-{}", how.replace(' ', "-")));
        let child = long_job(&dir, &out, &[]);
        let (pid, sig) = match how {
            "SIGTERM" => (child.id() as i32, libc::SIGTERM),
            "SIGINT" => (child.id() as i32, libc::SIGINT),
            _ => (
                worker_pid(child.id(), 0).expect("rank 0's process"),
                libc::SIGKILL,
            ),
        };
        // SAFETY: kill(2) on our child or on its worker process.
        unsafe { libc::kill(pid, sig) };
        let o = child.wait_with_output().unwrap();
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{how}: {err}");
        assert!(!err.contains("panicked"), "{how}: {err}");
        assert!(
            !out.exists(),
            "{how}: left {:?}",
            std::fs::read_dir(&out).map(|d| d.count())
        );
    }
    // Over an existing result (--overwrite): it stays, without the stopped run's staging.
    let out = dir.join("out-kept");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("part-00000"), "earlier\n").unwrap();
    std::fs::write(out.join("_SUCCESS"), "").unwrap();
    let child = long_job(&dir, &out, &["--overwrite"]);
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(!child.wait_with_output().unwrap().status.success());
    let mut left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["_SUCCESS", "part-00000"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A launcher whose own standard output is closed (`harp ... | head -1`) runs the job to its
/// end: the workers' output is read and dropped, nothing panics, the exit status is 0.
#[test]
fn a_closed_standard_output_does_not_fail_the_job() {
    let mut child = harp()
        .args(["bench", "barrier", "--workers", "2", "--reps", "3"])
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone before the first line
    let o = child.wait_with_output().unwrap();
    let (_, err) = text(&o);
    assert!(o.status.success(), "{:?}: {err}", o.status);
    assert!(!err.contains("panicked"), "{err}");
}
