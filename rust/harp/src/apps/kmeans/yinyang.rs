//! Yinyang K-means (Ding et al., ICML 2015): the exact assignment for any dimension that skips
//! the distances the triangle inequality proves useless.
//!
//! **State.** The centroids are cut into `t ≈ k/10` groups by a few Lloyd iterations over the
//! centroids themselves (once, at the first assignment). Each point keeps its centroid `a`, an
//! upper bound `ub ≥ ‖x − c_a‖` and one lower bound per group, `lb[g] ≤ ‖x − c_j‖` for every
//! centroid `j ≠ a` of group `g`: `n × (t + 1)` f64 and `n` u32 in all.
//!
//! **First assignment** (and whenever the state is empty, e.g. after a resume): a blocked GEMM
//! gives every `‖x‖² − 2x·c + ‖c‖²`; with `e` a rigorous bound of that expression's rounding
//! error, each value gives an interval around the true squared distance. The centroids whose
//! lower end is not above the smallest upper end are every possible nearest centroid; their
//! distances are computed exactly and decide (a single one needs no check). A group's bound is
//! the lowest lower end (or exact distance) of its other members. For f64 data that GEMM runs
//! in f32 wherever the values round safely (twice the rate; the wider intervals only mean a few
//! more exact checks), else in f64.
//!
//! **Later assignments.** With `δ_j` the distance centroid `j` moved and `Δ_g` the largest in
//! group `g`: `ub += δ_a`, `lb[g] −= Δ_g`. If `min_g lb[g] > ub`, the point keeps its centroid
//! without computing a distance (global filter). Otherwise `ub` is made exact and, for each
//! group whose bound does not exceed the best distance found (group filter), each member `j` whose
//! `lb_old[g] − δ_j` does not exceed it either (local filter) has its distance computed. A point
//! whose candidate groups hold many centroids is gathered instead: blocks of such points go
//! through the first assignment's blocked GEMM, which recomputes their bounds ([`gather_at`]).
//!
//! **Exactness.** Every decision compares [`dist2_fast`] values (f64, on the exact f64 values of
//! the points and centroids), lowest index on equal values. A centroid is skipped only when its
//! lower bound exceeds the best distance by a relative margin of 1e-9, far above the rounding of
//! the computed distances (≈ d·1e-16 relative) and of the bound updates (which are rounded
//! outwards). So the answer is the minimum computed distance, lowest index on ties, as if every
//! distance had been computed.
//!
//! Work is split into the kernel's fixed chunks and each chunk's sums are built as the GEMM path
//! builds them ([`Partial::add_point`], chunk order), so results do not depend on the thread
//! count and are bitwise those of the GEMM path for the same assignments.

use rayon::prelude::*;

use super::kernel::{Isa, Kernel, Partial, BLOCK_CENTROIDS, BLOCK_POINTS, CHUNK_POINTS};
use super::real::{dist2_fast, Real};

/// Relative margin by which a lower bound must exceed the best distance to skip a centroid.
const MARGIN: f64 = 1e-9;
/// Relative outward rounding of the bound updates.
const ROUND: f64 = 1e-12;
/// Lloyd iterations that form the groups.
const GROUP_ITERATIONS: usize = 5;

/// The number of groups for `k` centroids: about k/10 (one group below 20 centroids).
pub fn groups_for(k: usize) -> usize {
    (k / 10).max(1)
}

/// Assignment state of one worker's points across iterations.
pub struct Yinyang {
    dim: usize,
    k: usize,
    /// The number of groups asked for (fewer when some would be empty).
    want: usize,
    /// Group of each centroid.
    group_of: Vec<u32>,
    /// Members of group g: `members[starts[g]..starts[g + 1]]`, ascending.
    starts: Vec<usize>,
    members: Vec<u32>,
    /// The centroids (as f64) of the last assignment; empty before the first.
    last: Vec<f64>,
    labels: Vec<u32>,
    ub: Vec<f64>,
    /// `t` lower bounds per point.
    lb: Vec<f64>,
    /// Distances computed in the last assignment.
    computed: u64,
    /// What the filters of the last assignment decided.
    filtered: Filtered,
}

/// Points of one assignment by what decided them (the rest: distances one by one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filtered {
    /// Kept their centroid by the global filter, no distance computed.
    pub kept: u64,
    /// Kept their centroid by the global filter once `ub` was made exact (one distance).
    pub kept_exact: u64,
    /// Sent to a gathered block (see [`gather_at`]).
    pub gathered: u64,
}

impl Filtered {
    fn add(&mut self, o: Filtered) {
        self.kept += o.kept;
        self.kept_exact += o.kept_exact;
        self.gathered += o.gathered;
    }
}

/// Per-iteration data shared by every chunk.
struct Step<'a, T> {
    dim: usize,
    k: usize,
    t: usize,
    centroids: &'a [T],
    group_of: &'a [u32],
    starts: &'a [usize],
    members: &'a [u32],
    /// Drift of each centroid (rounded up), and the largest of each group.
    drift: &'a [f64],
    group_drift: &'a [f64],
    /// The blocked GEMM in `T`, and in f32 when `T` is f64 and the centroids' values allow it
    /// (see [`narrow`]).
    wide: Gemm<'a, T>,
    narrow: Option<Gemm<'a, f32>>,
    /// The group of each row of the GEMM's centroids.
    col_group: &'a [usize],
    /// The largest `‖c‖²` (f64).
    cmax2: f64,
    /// Points per GEMM block: the block's products with all `k` centroids are kept.
    mb: usize,
    /// A point that fails the filters goes to a blocked GEMM when the groups it must examine
    /// hold at least this many centroids (see [`gather_at`]).
    gather_at: usize,
}

/// The operands of the blocked GEMM ([`full_block`]) in the type `G` it computes in.
struct Gemm<'a, G> {
    /// The centroids in group order (row `p` is centroid `members[p]`).
    perm: &'a [G],
    /// Per row of `perm`: `‖c‖²·(1 − e)` and `‖c‖²·(1 + e)`.
    lo_off: &'a [G],
    hi_off: &'a [G],
    /// The relative rounding bound `e` of the distances computed in `G` (see [`rounding_bound`]).
    e: f64,
}

/// The largest magnitude of a value whose f32 rounding the f32 GEMM of f64 data accepts; values
/// between 0 and [`NARROW_MIN`] in magnitude send their block to the f64 GEMM.
const NARROW_MAX: f64 = (1u64 << 40) as f64;
const NARROW_MIN: f64 = 1.0 / NARROW_MAX;

/// True if every value is 0 or of a magnitude in `[NARROW_MIN, NARROW_MAX]`: rounded to f32 it
/// is then within a relative half-ulp of itself (no overflow, no subnormal), and products and
/// sums of d ≤ 2^20 such squares stay far inside f32's range.
#[inline(always)]
fn narrow_ok<T: Real>(v: &[T]) -> bool {
    v.iter().fold(true, |ok, &x| {
        let a = x.to_f64().abs();
        ok & ((NARROW_MIN..=NARROW_MAX).contains(&a) | (a == 0.0))
    })
}

