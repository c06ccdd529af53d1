//! Collectives over sub-groups (`Worker::group`) on in-process workers: every collective and
//! algorithm of `check::run` (and the key-value check) on groups of several subsets of
//! p = 1…8 workers in shuffled orders, two disjoint groups running at the same time, world
//! collectives right after group ones, the errors of `group`, and failures inside a group.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use harp::check::model::{combine_all, copy, gen, h, same, shape};
use harp::check::{self, Faults, Spec};
use harp::collective::AllreduceAlgorithm;
use harp::Opts;
use harp::{Collectives, Config, Table, Worker};

use common::{config, on_workers};

fn cfg() -> Config {
    config(Duration::from_secs(30))
}

/// A shuffled subset of `0..p` (at least one rank) picked from `seed`, and the rest of the
/// ranks in reverse order (possibly empty): two disjoint groups whose group ranks differ from
/// their world ranks.
fn split(p: usize, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut all: Vec<usize> = (0..p).collect();
    for i in (1..p).rev() {
        all.swap(i, (h(&[seed, i as u64]) % (i as u64 + 1)) as usize);
    }
    let k = 1 + (h(&[seed, 99]) % p as u64) as usize;
    let a = all[..k].to_vec();
    let mut b = all[k..].to_vec();
    b.sort_unstable_by(|x, y| y.cmp(x));
    (a, b)
}

/// One allreduce of the whole job, checked against the model: the world sequence is not
/// disturbed by the groups' operations.
fn world_allreduce(w: &impl Collectives, round: u64) -> harp::Result<()> {
    let (p, r, pool) = (w.size(), w.rank(), w.pool());
    let s = shape(5, round, 3_000);
    let inputs: Vec<Table> = (0..p)
        .map(|k| gen(pool, &s, 5, round, 0, k, None))
        .collect();
    let mut t = copy(pool, &inputs[r]);
    w.allreduce("world", &mut t, Opts::default())?;
    same("world allreduce", &t, &combine_all(pool, &inputs))
}

/// For p = 1…8 and two splits each: both disjoint groups run every collective (dense and
/// key-value) against the model at the same time, then the whole job runs a barrier and an
/// allreduce, then a group of every worker in reverse order runs the dense check.
#[test]
fn group_collectives_match_the_model_and_disjoint_groups_run_concurrently() {
    let spec = Spec {
        rounds: 2,
        max_elems: 20_000,
        ..Spec::default()
    };
    for p in 1..=8 {
        for seed in [1, 2] {
            let (a, b) = split(p, seed + 10 * p as u64);
            let results = on_workers(p, cfg(), |w: Worker| {
                let res = (|| -> harp::Result<(usize, usize, usize)> {
                    let members = if a.contains(&w.rank()) { &a } else { &b };
                    let g = w.group(members)?;
                    assert_eq!(g.size(), members.len());
                    assert_eq!(members[g.rank()], w.rank());
                    let dense = check::run(&g, &spec, &Faults::default(), &mut |_, _| Ok(()))?;
                    let kv = check::run_kv(&g, &spec)?;
                    w.barrier("after the groups")?;
                    world_allreduce(&w, seed)?;
                    let reversed: Vec<usize> = (0..p).rev().collect();
                    let all = w.group(&reversed)?;
                    let whole = check::run(&all, &spec, &Faults::default(), &mut |_, _| Ok(()))?;
                    world_allreduce(&w, seed + 1)?;
                    Ok((dense.verified, kv.verified, whole.verified))
                })();
                w.close();
                res
            });
            for (rank, r) in results.into_iter().enumerate() {
                let (dense, kv, whole) =
                    r.unwrap_or_else(|e| panic!("p = {p}, groups {a:?} {b:?}, rank {rank}: {e}"));
                assert_eq!(
                    dense,
                    check::CHECKS_PER_ROUND * spec.rounds as usize,
                    "p = {p}"
                );
                assert_eq!(kv, check::KV_CHECKS_PER_ROUND * spec.rounds as usize);
                assert_eq!(whole, dense);
            }
        }
    }
}

