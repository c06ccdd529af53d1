//! Checking the collectives against a sequential model: [`run`] calls every collective with
//! every algorithm on random tables of different shapes on each worker and compares each
//! worker's result with the [`model`]. Every worker regenerates every other worker's input from
//! the seed, so each computes the expected result on its own. Used by `harp check` (over TCP,
//! with process-level [`faults`]) and by the in-process tests of this crate.

pub mod faults;
pub mod model;

pub use faults::{Fault, Faults};

use crate::collective::{
    AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, ReduceAlgorithm,
    ReduceScatterAlgorithm, ScatterAlgorithm,
};
use crate::data::{Combiner, Partitioner, Table};
use crate::error::{Error, Result};
use crate::worker::Collectives;
use crate::Opts;
use model::{
    canonical, combine_all, copy, edge_gen, edge_shape, gen, h, kv_gen, kv_shape, owned, same,
    shape,
};

/// What to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub seed: u64,
    /// Random table shapes, each run through every collective.
    pub rounds: u64,
    /// Largest partition in elements (some partitions are this big, to exercise chunking and
    /// segmenting).
    pub max_elems: usize,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            seed: 1,
            rounds: 3,
            max_elems: 40_000,
        }
    }
}

/// How many results one worker verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub verified: usize,
}

