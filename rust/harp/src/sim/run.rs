//! Running one collective of the engine on `p` recorded in-process workers and taking their
//! schedules: every worker is a future of the engine's own algorithm function (the same the
//! `Worker` calls), polled by a small executor on one thread; frames are delivered only when no
//! worker can go on, so each worker's log holds its sends and receives in the order its code
//! issued them. Payloads are real (the receivers parse and assemble them), so memory grows with
//! p × the table size.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use super::network::SimNet;
use crate::collective::{
    self, segment, AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, Ctx,
    GatherAlgorithm, ReduceAlgorithm, ReduceScatterAlgorithm, ScatterAlgorithm,
};
use crate::config::Config;
use crate::data::{Array, Combiner, DType, Partitioner, Table};
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::{Step, Transport};
use crate::wire::Op;

/// The operations the simulator runs.
pub const OPS: [&str; 9] = [
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "allgather",
    "allreduce",
    "reduce-scatter",
    "regroup",
    "barrier",
];

/// One collective call as `harp bench` makes it: `bytes` is each worker's table (for allgather
/// and gather the total gathered), `partitions` per table (default 1, 4 per worker where
/// partitions move to owners: reduce-scatter, regroup, scatter), root 0.
#[derive(Debug, Clone)]
pub struct Case {
    pub op: String,
    pub algorithm: String,
    pub bytes: u64,
    pub partitions: Option<usize>,
}

/// A parsed algorithm of an operation.
#[derive(Debug, Clone, Copy)]
enum Algo {
    Bcast(BroadcastAlgorithm),
    Reduce(ReduceAlgorithm),
    Gather(GatherAlgorithm),
    Scatter(ScatterAlgorithm),
    Allgather(AllgatherAlgorithm),
    Allreduce(AllreduceAlgorithm),
    ReduceScatter(ReduceScatterAlgorithm),
    None,
}

fn parse(op: &str, algo: &str) -> Result<Algo> {
    Ok(match op {
        "broadcast" => Algo::Bcast(BroadcastAlgorithm::parse(algo)?),
        "reduce" => Algo::Reduce(ReduceAlgorithm::parse(algo)?),
        "gather" => Algo::Gather(GatherAlgorithm::parse(algo)?),
        "scatter" => Algo::Scatter(ScatterAlgorithm::parse(algo)?),
        "allreduce" => Algo::Allreduce(AllreduceAlgorithm::parse(algo)?),
        "reduce-scatter" => Algo::ReduceScatter(ReduceScatterAlgorithm::parse(algo)?),
        "allgather" => Algo::Allgather(match algo {
            "auto" => AllgatherAlgorithm::Auto,
            "ring" => AllgatherAlgorithm::Ring,
            "recursive-doubling" => AllgatherAlgorithm::RecursiveDoubling,
            _ => {
                return Err(Error::config(format!(
                    "unknown allgather algorithm '{algo}' (auto, ring, recursive-doubling)"
                )))
            }
        }),
        "regroup" | "barrier" if algo == "auto" => Algo::None,
        "regroup" | "barrier" => {
            return Err(Error::config(format!(
                "{op} has one algorithm, not '{algo}'"
            )))
        }
        _ => {
            return Err(Error::config(format!(
                "unknown operation '{op}' (one of {})",
                OPS.join(", ")
            )))
        }
    })
}

/// What a recording produced.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Each worker's schedule, in program order.
    pub schedules: Vec<Vec<Step>>,
    /// The algorithm that ran (auto resolved as the workers resolve it where that is known
    /// before the call).
    pub algorithm: String,
}

fn op_of(op: &str) -> Op {
    match op {
        "broadcast" => Op::Broadcast,
        "reduce" => Op::Reduce,
        "gather" => Op::Gather,
        "scatter" => Op::Scatter,
        "allgather" => Op::Allgather,
        "allreduce" => Op::Allreduce,
        "reduce-scatter" => Op::ReduceScatter,
        "regroup" => Op::Regroup,
        _ => Op::Barrier,
    }
}

