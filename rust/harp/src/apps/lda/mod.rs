//! Latent Dirichlet allocation by collapsed Gibbs sampling with model rotation (docs/lda.md).
//!
//! Input: one document per line, `doc_id word word …` (fields separated by spaces or tabs;
//! words are tokens, or integer ids with [`Words::Ids`]); blank lines are skipped, a line with an
//! id alone is an empty document. Each worker reads its Hadoop-style share of the lines and
//! keeps its documents for the whole run.
//!
//! The model: the document-topic counts `n_dk` stay with their documents; the word-topic table
//! `n_wk` is cut into W slices, word w in slice `w mod W`, and each slice into T sub-slices, one
//! per compute thread (`(w / W) mod T`). An iteration is W steps; in each, a worker samples
//! the tokens of its documents whose words are in the slice it holds, then passes the slice on
//! with `rotate` (worker r to r + 1): at step t worker r holds slice `(r − t) mod W`, and after W
//! steps every slice is back with its first holder. No two workers touch a slice at once, so
//! every word-topic count is exact. Inside a step, T rounds: in round q thread i samples its
//! block of documents against sub-slice `(i + q) mod T`, so the threads share neither
//! documents nor words. The topic totals `n_k` are shared by everyone: each thread samples with
//! its own copy, the copies' changes are added up after every round, and the workers' changes
//! after every step by an allreduce of the deltas, so every worker starts every step with the
//! exact totals (within a step a worker does not see the others' changes: the only
//! approximation, as in AD-LDA).
//!
//! Each token's topic is drawn from `(n_dk + α)(n_wk + β)/(n_k + Vβ)` ([`sampler::draw`]);
//! random numbers come from one stream per (iteration, slice, document block, sub-slice), and
//! the first topics from a hash of the document id and position, so a run is reproducible for
//! a given W, T and seed, and with W = T = 1 it is the sequential sampler
//! ([`sampler::sequential`]) exactly.

mod corpus;
pub mod sampler;

use std::sync::Arc;
use std::time::Instant;

pub use corpus::{load_share, merge_vocabulary, Generate, Share, Words, MAX_WORD_ID};
use sampler::{draw, inverse, prefetch, stream, uniform_f32, LgammaTable, Scratch};

use crate::checkpoint::{Recovering, Recovery};
use crate::data::{Array, Combiner, Partitioner, Table};
use crate::error::{Error, Result};
use crate::util::quote;
use crate::util::rng::Rng;
use crate::worker::Worker;
use crate::{Collectives, Opts};

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Documents: a file or a directory of files.
    pub input: String,
    pub topics: usize,
    pub alpha: f64,
    pub beta: f64,
    pub iterations: usize,
    pub seed: u64,
    /// Compute threads per worker.
    pub threads: usize,
    pub words: Words,
    /// Words listed per topic in the result.
    pub top_words: usize,
    /// Checkpoints and resume (`--checkpoint-every`, `--checkpoint-dir`, `--resume`).
    pub recovery: Recovery,
}

impl Options {
    pub fn new(input: impl Into<String>) -> Options {
        let j = &crate::config::apps::LDA;
        Options {
            input: input.into(),
            topics: j.default_of("topics"),
            alpha: j.default_of("alpha"),
            beta: j.default_of("beta"),
            iterations: j.default_of("iterations"),
            seed: j.default_of("seed"),
            threads: j.default_of("threads"),
            words: j.default_of("words"),
            top_words: j.default_of("top_words"),
            recovery: Recovery::default(),
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.topics == 0 || self.topics > u16::MAX as usize {
            return Err(Error::config(format!(
                "--topics must be from 1 to {}, not {}",
                u16::MAX,
                self.topics
            )));
        }
        for (name, v) in [("--alpha", self.alpha), ("--beta", self.beta)] {
            if !(v.is_finite() && v > 0.0 && v <= 1e6) {
                return Err(Error::config(format!(
                    "{name} must be a positive number up to 1e6, not {v}"
                )));
            }
        }
        if self.threads == 0 {
            return Err(Error::config("--threads must be at least 1"));
        }
        crate::apps::check_threads(self.threads)?;
        self.recovery.validate()
    }
}

/// One iteration as the callback of [`run`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Iteration {
    /// 1-based.
    pub it: usize,
    /// The joint log-likelihood log p(w, z) per token after it.
    pub ll: f64,
    /// Seconds it took (sampling, rotation, totals and the log-likelihood).
    pub secs: f64,
}

