//! Fixed-size binary records.

use crate::error::{Error, Result};
use crate::storage::{FileInfo, Storage};

use super::lines::STREAM_BLOCK;

/// Fails unless `f` holds whole records of `rec` bytes (`what` describes a record in the
/// message, e.g. "3 f32 values"); the incomplete record is named as the line.
pub fn check_records(f: &FileInfo, rec: u64, what: &str) -> Result<()> {
    if f.size / rec * rec != f.size {
        return Err(Error::Input {
            file: f.path.clone(),
            line: f.size / rec + 1,
            msg: format!(
                "file size {} is not a multiple of the record size {rec} bytes ({what}): \
                 record {} is incomplete",
                f.size,
                f.size / rec + 1
            ),
        });
    }
    Ok(())
}

/// A bad record inside a block: its index in the block (0 = the block's first record) and the
/// message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub record: usize,
    pub msg: String,
}

/// Calls `each` with the bytes of records `[s, e)` of `f` (records of `rec` bytes), in order,
/// read about [`STREAM_BLOCK`] bytes at a time. An error from `each` becomes an input error
/// naming the file and the absolute 1-based record (as the line, and in the message).
pub fn read_records(
    storage: &dyn Storage,
    f: &FileInfo,
    rec: u64,
    s: u64,
    e: u64,
    mut each: impl FnMut(&[u8]) -> std::result::Result<(), RecordError>,
) -> Result<()> {
    let step = (STREAM_BLOCK / rec).max(1);
    let mut r = s;
    while r < e {
        let upto = r.saturating_add(step).min(e);
        let want = (upto - r).checked_mul(rec).ok_or_else(|| Error::Input {
            file: f.path.clone(),
            line: r + 1,
            msg: format!("a record of {rec} bytes is too large"),
        })?;
        let bytes = storage.read_range(&f.path, r * rec, want)?;
        if bytes.len() as u64 != want {
            return Err(Error::Input {
                file: f.path.clone(),
                line: r + bytes.len() as u64 / rec + 1,
                msg: "file is shorter than when it was listed".to_string(),
            });
        }
        if let Err(err) = each(&bytes) {
            let at = r + err.record as u64 + 1;
            return Err(Error::Input {
                file: f.path.clone(),
                line: at,
                msg: format!("record {at}: {}", err.msg),
            });
        }
        r = upto;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStorage;

    /// Records come in order, whole, across blocks; an error names the absolute record.
    #[test]
    fn records_stream_in_order_and_errors_name_the_absolute_record() {
        let d = std::env::temp_dir().join(format!("harp-io-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let s = LocalStorage;
        let p = d.join("r.bin");
        let rec = STREAM_BLOCK / 3 + 1; // blocks of 2 records, the last block shorter
        let n = 5u64;
        let bytes: Vec<u8> = (0..n * rec).map(|i| (i / rec) as u8).collect();
        s.write_all(p.to_str().unwrap(), &bytes).unwrap();
        let f = &s.list(p.to_str().unwrap()).unwrap()[0];
        check_records(f, rec, "x").unwrap();
        let mut seen = Vec::new();
        read_records(&s, f, rec, 1, n, |b| {
            assert_eq!(b.len() as u64 % rec, 0);
            seen.extend(b.chunks(rec as usize).map(|c| c[0]));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![1, 2, 3, 4]);
        let e = read_records(&s, f, rec, 0, n, |b| {
            match b.chunks(rec as usize).position(|c| c[0] == 3) {
                Some(i) => Err(RecordError {
                    record: i,
                    msg: "bad".into(),
                }),
                None => Ok(()),
            }
        })
        .unwrap_err();
        assert_eq!(e.to_string(), format!("{}:4: record 4: bad", f.path));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
