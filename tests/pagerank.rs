//! `harp pagerank` with real worker processes against the sequential reference
//! (`harp::apps::pagerank::reference`), input errors, and the output left untouched on failure.

mod common;

use common::{harp, ok, s, tmpdir};

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use harp::apps::pagerank::{
    load_share, read_all_edges, read_all_weighted_edges, reference, reference_weighted,
};
use harp::storage::{LocalStorage, Storage};

fn failed(o: Output) -> String {
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The ranks in every part file of `dir`; each vertex must appear once.
fn ranks(dir: &Path, workers: usize) -> BTreeMap<i64, f64> {
    assert!(dir.join("_SUCCESS").exists());
    let mut m = BTreeMap::new();
    for r in 0..workers {
        let text = std::fs::read_to_string(dir.join(format!("part-{r:05}"))).unwrap();
        for line in text.lines() {
            let (v, x) = line.split_once('\t').expect("vertex<TAB>rank");
            let before = m.insert(v.parse::<i64>().unwrap(), x.parse::<f64>().unwrap());
            assert!(before.is_none(), "vertex {v} twice");
        }
    }
    m
}

fn check_against_reference(got: &BTreeMap<i64, f64>, edges: &[(i64, i64)], iters: usize, d: f64) {
    check_close(got, &reference(edges, iters, d));
}

/// Every vertex of `want` and no other, each rank within 1e-12 relative.
fn check_close(got: &BTreeMap<i64, f64>, want: &[(i64, f64)]) {
    assert_eq!(got.len(), want.len(), "number of vertices");
    for &(v, r) in want {
        let g = got[&v];
        let rel = (g - r).abs() / r.abs();
        assert!(rel <= 1e-12, "vertex {v}: {g} vs {r} (relative {rel:e})");
    }
}

/// A reproducible pseudo-random number.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = (a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b).wrapping_add(0x632b_e59b_d9b4_e019);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The test graph, cut into uneven files (one empty): dangling vertices (7, 12, 10^12+3),
/// self-loops (3 → 3, 10^12 → 10^12), duplicate edges (1 → 2 three times), sparse large ids,
/// vertices without in-edges (20, 21), plus pseudo-random edges among 0..60, comments and blank
/// lines.
fn write_graph(dir: &Path) -> String {
    let input = dir.join("edges");
    std::fs::create_dir_all(&input).unwrap();
    let mut lines: Vec<String> = [
        "1 2",
        "1 2",
        "1 2",
        "2 1",
        "3 3",
        "3 4",
        "4 7",
        "20 1",
        "21 12",
        "1000000000000 1000000000000",
        "1000000000000 5",
        "5 1000000000003",
        "999999999999999 1",
        "2 999999999999999",
    ]
    .iter()
    .map(|l| l.to_string())
    .collect();
    for i in 0..400u64 {
        let (a, b) = (mix(1, i) % 60, mix(2, i) % 60);
        if a == 7 || a == 12 {
            continue; // stay dangling
        }
        lines.push(if i % 3 == 0 {
            format!("{a}\t{b}")
        } else {
            format!("  {a}  {b} ")
        });
    }
    lines.insert(5, "# a comment".into());
    lines.insert(9, String::new());
    let cuts = [0, 3, 3, 200, lines.len()];
    for (f, w) in cuts.windows(2).enumerate() {
        let mut text = lines[w[0]..w[1]].join("\n");
        if f != 2 {
            text.push('\n');
        }
        std::fs::write(input.join(format!("part-{f}")), text).unwrap();
    }
    s(&input)
}

/// `harp pagerank` on `workers` workers with `extra` options; it must succeed and report
/// `edges` edges.
fn run_pagerank(
    input: &str,
    out: &Path,
    workers: usize,
    iters: &str,
    edges: usize,
    extra: &[&str],
) {
    let w = workers.to_string();
    let out = s(out);
    let mut args = vec![
        "pagerank",
        "--workers",
        &w,
        "--input",
        input,
        "--iterations",
        iters,
    ];
    args.extend_from_slice(extra);
    args.extend(["--output", &out]);
    let text = ok(harp(&args));
    assert!(text.contains(&format!("{edges} edges")), "{text}");
}

#[test]
fn ranks_match_the_reference_on_1_to_4_workers() {
    let dir = tmpdir("ref");
    let input = write_graph(&dir);
    let edges = read_all_edges(&LocalStorage, &input).unwrap();
    assert_eq!(edges.len(), 14 + 400 - edges_skipped());
    for (workers, iters, d, threads, messages) in [
        (1usize, 12usize, 0.85, "1", "compiled"),
        (2, 12, 0.85, "2", "compiled"),
        (3, 7, 0.5, "1", "compiled"),
        (4, 12, 0.85, "3", "compiled"),
        (3, 12, 0.85, "1", "kv"),
        (2, 1, 1.0, "1", "kv"),
    ] {
        let out = dir.join(format!("out-{workers}-{messages}"));
        let (it, dd) = (iters.to_string(), d.to_string());
        let args = [
            "--damping",
            &dd,
            "--threads",
            threads,
            "--messages",
            messages,
        ];
        run_pagerank(&input, &out, workers, &it, edges.len(), &args);
        let got = ranks(&out, workers);
        check_against_reference(&got, &edges, iters, d);
    }
    // The compiled plan and key-value messages give the same bits.
    let a = std::fs::read_to_string(dir.join("out-3-compiled/part-00001")).unwrap();
    let kv = dir.join("out-3-kv-again");
    ok(harp(&[
        "pagerank",
        "--workers",
        "3",
        "--input",
        &input,
        "--iterations",
        "7",
        "--damping",
        "0.5",
        "--messages",
        "kv",
        "--output",
        &s(&kv),
    ]));
    assert_eq!(a, std::fs::read_to_string(kv.join("part-00001")).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Weighted edges: lines with and without a weight (1), in three files of which the first has
/// no weight at all, so that on several workers some shares are unweighted and must agree with
/// the others. Ranks follow the weighted reference on 1–4 workers in both message modes, and
/// the two modes give the same bits.
#[test]
fn weighted_edges_split_ranks_by_weight_on_1_to_4_workers() {
    let dir = tmpdir("weighted");
    let input = dir.join("edges");
    std::fs::create_dir_all(&input).unwrap();
    let mut files = [String::new(), String::new(), String::new()];
    for i in 0..600u64 {
        let (a, b) = (mix(5, i) % 40, mix(6, i) % 40);
        files[0].push_str(&format!("{a} {b}\n"));
    }
    for i in 0..240u64 {
        let (a, b) = (mix(7, i) % 40, mix(8, i) % 40);
        let w = 1 + mix(9, i) % 1000;
        let f = 1 + (i % 2) as usize;
        if i % 5 == 0 {
            files[f].push_str(&format!("{a} {b}\n"));
        } else {
            files[f].push_str(&format!("{a}\t{b}\t{}\n", w as f64 / 8.0));
        }
    }
    files[2].push_str("# a dangling vertex\n3 99 0.125\n");
    for (f, text) in files.iter().enumerate() {
        std::fs::write(input.join(format!("part-{f}")), text).unwrap();
    }
    let input = s(&input);
    // On 2 workers the first share has no weight at all; the second has.
    let listed = LocalStorage.list_input(&input, false).unwrap();
    for (rank, weighted) in [(0, false), (1, true)] {
        let share = load_share(&LocalStorage, &listed, rank, 2).unwrap();
        assert_eq!(share.weighted(), weighted, "share {rank} of 2");
    }
    let edges = read_all_weighted_edges(&LocalStorage, &input).unwrap();
    assert_eq!(edges.len(), 600 + 240 + 1);
    assert!(edges.iter().any(|e| e.2 != 1.0));
    let want = reference_weighted(&edges, 10, 0.85);
    for (workers, messages) in [
        (1usize, "compiled"),
        (2, "kv"),
        (3, "compiled"),
        (3, "kv"),
        (4, "compiled"),
    ] {
        let out = dir.join(format!("out-{workers}-{messages}"));
        run_pagerank(
            &input,
            &out,
            workers,
            "10",
            edges.len(),
            &["--messages", messages],
        );
        check_close(&ranks(&out, workers), &want);
    }
    let a = std::fs::read_to_string(dir.join("out-3-compiled/part-00002")).unwrap();
    assert_eq!(
        a,
        std::fs::read_to_string(dir.join("out-3-kv/part-00002")).unwrap()
    );
    // Weights whose sum an f64 cannot hold fail the job, naming the vertex.
    let big = dir.join("big.txt");
    std::fs::write(&big, "1 2 1e308\n1 3 1e308\n2 1\n").unwrap();
    let err = failed(harp(&[
        "pagerank",
        "--workers",
        "2",
        "--input",
        &s(&big),
        "--output",
        &s(&dir.join("out-big")),
    ]));
    assert!(
        err.contains("the weights of vertex 1's 2 out-edges add up to more than an f64 holds"),
        "{err}"
    );
    // Weights matter: the unweighted ranks of the same edges differ.
    let plain: Vec<(i64, i64)> = edges.iter().map(|e| (e.0, e.1)).collect();
    let unweighted = reference(&plain, 10, 0.85);
    assert!(unweighted
        .iter()
        .zip(&want)
        .any(|(a, b)| (a.1 - b.1).abs() > 1e-6));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Edges of the pseudo-random part dropped to keep 7 and 12 dangling.
fn edges_skipped() -> usize {
    (0..400u64)
        .filter(|&i| [7, 12].contains(&(mix(1, i) % 60)))
        .count()
}

#[test]
fn bad_input_names_file_line_and_token_and_writes_nothing() {
    let dir = tmpdir("bad");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("part-00000"), "earlier result\n").unwrap();
    for (text, line, msg) in [
        ("1 2\n3 x\n", 2, "column 2: bad vertex id 'x'"),
        ("1 2\n\n5 -4\n", 3, "column 2: bad vertex id '-4'"),
        (
            "1 2 3 4\n",
            1,
            "expected an edge 'src dst [weight]', found 4 fields: '1 2 3 4'",
        ),
        (
            "1 2\n2 1\n7\n",
            3,
            "expected an edge 'src dst [weight]', found 1 field: '7'",
        ),
        (
            "1 2 0.5\n2 1 -3\n",
            2,
            "bad weight '-3': expected a positive number",
        ),
        ("1 2 x\n", 1, "bad weight 'x': expected a positive number"),
        ("1 2.5\n", 1, "column 2: bad vertex id '2.5'"),
    ] {
        let input = dir.join("in.txt");
        // Padding so that the bad line falls in the last worker's share.
        std::fs::write(&input, format!("{}{text}", "0 1\n".repeat(50))).unwrap();
        let want = format!("{}:{}: {msg}", s(&input), line + 50);
        for workers in ["1", "3"] {
            let err = failed(harp(&[
                "pagerank",
                "--workers",
                workers,
                "--input",
                &s(&input),
                "--output",
                &s(&out),
                "--overwrite",
            ]));
            assert!(err.contains(&want), "{workers} workers: {err}\nwant {want}");
            let names: Vec<String> = std::fs::read_dir(&out)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(names, vec!["part-00000".to_string()], "{err}");
            assert_eq!(
                std::fs::read_to_string(out.join("part-00000")).unwrap(),
                "earlier result\n"
            );
        }
    }
    let err = failed(harp(&[
        "pagerank",
        "--workers",
        "2",
        "--input",
        &s(&dir.join("missing")),
        "--output",
        &s(&out),
        "--overwrite",
    ]));
    assert!(err.contains("missing"), "{err}");
    let err = failed(harp(&[
        "pagerank",
        "--workers",
        "1",
        "--input",
        "x",
        "--damping",
        "1.5",
        "--output",
        &s(&out),
    ]));
    assert!(err.contains("--damping"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A larger skewed graph (60,000 edges over up to 30,000 sparse ids), so that the per-slot
/// sums are split across threads and every worker sends thousands of contributions to every
/// other: still the reference's ranks, and the same bits with 1 and 3 threads.
#[test]
fn a_larger_graph_with_threads_matches_the_reference() {
    let dir = tmpdir("large");
    let input = dir.join("edges.txt");
    let mut text = String::new();
    for i in 0..60_000u64 {
        let u = (mix(3, i) % 1000) as f64 / 1000.0;
        let src = (30_000.0 * u * u) as u64 * 1_000_003;
        let dst = (mix(4, i) % 30_000) * 1_000_003;
        text.push_str(&format!("{src} {dst}\n"));
    }
    std::fs::write(&input, text).unwrap();
    let input = s(&input);
    let edges = read_all_edges(&LocalStorage, &input).unwrap();
    let mut parts = Vec::new();
    for (workers, threads) in [(2usize, "3"), (4, "2"), (2, "1")] {
        let out = dir.join(format!("out-{workers}-{threads}"));
        let w = workers.to_string();
        ok(harp(&[
            "pagerank",
            "--workers",
            &w,
            "--threads",
            threads,
            "--input",
            &input,
            "--iterations",
            "15",
            "--output",
            &s(&out),
        ]));
        check_against_reference(&ranks(&out, workers), &edges, 15, 0.85);
        parts.push(std::fs::read_to_string(out.join("part-00001")).unwrap());
    }
    assert_eq!(parts[0], parts[2], "threads do not change the sums");
    std::fs::remove_dir_all(&dir).unwrap();
}
