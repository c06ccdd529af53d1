//! N-body: direct gravitational forces with softening and leapfrog integration, the positions
//! allgathered every step (the network performance aware MPI paper's first application, §5.4;
//! docs/apps-nbody-cg.md).
//!
//! Bodies (G = 1): body i has mass 1/n, a position uniform in the unit ball and a velocity of
//! three normals × 0.1, all drawn from (`seed`, i) alone, so every number of workers starts
//! from the same system. The acceleration of body i is
//!
//! ```text
//! a_i = Σ_{j ≠ i, in index order} m_j · d / (|d|² + ε²)^{3/2},   d = x_j − x_i
//! ```
//!
//! and a step of length dt is kick-drift-kick leapfrog: v += a·dt/2; x += v·dt; a = a(x);
//! v += a·dt/2. The energy E = Σ_i (½ m_i |v_i|² − ½ Σ_{j≠i} m_i m_j / √(|d|² + ε²)) is
//! measured before the first step and after the last; the summary reports the relative drift
//! |E_end − E_0| / |E_0|.
//!
//! Distribution: the bodies are cut into contiguous blocks, one per worker
//! ([`Blocks`](super::exchange::Blocks)); a worker moves its own bodies and, every step, the
//! positions of all bodies are gathered everywhere ([`gather_all`], by default a gather then a
//! broadcast, so with a network model the network-aware algorithms carry them). Every
//! body's sums run over all bodies in index order and the energy is summed in a fixed order, so
//! the result is the same, bit for bit, for any number of workers and threads, and equals
//! [`reference`].
//!
//! Checkpoints (`recovery`, docs/apps-nbody-cg.md "Checkpoints"): after every N-th step each
//! worker saves its bodies' positions and velocities (exact bits) and the run's history; a
//! resumed run gathers the saved positions, computes the forces from them as the step after
//! the checkpoint would have, and goes on, so it ends with the bits of an uninterrupted run.

use std::time::Instant;

use rayon::prelude::*;

use super::exchange::{gather_all, resume_state, state_table, sum, Blocks, Exchange};
use crate::checkpoint::{Recovering, Recovery};
use crate::data::Table;
use crate::error::{Error, Result};
use crate::util::{splitmix64, Rng};
use crate::worker::Worker;

/// Mixed into a body's seed.
const SALT: u64 = 0x6e62_6f64_792d_6264; // "nbody-bd"

/// The most bodies (`--bodies`): positions of all of them are held by every worker.
pub const MAX_BODIES: usize = 1 << 26;

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct Options {
    pub bodies: usize,
    pub steps: usize,
    pub dt: f64,
    pub softening: f64,
    pub seed: u64,
    pub threads: usize,
    pub exchange: Exchange,
    /// Checkpoints every N steps and resuming (a step is an iteration).
    pub recovery: Recovery,
}

impl Default for Options {
    fn default() -> Options {
        let d = &crate::config::apps::NBODY;
        Options {
            bodies: d.default_of("bodies"),
            steps: d.default_of("steps"),
            dt: d.default_of("dt"),
            softening: d.default_of("softening"),
            seed: d.default_of("seed"),
            threads: d.default_of("threads"),
            exchange: d.default_of("exchange"),
            recovery: Recovery::default(),
        }
    }
}

impl Options {
    pub fn validate(&self) -> Result<()> {
        if self.bodies == 0 || self.bodies > MAX_BODIES {
            return Err(Error::config(format!(
                "--bodies must be from 1 to {MAX_BODIES}, not {}",
                self.bodies
            )));
        }
        if self.steps == 0 {
            return Err(Error::config("--steps must be at least 1"));
        }
        if !(self.dt.is_finite() && self.dt > 0.0) {
            return Err(Error::config(format!(
                "--dt must be a positive number, not {}",
                self.dt
            )));
        }
        if !(self.softening.is_finite() && self.softening > 0.0) {
            return Err(Error::config(format!(
                "--softening must be a positive number, not {}",
                self.softening
            )));
        }
        if self.threads == 0 {
            return Err(Error::config("--threads must be at least 1"));
        }
        self.recovery.validate()?;
        super::check_threads(self.threads)
    }

