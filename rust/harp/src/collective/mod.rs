//! Collective operations. One file per family, one function per algorithm; the cost of each
//! algorithm is in its doc comment with α the per-message latency, β the time per byte, n the
//! bytes involved and p the number of workers. Every automatic choice lives in [`choose`].
//!
//! All algorithms move *pieces*: byte ranges of partitions (a whole partition is one piece).
//! Large pieces are written straight from the partition's pooled buffer and received straight
//! into a pooled buffer that becomes the partition (no copy) when the piece is whole.
//!
//! The machinery shared by the algorithms, one file each: [`framing`] (batches of pieces on
//! the wire), [`assemble`] (received pieces into tables), [`segment`] (cutting partitions into
//! ranges), [`tags`] (the tag range of every phase), [`join`] (concurrent sends and receives).

use std::sync::Arc;

use crate::config::Config;
use crate::data::{Partitioner, Table};
use crate::netmodel::NetModel;
use crate::pool::Pool;
use crate::topology::Topology;
use crate::transport::Endpoint;

pub mod allgather;
pub mod allreduce;
pub mod assemble;
pub mod barrier;
pub mod broadcast;
pub mod choose;
pub mod framing;
pub mod hierarchy;
pub mod join;
pub mod pipeline;
pub mod regroup;
pub mod rooted;
pub mod segment;
pub mod tags;

pub use allgather::AllgatherAlgorithm;
pub use allreduce::AllreduceAlgorithm;
pub use assemble::{absorb, write_pieces, Assembler};
pub use broadcast::BroadcastAlgorithm;
pub use framing::{
    parse_head, recv_batch, recv_head, recv_pieces, send_batch, send_batch_inline, send_batch_many,
    table_pieces, BatchHead, In, Out,
};
pub use join::{boxed, join_all};
pub use regroup::ReduceScatterAlgorithm;
pub use rooted::{GatherAlgorithm, ReduceAlgorithm};
pub use segment::{split_ranges, Segmenter};

/// A map keyed by partition id with the engine's fast hasher
/// ([`KeyHasher`](crate::data::kv::KeyHasher)) instead of SipHash: the algorithms look up a
/// partition's owner several times per partition per call, which showed at a few per cent of a
/// small reduce-scatter's CPU samples.
pub type IdMap<V> = crate::data::kv::FastMap<u32, V>;

/// The owner under `part` of every partition of `table`, among `p` workers.
fn owners(table: &Table, part: &Partitioner, p: usize) -> crate::error::Result<IdMap<usize>> {
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
