//! Groups: collectives over a subset of a job's workers, in group ranks, with a sequence of
//! operations of their own.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::collectives::OpBody;
use super::run::Scope;
use super::{Collectives, Worker};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::Members;
use crate::wire::Op;

/// A group's members and the counter of its operations.
pub(super) type GroupSeq = (Arc<[usize]>, Arc<AtomicU64>);

impl Worker {
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
    /// The members' world ranks in group-rank order.
    pub fn members(&self) -> &[usize] {
        &self.members.world
    }
    /// The id the group's frames carry.
    pub fn id(&self) -> u64 {
        self.members.id
    }
    /// The worker this group belongs to.
    pub fn worker(&self) -> &Worker {
        self.w
    }
}

impl Collectives for Group<'_> {
    /// This worker's group rank.
    fn rank(&self) -> usize {
        self.members.me
    }
    /// The number of members.
    fn size(&self) -> usize {
        self.members.world.len()
    }
    fn pool(&self) -> &Pool {
        self.w.pool()
    }
    fn config(&self) -> &Config {
        self.w.config()
    }
    /// The members' hosts and racks, in group-rank order.
    fn topology(&self) -> &Topology {
        &self.topo
    }
    /// The worker's model restricted to the members.
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
    fn worker(&self) -> &Worker {
        self.w
    }
    /// [`Worker::refuse`] for an operation of this group.
    fn refuse(&self, op: Op, label: &str, e: Error) -> Error {
        let world = Some(self.members.world.clone());
        self.w.refused(&self.seq, world, op, label, e)
    }
    fn run_op<'a>(&'a self, op: Op, algo: u8, label: &str, body: OpBody<'a>) -> Result<()> {
        let scope = Scope {
            members: Some(self.members.clone()),
            seq: &self.seq,
            topo: &self.topo,
            net: self.net_model(),
        };
        self.w.run(scope, op, algo, label, body)
    }
    fn launch_scope(&self) -> (&AtomicU64, super::pending::Launch) {
        let scope = super::pending::Launch {
            members: Some(self.members.clone()),
            topo: self.topo.clone(),
            net: self.net_model(),
        };
        (&self.seq, scope)
    }
}
