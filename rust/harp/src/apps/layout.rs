//! Force-directed graph drawing (Fruchterman–Reingold, the Harp paper's §5.2, its ref. [26]).
//!
//! Input: text lines `src dst [weight]` (two non-negative integer vertex ids, at most 2^63 − 1,
//! and an optional weight that is checked and not used, separated by whitespace); blank lines
//! and lines whose first non-blank character is `#` are skipped.
//! Every id seen is a vertex; the graph is undirected and simple (an edge and its reverse are one
//! edge, repeated edges count once, a self-loop only makes its vertex exist).
//!
//! Layout: V vertices in a square of side L = √V (so the ideal edge length k = √(L²/V) = 1).
//! Vertex v starts at a position drawn from (`seed`, its id) alone. Each iteration computes, for
//! every vertex at once from the previous positions,
//! * repulsion from every other vertex u: (p_v − p_u)·k²/d², d = ‖p_v − p_u‖ (coincident
//!   vertices are pushed apart along x, the one with the larger index to +x, as if at d = 1e-9·k);
//! * attraction along each edge (v, u): −(p_v − p_u)·d/k;
//!
//! then moves v along the sum by at most the temperature t_k = (L/10)·(1 − (k−1)/I) and clamps
//! it to [0, L]². Every sum runs over the other vertices in id order and over v's neighbours in
//! id order, and every vertex's new position depends only on the previous positions: the result
//! is the same, bit for bit, for any number of workers or threads.
//!
//! Distribution: each worker reads its byte share of the edge input; the edges (as i64 pairs,
//! normalised and deduplicated locally) are allgathered so every worker builds the same sorted
//! vertex list and adjacency. Vertices are then split into contiguous blocks (by id order, one
//! per worker); per iteration a worker computes its block (rayon over vertices) and one allgather
//! of the blocks' positions (2 f64 per vertex) gives everyone the new layout.

use std::time::Instant;

use rayon::prelude::*;

use crate::apps::dense::{allgather_blocks, allgather_counts, offsets};
use crate::apps::kmeans::kernel::Kernel;
use crate::checkpoint::{Recovery, Restored};
use crate::data::graph::parse_edge_line;
use crate::data::{Array, Combiner, Table};
use crate::error::{Error, Result};
use crate::io::lines::{for_each_line, STREAM_BLOCK};
use crate::io::{read_lines, split, LineError};
use crate::storage::{self, Storage};
use crate::util::{splitmix64, Rng};
use crate::worker::agree;
use crate::worker::Worker;

/// Options of a run.
#[derive(Debug, Clone)]
pub struct Options {
    pub input: String,
    pub iterations: usize,
    pub seed: u64,
    pub threads: usize,
    /// Checkpoints and resume (`--checkpoint-every`, `--checkpoint-dir`, `--resume`).
    pub recovery: Recovery,
}

impl Options {
    /// The defaults of `harp layout` for `input`.
    pub fn new(input: impl Into<String>) -> Options {
        Options {
            input: input.into(),
            iterations: crate::config::apps::LAYOUT.default_of("iterations"),
            seed: crate::config::apps::LAYOUT.default_of("seed"),
            threads: crate::config::apps::LAYOUT.default_of("threads"),
            recovery: Recovery::default(),
        }
    }
}

/// An undirected simple graph: sorted vertex ids, and for each vertex its neighbours' indices in
/// increasing order (compressed rows).
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub ids: Vec<i64>,
    pub start: Vec<usize>,
    pub adj: Vec<u32>,
}

