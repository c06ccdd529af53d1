//! CG on in-process workers (W = 1, 2, 4): the iterates equal, bit for bit, the sequential
//! reference, for the generated Poisson matrix and for a matrix read from files, with either
//! exchange and with an uneven network model; bad input fails every worker with the file and
//! line; a matrix that is not positive definite is refused. A run that fails after an
//! iteration resumes from its last checkpoint to the same bytes and stops where the
//! uninterrupted run stops; a drifting network model is recalibrated by the iterations.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use harp::apps::cg::{self, Entry, Options, Outcome};
use harp::apps::exchange::Exchange;
use harp::checkpoint::dir_name;
use harp::util::Rng;

use common::{all_failed, complete, recovery, run_apps};

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harp-cg-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_on(p: usize, o: &Options, model: bool) -> Vec<harp::Result<Outcome>> {
    run_apps(p, model, |w| cg::run(w, o, |_| {}))
}

fn bits(s: &[f64]) -> Vec<u64> {
    s.iter().map(|v| v.to_bits()).collect()
}

/// Runs `o` on every (workers, exchange, model) case and checks each against the reference.
fn equals_reference(o: &Options, entries: &[Entry], rhs: Option<&[f64]>) -> Vec<f64> {
    let (x, residuals, converged) = cg::reference(entries, rhs, o.tolerance, o.max_iterations);
    // W = 1, 2, 4; each with the default exchange without and with a model, and the engine's
    // allgather (with the model at W = 4).
    let cases = [1, 2, 4].into_iter().flat_map(|p| {
        [
            (Exchange::GatherBroadcast, false),
            (Exchange::GatherBroadcast, true),
            (Exchange::Allgather, p == 4),
        ]
        .map(move |(ex, model)| (p, ex, model))
    });
    for (p, ex, model) in cases {
        let mut o = o.clone();
        o.exchange = ex;
        o.threads = 1 + p % 2;
        let what = format!("p {p} {ex} model {model}");
        let mut all = Vec::new();
        for out in run_on(p, &o, model) {
            let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
            let got: Vec<f64> = out.iterations.iter().map(|i| i.residual).collect();
            assert_eq!(bits(&got), bits(&residuals), "{what}");
            assert_eq!(out.converged, converged, "{what}");
            assert_eq!(out.n, x.len());
            all.extend_from_slice(&out.x);
        }
        assert_eq!(bits(&all), bits(&x), "{what}");
    }
    assert!(converged);
    x
}

#[test]
fn poisson_iterates_equal_the_reference_for_every_worker_count() {
    let g = 14;
    let o = Options {
        grid: Some(g),
        ..Options::default()
    };
    let x = equals_reference(&o, &cg::poisson_lower(g), None);
    // b = A·1: the solution is all ones, to about the tolerance.
    assert!(x.iter().all(|v| (v - 1.0).abs() < 1e-3), "{x:?}");
}

