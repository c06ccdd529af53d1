//! Matrix factorisation by SGD with model rotation (docs/mfsgd.md).
//!
//! Input: text lines `user item rating` (two non-negative integer ids up to `i64::MAX` and a
//! finite number, separated by spaces or tabs); blank lines and lines starting with `#` are
//! skipped. The model is r(u, i) ≈ p_u · q_i with `rank` factors each, trained by plain SGD on
//! the L2-regularised squared error:
//!
//! ```text
//! e = r − p·q;   p ← p + α(e·q − λ·p);   q ← q + α(e·p − λ·q)   (both from the old p, q)
//! ```
//!
//! with α = alpha · decay^e in epoch e (from 0).
//!
//! The distributed run ([`run`]), on W workers:
//! * users are partitioned by worker (`owner = splitmix64(user) mod W`); each worker keeps its
//!   users' factors, and its ratings, regrouped to it after the read;
//! * items are split into S = 2W *slices* (`splitmix64(item ^ salt) mod S`); worker r starts
//!   with slices 2r and 2r + 1, one in each of its two *slots*. An epoch is W steps: in each
//!   step a worker updates, against its own ratings, the slice in slot 0 and then the one in
//!   slot 1, and passes each on with `rotate` (rank r to r + 1) as soon as it is done. No two
//!   workers ever hold the same slice, so the updates need no locks, and after W steps every
//!   slice has met every worker and is home again;
//! * the rotation of one slot overlaps the computation on the other: every collective call of
//!   the run is made, in order, by one dedicated thread ([`Comm`]), while the compute threads
//!   update the other slice (`--rotation blocking` waits for each rotate instead);
//! * inside a worker, a slice is cut further: its users into B groups and the slice's items
//!   into B sub-slices (`--blocks`); round k of B updates the B disjoint blocks (group j,
//!   sub-slice (j + k) mod B) in parallel on the compute threads, persistent for the run (a
//!   [`Dynamic`] scheduler: each round's B blocks are B tasks on one queue, each carrying the
//!   user rows of its group and the item rows of its sub-slice as owned vectors, handed back
//!   when done). Each block's ratings go in a fixed order (by user id, item id, rating), so
//!   the result depends on W, B and the seed, not on the number of threads or on timing: the
//!   updates equal a sequential run in the order of [`reference`], bit for bit.
//!
//! Initial factors are uniform in [0, 1/√rank) (as LIBMF's), each vector from the seed and its
//! id alone, so every W starts from the same model. The test RMSE of each epoch (`--test`) is
//! measured after the epoch by one more rotation of the slices without updates; a test rating
//! whose user or item has no training rating is predicted by the mean training rating.

use std::sync::{mpsc, Arc};
use std::time::Instant;

use rayon::prelude::*;

use crate::checkpoint::{Recovering, Recovery};
use crate::data::kv::FastMap;
use crate::data::{Array, Combiner, Partitioner, Table};
use crate::error::{Error, Result};
use crate::io::lines::{for_each_line, read_lines, LineError, STREAM_BLOCK};
use crate::sched::Dynamic;
use crate::storage::{FileInfo, Storage};
use crate::util::hash::splitmix64;
use crate::util::quote;
use crate::util::rng::Rng;
use crate::worker::Worker;
use crate::Collectives;
use crate::Opts;

/// The most factors per vector (`--rank`).
pub const MAX_RANK: usize = 4096;
/// The most blocks per slice (`--blocks`).
pub const MAX_BLOCKS: usize = 1024;

/// Mixed into an item id's hash, so that items and users with equal ids spread differently.
const ITEM_SALT: u64 = 0x6d66_7367_642d_6974; // "mfsgd-it"
const USER_SALT: u64 = 0x6d66_7367_642d_7573; // "mfsgd-us"

named_enum!(
    /// How the slices travel.
    Rotation, "rotation", {
        /// The rotate of a slot runs while the other slot's slice is updated.
        #[default]
        Pipelined => "pipelined",
        /// Each rotate is waited for before the next computation.
        Blocking => "blocking",
    }
);

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Training ratings: a file or a directory of files.
    pub input: String,
    /// Held-out ratings for the RMSE of each epoch.
    pub test: Option<String>,
    pub rank: usize,
    pub lambda: f32,
    pub alpha: f32,
    /// The learning rate of epoch e (from 0) is alpha · decay^e.
    pub decay: f32,
    pub epochs: usize,
    pub seed: u64,
    /// Compute threads per worker.
    pub threads: usize,
    /// Groups of users and sub-slices of items per slice.
    pub blocks: usize,
    pub rotation: Rotation,
    /// Checkpoints and resume (`--checkpoint-every`, `--checkpoint-dir`, `--resume`), an
    /// iteration being an epoch.
    pub recovery: Recovery,
}

impl Options {
    pub fn new(input: impl Into<String>) -> Options {
        let d = &crate::config::apps::MFSGD;
        Options {
            input: input.into(),
            test: None,
            rank: d.default_of("rank"),
            lambda: d.default_of("lambda"),
            alpha: d.default_of("alpha"),
            decay: d.default_of("decay"),
            epochs: d.default_of("epochs"),
            seed: d.default_of("seed"),
            threads: d.default_of("threads"),
            blocks: d.default_of("blocks"),
            rotation: d.default_of("rotation"),
            recovery: Recovery::default(),
        }
    }

    /// The learning rate of epoch `e` (from 0): alpha · decay^e, in f32.
    pub fn alpha_at(&self, e: usize) -> f32 {
        self.alpha * self.decay.powi(e.min(i32::MAX as usize) as i32)
    }

    pub fn validate(&self) -> Result<()> {
        if self.rank == 0 || self.rank > MAX_RANK {
            return Err(Error::config(format!(
                "--rank must be from 1 to {MAX_RANK}, not {}",
                self.rank
            )));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(Error::config(format!(
                "--alpha must be a positive number, not {}",
                self.alpha
            )));
        }
        if !(self.decay.is_finite() && self.decay > 0.0 && self.decay <= 1.0) {
            return Err(Error::config(format!(
                "--decay must be a number in (0, 1], not {}",
                self.decay
            )));
        }
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return Err(Error::config(format!(
                "--lambda must be a number ≥ 0, not {}",
                self.lambda
            )));
        }
        if self.blocks == 0 || self.blocks > MAX_BLOCKS {
            return Err(Error::config(format!(
                "--blocks must be from 1 to {MAX_BLOCKS}, not {}",
                self.blocks
            )));
        }
        let most = crate::apps::MAX_THREADS;
        if !(1..=most).contains(&self.threads) {
            return Err(Error::config(format!(
                "--threads must be from 1 to {most} (compute threads per worker), not {}",
                self.threads
            )));
        }
        self.recovery.validate()
    }
}

/// One rating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rating {
    pub user: u64,
    pub item: u64,
    pub value: f32,
}

impl Rating {
    /// The fixed order of the ratings of a block.
    fn order_key(&self) -> (u64, u64, u32) {
        (self.user, self.item, self.value.to_bits())
    }
}

// ---------------------------------------------------------------------------------------------
// Where users and items go, and the initial model

/// The worker that owns `user`.
pub fn owner_of(user: u64, workers: usize) -> usize {
    (splitmix64(user ^ USER_SALT) % workers as u64) as usize
}