/// One chunk's mutable state.
struct Job<'a, T> {
    pts: &'a [T],
    labels: &'a mut [u32],
    ub: &'a mut [f64],
    lb: &'a mut [f64],
}

impl Yinyang {
    /// An empty state for `n` points of dimension `dim` and `k` centroids (the first
    /// [`Yinyang::assign`] computes every distance).
    pub fn new(n: usize, dim: usize, k: usize) -> Yinyang {
        Yinyang::with_groups(n, dim, k, groups_for(k))
    }

    /// As [`Yinyang::new`] with `groups` groups (at most `k`; 1 is Hamerly's algorithm: one
    /// lower bound per point, on its second-nearest centroid).
    pub fn with_groups(n: usize, dim: usize, k: usize, groups: usize) -> Yinyang {
        assert!(
            dim > 0 && k > 0,
            "dim ({dim}) and k ({k}) must be at least 1"
        );
        Yinyang {
            dim,
            k,
            want: groups.clamp(1, k),
            group_of: Vec::new(),
            starts: Vec::new(),
            members: Vec::new(),
            last: Vec::new(),
            labels: vec![0; n],
            ub: Vec::new(),
            lb: Vec::new(),
            computed: 0,
            filtered: Filtered::default(),
        }
    }

    /// Each point's centroid after the last assignment.
    pub fn labels(&self) -> &[u32] {
        &self.labels
    }

    /// Number of groups (0 before the first assignment).
    pub fn groups(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// The number of point–centroid distances the last assignment computed.
    pub fn computed(&self) -> u64 {
        self.computed
    }

    /// What the filters of the last assignment decided (all zero in a first assignment).
    pub fn filtered(&self) -> Filtered {
        self.filtered
    }

    /// The share of the `n·k` point–centroid distances the last assignment computed (the first
    /// one computes all of them plus a few exact checks, so slightly more than 1).
    pub fn share(&self) -> f64 {
        let all = self.labels.len() as f64 * self.k as f64;
        if all == 0.0 {
            0.0
        } else {
            self.computed as f64 / all
        }
    }

    /// Assigns every point to its nearest centroid (minimum [`dist2_fast`], lowest index on
    /// ties) and accumulates sums, counts and the inertia as [`Kernel::assign`] does.
    ///
    /// # Panics
    /// If the shapes do not match those given to [`Yinyang::new`].
    pub fn assign<T: Real>(
        &mut self,
        kernel: &Kernel,
        points: &[T],
        centroids: &[T],
        sums: &mut [f64],
        counts: &mut [f64],
    ) -> f64 {
        let (dim, k) = (self.dim, self.k);
        super::kernel::check_shapes(points, dim, centroids, k, sums, counts);
        let n = points.len() / dim;
        assert_eq!(n, self.labels.len(), "the number of points changed");
        let c64: Vec<f64> = centroids.iter().map(|v| v.to_f64()).collect();
        let full = self.last.is_empty();
        if full && self.starts.is_empty() {
            self.form_groups(kernel, &c64);
        }
        let t = self.groups();
        if full {
            self.ub = vec![0.0; n];
            self.lb = vec![0.0; n * t];
        }
        let (drift, group_drift) = if full {
            (Vec::new(), Vec::new())
        } else {
            let drift: Vec<f64> = kernel.install(|| {
                c64.par_chunks_exact(dim)
                    .zip(self.last.par_chunks_exact(dim))
                    .map(|(a, b)| up(dist2_fast(a, b).sqrt()))
                    .collect()
            });
            let mut gd = vec![0.0f64; t];
            for (j, &d) in drift.iter().enumerate() {
                let g = self.group_of[j] as usize;
                gd[g] = gd[g].max(d);
            }
            (drift, gd)
        };
        let e = rounding_bound::<T>(dim, false);
        let mut perm = Vec::with_capacity(k * dim);
        let mut norms = vec![0.0f64; k];
        let mut col_group = vec![0usize; k];
        let mut cmax2 = 0.0f64;
        for (p, &j) in self.members.iter().enumerate() {
            let c = &centroids[j as usize * dim..(j as usize + 1) * dim];
            let cn: f64 = c.iter().map(|v| v.to_f64() * v.to_f64()).sum();
            cmax2 = if cn > cmax2 || cn.is_nan() { cn } else { cmax2 };
            norms[p] = cn;
            col_group[p] = self.group_of[j as usize] as usize;
            perm.extend_from_slice(c);
        }
        let (lo_off, hi_off) = offsets::<T>(&norms, e);
        // f64 data: the GEMM in f32 (twice the rate, half the bytes) when the centroids allow.
        let e32 = rounding_bound::<f32>(dim, true);
        let narrowed = (T::NAME == "f64" && narrow_ok(centroids)).then(|| {
            let perm32: Vec<f32> = perm.iter().map(|v| v.to_f64() as f32).collect();
            (perm32, offsets::<f32>(&norms, e32))
        });
        let step = Step {
            dim,
            k,
            t,
            centroids,
            group_of: &self.group_of,
            starts: &self.starts,
            members: &self.members,
            drift: &drift,
            group_drift: &group_drift,
            wide: Gemm {
                perm: &perm,
                lo_off: &lo_off,
                hi_off: &hi_off,
                e,
            },
            narrow: narrowed.as_ref().map(|(perm, (lo_off, hi_off))| Gemm {
                perm,
                lo_off,
                hi_off,
                e: e32,
            }),
            col_group: &col_group,
            cmax2,
            mb: block_points(k),
            gather_at: gather_at(dim, k),
        };
        let mut jobs = points
            .chunks(CHUNK_POINTS * dim)
            .zip(self.labels.chunks_mut(CHUNK_POINTS))
            .zip(self.ub.chunks_mut(CHUNK_POINTS))
            .zip(self.lb.chunks_mut(CHUNK_POINTS * t.max(1)))
            .map(|(((pts, labels), ub), lb)| Job {
                pts,
                labels,
                ub,
                lb,
            })
            .peekable();
        let wave = (kernel.threads() * 2).max(1);
        let isa = Isa::detect();
        let mut inertia = 0.0;
        let mut computed = 0u64;
        let mut filtered = Filtered::default();
        while jobs.peek().is_some() {
            let group: Vec<Job<T>> = jobs.by_ref().take(wave).collect();
            let partials: Vec<(Partial, u64, Filtered)> = kernel.install(|| {
                group
                    .into_par_iter()
                    .map(|job| chunk_for(isa, &step, job, full))
                    .collect()
            });
            for (p, c, f) in partials {
                p.add_to(sums, counts);
                inertia += p.inertia;
                computed += c;
                filtered.add(f);
            }
        }
        self.computed = computed;
        self.filtered = filtered;
        self.last = c64;
        inertia
    }

    /// Cuts the centroids into [`groups_for`]`(k)` groups: Lloyd iterations over the centroids,
    /// seeded with evenly spaced centroids; empty groups are dropped.
    fn form_groups(&mut self, kernel: &Kernel, c: &[f64]) {
        let (dim, k) = (self.dim, self.k);
        let t = self.want;
        let mut seeds: Vec<f64> = (0..t)
            .flat_map(|g| c[g * k / t * dim..(g * k / t + 1) * dim].iter().copied())
            .collect();
        let mut group_of = vec![0u32; k];
        let mut sum = vec![0.0f64; t * dim];
        let mut count = vec![0.0f64; t];
        for _ in 0..if t > 1 { GROUP_ITERATIONS } else { 0 } {
            // The GEMM path's assignment of the centroids to the seeds (any deterministic
            // partition will do; this one costs a GEMM of k × t × d).
            sum.fill(0.0);
            count.fill(0.0);
            kernel.assign(c, dim, &seeds, t, &mut sum, &mut count, Some(&mut group_of));
            for g in 0..t {
                if count[g] > 0.0 {
                    for d in 0..dim {
                        seeds[g * dim + d] = sum[g * dim + d] / count[g];
                    }
                }
            }
        }
        // Renumber the non-empty groups.
        let mut count = vec![0usize; t];
        for &g in &group_of {
            count[g as usize] += 1;
        }
        let mut renumber = vec![u32::MAX; t];
        let mut used = 0u32;
        for g in 0..t {
            if count[g] > 0 {
                renumber[g] = used;
                used += 1;
            }
        }
        for g in group_of.iter_mut() {
            *g = renumber[*g as usize];
        }
        let used = used as usize;
        let mut starts = vec![0usize; used + 1];
        for &g in &group_of {
            starts[g as usize + 1] += 1;
        }
        for g in 0..used {
            starts[g + 1] += starts[g];
        }
        let mut fill = starts.clone();
        let mut members = vec![0u32; k];
        for (j, &g) in group_of.iter().enumerate() {
            members[fill[g as usize]] = j as u32;
            fill[g as usize] += 1;
        }
        self.group_of = group_of;
        self.starts = starts;
        self.members = members;
    }
}

/// `v` rounded up by the outward margin.
#[inline(always)]
fn up(v: f64) -> f64 {
    v * (1.0 + ROUND)
}

/// `a − b` for bounds `a, b ≥ 0`, rounded down by the outward margin (never negative).
#[inline(always)]
fn down_sub(a: f64, b: f64) -> f64 {
    (a - b - (a + b) * ROUND).max(0.0)
}

/// True if a lower bound `lb` proves a centroid farther than the distance `best`.
#[inline(always)]
fn beyond(lb: f64, best: f64) -> bool {
    lb > best * (1.0 + MARGIN)
}

/// [`chunk`] compiled for the detected instruction set.
fn chunk_for<T: Real>(isa: Isa, s: &Step<T>, job: Job<T>, full: bool) -> (Partial, u64, Filtered) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<T: Real>(
            s: &Step<T>,
            job: Job<T>,
            full: bool,
        ) -> (Partial, u64, Filtered) {
            chunk(s, job, full)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<T: Real>(s: &Step<T>, job: Job<T>, full: bool) -> (Partial, u64, Filtered) {
            chunk(s, job, full)
        }
        match isa {
            // SAFETY: `Isa::detect` found the CPU features these functions enable.
            Isa::Avx512 => return unsafe { avx512(s, job, full) },
            Isa::Avx2 => return unsafe { avx2(s, job, full) },
            Isa::Generic => {}
        }
    }
    let _ = isa;
    chunk(s, job, full)
}

