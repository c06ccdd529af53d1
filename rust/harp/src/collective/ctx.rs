//! What every algorithm runs with: the operation's context ([`Ctx`]), the partition-id map
//! and the check of a rooted operation's root.

use std::sync::Arc;

use crate::config::Config;
use crate::data::{Partitioner, Table};
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::Endpoint;

/// A map keyed by partition id with the engine's fast hasher
/// ([`KeyHasher`](crate::data::kv::KeyHasher)) instead of SipHash: the algorithms look up a
/// partition's owner several times per partition per call, which showed at a few per cent of a
/// small reduce-scatter's CPU samples.
pub type IdMap<V> = crate::data::kv::FastMap<u32, V>;

/// The owner under `part` of every partition of `table`, among `p` workers.
pub(crate) fn owners(table: &Table, part: &Partitioner, p: usize) -> Result<IdMap<usize>> {
    table
        .iter()
        .map(|(id, _)| Ok((id, part.owner(id, p)?)))
        .collect()
}

/// Everything an algorithm needs for one operation.
pub struct Ctx<'a> {
    pub ep: Endpoint<'a>,
    pub pool: &'a Pool,
    pub cfg: &'a Config,
    pub topo: &'a Topology,
    /// The measured network, when one was measured or given (`Worker::set_net_model`).
    pub net: Option<Arc<NetModel>>,
}

impl Ctx<'_> {
    pub fn rank(&self) -> usize {
        self.ep.rank()
    }
    pub fn size(&self) -> usize {
        self.ep.size()
    }
}

/// Fails unless `root` is a rank of the operation's scope: a worker of the job, or inside a
/// group a group rank (`what` names the operation's root, e.g. "broadcast root").
pub(crate) fn check_root(cx: &Ctx<'_>, root: usize, what: &str) -> Result<()> {
    if root >= cx.size() {
        let scope = match cx.ep.is_group() {
            true => format!("a group rank (the group has {} members)", cx.size()),
            false => format!("a worker (there are {})", cx.size()),
        };
        return Err(Error::config(format!("{what} {root} is not {scope}")));
    }
    Ok(())
}
