//! `harp.Worker`: a started worker (rank, size, pool counters, close, abort) and one export per
//! collective. Algorithms are passed by name and parsed by the engine.

use std::sync::Arc;

use harp::collective::{
    AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, ReduceAlgorithm,
};
use harp::wire::Op;
use harp::Opts;
use harp::{Collectives, Partitioner, Table, Worker};
use jni::objects::{JClass, JIntArray, JLongArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::{Env, EnvUnowned};

use crate::convert::{ints, jstr, new_longs};
use crate::errors::{call, fail, Failure};
use crate::handles::{restore_worker, table, take_worker, worker, TableEntry};

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_rank<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jint {
    call(&mut env, |_, _| Ok(worker(h)?.worker.rank() as jint))
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_size<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> jint {
    call(&mut env, |_, _| Ok(worker(h)?.worker.size() as jint))
}

/// Frees every buffer kept in the worker's pool free lists and returns the allocator's free
/// memory to the system (`harp::Pool::trim`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_trimPool<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) {
    call(&mut env, |_, _| {
        worker(h)?.worker.pool().trim();
        Ok(())
    })
}

/// The worker's pool counters: `[allocations, reuses, releases kept, releases freed, bytes
/// held, bytes in use]` (`harp::PoolStats`, decoded by `harp.PoolStats`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_poolStats<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) -> JLongArray<'l> {
    call(&mut env, |env, _| {
        let s = worker(h)?.worker.pool().stats();
        new_longs(
            env,
            &[
                s.allocations,
                s.reuses,
                s.releases_kept,
                s.releases_freed,
                s.bytes_held,
                s.bytes_in_use,
            ],
        )
    })
}

/// Orderly shutdown (tells the peers the worker is leaving). Closing again is a no-op; closing
/// while a collective runs on another thread is an error and leaves the worker usable.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_close<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
) {
    call(&mut env, |_, scope| {
        let Some(w) = take_worker(h)? else {
            return Ok(());
        };
        scope.worker(w.worker.rank());
        match Arc::try_unwrap(w) {
            Ok(entry) => {
                entry.worker.close();
                Ok(())
            }
            Err(w) => {
                restore_worker(h, w);
                Err(fail("worker is still in a collective on another thread"))
            }
        }
    })
}

/// Failure shutdown: every peer's pending and later collectives fail quoting `reason` (the user
/// code's exception, say). A no-op on a closed worker.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_abort<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    h: jlong,
    reason: JString<'l>,
) {
    call(&mut env, |env, _| {
        let reason = jstr(env, &reason)?;
        match take_worker(h)?.map(Arc::try_unwrap) {
            Some(Ok(entry)) => entry.worker.abort(&reason),
            // A collective runs on another thread: it aborts the worker when it returns
            // (the handle is gone for every new call already).
            Some(Err(shared)) => {
                *shared.abort.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
            }
            None => {}
        }
        Ok(())
    })
}

/// Runs collective `op` labelled `label` on worker `w`: the scope names them in any failure,
/// and the engine's log lines carry the worker's tag.
fn collective<'l>(
    mut env: EnvUnowned<'l>,
    w: jlong,
    op: Op,
    label: JString<'l>,
    body: impl FnOnce(&mut Env<'l>, &Worker, &str) -> Result<(), Failure>,
) {
    call(&mut env, |env, scope| {
        let we = worker(w)?;
        scope.worker(we.worker.rank());
        scope.op(op, "");
        if label.is_null() {
            return Err(fail("the label is null"));
        }
        let label = jstr(env, &label)?;
        scope.op(op, &label);
        let span = tracing::info_span!("harp", worker = %we.tag);
        let _g = span.enter();
        let res = body(env, &we.worker, &label);
        // `Worker.abort` on another thread while this ran: carry it out now, as the last user.
        let pending = we.abort.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        if pending {
            if let Ok(entry) = Arc::try_unwrap(we) {
                let reason = entry.abort.lock().unwrap_or_else(|e| e.into_inner()).take();
                entry.worker.abort(&reason.unwrap_or_default());
            }
        }
        res
    })
}

