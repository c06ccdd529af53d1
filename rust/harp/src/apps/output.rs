//! A job's result directory, written like Hadoop's output committer: every worker writes its
//! files into `DIR/_temporary/JOB/`; once all have succeeded the master moves them into `DIR`
//! and writes `DIR/_SUCCESS`. A run that fails before the commit leaves `DIR` as it was (an
//! earlier run's result included); a reader that finds `_SUCCESS` sees a complete result.

use crate::error::{Error, Result};
use crate::storage::{self, Storage};
use crate::worker::Worker;
use crate::Collectives;
use crate::Opts;

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

/// Fails when `dir` already holds something (files, `_SUCCESS` or subdirectories) and
/// `overwrite` is false: every application refuses an existing result unless told to replace it
/// (`--overwrite`) or to continue the run that wrote it (`--resume`, which passes `overwrite`).
/// A missing or empty directory is fine. A directory that holds nothing but `_temporary` is the
/// staging of a run that was killed before its commit (or of one still running): the error says
/// so and how to clear it.
pub fn check_new(st: &dyn Storage, dir: &str, overwrite: bool) -> Result<()> {
    let dir = dir.trim_end_matches('/');
    if overwrite || !st.exists(dir)? {
        return Ok(());
    }
    let mut held: Vec<String> = st
        .list(dir)?
        .iter()
        .map(|f| f.path.rsplit('/').next().unwrap_or("").to_string())
        .collect();
    if st.exists(&format!("{dir}/_SUCCESS"))? {
        held.push("_SUCCESS".into());
    }
    held.extend(st.list_dirs(dir)?.into_iter().map(|d| format!("{d}/")));
    if held.is_empty() {
        return Ok(());
    }
    if held == ["_temporary/"] {
        return Err(Error::config(format!(
            "output '{dir}' holds only '{dir}/_temporary', the staging of a run that was killed \
             before its commit (or of one still writing there): if no job is running into it, \
             remove '{dir}', or pass --overwrite"
        )));
    }
    held.sort();
    let shown: Vec<&str> = held.iter().take(5).map(String::as_str).collect();
    let more = if held.len() > 5 { ", …" } else { "" };
    Err(Error::config(format!(
        "output '{dir}' already exists and holds {}{more}: pass --overwrite to replace its \
         result, or name another directory",
        shown.join(", ")
    )))
}

/// Fails when the output directory `dir` cannot be told apart from the job's `inputs`: an
/// empty path (or `/`), the input itself, a directory inside it (a later run would read this
/// run's result as input) or one that holds it (the commit could replace the input's files).
/// Local paths are compared after resolving `.`, `..` and symbolic links of their existing
/// part; `hdfs://` and `viewfs://` paths as written.
pub fn check_apart(dir: &str, inputs: &[&str]) -> Result<()> {
    let trimmed = dir.trim_end_matches('/');
    // A URL's root has no path after its authority (`hdfs://nn:9000/`).
    let url_root = trimmed
        .split_once("://")
        .is_some_and(|(_, rest)| !rest.contains('/'));
    if trimmed.is_empty() || url_root {
        return Err(Error::config(format!(
            "output '{dir}': the result directory needs a name (not empty and not a root)"
        )));
    }
    let out = Place::of(trimmed);
    for &input in inputs.iter().filter(|i| !i.is_empty()) {
        let inp = Place::of(input.trim_end_matches('/'));
        let (Some(o), Some(i)) = (&out, &inp) else {
            continue;
        };
        let how = if o == i {
            "is the input"
        } else if o.inside(i) {
            "is inside the input"
        } else if i.inside(o) {
            "holds the input"
        } else {
            continue;
        };
        return Err(Error::config(format!(
            "output '{dir}' {how} '{input}': a later run would read this run's result as input, \
             or the commit would replace input files; write the result elsewhere"
        )));
    }
    Ok(())
}

/// A path resolved for comparison: a local one made absolute and canonical (as far as it
/// exists), a URL as written.
#[derive(PartialEq, Eq)]
enum Place {
    Local(std::path::PathBuf),
    Url(String),
}

impl Place {
    fn of(p: &str) -> Option<Place> {
        if p.contains("://") && !p.to_ascii_lowercase().starts_with("file://") {
            return Some(Place::Url(p.to_string()));
        }
        let p = std::path::Path::new(p.get(7..).filter(|_| p.contains("://")).unwrap_or(p));
        let abs = if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir().ok()?.join(p)
        };
        // Canonicalize the longest existing prefix; the rest is appended as written.
        let mut rest = Vec::new();
        let mut cur = abs.as_path();
        loop {
            if let Ok(mut c) = cur.canonicalize() {
                c.extend(rest.iter().rev());
                return Some(Place::Local(c));
            }
            rest.push(cur.file_name()?.to_os_string());
            cur = cur.parent()?;
        }
    }

    /// Strictly below `other`.
    fn inside(&self, other: &Place) -> bool {
        match (self, other) {
            (Place::Local(a), Place::Local(b)) => a != b && a.starts_with(b),
            (Place::Url(a), Place::Url(b)) => {
                a.len() > b.len() && a.starts_with(b.as_str()) && a[b.len()..].starts_with('/')
            }
            _ => false,
        }
    }
}

