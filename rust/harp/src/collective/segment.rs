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
    fn ranges(&self, total: u64, layout: Layout) -> Vec<(u64, u64)> {
        // Only splittable layouts are ever cut: a key-value partition is one segment.
        let n = if self.split && layout.splittable() && total >= self.min && self.p > 1 {
            self.p
        } else {
            1
        };
        split_ranges(total, layout.unit(), n)
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
        let ranges = self.ranges(total, layout);
        let s = ranges.iter().position(|(o, _)| *o == offset).ok_or_else(|| {
            Error::Protocol(format!("partition {pid}: no segment starts at byte {offset} (partition sizes differ between workers?)"))
        })?;
        self.owner(pid, s)
    }
    /// Whether `m` is exactly a segment (same start and length) of the plan of its partition,
    /// owned by `owner`; else why not. (Whether the partition has the size of this worker's
    /// copy is the caller's check: a different size is a data error, not a protocol one.)
    pub fn expect(&self, m: &PieceMeta, owner: usize) -> std::result::Result<(), String> {
        let ranges = self.ranges(m.total, m.layout);
        let Some(s) = ranges.iter().position(|(o, _)| *o == m.offset) else {
            return Err(format!(
                "no segment of the plan ({} segments) starts at byte {}",
                ranges.len(),
                m.offset
            ));
        };
        if ranges[s].1 != m.len {
            return Err(format!(
                "the segment at byte {} has {} bytes",
                m.offset, ranges[s].1
            ));
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
    /// Segments owned by `owner` (after a reduce-scatter, all of them are valid there).
    pub fn owned_pieces<'t>(&self, table: &'t Table, owner: usize) -> Vec<Out<'t>> {
        self.pieces(table, owner, None).unwrap_or_default()
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
