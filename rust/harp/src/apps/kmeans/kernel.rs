//! The K-means map step: assign every point to its nearest centroid and accumulate per-centroid
//! sums and counts, in f32 or f64 ([`Real`]).
//!
//! The kernel is blocked: `||x - c||² = ||x||² - 2 x·c + ||c||²`, where the dot products of a
//! block of points with a block of centroids come from one `matrixmultiply` call (`sgemm` or
//! `dgemm`) into a scratch buffer small enough to stay in L2 (`BLOCK_POINTS × BLOCK_CENTROIDS`
//! elements). A vectorised scan then finds each row's nearest centroid (ties → lowest index) and
//! the point is added to the f64 sums and counts of its chunk. On CPUs with AVX-512 the GEMM
//! and the scan are one loop instead (`fused.rs`): the same values (`‖c‖² − 2x·c`, ties →
//! lowest index) without writing, packing or scanning a block of distances. The inertia is the
//! exact-form `Σ (x − c)²` of every point to the centroid it was assigned, computed in f64
//! ([`dist2_fast`](super::real::dist2_fast)), so f32 runs report an inertia as accurate as f64
//! runs.
//!
//! Work is cut into fixed-size chunks of points (independent of the thread count), each chunk
//! producing its own partial sums, and the partials are added to the caller's buffers in chunk
//! order. The result is therefore bitwise identical whatever the number of threads.

use rayon::prelude::*;

use super::fused::Fused;
use super::real::{dist2, dist2_fast, Real};
use crate::error::{Error, Result};

/// Points per GEMM call (rows of the scratch matrix).
pub const BLOCK_POINTS: usize = 256;
/// Centroids per GEMM call (columns of the scratch matrix).
pub const BLOCK_CENTROIDS: usize = 512;
/// Points per parallel task; each task owns one set of partial sums.
pub const CHUNK_POINTS: usize = 16 * 1024;

/// A reusable K-means map kernel with its own pool of `threads` worker threads.
pub struct Kernel {
    pool: rayon::ThreadPool,
    threads: usize,
}

impl Kernel {
    /// A kernel running on `threads` threads (0: as many as the machine has cores).
    pub fn new(threads: usize) -> Result<Kernel> {
        crate::apps::check_threads(threads)?;
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("harp-kmeans-{i}"))
            .build()
            .map_err(|e| Error::config(format!("cannot start {threads} kernel threads: {e}")))?;
        Ok(Kernel { pool, threads })
    }

    /// Number of threads of this kernel.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` on this kernel's threads.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    /// Assigns each point (row-major, `dim` values each) to its nearest centroid (`k` rows of
    /// `dim` values; ties → lowest index), adds the point to `sums[j*dim..(j+1)*dim]` and 1 to
    /// `counts[j]` of its centroid `j`, and returns the inertia: the sum over points of the
    /// squared distance to the assigned centroid (exact form, in f64).
    ///
    /// # Panics
    /// If the slice lengths do not match `dim` and `k`, or `dim == 0` or `k == 0`.
    pub fn assign_accumulate<T: Real>(
        &self,
        points: &[T],
        dim: usize,
        centroids: &[T],
        k: usize,
        sums: &mut [f64],
        counts: &mut [f64],
    ) -> f64 {
        self.assign(points, dim, centroids, k, sums, counts, None)
    }

    /// [`Kernel::assign_accumulate`], also writing each point's centroid index to `labels`
    /// (one per point) when given.
    ///
    /// # Panics
    /// As [`Kernel::assign_accumulate`], or if `labels` does not hold one value per point.
    #[allow(clippy::too_many_arguments)]
    pub fn assign<T: Real>(
        &self,
        points: &[T],
        dim: usize,
        centroids: &[T],
        k: usize,
        sums: &mut [f64],
        counts: &mut [f64],
        labels: Option<&mut [u32]>,
    ) -> f64 {
        check_shapes(points, dim, centroids, k, sums, counts);
        let n = points.len() / dim;
        if let Some(l) = &labels {
            assert_eq!(l.len(), n, "labels must hold one value per point");
        }
        if n == 0 {
            return 0.0;
        }
        let isa = Isa::detect();
        let prep = Prepared::new(centroids, dim, k, isa);
        let mut jobs: Vec<(&[T], Option<&mut [u32]>)> = match labels {
            Some(l) => points
                .chunks(CHUNK_POINTS * dim)
                .zip(l.chunks_mut(CHUNK_POINTS))
                .map(|(p, l)| (p, Some(l)))
                .collect(),
            None => points
                .chunks(CHUNK_POINTS * dim)
                .map(|p| (p, None))
                .collect(),
        };
        // Partials are computed a wave at a time (bounded memory) and added in chunk order.
        let wave = (self.threads * 2).max(1);
        let mut inertia = 0.0;
        while !jobs.is_empty() {
            let rest = jobs.split_off(wave.min(jobs.len()));
            let group = std::mem::replace(&mut jobs, rest);
            let partials: Vec<Partial> = self.pool.install(|| {
                group
                    .into_par_iter()
                    .map(|(pts, l)| chunk_partial_for(isa, pts, dim, centroids, k, &prep, l))
                    .collect()
            });
            for p in partials {
                p.add_to(sums, counts);
                inertia += p.inertia;
            }
        }
        inertia
    }
}

