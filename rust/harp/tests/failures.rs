//! Failures on in-process workers: a worker that aborts, is dropped or stops calling
//! collectives makes every other worker fail with an error naming it, and nobody hangs.

mod common;

use harp::Collectives;
use harp::Opts;
use std::sync::mpsc;
use std::time::Duration;

use harp::check::{self, Fault, Faults, Spec};
use harp::{Array, Config, Error, Table, Worker};

use common::{config, on_workers};

/// What the failing worker does with itself.
#[derive(Clone, Copy)]
enum Exit {
    Abort,
    Drop,
}

/// Runs the check on 4 workers; rank 2 fails at its 5th operation and leaves by `exit`.
/// Returns every worker's error message.
fn fail_rank_2(exit: Exit) -> Vec<String> {
    let faults = Faults {
        die: Some((2, 5)),
        ..Faults::default()
    };
    let spec = Spec {
        max_elems: 2_000,
        ..Spec::default()
    };
    on_workers(4, config(Duration::from_secs(20)), |w: Worker| {
        let mut inject = |f: Fault, op: usize| {
            assert_eq!(f, Fault::Die);
            Err(Error::config(format!("fault injection at operation {op}")))
        };
        let e = check::run(&w, &spec, &faults, &mut inject).expect_err("every worker fails");
        match (w.rank(), exit) {
            (2, Exit::Abort) => w.abort(&e.to_string()),
            (2, Exit::Drop) => drop(w),
            _ => assert_eq!(e.kind(), "peer-lost", "rank {}: {e}", w.rank()),
        }
        e.to_string()
    })
}

/// Asserts that the error of every rank in `ranks` contains `text`.
fn all_say(errors: &[String], ranks: &[usize], text: &str) {
    for &r in ranks {
        let e = &errors[r];
        assert!(e.contains(text), "rank {r}: {e}");
    }
}

#[test]
fn an_aborted_worker_fails_every_worker_naming_it() {
    let errors = fail_rank_2(Exit::Abort);
    assert_eq!(errors[2], "fault injection at operation 5");
    let cause = "rank 2 is gone: it failed: rank 2: fault injection at operation 5";
    all_say(&errors, &[0, 1, 3], cause);
}

#[test]
fn a_dropped_worker_fails_every_worker_naming_it() {
    let errors = fail_rank_2(Exit::Drop);
    let cause = "rank 2 is gone: it failed: rank 2: the worker was dropped without closing";
    all_say(&errors, &[0, 1, 3], cause);
}

/// A worker that stays alive but never calls the collective is reported by the others'
/// timeouts (it is not silent: its heartbeats go on), and the failure spreads.
#[test]
fn a_worker_that_does_not_call_the_collective_times_the_others_out() {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let done_rx = std::sync::Mutex::new(done_rx);
    let errors = on_workers(3, config(Duration::from_secs(3)), |w: Worker| {
        if w.rank() == 2 {
            // Stuck in user code until both others have failed.
            let rx = done_rx.lock().unwrap();
            rx.recv().unwrap();
            rx.recv().unwrap();
            return String::new();
        }
        let e = w.barrier("stuck").expect_err("rank 2 never arrives");
        done_tx.send(()).unwrap();
        e.to_string()
    });
    all_say(&errors, &[0, 1], "timed out after 3.0 s waiting for rank 2");
}

