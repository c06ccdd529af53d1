//! The exchanges of N-body and CG (docs/apps-nbody-cg.md): rows in contiguous blocks, one per
//! worker in rank order, every block gathered everywhere each step, and sums in a fixed order.
//!
//! * [`Exchange::GatherBroadcast`] (the default) does as the network performance aware MPI paper
//!   (§5.4) does: an allgather is a gather to rank 0 followed by a broadcast of the whole, and
//!   an allreduce a reduce to rank 0 followed by a broadcast, each with the `auto` algorithm. With
//!   a network model (`--net-model`, `--net-measure`) those choices are the network-aware ones
//!   (net-tree or net-relay gather, net-* broadcast and reduce; docs/algorithms.md); without one
//!   they are the engine's defaults.
//! * [`Exchange::Allgather`] calls the engine's `allgather` and `allreduce` (`auto`: recursive
//!   doubling for small tables, the ring or regroup-allgather for large ones; the model plays
//!   no part).
//!
//! **Fixed order of sums.** The rows are cut into [`Blocks::chunks`] chunks of
//! [`Blocks::chunk`] rows, a function of the number of rows alone, and each worker owns whole
//! chunks. A sum over the rows (a dot product, an energy) is a partial sum per chunk, in row
//! order, reduced as a vector with one slot per chunk (every slot has one non-zero contributor,
//! so the reduction is exact whatever its order), then added up in chunk order. So the result
//! does not depend on the number of workers: W = 1, 2, 4 give the same bits as a sequential
//! run that sums the same way ([`fixed_sum`]).
//!
//! A gathered block is untrusted: its length is checked against the length its sender must have
//! (from [`Blocks`]), and a mismatch is a protocol error naming the rank.
//!
//! **Checkpoints.** A worker's state is a few f64 vectors (its pieces of the iterates, the
//! history so far), saved as the partitions 0, 1, … of one table `state` ([`state_table`]) and
//! read back, checked and agreed on by every worker, with [`resume_state`].

use std::ops::Range;

use crate::checkpoint::Recovering;
use crate::collective::{BroadcastAlgorithm, GatherAlgorithm, ReduceAlgorithm};
use crate::data::{Array, Combiner, Table};
use crate::error::{Error, Result};
use crate::io::split;
use crate::worker::Worker;
use crate::Collectives;
use crate::Opts;

/// The most chunks of a fixed-order sum (so a reduced vector is at most 8 KiB per value).
pub const MAX_CHUNKS: usize = 1024;

named_enum!(
    /// How blocks are gathered and sums reduced.
    Exchange, "exchange", {
        /// Gather to rank 0, then broadcast (reduce, then broadcast): the network model's
        /// choices apply.
        #[default]
        GatherBroadcast => "gather-broadcast",
        /// The engine's allgather and allreduce.
        Allgather => "allgather",
    }
);

/// `n` rows cut into chunks and the chunks into one contiguous block per worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    n: usize,
    chunk: usize,
    /// First chunk of each rank, and the number of chunks last.
    first_chunk: Vec<usize>,
}

impl Blocks {
    /// The blocks of `n` rows over `workers` workers.
    pub fn new(n: usize, workers: usize) -> Blocks {
        let chunk = n.div_ceil(MAX_CHUNKS).max(1);
        let chunks = n.div_ceil(chunk);
        let mut first_chunk: Vec<usize> = (0..workers)
            .map(|r| split::share(chunks as u64, r, workers).0 as usize)
            .collect();
        first_chunk.push(chunks);
        Blocks {
            n,
            chunk,
            first_chunk,
        }
    }

    /// Rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Rows per chunk (the last may have fewer).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Chunks in all.
    pub fn chunks(&self) -> usize {
        self.n.div_ceil(self.chunk)
    }

    /// The rows of rank `r`.
    pub fn rows(&self, r: usize) -> Range<usize> {
        let c = self.chunk_range(r);
        (c.start * self.chunk).min(self.n)..(c.end * self.chunk).min(self.n)
    }

    /// The chunks of rank `r`.
    pub fn chunk_range(&self, r: usize) -> Range<usize> {
        self.first_chunk[r]..self.first_chunk[r + 1]
    }

    /// The rows of chunk `c`.
    pub fn chunk_rows(&self, c: usize) -> Range<usize> {
        c * self.chunk..((c + 1) * self.chunk).min(self.n)
    }
}

