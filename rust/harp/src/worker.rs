//! A running worker: its rank, its connections, its memory pool and the synchronous API that the
//! command-line tool and the JNI layer call. Every collective call gets the next operation
//! sequence number automatically (all workers must call collectives in the same order); the
//! label is only for logs and errors.
//!
//! After a failed collective the worker is *poisoned*: it tells every peer why (so their
//! errors name the original cause), closes its connections, and refuses further collectives.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::net::TcpListener;
pub use tokio::runtime::{Handle, Runtime};

use crate::collective::{
    self, AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, Ctx, ReduceAlgorithm,
    ReduceScatterAlgorithm,
};
use crate::config::Config;
use crate::data::{Partitioner, Table};
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::{self, Transport};
use crate::wire::Op;

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
    pool: Pool,
    transport: Transport,
    seq: AtomicU64,
    poisoned: Mutex<Option<String>>,
    /// Counters and queued control messages of the event lane (`crate::events`).
    pub(crate) events: crate::events::State,
    /// Set by [`Worker::close`] and [`Worker::abort`]; a worker dropped without either aborts.
    finished: bool,
    /// The runtime of in-process workers, kept alive by the workers that share it (dropped
    /// last).
    _runtime: Option<Arc<Runtime>>,
}

impl Worker {
    /// Connects to every peer of `topo` (authenticated with `secret`), runs the start-up
    /// handshake and returns the ready worker.
    pub fn start(
        rt: Handle,
        cfg: Config,
        topo: Topology,
        rank: usize,
        job: &str,
        secret: &[u8],
        listener: Listener,
    ) -> Result<Worker> {
        if secret.is_empty() {
            return Err(Error::config("the job secret must not be empty"));
        }
        let addrs = topo.addrs()?;
        crate::collective::tags::check_workers(addrs.len())?;
        let pool = Pool::new(cfg.pool);
        let t0 = Instant::now();
        let transport = rt.block_on(Transport::connect(
            &cfg,
            &addrs,
            rank,
            transport::job_id(job),
            secret,
            listener.inner,
            pool.clone(),
        ))?;
        tracing::info!(
            rank,
            workers = addrs.len(),
            secs = t0.elapsed().as_secs_f64(),
            "worker connected and initialised"
        );
        Ok(Worker {
            rank,
            size: addrs.len(),
            rt,
            cfg,
            topo,
            net: Mutex::new(None),
            pool,
            transport,
            seq: AtomicU64::new(0),
            poisoned: Mutex::new(None),
            events: Default::default(),
            finished: false,
            _runtime: None,
        })
    }

    /// `n` workers of one job connected in memory, for tests and for running every worker of a
    /// job as a thread of one process. Move each worker to its own thread and call the same
    /// collectives in the same order, exactly as with [`Worker::start`]; collectives, timeouts
    /// and failures behave as over TCP (a worker that aborts, or is dropped without closing, is
    /// reported gone by every peer with the reason). The workers share a tokio runtime of two
    /// I/O threads, which lives until the last of them is dropped (drop them outside async
    /// code).
    pub fn in_process(n: usize, cfg: Config) -> Result<Vec<Worker>> {
        if n == 0 {
            return Err(Error::config("an in-process job needs at least one worker"));
        }
        crate::collective::tags::check_workers(n)?;
        let rt = Arc::new(runtime(2)?);
        let job = transport::job_id("in-process");
        let pools: Vec<Pool> = (0..n).map(|_| Pool::new(cfg.pool)).collect();
        let transports = {
            let _guard = rt.enter();
            Transport::in_process(job, cfg.op_timeout, &pools)
        };
        let topo = Topology::flat((0..n).map(|r| format!("in-process:{r}")).collect());
        Ok(transports
            .into_iter()
            .zip(pools)
            .enumerate()
            .map(|(rank, (transport, pool))| Worker {
                rank,
                size: n,
                rt: rt.handle().clone(),
                cfg: cfg.clone(),
                topo: topo.clone(),
                net: Mutex::new(None),
                pool,
                transport,
                seq: AtomicU64::new(0),
                poisoned: Mutex::new(None),
                events: Default::default(),
                finished: false,
                _runtime: Some(rt.clone()),
            })
            .collect())
    }

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
    pub fn runtime(&self) -> &Handle {
        &self.rt
    }

