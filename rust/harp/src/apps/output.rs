//! A job's result directory, written like Hadoop's output committer: every worker writes its
//! files into `DIR/_temporary/JOB/`; once all have succeeded the master moves them into `DIR`
//! and writes `DIR/_SUCCESS`. A run that fails before the commit leaves `DIR` as it was (an
//! earlier run's result included); a reader that finds `_SUCCESS` sees a complete result.

use crate::error::{Error, Result};
use crate::storage::{self, Storage};
use crate::worker::Worker;

/// The result directory of one run of a job.
pub struct Output {
    dir: String,
    staging: String,
    st: Box<dyn Storage>,
    /// The master created `dir` (it did not exist): a failed run removes it again.
    created: bool,
}

/// Fails when `dir` exists and is a file (a result directory is created if missing); else
/// whether it exists.
pub fn check_not_a_file(st: &dyn Storage, dir: &str) -> Result<bool> {
    let dir = dir.trim_end_matches('/');
    if !st.exists(dir)? {
        return Ok(false);
    }
    if st.list(dir)?.iter().any(|f| f.path == dir) {
        return Err(Error::config(format!(
            "output '{dir}' is a file; the result is a directory (created if missing)"
        )));
    }
    Ok(true)
}

impl Output {
    /// Checks, before any work, that the result can be written: the master checks that `dir` is
    /// not a file, creates the staging directory `dir/_temporary/JOB/` and writes a probe there;
    /// every worker fails at once with the master's cause if that fails (`label` names the step
    /// in errors). Collective.
    pub fn prepare(w: &Worker, dir: &str, job: &str, label: &str) -> Result<Output> {
        let dir = dir.trim_end_matches('/').to_string();
        let staging = format!("{dir}/_temporary/{job}");
        let st = storage::for_path_on(&dir, Some(w.runtime().clone()));
        let mut created = false;
        let ready = match &st {
            Err(e) => Err(Error::config(format!("output {dir}: {e}"))),
            Ok(_) if !w.is_master() => Ok(()),
            Ok(st) => (|| {
                created = !check_not_a_file(&**st, &dir)?;
                let probe = format!("{staging}/.probe");
                st.remove_all(&staging)?;
                st.create_dir_all(&staging)?;
                st.write_all(&probe, b"")?;
                st.remove_all(&probe)
            })(),
        };
        crate::checkpoint::agree(w, label, ready)?;
        Ok(Output {
            dir,
            staging,
            st: st?,
            created,
        })
    }

    pub fn dir(&self) -> &str {
        &self.dir
    }

    pub fn storage(&self) -> &dyn Storage {
        &*self.st
    }

    /// Writes `name` into the staging directory (committed by [`Output::commit`]).
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.st
            .write_all(&format!("{}/{name}", self.staging), bytes)
    }

    /// The name of worker `rank`'s part file: `part-RRRRR` (Hadoop's naming, 5 digits).
    pub fn part_name(rank: usize) -> String {
        format!("part-{rank:05}")
    }

    /// Collective: every worker writes `bytes` as its part file `part-RRRRR`; when every worker
    /// has succeeded, the master commits the parts plus `extra` files it wrote with
    /// [`Output::write`], replacing an earlier run's `part-*` files and `extra` files. Every
    /// worker fails with the first failing worker's cause if any write fails.
    pub fn commit_parts(
        &self,
        w: &Worker,
        label: &str,
        bytes: &[u8],
        extra: &[&str],
    ) -> Result<()> {
        let wrote = self.write(&Self::part_name(w.rank()), bytes);
        crate::checkpoint::agree(w, label, wrote)?;
        let mut files: Vec<String> = (0..w.size()).map(Self::part_name).collect();
        files.extend(extra.iter().map(|s| s.to_string()));
        let committed = if w.is_master() {
            self.commit(&files, |name| {
                name.starts_with("part-") || extra.contains(&name)
            })
        } else {
            Ok(())
        };
        crate::checkpoint::agree(w, label, committed)
    }

    /// Master only, after a failed run: removes the staging directory, `dir/_temporary` when
    /// nothing else is left in it, and `dir` itself when [`Output::prepare`] created it and it
    /// is empty, so that the output is as it was before (best effort: a failure to clean up is
    /// not reported over the run's own error).
    pub fn abort(&self) {
        let _ = self.st.remove_all(&self.staging);
        let empty = |d: &str| {
            self.st.list(d).is_ok_and(|f| f.is_empty())
                && self.st.list_dirs(d).is_ok_and(|d| d.is_empty())
        };
        if let Some((parent, _)) = self.staging.rsplit_once('/') {
            if empty(parent) {
                let _ = self.st.remove_all(parent);
            }
        }
        if self.created && empty(&self.dir) {
            let _ = self.st.remove_all(&self.dir);
        }
    }

    /// Master only: moves `files` from the staging directory into the result directory (see
    /// [`commit_files`]).
    pub fn commit(&self, files: &[String], stale: impl Fn(&str) -> bool) -> Result<()> {
        commit_files(&*self.st, &self.staging, &self.dir, files, stale)
    }
}

/// Moves `files` from `staging` into `dir` as one result: removes `dir/_SUCCESS`, then the files
/// of `dir` that `stale` matches (an earlier run's), renames the new files in, writes an empty
/// `dir/_SUCCESS` and removes `staging` (and `dir/_temporary`, its parent, with whatever failed
/// runs left there). A reader that finds `_SUCCESS` sees a complete result;
/// a run that fails before this call leaves `dir` as it was.
pub fn commit_files(
    st: &dyn Storage,
    staging: &str,
    dir: &str,
    files: &[String],
    stale: impl Fn(&str) -> bool,
) -> Result<()> {
    let success = format!("{dir}/_SUCCESS");
    st.remove_all(&success)?;
    for f in st.list(dir)? {
        let name = f.path.rsplit('/').next().unwrap_or("");
        if stale(name) && !files.iter().any(|n| n == name) {
            st.remove_all(&f.path)?;
        }
    }
    for name in files {
        st.rename(&format!("{staging}/{name}"), &format!("{dir}/{name}"))?;
    }
    st.write_all(&success, b"")?;
    // Like Hadoop's job cleanup: `dir/_temporary` goes, with what failed runs left there.
    match staging.trim_end_matches('/').rsplit_once('/') {
        Some((parent, _)) if parent.ends_with("/_temporary") => st.remove_all(parent),
        _ => st.remove_all(staging),
    }
}
