//! N-body on in-process workers (W = 1, 2, 4): the final positions, velocities and energies
//! equal, bit for bit, the sequential reference, with either exchange, with and without an
//! uneven network model (which makes the gather and broadcast the network-aware ones). A run
//! that fails after a step resumes from its last checkpoint to the same bytes; a drifting
//! network model is recalibrated by the steps themselves.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use harp::apps::exchange::Exchange;
use harp::apps::nbody::{self, Options, Outcome};
use harp::checkpoint::{dir_name, Recovery};

use common::{all_failed, complete, recovery, run_apps};

fn run_on(p: usize, o: &Options, model: bool) -> Vec<Outcome> {
    let outs = run_apps(p, model, |w| nbody::run(w, o, |_| {}));
    outs.into_iter().map(|r| r.unwrap()).collect()
}

#[test]
fn every_worker_count_equals_the_sequential_reference_bit_for_bit() {
    let o = Options {
        bodies: 203,
        steps: 6,
        dt: 0.01,
        softening: 0.05,
        seed: 7,
        threads: 2,
        exchange: Exchange::GatherBroadcast,
        recovery: Default::default(),
    };
    let (x, v, e0, e1) = nbody::reference(&o);
    assert!(x.iter().chain(&v).all(|c| c.is_finite()));
    let bits = |s: &[f64]| s.iter().map(|c| c.to_bits()).collect::<Vec<_>>();
    for (p, ex, model) in [
        (1, Exchange::GatherBroadcast, false),
        (2, Exchange::GatherBroadcast, false),
        (4, Exchange::GatherBroadcast, false),
        (4, Exchange::GatherBroadcast, true),
        (3, Exchange::GatherBroadcast, true),
        (2, Exchange::Allgather, false),
        (4, Exchange::Allgather, true),
    ] {
        let o = Options {
            exchange: ex,
            threads: 1 + p % 2,
            ..o.clone()
        };
        let outs = run_on(p, &o, model);
        let mut vel = Vec::new();
        for (r, out) in outs.iter().enumerate() {
            let what = format!("p {p} {ex} model {model} rank {r}");
            assert_eq!(bits(&out.positions), bits(&x), "{what}");
            assert_eq!(out.energy_initial.to_bits(), e0.to_bits(), "{what}");
            assert_eq!(out.energy_final.to_bits(), e1.to_bits(), "{what}");
            assert_eq!(out.steps.len(), o.steps);
            vel.extend_from_slice(&out.velocities);
        }
        assert_eq!(bits(&vel), bits(&v), "p {p} {ex} model {model}");
        assert_eq!(outs.last().unwrap().rows.end, o.bodies);
    }
    // The bodies moved, and a small step keeps the energy: leapfrog's drift is small.
    let start: Vec<f64> = (0..o.bodies)
        .flat_map(|i| nbody::initial_body(o.seed, i)[..3].to_vec())
        .collect();
    assert_ne!(bits(&start), bits(&x));
    let drift = ((e1 - e0) / e0).abs();
    assert!(e0 < 0.0 && drift < 1e-3, "E0 {e0}, E1 {e1}, drift {drift}");
}

/// Halving the step makes the energy drift about four times smaller (a second-order method).
#[test]
fn leapfrog_is_second_order() {
    let o = Options {
        bodies: 64,
        steps: 20,
        dt: 0.02,
        softening: 0.1,
        seed: 3,
        threads: 1,
        exchange: Exchange::GatherBroadcast,
        recovery: Default::default(),
    };
    let drift = |o: &Options| {
        let (_, _, e0, e1) = nbody::reference(o);
        ((e1 - e0) / e0).abs()
    };
    let coarse = drift(&o);
    let fine = drift(&Options {
        dt: o.dt / 2.0,
        steps: 2 * o.steps,
        ..o.clone()
    });
    assert!(coarse > 0.0 && fine > 0.0);
    let ratio = coarse / fine;
    assert!((2.5..6.0).contains(&ratio), "coarse {coarse}, fine {fine}");
}

