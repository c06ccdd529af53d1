//! `harp components` with real `harp` processes on loopback: the result equals a sequential
//! union-find (written here, independently of the app) for 1..4 workers on graphs with many
//! components, isolated pairs, a long chain in random order, self-loops, duplicate edges and
//! huge sparse ids; bad input names the file, line and token and leaves the output untouched.

mod common;

use common::{harp, run_with_window, s, tmpdir};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Output;

use harp::util::Rng;

/// Fisher–Yates.
fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i + 1));
    }
}

/// Union-find with path halving; the component of a vertex is its smallest id.
fn union_find(edges: &[(u64, u64)]) -> BTreeMap<u64, u64> {
    let mut parent: HashMap<u64, u64> = HashMap::new();
    fn root(parent: &mut HashMap<u64, u64>, mut x: u64) -> u64 {
        loop {
            let p = *parent.entry(x).or_insert(x);
            if p == x {
                return x;
            }
            let gp = *parent.entry(p).or_insert(p);
            parent.insert(x, gp);
            x = gp;
        }
    }
    for &(a, b) in edges {
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        if ra != rb {
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            parent.insert(hi, lo);
        }
    }
    let vs: Vec<u64> = parent.keys().copied().collect();
    vs.into_iter().map(|v| (v, root(&mut parent, v))).collect()
}

/// The graph of the tests: a 2000-vertex path in random order, 300 isolated pairs, 40 random
/// trees, self-loops (alone and on chain vertices), duplicate and reversed edges, and huge ids
/// up to 10^12 linked to small ones.
fn graph() -> Vec<(u64, u64)> {
    let mut rng = Rng::new(42);
    let mut edges = Vec::new();
    let mut path: Vec<u64> = (10_000..12_000).collect();
    shuffle(&mut rng, &mut path);
    edges.extend(path.windows(2).map(|w| (w[0], w[1])));
    for i in 0..300u64 {
        edges.push((20_000 + 2 * i, 20_001 + 2 * i));
    }
    for t in 0..40u64 {
        let base = 30_000 + t * 100;
        for k in 1..(5 + t % 30) {
            edges.push((base + k, base + rng.below(k as usize) as u64));
        }
    }
    edges.extend([(7, 7), (8, 8), (path[500], path[500])]);
    let dup: Vec<(u64, u64)> = edges.iter().step_by(7).copied().collect();
    edges.extend(dup.iter().map(|&(a, b)| (b, a)));
    edges.extend(dup.iter().take(50));
    edges.extend([
        (1_000_000_000_000, 999_999_999_999),
        (999_999_999_999, path[1234]),
        (1_000_000_000_000, 1_000_000_000_000),
        (500_000_000_000, 500_000_000_001),
    ]);
    shuffle(&mut rng, &mut edges);
    edges
}

/// Writes `edges` as text lines over `files` files in `dir/edges/` (some with tabs, blank
/// lines, CRLF and no final newline).
fn write_edges(dir: &Path, edges: &[(u64, u64)], files: usize) -> PathBuf {
    let input = dir.join("edges");
    std::fs::create_dir_all(&input).unwrap();
    let per = edges.len().div_ceil(files);
    for (i, chunk) in edges.chunks(per).enumerate() {
        let mut text = String::new();
        for (k, (a, b)) in chunk.iter().enumerate() {
            match k % 5 {
                0 => text.push_str(&format!("{a}\t{b}\n")),
                1 => text.push_str(&format!("  {a}   {b}  \r\n")),
                2 => text.push_str(&format!("{a} {b}\n\n")),
                _ => text.push_str(&format!("{a} {b}\n")),
            }
        }
        if i == 0 {
            text.pop(); // no final newline
        }
        std::fs::write(input.join(format!("part-{i}.txt")), text).unwrap();
    }
    input
}

/// Reads every part file of `out`: vertex → component, each vertex once.
fn read_result(out: &Path, workers: usize) -> BTreeMap<u64, u64> {
    assert!(out.join("_SUCCESS").exists(), "no _SUCCESS in {out:?}");
    let mut got = BTreeMap::new();
    for r in 0..workers {
        let text = std::fs::read_to_string(out.join(format!("part-{r:05}"))).unwrap();
        for line in text.lines() {
            let (v, c) = line.split_once('\t').expect("vertex<TAB>component");
            let (v, c): (u64, u64) = (v.parse().unwrap(), c.parse().unwrap());
            assert!(got.insert(v, c).is_none(), "vertex {v} twice");
        }
    }
    assert!(!out.join(format!("part-{workers:05}")).exists());
    got
}

fn components(input: &Path, out: &Path, workers: usize) -> Output {
    harp(&[
        "components",
        "--workers",
        &workers.to_string(),
        "--timeout",
        "30",
        "--input",
        &s(input),
        "--output",
        &s(out),
        "--overwrite",
    ])
}

