//! Broadcast: after the call every worker's table holds exactly the root's partitions (the
//! receivers' previous partitions are dropped; their combiner is kept).

use super::algorithm::BroadcastAlgorithm;
use super::assemble::Assembler;
use super::choose;
use super::ctx::{check_root, Ctx};
use super::framing::{
    finish_batch, parse_head, recv_batch_expecting, recv_head, recv_pieces, send_batch,
    send_batch_inline, table_pieces, BatchHead, In, Out,
};
use super::join::{boxed, join_all};
use super::segment::{self, chunks, Segmenter};
use super::shapes::{self, tree};
use super::tags;
use crate::data::Table;
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::topology::Topology;
use crate::wire::Kind;

/// A broadcast batch travels inline (one frame, store-and-forward) only up to this size.
const BCAST_INLINE_MAX: u64 = 4 * 1024;

/// The possible parents of non-root `r` under an automatic broadcast from `root`: its parent
/// in each tree [`choose::broadcast`] can pick (binomial first, then chain, then with a model
/// net-chain, net-hierarchy and net-tree, last the root, which sends the scatter-allgather's
/// first frame; each parent once).
pub fn auto_parents(
    topo: &Topology,
    net: Option<&NetModel>,
    r: usize,
    p: usize,
    root: usize,
) -> Vec<usize> {
    let mut parents = Vec::new();
    for &algo in choose::broadcast_candidates(net) {
        if let (Some(q), _) = tree(algo, topo, net, r, p, root) {
            if !parents.contains(&q) {
                parents.push(q);
            }
        }
    }
    parents
}

/// Cost (n bytes, chunk c): chain ≈ (n + (p−2)c)β + (p−1)α, i.e. ≈ n/B whatever p;
/// binomial ≈ ⌈log2 p⌉ (nβ + α) at the root's uplink (pipelined per chunk below it);
/// one-by-one = (p−1)(nβ + α); scatter-allgather ≈ 2(p−1)α + 2(p−1)/p · nβ
/// ([`scatter_allgather_root`]).
pub async fn broadcast(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    algo: BroadcastAlgorithm,
) -> Result<()> {
    check_root(cx, root, "broadcast root")?;
    let auto = algo == BroadcastAlgorithm::Auto;
    let net = cx.net.as_deref();
    let chunk = segment::chunk(cx.cfg, table.bytes(), cx.size());
    let mut algo = algo;
    if auto && cx.rank() == root {
        let crossover = cx.cfg.broadcast_crossover;
        algo = choose::broadcast(table.bytes(), crossover, net, cx.topo, root, chunk);
    }
    // The concrete algorithm travels in `aux` of every frame.
    let announce = algo.code() as u32;
    let (parent, children) = if auto && cx.rank() != root {
        (None, Vec::new())
    } else {
        tree(algo, cx.topo, net, cx.rank(), cx.size(), root)
    };
    let tag = tags::MAIN.tag();
    if cx.rank() == root {
        // Root: cut partitions into chunks, then stream them.
        let mut pieces: Vec<Out<'_>> = Vec::new();
        for (pid, a) in table.iter() {
            let n = a.bytes().len() as u64;
            for (off, len) in chunks(n, a.layout().unit(), chunk) {
                pieces.push(if len == n {
                    Out::whole(pid, a)
                } else {
                    Out::range(pid, a, off, len)
                });
            }
        }
        if algo == BroadcastAlgorithm::ScatterAllgather {
            drop(pieces);
            return scatter_allgather_root(cx, table, root, announce).await;
        }
        if algo == BroadcastAlgorithm::OneByOne {
            let whole = table_pieces(table);
            for &c in &children {
                send_batch(&cx.ep, c, tag, announce, &whole).await?;
            }
            return Ok(());
        }
        return send_batch_inline(&cx.ep, &children, tag, announce, &pieces, BCAST_INLINE_MAX)
            .await;
    }
    let (head, children, algo) = if auto {
        // Learn the root's choice from the first frame. Only this worker's parent under one of
        // the trees the root can pick may send it; the wait fails at once, naming the peer, when
        // one of those parents or the root itself has failed.
        let parents = auto_parents(cx.topo, net, cx.rank(), cx.size(), root);
        let f = cx.ep.recv_frame_from_any(&parents, &[root], tag).await?;
        let chosen = BroadcastAlgorithm::from_announced(f.hdr.aux).ok_or_else(|| {
            Error::Protocol(format!(
                "{}: unknown broadcast algorithm {} announced",
                cx.ep.ctx, f.hdr.aux
            ))
        })?;
        let (parent, children) = tree(chosen, cx.topo, net, cx.rank(), cx.size(), root);
        if parent != Some(f.hdr.src as usize) {
            return Err(Error::Protocol(format!(
                "{}: rank {} sent the broadcast, but this worker's parent is {parent:?}",
                cx.ep.ctx, f.hdr.src
            )));
        }
        (parse_head(&cx.ep, f)?, children, chosen)
    } else {
        (
            recv_head(&cx.ep, parent.expect("non-root has a parent"), tag).await?,
            children,
            algo,
        )
    };
    if algo == BroadcastAlgorithm::ScatterAllgather {
        return scatter_allgather_receive(cx, head, table, root).await;
    }
    let parent = head.hdr.src as usize;
    let announce = head.hdr.aux;
    for &c in &children {
        cx.ep
            .send_frame(c, Kind::Batch, tag, announce, &[head.raw()])
            .await?;
    }
    table.clear();
    let mut asm = Assembler::default();
    let tbl = std::cell::RefCell::new(table);
    let asm_ref = std::cell::RefCell::new(&mut asm);
    recv_pieces(&cx.ep, cx.pool, parent, head, |piece| {
        let children = &children;
        let tbl = &tbl;
        let asm_ref = &asm_ref;
        async move {
            if !piece.meta.inline {
                for &c in children {
                    cx.ep
                        .send_frame(c, Kind::Data, tag, announce, &[&piece.buf])
                        .await?;
                }
            }
            asm_ref
                .borrow_mut()
                .add(&mut tbl.borrow_mut(), cx.pool, piece)
        }
    })
    .await?;
    let table = tbl.into_inner();
    asm.finish(table)
}

