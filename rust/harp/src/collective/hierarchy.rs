//! The network performance hierarchy of CMPI (seed 001 §4.2) and the communication orders and
//! trees the network-aware algorithms derive from a [`NetModel`]. Pure functions of the model:
//! every worker holding the same model computes the same hierarchy, orders and trees.
//!
//! * **Discretisation** ([`discretise`]): M(i,j) = L(i,j) + m/B(i,j) for the reference message
//!   size [`REF_BYTES`], taken symmetric as max(M(i,j), M(j,i)) (the paper's b-closeness looks at
//!   both directions), mapped linearly onto [`K`] = 4 levels between the fastest and the
//!   slowest pair: level = ⌊K (M − Mmin) / (Mmax − Mmin)⌋, capped at K−1. When the slowest pair
//!   is within [`UNIFORM_SPREAD`] of the fastest (measurement noise), every pair is level 0.
//!   The size is fixed, not the operation's: a broadcast's receivers do not know the root's
//!   size before the first frame arrives, and tables differ between workers, so a hierarchy
//!   that depends on the size could differ between workers. 1 MiB is in the bandwidth-bound
//!   regime where the network-aware algorithms are used; latency-bound sizes are left to the
//!   cost models (`costs`).
//! * **Grouping** ([`Hierarchy::build`], Algorithms 1–2): level 0 is one group per worker; each
//!   next level merges the groups of the previous one greedily: a group joins the smallest
//!   existing new group it is b-close to (every pair between them at a level ≤ b), else starts
//!   one; b grows from 0 until there are at most half as many groups as before. Groups merge
//!   whole (so the levels nest into a tree; the paper moves single machines). Span balancing:
//!   while the largest and smallest new groups differ by more than [`T_SPAN`] workers and the
//!   largest holds a sub-group small enough to narrow the span, the sub-group closest to the
//!   smallest group moves there.
//! * **Distance** ([`Hierarchy::distance`]): the level of the lowest common ancestor.
//! * **Leaders** ([`Hierarchy::leader`]): the group member with the least Σ M into it, or the
//!   operation's root when it is a member (the root leads at every level).

use std::sync::Arc;

use super::trees::{chain_tree, Tree};
use crate::data::kv::FastMap;
use crate::netmodel::NetModel;

/// Reference message size of the discretisation (see the module docs).
pub const REF_BYTES: u64 = 1 << 20;
/// Discretisation levels (the paper uses k = 4 on EC2).
pub const K: u32 = 4;
/// Span threshold of the balancing (the paper uses T_span = 1).
pub const T_SPAN: usize = 1;
/// Slowest over fastest pair below which the network counts as uniform.
pub const UNIFORM_SPREAD: f64 = 1.15;

/// Symmetric level (0..K) of every pair, row-major; the diagonal is 0.
pub fn discretise(net: &NetModel, bytes: u64) -> Vec<u32> {
    let p = net.workers();
    let m = |i: usize, j: usize| net.cost(i, j, bytes).max(net.cost(j, i, bytes));
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for i in 0..p {
        for j in (0..p).filter(|&j| j != i) {
            lo = lo.min(m(i, j));
            hi = hi.max(m(i, j));
        }
    }
    let mut d = vec![0u32; p * p];
    if p < 2 || hi <= lo * UNIFORM_SPREAD {
        return d;
    }
    for i in 0..p {
        for j in (0..p).filter(|&j| j != i) {
            let x = (K as f64 * (m(i, j) - lo) / (hi - lo)).floor() as u32;
            d[i * p + j] = x.min(K - 1);
        }
    }
    d
}

/// The hierarchy: `levels[0]` has one group per worker, the last level one group of all.
/// Groups are sorted lists of ranks; each group of a level is a union of groups of the level
/// below.
#[derive(Debug, Clone, PartialEq)]
pub struct Hierarchy {
    pub levels: Vec<Vec<Vec<usize>>>,
    p: usize,
    /// `index[level][r]`: the group of `level` that holds `r` (the groups partition the ranks).
    index: Vec<Vec<u32>>,
}

impl Hierarchy {
    /// Algorithms 1–2 on the discretised model for [`REF_BYTES`].
    pub fn build(net: &NetModel) -> Hierarchy {
        let p = net.workers();
        let d = discretise(net, REF_BYTES);
        let mut levels = vec![(0..p).map(|i| vec![i]).collect::<Vec<_>>()];
        while levels.last().expect("level 0").len() > 1 {
            let next = group(&d, p, levels.last().expect("a level"));
            levels.push(next);
        }
        let index = levels
            .iter()
            .map(|groups| {
                let mut at = vec![u32::MAX; p];
                for (g, members) in groups.iter().enumerate() {
                    for &r in members {
                        at[r] = g as u32;
                    }
                }
                assert!(at.iter().all(|&g| g != u32::MAX), "every rank in a group");
                at
            })
            .collect();
        Hierarchy { levels, p, index }
    }

