//! Every automatic ("auto") choice of an algorithm, and how the workers come to agree on it.
//! A choice that differs between workers is an operation mismatch, so each one is made from a
//! value that every worker of the operation knows, or is announced by the only worker that
//! knows it:
//!
//! * **Broadcast** ([`broadcast`]): only the root knows the size. It decides, and every frame
//!   of the broadcast carries the concrete algorithm in `aux`; a receiver learns it from the
//!   first frame that reaches it (no extra message). The pipeline chunk size ([`chunk`]) is
//!   used by the root alone.
//! * **Allreduce** ([`allreduce`]): the choice depends on the largest table *of any worker*
//!   (workers often hold different amounts). It is agreed while the small-table algorithm runs
//!   (`allreduce::auto`): every bidirectional-exchange message carries in `aux` whether its
//!   sender has seen a table of at least the crossover ([`allreduce_large`]), its own or one
//!   reported by an earlier partner. Tables travel only between workers that have not; after
//!   the ⌈log2 p⌉ rounds (+2 when p is not a power of two) every worker knows the answer.
//!   *Cost*: when every table is small, none beyond bidirectional exchange itself: no extra
//!   message and no extra byte (the flag rides in the header's `aux`), only one local copy of
//!   the worker's table (less than the crossover, 16 KiB by default) so that it can still start
//!   over; when some table is
//!   large, the ⌈log2 p⌉ (+2) rounds are pure latency, ⌈log2 p⌉α (+2α), before
//!   regroup-allgather (plus at most the small tables sent before the news arrived).
//! * **Allgather** and **reduce-scatter** (`allgather::auto`, `regroup::reduce_scatter`):
//!   agreed exactly as allreduce, with the same crossover: while every table is small, the
//!   doubling rounds themselves do the work (the allgather's union is what they compute; for
//!   reduce-scatter each worker then keeps the partitions it owns), ⌈log2 p⌉ messages instead
//!   of the ring's p−1; when any table is large, the ring runs after the flag rounds. The
//!   log-step algorithms are not used for large tables: at 64 MiB, p = 8, recursive doubling
//!   allgather took 1.39× the bound and recursive halving 1.23×, the rings 1.00–1.02×
//!   (bench/history-netns.md, Part 0).
//! * **Scatter** ([`scatter`]): only the root knows the size; it decides between the binomial
//!   tree and the direct scatter and every frame carries the choice in `aux` (a receiver
//!   takes the first frame from the root or its tree parent).
//! * Reduce, regroup and the others have no automatic choice; regroup without a
//!   partitioner is decided by the master and sent to everyone (`regroup::plan`).
//!
//! The crossovers come from [`Config`](crate::config::Config): `broadcast_crossover`,
//! `allreduce_crossover`, `chunk_size`.
//!
//! **With a network model** (`Ctx::net`, [`NetModel`]) the broadcast root and the gather and
//! scatter choices compare the model's predicted cost of each candidate instead of the
//! crossover ([`predict_broadcast`], [`predict_gather`]); every worker holds the same model, so
//! a choice made from the model alone (gather, scatter) is the same everywhere. Without a
//! model every choice is as before.

use super::hierarchy::{self, Hierarchy, Tree};
use super::segment::auto_chunk;
use super::{AllreduceAlgorithm, BroadcastAlgorithm, GatherAlgorithm, ReduceAlgorithm};
use crate::config::Config;
use crate::netmodel::NetModel;
use crate::topology::Topology;

/// The concrete broadcast algorithms the automatic choice considers (in order of preference on
/// equal predicted cost).
pub fn broadcast_candidates(net: Option<&NetModel>) -> &'static [BroadcastAlgorithm] {
    use BroadcastAlgorithm::*;
    match net {
        None => &[Binomial, Chain],
        Some(_) => &[Binomial, Chain, NetChain, NetHierarchy, NetTree],
    }
}

/// Broadcast of `bytes` (the root's table). Without a model: binomial tree up to `crossover`
/// bytes (latency bound: ⌈log2 p⌉ hops instead of p−1), pipelined chain above. With one: the
/// candidate ([`broadcast_candidates`]) of least [`predict_broadcast`] (chunk `chunk`).
pub fn broadcast(
    bytes: u64,
    crossover: u64,
    net: Option<&NetModel>,
    topo: &Topology,
    root: usize,
    chunk: u64,
) -> BroadcastAlgorithm {
    if let Some(m) = net {
        return cheapest(broadcast_candidates(net), |a| {
            predict_broadcast(m, topo, a, root, bytes, chunk)
        });
    }
    if bytes <= crossover {
        BroadcastAlgorithm::Binomial
    } else {
        BroadcastAlgorithm::Chain
    }
}

