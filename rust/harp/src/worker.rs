//! A running worker: its rank, its connections, its memory pool and the synchronous API that the
//! command-line tool and the JNI layer call. Every collective call gets the next operation
//! sequence number automatically (all workers must call collectives in the same order); the
//! label is only for logs and errors.
//!
//! After a failed collective the worker is *poisoned*: it tells every peer why (so their
//! errors name the original cause), closes its connections, and refuses further collectives.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::net::TcpListener;
pub use tokio::runtime::{Handle, Runtime};

use crate::collective::{
    self, choose, costs, segment, AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, Ctx,
    GatherAlgorithm, ReduceAlgorithm, ReduceScatterAlgorithm, ScatterAlgorithm,
};
use crate::config::{Config, IoDriver};
use crate::data::{Partitioner, Table};
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::{self, CallerDriver, Driver, Members, Transport};
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
    /// Predicted and measured seconds of the latest operations under the model.
    drift: Mutex<Drift>,
    pool: Pool,
    transport: Transport,
    seq: AtomicU64,
    /// Every group this worker has created: its members and its operation counter.
    groups: Mutex<HashMap<u64, GroupSeq>>,
    /// Set while an operation runs: a worker runs one at a time (a second thread's call is
    /// refused instead of sending frames that its peers would take for the first's).
    busy: AtomicBool,
    poisoned: Mutex<Option<String>>,
    /// Counters and queued control messages of the event lane (`crate::events`).
    pub(crate) events: crate::events::State,
    /// Set by [`Worker::close`] and [`Worker::abort`]; a worker dropped without either aborts.
    finished: bool,
    /// What runs this worker's operations and I/O (`Config::io_driver`); dropped after the
    /// transport.
    driver: Driver,
    /// The runtime of in-process workers, kept alive by the workers that share it (dropped
    /// last).
    _runtime: Option<Arc<Runtime>>,
}