    /// [`Hierarchy::build`], once per model ([`NetModel::derived`]).
    pub fn of(net: &NetModel) -> Arc<Hierarchy> {
        net.derived(("hierarchy", 0), Hierarchy::build)
    }

    pub fn workers(&self) -> usize {
        self.p
    }

    /// The index of the group of `level` that holds `r`.
    pub fn group_of(&self, level: usize, r: usize) -> usize {
        self.index[level][r] as usize
    }

    /// The level of the lowest common ancestor of `a` and `b` (0 when a = b).
    pub fn distance(&self, a: usize, b: usize) -> usize {
        self.index
            .iter()
            .position(|at| at[a] == at[b])
            .expect("the top level holds everyone")
    }

    /// The leader of `group`: `root` when it is a member, else the member with the least
    /// Σ M(q, member) over the group (the reference size; only inbound links count).
    pub fn leader(net: &NetModel, group: &[usize], root: usize) -> usize {
        if group.contains(&root) {
            return root;
        }
        let inbound = |x: usize| -> f64 { group.iter().map(|&q| net.cost(q, x, REF_BYTES)).sum() };
        *group
            .iter()
            .min_by(|&&a, &&b| inbound(a).total_cmp(&inbound(b)).then(a.cmp(&b)))
            .expect("groups are not empty")
    }
}

/// Algorithm 2: the next level from the groups `g` (see the module docs).
fn group(d: &[u32], p: usize, g: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let close = |a: &[usize], b: &[usize], bound: u32| {
        a.iter()
            .all(|&x| b.iter().all(|&y| d[x * p + y].max(d[y * p + x]) <= bound))
    };
    let mut b = 0;
    let mut next: Vec<Vec<Vec<usize>>> = loop {
        // Each new group as the list of old groups it merges.
        let mut out: Vec<Vec<Vec<usize>>> = Vec::new();
        for old in g {
            let best = out
                .iter()
                .enumerate()
                .filter(|(_, n)| n.iter().all(|o| close(o, old, b)))
                .min_by_key(|(i, n)| (n.iter().map(Vec::len).sum::<usize>(), *i))
                .map(|(i, _)| i);
            match best {
                Some(i) => out[i].push(old.clone()),
                None => out.push(vec![old.clone()]),
            }
        }
        if out.len() * 2 <= g.len() || b >= K {
            break out;
        }
        b += 1;
    };
    // Span balancing: move whole sub-groups from the largest to the smallest group.
    let size = |n: &Vec<Vec<usize>>| n.iter().map(Vec::len).sum::<usize>();
    loop {
        let big = (0..next.len()).max_by_key(|&i| (size(&next[i]), usize::MAX - i));
        let small = (0..next.len()).min_by_key(|&i| (size(&next[i]), i));
        let (Some(big), Some(small)) = (big, small) else {
            break;
        };
        let span = size(&next[big]) - size(&next[small]);
        if span <= T_SPAN || next[big].len() < 2 {
            break;
        }
        // A sub-group that narrows the span: smaller than it; the one closest to the target.
        let worst = |o: &Vec<usize>| {
            next[small]
                .iter()
                .flatten()
                .flat_map(|&y| o.iter().map(move |&x| d[x * p + y].max(d[y * p + x])))
                .max()
                .unwrap_or(0)
        };
        let Some(k) = (0..next[big].len())
            .filter(|&k| next[big][k].len() < span)
            .min_by_key(|&k| (worst(&next[big][k]), next[big][k].len(), k))
        else {
            break;
        };
        let moved = next[big].remove(k);
        next[small].push(moved);
    }
    let mut flat: Vec<Vec<usize>> = next
        .into_iter()
        .map(|n| {
            let mut v: Vec<usize> = n.into_iter().flatten().collect();
            v.sort_unstable();
            v
        })
        .collect();
    flat.sort();
    flat
}

/// Largest exact search of [`best_path`] (2^p · p² steps per bandwidth threshold).
const EXACT_MAX: usize = 12;

/// An order of all workers starting at `start` that maximises the smallest pair bandwidth
/// along it (the bottleneck of a pipelined chain), ties broken by the least Σ M over its
/// links (M for [`REF_BYTES`], the slower direction);
/// with `cycle` the link from the last back to `start` counts too (a ring). Exact up to
/// [`EXACT_MAX`] workers (dynamic programming over subsets per threshold), greedy beyond
/// (always the fastest next link).
/// The search runs once per model, start and `cycle` ([`NetModel::derived`]).
pub fn best_path(net: &NetModel, start: usize, cycle: bool) -> Vec<usize> {
    let key = ("best_path", (start as u64) << 1 | cycle as u64);
    net.derived(key, |net| search_best_path(net, start, cycle))
        .to_vec()
}

