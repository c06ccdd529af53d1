//! Segmenting: cutting partitions into element-aligned byte ranges (segments of the
//! reduce-scatter based algorithms, chunks of the pipelined broadcast).

use std::collections::HashSet;

use super::ctx::Ctx;
use super::framing::Out;
use crate::config::Config;
use crate::data::{Layout, Partitioner, Table};
use crate::error::{Error, Result};
use crate::wire::PieceMeta;

/// Splits `total` bytes into `n` nearly equal ranges of whole `es`-byte units.
pub fn split_ranges(total: u64, es: u64, n: usize) -> Vec<(u64, u64)> {
    let elems = total / es;
    let n = (n as u64).max(1).min(elems.max(1));
    (0..n)
        .map(|s| {
            let a = s * elems / n;
            let b = (s + 1) * elems / n;
            (a * es, (b - a) * es)
        })
        .collect()
}

/// Pipeline chunk: small enough that the chain's fill time ((p−2)·c/B) stays near 0.5 % of n/B,
/// large enough that per-frame costs vanish.
pub fn auto_chunk(total: u64, p: usize) -> u64 {
    let c = total / 200 / (p.saturating_sub(2).max(1) as u64);
    // At least 8 KiB: above the inline piece limit, so every chunk is its own frame.
    c.clamp(8 * 1024, 256 * 1024) / 64 * 64
}

/// The pipeline chunk for `total` bytes over `p` workers (broadcast, pipelined reduce): the
/// configured size (`Config::chunk_size`), or one picked from the size and p ([`auto_chunk`])
/// when it is 0.
pub fn chunk(cfg: &Config, total: u64, p: usize) -> u64 {
    if cfg.chunk_size > 0 {
        cfg.chunk_size as u64
    } else {
        auto_chunk(total, p)
    }
}

/// The pieces `(offset, len)` of a partition of `total` bytes cut into chunks of about `chunk`
/// bytes (rounded down to whole units of `unit` bytes, at least one unit): one piece when it fits.
pub fn chunks(total: u64, unit: u64, chunk: u64) -> Vec<(u64, u64)> {
    let c = (chunk / unit).max(1) * unit;
    if total <= c {
        return vec![(0, total)];
    }
    (0..total.div_ceil(c))
        .map(|i| (i * c, c.min(total - i * c)))
        .collect()
}

/// How partitions are cut into segments and which worker owns each segment. Every worker
/// computes the same cut from a partition's size alone.
pub struct Segmenter {
    p: usize,
    split: bool,
    min: u64,
    part: Partitioner,
}

