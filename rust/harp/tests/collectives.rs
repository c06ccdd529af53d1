//! Every collective with every algorithm, on in-process workers (p = 1…8), against the
//! sequential model of `harp::check`, with tables that differ between workers.

mod common;

use harp::Collectives;
use harp::Opts;
use std::time::Duration;

use harp::check::model::{combine_all, copy, fill, gen, h, same, shape};
use harp::check::{self, Faults, Spec};
use harp::collective::{
    choose, relay, AllreduceAlgorithm, BroadcastAlgorithm, GatherAlgorithm, ReduceAlgorithm,
    ReduceScatterAlgorithm, ScatterAlgorithm,
};
use harp::netmodel::NetModel;
use harp::{Array, Combiner, Config, DType, Partitioner, Pool, Table};

use common::{config, on_workers};

use check::CHECKS_PER_ROUND;

fn cfg() -> Config {
    config(Duration::from_secs(30))
}

#[test]
fn every_collective_and_algorithm_matches_the_model_for_p_1_to_8() {
    let spec = Spec::default();
    for p in 1..=8 {
        let reports = on_workers(p, cfg(), |w| {
            let r = check::run(&w, &spec, &Faults::default(), &mut |_, _| Ok(()));
            w.close();
            r
        });
        for (rank, r) in reports.into_iter().enumerate() {
            let r = r.unwrap_or_else(|e| panic!("p = {p}, rank {rank}: {e}"));
            assert_eq!(
                r.verified,
                CHECKS_PER_ROUND * spec.rounds as usize,
                "p = {p}"
            );
        }
    }
}

/// Key-value tables, and edge tables (weighted and not), through every collective that moves
/// whole partitions, with every allreduce algorithm and auto, against the model, p = 1…8
/// (check::run_kv, check::run_edges): entries combine by key, edges concatenate, and records
/// arrive whole.
#[test]
fn key_value_and_edge_tables_match_the_model_for_p_1_to_8() {
    let spec = Spec {
        rounds: 6,
        ..Spec::default()
    };
    for p in 1..=8 {
        let reports = on_workers(p, cfg(), |w| {
            let r = check::run_kv(&w, &spec).and_then(|kv| {
                check::run_edges(&w, &spec).map(|edges| (kv.verified, edges.verified))
            });
            w.close();
            r
        });
        for (rank, r) in reports.into_iter().enumerate() {
            let r = r.unwrap_or_else(|e| panic!("p = {p}, rank {rank}: {e}"));
            let n = check::KV_CHECKS_PER_ROUND * spec.rounds as usize;
            assert_eq!(r, (n, n), "p = {p}");
        }
    }
}

/// The tables `check::run` uses with the default spec really are uneven: some workers hold
/// nothing, workers hold different numbers of partitions, and tables (and the broadcast
/// roots' tables) lie on both sides of the automatic choices' crossovers.
#[test]
fn the_checked_tables_are_uneven_and_straddle_the_crossovers() {
    let (spec, cfg, pool) = (Spec::default(), Config::default(), Pool::default());
    let (mut empty, mut uneven, mut small, mut large) = (false, false, false, false);
    // The scatter roots' tables in each of the automatic shapes.
    let (mut delegate, mut tree, mut direct) = (false, false, false);
    for p in 2..=8 {
        for round in 0..spec.rounds {
            let s = shape(spec.seed, round, spec.max_elems);
            let tables: Vec<Table> = (0..p)
                .map(|k| gen(&pool, &s, spec.seed, round, 0, k, None))
                .collect();
            empty |= tables.iter().any(|t| t.is_empty());
            uneven |= tables.iter().any(|t| t.len() != tables[0].len());
            for t in &tables {
                small |= t.bytes() > 0 && t.bytes() <= cfg.broadcast_crossover;
                large |= t.bytes() >= cfg.allreduce_crossover;
            }
            let root = (h(&[spec.seed, round, 9]) % p as u64) as usize;
            let b = tables[root].bytes();
            let shape = choose::scatter(b, p);
            delegate |= b > 0 && shape == ScatterAlgorithm::Delegate;
            tree |= shape == ScatterAlgorithm::Binary;
            direct |= shape == ScatterAlgorithm::Direct;
        }
    }
    assert!(
        empty && uneven && small && large && delegate && tree && direct,
        "{empty} {uneven} {small} {large} {delegate} {tree} {direct}"
    );
}

