//! Consistent checkpoints of named tables at an iteration, on local storage or HDFS.
//!
//! Layout under a checkpoint directory `D`:
//!
//! ```text
//! D/ckpt-0000000012/part-00000        worker 0's tables (binary, see `encode_part`)
//! D/ckpt-0000000012/part-00001        worker 1's tables
//! D/ckpt-0000000012/manifest.json     written last, by the master, once every part is written
//! ```
//!
//! A checkpoint is *complete* when its `manifest.json` exists, names the iteration of its
//! directory, and every part it lists exists with the listed size; its SHA-256 is checked when
//! the part is read. Every part is written under a temporary name and renamed into place
//! ([`Storage::write_all`]); the master writes the manifest only after an allreduce of every
//! worker's part size and digest, i.e. after every worker has written its part. A job that dies
//! while writing a checkpoint leaves it without a manifest (or with a part missing): it is
//! *torn* and [`Checkpoints::latest`] skips it in favour of the previous complete one.
//!
//! [`Checkpoints::save`] is collective (every worker calls it at the same iteration with its own
//! tables); [`Checkpoints::latest`] and [`Checkpoints::load_part`] are plain reads that any
//! worker (usually the master, which then broadcasts what the others need) may call.

use sha2::{Digest, Sha256};

use crate::data::{Array, Combiner, DType, KeyType, Layout, Table, ValueType};
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::storage::{self, Storage};
use crate::worker::Worker;
use crate::Collectives;
use crate::Opts;

/// Version of the part and manifest formats.
pub const FORMAT: u32 = 1;
/// Name of the manifest file inside a checkpoint directory.
pub const MANIFEST: &str = "manifest.json";
const MAGIC: &[u8; 8] = b"HARPCKPT";

/// One worker's part of a checkpoint, as listed in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartInfo {
    /// File name inside the checkpoint directory (`part-RRRRR`).
    pub file: String,
    pub bytes: u64,
    /// SHA-256 of the file, lowercase hex.
    pub sha256: String,
}

/// What a complete checkpoint holds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// Name of the job that wrote it (informational).
    pub job: String,
    /// The iteration after which the tables were saved.
    pub iteration: u64,
    /// Number of workers of the job that wrote it (= number of parts).
    pub workers: usize,
    /// The names of the tables in every part, in order.
    pub tables: Vec<String>,
    /// One part per worker, in rank order.
    pub parts: Vec<PartInfo>,
    /// Application data (shape, options) the application checks before resuming.
    pub meta: serde_json::Value,
}

/// The directory name of the checkpoint at `iteration`.
pub fn dir_name(iteration: u64) -> String {
    format!("ckpt-{iteration:010}")
}

fn parse_dir_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("ckpt-")?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Serialises named tables: `HARPCKPT`, format (u32), table count (u32), then per table its
/// name (u32 length + UTF-8), partition count (u32) and per partition its id (u32), layout,
/// byte length (u64) and bytes, all little-endian, partitions in id order. The layout is the
/// element type's code (u8, 0–4) for a dense array, or 16 then the key type (u8: 0 i64, 1 i32,
/// 2 str) and the value type (u8: the element type's code for a scalar, 64 + it for an array,
/// 128 for bytes) for a key-value partition, or 17 then 0 or 1 (weighted) for an edge
/// partition.
pub fn encode_part(tables: &[(&str, &Table)]) -> Vec<u8> {
    let total: u64 = tables.iter().map(|(_, t)| t.bytes()).sum();
    let mut v = Vec::with_capacity(total as usize + 64);
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&FORMAT.to_le_bytes());
    v.extend_from_slice(&(tables.len() as u32).to_le_bytes());
    for (name, t) in tables {
        v.extend_from_slice(&(name.len() as u32).to_le_bytes());
        v.extend_from_slice(name.as_bytes());
        let mut ids = t.ids();
        ids.sort_unstable();
        v.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        for id in ids {
            let a = t.get(id).expect("listed id");
            v.extend_from_slice(&id.to_le_bytes());
            encode_layout(&mut v, a.layout());
            v.extend_from_slice(&(a.bytes().len() as u64).to_le_bytes());
            v.extend_from_slice(a.bytes());
        }
    }
    v
}

const KV_LAYOUT: u8 = 16;
const EDGES_LAYOUT: u8 = 17;

fn encode_layout(v: &mut Vec<u8>, layout: Layout) {
    match layout {
        Layout::Dense { dtype } => v.push(dtype as u8),
        Layout::Edges { weighted } => v.extend_from_slice(&[EDGES_LAYOUT, weighted as u8]),
        Layout::KeyValue { key, value } => {
            v.push(KV_LAYOUT);
            v.push(match key {
                KeyType::I64 => 0,
                KeyType::I32 => 1,
                KeyType::Str => 2,
            });
            v.push(match value {
                ValueType::Scalar(d) => d as u8,
                ValueType::Array(d) => 64 + d as u8,
                ValueType::Bytes => 128,
            });
        }
    }
}

