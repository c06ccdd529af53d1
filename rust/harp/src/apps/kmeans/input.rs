//! Reading K-means points and centroids.
//!
//! Two input formats:
//! * [`Format::Text`]: one point per line, values separated by whitespace and/or commas, blank
//!   lines skipped, an optional number of leading columns ignored (the HOG data of the Harp
//!   papers has picture id, row and column first: skip 3).
//! * [`Format::F32`]: raw little-endian `f32` values, `dim` per record, no header.
//!
//! An input (a file or a directory of files) is split across workers like Hadoop input splits
//! ([`crate::io`]): all files' bytes are concatenated and cut into nearly equal byte ranges, one
//! per worker. For text a range owns every line that *starts* inside it; for `f32` the ranges
//! are aligned to record boundaries. The union over all ranks is exactly every point once. As in
//! Hadoop, names starting with `.` or `_` are skipped and any other subdirectory of an input
//! directory is an error naming it ([`Storage::list_input`]). This file only parses points.

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

use super::real::Real;
use crate::error::{Error, Result};
use crate::io::lines::{LOOKAHEAD, STREAM_BLOCK};
use crate::io::{check_records, read_lines, read_records, spread, LineError, RecordError};
use crate::storage::{FileInfo, Storage};
use crate::util::{memory, quote};

pub use crate::io::ByteRange;

/// Input format of the points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Text, one point per line.
    Text,
    /// Raw little-endian `f32`, `dim` values per record.
    F32,
}

impl Format {
    /// The name used on command lines ("text" or "f32").
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::F32 => "f32",
        }
    }
    /// File name extension used by the generator ("txt" or "f32").
    pub fn extension(self) -> &'static str {
        match self {
            Format::Text => "txt",
            Format::F32 => "f32",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Format> {
        match s.to_ascii_lowercase().as_str() {
            "text" | "txt" => Ok(Format::Text),
            "f32" => Ok(Format::F32),
            _ => Err(Error::config(format!(
                "unknown input format {}: valid formats are 'text' and 'f32'",
                quote(s.as_bytes())
            ))),
        }
    }
}

/// `n` points of `dim` values each, row-major in `data` (`data.len() == n * dim`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Matrix<T> {
    pub n: usize,
    pub dim: usize,
    pub data: Vec<T>,
}

/// Points (or centroids) in f64.
pub type Points = Matrix<f64>;

impl<T> Matrix<T> {
    /// The `i`-th point.
    pub fn row(&self, i: usize) -> &[T] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// No points yet, of dimension `dim`.
    pub fn empty(dim: usize) -> Matrix<T> {
        Matrix {
            n: 0,
            dim,
            data: Vec::new(),
        }
    }
}

/// Text is parsed in pieces of about this many bytes, in parallel.
const PARSE_PIECE: usize = 1 << 20;
/// True for the separators of the text format.
#[inline]
fn is_sep(b: u8) -> bool {
    b == b',' || b.is_ascii_whitespace()
}

/// Parses one non-blank line into `out`. `expect` is the number of values required after the
/// `skip` ignored columns (`None`: any number ≥ 1). Returns the number of values appended.
pub(crate) fn parse_line<T: Real>(
    line: &[u8],
    skip: usize,
    expect: Option<usize>,
    out: &mut Vec<T>,
) -> Result<usize, String> {
    let start_len = out.len();
    let mut col = 0usize;
    for tok in line.split(|&b| is_sep(b)).filter(|t| !t.is_empty()) {
        col += 1;
        if col <= skip {
            continue;
        }
        let parsed = std::str::from_utf8(tok).ok().and_then(T::parse);
        match parsed {
            Some(v) if v.to_f64().is_finite() => out.push(v),
            Some(_) => {
                out.truncate(start_len);
                return Err(format!(
                    "column {col}: value {} is not a finite number{}",
                    quote(tok),
                    if T::NAME == "f64" { "" } else { " in f32" }
                ));
            }
            None => {
                out.truncate(start_len);
                return Err(format!(
                    "column {col}: cannot parse {} as a number",
                    quote(tok)
                ));
            }
        }
    }
    let found = out.len() - start_len;
    let bad = match expect {
        Some(d) => found != d,
        None => found == 0,
    };
    if bad {
        out.truncate(start_len);
        let skipped = if skip > 0 {
            format!(" after skipping {skip} leading column(s)")
        } else {
            String::new()
        };
        let wanted = match expect {
            Some(d) => format!("{d} values"),
            None => "at least one value".to_string(),
        };
        let total = match col {
            1 => "1 column".to_string(),
            n => format!("{n} columns"),
        };
        return Err(format!(
            "expected {wanted}{skipped}, found {found} ({total} in all)"
        ));
    }
    Ok(found)
}

/// Parses every non-blank line of `buf` (sequentially). Returns the values and the number of
/// points.
fn parse_text<T: Real>(
    buf: &[u8],
    skip: usize,
    dim: usize,
    out: &mut Vec<T>,
) -> Result<usize, LineError> {
    let mut n = 0;
    crate::io::lines::for_each_line(buf, |line, pos| {
        if !line.iter().all(|&b| is_sep_or_blank(b)) {
            parse_line(line, skip, Some(dim), out).map_err(|msg| LineError {
                line_start: pos,
                msg,
            })?;
            n += 1;
        }
        Ok(())
    })?;
    Ok(n)
}