/// Rank `r`'s table of f64 partitions of `len` elements: one of its own and one shared by every
/// rank whose table has the same length (none when the length is 0).
fn uneven_table(pool: &Pool, r: usize, len: usize) -> Table {
    let mut t = Table::new(Combiner::Sum);
    if len == 0 {
        return t;
    }
    for pid in [len as u32, r as u32] {
        let mut a = Array::zeros(pool, DType::F64, len);
        fill(&mut a, &[99, r as u64, pid as u64]);
        t.put(pid, a);
    }
    t
}

/// Table sizes per rank: big (above every crossover) and small (below), and empty.
fn uneven_len(p: usize, r: usize) -> usize {
    match ((p + r) % 3, r % 2) {
        (0, _) => 100_000,
        (1, _) | (_, 1) => 10,
        _ => 0,
    }
}

/// Automatic algorithm choices must agree between workers whose tables differ in size (issue
/// 11: allreduce decided from each worker's own table size gave an operation mismatch).
#[test]
fn auto_algorithms_agree_on_uneven_tables() {
    for p in 1..=8 {
        let results = on_workers(p, cfg(), |w| {
            let (r, pool) = (w.rank(), w.pool().clone());
            let inputs: Vec<Table> = (0..p)
                .map(|k| uneven_table(&pool, k, uneven_len(p, k)))
                .collect();
            let res = (|| -> harp::Result<()> {
                for root in 0..p {
                    let mut t = copy(&pool, &inputs[r]);
                    w.broadcast("auto", &mut t, Opts::default().root(root))?;
                    same(&format!("broadcast/auto from {root}"), &t, &inputs[root])?;
                }
                let mut t = copy(&pool, &inputs[r]);
                w.allreduce("auto", &mut t, Opts::default())?;
                same("allreduce/auto", &t, &combine_all(&pool, &inputs))
            })();
            w.close();
            res
        });
        for (rank, r) in results.into_iter().enumerate() {
            if let Err(e) = r {
                panic!("p = {p}, rank {rank}: {e}");
            }
        }
    }
}

/// A network model of `p` workers from `seed`: seed 0 is uniform; others give every ordered
/// pair R/d with d in {1, 2, 4} and latencies from 20 to 200 µs (asymmetric).
fn random_model(p: usize, seed: u64) -> NetModel {
    if seed == 0 {
        return NetModel::uniform(p, 1e-4, 25e6);
    }
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let lat: Vec<f64> = (0..p * p)
        .map(|_| 2e-5 + (next() % 180) as f64 * 1e-6)
        .collect();
    let bw: Vec<f64> = (0..p * p)
        .map(|_| 25e6 / [1.0, 2.0, 4.0][(next() % 3) as usize])
        .collect();
    NetModel::new(p, lat, bw).unwrap()
}

/// With a network model set (uniform and uneven ones), every collective and algorithm, the
/// network-aware ones and the automatic choices that then use the model, still matches the
/// sequential model, p = 1…8, plain and key-value tables.
#[test]
fn every_collective_matches_the_model_under_network_models_for_p_1_to_8() {
    let spec = Spec {
        rounds: 3,
        ..Spec::default()
    };
    for p in 1..=8 {
        for seed in [0, p as u64, 100 + p as u64, 200 + p as u64] {
            // Seeds from 200: hosts that take four links at once, so relay trees form.
            let model = match seed {
                200.. => random_model(p, seed).with_host(vec![1e8; p]).unwrap(),
                _ => random_model(p, seed),
            };
            if p == 8 && seed >= 200 {
                let relays = (0..p)
                    .filter(|&root| {
                        relay::relay_tree(&model, root, 1 << 20).children[root].len() < p - 1
                    })
                    .count();
                assert!(relays > 0, "some root's relay gather forwards");
                let splits = (0..p)
                    .filter(|&root| {
                        let plan = relay::relay_plan(&model, root, 1 << 20);
                        plan.split.iter().any(Option::is_some)
                    })
                    .count();
                assert!(splits > 0, "some root's relay plan splits a share");
            }
            let reports = on_workers(p, cfg(), |w| {
                w.set_net_model(Some(model.clone())).unwrap();
                let r = check::run(&w, &spec, &Faults::default(), &mut |_, _| Ok(()));
                let kv = check::run_kv(&w, &spec);
                w.close();
                r.and_then(|r| kv.map(|kv| (r, kv)))
            });
            for (rank, r) in reports.into_iter().enumerate() {
                let (r, kv) =
                    r.unwrap_or_else(|e| panic!("p = {p}, seed {seed}, rank {rank}: {e}"));
                assert_eq!(r.verified, CHECKS_PER_ROUND * spec.rounds as usize);
                assert_eq!(
                    kv.verified,
                    check::KV_CHECKS_PER_ROUND * spec.rounds as usize
                );
            }
        }
    }
}

