//! `harp mds` with real worker processes: W = 1…4 against the sequential reference
//! (`apps::mds::reference`), the CG path with unit weights against the Guttman transform,
//! weights, annealing, an initial configuration from a file, and input errors (file and line
//! named, nothing written to the output directory).

mod common;

use std::path::Path;
use std::process::Output;

use common::{fails, harp, ok, s, tmpdir};

use harp::apps::mds::{self, input, Solver};
use harp::storage::LocalStorage;

fn write_f64(path: &Path, v: &[f64]) {
    std::fs::write(
        path,
        v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
    )
    .unwrap();
}

/// Runs `harp mds` with `workers` and `extra`; returns the coordinates and the stress column.
fn mds(dir: &Path, tag: &str, workers: &str, extra: &[&str]) -> (Vec<f64>, Vec<f64>) {
    let out = s(&dir.join(format!("out-{tag}-{workers}")));
    let mut args = vec![
        "mds",
        "--workers",
        workers,
        "--timeout",
        "30",
        "--output",
        &out,
    ];
    args.extend_from_slice(extra);
    let stdout = ok(harp(&args));
    assert!(stdout.contains("final stress"), "{stdout}");
    assert!(Path::new(&out).join("_SUCCESS").exists());
    let text = std::fs::read_to_string(format!("{out}/coords.txt")).unwrap();
    let coords: Vec<f64> = text
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let stress: Vec<f64> = std::fs::read_to_string(format!("{out}/stress.txt"))
        .unwrap()
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
        .collect();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{out}/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["workers"].as_u64().unwrap().to_string(), workers);
    (coords, stress)
}

/// Largest difference relative to the largest magnitude of `want`.
fn rel(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0.0, f64::max)
}