    /// What the bodies' state after a step depends on, recorded in a checkpoint and checked on
    /// resume: the bodies, their seed, the step and the softening (floats in their shortest
    /// round-trip text, compared exactly). Not the steps (a resume may go further), the threads
    /// or the exchange (the same bits either way).
    pub fn meta(&self) -> serde_json::Value {
        serde_json::json!({
            "app": "nbody",
            "bodies": self.bodies,
            "seed": self.seed,
            "dt": self.dt.to_string(),
            "softening": self.softening.to_string(),
        })
    }
}

/// Body `i`'s start: position (3), velocity (3), from (`seed`, `i`) alone.
pub fn initial_body(seed: u64, i: usize) -> [f64; 6] {
    let mut rng = Rng::new(splitmix64(seed) ^ splitmix64(i as u64 ^ SALT));
    let x = loop {
        let p = [
            rng.uniform(-1.0, 1.0),
            rng.uniform(-1.0, 1.0),
            rng.uniform(-1.0, 1.0),
        ];
        if p[0] * p[0] + p[1] * p[1] + p[2] * p[2] <= 1.0 {
            break p;
        }
    };
    let v = [rng.normal() * 0.1, rng.normal() * 0.1, rng.normal() * 0.1];
    [x[0], x[1], x[2], v[0], v[1], v[2]]
}

/// The acceleration of body `i` from all positions `pos` (3 per body), every body of mass `m`.
#[inline]
fn accel(pos: &[f64], i: usize, m: f64, eps2: f64) -> [f64; 3] {
    let (x, y, z) = (pos[3 * i], pos[3 * i + 1], pos[3 * i + 2]);
    let (mut ax, mut ay, mut az) = (0.0f64, 0.0f64, 0.0f64);
    for (j, p) in pos.chunks_exact(3).enumerate() {
        if j == i {
            continue;
        }
        let (dx, dy, dz) = (p[0] - x, p[1] - y, p[2] - z);
        let r2 = dx * dx + dy * dy + dz * dz + eps2;
        let s = m / (r2 * r2.sqrt());
        ax += dx * s;
        ay += dy * s;
        az += dz * s;
    }
    [ax, ay, az]
}

/// Body `i`'s energy share: ½ m |v|² − ½ Σ_{j≠i} m² / √(|d|² + ε²).
fn energy_of(pos: &[f64], v: &[f64], i: usize, m: f64, eps2: f64) -> [f64; 1] {
    let (x, y, z) = (pos[3 * i], pos[3 * i + 1], pos[3 * i + 2]);
    let mut pot = 0.0f64;
    for (j, p) in pos.chunks_exact(3).enumerate() {
        if j == i {
            continue;
        }
        let (dx, dy, dz) = (p[0] - x, p[1] - y, p[2] - z);
        pot += m * m / (dx * dx + dy * dy + dz * dz + eps2).sqrt();
    }
    [0.5 * m * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]) - 0.5 * pot]
}

/// One step's record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Step {
    pub step: usize,
    pub compute_s: f64,
    pub comm_s: f64,
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every body's final position, 3 per body (the same on every worker).
    pub positions: Vec<f64>,
    /// This worker's bodies and their final velocities (3 per body).
    pub rows: std::ops::Range<usize>,
    pub velocities: Vec<f64>,
    pub energy_initial: f64,
    pub energy_final: f64,
    pub steps: Vec<Step>,
    /// Seconds spent on the steps this run made (from its first kick to its last).
    pub steps_s: f64,
    /// The step of the checkpoint this run resumed from (its steps are in `steps` too).
    pub resumed_from: Option<usize>,
}

impl Outcome {
    /// |E_end − E_0| / |E_0|.
    pub fn energy_drift(&self) -> f64 {
        ((self.energy_final - self.energy_initial) / self.energy_initial).abs()
    }
}

