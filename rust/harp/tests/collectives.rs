//! Every collective with every algorithm, on in-process workers (p = 1…8), against the
//! sequential model of `harp::check`, with tables that differ between workers.

mod common;

use std::time::Duration;

use harp::check::model::{combine_all, copy, fill, gen, h, same, shape};
use harp::check::{self, Faults, Spec};
use harp::collective::{choose, AllreduceAlgorithm, BroadcastAlgorithm};
use harp::{Array, Combiner, Config, DType, Pool, Table};

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

/// Key-value tables through every collective that moves whole partitions, with every
/// allreduce algorithm and auto, against the model, p = 1…8 (check::run_kv).
#[test]
fn key_value_tables_match_the_model_for_p_1_to_8() {
    let spec = Spec {
        rounds: 6,
        ..Spec::default()
    };
    for p in 1..=8 {
        let reports = on_workers(p, cfg(), |w| {
            let r = check::run_kv(&w, &spec);
            w.close();
            r
        });
        for (rank, r) in reports.into_iter().enumerate() {
            let r = r.unwrap_or_else(|e| panic!("p = {p}, rank {rank}: {e}"));
            assert_eq!(
                r.verified,
                check::KV_CHECKS_PER_ROUND * spec.rounds as usize,
                "p = {p}"
            );
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
    // The scatter roots' tables on both sides of the binomial tree's limit.
    let (mut tree, mut direct) = (false, false);
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
            tree |= b > 0 && choose::scatter(b);
            direct |= !choose::scatter(b);
        }
    }
    assert!(
        empty && uneven && small && large && tree && direct,
        "{empty} {uneven} {small} {large} {tree} {direct}"
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
                    w.broadcast("auto", &mut t, root, BroadcastAlgorithm::Auto)?;
                    same(&format!("broadcast/auto from {root}"), &t, &inputs[root])?;
                }
                let mut t = copy(&pool, &inputs[r]);
                w.allreduce("auto", &mut t, AllreduceAlgorithm::Auto)?;
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