impl Graph {
    /// The graph of `edges` (any order, repeats, both directions and self-loops allowed).
    pub fn new(edges: &[(i64, i64)]) -> Result<Graph> {
        let mut ids: Vec<i64> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() > u32::MAX as usize {
            return Err(Error::config(format!(
                "{} vertices: at most {} are supported",
                ids.len(),
                u32::MAX
            )));
        }
        let index = |id: i64| ids.binary_search(&id).expect("every id is a vertex") as u32;
        let mut pairs: Vec<(u32, u32)> = edges
            .iter()
            .filter(|(a, b)| a != b)
            .flat_map(|&(a, b)| {
                let (i, j) = (index(a), index(b));
                [(i, j), (j, i)]
            })
            .collect();
        pairs.par_sort_unstable();
        pairs.dedup();
        let mut start = vec![0usize; ids.len() + 1];
        for &(i, _) in &pairs {
            start[i as usize + 1] += 1;
        }
        for v in 0..ids.len() {
            start[v + 1] += start[v];
        }
        let adj = pairs.into_iter().map(|(_, j)| j).collect();
        Ok(Graph { ids, start, adj })
    }

    pub fn vertices(&self) -> usize {
        self.ids.len()
    }

    /// Undirected edges (each counted once).
    pub fn edges(&self) -> usize {
        self.adj.len() / 2
    }

    pub fn neighbours(&self, v: usize) -> &[u32] {
        &self.adj[self.start[v]..self.start[v + 1]]
    }
}

/// Parses the edges in a block of lines (see the module doc): [`parse_edge_line`] with ids
/// from 0 to `i64::MAX`; the weight is checked as every graph application reads it, and not
/// used.
fn parse_edges(buf: &[u8], out: &mut Vec<(i64, i64)>) -> std::result::Result<(), LineError> {
    for_each_line(buf, |line, line_start| {
        let edge = parse_edge_line(line).map_err(|msg| LineError { line_start, msg })?;
        // Both ids are at most i64::MAX.
        if let Some((a, b, _)) = edge {
            out.push((a as i64, b as i64));
        }
        Ok(())
    })
}

/// The edges of `rank`'s byte share of the input, each as (smaller id, larger id), sorted and
/// without repeats.
pub fn read_share(
    storage: &dyn Storage,
    path: &str,
    rank: usize,
    workers: usize,
) -> Result<Vec<(i64, i64)>> {
    let files = storage.list_input(path, false)?;
    if files.is_empty() {
        return Err(Error::config(format!("no input files in '{path}'")));
    }
    let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
    let mut edges = Vec::new();
    for (f, (s, e)) in files.iter().zip(split::spread(&sizes, rank, workers)) {
        read_lines(storage, f, s, e, STREAM_BLOCK, |buf, _| {
            parse_edges(buf, &mut edges)
        })?;
    }
    for e in &mut edges {
        *e = (e.0.min(e.1), e.0.max(e.1));
    }
    edges.sort_unstable();
    edges.dedup();
    Ok(edges)
}

/// The starting position of vertex `id`: uniform in [0, side)², from (`seed`, `id`) only.
pub fn initial_position(seed: u64, id: i64, side: f64) -> [f64; 2] {
    let mut rng = Rng::new(splitmix64(seed) ^ splitmix64(id as u64 ^ 0x6c61796f7574));
    [rng.next_f64() * side, rng.next_f64() * side]
}

/// The side of the frame for `v` vertices (k = 1).
pub fn side(v: usize) -> f64 {
    (v.max(1) as f64).sqrt()
}

/// The temperature of iteration `k` (1-based) of `iterations`.
pub fn temperature(side: f64, k: usize, iterations: usize) -> f64 {
    side / 10.0 * (1.0 - (k - 1) as f64 / iterations as f64)
}