/// Collective: runs the simulation; `progress` sees every step (with `recovery.resume`, those
/// after the checkpoint).
pub fn run(w: &Worker, o: &Options, mut progress: impl FnMut(&Step)) -> Result<Outcome> {
    o.validate()?;
    // An unusable checkpoint directory fails now, not after the first steps.
    let rec = o.recovery.open(w, "nbody")?;
    let pool = super::compute_threads(o.threads)?;
    let ex = o.exchange;
    let n = o.bodies;
    let blocks = Blocks::new(n, w.size());
    let rows = blocks.rows(w.rank());
    let (m, eps2, dt) = (1.0 / n as f64, o.softening * o.softening, o.dt);
    let mut x = Vec::with_capacity(3 * rows.len());
    let mut v = Vec::with_capacity(3 * rows.len());
    for i in rows.clone() {
        let b = initial_body(o.seed, i);
        x.extend_from_slice(&b[..3]);
        v.extend_from_slice(&b[3..]);
    }
    let meta = o.meta();
    let mut steps = Vec::new();
    let resumed = resume(w, &rec, &meta, o, &mut x, &mut v, &mut steps)?;
    let mut pos = gather_all(w, ex, "nbody-positions", &blocks, 3, &x)?;
    let first = rows.start;
    let energy = |w: &Worker, pos: &[f64], v: &[f64]| {
        sum(w, ex, "nbody-energy", &blocks, |i| {
            energy_of(pos, &v[3 * (i - first)..], i, m, eps2)
        })
    };
    let energy_initial = match resumed {
        Some((_, e0)) => e0,
        None => energy(w, &pos, &v)?[0],
    };
    let start = resumed.map_or(0, |(s, _)| s);
    let forces = |pos: &[f64], a: &mut Vec<f64>| {
        pool.install(|| {
            a.par_chunks_mut(3)
                .with_min_len(8)
                .enumerate()
                .for_each(|(k, out)| out.copy_from_slice(&accel(pos, first + k, m, eps2)))
        })
    };
    let mut a = vec![0.0; 3 * rows.len()];
    forces(&pos, &mut a);
    let t_steps = Instant::now();
    for s in start + 1..=o.steps {
        let t0 = Instant::now();
        for k in 0..v.len() {
            v[k] += 0.5 * dt * a[k];
            x[k] += dt * v[k];
        }
        let compute_kick = t0.elapsed().as_secs_f64();
        let tc = Instant::now();
        pos = gather_all(w, ex, "nbody-positions", &blocks, 3, &x)?;
        let comm_s = tc.elapsed().as_secs_f64();
        let t1 = Instant::now();
        forces(&pos, &mut a);
        for k in 0..v.len() {
            v[k] += 0.5 * dt * a[k];
        }
        let st = Step {
            step: s,
            compute_s: compute_kick + t1.elapsed().as_secs_f64(),
            comm_s,
        };
        progress(&st);
        steps.push(st);
        rec.after_iteration(w, s, o.steps, &meta, || {
            Ok(state(w, &x, &v, energy_initial, &steps))
        })?;
    }
    let steps_s = t_steps.elapsed().as_secs_f64();
    let [energy_final] = energy(w, &pos, &v)?;
    Ok(Outcome {
        positions: pos,
        rows,
        velocities: v,
        energy_initial,
        energy_final,
        steps,
        steps_s,
        resumed_from: resumed.map(|(s, _)| s),
    })
}

/// This worker's state after a step ([`state_table`]): its bodies' positions and velocities
/// (3 f64 per body each), the initial energy, and the compute and communication seconds of
/// every step so far.
fn state(
    w: &Worker,
    x: &[f64],
    v: &[f64],
    energy_initial: f64,
    steps: &[Step],
) -> Vec<(&'static str, Table)> {
    let compute: Vec<f64> = steps.iter().map(|s| s.compute_s).collect();
    let comm: Vec<f64> = steps.iter().map(|s| s.comm_s).collect();
    state_table(w, &[x, v, &[energy_initial], &compute, &comm])
}

/// With `resume`, this worker's positions and velocities and the steps from the newest
/// checkpoint ([`state`]): the steps done and the initial energy, or None for a fresh start.
fn resume(
    w: &Worker,
    rec: &Recovering,
    meta: &serde_json::Value,
    o: &Options,
    x: &mut [f64],
    v: &mut [f64],
    steps: &mut Vec<Step>,
) -> Result<Option<(usize, f64)>> {
    resume_state(w, rec, meta, o.steps, 5, |it, s| {
        if s[0].len() != x.len() || s[1].len() != v.len() {
            return Err(Error::data(format!(
                "the checkpoint at step {it} holds {} bodies for rank {}, this run gives it {}",
                s[0].len() / 3,
                w.rank(),
                x.len() / 3
            )));
        }
        if s[2].len() != 1 || s[3].len() != it || s[4].len() != it {
            return Err(Error::data(format!(
                "the checkpoint at step {it} holds a history of {} steps",
                s[3].len()
            )));
        }
        x.copy_from_slice(&s[0]);
        v.copy_from_slice(&s[1]);
        *steps = (0..it)
            .map(|k| Step {
                step: k + 1,
                compute_s: s[3][k],
                comm_s: s[4][k],
            })
            .collect();
        Ok(s[2][0])
    })
}

