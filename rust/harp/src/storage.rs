//! Storage: local files and `hdfs://` (or `viewfs://`) behind one trait.
//!
//! Every path is a string, a plain path, a `file://` URL or an HDFS URL. Errors always name the
//! path involved. The HDFS backend (`hdfs-native`, no JVM) takes its configuration from
//! `HADOOP_CONF_DIR` (`core-site.xml`, `hdfs-site.xml`) and, inside YARN containers, the
//! delegation tokens named by `HADOOP_TOKEN_FILE_LOCATION`.

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
    /// with `.` or `_` (Hadoop's `_SUCCESS`, `.crc` files and the like). Not recursive:
    /// subdirectories are left out (inputs use [`Storage::list_input`], which names them).
    fn list(&self, path: &str) -> Result<Vec<FileInfo>>;
    /// The files of an input, as Hadoop's `FileInputFormat` lists them: a file → itself; a
    /// directory → its regular files sorted by path, names starting with `.` or `_` skipped. A
    /// subdirectory that is not hidden is an error naming it (Hadoop: "Not a file"), unless
    /// `recursive` (Hadoop's `mapreduce.input.fileinputformat.input.dir.recursive`): then its
    /// files are listed too, hidden names skipped at every level.
    fn list_input(&self, path: &str, recursive: bool) -> Result<Vec<FileInfo>>;
    /// Reads up to `len` bytes starting at `offset`; fewer only when the file ends first.
    fn read_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>>;
    /// Reads the whole file.
    fn read_all(&self, path: &str) -> Result<Vec<u8>>;
    /// Writes the whole file atomically (temporary file + rename), creating parent directories.
    fn write_all(&self, path: &str, bytes: &[u8]) -> Result<()>;
    /// Creates a directory and all its parents (no error if it exists).
    fn create_dir_all(&self, path: &str) -> Result<()>;

    // The calls below commit outputs and checkpoints atomically (write under a temporary name,
    // then rename into place). Defaults say the backend cannot do it.

    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &str) -> Result<bool> {
        Err(unsupported("check for", path))
    }
    /// The names (not paths) of the subdirectories of `path`, sorted; every name, including those
    /// starting with `.` or `_`. A missing `path` has none.
    fn list_dirs(&self, path: &str) -> Result<Vec<String>> {
        Err(unsupported("list directories of", path))
    }
    /// Renames a file or directory; an existing destination file is replaced (a destination
    /// directory must not exist). Atomic on local file systems and HDFS.
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let _ = to;
        Err(unsupported("rename", from))
    }
    /// Removes a file, or a directory with everything in it; nothing to remove is no error.
    fn remove_all(&self, path: &str) -> Result<()> {
        Err(unsupported("remove", path))
    }
}

fn unsupported(what: &str, path: &str) -> Error {
    Error::config(format!(
        "cannot {what} '{path}': this storage does not support it"
    ))
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

/// What listing a directory does with a subdirectory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subdirs {
    /// Leave it out ([`Storage::list`]).
    Skip,
    /// Fail naming it ([`Storage::list_input`]).
    Fail,
    /// List its files too.
    Recurse,
}

impl Subdirs {
    fn input(recursive: bool) -> Subdirs {
        if recursive {
            Subdirs::Recurse
        } else {
            Subdirs::Fail
        }
    }
}

/// The error for a subdirectory of an input directory.
fn subdir_error(dir: &str, child: &str) -> Error {
    Error::config(format!(
        "input directory '{dir}' contains the subdirectory '{child}': inputs are read from the \
         files directly inside a directory (names starting with '.' or '_' are skipped); move \
         or rename it, or name the files to read"
    ))
}

