//! Distributed K-means (Lloyd's algorithm) on the worker API, as in the Harp paper's
//! allreduce-style K-means: the master broadcasts the initial centroids, every worker assigns its
//! share of the points with the blocked multithreaded kernel, one allreduce combines the
//! per-centroid sums, counts and the inertia, and every worker computes the same new centroids.
//! A cluster that receives no point keeps its previous centroid, or takes half of the largest
//! cluster ([`EmptyCluster`]). With a tolerance the loop stops early ([`StopReason`]).

use std::time::Instant;

use super::input::{self, ByteRange, Format, Matrix, Points};
use super::kernel::Kernel;
use super::pruned;
use super::real::{dist2, Real};
use super::yinyang;
use crate::checkpoint::Checkpoints;
use crate::collective::AllreduceAlgorithm;
use crate::data::{Array, Combiner, DType, Table};
use crate::error::{Error, Result};
use crate::storage;
use crate::util::Rng;
use crate::worker::Worker;
use crate::Collectives;
use crate::Opts;

named_enum!(
    /// Arithmetic of the points, the centroids and the distances. Per-cluster sums are always
    /// accumulated in f64.
    Precision, "precision", {
        /// f32 points and centroids (f32 input is kept as is; text is parsed to f32).
        F32 => "f32",
        /// f64 everywhere (the default; matches the sequential reference to rounding).
        #[default]
        F64 => "f64",
    }
);

named_enum!(
    /// How points are assigned to their nearest centroid.
    AssignPath, "assignment path", {
        /// Chosen from the shape (see [`choose_assign`]).
        #[default]
        Auto => "auto",
        /// Blocked GEMM over all centroids (best for high dimension).
        Gemm => "gemm",
        /// Exact pruned search (best for low dimension and many centroids).
        Pruned => "pruned",
        /// Exact bound-based assignment, Yinyang K-means (any dimension; skips the distances
        /// the triangle inequality rules out).
        Yinyang => "yinyang",
        /// Yinyang with a single group, i.e. Hamerly's algorithm: one upper and one lower bound
        /// per point (low memory; for low and moderate dimension).
        Hamerly => "hamerly",
    }
);

named_enum!(
    /// Where the initial centroids come from.
    InitMethod, "initialisation method", {
        /// Read from [`Options::init`] (the default).
        #[default]
        File => "file",
        /// k-means++ seeding, reproducible from [`Options::seed`].
        KmeansPlusPlus => "kmeans++" | "k-means++" | "kmeanspp",
        /// K points drawn at random, reproducible from [`Options::seed`].
        Random => "random",
    }
);

named_enum!(
    /// What happens to a centroid that receives no point in an iteration.
    EmptyCluster, "empty-cluster rule", {
        /// It keeps its previous position (the default).
        #[default]
        Keep => "keep",
        /// It takes over half of the largest cluster (see [`update_centroids`]).
        SplitLargest => "split-largest" | "split",
    }
);

/// Resolves [`AssignPath::Auto`] for `k` centroids of dimension `dim` in `precision` and
/// `assignments` assignments still to compute (iterations left, plus one for `--labels`); other
/// values are returned as they are.
///
/// The cost model: the GEMM path costs about `n·k·d` multiply-adds per iteration whatever the
/// data, and runs at a fraction of the machine's peak when `d` is small (the GEMM micro-kernels
/// are starved below ~16 dimensions); the pruned path costs a tree search per point, about
/// `n·(log2 k + a few leaves)·d`, which stays small while `d` is low enough for the KD-tree's
/// boxes to prune. Pruned wins by a wide margin for `d ≤ 8` once `k ≥ 64`.
///
/// The bound-based paths compute every distance in their first assignment and those their
/// bounds cannot rule out afterwards, through a blocked GEMM of their own plus exact checks;
/// for f64 data that GEMM runs in f32 (twice the rate) with intervals that the exact checks
/// settle, so even a first assignment costs less than the f64 GEMM path's (0.71× at d = 512,
/// k = 1000; 0.8–0.85× at d = 16…32 with k·d ≥ 8192). Below 128 centroids they cannot gather the
/// points that fail into GEMM blocks, and below k·d = 8192 multiply-adds per point the bounds'
/// upkeep costs more than the distances it saves (1.2–1.3× at d = 10, k = 128). So, in f64:
/// yinyang (`k/10` groups) for `d ≥ 256` and `k ≥ 128`, hamerly (one bound per point, the
/// cheapest to keep) for `d < 256`, `k ≥ 128` and `k·d ≥ 8192`. In f32 the bounds' GEMM has no
/// faster type to fall to: a first assignment costs about 1.3× the GEMM path's (whose fused
/// AVX-512 search the blocked GEMM does not have), and hamerly's early iterations more than
/// gemm's, so f32 takes yinyang only for `d ≥ 256`, `k ≥ 256` and at least three assignments
/// (over two they tie), and never hamerly. Figures: docs/kmeans.md.
pub fn choose_assign(
    requested: AssignPath,
    precision: Precision,
    dim: usize,
    k: usize,
    assignments: usize,
) -> AssignPath {
    let f64_ = precision == Precision::F64;
    match requested {
        AssignPath::Auto if dim <= 8 && k >= 64 => AssignPath::Pruned,
        AssignPath::Auto if f64_ && dim >= 256 && k >= 128 => AssignPath::Yinyang,
        AssignPath::Auto if f64_ && k >= 128 && k * dim >= 8192 => AssignPath::Hamerly,
        AssignPath::Auto if dim >= 256 && k >= 256 && assignments >= 3 => AssignPath::Yinyang,
        AssignPath::Auto => AssignPath::Gemm,
        other => other,
    }
}

/// Why the iteration loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// All [`Options::iterations`] ran.
    Iterations,
    /// The relative inertia decrease fell to [`Options::tolerance`] or below.
    Tolerance,
    /// No centroid moved in the last update (only checked with a tolerance).
    Converged,
}

impl StopReason {
    /// "iterations", "tolerance" or "converged".
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Iterations => "iterations",
            StopReason::Tolerance => "tolerance",
            StopReason::Converged => "converged",
        }
    }
}