/// Text input with rows of uneven length in bytes (so text splits give uneven row blocks):
/// W = 1…4 give the reference's coordinates and stresses; `--solver cg` (unit weights) and a
/// weights file of ones give the Guttman transform's.
#[test]
fn unit_weights_equal_the_reference_for_every_worker_count_and_cg_equals_guttman() {
    let dir = tmpdir("mds-unit");
    let n = 57;
    let delta = mds::euclidean_distances(n, 4, 7, 0.1);
    // Short rows first, long ones last: byte shares hold very different row counts.
    let mut text = String::from("\n");
    for (i, row) in delta.chunks(n).enumerate() {
        let sep = if i < n / 2 { " " } else { " ,   \t" };
        let vals: Vec<String> = row
            .iter()
            .map(|v| {
                if i < n / 2 {
                    format!("{v:.17}")
                } else {
                    format!("{v:e}")
                }
            })
            .collect();
        text.push_str(&vals.join(sep));
        text.push('\n');
    }
    let path = dir.join("d.txt");
    std::fs::write(&path, &text).unwrap();
    let parsed = input::load_share(&LocalStorage, &s(&path), input::Format::Text, n, 0, 1).unwrap();
    let mut o = mds::Options::new(s(&path));
    o.iterations = 8;
    o.seed = 5;
    let init = mds::initial(&LocalStorage, &o, n).unwrap();
    let (want, want_stress) = mds::reference(&parsed.data, None, &init, 2, &o);
    let p = s(&path);
    let base = ["--input", &p, "--iterations", "8", "--seed", "5"];
    for w in ["1", "2", "3", "4"] {
        let (got, stress) = mds(&dir, "g", w, &[&base[..], &["--threads", "2"]].concat());
        assert!(rel(&got, &want) < 1e-9, "W={w}: {}", rel(&got, &want));
        assert!(rel(&stress, &want_stress) < 1e-9, "W={w}");
        let (cg, cg_stress) = mds(&dir, "cg", w, &[&base[..], &["--solver", "cg"]].concat());
        assert!(
            rel(&cg, &got) < 1e-9,
            "W={w}: cg vs guttman {}",
            rel(&cg, &got)
        );
        assert!(rel(&cg_stress, &stress) < 1e-9);
    }
    // Stress goes down.
    assert!(
        want_stress.windows(2).all(|w| w[1] <= w[0]),
        "{want_stress:?}"
    );
    // A weights file of ones takes the CG path (solver auto) and gives the same result.
    let ones = dir.join("ones.txt");
    std::fs::write(&ones, input::format_rows(&vec![1.0; n * n], n)).unwrap();
    let wf = s(&ones);
    let (got, _) = mds(
        &dir,
        "ones",
        "3",
        &[&base[..], &["--weights", &wf]].concat(),
    );
    assert!(rel(&got, &want) < 1e-9, "{}", rel(&got, &want));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// f64 input with non-uniform weights, with and without annealing, and an --init file: every
/// worker count equals the reference's CG.
#[test]
fn weighted_and_annealed_runs_equal_the_reference() {
    let dir = tmpdir("mds-weighted");
    let n = 41;
    let delta = mds::euclidean_distances(n, 3, 2, 0.2);
    let mut wts = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            if i != j {
                wts[i * n + j] = 0.5 + ((i + j) % 4) as f64 + ((i * j) % 3) as f64 * 0.25;
            }
        }
    }
    let (d, wf) = (dir.join("d.f64"), dir.join("w.f64"));
    write_f64(&d, &delta);
    write_f64(&wf, &wts);
    let init: Vec<f64> = (0..n * 3).map(|i| ((i * 37) % 101) as f64 / 10.0).collect();
    let init_file = dir.join("init.txt");
    std::fs::write(&init_file, input::format_rows(&init, 3)).unwrap();
    let mut o = mds::Options::new("x");
    o.iterations = 6;
    o.weights = Some("w".into());
    o.cg_iterations = 15;
    assert_eq!(o.solver(), Solver::Cg);
    let (plain, plain_stress) = mds::reference(&delta, Some(&wts), &init, 3, &o);
    o.temperature = 0.3;
    o.cooling = 0.7;
    let (annealed, _) = mds::reference(&delta, Some(&wts), &init, 3, &o);
    assert!(rel(&annealed, &plain) > 1e-6, "annealing changes the path");
    let (ds, ws, is) = (s(&d), s(&wf), s(&init_file));
    let base = [
        "--input",
        &ds,
        "--format",
        "f64",
        "--weights",
        &ws,
        "--dim",
        "3",
        "--iterations",
        "6",
        "--init",
        &is,
        "--cg-iterations",
        "15",
    ];
    for w in ["1", "2", "3", "4"] {
        let (got, stress) = mds(&dir, "w", w, &base);
        assert!(rel(&got, &plain) < 1e-9, "W={w}: {}", rel(&got, &plain));
        assert!(rel(&stress, &plain_stress) < 1e-9, "W={w}");
        let da = [&base[..], &["--temperature", "0.3", "--cooling", "0.7"]].concat();
        let (got, _) = mds(&dir, "da", w, &da);
        assert!(
            rel(&got, &annealed) < 1e-9,
            "W={w}: {}",
            rel(&got, &annealed)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bad input names the file and line (on whichever worker reads it), and leaves an earlier
/// result in the output directory as it was.
#[test]
fn bad_input_names_file_and_line_and_leaves_the_output_alone() {
    let dir = tmpdir("mds-bad");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("coords.txt"), "earlier\n").unwrap();
    std::fs::write(out.join("_SUCCESS"), "").unwrap();
    let n = 12;
    let good = input::format_rows(&mds::euclidean_distances(n, 2, 1, 0.0), n);
    let lines: Vec<&str> = good.lines().collect();
    let run = |name: &str, text: &str, extra: &[&str]| -> Output {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        let (ps, os) = (s(&p), s(&out));
        let mut args = vec![
            "mds",
            "--workers",
            "3",
            "--timeout",
            "20",
            "--input",
            &ps,
            "--output",
            &os,
            "--overwrite",
        ];
        args.extend_from_slice(extra);
        harp(&args)
    };
    let path = |name: &str| s(&dir.join(name));
    // A ragged row near the end (read by the last worker).
    let mut ragged = lines.clone();
    let short = lines[10].rsplit_once(' ').unwrap().0.to_string();
    ragged[10] = &short;
    let o = run("ragged.txt", &(ragged.join("\n") + "\n"), &[]);
    fails(
        &o,
        &[
            &format!("{}:11: ", path("ragged.txt")),
            "expected 12 values, found 11",
        ],
    );
    // A non-number and a negative distance.
    let mut bad = lines.clone();
    let tok = lines[7].replacen(' ', " abc ", 1);
    bad[7] = &tok;
    let o = run("nan.txt", &(bad.join("\n") + "\n"), &[]);
    fails(&o, &[&format!("{}:8: ", path("nan.txt")), "'abc'"]);
    let neg = lines[4].replacen(' ', " -", 1);
    let mut bad = lines.clone();
    bad[4] = &neg;
    let o = run("neg.txt", &(bad.join("\n") + "\n"), &[]);
    fails(&o, &[&format!("{}:5: ", path("neg.txt")), "is negative"]);
    // Not square: one row too many (text) or 5 values (f64).
    let o = run("tall.txt", &(good.clone() + lines[0] + "\n"), &[]);
    fails(
        &o,
        &[
            &format!("{}:13: 13 rows of 12 values", path("tall.txt")),
            "must be square (N×N); this row is one too many",
        ],
    );
    // One row short: named at the file's last line, not past it.
    let o = run("short.txt", &(lines[..11].join("\n") + "\n"), &[]);
    fails(
        &o,
        &[
            &format!("{}:11: 11 rows of 12 values", path("short.txt")),
            "the file ends there",
        ],
    );
    // Blank lines: the row too many and the end are named at their own lines.
    let o = run(
        "blank.txt",
        &(lines[..6].join("\n") + "\n\n\n" + &lines[6..].join("\n") + "\n" + lines[0] + "\n"),
        &[],
    );
    fails(
        &o,
        &[
            &format!("{}:15: 13 rows", path("blank.txt")),
            "one too many",
        ],
    );
    let o = run("blank-short.txt", &(lines[..11].join("\n") + "\n\n\n"), &[]);
    fails(
        &o,
        &[
            &format!("{}:13: 11 rows", path("blank-short.txt")),
            "the file ends there",
        ],
    );
    // A directory of two files: the place is a file in it, not the directory.
    let d = dir.join("split");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("a.txt"), lines[..6].join("\n") + "\n").unwrap();
    std::fs::write(d.join("b.txt"), lines[6..11].join("\n") + "\n").unwrap();
    let o = harp(&[
        "mds",
        "--workers",
        "2",
        "--timeout",
        "20",
        "--input",
        &s(&d),
        "--output",
        &s(&out),
        "--overwrite",
    ]);
    fails(
        &o,
        &[
            &format!("{}:5: 11 rows", s(&d.join("b.txt"))),
            "the file ends there",
        ],
    );
    let o = run(
        "five.f64",
        "0123456789012345678901234567890123456789",
        &["--format", "f64"],
    );
    fails(
        &o,
        &[&path("five.f64"), "5 f64 values is not a square matrix"],
    );
    // Weights of the wrong shape name their file.
    std::fs::write(dir.join("w.txt"), lines[..11].join("\n")).unwrap();
    let w = path("w.txt");
    let o = run("ok.txt", &good, &["--weights", &w]);
    fails(&o, &[&w, "11 rows, the distances are 12×12"]);
    // An --init of the wrong shape, a missing input.
    std::fs::write(dir.join("init.txt"), "1 2 3\n").unwrap();
    let i = path("init.txt");
    let o = run("ok.txt", &good, &["--init", &i]);
    fails(&o, &["--init", "1 rows of 3 values, expected 12 rows"]);
    let (os, missing) = (s(&out), path("missing.txt"));
    let o = harp(&[
        "mds",
        "--workers",
        "2",
        "--input",
        &missing,
        "--output",
        &os,
        "--overwrite",
    ]);
    fails(&o, &["missing.txt"]);
    assert_eq!(
        std::fs::read_to_string(out.join("coords.txt")).unwrap(),
        "earlier\n"
    );
    assert!(out.join("_SUCCESS").exists());
    assert!(!out.join("stress.txt").exists());
    // No staging left behind by the failed runs.
    assert!(!out.join("_temporary").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
