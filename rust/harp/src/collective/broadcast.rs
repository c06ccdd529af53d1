//! Broadcast: after the call every worker's table holds exactly the root's partitions (the
//! receivers' previous partitions are dropped; their combiner is kept).

use super::algorithm::BroadcastAlgorithm;
use super::assemble::Assembler;
use super::choose;
use super::ctx::{check_root, Ctx};
use super::framing::{
    parse_head, recv_head, recv_pieces, send_batch, send_batch_inline, table_pieces, Out,
};
use super::segment::{self, chunks};
use super::shapes::tree;
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
/// net-chain and net-hierarchy; each parent once).
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
/// one-by-one = (p−1)(nβ + α).
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
    let (head, children) = if auto {
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
        (parse_head(&cx.ep, f)?, children)
    } else {
        (
            recv_head(&cx.ep, parent.expect("non-root has a parent"), tag).await?,
            children,
        )
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Auto waits for exactly the parents the two trees it can pick give.
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
    }
}
