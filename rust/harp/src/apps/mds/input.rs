//! Reading a worker's row block of a dense N×N matrix (distances or weights).
//!
//! Two formats:
//! * [`Format::Text`]: one row per line, N numbers separated by whitespace and/or commas; blank
//!   lines are not rows. N is the number of values on the first row.
//! * [`Format::F64`]: raw little-endian `f64`, row after row, no header; N is the square root
//!   of the number of values (the size must be 8·N² bytes).
//!
//! An input may be a file or a directory of files (concatenated in name order, as every input
//! of [`crate::io`]). Every value must be a finite number ≥ 0. A bad value, a row with the wrong
//! number of values or a non-square matrix is an error naming the file and the line (text) or
//! record = row (f64). What is not checked: symmetry and the diagonal (the diagonal is never
//! read by the algorithm; row i is used as given, see `docs/apps-mds-layout.md`).
//!
//! The distances are split like any Hadoop input: text by bytes (a worker owns the rows that
//! start in its byte range, [`crate::io::lines`]), f64 by rows ([`crate::io::split::share`]).
//! Row blocks are contiguous and in rank order. The weights must then follow the distances'
//! blocks: a worker streams the weights from the start of the input, counting rows, parses only
//! its rows `[first, first + rows)` and stops (the worker owning the last row reads to the end
//! to check the row count).

use crate::apps::kmeans::input::{is_sep_or_blank, parse_line, text_dim};
use crate::error::{Error, Result};
use crate::io::lines::{for_each_line, STREAM_BLOCK};
use crate::io::{check_records, read_lines, read_records, split, LineError, RecordError};
use crate::storage::{FileInfo, Storage};

named_enum!(
    /// Format of a matrix file.
    Format, "matrix format", {
        /// One row per line.
        #[default]
        Text => "text" | "txt",
        /// Raw little-endian f64, row after row.
        F64 => "f64",
    }
);

/// The rows `[first, first + rows)` of an `n`×`n` matrix, row-major in `data`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rows {
    pub n: usize,
    pub first: usize,
    pub rows: usize,
    pub data: Vec<f64>,
}

/// What a matrix holds, for messages ("distance", "weight").
fn check_value(v: f64, col: usize, what: &str) -> std::result::Result<(), String> {
    if v < 0.0 {
        return Err(format!("column {col}: {what} {v} is negative"));
    }
    Ok(())
}

/// Parses one non-blank text row of `n` values into `out` and checks them (`what` names the
/// value in messages); on error `out` is left as it was.
fn parse_row(line: &[u8], n: usize, what: &str, out: &mut Vec<f64>) -> Result<(), String> {
    let before = out.len();
    parse_line::<f64>(line, 0, Some(n), out)?;
    if let Some((i, &v)) = out[before..].iter().enumerate().find(|(_, v)| **v < 0.0) {
        out.truncate(before);
        return check_value(v, i + 1, what);
    }
    Ok(())
}

/// Makes room in `data` for one more row of `n` values, growing it by doubling; fails with a
/// clear error (instead of aborting on the allocation) when the new size cannot fit in this
/// host's memory.
fn room_for_row(data: &mut Vec<f64>, n: usize) -> Result<()> {
    if data.capacity() - data.len() >= n {
        return Ok(());
    }
    let want = (data.len() as u128 + n as u128).max(2 * data.capacity() as u128);
    crate::util::memory::check_fits(
        &format!(
            "the {} rows of this worker's share",
            data.len() / n.max(1) + 1
        ),
        want.checked_mul(8),
    )?;
    data.try_reserve_exact(want as usize - data.len())
        .map_err(|e| Error::config(format!("cannot allocate {want} f64 values: {e}")))
}

/// Calls `row(line, start)` for every non-blank line of the block `buf`.
fn each_row(
    buf: &[u8],
    mut row: impl FnMut(&[u8], usize) -> std::result::Result<(), LineError>,
) -> std::result::Result<(), LineError> {
    for_each_line(buf, |line, at| {
        if line.iter().all(|&b| is_sep_or_blank(b)) {
            Ok(())
        } else {
            row(line, at)
        }
    })
}