/// A random sparse diagonally dominant matrix in two files (repeated entries, comments, a file
/// without a final newline), with a right-hand side file.
#[test]
fn a_matrix_from_files_equals_the_reference() {
    let dir = tmp("files");
    let n = 150u32;
    let mut rng = Rng::new(11);
    let mut entries: Vec<Entry> = Vec::new();
    let mut diag = vec![1.0f64; n as usize];
    for _ in 0..600 {
        let i = rng.below(n as usize) as u32;
        let j = rng.below(i as usize + 1) as u32;
        if i == j {
            continue;
        }
        let v = rng.uniform(-1.0, 1.0);
        diag[i as usize] += v.abs();
        diag[j as usize] += v.abs();
        entries.push((i, j, v));
    }
    // A repeated entry, added.
    entries.push(entries[3]);
    let (i3, j3, v3) = entries[3];
    diag[i3 as usize] += v3.abs();
    diag[j3 as usize] += v3.abs();
    for i in 0..n {
        entries.push((i, i, diag[i as usize]));
    }
    let line = |e: &Entry| format!("{} {} {}\n", e.0, e.1, e.2);
    let (a, b) = entries.split_at(entries.len() / 2);
    let mdir = dir.join("matrix");
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::write(
        mdir.join("a.txt"),
        format!(
            "# lower triangle\n\n{}",
            a.iter().map(line).collect::<String>()
        ),
    )
    .unwrap();
    let tail: String = b.iter().map(line).collect();
    std::fs::write(mdir.join("b.txt"), tail.trim_end()).unwrap();
    let rhs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let rhs_text: String = rhs
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{i} {v:e}\n"))
        .collect();
    std::fs::write(dir.join("rhs.txt"), rhs_text).unwrap();
    let o = Options {
        input: Some(mdir.to_str().unwrap().into()),
        rhs: Some(dir.join("rhs.txt").to_str().unwrap().into()),
        tolerance: 1e-9,
        ..Options::default()
    };
    let x = equals_reference(&o, &entries, Some(&rhs));
    // It solves the system: A·x = b to the tolerance.
    let full = cg::Rows::from_lower(&entries, 0..n as usize);
    let worst = (0..n as usize)
        .map(|i| (full.row_times(i, &x) - rhs[i]).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-6, "{worst}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_fails_every_worker_naming_file_and_line() {
    let dir = tmp("bad");
    let m = dir.join("m.txt");
    std::fs::write(&m, "0 0 4\n1 0 -1\n1 1 4\n1 2 -1\n").unwrap();
    let o = Options {
        input: Some(m.to_str().unwrap().into()),
        ..Options::default()
    };
    for r in run_on(3, &o, false) {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("m.txt:4:") && e.contains("row 1 < col 2"), "{e}");
    }
    std::fs::write(&m, "0 0 4\n1 0 -1\n1 1 4\n").unwrap();
    let rhs = dir.join("b.txt");
    std::fs::write(&rhs, "0 1\n\n2 5\n").unwrap();
    let o = Options {
        rhs: Some(rhs.to_str().unwrap().into()),
        ..o
    };
    for r in run_on(2, &o, false) {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("b.txt:3:") && e.contains("bad row '2'"), "{e}");
    }
    // Symmetric but indefinite (eigenvalues 4 and −2), with b = (1, 0): p·Ap < 0 in the second
    // iteration, refused, not a wrong answer.
    std::fs::write(&m, "0 0 1\n1 0 3\n1 1 1\n").unwrap();
    std::fs::write(&rhs, "0 1\n").unwrap();
    let o = Options {
        input: Some(m.to_str().unwrap().into()),
        rhs: Some(rhs.to_str().unwrap().into()),
        ..Options::default()
    };
    for r in run_on(2, &o, false) {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("not positive definite"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// --max-iterations stops an unconverged run, which says so.
#[test]
fn max_iterations_stop_a_run_that_has_not_converged() {
    let o = Options {
        grid: Some(20),
        max_iterations: 5,
        ..Options::default()
    };
    for r in run_on(2, &o, false) {
        let out = r.unwrap();
        assert!(!out.converged);
        assert_eq!(out.iterations.len(), 5);
        assert!(out.residual > o.tolerance * out.g0);
    }
}

/// Every worker's part file text, the residuals' bits, whether it converged and the iteration
/// resumed from.
type Solved = (Vec<String>, Vec<u64>, bool, Option<usize>);

fn result(outs: Vec<harp::Result<Outcome>>) -> Solved {
    let outs: Vec<Outcome> = outs.into_iter().map(|r| r.unwrap()).collect();
    let o = &outs[0];
    let residuals: Vec<f64> = o.iterations.iter().map(|i| i.residual).collect();
    (
        outs.iter().map(cg::format_x).collect(),
        bits(&residuals),
        o.converged,
        o.resumed_from,
    )
}

/// W = 1 and 3, a matrix read from a file: checkpoints every 4 iterations, the last worker
/// failing after iteration 9; the resumed run (with the other exchange) writes the bytes of
/// the uninterrupted run, lists the same residuals and stops at the same iteration; its last
/// checkpoint is the converging iteration's. Resumed from that one, nothing more runs and the
/// bytes are the same. Another worker count, another tolerance or another matrix is refused.
#[test]
fn a_failed_run_resumes_to_the_bytes_of_an_uninterrupted_one() {
    let dir = tmp("resume");
    let g = 9;
    let m = dir.join("m.txt");
    let lower: String = cg::poisson_lower(g)
        .iter()
        .map(|(i, j, v)| format!("{i} {j} {v}\n"))
        .collect();
    std::fs::write(&m, &lower).unwrap();
    let o = Options {
        input: Some(m.to_string_lossy().into_owned()),
        ..Options::default()
    };
    for p in [1, 3] {
        let ck = dir.join(format!("ck{p}"));
        let want = result(run_on(p, &o, false));
        let last = want.1.len();
        assert!(
            want.2 && last > 10 && !last.is_multiple_of(4),
            "{last} iterations"
        );

        common::fails_after(p, &ck, (4, 9), &[4, 8], |rec| {
            let f = Options {
                recovery: rec,
                ..o.clone()
            };
            run_on(p, &f, false)
        });

        let r = Options {
            recovery: recovery(&ck, 4, true, None),
            exchange: Exchange::Allgather,
            threads: 3,
            ..o.clone()
        };
        let seen = AtomicUsize::new(0);
        let got = result(run_apps(p, false, |w| {
            cg::run(w, &r, |it| {
                assert!(it.iteration > 8);
                seen.fetch_add(1, Ordering::Relaxed);
            })
        }));
        assert_eq!((&got.0, &got.1, got.2), (&want.0, &want.1, want.2), "p {p}");
        assert_eq!(got.3, Some(8));
        assert_eq!(seen.into_inner(), (last - 8) * p);
        // The converging iteration was saved (it is the last), whatever the period.
        let newest = dir_name(last as u64);
        assert_eq!(complete(&ck).last(), Some(&newest), "p {p}");

        // Resumed from the converged checkpoint: no iteration runs, the same bytes.
        let again = result(run_on(p, &r, false));
        assert_eq!((&again.0, &again.1, again.2), (&want.0, &want.1, true));
        assert_eq!(again.3, Some(last));
    }
    let ck = dir.join("ck3");
    let resume = |p: usize, o: &Options| {
        let o = Options {
            recovery: recovery(&ck, 0, true, None),
            ..o.clone()
        };
        all_failed(run_on(p, &o, false), p - 1)
    };
    let e = resume(2, &o);
    assert!(e.contains("written by 3 workers, this run has 2"), "{e}");
    let e = resume(
        3,
        &Options {
            tolerance: 1e-6,
            ..o.clone()
        },
    );
    assert!(
        e.contains("its tolerance is \"0.00001\", this run's is \"0.000001\""),
        "{e}"
    );
    // The same shape, one value changed: the digest of the entries differs.
    std::fs::write(&m, lower.replacen(" 4\n", " 4.5\n", 1)).unwrap();
    let e = resume(3, &o);
    assert!(e.contains("its matrix is \"entries digest "), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model that promises 10 TB/s drifts from the measured times: the iterations recalibrate it
/// with no call of their own (on by default), the iterates unchanged; with the option off the
/// model is kept.
#[test]
fn iterations_recalibrate_a_drifting_model() {
    let lower = cg::poisson_lower(8);
    let o = Options {
        grid: Some(8),
        tolerance: 1e-8,
        ..Options::default()
    };
    let (x, ..) = cg::reference(&lower, None, o.tolerance, o.max_iterations);
    for on in [true, false] {
        let outs = common::with_drifting_model(on, |w| cg::run(w, &o, |_| {}).unwrap().x);
        let all: Vec<f64> = outs.iter().flat_map(|o| o.0.clone()).collect();
        assert_eq!(bits(&all), bits(&x));
        let kept: Vec<bool> = outs.iter().map(|o| o.1).collect();
        assert_eq!(kept, vec![!on; 3], "net_recalibrate {on}");
    }
}