/// One chunk: decides every point's centroid (and bounds), then adds the points to the chunk's
/// sums in order. Returns the partial sums, the number of distances computed and what the
/// filters decided (nothing in a first assignment).
#[inline(always)]
fn chunk<T: Real>(s: &Step<T>, mut job: Job<T>, full: bool) -> (Partial, u64, Filtered) {
    let (computed, filtered) = if full {
        (chunk_full(s, &mut job), Filtered::default())
    } else {
        chunk_update(s, &mut job)
    };
    let mut part = Partial::new(s.k, s.dim);
    for (x, &j) in job.pts.chunks_exact(s.dim).zip(job.labels.iter()) {
        part.add_point(x, j as usize, s.centroids);
    }
    (part, computed, filtered)
}

/// The distance the exact decisions use.
#[inline(always)]
fn dist<T: Real>(x: &[T], centroids: &[T], j: usize) -> f64 {
    let dim = x.len();
    dist2_fast(x, &centroids[j * dim..(j + 1) * dim])
}

/// `‖x‖²` in f64 with eight independent partial sums (vectorises; a sequential sum is one
/// dependent addition per value, which at d = 512 costs as much per point as a tenth of its
/// distances). Any summation order is within `d·eps_f64` relative, which [`rounding_bound`]
/// covers.
#[inline(always)]
fn norm2<T: Real>(x: &[T]) -> f64 {
    let mut acc = [0.0f64; 8];
    let (head, tail) = x.split_at(x.len() / 8 * 8);
    for a in head.chunks_exact(8) {
        for l in 0..8 {
            let v = a[l].to_f64();
            acc[l] += v * v;
        }
    }
    let mut s = 0.0;
    for v in tail {
        s += v.to_f64() * v.to_f64();
    }
    s + acc.iter().sum::<f64>()
}

/// The relative bound `e` of the rounding error of `‖x‖² − 2x·c + ‖c‖²` computed in `G` (see
/// [`full_block`]); `rounded` when the points and centroids were rounded to `G` first (f64 data
/// through the f32 GEMM: each product then carries up to three more `eps_G` of its size).
fn rounding_bound<G: Real>(dim: usize, rounded: bool) -> f64 {
    let extra = if rounded { 4.0 } else { 0.0 };
    2.0 * ((dim as f64 + 8.0 + extra) * (G::EPSILON + f64::EPSILON))
}

/// The GEMM's offsets `‖c‖²·(1 − e)` and `‖c‖²·(1 + e)` in `G`, from the squared norms in f64.
fn offsets<G: Real>(norms: &[f64], e: f64) -> (Vec<G>, Vec<G>) {
    (
        norms.iter().map(|cn| G::from_f64(cn * (1.0 - e))).collect(),
        norms.iter().map(|cn| G::from_f64(cn * (1.0 + e))).collect(),
    )
}

/// Points per block of the blocked exact assignment: the products of a block with all `k`
/// centroids are kept (`k × mb` values), so the block shrinks as `k` grows.
fn block_points(k: usize) -> usize {
    (BLOCK_POINTS * 2048 / k.max(1)).clamp(16, BLOCK_POINTS)
}

/// The number of candidate centroids from which a point's distances are cheaper through the
/// blocked GEMM (all `k`, at the GEMM's rate) than one by one ([`dist2_fast`], `d` values each,
/// plus the local filter). At small `d` the GEMM is many times faster per distance (its
/// micro-kernel runs near peak, an exact distance pays a conversion and a reduction per pair).
/// Below 128 centroids the blocks are too narrow for the GEMM to gain: no gathering.
fn gather_at(dim: usize, k: usize) -> usize {
    if k < 128 {
        return usize::MAX;
    }
    let ratio = if dim < 128 { 8 } else { 2 };
    k.div_ceil(ratio)
}

