//! The two floating-point types K-means computes in ([`f32`] and [`f64`]) behind one trait.

use std::fmt::Debug;
use std::ops::{Add, Mul, Sub};

/// A floating-point element type of points, centroids and distances.
pub trait Real:
    Copy
    + Send
    + Sync
    + Debug
    + Default
    + PartialOrd
    + bytemuck::Pod
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + 'static
{
    const ZERO: Self;
    const INFINITY: Self;
    /// "f32" or "f64".
    const NAME: &'static str;
    /// The type's machine epsilon and largest finite value, as f64.
    const EPSILON: f64;
    const MAX: f64;
    /// Exact widening (f32) or identity (f64).
    fn to_f64(self) -> f64;
    /// Rounding to nearest (f32) or identity (f64).
    fn from_f64(v: f64) -> Self;
    /// Parses a decimal number straight to this type (correctly rounded, no double rounding).
    fn parse(s: &str) -> Option<Self>;
    /// `C ← α A B + β C` through `matrixmultiply` (`sgemm` or `dgemm`).
    ///
    /// # Safety
    /// As `matrixmultiply::dgemm`: the pointers and strides must describe matrices of the given
    /// shapes inside live allocations, and `c` must not alias `a` or `b`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

macro_rules! real {
    ($t:ty, $gemm:path) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const INFINITY: Self = <$t>::INFINITY;
            const NAME: &'static str = stringify!($t);
            const EPSILON: f64 = <$t>::EPSILON as f64;
            const MAX: f64 = <$t>::MAX as f64;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn parse(s: &str) -> Option<Self> {
                s.parse::<$t>().ok()
            }
            #[inline]
            unsafe fn gemm(
                m: usize,
                k: usize,
                n: usize,
                alpha: Self,
                a: *const Self,
                rsa: isize,
                csa: isize,
                b: *const Self,
                rsb: isize,
                csb: isize,
                beta: Self,
                c: *mut Self,
                rsc: isize,
                csc: isize,
            ) {
                // SAFETY: forwarded to the caller.
                unsafe { $gemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) }
            }
        }
    };
}

real!(f32, matrixmultiply::sgemm);
real!(f64, matrixmultiply::dgemm);

/// The squared Euclidean distance `Σ (x_d − c_d)²`, computed in f64 in coordinate order. Every
/// exact decision (the pruned path, the reference) uses this one function.
#[inline(always)]
pub fn dist2<T: Real>(x: &[T], c: &[T]) -> f64 {
    let mut s = 0.0f64;
    for (a, b) in x.iter().zip(c) {
        let d = a.to_f64() - b.to_f64();
        s += d * d;
    }
    s
}

/// The squared Euclidean distance in f64 with eight independent partial sums (vectorises; the
/// summation order differs from [`dist2`]). Used for the reported inertia, never for decisions.
#[inline(always)]
pub fn dist2_fast<T: Real>(x: &[T], c: &[T]) -> f64 {
    let mut acc = [0.0f64; 8];
    let (xh, xt) = x.split_at(x.len() / 8 * 8);
    let (ch, ct) = c.split_at(xh.len());
    for (a, b) in xh.chunks_exact(8).zip(ch.chunks_exact(8)) {
        for l in 0..8 {
            let d = a[l].to_f64() - b[l].to_f64();
            acc[l] += d * d;
        }
    }
    let mut s = 0.0;
    for (a, b) in xt.iter().zip(ct) {
        let d = a.to_f64() - b.to_f64();
        s += d * d;
    }
    s + acc.iter().sum::<f64>()
}
