//! Gather: the root's table becomes the union of all tables.

use super::algorithm::GatherAlgorithm;
use super::assemble::{absorb, Assembler};
use super::ctx::{check_root, Ctx, IdMap};
use super::framing::{recv_batch_expecting, send_batch, table_pieces, whole_piece, In, Out};
use super::join::{boxed, join_all};
use super::relay::{self, cut_share, RelayPlan};
use super::shapes;
use super::tags;
use super::trees::{binary_tree, binomial_tree, delegate_tree, from_root};
use crate::data::Table;
use crate::error::{Error, Result};
use crate::wire::PieceMeta;

/// Gather to `root`: the root's table becomes the union of all tables (equal ids combined);
/// the others are unchanged. Direct: every worker sends straight to the root, (p−1)/p · nβ at
/// the root's link (n = all data), p−1 messages. Tree: a worker receives its children's
/// subtrees (all at once), then sends them with its own table to its parent; the cost is
/// `costs::predict_gather`.
pub async fn gather(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    algo: GatherAlgorithm,
) -> Result<()> {
    check_root(cx, root, "gather root")?;
    let algo = algo.resolve(cx.net.as_deref(), root);
    if algo == GatherAlgorithm::Relay {
        return gather_relay(cx, table, root, &relay::plan_in(cx, root)).await;
    }
    if matches!(
        algo,
        GatherAlgorithm::Tree
            | GatherAlgorithm::Binomial
            | GatherAlgorithm::Binary
            | GatherAlgorithm::Delegate
    ) {
        let t = match algo {
            GatherAlgorithm::Tree => shapes::model_distance_tree(cx, root),
            GatherAlgorithm::Binary => binary_tree(&from_root(cx.size(), root)),
            GatherAlgorithm::Delegate => delegate_tree(&from_root(cx.size(), root)),
            _ => binomial_tree(cx.size(), root),
        };
        let r = cx.rank();
        let tag = tags::MAIN.tag();
        let recvs = t.children[r]
            .iter()
            .map(|&c| boxed(recv_batch_expecting(&cx.ep, cx.pool, c, tag, whole_piece)))
            .collect();
        let got = join_all(recvs).await?;
        if r == root {
            for (_, pieces) in got {
                absorb(table, cx.pool, pieces)?;
            }
            return Ok(());
        }
        // A batch holds each partition once: the subtree's tables are combined into a copy of
        // this worker's (which stays unchanged).
        let mut below = table.duplicate(cx.pool);
        for (_, pieces) in got {
            absorb(&mut below, cx.pool, pieces)?;
        }
        let parent = t.parent[r].expect("a non-root has a parent");
        return send_batch(&cx.ep, parent, tag, 0, &table_pieces(&below)).await;
    }
    if cx.rank() != root {
        return send_batch(&cx.ep, root, tags::MAIN.tag(), 0, &table_pieces(table)).await;
    }
    let mut got = Vec::new();
    for src in (0..cx.size()).filter(|&s| s != root) {
        let tag = tags::MAIN.tag();
        got.push(
            recv_batch_expecting(&cx.ep, cx.pool, src, tag, whole_piece)
                .await?
                .1,
        );
    }
    for pieces in got {
        absorb(table, cx.pool, pieces)?;
    }
    Ok(())
}

/// A relay batch's pieces: whole partitions, or (`split`) also ranges of them.
fn relay_piece(split: bool) -> impl Fn(&PieceMeta) -> std::result::Result<(), String> + Send {
    move |m| if split { Ok(()) } else { whole_piece(m) }
}

/// Gather over a relay plan: every worker sends its own table to its parent at once (one
/// batch; a split worker the first part to its parent and the rest to its second receiver, one
/// batch each), and then, one batch each, what it took from its children and split children
/// (`RelayPlan::batches` from each child, one from each split child, from all at once); every
/// batch is marked with the worker whose table it holds (`aux`). The root assembles each
/// worker's batches and combines them into its table; the others' tables stay unchanged.
async fn gather_relay(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    plan: &RelayPlan,
) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let t = &plan.tree;
    let tag = tags::MAIN.tag();
    let split = plan.split.iter().any(Option::is_some);
    let ins: Vec<(usize, usize)> = t.children[r]
        .iter()
        .map(|&c| (c, plan.batches(c)))
        .chain(plan.split_children(r).into_iter().map(|w| (w, 1)))
        .collect();
    let recvs = ins
        .into_iter()
        .map(|(c, k)| {
            boxed(async move {
                let mut batches = Vec::with_capacity(k);
                for _ in 0..k {
                    let (hdr, pieces) =
                        recv_batch_expecting(&cx.ep, cx.pool, c, tag, relay_piece(split)).await?;
                    if hdr.aux as usize >= p {
                        return Err(Error::Protocol(format!(
                            "{}: rank {c} sent a gather batch of rank {} of {p}",
                            cx.ep.ctx, hdr.aux
                        )));
                    }
                    batches.push((hdr.aux as usize, pieces));
                }
                Ok(batches)
            })
        })
        .collect();
    if r == root {
        // One assembler per worker: the parts of a split share come by two routes.
        let mut asm: IdMap<Assembler> = Default::default();
        for (x, pieces) in join_all(recvs).await?.into_iter().flatten() {
            let a = asm.entry(x as u32).or_default();
            for i in pieces {
                a.add(table, cx.pool, i)?;
            }
        }
        for (_, a) in asm {
            a.finish(table)?;
        }
        return Ok(());
    }
    let parent = t.parent[r].expect("a non-root has a parent");
    let own = table_pieces(table);
    let me = r as u32;
    let send_own = async {
        match plan.split[r] {
            Some((j, e)) => {
                let (first, rest) = cut_share(&own, e);
                let (a, b) = tokio::join!(
                    send_batch(&cx.ep, parent, tag, me, &first),
                    send_batch(&cx.ep, j, tag, me, &rest)
                );
                a.and(b)
            }
            None => send_batch(&cx.ep, parent, tag, me, &own).await,
        }
    };
    let (sent, got) = tokio::join!(send_own, join_all(recvs));
    sent?;
    for (x, pieces) in got?.into_iter().flatten() {
        let outs: Vec<Out<'_>> = pieces.iter().map(In::out).collect();
        send_batch(&cx.ep, parent, tag, x as u32, &outs).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted::{self, refused, Piece};
    use crate::data::Combiner;
    use crate::wire::Op;

    #[test]
    fn gather_takes_whole_partitions_only() {
        let gather = |pieces: &[Piece]| {
            crafted::run(Op::Gather, 0, tags::MAIN.tag(), pieces, async |cx| {
                let mut t = Table::new(Combiner::Sum);
                gather(cx, &mut t, 0, GatherAlgorithm::Auto)
                    .await
                    .map(|()| t)
            })
        };
        assert_eq!(gather(&[(3, 64, 0, 64)]).unwrap().bytes(), 64);
        refused(
            gather(&[(3, 64, 0, 32)]),
            "gather",
            "this step exchanges whole partitions only",
        );
    }
}
