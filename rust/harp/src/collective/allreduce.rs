//! Allreduce (and the segment machinery shared with reduce-scatter and reduce): afterwards
//! every worker's table is the combination of all tables, bit-identical on every worker.

use std::collections::HashSet;

use super::{absorb, recv_batch, send_batch, split_ranges, table_pieces, Ctx, In, Out};
use crate::data::{Combiner, DType, Partitioner, Table};
use crate::error::{Error, Result};
use crate::pool::Pool;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllreduceAlgorithm {
    /// Bidirectional exchange for small tables, regroup-allgather for large ones.
    Auto,
    /// Recursive doubling: whole tables swapped with a partner in each of log2 p rounds.
    BidirectionalExchange,
    /// Reduce-scatter of segments around a ring, then allgather of the reduced segments.
    RegroupAllgather,
}

impl AllreduceAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            AllreduceAlgorithm::Auto => 0,
            AllreduceAlgorithm::BidirectionalExchange => 1,
            AllreduceAlgorithm::RegroupAllgather => 2,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => AllreduceAlgorithm::Auto,
            "bidirectional-exchange" | "bde" | "recursive-doubling" => AllreduceAlgorithm::BidirectionalExchange,
            "regroup-allgather" | "ring" => AllreduceAlgorithm::RegroupAllgather,
            _ => {
                return Err(Error::config(format!(
                    "unknown allreduce algorithm '{s}' (auto, bidirectional-exchange, regroup-allgather)"
                )))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            AllreduceAlgorithm::Auto => "auto",
            AllreduceAlgorithm::BidirectionalExchange => "bidirectional-exchange",
            AllreduceAlgorithm::RegroupAllgather => "regroup-allgather",
        }
    }
    /// The algorithm `Auto` picks for a table of `bytes`: bidirectional exchange below
    /// `crossover` bytes, regroup-allgather from it on (`Config::allreduce_crossover`, 16 KiB by
    /// default). Bidirectional exchange costs ⌈log2 p⌉(α + nβ) (+2(α + nβ) when p is not a power
    /// of two), regroup-allgather 2(p−1)α + 2(p−1)/p·nβ; on the emulated 200 Mbit/s network
    /// regroup-allgather wins from 16 KiB at every measured p and loses up to 8 KiB
    /// (docs/benchmarks-netns.md).
    pub fn resolve(self, bytes: u64, crossover: u64) -> AllreduceAlgorithm {
        match self {
            AllreduceAlgorithm::Auto if bytes >= crossover => AllreduceAlgorithm::RegroupAllgather,
            AllreduceAlgorithm::Auto => AllreduceAlgorithm::BidirectionalExchange,
            a => a,
        }
    }
}

/// Recursive doubling ("bidirectional exchange"). Non-powers of two fold the extra ranks into
/// the first ones before and send the result back after.
/// Cost: ⌈log2 p⌉ (α + nβ) (+ 2(α + nβ) when p is not a power of two).
pub async fn bidirectional_exchange(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let p2 = 1usize << (usize::BITS - 1 - p.leading_zeros());
    let extra = p - p2;
    const BACK: u32 = u32::MAX;
    if r >= p2 {
        send_batch(&cx.ep, r - p2, 0, 0, &table_pieces(table)).await?;
        table.clear();
        let (_, got) = recv_batch(&cx.ep, cx.pool, r - p2, BACK).await?;
        return absorb(table, cx.pool, got);
    }
    if r < extra {
        let (_, got) = recv_batch(&cx.ep, cx.pool, r + p2, 0).await?;
        absorb(table, cx.pool, got)?;
    }
    let (mut mask, mut round) = (1usize, 1u32);
    while mask < p2 {
        let partner = r ^ mask;
        let pieces = table_pieces(table);
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, partner, round, 0, &pieces),
            recv_batch(&cx.ep, cx.pool, partner, round)
        );
        sent?;
        drop(pieces);
        absorb(table, cx.pool, got?.1)?;
        mask <<= 1;
        round += 1;
    }
    if r < extra {
        send_batch(&cx.ep, r + p2, BACK, 0, &table_pieces(table)).await?;
    }
    Ok(())
}

