//! Multidimensional scaling by stress majorization (SMACOF), weighted and with optional
//! deterministic annealing: the WDA-SMACOF application of the Harp paper (§5.3).
//!
//! Given dissimilarities δ_ij (an N×N matrix) and weights w_ij ≥ 0 (1 without `--weights`),
//! find N points X in D dimensions minimising the stress
//! σ(X) = Σ_{i<j} w_ij (δ_ij − d_ij(X))², d_ij = ‖x_i − x_j‖. Each iteration majorizes σ at the
//! current X and moves to the majorizer's minimum, the solution of V·X' = B(X)·X, with
//! * V_ij = −w_ij (i ≠ j), V_ii = Σ_{j≠i} w_ij (the weighted Laplacian), and
//! * B_ij = −w_ij δ̂_ij / d_ij (i ≠ j, 0 when d_ij = 0), B_ii = −Σ_{j≠i} B_ij, so that
//!   (B·X)_i = Σ_{j≠i} w_ij δ̂_ij/d_ij · (x_i − x_j).
//!
//! With unit weights V = N·I − 11ᵀ, and on configurations centred at 0 the solution is the
//! Guttman transform X' = B·X / N ([`Solver::Guttman`]). With weights, V is singular (V·1 = 0),
//! but B·X has columns summing to 0 (B is symmetric with zero row sums): the system is solved
//! by conjugate gradients in the subspace orthogonal to 1 ([`Solver::Cg`], the Frobenius inner
//! product over all D columns at once), started from the current X (centred, so every iterate
//! stays centred); this converges to V⁺·B·X, the Moore–Penrose solution used by SMACOF. CG
//! stops after `cg_iterations` steps or when ‖r‖ ≤ `cg_tolerance`·‖B·X‖.
//!
//! Deterministic annealing (the "DA"): with `temperature` T₀ > 0, iteration k uses
//! δ̂_ij = max(δ_ij − T_k·√(2D), 0) with T_k = T₀·cooling^(k−1), and T_k = 0 once it falls below
//! T₀/1000; without it δ̂ = δ. The stress reported is always that of the original δ.
//!
//! Distribution: the rows of δ (and w) are split into contiguous blocks, one per worker, in
//! rank order ([`input`]); every worker holds all of X. An iteration computes the worker's rows
//! of B·X and its share of the stress (rayon over rows, every row summed over j in global order,
//! so a row's value does not depend on the worker count), then either scales them (Guttman) or
//! runs CG (one allgather of the search direction and two allreduces of one number per step),
//! and ends with one allgather of the new X's blocks. The stress is one allreduce per iteration.

pub mod input;

use std::time::Instant;

use rayon::prelude::*;

use crate::apps::dense::{allgather_blocks, allgather_counts, allreduce_sum, offsets};
use crate::apps::kmeans::kernel::Kernel;
use crate::checkpoint::Recovery;
use crate::data::{Array, Combiner, Table};
use crate::error::{Error, Result};
use crate::storage::{self, Storage};
use crate::util::Rng;
use crate::worker::agree;
use crate::worker::Worker;

pub use input::Format;

named_enum!(
    /// How the majorizer's minimum is found.
    Solver, "solver", {
        /// Guttman transform without weights, conjugate gradients with them.
        #[default]
        Auto => "auto",
        /// X' = B·X / N (unit weights only).
        Guttman => "guttman",
        /// Conjugate gradients on V·X' = B·X (any weights).
        Cg => "cg",
    }
);

/// Options of a run.
#[derive(Debug, Clone)]
pub struct Options {
    pub input: String,
    pub format: Format,
    pub weights: Option<String>,
    pub dim: usize,
    pub iterations: usize,
    /// Initial coordinates (text, N lines of `dim` numbers); without it, uniform in [0, 1)^dim
    /// from `seed` (the same for any number of workers).
    pub init: Option<String>,
    pub seed: u64,
    pub threads: usize,
    pub solver: Solver,
    pub cg_iterations: usize,
    pub cg_tolerance: f64,
    /// Initial temperature of deterministic annealing (0: off).
    pub temperature: f64,
    pub cooling: f64,
    /// Checkpoints and resume (`--checkpoint-every`, `--checkpoint-dir`, `--resume`).
    pub recovery: Recovery,
}

impl Options {
    /// Defaults: text input, unit weights, 2 dimensions, 10 iterations, seeded random start,
    /// 1 thread, automatic solver, CG ≤ 20 steps to 1e-10, no annealing.
    pub fn new(input: impl Into<String>) -> Options {
        Options {
            input: input.into(),
            format: crate::config::apps::MDS.default_of("format"),
            weights: None,
            dim: crate::config::apps::MDS.default_of("dim"),
            iterations: crate::config::apps::MDS.default_of("iterations"),
            init: None,
            seed: crate::config::apps::MDS.default_of("seed"),
            threads: crate::config::apps::MDS.default_of("threads"),
            solver: crate::config::apps::MDS.default_of("solver"),
            cg_iterations: crate::config::apps::MDS.default_of("cg_iterations"),
            cg_tolerance: crate::config::apps::MDS.default_of("cg_tolerance"),
            temperature: crate::config::apps::MDS.default_of("temperature"),
            cooling: crate::config::apps::MDS.default_of("cooling"),
            recovery: Recovery::default(),
        }
    }

