//! Micro-benchmark of the map kernel on in-memory data.

use std::time::Instant;

use super::gen::blobs_in_memory;
use super::kernel::Kernel;
use crate::util::Rng;

/// Result of [`bench_kernel`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KernelBench {
    pub n: usize,
    pub dim: usize,
    pub k: usize,
    pub threads: usize,
    pub reps: usize,
    /// Median wall time of one `assign_accumulate` call over all `n` points.
    pub secs_per_iter_median: f64,
    /// `2 n k dim` flops (the distance GEMM) per iteration divided by the median time, in 10^9/s.
    pub gflops: f64,
    /// Every timed repetition, in seconds.
    pub secs: Vec<f64>,
}

/// Times `reps` calls (after one warm-up call) of the kernel on `n` random points of dimension
/// `dim` (Gaussian blobs, as the generator writes) against `k` random centroids, on `threads`
/// threads.
///
/// # Panics
/// If `n`, `dim`, `k` or `reps` is 0, or the threads cannot be started.
pub fn bench_kernel(
    n: usize,
    dim: usize,
    k: usize,
    threads: usize,
    reps: usize,
    seed: u64,
) -> KernelBench {
    assert!(
        n > 0 && dim > 0 && k > 0 && reps > 0,
        "bench_kernel: n, dim, k and reps must be > 0"
    );
    let points = blobs_in_memory(n, dim, k.min(64), seed);
    let mut rng = Rng::new(seed ^ 0xbe4c);
    let centroids: Vec<f64> = (0..k * dim).map(|_| rng.uniform(-10.0, 10.0)).collect();
    let kernel = Kernel::new(threads).expect("starting the kernel threads");
    let mut sums = vec![0.0; k * dim];
    let mut counts = vec![0.0; k];
    kernel.assign_accumulate(&points, dim, &centroids, k, &mut sums, &mut counts);
    let mut secs = Vec::with_capacity(reps);
    for _ in 0..reps {
        sums.fill(0.0);
        counts.fill(0.0);
        let t = Instant::now();
        let inertia = kernel.assign_accumulate(&points, dim, &centroids, k, &mut sums, &mut counts);
        secs.push(t.elapsed().as_secs_f64());
        std::hint::black_box(inertia);
    }
    let mut sorted = secs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = if reps % 2 == 1 {
        sorted[reps / 2]
    } else {
        (sorted[reps / 2 - 1] + sorted[reps / 2]) / 2.0
    };
    let flops = 2.0 * n as f64 * k as f64 * dim as f64;
    KernelBench {
        n,
        dim,
        k,
        threads: kernel.threads(),
        reps,
        secs_per_iter_median: median,
        gflops: flops / median / 1e9,
        secs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_reports_consistent_figures() {
        let b = bench_kernel(3000, 8, 16, 2, 3, 1);
        assert_eq!(b.secs.len(), 3);
        assert!(b.secs.contains(&b.secs_per_iter_median));
        let flops = 2.0 * 3000.0 * 16.0 * 8.0;
        assert!((b.gflops - flops / b.secs_per_iter_median / 1e9).abs() < 1e-9 * b.gflops);
        let json = serde_json::to_string(&b).unwrap();
        assert!(json.contains("\"gflops\"") && json.contains("\"secs_per_iter_median\""));
    }
}