/// New positions of vertices `first..first + out.len()/2` from the positions `pos` (2 per vertex)
/// at temperature `t` (see the module doc).
pub fn step(g: &Graph, pos: &[f64], first: usize, t: f64, side: f64, out: &mut [f64]) {
    const K: f64 = 1.0;
    let tiny = 1e-9 * K;
    out.par_chunks_mut(2)
        .enumerate()
        .with_min_len(16)
        .for_each(|(r, o)| {
            let v = first + r;
            let (x, y) = (pos[2 * v], pos[2 * v + 1]);
            let (mut dx, mut dy) = (0.0f64, 0.0f64);
            for (u, p) in pos.chunks_exact(2).enumerate() {
                if u == v {
                    continue;
                }
                let (mut ex, ey) = (x - p[0], y - p[1]);
                let mut d2 = ex * ex + ey * ey;
                if d2 == 0.0 {
                    ex = if v > u { tiny } else { -tiny };
                    d2 = tiny * tiny;
                }
                let f = K * K / d2;
                dx += ex * f;
                dy += ey * f;
            }
            for &u in g.neighbours(v) {
                let u = u as usize;
                let (ex, ey) = (x - pos[2 * u], y - pos[2 * u + 1]);
                let d = (ex * ex + ey * ey).sqrt();
                dx -= ex * d / K;
                dy -= ey * d / K;
            }
            let len = (dx * dx + dy * dy).sqrt();
            let (mut nx, mut ny) = (x, y);
            if len > 0.0 {
                let s = len.min(t) / len;
                nx += dx * s;
                ny += dy * s;
            }
            o[0] = nx.clamp(0.0, side);
            o[1] = ny.clamp(0.0, side);
        });
}

/// One iteration's record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Iteration {
    pub iteration: usize,
    pub temperature: f64,
    pub compute_s: f64,
    pub comm_s: f64,
}

/// The result, the same on every worker.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub graph: Graph,
    /// 2 per vertex, in id order.
    pub positions: Vec<f64>,
    /// This worker's vertices: `first..first + count`.
    pub first: usize,
    pub count: usize,
    pub iterations: Vec<Iteration>,
    pub load_s: f64,
    /// The iteration of the checkpoint this run resumed from.
    pub resumed_from: Option<usize>,
}

/// Collective: reads the graph and runs the layout.
pub fn run(w: &Worker, o: &Options, mut progress: impl FnMut(&Iteration)) -> Result<Outcome> {
    if o.iterations == 0 || o.threads == 0 {
        return Err(Error::config(
            "--iterations and --threads must be at least 1",
        ));
    }
    let t0 = Instant::now();
    let kernel = Kernel::new(o.threads)?;
    // An unusable checkpoint directory fails now, not after the first iterations.
    let rec = o.recovery.open(w, "layout")?;
    let (rank, p) = (w.rank(), w.size());
    let read = (|| {
        let st = storage::for_path_on(&o.input, Some(w.runtime().clone()))?;
        read_share(&*st, &o.input, rank, p)
    })();
    let mine = match read {
        Ok(e) => {
            agree(w, "layout-input", Ok(()))?;
            e
        }
        Err(e) => return Err(agree(w, "layout-input", Err(e)).expect_err("agreed failure")),
    };
    let flat: Vec<i64> = mine.iter().flat_map(|&(a, b)| [a, b]).collect();
    drop(mine);
    let lens = allgather_counts(w, "layout-edge-counts", flat.len() as u64)?;
    if let Some(r) = lens.iter().position(|l| l % 2 != 0) {
        return Err(Error::Protocol(format!(
            "layout-edges: rank {r} announced {} ids, not pairs",
            lens[r]
        )));
    }
    let all = allgather_blocks(w, "layout-edges", &flat, &lens)?;
    drop(flat);
    if let Some(i) = all.iter().position(|&v| v < 0) {
        return Err(Error::Protocol(format!(
            "layout-edges: gathered id {} at position {i} is negative",
            all[i]
        )));
    }
    let edges: Vec<(i64, i64)> = all.chunks_exact(2).map(|e| (e[0], e[1])).collect();
    drop(all);
    let graph = Graph::new(&edges)?;
    drop(edges);
    let nv = graph.vertices();
    if nv == 0 {
        return Err(Error::config(format!("no edges in '{}'", o.input)));
    }
    let sd = side(nv);
    let mut pos: Vec<f64> = graph
        .ids
        .iter()
        .flat_map(|&id| initial_position(o.seed, id, sd))
        .collect();
    let blocks: Vec<u64> = (0..p)
        .map(|r| {
            let (a, b) = split::share(nv as u64, r, p);
            b - a
        })
        .collect();
    let offs = offsets(&blocks);
    let (first, count) = (offs[rank], blocks[rank] as usize);
    let lens: Vec<u64> = blocks.iter().map(|b| 2 * b).collect();
    let load_s = t0.elapsed().as_secs_f64();
    let mut mine = vec![0.0; 2 * count];
    let mut iterations = Vec::new(); // grows as they run: --iterations has no bound
                                     // The temperatures depend on --iterations: a resume must ask for the same number.
    let meta = serde_json::json!({
        "app": "layout",
        "vertices": nv,
        "edges": graph.edges(),
        "seed": o.seed,
        "iterations": o.iterations,
    });
    let start = match rec.resume(w, &meta, o.iterations)? {
        Some(r) => {
            let done = agree_on(w, "layout-resume", || restore(r, &mut mine))?;
            pos = allgather_blocks(w, "layout-resume", &mine, &lens)?;
            iterations = done;
            iterations.len()
        }
        None => 0,
    };
    for k in start + 1..=o.iterations {
        let t_it = Instant::now();
        let t = temperature(sd, k, o.iterations);
        kernel.install(|| step(&graph, &pos, first, t, sd, &mut mine));
        let compute_s = t_it.elapsed().as_secs_f64();
        let tc = Instant::now();
        pos = allgather_blocks(w, "layout-positions", &mine, &lens)?;
        let it = Iteration {
            iteration: k,
            temperature: t,
            compute_s,
            comm_s: tc.elapsed().as_secs_f64(),
        };
        progress(&it);
        iterations.push(it);
        rec.after_iteration(w, k, o.iterations, &meta, || {
            Ok(state(w, &mine, &iterations))
        })?;
    }
    Ok(Outcome {
        graph,
        positions: pos,
        first,
        count,
        iterations,
        load_s,
        resumed_from: (start > 0).then_some(start),
    })
}

