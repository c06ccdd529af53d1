//! The algorithm type of every collective family: the names users type (`parse`, `name`),
//! the code each sends in its frames' headers (`code`), and in each variant's doc what the
//! algorithm does. The functions that run them are in the family files; `Auto` is resolved
//! by `choose`.

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllreduceAlgorithm {
    /// Bidirectional exchange when every table is small, regroup-allgather when any is large
    /// (agreed by all workers, see `choose`).
    Auto,
    /// Recursive doubling: whole tables swapped with a partner in each of log2 p rounds.
    BidirectionalExchange,
    /// Reduce-scatter of segments around a ring, then allgather of the reduced segments.
    RegroupAllgather,
}

impl AllreduceAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            AllreduceAlgorithm::Auto => 0,
            AllreduceAlgorithm::BidirectionalExchange => 1,
            AllreduceAlgorithm::RegroupAllgather => 2,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => AllreduceAlgorithm::Auto,
            "bidirectional-exchange" | "bde" | "recursive-doubling" => AllreduceAlgorithm::BidirectionalExchange,
            "regroup-allgather" | "ring" => AllreduceAlgorithm::RegroupAllgather,
            _ => {
                return Err(Error::config(format!(
                    "unknown allreduce algorithm '{s}' (auto, bidirectional-exchange, regroup-allgather)"
                )))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            AllreduceAlgorithm::Auto => "auto",
            AllreduceAlgorithm::BidirectionalExchange => "bidirectional-exchange",
            AllreduceAlgorithm::RegroupAllgather => "regroup-allgather",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BroadcastAlgorithm {
    /// Binomial tree for messages up to `Config::broadcast_crossover` bytes (latency-bound:
    /// ⌈log2 p⌉ hops instead of p−1), pipelined chain above; with a network model the
    /// candidate of least predicted time (`choose::broadcast`), scatter-allgather among them. The root decides (only it knows the size) and announces its
    /// choice in the first frame.
    Auto,
    /// Pipelined chain in rack order (Twister/Harp chain broadcast).
    Chain,
    /// Pipelined chain in a seeded random order (the baseline for rack awareness).
    ChainRandom(u64),
    /// Binomial tree (minimum spanning tree), pipelined per chunk.
    Binomial,
    /// The root sends the whole table to every worker in turn (the papers' baseline).
    OneByOne,
    /// Pipelined chain in the order with the fastest slowest link of the network model
    /// (`hierarchy::best_path`); the rack-order chain without
    /// a model.
    NetChain,
    /// Pipelined chain over the network performance hierarchy (CMPI §4.3: every group a
    /// contiguous stretch entered at its best-connected member,
    /// `hierarchy::hierarchy_chain`); the rack-order chain
    /// without a model.
    NetHierarchy,
    /// Pipelined over the spanning tree of least predicted time under the network model
    /// (`hierarchy::best_broadcast_tree`: every tree up
    /// to 8 workers, e.g. a root that feeds two children over fast links where every chain
    /// crosses a slow one); the net-chain beyond 8 workers, the rack-order chain without a model.
    NetTree,
    /// Van de Geijn's bucket broadcast (what MPI libraries use for large messages): the root
    /// scatters p segments straight to their owners, then the segments travel around the
    /// rack-order ring, which is broken at the root (it already holds everything), in p − 1
    /// steps. Every link carries about (p−1)/p · n bytes and no worker waits for a pipeline
    /// to fill. Cost 2(p−1)α + 2(p−1)/p · nβ.
    ScatterAllgather,
}

impl BroadcastAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            BroadcastAlgorithm::Auto => 0,
            BroadcastAlgorithm::Chain => 1,
            BroadcastAlgorithm::ChainRandom(_) => 2,
            BroadcastAlgorithm::Binomial => 3,
            BroadcastAlgorithm::OneByOne => 4,
            BroadcastAlgorithm::NetChain => 5,
            BroadcastAlgorithm::NetHierarchy => 6,
            BroadcastAlgorithm::NetTree => 7,
            BroadcastAlgorithm::ScatterAllgather => 8,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => BroadcastAlgorithm::Auto,
            "chain" => BroadcastAlgorithm::Chain,
            "chain-random" => BroadcastAlgorithm::ChainRandom(1),
            "binomial" | "mst" => BroadcastAlgorithm::Binomial,
            "one-by-one" => BroadcastAlgorithm::OneByOne,
            "net-chain" => BroadcastAlgorithm::NetChain,
            "net-hierarchy" => BroadcastAlgorithm::NetHierarchy,
            "net-tree" => BroadcastAlgorithm::NetTree,
            "scatter-allgather" => BroadcastAlgorithm::ScatterAllgather,
            _ => {
                return Err(Error::config(format!(
                    "unknown broadcast algorithm '{s}' (auto, chain, chain-random, binomial, \
                     one-by-one, net-chain, net-hierarchy, net-tree, scatter-allgather)"
                )))
            }
        })
    }

    /// Every algorithm an automatic broadcast's root may announce: all but `Auto` and the
    /// seeded random chain.
    pub fn announced() -> impl Iterator<Item = BroadcastAlgorithm> {
        use BroadcastAlgorithm::*;
        [Chain, Binomial, OneByOne].into_iter().chain([
            NetChain,
            NetHierarchy,
            NetTree,
            ScatterAllgather,
        ])
    }

    /// The algorithm an automatic broadcast's root announced by its [`code`](Self::code).
    pub(crate) fn from_announced(code: u32) -> Option<BroadcastAlgorithm> {
        Self::announced().find(|a| u32::from(a.code()) == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            BroadcastAlgorithm::Auto => "auto",
            BroadcastAlgorithm::Chain => "chain",
            BroadcastAlgorithm::ChainRandom(_) => "chain-random",
            BroadcastAlgorithm::Binomial => "binomial",
            BroadcastAlgorithm::OneByOne => "one-by-one",
            BroadcastAlgorithm::NetChain => "net-chain",
            BroadcastAlgorithm::NetHierarchy => "net-hierarchy",
            BroadcastAlgorithm::NetTree => "net-tree",
            BroadcastAlgorithm::ScatterAllgather => "scatter-allgather",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceAlgorithm {
    /// Without a network model: binary (pipelined, so it needs no agreement on the size: one
    /// batch per child for small tables, a stream of chunks for large ones). With one: the
    /// workers first agree on the largest
    /// table (⌈log2 p⌉ small messages, `barrier::agree_max`), then run the
    /// algorithm of least predicted cost for it (`choose::reduce`:
    /// trees only below `Config::allreduce_crossover`).
    Auto,
    /// Binomial tree toward the root.
    Binomial,
    /// Binary tree toward the root over the rack order (`trees::binary_tree`), pipelined
    /// (`pipeline::reduce_pipelined`): every worker receives at most
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
    /// `hierarchy::leader_tree`). Without a network model: binomial.
    NetHierarchy,
    /// Scatter-gather whose ring follows the cycle with the fastest slowest link of the
    /// network model (`hierarchy::best_path`). Without a model: rank order (scatter-gather).
    NetRing,
    /// Pipelined along the chain of the chain broadcast (rack order from the root), toward the
    /// root: every worker takes in one stream, so a large table takes about nβ plus one chunk
    /// per worker (p − 1 messages' latency for a small one).
    Chain,
    /// Pipelined along the chain of the net-chain broadcast (the order whose slowest link is
    /// fastest in the network model), toward the root. Without a model: `chain`.
    NetChain,
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

/// Gather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatherAlgorithm {
    /// Direct without a network model; with one, the one of least predicted cost
    /// (`choose::gather`).
    Auto,
    /// Every worker sends straight to the root.
    Direct,
    /// Over the distance-ordered tree of CMPI Algorithm 4 (`hierarchy::distance_tree`); a
    /// worker forwards its subtree's partitions, sending to (or receiving from) its children at
    /// once. Without a network model: direct.
    Tree,
    /// The same as direct, which receives from everyone at once already (the name of the
    /// parallel scatter, `ScatterAlgorithm::Parallel`).
    Parallel,
    /// Over the binomial tree of the ranks from the root (⌈log2 p⌉ messages on the critical
    /// path, ⌈log2 p⌉ into the root instead of p − 1; the same bytes through the root's link).
    /// The automatic gather without a network model.
    Binomial,
    /// Over the `trees::binary_tree` of the ranks from the root: the depth of the binomial tree
    /// when p is a power of two (⌊log2 p⌋), but at most two messages from (or into) any worker,
    /// the root included, against the binomial root's ⌈log2 p⌉: back-to-back small scatters
    /// pace at the root's link, and two packets a call cost less of it than three
    /// (bench/history-netns.md, Part 0, item q). For large tables the root's second child
    /// forwards its subtree's share after the root is done with it (a gather: before the root
    /// can take it), so they take longer than down the binomial tree (gather, 16 MiB, p = 8:
    /// 1.29× the bound against 1.00). The automatic scatter without a network model up to
    /// `choose::SCATTER_TREE_MAX` (but [`GatherAlgorithm::Delegate`] below).
    Binary,
    /// Network model: workers whose own link to the root is slow send through a relay with
    /// faster links, or part through one and part another way
    /// (`relay::relay_plan`); a relay sends its own table at once
    /// and forwards each batch it takes after it (a gather), or receives its subtree's
    /// partitions and passes them on (a scatter). Gains where the pairs, not the
    /// hosts, are the limit (a model with host capacities). Without a model: direct.
    Relay,
    /// The root hands its whole table (a gather: takes the others' tables) to the next worker,
    /// which heads the binary tree over the others (`trees::delegate_tree`): one message from
    /// (or into) the root a call, so back-to-back small scatters spend one packet's headers at
    /// the root's link instead of two. The same depth as the binary tree when p is a power of
    /// two, one level more otherwise. The automatic scatter without a network model up to
    /// `choose::SCATTER_DELEGATE_MAX` when p is a power of two.
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
                    "unknown gather algorithm '{s}' (auto, direct, net-tree, parallel, \
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
}

/// Scatter. The names and header codes are the gather's (`GatherAlgorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScatterAlgorithm {
    /// Without a network model the root picks by its table's size (it alone knows it; every
    /// frame announces the choice): `Delegate` up to `choose::SCATTER_DELEGATE_MAX` when p is
    /// a power of two, `Binary` up to `choose::SCATTER_TREE_MAX`, `Direct` above. With one,
    /// the one of least predicted cost (`choose::gather`'s choice, `Direct` there being
    /// `Parallel`).
    Auto,
    /// The root sends each worker its partitions, one worker after the other.
    Direct,
    /// Down the distance-ordered tree of CMPI Algorithm 4 (`hierarchy::distance_tree`): a
    /// worker sends each child the partitions of the child's subtree, to all children at once.
    /// Without a network model: direct.
    Tree,
    /// The root sends to every worker at once.
    Parallel,
    /// Down the binomial tree of the ranks from the root.
    Binomial,
    /// Down the `trees::binary_tree` of the ranks from the root: at most two messages from any
    /// worker, the root included (see `GatherAlgorithm::Binary`).
    Binary,
    /// Network model: the relay gather reversed (`relay::RelayPlan`): a relay receives its
    /// subtree's partitions and passes them on. Without a model: direct.
    Relay,
    /// To the next worker, which scatters down the binary tree over the others
    /// (`trees::delegate_tree`): one message from the root a call.
    Delegate,
}

impl ScatterAlgorithm {
    /// The algorithms over the ranks in order from the root that a receiver follows as the root
    /// announces them (`announced`): the automatic choice without a model is one of them.
    pub const ROOTED: [ScatterAlgorithm; 4] = [
        ScatterAlgorithm::Direct,
        ScatterAlgorithm::Binomial,
        ScatterAlgorithm::Binary,
        ScatterAlgorithm::Delegate,
    ];

    /// Every scatter algorithm with the gather algorithm of the same name and header code.
    const GATHERS: [(ScatterAlgorithm, GatherAlgorithm); 8] = [
        (ScatterAlgorithm::Auto, GatherAlgorithm::Auto),
        (ScatterAlgorithm::Direct, GatherAlgorithm::Direct),
        (ScatterAlgorithm::Tree, GatherAlgorithm::Tree),
        (ScatterAlgorithm::Parallel, GatherAlgorithm::Parallel),
        (ScatterAlgorithm::Binomial, GatherAlgorithm::Binomial),
        (ScatterAlgorithm::Binary, GatherAlgorithm::Binary),
        (ScatterAlgorithm::Relay, GatherAlgorithm::Relay),
        (ScatterAlgorithm::Delegate, GatherAlgorithm::Delegate),
    ];

    /// The gather algorithm of the same name (and the same tree, run the other way).
    pub fn gather(self) -> GatherAlgorithm {
        Self::GATHERS
            .into_iter()
            .find_map(|(s, g)| (s == self).then_some(g))
            .expect("every scatter algorithm has its gather")
    }

    pub fn code(self) -> u8 {
        self.gather().code()
    }

    /// The code a rooted scatter announces in every frame's `aux` (one of [`Self::ROOTED`];
    /// `None` for the others).
    pub fn announced(self) -> Option<u32> {
        match self {
            ScatterAlgorithm::Direct => Some(0),
            ScatterAlgorithm::Binomial => Some(1),
            ScatterAlgorithm::Binary => Some(2),
            ScatterAlgorithm::Delegate => Some(3),
            _ => None,
        }
    }

    /// The rooted scatter a frame's `aux` announces.
    pub fn from_announced(aux: u32) -> Option<ScatterAlgorithm> {
        Self::ROOTED
            .into_iter()
            .find(|a| a.announced() == Some(aux))
    }

    pub fn parse(s: &str) -> Result<Self> {
        Self::GATHERS
            .into_iter()
            .find_map(|(a, g)| (g.name() == s).then_some(a))
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown scatter algorithm '{s}' (auto, direct, net-tree, parallel, \
                     binomial, binary, delegate, net-relay)"
                ))
            })
    }

    pub fn name(self) -> &'static str {
        self.gather().name()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllgatherAlgorithm {
    /// Recursive doubling while every worker's table is below `Config::allreduce_crossover`,
    /// the ring when any is not (agreed as for allreduce, see `choose`).
    Auto,
    /// Recursive doubling: in round k every worker swaps all it holds with rank r xor 2^k
    /// (p not a power of two: the extra ranks fold their tables into the first ones before and
    /// get the result back after, as bidirectional exchange does).
    RecursiveDoubling,
    /// Ring ("bucket"): p−1 steps, each forwarding the bucket received in the step before.
    /// Each bucket announces its own partition list, so no separate count exchange is needed.
    Ring,
    /// Ring pipelined per partition when the caller knows the total number of partitions
    /// across all workers: partitions are forwarded one by one as they arrive, each origin's
    /// last one marked. A `total` that differs from the partitions the workers hold fails every
    /// worker with a configuration error naming both.
    KnownTotal(usize),
}

