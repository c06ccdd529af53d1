//! `harp kmeans` with real worker processes against the single-process reference, the input
//! formats, the steady-state memory behaviour and input errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use harp::apps::kmeans::{driver, input};
use harp::storage::LocalStorage;

fn harp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harp"))
        .args(args)
        .env("HARP_LOG", "warn")
        .output()
        .expect("harp runs")
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

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harp-km-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn centroids(path: &Path) -> input::Points {
    input::read_centroids(&LocalStorage, &s(path)).unwrap()
}

fn assert_close(got: &input::Points, want: &input::Points, tol: f64) {
    assert_eq!((got.n, got.dim), (want.n, want.dim));
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        let rel = (g - w).abs() / w.abs().max(1e-300);
        assert!(
            rel <= tol || (g - w).abs() <= tol,
            "value {i}: {g} vs {w} (relative {rel:e})"
        );
    }
}

/// Generates points (`harp gen points` with `gen` arguments) under `dir/data`; returns the
/// points directory, the initial centroids file and every point in input order.
fn dataset(dir: &Path, gen: &[&str], dim: usize) -> (String, String, input::Points) {
    let data = s(&dir.join("data"));
    let mut args = vec!["gen", "points", "--output", &data];
    args.extend_from_slice(gen);
    ok(harp(&args));
    let points_dir = format!("{data}/points");
    let all = input::load_share(
        &LocalStorage,
        &points_dir,
        input::Format::Text,
        0,
        dim,
        0,
        1,
    )
    .unwrap();
    (points_dir, format!("{data}/init.txt"), all)
}

fn kmeans(dir: &Path, workers: &str, extra: &[&str]) -> (String, PathBuf) {
    let out = dir.join(format!(
        "out-{workers}-{}",
        extra.join("_").replace(['-', '/'], "")
    ));
    let mut args = vec!["kmeans", "--workers", workers, "--output"];
    let o = s(&out);
    if !extra.contains(&"--iterations") {
        args.push(&o);
        args.extend_from_slice(&["--iterations", "6"]);
        args.extend_from_slice(extra);
        return (ok(harp(&args)), out);
    }
    args.push(&o);
    args.extend_from_slice(extra);
    (ok(harp(&args)), out)
}

