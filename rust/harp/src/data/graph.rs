//! Graph partitions: edge partitions ([`Layout::Edges`]) with their typed builder and reader.
//!
//! An edge partition is a run of fixed-size records, little-endian, no header:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | `src`, i64 |
//! | 8..16 | `dst`, i64 |
//! | 16..24 | `weight`, f64 (only when the layout says `weighted`) |
//!
//! The unit of the layout is the record (16 or 24 bytes), so pieces on the wire always carry
//! whole edges and any run of whole records is a valid partition: a received partition is
//! checked for its size only ([`check`]). Two edge partitions with the same id combine by
//! concatenation ([`append`]): the edges of the partition already held, then the newcomer's.
//!
//! Vertex partitions (vertex id → value) and message partitions (destination vertex id →
//! message, combined on arrival) are key-value tables with i64 keys (`data/kv.rs`); which
//! partition a vertex belongs to is [`vertex_partition`].

use super::array::Array;
use super::combiner::Combiner;
use super::layout::Layout;
use crate::error::{Error, Result};
use crate::pool::Pool;

/// Bytes of one edge record: 16 (src, dst) or 24 (src, dst, weight).
pub const fn edge_bytes(weighted: bool) -> usize {
    if weighted {
        24
    } else {
        16
    }
}

/// `n` edges in words, for errors: "3 edges", "1 weighted edge".
pub fn describe(weighted: bool, n: u64) -> String {
    let w = if weighted { "weighted " } else { "" };
    let s = if n == 1 { "" } else { "s" };
    format!("{n} {w}edge{s}")
}

/// One edge. `weight` is 1.0 for edges of an unweighted partition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Edge {
    pub src: i64,
    pub dst: i64,
    pub weight: f64,
}

/// Which endpoint of an edge decides where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Src,
    Dst,
}

impl Edge {
    pub fn endpoint(&self, by: Endpoint) -> i64 {
        match by {
            Endpoint::Src => self.src,
            Endpoint::Dst => self.dst,
        }
    }
}

/// Checks that `bytes` bytes are whole edge records (a protocol error otherwise).
pub fn check_size(weighted: bool, bytes: usize) -> Result<()> {
    let unit = edge_bytes(weighted);
    if !bytes.is_multiple_of(unit) {
        return Err(Error::Protocol(format!(
            "{bytes} bytes is not a whole number of {unit}-byte edge records"
        )));
    }
    Ok(())
}

/// Checks that `bytes` bytes are a valid edge partition `pid` (whole records; any record is
/// a valid edge): a malformed one is a protocol error naming the partition.
pub fn check(pid: u32, weighted: bool, bytes: usize) -> Result<()> {
    check_size(weighted, bytes).map_err(|e| match e {
        Error::Protocol(m) => Error::Protocol(format!("edge partition {pid}: {m}")),
        e => e,
    })
}

/// An edge weight in a text line (the third field of `src dst [weight]`, in every graph
/// application): a positive decimal number that f64 holds at full precision, from about 2.2e-308
/// to 1.8e308 (a subnormal weight could make a vertex's share overflow). The error quotes the
/// token.
pub fn parse_weight(tok: &[u8]) -> std::result::Result<f64, String> {
    let w: Option<f64> = std::str::from_utf8(tok).ok().and_then(|s| s.parse().ok());
    w.filter(|w| w.is_normal() && *w > 0.0).ok_or_else(|| {
        format!(
            "bad weight {}: expected a positive number (from {:e} to {:e})",
            crate::util::quote(tok),
            f64::MIN_POSITIVE,
            f64::MAX
        )
    })
}

/// The largest vertex id of an edge list, the same in every graph application: 2^63 − 1, so
/// that every id is also an i64 (the key type of vertex and message tables).
pub const MAX_VERTEX_ID: u64 = i64::MAX as u64;