/// The number of columns N: for text the values on the first row, for f64 the square root of
/// the number of values (an error naming the file unless it is a perfect square and every file
/// holds whole rows).
pub fn columns(storage: &dyn Storage, path: &str, format: Format) -> Result<usize> {
    let files = storage.list_input(path, false)?;
    if files.is_empty() {
        return Err(Error::config(format!("no input files in '{path}'")));
    }
    match format {
        Format::Text => text_dim(storage, path, 0).map_err(|e| match e {
            Error::Config(m) if m.starts_with("no points") => {
                Error::config(format!("no rows in '{path}': the input is empty"))
            }
            e => e,
        }),
        Format::F64 => {
            let bytes: u64 = files.iter().map(|f| f.size).sum();
            let first = &files[0].path;
            if !bytes.is_multiple_of(8) {
                return Err(Error::Input {
                    file: first.clone(),
                    line: 1,
                    msg: format!("{bytes} bytes is not a whole number of f64 values"),
                });
            }
            let count = bytes / 8;
            let n = count.isqrt();
            if n == 0 || n * n != count {
                return Err(Error::Input {
                    file: first.clone(),
                    line: 1,
                    msg: format!(
                        "{count} f64 values is not a square matrix (not N×N for any N ≥ 1)"
                    ),
                });
            }
            for f in &files {
                check_records(f, 8 * n, &format!("a row of {n} f64 values"))?;
            }
            Ok(n as usize)
        }
    }
}

/// The file and line where a text input ends: its last file and the line of that file's last
/// byte (for a message saying the input has too few rows).
pub fn end_of_input(storage: &dyn Storage, path: &str) -> Result<(String, u64)> {
    let files = storage.list_input(path, false)?;
    let last = files
        .iter()
        .rev()
        .find(|f| f.size > 0)
        .or(files.last())
        .ok_or_else(|| Error::config(format!("no input files in '{path}'")))?;
    let line = crate::io::lines::line_number(storage, &last.path, last.size.saturating_sub(1))?;
    Ok((last.path.clone(), line))
}

/// The file and line of row `k` (0-based, counting non-blank lines through the text input's
/// files in order), or `None` when the input has no more than `k` rows.
pub fn locate_row(storage: &dyn Storage, path: &str, k: u64) -> Result<Option<(String, u64)>> {
    let files = storage.list_input(path, false)?;
    let mut row = 0u64;
    let found = "\u{0}found"; // not an error: row k is here
    for f in &files {
        let r = read_lines(storage, f, 0, f.size, STREAM_BLOCK, |buf, _| {
            each_row(buf, |_, at| {
                if row == k {
                    return Err(LineError {
                        line_start: at,
                        msg: found.to_string(),
                    });
                }
                row += 1;
                Ok(())
            })
        });
        match r {
            Err(Error::Input { file, line, msg }) if msg == found => return Ok(Some((file, line))),
            r => r?,
        }
    }
    Ok(None)
}

/// Reads this worker's share of the distances (`n` columns, from [`columns`]): in text, the rows
/// that start in its byte range; in f64, rows `share(n, rank, workers)`. `first` is left at 0
/// (the caller learns it from the other workers' row counts).
pub fn load_share(
    storage: &dyn Storage,
    path: &str,
    format: Format,
    n: usize,
    rank: usize,
    workers: usize,
) -> Result<Rows> {
    let files = storage.list_input(path, false)?;
    let mut out = Rows {
        n,
        ..Rows::default()
    };
    match format {
        Format::Text => {
            let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
            for (f, (s, e)) in files.iter().zip(split::spread(&sizes, rank, workers)) {
                read_lines(storage, f, s, e, STREAM_BLOCK, |buf, _| {
                    each_row(buf, |line, at| {
                        let fail = |msg| LineError {
                            line_start: at,
                            msg,
                        };
                        room_for_row(&mut out.data, n).map_err(|e| fail(e.to_string()))?;
                        parse_row(line, n, "distance", &mut out.data).map_err(fail)?;
                        out.rows += 1;
                        Ok(())
                    })
                })?;
            }
        }
        Format::F64 => {
            let (s, e) = split::share(n as u64, rank, workers);
            out.first = s as usize;
            out.rows = (e - s) as usize;
            out.data = read_f64_rows(storage, &files, n, s, e, "distance")?;
        }
    }
    Ok(out)
}