/// Convenience wrapper: builds a [`Kernel`] of `threads` threads for this one call. Prefer
/// keeping a `Kernel` across iterations.
///
/// # Panics
/// As [`Kernel::assign_accumulate`], or if the threads cannot be started.
pub fn assign_accumulate<T: Real>(
    points: &[T],
    dim: usize,
    centroids: &[T],
    k: usize,
    threads: usize,
    sums: &mut [f64],
    counts: &mut [f64],
) -> f64 {
    let kernel = Kernel::new(threads).expect("starting the K-means kernel threads");
    kernel.assign_accumulate(points, dim, centroids, k, sums, counts)
}

/// The reference: exact `Σ (x - c)²` distances ([`dist2`], f64) by plain loops, one thread
/// (`threads` is accepted for signature compatibility and ignored). Ties → lowest index.
pub fn assign_naive<T: Real>(
    points: &[T],
    dim: usize,
    centroids: &[T],
    k: usize,
    _threads: usize,
    sums: &mut [f64],
    counts: &mut [f64],
) -> f64 {
    check_shapes(points, dim, centroids, k, sums, counts);
    let mut inertia = 0.0;
    for x in points.chunks_exact(dim) {
        let j = nearest_naive(x, centroids, dim).0;
        counts[j] += 1.0;
        for (s, v) in sums[j * dim..(j + 1) * dim].iter_mut().zip(x) {
            *s += v.to_f64();
        }
        inertia += dist2(x, &centroids[j * dim..(j + 1) * dim]);
    }
    inertia
}

/// The nearest centroid of `x` by exact distances ([`dist2`]), lowest index on ties, and its
/// squared distance.
pub fn nearest_naive<T: Real>(x: &[T], centroids: &[T], dim: usize) -> (usize, f64) {
    let mut best = f64::INFINITY;
    let mut best_j = 0;
    for (j, c) in centroids.chunks_exact(dim).enumerate() {
        let d = dist2(x, c);
        if d < best {
            best = d;
            best_j = j;
        }
    }
    (best_j, best)
}

pub(crate) fn check_shapes<T>(
    points: &[T],
    dim: usize,
    centroids: &[T],
    k: usize,
    sums: &[f64],
    counts: &[f64],
) {
    assert!(
        dim > 0 && k > 0,
        "dim ({dim}) and k ({k}) must be at least 1"
    );
    assert_eq!(
        points.len() % dim,
        0,
        "points length is not a multiple of dim {dim}"
    );
    assert_eq!(centroids.len(), k * dim, "centroids must hold k*dim values");
    assert_eq!(sums.len(), k * dim, "sums must hold k*dim values");
    assert_eq!(counts.len(), k, "counts must hold k values");
}

/// Partial results of one chunk of points.
pub(crate) struct Partial {
    pub(crate) sums: Vec<f64>,
    pub(crate) counts: Vec<f64>,
    pub(crate) inertia: f64,
}

impl Partial {
    pub(crate) fn new(k: usize, dim: usize) -> Partial {
        Partial {
            sums: vec![0.0; k * dim],
            counts: vec![0.0; k],
            inertia: 0.0,
        }
    }

    /// Adds this chunk's sums and counts to the caller's buffers.
    pub(crate) fn add_to(&self, sums: &mut [f64], counts: &mut [f64]) {
        for (s, v) in sums.iter_mut().zip(&self.sums) {
            *s += v;
        }
        for (c, v) in counts.iter_mut().zip(&self.counts) {
            *c += v;
        }
    }

    /// Adds point `x` (assigned to centroid `j`) to the sums and counts and its squared
    /// distance (exact form, f64) to the inertia.
    #[inline(always)]
    pub(crate) fn add_point<T: Real>(&mut self, x: &[T], j: usize, centroids: &[T]) {
        let dim = x.len();
        self.inertia += dist2_fast(x, &centroids[j * dim..(j + 1) * dim]);
        self.counts[j] += 1.0;
        for (s, a) in self.sums[j * dim..(j + 1) * dim].iter_mut().zip(x) {
            *s += a.to_f64();
        }
    }
}

/// The widest vector instruction set usable for the scan and accumulation loops (the GEMM does
/// its own detection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Generic,
}