/// Calls that disagree on a root: each side finishes its own part (the roots only send), so
/// the disagreement shows when an operation ends with a peer's frames for it, or for an
/// earlier one, not taken. Every worker fails, naming the peer and the operation, instead of
/// returning results that differ between workers.
#[test]
fn roots_that_differ_between_workers_fail_every_worker() {
    use harp::collective::ScatterAlgorithm;
    use harp::Partitioner;
    let cfg = config(Duration::from_secs(20));
    // Broadcast: each of two workers names itself the root.
    let errors = on_workers(2, cfg.clone(), |w: Worker| {
        let r = w.rank();
        let mut t = Table::default();
        t.add(0, Array::from_slice(w.pool(), &[r as f64; 4]))
            .unwrap();
        let first = w.broadcast("b", &mut t, Opts::default().root(r));
        let mut u = Table::default();
        u.add(0, Array::from_slice(w.pool(), &[1.0f64])).unwrap();
        let then = first.and_then(|_| w.allreduce("a", &mut u, Opts::default()));
        then.unwrap_err().to_string()
    });
    // Whichever worker finds the other's frame first fails; the other learns it from it.
    for (r, e) in errors.iter().enumerate() {
        let (found, told) = (
            format!(
                "rank {} sent 1 frame(s) for operation #1 that rank {r} did not",
                1 - r
            ),
            format!(
                "rank {r} sent 1 frame(s) for operation #1 that rank {} did not",
                1 - r
            ),
        );
        assert!(
            (e.contains(&found) || e.contains(&told)) && e.contains("disagree"),
            "rank {r}: {e}"
        );
    }
    // Scatter with roots {0, 0, 2, 2}: ranks 0/1 take from 0, 2/3 from 2; nothing else follows.
    let errors = on_workers(4, cfg, |w: Worker| {
        let r = w.rank();
        let root = if r < 2 { 0 } else { 2 };
        let mut t = Table::default();
        if r == root {
            for pid in 0..4u32 {
                t.add(pid, Array::from_slice(w.pool(), &[pid as f64]))
                    .unwrap();
            }
        }
        let res = w
            .scatter(
                "s",
                &mut t,
                &Partitioner::Modulo,
                Opts::default()
                    .root(root)
                    .algorithm(ScatterAlgorithm::Direct),
            )
            .and_then(|_| w.barrier("end"));
        res.unwrap_err().to_string()
    });
    for (r, e) in errors.iter().enumerate() {
        assert!(
            e.contains("disagree") || e.contains("is gone: it failed"),
            "rank {r}: {e}"
        );
    }
    assert!(
        errors.iter().any(|e| e.contains("operation #1")),
        "{errors:?}"
    );
}

/// Roots that differ so that the waits form a cycle: in a binomial reduce with rank 0 naming
/// root 0 and the others root 1, rank 0 waits for rank 1, rank 1 for rank 3 and rank 3 for
/// rank 0, and no frame ever goes astray. A wait that has slept a heartbeat interval tells the
/// peer it waits for which root it uses; the peer compares it with its own call: every worker
/// fails within seconds, naming both roots, not at the 20 s timeout. The reduce over real
/// sockets, a binomial gather in process. (A broadcast with such roots leaves frames astray,
/// found when an operation ends.)
#[test]
fn roots_that_leave_every_worker_waiting_are_named_before_the_timeout() {
    use harp::collective::{GatherAlgorithm, ReduceAlgorithm};
    let cfg = config(Duration::from_secs(20));
    let call = |w: Worker, what: &str| {
        let r = w.rank();
        let root = usize::from(r != 0);
        let mut t = Table::default();
        t.add(r as u32, Array::from_slice(w.pool(), &[1.0f64; 4]))
            .unwrap();
        let res = match what {
            "reduce" => w.reduce(
                "r",
                &mut t,
                Opts::default()
                    .root(root)
                    .algorithm(ReduceAlgorithm::Binomial),
            ),
            _ => w.gather(
                "g",
                &mut t,
                Opts::default()
                    .root(root)
                    .algorithm(GatherAlgorithm::Binomial),
            ),
        };
        let e = res.and_then(|_| w.barrier("end")).unwrap_err();
        (e.kind(), e.to_string())
    };
    for what in ["reduce", "gather"] {
        let t0 = std::time::Instant::now();
        let errors = if what == "reduce" {
            common::tcp_job(
                &vec![cfg.clone(); 4],
                |_, a| a.to_vec(),
                |w| call(w.unwrap(), what),
            )
        } else {
            on_workers(4, cfg.clone(), |w| call(w, what))
        };
        assert!(
            t0.elapsed() < Duration::from_secs(12),
            "{what}: {:?} {errors:?}",
            t0.elapsed()
        );
        for (r, (k, e)) in errors.iter().enumerate() {
            assert_ne!(*k, "timeout", "{what}, rank {r}: {e}");
        }
        assert!(
            errors.iter().any(|(k, e)| *k == "op-mismatch"
                && e.contains(&format!("{what} with root 0"))
                && e.contains(&format!("{what} with root 1"))),
            "{what}: {errors:?}"
        );
    }
}

#[test]
fn different_collectives_at_the_same_position_are_a_mismatch_not_a_hang() {
    let errors = on_workers(2, config(Duration::from_secs(20)), |w: Worker| {
        let mut t = Table::default();
        let e = if w.rank() == 0 {
            w.barrier("mine").unwrap_err()
        } else {
            let algo = harp::collective::AllreduceAlgorithm::BidirectionalExchange;
            w.allreduce("theirs", &mut t, Opts::default().algorithm(algo))
                .unwrap_err()
        };
        (e.kind(), e.to_string())
    });
    assert!(
        errors
            .iter()
            .any(|(k, e)| *k == "op-mismatch" && e.contains("operation mismatch")),
        "{errors:?}"
    );
    for (_, e) in &errors {
        assert!(e.contains("rank 0") && e.contains("rank 1"), "{e}");
    }
}

