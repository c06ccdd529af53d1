//! `harp.Table`: tables of partitions whose buffers live in their worker's pool. Java reads
//! and writes a partition through a direct `ByteBuffer` over its bytes (no copy).

use std::sync::Arc;

use harp::data::kv::{KeyType, ValueType};
use harp::{Array, Combiner, DType, Layout, Table};
use jni::objects::{JByteBuffer, JClass, JIntArray, JLongArray, JObject, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::{Env, EnvUnowned};

use crate::convert::{jstr, new_array, new_jstring};
use crate::errors::{call, fail, Failure, Scope};
use crate::handles::{free_table, insert, table_in, worker, Obj, TableEntry};

/// Runs `f` on partition `pid` of table `t`; `None` when the table has no such partition.
fn with_partition<R>(
    scope: &Scope,
    t: jlong,
    pid: jint,
    f: impl FnOnce(&mut Array) -> R,
) -> Result<Option<R>, Failure> {
    let e = table_in(scope, t)?;
    let mut tb = e.lock()?;
    Ok(u32::try_from(pid).ok().and_then(|p| tb.get_mut(p)).map(f))
}

fn view<'l>(env: &mut Env<'l>, a: &mut Array) -> Result<JByteBuffer<'l>, Failure> {
    let len = a.bytes().len();
    java_sized(len as u64)?;
    // Never null, even for an empty partition (pool buffers give an aligned dangling pointer).
    let ptr = a.bytes_mut().as_mut_ptr();
    // SAFETY: the buffer lives as long as the partition stays in its table; the Java side
    // invalidates its views (generation check) whenever the table changes.
    Ok(unsafe { env.new_direct_byte_buffer(ptr, len) }?)
}

/// A Java buffer holds at most `i32::MAX` bytes: a partition larger than that cannot be seen
/// from Java (an error naming both sizes, not the JNI's "call failed").
fn java_sized(bytes: u64) -> Result<(), Failure> {
    if bytes > i32::MAX as u64 {
        return Err(fail(format!(
            "a partition of {bytes} bytes: a Java buffer holds at most {} bytes; split it into \
             several partitions",
            i32::MAX
        )));
    }
    Ok(())
}

/// A new empty table of worker `w` whose buffers come from the worker's pool; `combiner` is a
/// combiner name (`sum`, `min`, `max`, `keep-first`, `reject`, `append`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_open<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    combiner: JString<'l>,
) -> jlong {
    call(&mut env, |env, scope| {
        new_table(w, scope, || Ok(Combiner::parse(&jstr(env, &combiner)?)?))
    })
}

/// Registers a new empty table of worker `w` with the combiner `make` gives (its errors name
/// the worker's rank); its buffers come from the worker's pool.
fn new_table(
    w: jlong,
    scope: &crate::errors::Scope,
    make: impl FnOnce() -> Result<Combiner, Failure>,
) -> Result<jlong, Failure> {
    let we = worker(w)?;
    scope.worker(we.worker.rank());
    let c = make()?;
    Ok(insert(Obj::Table(Arc::new(TableEntry::new(
        we.worker.pool().clone(),
        we.worker.rank(),
        Table::new(c),
    )))))
}

/// A new empty table of worker `w` whose key-value entries are combined by `combiner`, a Java
/// `harp.KvCombiner` named `name` (called back through JNI: see `kv_combiner.rs`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_openWith<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    name: JString<'l>,
    combiner: JObject<'l>,
) -> jlong {
    call(&mut env, |env, scope| {
        new_table(w, scope, || {
            if combiner.is_null() {
                return Err(fail("the combiner is null"));
            }
            let bridge = crate::kv_combiner::JavaKvCombiner::new(
                env.get_java_vm()?,
                env.new_global_ref(&combiner)?,
                jstr(env, &name)?,
                worker(w)?.worker.rank(),
            );
            Ok(Combiner::KeyValue(Arc::new(bridge)))
        })
    })
}

/// A new empty table of worker `w` whose dense partitions are combined by Java code: `bridge`
/// is the `harp.DenseCombinerBridge` around a `harp.DenseCombiner` named `name` (called back
/// through JNI: see `dense_combiner.rs`); `elementwise` lets the engine combine large partitions
/// range by range.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_openDense<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    w: jlong,
    name: JString<'l>,
    bridge: JObject<'l>,
    elementwise: jboolean,
) -> jlong {
    call(&mut env, |env, scope| {
        new_table(w, scope, || {
            if bridge.is_null() {
                return Err(fail("the combiner is null"));
            }
            let c = crate::dense_combiner::JavaDenseCombiner::new(
                env.get_java_vm()?,
                env.new_global_ref(&bridge)?,
                jstr(env, &name)?,
                elementwise,
                worker(w)?.worker.rank(),
            );
            Ok(Combiner::Custom(Arc::new(c)))
        })
    })
}

