//! `harp.Pending`: a collective started without blocking (`Worker.*Start`, the engine's
//! `Collectives::*_start`). Starting takes the contents of the call's tables out of their
//! entries (the Java `Table` objects then read as empty); `Pending.get` and `Pending.close`
//! wait for the operation and put the result back into the same entries. Handles are `long`s
//! of a registry of their own: ids start at 1 and are never reused, so a finished handle is
//! told apart from one never issued, and neither can crash the JVM.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use harp::collective::{AllreduceAlgorithm, BroadcastAlgorithm};
use harp::wire::Op;
use harp::{Collectives, Opts, Pending, Table};
use jni::objects::{JClass, JIntArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::EnvUnowned;

use crate::convert::jstr;
use crate::errors::{call, closed, fail, Failure};
use crate::handles::TableEntry;
use crate::worker::{
    allgather_algorithm, in_group, own_table, partitioner, ranks, root, two_tables,
};

/// An operation in flight and the table entries its result goes back to.
enum Started {
    Zero(Pending<()>),
    One(Pending<Table>, Arc<TableEntry>),
    /// Push and pull: `(local, global)`.
    Two(Pending<(Table, Table)>, Arc<TableEntry>, Arc<TableEntry>),
}

struct Entry {
    rank: usize,
    started: Started,
}

impl Entry {
    /// Whether the operation is complete (never blocks).
    fn test(&mut self) -> bool {
        match &mut self.started {
            Started::Zero(p) => p.test(),
            Started::One(p, _) => p.test(),
            Started::Two(p, _, _) => p.test(),
        }
    }

    /// Waits for the operation and puts its tables back (a failed one leaves them empty).
    fn finish(self) -> Result<(), Failure> {
        match self.started {
            Started::Zero(p) => p.wait()?,
            Started::One(p, e) => put_back(&e, p.wait()?)?,
            Started::Two(p, l, g) => {
                let (local, global) = p.wait()?;
                put_back(&l, local)?;
                put_back(&g, global)?;
            }
        }
        Ok(())
    }
}

static NEXT: AtomicI64 = AtomicI64::new(1);

fn registry() -> MutexGuard<'static, HashMap<i64, Entry>> {
    static R: OnceLock<Mutex<HashMap<i64, Entry>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn insert(rank: usize, started: Started) -> jlong {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    registry().insert(id, Entry { rank, started });
    id
}

/// The error for a handle that is not in the registry.
fn unknown(h: i64) -> Failure {
    if h > 0 && h < NEXT.load(Ordering::Relaxed) {
        closed(format!(
            "pending operation {h} is finished (get or close was called)"
        ))
    } else {
        closed(format!("pending operation handle {h} was never valid"))
    }
}

/// Takes the contents of a table out of its entry for an operation.
fn take_table(e: &TableEntry) -> Result<Table, Failure> {
    let mut g = e.lock()?;
    let empty = Table::new(g.combiner().clone());
    Ok(std::mem::replace(&mut *g, empty))
}

fn put_back(e: &TableEntry, t: Table) -> Result<(), Failure> {
    *e.lock()? = t;
    Ok(())
}

/// One table's operation: takes the table's contents and starts.
fn one(
    wk: &dyn Collectives,
    t: jlong,
    go: impl FnOnce(Table) -> harp::Result<Pending<Table>>,
) -> Result<Started, Failure> {
    let e = own_table(wk, t)?;
    let tb = take_table(&e)?;
    Ok(Started::One(go(tb)?, e))
}

/// Starts collective `op` (`barrier`, `broadcast`, `allgather`, `allreduce`, `push`, `pull`,
/// `rotate`) in the job or the group `members` with the arguments of its blocking method
/// (those it does not take are ignored): `t` the table (push/pull: the local one), `global`
/// push/pull's global table, `root_rank` and `algorithm` (broadcast; allreduce's algorithm),
/// `total` (allgather), `ids`/`owners` (push/pull's map), `map` (rotate). Returns the pending
/// operation's handle (0 when the start failed: Java has the exception then).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Worker_start<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    op: JString<'l>,
    t: jlong,
    global: jlong,
    root_rank: jint,
    algorithm: JString<'l>,
    total: jint,
    ids: JIntArray<'l>,
    owners: JIntArray<'l>,
    map: JIntArray<'l>,
) -> jlong {
    let mut out = 0;
    let mut name = String::new();
    let mut op_of = Op::Barrier;
    // The operation's name first, so that the scope names it in any failure.
    let mut env = env;
    let known = call(&mut env, |env, _| {
        name = jstr(env, &op)?;
        op_of = match name.as_str() {
            "barrier" => Op::Barrier,
            "broadcast" => Op::Broadcast,
            "allgather" => Op::Allgather,
            "allreduce" => Op::Allreduce,
            "push" => Op::Push,
            "pull" => Op::Pull,
            "rotate" => Op::Rotate,
            other => return Err(fail(format!("no non-blocking {other:?}"))),
        };
        Ok(true)
    });
    if !known {
        return 0;
    }
    in_group(env, w, members, op_of, label, |env, wk, label| {
        let started = match op_of {
            Op::Barrier => Started::Zero(wk.barrier_start(label)?),
            Op::Broadcast => {
                let a = BroadcastAlgorithm::parse(&jstr(env, &algorithm)?)?;
                let o = Opts::default().root(root(root_rank)?).algorithm(a);
                one(wk, t, |tb| wk.broadcast_start(label, tb, o))?
            }
            Op::Allgather => {
                let o = Opts::default().algorithm(allgather_algorithm(total)?);
                one(wk, t, |tb| wk.allgather_start(label, tb, o))?
            }
            Op::Allreduce => {
                let a = AllreduceAlgorithm::parse(&jstr(env, &algorithm)?)?;
                one(wk, t, |tb| {
                    wk.allreduce_start(label, tb, Opts::default().algorithm(a))
                })?
            }
            Op::Push | Op::Pull => {
                let p = partitioner(env, &ids, &owners)?;
                let (l, g) = two_tables(wk, t, global)?;
                let tables = (take_table(&l)?, take_table(&g)?);
                let h = if op_of == Op::Push {
                    wk.push_start(label, tables, p)?
                } else {
                    wk.pull_start(label, tables, p)?
                };
                Started::Two(h, l, g)
            }
            _ => {
                let map = ranks(env, &map)?;
                one(wk, t, |tb| wk.rotate_start(label, tb, map))?
            }
        };
        out = insert(wk.worker().rank(), started);
        Ok(())
    });
    out
}

/// Whether operation `h` is complete (never blocks). A finished handle is complete.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Pending_test<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jboolean {
    call(&mut env, |_, _| match registry().get_mut(&h) {
        Some(e) => Ok(e.test()),
        None if h > 0 && h < NEXT.load(Ordering::Relaxed) => Ok(true),
        None => Err(unknown(h)),
    })
}

/// Waits for operation `h`, puts its tables back and ends the handle; its failure is thrown
/// (`discard`: not thrown, for `Pending.close`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Pending_finish<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
    discard: jboolean,
) {
    call(&mut env, |_, scope| {
        let e = registry().remove(&h).ok_or_else(|| unknown(h))?;
        scope.worker(e.rank);
        match e.finish() {
            Err(_) if discard => Ok(()),
            r => r,
        }
    })
}