/// Options of [`run`]. Build with [`Options::new`] and set fields: new fields get defaults that
/// keep the previous behaviour (the struct is `non_exhaustive`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Points: a file or a directory of files, divided across the workers (unless `splits`).
    pub input: String,
    /// Initial centroids file (text, one per line) for [`InitMethod::File`].
    pub init: String,
    /// Maximum number of iterations.
    pub iterations: usize,
    /// Compute threads per worker.
    pub threads: usize,
    pub format: Format,
    /// Leading text columns to ignore.
    pub skip_columns: usize,
    pub allreduce: AllreduceAlgorithm,
    /// f32 or f64 arithmetic (default f64).
    pub precision: Precision,
    /// Assignment path (default auto).
    pub assign: AssignPath,
    /// Stop once an iteration lowers the inertia by at most this fraction of the previous
    /// iteration's inertia, or when no centroid moves (default: run all iterations).
    pub tolerance: Option<f64>,
    /// This worker's own input splits, overriding the division of `input` across workers.
    pub splits: Option<Vec<ByteRange>>,
    /// Where the initial centroids come from (default: the `init` file).
    pub init_method: InitMethod,
    /// Number of centroids for the kmeans++ and random initialisations.
    pub k: Option<usize>,
    /// Seed of the kmeans++ and random initialisations.
    pub seed: u64,
    /// Empty-cluster rule (default keep).
    pub empty_cluster: EmptyCluster,
    /// Dimension of the points when there is no centroids file (needed for `f32` input; text
    /// input gives it on its first line).
    pub dim: Option<usize>,
    /// Directory for per-point labels (each worker writes `part-RRRRR`, one label per line, in
    /// input order); none by default.
    pub labels: Option<String>,
    /// Save a checkpoint of the state (centroids and per-iteration figures) every this many
    /// iterations, and after the last one; 0 (the default): never.
    pub checkpoint_every: usize,
    /// Directory of the checkpoints (needed with `checkpoint_every` or `resume`).
    pub checkpoint_dir: Option<String>,
    /// Continue from the newest complete checkpoint in `checkpoint_dir` (from the start when
    /// there is none). Without it, a run that saves checkpoints removes the old ones first.
    pub resume: bool,
    /// The job's name: recorded in checkpoint manifests, and names the temporary directory of
    /// the labels (`labels/_temporary/JOB`). Every worker must use the same.
    pub job: String,
}

impl Options {
    /// Options with defaults: 10 iterations, 1 thread, text input, automatic allreduce, f64,
    /// automatic assignment path, no tolerance, centroids from the `init` file.
    pub fn new(input: impl Into<String>, init: impl Into<String>) -> Options {
        Options {
            input: input.into(),
            init: init.into(),
            iterations: crate::config::apps::KMEANS.default_of("iterations"),
            threads: crate::config::apps::KMEANS.default_of("threads"),
            format: crate::config::apps::KMEANS.default_of("format"),
            skip_columns: crate::config::apps::KMEANS.default_of("skip_columns"),
            allreduce: AllreduceAlgorithm::Auto,
            precision: crate::config::apps::KMEANS.default_of("precision"),
            assign: crate::config::apps::KMEANS.default_of("assign"),
            tolerance: None,
            splits: None,
            init_method: InitMethod::File,
            k: None,
            seed: crate::config::apps::KMEANS.default_of("seed"),
            empty_cluster: crate::config::apps::KMEANS.default_of("empty_cluster"),
            dim: None,
            labels: None,
            checkpoint_every: crate::config::apps::KMEANS.default_of("checkpoint_every"),
            checkpoint_dir: None,
            resume: false,
            job: "harp".to_string(),
        }
    }

