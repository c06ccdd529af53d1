//! `harp layout` with real worker processes: the layout is the same for W = 1…4 and equals the
//! sequential reference (`apps::layout::reference`); bad input names file, line and token and
//! leaves the output directory alone.

mod common;

use std::path::Path;

use common::{harp, s, tmpdir};

use harp::apps::layout;
use harp::util::Rng;

/// Every `vertex x y` line of the committed part files, in part order.
fn positions(out: &Path, workers: usize) -> Vec<(i64, f64, f64)> {
    assert!(out.join("_SUCCESS").exists());
    let mut v = Vec::new();
    for r in 0..workers {
        let text = std::fs::read_to_string(out.join(format!("part-{r:05}"))).unwrap();
        for line in text.lines() {
            let t: Vec<&str> = line.split(' ').collect();
            assert_eq!(t.len(), 3, "{line}");
            v.push((
                t[0].parse().unwrap(),
                t[1].parse().unwrap(),
                t[2].parse().unwrap(),
            ));
        }
    }
    v
}

/// Sparse ids, comments, blank lines, repeated and reversed edges and self-loops, over two
/// files: every worker count gives the reference's layout (and each other's, bit for bit).
#[test]
fn layout_is_independent_of_the_worker_count_and_equals_the_reference() {
    let dir = tmpdir("layout-ref");
    let input = dir.join("edges");
    std::fs::create_dir_all(&input).unwrap();
    let mut rng = Rng::new(17);
    let mut edges = Vec::new();
    for f in 0..2 {
        let mut text = String::from("# src dst\n\n");
        for i in 0..130 {
            let a = rng.below(90) as i64 * 11 + 3;
            let b = if i % 17 == 0 {
                a
            } else {
                rng.below(90) as i64 * 11 + 3
            };
            edges.push((a, b));
            text.push_str(&format!("{a}\t{b}\n"));
            if i % 9 == 0 {
                text.push_str(&format!("  {b} {a}\n   # again, reversed\n"));
                edges.push((b, a));
            }
        }
        std::fs::write(input.join(format!("part-{f}")), text).unwrap();
    }
    edges.push((5_000_000_000, 3));
    std::fs::write(input.join("part-2"), "5000000000 3").unwrap();
    let want = layout::reference(&edges, 15, 9);
    let mut first: Option<Vec<(i64, f64, f64)>> = None;
    for w in 1..=4usize {
        let out = dir.join(format!("out-{w}"));
        let (i, o, ws) = (s(&input), s(&out), w.to_string());
        let threads = if w == 2 { "2" } else { "1" };
        let r = harp(&[
            "layout",
            "--workers",
            &ws,
            "--input",
            &i,
            "--iterations",
            "15",
            "--seed",
            "9",
            "--threads",
            threads,
            "--output",
            &o,
        ]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let got = positions(&out, w);
        assert_eq!(got.len(), want.len());
        let side = (want.len() as f64).sqrt();
        for (g, e) in got.iter().zip(&want) {
            assert_eq!(g.0, e.0);
            assert!((g.1 - e.1).abs() <= 1e-9 * side, "W={w} vertex {}", g.0);
            assert!((g.2 - e.2).abs() <= 1e-9 * side, "W={w} vertex {}", g.0);
        }
        match &first {
            None => first = Some(got),
            Some(f) => assert_eq!(f, &got, "W={w} differs from W=1"),
        }
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["vertices"].as_u64().unwrap() as usize, want.len());
    }
    // The layout moved the vertices from their start.
    let start: Vec<[f64; 2]> = want
        .iter()
        .map(|v| layout::initial_position(9, v.0, (want.len() as f64).sqrt()))
        .collect();
    assert!(want
        .iter()
        .zip(&start)
        .any(|(v, s)| (v.1 - s[0]).abs() > 0.1));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bad id names the file, the line and the token; a missing input names the path; an earlier
/// result stays as it was.
#[test]
fn bad_edges_name_file_line_and_token() {
    let dir = tmpdir("layout-bad");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("part-00000"), "earlier\n").unwrap();
    std::fs::write(out.join("_SUCCESS"), "").unwrap();
    let mut text = String::new();
    for i in 0..200 {
        text.push_str(&format!("{i} {}\n", i + 1));
    }
    let cases = [
        ("170 x7", "column 2: bad vertex id 'x7'"),
        ("-4 170", "column 1: bad vertex id '-4'"),
        (
            "170",
            "expected an edge 'src dst [weight]', found 1 field: '170'",
        ),
    ];
    for (k, (bad, msg)) in cases.iter().enumerate() {
        let p = dir.join(format!("e{k}.txt"));
        std::fs::write(&p, text.clone() + bad + "\n" + "1 2\n").unwrap();
        let (ps, os) = (s(&p), s(&out));
        let r = harp(&[
            "layout",
            "--workers",
            "3",
            "--input",
            &ps,
            "--output",
            &os,
            "--overwrite",
        ]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success() && !err.contains("panicked"), "{err}");
        assert!(
            err.contains(&format!("{ps}:201: ")) && err.contains(msg),
            "{err}"
        );
    }
    let (m, os) = (s(&dir.join("missing")), s(&out));
    let r = harp(&[
        "layout",
        "--workers",
        "2",
        "--input",
        &m,
        "--output",
        &os,
        "--overwrite",
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains(&m), "{err}");
    assert_eq!(
        std::fs::read_to_string(out.join("part-00000")).unwrap(),
        "earlier\n"
    );
    assert!(!out.join("summary.json").exists());
    // No staging left behind by the failed runs.
    assert!(!out.join("_temporary").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