/// The collectives of the whole job ([`Worker`]) and of a sub-group ([`Group`]), written once:
/// each type's `op` runs the closure with an endpoint of its own scope, in its own ranks (for a
/// group, "every worker" below means every member, and ranks are group ranks).
macro_rules! collectives {
    () => {
        /// Waits until every member has called `barrier`.
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
            let t0 = Instant::now();
            let topo = &self.topo;
            let crossover = self.config().broadcast_crossover;
            let t = &mut *table;
            self.op(Op::Broadcast, algo.code(), label, |cx| async move {
                cx.ep.set_root(root);
                collective::broadcast::broadcast(&cx, t, root, algo).await
            })?;
            self.predicted("broadcast", t0, |m| {
                let n = table.bytes();
                let chunk = segment::chunk(self.config(), n, self.size());
                let a = algo.resolve(n, crossover, Some(m), topo, root, chunk);
                costs::predict_broadcast(m, topo, a, root, n, chunk)
            });
            Ok(())
        }

        /// `root`'s table becomes the combination of all tables; the others are emptied.
        pub fn reduce(
            &self,
            label: &str,
            table: &mut Table,
            root: usize,
            algo: ReduceAlgorithm,
        ) -> Result<()> {
            let t0 = Instant::now();
            let code = crate::wire::with_combiner(algo.code(), table.combiner().code());
            let t = &mut *table;
            let ran = self.op(Op::Reduce, code, label, |cx| async move {
                cx.ep.set_root(root);
                collective::reduce::reduce(&cx, t, root, algo).await
            })?;
            if self.rank() == root {
                self.predicted("reduce", t0, |m| {
                    let crossover = self.config().allreduce_crossover;
                    choose::predict_reduce(m, &self.topo, ran, root, table.bytes(), crossover)
                });
            }
            Ok(())
        }

        /// `root`'s table becomes the union of all tables; the others are unchanged (automatic
        /// algorithm: `gather_with`).
        pub fn gather(&self, label: &str, table: &mut Table, root: usize) -> Result<()> {
            self.gather_with(label, table, root, GatherAlgorithm::Auto)
        }

        /// `gather` with a chosen algorithm.
        pub fn gather_with(
            &self,
            label: &str,
            table: &mut Table,
            root: usize,
            algo: GatherAlgorithm,
        ) -> Result<()> {
            let t0 = Instant::now();
            let t = &mut *table;
            self.op(Op::Gather, algo.code(), label, |cx| async move {
                cx.ep.set_root(root);
                collective::gather::gather(&cx, t, root, algo).await
            })?;
            if self.rank() == root {
                self.predicted("gather", t0, |m| {
                    let a = algo.resolve(Some(m), root);
                    costs::predict_gather(m, a, root, table.bytes() / self.size() as u64)
                });
            }
            Ok(())
        }

        /// `root`'s partitions are spread to their owners under `part` (automatic algorithm:
        /// `scatter_with`).
        pub fn scatter(
            &self,
            label: &str,
            table: &mut Table,
            root: usize,
            part: &Partitioner,
        ) -> Result<()> {
            self.scatter_with(label, table, root, part, ScatterAlgorithm::Auto)
        }

        /// `scatter` with a chosen algorithm.
        pub fn scatter_with(
            &self,
            label: &str,
            table: &mut Table,
            root: usize,
            part: &Partitioner,
            algo: ScatterAlgorithm,
        ) -> Result<()> {
            let t0 = Instant::now();
            let n = table.bytes() / self.size() as u64;
            self.op(Op::Scatter, algo.code(), label, |cx| async move {
                cx.ep.set_root(root);
                collective::scatter::scatter(&cx, table, root, part, algo).await
            })?;
            if self.rank() == root {
                self.predicted("scatter", t0, |m| {
                    let a = algo.resolve(Some(m), root);
                    costs::predict_scatter(m, a, root, n)
                });
            }
            Ok(())
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
            let code = crate::wire::with_combiner(algo.code(), table.combiner().code());
            self.op(Op::Allreduce, code, label, |cx| async move {
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
        pub fn reduce_scatter(
            &self,
            label: &str,
            table: &mut Table,
            part: &Partitioner,
        ) -> Result<()> {
            self.reduce_scatter_with(label, table, part, ReduceScatterAlgorithm::Auto)
        }

        /// `reduce_scatter` with a chosen algorithm.
        pub fn reduce_scatter_with(
            &self,
            label: &str,
            table: &mut Table,
            part: &Partitioner,
            algo: ReduceScatterAlgorithm,
        ) -> Result<()> {
            let code = crate::wire::with_combiner(algo.code(), table.combiner().code());
            self.op(Op::ReduceScatter, code, label, |cx| async move {
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
            let code = crate::wire::with_combiner(part.is_some() as u8, table.combiner().code());
            self.op(Op::Regroup, code, label, |cx| async move {
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
            let code = crate::wire::with_combiner(0, global.combiner().code());
            self.op(Op::Push, code, label, |cx| async move {
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
    };
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
        cfg.check()?;
        let addrs = topo.addrs()?;
        crate::collective::tags::check_workers(addrs.len())?;
        let pool = Pool::new(cfg.pool);
        let t0 = Instant::now();
        let (driver, listener) = match cfg.io_driver {
            IoDriver::Threads => (Driver::Threads(rt.clone()), listener.inner),
            IoDriver::Caller => {
                let d = CallerDriver::new(&format!("harp-io-{rank}"))
                    .map_err(|e| Error::io("cannot start the worker's I/O runtime", e))?;
                let d = Driver::Caller(d);
                // The socket moves to the worker's own runtime.
                let l = listener
                    .inner
                    .into_std()
                    .and_then(|l| {
                        let _guard = d.handle().enter();
                        TcpListener::from_std(l)
                    })
                    .map_err(|e| Error::io("cannot move the listening socket", e))?;
                (d, l)
            }
        };
        let mut transport = driver.block_on(Transport::connect(
            &cfg,
            &addrs,
            rank,
            transport::job_id(job),
            secret,
            listener,
            pool.clone(),
        ))?;
        if let Driver::Caller(_) = driver {
            transport.set_spin(transport::RECV_SPIN);
        }
        tracing::info!(
            rank,
            workers = addrs.len(),
            secs = t0.elapsed().as_secs_f64(),
            "worker connected and initialised"
        );
        let w = Worker {
            rank,
            size: addrs.len(),
            rt,
            cfg,
            topo,
            net: Mutex::new(None),
            drift: Mutex::default(),
            pool,
            transport,
            seq: AtomicU64::new(0),
            groups: Mutex::default(),
            busy: AtomicBool::new(false),
            poisoned: Mutex::new(None),
            events: Default::default(),
            finished: false,
            driver,
            _runtime: None,
        };
        // A bad model file fails this worker, and its peers at once with the reason.
        if let Err(e) = w.load_net_model() {
            w.abort(&e.to_string());
            return Err(e);
        }
        Ok(w)
    }

    /// Loads `Config::net_model` when set (errors name the file, and the line for bad text).
    fn load_net_model(&self) -> Result<()> {
        let Some(file) = &self.cfg.net_model else {
            return Ok(());
        };
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::io(format!("cannot read the net model {file}"), e))?;
        let m = NetModel::parse(&text, file)?;
        self.set_net_model(Some(m))
            .map_err(|e| Error::config(format!("{file}: {e}")))
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
        cfg.check()?;
        crate::collective::tags::check_workers(n)?;
        let rt = Arc::new(runtime(2)?);
        let job = transport::job_id("in-process");
        let pools: Vec<Pool> = (0..n).map(|_| Pool::new(cfg.pool)).collect();
        let transports = {
            let _guard = rt.enter();
            Transport::in_process(job, cfg.op_timeout, &pools)
        };
        let topo = Topology::flat((0..n).map(|r| format!("in-process:{r}")).collect());
        let workers: Vec<Worker> = transports
            .into_iter()
            .zip(pools)
            .enumerate()
            .map(|(rank, (transport, pool))| {
                transport.set_event_window(cfg.event_window);
                (rank, (transport, pool))
            })
            .map(|(rank, (transport, pool))| Worker {
                rank,
                size: n,
                rt: rt.handle().clone(),
                cfg: cfg.clone(),
                topo: topo.clone(),
                net: Mutex::new(None),
                drift: Mutex::default(),
                pool,
                transport,
                seq: AtomicU64::new(0),
                groups: Mutex::default(),
                busy: AtomicBool::new(false),
                poisoned: Mutex::new(None),
                events: Default::default(),
                finished: false,
                driver: Driver::Threads(rt.handle().clone()),
                _runtime: Some(rt.clone()),
            })
            .collect();
        for w in &workers {
            w.load_net_model()?;
        }
        Ok(workers)
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
        *self.drift.lock().unwrap_or_else(|e| e.into_inner()) = Drift::default();
        Ok(())
    }

    /// How far the measured times of the latest operations (up to [`DRIFT_WINDOW`]) that had a
    /// prediction stray from the model: (Σ measured − Σ predicted) / Σ predicted; None without
    /// a model or before the first prediction. A prediction is recorded where the worker knows
    /// the operation's size afterwards: every worker of a broadcast, the root of a reduce,
    /// gather or scatter.
    pub fn model_drift(&self) -> Option<f64> {
        self.drift.lock().unwrap_or_else(|e| e.into_inner()).value()
    }

    /// The predicted and measured seconds of the recorded operations, oldest first.
    pub fn model_predictions(&self) -> Vec<(f64, f64)> {
        let d = self.drift.lock().unwrap_or_else(|e| e.into_inner());
        d.window.iter().copied().collect()
    }

    /// True when a full window of predictions drifts more than [`DRIFT_LIMIT`] (20%) from the
    /// model: the hook for recalibrating. Each worker sees its own drift, so the job must
    /// agree before measuring again (all workers take part in a measurement): e.g. every
    /// worker contributes this flag to an allreduce (or the master broadcasts its own), and if
    /// it is set all of them measure anew (`Worker::calibrate` of the measurement layer) and
    /// pass the result to [`Worker::set_net_model`], which clears the window.
    pub fn needs_recalibration(&self) -> bool {
        let d = self.drift.lock().unwrap_or_else(|e| e.into_inner());
        d.window.len() == DRIFT_WINDOW && d.value().is_some_and(|x| x.abs() > DRIFT_LIMIT)
    }

    /// Records one operation's predicted and measured seconds (see [`Worker::model_drift`]);
    /// logs a warning when the drift first exceeds [`DRIFT_LIMIT`].
    fn record_prediction(&self, op: &str, predicted: f64, measured: f64) {
        if !(predicted.is_finite() && predicted > 0.0) {
            return;
        }
        let mut d = self.drift.lock().unwrap_or_else(|e| e.into_inner());
        if d.window.len() == DRIFT_WINDOW {
            d.window.pop_front();
        }
        d.window.push_back((predicted, measured));
        let x = d.value().unwrap_or(0.0);
        tracing::debug!(
            rank = self.rank,
            op,
            predicted,
            measured,
            drift = x,
            "model prediction"
        );
        let over = x.abs() > DRIFT_LIMIT;
        if over && !d.warned {
            tracing::warn!(
                rank = self.rank,
                op,
                drift = x,
                "measured collective times drift {:.0}% from the network model; \
                 recalibrate (Worker::needs_recalibration)",
                x * 100.0
            );
        }
        d.warned = over;
    }

    /// Seconds since `t0` recorded against `predict()` when a model is set.
    fn predicted(&self, op: &str, t0: Instant, predict: impl FnOnce(&NetModel) -> f64) {
        self.predicted_on(self.net_model(), op, t0, predict)
    }

    /// Seconds since `t0` recorded in the drift window against `predict()` on `model` (the
    /// worker's or a group's), when there is one.
    fn predicted_on(
        &self,
        model: Option<Arc<NetModel>>,
        op: &str,
        t0: Instant,
        predict: impl FnOnce(&NetModel) -> f64,
    ) {
        if let Some(m) = model {
            let measured = t0.elapsed().as_secs_f64();
            self.record_prediction(op, predict(&m), measured);
        }
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
    /// The arguments of collective `op` (about to run as this scope's next operation) failed a
    /// check on this worker before anything was sent. The peers cannot see that: they would
    /// wait for this worker's frames until the timeout. So this worker fails as a failed
    /// collective does (it is poisoned, and every peer is told why at once) and the error
    /// returned says where (a data error gets the rank, the operation and its label).
    pub fn refuse(&self, op: Op, label: &str, e: Error) -> Error {
        self.refused(&self.seq, None, op, label, e)
    }

    fn refused(
        &self,
        seq: &AtomicU64,
        group: Option<Arc<[usize]>>,
        op: Op,
        label: &str,
        e: Error,
    ) -> Error {
        let e = match e {
            Error::Data(msg) => Error::DataIn {
                ctx: crate::error::OpContext::new(
                    self.rank,
                    op.name(),
                    seq.load(Ordering::SeqCst) + 1,
                    label,
                    group,
                ),
                msg,
            },
            e => e,
        };
        self.fail(&e.to_string());
        e
    }

    pub(crate) fn fail(&self, msg: &str) {
        tracing::debug!("{msg}");
        *self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg.to_string());
        self.driver.block_on(self.transport.abort(msg));
    }

    /// Watches the peers while this worker computes outside the collectives, so that a dead or
    /// stopped peer is noticed within about the timeout instead of at the next collective.
    /// Every heartbeat interval (`timeout / 8`, 20 ms to 5 s) when no operation runs, it looks
    /// for a peer gone for a failure or one with an open connection silent for half the
    /// timeout ([`Transport::peer_trouble`]). On trouble it fails the worker as a failed
    /// collective does (poisoned, every peer told why) and returns the error, worded as a
    /// collective's with the operation `computing`; the caller decides what to do with it (the
    /// command-line worker prints it and exits). Returns `None` once `stop` receives a message
    /// or is disconnected. Run it on its own thread next to the computing one.
    pub fn watch_peers(&self, stop: &std::sync::mpsc::Receiver<()>) -> Option<Error> {
        use std::sync::mpsc::RecvTimeoutError;
        let every = self.transport.watch_interval();
        loop {
            if stop.recv_timeout(every) != Err(RecvTimeoutError::Timeout) {
                return None;
            }
            if self.check_usable().is_err() || self.events.in_phase() {
                continue;
            }
            // Claimed like an operation: an operation running now finds the trouble itself.
            if self
                .busy
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                continue;
            }
            let ctx = crate::error::OpContext::new(
                self.rank,
                "computing",
                self.seq.load(Ordering::SeqCst),
                "outside the collectives",
                None,
            );
            let trouble = self.transport.peer_trouble(&ctx);
            if let Some(e) = &trouble {
                self.fail(&e.to_string());
            }
            self.busy.store(false, Ordering::SeqCst);
            if trouble.is_some() {
                return trouble;
            }
        }
    }

    /// Runs one operation of the whole job (the next sequence number; on failure the worker is
    /// poisoned).
    pub(crate) fn op<'a, T, Fut>(
        &'a self,
        op: Op,
        algo: u8,
        label: &str,
        f: impl FnOnce(Ctx<'a>) -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        let scope = Scope {
            members: None,
            seq: &self.seq,
            topo: &self.topo,
            net: self.net_model(),
        };
        self.run(scope, op, algo, label, f)
    }

    /// Runs one operation of `scope` (the whole job or a group): the next sequence number of
    /// that scope, the operation's endpoint, and on failure the worker is poisoned.
    fn run<'a, T, Fut>(
        &'a self,
        scope: Scope<'a>,
        op: Op,
        algo: u8,
        label: &str,
        f: impl FnOnce(Ctx<'a>) -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        self.check_usable()?;
        if self.events.in_phase() {
            // Only a handler runs inside the phase, and the other workers are not calling
            // collectives: refuse before anything is sent or the sequence moves.
            return Err(Error::config(format!(
                "rank {}: {} '{label}' called from a run_until_quiet handler: a handler may send \
                 events, not run collectives (the other workers are not calling them)",
                self.rank,
                op.name()
            )));
        }
        if label.len() > crate::wire::MAX_LABEL as usize {
            return Err(Error::config(format!(
                "rank {}: {}: a label of {} bytes; at most {} (as for events)",
                self.rank,
                op.name(),
                label.len(),
                crate::wire::MAX_LABEL
            )));
        }
        if self.busy.swap(true, Ordering::SeqCst) {
            return Err(Error::config(format!(
                "rank {}: {} '{label}' called while another thread runs an operation on this \
                 worker: a worker runs one collective at a time",
                self.rank,
                op.name()
            )));
        }
        struct Idle<'b>(&'b AtomicBool);
        impl Drop for Idle<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::SeqCst);
            }
        }
        let _idle = Idle(&self.busy);
        let seq = scope.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let group = scope.members.as_ref().map(|m| m.id).unwrap_or(0);
        // For a data error only: its context is built then, not on every operation.
        let world = scope.members.as_ref().map(|m| m.world.clone());
        let cx = Ctx {
            ep: self
                .transport
                .group_endpoint(scope.members, op, algo, seq, label),
            pool: &self.pool,
            cfg: &self.cfg,
            topo: scope.topo,
            net: scope.net,
        };
        let t0 = Instant::now();
        // Boxed: a collective's future is kilobytes, and the runtime would move it twice.
        let res = self.driver.block_on(Box::pin(f(cx)));
        // Done here, but a peer's frames for this operation (or an earlier one) are still
        // waiting: it ran the operation differently (its data went nowhere) — fail, naming it,
        // instead of returning results that differ between workers.
        let res = res.and_then(|v| match self.transport.stray(group, seq) {
            None => Ok(v),
            Some((src, s, n)) => Err(Error::Protocol(format!(
                "rank {src} sent {n} frame(s) for operation #{s}{} that rank {} did not \
                     take: the workers' calls of it disagree (root, algorithm, partitioner, \
                     combiner or table shapes)",
                if group == 0 {
                    String::new()
                } else {
                    format!(" of group {group}")
                },
                self.rank
            ))),
        });
        // Partitions that could not be combined (often another worker's, just received): say
        // where, as the communication errors do.
        let res = res.map_err(|e| match e {
            Error::Data(msg) => Error::DataIn {
                ctx: crate::error::OpContext::new(self.rank, op.name(), seq, label, world),
                msg,
            },
            Error::Timeout {
                ctx,
                peer,
                secs,
                hint,
            } if hint.is_empty() => Error::Timeout {
                ctx,
                peer,
                secs,
                hint: self.unknown_group_hint(),
            },
            e => e,
        });
        match &res {
            Ok(_) => tracing::debug!(
                rank = self.rank,
                op = op.name(),
                group,
                seq,
                label,
                secs = t0.elapsed().as_secs_f64(),
                "done"
            ),
            Err(e) => self.fail(&e.to_string()),
        }
        res
    }

    /// After a timeout: frames from a peer for a group this worker never created, the mark of
    /// members that list one group in different orders (its id hashes the list, so their frames
    /// never meet). Empty when there are none.
    fn unknown_group_hint(&self) -> String {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let odd = self
            .transport
            .queued_groups()
            .into_iter()
            .find(|(g, _)| *g != 0 && !groups.contains_key(g));
        match odd {
            None => String::new(),
            Some((g, src)) => format!(
                "; meanwhile rank {src} sent frames for a group this worker has not created (id \
                 {g:#x}): if it is meant to be the same group, the members list it in different \
                 orders (the list gives the group ranks, so every member must list it alike)"
            ),
        }
    }

    /// A handle for collectives over a subset of the workers: `members` are world ranks in
    /// group-rank order (group rank g is world rank `members[g]`). Every member calls it with
    /// the same list (no message is exchanged; lists that differ between members make their
    /// first collective fail at the timeout, whose message then says that a peer sent frames
    /// for a group this worker has not created); non-members do not call it. A group has its own
    /// sequence of operations, apart from the job's and from every other group's, so disjoint
    /// groups may run collectives at the same time, and a group's operations interleave freely
    /// with the job's (each worker still calls them in one order). Calling `group` again with
    /// the same list continues the same sequence.
    ///
    /// Errors: an empty list, a rank that is not a worker, a rank listed twice, and this worker
    /// not being in the list.
    pub fn group(&self, members: &[usize]) -> Result<Group<'_>> {
        let what = || format!("group {members:?}");
        if members.is_empty() {
            return Err(Error::config("a group needs at least one member"));
        }
        if let Some(&r) = members.iter().find(|&&r| r >= self.size) {
            return Err(Error::config(format!(
                "{}: rank {r} is not a worker (there are {})",
                what(),
                self.size
            )));
        }
        let mut seen = vec![false; self.size];
        for &r in members {
            if std::mem::replace(&mut seen[r], true) {
                return Err(Error::config(format!(
                    "{}: rank {r} is listed twice",
                    what()
                )));
            }
        }
        let me = members
            .iter()
            .position(|&r| r == self.rank)
            .ok_or_else(|| {
                Error::config(format!(
                    "{}: rank {} is not a member (only members create a group)",
                    what(),
                    self.rank
                ))
            })?;
        let id = group_id(members);
        let seq = {
            let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            let (known, seq) = groups
                .entry(id)
                .or_insert_with(|| (members.into(), Arc::new(AtomicU64::new(0))));
            if &**known != members {
                return Err(Error::config(format!(
                    "{}: its id {id:#x} is already taken by group {known:?} (a hash collision: \
                     list the members in another order)",
                    what()
                )));
            }
            seq.clone()
        };
        let topo = Topology {
            hosts: members
                .iter()
                .map(|&r| self.topo.hosts[r].clone())
                .collect(),
            rack: members.iter().map(|&r| self.topo.rack[r]).collect(),
        };
        Ok(Group {
            w: self,
            members: Members {
                id,
                world: members.into(),
                me,
            },
            seq,
            topo,
            sub_model: Mutex::new(None),
        })
    }

    collectives!();

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
        self.driver.block_on(self.transport.abort(&msg));
    }

    /// Orderly shutdown: tells every peer this worker is leaving.
    pub fn close(mut self) {
        self.finished = true;
        self.driver.block_on(self.transport.close());
    }
}