/// Runs collective `op` as [`collective`] does, in the whole job (`members` null) or in the
/// group of those world ranks (`Worker::group`, whose errors become the call's: an empty list,
/// a rank listed twice or out of range, this worker not a member).
pub(crate) fn in_group<'l>(
    env: EnvUnowned<'l>,
    w: jlong,
    members: JIntArray<'l>,
    op: Op,
    label: JString<'l>,
    body: impl FnOnce(&mut Env<'l>, &dyn Collectives, &str) -> Result<(), Failure>,
) {
    collective(env, w, op, label, |env, wk, label| {
        match members_of(env, &members)? {
            None => body(env, wk, label),
            Some(m) => body(env, &wk.group(&m)?, label),
        }
    })
}

/// A group's member list (null: the whole job). A negative rank is refused here, named as
/// Java gave it; the engine checks the rest (`Worker::group`).
fn members_of(env: &Env<'_>, members: &JIntArray<'_>) -> Result<Option<Vec<usize>>, Failure> {
    let Some(m) = ints(env, members)? else {
        return Ok(None);
    };
    if let Some(r) = m.iter().find(|&&r| r < 0) {
        return Err(fail(format!(
            "group {m:?}: rank {r} is not a worker (ranks start at 0)"
        )));
    }
    Ok(Some(m.into_iter().map(|r| r as usize).collect()))
}

/// The ranks in an `int[]` (null: none); a negative rank becomes an out-of-range one, which the
/// engine reports.
pub(crate) fn ranks(env: &Env<'_>, members: &JIntArray<'_>) -> Result<Option<Vec<usize>>, Failure> {
    Ok(ints(env, members)?.map(|m| {
        m.into_iter()
            .map(|r| usize::try_from(r).unwrap_or(usize::MAX))
            .collect()
    }))
}

/// This worker's rank in the group of world ranks `members`, checking the list as
/// `Worker::group` does (no message is exchanged).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_groupRank<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
) -> jint {
    call(&mut env, |env, scope| {
        let we = worker(w)?;
        scope.worker(we.worker.rank());
        let m = members_of(env, &members)?.ok_or_else(|| fail("a group needs a member list"))?;
        Ok(we.worker.group(&m)?.rank() as jint)
    })
}

/// Runs `f` on table `t`, locked for the duration of the collective.
fn in_table(
    wk: &dyn Collectives,
    t: jlong,
    f: impl FnOnce(&mut Table) -> harp::Result<()>,
) -> Result<(), Failure> {
    let e = own_table(wk, t)?;
    let mut tb = e.lock()?;
    Ok(f(&mut tb)?)
}

/// Table `t`, which must be one of this worker's: a table of another worker in the same JVM
/// (LocalJobRunner runs several) holds that worker's pool memory and may be in its collective.
pub(crate) fn own_table(wk: &dyn Collectives, t: jlong) -> Result<Arc<TableEntry>, Failure> {
    let e = table(t)?;
    if !e.pool.same(wk.pool()) {
        return Err(fail(format!(
            "table handle {t} belongs to another worker of this process; a collective takes \
             only its own worker's tables"
        )));
    }
    Ok(e)
}

pub(crate) fn root(r: jint) -> Result<usize, Failure> {
    usize::try_from(r).map_err(|_| fail(format!("bad root {r}")))
}

/// An explicit partition → worker map (`ids[i]` goes to `owners[i]`), or modulo when both are
/// null.
pub(crate) fn partitioner(
    env: &Env<'_>,
    ids: &JIntArray<'_>,
    owners: &JIntArray<'_>,
) -> Result<Partitioner, Failure> {
    match (ints(env, ids)?, ints(env, owners)?) {
        (Some(i), Some(o)) if i.len() == o.len() => Ok(Partitioner::Map(Arc::new(
            // A negative owner becomes an out-of-range one, which the engine reports.
            i.into_iter()
                .zip(o)
                .map(|(a, b)| (a as u32, usize::try_from(b).unwrap_or(usize::MAX)))
                .collect(),
        ))),
        (None, None) => Ok(Partitioner::Modulo),
        _ => Err(fail(
            "partition map: ids and owners must have the same length",
        )),
    }
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_barrier<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
) {
    in_group(env, w, members, Op::Barrier, label, |_, wk, label| {
        Ok(wk.barrier(label)?)
    })
}