fn decode_layout<'a>(
    take: &mut impl FnMut(usize) -> Result<&'a [u8]>,
) -> std::result::Result<Layout, String> {
    let mut byte = || take(1).map(|b| b[0]).map_err(|e| e.to_string());
    let code = byte()?;
    if code == EDGES_LAYOUT {
        return match byte()? {
            w @ (0 | 1) => Ok(Layout::Edges { weighted: w == 1 }),
            w => Err(format!("bad edge layout {w}")),
        };
    }
    if code != KV_LAYOUT {
        return DType::from_u8(code)
            .map(Layout::dense)
            .map_err(|e| e.to_string());
    }
    let key = match byte()? {
        0 => KeyType::I64,
        1 => KeyType::I32,
        2 => KeyType::Str,
        k => return Err(format!("unknown key type {k}")),
    };
    let value = match byte()? {
        128 => ValueType::Bytes,
        v if v >= 64 => ValueType::Array(DType::from_u8(v - 64).map_err(|e| e.to_string())?),
        v => ValueType::Scalar(DType::from_u8(v).map_err(|e| e.to_string())?),
    };
    Ok(Layout::KeyValue { key, value })
}

/// The inverse of [`encode_part`]; `what` names the file in errors. Tables get `Combiner::Sum`
/// (callers that need another combiner rebuild them).
pub fn decode_part(bytes: &[u8], pool: &Pool, what: &str) -> Result<Vec<(String, Table)>> {
    let bad = |why: &str| Error::data(format!("checkpoint part {what} is corrupt: {why}"));
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let end = at.checked_add(n).filter(|&e| e <= bytes.len());
        let end = end.ok_or_else(|| bad("truncated"))?;
        let s = &bytes[at..end];
        at = end;
        Ok(s)
    };
    if take(8)? != MAGIC {
        return Err(bad("not a Harp-RS checkpoint part"));
    }
    let u32_ = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4 bytes"));
    let format = u32_(take(4)?);
    if format != FORMAT {
        return Err(bad(&format!("format {format}, expected {FORMAT}")));
    }
    let n = u32_(take(4)?);
    let mut out = Vec::new();
    for _ in 0..n {
        let len = u32_(take(4)?) as usize;
        let name = std::str::from_utf8(take(len)?)
            .map_err(|_| bad("table name is not UTF-8"))?
            .to_string();
        let parts = u32_(take(4)?);
        let mut t = Table::new(Combiner::Sum);
        for _ in 0..parts {
            let id = u32_(take(4)?);
            let layout = decode_layout(&mut take).map_err(|e| bad(&e))?;
            let len = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
            let len = usize::try_from(len).map_err(|_| bad("partition too large"))?;
            let data = take(len)?;
            if !(len as u64).is_multiple_of(layout.unit()) {
                return Err(bad("partition length is not a whole number of elements"));
            }
            let a = Array::from_layout(layout, pool.copy_of(data))
                .map_err(|e| bad(&format!("partition {id}: {e}")))?;
            t.put(id, a);
        }
        out.push((name, t));
    }
    if at != bytes.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(out)
}

/// The checkpoints of one directory.
pub struct Checkpoints {
    dir: String,
    storage: Box<dyn Storage>,
}

