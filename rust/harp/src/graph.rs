//! Graph collectives (the Harp paper's Table 2, graph column): functions over a [`Worker`]
//! or a [`Group`](crate::worker::Group) (any [`Collectives`]; in a group, workers, ranks and
//! owners below are the members and their group ranks) that move edge partitions
//! ([`crate::data::graph`]) and message partitions (key-value tables keyed by destination
//! vertex, [`crate::data::kv`]) to the workers holding their vertices. They are built on
//! [`Worker::regroup`] and [`Worker::allgather`]: every worker must call them in the same
//! order, like any collective.
//!
//! # Where a vertex lives
//!
//! With `P` vertex partitions and `W` workers, vertex `v` belongs to partition
//! `vertex_partition(v, P)` (the stable hash of i64 keys of key-value tables, modulo `P`) and
//! partition `pid` is held by worker [`owner`]`(pid, W) = pid mod W`
//! ([`Partitioner::Modulo`], the default of every regroup), on every worker. So a vertex's
//! value, its out-edges (after [`regroup_edges`] by source) and the messages sent to it
//! ([`send_messages`]) meet on the same worker.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use crate::collective::AllgatherAlgorithm;
use crate::data::graph::{vertex_partition, Edges, Endpoint};
use crate::data::kv::{FastMap, Key, KeyType, Value, ValueType, Writer};
use crate::data::{Array, Combiner, Elem, Layout, Partitioner, Table};
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::wire::Op;
use crate::worker::Collectives;
#[cfg(doc)]
use crate::worker::Worker;
use crate::Opts;

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
/// into partition ids `vertex_partition(endpoint, partitions)` ([`bucket_edges`]); the
/// caller's partitions are consumed. All partitions must have the same layout.
fn rebucket(pool: &Pool, edges: &mut Table, by: Endpoint, partitions: u32) -> Result<Table> {
    // Checked and copied before the table is emptied: a table that fails keeps its edges.
    let ids: Vec<u32> = edges.iter().map(|(id, _)| id).collect();
    let views = edges
        .iter()
        .map(|(id, a)| Edges::of(a).map_err(|e| Error::data(format!("partition {id}: {e}"))))
        .collect::<Result<Vec<Edges<'_>>>>()?;
    if let Some(i) = mixed(&views) {
        return Err(Error::data(format!("partition {}: {MIXED}", ids[i])));
    }
    let out = bucket(pool, &views, by, partitions)?;
    edges.clear();
    Ok(out)
}

const MIXED: &str = "an edge table mixes weighted and unweighted edges";

