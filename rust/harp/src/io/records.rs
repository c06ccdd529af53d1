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

/// Calls `each` with the bytes of records `[s, e)` of `f` (records of `rec` bytes), in order,
/// read about [`STREAM_BLOCK`] bytes at a time.
pub fn read_records(
    storage: &dyn Storage,
    f: &FileInfo,
    rec: u64,
    s: u64,
    e: u64,
    mut each: impl FnMut(&[u8]),
) -> Result<()> {
    let step = (STREAM_BLOCK / rec).max(1);
    let mut r = s;
    while r < e {
        let upto = (r + step).min(e);
        let bytes = storage.read_range(&f.path, r * rec, (upto - r) * rec)?;
        if bytes.len() as u64 != (upto - r) * rec {
            return Err(Error::Input {
                file: f.path.clone(),
                line: r + bytes.len() as u64 / rec + 1,
                msg: "file is shorter than when it was listed".to_string(),
            });
        }
        each(&bytes);
        r = upto;
    }
    Ok(())
}
