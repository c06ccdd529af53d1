//! N-body on in-process workers (W = 1, 2, 4): the final positions, velocities and energies
//! equal, bit for bit, the sequential reference, with either exchange, with and without an
//! uneven network model (which makes the gather and broadcast the network-aware ones).

mod common;

use harp::apps::exchange::Exchange;
use harp::apps::nbody::{self, Options, Outcome};

use common::run_apps;

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
    };
    let (x, _, _, e1) = nbody::reference(&o);
    let outs = run_on(5, &o, false);
    assert!(outs.iter().any(|o| o.rows.is_empty()));
    for out in outs {
        assert_eq!(out.positions, x);
        assert_eq!(out.energy_final, e1);
    }
}