/// The table worker `r` of `p` calls `op` with in `harp bench` and here: f64 elements of value
/// r + 1, `parts` partitions; for allgather and gather `bytes` is the total gathered, for
/// every other op each worker's table (the root's alone for broadcast and scatter).
pub fn bench_table(pool: &Pool, op: &str, r: usize, p: usize, bytes: u64, parts: usize) -> Table {
    let mut t = Table::new(Combiner::Sum);
    let elems = (bytes / 8).max(1) as usize;
    let mut add = |id: u32, n: usize| {
        let mut a = Array::uninit(pool, DType::F64, n);
        a.as_mut_slice::<f64>().expect("f64").fill(r as f64 + 1.0);
        t.add(id, a).expect("fresh ids");
    };
    match op {
        "broadcast" | "scatter" if r != 0 => {}
        "allgather" | "gather" => {
            let mine = (elems / p).max(1);
            for i in 0..parts {
                add((r * parts + i) as u32, (mine / parts).max(1));
            }
        }
        _ => {
            for i in 0..parts {
                add(i as u32, (elems / parts).max(1));
            }
        }
    }
    t
}

/// The algorithm name the call resolves to, as `harp bench` reports it.
fn resolved(a: Algo, cfg: &Config, net: Option<&NetModel>, topo: &Topology, bytes: u64) -> String {
    let p = topo.size();
    match a {
        Algo::Bcast(b) => {
            let chunk = segment::chunk(cfg, bytes, p);
            b.resolve(bytes, cfg.broadcast_crossover, net, topo, 0, chunk)
                .name()
                .into()
        }
        Algo::Allreduce(x) => x
            .resolve(bytes, topo, cfg.allreduce_crossover)
            .name()
            .into(),
        Algo::Allgather(x) => x.name().into(),
        Algo::ReduceScatter(x) => x.name().into(),
        Algo::Reduce(x) => match (x, net) {
            (ReduceAlgorithm::Auto, None) => ReduceAlgorithm::Binary.name().into(),
            (ReduceAlgorithm::Auto, Some(m)) => {
                collective::choose::reduce(m, topo, 0, bytes, cfg.allreduce_crossover)
                    .name()
                    .into()
            }
            (x, _) => x.name().into(),
        },
        Algo::Scatter(x) => match x.resolve(net, 0) {
            ScatterAlgorithm::Auto => collective::choose::scatter(bytes, p).name().into(),
            y => y.name().into(),
        },
        Algo::Gather(x) => x.resolve(net, 0).name().into(),
        Algo::None => "default".into(),
    }
}

/// Wakes: a worker's future woken goes on the ready list and wakes the driver.
struct Ready {
    list: Mutex<Vec<usize>>,
    queued: Vec<AtomicBool>,
    outer: Mutex<Option<Waker>>,
}

struct RankWaker {
    rank: usize,
    ready: Arc<Ready>,
}

impl Wake for RankWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.ready.queued[self.rank].swap(true, Ordering::SeqCst) {
            self.ready.list.lock().expect("ready lock").push(self.rank);
        }
        if let Some(w) = self.ready.outer.lock().expect("outer lock").as_ref() {
            w.wake_by_ref();
        }
    }
}

type RankFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// Runs `case` on `net.p` recorded workers (with the network model of `net` when `model`) and
/// returns their schedules. `cfg` is every worker's configuration.
pub fn record(net: &SimNet, cfg: &Config, case: &Case, model: bool) -> Result<Recorded> {
    record_tables(net, cfg, case, model).map(|(r, _)| r)
}

