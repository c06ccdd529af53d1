//! The GEMM path's nearest-centroid search in one AVX-512 loop: the dot products of a tile of
//! points with two vectors of centroids stay in registers, and each finished value goes
//! straight into a running per-lane minimum, so no block of distances is written, packed or
//! scanned again.
//!
//! Values are those of the GEMM path: `‖c‖² − 2 x·c` (one rounding after the dot product, whose
//! terms are added in coordinate order), the nearest centroid being the lowest value, lowest
//! index on ties. Each lane keeps the lowest value of its columns seen so far and the first
//! column holding it (columns are visited in increasing order and replace only on a strictly
//! lower value); the lowest value over the lanes, then the lowest column among the lanes holding
//! it, is the answer.
//!
//! Layout: the centroids in panels of two vectors of columns (`kpad` columns, a multiple of two
//! vectors; the padding columns have `‖c‖² = +∞`, so they are never chosen), each panel its
//! `dim` rows of `2L` values one after the other, so that a tile reads it sequentially; the
//! panels are visited in chunks small enough to stay in L2 while every tile of a block goes by.

// Only x86_64 builds search with it; elsewhere `Prepared` never builds one.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use super::real::Real;

/// Points per register tile: 6 points × 2 vectors of accumulators, plus the 6 points' running
/// minima and their columns, fill 24 of the 32 vector registers.
const ROWS: usize = 6;

/// Bytes of transposed centroids per column chunk (half of a 1 MiB L2).
const CHUNK_BYTES: usize = 512 * 1024;

/// The centroids prepared for [`Fused::nearest`].
pub(crate) struct Fused<T> {
    /// `kpad / 2L` panels of `dim` rows of `2L` values.
    ct: Vec<T>,
    /// `‖c_j‖²` as the GEMM path computes it, `+∞` in the padding.
    cn: Vec<T>,
    dim: usize,
    kpad: usize,
    /// Columns per chunk (a multiple of two vectors).
    kc: usize,
}

/// Reused buffers of [`Fused::nearest`].
pub(crate) struct FusedScratch<T> {
    /// Per point, one vector of running minima and one of their columns (u32 lanes for f32, u64
    /// lanes for f64, stored as u64 pairs or singles).
    bv: Vec<T>,
    bi: Vec<u64>,
    /// A tile padded with zero rows.
    pad: Vec<T>,
}

impl<T: Real> FusedScratch<T> {
    pub(crate) fn new() -> FusedScratch<T> {
        FusedScratch {
            bv: Vec::new(),
            bi: Vec::new(),
            pad: Vec::new(),
        }
    }
}

/// Values per 512-bit vector.
fn lanes<T: Real>() -> usize {
    64 / std::mem::size_of::<T>()
}

impl<T: Real> Fused<T> {
    /// `k` centroids of `dim` values (row-major) and their squared norms `cnorm`.
    pub(crate) fn new(centroids: &[T], cnorm: &[T], dim: usize, k: usize) -> Fused<T> {
        let pair = 2 * lanes::<T>();
        let kpad = k.div_ceil(pair) * pair;
        let mut ct = vec![T::ZERO; dim * kpad];
        for (j, c) in centroids.chunks_exact(dim).enumerate() {
            let (panel, at) = (j / pair, j % pair);
            for (d, &v) in c.iter().enumerate() {
                ct[(panel * dim + d) * pair + at] = v;
            }
        }
        let mut cn = vec![T::INFINITY; kpad];
        cn[..k].copy_from_slice(&cnorm[..k]);
        let per_col = dim * std::mem::size_of::<T>();
        let kc = ((CHUNK_BYTES / per_col.max(1)) / pair * pair).clamp(pair, kpad);
        Fused {
            ct,
            cn,
            dim,
            kpad,
            kc,
        }
    }

