//! A running worker: its rank, its connections, its memory pool and the synchronous API that the
//! command-line tool and the JNI layer call. Every collective call gets the next operation
//! sequence number automatically (all workers must call collectives in the same order); the
//! label is only for logs and errors.
//!
//! After a failed collective the worker is *poisoned*: it tells every peer why (so their
//! errors name the original cause), closes its connections, and refuses further collectives.
//!
//! The files: `lifecycle.rs` (start, in-process jobs, watching the peers, close and abort),
//! `run.rs` (the operation runner: sequence numbers, refusal, poisoning), `group.rs`
//! ([`Group`]), `drift.rs` (the network model and how far measured times drift from it) and
//! `collectives.rs` (the [`Collectives`] trait: every collective, written once for both, and
//! its non-blocking form) and `pending.rs` (the non-blocking calls: their [`Pending`] handles
//! and the progress thread that runs them in start order).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
pub use tokio::runtime::{Handle, Runtime};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::{self, Driver, Transport};

mod agree;
mod collectives;
mod drift;
mod group;
mod lifecycle;
mod pending;
mod run;

pub use agree::{agree, agree_on, same_everywhere};
pub(crate) use collectives::body;
pub use collectives::{Algorithm, Collectives, OpBody, OpFuture, Opts, Rooted};
use drift::Drift;
pub use drift::{DRIFT_BACKOFF_MAX, DRIFT_LIMIT, DRIFT_WINDOW};
pub use group::Group;
use group::GroupSeq;
pub use pending::Pending;

/// A multi-threaded tokio runtime for the transport (one per process is enough; workers only
/// hold handles to it).
pub fn runtime(threads: usize) -> Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name("harp-io")
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the tokio runtime", e))
}

/// A bound, not yet connected, listening socket.
pub struct Listener {
    inner: TcpListener,
    pub addr: SocketAddr,
}

impl Listener {
    /// Binds `addr` (port 0 picks a free port).
    pub fn bind(rt: &Handle, addr: SocketAddr, cfg: &Config) -> Result<Listener> {
        let _guard = rt.enter();
        let inner = transport::listen(addr, cfg)?;
        let addr = inner
            .local_addr()
            .map_err(|e| Error::io("local address", e))?;
        Ok(Listener { inner, addr })
    }
}

pub struct Worker {
    rank: usize,
    size: usize,
    rt: Handle,
    cfg: Config,
    topo: Topology,
    /// The measured network model the NP-aware algorithms read (`set_net_model`).
    net: Mutex<Option<Arc<NetModel>>>,
    /// Predicted and measured seconds of the latest operations under the model.
    drift: Mutex<Drift>,
    pool: Pool,
    transport: Arc<Transport>,
    seq: AtomicU64,
    /// Every group this worker has created: its members and its operation counter.
    groups: Arc<Mutex<HashMap<u64, GroupSeq>>>,
    /// Set while an operation runs: a worker runs one at a time (a second thread's call is
    /// refused instead of sending frames that its peers would take for the first's).
    busy: Arc<AtomicBool>,
    poisoned: Arc<Mutex<Option<String>>>,
    /// The operations started without blocking and not yet complete.
    inflight: Arc<pending::Inflight>,
    /// The thread that runs them, started with the first (`pending.rs`).
    progress: Mutex<Option<pending::Progress>>,
    /// Counters and queued control messages of the event lane (driven by `crate::events`).
    pub(crate) events: crate::transport::event_state::State,
    /// Set by [`Worker::close`] and [`Worker::abort`]; a worker dropped without either aborts.
    finished: bool,
    /// What runs this worker's operations and I/O (`Config::io_driver`); dropped after the
    /// transport.
    driver: Arc<Driver>,
    /// The runtime of in-process workers, kept alive by the workers that share it (dropped
    /// last).
    _runtime: Option<Arc<Runtime>>,
}

impl Worker {
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn size(&self) -> usize {
        self.size
    }
    pub fn is_master(&self) -> bool {
        self.rank == 0
    }
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// The runtime given at start (storage and other blocking I/O use it).
    pub fn runtime(&self) -> &Handle {
        &self.rt
    }
    /// Runs `f` to completion on this worker's I/O driver (the calling thread drives it with
    /// `io_driver = caller`).
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.driver.block_on(f)
    }
    /// The job's hosts and racks, in rank order.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }

    /// How many connections this worker has opened to its peers so far: connections open on
    /// first use, so a job whose workers talk to few peers holds few (`None` for the workers
    /// of [`Worker::in_process`], which have none).
    pub fn connections(&self) -> Option<usize> {
        self.transport.connections()
    }
}

/// Runs `f(worker)` on `n` in-process workers, one thread each; results in rank order.
#[cfg(test)]
pub(crate) fn on_workers<T: Send + 'static>(
    n: usize,
    f: impl Fn(&Worker) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = std::sync::Arc::new(f);
    let hs: Vec<_> = Worker::in_process(n, Config::default())
        .unwrap()
        .into_iter()
        .map(|w| {
            let f = f.clone();
            std::thread::spawn(move || {
                let r = f(&w);
                w.close();
                r
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}