/// Points per register tile of [`one_pass`].
const PASS_LANES: usize = 16;

/// The one-group pass of [`full_block`] over the `kb` rows of one GEMM block (`rows`, `m`
/// points per row, first row `j0`) for points `i0..i0 + L`: per point the lowest upper end
/// (`hmin`), the lowest and second lowest lower ends (`gmin`, `l2`) and the row of the lowest
/// (`i1`). The `L` points' minima stay in registers while the rows go by (one load per value,
/// instead of loads and stores of four arrays).
#[inline(always)]
fn one_pass<T: Real, const L: usize>(
    (rows, m): (&[T], usize),
    (i0, j0): (usize, usize),
    (lo_off, hi_off): (&[T], &[T]),
    (hmin, gmin, l2, i1): (&mut [T], &mut [T], &mut [T], &mut [u32]),
) {
    let mut h: [T; L] = hmin[i0..i0 + L].try_into().expect("L values");
    let mut l: [T; L] = gmin[i0..i0 + L].try_into().expect("L values");
    let mut s: [T; L] = l2[i0..i0 + L].try_into().expect("L values");
    let mut ix: [u32; L] = i1[i0..i0 + L].try_into().expect("L values");
    for (r, (&lo, &hi)) in lo_off.iter().zip(hi_off).enumerate() {
        let row: &[T; L] = rows[r * m + i0..r * m + i0 + L]
            .try_into()
            .expect("L values");
        let pi = (j0 + r) as u32;
        for q in 0..L {
            let v = row[q];
            let u = v + hi;
            h[q] = if u < h[q] { u } else { h[q] };
            let w = v + lo;
            // The second lowest is min(l2, max(l1, w)).
            let x = if w > l[q] { w } else { l[q] };
            s[q] = if x < s[q] { x } else { s[q] };
            ix[q] = if w < l[q] { pi } else { ix[q] };
            l[q] = if w < l[q] { w } else { l[q] };
        }
    }
    hmin[i0..i0 + L].copy_from_slice(&h);
    gmin[i0..i0 + L].copy_from_slice(&l);
    l2[i0..i0 + L].copy_from_slice(&s);
    i1[i0..i0 + L].copy_from_slice(&ix);
}

/// Where [`full_block`] writes each point's centroid, `ub` and `t` group bounds.
struct Out<'a> {
    labels: &'a mut [u32],
    ub: &'a mut [f64],
    lb: &'a mut [f64],
}

/// The blocked GEMM's buffers in the type `G` it computes in (allocated at first use).
struct Pass<G> {
    /// `−2 c·x`, one row of `mb` points per centroid (group order).
    g: Vec<G>,
    /// Per group, then per point: the lowest `−2 c·x + ‖c‖²(1 − e)` of the group's members.
    gmin: Vec<G>,
    /// Per point: the lowest `−2 c·x + ‖c‖²(1 + e)`.
    hmin: Vec<G>,
    /// With one group only, per point: the second lowest `−2 c·x + ‖c‖²(1 − e)`.
    l2: Vec<G>,
}

impl<G: Real> Pass<G> {
    fn new() -> Pass<G> {
        Pass {
            g: Vec::new(),
            gmin: Vec::new(),
            hmin: Vec::new(),
            l2: Vec::new(),
        }
    }

    /// Sizes the buffers for the blocks of `s`.
    fn fit<T>(&mut self, s: &Step<T>) {
        let (mb, k, t) = (s.mb, s.k, s.t);
        if self.hmin.len() < mb {
            self.g = vec![G::ZERO; k * mb];
            self.gmin = vec![G::INFINITY; t * mb];
            self.hmin = vec![G::INFINITY; mb];
            self.l2 = vec![G::INFINITY; if t == 1 { mb } else { 0 }];
        }
    }
}

/// What [`full_block`] needs beside the GEMM's buffers.
struct Common {
    /// With one group only, per point: the row of the lowest lower end.
    i1: Vec<u32>,
    /// One point's candidate groups, and its candidates (row, lower end or exact distance).
    groups: Vec<usize>,
    cands: Vec<(usize, f64)>,
}

/// Buffers of [`full_block`], reused across the blocks of a chunk.
struct Scratch<T> {
    /// The GEMM's buffers in `T`, and in f32 for f64 blocks through the f32 GEMM.
    wide: Pass<T>,
    narrow: Pass<f32>,
    /// The block rounded to f32.
    conv: Vec<f32>,
    common: Common,
    /// Gathered points (`mb × dim`), their indices in the chunk and the results.
    buf: Vec<T>,
    at: Vec<usize>,
    labels: Vec<u32>,
    ub: Vec<f64>,
    lb: Vec<f64>,
}

impl<T: Real> Scratch<T> {
    fn new(s: &Step<T>) -> Scratch<T> {
        let (mb, k, t) = (s.mb, s.k, s.t);
        Scratch {
            wide: Pass::new(),
            narrow: Pass::new(),
            conv: Vec::new(),
            common: Common {
                i1: vec![0; if t == 1 { mb } else { 0 }],
                groups: Vec::with_capacity(t),
                cands: Vec::with_capacity(k),
            },
            buf: Vec::new(),
            at: Vec::with_capacity(mb),
            labels: Vec::new(),
            ub: Vec::new(),
            lb: Vec::new(),
        }
    }
}

/// [`block_pass`] through the f32 GEMM when the step has one and the block's values allow it
/// ([`narrow_ok`]), else through the GEMM in `T`.
#[inline(always)]
fn full_block<T: Real>(s: &Step<T>, sc: &mut Scratch<T>, block: &[T], out: Out) -> u64 {
    if let Some(gm) = &s.narrow {
        if narrow_ok(block) {
            sc.conv.clear();
            sc.conv.extend(block.iter().map(|v| v.to_f64() as f32));
            sc.narrow.fit(s);
            let (pass, cm) = (&mut sc.narrow, &mut sc.common);
            return block_pass(s, gm, pass, &sc.conv, cm, block, out);
        }
    }
    sc.wide.fit(s);
    block_pass(s, &s.wide, &mut sc.wide, block, &mut sc.common, block, out)
}