/// The collectives of the whole job or of a group, for code that runs on either (e.g.
/// [`crate::check::run`]); each method is the inherent one of [`Worker`] and [`Group`].
pub trait Collectives {
    /// This worker's rank in the job or the group.
    fn rank(&self) -> usize;
    /// The number of workers in the job or the group.
    fn size(&self) -> usize;
    fn pool(&self) -> &Pool;
    fn barrier(&self, label: &str) -> Result<()>;
    fn broadcast(
        &self,
        label: &str,
        table: &mut Table,
        root: usize,
        algo: BroadcastAlgorithm,
    ) -> Result<()>;
    fn reduce(
        &self,
        label: &str,
        table: &mut Table,
        root: usize,
        algo: ReduceAlgorithm,
    ) -> Result<()>;
    fn gather(&self, label: &str, table: &mut Table, root: usize) -> Result<()>;
    fn scatter(
        &self,
        label: &str,
        table: &mut Table,
        root: usize,
        part: &Partitioner,
    ) -> Result<()>;
    fn allgather(&self, label: &str, table: &mut Table, algo: AllgatherAlgorithm) -> Result<()>;
    fn allreduce(&self, label: &str, table: &mut Table, algo: AllreduceAlgorithm) -> Result<()>;
    fn reduce_scatter(&self, label: &str, table: &mut Table, part: &Partitioner) -> Result<()>;
    fn gather_with(
        &self,
        label: &str,
        table: &mut Table,
        root: usize,
        algo: GatherAlgorithm,
    ) -> Result<()>;
    fn scatter_with(
        &self,
        label: &str,
        table: &mut Table,
        root: usize,
        part: &Partitioner,
        algo: ScatterAlgorithm,
    ) -> Result<()>;
    fn reduce_scatter_with(
        &self,
        label: &str,
        table: &mut Table,
        part: &Partitioner,
        algo: ReduceScatterAlgorithm,
    ) -> Result<()>;
    fn regroup(&self, label: &str, table: &mut Table, part: Option<&Partitioner>) -> Result<()>;
    fn push(
        &self,
        label: &str,
        local: &Table,
        global: &mut Table,
        part: &Partitioner,
    ) -> Result<()>;
    fn pull(
        &self,
        label: &str,
        local: &mut Table,
        global: &Table,
        part: &Partitioner,
    ) -> Result<()>;
    fn rotate(&self, label: &str, table: &mut Table, map: Option<&[usize]>) -> Result<()>;
    /// The arguments of collective `op` failed a check on this worker before anything was
    /// sent: fails the worker as a failed collective does (see [`Worker::refuse`]).
    fn refuse(&self, op: Op, label: &str, e: Error) -> Error;
}

