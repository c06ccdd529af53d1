//! PageRank on the graph tables (docs/apps-graph.md).
//!
//! Input: text lines `src dst [weight]` (two non-negative integer vertex ids and an optional
//! positive edge weight, separated by spaces or tabs); blank lines and lines starting with `#`
//! are skipped. Every id seen is a vertex (N = the number of distinct ids), ranks start at 1/N
//! and each iteration computes
//!
//! ```text
//! r'(v) = (1 − d)/N + d · (Σ_{u→v} r(u)·w(u→v)/W(u) + D/N)
//! ```
//!
//! where w(u→v) is the edge's weight (1 when its line has none), W(u) the total weight of u's
//! out-edges (its out-degree when no line has a weight) and D the total rank of the vertices
//! without out-edges. Every line is an edge: duplicate lines are separate out-edges (u → v
//! twice carries twice the share) and a self-loop u → u is an out-edge of u to itself.
//!
//! The distributed run ([`run`]): each worker reads its share of the lines; the edges are
//! regrouped by source ([`crate::graph::regroup_edges`]), so each worker holds the out-edges
//! of its vertices (vertex `v` lives on worker `vertex_partition(v, W) mod W`); each worker
//! sends every owner the sorted distinct destination ids it will send contributions to (a
//! regroup of ids), which tells every worker its vertices and fixes a *message plan*: per
//! iteration, the contributions to each owner are one dense f64 array in that key order
//! ([`Messages::Compiled`]), or, with [`Messages::KeyValue`], a key-value message table sent
//! with [`crate::graph::send_messages`] (sum) every iteration. Both give bit-identical ranks:
//! the sums are taken in the same order. D and N travel by allreduce.

use std::collections::HashMap;
use std::time::Instant;

use rayon::prelude::*;

use crate::checkpoint::{Recovering, Recovery};
use crate::collective::AllgatherAlgorithm;
use crate::data::graph::{parse_edge_line, EdgeBuilder, Edges, Endpoint};
use crate::data::kv::Key;
use crate::data::{Array, Combiner, DType, Partitioner, Table};
use crate::error::{Error, Result};
use crate::graph::MessageTable;
use crate::io::{read_lines, spread, LineError};
use crate::storage::{FileInfo, Storage};
use crate::util::quote;
use crate::worker::Worker;
use crate::Collectives;
use crate::Opts;

/// How contributions travel each iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Messages {
    /// Dense f64 arrays in the key order fixed before the first iteration (no keys on the wire).
    Compiled,
    /// A key-value message table (vertex → contribution, sum) every iteration.
    KeyValue,
}

impl std::str::FromStr for Messages {
    type Err = Error;
    fn from_str(s: &str) -> Result<Messages> {
        match s {
            "compiled" => Ok(Messages::Compiled),
            "kv" => Ok(Messages::KeyValue),
            _ => Err(Error::config(format!(
                "unknown message plan {s:?} (compiled, kv)"
            ))),
        }
    }
}

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Edges: a file or a directory of files.
    pub input: String,
    pub iterations: usize,
    pub damping: f64,
    /// Compute threads per worker.
    pub threads: usize,
    pub messages: Messages,
    /// Checkpoints and resume (`--checkpoint-every`, `--checkpoint-dir`, `--resume`).
    pub recovery: Recovery,
}

impl Options {
    pub fn new(input: impl Into<String>, iterations: usize) -> Options {
        Options {
            input: input.into(),
            iterations,
            damping: crate::config::apps::PAGERANK.default_of("damping"),
            threads: crate::config::apps::PAGERANK.default_of("threads"),
            messages: crate::config::apps::PAGERANK.default_of("messages"),
            recovery: Recovery::default(),
        }
    }

    pub fn validate(&self) -> Result<()> {
        if !(self.damping.is_finite() && (0.0..=1.0).contains(&self.damping)) {
            return Err(Error::config(format!(
                "--damping must be a number in [0, 1], not {}",
                self.damping
            )));
        }
        if self.threads == 0 {
            return Err(Error::config("--threads must be at least 1"));
        }
        crate::apps::check_threads(self.threads)?;
        self.recovery.validate()
    }
}

/// The result on one worker.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// This worker's vertices in increasing id order, with their ranks.
    pub vertices: Vec<i64>,
    pub ranks: Vec<f64>,
    /// Distinct vertices and edges of the whole graph.
    pub n: u64,
    pub edges: u64,
    /// Reading, regrouping and planning, in seconds.
    pub load_s: f64,
    /// Seconds per iteration (those of a checkpoint resumed from first).
    pub iteration_s: Vec<f64>,
    /// The iteration of the checkpoint this run resumed from.
    pub resumed_from: Option<usize>,
}

// ---------------------------------------------------------------------------------------------
// Input