#[test]
fn a_poisoned_worker_refuses_further_collectives_and_in_process_needs_a_worker() {
    let errors = on_workers(2, config(Duration::from_secs(20)), |w: Worker| {
        if w.rank() == 1 {
            w.abort("leaving early");
            return String::new();
        }
        let first = w.barrier("one").unwrap_err();
        assert!(
            first
                .to_string()
                .contains("it failed: rank 1: leaving early"),
            "{first}"
        );
        w.barrier("two").unwrap_err().to_string()
    });
    assert!(
        errors[0].contains("unusable after an earlier failure"),
        "{}",
        errors[0]
    );
    let e = Worker::in_process(0, harp::Config::default())
        .err()
        .expect("no workers");
    assert!(e.to_string().contains("at least one worker"), "{e}");
}

#[test]
fn more_workers_than_the_tag_ranges_hold_are_refused_at_start() {
    let max = harp::wire::MAX_WORKERS;
    let e = Worker::in_process(max + 1, harp::Config::default())
        .err()
        .expect("too many workers");
    assert!(
        e.to_string().contains(&format!(
            "{} workers: the collectives support at most {max}",
            max + 1
        )),
        "{e}"
    );
}

/// A small table (binomial under auto) or, with `large`, one above the crossover (chain).
fn bcast_table(w: &Worker, large: bool) -> Table {
    let n = if large { 4 * 1024 } else { 16 };
    let mut t = Table::new(harp::Combiner::Reject);
    t.put(0, Array::from_slice(w.pool(), &vec![w.rank() as f64; n]));
    t
}

/// The root fails before sending (say its --init file is missing): every other worker fails at
/// once in the automatic broadcast, naming the root and its reason, whichever tree the root
/// would have picked and whether or not the worker is one of the root's children. A long
/// timeout makes a wait for it show up as a timeout error, which fails the test.
#[test]
fn a_root_that_fails_before_an_auto_broadcast_is_named_by_everyone() {
    for p in [2, 4, 7] {
        for root in [0, p - 1] {
            let errors = on_workers(p, config(Duration::from_secs(120)), |w: Worker| {
                if w.rank() == root {
                    w.abort("cannot read the initial centroids: init.txt: no such file");
                    return (String::new(), String::new());
                }
                let mut t = bcast_table(&w, false);
                let e = w
                    .broadcast("init", &mut t, Opts::default().root(root))
                    .expect_err("the root failed");
                (e.kind().to_string(), e.to_string())
            });
            for (r, (kind, e)) in errors.iter().enumerate().filter(|(r, _)| *r != root) {
                assert_eq!(kind, "peer-lost", "p={p} rank {r}: {e}");
                let cause = format!(
                    "rank {root} is gone: it failed: rank {root}: cannot read the initial \
                     centroids"
                );
                assert!(e.contains(&cause), "p={p} rank {r}: {e}");
            }
        }
    }
}

/// A worker in the middle of the tree dies before an automatic broadcast (binomial for a small
/// table, chain for a large one): its children fail at once naming it, and every other worker
/// fails by the next collective with an error that names it (directly or through the abort of
/// the worker that saw it first). Nobody times out.
#[test]
fn a_mid_tree_worker_that_dies_in_an_auto_broadcast_is_named_by_everyone() {
    for large in [false, true] {
        let errors = on_workers(8, config(Duration::from_secs(120)), |w: Worker| {
            if w.rank() == 4 {
                drop(w);
                return (String::new(), String::new(), false);
            }
            let mut t = bcast_table(&w, large);
            let res = w.broadcast("bcast", &mut t, Opts::default());
            let in_bcast = res.is_err();
            let e = match res {
                Err(e) => e,
                Ok(()) => w.barrier("after").expect_err("rank 4 is gone"),
            };
            (e.kind().to_string(), e.to_string(), in_bcast)
        });
        for (r, (kind, e, in_bcast)) in errors.iter().enumerate().filter(|(r, _)| *r != 4) {
            assert!(kind == "peer-lost" || kind == "poisoned", "rank {r}: {e}");
            assert!(e.contains("rank 4 is gone"), "large={large} rank {r}: {e}");
            // Rank 5 waits for rank 4 under both trees (binomial and chain parent).
            if r == 5 {
                assert!(*in_bcast && e.starts_with("rank 5: broadcast"), "{e}");
            }
        }
    }
}