fn search_best_path(net: &NetModel, start: usize, cycle: bool) -> Vec<usize> {
    let p = net.workers();
    if p <= 2 {
        return (0..p).map(|i| (start + i) % p).collect();
    }
    // Undirected pipelines: a link counts at the slower of its two directions.
    let bw = |a: usize, b: usize| net.bandwidth(a, b).min(net.bandwidth(b, a));
    if p > EXACT_MAX {
        let mut order = vec![start];
        let mut left: Vec<usize> = (0..p).filter(|&x| x != start).collect();
        while !left.is_empty() {
            let last = *order.last().expect("start");
            let k = (0..left.len())
                .max_by(|&a, &b| {
                    bw(last, left[a])
                        .total_cmp(&bw(last, left[b]))
                        .then(left[b].cmp(&left[a]))
                })
                .expect("not empty");
            order.push(left.remove(k));
        }
        return order;
    }
    let mut thresholds: Vec<f64> = (0..p)
        .flat_map(|a| (0..p).filter(move |&b| b != a).map(move |b| (a, b)))
        .map(|(a, b)| bw(a, b))
        .collect();
    thresholds.sort_by(|a, b| b.total_cmp(a));
    thresholds.dedup();
    for t in thresholds {
        if let Some(order) = least_cost_path(net, start, cycle, |a, b| bw(a, b) >= t) {
            return order;
        }
    }
    unreachable!("the lowest threshold admits every link")
}

/// The Hamiltonian path from `start` (or cycle) of least Σ M over the links `ok` allows.
fn least_cost_path(
    net: &NetModel,
    start: usize,
    cycle: bool,
    ok: impl Fn(usize, usize) -> bool,
) -> Option<Vec<usize>> {
    let p = net.workers();
    let full = (1usize << p) - 1;
    let lat = |a: usize, b: usize| net.cost(a, b, REF_BYTES).max(net.cost(b, a, REF_BYTES));
    let mut cost = vec![f64::INFINITY; (1 << p) * p];
    let mut from = vec![usize::MAX; (1 << p) * p];
    cost[(1 << start) * p + start] = 0.0;
    for mask in 1..=full {
        if mask & (1 << start) == 0 {
            continue;
        }
        for last in 0..p {
            let c = cost[mask * p + last];
            if !c.is_finite() {
                continue;
            }
            for nx in (0..p).filter(|&n| mask & (1 << n) == 0 && ok(last, n)) {
                let (m2, c2) = (mask | 1 << nx, c + lat(last, nx));
                if c2 < cost[m2 * p + nx] {
                    cost[m2 * p + nx] = c2;
                    from[m2 * p + nx] = last;
                }
            }
        }
    }
    let end = (0..p)
        .filter(|&e| cost[full * p + e].is_finite())
        .filter(|&e| !cycle || e == start || ok(e, start))
        .min_by(|&a, &b| {
            let close = |e: usize| if cycle { lat(e, start) } else { 0.0 };
            (cost[full * p + a] + close(a))
                .total_cmp(&(cost[full * p + b] + close(b)))
                .then(a.cmp(&b))
        })?;
    let (mut order, mut mask, mut at) = (vec![end], full, end);
    while at != start {
        let prev = from[mask * p + at];
        mask &= !(1 << at);
        at = prev;
        order.push(at);
    }
    order.reverse();
    Some(order)
}

/// The hierarchy-based chain from `root`: every group of every level is a contiguous stretch,
/// entered at its best-connected member. Recursively, a group's sub-groups follow one another
/// starting with the one holding the entry; the next sub-group is the one whose best entry
/// link from the current end of the chain is fastest.
pub fn hierarchy_chain(h: &Hierarchy, net: &NetModel, root: usize) -> Vec<usize> {
    let top = h.levels.len() - 1;
    let mut order = Vec::with_capacity(h.workers());
    visit(h, net, top, h.group_of(top, root), root, &mut order);
    order
}

fn visit(
    h: &Hierarchy,
    net: &NetModel,
    level: usize,
    g: usize,
    entry: usize,
    out: &mut Vec<usize>,
) {
    if level == 0 {
        out.push(entry);
        return;
    }
    let members = &h.levels[level][g];
    let mut subs: Vec<usize> = (0..h.levels[level - 1].len())
        .filter(|&s| members.contains(&h.levels[level - 1][s][0]))
        .collect();
    let first = h.group_of(level - 1, entry);
    subs.retain(|&s| s != first);
    visit(h, net, level - 1, first, entry, out);
    while !subs.is_empty() {
        let tail = *out.last().expect("the entry is in");
        let (k, e) = subs
            .iter()
            .enumerate()
            .flat_map(|(k, &s)| h.levels[level - 1][s].iter().map(move |&x| (k, x)))
            .max_by(|&(ka, a), &(kb, b)| {
                net.bandwidth(tail, a)
                    .total_cmp(&net.bandwidth(tail, b))
                    .then(kb.cmp(&ka))
                    .then(b.cmp(&a))
            })
            .expect("sub-groups are not empty");
        let s = subs.remove(k);
        visit(h, net, level - 1, s, e, out);
    }
}

/// Up to this many workers [`best_broadcast_tree`] tries every spanning tree ((p − 1)^(p − 1)
/// parent choices at p = 8 before the cut-off; measured at most 2.2 ms once per model and root).
pub const TREE_EXACT_MAX: usize = 8;