/// `algorithm`: a name `BroadcastAlgorithm::parse` accepts (the Java `Algorithm` broadcast
/// constants; docs/algorithms.md lists them with their costs).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_broadcast<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    root_rank: jint,
    algorithm: JString<'l>,
) {
    in_group(env, w, members, Op::Broadcast, label, |env, wk, label| {
        let a = BroadcastAlgorithm::parse(&jstr(env, &algorithm)?)?;
        let r = root(root_rank)?;
        in_table(wk, t, |tb| {
            wk.broadcast(label, tb, Opts::default().root(r).algorithm(a))
        })
    })
}

/// `algorithm`: a name `ReduceAlgorithm::parse` accepts (the Java `Algorithm` reduce
/// constants; docs/algorithms.md lists them with their costs).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_reduce<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    root_rank: jint,
    algorithm: JString<'l>,
) {
    in_group(env, w, members, Op::Reduce, label, |env, wk, label| {
        let a = ReduceAlgorithm::parse(&jstr(env, &algorithm)?)?;
        let r = root(root_rank)?;
        in_table(wk, t, |tb| {
            wk.reduce(label, tb, Opts::default().root(r).algorithm(a))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_gather<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    root_rank: jint,
) {
    in_group(env, w, members, Op::Gather, label, |_, wk, label| {
        let r = root(root_rank)?;
        in_table(wk, t, |tb| wk.gather(label, tb, Opts::default().root(r)))
    })
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Worker_scatter<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    root_rank: jint,
    ids: JIntArray<'l>,
    owners: JIntArray<'l>,
) {
    in_group(env, w, members, Op::Scatter, label, |env, wk, label| {
        let p = partitioner(env, &ids, &owners)?;
        let r = root(root_rank)?;
        in_table(wk, t, |tb| {
            wk.scatter(label, tb, &p, Opts::default().root(r))
        })
    })
}

/// `total` > 0: the known number of partitions on all workers together (pipelined per
/// partition); 0: unknown (ring).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_allgather<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    total: jint,
) {
    in_group(env, w, members, Op::Allgather, label, |_, wk, label| {
        let a = allgather_algorithm(total)?;
        in_table(wk, t, |tb| {
            wk.allgather(label, tb, Opts::default().algorithm(a))
        })
    })
}

/// Allgather's algorithm from `total`: > 0 the known number of partitions on all workers
/// together, 0 unknown.
pub(crate) fn allgather_algorithm(total: jint) -> Result<AllgatherAlgorithm, Failure> {
    match usize::try_from(total) {
        Ok(0) => Ok(AllgatherAlgorithm::Auto),
        Ok(n) => Ok(AllgatherAlgorithm::KnownTotal(n)),
        Err(_) => Err(fail(format!("bad total partition count {total}"))),
    }
}

/// `algorithm`: `auto`, `bidirectional-exchange`, `regroup-allgather`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_allreduce<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    algorithm: JString<'l>,
) {
    in_group(env, w, members, Op::Allreduce, label, |env, wk, label| {
        let a = AllreduceAlgorithm::parse(&jstr(env, &algorithm)?)?;
        in_table(wk, t, |tb| {
            wk.allreduce(label, tb, Opts::default().algorithm(a))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_reduceScatter<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    ids: JIntArray<'l>,
    owners: JIntArray<'l>,
) {
    in_group(
        env,
        w,
        members,
        Op::ReduceScatter,
        label,
        |env, wk, label| {
            let p = partitioner(env, &ids, &owners)?;
            in_table(wk, t, |tb| {
                wk.reduce_scatter(label, tb, &p, Opts::default())
            })
        },
    )
}

/// `planned`: the master decides the owners from the actual distribution (`ids`/`owners` are
/// ignored); otherwise the explicit map or modulo.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Worker_regroup<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    planned: jboolean,
    ids: JIntArray<'l>,
    owners: JIntArray<'l>,
) {
    in_group(env, w, members, Op::Regroup, label, |env, wk, label| {
        let p = if planned {
            None
        } else {
            Some(partitioner(env, &ids, &owners)?)
        };
        in_table(wk, t, |tb| wk.regroup(label, tb, p.as_ref()))
    })
}

/// The two tables of push and pull: the local one and the global one (never the same).
pub(crate) fn two_tables(
    wk: &dyn Collectives,
    local: jlong,
    global: jlong,
) -> Result<(Arc<TableEntry>, Arc<TableEntry>), Failure> {
    if local == global {
        return Err(fail("push/pull need two different tables"));
    }
    Ok((own_table(wk, local)?, own_table(wk, global)?))
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Worker_push<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    local: jlong,
    global: jlong,
    ids: JIntArray<'l>,
    owners: JIntArray<'l>,
) {
    in_group(env, w, members, Op::Push, label, |env, wk, label| {
        let p = partitioner(env, &ids, &owners)?;
        let (l, g) = two_tables(wk, local, global)?;
        let (l, mut g) = (l.lock()?, g.lock()?);
        wk.push(label, &l, &mut g, &p)?;
        Ok(())
    })
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Worker_pull<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    local: jlong,
    global: jlong,
    ids: JIntArray<'l>,
    owners: JIntArray<'l>,
) {
    in_group(env, w, members, Op::Pull, label, |env, wk, label| {
        let p = partitioner(env, &ids, &owners)?;
        let (l, g) = two_tables(wk, local, global)?;
        let (mut l, g) = (l.lock()?, g.lock()?);
        wk.pull(label, &mut l, &g, &p)?;
        Ok(())
    })
}

/// `map` null: every table moves to the next worker; otherwise worker r's goes to `map[r]`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_rotate<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    map: JIntArray<'l>,
) {
    in_group(env, w, members, Op::Rotate, label, |env, wk, label| {
        let map = ranks(env, &map)?;
        in_table(wk, t, |tb| wk.rotate(label, tb, map.as_deref()))
    })
}

/// The endpoint that decides where an edge goes: its source or its destination.
fn endpoint(by_source: jboolean) -> harp::data::graph::Endpoint {
    if by_source {
        harp::data::graph::Endpoint::Src
    } else {
        harp::data::graph::Endpoint::Dst
    }
}

fn vertex_partitions(p: jint) -> Result<u32, Failure> {
    u32::try_from(p)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| fail(format!("vertex partitions must be at least 1, got {p}")))
}

/// `harp::graph::regroup_edges`: every edge to the worker holding its source's (or
/// destination's) vertex partition.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Worker_regroupEdges<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    by_source: jboolean,
    partitions: jint,
) {
    in_group(env, w, members, Op::Regroup, label, |_, wk, label| {
        let p = vertex_partitions(partitions)?;
        in_table(wk, t, |tb| {
            harp::graph::regroup_edges(wk, label, tb, endpoint(by_source), p)
        })
    })
}

/// `harp::graph::send_edges_to_vertices`: every edge to the worker holding the vertex
/// partition of its source (or destination) in table `vertices`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_harp_Worker_sendEdgesToVertices<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    by_source: jboolean,
    vertices: jlong,
    partitions: jint,
) {
    in_group(env, w, members, Op::Regroup, label, |_, wk, label| {
        let p = vertex_partitions(partitions)?;
        if t == vertices {
            return Err(fail(
                "the edges and the vertices must be two different tables",
            ));
        }
        let v = own_table(wk, vertices)?;
        let v = v.lock()?;
        in_table(wk, t, |tb| {
            harp::graph::send_edges_to_vertices(wk, label, tb, endpoint(by_source), &v, p)
        })
    })
}

/// `harp::graph::send_messages`: message partitions (i64 vertex keys) to the workers holding
/// their vertices, combined there.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Worker_sendMessages<'l>(
    env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    members: JIntArray<'l>,
    label: JString<'l>,
    t: jlong,
    partitions: jint,
) {
    in_group(env, w, members, Op::Regroup, label, |_, wk, label| {
        // KeyValueTable checks its partition count (≥ 1) when it is made.
        let partitions = u32::try_from(partitions).unwrap_or(0);
        in_table(wk, t, |tb| {
            harp::graph::send_messages(wk, label, tb, partitions)
        })
    })
}