/// A worker whose job fails outside the collectives and returns without closing still tells
/// the peers why (the drop aborts).
#[test]
fn a_worker_dropped_after_an_error_tells_the_peers_why() {
    let cfg = Config {
        op_timeout: Duration::from_secs(120),
        ..Config::default()
    };
    let errors = on_workers(3, cfg, |w: Worker| {
        if w.rank() == 1 {
            return String::new(); // dropped here, never calling the barrier
        }
        w.barrier("b").expect_err("rank 1 left").to_string()
    });
    for r in [0, 2] {
        assert!(
            errors[r].contains("rank 1 is gone: it failed: rank 1: the worker was dropped"),
            "rank {r}: {}",
            errors[r]
        );
    }
}

/// Tables that combine differently (sum on some workers, max on another) would give an
/// allreduce whose result differs between workers: the combiner travels beside the algorithm,
/// so it is an operation mismatch naming both, over real sockets.
#[test]
fn combiners_that_differ_between_workers_are_an_operation_mismatch() {
    let cfgs = vec![config(Duration::from_secs(20)); 3];
    let t0 = std::time::Instant::now();
    let errors = common::tcp_job(
        &cfgs,
        |_, a| a.to_vec(),
        |w| {
            let w = w.unwrap();
            let combiner = if w.rank() == 2 {
                harp::Combiner::Max
            } else {
                harp::Combiner::Sum
            };
            let mut t = Table::new(combiner);
            t.add(0, Array::from_slice(w.pool(), &[w.rank() as f64; 4]))
                .unwrap();
            let e = w.allreduce("sums", &mut t, Opts::default()).unwrap_err();
            (e.kind(), e.to_string())
        },
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{errors:?}");
    let mismatch = errors
        .iter()
        .filter(|(k, _)| *k == "op-mismatch")
        .collect::<Vec<_>>();
    assert!(!mismatch.is_empty(), "{errors:?}");
    for (_, e) in &mismatch {
        assert!(
            e.contains("combiner max") && e.contains("combiner sum"),
            "{e}"
        );
    }
    for (k, e) in &errors {
        assert!(
            *k == "op-mismatch" || e.contains("operation mismatch"),
            "every worker fails with the mismatch or learns it: {e}"
        );
    }
}

/// A ring against recursive halving: no worker ever waits for a frame of the other kind (each
/// waits for a peer that sends elsewhere), so taking frames never meets the mismatch. A wait
/// that has slept a heartbeat interval looks through what its operation received instead:
/// every worker fails within seconds, not at the 20 s timeout.
#[test]
fn algorithms_that_never_meet_fail_before_the_timeout() {
    use harp::collective::ReduceScatterAlgorithm;
    let t0 = std::time::Instant::now();
    let errors = on_workers(4, config(Duration::from_secs(20)), |w: Worker| {
        let mut t = Table::default();
        for pid in 0..8u32 {
            t.add(pid, Array::from_slice(w.pool(), &[1.0f64; 4]))
                .unwrap();
        }
        let algo = if w.rank() < 2 {
            ReduceScatterAlgorithm::Ring
        } else {
            ReduceScatterAlgorithm::RecursiveHalving
        };
        let e = w
            .reduce_scatter(
                "rs",
                &mut t,
                &harp::Partitioner::Modulo,
                Opts::default().algorithm(algo),
            )
            .unwrap_err();
        (e.kind(), e.to_string())
    });
    assert!(t0.elapsed() < Duration::from_secs(10), "{errors:?}");
    assert!(
        errors.iter().any(|(k, _)| *k == "op-mismatch"),
        "{errors:?}"
    );
    for (k, e) in &errors {
        assert_ne!(*k, "timeout", "{e}");
        assert!(e.contains("operation mismatch"), "{e}");
    }
}

/// A regroup whose partitioner differs between workers would leave partitions on workers that
/// do not own them: the receiver checks every partition against its own partitioner.
#[test]
fn partitioners_that_differ_between_workers_fail_the_regroup() {
    let errors = on_workers(2, config(Duration::from_secs(20)), |w: Worker| {
        let part = if w.rank() == 0 {
            harp::Partitioner::Modulo
        } else {
            harp::Partitioner::Custom(std::sync::Arc::new(|id| (id as usize + 1) % 2))
        };
        let mut t = Table::default();
        for pid in 0..4u32 {
            t.add(pid, Array::from_slice(w.pool(), &[pid as f64]))
                .unwrap();
        }
        let e = w.regroup("g", &mut t, Some(&part)).unwrap_err();
        e.to_string()
    });
    assert!(
        errors
            .iter()
            .any(|e| e.contains("partitioner gives partition") && e.contains("differ")),
        "{errors:?}"
    );
    for e in &errors {
        assert!(e.contains("differ"), "{e}");
    }
}

/// Partitions that cannot be combined (a peer's, just received) say where: the rank, the
/// operation and its label, as communication errors do.
#[test]
fn data_errors_inside_a_collective_name_the_rank_and_the_operation() {
    use harp::collective::AllreduceAlgorithm;
    let errors = on_workers(2, config(Duration::from_secs(20)), |w: Worker| {
        let n = if w.rank() == 0 { 10 } else { 12 };
        let mut t = Table::default();
        t.add(0, Array::from_slice(w.pool(), &vec![1.0f64; n]))
            .unwrap();
        let e = w
            .allreduce(
                "weights",
                &mut t,
                Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
            )
            .unwrap_err();
        e.to_string()
    });
    let own = |r: usize| format!("rank {r}: allreduce #1 'weights': partition 0: cannot combine");
    assert!(
        errors[0].contains(&own(0)) || errors[1].contains(&own(1)),
        "{errors:?}"
    );
}

/// An allgather `KnownTotal` that differs from what the workers hold (too small: a worker would
/// stop early with an incomplete table; too large: it would wait for partitions that never
/// come) fails every worker at once with both numbers.
#[test]
fn a_known_total_that_differs_from_the_tables_fails_every_worker() {
    use harp::collective::AllgatherAlgorithm;
    // Ranks 0 and 2 hold three partitions each; rank 1 holds nothing (it still marks its
    // empty end).
    let table = |w: &Worker| {
        let mut t = Table::default();
        if w.rank() != 1 {
            for k in 0..3u32 {
                let pid = w.rank() as u32 * 3 + k;
                t.add(pid, Array::from_slice(w.pool(), &[pid as f64]))
                    .unwrap();
            }
        }
        t
    };
    for total in [4usize, 5, 7, usize::MAX] {
        let t0 = std::time::Instant::now();
        let errors = on_workers(3, config(Duration::from_secs(20)), |w: Worker| {
            let mut t = table(&w);
            let algo = AllgatherAlgorithm::KnownTotal(total);
            w.allgather("ag", &mut t, Opts::default().algorithm(algo))
                .unwrap_err()
                .to_string()
        });
        assert!(t0.elapsed() < Duration::from_secs(10), "{errors:?}");
        for e in &errors {
            assert!(
                e.contains(&format!(
                    "known total {total}, but the workers hold 6 partitions"
                )),
                "total {total}: {e}"
            );
        }
    }
    // The right total still gathers everything.
    let ids = on_workers(3, config(Duration::from_secs(20)), |w: Worker| {
        let mut t = table(&w);
        w.allgather(
            "ag",
            &mut t,
            Opts::default().algorithm(AllgatherAlgorithm::KnownTotal(6)),
        )
        .unwrap();
        t.ids()
    });
    for got in ids {
        assert_eq!(got, vec![0, 1, 2, 6, 7, 8]);
    }
}

/// A worker runs one collective at a time: a second thread's call while one runs is refused
/// before anything is sent (its frames would be taken for the first call's), and the running
/// one is unharmed. A label longer than an event's is refused too.
#[test]
fn a_second_thread_or_a_huge_label_is_refused_and_the_worker_goes_on() {
    let out = on_workers(2, config(Duration::from_secs(20)), |w: Worker| {
        let long = w.barrier(&"x".repeat(5000)).unwrap_err();
        assert_eq!(long.kind(), "config", "{long}");
        assert!(
            long.to_string()
                .contains("barrier: a label of 5000 bytes; at most 4096"),
            "{long}"
        );
        if w.rank() == 1 {
            std::thread::sleep(Duration::from_millis(600));
            w.barrier("first").unwrap();
            w.barrier("after").unwrap();
            return None;
        }
        let second = std::thread::scope(|s| {
            let first = s.spawn(|| w.barrier("first"));
            std::thread::sleep(Duration::from_millis(200));
            let second = w.barrier("second").unwrap_err();
            first.join().unwrap().unwrap();
            second
        });
        w.barrier("after").unwrap();
        Some(second)
    });
    let e = out[0].as_ref().unwrap();
    assert_eq!(e.kind(), "config", "{e}");
    assert!(
        e.to_string().contains(
            "rank 0: barrier 'second' called while another thread runs an operation on this \
             worker"
        ),
        "{e}"
    );
}