/// A line made only of whitespace is blank (commas alone are not: they are an empty record).
#[inline]
pub(crate) fn is_sep_or_blank(b: u8) -> bool {
    b.is_ascii_whitespace()
}

/// Parses `buf` (whole lines) in parallel pieces cut at line boundaries and appends the values
/// to `out`; returns the number of points. The first error (in buffer order) wins.
fn parse_text_parallel<T: Real>(
    buf: &[u8],
    skip: usize,
    dim: usize,
    out: &mut Vec<T>,
) -> Result<usize, LineError> {
    let mut cuts = vec![0usize];
    let mut at = 0;
    while at + PARSE_PIECE < buf.len() {
        let probe = at + PARSE_PIECE;
        match buf[probe..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                at = probe + i + 1;
                cuts.push(at);
            }
            None => break,
        }
    }
    if *cuts.last().unwrap() != buf.len() {
        cuts.push(buf.len());
    }
    if cuts.len() <= 2 {
        return parse_text(buf, skip, dim, out);
    }
    let pieces: Vec<Result<(Vec<T>, usize), LineError>> = cuts
        .par_windows(2)
        .map(|w| {
            let mut v = Vec::with_capacity((w[1] - w[0]) / 4);
            parse_text(&buf[w[0]..w[1]], skip, dim, &mut v)
                .map(|n| (v, n))
                .map_err(|e| LineError {
                    line_start: e.line_start + w[0],
                    msg: e.msg,
                })
        })
        .collect();
    let mut n = 0;
    for p in pieces {
        let (v, k) = p?;
        out.extend_from_slice(&v);
        n += k;
    }
    Ok(n)
}

/// Loads the points of `path` (a file or a directory) that belong to `rank` of `workers`, in f64.
///
/// `dim` is the number of values per point (after `skip_columns` ignored leading columns in
/// text; `skip_columns` does not apply to `f32`). Each file is read only over the range this rank
/// owns (plus the end of its last text line).
pub fn load_share(
    storage: &dyn Storage,
    path: &str,
    format: Format,
    skip_columns: usize,
    dim: usize,
    rank: usize,
    workers: usize,
) -> Result<Points> {
    load_share_as(storage, path, format, skip_columns, dim, rank, workers)
}

/// [`load_share`] into an array of `T`: text is parsed straight to `T`, `f32` records are
/// copied (f32) or widened (f64) block by block into the final array, which is the only
/// whole-share allocation.
pub fn load_share_as<T: Real>(
    storage: &dyn Storage,
    path: &str,
    format: Format,
    skip_columns: usize,
    dim: usize,
    rank: usize,
    workers: usize,
) -> Result<Matrix<T>> {
    if dim == 0 {
        return Err(Error::config(
            "the dimension of the points must be at least 1",
        ));
    }
    if workers == 0 || rank >= workers {
        return Err(Error::config(format!(
            "rank {rank} is out of range for {workers} worker(s)"
        )));
    }
    let files = storage.list_input(path, false)?;
    if files.is_empty() {
        return Err(Error::config(format!("no input files in '{path}'")));
    }
    match format {
        Format::Text => load_text(storage, &files, skip_columns, dim, rank, workers),
        Format::F32 => load_f32(storage, &files, dim, rank, workers),
    }
}

/// Loads the points of explicit splits (in the order given), instead of dividing an input
/// across workers as [`load_share`] does. Each split's file must be a single file; ranges past
/// the end of the file are clipped.
pub fn load_splits(
    storage: &dyn Storage,
    splits: &[ByteRange],
    format: Format,
    skip_columns: usize,
    dim: usize,
) -> Result<Points> {
    load_splits_as(storage, splits, format, skip_columns, dim)
}

/// [`load_splits`] into an array of `T` (as [`load_share_as`]).
pub fn load_splits_as<T: Real>(
    storage: &dyn Storage,
    splits: &[ByteRange],
    format: Format,
    skip_columns: usize,
    dim: usize,
) -> Result<Matrix<T>> {
    if dim == 0 {
        return Err(Error::config(
            "the dimension of the points must be at least 1",
        ));
    }
    let mut points = Matrix::empty(dim);
    for sp in splits {
        let files = storage.list(&sp.path)?;
        let f = match files.as_slice() {
            [f] if f.path == sp.path => f,
            _ => {
                return Err(Error::config(format!(
                    "input split '{}' (bytes {}..+{}) must name one file, not a directory",
                    sp.path, sp.start, sp.length
                )))
            }
        };
        let end = sp.start.saturating_add(sp.length).min(f.size);
        let start = sp.start.min(end);
        match format {
            Format::Text => {
                load_text_range(storage, f, start, end, skip_columns, dim, &mut points)?
            }
            Format::F32 => {
                let rec = 4 * dim as u64;
                check_f32_size(f, dim)?;
                // Records that start in [start, end).
                let (s, e) = (start.div_ceil(rec), end.div_ceil(rec));
                reserve_values(
                    &mut points.data,
                    e.saturating_sub(s) as u128 * dim as u128,
                    &f.path,
                )?;
                load_f32_records(storage, f, dim, s, e, &mut points.data)?;
                points.n = points.data.len() / dim;
            }
        }
    }
    Ok(points)
}