/// The result on one worker.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Documents and tokens of the whole corpus, and the vocabulary's size.
    pub docs: u64,
    pub tokens: u64,
    pub vocabulary: usize,
    /// Reading, the vocabulary and the first counts, in seconds.
    pub load_s: f64,
    pub iterations: Vec<Iteration>,
    /// This worker's part file: `doc_id<TAB>topic:θ …` per document, its topics by
    /// decreasing θ = (n_dk + α)/(N_d + Kα), those with n_dk > 0.
    pub mixtures: String,
    /// On rank 0, `topics.txt`: `topic<TAB>word:φ …`, the top words by decreasing
    /// φ = (n_wk + β)/(n_k + Vβ).
    pub topics: Option<String>,
    /// This worker's documents with their topic counts (K each).
    pub doc_ids: Vec<Vec<u8>>,
    pub ndk: Vec<i32>,
    /// The words of the slice this worker holds at the end, with their topic counts (K each).
    pub slice_words: Vec<u32>,
    pub slice_counts: Vec<i32>,
    /// The topic totals.
    pub nk: Vec<i64>,
    /// The iteration of the checkpoint this run resumed from.
    pub resumed_from: Option<usize>,
}

/// The tokens of one (slice, document block, sub-slice): runs of one document's tokens.
#[derive(Debug, Default)]
struct Group {
    /// The document of each run (index among the worker's documents).
    docs: Vec<u32>,
    /// Run i is `start[i]..start[i + 1]`.
    start: Vec<u32>,
    /// Each token's row in its sub-slice, and its topic.
    rows: Vec<u32>,
    z: Vec<u16>,
}

/// Where word `w` lives with `s` slices of `t` sub-slices: (slice, sub-slice, row).
#[inline]
fn place(w: u32, s: usize, t: usize) -> (usize, usize, usize) {
    let w = w as usize;
    let j = w / s;
    (w % s, j % t, j / t)
}

/// The word at (slice, sub-slice, row).
#[inline]
fn word_at(slice: usize, sub: usize, row: usize, s: usize, t: usize) -> u32 {
    ((row * t + sub) * s + slice) as u32
}

/// Rows of sub-slice `sub` of slice `slice` for `v` words.
fn rows_of(v: usize, slice: usize, sub: usize, s: usize, t: usize) -> usize {
    let nj = if v > slice {
        (v - slice).div_ceil(s)
    } else {
        0
    };
    if nj > sub {
        (nj - sub).div_ceil(t)
    } else {
        0
    }
}

/// The hyper-parameters the kernel takes.
#[derive(Clone, Copy)]
struct Params {
    k: usize,
    alpha: f32,
    beta: f32,
    vbeta: f32,
}

/// One thread's work in a round: group `g`, the counts `ndk` of the documents of its block
/// (from document `first`), its sub-slice `rows`, and the thread's copy `nk` of the totals.
struct Task<'a> {
    g: &'a mut Group,
    ndk: &'a mut [i32],
    first: usize,
    rows: &'a mut [i32],
    nk: &'a mut [i32],
}

/// Samples every token of a [`Task`], compiled for the widest vector instructions the CPU has
/// (the same arithmetic in the same order, so the same topics, whichever runs).
fn sample_group(t: Task, p: Params, rng: Rng) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512(t: Task, p: Params, rng: Rng) {
            sample_body(t, p, rng)
        }
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(t: Task, p: Params, rng: Rng) {
            sample_body(t, p, rng)
        }
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has the features the function enables.
            return unsafe { avx512(t, p, rng) };
        }
        if is_x86_feature_detected!("avx2") {
            // SAFETY: as above.
            return unsafe { avx2(t, p, rng) };
        }
    }
    sample_body(t, p, rng)
}