/// [`record`], also returning every worker's table after the call (the tests check it).
pub(crate) fn record_tables(
    net: &SimNet,
    cfg: &Config,
    case: &Case,
    model: bool,
) -> Result<(Recorded, Vec<Table>)> {
    net.check()?;
    let p = net.p;
    crate::collective::tags::check_workers(p)?;
    let algo = parse(&case.op, &case.algorithm)?;
    let topo = net.topology();
    let netmodel = match model {
        true => Some(Arc::new(net.net_model()?)),
        false => None,
    };
    let algorithm = resolved(algo, cfg, netmodel.as_deref(), &topo, case.bytes);
    let parts = case.partitions.unwrap_or(match case.op.as_str() {
        "reduce-scatter" | "regroup" | "scatter" => 4 * p,
        _ => 1,
    });
    if parts == 0 {
        return Err(Error::config("--partitions must be at least 1"));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| Error::config(format!("cannot start the simulator's runtime: {e}")))?;
    // One pool behind every worker: a frame's buffer freed by its receiver serves the next
    // frame of any worker, so the free lists hold one worker's worth, not p (the schedules do
    // not depend on where buffers come from).
    let pool = Pool::new(cfg.pool);
    let pools: Vec<Pool> = vec![pool; p];
    let (transports, recorder) = {
        let _g = rt.enter();
        Transport::recording(crate::transport::job_id("sim"), cfg.op_timeout, &pools)
    };
    let mut tables: Vec<Table> = (0..p)
        .map(|r| bench_table(&pools[r], &case.op, r, p, case.bytes, parts))
        .collect();
    let op = op_of(&case.op);
    let m = Partitioner::Modulo;
    let mut futs: Vec<Option<RankFuture<'_>>> = Vec::with_capacity(p);
    for (r, t) in tables.iter_mut().enumerate() {
        let cx = Ctx {
            ep: transports[r].endpoint(op, 0, 1, "sim"),
            pool: &pools[r],
            cfg,
            topo: &topo,
            net: netmodel.clone(),
        };
        let m = &m;
        let fut: RankFuture<'_> = Box::pin(async move {
            let cx = cx;
            match algo {
                Algo::Bcast(a) => collective::broadcast::broadcast(&cx, t, 0, a).await,
                Algo::Reduce(a) => collective::reduce::reduce(&cx, t, 0, a).await.map(|_| ()),
                Algo::Gather(a) => collective::gather::gather(&cx, t, 0, a).await,
                Algo::Scatter(a) => collective::scatter::scatter(&cx, t, 0, m, a).await,
                Algo::Allgather(a) => collective::allgather::allgather(&cx, t, a).await,
                Algo::Allreduce(AllreduceAlgorithm::Auto) => {
                    collective::allreduce::auto(&cx, t).await
                }
                Algo::Allreduce(AllreduceAlgorithm::RegroupAllgather) => {
                    collective::allreduce::regroup_allgather(&cx, t).await
                }
                Algo::Allreduce(AllreduceAlgorithm::BidirectionalExchange) => {
                    collective::allreduce::bidirectional_exchange(&cx, t).await
                }
                Algo::ReduceScatter(a) => collective::regroup::reduce_scatter(&cx, t, m, a).await,
                Algo::None if op == Op::Regroup => collective::regroup::regroup(&cx, t, m).await,
                Algo::None => collective::barrier::dissemination(&cx).await,
            }
        });
        futs.push(Some(fut));
    }
    let ready = Arc::new(Ready {
        list: Mutex::new((0..p).collect()),
        queued: (0..p).map(|_| AtomicBool::new(true)).collect(),
        outer: Mutex::new(None),
    });
    let wakers: Vec<Waker> = (0..p)
        .map(|rank| {
            Waker::from(Arc::new(RankWaker {
                rank,
                ready: ready.clone(),
            }))
        })
        .collect();
    let mut left = p;
    let mut failure: Option<Error> = None;
    let done = rt.block_on(async {
        tokio::time::timeout(
            cfg.op_timeout,
            std::future::poll_fn(|cx| {
                *ready.outer.lock().expect("outer lock") = Some(cx.waker().clone());
                loop {
                    let batch = std::mem::take(&mut *ready.list.lock().expect("ready lock"));
                    if batch.is_empty() {
                        if recorder.deliver() > 0 {
                            continue;
                        }
                        return if left == 0 || failure.is_some() {
                            Poll::Ready(())
                        } else {
                            Poll::Pending
                        };
                    }
                    for r in batch {
                        ready.queued[r].store(false, Ordering::SeqCst);
                        let Some(f) = futs[r].as_mut() else { continue };
                        let mut rcx = Context::from_waker(&wakers[r]);
                        if let Poll::Ready(res) = f.as_mut().poll(&mut rcx) {
                            futs[r] = None;
                            left -= 1;
                            if let Err(e) = res {
                                failure.get_or_insert(e);
                            }
                        }
                    }
                }
            }),
        )
        .await
    });
    drop(futs);
    if let Some(e) = failure {
        return Err(e);
    }
    if done.is_err() {
        return Err(Error::config(format!(
            "the simulated {} of {p} workers did not finish within {:?} (raise --op-timeout)",
            case.op, cfg.op_timeout
        )));
    }
    let schedules = recorder.take_schedules();
    drop(transports);
    Ok((
        Recorded {
            schedules,
            algorithm,
        },
        tables,
    ))
}

/// The default per-worker configuration of a simulation: the engine's defaults with a long
/// operation timeout (a large p takes real time to record).
pub fn config() -> Config {
    Config {
        op_timeout: Duration::from_secs(3600),
        ..Config::default()
    }
}
