//! Latent Dirichlet allocation by collapsed Gibbs sampling with model rotation (docs/lda.md).
//!
//! Input: one document per line, `doc_id word word …` (fields separated by spaces or tabs;
//! words are tokens, or integer ids with [`Words::Ids`]); blank lines are skipped, a line with an
//! id alone is an empty document. Each worker reads its Hadoop-style share of the lines and
//! keeps its documents for the whole run.
//!
//! The model: the document-topic counts `n_dk` stay with their documents; the word-topic table
//! `n_wk` is cut into S slices (S = 2W, or 1 with one worker), word w in slice `w mod S`, and
//! each slice into T sub-slices, one per sampling thread (`(w / S) mod T`). Worker r holds two
//! slices, one per slot. An iteration is W steps of two half-steps; in each, a worker samples
//! the tokens of its documents whose words are in one slot's slice, then passes that slice on
//! with `rotate` (worker r to r + 1) — started without blocking with [`Rotation::Pipelined`], so
//! it overlaps the sampling of the other slot — : at step t worker r holds slices
//! `2·((r − t) mod W) + j`, and after W steps every slice is back with its first holder. No two
//! workers touch a slice at once, so every word-topic count is exact. The T sampling threads
//! are a [`Static`] scheduler, thread i owning block i of the documents for the run; inside a
//! half-step, T rounds: in round q thread i samples its block against sub-slice `(i + q) mod T`
//! (passed in and back as an owned input and output), so the threads share neither documents
//! nor words. The topic totals `n_k` are shared by everyone: each thread samples with its own
//! copy, the copies' changes are added up after every round, and the workers' changes after
//! every half-step by an allreduce of the deltas, so every worker starts every half-step with
//! the exact totals (within a half-step a worker does not see the others' changes: the only
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

pub use crate::apps::mfsgd::Rotation;
use crate::checkpoint::{Recovering, Recovery};
use crate::data::{Array, Combiner, Partitioner, Table};
use crate::error::{Error, Result};
use crate::sched::Static;
use crate::util::quote;
use crate::util::rng::Rng;
use crate::worker::{Pending, Worker};
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
    /// How the slices travel: with two slices per worker, the rotate of one overlapping the
    /// sampling of the other (pipelined), or each rotate waited for (blocking).
    pub rotation: Rotation,
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
            rotation: j.default_of("rotation"),
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

/// The documents of one sampling thread (a block of this worker's documents), laid out for
/// sampling: the thread's state in the scheduler for the whole run.
struct Block {
    /// Group `slice · T + sub` holds the block's tokens whose words are in that sub-slice.
    groups: Vec<Group>,
    /// The block's first document (index among the worker's documents).
    first: usize,
    /// The document-topic counts of the block's documents, from `first`.
    ndk: Vec<i32>,
}

impl Block {
    /// The topics of the block's tokens, group after group.
    fn topics(&self) -> impl Iterator<Item = &u16> {
        self.groups.iter().flat_map(|g| g.z.iter())
    }
}