impl Checkpoints {
    /// Checkpoints under `dir` (a local path, `file://` or `hdfs://` URL).
    pub fn new(dir: &str, rt: Option<tokio::runtime::Handle>) -> Result<Checkpoints> {
        let dir = dir.trim_end_matches('/').to_string();
        if dir.is_empty() {
            return Err(Error::config("the checkpoint directory must not be empty"));
        }
        Ok(Checkpoints {
            storage: storage::for_path_on(&dir, rt)?,
            dir,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    fn path(&self, iteration: u64) -> String {
        format!("{}/{}", self.dir, dir_name(iteration))
    }

    /// Creates the directory and checks that it can be written (a probe file is written and
    /// removed), so that a bad path fails before the first iteration, not at the first
    /// checkpoint.
    pub fn check_writable(&self) -> Result<()> {
        self.storage.create_dir_all(&self.dir)?;
        let probe = format!("{}/.probe-{}", self.dir, std::process::id());
        self.storage.write_all(&probe, b"")?;
        self.storage.remove_all(&probe)
    }

    /// Removes every checkpoint (a fresh run must not resume from another run's state).
    pub fn clear(&self) -> Result<()> {
        for (_, name) in self.listed()? {
            self.storage.remove_all(&format!("{}/{name}", self.dir))?;
        }
        Ok(())
    }

    /// The checkpoint directories, newest first.
    fn listed(&self) -> Result<Vec<(u64, String)>> {
        let mut v: Vec<(u64, String)> = self
            .storage
            .list_dirs(&self.dir)?
            .into_iter()
            .filter_map(|n| parse_dir_name(&n).map(|i| (i, n)))
            .collect();
        v.sort_by(|a, b| b.cmp(a));
        Ok(v)
    }

    /// Collective: every worker saves its `tables` as its part of the checkpoint at `iteration`
    /// (all workers must pass the same table names); the master writes the manifest once every
    /// part is written, then removes all but the `keep` newest complete checkpoints (and torn
    /// ones older than this one). On return the checkpoint is complete on the master; a failure
    /// anywhere fails the calling worker (the others then fail at their next collective).
    pub fn save(
        &self,
        w: &Worker,
        job: &str,
        iteration: u64,
        tables: &[(&str, &Table)],
        meta: &serde_json::Value,
        keep: usize,
    ) -> Result<()> {
        let dir = self.path(iteration);
        let manifest = format!("{dir}/{MANIFEST}");
        if w.is_master() {
            // A manifest left by an earlier run at this iteration must not vouch for new parts.
            self.storage.remove_all(&manifest)?;
        }
        let bytes = encode_part(tables);
        let digest = Sha256::digest(&bytes);
        let file = format!("part-{:05}", w.rank());
        self.storage.write_all(&format!("{dir}/{file}"), &bytes)?;
        // Every worker's size and digest; the sum has one non-zero entry per slot.
        let p = w.size();
        let mut sizes = vec![0i64; p];
        sizes[w.rank()] = bytes.len() as i64;
        let mut digests = vec![0u8; p * 32];
        digests[w.rank() * 32..(w.rank() + 1) * 32].copy_from_slice(&digest);
        let mut t = Table::new(Combiner::Sum);
        t.put(0, Array::from_slice(w.pool(), &sizes));
        t.put(1, Array::from_slice(w.pool(), &digests));
        w.allreduce("checkpoint", &mut t, Opts::default())?;
        if !w.is_master() {
            return Ok(());
        }
        let sizes = t.get(0).expect("sizes").as_slice::<i64>()?;
        let digests = t.get(1).expect("digests").as_slice::<u8>()?;
        let m = Manifest {
            format: FORMAT,
            job: job.to_string(),
            iteration,
            workers: p,
            tables: tables.iter().map(|(n, _)| n.to_string()).collect(),
            parts: (0..p)
                .map(|r| PartInfo {
                    file: format!("part-{r:05}"),
                    bytes: sizes[r] as u64,
                    sha256: hex(&digests[r * 32..(r + 1) * 32]),
                })
                .collect(),
            meta: meta.clone(),
        };
        let text = serde_json::to_string_pretty(&m).expect("manifest json");
        self.storage.write_all(&manifest, text.as_bytes())?;
        // Keep the `keep` newest complete checkpoints (this one included); drop older ones.
        let mut complete = 0usize;
        for (i, name) in self.listed()? {
            if i > iteration {
                continue; // newer ones (from a run being resumed past) are left alone
            }
            let ok = i == iteration || self.complete(i, &name)?.is_some();
            if ok && complete < keep.max(1) {
                complete += 1;
            } else {
                self.storage.remove_all(&format!("{}/{name}", self.dir))?;
            }
        }
        Ok(())
    }

    /// The manifest of the checkpoint in directory `name` at iteration `i` if it is complete
    /// (manifest readable and consistent, every part present with its size); `None` if torn.
    fn complete(&self, i: u64, name: &str) -> Result<Option<Manifest>> {
        let dir = format!("{}/{name}", self.dir);
        let path = format!("{dir}/{MANIFEST}");
        if !self.storage.exists(&path)? {
            return Ok(None);
        }
        let m: Manifest = match serde_json::from_slice(&self.storage.read_all(&path)?) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("ignoring checkpoint {dir}: unreadable manifest: {e}");
                return Ok(None);
            }
        };
        if m.format != FORMAT || m.iteration != i || m.parts.len() != m.workers || m.workers == 0 {
            tracing::warn!("ignoring checkpoint {dir}: its manifest does not match it");
            return Ok(None);
        }
        let present = self.storage.list(&dir)?;
        for p in &m.parts {
            let want = format!("{dir}/{}", p.file);
            if !present.iter().any(|f| f.path == want && f.size == p.bytes) {
                tracing::warn!("ignoring checkpoint {dir}: part {} missing or cut", p.file);
                return Ok(None);
            }
        }
        Ok(Some(m))
    }

    /// The manifest of the complete checkpoint at `iteration`; an error names the checkpoint
    /// when it is torn or missing.
    pub fn manifest(&self, iteration: u64) -> Result<Manifest> {
        self.complete(iteration, &dir_name(iteration))?
            .ok_or_else(|| {
                Error::data(format!(
                    "checkpoint {} is not complete (its manifest or a part is missing)",
                    self.path(iteration)
                ))
            })
    }

    /// The newest complete checkpoint whose every part matches its manifest's size and SHA-256,
    /// if any. Torn ones and those with a corrupt part are skipped, each with a warning that
    /// names it and why, in favour of the previous complete, verified one.
    pub fn latest(&self) -> Result<Option<Manifest>> {
        for (i, name) in self.listed()? {
            let Some(m) = self.complete(i, &name)? else {
                continue;
            };
            match self.verify(&m) {
                Ok(()) => return Ok(Some(m)),
                Err(e) => tracing::warn!(
                    "ignoring checkpoint {}/{name}: {e}; falling back to the previous complete one",
                    self.dir
                ),
            }
        }
        Ok(None)
    }

    /// Reads every part of checkpoint `m` and checks its size and SHA-256.
    fn verify(&self, m: &Manifest) -> Result<()> {
        for info in &m.parts {
            self.read_part(m, info)?;
        }
        Ok(())
    }

    /// The bytes of part `info` of checkpoint `m`, checked against its size and SHA-256.
    fn read_part(&self, m: &Manifest, info: &PartInfo) -> Result<(String, Vec<u8>)> {
        let path = format!("{}/{}", self.path(m.iteration), info.file);
        let bytes = self.storage.read_all(&path)?;
        let digest = hex(&Sha256::digest(&bytes));
        if bytes.len() as u64 != info.bytes || digest != info.sha256 {
            return Err(Error::data(format!(
                "checkpoint part {path} is corrupt: {} bytes with SHA-256 {digest}, the manifest \
                 says {} bytes with {}",
                bytes.len(),
                info.bytes,
                info.sha256
            )));
        }
        Ok((path, bytes))
    }

    /// Reads part `rank` of checkpoint `m`, checking its size and SHA-256.
    pub fn load_part(
        &self,
        m: &Manifest,
        rank: usize,
        pool: &Pool,
    ) -> Result<Vec<(String, Table)>> {
        let info = m.parts.get(rank).ok_or_else(|| {
            Error::config(format!(
                "checkpoint at iteration {} has {} parts, no part {rank}",
                m.iteration, m.workers
            ))
        })?;
        let (path, bytes) = self.read_part(m, info)?;
        let tables = decode_part(&bytes, pool, &path)?;
        let names: Vec<&str> = tables.iter().map(|(n, _)| n.as_str()).collect();
        if names != m.tables.iter().map(String::as_str).collect::<Vec<_>>() {
            return Err(Error::data(format!(
                "checkpoint part {path} holds tables {names:?}, the manifest says {:?}",
                m.tables
            )));
        }
        Ok(tables)
    }
}

// ---------------------------------------------------------------------------------------------
// Recovery of an iterative application

/// Fault injection for the recovery tests of the jobs that use [`Recovery`]:
/// `HARP_FAIL_AFTER=I[:R]` makes worker `R` (default the last) fail after iteration `I`, after
/// that iteration's checkpoint if one is due ([`Recovery::fail_after_from_env`]).
pub const FAIL_AFTER: &str = "HARP_FAIL_AFTER";

/// What an application records in a manifest and checks on resume (its shape and options).
pub type Meta = serde_json::Value;

/// The `meta` of an application whose state is only named tables (the Java jobs): the
/// application and the names.
pub fn tables_meta(app: &str, names: &[String]) -> Meta {
    serde_json::json!({ "app": app, "tables": names })
}

/// The checkpoint options every iterative application shares (`--checkpoint-every`,
/// `--checkpoint-dir`, `--resume`; `harp.checkpoint.every`, `harp.checkpoint.dir`,
/// `harp.resume`), and the one way an application uses them: [`Recovery::open`] before the
/// first iteration, [`Recovering::resume`] once the shape of the run is known, and
/// [`Recovering::after_iteration`] at the end of every iteration. The application adds only
/// what its state is (named tables, this worker's part) and what must match to resume (`meta`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Save a checkpoint every this many iterations (and after the last); 0: never.
    pub every: usize,
    /// The checkpoint directory (a local path, `file://` or `hdfs://` URL), the same on every
    /// worker; needed with `every > 0` or `resume`.
    pub dir: Option<String>,
    /// Continue from the newest complete checkpoint in `dir` (from the start if there is none).
    /// Without it, a run that saves checkpoints removes the old ones first.
    pub resume: bool,
    /// Fault injection for tests: worker `.1` (None: the last) fails after iteration `.0`.
    pub fail_after: Option<(usize, Option<usize>)>,
    /// The job's name, recorded in the manifests (empty: the application's).
    pub job: String,
}