/// The segments of a scatter-allgather broadcast: every partition of at least
/// `Config::segment_min_bytes` whose layout can be cut (dense arrays) in p segments, the
/// others whole; segment s of partition `pid` belongs to rank (pid + s) mod p. Receivers judge
/// every piece by this plan from its announced size alone.
fn sa_segments(cx: &Ctx<'_>) -> Segmenter {
    Segmenter::split(cx.size(), true, cx.cfg.segment_min_bytes)
}

/// The ring of a scatter-allgather broadcast: the rack-order chain from the root (position 0);
/// position v sends to v + 1, and the last position sends nothing (the root holds every
/// segment already).
fn sa_ring(cx: &Ctx<'_>, root: usize) -> Vec<usize> {
    shapes::order(
        BroadcastAlgorithm::ScatterAllgather,
        cx.topo,
        cx.net.as_deref(),
        cx.size(),
        root,
    )
}

/// The rank whose segments (its *bucket*) position `v` of `ring` sends in step `k` of the
/// allgather: position v − k's (mod p). Position v + 1 receives that bucket in the same step.
fn sa_bucket(ring: &[usize], v: usize, k: usize) -> usize {
    let p = ring.len();
    ring[(v + p - k % p) % p]
}

/// Scatter-allgather broadcast, the root's side (van de Geijn's bucket broadcast). Phase 1:
/// the root sends every other worker its bucket (its segments, [`sa_segments`]), all at once.
/// Phase 2: in step k = 0 … p−2 ring position v sends the bucket of position v − k to v + 1,
/// which is the bucket it received in step k − 1 (its own in step 0); position p − 1 sends
/// nothing, and the root, which holds every bucket, sends position −k's (so the ring never
/// carries a bucket back into the root).
///
/// Cost (n bytes, p workers): scatter (p−1)α + (p−1)/p · nβ at the root's link, then
/// (p−1)(α + nβ/p) around the ring: ≈ 2(p−1)α + 2(p−1)/p · nβ. Ahead of the binomial
/// tree's ⌈log2 p⌉ nβ for p ≥ 3; twice the pipelined chain's (n + (p−2)c)β + (p−1)α for
/// large n, and ahead of it in the α-β model only while n < p·c (measured: only at 16 KiB,
/// p = 4, docs/benchmarks-netns.md).
async fn scatter_allgather_root(
    cx: &Ctx<'_>,
    table: &Table,
    root: usize,
    announce: u32,
) -> Result<()> {
    let p = cx.size();
    tags::check_workers(p)?;
    let seg = sa_segments(cx);
    let ring = sa_ring(cx, root);
    let main = tags::MAIN.tag();
    let mut buckets = Vec::with_capacity(p - 1);
    for &w in &ring[1..] {
        buckets.push((w, seg.pieces(table, w, None)?));
    }
    let sends = buckets
        .iter()
        .map(|(w, pieces)| boxed(send_batch(&cx.ep, *w, main, announce, pieces)))
        .collect();
    join_all(sends).await?;
    drop(buckets);
    if p < 2 {
        return Ok(());
    }
    for k in 0..p - 1 {
        let pieces = seg.pieces(table, sa_bucket(&ring, 0, k), None)?;
        send_batch(&cx.ep, ring[1], tags::RING_GATHER.at(k), announce, &pieces).await?;
    }
    Ok(())
}