/// Parses the lines in `buf` (whole lines, [`parse_edge_line`] with ids from 0 to `i64::MAX`)
/// into `out`; the first line with a weight makes `out` weighted (the edges before it weigh 1).
fn parse_edges(buf: &[u8], out: &mut EdgeBuilder) -> Result<(), LineError> {
    crate::io::lines::for_each_line(buf, |line, line_start| {
        let edge = parse_edge_line(line).map_err(|msg| LineError { line_start, msg })?;
        if let Some((src, dst, weight)) = edge {
            if weight.is_some() {
                out.make_weighted();
            }
            // Both ids are at most i64::MAX.
            out.push(src as i64, dst as i64, weight.unwrap_or(1.0));
        }
        Ok(())
    })
}

/// The edges of the lines of `files` that belong to `rank` of `workers` (Hadoop-style line
/// shares), as one edge partition: weighted if a line of the share has a weight.
pub fn load_share(
    storage: &dyn Storage,
    files: &[FileInfo],
    rank: usize,
    workers: usize,
) -> Result<EdgeBuilder> {
    let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
    let mut out = EdgeBuilder::new(false);
    for (f, (s, e)) in files.iter().zip(spread(&sizes, rank, workers)) {
        read_lines(
            storage,
            f,
            s,
            e,
            crate::io::lines::STREAM_BLOCK,
            |lines, _| {
                if out.is_empty() {
                    // About 12 bytes of text per edge: one reservation for the share.
                    out.reserve((e.saturating_sub(s) / 12) as usize);
                }
                parse_edges(lines, &mut out)
            },
        )?;
    }
    Ok(out)
}

/// Every edge of `path` (a file or a directory), in input order (for tests and the reference).
pub fn read_all_edges(storage: &dyn Storage, path: &str) -> Result<Vec<(i64, i64)>> {
    let all = read_all_weighted_edges(storage, path)?;
    Ok(all.into_iter().map(|(a, b, _)| (a, b)).collect())
}

/// Every edge of `path` with its weight (1 for a line without one), in input order.
pub fn read_all_weighted_edges(storage: &dyn Storage, path: &str) -> Result<Vec<(i64, i64, f64)>> {
    let files = storage.list_input(path, false)?;
    let b = load_share(storage, &files, 0, 1)?;
    let pool = crate::pool::Pool::default();
    let a = b.build(&pool);
    let e = Edges::of(&a)?;
    Ok(e.iter().map(|e| (e.src, e.dst, e.weight)).collect())
}

// ---------------------------------------------------------------------------------------------
// The sequential reference

/// PageRank of the edge list `edges`, straightforwardly: every vertex in increasing id order
/// with its rank after `iterations` iterations.
pub fn reference(edges: &[(i64, i64)], iterations: usize, damping: f64) -> Vec<(i64, f64)> {
    let weighted: Vec<(i64, i64, f64)> = edges.iter().map(|&(a, b)| (a, b, 1.0)).collect();
    reference_weighted(&weighted, iterations, damping)
}

/// [`reference`] of weighted edges `(src, dst, weight)`: u's rank goes to its out-edges in
/// proportion to their weights (with weights of 1, the same bits as the unweighted rule).
pub fn reference_weighted(
    edges: &[(i64, i64, f64)],
    iterations: usize,
    damping: f64,
) -> Vec<(i64, f64)> {
    let mut ids: Vec<i64> = edges.iter().flat_map(|&(a, b, _)| [a, b]).collect();
    ids.sort_unstable();
    ids.dedup();
    let n = ids.len();
    if n == 0 {
        return Vec::new();
    }
    let index: HashMap<i64, usize> = ids.iter().enumerate().map(|(i, &v)| (v, i)).collect();
    let mut outw = vec![0.0f64; n];
    for (a, _, w) in edges {
        outw[index[a]] += w;
    }
    let nf = n as f64;
    let mut rank = vec![1.0 / nf; n];
    for _ in 0..iterations {
        let dangling: f64 = (0..n).filter(|&i| outw[i] == 0.0).map(|i| rank[i]).sum();
        let mut incoming = vec![0.0f64; n];
        for (a, b, w) in edges {
            let u = index[a];
            incoming[index[b]] += rank[u] / outw[u] * w;
        }
        for i in 0..n {
            rank[i] = (1.0 - damping) / nf + damping * (incoming[i] + dangling / nf);
        }
    }
    ids.into_iter().zip(rank).collect()
}

// ---------------------------------------------------------------------------------------------
// The distributed run

type IdMap = crate::data::kv::FastMap<i64, u32>;