impl AllgatherAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            AllgatherAlgorithm::Auto => 0,
            AllgatherAlgorithm::Ring => 1,
            AllgatherAlgorithm::KnownTotal(_) => 2,
            AllgatherAlgorithm::RecursiveDoubling => 3,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            AllgatherAlgorithm::Auto => "auto",
            AllgatherAlgorithm::Ring => "ring",
            AllgatherAlgorithm::KnownTotal(_) => "known-total",
            AllgatherAlgorithm::RecursiveDoubling => "recursive-doubling",
        }
    }
}

/// How reduce-scatter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceScatterAlgorithm {
    /// Recursive halving while every worker's table is below `Config::allreduce_crossover`,
    /// the ring when any is not (agreed in the halving rounds, as the automatic allreduce agrees
    /// in its doubling rounds; see `choose`).
    Auto,
    /// Ring reduce-scatter at partition granularity (`regroup::ring`).
    Ring,
    /// Recursive halving (`regroup::recursive_halving`).
    RecursiveHalving,
}

impl ReduceScatterAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            ReduceScatterAlgorithm::Auto => 0,
            ReduceScatterAlgorithm::Ring => 1,
            ReduceScatterAlgorithm::RecursiveHalving => 2,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => ReduceScatterAlgorithm::Auto,
            "ring" => ReduceScatterAlgorithm::Ring,
            "recursive-halving" => ReduceScatterAlgorithm::RecursiveHalving,
            _ => {
                return Err(Error::config(format!(
                    "unknown reduce-scatter algorithm '{s}' (auto, ring, recursive-halving)"
                )))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            ReduceScatterAlgorithm::Auto => "auto",
            ReduceScatterAlgorithm::Ring => "ring",
            ReduceScatterAlgorithm::RecursiveHalving => "recursive-halving",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scatter name parses back to its algorithm, with the gather's name and code; the
    /// rooted ones' announced codes are 0..4 and read back.
    #[test]
    fn scatter_names_and_codes_are_the_gathers() {
        let all = [
            ScatterAlgorithm::Auto,
            ScatterAlgorithm::Direct,
            ScatterAlgorithm::Tree,
            ScatterAlgorithm::Parallel,
            ScatterAlgorithm::Binomial,
            ScatterAlgorithm::Binary,
            ScatterAlgorithm::Relay,
            ScatterAlgorithm::Delegate,
        ];
        let mut codes: Vec<u8> = all.iter().map(|a| a.code()).collect();
        codes.sort();
        assert_eq!(codes, (0..8).collect::<Vec<u8>>());
        for a in all {
            assert_eq!(ScatterAlgorithm::parse(a.name()).unwrap(), a);
            let g = GatherAlgorithm::parse(a.name()).unwrap();
            assert_eq!((g, g.code()), (a.gather(), a.code()), "{a:?}");
            assert_eq!(
                a.announced().is_some(),
                ScatterAlgorithm::ROOTED.contains(&a)
            );
        }
        for (k, a) in ScatterAlgorithm::ROOTED.into_iter().enumerate() {
            assert_eq!(a.announced(), Some(k as u32));
            assert_eq!(ScatterAlgorithm::from_announced(k as u32), Some(a));
        }
        assert_eq!(ScatterAlgorithm::from_announced(4), None);
        let e = ScatterAlgorithm::parse("ring").unwrap_err().to_string();
        assert!(e.contains("unknown scatter algorithm 'ring'"), "{e}");
    }
}