impl Isa {
    /// True if the GEMM path uses the fused search ([`Fused`]): AVX-512.
    fn fused(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self == Isa::Avx512 {
            return true;
        }
        false
    }

    pub(crate) fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return Isa::Avx2;
            }
        }
        Isa::Generic
    }
}

/// What the GEMM path derives from the centroids once per call.
struct Prepared<T> {
    /// ‖c_j‖² in `T`.
    cnorm: Vec<T>,
    /// The centroids transposed (dim × k, row-major), so that the GEMM packs its right-hand
    /// operand from contiguous rows (empty with `fused`).
    transposed: Vec<T>,
    /// With AVX-512: the fused search ([`Fused`]) instead of the GEMM and the scan.
    fused: Option<Fused<T>>,
}

impl<T: Real> Prepared<T> {
    fn new(centroids: &[T], dim: usize, k: usize, isa: Isa) -> Prepared<T> {
        let cnorm: Vec<T> = centroids
            .chunks_exact(dim)
            .map(|c| c.iter().fold(T::ZERO, |s, &v| s + v * v))
            .collect();
        if isa.fused() {
            let fused = Some(Fused::new(centroids, &cnorm, dim, k));
            return Prepared {
                cnorm,
                transposed: Vec::new(),
                fused,
            };
        }
        let mut transposed = vec![T::ZERO; k * dim];
        for (j, c) in centroids.chunks_exact(dim).enumerate() {
            for (d, &v) in c.iter().enumerate() {
                transposed[d * k + j] = v;
            }
        }
        Prepared {
            cnorm,
            transposed,
            fused: None,
        }
    }
}

/// [`chunk_partial`] compiled for the detected instruction set (the accumulation loops and the
/// f32 → f64 conversions vectorise to the full vector width).
fn chunk_partial_for<T: Real>(
    isa: Isa,
    pts: &[T],
    dim: usize,
    centroids: &[T],
    k: usize,
    prep: &Prepared<T>,
    labels: Option<&mut [u32]>,
) -> Partial {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<T: Real>(
            pts: &[T],
            dim: usize,
            centroids: &[T],
            k: usize,
            prep: &Prepared<T>,
            labels: Option<&mut [u32]>,
        ) -> Partial {
            chunk_partial(Isa::Avx512, pts, dim, centroids, k, prep, labels)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<T: Real>(
            pts: &[T],
            dim: usize,
            centroids: &[T],
            k: usize,
            prep: &Prepared<T>,
            labels: Option<&mut [u32]>,
        ) -> Partial {
            chunk_partial(Isa::Avx2, pts, dim, centroids, k, prep, labels)
        }
        match isa {
            // SAFETY: `Isa::detect` found the CPU features these functions enable.
            Isa::Avx512 => return unsafe { avx512(pts, dim, centroids, k, prep, labels) },
            Isa::Avx2 => return unsafe { avx2(pts, dim, centroids, k, prep, labels) },
            Isa::Generic => {}
        }
    }
    chunk_partial(isa, pts, dim, centroids, k, prep, labels)
}

/// Processes one chunk of points: for each block of `BLOCK_POINTS` points, the nearest
/// centroids (the fused search, or [`gemm_scan`]), then the accumulation.
#[inline(always)]
fn chunk_partial<T: Real>(
    isa: Isa,
    pts: &[T],
    dim: usize,
    centroids: &[T],
    k: usize,
    prep: &Prepared<T>,
    mut labels: Option<&mut [u32]>,
) -> Partial {
    let mut part = Partial::new(k, dim);
    #[cfg(target_arch = "x86_64")]
    let mut sc = super::fused::FusedScratch::new();
    let mut g = match prep.fused {
        Some(_) => Vec::new(),
        None => vec![T::ZERO; BLOCK_POINTS * k.min(BLOCK_CENTROIDS)],
    };
    let mut best_v = [T::ZERO; BLOCK_POINTS];
    let mut best_i = [0u32; BLOCK_POINTS];
    for (b, block) in pts.chunks(BLOCK_POINTS * dim).enumerate() {
        let m = block.len() / dim;
        match &prep.fused {
            // SAFETY: `fused` is only built when `Isa::detect` found AVX-512F.
            #[cfg(target_arch = "x86_64")]
            Some(f) => unsafe { f.nearest(block, &mut best_i[..m], &mut sc) },
            _ => gemm_scan(
                isa,
                block,
                k,
                prep,
                &mut g,
                &mut best_v[..m],
                &mut best_i[..m],
            ),
        }
        for (x, &j) in block.chunks_exact(dim).zip(&best_i[..m]) {
            part.add_point(x, j as usize, centroids);
        }
        if let Some(l) = labels.as_deref_mut() {
            l[b * BLOCK_POINTS..b * BLOCK_POINTS + m].copy_from_slice(&best_i[..m]);
        }
    }
    part
}