    /// Every value in range, with the option named.
    pub fn validate(&self) -> Result<()> {
        if self.dim == 0 || self.iterations == 0 || self.threads == 0 || self.cg_iterations == 0 {
            return Err(Error::config(
                "--dim, --iterations, --threads and --cg-iterations must be at least 1",
            ));
        }
        if !(self.cg_tolerance.is_finite() && self.cg_tolerance >= 0.0) {
            return Err(Error::config("--cg-tolerance must be a finite number >= 0"));
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Error::config("--temperature must be a finite number >= 0"));
        }
        if !(self.cooling > 0.0 && self.cooling < 1.0) {
            return Err(Error::config("--cooling must be in (0, 1)"));
        }
        if self.solver == Solver::Guttman && self.weights.is_some() {
            return Err(Error::config(
                "--solver guttman needs unit weights: use --solver cg (or auto) with --weights",
            ));
        }
        self.recovery.validate()
    }

    /// The solver actually used.
    pub fn solver(&self) -> Solver {
        match (self.solver, &self.weights) {
            (Solver::Auto, None) => Solver::Guttman,
            (Solver::Auto, Some(_)) => Solver::Cg,
            (s, _) => s,
        }
    }

    /// The temperature of iteration `k` (1-based).
    pub fn temperature_at(&self, k: usize) -> f64 {
        if self.temperature == 0.0 {
            return 0.0;
        }
        let t = self.temperature * self.cooling.powi(k as i32 - 1);
        if t < self.temperature * 1e-3 {
            0.0
        } else {
            t
        }
    }
}

/// One iteration's record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Iteration {
    pub iteration: usize,
    /// σ of the configuration this iteration started from.
    pub stress: f64,
    /// σ / Σ_{i<j} w_ij δ_ij².
    pub normalized_stress: f64,
    pub temperature: f64,
    /// CG steps taken (0 for the Guttman transform).
    pub cg_steps: usize,
    pub compute_s: f64,
    pub comm_s: f64,
}

impl Iteration {
    /// The record a checkpoint keeps: stress, normalized stress, temperature, CG steps,
    /// compute and communication seconds.
    fn record(&self) -> [f64; 6] {
        let steps = self.cg_steps as f64;
        [
            self.stress,
            self.normalized_stress,
            self.temperature,
            steps,
            self.compute_s,
            self.comm_s,
        ]
    }

    /// The inverse of [`Iteration::record`] for iteration `k`.
    fn of_record((r, k): (&[f64], usize)) -> Iteration {
        let [stress, normalized_stress, temperature, steps, compute_s, comm_s] =
            r.try_into().expect("6 values");
        Iteration {
            iteration: k,
            stress,
            normalized_stress,
            temperature,
            cg_steps: steps as usize,
            compute_s,
            comm_s,
        }
    }
}

/// The result, the same on every worker.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub n: usize,
    pub dim: usize,
    /// N×D, row-major.
    pub coords: Vec<f64>,
    pub iterations: Vec<Iteration>,
    /// σ and normalized σ of the final coordinates.
    pub final_stress: (f64, f64),
    /// Rows of each worker.
    pub rows: Vec<u64>,
    pub load_s: f64,
    pub solver: Solver,
    /// The iteration of the checkpoint this run resumed from.
    pub resumed_from: Option<usize>,
}

/// The rows `first..first + rows` of B(X)·X into `out` (rows×D), with δ̂ = max(δ − shift, 0),
/// and for each row Σ_{j≠i} w_ij (δ_ij − d_ij)² and Σ_{j≠i} w_ij δ_ij² into `stress`
/// (2 values per row). A row's value depends only on the row, X and δ: the sums over j run in
/// a fixed order ([`LANES`] interleaved partial sums, added in lane order), whatever the split
/// of rows among workers or threads.
#[allow(clippy::too_many_arguments)]
pub fn b_times_x(
    delta: &[f64],
    weights: Option<&[f64]>,
    x: &[f64],
    n: usize,
    dim: usize,
    first: usize,
    shift: f64,
    out: &mut [f64],
    stress: &mut [f64],
) {
    // X column by column (D×N), so that the loop over j reads each coordinate contiguously.
    let mut cols = vec![0.0; n * dim];
    for (j, xj) in x.chunks_exact(dim).enumerate() {
        for k in 0..dim {
            cols[k * n + j] = xj[k];
        }
    }
    let rows = out.len() / dim;
    debug_assert_eq!(rows * 2, stress.len());
    out.par_chunks_mut(dim)
        .zip(stress.par_chunks_mut(2))
        .enumerate()
        .with_min_len(8)
        .for_each(|(r, (o, st))| {
            let d_row = &delta[r * n..(r + 1) * n];
            let i = first + r;
            let v = match (dim, weights) {
                (2, None) => row::<2, false>(i, d_row, &[], &cols, n, shift, o),
                (2, Some(w)) => row::<2, true>(i, d_row, &w[r * n..][..n], &cols, n, shift, o),
                (3, None) => row::<3, false>(i, d_row, &[], &cols, n, shift, o),
                (3, Some(w)) => row::<3, true>(i, d_row, &w[r * n..][..n], &cols, n, shift, o),
                _ => row_any(
                    i,
                    d_row,
                    weights.map(|w| &w[r * n..][..n]),
                    &cols,
                    n,
                    shift,
                    o,
                ),
            };
            st.copy_from_slice(&v);
        });
}

/// Interleaved partial sums per row in [`b_times_x`] (so the loop over j vectorises).
pub const LANES: usize = 8;

