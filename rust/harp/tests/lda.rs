//! `harp::apps::lda` on in-process workers: one worker and one thread is the sequential sampler
//! exactly; 1, 2 and 4 workers (with 1 or 2 threads) keep every count consistent, converge to
//! log-likelihoods within 1 % of each other and find the topics a corpus was generated from;
//! bad input fails every worker naming the file and line; a run resumed from a checkpoint ends
//! with the bits of an uninterrupted one.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use harp::apps::lda::{self, sampler, Generate, Options, Outcome, Rotation, Share, Words};
use harp::checkpoint::{dir_name, Recovery};

use common::{config, on_workers};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harp-lda-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A corpus of `docs` documents of about `length` words among `vocabulary`, from `topics`.
fn generate(
    docs: usize,
    vocabulary: usize,
    topics: usize,
    length: usize,
    seed: u64,
    ids: bool,
) -> Generate {
    Generate {
        docs,
        vocabulary,
        topics,
        length,
        seed,
        ids,
    }
}

fn corpus(dir: &std::path::Path, g: &Generate) -> String {
    let mut text = Vec::new();
    g.write(&mut text).unwrap();
    let f = dir.join("corpus.txt");
    std::fs::write(&f, text).unwrap();
    f.to_str().unwrap().to_string()
}

/// A fresh directory `name` with corpus `g` in it, and the options of `iterations` with `topics`
/// on it.
fn setup(name: &str, g: &Generate, topics: usize, iterations: usize) -> (PathBuf, Options) {
    let dir = tmpdir(name);
    let mut o = Options::new(corpus(&dir, g));
    o.topics = topics;
    o.iterations = iterations;
    (dir, o)
}

fn run(p: usize, o: &Options) -> Vec<Outcome> {
    on_workers(p, config(Duration::from_secs(30)), |w| {
        let r = lda::run(&w, o, |_| {}).unwrap();
        w.close();
        r
    })
}

/// The word-topic counts of all slices, `k` per word, for `v` words.
fn word_topic(out: &[Outcome], v: usize, k: usize) -> Vec<i32> {
    let mut nwk = vec![0; v * k];
    for o in out {
        for (i, &w) in o.slice_words.iter().enumerate() {
            nwk[w as usize * k..(w as usize + 1) * k]
                .copy_from_slice(&o.slice_counts[i * k..(i + 1) * k]);
        }
    }
    nwk
}

/// Every count agrees with every other: words, documents and totals.
fn consistent(out: &[Outcome], v: usize, k: usize) {
    let nwk = word_topic(out, v, k);
    let tokens = out[0].tokens as i64;
    assert_eq!(out[0].nk.iter().sum::<i64>(), tokens);
    for o in out {
        assert_eq!(o.nk, out[0].nk, "every worker has the same totals");
        assert!(o.ndk.iter().all(|&c| c >= 0) && o.slice_counts.iter().all(|&c| c >= 0));
    }
    for t in 0..k {
        let by_word: i64 = (0..v).map(|w| nwk[w * k + t] as i64).sum();
        let by_doc: i64 = out
            .iter()
            .map(|o| {
                o.ndk
                    .iter()
                    .skip(t)
                    .step_by(k)
                    .map(|&c| c as i64)
                    .sum::<i64>()
            })
            .sum();
        assert_eq!((by_word, by_doc), (out[0].nk[t], out[0].nk[t]), "topic {t}");
    }
}