/// The relay gather and scatter (`net-relay`) where forwarding is certain: ranks 1 and 2 reach
/// root 0 over slow links only, everything else is fast and the hosts take several links at
/// once, so each sends through a relay and part of its share by a second route (the parts of
/// its three uneven partitions cut by bytes and put together again at the root, or at it). The root ends with every partition once (the shared one summed), the others with
/// their own table (gather) or the partitions they own (scatter); `auto` picks the relay.
#[test]
fn relay_gather_and_scatter_forward_through_relays() {
    let p = 6;
    let mut bw = vec![25e6; p * p];
    for r in [1, 2] {
        bw[r * p] = 1e6;
        bw[r] = 1e6;
    }
    let model = NetModel::new(p, vec![1e-4; p * p], bw)
        .unwrap()
        .with_host(vec![1e8; p])
        .unwrap();
    let t = relay::relay_tree(&model, 0, 1 << 20);
    // Each of them also sends part of its share by a second route, at once.
    let plan = relay::relay_plan(&model, 0, 1 << 20);
    assert_eq!(plan.tree, t);
    for r in [1, 2] {
        let (j, e) = plan.split[r].unwrap_or_else(|| panic!("rank {r} is split: {plan:?}"));
        assert!(
            j != r && Some(j) != t.parent[r] && (1..8).contains(&e),
            "{plan:?}"
        );
    }
    for r in [1, 2] {
        assert_ne!(
            t.parent[r],
            Some(0),
            "rank {r} sends through a relay: {t:?}"
        );
    }
    assert_eq!(
        GatherAlgorithm::Auto.resolve(Some(&model), 0),
        GatherAlgorithm::Relay
    );
    assert_eq!(
        ScatterAlgorithm::Auto.resolve(Some(&model), 0),
        ScatterAlgorithm::Relay
    );
    let results = on_workers(p, cfg(), |w| {
        w.set_net_model(Some(model.clone())).unwrap();
        let pool = w.pool().clone();
        let r = w.rank();
        let res = (|| -> harp::Result<(Table, Table, Table)> {
            let mut g = uneven_table(&pool, r, 3);
            w.gather(
                "relay",
                &mut g,
                Opts::default().algorithm(GatherAlgorithm::Relay),
            )?;
            let mut s = Table::new(Combiner::Sum);
            if r == 0 {
                for pid in 0..4 * p as u32 {
                    s.put(pid, Array::from_slice(&pool, &[pid as f64, 1.0]));
                }
            }
            w.scatter(
                "relay",
                &mut s,
                &Partitioner::Modulo,
                Opts::default().algorithm(ScatterAlgorithm::Relay),
            )?;
            Ok((g, s, uneven_table(&pool, r, 3)))
        })();
        w.close();
        res
    });
    let pool = Pool::default();
    for (r, res) in results.into_iter().enumerate() {
        let (g, s, own) = res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        if r == 0 {
            let mut want = Table::new(Combiner::Sum);
            for k in 0..p {
                want.merge(uneven_table(&pool, k, 3)).unwrap();
            }
            same("gather/net-relay at the root", &g, &want).unwrap();
        } else {
            same("gather/net-relay elsewhere", &g, &own).unwrap();
        }
        let ids: Vec<u32> = (0..4 * p as u32)
            .filter(|pid| *pid as usize % p == r)
            .collect();
        assert_eq!(s.ids(), ids, "rank {r} owns its scatter share");
        for pid in ids {
            assert_eq!(
                s.get(pid).unwrap().as_slice::<f64>().unwrap(),
                &[pid as f64, 1.0]
            );
        }
    }
}

