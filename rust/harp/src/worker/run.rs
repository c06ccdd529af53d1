//! The operation runner: every collective of the job or of a group runs through
//! [`Worker::run`], which checks that the worker may run it (not poisoned, not inside an event
//! phase, not busy with another thread's operation), gives it the next sequence number of its
//! scope and its endpoint, and on failure poisons the worker and tells every peer why.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::collectives::OpBody;
use super::group::GroupSeq;
use super::{Collectives, Worker};
use crate::collective::Ctx;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::{Driver, Members, Transport};
use crate::wire::Op;

/// What one operation runs in: the whole job or a group, with that scope's operation counter,
/// topology and network model (in the scope's ranks).
pub(super) struct Scope<'a> {
    pub(super) members: Option<Members>,
    pub(super) seq: &'a AtomicU64,
    pub(super) topo: &'a Topology,
    pub(super) net: Option<Arc<NetModel>>,
}

/// The parts of a worker that running an operation needs, borrowed: from the [`Worker`] on the
/// caller's thread, or from the shared copies the progress thread of the non-blocking calls
/// holds (`pending.rs`).
pub struct Parts<'r> {
    pub(super) rank: usize,
    pub(super) transport: &'r Transport,
    pub(super) driver: &'r Driver,
    pub(super) pool: &'r Pool,
    pub(super) cfg: &'r Config,
    pub(super) poisoned: &'r Mutex<Option<String>>,
    pub(super) groups: &'r Mutex<HashMap<u64, GroupSeq>>,
}

impl<'r> Parts<'r> {
    /// Fails if an earlier operation failed (the worker is poisoned).
    pub(super) fn check_usable(&self) -> Result<()> {
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
    pub(super) fn fail(&self, msg: &str) {
        tracing::debug!("{msg}");
        *self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg.to_string());
        self.driver.block_on(self.transport.abort(msg));
    }

    /// Runs operation `seq` of the scope of `members` (`None`: the whole job), whose checks
    /// have passed and whose sequence number is taken: its endpoint, its body, the check for
    /// frames it left untaken, and on failure the worker is poisoned.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn execute<'a>(
        &self,
        members: Option<Members>,
        topo: &'a Topology,
        net: Option<Arc<NetModel>>,
        seq: u64,
        op: Op,
        algo: u8,
        label: &str,
        body: OpBody<'a>,
    ) -> Result<()>
    where
        'r: 'a,
    {
        let group = members.as_ref().map(|m| m.id).unwrap_or(0);
        // For a data error only: its context is built then, not on every operation.
        let world = members.as_ref().map(|m| m.world.clone());
        let cx = Ctx {
            ep: self.transport.group_endpoint(members, op, algo, seq, label),
            pool: self.pool,
            cfg: self.cfg,
            topo,
            net,
        };
        let t0 = Instant::now();
        // The body's future is boxed (`OpFuture`): a collective's future is kilobytes, and the
        // runtime would move it twice.
        let res = self.driver.block_on(body(cx));
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
}

impl Worker {
    /// The parts an operation runs with, borrowed from this worker.
    pub(super) fn parts(&self) -> Parts<'_> {
        Parts {
            rank: self.rank,
            transport: &self.transport,
            driver: &self.driver,
            pool: &self.pool,
            cfg: &self.cfg,
            poisoned: &self.poisoned,
            groups: &self.groups,
        }
    }

    /// Fails if an earlier operation failed (the worker is poisoned).
    pub(crate) fn check_usable(&self) -> Result<()> {
        self.parts().check_usable()
    }

    pub(super) fn refused(
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

    /// After a failed operation: poisons the worker and tells every peer why (`msg`).
    pub(crate) fn fail(&self, msg: &str) {
        self.parts().fail(msg)
    }

    /// The checks every call makes before its operation takes a sequence number: the worker
    /// is not poisoned, not inside an event phase, and the label fits in a frame.
    pub(super) fn check_call(&self, op: Op, label: &str) -> Result<()> {
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
        Ok(())
    }

    /// Runs one operation of `scope` (the whole job or a group): the next sequence number of
    /// that scope, the operation's endpoint, and on failure the worker is poisoned. The
    /// operations started earlier without blocking ([`super::Pending`]) run first: a blocking
    /// call waits for them.
    pub(super) fn run<'a>(
        &'a self,
        scope: Scope<'a>,
        op: Op,
        algo: u8,
        label: &str,
        body: OpBody<'a>,
    ) -> Result<()> {
        self.check_call(op, label)?;
        self.inflight.drain();
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
        // An earlier operation started without blocking may have failed meanwhile.
        self.check_usable()?;
        let seq = scope.seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.parts().execute(
            scope.members,
            scope.topo,
            scope.net,
            seq,
            op,
            algo,
            label,
            body,
        )
    }
}

impl Collectives for Worker {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn pool(&self) -> &Pool {
        &self.pool
    }
    fn config(&self) -> &Config {
        &self.cfg
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }
    fn net_model(&self) -> Option<Arc<NetModel>> {
        Worker::net_model(self)
    }
    fn worker(&self) -> &Worker {
        self
    }
    fn refuse(&self, op: Op, label: &str, e: Error) -> Error {
        self.refused(&self.seq, None, op, label, e)
    }

    fn run_op<'a>(&'a self, op: Op, algo: u8, label: &str, body: OpBody<'a>) -> Result<()> {
        let scope = Scope {
            members: None,
            seq: &self.seq,
            topo: &self.topo,
            net: self.net_model(),
        };
        self.run(scope, op, algo, label, body)
    }
    fn launch_scope(&self) -> (&AtomicU64, super::pending::Launch) {
        let scope = super::pending::Launch {
            members: None,
            topo: self.topo.clone(),
            net: self.net_model(),
        };
        (&self.seq, scope)
    }
}