/// The pipelined broadcast tree from `root` of least predicted time for a large table: every
/// worker forwards each chunk to its children one after the other, so the stream runs at the
/// pace of the slowest worker, Σ over its children of n/B(worker, child) (a root feeding two
/// children over fast links beats a chain that must cross one slow link), plus the time the
/// first chunk needs to reach the deepest worker (`costs::predict_broadcast`'s formula, at
/// 16 MiB in 256 KiB chunks). Every spanning tree is tried up to [`TREE_EXACT_MAX`] workers;
/// beyond, the chain of [`best_path`]. Once per model and root ([`NetModel::derived`]).
pub fn best_broadcast_tree(net: &NetModel, root: usize) -> Tree {
    net.derived(("best_broadcast_tree", root as u64), |net| {
        search_broadcast_tree(net, root)
    })
    .as_ref()
    .clone()
}

fn search_broadcast_tree(net: &NetModel, root: usize) -> Tree {
    const N: f64 = (16u64 << 20) as f64;
    const CHUNK: u64 = 256 << 10;
    let p = net.workers();
    let chain = chain_tree(&best_path(net, root, false));
    if p <= 2 || p > TREE_EXACT_MAX {
        return chain;
    }
    // The time the first chunk needs to reach the deepest worker of the tree given by `parent`
    // (None when it has a cycle).
    let fill = |parent: &[usize]| -> Option<f64> {
        let mut depth_time = vec![f64::NAN; p];
        depth_time[root] = 0.0;
        for x in (0..p).filter(|&x| x != root) {
            // Walk up to the root (or a cycle: more than p steps).
            let (mut y, mut path) = (x, Vec::new());
            while depth_time[y].is_nan() {
                path.push(y);
                y = parent[y];
                if path.len() > p {
                    return None;
                }
            }
            for &z in path.iter().rev() {
                depth_time[z] = depth_time[parent[z]] + net.cost(parent[z], z, CHUNK);
            }
        }
        Some(depth_time.iter().fold(0.0f64, |a, &b| a.max(b)))
    };
    let others: Vec<usize> = (0..p).filter(|&x| x != root).collect();
    // The chain is the tree to beat: its pace (the slowest worker's sending time) plus fill.
    let best: Vec<usize> = (0..p).map(|x| chain.parent[x].unwrap_or(root)).collect();
    let mut chain_load = vec![0.0f64; p];
    for &x in &others {
        chain_load[best[x]] += N / net.bandwidth(best[x], x);
    }
    let best_cost = slowest(&chain_load) + fill(&best).expect("a chain is a tree");
    // Depth-first over every non-root's parent (any other worker), keeping each worker's
    // sending load, cut off as soon as one load alone reaches the best cost so far (the pace is
    // at least that).
    struct Search<'a> {
        net: &'a NetModel,
        others: &'a [usize],
        parent: Vec<usize>,
        load: Vec<f64>,
        best: Vec<usize>,
        best_cost: f64,
    }
    fn slowest(load: &[f64]) -> f64 {
        load.iter().fold(0.0f64, |a, &b| a.max(b))
    }
    fn descend(s: &mut Search<'_>, i: usize, fill: &dyn Fn(&[usize]) -> Option<f64>) {
        if i == s.others.len() {
            if let Some(c) = fill(&s.parent).map(|f| slowest(&s.load) + f) {
                if c < s.best_cost * (1.0 - 1e-9) {
                    s.best_cost = c;
                    s.best.clone_from(&s.parent);
                }
            }
            return;
        }
        let x = s.others[i];
        for u in (0..s.parent.len()).filter(|&u| u != x) {
            let add = N / s.net.bandwidth(u, x);
            if s.load[u] + add >= s.best_cost {
                continue;
            }
            s.load[u] += add;
            s.parent[x] = u;
            descend(s, i + 1, fill);
            s.load[u] -= add;
        }
    }
    let mut search = Search {
        net,
        others: &others,
        parent: vec![root; p],
        load: vec![0.0; p],
        best,
        best_cost,
    };
    descend(&mut search, 0, &fill);
    let best = search.best;
    let mut t = Tree::empty(p);
    for &x in &others {
        t.parent[x] = Some(best[x]);
        t.children[best[x]].push(x);
    }
    // A worker sends to its slower children first.
    for u in 0..p {
        let kids = &mut t.children[u];
        kids.sort_by(|&a, &b| net.bandwidth(u, a).total_cmp(&net.bandwidth(u, b)));
    }
    t
}

/// The distance-ordered tree of CMPI Algorithm 4 (gather; scatter uses it reversed) from
/// `root`: distance by distance, the ranks already attached (UP) each take one subtree of the
/// ranks at the next distance (DOWN, one subtree per sub-group of that distance; the largest
/// split in two while DOWN is shorter than UP, as in the paper); a subtree is entered at its
/// member with the fastest link to the UP rank it hangs from, and built the same way inside.
/// When DOWN is longer than UP, the paper merges the smallest subtrees, which inside a flat
/// group (all at one distance) makes a chain; here the rest waits for the next round instead,
/// with the ranks just attached joining UP (a binomial doubling inside a flat group).
pub fn distance_tree(h: &Hierarchy, net: &NetModel, root: usize) -> Tree {
    let p = h.workers();
    let mut t = Tree::empty(p);
    construct(h, net, root, (0..p).collect(), &mut t);
    t
}

