//! `harp check`: runs every collective and algorithm on random tables and compares each
//! worker's result with a sequential model. Every worker regenerates every other worker's input
//! from the seed, so each can compute the expected result on its own. Values are small integers,
//! so sums are exact in every element type and results must match bit for bit.
//!
//! Fault injection for tests, at rank R's N-th operation: `--die-rank R --die-at N` aborts the
//! process (as if killed); `--stall-rank R --stall-at N` stops it with SIGSTOP (a silent peer:
//! no data, no heartbeats); `--hang-rank R --hang-at N` blocks its main thread while its I/O
//! threads stay alive (a worker stuck in user code).

use std::collections::BTreeMap;

use clap::Args;
use harp::collective::{
    AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, ReduceAlgorithm,
};
use harp::{Array, Combiner, DType, Error, Partitioner, Pool, Result, Table, Worker};

use crate::cluster::ClusterOpts;

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
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

/// splitmix64
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
fn h(parts: &[u64]) -> u64 {
    parts.iter().fold(0x1234_5678u64, |acc, &x| mix(acc ^ x))
}

/// One round's shape, shared by all ranks: element type, combiner, partition lengths.
struct Shape {
    dtype: DType,
    combiner: Combiner,
    len_of: BTreeMap<u32, usize>,
}

fn shape(seed: u64, round: u64, max_elems: usize) -> Shape {
    let dtype = [DType::F64, DType::F32, DType::I64, DType::I32, DType::U8]
        [(h(&[seed, round, 1]) % 5) as usize];
    let combiner =
        [Combiner::Sum, Combiner::Min, Combiner::Max][(h(&[seed, round, 2]) % 3) as usize].clone();
    let sizes = [0usize, 1, 3, 100, 1000, max_elems / 7, max_elems];
    let len_of = (0..12u32)
        .map(|pid| {
            (
                pid,
                sizes[(h(&[seed, round, 3, pid as u64]) % sizes.len() as u64) as usize],
            )
        })
        .collect();
    Shape {
        dtype,
        combiner,
        len_of,
    }
}

/// Rank `r`'s random table for (seed, round, salt): a random subset of the 12 partition ids.
fn gen(
    pool: &Pool,
    s: &Shape,
    seed: u64,
    round: u64,
    salt: u64,
    r: usize,
    only: Option<&dyn Fn(u32) -> bool>,
) -> Table {
    let mut t = Table::new(s.combiner.clone());
    let count = h(&[seed, round, salt, r as u64, 4]) % 7;
    for k in 0..count {
        let pid = (h(&[seed, round, salt, r as u64, 5, k]) % 12) as u32;
        if t.contains(pid) || only.is_some_and(|f| !f(pid)) {
            continue;
        }
        let n = s.len_of[&pid];
        let mut a = Array::zeros(pool, s.dtype, n);
        fill(&mut a, &[seed, round, salt, r as u64, pid as u64]);
        t.add(pid, a).expect("fresh id");
    }
    t
}

/// Small random integers, so that sums are exact in every element type.
fn fill(a: &mut Array, key: &[u64]) {
    let base = h(key);
    let v = |i: usize| (mix(base ^ i as u64) % 201) as i64 - 100;
    match a.dtype() {
        DType::F64 => a
            .as_mut_slice::<f64>()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = v(i) as f64),
        DType::F32 => a
            .as_mut_slice::<f32>()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = v(i) as f32),
        DType::I64 => a
            .as_mut_slice::<i64>()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = v(i)),
        DType::I32 => a
            .as_mut_slice::<i32>()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = v(i) as i32),
        DType::U8 => a
            .as_mut_slice::<u8>()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = v(i) as u8),
    }
}

fn copy(pool: &Pool, t: &Table) -> Table {
    let mut c = Table::new(t.combiner().clone());
    for (id, a) in t.iter() {
        c.put(id, a.duplicate(pool));
    }
    c
}