/// The sum of `f(i)` over rows `0..n`, as the distributed run adds it up: per chunk in row order
/// (from 0.0), then the chunk sums in chunk order (from 0.0). `K` values per row.
pub fn fixed_sum<const K: usize>(blocks: &Blocks, f: impl Fn(usize) -> [f64; K]) -> [f64; K] {
    let partials = chunk_partials(blocks, 0..blocks.chunks(), f);
    add_chunks(&partials)
}

/// The per-chunk partial sums of `f` over chunks `chunks` (`K` per chunk, in chunk order).
pub fn chunk_partials<const K: usize>(
    blocks: &Blocks,
    chunks: Range<usize>,
    f: impl Fn(usize) -> [f64; K],
) -> Vec<[f64; K]> {
    chunks
        .map(|c| {
            let mut s = [0.0; K];
            for i in blocks.chunk_rows(c) {
                let v = f(i);
                for k in 0..K {
                    s[k] += v[k];
                }
            }
            s
        })
        .collect()
}

fn add_chunks<const K: usize>(partials: &[[f64; K]]) -> [f64; K] {
    let mut s = [0.0; K];
    for p in partials {
        for k in 0..K {
            s[k] += p[k];
        }
    }
    s
}

/// Collective: [`fixed_sum`] of `f` over all rows, each worker computing its own chunks (`f` is
/// called only for this worker's rows). The same bits on every worker and for any number of
/// workers.
pub fn sum<const K: usize>(
    w: &Worker,
    ex: Exchange,
    label: &str,
    blocks: &Blocks,
    f: impl Fn(usize) -> [f64; K],
) -> Result<[f64; K]> {
    let mine = blocks.chunk_range(w.rank());
    let partials = chunk_partials(blocks, mine.clone(), f);
    let mut slots = vec![0.0f64; blocks.chunks() * K];
    for (c, p) in mine.zip(&partials) {
        slots[c * K..(c + 1) * K].copy_from_slice(p);
    }
    let mut t = Table::new(Combiner::Sum);
    t.put(0, Array::from_slice(w.pool(), &slots));
    match ex {
        Exchange::GatherBroadcast => {
            w.reduce(label, &mut t, Opts::<ReduceAlgorithm>::default().root(0))?;
            if w.rank() != 0 {
                t.clear();
            }
            w.broadcast(label, &mut t, Opts::<BroadcastAlgorithm>::default().root(0))?;
        }
        Exchange::Allgather => w.allreduce(label, &mut t, Opts::default())?,
    }
    let got = match t.get(0) {
        Some(a) => a.as_slice::<f64>()?,
        None => return Err(Error::Protocol(format!("{label}: no sums received"))),
    };
    if got.len() != slots.len() {
        return Err(Error::Protocol(format!(
            "{label}: {} sums received, {} expected",
            got.len(),
            slots.len()
        )));
    }
    let partials: Vec<[f64; K]> = got
        .chunks_exact(K)
        .map(|c| std::array::from_fn(|k| c[k]))
        .collect();
    Ok(add_chunks(&partials))
}

/// Collective: every worker's block (`mine`: `width` values per row of its rows) concatenated
/// in rank order, `width · n` values, on every worker.
pub fn gather_all(
    w: &Worker,
    ex: Exchange,
    label: &str,
    blocks: &Blocks,
    width: usize,
    mine: &[f64],
) -> Result<Vec<f64>> {
    let (rank, p) = (w.rank(), w.size());
    let want = |r: usize| blocks.rows(r).len() * width;
    if mine.len() != want(rank) {
        return Err(Error::config(format!(
            "{label}: this worker's block has {} values, not {}",
            mine.len(),
            want(rank)
        )));
    }
    let mut t = Table::new(Combiner::Reject);
    t.put(rank as u32, Array::from_slice(w.pool(), mine));
    match ex {
        Exchange::GatherBroadcast => {
            w.gather(label, &mut t, Opts::<GatherAlgorithm>::default().root(0))?;
            if rank != 0 {
                t.clear();
            }
            w.broadcast(label, &mut t, Opts::<BroadcastAlgorithm>::default().root(0))?;
        }
        Exchange::Allgather => w.allgather(label, &mut t, Opts::default())?,
    }
    if t.len() != p {
        return Err(Error::Protocol(format!(
            "{label}: {} blocks gathered from {p} workers",
            t.len()
        )));
    }
    let mut out = Vec::new();
    out.try_reserve_exact(blocks.n() * width).map_err(|e| {
        Error::config(format!(
            "{label}: cannot hold {} gathered values: {e}",
            blocks.n() * width
        ))
    })?;
    for r in 0..p {
        let v = match t.get(r as u32) {
            Some(a) => a
                .as_slice::<f64>()
                .map_err(|e| Error::Protocol(format!("{label}: block of rank {r}: {e}")))?,
            None => {
                return Err(Error::Protocol(format!(
                    "{label}: the block of rank {r} is missing"
                )))
            }
        };
        if v.len() != want(r) {
            return Err(Error::Protocol(format!(
                "{label}: block of rank {r} has {} values, not {}",
                v.len(),
                want(r)
            )));
        }
        out.extend_from_slice(v);
    }
    Ok(out)
}