/// The nearest centroid of each point of `block` (`best_i`, one per point) through blocks of
/// `BLOCK_CENTROIDS` centroids: one GEMM each into `g`, then the scan.
#[inline(always)]
fn gemm_scan<T: Real>(
    isa: Isa,
    block: &[T],
    k: usize,
    prep: &Prepared<T>,
    g: &mut [T],
    best_v: &mut [T],
    best_i: &mut [u32],
) {
    let m = best_i.len();
    let dim = block.len() / m;
    let kb_max = k.min(BLOCK_CENTROIDS);
    let mut j0 = 0;
    while j0 < k {
        let kb = kb_max.min(k - j0);
        // g[i][j] = -2 x_i · c_(j0+j)
        // SAFETY: the pointers and strides describe `block` (m × dim, row-major), columns
        // j0..j0+kb of the transposed centroids (dim × k, row-major) and `g` (m × kb,
        // row-major), all in bounds.
        unsafe {
            T::gemm(
                m,
                dim,
                kb,
                T::from_f64(-2.0),
                block.as_ptr(),
                dim as isize,
                1,
                prep.transposed[j0..].as_ptr(),
                k as isize,
                1,
                T::ZERO,
                g.as_mut_ptr(),
                kb as isize,
                1,
            );
        }
        scan(
            isa,
            &g[..m * kb],
            kb,
            &prep.cnorm[j0..j0 + kb],
            j0,
            j0 == 0,
            best_v,
            best_i,
        );
        j0 += kb;
    }
}

/// Independent minimum accumulators in the first scan (hides the latency of `min`).
const ACCS: usize = 4;

/// For each row `i` of `g` (width `kb`), finds `min_j g[i][j] + cnorm[j]` (lowest `j` on ties)
/// and, if it beats `best_v[i]` (or `first`), stores it with index `j0 + j` in
/// `best_v`/`best_i`.
///
/// Two passes per row, both written so that they vectorise (`LANES` elements per vector): the
/// minimum value (order does not matter for an exact minimum), then the first index holding it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scan_body<T: Real, const LANES: usize>(
    g: &[T],
    kb: usize,
    cnorm: &[T],
    j0: usize,
    first: bool,
    best_v: &mut [T],
    best_i: &mut [u32],
) {
    let w = LANES * ACCS;
    let wide = kb / w * w;
    let narrow = kb / LANES * LANES;
    for ((row, bv_out), bi_out) in g
        .chunks_exact(kb)
        .zip(best_v.iter_mut())
        .zip(best_i.iter_mut())
    {
        // Pass 1: the minimum.
        let mut acc = [[T::INFINITY; LANES]; ACCS];
        for (r, c) in row[..wide]
            .chunks_exact(w)
            .zip(cnorm[..wide].chunks_exact(w))
        {
            for a in 0..ACCS {
                for l in 0..LANES {
                    let d = r[a * LANES + l] + c[a * LANES + l];
                    let m = acc[a][l];
                    acc[a][l] = if d < m { d } else { m };
                }
            }
        }
        let mut v = T::INFINITY;
        for lanes in &acc {
            for &m in lanes {
                v = if m < v { m } else { v };
            }
        }
        for j in wide..kb {
            let d = row[j] + cnorm[j];
            v = if d < v { d } else { v };
        }
        // Pass 2: the first index holding the minimum (same additions, so same bits).
        let mut at = kb;
        for (ci, (r, c)) in row[..narrow]
            .chunks_exact(LANES)
            .zip(cnorm[..narrow].chunks_exact(LANES))
            .enumerate()
        {
            let mut hit = false;
            for l in 0..LANES {
                hit |= r[l] + c[l] == v;
            }
            if hit {
                at = ci * LANES + (0..LANES).position(|l| r[l] + c[l] == v).unwrap_or(0);
                break;
            }
        }
        if at == kb {
            at = (narrow..kb).find(|&j| row[j] + cnorm[j] == v).unwrap_or(0);
        }
        if first || v < *bv_out {
            *bv_out = v;
            *bi_out = (j0 + at) as u32;
        }
    }
}

