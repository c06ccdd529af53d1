//! Rooted operations: reduce, gather, scatter.

use super::{absorb, recv_batch, send_batch, table_pieces, tags, Ctx, Out};
use crate::data::{Partitioner, Table};
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceAlgorithm {
    /// Binomial tree toward the root.
    Binomial,
    /// Segment reduce-scatter (ring), then every owner sends its segments to the root.
    ScatterGather,
}

impl ReduceAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            ReduceAlgorithm::Binomial => 1,
            ReduceAlgorithm::ScatterGather => 2,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "binomial" | "mst" => ReduceAlgorithm::Binomial,
            "scatter-gather" => ReduceAlgorithm::ScatterGather,
            _ => {
                return Err(Error::config(format!(
                    "unknown reduce algorithm '{s}' (binomial, scatter-gather)"
                )))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            ReduceAlgorithm::Binomial => "binomial",
            ReduceAlgorithm::ScatterGather => "scatter-gather",
        }
    }
}

fn check_root(cx: &Ctx<'_>, root: usize) -> Result<()> {
    if root >= cx.size() {
        return Err(Error::config(format!(
            "root {root} is not a worker (there are {})",
            cx.size()
        )));
    }
    Ok(())
}

/// Reduce to `root`: the root's table becomes the combination of every worker's table; the
/// other workers' tables are left empty (their buffers go back to the pool).
///
/// Binomial: ⌈log2 p⌉ (α + nβ). Scatter-gather: 2(p−1)/p · nβ + 2(p−1)α (better for big n).
pub async fn reduce(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    algo: ReduceAlgorithm,
) -> Result<()> {
    check_root(cx, root)?;
    let (r, p) = (cx.rank(), cx.size());
    if algo == ReduceAlgorithm::ScatterGather {
        let seg = super::segment::Segmenter::new(cx, table);
        super::allreduce::ring_reduce_scatter(cx, table, &seg).await?;
        // Owners send their reduced segments to the root.
        if r == root {
            let mut got = Vec::new();
            for src in (0..p).filter(|&s| s != root) {
                got.push(
                    recv_batch(&cx.ep, cx.pool, src, tags::TO_ROOT.tag())
                        .await?
                        .1,
                );
            }
            for pieces in got {
                super::assemble::write_pieces(table, cx.pool, pieces)?;
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
        let (_, pieces) = recv_batch(&cx.ep, cx.pool, child, tags::ROUND.at(round)).await?;
        absorb(table, cx.pool, pieces)?;
    }
    if let Some((round, parent)) = parent {
        let tag = tags::ROUND.at(round);
        send_batch(&cx.ep, parent, tag, 0, &table_pieces(table)).await?;
        table.clear();
    }
    Ok(())
}

/// One worker's part of the binomial reduce tree, as (round, rank) pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReduceSteps {
    /// The children it receives from, in order.
    pub children: Vec<(usize, usize)>,
    /// The parent it then sends to (none for the root).
    pub parent: Option<(usize, usize)>,
}

/// The binomial reduce tree from `r`'s point of view. Relative to the root, v receives from
/// v + 2^k while 2^k is below v's lowest set bit, and sends to v − lowbit(v).
pub fn reduce_tree(r: usize, p: usize, root: usize) -> ReduceSteps {
    let v = (r + p - root) % p;
    let mut children = Vec::new();
    let (mut mask, mut round) = (1usize, 0usize);
    while mask < p {
        if v & mask != 0 {
            let parent = Some((round, (v - mask + root) % p));
            return ReduceSteps { children, parent };
        }
        if v + mask < p {
            children.push((round, (v + mask + root) % p));
        }
        mask <<= 1;
        round += 1;
    }
    ReduceSteps {
        children,
        parent: None,
    }
}

/// Gather to `root`: the root's table becomes the union of all tables (equal ids combined);
/// the others are unchanged. Every worker sends straight to the root: (p−1)/p · nβ at the
/// root's link (n = all data), p−1 messages.
pub async fn gather(cx: &Ctx<'_>, table: &mut Table, root: usize) -> Result<()> {
    check_root(cx, root)?;
    if cx.rank() != root {
        return send_batch(&cx.ep, root, tags::MAIN.tag(), 0, &table_pieces(table)).await;
    }
    let mut got = Vec::new();
    for src in (0..cx.size()).filter(|&s| s != root) {
        got.push(recv_batch(&cx.ep, cx.pool, src, tags::MAIN.tag()).await?.1);
    }
    for pieces in got {
        absorb(table, cx.pool, pieces)?;
    }
    Ok(())
}

/// Scatter from `root`: each of the root's partitions goes to its owner under `part`; every
/// worker's table becomes exactly the partitions it owns (the root keeps its own share).
/// (p−1)/p · nβ at the root's link.
pub async fn scatter(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    part: &Partitioner,
) -> Result<()> {
    check_root(cx, root)?;
    let (r, p) = (cx.rank(), cx.size());
    if r != root {
        table.clear();
        let (_, pieces) = recv_batch(&cx.ep, cx.pool, root, tags::MAIN.tag()).await?;
        return absorb(table, cx.pool, pieces);
    }
    let mut owners = std::collections::HashMap::with_capacity(table.len());
    for (id, _) in table.iter() {
        owners.insert(id, part.owner(id, p)?);
    }
    for dst in (0..p).filter(|&d| d != root) {
        let pieces: Vec<Out<'_>> = table
            .iter()
            .filter(|(id, _)| owners[id] == dst)
            .map(|(id, a)| Out::whole(id, a))
            .collect();
        send_batch(&cx.ep, dst, tags::MAIN.tag(), 0, &pieces).await?;
    }
    table.retain(|id| owners[&id] == root);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank's table reaches the root exactly once, a child sends in the round its parent
    /// receives, and a worker sends only after all its children have sent.
    #[test]
    fn reduce_tree_reaches_the_root_once_from_every_rank() {
        for p in 1..=40 {
            for root in 0..p {
                let t: Vec<_> = (0..p).map(|r| reduce_tree(r, p, root)).collect();
                assert!(t[root].parent.is_none());
                for (r, ReduceSteps { children, parent }) in t.iter().enumerate() {
                    for &(round, c) in children {
                        assert_eq!(t[c].parent, Some((round, r)), "p={p} root={root}");
                    }
                    if let Some((round, _)) = parent {
                        assert!(children.iter().all(|&(k, _)| k < *round));
                    }
                }
                for r in 0..p {
                    let (mut at, mut hops) = (r, 0);
                    while let Some((_, up)) = t[at].parent {
                        at = up;
                        hops += 1;
                        assert!(hops < p, "p={p} root={root}: a cycle");
                    }
                    assert_eq!(at, root);
                }
                let depth = (p as f64).log2().ceil() as usize;
                assert_eq!(t[root].children.len(), depth, "p={p}: the root's rounds");
            }
        }
    }
}