/// Under an uneven model the automatic choices pick network-aware algorithms somewhere (the
/// test above would otherwise not exercise them through Auto), and every worker records the
/// prediction of its operations for the drift.
#[test]
fn auto_uses_the_model_and_predictions_are_recorded() {
    let p = 8;
    let model = random_model(p, 3);
    let picked = harp::collective::choose::broadcast(
        64 << 20,
        8192,
        Some(&model),
        &harp::Topology::flat((0..p).map(|i| format!("h{i}:1")).collect()),
        0,
        256 << 10,
    );
    assert!(
        matches!(
            picked,
            BroadcastAlgorithm::NetChain
                | BroadcastAlgorithm::NetHierarchy
                | BroadcastAlgorithm::NetTree
        ),
        "{picked:?}"
    );
    // The automatic reduce, once the size is agreed: a tree for small tables, a ring or a
    // pipelined chain for large.
    use harp::collective::ReduceAlgorithm as R;
    let topo = harp::Topology::flat((0..p).map(|i| format!("h{i}:1")).collect());
    let small = harp::collective::choose::reduce(&model, &topo, 0, 1024, 16 << 10);
    assert!(
        matches!(small, R::Binomial | R::Binary | R::NetHierarchy),
        "{small:?}"
    );
    let large = harp::collective::choose::reduce(&model, &topo, 0, 64 << 20, 16 << 10);
    assert!(
        matches!(large, R::ScatterGather | R::NetRing | R::NetChain),
        "{large:?}"
    );
    let results = on_workers(p, cfg(), |w| {
        w.set_net_model(Some(model.clone())).unwrap();
        let pool = w.pool().clone();
        let res = (|| -> harp::Result<(usize, Option<f64>)> {
            let mut t = uneven_table(&pool, w.rank(), 100_000);
            w.broadcast("drift", &mut t, Opts::default())?;
            w.broadcast(
                "drift",
                &mut t,
                Opts::default().algorithm(BroadcastAlgorithm::NetChain),
            )?;
            Ok((w.model_predictions().len(), w.model_drift()))
        })();
        w.close();
        res
    });
    for r in results {
        let (n, drift) = r.unwrap();
        assert_eq!(n, 2);
        // In memory the transfer is far faster than the model's 25 MB/s links.
        assert!(drift.unwrap() < -0.2, "{drift:?}");
    }
}

