//! The exact pruned assignment for low dimensions and many centroids: a KD-tree over the
//! centroids, searched per point with bounds that are exact in floating point, seeded by the
//! point's previous centroid, plus the half-distance test of Elkan/Hamerly.
//!
//! **Exactness.** Every decision uses [`dist2_f64`]: `Σ (x_d − c_d)²` in f64, in coordinate order,
//! on the exact f64 values of the points and centroids — the same arithmetic as the reference
//! ([`nearest_naive`](super::kernel::nearest_naive)). A node is skipped only when its box bound
//! is *strictly* greater than the best distance found, and the box bound is computed with the
//! same operations on a box corner coordinate instead of the centroid's: floating-point
//! subtraction, squaring and addition are monotonic, so the bound never exceeds the computed
//! distance of any centroid inside the box. Equal distances keep the lowest index. The search
//! therefore returns exactly the reference's answer (minimum computed distance, lowest index),
//! whatever the seed.
//!
//! **Neighbour lists (after the first iteration).** Each centroid `a` lists its 32 nearest
//! other centroids in ascending distance. A point previously assigned to `a` computes
//! `da = ‖x − c_a‖²`, then scans `a`'s list while `‖c_j − c_a‖ ≤ √da + √best` (by the triangle
//! inequality no later centroid can be closer than the best found). If the list ends before that
//! bound is passed, the tree search finishes the job, seeded with the best found. The stopping
//! test carries a relative margin of 1e-9, far above the rounding error of `dist2_f64`
//! (≈ 1e-15 relative for d ≤ 64), so a centroid is skipped only when it is strictly farther, and
//! the answer stays the reference's (ties included). This is the half-distance test of
//! Elkan/Hamerly generalised to a sorted neighbour list.

use rayon::prelude::*;

use super::kernel::{Kernel, Partial, CHUNK_POINTS};
use super::real::Real;

/// Centroids per leaf of the tree.
const LEAF: usize = 8;
/// Neighbours listed per centroid.
const NEIGHBOURS: usize = 32;
/// Relative safety margin of the half-distance test.
const HALF_MARGIN: f64 = 1e-9;

/// `Σ (x_d − c_d)²` in f64, in coordinate order (the reference's arithmetic on f64 values).
#[inline(always)]
pub fn dist2_f64(x: &[f64], c: &[f64]) -> f64 {
    let mut s = 0.0f64;
    for (a, b) in x.iter().zip(c) {
        let d = a - b;
        s += d * d;
    }
    s
}

#[derive(Clone, Copy, Debug)]
struct Node {
    /// Range of the tree's centroid order covered by this node.
    start: u32,
    end: u32,
    /// Children (index into `nodes`); `u32::MAX` for a leaf.
    left: u32,
    right: u32,
}

/// A KD-tree over `k` centroids of dimension `dim`, with tight bounding boxes.
pub struct CentroidTree {
    dim: usize,
    nodes: Vec<Node>,
    /// Per node, `dim` lower then `dim` upper box coordinates.
    boxes: Vec<f64>,
    /// Centroid coordinates in tree order (leaf-contiguous), as f64.
    coords: Vec<f64>,
    /// Original index of each centroid in tree order.
    index: Vec<u32>,
    /// Per centroid (original index), its [`NEIGHBOURS`] nearest other centroids in
    /// `nb_index[a*NEIGHBOURS..]` (ascending squared distance `nb_dist2`, then index; padded
    /// with `u32::MAX`/infinity when k is small).
    nb_index: Vec<u32>,
    nb_dist2: Vec<f64>,
    /// Per centroid, a squared distance that no unlisted centroid is closer than.
    cover2: Vec<f64>,
    /// The centroids in their original order, as f64.
    centroids: Vec<f64>,
}