/// How many tokens ahead [`sample_body`] asks for a word's counts: a token's word row is
/// usually not in the cache (the words of a document are spread over the whole slice), and
/// waiting for it took about a third of the sampling time.
const AHEAD: usize = 3;

#[inline(always)]
fn sample_body(t: Task, p: Params, mut rng: Rng) {
    let Task {
        g,
        ndk,
        first,
        rows,
        nk,
    } = t;
    let k = p.k;
    let mut inv: Vec<f32> = nk.iter().map(|&n| inverse(n, p.vbeta)).collect();
    let mut scratch = Scratch::new(k);
    for (run, &d) in g.docs.iter().enumerate() {
        let nd = (d as usize - first) * k;
        let nd = &mut ndk[nd..nd + k];
        let (a, b) = (g.start[run] as usize, g.start[run + 1] as usize);
        for i in a..b {
            if let Some(&ahead) = g.rows.get(i + AHEAD) {
                let r = ahead as usize * k;
                prefetch(&rows[r..r + k]);
            }
            let r = g.rows[i] as usize * k;
            let nw = &mut rows[r..r + k];
            let old = g.z[i] as usize;
            nd[old] -= 1;
            nw[old] -= 1;
            nk[old] -= 1;
            inv[old] = inverse(nk[old], p.vbeta);
            let new = draw(
                nd,
                nw,
                &inv,
                p.alpha,
                p.beta,
                &mut scratch,
                uniform_f32(&mut rng),
            );
            nd[new] += 1;
            nw[new] += 1;
            nk[new] += 1;
            inv[new] = inverse(nk[new], p.vbeta);
            g.z[i] = new as u16;
        }
    }
}

/// This worker's documents, laid out for sampling.
struct Local {
    groups: Vec<Group>,
    /// Document block b is documents `blocks[b]..blocks[b + 1]`.
    blocks: Vec<usize>,
    ndk: Vec<i32>,
}

/// Cuts the worker's documents into `t` blocks of about equal token counts, its tokens into
/// groups, draws the first topics, and counts them: the document counts, this worker's part of
/// every sub-slice (slice-major, `s·t` of them) and of the totals.
fn layout(
    share: &Share,
    v: usize,
    s: usize,
    t: usize,
    k: usize,
    seed: u64,
) -> (Local, Vec<Vec<i32>>, Vec<i64>) {
    let n = share.words.len();
    let mut blocks = vec![0usize];
    for b in 1..t {
        let want = n * b / t;
        let from = *blocks.last().expect("one");
        let d = (from..share.docs())
            .find(|&d| share.start[d] >= want)
            .unwrap_or(share.docs());
        blocks.push(d);
    }
    blocks.push(share.docs());
    let mut groups: Vec<Group> = (0..s * t * t).map(|_| Group::default()).collect();
    let mut partial: Vec<Vec<i32>> = (0..s * t)
        .map(|i| vec![0; rows_of(v, i / t, i % t, s, t) * k])
        .collect();
    let mut ndk = vec![0i32; share.docs() * k];
    let mut nk = vec![0i64; k];
    for b in 0..t {
        for d in blocks[b]..blocks[b + 1] {
            let h = sampler::doc_hash(&share.ids[d]);
            for (i, &w) in share.doc(d).iter().enumerate() {
                let z = sampler::initial_topic(seed, h, i, k);
                let (sl, sub, row) = place(w, s, t);
                let g = &mut groups[(sl * t + b) * t + sub];
                if g.docs.last() != Some(&(d as u32)) {
                    g.docs.push(d as u32);
                    g.start.push(g.rows.len() as u32);
                }
                g.rows.push(row as u32);
                g.z.push(z);
                ndk[d * k + z as usize] += 1;
                partial[sl * t + sub][row * k + z as usize] += 1;
                nk[z as usize] += 1;
            }
        }
    }
    for g in &mut groups {
        g.start.push(g.rows.len() as u32);
    }
    (
        Local {
            groups,
            blocks,
            ndk,
        },
        partial,
        nk,
    )
}