/// Reads rows `[first, first + rows)` of an `n`×`n` matrix (the weights, following the
/// distances' blocks). With `to_end`, text input is read to its end to check that it has
/// exactly `n` rows.
pub fn load_rows(
    storage: &dyn Storage,
    path: &str,
    format: Format,
    n: usize,
    first: usize,
    rows: usize,
    to_end: bool,
) -> Result<Vec<f64>> {
    let files = storage.list_input(path, false)?;
    if files.is_empty() {
        return Err(Error::config(format!("no input files in '{path}'")));
    }
    let (a, b) = (first as u64, (first + rows) as u64);
    match format {
        Format::F64 => {
            let have = columns(storage, path, Format::F64)?;
            if have != n {
                return Err(Error::Input {
                    file: files[0].path.clone(),
                    line: 1,
                    msg: format!("a {have}×{have} matrix, the distances are {n}×{n}"),
                });
            }
            read_f64_rows(storage, &files, n, a, b, "weight")
        }
        Format::Text => {
            crate::util::memory::check_fits(
                &format!("{rows} rows of {n} weights"),
                (rows as u128).checked_mul(8 * n as u128),
            )?;
            let mut data = Vec::with_capacity(rows * n);
            let mut row = 0u64; // rows seen so far, over all files
            let stop = "\u{0}stop"; // not an error: the rows wanted are read
            for f in &files {
                let r = read_lines(storage, f, 0, f.size, STREAM_BLOCK, |buf, _| {
                    each_row(buf, |line, at| {
                        let fail = |msg| LineError {
                            line_start: at,
                            msg,
                        };
                        if row >= n as u64 {
                            return Err(fail(format!(
                                "more than {n} rows: the distances are {n}×{n}"
                            )));
                        }
                        if row >= b && !to_end {
                            return Err(fail(stop.to_string()));
                        }
                        if row >= a && row < b {
                            parse_row(line, n, "weight", &mut data).map_err(fail)?;
                        }
                        row += 1;
                        Ok(())
                    })
                });
                match r {
                    Err(Error::Input { msg, .. }) if msg == stop => return Ok(data),
                    r => r?,
                }
            }
            if row < b || (to_end && row != n as u64) {
                let (file, line) = end_of_input(storage, path)?;
                return Err(Error::Input {
                    file,
                    line,
                    msg: format!("{row} rows, the distances are {n}×{n}"),
                });
            }
            Ok(data)
        }
    }
}

/// Rows `[a, b)` of `n` f64 values each from `files` (concatenated), every value checked.
fn read_f64_rows(
    storage: &dyn Storage,
    files: &[FileInfo],
    n: usize,
    a: u64,
    b: u64,
    what: &str,
) -> Result<Vec<f64>> {
    let rec = 8 * n as u64;
    let per_file: Vec<u64> = files.iter().map(|f| f.size / rec).collect();
    let mut data = Vec::new();
    crate::util::memory::check_fits(
        &format!("{} rows of {n} f64 {what}s", b - a),
        ((b - a) as u128).checked_mul(rec as u128),
    )?;
    data.reserve_exact(((b - a) * n as u64) as usize);
    let mut start = 0u64;
    for (f, &count) in files.iter().zip(&per_file) {
        let (s, e) = (
            a.max(start) - start,
            b.min(start + count).saturating_sub(start),
        );
        start += count;
        if s >= e {
            continue;
        }
        read_records(storage, f, rec, s, e, |bytes| {
            for (i, v) in bytes.chunks_exact(8).enumerate() {
                let v = f64::from_le_bytes(v.try_into().expect("8 bytes"));
                let col = i % n + 1;
                let bad = if !v.is_finite() {
                    Some(format!("column {col}: {what} {v} is not a finite number"))
                } else {
                    check_value(v, col, what).err()
                };
                if let Some(msg) = bad {
                    return Err(RecordError { record: i / n, msg });
                }
                data.push(v);
            }
            Ok(())
        })?;
    }
    Ok(data)
}

