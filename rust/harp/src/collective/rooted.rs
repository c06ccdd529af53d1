//! Rooted operations: reduce, gather, scatter.

use super::assemble::Assembler;
use super::choose::{RelayPlan, ScatterShape};
use super::framing::In;
use super::framing::{finish_batch, parse_head, recv_batch_expecting, whole_piece};
use super::hierarchy::{self, Hierarchy, Tree};
use super::{absorb, boxed, choose, join_all, send_batch, table_pieces, tags, Ctx, Out};
use crate::data::{Partitioner, Table};
use crate::error::{Error, Result};
use crate::wire::PieceMeta;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceAlgorithm {
    /// Without a network model: binary (pipelined, so it needs no agreement on the size: one
    /// batch per child for small tables, a stream of chunks for large ones). With one: the
    /// workers first agree on the largest
    /// table (⌈log2 p⌉ small messages, [`agree_max`](super::barrier::agree_max)), then run the
    /// algorithm of least predicted cost for it ([`choose::reduce`](super::choose::reduce):
    /// trees only below `Config::allreduce_crossover`).
    Auto,
    /// Binomial tree toward the root.
    Binomial,
    /// Binary tree toward the root over the rack order ([`binary_tree`]), pipelined
    /// ([`reduce_pipelined`](super::pipeline::reduce_pipelined)): every worker receives at most
    /// two streams (the binomial root receives ⌈log2 p⌉ whole tables). Small tables: back-to-back
    /// reduces pace at two messages per call instead of ⌈log2 p⌉, and one call takes about one
    /// message longer than the binomial tree (depth ⌊log2 p⌋, two inputs per level); Open MPI's default for small
    /// messages (bench/history-netns.md, Part 0). Large tables stream in chunks through every
    /// level at once: about 2nβ (two children into one link) plus one chunk per level, against
    /// the binomial tree's ⌈log2 p⌉ nβ.
    Binary,
    /// Segment reduce-scatter (ring), then every owner sends its segments to the root.
    ScatterGather,
    /// CMPI Algorithm 3: along the network performance hierarchy, the sub-group leaders of each
    /// group reduce to its leader (binomial inside a group; the root leads at every level;
    /// [`hierarchy::leader_tree`]). Without a network model: binomial.
    NetHierarchy,
    /// Scatter-gather whose ring follows the cycle with the fastest slowest link of the
    /// network model ([`hierarchy::best_path`]). Without a model: rank order (scatter-gather).
    NetRing,
    /// Pipelined along the chain of the chain broadcast (rack order from the root), toward the
    /// root: every worker takes in one stream, so a large table takes about nβ plus one chunk
    /// per worker (p − 1 messages' latency for a small one).
    Chain,
    /// Pipelined along the chain of the net-chain broadcast (the order whose slowest link is
    /// fastest in the network model), toward the root. Without a model: `chain`.
    NetChain,
}

