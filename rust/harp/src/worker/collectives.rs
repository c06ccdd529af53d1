//! [`Collectives`]: every collective, written once as a default method over one required
//! "run this operation" method ([`Collectives::run_op`]), for the whole job ([`Worker`]) and
//! for a sub-group ([`Group`]). In a group, "every worker" below means every member, and ranks
//! are group ranks.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use super::pending::{Launch, Pending};
use super::{Group, Worker};
use crate::collective::{
    self, choose, costs, segment, AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, Ctx,
    GatherAlgorithm, ReduceAlgorithm, ReduceScatterAlgorithm, ScatterAlgorithm,
};
use crate::config::Config;
use crate::data::{Partitioner, Table};
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::wire::Op;

/// The options of one collective call: its algorithm (default: the automatic choice) and, for
/// the rooted collectives (broadcast, reduce, gather, scatter), its root (default 0, a rank of
/// the job or the group). Built from `Opts::default()`:
/// `w.allreduce("sums", &mut t, Opts::default().algorithm(AllreduceAlgorithm::RegroupAllgather))`,
/// `w.broadcast("model", &mut t, Opts::default().root(2))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opts<A> {
    pub algorithm: A,
    pub root: usize,
}

impl<A: Algorithm> Default for Opts<A> {
    fn default() -> Self {
        Opts {
            algorithm: A::AUTO,
            root: 0,
        }
    }
}

impl<A> Opts<A> {
    /// Runs the collective with `algorithm` instead of the automatic choice.
    pub fn algorithm(self, algorithm: A) -> Self {
        Opts { algorithm, ..self }
    }
}

impl<A: Rooted> Opts<A> {
    /// The rank the rooted collective starts from or ends at.
    pub fn root(self, root: usize) -> Self {
        Opts { root, ..self }
    }
}

/// The algorithm type of a collective, with its automatic choice.
pub trait Algorithm: Copy {
    /// The automatic choice ([`Opts::default`]).
    const AUTO: Self;
}

/// The algorithm type of a rooted collective: its [`Opts`] take a root.
pub trait Rooted: Algorithm {}

/// `impl Algorithm` (automatic choice: the `Auto` variant) for each type.
macro_rules! auto_is_default {
    ($($t:ident),*) => {
        $(impl Algorithm for $t {
            const AUTO: Self = $t::Auto;
        })*
    };
}
auto_is_default!(
    AllgatherAlgorithm,
    AllreduceAlgorithm,
    BroadcastAlgorithm,
    GatherAlgorithm,
    ReduceAlgorithm,
    ReduceScatterAlgorithm,
    ScatterAlgorithm
);
impl Rooted for BroadcastAlgorithm {}
impl Rooted for GatherAlgorithm {}
impl Rooted for ReduceAlgorithm {}
impl Rooted for ScatterAlgorithm {}

/// The work of one operation, run by [`Collectives::run_op`] on the endpoint of its scope.
pub type OpBody<'a> = Box<dyn FnOnce(Ctx<'a>) -> OpFuture<'a> + 'a>;
/// The future an [`OpBody`] returns.
pub type OpFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// An [`OpBody`] from a closure returning any future.
pub(crate) fn body<'a, Fut>(f: impl FnOnce(Ctx<'a>) -> Fut + 'a) -> OpBody<'a>
where
    Fut: Future<Output = Result<()>> + 'a,
{
    Box::new(move |cx| Box::pin(f(cx)))
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Worker {}
    impl Sealed for super::Group<'_> {}
}

/// The collectives of the whole job ([`Worker`]) or of a group ([`Group`]); code that runs on
/// either (e.g. [`crate::check::run`]) takes `&impl Collectives` or `&dyn Collectives`. Bring
/// the trait into scope (`use harp::Collectives`) to call them.
pub trait Collectives: sealed::Sealed {
    /// This worker's rank in the job or the group.
    fn rank(&self) -> usize;
    /// The number of workers in the job or the group.
    fn size(&self) -> usize;
    /// The worker's memory pool.
    fn pool(&self) -> &Pool;
    /// The worker's engine configuration.
    fn config(&self) -> &Config;
    /// The hosts and racks of the job or the group, in its rank order.
    fn topology(&self) -> &Topology;
    /// The network model in the ranks of the job or the group, if any.
    fn net_model(&self) -> Option<Arc<NetModel>>;
    /// The worker the job or the group belongs to.
    fn worker(&self) -> &Worker;
    /// The arguments of collective `op` (about to run as the next operation of the job or the
    /// group) failed a check on this worker before anything was sent. The peers cannot see
    /// that: they would wait for this worker's frames until the timeout. So this worker fails
    /// as a failed collective does (it is poisoned, and every peer is told why at once) and the
    /// error returned says where (a data error gets the rank, the operation and its label).
    fn refuse(&self, op: Op, label: &str, e: Error) -> Error;
    /// Runs one operation: the next sequence number of the job or the group, `body` on the
    /// operation's endpoint, and on failure the worker is poisoned (`algo` is the algorithm
    /// code the frames carry).
    fn run_op<'a>(&'a self, op: Op, algo: u8, label: &str, body: OpBody<'a>) -> Result<()>;
    /// The operation counter of the job or the group and where its operations run, owned (for
    /// the non-blocking calls).
    #[doc(hidden)]
    fn launch_scope(&self) -> (&AtomicU64, Launch);