/// The group of `user` among its worker's `blocks` groups.
pub fn group_of(user: u64, workers: usize, blocks: usize) -> usize {
    ((splitmix64(user ^ USER_SALT) / workers as u64) % blocks as u64) as usize
}

/// The slice of `item` among `slices`.
pub fn slice_of(item: u64, slices: usize) -> usize {
    (splitmix64(item ^ ITEM_SALT) % slices as u64) as usize
}

/// The sub-slice of `item` among its slice's `blocks` sub-slices.
pub fn sub_of(item: u64, slices: usize, blocks: usize) -> usize {
    ((splitmix64(item ^ ITEM_SALT) / slices as u64) % blocks as u64) as usize
}

/// The initial factors of a user (`item` false) or item: uniform in [0, 1/√rank), from the
/// seed and the id alone.
pub fn initial_factors(seed: u64, id: u64, item: bool, out: &mut [f32]) {
    let salt = if item { ITEM_SALT } else { USER_SALT };
    let mut rng = Rng::new(splitmix64(seed ^ salt) ^ splitmix64(id));
    let scale = 1.0 / (out.len() as f64).sqrt();
    for x in out {
        *x = (rng.next_f64() * scale) as f32;
    }
}

/// The dot product in a fixed order (eight running sums, then the sums added in order), which
/// the compiler can vectorise without changing a bit.
#[inline]
pub fn dot(p: &[f32], q: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (pc, pr) = p.split_at(p.len() / 8 * 8);
    let (qc, qr) = q.split_at(pc.len());
    for (a, b) in pc.chunks_exact(8).zip(qc.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += a[l] * b[l];
        }
    }
    for (a, b) in pr.iter().zip(qr) {
        acc[0] += a * b;
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

/// One SGD step on the rating `r` of user factors `p` and item factors `q`.
#[inline]
pub fn sgd_step(p: &mut [f32], q: &mut [f32], r: f32, alpha: f32, lambda: f32) {
    let e = r - dot(p, q);
    for (a, b) in p.iter_mut().zip(q.iter_mut()) {
        let (pa, qb) = (*a, *b);
        *a = pa + alpha * (e * qb - lambda * pa);
        *b = qb + alpha * (e * pa - lambda * qb);
    }
}

// ---------------------------------------------------------------------------------------------
// Input

/// A field separator of a rating line.
#[inline]
fn is_sep(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b'\r'
}

/// A non-negative integer id of only ASCII digits (leading zeros allowed), at most `i64::MAX`.
#[inline]
fn parse_id(tok: &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for &c in tok {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
    }
    (!tok.is_empty() && v <= i64::MAX as u64).then_some(v)
}

/// The rating on one line, `None` for a blank or comment line.
pub fn parse_rating_line(line: &[u8]) -> std::result::Result<Option<Rating>, String> {
    // The first three fields, and how many there are.
    let mut tok: [&[u8]; 3] = [&[]; 3];
    let (mut n, mut pos) = (0usize, 0usize);
    while pos < line.len() {
        if is_sep(line[pos]) {
            pos += 1;
            continue;
        }
        let from = pos;
        while pos < line.len() && !is_sep(line[pos]) {
            pos += 1;
        }
        if n < 3 {
            tok[n] = &line[from..pos];
        }
        n += 1;
    }
    if n == 0 || tok[0][0] == b'#' {
        return Ok(None);
    }
    if n != 3 {
        let s = if n == 1 { "" } else { "s" };
        return Err(format!(
            "expected a rating 'user item rating', found {n} field{s}: {}",
            quote(line.trim_ascii_end())
        ));
    }
    let id = |tok: &[u8], what: &str| {
        parse_id(tok).ok_or_else(|| {
            format!(
                "bad {what} id {}: expected an integer from 0 to {}",
                quote(tok),
                i64::MAX
            )
        })
    };
    let user = id(tok[0], "user")?;
    let item = id(tok[1], "item")?;
    let r = tok[2];
    let value = std::str::from_utf8(r)
        .ok()
        .and_then(|s| s.parse::<f32>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| {
            format!(
                "bad rating {}: expected a finite number (at most {:e} in size)",
                quote(r),
                f32::MAX
            )
        })?;
    Ok(Some(Rating { user, item, value }))
}

/// The least bytes of input one thread parses at a time.
const PIECE: u64 = 4 << 20;

/// The ratings of the lines of `files` that belong to `rank` of `workers` (Hadoop-style line
/// shares), bucketed by the worker that owns their user, each bucket in input order. The share
/// is cut into byte ranges (a range owns the lines that start in it) parsed in parallel on the
/// current thread pool; an error names the file and line of the first bad line.
pub fn load_share(
    storage: &dyn Storage,
    files: &[FileInfo],
    rank: usize,
    workers: usize,
) -> Result<Vec<Vec<Rating>>> {
    let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
    let ranges = crate::io::split::spread(&sizes, rank, workers);
    let total: u64 = ranges.iter().map(|&(s, e)| e.saturating_sub(s)).sum();
    let piece = total
        .div_ceil(4 * rayon::current_num_threads() as u64)
        .max(PIECE);
    load_pieces(storage, files, &ranges, workers, piece)
}

/// [`load_share`] of the byte `ranges` of `files` (one per file), parsed in pieces of at most
/// `piece` bytes.
fn load_pieces(
    storage: &dyn Storage,
    files: &[FileInfo],
    ranges: &[(u64, u64)],
    workers: usize,
    piece: u64,
) -> Result<Vec<Vec<Rating>>> {
    let mut pieces = Vec::new();
    for (f, &(s, e)) in files.iter().zip(ranges) {
        let mut a = s;
        while a < e {
            let b = e.min(a + piece);
            pieces.push((f, a, b));
            a = b;
        }
    }
    let parts: Vec<Result<Vec<Vec<Rating>>>> = pieces
        .par_iter()
        .map(|&(f, s, e)| {
            let mut out: Vec<Vec<Rating>> = vec![Vec::new(); workers];
            read_lines(storage, f, s, e, STREAM_BLOCK.min(piece), |lines, _| {
                for_each_line(lines, |line, line_start| {
                    match parse_rating_line(line) {
                        Ok(Some(r)) => out[owner_of(r.user, workers)].push(r),
                        Ok(None) => {}
                        Err(msg) => return Err(LineError { line_start, msg }),
                    }
                    Ok(())
                })
            })?;
            Ok(out)
        })
        .collect();
    let mut done = Vec::with_capacity(parts.len());
    for part in parts {
        done.push(part?);
    }
    if done.len() == 1 {
        return Ok(done.pop().expect("one piece"));
    }
    Ok((0..workers)
        .map(|o| {
            let mut v = Vec::with_capacity(done.iter().map(|d| d[o].len()).sum());
            for d in &mut done {
                v.extend_from_slice(&std::mem::take(&mut d[o]));
            }
            v
        })
        .collect())
}

/// Every rating of `path` (a file or a directory), in input order (tests and the reference).
pub fn read_all(storage: &dyn Storage, path: &str) -> Result<Vec<Rating>> {
    let files = storage.list_input(path, false)?;
    Ok(load_share(storage, &files, 0, 1)?.remove(0))
}

/// Reads this worker's share of `path` and regroups the ratings to the workers owning their
/// users: this worker's ratings, in the order of the workers that read them and of their
/// input. Collective (every worker agrees first that every read succeeded).
fn load_regrouped(w: &Worker, what: &str, path: &str) -> Result<Vec<Rating>> {
    let (me, p) = (w.rank(), w.size());
    let storage = crate::storage::for_path_on(path, Some(w.runtime().clone()))?;
    let loaded = storage.list_input(path, false).and_then(|files| {
        if files.is_empty() {
            return Err(Error::config(format!(
                "no {what} files in {}",
                quote(path.as_bytes())
            )));
        }
        load_share(&*storage, &files, me, p)
    });
    let failed = loaded.as_ref().err().map(|e| Error::config(e.to_string()));
    crate::worker::agree(w, &format!("mfsgd-{what}-read"), failed.map_or(Ok(()), Err))?;
    let mut buckets = loaded?;
    if p == 1 {
        return Ok(buckets.pop().expect("one bucket"));
    }
    let mut t = Table::new(Combiner::Reject);
    for (o, b) in buckets.into_iter().enumerate() {
        if b.is_empty() {
            continue;
        }
        let mut v: Vec<i64> = Vec::with_capacity(b.len() * 3);
        for r in b {
            v.extend([r.user as i64, r.item as i64, r.value.to_bits() as i64]);
        }
        t.put((me * p + o) as u32, Array::from_slice(w.pool(), &v));
    }
    w.regroup(&format!("mfsgd-{what}"), &mut t, Some(&Partitioner::Modulo))?;
    let mut out = Vec::new();
    for (pid, a) in t.iter() {
        let v = a.as_slice::<i64>()?;
        if pid as usize % p != me || v.len() % 3 != 0 {
            return Err(Error::Protocol(format!(
                "mfsgd-{what}: unexpected partition {pid} of {} values",
                v.len()
            )));
        }
        out.extend(v.chunks_exact(3).map(|c| Rating {
            user: c[0] as u64,
            item: c[1] as u64,
            value: f32::from_bits(c[2] as u32),
        }));
    }
    drop(t);
    w.pool().trim();
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The sequential reference

/// What a run gives: every user's and item's factors by id, and the test RMSE of each epoch.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub users: Vec<(u64, Vec<f32>)>,
    pub items: Vec<(u64, Vec<f32>)>,
    pub rmse: Vec<f64>,
}

/// MF-SGD of `train` straightforwardly, in the update order of a run on `workers` workers
/// ([`run`]): each epoch, for each step t and slot k, for each worker r, the slice
/// 2((r − t) mod W) + k; in it, round by round, the blocks (group j, sub-slice (j + round)
/// mod B) for j = 0…B−1, each block's ratings by user, item and rating. Factors in id order.
pub fn reference(train: &[Rating], test: &[Rating], opts: &Options, workers: usize) -> Model {
    let (k, b, s) = (opts.rank, opts.blocks, 2 * workers);
    let mut p: std::collections::BTreeMap<u64, Vec<f32>> = Default::default();
    let mut q: std::collections::BTreeMap<u64, Vec<f32>> = Default::default();
    for r in train {
        p.entry(r.user).or_insert_with(|| {
            let mut v = vec![0.0; k];
            initial_factors(opts.seed, r.user, false, &mut v);
            v
        });
        q.entry(r.item).or_insert_with(|| {
            let mut v = vec![0.0; k];
            initial_factors(opts.seed, r.item, true, &mut v);
            v
        });
    }
    let mean = if train.is_empty() {
        0.0
    } else {
        train.iter().map(|r| r.value as f64).sum::<f64>() / train.len() as f64
    };
    // blocks[worker][slice][group][sub]: the ratings in their fixed order.
    let mut blocks = vec![vec![vec![vec![Vec::<Rating>::new(); b]; b]; s]; workers];
    for r in train {
        let o = owner_of(r.user, workers);
        blocks[o][slice_of(r.item, s)][group_of(r.user, workers, b)][sub_of(r.item, s, b)].push(*r);
    }
    for v in blocks.iter_mut().flatten().flatten().flatten() {
        v.sort_by_key(Rating::order_key);
    }
    let mut rmse = Vec::new();
    for e in 0..opts.epochs {
        let alpha = opts.alpha_at(e);
        for t in 0..workers {
            for slot in 0..2 {
                for (r, mine) in blocks.iter().enumerate() {
                    let slice = 2 * ((r + workers - t) % workers) + slot;
                    for round in 0..b {
                        for j in 0..b {
                            for x in &mine[slice][j][(j + round) % b] {
                                let pu = p.get_mut(&x.user).expect("user");
                                let qi = q.get_mut(&x.item).expect("item");
                                sgd_step(pu, qi, x.value, alpha, opts.lambda);
                            }
                        }
                    }
                }
            }
        }
        if !test.is_empty() {
            let sse: f64 = test
                .iter()
                .map(|x| {
                    let pred = match (p.get(&x.user), q.get(&x.item)) {
                        (Some(a), Some(b)) => dot(a, b) as f64,
                        _ => mean,
                    };
                    (x.value as f64 - pred).powi(2)
                })
                .sum();
            rmse.push((sse / test.len() as f64).sqrt());
        }
    }
    Model {
        users: p.into_iter().collect(),
        items: q.into_iter().collect(),
        rmse,
    }
}

// ---------------------------------------------------------------------------------------------
// The collective thread

type Task<'s> = Box<dyn FnOnce(&Worker) + Send + 's>;

/// The one thread that makes a run's collective calls, in the order they are issued, while
/// the caller computes. A call returns a [`Pending`] to wait on. (With non-blocking
/// collectives in the engine, `Comm::call` becomes their start and `Pending::wait` their wait.)
struct Comm<'s> {
    tx: mpsc::Sender<Task<'s>>,
}

