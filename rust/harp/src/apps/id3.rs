//! ID3 decision tree over events, after Anthill's filters (seed paper 002, §3): every worker is
//! a *Counter* over its share of the tuples, the *Attribute* filter of (node, attribute) is the
//! worker the label of that pair picks, and the *Decision* filter of a node the worker its
//! label picks (`Worker::send_labeled`, docs/events.md). One `run_until_quiet` phase builds the
//! whole tree, nodes pipelined: a node's children are counted while other nodes are decided.
//!
//! 1. Counter: for a node to expand (the root at the start), count the local tuples of the
//!    node by (value, class) for each attribute not yet used on its path, and send each count
//!    table to the Attribute filter of (node, attribute) — every worker sends one, even empty.
//! 2. Attribute: with the W count tables of (node, attribute), merge them, compute the
//!    attribute's information gain and send it with the merged table to the node's Decision.
//! 3. Decision: with the gains of every candidate attribute of the node: a leaf (the node's
//!    tuples are of one class, or no attribute gains anything: the majority class, ties to the
//!    smallest class name), or a split on the attribute of highest gain (ties to the lowest
//!    index). Each child (a value of that attribute at the node) whose tuples are of one class,
//!    or that has no attribute left, becomes a leaf at once; every other child is sent to every
//!    worker to expand.
//!
//! Input: CSV lines `v1,v2,…,vk,class` (k ≥ 1 attributes, the same k on every line; fields are
//! trimmed; blank lines skipped; no quoting). Output lines: `PATH<TAB>split aI` or
//! `PATH<TAB>leaf CLASS`, PATH being `/` for the root and `aI=value/aJ=value…` below it (I, J:
//! 0-based attribute indexes).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::collective::AllreduceAlgorithm;
use crate::error::{Error, Result};
use crate::events::{Event, Handler};
use crate::io::{read_lines, spread, LineError};
use crate::storage::Storage;
use crate::util::fnv1a64;
use crate::Collectives;
use crate::Opts;
use crate::{Array, Combiner, Table, Worker};

/// A node: the (attribute, value) tests on the way from the root.
pub type Path = Vec<(u32, String)>;
/// Counts of one attribute at one node: value → class → tuples.
pub type Counts = BTreeMap<String, BTreeMap<String, u64>>;

/// One decided node of the tree.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    Split(u32),
    Leaf(String),
}

/// The tree: each decided node by its path.
pub type Tree = BTreeMap<Path, Node>;

#[derive(Debug, Serialize, Deserialize)]
enum Msg {
    /// Counter → Attribute filter of (node, attr).
    Counts {
        node: Path,
        attr: u32,
        counts: Counts,
    },
    /// Attribute filter → Decision of the node.
    Gain {
        node: Path,
        attr: u32,
        gain: f64,
        counts: Counts,
    },
    /// Decision → every Counter: expand this node.
    Expand { node: Path },
}

/// Entropy (bits) of a class distribution with `n` tuples in all.
fn entropy<'a>(classes: impl Iterator<Item = &'a u64>, n: u64) -> f64 {
    classes
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum()
}

/// The class distribution of a node from any attribute's counts there.
fn classes(counts: &Counts) -> BTreeMap<String, u64> {
    let mut all = BTreeMap::new();
    for per in counts.values() {
        for (c, n) in per {
            *all.entry(c.clone()).or_insert(0) += n;
        }
    }
    all
}

/// Information gain of splitting a node by the attribute whose counts are `counts`.
pub fn gain(counts: &Counts) -> f64 {
    let all = classes(counts);
    let n: u64 = all.values().sum();
    if n == 0 {
        return 0.0;
    }
    let split: f64 = counts
        .values()
        .map(|per| {
            let nv: u64 = per.values().sum();
            nv as f64 / n as f64 * entropy(per.values(), nv)
        })
        .sum();
    entropy(all.values(), n) - split
}

/// The majority class (ties: the smallest name).
fn majority(classes: &BTreeMap<String, u64>) -> String {
    let mut best: Option<(&String, u64)> = None;
    for (c, &n) in classes {
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((c, n));
        }
    }
    best.map(|(c, _)| c.clone()).unwrap_or_default()
}

