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
//!   (docs/benchmarks-netns.md, Part 0).
//! * **Scatter** ([`scatter`]): only the root knows the size; it decides between the binomial
//!   tree and the direct scatter and every frame carries the choice in `aux` (a receiver
//!   takes the first frame from the root or its tree parent).
//! * Reduce, regroup and the others have no automatic choice; regroup without a
//!   partitioner is decided by the master and sent to everyone (`regroup::plan`).
//!
//! The crossovers come from [`Config`](crate::config::Config): `broadcast_crossover`,
//! `allreduce_crossover`, `chunk_size`.

use super::segment::auto_chunk;
use super::{AllreduceAlgorithm, BroadcastAlgorithm};
use crate::config::Config;

/// Broadcast of `bytes` (the root's table): binomial tree up to `crossover` bytes (latency
/// bound: ⌈log2 p⌉ hops instead of p−1), pipelined chain above.
pub fn broadcast(bytes: u64, crossover: u64) -> BroadcastAlgorithm {
    if bytes <= crossover {
        BroadcastAlgorithm::Binomial
    } else {
        BroadcastAlgorithm::Chain
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

/// Scatter tables up to this many bytes go down a binomial tree, larger ones straight from the
/// root (`rooted::scatter`). At 1 KiB, p = 8 on the emulated 200 Mbit/s hosts the tree takes
/// 0.16 ms against the direct scatter's 0.20–0.33 ms (the root's p−1 sends in a row are the
/// bottleneck); at 16 MiB it takes 1.25× the direct scatter's time (each level stores and
/// forwards). The break-even was not measured; 64 KiB keeps the tree where a message is
/// latency-bound (64 KiB is 2.7 ms at 200 Mbit/s against ~0.05 ms per message).
pub const SCATTER_BINOMIAL_MAX: u64 = 64 * 1024;

/// Scatter of the root's table of `bytes`: binomial (true) up to [`SCATTER_BINOMIAL_MAX`],
/// direct above. Only the root knows the size: it decides and every frame announces it.
pub fn scatter(bytes: u64) -> bool {
    bytes <= SCATTER_BINOMIAL_MAX
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
        assert_eq!(broadcast(8192, 8192), BroadcastAlgorithm::Binomial);
        assert_eq!(broadcast(8193, 8192), BroadcastAlgorithm::Chain);
        assert_eq!(
            allreduce(16383, 16384),
            AllreduceAlgorithm::BidirectionalExchange
        );
        assert_eq!(
            allreduce(16384, 16384),
            AllreduceAlgorithm::RegroupAllgather
        );
        assert!(allreduce_large(0, 0));
        assert!(scatter(SCATTER_BINOMIAL_MAX) && !scatter(SCATTER_BINOMIAL_MAX + 1));
        let mut cfg = Config::default();
        assert_eq!(chunk(&cfg, 1 << 30, 8), auto_chunk(1 << 30, 8));
        cfg.chunk_size = 1000;
        assert_eq!(chunk(&cfg, 1 << 30, 8), 1000);
    }
}