/// A collective call issued to [`Comm`].
struct Pending<R>(mpsc::Receiver<Result<R>>);

impl<'s> Comm<'s> {
    /// Starts the thread in `scope`; it ends when the `Comm` is dropped.
    fn start(scope: &'s std::thread::Scope<'s, '_>, w: &'s Worker) -> Comm<'s> {
        let (tx, rx) = mpsc::channel::<Task<'s>>();
        scope.spawn(move || {
            while let Ok(task) = rx.recv() {
                task(w);
            }
        });
        Comm { tx }
    }

    fn call<R: Send + 's>(&self, f: impl FnOnce(&Worker) -> Result<R> + Send + 's) -> Pending<R> {
        let (rtx, rrx) = mpsc::sync_channel(1);
        // The thread lives as long as `self`: the send cannot fail.
        let _ = self.tx.send(Box::new(move |w: &Worker| {
            let _ = rtx.send(f(w));
        }));
        Pending(rrx)
    }
}

impl<R> Pending<R> {
    fn wait(self) -> Result<R> {
        self.0
            .recv()
            .unwrap_or_else(|_| Err(Error::config("mfsgd: the collective thread ended early")))
    }
}

// ---------------------------------------------------------------------------------------------
// The distributed run

/// The result on one worker.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// This worker's users in id order, and their factors (`rank` each, concatenated).
    pub users: Vec<u64>,
    pub user_factors: Vec<f32>,
    /// The items of this worker's two home slices in id order, and their factors.
    pub items: Vec<u64>,
    pub item_factors: Vec<f32>,
    /// Test RMSE after each epoch (empty without a test file).
    pub rmse: Vec<f64>,
    /// Training and test ratings, distinct users and items of the training ratings (all
    /// workers).
    pub ratings: u64,
    pub test_ratings: u64,
    pub n_users: u64,
    pub n_items: u64,
    /// Reading and regrouping the ratings, in seconds; then building the blocks and the
    /// initial model (`load_s` is both).
    pub read_s: f64,
    pub load_s: f64,
    /// Seconds of each epoch's updates, and of each epoch's test.
    pub epoch_s: Vec<f64>,
    pub test_s: Vec<f64>,
    /// The epoch of the checkpoint this run resumed from (its RMSE and seconds come first in
    /// `rmse`, `epoch_s` and `test_s`).
    pub resumed_from: Option<usize>,
}

