//! Allreduce (and the segment machinery shared with reduce-scatter and reduce): afterwards
//! every worker's table is the combination of all tables, bit-identical on every worker.

use std::collections::HashSet;

use super::assemble::{absorb, fold_into, write_piece, write_pieces};
use super::framing::In;
use super::framing::{recv_batch_expecting, send_batch, table_pieces, whole_piece};
use super::segment::Segmenter;
use super::{choose, tags, Ctx};
use crate::data::{Combiner, Table};
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::wire::Header;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllreduceAlgorithm {
    /// Bidirectional exchange when every table is small, regroup-allgather when any is large
    /// (agreed by all workers, see [`choose`]).
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
    /// The algorithm `Auto` runs when the largest table of any worker has `bytes`
    /// (see [`choose::allreduce`]).
    pub fn resolve(self, bytes: u64, crossover: u64) -> AllreduceAlgorithm {
        match self {
            AllreduceAlgorithm::Auto => choose::allreduce(bytes, crossover),
            a => a,
        }
    }
}

/// Recursive doubling ("bidirectional exchange"). Non-powers of two fold the extra ranks into
/// the first ones before and send the result back after.
/// Cost: ⌈log2 p⌉ (α + nβ) (+ 2(α + nβ) when p is not a power of two).
pub async fn bidirectional_exchange(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    doubling(cx, table, None).await.map(|_| ())
}

/// The automatic allreduce: bidirectional exchange that agrees on the way whether any
/// worker's table reaches `Config::allreduce_crossover`, then regroup-allgather if one does
/// (how and at what cost: [`choose`]).
pub async fn auto(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    let large = choose::allreduce_large(table.bytes(), cx.cfg.allreduce_crossover);
    if doubling(cx, table, Some(large)).await? {
        regroup_allgather(cx, table).await?;
    }
    Ok(())
}

/// Recursive doubling. With `agree = Some(large)` every message carries in `aux` whether its
/// sender has seen a large table (`large` for its own), tables travel only between workers
/// that have not, and the result says whether any worker's table was large: then every table
/// is left as it was on entry. With `None` it is plain bidirectional exchange (`aux` 0).
pub(super) async fn doubling(cx: &Ctx<'_>, table: &mut Table, agree: Option<bool>) -> Result<bool> {
    let (r, p) = (cx.rank(), cx.size());
    let p2 = 1usize << (usize::BITS - 1 - p.leading_zeros());
    let extra = p - p2;
    let mut large = agree.unwrap_or(false);
    let flag = |hdr: &Header| large_flag(cx, hdr, agree.is_some(), "allreduce");
    if r >= p2 {
        let partner = r - p2;
        let pieces = if large { vec![] } else { table_pieces(table) };
        send_batch(&cx.ep, partner, tags::FOLD_IN.tag(), large as u32, &pieces).await?;
        drop(pieces);
        if agree.is_none() {
            table.clear(); // its buffers can take the result
        }
        let tag = tags::FOLD_OUT.tag();
        let (hdr, got) = recv_batch_expecting(&cx.ep, cx.pool, partner, tag, whole_piece).await?;
        if flag(&hdr)? {
            return Ok(true); // the table is still whole: regroup-allgather starts from it
        }
        table.clear();
        absorb(table, cx.pool, got)?;
        return Ok(false);
    }
    // While the choice is open, partners' tables are combined into a copy (made before the
    // first one arrives), so that `table` can still go to regroup-allgather unchanged.
    let mut work: Option<Table> = None;
    let copy = agree.is_some();
    if r < extra {
        let tag = tags::FOLD_IN.tag();
        let (hdr, got) = recv_batch_expecting(&cx.ep, cx.pool, r + p2, tag, whole_piece).await?;
        let theirs = flag(&hdr)?;
        if !large && !theirs {
            take(table, &mut work, copy, cx.pool, got, false)?;
        }
        large |= theirs;
    }
    let (mut mask, mut round) = (1usize, 0usize);
    while mask < p2 {
        let partner = r ^ mask;
        let tag = tags::ROUND.at(round);
        let current = work.as_ref().unwrap_or(table);
        let pieces = if large { vec![] } else { table_pieces(current) };
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, partner, tag, large as u32, &pieces),
            recv_batch_expecting(&cx.ep, cx.pool, partner, tag, whole_piece)
        );
        sent?;
        drop(pieces);
        let (hdr, got) = got?;
        let theirs = flag(&hdr)?;
        if !large && !theirs {
            take(table, &mut work, copy, cx.pool, got, partner < r)?;
        }
        large |= theirs;
        mask <<= 1;
        round += 1;
    }
    if r < extra {
        let current = work.as_ref().unwrap_or(table);
        let pieces = if large { vec![] } else { table_pieces(current) };
        send_batch(&cx.ep, r + p2, tags::FOLD_OUT.tag(), large as u32, &pieces).await?;
    }
    if !large {
        if let Some(w) = work {
            *table = w;
        }
    }
    Ok(large)
}