/// What a node whose candidate attributes have `gains` (attribute, gain, counts) becomes; the
/// children to expand are returned with it (those that are not leaves), with the leaves added
/// to `tree`. `left`: attributes still unused below the node's children.
fn decide(node: &Path, gains: &[(u32, f64, Counts)], left: usize, tree: &mut Tree) -> Vec<Path> {
    let dist = classes(&gains[0].2);
    if dist.len() <= 1 {
        tree.insert(node.clone(), Node::Leaf(majority(&dist)));
        return Vec::new();
    }
    let mut best = &gains[0];
    for g in gains {
        if g.1 > best.1 || (g.1 == best.1 && g.0 < best.0) {
            best = g;
        }
    }
    if best.1 <= 0.0 {
        tree.insert(node.clone(), Node::Leaf(majority(&dist)));
        return Vec::new();
    }
    tree.insert(node.clone(), Node::Split(best.0));
    let mut expand = Vec::new();
    for (v, per) in &best.2 {
        let mut child = node.clone();
        child.push((best.0, v.clone()));
        let live = per.values().filter(|&&n| n > 0).count();
        if live <= 1 || left == 0 {
            tree.insert(child, Node::Leaf(majority(per)));
        } else {
            expand.push(child);
        }
    }
    expand
}

/// A tuple: attribute values and class.
struct Tuple {
    values: Vec<String>,
    class: String,
}

fn matches(t: &Tuple, path: &Path) -> bool {
    path.iter().all(|(a, v)| t.values[*a as usize] == *v)
}

fn path_key(p: &Path) -> u64 {
    let mut b = Vec::new();
    for (a, v) in p {
        b.extend_from_slice(&a.to_le_bytes());
        b.extend_from_slice(&(v.len() as u64).to_le_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    fnv1a64(&b)
}

struct Id3<'w> {
    w: &'w Worker,
    attrs: u32,
    tuples: Vec<Tuple>,
    /// Attribute filters: (node, attr) → (tables received, merged counts).
    merging: HashMap<(Path, u32), (usize, Counts)>,
    /// Decisions: node → gains received.
    deciding: HashMap<Path, Vec<(u32, f64, Counts)>>,
    tree: Tree,
    /// Whether the root's counts went out (from the first idle step).
    started: bool,
}

impl Id3<'_> {
    fn send(&self, label: String, msg: &Msg) -> Result<()> {
        self.w.send_labeled(&label, 1, &crate::wire::encode(msg))?;
        Ok(())
    }

    /// Counter: counts of the local tuples at `node` for every unused attribute.
    fn expand(&self, node: &Path) -> Result<()> {
        let used: Vec<u32> = node.iter().map(|(a, _)| *a).collect();
        let mut tables: Vec<Counts> = vec![Counts::new(); self.attrs as usize];
        for t in self.tuples.iter().filter(|t| matches(t, node)) {
            for a in (0..self.attrs).filter(|a| !used.contains(a)) {
                *tables[a as usize]
                    .entry(t.values[a as usize].clone())
                    .or_default()
                    .entry(t.class.clone())
                    .or_insert(0) += 1;
            }
        }
        let key = path_key(node);
        for (a, counts) in tables.into_iter().enumerate() {
            let attr = a as u32;
            if used.contains(&attr) {
                continue;
            }
            let msg = Msg::Counts {
                node: node.clone(),
                attr,
                counts,
            };
            self.send(format!("id3-attr-{key:016x}-{attr}"), &msg)?;
        }
        Ok(())
    }
}

fn bad(src: usize, what: String) -> Error {
    Error::Protocol(format!("id3: rank {src} sent {what}"))
}