    /// Waits until every member has called `barrier`.
    fn barrier(&self, label: &str) -> Result<()> {
        self.run_op(
            Op::Barrier,
            0,
            label,
            body(|cx| async move { collective::barrier::dissemination(&cx).await }),
        )
    }

    /// Every worker's table becomes a copy of the root's.
    fn broadcast(
        &self,
        label: &str,
        table: &mut Table,
        opts: Opts<BroadcastAlgorithm>,
    ) -> Result<()> {
        let Opts {
            algorithm: algo,
            root,
        } = opts;
        let t0 = Instant::now();
        let t = &mut *table;
        self.run_op(
            Op::Broadcast,
            algo.code(),
            label,
            body(move |cx| async move {
                cx.ep.set_root(root);
                collective::broadcast::broadcast(&cx, t, root, algo).await
            }),
        )?;
        predicted(self, "broadcast", t0, |m| {
            let n = table.bytes();
            let cfg = self.config();
            let topo = self.topology();
            let chunk = segment::chunk(cfg, n, self.size());
            let a = algo.resolve(n, cfg.broadcast_crossover, Some(m), topo, root, chunk);
            costs::predict_broadcast(m, topo, a, root, n, chunk)
        });
        Ok(())
    }

    /// The root's table becomes the combination of all tables; the others are emptied.
    fn reduce(&self, label: &str, table: &mut Table, opts: Opts<ReduceAlgorithm>) -> Result<()> {
        let Opts {
            algorithm: algo,
            root,
        } = opts;
        let t0 = Instant::now();
        let code = crate::wire::with_combiner(algo.code(), table.combiner().code());
        let t = &mut *table;
        let mut ran = None;
        let out = &mut ran;
        self.run_op(
            Op::Reduce,
            code,
            label,
            body(move |cx| async move {
                cx.ep.set_root(root);
                *out = Some(collective::reduce::reduce(&cx, t, root, algo).await?);
                Ok(())
            }),
        )?;
        if let (true, Some(ran)) = (self.rank() == root, ran) {
            predicted(self, "reduce", t0, |m| {
                let crossover = self.config().allreduce_crossover;
                choose::predict_reduce(m, self.topology(), ran, root, table.bytes(), crossover)
            });
        }
        Ok(())
    }

    /// The root's table becomes the union of all tables; the others are unchanged.
    fn gather(&self, label: &str, table: &mut Table, opts: Opts<GatherAlgorithm>) -> Result<()> {
        let Opts {
            algorithm: algo,
            root,
        } = opts;
        let t0 = Instant::now();
        let t = &mut *table;
        self.run_op(
            Op::Gather,
            algo.code(),
            label,
            body(move |cx| async move {
                cx.ep.set_root(root);
                collective::gather::gather(&cx, t, root, algo).await
            }),
        )?;
        if self.rank() == root {
            predicted(self, "gather", t0, |m| {
                let a = algo.resolve(Some(m), root);
                costs::predict_gather(m, a, root, table.bytes() / self.size() as u64)
            });
        }
        Ok(())
    }

    /// The root's partitions are spread to their owners under `part`.
    fn scatter(
        &self,
        label: &str,
        table: &mut Table,
        part: &Partitioner,
        opts: Opts<ScatterAlgorithm>,
    ) -> Result<()> {
        let Opts {
            algorithm: algo,
            root,
        } = opts;
        let t0 = Instant::now();
        let n = table.bytes() / self.size() as u64;
        self.run_op(
            Op::Scatter,
            algo.code(),
            label,
            body(move |cx| async move {
                cx.ep.set_root(root);
                collective::scatter::scatter(&cx, table, root, part, algo).await
            }),
        )?;
        if self.rank() == root {
            predicted(self, "scatter", t0, |m| {
                let a = algo.resolve(Some(m), root);
                costs::predict_scatter(m, a, root, n)
            });
        }
        Ok(())
    }