/// The "large table seen" flag in `aux` of a frame of an agreeing exchange (the automatic
/// allreduce's doubling, the automatic reduce-scatter's halving): 0 or 1, and only 0 when
/// the exchange does not agree (`agreeing` false); anything else is a protocol error naming the
/// sender and `what` the operation is.
pub(super) fn large_flag(cx: &Ctx<'_>, hdr: &Header, agreeing: bool, what: &str) -> Result<bool> {
    match hdr.aux {
        0 => Ok(false),
        1 if agreeing => Ok(true),
        x => Err(Error::Protocol(format!(
            "{}: rank {} sent {what} flag {x}",
            cx.ep.ctx, hdr.src
        ))),
    }
}

/// Combines `got` into `table`, or into `work` when `copy` (a copy of `table` made now if
/// there is none yet). `theirs_first`: `got` comes from a lower rank, so a combiner for which
/// order matters (anything but sum, min and max: keep-first, reject's message, append, custom)
/// combines it first and the held table second. Every worker then combines in rank order,
/// and the result is the same on all of them.
fn take(
    table: &mut Table,
    work: &mut Option<Table>,
    copy: bool,
    pool: &Pool,
    got: Vec<In>,
    theirs_first: bool,
) -> Result<()> {
    let acc = match work {
        Some(w) => w,
        None if copy => work.insert(table.duplicate(pool)),
        None => table,
    };
    if theirs_first && !acc.combiner().folds_bytes() {
        let mut theirs = Table::new(acc.combiner().clone());
        absorb(&mut theirs, pool, got)?;
        let mine = std::mem::replace(acc, theirs);
        return acc.merge(mine);
    }
    absorb(acc, pool, got)
}

/// Regroup-allgather: ring reduce-scatter of segments, then ring allgather of the reduced
/// segments. Large partitions with an element-wise combiner are cut into p segments, so even a
/// single big partition is spread evenly. Cost: 2(p−1)/p · nβ + 2(p−1)α.
pub async fn regroup_allgather(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    let seg = Segmenter::new(cx, table);
    ring_reduce_scatter(cx, table, &seg).await?;
    ring_allgather_segments(cx, table, &seg).await
}

/// Ring reduce-scatter over segments: in step k worker r sends its partial of bucket r−k−1 to
/// r+1 and folds bucket r−k−2 from r−1 into its own; after p−1 steps worker b holds the full
/// reduction of every segment it owns. Partitions a worker lacks are created as needed. A piece
/// that is not exactly a segment of the bucket expected at that step is a protocol error naming
/// the sender, found before the piece is combined or any partition is created.
/// Cost: (p−1)/p · nβ + (p−1)α.
pub async fn ring_reduce_scatter(cx: &Ctx<'_>, table: &mut Table, seg: &Segmenter) -> Result<()> {
    let ring: Vec<usize> = (0..cx.size()).collect();
    ring_reduce_scatter_in(cx, table, seg, &ring).await
}

/// [`ring_reduce_scatter`] around the ring `ring` (a permutation of the ranks; position v sends
/// to position v+1): each worker still ends with the segments it owns.
pub async fn ring_reduce_scatter_in(
    cx: &Ctx<'_>,
    table: &mut Table,
    seg: &Segmenter,
    ring: &[usize],
) -> Result<()> {
    let p = cx.size();
    if p == 1 {
        return Ok(());
    }
    let r = ring
        .iter()
        .position(|&x| x == cx.rank())
        .expect("the ring holds every rank");
    tags::check_workers(p)?;
    let combiner: Combiner = table.combiner().clone();
    let mut have: HashSet<(u32, u64)> = HashSet::new();
    for (pid, a) in table.iter() {
        for (o, _, _) in seg.segments(pid, a.bytes().len() as u64, a.layout())? {
            have.insert((pid, o));
        }
    }
    let (right, left) = (ring[(r + 1) % p], ring[(r + p - 1) % p]);
    for k in 0..p - 1 {
        let send_b = ring[(r + 2 * p - k - 1) % p];
        let recv_b = ring[(r + 2 * p - k - 2) % p];
        let pieces = seg.pieces(table, send_b, Some(&have))?;
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, right, tags::RING_REDUCE.at(k), 0, &pieces),
            recv_batch_expecting(&cx.ep, cx.pool, left, tags::RING_REDUCE.at(k), |m| seg
                .expect(m, recv_b))
        );
        sent?;
        drop(pieces);
        for piece in got?.1 {
            let m = piece.meta;
            if have.contains(&(m.pid, m.offset)) {
                let a = table.get_mut(m.pid).expect("have implies present");
                fold_into(&combiner, a, piece)?;
            } else {
                have.insert((m.pid, m.offset));
                write_piece(table, cx.pool, piece)?;
            }
        }
    }
    Ok(())
}