/// Regroup-allgather: ring reduce-scatter of segments, then ring allgather of the reduced
/// segments. Large partitions with an element-wise combiner are cut into p segments, so even a
/// single big partition is spread evenly. Cost: 2(p−1)/p · nβ + 2(p−1)α.
pub async fn regroup_allgather(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    let seg = Segmenter::new(cx, table);
    ring_reduce_scatter(cx, table, &seg).await?;
    ring_allgather_segments(cx, table, &seg).await
}

/// How partitions are cut into segments and which worker owns each segment. Every worker
/// computes the same cut from a partition's size alone.
pub struct Segmenter {
    p: usize,
    split: bool,
    min: u64,
    part: Partitioner,
}

impl Segmenter {
    /// Segments for allreduce-style operations (split when the combiner allows it).
    pub fn new(cx: &Ctx<'_>, table: &Table) -> Segmenter {
        Segmenter {
            p: cx.size(),
            split: table.combiner().elementwise(),
            min: cx.cfg.segment_min_bytes,
            part: Partitioner::Modulo,
        }
    }
    /// Whole partitions, owned by `part` (reduce-scatter).
    pub fn whole(p: usize, part: Partitioner) -> Segmenter {
        Segmenter {
            p,
            split: false,
            min: u64::MAX,
            part,
        }
    }
    fn ranges(&self, total: u64, dtype: DType) -> Vec<(u64, u64)> {
        let n = if self.split && total >= self.min && self.p > 1 {
            self.p
        } else {
            1
        };
        split_ranges(total, dtype, n)
    }
    fn owner(&self, pid: u32, seg: usize) -> Result<usize> {
        Ok((self.part.owner(pid, self.p)? + seg) % self.p)
    }
    /// (offset, len, owner) of every segment of a partition.
    fn segments(&self, pid: u32, total: u64, dtype: DType) -> Result<Vec<(u64, u64, usize)>> {
        self.ranges(total, dtype)
            .into_iter()
            .enumerate()
            .map(|(s, (o, l))| Ok((o, l, self.owner(pid, s)?)))
            .collect()
    }
    /// The owner of the segment of `pid` starting at `offset`.
    fn owner_of(&self, pid: u32, total: u64, dtype: DType, offset: u64) -> Result<usize> {
        let ranges = self.ranges(total, dtype);
        let s = ranges.iter().position(|(o, _)| *o == offset).ok_or_else(|| {
            Error::Protocol(format!("partition {pid}: no segment starts at byte {offset} (partition sizes differ between workers?)"))
        })?;
        self.owner(pid, s)
    }
    /// The table's segments owned by `owner`, restricted to `have` when given.
    pub fn pieces<'t>(
        &self,
        table: &'t Table,
        owner: usize,
        have: Option<&HashSet<(u32, u64)>>,
    ) -> Result<Vec<Out<'t>>> {
        let mut out = Vec::new();
        for (pid, a) in table.iter() {
            for (o, l, w) in self.segments(pid, a.bytes().len() as u64, a.dtype())? {
                if w == owner && have.is_none_or(|h| h.contains(&(pid, o))) {
                    out.push(Out::range(pid, a, o, l));
                }
            }
        }
        Ok(out)
    }
    /// Segments owned by `owner` (after a reduce-scatter, all of them are valid there).
    pub fn owned_pieces<'t>(&self, table: &'t Table, owner: usize) -> Vec<Out<'t>> {
        self.pieces(table, owner, None).unwrap_or_default()
    }
}