/// Runs the check on `w`. Before each operation (numbered from 1) the faults of `faults` due
/// at this rank are passed to `inject`; an error from `inject` ends the run with that error.
pub fn run(
    w: &impl Collectives,
    spec: &Spec,
    faults: &Faults,
    inject: &mut dyn FnMut(Fault, usize) -> Result<()>,
) -> Result<Report> {
    let (r, p, pool) = (w.rank(), w.size(), w.pool());
    let mut count = 0usize;
    let mut tick = || -> Result<()> {
        count += 1;
        for f in faults.due(r, count) {
            inject(f, count)?;
        }
        Ok(())
    };
    let mut verified = 0usize;
    let m = Partitioner::Modulo;
    let seed = spec.seed;
    for round in 0..spec.rounds {
        let s = shape(seed, round, spec.max_elems);
        let inputs: Vec<Table> = (0..p)
            .map(|k| gen(pool, &s, seed, round, 0, k, None))
            .collect();
        let all = combine_all(pool, &inputs);
        let mine = || copy(pool, &inputs[r]);
        let root = (h(&[seed, round, 9]) % p as u64) as usize;
        let tag = |op: &str| {
            format!(
                "{op} [round {round}, {} {}, root {root}]",
                s.dtype.name(),
                s.combiner.name()
            )
        };
        let mut check = |name: String, got: &Table, want: &Table| -> Result<()> {
            same(&name, got, want)?;
            verified += 1;
            Ok(())
        };

        tick()?;
        w.barrier("check")?;

        for algo in [
            AllreduceAlgorithm::BidirectionalExchange,
            AllreduceAlgorithm::RegroupAllgather,
        ] {
            tick()?;
            let mut t = mine();
            w.allreduce("check", &mut t, Opts::default().algorithm(algo))?;
            check(tag(&format!("allreduce/{}", algo.name())), &t, &all)?;
        }
        {
            // Auto is agreed by all workers even though their tables differ in size.
            tick()?;
            let mut t = mine();
            w.allreduce("check", &mut t, Opts::default())?;
            check(tag("allreduce/auto"), &t, &all)?;
        }
        for algo in [
            BroadcastAlgorithm::Auto,
            BroadcastAlgorithm::Chain,
            BroadcastAlgorithm::ChainRandom(round),
            BroadcastAlgorithm::Binomial,
            BroadcastAlgorithm::OneByOne,
            BroadcastAlgorithm::NetChain,
            BroadcastAlgorithm::NetHierarchy,
            BroadcastAlgorithm::NetTree,
            BroadcastAlgorithm::ScatterAllgather,
        ] {
            tick()?;
            let mut t = mine();
            w.broadcast("check", &mut t, Opts::default().root(root).algorithm(algo))?;
            check(
                tag(&format!("broadcast/{}", algo.name())),
                &t,
                &inputs[root],
            )?;
        }
        for algo in [
            AllgatherAlgorithm::Ring,
            AllgatherAlgorithm::RecursiveDoubling,
            AllgatherAlgorithm::Auto,
        ] {
            tick()?;
            let mut t = mine();
            w.allgather("check", &mut t, Opts::default().algorithm(algo))?;
            check(tag(&format!("allgather/{}", algo.name())), &t, &all)?;
        }
        {
            tick()?;
            let total: usize = inputs.iter().map(|t| t.len()).sum();
            let mut t = mine();
            w.allgather(
                "check",
                &mut t,
                Opts::default().algorithm(AllgatherAlgorithm::KnownTotal(total)),
            )?;
            check(tag("allgather/known-total"), &t, &all)?;
        }
        for algo in [
            ReduceAlgorithm::Auto,
            ReduceAlgorithm::Binomial,
            ReduceAlgorithm::Binary,
            ReduceAlgorithm::ScatterGather,
            ReduceAlgorithm::NetHierarchy,
            ReduceAlgorithm::NetRing,
            ReduceAlgorithm::Chain,
            ReduceAlgorithm::NetChain,
        ] {
            tick()?;
            let mut t = mine();
            w.reduce("check", &mut t, Opts::default().root(root).algorithm(algo))?;
            let empty = Table::new(s.combiner.clone());
            check(
                tag(&format!("reduce/{}", algo.name())),
                &t,
                if r == root { &all } else { &empty },
            )?;
        }
        {
            tick()?;
            let mut t = mine();
            w.gather("check", &mut t, Opts::default().root(root))?;
            check(tag("gather"), &t, if r == root { &all } else { &inputs[r] })?;

            tick()?;
            let mut t = mine();
            w.scatter("check", &mut t, &m, Opts::default().root(root))?;
            check(tag("scatter"), &t, &owned(pool, &inputs[root], r, p))?;

            for algo in [
                ReduceScatterAlgorithm::Ring,
                ReduceScatterAlgorithm::RecursiveHalving,
            ] {
                tick()?;
                let mut t = mine();
                w.reduce_scatter("check", &mut t, &m, Opts::default().algorithm(algo))?;
                let name = format!("reduce-scatter/{}", algo.name());
                check(tag(&name), &t, &owned(pool, &all, r, p))?;
            }

            for scatter in [
                ScatterAlgorithm::Direct,
                ScatterAlgorithm::Tree,
                ScatterAlgorithm::Parallel,
                ScatterAlgorithm::Binomial,
                ScatterAlgorithm::Binary,
                ScatterAlgorithm::Delegate,
                ScatterAlgorithm::Relay,
            ] {
                let algo = scatter.gather();
                tick()?;
                let mut t = mine();
                w.gather("check", &mut t, Opts::default().root(root).algorithm(algo))?;
                let want = if r == root { &all } else { &inputs[r] };
                check(tag(&format!("gather/{}", algo.name())), &t, want)?;

                tick()?;
                let mut t = mine();
                w.scatter(
                    "check",
                    &mut t,
                    &m,
                    Opts::default().root(root).algorithm(scatter),
                )?;
                let want = owned(pool, &inputs[root], r, p);
                check(tag(&format!("scatter/{}", scatter.name())), &t, &want)?;
            }

            tick()?;
            let mut t = mine();
            w.reduce_scatter("check", &mut t, &m, Opts::default())?;
            check(tag("reduce-scatter/auto"), &t, &owned(pool, &all, r, p))?;

            tick()?;
            let mut t = mine();
            w.regroup("check", &mut t, Some(&m))?;
            check(tag("regroup/modulo"), &t, &owned(pool, &all, r, p))?;

            // Master-decided plan: each worker gets some of the combined partitions; together
            // they hold every partition exactly once (checked by gathering with Reject).
            tick()?;
            let mut t = mine();
            w.regroup("check", &mut t, None)?;
            for (id, x) in t.iter() {
                let want = all.get(id).ok_or_else(|| {
                    Error::data(format!("regroup/planned: unexpected partition {id}"))
                })?;
                if x.bytes() != want.bytes() {
                    return Err(Error::data(format!(
                        "regroup/planned: partition {id} differs"
                    )));
                }
            }
            let mut u = Table::new(Combiner::Reject);
            for (id, x) in t.iter() {
                u.put(id, x.duplicate(pool));
            }
            tick()?;
            w.allgather(
                "check",
                &mut u,
                Opts::default().algorithm(AllgatherAlgorithm::Ring),
            )?;
            check(tag("regroup/planned"), &u, &all)?;

            // Push: local partitions combine into the owners' global tables.
            tick()?;
            let globals: Vec<Table> = (0..p)
                .map(|k| {
                    let only = |pid: u32| pid as usize % p == k;
                    gen(pool, &s, seed, round, 7, k, Some(&only))
                })
                .collect();
            let mut global = copy(pool, &globals[r]);
            let local = mine();
            w.push("check", &local, &mut global, &m)?;
            let mut want = copy(pool, &globals[r]);
            for t in &inputs {
                for (id, x) in t.iter() {
                    if id as usize % p == r {
                        want.add(id, x.duplicate(pool))?;
                    }
                }
            }
            check(tag("push"), &global, &want)?;

            // Pull: ask for ids that exist in the owners' global tables.
            tick()?;
            let global_all = combine_all(pool, &globals);
            let mut local = Table::new(s.combiner.clone());
            for (id, x) in inputs[r].iter() {
                if global_all.contains(id) {
                    local.put(id, x.duplicate(pool));
                }
            }
            w.pull("check", &mut local, &globals[r], &m)?;
            let mut want = Table::new(s.combiner.clone());
            for id in local.ids() {
                want.put(id, global_all.get(id).expect("exists").duplicate(pool));
            }
            check(tag("pull"), &local, &want)?;

            tick()?;
            let mut t = mine();
            w.rotate("check", &mut t, None)?;
            check(tag("rotate/next"), &t, &inputs[(r + p - 1) % p])?;

            tick()?;
            let mut perm: Vec<usize> = (0..p).collect();
            for i in (1..p).rev() {
                perm.swap(
                    i,
                    (h(&[seed, round, 11, i as u64]) % (i as u64 + 1)) as usize,
                );
            }
            let src = perm.iter().position(|&d| d == r).expect("permutation");
            let mut t = mine();
            w.rotate("check", &mut t, Some(&perm))?;
            check(tag("rotate/map"), &t, &inputs[src])?;
        }
    }
    Ok(Report { verified })
}