/// Union of tables with the combiner, in rank order.
fn combine_all(pool: &Pool, tables: &[Table]) -> Table {
    let mut out = Table::new(
        tables
            .first()
            .map(|t| t.combiner().clone())
            .unwrap_or_default(),
    );
    for t in tables {
        for (id, a) in t.iter() {
            out.add(id, a.duplicate(pool)).expect("model combine");
        }
    }
    out
}

fn owned(pool: &Pool, t: &Table, r: usize, p: usize) -> Table {
    let mut c = Table::new(t.combiner().clone());
    for (id, a) in t.iter() {
        if id as usize % p == r {
            c.put(id, a.duplicate(pool));
        }
    }
    c
}

fn same(op: &str, got: &Table, want: &Table) -> Result<()> {
    if got.ids() != want.ids() {
        return Err(Error::data(format!(
            "{op}: partition ids {:?}, expected {:?}",
            got.ids(),
            want.ids()
        )));
    }
    for (id, a) in want.iter() {
        let g = got.get(id).expect("same ids");
        if g.dtype() != a.dtype() || g.bytes() != a.bytes() {
            let at = g.bytes().iter().zip(a.bytes()).position(|(x, y)| x != y);
            return Err(Error::data(format!(
                "{op}: partition {id} differs ({} {} bytes vs expected {} {} bytes, first difference at byte {at:?})",
                g.dtype().name(),
                g.bytes().len(),
                a.dtype().name(),
                a.bytes().len()
            )));
        }
    }
    Ok(())
}