/// Predicted seconds of a broadcast of `n` bytes with `algo` from `root` (α, β per pair from
/// the model: α = L(u,v), β = 1/B(u,v)). One-by-one sends the whole table to each child in
/// turn: Σ_c (α + nβ). The pipelined trees stream chunks of c = min(n, chunk) bytes; a worker
/// writes each chunk to its children one after the other, so the stream runs at the pace of
/// the slowest worker, max_u n·Σ_{c ∈ kids(u)} β(u,c), plus the fill time of the deepest
/// path, max over paths of Σ (α + cβ) along it.
pub fn predict_broadcast(
    net: &NetModel,
    topo: &Topology,
    algo: BroadcastAlgorithm,
    root: usize,
    n: u64,
    chunk: u64,
) -> f64 {
    let p = net.workers();
    let kids: Vec<Vec<usize>> = if algo == BroadcastAlgorithm::NetTree {
        super::hierarchy::best_broadcast_tree(net, root).children
    } else {
        let order = super::broadcast::order(algo, topo, Some(net), p, root);
        (0..p)
            .map(|r| super::broadcast::tree_in(algo, &order, r).1)
            .collect()
    };
    if algo == BroadcastAlgorithm::OneByOne {
        return kids[root].iter().map(|&c| net.cost(root, c, n)).sum();
    }
    let pace = (0..p)
        .map(|u| {
            kids[u]
                .iter()
                .map(|&k| n as f64 / net.bandwidth(u, k))
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    pace + fill(net, &kids, root, n.min(chunk.max(1)), false)
}

/// The fill time of a pipeline of `c`-byte chunks over the tree `kids` from `root`: the
/// deepest path's Σ (α + cβ), its links taken downward (`up` false) or toward the root.
fn fill(net: &NetModel, kids: &[Vec<usize>], root: usize, c: u64, up: bool) -> f64 {
    let mut fill = vec![0.0f64; kids.len()];
    let mut todo = vec![root];
    while let Some(u) = todo.pop() {
        for &k in &kids[u] {
            let link = if up {
                net.cost(k, u, c)
            } else {
                net.cost(u, k, c)
            };
            fill[k] = fill[u] + link;
            todo.push(k);
        }
    }
    fill.into_iter().fold(0.0, f64::max)
}

/// Predicted seconds of a pipelined reduce of `n` bytes per worker over `t`
/// ([`reduce_pipelined`](super::pipeline::reduce_pipelined)): every worker takes in n bytes
/// from each child at once, so the stream runs at the pace of the busiest intake (the
/// children's streams sharing it as in [`predict_tree`], all from the start), plus the fill
/// time of the deepest path with chunks of [`auto_chunk`](super::segment::auto_chunk)`(n, p)`
/// bytes.
pub fn predict_pipelined(net: &NetModel, t: &Tree, root: usize, n: u64) -> f64 {
    let pace = (0..t.children.len())
        .map(|u| intake(net, u, t.children[u].iter().map(|&c| (c, 0.0, n))))
        .fold(0.0, f64::max);
    let c = n.min(super::segment::auto_chunk(n, t.children.len()));
    pace + fill(net, &t.children, root, c, true)
}

/// Predicted seconds of a reduce or gather over `t` with `n` bytes per worker. A worker's
/// children send as soon as they are ready and their bytes arrive at once (the transport reads
/// every connection all the time), sharing the worker's host intake (its host capacity, else
/// B_in(u) = max_c B(c,u)) fairly, each also capped by its own link B(c,u): ready(u) is when
/// the last child's bytes are in, by [`fluid_finish`] of the flows (ready(c) + α(c,u), n_c
/// bytes, B(c,u)). n_c = `n` for a reduce (tables combined on the way), `n` × |subtree(c)| for
/// a gather (`grows`).
pub fn predict_tree(net: &NetModel, t: &Tree, root: usize, n: u64, grows: bool) -> f64 {
    fn ready(net: &NetModel, t: &Tree, u: usize, n: u64, grows: bool) -> f64 {
        let flows = t.children[u].iter().map(|&c| {
            let nc = if grows {
                n * t.subtree(c).len() as u64
            } else {
                n
            };
            (c, ready(net, t, c, n, grows) + net.latency(c, u), nc)
        });
        intake(net, u, flows)
    }
    ready(net, t, root, n, grows)
}

/// When the last of the transfers `(child, start, bytes)` into worker `u` is in: they share u's
/// host intake ([`fluid_finish`]), each capped by its link B(c,u).
fn intake(net: &NetModel, u: usize, from: impl Iterator<Item = (usize, f64, u64)>) -> f64 {
    let flows: Vec<Flow> = from
        .map(|(c, start, bytes)| Flow {
            start,
            bytes: bytes as f64,
            cap: net.bandwidth(c, u),
        })
        .collect();
    fluid_finish(&flows, host_intake(net, u, &flows))
}

/// Worker `u`'s host intake for `flows`: its host capacity when the model has one, else
/// B_in(u) = max_c B(c,u) (its links share one interface as fast as the fastest of them).
fn host_intake(net: &NetModel, u: usize, flows: &[Flow]) -> f64 {
    net.host(u)
        .unwrap_or_else(|| flows.iter().map(|f| f.cap).fold(0.0, f64::max))
}

/// A transfer into one worker: it starts at `start` (seconds), carries `bytes`, and its link
/// takes at most `cap` bytes per second.
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    pub start: f64,
    pub bytes: f64,
    pub cap: f64,
}

/// When the last of `flows` is in, the flows sharing `capacity` bytes per second max-min
/// fairly (each at most its `cap`: the water-filling share, recomputed whenever a flow starts
/// or ends). A child that is ready late cannot use the intake its earlier siblings left idle,
/// and a slow link leaves the rest of the intake to the others (e.g. a worker taking n bytes at
/// once over a half-rate link and, from n/B on, over a full-rate one is done at 2.5 n/B, not
/// 2 n/B).
pub fn fluid_finish(flows: &[Flow], capacity: f64) -> f64 {
    let start = flows.iter().map(|f| f.start).fold(0.0, f64::max);
    fluid_finishes(flows, capacity)
        .into_iter()
        .fold(start, f64::max)
}

/// When each of `flows` is in ([`fluid_finish`]'s sharing); a flow of no bytes is in when it
/// starts.
pub fn fluid_finishes(flows: &[Flow], capacity: f64) -> Vec<f64> {
    if !capacity.is_finite() {
        return flows.iter().map(|f| f.start + f.bytes / f.cap).collect();
    }
    let mut done: Vec<f64> = flows.iter().map(|f| f.start).collect();
    let mut left: Vec<f64> = flows.iter().map(|f| f.bytes).collect();
    let mut t = flows.iter().map(|f| f.start).fold(f64::INFINITY, f64::min);
    loop {
        let mut active: Vec<usize> = (0..flows.len())
            .filter(|&i| left[i] > 0.0 && flows[i].start <= t)
            .collect();
        let next_start = flows
            .iter()
            .enumerate()
            .filter(|&(i, f)| left[i] > 0.0 && f.start > t)
            .map(|(_, f)| f.start)
            .fold(f64::INFINITY, f64::min);
        if active.is_empty() {
            if next_start.is_infinite() {
                return done;
            }
            t = next_start;
            continue;
        }
        // Water-filling: the slowest links take their cap, the rest share what is left.
        active.sort_by(|&a, &b| flows[a].cap.total_cmp(&flows[b].cap));
        let mut rate = vec![0.0f64; flows.len()];
        let mut free = capacity;
        for (k, &i) in active.iter().enumerate() {
            let share = free / (active.len() - k) as f64;
            rate[i] = flows[i].cap.min(share);
            free -= rate[i];
        }
        let dt = active
            .iter()
            .map(|&i| left[i] / rate[i])
            .fold(next_start - t, f64::min);
        t += dt;
        for &i in &active {
            left[i] -= rate[i] * dt;
            if left[i] <= flows[i].bytes * 1e-12 {
                left[i] = 0.0;
                done[i] = t;
            }
        }
        if active.iter().all(|&i| left[i] == 0.0) && next_start.is_infinite() {
            return done;
        }
    }
}

/// The direct gather and scatter as a tree: every worker a child of the root.
pub fn star(p: usize, root: usize) -> Tree {
    let mut t = Tree::empty(p);
    for r in (0..p).filter(|&r| r != root) {
        t.parent[r] = Some(root);
        t.children[root].push(r);
    }
    t
}

/// Predicted seconds of a gather or scatter of `n` bytes per worker, direct
/// or over the distance-ordered tree: [`predict_tree`] on the star or the tree with growing
/// messages. The scatter is costed like the gather (the model's links taken as symmetric);
/// the direct scatter writes to one worker after the other, but the socket buffers overlap
/// the transfers (measured on the uneven emulated network: 1.3× the bound, not the Σ_c nβ
/// of strictly sequential sends, docs/benchmarks-netns.md).
pub fn predict_gather(net: &NetModel, algo: GatherAlgorithm, root: usize, n: u64) -> f64 {
    let p = net.workers();
    match algo {
        GatherAlgorithm::Tree => {
            let h = Hierarchy::of(net);
            predict_tree(net, &hierarchy::distance_tree(&h, net, root), root, n, true)
        }
        GatherAlgorithm::Auto | GatherAlgorithm::Direct | GatherAlgorithm::Parallel => {
            predict_tree(net, &star(p, root), root, n, true)
        }
        GatherAlgorithm::Binomial => {
            predict_tree(net, &super::rooted::binomial_tree(p, root), root, n, true)
        }
        GatherAlgorithm::Binary => {
            let order = super::rooted::from_root(p, root);
            predict_tree(net, &super::rooted::binary_tree(&order), root, n, true)
        }
        GatherAlgorithm::Delegate => {
            let order = super::rooted::from_root(p, root);
            predict_tree(net, &super::rooted::delegate_tree(&order), root, n, true)
        }
        GatherAlgorithm::Relay => predict_relay(net, &relay_plan_of(net, root), root, n),
    }
}

/// The routes of the relay gather and scatter: a tree, and for some leaves a second route for
/// the last part of their share.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayPlan {
    pub tree: Tree,
    /// `split[w] = Some((j, e))`: w's last e/[`SPLIT_PARTS`] of its bytes go straight to `j`
    /// (the root, or a child of the root that forwards them), the rest through the tree. Only
    /// a leaf is split, never through its own parent, and `j` is not split itself.
    pub split: Vec<Option<(usize, u32)>>,
}

