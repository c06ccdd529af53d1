//! `harp id3` with real `harp` processes on loopback: the tree equals a sequential ID3 written
//! here (recursive, independently of the app's filters) for 1..4 workers on a dataset whose
//! tree has several levels, leaves that stop early and attributes never used; bad input names
//! the file, line and reason and leaves the output untouched.

mod common;

use common::{harp, run_with_window, s, tmpdir};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use harp::util::Rng;

type Row = (Vec<String>, String);

fn entropy(counts: &BTreeMap<&str, u64>) -> f64 {
    let n: u64 = counts.values().sum();
    counts
        .values()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum()
}

fn class_counts<'a>(rows: &[&'a Row]) -> BTreeMap<&'a str, u64> {
    let mut m = BTreeMap::new();
    for r in rows {
        *m.entry(r.1.as_str()).or_insert(0) += 1;
    }
    m
}

fn majority(m: &BTreeMap<&str, u64>) -> String {
    let best = m.values().max().copied().unwrap_or(0);
    m.iter()
        .find(|(_, &n)| n == best)
        .map(|(c, _)| c.to_string())
        .unwrap()
}

/// Textbook ID3: a pure node or one where no attribute gains is a leaf (majority class, ties to
/// the smallest name); otherwise split on the attribute of highest gain (ties to the lowest
/// index), one child per value present; a child without attributes left is a leaf.
fn reference(rows: &[&Row], path: &str, unused: &[usize], out: &mut BTreeSet<String>) {
    let classes = class_counts(rows);
    if classes.len() <= 1 || unused.is_empty() {
        out.insert(format!("{path}\tleaf {}", majority(&classes)));
        return;
    }
    let n = rows.len() as f64;
    let mut best: Option<(usize, f64)> = None;
    for &a in unused {
        let mut by: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for r in rows {
            *by.entry(r.0[a].as_str())
                .or_default()
                .entry(r.1.as_str())
                .or_insert(0) += 1;
        }
        let split: f64 = by
            .values()
            .map(|m| m.values().sum::<u64>() as f64 / n * entropy(m))
            .sum();
        let g = entropy(&classes) - split;
        if best.is_none_or(|(_, b)| g > b) {
            best = Some((a, g));
        }
    }
    let (a, g) = best.unwrap();
    if g <= 0.0 {
        out.insert(format!("{path}\tleaf {}", majority(&classes)));
        return;
    }
    out.insert(format!("{path}\tsplit a{a}"));
    let values: BTreeSet<&str> = rows.iter().map(|r| r.0[a].as_str()).collect();
    let rest: Vec<usize> = unused.iter().copied().filter(|&x| x != a).collect();
    for v in values {
        let sub: Vec<&Row> = rows.iter().copied().filter(|r| r.0[a] == v).collect();
        let child = if path == "/" {
            format!("a{a}={v}")
        } else {
            format!("{path}/a{a}={v}")
        };
        reference(&sub, &child, &rest, out);
    }
}

/// 1500 tuples of 6 attributes: the class follows a rule on a0, a2 and a3 (a small tree), with
/// 3% noise; a4 is constant; a5 is random.
fn dataset() -> Vec<Row> {
    let mut rng = Rng::new(2005);
    let vals = |k: usize, rng: &mut Rng| ["x", "y", "z", "w"][rng.below(k)].to_string();
    (0..1500)
        .map(|_| {
            let v: Vec<String> = vec![
                vals(3, &mut rng),
                vals(2, &mut rng),
                vals(4, &mut rng),
                vals(2, &mut rng),
                "k".to_string(),
                vals(4, &mut rng),
            ];
            let mut class = match (v[0].as_str(), v[2].as_str(), v[3].as_str()) {
                ("x", _, _) => "yes",
                ("y", "x" | "y", _) => "no",
                ("y", _, "x") => "maybe",
                ("y", _, _) => "yes",
                (_, "w", _) => "no",
                _ => "maybe",
            };
            if rng.below(33) == 0 {
                class = ["yes", "no", "maybe"][rng.below(3)];
            }
            (v, class.to_string())
        })
        .collect()
}

