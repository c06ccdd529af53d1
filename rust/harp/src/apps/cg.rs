//! Conjugate gradient on a sparse symmetric positive-definite system A·x = b, rows partitioned
//! (the network performance aware MPI paper's second application, §5.4;
//! docs/apps-nbody-cg.md).
//!
//! The matrix comes from a file or a generator:
//! * `--input`: text lines `row col value` of its lower triangle (0-based ids, row ≥ col; the
//!   entry (col, row) of the upper half is implied; repeated entries are added in file order; a
//!   finite value; separated by whitespace; blank lines and lines starting with `#` are
//!   skipped). n is one more than the largest id. A bad line fails with the file and line named.
//! * `--grid G`: the 2-D Poisson matrix of a G×G grid (5-point Laplacian with Dirichlet
//!   boundaries: 4 on the diagonal, −1 for each grid neighbour), n = G².
//!
//! The right-hand side: `--rhs` lines `row value` (row < n; rows not listed are 0; repeated rows
//! are added), else b = A·1, so that the solution is all ones.
//!
//! The iteration (x₀ = 0, r₀ = p₀ = b, g₀ = ‖r₀‖₂, the paper's initial gradient):
//!
//! ```text
//! q = A·p;  α = (r·r) / (p·q);  x += α·p;  r −= α·q;
//! stop when ‖r‖₂ ≤ tolerance · g₀ (or after --max-iterations);  β = (r·r)_new / (r·r);  p = r + β·p
//! ```
//!
//! Distribution: the rows are cut into contiguous blocks ([`Blocks`]); a worker holds its rows
//! (every worker reads the whole input file and keeps its rows) and its pieces of x, r and p.
//! Each iteration gathers p everywhere for the product ([`gather_all`]) and reduces two dot
//! products ([`sum`], in a fixed order): by default a gather then a broadcast and a reduce then
//! a broadcast, so with a network model the network-aware algorithms carry them. Every row's
//! product runs over its entries in column order and every dot product is summed in a fixed
//! order, so the iterates are the same, bit for bit, for any number of workers and threads, and
//! equal [`reference`].
//!
//! Checkpoints (`recovery`, docs/apps-nbody-cg.md "Checkpoints"): after every N-th iteration,
//! and after the one that converges, each worker saves its pieces of x, r and p, and r·r (exact
//! bits) with the residual history; g₀ is computed from b again. A resumed run goes on with the
//! same numbers and the same stopping rule, so it ends with the bits of an uninterrupted run.

use std::ops::Range;
use std::time::Instant;

use rayon::prelude::*;

use super::exchange::{fixed_sum, gather_all, resume_state, state_table, sum, Blocks, Exchange};
use crate::checkpoint::{Recovering, Recovery};
use crate::data::Table;
use crate::error::{Error, Result};
use crate::io::lines::{for_each_line, STREAM_BLOCK};
use crate::io::{read_lines, LineError};
use crate::storage::{self, Storage};
use crate::util::{quote, splitmix64};
use crate::worker::agree;
use crate::worker::Worker;

/// The largest grid side (`--grid`): n = G² rows fit in u32 ids.
pub const MAX_GRID: usize = 65_535;

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct Options {
    pub input: Option<String>,
    pub grid: Option<usize>,
    pub rhs: Option<String>,
    pub tolerance: f64,
    pub max_iterations: usize,
    pub threads: usize,
    pub exchange: Exchange,
    /// Checkpoints every N iterations and resuming.
    pub recovery: Recovery,
}

impl Default for Options {
    fn default() -> Options {
        let d = &crate::config::apps::CG;
        Options {
            input: None,
            grid: None,
            rhs: None,
            tolerance: d.default_of("tolerance"),
            max_iterations: d.default_of("max_iterations"),
            threads: d.default_of("threads"),
            exchange: d.default_of("exchange"),
            recovery: Recovery::default(),
        }
    }
}