struct Faults {
    count: usize,
    die: Option<(usize, usize)>,
    stall: Option<(usize, usize)>,
    hang: Option<(usize, usize)>,
    rank: usize,
}
impl Faults {
    fn tick(&mut self) {
        self.count += 1;
        if self.die == Some((self.rank, self.count)) {
            eprintln!(
                "rank {}: fault injection: aborting at operation {}",
                self.rank, self.count
            );
            std::process::abort();
        }
        if self.stall == Some((self.rank, self.count)) {
            eprintln!(
                "rank {}: fault injection: stopping (SIGSTOP) at operation {}",
                self.rank, self.count
            );
            // SAFETY: raise() has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        if self.hang == Some((self.rank, self.count)) {
            eprintln!(
                "rank {}: fault injection: hanging at operation {}",
                self.rank, self.count
            );
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

pub fn run(w: &Worker, a: &CheckArgs) -> Result<()> {
    let (r, p, pool) = (w.rank(), w.size(), w.pool());
    let mut faults = Faults {
        count: 0,
        die: a.die_rank.map(|x| (x, a.die_at)),
        stall: a.stall_rank.map(|x| (x, a.stall_at)),
        hang: a.hang_rank.map(|x| (x, a.hang_at)),
        rank: r,
    };
    let mut verified = 0usize;
    let m = Partitioner::Modulo;
    for round in 0..a.rounds {
        let s = shape(a.seed, round, a.max_elems);
        let inputs: Vec<Table> = (0..p)
            .map(|k| gen(pool, &s, a.seed, round, 0, k, None))
            .collect();
        let all = combine_all(pool, &inputs);
        let mine = || copy(pool, &inputs[r]);
        let root = (h(&[a.seed, round, 9]) % p as u64) as usize;
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

        faults.tick();
        w.barrier("check")?;

        for algo in [
            AllreduceAlgorithm::BidirectionalExchange,
            AllreduceAlgorithm::RegroupAllgather,
        ] {
            faults.tick();
            let mut t = mine();
            w.allreduce("check", &mut t, algo)?;
            check(tag(&format!("allreduce/{}", algo.name())), &t, &all)?;
        }
        {
            // Auto decides from the local table's size, so it is used (as documented) with
            // tables of the same shape on every worker.
            let uniform: Vec<Table> = (0..p)
                .map(|k| {
                    let mut u = copy(pool, &all);
                    for (id, x) in u.iter_mut() {
                        fill(x, &[a.seed, round, 13, k as u64, id as u64]);
                    }
                    u
                })
                .collect();
            let want = combine_all(pool, &uniform);
            faults.tick();
            let mut t = copy(pool, &uniform[r]);
            w.allreduce("check", &mut t, AllreduceAlgorithm::Auto)?;
            check(tag("allreduce/auto"), &t, &want)?;
        }
        for algo in [
            BroadcastAlgorithm::Auto,
            BroadcastAlgorithm::Chain,
            BroadcastAlgorithm::ChainRandom(round),
            BroadcastAlgorithm::Binomial,
            BroadcastAlgorithm::OneByOne,
        ] {
            faults.tick();
            let mut t = mine();
            w.broadcast("check", &mut t, root, algo)?;
            check(
                tag(&format!("broadcast/{}", algo.name())),
                &t,
                &inputs[root],
            )?;
        }
        {
            faults.tick();
            let mut t = mine();
            w.allgather("check", &mut t, AllgatherAlgorithm::Ring)?;
            check(tag("allgather/ring"), &t, &all)?;
            faults.tick();
            let total: usize = inputs.iter().map(|t| t.len()).sum();
            let mut t = mine();
            w.allgather("check", &mut t, AllgatherAlgorithm::KnownTotal(total))?;
            check(tag("allgather/known-total"), &t, &all)?;
        }
        for algo in [ReduceAlgorithm::Binomial, ReduceAlgorithm::ScatterGather] {
            faults.tick();
            let mut t = mine();
            w.reduce("check", &mut t, root, algo)?;
            let empty = Table::new(s.combiner.clone());
            check(
                tag(&format!("reduce/{}", algo.name())),
                &t,
                if r == root { &all } else { &empty },
            )?;
        }
        {
            faults.tick();
            let mut t = mine();
            w.gather("check", &mut t, root)?;
            check(tag("gather"), &t, if r == root { &all } else { &inputs[r] })?;

            faults.tick();
            let mut t = mine();
            w.scatter("check", &mut t, root, &m)?;
            check(tag("scatter"), &t, &owned(pool, &inputs[root], r, p))?;

            faults.tick();
            let mut t = mine();
            w.reduce_scatter("check", &mut t, &m)?;
            check(tag("reduce-scatter"), &t, &owned(pool, &all, r, p))?;

            faults.tick();
            let mut t = mine();
            w.regroup("check", &mut t, Some(&m))?;
            check(tag("regroup/modulo"), &t, &owned(pool, &all, r, p))?;

            // Master-decided plan: each worker gets some of the combined partitions; together
            // they hold every partition exactly once (checked by gathering with Reject).
            faults.tick();
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
            faults.tick();
            w.allgather("check", &mut u, AllgatherAlgorithm::Ring)?;
            check(tag("regroup/planned"), &u, &all)?;

            // Push: local partitions combine into the owners' global tables.
            faults.tick();
            let globals: Vec<Table> = (0..p)
                .map(|k| {
                    gen(
                        pool,
                        &s,
                        a.seed,
                        round,
                        7,
                        k,
                        Some(&|pid| pid as usize % p == k),
                    )
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
            faults.tick();
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

            faults.tick();
            let mut t = mine();
            w.rotate("check", &mut t, None)?;
            check(tag("rotate/next"), &t, &inputs[(r + p - 1) % p])?;

            faults.tick();
            let mut perm: Vec<usize> = (0..p).collect();
            for i in (1..p).rev() {
                perm.swap(
                    i,
                    (h(&[a.seed, round, 11, i as u64]) % (i as u64 + 1)) as usize,
                );
            }
            let src = perm.iter().position(|&d| d == r).expect("permutation");
            let mut t = mine();
            w.rotate("check", &mut t, Some(&perm))?;
            check(tag("rotate/map"), &t, &inputs[src])?;
        }
    }
    if r == 0 {
        println!(
            "check: {verified} results verified on {p} workers ({} rounds, seed {})",
            a.rounds, a.seed
        );
        let st = pool.stats();
        println!(
            "check: pool allocations {} reuses {} bytes held {}",
            st.allocations, st.reuses, st.bytes_held
        );
    }
    Ok(())
}
