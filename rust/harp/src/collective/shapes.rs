//! Which tree each tree-shaped algorithm runs on: the broadcast trees (over an order of the
//! workers, or the network model's best tree), the trees of the pipelined reduces, and the
//! distance-ordered tree of the context's model.

use super::algorithm::{BroadcastAlgorithm, ReduceAlgorithm};
use super::ctx::Ctx;
use super::hierarchy::{self, Hierarchy};
use super::trees::{self, Tree};
use crate::netmodel::NetModel;
use crate::topology::Topology;

/// The order of the workers the tree of `algo` from `root` is built on (root first).
pub fn order(
    algo: BroadcastAlgorithm,
    topo: &Topology,
    net: Option<&NetModel>,
    p: usize,
    root: usize,
) -> Vec<usize> {
    match (algo, net) {
        (BroadcastAlgorithm::NetChain, Some(m)) => hierarchy::best_path(m, root, false),
        (BroadcastAlgorithm::NetHierarchy, Some(m)) => {
            hierarchy::hierarchy_chain(&Hierarchy::of(m), m, root)
        }
        (BroadcastAlgorithm::NetTree, Some(m)) => hierarchy::best_path(m, root, false),
        (
            BroadcastAlgorithm::Chain
            | BroadcastAlgorithm::NetChain
            | BroadcastAlgorithm::NetHierarchy
            | BroadcastAlgorithm::NetTree
            | BroadcastAlgorithm::ScatterAllgather,
            _,
        ) => topo.chain_order(root),
        (BroadcastAlgorithm::ChainRandom(seed), _) => trees::random_order(p, root, seed),
        _ => trees::from_root(p, root),
    }
}

/// Parent and children of `r` of `p` workers in the broadcast tree of `algo` from `root`.
pub fn tree(
    algo: BroadcastAlgorithm,
    topo: &Topology,
    net: Option<&NetModel>,
    r: usize,
    p: usize,
    root: usize,
) -> (Option<usize>, Vec<usize>) {
    if let (BroadcastAlgorithm::NetTree, Some(m)) = (algo, net) {
        let t = hierarchy::best_broadcast_tree(m, root);
        return (t.parent[r], t.children[r].clone());
    }
    tree_in(algo, &order(algo, topo, net, p, root), r)
}

/// The whole broadcast tree of `algo` from `root` ([`tree`] for every rank).
pub fn broadcast_tree(
    algo: BroadcastAlgorithm,
    topo: &Topology,
    net: Option<&NetModel>,
    p: usize,
    root: usize,
) -> Tree {
    let mut t = Tree::empty(p);
    for r in 0..p {
        (t.parent[r], t.children[r]) = tree(algo, topo, net, r, p, root);
    }
    t
}

/// [`tree`] on an order from [`order`].
pub fn tree_in(algo: BroadcastAlgorithm, order: &[usize], r: usize) -> (Option<usize>, Vec<usize>) {
    let p = order.len();
    let pos = order.iter().position(|&x| x == r).expect("rank in order");
    match algo {
        BroadcastAlgorithm::Auto => unreachable!("Auto is resolved before the tree is built"),
        // (NetTree here only without a model: [`tree`] takes the model's tree.)
        BroadcastAlgorithm::Chain
        | BroadcastAlgorithm::ChainRandom(_)
        | BroadcastAlgorithm::NetChain
        | BroadcastAlgorithm::NetHierarchy
        | BroadcastAlgorithm::NetTree => (
            pos.checked_sub(1).map(|i| order[i]),
            order.get(pos + 1).copied().into_iter().collect(),
        ),
        // The scatter-allgather's first phase: the root sends straight to every worker (its
        // ring is [`order`]'s chain, closed at the root).
        BroadcastAlgorithm::OneByOne | BroadcastAlgorithm::ScatterAllgather => {
            if pos == 0 {
                (None, order[1..].to_vec())
            } else {
                (Some(order[0]), vec![])
            }
        }
        BroadcastAlgorithm::Binomial => {
            // Relative position v: parent v − lowbit(v); children v + 2^k for 2^k < lowbit(v).
            let low = if pos == 0 {
                p.next_power_of_two()
            } else {
                pos & pos.wrapping_neg()
            };
            let parent = (pos != 0).then(|| order[pos - low]);
            let mut kids = Vec::new();
            let mut m = low >> 1;
            while m > 0 {
                if pos + m < p {
                    kids.push(order[pos + m]);
                }
                m >>= 1;
            }
            (parent, kids)
        }
    }
}

