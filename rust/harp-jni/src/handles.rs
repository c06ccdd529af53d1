//! Native objects seen from Java: `long` handles into one process-wide registry. Ids start at
//! 1 and are never reused, so a handle below the next id that is no longer registered was
//! closed (closing it again is a no-op), and any other unknown handle was never valid; neither
//! can crash the JVM.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use harp::data::kv::{KeyType, KvTable, ValueType};
use harp::data::Layout;
use harp::{Listener, Pool, Table, Worker};

use crate::errors::{closed, Failure};

/// A started worker and the log tag of the task that owns it.
pub struct WorkerEntry {
    pub worker: Worker,
    pub tag: String,
    /// An abort asked for while a collective ran on another thread: that collective's call
    /// carries it out when it returns (`Worker.abort`).
    pub abort: Mutex<Option<String>>,
}

/// A table and the pool its buffers come from (its worker's).
pub struct TableEntry {
    pub pool: Pool,
    /// The rank of the worker whose table it is, for error messages.
    pub rank: usize,
    table: Mutex<Table>,
    /// Key-value entries added (`Table.addEntries`) since the table was last used, combined
    /// on insert: [`TableEntry::lock`] merges them into the table, so that many batches cost
    /// one merge instead of one each. Locked after `table`, never before.
    pending: Mutex<Option<KvTable>>,
}

impl TableEntry {
    pub fn new(pool: Pool, rank: usize, table: Table) -> TableEntry {
        TableEntry {
            pool,
            rank,
            table: Mutex::new(table),
            pending: Mutex::new(None),
        }
    }

    /// The table, locked for the duration of a call, with the pending entries merged in (a
    /// poisoned lock is still usable: a failed call leaves the table valid). A merge that
    /// fails (a partition id holding another layout) is that call's error; the pending
    /// entries are then dropped, as a failed batch's were.
    pub fn lock(&self) -> harp::Result<TableGuard<'_>> {
        let mut tb = self.table_lock()?;
        self.merge_pending(&mut tb, &mut self.pending_lock())?;
        Ok(tb)
    }

    /// Adds a batch of encoded key-value entries (`KvTable::add_encoded`) to the pending
    /// entries: `key` → `value` over `partitions` ids. Pending entries of another key type,
    /// value type or number of partitions are merged into the table first.
    pub fn add_entries(
        &self,
        key: KeyType,
        value: ValueType,
        partitions: u32,
        batch: &[u8],
    ) -> harp::Result<()> {
        let layout = Layout::KeyValue { key, value };
        let mut tb = self.table_lock()?;
        let mut pending = self.pending_lock();
        let fits = |kv: &&mut KvTable| kv.layout() == layout && kv.partitions() == partitions;
        if let Some(kv) = pending.as_mut().filter(fits) {
            kv.add_encoded(batch)?;
            return Ok(());
        }
        self.merge_pending(&mut tb, &mut pending)?;
        let mut kv = KvTable::new(key, value, tb.combiner().clone(), partitions)?;
        kv.add_encoded(batch)?;
        *pending = Some(kv);
        Ok(())
    }

    /// Merges the pending entries, if any, into `tb` (they are gone afterwards, merged or not).
    fn merge_pending(&self, tb: &mut Table, pending: &mut Option<KvTable>) -> harp::Result<()> {
        match pending.take() {
            Some(kv) => tb.merge(kv.into_table(&self.pool)?),
            None => Ok(()),
        }
    }

    /// The table's lock. A thread that holds it already (a Java key-value combiner, called
    /// back while its table combines, that uses that table) gets an error instead of waiting
    /// for itself forever.
    fn table_lock(&self) -> harp::Result<TableGuard<'_>> {
        let key = self as *const TableEntry as usize;
        if HELD.with(|h| h.borrow().contains(&key)) {
            return Err(harp::Error::config(
                "the table is in use by this thread: a key-value combiner called while the table \
                 combines cannot use that table",
            ));
        }
        let guard = self.table.lock().unwrap_or_else(|e| e.into_inner());
        HELD.with(|h| h.borrow_mut().push(key));
        Ok(TableGuard { guard, key })
    }

    fn pending_lock(&self) -> MutexGuard<'_, Option<KvTable>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

thread_local! {
    /// The tables whose lock this thread holds (at most a few: push and pull hold two).
    static HELD: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A locked table ([`TableEntry::lock`]); unlocking forgets that this thread holds it.
pub struct TableGuard<'a> {
    guard: MutexGuard<'a, Table>,
    key: usize,
}

