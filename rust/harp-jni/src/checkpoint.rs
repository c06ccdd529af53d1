//! `harp.Checkpoints`: a user job's checkpoints of named tables and the iteration a restarted
//! job resumes from, over the engine's one helper for every iterative job
//! (`harp::checkpoint::Recovery`). Its state lives here, under `long` handles of its own (ids
//! from 1, never reused): the open checkpoint directory, the table names, and the tables
//! restored from a checkpoint until Java takes them (`restore`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use harp::checkpoint::{Meta, Recovering, Recovery};
use harp::Table;
use jni::objects::{JClass, JLongArray, JObjectArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::EnvUnowned;

use crate::convert::jstr;
use crate::errors::{call, closed, fail, Failure};
use crate::handles::{table, worker};

/// The application name of a Java job's checkpoints (checked on resume).
const APP: &str = "java";

/// One `harp.Checkpoints`.
struct Open {
    rec: Recovering,
    names: Vec<String>,
    meta: Meta,
    /// The iterations done by the checkpoint resumed from (0: a fresh start).
    iteration: usize,
    /// This worker's tables of that checkpoint not yet restored.
    restored: Vec<(String, Table)>,
}

static NEXT: AtomicI64 = AtomicI64::new(1);

fn registry() -> MutexGuard<'static, HashMap<i64, Arc<Mutex<Open>>>> {
    static R: OnceLock<Mutex<HashMap<i64, Arc<Mutex<Open>>>>> = OnceLock::new();
    R.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn open_of(h: jlong) -> Result<Arc<Mutex<Open>>, Failure> {
    match registry().get(&h) {
        Some(o) => Ok(o.clone()),
        None if h > 0 && h < NEXT.load(Ordering::Relaxed) => {
            Err(closed(format!("checkpoints handle {h} is closed")))
        }
        None => Err(closed(format!("checkpoints handle {h} was never valid"))),
    }
}

fn lock(o: &Mutex<Open>) -> MutexGuard<'_, Open> {
    o.lock().unwrap_or_else(|e| e.into_inner())
}

/// Collective: opens the checkpoints of the tables `names` (every `every` iterations into
/// `dir`, "" for none; `resume`: from the newest complete one) and reads this worker's part of
/// the checkpoint resumed from. Returns the handle.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Checkpoints_open<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    every: jint,
    dir: JString<'l>,
    resume: jboolean,
    job: JString<'l>,
    names: JObjectArray<'l, JString<'l>>,
) -> jlong {
    call(&mut env, |env, scope| {
        scope.named("checkpoint", "open");
        let we = worker(w)?;
        scope.worker(we.worker.rank());
        let every = usize::try_from(every)
            .map_err(|_| fail(format!("harp.checkpoint.every must be >= 0, got {every}")))?;
        let dir = jstr(env, &dir)?;
        let mut v = Vec::with_capacity(names.len(env)?);
        for i in 0..names.len(env)? {
            let n = names.get_element(env, i)?;
            v.push(jstr(env, &n)?);
        }
        let r = Recovery {
            every,
            dir: (!dir.is_empty()).then_some(dir),
            resume,
            fail_after: None,
            job: jstr(env, &job)?,
        };
        let rec = r.open(&we.worker, APP)?;
        let meta = harp::checkpoint::tables_meta(APP, &v);
        let (iteration, restored) = match rec.resume(&we.worker, &meta, usize::MAX)? {
            Some(got) => (got.iteration, got.tables),
            None => (0, Vec::new()),
        };
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let o = Open {
            rec,
            names: v,
            meta,
            iteration,
            restored,
        };
        registry().insert(id, Arc::new(Mutex::new(o)));
        Ok(id)
    })
}

/// The iterations done by the checkpoint resumed from (0: a fresh start).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Checkpoints_iteration<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jint {
    call(&mut env, |_, _| {
        let o = open_of(h)?;
        let it = lock(&o).iteration;
        jint::try_from(it).map_err(|_| fail(format!("iteration {it} does not fit an int")))
    })
}

/// Moves this worker's partitions of table `name` of the checkpoint resumed from into table
/// `t` (emptied first).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Checkpoints_restore<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
    name: JString<'l>,
    t: jlong,
) {
    call(&mut env, |env, scope| {
        let name = jstr(env, &name)?;
        let o = open_of(h)?;
        let mut o = lock(&o);
        let Some(at) = o.restored.iter().position(|(n, _)| *n == name) else {
            let what = match o.names.contains(&name) {
                true => "was restored already",
                false => "is not one of the checkpointed tables",
            };
            return Err(fail(format!("table '{name}' {what} ({:?})", o.names)));
        };
        let (_, mut from) = o.restored.swap_remove(at);
        let e = table(t)?;
        scope.worker(e.rank);
        let mut into = e.lock()?;
        into.clear();
        for id in from.ids() {
            let a = from.remove(id).expect("listed id");
            into.put(id, a);
        }
        Ok(())
    })
}

/// Collective, at the end of iteration `it` of `last`: recalibration on drift, the checkpoint
/// of `tables` (in the order of the names) when one is due.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Checkpoints_afterIteration<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    h: jlong,
    it: jint,
    last: jint,
    tables: JLongArray<'l>,
) {
    call(&mut env, |env, scope| {
        scope.named("checkpoint", "afterIteration");
        let we = worker(w)?;
        scope.worker(we.worker.rank());
        let (Ok(it), Ok(last)) = (usize::try_from(it), usize::try_from(last)) else {
            return Err(fail(format!("iteration {it} of {last}")));
        };
        let mut hs = vec![0i64; tables.len(env)?];
        tables.get_region(env, 0, &mut hs)?;
        let o = open_of(h)?;
        let o = lock(&o);
        if hs.len() != o.names.len() {
            return Err(fail(format!(
                "{} tables for the {} names {:?}",
                hs.len(),
                o.names.len(),
                o.names
            )));
        }
        let entries = hs
            .iter()
            .map(|&t| table(t))
            .collect::<Result<Vec<_>, _>>()?;
        let guards = entries
            .iter()
            .map(|e| e.lock())
            .collect::<harp::Result<Vec<_>>>()?;
        let named: Vec<(&str, &Table)> = o
            .names
            .iter()
            .zip(&guards)
            .map(|(n, g)| (n.as_str(), &**g))
            .collect();
        o.rec
            .after_iteration_of(&we.worker, it, last, &o.meta, &named)?;
        Ok(())
    })
}

/// Frees the state of handle `h` (and any table not restored); again is a no-op.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Checkpoints_close<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) {
    call(&mut env, |_, _| {
        registry().remove(&h);
        Ok(())
    })
}