#[test]
fn one_worker_is_the_sequential_sampler() {
    let dir = tmpdir("sequential");
    let g = generate(120, 300, 6, 50, 7, true);
    let input = corpus(&dir, &g);
    let mut share = Share::new();
    for l in std::fs::read(&input).unwrap().split(|c| *c == b'\n') {
        share.parse_line(l, Words::Ids).unwrap();
    }
    let docs: Vec<(Vec<u8>, Vec<u32>)> = (0..share.docs())
        .map(|d| (share.ids[d].clone(), share.doc(d).to_vec()))
        .collect();
    let v = *share.words.iter().max().unwrap() as usize + 1;
    let k = 8;
    let want = sampler::sequential(&docs, v, k, 0.1, 0.01, 5, 6);
    let mut o = Options::new(input);
    o.words = Words::Ids;
    o.topics = k;
    o.iterations = 6;
    o.seed = 5;
    let got = run(1, &o);
    consistent(&got, v, k);
    assert_eq!(got[0].ndk, want.ndk, "document-topic counts");
    assert_eq!(word_topic(&got, v, k), want.nwk, "word-topic counts");
    let nk: Vec<i64> = want.nk.iter().map(|&n| n as i64).collect();
    assert_eq!(got[0].nk, nk);
    for (a, b) in got[0].iterations.iter().zip(&want.ll) {
        assert!((a.ll - b).abs() <= 1e-12 * b.abs(), "{} vs {b}", a.ll);
    }
    // The likelihood rises from the random start.
    assert!(want.ll[5] > want.ll[0], "{:?}", want.ll);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn workers_1_2_4_agree_and_find_the_generating_topics() {
    let g = generate(1500, 500, 5, 100, 3, false);
    let (dir, mut o) = setup("workers", &g, 5, 40);
    o.top_words = 10;
    let mut finals = Vec::new();
    for (p, threads) in [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1)] {
        o.threads = threads;
        let out = run(p, &o);
        let v = out[0].vocabulary;
        assert_eq!(v, 500, "every word occurs");
        consistent(&out, v, 5);
        let lls: Vec<f64> = out[0].iterations.iter().map(|x| x.ll).collect();
        for r in &out {
            let same: Vec<f64> = r.iterations.iter().map(|x| x.ll).collect();
            assert_eq!(same, lls, "every worker reports the same log-likelihood");
        }
        assert!(lls[39] > lls[0] + 0.3, "W = {p}, T = {threads}: {lls:?}");
        finals.push(lls[39]);
        // A reproducible run for a given W, T and seed.
        let again = run(p, &o);
        assert_eq!(again[0].nk, out[0].nk);
        assert_eq!(again[0].ndk, out[0].ndk);
        // Each learned topic's top words come from one generating band, and every band is
        // found (the vocabulary is sorted: token wN is not word N).
        let topics = out[0].topics.as_ref().expect("rank 0 has the topics");
        let mut bands = std::collections::BTreeSet::new();
        for line in topics.lines() {
            let (_, words) = line.split_once('\t').unwrap();
            let mut count = [0usize; 5];
            for wp in words.split(' ') {
                let (name, _) = wp.split_once(':').unwrap();
                let id: usize = name[1..].parse().unwrap();
                count[g.band_of(id)] += 1;
            }
            let (band, &most) = count.iter().enumerate().max_by_key(|x| x.1).unwrap();
            assert!(most >= 8, "W = {p}, T = {threads}: {line}");
            bands.insert(band);
        }
        assert_eq!(bands.len(), 5, "W = {p}, T = {threads}: {topics}");
        assert!(out.iter().skip(1).all(|r| r.topics.is_none()));
        // Every document appears once among the part files, its shares sum to about 1.
        let lines: Vec<String> = out
            .iter()
            .flat_map(|r| r.mixtures.lines().map(String::from).collect::<Vec<_>>())
            .collect();
        assert_eq!(lines.len(), 1500);
    }
    let (lo, hi) = finals
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(
        (hi - lo) / hi.abs() < 0.01,
        "final log-likelihoods {finals:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_fails_every_worker_naming_file_and_line() {
    let dir = tmpdir("bad");
    let f = dir.join("docs.txt");
    let good = "d1 1 2 3\nd2 4 5\n";
    std::fs::write(&f, format!("{good}{good}d3 7 x8 9\n{good}")).unwrap();
    let mut o = Options::new(f.to_str().unwrap());
    o.words = Words::Ids;
    o.topics = 3;
    o.iterations = 2;
    for p in [1, 2, 4] {
        let errs = on_workers(p, config(Duration::from_secs(30)), |w| {
            let e = lda::run(&w, &o, |_| {}).unwrap_err().to_string();
            drop(w);
            e
        });
        for e in errs {
            assert!(
                e.contains(&format!("{}:5:", f.display())) && e.contains("bad word id 'x8'"),
                "{e}"
            );
        }
    }
    // As tokens the same file is fine.
    o.words = Words::Tokens;
    let out = run(2, &o);
    assert_eq!(out[0].tokens, 18);
    // No words at all, a missing input, bad options: every worker fails with the reason.
    std::fs::write(&f, "d1\nd2\n\n").unwrap();
    let errs = on_workers(2, config(Duration::from_secs(30)), |w| {
        lda::run(&w, &o, |_| {}).unwrap_err().to_string()
    });
    assert!(errs.iter().all(|e| e.contains("hold no words")), "{errs:?}");
    let mut missing = o.clone();
    missing.input = dir.join("nothing").to_str().unwrap().into();
    let errs = on_workers(2, config(Duration::from_secs(30)), |w| {
        lda::run(&w, &missing, |_| {}).unwrap_err().to_string()
    });
    assert!(errs.iter().all(|e| e.contains("nothing")), "{errs:?}");
    for (topics, alpha) in [(0, 0.1), (70000, 0.1), (3, 0.0), (3, f64::NAN)] {
        let mut b = o.clone();
        b.topics = topics;
        b.alpha = alpha;
        assert!(b.validate().is_err(), "{topics} {alpha}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs LDA on `p` in-process workers; a worker that fails is dropped (which aborts it, as a
/// dead process would), so the others fail too.
fn run_result(p: usize, o: &Options) -> Vec<harp::Result<Outcome>> {
    on_workers(p, config(Duration::from_secs(30)), |w| {
        let r = lda::run(&w, o, |_| {});
        if r.is_ok() {
            w.close();
        }
        r
    })
}

/// What a run's result files and curve are made of, bit for bit: each worker's part file, the
/// topics, the log-likelihood of every iteration, and the counts.
type Bits = Vec<(
    String,
    Option<String>,
    Vec<u64>,
    Vec<i32>,
    Vec<i32>,
    Vec<i64>,
)>;

fn bits(out: Vec<harp::Result<Outcome>>) -> Bits {
    out.into_iter()
        .map(|r| {
            let o = r.expect("worker succeeded");
            let ll = o.iterations.iter().map(|x| x.ll.to_bits()).collect();
            (o.mixtures, o.topics, ll, o.ndk, o.slice_counts, o.nk)
        })
        .collect()
}

fn recovery(dir: &std::path::Path, every: usize, resume: bool, fail: Option<usize>) -> Recovery {
    Recovery {
        every,
        dir: Some(dir.to_str().unwrap().to_string()),
        resume,
        fail_after: fail.map(|i| (i, None)),
        job: String::new(),
    }
}

/// With 1 and 3 workers (2 threads on 3): a run with checkpoints every 2 iterations that fails
/// after iteration 5, then resumed, ends with the part files, topics, log-likelihood curve and
/// counts of an uninterrupted run, bit for bit. A resume with another worker count or other
/// threads is refused naming what differs.
#[test]
fn a_resumed_run_is_bit_identical_to_an_uninterrupted_one() {
    let g = generate(200, 300, 5, 40, 9, false);
    let (dir, base) = setup("resume", &g, 6, 7);
    for (p, threads) in [(1, 1), (3, 2)] {
        let ck = dir.join(format!("ck-{p}"));
        let mut o = base.clone();
        o.threads = threads;
        let full = run_result(p, &o);
        assert!(full
            .iter()
            .all(|r| r.as_ref().unwrap().resumed_from.is_none()));
        let full = bits(full);

        o.recovery = recovery(&ck, 2, false, Some(5));
        let errs: Vec<String> = run_result(p, &o)
            .into_iter()
            .map(|r| r.expect_err("every worker fails").to_string())
            .collect();
        assert!(
            errs[p - 1].contains("injected failure after iteration 5"),
            "{errs:?}"
        );
        let names: Vec<String> = std::fs::read_dir(&ck)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| ck.join(n).join("manifest.json").exists())
            .collect();
        assert!(
            names.contains(&dir_name(4)) && !names.contains(&dir_name(6)),
            "{names:?}"
        );

        o.recovery = recovery(&ck, 2, true, None);
        let resumed = run_result(p, &o);
        for r in &resumed {
            assert_eq!(r.as_ref().unwrap().resumed_from, Some(4), "W = {p}");
        }
        assert_eq!(bits(resumed), full, "W = {p}");
    }
    // Another worker count, or other threads, is refused on every worker, naming what differs.
    let mut o = base;
    o.threads = 2;
    o.recovery = recovery(&dir.join("ck-3"), 0, true, None);
    for r in run_result(2, &o) {
        let e = r.expect_err("refused").to_string();
        assert!(e.contains("written by 3 workers, this run has 2"), "{e}");
    }
    o.threads = 1;
    for r in run_result(3, &o) {
        let e = r.expect_err("refused").to_string();
        assert!(e.contains("its threads is 2, this run's is 1"), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two slices per worker: the pipelined rotation (the rotate of one slice overlapping the
/// sampling of the other) and the blocking one draw the same topics, so every count, part
/// file and log-likelihood is the same.
#[test]
fn pipelined_and_blocking_rotation_give_the_same_counts() {
    let g = generate(300, 400, 5, 40, 13, false);
    let (dir, mut o) = setup("rotation", &g, 7, 4);
    for (p, threads) in [(2, 1), (3, 2), (4, 1)] {
        o.threads = threads;
        o.rotation = Rotation::Blocking;
        let blocking = run(p, &o);
        consistent(&blocking, blocking[0].vocabulary, 7);
        o.rotation = Rotation::Pipelined;
        let pipelined = bits(run_result(p, &o));
        assert_eq!(
            pipelined,
            bits(blocking.into_iter().map(Ok).collect()),
            "W = {p}, T = {threads}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