/// Formats rows of numbers, one row per line, values separated by one space, each printed so
/// that it parses back to the identical f64.
pub fn format_rows(data: &[f64], width: usize) -> String {
    let mut out = String::with_capacity(data.len() * 24);
    for row in data.chunks(width.max(1)) {
        for (j, &v) in row.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            crate::apps::kmeans::input::format_f64(v, &mut out);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStorage;

    fn tmp(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("harp-mds-in-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Every division of a text or f64 matrix into worker shares yields every row once, in
    /// order; the weights read by row range equal the same rows.
    #[test]
    fn shares_and_row_ranges_cover_the_matrix() {
        let d = tmp("shares");
        let s = LocalStorage;
        let n = 7;
        let m: Vec<f64> = (0..n * n).map(|i| (i as f64) * 0.25).collect();
        let text = d.join("m.txt");
        let mut t = format_rows(&m, n);
        t.insert(0, '\n'); // a blank line is not a row
        std::fs::write(&text, t).unwrap();
        let bin = d.join("m.f64");
        std::fs::write(
            &bin,
            m.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>(),
        )
        .unwrap();
        for (path, fmt) in [(&text, Format::Text), (&bin, Format::F64)] {
            let p = path.to_str().unwrap();
            assert_eq!(columns(&s, p, fmt).unwrap(), n);
            for workers in 1..=5 {
                let mut all = Vec::new();
                for r in 0..workers {
                    let rows = load_share(&s, p, fmt, n, r, workers).unwrap();
                    assert_eq!(rows.data.len(), rows.rows * n);
                    let first = all.len() / n;
                    let again = load_rows(&s, p, fmt, n, first, rows.rows, r == workers - 1);
                    assert_eq!(again.unwrap(), rows.data, "{fmt} {workers} {r}");
                    all.extend(rows.data);
                }
                assert_eq!(all, m, "{fmt} {workers}");
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_matrices_name_file_and_line() {
        let d = tmp("bad");
        let s = LocalStorage;
        let p = d.join("m.txt");
        let ps = p.to_str().unwrap();
        for (text, line, msg) in [
            ("0 1 2\n1 0 1\n2 1\n", 3, "expected 3 values, found 2"),
            ("0 1 2\n1 0 x\n2 1 0\n", 2, "cannot parse 'x'"),
            (
                "0 1 2\n1 0 -1\n2 1 0\n",
                2,
                "column 3: distance -1 is negative",
            ),
            ("0 1 2\n1 0 inf\n2 1 0\n", 2, "not a finite number"),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = load_share(&s, ps, Format::Text, 3, 0, 1)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("{ps}:{line}: ")) && e.contains(msg),
                "{e}"
            );
        }
        // Weights with too few or too many rows.
        std::fs::write(&p, "0 1 2\n1 0 1\n").unwrap();
        let e = load_rows(&s, ps, Format::Text, 3, 0, 3, true).unwrap_err();
        assert!(
            e.to_string().contains("2 rows, the distances are 3×3"),
            "{e}"
        );
        std::fs::write(&p, "0 1\n1 0\n1 1\n").unwrap();
        let e = load_rows(&s, ps, Format::Text, 2, 0, 2, true).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("{ps}:3: more than 2 rows")),
            "{e}"
        );
        // f64: not a square count; a negative value names its record (row).
        let b = d.join("m.f64");
        let bs = b.to_str().unwrap();
        std::fs::write(&b, [0u8; 8 * 5]).unwrap();
        let e = columns(&s, bs, Format::F64).unwrap_err().to_string();
        assert!(e.contains("5 f64 values is not a square matrix"), "{e}");
        std::fs::write(&b, [0u8; 7]).unwrap();
        assert!(columns(&s, bs, Format::F64).is_err());
        let v = [0.0f64, 1.0, -2.0, 0.0];
        std::fs::write(
            &b,
            v.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>(),
        )
        .unwrap();
        let e = load_share(&s, bs, Format::F64, 2, 0, 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("{bs}:2: record 2: column 1: distance -2")),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