    /// Every table becomes the union of all tables.
    fn allgather(
        &self,
        label: &str,
        table: &mut Table,
        opts: Opts<AllgatherAlgorithm>,
    ) -> Result<()> {
        let algo = opts.algorithm;
        self.run_op(
            Op::Allgather,
            algo.code(),
            label,
            body(move |cx| async move { collective::allgather::allgather(&cx, table, algo).await }),
        )
    }

    /// Every table becomes the combination of all tables (bit-identical everywhere).
    fn allreduce(
        &self,
        label: &str,
        table: &mut Table,
        opts: Opts<AllreduceAlgorithm>,
    ) -> Result<()> {
        let algo = opts.algorithm;
        let code = crate::wire::with_combiner(algo.code(), table.combiner().code());
        self.run_op(
            Op::Allreduce,
            code,
            label,
            body(move |cx| async move { allreduce_with(&cx, table, algo).await }),
        )
    }

    /// Each worker ends with the combined partitions it owns under `part`.
    fn reduce_scatter(
        &self,
        label: &str,
        table: &mut Table,
        part: &Partitioner,
        opts: Opts<ReduceScatterAlgorithm>,
    ) -> Result<()> {
        let algo = opts.algorithm;
        let code = crate::wire::with_combiner(algo.code(), table.combiner().code());
        self.run_op(
            Op::ReduceScatter,
            code,
            label,
            body(move |cx| async move {
                collective::regroup::reduce_scatter(&cx, table, part, algo).await
            }),
        )
    }

    /// Partitions move to their owners under `part` and are combined there. `None` asks the
    /// master to decide the owners from the actual distribution (two extra control rounds).
    fn regroup(&self, label: &str, table: &mut Table, part: Option<&Partitioner>) -> Result<()> {
        let code = crate::wire::with_combiner(part.is_some() as u8, table.combiner().code());
        self.run_op(
            Op::Regroup,
            code,
            label,
            body(move |cx| async move {
                match part {
                    Some(p) => collective::regroup::regroup(&cx, table, p).await,
                    None => {
                        let planned = collective::regroup::plan(&cx, table).await?;
                        collective::regroup::regroup(&cx, table, &planned).await
                    }
                }
            }),
        )
    }

    /// Local partitions are combined into their owners' global tables.
    fn push(
        &self,
        label: &str,
        local: &Table,
        global: &mut Table,
        part: &Partitioner,
    ) -> Result<()> {
        let code = crate::wire::with_combiner(0, global.combiner().code());
        self.run_op(
            Op::Push,
            code,
            label,
            body(
                move |cx| async move { collective::regroup::push(&cx, local, global, part).await },
            ),
        )
    }

    /// Local partitions are replaced by their owners' global copies.
    fn pull(
        &self,
        label: &str,
        local: &mut Table,
        global: &Table,
        part: &Partitioner,
    ) -> Result<()> {
        self.run_op(
            Op::Pull,
            0,
            label,
            body(
                move |cx| async move { collective::regroup::pull(&cx, local, global, part).await },
            ),
        )
    }

    /// Tables move along the permutation `map` (default: to the next rank).
    fn rotate(&self, label: &str, table: &mut Table, map: Option<&[usize]>) -> Result<()> {
        self.run_op(
            Op::Rotate,
            0,
            label,
            body(move |cx| async move { collective::regroup::rotate(&cx, table, map).await }),
        )
    }

    // The non-blocking calls (`pending.rs`): each starts the blocking call of the same name
    // as the next operation of the job or the group, on the worker's progress thread, and
    // returns at once; its handle's `wait` gives back the tables, changed as the blocking call
    // changes them. Every worker starts them in the same order; they complete in that order.
    // The network model's drift window does not record them.

    /// [`Collectives::barrier`], started without blocking.
    fn barrier_start(&self, label: &str) -> Result<Pending<()>> {
        start(self, Op::Barrier, 0, label, (), |cx, _| {
            Box::pin(async move { collective::barrier::dissemination(&cx).await })
        })
    }

    /// [`Collectives::broadcast`], started without blocking.
    fn broadcast_start(
        &self,
        label: &str,
        table: Table,
        opts: Opts<BroadcastAlgorithm>,
    ) -> Result<Pending<Table>> {
        let Opts {
            algorithm: algo,
            root,
        } = opts;
        start(
            self,
            Op::Broadcast,
            algo.code(),
            label,
            table,
            move |cx, t| {
                Box::pin(async move {
                    cx.ep.set_root(root);
                    collective::broadcast::broadcast(&cx, t, root, algo).await
                })
            },
        )
    }

