//! Scatter: each of the root's partitions goes to its owner; every worker's table becomes
//! exactly the partitions it owns.

use super::algorithm::ScatterAlgorithm;
use super::assemble::absorb;
use super::choose;
use super::ctx::{check_root, owners, Ctx, IdMap};
use super::framing::{
    finish_batch, parse_head, recv_batch_expecting, send_batch, whole_piece, In, Out,
};
use super::join::{boxed, join_all};
use super::relay::{self, cut_share, RelayPlan};
use super::shapes;
use super::tags;
use super::trees::{binary_children, binary_place, star, Tree};
use crate::data::{Partitioner, Table};
use crate::error::{Error, Result};
use crate::wire::PieceMeta;

/// Scatter from `root`: each of the root's partitions goes to its owner under `part`; every
/// worker's table becomes exactly the partitions it owns (the root keeps its own share).
/// Direct: (p−1)/p · nβ at the root's link, one worker after the other (`scatter_rooted`;
/// `auto` without a network model takes the binary tree for small tables). Tree and parallel:
/// a worker sends each child the partitions of the child's subtree, to all children at once.
pub async fn scatter(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    part: &Partitioner,
    algo: ScatterAlgorithm,
) -> Result<()> {
    check_root(cx, root, "scatter root")?;
    let p = cx.size();
    match algo.resolve(cx.net.as_deref(), root) {
        ScatterAlgorithm::Tree => {
            let t = shapes::model_distance_tree(cx, root);
            scatter_tree(cx, table, root, part, &t).await
        }
        ScatterAlgorithm::Parallel => scatter_tree(cx, table, root, part, &star(p, root)).await,
        ScatterAlgorithm::Relay => {
            let plan = relay::plan_in(cx, root);
            scatter_relay(cx, table, root, part, &plan).await
        }
        // Auto without a model: the root picks the rooted algorithm by its table's size.
        ScatterAlgorithm::Auto => scatter_rooted(cx, table, root, part, None).await,
        // Direct, binomial, binary, delegate.
        rooted => scatter_rooted(cx, table, root, part, Some(rooted)).await,
    }
}