impl Options {
    pub fn validate(&self) -> Result<()> {
        match (&self.input, self.grid) {
            (Some(_), Some(_)) => {
                return Err(Error::config("give --input or --grid, not both"));
            }
            (None, None) => return Err(Error::config("give the matrix: --input FILE or --grid G")),
            (None, Some(g)) if g == 0 || g > MAX_GRID => {
                return Err(Error::config(format!(
                    "--grid must be from 1 to {MAX_GRID}, not {g}"
                )))
            }
            _ => {}
        }
        if !(self.tolerance.is_finite() && self.tolerance > 0.0 && self.tolerance < 1.0) {
            return Err(Error::config(format!(
                "--tolerance must be a number in (0, 1), not {}",
                self.tolerance
            )));
        }
        if self.max_iterations == 0 {
            return Err(Error::config("--max-iterations must be at least 1"));
        }
        if self.threads == 0 {
            return Err(Error::config("--threads must be at least 1"));
        }
        self.recovery.validate()?;
        super::check_threads(self.threads)
    }
}

/// One entry of the lower triangle, as read: (row, col, value), row ≥ col.
pub type Entry = (u32, u32, f64);

/// A worker's rows of A, compressed: row `first + k` has the entries `start[k]..start[k + 1]`,
/// columns ascending.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    pub first: usize,
    start: Vec<usize>,
    cols: Vec<u32>,
    vals: Vec<f64>,
}

impl Rows {
    /// Rows `rows` of the Poisson matrix of a `g`×`g` grid.
    pub fn poisson(g: usize, rows: Range<usize>) -> Rows {
        let mut r = Rows {
            first: rows.start,
            start: vec![0],
            ..Rows::default()
        };
        for i in rows {
            let (a, b) = (i / g, i % g);
            let mut push = |c: usize, v: f64| {
                r.cols.push(c as u32);
                r.vals.push(v);
            };
            if a > 0 {
                push(i - g, -1.0);
            }
            if b > 0 {
                push(i - 1, -1.0);
            }
            push(i, 4.0);
            if b + 1 < g {
                push(i + 1, -1.0);
            }
            if a + 1 < g {
                push(i + g, -1.0);
            }
            r.start.push(r.cols.len());
        }
        r
    }

    /// Rows `rows` of the symmetric matrix whose lower triangle is `entries` (repeated entries
    /// added in order).
    pub fn from_lower(entries: &[Entry], rows: Range<usize>) -> Rows {
        let mut mine: Vec<(u32, u32, f64)> = Vec::new();
        for &(i, j, v) in entries {
            if rows.contains(&(i as usize)) {
                mine.push((i, j, v));
            }
            if i != j && rows.contains(&(j as usize)) {
                mine.push((j, i, v));
            }
        }
        // Stable: repeated entries keep their file order.
        mine.sort_by_key(|&(i, j, _)| (i, j));
        let mut r = Rows {
            first: rows.start,
            start: vec![0],
            ..Rows::default()
        };
        let mut it = mine.into_iter().peekable();
        for i in rows {
            while let Some((_, j, mut v)) = it.next_if(|e| e.0 as usize == i) {
                while let Some((_, _, w)) = it.next_if(|e| e.0 as usize == i && e.1 == j) {
                    v += w;
                }
                r.cols.push(j);
                r.vals.push(v);
            }
            r.start.push(r.cols.len());
        }
        r
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.start.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stored entries (of these rows, both halves).
    pub fn nnz(&self) -> usize {
        self.cols.len()
    }

    /// (A·p)_i for row `first + k`, over its entries in column order.
    #[inline]
    pub fn row_times(&self, k: usize, p: &[f64]) -> f64 {
        let mut s = 0.0;
        for e in self.start[k]..self.start[k + 1] {
            s += self.vals[e] * p[self.cols[e] as usize];
        }
        s
    }
}

/// Calls `each(fields)` for every line of `buf` that is not blank or a comment, with its
/// `count` whitespace-separated fields (`form` names them in the error when there are not).
fn for_each_record(
    buf: &[u8],
    form: &str,
    count: usize,
    mut each: impl FnMut(&[&str]) -> std::result::Result<(), String>,
) -> std::result::Result<(), LineError> {
    for_each_line(buf, |line, line_start| {
        let fail = |msg: String| LineError { line_start, msg };
        let text = std::str::from_utf8(line).map_err(|_| fail("not UTF-8 text".into()))?;
        let t = text.trim();
        if t.is_empty() || t.starts_with('#') {
            return Ok(());
        }
        let f: Vec<&str> = t.split_ascii_whitespace().collect();
        if f.len() != count {
            return Err(fail(format!(
                "expected `{form}`, found {} field{}: {}",
                f.len(),
                if f.len() == 1 { "" } else { "s" },
                quote(t.as_bytes())
            )));
        }
        each(&f).map_err(fail)
    })
}

/// Parses `row col value` lines of a lower triangle into `out`.
fn parse_entries(buf: &[u8], out: &mut Vec<Entry>) -> std::result::Result<(), LineError> {
    for_each_record(buf, "row col value", 3, |f| {
        let id = |k: usize, what: &str| {
            f[k].parse::<u32>()
                .ok()
                .filter(|&v| v < u32::MAX)
                .ok_or_else(|| {
                    format!(
                        "bad {what} {}: expected an integer from 0 to {}",
                        quote(f[k].as_bytes()),
                        u32::MAX - 1
                    )
                })
        };
        let (i, j) = (id(0, "row")?, id(1, "col")?);
        let v = parse_value(f[2])?;
        if i < j {
            return Err(format!(
                "row {i} < col {j}: give the lower triangle (row ≥ col; the upper half is implied)"
            ));
        }
        out.push((i, j, v));
        Ok(())
    })
}

fn parse_value(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!(
            "bad value {}: expected a finite number",
            quote(s.as_bytes())
        )),
    }
}