/// The first element of a one-partition table's partition `id`, as `T`.
fn values<T: crate::data::Elem + Copy>(t: &Table, id: u32) -> Result<Vec<T>> {
    Ok(t.get(id)
        .ok_or_else(|| Error::data(format!("partition {id} is missing")))?
        .as_slice::<T>()?
        .to_vec())
}

/// Runs LDA on this worker's share of the input; every worker calls it. `each` sees every
/// iteration.
pub fn run(w: &Worker, o: &Options, mut each: impl FnMut(&Iteration)) -> Result<Outcome> {
    o.validate()?;
    let (me, p) = (w.rank(), w.size());
    let t0 = Instant::now();
    // An unusable checkpoint directory fails now, not after the first iterations.
    let rec = o.recovery.open(w, "lda")?;
    let storage = crate::storage::for_path_on(&o.input, Some(w.runtime().clone()))?;
    let loaded = storage.list_input(&o.input, false).and_then(|files| {
        if files.is_empty() {
            return Err(Error::config(format!(
                "no input files in {}",
                quote(o.input.as_bytes())
            )));
        }
        load_share(&*storage, &files, me, p, o.words)
    });
    let (outcome, loaded) = match loaded {
        Ok(s) => (Ok(()), Some(s)),
        Err(e) => (Err(e), None),
    };
    crate::worker::agree(w, "lda-input", outcome)?;
    let mut share = loaded.expect("agreed: loaded");

    // The vocabulary: the sorted union of the tokens, or the ids up to the largest.
    let (v, vocab) = match o.words {
        Words::Tokens => {
            let mut t = Table::new(Combiner::Reject);
            t.put(
                me as u32,
                Array::from_slice(w.pool(), &share.sorted_tokens()),
            );
            w.allgather("lda-vocabulary", &mut t, Opts::default())?;
            let lists: Vec<&[u8]> = (0..p as u32)
                .filter_map(|r| t.get(r).and_then(|a| a.as_slice::<u8>().ok()))
                .collect();
            let vocab = merge_vocabulary(lists.into_iter());
            share.renumber(&vocab)?;
            (vocab.len(), Some(vocab))
        }
        Words::Ids => {
            let top = share.words.iter().max().map_or(0, |&x| x as i64 + 1);
            let mut t = Table::new(Combiner::Max);
            t.put(0, Array::from_slice(w.pool(), &[top]));
            w.allreduce("lda-vocabulary", &mut t, Opts::default())?;
            (values::<i64>(&t, 0)?[0] as usize, None)
        }
    };
    let mut t = Table::new(Combiner::Sum);
    t.put(
        0,
        Array::from_slice(w.pool(), &[share.docs() as i64, share.words.len() as i64]),
    );
    w.allreduce("lda-size", &mut t, Opts::default())?;
    let (docs, tokens) = {
        let x = values::<i64>(&t, 0)?;
        (x[0] as u64, x[1] as u64)
    };
    if tokens == 0 {
        return Err(Error::config(format!(
            "{}: the documents hold no words",
            quote(o.input.as_bytes())
        )));
    }
    let (k, s, th) = (o.topics, p, o.threads);
    crate::util::memory::check_fits(
        "lda: the word-topic counts",
        (v as u128 * k as u128 * 4 * 2).checked_add(share.docs() as u128 * k as u128 * 4),
    )?;

    // The draws depend on the corpus, the options below, the worker count and the threads.
    let meta = serde_json::json!({
        "app": "lda",
        "documents": docs,
        "tokens": tokens,
        "vocabulary": v,
        "words": o.words.to_string(),
        "topics": k,
        "alpha": o.alpha,
        "beta": o.beta,
        "seed": o.seed,
        "threads": th,
    });
    // The first topics and counts; each slice's counts summed at its first holder.
    let (mut local, partial, nk_local) = layout(&share, v, s, th, k, o.seed);
    let doc_ids = std::mem::take(&mut share.ids);
    drop(share);
    let mut iterations = Vec::new();
    let (mut model, mut nk, start) = match resume(w, &rec, &meta, o, &mut local, &mut iterations)? {
        Some((model, nk)) => (model, nk, iterations.len()),
        None => {
            let mut model = Table::new(Combiner::Sum);
            for (i, c) in partial.into_iter().enumerate() {
                model.put(i as u32, Array::from_slice(w.pool(), &c));
            }
            let owner = Partitioner::Custom(Arc::new(move |id: u32| id as usize / th));
            w.regroup("lda-model", &mut model, Some(&owner))?;
            (model, allreduce_i64(w, "lda-totals", nk_local)?, 0)
        }
    };
    let load_s = t0.elapsed().as_secs_f64();

    let prm = Params {
        k,
        alpha: o.alpha as f32,
        beta: o.beta as f32,
        vbeta: (v as f64 * o.beta) as f32,
    };
    let (ta, tb) = (LgammaTable::new(o.alpha), LgammaTable::new(o.beta));
    for it in start..o.iterations {
        let ti = Instant::now();
        for step in 0..s {
            let slice = (me + s - step) % s;
            let mut arrays = Vec::with_capacity(th);
            for u in 0..th {
                let id = (slice * th + u) as u32;
                let a = model.remove(id).ok_or_else(|| {
                    Error::data(format!("lda: step {step}: sub-slice {id} is not here"))
                })?;
                arrays.push(a);
            }
            let start: Vec<i32> = nk.iter().map(|&n| n as i32).collect();
            let mut cur = start.clone();
            for q in 0..th {
                cur = round(&mut local, &mut arrays, slice, q, th, &cur, prm, o.seed, it)?;
            }
            for (u, a) in arrays.into_iter().enumerate() {
                model.put((slice * th + u) as u32, a);
            }
            if s == 1 {
                nk = cur.iter().map(|&n| n as i64).collect();
            } else {
                w.rotate("lda-rotate", &mut model, None)?;
                let delta: Vec<i64> = cur
                    .iter()
                    .zip(&start)
                    .map(|(&a, &b)| (a - b) as i64)
                    .collect();
                let sum = allreduce_i64(w, "lda-totals", delta)?;
                for (n, d) in nk.iter_mut().zip(sum) {
                    *n += d;
                }
            }
        }
        let mut ll = sampler::ll_docs(&local.ndk, k, o.alpha, &ta);
        for (_, a) in model.iter() {
            ll += sampler::ll_words(a.as_slice::<i32>()?, &tb);
        }
        if me == 0 {
            ll += sampler::ll_totals(&nk, v, o.beta);
        }
        let mut t = Table::new(Combiner::Sum);
        t.put(0, Array::from_slice(w.pool(), &[ll]));
        w.allreduce("lda-loglikelihood", &mut t, Opts::default())?;
        let x = Iteration {
            it: it + 1,
            ll: values::<f64>(&t, 0)?[0] / tokens as f64,
            secs: ti.elapsed().as_secs_f64(),
        };
        each(&x);
        iterations.push(x);
        rec.after_iteration(w, it + 1, o.iterations, &meta, || {
            Ok(state(w, &local, &model, &nk, &iterations))
        })?;
    }

    // This worker's slice, by word.
    let mut slice_words = Vec::new();
    let mut slice_counts = Vec::new();
    for u in 0..th {
        let a = model
            .get((me * th + u) as u32)
            .ok_or_else(|| Error::data("lda: this worker's slice is not back"))?;
        let c = a.as_slice::<i32>()?;
        for (row, r) in c.chunks(k).enumerate() {
            slice_words.push(word_at(me, u, row, s, th));
            slice_counts.extend_from_slice(r);
        }
    }
    let mixtures = format_mixtures(&doc_ids, &local.ndk, k, o.alpha);
    let topics = top_words(w, o, &slice_words, &slice_counts, &nk, v, vocab.as_deref())?;
    Ok(Outcome {
        docs,
        tokens,
        vocabulary: v,
        load_s,
        iterations,
        mixtures,
        topics,
        doc_ids,
        ndk: local.ndk,
        slice_words,
        slice_counts,
        nk,
        resumed_from: (start > 0).then_some(start),
    })
}