/// A split share is cut in this many parts by bytes (whole units).
pub const SPLIT_PARTS: u32 = 8;

impl RelayPlan {
    /// The plan of `tree` alone.
    pub fn of_tree(tree: Tree) -> RelayPlan {
        let p = tree.parent.len();
        RelayPlan {
            tree,
            split: vec![None; p],
        }
    }
    /// The workers whose second route ends at `u`, in rank order.
    pub fn split_children(&self, u: usize) -> Vec<usize> {
        (0..self.split.len())
            .filter(|&w| self.split[w].is_some_and(|(j, _)| j == u))
            .collect()
    }
    /// The fraction of `w`'s bytes on its second route (0 when not split).
    pub fn split_share(&self, w: usize) -> f64 {
        self.split[w].map_or(0.0, |(_, e)| e as f64 / SPLIT_PARTS as f64)
    }
    /// The batches `u` sends its parent in a gather (and takes from it in a scatter): one for
    /// each member of its subtree, and one for each worker whose second route ends at a member.
    pub fn batches(&self, u: usize) -> usize {
        self.tree
            .subtree(u)
            .into_iter()
            .map(|v| 1 + self.split_children(v).len())
            .sum()
    }
    /// The bytes (in shares) of the stream `u` sends its parent: its own share less its split
    /// part, then everything it takes from its children and split children.
    fn stream(&self, u: usize) -> f64 {
        1.0 - self.split_share(u) + self.forwarded(u)
    }
    fn forwarded(&self, u: usize) -> f64 {
        let kids: f64 = self.tree.children[u].iter().map(|&c| self.stream(c)).sum();
        let split: f64 = self
            .split_children(u)
            .into_iter()
            .map(|w| self.split_share(w))
            .sum();
        kids + split
    }
}

/// Predicted seconds of the relay gather over `plan` with `n` bytes per worker
/// ([`rooted::gather`](super::rooted::gather), `net-relay`): a worker sends its own bytes at
/// once (a split worker its two parts, each to its own receiver) and what it takes from others
/// after them, once it is all in. Into every worker the streams of its children and split
/// children share its host intake ([`fluid_finish`]), and a child's stream also ends no sooner
/// than what it forwards is in plus those bytes over its link.
pub fn predict_relay(net: &NetModel, plan: &RelayPlan, root: usize, n: u64) -> f64 {
    relay_arrivals(net, plan, root, n)
        .into_iter()
        .fold(0.0, f64::max)
}

