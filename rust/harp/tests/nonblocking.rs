//! Non-blocking collectives (`*_start` and their `Pending` handles) against the sequential
//! model: p = 1…8 in-process workers, each running the same random program of collectives with
//! its own random interleaving of starts, blocking calls, waits, tests, dropped handles and
//! computation.

mod common;

use std::time::Duration;

use harp::check::model::{combine_all, copy, gen, h, same, shape, Shape};
use harp::worker::Pending;
use harp::{Collectives, Opts, Partitioner, Pool, Table, Worker};

/// The collectives of the random programs.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Rotate,
    RotateMap,
    Push,
    Pull,
    Allreduce,
    Allgather,
    Broadcast,
    Barrier,
}

const KINDS: [Kind; 8] = [
    Kind::Rotate,
    Kind::RotateMap,
    Kind::Push,
    Kind::Pull,
    Kind::Allreduce,
    Kind::Allgather,
    Kind::Broadcast,
    Kind::Barrier,
];

/// A handle of any of them.
enum Handle {
    One(Pending<Table>),
    Two(Pending<(Table, Table)>),
    Zero(Pending<()>),
}

impl Handle {
    fn test(&mut self) -> bool {
        match self {
            Handle::One(h) => h.test(),
            Handle::Two(h) => h.test(),
            Handle::Zero(h) => h.test(),
        }
    }
}

/// A result of any of them.
enum Got {
    One(Table),
    Two(Table, Table),
    Zero,
}

/// One step of the program: its collective and its tables (the same on every worker).
struct Step {
    kind: Kind,
    shape: Shape,
    inputs: Vec<Table>,
    globals: Vec<Table>,
    root: usize,
    perm: Vec<usize>,
}

fn step(pool: &Pool, seed: u64, i: u64, p: usize) -> Step {
    let kind = KINDS[(h(&[seed, i, 1]) % KINDS.len() as u64) as usize];
    let shape = shape(seed, i, 3000);
    let inputs: Vec<Table> = (0..p)
        .map(|k| gen(pool, &shape, seed, i, 0, k, None))
        .collect();
    let globals: Vec<Table> = (0..p)
        .map(|k| {
            let only = |pid: u32| pid as usize % p == k;
            gen(pool, &shape, seed, i, 7, k, Some(&only))
        })
        .collect();
    let mut perm: Vec<usize> = (0..p).collect();
    for j in (1..p).rev() {
        perm.swap(j, (h(&[seed, i, 11, j as u64]) % (j as u64 + 1)) as usize);
    }
    Step {
        kind,
        root: (h(&[seed, i, 9]) % p as u64) as usize,
        shape,
        inputs,
        globals,
        perm,
    }
}

impl Step {
    /// Rank r's local table of a pull: its input's ids that some owner holds.
    fn pull_local(&self, pool: &Pool, r: usize) -> Table {
        let all = combine_all(pool, &self.globals);
        let mut local = Table::new(self.shape.combiner.clone());
        for (id, x) in self.inputs[r].iter() {
            if all.contains(id) {
                local.put(id, x.duplicate(pool));
            }
        }
        local
    }

    /// Starts this step's collective on `w` as rank r.
    fn start(&self, w: &Worker, r: usize, label: &str) -> harp::Result<Handle> {
        let pool = w.pool();
        let mine = copy(pool, &self.inputs[r]);
        let m = Partitioner::Modulo;
        Ok(match self.kind {
            Kind::Rotate => Handle::One(w.rotate_start(label, mine, None)?),
            Kind::RotateMap => Handle::One(w.rotate_start(label, mine, Some(self.perm.clone()))?),
            Kind::Push => {
                let global = copy(pool, &self.globals[r]);
                Handle::Two(w.push_start(label, (mine, global), m)?)
            }
            Kind::Pull => {
                let global = copy(pool, &self.globals[r]);
                Handle::Two(w.pull_start(label, (self.pull_local(pool, r), global), m)?)
            }
            Kind::Allreduce => Handle::One(w.allreduce_start(label, mine, Opts::default())?),
            Kind::Allgather => Handle::One(w.allgather_start(label, mine, Opts::default())?),
            Kind::Broadcast => {
                Handle::One(w.broadcast_start(label, mine, Opts::default().root(self.root))?)
            }
            Kind::Barrier => Handle::Zero(w.barrier_start(label)?),
        })
    }

