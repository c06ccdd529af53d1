//! Every automatic ("auto") choice of an algorithm, and how the workers come to agree on it.
//! A choice that differs between workers is an operation mismatch, so each one is made from a
//! value that every worker of the operation knows, or is announced by the only worker that
//! knows it:
//!
//! * **Broadcast** ([`broadcast`]): only the root knows the size. It decides, and every frame
//!   of the broadcast carries the concrete algorithm in `aux`; a receiver learns it from the
//!   first frame that reaches it (no extra message). The pipeline chunk size (`segment::chunk`) is
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
//! * **Reduce** ([`reduce`]): without a network model the binary tree; with one the workers
//!   first agree on the largest table (`barrier::agree_max`), then each picks the same one.
//! * Regroup and the others have no automatic choice; regroup without a partitioner is decided
//!   by the master and sent to everyone (`regroup::plan`).
//!
//! The crossovers come from [`Config`](crate::config::Config): `broadcast_crossover`,
//! `allreduce_crossover`, `chunk_size`.
//!
//! **With a network model** (`Ctx::net`, [`NetModel`]) the broadcast root and the gather and
//! scatter choices compare the model's predicted cost of each candidate instead of the
//! crossover ([`predict_broadcast`], [`predict_gather`]: the predictions are in `costs`, but
//! for [`predict_reduce`], which costs the automatic reduce as what it picks); every worker
//! holds the same model, so a choice made from the model alone (gather, scatter) is the same
//! everywhere. Without a model every choice is as before.

use super::algorithm::{
    AllreduceAlgorithm, BroadcastAlgorithm, GatherAlgorithm, ReduceAlgorithm, ScatterAlgorithm,
};
use super::costs::{predict_broadcast, predict_gather, predict_pipelined, predict_tree};
use super::hierarchy::{self, Hierarchy};
use super::shapes;
use super::trees::{self, star};
use crate::netmodel::NetModel;
use crate::topology::Topology;

/// The concrete broadcast algorithms the automatic choice considers (in order of preference on
/// equal predicted cost).
pub fn broadcast_candidates(net: Option<&NetModel>) -> &'static [BroadcastAlgorithm] {
    use BroadcastAlgorithm::*;
    match net {
        None => &[Binomial, Chain],
        Some(_) => &[
            Binomial,
            Chain,
            NetChain,
            NetHierarchy,
            NetTree,
            ScatterAllgather,
        ],
    }
}

