//! The relay plan of the `net-relay` gather and scatter: a tree, and for some leaves a second
//! route for the last part of their share, searched greedily on the network model with the
//! fluid model of each worker's intake (`fluid`); and the cut of a split share.

use super::ctx::Ctx;
use super::fluid::{fluid_finishes, host_intake, Flow};
use super::framing::Out;
use super::hierarchy;
use super::trees::{star, Tree};
use crate::netmodel::NetModel;

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
/// (the `net-relay` gather): a worker sends its own bytes at
/// once (a split worker its two parts, each to its own receiver) and what it takes from others
/// after them, once it is all in. Into every worker the streams of its children and split
/// children share its host intake ([`fluid_finish`](super::fluid::fluid_finish)), and a
/// child's stream also ends no sooner than what it forwards is in plus those bytes over its
/// link.
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

/// The relay plan of the context's model from `root` (made once per model and root).
pub fn plan_in(cx: &Ctx<'_>, root: usize) -> RelayPlan {
    let net = cx
        .net
        .as_deref()
        .expect("trees are resolved only with a model");
    (*relay_plan_of(net, root)).clone()
}

/// `pieces` cut for a split share: the first (SPLIT_PARTS − e)/SPLIT_PARTS of their bytes and
/// the rest, a piece that straddles the cut split at a whole unit of its layout.
pub fn cut_share<'b>(pieces: &[Out<'b>], e: u32) -> (Vec<Out<'b>>, Vec<Out<'b>>) {
    let total: u64 = pieces.iter().map(|o| o.meta.len).sum();
    let parts = u128::from(SPLIT_PARTS);
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