impl Recovery {
    /// Checkpoints and resume need a directory.
    pub fn validate(&self) -> Result<()> {
        if (self.every > 0 || self.resume) && self.dir.is_none() {
            return Err(Error::config(
                "checkpoints (checkpoint_every, resume) need a checkpoint directory",
            ));
        }
        Ok(())
    }

    /// Sets [`Recovery::fail_after`] from [`FAIL_AFTER`] when it is set.
    pub fn fail_after_from_env(&mut self) -> Result<()> {
        let Ok(v) = std::env::var(FAIL_AFTER) else {
            return Ok(());
        };
        let bad = || {
            Error::config(format!(
                "{FAIL_AFTER}: expected ITERATION[:RANK], got '{v}'"
            ))
        };
        let (it, rank) = match v.split_once(':') {
            Some((i, r)) => (i, Some(r.parse::<usize>().map_err(|_| bad())?)),
            None => (v.as_str(), None),
        };
        self.fail_after = Some((it.parse::<usize>().map_err(|_| bad())?, rank));
        Ok(())
    }

    /// Collective, before the first iteration: opens the directory (the same on every worker,
    /// or every worker fails saying so), checks on the master that it can be written when
    /// checkpoints are saved and, for a fresh run (no `resume`), removes the checkpoints an
    /// earlier run left there. `app` names the application (labels its collectives, and is
    /// checked on resume).
    pub fn open(&self, w: &Worker, app: &'static str) -> Result<Recovering> {
        self.validate()?;
        let label = format!("{app}-checkpoints");
        let ck = match &self.dir {
            Some(d) if self.every > 0 || self.resume => {
                let ck = Checkpoints::new(d, Some(w.runtime().clone()));
                let ready = match (&ck, w.is_master() && self.every > 0) {
                    (Ok(ck), true) => {
                        ck.check_writable()
                            .and_then(|()| if self.resume { Ok(()) } else { ck.clear() })
                    }
                    (Ok(_), false) => Ok(()),
                    (Err(e), _) => Err(Error::config(e.to_string())),
                };
                crate::worker::agree(w, &label, ready)?;
                // One checkpoint holds every worker's part: a directory per worker would leave
                // each checkpoint torn (the manifest in one, the parts spread over the others).
                crate::worker::same_everywhere(w, &label, "checkpoint_dir", d)?;
                Some(ck?)
            }
            _ => None,
        };
        Ok(Recovering {
            every: self.every,
            resume: self.resume,
            fail_after: self.fail_after,
            ck,
            job: match self.job.as_str() {
                "" => app.to_string(),
                j => j.to_string(),
            },
            app,
            label,
        })
    }
}