impl CentroidTree {
    /// Builds the tree over `centroids` (`k` rows of `dim` values).
    ///
    /// # Panics
    /// If `dim == 0` or the length is not a multiple of `dim`.
    pub fn new<T: Real>(centroids: &[T], dim: usize) -> CentroidTree {
        assert!(
            dim > 0 && centroids.len() / dim * dim == centroids.len(),
            "bad centroid shape"
        );
        let k = centroids.len() / dim;
        let c64: Vec<f64> = centroids.iter().map(|v| v.to_f64()).collect();
        let mut order: Vec<u32> = (0..k as u32).collect();
        let mut t = CentroidTree {
            dim,
            nodes: Vec::with_capacity(2 * k / LEAF + 2),
            boxes: Vec::new(),
            coords: Vec::with_capacity(k * dim),
            index: Vec::new(),
            nb_index: Vec::new(),
            nb_dist2: Vec::new(),
            cover2: Vec::new(),
            centroids: c64,
        };
        if k > 0 {
            t.build(&mut order, 0);
        }
        for &j in &order {
            let j = j as usize;
            t.coords
                .extend_from_slice(&t.centroids[j * dim..(j + 1) * dim]);
        }
        t.index = order;
        // The neighbour lists, in parallel (on the caller's rayon pool).
        let lists: Vec<(Vec<u32>, Vec<f64>)> = (0..k)
            .into_par_iter()
            .map(|a| t.knn(&t.centroids[a * dim..(a + 1) * dim], a as u32))
            .collect();
        t.nb_index = vec![u32::MAX; k * NEIGHBOURS];
        t.nb_dist2 = vec![f64::INFINITY; k * NEIGHBOURS];
        t.cover2 = vec![f64::INFINITY; k];
        for (a, (idx, d2)) in lists.into_iter().enumerate() {
            t.nb_index[a * NEIGHBOURS..a * NEIGHBOURS + idx.len()].copy_from_slice(&idx);
            t.nb_dist2[a * NEIGHBOURS..a * NEIGHBOURS + d2.len()].copy_from_slice(&d2);
            if idx.len() == NEIGHBOURS {
                t.cover2[a] = d2[NEIGHBOURS - 1];
            }
        }
        t
    }

    /// The [`NEIGHBOURS`] centroids nearest to `c` other than `exclude` (fewer if k is small),
    /// by ascending [`dist2_f64`] then index. Every centroid not returned (other than `exclude`)
    /// is at least as far as the last one returned.
    fn knn(&self, c: &[f64], exclude: u32) -> (Vec<u32>, Vec<f64>) {
        let dim = self.dim;
        let mut idx: Vec<u32> = Vec::with_capacity(NEIGHBOURS + 1);
        let mut d2: Vec<f64> = Vec::with_capacity(NEIGHBOURS + 1);
        let mut stack = [0u32; 128];
        let mut top = 1;
        while top > 0 {
            top -= 1;
            let id = stack[top] as usize;
            let worst = if idx.len() == NEIGHBOURS {
                d2[NEIGHBOURS - 1]
            } else {
                f64::INFINITY
            };
            if self.bound(id, c) > worst {
                continue;
            }
            let n = self.nodes[id];
            if n.left == u32::MAX {
                for p in n.start as usize..n.end as usize {
                    let j = self.index[p];
                    if j == exclude {
                        continue;
                    }
                    let d = dist2_f64(c, &self.coords[p * dim..(p + 1) * dim]);
                    let at = d2
                        .iter()
                        .zip(&idx)
                        .position(|(&e, &i)| d < e || (d == e && j < i))
                        .unwrap_or(d2.len());
                    if at < NEIGHBOURS {
                        d2.insert(at, d);
                        idx.insert(at, j);
                        d2.truncate(NEIGHBOURS);
                        idx.truncate(NEIGHBOURS);
                    }
                }
                continue;
            }
            // Nearer child on top of the stack, so the list fills with near centroids first.
            let (l, r) = (n.left as usize, n.right as usize);
            let (near, far) = if self.bound(l, c) <= self.bound(r, c) {
                (l, r)
            } else {
                (r, l)
            };
            stack[top] = far as u32;
            stack[top + 1] = near as u32;
            top += 2;
        }
        (idx, d2)
    }

