//! Limits of the `harp` command line, with real processes: sizes and counts beyond what a host
//! or a table can hold are one clear error before anything is allocated (never an aborted
//! allocation), the workers of a host are counted together, numbers outside an option's range
//! name the option, and a mistake the launcher can see is reported once, before any worker
//! starts.

mod common;

use common::{fails, harp, s, tmpdir};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The lines of standard error that report an error (`harp: error: …`).
fn error_lines(err: &str) -> usize {
    err.lines()
        .filter(|l| l.starts_with("harp: error:"))
        .count()
}

/// MemAvailable of this host, in bytes.
fn available() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// `harp gen points` whose sizes pass the memory check but whose allocation fails (here under
/// an address-space limit of 1 GiB, as when other processes took the memory meanwhile) ends
/// with an error naming what could not be allocated, not SIGABRT ("memory allocation of …
/// bytes failed").
#[test]
fn a_failed_allocation_in_gen_is_an_error_not_an_abort() {
    let dir = tmpdir("limits-gen");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_harp"));
    cmd.args([
        "gen", "points", "--n", "10", "--dim", "20000000", "--output",
    ])
    .arg(&dir)
    .env("HARP_LOG", "warn");
    // SAFETY: setrlimit only changes the child's own limit, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            match libc::setrlimit(libc::RLIMIT_AS, &lim) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let o = cmd.output().unwrap();
    let err = fails(&o, &["harp: error:"]);
    assert!(!err.contains("memory allocation"), "{err}");
    // The blob centres (16 x 20000000 f64) cannot be allocated; or, on a host with less than
    // about 4 GiB available, the memory check refuses the sizes first.
    assert!(
        err.contains("16 blob centres of dimension 20000000: cannot allocate 2.4 GiB")
            || err.contains("available (MemAvailable"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The local launcher's workers share this host: K-means centroids that fit one worker but not
/// four are refused before any worker starts, with both figures.
#[test]
fn the_memory_of_all_local_workers_is_checked_together() {
    // Each worker needs 7 × 8 bytes per centroid value (the centroids, their sums and the
    // k-means++ sample): here about 30 % of the host's available memory.
    let k = (available() as f64 * 0.3 / (56.0 * 1000.0)) as u64;
    let k = k.to_string();
    let run = |workers: &str| {
        harp(&[
            "kmeans",
            "--workers",
            workers,
            "--input",
            "/nonexistent/points",
            "--format",
            "f32",
            "--dim",
            "1000",
            "--init-method",
            "random",
            "--k",
            &k,
            "--output",
            "/nonexistent/out",
        ])
    };
    let err = fails(
        &run("4"),
        &[
            &format!("--k {k}: {k} centroids of dimension 1000"),
            "per worker; the 4 workers on this host need",
            "of memory, but this host has only",
        ],
    );
    assert_eq!(error_lines(&err), 1, "{err}");
    // One worker fits: it goes on and fails later, on the missing input or output.
    let err = fails(&run("1"), &["/nonexistent/"]);
    assert!(!err.contains("of memory"), "{err}");
}

/// One rule bounds the partitions of every table (65,536, or 8 per worker beyond 8,192
/// workers): `wordcount --partitions 100000000` took 18.5 s and 3.1 GB, `bench --partitions
/// 10000000` 4 GB.
#[test]
fn absurd_partition_counts_are_refused_once() {
    let dir = tmpdir("limits-parts");
    let (words, out) = (dir.join("w.txt"), s(&dir.join("out")));
    std::fs::write(&words, "a b a\n").unwrap();
    let bench = |parts: &str| {
        let flags = ["-w", "2", "--bytes", "1k", "--reps", "1", "--warmup", "0"];
        harp(&[&["bench", "allreduce", "--partitions", parts][..], &flags].concat())
    };
    let words = s(&words);
    let wordcount = ["wordcount", "-w", "2", "--input", &words, "--output", &out];
    for o in [
        harp(&[&wordcount[..], &["--partitions", "100000000"]].concat()),
        bench("10000000"),
    ] {
        let err = fails(
            &o,
            &["a table has from 1 to 65536 partitions with 2 worker(s)"],
        );
        assert_eq!(error_lines(&err), 1, "{err}");
    }
    assert!(!dir.join("out").exists());
    // The bound itself is accepted.
    common::ok(bench("65536"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Negative numbers and zero counts are usage errors naming the option and what it takes, the
/// same in every job (`--iterations 0` was accepted by pagerank and refused by kmeans; `-1`
/// was "unexpected argument '-1'").
#[test]
fn negative_and_zero_counts_name_the_option() {
    for (args, want) in [
        (
            vec![
                "kmeans",
                "--input",
                "p",
                "--output",
                "o",
                "--iterations",
                "-1",
            ],
            "invalid value '-1' for '--iterations <ITERATIONS>': negative numbers are not \
             allowed: expected a whole number, at least 1",
        ),
        (
            vec![
                "pagerank",
                "--input",
                "p",
                "--output",
                "o",
                "--iterations",
                "0",
            ],
            "invalid value '0' for '--iterations <ITERATIONS>': expected a whole number, at \
             least 1",
        ),
        (
            vec![
                "wordcount",
                "--input",
                "p",
                "--output",
                "o",
                "--partitions",
                "-3",
            ],
            "invalid value '-3' for '--partitions <PARTITIONS>': negative numbers are not \
             allowed: expected a whole number from 1 to 4294967295",
        ),
        (
            vec!["check", "--die-rank", "-2"],
            "invalid value '-2' for '--die-rank <DIE_RANK>': negative numbers are not allowed: \
             expected a whole number, at least 0",
        ),
        (
            vec!["gen", "points", "--n", "-5", "--dim", "2", "--output", "o"],
            "invalid value '-5' for '--n <N>': negative numbers are not allowed",
        ),
    ] {
        let err = fails(&harp(&args), &[want]);
        assert!(!err.contains("unexpected argument"), "{err}");
    }
}

/// Every byte option takes at most 4 GiB, with the same error (`--chunk 100t` and
/// `--event-window 100t` were accepted where `--socket-buffer 100t` was refused).
#[test]
fn byte_options_share_one_limit() {
    for flag in ["--chunk", "--event-window", "--socket-buffer"] {
        fails(
            &harp(&["check", flag, "100t"]),
            &[
                &format!("for '{flag} <BYTES>'"),
                "more than 4294967296 bytes (4g)",
            ],
        );
    }
}

/// Mistakes the launcher can see are one error line before any worker starts, not one per
/// worker (a missing `--init` was reported four times; `events-check --flood` with
/// `--event-window 0` twice).
#[test]
fn launcher_reports_argument_mistakes_once() {
    let dir = tmpdir("limits-once");
    let points = dir.join("p.txt");
    std::fs::write(&points, "1 2\n3 4\n").unwrap();
    let err = fails(
        &harp(&[
            "kmeans",
            "--workers",
            "4",
            "--input",
            &s(&points),
            "--init",
            "/nonexistent/init.txt",
            "--output",
            &s(&dir.join("out")),
        ]),
        &["--init: cannot read '/nonexistent/init.txt': No such file or directory"],
    );
    assert_eq!(error_lines(&err), 1, "{err}");
    assert!(!err.contains("worker"), "no worker started: {err}");
    let err = fails(
        &harp(&[
            "events-check",
            "--workers",
            "2",
            "--event-window",
            "0",
            "--flood",
            "1m",
        ]),
        &["events-check --flood needs --event-window of at least 4096 bytes, not 0"],
    );
    assert_eq!(error_lines(&err), 1, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `--secret-file` ending in a newline (as `echo` and editors write it) holds the same
/// secret as `HARP_SECRET` without it: the two workers authenticate each other.
#[test]
fn a_secret_file_newline_is_not_part_of_the_secret() {
    let dir = tmpdir("limits-secret");
    let ports: Vec<u16> = {
        let ls: Vec<_> = (0..2)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
    };
    let hosts = dir.join("hosts");
    std::fs::write(
        &hosts,
        format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1]),
    )
    .unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, "s3cret-s3cret-s3cret\r\n").unwrap();
    let worker = |rank: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_harp"));
        c.args([
            "worker",
            "--hosts",
            &s(&hosts),
            "--rank",
            rank,
            "--job",
            "sf",
        ])
        .env("HARP_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        c
    };
    let job = [
        "check",
        "--rounds",
        "1",
        "--timeout",
        "20",
        "--connect-timeout",
        "20",
    ];
    let a = worker("0")
        .args(["--secret-file", &s(&secret)])
        .args(job)
        .spawn()
        .unwrap();
    let b = worker("1")
        .args(job)
        .env("HARP_SECRET", "s3cret-s3cret-s3cret")
        .spawn()
        .unwrap();
    for (r, k) in [a, b].into_iter().enumerate() {
        let o = k.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "rank {r}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
