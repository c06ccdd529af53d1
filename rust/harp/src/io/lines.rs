//! Text input: the lines that start in a byte range of a file, streamed in blocks of whole
//! lines.

use crate::error::{Error, Result};
use crate::storage::{FileInfo, Storage};

/// Bytes read per step when a range has to be extended to finish its last line.
pub const LOOKAHEAD: u64 = 64 * 1024;
/// Input is read this many bytes at a time.
pub const STREAM_BLOCK: u64 = 8 << 20;
/// The longest line accepted, in bytes: 1 GiB. A line is carried in memory until its end is
/// found, so an input without newlines must not make a worker allocate without bound.
pub const MAX_LINE: u64 = 1 << 30;
/// Bytes read per step when counting lines for an error message.
const COUNT_STEP: u64 = 16 << 20;

/// A parse error inside a block: byte offset of the offending line's start in the block, and
/// the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub line_start: usize,
    pub msg: String,
}

/// Calls `each(line, start)` for every line of `buf` in order: the bytes up to each `\n` (not
/// included; the last line may lack it), `start` being the line's offset in `buf`. Stops at the
/// first error.
pub fn for_each_line<E>(
    buf: &[u8],
    mut each: impl FnMut(&[u8], usize) -> Result<(), E>,
) -> Result<(), E> {
    let mut pos = 0;
    while pos < buf.len() {
        let end = buf[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(buf.len(), |i| pos + i);
        each(&buf[pos..end], pos)?;
        pos = end + 1;
    }
    Ok(())
}

/// Counts the lines before byte `offset` of `path`: the 1-based line number of a line starting
/// there. Only called when an error is reported.
pub fn line_number(storage: &dyn Storage, path: &str, offset: u64) -> Result<u64> {
    let mut lines = 1u64;
    let mut at = 0u64;
    while at < offset {
        let len = COUNT_STEP.min(offset - at);
        let chunk = storage.read_range(path, at, len)?;
        if chunk.is_empty() {
            break;
        }
        lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        at += chunk.len() as u64;
    }
    Ok(lines)
}

/// Calls `each(lines, offset)` with the lines of `f` that start in the byte range `[s, e)`, in
/// order, in blocks of whole lines (`offset` is the file offset of the block's first byte; the
/// last line of the file may lack its newline). The range is read `block` bytes at a time and
/// only the unfinished last line is carried into the next block. An error from `each` becomes
/// an input error naming the file and the absolute line; so does a line longer than
/// [`MAX_LINE`].
pub fn read_lines(
    storage: &dyn Storage,
    f: &FileInfo,
    s: u64,
    e: u64,
    block: u64,
    each: impl FnMut(&[u8], u64) -> Result<(), LineError>,
) -> Result<()> {
    read_lines_upto(storage, f, s, e, block, MAX_LINE, each).map(|_| ())
}

/// Calls `each(line)` for every line of this worker's share of `files` (the files cut into
/// per-worker byte ranges by [`super::split::spread`]; a range owns the lines that start in
/// it), in order, read [`STREAM_BLOCK`] bytes at a time. An `Err(msg)` from `each` fails the
/// read with the file and the line named.
pub fn for_each_line_of_share(
    storage: &dyn Storage,
    files: &[FileInfo],
    rank: usize,
    workers: usize,
    mut each: impl FnMut(&[u8]) -> std::result::Result<(), String>,
) -> Result<()> {
    let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
    for (f, (s, e)) in files
        .iter()
        .zip(super::split::spread(&sizes, rank, workers))
    {
        read_lines(storage, f, s, e, STREAM_BLOCK, |lines, _| {
            for_each_line(lines, |line, line_start| {
                each(line).map_err(|msg| LineError { line_start, msg })
            })
        })?;
    }
    Ok(())
}

/// The work of one [`read_lines`]: what a range costs, whatever its lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadWork {
    /// Calls to [`Storage::read_range`].
    pub reads: u64,
    /// Bytes those calls returned.
    pub bytes_read: u64,
    /// Bytes examined while looking for newlines.
    pub scanned: u64,
}

/// The bytes read and not yet handed out, starting at file offset `base`, with how many of
/// them at the front are known to hold no newline: every byte is looked at once, however long
/// the line being carried (a line that runs on for many reads would otherwise be searched
/// again after each one, in time quadratic in its length).
struct Carry {
    buf: Vec<u8>,
    base: u64,
    /// `buf[..clean]` holds no newline.
    clean: usize,
    scanned: u64,
}