/// The state a run resumes from: the iteration of the checkpoint and this worker's tables.
#[derive(Debug)]
pub struct Restored {
    /// The iterations done (the checkpoint was saved after this one).
    pub iteration: usize,
    pub tables: Vec<(String, Table)>,
}

impl Restored {
    /// Takes table `name` out of the restored state; an error names the checkpoint when it is
    /// missing.
    pub fn take(&mut self, name: &str) -> Result<Table> {
        let at = self.tables.iter().position(|(n, _)| n == name);
        let at = at.ok_or_else(|| {
            Error::data(format!(
                "the checkpoint at iteration {} holds no table '{name}'",
                self.iteration
            ))
        })?;
        Ok(self.tables.swap_remove(at).1)
    }
}

/// A run's checkpoints, from [`Recovery::open`].
pub struct Recovering {
    every: usize,
    resume: bool,
    fail_after: Option<(usize, Option<usize>)>,
    ck: Option<Checkpoints>,
    job: String,
    app: &'static str,
    label: String,
}

impl Recovering {
    /// The checkpoint directory, when checkpoints are saved or read.
    pub fn checkpoints(&self) -> Option<&Checkpoints> {
        self.ck.as_ref()
    }

    /// Collective: with `resume`, this worker's part of the newest complete checkpoint; `None`
    /// (start afresh) without `resume` or when there is none. The checkpoint must have been
    /// written by this application with the same `meta` (every key equal: the shape of the run
    /// and the options its result depends on) by as many workers as this run has, at most
    /// `iterations` iterations in; otherwise every worker fails, naming the checkpoint and what
    /// differs. A failure to read any worker's part fails every worker with its cause.
    pub fn resume(
        &self,
        w: &Worker,
        meta: &serde_json::Value,
        iterations: usize,
    ) -> Result<Option<Restored>> {
        let Some(ck) = self.ck.as_ref().filter(|_| self.resume) else {
            return Ok(None);
        };
        let found = if w.is_master() {
            self.find(w, ck, meta, iterations)
        } else {
            Ok(None)
        };
        let it = found.as_ref().ok().copied().flatten();
        crate::worker::agree(w, &self.label, found.map(|_| ()))?;
        // The master's finding, to every worker: iteration + 1, or 0 for none.
        let mut t = Table::new(Combiner::Max);
        t.put(
            0,
            Array::from_slice(w.pool(), &[it.map_or(0, |i| i as i64 + 1)]),
        );
        w.allreduce(&self.label, &mut t, Opts::default())?;
        let it = t.get(0).expect("iteration").as_slice::<i64>()?[0];
        if it == 0 {
            return Ok(None);
        }
        let it = (it - 1) as u64;
        let mine = ck
            .manifest(it)
            .and_then(|m| ck.load_part(&m, w.rank(), w.pool()));
        let tables = crate::worker::agree_on(w, &self.label, mine)?;
        Ok(Some(Restored {
            iteration: it as usize,
            tables,
        }))
    }