/// When each stream into `u` is in ([`predict_relay`]): its children's (in `children[u]`
/// order), then its split children's.
fn relay_arrivals(net: &NetModel, plan: &RelayPlan, u: usize, n: u64) -> Vec<f64> {
    let t = &plan.tree;
    let share = n as f64;
    let mut last = Vec::new();
    let mut flows = Vec::new();
    for &c in &t.children[u] {
        let (a, b) = (net.latency(c, u), net.bandwidth(c, u));
        let below = relay_arrivals(net, plan, c, n)
            .into_iter()
            .fold(0.0, f64::max);
        last.push(below + a + plan.forwarded(c) * share / b);
        flows.push(Flow {
            start: a,
            bytes: plan.stream(c) * share,
            cap: b,
        });
    }
    for w in plan.split_children(u) {
        last.push(0.0);
        flows.push(Flow {
            start: net.latency(w, u),
            bytes: plan.split_share(w) * share,
            cap: net.bandwidth(w, u),
        });
    }
    let fluid = fluid_finishes(&flows, host_intake(net, u, &flows));
    fluid.into_iter().zip(last).map(|(f, l)| f.max(l)).collect()
}

/// Relay trees are searched up to this many workers; above, the relay gather is the direct one.
pub const RELAY_MAX_WORKERS: usize = 16;

/// The relay tree of [`predict_relay`] for `root` and `n` bytes per worker, found greedily:
/// from the star (the direct gather), move the one worker under the one relay (a child of the
/// root) that most lowers the streams' arrival times at the root, compared slowest first (so
/// that two slow workers can move one after the other), while a move lowers one by more than
/// 1% and raises none of the slower ones; the result is kept only if it beats the star's
/// predicted time by more than 1%. So a worker whose link to the root is slow sends through
/// one whose links to it and to the root are fast; where the root's host is the limit no move
/// helps and the tree stays the star. Deterministic: every worker builds the same tree from the
/// same model.
pub fn relay_tree(net: &NetModel, root: usize, n: u64) -> Tree {
    let p = net.workers();
    let start = RelayPlan::of_tree(star(p, root));
    if !(3..=RELAY_MAX_WORKERS).contains(&p) {
        return start.tree;
    }
    let moves = |plan: &RelayPlan| {
        let t = &plan.tree;
        let mut out = Vec::new();
        for w in (0..p).filter(|&w| w != root && t.children[w].is_empty()) {
            for j in (0..p).filter(|&j| j != root && j != w && t.parent[j] == Some(root)) {
                out.push(RelayPlan::of_tree(moved(t, w, j)));
            }
        }
        out
    };
    improve(net, root, n, start, moves).tree
}

/// The arrivals at the root of `plan`, slowest first (the first is the predicted time).
fn arrivals_key(net: &NetModel, plan: &RelayPlan, root: usize, n: u64) -> Vec<f64> {
    let mut a = relay_arrivals(net, plan, root, n);
    a.sort_by(|x, y| y.total_cmp(x));
    a
}

/// `a` better than `b`: at the first clear difference (1%), slowest first, `a` is earlier.
fn better(a: &[f64], b: &[f64]) -> bool {
    for (x, y) in a.iter().zip(b) {
        if *x < y * 0.99 {
            return true;
        }
        if *x > y * 1.01 {
            return false;
        }
    }
    false
}

/// The relay plan for `root` and `n` bytes per worker: the [`relay_tree`], then, greedily,
/// second routes: the one split of a leaf's share (the last e/[`SPLIT_PARTS`] of its bytes,
/// e = 1..7, straight to the root or to a child of the root other than its parent) that most
/// lowers the arrivals at the root, compared slowest first as in [`relay_tree`], while one
/// lowers them by more than 1%; a split leaf may later be split another way (the first splits
/// are made before the others exist and can end up too large), and no split leaf carries
/// another's part. A worker whose links to the root and to every relay are slow sends part of
/// its share one way and part the other, at once. Kept only if the plan beats the tree alone
/// by more than 1%. Deterministic, like the tree.
pub fn relay_plan(net: &NetModel, root: usize, n: u64) -> RelayPlan {
    let p = net.workers();
    let start = RelayPlan::of_tree(relay_tree(net, root, n));
    if !(3..=RELAY_MAX_WORKERS).contains(&p) {
        return start;
    }
    let splits = |plan: &RelayPlan| {
        let t = &plan.tree;
        let mut out = Vec::new();
        // A split leaf may be split again another way (the greedy order can leave an earlier
        // split too large once a later one is made).
        let leaves = (0..p).filter(|&w| {
            w != root && t.children[w].is_empty() && plan.split_children(w).is_empty()
        });
        for w in leaves {
            let vias = (0..p).filter(|&j| {
                j != w
                    && Some(j) != t.parent[w]
                    && (j == root || t.parent[j] == Some(root) && plan.split[j].is_none())
            });
            for j in vias {
                for e in 1..SPLIT_PARTS {
                    let mut cand = plan.clone();
                    cand.split[w] = Some((j, e));
                    out.push(cand);
                }
            }
        }
        out
    };
    improve(net, root, n, start, splits)
}

/// The greedy search of [`relay_tree`] and [`relay_plan`]: from `start`, take the candidate of
/// `next` whose arrivals at the root are best ([`better`]) while one beats the current plan,
/// at most 4p times; the result if it beats `start`'s predicted time by more than 1%, else
/// `start`.
fn improve(
    net: &NetModel,
    root: usize,
    n: u64,
    start: RelayPlan,
    next: impl Fn(&RelayPlan) -> Vec<RelayPlan>,
) -> RelayPlan {
    let first = arrivals_key(net, &start, root, n);
    let (mut plan, mut best) = (start.clone(), first.clone());
    for _ in 0..4 * net.workers() {
        let mut pick: Option<(Vec<f64>, RelayPlan)> = None;
        for cand in next(&plan) {
            let k = arrivals_key(net, &cand, root, n);
            if better(&k, &best) && pick.as_ref().is_none_or(|(bk, _)| better(&k, bk)) {
                pick = Some((k, cand));
            }
        }
        match pick {
            Some((k, cand)) => (best, plan) = (k, cand),
            None => break,
        }
    }
    if best[0] < first[0] * 0.99 {
        plan
    } else {
        start
    }
}

