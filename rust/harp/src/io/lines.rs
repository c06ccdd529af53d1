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
    read_lines_upto(storage, f, s, e, block, MAX_LINE, each)
}

/// [`read_lines`] refusing lines longer than `max_line` bytes.
pub fn read_lines_upto(
    storage: &dyn Storage,
    f: &FileInfo,
    s: u64,
    e: u64,
    block: u64,
    max_line: u64,
    mut each: impl FnMut(&[u8], u64) -> Result<(), LineError>,
) -> Result<()> {
    if s >= e {
        return Ok(());
    }
    // A range not starting the file skips the line that started before it: read from s-1 and
    // drop everything up to the first newline.
    let mut skipping = s > 0;
    let mut at = s.saturating_sub(1); // next byte to read
    let mut buf: Vec<u8> = Vec::new(); // unread bytes, starting at file offset `base`
    let mut base = at;
    let mut finishing = false; // reading past `e` to finish the last line
    loop {
        let want = if finishing {
            LOOKAHEAD.min(block)
        } else {
            block.min(e - at)
        };
        let more = storage.read_range(&f.path, at, want)?;
        let eof = (more.len() as u64) < want || at + more.len() as u64 >= f.size;
        at += more.len() as u64;
        buf.extend_from_slice(&more);
        drop(more);
        if skipping {
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    buf.drain(..=i);
                    base += i as u64 + 1;
                    skipping = false;
                }
                None => {
                    base += buf.len() as u64;
                    buf.clear();
                }
            }
            if base >= e {
                return Ok(()); // the next line starts at or after the end: not ours
            }
            if skipping {
                if at >= e || eof {
                    return Ok(());
                }
                continue;
            }
        }
        // Complete lines: up to the last newline (everything at the end of the file or once the
        // last line is finished).
        let done =
            eof || (finishing && buf.contains(&b'\n')) || (at >= e && buf.last() == Some(&b'\n'));
        let cut = if done {
            if finishing {
                buf.iter()
                    .position(|&b| b == b'\n')
                    .map_or(buf.len(), |i| i + 1)
            } else {
                buf.len()
            }
        } else {
            match buf.iter().rposition(|&b| b == b'\n') {
                Some(i) => i + 1,
                None => 0,
            }
        };
        // While finishing, only the first line (which started before `e`) is ours.
        let cut = if finishing && !done { 0 } else { cut };
        if cut > 0 {
            if let Err(err) = each(&buf[..cut], base) {
                let line = line_number(storage, &f.path, base + err.line_start as u64)?;
                return Err(Error::Input {
                    file: f.path.clone(),
                    line,
                    msg: err.msg,
                });
            }
            buf.drain(..cut);
            base += cut as u64;
        }
        if done {
            return Ok(());
        }
        if buf.len() as u64 > max_line {
            return Err(Error::Input {
                file: f.path.clone(),
                line: line_number(storage, &f.path, base)?,
                msg: format!(
                    "line longer than {max_line} bytes (no newline in the {} bytes from \
                     offset {base})",
                    buf.len()
                ),
            });
        }
        if at >= e {
            if buf.is_empty() || base >= e {
                return Ok(());
            }
            finishing = true; // the last line started before `e` and runs past it
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStorage;

    /// For every block size and every cut of a file into ranges, the ranges' lines are every
    /// line once, in order, in blocks of whole lines; an error names the absolute line.
    #[test]
    fn ranges_own_the_lines_that_start_in_them() {
        let d = std::env::temp_dir().join(format!("harp-io-lines-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let s = LocalStorage;
        let p = d.join("t.txt");
        let lines: Vec<String> = (0..40)
            .map(|i| "x".repeat(i % 13) + &i.to_string())
            .collect();
        let text = lines.join("\n"); // no final newline
        s.write_all(p.to_str().unwrap(), text.as_bytes()).unwrap();
        let f = &s.list(p.to_str().unwrap()).unwrap()[0];
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
        s.write_all(p.to_str().unwrap(), long.as_bytes()).unwrap();
        let f = &s.list(p.to_str().unwrap()).unwrap()[0];
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
}
