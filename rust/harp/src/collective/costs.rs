//! The network model's cost predictions: the predicted seconds of every algorithm that runs
//! on a tree, a chain or a ring (α = L(u,v), β = 1/B(u,v) per pair; `NetModel`), which the
//! automatic choices compare (`choose`) and `Worker` logs next to the measured time.

use super::algorithm::{BroadcastAlgorithm, GatherAlgorithm, ScatterAlgorithm};
use super::fluid::intake;
use super::hierarchy::{self, Hierarchy};
use super::relay::{predict_relay, relay_plan_of};
use super::segment::auto_chunk;
use super::shapes;
use super::trees::{self, star, Tree};
use crate::netmodel::NetModel;
use crate::topology::Topology;

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
    if algo == BroadcastAlgorithm::ScatterAllgather {
        return predict_scatter_allgather(net, &shapes::order(algo, topo, Some(net), p, root), n);
    }
    let kids: Vec<Vec<usize>> = if algo == BroadcastAlgorithm::NetTree {
        hierarchy::best_broadcast_tree(net, root).children
    } else {
        let order = shapes::order(algo, topo, Some(net), p, root);
        (0..p).map(|r| shapes::tree_in(algo, &order, r).1).collect()
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

/// Predicted seconds of a scatter-allgather broadcast of `n` bytes around `ring` (root
/// first): the scatter of n/p bytes to each worker, costed as the direct gather
/// ([`predict_tree`] on the star: the root's link shared by its p − 1 transfers), then p − 1
/// ring steps of n/p bytes each at the pace of the ring's slowest link, max_v (α + nβ/p)
/// over the links ring[v] → ring[v+1] (none into the root).
pub fn predict_scatter_allgather(net: &NetModel, ring: &[usize], n: u64) -> f64 {
    let p = ring.len();
    if p < 2 {
        return 0.0;
    }
    let share = n.div_ceil(p as u64);
    let scatter = predict_tree(net, &star(p, ring[0]), ring[0], share, true);
    let step = ring
        .windows(2)
        .map(|w| net.cost(w[0], w[1], share))
        .fold(0.0, f64::max);
    scatter + (p - 1) as f64 * step
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
/// (`pipeline::reduce_pipelined`): every worker takes in n bytes
/// from each child at once, so the stream runs at the pace of the busiest intake (the
/// children's streams sharing it as in [`predict_tree`], all from the start), plus the fill
/// time of the deepest path with chunks of [`auto_chunk`]`(n, p)`
/// bytes.
pub fn predict_pipelined(net: &NetModel, t: &Tree, root: usize, n: u64) -> f64 {
    let pace = (0..t.children.len())
        .map(|u| intake(net, u, t.children[u].iter().map(|&c| (c, 0.0, n))))
        .fold(0.0, f64::max);
    let c = n.min(auto_chunk(n, t.children.len()));
    pace + fill(net, &t.children, root, c, true)
}

/// Predicted seconds of a reduce or gather over `t` with `n` bytes per worker. A worker's
/// children send as soon as they are ready and their bytes arrive at once (the transport reads
/// every connection all the time), sharing the worker's host intake (its host capacity, else
/// B_in(u) = max_c B(c,u)) fairly, each also capped by its own link B(c,u): ready(u) is when
/// the last child's bytes are in, by [`fluid_finish`](super::fluid::fluid_finish) of the
/// flows (ready(c) + α(c,u), n_c bytes, B(c,u)). n_c = `n` for a reduce (tables combined on
/// the way), `n` × |subtree(c)| for a gather (`grows`).
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
            predict_tree(net, &trees::binomial_tree(p, root), root, n, true)
        }
        GatherAlgorithm::Binary => {
            let order = trees::from_root(p, root);
            predict_tree(net, &trees::binary_tree(&order), root, n, true)
        }
        GatherAlgorithm::Delegate => {
            let order = trees::from_root(p, root);
            predict_tree(net, &trees::delegate_tree(&order), root, n, true)
        }
        GatherAlgorithm::Relay => predict_relay(net, &relay_plan_of(net, root), root, n),
    }
}

