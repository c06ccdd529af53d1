//! Tree shapes: the [`Tree`] type and the trees and orders that need no network model
//! (binomial, binary, delegate, chain, star, the ranks from a root, a seeded random order).
//! The network-aware orders and trees are in `hierarchy`; which tree each algorithm runs on is
//! in `shapes`.

/// A communication tree: the parent of every rank (None at the root) and its children in
/// the order they are attached.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    pub parent: Vec<Option<usize>>,
    pub children: Vec<Vec<usize>>,
}

impl Tree {
    /// `p` ranks, no links yet.
    pub fn empty(p: usize) -> Tree {
        Tree {
            parent: vec![None; p],
            children: vec![Vec::new(); p],
        }
    }

    /// Links `list` (`list[0]` its root) as the binomial reduce tree of
    /// [`reduce_tree`], children in receiving order.
    pub fn add_binomial(&mut self, list: &[usize]) {
        let n = list.len();
        for (v, &x) in list.iter().enumerate() {
            let s = reduce_tree(v, n, 0);
            self.parent[x] = s.parent.map(|(_, q)| list[q]);
            self.children[x].extend(s.children.into_iter().map(|(_, c)| list[c]));
        }
    }

    /// Every rank below `r` (itself included).
    pub fn subtree(&self, r: usize) -> Vec<usize> {
        let mut out = vec![r];
        let mut i = 0;
        while i < out.len() {
            out.extend(self.children[out[i]].iter().copied());
            i += 1;
        }
        out
    }
}

/// The ranks in order from `root`: root, root + 1, … (mod p).
pub fn from_root(p: usize, root: usize) -> Vec<usize> {
    (0..p).map(|i| (root + i) % p).collect()
}

/// Every worker a child of `root` (the direct gather and the parallel scatter as a tree).
pub fn star(p: usize, root: usize) -> Tree {
    let mut t = Tree::empty(p);
    for r in (0..p).filter(|&r| r != root) {
        t.parent[r] = Some(root);
        t.children[root].push(r);
    }
    t
}

/// The tree of a chain `order` (each worker's child is the next one).
pub fn chain_tree(order: &[usize]) -> Tree {
    let mut t = Tree::empty(order.len());
    for w in order.windows(2) {
        t.parent[w[1]] = Some(w[0]);
        t.children[w[0]].push(w[1]);
    }
    t
}

/// The binomial tree of `p` ranks from `root` (relative rank v sends to v − lowbit(v)).
pub fn binomial_tree(p: usize, root: usize) -> Tree {
    let mut t = Tree::empty(p);
    t.add_binomial(&from_root(p, root));
    t
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
pub fn binary_place(top: usize, v: usize, p: usize) -> (Option<usize>, usize) {
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

/// The children of the [`binary_tree`] node `v` whose subtree ends at `end`, each with the end
/// of its own subtree: the owners after `v` split in two halves, the larger (second) half
/// first. The one place that rule is written: [`binary_tree`] and [`binary_place`] follow it.
pub fn binary_children(v: usize, end: usize) -> impl DoubleEndedIterator<Item = (usize, usize)> {
    let mid = v + 1 + (end - v - 1) / 2;
    [(mid, end), (v + 1, mid)]
        .into_iter()
        .filter(|(a, b)| a < b)
}

/// The delegate tree (`GatherAlgorithm::Delegate`) over `order` (its first rank the root): the root's
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

/// The ranks in a seeded random order after `root` (the random-chain broadcast's baseline for
/// rack awareness).
pub fn random_order(p: usize, root: usize, seed: u64) -> Vec<usize> {
    let mut rest: Vec<usize> = (0..p).filter(|&x| x != root).collect();
    let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
    for i in (1..rest.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        rest.swap(i, (s % (i as u64 + 1)) as usize);
    }
    std::iter::once(root).chain(rest).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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

    pub(crate) fn check_tree(t: &Tree, root: usize) {
        let p = t.parent.len();
        assert_eq!(t.parent[root], None);
        let mut sub = t.subtree(root);
        sub.sort_unstable();
        assert_eq!(sub, (0..p).collect::<Vec<_>>(), "every rank once");
        for (r, kids) in t.children.iter().enumerate() {
            for &c in kids {
                assert_eq!(t.parent[c], Some(r));
            }
        }
    }
}