/// A group created again with the same list continues the same sequence; world, group and
/// re-created group operations interleave.
#[test]
fn a_group_created_again_continues_its_sequence_between_world_operations() {
    let results = on_workers(5, cfg(), |w: Worker| {
        let res = (|| -> harp::Result<()> {
            let members = [4, 0, 2];
            for round in 0..3 {
                world_allreduce(&w, round)?;
                if members.contains(&w.rank()) {
                    let g = w.group(&members)?;
                    world_allreduce(&g, round + 10)?;
                    g.barrier("g")?;
                }
                w.barrier("w")?;
            }
            Ok(())
        })();
        w.close();
        res
    });
    for (rank, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

#[test]
fn bad_member_lists_are_clear_errors() {
    let errors = on_workers(3, cfg(), |w: Worker| {
        let e = |m: &[usize]| w.group(m).err().map(|e| e.to_string()).unwrap_or_default();
        let out = [
            e(&[]),
            e(&[0, 1, 2, 3]),
            e(&[1, 0, 1, 2]),
            e(&[(w.rank() + 1) % 3]),
        ];
        w.close();
        out
    });
    let [empty, range, twice, outside] = &errors[0];
    assert!(empty.contains("at least one member"), "{empty}");
    assert!(
        range.contains("rank 3 is not a worker (there are 3)"),
        "{range}"
    );
    assert!(
        twice.contains("group [1, 0, 1, 2]: rank 1 is listed twice"),
        "{twice}"
    );
    assert!(
        outside.contains("group [1]: rank 0 is not a member"),
        "{outside}"
    );
}

/// A member that aborts inside a group collective fails every other member, naming its world
/// rank; the worker outside the group is not involved and stays usable until the failure
/// reaches it.
#[test]
fn a_failed_member_fails_the_others_naming_its_world_rank() {
    let errors = on_workers(4, config(Duration::from_secs(20)), |w: Worker| {
        if w.rank() == 0 {
            w.close();
            return String::new();
        }
        let g = w.group(&[3, 1, 2]).unwrap();
        if w.rank() == 2 {
            drop(g);
            w.abort("member 2 gives up");
            return String::new();
        }
        let mut t = Table::default();
        let e = g
            .allreduce(
                "g",
                &mut t,
                Opts::default().algorithm(AllreduceAlgorithm::RegroupAllgather),
            )
            .expect_err("rank 2 failed");
        let msg = e.to_string();
        drop(g);
        // The worker is poisoned like after any failed collective.
        let again = w.barrier("after").unwrap_err().to_string();
        assert!(
            again.contains("unusable after an earlier failure"),
            "{again}"
        );
        msg
    });
    for r in [1, 3] {
        let e = &errors[r];
        assert!(
            e.contains("rank 2 is gone: it failed: rank 2: member 2 gives up"),
            "rank {r}: {e}"
        );
        assert!(e.contains("in group [3, 1, 2]"), "rank {r}: {e}");
    }
}

/// A member that stays alive but never calls the group's collective times the others out,
/// named by its world rank.
#[test]
fn a_member_that_does_not_call_times_the_others_out() {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let done_rx = std::sync::Mutex::new(done_rx);
    let errors = on_workers(4, config(Duration::from_secs(2)), |w: Worker| {
        match w.rank() {
            0 => {
                w.close();
                String::new()
            }
            3 => {
                let rx = done_rx.lock().unwrap();
                rx.recv().unwrap();
                rx.recv().unwrap();
                w.close();
                String::new()
            }
            _ => {
                let g = w.group(&[2, 3, 1]).unwrap();
                let e = g.barrier("stuck").expect_err("rank 3 never arrives");
                done_tx.send(()).unwrap();
                e.to_string()
            }
        }
    });
    for r in [1, 2] {
        assert!(
            errors[r].contains("timed out after 2.0 s waiting for rank 3"),
            "rank {r}: {}",
            errors[r]
        );
    }
}

/// A root outside a group is named as such (the group's size, not the job's), in each rooted
/// collective; the job's own root errors still count workers. (A bad root fails the worker, so
/// each case is its own job.)
#[test]
fn a_root_outside_the_group_is_named_with_the_group_size() {
    let job = on_workers(3, cfg(), |w: Worker| {
        let mut t = Table::default();
        let e = w.broadcast("b", &mut t, Opts::default().root(3));
        e.unwrap_err().to_string()
    });
    for e in &job {
        assert!(
            e.contains("broadcast root 3 is not a worker (there are 3)"),
            "{e}"
        );
    }
    let cases = [
        "broadcast root 2 is not a group rank (the group has 2 members)",
        "reduce root 2 is not a group rank (the group has 2 members)",
        "gather root 5 is not a group rank (the group has 2 members)",
    ];
    for (case, want) in cases.iter().enumerate() {
        let errors = on_workers(3, cfg(), |w: Worker| {
            if w.rank() == 2 {
                w.close();
                return String::new();
            }
            let g = w.group(&[0, 1]).unwrap();
            let mut t = Table::default();
            let r = match case {
                0 => g.broadcast("b", &mut t, Opts::default().root(2)),
                1 => g.reduce("r", &mut t, Opts::default().root(2)),
                _ => g.gather("g", &mut t, Opts::default().root(5)),
            };
            let e = r.unwrap_err().to_string();
            w.close();
            e
        });
        for e in &errors[..2] {
            assert!(e.contains(want), "{e}");
        }
    }
}

/// Members that list one group in different orders create different groups (the id hashes the
/// list), whose frames never meet: the timeout says what was received meanwhile, and the
/// other member learns it.
#[test]
fn a_group_listed_in_different_orders_times_out_with_a_hint() {
    let errors = on_workers(2, config(Duration::from_secs(2)), |w: Worker| {
        let members = if w.rank() == 0 { [0, 1] } else { [1, 0] };
        let g = w.group(&members).unwrap();
        let e = g.barrier("b").unwrap_err();
        (e.kind(), e.to_string())
    });
    // The first to time out says so; the other learns it from its abort (or times out too).
    assert!(errors.iter().any(|(k, _)| *k == "timeout"), "{errors:?}");
    for (r, (_, e)) in errors.iter().enumerate() {
        assert!(
            e.contains("timed out after 2.0 s")
                && e.contains("sent frames for a group this worker has not created")
                && e.contains("in different orders"),
            "rank {r}: {e}"
        );
    }
}