/// This worker's state after an iteration, when every slice is back with its first holder:
/// `assignments` (partition 0: the topic of every token, u16, in the order of its groups),
/// `documents` (partition 0: the document-topic counts, i32), `model` (the sub-slices of its own
/// slice, i32, by partition id), `totals` (partition 0: the topic totals, i64) and `history`
/// (partition 0: the log-likelihood per token, partition 1: the seconds, of every iteration so
/// far). The random streams are derived from (seed, iteration, slice, block, sub-slice), so
/// there is no generator state to save.
fn state(
    w: &Worker,
    local: &Local,
    model: &Table,
    nk: &[i64],
    its: &[Iteration],
) -> Vec<(&'static str, Table)> {
    let one = |a: Array| {
        let mut t = Table::new(Combiner::Sum);
        t.put(0, a);
        t
    };
    let z: Vec<u16> = local
        .groups
        .iter()
        .flat_map(|g| g.z.iter().copied())
        .collect();
    let mut history = one(Array::from_slice(
        w.pool(),
        &its.iter().map(|x| x.ll).collect::<Vec<_>>(),
    ));
    history.put(
        1,
        Array::from_slice(w.pool(), &its.iter().map(|x| x.secs).collect::<Vec<_>>()),
    );
    vec![
        ("assignments", one(Array::from_slice(w.pool(), &z))),
        ("documents", one(Array::from_slice(w.pool(), &local.ndk))),
        ("model", model.duplicate(w.pool())),
        ("totals", one(Array::from_slice(w.pool(), nk))),
        ("history", history),
    ]
}