/// Gather and scatter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatherAlgorithm {
    /// Direct without a network model; with one, the one of least predicted cost
    /// ([`choose::gather`](super::choose::gather)).
    Auto,
    /// Every worker sends straight to the root (scatter: the root to every worker).
    Direct,
    /// Over the distance-ordered tree of CMPI Algorithm 4 ([`hierarchy::distance_tree`]); a
    /// worker forwards its subtree's partitions, sending to (or receiving from) its children at
    /// once. Without a network model: direct.
    Tree,
    /// Scatter: the root sends to every worker at once (direct sends one worker after the
    /// other). Gather: the same as direct (which receives from everyone at once already).
    Parallel,
    /// Over the binomial tree of the ranks from the root (⌈log2 p⌉ messages on the critical
    /// path, ⌈log2 p⌉ into the root instead of p − 1; the same bytes through the root's link).
    /// The automatic gather without a network model.
    Binomial,
    /// Over the [`binary_tree`] of the ranks from the root: the depth of the binomial tree
    /// when p is a power of two (⌊log2 p⌋), but at most two messages from (or into) any worker,
    /// the root included, against the binomial root's ⌈log2 p⌉: back-to-back small scatters
    /// pace at the root's link, and two packets a call cost less of it than three
    /// (bench/history-netns.md, Part 0, item q). For large tables the root's second child
    /// forwards its subtree's share after the root is done with it (a gather: before the root
    /// can take it), so they take longer than down the binomial tree (gather, 16 MiB, p = 8:
    /// 1.29× the bound against 1.00). The automatic scatter without a network model up to
    /// [`choose::SCATTER_TREE_MAX`] (but [`GatherAlgorithm::Delegate`] below).
    Binary,
    /// Network model: workers whose own link to the root is slow send through a relay with
    /// faster links, or part through one and part another way
    /// ([`choose::relay_plan`](super::choose::relay_plan)); a relay sends its own table at once
    /// and forwards each batch it takes after it (a gather), or receives its subtree's
    /// partitions and passes them on (a scatter). Gains where the pairs, not the
    /// hosts, are the limit (a model with host capacities). Without a model: direct.
    Relay,
    /// The root hands its whole table (a gather: takes the others' tables) to the next worker,
    /// which heads the [`binary_tree`] over the others ([`delegate_tree`]): one message from
    /// (or into) the root a call, so back-to-back small scatters spend one packet's headers at
    /// the root's link instead of two. The same depth as the binary tree when p is a power of
    /// two, one level more otherwise. The automatic scatter without a network model up to
    /// [`choose::SCATTER_DELEGATE_MAX`] when p is a power of two.
    Delegate,
}

impl GatherAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            GatherAlgorithm::Auto => 0,
            GatherAlgorithm::Direct => 1,
            GatherAlgorithm::Tree => 2,
            GatherAlgorithm::Parallel => 3,
            GatherAlgorithm::Binomial => 4,
            GatherAlgorithm::Relay => 5,
            GatherAlgorithm::Binary => 6,
            GatherAlgorithm::Delegate => 7,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => GatherAlgorithm::Auto,
            "direct" => GatherAlgorithm::Direct,
            "net-tree" => GatherAlgorithm::Tree,
            "parallel" => GatherAlgorithm::Parallel,
            "binomial" => GatherAlgorithm::Binomial,
            "binary" => GatherAlgorithm::Binary,
            "delegate" => GatherAlgorithm::Delegate,
            "net-relay" => GatherAlgorithm::Relay,
            _ => {
                return Err(Error::config(format!(
                    "unknown gather/scatter algorithm '{s}' (auto, direct, net-tree, parallel, \
                     binomial, binary, delegate, net-relay)"
                )))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            GatherAlgorithm::Auto => "auto",
            GatherAlgorithm::Direct => "direct",
            GatherAlgorithm::Tree => "net-tree",
            GatherAlgorithm::Parallel => "parallel",
            GatherAlgorithm::Binomial => "binomial",
            GatherAlgorithm::Binary => "binary",
            GatherAlgorithm::Delegate => "delegate",
            GatherAlgorithm::Relay => "net-relay",
        }
    }
    /// The concrete algorithm (Auto resolved with the model; trees need a model).
    pub fn resolve(self, net: Option<&crate::netmodel::NetModel>, root: usize) -> GatherAlgorithm {
        match (self, net) {
            (GatherAlgorithm::Auto, net) => super::choose::gather(net, root),
            (GatherAlgorithm::Tree | GatherAlgorithm::Relay, None) => GatherAlgorithm::Direct,
            (a, _) => a,
        }
    }

    /// [`GatherAlgorithm::resolve`] for a scatter: with a model, direct becomes parallel
    /// (the same cost in the model, less time measured: docs/benchmarks-netns.md); without
    /// one, auto is the direct scatter, which the root turns into a binomial one for small
    /// tables ([`scatter`]).
    pub fn resolve_scatter(
        self,
        net: Option<&crate::netmodel::NetModel>,
        root: usize,
    ) -> GatherAlgorithm {
        if self == GatherAlgorithm::Auto && net.is_none() {
            return GatherAlgorithm::Direct;
        }
        match self.resolve(net, root) {
            GatherAlgorithm::Direct if self == GatherAlgorithm::Auto && net.is_some() => {
                GatherAlgorithm::Parallel
            }
            a => a,
        }
    }
}