impl Carry {
    /// The position of the first newline in the buffer.
    fn first_newline(&mut self) -> Option<usize> {
        let from = self.clean;
        self.scanned += (self.buf.len() - from) as u64;
        match self.buf[from..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.clean = from + i;
                Some(from + i)
            }
            None => {
                self.clean = self.buf.len();
                None
            }
        }
    }

    /// The position of the last newline in the buffer.
    fn last_newline(&mut self) -> Option<usize> {
        let from = self.clean;
        let tail = &self.buf[from..];
        let found = tail.iter().rposition(|&b| b == b'\n');
        // The search runs from the end back to the newline found (or to the clean front).
        self.scanned += (tail.len() - found.unwrap_or(0)) as u64;
        match found {
            Some(i) => Some(from + i),
            None => {
                self.clean = self.buf.len();
                None
            }
        }
    }

    /// Drops the first `n` bytes (handed out or skipped).
    fn drop_front(&mut self, n: usize) {
        self.buf.drain(..n);
        self.base += n as u64;
        self.clean = self.clean.saturating_sub(n);
    }
}

/// [`read_lines`] refusing lines longer than `max_line` bytes, telling what the reading cost.
pub fn read_lines_upto(
    storage: &dyn Storage,
    f: &FileInfo,
    s: u64,
    e: u64,
    block: u64,
    max_line: u64,
    mut each: impl FnMut(&[u8], u64) -> Result<(), LineError>,
) -> Result<ReadWork> {
    let mut work = ReadWork::default();
    if s >= e {
        return Ok(work);
    }
    // A range not starting the file skips the line that started before it: read from s-1 and
    // drop everything up to the first newline.
    let mut skipping = s > 0;
    let mut at = s.saturating_sub(1); // next byte to read
    let mut c = Carry {
        buf: Vec::new(),
        base: at,
        clean: 0,
        scanned: 0,
    };
    let mut finishing = false; // reading past `e` to finish the last line
    let result = loop {
        // Past `e`, the reads start small (the line usually ends soon) and grow with the line
        // carried, so that a long line costs a few reads and the bytes read past its end stay
        // fewer than the line's.
        let want = if finishing {
            LOOKAHEAD.max(c.buf.len() as u64).min(block)
        } else {
            block.min(e - at)
        };
        let more = storage.read_range(&f.path, at, want)?;
        work.reads += 1;
        work.bytes_read += more.len() as u64;
        let eof = (more.len() as u64) < want || at + more.len() as u64 >= f.size;
        at += more.len() as u64;
        c.buf.extend_from_slice(&more);
        drop(more);
        if skipping {
            match c.first_newline() {
                Some(i) => {
                    c.drop_front(i + 1);
                    skipping = false;
                }
                None => {
                    let n = c.buf.len();
                    c.drop_front(n);
                }
            }
            if c.base >= e {
                break Ok(()); // the next line starts at or after the end: not ours
            }
            if skipping {
                if at >= e || eof {
                    break Ok(());
                }
                continue;
            }
        }
        // Complete lines: up to the last newline (everything at the end of the file or once the
        // last line is finished). While finishing, only the first line (which started before
        // `e`) is ours.
        let (cut, done) = if finishing {
            match c.first_newline() {
                Some(i) => (i + 1, true),
                None if eof => (c.buf.len(), true),
                None => (0, false),
            }
        } else if eof || (at >= e && c.buf.last() == Some(&b'\n')) {
            (c.buf.len(), true)
        } else {
            (c.last_newline().map_or(0, |i| i + 1), false)
        };
        if cut > 0 {
            if let Err(err) = each(&c.buf[..cut], c.base) {
                let line = line_number(storage, &f.path, c.base + err.line_start as u64)?;
                break Err(Error::Input {
                    file: f.path.clone(),
                    line,
                    msg: err.msg,
                });
            }
            c.drop_front(cut);
            // What is left follows the last newline: it holds none.
            c.clean = c.buf.len();
        }
        if done {
            break Ok(());
        }
        if c.buf.len() as u64 > max_line {
            break Err(Error::Input {
                file: f.path.clone(),
                line: line_number(storage, &f.path, c.base)?,
                msg: format!(
                    "line longer than {max_line} bytes (no newline in the {} bytes from \
                     offset {})",
                    c.buf.len(),
                    c.base
                ),
            });
        }
        if at >= e {
            if c.buf.is_empty() || c.base >= e {
                break Ok(());
            }
            finishing = true; // the last line started before `e` and runs past it
        }
    };
    work.scanned = c.scanned;
    result.map(|()| work)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStorage;

    /// A fresh directory named after `name` and the process, and the path of a file in it.
    fn scratch(name: &str) -> (std::path::PathBuf, String) {
        let d = std::env::temp_dir().join(format!("harp-io-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("t.txt").to_str().unwrap().to_string();
        (d, p)
    }

    /// For every block size and every cut of a file into ranges, the ranges' lines are every
    /// line once, in order, in blocks of whole lines; an error names the absolute line.
    #[test]
    fn ranges_own_the_lines_that_start_in_them() {
        let (d, p) = scratch("lines");
        let s = LocalStorage;
        let lines: Vec<String> = (0..40)
            .map(|i| "x".repeat(i % 13) + &i.to_string())
            .collect();
        let text = lines.join("\n"); // no final newline
        s.write_all(&p, text.as_bytes()).unwrap();
        let f = &s.list(&p).unwrap()[0];
        let len = text.len() as u64;
        for block in [1u64, 3, 16, 1 << 20] {
            for parts in [1u64, 2, 5, 40, 300] {
                let mut got = Vec::new();
                for r in 0..parts {
                    let (a, b) = (len * r / parts, len * (r + 1) / parts);
                    read_lines(&s, f, a, b, block, |bytes, off| {
                        assert_eq!(&text.as_bytes()[off as usize..][..bytes.len()], bytes);
                        assert!(bytes.ends_with(b"\n") || off + bytes.len() as u64 == len);
                        got.extend(
                            bytes
                                .split(|&c| c == b'\n')
                                .filter(|l| !l.is_empty())
                                .map(|l| String::from_utf8(l.to_vec()).unwrap()),
                        );
                        Ok(())
                    })
                    .unwrap();
                }
                assert_eq!(got, lines, "block {block} parts {parts}");
            }
        }
        let e = read_lines(&s, f, 0, len, 7, |bytes, _| {
            match bytes.windows(3).position(|w| w == b"x29") {
                Some(i) => Err(LineError {
                    line_start: i - 2, // "xxx29" starts two bytes before "x29"
                    msg: "bad".into(),
                }),
                None => Ok(()),
            }
        })
        .unwrap_err();
        assert_eq!(e.to_string(), format!("{}:30: bad", f.path));
        // A line longer than the limit is refused with its number, whatever the range.
        let long = format!("1 2\n3 4\n{}\n5 6\n", "9".repeat(100));
        s.write_all(&p, long.as_bytes()).unwrap();
        let f = &s.list(&p).unwrap()[0];
        let len = long.len() as u64;
        for (a, block) in [(0, 7), (0, 64), (5, 3), (1, 1)] {
            let e = read_lines_upto(&s, f, a, len, block, 50, |_, _| Ok(())).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("{}:3: line longer than 50 bytes", f.path)),
                "{e}"
            );
        }
        read_lines_upto(&s, f, 0, len, 7, 101, |_, _| Ok(())).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A range whose last line runs far past its end finishes that line with work linear in
    /// the line's length: every byte looked at for newlines once or twice, the bytes read past
    /// the line's end fewer than the line's, and a few reads per block; the range after it
    /// skips the line as cheaply. (Searching the whole carried line again after each small
    /// read past the end, as before, looked at about L²/128 KiB bytes: 3.3 GB for 20 MiB.)
    #[test]
    fn a_long_line_across_the_end_of_a_range_costs_linear_work() {
        let (d, p) = scratch("long");
        let s = LocalStorage;
        let long: u64 = 20 << 20;
        let mut text = b"a b\nc d\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', long as usize));
        text.extend_from_slice(b"\ne f\ng h\n");
        s.write_all(&p, &text).unwrap();
        let f = &s.list(&p).unwrap()[0];
        let size = text.len() as u64;
        let cut = 100; // inside the long line, which starts at byte 8
        let mut lines = Vec::new();
        let first = read_lines_upto(&s, f, 0, cut, STREAM_BLOCK, MAX_LINE, |b, off| {
            lines.push((off, b.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(lines.iter().map(|l| l.1 as u64).sum::<u64>(), 8 + long + 1);
        assert_eq!(lines[0].0, 0);
        assert!(first.scanned <= 2 * long, "{first:?}");
        assert!(first.bytes_read <= 2 * long + LOOKAHEAD, "{first:?}");
        assert!(first.reads <= 2 + 2 * long / STREAM_BLOCK + 8, "{first:?}");
        let mut rest = Vec::new();
        let second = read_lines_upto(&s, f, cut, size, STREAM_BLOCK, MAX_LINE, |b, off| {
            rest.push((off, b.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0], (8 + long + 1, b"e f\ng h\n".to_vec()));
        assert!(second.scanned <= size + 1, "{second:?}");
        assert!(second.bytes_read <= size + 1, "{second:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