    /// Runs this step's collective on `w` with the blocking call.
    fn blocking(&self, w: &Worker, r: usize, label: &str) -> harp::Result<Got> {
        let pool = w.pool();
        let mut t = copy(pool, &self.inputs[r]);
        let m = Partitioner::Modulo;
        match self.kind {
            Kind::Rotate => w.rotate(label, &mut t, None)?,
            Kind::RotateMap => w.rotate(label, &mut t, Some(&self.perm))?,
            Kind::Push => {
                let mut global = copy(pool, &self.globals[r]);
                w.push(label, &t, &mut global, &m)?;
                return Ok(Got::Two(t, global));
            }
            Kind::Pull => {
                let mut local = self.pull_local(pool, r);
                w.pull(label, &mut local, &self.globals[r], &m)?;
                return Ok(Got::Two(local, copy(pool, &self.globals[r])));
            }
            Kind::Allreduce => w.allreduce(label, &mut t, Opts::default())?,
            Kind::Allgather => w.allgather(label, &mut t, Opts::default())?,
            Kind::Broadcast => w.broadcast(label, &mut t, Opts::default().root(self.root))?,
            Kind::Barrier => {
                w.barrier(label)?;
                return Ok(Got::Zero);
            }
        }
        Ok(Got::One(t))
    }

    /// Compares rank r's result with the model's.
    fn check(&self, pool: &Pool, r: usize, p: usize, got: Got, what: &str) -> harp::Result<()> {
        let all = || combine_all(pool, &self.inputs);
        match (self.kind, got) {
            (Kind::Rotate, Got::One(t)) => same(what, &t, &self.inputs[(r + p - 1) % p]),
            (Kind::RotateMap, Got::One(t)) => {
                let src = self.perm.iter().position(|&d| d == r).expect("permutation");
                same(what, &t, &self.inputs[src])
            }
            (Kind::Push, Got::Two(_, global)) => {
                let mut want = copy(pool, &self.globals[r]);
                for t in &self.inputs {
                    for (id, x) in t.iter() {
                        if id as usize % p == r {
                            want.add(id, x.duplicate(pool))?;
                        }
                    }
                }
                same(what, &global, &want)
            }
            (Kind::Pull, Got::Two(local, _)) => {
                let global_all = combine_all(pool, &self.globals);
                let mut want = Table::new(self.shape.combiner.clone());
                for id in self.pull_local(pool, r).ids() {
                    want.put(id, global_all.get(id).expect("exists").duplicate(pool));
                }
                same(what, &local, &want)
            }
            (Kind::Allreduce | Kind::Allgather, Got::One(t)) => same(what, &t, &all()),
            (Kind::Broadcast, Got::One(t)) => same(what, &t, &self.inputs[self.root]),
            (Kind::Barrier, Got::Zero) => Ok(()),
            (k, _) => Err(harp::Error::data(format!(
                "{what}: {k:?} gave the wrong shape"
            ))),
        }
    }
}

fn wait(h: Handle) -> harp::Result<Got> {
    Ok(match h {
        Handle::One(h) => Got::One(h.wait()?),
        Handle::Two(h) => {
            let (a, b) = h.wait()?;
            Got::Two(a, b)
        }
        Handle::Zero(h) => {
            h.wait()?;
            Got::Zero
        }
    })
}

/// Some work between the calls, of a random size.
fn compute(n: u64) -> u64 {
    (0..n).fold(0u64, |a, x| std::hint::black_box(a.wrapping_mul(31) ^ x))
}