/// The table of a worker's state: vector `k` as partition `k` (f64), named `state`.
pub fn state_table(w: &Worker, vectors: &[&[f64]]) -> Vec<(&'static str, Table)> {
    let mut t = Table::new(Combiner::Sum);
    for (k, v) in vectors.iter().enumerate() {
        t.put(k as u32, Array::from_slice(w.pool(), v));
    }
    vec![("state", t)]
}

/// Collective: with `resume` ([`Recovering::resume`], `meta` and `iterations` as there), the
/// iterations done by the newest checkpoint and `check(iterations, vectors)` of this worker's
/// `count` vectors of [`state_table`]; None for a fresh start. A part without them, or one
/// that `check` refuses (its error names what differs), fails every worker.
pub fn resume_state<T>(
    w: &Worker,
    rec: &Recovering,
    meta: &serde_json::Value,
    iterations: usize,
    count: usize,
    check: impl FnOnce(usize, Vec<Vec<f64>>) -> Result<T>,
) -> Result<Option<(usize, T)>> {
    let Some(mut restored) = rec.resume(w, meta, iterations)? else {
        return Ok(None);
    };
    let it = restored.iteration;
    let app = meta
        .get("app")
        .and_then(|a| a.as_str())
        .unwrap_or("this job's");
    let got = restored.take("state").and_then(|t| {
        let vectors = (0..count as u32).map(|k| match t.get(k) {
            Some(a) => Ok(a.as_slice::<f64>()?.to_vec()),
            None => Err(Error::data(format!(
                "the checkpoint at iteration {it} does not hold {app} state (no vector {k})"
            ))),
        });
        check(it, vectors.collect::<Result<Vec<_>>>()?)
    });
    crate::worker::agree_on(w, &format!("{app}-resume"), got).map(|v| Some((it, v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn blocks_own_whole_chunks_and_cover_the_rows_once() {
        for n in [0usize, 1, 5, 1023, 1024, 1025, 5000] {
            for p in 1..=5 {
                let b = Blocks::new(n, p);
                assert!(b.chunks() <= MAX_CHUNKS, "{n}");
                let mut next = 0;
                for r in 0..p {
                    let rows = b.rows(r);
                    assert_eq!(rows.start, next, "{n} {p}");
                    next = rows.end;
                    for c in b.chunk_range(r) {
                        assert!(rows.contains(&b.chunk_rows(c).start));
                    }
                }
                assert_eq!(next, n);
                assert_eq!(b.chunk(), Blocks::new(n, 1).chunk());
            }
        }
    }

    /// Sums and gathers give the same bits for 1..=4 workers and both exchanges, equal to the
    /// sequential fixed-order sum.
    #[test]
    fn sums_and_gathers_do_not_depend_on_the_workers() {
        let n = 3000;
        let f = |i: usize| [1.0 / (i as f64 + 0.5), (i as f64).sin()];
        let want = fixed_sum(&Blocks::new(n, 1), f);
        for ex in Exchange::ALL.iter().copied() {
            for p in 1..=4usize {
                let workers = Worker::in_process(p, Config::default()).unwrap();
                let hs: Vec<_> = workers
                    .into_iter()
                    .map(|w| {
                        std::thread::spawn(move || {
                            let b = Blocks::new(n, w.size());
                            let s = sum(&w, ex, "s", &b, f).unwrap();
                            let mine: Vec<f64> = b
                                .rows(w.rank())
                                .flat_map(|i| [i as f64, -(i as f64)])
                                .collect();
                            let all = gather_all(&w, ex, "g", &b, 2, &mine).unwrap();
                            w.close();
                            (s, all)
                        })
                    })
                    .collect();
                for h in hs {
                    let (s, all) = h.join().unwrap();
                    assert_eq!(s.map(f64::to_bits), want.map(f64::to_bits), "{ex} {p}");
                    assert_eq!(all.len(), 2 * n);
                    assert!(all
                        .chunks_exact(2)
                        .enumerate()
                        .all(|(i, v)| v == [i as f64, -(i as f64)]));
                }
            }
        }
    }
}