/// Local aggregation: moves every partition of the tables `others` (handles of the same
/// worker, each once, not `t`) into table `t`, combining equal partition ids with `t`'s
/// combiner, in parallel (`harp::data::aggregate`, a pairwise tree on the engine's threads);
/// the tables of `others` are left empty. Their combiners must be of `t`'s kind. Pending
/// key-value entries are combined first. On a combiner's failure `t` and `others` are left
/// empty and the error names it.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_merge<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    others: JLongArray<'l>,
) {
    call(&mut env, |env, scope| {
        if others.is_null() {
            return Err(fail("the tables to merge are null"));
        }
        let mut handles = vec![0i64; others.len(env)?];
        others.get_region(env, 0, &mut handles)?;
        let into = table_in(scope, t)?;
        let combiner = into.lock()?.combiner().clone();
        let mut seen = vec![t];
        let mut tables = Vec::with_capacity(handles.len() + 1);
        for h in handles {
            if seen.contains(&h) {
                return Err(fail(format!(
                    "table handle {h} is given twice (or is the table merged into)"
                )));
            }
            seen.push(h);
            let e = table_in(scope, h)?;
            if e.rank != into.rank {
                return Err(fail(format!(
                    "a table of worker {} cannot be merged into a table of worker {}",
                    e.rank, into.rank
                )));
            }
            let mut g = e.lock()?;
            if g.combiner().code() != combiner.code() {
                return Err(fail(format!(
                    "a table combined by {} cannot be merged into a table combined by {}",
                    g.combiner().name(),
                    combiner.name()
                )));
            }
            tables.push(std::mem::replace(&mut *g, Table::new(combiner.clone())));
        }
        let mut g = into.lock()?;
        let own = std::mem::replace(&mut *g, Table::new(combiner.clone()));
        tables.insert(0, own);
        // Every table combines with the receiving table's combiner.
        let tables = tables
            .into_iter()
            .map(|mut tb| {
                let mut out = Table::new(combiner.clone());
                for p in tb.take_all() {
                    out.put(p.id, p.data);
                }
                out
            })
            .collect();
        *g = harp::data::aggregate(tables)?;
        Ok(())
    })
}

/// The bytes of all partitions of table `t` (what a collective that moves every partition
/// sends of it), pending key-value entries combined first.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_bytes<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
) -> jlong {
    call(&mut env, |_, scope| {
        Ok(table_in(scope, t)?.lock()?.bytes() as jlong)
    })
}

/// Adds the first `len` bytes of the direct buffer `batch` to table `t` as key-value entries of
/// `key` → `value` types (names), spread over `partitions` partition ids by the engine's key
/// hash: entries in the partition encoding, in any order, keys possibly repeated
/// (`KvTable::add_encoded`). Equal keys are combined with the table's combiner, in the batch
/// and with the partitions the table already holds. A malformed batch adds nothing. The
/// entries wait, combined, until the table is next used (`TableEntry::add_entries`, `lock`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_addEntries<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    key: JString<'l>,
    value: JString<'l>,
    partitions: jint,
    batch: JByteBuffer<'l>,
    len: jint,
) {
    call(&mut env, |env, scope| {
        let kt = KeyType::parse(&jstr(env, &key)?)?;
        let vt = ValueType::parse(&jstr(env, &value)?)?;
        let parts = u32::try_from(partitions)
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| fail(format!("partitions must be at least 1, got {partitions}")))?;
        let bytes = direct_bytes(env, &batch, len)?;
        table_in(scope, t)?.add_entries(kt, vt, parts, bytes)?;
        Ok(())
    })
}

/// Appends the first `len` bytes of the direct buffer `batch`, edge records (`src`, `dst` i64
/// and, when `weighted`, a f64 weight, little-endian: docs/wire-protocol.md), to edge partition
/// `pid` of table `t` (created if absent; combined with the table's combiner, `append`, if
/// present). A batch that is not whole records adds nothing.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_addEdges<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    weighted: jboolean,
    pid: jint,
    batch: JByteBuffer<'l>,
    len: jint,
) {
    call(&mut env, |env, scope| {
        let pid = u32::try_from(pid)
            .map_err(|_| fail(format!("partition ids must be >= 0, got {pid}")))?;
        let bytes = direct_bytes(env, &batch, len)?;
        let e = table_in(scope, t)?;
        let edges = Array::from_layout(Layout::Edges { weighted }, e.pool.copy_of(bytes))?;
        e.lock()?.add(pid, edges)?;
        Ok(())
    })
}

