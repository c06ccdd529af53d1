//! MF-SGD with model rotation on in-process workers (W = 1, 2, 4): the factors equal, bit for
//! bit, the sequential reference with the same update order, whatever the threads and the
//! rotation mode; bad input fails every worker with the file and line.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harp::apps::mfsgd::{self, GenSpec, Options, Outcome, Rotation};
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

#[test]
fn equals_the_sequential_reference_for_1_2_and_4_workers() {
    let dir = tmp("ref");
    let (train, test) = problem(&dir);
    let train_all = mfsgd::read_all(&LocalStorage, &train).unwrap();
    let test_all = mfsgd::read_all(&LocalStorage, &test).unwrap();
    assert!(train_all.len() > 2000 && test_all.len() > 250);
    let mut opts = Options::new(train.clone());
    opts.test = Some(test.clone());
    opts.rank = 11; // one group of eight lanes and a remainder
    opts.epochs = 4;
    opts.blocks = 3;
    opts.alpha = 0.02;
    opts.decay = 0.8;
    opts.seed = 9;
    opts.threads = 2;
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