macro_rules! impl_collectives {
    ($t:ty) => {
        impl Collectives for $t {
            fn rank(&self) -> usize {
                Self::rank(self)
            }
            fn size(&self) -> usize {
                Self::size(self)
            }
            fn pool(&self) -> &Pool {
                Self::pool(self)
            }
            fn barrier(&self, label: &str) -> Result<()> {
                Self::barrier(self, label)
            }
            fn broadcast(
                &self,
                label: &str,
                table: &mut Table,
                root: usize,
                algo: BroadcastAlgorithm,
            ) -> Result<()> {
                Self::broadcast(self, label, table, root, algo)
            }
            fn reduce(
                &self,
                label: &str,
                table: &mut Table,
                root: usize,
                algo: ReduceAlgorithm,
            ) -> Result<()> {
                Self::reduce(self, label, table, root, algo)
            }
            fn gather(&self, label: &str, table: &mut Table, root: usize) -> Result<()> {
                Self::gather(self, label, table, root)
            }
            fn scatter(
                &self,
                label: &str,
                table: &mut Table,
                root: usize,
                part: &Partitioner,
            ) -> Result<()> {
                Self::scatter(self, label, table, root, part)
            }
            fn allgather(
                &self,
                label: &str,
                table: &mut Table,
                algo: AllgatherAlgorithm,
            ) -> Result<()> {
                Self::allgather(self, label, table, algo)
            }
            fn allreduce(
                &self,
                label: &str,
                table: &mut Table,
                algo: AllreduceAlgorithm,
            ) -> Result<()> {
                Self::allreduce(self, label, table, algo)
            }
            fn reduce_scatter(
                &self,
                label: &str,
                table: &mut Table,
                part: &Partitioner,
            ) -> Result<()> {
                Self::reduce_scatter(self, label, table, part)
            }
            fn gather_with(
                &self,
                label: &str,
                table: &mut Table,
                root: usize,
                algo: GatherAlgorithm,
            ) -> Result<()> {
                Self::gather_with(self, label, table, root, algo)
            }
            fn scatter_with(
                &self,
                label: &str,
                table: &mut Table,
                root: usize,
                part: &Partitioner,
                algo: ScatterAlgorithm,
            ) -> Result<()> {
                Self::scatter_with(self, label, table, root, part, algo)
            }
            fn reduce_scatter_with(
                &self,
                label: &str,
                table: &mut Table,
                part: &Partitioner,
                algo: ReduceScatterAlgorithm,
            ) -> Result<()> {
                Self::reduce_scatter_with(self, label, table, part, algo)
            }
            fn regroup(
                &self,
                label: &str,
                table: &mut Table,
                part: Option<&Partitioner>,
            ) -> Result<()> {
                Self::regroup(self, label, table, part)
            }
            fn push(
                &self,
                label: &str,
                local: &Table,
                global: &mut Table,
                part: &Partitioner,
            ) -> Result<()> {
                Self::push(self, label, local, global, part)
            }
            fn pull(
                &self,
                label: &str,
                local: &mut Table,
                global: &Table,
                part: &Partitioner,
            ) -> Result<()> {
                Self::pull(self, label, local, global, part)
            }
            fn rotate(&self, label: &str, table: &mut Table, map: Option<&[usize]>) -> Result<()> {
                Self::rotate(self, label, table, map)
            }
            fn refuse(&self, op: Op, label: &str, e: Error) -> Error {
                Self::refuse(self, op, label, e)
            }
        }
    };
}