/// Cuts the worker's documents into `t` blocks of about equal token counts, their tokens into
/// groups, draws the first topics, and counts them: the blocks with their document counts,
/// this worker's part of every sub-slice (slice-major, `s·t` of them) and of the totals.
fn layout(
    share: &Share,
    v: usize,
    s: usize,
    t: usize,
    k: usize,
    seed: u64,
) -> (Vec<Block>, Vec<Vec<i32>>, Vec<i64>) {
    let n = share.words.len();
    let mut cuts = vec![0usize];
    for b in 1..t {
        let want = n * b / t;
        let from = *cuts.last().expect("one");
        let d = (from..share.docs())
            .find(|&d| share.start[d] >= want)
            .unwrap_or(share.docs());
        cuts.push(d);
    }
    cuts.push(share.docs());
    let mut partial: Vec<Vec<i32>> = (0..s * t)
        .map(|i| vec![0; rows_of(v, i / t, i % t, s, t) * k])
        .collect();
    let mut nk = vec![0i64; k];
    let mut blocks = Vec::with_capacity(t);
    for b in 0..t {
        let first = cuts[b];
        let mut groups: Vec<Group> = (0..s * t).map(|_| Group::default()).collect();
        let mut ndk = vec![0i32; (cuts[b + 1] - first) * k];
        for d in first..cuts[b + 1] {
            let h = sampler::doc_hash(&share.ids[d]);
            for (i, &w) in share.doc(d).iter().enumerate() {
                let z = sampler::initial_topic(seed, h, i, k);
                let (sl, sub, row) = place(w, s, t);
                let g = &mut groups[sl * t + sub];
                if g.docs.last() != Some(&(d as u32)) {
                    g.docs.push(d as u32);
                    g.start.push(g.rows.len() as u32);
                }
                g.rows.push(row as u32);
                g.z.push(z);
                ndk[(d - first) * k + z as usize] += 1;
                partial[sl * t + sub][row * k + z as usize] += 1;
                nk[z as usize] += 1;
            }
        }
        for g in &mut groups {
            g.start.push(g.rows.len() as u32);
        }
        blocks.push(Block { groups, first, ndk });
    }
    (blocks, partial, nk)
}

/// What a sampling thread is asked to do.
enum Job {
    /// Sample the block's tokens of sub-slice `sub` of `slice` against its counts `rows`,
    /// starting from the totals `nk`.
    Sample {
        slice: usize,
        sub: usize,
        rows: Array,
        nk: Vec<i32>,
        rng: Rng,
    },
    /// The documents' part of the log-likelihood.
    Loglik,
    /// A copy of the block's topics and document counts.
    Snapshot,
}

/// A sampling thread's answer to a [`Job`], in the same order.
enum Done {
    /// The counts back, and the totals with the thread's changes.
    Sampled(Array, Vec<i32>),
    Loglik(f64),
    Snapshot(Vec<u16>, Vec<i32>),
}

/// The sampling threads: one per block, each owning its block for the run.
type Sampler = Static<Job, Done, Block>;

fn sampler_threads(blocks: Vec<Block>, prm: Params, th: usize, alpha: f64) -> Result<Sampler> {
    let ta = LgammaTable::new(alpha);
    Static::new(blocks, move |b: &mut Block, job: Job| -> Result<Done> {
        Ok(match job {
            Job::Sample {
                slice,
                sub,
                mut rows,
                mut nk,
                rng,
            } => {
                let t = Task {
                    g: &mut b.groups[slice * th + sub],
                    ndk: &mut b.ndk,
                    first: b.first,
                    rows: rows.as_mut_slice::<i32>()?,
                    nk: &mut nk,
                };
                sample_group(t, prm, rng);
                Done::Sampled(rows, nk)
            }
            Job::Loglik => Done::Loglik(sampler::ll_docs(&b.ndk, prm.k, alpha, &ta)),
            Job::Snapshot => Done::Snapshot(b.topics().copied().collect(), b.ndk.clone()),
        })
    })
}

/// Thread `b`'s next answer; an error if it failed or gave another kind.
fn answer(sched: &mut Sampler, b: usize) -> Result<Done> {
    sched
        .next_output(b)
        .unwrap_or_else(|| Err(Error::config("lda: a sampling thread gave no answer")))
}

