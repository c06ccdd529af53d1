//! Graph collectives (the Harp paper's Table 2, graph column): functions over a [`Worker`]
//! that move edge partitions ([`crate::data::graph`]) and message partitions (key-value
//! tables keyed by destination vertex, [`crate::data::kv`]) to the workers holding their
//! vertices. They are built on [`Worker::regroup`] and [`Worker::allgather`]: every worker
//! must call them in the same order, like any collective.
//!
//! # Where a vertex lives
//!
//! With `P` vertex partitions and `W` workers, vertex `v` belongs to partition
//! `vertex_partition(v, P)` (the stable hash of i64 keys of key-value tables, modulo `P`) and
//! partition `pid` is held by worker [`owner`]`(pid, W) = pid mod W`
//! ([`Partitioner::Modulo`], the default of every regroup), on every worker. So a vertex's
//! value, its out-edges (after [`regroup_edges`] by source) and the messages sent to it
//! ([`send_messages`]) meet on the same worker.

use std::collections::BTreeMap;

use crate::collective::AllgatherAlgorithm;
use crate::data::graph::{vertex_partition, EdgeBuilder, Edges, Endpoint};
use crate::data::kv::{KeyType, KvTable};
use crate::data::{Array, Combiner, Layout, Partitioner, Table};
use crate::error::{Error, Result};
use crate::worker::Worker;

/// The worker holding partition `pid` among `workers`: `pid mod workers` (the same function
/// on every worker: [`Partitioner::Modulo`]).
pub fn owner(pid: u32, workers: usize) -> usize {
    pid as usize % workers
}

/// The worker holding vertex `v` when vertices are cut into `partitions` partitions.
pub fn vertex_owner(v: i64, partitions: u32, workers: usize) -> usize {
    owner(vertex_partition(v, partitions), workers)
}

/// Local step of the edge collectives: the edges of every partition of `edges` re-bucketed
/// into partition ids `vertex_partition(endpoint, partitions)`, as a table of edge partitions
/// (the caller's partitions are consumed). All partitions must have the same layout.
fn rebucket(
    edges: &mut Table,
    by: Endpoint,
    partitions: u32,
) -> Result<BTreeMap<u32, EdgeBuilder>> {
    if partitions == 0 {
        return Err(Error::config("edges need at least one vertex partition"));
    }
    let mut weighted = None;
    let mut out: BTreeMap<u32, EdgeBuilder> = BTreeMap::new();
    for part in edges.take_all() {
        let e = Edges::of(&part.data)
            .map_err(|e| Error::data(format!("partition {}: {e}", part.id)))?;
        if *weighted.get_or_insert(e.weighted()) != e.weighted() {
            return Err(Error::data(format!(
                "partition {}: an edge table mixes weighted and unweighted edges",
                part.id
            )));
        }
        for i in 0..e.len() {
            let edge = e.get(i);
            let pid = vertex_partition(edge.endpoint(by), partitions);
            out.entry(pid)
                .or_insert_with(|| EdgeBuilder::new(e.weighted()))
                .push_edge(edge);
        }
    }
    Ok(out)
}

fn into_table(w: &Worker, edges: &mut Table, parts: BTreeMap<u32, EdgeBuilder>) {
    *edges = Table::new(Combiner::Sum);
    for (pid, b) in parts {
        edges.put(pid, b.build(w.pool()));
    }
}

/// Regroup edges: every edge of `edges` goes to partition `vertex_partition(src or dst,
/// partitions)` and each partition to its [`owner`]; partitions with the same id are
/// concatenated. Afterwards each worker holds exactly the edge partitions of its vertices
/// (every out-edge of its vertices for `Endpoint::Src`), whatever partitions it held before.
/// Cost: one pass over the local edges, then one regroup (all-to-all) of the edge bytes.
pub fn regroup_edges(
    w: &Worker,
    label: &str,
    edges: &mut Table,
    by: Endpoint,
    partitions: u32,
) -> Result<()> {
    let parts = rebucket(edges, by, partitions)?;
    into_table(w, edges, parts);
    w.regroup(label, edges, Some(&Partitioner::Modulo))
}

/// Send edges to vertices: every edge goes to the worker that holds the vertex partition of
/// its `by` endpoint in `vertices` (a table of vertex partitions with ids in `0..partitions`,
/// wherever an earlier collective left them), as edge partition `vertex_partition(endpoint,
/// partitions)`. A vertex partition no worker holds falls back to its [`owner`]. Cost: an
/// allgather of the vertex partition ids (4 bytes each), one pass over the local edges, one
/// regroup of the edge bytes.
pub fn send_edges_to_vertices(
    w: &Worker,
    label: &str,
    edges: &mut Table,
    by: Endpoint,
    vertices: &Table,
    partitions: u32,
) -> Result<()> {
    // Who holds which vertex partition: every worker's ids, as one partition per worker.
    let mine: Vec<i64> = vertices.ids().into_iter().map(i64::from).collect();
    let mut held = Table::new(Combiner::Reject);
    held.put(w.rank() as u32, Array::from_slice(w.pool(), &mine));
    w.allgather(label, &mut held, AllgatherAlgorithm::Ring)?;
    let mut map = std::collections::HashMap::new();
    for (rank, ids) in held.iter() {
        for &pid in ids.as_slice::<i64>()? {
            let pid = u32::try_from(pid)
                .map_err(|_| Error::data(format!("vertex partition id {pid} out of range")))?;
            if (rank as usize) < w.size() {
                // Two holders: the lower rank (the table is iterated in rank order).
                map.entry(pid).or_insert(rank as usize);
            }
        }
    }
    let parts = rebucket(edges, by, partitions)?;
    into_table(w, edges, parts);
    w.regroup(
        label,
        edges,
        Some(&Partitioner::Map(std::sync::Arc::new(map))),
    )
}

/// Send messages to vertices: `messages` is a key-value message table being built (destination
/// vertex id, an i64 key → message), whose partitions are by destination-vertex hash
/// (`vertex_partition(dst, P)`, P = `messages.partitions()`); messages to the same vertex from
/// this worker were already combined on insert (local aggregation). Each partition moves to its
/// [`owner`] and equal keys from different workers are combined there with the table's
/// combiner: the owner's own messages first, then the others' in rank order. Returns the
/// message partitions this worker owns. Cost: encoding the local table (one sort per
/// partition), one regroup of the encoded bytes.
pub fn send_messages(w: &Worker, label: &str, messages: KvTable) -> Result<Table> {
    if let Layout::KeyValue { key, .. } = messages.layout() {
        if key != KeyType::I64 {
            return Err(Error::config(format!(
                "{label}: messages are keyed by vertex id (i64), not {}",
                key.name()
            )));
        }
    }
    let mut t = messages.into_table(w.pool())?;
    w.regroup(label, &mut t, Some(&Partitioner::Modulo))?;
    Ok(t)
}