/// The binomial tree of `p` ranks from `root` (relative rank v sends to v − lowbit(v)).
pub fn binomial_tree(p: usize, root: usize) -> Tree {
    let mut t = Tree::empty(p);
    t.add_binomial(&from_root(p, root));
    t
}

/// The ranks in order from `root`: root, root + 1, … (mod p).
pub fn from_root(p: usize, root: usize) -> Vec<usize> {
    (0..p).map(|i| (root + i) % p).collect()
}

/// The binary tree over `order` (its first rank the root): a worker's subtree is a contiguous
/// stretch of `order`, the rest after it split in two halves (the larger second), each led by
/// its first rank. Depth ⌊log2 p⌋ as a heap-ordered binary tree, but over a rack-ordered list
/// ([`Topology::chain_order`](crate::topology::Topology::chain_order)) only about one link
/// per rack boundary crosses it: two racks of four share their uplink with one stream, not four.
pub fn binary_tree(order: &[usize]) -> Tree {
    let mut t = Tree::empty(order.len());
    if !order.is_empty() {
        link_binary(&mut t, order, 0, order.len());
    }
    t
}

/// Links the positions `v..end` of `order` below `v` as in [`binary_tree`], the smaller half
/// first.
fn link_binary(t: &mut Tree, order: &[usize], v: usize, end: usize) {
    for (c, e) in binary_children(v, end).rev() {
        t.parent[order[c]] = Some(order[v]);
        t.children[order[v]].push(order[c]);
        link_binary(t, order, c, e);
    }
}

/// Where relative rank `v` sits in the [`binary_tree`] over the ranks `top..p` (`top` its
/// root), found by walking down from `top` (⌊log2 (p − top)⌋ steps, nothing allocated): its
/// parent and the end of its subtree, which is the stretch `v..end`.
fn binary_place(top: usize, v: usize, p: usize) -> (Option<usize>, usize) {
    debug_assert!(top <= v && v < p);
    let (mut node, mut end, mut parent) = (top, p, None);
    while node != v {
        let (c, e) = binary_children(node, end)
            .find(|&(c, e)| (c..e).contains(&v))
            .expect("v lies in node's subtree");
        (parent, node, end) = (Some(node), c, e);
    }
    (parent, end)
}

/// The [`GatherAlgorithm::Delegate`] tree over `order` (its first rank the root): the root's
/// one child is the second rank, which heads the [`binary_tree`] over the rest.
pub fn delegate_tree(order: &[usize]) -> Tree {
    let mut t = Tree::empty(order.len());
    if order.len() > 1 {
        t.parent[order[1]] = Some(order[0]);
        t.children[order[0]].push(order[1]);
        link_binary(&mut t, order, 1, order.len());
    }
    t
}

/// The children of the [`binary_tree`] node `v` whose subtree ends at `end`, each with the end
/// of its own subtree: the owners after `v` split in two halves, the larger (second) half
/// first. The one place that rule is written: [`binary_tree`] and [`binary_place`] follow it.
fn binary_children(v: usize, end: usize) -> impl DoubleEndedIterator<Item = (usize, usize)> {
    let mid = v + 1 + (end - v - 1) / 2;
    [(mid, end), (v + 1, mid)]
        .into_iter()
        .filter(|(a, b)| a < b)
}

/// The distance-ordered tree of the context's model from `root`.
fn distance_tree(cx: &Ctx<'_>, root: usize) -> Tree {
    let net = cx
        .net
        .as_deref()
        .expect("trees are resolved only with a model");
    hierarchy::distance_tree(&Hierarchy::of(net), net, root)
}