/// One slice's items, sorted by sub-slice then id, and where each sub-slice starts.
struct SliceItems {
    ids: Vec<u64>,
    sub_start: Vec<usize>,
}

/// A worker's ratings in blocks: (slice, group, sub) → a run of `(user row in group, item row
/// in sub-slice, rating)`.
struct Blocks {
    start: Vec<usize>,
    data: Vec<(u32, u32, f32)>,
    b: usize,
}

impl Blocks {
    fn get(&self, slice: usize, group: usize, sub: usize) -> &[(u32, u32, f32)] {
        let i = (slice * self.b + group) * self.b + sub;
        &self.data[self.start[i]..self.start[i + 1]]
    }
}

/// One block's updates, a task of the compute threads: the block (slice, group, sub-slice)
/// and the learning rate, with the factors it alone updates in this round travelling with it
/// (moving a `Vec` moves a pointer): the group's user rows and the sub-slice's item rows.
struct BlockTask {
    slice: usize,
    group: usize,
    sub: usize,
    alpha: f32,
    users: Vec<f32>,
    items: Vec<f32>,
}

/// The compute threads of a run: persistent for the whole run, each taking the next block of
/// a round from one queue (Harp's `DynamicScheduler`).
type Threads = Dynamic<BlockTask, BlockTask, ()>;

/// `threads` persistent compute threads that run the SGD updates of a [`BlockTask`] against
/// `blocks`.
fn start_threads(threads: usize, blocks: Arc<Blocks>, k: usize, lambda: f32) -> Result<Threads> {
    Dynamic::new(vec![(); threads], move |_, mut t: BlockTask| {
        let (pg, qs) = (&mut t.users, &mut t.items);
        for &(u, i, r) in blocks.get(t.slice, t.group, t.sub) {
            let (u, i) = (u as usize * k, i as usize * k);
            sgd_step(&mut pg[u..u + k], &mut qs[i..i + k], r, t.alpha, lambda);
        }
        Ok(t)
    })
}

/// Updates the slice `q` (its sub-slices start at `sub_start`) against the blocks of `slice`
/// on the compute threads: B rounds of B disjoint blocks, block (group j, sub-slice
/// (j + round) mod B) in round `round`. The groups' user rows are `groups`; the sub-slices
/// are taken out of `q` for the rounds and put back after.
fn update_slice(
    threads: &mut Threads,
    slice: usize,
    groups: &mut [Vec<f32>],
    q: &mut [f32],
    sub_start: &[usize],
    k: usize,
    alpha: f32,
) -> Result<()> {
    let b = groups.len();
    let mut subs: Vec<Vec<f32>> = sub_start
        .windows(2)
        .map(|w| q[w[0] * k..w[1] * k].to_vec())
        .collect();
    for round in 0..b {
        let tasks: Vec<BlockTask> = (0..b)
            .map(|j| {
                let sub = (j + round) % b;
                BlockTask {
                    slice,
                    group: j,
                    sub,
                    alpha,
                    users: std::mem::take(&mut groups[j]),
                    items: std::mem::take(&mut subs[sub]),
                }
            })
            .collect();
        for t in threads.run(tasks)? {
            groups[t.group] = t.users;
            subs[t.sub] = t.items;
        }
    }
    for (w, sub) in sub_start.windows(2).zip(&subs) {
        q[w[0] * k..w[1] * k].copy_from_slice(sub);
    }
    Ok(())
}

/// Ids to what is known of them: an array indexed by id when the ids are small enough, a hash
/// map otherwise.
enum IdIndex<T> {
    Dense(Vec<Option<T>>),
    Map(FastMap<u64, T>),
}

impl<T: Copy> IdIndex<T> {
    /// An empty index of ids up to `max`.
    fn new(max: u64, dense: bool) -> IdIndex<T> {
        if dense {
            IdIndex::Dense(vec![None; max as usize + 1])
        } else {
            IdIndex::Map(FastMap::default())
        }
    }

    fn insert(&mut self, id: u64, v: T) {
        match self {
            IdIndex::Dense(a) => a[id as usize] = Some(v),
            IdIndex::Map(m) => {
                m.insert(id, v);
            }
        }
    }

    #[inline]
    fn get(&self, id: u64) -> Option<T> {
        match self {
            IdIndex::Dense(a) => a.get(id as usize).copied().flatten(),
            IdIndex::Map(m) => m.get(&id).copied(),
        }
    }
}

/// The distinct values of `ids` (each at most `max`) in ascending order: flags in an array
/// indexed by id when `dense`, a sort otherwise.
fn distinct(ids: impl Iterator<Item = u64>, max: u64, dense: bool) -> Vec<u64> {
    if dense {
        let mut seen = vec![false; max as usize + 1];
        for id in ids {
            seen[id as usize] = true;
        }
        (0..=max).filter(|&id| seen[id as usize]).collect()
    } else {
        let mut v: Vec<u64> = ids.collect();
        v.par_sort_unstable();
        v.dedup();
        v
    }
}

/// Where each of `n` runs starts when values with the given run numbers are laid out by run
/// (and where the last ends): counts, then prefix sums.
fn starts(n: usize, keys: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut s = vec![0usize; n + 1];
    for k in keys {
        s[k + 1] += 1;
    }
    for i in 0..n {
        s[i + 1] += s[i];
    }
    s
}

/// `rows` cut at `start` (row numbers; `k` values per row) into mutable pieces.
fn split_rows<'a, T>(mut rows: &'a mut [T], start: &[usize], k: usize) -> Vec<&'a mut [T]> {
    let mut out = Vec::with_capacity(start.len() - 1);
    for w in start.windows(2) {
        let (a, rest) = rows.split_at_mut((w[1] - w[0]) * k);
        out.push(a);
        rows = rest;
    }
    out
}

/// A test rating of a known user and item: (user group, user row in the group, item row in
/// the slice, rating).
type TestRating = (u32, u32, u32, f32);

/// The squared error of a slice's test ratings, the users' factors in their `groups`. Summed
/// in chunks of a fixed size, in order.
fn test_sse(tests: &[TestRating], groups: &[Vec<f32>], q: &[f32], k: usize) -> f64 {
    tests
        .par_chunks(4096)
        .map(|c| {
            c.iter()
                .map(|&(g, u, i, r)| {
                    let (u, i) = (u as usize * k, i as usize * k);
                    let pred = dot(&groups[g as usize][u..u + k], &q[i..i + k]) as f64;
                    (r as f64 - pred).powi(2)
                })
                .sum::<f64>()
        })
        .collect::<Vec<f64>>()
        .into_iter()
        .sum()
}