/// This worker's part of the graph after the edges are regrouped and the plan is made.
struct Local {
    /// This worker's vertices, highest out-degree first.
    vertices: Vec<i64>,
    /// Out-degree of each local vertex.
    outdeg: Vec<u32>,
    /// Total weight of each local vertex's out-edges (its out-degree when unweighted).
    outw: Vec<f64>,
    /// The number of local out-edges.
    edges: usize,
    /// What the iterations read of the edges: only the arrays of the chosen message mode are
    /// kept (4 + 8 bytes per edge with compiled messages, 12 + 8 with key-value messages; the
    /// 8 for the weights of a weighted graph).
    sends: Sends,
}

enum Sends {
    /// `--messages compiled`: the plan.
    Compiled(Slots),
    /// `--messages kv`: the local out-edges in regrouped order: source index and destination
    /// id, and the weights when the graph is weighted.
    KeyValue {
        src: Vec<u32>,
        dst: Vec<i64>,
        weight: Option<Vec<f64>>,
    },
}

/// The compiled message plan: `offset[o]` + position = the slot of each of worker `o`'s keys
/// (the sorted distinct destinations it owns); `by_slot` = the edges' source indices grouped by
/// slot (CSR: `slot_start`), each group in edge order.
struct Slots {
    offset: Vec<usize>,
    slot_start: Vec<u32>,
    by_slot: Vec<u32>,
    /// The weights of the edges of `by_slot`, in the same order (weighted graphs).
    slot_weight: Option<Vec<f64>>,
    /// For each sender `s`, the local index of every key it sends, in its order.
    incoming: Vec<Vec<u32>>,
}

/// The label of a worker-pair partition: sender `s` to owner `o` (owner = id mod W).
fn pair(s: usize, o: usize, p: usize) -> u32 {
    (s * p + o) as u32
}

fn plan(w: &Worker, label: &str, edges: Table, messages: Messages) -> Result<Local> {
    let (me, p) = (w.rank(), w.size());
    let mut srcs: Vec<i64> = Vec::new();
    let mut dst: Vec<i64> = Vec::new();
    let weighted = edges
        .iter()
        .any(|(_, a)| a.layout() == crate::data::Layout::Edges { weighted: true });
    let mut weight: Option<Vec<f64>> = weighted.then(Vec::new);
    for (_, a) in edges.iter() {
        let e = Edges::of(a)?;
        srcs.reserve(e.len());
        dst.reserve(e.len());
        for i in 0..e.len() {
            srcs.push(e.src(i));
            dst.push(e.dst(i));
        }
        if let Some(w) = weight.as_mut() {
            w.extend((0..e.len()).map(|i| e.weight(i)));
        }
    }
    // The records are no longer needed (the plan holds what the iterations use). Their
    // buffers go back to the system, not to the pool's free lists, where nothing of their
    // sizes is asked for again: the plan's arrays take that memory instead (peak RSS about a
    // third lower, docs/apps-graph.md).
    drop(edges);
    w.pool().trim();
    if dst.len() > u32::MAX as usize {
        return Err(Error::data(format!(
            "{} edges on one worker (at most {}): use more workers",
            dst.len(),
            u32::MAX
        )));
    }

    // The distinct destinations per owner, sorted: the keys of the plan.
    let mut keys: Vec<Vec<i64>> = vec![Vec::new(); p];
    {
        let mut all = dst.clone();
        all.par_sort_unstable();
        all.dedup();
        for v in all {
            keys[crate::graph::vertex_owner(v, p as u32, p)].push(v);
        }
    }
    // Send each owner its keys (ids, dense i64): every worker learns who sends it what.
    let mut t = Table::new(Combiner::Reject);
    for (o, k) in keys.iter().enumerate() {
        t.put(pair(me, o, p), Array::from_slice(w.pool(), k));
    }
    w.regroup(label, &mut t, Some(&Partitioner::Modulo))?;
    let mut got: Vec<Vec<i64>> = vec![Vec::new(); p];
    for (pid, a) in t.iter() {
        let (s, o) = (pid as usize / p, pid as usize % p);
        if o != me || s >= p {
            return Err(Error::data(format!("{label}: unexpected key list {pid}")));
        }
        got[s] = a.as_slice::<i64>()?.to_vec();
    }
    drop(t);
    // This worker's vertices: the sources it holds and the destinations sent to it.
    let mut vertices: Vec<i64> = srcs.clone();
    for k in &got {
        vertices.extend_from_slice(k);
    }
    vertices.par_sort_unstable();
    vertices.dedup();
    if vertices.len() > u32::MAX as usize {
        return Err(Error::data("more than 2^32 vertices on one worker"));
    }
    let index: IdMap = vertices
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, i as u32))
        .collect();
    let mut src: Vec<u32> = srcs.iter().map(|v| index[v]).collect();
    drop(srcs);
    let mut outdeg = vec![0u32; vertices.len()];
    let mut outw = vec![0.0f64; vertices.len()];
    for (e, &u) in src.iter().enumerate() {
        outdeg[u as usize] += 1;
        outw[u as usize] += weight.as_ref().map_or(1.0, |w| w[e]);
    }
    // Local order: highest out-degree first (ties by id), so that the ranks most edges read
    // stay in cache. Sums are unaffected: each slot still adds its edges in edge order.
    let mut order: Vec<u32> = (0..vertices.len() as u32).collect();
    order.par_sort_unstable_by_key(|&i| (std::cmp::Reverse(outdeg[i as usize]), i));
    let mut new_of = vec![0u32; order.len()];
    for (new, &old) in order.iter().enumerate() {
        new_of[old as usize] = new as u32;
    }
    let vertices: Vec<i64> = order.iter().map(|&i| vertices[i as usize]).collect();
    let outdeg: Vec<u32> = order.iter().map(|&i| outdeg[i as usize]).collect();
    let outw: Vec<f64> = order.iter().map(|&i| outw[i as usize]).collect();
    drop(order);
    if let Some(i) = outw.iter().position(|w| !w.is_finite()) {
        return Err(Error::data(format!(
            "the weights of vertex {}'s {} out-edges add up to more than an f64 holds",
            vertices[i], outdeg[i]
        )));
    }
    for u in src.iter_mut() {
        *u = new_of[*u as usize];
    }
    let edges = src.len();
    let sends = match messages {
        Messages::KeyValue => Sends::KeyValue { src, dst, weight },
        Messages::Compiled => {
            let incoming: Vec<Vec<u32>> = got
                .iter()
                .map(|k| k.iter().map(|v| new_of[index[v] as usize]).collect())
                .collect();
            drop((index, new_of, got));
            Sends::Compiled(slots(&keys, incoming, src, dst, weight))
        }
    };
    Ok(Local {
        vertices,
        outdeg,
        outw,
        edges,
        sends,
    })
}

