//! Connected components by label propagation over events (docs/events.md).
//!
//! Vertex `v` is owned by worker [`owner`]`(v, W)`. Each worker reads its share of the edge
//! lines (`src dst [weight]`, non-negative integer ids, the weight unused; undirected) and
//! sends each edge to the owners of both endpoints, batched (phase 1, until quiet). Then every
//! owner sets `label[v]` to the smallest of `v` and its neighbours and sends the labels that
//! are below `v` to the owners of the neighbours; a label that arrives below the current one
//! replaces it and is sent on in turn. What a worker sends while handling queued events is
//! batched per destination and sent when the queue is empty (phase 2, until quiet). No
//! collective runs inside either phase.
//!
//! Event payloads: `[u8 kind][pairs of little-endian u64]`; kind 0 (edges): `(v, neighbour)`,
//! kind 1 (labels): `(v, label)`, where `v` is owned by the receiver. Anything else is a
//! protocol error naming the sender.

use std::collections::HashMap;

use crate::data::graph::parse_edge_line;
use crate::error::{Error, Result};
use crate::events::{Event, Handler};
use crate::io::lines::for_each_line;
use crate::io::{read_lines, spread, LineError};
use crate::storage::Storage;
use crate::util::splitmix64;
use crate::worker::Worker;
use crate::Collectives;

/// Pairs per event: a batch is sent once it holds this many (and at the end of a round).
pub const BATCH_PAIRS: usize = 4096;
/// Bytes read per step of the input.
const BLOCK: u64 = 4 << 20;

const EDGES: u8 = 0;
const LABELS: u8 = 1;

/// The worker that owns vertex `v` among `workers`: `splitmix64(v) mod workers`
/// ([`splitmix64`]: `z = v + 0x9e3779b97f4a7c15; z = (z ^ z>>30)·0xbf58476d1ce4e5b9;
/// z = (z ^ z>>27)·0x94d049bb133111eb; z ^ z>>31`, all mod 2^64), so consecutive ids spread
/// evenly.
pub fn owner(v: u64, workers: usize) -> usize {
    (splitmix64(v) % workers as u64) as usize
}

/// What a run found on this worker.
#[derive(Debug, Default)]
pub struct Components {
    /// `(vertex, component)` for every vertex this worker owns, by vertex id; the component is
    /// the smallest vertex id in it.
    pub labels: Vec<(u64, u64)>,
    /// Edge lines this worker read.
    pub edges_read: u64,
    /// Label events this worker sent and handled in phase 2 (the job's total is the same on
    /// every worker: `label_events`).
    pub label_events: u64,
    pub waves: u64,
}

/// Parses the edge lines of a block as every graph application reads them
/// ([`parse_edge_line`]: `src dst [weight]`, ids from 0 to 2^63 − 1; the weight is checked and
/// not used: components ignore it); blank lines and `#` comments are skipped. Each edge goes to
/// `each`.
pub fn parse_edges(lines: &[u8], mut each: impl FnMut(u64, u64)) -> Result<(), LineError> {
    for_each_line(lines, |line, line_start| {
        let edge = parse_edge_line(line).map_err(|msg| LineError { line_start, msg })?;
        if let Some((a, b, _)) = edge {
            each(a, b);
        }
        Ok(())
    })
}

/// Batches of `(v, x)` pairs per destination worker, sent as one event each.
struct Outbox<'w> {
    w: &'w Worker,
    kind: u8,
    bufs: Vec<Vec<u8>>,
    sent: u64,
}