/// The scatters over the ranks in order from the root: `shape` fixed, or `None` (the automatic
/// choice without a network model) for the root to pick by its table's size
/// ([`choose::scatter`]). The root announces the shape in every frame's `aux`
/// ([`ScatterAlgorithm::announced`]):
///
/// * direct (0): the root sends each worker its partitions, p−1 messages in a row:
///   (p−1)α + (p−1)/p · nβ at the root's link;
/// * binomial (1): with v = (r − root) mod p, a worker holds the partitions of the owners
///   v..v+s (s the lowest set bit of v, or p's next power of two at the root) and hands the
///   upper half of what it holds to v + s/2, then the upper half of the rest to v + s/4, and
///   so on: ⌈log2 p⌉ levels, (p−1)/p · nβ at the root's link, and every level but the root's
///   last child's forwards less than the root sent after it, so large tables end near the bound
///   (1.25× the direct scatter measured at 16 MiB, p = 8: each level stores and forwards);
/// * binary (2): a worker holds the owners v..end (its subtree in the `binary_tree` over the
///   ranks from the root, [`binary_place`]) and splits those after its own in two halves,
///   sending the larger to its first owner and then the other to its first: ⌊log2 p⌋ levels
///   and at most two messages from any worker (the root's two packets a call, against
///   ⌈log2 p⌉, are what back-to-back small scatters pace at). When the root's link is the
///   bound its second child forwards a quarter of the table after the root is done, which the
///   binomial tree avoids; measured up to 64 KiB the binary tree was never the slower;
/// * delegate (3): the root sends all but its own share to relative rank 1, which heads the
///   binary tree over the ranks 1..p (`delegate_tree`): one message from the root, so a small
///   call costs the root's link one packet's headers (1 + ⌊log2 (p−1)⌋ levels).
///
/// A receiver waits for the first frame from the root or one of its possible parents and
/// follows the announced shape; a frame from the wrong one, or a partition that is not whole or
/// not owned in the receiver's subtree, is a protocol error naming the sender.
async fn scatter_rooted(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    part: &Partitioner,
    shape: Option<ScatterAlgorithm>,
) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let v = (r + p - root) % p;
    let tag = tags::MAIN.tag();
    let (shape, end) = if v == 0 {
        let shape = shape.unwrap_or_else(|| choose::scatter(table.bytes(), p));
        (shape, p)
    } else {
        table.clear();
        let shapes = ScatterAlgorithm::ROOTED;
        let mut from: Vec<usize> = Vec::with_capacity(shapes.len());
        for s in shapes {
            let q = (shape_place(s, v, p).0 + root) % p;
            if !from.contains(&q) {
                from.push(q);
            }
        }
        let f = cx.ep.recv_frame_from_any(&from, &[root], tag).await?;
        let Some(shape) = ScatterAlgorithm::from_announced(f.hdr.aux) else {
            return Err(Error::Protocol(format!(
                "{}: rank {} announced scatter algorithm {}",
                cx.ep.ctx, f.hdr.src, f.hdr.aux
            )));
        };
        let (parent, end) = shape_place(shape, v, p);
        let want = (parent + root) % p;
        if f.hdr.src as usize != want {
            return Err(Error::Protocol(format!(
                "{}: rank {} sent this worker's scatter share, but it comes from rank {want}",
                cx.ep.ctx, f.hdr.src
            )));
        }
        // Whole partitions owned in this worker's subtree (itself alone when a leaf).
        let mine = |m: &PieceMeta| {
            whole_piece(m)?;
            match part.owner(m.pid, p) {
                Ok(w) if (v..end).contains(&((w + p - root) % p)) => Ok(()),
                Ok(w) if end == v + 1 => Err(format!("partition {} belongs to rank {w}", m.pid)),
                Ok(w) => Err(format!(
                    "partition {} belongs to rank {w}, outside this worker's subtree",
                    m.pid
                )),
                Err(e) => Err(e.to_string()),
            }
        };
        let (_, pieces) = finish_batch(&cx.ep, cx.pool, parse_head(&cx.ep, f)?, mine).await?;
        absorb(table, cx.pool, pieces)?;
        (shape, end)
    };
    let mut owner = IdMap::with_capacity_and_hasher(table.len(), Default::default());
    for (id, _) in table.iter() {
        owner.insert(id, (part.owner(id, p)? + p - root) % p);
    }
    let share = |sub: std::ops::Range<usize>| -> Vec<Out<'_>> {
        table
            .iter()
            .filter(|(id, _)| sub.contains(&owner[id]))
            .map(|(id, a)| Out::whole(id, a))
            .collect()
    };
    let announce = shape.announced().expect("a rooted scatter");
    for (child, child_end) in shape_children(shape, v, end, p) {
        let pieces = share(child..child_end);
        send_batch(&cx.ep, (child + root) % p, tag, announce, &pieces).await?;
    }
    table.retain(|id| owner[&id] == v);
    Ok(())
}

/// Relative rank `v` (> 0) in a rooted scatter of `shape` over p ranks: its parent and the end
/// of its subtree, the owners `v..end`.
fn shape_place(shape: ScatterAlgorithm, v: usize, p: usize) -> (usize, usize) {
    match shape {
        ScatterAlgorithm::Direct => (0, v + 1),
        ScatterAlgorithm::Binomial => (v & (v - 1), (v + (v & v.wrapping_neg())).min(p)),
        ScatterAlgorithm::Binary => {
            let (parent, end) = binary_place(0, v, p);
            (parent.expect("a non-root has a parent"), end)
        }
        ScatterAlgorithm::Delegate if v == 1 => (0, p),
        ScatterAlgorithm::Delegate => {
            let (parent, end) = binary_place(1, v, p);
            (parent.expect("a non-root has a parent"), end)
        }
        other => unreachable!("{other:?} is not a rooted scatter"),
    }
}