impl_collectives!(Worker);
impl_collectives!(Group<'_>);

/// A group's members and the counter of its operations.
type GroupSeq = (Arc<[usize]>, Arc<AtomicU64>);

/// What one operation runs in: the whole job or a group, with that scope's operation counter,
/// topology and network model (in the scope's ranks).
struct Scope<'a> {
    members: Option<Members>,
    seq: &'a AtomicU64,
    topo: &'a Topology,
    net: Option<Arc<NetModel>>,
}

/// The wire id of the group of `members` (in group-rank order): FNV-1a of the list, never 0
/// (the id of the whole job).
fn group_id(members: &[usize]) -> u64 {
    let bytes: Vec<u8> = members
        .iter()
        .flat_map(|&r| (r as u64).to_le_bytes())
        .collect();
    crate::util::fnv1a64(&bytes).max(1)
}

/// Collectives over a subset of a job's workers ([`Worker::group`]), in *group ranks*: this
/// worker's rank is its position in the member list, roots and permutations are group ranks,
/// and every collective of [`Worker`] is here with the same algorithms and meaning among the
/// members. A failure poisons the worker, as a failed collective of the job does.
pub struct Group<'w> {
    w: &'w Worker,
    members: Members,
    seq: Arc<AtomicU64>,
    /// The members' hosts and racks, in group-rank order (rack-aware chains).
    topo: Topology,
    /// The worker's model and its restriction to the members, made once per model (so the
    /// hierarchy and chain orders derived from it are memoized across the group's operations).
    sub_model: Mutex<Option<(Arc<NetModel>, Arc<NetModel>)>>,
}