/// With `--resume`, this worker's [`state`] from the newest checkpoint: the topics and
/// document counts go into `local`, the iterations done into `its`; returns the model table
/// and the totals (`None` for a fresh start). A part that does not fit this worker's share
/// (other tokens, documents or slices) fails every worker.
fn resume(
    w: &Worker,
    rec: &Recovering,
    meta: &serde_json::Value,
    o: &Options,
    local: &mut Local,
    its: &mut Vec<Iteration>,
) -> Result<Option<(Table, Vec<i64>)>> {
    let Some(mut r) = rec.resume(w, meta, o.iterations)? else {
        return Ok(None);
    };
    let it = r.iteration;
    let (k, th, me) = (o.topics, o.threads, w.rank());
    let check = (|| {
        let bad = |what: &str| {
            Error::data(format!(
                "the checkpoint at iteration {it} holds other {what} for rank {me} than the \
                 input gives it (the same input with the same number of workers resumes)"
            ))
        };
        let z = r.take("assignments")?;
        let ndk = r.take("documents")?;
        let model = r.take("model")?;
        let totals = r.take("totals")?;
        let history = r.take("history")?;
        fn part(t: &Table, id: u32, it: usize) -> Result<&Array> {
            t.get(id).ok_or_else(|| {
                Error::data(format!(
                    "the checkpoint at iteration {it} does not hold LDA state"
                ))
            })
        }
        let z = part(&z, 0, it)?.as_slice::<u16>()?;
        let n: usize = local.groups.iter().map(|g| g.z.len()).sum();
        if z.len() != n || z.iter().any(|&t| t as usize >= k) {
            return Err(bad("tokens"));
        }
        let ndk = part(&ndk, 0, it)?.as_slice::<i32>()?;
        if ndk.len() != local.ndk.len() {
            return Err(bad("documents"));
        }
        let mut ids = model.ids();
        ids.sort_unstable();
        let want: Vec<u32> = (0..th).map(|u| (me * th + u) as u32).collect();
        let v = meta["vocabulary"].as_u64().unwrap_or(0) as usize;
        let fits = |u: usize| {
            let a = model.get((me * th + u) as u32)?;
            Some(a.as_slice::<i32>().ok()?.len() == rows_of(v, me, u, w.size(), th) * k)
        };
        if ids != want || (0..th).any(|u| fits(u) != Some(true)) {
            return Err(bad("slices"));
        }
        let nk = part(&totals, 0, it)?.as_slice::<i64>()?.to_vec();
        let (ll, secs) = (part(&history, 0, it)?, part(&history, 1, it)?);
        let (ll, secs) = (ll.as_slice::<f64>()?, secs.as_slice::<f64>()?);
        if nk.len() != k || ll.len() != it || secs.len() != it {
            return Err(bad("totals or history"));
        }
        let mut at = 0;
        for g in &mut local.groups {
            let n = g.z.len();
            g.z.copy_from_slice(&z[at..at + n]);
            at += n;
        }
        local.ndk.copy_from_slice(ndk);
        *its = (0..it)
            .map(|i| Iteration {
                it: i + 1,
                ll: ll[i],
                secs: secs[i],
            })
            .collect();
        Ok((model, nk))
    })();
    let (outcome, restored) = match check {
        Ok(x) => (Ok(()), Some(x)),
        Err(e) => (Err(e), None),
    };
    crate::worker::agree(w, "lda-resume", outcome)?;
    Ok(restored)
}

