//! Rings over segments: the ring reduce-scatter (around any ring of the workers) and the ring
//! allgather of reduced segments, shared by regroup-allgather, the scatter-gather reduces and
//! the partition-granularity reduce-scatter.

use std::collections::HashSet;

use super::assemble::{fold_into, write_piece, write_pieces};
use super::ctx::Ctx;
use super::framing::{recv_batch_expecting, send_batch};
use super::segment::Segmenter;
use super::tags;
use crate::data::{Combiner, Table};
use crate::error::Result;

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
    let mut buckets = seg.buckets(table, Some(&have))?;
    let (right, left) = (ring[(r + 1) % p], ring[(r + p - 1) % p]);
    for k in 0..p - 1 {
        let send_b = ring[(r + 2 * p - k - 1) % p];
        let recv_b = ring[(r + 2 * p - k - 2) % p];
        let pieces = buckets.pieces(seg, table, send_b);
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
                buckets.add(recv_b, m.pid, m.offset);
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
    let mut buckets = seg.buckets(table, None)?;
    for k in 0..p.saturating_sub(1) {
        let send_b = (r + p - k) % p;
        let recv_b = (r + 2 * p - k - 1) % p;
        let pieces = buckets.pieces(seg, table, send_b);
        let tag = tags::RING_GATHER.at(k);
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, right, tag, 0, &pieces),
            recv_batch_expecting(&cx.ep, cx.pool, left, tag, |m| seg.expect(m, recv_b))
        );
        sent?;
        drop(pieces);
        let got = got?.1;
        let pids: Vec<u32> = got.iter().map(|piece| piece.meta.pid).collect();
        write_pieces(table, cx.pool, got)?;
        for pid in pids {
            buckets.add_partition(seg, table, pid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted::{self, Piece};
    use crate::data::{Array, DType};
    use crate::pool::Pool;
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
}