/// One text line of an edge list, `src dst [weight]`, as every graph application
/// (`components`, `layout`, `pagerank`) reads it: fields separated by ASCII whitespace; a blank
/// line or one whose first field starts with `#` is `None`; two vertex ids, each a decimal
/// integer from 0 to [`MAX_VERTEX_ID`], and an optional weight ([`parse_weight`]). An error
/// says what is wrong and quotes the field (or the line, when the number of fields is wrong);
/// the caller adds the file and line.
pub fn parse_edge_line(
    line: &[u8],
) -> std::result::Result<Option<(u64, u64, Option<f64>)>, String> {
    let max_id = MAX_VERTEX_ID;
    let mut fields = edge_fields(line);
    let (src, dst, weight) = match (fields.next(), fields.next(), fields.next(), fields.next()) {
        (None, ..) => return Ok(None),
        (Some(t), ..) if t[0] == b'#' => return Ok(None),
        (Some(a), Some(b), w, None) => (a, b, w),
        _ => {
            let n = edge_fields(line).count();
            let end = line
                .iter()
                .rposition(|b| !b.is_ascii_whitespace())
                .map_or(0, |i| i + 1);
            let s = if n == 1 { "" } else { "s" };
            return Err(format!(
                "expected an edge 'src dst [weight]', found {n} field{s}: {}",
                crate::util::quote(&line[..end])
            ));
        }
    };
    let id = |tok: &[u8], column: usize| {
        parse_vertex_id(tok, max_id).ok_or_else(|| {
            format!(
                "column {column}: bad vertex id {}: expected an integer from 0 to {max_id}",
                crate::util::quote(tok)
            )
        })
    };
    let (src, dst) = (id(src, 1)?, id(dst, 2)?);
    let weight = weight.map(parse_weight).transpose()?;
    Ok(Some((src, dst, weight)))
}

/// The fields of an edge line: its runs of non-whitespace bytes.
fn edge_fields(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|b| b.is_ascii_whitespace())
        .filter(|t| !t.is_empty())
}

/// A decimal integer (digits only) from 0 to `max`.
fn parse_vertex_id(tok: &[u8], max: u64) -> Option<u64> {
    if tok.is_empty() || tok.len() > 20 {
        return None;
    }
    let mut v = 0u64;
    for &d in tok {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    (v <= max).then_some(v)
}

/// Builds an edge partition record by record.
#[derive(Debug, Clone, Default)]
pub struct EdgeBuilder {
    weighted: bool,
    bytes: Vec<u8>,
}

impl EdgeBuilder {
    /// An empty builder of unweighted (`weighted == false`) or weighted edges.
    pub fn new(weighted: bool) -> EdgeBuilder {
        EdgeBuilder {
            weighted,
            bytes: Vec::new(),
        }
    }
    /// Room for `n` more edges.
    pub fn reserve(&mut self, n: usize) {
        self.bytes.reserve(n * edge_bytes(self.weighted));
    }
    pub fn weighted(&self) -> bool {
        self.weighted
    }
    /// Makes an unweighted builder weighted: the edges it holds get weight 1.0.
    pub fn make_weighted(&mut self) {
        if self.weighted {
            return;
        }
        let old = std::mem::take(&mut self.bytes);
        self.weighted = true;
        self.bytes.reserve(old.len() / 2 * 3);
        for rec in old.chunks_exact(edge_bytes(false)) {
            self.bytes.extend_from_slice(rec);
            self.bytes.extend_from_slice(&1.0f64.to_le_bytes());
        }
    }
    /// Adds an edge; the weight is ignored by an unweighted builder.
    pub fn push(&mut self, src: i64, dst: i64, weight: f64) {
        self.bytes.extend_from_slice(&src.to_le_bytes());
        self.bytes.extend_from_slice(&dst.to_le_bytes());
        if self.weighted {
            self.bytes.extend_from_slice(&weight.to_le_bytes());
        }
    }
    pub fn push_edge(&mut self, e: Edge) {
        self.push(e.src, e.dst, e.weight)
    }
    pub fn len(&self) -> usize {
        self.bytes.len() / edge_bytes(self.weighted)
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    /// A view of the edges added so far.
    pub fn view(&self) -> Edges<'_> {
        Edges {
            weighted: self.weighted,
            bytes: &self.bytes,
        }
    }
    /// The partition, in a buffer of `pool`.
    pub fn build(&self, pool: &Pool) -> Array {
        Array::from_layout(
            Layout::Edges {
                weighted: self.weighted,
            },
            pool.copy_of(&self.bytes),
        )
        .expect("whole records")
    }
}

/// A checked view of an edge partition.
#[derive(Debug, Clone, Copy)]
pub struct Edges<'a> {
    weighted: bool,
    bytes: &'a [u8],
}

