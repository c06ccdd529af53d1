//! MF-SGD with model rotation on in-process workers (W = 1, 2, 4): the factors equal, bit for
//! bit, the sequential reference with the same update order, whatever the threads and the
//! rotation mode; bad input fails every worker with the file and line; a run that fails after
//! an epoch resumes from its checkpoint to the bits of an uninterrupted run.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harp::apps::mfsgd::{self, GenSpec, Options, Outcome, Rotation};
use harp::checkpoint::Recovery;
use harp::storage::LocalStorage;

use common::{config, on_workers};

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harp-mfsgd-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A small generated problem: the training ratings in two files of a directory, the test
/// ratings in one file.
fn problem(dir: &Path) -> (String, String) {
    let (train, test) = mfsgd::generate(&GenSpec {
        users: 70,
        items: 45,
        ratings: 2500,
        rank: 3,
        noise: 0.3,
        skew: 1.5,
        test_fraction: 0.15,
        seed: 5,
    });
    let tdir = dir.join("train");
    std::fs::create_dir_all(&tdir).unwrap();
    let lines: Vec<&str> = train.lines().collect();
    let (a, b) = lines.split_at(lines.len() / 3);
    std::fs::write(tdir.join("a.txt"), a.join("\n") + "\n").unwrap();
    // A comment, a blank line and no final newline.
    std::fs::write(tdir.join("b.txt"), format!("# ratings\n\n{}", b.join("\n"))).unwrap();
    std::fs::write(dir.join("test.txt"), &test).unwrap();
    (
        tdir.to_str().unwrap().to_string(),
        dir.join("test.txt").to_str().unwrap().to_string(),
    )
}

fn run_on(p: usize, opts: &Options) -> Vec<harp::Result<Outcome>> {
    on_workers(p, config(Duration::from_secs(20)), |w| {
        let r = mfsgd::run(&w, opts, |_, _, _, _| {});
        match &r {
            Ok(_) => w.close(),
            Err(e) => w.abort(&e.to_string()),
        }
        r
    })
}

/// Every worker's users and home items, merged and sorted by id.
/// Factors by id.
type Factors = Vec<(u64, Vec<f32>)>;

fn merged(outs: &[Outcome], k: usize) -> (Factors, Factors) {
    let mut users = Vec::new();
    let mut items = Vec::new();
    for o in outs {
        users.extend(
            o.users
                .iter()
                .copied()
                .zip(o.user_factors.chunks(k).map(|c| c.to_vec())),
        );
        items.extend(
            o.items
                .iter()
                .copied()
                .zip(o.item_factors.chunks(k).map(|c| c.to_vec())),
        );
    }
    users.sort_by_key(|x| x.0);
    items.sort_by_key(|x| x.0);
    (users, items)
}