/// Runs MF-SGD; every worker calls it. `each(epoch, seconds, rmse, trained)` after every
/// epoch: the epoch's seconds (updates), its test RMSE (NaN without a test file) and the
/// seconds since the input was read (building the blocks, the epochs and their tests so far).
pub fn run(
    w: &Worker,
    opts: &Options,
    mut each: impl FnMut(usize, f64, f64, f64) + Send,
) -> Result<Outcome> {
    opts.validate()?;
    crate::apps::compute_threads(opts.threads)?.install(|| run_in(w, opts, &mut each))
}

fn sum_all(w: &Worker, label: &str, v: &[f64]) -> Result<Vec<f64>> {
    let mut t = Table::new(Combiner::Sum);
    t.put(0, Array::from_slice(w.pool(), v));
    w.allreduce(label, &mut t, Opts::default())?;
    Ok(t.get(0).expect("sum").as_slice::<f64>()?.to_vec())
}

fn run_in(
    w: &Worker,
    opts: &Options,
    each: &mut (dyn FnMut(usize, f64, f64, f64) + Send),
) -> Result<Outcome> {
    let (me, p) = (w.rank(), w.size());
    let (k, b, s) = (opts.rank, opts.blocks, 2 * p);
    let t0 = Instant::now();
    // An unusable checkpoint directory fails now, not after the set-up.
    let rec = opts.recovery.open(w, "mfsgd")?;
    let mut train = load_regrouped(w, "input", &opts.input)?;
    let test = match &opts.test {
        Some(t) => load_regrouped(w, "test", t)?,
        None => Vec::new(),
    };
    let read_s = t0.elapsed().as_secs_f64();
    let t_read = Instant::now();

    // Ids become rows through an array indexed by id when the ids are small (at most about
    // two per rating), through a hash map otherwise.
    let dense_below = (2 * train.len() as u64).max(1 << 20);
    // Every item with a training rating, on every worker.
    let max_item = train.par_iter().map(|r| r.item).max().unwrap_or(0);
    let mine: Vec<i64> = distinct(
        train.iter().map(|r| r.item),
        max_item,
        max_item < dense_below,
    )
    .into_iter()
    .map(|x| x as i64)
    .collect();
    let mut t = Table::new(Combiner::Reject);
    t.put(me as u32, Array::from_slice(w.pool(), &mine));
    w.allgather("mfsgd-items", &mut t, Opts::default())?;
    let mut all: Vec<u64> = Vec::new();
    for (_, a) in t.iter() {
        all.extend(a.as_slice::<i64>()?.iter().map(|&x| x as u64));
    }
    drop((t, mine));
    all.par_sort_unstable();
    all.dedup();
    let mut slices: Vec<Vec<(usize, u64)>> = vec![Vec::new(); s];
    for &it in &all {
        slices[slice_of(it, s)].push((sub_of(it, s, b), it));
    }
    let n_items = all.len() as u64;
    let max_item = all.last().copied().unwrap_or(0);
    drop(all);
    // item → (slice, sub-slice, row in its sub-slice)
    let mut item_at = IdIndex::new(max_item, max_item < dense_below.max(4 * n_items));
    let slices: Vec<SliceItems> = slices
        .into_iter()
        .enumerate()
        .map(|(si, mut v)| {
            v.sort_unstable();
            let sub_start = starts(b, v.iter().map(|x| x.0));
            for (row, &(sub, id)) in v.iter().enumerate() {
                item_at.insert(id, (si as u32, sub as u32, (row - sub_start[sub]) as u32));
            }
            SliceItems {
                ids: v.into_iter().map(|x| x.1).collect(),
                sub_start,
            }
        })
        .collect();

    // This worker's users, by group then id (a counting sort of the ids in order); their
    // factors.
    let max_user = train.par_iter().map(|r| r.user).max().unwrap_or(0);
    let ids = distinct(
        train.iter().map(|r| r.user),
        max_user,
        max_user < dense_below,
    );
    let group_start = starts(b, ids.iter().map(|&u| group_of(u, p, b)));
    let mut users = vec![(0usize, 0u64); ids.len()];
    let mut fill = group_start.clone();
    for &u in &ids {
        let g = group_of(u, p, b);
        users[fill[g]] = (g, u);
        fill[g] += 1;
    }
    drop(ids);
    if users.len() > u32::MAX as usize - 1
        || slices.iter().any(|x| x.ids.len() >= u32::MAX as usize)
    {
        return Err(Error::data(
            "more than 2^32 − 1 users on a worker or items in a slice: use more workers",
        ));
    }
    // user → (group, row in its group)
    let mut user_at = IdIndex::new(max_user, max_user < dense_below);
    for (row, &(g, id)) in users.iter().enumerate() {
        user_at.insert(id, (g as u32, (row - group_start[g]) as u32));
    }
    crate::util::memory::check_fits(
        "the factors",
        (users.len() as u128 + n_items as u128).checked_mul(k as u128 * 4),
    )?;
    let mut user_f = vec![0.0f32; users.len() * k];
    user_f
        .par_chunks_mut(k)
        .zip(&users)
        .for_each(|(f, &(_, id))| initial_factors(opts.seed, id, false, f));

    // The blocks of the training ratings: a counting sort by block, then each block sorted
    // into its fixed order (rows follow the ids' order, so by user id, item id and rating).
    let nb = s * b * b;
    let place = |r: &Rating| -> (usize, (u32, u32, f32)) {
        let (g, urow) = user_at.get(r.user).expect("a user of this worker");
        let (sl, sub, irow) = item_at.get(r.item).expect("an item with a rating");
        let block = (sl as usize * b + g as usize) * b + sub as usize;
        (block, (urow, irow, r.value))
    };
    // Each rating's ids become its block (in `user`) and its two rows (in `item`), in parallel.
    train.par_iter_mut().for_each(|r| {
        let (block, (u, i, _)) = place(r);
        r.user = block as u64;
        r.item = (u as u64) << 32 | i as u64;
    });
    let start = starts(nb, train.iter().map(|r| r.user as usize));
    let mut fill = start.clone();
    let mut data = vec![(0u32, 0u32, 0.0f32); train.len()];
    for r in &train {
        let block = r.user as usize;
        data[fill[block]] = ((r.item >> 32) as u32, r.item as u32, r.value);
        fill[block] += 1;
    }
    drop(fill);
    split_rows(&mut data, &start, 1)
        .into_par_iter()
        .for_each(|block| {
            block.sort_unstable_by_key(|&(u, i, r)| ((u as u64) << 32 | i as u64, r.to_bits()))
        });
    let blocks = Arc::new(Blocks { start, data, b });
    // Test ratings by slice (item rows from the slice's start); the ratings of those whose
    // user or item is unknown.
    let mut tests: Vec<Vec<TestRating>> = vec![Vec::new(); s];
    let mut unknown: Vec<f32> = Vec::new();
    for r in &test {
        match (user_at.get(r.user), item_at.get(r.item)) {
            (Some((g, urow)), Some((sl, sub, irow))) => {
                let i = irow as usize + slices[sl as usize].sub_start[sub as usize];
                tests[sl as usize].push((g, urow, i as u32, r.value))
            }
            _ => unknown.push(r.value),
        }
    }
    let stats = sum_all(
        w,
        "mfsgd-stats",
        &[
            train.len() as f64,
            test.len() as f64,
            users.len() as f64,
            train.iter().map(|r| r.value as f64).sum(),
        ],
    )?;
    let (ratings, test_ratings, n_users) = (stats[0] as u64, stats[1] as u64, stats[2] as u64);
    let mean = if stats[0] > 0.0 {
        stats[3] / stats[0]
    } else {
        0.0
    };
    drop((train, test, user_at, item_at));

    // The two home slices.
    let home = |slot: usize| 2 * me + slot;
    let mut slot_tables: [Option<Table>; 2] = [None, None];
    for (slot, st) in slot_tables.iter_mut().enumerate() {
        let sl = home(slot);
        let mut f = vec![0.0f32; slices[sl].ids.len() * k];
        f.par_chunks_mut(k)
            .zip(&slices[sl].ids)
            .for_each(|(f, &id)| initial_factors(opts.seed, id, true, f));
        let mut t = Table::new(Combiner::Reject);
        t.put(sl as u32, Array::from_slice(w.pool(), &f));
        *st = Some(t);
    }
    let load_s = t0.elapsed().as_secs_f64();

    let mut rmse = Vec::new();
    let (mut epoch_s, mut test_s) = (Vec::new(), Vec::new());
    // What the factors and the RMSE curve depend on, besides the number of workers (which the
    // checkpoint checks itself): the input's shape and the options. Not the threads or the
    // rotation mode (the same bits either way), nor --epochs (the learning rate of epoch e
    // does not depend on it). Numbers of f32 options as their shortest round-trip text.
    let meta = serde_json::json!({
        "app": "mfsgd",
        "ratings": ratings,
        "test_ratings": test_ratings,
        "users": n_users,
        "items": n_items,
        "rank": k,
        "blocks": b,
        "lambda": opts.lambda.to_string(),
        "alpha": opts.alpha.to_string(),
        "decay": opts.decay.to_string(),
        "seed": opts.seed,
    });
    let homes = [&slices[home(0)].ids[..], &slices[home(1)].ids[..]];
    let start = resume(
        w,
        &rec,
        &meta,
        (opts.epochs, k),
        (&users, &mut user_f),
        (homes, [home(0), home(1)], &mut slot_tables),
        (&mut rmse, &mut epoch_s, &mut test_s),
    )?;
    let unknown_sse: f64 = unknown.iter().map(|&x| (x as f64 - mean).powi(2)).sum();
    let pipelined = opts.rotation == Rotation::Pipelined;
    // The user factors by group, each owned by whichever compute thread updates the group.
    let mut groups: Vec<Vec<f32>> = group_start
        .windows(2)
        .map(|g| user_f[g[0] * k..g[1] * k].to_vec())
        .collect();
    drop(user_f);
    let mut threads = start_threads(opts.threads, blocks, k, opts.lambda)?;
    std::thread::scope(|scope| -> Result<()> {
        let comm = Comm::start(scope, w);
        // One sweep of the slices: `work(slot, slice, factors)` on each, then the rotate.
        let sweep = |slot_tables: &mut [Option<Table>; 2],
                     work: &mut dyn FnMut(usize, &mut [f32]) -> Result<()>|
         -> Result<()> {
            let mut pending: [Option<Pending<Table>>; 2] = [None, None];
            for t in 0..p {
                for slot in 0..2 {
                    let mut table = match pending[slot].take() {
                        Some(h) => h.wait()?,
                        None => slot_tables[slot].take().expect("slot"),
                    };
                    let sl = 2 * ((me + p - t) % p) + slot;
                    let want = slices[sl].ids.len() * k;
                    let ok = table.len() == 1
                        && table
                            .get(sl as u32)
                            .and_then(|a| a.as_slice::<f32>().ok())
                            .map(|x| x.len())
                            == Some(want);
                    if !ok {
                        return Err(Error::Protocol(format!(
                            "rank {me}: mfsgd-rotate: expected slice {sl} of {want} factors, \
                             received partitions {:?}",
                            table.ids()
                        )));
                    }
                    work(sl, table.get_mut(sl as u32).expect("slice").as_mut_slice()?)?;
                    let h = comm.call(move |w| {
                        w.rotate("mfsgd-rotate", &mut table, None)?;
                        Ok(table)
                    });
                    if pipelined {
                        pending[slot] = Some(h);
                    } else {
                        slot_tables[slot] = Some(h.wait()?);
                    }
                }
            }
            for slot in 0..2 {
                if let Some(h) = pending[slot].take() {
                    slot_tables[slot] = Some(h.wait()?);
                }
            }
            Ok(())
        };
        for epoch in start + 1..=opts.epochs {
            let te = Instant::now();
            sweep(&mut slot_tables, &mut |sl, q| {
                let alpha = opts.alpha_at(epoch - 1);
                update_slice(
                    &mut threads,
                    sl,
                    &mut groups,
                    q,
                    &slices[sl].sub_start,
                    k,
                    alpha,
                )
            })?;
            let secs = te.elapsed().as_secs_f64();
            epoch_s.push(secs);
            let mut e_rmse = f64::NAN;
            if opts.test.is_some() {
                let tt = Instant::now();
                let mut sse = unknown_sse;
                sweep(&mut slot_tables, &mut |sl, q| {
                    sse += test_sse(&tests[sl], &groups, q, k);
                    Ok(())
                })?;
                let sums = comm
                    .call(move |w| sum_all(w, "mfsgd-rmse", &[sse]))
                    .wait()?;
                e_rmse = (sums[0] / test_ratings.max(1) as f64).sqrt();
                if !e_rmse.is_finite() {
                    return Err(Error::data(format!(
                        "mfsgd: the test RMSE after epoch {epoch} is {e_rmse}: the SGD \
                         diverged (try a smaller --alpha)"
                    )));
                }
                rmse.push(e_rmse);
                test_s.push(tt.elapsed().as_secs_f64());
            }
            each(epoch, secs, e_rmse, t_read.elapsed().as_secs_f64());
            // Every slice is home again: the state is this worker's users and home slices.
            rec.after_iteration(w, epoch, opts.epochs, &meta, || {
                state(
                    w,
                    (&users, &groups.concat()),
                    (homes, [home(0), home(1)], &slot_tables),
                    (&rmse, &epoch_s, &test_s),
                )
            })?;
        }
        Ok(())
    })?;
    drop(threads);
    let user_f = groups.concat();
    drop(groups);

    // Factors in id order: this worker's users, and the items of its home slices.
    let mut uo: Vec<(u64, usize)> = users
        .iter()
        .enumerate()
        .map(|(row, &(_, id))| (id, row))
        .collect();
    uo.par_sort_unstable();
    let mut user_factors = Vec::with_capacity(user_f.len());
    for &(_, row) in &uo {
        user_factors.extend_from_slice(&user_f[row * k..row * k + k]);
    }
    let mut io: Vec<(u64, usize, usize)> = Vec::new();
    for slot in 0..2 {
        let sl = home(slot);
        for (row, &id) in slices[sl].ids.iter().enumerate() {
            io.push((id, slot, row));
        }
    }
    io.par_sort_unstable();
    let mut item_factors = Vec::with_capacity(io.len() * k);
    for &(_, slot, row) in &io {
        let t = slot_tables[slot].as_ref().expect("slot");
        let f = t.get(home(slot) as u32).expect("slice").as_slice::<f32>()?;
        item_factors.extend_from_slice(&f[row * k..row * k + k]);
    }
    Ok(Outcome {
        users: uo.into_iter().map(|x| x.0).collect(),
        user_factors,
        items: io.into_iter().map(|x| x.0).collect(),
        item_factors,
        rmse,
        ratings,
        test_ratings,
        n_users,
        n_items,
        read_s,
        load_s,
        epoch_s,
        test_s,
        resumed_from: (start > 0).then_some(start),
    })
}