/// The first of `edges` whose weightedness differs from the first's, if any.
fn mixed(edges: &[Edges<'_>]) -> Option<usize> {
    let weighted = edges.first()?.weighted();
    edges.iter().position(|e| e.weighted() != weighted)
}

/// The edges of `edges` (all weighted or all unweighted) as a table of edge partitions with
/// ids `vertex_partition(endpoint, partitions)` and the `sum` combiner (equal ids append),
/// each record copied unchanged, in order. Two passes: the edges of each partition are counted,
/// then copied into a pool buffer of exactly that size, so they are held once more, not in
/// growing buffers that are then copied again. Followed by a regroup with
/// [`Partitioner::Modulo`] it is [`regroup_edges`] for edges that are not in a table yet.
pub fn bucket_edges(
    pool: &Pool,
    edges: &[Edges<'_>],
    by: Endpoint,
    partitions: u32,
) -> Result<Table> {
    if mixed(edges).is_some() {
        return Err(Error::data(MIXED));
    }
    bucket(pool, edges, by, partitions)
}

/// [`bucket_edges`] of edges already checked to be all weighted or all unweighted.
fn bucket(pool: &Pool, edges: &[Edges<'_>], by: Endpoint, partitions: u32) -> Result<Table> {
    if partitions == 0 {
        return Err(Error::config("edges need at least one vertex partition"));
    }
    let weighted = edges.first().is_some_and(|e| e.weighted());
    let unit = crate::data::graph::edge_bytes(weighted);
    let total = edges.iter().map(|e| e.len()).sum();
    // Slot of each partition id: a direct index when the ids are few next to the edges.
    let mut slots = PidSlots::new(partitions, total);
    let each = |f: &mut dyn FnMut(u32, &[u8])| {
        for e in edges {
            for i in 0..e.len() {
                f(
                    vertex_partition(e.get(i).endpoint(by), partitions),
                    e.record_bytes(i, i + 1),
                );
            }
        }
    };
    let mut count: Vec<usize> = Vec::new();
    each(&mut |pid, _| {
        let s = slots.get_or_add(pid);
        if s == count.len() {
            count.push(0);
        }
        count[s] += 1;
    });
    let mut out: Vec<(crate::pool::Buf, usize)> =
        count.iter().map(|&n| (pool.get(n * unit), 0)).collect();
    each(&mut |pid, rec| {
        let (buf, at) = &mut out[slots.get_or_add(pid)];
        buf.as_mut_slice()[*at..*at + rec.len()].copy_from_slice(rec);
        *at += rec.len();
    });
    let mut t = Table::new(Combiner::Sum);
    for (pid, (buf, _)) in slots.into_pids().into_iter().zip(out) {
        t.put(pid, Array::from_layout(Layout::Edges { weighted }, buf)?);
    }
    Ok(t)
}

/// Partition id → dense slot (in order of first appearance), for [`bucket_edges`]: a direct
/// table of `partitions` entries when that is at most 4 per edge (or 65,536), else a hash map.
enum PidSlots {
    Direct(Vec<u32>, Vec<u32>),
    Hashed(FastMap<u32, usize>, Vec<u32>),
}

impl PidSlots {
    fn new(partitions: u32, edges: usize) -> PidSlots {
        if partitions as usize <= (4 * edges).max(1 << 16) {
            PidSlots::Direct(vec![u32::MAX; partitions as usize], Vec::new())
        } else {
            PidSlots::Hashed(HashMap::default(), Vec::new())
        }
    }
    fn get_or_add(&mut self, pid: u32) -> usize {
        match self {
            PidSlots::Direct(slot, pids) => {
                let s = &mut slot[pid as usize];
                if *s == u32::MAX {
                    *s = pids.len() as u32;
                    pids.push(pid);
                }
                *s as usize
            }
            PidSlots::Hashed(map, pids) => *map.entry(pid).or_insert_with(|| {
                pids.push(pid);
                pids.len() - 1
            }),
        }
    }
    /// Every partition id, in slot order.
    fn into_pids(self) -> Vec<u32> {
        let (PidSlots::Direct(_, pids) | PidSlots::Hashed(_, pids)) = self;
        pids
    }
}

/// Regroup edges: every edge of `edges` goes to partition `vertex_partition(src or dst,
/// partitions)` and each partition to its [`owner`]; partitions with the same id are
/// concatenated. Afterwards each worker holds exactly the edge partitions of its vertices
/// (every out-edge of its vertices for `Endpoint::Src`), whatever partitions it held before.
/// `edges` becomes a table with the `sum` combiner (equal ids append). A table that is not all
/// edge partitions of one layout is an error before anything is sent. Cost: one pass over the
/// local edges, then one regroup (all-to-all) of the edge bytes.
pub fn regroup_edges(
    w: &(impl Collectives + ?Sized),
    label: &str,
    edges: &mut Table,
    by: Endpoint,
    partitions: u32,
) -> Result<()> {
    *edges =
        rebucket(w.pool(), edges, by, partitions).map_err(|e| w.refuse(Op::Regroup, label, e))?;
    w.regroup(label, edges, Some(&Partitioner::Modulo))
}

/// Send edges to vertices: every edge goes to the worker that holds the vertex partition of
/// its `by` endpoint in `vertices` (a table of vertex partitions with ids in `0..partitions`,
/// wherever an earlier collective left them), as edge partition `vertex_partition(endpoint,
/// partitions)`. A vertex partition no worker holds falls back to its [`owner`]; one held by
/// several workers goes to the lowest rank. Cost: an allgather of the vertex partition ids (8
/// bytes each), one pass over the local edges, one regroup of the edge bytes.
pub fn send_edges_to_vertices(
    w: &(impl Collectives + ?Sized),
    label: &str,
    edges: &mut Table,
    by: Endpoint,
    vertices: &Table,
    partitions: u32,
) -> Result<()> {
    // Who holds which vertex partition: every worker's ids, as one partition per worker,
    // after a first word saying whether its table is keyed by something other than i64 vertex
    // ids (checked on the gathered words, so every worker fails alike).
    let odd_keys = vertices
        .iter()
        .any(|(_, a)| matches!(a.layout(), Layout::KeyValue { key, .. } if key != KeyType::I64));
    let mut mine: Vec<i64> = vec![odd_keys as i64];
    mine.extend(vertices.ids().into_iter().map(i64::from));
    let mut held = Table::new(Combiner::Reject);
    held.put(w.rank() as u32, Array::from_slice(w.pool(), &mine));
    w.allgather(
        label,
        &mut held,
        Opts::default().algorithm(AllgatherAlgorithm::Ring),
    )?;
    let mut map = HashMap::new();
    for (rank, words) in held.iter() {
        let words = words.as_slice::<i64>()?;
        if words.first() != Some(&0) {
            return Err(Error::data(format!(
                "rank {rank}'s vertices table is keyed by something other than i64 vertex ids; \
                 edges reach vertex partitions by their i64 endpoints"
            )));
        }
        for &pid in &words[1..] {
            let pid = u32::try_from(pid)
                .ok()
                .filter(|&p| p < partitions)
                .ok_or_else(|| {
                    Error::data(format!(
                        "rank {rank} holds vertex partition {pid}, but the edges go to {partitions} \
                         vertex partitions (ids 0..{partitions}): the vertices were partitioned \
                         differently"
                    ))
                })?;
            if (rank as usize) < w.size() {
                // Two holders: the lower rank (the table is iterated in rank order).
                map.entry(pid).or_insert(rank as usize);
            }
        }
    }
    *edges =
        rebucket(w.pool(), edges, by, partitions).map_err(|e| w.refuse(Op::Regroup, label, e))?;
    w.regroup(
        label,
        edges,
        Some(&Partitioner::Map(std::sync::Arc::new(map))),
    )
}

/// Messages to vertices being built, typed: destination vertex id (i64) → a number `T`,
/// combined on insert with the table's `sum`, `min` or `max` (local aggregation), one map per
/// vertex partition (`vertex_partition(dst, P)`). The fast path for scalar messages next to
/// [`KvTable`](crate::data::kv::KvTable) (which takes any key and value type): [`MessageTable::into_table`] encodes the
/// same key-value partitions (`kv::Writer`), so both feed [`send_messages`].
pub struct MessageTable<T: Elem> {
    combiner: Combiner,
    maps: Vec<FastMap<i64, T>>,
}

impl<T: Elem> MessageTable<T> {
    /// An empty table over `partitions` (≥ 1) vertex partitions, combining with `combiner`
    /// (sum, min or max).
    pub fn new(combiner: Combiner, partitions: u32) -> Result<MessageTable<T>> {
        if !matches!(combiner, Combiner::Sum | Combiner::Min | Combiner::Max) {
            return Err(Error::config(format!(
                "messages combine with sum, min or max, not {}",
                combiner.name()
            )));
        }
        if partitions == 0 {
            return Err(Error::config("messages need at least one vertex partition"));
        }
        Ok(MessageTable {
            combiner,
            maps: (0..partitions).map(|_| HashMap::default()).collect(),
        })
    }
    pub fn partitions(&self) -> u32 {
        self.maps.len() as u32
    }
    /// Number of distinct destinations.
    pub fn len(&self) -> usize {
        self.maps.iter().map(|m| m.len()).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.maps.iter().all(|m| m.is_empty())
    }
    /// Adds a message to `dst`, combined with the one already there.
    pub fn add(&mut self, dst: i64, v: T) -> Result<()> {
        let pid = vertex_partition(dst, self.partitions()) as usize;
        match self.maps[pid].entry(dst) {
            Entry::Occupied(mut o) => self.combiner.combine_bytes(
                pid as u32,
                T::DTYPE,
                bytemuck::bytes_of_mut(o.get_mut()),
                T::DTYPE,
                bytemuck::bytes_of(&v),
            ),
            Entry::Vacant(e) => {
                e.insert(v);
                Ok(())
            }
        }
    }
    /// The message partitions (key-value, i64 keys, scalar `T` values, keys ascending) in
    /// buffers of `pool`, with the table's combiner.
    pub fn into_table(self, pool: &Pool) -> Result<Table> {
        use rayon::prelude::*;
        let layout = Layout::KeyValue {
            key: KeyType::I64,
            value: ValueType::Scalar(T::DTYPE),
        };
        let parts: Vec<(u32, Array)> = self
            .maps
            .into_par_iter()
            .enumerate()
            .filter(|(_, m)| !m.is_empty())
            .map(|(pid, m)| {
                let mut entries: Vec<(i64, T)> = m.into_iter().collect();
                entries.sort_unstable_by_key(|e| e.0);
                let mut w = Writer::new(layout)?;
                for (k, v) in &entries {
                    w.push(Key::I64(*k), Value::scalar(v))?;
                }
                Ok((pid as u32, w.finish(pool)?))
            })
            .collect::<Result<_>>()?;
        let mut t = Table::new(self.combiner);
        for (pid, a) in parts {
            t.put(pid, a);
        }
        Ok(t)
    }
}

/// Send messages to vertices: `messages` holds key-value message partitions (destination
/// vertex id, an i64 key → message) whose ids are by destination-vertex hash, as
/// [`MessageTable::into_table`] or [`KvTable::into_table`](crate::data::kv::KvTable::into_table)
/// make them (their builders combine
/// the messages to one vertex on insert: local aggregation) over `partitions` partition ids,
/// the same on every worker. Each partition moves to its
/// [`owner`] and equal keys from different workers are combined there with the table's
/// combiner: the owner's own messages first, then the others' in rank order. Afterwards
/// `messages` holds the message partitions this worker owns. Cost: one regroup of the encoded
/// bytes (8 bytes of key plus the value per distinct destination and sender), then one pass
/// over the received keys.
///
/// A partition that is not key-value keyed by i64 fails this worker before anything is sent,
/// and its peers at once ([`Collectives::refuse`]). A received key that is not in its
/// partition under `partitions` (workers whose tables have different partition counts: their
/// messages to one vertex would not be combined) fails the receiving worker, naming the key.
pub fn send_messages(
    w: &(impl Collectives + ?Sized),
    label: &str,
    messages: &mut Table,
    partitions: u32,
) -> Result<()> {
    let bad = messages.iter().find(|(_, a)| {
        !matches!(
            a.layout(),
            Layout::KeyValue {
                key: KeyType::I64,
                ..
            }
        )
    });
    if let Some((pid, a)) = bad {
        let e = Error::data(format!(
            "partition {pid}: messages are key-value partitions keyed by vertex id (i64), not {}",
            a.layout().describe(a.bytes().len() as u64)
        ));
        return Err(w.refuse(Op::Regroup, label, e));
    }
    if partitions == 0 {
        let e = Error::config("messages need at least one partition id (partitions = 0)");
        return Err(w.refuse(Op::Regroup, label, e));
    }
    w.regroup(label, messages, Some(&Partitioner::Modulo))?;
    for (pid, a) in messages.iter() {
        for (k, _) in crate::data::kv::entries(a)? {
            let at = crate::data::kv::partition_of(k, partitions);
            if at != pid {
                return Err(Error::data(format!(
                    "rank {}: {label}: partition {pid} holds vertex {k}, whose partition among \
                     {partitions} is {at}: the workers' message tables have different partition \
                     counts (messages to one vertex would not meet), or were not built by vertex \
                     hash",
                    w.rank()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::graph::EdgeBuilder;
    use std::collections::BTreeMap;

    #[test]
    fn bucket_edges_copies_every_record_in_order_with_either_index() {
        let pool = Pool::default();
        let (mut a, mut b) = (EdgeBuilder::new(true), EdgeBuilder::new(true));
        for i in 0..600i64 {
            a.push(i * 7919 % 1000, i, 0.5 + i as f64);
            b.push(
                i % 13,
                1000 + i,
                f64::from_bits(0x3ff0_0000_0000_0001 + i as u64),
            );
        }
        // 1 and 7 partitions: the direct index; 2^20: the hash map (more than 4 per edge).
        for partitions in [1u32, 7, 1 << 20] {
            for by in [Endpoint::Src, Endpoint::Dst] {
                let mut want: BTreeMap<u32, Vec<(i64, i64, u64)>> = BTreeMap::new();
                for e in a.view().iter().chain(b.view().iter()) {
                    let pid = vertex_partition(e.endpoint(by), partitions);
                    want.entry(pid)
                        .or_default()
                        .push((e.src, e.dst, e.weight.to_bits()));
                }
                let t = bucket_edges(&pool, &[a.view(), b.view()], by, partitions).unwrap();
                let got: BTreeMap<u32, Vec<(i64, i64, u64)>> = t
                    .iter()
                    .map(|(pid, x)| {
                        assert_eq!(x.layout(), Layout::Edges { weighted: true });
                        let e = Edges::of(x).unwrap();
                        (
                            pid,
                            e.iter()
                                .map(|e| (e.src, e.dst, e.weight.to_bits()))
                                .collect(),
                        )
                    })
                    .collect();
                assert_eq!(got, want, "{partitions} partitions by {by:?}");
            }
        }
        let plain = EdgeBuilder::new(false);
        let mixed = bucket_edges(&pool, &[a.view(), plain.view()], Endpoint::Src, 4);
        assert!(mixed
            .unwrap_err()
            .to_string()
            .contains("mixes weighted and unweighted"));
        // A table's partitions are checked too, and the message names the odd one.
        let mut plain = EdgeBuilder::new(false);
        plain.push(1, 2, 1.0);
        let mut t = Table::new(Combiner::Sum);
        t.add(3, a.build(&pool)).unwrap();
        t.add(8, plain.build(&pool)).unwrap();
        let e = rebucket(&pool, &mut t, Endpoint::Src, 4)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("partition 8: an edge table mixes weighted"),
            "{e}"
        );
        // The table that failed keeps its edges; so does one with a partition that holds no
        // edges at all.
        assert_eq!(t.ids(), vec![3, 8]);
        t.put(77, Array::from_slice(&pool, &[1.0f64, 2.0, 3.0]));
        let e = rebucket(&pool, &mut t, Endpoint::Src, 4).unwrap_err();
        assert!(e.to_string().contains("partition 77:"), "{e}");
        assert_eq!(t.ids(), vec![3, 8, 77]);
        let none = bucket_edges(&pool, &[a.view()], Endpoint::Src, 0);
        assert!(none
            .unwrap_err()
            .to_string()
            .contains("at least one vertex partition"));
    }
}