/// Ring allgather of reduced segments: in step k worker r sends bucket r−k to r+1 and stores
/// bucket r−k−1 from r−1 (a piece that is not exactly a segment of that bucket is a protocol
/// error naming the sender). Cost: (p−1)/p · nβ + (p−1)α.
pub async fn ring_allgather_segments(
    cx: &Ctx<'_>,
    table: &mut Table,
    seg: &Segmenter,
) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    tags::check_workers(p)?;
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    for k in 0..p.saturating_sub(1) {
        let send_b = (r + p - k) % p;
        let recv_b = (r + 2 * p - k - 1) % p;
        let pieces = seg.pieces(table, send_b, None)?;
        let tag = tags::RING_GATHER.at(k);
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, right, tag, 0, &pieces),
            recv_batch_expecting(&cx.ep, cx.pool, left, tag, |m| seg.expect(m, recv_b))
        );
        sent?;
        drop(pieces);
        write_pieces(table, cx.pool, got?.1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted::{self, Piece};
    use crate::data::{Array, DType};
    use crate::wire::Op;

    /// Rank 0's table: partition 0 of 4096 f64 (32768 bytes), cut into two segments of 16384
    /// bytes: bytes 0.. owned by rank 0, bytes 16384.. by rank 1.
    fn table(pool: &Pool) -> Table {
        let mut t = Table::new(Combiner::Sum);
        t.add(0, Array::zeros(pool, DType::F64, 4096)).unwrap();
        t
    }

    /// Step 0 of the ring reduce-scatter (rank 0 takes rank 0's segments from rank 1) with
    /// rank 1 sending `pieces`; the error, if any.
    fn reduce_scatter_with(pieces: &[Piece]) -> Result<Table> {
        crafted::run(
            Op::Allreduce,
            2,
            tags::RING_REDUCE.at(0),
            pieces,
            async |cx| {
                let mut t = table(cx.pool);
                let seg = Segmenter::new(cx, &t);
                ring_reduce_scatter(cx, &mut t, &seg).await?;
                Ok(t)
            },
        )
    }

    fn refused(r: Result<Table>, why: &str) {
        crafted::refused(r, "allreduce", why);
    }

    #[test]
    fn reduce_scatter_takes_exactly_the_planned_segments_of_the_step() {
        // The planned segment is combined in.
        let t = reduce_scatter_with(&[(0, 32768, 0, 16384)]).unwrap();
        let v = t.get(0).unwrap().as_slice::<f64>().unwrap();
        assert!(v[..2048]
            .iter()
            .all(|&x| x == f64::from_bits(0x0101_0101_0101_0101)));
        assert!(v[2048..].iter().all(|&x| x == 0.0));
        // Longer than the segment (announced and carried: refused before it is combined).
        refused(
            reduce_scatter_with(&[(0, 32768, 0, 16392)]),
            "the segment at byte 0 has 16384 bytes",
        );
        refused(
            reduce_scatter_with(&[(0, 32768, 0, 8)]),
            "the segment at byte 0 has 16384 bytes",
        );
        refused(
            reduce_scatter_with(&[(0, 32768, 8, 16384)]),
            "no segment of the plan (2 segments) starts at byte 8",
        );
        // Rank 1's own segment arrives at rank 0's step.
        refused(
            reduce_scatter_with(&[(0, 32768, 16384, 16384)]),
            "that segment is owned by rank 1; this step takes rank 0's",
        );
        // The same segment twice would be combined twice.
        refused(
            reduce_scatter_with(&[(0, 32768, 0, 16384), (0, 32768, 0, 16384)]),
            "it is in the batch twice",
        );
        // A partition rank 0 lacks: judged by its own plan (1 TiB cut in two: 512 GiB
        // segments), so 64 KiB of it is refused before any partition is created.
        refused(
            reduce_scatter_with(&[(5, 1 << 40, 0, 1 << 16)]),
            "the segment at byte 0 has 549755813888 bytes",
        );
    }

    #[test]
    fn the_ring_allgather_takes_only_the_senders_bucket() {
        let gather = |pieces: &[Piece]| {
            crafted::run(
                Op::Allreduce,
                2,
                tags::RING_GATHER.at(0),
                pieces,
                async |cx| {
                    let mut t = table(cx.pool);
                    let seg = Segmenter::new(cx, &t);
                    ring_allgather_segments(cx, &mut t, &seg).await?;
                    Ok(t)
                },
            )
        };
        assert!(gather(&[(0, 32768, 16384, 16384)]).is_ok());
        refused(
            gather(&[(0, 32768, 0, 16384)]),
            "that segment is owned by rank 0; this step takes rank 1's",
        );
        refused(
            gather(&[(0, 32768, 16384, 8192)]),
            "the segment at byte 16384 has 16384 bytes",
        );
    }

    #[test]
    fn bidirectional_exchange_takes_whole_partitions_only() {
        let r = crafted::run(
            Op::Allreduce,
            1,
            tags::ROUND.at(0),
            &[(0, 32768, 0, 8)],
            async |cx| {
                let mut t = table(cx.pool);
                bidirectional_exchange(cx, &mut t).await?;
                Ok(t)
            },
        );
        refused(r, "this step exchanges whole partitions only");
    }
}