impl Group<'_> {
    /// This worker's group rank.
    pub fn rank(&self) -> usize {
        self.members.me
    }
    /// The number of members.
    pub fn size(&self) -> usize {
        self.members.world.len()
    }
    /// The members' world ranks in group-rank order.
    pub fn members(&self) -> &[usize] {
        &self.members.world
    }
    /// The id the group's frames carry.
    pub fn id(&self) -> u64 {
        self.members.id
    }
    /// The worker's memory pool.
    pub fn pool(&self) -> &Pool {
        self.w.pool()
    }
    /// The worker this group belongs to.
    pub fn worker(&self) -> &Worker {
        self.w
    }
    /// The worker's engine configuration.
    pub fn config(&self) -> &Config {
        self.w.config()
    }

    /// The group's network model: the worker's model restricted to the members.
    fn net_model(&self) -> Option<Arc<NetModel>> {
        let world = self.w.net_model()?;
        let mut cache = self.sub_model.lock().unwrap_or_else(|e| e.into_inner());
        match &*cache {
            Some((w, sub)) if Arc::ptr_eq(w, &world) => Some(sub.clone()),
            _ => {
                let sub = Arc::new(world.sub(&self.members.world));
                *cache = Some((world, sub.clone()));
                Some(sub)
            }
        }
    }

    /// Seconds since `t0` recorded against `predict()` (on the group's model) in the worker's
    /// drift window when a model is set.
    fn predicted(&self, op: &str, t0: Instant, predict: impl FnOnce(&NetModel) -> f64) {
        self.w.predicted_on(self.net_model(), op, t0, predict)
    }

    /// [`Worker::refuse`] for an operation of this group.
    pub fn refuse(&self, op: Op, label: &str, e: Error) -> Error {
        let world = Some(self.members.world.clone());
        self.w.refused(&self.seq, world, op, label, e)
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
        let scope = Scope {
            members: Some(self.members.clone()),
            seq: &self.seq,
            topo: &self.topo,
            net: self.net_model(),
        };
        self.w.run(scope, op, algo, label, f)
    }

    collectives!();
}

/// Operations [`Worker::model_drift`] looks back on.
pub const DRIFT_WINDOW: usize = 16;
/// Relative drift above which the worker warns and asks for recalibration.
pub const DRIFT_LIMIT: f64 = 0.2;

/// Predicted and measured seconds of the latest operations.
#[derive(Default)]
struct Drift {
    window: std::collections::VecDeque<(f64, f64)>,
    /// Whether the last recorded drift was over the limit (warn once per excursion).
    warned: bool,
}

impl Drift {
    fn value(&self) -> Option<f64> {
        let (p, m) = self
            .window
            .iter()
            .fold((0.0, 0.0), |(p, m), &(a, b)| (p + a, m + b));
        (p > 0.0).then(|| (m - p) / p)
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