impl Output {
    /// Checks, before any work, that the result can be written: every worker names the same
    /// directory, the output is not the input ([`check_apart`]; `inputs` are the job's input
    /// paths), the master checks that `dir` is not a file and holds no result unless
    /// `overwrite` ([`check_new`]), creates the staging directory `dir/_temporary/JOB/` and
    /// writes a probe there;
    /// every worker fails at once with the first cause if that fails (`label` names the step
    /// in errors), and the master then removes what it created. Collective.
    pub fn prepare(
        w: &Worker,
        dir: &str,
        inputs: &[&str],
        job: &str,
        label: &str,
        overwrite: bool,
    ) -> Result<Output> {
        let apart = check_apart(dir, inputs);
        let dir = dir.trim_end_matches('/').to_string();
        // Workers given different directories (each its own job's arguments, as in Java)
        // would commit parts into several places: refused on every worker first.
        crate::worker::same_everywhere(w, label, "the output directory", &dir)?;
        let staging = format!("{dir}/_temporary/{job}");
        let st = storage::for_path_on(&dir, Some(w.runtime().clone()));
        let mut created = false;
        let mut staged = false;
        let ready = match (&st, apart) {
            (_, Err(e)) => Err(e),
            (Err(e), _) => Err(Error::config(format!("output {dir}: {e}"))),
            (Ok(_), _) if !w.is_master() => Ok(()),
            (Ok(st), _) => (|| {
                created = !check_not_a_file(&**st, &dir)?;
                check_new(&**st, &dir, overwrite)?;
                let probe = format!("{staging}/.probe");
                st.remove_all(&staging)?;
                staged = true;
                st.create_dir_all(&staging)?;
                st.write_all(&probe, b"")?;
                st.remove_all(&probe)
            })(),
        };
        let agreed = crate::worker::agree(w, label, ready);
        let out = st.map(|st| Output {
            dir,
            staging,
            st,
            created,
        });
        match (agreed, out) {
            (Ok(()), out) => out,
            (Err(e), Ok(out)) => {
                // Another worker (or this one) failed: leave the directory as it was.
                if staged {
                    out.abort();
                }
                Err(e)
            }
            (Err(e), Err(_)) => Err(e),
        }
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

    /// Collective: every worker writes `bytes` as its part file `part-RRRRR`; every worker
    /// fails with the first failing worker's cause if any write fails. Then the final
    /// agreement ([`Output::finish`]): once every worker has come through without error, the
    /// master commits the parts plus `extra` files it wrote with [`Output::write`], replacing
    /// an earlier run's `part-*` files and `extra` files. The other workers are done once they
    /// have reported; a failure of the commit itself is the master's.
    pub fn commit_parts(
        &self,
        w: &Worker,
        label: &str,
        bytes: &[u8],
        extra: &[&str],
    ) -> Result<()> {
        let wrote = self.write(&Self::part_name(w.rank()), bytes);
        crate::worker::agree(w, label, wrote)?;
        self.finish(w, label)?;
        if !w.is_master() {
            return Ok(());
        }
        let mut files: Vec<String> = (0..w.size()).map(Self::part_name).collect();
        files.extend(extra.iter().map(|s| s.to_string()));
        self.commit(&files, |name| {
            name.starts_with("part-") || extra.contains(&name)
        })
    }

    /// Collective, the last one of a job that writes this output: the final agreement before
    /// the commit. Every worker reports to the master that it has finished without error (a
    /// reduce of one flag toward rank 0); the master returns `Ok` only when every report has
    /// arrived, so that it commits after the last collective has succeeded on every worker,
    /// not merely on itself (a worker may still fail on the last frame of an allreduce that
    /// the master has already left). A worker that failed reports nothing, and the master's
    /// reduce fails with its cause or as a dead peer. The others return once they have sent
    /// their report: after it they must not fail the job.
    pub fn finish(&self, w: &Worker, label: &str) -> Result<()> {
        if let Some(rank) = injected_failure()? {
            if rank == w.rank() {
                return Err(Error::config(format!(
                    "{FAIL_BEFORE_COMMIT}: worker {rank} fails before the final agreement"
                )));
            }
        }
        let mut t = crate::data::Table::new(crate::data::Combiner::Sum);
        t.put(0, crate::data::Array::from_slice(w.pool(), &[1i64]));
        w.reduce(
            &format!("{label}-finish"),
            &mut t,
            Opts::default().algorithm(crate::collective::ReduceAlgorithm::Binomial),
        )?;
        if !w.is_master() {
            return Ok(());
        }
        let reported = t.get(0).map(|a| a.as_slice::<i64>()).transpose()?;
        match reported {
            Some(&[n]) if n == w.size() as i64 => Ok(()),
            got => Err(Error::Protocol(format!(
                "{label}: the final agreement counted {got:?} reports for {} workers",
                w.size()
            ))),
        }
    }

    /// Master only, after a failed run: removes the staging directory, `dir/_temporary` when
    /// nothing else is left in it, and `dir` itself when [`Output::prepare`] created it and it
    /// is empty, so that the output is as it was before (best effort: a failure to clean up is
    /// not reported over the run's own error).
    pub fn abort(&self) {
        remove_staging(&*self.st, &self.dir, &self.staging, self.created);
    }

    /// Master only: moves `files` from the staging directory into the result directory (see
    /// [`commit_files`]).
    pub fn commit(&self, files: &[String], stale: impl Fn(&str) -> bool) -> Result<()> {
        commit_files(&*self.st, &self.staging, &self.dir, files, stale)
    }
}

/// Fault injection for tests: `HARP_FAIL_BEFORE_COMMIT=R` makes worker `R` fail in
/// [`Output::finish`], after every part is written and agreed on, before its report (as a
/// worker that fails on the last frame of the agreement).
pub const FAIL_BEFORE_COMMIT: &str = "HARP_FAIL_BEFORE_COMMIT";

fn injected_failure() -> Result<Option<usize>> {
    match std::env::var(FAIL_BEFORE_COMMIT) {
        Err(_) => Ok(None),
        Ok(v) => v.parse().map(Some).map_err(|_| {
            Error::config(format!("{FAIL_BEFORE_COMMIT}: expected a rank, got '{v}'"))
        }),
    }
}

/// Removes a failed run's staging directory `staging` (`dir/_temporary/JOB`), then
/// `dir/_temporary` when nothing else is left in it, and `dir` itself when the run `created` it
/// and it is empty. A directory holding `_SUCCESS` is never removed. Best effort: a failure to
/// clean up is not reported over the run's own error.
pub fn remove_staging(st: &dyn Storage, dir: &str, staging: &str, created: bool) {
    let _ = st.remove_all(staging);
    let empty = |d: &str| {
        st.list(d).is_ok_and(|f| f.is_empty())
            && st.list_dirs(d).is_ok_and(|d| d.is_empty())
            && !st.exists(&format!("{d}/_SUCCESS")).unwrap_or(true)
    };
    if let Some((parent, _)) = staging.rsplit_once('/') {
        if empty(parent) {
            let _ = st.remove_all(parent);
        }
    }
    if created && empty(dir) {
        let _ = st.remove_all(dir);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_that_is_inside_or_holds_the_input_or_has_no_name_is_refused() {
        let d = std::env::temp_dir().join(format!("harp-apart-{}", std::process::id()));
        std::fs::create_dir_all(d.join("in")).unwrap();
        let ds = d.to_str().unwrap();
        let input = format!("{ds}/in");
        let refused =
            |out: &str, inputs: &[&str]| check_apart(out, inputs).err().map(|e| e.to_string());
        for (out, how) in [
            (format!("{ds}/in"), "is the input"),
            (format!("{ds}/in/"), "is the input"),
            (format!("{ds}/./in/../in"), "is the input"),
            (format!("file://{ds}/in"), "is the input"),
            (format!("{ds}/in/out/deeper"), "is inside the input"),
            (ds.to_string(), "holds the input"),
        ] {
            let e = refused(&out, &[&input]).unwrap_or_else(|| panic!("{out} accepted"));
            assert!(e.contains(how) && e.contains(&input), "{out}: {e}");
        }
        for out in ["", "/", "hdfs://nn:9000/"] {
            let e = refused(out, &[&input]).unwrap_or_else(|| panic!("'{out}' accepted"));
            assert!(e.contains("needs a name"), "{e}");
        }
        // Beside the input, a name that only starts like it, or another file system: fine.
        for out in [
            format!("{ds}/out"),
            format!("{ds}/in2"),
            "hdfs://nn/in".to_string(),
        ] {
            assert_eq!(refused(&out, &[&input, ""]), None, "{out}");
        }
        let e = refused("hdfs://nn/a/b/out", &["hdfs://nn/a/b"]).unwrap();
        assert!(e.contains("is inside the input"), "{e}");
        assert_eq!(refused("hdfs://nn/a/bc", &["hdfs://nn/a/b"]), None);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
