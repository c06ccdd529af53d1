//! Recovery of the iterative applications on in-process workers (`harp::checkpoint::Recovery`):
//! PageRank, MDS and layout run to the end; the same run with checkpoints and a failure
//! injected after an iteration fails every worker; `resume` continues from the last complete
//! checkpoint and ends with the same bits. A resume with another worker count or other options
//! is refused naming what differs. And the recalibration on drift that every iteration runs.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use harp::apps::{layout, mds, pagerank};
use harp::checkpoint::{dir_name, Recovery};
use harp::util::Rng;
use harp::{Config, Result, Worker};

use common::{all_failed, complete, on_workers, recovery};

/// A fresh directory for test `name` with a random graph of `n` vertices and `m` edges in it
/// (none for `m` = 0), and the path of a checkpoint directory under it.
fn setup(name: &str, n: u64, m: usize, seed: u64) -> (PathBuf, String, PathBuf) {
    let dir = std::env::temp_dir().join(format!("harp-recovery-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let input = match m {
        0 => String::new(),
        _ => graph_file(&dir, n, m, seed),
    };
    (dir.clone(), input, dir.join("ck"))
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Runs `f` on `p` in-process workers; a worker that fails is dropped (which aborts it, as a
/// dead process would), so the others fail too.
fn run_on<T: Send>(p: usize, f: impl Fn(&Worker) -> Result<T> + Sync) -> Vec<Result<T>> {
    let cfg = common::config(Duration::from_secs(30));
    on_workers(p, cfg, |w| {
        let r = f(&w);
        if r.is_ok() {
            w.close();
        }
        r
    })
}

fn all_ok<T>(v: Vec<Result<T>>) -> Vec<T> {
    v.into_iter()
        .map(|r| r.expect("worker succeeded"))
        .collect()
}

/// A random directed graph of `n` vertices and `m` edges (some vertices dangling), as lines.
fn graph_file(dir: &Path, n: u64, m: usize, seed: u64) -> String {
    let mut rng = Rng::new(seed);
    let mut text = String::new();
    for _ in 0..m {
        let a = rng.next_u64() % n;
        let b = rng.next_u64() % (n + n / 4); // ids past n only as targets: dangling
        text.push_str(&format!("{a} {b}\n"));
    }
    let f = dir.join("edges.txt");
    std::fs::write(&f, text).unwrap();
    s(&f)
}

type Ranks = Vec<(Vec<i64>, Vec<u64>, usize, Option<usize>)>;

fn pagerank_on(p: usize, o: &pagerank::Options) -> Vec<Result<pagerank::Outcome>> {
    run_on(p, |w| pagerank::run(w, o, |_, _| {}))
}

/// Each worker's vertices and the bits of their ranks, iterations timed, resumed from.
fn ranks(v: Vec<Result<pagerank::Outcome>>) -> Ranks {
    all_ok(v)
        .into_iter()
        .map(|o| {
            let bits = o.ranks.iter().map(|r| r.to_bits()).collect();
            (o.vertices, bits, o.iteration_s.len(), o.resumed_from)
        })
        .collect()
}

#[test]
fn pagerank_resumes_bit_identically_after_a_failure() {
    let (dir, input, _) = setup("pagerank", 300, 2500, 5);
    for messages in [pagerank::Messages::Compiled, pagerank::Messages::KeyValue] {
        let ck = dir.join(format!("ck-{messages:?}"));
        let mut o = pagerank::Options::new(input.clone(), 7);
        o.messages = messages;
        let full = ranks(pagerank_on(3, &o));
        assert!(full.iter().all(|r| r.3.is_none() && r.2 == 7));

        // Checkpoints after 3 and 6 (every 3) and the last; rank 1 fails after iteration 5.
        o.recovery = recovery(&ck, 3, false, Some((5, 1)));
        let e = all_failed(pagerank_on(3, &o), 1);
        assert!(e.contains("injected failure after iteration 5"), "{e}");
        assert_eq!(complete(&ck), vec![dir_name(3)]);

        o.recovery = recovery(&ck, 3, true, None);
        let resumed = ranks(pagerank_on(3, &o));
        for (r, (a, b)) in full.iter().zip(&resumed).enumerate() {
            assert_eq!((&a.0, &a.1), (&b.0, &b.1), "rank {r}, {messages:?}");
            assert_eq!((b.2, b.3), (7, Some(3)), "rank {r}");
        }
        // The resumed run saved 6 and 7 and kept the two newest.
        assert_eq!(complete(&ck), vec![dir_name(6), dir_name(7)]);
    }

    // Another worker count, or another damping factor, is refused on every worker.
    let ck = dir.join("ck-Compiled");
    let mut o = pagerank::Options::new(input.clone(), 9);
    o.recovery = recovery(&ck, 0, true, None);
    let e = all_failed(pagerank_on(2, &o), 1);
    assert!(
        e.contains("checkpoint at iteration 7")
            && e.contains("written by 3 workers, this run has 2"),
        "{e}"
    );
    o.damping = 0.8;
    let e = all_failed(pagerank_on(3, &o), 0);
    assert!(e.contains("its damping is 0.85, this run's is 0.8"), "{e}");
    // Fewer iterations than the checkpoint holds.
    let mut o = pagerank::Options::new(input.clone(), 5);
    o.recovery = recovery(&ck, 0, true, None);
    let e = all_failed(pagerank_on(3, &o), 2);
    assert!(e.contains("past the 5 iterations asked for"), "{e}");
    // A resume with nothing to resume from starts afresh.
    let empty = dir.join("none");
    let mut o = pagerank::Options::new(input, 7);
    let fresh = ranks(pagerank_on(3, &o));
    o.recovery = recovery(&empty, 0, true, None);
    let got = ranks(pagerank_on(3, &o));
    assert_eq!(fresh, got);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An N×N text matrix file of `values`.
fn matrix_file(dir: &Path, name: &str, values: &[f64], n: usize) -> String {
    let f = dir.join(name);
    std::fs::write(&f, mds::input::format_rows(values, n)).unwrap();
    s(&f)
}

fn mds_bits(v: Vec<Result<mds::Outcome>>) -> Vec<(Vec<u64>, Vec<u64>, Option<usize>)> {
    all_ok(v)
        .into_iter()
        .map(|o| {
            let x = o.coords.iter().map(|c| c.to_bits()).collect();
            let st = o.iterations.iter().map(|i| i.stress.to_bits()).collect();
            (x, st, o.resumed_from)
        })
        .collect()
}

#[test]
fn mds_resumes_bit_identically_after_a_failure() {
    let (dir, _, _) = setup("mds", 0, 0, 0);
    let n = 48;
    let d = mds::euclidean_distances(n, 3, 11, 0.05);
    let input = matrix_file(&dir, "d.txt", &d, n);
    let mut rng = Rng::new(4);
    let mut wts = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..i {
            let x = 0.5 + rng.next_f64();
            wts[i * n + j] = x;
            wts[j * n + i] = x;
        }
    }
    let weights = matrix_file(&dir, "w.txt", &wts, n);
    // Guttman, and CG with weights under annealing.
    for (k, weighted) in [false, true].into_iter().enumerate() {
        let ck = dir.join(format!("ck{k}"));
        let mut o = mds::Options::new(input.clone());
        o.iterations = 8;
        if weighted {
            o.weights = Some(weights.clone());
            o.temperature = 0.05;
        }
        let run = |o: &mds::Options| run_on(3, |w| mds::run(w, o, |_| {}));
        let full = mds_bits(run(&o));
        o.recovery = recovery(&ck, 2, false, Some((5, 0)));
        let e = all_failed(run(&o), 0);
        assert!(e.contains("injected failure after iteration 5"), "{e}");
        assert_eq!(complete(&ck), vec![dir_name(2), dir_name(4)]);
        o.recovery = recovery(&ck, 2, true, None);
        let resumed = mds_bits(run(&o));
        for (a, b) in full.iter().zip(&resumed) {
            assert_eq!((&a.0, &a.1), (&b.0, &b.1), "weighted {weighted}");
            assert_eq!(b.2, Some(4));
        }
        // Another solver's checkpoint is not this run's.
        if weighted {
            o.temperature = 0.0;
            o.recovery = recovery(&ck, 0, true, None);
            let e = all_failed(run(&o), 1);
            assert!(
                e.contains("its temperature is 0.05, this run's is 0.0"),
                "{e}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn layout_resumes_bit_identically_after_a_failure() {
    let (dir, input, ck) = setup("layout", 70, 160, 9);
    let mut o = layout::Options::new(input);
    o.iterations = 9;
    let run = |o: &layout::Options| run_on(4, |w| layout::run(w, o, |_| {}));
    let bits = |v: Vec<Result<layout::Outcome>>| -> Vec<(Vec<u64>, usize, Option<usize>)> {
        all_ok(v)
            .into_iter()
            .map(|o| {
                let p = o.positions.iter().map(|c| c.to_bits()).collect();
                (p, o.iterations.len(), o.resumed_from)
            })
            .collect()
    };
    let full = bits(run(&o));
    o.recovery = recovery(&ck, 4, false, Some((6, 3)));
    let e = all_failed(run(&o), 3);
    assert!(e.contains("injected failure after iteration 6"), "{e}");
    o.recovery = recovery(&ck, 4, true, None);
    let resumed = bits(run(&o));
    for (a, b) in full.iter().zip(&resumed) {
        assert_eq!(a.0, b.0);
        assert_eq!((b.1, b.2), (9, Some(4)));
    }
    // The temperatures depend on --iterations: a resume must keep it.
    o.iterations = 12;
    let e = all_failed(run(&o), 0);
    assert!(e.contains("its iterations is 9, this run's is 12"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A torn newest checkpoint (a part missing) is passed over for the previous complete one, and
/// the result is still the same bits.
#[test]
fn a_torn_checkpoint_is_passed_over() {
    let (dir, input, ck) = setup("torn", 120, 900, 2);
    let mut o = pagerank::Options::new(input, 6);
    let full = ranks(pagerank_on(2, &o));
    o.recovery = recovery(&ck, 2, false, Some((4, 0)));
    all_failed(pagerank_on(2, &o), 1);
    assert_eq!(complete(&ck), vec![dir_name(2), dir_name(4)]);
    std::fs::remove_file(ck.join(dir_name(4)).join("part-00001")).unwrap();
    o.recovery = recovery(&ck, 2, true, None);
    let got = ranks(pagerank_on(2, &o));
    for (a, b) in full.iter().zip(&got) {
        assert_eq!((&a.0, &a.1), (&b.0, &b.1));
        assert_eq!(b.3, Some(2));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The recalibration on drift is on by default at the end of every iteration: a model that
/// promises far more than the network gives is replaced once 16 broadcasts drifted, with no call
/// but [`harp::checkpoint::Recovering::after_iteration`]; with `net_recalibrate` off it stays.
#[test]
fn iterations_recalibrate_a_drifting_model_by_default() {
    use harp::collective::BroadcastAlgorithm;
    use harp::worker::DRIFT_WINDOW;
    use harp::{Array, Collectives, Combiner, NetModel, Opts, Table};
    for on in [true, false] {
        let cfg = common::drift_config(on);
        assert!(Config::default().net_recalibrate, "on by default");
        let promise = NetModel::uniform(3, 1e-9, 1e13);
        let kept = on_workers(3, cfg, |w| {
            w.set_net_model(Some(promise.clone())).unwrap();
            let rec = Recovery::default().open(&w, "test").unwrap();
            let meta = serde_json::Value::Null;
            for it in 1..=DRIFT_WINDOW + 1 {
                let mut t = Table::new(Combiner::Sum);
                if w.rank() == 0 {
                    t.add(0, Array::from_slice(w.pool(), &vec![1.0f64; 1 << 17]))
                        .unwrap();
                }
                let o = Opts::default().algorithm(BroadcastAlgorithm::Chain);
                w.broadcast("b", &mut t, o).unwrap();
                rec.after_iteration(&w, it, 100, &meta, || Ok(Vec::<(&str, Table)>::new()))
                    .unwrap();
            }
            let kept = w.net_model().as_deref() == Some(&promise);
            w.close();
            kept
        });
        assert_eq!(kept, vec![!on; 3], "net_recalibrate {on}");
    }
}