    /// The master's part of [`Recovering::resume`]: the iteration of the checkpoint to resume
    /// from, checked against this run.
    fn find(
        &self,
        w: &Worker,
        ck: &Checkpoints,
        meta: &serde_json::Value,
        iterations: usize,
    ) -> Result<Option<u64>> {
        let Some(m) = ck.latest()? else {
            tracing::info!("no complete checkpoint in {}: starting afresh", ck.dir());
            return Ok(None);
        };
        let what = format!("checkpoint at iteration {} in {}", m.iteration, ck.dir());
        let app = m.meta.get("app").and_then(|a| a.as_str());
        if app != Some(self.app) {
            return Err(Error::config(format!(
                "cannot resume {} from the {what}: it was written by {}",
                self.app,
                app.unwrap_or("another job")
            )));
        }
        if m.workers != w.size() {
            return Err(Error::config(format!(
                "cannot resume from the {what}: it was written by {} workers, this run has {} \
                 (resume with the same number of workers)",
                m.workers,
                w.size()
            )));
        }
        let keys = meta
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .chain(m.meta.as_object().into_iter().flatten().map(|(k, _)| k));
        for key in keys {
            if m.meta.get(key) != meta.get(key) {
                let null = serde_json::Value::Null;
                return Err(Error::config(format!(
                    "cannot resume from the {what}: its {key} is {}, this run's is {}",
                    m.meta.get(key).unwrap_or(&null),
                    meta.get(key).unwrap_or(&null)
                )));
            }
        }
        if m.iteration as usize > iterations {
            return Err(Error::config(format!(
                "cannot resume from the {what}: it is past the {iterations} iterations asked for"
            )));
        }
        tracing::info!("resuming from the {what}");
        Ok(Some(m.iteration))
    }

    /// Whether a checkpoint is saved after iteration `it` (1-based) of `last`: every
    /// `every`-th, and the last.
    pub fn due(&self, it: usize, last: usize) -> bool {
        self.ck.is_some() && self.every > 0 && (it.is_multiple_of(self.every) || it == last)
    }

    /// Collective, at the end of every iteration `it` (1-based) of `last`: recalibrates the
    /// network model when the measured times drift from it
    /// ([`Worker::recalibrate_on_drift`]), saves this worker's `state()` (named tables) with
    /// `meta` when a checkpoint is due ([`Recovering::due`]), then fails if a failure is
    /// injected here ([`FAIL_AFTER`]).
    pub fn after_iteration<S: AsRef<str>>(
        &self,
        w: &Worker,
        it: usize,
        last: usize,
        meta: &serde_json::Value,
        state: impl FnOnce() -> Result<Vec<(S, Table)>>,
    ) -> Result<()> {
        w.recalibrate_on_drift()?;
        if let (Some(ck), true) = (&self.ck, self.due(it, last)) {
            let tables = state()?;
            let named: Vec<(&str, &Table)> = tables.iter().map(|(n, t)| (n.as_ref(), t)).collect();
            ck.save(w, &self.job, it as u64, &named, meta, 2)?;
        }
        self.injected(w, it)
    }

    /// [`Recovering::after_iteration`] with tables the caller holds (saved when due).
    pub fn after_iteration_of(
        &self,
        w: &Worker,
        it: usize,
        last: usize,
        meta: &serde_json::Value,
        tables: &[(&str, &Table)],
    ) -> Result<()> {
        self.after_iteration(w, it, last, meta, || {
            Ok(tables
                .iter()
                .map(|(n, t)| (*n, t.duplicate(w.pool())))
                .collect::<Vec<_>>())
        })
    }