    /// The nearest centroid of each point of `block` (row-major, `out.len()` points).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn nearest(&self, block: &[T], out: &mut [u32], sc: &mut FusedScratch<T>) {
        use std::any::TypeId;
        let (dim, l) = (self.dim, lanes::<T>());
        let m = out.len();
        assert_eq!(block.len(), m * dim, "block and out disagree");
        let mpad = m.div_ceil(ROWS) * ROWS;
        sc.bv.clear();
        sc.bv.resize(mpad * l, T::INFINITY);
        // f32 keeps u32 columns (two per u64), f64 u64 columns: the same bytes per point.
        sc.bi.clear();
        sc.bi.resize(mpad * 8, 0);
        sc.pad.clear();
        sc.pad.resize(ROWS * dim, T::ZERO);
        // The casts below are between identical types: f32 data through the f32 functions.
        let (tile_fn, finish_fn): (x86::Tile, x86::Finish) =
            if TypeId::of::<T>() == TypeId::of::<f32>() {
                (x86::tile_f32, x86::finish_f32)
            } else {
                (x86::tile_f64, x86::finish_f64)
            };
        let mut c0 = 0;
        while c0 < self.kpad {
            let c1 = (c0 + self.kc).min(self.kpad);
            let mut r0 = 0;
            while r0 < m {
                let rows = ROWS.min(m - r0);
                let tile = if rows == ROWS {
                    block[r0 * dim..].as_ptr()
                } else {
                    sc.pad[..rows * dim].copy_from_slice(&block[r0 * dim..(r0 + rows) * dim]);
                    sc.pad.as_ptr()
                };
                let (bv, bi) = (sc.bv[r0 * l..].as_mut_ptr(), sc.bi[r0 * 8..].as_mut_ptr());
                // SAFETY: AVX-512F is available (this function's contract); `tile` holds ROWS
                // rows of `dim` values, `ct` `kpad / 2L` panels of `dim × 2L` values, `cn`
                // `kpad` values, `bv` and `bi` ROWS vectors from `r0`; c0..c1 are whole pairs of
                // vectors within `kpad`.
                tile_fn(
                    tile.cast(),
                    dim,
                    self.ct.as_ptr().cast(),
                    self.cn.as_ptr().cast(),
                    (c0, c1),
                    (bv.cast(), bi.cast()),
                );
                r0 += ROWS;
            }
            c0 = c1;
        }
        for (i, o) in out.iter_mut().enumerate() {
            let (bv, bi) = (sc.bv[i * l..].as_ptr(), sc.bi[i * 8..].as_ptr());
            // SAFETY: as above, one vector each at point i.
            *o = finish_fn(bv.cast(), bi.cast());
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::ROWS;
    use std::arch::x86_64::*;

    /// A tile function: `(tile, dim, ct, cn, (c0, c1), (bv, bi))`, the pointers to the element
    /// type of the function's name.
    pub(super) type Tile =
        unsafe fn(*const u8, usize, *const u8, *const u8, (usize, usize), (*mut u8, *mut u8));
    /// A finishing function: `(bv, bi)` of one point.
    pub(super) type Finish = unsafe fn(*const u8, *const u8) -> u32;

    macro_rules! fused {
        ($tile:ident, $finish:ident, $t:ty, $it:ty, $lanes:expr, $mask:ty, $setzero:ident,
         $set1:ident, $loadu:ident, $storeu:ident, $fmadd:ident, $cmplt:ident, $blend:ident,
         $iset1:ident, $iadd:ident, $iblend:ident, $iota:expr, $reduce_min:ident, $cmpeq:ident,
         $imreduce:ident) => {
            /// One tile: for columns `c0..c1` (whole pairs of vectors), the running minima
            /// `bv` and their columns `bi` of `ROWS` points (`tile`, `dim` values each) are
            /// updated with `cn − 2 x·c`.
            ///
            /// # Safety
            /// AVX-512F; the pointers as described in [`super::Fused::nearest`].
            #[target_feature(enable = "avx512f")]
            #[inline]
            pub(super) unsafe fn $tile(
                tile: *const u8,
                dim: usize,
                ct: *const u8,
                cn: *const u8,
                (c0, c1): (usize, usize),
                (bv, bi): (*mut u8, *mut u8),
            ) {
                const L: usize = $lanes;
                let (tile, ct, cn) = (tile.cast::<$t>(), ct.cast::<$t>(), cn.cast::<$t>());
                let (bv, bi) = (bv.cast::<$t>(), bi.cast::<$it>());
                let m2 = $set1(-2.0);
                let iota = $iota;
                let mut best = [$setzero(); ROWS];
                let mut col = [_mm512_setzero_si512(); ROWS];
                for r in 0..ROWS {
                    best[r] = $loadu(bv.add(r * L));
                    col[r] = _mm512_loadu_si512(bi.add(r * L).cast());
                }
                let mut j = c0;
                while j < c1 {
                    let mut a0 = [$setzero(); ROWS];
                    let mut a1 = [$setzero(); ROWS];
                    // Columns j..j + 2L are panel j / 2L.
                    let mut cp = ct.add(j * dim);
                    for d in 0..dim {
                        let (v0, v1) = ($loadu(cp), $loadu(cp.add(L)));
                        for r in 0..ROWS {
                            let x = $set1(*tile.add(r * dim + d));
                            a0[r] = $fmadd(x, v0, a0[r]);
                            a1[r] = $fmadd(x, v1, a1[r]);
                        }
                        cp = cp.add(2 * L);
                    }
                    let (n0, n1) = ($loadu(cn.add(j)), $loadu(cn.add(j + L)));
                    let i0 = $iadd(iota, $iset1(j as _));
                    let i1 = $iadd(iota, $iset1((j + L) as _));
                    for r in 0..ROWS {
                        let v = $fmadd(a0[r], m2, n0);
                        let lt: $mask = $cmplt(v, best[r]);
                        best[r] = $blend(lt, best[r], v);
                        col[r] = $iblend(lt, col[r], i0);
                        let v = $fmadd(a1[r], m2, n1);
                        let lt: $mask = $cmplt(v, best[r]);
                        best[r] = $blend(lt, best[r], v);
                        col[r] = $iblend(lt, col[r], i1);
                    }
                    j += 2 * L;
                }
                for r in 0..ROWS {
                    $storeu(bv.add(r * L), best[r]);
                    _mm512_storeu_si512(bi.add(r * L).cast(), col[r]);
                }
            }

            /// The column of the lowest value of one point's lanes, lowest column on ties.
            ///
            /// # Safety
            /// AVX-512F; one vector at `bv` and at `bi`.
            #[target_feature(enable = "avx512f")]
            #[inline]
            pub(super) unsafe fn $finish(bv: *const u8, bi: *const u8) -> u32 {
                let (v, c) = ($loadu(bv.cast()), _mm512_loadu_si512(bi.cast()));
                let low = $reduce_min(v);
                let at: $mask = $cmpeq(v, $set1(low));
                if at == 0 {
                    // Only NaN values (never stored: a NaN is never lower): the first column.
                    return 0;
                }
                $imreduce(at, c) as u32
            }
        };
    }

    fused!(
        tile_f32,
        finish_f32,
        f32,
        u32,
        16,
        __mmask16,
        _mm512_setzero_ps,
        _mm512_set1_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_fmadd_ps,
        lt_ps,
        _mm512_mask_blend_ps,
        _mm512_set1_epi32,
        _mm512_add_epi32,
        _mm512_mask_blend_epi32,
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_reduce_min_ps,
        _mm512_cmpeq_ps_mask,
        _mm512_mask_reduce_min_epu32
    );
    fused!(
        tile_f64,
        finish_f64,
        f64,
        u64,
        8,
        __mmask8,
        _mm512_setzero_pd,
        _mm512_set1_pd,
        _mm512_loadu_pd,
        _mm512_storeu_pd,
        _mm512_fmadd_pd,
        lt_pd,
        _mm512_mask_blend_pd,
        _mm512_set1_epi64,
        _mm512_add_epi64,
        _mm512_mask_blend_epi64,
        _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7),
        _mm512_reduce_min_pd,
        _mm512_cmpeq_pd_mask,
        _mm512_mask_reduce_min_epu64
    );

    /// `a < b` per lane (ordered: false with a NaN).
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn lt_ps(a: __m512, b: __m512) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b)
    }

    /// `a < b` per lane (ordered: false with a NaN).
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn lt_pd(a: __m512d, b: __m512d) -> __mmask8 {
        _mm512_cmp_pd_mask::<_CMP_LT_OQ>(a, b)
    }
}