/// The children of relative rank `v`, whose subtree ends at `end`, in a rooted scatter of
/// `shape` over p ranks, in sending order, each with its own subtree's end.
fn shape_children(shape: ScatterAlgorithm, v: usize, end: usize, p: usize) -> Vec<(usize, usize)> {
    match shape {
        ScatterAlgorithm::Direct if v == 0 => (1..p).map(|d| (d, d + 1)).collect(),
        ScatterAlgorithm::Direct => Vec::new(),
        ScatterAlgorithm::Binomial => {
            let span = if v == 0 {
                p.next_power_of_two()
            } else {
                v & v.wrapping_neg()
            };
            std::iter::successors(Some(span >> 1), |m| Some(m >> 1))
                .take_while(|&m| m > 0)
                .filter(|&m| v + m < p)
                .map(|m| (v + m, (v + 2 * m).min(end)))
                .collect()
        }
        ScatterAlgorithm::Binary => binary_children(v, end).collect(),
        ScatterAlgorithm::Delegate if v == 0 => (p > 1).then_some((1, p)).into_iter().collect(),
        ScatterAlgorithm::Delegate => binary_children(v, end).collect(),
        other => unreachable!("{other:?} is not a rooted scatter"),
    }
}

/// Scatter along `t`: the root's partitions travel down to their owners' subtrees.
async fn scatter_tree(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    part: &Partitioner,
    t: &Tree,
) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let tag = tags::MAIN.tag();
    // The subtree (as a rank set) below every child of this worker.
    let below: Vec<(usize, Vec<bool>)> = t.children[r]
        .iter()
        .map(|&c| (c, subtree_set(t, c, p)))
        .collect();
    if r != root {
        table.clear();
        let mine = subtree_set(t, r, p);
        let whole = vec![None; p];
        let ours = owned_inside(part, p, &mine, &whole);
        let parent = t.parent[r].expect("a non-root has a parent");
        let (_, pieces) = recv_batch_expecting(&cx.ep, cx.pool, parent, tag, ours).await?;
        absorb(table, cx.pool, pieces)?;
    }
    let owners = owners(table, part, p)?;
    {
        let sends = below
            .iter()
            .map(|(c, set)| {
                let pieces: Vec<Out<'_>> = table
                    .iter()
                    .filter(|(id, _)| set[owners[id]])
                    .map(|(id, a)| Out::whole(id, a))
                    .collect();
                let c = *c;
                boxed(async move { send_batch(&cx.ep, c, tag, 0, &pieces).await })
            })
            .collect();
        join_all(sends).await?;
    }
    table.retain(|id| owners[&id] == r);
    Ok(())
}