/// Results [`run`] verifies per round: allreduce ×3, broadcast ×9, allgather ×4 (ring,
/// recursive doubling, auto, known total), reduce ×8 (auto, binomial, binary,
/// scatter-gather, net-hierarchy, net-ring, chain, net-chain), gather ×8 (auto, direct,
/// net-tree, parallel, binomial, binary, delegate, net-relay), scatter ×8, reduce-scatter ×3
/// (ring, recursive halving, auto), regroup ×2, push, pull, rotate ×2.
pub const CHECKS_PER_ROUND: usize = 49;

/// Results [`run_kv`] (and [`run_edges`]) verifies per round.
pub const KV_CHECKS_PER_ROUND: usize = 18;

/// Checks the collectives that move whole partitions on key-value tables (i64 or str keys; sum
/// of i64 or append of i32 arrays; uneven partitions whose keys overlap between ranks) against
/// the model: allreduce (bidirectional exchange, regroup-allgather, auto), allgather (ring,
/// known total, recursive doubling), regroup (modulo, master-planned), broadcast (chain:
/// partitions cut into chunks and reassembled, binomial, scatter-allgather: whole partitions
/// scattered to their owners and passed around the ring), reduce (binomial, scatter-gather), reduce-scatter (ring,
/// recursive halving) and rotate.
/// Results are compared in [`canonical`] form (append's concatenation order depends on the
/// order partitions meet).
pub fn run_kv(w: &impl Collectives, spec: &Spec) -> Result<Report> {
    let (p, pool) = (w.size(), w.pool());
    run_whole(w, spec, "key-value", |seed, round| {
        let s = kv_shape(seed, round);
        let inputs = (0..p).map(|k| kv_gen(pool, &s, seed, round, 0, k));
        (s.describe(), inputs.collect())
    })
}

/// [`run_kv`]'s checks on edge tables (weighted or not, up to 3000 edges per partition and
/// rank): partitions with the same id concatenate, and records must arrive whole through the
/// segmenting and chunking algorithms. Compared in [`canonical`] form (records sorted).
pub fn run_edges(w: &impl Collectives, spec: &Spec) -> Result<Report> {
    let (p, pool) = (w.size(), w.pool());
    run_whole(w, spec, "edge", |seed, round| {
        let s = edge_shape(seed, round);
        let inputs = (0..p).map(|k| edge_gen(pool, &s, seed, round, 0, k));
        (s.describe(), inputs.collect())
    })
}

