//! The engine's random generator: xoshiro256** seeded by splitmix64, normals by Box–Muller.
//! Its sequence for a seed is fixed forever (generated data sets, initial layouts and the
//! tests' tables depend on it), whatever the crate versions.

use super::hash::splitmix64;

/// xoshiro256** with a Box–Muller normal generator. Its sequence for a seed is fixed forever.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
    spare: Option<f64>,
}

impl Rng {
    /// Seeds the state with four successive splitmix64 outputs.
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut s = [0u64; 4];
        for v in &mut s {
            *v = splitmix64(x);
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        }
        Rng { s, spare: None }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Uniform integer in [0, n) (multiply-high; bias < n / 2^64).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// Standard normal (Box–Muller; the second value of each pair is kept for the next call).
    pub fn normal(&mut self) -> f64 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let u1 = 1.0 - self.next_f64(); // (0, 1]: ln is finite
        let u2 = self.next_f64();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
        self.spare = Some(r * s);
        r * c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prng_sequence_is_fixed() {
        // Pinned values: if these change, every generated data set changes.
        let mut r = Rng::new(42);
        let first: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        let mut again = Rng::new(42);
        assert_eq!(first, (0..3).map(|_| again.next_u64()).collect::<Vec<_>>());
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(first, PINNED_42.to_vec());
        // Uniform and normal moments are sane.
        let mut r = Rng::new(7);
        let n = 200_000;
        let (mut s, mut s2) = (0.0, 0.0);
        for _ in 0..n {
            let v = r.normal();
            s += v;
            s2 += v * v;
        }
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "mean {mean} var {var}"
        );
        assert!((0..10_000).all(|_| (0.0..1.0).contains(&r.next_f64())));
        assert!((0..10_000).all(|_| r.below(7) < 7));
    }

    /// xoshiro256** seeded by splitmix64(42), checked against an independent implementation.
    const PINNED_42: [u64; 3] = [
        1546998764402558742,
        6990951692964543102,
        12544586762248559009,
    ];
}