fn construct(h: &Hierarchy, net: &NetModel, root: usize, members: Vec<usize>, t: &mut Tree) {
    let mut up = vec![root];
    // Each member's distance from the root, computed once (O(levels) each).
    let dist_of: Vec<usize> = members.iter().map(|&x| h.distance(root, x)).collect();
    let top = dist_of.iter().copied().max().unwrap_or(0);
    // Where each group of the level below already has its subtree in DOWN.
    let mut slot: FastMap<usize, usize> = FastMap::default();
    for dist in 1..=top {
        // DOWN: the members at this distance, one subtree per group of level dist − 1, in
        // the order their first members come.
        let mut down: Vec<Vec<usize>> = Vec::new();
        slot.clear();
        for (&x, _) in members.iter().zip(&dist_of).filter(|&(_, &d)| d == dist) {
            let g = h.group_of(dist - 1, x);
            match slot.get(&g) {
                Some(&k) => down[k].push(x),
                None => {
                    slot.insert(g, down.len());
                    down.push(vec![x]);
                }
            }
        }
        if down.is_empty() {
            continue;
        }
        // Rounds: each rank of UP takes one subtree, the ranks attached join UP.
        while !down.is_empty() {
            while down.len() < up.len() {
                let (k, big) = down
                    .iter()
                    .enumerate()
                    .max_by_key(|(k, s)| (s.len(), usize::MAX - k))
                    .map(|(k, s)| (k, s.len()))
                    .expect("not empty");
                if big < 2 {
                    break;
                }
                let s = down.remove(k);
                let (a, b) = s.split_at(big / 2);
                down.push(a.to_vec());
                down.push(b.to_vec());
            }
            // Largest subtrees to the ranks attached first (nearest the root).
            down.sort_by_key(|s| (usize::MAX - s.len(), s[0]));
            let now: Vec<Vec<usize>> = down.drain(..up.len().min(down.len())).collect();
            let mut attached = Vec::new();
            for (u, s) in up.iter().copied().zip(now) {
                let d = *s
                    .iter()
                    .max_by(|&&a, &&b| {
                        net.bandwidth(a, u)
                            .min(net.bandwidth(u, a))
                            .total_cmp(&net.bandwidth(b, u).min(net.bandwidth(u, b)))
                            .then(b.cmp(&a))
                    })
                    .expect("subtrees are not empty");
                t.parent[d] = Some(u);
                t.children[u].push(d);
                attached.extend(s.iter().copied());
                construct(h, net, d, s, t);
            }
            up.extend(attached);
        }
    }
}

/// The leader of every group of every level (`[level][group]`) for an operation rooted at
/// `root` (CMPI Algorithm 3): level 0 is the worker itself; a group's leader is chosen among its
/// sub-groups' leaders by [`Hierarchy::leader`] (the root when it is one of them).
pub fn leaders(h: &Hierarchy, net: &NetModel, root: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![h.levels[0].iter().map(|g| g[0]).collect()];
    for level in 1..h.levels.len() {
        let below = &out[level - 1];
        let row = h.levels[level]
            .iter()
            .map(|g| {
                let subs: Vec<usize> = below.iter().copied().filter(|l| g.contains(l)).collect();
                Hierarchy::leader(net, &subs, root)
            })
            .collect();
        out.push(row);
    }
    out
}