/// The checks of [`run_kv`] on the tables `round_of(seed, round)` gives (a description and
/// every rank's input), whose partitions only ever combine whole.
fn run_whole(
    w: &impl Collectives,
    spec: &Spec,
    kind: &str,
    round_of: impl Fn(u64, u64) -> (String, Vec<Table>),
) -> Result<Report> {
    let (r, p, pool) = (w.rank(), w.size(), w.pool());
    let m = Partitioner::Modulo;
    let label = format!("check-{kind}");
    let label = label.as_str();
    let mut verified = 0usize;
    for round in 0..spec.rounds {
        let seed = spec.seed;
        let (describe, inputs) = round_of(seed, round);
        let all = combine_all(pool, &inputs);
        let mine = || copy(pool, &inputs[r]);
        let root = (h(&[seed, round, 29]) % p as u64) as usize;
        let mut check = |op: &str, got: &Table, want: &Table| -> Result<()> {
            let name = format!("{op} [{kind} round {round}, {describe}, root {root}]");
            same(&name, &canonical(pool, got)?, &canonical(pool, want)?)?;
            verified += 1;
            Ok(())
        };
        for algo in [
            AllreduceAlgorithm::BidirectionalExchange,
            AllreduceAlgorithm::RegroupAllgather,
            AllreduceAlgorithm::Auto,
        ] {
            let mut t = mine();
            w.allreduce(label, &mut t, Opts::default().algorithm(algo))?;
            check(&format!("allreduce/{}", algo.name()), &t, &all)?;
        }
        let total: usize = inputs.iter().map(|t| t.len()).sum();
        for algo in [
            AllgatherAlgorithm::Ring,
            AllgatherAlgorithm::KnownTotal(total),
            AllgatherAlgorithm::RecursiveDoubling,
            AllgatherAlgorithm::Auto,
        ] {
            let mut t = mine();
            w.allgather(label, &mut t, Opts::default().algorithm(algo))?;
            check(&format!("allgather/{}", algo.name()), &t, &all)?;
        }
        let mut t = mine();
        w.regroup(label, &mut t, Some(&m))?;
        check("regroup/modulo", &t, &owned(pool, &all, r, p))?;
        // Planned: every combined partition lands on exactly one worker (gathered with Reject).
        let mut t = mine();
        w.regroup(label, &mut t, None)?;
        let mut u = Table::new(Combiner::Reject);
        for (id, x) in t.iter() {
            u.put(id, x.duplicate(pool));
        }
        w.allgather(
            label,
            &mut u,
            Opts::default().algorithm(AllgatherAlgorithm::Ring),
        )?;
        check("regroup/planned", &u, &all)?;
        for algo in [
            BroadcastAlgorithm::Chain,
            BroadcastAlgorithm::Binomial,
            BroadcastAlgorithm::ScatterAllgather,
        ] {
            let mut t = mine();
            w.broadcast(label, &mut t, Opts::default().root(root).algorithm(algo))?;
            check(&format!("broadcast/{}", algo.name()), &t, &inputs[root])?;
        }
        for algo in [ReduceAlgorithm::Binomial, ReduceAlgorithm::ScatterGather] {
            let mut t = mine();
            w.reduce(label, &mut t, Opts::default().root(root).algorithm(algo))?;
            let empty = Table::new(all.combiner().clone());
            let want = if r == root { &all } else { &empty };
            check(&format!("reduce/{}", algo.name()), &t, want)?;
        }
        for algo in [
            ReduceScatterAlgorithm::Ring,
            ReduceScatterAlgorithm::RecursiveHalving,
            ReduceScatterAlgorithm::Auto,
        ] {
            let mut t = mine();
            w.reduce_scatter(label, &mut t, &m, Opts::default().algorithm(algo))?;
            let name = format!("reduce-scatter/{}", algo.name());
            check(&name, &t, &owned(pool, &all, r, p))?;
        }
        let mut t = mine();
        w.rotate(label, &mut t, None)?;
        check("rotate", &t, &inputs[(r + p - 1) % p])?;
    }
    Ok(Report { verified })
}