/// The compiled plan from the keys of every owner and the local edges (consumed: each array
/// is dropped once the plan holds what the iterations need of it).
fn slots(
    keys: &[Vec<i64>],
    incoming: Vec<Vec<u32>>,
    src: Vec<u32>,
    dst: Vec<i64>,
    weight: Option<Vec<f64>>,
) -> Slots {
    // Slots: position of each edge's destination among the keys of its owner.
    let p = keys.len();
    let mut offset = vec![0usize; p + 1];
    for o in 0..p {
        offset[o + 1] = offset[o] + keys[o].len();
    }
    let slot_of: IdMap = keys
        .iter()
        .enumerate()
        .flat_map(|(o, k)| {
            let base = offset[o];
            k.iter()
                .enumerate()
                .map(move |(i, &v)| (v, (base + i) as u32))
        })
        .collect();
    let slots = offset[p];
    let mut slot_start = vec![0u32; slots + 1];
    let edge_slot: Vec<u32> = dst.iter().map(|v| slot_of[v]).collect();
    drop((slot_of, dst));
    for &s in &edge_slot {
        slot_start[s as usize + 1] += 1;
    }
    for i in 0..slots {
        slot_start[i + 1] += slot_start[i];
    }
    let mut fill: Vec<u32> = slot_start[..slots].to_vec();
    let mut by_slot = vec![0u32; src.len()];
    let mut slot_weight = weight.as_ref().map(|w| vec![0.0f64; w.len()]);
    for (e, &s) in edge_slot.iter().enumerate() {
        let at = fill[s as usize] as usize;
        by_slot[at] = src[e];
        if let (Some(sw), Some(w)) = (slot_weight.as_mut(), weight.as_ref()) {
            sw[at] = w[e];
        }
        fill[s as usize] += 1;
    }
    Slots {
        offset,
        slot_start,
        by_slot,
        slot_weight,
        incoming,
    }
}

/// The order in which a worker adds the contributions of its senders: itself first, then the
/// others by rank (the order a regroup combines partitions with the same id in).
fn sender_order(me: usize, p: usize) -> impl Iterator<Item = usize> {
    std::iter::once(me).chain((0..p).filter(move |&s| s != me))
}

/// The total rank of the dangling vertices: the workers' partial sums, added in rank order
/// (the same bits on every worker and in both message modes).
fn dangling_total(parts: impl Iterator<Item = f64>) -> f64 {
    parts.fold(0.0, |acc, x| acc + x)
}

/// The contribution for each slot `first + i` into `out[i]`: its edges' shares (times their
/// weights in a weighted graph), added in edge order.
fn sum_slots(g: &Slots, share: &[f64], first: usize, out: &mut [f64]) {
    for (i, out) in out.iter_mut().enumerate() {
        let s = first + i;
        let (a, b) = (g.slot_start[s] as usize, g.slot_start[s + 1] as usize);
        let mut acc = 0.0f64;
        match &g.slot_weight {
            None => {
                for &u in &g.by_slot[a..b] {
                    acc += share[u as usize];
                }
            }
            Some(sw) => {
                for (&u, &x) in g.by_slot[a..b].iter().zip(&sw[a..b]) {
                    acc += share[u as usize] * x;
                }
            }
        }
        *out = acc;
    }
}