/// The exact assignment of a block of at most `s.mb` points (`block`, row-major; `gblock`, the
/// same values in the GEMM's type `G`) from scratch: every distance through the GEMM, then the
/// few centroids that may be nearest exactly. Writes each point's centroid, `ub` (its exact
/// distance, or the upper end of its interval when it was the only candidate) and group bounds
/// (`lb`, `t` per point) and returns the number of distances computed.
///
/// The GEMM gives, for all centroids (in group order) × the block, `g = −2 c·x` with one row per
/// centroid. With `e` the rounding bound of [`rounding_bound`], `‖x‖² + g + ‖c‖²` is within
/// `e·(‖x‖² + ‖c‖²)` of the true squared distance (the dot product's error is at most
/// `(d + 2)·eps·Σ|x_i c_i|`, and the additions, conversions and offsets add a few `eps` of the
/// same magnitude). So `g + ‖c‖²(1 − e) + ‖x‖²(1 − e)` is a lower and
/// `g + ‖c‖²(1 + e) + ‖x‖²(1 + e)` an upper bound of it. For f64 data in f32 (`G` f32, `T` f64)
/// the values are rounded to f32 first, each within half an f32 ulp of itself ([`narrow_ok`]
/// keeps subnormals and overflow out), which moves each product by at most `1.5·eps` of its
/// size: [`rounding_bound`] adds four `eps` for it. `‖x‖²` and `‖c‖²` are taken in f64 from the
/// exact values either way.
///
/// One pass over each GEMM block, in `G` and element-wise over the points (it vectorises like
/// the GEMM path's scan), keeps per point the lowest upper end and, per group, the lowest lower
/// end (a minimum does not round, and adding `‖x‖²(1 − e)` afterwards rounds monotonically, so
/// this is the lowest of the lower ends). A group whose lowest lower end exceeds the lowest
/// upper end (by the margin) cannot hold the nearest centroid and its bound is that lower end.
/// The members of the other groups (usually one or two) are checked one by one: those whose own
/// lower end does not exceed the limit are computed exactly and decide (all in f64 on the `T`
/// values), unless there is only one: the centroid of the lowest upper end, whose lower end is
/// not above that end, is then the nearest, with that end as its `ub`. A candidate group's bound
/// is the lowest lower end or exact distance of its members other than the chosen centroid.
///
/// When `‖x‖² + ‖c‖²` may overflow `G` (f32 values near 1e19), a lower end may be NaN, which
/// proves nothing: every group of such a block is then checked member by member, and a NaN lower
/// end makes its centroid a candidate.
#[inline(always)]
fn block_pass<T: Real, G: Real>(
    s: &Step<T>,
    gm: &Gemm<G>,
    sc: &mut Pass<G>,
    gblock: &[G],
    cm: &mut Common,
    block: &[T],
    out: Out,
) -> u64 {
    let Out { labels, ub, lb } = out;
    let (dim, k, t) = (s.dim, s.k, s.t);
    let m = block.len() / dim;
    debug_assert!(m <= s.mb && labels.len() == m && ub.len() == m && lb.len() == m * t);
    debug_assert_eq!(gblock.len(), block.len());
    let e = gm.e;
    let g = &mut sc.g[..k * m];
    let hmin = &mut sc.hmin[..m];
    hmin.fill(G::INFINITY);
    let gmin = &mut sc.gmin[..t * m];
    gmin.fill(G::INFINITY);
    // One group (Hamerly): the second lowest lower end too, so that a point with a single
    // candidate is decided without looking at its k values again.
    let one = t == 1;
    let (l2, i1) = if one {
        (&mut sc.l2[..m], &mut cm.i1[..m])
    } else {
        (&mut sc.l2[..0], &mut cm.i1[..0])
    };
    l2.fill(G::INFINITY);
    let mut j0 = 0;
    while j0 < k {
        let kb = BLOCK_CENTROIDS.min(k - j0);
        let rows = &mut g[j0 * m..(j0 + kb) * m];
        let (a, bp, gp) = (
            gm.perm[j0 * dim..].as_ptr(),
            gblock.as_ptr(),
            rows.as_mut_ptr(),
        );
        let (alpha, rs, mi) = (G::from_f64(-2.0), dim as isize, m as isize);
        // SAFETY: rows j0..j0+kb of `perm` (k × dim, row-major), `block` read as its transpose
        // (dim × m: row stride 1, column stride dim) and `rows` (kb × m, row-major), all in
        // bounds.
        unsafe { G::gemm(kb, dim, m, alpha, a, rs, 1, bp, 1, rs, G::ZERO, gp, mi, 1) };
        if one {
            let lo_off = &gm.lo_off[j0..j0 + kb];
            let hi_off = &gm.hi_off[j0..j0 + kb];
            // Tiles of PASS_LANES points, then the last m mod PASS_LANES one at a time.
            let mut i0 = 0;
            while i0 < m {
                let acc = (&mut *hmin, &mut *gmin, &mut *l2, &mut *i1);
                if m - i0 >= PASS_LANES {
                    one_pass::<G, PASS_LANES>((rows, m), (i0, j0), (lo_off, hi_off), acc);
                    i0 += PASS_LANES;
                } else {
                    one_pass::<G, 1>((rows, m), (i0, j0), (lo_off, hi_off), acc);
                    i0 += 1;
                }
            }
            j0 += kb;
            continue;
        }
        for (r, row) in rows.chunks_exact(m).enumerate() {
            let p = j0 + r;
            let (lo, hi, grp) = (gm.lo_off[p], gm.hi_off[p], s.col_group[p]);
            let gm = &mut gmin[grp * m..(grp + 1) * m];
            for ((&v, h), l) in row.iter().zip(hmin.iter_mut()).zip(gm.iter_mut()) {
                let u = v + hi;
                *h = if u < *h { u } else { *h };
                let w = v + lo;
                *l = if w < *l { w } else { *l };
            }
        }
        j0 += kb;
    }
    let mut computed = (m * k) as u64;
    let (groups, cands) = (&mut cm.groups, &mut cm.cands);
    for (i, x) in block.chunks_exact(dim).enumerate() {
        let xn = norm2(x);
        let xlo = xn * (1.0 - e);
        let limit = (hmin[i].to_f64() + xn * (1.0 + e)) * (1.0 + MARGIN) + f64::MIN_POSITIVE;
        // |g| + ‖c‖² ≤ (‖x‖ + ‖c‖)² ≤ 2(‖x‖² + ‖c‖²): below a quarter of T's range, every
        // value and sum of the pass above is finite.
        let safe = 4.0 * (xn + s.cmax2) < G::MAX;
        let lbp = &mut lb[i * t..(i + 1) * t];
        if one && safe && l2[i].to_f64() + xlo > limit {
            // A single candidate: the lowest lower end's centroid, which also holds the lowest
            // upper end (that end is not above the limit either), so that end is its `ub`; the
            // bound of the others is the second lowest lower end. No exact distance.
            labels[i] = s.members[i1[i] as usize];
            let u = up(hmin[i].to_f64() + xn * (1.0 + e));
            ub[i] = if u > 0.0 { u.sqrt() } else { 0.0 };
            let v = l2[i].to_f64() + xlo;
            lbp[0] = if v > 0.0 { v.sqrt() } else { 0.0 };
            continue;
        }
        groups.clear();
        cands.clear();
        let (mut best, mut best_j, mut best_p) = (f64::INFINITY, u32::MAX, usize::MAX);
        for (grp, l) in lbp.iter_mut().enumerate() {
            let v = gmin[grp * m + i].to_f64() + xlo;
            if safe && v > limit {
                *l = v;
                continue;
            }
            groups.push(grp);
            for p in s.starts[grp]..s.starts[grp + 1] {
                let v = (g[p * m + i] + gm.lo_off[p]).to_f64() + xlo;
                if v <= limit || v.is_nan() {
                    cands.push((p, v));
                }
            }
        }
        if safe && cands.len() == 1 {
            // A single candidate: the centroid of the lowest upper end (its lower end is not
            // above that end), which is its `ub`; no exact distance (as with one group).
            best_p = cands[0].0;
            best_j = s.members[best_p];
            best = up(hmin[i].to_f64() + xn * (1.0 + e)).max(0.0);
        } else {
            for (p, v) in cands.iter_mut() {
                let j = s.members[*p];
                let d = dist(x, s.centroids, j as usize);
                computed += 1;
                *v = d;
                if d < best || (d == best && j < best_j) {
                    (best, best_j, best_p) = (d, j, *p);
                }
            }
        }
        if best_j == u32::MAX {
            // Only infinite or NaN distances (values too large for their squares): any
            // centroid; the driver refuses the infinite inertia.
            (best, best_j) = (f64::INFINITY, s.members[0]);
        }
        // A candidate group's bound: its members' lower ends, or exact distances where
        // computed, except the chosen centroid.
        let mut c = 0;
        for &grp in groups.iter() {
            let mut low = f64::INFINITY;
            for p in s.starts[grp]..s.starts[grp + 1] {
                let v = if c < cands.len() && cands[c].0 == p {
                    c += 1;
                    cands[c - 1].1
                } else {
                    (g[p * m + i] + gm.lo_off[p]).to_f64() + xlo
                };
                if p != best_p && v < low {
                    low = v;
                }
            }
            lbp[grp] = low;
        }
        // The square roots in a separate loop, which vectorises.
        for l in lbp.iter_mut() {
            *l = if *l > 0.0 { l.sqrt() } else { 0.0 };
        }
        labels[i] = best_j;
        ub[i] = best.sqrt();
    }
    computed
}

