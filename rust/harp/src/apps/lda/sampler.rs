//! The collapsed Gibbs sampling step of one token, the log-likelihood, and the sequential
//! reference sampler the distributed one is checked against.

use crate::util::hash::splitmix64;
use crate::util::rng::Rng;

/// Lanes of the sampling kernel: topic i is in lane `i mod LANES`.
const LANES: usize = 16;

/// Scratch space of the sampling kernel for `k` topics.
#[derive(Debug, Clone)]
pub struct Scratch {
    p: Vec<f32>,
}

impl Scratch {
    pub fn new(k: usize) -> Scratch {
        Scratch { p: vec![0.0; k] }
    }
}

/// `1 / (n_k + Vβ)`, the factor of topic `k` that changes when a token moves.
#[inline(always)]
pub fn inverse(nk: i32, vbeta: f32) -> f32 {
    1.0 / (nk as f32 + vbeta)
}

/// 16 lane sums, aligned to a cache line: when the compiler keeps them on the stack, a vector
/// store of all 16 is then one line, not two (unaligned, its stores split over two lines and
/// the scalar loads that follow wait for them: the sampling ran about 15 % slower on a thread
/// whose stack happened to put them across a line).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Lanes([f32; LANES]);

/// The 16 lane sums of `p`: lane j adds `p[j], p[j + 16], …` in that order (one vector
/// register, or two, or four, whatever the CPU has: the same sums).
#[inline(always)]
fn lanes_of(p: &[f32]) -> Lanes {
    let mut acc = Lanes([0.0f32; LANES]);
    let acc_ = &mut acc.0;
    let mut chunks = p.chunks_exact(LANES);
    for c in &mut chunks {
        // A fixed-size array: the compiler turns the lane loop into vector additions.
        let c: &[f32; LANES] = c.try_into().expect("16");
        for j in 0..LANES {
            acc_[j] += c[j];
        }
    }
    for (a, &x) in acc_.iter_mut().zip(chunks.remainder()) {
        *a += x;
    }
    acc
}

/// Draws a topic for a token whose own assignment has been removed from the counts, with
/// probability proportional to `(n_dk + α)(n_wk + β) / (n_k + Vβ)`: `ndk` the document's
/// counts, `nwk` the word's, `inv` the topics' [`inverse`]s, `u` uniform in [0, 1).
///
/// The weights are summed in 16 lanes: lane j adds up the weights of topics j, j + 16,
/// j + 32, … ([`lanes_of`]: 16 independent sums, vector additions), the lanes' sums are
/// added pairwise into the total, and `u · total` is found lane by lane, then inside its lane
/// (what rounding leaves over goes to the last topic of the last lane).
/// Every operation is the same, in the same order, whatever vector width the compiler uses, so
/// the same topic is drawn on any CPU. Both samplers call it, so they draw the same topic from
/// the same counts and random number.
#[inline(always)]
pub fn draw(
    ndk: &[i32],
    nwk: &[i32],
    inv: &[f32],
    alpha: f32,
    beta: f32,
    s: &mut Scratch,
    u: f32,
) -> usize {
    let k = inv.len();
    let (ndk, nwk, p) = (&ndk[..k], &nwk[..k], &mut s.p[..k]);
    for i in 0..k {
        p[i] = (ndk[i] as f32 + alpha) * (nwk[i] as f32 + beta) * inv[i];
    }
    let acc = lanes_of(p);
    let mut half = acc;
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for j in 0..n {
            half.0[j] += half.0[j + n];
        }
    }
    let mut x = u * half.0[0];
    // The last lane takes what rounding leaves over.
    let lanes = k.min(LANES);
    for (j, &sum) in acc.0[..lanes].iter().enumerate() {
        if x < sum || j + 1 == lanes {
            let mut i = j;
            while i + LANES < k {
                if x < p[i] {
                    return i;
                }
                x -= p[i];
                i += LANES;
            }
            return i;
        }
        x -= sum;
    }
    k - 1
}