/// One iteration's exchange with the compiled plan: every owner gets one dense f64 array of
/// the contributions for its keys in plan order, plus this worker's dangling rank as the last
/// element. Writes the incoming sum of every local vertex into `incoming`; returns the total
/// dangling rank.
fn exchange_compiled(
    w: &Worker,
    label: &str,
    g: &Slots,
    share: &[f64],
    dangling: f64,
    incoming: &mut [f64],
) -> Result<f64> {
    let (me, p) = (w.rank(), w.size());
    let mut t = Table::new(Combiner::Reject);
    for o in 0..p {
        let (from, to) = (g.offset[o], g.offset[o + 1]);
        let mut a = Array::uninit(w.pool(), DType::F64, to - from + 1);
        let out = a.as_mut_slice::<f64>()?;
        out[to - from] = dangling;
        // Runs of 4096 slots per task, each summed by a plain loop: the time per slot does not
        // depend on whether the compiler inlines a per-slot closure into rayon's loop (it did
        // in some builds and not in others: 0.0018 against 0.0023 s per iteration, 1M edges).
        out[..to - from]
            .par_chunks_mut(4096)
            .enumerate()
            .for_each(|(c, run)| sum_slots(g, share, from + c * 4096, run));
        t.put(pair(me, o, p), a);
    }
    w.regroup(label, &mut t, Some(&Partitioner::Modulo))?;
    incoming.fill(0.0);
    let mut parts = vec![0.0f64; p];
    for s in sender_order(me, p) {
        let vals = match t.get(pair(s, me, p)) {
            Some(a) => a.as_slice::<f64>()?,
            None => &[],
        };
        let idx = &g.incoming[s];
        let Some((&theirs, vals)) = vals.split_last().filter(|(_, v)| v.len() == idx.len()) else {
            return Err(Error::data(format!(
                "{label}: rank {s} sent {} values, the plan expects {}",
                vals.len(),
                idx.len() + 1
            )));
        };
        parts[s] = theirs;
        for (&i, &v) in idx.iter().zip(vals) {
            incoming[i as usize] += v;
        }
    }
    Ok(dangling_total(parts.into_iter()))
}

/// One iteration's exchange with key-value messages: a message table (destination → sum of
/// contributions) sent with [`crate::graph::send_messages`], and an allgather of the workers'
/// dangling ranks. Same sums in the same order as [`exchange_compiled`].
fn exchange_kv(
    w: &Worker,
    label: &str,
    (src, dst, weight): (&[u32], &[i64], Option<&[f64]>),
    by_id: &[(i64, u32)],
    share: &[f64],
    dangling: f64,
    incoming: &mut [f64],
) -> Result<f64> {
    let (me, p) = (w.rank(), w.size());
    let mut kv = MessageTable::<f64>::new(Combiner::Sum, p as u32)?;
    match weight {
        None => {
            for (&u, &v) in src.iter().zip(dst) {
                kv.add(v, share[u as usize])?;
            }
        }
        Some(ws) => {
            for ((&u, &v), &x) in src.iter().zip(dst).zip(ws) {
                kv.add(v, share[u as usize] * x)?;
            }
        }
    }
    let mut got = kv.into_table(w.pool())?;
    crate::graph::send_messages(w, label, &mut got, p as u32)?;
    incoming.fill(0.0);
    for (pid, a) in got.iter() {
        // Keys ascend in a partition: a merge with the vertices sorted by id.
        let mut at = 0usize;
        for (k, v) in crate::data::kv::entries(a)? {
            let Key::I64(k) = k else {
                return Err(Error::data(format!("{label}: partition {pid}: key {k}")));
            };
            while at < by_id.len() && by_id[at].0 < k {
                at += 1;
            }
            match by_id.get(at) {
                Some(&(id, i)) if id == k => incoming[i as usize] = v.get::<f64>()?,
                _ => {
                    return Err(Error::data(format!(
                        "{label}: partition {pid}: a message to {k}, not a vertex here"
                    )))
                }
            }
        }
    }
    let mut d = Table::new(Combiner::Reject);
    d.put(me as u32, Array::from_slice(w.pool(), &[dangling]));
    w.allgather(
        label,
        &mut d,
        Opts::default().algorithm(AllgatherAlgorithm::Ring),
    )?;
    let parts = (0..p as u32)
        .map(|r| {
            Ok(d.get(r)
                .map(|a| a.as_slice::<f64>())
                .transpose()?
                .and_then(|x| x.first().copied())
                .unwrap_or(0.0))
        })
        .collect::<Result<Vec<f64>>>()?;
    Ok(dangling_total(parts.into_iter()))
}