impl<'w> Outbox<'w> {
    fn new(w: &'w Worker, kind: u8) -> Outbox<'w> {
        Outbox {
            w,
            kind,
            bufs: vec![Vec::new(); w.size()],
            sent: 0,
        }
    }

    /// Queues `(v, x)` for the owner of `v`; a full batch goes at once.
    fn add(&mut self, v: u64, x: u64) -> Result<()> {
        let dst = owner(v, self.w.size());
        let buf = &mut self.bufs[dst];
        if buf.is_empty() {
            buf.push(self.kind);
        }
        buf.extend_from_slice(&v.to_le_bytes());
        buf.extend_from_slice(&x.to_le_bytes());
        if buf.len() > 16 * BATCH_PAIRS {
            self.send(dst)?;
        }
        Ok(())
    }

    fn send(&mut self, dst: usize) -> Result<()> {
        let buf = std::mem::take(&mut self.bufs[dst]);
        if !buf.is_empty() {
            self.w.send_event(dst, &buf)?;
            self.sent += 1;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        (0..self.bufs.len()).try_for_each(|dst| self.send(dst))
    }
}

/// The pairs of an event of `kind` for vertices this worker owns; bad bytes are a protocol
/// error naming the sender.
fn pairs(ev: &Event, kind: u8, rank: usize, workers: usize) -> Result<Vec<(u64, u64)>> {
    let bad = |what: String| {
        Error::Protocol(format!(
            "components: rank {} sent rank {rank} an event {what}",
            ev.src
        ))
    };
    let p = ev.payload();
    match p.first() {
        Some(&k) if k == kind => {}
        Some(&k) => return Err(bad(format!("of kind {k} (expected {kind})"))),
        None => return Err(bad("with an empty payload".into())),
    }
    let body = &p[1..];
    if !body.len().is_multiple_of(16) {
        return Err(bad(format!(
            "of {} bytes (not a whole number of 16-byte pairs)",
            body.len()
        )));
    }
    body.chunks_exact(16)
        .map(|c| {
            let v = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
            let x = u64::from_le_bytes(c[8..].try_into().expect("8 bytes"));
            if owner(v, workers) != rank {
                return Err(bad(format!(
                    "about vertex {v}, which rank {} owns",
                    owner(v, workers)
                )));
            }
            Ok((v, x))
        })
        .collect()
}

/// Byte ranges of input files: `(file, from, to)`.
type Ranges = std::collections::VecDeque<(crate::storage::FileInfo, u64, u64)>;

/// Phase 1: reads this worker's share of the input a block at a time in the idle step, sends
/// every edge to the owners of both endpoints, and builds the adjacency lists of the owned
/// vertices from the edges it receives.
struct Gather<'s, 'w> {
    rank: usize,
    workers: usize,
    adj: HashMap<u64, Vec<u64>>,
    st: &'s dyn Storage,
    /// The byte ranges of the share still to read, the first one partly.
    todo: Ranges,
    out: Outbox<'w>,
    edges_read: u64,
    /// Why reading the share stopped early (a bad line, an unreadable file): reported to every
    /// worker once the phase is over.
    failed: Option<Error>,
}

impl Gather<'_, '_> {
    /// Reads and sends the next block of the share (lines starting in the next `BLOCK` bytes).
    fn read_block(&mut self) -> Result<()> {
        let Some((f, s, e)) = self.todo.pop_front() else {
            return Ok(());
        };
        let to = e.min(s.saturating_add(BLOCK));
        if to < e {
            self.todo.push_front((f.clone(), to, e));
        }
        let (out, edges) = (&mut self.out, &mut self.edges_read);
        let mut failed = None;
        let r = read_lines(self.st, &f, s, to, BLOCK, |lines, _| {
            let mut batch = Vec::new();
            parse_edges(lines, |a, b| batch.push((a, b)))?;
            *edges += batch.len() as u64;
            batch
                .iter()
                .try_for_each(|&(a, b)| {
                    out.add(a, b)?;
                    out.add(b, a)
                })
                .map_err(|err| {
                    let msg = err.to_string();
                    failed = Some(err);
                    LineError { line_start: 0, msg }
                })
        });
        if let Some(err) = failed {
            return Err(err); // a send, not the line
        }
        if let Err(e) = r {
            self.todo.clear();
            self.failed = Some(e);
        }
        self.out.flush()
    }
}

impl Handler for Gather<'_, '_> {
    fn event(&mut self, ev: Event) -> Result<()> {
        for (v, u) in pairs(&ev, EDGES, self.rank, self.workers)? {
            let list = self.adj.entry(v).or_default();
            if u != v {
                list.push(u);
            }
        }
        Ok(())
    }

    fn idle(&mut self) -> Result<()> {
        self.read_block()
    }

    fn busy(&mut self) -> Result<bool> {
        Ok(!self.todo.is_empty())
    }
}

/// Phase 2 on the owner: labels, and the vertices whose label went down in this round.
struct Propagate<'a, 'w> {
    rank: usize,
    workers: usize,
    adj: &'a HashMap<u64, Vec<u64>>,
    label: HashMap<u64, u64>,
    changed: Vec<u64>,
    out: Outbox<'w>,
}

impl Propagate<'_, '_> {
    /// Sends the new label of every changed vertex to its neighbours' owners.
    fn spread_changes(&mut self) -> Result<()> {
        let mut changed = std::mem::take(&mut self.changed);
        changed.sort_unstable();
        changed.dedup();
        for v in changed {
            let l = self.label[&v];
            for &u in &self.adj[&v] {
                if u > l {
                    self.out.add(u, l)?;
                }
            }
        }
        Ok(())
    }
}

impl Handler for Propagate<'_, '_> {
    fn event(&mut self, ev: Event) -> Result<()> {
        for (v, l) in pairs(&ev, LABELS, self.rank, self.workers)? {
            let cur = self.label.get_mut(&v).ok_or_else(|| {
                Error::Protocol(format!(
                    "components: rank {} sent a label for vertex {v}, which has no edge",
                    ev.src
                ))
            })?;
            if l < *cur {
                *cur = l;
                self.changed.push(v);
            }
        }
        Ok(())
    }

    fn idle(&mut self) -> Result<()> {
        self.spread_changes()?;
        self.out.flush()
    }
}

/// This worker's share of the edge files under `input` (a file or a directory): the byte
/// ranges whose lines it reads.
fn share(w: &Worker, st: &dyn Storage, input: &str) -> Result<Ranges> {
    let files = st.list_input(input, false)?;
    if files.is_empty() {
        return Err(Error::config(format!("no input files in '{input}'")));
    }
    let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
    Ok(files
        .into_iter()
        .zip(spread(&sizes, w.rank(), w.size()))
        .filter(|(_, (s, e))| s < e)
        .map(|(f, (s, e))| (f, s, e))
        .collect())
}

/// Runs connected components on this worker (every worker calls it): reads its share of
/// `input`, then the two event phases. A bad line fails every worker with the file, line and
/// token.
pub fn run(w: &Worker, st: &dyn Storage, input: &str) -> Result<Components> {
    let (rank, workers) = (w.rank(), w.size());
    // Phase 1 reads the input inside the event loop (`Gather::idle`), where a send never
    // waits for credit and received edges are taken between blocks: no worker can wait for
    // another's full event window while that one waits for its own (docs/events.md).
    let (todo, listed) = match share(w, st, input) {
        Ok(t) => (t, None),
        Err(e) => (Default::default(), Some(e)),
    };
    let mut gather = Gather {
        rank,
        workers,
        adj: HashMap::new(),
        st,
        todo,
        out: Outbox::new(w, EDGES),
        edges_read: 0,
        failed: listed,
    };
    let gathered = w.run_until_quiet_with(&mut gather);
    let edges_read = gather.edges_read;
    // The input's outcome is agreed, so that a bad line fails every worker with its file and
    // line.
    let read = gather.failed.take().map_or(Ok(()), Err);
    crate::worker::agree(w, "components-input", read)?;
    gathered?;
    let mut adj = gather.adj;
    let mut label = HashMap::with_capacity(adj.len());
    let mut changed = Vec::new();
    for (&v, list) in adj.iter_mut() {
        list.sort_unstable();
        list.dedup();
        list.shrink_to_fit();
        let l = list.first().map_or(v, |&u| u.min(v));
        label.insert(v, l);
        if l < v {
            changed.push(v);
        }
    }
    // Phase separation: every worker has its adjacency before any label travels.
    w.barrier("components-phase")?;
    let mut prop = Propagate {
        rank,
        workers,
        adj: &adj,
        label,
        changed,
        out: Outbox::new(w, LABELS),
    };
    // The first labels go out from the loop's first idle step, where a send never waits for
    // credit (docs/events.md): sent from here, two workers with more than a window of labels
    // for each other would both wait.
    let q = w.run_until_quiet_with(&mut prop)?;
    let mut labels: Vec<(u64, u64)> = prop.label.into_iter().collect();
    labels.sort_unstable();
    Ok(Components {
        labels,
        edges_read,
        label_events: q.events,
        waves: q.waves,
    })
}

/// `vertex<TAB>component` lines of `labels`.
pub fn format(labels: &[(u64, u64)]) -> String {
    let mut s = String::with_capacity(labels.len() * 16);
    for (v, c) in labels {
        s.push_str(&format!("{v}\t{c}\n"));
    }
    s
}

/// The sequential reference: union-find over `edges`; `(vertex, smallest vertex of its
/// component)` for every vertex, by vertex id.
pub fn reference(edges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut ids = Vec::new();
    let mut parent: Vec<usize> = Vec::new();
    let mut id_of = |v: u64, ids: &mut Vec<u64>, parent: &mut Vec<usize>| {
        *index.entry(v).or_insert_with(|| {
            ids.push(v);
            parent.push(parent.len());
            parent.len() - 1
        })
    };
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for &(a, b) in edges {
        let (i, j) = (
            id_of(a, &mut ids, &mut parent),
            id_of(b, &mut ids, &mut parent),
        );
        let (ri, rj) = (find(&mut parent, i), find(&mut parent, j));
        if ri != rj {
            // The root is the smaller vertex id.
            if ids[ri] < ids[rj] {
                parent[rj] = ri;
            } else {
                parent[ri] = rj;
            }
        }
    }
    let mut out: Vec<(u64, u64)> = (0..ids.len())
        .map(|i| (ids[i], ids[find(&mut parent, i)]))
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_lines_parse_or_name_the_bad_token() {
        let mut got = Vec::new();
        parse_edges(b"1 2\n\n  3\t4 \r\n1000000000000 5", |a, b| {
            got.push((a, b))
        })
        .unwrap();
        assert_eq!(got, vec![(1, 2), (3, 4), (1_000_000_000_000, 5)]);
        let e = parse_edges(b"1 2\n3 x7\n", |_, _| {}).unwrap_err();
        assert_eq!(e.line_start, 4);
        assert!(e.msg.contains("bad vertex id 'x7'"), "{}", e.msg);
        let e = parse_edges(b"-1 2\n", |_, _| {}).unwrap_err();
        assert!(e.msg.contains("'-1'"), "{}", e.msg);
        let e = parse_edges(b"99999999999999999999 2\n", |_, _| {}).unwrap_err();
        assert!(e.msg.contains("from 0 to 9223372036854775807"), "{}", e.msg);
        let e = parse_edges(b"1 2 3 4\n", |_, _| {}).unwrap_err();
        assert!(e.msg.contains("found 4 fields: '1 2 3 4'"), "{}", e.msg);
        let e = parse_edges(b"7\n", |_, _| {}).unwrap_err();
        assert!(e.msg.contains("found 1 field: '7'"), "{}", e.msg);
        // Weighted lines and comments, as the other graph applications read them.
        let mut got = Vec::new();
        parse_edges(b"# src dst weight\n1 2 0.5\n3 4\n", |a, b| got.push((a, b))).unwrap();
        assert_eq!(got, vec![(1, 2), (3, 4)]);
        // Ids are checked before the weight, as PageRank does.
        let e = parse_edges(b"x 2 -1\n", |_, _| {}).unwrap_err();
        assert!(e.msg.contains("bad vertex id 'x'"), "{}", e.msg);
        let e = parse_edges(b"1 2\n1 2 -1\n", |_, _| {}).unwrap_err();
        assert_eq!(e.line_start, 4);
        assert!(
            e.msg
                .starts_with("bad weight '-1': expected a positive number"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn owners_spread_ids_and_the_reference_takes_the_smallest_id() {
        let mut hit = [0; 3];
        for v in 0..3000 {
            hit[owner(v, 3)] += 1;
        }
        assert!(hit.iter().all(|&n| n > 900), "{hit:?}");
        assert_eq!(owner(12345, 1), 0);
        let r = reference(&[(5, 3), (3, 9), (7, 7), (10, 11), (11, 10)]);
        assert_eq!(r, vec![(3, 3), (5, 3), (7, 7), (9, 3), (10, 10), (11, 10)]);
        assert_eq!(format(&r[..2]), "3\t3\n5\t3\n");
    }
}