fn load_text<T: Real>(
    storage: &dyn Storage,
    files: &[FileInfo],
    skip: usize,
    dim: usize,
    rank: usize,
    workers: usize,
) -> Result<Matrix<T>> {
    let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
    let mut points = Matrix::empty(dim);
    for (f, (s, e)) in files.iter().zip(spread(&sizes, rank, workers)) {
        load_text_range(storage, f, s, e, skip, dim, &mut points)?;
    }
    points.data.shrink_to_fit();
    Ok(points)
}

/// Appends to `points` every line of `f` that starts in the byte range `[s, e)`.
///
/// The range is read [`STREAM_BLOCK`] bytes at a time; the complete lines of each block are
/// parsed (in parallel pieces) straight into `points.data`, and only the unfinished last line
/// is carried into the next block. After the first block, `points.data` reserves room for the
/// whole range at the first block's values-per-byte (plus 5 %), so the array is normally
/// allocated once.
fn load_text_range<T: Real>(
    storage: &dyn Storage,
    f: &FileInfo,
    s: u64,
    e: u64,
    skip: usize,
    dim: usize,
    points: &mut Matrix<T>,
) -> Result<()> {
    load_text_range_by(storage, f, s, e, skip, dim, points, STREAM_BLOCK)
}

/// [`load_text_range`] reading `block` bytes at a time (small blocks in tests).
#[allow(clippy::too_many_arguments)]
fn load_text_range_by<T: Real>(
    storage: &dyn Storage,
    f: &FileInfo,
    s: u64,
    e: u64,
    skip: usize,
    dim: usize,
    points: &mut Matrix<T>,
    block: u64,
) -> Result<()> {
    let mut reserved = false;
    let mut memory_error = None;
    let r = read_lines(storage, f, s, e, block, |lines, offset| {
        let before = points.data.len();
        points.n += parse_text_parallel(lines, skip, dim, &mut points.data)?;
        if !reserved {
            reserved = true;
            let per_byte = (points.data.len() - before) as f64 / lines.len() as f64;
            let left = e.saturating_sub(offset + lines.len() as u64) as f64;
            let values = (left * per_byte * 1.05) as u128 + dim as u128;
            if let Err(err) = reserve_values(&mut points.data, values, &f.path) {
                let msg = err.to_string();
                memory_error = Some(err);
                return Err(LineError { line_start: 0, msg });
            }
        }
        Ok(())
    });
    match memory_error {
        Some(err) => Err(err), // not about a line
        None => r,
    }
}

/// Reserves room for `values` more values in `data`, or fails with a clear error (naming
/// `file`, where the points come from) when they cannot fit in this host's memory, instead of
/// aborting on the allocation.
fn reserve_values<T: Real>(data: &mut Vec<T>, values: u128, file: &str) -> Result<()> {
    let size = std::mem::size_of::<T>() as u128;
    let need = values
        .checked_add(data.len() as u128)
        .and_then(|v| v.checked_mul(size));
    let what = || {
        format!(
            "the points of this worker's share of '{file}' (about {values} {} values)",
            T::NAME
        )
    };
    memory::check_fits(&what(), need)?;
    let n = usize::try_from(values).map_err(|_| Error::config(format!("{} do not fit", what())))?;
    data.try_reserve_exact(n)
        .map_err(|e| Error::config(format!("{}: cannot allocate them: {e}", what())))
}

fn check_f32_size(f: &FileInfo, dim: usize) -> Result<()> {
    check_records(f, 4 * dim as u64, &format!("{dim} f32 values"))
}

/// Appends records `[s, e)` of `f` to `data`, read [`STREAM_BLOCK`] bytes at a time. A
/// record holding a NaN or an infinity is an error naming the file, the record and the value
/// (as text rejects them), and leaves `data` as it was before the block.
fn load_f32_records<T: Real>(
    storage: &dyn Storage,
    f: &FileInfo,
    dim: usize,
    s: u64,
    e: u64,
    data: &mut Vec<T>,
) -> Result<()> {
    read_records(storage, f, 4 * dim as u64, s, e, |bytes| {
        let before = data.len();
        data.extend(
            bytes
                .chunks_exact(4)
                .map(|b| T::from_f64(f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)),
        );
        match data[before..].iter().position(|v| !v.to_f64().is_finite()) {
            None => Ok(()),
            Some(i) => {
                let v = data[before + i].to_f64();
                data.truncate(before);
                Err(RecordError {
                    record: i / dim,
                    msg: format!(
                        "value {} of {dim} is {v}, not a finite number (f32 input must hold \
                         finite values)",
                        i % dim + 1
                    ),
                })
            }
        }
    })
}