/// The first `len` bytes of the direct buffer `batch`, borrowed for the duration of the call.
pub(crate) fn direct_bytes<'b>(
    env: &Env<'_>,
    batch: &'b JByteBuffer<'_>,
    len: jint,
) -> Result<&'b [u8], Failure> {
    let cap = env.get_direct_buffer_capacity(batch)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= cap)
        .ok_or_else(|| {
            fail(format!(
                "batch length {len} outside the buffer ({cap} bytes)"
            ))
        })?;
    let ptr = env.get_direct_buffer_address(batch)?;
    // SAFETY: `batch` is a live direct buffer of `cap` >= `len` bytes, and the slice cannot
    // outlive the borrow of the buffer's local reference (this native call).
    Ok(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
}

/// The layout of partition `pid`: its element type's name for a dense array (`f64`, …),
/// `kv KEY VALUE` for a key-value partition (`kv str i64`), `edges` or `edges weighted` for
/// an edge partition, or null when absent.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_layout<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    pid: jint,
) -> JString<'l> {
    call(&mut env, |env, scope| {
        match with_partition(scope, t, pid, |a| a.layout())? {
            Some(Layout::Dense { dtype }) => new_jstring(env, dtype.name()),
            Some(Layout::KeyValue { key, value }) => {
                new_jstring(env, &format!("kv {} {}", key.name(), value.name()))
            }
            Some(Layout::Edges { weighted }) => {
                new_jstring(env, if weighted { "edges weighted" } else { "edges" })
            }
            None => Ok(JString::default()),
        }
    })
}

/// Creates (or replaces) partition `pid` with `length` zeroed elements of element type `dtype`
/// (a name: `f64`, …) and returns a direct buffer over its bytes (native byte order).
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_create<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    pid: jint,
    dtype: JString<'l>,
    length: jint,
) -> JByteBuffer<'l> {
    call(&mut env, |env, scope| {
        let dt = DType::parse(&jstr(env, &dtype)?)?;
        let e = table_in(scope, t)?;
        let pid = u32::try_from(pid)
            .map_err(|_| fail(format!("partition ids must be >= 0, got {pid}")))?;
        let n = usize::try_from(length).map_err(|_| fail(format!("bad length {length}")))?;
        // Before anything is allocated or put in the table.
        java_sized(n as u64 * dt.size() as u64)?;
        let mut tb = e.lock()?;
        tb.put(pid, Array::zeros(&e.pool, dt, n));
        let a = tb.get_mut(pid).expect("just inserted");
        view(env, a)
    })
}

/// A direct buffer over partition `pid`, or null when the table has no such partition.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_get<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    pid: jint,
) -> JByteBuffer<'l> {
    call(&mut env, |env, scope| {
        with_partition(scope, t, pid, |a| view(env, a))?
            .unwrap_or_else(|| Ok(JByteBuffer::default()))
    })
}

/// Partition ids in ascending order.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_ids<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
) -> JIntArray<'l> {
    call(&mut env, |env, scope| {
        let ids: Vec<i32> = table_in(scope, t)?
            .lock()?
            .ids()
            .into_iter()
            .map(|i| i as i32)
            .collect();
        new_array(env, &ids)
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_remove<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
    pid: jint,
) -> jboolean {
    call(&mut env, |_, scope| {
        let e = table_in(scope, t)?;
        let mut tb = e.lock()?;
        Ok(u32::try_from(pid).ok().and_then(|p| tb.remove(p)).is_some())
    })
}

#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_clear<'l>(
    mut env: EnvUnowned<'l>,
    _c: JClass<'l>,
    t: jlong,
) {
    call(&mut env, |_, scope| {
        table_in(scope, t)?.lock()?.clear();
        Ok(())
    })
}

/// Frees a table (its buffers go back to the pool). Freeing it again is a no-op.
#[unsafe(no_mangle)]
pub extern "system" fn Java_harp_Table_free<'l>(mut env: EnvUnowned<'l>, _c: JClass<'l>, t: jlong) {
    call(&mut env, |_, _| free_table(t))
}