/// More workers than bodies: some hold none, and the result is still the reference's.
#[test]
fn workers_without_bodies_take_part() {
    let o = Options {
        bodies: 3,
        steps: 2,
        dt: 0.01,
        softening: 0.05,
        seed: 1,
        threads: 1,
        exchange: Exchange::GatherBroadcast,
        recovery: Default::default(),
    };
    let (x, _, _, e1) = nbody::reference(&o);
    let outs = run_on(5, &o, false);
    assert!(outs.iter().any(|o| o.rows.is_empty()));
    for out in outs {
        assert_eq!(out.positions, x);
        assert_eq!(out.energy_final, e1);
    }
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harp-nbody-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// What a run leaves: every worker's part file text, the energies' bits, the steps listed and
/// the step resumed from.
fn result(outs: &[Outcome]) -> (Vec<String>, [u64; 2], Vec<usize>, Option<usize>) {
    let o = &outs[0];
    (
        outs.iter().map(nbody::format_bodies).collect(),
        [o.energy_initial.to_bits(), o.energy_final.to_bits()],
        o.steps.iter().map(|s| s.step).collect(),
        o.resumed_from,
    )
}

/// W = 1 and 3: checkpoints every 2 steps, the last worker failing after step 5 (every worker
/// fails; checkpoints 2 and 4 complete); the resumed run (with the other exchange and thread
/// count: the same bits) writes the part files of the uninterrupted run byte for byte, with the
/// same energies. Another worker count or another time step is refused, naming it.
#[test]
fn a_failed_run_resumes_to_the_bytes_of_an_uninterrupted_one() {
    let dir = tmp("resume");
    let o = Options {
        bodies: 61,
        steps: 7,
        dt: 0.01,
        softening: 0.05,
        seed: 5,
        threads: 1,
        exchange: Exchange::GatherBroadcast,
        recovery: Recovery::default(),
    };
    for p in [1, 3] {
        let ck = dir.join(format!("ck{p}"));
        let full = run_on(p, &o, false);
        let want = result(&full);
        assert_eq!(want.2, (1..=7).collect::<Vec<_>>());

        common::fails_after(p, &ck, (2, 5), &[2, 4], |rec| {
            let f = Options {
                recovery: rec,
                ..o.clone()
            };
            run_apps(p, false, |w| nbody::run(w, &f, |_| {}))
        });

        let r = Options {
            exchange: Exchange::Allgather,
            threads: 2,
            recovery: recovery(&ck, 2, true, None),
            ..o.clone()
        };
        let seen = AtomicUsize::new(0);
        let outs = run_apps(p, false, |w| {
            nbody::run(w, &r, |s| {
                assert!(s.step > 4);
                seen.fetch_add(1, Ordering::Relaxed);
            })
        });
        let outs: Vec<Outcome> = outs.into_iter().map(|r| r.unwrap()).collect();
        let got = result(&outs);
        assert_eq!((&got.0, got.1), (&want.0, want.1), "p {p}");
        assert_eq!((&got.2, got.3), (&want.2, Some(4)), "p {p}");
        // The steps after the checkpoint ran (once per worker); 6 and 7 were saved.
        assert_eq!(seen.into_inner(), 3 * p);
        assert_eq!(complete(&ck), vec![dir_name(6), dir_name(7)], "p {p}");
    }
    let ck = dir.join("ck3");
    let resume = |p: usize, o: &Options| {
        let o = Options {
            recovery: recovery(&ck, 0, true, None),
            ..o.clone()
        };
        all_failed(run_apps(p, false, |w| nbody::run(w, &o, |_| {})), p - 1)
    };
    let e = resume(2, &o);
    assert!(
        e.contains("written by 3 workers, this run has 2")
            && e.contains(&format!("{}", ck.display())),
        "{e}"
    );
    let e = resume(
        3,
        &Options {
            dt: 0.02,
            ..o.clone()
        },
    );
    assert!(
        e.contains("its dt is \"0.01\", this run's is \"0.02\""),
        "{e}"
    );
    let e = resume(
        3,
        &Options {
            steps: 6,
            ..o.clone()
        },
    );
    assert!(e.contains("past the 6 iterations"), "{e}");
    // More steps than the checkpoint's run: it goes on from its last step (7) to the bytes of
    // an uninterrupted 10-step run.
    let longer = Options { steps: 10, ..o };
    let want = result(&run_on(3, &longer, false));
    let r = Options {
        recovery: recovery(&ck, 0, true, None),
        ..longer
    };
    let got = result(&run_on(3, &r, false));
    assert_eq!((&got.0, got.1, &got.2), (&want.0, want.1, &want.2));
    assert_eq!(got.3, Some(7));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model that promises 10 TB/s drifts from the measured times: the steps recalibrate it
/// with no call of their own (on by default), the result unchanged; with the option off the
/// model is kept.
#[test]
fn steps_recalibrate_a_drifting_model() {
    let o = Options {
        bodies: 40,
        steps: 12,
        dt: 0.01,
        softening: 0.05,
        seed: 2,
        threads: 1,
        exchange: Exchange::GatherBroadcast,
        recovery: Recovery::default(),
    };
    let (x, ..) = nbody::reference(&o);
    for on in [true, false] {
        let outs = common::with_drifting_model(on, |w| nbody::run(w, &o, |_| {}).unwrap());
        for (out, _) in &outs {
            assert_eq!(out.positions, x);
        }
        let kept: Vec<bool> = outs.iter().map(|o| o.1).collect();
        assert_eq!(kept, vec![!on; 3], "net_recalibrate {on}");
    }
}
