//! Storage: local files (and later `hdfs://`) behind one trait.
//!
//! Every path is a string so that the same code can later take `hdfs://` URLs. Errors always
//! name the path involved.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// One regular file found by [`Storage::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// Path of the file, in the same form (plain path or URL) as the listed path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

/// A file system the engine reads its input from and writes its output to.
pub trait Storage: Send + Sync {
    /// A file → itself; a directory → its regular files sorted by name, skipping names that start
    /// with `.` or `_` (Hadoop's `_SUCCESS`, `.crc` files and the like). Not recursive.
    fn list(&self, path: &str) -> Result<Vec<FileInfo>>;
    /// Reads up to `len` bytes starting at `offset`; fewer only when the file ends first.
    fn read_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>>;
    /// Reads the whole file.
    fn read_all(&self, path: &str) -> Result<Vec<u8>>;
    /// Writes the whole file atomically (temporary file + rename), creating parent directories.
    fn write_all(&self, path: &str, bytes: &[u8]) -> Result<()>;
    /// Creates a directory and all its parents (no error if it exists).
    fn create_dir_all(&self, path: &str) -> Result<()>;
}

/// The local file system. Accepts plain paths and `file://` URLs.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalStorage;

/// Strips a `file://` scheme (`file:///a/b` → `/a/b`, `file:a` → `a`).
fn local_path(path: &str) -> PathBuf {
    if let Some(rest) = path.strip_prefix("file://") {
        // file://localhost/a → /a; file:///a → /a
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        PathBuf::from(rest)
    } else if let Some(rest) = path.strip_prefix("file:") {
        PathBuf::from(rest)
    } else {
        PathBuf::from(path)
    }
}

/// Joins a child name to a listed directory path, keeping the caller's spelling (URL or not).
fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

impl Storage for LocalStorage {
    fn list(&self, path: &str) -> Result<Vec<FileInfo>> {
        let p = local_path(path);
        let meta = fs::metadata(&p).map_err(|e| Error::io(format!("cannot read '{path}'"), e))?;
        if meta.is_file() {
            return Ok(vec![FileInfo {
                path: path.to_string(),
                size: meta.len(),
            }]);
        }
        if !meta.is_dir() {
            return Err(Error::config(format!(
                "'{path}' is neither a regular file nor a directory"
            )));
        }
        let mut out = Vec::new();
        let entries = fs::read_dir(&p)
            .map_err(|e| Error::io(format!("cannot list directory '{path}'"), e))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::io(format!("cannot list directory '{path}'"), e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue; // not UTF-8: cannot be named in a String path
            };
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            // Follow symlinks: a link to a regular file counts as a regular file.
            let child = join(path, name);
            let m = fs::metadata(entry.path())
                .map_err(|e| Error::io(format!("cannot read '{child}'"), e))?;
            if m.is_file() {
                out.push(FileInfo {
                    path: child,
                    size: m.len(),
                });
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn read_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let ctx = || format!("cannot read {len} bytes at offset {offset} of '{path}'");
        let mut f = fs::File::open(local_path(path)).map_err(|e| Error::io(ctx(), e))?;
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| Error::io(ctx(), e))?;
        let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1 << 30));
        f.take(len)
            .read_to_end(&mut out)
            .map_err(|e| Error::io(ctx(), e))?;
        Ok(out)
    }

    fn read_all(&self, path: &str) -> Result<Vec<u8>> {
        fs::read(local_path(path)).map_err(|e| Error::io(format!("cannot read '{path}'"), e))
    }

    fn write_all(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let p = local_path(path);
        let ctx = || format!("cannot write '{path}'");
        if let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| Error::io(ctx(), e))?;
        }
        let tmp = temp_name(&p);
        let result = (|| -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, &p)
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(Error::io(ctx(), e));
        }
        Ok(())
    }

    fn create_dir_all(&self, path: &str) -> Result<()> {
        fs::create_dir_all(local_path(path))
            .map_err(|e| Error::io(format!("cannot create directory '{path}'"), e))
    }
}

/// A hidden temporary name next to `p`, unique per process and call.
fn temp_name(p: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = p
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    p.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// The storage that serves `path`: `hdfs://` and `viewfs://` are not supported yet, anything else
/// (plain paths, `file://` URLs) is the local file system.
pub fn for_path(path: &str) -> Result<Box<dyn Storage>> {
    let lower = path.to_ascii_lowercase();
    if lower.starts_with("hdfs://") || lower.starts_with("viewfs://") {
        return Err(Error::config(format!(
            "hdfs:// paths are not supported yet by the harp tool; copy '{path}' to a local \
             directory (hdfs dfs -get) and pass that path instead"
        )));
    }
    Ok(Box::new(LocalStorage))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh, empty directory under the system temp dir.
    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("harp-storage-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn list_skips_hidden_and_sorts() {
        let d = tmpdir("list");
        let ds = d.to_str().unwrap();
        let s = LocalStorage;
        s.write_all(&format!("{ds}/b.txt"), b"bb").unwrap();
        s.write_all(&format!("{ds}/a.txt"), b"a").unwrap();
        s.write_all(&format!("{ds}/_SUCCESS"), b"").unwrap();
        s.write_all(&format!("{ds}/.a.txt.crc"), b"x").unwrap();
        s.create_dir_all(&format!("{ds}/sub")).unwrap();
        let l = s.list(ds).unwrap();
        assert_eq!(
            l,
            vec![
                FileInfo {
                    path: format!("{ds}/a.txt"),
                    size: 1
                },
                FileInfo {
                    path: format!("{ds}/b.txt"),
                    size: 2
                },
            ]
        );
        // A file lists as itself; a file:// URL keeps its spelling.
        let url = format!("file://{ds}/b.txt");
        assert_eq!(
            s.list(&url).unwrap(),
            vec![FileInfo {
                path: url.clone(),
                size: 2
            }]
        );
        assert_eq!(s.read_all(&url).unwrap(), b"bb");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn read_range_and_write_all() {
        let d = tmpdir("rw");
        let f = d.join("x/y/z.bin");
        let fs_ = f.to_str().unwrap();
        let s = LocalStorage;
        s.write_all(fs_, b"0123456789").unwrap();
        s.write_all(fs_, b"abcdefghij").unwrap(); // overwrite
        assert_eq!(s.read_range(fs_, 2, 3).unwrap(), b"cde");
        assert_eq!(s.read_range(fs_, 8, 100).unwrap(), b"ij");
        assert_eq!(s.read_range(fs_, 20, 5).unwrap(), b"");
        // No temporary files left behind.
        let names: Vec<_> = fs::read_dir(d.join("x/y"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("z.bin")]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn errors_name_the_path() {
        let s = LocalStorage;
        let e = s
            .read_all("/nonexistent/harp/file.txt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/harp/file.txt"), "{e}");
        let e = s.list("/nonexistent/harp/dir").unwrap_err().to_string();
        assert!(e.contains("/nonexistent/harp/dir"), "{e}");
    }

    #[test]
    fn for_path_rejects_hdfs() {
        let e = for_path("hdfs://nn:8020/data").err().unwrap();
        assert!(matches!(e, Error::Config(_)));
        let msg = e.to_string();
        assert!(msg.contains("hdfs:// paths are not supported yet") && msg.contains("nn:8020"));
        assert!(for_path("viewfs://c/x").is_err());
        assert!(for_path("/tmp/x").is_ok());
        assert!(for_path("file:///tmp/x").is_ok());
    }
}