impl Handler for Id3<'_> {
    fn idle(&mut self) -> Result<()> {
        if !self.started {
            self.started = true;
            self.expand(&Path::new())?;
        }
        Ok(())
    }

    fn event(&mut self, ev: Event) -> Result<()> {
        let msg: Msg = crate::wire::decode(ev.payload())
            .map_err(|e| bad(ev.src, format!("a malformed message: {e}")))?;
        let valid = |node: &Path, attr: Option<u32>| {
            let mut seen: Vec<u32> = node.iter().map(|(a, _)| *a).collect();
            seen.extend(attr);
            let n = seen.len();
            seen.sort_unstable();
            seen.dedup();
            seen.len() == n && seen.iter().all(|&a| a < self.attrs)
        };
        match msg {
            Msg::Counts { node, attr, counts } => {
                if !valid(&node, Some(attr)) {
                    return Err(bad(
                        ev.src,
                        format!("counts for attribute {attr} at {node:?}"),
                    ));
                }
                let key = (node, attr);
                let e = self.merging.entry(key.clone()).or_default();
                e.0 += 1;
                for (v, per) in counts {
                    let m = e.1.entry(v).or_default();
                    for (c, n) in per {
                        *m.entry(c).or_insert(0) += n;
                    }
                }
                if e.0 == self.w.size() {
                    let (_, counts) = self.merging.remove(&key).expect("just merged");
                    let (node, attr) = key;
                    let label = format!("id3-node-{:016x}", path_key(&node));
                    let gain = gain(&counts);
                    self.send(
                        label,
                        &Msg::Gain {
                            node,
                            attr,
                            gain,
                            counts,
                        },
                    )?;
                }
            }
            Msg::Gain {
                node,
                attr,
                gain,
                counts,
            } => {
                if !valid(&node, Some(attr)) {
                    return Err(bad(
                        ev.src,
                        format!("a gain for attribute {attr} at {node:?}"),
                    ));
                }
                let candidates = self.attrs as usize - node.len();
                let g = self.deciding.entry(node.clone()).or_default();
                g.push((attr, gain, counts));
                if g.len() == candidates {
                    let mut g = self.deciding.remove(&node).expect("just added");
                    g.sort_by_key(|x| x.0);
                    for child in decide(&node, &g, candidates - 1, &mut self.tree) {
                        let msg = crate::wire::encode(&Msg::Expand { node: child });
                        self.w.send_event_to_all(&msg)?;
                    }
                }
            }
            Msg::Expand { node } => {
                if !valid(&node, None) || node.len() >= self.attrs as usize {
                    return Err(bad(ev.src, format!("a node to expand {node:?}")));
                }
                self.expand(&node)?;
            }
        }
        Ok(())
    }
}

/// Parses one CSV line into a tuple (`None`: a blank line).
fn parse(line: &[u8]) -> std::result::Result<Option<Tuple>, String> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_string())?;
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.trim().is_empty() {
        return Ok(None);
    }
    let mut fields: Vec<String> = text.split(',').map(|f| f.trim().to_string()).collect();
    if fields.len() < 2 {
        return Err(format!(
            "{} field(s): a line is at least one attribute value and a class",
            fields.len()
        ));
    }
    let class = fields.pop().expect("two fields");
    Ok(Some(Tuple {
        values: fields,
        class,
    }))
}

/// This worker's share of the CSV lines under `input`: the tuples, and where each starts
/// (file, byte offset) for error messages.
struct Input {
    files: Vec<String>,
    tuples: Vec<Tuple>,
    at: Vec<(usize, u64)>,
}

/// Largest byte offset a tuple's position may have (positions are compared as one integer).
const MAX_OFFSET: u64 = 1 << 40;

fn read(st: &dyn Storage, input: &str, rank: usize, workers: usize) -> Result<Input> {
    let files = st.list_input(input, false)?;
    if files.is_empty() {
        return Err(Error::config(format!("no input files in '{input}'")));
    }
    let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
    let mut tuples: Vec<Tuple> = Vec::new();
    let mut at = Vec::new();
    for (i, (f, (s, e))) in files.iter().zip(spread(&sizes, rank, workers)).enumerate() {
        if f.size >= MAX_OFFSET {
            return Err(Error::config(format!(
                "id3: {} is {} bytes (at most 2^40)",
                f.path, f.size
            )));
        }
        read_lines(st, f, s, e, 4 << 20, |lines, base| {
            crate::io::lines::for_each_line(lines, |line, start| {
                let t = parse(line).map_err(|msg| LineError {
                    line_start: start,
                    msg,
                })?;
                if let Some(t) = t {
                    tuples.push(t);
                    at.push((i, base + start as u64));
                }
                Ok(())
            })
        })?;
    }
    Ok(Input {
        files: files.into_iter().map(|f| f.path).collect(),
        tuples,
        at,
    })
}

