//! Input and argument mistakes, with real `harp` processes: every one is a clear error naming
//! what is wrong (the option and its allowed range; the file and line or record; the
//! subdirectory; the memory needed and available) and a non-zero exit, never a panic, an
//! aborted allocation or a hang.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn harp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harp"))
        .args(args)
        .env("HARP_LOG", "warn")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("harp runs")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harp-inputs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Asserts that `o` is a failure with an exit code (not a signal, so no abort), without a
/// panic or backtrace, whose standard error contains every one of `want`; returns the error.
fn fails(o: &Output, want: &[&str]) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        matches!(o.status.code(), Some(c) if c != 0),
        "expected a non-zero exit code, got {:?}\n{err}",
        o.status
    );
    for bad in ["panicked", "stack backtrace", "memory allocation"] {
        assert!(!err.contains(bad), "{bad}: {err}");
    }
    for w in want {
        assert!(err.contains(w), "missing {w:?} in:\n{err}");
    }
    err
}

fn f32_file(path: &Path, vals: &[f32]) {
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

/// `harp kmeans` on `input` (2 values per point) with `workers` workers and `extra` flags.
fn kmeans(dir: &Path, workers: &str, input: &str, init: &str, extra: &[&str]) -> Output {
    let out = s(&dir.join("out"));
    let mut args = vec![
        "kmeans",
        "--workers",
        workers,
        "--timeout",
        "20",
        "--input",
        input,
        "--init",
        init,
        "--output",
        &out,
        "--overwrite",
    ];
    args.extend_from_slice(extra);
    harp(&args)
}

#[test]
fn durations_out_of_range_are_usage_errors_not_panics() {
    for flag in ["--timeout", "--connect-timeout"] {
        for v in ["inf", "1e300", "1e19", "NaN", "0", "-1", "31536001"] {
            let o = harp(&["bench", "barrier", "--workers", "1", flag, v]);
            fails(&o, &[flag, "from 0.001 to 31536000", v]);
        }
    }
    // The largest accepted value runs.
    let o = harp(&[
        "bench",
        "barrier",
        "--workers",
        "2",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--timeout",
        "31536000",
        "--connect-timeout",
        "31536000",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// NaN and infinities in f32 points are refused naming the file and record, as text refuses
/// them; so are non-finite initial centroids (file and line).
#[test]
fn non_finite_points_and_centroids_are_refused() {
    let dir = tmpdir("nonfinite");
    let init = dir.join("init.txt");
    std::fs::write(&init, "0 0\n1 1\n").unwrap();
    for (bad, shown) in [
        (f32::NAN, "NaN"),
        (f32::INFINITY, "inf"),
        (-f32::INFINITY, "-inf"),
    ] {
        let mut vals: Vec<f32> = (0..40).map(|i| i as f32).collect();
        vals[13] = bad; // record 7, value 2
        let p = dir.join("p.f32");
        f32_file(&p, &vals);
        for workers in ["1", "2"] {
            for precision in ["f64", "f32"] {
                let o = kmeans(
                    &dir,
                    workers,
                    &s(&p),
                    &s(&init),
                    &["--format", "f32", "--precision", precision],
                );
                fails(
                    &o,
                    &[
                        &format!("{}:7: record 7: value 2 of 2 is {shown},", p.display()),
                        "not a finite number",
                    ],
                );
            }
        }
    }
    let pts = dir.join("p.txt");
    std::fs::write(&pts, "1 2\n3 4\n").unwrap();
    for bad in ["nan 1", "1 inf", "-inf 0", "1e999 0"] {
        std::fs::write(&init, format!("0 0\n\n{bad}\n")).unwrap();
        let o = kmeans(&dir, "2", &s(&pts), &s(&init), &[]);
        fails(
            &o,
            &[&format!("{}:3:", init.display()), "not a finite number"],
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every malformed points file names the file and line (text) or record (f32), on one worker
/// and on three.
#[test]
fn every_malformed_points_file_names_file_and_line() {
    let dir = tmpdir("malformed");
    let init = dir.join("init.txt");
    std::fs::write(&init, "0 0\n1 1\n").unwrap();
    let good: String = (0..30).map(|i| format!("{i} {i}\n")).collect();
    let cases: Vec<(&str, String, u64, &str)> = vec![
        ("token", "x 1\n".into(), 31, "cannot parse 'x'"),
        (
            "too-many",
            "1 2 3\n".into(),
            31,
            "expected 2 values, found 3",
        ),
        ("too-few", "1\n".into(), 31, "expected 2 values, found 1"),
        ("commas", ",,,\n".into(), 31, "expected 2 values, found 0"),
        ("nan", "nan 1\n".into(), 31, "not a finite number"),
        ("inf", "1 -inf\n".into(), 31, "not a finite number"),
        ("overflow", "1 1e400\n".into(), 31, "not a finite number"),
        ("binary", "\u{1}\u{2} 3\n".into(), 31, "cannot parse"),
    ];
    for (name, bad, line, msg) in &cases {
        let p = dir.join(format!("{name}.txt"));
        std::fs::write(&p, format!("{good}{bad}{good}")).unwrap();
        for workers in ["1", "3"] {
            let o = kmeans(&dir, workers, &s(&p), &s(&init), &[]);
            fails(&o, &[&format!("{}:{line}: ", p.display()), msg]);
        }
    }
    // f32: an incomplete last record.
    let p = dir.join("short.f32");
    let mut bytes: Vec<u8> = (0..20).flat_map(|i| (i as f32).to_le_bytes()).collect();
    bytes.extend_from_slice(&[0, 0]);
    std::fs::write(&p, bytes).unwrap();
    for workers in ["1", "3"] {
        let o = kmeans(&dir, workers, &s(&p), &s(&init), &["--format", "f32"]);
        fails(
            &o,
            &[&format!("{}:11: ", p.display()), "record 11 is incomplete"],
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A 100 MB token is quoted in at most 64 bytes plus its size: the error stays short and still
/// names the file and line.
#[test]
fn a_huge_bad_line_gives_a_short_error() {
    let dir = tmpdir("huge");
    let init = dir.join("init.txt");
    std::fs::write(&init, "0 0\n1 1\n").unwrap();
    let p = dir.join("p.txt");
    let mut text = b"1 2\n3 4\n5 ".to_vec();
    text.resize(text.len() + (100 << 20), b'7');
    text.extend_from_slice(b"z\n9 9\n");
    std::fs::write(&p, &text).unwrap();
    let o = kmeans(&dir, "1", &s(&p), &s(&init), &[]);
    let err = fails(
        &o,
        &[
            &format!("{}:3: column 2: cannot parse '7777", p.display()),
            &format!("…' ({} bytes) as a number", (100 << 20) + 1),
        ],
    );
    assert!(err.len() < 2000, "{} bytes of errors", err.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A line of 24 MiB that starts in one worker's share and ends in the next one's is read
/// whole by the worker it starts in, once, and skipped by the others: the counts are right
/// for every word, the long one included, well within the collective timeout (reading it was
/// quadratic in its length: 100 MiB took 34 s and the other workers timed out).
#[test]
fn a_long_line_across_shares_is_counted_once() {
    let dir = tmpdir("long-line");
    let p = dir.join("text.txt");
    let long = 24usize << 20;
    let mut text = b"alpha beta\n".repeat(1000);
    text.resize(text.len() + long, b'x');
    text.extend_from_slice(&b"\ngamma alpha\n".repeat(1000));
    std::fs::write(&p, &text).unwrap();
    let (inp, out) = (s(&p), dir.join("out"));
    let args = [
        "wordcount",
        "--workers",
        "4",
        "--timeout",
        "60",
        "--input",
        &inp,
    ];
    let o = harp(&[&args[..], &["--output", &s(&out)]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut counts = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(&out).unwrap() {
        let e = e.unwrap();
        if !e.file_name().to_string_lossy().starts_with("part-") {
            continue;
        }
        for line in std::fs::read(e.path()).unwrap().split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            let tab = line
                .iter()
                .position(|&b| b == b'\t')
                .expect("word<TAB>count");
            let word = &line[..tab];
            let key = if word.len() > 64 {
                assert!(word.iter().all(|&b| b == b'x'));
                format!("x*{}", word.len())
            } else {
                String::from_utf8(word.to_vec()).unwrap()
            };
            let n: u64 = std::str::from_utf8(&line[tab + 1..])
                .unwrap()
                .parse()
                .unwrap();
            assert!(counts.insert(key, n).is_none(), "a word twice");
        }
    }
    let want: std::collections::BTreeMap<String, u64> = [
        ("alpha".to_string(), 2000),
        ("beta".to_string(), 1000),
        ("gamma".to_string(), 1000),
        (format!("x*{long}"), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(counts, want);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A subdirectory of an input directory is an error naming it (Hadoop's default); hidden ones
/// (`_temporary`, `.staging`) are skipped as before.
#[test]
fn subdirectories_of_an_input_directory_are_named() {
    let dir = tmpdir("subdir");
    let init = dir.join("init.txt");
    std::fs::write(&init, "0 0\n1 1\n").unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(data.join("_temporary/0")).unwrap();
    std::fs::create_dir_all(data.join(".staging")).unwrap();
    std::fs::write(data.join("part-0"), "1 2\n3 4\n").unwrap();
    std::fs::write(data.join("_temporary/0/part-1"), "junk\n").unwrap();
    std::fs::write(data.join(".staging/part-2"), "junk\n").unwrap();
    let o = kmeans(&dir, "2", &s(&data), &s(&init), &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::create_dir_all(data.join("more")).unwrap();
    std::fs::write(data.join("more/part-3"), "5 6\n").unwrap();
    for workers in ["1", "2"] {
        let o = kmeans(&dir, workers, &s(&data), &s(&init), &[]);
        fails(&o, &[&format!("subdirectory '{}/more'", data.display())]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Sizes that cannot fit in memory are refused before anything is allocated or written, with
/// the memory needed and available; sizes that overflow are usage errors.
#[test]
fn sizes_beyond_memory_are_clear_errors() {
    let dir = tmpdir("memory");
    let out = dir.join("gen");
    // 10^6 points of dimension 10^8: 600 TB of text per file.
    let o = harp(&[
        "gen",
        "points",
        "--n",
        "1000000",
        "--dim",
        "100000000",
        "--output",
        &s(&out),
    ]);
    fails(
        &o,
        &[
            "1000000 points of dimension 100000000",
            "of memory, but this host has only",
        ],
    );
    let o = harp(&[
        "gen",
        "points",
        "--n",
        "10",
        "--dim",
        "2",
        "--init",
        "4611686018427387904",
        "--output",
        &s(&out),
    ]);
    fails(&o, &["initial centroids of dimension 2"]);
    assert!(!out.exists(), "nothing is written");
    // K-means: a number of iterations or centroids beyond memory, before any input is read.
    let pts = dir.join("p.txt");
    std::fs::write(&pts, "1 2\n3 4\n").unwrap();
    let init = dir.join("init.txt");
    std::fs::write(&init, "0 0\n").unwrap();
    let o = kmeans(
        &dir,
        "2",
        &s(&pts),
        &s(&init),
        &["--iterations", "1000000000000000"],
    );
    fails(
        &o,
        &[
            "--iterations 1000000000000000",
            "of memory, but this host has only",
        ],
    );
    for method in ["random", "kmeans++"] {
        let o = harp(&[
            "kmeans",
            "--workers",
            "1",
            "--input",
            &s(&pts),
            "--output",
            &s(&out),
            "--init-method",
            method,
            "--k",
            "100000000000000",
        ]);
        fails(
            &o,
            &["--k 100000000000000", "of memory, but this host has only"],
        );
    }
    // 16 PiB per worker.
    let o = harp(&[
        "bench",
        "allreduce",
        "--workers",
        "2",
        "--bytes",
        "16777216g",
    ]);
    fails(
        &o,
        &[
            "--bytes 18014398509481984",
            "of memory, but this host has only",
        ],
    );
    let o = harp(&[
        "bench",
        "allreduce",
        "--workers",
        "1",
        "--bytes",
        "99999999999g",
    ]);
    fails(&o, &["more than 2^64"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Counts and sizes that would abort a worker on a failed allocation, or never start, are
/// refused up front naming the option (each of these aborted or hung before).
#[test]
fn option_counts_beyond_memory_or_reason_are_refused() {
    let dir = tmpdir("counts");
    let words = dir.join("w.txt");
    std::fs::write(&words, "a b a\n").unwrap();
    let edges = dir.join("e.txt");
    std::fs::write(&edges, "1 2\n2 3\n").unwrap();
    let matrix = dir.join("m.txt");
    std::fs::write(&matrix, "0 1 2\n1 0 1\n2 1 0\n").unwrap();
    let out = s(&dir.join("out"));
    let (words, edges, matrix) = (s(&words), s(&edges), s(&matrix));
    let big = "99999999999";
    let w = ["--workers", "2"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["bench", "allreduce", "--bytes", "1k", "--reps", big],
            "--reps 99999999999: the time of every repetition",
        ),
        (
            vec!["bench", "regroup", "--bytes", "1k", "--partitions", big],
            "--partitions 99999999999: a table has from 1 to 65536 partitions",
        ),
        (
            vec!["check", "--rounds", "1", "--max-elems", big],
            "--max-elems 99999999999: every worker's copies",
        ),
        (
            vec![
                "wordcount",
                "--input",
                &words,
                "--output",
                &out,
                "--partitions",
                "4294967295",
            ],
            "--partitions 4294967295: a table has from 1 to 65536 partitions",
        ),
        (
            vec!["mds", "--input", &matrix, "--output", &out, "--dim", big],
            "--dim 99999999999: the 3×99999999999 configuration",
        ),
        (
            vec![
                "pagerank",
                "--input",
                &edges,
                "--output",
                &out,
                "--threads",
                "100000",
            ],
            "--threads 100000: at most 1024 compute threads per worker",
        ),
        (
            vec![
                "layout",
                "--input",
                &edges,
                "--output",
                &out,
                "--threads",
                "5000",
            ],
            "--threads 5000: at most 1024",
        ),
        (
            vec!["check", "--die-rank", "5"],
            "--die-rank 5: the job has ranks 0 to 1",
        ),
        (
            vec!["events-check", "--hang-rank", "2"],
            "--hang-rank 2: the job has ranks 0 to 1",
        ),
        (
            vec!["events-check", "--flood", "1"],
            "--flood 1: at least one event of 4096 bytes",
        ),
    ];
    for (args, want) in cases {
        let mut all = args.clone();
        all.extend(w);
        let o = harp(&all);
        fails(&o, &[want]);
    }
    let o = harp(&["netmap", "--workers", "2", "--pings", big]);
    fails(&o, &["--pings", "1..=1000"]);
    assert!(!dir.join("out").exists(), "nothing is written");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every application with a result directory refuses an output that is a file, and a run that
/// fails leaves the output as it was: a directory it had to create is gone again, an existing
/// one keeps what it held (no `_temporary` left behind).
#[test]
fn failed_runs_leave_the_output_as_it_was() {
    let dir = tmpdir("outputs");
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let missing = s(&dir.join("no-such-input"));
    let apps: [(&str, &[&str]); 7] = [
        ("components", &[]),
        ("pagerank", &[]),
        ("layout", &[]),
        ("id3", &[]),
        ("mds", &[]),
        ("wordcount", &[]),
        ("kmeans", &["--init-method", "random", "--k", "2"]),
    ];
    for (app, extra) in apps {
        let run = |out: &str| {
            let mut args = vec![app, "--workers", "2", "--input", &missing, "--output", out];
            args.push("--overwrite");
            args.extend(extra);
            harp(&args)
        };
        let err = fails(&run(&s(&file)), &["is a file; the result is a directory"]);
        assert!(!err.contains("_temporary"), "{app}: {err}");
        let fresh = dir.join(format!("{app}-fresh"));
        fails(&run(&s(&fresh)), &["no-such-input"]);
        assert!(
            !fresh.exists(),
            "{app}: a failed run removes the directory it created"
        );
        let old = dir.join(format!("{app}-old"));
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("kept.txt"), "earlier").unwrap();
        fails(&run(&s(&old)), &["no-such-input"]);
        let left: Vec<_> = std::fs::read_dir(&old)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            left,
            ["kept.txt"],
            "{app}: an existing output keeps what it held"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Messages that named the wrong thing: an empty --init directory was "DIR:1: the file is
/// empty", and --k without --dim claimed dimension 1 for data of another dimension.
#[test]
fn init_and_k_errors_say_what_they_looked_at() {
    let dir = tmpdir("init");
    let pts = dir.join("p.txt");
    std::fs::write(&pts, "1 2 3\n4 5 6\n").unwrap();
    let empty = dir.join("empty-dir");
    std::fs::create_dir_all(&empty).unwrap();
    let out = s(&dir.join("out"));
    let o = kmeans(&dir, "1", &s(&pts), &s(&empty), &[]);
    fails(
        &o,
        &[&format!(
            "no centroids in '{}': it has no input files",
            s(&empty)
        )],
    );
    let o = harp(&[
        "kmeans",
        "--workers",
        "1",
        "--input",
        &s(&pts),
        "--init-method",
        "random",
        "--k",
        "99999999999",
        "--output",
        &out,
    ]);
    let err = fails(&o, &["99999999999 centroids (of at least one value each)"]);
    assert!(!err.contains("dimension 1"), "{err}");
    // Finite values whose squared distances overflow: refused, not a result with an inertia
    // of null and duplicated centroids.
    let huge = dir.join("huge.txt");
    std::fs::write(&huge, "1 2\n3 1e308\n-1e308 5\n").unwrap();
    let o = kmeans(&dir, "2", &s(&huge), &s(&huge), &[]);
    fails(
        &o,
        &[
            "iteration 1: the inertia or a centroid is not finite",
            "scale the input",
        ],
    );
    assert!(!dir.join("out").exists(), "nothing is written");
    std::fs::remove_dir_all(&dir).unwrap();
}