/// Runs PageRank on this worker's share of the input; every worker calls it.
pub fn run(w: &Worker, opts: &Options, mut each: impl FnMut(usize, f64) + Send) -> Result<Outcome> {
    opts.validate()?;
    let threads = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| Error::config(format!("cannot start {} threads: {e}", opts.threads)))?;
    threads.install(|| run_in(w, opts, &mut each))
}

fn run_in(
    w: &Worker,
    opts: &Options,
    each: &mut (dyn FnMut(usize, f64) + Send),
) -> Result<Outcome> {
    let (me, p) = (w.rank(), w.size());
    let t0 = Instant::now();
    // An unusable checkpoint directory fails now, not after the first iterations.
    let rec = opts.recovery.open(w, "pagerank")?;
    let storage = crate::storage::for_path_on(&opts.input, Some(w.runtime().clone()))?;
    let loaded = storage.list_input(&opts.input, false).and_then(|files| {
        if files.is_empty() {
            return Err(Error::config(format!(
                "no input files in {}",
                quote(opts.input.as_bytes())
            )));
        }
        load_share(&*storage, &files, me, p)
    });
    let failed = loaded.as_ref().err().map(|e| Error::config(e.to_string()));
    crate::worker::agree(w, "pagerank-input", failed.map_or(Ok(()), Err))?;
    // A weighted graph if any worker's share has a weight: then every share is weighted (an
    // edge table holds one kind of partition).
    let mut share = loaded?;
    let mut any = Table::new(Combiner::Max);
    any.put(0, Array::from_slice(w.pool(), &[share.weighted() as i64]));
    w.allreduce("pagerank-weighted", &mut any, Opts::default())?;
    if any.get(0).expect("flag").as_slice::<i64>()?[0] != 0 {
        share.make_weighted();
    }
    // `graph::regroup_edges` by source, with the parsed records bucketed straight into the
    // partitions (not first copied into one partition that is then re-bucketed), and dropped
    // before the regroup (kept, they would stay to the end of the run).
    let mut edges = crate::graph::bucket_edges(w.pool(), &[share.view()], Endpoint::Src, p as u32)?;
    drop(share);
    w.regroup("pagerank-edges", &mut edges, Some(&Partitioner::Modulo))?;
    // The buffers of the share that went to other workers are not asked for again.
    w.pool().trim();
    let g = plan(w, "pagerank-plan", edges, opts.messages)?;
    // The plan's temporaries (sorted copies, id maps) are freed; their memory goes back too.
    w.pool().trim();
    let mut totals = Table::new(Combiner::Sum);
    totals.put(
        0,
        Array::from_slice(w.pool(), &[g.vertices.len() as i64, g.edges as i64]),
    );
    w.allreduce("pagerank-n", &mut totals, Opts::default())?;
    let (n, m) = {
        let t = totals.get(0).expect("totals").as_slice::<i64>()?;
        (t[0] as u64, t[1] as u64)
    };
    let load_s = t0.elapsed().as_secs_f64();
    let nf = n as f64;
    let d = opts.damping;
    // Key-value messages are looked up by vertex id: (id, local index), by id.
    let by_id: Vec<(i64, u32)> = match opts.messages {
        Messages::KeyValue => {
            let mut v: Vec<(i64, u32)> = g
                .vertices
                .iter()
                .enumerate()
                .map(|(i, &v)| (v, i as u32))
                .collect();
            v.par_sort_unstable();
            v
        }
        Messages::Compiled => Vec::new(),
    };
    let mut rank = vec![1.0 / nf; g.vertices.len()];
    let mut iteration_s = Vec::new(); // grows as they run: --iterations has no bound
                                      // The ranks depend on the graph and d only (the message plan gives the same bits).
    let meta = serde_json::json!({
        "app": "pagerank",
        "vertices": n,
        "edges": m,
        "damping": d,
    });
    let start = resume(
        w,
        &rec,
        &meta,
        opts,
        &g.vertices,
        &mut rank,
        &mut iteration_s,
    )?;
    let mut share = vec![0.0f64; g.vertices.len()];
    // Each vertex's incoming sum, refilled every iteration.
    let mut incoming = vec![0.0f64; g.vertices.len()];
    for it in start..opts.iterations {
        let ti = Instant::now();
        let mut dangling = 0.0f64;
        for (i, (&r, &k)) in rank.iter().zip(&g.outdeg).enumerate() {
            if k == 0 {
                dangling += r;
                share[i] = 0.0;
            } else {
                // W(u): the out-degree, exactly, when the graph is unweighted.
                share[i] = r / g.outw[i];
            }
        }
        let dangling = match &g.sends {
            Sends::Compiled(slots) => exchange_compiled(
                w,
                "pagerank-messages",
                slots,
                &share,
                dangling,
                &mut incoming,
            )?,
            Sends::KeyValue { src, dst, weight } => exchange_kv(
                w,
                "pagerank-messages",
                (src, dst, weight.as_deref()),
                &by_id,
                &share,
                dangling,
                &mut incoming,
            )?,
        };
        // In runs, as the slot sums (exchange_compiled).
        rank.par_chunks_mut(4096)
            .zip(incoming.par_chunks(4096))
            .for_each(|(r, inc)| {
                for (r, &inc) in r.iter_mut().zip(inc) {
                    *r = (1.0 - d) / nf + d * (inc + dangling / nf);
                }
            });
        let secs = ti.elapsed().as_secs_f64();
        iteration_s.push(secs);
        each(it + 1, secs);
        rec.after_iteration(w, it + 1, opts.iterations, &meta, || {
            Ok(state(w, &g.vertices, &rank, &iteration_s))
        })?;
    }
    let mut out: Vec<(i64, f64)> = g.vertices.iter().copied().zip(rank).collect();
    out.par_sort_unstable_by_key(|x| x.0);
    Ok(Outcome {
        vertices: out.iter().map(|x| x.0).collect(),
        ranks: out.iter().map(|x| x.1).collect(),
        n,
        edges: m,
        load_s,
        iteration_s,
        resumed_from: (start > 0).then_some(start),
    })
}