/// Ring reduce-scatter over segments: in step k worker r sends its partial of bucket r−k−1 to
/// r+1 and folds bucket r−k−2 from r−1 into its own; after p−1 steps worker b holds the full
/// reduction of every segment it owns. Partitions a worker lacks are created as needed.
/// Cost: (p−1)/p · nβ + (p−1)α.
pub async fn ring_reduce_scatter(cx: &Ctx<'_>, table: &mut Table, seg: &Segmenter) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    if p == 1 {
        return Ok(());
    }
    let combiner: Combiner = table.combiner().clone();
    let mut have: HashSet<(u32, u64)> = HashSet::new();
    for (pid, a) in table.iter() {
        for (o, _, _) in seg.segments(pid, a.bytes().len() as u64, a.dtype())? {
            have.insert((pid, o));
        }
    }
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    for k in 0..p - 1 {
        let send_b = (r + 2 * p - k - 1) % p;
        let recv_b = (r + 2 * p - k - 2) % p;
        let pieces = seg.pieces(table, send_b, Some(&have))?;
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, right, k as u32, 0, &pieces),
            recv_batch(&cx.ep, cx.pool, left, k as u32)
        );
        sent?;
        drop(pieces);
        for piece in got?.1 {
            let m = piece.meta;
            if seg.owner_of(m.pid, m.total, m.dtype, m.offset)? != recv_b {
                return Err(Error::Protocol(format!(
                    "{}: segment of partition {} arrived at the wrong step",
                    cx.ep.ctx, m.pid
                )));
            }
            if have.contains(&(m.pid, m.offset)) {
                let a = table.get_mut(m.pid).expect("have implies present");
                check_shape(m.pid, a.dtype(), a.bytes().len() as u64, &piece)?;
                let range = m.offset as usize..(m.offset + m.len) as usize;
                combiner.combine_bytes(
                    m.pid,
                    a.dtype(),
                    &mut a.bytes_mut()[range],
                    m.dtype,
                    &piece.buf,
                )?;
            } else {
                have.insert((m.pid, m.offset));
                write_piece(table, cx.pool, piece)?;
            }
        }
    }
    Ok(())
}

/// Ring allgather of reduced segments: in step k worker r sends bucket r−k to r+1 and stores
/// bucket r−k−1 from r−1. Cost: (p−1)/p · nβ + (p−1)α.
pub async fn ring_allgather_segments(
    cx: &Ctx<'_>,
    table: &mut Table,
    seg: &Segmenter,
) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    for k in 0..p.saturating_sub(1) {
        let send_b = (r + p - k) % p;
        let pieces = seg.pieces(table, send_b, None)?;
        let tag = 10_000 + k as u32;
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, right, tag, 0, &pieces),
            recv_batch(&cx.ep, cx.pool, left, tag)
        );
        sent?;
        drop(pieces);
        write_pieces(table, cx.pool, got?.1)?;
    }
    Ok(())
}

fn check_shape(pid: u32, dtype: DType, total: u64, piece: &In) -> Result<()> {
    if dtype != piece.meta.dtype || total != piece.meta.total {
        return Err(Error::data(format!(
            "partition {pid}: this worker holds {} {} elements, a peer sent a piece of a {}-element {} partition",
            total / dtype.size() as u64,
            dtype.name(),
            piece.meta.total / piece.meta.dtype.size() as u64,
            piece.meta.dtype.name()
        )));
    }
    Ok(())
}

/// Copies a piece into its partition's byte range, creating the partition if absent.
fn write_piece(table: &mut Table, pool: &Pool, piece: In) -> Result<()> {
    let m = piece.meta;
    if m.whole() {
        table.put(m.pid, crate::data::Array::from_buf(m.dtype, piece.buf)?);
        return Ok(());
    }
    if !table.contains(m.pid) {
        let elems = (m.total / m.dtype.size() as u64) as usize;
        table.put(m.pid, crate::data::Array::uninit(pool, m.dtype, elems));
    }
    let a = table.get_mut(m.pid).expect("present");
    check_shape(m.pid, a.dtype(), a.bytes().len() as u64, &piece)?;
    a.bytes_mut()[m.offset as usize..(m.offset + m.len) as usize].copy_from_slice(&piece.buf);
    Ok(())
}

/// Writes reduced segments into the table (replacing what was there).
pub fn write_pieces(table: &mut Table, pool: &Pool, pieces: Vec<In>) -> Result<()> {
    for piece in pieces {
        write_piece(table, pool, piece)?;
    }
    Ok(())
}