/// The relay plan the relay gather and scatter use from `root`: [`relay_plan`] for
/// [`REF_BYTES`](hierarchy::REF_BYTES) per worker (a size every worker agrees on), searched once
/// per model and root.
pub fn relay_plan_of(net: &NetModel, root: usize) -> std::sync::Arc<RelayPlan> {
    net.derived(("relay-plan", root as u64), |m| {
        relay_plan(m, root, hierarchy::REF_BYTES)
    })
}

/// `t` with leaf `w` moved under `j`.
fn moved(t: &Tree, w: usize, j: usize) -> Tree {
    let mut t = t.clone();
    if let Some(old) = t.parent[w] {
        t.children[old].retain(|&c| c != w);
    }
    t.parent[w] = Some(j);
    t.children[j].push(w);
    t
}

/// Gather and scatter: binomial without a model (every size: its root receives the same bytes
/// as the direct gather's, in ⌈log2 p⌉ messages instead of p − 1, and its workers forward
/// whole subtrees early enough to keep the root's link busy; the binary tree's root takes two
/// messages, faster at 1 KiB, but its second child forwards after the first is done, which
/// costs about (p/4)/(p−1) of the bound more for large tables, bench/history-netns.md, Part 0,
/// item q; a size-dependent choice would
/// need the workers to agree on the sizes, which only the root sees); with one, the faster of
/// the distance-ordered tree and the relay tree when the model predicts it at least 10% faster
/// for 1 MiB per worker (a size every worker agrees on: the tables differ, and only the root
/// knows a scatter's), else direct.
pub fn gather(net: Option<&NetModel>, root: usize) -> GatherAlgorithm {
    match net {
        Some(m) if m.workers() > 2 => {
            let n = hierarchy::REF_BYTES;
            let direct = predict_gather(m, GatherAlgorithm::Direct, root, n);
            let (algo, time) = [GatherAlgorithm::Tree, GatherAlgorithm::Relay]
                .into_iter()
                .map(|a| (a, predict_gather(m, a, root, n)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .expect("two candidates");
            if time < 0.9 * direct {
                algo
            } else {
                GatherAlgorithm::Direct
            }
        }
        Some(_) => GatherAlgorithm::Direct,
        None => GatherAlgorithm::Binomial,
    }
}

/// The reduce of least predicted cost ([`predict_reduce`]) for tables of at most `n` bytes
/// (what the automatic reduce runs once the workers agreed on `n`); ties keep the earlier of
/// binomial, binary, scatter-gather, net-hierarchy, net-ring, net-chain. Below `crossover`
/// (`Config::allreduce_crossover`) only the trees compete: a measured model's latencies are
/// ping-pong times of two otherwise idle workers, and undercount what each of the ring's
/// 2(p − 1) steps costs when every worker is busy (on 8 emulated hosts on 2 cores the model
/// chose net-ring for 1 KiB, predicted 0.3 ms, and it took 0.6 ms against 0.17 ms for the
/// binomial tree; docs/benchmarks-netns.md).
pub fn reduce(
    net: &NetModel,
    topo: &Topology,
    root: usize,
    n: u64,
    crossover: u64,
) -> ReduceAlgorithm {
    use ReduceAlgorithm::*;
    let candidates: &[ReduceAlgorithm] = if n < crossover {
        &[Binomial, Binary, NetHierarchy]
    } else {
        &[
            Binomial,
            Binary,
            ScatterGather,
            NetHierarchy,
            NetRing,
            NetChain,
        ]
    };
    cheapest(candidates, |a| {
        predict_reduce(net, topo, a, root, n, crossover)
    })
}

/// The candidate of least `cost` (the earliest of equal ones; `candidates` is not empty).
fn cheapest<A: Copy>(candidates: &[A], cost: impl Fn(A) -> f64) -> A {
    let mut best = (candidates[0], cost(candidates[0]));
    for &a in &candidates[1..] {
        let t = cost(a);
        if t < best.1 {
            best = (a, t);
        }
    }
    best.0
}

/// Predicted seconds of a reduce of `n` bytes per worker to `root`. Binomial and
/// net-hierarchy: [`predict_tree`] on their trees; binary, chain and net-chain:
/// [`predict_pipelined`] on theirs. Scatter-gather and net-ring: p−1 ring steps
/// of n/p bytes at the pace of the ring's slowest link, then the owners' n/p each into the root
/// at once (as a direct gather).
pub fn predict_reduce(
    net: &NetModel,
    topo: &Topology,
    algo: ReduceAlgorithm,
    root: usize,
    n: u64,
    crossover: u64,
) -> f64 {
    let p = net.workers();
    match algo {
        // The automatic reduce is costed as what it runs with the job's crossover
        // (`Config::allreduce_crossover`), plus nothing for the agreement.
        ReduceAlgorithm::Auto => {
            let ran = reduce(net, topo, root, n, crossover);
            predict_reduce(net, topo, ran, root, n, crossover)
        }
        ReduceAlgorithm::Binomial => {
            predict_tree(net, &super::rooted::binomial_tree(p, root), root, n, false)
        }
        ReduceAlgorithm::Binary | ReduceAlgorithm::Chain | ReduceAlgorithm::NetChain => {
            let t = super::rooted::pipelined_tree(algo, topo, Some(net), p, root)
                .expect("a pipelined algorithm");
            predict_pipelined(net, &t, root, n)
        }
        ReduceAlgorithm::NetHierarchy => {
            let h = Hierarchy::of(net);
            predict_tree(net, &hierarchy::leader_tree(&h, net, root), root, n, false)
        }
        ReduceAlgorithm::ScatterGather | ReduceAlgorithm::NetRing => {
            let ring: Vec<usize> = if algo == ReduceAlgorithm::NetRing {
                hierarchy::best_path(net, 0, true)
            } else {
                (0..p).collect()
            };
            let seg = n / p as u64;
            let step = (0..p)
                .map(|v| net.cost(ring[v], ring[(v + 1) % p], seg))
                .fold(0.0, f64::max);
            (p - 1) as f64 * step + predict_tree(net, &star(p, root), root, seg, false)
        }
    }
}

/// The broadcast pipeline chunk for `total` bytes over `p` workers: the configured size, or
/// one picked from the size and p ([`auto_chunk`]) when it is 0.
pub fn chunk(cfg: &Config, total: u64, p: usize) -> u64 {
    if cfg.chunk_size > 0 {
        cfg.chunk_size as u64
    } else {
        auto_chunk(total, p)
    }
}

/// Scatter tables up to this many bytes go down the binary tree (the binomial tree until stop
/// 36), larger ones straight from the root (`rooted::scatter`). At 1 KiB, p = 8 on the emulated
/// 200 Mbit/s hosts the binomial tree took 0.16 ms against the direct scatter's 0.20–0.33 ms
/// (the root's p−1 sends in a row are the bottleneck), and back-to-back calls pace at the
/// root's link, where the binary root sends two packets a call against the binomial root's
/// three (37.5–40.3 µs against 43.2–45.5, Open MPI 41.7–43.7). Up to 64 KiB the binary tree
/// was never slower than the binomial one (single 64 KiB calls 1.42–1.44 ms against
/// 1.94–1.96, direct 1.95–1.98; back-to-back 16 and 64 KiB calls equal, at the bound;
/// bench/history-netns.md, Part 0, item q). At 16 MiB the binomial tree took 1.25× the direct
/// scatter's time (each level stores and forwards). The break-even was not measured; 64 KiB
/// keeps the tree where a message is latency-bound (64 KiB is 2.7 ms at 200 Mbit/s against
/// ~0.05 ms per message).
pub const SCATTER_TREE_MAX: u64 = 64 * 1024;

/// The shapes of the scatter over the ranks in order from the root
/// (`rooted::scatter_rooted`), announced in every frame's `aux`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScatterShape {
    /// The root sends each worker its partitions.
    Direct,
    /// Down the binomial tree.
    Binomial,
    /// Down the binary tree (`rooted::binary_tree`).
    Binary,
    /// To the next worker, then down the binary tree over the others
    /// (`rooted::delegate_tree`).
    Delegate,
}

impl ScatterShape {
    /// Every shape (a receiver learns which one from the first frame's `aux`).
    pub const ALL: [ScatterShape; 4] = [
        ScatterShape::Direct,
        ScatterShape::Binomial,
        ScatterShape::Binary,
        ScatterShape::Delegate,
    ];

    /// The code in the frames' `aux`.
    pub fn code(self) -> u32 {
        match self {
            ScatterShape::Direct => 0,
            ScatterShape::Binomial => 1,
            ScatterShape::Binary => 2,
            ScatterShape::Delegate => 3,
        }
    }

    /// The gather/scatter algorithm that runs this shape (its name is what `harp bench`
    /// reports for the automatic scatter).
    pub fn algorithm(self) -> GatherAlgorithm {
        match self {
            ScatterShape::Direct => GatherAlgorithm::Direct,
            ScatterShape::Binomial => GatherAlgorithm::Binomial,
            ScatterShape::Binary => GatherAlgorithm::Binary,
            ScatterShape::Delegate => GatherAlgorithm::Delegate,
        }
    }
}

/// Scatter tables up to this many bytes over a power-of-two number of workers go to the next
/// worker, which scatters them down the binary tree over the others (`ScatterShape::Delegate`):
/// what leaves the root then fits one TCP segment on a 1500-byte MTU, one packet's headers a
/// call where the binary root pays two. Back-to-back 1 KiB calls, p = 8, on the emulated
/// 200 Mbit/s hosts (paced at the root's link): 37.3–40.1 µs against the binary tree's
/// 37.5–42.1 in the same five runs (Open MPI 40.8–41.3); at p = 4 33.9–35.4 against 36.5–36.6;
/// at 2 KiB (two segments either way) 77.7–79.5 against 76.7–77.2 (bench/history-netns.md, Part 0,
/// item r). With p a power of two the delegate tree is as deep as the binary tree; otherwise it
/// is one level deeper, which a single call would pay.
pub const SCATTER_DELEGATE_MAX: u64 = 1024;

/// The automatic scatter of the root's table of `bytes` over `p` workers without a network
/// model: to the next worker up to [`SCATTER_DELEGATE_MAX`] when p is a power of two, down the
/// binary tree up to [`SCATTER_TREE_MAX`], direct above. Only the root knows the size: it
/// decides and every frame announces it.
pub fn scatter(bytes: u64, p: usize) -> ScatterShape {
    if bytes <= SCATTER_DELEGATE_MAX && p.is_power_of_two() {
        ScatterShape::Delegate
    } else if bytes <= SCATTER_TREE_MAX {
        ScatterShape::Binary
    } else {
        ScatterShape::Direct
    }
}

/// True when a worker's table of `bytes` calls for regroup-allgather.
pub fn allreduce_large(bytes: u64, crossover: u64) -> bool {
    bytes >= crossover
}

/// Allreduce when the largest table of any worker has `largest` bytes: bidirectional exchange
/// below `crossover`, regroup-allgather from it on. Bidirectional exchange costs
/// ⌈log2 p⌉(α + nβ) (+2(α + nβ) when p is not a power of two), regroup-allgather
/// 2(p−1)α + 2(p−1)/p·nβ; on the emulated 200 Mbit/s network regroup-allgather wins from
/// 16 KiB at every measured p and loses up to 8 KiB (docs/benchmarks-netns.md).
pub fn allreduce(largest: u64, crossover: u64) -> AllreduceAlgorithm {
    if allreduce_large(largest, crossover) {
        AllreduceAlgorithm::RegroupAllgather
    } else {
        AllreduceAlgorithm::BidirectionalExchange
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossovers() {
        let topo = Topology::flat((0..4).map(|i| format!("h{i}:1")).collect());
        assert_eq!(
            broadcast(8192, 8192, None, &topo, 0, 8192),
            BroadcastAlgorithm::Binomial
        );
        assert_eq!(
            broadcast(8193, 8192, None, &topo, 0, 8192),
            BroadcastAlgorithm::Chain
        );
        assert_eq!(
            allreduce(16383, 16384),
            AllreduceAlgorithm::BidirectionalExchange
        );
        assert_eq!(
            allreduce(16384, 16384),
            AllreduceAlgorithm::RegroupAllgather
        );
        assert!(allreduce_large(0, 0));
        assert_eq!(scatter(0, 8), ScatterShape::Delegate);
        assert_eq!(scatter(SCATTER_DELEGATE_MAX, 4), ScatterShape::Delegate);
        assert_eq!(scatter(SCATTER_DELEGATE_MAX, 6), ScatterShape::Binary);
        assert_eq!(scatter(SCATTER_DELEGATE_MAX + 1, 8), ScatterShape::Binary);
        assert_eq!(scatter(SCATTER_TREE_MAX, 8), ScatterShape::Binary);
        assert_eq!(scatter(SCATTER_TREE_MAX + 1, 8), ScatterShape::Direct);
        let mut cfg = Config::default();
        assert_eq!(chunk(&cfg, 1 << 30, 8), auto_chunk(1 << 30, 8));
        cfg.chunk_size = 1000;
        assert_eq!(chunk(&cfg, 1 << 30, 8), 1000);
    }

    /// A uniform model keeps today's choices at large sizes (the chain, direct gather and
    /// scatter); an uneven one picks the network-aware chain, and the predictions order the
    /// algorithms as the measurements on the emulated network do.
    /// The intake is shared max-min fairly, flows capped by their links, late flows unable to
    /// use capacity left idle before they start.
    #[test]
    fn fluid_intake() {
        let f = |start: f64, bytes: f64, cap: f64| Flow { start, bytes, cap };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b.max(1.0);
        // Seven children at once over full-rate links: 7 n/B.
        assert!(close(fluid_finish(&[f(0.0, 1.0, 1.0); 7], 1.0), 7.0));
        // A half-rate link from 0 and a full-rate one from 1: the first has 0.5 left at t = 1,
        // both then get 0.5 until it is done at 2, the second finishes its last 0.5 at 2.5.
        assert!(close(
            fluid_finish(&[f(0.0, 1.0, 0.5), f(1.0, 1.0, 1.0)], 1.0),
            2.5
        ));
        // A slow link leaves the rest of the intake to the other: 0.25 and 1 of 1.
        assert!(close(
            fluid_finish(&[f(0.0, 1.0, 0.25), f(0.0, 1.5, 1.0)], 1.0),
            4.0
        ));
        let done = fluid_finish(&[f(0.0, 1.0, 0.25), f(0.0, 1.5, 1.0)], 1.0);
        assert!(done >= 4.0 - 1e-9, "{done}");
        // Nothing to send: ready when the last child is.
        assert!(close(
            fluid_finish(&[f(3.0, 0.0, 1.0), f(1.0, 0.0, 1.0)], 1.0),
            3.0
        ));
    }

    /// Where the pairs and not the hosts are the limit, a worker with a slow link to the root
    /// sends through a relay, the prediction drops by the share the slow link cost, and `auto`
    /// picks the relay tree; where the root's host is the limit nothing moves.
    #[test]
    fn relay_trees_route_around_slow_pairs_only_when_pairs_limit() {
        // 0 <- 1 slow (1 MB/s); 1 -> 2 and 2 -> 0 fast (4 MB/s); hosts take 100 MB/s.
        let b = |i: usize, j: usize| match (i.min(j), i.max(j)) {
            (0, 1) => 1e6,
            _ => 4e6,
        };
        let mut bw = vec![f64::INFINITY; 9];
        for i in 0..3 {
            for j in (0..3).filter(|&j| j != i) {
                bw[i * 3 + j] = b(i, j);
            }
        }
        let pairs = NetModel::new(3, vec![0.0; 9], bw).unwrap();
        let hosts = pairs.clone().with_host(vec![1e8; 3]).unwrap();
        let n = 1_000_000u64;
        let t = relay_tree(&hosts, 0, n);
        assert_eq!(t.parent, vec![None, Some(2), Some(0)], "1 sends through 2");
        hierarchy::tests::check_tree(&t, 0);
        // Direct: 1's megabyte over 1 MB/s. The tree: 2 sends its own (0.25 s) while 1's comes
        // in (0.25 s), then forwards it (0.25 s). The plan also sends the last 3/8 of 1's share
        // straight to the root (0.375 s) while 2 forwards the other 5/8 (0.25 + 0.15625 s).
        let direct = predict_gather(&hosts, GatherAlgorithm::Direct, 0, n);
        let tree = predict_relay(&hosts, &RelayPlan::of_tree(t.clone()), 0, n);
        let plan = relay_plan(&hosts, 0, n);
        assert_eq!(plan.tree, t);
        assert_eq!(plan.split, vec![None, Some((0, 3)), None]);
        assert_eq!(plan.batches(2), 2);
        assert_eq!(plan.split_children(0), vec![1]);
        let relay = predict_gather(&hosts, GatherAlgorithm::Relay, 0, n);
        assert!((direct - 1.0).abs() < 1e-9, "{direct}");
        assert!((tree - 0.5).abs() < 1e-9, "{tree}");
        assert!((relay - 0.40625).abs() < 1e-9, "{relay}");
        assert_eq!(gather(Some(&hosts), 0), GatherAlgorithm::Relay);
        // Without host capacities the root takes at most its fastest link's rate (4 MB/s) in
        // all; the direct gather leaves most of it idle, so the relay still helps.
        assert_eq!(relay_tree(&pairs, 0, n), t);
        // Eight workers on the uneven pairs of seed 1 with hosts four times the fastest pair:
        // the tree is valid, deterministic and predicted faster; with the hosts as the limit
        // it is the star and `auto` keeps the direct gather.
        let uneven = hierarchy::tests::uneven(8, 1);
        let fast = uneven.clone().with_host(vec![1e8; 8]).unwrap();
        for root in 0..8 {
            let t = relay_tree(&fast, root, 1 << 20);
            hierarchy::tests::check_tree(&t, root);
            assert_eq!(t, relay_tree(&fast, root, 1 << 20));
            let d = predict_gather(&fast, GatherAlgorithm::Direct, root, 1 << 20);
            let r = predict_relay(&fast, &RelayPlan::of_tree(t.clone()), root, 1 << 20);
            assert!(r <= d, "root {root}: relay {r} direct {d}");
            assert_eq!(relay_tree(&uneven, root, 1 << 20), star(8, root));
            assert_ne!(gather(Some(&uneven), root), GatherAlgorithm::Relay);
        }
        // Four workers on seed 2's pairs (the root's links: 200, 100, 100): ranks 2 and 3 each
        // send a quarter of their share through rank 1, and the plan reaches what the root's
        // links carry together (3n over their sum); a split made first with too large a part
        // is split again.
        let mbit = [
            [0, 200, 100, 100],
            [200, 0, 200, 100],
            [100, 200, 0, 100],
            [100, 100, 100, 0],
        ];
        let mut bw = vec![f64::INFINITY; 16];
        for i in 0..4 {
            for j in (0..4).filter(|&j| j != i) {
                bw[i * 4 + j] = mbit[i][j] as f64 * 125e3;
            }
        }
        let seed2 = NetModel::new(4, vec![1e-4; 16], bw)
            .unwrap()
            .with_host(vec![1e8; 4])
            .unwrap();
        let n = 1 << 20;
        let plan = relay_plan(&seed2, 0, n);
        assert_eq!(plan.split, vec![None, None, Some((1, 2)), Some((1, 2))]);
        let links: f64 = (1..4).map(|j| seed2.bandwidth(j, 0)).sum();
        let bound = 3.0 * n as f64 / links;
        let t = predict_relay(&seed2, &plan, 0, n);
        assert!(t < bound * 1.01, "{t} against {bound}");
        let big = 32;
        assert_eq!(
            relay_tree(&NetModel::uniform(big, 1e-4, 1e6), 0, 1 << 20),
            star(big, 0),
            "above RELAY_MAX_WORKERS no search"
        );
    }

    #[test]
    fn model_choices_and_predictions() {
        let topo = Topology::flat((0..8).map(|i| format!("h{i}:1")).collect());
        let flat = NetModel::uniform(8, 1e-4, 23.9e6);
        let big = 16 << 20;
        assert_eq!(
            broadcast(big, 8192, Some(&flat), &topo, 0, 256 << 10),
            BroadcastAlgorithm::Chain
        );
        assert_eq!(
            broadcast(1024, 8192, Some(&flat), &topo, 0, 8192),
            BroadcastAlgorithm::Binomial
        );
        assert_eq!(gather(Some(&flat), 0), GatherAlgorithm::Direct);
        let uneven = hierarchy::tests::uneven(8, 1);
        let pick = broadcast(big, 8192, Some(&uneven), &topo, 0, 256 << 10);
        assert!(
            matches!(
                pick,
                BroadcastAlgorithm::NetChain
                    | BroadcastAlgorithm::NetHierarchy
                    | BroadcastAlgorithm::NetTree
            ),
            "{pick:?}"
        );
        let cost = |a| predict_broadcast(&uneven, &topo, a, 0, big, 256 << 10);
        assert!(cost(pick) < cost(BroadcastAlgorithm::Chain));
        // A chain over a flat network runs at about n/B; net-ring beats rank-order
        // scatter-gather on an uneven one.
        let c = auto_chunk(big, 8);
        let chain = predict_broadcast(&flat, &topo, BroadcastAlgorithm::Chain, 0, big, c);
        let nb = big as f64 / 23.9e6;
        assert!(chain > nb && chain < 1.05 * nb, "{chain} {nb}");
        let crossover = crate::config::Config::default().allreduce_crossover;
        let reduce_cost = |net, a| predict_reduce(net, &topo, a, 0, big, crossover);
        assert!(
            reduce_cost(&uneven, ReduceAlgorithm::NetRing)
                <= reduce_cost(&uneven, ReduceAlgorithm::ScatterGather)
        );
        // The automatic reduce is costed as what it picks under the job's crossover: a table
        // below it only has the trees to choose from, so its prediction moves with it.
        let auto = |x: u64| {
            let picked = reduce(&uneven, &topo, 0, big, x);
            let cost = predict_reduce(&uneven, &topo, ReduceAlgorithm::Auto, 0, big, x);
            assert_eq!(cost, predict_reduce(&uneven, &topo, picked, 0, big, x));
            (picked, cost)
        };
        let (above, below) = (auto(1), auto(big + 1));
        assert_ne!(above.0, below.0);
        assert!(above.1 < below.1, "{above:?} {below:?}");
        // The pipelined reduces: a chain at about n/B (every worker takes in one stream), the
        // binary tree at about 2n/B (two streams into one link), both below scatter-gather's
        // 2(p−1)/p · n/B on the flat network; with the model, the automatic reduce of a large
        // table is the net-chain.
        let chain = reduce_cost(&flat, ReduceAlgorithm::Chain);
        assert!(chain > nb && chain < 1.05 * nb, "{chain} {nb}");
        let binary = reduce_cost(&flat, ReduceAlgorithm::Binary);
        assert!(binary > 2.0 * nb && binary < 2.05 * nb, "{binary} {nb}");
        assert!(binary > reduce_cost(&flat, ReduceAlgorithm::ScatterGather));
        assert_eq!(
            reduce(&flat, &topo, 0, big, 16 << 10),
            ReduceAlgorithm::NetChain
        );
        assert!(
            reduce_cost(&uneven, ReduceAlgorithm::NetChain)
                <= reduce_cost(&uneven, ReduceAlgorithm::Chain)
        );
        // The direct gather is bounded by the root's intake: (p−1)n/B.
        let g = predict_gather(&flat, GatherAlgorithm::Direct, 0, 1 << 20);
        assert!((g - 7.0 * (1 << 20) as f64 / 23.9e6).abs() < 1e-3, "{g}");
    }
}