    /// Number of centroids.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True if there are no centroids.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Builds the subtree over `order[..]` (which starts at tree position `at`); returns its node.
    fn build(&mut self, order: &mut [u32], at: usize) -> u32 {
        let dim = self.dim;
        let id = self.nodes.len();
        self.nodes.push(Node {
            start: at as u32,
            end: (at + order.len()) as u32,
            left: u32::MAX,
            right: u32::MAX,
        });
        let mut lo = vec![f64::INFINITY; dim];
        let mut hi = vec![f64::NEG_INFINITY; dim];
        for &j in order.iter() {
            let c = &self.centroids[j as usize * dim..(j as usize + 1) * dim];
            for d in 0..dim {
                lo[d] = lo[d].min(c[d]);
                hi[d] = hi[d].max(c[d]);
            }
        }
        self.boxes.extend_from_slice(&lo);
        self.boxes.extend_from_slice(&hi);
        if order.len() <= LEAF {
            return id as u32;
        }
        let split = (0..dim)
            .max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b])))
            .unwrap_or(0);
        if hi[split] <= lo[split] {
            return id as u32; // all identical: one leaf, whatever its size
        }
        let mid = order.len() / 2;
        let cs = &self.centroids;
        order.select_nth_unstable_by(mid, |&a, &b| {
            cs[a as usize * dim + split]
                .total_cmp(&cs[b as usize * dim + split])
                .then(a.cmp(&b))
        });
        let (l, r) = order.split_at_mut(mid);
        let left = self.build(l, at);
        let right = self.build(r, at + mid);
        self.nodes[id].left = left;
        self.nodes[id].right = right;
        id as u32
    }

    /// Lower bound of the distance from `x` to the box of `node` (see the module doc).
    #[inline(always)]
    fn bound(&self, node: usize, x: &[f64]) -> f64 {
        let dim = self.dim;
        let b = &self.boxes[node * 2 * dim..(node + 1) * 2 * dim];
        let (lo, hi) = b.split_at(dim);
        let mut s = 0.0f64;
        for d in 0..dim {
            let v = x[d];
            let t = if v < lo[d] {
                lo[d] - v
            } else if v > hi[d] {
                v - hi[d]
            } else {
                0.0
            };
            s += t * t;
        }
        s
    }

    /// The nearest centroid to `x` (minimum [`dist2_f64`], lowest index on ties), starting from
    /// the candidate (`best`, `best_j`) (use `INFINITY`, `u32::MAX` for none), never returning
    /// `exclude`. Returns (distance², index); (`INFINITY`, `u32::MAX`) if there is no centroid.
    pub fn nearest(
        &self,
        x: &[f64],
        mut best: f64,
        mut best_j: u32,
        exclude: Option<u32>,
    ) -> (f64, u32) {
        if self.nodes.is_empty() {
            return (best, best_j);
        }
        let dim = self.dim;
        // Median splits halve the node size, so the depth is at most log2(k) < 64 and the stack
        // never holds more than depth + 1 entries.
        let mut stack = [0u32; 128];
        let mut top = 1;
        while top > 0 {
            top -= 1;
            let id = stack[top] as usize;
            if self.bound(id, x) > best {
                continue;
            }
            let n = self.nodes[id];
            if n.left == u32::MAX {
                for p in n.start as usize..n.end as usize {
                    let j = self.index[p];
                    if Some(j) == exclude {
                        continue;
                    }
                    let d = dist2_f64(x, &self.coords[p * dim..(p + 1) * dim]);
                    if d < best || (d == best && j < best_j) {
                        best = d;
                        best_j = j;
                    }
                }
                continue;
            }
            let (l, r) = (n.left as usize, n.right as usize);
            let (bl, br) = (self.bound(l, x), self.bound(r, x));
            // Push the farther child first so that the nearer one is searched first.
            let (near, far, bfar) = if bl <= br { (l, r, br) } else { (r, l, bl) };
            if bfar <= best {
                stack[top] = far as u32;
                top += 1;
            }
            stack[top] = near as u32;
            top += 1;
        }
        (best, best_j)
    }

    /// The reference's nearest centroid of `x`, using `prev` (the point's previous centroid, or
    /// `u32::MAX`) as a seed and the half-distance test.
    #[inline]
    pub fn assign(&self, x: &[f64], prev: u32) -> (f64, u32) {
        let dim = self.dim;
        if (prev as usize) < self.len() {
            let a = prev as usize;
            let da = dist2_f64(x, &self.centroids[a * dim..(a + 1) * dim]);
            let ra = da.sqrt();
            let (mut best, mut best_j) = (da, prev);
            // A centroid j with ‖c_j − c_a‖ > √da + √best (by the margin) is farther from x
            // than the best so far: ‖x − c_j‖ ≥ ‖c_j − c_a‖ − ‖x − c_a‖ > √best.
            let limit = |best: f64| {
                let l = ra + best.sqrt();
                l * l * (1.0 + HALF_MARGIN)
            };
            let nb = a * NEIGHBOURS..(a + 1) * NEIGHBOURS;
            for (&j, &s) in self.nb_index[nb.clone()].iter().zip(&self.nb_dist2[nb]) {
                if s > limit(best) {
                    return (best, best_j); // so is every later neighbour and every other one
                }
                if j == u32::MAX {
                    return (best, best_j); // all centroids were listed
                }
                let d = dist2_f64(x, &self.centroids[j as usize * dim..(j as usize + 1) * dim]);
                if d < best || (d == best && j < best_j) {
                    best = d;
                    best_j = j;
                }
            }
            if self.cover2[a] > limit(best) {
                return (best, best_j);
            }
            return self.nearest(x, best, best_j, None);
        }
        if self.is_empty() {
            return (f64::INFINITY, u32::MAX);
        }
        // No previous centroid: seed with the nearest centroid of the leaf reached by going down
        // to the nearer child at every level (usually the answer or a neighbour of it).
        self.assign(x, self.descend(x))
    }

    /// A centroid near `x`: the nearest one in the leaf reached by always taking the child with
    /// the smaller box bound (no backtracking; only a seed for [`CentroidTree::assign`]).
    fn descend(&self, x: &[f64]) -> u32 {
        let mut id = 0;
        loop {
            let n = self.nodes[id];
            if n.left == u32::MAX {
                let dim = self.dim;
                let (mut best, mut best_j) = (f64::INFINITY, self.index[n.start as usize]);
                for p in n.start as usize..n.end as usize {
                    let d = dist2_f64(x, &self.coords[p * dim..(p + 1) * dim]);
                    if d < best {
                        (best, best_j) = (d, self.index[p]);
                    }
                }
                return best_j;
            }
            let (l, r) = (n.left as usize, n.right as usize);
            id = if self.bound(l, x) <= self.bound(r, x) {
                l
            } else {
                r
            };
        }
    }
}