/// The tree of a pipelined reduce algorithm (`binary`, `chain`, `net-chain`), else `None`.
pub fn pipelined_tree(
    algo: ReduceAlgorithm,
    topo: &Topology,
    net: Option<&NetModel>,
    p: usize,
    root: usize,
) -> Option<Tree> {
    let chain = match algo {
        ReduceAlgorithm::Binary => return Some(trees::binary_tree(&topo.chain_order(root))),
        ReduceAlgorithm::Chain => BroadcastAlgorithm::Chain,
        ReduceAlgorithm::NetChain => BroadcastAlgorithm::NetChain,
        _ => return None,
    };
    Some(broadcast_tree(chain, topo, net, p, root))
}

/// The distance-ordered tree of the context's model from `root`.
pub fn model_distance_tree(cx: &Ctx<'_>, root: usize) -> Tree {
    let net = cx
        .net
        .as_deref()
        .expect("trees are resolved only with a model");
    hierarchy::distance_tree(&Hierarchy::of(net), net, root)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank is reached exactly once from the root, parents and children agree.
    #[test]
    fn trees_reach_every_rank_once() {
        for p in 1..=33 {
            let racked: String = (0..p).map(|i| format!("h{i}:1 /r{}\n", i % 3)).collect();
            let uneven = hierarchy::tests::uneven(p, p as u64);
            for (topo, net) in [
                (Topology::of_size(p), None),
                (Topology::parse(&racked, "t").unwrap(), None),
                (Topology::of_size(p), (p <= 8).then_some(&uneven)),
            ] {
                for root in 0..p {
                    for algo in [
                        BroadcastAlgorithm::Chain,
                        BroadcastAlgorithm::ChainRandom(p as u64),
                        BroadcastAlgorithm::Binomial,
                        BroadcastAlgorithm::OneByOne,
                        BroadcastAlgorithm::NetChain,
                        BroadcastAlgorithm::NetHierarchy,
                    ] {
                        let t: Vec<_> =
                            (0..p).map(|r| tree(algo, &topo, net, r, p, root)).collect();
                        let mut seen = vec![0; p];
                        let mut todo = vec![root];
                        seen[root] = 1;
                        while let Some(r) = todo.pop() {
                            for &c in &t[r].1 {
                                assert_eq!(t[c].0, Some(r), "{algo:?} p={p} root={root}");
                                seen[c] += 1;
                                todo.push(c);
                            }
                        }
                        assert_eq!(seen, vec![1; p], "{algo:?} p={p} root={root}");
                        assert_eq!(t[root].0, None);
                        let depth = |mut r: usize| {
                            let mut d = 0;
                            while let Some(q) = t[r].0 {
                                r = q;
                                d += 1;
                            }
                            d
                        };
                        let deepest = (0..p).map(depth).max().unwrap();
                        let want = match algo {
                            BroadcastAlgorithm::Binomial => p.ilog2() as usize,
                            BroadcastAlgorithm::OneByOne => usize::from(p > 1),
                            _ => p - 1,
                        };
                        assert_eq!(deepest, want, "{algo:?} p={p} root={root}");
                        if algo == BroadcastAlgorithm::Binomial {
                            let rounds = p.next_power_of_two().trailing_zeros() as usize;
                            assert_eq!(t[root].1.len(), rounds, "p={p}");
                        }
                    }
                }
            }
        }
    }
}
