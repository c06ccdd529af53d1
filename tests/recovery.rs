//! Recovery of `harp kmeans` with real worker processes: checkpoints, `--resume` (bit-identical
//! with the same number of workers, within 1e-12 with another), torn checkpoints, and output
//! directories that hold a complete result with `_SUCCESS` or nothing new.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use harp::apps::kmeans::input;
use harp::storage::LocalStorage;

fn harp_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_harp"));
    c.args(args).env("HARP_LOG", "warn");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("harp runs")
}

fn harp(args: &[&str]) -> Output {
    harp_env(args, &[])
}

fn ok(o: Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn failed(o: Output) -> String {
    let err = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "expected a failure:\n{err}");
    err
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harp-rec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Points and initial centroids under `dir/data`: (points dir, init file).
fn dataset(dir: &Path) -> (String, String) {
    let data = s(&dir.join("data"));
    ok(harp(&[
        "gen",
        "points",
        "--output",
        &data,
        "--n",
        "6000",
        "--dim",
        "5",
        "--seed",
        "17",
        "--init",
        "12",
        "--files",
        "3",
        "--clusters",
        "10",
    ]));
    (format!("{data}/points"), format!("{data}/init.txt"))
}

/// `harp kmeans` over the dataset with `workers` workers into `out`, plus `extra` flags.
fn kmeans(data: &(String, String), workers: &str, out: &Path, extra: &[&str]) -> Vec<String> {
    let o = s(out);
    let mut args = vec![
        "kmeans",
        "--workers",
        workers,
        "--input",
        &data.0,
        "--init",
        &data.1,
        "--output",
        &o,
    ];
    args.extend_from_slice(extra);
    args.iter().map(|a| a.to_string()).collect()
}

fn run(args: &[String]) -> String {
    ok(harp(&args.iter().map(String::as_str).collect::<Vec<_>>()))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn summary(out: &Path) -> serde_json::Value {
    serde_json::from_str(&read(&out.join("summary.json"))).unwrap()
}

fn inertias(v: &serde_json::Value) -> Vec<f64> {
    v["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["inertia"].as_f64().unwrap())
        .collect()
}

/// The names in a directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn ckpt(out: &Path, it: u64) -> PathBuf {
    out.join("_checkpoints")
        .join(harp::checkpoint::dir_name(it))
}

#[test]
fn resumed_runs_give_the_uninterrupted_centroids_bit_for_bit() {
    let dir = tmpdir("resume");
    let data = dataset(&dir);
    let full = dir.join("full");
    run(&kmeans(&data, "3", &full, &["--iterations", "8"]));
    assert_eq!(names(&full), ["_SUCCESS", "centroids.txt", "summary.json"]);
    let want = read(&full.join("centroids.txt"));
    let want_inertia = inertias(&summary(&full));
    assert_eq!(want_inertia.len(), 8);

    // A short run with checkpoints, then --resume up to 8: the same bytes.
    let out = dir.join("short");
    run(&kmeans(
        &data,
        "3",
        &out,
        &["--iterations", "3", "--checkpoint-every", "2"],
    ));
    assert_ne!(read(&out.join("centroids.txt")), want);
    // Iterations 2 and 3 (the last) are checkpointed; the manifest names iteration and workers.
    let m: serde_json::Value =
        serde_json::from_str(&read(&ckpt(&out, 3).join("manifest.json"))).unwrap();
    assert_eq!(
        (m["iteration"].as_u64(), m["workers"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(m["parts"].as_array().unwrap().len(), 3);
    assert!(ckpt(&out, 2).join("manifest.json").exists());
    let resumed = run(&kmeans(
        &data,
        "3",
        &out,
        &["--iterations", "8", "--checkpoint-every", "2", "--resume"],
    ));
    assert!(
        resumed.contains("resumed from the checkpoint at iteration 3"),
        "{resumed}"
    );
    assert!(!resumed.contains("iteration   3/8"), "{resumed}");
    assert_eq!(read(&out.join("centroids.txt")), want);
    let sm = summary(&out);
    assert_eq!(sm["resumed_from"].as_u64(), Some(3));
    assert_eq!(inertias(&sm), want_inertia);
    // Two complete checkpoints are kept: 6 and 8.
    assert_eq!(
        names(&out.join("_checkpoints")),
        [harp::checkpoint::dir_name(6), harp::checkpoint::dir_name(8)]
    );
    // Resuming a finished run changes nothing.
    run(&kmeans(
        &data,
        "3",
        &out,
        &["--iterations", "8", "--resume"],
    ));
    assert_eq!(read(&out.join("centroids.txt")), want);
    // Resuming from a checkpoint past --iterations is refused.
    let e = failed(harp(
        &kmeans(&data, "3", &out, &["--iterations", "7", "--resume"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ));
    assert!(e.contains("past the 7 iterations"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_run_resumes_from_its_last_complete_checkpoint_and_torn_ones_are_skipped() {
    let dir = tmpdir("fail");
    let data = dataset(&dir);
    let full = dir.join("full");
    run(&kmeans(&data, "3", &full, &["--iterations", "7"]));
    let want = read(&full.join("centroids.txt"));

    // Worker 1 fails after iteration 5: checkpoints 2 and 4 are complete, the output holds no
    // result.
    let out = dir.join("out");
    let args = kmeans(
        &data,
        "3",
        &out,
        &["--iterations", "7", "--checkpoint-every", "2"],
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let e = failed(harp_env(&argv, &[("HARP_KMEANS_FAIL_AFTER", "5:1")]));
    assert!(e.contains("injected failure after iteration 5"), "{e}");
    assert!(!out.join("_SUCCESS").exists() && !out.join("centroids.txt").exists());
    assert!(ckpt(&out, 4).join("manifest.json").exists());
    assert!(!ckpt(&out, 6).exists());

    // A torn checkpoint at 6 (a part without manifest, as if the job died while writing it) is
    // ignored: the run resumes from 4.
    std::fs::create_dir_all(ckpt(&out, 6)).unwrap();
    std::fs::copy(
        ckpt(&out, 4).join("part-00000"),
        ckpt(&out, 6).join("part-00000"),
    )
    .unwrap();
    let resumed = run(&kmeans(
        &data,
        "3",
        &out,
        &["--iterations", "7", "--resume"],
    ));
    assert!(
        resumed.contains("resumed from the checkpoint at iteration 4"),
        "{resumed}"
    );
    assert_eq!(read(&out.join("centroids.txt")), want);
    assert!(out.join("_SUCCESS").exists());

    // A checkpoint with a missing part is torn too: with 4 torn, 2 is used.
    let out2 = dir.join("out2");
    let args = kmeans(
        &data,
        "3",
        &out2,
        &["--iterations", "7", "--checkpoint-every", "2"],
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    failed(harp_env(&argv, &[("HARP_KMEANS_FAIL_AFTER", "5")]));
    std::fs::remove_file(ckpt(&out2, 4).join("part-00002")).unwrap();
    let resumed = run(&kmeans(
        &data,
        "3",
        &out2,
        &["--iterations", "7", "--resume"],
    ));
    assert!(
        resumed.contains("resumed from the checkpoint at iteration 2"),
        "{resumed}"
    );
    assert_eq!(read(&out2.join("centroids.txt")), want);

    // No complete checkpoint at all: --resume starts afresh (and still gives the result).
    let out3 = dir.join("out3");
    let resumed = run(&kmeans(
        &data,
        "3",
        &out3,
        &["--iterations", "7", "--resume"],
    ));
    assert!(!resumed.contains("resumed from"), "{resumed}");
    assert_eq!(read(&out3.join("centroids.txt")), want);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn resuming_with_another_number_of_workers_agrees_within_1e_12() {
    let dir = tmpdir("workers");
    let data = dataset(&dir);
    let full = dir.join("full");
    run(&kmeans(&data, "3", &full, &["--iterations", "8"]));
    let want = input::read_centroids(&LocalStorage, &s(&full.join("centroids.txt"))).unwrap();
    for workers in ["2", "4"] {
        let out = dir.join(format!("w{workers}"));
        run(&kmeans(
            &data,
            "3",
            &out,
            &["--iterations", "4", "--checkpoint-every", "4"],
        ));
        let r = run(&kmeans(
            &data,
            workers,
            &out,
            &["--iterations", "8", "--resume"],
        ));
        assert!(
            r.contains("resumed from the checkpoint at iteration 4"),
            "{r}"
        );
        let got = input::read_centroids(&LocalStorage, &s(&out.join("centroids.txt"))).unwrap();
        assert_eq!((got.n, got.dim), (want.n, want.dim));
        for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
            let rel = (g - w).abs() / w.abs().max(1e-300);
            assert!(
                rel <= 1e-12,
                "{workers} workers, value {i}: {g} vs {w} ({rel:e})"
            );
        }
    }
    // A checkpoint of another shape is refused with a clear error.
    let other = dir.join("other");
    run(&kmeans(
        &data,
        "2",
        &other,
        &["--iterations", "2", "--checkpoint-every", "1"],
    ));
    let mut args = kmeans(&data, "2", &other, &["--iterations", "4", "--resume"]);
    args.extend(["--precision".to_string(), "f32".to_string()]);
    let e = failed(harp(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert!(
        e.contains("cannot resume") && e.contains("precision"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_run_leaves_the_previous_result_untouched() {
    let dir = tmpdir("keep");
    let data = dataset(&dir);
    let out = dir.join("out");
    run(&kmeans(&data, "2", &out, &["--iterations", "3"]));
    let (c, sm) = (
        read(&out.join("centroids.txt")),
        read(&out.join("summary.json")),
    );
    let args = kmeans(&data, "2", &out, &["--iterations", "6", "--overwrite"]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    failed(harp_env(&argv, &[("HARP_KMEANS_FAIL_AFTER", "2:0")]));
    // Exactly what it held before: the failed run's staging directory is gone too.
    assert_eq!(names(&out), ["_SUCCESS", "centroids.txt", "summary.json"]);
    assert_eq!(
        (
            read(&out.join("centroids.txt")),
            read(&out.join("summary.json"))
        ),
        (c, sm)
    );
    // The next complete run replaces the result and cleans up.
    run(&kmeans(
        &data,
        "2",
        &out,
        &["--iterations", "4", "--overwrite"],
    ));
    assert_eq!(names(&out), ["_SUCCESS", "centroids.txt", "summary.json"]);
    assert_eq!(inertias(&summary(&out)).len(), 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unusable_output_or_checkpoint_path_fails_before_the_first_iteration() {
    let dir = tmpdir("early");
    let data = dataset(&dir);
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("out");
    let e = failed(harp(
        &kmeans(&data, "2", &out, &["--iterations", "50"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ));
    assert!(e.contains(&s(&out)), "{e}");
    assert!(!e.contains("iteration  "), "{e}");
    let good = dir.join("good");
    let bad_ck = s(&file.join("ck"));
    let e = failed(harp(
        &kmeans(
            &data,
            "2",
            &good,
            &[
                "--iterations",
                "50",
                "--checkpoint-every",
                "5",
                "--checkpoint-dir",
                &bad_ck,
            ],
        )
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
    ));
    assert!(e.contains(&bad_ck), "{e}");
    assert!(!e.contains("iteration  "), "{e}");
    assert!(!good.join("_SUCCESS").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn labels_of_a_new_run_replace_the_old_ones_with_a_success_marker() {
    let dir = tmpdir("labels");
    let data = dataset(&dir);
    let labels = dir.join("labels");
    let l = s(&labels);
    for (workers, parts) in [("3", 3usize), ("2", 2)] {
        let out = dir.join(format!("out{workers}"));
        run(&kmeans(
            &data,
            workers,
            &out,
            &["--iterations", "2", "--labels", &l],
        ));
        let mut want = vec!["_SUCCESS".to_string()];
        want.extend((0..parts).map(|r| format!("part-{r:05}")));
        assert_eq!(names(&labels), want);
        let n: usize = (0..parts)
            .map(|r| read(&labels.join(format!("part-{r:05}"))).lines().count())
            .sum();
        assert_eq!(n, 6000);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A small edge list for the graph applications: `dir/edges.txt`.
fn edges(dir: &Path) -> String {
    let p = dir.join("edges.txt");
    let text: String = (0..40)
        .map(|i| format!("{i} {}\n", (i * 7 + 3) % 40))
        .collect();
    std::fs::write(&p, text).unwrap();
    s(&p)
}

/// Every file and directory name under `dir`, recursively, relative to it and sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            v.push(s(p.strip_prefix(dir).unwrap()));
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    v.sort();
    v
}

/// One rule for every application: an output directory that holds anything is refused before
/// any work unless `--overwrite` (or `--resume` for K-means) is given; a missing or empty one
/// is fine; one holding only `_temporary` is named as a killed run's staging.
#[test]
fn every_application_refuses_an_existing_result_unless_told_to_overwrite() {
    let dir = tmpdir("existing");
    let data = dataset(&dir);
    let graph = edges(&dir);
    let words = dir.join("words.txt");
    std::fs::write(&words, "a b c a\nb a\n").unwrap();
    let words = s(&words);
    let (points, init) = (&data.0, &data.1);
    let apps: [(&str, &[&str]); 4] = [
        ("pagerank", &["--input", &graph, "--iterations", "2"]),
        ("components", &["--input", &graph]),
        ("wordcount", &["--input", &words]),
        (
            "kmeans",
            &["--input", points, "--init", init, "--iterations", "2"],
        ),
    ];
    for (app, args) in apps {
        let out = dir.join(format!("out-{app}"));
        let o = s(&out);
        let argv = |extra: &[&str]| -> Vec<String> {
            [&[app, "--workers", "2", "--output", &o][..], args, extra]
                .concat()
                .iter()
                .map(|a| a.to_string())
                .collect()
        };
        // An empty directory is used as it is.
        std::fs::create_dir_all(&out).unwrap();
        run(&argv(&[]));
        assert!(out.join("_SUCCESS").exists(), "{app}");
        // A result is there now: refused, and left as it was.
        let before = tree(&out);
        let e = failed(harp(
            &argv(&[]).iter().map(String::as_str).collect::<Vec<_>>(),
        ));
        assert!(
            e.contains("already exists") && e.contains("--overwrite") && e.contains(&o),
            "{app}: {e}"
        );
        assert_eq!(tree(&out), before, "{app}");
        // Told to overwrite: replaced.
        run(&argv(&["--overwrite"]));
        assert!(out.join("_SUCCESS").exists(), "{app}");
        // Only a killed run's staging: named as such.
        std::fs::remove_dir_all(&out).unwrap();
        std::fs::create_dir_all(out.join("_temporary/local-1-0")).unwrap();
        let e = failed(harp(
            &argv(&[]).iter().map(String::as_str).collect::<Vec<_>>(),
        ));
        assert!(e.contains("killed before its commit"), "{app}: {e}");
        run(&argv(&["--overwrite"]));
        assert!(out.join("_SUCCESS").exists(), "{app}");
        assert!(!out.join("_temporary").exists(), "{app}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The commit is the final agreement: a worker that fails after every part is written and
/// agreed on (`HARP_FAIL_BEFORE_COMMIT`, as one failing on the last frame of the agreement)
/// fails the job, and the master commits nothing: no `_SUCCESS`, no parts, no staging, and an
/// earlier result stays as it was.
#[test]
fn a_worker_failing_after_its_part_is_written_stops_the_commit() {
    let dir = tmpdir("final-agreement");
    let graph = edges(&dir);
    let data = dataset(&dir);
    for (app, rank) in [("pagerank", "2"), ("components", "1"), ("kmeans", "1")] {
        let out = dir.join(format!("out-{app}"));
        let o = s(&out);
        let input: &[&str] = match app {
            "kmeans" => &["--input", &data.0, "--init", &data.1, "--iterations", "2"],
            _ => &["--input", &graph],
        };
        let argv = [&[app, "--workers", "3", "--output", &o][..], input].concat();
        let e = failed(harp_env(&argv, &[("HARP_FAIL_BEFORE_COMMIT", rank)]));
        assert!(e.contains("before the final agreement"), "{app}: {e}");
        assert!(!out.exists(), "{app}: {:?}", tree(&out));
        // Over an earlier result (--overwrite): it stays as it was.
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("part-00000"), "earlier\n").unwrap();
        std::fs::write(out.join("_SUCCESS"), "").unwrap();
        let argv = [&argv[..], &["--overwrite"]].concat();
        failed(harp_env(&argv, &[("HARP_FAIL_BEFORE_COMMIT", rank)]));
        assert_eq!(tree(&out), vec!["_SUCCESS", "part-00000"], "{app}");
        assert_eq!(read(&out.join("part-00000")), "earlier\n", "{app}");
    }
    // K-means' labels wait for the same agreement: none are committed.
    let (out, labels) = (dir.join("out-labelled"), dir.join("labels"));
    let (o, l) = (s(&out), s(&labels));
    let argv = [
        "kmeans",
        "--workers",
        "3",
        "--output",
        &o,
        "--input",
        &data.0,
        "--init",
        &data.1,
        "--iterations",
        "2",
        "--labels",
        &l,
    ];
    let e = failed(harp_env(&argv, &[("HARP_FAIL_BEFORE_COMMIT", "1")]));
    assert!(e.contains("before the final agreement"), "{e}");
    assert!(!labels.join("_SUCCESS").exists(), "{:?}", tree(&labels));
    assert!(!labels.join("part-00000").exists(), "{:?}", tree(&labels));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `harp pagerank`, `harp mds` and `harp layout` with 3 worker processes: an uninterrupted run;
/// the same run with `--checkpoint-every` and worker 1 failing after an iteration
/// (`HARP_FAIL_AFTER`), which fails the job and leaves no result; `--resume`, which continues
/// from the last complete checkpoint in `OUTPUT/_checkpoints` and writes the same bytes.
#[test]
fn pagerank_mds_and_layout_resume_to_the_same_bytes() {
    let dir = tmpdir("apps");
    let mut edges = String::new();
    let mut x: u64 = 7;
    for _ in 0..1500 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        edges.push_str(&format!("{} {}\n", (x >> 33) % 200, (x >> 13) % 230));
    }
    let graph = dir.join("edges.txt");
    std::fs::write(&graph, edges).unwrap();
    let matrix = dir.join("d.txt");
    ok(harp(&[
        "gen",
        "dist",
        "--n",
        "60",
        "--seed",
        "3",
        "--noise",
        "0.1",
        "--output",
        &s(&matrix),
    ]));
    // (job, input, its extra flags, the result files to compare)
    let jobs: [(&str, &Path, &[&str], &[&str]); 3] = [
        (
            "pagerank",
            &graph,
            &["--iterations", "9"],
            &["part-00000", "part-00001", "part-00002"],
        ),
        (
            "mds",
            &matrix,
            &["--iterations", "9", "--temperature", "0.05"],
            &["coords.txt", "stress.txt"],
        ),
        (
            "layout",
            &graph,
            &["--iterations", "9"],
            &["part-00000", "part-00001", "part-00002"],
        ),
    ];
    for (job, input, extra, files) in jobs {
        let args = |out: &Path, more: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = [
                job,
                "--workers",
                "3",
                "--input",
                &s(input),
                "--output",
                &s(out),
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            v.extend(extra.iter().chain(more).map(|a| a.to_string()));
            v
        };
        let strs = |v: &[String]| v.iter().map(String::as_str).collect::<Vec<_>>().join(" ");
        let full = dir.join(format!("{job}-full"));
        run(&args(&full, &[]));
        let out = dir.join(format!("{job}-resumed"));
        let ck = ["--checkpoint-every", "4"];
        let e = failed(harp_env(
            &args(&out, &ck)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            &[("HARP_FAIL_AFTER", "6:1")],
        ));
        assert!(
            e.contains("injected failure after iteration 6"),
            "{job}: {e}"
        );
        assert!(!out.join("_SUCCESS").exists(), "{job}");
        assert_eq!(
            names(&out.join("_checkpoints")),
            [harp::checkpoint::dir_name(4)],
            "{job}"
        );
        let resumed = run(&args(&out, &["--checkpoint-every", "4", "--resume"]));
        assert!(
            resumed.contains("resumed from the checkpoint at iteration 4"),
            "{job} ({}): {resumed}",
            strs(&args(&out, &[]))
        );
        for f in files {
            assert_eq!(read(&out.join(f)), read(&full.join(f)), "{job}: {f}");
        }
        if job != "pagerank" {
            assert_eq!(summary(&out)["resumed_from"].as_u64(), Some(4), "{job}");
            assert_eq!(
                summary(&out)["iterations"].as_array().unwrap().len(),
                9,
                "{job}"
            );
        }
        assert_eq!(
            names(&out.join("_checkpoints")),
            [harp::checkpoint::dir_name(8), harp::checkpoint::dir_name(9)],
            "{job}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
