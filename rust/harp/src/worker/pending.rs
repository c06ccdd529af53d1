//! Non-blocking collectives: a call such as [`super::Collectives::rotate_start`] checks its
//! arguments, takes the operation's sequence number at once and returns a [`Pending`] handle;
//! the operation itself runs on the worker's *progress thread* (`harp-progress-R`, started
//! with the first non-blocking call) while the caller computes. The rules (docs/java-guide.md,
//! "Non-blocking collectives"):
//!
//! * Several may be in flight. They run one at a time, in the order they were started, on the
//!   progress thread, so they complete in start order: a handle that is complete implies that
//!   every operation started before it is complete. Every worker must start them in the same
//!   order, as with blocking calls: a start is the blocking call, made at that point of the
//!   program by a thread of its own.
//! * A blocking call (or [`Worker::close`]) first waits for every operation in flight.
//! * The failure rules are the blocking calls': a failed operation poisons the worker and tells
//!   every peer why; every operation after it fails with that first error (which names the dead
//!   or silent peer), so every pending handle fails within the timeout.
//! * Dropping a handle waits for its operation and discards the result: the operation has run
//!   (or failed) when the drop returns, so no peer is left waiting for this worker.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::collectives::{OpBody, OpFuture};
use super::group::GroupSeq;
use super::run::Parts;
use super::Worker;
use crate::collective::Ctx;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::{Driver, Members, Transport};
use crate::wire::Op;

/// The number of operations started and not yet complete, with a wait for none.
#[derive(Default)]
pub(super) struct Inflight {
    n: Mutex<usize>,
    zero: Condvar,
}

