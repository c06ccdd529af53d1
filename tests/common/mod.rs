//! Helpers shared by the multi-process tests that include them (`mod common;`): run the real
//! `harp` binary, check its success or failure, scratch directories.
#![allow(dead_code)] // each test crate uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `harp ARGS` (quiet logs, backtraces on so a panic would show).
pub fn harp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harp"))
        .args(args)
        .env("HARP_LOG", "warn")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("harp runs")
}

/// Asserts success; returns standard output.
pub fn ok(o: Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Runs `harp APP --workers W --timeout SECS --event-window BYTES --input IN --output OUT`
/// (an event application with a small window), which must succeed.
pub fn run_with_window(app: &str, workers: usize, secs: u32, window: u64, input: &str, out: &Path) {
    let o = harp(&[
        app,
        "--workers",
        &workers.to_string(),
        "--timeout",
        &secs.to_string(),
        "--event-window",
        &window.to_string(),
        "--input",
        input,
        "--output",
        &s(out),
    ]);
    assert!(
        o.status.success(),
        "{app}, {workers} workers: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Asserts a failure with an exit code (not a signal), no panic, and every one of `want` in
/// standard error; returns standard error.
pub fn fails(o: &Output, want: &[&str]) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        matches!(o.status.code(), Some(c) if c != 0),
        "expected a failure, got {:?}\n{err}",
        o.status
    );
    assert!(!err.contains("panicked"), "{err}");
    for w in want {
        assert!(err.contains(w), "missing {w:?} in:\n{err}");
    }
    err
}

/// A fresh directory under the system temporary directory, unique to this process.
pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("harp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}