/// Asks every sampling thread `job()` and returns their answers in thread order.
fn ask_all(sched: &mut Sampler, job: impl Fn() -> Job) -> Result<Vec<Done>> {
    let th = sched.threads();
    for b in 0..th {
        sched.submit(b, job())?;
    }
    let answers: Vec<Result<Done>> = (0..th).map(|b| answer(sched, b)).collect();
    answers.into_iter().collect()
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
    let mut share = crate::worker::agree_on(w, "lda-input", loaded)?;

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
    // One slice per worker with one worker (nothing rotates), else two: the rotate of one
    // overlaps the sampling of the other.
    let per = if p == 1 { 1 } else { 2 };
    let (k, s, th) = (o.topics, per * p, o.threads);
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
    let (mut blocks, partial, nk_local) = layout(&share, v, s, th, k, o.seed);
    let doc_ids = std::mem::take(&mut share.ids);
    drop(share);
    let mut iterations = Vec::new();
    let shape = Shape { k, th, per, s, v };
    let restored = resume(w, &rec, &meta, o, shape, &mut blocks, &mut iterations)?;
    let (mut model, mut nk, start) = match restored {
        Some((model, nk)) => (model, nk, iterations.len()),
        None => {
            let mut model = Table::new(Combiner::Sum);
            for (i, c) in partial.into_iter().enumerate() {
                model.put(i as u32, Array::from_slice(w.pool(), &c));
            }
            let owner = Partitioner::Custom(Arc::new(move |id: u32| id as usize / th / per));
            w.regroup("lda-model", &mut model, Some(&owner))?;
            (model, allreduce_i64(w, "lda-totals", nk_local)?, 0)
        }
    };
    // Slot j holds home slice `per · me + j` at the start of every iteration.
    let mut slots: Vec<Option<Table>> = (0..per).map(|_| Some(Table::new(Combiner::Sum))).collect();
    for id in model.ids() {
        let a = model.remove(id).expect("listed");
        let j = id as usize / th - per * me;
        slots[j].as_mut().expect("slot").put(id, a);
    }
    let load_s = t0.elapsed().as_secs_f64();

    let prm = Params {
        k,
        alpha: o.alpha as f32,
        beta: o.beta as f32,
        vbeta: (v as f64 * o.beta) as f32,
    };
    let tb = LgammaTable::new(o.beta);
    let mut sched = sampler_threads(blocks, prm, th, o.alpha)?;
    let pipelined = o.rotation == Rotation::Pipelined;
    for it in start..o.iterations {
        let ti = Instant::now();
        let mut pending: Vec<Option<Pending<Table>>> = (0..per).map(|_| None).collect();
        for step in 0..p {
            for j in 0..per {
                let mut table = match pending[j].take() {
                    Some(h) => h.wait()?,
                    None => slots[j].take().expect("slot"),
                };
                let slice = per * ((me + p - step) % p) + j;
                let mut arrays = Vec::with_capacity(th);
                for u in 0..th {
                    let id = (slice * th + u) as u32;
                    let a = table.remove(id).ok_or_else(|| {
                        Error::Protocol(format!(
                            "rank {me}: lda-rotate: step {step}: sub-slice {id} is not here \
                             (received partitions {:?})",
                            table.ids()
                        ))
                    })?;
                    arrays.push(Some(a));
                }
                let before: Vec<i32> = nk.iter().map(|&n| n as i32).collect();
                let mut cur = before.clone();
                for q in 0..th {
                    cur = round(&mut sched, &mut arrays, slice, q, &cur, o.seed, it)?;
                }
                for (u, a) in arrays.into_iter().enumerate() {
                    table.put((slice * th + u) as u32, a.expect("returned"));
                }
                if p == 1 {
                    nk = cur.iter().map(|&n| n as i64).collect();
                    slots[j] = Some(table);
                    continue;
                }
                // A blocking call waits for the rotate in flight, which overlapped this
                // sampling; then this slot's rotate starts and overlaps the next.
                let delta: Vec<i64> = cur
                    .iter()
                    .zip(&before)
                    .map(|(&a, &b)| (a - b) as i64)
                    .collect();
                let sum = allreduce_i64(w, "lda-totals", delta)?;
                for (n, d) in nk.iter_mut().zip(sum) {
                    *n += d;
                }
                if pipelined {
                    pending[j] = Some(w.rotate_start("lda-rotate", table, None)?);
                } else {
                    w.rotate("lda-rotate", &mut table, None)?;
                    slots[j] = Some(table);
                }
            }
        }
        for j in 0..per {
            if let Some(h) = pending[j].take() {
                slots[j] = Some(h.wait()?);
            }
        }
        let mut ll = 0.0;
        for d in ask_all(&mut sched, || Job::Loglik)? {
            if let Done::Loglik(x) = d {
                ll += x;
            }
        }
        for t in slots.iter().flatten() {
            for (_, a) in t.iter() {
                ll += sampler::ll_words(a.as_slice::<i32>()?, &tb);
            }
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
            state(w, &mut sched, &slots, &nk, &iterations)
        })?;
    }

    // This worker's slices, by word.
    let mut slice_words = Vec::new();
    let mut slice_counts = Vec::new();
    for (j, t) in slots.iter().enumerate() {
        let t = t.as_ref().expect("slot");
        let slice = per * me + j;
        for u in 0..th {
            let a = t
                .get((slice * th + u) as u32)
                .ok_or_else(|| Error::data("lda: this worker's slice is not back"))?;
            let c = a.as_slice::<i32>()?;
            for (row, r) in c.chunks(k).enumerate() {
                slice_words.push(word_at(slice, u, row, s, th));
                slice_counts.extend_from_slice(r);
            }
        }
    }
    let ndk: Vec<i32> = sched.finish().into_iter().flat_map(|b| b.ndk).collect();
    let mixtures = format_mixtures(&doc_ids, &ndk, k, o.alpha);
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
        ndk,
        slice_words,
        slice_counts,
        nk,
        resumed_from: (start > 0).then_some(start),
    })
}