impl Inflight {
    fn add(&self) {
        *self.n.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }
    fn done(&self) {
        let mut n = self.n.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        if *n == 0 {
            self.zero.notify_all();
        }
    }
    /// Waits until no operation is in flight (each ends within its deadline).
    pub(super) fn drain(&self) {
        let mut n = self.n.lock().unwrap_or_else(|e| e.into_inner());
        while *n > 0 {
            n = self.zero.wait(n).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One started operation, as the progress thread runs it.
type Work = Box<dyn FnOnce(&Parts<'_>) + Send>;

/// What the progress thread holds of its worker (shared, so the worker may move).
struct Shared {
    rank: usize,
    transport: Arc<Transport>,
    driver: Arc<Driver>,
    pool: Pool,
    cfg: Config,
    poisoned: Arc<Mutex<Option<String>>>,
    groups: Arc<Mutex<HashMap<u64, GroupSeq>>>,
    busy: Arc<AtomicBool>,
    inflight: Arc<Inflight>,
}

/// A worker's progress thread and its queue.
pub(super) struct Progress {
    tx: mpsc::Sender<Work>,
    thread: JoinHandle<()>,
}

impl Progress {
    /// Ends the thread once it has run every queued operation.
    pub(super) fn stop(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

fn progress_loop(sh: Shared, rx: mpsc::Receiver<Work>) {
    let parts = Parts {
        rank: sh.rank,
        transport: &sh.transport,
        driver: &sh.driver,
        pool: &sh.pool,
        cfg: &sh.cfg,
        poisoned: &sh.poisoned,
        groups: &sh.groups,
    };
    for work in rx {
        // Claimed as a blocking operation claims it: a blocking call waits for the operations
        // in flight before it claims, so only `watch_peers` (for a moment) can hold it here.
        while sh
            .busy
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        // A panic inside an operation (a bug) fails the worker instead of leaving the handles
        // and the blocking calls behind them waiting.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&parts))).is_err() {
            parts.fail(&format!(
                "rank {}: an operation started without blocking panicked",
                sh.rank
            ));
        }
        sh.busy.store(false, Ordering::SeqCst);
        sh.inflight.done();
    }
}

/// The handle of an operation started without blocking (`Collectives::*_start`): [`wait`]
/// for its result, [`test`] whether it is complete. Operations complete in the order they were
/// started. Dropping the handle waits for the operation and discards its result.
///
/// [`wait`]: Pending::wait
/// [`test`]: Pending::test
#[must_use = "an operation's result is only seen through its handle (dropping it waits and \
              discards the result)"]
pub struct Pending<T> {
    rx: Option<mpsc::Receiver<Result<T>>>,
    done: Option<Result<T>>,
    /// `rank R: op #S 'label'`, for the error of a worker that went away.
    what: String,
}

impl<T> Pending<T> {
    /// Waits until the operation is complete and returns its result: the tables it took,
    /// changed as the blocking call changes them, or the error the blocking call would return.
    pub fn wait(mut self) -> Result<T> {
        self.finish();
        self.done.take().expect("finished")
    }

    /// Whether the operation is complete (then [`Pending::wait`] returns at once). Never
    /// blocks.
    pub fn test(&mut self) -> bool {
        if self.done.is_some() {
            return true;
        }
        let Some(rx) = &self.rx else {
            return true;
        };
        match rx.try_recv() {
            Ok(r) => self.done = Some(r),
            Err(mpsc::TryRecvError::Empty) => return false,
            Err(mpsc::TryRecvError::Disconnected) => self.done = Some(Err(self.gone())),
        }
        self.rx = None;
        true
    }

    /// The operation's place: `rank R: rotate #S 'label'`.
    pub fn operation(&self) -> &str {
        &self.what
    }

    fn finish(&mut self) {
        if let Some(rx) = self.rx.take() {
            self.done = Some(rx.recv().unwrap_or_else(|_| Err(self.gone())));
        }
    }

    fn gone(&self) -> Error {
        Error::config(format!(
            "{}: the worker stopped before the operation ran (closed, aborted or dropped)",
            self.what
        ))
    }
}

impl<T> Drop for Pending<T> {
    /// Waits for the operation and discards its result.
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            let _ = rx.recv();
        }
    }
}

/// Where a started operation runs: its scope's members (`None`: the whole job), topology and
/// network model, owned (the progress thread outlives the caller's borrows).
pub struct Launch {
    pub(super) members: Option<Members>,
    pub(super) topo: Topology,
    pub(super) net: Option<Arc<NetModel>>,
}

impl Worker {
    /// Starts `f` on `state` as the next operation of the scope whose counter is `seq`; the
    /// handle gives the state back when the operation is complete.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch<T, F>(
        &self,
        seq: &AtomicU64,
        scope: Launch,
        op: Op,
        algo: u8,
        label: &str,
        state: T,
        f: F,
    ) -> Result<Pending<T>>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(Ctx<'a>, &'a mut T) -> OpFuture<'a> + Send + 'static,
    {
        self.check_call(op, label)?;
        let mut progress = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        if progress.is_none() {
            *progress = Some(self.spawn_progress()?);
        }
        let queue = &progress.as_ref().expect("just started").tx;
        let seq = seq.fetch_add(1, Ordering::SeqCst) + 1;
        let label = label.to_string();
        let what = format!("rank {}: {} #{seq} '{label}'", self.rank, op.name());
        let (tx, rx) = mpsc::channel();
        let work: Work = Box::new(move |p: &Parts<'_>| {
            let Launch { members, topo, net } = scope;
            let mut state = state;
            let res = p.check_usable().and_then(|()| {
                let st = &mut state;
                let body: OpBody<'_> = Box::new(move |cx| f(cx, st));
                p.execute(members, &topo, net, seq, op, algo, &label, body)
            });
            let _ = tx.send(res.map(|()| state));
        });
        self.inflight.add();
        if queue.send(work).is_err() {
            self.inflight.done();
            return Err(Error::config(format!(
                "{what}: the worker's progress thread has stopped"
            )));
        }
        Ok(Pending {
            rx: Some(rx),
            done: None,
            what,
        })
    }

    fn spawn_progress(&self) -> Result<Progress> {
        let sh = Shared {
            rank: self.rank,
            transport: self.transport.clone(),
            driver: self.driver.clone(),
            pool: self.pool.clone(),
            cfg: self.cfg.clone(),
            poisoned: self.poisoned.clone(),
            groups: self.groups.clone(),
            busy: self.busy.clone(),
            inflight: self.inflight.clone(),
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("harp-progress-{}", self.rank))
            .spawn(move || progress_loop(sh, rx))
            .map_err(|e| Error::io("cannot start the worker's progress thread", e))?;
        Ok(Progress { tx, thread })
    }

    /// Waits for every operation in flight and ends the progress thread.
    pub(super) fn stop_progress(&self) {
        let p = self
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(p) = p {
            p.stop();
        }
    }
}
