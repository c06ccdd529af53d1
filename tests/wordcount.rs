//! `harp wordcount` with real `harp` processes on loopback: the result equals a sequential
//! count (written here, independently of the engine) for 1–4 workers on uneven inputs, and
//! input or output mistakes fail clearly without touching an earlier result.

mod common;

use common::{harp, s, tmpdir};

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Output;

fn wordcount(workers: usize, input: &Path, output: &Path, extra: &[&str]) -> Output {
    let w = workers.to_string();
    let (i, o) = (s(input), s(output));
    let mut args = vec![
        "wordcount",
        "--workers",
        &w,
        "--timeout",
        "60",
        "--input",
        &i,
        "--output",
        &o,
    ];
    args.extend_from_slice(extra);
    harp(&args)
}

/// Java's StringTokenizer default delimiters, as bytes.
fn count_sequentially(files: &[Vec<u8>]) -> HashMap<Vec<u8>, u64> {
    let mut m = HashMap::new();
    for f in files {
        for tok in f.split(|b| b" \t\n\r\x0c".contains(b)) {
            if !tok.is_empty() {
                *m.entry(tok.to_vec()).or_insert(0) += 1;
            }
        }
    }
    m
}

/// Reads `part-*` files: every line `word<TAB>count`, words sorted within a part, no word in
/// two parts, each word in the part of the worker owning its partition (`hash mod N mod W`).
fn read_result(out: &Path, workers: usize, partitions: u32) -> HashMap<Vec<u8>, u64> {
    assert!(out.join("_SUCCESS").exists(), "no _SUCCESS in {out:?}");
    assert!(!out.join("_temporary").exists());
    let mut got = HashMap::new();
    for r in 0..workers {
        let bytes = std::fs::read(out.join(format!("part-{r:05}"))).unwrap();
        let mut prev: Option<Vec<u8>> = None;
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\n").expect("lines end with a newline");
            let tab = line.iter().rposition(|&b| b == b'\t').expect("a tab");
            let (word, n) = (&line[..tab], &line[tab + 1..]);
            let n: u64 = std::str::from_utf8(n).unwrap().parse().unwrap();
            let pid = harp::data::kv::partition_of(harp::data::Key::Str(word), partitions);
            assert_eq!(
                pid as usize % workers,
                r,
                "{:?}",
                String::from_utf8_lossy(word)
            );
            if let Some(p) = &prev {
                assert!(p.as_slice() < word, "part {r} is not sorted");
            }
            prev = Some(word.to_vec());
            assert!(
                got.insert(word.to_vec(), n).is_none(),
                "a word in two parts"
            );
        }
    }
    got
}

/// Deterministic text: a skewed vocabulary, tabs, CR LF, form feeds, vertical tabs and
/// non-breaking spaces inside tokens, bytes that are not UTF-8, and lines of every length.
fn text(seed: u64, bytes: usize) -> Vec<u8> {
    let mut x = seed;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let mut t = Vec::with_capacity(bytes + 64);
    while t.len() < bytes {
        let r = next();
        let word = r % 1000;
        // Skewed: small numbers far more often.
        let word = word * word / 1000;
        t.extend_from_slice(format!("w{word}").as_bytes());
        match r % 23 {
            0 => t.extend_from_slice(b"\xff\xfe"),
            1 => t.extend_from_slice("é\u{a0}x".as_bytes()),
            2 => t.push(0x0b),
            _ => {}
        }
        t.extend_from_slice(match next() % 11 {
            0 => &b"\n"[..],
            1 => b"\r\n",
            2 => b"\t",
            3 => b"\x0c",
            4 => b"  ",
            5 => b" \n\n",
            _ => b" ",
        });
    }
    t
}

