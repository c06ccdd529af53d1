//! The K-means map step: assign every point to its nearest centroid and accumulate per-centroid
//! sums and counts.
//!
//! The kernel is blocked: `||x - c||² = ||x||² - 2 x·c + ||c||²`, where the dot products of a
//! block of points with a block of centroids come from one `matrixmultiply::dgemm` call into a
//! scratch buffer small enough to stay in L2 (`BLOCK_POINTS × BLOCK_CENTROIDS` doubles). A
//! vectorised scan then finds each row's nearest centroid (ties → lowest index) and the point is
//! added to the sums and counts of its chunk.
//!
//! Work is cut into fixed-size chunks of points (independent of the thread count), each chunk
//! producing its own partial sums, and the partials are added to the caller's buffers in chunk
//! order. The result is therefore bitwise identical whatever the number of threads.

use rayon::prelude::*;

use crate::error::{Error, Result};

/// Points per `dgemm` call (rows of the scratch matrix).
pub const BLOCK_POINTS: usize = 256;
/// Centroids per `dgemm` call (columns of the scratch matrix).
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

    /// Assigns each point (row-major, `dim` values each) to its nearest centroid (`k` rows of
    /// `dim` values; ties → lowest index), adds the point to `sums[j*dim..(j+1)*dim]` and 1 to
    /// `counts[j]` of its centroid `j`, and returns the inertia: the sum over points of the
    /// squared distance to the nearest centroid (expanded form, clamped at 0).
    ///
    /// # Panics
    /// If the slice lengths do not match `dim` and `k`, or `dim == 0` or `k == 0`.
    pub fn assign_accumulate(
        &self,
        points: &[f64],
        dim: usize,
        centroids: &[f64],
        k: usize,
        sums: &mut [f64],
        counts: &mut [f64],
    ) -> f64 {
        check_shapes(points, dim, centroids, k, sums, counts);
        let n = points.len() / dim;
        if n == 0 {
            return 0.0;
        }
        let cnorm: Vec<f64> = centroids
            .chunks_exact(dim)
            .map(|c| c.iter().map(|v| v * v).sum())
            .collect();
        let isa = Isa::detect();
        let chunks: Vec<&[f64]> = points.chunks(CHUNK_POINTS * dim).collect();
        // Partials are computed a wave at a time (bounded memory) and added in chunk order.
        let wave = (self.threads * 4).max(1);
        let mut inertia = 0.0;
        for group in chunks.chunks(wave) {
            let partials: Vec<Partial> = self.pool.install(|| {
                group
                    .par_iter()
                    .map(|pts| chunk_partial(isa, pts, dim, centroids, k, &cnorm))
                    .collect()
            });
            for p in partials {
                for (s, v) in sums.iter_mut().zip(&p.sums) {
                    *s += v;
                }
                for (c, v) in counts.iter_mut().zip(&p.counts) {
                    *c += v;
                }
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
pub fn assign_accumulate(
    points: &[f64],
    dim: usize,
    centroids: &[f64],
    k: usize,
    threads: usize,
    sums: &mut [f64],
    counts: &mut [f64],
) -> f64 {
    let kernel = Kernel::new(threads).expect("starting the K-means kernel threads");
    kernel.assign_accumulate(points, dim, centroids, k, sums, counts)
}

/// The reference: exact `Σ (x - c)²` distances by plain loops, one thread (`threads` is accepted
/// for signature compatibility and ignored). Ties → lowest index.
pub fn assign_naive(
    points: &[f64],
    dim: usize,
    centroids: &[f64],
    k: usize,
    _threads: usize,
    sums: &mut [f64],
    counts: &mut [f64],
) -> f64 {
    check_shapes(points, dim, centroids, k, sums, counts);
    let mut inertia = 0.0;
    for x in points.chunks_exact(dim) {
        let mut best = f64::INFINITY;
        let mut best_j = 0;
        for (j, c) in centroids.chunks_exact(dim).enumerate() {
            let d: f64 = x.iter().zip(c).map(|(a, b)| (a - b) * (a - b)).sum();
            if d < best {
                best = d;
                best_j = j;
            }
        }
        counts[best_j] += 1.0;
        for (s, v) in sums[best_j * dim..(best_j + 1) * dim].iter_mut().zip(x) {
            *s += v;
        }
        inertia += best;
    }
    inertia
}

fn check_shapes(
    points: &[f64],
    dim: usize,
    centroids: &[f64],
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
struct Partial {
    sums: Vec<f64>,
    counts: Vec<f64>,
    inertia: f64,
}

/// The widest vector instruction set usable for the scan and accumulation loops (the GEMM does
/// its own detection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Generic,
}

impl Isa {
    fn detect() -> Isa {
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

/// Processes one chunk of points: blocks of `BLOCK_POINTS` points × blocks of `BLOCK_CENTROIDS`
/// centroids through `dgemm`, then the scan and the accumulation.
fn chunk_partial(
    isa: Isa,
    pts: &[f64],
    dim: usize,
    centroids: &[f64],
    k: usize,
    cnorm: &[f64],
) -> Partial {
    let mut part = Partial {
        sums: vec![0.0; k * dim],
        counts: vec![0.0; k],
        inertia: 0.0,
    };
    let kb_max = k.min(BLOCK_CENTROIDS);
    let mut g = vec![0.0f64; BLOCK_POINTS * kb_max];
    let mut best_v = vec![0.0f64; BLOCK_POINTS];
    let mut best_i = vec![0.0f64; BLOCK_POINTS];
    for block in pts.chunks(BLOCK_POINTS * dim) {
        let m = block.len() / dim;
        let mut j0 = 0;
        while j0 < k {
            let kb = kb_max.min(k - j0);
            // g[i][j] = -2 x_i · c_(j0+j)
            // SAFETY: the pointers and strides describe `block` (m × dim, row-major), the
            // centroid rows j0..j0+kb read as a dim × kb matrix (transposed view of row-major
            // data) and `g` (m × kb, row-major), all in bounds.
            unsafe {
                matrixmultiply::dgemm(
                    m,
                    dim,
                    kb,
                    -2.0,
                    block.as_ptr(),
                    dim as isize,
                    1,
                    centroids[j0 * dim..].as_ptr(),
                    1,
                    dim as isize,
                    0.0,
                    g.as_mut_ptr(),
                    kb as isize,
                    1,
                );
            }
            scan(
                isa,
                &g[..m * kb],
                kb,
                &cnorm[j0..j0 + kb],
                j0,
                j0 == 0,
                &mut best_v[..m],
                &mut best_i[..m],
            );
            j0 += kb;
        }
        part.inertia += accumulate(
            isa,
            block,
            dim,
            &best_v[..m],
            &best_i[..m],
            &mut part.sums,
            &mut part.counts,
        );
    }
    part
}

/// Lanes of the vectorised scans (one AVX-512 register of f64).
const LANES: usize = 8;
/// Independent minimum accumulators in the first scan (hides the latency of `min`).
const ACCS: usize = 4;

/// For each row `i` of `g` (width `kb`), finds `min_j g[i][j] + cnorm[j]` (lowest `j` on ties)
/// and, if it beats `best_v[i]` (or `first`), stores it with index `j0 + j` (as f64) in
/// `best_v`/`best_i`.
///
/// Two passes per row, both written so that they vectorise: the minimum value (order does not
/// matter for an exact minimum), then the first index holding it.
#[inline(always)]
fn scan_body(
    g: &[f64],
    kb: usize,
    cnorm: &[f64],
    j0: usize,
    first: bool,
    best_v: &mut [f64],
    best_i: &mut [f64],
) {
    const W: usize = LANES * ACCS;
    let wide = kb / W * W;
    let narrow = kb / LANES * LANES;
    for ((row, bv_out), bi_out) in g
        .chunks_exact(kb)
        .zip(best_v.iter_mut())
        .zip(best_i.iter_mut())
    {
        // Pass 1: the minimum.
        let mut acc = [[f64::INFINITY; LANES]; ACCS];
        for (r, c) in row[..wide]
            .chunks_exact(W)
            .zip(cnorm[..wide].chunks_exact(W))
        {
            for a in 0..ACCS {
                for l in 0..LANES {
                    let d = r[a * LANES + l] + c[a * LANES + l];
                    let m = acc[a][l];
                    acc[a][l] = if d < m { d } else { m };
                }
            }
        }
        let mut v = f64::INFINITY;
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
            *bi_out = (j0 + at) as f64;
        }
    }
}

/// Adds each point of `block` to the sums and count of its centroid `best_i`; returns the block's
/// inertia `Σ max(0, ||x||² + best_v)`.
#[inline(always)]
fn accumulate_body(
    block: &[f64],
    dim: usize,
    best_v: &[f64],
    best_i: &[f64],
    sums: &mut [f64],
    counts: &mut [f64],
) -> f64 {
    let mut inertia = 0.0;
    for ((x, &v), &i) in block.chunks_exact(dim).zip(best_v).zip(best_i) {
        let j = i as usize;
        let xn: f64 = x.iter().map(|a| a * a).sum();
        inertia += (xn + v).max(0.0);
        counts[j] += 1.0;
        for (s, a) in sums[j * dim..(j + 1) * dim].iter_mut().zip(x) {
            *s += a;
        }
    }
    inertia
}

/// Instantiates `$body` for each [`Isa`] and dispatches on `isa`.
macro_rules! dispatch {
    ($name:ident, $body:ident, ($($arg:ident : $ty:ty),*) -> $ret:ty) => {
        #[allow(clippy::too_many_arguments)]
        fn $name(isa: Isa, $($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx512($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx2($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                match isa {
                    // SAFETY: `Isa::detect` found the CPU features these functions enable.
                    Isa::Avx512 => return unsafe { avx512($($arg),*) },
                    Isa::Avx2 => return unsafe { avx2($($arg),*) },
                    Isa::Generic => {}
                }
            }
            let _ = isa;
            $body($($arg),*)
        }
    };
}

dispatch!(scan_auto, scan_body, (g: &[f64], kb: usize, cnorm: &[f64], j0: usize, first: bool, best_v: &mut [f64], best_i: &mut [f64]) -> ());

/// [`scan_body`]'s contract, with hand-written AVX-512 code where available (the compiler's
/// vectorisation of the portable version leaves a scalar horizontal reduction in every row).
#[allow(clippy::too_many_arguments)]
fn scan(
    isa: Isa,
    g: &[f64],
    kb: usize,
    cnorm: &[f64],
    j0: usize,
    first: bool,
    best_v: &mut [f64],
    best_i: &mut [f64],
) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: `Isa::detect` found AVX-512F.
        unsafe { x86::scan_avx512(g, kb, cnorm, j0, first, best_v, best_i) };
        return;
    }
    scan_auto(isa, g, kb, cnorm, j0, first, best_v, best_i)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// AVX-512 version of [`super::scan_body`]: pass 1 keeps four vector minima, reduces them
    /// once per row; pass 2 compares 8 distances at a time with the minimum and stops at the
    /// first hit. Masked loads handle `kb % 8` (the missing lanes read as +inf).
    ///
    /// # Safety
    /// The CPU must support AVX-512F. `g.len()` must be a multiple of `kb`, `cnorm.len() == kb`
    /// and `best_v`, `best_i` must have `g.len() / kb` elements.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn scan_avx512(
        g: &[f64],
        kb: usize,
        cnorm: &[f64],
        j0: usize,
        first: bool,
        best_v: &mut [f64],
        best_i: &mut [f64],
    ) {
        assert!(cnorm.len() == kb && g.len() == kb * best_v.len() && best_i.len() == best_v.len());
        let full = kb / 8; // whole vectors per row
        let quads = full / 4 * 4;
        let tail = (kb % 8) as u32;
        let tail_mask: __mmask8 = ((1u32 << tail) - 1) as u8;
        let inf = _mm512_set1_pd(f64::INFINITY);
        let cp = cnorm.as_ptr();
        for (r, (bv_out, bi_out)) in best_v.iter_mut().zip(best_i.iter_mut()).enumerate() {
            let gp = g.as_ptr().add(r * kb);
            // d(v) = g[8v..8v+8] + cnorm[8v..8v+8]
            let d = |v: usize| {
                _mm512_add_pd(
                    _mm512_loadu_pd(gp.add(8 * v)),
                    _mm512_loadu_pd(cp.add(8 * v)),
                )
            };
            let (mut m0, mut m1, mut m2, mut m3) = (inf, inf, inf, inf);
            let mut v = 0;
            while v < quads {
                m0 = _mm512_min_pd(m0, d(v));
                m1 = _mm512_min_pd(m1, d(v + 1));
                m2 = _mm512_min_pd(m2, d(v + 2));
                m3 = _mm512_min_pd(m3, d(v + 3));
                v += 4;
            }
            while v < full {
                m0 = _mm512_min_pd(m0, d(v));
                v += 1;
            }
            let dt = if tail > 0 {
                let gt = _mm512_mask_loadu_pd(inf, tail_mask, gp.add(8 * full));
                let ct = _mm512_maskz_loadu_pd(tail_mask, cp.add(8 * full));
                _mm512_add_pd(gt, ct)
            } else {
                inf
            };
            m1 = _mm512_min_pd(m1, dt);
            let best =
                _mm512_reduce_min_pd(_mm512_min_pd(_mm512_min_pd(m0, m1), _mm512_min_pd(m2, m3)));
            let bb = _mm512_set1_pd(best);
            let mut at = 0usize;
            let mut found = false;
            for v in 0..full {
                let hit = _mm512_cmpeq_pd_mask(d(v), bb);
                if hit != 0 {
                    at = 8 * v + hit.trailing_zeros() as usize;
                    found = true;
                    break;
                }
            }
            if !found && tail > 0 {
                let hit = _mm512_mask_cmpeq_pd_mask(tail_mask, dt, bb);
                if hit != 0 {
                    at = 8 * full + hit.trailing_zeros() as usize;
                }
            }
            if first || best < *bv_out {
                *bv_out = best;
                *bi_out = (j0 + at) as f64;
            }
        }
    }
}
dispatch!(accumulate, accumulate_body, (block: &[f64], dim: usize, best_v: &[f64], best_i: &[f64], sums: &mut [f64], counts: &mut [f64]) -> f64);

#[cfg(test)]
mod tests {
    use super::*;

    /// Small deterministic generator for test data (splitmix64 → uniform in [-1, 1)).
    fn random(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    fn rel(a: f64, b: f64) -> f64 {
        (a - b).abs() / a.abs().max(b.abs()).max(1e-300)
    }

    fn run(
        f: impl Fn(&mut [f64], &mut [f64]) -> f64,
        k: usize,
        dim: usize,
    ) -> (Vec<f64>, Vec<f64>, f64) {
        let mut sums = vec![0.0; k * dim];
        let mut counts = vec![0.0; k];
        let inertia = f(&mut sums, &mut counts);
        (sums, counts, inertia)
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
                let mut want_i = vec![-1.0; rows];
                for r in 0..rows {
                    let (mut v, mut at) = (f64::INFINITY, 0);
                    for j in 0..kb {
                        let d = g[r * kb + j] + cn[j];
                        if d < v {
                            (v, at) = (d, j);
                        }
                    }
                    if first || v < want_v[r] {
                        (want_v[r], want_i[r]) = (v, (j0 + at) as f64);
                    }
                }
                for &isa in &isas {
                    let mut bv = prev.clone();
                    let mut bi = vec![-1.0; rows];
                    scan(isa, &g, kb, &cn, j0, first, &mut bv, &mut bi);
                    assert_eq!(
                        (&bv, &bi),
                        (&want_v, &want_i),
                        "{isa:?} kb={kb} first={first}"
                    );
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