/// Predicted seconds of a scatter of `n` bytes per worker with `algo`: costed as the gather
/// of the same name ([`predict_gather`]; the model's links taken as symmetric).
pub fn predict_scatter(net: &NetModel, algo: ScatterAlgorithm, root: usize, n: u64) -> f64 {
    predict_gather(net, algo.gather(), root, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four workers where every chain from 0 crosses a slow link (worker 2 is fast only to 0):
    /// the network model's best broadcast tree (`hierarchy::best_broadcast_tree`) is predicted
    /// at about half the best chain's time.
    #[test]
    fn the_best_broadcast_tree_halves_the_chain_over_a_slow_link() {
        let m = hierarchy::tests::slow_link_model();
        let topo = Topology::of_size(4);
        let cost = |a| predict_broadcast(&m, &topo, a, 0, 16 << 20, 256 << 10);
        use BroadcastAlgorithm as B;
        assert!(cost(B::NetTree) < 0.55 * cost(B::NetChain));
    }

    /// The scatter-allgather prediction on a uniform model: the scatter as a direct gather of
    /// n/p per worker (α + (p−1)/p · nβ: the transfers overlap), then p − 1 ring steps of
    /// α + nβ/p; ahead of the chain and the binomial tree for a table of two chunks, behind
    /// the chain for a large one. On a ring through a slow link every step runs at its pace.
    #[test]
    fn scatter_allgather_prediction_follows_its_formula() {
        let (p, a, b) = (8usize, 1e-4, 25e6);
        let m = NetModel::uniform(p, a, b);
        let topo = Topology::of_size(p);
        let n = 8u64 << 20;
        let sa = predict_broadcast(
            &m,
            &topo,
            BroadcastAlgorithm::ScatterAllgather,
            0,
            n,
            1 << 16,
        );
        let (share, steps) = ((n / p as u64) as f64, (p - 1) as f64);
        let want = a + steps * share / b + steps * (a + share / b);
        assert!((sa - want).abs() < 1e-9 * want, "{sa} {want}");
        let cost = |algo, n: u64| predict_broadcast(&m, &topo, algo, 0, n, 8192);
        use BroadcastAlgorithm as B;
        assert!(cost(B::ScatterAllgather, 16384) < cost(B::Chain, 16384));
        assert!(cost(B::ScatterAllgather, 16384) < cost(B::Binomial, 16384));
        assert!(cost(B::ScatterAllgather, 64 << 20) > cost(B::Chain, 64 << 20));
        // The link 3 → 4 at a quarter of the rate: every ring step at its pace.
        let mut bw = vec![b; p * p];
        bw[3 * p + 4] = b / 4.0;
        let slow = NetModel::new(p, vec![a; p * p], bw).unwrap();
        let ring: Vec<usize> = (0..p).collect();
        let t = predict_scatter_allgather(&slow, &ring, n);
        let want = a + steps * share / b + steps * (a + share / (b / 4.0));
        assert!((t - want).abs() < 1e-9 * want, "{t} {want}");
    }

    /// A scatter is costed as the gather of the same name.
    #[test]
    fn scatters_are_costed_as_gathers() {
        let m = hierarchy::tests::uneven(6, 3);
        for (s, g) in [
            (ScatterAlgorithm::Direct, GatherAlgorithm::Direct),
            (ScatterAlgorithm::Binary, GatherAlgorithm::Binary),
            (ScatterAlgorithm::Relay, GatherAlgorithm::Relay),
            (ScatterAlgorithm::Tree, GatherAlgorithm::Tree),
        ] {
            assert_eq!(
                predict_scatter(&m, s, 1, 1 << 20),
                predict_gather(&m, g, 1, 1 << 20)
            );
        }
    }
}