/// A worker's users in row order, `(group, id)`, and their factors.
type UserState<'a, F> = (&'a [(usize, u64)], F);
/// The ids of the items of a worker's two home slices, the slices' numbers and the slot tables.
type ItemState<'a, T> = ([&'a [u64]; 2], [usize; 2], T);
/// The test RMSE, update seconds and test seconds of every epoch so far.
type History<'a, V> = (V, V, V);

/// This worker's state after an epoch, when every slice is home: table `users` (partition 0:
/// the factors of its users in row order, f32; partition 1: their ids, i64), table `items`
/// (partitions 0 and 1: the factors of the slices in slots 0 and 1, f32; 2 and 3: their item
/// ids, i64) and table `history` (partition 0: the test RMSE of every epoch so far, 1: the
/// seconds of its updates, 2: of its test pass).
fn state(
    w: &Worker,
    (users, user_f): UserState<&[f32]>,
    (ids, homes, slots): ItemState<&[Option<Table>; 2]>,
    (rmse, epoch_s, test_s): History<&[f64]>,
) -> Result<Vec<(&'static str, Table)>> {
    let pool = w.pool();
    let as_i64 = |v: &mut dyn Iterator<Item = u64>| v.map(|x| x as i64).collect::<Vec<i64>>();
    let mut u = Table::new(Combiner::Reject);
    u.put(0, Array::from_slice(pool, user_f));
    u.put(
        1,
        Array::from_slice(pool, &as_i64(&mut users.iter().map(|x| x.1))),
    );
    let mut it = Table::new(Combiner::Reject);
    for slot in 0..2 {
        let t = slots[slot].as_ref().expect("slot");
        let f = t
            .get(homes[slot] as u32)
            .expect("slice")
            .as_slice::<f32>()?;
        it.put(slot as u32, Array::from_slice(pool, f));
        it.put(
            2 + slot as u32,
            Array::from_slice(pool, &as_i64(&mut ids[slot].iter().copied())),
        );
    }
    let mut h = Table::new(Combiner::Reject);
    for (pid, v) in [rmse, epoch_s, test_s].into_iter().enumerate() {
        h.put(pid as u32, Array::from_slice(pool, v));
    }
    Ok(vec![("users", u), ("items", it), ("history", h)])
}

