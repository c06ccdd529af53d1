//! Tables of different sizes on different workers (the normal case for tables of partitions).
//! Automatic algorithm choices must be the same on every worker; partitions whose layouts
//! differ between workers are clear data errors. Workers run in this process, one thread each,
//! over loopback TCP; results are compared with a sequential computation and must be
//! bit-identical on every worker.

use harp::Collectives;
use harp::Opts;
use std::collections::BTreeMap;

use harp::collective::{AllreduceAlgorithm, ReduceAlgorithm, ReduceScatterAlgorithm};
use harp::{Array, Combiner, Config, DType, Listener, Partitioner, Pool, Table, Topology, Worker};

/// Runs `f` on `p` workers (scoped threads, one each) and returns their results in rank
/// order.
fn on_workers<T: Send>(p: usize, f: impl Fn(&Worker) -> T + Sync) -> Vec<T> {
    on_workers_with(p, Config::default(), f)
}

fn on_workers_with<T: Send>(p: usize, cfg: Config, f: impl Fn(&Worker) -> T + Sync) -> Vec<T> {
    let rt = harp::worker::runtime(2).unwrap();
    let bind = || Listener::bind(rt.handle(), "127.0.0.1:0".parse().unwrap(), &cfg).unwrap();
    let listeners: Vec<Listener> = (0..p).map(|_| bind()).collect();
    let topo = Topology::flat(listeners.iter().map(|l| l.addr.to_string()).collect());
    std::thread::scope(|s| {
        let running: Vec<_> = (0..p)
            .zip(listeners)
            .map(|(rank, l)| {
                let (f, topo, cfg, rt) = (&f, &topo, &cfg, &rt);
                s.spawn(move || {
                    let h = rt.handle().clone();
                    let w = Worker::start(
                        h,
                        cfg.clone(),
                        topo.clone(),
                        rank,
                        "uneven",
                        b"uneven-test-secret",
                        l,
                    );
                    let w = w.unwrap();
                    let out = f(&w);
                    w.close();
                    out
                })
            })
            .collect();
        running.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

const BIG: usize = 100_000;
const SMALL: usize = 10;

/// Rank `r`'s input in a case where the ranks in `heavy` hold `BIG` doubles: a shared
/// partition 0 of `SMALL` values on every rank and a partition 100 + r of its own. Values are
/// small integers, so sums are exact in any order.
fn input(pool: &Pool, r: usize, heavy: &[usize]) -> Table {
    let mut t = Table::new(Combiner::Sum);
    let shared: Vec<f64> = (0..SMALL).map(|i| (r * 7 + i) as f64).collect();
    t.add(0, Array::from_slice(pool, &shared)).unwrap();
    let n = if heavy.contains(&r) { BIG } else { SMALL };
    let own: Vec<f64> = (0..n).map(|i| ((i + r) % 1000) as f64).collect();
    t.add(100 + r as u32, Array::from_slice(pool, &own))
        .unwrap();
    t
}

fn contents(t: &Table) -> BTreeMap<u32, Vec<u64>> {
    t.iter()
        .map(|(id, a)| {
            let v = a.as_slice::<f64>().unwrap().iter().map(|x| x.to_bits());
            (id, v.collect())
        })
        .collect()
}

/// The sequential allreduce of every rank's input.
fn combined(pool: &Pool, p: usize, heavy: &[usize]) -> BTreeMap<u32, Vec<u64>> {
    let mut all = Table::new(Combiner::Sum);
    for r in 0..p {
        all.merge(input(pool, r, heavy)).unwrap();
    }
    contents(&all)
}

/// Which ranks hold a large table, for p workers: none, the first, the last (the folded
/// extra rank when p is not a power of two), the middle one (neither an extra rank nor its
/// partner at p = 5, 6, 7), all but one, all.
fn cases(p: usize) -> Vec<Vec<usize>> {
    vec![
        vec![],
        vec![0],
        vec![p - 1],
        vec![p / 2],
        (1..p).collect(),
        (0..p).collect(),
    ]
}

#[test]
fn auto_allreduce_agrees_with_uneven_tables() {
    for p in 1..=8 {
        let got = on_workers(p, |w| {
            let pool = w.pool();
            let mut out = Vec::new();
            for heavy in cases(p) {
                let mut t = input(pool, w.rank(), &heavy);
                w.allreduce("uneven", &mut t, Opts::default())
                    .unwrap_or_else(|e| panic!("p={p} heavy={heavy:?}: {e}"));
                assert_eq!(
                    contents(&t),
                    combined(pool, p, &heavy),
                    "p={p} heavy={heavy:?} rank {}",
                    w.rank()
                );
                out.push(contents(&t));
            }
            out
        });
        assert!(got.iter().all(|g| *g == got[0]), "p={p}: results differ");
    }
}

/// The automatic reduce-scatter halves while every table is small and falls back to the ring
/// when any is large, however the large tables are placed (on an extra rank that folds into its
/// partner, on that partner, on all but one); both explicit algorithms agree with it.
#[test]
fn auto_reduce_scatter_agrees_with_uneven_tables() {
    for p in 1..=8 {
        on_workers(p, |w| {
            let pool = w.pool();
            for heavy in cases(p) {
                for algo in [
                    ReduceScatterAlgorithm::Auto,
                    ReduceScatterAlgorithm::RecursiveHalving,
                    ReduceScatterAlgorithm::Ring,
                ] {
                    let mut t = input(pool, w.rank(), &heavy);
                    let m = Partitioner::Modulo;
                    w.reduce_scatter("uneven", &mut t, &m, Opts::default().algorithm(algo))
                        .unwrap_or_else(|e| panic!("p={p} heavy={heavy:?} {algo:?}: {e}"));
                    let mut want = combined(pool, p, &heavy);
                    want.retain(|&id, _| id as usize % p == w.rank());
                    assert_eq!(contents(&t), want, "p={p} heavy={heavy:?} {algo:?}");
                }
            }
        });
    }
}

#[test]
fn auto_broadcast_agrees_with_uneven_tables() {
    for p in 1..=8 {
        on_workers(p, |w| {
            let pool = w.pool();
            for heavy in cases(p) {
                for root in [0, p - 1] {
                    let mut t = input(pool, w.rank(), &heavy);
                    w.broadcast("uneven", &mut t, Opts::default().root(root))
                        .unwrap_or_else(|e| panic!("p={p} heavy={heavy:?} root={root}: {e}"));
                    assert_eq!(
                        contents(&t),
                        contents(&input(pool, root, &heavy)),
                        "p={p} heavy={heavy:?} root={root} rank {}",
                        w.rank()
                    );
                }
            }
        });
    }
}

/// The pipelined reduces (binary, and auto, which is binary without a network model; chain
/// and net-chain, which is chain without a model) with
/// tables of different sizes and partition sets: large partitions stream in chunks (the
/// default chunk, and 4 KiB), partitions only some workers hold are created on the way; the
/// root gets the sequential result, the others end empty.
#[test]
fn pipelined_reduce_with_uneven_tables() {
    for chunk in [0usize, 4096] {
        let cfg = Config {
            chunk_size: chunk,
            ..Config::default()
        };
        for p in 1..=8 {
            on_workers_with(p, cfg.clone(), |w| {
                let pool = w.pool();
                for heavy in cases(p) {
                    for root in [0, p / 2, p - 1] {
                        for algo in [
                            ReduceAlgorithm::Binary,
                            ReduceAlgorithm::Auto,
                            ReduceAlgorithm::Chain,
                            ReduceAlgorithm::NetChain,
                        ] {
                            let what = format!("p={p} chunk={chunk} heavy={heavy:?} root={root}");
                            let mut t = input(pool, w.rank(), &heavy);
                            w.reduce("uneven", &mut t, Opts::default().root(root).algorithm(algo))
                                .unwrap_or_else(|e| panic!("{what} {algo:?}: {e}"));
                            if w.rank() == root {
                                assert_eq!(contents(&t), combined(pool, p, &heavy), "{what}");
                            } else {
                                assert!(t.is_empty(), "{what} rank {}", w.rank());
                            }
                        }
                    }
                }
            });
        }
    }
}

/// A partition shaped differently on a child is a data error at its parent, naming the
/// partition and both shapes (their first chunks meet: every cut starts at byte 0).
#[test]
fn pipelined_reduce_refuses_partitions_shaped_differently() {
    let cfg = Config {
        chunk_size: 4096,
        ..Config::default()
    };
    for (dtype, n, want) in [
        (DType::F64, 50_000usize, "50000 f64 elements"),
        (DType::F32, 200_000, "200000 f32 elements"),
        (DType::F64, 100_001, "100001 f64 elements"),
    ] {
        let results = on_workers_with(2, cfg.clone(), |w| {
            let mut t = Table::new(Combiner::Sum);
            let a = match w.rank() {
                0 => Array::zeros(w.pool(), DType::F64, 100_000),
                _ => Array::zeros(w.pool(), dtype, n),
            };
            t.add(1, a).unwrap();
            w.reduce(
                "shapes",
                &mut t,
                Opts::default().algorithm(ReduceAlgorithm::Binary),
            )
        });
        let e = results[0].as_ref().unwrap_err();
        assert_eq!(e.kind(), "data", "{e}");
        let e = e.to_string();
        assert!(e.contains("partition 1: this worker holds "), "{e}");
        assert!(e.contains(want) && e.contains("100000 f64 elements"), "{e}");
    }
}

/// Partition 1 has another size or element type on rank 1: whichever worker meets the other's
/// piece reports a data error naming the partition and both shapes; the other fails too.
#[test]
fn partitions_shaped_differently_are_data_errors() {
    let theirs = [
        (DType::F64, 50_000usize, "50000 f64 elements"),
        (DType::F32, 200_000, "200000 f32 elements"),
    ];
    for (dtype, n, want) in theirs {
        for algo in [
            AllreduceAlgorithm::RegroupAllgather,
            AllreduceAlgorithm::Auto,
        ] {
            let errors = on_workers(2, |w| {
                let mut t = Table::new(Combiner::Sum);
                let a = match w.rank() {
                    0 => Array::zeros(w.pool(), DType::F64, 100_000),
                    _ => Array::zeros(w.pool(), dtype, n),
                };
                t.add(1, a).unwrap();
                w.allreduce("shapes", &mut t, Opts::default().algorithm(algo))
                    .unwrap_err()
            });
            let data: Vec<String> = errors
                .iter()
                .filter(|e| e.kind() == "data")
                .map(|e| e.to_string())
                .collect();
            assert!(!data.is_empty(), "{algo:?}: {errors:?}");
            for e in &data {
                assert!(e.contains("partition 1: this worker holds "), "{e}");
                assert!(e.contains(want) && e.contains("100000 f64 elements"), "{e}");
            }
        }
    }
}