impl ReduceAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            ReduceAlgorithm::Auto => 0,
            ReduceAlgorithm::Binomial => 1,
            ReduceAlgorithm::ScatterGather => 2,
            ReduceAlgorithm::NetHierarchy => 3,
            ReduceAlgorithm::NetRing => 4,
            ReduceAlgorithm::Binary => 5,
            ReduceAlgorithm::Chain => 6,
            ReduceAlgorithm::NetChain => 7,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => ReduceAlgorithm::Auto,
            "binomial" | "mst" => ReduceAlgorithm::Binomial,
            "binary" => ReduceAlgorithm::Binary,
            "scatter-gather" => ReduceAlgorithm::ScatterGather,
            "net-hierarchy" => ReduceAlgorithm::NetHierarchy,
            "net-ring" => ReduceAlgorithm::NetRing,
            "chain" => ReduceAlgorithm::Chain,
            "net-chain" => ReduceAlgorithm::NetChain,
            _ => {
                return Err(Error::config(format!(
                    "unknown reduce algorithm '{s}' (auto, binomial, binary, scatter-gather, \
                     net-hierarchy, net-ring, chain, net-chain)"
                )))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            ReduceAlgorithm::Auto => "auto",
            ReduceAlgorithm::Binomial => "binomial",
            ReduceAlgorithm::Binary => "binary",
            ReduceAlgorithm::ScatterGather => "scatter-gather",
            ReduceAlgorithm::NetHierarchy => "net-hierarchy",
            ReduceAlgorithm::NetRing => "net-ring",
            ReduceAlgorithm::Chain => "chain",
            ReduceAlgorithm::NetChain => "net-chain",
        }
    }
}

/// Fails unless `root` is a rank of the operation's scope: a worker of the job, or inside a
/// group a group rank (`what` names the operation's root, e.g. "broadcast root").
pub(crate) fn check_root(cx: &Ctx<'_>, root: usize, what: &str) -> Result<()> {
    if root >= cx.size() {
        let scope = match cx.ep.is_group() {
            true => format!("a group rank (the group has {} members)", cx.size()),
            false => format!("a worker (there are {})", cx.size()),
        };
        return Err(Error::config(format!("{what} {root} is not {scope}")));
    }
    Ok(())
}

