//! Pipelined reduce along a tree: every worker streams its table to its parent in chunks, in
//! (partition, offset) order, merging its children's streams with its own partitions chunk by
//! chunk as they arrive. A worker forwards a chunk as soon as it has that chunk from every
//! child, so a large table flows through all levels at once: the time is the busiest worker's
//! intake (its children's bytes over its link) plus one chunk per level, instead of the whole
//! table once per level. A small table is one batch per child, as in the unpipelined tree.
//!
//! The cut of a partition into chunks depends on the partition alone (its size and layout, the
//! table's combiner and the configured chunk size): every worker cuts a partition the same way,
//! so equal keys (partition, offset) meet whatever partitions each worker holds. Partitions that
//! cannot be combined range by range (key-value, edges, non-element-wise combiners) travel whole.

use std::collections::VecDeque;

use super::assemble::{check_shape, fold_into, Assembler};
use super::ctx::Ctx;
use super::framing::{recv_batch_expecting, send_batch, In, Out};
use super::segment;
use super::trees::Tree;
use crate::config::Config;
use crate::data::{Array, Combiner, Layout, Table};
use crate::error::{Error, Result};
use crate::wire::PieceMeta;

/// `aux` of a batch that another batch of the stream follows.
const MORE: u32 = 1;
/// `aux` of the stream's last batch.
const LAST: u32 = 0;

/// A piece's key: streams are sorted by it and equal keys are combined.
type Key = (u32, u64);

/// How partitions are cut into chunks.
struct Plan<'a> {
    cfg: &'a Config,
    p: usize,
    elementwise: bool,
}