/// Lanes `0..m` of the block of pairs (i, j0 + l) into the lane sums; `xi` is x_i, `col[k]`
/// coordinate k of every point. Written lane by lane over small arrays so that it vectorises.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn block<const D: usize, const WEIGHTED: bool>(
    acc: &mut [[f64; LANES]; D],
    s: &mut [f64; LANES],
    norm: &mut [f64; LANES],
    j0: usize,
    m: usize,
    xi: &[f64; D],
    col: &[&[f64]; D],
    d_row: &[f64],
    w_row: &[f64],
    shift: f64,
) {
    let mut d2 = [0.0f64; LANES];
    let mut diff = [[0.0f64; LANES]; D];
    for k in 0..D {
        let c = &col[k][j0..j0 + m];
        for l in 0..m {
            diff[k][l] = xi[k] - c[l];
            d2[l] += diff[k][l] * diff[k][l];
        }
    }
    let dr = &d_row[j0..j0 + m];
    let wr = if WEIGHTED { &w_row[j0..j0 + m] } else { dr };
    for l in 0..m {
        let d = d2[l].sqrt();
        let delta = dr[l];
        let w = if WEIGHTED { wr[l] } else { 1.0 };
        let e = delta - d;
        s[l] += w * e * e;
        norm[l] += w * delta * delta;
        let t = delta - shift;
        let t = if t > 0.0 { t } else { 0.0 };
        let c = if d > 0.0 { w * t / d } else { 0.0 };
        for k in 0..D {
            acc[k][l] += c * diff[k][l];
        }
    }
}

/// Row `i` of B·X (into `out`) with its stress terms, for D = 2 or 3. The pair j = i adds
/// nothing to B·X (d = 0) and is taken out of the sums afterwards.
#[inline(always)]
fn row_impl<const D: usize, const WEIGHTED: bool>(
    i: usize,
    d_row: &[f64],
    w_row: &[f64],
    cols: &[f64],
    n: usize,
    shift: f64,
    out: &mut [f64],
) -> [f64; 2] {
    let col: [&[f64]; D] = std::array::from_fn(|k| &cols[k * n..(k + 1) * n]);
    let xi: [f64; D] = std::array::from_fn(|k| col[k][i]);
    assert!(d_row.len() == n && (!WEIGHTED || w_row.len() == n));
    let mut acc = [[0.0; LANES]; D];
    let (mut s, mut norm) = ([0.0; LANES], [0.0; LANES]);
    let full = n / LANES * LANES;
    for j0 in (0..full).step_by(LANES) {
        block::<D, WEIGHTED>(
            &mut acc, &mut s, &mut norm, j0, LANES, &xi, &col, d_row, w_row, shift,
        );
    }
    block::<D, WEIGHTED>(
        &mut acc,
        &mut s,
        &mut norm,
        full,
        n - full,
        &xi,
        &col,
        d_row,
        w_row,
        shift,
    );
    let sum = |v: &[f64; LANES]| v.iter().fold(0.0, |s, x| s + x);
    for k in 0..D {
        out[k] = sum(&acc[k]);
    }
    let w_ii = if WEIGHTED { w_row[i] } else { 1.0 };
    let self_term = w_ii * d_row[i] * d_row[i];
    [sum(&s) - self_term, sum(&norm) - self_term]
}

/// Declares `$name`: [`row_impl`] compiled with the target features `$feat`. No FMA contraction
/// happens (Rust never fuses), and vector square roots and divisions are exactly rounded: every
/// version gives bit-identical results.
macro_rules! row_with {
    ($name:ident, $feat:literal) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
        unsafe fn $name<const D: usize, const WEIGHTED: bool>(
            i: usize,
            d_row: &[f64],
            w_row: &[f64],
            cols: &[f64],
            n: usize,
            shift: f64,
            out: &mut [f64],
        ) -> [f64; 2] {
            row_impl::<D, WEIGHTED>(i, d_row, w_row, cols, n, shift, out)
        }
    };
}
row_with!(row_avx512, "avx512f");
row_with!(row_avx2, "avx2");

/// [`row_impl`] with the widest vectors this CPU has (AVX-512, AVX2, else the baseline).
fn row<const D: usize, const WEIGHTED: bool>(
    i: usize,
    d_row: &[f64],
    w_row: &[f64],
    cols: &[f64],
    n: usize,
    shift: f64,
    out: &mut [f64],
) -> [f64; 2] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { row_avx512::<D, WEIGHTED>(i, d_row, w_row, cols, n, shift, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { row_avx2::<D, WEIGHTED>(i, d_row, w_row, cols, n, shift, out) };
        }
    }
    row_impl::<D, WEIGHTED>(i, d_row, w_row, cols, n, shift, out)
}

/// [`row`] for any dimension (one running sum per quantity, j = i skipped).
fn row_any(
    i: usize,
    d_row: &[f64],
    w_row: Option<&[f64]>,
    cols: &[f64],
    n: usize,
    shift: f64,
    out: &mut [f64],
) -> [f64; 2] {
    let dim = out.len();
    out.iter_mut().for_each(|v| *v = 0.0);
    let (mut s, mut norm) = (0.0f64, 0.0f64);
    for j in (0..n).filter(|&j| j != i) {
        let d = (0..dim)
            .map(|k| (cols[k * n + i] - cols[k * n + j]).powi(2))
            .sum::<f64>()
            .sqrt();
        let delta = d_row[j];
        let w = w_row.map_or(1.0, |w| w[j]);
        s += w * (delta - d) * (delta - d);
        norm += w * delta * delta;
        if d > 0.0 {
            let c = w * (delta - shift).max(0.0) / d;
            for k in 0..dim {
                out[k] += c * (cols[k * n + i] - cols[k * n + j]);
            }
        }
    }
    [s, norm]
}