/// `i x y z vx vy vz` lines (full precision) for this worker's bodies.
pub fn format_bodies(o: &Outcome) -> String {
    let mut s = String::with_capacity(o.rows.len() * 140);
    for (k, i) in o.rows.clone().enumerate() {
        s.push_str(&i.to_string());
        for c in o.positions[3 * i..3 * i + 3]
            .iter()
            .chain(&o.velocities[3 * k..3 * k + 3])
        {
            s.push(' ');
            crate::apps::kmeans::input::format_f64(*c, &mut s);
        }
        s.push('\n');
    }
    s
}

/// A sequential run of the same arithmetic, on one thread with no exchange: the final positions
/// and velocities (3 per body each) and the initial and final energies.
pub fn reference(o: &Options) -> (Vec<f64>, Vec<f64>, f64, f64) {
    let n = o.bodies;
    let (m, eps2, dt) = (1.0 / n as f64, o.softening * o.softening, o.dt);
    let bodies: Vec<[f64; 6]> = (0..n).map(|i| initial_body(o.seed, i)).collect();
    let mut x: Vec<f64> = bodies.iter().flat_map(|b| [b[0], b[1], b[2]]).collect();
    let mut v: Vec<f64> = bodies.iter().flat_map(|b| [b[3], b[4], b[5]]).collect();
    let blocks = Blocks::new(n, 1);
    let energy = |x: &[f64], v: &[f64]| {
        super::exchange::fixed_sum(&blocks, |i| energy_of(x, &v[3 * i..], i, m, eps2))[0]
    };
    let e0 = energy(&x, &v);
    let all_accel = |x: &[f64]| -> Vec<f64> { (0..n).flat_map(|i| accel(x, i, m, eps2)).collect() };
    let mut a = all_accel(&x);
    for _ in 0..o.steps {
        for k in 0..3 * n {
            v[k] += 0.5 * dt * a[k];
            x[k] += dt * v[k];
        }
        a = all_accel(&x);
        for k in 0..3 * n {
            v[k] += 0.5 * dt * a[k];
        }
    }
    let e1 = energy(&x, &v);
    (x, v, e0, e1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_start_in_the_unit_ball_from_their_seed() {
        let a = initial_body(3, 17);
        assert_eq!(a, initial_body(3, 17));
        assert_ne!(a, initial_body(4, 17));
        assert_ne!(a, initial_body(3, 18));
        for i in 0..200 {
            let b = initial_body(1, i);
            assert!(b[0] * b[0] + b[1] * b[1] + b[2] * b[2] <= 1.0);
        }
    }

    /// Two bodies attract each other along their line, equally and oppositely.
    #[test]
    fn two_bodies_pull_each_other() {
        let pos = [0.0, 0.0, 0.0, 2.0, 0.0, 0.0];
        let a0 = accel(&pos, 0, 0.5, 0.0);
        let a1 = accel(&pos, 1, 0.5, 0.0);
        assert_eq!(a0, [0.125, 0.0, 0.0]);
        assert_eq!(a1, [-0.125, 0.0, 0.0]);
        let e = energy_of(&pos, &[0.0; 3], 0, 0.5, 0.0)[0];
        assert_eq!(e, -0.5 * 0.25 / 2.0);
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        for (f, name) in [
            (
                (|o: &mut Options| o.bodies = 0) as fn(&mut Options),
                "--bodies",
            ),
            (|o| o.steps = 0, "--steps"),
            (|o| o.dt = f64::NAN, "--dt"),
            (|o| o.softening = 0.0, "--softening"),
            (|o| o.threads = 0, "--threads"),
        ] {
            let mut o = Options::default();
            f(&mut o);
            let e = o.validate().unwrap_err().to_string();
            assert!(e.contains(name), "{e}");
        }
        Options::default().validate().unwrap();
    }
}