impl Segmenter {
    /// Segments for allreduce-style operations (split when the combiner allows it and the
    /// partition's layout is splittable, see [`Combiner::elementwise_on`](crate::data::Combiner::elementwise_on)).
    pub fn new(cx: &Ctx<'_>, table: &Table) -> Segmenter {
        Segmenter::split(
            cx.size(),
            table.combiner().elementwise(),
            cx.cfg.segment_min_bytes,
        )
    }
    /// Partitions of at least `min` bytes cut into p segments when `elementwise`, owned from
    /// their modulo owner on.
    pub fn split(p: usize, elementwise: bool, min: u64) -> Segmenter {
        Segmenter {
            p,
            split: elementwise,
            min,
            part: Partitioner::Modulo,
        }
    }
    /// Whole partitions, owned by `part` (reduce-scatter).
    pub fn whole(p: usize, part: Partitioner) -> Segmenter {
        Segmenter {
            p,
            split: false,
            min: u64::MAX,
            part,
        }
    }
    /// How many segments a partition of `total` bytes is cut into (before [`split_ranges`]
    /// caps it at one per unit).
    fn cuts(&self, total: u64, layout: Layout) -> usize {
        // Only splittable layouts are ever cut: a key-value partition is one segment.
        if self.split && layout.splittable() && total >= self.min && self.p > 1 {
            self.p
        } else {
            1
        }
    }
    fn ranges(&self, total: u64, layout: Layout) -> Vec<(u64, u64)> {
        split_ranges(total, layout.unit(), self.cuts(total, layout))
    }
    /// The segment of the partition's plan that starts at byte `offset`: its index and length
    /// (what a search of [`split_ranges`] finds, in constant time: a receive checks every
    /// piece, and a plan has p segments).
    fn segment_at(&self, total: u64, layout: Layout, offset: u64) -> Option<(usize, u64)> {
        let es = layout.unit();
        let elems = total / es;
        let n = (self.cuts(total, layout) as u64).max(1).min(elems.max(1));
        if !offset.is_multiple_of(es) {
            return None;
        }
        let a = offset / es;
        // Segment s starts at ⌊s·elems/n⌋ units, strictly increasing in s when elems ≥ n: the
        // first s reaching a is ⌈a·n/elems⌉, and it starts at a or no segment does.
        let at = |s: u64| (u128::from(s) * u128::from(elems) / u128::from(n)) as u64;
        let s = if elems == 0 {
            0
        } else {
            (u128::from(a) * u128::from(n)).div_ceil(u128::from(elems)) as u64
        };
        (s < n && at(s) == a).then(|| (s as usize, (at(s + 1) - a) * es))
    }
    fn owner(&self, pid: u32, seg: usize) -> Result<usize> {
        Ok((self.part.owner(pid, self.p)? + seg) % self.p)
    }
    /// (offset, len, owner) of every segment of a partition.
    pub fn segments(&self, pid: u32, total: u64, layout: Layout) -> Result<Vec<(u64, u64, usize)>> {
        self.ranges(total, layout)
            .into_iter()
            .enumerate()
            .map(|(s, (o, l))| Ok((o, l, self.owner(pid, s)?)))
            .collect()
    }
    /// The owner of the segment of `pid` starting at `offset`.
    pub fn owner_of(&self, pid: u32, total: u64, layout: Layout, offset: u64) -> Result<usize> {
        let (s, _) = self.segment_at(total, layout, offset).ok_or_else(|| {
            Error::Protocol(format!("partition {pid}: no segment starts at byte {offset} (partition sizes differ between workers?)"))
        })?;
        self.owner(pid, s)
    }
    /// Whether `m` is exactly a segment (same start and length) of the plan of its partition,
    /// owned by `owner`; else why not. (Whether the partition has the size of this worker's
    /// copy is the caller's check: a different size is a data error, not a protocol one.)
    pub fn expect(&self, m: &PieceMeta, owner: usize) -> std::result::Result<(), String> {
        let Some((s, len)) = self.segment_at(m.total, m.layout, m.offset) else {
            return Err(format!(
                "no segment of the plan ({} segments) starts at byte {}",
                self.ranges(m.total, m.layout).len(),
                m.offset
            ));
        };
        if len != m.len {
            return Err(format!("the segment at byte {} has {len} bytes", m.offset));
        }
        match self.owner(m.pid, s) {
            Ok(w) if w == owner => Ok(()),
            Ok(w) => Err(format!(
                "that segment is owned by rank {w}; this step takes rank {owner}'s"
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The table's segments owned by `owner`, restricted to `have` when given.
    pub fn pieces<'t>(
        &self,
        table: &'t Table,
        owner: usize,
        have: Option<&HashSet<(u32, u64)>>,
    ) -> Result<Vec<Out<'t>>> {
        let mut out = Vec::new();
        for (pid, a) in table.iter() {
            for (o, l, w) in self.segments(pid, a.bytes().len() as u64, a.layout())? {
                if w == owner && have.is_none_or(|h| h.contains(&(pid, o))) {
                    out.push(Out::range(pid, a, o, l));
                }
            }
        }
        Ok(out)
    }
    /// Every segment of `table` grouped by owner, restricted to `have` when given: what
    /// [`Segmenter::pieces`] returns for each owner, built in one pass (a ring asks for one
    /// owner's segments in each of its p − 1 steps).
    pub fn buckets(&self, table: &Table, have: Option<&HashSet<(u32, u64)>>) -> Result<Buckets> {
        let mut b = Buckets {
            by_owner: vec![Vec::new(); self.p],
            unsorted: vec![false; self.p],
            known: HashSet::new(),
        };
        for (pid, a) in table.iter() {
            b.known.insert(pid);
            for (o, _, w) in self.segments(pid, a.bytes().len() as u64, a.layout())? {
                if have.is_none_or(|h| h.contains(&(pid, o))) {
                    b.by_owner[w].push((pid, o));
                }
            }
        }
        Ok(b)
    }
    /// Segments owned by `owner` (after a reduce-scatter, all of them are valid there).
    pub fn owned_pieces<'t>(&self, table: &'t Table, owner: usize) -> Vec<Out<'t>> {
        self.pieces(table, owner, None).unwrap_or_default()
    }
}

/// A table's segments by owner ([`Segmenter::buckets`]), kept up to date as the table gains
/// segments and partitions, each owner's in table order (partition id, then offset). A
/// segment is kept as its start; its length is read from the partition when it is sent (a
/// partition that cannot be cut, such as key-value, changes size as it is combined).
pub struct Buckets {
    by_owner: Vec<Vec<(u32, u64)>>,
    unsorted: Vec<bool>,
    known: HashSet<u32>,
}