/// The first assignment: [`full_block`] over the chunk's blocks.
#[inline(always)]
fn chunk_full<T: Real>(s: &Step<T>, job: &mut Job<T>) -> u64 {
    let (dim, t, mb) = (s.dim, s.t, s.mb);
    let mut sc = Scratch::new(s);
    let mut computed = 0u64;
    for (((block, labels), ub), lb) in job
        .pts
        .chunks(mb * dim)
        .zip(job.labels.chunks_mut(mb))
        .zip(job.ub.chunks_mut(mb))
        .zip(job.lb.chunks_mut(mb * t))
    {
        computed += full_block(s, &mut sc, block, Out { labels, ub, lb });
    }
    computed
}

/// Keeps the smallest (`.0`, index `.2`) and second smallest (`.1`) of the values seen.
#[inline(always)]
fn keep_two(two: &mut (f64, f64, u32), v: f64, j: u32) {
    if v < two.0 {
        *two = (v, two.0, j);
    } else if v < two.1 {
        two.1 = v;
    }
}

/// A later assignment: bounds moved by the drift, then the group and local filters. Returns the
/// number of distances computed and what the filters decided.
#[inline(always)]
fn chunk_update<T: Real>(s: &Step<T>, job: &mut Job<T>) -> (u64, Filtered) {
    let (dim, t) = (s.dim, s.t);
    let (pts, labels, ub, lb) = (job.pts, &mut *job.labels, &mut *job.ub, &mut *job.lb);
    let mut computed = 0u64;
    let mut old = vec![0.0f64; t];
    // Per group: smallest and second smallest bound/distance of the examined members (not the
    // old centroid), and the index of the smallest.
    let mut m1 = vec![0.0f64; t];
    let mut m2 = vec![0.0f64; t];
    let mut i1 = vec![0u32; t];
    let mut examined: Vec<usize> = Vec::with_capacity(t);
    let mut sc = Scratch::new(s);
    let mut f = Filtered::default();
    for (p, x) in pts.chunks_exact(dim).enumerate() {
        let a = labels[p] as usize;
        let lbp = &mut lb[p * t..(p + 1) * t];
        old.copy_from_slice(lbp);
        let mut glob = f64::INFINITY;
        for (l, &gd) in lbp.iter_mut().zip(s.group_drift) {
            *l = down_sub(*l, gd);
            glob = glob.min(*l);
        }
        let u = up(ub[p] + s.drift[a]);
        if beyond(glob, u) {
            ub[p] = u;
            f.kept += 1;
            continue;
        }
        let da = dist(x, s.centroids, a);
        computed += 1;
        let ra = da.sqrt();
        ub[p] = ra;
        if beyond(glob, ra) {
            f.kept_exact += 1;
            continue;
        }
        // Many candidate centroids: gather the point for a blocked GEMM (which recomputes all
        // its bounds) rather than compute their distances one by one.
        let mut wide = 0;
        for (grp, &l) in lbp.iter().enumerate() {
            if !beyond(l, ra) {
                wide += s.starts[grp + 1] - s.starts[grp];
            }
        }
        if wide >= s.gather_at {
            f.gathered += 1;
            sc.at.push(p);
            if sc.at.len() == s.mb {
                computed += gather(s, &mut sc, pts, Out { labels, ub, lb });
            }
            continue;
        }
        let (mut best, mut best_j, mut rb) = (da, a as u32, ra);
        examined.clear();
        for grp in 0..t {
            if beyond(lbp[grp], rb) {
                continue;
            }
            examined.push(grp);
            let mut two = (f64::INFINITY, f64::INFINITY, u32::MAX);
            for &j in &s.members[s.starts[grp]..s.starts[grp + 1]] {
                if j as usize == a {
                    continue;
                }
                let local = down_sub(old[grp], s.drift[j as usize]);
                let r = if beyond(local, rb) {
                    local
                } else {
                    let d = dist(x, s.centroids, j as usize);
                    computed += 1;
                    if d < best || (d == best && j < best_j) {
                        (best, best_j) = (d, j);
                        rb = d.sqrt();
                    }
                    d.sqrt()
                };
                keep_two(&mut two, r, j);
            }
            (m1[grp], m2[grp], i1[grp]) = two;
        }
        for &grp in &examined {
            lbp[grp] = if i1[grp] == best_j { m2[grp] } else { m1[grp] };
        }
        if best_j as usize != a {
            // The old centroid becomes an ordinary member of its group.
            let ga = s.group_of[a] as usize;
            lbp[ga] = lbp[ga].min(ra);
            labels[p] = best_j;
            ub[p] = rb;
        }
    }
    (
        computed + gather(s, &mut sc, pts, Out { labels, ub, lb }),
        f,
    )
}