/// Runs the local step `f` and makes every worker fail with the first failing worker's cause.
fn agree_on<T>(w: &Worker, label: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match f() {
        Ok(v) => agree(w, label, Ok(())).map(|_| v),
        Err(e) => Err(agree(w, label, Err(e)).expect_err("a failure is agreed")),
    }
}

/// This worker's state after an iteration: table `positions` (partition 0: its block of
/// positions, 2 f64 per vertex) and table `history` (partition 0: 3 f64 per iteration:
/// temperature, compute and communication seconds).
fn state(w: &Worker, mine: &[f64], its: &[Iteration]) -> Vec<(&'static str, Table)> {
    let mut c = Table::new(Combiner::Sum);
    c.put(0, Array::from_slice(w.pool(), mine));
    let recs: Vec<f64> = its
        .iter()
        .flat_map(|i| [i.temperature, i.compute_s, i.comm_s])
        .collect();
    let mut h = Table::new(Combiner::Sum);
    h.put(0, Array::from_slice(w.pool(), &recs));
    vec![("positions", c), ("history", h)]
}

/// This worker's block of positions (into `mine`) and the iterations done, from [`state`].
fn restore(mut r: Restored, mine: &mut [f64]) -> Result<Vec<Iteration>> {
    let it = r.iteration;
    let (positions, history) = (r.take("positions")?, r.take("history")?);
    let (Some(c), Some(h)) = (positions.get(0), history.get(0)) else {
        return Err(Error::data(format!(
            "the checkpoint at iteration {it} does not hold layout state"
        )));
    };
    if c.len() != mine.len() || h.len() != 3 * it {
        return Err(Error::data(format!(
            "the checkpoint at iteration {it} holds {} positions for this worker, not {} (the \
             same input with the same number of workers resumes)",
            c.len(),
            mine.len()
        )));
    }
    mine.copy_from_slice(c.as_slice::<f64>()?);
    let mut its = Vec::with_capacity(it);
    for (r, iteration) in h.as_slice::<f64>()?.chunks_exact(3).zip(1..) {
        let (temperature, compute_s, comm_s) = (r[0], r[1], r[2]);
        its.push(Iteration {
            iteration,
            temperature,
            compute_s,
            comm_s,
        });
    }
    Ok(its)
}