fn load_f32<T: Real>(
    storage: &dyn Storage,
    files: &[FileInfo],
    dim: usize,
    rank: usize,
    workers: usize,
) -> Result<Matrix<T>> {
    let rec = 4 * dim as u64;
    for f in files {
        check_f32_size(f, dim)?;
    }
    let recs: Vec<u64> = files.iter().map(|f| f.size / rec).collect();
    let ranges = spread(&recs, rank, workers);
    let mine: u64 = ranges.iter().map(|(s, e)| e.saturating_sub(*s)).sum();
    let mut data = Vec::new();
    let first = files.first().map_or("", |f| f.path.as_str());
    reserve_values(&mut data, mine as u128 * dim as u128, first)?;
    for (f, (s, e)) in files.iter().zip(ranges) {
        load_f32_records(storage, f, dim, s, e, &mut data)?;
    }
    Ok(Matrix {
        n: data.len() / dim,
        dim,
        data,
    })
}

/// The number of values (after `skip` columns) on the first non-blank line of the first file
/// of `path` that has one. The line is read whole, however long (up to the longest line
/// accepted), and however many blank lines come first.
pub fn text_dim(storage: &dyn Storage, path: &str, skip: usize) -> Result<usize> {
    for f in storage.list_input(path, false)? {
        let mut dim = None;
        let r = read_lines(storage, &f, 0, f.size, LOOKAHEAD, |lines, _| {
            let mut pos = 0;
            while pos < lines.len() {
                let end = lines[pos..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(lines.len(), |i| pos + i);
                let line = &lines[pos..end];
                if !line.iter().all(|&b| is_sep_or_blank(b)) {
                    let mut v: Vec<f64> = Vec::new();
                    let d = parse_line(line, skip, None, &mut v).map_err(|msg| LineError {
                        line_start: pos,
                        msg,
                    })?;
                    dim = Some(d);
                    // Stop reading: the line is found.
                    return Err(LineError {
                        line_start: pos,
                        msg: String::new(),
                    });
                }
                pos = end + 1;
            }
            Ok(())
        });
        match (dim, r) {
            (Some(d), _) => return Ok(d),
            (None, Err(e)) => return Err(e),
            (None, Ok(())) => {} // only blank lines: the next file
        }
    }
    Err(Error::config(format!("no points in '{path}'")))
}

/// Reads centroids: text, one per line, values separated by whitespace and/or commas. The
/// dimension is the number of values on the first non-blank line; K is the number of non-blank
/// lines. A directory is read file by file in name order.
pub fn read_centroids(storage: &dyn Storage, path: &str) -> Result<Points> {
    let files = storage.list_input(path, false)?;
    let mut points = Points::default();
    for f in &files {
        let bytes = storage.read_all(&f.path)?;
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(|&b| is_sep_or_blank(b)) {
                continue;
            }
            let expect = if points.n == 0 {
                None
            } else {
                Some(points.dim)
            };
            let found =
                parse_line(line, 0, expect, &mut points.data).map_err(|msg| Error::Input {
                    file: f.path.clone(),
                    line: i as u64 + 1,
                    msg,
                })?;
            if points.n == 0 {
                points.dim = found;
            }
            points.n += 1;
        }
    }
    if points.n == 0 {
        return Err(match files.first() {
            Some(f) if files.len() == 1 => Error::Input {
                file: f.path.clone(),
                line: 1,
                msg: "no centroids: the file is empty".to_string(),
            },
            Some(_) => Error::config(format!("no centroids in '{path}': its files are empty")),
            None => Error::config(format!("no centroids in '{path}': it has no input files")),
        });
    }
    Ok(points)
}

/// Writes one f64 so that it parses back to the identical value: the shortest round-trip digits,
/// in plain notation for ordinary magnitudes and in exponent notation for very small or large
/// ones (so 1e-300 does not become 300 zeros).
pub fn format_f64(v: f64, out: &mut String) {
    use std::fmt::Write;
    let a = v.abs();
    if a == 0.0 || (1e-5..1e16).contains(&a) {
        let _ = write!(out, "{v}");
    } else {
        let _ = write!(out, "{v:e}");
    }
}