/// The pruned assignment step: as [`Kernel::assign`] (same sums, counts and labels as the
/// reference, inertia as the exact-form sum in f64), with `labels` holding each point's
/// previous centroid on entry (`u32::MAX`: none) and its new one on return.
///
/// Work is split into the kernel's fixed chunks, so results do not depend on the thread count.
///
/// # Panics
/// If the shapes do not match (see [`Kernel::assign`]) or `labels` has not one entry per point.
#[allow(clippy::too_many_arguments)]
pub fn assign<T: Real>(
    kernel: &Kernel,
    points: &[T],
    dim: usize,
    centroids: &[T],
    k: usize,
    sums: &mut [f64],
    counts: &mut [f64],
    labels: &mut [u32],
) -> f64 {
    super::kernel::check_shapes(points, dim, centroids, k, sums, counts);
    let n = points.len() / dim;
    assert_eq!(labels.len(), n, "labels must hold one value per point");
    let tree = kernel.install(|| CentroidTree::new(centroids, dim));
    let jobs: Vec<(&[T], &mut [u32])> = points
        .chunks(CHUNK_POINTS * dim)
        .zip(labels.chunks_mut(CHUNK_POINTS))
        .collect();
    let wave = (kernel.threads() * 2).max(1);
    let mut inertia = 0.0;
    let mut jobs = jobs.into_iter().peekable();
    while jobs.peek().is_some() {
        let group: Vec<(&[T], &mut [u32])> = jobs.by_ref().take(wave).collect();
        let partials: Vec<Partial> = kernel.install(|| {
            group
                .into_par_iter()
                .map(|(pts, lab)| {
                    let mut part = Partial::new(k, dim);
                    let mut x = vec![0.0f64; dim];
                    for (p, l) in pts.chunks_exact(dim).zip(lab.iter_mut()) {
                        for (a, b) in x.iter_mut().zip(p) {
                            *a = b.to_f64();
                        }
                        let (d, j) = tree.assign(&x, *l);
                        *l = j;
                        part.inertia += d;
                        part.counts[j as usize] += 1.0;
                        for (s, a) in part.sums[j as usize * dim..(j as usize + 1) * dim]
                            .iter_mut()
                            .zip(&x)
                        {
                            *s += a;
                        }
                    }
                    part
                })
                .collect()
        });
        for p in partials {
            p.add_to(sums, counts);
            inertia += p.inertia;
        }
    }
    inertia
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::kernel::{assign_naive, nearest_naive};
    use super::super::real::dist2;
    use super::*;

    /// Uniform values in [-1, 1), reproducible from `seed`.
    pub(in crate::apps::kmeans) fn random(n: usize, seed: u64) -> Vec<f64> {
        let mut r = crate::util::Rng::new(seed);
        (0..n).map(|_| r.uniform(-1.0, 1.0)).collect()
    }

    /// Data with many exact ties: coordinates on a coarse grid, duplicated points, duplicated
    /// centroids (several copies of the same centroid at different indices).
    fn adversarial(n: usize, k: usize, dim: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
        let g = |v: f64| (v * 3.0).round() * 0.5;
        let mut pts: Vec<f64> = random(n * dim, seed).into_iter().map(g).collect();
        let copy = pts[..dim * 10].to_vec();
        pts.extend_from_slice(&copy);
        let mut cen: Vec<f64> = random(k * dim, seed + 1).into_iter().map(g).collect();
        for j in (0..k).step_by(3) {
            let src = (j * 7) % k;
            for d in 0..dim {
                cen[j * dim + d] = cen[src * dim + d];
            }
        }
        (pts, cen)
    }

    fn check<T: Real>(pts: &[T], cen: &[T], dim: usize, threads: usize, what: &str) {
        let k = cen.len() / dim;
        let n = pts.len() / dim;
        let kernel = Kernel::new(threads).unwrap();
        let (mut s1, mut c1) = (vec![0.0; k * dim], vec![0.0; k]);
        let want_i = assign_naive(pts, dim, cen, k, 1, &mut s1, &mut c1);
        // Twice: unseeded, then seeded by the first answer, then seeded by wrong labels.
        let mut labels = vec![u32::MAX; n];
        for round in 0..3 {
            if round == 2 {
                for (i, l) in labels.iter_mut().enumerate() {
                    *l = (i * 31 % k) as u32;
                }
            }
            let (mut s2, mut c2) = (vec![0.0; k * dim], vec![0.0; k]);
            let got_i = assign(&kernel, pts, dim, cen, k, &mut s2, &mut c2, &mut labels);
            for (i, &l) in labels.iter().enumerate() {
                let want = nearest_naive(&pts[i * dim..(i + 1) * dim], cen, dim).0;
                assert_eq!(l as usize, want, "{what} round {round} point {i}");
            }
            assert_eq!(c1, c2, "{what} counts");
            for (a, b) in s1.iter().zip(&s2) {
                assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "{what} sums");
            }
            assert!(
                (want_i - got_i).abs() <= 1e-9 * want_i.max(1e-300),
                "{what} inertia"
            );
        }
    }

    #[test]
    fn pruned_equals_the_reference_on_random_and_adversarial_data() {
        for dim in 1..=8 {
            for &k in &[1usize, 2, 9, 64, 300] {
                let seed = (dim * 1000 + k) as u64;
                let pts = random(2000 * dim, seed);
                let cen = random(k * dim, seed + 7);
                check(&pts, &cen, dim, 2, &format!("random d={dim} k={k}"));
                let (pts, cen) = adversarial(1500, k, dim, seed + 3);
                check(&pts, &cen, dim, 1, &format!("adversarial d={dim} k={k}"));
                let p32: Vec<f32> = pts.iter().map(|&v| v as f32).collect();
                let c32: Vec<f32> = cen.iter().map(|&v| v as f32).collect();
                check(
                    &p32,
                    &c32,
                    dim,
                    2,
                    &format!("adversarial f32 d={dim} k={k}"),
                );
            }
        }
        // All centroids identical: every point goes to centroid 0.
        let cen = vec![0.25; 40 * 2];
        let pts = random(500 * 2, 5);
        check(&pts, &cen, 2, 2, "identical centroids");
    }

    /// The gemm path makes the same decisions as the pruned path where no rounding can differ:
    /// small-integer coordinates, so both distance forms are exact, with many ties.
    #[test]
    fn pruned_equals_gemm_on_exact_data() {
        for dim in 1..=8 {
            let k = 97;
            let g = |v: f64| (v * 4.0).round();
            let pts: Vec<f64> = random(3000 * dim, dim as u64).into_iter().map(g).collect();
            let cen: Vec<f64> = random(k * dim, 50 + dim as u64)
                .into_iter()
                .map(g)
                .collect();
            let kernel = Kernel::new(2).unwrap();
            let n = pts.len() / dim;
            let mut gl = vec![0u32; n];
            let (mut s, mut c) = (vec![0.0; k * dim], vec![0.0; k]);
            kernel.assign(&pts, dim, &cen, k, &mut s, &mut c, Some(&mut gl));
            let mut pl = vec![u32::MAX; n];
            let (mut s2, mut c2) = (vec![0.0; k * dim], vec![0.0; k]);
            assign(&kernel, &pts, dim, &cen, k, &mut s2, &mut c2, &mut pl);
            assert_eq!(gl, pl, "d={dim}");
            assert_eq!((s, c), (s2, c2), "d={dim}");
        }
    }

    #[test]
    fn box_bound_never_exceeds_a_member_distance() {
        let dim = 3;
        let cen = random(200 * dim, 11);
        let tree = CentroidTree::new(&cen, dim);
        for (i, x) in random(300 * dim, 12).chunks_exact(dim).enumerate() {
            for (id, n) in tree.nodes.iter().enumerate() {
                let b = tree.bound(id, x);
                for p in n.start as usize..n.end as usize {
                    let c = &tree.coords[p * dim..(p + 1) * dim];
                    assert!(b <= dist2(x, c), "point {i} node {id}");
                }
            }
        }
    }
}