    /// The network model the NP-aware algorithms use, if any.
    pub fn net_model(&self) -> Option<Arc<NetModel>> {
        self.net.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sets (or clears) the network model. Every worker of the job must hold the same model
    /// (it decides algorithms and trees that all of them follow); measuring it collectively or
    /// loading the same file on every worker gives that. A model for another number of
    /// workers is refused.
    pub fn set_net_model(&self, model: Option<NetModel>) -> Result<()> {
        if let Some(m) = &model {
            if m.workers() != self.size {
                return Err(Error::config(format!(
                    "net model of {} workers for a job of {}",
                    m.workers(),
                    self.size
                )));
            }
        }
        *self.net.lock().unwrap_or_else(|e| e.into_inner()) = model.map(Arc::new);
        Ok(())
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Fails if an earlier operation failed (the worker is poisoned).
    pub(crate) fn check_usable(&self) -> Result<()> {
        match self
            .poisoned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            Some(first) => Err(Error::Poisoned {
                rank: self.rank,
                first,
            }),
            None => Ok(()),
        }
    }

    /// After a failed operation: poisons the worker and tells every peer why (`msg`).
    pub(crate) fn fail(&self, msg: &str) {
        tracing::debug!("{msg}");
        *self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg.to_string());
        self.rt.block_on(self.transport.abort(msg));
    }

    fn op<'a, T, Fut>(
        &'a self,
        op: Op,
        algo: u8,
        label: &str,
        f: impl FnOnce(Ctx<'a>) -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        self.check_usable()?;
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let cx = Ctx {
            ep: self.transport.endpoint(op, algo, seq, label),
            pool: &self.pool,
            cfg: &self.cfg,
            topo: &self.topo,
            net: self.net_model(),
        };
        let t0 = Instant::now();
        let res = self.rt.block_on(f(cx));
        match &res {
            Ok(_) => tracing::debug!(
                rank = self.rank,
                op = op.name(),
                seq,
                label,
                secs = t0.elapsed().as_secs_f64(),
                "done"
            ),
            Err(e) => self.fail(&e.to_string()),
        }
        res
    }

    /// Waits until every worker has called `barrier`.
    pub fn barrier(&self, label: &str) -> Result<()> {
        self.op(Op::Barrier, 0, label, |cx| async move {
            collective::barrier::dissemination(&cx).await
        })
    }

    /// Every worker's table becomes a copy of `root`'s.
    pub fn broadcast(
        &self,
        label: &str,
        table: &mut Table,
        root: usize,
        algo: BroadcastAlgorithm,
    ) -> Result<()> {
        self.op(Op::Broadcast, algo.code(), label, |cx| async move {
            collective::broadcast::broadcast(&cx, table, root, algo).await
        })
    }

    /// `root`'s table becomes the combination of all tables; the others are emptied.
    pub fn reduce(
        &self,
        label: &str,
        table: &mut Table,
        root: usize,
        algo: ReduceAlgorithm,
    ) -> Result<()> {
        self.op(Op::Reduce, algo.code(), label, |cx| async move {
            collective::rooted::reduce(&cx, table, root, algo).await
        })
    }

    /// `root`'s table becomes the union of all tables; the others are unchanged.
    pub fn gather(&self, label: &str, table: &mut Table, root: usize) -> Result<()> {
        self.op(Op::Gather, 0, label, |cx| async move {
            collective::rooted::gather(&cx, table, root).await
        })
    }

    /// `root`'s partitions are spread to their owners under `part`.
    pub fn scatter(
        &self,
        label: &str,
        table: &mut Table,
        root: usize,
        part: &Partitioner,
    ) -> Result<()> {
        self.op(Op::Scatter, 0, label, |cx| async move {
            collective::rooted::scatter(&cx, table, root, part).await
        })
    }

    /// Every table becomes the union of all tables.
    pub fn allgather(
        &self,
        label: &str,
        table: &mut Table,
        algo: AllgatherAlgorithm,
    ) -> Result<()> {
        self.op(Op::Allgather, algo.code(), label, |cx| async move {
            collective::allgather::allgather(&cx, table, algo).await
        })
    }