/// Scatter over a relay plan, the relay gather reversed: to each child c the root sends one
/// batch per member x of c's subtree, the deeper members' first, then the second parts of c's
/// split children, c's own last, each marked with x in `aux`; the second part of a worker split
/// straight from the root goes to it directly. A worker keeps the batches marked with itself
/// (two if it is split) and passes every other one on, as it comes, to the child whose subtree
/// holds x, or to x if x is its split child. A batch whose mark is neither, or holding a
/// partition its mark does not own (or a part of one, unless the mark is split), is a protocol
/// error naming the sender.
async fn scatter_relay(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    part: &Partitioner,
    plan: &RelayPlan,
) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let t = &plan.tree;
    let tag = tags::MAIN.tag();
    // Where each rank's batches go from here (None: not below this worker).
    let mut via: Vec<Option<usize>> = vec![None; p];
    for &c in &t.children[r] {
        for x in t.subtree(c) {
            via[x] = Some(c);
        }
    }
    if r == root {
        let owners = owners(table, part, p)?;
        {
            // Each rank's share, in one pass over the table; then the part of it that goes by
            // the tree, and the part that goes by its second route.
            let mut shares: Vec<Vec<Out<'_>>> = vec![Vec::new(); p];
            for (id, a) in table.iter() {
                shares[owners[&id]].push(Out::whole(id, a));
            }
            let parts: Vec<(Vec<Out<'_>>, Vec<Out<'_>>)> = shares
                .into_iter()
                .zip(&plan.split)
                .map(|(share, split)| match split {
                    Some((_, e)) => cut_share(&share, *e),
                    None => (share, Vec::new()),
                })
                .collect();
            let parts = &parts;
            let sends = t.children[r]
                .iter()
                .map(|&c| {
                    let mut order = t.subtree(c);
                    order.reverse();
                    boxed(async move {
                        for x in order.iter().copied().filter(|&x| x != c) {
                            send_batch(&cx.ep, c, tag, x as u32, &parts[x].0).await?;
                        }
                        for w in plan.split_children(c) {
                            send_batch(&cx.ep, c, tag, w as u32, &parts[w].1).await?;
                        }
                        send_batch(&cx.ep, c, tag, c as u32, &parts[c].0).await
                    })
                })
                .chain(plan.split_children(r).into_iter().map(|w| {
                    boxed(async move { send_batch(&cx.ep, w, tag, w as u32, &parts[w].1).await })
                }))
                .collect();
            join_all(sends).await?;
        }
        table.retain(|id| owners[&id] == r);
        return Ok(());
    }
    table.clear();
    let parent = t.parent[r].expect("a non-root has a parent");
    let mut inside = subtree_set(t, r, p);
    for w in plan.split_children(r) {
        inside[w] = true;
    }
    // Batches from the parent, then the second part of this worker's own share.
    let mut sources = vec![(parent, plan.batches(r))];
    if let Some((j, _)) = plan.split[r] {
        sources.push((j, 1));
    }
    let mut mine = Vec::new();
    for (src, k) in sources {
        for _ in 0..k {
            let ours = owned_inside(part, p, &inside, &plan.split);
            let (hdr, pieces) = recv_batch_expecting(&cx.ep, cx.pool, src, tag, ours).await?;
            let x = hdr.aux as usize;
            let bad = |why: String| {
                Err(Error::Protocol(format!(
                    "{}: rank {src} sent a scatter batch for rank {x}: {why}",
                    cx.ep.ctx
                )))
            };
            if x >= p || !inside[x] || (src != parent && x != r) {
                return bad("not one this worker takes or passes on".into());
            }
            for i in &pieces {
                if part.owner(i.meta.pid, p)? != x {
                    return bad(format!(
                        "it holds partition {}, not that rank's",
                        i.meta.pid
                    ));
                }
            }
            if x == r {
                mine.extend(pieces);
                continue;
            }
            let next = via[x].unwrap_or(x);
            let outs: Vec<Out<'_>> = pieces.iter().map(In::out).collect();
            send_batch(&cx.ep, next, tag, x as u32, &outs).await?;
        }
    }
    absorb(table, cx.pool, mine)
}

/// Which of the `p` ranks are in `r`'s subtree of `t`.
fn subtree_set(t: &Tree, r: usize, p: usize) -> Vec<bool> {
    let mut set = vec![false; p];
    for x in t.subtree(r) {
        set[x] = true;
    }
    set
}