/// Hidden from input listings (Hadoop's `_SUCCESS`, `_logs`, `.crc` files and the like).
fn hidden(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

impl LocalStorage {
    fn list_with(&self, path: &str, subdirs: Subdirs) -> Result<Vec<FileInfo>> {
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
                if subdirs == Subdirs::Skip {
                    continue; // not UTF-8: cannot be named in a String path
                }
                return Err(Error::config(format!(
                    "input directory '{path}' holds {:?}, a name that is not UTF-8 (it cannot \
                     be read as input)",
                    name
                )));
            };
            if hidden(name) {
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
            } else if m.is_dir() {
                match subdirs {
                    Subdirs::Skip => {}
                    Subdirs::Fail => return Err(subdir_error(path, &child)),
                    Subdirs::Recurse => out.extend(self.list_with(&child, subdirs)?),
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

impl Storage for LocalStorage {
    fn list(&self, path: &str) -> Result<Vec<FileInfo>> {
        self.list_with(path, Subdirs::Skip)
    }

    fn list_input(&self, path: &str, recursive: bool) -> Result<Vec<FileInfo>> {
        self.list_with(path, Subdirs::input(recursive))
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
        let p = local_path(path);
        fs::create_dir_all(&p).map_err(|e| {
            let why = if p.is_file() {
                ", a file of that name exists"
            } else {
                ""
            };
            Error::io(format!("cannot create directory '{path}'{why}"), e)
        })
    }

    fn exists(&self, path: &str) -> Result<bool> {
        match fs::symlink_metadata(local_path(path)) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(format!("cannot read '{path}'"), e)),
        }
    }

    fn list_dirs(&self, path: &str) -> Result<Vec<String>> {
        let entries = match fs::read_dir(local_path(path)) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(format!("cannot list directory '{path}'"), e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::io(format!("cannot list directory '{path}'"), e))?;
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if let (true, Some(name)) = (is_dir, entry.file_name().to_str()) {
                out.push(name.to_string());
            }
        }
        out.sort();
        Ok(out)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        fs::rename(local_path(from), local_path(to))
            .map_err(|e| Error::io(format!("cannot rename '{from}' to '{to}'"), e))
    }

    fn remove_all(&self, path: &str) -> Result<()> {
        let p = local_path(path);
        let r = match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&p),
            Ok(_) => fs::remove_file(&p),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        match r {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io(format!("cannot remove '{path}'"), e))
            }
            _ => Ok(()),
        }
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

/// The storage that serves `path`: `hdfs://` and `viewfs://` URLs go to HDFS (on `rt` when
/// given, else on a private runtime), plain paths and `file://` URLs are local. A URL of any
/// other scheme (`s3a://…`) is refused: read as a local relative path it would put the output
/// in a directory named after the scheme and report success.
pub fn for_path_on(path: &str, rt: Option<tokio::runtime::Handle>) -> Result<Box<dyn Storage>> {
    let lower = path.to_ascii_lowercase();
    if lower.starts_with("hdfs://") || lower.starts_with("viewfs://") {
        return Ok(Box::new(HdfsStorage::new(path, rt)?));
    }
    if let Some(scheme) = url_scheme(path) {
        if !scheme.eq_ignore_ascii_case("file") {
            return Err(Error::config(format!(
                "'{path}': the scheme '{scheme}' is not supported (hdfs://, viewfs://, file:// \
                 or a local path)"
            )));
        }
    }
    Ok(Box::new(LocalStorage))
}

/// The scheme of a URL-shaped path (`scheme://…`, the scheme a letter followed by letters,
/// digits, `+`, `-` or `.`), else `None`.
fn url_scheme(path: &str) -> Option<&str> {
    let (scheme, _) = path.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// [`for_path_on`] with a private runtime for HDFS.
pub fn for_path(path: &str) -> Result<Box<dyn Storage>> {
    for_path_on(path, None)
}

/// HDFS through `hdfs-native`. One client per name service (the URL's scheme and authority).
pub struct HdfsStorage {
    client: hdfs_native::Client,
    rt: HdfsRuntime,
    base: String,
    timeout: std::time::Duration,
}

/// Longest wait for one HDFS call (hdfs-native itself retries a dead NameNode for minutes).
/// `HARP_HDFS_TIMEOUT_SECS` overrides the default of 60 s.
fn hdfs_timeout() -> std::time::Duration {
    let secs = std::env::var("HARP_HDFS_TIMEOUT_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0);
    std::time::Duration::from_secs_f64(secs.unwrap_or(60.0))
}

enum HdfsRuntime {
    Shared(tokio::runtime::Handle),
    Own(tokio::runtime::Runtime),
}

fn hdfs_err(what: &str, path: &str, e: hdfs_native::HdfsError) -> Error {
    Error::io(
        format!("{what} {path}"),
        std::io::Error::other(e.to_string()),
    )
}

/// Splits `hdfs://authority/path` into (`hdfs://authority`, `/path`).
fn split_url(url: &str) -> Result<(String, String)> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| Error::config(format!("not a URL: {url}")))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    Ok((format!("{scheme}://{authority}"), path.to_string()))
}