/// Handles still pending, in start order: completion is in start order, so a complete one
/// implies that every one before it is complete. Tested from the latest back (a complete
/// latest one makes every earlier one complete by then).
fn check_completion_order(pending: &mut [(u64, Handle)]) {
    let mut later_done = None;
    for (i, h) in pending.iter_mut().rev() {
        let done = h.test();
        if let Some(j) = later_done {
            assert!(done, "operation {i} is not complete but the later {j} is");
        }
        if done && later_done.is_none() {
            later_done = Some(*i);
        }
    }
}

/// Runs the program of `steps` collectives of `seed` on `p` workers.
fn run_program(p: usize, seed: u64, steps: u64) {
    let cfg = common::config(Duration::from_secs(30));
    let out = common::on_workers(p, cfg, |w| {
        let r = w.rank();
        let res = (|| -> harp::Result<usize> {
            let pool = w.pool().clone();
            let mut pending: Vec<(u64, Handle)> = Vec::new();
            let mut checked = 0;
            let mut steps_of = Vec::new();
            // This rank's own choices: the interleaving differs between ranks.
            let mine = |i: u64, what: u64| h(&[seed, i, r as u64, what]);
            for i in 0..steps {
                let s = step(&pool, seed, i, p);
                let label = format!("step {i}");
                steps_of.push(s);
                let s = &steps_of[i as usize];
                match mine(i, 1) % 8 {
                    0 => {
                        // A blocking call waits for the operations in flight first.
                        let got = s.blocking(&w, r, &label)?;
                        for (j, h) in pending.iter_mut() {
                            assert!(h.test(), "rank {r}: {j} pending after a blocking call");
                        }
                        s.check(&pool, r, p, got, &format!("rank {r} blocking {label}"))?;
                        checked += 1;
                    }
                    1 => {
                        // Dropped: waits and discards; nothing may be left pending before it.
                        let h = s.start(&w, r, &label)?;
                        drop(h);
                        for (j, h) in pending.iter_mut() {
                            assert!(h.test(), "rank {r}: {j} pending after a dropped later one");
                        }
                    }
                    _ => pending.push((i, s.start(&w, r, &label)?)),
                }
                compute(mine(i, 2) % 200_000);
                check_completion_order(&mut pending);
                // Wait for some of the pending ones, in any order.
                let n = (mine(i, 3) % (pending.len() as u64 + 1)) as usize;
                for k in 0..n {
                    let at = (mine(i, 10 + k as u64) % pending.len() as u64) as usize;
                    let (j, h) = pending.remove(at);
                    let got = wait(h)?;
                    let what = format!("rank {r} started step {j}");
                    steps_of[j as usize].check(&pool, r, p, got, &what)?;
                    checked += 1;
                }
            }
            for (j, h) in pending.drain(..) {
                let got = wait(h)?;
                steps_of[j as usize].check(&pool, r, p, got, &format!("rank {r} step {j}"))?;
                checked += 1;
            }
            Ok(checked)
        })();
        w.close();
        res
    });
    for (r, res) in out.into_iter().enumerate() {
        if let Err(e) = res {
            panic!("p = {p}, seed {seed}, rank {r}: {e}");
        }
    }
}

#[test]
fn random_interleavings_match_the_model_for_1_to_8_workers() {
    for p in 1..=8 {
        for seed in [1u64, 2, 3, 4] {
            run_program(p, seed * 1000 + p as u64, 32);
        }
    }
}