    /// Rejects values that cannot work, naming the option.
    pub fn validate(&self) -> Result<()> {
        if self.iterations == 0 {
            return Err(Error::config("iterations must be at least 1"));
        }
        if let Some(t) = self.tolerance {
            if !(t.is_finite() && t >= 0.0) {
                return Err(Error::config(format!(
                    "tolerance must be a finite number >= 0, not {t}"
                )));
            }
        }
        if self.init_method != InitMethod::File && self.k.unwrap_or(0) == 0 {
            return Err(Error::config(format!(
                "initialisation '{}' needs k >= 1",
                self.init_method
            )));
        }
        if self.dim == Some(0) {
            return Err(Error::config("dim must be at least 1"));
        }
        if !self.init.is_empty() && self.init_method != InitMethod::File {
            return Err(Error::config(format!(
                "a centroids file (init) and initialisation '{}' exclude each other",
                self.init_method
            )));
        }
        if self.init_method == InitMethod::File && self.k.is_some() {
            return Err(Error::config(
                "k is only for initialisation kmeans++ or random (with a centroids file, k is \
                 its number of rows)",
            ));
        }
        if (self.checkpoint_every > 0 || self.resume) && self.checkpoint_dir.is_none() {
            return Err(Error::config(
                "checkpoints (checkpoint_every, resume) need a checkpoint directory",
            ));
        }
        if self.job.is_empty() || self.job.contains(['/', '\\']) || self.job.starts_with('.') {
            return Err(Error::config(format!(
                "the job name '{}' cannot name a directory",
                self.job
            )));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Iteration {
    pub iteration: usize,
    /// Sum of squared distances of every point to its nearest centroid (before the update).
    pub inertia: f64,
    pub compute_s: f64,
    pub comm_s: f64,
    /// The pool's allocation counter after this iteration (flat in the steady state).
    pub pool_allocations: u64,
    /// The share of the n·k point–centroid distances computed, over all workers (1 on the
    /// gemm path; none on the pruned path and for iterations loaded from a checkpoint).
    pub distances: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub centroids: Points,
    pub points: u64,
    pub iterations: Vec<Iteration>,
    pub load_s: f64,
    pub stop_reason: StopReason,
    /// The assignment path used (auto resolved).
    pub assign: AssignPath,
    /// The iteration of the checkpoint this run resumed from (its earlier iterations are in
    /// `iterations` too), if any.
    pub resumed_from: Option<usize>,
}

/// Runs K-means; every worker returns the same centroids. `progress` sees every iteration.
///
/// The returned centroids are those of the computed precision, as f64 (with
/// [`Precision::F32`], every value is an f32 widened exactly).
pub fn run(w: &Worker, o: &Options, mut progress: impl FnMut(&Iteration)) -> Result<Outcome> {
    o.validate()?;
    let pool = w.pool();
    // Initial centroids from a file: read by the master, broadcast to all (shape in
    // partition 1). Otherwise they are chosen from the points once they are loaded.
    let (k, dim, centroids) = if o.init_method == InitMethod::File {
        let mut init = Table::new(Combiner::Reject);
        let read = read_on_master(w, "kmeans-init-read", || {
            let st = storage::for_path_on(&o.init, Some(w.runtime().clone()))?;
            input::read_centroids(&*st, &o.init)
        })?;
        if let Some(c) = read {
            init.put(0, Array::from_slice(pool, &c.data));
            init.put(1, Array::from_slice(pool, &[c.n as i64, c.dim as i64]));
        }
        w.broadcast("kmeans-init", &mut init, Opts::default())?;
        let shape = init
            .get(1)
            .ok_or_else(|| Error::Protocol("initial centroids did not arrive".into()))?
            .as_slice::<i64>()?
            .to_vec();
        let centroids = init.get(0).expect("centroids").as_slice::<f64>()?.to_vec();
        let (k, dim) = (shape[0] as usize, shape[1] as usize);
        if let Some(d) = o.dim.filter(|&d| d != dim) {
            return Err(Error::config(format!(
                "dim = {d}, but the centroids file {} has {dim} values per row",
                o.init
            )));
        }
        (k, dim, Some(centroids))
    } else {
        let k = o
            .k
            .ok_or_else(|| Error::config(format!("initialisation '{}' needs k", o.init_method)))?;
        (k, points_dim(w, o)?, None)
    };
    match o.precision {
        Precision::F64 => run_as::<f64>(w, o, k, dim, centroids, &mut progress),
        Precision::F32 => run_as::<f32>(w, o, k, dim, centroids, &mut progress),
    }
}

/// `read` on the master only (`None` on the others), its outcome agreed: a failure reaches
/// every worker with its cause, where the others would wait for the master's broadcast until
/// the timeout.
fn read_on_master<T>(
    w: &Worker,
    label: &str,
    read: impl FnOnce() -> Result<T>,
) -> Result<Option<T>> {
    let (value, outcome) = match w.is_master() {
        false => (None, Ok(())),
        true => match read() {
            Ok(v) => (Some(v), Ok(())),
            Err(e) => (None, Err(e)),
        },
    };
    crate::worker::agree(w, label, outcome)?;
    Ok(value)
}

/// The dimension of the points when no centroids file gives it: [`Options::dim`], or for text
/// the number of values on the first non-blank line (read by the master and broadcast).
fn points_dim(w: &Worker, o: &Options) -> Result<usize> {
    if let Some(d) = o.dim {
        return Ok(d);
    }
    if o.format != Format::Text {
        return Err(Error::config(format!(
            "the dimension of {} input must be given (--dim; the Java option dim) when there is no \
             centroids file",
            o.format
        )));
    }
    let mut t = Table::new(Combiner::Reject);
    let read = read_on_master(w, "kmeans-dim-read", || {
        let path = match &o.splits {
            Some(s) if !s.is_empty() => s[0].path.clone(),
            _ => o.input.clone(),
        };
        let st = storage::for_path_on(&path, Some(w.runtime().clone()))?;
        input::text_dim(&*st, &path, o.skip_columns)
    })?;
    if let Some(d) = read {
        t.put(0, Array::from_slice(w.pool(), &[d as i64]));
    }
    w.broadcast("kmeans-dim", &mut t, Opts::default())?;
    let d = t
        .get(0)
        .ok_or_else(|| Error::Protocol("the dimension did not arrive".into()))?
        .as_slice::<i64>()?[0];
    Ok(d as usize)
}

/// `m` distinct indices of `0..n` in random order (partial Fisher–Yates on an implicit
/// permutation), from `seed`.
pub fn sample_indices(n: u64, m: usize, seed: u64) -> Vec<u64> {
    let m = (m as u64).min(n);
    let mut rng = Rng::new(seed);
    let mut swapped: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(m as usize);
    for i in 0..m {
        let j = i + rng.next_u64() % (n - i);
        let vj = *swapped.get(&j).unwrap_or(&j);
        let vi = *swapped.get(&i).unwrap_or(&i);
        swapped.insert(j, vi);
        out.push(vj);
    }
    out
}

/// k-means++ seeding (Arthur & Vassilvitskii) over `sample` (`m` rows of `dim`): the first
/// centre uniformly, each next one with probability proportional to the squared distance to the
/// nearest centre chosen so far. Deterministic for a seed. Fewer distinct points than `k`: the
/// remaining centres repeat chosen ones (they stay empty clusters).
pub fn kmeans_pp(sample: &[f64], dim: usize, k: usize, seed: u64) -> Vec<f64> {
    let m = sample.len() / dim;
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(k * dim);
    let first = (rng.next_u64() % m as u64) as usize;
    out.extend_from_slice(&sample[first * dim..(first + 1) * dim]);
    let mut d2: Vec<f64> = sample
        .chunks_exact(dim)
        .map(|x| dist2(x, &out[..dim]))
        .collect();
    for _ in 1..k {
        let total: f64 = d2.iter().sum();
        let pick = if total > 0.0 {
            let target = rng.next_f64() * total;
            let mut acc = 0.0;
            let mut at = m - 1;
            for (i, &d) in d2.iter().enumerate() {
                acc += d;
                if acc > target && d > 0.0 {
                    at = i;
                    break;
                }
            }
            at
        } else {
            (rng.next_u64() % m as u64) as usize
        };
        let c = sample[pick * dim..(pick + 1) * dim].to_vec();
        for (x, d) in sample.chunks_exact(dim).zip(d2.iter_mut()) {
            let v = dist2(x, &c);
            if v < *d {
                *d = v;
            }
        }
        out.extend_from_slice(&c);
    }
    out
}

/// Chooses the initial centroids from the points ([`InitMethod::Random`] or
/// [`InitMethod::KmeansPlusPlus`]). Points are numbered globally in input order (rank order of
/// the shares or splits), a sample of global indices is drawn from the seed, and the workers
/// owning them fill their rows of one table combined by allreduce — so the result depends on the
/// seed and the input, not on the number of workers or threads. Random takes `k` sampled points;
/// k-means++ runs on a sample of `min(n, 4k)` points.
fn initial_centroids<T: Real>(
    w: &Worker,
    o: &Options,
    points: &Matrix<T>,
    offset: u64,
    n_total: u64,
    k: usize,
) -> Result<Vec<f64>> {
    let dim = points.dim;
    let m = match o.init_method {
        InitMethod::Random => k,
        _ => k.saturating_mul(4),
    };
    let idx = sample_indices(n_total, m, o.seed ^ 0x1e17);
    let mut acc = Array::zeros(w.pool(), DType::F64, idx.len() * dim);
    {
        let v = acc.as_mut_slice::<f64>()?;
        for (r, &g) in idx.iter().enumerate() {
            if g >= offset && g < offset + points.n as u64 {
                let row = points.row((g - offset) as usize);
                for (d, x) in v[r * dim..(r + 1) * dim].iter_mut().zip(row) {
                    *d = x.to_f64();
                }
            }
        }
    }
    let mut t = Table::new(Combiner::Sum);
    t.put(0, acc);
    w.allreduce(
        "kmeans-sample",
        &mut t,
        Opts::default().algorithm(o.allreduce),
    )?;
    let sample = t.get(0).expect("sample").as_slice::<f64>()?;
    let mut c = match o.init_method {
        InitMethod::Random => sample.to_vec(),
        _ => kmeans_pp(sample, dim, k, o.seed),
    };
    // Fewer points than k: repeat the sample (the extra centroids start as duplicates).
    let have = c.len() / dim;
    for j in have..k {
        let src = (j % have) * dim;
        c.extend_from_within(src..src + dim);
    }
    Ok(c)
}

/// Loads this worker's points as `T`: its explicit splits, or its share of the input.
fn load_points<T: Real>(w: &Worker, o: &Options, dim: usize) -> Result<Matrix<T>> {
    match &o.splits {
        Some(splits) => {
            let path = splits.first().map_or(o.input.as_str(), |s| s.path.as_str());
            input::load_splits_as(
                &*storage::for_path_on(path, Some(w.runtime().clone()))?,
                splits,
                o.format,
                o.skip_columns,
                dim,
            )
        }
        None => input::load_share_as(
            &*storage::for_path_on(&o.input, Some(w.runtime().clone()))?,
            &o.input,
            o.format,
            o.skip_columns,
            dim,
            w.rank(),
            w.size(),
        ),
    }
}

/// Rounds every value to `T` (and back to f64): the centroids of a run in precision `T`.
fn round_to<T: Real>(v: &mut [f64]) {
    for x in v {
        *x = T::from_f64(*x).to_f64();
    }
}

/// The iteration loop in precision `T`.
fn run_as<T: Real>(
    w: &Worker,
    o: &Options,
    k: usize,
    dim: usize,
    centroids: Option<Vec<f64>>,
    progress: &mut dyn FnMut(&Iteration),
) -> Result<Outcome> {
    let pool = w.pool();
    // Fail on an unusable checkpoint or labels directory now, not after the iterations.
    let ck = match &o.checkpoint_dir {
        Some(d) => Some(Checkpoints::new(d, Some(w.runtime().clone()))?),
        None => None,
    };
    let ready = (|| -> Result<()> {
        if let (Some(ck), true) = (&ck, w.is_master()) {
            if o.checkpoint_every > 0 {
                ck.check_writable()?;
                // A fresh run that saves checkpoints must never leave another run's newer ones
                // for a later resume to pick up.
                if !o.resume {
                    ck.clear()?;
                }
            }
        }
        if let Some(dir) = &o.labels {
            let st = storage::for_path_on(dir, Some(w.runtime().clone()))?;
            st.create_dir_all(&labels_staging(dir, &o.job))?;
        }
        // The centroids, each thread's sums and the k-means++ sample (4k rows): refused here,
        // on every worker at once, rather than as an allocation that aborts the process.
        let rows = (k as u128) * (o.threads as u128 + 6);
        crate::util::memory::check_fits(
            &format!("k = {k} centroids of {dim} values"),
            Some(rows * dim as u128 * 8),
        )
    })();
    crate::worker::agree(w, "kmeans-paths", ready)?;
    // One checkpoint holds every worker's part: a directory per worker would leave each
    // checkpoint torn (the manifest in one, the parts spread over the others).
    if let Some(d) = &o.checkpoint_dir {
        crate::worker::same_everywhere(w, "kmeans-paths", "checkpoint_dir", d)?;
    }
    let t0 = Instant::now();
    let points: Matrix<T> = load_points(w, o, dim)?;
    let load_s = t0.elapsed().as_secs_f64();
    // Every worker's point count: the total and this worker's global offset.
    let mut total = Table::new(Combiner::Sum);
    let mut mine = vec![0i64; w.size()];
    mine[w.rank()] = points.n as i64;
    total.put(0, Array::from_slice(pool, &mine));
    w.allreduce(
        "kmeans-count",
        &mut total,
        Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
    )?;
    let counts = total.get(0).expect("count").as_slice::<i64>()?;
    let n_total: u64 = counts.iter().map(|&c| c as u64).sum();
    let offset: u64 = counts[..w.rank()].iter().map(|&c| c as u64).sum();
    drop(total);
    if n_total == 0 {
        let what = match &o.splits {
            Some(s) => {
                let mut files: Vec<&str> = s.iter().map(|r| r.path.as_str()).collect();
                files.dedup();
                match files.len() {
                    0 => "the input (no split on any worker)".to_string(),
                    _ => format!("the input splits of {}", files.join(", ")),
                }
            }
            None => o.input.clone(),
        };
        return Err(Error::config(format!("no points in {what}")));
    }
    let meta = serde_json::json!({
        "app": "kmeans",
        "k": k,
        "dim": dim,
        "points": n_total,
        "precision": o.precision.name(),
        "empty_cluster": o.empty_cluster.name(),
    });
    let resumed = match &ck {
        Some(ck) if o.resume => resume_state(w, o, ck, &meta)?,
        _ => None,
    };
    let mut its: Vec<Iteration> = Vec::with_capacity(o.iterations.min(1 << 12));
    let mut stopped = None;
    let mut start = 0;
    let mut centroids = match (resumed, centroids) {
        (Some(r), _) => {
            start = r.iteration;
            its = r.iterations;
            stopped = r.stopped;
            r.centroids
        }
        (None, Some(c)) => c,
        (None, None) => initial_centroids(w, o, &points, offset, n_total, k)?,
    };
    round_to::<T>(&mut centroids);

    let kernel = Kernel::new(o.threads)?;
    let left = if stopped.is_some() {
        0
    } else {
        o.iterations.saturating_sub(start)
    };
    let assignments = left + usize::from(o.labels.is_some());
    let path = choose_assign(o.assign, o.precision, dim, k, assignments);
    // The pruned path keeps each point's centroid between iterations (its search seed), the
    // yinyang path its centroid and bounds (rebuilt from scratch after a resume).
    let mut prev = match path {
        AssignPath::Pruned => vec![u32::MAX; points.n],
        _ => Vec::new(),
    };
    let mut bounds = match path {
        AssignPath::Yinyang => Some(yinyang::Yinyang::new(points.n, dim, k)),
        AssignPath::Hamerly => Some(yinyang::Yinyang::with_groups(points.n, dim, k, 1)),
        _ => None,
    };
    // HARP_KMEANS_FILTERS=1: one line per iteration on stderr with the share of points each
    // filter of the bound-based paths decided.
    let trace_filters = std::env::var_os("HARP_KMEANS_FILTERS").is_some_and(|v| v == "1");
    let fail_after = injected_failure(w.size())?;
    let mut stop_reason = stopped.unwrap_or(StopReason::Iterations);
    let mut ct: Vec<T> = Vec::with_capacity(k * dim);
    let first = if stopped.is_some() {
        usize::MAX
    } else {
        start + 1
    };
    for it in first..=o.iterations {
        let t0 = Instant::now();
        ct.clear();
        ct.extend(centroids.iter().map(|&v| T::from_f64(v)));
        // One partition: k·dim sums, k counts, the inertia, then the number of distances
        // computed (-1 when not counted).
        let mut acc = Array::zeros(pool, DType::F64, k * dim + k + 2);
        {
            let v = acc.as_mut_slice::<f64>()?;
            let (sums, rest) = v.split_at_mut(k * dim);
            let (counts, tail) = rest.split_at_mut(k);
            let mut distances = -1.0;
            tail[0] = match path {
                AssignPath::Pruned => {
                    pruned::assign(&kernel, &points.data, dim, &ct, k, sums, counts, &mut prev)
                }
                AssignPath::Yinyang | AssignPath::Hamerly => {
                    let b = bounds.as_mut().expect("yinyang state");
                    let inertia = b.assign(&kernel, &points.data, &ct, sums, counts);
                    distances = b.computed() as f64;
                    if trace_filters {
                        let f = b.filtered();
                        let n = points.n.max(1) as f64;
                        eprintln!(
                            "kmeans iteration {it} worker {}: {} groups, kept {:.3}, kept after \
                             exact ub {:.3}, gathered {:.3}, distances {:.4}",
                            w.rank(),
                            b.groups(),
                            f.kept as f64 / n,
                            f.kept_exact as f64 / n,
                            f.gathered as f64 / n,
                            b.share()
                        );
                    }
                    inertia
                }
                _ => {
                    distances = points.n as f64 * k as f64;
                    kernel.assign(&points.data, dim, &ct, k, sums, counts, None)
                }
            };
            tail[1] = distances;
        }
        let mut table = Table::new(Combiner::Sum);
        table.put(0, acc);
        let compute_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        w.allreduce(
            "kmeans-sums",
            &mut table,
            Opts::default().algorithm(o.allreduce),
        )?;
        let comm_s = t1.elapsed().as_secs_f64();
        let v = table.get(0).expect("sums").as_slice::<f64>()?;
        let (sums, rest) = v.split_at(k * dim);
        let before = centroids.clone();
        update_centroids(sums, &rest[..k], &mut centroids, dim, o.empty_cluster);
        round_to::<T>(&mut centroids);
        let moved = before != centroids;
        let rec = Iteration {
            iteration: it,
            inertia: rest[k],
            compute_s,
            comm_s,
            pool_allocations: pool.stats().allocations,
            // Every worker counted or none did.
            distances: (rest[k + 1] >= 0.0).then(|| rest[k + 1] / (n_total as f64 * k as f64)),
        };
        drop(table);
        // Every worker has the same sums: all stop here together, before anything is written.
        if !rec.inertia.is_finite() || centroids.iter().any(|c| !c.to_f64().is_finite()) {
            return Err(Error::data(format!(
                "iteration {it}: the inertia or a centroid is not finite ({}): the points' \
                 values are too large for {} squared distances and sums; scale the input",
                rec.inertia,
                o.precision.name()
            )));
        }
        progress(&rec);
        // Every worker sees the same inertia and centroids, so every worker stops together.
        let stop = o.tolerance.and_then(|tol| {
            if !moved {
                Some(StopReason::Converged)
            } else {
                its.last()
                    .filter(|prev| prev.inertia - rec.inertia <= tol * prev.inertia)
                    .map(|_| StopReason::Tolerance)
            }
        });
        its.push(rec);
        // With a network model, measure it anew when the collectives drift from it.
        w.recalibrate_on_drift()?;
        if let Some(ck) = &ck {
            let every = o.checkpoint_every;
            if every > 0 && (it % every == 0 || it == o.iterations || stop.is_some()) {
                save_state(w, o, ck, it, &centroids, &its, stop, &meta)?;
            }
        }
        if fail_after == Some((it, w.rank())) {
            return Err(Error::config(format!(
                "injected failure after iteration {it} ({FAIL_AFTER})"
            )));
        }
        if let Some(r) = stop {
            stop_reason = r;
            break;
        }
    }
    if let Some(dir) = &o.labels {
        // Labels of the final centroids (one more assignment step, without an update).
        ct.clear();
        ct.extend(centroids.iter().map(|&v| T::from_f64(v)));
        let (mut sums, mut counts) = (vec![0.0; k * dim], vec![0.0; k]);
        let labels = match path {
            AssignPath::Pruned => {
                pruned::assign(
                    &kernel,
                    &points.data,
                    dim,
                    &ct,
                    k,
                    &mut sums,
                    &mut counts,
                    &mut prev,
                );
                prev
            }
            AssignPath::Yinyang | AssignPath::Hamerly => {
                let mut b = bounds.expect("yinyang state");
                b.assign(&kernel, &points.data, &ct, &mut sums, &mut counts);
                b.labels().to_vec()
            }
            _ => {
                let mut l = vec![0u32; points.n];
                kernel.assign(
                    &points.data,
                    dim,
                    &ct,
                    k,
                    &mut sums,
                    &mut counts,
                    Some(&mut l),
                );
                l
            }
        };
        write_labels(w, dir, &o.job, &labels)?;
    }
    Ok(Outcome {
        centroids: Points {
            n: k,
            dim,
            data: centroids,
        },
        points: n_total,
        iterations: its,
        load_s,
        stop_reason,
        assign: path,
        resumed_from: (start > 0).then_some(start),
    })
}

/// Fault injection for recovery tests: `HARP_KMEANS_FAIL_AFTER=I[:R]` makes worker `R` (default
/// the last) fail after iteration `I` (after that iteration's checkpoint, if any).
pub const FAIL_AFTER: &str = "HARP_KMEANS_FAIL_AFTER";

fn injected_failure(workers: usize) -> Result<Option<(usize, usize)>> {
    let Ok(v) = std::env::var(FAIL_AFTER) else {
        return Ok(None);
    };
    let bad = || {
        Error::config(format!(
            "{FAIL_AFTER}: expected ITERATION[:RANK], got '{v}'"
        ))
    };
    let (it, rank) = match v.split_once(':') {
        Some((i, r)) => (i, r.parse::<usize>().map_err(|_| bad())?),
        None => (v.as_str(), workers - 1),
    };
    Ok(Some((it.parse::<usize>().map_err(|_| bad())?, rank)))
}

/// The state a resumed run continues from.
struct Resumed {
    iteration: usize,
    centroids: Vec<f64>,
    iterations: Vec<Iteration>,
    /// Set when the checkpointed run had already stopped early.
    stopped: Option<StopReason>,
}

fn stop_code(s: Option<StopReason>) -> i64 {
    match s {
        None => -1,
        Some(StopReason::Iterations) => 0,
        Some(StopReason::Tolerance) => 1,
        Some(StopReason::Converged) => 2,
    }
}

/// Saves the checkpoint after iteration `it`: table `centroids` (partition 0: k·dim f64) and
/// table `history` (partition 0: 4 f64 per iteration: inertia, compute_s, comm_s,
/// pool_allocations; partition 1: i64 `[it, stop]`, stop = -1 running, 0 iterations,
/// 1 tolerance, 2 converged). Every worker writes the same (replicated) state as its part.
#[allow(clippy::too_many_arguments)]
fn save_state(
    w: &Worker,
    o: &Options,
    ck: &Checkpoints,
    it: usize,
    centroids: &[f64],
    its: &[Iteration],
    stop: Option<StopReason>,
    meta: &serde_json::Value,
) -> Result<()> {
    let pool = w.pool();
    let mut c = Table::new(Combiner::Sum);
    c.put(0, Array::from_slice(pool, centroids));
    let mut h = Table::new(Combiner::Sum);
    let recs: Vec<f64> = its
        .iter()
        .flat_map(|r| [r.inertia, r.compute_s, r.comm_s, r.pool_allocations as f64])
        .collect();
    h.put(0, Array::from_slice(pool, &recs));
    h.put(1, Array::from_slice(pool, &[it as i64, stop_code(stop)]));
    ck.save(
        w,
        &o.job,
        it as u64,
        &[("centroids", &c), ("history", &h)],
        meta,
        2,
    )
}

/// The master finds the newest complete checkpoint, checks that it belongs to a run of the same
/// shape and options (`meta`), and broadcasts its state; `None` when there is no checkpoint.
fn resume_state(
    w: &Worker,
    o: &Options,
    ck: &Checkpoints,
    meta: &serde_json::Value,
) -> Result<Option<Resumed>> {
    let pool = w.pool();
    let mut t = Table::new(Combiner::Reject);
    if w.is_master() {
        // A failure here is broadcast, so that every worker fails with its cause at once.
        if let Err(e) = find_resume_state(w, o, ck, meta, &mut t) {
            t.clear();
            t.put(0, Array::from_slice(pool, &[-1i64, 0, -1]));
            t.put(3, Array::from_slice(pool, e.to_string().as_bytes()));
        }
    }
    w.broadcast("kmeans-resume", &mut t, Opts::default())?;
    let head = t
        .get(0)
        .ok_or_else(|| Error::Protocol("the resume state did not arrive".into()))?
        .as_slice::<i64>()?
        .to_vec();
    match head[0] {
        0 => return Ok(None),
        -1 => {
            let msg = t.get(3).map(|a| a.bytes().to_vec()).unwrap_or_default();
            return Err(Error::config(format!(
                "resume (on the master): {}",
                String::from_utf8_lossy(&msg)
            )));
        }
        _ => {}
    }
    let centroids = t.get(1).expect("centroids").as_slice::<f64>()?.to_vec();
    let recs = t.get(2).expect("history").as_slice::<f64>()?;
    let iterations = recs
        .chunks_exact(4)
        .enumerate()
        .map(|(i, r)| Iteration {
            iteration: i + 1,
            inertia: r[0],
            compute_s: r[1],
            comm_s: r[2],
            pool_allocations: r[3] as u64,
            distances: None,
        })
        .collect();
    Ok(Some(Resumed {
        iteration: head[1] as usize,
        centroids,
        iterations,
        stopped: match head[2] {
            1 => Some(StopReason::Tolerance),
            2 => Some(StopReason::Converged),
            _ => None,
        },
    }))
}

/// The master's part of [`resume_state`]: fills `t` with `[found, iteration, stop]`, the
/// centroids and the history of the newest complete checkpoint (or `[0, 0, -1]`).
fn find_resume_state(
    w: &Worker,
    o: &Options,
    ck: &Checkpoints,
    meta: &serde_json::Value,
    t: &mut Table,
) -> Result<()> {
    let pool = w.pool();
    {
        match ck.latest()? {
            None => {
                tracing::info!("no complete checkpoint in {}: starting afresh", ck.dir());
                t.put(0, Array::from_slice(pool, &[0i64, 0, -1]));
            }
            Some(m) => {
                let what = format!("checkpoint at iteration {} in {}", m.iteration, ck.dir());
                for key in ["app", "k", "dim", "points", "precision", "empty_cluster"] {
                    if m.meta.get(key) != meta.get(key) {
                        return Err(Error::config(format!(
                            "cannot resume from the {what}: its {key} is {}, this run's is {}",
                            m.meta.get(key).unwrap_or(&serde_json::Value::Null),
                            meta.get(key).unwrap_or(&serde_json::Value::Null)
                        )));
                    }
                }
                if m.iteration as usize > o.iterations {
                    return Err(Error::config(format!(
                        "cannot resume from the {what}: it is past the {} iterations asked for",
                        o.iterations
                    )));
                }
                let mut parts = ck.load_part(&m, 0, pool)?.into_iter();
                let (_, c) = parts.next().expect("centroids table");
                let (_, h) = parts.next().expect("history table");
                let state = h.get(1).map(|a| a.as_slice::<i64>()).transpose()?;
                let (c0, h0) = (c.get(0), h.get(0));
                match (c0, h0, state) {
                    (Some(c0), Some(h0), Some(&[it, stop]))
                        if it as u64 == m.iteration
                            && c0.len()
                                == meta["k"].as_u64().unwrap_or(0) as usize
                                    * meta["dim"].as_u64().unwrap_or(0) as usize
                            && h0.len() == 4 * it as usize =>
                    {
                        t.put(0, Array::from_slice(pool, &[1i64, it, stop]));
                        t.put(1, c0.duplicate(pool));
                        t.put(2, h0.duplicate(pool));
                    }
                    _ => {
                        return Err(Error::data(format!(
                            "the {what} does not hold K-means state of this shape"
                        )))
                    }
                }
                tracing::info!("resuming from the {what}");
            }
        }
    }
    Ok(())
}

/// Where the workers write their labels before the master moves them into `dir`.
fn labels_staging(dir: &str, job: &str) -> String {
    format!("{}/_temporary/{job}", dir.trim_end_matches('/'))
}

fn label_part(rank: usize) -> String {
    format!("part-{rank:05}")
}

/// Writes this worker's labels as `dir/_temporary/JOB/part-RRRRR` (rank, 5 digits), one per
/// line. [`commit_labels`] moves them into `dir` once every worker has finished.
fn write_labels(w: &Worker, dir: &str, job: &str, labels: &[u32]) -> Result<()> {
    use std::fmt::Write;
    let dir = dir.trim_end_matches('/');
    let st = storage::for_path_on(dir, Some(w.runtime().clone()))?;
    let mut text = String::with_capacity(labels.len() * 5);
    for l in labels {
        let _ = writeln!(text, "{l}");
    }
    let staging = labels_staging(dir, job);
    st.write_all(
        &format!("{staging}/{}", label_part(w.rank())),
        text.as_bytes(),
    )
}

/// Master only, and only after the job's final agreement (a collective every worker enters once
/// [`run`] has returned on it, such as `Output::finish`): removes `_SUCCESS` and the `part-*`
/// files of an earlier run from the labels directory, moves the new parts in and writes
/// `_SUCCESS`. On the other workers, or without `labels`, it does nothing.
pub fn commit_labels(w: &Worker, o: &Options) -> Result<()> {
    let Some(dir) = &o.labels else {
        return Ok(());
    };
    if !w.is_master() {
        return Ok(());
    }
    let dir = dir.trim_end_matches('/');
    let st = storage::for_path_on(dir, Some(w.runtime().clone()))?;
    crate::apps::output::commit_files(
        &*st,
        &labels_staging(dir, &o.job),
        dir,
        &(0..w.size()).map(label_part).collect::<Vec<_>>(),
        |name| name.starts_with("part-"),
    )
}

/// Relative perturbation of the split-largest rule.
const SPLIT_EPS: f64 = 1.0 / 1024.0;

/// The update step: centroid `j` becomes `sums[j] / counts[j]`; a centroid with no point follows
/// `rule`. Returns whether any centroid value changed.
///
/// [`EmptyCluster::SplitLargest`]: empty centroids are handled in index order; each takes the
/// cluster with the most points (lowest index on ties, counting halves already given away):
/// its new centre `m` becomes `m·(1+ε)` in even and `m·(1−ε)` in odd coordinates for the large
/// cluster and the opposite for the empty one (ε = 1/1024), and its count is halved.
pub fn update_centroids(
    sums: &[f64],
    counts: &[f64],
    centroids: &mut [f64],
    dim: usize,
    rule: EmptyCluster,
) -> bool {
    let k = counts.len();
    let mut moved = false;
    let mut set = |c: &mut [f64], v: f64| {
        moved |= c[0].to_bits() != v.to_bits();
        c[0] = v;
    };
    for j in 0..k {
        if counts[j] > 0.0 {
            for d in 0..dim {
                set(&mut centroids[j * dim + d..], sums[j * dim + d] / counts[j]);
            }
        }
    }
    if rule == EmptyCluster::SplitLargest && counts.contains(&0.0) {
        let mut weight = counts.to_vec();
        for j in 0..k {
            if counts[j] > 0.0 {
                continue;
            }
            let mut big = 0;
            for i in 1..k {
                if weight[i] > weight[big] {
                    big = i;
                }
            }
            if weight[big] <= 0.0 {
                break; // no point at all
            }
            weight[big] /= 2.0;
            weight[j] = weight[big];
            for d in 0..dim {
                let m = centroids[big * dim + d];
                let (up, down) = (m * (1.0 + SPLIT_EPS), m * (1.0 - SPLIT_EPS));
                let (b, e) = if d % 2 == 0 { (up, down) } else { (down, up) };
                set(&mut centroids[big * dim + d..], b);
                set(&mut centroids[j * dim + d..], e);
            }
        }
    }
    moved
}

/// Single-process reference (plain loops, no blocking, no threads): the same algorithm the
/// distributed run must reproduce.
pub fn reference(points: &Points, init: &Points, iterations: usize) -> Points {
    reference_with(points, init, iterations, EmptyCluster::Keep)
}

/// [`reference`] with an empty-cluster rule.
pub fn reference_with(
    points: &Points,
    init: &Points,
    iterations: usize,
    rule: EmptyCluster,
) -> Points {
    reference_as(points, init, iterations, rule)
}

/// [`reference_with`] in precision `T`: centroids are rounded to `T` after every update, exact
/// distances and sums are computed in f64.
pub fn reference_as<T: Real>(
    points: &Matrix<T>,
    init: &Points,
    iterations: usize,
    rule: EmptyCluster,
) -> Points {
    let (k, dim) = (init.n, init.dim);
    let mut c = init.data.clone();
    round_to::<T>(&mut c);
    for _ in 0..iterations {
        let mut sums = vec![0.0; k * dim];
        let mut counts = vec![0.0; k];
        let ct: Vec<T> = c.iter().map(|&v| T::from_f64(v)).collect();
        super::kernel::assign_naive(&points.data, dim, &ct, k, 1, &mut sums, &mut counts);
        update_centroids(&sums, &counts, &mut c, dim, rule);
        round_to::<T>(&mut c);
    }
    Points { n: k, dim, data: c }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `o` on two in-process workers over `points` (a text file in a fresh directory),
    /// returning each worker's error, and how long the slower took.
    fn fails_on_two(tag: &str, points: &str, o: impl Fn(&str) -> Options) -> (Vec<String>, f64) {
        let dir = std::env::temp_dir().join(format!("harp-km-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("points.txt"), points).unwrap();
        let d = dir.to_str().unwrap().to_string();
        let cfg = crate::Config {
            op_timeout: std::time::Duration::from_secs(20),
            ..crate::Config::default()
        };
        let workers = Worker::in_process(2, cfg).unwrap();
        // Every worker's options before any starts: making them may write files the workers
        // read (a second write while the first worker reads would race).
        let opts: Vec<Options> = workers.iter().map(|_| o(&d)).collect();
        let t0 = Instant::now();
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = workers
                .into_iter()
                .zip(opts)
                .map(|(w, o)| {
                    s.spawn(move || {
                        let e = run(&w, &o, |_| {}).unwrap_err().to_string();
                        w.close();
                        e
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let _ = std::fs::remove_dir_all(&dir);
        (errs, t0.elapsed().as_secs_f64())
    }

    #[test]
    fn bad_initial_centroids_and_sizes_fail_every_worker_at_once() {
        let pts = "1 2\n3 4\n5 6\n7 8\n";
        // A centroids file the master cannot read: the other worker learns why, not a timeout.
        let (errs, secs) = fails_on_two("noinit", pts, |d| {
            Options::new(format!("{d}/points.txt"), format!("{d}/missing.txt"))
        });
        assert!(secs < 10.0, "{errs:?}");
        assert!(errs[0].contains("missing.txt"), "{}", errs[0]);
        assert!(
            errs[1].contains("worker 0 failed:") && errs[1].contains("missing.txt"),
            "{}",
            errs[1]
        );
        // A dim that contradicts the file.
        let (errs, _) = fails_on_two("dim", pts, |d| {
            std::fs::write(format!("{d}/c.txt"), "1 2\n5 6\n").unwrap();
            let mut o = Options::new(format!("{d}/points.txt"), format!("{d}/c.txt"));
            o.dim = Some(7);
            o
        });
        for e in &errs {
            assert!(e.contains("dim = 7, but the centroids file"), "{e}");
        }
        // A k no host has memory for, chosen by k-means++: refused on both, not an abort.
        let (errs, secs) = fails_on_two("hugek", pts, |d| {
            let mut o = Options::new(format!("{d}/points.txt"), "");
            o.init_method = InitMethod::KmeansPlusPlus;
            o.k = Some(1_000_000_000_000_000);
            o
        });
        assert!(secs < 10.0, "{errs:?}");
        for e in &errs {
            assert!(
                e.contains("k = 1000000000000000 centroids of 2 values"),
                "{e}"
            );
        }
    }

    #[test]
    fn checkpoint_directories_that_differ_between_workers_are_refused() {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let (errs, _) = fails_on_two("ckdirs", "1 2\n3 4\n", |d| {
            let r = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut o = Options::new(format!("{d}/points.txt"), "");
            o.init_method = InitMethod::Random;
            o.k = Some(1);
            o.checkpoint_every = 1;
            o.checkpoint_dir = Some(format!("{d}/ck{r}"));
            o
        });
        for e in &errs {
            assert!(
                e.contains("checkpoint_dir differs between workers (rank 1's"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_centroids_file_excludes_k_and_other_initialisations() {
        let mut o = Options::new("in", "c.txt");
        o.k = Some(3);
        assert!(o
            .validate()
            .unwrap_err()
            .to_string()
            .contains("k is only for"));
        o.k = None;
        o.init_method = InitMethod::KmeansPlusPlus;
        o.k = Some(3);
        let e = o.validate().unwrap_err().to_string();
        assert!(e.contains("exclude each other"), "{e}");
    }

    #[test]
    fn option_values_parse_and_name_themselves() {
        for p in [Precision::F32, Precision::F64] {
            assert_eq!(p.name().parse::<Precision>().unwrap(), p);
        }
        for a in [
            AssignPath::Auto,
            AssignPath::Gemm,
            AssignPath::Pruned,
            AssignPath::Yinyang,
            AssignPath::Hamerly,
        ] {
            assert_eq!(a.name().parse::<AssignPath>().unwrap(), a);
        }
        for m in [
            InitMethod::File,
            InitMethod::KmeansPlusPlus,
            InitMethod::Random,
        ] {
            assert_eq!(m.name().parse::<InitMethod>().unwrap(), m);
        }
        for r in [EmptyCluster::Keep, EmptyCluster::SplitLargest] {
            assert_eq!(r.name().parse::<EmptyCluster>().unwrap(), r);
        }
        let e = "f16".parse::<Precision>().unwrap_err().to_string();
        assert!(e.contains("'f16'") && e.contains("f32"), "{e}");
        let e = "fast".parse::<AssignPath>().unwrap_err().to_string();
        assert!(e.contains("'fast'") && e.contains("pruned"), "{e}");
        let o = Options::new("in", "init.txt");
        assert_eq!(
            (o.precision, o.assign, o.tolerance),
            (Precision::F64, AssignPath::Auto, None)
        );
        let mut bad = o.clone();
        bad.tolerance = Some(-1.0);
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("tolerance"));
        let mut bad = o;
        bad.iterations = 0;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn auto_assignment_choice() {
        // precisions, requested, d, k, assignments left: expected.
        let cases = "
            f32 f64, auto 3 10000 10: pruned | f32 f64, auto 8 64 10: pruned
            f32 f64, auto 8 63 10: gemm | f32 f64, auto 9 127 10: gemm
            f32 f64, auto 512 127 10: gemm | f32 f64, auto 512 1000 10: yinyang
            f32 f64, auto 256 256 10: yinyang | f32 f64, gemm 2 5000 10: gemm
            f32 f64, pruned 512 2 10: pruned | f32 f64, yinyang 2 3 10: yinyang
            f32 f64, yinyang 512 1000 1: yinyang | f32 f64, hamerly 32 256 1: hamerly
            f32, auto 9 10000 10: gemm | f32, auto 32 256 100: gemm
            f32, auto 255 1000 10: gemm | f32, auto 512 255 10: gemm
            f32, auto 512 1000 1: gemm | f32, auto 512 1000 2: gemm
            f32, auto 512 1000 3: yinyang
            f64, auto 9 10000 10: hamerly | f64, auto 32 256 1: hamerly
            f64, auto 255 1000 10: hamerly | f64, auto 512 128 1: yinyang
            f64, auto 256 1000 1: yinyang | f64, auto 64 100 10: gemm
            f64, auto 10 128 10: gemm | f64, auto 16 511 10: gemm
            f64, auto 16 512 10: hamerly";
        // f32: yinyang's first assignment is repaid over three, not fewer. f64: the bound-based
        // paths' GEMM runs in f32, so they win from the first assignment once k ≥ 128 and
        // k·d ≥ 8192.
        let mut checked = 0;
        for case in cases.split(['|', '\n']).filter(|c| !c.trim().is_empty()) {
            let (precisions, rest) = case.split_once(',').unwrap();
            let (args, want) = rest.split_once(':').unwrap();
            let args: Vec<&str> = args.split_whitespace().collect();
            let a: AssignPath = args[0].parse().unwrap();
            let [d, k, n] = [1, 2, 3].map(|i| args[i].parse::<usize>().unwrap());
            let want: AssignPath = want.trim().parse().unwrap();
            for p in precisions.split_whitespace() {
                let p: Precision = p.parse().unwrap();
                assert_eq!(choose_assign(a, p, d, k, n), want, "{case}");
                checked += 1;
            }
        }
        assert_eq!(checked, 40);
    }

    #[test]
    fn empty_cluster_rules() {
        let dim = 2;
        // Centroid 1 and 3 get no point; cluster 2 is the largest, then 0.
        let counts = [2.0, 0.0, 4.0, 0.0];
        let sums = [2.0, 4.0, 0.0, 0.0, 8.0, -4.0, 0.0, 0.0];
        let init = [9.0, 9.0, 7.0, 7.0, 9.0, 9.0, 5.0, 5.0];
        let mut keep = init;
        assert!(update_centroids(
            &sums,
            &counts,
            &mut keep,
            dim,
            EmptyCluster::Keep
        ));
        assert_eq!(keep, [1.0, 2.0, 7.0, 7.0, 2.0, -1.0, 5.0, 5.0]);
        let mut split = init;
        update_centroids(&sums, &counts, &mut split, dim, EmptyCluster::SplitLargest);
        let e = SPLIT_EPS;
        // 1 splits cluster 2 (weight 4 → 2, 2); 3 then splits cluster 0 (2 ≥ 2, lowest index).
        assert_eq!(&split[2..4], &[2.0 * (1.0 - e), -(1.0 + e)]);
        assert_eq!(&split[6..8], &[1.0 - e, 2.0 * (1.0 + e)]);
        assert_eq!(&split[0..2], &[1.0 + e, 2.0 * (1.0 - e)]);
        // Cluster 2 was split first, then its half-weight tied with cluster 0 and lost.
        assert_eq!(&split[4..6], &[2.0 * (1.0 + e), -(1.0 - e)]);
        // Nothing moves when every centroid already is its mean.
        let mut same = [1.0, 2.0, 2.0, -1.0];
        assert!(!update_centroids(
            &[2.0, 4.0, 8.0, -4.0],
            &[2.0, 4.0],
            &mut same,
            dim,
            EmptyCluster::SplitLargest
        ));
    }
}