impl HdfsStorage {
    /// A client for the name service of `url` (`hdfs:///x` uses `fs.defaultFS`).
    pub fn new(url: &str, rt: Option<tokio::runtime::Handle>) -> Result<HdfsStorage> {
        let (base, _) = split_url(url)?;
        let rt = match rt {
            Some(h) => HdfsRuntime::Shared(h),
            None => HdfsRuntime::Own(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .map_err(|e| Error::io("cannot start a runtime for HDFS", e))?,
            ),
        };
        let handle = match &rt {
            HdfsRuntime::Shared(h) => h.clone(),
            HdfsRuntime::Own(r) => r.handle().clone(),
        };
        let mut b = hdfs_native::ClientBuilder::new().with_io_runtime(handle);
        if !base.ends_with("://") {
            b = b.with_url(base.clone());
        }
        let client = b
            .build()
            .map_err(|e| hdfs_err("cannot open HDFS for", url, e))?;
        Ok(HdfsStorage {
            client,
            rt,
            base,
            timeout: hdfs_timeout(),
        })
    }

    /// Runs one HDFS call with the timeout; `what` and `url` name it in errors.
    fn call<T>(
        &self,
        what: &str,
        url: &str,
        f: impl std::future::Future<Output = hdfs_native::Result<T>>,
    ) -> Result<T> {
        let limit = self.timeout;
        let fut = async move { tokio::time::timeout(limit, f).await };
        let res = match &self.rt {
            HdfsRuntime::Shared(h) => h.block_on(fut),
            HdfsRuntime::Own(r) => r.block_on(fut),
        };
        match res {
            Ok(r) => r.map_err(|e| hdfs_err(what, url, e)),
            Err(_) => Err(Error::io(
                format!("{what} {url}"),
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no answer from HDFS within {:.0} s (HARP_HDFS_TIMEOUT_SECS)",
                        limit.as_secs_f64()
                    ),
                ),
            )),
        }
    }

    fn path(&self, url: &str) -> Result<String> {
        let (base, path) = split_url(url)?;
        if base != self.base {
            return Err(Error::config(format!("{url} is not on {}", self.base)));
        }
        Ok(path)
    }
}