/// With `--resume`, this worker's factors and history from the newest checkpoint ([`state`]);
/// returns the epochs done (0 for a fresh start). A part whose users or items are not the
/// ones the input gives this worker fails every worker.
fn resume(
    w: &Worker,
    rec: &Recovering,
    meta: &serde_json::Value,
    (epochs, k): (usize, usize),
    (users, user_f): UserState<&mut [f32]>,
    (ids, homes, slots): ItemState<&mut [Option<Table>; 2]>,
    (rmse, epoch_s, test_s): History<&mut Vec<f64>>,
) -> Result<usize> {
    let Some(mut r) = rec.resume(w, meta, epochs)? else {
        return Ok(0);
    };
    let it = r.iteration;
    let check = (|| {
        let (u, items, h) = (r.take("users")?, r.take("items")?, r.take("history")?);
        let not_mfsgd = || {
            Error::data(format!(
                "the checkpoint at epoch {it} does not hold MF-SGD state"
            ))
        };
        let other = |what: &str| {
            Error::data(format!(
                "the checkpoint at epoch {it} holds other {what} for rank {} than the input \
                 gives it (the same input with the same number of workers resumes)",
                w.rank()
            ))
        };
        let ids_of = |t: &Table, pid: u32| -> Result<Vec<u64>> {
            let a = t.get(pid).ok_or_else(not_mfsgd)?;
            Ok(a.as_slice::<i64>()?.iter().map(|&x| x as u64).collect())
        };
        let f32_of = |t: &Table, pid: u32, n: usize| -> Result<Vec<f32>> {
            let a = t.get(pid).ok_or_else(not_mfsgd)?.as_slice::<f32>()?;
            if a.len() != n {
                return Err(not_mfsgd());
            }
            Ok(a.to_vec())
        };
        let f64_of = |pid: u32| -> Result<Vec<f64>> {
            Ok(h.get(pid)
                .ok_or_else(not_mfsgd)?
                .as_slice::<f64>()?
                .to_vec())
        };
        if ids_of(&u, 1)? != users.iter().map(|x| x.1).collect::<Vec<u64>>() {
            return Err(other("users"));
        }
        let mut restored: [Option<Table>; 2] = [None, None];
        for slot in 0..2 {
            if ids_of(&items, 2 + slot as u32)? != ids[slot] {
                return Err(other("items"));
            }
            let f = f32_of(&items, slot as u32, ids[slot].len() * k)?;
            let mut t = Table::new(Combiner::Reject);
            t.put(homes[slot] as u32, Array::from_slice(w.pool(), &f));
            restored[slot] = Some(t);
        }
        let (r_rmse, r_epoch, r_test) = (f64_of(0)?, f64_of(1)?, f64_of(2)?);
        if r_epoch.len() != it || r_rmse.len() != r_test.len() {
            return Err(not_mfsgd());
        }
        user_f.copy_from_slice(&f32_of(&u, 0, user_f.len())?);
        *slots = restored;
        (*rmse, *epoch_s, *test_s) = (r_rmse, r_epoch, r_test);
        Ok(())
    })();
    crate::worker::agree(w, "mfsgd-resume", check)?;
    Ok(it)
}

