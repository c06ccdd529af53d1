//! `harp bench OP`: times one collective. Each repetition starts after a barrier and makes
//! `--inner K` back-to-back calls (default 1); the time of one call in a repetition is the
//! slowest worker's time for the repetition divided by K, and the median over repetitions is
//! reported. `--inner` is the protocol of OSU, Open MPI's and gloo's benchmarks for small
//! messages (many calls in a row, no barrier between them), so figures compare exactly.
//! The CPU a call costs is reported too: each worker process's user and system time over the
//! timed calls only (not the tables' set-up), divided by the calls, averaged over the workers.
//! So are the connections the workers have opened by the end of the timed calls (they open on
//! first use): rank 0's (every worker connects to it at start-up), the most of any other
//! worker's, and the mean.

use harp::Collectives;
use harp::Opts;
use std::time::Instant;

use clap::Args;
use harp::collective::{
    choose, segment, AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, GatherAlgorithm,
    ReduceAlgorithm, ReduceScatterAlgorithm, ScatterAlgorithm,
};
use harp::{Array, Combiner, Error, Partitioner, Result, Table, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
    /// broadcast, allreduce, allgather, reduce, gather, scatter, reduce-scatter, regroup,
    /// push, pull, rotate or barrier.
    pub op: String,
    /// Message size in bytes (suffixes k, m, g = KiB, MiB, GiB). For allgather it is the total
    /// gathered; for every other op it is each worker's table.
    #[arg(long, value_parser = harp::config::parse_bytes, default_value = "1m")]
    pub bytes: u64,
    /// Algorithm (broadcast: auto, chain, chain-random, binomial, one-by-one, net-chain,
    /// net-hierarchy, net-tree, scatter-allgather; allreduce: auto, bidirectional-exchange, regroup-allgather;
    /// allgather: auto, ring, recursive-doubling, known-total; reduce-scatter: auto, ring,
    /// recursive-halving; reduce: auto, binomial, binary, scatter-gather, net-hierarchy,
    /// net-ring, chain, net-chain; gather and scatter: auto, direct, binomial, binary, delegate,
    /// parallel, net-tree, net-relay).
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Partitions per table (default: 1; ops that move partitions to owners use 4 per worker).
    #[arg(long)]
    pub partitions: Option<usize>,
    #[arg(long, default_value_t = 10)]
    pub reps: usize,
    /// Back-to-back calls in each repetition, without a barrier between them; a repetition's
    /// time is divided by this (every worker holds K input tables, so memory is K times).
    #[arg(long, default_value_t = 1,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub inner: usize,
    /// Untimed repetitions first.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

/// Fails with a clear error when a worker's tables for `bytes` cannot fit in this host's
/// memory: its table, the buffers it receives into and the result (at most about three times
/// `bytes` for every op), checked before anything is allocated.
fn check_memory(bytes: u64) -> Result<()> {
    check_memory_in(bytes, harp::util::memory::available())
}

/// [`check_memory`] with `available` bytes of memory.
fn check_memory_in(bytes: u64, available: Option<u64>) -> Result<()> {
    harp::util::memory::check_fits_in(
        &format!(
            "--bytes {bytes}: each worker's table, receive buffers and result (about 3 x {})",
            harp::util::memory::human(bytes as u128)
        ),
        (bytes as u128).checked_mul(3),
        available,
    )
}

enum Algo {
    Bcast(BroadcastAlgorithm),
    Allreduce(AllreduceAlgorithm),
    /// `KnownTotal`'s count is filled in per call (partitions × workers).
    Allgather(AllgatherAlgorithm),
    ReduceScatter(ReduceScatterAlgorithm),
    Reduce(ReduceAlgorithm),
    Gather(GatherAlgorithm),
    Scatter(ScatterAlgorithm),
    None,
}

/// Builds this worker's input table for one repetition.
fn table(w: &Worker, op: &str, bytes: u64, parts: usize) -> Table {
    harp::sim::bench_table(w.pool(), op, w.rank(), w.size(), bytes, parts)
}

fn once(w: &Worker, op: &str, algo: &Algo, t: &mut Table, parts: usize) -> Result<()> {
    let m = Partitioner::Modulo;
    match (op, algo) {
        ("broadcast", Algo::Bcast(a)) => w.broadcast("bench", t, Opts::default().algorithm(*a)),
        ("allreduce", Algo::Allreduce(a)) => w.allreduce("bench", t, Opts::default().algorithm(*a)),
        ("allgather", Algo::Allgather(AllgatherAlgorithm::KnownTotal(_))) => w.allgather(
            "bench",
            t,
            Opts::default().algorithm(AllgatherAlgorithm::KnownTotal(parts * w.size())),
        ),
        ("allgather", Algo::Allgather(a)) => w.allgather("bench", t, Opts::default().algorithm(*a)),
        ("reduce", Algo::Reduce(a)) => w.reduce("bench", t, Opts::default().algorithm(*a)),
        ("gather", Algo::Gather(a)) => w.gather("bench", t, Opts::default().algorithm(*a)),
        ("scatter", Algo::Scatter(a)) => w.scatter("bench", t, &m, Opts::default().algorithm(*a)),
        ("reduce-scatter", Algo::ReduceScatter(a)) => {
            w.reduce_scatter("bench", t, &m, Opts::default().algorithm(*a))
        }
        ("regroup", _) => w.regroup("bench", t, Some(&m)),
        ("rotate", _) => w.rotate("bench", t, None),
        ("push", _) => {
            let mut global = Table::new(Combiner::Sum);
            w.push("bench", t, &mut global, &m)
        }
        ("pull", _) => {
            let mut global = Table::new(Combiner::Sum);
            for (id, a) in t.iter() {
                if id as usize % w.size() == w.rank() {
                    global.put(id, a.duplicate(w.pool()));
                }
            }
            w.pull("bench", t, &global, &m)
        }
        ("barrier", _) => w.barrier("bench"),
        _ => Err(Error::config(format!("unknown operation '{op}'"))),
    }
}

pub fn run(w: &Worker, a: &BenchArgs) -> Result<()> {
    let op = a.op.as_str();
    let alg = a.algorithm.as_deref();
    let algo = match op {
        "broadcast" => Algo::Bcast(BroadcastAlgorithm::parse(alg.unwrap_or("auto"))?),
        "allreduce" => Algo::Allreduce(AllreduceAlgorithm::parse(alg.unwrap_or("auto"))?),
        "allgather" => Algo::Allgather(match alg.unwrap_or("auto") {
            "auto" => AllgatherAlgorithm::Auto,
            "ring" => AllgatherAlgorithm::Ring,
            "recursive-doubling" => AllgatherAlgorithm::RecursiveDoubling,
            "known-total" => AllgatherAlgorithm::KnownTotal(0),
            x => {
                return Err(Error::config(format!(
                    "unknown allgather algorithm '{x}' (auto, ring, recursive-doubling, \
                     known-total)"
                )))
            }
        }),
        "reduce-scatter" => {
            Algo::ReduceScatter(ReduceScatterAlgorithm::parse(alg.unwrap_or("auto"))?)
        }
        "reduce" => Algo::Reduce(ReduceAlgorithm::parse(alg.unwrap_or("auto"))?),
        "gather" => Algo::Gather(GatherAlgorithm::parse(alg.unwrap_or("auto"))?),
        "scatter" => Algo::Scatter(ScatterAlgorithm::parse(alg.unwrap_or("auto"))?),
        "regroup" | "rotate" | "push" | "pull" | "barrier" => {
            if let Some(x) = alg {
                return Err(Error::config(format!(
                    "{op} has one algorithm; --algorithm {x} is not accepted"
                )));
            }
            Algo::None
        }
        _ => return Err(Error::config(format!("unknown operation '{op}'"))),
    };
    let algo_name = match &algo {
        Algo::Bcast(b) => {
            let (net, topo) = (w.net_model(), w.topology());
            let chunk = segment::chunk(w.config(), a.bytes, w.size());
            let crossover = w.config().broadcast_crossover;
            b.resolve(a.bytes, crossover, net.as_deref(), topo, 0, chunk)
                .name()
                .to_string()
        }
        Algo::Allreduce(x) => x
            .resolve(a.bytes, w.topology(), w.config().allreduce_crossover)
            .name()
            .to_string(),
        Algo::Allgather(x) => x.name().into(),
        Algo::ReduceScatter(x) => x.name().into(),
        Algo::Reduce(x) => x.name().into(),
        Algo::Scatter(x) => match x.resolve(w.net_model().as_deref(), 0) {
            // Without a model the root's choice by size (`choose::scatter`).
            ScatterAlgorithm::Auto => choose::scatter(a.bytes, w.size()).name().into(),
            y => y.name().into(),
        },
        Algo::Gather(x) => x.resolve(w.net_model().as_deref(), 0).name().into(),
        Algo::None => "default".into(),
    };
    if a.reps == 0 {
        return Err(Error::config("--reps must be at least 1"));
    }
    let p = w.size();
    let parts = a.partitions.unwrap_or(match op {
        "reduce-scatter" | "regroup" | "scatter" | "push" | "pull" => 4 * p,
        _ => 1,
    });
    harp::config::check_partitions("--partitions", parts as u64, p)?;
    // Each partition holds a pooled buffer (at least 64 bytes) and a table entry.
    harp::util::memory::check_fits(
        &format!("--partitions {parts}: the partitions of {} tables", a.inner),
        (parts as u128).checked_mul(128 * a.inner as u128),
    )?;
    check_memory((a.bytes as u128 * a.inner as u128).min(u64::MAX as u128) as u64)?;
    // The times of every repetition, and their allreduce (a table of them, its buffers).
    harp::util::memory::check_fits(
        &format!("--reps {}: the time of every repetition", a.reps),
        Some(a.reps as u128 * 8 * 4),
    )?;
    let mut times = Vec::with_capacity(a.reps);
    let mut cpu = [0.0f64; 2];
    for rep in 0..a.warmup + a.reps {
        let mut tables: Vec<Table> = (0..a.inner).map(|_| table(w, op, a.bytes, parts)).collect();
        w.barrier("bench-start")?;
        let (c0, t0) = (cpu_seconds(), Instant::now());
        for t in &mut tables {
            once(w, op, &algo, t, parts)?;
        }
        let dt = t0.elapsed().as_secs_f64() / a.inner as f64;
        let c1 = cpu_seconds();
        if rep >= a.warmup {
            times.push(dt);
            cpu[0] += c1[0] - c0[0];
            cpu[1] += c1[1] - c0[1];
        }
    }
    // Connections opened by the timed calls and everything before them (they open on first
    // use): rank 0's, the largest of the other workers' and their mean.
    let conns = w.connections().unwrap_or(p - 1) as f64;
    // CPU per call, averaged over the workers.
    let calls = (a.reps * a.inner) as f64;
    let mut ct = Table::new(Combiner::Sum);
    ct.add(
        0,
        Array::from_slice(w.pool(), &[cpu[0] / calls, cpu[1] / calls, conns]),
    )?;
    w.allreduce(
        "bench-cpu",
        &mut ct,
        Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
    )?;
    let cpu: Vec<f64> = ct
        .get(0)
        .expect("cpu")
        .as_slice::<f64>()?
        .iter()
        .map(|x| x / p as f64)
        .collect();
    let (cpu, conns_mean) = ([cpu[0] * 1e6, cpu[1] * 1e6], cpu[2]);
    // The time of a repetition is its slowest worker's; the last entry is the most
    // connections of a worker other than rank 0.
    let mut tt = Table::new(Combiner::Max);
    times.push(if w.rank() == 0 { 0.0 } else { conns });
    tt.add(0, Array::from_slice(w.pool(), &times))?;
    w.allreduce(
        "bench-times",
        &mut tt,
        Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
    )?;
    if w.rank() != 0 {
        return Ok(());
    }
    let mut all = tt.get(0).expect("times").as_slice::<f64>()?.to_vec();
    let conns_others = all.pop().unwrap_or(0.0);
    all.sort_by(f64::total_cmp);
    let median = if all.len() % 2 == 1 {
        all[all.len() / 2]
    } else {
        (all[all.len() / 2 - 1] + all[all.len() / 2]) / 2.0
    };
    // A barrier moves no table: no bytes, no throughput.
    let bytes = if op == "barrier" { 0 } else { a.bytes };
    let mbps = bytes as f64 / median / 1e6;
    if a.json {
        let j = serde_json::json!({
            "op": op, "algorithm": algo_name, "workers": p, "bytes": bytes, "partitions": parts,
            "reps": a.reps, "inner": a.inner, "median_s": median, "min_s": all[0], "max_s": all[all.len() - 1],
            "throughput_mb_s": mbps, "cpu_user_us_per_call": cpu[0], "cpu_sys_us_per_call": cpu[1],
            "connections_rank0": conns, "connections_max_others": conns_others,
            "connections_mean": conns_mean,
        });
        println!("{j}");
    } else {
        println!(
            "{op} ({algo_name}) workers={p} bytes={} reps={} inner={}: median {:.6} s, min {:.6} s, max {:.6} s, {:.1} MB/s; CPU per call and worker: user {:.2} µs, system {:.2} µs; connections: rank 0 {conns}, others at most {conns_others} ({conns_mean:.1} on average)",
            bytes,
            a.reps,
            a.inner,
            median,
            all[0],
            all[all.len() - 1],
            mbps,
            cpu[0],
            cpu[1]
        );
    }
    Ok(())
}

/// User and system CPU seconds of this process so far (all its threads: the worker's own and
/// its I/O threads).
fn cpu_seconds() -> [f64; 2] {
    // SAFETY: an all-zero rusage is a valid value, and getrusage only writes into it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer; it cannot fail then.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    [secs(u.ru_utime), secs(u.ru_stime)]
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_beyond_memory_are_refused() {
        let e = super::check_memory_in(100 << 30, Some(21 << 30))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--bytes 107374182400")
                && e.contains(": 300.0 GiB of memory")
                && e.contains("only 21.0 GiB available"),
            "{e}"
        );
        super::check_memory_in(7 << 30, Some(21 << 30)).unwrap();
        // More than any process can address, whatever the host.
        let e = super::check_memory(u64::MAX).unwrap_err().to_string();
        assert!(e.contains("more than a process can address"), "{e}");
        super::check_memory(1 << 20).unwrap();
    }
}