    /// Every table becomes the combination of all tables (bit-identical everywhere).
    pub fn allreduce(
        &self,
        label: &str,
        table: &mut Table,
        algo: AllreduceAlgorithm,
    ) -> Result<()> {
        self.op(Op::Allreduce, algo.code(), label, |cx| async move {
            match algo {
                AllreduceAlgorithm::Auto => collective::allreduce::auto(&cx, table).await,
                AllreduceAlgorithm::RegroupAllgather => {
                    collective::allreduce::regroup_allgather(&cx, table).await
                }
                AllreduceAlgorithm::BidirectionalExchange => {
                    collective::allreduce::bidirectional_exchange(&cx, table).await
                }
            }
        })
    }

    /// Each worker ends with the combined partitions it owns under `part`.
    pub fn reduce_scatter(&self, label: &str, table: &mut Table, part: &Partitioner) -> Result<()> {
        self.reduce_scatter_with(label, table, part, ReduceScatterAlgorithm::Auto)
    }

    /// [`Worker::reduce_scatter`] with a chosen algorithm.
    pub fn reduce_scatter_with(
        &self,
        label: &str,
        table: &mut Table,
        part: &Partitioner,
        algo: ReduceScatterAlgorithm,
    ) -> Result<()> {
        self.op(Op::ReduceScatter, algo.code(), label, |cx| async move {
            collective::regroup::reduce_scatter(&cx, table, part, algo).await
        })
    }

    /// Partitions move to their owners under `part` and are combined there. `None` asks the
    /// master to decide the owners from the actual distribution (two extra control rounds).
    pub fn regroup(
        &self,
        label: &str,
        table: &mut Table,
        part: Option<&Partitioner>,
    ) -> Result<()> {
        self.op(Op::Regroup, part.is_some() as u8, label, |cx| async move {
            match part {
                Some(p) => collective::regroup::regroup(&cx, table, p).await,
                None => {
                    let planned = collective::regroup::plan(&cx, table).await?;
                    collective::regroup::regroup(&cx, table, &planned).await
                }
            }
        })
    }

    /// Local partitions are combined into their owners' global tables.
    pub fn push(
        &self,
        label: &str,
        local: &Table,
        global: &mut Table,
        part: &Partitioner,
    ) -> Result<()> {
        self.op(Op::Push, 0, label, |cx| async move {
            collective::regroup::push(&cx, local, global, part).await
        })
    }

    /// Local partitions are replaced by their owners' global copies.
    pub fn pull(
        &self,
        label: &str,
        local: &mut Table,
        global: &Table,
        part: &Partitioner,
    ) -> Result<()> {
        self.op(Op::Pull, 0, label, |cx| async move {
            collective::regroup::pull(&cx, local, global, part).await
        })
    }

    /// Tables move along the permutation `map` (default: to the next rank).
    pub fn rotate(&self, label: &str, table: &mut Table, map: Option<&[usize]>) -> Result<()> {
        self.op(Op::Rotate, 0, label, |cx| async move {
            collective::regroup::rotate(&cx, table, map).await
        })
    }

    /// Failure shutdown: tells every peer why this worker stops (their errors will quote
    /// `reason`, prefixed with this worker's rank unless it already starts with it) and closes
    /// the connections. Call it when a job fails outside the collectives (bad input, a failed
    /// computation), so that the peers report the cause instead of a closed connection.
    pub fn abort(mut self, reason: &str) {
        self.finished = true;
        self.abort_now(reason);
    }

    fn abort_now(&self, reason: &str) {
        let own = format!("rank {}:", self.rank);
        let msg = if reason.starts_with(&own) {
            reason.to_string()
        } else {
            format!("{own} {reason}")
        };
        self.rt.block_on(self.transport.abort(&msg));
    }

    /// Orderly shutdown: tells every peer this worker is leaving.
    pub fn close(mut self) {
        self.finished = true;
        self.rt.block_on(self.transport.close());
    }
}

impl Drop for Worker {
    /// A worker dropped without [`Worker::close`] or [`Worker::abort`] (an error returned past
    /// it, a panic) aborts, so that its peers fail at once with a reason instead of waiting. Not
    /// from inside async code, where it cannot block: there the connections just close.
    fn drop(&mut self) {
        if self.finished || Handle::try_current().is_ok() {
            return;
        }
        let why = if std::thread::panicking() {
            "the worker was dropped without closing: its thread panicked"
        } else {
            "the worker was dropped without closing (its job returned early or failed outside \
             the collectives)"
        };
        self.abort_now(why);
    }
}