/// The factors as text: `u<TAB>user<TAB>f1 f2 …` lines for the users, then `i<TAB>item<TAB>…`
/// for the items, each value in Rust's shortest round-trip form.
pub fn format_factors(o: &Outcome, rank: usize) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity((o.users.len() + o.items.len()) * (16 + rank * 12));
    for (tag, ids, f) in [
        ("u", &o.users, &o.user_factors),
        ("i", &o.items, &o.item_factors),
    ] {
        for (id, v) in ids.iter().zip(f.chunks_exact(rank.max(1))) {
            let _ = write!(s, "{tag}\t{id}\t");
            for (j, x) in v.iter().enumerate() {
                let _ = write!(s, "{}{x}", if j == 0 { "" } else { " " });
            }
            s.push('\n');
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Generated ratings

/// What [`generate`] makes.
#[derive(Debug, Clone)]
pub struct GenSpec {
    pub users: u64,
    pub items: u64,
    pub ratings: u64,
    /// Rank of the true factors.
    pub rank: usize,
    /// Standard deviation of the Gaussian noise added to each rating.
    pub noise: f64,
    /// Power-law exponent: user (item) id = ⌊N·u^γ⌋ for u uniform in [0, 1) (γ = 1: uniform).
    pub skew: f64,
    /// Fraction of the ratings written to the test file.
    pub test_fraction: f64,
    pub seed: u64,
}

/// The ratings of `spec` as `user item rating` lines: (training text, test text). The true
/// factors are uniform in [0, √(12/rank)) (so a true rating averages 3); each rating adds
/// Gaussian noise. Rating j's line depends on the seed and j alone (chunks are generated in
/// parallel).
pub fn generate(spec: &GenSpec) -> (String, String) {
    let k = spec.rank.max(1);
    let c = (12.0 / k as f64).sqrt();
    let truth = |n: u64, salt: u64| -> Vec<f32> {
        let mut v = vec![0.0f32; n as usize * k];
        v.par_chunks_mut(k).enumerate().for_each(|(id, f)| {
            let mut rng = Rng::new(splitmix64(spec.seed ^ salt) ^ splitmix64(id as u64));
            for x in f {
                *x = (rng.next_f64() * c) as f32;
            }
        });
        v
    };
    let (pu, qi) = (truth(spec.users, USER_SALT), truth(spec.items, ITEM_SALT));
    const CHUNK: u64 = 1 << 16;
    let chunks = spec.ratings.div_ceil(CHUNK);
    let parts: Vec<(String, String)> = (0..chunks)
        .into_par_iter()
        .map(|c| {
            use std::fmt::Write;
            let mut rng = Rng::new(splitmix64(spec.seed) ^ splitmix64(c + 1));
            let (mut tr, mut te) = (String::new(), String::new());
            for _ in c * CHUNK..((c + 1) * CHUNK).min(spec.ratings) {
                let pick = |rng: &mut Rng, n: u64| {
                    ((rng.next_f64().powf(spec.skew) * n as f64) as u64).min(n - 1)
                };
                let u = pick(&mut rng, spec.users);
                let i = pick(&mut rng, spec.items);
                let (a, b) = (u as usize * k, i as usize * k);
                let r = dot(&pu[a..a + k], &qi[b..b + k]) as f64 + spec.noise * rng.normal();
                let to_test = rng.next_f64() < spec.test_fraction;
                let out = if to_test { &mut te } else { &mut tr };
                let _ = writeln!(out, "{u} {i} {r:.3}");
            }
            (tr, te)
        })
        .collect();
    let (mut tr, mut te) = (String::new(), String::new());
    for (a, b) in parts {
        tr.push_str(&a);
        te.push_str(&b);
    }
    (tr, te)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_ratings() {
        let ok = |s: &str| parse_rating_line(s.as_bytes()).unwrap();
        assert_eq!(
            ok(" 3\t4  -1.5\r"),
            Some(Rating {
                user: 3,
                item: 4,
                value: -1.5
            })
        );
        assert_eq!(ok(""), None);
        assert_eq!(ok("  # a comment"), None);
        assert_eq!(
            ok("9223372036854775807 0 1e3").unwrap().user,
            i64::MAX as u64
        );
        let err = |s: &str| parse_rating_line(s.as_bytes()).unwrap_err();
        assert!(
            err("1 2").contains("found 2 fields: '1 2'"),
            "{}",
            err("1 2")
        );
        assert!(err("1 2 3 4").contains("found 4 fields"));
        assert!(
            err("-1 2 3").contains("bad user id '-1'"),
            "{}",
            err("-1 2 3")
        );
        assert!(err("1 +2 3").contains("bad item id '+2'"));
        assert!(err("1 9223372036854775808 3").contains("bad item id"));
        for bad in ["x", "nan", "inf", "1e39", ""] {
            if bad.is_empty() {
                continue;
            }
            let e = err(&format!("1 2 {bad}"));
            assert!(e.contains(&format!("bad rating '{bad}'")), "{e}");
        }
    }

    /// Whatever the size of the pieces parsed in parallel, each worker's ratings come in input
    /// order, and an error names the first bad line.
    #[test]
    fn pieces_keep_the_input_order_and_name_the_first_bad_line() {
        use crate::io::split::spread;
        let d = std::env::temp_dir().join(format!("harp-mfsgd-pieces-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("r.txt").to_str().unwrap().to_string();
        let s = crate::storage::LocalStorage;
        let mut text = String::new();
        for j in 0..300u64 {
            text.push_str(&format!("{} {}\t{}.5\n", j * 7 % 101, j % 13, j));
            if j % 50 == 0 {
                text.push_str("# c\n\n");
            }
        }
        std::fs::write(&path, &text).unwrap();
        let files = s.list_input(&path, false).unwrap();
        let sizes = [files[0].size];
        let want: Vec<Rating> = text
            .lines()
            .filter_map(|l| parse_rating_line(l.as_bytes()).unwrap())
            .collect();
        assert_eq!(want.len(), 300);
        for piece in [1u64, 5, 64, 1 << 20] {
            for workers in [1usize, 3] {
                let mut got = vec![Vec::new(); workers];
                for rank in 0..workers {
                    let ranges = spread(&sizes, rank, workers);
                    let b = load_pieces(&s, &files, &ranges, workers, piece).unwrap();
                    for (o, v) in b.into_iter().enumerate() {
                        got[o].extend(v);
                    }
                }
                for (o, g) in got.iter().enumerate() {
                    let w: Vec<Rating> = want
                        .iter()
                        .filter(|r| owner_of(r.user, workers) == o)
                        .copied()
                        .collect();
                    assert_eq!(g, &w, "piece {piece}, {workers} workers, owner {o}");
                }
            }
        }
        let mut lines: Vec<&str> = text.lines().collect();
        lines[100] = "1 2 x";
        lines[250] = "1 2";
        std::fs::write(&path, lines.join("\n")).unwrap();
        let files = s.list_input(&path, false).unwrap();
        let ranges = spread(&[files[0].size], 0, 1);
        for piece in [1u64, 5, 1 << 20] {
            let e = load_pieces(&s, &files, &ranges, 1, piece)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("r.txt:101:") && e.contains("bad rating 'x'"),
                "{e}"
            );
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_kernel_descends_the_error() {
        // One step on one rating lowers its squared error; the dot is the plain sum's value
        // here (exact small integers).
        let mut p = vec![0.5f32; 10];
        let mut q = vec![0.25f32; 10];
        assert_eq!(dot(&p, &q), 1.25);
        let before = (4.0 - dot(&p, &q)).powi(2);
        sgd_step(&mut p, &mut q, 4.0, 0.05, 0.01);
        let after = (4.0 - dot(&p, &q)).powi(2);
        assert!(after < before, "{after} vs {before}");
        // p and q both moved from their old values.
        assert!(p[0] > 0.5 && q[0] > 0.25);
    }

    #[test]
    fn hashes_spread_users_and_items() {
        let mut owners = [0usize; 4];
        let mut slices = [0usize; 8];
        for id in 0..8000u64 {
            owners[owner_of(id, 4)] += 1;
            slices[slice_of(id, 8)] += 1;
            assert!(group_of(id, 4, 3) < 3 && sub_of(id, 8, 3) < 3);
        }
        assert!(
            owners.iter().all(|&n| (1700..2300).contains(&n)),
            "{owners:?}"
        );
        assert!(
            slices.iter().all(|&n| (800..1200).contains(&n)),
            "{slices:?}"
        );
        let (mut a, mut b) = (vec![0.0f32; 5], vec![0.0f32; 5]);
        initial_factors(7, 42, true, &mut a);
        initial_factors(7, 42, true, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().all(|&x| (0.0..1.0 / 5f32.sqrt()).contains(&x)));
        initial_factors(7, 42, false, &mut b);
        assert_ne!(a, b, "users and items differ");
    }
}