/// One round of a step: thread i samples block i against sub-slice `(i + q) mod T`, starting
/// from the totals `nk`; returns the totals with every thread's changes.
#[allow(clippy::too_many_arguments)]
fn round(
    local: &mut Local,
    arrays: &mut [Array],
    slice: usize,
    q: usize,
    th: usize,
    nk: &[i32],
    prm: Params,
    seed: u64,
    it: usize,
) -> Result<Vec<i32>> {
    let k = prm.k;
    let mut subs: Vec<Option<&mut [i32]>> = Vec::with_capacity(th);
    for a in arrays.iter_mut() {
        subs.push(Some(a.as_mut_slice::<i32>()?));
    }
    let mut groups: Vec<Option<&mut Group>> = local.groups.iter_mut().map(Some).collect();
    let mut rest: &mut [i32] = &mut local.ndk;
    let mut work = Vec::with_capacity(th);
    for b in 0..th {
        let (mine, after) = rest.split_at_mut((local.blocks[b + 1] - local.blocks[b]) * k);
        rest = after;
        let u = (b + q) % th;
        let g = groups[(slice * th + b) * th + u]
            .take()
            .expect("distinct groups");
        let rows = subs[u].take().expect("distinct sub-slices");
        let rng = stream(seed, it, slice, b, u);
        work.push((g, mine, local.blocks[b], rows, rng));
    }
    let run = |(g, ndk, first, rows, rng): (&mut Group, &mut [i32], usize, &mut [i32], _)| {
        let mut mine = nk.to_vec();
        let t = Task {
            g,
            ndk,
            first,
            rows,
            nk: &mut mine,
        };
        sample_group(t, prm, rng);
        mine
    };
    let results: Vec<Vec<i32>> = if th == 1 {
        work.into_iter().map(run).collect()
    } else {
        std::thread::scope(|sc| {
            let handles: Vec<_> = work.into_iter().map(|x| sc.spawn(move || run(x))).collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a sampling thread panicked"))
                .collect()
        })
    };
    let mut out = nk.to_vec();
    for r in results {
        for ((o, &after), &before) in out.iter_mut().zip(&r).zip(nk) {
            *o += after - before;
        }
    }
    Ok(out)
}

fn allreduce_i64(w: &Worker, label: &str, x: Vec<i64>) -> Result<Vec<i64>> {
    let mut t = Table::new(Combiner::Sum);
    t.put(0, Array::from_slice(w.pool(), &x));
    w.allreduce(label, &mut t, Opts::default())?;
    values::<i64>(&t, 0)
}