fn bits(v: &Factors) -> Vec<(u64, Vec<u32>)> {
    v.iter()
        .map(|(id, f)| (*id, f.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

/// The options of the small problem: rank 11 (one group of eight lanes and a remainder),
/// 3 blocks, 2 threads.
fn small_options(train: &str, epochs: usize) -> Options {
    let mut opts = Options::new(train);
    opts.rank = 11;
    opts.epochs = epochs;
    opts.blocks = 3;
    opts.alpha = 0.02;
    opts.decay = 0.8;
    opts.seed = 9;
    opts.threads = 2;
    opts
}

#[test]
fn equals_the_sequential_reference_for_1_2_and_4_workers() {
    let dir = tmp("ref");
    let (train, test) = problem(&dir);
    let train_all = mfsgd::read_all(&LocalStorage, &train).unwrap();
    let test_all = mfsgd::read_all(&LocalStorage, &test).unwrap();
    assert!(train_all.len() > 2000 && test_all.len() > 250);
    let mut opts = small_options(&train, 4);
    opts.test = Some(test.clone());
    let mut finals = Vec::new();
    for p in [1usize, 2, 4] {
        let want = mfsgd::reference(&train_all, &test_all, &opts, p);
        let outs: Vec<Outcome> = run_on(p, &opts).into_iter().map(|r| r.unwrap()).collect();
        let (users, items) = merged(&outs, opts.rank);
        assert_eq!(users.len(), want.users.len(), "p={p}");
        assert_eq!(items.len(), want.items.len(), "p={p}");
        assert_eq!(bits(&users), bits(&want.users), "p={p}: user factors");
        assert_eq!(bits(&items), bits(&want.items), "p={p}: item factors");
        for o in &outs {
            assert_eq!(o.rmse.len(), opts.epochs);
            // The test errors are summed in another order: equal to rounding.
            for (a, b) in o.rmse.iter().zip(&want.rmse) {
                assert!((a - b).abs() <= 1e-12 * b, "p={p}: {a} vs {b}");
            }
            assert_eq!(o.rmse, outs[0].rmse, "the same RMSE on every worker");
            assert_eq!(o.ratings as usize, train_all.len());
            assert_eq!(o.test_ratings as usize, test_all.len());
        }
        // The RMSE falls.
        assert!(want.rmse[3] < want.rmse[0], "{:?}", want.rmse);
        // One compute thread and blocking rotation: the same bits.
        let mut one = opts.clone();
        one.threads = 1;
        one.rotation = Rotation::Blocking;
        let outs1: Vec<Outcome> = run_on(p, &one).into_iter().map(|r| r.unwrap()).collect();
        let (u1, i1) = merged(&outs1, opts.rank);
        assert_eq!(bits(&u1), bits(&users), "p={p}: one thread, blocking");
        assert_eq!(bits(&i1), bits(&items), "p={p}: one thread, blocking");
        finals.push(*want.rmse.last().unwrap());
    }
    // Another update order, nearly the same model.
    for f in &finals {
        assert!((f / finals[0] - 1.0).abs() < 0.05, "{finals:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_fails_every_worker_with_the_file_and_line() {
    let dir = tmp("bad");
    let (train, test) = problem(&dir);
    // Line 3 of a test file is bad.
    let bad = dir.join("bad-test.txt");
    std::fs::write(&bad, "1 2 3\n4 5 6\n7 8 x\n9 9 9\n").unwrap();
    for p in [1usize, 2, 4] {
        let mut opts = Options::new(train.clone());
        opts.test = Some(bad.to_str().unwrap().to_string());
        opts.epochs = 1;
        let t0 = Instant::now();
        let res = run_on(p, &opts);
        assert!(t0.elapsed() < Duration::from_secs(15));
        for r in &res {
            let e = r.as_ref().unwrap_err().to_string();
            assert!(e.contains("bad-test.txt:3: "), "p={p}: {e}");
            assert!(e.contains("bad rating 'x'"), "p={p}: {e}");
        }
    }
    // A missing input; a bad option.
    let mut opts = Options::new(dir.join("nope").to_str().unwrap().to_string());
    opts.test = Some(test.clone());
    for r in run_on(2, &opts) {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
    }
    let mut opts = Options::new(train.clone());
    opts.rank = 0;
    for r in run_on(2, &opts) {
        assert!(r.unwrap_err().to_string().contains("--rank"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn recovery(dir: &Path, every: usize, resume: bool, fail: Option<(usize, usize)>) -> Recovery {
    Recovery {
        every,
        dir: Some(dir.to_str().unwrap().to_string()),
        resume,
        fail_after: fail.map(|(e, r)| (e, Some(r))),
        job: String::new(),
    }
}

/// Each worker's factors as the job writes them, and its RMSE curve (bits).
fn results(outs: &[Outcome], k: usize) -> Vec<(String, Vec<u64>)> {
    outs.iter()
        .map(|o| {
            let rmse = o.rmse.iter().map(|x| x.to_bits()).collect();
            (mfsgd::format_factors(o, k), rmse)
        })
        .collect()
}

/// A run with checkpoints every 2 epochs that fails after epoch 3 (worker 0 or the last),
/// resumed, ends with the factors (the part files' bytes) and the RMSE curve of an
/// uninterrupted run, for W = 1 and 3, both rotations, with and without a test file. A resume
/// with another worker count or another --rank is refused naming what differs.
#[test]
fn a_resumed_run_ends_with_the_bits_of_an_uninterrupted_one() {
    let dir = tmp("resume");
    let (train, test) = problem(&dir);
    let ck = dir.join("ck");
    let base = small_options(&train, 5);
    let cases = [
        (1usize, Rotation::Pipelined, true, 0usize),
        (1, Rotation::Blocking, false, 0),
        (3, Rotation::Pipelined, false, 2),
        (3, Rotation::Blocking, true, 0),
    ];
    for (p, rotation, with_test, failing) in cases {
        let what = format!("W={p}, {rotation:?}, test {with_test}");
        let mut opts = base.clone();
        opts.test = with_test.then(|| test.clone());
        opts.rotation = rotation;
        let full: Vec<Outcome> = run_on(p, &opts).into_iter().map(|r| r.unwrap()).collect();
        let want = results(&full, opts.rank);
        assert_eq!(full[0].rmse.len(), if with_test { 5 } else { 0 }, "{what}");
        assert_eq!(full[0].resumed_from, None);

        let mut failing_opts = opts.clone();
        failing_opts.recovery = recovery(&ck, 2, false, Some((3, failing)));
        let errs = run_on(p, &failing_opts);
        let e = errs[failing].as_ref().unwrap_err().to_string();
        assert!(
            e.contains("injected failure after iteration 3"),
            "{what}: {e}"
        );
        assert!(
            errs.iter().all(|r| r.is_err()),
            "{what}: every worker fails"
        );
        assert!(ck.join(harp::checkpoint::dir_name(2)).is_dir(), "{what}");

        let mut resumed = opts.clone();
        resumed.recovery = recovery(&ck, 2, true, None);
        let outs: Vec<Outcome> = run_on(p, &resumed)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        for o in &outs {
            assert_eq!(o.resumed_from, Some(2), "{what}");
            assert_eq!(o.epoch_s.len(), 5, "{what}: the checkpoint's seconds first");
        }
        assert!(
            results(&outs, opts.rank) == want,
            "{what}: the resumed factors or RMSE differ"
        );
    }

    // The checkpoints of the last case (3 workers, --rank 11, saved after epochs 4 and 5).
    let mut other = base.clone();
    other.test = Some(test.clone());
    other.recovery = recovery(&ck, 2, true, None);
    for r in run_on(2, &other) {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("written by 3 workers, this run has 2"), "{e}");
    }
    other.rank = 4;
    for r in run_on(3, &other) {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("its rank is 11, this run's is 4"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