/// [`full_block`] for the gathered points `sc.at` (indices into the chunk), whose results are
/// written back to their places; empties `sc.at`.
#[inline(always)]
fn gather<T: Real>(s: &Step<T>, sc: &mut Scratch<T>, pts: &[T], out: Out) -> u64 {
    let Out { labels, ub, lb } = out;
    let (dim, t, m) = (s.dim, s.t, sc.at.len());
    if m == 0 {
        return 0;
    }
    let mut buf = std::mem::take(&mut sc.buf);
    let mut bl = std::mem::take(&mut sc.labels);
    let mut bu = std::mem::take(&mut sc.ub);
    let mut bb = std::mem::take(&mut sc.lb);
    buf.clear();
    for &p in &sc.at {
        buf.extend_from_slice(&pts[p * dim..(p + 1) * dim]);
    }
    bl.resize(m, 0);
    bu.resize(m, 0.0);
    bb.resize(m * t, 0.0);
    let into = Out {
        labels: &mut bl,
        ub: &mut bu,
        lb: &mut bb,
    };
    let computed = full_block(s, sc, &buf, into);
    for (i, &p) in sc.at.iter().enumerate() {
        labels[p] = bl[i];
        ub[p] = bu[i];
        lb[p * t..(p + 1) * t].copy_from_slice(&bb[i * t..(i + 1) * t]);
    }
    sc.at.clear();
    (sc.buf, sc.labels, sc.ub, sc.lb) = (buf, bl, bu, bb);
    computed
}

#[cfg(test)]
mod tests {
    use super::super::kernel::{assign_naive, nearest_naive};
    use super::super::pruned::tests::random;
    use super::*;

    /// Points around `clusters` centres (so that assignments settle and bounds prune).
    fn blobs(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f64> {
        let centres = random(clusters * dim, seed);
        let noise = random(n * dim, seed + 1);
        (0..n * dim)
            .map(|i| centres[(i / dim % clusters) * dim + i % dim] * 4.0 + noise[i] * 0.7)
            .collect()
    }

    /// The means of the assigned points (empty clusters keep their centroid), as T.
    fn update<T: Real>(sums: &[f64], counts: &[f64], cen: &mut [T], dim: usize) {
        for (j, &c) in counts.iter().enumerate() {
            if c > 0.0 {
                for d in 0..dim {
                    cen[j * dim + d] = T::from_f64(sums[j * dim + d] / c);
                }
            }
        }
    }

    /// Runs `iterations` Lloyd iterations with Yinyang and checks every one against the
    /// reference (labels, counts, sums, inertia) and, when `gemm`, against the GEMM path too.
    fn lloyd<T: Real>(pts: &[T], init: &[T], dim: usize, iterations: usize, gemm: bool) -> f64 {
        lloyd_with(
            pts,
            init,
            dim,
            iterations,
            gemm,
            groups_for(init.len() / dim),
            2,
        )
    }

    /// [`lloyd`] with `groups` groups and `threads` threads.
    fn lloyd_with<T: Real>(
        pts: &[T],
        init: &[T],
        dim: usize,
        iterations: usize,
        gemm: bool,
        groups: usize,
        threads: usize,
    ) -> f64 {
        let k = init.len() / dim;
        let n = pts.len() / dim;
        let kernel = Kernel::new(threads).unwrap();
        let mut yy = Yinyang::with_groups(n, dim, k, groups);
        let mut cen = init.to_vec();
        let mut shares = 0.0;
        for it in 0..iterations {
            let what = format!(
                "{} n={n} d={dim} k={k} groups={groups} iteration {it}",
                T::NAME
            );
            let (mut s1, mut c1) = (vec![0.0; k * dim], vec![0.0; k]);
            let i1 = assign_naive(pts, dim, &cen, k, 1, &mut s1, &mut c1);
            let (mut s2, mut c2) = (vec![0.0; k * dim], vec![0.0; k]);
            let i2 = yy.assign(&kernel, pts, &cen, &mut s2, &mut c2);
            for (i, &l) in yy.labels().iter().enumerate() {
                let want = nearest_naive(&pts[i * dim..(i + 1) * dim], &cen, dim).0;
                assert_eq!(l as usize, want, "{what} point {i}");
            }
            assert_eq!(c1, c2, "{what} counts");
            for (a, b) in s1.iter().zip(&s2) {
                assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "{what} sums");
            }
            assert!((i1 - i2).abs() <= 1e-9 * i1.max(1e-300), "{what} inertia");
            if gemm {
                let (mut s3, mut c3) = (vec![0.0; k * dim], vec![0.0; k]);
                let mut l3 = vec![0u32; n];
                let i3 = kernel.assign(pts, dim, &cen, k, &mut s3, &mut c3, Some(&mut l3));
                assert_eq!(yy.labels(), &l3[..], "{what} gemm labels");
                assert_eq!((&s2, &c2), (&s3, &c3), "{what} gemm sums");
                assert_eq!(i2.to_bits(), i3.to_bits(), "{what} gemm inertia");
            }
            if it > 0 {
                shares += yy.share();
            }
            update(&s2, &c2, &mut cen, dim);
        }
        shares / (iterations - 1).max(1) as f64
    }

    #[test]
    fn yinyang_equals_the_reference_and_gemm_every_iteration() {
        for &(n, dim, k, clusters) in &[
            (3000usize, 16usize, 50usize, 20usize),
            (2500, 40, 120, 30),
            (CHUNK_POINTS + 700, 9, 25, 25),
            (500, 3, 7, 3),
            (400, 64, 1, 1),
        ] {
            let pts = blobs(n, dim, clusters, (n + dim + k) as u64);
            let init: Vec<f64> = pts[..k * dim].to_vec();
            let share = lloyd(&pts, &init, dim, 12, true);
            if k >= 50 {
                assert!(share < 0.5, "n={n} d={dim} k={k}: share {share}");
            }
            let p32: Vec<f32> = pts.iter().map(|&v| v as f32).collect();
            let i32: Vec<f32> = init.iter().map(|&v| v as f32).collect();
            lloyd(&p32, &i32, dim, 6, false);
        }
        // Random data, random centroids: little structure, many iterations.
        let (dim, k) = (12, 40);
        let pts = random(2000 * dim, 3);
        lloyd(&pts, &random(k * dim, 4), dim, 25, true);
    }

    /// Random data with many centroids: most points that fail the filters have many candidate
    /// centroids and are decided in gathered blocks, which must give the same answer.
    #[test]
    fn gathered_blocks_equal_the_reference_and_gemm() {
        let (n, dim, k) = (CHUNK_POINTS + 900, 8, 200);
        let pts = random(n * dim, 31);
        let init = random(k * dim, 32);
        let kernel = Kernel::new(2).unwrap();
        let mut yy = Yinyang::new(n, dim, k);
        let mut cen = init.clone();
        let mut gathered = 0;
        for _ in 0..4 {
            let (mut s, mut c) = (vec![0.0; k * dim], vec![0.0; k]);
            yy.assign(&kernel, &pts, &cen, &mut s, &mut c);
            gathered += yy.filtered().gathered;
            update(&s, &c, &mut cen, dim);
        }
        assert!(gathered > 0, "no point was gathered");
        lloyd(&pts, &init, dim, 6, true);
        let p32: Vec<f32> = pts.iter().map(|&v| v as f32).collect();
        let i32: Vec<f32> = init.iter().map(|&v| v as f32).collect();
        lloyd(&p32, &i32, dim, 6, false);
    }