impl<'a> Edges<'a> {
    /// The edges of `a`; fails unless `a` is an edge partition.
    pub fn of(a: &'a Array) -> Result<Edges<'a>> {
        match a.layout() {
            Layout::Edges { weighted } => Edges::parse(0, weighted, a.bytes()),
            other => Err(Error::data(format!(
                "expected an edge partition, found {}",
                other.describe(a.bytes().len() as u64)
            ))),
        }
    }
    /// The edges of partition `pid` in `bytes` (checked: whole records).
    pub fn parse(pid: u32, weighted: bool, bytes: &'a [u8]) -> Result<Edges<'a>> {
        check(pid, weighted, bytes.len())?;
        Ok(Edges { weighted, bytes })
    }
    pub fn weighted(&self) -> bool {
        self.weighted
    }
    pub fn len(&self) -> usize {
        self.bytes.len() / edge_bytes(self.weighted)
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    fn word(&self, i: usize, k: usize) -> [u8; 8] {
        let at = i * edge_bytes(self.weighted) + 8 * k;
        self.bytes[at..at + 8].try_into().expect("8 bytes")
    }
    pub fn src(&self, i: usize) -> i64 {
        i64::from_le_bytes(self.word(i, 0))
    }
    pub fn dst(&self, i: usize) -> i64 {
        i64::from_le_bytes(self.word(i, 1))
    }
    /// The weight of edge `i` (1.0 in an unweighted partition).
    pub fn weight(&self, i: usize) -> f64 {
        if self.weighted {
            f64::from_le_bytes(self.word(i, 2))
        } else {
            1.0
        }
    }
    pub fn get(&self, i: usize) -> Edge {
        Edge {
            src: self.src(i),
            dst: self.dst(i),
            weight: self.weight(i),
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = Edge> + 'a {
        let this = *self;
        (0..this.len()).map(move |i| this.get(i))
    }
    /// The raw records of edges `[from, to)`.
    pub fn record_bytes(&self, from: usize, to: usize) -> &'a [u8] {
        let u = edge_bytes(self.weighted);
        &self.bytes[from * u..to * u]
    }
}

/// Concatenation of two edge partitions of the same layout (partition `pid`, for errors): the
/// edges of `acc`, then those of `other`, in a buffer of `pool`.
pub fn append(pool: &Pool, pid: u32, acc: &Array, other: &Array) -> Result<Array> {
    let (la, lb) = (acc.layout(), other.layout());
    if la != lb || !matches!(la, Layout::Edges { .. }) {
        return Err(Error::data(format!(
            "partition {pid}: cannot append {} to {}",
            lb.describe(other.bytes().len() as u64),
            la.describe(acc.bytes().len() as u64)
        )));
    }
    let (a, b) = (acc.bytes(), other.bytes());
    let mut buf = pool.get(a.len() + b.len());
    buf[..a.len()].copy_from_slice(a);
    buf[a.len()..].copy_from_slice(b);
    Array::from_layout(la, buf)
}

/// What a table's combiner does to two edge partitions with the same id: `keep-first` keeps
/// the partition held, `reject` refuses the second, a custom combiner does what it does, a
/// key-value combiner is refused, and every other (`sum`, `min`, `max`, `append`) appends the
/// newcomer's edges ([`append`]).
pub fn combine(c: &Combiner, pid: u32, acc: &mut Array, other: &Array) -> Result<()> {
    match c {
        Combiner::KeepFirst => Ok(()),
        Combiner::Reject => Err(Error::data(format!(
            "partition {pid} arrived twice and the table's combiner rejects duplicates"
        ))),
        Combiner::Custom(f) => f.combine(acc, other),
        Combiner::KeyValue(_) => Err(Error::data(format!(
            "partition {pid}: combiner {} combines key-value tables, not edges",
            c.name()
        ))),
        Combiner::Sum | Combiner::Min | Combiner::Max | Combiner::Append => {
            if other.bytes().is_empty() && acc.layout() == other.layout() {
                return Ok(());
            }
            let pool = acc.pool().or_else(|| other.pool()).unwrap_or_default();
            *acc = append(&pool, pid, acc, other)?;
            Ok(())
        }
    }
}

/// The partition of vertex `v` among `partitions` (≥ 1): the stable hash of i64 keys of
/// key-value tables, modulo `partitions`. The same on every worker, platform and run.
pub fn vertex_partition(v: i64, partitions: u32) -> u32 {
    super::kv::partition_of(super::kv::Key::I64(v), partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_lines_parse_or_say_what_is_wrong() {
        let max = i64::MAX as u64;
        let ok = |l: &str| parse_edge_line(l.as_bytes()).unwrap();
        assert_eq!(ok("1 2\n"), Some((1, 2, None)));
        assert_eq!(
            ok("\t7\t 9223372036854775807  0.5\r\n"),
            Some((7, max, Some(0.5)))
        );
        assert_eq!(ok("   \r\n"), None);
        assert_eq!(ok(""), None);
        assert_eq!(ok("  # a comment with 5 fields\n"), None);
        assert_eq!(ok("#1 2\n"), None);
        let err = |l: &str| parse_edge_line(l.as_bytes()).unwrap_err();
        for (line, want) in [
            (
                "7\n",
                "expected an edge 'src dst [weight]', found 1 field: '7'",
            ),
            (
                "1 2 3 4\n",
                "expected an edge 'src dst [weight]', found 4 fields: '1 2 3 4'",
            ),
            (
                "3 x\n",
                "column 2: bad vertex id 'x': expected an integer from 0 to 9223372036854775807",
            ),
            ("-3 4", "column 1: bad vertex id '-3'"),
            ("+3 4", "column 1: bad vertex id '+3'"),
            ("1.5 2", "column 1: bad vertex id '1.5'"),
            (
                "9223372036854775808 1",
                "column 1: bad vertex id '9223372036854775808'",
            ),
            ("1 2 0", "bad weight '0'"),
            ("1 2 x", "bad weight 'x'"),
        ] {
            let e = err(line);
            assert!(e.contains(want), "{line:?}: {e}");
        }
        // One range for every application: 2^63 - 1 is the largest id.
        let e = err("18446744073709551615 0");
        assert!(e.contains("from 0 to 9223372036854775807"), "{e}");
        // A huge line: the count is exact and the quote short.
        let many = "1 ".repeat(1_000_000);
        let e = err(&many);
        assert!(e.contains("found 1000000 fields") && e.len() < 200, "{e}");
    }

    #[test]
    fn records_round_trip_and_describe_themselves() {
        let pool = Pool::default();
        for weighted in [false, true] {
            let mut b = EdgeBuilder::new(weighted);
            let want = [
                Edge {
                    src: 0,
                    dst: i64::MAX,
                    weight: 0.5,
                },
                Edge {
                    src: -3,
                    dst: 1 << 40,
                    weight: -2.25,
                },
            ];
            for e in want {
                b.push_edge(e);
            }
            assert_eq!(b.len(), 2);
            let a = b.build(&pool);
            assert_eq!(a.layout(), Layout::Edges { weighted });
            assert_eq!(a.bytes().len(), 2 * edge_bytes(weighted));
            let got: Vec<Edge> = Edges::of(&a).unwrap().iter().collect();
            for (g, w) in got.iter().zip(&want) {
                assert_eq!((g.src, g.dst), (w.src, w.dst));
                assert_eq!(g.weight, if weighted { w.weight } else { 1.0 });
            }
            assert_eq!(
                a.layout().describe(a.bytes().len() as u64),
                if weighted {
                    "2 weighted edges"
                } else {
                    "2 edges"
                }
            );
        }
        assert_eq!(describe(false, 1), "1 edge");
        assert_eq!(Layout::Edges { weighted: true }.unit(), 24);
    }

    #[test]
    fn an_unweighted_builder_becomes_weighted_with_weight_one() {
        let pool = Pool::default();
        let mut b = EdgeBuilder::new(false);
        b.push(1, 2, 7.0);
        b.push(-4, i64::MAX, 7.0);
        b.make_weighted();
        b.push(5, 6, 0.25);
        b.make_weighted(); // already weighted: nothing changes
        assert!(b.weighted());
        let a = b.build(&pool);
        assert_eq!(a.layout(), Layout::Edges { weighted: true });
        let got: Vec<(i64, i64, f64)> = Edges::of(&a)
            .unwrap()
            .iter()
            .map(|e| (e.src, e.dst, e.weight))
            .collect();
        assert_eq!(got, vec![(1, 2, 1.0), (-4, i64::MAX, 1.0), (5, 6, 0.25)]);
    }

    #[test]
    fn malformed_partitions_are_protocol_errors_naming_the_partition() {
        let e = Edges::parse(7, false, &[0u8; 20]).unwrap_err();
        assert_eq!(e.kind(), "protocol");
        assert!(e.to_string().contains("edge partition 7"), "{e}");
        assert!(Edges::parse(7, true, &[0u8; 48]).is_ok());
        assert!(Edges::parse(7, true, &[0u8; 32]).is_err());
        // Pieces of an edge partition are whole records.
        let l = Layout::Edges { weighted: false };
        assert!(l.check_piece(3, 32, 16, 16).is_ok());
        assert!(l.check_piece(3, 32, 8, 16).is_err());
        assert!(l.check_piece(3, 40, 0, 16).is_err());
        let pool = Pool::default();
        let dense = Array::from_slice(&pool, &[1i64, 2]);
        assert!(Edges::of(&dense).is_err());
    }

    #[test]
    fn same_ids_append() {
        let pool = Pool::default();
        let mut a = EdgeBuilder::new(false);
        a.push(1, 2, 1.0);
        let mut b = EdgeBuilder::new(false);
        b.push(3, 4, 1.0);
        b.push(5, 6, 1.0);
        let c = append(&pool, 9, &a.build(&pool), &b.build(&pool)).unwrap();
        let got: Vec<(i64, i64)> = Edges::of(&c)
            .unwrap()
            .iter()
            .map(|e| (e.src, e.dst))
            .collect();
        assert_eq!(got, vec![(1, 2), (3, 4), (5, 6)]);
        // In a table, equal ids append (sum, min, max), keep the first or are refused.
        let mut t = crate::data::Table::new(Combiner::Sum);
        t.add(9, a.build(&pool)).unwrap();
        t.add(9, b.build(&pool)).unwrap();
        t.add(9, EdgeBuilder::new(false).build(&pool)).unwrap();
        assert_eq!(Edges::of(t.get(9).unwrap()).unwrap().len(), 3);
        let mut k = crate::data::Table::new(Combiner::KeepFirst);
        k.add(9, a.build(&pool)).unwrap();
        k.add(9, b.build(&pool)).unwrap();
        assert_eq!(Edges::of(k.get(9).unwrap()).unwrap().len(), 1);
        let mut r = crate::data::Table::new(Combiner::Reject);
        r.add(9, a.build(&pool)).unwrap();
        assert!(r.add(9, b.build(&pool)).is_err());
        let dense = Array::from_slice(&pool, &[1u8; 16]);
        assert!(t.add(9, dense).is_err(), "edges and bytes do not mix");
        let w = EdgeBuilder::new(true).build(&pool);
        let e = append(&pool, 9, &c, &w).unwrap_err().to_string();
        assert!(e.contains("partition 9") && e.contains("weighted"), "{e}");
    }

    #[test]
    fn vertex_partitions_are_stable_and_spread() {
        let mut counts = [0usize; 8];
        for v in 0..8000i64 {
            let p = vertex_partition(v, 8);
            assert_eq!(p, vertex_partition(v, 8));
            counts[p as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(vertex_partition(-5, 1), 0);
    }
}