/// The number of attributes: that of the job's first tuple (in file order); a line of this
/// worker with another number is an input error naming its file and line.
fn attributes(w: &Worker, st: &dyn Storage, input: &str, inp: &Input) -> Result<u32> {
    let first = inp
        .at
        .first()
        .map_or(i64::MAX, |&(f, off)| (f as u64 * MAX_OFFSET + off) as i64);
    let mut t = Table::new(Combiner::Min);
    t.put(0, Array::from_slice(w.pool(), &[first]));
    w.allreduce(
        "id3-first",
        &mut t,
        Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
    )?;
    let min = t.get(0).expect("first").as_slice::<i64>()?[0];
    if min == i64::MAX {
        return Err(Error::config(format!("id3: no tuples in '{input}'")));
    }
    let k = match inp.tuples.first() {
        Some(t) if first == min => t.values.len() as i64,
        _ => -1,
    };
    let mut t = Table::new(Combiner::Max);
    t.put(0, Array::from_slice(w.pool(), &[k]));
    w.allreduce(
        "id3-attributes",
        &mut t,
        Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
    )?;
    let k = t.get(0).expect("attributes").as_slice::<i64>()?[0] as usize;
    let bad = inp.tuples.iter().position(|t| t.values.len() != k);
    let outcome = match bad {
        None => Ok(()),
        Some(i) => {
            let (f, off) = inp.at[i];
            let file = &inp.files[f];
            Err(Error::Input {
                file: file.clone(),
                line: crate::io::lines::line_number(st, file, off)?,
                msg: format!(
                    "{} attribute values, where the first line has {k}",
                    inp.tuples[i].values.len()
                ),
            })
        }
    };
    crate::worker::agree(w, "id3-columns", outcome)?;
    Ok(k as u32)
}

/// What [`run`] returns on each worker.
pub struct Id3Result {
    /// The nodes this worker decided (every node is decided by exactly one worker).
    pub tree: Tree,
    pub tuples: u64,
    pub events: u64,
    pub waves: u64,
}

/// Builds the tree (every worker calls it): reads this worker's share of `input`, agrees on
/// the number of attributes, then one event phase. A bad line fails every worker with the
/// file, line and reason.
pub fn run(w: &Worker, st: &dyn Storage, input: &str) -> Result<Id3Result> {
    let (inp, outcome) = match read(st, input, w.rank(), w.size()) {
        Ok(i) => (i, Ok(())),
        Err(e) => (
            Input {
                files: Vec::new(),
                tuples: Vec::new(),
                at: Vec::new(),
            },
            Err(e),
        ),
    };
    crate::worker::agree(w, "id3-input", outcome)?;
    let attrs = attributes(w, st, input, &inp)?;
    let mut id3 = Id3 {
        w,
        attrs,
        tuples: inp.tuples,
        merging: HashMap::new(),
        deciding: HashMap::new(),
        tree: Tree::new(),
        started: false,
    };
    // The root's counts go out from the loop's first idle step, where a send never waits for
    // credit (docs/events.md): sent from here, workers with more than a window of counts for
    // each other would wait for each other.
    let q = w.run_until_quiet_with(&mut id3)?;
    if !id3.merging.is_empty() || !id3.deciding.is_empty() {
        return Err(Error::data(format!(
            "id3: rank {}: the job went quiet with {} attribute tables and {} nodes undecided",
            w.rank(),
            id3.merging.len(),
            id3.deciding.len()
        )));
    }
    Ok(Id3Result {
        tuples: id3.tuples.len() as u64,
        tree: id3.tree,
        events: q.events,
        waves: q.waves,
    })
}

/// A node's path as text: `/` for the root, `aI=value/aJ=value…` below it.
pub fn path_text(p: &Path) -> String {
    if p.is_empty() {
        return "/".into();
    }
    p.iter()
        .map(|(a, v)| format!("a{a}={v}"))
        .collect::<Vec<_>>()
        .join("/")
}

/// `PATH<TAB>split aI` / `PATH<TAB>leaf CLASS` lines of `tree`, sorted by path text.
pub fn format(tree: &Tree) -> String {
    let mut lines: Vec<String> = tree
        .iter()
        .map(|(p, n)| match n {
            Node::Split(a) => format!("{}\tsplit a{a}\n", path_text(p)),
            Node::Leaf(c) => format!("{}\tleaf {c}\n", path_text(p)),
        })
        .collect();
    lines.sort();
    lines.concat()
}