/// The shape of a run: topics, threads, slices per worker and in all, words.
#[derive(Clone, Copy)]
struct Shape {
    k: usize,
    th: usize,
    per: usize,
    s: usize,
    v: usize,
}

/// This worker's state after an iteration, when every slice is back with its first holder:
/// `assignments` (partition 0: the topic of every token, u16, block after block and in each
/// group after group), `documents` (partition 0: the document-topic counts, i32), `model` (the
/// sub-slices of its own slices, i32, by partition id), `totals` (partition 0: the topic
/// totals, i64) and `history` (partition 0: the log-likelihood per token, partition 1: the
/// seconds, of every iteration so far). The random streams are derived from (seed, iteration,
/// slice, block, sub-slice), so there is no generator state to save.
fn state(
    w: &Worker,
    sched: &mut Sampler,
    slots: &[Option<Table>],
    nk: &[i64],
    its: &[Iteration],
) -> Result<Vec<(&'static str, Table)>> {
    let one = |a: Array| {
        let mut t = Table::new(Combiner::Sum);
        t.put(0, a);
        t
    };
    let (mut z, mut ndk) = (Vec::new(), Vec::new());
    for d in ask_all(sched, || Job::Snapshot)? {
        if let Done::Snapshot(a, b) = d {
            z.extend_from_slice(&a);
            ndk.extend_from_slice(&b);
        }
    }
    let mut model = Table::new(Combiner::Sum);
    for t in slots.iter().flatten() {
        for (id, a) in t.iter() {
            model.put(id, Array::from_slice(w.pool(), a.as_slice::<i32>()?));
        }
    }
    let mut history = one(Array::from_slice(
        w.pool(),
        &its.iter().map(|x| x.ll).collect::<Vec<_>>(),
    ));
    history.put(
        1,
        Array::from_slice(w.pool(), &its.iter().map(|x| x.secs).collect::<Vec<_>>()),
    );
    Ok(vec![
        ("assignments", one(Array::from_slice(w.pool(), &z))),
        ("documents", one(Array::from_slice(w.pool(), &ndk))),
        ("model", model),
        ("totals", one(Array::from_slice(w.pool(), nk))),
        ("history", history),
    ])
}