/// A scatter's receive check: partitions owned by a rank in `inside` (a subtree, and split
/// children), whole unless their owner's share is split (`split`).
fn owned_inside<'a>(
    part: &'a Partitioner,
    p: usize,
    inside: &'a [bool],
    split: &'a [Option<(usize, u32)>],
) -> impl FnMut(&PieceMeta) -> std::result::Result<(), String> + Send + 'a {
    move |m| match part.owner(m.pid, p) {
        Ok(w) if inside[w] => match split[w] {
            Some(_) => Ok(()),
            None => whole_piece(m),
        },
        Ok(w) => Err(format!(
            "partition {} belongs to rank {w}, outside this worker's subtree",
            m.pid
        )),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted::{self, refused, Piece};
    use crate::collective::trees::{binary_tree, binomial_tree, delegate_tree};
    use crate::data::Combiner;
    use crate::wire::Op;

    #[test]
    fn scatter_takes_whole_partitions_of_its_own() {
        // The direct scatter (rank 0 takes rank 1's share), and the relay scatter with rank 0
        // under root 1 (it keeps the batch marked with itself).
        let mut relay = Tree::empty(2);
        relay.parent[0] = Some(1);
        relay.children[1].push(0);
        for (algo, why) in [
            (ScatterAlgorithm::Auto, "partition 3 belongs to rank 1"),
            (
                ScatterAlgorithm::Relay,
                "partition 3 belongs to rank 1, outside this worker's subtree",
            ),
        ] {
            let scatter = |pieces: &[Piece]| {
                crafted::run(
                    Op::Scatter,
                    algo.code(),
                    tags::MAIN.tag(),
                    pieces,
                    async |cx| {
                        let mut t = Table::new(Combiner::Sum);
                        let part = &Partitioner::Modulo;
                        match algo {
                            ScatterAlgorithm::Relay => {
                                let plan = RelayPlan::of_tree(relay.clone());
                                scatter_relay(cx, &mut t, 1, part, &plan).await
                            }
                            _ => scatter(cx, &mut t, 1, part, algo).await,
                        }
                        .map(|()| t)
                    },
                )
            };
            assert_eq!(scatter(&[(4, 64, 0, 64)]).unwrap().ids(), vec![4]);
            refused(scatter(&[(3, 64, 0, 64)]), "scatter", why);
            if algo == ScatterAlgorithm::Relay {
                // A part of a partition, for a rank whose share the plan does not split.
                refused(
                    scatter(&[(4, 64, 0, 32)]),
                    "scatter",
                    "this step exchanges whole partitions only",
                );
            }
        }
    }
    /// Every shape of the rooted scatter reaches every rank exactly once from the root, each
    /// child's subtree is the stretch its parent hands it, and a receiver's own view of its
    /// place (parent and subtree) is the one its parent sends by; the binomial shape is the
    /// binomial tree, the binary shape the binary tree.
    #[test]
    fn the_scatter_shapes_cover_every_rank_once() {
        for p in 1..=40usize {
            let binomial = binomial_tree(p, 0);
            let binary = binary_tree(&(0..p).collect::<Vec<_>>());
            let delegate = delegate_tree(&(0..p).collect::<Vec<_>>());
            for shape in ScatterAlgorithm::ROOTED {
                let mut seen = vec![0usize; p];
                seen[0] = 1;
                let mut todo = vec![(0usize, p)];
                while let Some((v, end)) = todo.pop() {
                    let kids = shape_children(shape, v, end, p);
                    let mut covered = vec![v];
                    for &(c, e) in &kids {
                        assert!(
                            v < c && c < e && e <= end,
                            "{shape:?} p={p} v={v}: {kids:?}"
                        );
                        assert_eq!(shape_place(shape, c, p), (v, e), "{shape:?} p={p} c={c}");
                        seen[c] += 1;
                        covered.extend(c..e);
                        todo.push((c, e));
                    }
                    covered.sort();
                    assert_eq!(
                        covered,
                        (v..end).collect::<Vec<_>>(),
                        "{shape:?} p={p} v={v}"
                    );
                    let tree = match shape {
                        ScatterAlgorithm::Direct => continue,
                        ScatterAlgorithm::Binomial => &binomial,
                        ScatterAlgorithm::Binary => &binary,
                        ScatterAlgorithm::Delegate => &delegate,
                        other => unreachable!("{other:?} is not rooted"),
                    };
                    let mut got: Vec<usize> = kids.iter().map(|k| k.0).collect();
                    let mut want = tree.children[v].clone();
                    got.sort();
                    want.sort();
                    assert_eq!(got, want, "{shape:?} p={p} v={v}");
                }
                assert!(seen.iter().all(|&n| n == 1), "{shape:?} p={p}: {seen:?}");
            }
        }
    }
}