/// Asks the CPU to bring the counts `row` into its cache, ahead of their use.
#[inline(always)]
pub fn prefetch(row: &[i32]) {
    #[cfg(target_arch = "x86_64")]
    for line in row.chunks(16) {
        // SAFETY: a prefetch reads nothing the program sees and cannot fault; the address is
        // inside `row`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// Uniform in [0, 1) with 24 random bits (an f32's precision).
#[inline(always)]
pub fn uniform_f32(rng: &mut Rng) -> f32 {
    (rng.next_u64() >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// The random stream of one piece of work: iteration `it`, word slice `slice`, document block
/// `block` and sub-slice `sub` (the sequential sampler's is `(it, 0, 0, 0)`).
pub fn stream(seed: u64, it: usize, slice: usize, block: usize, sub: usize) -> Rng {
    let mut h = splitmix64(seed);
    for x in [it, slice, block, sub] {
        h = splitmix64(h ^ x as u64);
    }
    Rng::new(h)
}

/// The topic a token starts with: a hash of the seed, its document's id and its position, so
/// that it does not depend on how documents are spread over workers and threads.
pub fn initial_topic(seed: u64, doc: u64, pos: usize, k: usize) -> u16 {
    let h = splitmix64(splitmix64(seed ^ 0x5EED_1DA0) ^ doc ^ splitmix64(pos as u64));
    ((h as u128 * k as u128) >> 64) as u16
}

/// The hash of a document id that [`initial_topic`] takes.
pub fn doc_hash(id: &[u8]) -> u64 {
    crate::util::hash::fnv1a64(id)
}

/// ln Γ(x) for x > 0: the recurrence up to x ≥ 10, then Stirling's series (relative error
/// below 1e-14 there).
pub fn lgamma(x: f64) -> f64 {
    let mut x = x;
    let mut shift = 0.0;
    while x < 10.0 {
        shift -= x.ln();
        x += 1.0;
    }
    let r = 1.0 / x;
    let r2 = r * r;
    let series = r * (1.0 / 12.0 - r2 * (1.0 / 360.0 - r2 * (1.0 / 1260.0 - r2 * (1.0 / 1680.0))));
    shift + (x - 0.5) * x.ln() - x + 0.918_938_533_204_672_8 + series
}

/// `lgamma(n + base) − lgamma(base)` for counts `n`, tabulated for small ones.
pub struct LgammaTable {
    base: f64,
    at_base: f64,
    small: Vec<f64>,
}

impl LgammaTable {
    pub fn new(base: f64) -> LgammaTable {
        let at_base = lgamma(base);
        let small = (0..4096)
            .map(|n| lgamma(n as f64 + base) - at_base)
            .collect();
        LgammaTable {
            base,
            at_base,
            small,
        }
    }

    #[inline]
    pub fn of(&self, n: i32) -> f64 {
        match self.small.get(n as usize) {
            Some(&v) => v,
            None => lgamma(n as f64 + self.base) - self.at_base,
        }
    }
}

/// The document part of the joint log-likelihood log p(w, z): for each document
/// `lgamma(Kα) − lgamma(N_d + Kα) + Σ_k [lgamma(n_dk + α) − lgamma(α)]`. `ndk` holds the
/// documents' counts one after the other, `k` per document.
pub fn ll_docs(ndk: &[i32], k: usize, alpha: f64, table: &LgammaTable) -> f64 {
    let ka = k as f64 * alpha;
    let lg_ka = lgamma(ka);
    let mut ll = 0.0;
    for d in ndk.chunks(k) {
        let mut n = 0i64;
        let mut s = 0.0;
        for &c in d {
            n += c as i64;
            s += table.of(c);
        }
        ll += lg_ka - lgamma(n as f64 + ka) + s;
    }
    ll
}

/// The word rows' part of the joint log-likelihood: `Σ_w Σ_k [lgamma(n_wk + β) − lgamma(β)]`.
pub fn ll_words(nwk: &[i32], table: &LgammaTable) -> f64 {
    nwk.iter().map(|&c| table.of(c)).sum()
}

/// The topic totals' part: `Σ_k [lgamma(Vβ) − lgamma(n_k + Vβ)]`.
pub fn ll_totals(nk: &[i64], v: usize, beta: f64) -> f64 {
    let vb = v as f64 * beta;
    let lg = lgamma(vb);
    nk.iter().map(|&n| lg - lgamma(n as f64 + vb)).sum()
}

/// The state of the sequential sampler.
#[derive(Debug, Clone)]
pub struct Sequential {
    pub k: usize,
    pub v: usize,
    /// Document-topic counts, `k` per document.
    pub ndk: Vec<i32>,
    /// Word-topic counts, `k` per word.
    pub nwk: Vec<i32>,
    pub nk: Vec<i32>,
    /// Every token's topic, documents one after the other.
    pub z: Vec<u16>,
    /// Log-likelihood per token after each iteration.
    pub ll: Vec<f64>,
}

/// The plain collapsed Gibbs sampler: every token of every document in input order, the counts
/// updated after each draw, one random stream per iteration (`stream(seed, it, 0, 0, 0)`).
/// `docs[d]` is document d's `(id, word ids)`; words are below `v`.
pub fn sequential(
    docs: &[(Vec<u8>, Vec<u32>)],
    v: usize,
    k: usize,
    alpha: f64,
    beta: f64,
    seed: u64,
    iterations: usize,
) -> Sequential {
    let mut st = Sequential {
        k,
        v,
        ndk: vec![0; docs.len() * k],
        nwk: vec![0; v * k],
        nk: vec![0; k],
        z: Vec::new(),
        ll: Vec::new(),
    };
    for (d, (id, words)) in docs.iter().enumerate() {
        let h = doc_hash(id);
        for (i, &w) in words.iter().enumerate() {
            let t = initial_topic(seed, h, i, k);
            st.z.push(t);
            st.ndk[d * k + t as usize] += 1;
            st.nwk[w as usize * k + t as usize] += 1;
            st.nk[t as usize] += 1;
        }
    }
    let tokens: usize = docs.iter().map(|d| d.1.len()).sum();
    let (af, bf, vbeta) = (alpha as f32, beta as f32, (v as f64 * beta) as f32);
    let mut scratch = Scratch::new(k);
    let (ta, tb) = (LgammaTable::new(alpha), LgammaTable::new(beta));
    for it in 0..iterations {
        let mut rng = stream(seed, it, 0, 0, 0);
        let mut inv: Vec<f32> = st.nk.iter().map(|&n| inverse(n, vbeta)).collect();
        let mut at = 0;
        for (d, (_, words)) in docs.iter().enumerate() {
            for &w in words {
                let old = st.z[at] as usize;
                let (nd, nw) = (d * k, w as usize * k);
                st.ndk[nd + old] -= 1;
                st.nwk[nw + old] -= 1;
                st.nk[old] -= 1;
                inv[old] = inverse(st.nk[old], vbeta);
                let u = uniform_f32(&mut rng);
                let new = draw(
                    &st.ndk[nd..nd + k],
                    &st.nwk[nw..nw + k],
                    &inv,
                    af,
                    bf,
                    &mut scratch,
                    u,
                );
                st.ndk[nd + new] += 1;
                st.nwk[nw + new] += 1;
                st.nk[new] += 1;
                inv[new] = inverse(st.nk[new], vbeta);
                st.z[at] = new as u16;
                at += 1;
            }
        }
        let nk: Vec<i64> = st.nk.iter().map(|&n| n as i64).collect();
        let ll = ll_docs(&st.ndk, k, alpha, &ta) + ll_words(&st.nwk, &tb) + ll_totals(&nk, v, beta);
        st.ll.push(ll / tokens.max(1) as f64);
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lgamma_matches_known_values() {
        let cases = [
            (1.0, 0.0),
            (2.0, 0.0),
            (0.5, 0.5 * std::f64::consts::PI.ln()),
            (10.0, 362_880f64.ln()),
            (0.01, 4.599_479_878_042_022),
            (100.5, 361.435_540_467_777_6),
        ];
        for (x, want) in cases {
            let got = lgamma(x);
            assert!(
                (got - want).abs() <= 1e-11 * want.abs().max(1.0),
                "lgamma({x}) = {got}, not {want}"
            );
        }
        let t = LgammaTable::new(0.1);
        assert_eq!(t.of(0), 0.0);
        assert!((t.of(5000) - (lgamma(5000.1) - lgamma(0.1))).abs() < 1e-9);
    }

    /// Draws `n` topics with uniform numbers from `seed` and checks that their frequencies
    /// follow the weights `(n_dk + α)(n_wk + β)·inv` (within 5 standard deviations).
    fn follows(ndk: &[i32], nwk: &[i32], inv: &[f32], a: f32, b: f32, n: usize, seed: u64) {
        let k = inv.len();
        let mut s = Scratch::new(k);
        let mut rng = Rng::new(seed);
        let mut hits = vec![0usize; k];
        for _ in 0..n {
            hits[draw(ndk, nwk, inv, a, b, &mut s, uniform_f32(&mut rng))] += 1;
        }
        let w: Vec<f64> = (0..k)
            .map(|i| (ndk[i] as f64 + a as f64) * (nwk[i] as f64 + b as f64) * inv[i] as f64)
            .collect();
        let total: f64 = w.iter().sum();
        for i in 0..k {
            let want = w[i] / total * n as f64;
            assert!(
                (hits[i] as f64 - want).abs() < 5.0 * want.sqrt() + 5.0,
                "topic {i}: {} vs {want}",
                hits[i]
            );
        }
    }

    #[test]
    fn draw_follows_the_weights() {
        // Topic weights (n_dk + α)(n_wk + β)/(n_k + Vβ) with α = β = 0 and equal totals are
        // n_dk·n_wk: 0, 1, 0, …, 3 over 11 topics: topic 1 takes a quarter of u.
        let k = 11;
        let mut ndk = vec![0; k];
        let mut nwk = vec![0; k];
        ndk[1] = 1;
        nwk[1] = 1;
        ndk[10] = 3;
        nwk[10] = 1;
        let inv = vec![1.0f32; k];
        let mut s = Scratch::new(k);
        assert_eq!(draw(&ndk, &nwk, &inv, 0.0, 0.0, &mut s, 0.0), 1);
        assert_eq!(draw(&ndk, &nwk, &inv, 0.0, 0.0, &mut s, 0.2499), 1);
        assert_eq!(draw(&ndk, &nwk, &inv, 0.0, 0.0, &mut s, 0.2501), 10);
        assert_eq!(draw(&ndk, &nwk, &inv, 0.0, 0.0, &mut s, 0.9999999), 10);
        // Frequencies over many uniform draws follow the weights (α, β > 0: every topic).
        follows(&ndk, &nwk, &inv, 0.5, 0.5, 200_000, 3);
    }

    #[test]
    fn draw_follows_the_weights_over_many_lanes() {
        // 37 topics: two full rows of 16 lanes and 5 more. Random counts; the frequencies of
        // the drawn topics follow the weights, and u = 0 draws the first topic of lane 0 with
        // a positive weight.
        let k = 37;
        let mut rng = Rng::new(11);
        let ndk: Vec<i32> = (0..k).map(|_| (rng.next_u64() % 5) as i32).collect();
        let nwk: Vec<i32> = (0..k).map(|_| (rng.next_u64() % 7) as i32).collect();
        let inv: Vec<f32> = (0..k).map(|i| inverse(100 + i as i32, 2.0)).collect();
        let mut s = Scratch::new(k);
        let first = [0, 16, 32]
            .into_iter()
            .find(|&i| ndk[i] > 0 && nwk[i] > 0)
            .unwrap_or(usize::MAX);
        if first != usize::MAX {
            assert_eq!(draw(&ndk, &nwk, &inv, 0.0, 0.0, &mut s, 0.0), first);
        }
        let (a, b) = (0.3f32, 0.2f32);
        follows(&ndk, &nwk, &inv, a, b, 400_000, 5);
        // The largest u takes the last topic of the last lane with weight.
        let top = draw(&ndk, &nwk, &inv, a, b, &mut s, 0.99999994);
        assert_eq!(top % 16, 15, "{top}");
    }

    #[test]
    fn the_sequential_sampler_keeps_its_counts_consistent() {
        let docs: Vec<(Vec<u8>, Vec<u32>)> = (0..20)
            .map(|d| {
                let words = (0..15).map(|i| ((d * 7 + i * 3) % 13) as u32).collect();
                (format!("d{d}").into_bytes(), words)
            })
            .collect();
        let st = sequential(&docs, 13, 4, 0.1, 0.01, 9, 5);
        let n: i32 = st.nk.iter().sum();
        assert_eq!(n, 300);
        for t in 0..4 {
            let by_word: i32 = (0..13).map(|w| st.nwk[w * 4 + t]).sum();
            let by_doc: i32 = (0..20).map(|d| st.ndk[d * 4 + t]).sum();
            assert_eq!((by_word, by_doc), (st.nk[t], st.nk[t]));
        }
        assert_eq!(st.ll.len(), 5);
        assert!(
            st.ll.iter().all(|l| l.is_finite() && *l < 0.0),
            "{:?}",
            st.ll
        );
    }
}