/// Parses `row value` lines (row < `n`) into `out`.
fn parse_rhs(buf: &[u8], n: usize, out: &mut [f64]) -> std::result::Result<(), LineError> {
    for_each_record(buf, "row value", 2, |f| {
        let i = f[0]
            .parse::<usize>()
            .ok()
            .filter(|&i| i < n)
            .ok_or_else(|| {
                format!(
                    "bad row {}: expected an integer from 0 to {} (the matrix has {n} rows)",
                    quote(f[0].as_bytes()),
                    n.saturating_sub(1)
                )
            })?;
        out[i] += parse_value(f[1])?;
        Ok(())
    })
}

/// Every entry of the matrix file(s) at `path`, in file order.
pub fn read_lower(st: &dyn Storage, path: &str) -> Result<Vec<Entry>> {
    let files = st.list_input(path, false)?;
    if files.is_empty() {
        return Err(Error::config(format!("no input files in '{path}'")));
    }
    let mut out = Vec::new();
    for f in &files {
        read_lines(st, f, 0, f.size, STREAM_BLOCK, |buf, _| {
            parse_entries(buf, &mut out)
        })?;
    }
    if out.is_empty() {
        return Err(Error::config(format!("no matrix entries in '{path}'")));
    }
    Ok(out)
}

/// The rows of the matrix whose lower triangle is `entries`: one more than the largest id.
pub fn rows_of(entries: &[Entry]) -> usize {
    entries
        .iter()
        .map(|e| e.0.max(e.1) as usize)
        .max()
        .unwrap_or(0)
        + 1
}

/// A digest of numbers (64-bit words), for a checkpoint's record of its input: a chain of
/// [`splitmix64`] over the words, as 16 hex digits.
fn digest(words: impl Iterator<Item = u64>) -> String {
    let h = words.fold(0x6367_2d69_6e70_7574u64, |h, x| splitmix64(h ^ x));
    format!("{h:016x}")
}

/// The digest of a lower triangle as read: every entry's row, column and value bits, in file
/// order.
pub fn entries_digest(entries: &[Entry]) -> String {
    digest(
        entries
            .iter()
            .flat_map(|&(i, j, v)| [(i as u64) << 32 | j as u64, v.to_bits()]),
    )
}