/// This worker's state after an iteration: table `ranks` (partition 0: the ranks of its
/// vertices in local order, f64; partition 1: those vertices' ids, i64, to check a resume
/// against) and table `history` (partition 0: the seconds of every iteration so far).
fn state(w: &Worker, vertices: &[i64], rank: &[f64], secs: &[f64]) -> Vec<(&'static str, Table)> {
    let mut r = Table::new(Combiner::Sum);
    r.put(0, Array::from_slice(w.pool(), rank));
    r.put(1, Array::from_slice(w.pool(), vertices));
    let mut h = Table::new(Combiner::Sum);
    h.put(0, Array::from_slice(w.pool(), secs));
    vec![("ranks", r), ("history", h)]
}

/// With `--resume`, this worker's ranks and the iteration times from the newest checkpoint
/// ([`state`]); returns the iterations done (0 for a fresh start). A part whose vertices are
/// not this worker's fails every worker.
fn resume(
    w: &Worker,
    rec: &Recovering,
    meta: &serde_json::Value,
    opts: &Options,
    vertices: &[i64],
    rank: &mut [f64],
    secs: &mut Vec<f64>,
) -> Result<usize> {
    let Some(mut r) = rec.resume(w, meta, opts.iterations)? else {
        return Ok(0);
    };
    let it = r.iteration;
    let check = (|| {
        let (ranks, history) = (r.take("ranks")?, r.take("history")?);
        let got = (ranks.get(0), ranks.get(1), history.get(0));
        let (Some(rk), Some(ids), Some(h)) = got else {
            return Err(Error::data(format!(
                "the checkpoint at iteration {it} does not hold PageRank state"
            )));
        };
        if ids.as_slice::<i64>()? != vertices || rk.len() != vertices.len() || h.len() != it {
            return Err(Error::data(format!(
                "the checkpoint at iteration {it} holds other vertices for rank {} than the \
                 input gives it (the same input with the same number of workers resumes)",
                w.rank()
            )));
        }
        rank.copy_from_slice(rk.as_slice::<f64>()?);
        *secs = h.as_slice::<f64>()?.to_vec();
        Ok(())
    })();
    crate::worker::agree(w, "pagerank-resume", check)?;
    Ok(it)
}