/// The rows `first..first + rows` of V·P into `out`: (V·P)_i = Σ_{j≠i} w_ij (p_i − p_j), summed
/// over j in order. Unit weights (`None`): N·p_i − Σ_j p_j, with the sum `colsum` given.
#[allow(clippy::too_many_arguments)]
pub fn v_times(
    weights: Option<&[f64]>,
    p: &[f64],
    n: usize,
    dim: usize,
    first: usize,
    colsum: &[f64],
    out: &mut [f64],
) {
    out.par_chunks_mut(dim)
        .enumerate()
        .with_min_len(8)
        .for_each(|(r, o)| {
            let i = first + r;
            let pi = &p[i * dim..(i + 1) * dim];
            match weights {
                None => {
                    for k in 0..dim {
                        o[k] = n as f64 * pi[k] - colsum[k];
                    }
                }
                Some(w) => {
                    let w_row = &w[r * n..(r + 1) * n];
                    o.iter_mut().for_each(|v| *v = 0.0);
                    for (j, pj) in p.chunks_exact(dim).enumerate() {
                        if j != i {
                            for k in 0..dim {
                                o[k] += w_row[j] * (pi[k] - pj[k]);
                            }
                        }
                    }
                }
            }
        });
}

/// Column sums of an N×D matrix, rows in order.
pub fn column_sums(x: &[f64], dim: usize) -> Vec<f64> {
    let mut s = vec![0.0; dim];
    for row in x.chunks_exact(dim) {
        for k in 0..dim {
            s[k] += row[k];
        }
    }
    s
}