/// `doc_id<TAB>topic:θ …` lines (see [`Outcome::mixtures`]).
pub fn format_mixtures(ids: &[Vec<u8>], ndk: &[i32], k: usize, alpha: f64) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let mut top: Vec<(i32, usize)> = Vec::new();
    for (d, id) in ids.iter().enumerate() {
        let c = &ndk[d * k..(d + 1) * k];
        let n: i64 = c.iter().map(|&x| x as i64).sum();
        let den = n as f64 + k as f64 * alpha;
        top.clear();
        top.extend(
            c.iter()
                .enumerate()
                .filter(|x| *x.1 > 0)
                .map(|(t, &x)| (x, t)),
        );
        top.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        s.push_str(&String::from_utf8_lossy(id));
        for (i, &(x, t)) in top.iter().enumerate() {
            let _ = write!(
                s,
                "{}{t}:{:.6}",
                if i == 0 { '\t' } else { ' ' },
                (x as f64 + alpha) / den
            );
        }
        s.push('\n');
    }
    s
}

/// Collective: every worker sends rank 0 the top words of every topic in its slice; rank 0
/// returns `topics.txt` (see [`Outcome::topics`]).
fn top_words(
    w: &Worker,
    o: &Options,
    words: &[u32],
    counts: &[i32],
    nk: &[i64],
    v: usize,
    vocab: Option<&[Box<[u8]>]>,
) -> Result<Option<String>> {
    let (k, n) = (o.topics, o.top_words);
    let mut mine: Vec<i64> = Vec::with_capacity(k * n * 2);
    let mut best: Vec<(i32, u32)> = Vec::new();
    for t in 0..k {
        best.clear();
        best.extend(
            words
                .iter()
                .enumerate()
                .map(|(i, &wd)| (counts[i * k + t], wd))
                .filter(|x| x.0 > 0),
        );
        best.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        best.truncate(n);
        for i in 0..n {
            let (c, wd) = best
                .get(i)
                .map_or((-1, 0), |&(c, wd)| (c as i64, wd as i64));
            mine.push(c);
            mine.push(wd);
        }
    }
    let mut t = Table::new(Combiner::Reject);
    t.put(w.rank() as u32, Array::from_slice(w.pool(), &mine));
    w.gather("lda-topics", &mut t, Opts::default())?;
    if !w.is_master() {
        return Ok(None);
    }
    use std::fmt::Write;
    let mut all: Vec<Vec<(i64, i64)>> = vec![Vec::new(); k];
    for (_, a) in t.iter() {
        let x = a.as_slice::<i64>()?;
        if x.len() != k * n * 2 {
            return Err(Error::data(
                "lda-topics: a worker sent a list of another size",
            ));
        }
        for (i, pair) in x.chunks(2).enumerate() {
            if pair[0] > 0 {
                all[i / n].push((pair[0], pair[1]));
            }
        }
    }
    let vb = v as f64 * o.beta;
    let mut s = String::new();
    for (t, list) in all.iter_mut().enumerate() {
        list.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        s.push_str(&t.to_string());
        for (i, &(c, wd)) in list.iter().take(n).enumerate() {
            let name = match vocab {
                Some(voc) => String::from_utf8_lossy(&voc[wd as usize]).into_owned(),
                None => wd.to_string(),
            };
            let phi = (c as f64 + o.beta) / (nk[t] as f64 + vb);
            let _ = write!(s, "{}{name}:{phi:.6}", if i == 0 { '\t' } else { ' ' });
        }
        s.push('\n');
    }
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_has_one_place() {
        for (v, s, t) in [(1, 1, 1), (10, 3, 2), (17, 4, 3), (5, 8, 2), (100, 2, 4)] {
            let mut seen = std::collections::HashSet::new();
            for w in 0..v as u32 {
                let (sl, sub, row) = place(w, s, t);
                assert!(row < rows_of(v, sl, sub, s, t), "{w} in {v} {s} {t}");
                assert_eq!(word_at(sl, sub, row, s, t), w);
                assert!(seen.insert((sl, sub, row)));
            }
            let total: usize = (0..s)
                .flat_map(|a| (0..t).map(move |b| (a, b)))
                .map(|(a, b)| rows_of(v, a, b, s, t))
                .sum();
            assert_eq!(total, v);
        }
    }
}