/// The right-hand side of `n` rows from the file(s) at `path`.
pub fn read_rhs(st: &dyn Storage, path: &str, n: usize) -> Result<Vec<f64>> {
    let files = st.list_input(path, false)?;
    if files.is_empty() {
        return Err(Error::config(format!("no input files in '{path}'")));
    }
    let mut b = vec![0.0; n];
    for f in &files {
        read_lines(st, f, 0, f.size, STREAM_BLOCK, |buf, _| {
            parse_rhs(buf, n, &mut b)
        })?;
    }
    Ok(b)
}

/// The rows of the Poisson matrix of a `g`×`g` grid's lower triangle, in row order (what
/// `harp gen poisson` writes).
pub fn poisson_lower(g: usize) -> Vec<Entry> {
    let mut e = Vec::new();
    for i in 0..g * g {
        let (a, b) = (i / g, i % g);
        if a > 0 {
            e.push((i as u32, (i - g) as u32, -1.0));
        }
        if b > 0 {
            e.push((i as u32, (i - 1) as u32, -1.0));
        }
        e.push((i as u32, i as u32, 4.0));
    }
    e
}

/// One iteration's record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Iteration {
    pub iteration: usize,
    /// ‖r‖₂ after it.
    pub residual: f64,
    pub compute_s: f64,
    pub comm_s: f64,
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct Outcome {
    pub n: usize,
    /// Stored entries of the whole matrix (both halves).
    pub nnz: u64,
    /// This worker's rows and their x.
    pub rows: Range<usize>,
    pub x: Vec<f64>,
    /// ‖r₀‖₂ = ‖b‖₂.
    pub g0: f64,
    pub residual: f64,
    pub converged: bool,
    pub iterations: Vec<Iteration>,
    pub load_s: f64,
    /// Seconds spent on the iterations this run made.
    pub iterations_s: f64,
    /// The iteration of the checkpoint this run resumed from (its iterations are in
    /// `iterations` too).
    pub resumed_from: Option<usize>,
}

/// Runs the local step `f` and makes every worker fail with the first failing worker's cause.
fn agree_on<T>(w: &Worker, label: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match f() {
        Ok(v) => agree(w, label, Ok(())).map(|_| v),
        Err(e) => Err(agree(w, label, Err(e)).expect_err("a failure is agreed")),
    }
}

/// What was loaded: the blocks, this worker's rows and piece of b, and what the matrix and the
/// right-hand side are for a checkpoint's record (the grid, or the digest of the entries; the
/// digest of b, or null for A·1).
struct Loaded {
    blocks: Blocks,
    rows: Rows,
    b: Vec<f64>,
    matrix: String,
    rhs: Option<String>,
}

/// This worker's rows, n, and its piece of b.
fn load(w: &Worker, o: &Options, blocks_of: impl Fn(usize) -> Blocks) -> Result<Loaded> {
    let rank = w.rank();
    let (blocks, rows, matrix) = match (&o.input, o.grid) {
        (None, Some(g)) => {
            let blocks = blocks_of(g * g);
            let rows = Rows::poisson(g, blocks.rows(rank));
            (blocks, rows, format!("poisson grid {g}"))
        }
        (Some(path), _) => {
            let st = storage::for_path_on(path, Some(w.runtime().clone()))?;
            let entries = read_lower(&*st, path)?;
            let blocks = blocks_of(rows_of(&entries));
            let rows = Rows::from_lower(&entries, blocks.rows(rank));
            let matrix = format!("entries digest {}", entries_digest(&entries));
            (blocks, rows, matrix)
        }
        (None, None) => return Err(Error::config("give the matrix: --input FILE or --grid G")),
    };
    let (b, rhs) = match &o.rhs {
        Some(path) => {
            let st = storage::for_path_on(path, Some(w.runtime().clone()))?;
            let all = read_rhs(&*st, path, blocks.n())?;
            let d = digest(all.iter().map(|v| v.to_bits()));
            (all[blocks.rows(rank)].to_vec(), Some(d))
        }
        None => {
            let ones = vec![1.0; blocks.n()];
            let b = (0..rows.len()).map(|k| rows.row_times(k, &ones)).collect();
            (b, None)
        }
    };
    Ok(Loaded {
        blocks,
        rows,
        b,
        matrix,
        rhs,
    })
}