/// Scatter-allgather broadcast at a worker other than the root, whose bucket's batch head
/// `head` arrived (see [`scatter_allgather_root`]). Every received piece must be exactly a
/// segment of the bucket its step carries (else a protocol error naming the sender, before
/// it is taken); each bucket is forwarded as received, then assembled into the table, and a
/// partition left incomplete at the end is an error.
async fn scatter_allgather_receive(
    cx: &Ctx<'_>,
    head: BatchHead,
    table: &mut Table,
    root: usize,
) -> Result<()> {
    tags::check_workers(cx.size())?;
    let (seg, ring, r) = (sa_segments(cx), sa_ring(cx, root), cx.rank());
    let v = ring
        .iter()
        .position(|&x| x == r)
        .expect("the ring holds every rank");
    let announce = head.hdr.aux;
    let (_, mut last) = finish_batch(&cx.ep, cx.pool, head, |m| seg.expect(m, r)).await?;
    table.clear();
    let mut asm = Assembler::default();
    for k in 0..ring.len() - 1 {
        let tag = tags::RING_GATHER.at(k);
        let recv_b = sa_bucket(&ring, v - 1, k);
        let outs: Vec<Out<'_>> = last.iter().map(In::out).collect();
        let send = async {
            match ring.get(v + 1) {
                Some(&right) => send_batch(&cx.ep, right, tag, announce, &outs).await,
                None => Ok(()),
            }
        };
        let (sent, got) = tokio::join!(
            send,
            recv_batch_expecting(&cx.ep, cx.pool, ring[v - 1], tag, |m| seg.expect(m, recv_b))
        );
        sent?;
        drop(outs);
        for piece in std::mem::replace(&mut last, got?.1) {
            asm.add(table, cx.pool, piece)?;
        }
    }
    for piece in last {
        asm.add(table, cx.pool, piece)?;
    }
    asm.finish(table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted::{self, Piece};
    use crate::wire::Op;

    /// Rank 0 receives a scatter-allgather broadcast from root 1 (two workers, every partition
    /// cut in two: bytes 0.. are rank 0's bucket, 16384.. rank 1's) whose scatter batch and
    /// ring step are `scatter` and `ring`.
    fn receive(scatter: &[Piece], ring: &[Piece]) -> Result<Table> {
        let batches = [(tags::MAIN.tag(), scatter), (tags::RING_GATHER.at(0), ring)];
        let algo = BroadcastAlgorithm::ScatterAllgather;
        crafted::run_batches(Op::Broadcast, algo.code(), &batches, async |cx| {
            let mut t = Table::new(crate::data::Combiner::Sum);
            broadcast(cx, &mut t, 1, algo).await?;
            Ok(t)
        })
    }

    /// A receiver takes exactly its bucket from the scatter and the ring's bucket from its
    /// left, and a partition the ring leaves incomplete is an error, not a table with a hole.
    #[test]
    fn scatter_allgather_takes_exactly_the_planned_buckets() {
        let t = receive(&[(0, 32768, 0, 16384)], &[(0, 32768, 16384, 16384)]).unwrap();
        let a = t.get(0).unwrap();
        assert_eq!(a.bytes().len(), 32768);
        assert!(a.bytes().iter().all(|&b| b == 1));
        crafted::refused(
            receive(&[(0, 32768, 16384, 16384)], &[(0, 32768, 0, 16384)]),
            "broadcast",
            "that segment is owned by rank 1; this step takes rank 0's",
        );
        crafted::refused(
            receive(&[(0, 32768, 0, 16384)], &[(0, 32768, 0, 16384)]),
            "broadcast",
            "that segment is owned by rank 0; this step takes rank 1's",
        );
        crafted::refused(
            receive(&[(0, 32768, 0, 8192)], &[]),
            "broadcast",
            "the segment at byte 0 has 16384 bytes",
        );
        let e = receive(&[(0, 32768, 0, 16384)], &[]).unwrap_err();
        assert!(
            e.to_string().contains("partition 0 arrived incomplete"),
            "{e}"
        );
    }

    /// Auto waits for exactly the parents the two trees it can pick without a model give.
    #[test]
    fn auto_parents_are_the_binomial_and_chain_parents() {
        for p in 2..=17 {
            let topo = Topology::flat((0..p).map(|i| format!("h{i}:1")).collect());
            for root in 0..p {
                for r in (0..p).filter(|&r| r != root) {
                    let got = auto_parents(&topo, None, r, p, root);
                    let b = tree(BroadcastAlgorithm::Binomial, &topo, None, r, p, root)
                        .0
                        .unwrap();
                    let c = tree(BroadcastAlgorithm::Chain, &topo, None, r, p, root)
                        .0
                        .unwrap();
                    assert_eq!(got[0], b);
                    assert!(got.contains(&c) && got.len() == 1 + usize::from(b != c));
                    assert!(!got.contains(&r));
                }
            }
        }
        let topo = Topology::flat((0..4).map(|i| format!("h{i}:1")).collect());
        assert_eq!(auto_parents(&topo, None, 2, 4, 0), vec![0, 1]);
        assert_eq!(auto_parents(&topo, None, 3, 4, 0), vec![2]);
        // With a model the root is a possible parent too (scatter-allgather's first frame).
        let m = NetModel::uniform(4, 1e-4, 25e6);
        assert!(auto_parents(&topo, Some(&m), 3, 4, 0).contains(&0));
    }
}