/// Moves the centroid of an N×D configuration to 0 (σ does not change).
pub fn center(x: &mut [f64], dim: usize) {
    let n = (x.len() / dim).max(1) as f64;
    let mean: Vec<f64> = column_sums(x, dim).iter().map(|s| s / n).collect();
    for row in x.chunks_exact_mut(dim) {
        for k in 0..dim {
            row[k] -= mean[k];
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The initial N×D configuration, identical on every worker: from the `init` file or uniform
/// in [0, 1) from the seed (values drawn row after row).
pub fn initial(st: &dyn Storage, o: &Options, n: usize) -> Result<Vec<f64>> {
    // The configuration, its column form, the next one and the solver's vectors.
    crate::util::memory::check_fits(
        &format!(
            "--dim {}: the {n}×{} configuration and its working copies",
            o.dim, o.dim
        ),
        (n as u128).checked_mul(o.dim as u128 * 8 * 6),
    )?;
    match &o.init {
        Some(path) => {
            let p = crate::apps::kmeans::input::read_centroids(st, path)?;
            if p.n != n || p.dim != o.dim {
                return Err(Error::config(format!(
                    "--init {path}: {} rows of {} values, expected {n} rows (the matrix is \
                     {n}×{n}) of --dim {} values",
                    p.n, p.dim, o.dim
                )));
            }
            Ok(p.data)
        }
        None => {
            let mut rng = Rng::new(o.seed);
            Ok((0..n * o.dim).map(|_| rng.next_f64()).collect())
        }
    }
}

/// Runs the local step `f` and makes every worker fail with the first failing worker's cause.
fn agreed<T>(w: &Worker, label: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match f() {
        Ok(v) => agree(w, label, Ok(())).map(|_| v),
        Err(e) => Err(agree(w, label, Err(e)).expect_err("a failure is agreed")),
    }
}

/// Collective: runs SMACOF on this worker's rows; `progress` sees every iteration.
pub fn run(w: &Worker, o: &Options, mut progress: impl FnMut(&Iteration)) -> Result<Outcome> {
    o.validate()?;
    let t0 = Instant::now();
    let kernel = Kernel::new(o.threads)?;
    // An unusable checkpoint directory fails now, not after the first iterations.
    let rec = o.recovery.open(w, "mds")?;
    let st = storage::for_path_on(&o.input, Some(w.runtime().clone()))?;
    let (rank, p) = (w.rank(), w.size());
    // Distances: N, then this worker's share; every worker learns every block's length.
    let (n, mut delta) = agreed(w, "mds-distances", || {
        let n = input::columns(&*st, &o.input, o.format)?;
        let rows = kernel.install(|| input::load_share(&*st, &o.input, o.format, n, rank, p))?;
        Ok((n, rows))
    })?;
    let counts = allgather_counts(w, "mds-rows", delta.rows as u64)?;
    let total: u64 = counts.iter().sum();
    if total != n as u64 {
        // Fewer rows: where the input ends; more: row N + 1, the first too many (text input:
        // a binary one that is not square fails in `columns`).
        let (place, what) = match total < n as u64 {
            true => (
                Some(input::end_of_input(&*st, &o.input)?),
                "the file ends there",
            ),
            false => (
                input::locate_row(&*st, &o.input, n as u64)?,
                "this row is one too many",
            ),
        };
        let (file, line) = match place {
            Some(at) => at,
            None => input::end_of_input(&*st, &o.input)?,
        };
        return Err(Error::Input {
            file,
            line,
            msg: format!(
                "{total} rows of {n} values: the distance matrix must be square (N×N); {what}"
            ),
        });
    }
    let offs = offsets(&counts);
    delta.first = offs[rank];
    let (first, rows, dim) = (delta.first, delta.rows, o.dim);
    let weights = match &o.weights {
        None => None,
        Some(path) => Some(agreed(w, "mds-weights", || {
            let sw = storage::for_path_on(path, Some(w.runtime().clone()))?;
            let last = rows > 0 && first + rows == n;
            input::load_rows(&*sw, path, o.format, n, first, rows, last)
        })?),
    };
    let mut x = agreed(w, "mds-init", || initial(&*st, o, n))?;
    center(&mut x, dim);
    let load_s = t0.elapsed().as_secs_f64();

    let solver = o.solver();
    let lens: Vec<u64> = counts.iter().map(|&c| c * dim as u64).collect();
    let mut bx = vec![0.0; rows * dim];
    let mut st_rows = vec![0.0; rows * 2];
    let mut iterations = Vec::new(); // grows as they run: --iterations has no bound
                                     // What the coordinates depend on besides the matrices; --iterations may grow on resume
                                     // (T_k does not depend on it).
    let meta = serde_json::json!({
        "app": "mds",
        "n": n,
        "dim": dim,
        "weighted": o.weights.is_some(),
        "solver": solver.name(),
        "format": o.format.name(),
        "init": o.init.is_some(),
        "seed": o.seed,
        "cg_iterations": o.cg_iterations,
        "cg_tolerance": o.cg_tolerance,
        "temperature": o.temperature,
        "cooling": o.cooling,
    });
    let start = match rec.resume(w, &meta, o.iterations)? {
        Some(r) => {
            let (done, mine) = agreed(w, "mds-resume", || restore(r, first, rows, dim))?;
            x = allgather_blocks(w, "mds-resume", &mine, &lens)?;
            iterations = done;
            iterations.len()
        }
        None => 0,
    };
    let wts = weights.as_deref();
    let mut stress_of =
        |x: &[f64], shift: f64, bx: &mut [f64], comm: &mut f64| -> Result<[f64; 2]> {
            kernel
                .install(|| b_times_x(&delta.data, wts, x, n, dim, first, shift, bx, &mut st_rows));
            let local = st_rows
                .chunks_exact(2)
                .fold([0.0, 0.0], |a, s| [a[0] + s[0], a[1] + s[1]]);
            let tc = Instant::now();
            let g = allreduce_sum(w, "mds-stress", &local)?;
            *comm += tc.elapsed().as_secs_f64();
            Ok([g[0] / 2.0, if g[1] > 0.0 { g[0] / g[1] } else { 0.0 }])
        };
    for k in start + 1..=o.iterations {
        let t_it = Instant::now();
        let mut comm = 0.0;
        let temperature = o.temperature_at(k);
        let shift = temperature * (2.0 * dim as f64).sqrt();
        let [stress, normalized] = stress_of(&x, shift, &mut bx, &mut comm)?;
        let (mine, cg_steps) = match solver {
            Solver::Guttman | Solver::Auto => {
                let s = 1.0 / n as f64;
                (bx.iter().map(|v| v * s).collect::<Vec<f64>>(), 0)
            }
            Solver::Cg => cg(w, &kernel, wts, &x, &bx, n, dim, first, &lens, o, &mut comm)?,
        };
        let tc = Instant::now();
        x = allgather_blocks(w, "mds-coords", &mine, &lens)?;
        comm += tc.elapsed().as_secs_f64();
        let it = Iteration {
            iteration: k,
            stress,
            normalized_stress: normalized,
            temperature,
            cg_steps,
            compute_s: t_it.elapsed().as_secs_f64() - comm,
            comm_s: comm,
        };
        progress(&it);
        iterations.push(it);
        let mine = &x[first * dim..(first + rows) * dim];
        rec.after_iteration(w, k, o.iterations, &meta, || {
            Ok(state(w, mine, &iterations))
        })?;
    }
    let mut comm = 0.0;
    let [fs, fnorm] = stress_of(&x, 0.0, &mut bx, &mut comm)?;
    Ok(Outcome {
        n,
        dim,
        coords: x,
        iterations,
        final_stress: (fs, fnorm),
        rows: counts,
        load_s,
        solver,
        resumed_from: (start > 0).then_some(start),
    })
}

/// This worker's state after an iteration: table `coords` (partition 0: its rows of X, f64)
/// and table `history` (partition 0: 6 f64 per iteration: stress, normalized stress,
/// temperature, CG steps, compute and communication seconds).
fn state(w: &Worker, mine: &[f64], its: &[Iteration]) -> Vec<(&'static str, Table)> {
    let mut c = Table::new(Combiner::Sum);
    c.put(0, Array::from_slice(w.pool(), mine));
    let recs: Vec<f64> = its.iter().flat_map(Iteration::record).collect();
    let mut h = Table::new(Combiner::Sum);
    h.put(0, Array::from_slice(w.pool(), &recs));
    vec![("coords", c), ("history", h)]
}

/// The iterations done and this worker's rows of X from a checkpoint's [`state`].
fn restore(
    mut r: crate::checkpoint::Restored,
    first: usize,
    rows: usize,
    dim: usize,
) -> Result<(Vec<Iteration>, Vec<f64>)> {
    let it = r.iteration;
    let (coords, history) = (r.take("coords")?, r.take("history")?);
    let (Some(c), Some(h)) = (coords.get(0), history.get(0)) else {
        return Err(Error::data(format!(
            "the checkpoint at iteration {it} does not hold MDS state"
        )));
    };
    if c.len() != rows * dim || h.len() != 6 * it {
        return Err(Error::data(format!(
            "the checkpoint at iteration {it} holds {} coordinates for rows {first}..{}, not \
             {} (the same input with the same number of workers resumes)",
            c.len(),
            first + rows,
            rows * dim
        )));
    }
    let recs = h.as_slice::<f64>()?.chunks_exact(6);
    let its = recs.zip(1..).map(Iteration::of_record).collect();
    Ok((its, c.as_slice::<f64>()?.to_vec()))
}

/// Conjugate gradients on V·Y = B·X for this worker's rows, started from Y = X. Returns the
/// worker's rows of Y and the number of steps.
#[allow(clippy::too_many_arguments)]
fn cg(
    w: &Worker,
    kernel: &Kernel,
    weights: Option<&[f64]>,
    x: &[f64],
    b: &[f64],
    n: usize,
    dim: usize,
    first: usize,
    lens: &[u64],
    o: &Options,
    comm: &mut f64,
) -> Result<(Vec<f64>, usize)> {
    let rows = b.len() / dim;
    let mut y = x[first * dim..(first + rows) * dim].to_vec();
    let mut q = vec![0.0; rows * dim];
    let sums = column_sums(x, dim);
    kernel.install(|| v_times(weights, x, n, dim, first, &sums, &mut q));
    let mut r: Vec<f64> = b.iter().zip(&q).map(|(b, q)| b - q).collect();
    let mut pdir = r.clone();
    let tc = Instant::now();
    let g = allreduce_sum(w, "mds-cg-start", &[dot(&r, &r), dot(b, b)])?;
    *comm += tc.elapsed().as_secs_f64();
    let (mut rr, bb) = (g[0], g[1]);
    let goal = o.cg_tolerance * o.cg_tolerance * bb;
    let mut steps = 0;
    while steps < o.cg_iterations && rr > goal {
        let tc = Instant::now();
        let full = allgather_blocks(w, "mds-cg-direction", &pdir, lens)?;
        *comm += tc.elapsed().as_secs_f64();
        let sums = if weights.is_none() {
            column_sums(&full, dim)
        } else {
            Vec::new()
        };
        kernel.install(|| v_times(weights, &full, n, dim, first, &sums, &mut q));
        let tc = Instant::now();
        let pq = allreduce_sum(w, "mds-cg-pq", &[dot(&pdir, &q)])?[0];
        *comm += tc.elapsed().as_secs_f64();
        if pq <= 0.0 {
            break; // the direction is in V's null space: nothing left to solve
        }
        let alpha = rr / pq;
        for ((yi, pi), (ri, qi)) in y.iter_mut().zip(&pdir).zip(r.iter_mut().zip(&q)) {
            *yi += alpha * pi;
            *ri -= alpha * qi;
        }
        let tc = Instant::now();
        let next = allreduce_sum(w, "mds-cg-rr", &[dot(&r, &r)])?[0];
        *comm += tc.elapsed().as_secs_f64();
        let beta = next / rr;
        for (pi, ri) in pdir.iter_mut().zip(&r) {
            *pi = ri + beta * *pi;
        }
        rr = next;
        steps += 1;
    }
    Ok((y, steps))
}

/// A sequential reference, written independently of the distributed code path: dense B and V
/// matrices, the Guttman transform or CG on V with the whole configuration, for testing.
/// Returns the final coordinates and the stress of each iteration's starting configuration.
pub fn reference(
    delta: &[f64],
    weights: Option<&[f64]>,
    init: &[f64],
    dim: usize,
    o: &Options,
) -> (Vec<f64>, Vec<f64>) {
    let n = init.len() / dim;
    let wt = |i: usize, j: usize| weights.map_or(1.0, |w| w[i * n + j]);
    let mut x = init.to_vec();
    center(&mut x, dim);
    let mut stresses = Vec::new();
    // V as a dense matrix.
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            if i != j {
                v[i * n + j] = -wt(i, j);
                v[i * n + i] += wt(i, j);
            }
        }
    }
    let matmul = |m: &[f64], y: &[f64]| -> Vec<f64> {
        let mut out = vec![0.0; n * dim];
        for i in 0..n {
            for j in 0..n {
                for k in 0..dim {
                    out[i * dim + k] += m[i * n + j] * y[j * dim + k];
                }
            }
        }
        out
    };
    let cg_unit = weights.is_none() && o.solver() != Solver::Cg;
    for k in 1..=o.iterations {
        let shift = o.temperature_at(k) * (2.0 * dim as f64).sqrt();
        let dist = |x: &[f64], i: usize, j: usize| {
            (0..dim)
                .map(|c| (x[i * dim + c] - x[j * dim + c]).powi(2))
                .sum::<f64>()
                .sqrt()
        };
        let mut b = vec![0.0; n * n];
        let mut stress = 0.0;
        for i in 0..n {
            for j in 0..n {
                if i == j {
                    continue;
                }
                let d = dist(&x, i, j);
                if i < j {
                    stress += wt(i, j) * (delta[i * n + j] - d).powi(2);
                }
                if d > 0.0 {
                    b[i * n + j] = -wt(i, j) * (delta[i * n + j] - shift).max(0.0) / d;
                }
            }
        }
        for i in 0..n {
            let s: f64 = (0..n).filter(|&j| j != i).map(|j| b[i * n + j]).sum();
            b[i * n + i] = -s;
        }
        stresses.push(stress);
        let rhs = matmul(&b, &x);
        if cg_unit {
            x = rhs.iter().map(|v| v / n as f64).collect();
            continue;
        }
        // Plain CG on the whole N×D block.
        let mut y = x.clone();
        let vy = matmul(&v, &y);
        let mut r: Vec<f64> = rhs.iter().zip(&vy).map(|(a, b)| a - b).collect();
        let mut p = r.clone();
        let mut rr = dot(&r, &r);
        let goal = o.cg_tolerance.powi(2) * dot(&rhs, &rhs);
        for _ in 0..o.cg_iterations {
            if rr <= goal {
                break;
            }
            let q = matmul(&v, &p);
            let pq = dot(&p, &q);
            if pq <= 0.0 {
                break;
            }
            let a = rr / pq;
            for i in 0..y.len() {
                y[i] += a * p[i];
                r[i] -= a * q[i];
            }
            let next = dot(&r, &r);
            for i in 0..p.len() {
                p[i] = r[i] + next / rr * p[i];
            }
            rr = next;
        }
        x = y;
    }
    (x, stresses)
}

/// Euclidean distances between `n` random points in `dim` dimensions (uniform in [0, 1)), with
/// multiplicative noise `1 + noise·u`, u uniform in [−1, 1), kept symmetric; the diagonal is 0.
pub fn euclidean_distances(n: usize, dim: usize, seed: u64, noise: f64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    let pts: Vec<f64> = (0..n * dim).map(|_| rng.next_f64()).collect();
    let mut d = vec![0.0; n * n];
    for i in 0..n {
        for j in i + 1..n {
            let e: f64 = (0..dim)
                .map(|k| (pts[i * dim + k] - pts[j * dim + k]).powi(2))
                .sum::<f64>()
                .sqrt();
            let v = if noise > 0.0 {
                e * (1.0 + noise * rng.uniform(-1.0, 1.0))
            } else {
                e
            };
            d[i * n + j] = v;
            d[j * n + i] = v;
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_rel(a: &[f64], b: &[f64]) -> f64 {
        let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs() / scale)
            .fold(0.0, f64::max)
    }

    /// The row kernels agree with dense B·X and V·P, whatever block of rows they compute.
    #[test]
    fn row_kernels_equal_dense_products() {
        let (n, dim) = (9, 3);
        let delta = euclidean_distances(n, 4, 5, 0.1);
        let wts: Vec<f64> = (0..n * n).map(|i| ((i * 7) % 5) as f64 * 0.5).collect();
        let wsym: Vec<f64> = (0..n * n)
            .map(|i| (wts[i] + wts[(i % n) * n + i / n]) / 2.0)
            .collect();
        let mut rng = Rng::new(3);
        let x: Vec<f64> = (0..n * dim).map(|_| rng.normal()).collect();
        for (first, rows) in [(0, n), (2, 4), (8, 1)] {
            let mut out = vec![0.0; rows * dim];
            let mut st = vec![0.0; rows * 2];
            let d = &delta[first * n..(first + rows) * n];
            let wr = &wsym[first * n..(first + rows) * n];
            b_times_x(d, Some(wr), &x, n, dim, first, 0.0, &mut out, &mut st);
            let mut vp = vec![0.0; rows * dim];
            v_times(Some(wr), &x, n, dim, first, &[], &mut vp);
            for r in 0..rows {
                let i = first + r;
                for k in 0..dim {
                    let (mut bx, mut v) = (0.0, 0.0);
                    for j in 0..n {
                        let dij = (0..dim)
                            .map(|c| (x[i * dim + c] - x[j * dim + c]).powi(2))
                            .sum::<f64>()
                            .sqrt();
                        if j != i {
                            let wij = wsym[i * n + j];
                            bx += wij * delta[i * n + j] / dij * (x[i * dim + k] - x[j * dim + k]);
                            v += wij * (x[i * dim + k] - x[j * dim + k]);
                        }
                    }
                    assert!((out[r * dim + k] - bx).abs() < 1e-12 * bx.abs().max(1.0));
                    assert!((vp[r * dim + k] - v).abs() < 1e-12 * v.abs().max(1.0));
                }
            }
        }
        // Unit weights: the closed form N·p_i − Σp equals the weighted form with w = 1.
        let ones = vec![1.0; n * n];
        let (mut a, mut b) = (vec![0.0; n * dim], vec![0.0; n * dim]);
        v_times(None, &x, n, dim, 0, &column_sums(&x, dim), &mut a);
        v_times(Some(&ones), &x, n, dim, 0, &[], &mut b);
        assert!(max_rel(&a, &b) < 1e-12);
    }

    /// The vectorised row kernel gives the same bits on every instruction set, and the general
    /// one's values to rounding, for D = 2 and 3, with and without weights and annealing, N not
    /// a multiple of the lane count, and a non-zero diagonal (ignored).
    #[test]
    fn vector_paths_are_bit_identical() {
        for (n, dim) in [(3usize, 2usize), (29, 2), (40, 3), (17, 3)] {
            let mut delta = euclidean_distances(n, 4, n as u64, 0.1);
            delta[5 % n * n + 5 % n] = 0.7;
            let wts: Vec<f64> = (0..n * n).map(|i| ((i * 7) % 5) as f64 * 0.5).collect();
            let mut rng = Rng::new(3);
            let x: Vec<f64> = (0..n * dim).map(|_| rng.normal()).collect();
            let mut cols = vec![0.0; n * dim];
            for j in 0..n {
                for k in 0..dim {
                    cols[k * n + j] = x[j * dim + k];
                }
            }
            for shift in [0.0, 0.3] {
                for i in 0..n {
                    let d_row = &delta[i * n..(i + 1) * n];
                    let w_row = &wts[i * n..(i + 1) * n];
                    let run = |path: u8, weighted: bool| {
                        let mut o = vec![0.0; dim];
                        let w: &[f64] = if weighted { w_row } else { &[] };
                        let st = match (path, dim, weighted) {
                            (0, 2, false) => {
                                row_impl::<2, false>(i, d_row, w, &cols, n, shift, &mut o)
                            }
                            (0, 2, true) => {
                                row_impl::<2, true>(i, d_row, w, &cols, n, shift, &mut o)
                            }
                            (0, 3, false) => {
                                row_impl::<3, false>(i, d_row, w, &cols, n, shift, &mut o)
                            }
                            (0, 3, true) => {
                                row_impl::<3, true>(i, d_row, w, &cols, n, shift, &mut o)
                            }
                            (1, 2, false) => row::<2, false>(i, d_row, w, &cols, n, shift, &mut o),
                            (1, 2, true) => row::<2, true>(i, d_row, w, &cols, n, shift, &mut o),
                            (1, 3, false) => row::<3, false>(i, d_row, w, &cols, n, shift, &mut o),
                            (1, 3, true) => row::<3, true>(i, d_row, w, &cols, n, shift, &mut o),
                            _ => row_any(
                                i,
                                d_row,
                                weighted.then_some(w_row),
                                &cols,
                                n,
                                shift,
                                &mut o,
                            ),
                        };
                        (o, st)
                    };
                    for weighted in [false, true] {
                        let base = run(0, weighted);
                        assert_eq!(run(1, weighted), base, "n={n} i={i}");
                        #[cfg(target_arch = "x86_64")]
                        if std::arch::is_x86_feature_detected!("avx2") {
                            let mut o = vec![0.0; dim];
                            let w: &[f64] = if weighted { w_row } else { &[] };
                            // SAFETY: AVX2 is present.
                            let st = unsafe {
                                match (dim, weighted) {
                                    (2, false) => {
                                        row_avx2::<2, false>(i, d_row, w, &cols, n, shift, &mut o)
                                    }
                                    (2, true) => {
                                        row_avx2::<2, true>(i, d_row, w, &cols, n, shift, &mut o)
                                    }
                                    (3, false) => {
                                        row_avx2::<3, false>(i, d_row, w, &cols, n, shift, &mut o)
                                    }
                                    _ => row_avx2::<3, true>(i, d_row, w, &cols, n, shift, &mut o),
                                }
                            };
                            assert_eq!((o, st), base);
                        }
                        let any = run(2, weighted);
                        assert!(max_rel(&any.0, &base.0) < 1e-12, "n={n} i={i}");
                        for q in 0..2 {
                            let tol = 1e-12 * any.1[q].abs().max(1e-300);
                            assert!((any.1[q] - base.1[q]).abs() <= tol, "n={n} i={i} {q}");
                        }
                    }
                }
            }
        }
    }

    /// SMACOF never increases the stress, and the reference's CG path with unit weights is the
    /// Guttman transform.
    #[test]
    fn stress_decreases_and_unit_cg_is_guttman() {
        let (n, dim) = (30, 2);
        let delta = euclidean_distances(n, 3, 11, 0.2);
        let init: Vec<f64> = {
            let mut r = Rng::new(2);
            (0..n * dim).map(|_| r.next_f64()).collect()
        };
        let mut o = Options::new("x");
        o.iterations = 15;
        let (g, sg) = reference(&delta, None, &init, dim, &o);
        for w in sg.windows(2) {
            assert!(w[1] <= w[0] * (1.0 + 1e-12), "{sg:?}");
        }
        assert!(sg.last().unwrap() < &(sg[0] * 0.8), "{sg:?}");
        o.solver = Solver::Cg;
        let (c, sc) = reference(&delta, None, &init, dim, &o);
        assert!(max_rel(&c, &g) < 1e-9, "{}", max_rel(&c, &g));
        assert!(max_rel(&sc, &sg) < 1e-9);
        // Weighted runs decrease their weighted stress too; annealing still ends lower.
        let wts: Vec<f64> = (0..n * n)
            .map(|i| 1.0 + ((i % n) * (i / n) % 3) as f64)
            .collect();
        let (_, sw) = reference(&delta, Some(&wts), &init, dim, &o);
        for w in sw.windows(2) {
            assert!(w[1] <= w[0] * (1.0 + 1e-9), "{sw:?}");
        }
        o.temperature = 0.05;
        o.cooling = 0.5;
        let (_, sa) = reference(&delta, Some(&wts), &init, dim, &o);
        assert!(sa.last().unwrap() < &sa[0]);
        assert_eq!(o.temperature_at(1), 0.05);
        assert_eq!(o.temperature_at(2), 0.025);
        assert_eq!(o.temperature_at(11), 0.0); // 0.05/1024 < 0.05/1000
    }
}