/// The hierarchical reduce tree of CMPI Algorithm 3 from `root`: level by level from the bottom,
/// the leaders of the sub-groups of each group reduce to the group's leader along a binomial
/// tree (the existing algorithm inside a group, as the paper uses MPI_Reduce there) over the
/// leader first and the others by increasing M to it. A worker's children are listed in the
/// order it receives from them (lower levels first, then binomial rounds).
pub fn leader_tree(h: &Hierarchy, net: &NetModel, root: usize) -> Tree {
    let mut t = Tree::empty(h.workers());
    let lead = leaders(h, net, root);
    for level in 1..h.levels.len() {
        for (gi, g) in h.levels[level].iter().enumerate() {
            let top = lead[level][gi];
            let mut list: Vec<usize> = lead[level - 1]
                .iter()
                .copied()
                .filter(|l| g.contains(l) && *l != top)
                .collect();
            list.sort_by(|&a, &b| {
                net.cost(a, top, REF_BYTES)
                    .total_cmp(&net.cost(b, top, REF_BYTES))
                    .then(a.cmp(&b))
            });
            list.insert(0, top);
            // The group leader (list[0]) gets its parent, if any, at a higher level.
            t.add_binomial(&list);
        }
    }
    t
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::collective::trees::tests::check_tree;

    /// A symmetric model with pair bandwidth `bw(i, j)` and 50 µs latency.
    fn model(p: usize, bw: impl Fn(usize, usize) -> f64) -> NetModel {
        let mut b = vec![f64::INFINITY; p * p];
        for i in 0..p {
            for j in (0..p).filter(|&j| j != i) {
                b[i * p + j] = bw(i.min(j), i.max(j));
            }
        }
        NetModel::new(p, vec![5e-5; p * p], b).unwrap()
    }

    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    /// Four workers where every chain from 0 crosses a slow link (6 MB/s; worker 2 is fast
    /// only to 0, the other links 24 MB/s).
    pub(crate) fn slow_link_model() -> NetModel {
        let text = "workers 4\nlatency_s\n0 1e-4 1e-4 1e-4\n1e-4 0 1e-4 1e-4\n1e-4 1e-4 0 1e-4\n\
                    1e-4 1e-4 1e-4 0\nbandwidth_Bps\ninf 24e6 24e6 24e6\n24e6 inf 6e6 24e6\n\
                    24e6 6e6 inf 6e6\n24e6 24e6 6e6 inf\n";
        NetModel::parse(text, "test").unwrap()
    }

    /// Pair rates R/d with d in {1, 2, 4} from a seed, like `netns-cluster.sh --uneven`.
    pub(crate) fn uneven(p: usize, seed: u64) -> NetModel {
        let r = 25e6;
        model(p, |a, b| {
            let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (a * 64 + b + 1) as u64;
            for _ in 0..3 {
                xorshift(&mut s);
            }
            r / [1.0, 2.0, 4.0][(xorshift(&mut s) % 3) as usize]
        })
    }

    /// Models with one to four levels: uniform, racks behind slow uplinks, racks with uneven
    /// pairs inside, uneven pairs everywhere.
    fn models() -> Vec<NetModel> {
        let mut out = Vec::new();
        for p in [1, 2, 3, 5, 8, 13, 32] {
            out.push(NetModel::uniform(p, 1e-4, 25e6));
        }
        for (p, racks) in [(8, 2), (9, 3), (24, 4), (40, 5)] {
            let rack = move |i: usize| i * racks / p;
            out.push(model(p, |a, b| if rack(a) == rack(b) { 25e6 } else { 6e6 }));
            let mut s = p as u64;
            let inside: Vec<f64> = (0..p * p)
                .map(|_| [25e6, 6e6][(xorshift(&mut s) % 2) as usize])
                .collect();
            out.push(model(p, |a, b| {
                if rack(a) == rack(b) {
                    inside[a * p + b]
                } else {
                    3e6
                }
            }));
        }
        for seed in 1..=8 {
            for p in [4, 7, 12, 16, 29] {
                out.push(uneven(p, seed));
            }
        }
        out
    }

    /// Every root's distance tree of `net`, as bytes: each rank's parent (or u32::MAX), then
    /// its children, per root; its FNV-1a hash.
    fn fingerprint(net: &NetModel) -> u64 {
        let h = Hierarchy::build(net);
        let mut bytes = Vec::new();
        for root in 0..net.workers() {
            let t = distance_tree(&h, net, root);
            for (q, kids) in t.parent.iter().zip(&t.children) {
                bytes.extend(q.map_or(u32::MAX, |q| q as u32).to_le_bytes());
                bytes.extend((kids.len() as u32).to_le_bytes());
                kids.iter()
                    .for_each(|&k| bytes.extend((k as u32).to_le_bytes()));
            }
        }
        crate::util::hash::fnv1a64(&bytes)
    }

    /// [`fingerprint`] of each of [`models`] as the build before the group index made it
    /// (every group lookup a scan of the level's groups; recorded at 81580c5, the trees
    /// printed by this test's predecessor): the index changed the speed, not the trees.
    const RECORDED: [u64; 55] = [
        0x4ebaad864bc6f2e1,
        0xb15e226302f05cfd,
        0x80c3d42bc1b718ab,
        0x05baccbe3c06e57e,
        0xf83baf88600bdb84,
        0xc69ab1d2cb6e615d,
        0x4e7fe3fd1fcbb3dc,
        0x086d8fadd5020d4d,
        0x086d8fadd5020d4d,
        0x549c4c5de7238f15,
        0x549c4c5de7238f15,
        0xfe141ef2eccb24d5,
        0x7de6690d1ba9d5cc,
        0xf1ba8254adce1f54,
        0x30fd55a5417e57a2,
        0x0aa8dc9a13c9dbc4,
        0x687425a8ad7a93ff,
        0xfb9f8bff715ae9e0,
        0x989e03ff8cb4763d,
        0x0acd58ca3638f62f,
        0x0aa8dc9a13c9dbc4,
        0x29933cd0ff7b5957,
        0xb61e807f25ac32d1,
        0xd4ff1fc04f1009da,
        0xc6c68e764a99f388,
        0x0aa8dc9a13c9dbc4,
        0x8b0677353311b567,
        0xc145a19da9cea475,
        0x656ffaea11538524,
        0x3cd8e583d5782bc7,
        0x170ddd962478ae75,
        0xfcac68041c0daa00,
        0x3bc82181f586bb1a,
        0x29017b140c8c198b,
        0xb7a85267ba98a7d5,
        0x170ddd962478ae75,
        0x5acbfb690e6dc410,
        0x67a63dff915d5dbe,
        0x0ec416bdf0e307ee,
        0xeca21e09ed82ba56,
        0xc8479d7cc3f44935,
        0xc09eb6338f706221,
        0xc25d633c4af7048e,
        0x61eae3db6f9fa1e6,
        0x60db6e536f14a61f,
        0x170ddd962478ae75,
        0xaa1b04af766b8048,
        0xada77ba10d7a131b,
        0x85a7e6b200380c98,
        0x088c291bc9cae21f,
        0x170ddd962478ae75,
        0x7c8068262963bf30,
        0xda77a0fe7f1832da,
        0xc1717e6775d85cd0,
        0x286ea26f9624aa25,
    ];

    #[test]
    fn distance_trees_are_the_ones_recorded_before_the_index() {
        let got: Vec<u64> = models().iter().map(fingerprint).collect();
        assert_eq!(got, RECORDED);
        for net in models() {
            let (h, p) = (Hierarchy::build(&net), net.workers());
            let scan = |l: usize, a: usize| h.levels[l].iter().position(|g| g.contains(&a));
            for a in 0..p {
                for l in 0..h.levels.len() {
                    assert_eq!(Some(h.group_of(l, a)), scan(l, a), "p={p}");
                }
                for b in 0..p {
                    let lca = (0..h.levels.len()).find(|&l| scan(l, a) == scan(l, b));
                    assert_eq!(Some(h.distance(a, b)), lca, "p={p}");
                }
            }
            for root in 0..p {
                check_tree(&distance_tree(&h, &net, root), root);
            }
        }
    }

    #[test]
    fn a_uniform_network_is_one_group() {
        for p in 1..=9 {
            let h = Hierarchy::build(&NetModel::uniform(p, 1e-4, 25e6));
            assert_eq!(h.levels.len(), if p == 1 { 1 } else { 2 }, "p={p}");
            assert_eq!(h.levels.last().unwrap(), &vec![(0..p).collect::<Vec<_>>()]);
            if p > 1 {
                assert_eq!(h.distance(0, p - 1), 1);
            }
        }
        // Noise below the uniform spread does not split it either.
        let h = Hierarchy::build(&model(6, |a, b| 25e6 * (1.0 + 0.01 * (a + b) as f64)));
        assert_eq!(h.levels.len(), 2);
    }

    #[test]
    fn racks_behind_a_slow_uplink_are_the_groups() {
        for (p, racks) in [(4, 2), (8, 2), (8, 4), (9, 3)] {
            let rack = |i: usize| i * racks / p;
            let net = model(p, |a, b| if rack(a) == rack(b) { 25e6 } else { 6e6 });
            let h = Hierarchy::build(&net);
            let want: Vec<Vec<usize>> = (0..racks)
                .map(|k| (0..p).filter(|&i| rack(i) == k).collect())
                .collect();
            assert_eq!(h.levels[1], want, "p={p} racks={racks}");
            assert_eq!(h.levels.len(), 3);
            assert_eq!(h.distance(0, p - 1), 2);
            assert_eq!(h.distance(0, 1), 1);
            // Leaders: the root in its own group, the best-connected member elsewhere.
            assert_eq!(Hierarchy::leader(&net, &want[1], 0), want[1][0]);
            assert_eq!(Hierarchy::leader(&net, &want[1], want[1][1]), want[1][1]);
            // The hierarchy chain crosses the uplink once, the tree keeps racks together.
            let order = hierarchy_chain(&h, &net, 0);
            let crossings = order
                .windows(2)
                .filter(|w| rack(w[0]) != rack(w[1]))
                .count();
            assert_eq!(crossings, racks - 1, "{order:?}");
            let t = distance_tree(&h, &net, 0);
            check_tree(&t, 0);
            // The root's rack hangs from the root inside the rack.
            for r in (0..p).filter(|&r| rack(r) == 0) {
                let mut at = r;
                while let Some(q) = t.parent[at] {
                    assert_eq!(rack(q), 0, "p={p} racks={racks} tree {t:?}");
                    at = q;
                }
            }
            // The reduce tree crosses the uplink once per rack but the root's.
            let lt = leader_tree(&h, &net, 0);
            check_tree(&lt, 0);
            let cross = (0..p)
                .filter(|&r| lt.parent[r].is_some_and(|q| rack(q) != rack(r)))
                .count();
            assert_eq!(cross, racks - 1, "{lt:?}");
        }
    }

    #[test]
    fn uneven_groups_are_joined_by_their_fast_links() {
        // Two cliques of fast links, not in rank order; slow between them.
        let a = [0, 2, 5, 7];
        let same = |x: usize, y: usize| a.contains(&x) == a.contains(&y);
        let net = model(8, |x, y| if same(x, y) { 25e6 } else { 6.25e6 });
        let h = Hierarchy::build(&net);
        assert_eq!(h.levels[1], vec![vec![0, 2, 5, 7], vec![1, 3, 4, 6]]);
        for x in 0..8 {
            for y in 0..8 {
                let want = if x == y {
                    0
                } else if same(x, y) {
                    1
                } else {
                    2
                };
                assert_eq!(h.distance(x, y), want);
            }
        }
        // The best chain crosses between the cliques once.
        let order = best_path(&net, 3, false);
        assert_eq!(order[0], 3);
        assert_eq!(
            order.windows(2).filter(|w| !same(w[0], w[1])).count(),
            1,
            "{order:?}"
        );
    }

    /// Four workers where every chain from 0 crosses a slow link (worker 2 is fast only to 0):
    /// the best tree feeds 2 straight from the root and 3 through 1 (or 1 through 3), never over
    /// a slow link (`costs` checks it predicts half the chain's time); on a uniform model no
    /// tree beats the chain.
    #[test]
    fn the_broadcast_tree_avoids_slow_links_a_chain_must_cross() {
        let m = slow_link_model();
        let t = best_broadcast_tree(&m, 0);
        assert_eq!(t.parent[0], None);
        assert_eq!(t.parent[2], Some(0));
        assert_eq!(t.children[0].len(), 2, "{t:?}");
        assert!(t.subtree(0).len() == 4);
        for x in 1..4 {
            let q = t.parent[x].unwrap();
            assert!(m.bandwidth(q, x) > 20e6, "slow link {q}->{x} in {t:?}");
        }
        let flat = NetModel::uniform(6, 1e-4, 24e6);
        let t = best_broadcast_tree(&flat, 3);
        assert!(t.children.iter().all(|k| k.len() <= 1), "{t:?}");
        assert_eq!(t.subtree(3).len(), 6);
    }

    #[test]
    fn best_paths_are_permutations_with_the_largest_bottleneck() {
        let bottleneck = |net: &NetModel, o: &[usize], cycle: bool| {
            let mut links: Vec<(usize, usize)> = o.windows(2).map(|w| (w[0], w[1])).collect();
            if cycle && o.len() > 1 {
                links.push((o[o.len() - 1], o[0]));
            }
            links
                .iter()
                .map(|&(a, b)| net.bandwidth(a, b))
                .fold(f64::INFINITY, f64::min)
        };
        for seed in 1..=6 {
            for p in 1..=7 {
                let net = uneven(p, seed);
                for cycle in [false, true] {
                    let o = best_path(&net, p / 2, cycle);
                    let mut s = o.clone();
                    s.sort_unstable();
                    assert_eq!(s, (0..p).collect::<Vec<_>>());
                    assert_eq!(o[0], p / 2);
                    // Brute force over every order from the same start.
                    let mut best = 0.0f64;
                    let mut rest: Vec<usize> = (0..p).filter(|&x| x != p / 2).collect();
                    permute(&mut rest, 0, &mut |perm| {
                        let mut full = vec![p / 2];
                        full.extend_from_slice(perm);
                        best = best.max(bottleneck(&net, &full, cycle));
                    });
                    if p == 1 {
                        best = f64::INFINITY;
                    }
                    assert_eq!(bottleneck(&net, &o, cycle), best, "p={p} seed={seed}");
                }
            }
        }
    }

    fn permute(v: &mut Vec<usize>, k: usize, f: &mut impl FnMut(&[usize])) {
        if k == v.len() {
            f(v);
            return;
        }
        for i in k..v.len() {
            v.swap(k, i);
            permute(v, k + 1, f);
            v.swap(k, i);
        }
    }

    #[test]
    fn hierarchies_nest_halve_and_are_deterministic() {
        for seed in 1..=20 {
            for p in 1..=16 {
                let net = uneven(p, seed);
                let h = Hierarchy::build(&net);
                assert_eq!(h, Hierarchy::build(&net.clone()), "deterministic");
                for l in 1..h.levels.len() {
                    let (lo, hi) = (&h.levels[l - 1], &h.levels[l]);
                    assert!(hi.len() * 2 <= lo.len(), "p={p} seed={seed}: {h:?}");
                    for g in lo {
                        // Every lower group lies inside one upper group.
                        assert!(hi.iter().any(|u| g.iter().all(|x| u.contains(x))));
                    }
                    let mut all: Vec<usize> = hi.iter().flatten().copied().collect();
                    all.sort_unstable();
                    assert_eq!(all, (0..p).collect::<Vec<_>>());
                }
                for root in [0, p - 1] {
                    check_tree(&distance_tree(&h, &net, root), root);
                    check_tree(&leader_tree(&h, &net, root), root);
                    let mut c = hierarchy_chain(&h, &net, root);
                    assert_eq!(c[0], root);
                    c.sort_unstable();
                    assert_eq!(c, (0..p).collect::<Vec<_>>());
                }
            }
        }
    }
}