impl std::ops::Deref for TableGuard<'_> {
    type Target = Table;
    fn deref(&self) -> &Table {
        &self.guard
    }
}

impl std::ops::DerefMut for TableGuard<'_> {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.guard
    }
}

impl Drop for TableGuard<'_> {
    fn drop(&mut self) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&k| k == self.key) {
                h.swap_remove(i);
            }
        });
    }
}

pub enum Obj {
    /// Consumed (taken out) by `start`.
    Listener(Listener),
    Worker(Arc<WorkerEntry>),
    Table(Arc<TableEntry>),
}

impl Obj {
    fn what(&self) -> &'static str {
        match self {
            Obj::Listener(_) => "listener",
            Obj::Worker(_) => "worker",
            Obj::Table(_) => "table",
        }
    }
}

static NEXT: AtomicI64 = AtomicI64::new(1);

fn registry() -> MutexGuard<'static, HashMap<i64, Obj>> {
    static R: OnceLock<Mutex<HashMap<i64, Obj>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Registers `o` under a fresh handle.
pub fn insert(o: Obj) -> i64 {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    registry().insert(id, o);
    id
}

fn was_issued(h: i64) -> bool {
    h > 0 && h < NEXT.load(Ordering::Relaxed)
}

/// The error for handle `h` that is not a live `what`.
fn unusable(what: &str, h: i64, found: Option<&Obj>) -> Failure {
    match found {
        Some(o) => closed(format!("handle {h} is a {}, not a {what}", o.what())),
        None if was_issued(h) => closed(format!("{what} handle {h} is closed")),
        None => closed(format!("{what} handle {h} was never valid")),
    }
}

pub fn worker(h: i64) -> Result<Arc<WorkerEntry>, Failure> {
    match registry().get(&h) {
        Some(Obj::Worker(w)) => Ok(w.clone()),
        other => Err(unusable("worker", h, other)),
    }
}

pub fn table(h: i64) -> Result<Arc<TableEntry>, Failure> {
    match registry().get(&h) {
        Some(Obj::Table(t)) => Ok(t.clone()),
        other => Err(unusable("table", h, other)),
    }
}

/// [`table`] for a call on the table itself: its failures name the table's worker.
pub fn table_in(scope: &crate::errors::Scope, h: i64) -> Result<Arc<TableEntry>, Failure> {
    let t = table(h)?;
    scope.worker(t.rank);
    Ok(t)
}

pub fn listener_port(h: i64) -> Result<u16, Failure> {
    match registry().get(&h) {
        Some(Obj::Listener(l)) => Ok(l.addr.port()),
        other => Err(unusable("listener", h, other)),
    }
}

/// Takes listener `h` out of the registry (a worker consumes it).
pub fn take_listener(h: i64) -> Result<Listener, Failure> {
    let mut r = registry();
    match r.remove(&h) {
        Some(Obj::Listener(l)) => Ok(l),
        Some(other) => {
            let e = unusable("listener", h, Some(&other));
            r.insert(h, other);
            Err(e)
        }
        None => Err(unusable("listener", h, None)),
    }
}

/// Takes worker `h` out of the registry; `None` when it was closed already.
pub fn take_worker(h: i64) -> Result<Option<Arc<WorkerEntry>>, Failure> {
    let mut r = registry();
    match r.remove(&h) {
        Some(Obj::Worker(w)) => Ok(Some(w)),
        Some(other) => {
            let e = unusable("worker", h, Some(&other));
            r.insert(h, other);
            Err(e)
        }
        None if was_issued(h) => Ok(None),
        None => Err(unusable("worker", h, None)),
    }
}

/// Puts back a worker taken by [`take_worker`] (it could not be closed yet).
pub fn restore_worker(h: i64, w: Arc<WorkerEntry>) {
    registry().insert(h, Obj::Worker(w));
}

/// Removes table `h` (its buffers go back to the pool once no call uses it); a table closed
/// already is a no-op.
pub fn free_table(h: i64) -> Result<(), Failure> {
    let mut r = registry();
    match r.remove(&h) {
        Some(Obj::Table(_)) => Ok(()),
        Some(other) => {
            let e = unusable("table", h, Some(&other));
            r.insert(h, other);
            Err(e)
        }
        None if was_issued(h) => Ok(()),
        None => Err(unusable("table", h, None)),
    }
}