/// Broadcast of `bytes` (the root's table). Without a model: binomial tree up to `crossover`
/// bytes (latency bound: ⌈log2 p⌉ hops instead of p−1), pipelined chain above. With one: the
/// candidate ([`broadcast_candidates`]) of least [`predict_broadcast`] (chunk `chunk`).
///
/// Scatter-allgather is a candidate only with a model: its α-β window against the chain
/// (n < p·c, where the chain still fills its pipeline) did not hold on the emulated network
/// (flat 200 Mbit/s, strict shaping: ahead by 4 % at 16 KiB for p = 4, behind from 32 KiB,
/// and behind at p = 8; docs/benchmarks-netns.md), so without a model it is never picked.
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
            predict_tree(net, &trees::binomial_tree(p, root), root, n, false)
        }
        ReduceAlgorithm::Binary | ReduceAlgorithm::Chain | ReduceAlgorithm::NetChain => {
            let t = shapes::pipelined_tree(algo, topo, Some(net), p, root)
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

/// Scatter tables up to this many bytes go down the binary tree (the binomial tree until stop
/// 36), larger ones straight from the root (`scatter::scatter`). At 1 KiB, p = 8 on the emulated
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

/// Scatter tables up to this many bytes over a power-of-two number of workers go to the next
/// worker, which scatters them down the binary tree over the others (`ScatterAlgorithm::Delegate`):
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
pub fn scatter(bytes: u64, p: usize) -> ScatterAlgorithm {
    if bytes <= SCATTER_DELEGATE_MAX && p.is_power_of_two() {
        ScatterAlgorithm::Delegate
    } else if bytes <= SCATTER_TREE_MAX {
        ScatterAlgorithm::Binary
    } else {
        ScatterAlgorithm::Direct
    }
}

/// True when a worker's table of `bytes` calls for regroup-allgather.
pub fn allreduce_large(bytes: u64, crossover: u64) -> bool {
    bytes >= crossover
}

/// The largest p at which the allreduce crossover was measured (docs/algorithms.md: p = 2, 4,
/// 6, 8 on the emulated 200 Mbit/s network); `Config::allreduce_crossover` holds up to it.
pub const ALLREDUCE_CROSSOVER_P: usize = 8;

/// The allreduce crossover for the workers of `topo`: `crossover` up to
/// [`ALLREDUCE_CROSSOVER_P`] workers or when the hosts are in more than one rack, else scaled
/// by how the two algorithms' latency terms grow with p. With s = ⌈log2 p⌉ (+2 when p
/// is not a power of two) rounds of bidirectional exchange, s(α + nβ), against
/// regroup-allgather's 2(p−1)α + 2(p−1)/p·nβ, regroup-allgather wins from
/// n* = α/β · (2(p−1) − s) / (s − 2(p−1)/p): the latency term grows with p, the bandwidth
/// gain with log p only. So n*(p) = crossover · g(p)/g(8), g being that ratio: about 29× the
/// crossover at p = 1,024 (463 KiB at the default 16 KiB) and 93× at p = 4,096 (1.45 MiB),
/// where the simulation has bidirectional exchange ahead at 1 MiB (docs/benchmarks.md). Racks
/// keep the configured crossover: the rings cross each uplink once per rack, while
/// bidirectional exchange pairs workers p/2, p/4, … apart and sends whole tables through the
/// uplinks (simulated 8× its bound behind 1 Gbit/s uplinks at p = 256).
pub fn allreduce_crossover_at(topo: &Topology, crossover: u64) -> u64 {
    let p = topo.size();
    if p <= ALLREDUCE_CROSSOVER_P || topo.racks() > 1 {
        return crossover;
    }
    let g = |p: usize| {
        let pf = p as f64;
        let s = f64::from(p.next_power_of_two().trailing_zeros())
            + if p.is_power_of_two() { 0.0 } else { 2.0 };
        (2.0 * (pf - 1.0) - s) / (s - 2.0 * (pf - 1.0) / pf)
    };
    let scaled = crossover as f64 * g(p) / g(ALLREDUCE_CROSSOVER_P);
    (scaled.min(u64::MAX as f64) as u64).max(crossover)
}

/// Allreduce on the workers of `topo` when the largest table of any worker has `largest` bytes:
/// bidirectional exchange below the crossover for p ([`allreduce_crossover_at`]),
/// regroup-allgather from it on. Bidirectional exchange costs ⌈log2 p⌉(α + nβ) (+2(α + nβ)
/// when p is not a power of two), regroup-allgather 2(p−1)α + 2(p−1)/p·nβ; on the emulated
/// 200 Mbit/s network regroup-allgather wins from 16 KiB at every measured p (2–8) and loses
/// up to 8 KiB (docs/benchmarks-netns.md).
pub fn allreduce(largest: u64, topo: &Topology, crossover: u64) -> AllreduceAlgorithm {
    if allreduce_large(largest, allreduce_crossover_at(topo, crossover)) {
        AllreduceAlgorithm::RegroupAllgather
    } else {
        AllreduceAlgorithm::BidirectionalExchange
    }
}

impl AllreduceAlgorithm {
    /// The algorithm `Auto` runs on the workers of `topo` when the largest table of any
    /// worker has `bytes` (see [`allreduce`]).
    pub fn resolve(self, bytes: u64, topo: &Topology, crossover: u64) -> AllreduceAlgorithm {
        match self {
            AllreduceAlgorithm::Auto => allreduce(bytes, topo, crossover),
            a => a,
        }
    }
}

impl BroadcastAlgorithm {
    /// The concrete algorithm `Auto` picks for `bytes` (the root's table size; see
    /// [`broadcast`]).
    pub fn resolve(
        self,
        bytes: u64,
        crossover: u64,
        net: Option<&NetModel>,
        topo: &Topology,
        root: usize,
        chunk: u64,
    ) -> BroadcastAlgorithm {
        match self {
            BroadcastAlgorithm::Auto => broadcast(bytes, crossover, net, topo, root, chunk),
            a => a,
        }
    }
}

impl GatherAlgorithm {
    /// The concrete algorithm (Auto resolved with the model, [`gather`]; trees need a model).
    pub fn resolve(self, net: Option<&NetModel>, root: usize) -> GatherAlgorithm {
        match (self, net) {
            (GatherAlgorithm::Auto, net) => gather(net, root),
            (GatherAlgorithm::Tree | GatherAlgorithm::Relay, None) => GatherAlgorithm::Direct,
            (a, _) => a,
        }
    }
}

impl ScatterAlgorithm {
    /// The concrete algorithm, as [`GatherAlgorithm::resolve`] picks for a gather, but with a
    /// model the direct choice is the parallel scatter (the same cost in the model, less time
    /// measured: docs/benchmarks-netns.md); without one, `Auto` is left to the root, which picks
    /// by its table's size ([`scatter`]): then the result is `Auto`.
    pub fn resolve(self, net: Option<&NetModel>, root: usize) -> ScatterAlgorithm {
        match (self, net) {
            (ScatterAlgorithm::Auto, None) => ScatterAlgorithm::Auto,
            (ScatterAlgorithm::Auto, Some(m)) => match gather(Some(m), root) {
                GatherAlgorithm::Tree => ScatterAlgorithm::Tree,
                GatherAlgorithm::Relay => ScatterAlgorithm::Relay,
                _ => ScatterAlgorithm::Parallel,
            },
            (ScatterAlgorithm::Tree | ScatterAlgorithm::Relay, None) => ScatterAlgorithm::Direct,
            (a, _) => a,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::relay::{predict_relay, relay_plan, relay_tree, RelayPlan};
    use crate::collective::segment::auto_chunk;
    use crate::collective::trees::tests::check_tree;

    #[test]
    fn crossovers() {
        let topo = Topology::of_size(4);
        assert_eq!(
            broadcast(8192, 8192, None, &topo, 0, 8192),
            BroadcastAlgorithm::Binomial
        );
        assert_eq!(
            broadcast(8193, 8192, None, &topo, 0, 8192),
            BroadcastAlgorithm::Chain
        );
        // With a model, scatter-allgather is one of the candidates.
        assert!(broadcast_candidates(None)
            .iter()
            .all(|&a| a != BroadcastAlgorithm::ScatterAllgather));
        let m = NetModel::uniform(4, 1e-4, 25e6);
        assert!(broadcast_candidates(Some(&m)).contains(&BroadcastAlgorithm::ScatterAllgather));
        for p in [2, 3, 4, 6, 8] {
            let topo = Topology::of_size(p);
            assert_eq!(
                allreduce(16383, &topo, 16384),
                AllreduceAlgorithm::BidirectionalExchange
            );
            assert_eq!(
                allreduce(16384, &topo, 16384),
                AllreduceAlgorithm::RegroupAllgather
            );
        }
        assert!(allreduce_large(0, 0));
        assert_eq!(scatter(0, 8), ScatterAlgorithm::Delegate);
        assert_eq!(scatter(SCATTER_DELEGATE_MAX, 4), ScatterAlgorithm::Delegate);
        assert_eq!(scatter(SCATTER_DELEGATE_MAX, 6), ScatterAlgorithm::Binary);
        assert_eq!(
            scatter(SCATTER_DELEGATE_MAX + 1, 8),
            ScatterAlgorithm::Binary
        );
        assert_eq!(scatter(SCATTER_TREE_MAX, 8), ScatterAlgorithm::Binary);
        assert_eq!(scatter(SCATTER_TREE_MAX + 1, 8), ScatterAlgorithm::Direct);
    }

    /// Up to the measured p the allreduce crossover is the configured one; beyond it grows
    /// with p, so that at p = 4,096 a 1 MiB table goes to bidirectional exchange (simulated
    /// 527.7 ms against regroup-allgather's 919.7 ms) while at p = 1,024 it still goes to
    /// regroup-allgather (295.5 against 439.8 ms). Racks keep the configured one.
    #[test]
    fn the_allreduce_crossover_grows_with_p_on_a_flat_network() {
        let c = 16 << 10;
        let at = |p: usize, c: u64| allreduce_crossover_at(&Topology::of_size(p), c);
        for p in 1..=ALLREDUCE_CROSSOVER_P {
            assert_eq!(at(p, c), c);
        }
        for p in (9..=4096).step_by(7) {
            assert!(at(p, c) >= c, "p = {p}");
        }
        let mut last = c;
        for p in (4..=12).map(|e| 1usize << e) {
            let x = at(p, c);
            assert!(x > last, "p = {p}: {x} after {last}");
            last = x;
        }
        let mib = 1 << 20;
        let pick = |p: usize| allreduce(mib, &Topology::of_size(p), c);
        assert_eq!(pick(4096), AllreduceAlgorithm::BidirectionalExchange);
        assert_eq!(pick(1024), AllreduceAlgorithm::RegroupAllgather);
        assert_eq!(pick(16), AllreduceAlgorithm::RegroupAllgather);
        assert_eq!(at(4096, 0), 0);
        assert_eq!(at(4096, u64::MAX), u64::MAX);
        let mut racked = Topology::of_size(4096);
        racked.rack = (0..4096).map(|r| r / 256).collect();
        assert_eq!(racked.racks(), 16);
        assert_eq!(allreduce_crossover_at(&racked, c), c);
        assert_eq!(
            allreduce(mib, &racked, c),
            AllreduceAlgorithm::RegroupAllgather
        );
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
        check_tree(&t, 0);
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
            check_tree(&t, root);
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
        let topo = Topology::of_size(8);
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