    /// [`Collectives::allgather`], started without blocking.
    fn allgather_start(
        &self,
        label: &str,
        table: Table,
        opts: Opts<AllgatherAlgorithm>,
    ) -> Result<Pending<Table>> {
        let code = opts.algorithm.code();
        start(self, Op::Allgather, code, label, table, move |cx, t| {
            Box::pin(async move { collective::allgather::allgather(&cx, t, opts.algorithm).await })
        })
    }

    /// [`Collectives::allreduce`], started without blocking.
    fn allreduce_start(
        &self,
        label: &str,
        table: Table,
        opts: Opts<AllreduceAlgorithm>,
    ) -> Result<Pending<Table>> {
        let algo = opts.algorithm;
        let code = crate::wire::with_combiner(algo.code(), table.combiner().code());
        start(self, Op::Allreduce, code, label, table, move |cx, t| {
            Box::pin(async move { allreduce_with(&cx, t, algo).await })
        })
    }

    /// [`Collectives::push`] of `(local, global)`, started without blocking: the handle gives
    /// them back, `global` with the pushed partitions combined in.
    fn push_start(
        &self,
        label: &str,
        tables: (Table, Table),
        part: Partitioner,
    ) -> Result<Pending<(Table, Table)>> {
        let code = crate::wire::with_combiner(0, tables.1.combiner().code());
        start_pair(self, Op::Push, code, label, tables, part)
    }

    /// [`Collectives::pull`] of `(local, global)`, started without blocking: the handle gives
    /// them back, `local` replaced by the owners' copies.
    fn pull_start(
        &self,
        label: &str,
        tables: (Table, Table),
        part: Partitioner,
    ) -> Result<Pending<(Table, Table)>> {
        start_pair(self, Op::Pull, 0, label, tables, part)
    }

    /// [`Collectives::rotate`], started without blocking: the handle gives back the table
    /// received from the previous rank (or from the rank `map` sends to this one).
    fn rotate_start(
        &self,
        label: &str,
        table: Table,
        map: Option<Vec<usize>>,
    ) -> Result<Pending<Table>> {
        start(self, Op::Rotate, 0, label, table, move |cx, t| {
            Box::pin(async move { collective::regroup::rotate(&cx, t, map.as_deref()).await })
        })
    }
}

/// Seconds since `t0` recorded in the worker's drift window against `predict()` on the model of
/// `c` (the job's or the group's), when one is set.
fn predicted<C: Collectives + ?Sized>(
    c: &C,
    op: &str,
    t0: Instant,
    predict: impl FnOnce(&NetModel) -> f64,
) {
    c.worker().predicted_on(c.net_model(), op, t0, predict)
}

/// Starts `f` on `state` as the next operation of `c` (the job or a group).
fn start<C, T, F>(c: &C, op: Op, algo: u8, label: &str, state: T, f: F) -> Result<Pending<T>>
where
    C: Collectives + ?Sized,
    T: Send + 'static,
    F: for<'a> FnOnce(Ctx<'a>, &'a mut T) -> OpFuture<'a> + Send + 'static,
{
    let (seq, scope) = c.launch_scope();
    c.worker().launch(seq, scope, op, algo, label, state, f)
}

/// The allreduce of `algo` on `t`, blocking or not.
async fn allreduce_with(cx: &Ctx<'_>, t: &mut Table, algo: AllreduceAlgorithm) -> Result<()> {
    match algo {
        AllreduceAlgorithm::Auto => collective::allreduce::auto(cx, t).await,
        AllreduceAlgorithm::RegroupAllgather => {
            collective::allreduce::regroup_allgather(cx, t).await
        }
        AllreduceAlgorithm::BidirectionalExchange => {
            collective::allreduce::bidirectional_exchange(cx, t).await
        }
    }
}

/// [`Collectives::push_start`] (`op` push) or [`Collectives::pull_start`] (`op` pull).
fn start_pair<C: Collectives + ?Sized>(
    c: &C,
    op: Op,
    code: u8,
    label: &str,
    tables: (Table, Table),
    part: Partitioner,
) -> Result<Pending<(Table, Table)>> {
    start(c, op, code, label, tables, move |cx, s| {
        Box::pin(async move {
            let (local, global) = s;
            match op {
                Op::Push => collective::regroup::push(&cx, local, global, &part).await,
                _ => collective::regroup::pull(&cx, local, global, &part).await,
            }
        })
    })
}