/// [`scan_body`]'s contract for the detected instruction set: hand-written AVX-512 code where
/// available (the compiler's vectorisation of the portable version leaves a scalar horizontal
/// reduction in every row), else the portable version compiled for AVX2 or the baseline.
#[allow(clippy::too_many_arguments)]
fn scan<T: Real>(
    isa: Isa,
    g: &[T],
    kb: usize,
    cnorm: &[T],
    j0: usize,
    first: bool,
    best_v: &mut [T],
    best_i: &mut [u32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::any::TypeId;
        if isa == Isa::Avx512 {
            let f32_ = TypeId::of::<T>() == TypeId::of::<f32>();
            let f64_ = TypeId::of::<T>() == TypeId::of::<f64>();
            // SAFETY: `Isa::detect` found AVX-512F; the casts are between identical types.
            unsafe {
                if f64_ {
                    let (g, cn) = (
                        bytemuck::cast_slice::<T, f64>(g),
                        bytemuck::cast_slice::<T, f64>(cnorm),
                    );
                    let bv = bytemuck::cast_slice_mut::<T, f64>(best_v);
                    x86::scan_avx512_f64(g, kb, cn, j0, first, bv, best_i);
                    return;
                }
                if f32_ {
                    let (g, cn) = (
                        bytemuck::cast_slice::<T, f32>(g),
                        bytemuck::cast_slice::<T, f32>(cnorm),
                    );
                    let bv = bytemuck::cast_slice_mut::<T, f32>(best_v);
                    x86::scan_avx512_f32(g, kb, cn, j0, first, bv, best_i);
                    return;
                }
            }
        }
        #[target_feature(enable = "avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn avx2<T: Real>(
            g: &[T],
            kb: usize,
            cnorm: &[T],
            j0: usize,
            first: bool,
            best_v: &mut [T],
            best_i: &mut [u32],
        ) {
            scan_body::<T, 8>(g, kb, cnorm, j0, first, best_v, best_i)
        }
        if isa != Isa::Generic {
            // SAFETY: `Isa::detect` found AVX2 and FMA (AVX-512 implies both).
            unsafe { avx2(g, kb, cnorm, j0, first, best_v, best_i) };
            return;
        }
    }
    let _ = isa;
    scan_body::<T, 8>(g, kb, cnorm, j0, first, best_v, best_i)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// AVX-512 versions of [`super::scan_body`]: pass 1 keeps four vector minima, reduces them
    /// once per row; pass 2 compares a vector of distances at a time with the minimum and stops
    /// at the first hit. Masked loads handle the tail (the missing lanes read as +inf).
    macro_rules! scan_avx512 {
        ($name:ident, $t:ty, $lanes:expr, $mask:ty, $set1:ident, $loadu:ident, $add:ident,
         $min:ident, $mask_loadu:ident, $maskz_loadu:ident, $reduce_min:ident, $cmpeq:ident,
         $mask_cmpeq:ident) => {
            /// # Safety
            /// The CPU must support AVX-512F. `g.len()` must be a multiple of `kb`,
            /// `cnorm.len() == kb` and `best_v`, `best_i` must have `g.len() / kb` elements.
            #[target_feature(enable = "avx512f")]
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn $name(
                g: &[$t],
                kb: usize,
                cnorm: &[$t],
                j0: usize,
                first: bool,
                best_v: &mut [$t],
                best_i: &mut [u32],
            ) {
                const L: usize = $lanes;
                assert!(
                    cnorm.len() == kb
                        && g.len() == kb * best_v.len()
                        && best_i.len() == best_v.len()
                );
                let full = kb / L; // whole vectors per row
                let quads = full / 4 * 4;
                let tail = (kb % L) as u32;
                let tail_mask: $mask = ((1u32 << tail) - 1) as $mask;
                let inf = $set1(<$t>::INFINITY);
                let cp = cnorm.as_ptr();
                for (r, (bv_out, bi_out)) in best_v.iter_mut().zip(best_i.iter_mut()).enumerate() {
                    let gp = g.as_ptr().add(r * kb);
                    // d(v) = g[Lv..Lv+L] + cnorm[Lv..Lv+L]
                    let d = |v: usize| $add($loadu(gp.add(L * v)), $loadu(cp.add(L * v)));
                    let (mut m0, mut m1, mut m2, mut m3) = (inf, inf, inf, inf);
                    let mut v = 0;
                    while v < quads {
                        m0 = $min(m0, d(v));
                        m1 = $min(m1, d(v + 1));
                        m2 = $min(m2, d(v + 2));
                        m3 = $min(m3, d(v + 3));
                        v += 4;
                    }
                    while v < full {
                        m0 = $min(m0, d(v));
                        v += 1;
                    }
                    let dt = if tail > 0 {
                        let gt = $mask_loadu(inf, tail_mask, gp.add(L * full));
                        let ct = $maskz_loadu(tail_mask, cp.add(L * full));
                        $add(gt, ct)
                    } else {
                        inf
                    };
                    m1 = $min(m1, dt);
                    let best = $reduce_min($min($min(m0, m1), $min(m2, m3)));
                    let bb = $set1(best);
                    let mut at = 0usize;
                    let mut found = false;
                    for v in 0..full {
                        let hit = $cmpeq(d(v), bb);
                        if hit != 0 {
                            at = L * v + hit.trailing_zeros() as usize;
                            found = true;
                            break;
                        }
                    }
                    if !found && tail > 0 {
                        let hit = $mask_cmpeq(tail_mask, dt, bb);
                        if hit != 0 {
                            at = L * full + hit.trailing_zeros() as usize;
                        }
                    }
                    if first || best < *bv_out {
                        *bv_out = best;
                        *bi_out = (j0 + at) as u32;
                    }
                }
            }
        };
    }

    scan_avx512!(
        scan_avx512_f64,
        f64,
        8,
        __mmask8,
        _mm512_set1_pd,
        _mm512_loadu_pd,
        _mm512_add_pd,
        _mm512_min_pd,
        _mm512_mask_loadu_pd,
        _mm512_maskz_loadu_pd,
        _mm512_reduce_min_pd,
        _mm512_cmpeq_pd_mask,
        _mm512_mask_cmpeq_pd_mask
    );
    scan_avx512!(
        scan_avx512_f32,
        f32,
        16,
        __mmask16,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_add_ps,
        _mm512_min_ps,
        _mm512_mask_loadu_ps,
        _mm512_maskz_loadu_ps,
        _mm512_reduce_min_ps,
        _mm512_cmpeq_ps_mask,
        _mm512_mask_cmpeq_ps_mask
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small deterministic generator for test data (splitmix64 → uniform in [-1, 1)).
    fn random(n: usize, seed: u64) -> Vec<f64> {
        (0..n as u64)
            .map(|i| {
                let z = crate::util::splitmix64(
                    seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                );
                (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    fn rel(a: f64, b: f64) -> f64 {
        (a - b).abs() / a.abs().max(b.abs()).max(1e-300)
    }

    fn run(
        mut f: impl FnMut(&mut [f64], &mut [f64]) -> f64,
        k: usize,
        dim: usize,
    ) -> (Vec<f64>, Vec<f64>, f64) {
        let mut sums = vec![0.0; k * dim];
        let mut counts = vec![0.0; k];
        let inertia = f(&mut sums, &mut counts);
        (sums, counts, inertia)
    }

    /// The fused AVX-512 search against the GEMM and the scan, on shapes that exercise its
    /// padding (k not a multiple of two vectors, fewer points than a tile, the last tile
    /// partial) and its column chunks (d = 600: several chunks): the same centroid for every
    /// point, or, where the two computations round a near-tie differently, two centroids whose
    /// exact distances are within rounding of each other. Only on CPUs with AVX-512 (elsewhere
    /// the GEMM path has no fused search).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn fused_search_equals_the_gemm_and_scan() {
        fn check<T: Real>(n: usize, dim: usize, k: usize, seed: u64, tol: f64) -> usize {
            let pts: Vec<T> = random(n * dim, seed)
                .iter()
                .map(|&v| T::from_f64(v))
                .collect();
            let cen: Vec<T> = random(k * dim, seed + 1)
                .iter()
                .map(|&v| T::from_f64(v))
                .collect();
            let mut labels = Vec::new();
            for isa in [Isa::Avx2, Isa::Avx512] {
                let prep = Prepared::new(&cen, dim, k, isa);
                assert_eq!(prep.fused.is_some(), isa == Isa::Avx512);
                let mut l = vec![0u32; n];
                // SAFETY of the AVX-512 path: the caller checked the CPU.
                let part = chunk_partial(isa, &pts, dim, &cen, k, &prep, Some(&mut l));
                let total: f64 = (0..k).map(|j| part.counts[j]).sum();
                assert_eq!(total, n as f64, "{} n={n} d={dim} k={k}", T::NAME);
                labels.push(l);
            }
            let mut near_ties = 0;
            for i in 0..n {
                let (a, b) = (labels[0][i] as usize, labels[1][i] as usize);
                if a != b {
                    let x = &pts[i * dim..(i + 1) * dim];
                    let da = dist2(x, &cen[a * dim..(a + 1) * dim]);
                    let db = dist2(x, &cen[b * dim..(b + 1) * dim]);
                    assert!(
                        rel(da, db) <= tol,
                        "{} n={n} d={dim} k={k} point {i}: {a} ({da}) against {b} ({db})",
                        T::NAME
                    );
                    near_ties += 1;
                }
            }
            near_ties
        }
        if Isa::detect() != Isa::Avx512 {
            return;
        }
        let mut ties = 0;
        for &(n, dim, k) in &[
            (1, 1, 1),
            (5, 3, 5),
            (13, 3, 33),
            (700, 17, 47),
            (1000, 32, 256),
            (260, 600, 300),
        ] {
            ties += check::<f64>(n, dim, k, 90 + n as u64, 1e-12);
            ties += check::<f32>(n, dim, k, 91 + n as u64, 1e-4);
        }
        // Near-ties are rare: nearly every point got the same centroid.
        assert!(ties <= 5, "{ties} points decided differently");
    }

    #[test]
    fn blocked_matches_naive() {
        let k1 = Kernel::new(1).unwrap();
        let k2 = Kernel::new(2).unwrap();
        let mut case = 0u64;
        for &dim in &[1usize, 2, 3, 17, 32, 64] {
            for &k in &[1usize, 5, 256] {
                for &n in &[1usize, 7, 300, 2000] {
                    case += 1;
                    let pts = random(n * dim, case);
                    let cen = random(k * dim, 1000 + case);
                    let (ns, nc, ni) =
                        run(|s, c| assign_naive(&pts, dim, &cen, k, 1, s, c), k, dim);
                    let (bs, bc, bi) = run(
                        |s, c| k1.assign_accumulate(&pts, dim, &cen, k, s, c),
                        k,
                        dim,
                    );
                    let (ts, tc, ti) = run(
                        |s, c| k2.assign_accumulate(&pts, dim, &cen, k, s, c),
                        k,
                        dim,
                    );
                    let what = format!("n={n} dim={dim} k={k}");
                    assert_eq!(nc, bc, "counts {what}");
                    assert_eq!(nc.iter().sum::<f64>(), n as f64);
                    for (a, b) in ns.iter().zip(&bs) {
                        assert!(
                            (a - b).abs() <= 1e-9 * a.abs().max(1.0),
                            "sums {what}: {a} vs {b}"
                        );
                    }
                    assert!(rel(ni, bi) <= 1e-9, "inertia {what}: {ni} vs {bi}");
                    assert_eq!(bc, tc, "threads {what}");
                    for (a, b) in bs.iter().zip(&ts) {
                        assert!(rel(*a, *b) <= 1e-12, "threads sums {what}");
                    }
                    assert!(rel(bi, ti) <= 1e-12, "threads inertia {what}");
                }
            }
        }
    }

    /// Every scan implementation this CPU can run gives the reference answer, with many ties
    /// and widths around the vector sizes.
    #[test]
    fn scan_variants_agree() {
        let mut isas = vec![Isa::Generic];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                isas.push(Isa::Avx2);
            }
            if is_x86_feature_detected!("avx512f") {
                isas.push(Isa::Avx512);
            }
        }
        let rows = 13;
        for kb in [1usize, 2, 7, 8, 9, 31, 32, 33, 40, 64, 100, 257] {
            // Few distinct values, so ties are common.
            let g: Vec<f64> = random(rows * kb, kb as u64)
                .iter()
                .map(|v| (v * 3.0).round())
                .collect();
            let cn: Vec<f64> = random(kb, 50 + kb as u64)
                .iter()
                .map(|v| (v * 2.0).round())
                .collect();
            let prev: Vec<f64> = random(rows, 7).iter().map(|v| (v * 5.0).round()).collect();
            for first in [true, false] {
                let j0 = 1000;
                let mut want_v = prev.clone();
                let mut want_i = vec![u32::MAX; rows];
                for r in 0..rows {
                    let (mut v, mut at) = (f64::INFINITY, 0);
                    for j in 0..kb {
                        let d = g[r * kb + j] + cn[j];
                        if d < v {
                            (v, at) = (d, j);
                        }
                    }
                    if first || v < want_v[r] {
                        (want_v[r], want_i[r]) = (v, (j0 + at) as u32);
                    }
                }
                for &isa in &isas {
                    let mut bv = prev.clone();
                    let mut bi = vec![u32::MAX; rows];
                    scan(isa, &g, kb, &cn, j0, first, &mut bv, &mut bi);
                    assert_eq!(
                        (&bv, &bi),
                        (&want_v, &want_i),
                        "{isa:?} kb={kb} first={first}"
                    );
                    // The same small integers in f32 give the same answer.
                    let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
                    let mut bv32 = f(&prev);
                    let mut bi32 = vec![u32::MAX; rows];
                    scan(isa, &f(&g), kb, &f(&cn), j0, first, &mut bv32, &mut bi32);
                    assert_eq!(
                        (&bv32, &bi32),
                        (&f(&want_v), &want_i),
                        "f32 {isa:?} kb={kb} first={first}"
                    );
                }
            }
        }
    }

    /// f32 points and centroids: the blocked f32 kernel against the exact reference on the same
    /// f32 values (counts may differ only on near-ties, the inertia within 1e-5 relative), and
    /// labels written in input order.
    #[test]
    fn f32_blocked_matches_reference() {
        let kern = Kernel::new(2).unwrap();
        let mut case = 0u64;
        for &dim in &[1usize, 3, 16, 32, 100] {
            for &k in &[1usize, 7, 256, 600] {
                case += 1;
                let n = 3000;
                let pts: Vec<f32> = random(n * dim, case)
                    .iter()
                    .map(|&v| (v * 10.0) as f32)
                    .collect();
                let cen: Vec<f32> = random(k * dim, 77 + case)
                    .iter()
                    .map(|&v| (v * 10.0) as f32)
                    .collect();
                let (ns, nc, ni) = run(|s, c| assign_naive(&pts, dim, &cen, k, 1, s, c), k, dim);
                let mut labels = vec![u32::MAX; n];
                let (bs, bc, bi) = run(
                    |s, c| kern.assign(&pts, dim, &cen, k, s, c, Some(&mut labels)),
                    k,
                    dim,
                );
                let what = format!("dim={dim} k={k}");
                // In 1-D with hundreds of centroids, squared distances are ~1e-6 of ‖c‖², below
                // f32 resolution of the expanded form: only near-optimal labels are checked there.
                if dim > 1 || k < 256 {
                    assert!(rel(ni, bi) <= 1e-5, "inertia {what}: {ni} vs {bi}");
                }
                let moved: f64 = nc.iter().zip(&bc).map(|(a, b)| (a - b).abs()).sum();
                // f32 rounding of ‖x‖² − 2x·c + ‖c‖² moves a few near-tied points.
                assert!(moved <= 2.0 * n as f64 * 1e-2, "counts {what}: {moved}");
                assert_eq!(bc.iter().sum::<f64>(), n as f64);
                let mut again = vec![0.0; k];
                for (i, &l) in labels.iter().enumerate() {
                    let (want, d) = nearest_naive(&pts[i * dim..(i + 1) * dim], &cen, dim);
                    if l as usize != want {
                        // Only a near-tie may differ.
                        let got = dist2(
                            &pts[i * dim..(i + 1) * dim],
                            &cen[l as usize * dim..(l as usize + 1) * dim],
                        );
                        assert!(
                            got - d <= 1e-4 * d.max(1.0),
                            "{what} point {i}: {got} vs {d}"
                        );
                    }
                    again[l as usize] += 1.0;
                }
                assert_eq!(again, bc, "labels agree with counts {what}");
                if moved == 0.0 {
                    for (a, b) in ns.iter().zip(&bs) {
                        assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "sums {what}");
                    }
                }
            }
        }
    }

    /// More than one chunk and several centroid blocks, odd sizes everywhere.
    #[test]
    fn large_k_and_many_chunks() {
        let (n, dim, k) = (CHUNK_POINTS * 2 + 333, 5, BLOCK_CENTROIDS * 2 + 13);
        let pts = random(n * dim, 7);
        let cen = random(k * dim, 8);
        let (ns, nc, ni) = run(|s, c| assign_naive(&pts, dim, &cen, k, 1, s, c), k, dim);
        let (bs, bc, bi) = run(
            |s, c| assign_accumulate(&pts, dim, &cen, k, 2, s, c),
            k,
            dim,
        );
        let (_, _, bi1) = run(
            |s, c| assign_accumulate(&pts, dim, &cen, k, 1, s, c),
            k,
            dim,
        );
        assert_eq!(nc, bc);
        for (a, b) in ns.iter().zip(&bs) {
            assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0));
        }
        assert!(rel(ni, bi) <= 1e-9);
        assert_eq!(
            bi.to_bits(),
            bi1.to_bits(),
            "chunking makes results independent of threads"
        );
    }

    #[test]
    fn ties_go_to_lowest_index_and_sums_accumulate() {
        // Centroids 0 and 2 are identical; 1 is far away; every point is nearest to 0 and 2.
        let dim = 2;
        let mut cen = vec![0.5, 0.5, 100.0, 100.0, 0.5, 0.5];
        // Pad to 19 centroids so the vector lanes and the tail are both exercised.
        for j in 3..19 {
            cen.extend([50.0 + j as f64, -50.0]);
        }
        cen.extend([0.5, 0.5]); // index 19 ties too (in the tail)
        let k = cen.len() / dim;
        let pts = vec![0.0, 0.0, 1.0, 1.0, 0.5, 0.5];
        let mut sums = vec![1.0; k * dim];
        let mut counts = vec![2.0; k];
        let kernel = Kernel::new(2).unwrap();
        let inertia = kernel.assign_accumulate(&pts, dim, &cen, k, &mut sums, &mut counts);
        assert_eq!(counts[0], 5.0);
        assert!(counts[1..].iter().all(|&c| c == 2.0));
        assert_eq!(
            &sums[..2],
            &[2.5, 2.5],
            "accumulated into the existing sums"
        );
        assert!((inertia - 1.0).abs() < 1e-12, "{inertia}");
        assert_eq!(kernel.threads(), 2);
    }
}