impl Buckets {
    /// The segment of partition `pid` starting at `offset` now belongs to `owner`'s bucket.
    pub fn add(&mut self, owner: usize, pid: u32, offset: u64) {
        self.known.insert(pid);
        self.by_owner[owner].push((pid, offset));
        self.unsorted[owner] = true;
    }
    /// Partition `pid`, if it is new to the buckets, is now in `table`: every segment of it
    /// joins its owner's bucket.
    pub fn add_partition(&mut self, seg: &Segmenter, table: &Table, pid: u32) -> Result<()> {
        if self.known.contains(&pid) {
            return Ok(());
        }
        let Some(a) = table.get(pid) else {
            return Ok(());
        };
        for (o, _, w) in seg.segments(pid, a.bytes().len() as u64, a.layout())? {
            self.add(w, pid, o);
        }
        Ok(())
    }
    /// The pieces of `owner`'s bucket in `table` cut by `seg`, as [`Segmenter::pieces`]
    /// gives them.
    pub fn pieces<'t>(&mut self, seg: &Segmenter, table: &'t Table, owner: usize) -> Vec<Out<'t>> {
        if std::mem::take(&mut self.unsorted[owner]) {
            self.by_owner[owner].sort_unstable();
        }
        let mut out = Vec::with_capacity(self.by_owner[owner].len());
        for &(pid, o) in &self.by_owner[owner] {
            let Some(a) = table.get(pid) else { continue };
            let total = a.bytes().len() as u64;
            if let Some((s, len)) = seg.segment_at(total, a.layout(), o) {
                if seg.owner(pid, s).is_ok_and(|w| w == owner) {
                    out.push(Out::range(pid, a, o, len));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Array, Combiner, DType};
    use crate::pool::Pool;

    /// The configured chunk wins; 0 picks one from the size and p.
    #[test]
    fn chunk_is_the_configured_size_or_the_automatic_one() {
        let mut cfg = Config::default();
        assert_eq!(chunk(&cfg, 1 << 30, 8), auto_chunk(1 << 30, 8));
        cfg.chunk_size = 1000;
        assert_eq!(chunk(&cfg, 1 << 30, 8), 1000);
    }

    /// Ranges are element aligned, contiguous, cover everything, and differ by at most one
    /// element.
    #[test]
    fn split_ranges_cover_evenly() {
        for dtype in DType::ALL {
            let es = dtype.size() as u64;
            for elems in [0u64, 1, 2, 7, 64, 1001] {
                for n in 0..12 {
                    let r = split_ranges(elems * es, es, n);
                    assert_eq!(r.len() as u64, (n as u64).max(1).min(elems.max(1)));
                    let mut at = 0;
                    for &(o, l) in &r {
                        assert_eq!(o, at);
                        assert_eq!(l % es, 0);
                        at += l;
                    }
                    assert_eq!(at, elems * es);
                    let (lo, hi) = (r.iter().map(|x| x.1).min(), r.iter().map(|x| x.1).max());
                    assert!(
                        hi.unwrap() - lo.unwrap() <= es,
                        "{dtype:?} {elems} {n}: {r:?}"
                    );
                }
            }
        }
    }

    /// The constant-time lookup of a segment by its offset finds what a search of the plan
    /// finds, for every byte offset (starts, interiors, the end, beyond).
    #[test]
    fn segment_at_is_the_plans_search() {
        for dtype in [DType::F64, DType::F32, DType::U8] {
            let layout = Layout::dense(dtype);
            let es = dtype.size() as u64;
            for elems in [0u64, 1, 2, 7, 64, 1001] {
                for p in 1..12 {
                    let seg = Segmenter::split(p, true, 0);
                    let total = elems * es;
                    let plan = seg.ranges(total, layout);
                    for offset in 0..=total + es {
                        let want = plan
                            .iter()
                            .position(|&(o, _)| o == offset)
                            .map(|s| (s, plan[s].1));
                        assert_eq!(
                            seg.segment_at(total, layout, offset),
                            want,
                            "{dtype:?} {elems} elements, p = {p}, offset {offset}"
                        );
                    }
                }
            }
        }
    }

    /// The buckets give every owner what `pieces` gives, also after segments and partitions
    /// join them.
    #[test]
    fn buckets_are_pieces_by_owner() {
        let pool = Pool::default();
        let key = |v: &[Out<'_>]| -> Vec<(u32, u64, u64)> {
            v.iter()
                .map(|o| (o.meta.pid, o.meta.offset, o.meta.len))
                .collect()
        };
        for p in 1..=6 {
            let seg = Segmenter::split(p, true, 1024);
            let mut t = Table::new(Combiner::Sum);
            t.add(9, Array::zeros(&pool, DType::F64, 1000)).unwrap();
            t.add(2, Array::zeros(&pool, DType::F32, 10)).unwrap();
            let mut b = seg.buckets(&t, None).unwrap();
            for w in 0..p {
                assert_eq!(
                    key(&b.pieces(&seg, &t, w)),
                    key(&seg.pieces(&t, w, None).unwrap())
                );
            }
            // A partition that changes size (as key-value partitions do when combined) is
            // sent at its size now.
            t.remove(2);
            t.add(2, Array::zeros(&pool, DType::F32, 17)).unwrap();
            for w in 0..p {
                assert_eq!(
                    key(&b.pieces(&seg, &t, w)),
                    key(&seg.pieces(&t, w, None).unwrap())
                );
            }
            // A new partition joins whole; a known one is not added twice.
            t.add(5, Array::zeros(&pool, DType::F64, 3000)).unwrap();
            b.add_partition(&seg, &t, 5).unwrap();
            b.add_partition(&seg, &t, 9).unwrap();
            for w in 0..p {
                assert_eq!(
                    key(&b.pieces(&seg, &t, w)),
                    key(&seg.pieces(&t, w, None).unwrap())
                );
            }
            // Restricted to `have`, then given one more segment.
            let mut have = HashSet::new();
            have.insert((9u32, 0u64));
            let mut b = seg.buckets(&t, Some(&have)).unwrap();
            let (o, _, w) = seg.segments(5, 24000, Layout::dense(DType::F64)).unwrap()[p - 1];
            have.insert((5, o));
            b.add(w, 5, o);
            for w in 0..p {
                assert_eq!(
                    key(&b.pieces(&seg, &t, w)),
                    key(&seg.pieces(&t, w, Some(&have)).unwrap())
                );
            }
        }
    }

    #[test]
    fn chunks_cover_in_whole_units() {
        assert_eq!(chunks(0, 8, 100), vec![(0, 0)]);
        assert_eq!(chunks(96, 8, 100), vec![(0, 96)]);
        assert_eq!(
            chunks(100, 4, 3),
            (0..25).map(|i| (i * 4, 4)).collect::<Vec<_>>()
        );
        for (total, unit, chunk) in [(1000u64, 8u64, 100u64), (999, 1, 10), (4096, 4, 4096)] {
            let c = chunks(total, unit, chunk);
            let mut at = 0;
            for &(o, l) in &c {
                assert_eq!(o, at);
                assert!(l <= chunk.max(unit) && l.is_multiple_of(unit) || o + l == total);
                at += l;
            }
            assert_eq!(at, total);
        }
    }

    #[test]
    fn auto_chunk_bounds() {
        assert_eq!(auto_chunk(0, 8), 8 * 1024);
        assert_eq!(auto_chunk(1 << 40, 8), 256 * 1024);
        // About 0.5 % of the message over the chain's p − 2 steps: 128 MiB over 8 workers.
        assert_eq!(auto_chunk(1 << 27, 8), 111_808);
        for p in 1..40 {
            for total in [1u64, 1 << 20, 1 << 27, 1 << 33] {
                let c = auto_chunk(total, p);
                assert!(
                    (8 * 1024..=256 * 1024).contains(&c) && c.is_multiple_of(64),
                    "{p} {total}"
                );
            }
        }
    }

    /// Every segment has exactly one owner, big partitions are spread over all workers, small
    /// ones and non-element-wise combiners stay whole.
    #[test]
    fn segments_and_owners() {
        const F64: Layout = Layout::Dense { dtype: DType::F64 };
        let pool = Pool::default();
        for p in 1..=8 {
            let seg = Segmenter::split(p, true, 1024);
            let mut t = Table::new(Combiner::Sum);
            t.add(3, Array::zeros(&pool, DType::F64, 1000)).unwrap();
            t.add(4, Array::zeros(&pool, DType::F32, 10)).unwrap();
            let segs = seg.segments(3, 8000, F64).unwrap();
            assert_eq!(segs.len(), p);
            let mut owners: Vec<usize> = segs.iter().map(|s| s.2).collect();
            owners.sort();
            assert_eq!(owners, (0..p).collect::<Vec<_>>());
            for &(o, _, w) in &segs {
                assert_eq!(seg.owner_of(3, 8000, F64, o).unwrap(), w);
            }
            assert_eq!(
                seg.segments(4, 40, Layout::dense(DType::F32)).unwrap(),
                vec![(0, 40, 4 % p)]
            );
            let mut bytes = 0;
            for w in 0..p {
                bytes += seg
                    .owned_pieces(&t, w)
                    .iter()
                    .map(|x| x.bytes.len())
                    .sum::<usize>();
            }
            assert_eq!(bytes as u64, t.bytes());
            assert!(seg.owner_of(3, 8000, F64, 4).is_err() || p == 1);
            let whole = Segmenter::split(p, false, 0);
            assert_eq!(whole.segments(3, 8000, F64).unwrap().len(), 1);
        }
    }
}