/// Three operations started on ranks 0 and 1 of 3 while rank 2 leaves by `leave`; returns
/// every error the handles of ranks 0 and 1 gave (one of them dropped, two waited), and the
/// seconds the waits took.
fn pending_with_rank_2_leaving(leave: impl Fn(Worker) + Sync) -> Vec<(usize, String, f64)> {
    let cfg = common::config(Duration::from_secs(4));
    let out = common::on_workers(3, cfg, |w| {
        let r = w.rank();
        if r == 2 {
            leave(w);
            return Vec::new();
        }
        let pool = w.pool().clone();
        let s = step(&pool, 7, 0, 3);
        let t0 = std::time::Instant::now();
        let a = w.allreduce_start("a", copy(&pool, &s.inputs[r]), Opts::default());
        let a = a.unwrap();
        let dropped = w.barrier_start("dropped").unwrap();
        let b = w
            .rotate_start("b", copy(&pool, &s.inputs[r]), None)
            .unwrap();
        compute(100_000);
        // Dropping waits for the operation (which fails): the worker is not left half way.
        drop(dropped);
        let mut errors = Vec::new();
        let e = a.wait().expect_err("rank 2 never takes part");
        errors.push((r, e.to_string(), t0.elapsed().as_secs_f64()));
        let e = b.wait().expect_err("every later handle fails too");
        errors.push((r, e.to_string(), t0.elapsed().as_secs_f64()));
        // And so does the next call, blocking or not.
        let e = w.barrier_start("after").map(|h| h.wait());
        let e = match e {
            Ok(Err(e)) | Err(e) => e,
            Ok(Ok(())) => panic!("rank {r}: a barrier after the failure succeeded"),
        };
        errors.push((r, e.to_string(), t0.elapsed().as_secs_f64()));
        w.close();
        errors
    });
    out.into_iter().flatten().collect()
}

#[test]
fn an_aborted_peer_fails_every_pending_handle_naming_it() {
    let errors = pending_with_rank_2_leaving(|w| w.abort("gone for the test"));
    assert_eq!(errors.len(), 6);
    for (r, e, secs) in errors {
        assert!(e.contains("rank 2 is gone"), "rank {r}: {e}");
        assert!(e.contains("gone for the test"), "rank {r}: {e}");
        assert!(secs < 4.0, "rank {r}: {secs} s for an aborted peer: {e}");
    }
}

#[test]
fn a_peer_that_never_calls_times_out_every_pending_handle() {
    // Rank 2 stays alive (its heartbeats go on) but never calls: the first pending operation
    // times out, and the ones after it fail with that error. Which wait times out first is a
    // race, as with blocking calls: rank 0 waiting for rank 2, or rank 1 waiting for rank 0
    // (which waits for rank 2; the message then says the peer may be waiting for another
    // worker). So the test asserts a timeout on every handle within the bound, not the rank.
    let errors = pending_with_rank_2_leaving(|w| {
        std::thread::sleep(Duration::from_secs(6));
        w.close()
    });
    assert_eq!(errors.len(), 6);
    for (r, e, secs) in errors {
        assert!(
            e.contains("timed out") || e.contains("timeout"),
            "rank {r}: {e}"
        );
        assert!(
            e.contains("rank 2")
                || e.contains("may be stuck outside the collectives or waiting for another worker"),
            "rank {r}: {e}"
        );
        assert!(secs < 8.0, "rank {r}: {secs} s: {e}");
    }
}

#[test]
fn group_and_job_operations_in_flight_together_match_the_model() {
    // Even ranks form a group; its operations and the job's interleave in flight.
    let p = 5;
    let out = common::on_workers(p, common::config(Duration::from_secs(30)), |w| {
        let r = w.rank();
        let pool = w.pool().clone();
        let s = step(&pool, 11, 0, p);
        let evens: Vec<usize> = (0..p).step_by(2).collect();
        let res = (|| -> harp::Result<()> {
            let a = w.rotate_start("job", copy(&pool, &s.inputs[r]), None)?;
            let g = if r % 2 == 0 {
                let g = w.group(&evens)?;
                let t = copy(&pool, &s.inputs[r]);
                Some(g.allreduce_start("group", t, Opts::default())?)
            } else {
                None
            };
            let b = w.allgather_start("job", copy(&pool, &s.inputs[r]), Opts::default())?;
            same("rotate", &a.wait()?, &s.inputs[(r + p - 1) % p])?;
            if let Some(g) = g {
                let ins: Vec<Table> = evens.iter().map(|&k| copy(&pool, &s.inputs[k])).collect();
                same("group allreduce", &g.wait()?, &combine_all(&pool, &ins))?;
            }
            same("allgather", &b.wait()?, &combine_all(&pool, &s.inputs))
        })();
        w.close();
        res
    });
    for (r, res) in out.into_iter().enumerate() {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}
