//! `harp check`: runs every collective and algorithm on random tables (dense, key-value and
//! edge tables) and compares each worker's result with the sequential model ([`harp::check`]).
//!
//! Fault injection for tests, at rank R's N-th operation: `--die-rank R --die-at N` aborts the
//! process (as if killed); `--stall-rank R --stall-at N` stops it with SIGSTOP (a silent peer:
//! no data, no heartbeats); `--hang-rank R --hang-at N` blocks its main thread while its I/O
//! threads stay alive (a worker stuck in user code).
//!
//! `--groups` then runs the same check on two disjoint groups at the same time (the even ranks
//! in descending order, the odd ranks in ascending order: group ranks differ from world
//! ranks), followed by a barrier of the whole job.

use clap::Args;
use harp::check::{Fault, Faults, Spec};
use harp::Collectives;
use harp::{Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct CheckArgs {
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Random table shapes per operation.
    #[arg(long, default_value_t = 3)]
    pub rounds: u64,
    /// Largest partition in elements (some partitions are this big, to exercise chunking and
    /// segmenting).
    #[arg(long, default_value_t = 40_000)]
    pub max_elems: usize,
    #[arg(long)]
    pub die_rank: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub die_at: usize,
    #[arg(long)]
    pub stall_rank: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub stall_at: usize,
    #[arg(long)]
    pub hang_rank: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub hang_at: usize,
    /// Also check every collective on two disjoint groups running at the same time.
    #[arg(long)]
    pub groups: bool,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

/// What a fault does to this process.
fn inflict(rank: usize, fault: Fault, op: usize) -> Result<()> {
    match fault {
        Fault::Die => {
            eprintln!("rank {rank}: fault injection: aborting at operation {op}");
            std::process::abort();
        }
        Fault::Stall => {
            eprintln!("rank {rank}: fault injection: stopping (SIGSTOP) at operation {op}");
            // SAFETY: raise() has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        Fault::Hang => {
            eprintln!("rank {rank}: fault injection: hanging at operation {op}");
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    Ok(())
}

/// Fails when a fault-injection rank `r` (`flag`) is not a rank of a job of `p` workers (the
/// fault would silently never happen).
pub fn fault_rank(flag: &str, r: Option<usize>, p: usize) -> Result<()> {
    match r {
        Some(r) if r >= p => Err(harp::Error::config(format!(
            "{flag} {r}: the job has ranks 0 to {}",
            p - 1
        ))),
        _ => Ok(()),
    }
}

pub fn run(w: &Worker, a: &CheckArgs) -> Result<()> {
    let p = w.size();
    fault_rank("--die-rank", a.die_rank, p)?;
    fault_rank("--stall-rank", a.stall_rank, p)?;
    fault_rank("--hang-rank", a.hang_rank, p)?;
    // Every worker builds every rank's tables (12 partitions of up to --max-elems 8-byte
    // elements each), their combination and its own copies.
    harp::util::memory::check_fits(
        &format!(
            "--max-elems {}: every worker's copies of the random tables",
            a.max_elems
        ),
        (a.max_elems as u128).checked_mul(12 * 8 * (p as u128 + 4)),
    )?;
    let spec = Spec {
        seed: a.seed,
        rounds: a.rounds,
        max_elems: a.max_elems,
    };
    let faults = Faults {
        die: a.die_rank.map(|x| (x, a.die_at)),
        stall: a.stall_rank.map(|x| (x, a.stall_at)),
        hang: a.hang_rank.map(|x| (x, a.hang_at)),
    };
    let r = w.rank();
    let report = harp::check::run(w, &spec, &faults, &mut |f, op| inflict(r, f, op))?;
    let kv = harp::check::run_kv(w, &spec)?;
    let edges = harp::check::run_edges(w, &spec)?;
    let grouped = if a.groups {
        let members = check_groups(w.size())
            .into_iter()
            .find(|m| m.contains(&r))
            .expect("every rank is in one group");
        let g = w.group(&members)?;
        let report = harp::check::run(&g, &spec, &Faults::default(), &mut |_, _| Ok(()))?;
        w.barrier("after the groups")?;
        // Rank 0 reports its own group; every member verified as many.
        Some((members, report.verified))
    } else {
        None
    };
    if r == 0 {
        println!(
            "check: {} results verified on {} workers ({} rounds, seed {})",
            report.verified,
            w.size(),
            a.rounds,
            a.seed
        );
        println!(
            "check: {} key-value results verified on {} workers ({} rounds, seed {})",
            kv.verified,
            w.size(),
            a.rounds,
            a.seed
        );
        println!(
            "check: {} edge-table results verified on {} workers ({} rounds, seed {})",
            edges.verified,
            w.size(),
            a.rounds,
            a.seed
        );
        if let Some((members, verified)) = grouped {
            println!(
                "check: {verified} results verified in group {members:?} (groups {:?})",
                check_groups(w.size())
            );
        }
        let st = w.pool().stats();
        println!(
            "check: pool allocations {} reuses {} bytes held {}",
            st.allocations, st.reuses, st.bytes_held
        );
    }
    Ok(())
}

/// The groups of `--groups` for `p` workers: the even ranks in descending order and the odd
/// ranks in ascending order (one group when p = 1).
fn check_groups(p: usize) -> Vec<Vec<usize>> {
    let even: Vec<usize> = (0..p).rev().filter(|r| r % 2 == 0).collect();
    let odd: Vec<usize> = (0..p).filter(|r| r % 2 == 1).collect();
    [even, odd].into_iter().filter(|g| !g.is_empty()).collect()
}