impl HdfsStorage {
    fn list_with(&self, url: &str, subdirs: Subdirs) -> Result<Vec<FileInfo>> {
        let p = self.path(url)?;
        let st = self.call("cannot read", url, self.client.get_file_info(&p))?;
        if !st.isdir {
            return Ok(vec![FileInfo {
                path: url.to_string(),
                size: st.length as u64,
            }]);
        }
        let mut out = Vec::new();
        for f in self.call("cannot list", url, self.client.list_status(&p, false))? {
            let name = f.path.rsplit('/').next().unwrap_or("").to_string();
            if hidden(&name) {
                continue;
            }
            let child = join(url, &name);
            if !f.isdir {
                out.push(FileInfo {
                    path: child,
                    size: f.length as u64,
                });
                continue;
            }
            match subdirs {
                Subdirs::Skip => {}
                Subdirs::Fail => return Err(subdir_error(url, &child)),
                Subdirs::Recurse => out.extend(self.list_with(&child, subdirs)?),
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

impl Storage for HdfsStorage {
    fn list(&self, url: &str) -> Result<Vec<FileInfo>> {
        self.list_with(url, Subdirs::Skip)
    }

    fn list_input(&self, url: &str, recursive: bool) -> Result<Vec<FileInfo>> {
        self.list_with(url, Subdirs::input(recursive))
    }

    fn read_range(&self, url: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let p = self.path(url)?;
        self.call("cannot read", url, async {
            let r = self.client.read(&p).await?;
            let end = (offset + len).min(r.file_length() as u64);
            let n = end.saturating_sub(offset) as usize;
            Ok(r.read_range(offset as usize, n).await?.to_vec())
        })
    }

    fn read_all(&self, url: &str) -> Result<Vec<u8>> {
        self.read_range(url, 0, u64::MAX / 2)
    }

    fn write_all(&self, url: &str, bytes: &[u8]) -> Result<()> {
        let p = self.path(url)?;
        let tmp = format!("{p}._harp_tmp_{}", std::process::id());
        self.call("cannot write", url, async {
            let opts = hdfs_native::WriteOptions::default()
                .overwrite(true)
                .create_parent(true);
            let mut w = self.client.create(&tmp, opts).await?;
            w.write_bytes(bytes::Bytes::copy_from_slice(bytes)).await?;
            w.close().await?;
            self.client.rename(&tmp, &p, true).await
        })
    }

    fn create_dir_all(&self, url: &str) -> Result<()> {
        let p = self.path(url)?;
        self.call("cannot create", url, self.client.mkdirs(&p, 0o755, true))
    }

    fn exists(&self, url: &str) -> Result<bool> {
        let p = self.path(url)?;
        self.call("cannot read", url, async {
            match self.client.get_file_info(&p).await {
                Ok(_) => Ok(true),
                Err(hdfs_native::HdfsError::FileNotFound(_)) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    fn list_dirs(&self, url: &str) -> Result<Vec<String>> {
        let p = self.path(url)?;
        let listed = self.call("cannot list", url, async {
            match self.client.list_status(&p, false).await {
                Ok(v) => Ok(v),
                Err(hdfs_native::HdfsError::FileNotFound(_)) => Ok(Vec::new()),
                Err(e) => Err(e),
            }
        })?;
        let mut out: Vec<String> = listed
            .into_iter()
            .filter(|f| f.isdir)
            .map(|f| f.path.rsplit('/').next().unwrap_or("").to_string())
            .filter(|n| !n.is_empty())
            .collect();
        out.sort();
        Ok(out)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (f, t) = (self.path(from)?, self.path(to)?);
        self.call(
            &format!("cannot rename {from} to"),
            to,
            self.client.rename(&f, &t, true),
        )
    }

    fn remove_all(&self, url: &str) -> Result<()> {
        let p = self.path(url)?;
        self.call("cannot remove", url, async {
            match self.client.delete(&p, true).await {
                Ok(_) | Err(hdfs_native::HdfsError::FileNotFound(_)) => Ok(()),
                Err(e) => Err(e),
            }
        })
    }
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

    /// An input directory with a subdirectory fails naming it (hidden ones are skipped);
    /// recursively, the files of every level are listed, sorted by path, hidden names skipped.
    #[test]
    fn input_listing_fails_on_subdirectories_or_recurses() {
        let d = tmpdir("list-input");
        let ds = d.to_str().unwrap();
        let s = LocalStorage;
        for f in [
            "a.txt",
            "_SUCCESS",
            "_logs/x.txt",
            ".staging/y.txt",
            "sub/b.txt",
            "sub/.b.crc",
            "sub/deeper/c.txt",
            "sub/_tmp/z.txt",
            "z.txt",
        ] {
            s.write_all(&format!("{ds}/{f}"), b"1\n").unwrap();
        }
        let e = s.list_input(ds, false).unwrap_err().to_string();
        assert!(
            e.contains(&format!("input directory '{ds}'"))
                && e.contains(&format!("subdirectory '{ds}/sub'")),
            "{e}"
        );
        let paths: Vec<String> = s
            .list_input(ds, true)
            .unwrap()
            .into_iter()
            .map(|f| f.path[ds.len()..].to_string())
            .collect();
        assert_eq!(
            paths,
            ["/a.txt", "/sub/b.txt", "/sub/deeper/c.txt", "/z.txt"]
        );
        // Only hidden subdirectories: not an error; `list` keeps skipping subdirectories.
        fs::remove_dir_all(d.join("sub")).unwrap();
        assert_eq!(s.list_input(ds, false).unwrap().len(), 2);
        s.create_dir_all(&format!("{ds}/empty")).unwrap();
        assert!(s.list_input(ds, false).is_err());
        assert_eq!(s.list(ds).unwrap().len(), 2);
        assert_eq!(
            s.list_input(&format!("{ds}/a.txt"), false).unwrap().len(),
            1
        );
        // A name that is not UTF-8 cannot be read as input: named, not skipped.
        fs::remove_dir_all(d.join("empty")).unwrap();
        use std::os::unix::ffi::OsStrExt;
        fs::write(d.join(std::ffi::OsStr::from_bytes(b"p\xff")), b"1\n").unwrap();
        let e = s.list_input(ds, false).unwrap_err().to_string();
        assert!(e.contains("\"p\\xFF\"") && e.contains("not UTF-8"), "{e}");
        assert_eq!(s.list(ds).unwrap().len(), 2);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn urls_of_other_schemes_are_refused_not_taken_as_local_paths() {
        for p in ["s3a://bucket/out", "nosuchscheme://x/y", "GS://b/o"] {
            let e = for_path(p).err().expect(p).to_string();
            assert!(e.contains(p) && e.contains("is not supported"), "{e}");
        }
        for p in [
            "file:///tmp/x",
            "FILE:///tmp/x",
            "out",
            "/tmp/a:b",
            "a://b/../c",
            "s3a:/x",
        ] {
            let ok = for_path(p).is_ok();
            assert_eq!(ok, !p.starts_with("a://"), "{p}");
        }
        assert_eq!(url_scheme("1x://y"), None);
        assert_eq!(url_scheme("dir/x://y"), None);
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
    fn a_directory_over_a_file_says_so() {
        let d = tmpdir("over-file");
        let f = d.join("ckpt");
        fs::write(&f, b"x").unwrap();
        let path = f.to_str().unwrap();
        let e = LocalStorage.create_dir_all(path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "cannot create directory '{path}', a file of that name exists"
            )),
            "{e}"
        );
    }

    #[test]
    fn exists_list_dirs_rename_and_remove_all() {
        let d = tmpdir("commit");
        let ds = d.to_str().unwrap();
        let s = LocalStorage;
        assert!(!s.exists(&format!("{ds}/a")).unwrap());
        assert_eq!(
            s.list_dirs(&format!("{ds}/missing")).unwrap(),
            Vec::<String>::new()
        );
        s.write_all(&format!("{ds}/a/x.txt"), b"x").unwrap();
        s.create_dir_all(&format!("{ds}/_b")).unwrap();
        s.write_all(&format!("{ds}/c.txt"), b"c").unwrap();
        assert!(s.exists(&format!("{ds}/a")).unwrap());
        // Directories only, every name, sorted.
        assert_eq!(
            s.list_dirs(ds).unwrap(),
            vec!["_b".to_string(), "a".to_string()]
        );
        // A file renamed over another replaces it; a directory moves with its content.
        s.write_all(&format!("{ds}/d.txt"), b"new").unwrap();
        s.rename(&format!("{ds}/d.txt"), &format!("{ds}/c.txt"))
            .unwrap();
        assert_eq!(s.read_all(&format!("{ds}/c.txt")).unwrap(), b"new");
        assert!(!s.exists(&format!("{ds}/d.txt")).unwrap());
        s.rename(&format!("{ds}/a"), &format!("{ds}/_b/a")).unwrap();
        assert_eq!(s.read_all(&format!("{ds}/_b/a/x.txt")).unwrap(), b"x");
        let e = s
            .rename(&format!("{ds}/nothing"), &format!("{ds}/x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("nothing"), "{e}");
        // Removing a tree, a file, and something that is not there.
        s.remove_all(&format!("{ds}/_b")).unwrap();
        s.remove_all(&format!("{ds}/c.txt")).unwrap();
        s.remove_all(&format!("{ds}/never")).unwrap();
        assert_eq!(fs::read_dir(&d).unwrap().count(), 0);
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
    fn hdfs_urls_are_split_into_name_service_and_path() {
        assert_eq!(
            split_url("hdfs://nn:8020/data/x").unwrap(),
            ("hdfs://nn:8020".into(), "/data/x".into())
        );
        assert_eq!(
            split_url("hdfs://nn").unwrap(),
            ("hdfs://nn".into(), "/".into())
        );
        assert_eq!(
            split_url("viewfs://cluster/a").unwrap(),
            ("viewfs://cluster".into(), "/a".into())
        );
        assert!(split_url("no-scheme").is_err());
        assert!(for_path("/tmp/x").is_ok());
        assert!(for_path("file:///tmp/x").is_ok());
    }

    #[test]
    fn an_unreachable_name_node_is_an_error_naming_the_path() {
        // Port 1 on loopback: nothing listens, the connection is refused at once.
        // hdfs-native retries for minutes; our bound (2 s here) turns that into an error.
        let mut s = HdfsStorage::new("hdfs://127.0.0.1:1/data/points", None).unwrap();
        s.timeout = std::time::Duration::from_secs(2);
        let t0 = std::time::Instant::now();
        let e = s
            .list("hdfs://127.0.0.1:1/data/points")
            .expect_err("no NameNode there")
            .to_string();
        assert!(e.contains("hdfs://127.0.0.1:1/data/points"), "{e}");
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "took {:?}",
            t0.elapsed()
        );
        let e = s.read_all("hdfs://other:8020/x").err().unwrap().to_string();
        assert!(e.contains("is not on hdfs://127.0.0.1:1"), "{e}");
    }
}