    /// The failure injected after iteration `it` on this worker, if any ([`FAIL_AFTER`]).
    fn injected(&self, w: &Worker, it: usize) -> Result<()> {
        if let Some((i, rank)) = self.fail_after {
            if i == it && rank.unwrap_or(w.size() - 1) == w.rank() {
                return Err(Error::config(format!(
                    "{}: injected failure after iteration {it} ({FAIL_AFTER})",
                    self.app
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::on_workers;

    fn tmpdir(tag: &str) -> String {
        let d = std::env::temp_dir().join(format!("harp-ckpt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d.to_string_lossy().into_owned()
    }

    fn table_of(pool: &Pool, rank: usize, it: u64) -> Table {
        let mut t = Table::new(Combiner::Sum);
        t.put(3, Array::from_slice(pool, &[rank as f64, it as f64, 0.1]));
        t.put(1, Array::from_slice(pool, &[rank as i32; 5]));
        t
    }

    /// `n` in-process workers save checkpoints of [`table_of`] under `dir` at each of
    /// `iterations`, keeping `keep`.
    fn save_on_workers(
        dir: &str,
        n: usize,
        job: &'static str,
        iterations: &'static [u64],
        meta: serde_json::Value,
        keep: usize,
    ) {
        let dir = dir.to_string();
        on_workers(n, move |w| {
            let ck = Checkpoints::new(&dir, None).unwrap();
            for &it in iterations {
                let t = table_of(w.pool(), w.rank(), it);
                ck.save(w, job, it, &[("t", &t)], &meta, keep).unwrap();
            }
        });
    }

    #[test]
    fn parts_round_trip_and_corruption_is_detected() {
        let pool = Pool::new(Default::default());
        let a = table_of(&pool, 2, 7);
        let b = Table::new(Combiner::Sum);
        let bytes = encode_part(&[("a", &a), ("empty", &b)]);
        let back = decode_part(&bytes, &pool, "x").unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].0, "a");
        assert_eq!(back[0].1.ids().len(), 2);
        assert_eq!(
            back[0].1.get(3).unwrap().as_slice::<f64>().unwrap(),
            &[2.0, 7.0, 0.1]
        );
        assert_eq!(
            back[0].1.get(1).unwrap().as_slice::<i32>().unwrap(),
            &[2; 5]
        );
        assert!(back[1].1.is_empty());
        for cut in [0, 7, 12, bytes.len() - 1] {
            let e = decode_part(&bytes[..cut], &pool, "x")
                .unwrap_err()
                .to_string();
            assert!(e.contains("corrupt"), "{e}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_part(&longer, &pool, "x").is_err());
    }

    /// Edge tables come back with their layouts; a bad weighted flag is refused.
    #[test]
    fn edge_tables_round_trip() {
        use crate::data::graph::EdgeBuilder;
        let pool = Pool::default();
        let mut t = Table::new(Combiner::Sum);
        for (pid, weighted) in [(0u32, false), (5, true)] {
            let mut b = EdgeBuilder::new(weighted);
            b.push(1, -2, 0.5);
            b.push(i64::MAX, 3, 2.0);
            t.put(pid, b.build(&pool));
        }
        let bytes = encode_part(&[("e", &t)]);
        let back = decode_part(&bytes, &pool, "x").unwrap();
        for (id, a) in t.iter() {
            let g = back[0].1.get(id).unwrap();
            assert_eq!((g.layout(), g.bytes()), (a.layout(), a.bytes()));
        }
        let flag = bytes.iter().position(|&b| b == 17).unwrap() + 1;
        let mut bad = bytes.clone();
        bad[flag] = 7;
        let e = decode_part(&bad, &pool, "x").unwrap_err().to_string();
        assert!(e.contains("bad edge layout 7"), "{e}");
    }

    /// Key-value tables (str → i64, i32 → f64[], i64 → bytes) come back byte for byte, with
    /// their layouts; a corrupted key-value partition is refused naming the partition.
    #[test]
    fn key_value_tables_round_trip() {
        use crate::data::kv::{self, Key, KvTable, Value};
        let pool = Pool::default();
        let mut words = KvTable::new(
            KeyType::Str,
            ValueType::Scalar(DType::I64),
            Combiner::Sum,
            3,
        )
        .unwrap();
        for w in [&b"a"[..], b"b\xff", b"a", b"", b"zz"] {
            words.add_scalar(w, 1i64).unwrap();
        }
        let words = words.into_table(&pool).unwrap();
        let mut arrays = KvTable::new(
            KeyType::I32,
            ValueType::Array(DType::F64),
            Combiner::Append,
            2,
        )
        .unwrap();
        arrays
            .add(Key::I32(-4), Value::array(&[1.5f64, 2.0]))
            .unwrap();
        arrays.add(Key::I32(9), Value::array::<f64>(&[])).unwrap();
        let arrays = arrays.into_table(&pool).unwrap();
        let mut blobs =
            KvTable::new(KeyType::I64, ValueType::Bytes, Combiner::KeepFirst, 1).unwrap();
        blobs
            .add(Key::I64(i64::MIN), Value::bytes(b"\0\x01"))
            .unwrap();
        let blobs = blobs.into_table(&pool).unwrap();
        let dense = table_of(&pool, 1, 1);
        let tables = [("w", &words), ("a", &arrays), ("b", &blobs), ("d", &dense)];
        let bytes = encode_part(&tables);
        let back = decode_part(&bytes, &pool, "x").unwrap();
        for ((name, want), (got_name, got)) in tables.iter().zip(&back) {
            assert_eq!(name, got_name);
            assert_eq!(want.ids(), got.ids());
            for (id, a) in want.iter() {
                let g = got.get(id).unwrap();
                assert_eq!(
                    (g.layout(), g.bytes()),
                    (a.layout(), a.bytes()),
                    "{name} {id}"
                );
            }
        }
        let w0 = back[0]
            .1
            .iter()
            .map(|(_, a)| kv::get(a, Key::Str(b"a")).unwrap());
        let counts: Vec<i64> = w0.flatten().map(|v| v.get::<i64>().unwrap()).collect();
        assert_eq!(counts, vec![2]);
        // The first partition of "w": swap its first key's length for a huge one.
        let at = 8 + 4 + 4 + 4 + 1 + 4 + 4 + 3 + 8;
        let mut bad = bytes.clone();
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = decode_part(&bad, &pool, "x").unwrap_err().to_string();
        assert!(e.contains("corrupt") && e.contains("partition"), "{e}");
    }

    #[test]
    fn save_writes_every_part_and_a_manifest_and_latest_finds_it() {
        let dir = tmpdir("save");
        let meta = serde_json::json!({ "app": "test" });
        save_on_workers(&dir, 3, "job-x", &[2, 4, 6], meta, 2);
        let ck = Checkpoints::new(&dir, None).unwrap();
        let m = ck.latest().unwrap().expect("a complete checkpoint");
        assert_eq!((m.iteration, m.workers, m.job.as_str()), (6, 3, "job-x"));
        assert_eq!(m.tables, vec!["t".to_string()]);
        let pool = Pool::new(Default::default());
        for r in 0..3 {
            let p = ck.load_part(&m, r, &pool).unwrap();
            assert_eq!(
                p[0].1.get(3).unwrap().as_slice::<f64>().unwrap(),
                &[r as f64, 6.0, 0.1]
            );
        }
        assert!(ck.load_part(&m, 3, &pool).is_err());
        // Only the two newest are kept.
        let names = crate::storage::LocalStorage.list_dirs(&dir).unwrap();
        assert_eq!(names, vec![dir_name(4), dir_name(6)]);

        // Torn: no manifest at 6 → 4; a missing part at 4 too → none.
        std::fs::remove_file(format!("{dir}/{}/{MANIFEST}", dir_name(6))).unwrap();
        assert_eq!(ck.latest().unwrap().unwrap().iteration, 4);
        std::fs::remove_file(format!("{dir}/{}/part-00001", dir_name(4))).unwrap();
        assert_eq!(ck.latest().unwrap(), None);

        // A part whose content changed (same size) is refused on load, naming the file.
        save_on_workers(&dir, 2, "j", &[9], serde_json::Value::Null, 1);
        let m = ck.latest().unwrap().unwrap();
        assert_eq!((m.iteration, m.workers), (9, 2));
        // keep = 1: the torn ones older than 9 are gone.
        assert_eq!(
            crate::storage::LocalStorage.list_dirs(&dir).unwrap(),
            vec![dir_name(9)]
        );
        let part = format!("{dir}/{}/part-00000", dir_name(9));
        let mut b = std::fs::read(&part).unwrap();
        let last = b.len() - 1;
        b[last] ^= 1;
        std::fs::write(&part, &b).unwrap();
        let e = ck.load_part(&m, 0, &pool).unwrap_err().to_string();
        assert!(e.contains("corrupt") && e.contains("part-00000"), "{e}");
        ck.clear().unwrap();
        assert_eq!(ck.latest().unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_checkpoint_with_any_corrupt_part_is_passed_over_for_the_previous_one() {
        let dir = tmpdir("verify");
        save_on_workers(&dir, 3, "j", &[3, 5], serde_json::Value::Null, 2);
        let ck = Checkpoints::new(&dir, None).unwrap();
        assert_eq!(ck.latest().unwrap().unwrap().iteration, 5);
        let flip = |it: u64, part: &str| {
            let path = format!("{dir}/{}/{part}", dir_name(it));
            let mut b = std::fs::read(&path).unwrap();
            let last = b.len() - 1;
            b[last] ^= 1; // same size: only the digest tells
            std::fs::write(&path, &b).unwrap();
        };
        // A part other than the master's: the newest is rejected, the previous one used.
        flip(5, "part-00002");
        let m = ck.latest().unwrap().unwrap();
        assert_eq!(m.iteration, 3);
        let pool = Pool::new(Default::default());
        for r in 0..3 {
            assert!(ck.load_part(&m, r, &pool).is_ok());
        }
        // The previous one corrupt too (its first part): none is left to resume from.
        flip(3, "part-00000");
        assert_eq!(ck.latest().unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_manifest_from_another_iteration_or_garbage_is_ignored() {
        let dir = tmpdir("garbage");
        let ck = Checkpoints::new(&dir, None).unwrap();
        let st = crate::storage::LocalStorage;
        st.write_all(&format!("{dir}/{}/{MANIFEST}", dir_name(3)), b"{not json")
            .unwrap();
        st.create_dir_all(&format!("{dir}/ckpt-x1")).unwrap();
        assert_eq!(ck.latest().unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