/// Formats vertices `first..first + count` as `id x y` lines at full precision.
pub fn format_positions(o: &Outcome, first: usize, count: usize) -> String {
    let mut s = String::with_capacity(count * 48);
    for v in first..first + count {
        s.push_str(&o.graph.ids[v].to_string());
        for c in 0..2 {
            s.push(' ');
            crate::apps::kmeans::input::format_f64(o.positions[2 * v + c], &mut s);
        }
        s.push('\n');
    }
    s
}

/// A sequential reference written independently of [`step`] and [`Graph`]: a map from id to
/// position, adjacency as sorted sets, one pass over all vertices per iteration. Returns the
/// positions of the vertices in id order.
pub fn reference(edges: &[(i64, i64)], iterations: usize, seed: u64) -> Vec<(i64, f64, f64)> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut adj: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    for &(a, b) in edges {
        adj.entry(a).or_default();
        adj.entry(b).or_default();
        if a != b {
            adj.get_mut(&a).unwrap().insert(b);
            adj.get_mut(&b).unwrap().insert(a);
        }
    }
    let ids: Vec<i64> = adj.keys().copied().collect();
    let n = ids.len();
    let l = (n as f64).sqrt();
    let mut p: BTreeMap<i64, (f64, f64)> = ids
        .iter()
        .map(|&id| {
            let [x, y] = initial_position(seed, id, l);
            (id, (x, y))
        })
        .collect();
    for k in 0..iterations {
        let t = l / 10.0 * (1.0 - k as f64 / iterations as f64);
        let mut next = BTreeMap::new();
        for (vi, &v) in ids.iter().enumerate() {
            let (x, y) = p[&v];
            let mut f = (0.0, 0.0);
            for (ui, &u) in ids.iter().enumerate() {
                if u == v {
                    continue;
                }
                let (mut ex, ey) = (x - p[&u].0, y - p[&u].1);
                let mut d2 = ex * ex + ey * ey;
                if d2 == 0.0 {
                    ex = if vi > ui { 1e-9 } else { -1e-9 };
                    d2 = 1e-18;
                }
                f.0 += ex / d2;
                f.1 += ey / d2;
            }
            for &u in &adj[&v] {
                let (ex, ey) = (x - p[&u].0, y - p[&u].1);
                let d = ex.hypot(ey);
                f.0 -= ex * d;
                f.1 -= ey * d;
            }
            let len = f.0.hypot(f.1);
            let (mut nx, mut ny) = (x, y);
            if len > 0.0 {
                nx += f.0 / len * len.min(t);
                ny += f.1 / len * len.min(t);
            }
            next.insert(v, (nx.clamp(0.0, l), ny.clamp(0.0, l)));
        }
        p = next;
    }
    p.into_iter().map(|(id, (x, y))| (id, x, y)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_parse_with_comments_and_errors_name_the_token() {
        let mut e = Vec::new();
        parse_edges(
            b"# a comment\n1 2\n\n  7\t3  \n  # indented comment\n5 5",
            &mut e,
        )
        .unwrap();
        assert_eq!(e, vec![(1, 2), (7, 3), (5, 5)]);
        // A weight is read (and checked), not used.
        let mut w = Vec::new();
        parse_edges(b"1 2 0.25\n3 4\n", &mut w).unwrap();
        assert_eq!(w, vec![(1, 2), (3, 4)]);
        for (text, msg) in [
            ("1 2\n3 x\n", "column 2: bad vertex id 'x'"),
            ("1 2\n-3 4\n", "column 1: bad vertex id '-3'"),
            (
                "1 2\n3\n",
                "expected an edge 'src dst [weight]', found 1 field: '3'",
            ),
            ("1 2\n3 4 5 6\n", "found 4 fields"),
            ("1 2\n3 4 0\n", "bad weight '0': expected a positive number"),
            ("x 4 0\n", "column 1: bad vertex id 'x'"),
            ("1.5 2\n", "bad vertex id '1.5'"),
            (
                "9223372036854775808 1\n",
                "bad vertex id '9223372036854775808': expected an integer from 0 to 9223372036854775807",
            ),
        ] {
            let err = parse_edges(text.as_bytes(), &mut e).unwrap_err();
            assert!(err.msg.contains(msg), "{text:?}: {}", err.msg);
        }
        let err = parse_edges(b"1 2\n3 4\n5 y\n", &mut e).unwrap_err();
        assert_eq!(err.line_start, 8);
    }

    #[test]
    fn graph_is_simple_undirected_and_sorted() {
        let g = Graph::new(&[(10, 3), (3, 10), (3, 3), (40, 10), (10, 3), (7, 7)]).unwrap();
        assert_eq!(g.ids, vec![3, 7, 10, 40]);
        assert_eq!(g.edges(), 2);
        assert_eq!(g.neighbours(0), &[2]);
        assert!(g.neighbours(1).is_empty());
        assert_eq!(g.neighbours(2), &[0, 3]);
    }

    /// The block kernel equals the reference, whatever block of vertices each call computes,
    /// bit for bit (the same sums in the same order), including coincident vertices.
    #[test]
    fn blocks_of_steps_equal_the_reference() {
        let mut rng = Rng::new(9);
        let mut edges: Vec<(i64, i64)> = (0..120)
            .map(|_| (rng.below(60) as i64 * 3, rng.below(60) as i64 * 3))
            .collect();
        edges.push((1000, 1001));
        let g = Graph::new(&edges).unwrap();
        let sd = side(g.vertices());
        let seed = 4;
        let iters = 12;
        let mut pos: Vec<f64> = g
            .ids
            .iter()
            .flat_map(|&id| initial_position(seed, id, sd))
            .collect();
        // Two coincident vertices.
        pos[2] = pos[0];
        pos[3] = pos[1];
        for k in 1..=iters {
            let t = temperature(sd, k, iters);
            let mut next = Vec::new();
            for (a, b) in [(0, 7), (7, 8), (8, g.vertices())] {
                let mut out = vec![0.0; 2 * (b - a)];
                step(&g, &pos, a, t, sd, &mut out);
                next.extend(out);
            }
            let mut whole = vec![0.0; pos.len()];
            step(&g, &pos, 0, t, sd, &mut whole);
            assert_eq!(next, whole);
            pos = next;
        }
        assert!(pos.iter().all(|v| v.is_finite() && (0.0..=sd).contains(v)));
        assert_ne!(
            (pos[0], pos[1]),
            (pos[2], pos[3]),
            "coincident vertices are pushed apart"
        );
        let want = reference(&edges, iters, seed);
        assert_eq!(want.len(), g.vertices());
        // The reference starts without the coincident pair, so compare a fresh run.
        let mut pos: Vec<f64> = g
            .ids
            .iter()
            .flat_map(|&id| initial_position(seed, id, sd))
            .collect();
        for k in 1..=iters {
            let mut o = vec![0.0; pos.len()];
            step(&g, &pos, 0, temperature(sd, k, iters), sd, &mut o);
            pos = o;
        }
        for (v, &(id, x, y)) in want.iter().enumerate() {
            assert_eq!(id, g.ids[v]);
            assert!((pos[2 * v] - x).abs() <= 1e-9 * sd, "{v}");
            assert!((pos[2 * v + 1] - y).abs() <= 1e-9 * sd, "{v}");
        }
    }
}