/// `--net-model FILE` (Config::net_model) is loaded by every worker at start; a bad file is an
/// error naming it (and the line), a model of another size names both sizes.
#[test]
fn the_net_model_file_is_loaded_at_start_and_bad_ones_are_named() {
    let dir = std::env::temp_dir().join(format!("harp-netmodel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("m3.txt");
    std::fs::write(&good, random_model(3, 7).to_text()).unwrap();
    let mut c = cfg();
    c.net_model = Some(good.display().to_string());
    let ws = harp::Worker::in_process(3, c.clone()).unwrap();
    for w in &ws {
        assert_eq!(w.net_model().as_deref(), Some(&random_model(3, 7)));
    }
    drop(ws);
    let e = harp::Worker::in_process(4, c).err().unwrap().to_string();
    assert!(
        e.contains("m3.txt") && e.contains("of 3 workers for a job of 4"),
        "{e}"
    );
    let bad = dir.join("bad.txt");
    let text = random_model(3, 7).to_text().replacen("inf", "fast", 1);
    std::fs::write(&bad, text).unwrap();
    let mut c = cfg();
    c.net_model = Some(bad.display().to_string());
    let e = harp::Worker::in_process(3, c).err().unwrap().to_string();
    assert!(e.contains("bad.txt:") && e.contains("not a number"), "{e}");
    let mut c = cfg();
    c.net_model = Some(dir.join("missing.txt").display().to_string());
    let e = harp::Worker::in_process(3, c).err().unwrap().to_string();
    assert!(e.contains("missing.txt"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rank `r`'s table under `combiner`: partitions 0..6 of 20,000 f64 (160 KB, above every
/// crossover, so the ring and scatter-gather algorithms segment what they may), each holding
/// r + 1 everywhere.
fn non_elementwise_table(pool: &Pool, combiner: Combiner, r: usize) -> Table {
    let mut t = Table::new(combiner);
    for pid in 0..6 {
        t.add(pid, Array::from_slice(pool, &[(r + 1) as f64; 20_000]))
            .unwrap();
    }
    t
}

/// A reduction of a worker's table, by name.
type Reduction = (
    String,
    Box<dyn Fn(&harp::Worker, &mut Table) -> harp::Result<()> + Sync>,
);

/// Every algorithm that combines: allreduce, reduce to rank 0 and reduce-scatter (modulo).
fn reductions() -> Vec<Reduction> {
    use ReduceAlgorithm as R;
    let mut all: Vec<Reduction> = vec![];
    for a in [
        AllreduceAlgorithm::Auto,
        AllreduceAlgorithm::BidirectionalExchange,
        AllreduceAlgorithm::RegroupAllgather,
    ] {
        all.push((
            format!("allreduce {a:?}"),
            Box::new(move |w, t| w.allreduce("nc", t, Opts::default().algorithm(a))),
        ));
    }
    for a in [
        R::Auto,
        R::Binomial,
        R::Binary,
        R::ScatterGather,
        R::Chain,
        R::NetRing,
        R::NetHierarchy,
    ] {
        all.push((
            format!("reduce {a:?}"),
            Box::new(move |w, t| w.reduce("nc", t, Opts::default().algorithm(a))),
        ));
    }
    for a in [
        ReduceScatterAlgorithm::Auto,
        ReduceScatterAlgorithm::Ring,
        ReduceScatterAlgorithm::RecursiveHalving,
    ] {
        let run = move |w: &harp::Worker, t: &mut Table| {
            w.reduce_scatter("nc", t, &Partitioner::Modulo, Opts::default().algorithm(a))
        };
        all.push((format!("reduce-scatter {a:?}"), Box::new(run)));
    }
    all
}

/// A table whose combiner is not element-wise (keep-first, reject) combines alike under every
/// reducing algorithm: keep-first succeeds and leaves each partition whole, one worker's copy
/// (never a mix of workers' ranges), the same on every worker that holds it; reject fails
/// with a data error naming the duplicate partition where it met it.
#[test]
fn keep_first_and_reject_combine_alike_under_every_reducing_algorithm() {
    for p in [2, 3, 4] {
        for (name, run) in reductions() {
            let got = on_workers(p, cfg(), |w| {
                let mut t = non_elementwise_table(w.pool(), Combiner::KeepFirst, w.rank());
                let r = run(&w, &mut t).map(|()| {
                    t.iter()
                        .map(|(pid, a)| (pid, a.as_slice::<f64>().unwrap().to_vec()))
                        .collect::<Vec<_>>()
                });
                w.close();
                r
            });
            let mut seen = std::collections::BTreeMap::new();
            for (rank, r) in got.into_iter().enumerate() {
                let parts = r.unwrap_or_else(|e| panic!("{name}, p = {p}, rank {rank}: {e}"));
                for (pid, v) in parts {
                    let first = v[0];
                    assert!(
                        v.iter().all(|&x| x == first) && (1.0..=p as f64).contains(&first),
                        "{name}, p = {p}: partition {pid} on rank {rank} mixes workers' values"
                    );
                    assert_eq!(*seen.entry(pid).or_insert(first), first, "{name} {pid}");
                }
            }
            assert_eq!(seen.len(), 6, "{name}, p = {p}: {seen:?}");

            let got = on_workers(p, cfg(), |w| {
                let mut t = non_elementwise_table(w.pool(), Combiner::Reject, w.rank());
                let r = run(&w, &mut t);
                w.close();
                r
            });
            // A reduce's senders may be done before the root meets the duplicate (they learn
            // of its failure at their next collective); every other operation fails everywhere.
            let rooted = name.starts_with("reduce ");
            assert!(
                got.iter().all(|r| r.is_err()) || (rooted && got[0].is_err()),
                "{name}, p = {p}: {got:?}"
            );
            assert!(
                got.iter().flat_map(|r| r.as_ref().err()).any(|e| {
                    e.kind() == "data"
                        && e.to_string().contains("arrived twice")
                        && e.to_string().contains("partition ")
                }),
                "{name}, p = {p}: {got:?}"
            );
        }
    }
}

/// Regroup on more workers than it keeps receives outstanding (64): each of 70 workers holds
/// partitions 3r, 3r + 1, 3r + 2 and a shared partition 1,000; afterwards each holds exactly
/// the partitions it owns (id mod 70), the shared one summed over every worker.
#[test]
fn regroup_on_more_workers_than_its_receive_window() {
    let p = 70;
    let tables = on_workers(p, cfg(), |w| {
        let r = w.rank();
        let mut t = Table::new(Combiner::Sum);
        for j in 0..3 {
            let id = (3 * r + j) as u32;
            t.add(id, Array::from_slice(w.pool(), &[id as f64, r as f64]))
                .unwrap();
        }
        t.add(1000, Array::from_slice(w.pool(), &[1.0, r as f64]))
            .unwrap();
        w.regroup("g", &mut t, Some(&Partitioner::Modulo)).unwrap();
        let got: Vec<(u32, Vec<f64>)> = t
            .ids()
            .into_iter()
            .map(|id| (id, t.get(id).unwrap().as_slice::<f64>().unwrap().to_vec()))
            .collect();
        w.close();
        got
    });
    for (r, got) in tables.into_iter().enumerate() {
        let mut want: Vec<(u32, Vec<f64>)> = (0..3 * p as u32)
            .filter(|id| *id as usize % p == r)
            .map(|id| (id, vec![id as f64, (id / 3) as f64]))
            .collect();
        if 1000 % p == r {
            let ranks = (0..p).map(|x| x as f64).sum();
            want.push((1000, vec![p as f64, ranks]));
        }
        want.sort_by_key(|(id, _)| *id);
        assert_eq!(got, want, "rank {r}");
    }
}
