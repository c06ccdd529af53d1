//! Reduce: the root's table becomes the combination of every worker's table.

use super::algorithm::ReduceAlgorithm;
use super::assemble::{absorb, write_pieces};
use super::barrier::agree_max;
use super::choose;
use super::ctx::{check_root, Ctx};
use super::framing::{recv_batch_expecting, send_batch, table_pieces, whole_piece};
use super::hierarchy::{self, Hierarchy};
use super::pipeline::reduce_pipelined;
use super::rings::ring_reduce_scatter_in;
use super::segment::Segmenter;
use super::shapes;
use super::tags;
use super::trees::{reduce_tree, ReduceSteps, Tree};
use crate::data::Table;
use crate::error::Result;

/// Reduce to `root`: the root's table becomes the combination of every worker's table; the
/// other workers' tables are left empty (their buffers go back to the pool).
///
/// Binomial: ⌈log2 p⌉ (α + nβ). Binary (pipelined): about 2nβ + ⌊log2 p⌋(α + cβ) for chunks
/// of c bytes; chain and net-chain about nβ + (p−1)(α + cβ). Scatter-gather: 2(p−1)/p · nβ + 2(p−1)α (better for big n);
/// net-ring the same with β of the ring's slowest link; net-hierarchy as
/// `costs::predict_tree` on its tree (Σ over levels of the
/// binomial inside a group, with that group's links).
/// Returns the algorithm that ran (`auto` resolved).
pub async fn reduce(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    algo: ReduceAlgorithm,
) -> Result<ReduceAlgorithm> {
    check_root(cx, root, "reduce root")?;
    let algo = match (algo, cx.net.as_deref()) {
        (ReduceAlgorithm::Auto, None) => ReduceAlgorithm::Binary,
        (ReduceAlgorithm::Auto, Some(net)) => {
            let n = agree_max(cx, table.bytes(), tags::AGREE).await?;
            choose::reduce(net, cx.topo, root, n, cx.cfg.allreduce_crossover)
        }
        (a, _) => a,
    };
    reduce_resolved(cx, table, root, algo).await?;
    Ok(algo)
}

async fn reduce_resolved(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    algo: ReduceAlgorithm,
) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    if let Some(t) = shapes::pipelined_tree(algo, cx.topo, cx.net.as_deref(), p, root) {
        return reduce_pipelined(cx, table, &t, tags::MAIN.tag()).await;
    }
    if let (ReduceAlgorithm::NetHierarchy, Some(net)) = (algo, cx.net.as_deref()) {
        let t = hierarchy::leader_tree(&Hierarchy::of(net), net, root);
        return reduce_over(cx, table, &t).await;
    }
    if matches!(
        algo,
        ReduceAlgorithm::ScatterGather | ReduceAlgorithm::NetRing
    ) {
        let seg = Segmenter::new(cx, table);
        let ring = match (algo, cx.net.as_deref()) {
            (ReduceAlgorithm::NetRing, Some(net)) => hierarchy::best_path(net, 0, true),
            _ => (0..p).collect(),
        };
        ring_reduce_scatter_in(cx, table, &seg, &ring).await?;
        // Owners send their reduced segments to the root.
        if r == root {
            let mut got = Vec::new();
            for src in (0..p).filter(|&s| s != root) {
                let tag = tags::TO_ROOT.tag();
                let owned = |m: &_| seg.expect(m, src);
                got.push(
                    recv_batch_expecting(&cx.ep, cx.pool, src, tag, owned)
                        .await?
                        .1,
                );
            }
            for pieces in got {
                write_pieces(table, cx.pool, pieces)?;
            }
        } else {
            let mine = seg.owned_pieces(table, r);
            send_batch(&cx.ep, root, tags::TO_ROOT.tag(), 0, &mine).await?;
            table.clear();
        }
        return Ok(());
    }
    let ReduceSteps { children, parent } = reduce_tree(r, p, root);
    for (round, child) in children {
        let tag = tags::ROUND.at(round);
        let (_, pieces) = recv_batch_expecting(&cx.ep, cx.pool, child, tag, whole_piece).await?;
        absorb(table, cx.pool, pieces)?;
    }
    if let Some((round, parent)) = parent {
        let tag = tags::ROUND.at(round);
        send_batch(&cx.ep, parent, tag, 0, &table_pieces(table)).await?;
        table.clear();
    }
    Ok(())
}

/// Reduce along `t` (whole tables): a worker combines its children's tables as they arrive, in
/// the tree's order, then sends the result to its parent.
async fn reduce_over(cx: &Ctx<'_>, table: &mut Table, t: &Tree) -> Result<()> {
    let r = cx.rank();
    let tag = tags::MAIN.tag();
    for &c in &t.children[r] {
        let (_, pieces) = recv_batch_expecting(&cx.ep, cx.pool, c, tag, whole_piece).await?;
        absorb(table, cx.pool, pieces)?;
    }
    if let Some(parent) = t.parent[r] {
        send_batch(&cx.ep, parent, tag, 0, &table_pieces(table)).await?;
        table.clear();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted::{self, refused, Piece};
    use crate::data::{Array, Combiner, DType};
    use crate::wire::Op;

    /// The root of a scatter-gather reduce takes from each owner exactly its segments.
    #[test]
    fn the_reduce_root_takes_only_the_owners_segments() {
        let reduce = |pieces: &[Piece]| {
            // Rank 1's part of the reduce-scatter (rank 0's segment), then what it sends root 0.
            let ring: &[Piece] = &[(0, 32768, 0, 16384)];
            let batches = [
                (tags::RING_REDUCE.at(0), ring),
                (tags::TO_ROOT.tag(), pieces),
            ];
            crafted::run_batches(Op::Reduce, 2, &batches, async |cx| {
                let mut t = Table::new(Combiner::Sum);
                t.add(0, Array::zeros(cx.pool, DType::F64, 4096)).unwrap();
                reduce(cx, &mut t, 0, ReduceAlgorithm::ScatterGather)
                    .await
                    .map(|_| t)
            })
        };
        let t = reduce(&[(0, 32768, 16384, 16384)]).unwrap();
        let ones = f64::from_bits(0x0101_0101_0101_0101);
        assert!(t
            .get(0)
            .unwrap()
            .as_slice::<f64>()
            .unwrap()
            .iter()
            .all(|&x| x == ones));
        refused(
            reduce(&[(0, 32768, 0, 16384)]),
            "reduce",
            "that segment is owned by rank 0; this step takes rank 1's",
        );
    }
}