/// `OUT/summary.json` and the value of `key` in each of its iterations.
fn per_iteration(out: &Path, key: &str) -> (serde_json::Value, Vec<f64>) {
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let values = summary["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i[key].as_f64().unwrap())
        .collect();
    (summary, values)
}

#[test]
fn distributed_kmeans_equals_the_single_process_reference() {
    let dir = tmpdir("ref");
    let data = s(&dir.join("data"));
    ok(harp(&[
        "gen", "points", "--n", "5000", "--dim", "7", "--seed", "3", "--init", "9", "--files", "3",
        "--output", &data,
    ]));
    let points_dir = format!("{data}/points");
    let init = format!("{data}/init.txt");
    let all =
        input::load_share(&LocalStorage, &points_dir, input::Format::Text, 0, 7, 0, 1).unwrap();
    assert_eq!(all.n, 5000);
    let want = driver::reference(&all, &centroids(Path::new(&init)), 6);
    for (w, threads) in [("1", "1"), ("3", "2"), ("4", "1")] {
        let (stdout, out) = kmeans(
            &dir,
            w,
            &[
                "--threads",
                threads,
                "--input",
                &points_dir,
                "--init",
                &init,
            ],
        );
        assert_eq!(stdout.matches("inertia").count(), 6, "{stdout}");
        assert_close(&centroids(&out.join("centroids.txt")), &want, 1e-9);
        let (summary, inertia) = per_iteration(&out, "inertia");
        assert_eq!(summary["points"], 5000);
        assert_eq!(summary["workers"].as_u64().unwrap().to_string(), w);
        // Inertia never increases in Lloyd's algorithm.
        assert!(
            inertia.windows(2).all(|x| x[1] <= x[0] * (1.0 + 1e-12)),
            "{inertia:?}"
        );
    }
}

#[test]
fn steady_state_iterations_allocate_no_payload_buffers() {
    let dir = tmpdir("pool");
    let data = s(&dir.join("data"));
    ok(harp(&[
        "gen", "points", "--n", "20000", "--dim", "16", "--seed", "5", "--init", "40", "--output",
        &data,
    ]));
    for w in ["3", "4"] {
        let out = dir.join(format!("o{w}"));
        ok(harp(&[
            "kmeans",
            "--workers",
            w,
            "--iterations",
            "20",
            "--input",
            &format!("{data}/points"),
            "--init",
            &format!("{data}/init.txt"),
            "--output",
            &s(&out),
        ]));
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let allocs: Vec<u64> = summary["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["pool_allocations"].as_u64().unwrap())
            .collect();
        // Every iteration needs new buffers for its partial sums and for every message it
        // receives; from the pool they come from the free lists. The counter may rise by a
        // buffer or two the first time message timing puts the most messages in flight at
        // once, but never once per iteration (that would be 19 or more here).
        assert!(
            allocs[19] - allocs[0] <= 3,
            "pool allocations grew with the iterations: {allocs:?}"
        );
    }
}

#[test]
fn hog_layout_and_f32_input_give_the_same_centroids() {
    let dir = tmpdir("formats");
    let plain = dir.join("plain.txt");
    let hog = dir.join("hog");
    std::fs::create_dir_all(&hog).unwrap();
    let raw = dir.join("raw.f32");
    let mut t = String::new();
    let mut h = String::new();
    let mut r = Vec::new();
    for i in 0..600u32 {
        let v: Vec<f32> = (0..4)
            .map(|d| (((i * 7 + d * 13) % 97) as f32) * 0.25 - (i % 3) as f32 * 10.0)
            .collect();
        let line = v
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        t.push_str(&line);
        t.push('\n');
        h.push_str(&format!(
            "pic{i}, {}, {}, {}\n",
            i / 10,
            i % 10,
            line.replace(' ', ", ")
        ));
        for x in v {
            r.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(&plain, t).unwrap();
    std::fs::write(hog.join("part-0.txt"), h).unwrap();
    std::fs::write(&raw, r).unwrap();
    let init = dir.join("init.txt");
    std::fs::write(
        &init,
        "0 0 0 0\n5 5 5 5\n-10 1 2 3\n1000000 1000000 1000000 1000000\n",
    )
    .unwrap();
    let init_s = s(&init);
    let (_, a) = kmeans(&dir, "2", &["--input", &s(&plain), "--init", &init_s]);
    let (_, b) = kmeans(
        &dir,
        "3",
        &[
            "--input",
            &s(&hog),
            "--init",
            &init_s,
            "--skip-columns",
            "3",
        ],
    );
    let (_, c) = kmeans(
        &dir,
        "2",
        &["--input", &s(&raw), "--init", &init_s, "--format", "f32"],
    );
    let ca = centroids(&a.join("centroids.txt"));
    assert_close(&centroids(&b.join("centroids.txt")), &ca, 1e-9);
    assert_close(&centroids(&c.join("centroids.txt")), &ca, 1e-9);
    // The far-away centroid gets no point and keeps its value.
    assert_eq!(&ca.data[12..16], &[1e6, 1e6, 1e6, 1e6]);
}

#[test]
fn malformed_points_name_the_file_and_line() {
    let dir = tmpdir("bad");
    let pts = dir.join("pts.txt");
    std::fs::write(&pts, "1 2\n3 4\n5 x\n7 8\n").unwrap();
    let init = dir.join("init.txt");
    std::fs::write(&init, "0 0\n1 1\n").unwrap();
    let o = harp(&[
        "kmeans",
        "--workers",
        "2",
        "--input",
        &s(&pts),
        "--init",
        &s(&init),
        "--output",
        &s(&dir.join("o")),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{}:3:", pts.display())), "{err}");
    std::fs::write(&pts, "1 2\n3 4 5\n").unwrap();
    let o = harp(&[
        "kmeans",
        "--workers",
        "1",
        "--input",
        &s(&pts),
        "--init",
        &s(&init),
        "--output",
        &s(&dir.join("o")),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{}:2:", pts.display())), "{err}");
    let o = harp(&[
        "kmeans",
        "--workers",
        "1",
        "--input",
        &s(&dir.join("missing")),
        "--init",
        &s(&init),
        "--output",
        &s(&dir.join("o")),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("missing"), "{err}");
}

/// Runs `f` on `p` workers inside this process (one thread each) and returns their results in
/// rank order.
fn in_process<T: Send + 'static>(
    p: usize,
    f: impl Fn(&harp::Worker) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let rt = harp::worker::runtime(2).unwrap();
    let cfg = harp::Config::default();
    let listeners: Vec<harp::Listener> = (0..p)
        .map(|_| harp::Listener::bind(rt.handle(), "127.0.0.1:0".parse().unwrap(), &cfg).unwrap())
        .collect();
    let topo = harp::Topology::flat(listeners.iter().map(|l| l.addr.to_string()).collect());
    let f = std::sync::Arc::new(f);
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, l)| {
            let (h, cfg, topo, f) = (rt.handle().clone(), cfg.clone(), topo.clone(), f.clone());
            std::thread::spawn(move || {
                let w =
                    harp::Worker::start(h, cfg, topo, rank, "km-test", b"km-test-secret-0123", l)
                        .unwrap();
                let r = f(&w);
                w.close();
                r
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn explicit_splits_override_the_division_of_the_input() {
    let dir = tmpdir("splits");
    let data = s(&dir.join("data"));
    ok(harp(&[
        "gen", "points", "--n", "3000", "--dim", "3", "--seed", "4", "--init", "5", "--files", "2",
        "--output", &data,
    ]));
    let init = format!("{data}/init.txt");
    let files = harp::storage::Storage::list(&LocalStorage, &format!("{data}/points")).unwrap();
    assert_eq!(files.len(), 2);
    let all = input::load_share(
        &LocalStorage,
        &format!("{data}/points"),
        input::Format::Text,
        0,
        3,
        0,
        1,
    )
    .unwrap();
    let want = driver::reference(&all, &centroids(Path::new(&init)), 4);
    // Rank 0 takes the second file and the first 1001 bytes of the first (cut inside a line),
    // rank 1 the rest of the first file; rank 2 nothing at all.
    let (f0, f1) = (files[0].clone(), files[1].clone());
    let plan = [
        vec![
            input::ByteRange::new(&f1.path, 0, f1.size),
            input::ByteRange::new(&f0.path, 0, 1001),
        ],
        vec![input::ByteRange::new(&f0.path, 1001, f0.size - 1001)],
        vec![],
    ];
    let input_dir = format!("{data}/points");
    let outs = in_process(3, move |w| {
        let mut o = driver::Options::new(input_dir.clone(), init.clone());
        o.iterations = 4;
        o.splits = Some(plan[w.rank()].clone());
        driver::run(w, &o, |_| {}).unwrap()
    });
    for out in &outs {
        assert_eq!(out.points, 3000);
        assert_close(&out.centroids, &want, 1e-9);
        assert_eq!(out.stop_reason, driver::StopReason::Iterations);
    }
}

#[test]
fn tolerance_stops_early_and_says_why() {
    let dir = tmpdir("tol");
    let data = s(&dir.join("data"));
    ok(harp(&[
        "gen",
        "points",
        "--n",
        "4000",
        "--dim",
        "4",
        "--seed",
        "9",
        "--init",
        "6",
        "--clusters",
        "6",
        "--output",
        &data,
    ]));
    let (_, out) = kmeans(
        &dir,
        "2",
        &[
            "--input",
            &format!("{data}/points"),
            "--init",
            &format!("{data}/init.txt"),
            "--iterations",
            "200",
            "--tolerance",
            "1e-4",
        ],
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let inertia: Vec<f64> = summary["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["inertia"].as_f64().unwrap())
        .collect();
    let reason = summary["stop_reason"].as_str().unwrap();
    assert!(inertia.len() < 200, "{} iterations", inertia.len());
    assert!(reason == "tolerance" || reason == "converged", "{reason}");
    let n = inertia.len();
    if reason == "tolerance" {
        assert!(inertia[n - 2] - inertia[n - 1] <= 1e-4 * inertia[n - 2]);
    }
    // No earlier iteration met the criterion.
    for w in inertia[..n - 1].windows(2) {
        assert!(w[0] - w[1] > 1e-4 * w[0], "{inertia:?}");
    }
    // Without a tolerance every iteration runs.
    let summary = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "--input".to_string(),
            format!("{data}/points"),
            "--init".to_string(),
            format!("{data}/init.txt"),
            "--iterations".to_string(),
            "9".to_string(),
        ];
        args.extend(extra.iter().map(|x| x.to_string()));
        let a: Vec<&str> = args.iter().map(|x| x.as_str()).collect();
        let (_, out) = kmeans(&dir, "1", &a);
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
    };
    let full = summary(&[]);
    assert_eq!(full["iterations"].as_array().unwrap().len(), 9);
    assert_eq!(full["stop_reason"], "iterations");
}

#[test]
fn bad_kmeans_flags_name_the_flag() {
    let dir = tmpdir("flags");
    let pts = dir.join("p.txt");
    std::fs::write(&pts, "1 2\n3 4\n").unwrap();
    let init = dir.join("init.txt");
    std::fs::write(&init, "0 0\n").unwrap();
    for (flag, value, want) in [
        ("--precision", "f16", "--precision"),
        ("--assign", "fast", "--assign"),
        ("--empty-cluster", "drop", "--empty-cluster"),
        ("--tolerance", "-1", "--tolerance"),
        ("--init-method", "magic", "--init-method"),
    ] {
        let o = harp(&[
            "kmeans",
            "--workers",
            "1",
            "--input",
            &s(&pts),
            "--init",
            &s(&init),
            "--output",
            &s(&dir.join("o")),
            flag,
            value,
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{flag}: {err}");
    }
}

#[test]
fn f32_precision_matches_the_f32_reference() {
    let dir = tmpdir("f32");
    let data = s(&dir.join("data"));
    ok(harp(&[
        "gen", "points", "--n", "6000", "--dim", "12", "--seed", "21", "--init", "20", "--files",
        "3", "--output", &data,
    ]));
    let points_dir = format!("{data}/points");
    let init = format!("{data}/init.txt");
    let all: input::Matrix<f32> =
        input::load_share_as(&LocalStorage, &points_dir, input::Format::Text, 0, 12, 0, 1).unwrap();
    let want = driver::reference_as(
        &all,
        &centroids(Path::new(&init)),
        6,
        driver::EmptyCluster::Keep,
    );
    let (_, out) = kmeans(
        &dir,
        "3",
        &[
            "--threads",
            "2",
            "--input",
            &points_dir,
            "--init",
            &init,
            "--precision",
            "f32",
        ],
    );
    let got = centroids(&out.join("centroids.txt"));
    // Every value is an f32.
    assert!(got.data.iter().all(|&v| (v as f32) as f64 == v));
    assert_close(&got, &want, 1e-4);
    // The final inertia against a sequential f64 computation on the same centroids.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["precision"], "f32");
    let it = summary["iterations"].as_array().unwrap();
    let last = it.last().unwrap()["inertia"].as_f64().unwrap();
    let before_last = driver::reference_as(
        &all,
        &centroids(Path::new(&init)),
        5,
        driver::EmptyCluster::Keep,
    );
    let ct: Vec<f32> = before_last.data.iter().map(|&v| v as f32).collect();
    let (mut sums, mut counts) = (vec![0.0; 20 * 12], vec![0.0; 20]);
    let want_inertia =
        harp::apps::kmeans::kernel::assign_naive(&all.data, 12, &ct, 20, 1, &mut sums, &mut counts);
    let rel = (last - want_inertia).abs() / want_inertia;
    assert!(rel <= 1e-5, "{last} vs {want_inertia}");
}

/// A generated data set in `tmpdir(name)` and the reference's centroids after `iterations`:
/// (the directory, the points, the initial centroids file, the centroids).
fn with_reference(
    name: &str,
    gen: &[&str],
    dim: usize,
    iterations: usize,
) -> (PathBuf, String, String, input::Points) {
    let dir = tmpdir(name);
    let (points_dir, init, all) = dataset(&dir, gen, dim);
    let want = driver::reference(&all, &centroids(Path::new(&init)), iterations);
    (dir, points_dir, init, want)
}

#[test]
fn pruned_and_gemm_paths_give_the_reference_centroids() {
    let gen = [
        "--n", "8000", "--dim", "3", "--seed", "12", "--init", "150", "--files", "2",
    ];
    let (dir, points_dir, init, want) = with_reference("pruned", &gen, 3, 6);
    for (assign, expect) in [("auto", "pruned"), ("pruned", "pruned"), ("gemm", "gemm")] {
        let (_, out) = kmeans(
            &dir,
            "2",
            &[
                "--threads",
                "2",
                "--input",
                &points_dir,
                "--init",
                &init,
                "--assign",
                assign,
            ],
        );
        assert_close(&centroids(&out.join("centroids.txt")), &want, 1e-9);
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["assign"], expect, "--assign {assign}");
    }
}

#[test]
fn kmeans_pp_and_random_init_are_reproducible_and_independent_of_workers() {
    let dir = tmpdir("init");
    let gen = ["--n", "5000", "--dim", "5", "--seed", "31", "--files", "3"];
    let (points_dir, _, all) = dataset(&dir, &gen, 5);
    let k = 12;
    for method in ["kmeans++", "random"] {
        // The sequential equivalent: the same sample of global indices, the same seeding.
        let seed = 77u64;
        let m = if method == "random" { k } else { 4 * k };
        let idx = driver::sample_indices(5000, m, seed ^ 0x1e17);
        let sample: Vec<f64> = idx
            .iter()
            .flat_map(|&g| all.row(g as usize).to_vec())
            .collect();
        let init = if method == "random" {
            sample
        } else {
            driver::kmeans_pp(&sample, 5, k, seed)
        };
        let want = driver::reference(
            &all,
            &input::Points {
                n: k,
                dim: 5,
                data: init,
            },
            6,
        );
        let mut texts = Vec::new();
        for (w, t) in [("1", "1"), ("3", "2"), ("4", "1")] {
            let (_, out) = kmeans(
                &dir,
                w,
                &[
                    "--threads",
                    t,
                    "--input",
                    &points_dir,
                    "--init-method",
                    method,
                    "--k",
                    "12",
                    "--seed",
                    "77",
                ],
            );
            let got = centroids(&out.join("centroids.txt"));
            assert_close(&got, &want, 1e-9);
            texts.push(std::fs::read_to_string(out.join("centroids.txt")).unwrap());
        }
        let (_, other) = kmeans(
            &dir,
            "2",
            &[
                "--input",
                &points_dir,
                "--init-method",
                method,
                "--k",
                "12",
                "--seed",
                "78",
            ],
        );
        assert_ne!(
            std::fs::read_to_string(other.join("centroids.txt")).unwrap(),
            texts[0],
            "{method}: another seed gives other centroids"
        );
    }
    // --k without --init means kmeans++; f32 input needs --dim.
    let e = harp(&[
        "kmeans",
        "--workers",
        "1",
        "--input",
        &points_dir,
        "--init-method",
        "random",
        "--output",
        &s(&dir.join("x")),
    ]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("--k"));
}

#[test]
fn yinyang_on_three_workers_equals_gemm() {
    let gen = [
        "--n", "9000", "--dim", "24", "--seed", "77", "--init", "90", "--files", "2",
    ];
    let (dir, points_dir, init, want) = with_reference("yinyang", &gen, 24, 12);
    let mut got = Vec::new();
    for assign in ["gemm", "yinyang", "hamerly"] {
        let args = [
            ["--input", points_dir.as_str()],
            ["--init", &init],
            ["--assign", assign],
            ["--iterations", "12"],
        ]
        .concat();
        let (_, out) = kmeans(&dir, "3", &args);
        let text = std::fs::read_to_string(out.join("centroids.txt")).unwrap();
        assert_close(&centroids(&out.join("centroids.txt")), &want, 1e-9);
        let (summary, shares) = per_iteration(&out, "distances");
        assert_eq!(summary["assign"], assign);
        assert_eq!(shares.len(), 12);
        if assign == "gemm" {
            assert!(shares.iter().all(|&v| v == 1.0), "{shares:?}");
        } else {
            // All distances (and a few exact checks) first, then far fewer.
            assert!(shares[0] >= 1.0 && shares[0] < 1.5, "{shares:?}");
            assert!(shares[11] < 0.5, "{shares:?}");
        }
        got.push(text);
    }
    assert_eq!(got[0], got[1], "yinyang and gemm centroids");
    assert_eq!(got[0], got[2], "hamerly and gemm centroids");
}

/// `auto` by precision: f64 with k ≥ 128 and k·d ≥ 8192 takes hamerly below 256 dimensions (its
/// GEMM runs in f32, so even its first assignment is cheaper than the f64 GEMM path's) and gives
/// the gemm path's centroids bit for bit; f32 keeps gemm there.
#[test]
fn auto_takes_the_bounds_in_f64_and_gemm_in_f32() {
    let gen = [
        "--n", "4000", "--dim", "64", "--seed", "79", "--init", "130", "--files", "2",
    ];
    let dir = tmpdir("auto-precision");
    let (points_dir, init, _) = dataset(&dir, &gen, 64);
    let mut texts = Vec::new();
    for (assign, precision, expect) in [
        ("auto", "f64", "hamerly"),
        ("gemm", "f64", "gemm"),
        ("auto", "f32", "gemm"),
    ] {
        let args = [
            ["--input", points_dir.as_str()],
            ["--init", &init],
            ["--assign", assign],
            ["--precision", precision],
            ["--iterations", "6"],
        ]
        .concat();
        let (_, out) = kmeans(&dir, "2", &args);
        let (summary, shares) = per_iteration(&out, "distances");
        assert_eq!(summary["assign"], expect, "{assign} {precision}");
        if expect == "hamerly" {
            assert!(shares[5] < 1.0, "{shares:?}");
        }
        texts.push(std::fs::read_to_string(out.join("centroids.txt")).unwrap());
    }
    assert_eq!(
        texts[0], texts[1],
        "auto (hamerly) and gemm centroids in f64"
    );
}

/// The bound-based paths after a failure: the bounds are not saved, the resumed run rebuilds
/// them and ends with the centroids of an uninterrupted gemm run, bit for bit.
#[test]
fn bound_paths_resume_to_the_gemm_centroids() {
    let gen = [
        "--n", "6000", "--dim", "16", "--seed", "78", "--init", "140", "--files", "2",
    ];
    let dir = tmpdir("bound-resume");
    let (points_dir, init, _) = dataset(&dir, &gen, 16);
    let common = |assign: &'static str| -> Vec<String> {
        [
            "--input",
            points_dir.as_str(),
            "--init",
            &init,
            "--assign",
            assign,
            "--iterations",
            "8",
        ]
        .iter()
        .map(|v| v.to_string())
        .collect()
    };
    let (_, full) = kmeans(
        &dir,
        "2",
        &common("gemm")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let want = std::fs::read_to_string(full.join("centroids.txt")).unwrap();
    for assign in ["yinyang", "hamerly"] {
        let out = dir.join(format!("resume-{assign}"));
        let mut args: Vec<String> = ["kmeans", "--workers", "2", "--output", &s(&out)]
            .iter()
            .map(|v| v.to_string())
            .collect();
        args.extend(common(assign));
        args.extend(["--checkpoint-every".to_string(), "3".to_string()]);
        let o = Command::new(env!("CARGO_BIN_EXE_harp"))
            .args(&args)
            .env("HARP_LOG", "warn")
            .env(driver::FAIL_AFTER, "4:1")
            .output()
            .unwrap();
        assert!(
            !o.status.success(),
            "--assign {assign}: the injected failure"
        );
        args.push("--resume".to_string());
        let text = ok(harp(&args.iter().map(String::as_str).collect::<Vec<_>>()));
        assert!(
            text.contains("resumed from the checkpoint at iteration 3"),
            "{text}"
        );
        let got = std::fs::read_to_string(out.join("centroids.txt")).unwrap();
        assert_eq!(got, want, "--assign {assign} resumed");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn labels_are_written_per_worker_in_input_order() {
    let dir = tmpdir("labels");
    let gen = [
        "--n", "4000", "--dim", "3", "--seed", "41", "--init", "70", "--files", "2",
    ];
    let (points_dir, init, all) = dataset(&dir, &gen, 3);
    for assign in ["gemm", "pruned", "yinyang", "hamerly"] {
        let labels = dir.join(format!("labels-{assign}"));
        let (_, out) = kmeans(
            &dir,
            "3",
            &[
                "--input",
                &points_dir,
                "--init",
                &init,
                "--assign",
                assign,
                "--labels",
                &s(&labels),
            ],
        );
        let c = centroids(&out.join("centroids.txt"));
        let mut got = Vec::new();
        for r in 0..3 {
            let t = std::fs::read_to_string(labels.join(format!("part-{r:05}"))).unwrap();
            got.extend(t.lines().map(|l| l.parse::<usize>().unwrap()));
        }
        let want: Vec<usize> = (0..all.n)
            .map(|i| harp::apps::kmeans::kernel::nearest_naive(all.row(i), &c.data, 3).0)
            .collect();
        assert_eq!(got, want, "--assign {assign}");
    }
}

#[test]
fn split_largest_rule_matches_the_reference() {
    let dir = tmpdir("split");
    let pts = dir.join("p.txt");
    let mut t = String::new();
    for i in 0..400 {
        t.push_str(&format!(
            "{} {}\n",
            (i % 20) as f64 * 0.1,
            (i / 20) as f64 * 0.1
        ));
    }
    std::fs::write(&pts, &t).unwrap();
    let init = dir.join("init.txt");
    // Two centroids far away from every point: they are empty in the first iteration.
    std::fs::write(&init, "0.5 0.5\n1 1\n100 100\n-100 -100\n").unwrap();
    let all = input::load_share(&LocalStorage, &s(&pts), input::Format::Text, 0, 2, 0, 1).unwrap();
    let c0 = centroids(&init);
    for rule in [
        driver::EmptyCluster::Keep,
        driver::EmptyCluster::SplitLargest,
    ] {
        let want = driver::reference_with(&all, &c0, 6, rule);
        let (_, out) = kmeans(
            &dir,
            "2",
            &[
                "--input",
                &s(&pts),
                "--init",
                &s(&init),
                "--empty-cluster",
                rule.name(),
            ],
        );
        let got = centroids(&out.join("centroids.txt"));
        assert_close(&got, &want, 1e-9);
        let far = got.data[4..].iter().any(|v| v.abs() > 50.0);
        assert_eq!(
            far,
            rule == driver::EmptyCluster::Keep,
            "{rule}: {:?}",
            got.data
        );
    }
}