fn write(dir: &Path, rows: &[Row]) -> String {
    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    for (i, chunk) in rows.chunks(rows.len().div_ceil(3)).enumerate() {
        let mut text = String::new();
        for (k, (v, c)) in chunk.iter().enumerate() {
            match k % 4 {
                0 => text.push_str(&format!("{}, {c}\r\n", v.join(" , "))),
                1 => text.push_str(&format!("{},{c}\n\n", v.join(","))),
                _ => text.push_str(&format!("{},{c}\n", v.join(","))),
            }
        }
        std::fs::write(input.join(format!("part-{i}.csv")), text).unwrap();
    }
    s(&input)
}

fn id3(input: &str, out: &Path, workers: usize) -> std::process::Output {
    harp(&[
        "id3",
        "--workers",
        &workers.to_string(),
        "--timeout",
        "30",
        "--input",
        input,
        "--output",
        &s(out),
        "--overwrite",
    ])
}

#[test]
fn the_tree_equals_a_sequential_id3_on_1_to_4_workers() {
    let dir = tmpdir("id3");
    let rows = dataset();
    let all: Vec<&Row> = rows.iter().collect();
    let mut want = BTreeSet::new();
    reference(&all, "/", &(0..6).collect::<Vec<_>>(), &mut want);
    let splits = want.iter().filter(|l| l.contains("\tsplit")).count();
    assert!(
        splits >= 4 && want.len() > 12,
        "a tree of several levels: {want:?}"
    );
    assert!(
        !want.iter().any(|l| l.contains("split a4")),
        "a4 never gains"
    );
    let input = write(&dir, &rows);
    for workers in 1..=4 {
        let out = dir.join(format!("out-{workers}"));
        let o = id3(&input, &out, workers);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{workers} workers: {}\n{stdout}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.join("_SUCCESS").exists());
        let mut got = BTreeSet::new();
        for r in 0..workers {
            let text = std::fs::read_to_string(out.join(format!("part-{r:05}"))).unwrap();
            for line in text.lines() {
                assert!(got.insert(line.to_string()), "{line} twice");
            }
        }
        assert_eq!(got, want, "{workers} workers");
        let totals: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.split_once("job: ").map(|(_, t)| t))
            .collect();
        assert_eq!(totals.len(), workers, "{stdout}");
        assert!(totals.iter().all(|t| *t == totals[0]), "{stdout}");
    }
}

/// Twelve attributes of about a thousand values each: every worker's count tables for the
/// root are many times the 4 KiB event window, and about half go to the other worker. The
/// root's counts go out from the event loop, where a send never waits for credit; sent before
/// it (the build before), both workers waited for each other until the timeout. The tree on 2
/// workers equals the tree on 1.
#[test]
fn workers_with_many_windows_of_counts_for_each_other_finish() {
    let dir = tmpdir("id3-windows");
    let mut rng = Rng::new(77);
    let rows: Vec<Row> = (0..4000)
        .map(|_| {
            let v = (0..12)
                .map(|j| format!("a{j}v{}", rng.below(1000)))
                .collect();
            (v, ["yes", "no"][rng.below(2)].to_string())
        })
        .collect();
    let input = write(&dir, &rows);
    let trees: Vec<BTreeSet<String>> = [1, 2]
        .iter()
        .map(|&workers| {
            let out = dir.join(format!("out-{workers}"));
            run_with_window("id3", workers, 15, 4096, &input, &out);
            (0..workers)
                .flat_map(|r| {
                    let text = std::fs::read_to_string(out.join(format!("part-{r:05}"))).unwrap();
                    text.lines().map(str::to_string).collect::<Vec<_>>()
                })
                .collect()
        })
        .collect();
    assert!(trees[0].len() > 100, "a wide tree: {}", trees[0].len());
    assert_eq!(trees[0], trees[1]);
}

#[test]
fn bad_input_names_the_file_and_line_and_writes_nothing() {
    let dir = tmpdir("id3-bad");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "earlier").unwrap();
    for (text, want) in [
        (
            "a,b,yes\nc,d,no\ne,no\n",
            "bad.csv:3: 1 attribute values, where the first line has 2",
        ),
        ("a,b,yes\nlonely\n", "bad.csv:2: 1 field(s)"),
    ] {
        let input = dir.join("bad.csv");
        std::fs::write(&input, text).unwrap();
        let o = id3(&s(&input), &out, 2);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(err.contains(want), "{want}: {err}");
        assert!(!out.join("_SUCCESS").exists());
        assert_eq!(
            std::fs::read_to_string(out.join("keep.txt")).unwrap(),
            "earlier"
        );
    }
}