/// `vertex<TAB>rank` lines, ranks in Rust's shortest round-trip form.
pub fn format_ranks(vertices: &[i64], ranks: &[f64]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(vertices.len() * 28);
    for (v, r) in vertices.iter().zip(ranks) {
        let _ = writeln!(s, "{v}\t{r}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weighted edges `(src, dst, weight)`.
    type WeightedEdges = Vec<(i64, i64, f64)>;

    /// The edges of `text` with their weights, and whether the partition came out weighted.
    fn parse_weighted(text: &str) -> Result<(WeightedEdges, bool), LineError> {
        let mut b = EdgeBuilder::new(false);
        parse_edges(text.as_bytes(), &mut b)?;
        let pool = crate::pool::Pool::default();
        let a = b.build(&pool);
        let e = Edges::of(&a).unwrap();
        Ok((
            e.iter().map(|e| (e.src, e.dst, e.weight)).collect(),
            e.weighted(),
        ))
    }

    fn parse(text: &str) -> Result<Vec<(i64, i64)>, LineError> {
        let (e, _) = parse_weighted(text)?;
        Ok(e.into_iter().map(|(a, b, _)| (a, b)).collect())
    }

    #[test]
    fn lines_parse_into_edges() {
        assert_eq!(
            parse("1 2\n# comment\n\n 3\t4 \r\n9223372036854775807 0").unwrap(),
            vec![(1, 2), (3, 4), (i64::MAX, 0)]
        );
        assert!(
            !parse_weighted("1 2\n").unwrap().1,
            "no weight, no weighted records"
        );
        let e = parse("1 2\n1 2 3 4\n").unwrap_err();
        assert_eq!(e.line_start, 4);
        assert_eq!(
            e.msg,
            "expected an edge 'src dst [weight]', found 4 fields: '1 2 3 4'"
        );
        let e = parse("7\n").unwrap_err();
        assert!(e.msg.contains("found 1 field: '7'"), "{}", e.msg);
        for bad in ["-1", "x", "1.5", "9223372036854775808", "+3"] {
            let e = parse(&format!("1 {bad}\n")).unwrap_err();
            assert!(
                e.msg.contains(&format!("bad vertex id '{bad}'")),
                "{}",
                e.msg
            );
        }
    }

    #[test]
    fn a_third_field_is_a_positive_weight() {
        // The first weight makes the partition weighted; lines without one weigh 1.
        let (e, weighted) = parse_weighted("1 2\n3 4 0.5\n5 6\n7 8 2e3\n").unwrap();
        assert!(weighted);
        assert_eq!(
            e,
            vec![(1, 2, 1.0), (3, 4, 0.5), (5, 6, 1.0), (7, 8, 2000.0)]
        );
        for bad in [
            "0", "-1", "x", "nan", "inf", "1e400", "0x10", "1e-320", "-0",
        ] {
            let e = parse(&format!("1 2\n3 4 {bad} \n")).unwrap_err();
            assert_eq!(e.line_start, 4, "{bad}");
            assert_eq!(
                e.msg,
                format!(
                    "bad weight '{bad}': expected a positive number \
                     (from 2.2250738585072014e-308 to 1.7976931348623157e308)"
                )
            );
        }
        // The extremes themselves are weights.
        assert!(parse("1 2 2.2250738585072014e-308\n3 4 1.7976931348623157e308\n").is_ok());
    }

    /// One iteration by hand on 3 vertices 0, 1, 2 where 2 is dangling and vertex v receives
    /// `inflow[v]` times the starting rank: the reference's ranks, to 1e-15.
    fn one_iteration_by_hand(got: &[(i64, f64)], inflow: [f64; 3]) {
        let (n, d) = (3.0, 0.85);
        let r0 = 1.0 / n;
        let dang = r0;
        assert_eq!(got.len(), 3);
        for (i, (v, r)) in got.iter().enumerate() {
            let want = (1.0 - d) / n + d * (r0 * inflow[i] + dang / n);
            assert_eq!(*v, i as i64);
            assert!((r - want).abs() < 1e-15, "{r} vs {want}");
        }
    }

    #[test]
    fn the_weighted_reference_splits_a_rank_by_weight() {
        // 0 → 1 (weight 3), 0 → 2 (weight 1), 1 → 0 (weight 2); 2 is dangling.
        let edges = [(0, 1, 3.0), (0, 2, 1.0), (1, 0, 2.0)];
        one_iteration_by_hand(
            &reference_weighted(&edges, 1, 0.85),
            [1.0, 3.0 / 4.0, 1.0 / 4.0],
        );
        // Weights of 1 are the unweighted rule, bit for bit; scaling every weight of a vertex
        // changes nothing but rounding.
        let plain = [(5, 6), (6, 6), (6, 7), (5, 6), (7, 5)];
        let ones: Vec<(i64, i64, f64)> = plain.iter().map(|&(a, b)| (a, b, 1.0)).collect();
        assert_eq!(
            reference(&plain, 9, 0.85),
            reference_weighted(&ones, 9, 0.85)
        );
        let scaled: Vec<(i64, i64, f64)> = plain.iter().map(|&(a, b)| (a, b, 2.5)).collect();
        for ((v, a), (u, b)) in reference(&plain, 9, 0.85)
            .iter()
            .zip(reference_weighted(&scaled, 9, 0.85))
        {
            assert_eq!(*v, u);
            assert!((a - b).abs() <= 1e-15, "{a} vs {b}");
        }
    }

    #[test]
    fn the_reference_follows_the_formula() {
        // 0 → 1, 1 → 0, 2 dangling with an edge to it: by hand for one iteration.
        let edges = [(0, 1), (1, 0), (0, 2)];
        one_iteration_by_hand(&reference(&edges, 1, 0.85), [1.0, 1.0 / 2.0, 1.0 / 2.0]);
        // Ranks sum to 1 with dangling mass redistributed.
        let got = reference(&[(5, 6), (6, 6), (6, 7), (5, 6)], 20, 0.85);
        let s: f64 = got.iter().map(|x| x.1).sum();
        assert!((s - 1.0).abs() < 1e-12, "{s}");
    }
}