impl<'a> Plan<'a> {
    fn new(cx: &Ctx<'a>, combiner: &Combiner) -> Plan<'a> {
        Plan {
            cfg: cx.cfg,
            p: cx.size(),
            elementwise: combiner.elementwise(),
        }
    }
    /// The chunk length of a partition of `total` bytes in `layout`, or `None` when it travels
    /// whole.
    fn chunk(&self, total: u64, layout: Layout) -> Option<u64> {
        if !(self.elementwise && layout.splittable()) {
            return None;
        }
        let c = segment::chunk(self.cfg, total, self.p);
        let unit = layout.unit();
        let c = (c / unit).max(1) * unit;
        (total > c).then_some(c)
    }
    /// The (offset, len) chunks of a partition.
    fn cut(&self, total: u64, layout: Layout) -> Vec<(u64, u64)> {
        match self.chunk(total, layout) {
            Some(c) => segment::chunks(total, layout.unit(), c),
            None => vec![(0, total)],
        }
    }
    /// Whether `m` is exactly one chunk of its partition's cut.
    fn expect(&self, m: &PieceMeta) -> std::result::Result<(), String> {
        let ok = match self.chunk(m.total, m.layout) {
            None => m.whole(),
            Some(c) => {
                m.offset.is_multiple_of(c)
                    && m.offset < m.total
                    && m.len == c.min(m.total - m.offset)
            }
        };
        if ok {
            return Ok(());
        }
        Err("it is not a chunk of the partition's cut for a pipelined reduce".into())
    }
}

/// One child's stream: the pieces of its last batch not yet merged.
struct Stream {
    src: usize,
    queue: VecDeque<In>,
    ended: bool,
    last: Option<Key>,
}

impl Stream {
    /// Receives the child's next batch if every piece of the previous one was merged.
    async fn refill(&mut self, cx: &Ctx<'_>, plan: &Plan<'_>, tag: u32) -> Result<()> {
        while self.queue.is_empty() && !self.ended {
            let last = &mut self.last;
            let (hdr, pieces) = recv_batch_expecting(&cx.ep, cx.pool, self.src, tag, |m| {
                plan.expect(m)?;
                let key = (m.pid, m.offset);
                if let Some((pid, o)) = last.filter(|&l| key <= l) {
                    return Err(format!(
                        "it comes after the piece at byte {o} of partition {pid} (a pipelined \
                         reduce streams pieces in partition and offset order)"
                    ));
                }
                *last = Some(key);
                Ok(())
            })
            .await?;
            self.ended = match hdr.aux {
                MORE => false,
                LAST => true,
                x => {
                    return Err(Error::Protocol(format!(
                        "{}: rank {} sent a reduce stream flag {x}",
                        cx.ep.ctx, self.src
                    )))
                }
            };
            self.queue.extend(pieces);
        }
        Ok(())
    }
    fn head(&self) -> Option<Key> {
        self.queue.front().map(|i| (i.meta.pid, i.meta.offset))
    }
}

/// A merged chunk waiting to be sent: a range of the table, or a received piece combined with
/// the other children's (a partition this worker does not hold).
enum Item {
    Own(u32, u64, u64),
    Got(In),
}

/// Reduce to the root of `t` (the table's combination ends at the root; the others' tables are
/// left empty), pipelined as described in the module documentation, on frames tagged `tag`.
pub async fn reduce_pipelined(cx: &Ctx<'_>, table: &mut Table, t: &Tree, tag: u32) -> Result<()> {
    let r = cx.rank();
    let combiner = table.combiner().clone();
    let plan = Plan::new(cx, &combiner);
    let mut own: VecDeque<(u32, u64, u64)> = VecDeque::new();
    for (pid, a) in table.iter() {
        for (o, l) in plan.cut(a.bytes().len() as u64, a.layout()) {
            own.push_back((pid, o, l));
        }
    }
    let mut kids: Vec<Stream> = t.children[r]
        .iter()
        .map(|&src| Stream {
            src,
            queue: VecDeque::new(),
            ended: false,
            last: None,
        })
        .collect();
    let parent = t.parent[r];
    // Batches of about one chunk (at least 8 KiB) go to the parent as soon as they fill.
    let flush = segment::chunk(cx.cfg, table.bytes(), cx.size());
    let (mut pending, mut pending_bytes) = (Vec::<Item>::new(), 0u64);
    let mut asm = Assembler::default();
    loop {
        for k in kids.iter_mut() {
            k.refill(cx, &plan, tag).await?;
        }
        let mine = own.front().map(|&(pid, o, _)| (pid, o));
        let Some(key) = kids.iter().filter_map(Stream::head).chain(mine).min() else {
            break;
        };
        let got: Vec<In> = kids
            .iter_mut()
            .filter(|k| k.head() == Some(key))
            .map(|k| k.queue.pop_front().expect("has a head"))
            .collect();
        let mine = (mine == Some(key)).then(|| own.pop_front().expect("has a front"));
        let item = merge(table, &combiner, key, mine, got)?;
        match (item, parent) {
            (Item::Got(piece), None) => asm.add(table, cx.pool, piece)?,
            (Item::Own(..), None) => {}
            (item, Some(parent)) => {
                pending_bytes += match &item {
                    Item::Own(_, _, l) => *l,
                    Item::Got(p) => p.meta.len,
                };
                pending.push(item);
                if pending_bytes >= flush {
                    send(cx, table, parent, tag, MORE, &pending).await?;
                    pending.clear();
                    pending_bytes = 0;
                }
            }
        }
    }
    match parent {
        Some(parent) => {
            send(cx, table, parent, tag, LAST, &pending).await?;
            table.clear();
            Ok(())
        }
        None => asm.finish(table),
    }
}

/// Combines the pieces of `key`: the children's pieces `got` and this worker's own chunk
/// (`mine`), into the table when it holds the partition (or when the pieces are whole
/// partitions), else into the first received piece.
fn merge(
    table: &mut Table,
    combiner: &Combiner,
    key: Key,
    mine: Option<(u32, u64, u64)>,
    got: Vec<In>,
) -> Result<Item> {
    let (pid, offset) = key;
    if let Some((_, o, l)) = mine {
        let a = table
            .get_mut(pid)
            .expect("own chunks are of held partitions");
        for piece in got {
            fold_into(combiner, a, piece)?;
        }
        return Ok(Item::Own(pid, o, l));
    }
    let mut got = got.into_iter();
    let mut base = got.next().expect("a key comes from a piece");
    if let Some(a) = table.get(pid) {
        // Held, yet not among this worker's chunks: only a partition of another size or
        // layout is cut differently.
        check_shape(pid, a.layout(), a.bytes().len() as u64, &base)?;
    }
    if base.meta.whole() {
        // A whole partition this worker does not hold (yet): the table combines.
        let len = base.meta.len;
        table.add(pid, Array::received(pid, base.meta.layout, base.buf)?)?;
        for piece in got {
            let a = table.get_mut(pid).expect("just added");
            fold_into(combiner, a, piece)?;
        }
        return Ok(Item::Own(pid, offset, len));
    }
    let Layout::Dense { dtype } = base.meta.layout else {
        unreachable!("only dense partitions are cut")
    };
    for piece in got {
        let (m, b) = (piece.meta, base.meta);
        m.layout.check_same(pid, m.total, b.layout, b.total)?;
        combiner.combine_bytes(pid, dtype, &mut base.buf, dtype, &piece.buf)?;
    }
    Ok(Item::Got(base))
}

/// Sends the merged chunks `items` as one batch with `aux`.
async fn send(
    cx: &Ctx<'_>,
    table: &Table,
    parent: usize,
    tag: u32,
    aux: u32,
    items: &[Item],
) -> Result<()> {
    let outs: Vec<Out<'_>> = items
        .iter()
        .map(|it| match it {
            Item::Own(pid, o, l) => {
                let a = table.get(*pid).expect("merged into the table");
                if *o == 0 && *l == a.bytes().len() as u64 {
                    Out::whole(*pid, a)
                } else {
                    Out::range(*pid, a, *o, *l)
                }
            }
            Item::Got(p) => p.out(),
        })
        .collect();
    send_batch(&cx.ep, parent, tag, aux, &outs).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted::{self, refused, Piece};
    use crate::collective::{tags, trees::binary_tree};
    use crate::data::DType;
    use crate::wire::Op;

    /// Rank 0 (the root; rank 1 its child) holds partition 0 of 4096 f64, cut into four 8 KiB
    /// chunks; rank 1 streams `pieces` of ones as one last batch.
    fn reduce_with(pieces: &[Piece]) -> Result<Table> {
        crafted::run(Op::Reduce, 5, tags::MAIN.tag(), pieces, async |cx| {
            let mut t = Table::new(Combiner::Sum);
            t.add(0, Array::zeros(cx.pool, DType::F64, 4096)).unwrap();
            reduce_pipelined(cx, &mut t, &binary_tree(&[0, 1]), tags::MAIN.tag())
                .await
                .map(|()| t)
        })
    }

    #[test]
    fn the_root_folds_a_childs_chunks_and_creates_what_it_lacks() {
        let chunks: Vec<Piece> = (0..4).map(|i| (0, 32768, i * 8192, 8192)).collect();
        let mut pieces = chunks.clone();
        pieces.extend(chunks.iter().map(|&(_, t, o, l)| (7, t, o, l)));
        let t = reduce_with(&pieces).unwrap();
        let ones = f64::from_bits(0x0101_0101_0101_0101);
        for pid in [0, 7] {
            let a = t.get(pid).unwrap().as_slice::<f64>().unwrap();
            assert!(a.len() == 4096 && a.iter().all(|&x| x == ones), "{pid}");
        }
        // A partition whose chunks do not all arrive.
        let r = reduce_with(&[(7, 32768, 0, 8192)]);
        assert!(r
            .unwrap_err()
            .to_string()
            .contains("partition 7 arrived incomplete"));
    }

    #[test]
    fn a_stream_out_of_order_or_off_the_cut_is_refused() {
        refused(
            reduce_with(&[(0, 32768, 8192, 8192), (0, 32768, 0, 8192)]),
            "reduce",
            "it comes after the piece at byte 8192 of partition 0 (a pipelined reduce streams \
             pieces in partition and offset order)",
        );
        refused(
            reduce_with(&[(3, 64, 0, 64), (2, 64, 0, 64)]),
            "reduce",
            "it comes after the piece at byte 0 of partition 3 (a pipelined reduce streams \
             pieces in partition and offset order)",
        );
        for off_cut in [(0, 32768, 0, 16384), (0, 32768, 4096, 8192), (5, 64, 0, 32)] {
            refused(
                reduce_with(&[off_cut]),
                "reduce",
                "it is not a chunk of the partition's cut for a pipelined reduce",
            );
        }
    }
}