/// Reduce to `root`: the root's table becomes the combination of every worker's table; the
/// other workers' tables are left empty (their buffers go back to the pool).
///
/// Binomial: ⌈log2 p⌉ (α + nβ). Binary (pipelined): about 2nβ + ⌊log2 p⌋(α + cβ) for chunks
/// of c bytes; chain and net-chain about nβ + (p−1)(α + cβ). Scatter-gather: 2(p−1)/p · nβ + 2(p−1)α (better for big n);
/// net-ring the same with β of the ring's slowest link; net-hierarchy as
/// [`choose::predict_tree`](super::choose::predict_tree) on its tree (Σ over levels of the
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
            let n = super::barrier::agree_max(cx, table.bytes(), tags::AGREE).await?;
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
    if let Some(t) = pipelined_tree(algo, cx.topo, cx.net.as_deref(), p, root) {
        return super::pipeline::reduce_pipelined(cx, table, &t, tags::MAIN.tag()).await;
    }
    if let (ReduceAlgorithm::NetHierarchy, Some(net)) = (algo, cx.net.as_deref()) {
        let t = hierarchy::leader_tree(&Hierarchy::of(net), net, root);
        return reduce_over(cx, table, &t).await;
    }
    if matches!(
        algo,
        ReduceAlgorithm::ScatterGather | ReduceAlgorithm::NetRing
    ) {
        let seg = super::segment::Segmenter::new(cx, table);
        let ring = match (algo, cx.net.as_deref()) {
            (ReduceAlgorithm::NetRing, Some(net)) => hierarchy::best_path(net, 0, true),
            _ => (0..p).collect(),
        };
        super::allreduce::ring_reduce_scatter_in(cx, table, &seg, &ring).await?;
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

/// The tree of a pipelined reduce algorithm (`binary`, `chain`, `net-chain`), else `None`.
pub fn pipelined_tree(
    algo: ReduceAlgorithm,
    topo: &crate::topology::Topology,
    net: Option<&crate::netmodel::NetModel>,
    p: usize,
    root: usize,
) -> Option<Tree> {
    use super::broadcast::{broadcast_tree, BroadcastAlgorithm};
    let chain = match algo {
        ReduceAlgorithm::Binary => return Some(binary_tree(&topo.chain_order(root))),
        ReduceAlgorithm::Chain => BroadcastAlgorithm::Chain,
        ReduceAlgorithm::NetChain => BroadcastAlgorithm::NetChain,
        _ => return None,
    };
    Some(broadcast_tree(chain, topo, net, p, root))
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
/// the others are unchanged. Direct: every worker sends straight to the root, (p−1)/p · nβ at
/// the root's link (n = all data), p−1 messages. Tree: a worker receives its children's
/// subtrees (all at once), then sends them with its own table to its parent; the cost is
/// [`choose::predict_gather`](super::choose::predict_gather).
pub async fn gather(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    algo: GatherAlgorithm,
) -> Result<()> {
    check_root(cx, root, "gather root")?;
    let algo = algo.resolve(cx.net.as_deref(), root);
    if algo == GatherAlgorithm::Relay {
        return gather_relay(cx, table, root, &relay_plan(cx, root)).await;
    }
    if matches!(
        algo,
        GatherAlgorithm::Tree
            | GatherAlgorithm::Binomial
            | GatherAlgorithm::Binary
            | GatherAlgorithm::Delegate
    ) {
        let t = match algo {
            GatherAlgorithm::Tree => distance_tree(cx, root),
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

/// The relay plan of the context's model from `root` (made once per model and root).
fn relay_plan(cx: &Ctx<'_>, root: usize) -> RelayPlan {
    let net = cx
        .net
        .as_deref()
        .expect("trees are resolved only with a model");
    (*super::choose::relay_plan_of(net, root)).clone()
}

/// `pieces` cut for a split share: the first (SPLIT_PARTS − e)/SPLIT_PARTS of their bytes and
/// the rest, a piece that straddles the cut split at a whole unit of its layout.
fn cut_share<'b>(pieces: &[Out<'b>], e: u32) -> (Vec<Out<'b>>, Vec<Out<'b>>) {
    let total: u64 = pieces.iter().map(|o| o.meta.len).sum();
    let parts = u128::from(choose::SPLIT_PARTS);
    let at = (u128::from(total) * (parts - u128::from(e)) / parts) as u64;
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    let mut done = 0u64;
    for o in pieces {
        let len = o.meta.len;
        let unit = o.meta.layout.unit().max(1);
        let k = (at.saturating_sub(done).min(len) / unit) * unit;
        done += len;
        if k == len {
            first.push(*o);
        } else if k == 0 {
            rest.push(*o);
        } else {
            let (a, b) = o.bytes.split_at(k as usize);
            let mut m = o.meta;
            m.len = k;
            first.push(Out { meta: m, bytes: a });
            m.offset += k;
            m.len = len - k;
            rest.push(Out { meta: m, bytes: b });
        }
    }
    (first, rest)
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
        let mut asm: super::IdMap<Assembler> = Default::default();
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
        let owners = super::owners(table, part, p)?;
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
) -> impl FnMut(&crate::wire::PieceMeta) -> std::result::Result<(), String> + Send + 'a {
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

/// Scatter from `root`: each of the root's partitions goes to its owner under `part`; every
/// worker's table becomes exactly the partitions it owns (the root keeps its own share).
/// Direct: (p−1)/p · nβ at the root's link, one worker after the other ([`scatter_rooted`];
/// `auto` without a network model takes the binary tree for small tables). Tree and parallel:
/// a worker sends each child the partitions of the child's subtree, to all children at once.
pub async fn scatter(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    part: &Partitioner,
    algo: GatherAlgorithm,
) -> Result<()> {
    check_root(cx, root, "scatter root")?;
    let p = cx.size();
    match algo.resolve_scatter(cx.net.as_deref(), root) {
        GatherAlgorithm::Tree => {
            let t = distance_tree(cx, root);
            scatter_tree(cx, table, root, part, &t).await
        }
        GatherAlgorithm::Parallel => {
            let t = super::choose::star(p, root);
            scatter_tree(cx, table, root, part, &t).await
        }
        GatherAlgorithm::Relay => {
            let plan = relay_plan(cx, root);
            scatter_relay(cx, table, root, part, &plan).await
        }
        GatherAlgorithm::Binomial => {
            scatter_rooted(cx, table, root, part, Some(ScatterShape::Binomial)).await
        }
        GatherAlgorithm::Binary => {
            scatter_rooted(cx, table, root, part, Some(ScatterShape::Binary)).await
        }
        GatherAlgorithm::Delegate => {
            scatter_rooted(cx, table, root, part, Some(ScatterShape::Delegate)).await
        }
        // Auto resolves to direct without a model: the root then picks the shape by size.
        GatherAlgorithm::Auto | GatherAlgorithm::Direct => {
            let shape = (algo != GatherAlgorithm::Auto).then_some(ScatterShape::Direct);
            scatter_rooted(cx, table, root, part, shape).await
        }
    }
}

/// The scatters over the ranks in order from the root: `shape` fixed, or `None` (the automatic
/// choice without a network model) for the root to pick by its table's size
/// ([`choose::scatter`]). The root announces the shape in every frame's `aux`
/// ([`ScatterShape::code`]):
///
/// * direct (0): the root sends each worker its partitions, p−1 messages in a row:
///   (p−1)α + (p−1)/p · nβ at the root's link;
/// * binomial (1): with v = (r − root) mod p, a worker holds the partitions of the owners
///   v..v+s (s the lowest set bit of v, or p's next power of two at the root) and hands the
///   upper half of what it holds to v + s/2, then the upper half of the rest to v + s/4, and
///   so on: ⌈log2 p⌉ levels, (p−1)/p · nβ at the root's link, and every level but the root's
///   last child's forwards less than the root sent after it, so large tables end near the bound
///   (1.25× the direct scatter measured at 16 MiB, p = 8: each level stores and forwards);
/// * binary (2): a worker holds the owners v..end (its subtree in the [`binary_tree`] over the
///   ranks from the root, [`binary_place`]) and splits those after its own in two halves,
///   sending the larger to its first owner and then the other to its first: ⌊log2 p⌋ levels
///   and at most two messages from any worker (the root's two packets a call, against
///   ⌈log2 p⌉, are what back-to-back small scatters pace at). When the root's link is the
///   bound its second child forwards a quarter of the table after the root is done, which the
///   binomial tree avoids; measured up to 64 KiB the binary tree was never the slower;
/// * delegate (3): the root sends all but its own share to relative rank 1, which heads the
///   binary tree over the ranks 1..p ([`delegate_tree`]): one message from the root, so a small
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
    shape: Option<ScatterShape>,
) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let v = (r + p - root) % p;
    let tag = tags::MAIN.tag();
    let (shape, end) = if v == 0 {
        let shape = shape.unwrap_or_else(|| choose::scatter(table.bytes(), p));
        (shape, p)
    } else {
        table.clear();
        let shapes = ScatterShape::ALL;
        let mut from: Vec<usize> = Vec::with_capacity(shapes.len());
        for s in shapes {
            let q = (shape_place(s, v, p).0 + root) % p;
            if !from.contains(&q) {
                from.push(q);
            }
        }
        let f = cx.ep.recv_frame_from_any(&from, &[root], tag).await?;
        let Some(shape) = shapes.into_iter().find(|s| s.code() == f.hdr.aux) else {
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
        let mine = |m: &crate::wire::PieceMeta| {
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
    let mut owner = super::IdMap::with_capacity_and_hasher(table.len(), Default::default());
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
    for (child, child_end) in shape_children(shape, v, end, p) {
        let pieces = share(child..child_end);
        send_batch(&cx.ep, (child + root) % p, tag, shape.code(), &pieces).await?;
    }
    table.retain(|id| owner[&id] == v);
    Ok(())
}

/// Relative rank `v` (> 0) in a rooted scatter of `shape` over p ranks: its parent and the end
/// of its subtree, the owners `v..end`.
fn shape_place(shape: ScatterShape, v: usize, p: usize) -> (usize, usize) {
    match shape {
        ScatterShape::Direct => (0, v + 1),
        ScatterShape::Binomial => (v & (v - 1), (v + (v & v.wrapping_neg())).min(p)),
        ScatterShape::Binary => {
            let (parent, end) = binary_place(0, v, p);
            (parent.expect("a non-root has a parent"), end)
        }
        ScatterShape::Delegate if v == 1 => (0, p),
        ScatterShape::Delegate => {
            let (parent, end) = binary_place(1, v, p);
            (parent.expect("a non-root has a parent"), end)
        }
    }
}

/// The children of relative rank `v`, whose subtree ends at `end`, in a rooted scatter of
/// `shape` over p ranks, in sending order, each with its own subtree's end.
fn shape_children(shape: ScatterShape, v: usize, end: usize, p: usize) -> Vec<(usize, usize)> {
    match shape {
        ScatterShape::Direct if v == 0 => (1..p).map(|d| (d, d + 1)).collect(),
        ScatterShape::Direct => Vec::new(),
        ScatterShape::Binomial => {
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
        ScatterShape::Binary => binary_children(v, end).collect(),
        ScatterShape::Delegate if v == 0 => (p > 1).then_some((1, p)).into_iter().collect(),
        ScatterShape::Delegate => binary_children(v, end).collect(),
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
    let owners = super::owners(table, part, p)?;
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

    #[test]
    fn gather_and_scatter_take_whole_partitions_of_their_own() {
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
        // The direct scatter (rank 0 takes rank 1's share), and the relay scatter with rank 0
        // under root 1 (it keeps the batch marked with itself).
        let mut relay = Tree::empty(2);
        relay.parent[0] = Some(1);
        relay.children[1].push(0);
        for (algo, why) in [
            (GatherAlgorithm::Auto, "partition 3 belongs to rank 1"),
            (
                GatherAlgorithm::Relay,
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
                            GatherAlgorithm::Relay => {
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
            if algo == GatherAlgorithm::Relay {
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
            for shape in ScatterShape::ALL {
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
                        ScatterShape::Direct => continue,
                        ScatterShape::Binomial => &binomial,
                        ScatterShape::Binary => &binary,
                        ScatterShape::Delegate => &delegate,
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

    /// The walk the scatter's receivers take ([`binary_place`], [`binary_children`]) finds the
    /// parents, subtrees and children of [`binary_tree`], the larger subtree first (the later
    /// one of two of a size).
    #[test]
    fn the_binary_walk_agrees_with_the_binary_tree() {
        for p in 1..=70usize {
            let t = binary_tree(&(0..p).collect::<Vec<_>>());
            for v in 0..p {
                let (parent, end) = binary_place(0, v, p);
                assert_eq!(parent, t.parent[v], "p={p} v={v}");
                let mut sub = t.subtree(v);
                sub.sort();
                assert_eq!(sub, (v..end).collect::<Vec<_>>(), "p={p} v={v}");
                let kids: Vec<(usize, usize)> = binary_children(v, end).collect();
                let mut want: Vec<usize> = t.children[v].clone();
                want.sort_by_key(|&c| std::cmp::Reverse((t.subtree(c).len(), c)));
                assert_eq!(
                    kids.iter().map(|k| k.0).collect::<Vec<_>>(),
                    want,
                    "p={p} v={v}"
                );
                for (c, e) in kids {
                    assert_eq!(binary_place(0, c, p), (Some(v), e), "p={p} c={c}");
                }
            }
        }
    }

    /// The delegate tree: the root's one child is the next rank, under it the binary tree of
    /// the others; every rank reached once, as deep as the binary tree when p is a power of two
    /// and one level deeper otherwise.
    #[test]
    fn the_delegate_tree_hands_everything_to_the_next_rank() {
        for p in 1..=40usize {
            for root in [0, p / 2, p - 1] {
                let order = from_root(p, root);
                let t = delegate_tree(&order);
                assert_eq!(t.parent[root], None, "p={p}");
                let want: Vec<usize> = order.get(1).copied().into_iter().collect();
                assert_eq!(t.children[root], want, "p={p} root={root}");
                let mut depth = vec![0usize; p];
                for &r in &order[1..] {
                    let q = t.parent[r].expect("a parent");
                    depth[r] = depth[q] + 1;
                    assert!(t.children[q].contains(&r) && t.children[q].len() <= 2);
                }
                let deepest = depth.iter().max().copied().unwrap();
                let binary = p.ilog2() as usize;
                let extra = usize::from(!p.is_power_of_two());
                assert_eq!(deepest, binary + extra, "p={p} root={root}");
                let mut all = t.subtree(root);
                all.sort();
                assert_eq!(all, (0..p).collect::<Vec<_>>(), "p={p}");
            }
        }
    }

    /// The binary tree reaches every rank once, at most two children each, depth ⌊log2 p⌋,
    /// every subtree a contiguous stretch of the order; over two racks of four (the rack
    /// order from the root) a single link crosses between the racks.
    #[test]
    fn binary_tree_is_shallow_and_keeps_stretches_together() {
        for p in 1..=33usize {
            for root in [0, p / 2, p - 1] {
                let order = from_root(p, root);
                let t = binary_tree(&order);
                assert_eq!(t.parent[root], None);
                let mut depth = vec![0usize; p];
                for (pos, &r) in order.iter().enumerate().skip(1) {
                    let q = t.parent[r].expect("a parent");
                    assert!(t.children[q].contains(&r) && t.children[q].len() <= 2);
                    let qpos = order.iter().position(|&x| x == q).unwrap();
                    assert!(qpos < pos, "p={p}: parent after child");
                    depth[r] = depth[q] + 1;
                    let mut sub = t.subtree(r);
                    sub.sort_by_key(|&x| order.iter().position(|&y| y == x).unwrap());
                    let at: Vec<usize> = sub
                        .iter()
                        .map(|&x| order.iter().position(|&y| y == x).unwrap())
                        .collect();
                    assert_eq!(at, (pos..pos + sub.len()).collect::<Vec<_>>(), "p={p}");
                }
                assert_eq!(
                    depth.iter().max().copied().unwrap(),
                    p.ilog2() as usize,
                    "p={p}"
                );
            }
        }
        let racks = "h0:1 /a\nh1:1 /a\nh2:1 /a\nh3:1 /a\nh4:1 /b\nh5:1 /b\nh6:1 /b\nh7:1 /b\n";
        let topo = crate::topology::Topology::parse(racks, "t").unwrap();
        for root in 0..8 {
            let t = binary_tree(&topo.chain_order(root));
            let rack = |r: usize| r / 4;
            let crossing = (0..8)
                .filter(|&r| t.parent[r].is_some_and(|q| rack(q) != rack(r)))
                .count();
            assert_eq!(crossing, 1, "root {root}");
        }
    }

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