/// Formats centroids one per line, values separated by a single space, each printed so that it
/// parses back to the identical f64.
pub fn format_centroids(c: &Points) -> String {
    let mut out = String::with_capacity(c.data.len() * 20);
    for i in 0..c.n {
        for (j, &v) in c.row(i).iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            format_f64(v, &mut out);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStorage;
    use std::path::PathBuf;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("harp-input-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn format_parses() {
        assert_eq!("text".parse::<Format>().unwrap(), Format::Text);
        assert_eq!("F32".parse::<Format>().unwrap(), Format::F32);
        let e = "csv".parse::<Format>().unwrap_err().to_string();
        assert!(
            e.contains("'csv'") && e.contains("'text'") && e.contains("'f32'"),
            "{e}"
        );
    }

    #[test]
    fn parse_line_separators_and_skip() {
        let mut v: Vec<f64> = Vec::new();
        assert_eq!(
            parse_line(b"7, 8 ,9\t1.5,  -2e3\r", 3, Some(2), &mut v),
            Ok(2)
        );
        assert_eq!(v, vec![1.5, -2000.0]);
        let e = parse_line(b"1 2 3", 0, Some(2), &mut v).unwrap_err();
        assert!(e.contains("expected 2 values, found 3"), "{e}");
        let e = parse_line(b"1 x 3", 0, Some(3), &mut v).unwrap_err();
        assert!(e.contains("column 2") && e.contains("'x'"), "{e}");
        let e = parse_line(b"1 nan", 0, Some(2), &mut v).unwrap_err();
        assert!(e.contains("not a finite number"), "{e}");
        assert_eq!(v, vec![1.5, -2000.0], "failed lines leave nothing behind");
    }

    /// Writes `lines` as text with awkward formatting and checks that every split of the input
    /// over 1..=7 workers yields every point exactly once, in order.
    #[test]
    fn text_shares_cover_every_line_once() {
        let d = tmpdir("shares");
        let s = LocalStorage;
        let mut expect = Vec::new();
        let mut id = 0;
        for (fi, nlines) in [5usize, 0, 1, 13, 2].iter().enumerate() {
            let mut text = String::new();
            for j in 0..*nlines {
                let x = id as f64 * 0.5;
                let y = -(id as f64);
                expect.extend([x, y]);
                id += 1;
                // picture id, row, column, then the two values; some blank lines, CRLF, commas
                match j % 3 {
                    0 => text.push_str(&format!("{fi} {j} 0 {x} {y}\n")),
                    1 => text.push_str(&format!("{fi},{j},1,{x},{y}\r\n\n")),
                    _ => text.push_str(&format!("  {fi}\t{j} 2  {x} ,{y}   \n   \n")),
                }
            }
            if fi == 3 {
                text.pop(); // last line without a newline
            }
            s.write_all(
                d.join(format!("part-{fi:05}")).to_str().unwrap(),
                text.as_bytes(),
            )
            .unwrap();
        }
        s.write_all(
            d.join("_SUCCESS").to_str().unwrap(),
            b"junk that is not a point\n",
        )
        .unwrap();
        let dir = d.to_str().unwrap();
        for workers in 1..=7 {
            let mut all = Vec::new();
            let mut n = 0;
            for rank in 0..workers {
                let p = load_share(&s, dir, Format::Text, 3, 2, rank, workers).unwrap();
                assert_eq!(p.data.len(), p.n * 2);
                n += p.n;
                all.extend(p.data);
            }
            assert_eq!(n, id, "workers={workers}");
            assert_eq!(all, expect, "workers={workers}");
        }
        // Many more workers than lines: still exactly once.
        let mut all = Vec::new();
        for rank in 0..500 {
            all.extend(
                load_share(&s, dir, Format::Text, 3, 2, rank, 500)
                    .unwrap()
                    .data,
            );
        }
        assert_eq!(all, expect);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A subdirectory of an input (points or centroids) directory is an error naming it; a
    /// hidden one (`_temporary`, `.staging`) is skipped.
    #[test]
    fn subdirectories_of_an_input_are_named() {
        let d = tmpdir("subdirs");
        let s = LocalStorage;
        let ds = d.to_str().unwrap();
        s.write_all(&format!("{ds}/part-0"), b"1 2\n").unwrap();
        s.write_all(&format!("{ds}/_temporary/0/part-1"), b"x\n")
            .unwrap();
        s.write_all(&format!("{ds}/.staging/part-2"), b"x\n")
            .unwrap();
        assert_eq!(load_share(&s, ds, Format::Text, 0, 2, 0, 1).unwrap().n, 1);
        assert_eq!(text_dim(&s, ds, 0).unwrap(), 2);
        assert_eq!(read_centroids(&s, ds).unwrap().n, 1);
        s.write_all(&format!("{ds}/more/part-3"), b"3 4\n").unwrap();
        for e in [
            load_share(&s, ds, Format::Text, 0, 2, 0, 1).unwrap_err(),
            load_share(&s, ds, Format::F32, 0, 2, 0, 1).unwrap_err(),
            text_dim(&s, ds, 0).unwrap_err(),
            read_centroids(&s, ds).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(e.contains(&format!("subdirectory '{ds}/more'")), "{e}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The dimension comes from the first non-blank line, read whole: after more blank lines
    /// than one read step, and longer than one step; an empty first file is passed over.
    #[test]
    fn text_dim_reads_the_whole_first_line() {
        let d = tmpdir("text-dim");
        let s = LocalStorage;
        let ds = d.to_str().unwrap();
        s.write_all(&format!("{ds}/a"), b"\n \n").unwrap();
        let blank = "\n".repeat(LOOKAHEAD as usize + 10);
        let long: Vec<String> = (0..30_000).map(|i| format!("{i}.5")).collect();
        s.write_all(
            &format!("{ds}/b"),
            format!("{blank}   {}\n1 2\n", long.join(" ")).as_bytes(),
        )
        .unwrap();
        assert_eq!(text_dim(&s, ds, 0).unwrap(), 30_000);
        assert_eq!(text_dim(&s, ds, 3).unwrap(), 29_997);
        s.write_all(&format!("{ds}/b"), format!("{blank}1 x\n").as_bytes())
            .unwrap();
        let e = text_dim(&s, ds, 0).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{ds}/b:{}: column 2: cannot parse 'x'",
                LOOKAHEAD + 11
            )),
            "{e}"
        );
        s.write_all(&format!("{ds}/b"), b"").unwrap();
        let e = text_dim(&s, ds, 0).unwrap_err().to_string();
        assert!(e.contains("no points"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn text_errors_name_file_and_absolute_line() {
        let d = tmpdir("errors");
        let s = LocalStorage;
        let f = d.join("p.txt");
        let fs_ = f.to_str().unwrap();
        let mut text = String::new();
        for i in 0..1000 {
            if i == 700 {
                text.push_str("1 2 3\n"); // one value too many
            } else {
                text.push_str(&format!("{i} {i}\n"));
            }
        }
        s.write_all(fs_, text.as_bytes()).unwrap();
        // Whichever rank owns line 701 reports it with its absolute number.
        let mut found = 0;
        for rank in 0..4 {
            match load_share(&s, fs_, Format::Text, 0, 2, rank, 4) {
                Ok(p) => assert!(p.n > 0),
                Err(Error::Input { file, line, msg }) => {
                    assert_eq!(file, fs_);
                    assert_eq!(line, 701);
                    assert!(msg.contains("expected 2 values, found 3"), "{msg}");
                    found += 1;
                }
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert_eq!(found, 1);
        s.write_all(fs_, b"1 2\n\n3 oops\n").unwrap();
        let e = load_share(&s, fs_, Format::Text, 0, 2, 0, 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("{fs_}:3: ")) && e.contains("'oops'"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn f32_shares_and_bad_size() {
        let d = tmpdir("f32");
        let s = LocalStorage;
        let dim = 3;
        let mut expect = Vec::new();
        for (fi, recs) in [4usize, 0, 7].iter().enumerate() {
            let mut bytes = Vec::new();
            for r in 0..recs * dim {
                let v = (fi * 100 + r) as f32 * 0.25;
                expect.push(v as f64);
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            s.write_all(d.join(format!("part-{fi}.f32")).to_str().unwrap(), &bytes)
                .unwrap();
        }
        let dir = d.to_str().unwrap();
        for workers in [1, 2, 3, 5, 11, 20] {
            let mut all = Vec::new();
            let mut counts = Vec::new();
            for rank in 0..workers {
                let p = load_share(&s, dir, Format::F32, 0, dim, rank, workers).unwrap();
                counts.push(p.n);
                all.extend(p.data);
            }
            assert_eq!(all, expect, "workers={workers}");
            let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(hi - lo <= 1, "balanced record split: {counts:?}");
        }
        s.write_all(
            d.join("part-9.f32").to_str().unwrap(),
            &[0u8; 4 * 3 * 2 + 5],
        )
        .unwrap();
        match load_share(&s, dir, Format::F32, 0, dim, 0, 1).unwrap_err() {
            Error::Input { file, line, msg } => {
                assert!(file.ends_with("part-9.f32"));
                assert_eq!(line, 3);
                assert!(msg.contains("not a multiple"), "{msg}");
            }
            e => panic!("unexpected {e}"),
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Explicit splits cut at arbitrary bytes (inside lines, on newlines, past the end) load
    /// every line or record exactly once, in order, like Hadoop `FileSplit`s.
    #[test]
    fn splits_cover_every_line_and_record_once() {
        let d = tmpdir("splits");
        let s = LocalStorage;
        let txt = d.join("p.txt");
        let mut text = String::new();
        let mut expect = Vec::new();
        for i in 0..200 {
            let (x, y) = (i as f64 * 0.5, -(i as f64) / 3.0);
            expect.extend([x, y]);
            text.push_str(&format!("{x} {y}\n"));
            if i % 17 == 0 {
                text.push('\n');
            }
        }
        s.write_all(txt.to_str().unwrap(), text.as_bytes()).unwrap();
        let bin = d.join("p.f32");
        let mut bytes = Vec::new();
        let mut expect32 = Vec::new();
        for i in 0..300 {
            let v = i as f32 * 0.25;
            expect32.push(v as f64);
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        s.write_all(bin.to_str().unwrap(), &bytes).unwrap();
        for (path, len, fmt, want) in [
            (&txt, text.len() as u64, Format::Text, &expect),
            (&bin, bytes.len() as u64, Format::F32, &expect32),
        ] {
            let p = path.to_str().unwrap();
            for step in [1u64, 7, 13, 100, 333, len, len + 50] {
                let mut cuts: Vec<u64> = (0..).map(|i| i * step).take_while(|&c| c < len).collect();
                cuts.push(len + 10); // the last split runs past the end
                let splits: Vec<ByteRange> = cuts
                    .windows(2)
                    .map(|w| ByteRange::new(p, w[0], w[1] - w[0]))
                    .collect();
                let mut all = Vec::new();
                for sp in &splits {
                    all.extend(
                        load_splits(&s, std::slice::from_ref(sp), fmt, 0, 2)
                            .unwrap()
                            .data,
                    );
                }
                assert_eq!(&all, want, "{fmt} step {step}");
                let together = load_splits(&s, &splits, fmt, 0, 2).unwrap();
                assert_eq!(&together.data, want);
                assert_eq!(together.n * 2, want.len());
            }
        }
        let e = load_splits(
            &s,
            &[ByteRange::new(d.to_str().unwrap(), 0, 10)],
            Format::Text,
            0,
            2,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("one file"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Streaming with tiny blocks (lines cut by every block boundary, long lines spanning many
    /// blocks, CRLF, blank lines, no final newline) gives the same points for every range split.
    #[test]
    fn streaming_blocks_cut_anywhere() {
        let d = tmpdir("stream");
        let s = LocalStorage;
        let p = d.join("p.txt");
        let mut text = String::new();
        let mut want: Vec<f64> = Vec::new();
        for i in 0..60 {
            let v: Vec<f64> = (0..3).map(|j| (i * 3 + j) as f64 * 0.125 - 7.0).collect();
            want.extend(&v);
            let pad = " ".repeat(i % 23);
            text.push_str(&format!("{}{pad},{}  {}", v[0], v[1], v[2]));
            text.push_str(if i % 4 == 0 { "\r\n\n" } else { "\n" });
        }
        text.pop(); // no final newline
        s.write_all(p.to_str().unwrap(), text.as_bytes()).unwrap();
        let f = &s.list(p.to_str().unwrap()).unwrap()[0];
        let len = text.len() as u64;
        for block in [1u64, 2, 5, 16, 61, 4096] {
            for parts in [1u64, 2, 3, 7, 40] {
                let mut got: Matrix<f64> = Matrix::empty(3);
                for r in 0..parts {
                    let (a, b) = (len * r / parts, len * (r + 1) / parts);
                    load_text_range_by(&s, f, a, b, 0, 3, &mut got, block).unwrap();
                }
                assert_eq!(got.data, want, "block {block} parts {parts}");
                assert_eq!(got.n, 60);
            }
        }
        // f32 parsing is direct: the same text parsed to f32 equals each f64 value rounded.
        let mut got32: Matrix<f32> = Matrix::empty(3);
        load_text_range_by(&s, f, 0, len, 0, 3, &mut got32, 7).unwrap();
        let want32: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        assert_eq!(got32.data, want32);
        // An error in a late block names the absolute line.
        let bad = format!("{text}\n1 2 x\n");
        s.write_all(p.to_str().unwrap(), bad.as_bytes()).unwrap();
        let f = &s.list(p.to_str().unwrap()).unwrap()[0];
        let mut m: Matrix<f32> = Matrix::empty(3);
        match load_text_range_by(&s, f, 0, bad.len() as u64, 0, 3, &mut m, 5).unwrap_err() {
            Error::Input { line, msg, .. } => {
                assert_eq!(line, 76, "{msg}");
                assert!(msg.contains("'x'"), "{msg}");
            }
            e => panic!("unexpected {e}"),
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// NaN and infinities in f32 records are refused in every path (shares and splits, read as
    /// f32 or f64), naming the file, the absolute record and the value, as text refuses them.
    #[test]
    fn f32_records_with_nan_or_inf_are_refused() {
        let d = tmpdir("f32-nonfinite");
        let s = LocalStorage;
        let dim = 3;
        for (bad, shown) in [
            (f32::NAN, "NaN"),
            (f32::INFINITY, "inf"),
            (f32::NEG_INFINITY, "-inf"),
        ] {
            let mut vals: Vec<f32> = (0..30 * dim).map(|i| i as f32).collect();
            vals[17 * dim + 1] = bad; // record 18, value 2
            let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
            let p = d.join("p.f32");
            let ps = p.to_str().unwrap();
            s.write_all(ps, &bytes).unwrap();
            let check = |e: Error| match e {
                Error::Input { file, line, msg } => {
                    assert_eq!((file.as_str(), line), (ps, 18), "{msg}");
                    assert!(
                        msg.contains("record 18")
                            && msg.contains("value 2 of 3")
                            && msg.contains(&format!("is {shown},"))
                            && msg.contains("not a finite number"),
                        "{msg}"
                    );
                }
                e => panic!("unexpected {e}"),
            };
            check(load_share_as::<f32>(&s, ps, Format::F32, 0, dim, 0, 1).unwrap_err());
            check(load_share_as::<f64>(&s, ps, Format::F32, 0, dim, 0, 1).unwrap_err());
            check(
                load_splits_as::<f32>(&s, &[ByteRange::new(ps, 0, 1000)], Format::F32, 0, dim)
                    .unwrap_err(),
            );
            // The worker whose share holds record 18 fails; the others load their points.
            let mut failed = 0;
            for rank in 0..3 {
                match load_share(&s, ps, Format::F32, 0, dim, rank, 3) {
                    Ok(m) => assert_eq!(m.n, 10),
                    Err(e) => {
                        check(e);
                        failed += 1;
                    }
                }
            }
            assert_eq!(failed, 1);
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A huge bad token (no separator in 100 MB) is quoted in short in the error, which still
    /// names the file and line; so is a huge bad centroid line.
    #[test]
    fn huge_bad_tokens_are_quoted_in_short() {
        let d = tmpdir("huge-token");
        let s = LocalStorage;
        let p = d.join("p.txt");
        let ps = p.to_str().unwrap();
        let mut text = b"1 2\n3 4\n5 ".to_vec();
        text.extend(std::iter::repeat_n(b'x', 100 << 20));
        text.extend_from_slice(b"\n7 8\n");
        s.write_all(ps, &text).unwrap();
        let e = load_share(&s, ps, Format::Text, 0, 2, 0, 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.len() < 300,
            "{} bytes: {}",
            e.len(),
            &e[..300.min(e.len())]
        );
        assert!(
            e.starts_with(&format!("{ps}:3: column 2: cannot parse 'xxxx"))
                && e.ends_with(&format!("…' ({} bytes) as a number", 100 << 20)),
            "{e}"
        );
        let e = read_centroids(&s, ps).unwrap_err().to_string();
        assert!(e.len() < 300 && e.starts_with(&format!("{ps}:3: ")), "{e}");
        let e = format!("{}", "z".repeat(10_000).parse::<Format>().unwrap_err());
        assert!(e.len() < 200, "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn f32_records_load_as_f32_without_change() {
        let d = tmpdir("f32-as-f32");
        let s = LocalStorage;
        let vals: Vec<f32> = (0..999)
            .map(|i| (i as f32).sin() * 1e-3 + i as f32)
            .collect();
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = d.join("p.f32");
        s.write_all(p.to_str().unwrap(), &bytes).unwrap();
        let m: Matrix<f32> =
            load_share_as(&s, p.to_str().unwrap(), Format::F32, 0, 9, 0, 1).unwrap();
        assert_eq!((m.n, m.dim), (111, 9));
        assert_eq!(m.data, vals);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn centroids_round_trip_exactly() {
        let d = tmpdir("centroids");
        let s = LocalStorage;
        let vals = [
            1e-300,
            -1e-300,
            5e-324,
            f64::MAX,
            f64::MIN_POSITIVE,
            0.0,
            -0.0,
            1.0,
            -3.0,
            123456789012345680.0,
            0.1 + 0.2,
            1.0 / 3.0,
            -2.5e-6,
            9_007_199_254_740_993.0,
            std::f64::consts::PI,
        ];
        let c = Points {
            n: 5,
            dim: 3,
            data: vals.to_vec(),
        };
        let text = format_centroids(&c);
        assert_eq!(text.lines().count(), 5);
        assert!(text.starts_with("1e-300 -1e-300 5e-324\n"), "{text}");
        assert!(
            text.contains("\n-0 1 -3\n"),
            "integers print plainly: {text}"
        );
        let f = d.join("c.txt");
        s.write_all(f.to_str().unwrap(), text.as_bytes()).unwrap();
        let back = read_centroids(&s, f.to_str().unwrap()).unwrap();
        assert_eq!((back.n, back.dim), (5, 3));
        for (a, b) in back.data.iter().zip(&c.data) {
            assert_eq!(a.to_bits(), b.to_bits(), "{a} vs {b}");
        }
    }

    #[test]
    fn centroids_errors() {
        let d = tmpdir("centroids-err");
        let s = LocalStorage;
        let f = d.join("c.txt");
        let fs_ = f.to_str().unwrap();
        s.write_all(fs_, b"\n  \n").unwrap();
        let e = read_centroids(&s, fs_).unwrap_err().to_string();
        assert!(e.contains(fs_) && e.contains("empty"), "{e}");
        for (bad, col) in [("nan", 2), ("inf", 3), ("-inf", 1), ("1e400", 3)] {
            let line = match col {
                1 => format!("{bad} 5 6"),
                2 => format!("4 {bad} 6"),
                _ => format!("4 5 {bad}"),
            };
            s.write_all(fs_, format!("1 2 3\n\n{line}\n").as_bytes())
                .unwrap();
            match read_centroids(&s, fs_).unwrap_err() {
                Error::Input { file, line, msg } => {
                    assert_eq!((file.as_str(), line), (fs_, 3), "{msg}");
                    assert!(
                        msg.contains(&format!("column {col}")) && msg.contains("not a finite"),
                        "{msg}"
                    );
                }
                e => panic!("unexpected {e}"),
            }
        }
        s.write_all(fs_, b"\n1,2,3\n4 5 6\n7 8\n").unwrap();
        match read_centroids(&s, fs_).unwrap_err() {
            Error::Input { line, msg, .. } => {
                assert_eq!(line, 4);
                assert!(msg.contains("expected 3 values, found 2"), "{msg}");
            }
            e => panic!("unexpected {e}"),
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