/// With `--resume`, this worker's [`state`] from the newest checkpoint: the topics and
/// document counts go into `blocks`, the iterations done into `its`; returns the model table
/// and the totals (`None` for a fresh start). A part that does not fit this worker's share
/// (other tokens, documents or slices) fails every worker.
fn resume(
    w: &Worker,
    rec: &Recovering,
    meta: &serde_json::Value,
    o: &Options,
    sh: Shape,
    blocks: &mut [Block],
    its: &mut Vec<Iteration>,
) -> Result<Option<(Table, Vec<i64>)>> {
    let Some(mut r) = rec.resume(w, meta, o.iterations)? else {
        return Ok(None);
    };
    let it = r.iteration;
    let (k, th, me) = (sh.k, sh.th, w.rank());
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
        let n: usize = blocks.iter().map(|b| b.topics().count()).sum();
        if z.len() != n || z.iter().any(|&t| t as usize >= k) {
            return Err(bad("tokens"));
        }
        let ndk = part(&ndk, 0, it)?.as_slice::<i32>()?;
        if ndk.len() != blocks.iter().map(|b| b.ndk.len()).sum::<usize>() {
            return Err(bad("documents"));
        }
        let mut ids = model.ids();
        ids.sort_unstable();
        let mine = (me * sh.per * th..(me + 1) * sh.per * th).map(|x| x as u32);
        let fits = |x: u32| {
            let a = model.get(x)?;
            let (slice, u) = (x as usize / th, x as usize % th);
            Some(a.as_slice::<i32>().ok()?.len() == rows_of(sh.v, slice, u, sh.s, th) * k)
        };
        if ids != mine.clone().collect::<Vec<_>>()
            || mine.into_iter().any(|x| fits(x) != Some(true))
        {
            return Err(bad("slices"));
        }
        let nk = part(&totals, 0, it)?.as_slice::<i64>()?.to_vec();
        let (ll, secs) = (part(&history, 0, it)?, part(&history, 1, it)?);
        let (ll, secs) = (ll.as_slice::<f64>()?, secs.as_slice::<f64>()?);
        if nk.len() != k || ll.len() != it || secs.len() != it {
            return Err(bad("totals or history"));
        }
        let (mut at, mut dat) = (0, 0);
        for b in blocks.iter_mut() {
            for g in &mut b.groups {
                let n = g.z.len();
                g.z.copy_from_slice(&z[at..at + n]);
                at += n;
            }
            let n = b.ndk.len();
            b.ndk.copy_from_slice(&ndk[dat..dat + n]);
            dat += n;
        }
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

/// One round of a step: thread b samples its block against sub-slice `(b + q) mod T` of
/// `arrays` (taken and given back), starting from the totals `nk`; returns the totals with
/// every thread's changes.
fn round(
    sched: &mut Sampler,
    arrays: &mut [Option<Array>],
    slice: usize,
    q: usize,
    nk: &[i32],
    seed: u64,
    it: usize,
) -> Result<Vec<i32>> {
    let th = sched.threads();
    for b in 0..th {
        let u = (b + q) % th;
        let rows = arrays[u].take().expect("distinct sub-slices");
        let rng = stream(seed, it, slice, b, u);
        let job = Job::Sample {
            slice,
            sub: u,
            rows,
            nk: nk.to_vec(),
            rng,
        };
        sched.submit(b, job)?;
    }
    let mut out = nk.to_vec();
    let mut failed = None;
    for b in 0..th {
        match answer(sched, b) {
            Ok(Done::Sampled(a, after)) => {
                arrays[(b + q) % th] = Some(a);
                for ((o, &a), &n) in out.iter_mut().zip(&after).zip(nk) {
                    *o += a - n;
                }
            }
            Ok(_) => {
                failed.get_or_insert(Error::config("lda: a sampling thread answered out of turn"));
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    failed.map_or(Ok(out), Err)
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