    /// Coordinates on a coarse grid, duplicated points and centroids: exact ties everywhere,
    /// and both distance forms exact, so the GEMM path's lowest-index rule must be matched.
    #[test]
    fn ties_go_to_the_lowest_index() {
        for dim in [2usize, 5, 17] {
            let k = 60;
            let grid = |v: f64| (v * 3.0).round() * 0.5;
            let mut pts: Vec<f64> = random(1500 * dim, dim as u64)
                .into_iter()
                .map(grid)
                .collect();
            let copy = pts[..dim * 50].to_vec();
            pts.extend_from_slice(&copy);
            let mut cen: Vec<f64> = random(k * dim, 9 + dim as u64)
                .into_iter()
                .map(grid)
                .collect();
            for j in (0..k).step_by(3) {
                let src = (j * 7) % k;
                for d in 0..dim {
                    cen[j * dim + d] = cen[src * dim + d];
                }
            }
            lloyd(&pts, &cen, dim, 8, true);
            let p32: Vec<f32> = pts.iter().map(|&v| v as f32).collect();
            let c32: Vec<f32> = cen.iter().map(|&v| v as f32).collect();
            lloyd(&p32, &c32, dim, 8, false);
        }
        // All centroids identical: every point goes to centroid 0.
        let cen = vec![0.25; 40 * 3];
        let pts = random(600 * 3, 5);
        lloyd(&pts, &cen, 3, 3, true);
    }

    /// f32 values whose squared norms exceed f32's range: the GEMM values overflow (infinite or
    /// NaN interval ends, which never prove a group farther), the exact f64 comparison decides.
    #[test]
    fn norms_beyond_f32_fall_back_to_exact_distances() {
        let (dim, k) = (3, 30);
        let big = |v: &f64| (1.5e19 + v * 1e18) as f32;
        let pts: Vec<f32> = random(400 * dim, 21).iter().map(big).collect();
        let cen: Vec<f32> = random(k * dim, 22).iter().map(big).collect();
        lloyd(&pts, &cen, dim, 3, false);
    }

    /// f64 data goes through the f32 GEMM where its values round to f32 safely and through the
    /// f64 GEMM elsewhere: blocks holding values near 0 or beyond 2^40, or every block when a
    /// centroid holds one. The answer is the reference's (and the f64 GEMM path's) in every case.
    #[test]
    fn f64_blocks_take_the_f32_gemm_only_where_their_values_allow() {
        assert!(narrow_ok(&[0.0f64, 1.0, -3e11, 1e-12, -0.0]));
        assert!(!narrow_ok(&[1.0f64, 1e-13]));
        assert!(!narrow_ok(&[2e12f64, 1.0]));
        assert!(!narrow_ok(&[f64::NAN]));
        assert!(!narrow_ok(&[f64::INFINITY]));
        let (n, dim, k) = (4000, 6, 150);
        let mut pts = blobs(n, dim, 25, 31);
        for (i, v) in pts.iter_mut().enumerate() {
            let p = i / dim;
            if i % 5 == 0 {
                *v = 0.0; // exact zeros are fine for the f32 GEMM
            } else if (600..700).contains(&p) {
                *v *= 1e-14; // values below 2^-40: their blocks take the f64 GEMM
            } else if (2100..2110).contains(&p) {
                *v *= 1e13; // beyond 2^40
            }
        }
        let init: Vec<f64> = pts[..k * dim].to_vec();
        for groups in [groups_for(k), 1] {
            lloyd_with(&pts, &init, dim, 4, true, groups, 2);
        }
        // A centroid value out of range: no block takes the f32 GEMM.
        let mut init2 = blobs(k, dim, 25, 33);
        init2[7] = 1e-30;
        for groups in [groups_for(k), 1] {
            lloyd_with(&pts, &init2, dim, 3, true, groups, 2);
        }
    }

    /// One group (Hamerly): the single-candidate shortcut of the blocked pass, the gathered
    /// blocks (k ≥ 128) and the member-by-member path (k < 128), against the reference and the
    /// GEMM path, in f64 and f32, on 1 and 2 threads, with exact ties.
    #[test]
    fn one_group_equals_the_reference_and_gemm() {
        for &(n, dim, k, clusters, threads) in &[
            (CHUNK_POINTS + 500, 12usize, 160usize, 40usize, 2usize),
            (3000, 32, 64, 20, 1),
            (2000, 5, 300, 300, 2),
        ] {
            let pts = blobs(n, dim, clusters, (n * 7 + k) as u64);
            let init: Vec<f64> = pts[..k * dim].to_vec();
            let share = lloyd_with(&pts, &init, dim, 10, true, 1, threads);
            assert!(share < 1.0, "n={n} d={dim} k={k}: share {share}");
            let p32: Vec<f32> = pts.iter().map(|&v| v as f32).collect();
            let i32: Vec<f32> = init.iter().map(|&v| v as f32).collect();
            lloyd_with(&p32, &i32, dim, 6, false, 1, threads);
        }
        // Grid coordinates, duplicated points and centroids: exact ties (against the reference
        // only: once the means leave the grid, the GEMM's rounding may decide a near-tie
        // differently).
        let dim = 4;
        let grid = |v: f64| (v * 3.0).round() * 0.5;
        let pts: Vec<f64> = random(1800 * dim, 41).into_iter().map(grid).collect();
        let mut cen: Vec<f64> = random(150 * dim, 42).into_iter().map(grid).collect();
        for j in (0..150).step_by(4) {
            let src = (j * 11) % 150;
            for d in 0..dim {
                cen[j * dim + d] = cen[src * dim + d];
            }
        }
        lloyd_with(&pts, &cen, dim, 8, false, 1, 2);
        lloyd_with(&pts, &cen, dim, 2, true, 1, 1);
        let p32: Vec<f32> = pts.iter().map(|&v| v as f32).collect();
        let c32: Vec<f32> = cen.iter().map(|&v| v as f32).collect();
        lloyd_with(&p32, &c32, dim, 8, false, 1, 1);
        // Norms beyond f32's range: no shortcut, every centroid checked.
        let big = |v: &f64| (1.5e19 + v * 1e18) as f32;
        let pts: Vec<f32> = random(300 * 3, 43).iter().map(big).collect();
        let cen: Vec<f32> = random(140 * 3, 44).iter().map(big).collect();
        lloyd_with(&pts, &cen, 3, 3, false, 1, 2);
    }

    #[test]
    fn groups_partition_the_centroids() {
        let kernel = Kernel::new(1).unwrap();
        for k in [1usize, 9, 10, 57, 300] {
            let c = random(k * 4, k as u64);
            let mut yy = Yinyang::new(0, 4, k);
            yy.form_groups(&kernel, &c);
            assert!(yy.groups() >= 1 && yy.groups() <= groups_for(k), "k={k}");
            let mut seen = yy.members.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..k as u32).collect::<Vec<_>>(), "k={k}");
            for g in 0..yy.groups() {
                let m = &yy.members[yy.starts[g]..yy.starts[g + 1]];
                assert!(!m.is_empty() && m.windows(2).all(|w| w[0] < w[1]), "k={k}");
                assert!(m.iter().all(|&j| yy.group_of[j as usize] as usize == g));
            }
        }
    }
}