/// Collective: solves the system; `progress` sees every iteration (with `recovery.resume`,
/// those after the checkpoint).
pub fn run(w: &Worker, o: &Options, mut progress: impl FnMut(&Iteration)) -> Result<Outcome> {
    o.validate()?;
    // An unusable checkpoint directory fails now, not after the first iterations.
    let rec = o.recovery.open(w, "cg")?;
    let pool = super::compute_threads(o.threads)?;
    let ex = o.exchange;
    let t0 = Instant::now();
    let p_workers = w.size();
    let loaded = agree_on(w, "cg-input", || load(w, o, |n| Blocks::new(n, p_workers)))?;
    let (blocks, a, b) = (loaded.blocks, loaded.rows, loaded.b);
    let rows = blocks.rows(w.rank());
    let first = rows.start;
    let [nnz] = sum(w, ex, "cg-nnz", &blocks, |i| {
        [(a.start[i - first + 1] - a.start[i - first]) as f64]
    })?;
    let load_s = t0.elapsed().as_secs_f64();
    // The iterates depend on the matrix, b and (where they stop) the tolerance; not on the
    // threads or the exchange (the same bits either way), nor on --max-iterations.
    let meta = serde_json::json!({
        "app": "cg",
        "n": blocks.n(),
        "nnz": nnz as u64,
        "matrix": loaded.matrix,
        "rhs": loaded.rhs,
        "tolerance": o.tolerance.to_string(),
    });
    let dot = |w: &Worker, label: &str, u: &[f64], v: &[f64]| {
        sum(w, ex, label, &blocks, |i| [u[i - first] * v[i - first]]).map(|[s]| s)
    };
    let local = rows.len();
    let mut x = vec![0.0; local];
    let mut r = b;
    let mut p = r.clone();
    let mut q = vec![0.0; local];
    let mut rr = dot(w, "cg-dot", &r, &r)?;
    let g0 = rr.sqrt();
    let mut iterations = Vec::new();
    let resumed = resume(w, &rec, &meta, o, [&mut x, &mut r, &mut p], &mut iterations)?;
    if let Some((_, rr_saved)) = resumed {
        rr = rr_saved;
    }
    // After a resume, r·r is the saved one and ‖r‖ = √(r·r) as the iteration computed it.
    let mut residual = rr.sqrt();
    let mut converged = g0 == 0.0 || (resumed.is_some() && residual <= o.tolerance * g0);
    let t_it = Instant::now();
    let mut k = resumed.map_or(0, |(k, _)| k);
    while !converged && k < o.max_iterations {
        k += 1;
        let tc = Instant::now();
        let p_all = gather_all(w, ex, "cg-p", &blocks, 1, &p)?;
        let mut comm_s = tc.elapsed().as_secs_f64();
        let tq = Instant::now();
        pool.install(|| {
            q.par_iter_mut()
                .with_min_len(256)
                .enumerate()
                .for_each(|(k, out)| *out = a.row_times(k, &p_all))
        });
        let mut compute_s = tq.elapsed().as_secs_f64();
        let tc = Instant::now();
        let pq = dot(w, "cg-dot", &p, &q)?;
        comm_s += tc.elapsed().as_secs_f64();
        if pq.is_nan() || pq <= 0.0 {
            return Err(Error::data(format!(
                "cg: p·Ap = {pq} at iteration {k}: the matrix is not positive definite"
            )));
        }
        let alpha = rr / pq;
        let tu = Instant::now();
        for i in 0..local {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
        compute_s += tu.elapsed().as_secs_f64();
        let tc = Instant::now();
        let rr_new = dot(w, "cg-dot", &r, &r)?;
        comm_s += tc.elapsed().as_secs_f64();
        residual = rr_new.sqrt();
        converged = residual <= o.tolerance * g0;
        let beta = rr_new / rr;
        rr = rr_new;
        if !converged {
            for i in 0..local {
                p[i] = r[i] + beta * p[i];
            }
        }
        let it = Iteration {
            iteration: k,
            residual,
            compute_s,
            comm_s,
        };
        progress(&it);
        iterations.push(it);
        // The converging iteration is the last: a checkpoint is due after it.
        let last = if converged { k } else { o.max_iterations };
        rec.after_iteration(w, k, last, &meta, || {
            Ok(state(w, [&x, &r, &p], rr, &iterations))
        })?;
    }
    Ok(Outcome {
        n: blocks.n(),
        nnz: nnz as u64,
        rows,
        x,
        g0,
        residual,
        converged,
        iterations,
        load_s,
        iterations_s: t_it.elapsed().as_secs_f64(),
        resumed_from: resumed.map(|(k, _)| k),
    })
}

/// This worker's state after an iteration ([`state_table`]): its pieces of x, r and p, r·r,
/// and the residual, compute and communication seconds of every iteration so far.
fn state(
    w: &Worker,
    xrp: [&[f64]; 3],
    rr: f64,
    iterations: &[Iteration],
) -> Vec<(&'static str, Table)> {
    let col = |f: fn(&Iteration) -> f64| iterations.iter().map(f).collect::<Vec<f64>>();
    let (res, compute, comm) = (col(|i| i.residual), col(|i| i.compute_s), col(|i| i.comm_s));
    state_table(w, &[xrp[0], xrp[1], xrp[2], &[rr], &res, &compute, &comm])
}

/// With `resume`, this worker's x, r and p and the iterations from the newest checkpoint
/// ([`state`]): the iterations done and r·r, or None for a fresh start.
fn resume(
    w: &Worker,
    rec: &Recovering,
    meta: &serde_json::Value,
    o: &Options,
    xrp: [&mut Vec<f64>; 3],
    iterations: &mut Vec<Iteration>,
) -> Result<Option<(usize, f64)>> {
    let rows = xrp[0].len();
    let got = resume_state(w, rec, meta, o.max_iterations, 7, |it, mut s| {
        if let Some(v) = s[..3].iter().find(|v| v.len() != rows) {
            return Err(Error::data(format!(
                "the checkpoint at iteration {it} holds {} rows for rank {}, this run gives it \
                 {rows}",
                v.len(),
                w.rank()
            )));
        }
        if s[3].len() != 1 || s[4..].iter().any(|h| h.len() != it) {
            return Err(Error::data(format!(
                "the checkpoint at iteration {it} holds a history of {} iterations",
                s[4].len()
            )));
        }
        *iterations = (0..it)
            .map(|k| Iteration {
                iteration: k + 1,
                residual: s[4][k],
                compute_s: s[5][k],
                comm_s: s[6][k],
            })
            .collect();
        s.truncate(4);
        let rr = s.pop().expect("r·r")[0];
        Ok((s, rr))
    })?;
    let Some((it, (vectors, rr))) = got else {
        return Ok(None);
    };
    for (dst, src) in xrp.into_iter().zip(vectors) {
        *dst = src;
    }
    Ok(Some((it, rr)))
}

/// `row x` lines (full precision) for this worker's rows.
pub fn format_x(o: &Outcome) -> String {
    let mut s = String::with_capacity(o.x.len() * 32);
    for (i, v) in o.rows.clone().zip(&o.x) {
        s.push_str(&i.to_string());
        s.push(' ');
        crate::apps::kmeans::input::format_f64(*v, &mut s);
        s.push('\n');
    }
    s
}

/// A sequential CG written apart from [`Rows`]: the matrix as a map from (row, col) to value
/// built from the lower triangle, the same iteration and the same fixed-order sums. Returns x,
/// the residual after each iteration and whether it converged.
pub fn reference(
    entries: &[Entry],
    rhs: Option<&[f64]>,
    tolerance: f64,
    max_iterations: usize,
) -> (Vec<f64>, Vec<f64>, bool) {
    use std::collections::BTreeMap;
    let mut m: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    let mut add = |i: usize, j: usize, v: f64| {
        m.entry((i, j)).and_modify(|s| *s += v).or_insert(v);
    };
    for &(i, j, v) in entries {
        add(i as usize, j as usize, v);
        if i != j {
            add(j as usize, i as usize, v);
        }
    }
    let n = rows_of(entries);
    let mut rows: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
    for (&(i, j), &v) in &m {
        rows[i].push((j, v));
    }
    let times = |v: &[f64]| -> Vec<f64> {
        rows.iter()
            .map(|row| row.iter().fold(0.0, |s, &(j, a)| s + a * v[j]))
            .collect()
    };
    let blocks = Blocks::new(n, 1);
    let dot = |u: &[f64], v: &[f64]| fixed_sum(&blocks, |i| [u[i] * v[i]])[0];
    let b = match rhs {
        Some(b) => b.to_vec(),
        None => times(&vec![1.0; n]),
    };
    let mut x = vec![0.0; n];
    let mut r = b.clone();
    let mut p = b;
    let mut rr = dot(&r, &r);
    let g0 = rr.sqrt();
    let mut residuals = Vec::new();
    let mut converged = g0 == 0.0;
    while !converged && residuals.len() < max_iterations {
        let q = times(&p);
        let alpha = rr / dot(&p, &q);
        for i in 0..n {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
        let rr_new = dot(&r, &r);
        residuals.push(rr_new.sqrt());
        converged = rr_new.sqrt() <= tolerance * g0;
        let beta = rr_new / rr;
        rr = rr_new;
        for i in 0..n {
            p[i] = r[i] + beta * p[i];
        }
    }
    (x, residuals, converged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_and_errors_say_what_is_wrong() {
        let mut e = Vec::new();
        parse_entries(b"# A\n0 0 4\n\n 1\t0 -1.5 \n1 1 4\n", &mut e).unwrap();
        assert_eq!(e, vec![(0, 0, 4.0), (1, 0, -1.5), (1, 1, 4.0)]);
        for (text, msg) in [
            ("0 0 1\n0 1 2\n", "row 0 < col 1: give the lower triangle"),
            ("0 0\n", "expected `row col value`, found 2 fields"),
            ("x 0 1\n", "bad row 'x'"),
            ("1 -1 1\n", "bad col '-1'"),
            ("1 0 nan\n", "bad value 'nan': expected a finite number"),
            ("1 0 1 2\n", "found 4 fields"),
        ] {
            let err = parse_entries(text.as_bytes(), &mut e).unwrap_err();
            assert!(err.msg.contains(msg), "{text:?}: {}", err.msg);
        }
        let mut b = vec![0.0; 3];
        parse_rhs(b"0 1\n2 0.5\n2 0.25\n", 3, &mut b).unwrap();
        assert_eq!(b, vec![1.0, 0.0, 0.75]);
        let err = parse_rhs(b"0 1\n3 1\n", 3, &mut b).unwrap_err();
        assert!(err.msg.contains("bad row '3'"), "{}", err.msg);
        assert_eq!(err.line_start, 4);
    }

    /// The generated Poisson rows equal the rows built from its lower triangle, and repeated
    /// entries are added.
    #[test]
    fn poisson_rows_equal_their_lower_triangle() {
        let g = 5;
        let lower = poisson_lower(g);
        for rows in [0..25, 3..11, 24..25] {
            let a = Rows::poisson(g, rows.clone());
            let b = Rows::from_lower(&lower, rows.clone());
            assert_eq!((&a.start, &a.cols, &a.vals), (&b.start, &b.cols, &b.vals));
        }
        let whole = Rows::poisson(g, 0..25);
        assert_eq!(whole.nnz(), 25 + 4 * 2 * g * (g - 1) / 2);
        let r = Rows::from_lower(&[(1, 0, 1.0), (1, 1, 2.0), (1, 0, 0.5)], 0..2);
        assert_eq!(r.cols, vec![1, 0, 1]);
        assert_eq!(r.vals, vec![1.5, 1.5, 2.0]);
    }
}
