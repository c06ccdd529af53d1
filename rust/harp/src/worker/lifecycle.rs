//! A worker's life: starting it (over TCP or in process), watching its peers between
//! operations, and shutting it down (orderly or on failure, also when dropped).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::net::TcpListener;

use super::{runtime, Handle, Listener, Runtime, Worker};
use crate::config::{Config, IoDriver};
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::{self, CallerDriver, Driver, Transport};

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
        let w = Worker::new(
            rank,
            addrs.len(),
            rt,
            cfg,
            topo,
            pool,
            transport,
            driver,
            None,
        );
        // A bad model file fails this worker, and its peers at once with the reason.
        if let Err(e) = w.load_net_model() {
            w.abort(&e.to_string());
            return Err(e);
        }
        Ok(w)
    }

    /// A worker not yet used, with nothing measured.
    #[allow(clippy::too_many_arguments)]
    fn new(
        rank: usize,
        size: usize,
        rt: Handle,
        cfg: Config,
        topo: Topology,
        pool: Pool,
        transport: Transport,
        driver: Driver,
        runtime: Option<Arc<Runtime>>,
    ) -> Worker {
        transport.set_link_fault(cfg.link_fault);
        Worker {
            rank,
            size,
            rt,
            cfg,
            topo,
            net: Mutex::new(None),
            drift: Mutex::default(),
            pool,
            transport: Arc::new(transport),
            seq: AtomicU64::new(0),
            groups: Arc::default(),
            busy: Arc::new(AtomicBool::new(false)),
            poisoned: Arc::new(Mutex::new(None)),
            inflight: Arc::default(),
            progress: Mutex::new(None),
            events: Default::default(),
            finished: false,
            driver: Arc::new(driver),
            _runtime: runtime,
        }
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
            .map(|(rank, (transport, pool))| {
                let driver = Driver::Threads(rt.handle().clone());
                let (h, c) = (rt.handle().clone(), cfg.clone());
                Worker::new(
                    rank,
                    n,
                    h,
                    c,
                    topo.clone(),
                    pool,
                    transport,
                    driver,
                    Some(rt.clone()),
                )
            })
            .collect();
        for w in &workers {
            w.load_net_model()?;
        }
        Ok(workers)
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

    /// Failure shutdown: tells every peer why this worker stops (their errors will quote
    /// `reason`, prefixed with this worker's rank unless it already starts with it) and closes
    /// the connections. Call it when a job fails outside the collectives (bad input, a failed
    /// computation), so that the peers report the cause instead of a closed connection.
    /// Operations started without blocking and not yet run fail (their handles return the
    /// error).
    pub fn abort(mut self, reason: &str) {
        self.finished = true;
        self.abort_now(reason);
        self.stop_progress();
    }

    fn abort_now(&self, reason: &str) {
        let own = format!("rank {}:", self.rank);
        let msg = if reason.starts_with(&own) {
            reason.to_string()
        } else {
            format!("{own} {reason}")
        };
        // Operations still queued fail at once with this reason.
        self.poisoned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(|| msg.clone());
        self.driver.block_on(self.transport.abort(&msg));
    }

    /// Orderly shutdown: tells every peer this worker is leaving, after the operations started
    /// without blocking have run.
    pub fn close(mut self) {
        self.finished = true;
        self.stop_progress();
        self.driver.block_on(self.transport.close());
    }
}

impl Drop for Worker {
    /// A worker dropped without [`Worker::close`] or [`Worker::abort`] (an error returned past
    /// it, a panic) aborts, so that its peers fail at once with a reason instead of waiting. Not
    /// from inside async code, where it cannot block: there the connections just close.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if Handle::try_current().is_ok() {
            // Inside async code: no blocking wait for the progress thread either; it ends by
            // itself once its queue is empty.
            return;
        }
        let why = if std::thread::panicking() {
            "the worker was dropped without closing: its thread panicked"
        } else {
            "the worker was dropped without closing (its job returned early or failed outside \
             the collectives)"
        };
        self.abort_now(why);
        self.stop_progress();
    }
}