#[test]
fn counts_equal_a_sequential_count_for_1_to_4_workers() {
    let d = tmpdir("ref");
    let input = d.join("in");
    std::fs::create_dir_all(&input).unwrap();
    let mut files = vec![
        text(1, 300_000),
        text(2, 4_000),
        Vec::new(),
        text(3, 90_001),
        b"\r\n\t tail-without-newline".to_vec(),
    ];
    // A very long token (1 MB) crossing every split boundary of a small file.
    let mut long = b"start ".to_vec();
    long.extend(std::iter::repeat_n(b'z', 1 << 20));
    long.extend_from_slice(b" end\n");
    files.push(long);
    for (i, f) in files.iter().enumerate() {
        std::fs::write(input.join(format!("f{i}.txt")), f).unwrap();
    }
    std::fs::write(input.join("_ignored"), b"hidden words").unwrap();
    std::fs::write(input.join(".ignored"), b"hidden words").unwrap();
    let want = count_sequentially(&files);
    let tokens: u64 = want.values().sum();
    for workers in 1..=4 {
        for (threads, partitions) in [(1, None), (3, Some(7u32))] {
            let out = d.join(format!("out-{workers}-{threads}"));
            let mut extra = vec!["--threads".to_string(), threads.to_string()];
            if let Some(p) = partitions {
                extra.extend(["--partitions".to_string(), p.to_string()]);
            }
            let extra: Vec<&str> = extra.iter().map(|x| x.as_str()).collect();
            let o = wordcount(workers, &input, &out, &extra);
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{stdout}{}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                stdout.contains(&format!(
                    "wordcount: {} distinct words, {tokens} tokens",
                    want.len()
                )),
                "{stdout}"
            );
            let n = partitions.unwrap_or(8 * workers as u32);
            let got = read_result(&out, workers, n);
            assert_eq!(got.len(), want.len(), "W={workers} T={threads}");
            assert!(got == want, "W={workers} T={threads}: counts differ");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// An empty file (and a directory without input files) gives an empty, committed result, as
/// Hadoop's WordCount does.
#[test]
fn empty_input_gives_an_empty_committed_result() {
    let d = tmpdir("empty");
    std::fs::write(d.join("empty.txt"), b"").unwrap();
    std::fs::create_dir_all(d.join("nofiles")).unwrap();
    std::fs::write(d.join("nofiles/_SUCCESS"), b"").unwrap();
    for (name, input) in [("file", d.join("empty.txt")), ("dir", d.join("nofiles"))] {
        let out = d.join(format!("out-{name}"));
        let o = wordcount(3, &input, &out, &[]);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            stdout.contains("wordcount: 0 distinct words, 0 tokens"),
            "{stdout}"
        );
        assert!(read_result(&out, 3, 24).is_empty());
    }
    let _ = std::fs::remove_dir_all(&d);
}

fn listing(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let p = e.path();
            (
                e.file_name().to_string_lossy().into_owned(),
                if p.is_file() {
                    std::fs::read(&p).unwrap()
                } else {
                    b"<dir>".to_vec()
                },
            )
        })
        .collect()
}

fn fails(o: &Output, want: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        matches!(o.status.code(), Some(c) if c != 0),
        "{:?}\n{err}",
        o.status
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(want), "missing {want:?} in:\n{err}");
    err
}

/// A missing input fails clearly and leaves an earlier result (with its _SUCCESS) exactly as
/// it was; an output that is a file fails before any input is read.
#[test]
fn mistakes_fail_clearly_and_leave_the_output_alone() {
    let d = tmpdir("mistakes");
    std::fs::write(d.join("a.txt"), b"to be or not to be\n").unwrap();
    let out = d.join("out");
    assert!(wordcount(2, &d.join("a.txt"), &out, &[]).status.success());
    let before = listing(&out);
    assert!(before.contains_key("_SUCCESS") && before.contains_key("part-00001"));
    let missing = d.join("no-such-input");
    let o = wordcount(2, &missing, &out, &[]);
    fails(&o, &format!("cannot read '{}'", s(&missing)));
    assert_eq!(listing(&out), before);

    // The output is a file: refused before the input is even looked at (it is missing too).
    let file = d.join("out-file");
    std::fs::write(&file, b"keep me").unwrap();
    let o = wordcount(2, &missing, &file, &[]);
    let err = fails(&o, "is a file; the result is a directory");
    assert!(!err.contains("no-such-input"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");

    // A subdirectory in the input is an error naming it (as for every input), before writing.
    std::fs::create_dir_all(d.join("in/sub")).unwrap();
    std::fs::write(d.join("in/x.txt"), b"x").unwrap();
    let o = wordcount(2, &d.join("in"), &out, &[]);
    fails(&o, "contains the subdirectory");
    assert_eq!(listing(&out), before);
    let o = wordcount(1, &d.join("a.txt"), &out, &["--threads", "0"]);
    fails(&o, "invalid value '0' for '--threads <THREADS>'");
    let _ = std::fs::remove_dir_all(&d);
}