#[test]
fn components_equal_union_find_on_1_to_4_workers() {
    let dir = tmpdir("graph");
    let edges = graph();
    let want = union_find(&edges);
    let input = write_edges(&dir, &edges, 3);
    let comps: std::collections::BTreeSet<u64> = want.values().copied().collect();
    assert!(comps.len() > 340, "many components: {}", comps.len());
    for workers in 1..=4 {
        let out = dir.join(format!("out-{workers}"));
        let o = components(&input, &out, workers);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{workers} workers: {}\n{stdout}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(read_result(&out, workers), want, "{workers} workers");
        // Every worker reports the same job totals.
        let totals: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.split_once("job: ").map(|(_, t)| t))
            .collect();
        assert_eq!(totals.len(), workers, "{stdout}");
        assert!(totals.iter().all(|t| *t == totals[0]), "{stdout}");
    }
}

/// A single path of 2000 vertices given in random order, alone: the smallest id must travel
/// across the whole chain (many propagation rounds) before the job is quiet.
#[test]
fn a_long_chain_in_random_order_ends_with_one_component() {
    let dir = tmpdir("chain");
    let mut rng = Rng::new(7);
    let mut path: Vec<u64> = (0..2000).map(|i| i * 3 + 5).collect();
    shuffle(&mut rng, &mut path);
    let mut edges: Vec<(u64, u64)> = path.windows(2).map(|w| (w[0], w[1])).collect();
    shuffle(&mut rng, &mut edges);
    let input = write_edges(&dir, &edges, 1);
    for workers in [2, 4] {
        let out = dir.join(format!("out-{workers}"));
        let o = components(&input, &out, workers);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = read_result(&out, workers);
        assert_eq!(got.len(), 2000);
        assert!(got.values().all(|&c| c == 5), "every vertex in component 5");
    }
}

/// Every worker sends many times its event window to every other, in both phases (edges while
/// reading, the first labels): no worker may wait for credit from a peer that waits for its
/// own (before, reading blocked in a full window while the peer did the same, or waited in a
/// collective, and the job failed at the timeout). 60,000 random edges over 3,000 vertices,
/// a 4 KiB window, one input file per worker.
#[test]
fn workers_sending_many_windows_to_each_other_finish() {
    let dir = tmpdir("windows");
    let mut rng = Rng::new(11);
    let edges: Vec<(u64, u64)> = (0..60_000)
        .map(|_| (rng.below(3000) as u64, rng.below(3000) as u64))
        .collect();
    let want = union_find(&edges);
    let input = write_edges(&dir, &edges, 3);
    for workers in [2, 3] {
        let out = dir.join(format!("out-{workers}"));
        run_with_window("components", workers, 20, 4096, &s(&input), &out);
        assert_eq!(read_result(&out, workers), want, "{workers} workers");
    }
}

/// A bad token fails every worker with the file, line and token; the output directory keeps
/// an earlier result untouched (and gets no _SUCCESS).
#[test]
fn bad_input_names_file_line_and_token_and_writes_nothing() {
    let dir = tmpdir("bad");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "earlier").unwrap();
    let cases: [(&str, usize, &str); 5] = [
        ("1 2\n3 4\n5 -6\n", 3, "column 2: bad vertex id '-6'"),
        ("1 2\n3 x\n", 2, "column 2: bad vertex id 'x'"),
        (
            "1 2\n\n7\n",
            3,
            "expected an edge 'src dst [weight]', found 1 field: '7'",
        ),
        (
            "1 2 3 4\n",
            1,
            "expected an edge 'src dst [weight]', found 4 fields: '1 2 3 4'",
        ),
        (
            "1 2 0.5\n3 4 nan\n",
            2,
            "bad weight 'nan': expected a positive number",
        ),
    ];
    for (k, (text, line, msg)) in cases.iter().enumerate() {
        let input = dir.join(format!("bad-{k}.txt"));
        // Enough good lines first that the bad one is in the last worker's share.
        let mut body = "1 2\n".repeat(50);
        body.push_str(text);
        std::fs::write(&input, &body).unwrap();
        let want = format!("{}:{}: {msg}", s(&input), 50 + line);
        for workers in [1, 3] {
            let o = components(&input, &out, workers);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success());
            assert!(err.contains(&want), "missing {want:?} in:\n{err}");
            assert!(!err.contains("panicked"), "{err}");
            let names: Vec<String> = std::fs::read_dir(&out)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(names, vec!["keep.txt".to_string()], "{workers} workers");
        }
    }
    let o = components(&dir.join("missing"), &out, 2);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing"));
    assert!(!out.join("_SUCCESS").exists());
}
