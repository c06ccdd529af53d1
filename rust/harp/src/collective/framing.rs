//! Batch framing: a batch of pieces is one `Batch` frame (its head: the piece list, with the
//! small pieces inline) followed by one `Data` frame per remaining piece, written straight from
//! the partitions' buffers (see docs/wire-protocol.md).

use std::future::Future;

use crate::data::{Array, Table};
use crate::error::{Error, Result};
use crate::pool::{Buf, Pool};
use crate::transport::{Endpoint, Frame};
use crate::wire::{
    self, BatchLayout, Header, Kind, PieceMeta, INLINE_MAX, INLINE_PIECE_MAX, MAX_FRAME,
};

/// A piece to send, borrowing its bytes.
#[derive(Clone, Copy)]
pub struct Out<'b> {
    pub meta: PieceMeta,
    pub bytes: &'b [u8],
}

impl<'b> Out<'b> {
    /// A whole partition.
    pub fn whole(pid: u32, a: &'b Array) -> Out<'b> {
        let len = a.bytes().len() as u64;
        Out {
            meta: PieceMeta {
                pid,
                layout: a.layout(),
                total: len,
                offset: 0,
                len,
                inline: false,
            },
            bytes: a.bytes(),
        }
    }
    /// Bytes `[off, off+len)` of a partition.
    pub fn range(pid: u32, a: &'b Array, off: u64, len: u64) -> Out<'b> {
        Out {
            meta: PieceMeta {
                pid,
                layout: a.layout(),
                total: a.bytes().len() as u64,
                offset: off,
                len,
                inline: false,
            },
            bytes: &a.bytes()[off as usize..(off + len) as usize],
        }
    }
}

/// A received piece owning its bytes.
pub struct In {
    pub meta: PieceMeta,
    pub buf: Buf,
}

impl In {
    pub fn out(&self) -> Out<'_> {
        Out {
            meta: self.meta,
            bytes: &self.buf,
        }
    }
}

/// All partitions of a table as whole pieces.
pub fn table_pieces(t: &Table) -> Vec<Out<'_>> {
    t.iter().map(|(id, a)| Out::whole(id, a)).collect()
}

/// Batches of at most this many pieces keep their piece and part lists on the stack.
const FEW: usize = 16;
/// Inline pieces that add up to at most this many bytes are copied behind the batch's head and
/// written as one buffer.
const COPY_MAX: usize = 8 * 1024;

/// Marks which pieces travel inline and encodes the batch frame's head.
fn batch_head(pieces: &mut [PieceMeta], inline_max: u64) -> Vec<u8> {
    let total: u64 = pieces.iter().map(|p| p.len).sum();
    for p in pieces.iter_mut() {
        p.inline = total <= inline_max || p.len <= INLINE_PIECE_MAX;
    }
    let mut head = Vec::with_capacity(4 + 16 * pieces.len());
    wire::encode_batch_meta(pieces, &mut head);
    head
}

/// Fails (before anything is sent) when a frame of this batch would be larger than a receiver
/// accepts ([`MAX_FRAME`]): the batch frame itself, or a piece that travels in its own frame.
fn check_frames(head: &[u8], metas: &[PieceMeta]) -> Result<()> {
    let mut batch = head.len() as u64;
    for m in metas {
        if m.inline {
            batch = batch.saturating_add(m.len);
        } else if m.len > MAX_FRAME {
            return Err(Error::data(format!(
                "partition {}: a piece of {} bytes is larger than the largest frame ({MAX_FRAME} \
                 bytes); split the partition",
                m.pid, m.len
            )));
        }
    }
    if batch > MAX_FRAME {
        return Err(Error::data(format!(
            "a batch of {} pieces needs a frame of {batch} bytes, more than the largest frame \
             ({MAX_FRAME} bytes)",
            metas.len()
        )));
    }
    Ok(())
}

/// The frames of a batch as [`send_batch_inline`] would write them, for a sender that writes
/// them one at a time itself: the `Batch` frame's payload (the head with the inline pieces
/// copied behind it), then the payload of each `Data` frame.
pub fn batch_frames<'b>(pieces: &[Out<'b>], inline_max: u64) -> Result<(Vec<u8>, Vec<&'b [u8]>)> {
    let mut metas: Vec<PieceMeta> = pieces.iter().map(|p| p.meta).collect();
    let mut head = batch_head(&mut metas, inline_max);
    check_frames(&head, &metas)?;
    let mut data = Vec::new();
    for (p, m) in pieces.iter().zip(&metas) {
        if m.inline {
            head.extend_from_slice(p.bytes);
        } else {
            data.push(p.bytes);
        }
    }
    Ok((head, data))
}

/// Sends a batch of pieces: one `Batch` frame (with the small pieces inline), then one `Data`
/// frame per remaining piece, written from the callers' buffers.
pub async fn send_batch(
    ep: &Endpoint<'_>,
    dst: usize,
    tag: u32,
    aux: u32,
    pieces: &[Out<'_>],
) -> Result<()> {
    send_batch_many(ep, &[dst], tag, aux, pieces).await
}

/// Sends the same batch to several workers, interleaved piece by piece so that each of them
/// can start forwarding early.
pub async fn send_batch_many(
    ep: &Endpoint<'_>,
    dsts: &[usize],
    tag: u32,
    aux: u32,
    pieces: &[Out<'_>],
) -> Result<()> {
    send_batch_inline(ep, dsts, tag, aux, pieces, INLINE_MAX).await
}

/// [`send_batch_many`] where the whole batch travels inline only up to `inline_max` bytes.
/// Pipelined algorithms pass a small value: an inline batch is forwarded only once it has
/// arrived whole, which would turn a pipeline into store-and-forward.
pub async fn send_batch_inline(
    ep: &Endpoint<'_>,
    dsts: &[usize],
    tag: u32,
    aux: u32,
    pieces: &[Out<'_>],
    inline_max: u64,
) -> Result<()> {
    // A small batch (the common case of small messages) keeps its lists on the stack.
    let (mut few_metas, mut many_metas);
    let metas: &mut [PieceMeta] = match pieces.first() {
        Some(first) if pieces.len() <= FEW => {
            few_metas = [first.meta; FEW];
            for (m, p) in few_metas.iter_mut().zip(pieces) {
                *m = p.meta;
            }
            &mut few_metas[..pieces.len()]
        }
        _ => {
            many_metas = pieces.iter().map(|p| p.meta).collect::<Vec<_>>();
            &mut many_metas
        }
    };
    let mut head = batch_head(metas, inline_max);
    check_frames(&head, metas)?;
    let inline = pieces
        .iter()
        .zip(metas.iter())
        .filter(|(_, m)| m.inline)
        .map(|(p, _)| p.bytes);
    let inline_bytes: usize = inline.clone().map(<[u8]>::len).sum();
    let (one, mut few_parts, mut many_parts);
    let parts: &[&[u8]] = if inline_bytes <= COPY_MAX {
        // Small pieces are copied after the head: one buffer for the kernel, not one per piece.
        head.reserve(inline_bytes);
        for b in inline {
            head.extend_from_slice(b);
        }
        one = [&head[..]];
        &one
    } else if pieces.len() <= FEW {
        few_parts = [&[][..]; FEW + 1];
        few_parts[0] = &head;
        let mut n = 1;
        for b in inline {
            few_parts[n] = b;
            n += 1;
        }
        &few_parts[..n]
    } else {
        many_parts = vec![&head[..]];
        many_parts.extend(inline);
        &many_parts
    };
    for &d in dsts {
        ep.send_frame(d, Kind::Batch, tag, aux, parts).await?;
    }
    for (p, m) in pieces.iter().zip(metas.iter()) {
        if !m.inline {
            for &d in dsts {
                ep.send_frame(d, Kind::Data, tag, aux, &[p.bytes]).await?;
            }
        }
    }
    Ok(())
}

/// The head of a received batch: its header, piece list and the frame (holding inline bytes).
pub struct BatchHead {
    pub hdr: Header,
    pub pieces: Vec<PieceMeta>,
    frame: Buf,
    inline_at: usize,
}

impl BatchHead {
    /// The raw frame payload (to forward the head unchanged).
    pub fn raw(&self) -> &[u8] {
        &self.frame
    }
}

pub async fn recv_head(ep: &Endpoint<'_>, src: usize, tag: u32) -> Result<BatchHead> {
    let f = ep.recv_frame(src, tag).await?;
    parse_head(ep, f)
}

/// Decodes a received `Batch` frame's head (see [`wire::decode_batch`]: every announced size is
/// checked before anything is allocated or sliced).
pub fn parse_head(ep: &Endpoint<'_>, f: Frame) -> Result<BatchHead> {
    let src = f.hdr.src;
    if f.hdr.kind != Kind::Batch {
        return Err(Error::Protocol(format!(
            "{}: expected a batch from rank {src}, got {:?}",
            ep.ctx, f.hdr.kind
        )));
    }
    let BatchLayout { pieces, inline_at } = wire::decode_batch(&f.body, MAX_FRAME)
        .map_err(|e| Error::Protocol(format!("{}: batch from rank {src}: {e}", ep.ctx)))?;
    Ok(BatchHead {
        hdr: f.hdr,
        pieces,
        frame: f.body,
        inline_at,
    })
}

/// Receives the bytes of every piece of `head`, calling `each` as each one arrives. The last
/// inline piece takes over the frame's own buffer (moved to its front), so a small message
/// costs one pooled buffer, not two.
pub async fn recv_pieces<F, Fut>(
    ep: &Endpoint<'_>,
    pool: &Pool,
    src: usize,
    head: BatchHead,
    mut each: F,
) -> Result<()>
where
    F: FnMut(In) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let BatchHead {
        hdr,
        pieces,
        mut frame,
        inline_at,
    } = head;
    let last_inline = pieces.iter().rposition(|p| p.inline);
    let mut at = inline_at;
    for (i, m) in pieces.iter().enumerate() {
        let buf = if m.inline {
            inline_bytes(pool, &mut frame, &mut at, m.len, Some(i) == last_inline)?
        } else {
            recv_data(ep, src, hdr.tag, m).await?
        };
        check_piece(m)?;
        each(In { meta: *m, buf }).await?;
    }
    Ok(())
}

/// The `Data` frame carrying piece `m` of a batch from `src`.
async fn recv_data(ep: &Endpoint<'_>, src: usize, tag: u32, m: &PieceMeta) -> Result<Buf> {
    let f = ep.recv_frame(src, tag).await?;
    if f.hdr.kind != Kind::Data || f.body.len() as u64 != m.len {
        return Err(Error::Protocol(format!(
            "{}: expected {} data bytes of partition {} from rank {src}, got {:?} of {}",
            ep.ctx,
            m.len,
            m.pid,
            f.hdr.kind,
            f.body.len()
        )));
    }
    Ok(f.body)
}

/// The range of the inline piece of `len` bytes at `*at` in `frame` (advancing `*at`). The
/// range was validated by [`wire::decode_batch`]; it is checked again so that no input can
/// make a slice panic.
fn inline_range(frame: &Buf, at: &mut usize, len: u64) -> Result<std::ops::Range<usize>> {
    let range = usize::try_from(len)
        .ok()
        .and_then(|l| Some(*at..at.checked_add(l)?))
        .filter(|r| r.end <= frame.len())
        .ok_or_else(|| Error::Protocol("inline piece outside its batch frame".into()))?;
    *at = range.end;
    Ok(range)
}

/// The bytes of `range` of `frame` in a buffer of their own; the last inline piece (`last`)
/// takes over the frame's buffer.
fn take_inline(pool: &Pool, frame: &mut Buf, range: std::ops::Range<usize>, last: bool) -> Buf {
    if last {
        let mut b = std::mem::replace(frame, Buf::empty());
        b.copy_within(range.clone(), 0);
        b.truncate(range.len());
        b
    } else {
        pool.copy_of(&frame[range])
    }
}

/// The bytes of the inline piece of `len` bytes at `*at` in `frame` (advancing `*at`); the last
/// one takes over the frame's buffer.
fn inline_bytes(pool: &Pool, frame: &mut Buf, at: &mut usize, len: u64, last: bool) -> Result<Buf> {
    let range = inline_range(frame, at, len)?;
    Ok(take_inline(pool, frame, range, last))
}

/// A received batch whose inline pieces are still in its frame ([`recv_held`]): combined
/// into a table by `assemble::absorb_held` ([`Held::for_each_piece`]), or dropped.
pub struct Held {
    /// The batch frame, its header (`head.hdr`) and its piece list.
    pub head: BatchHead,
    /// The pieces that travelled in frames of their own, in batch order.
    rest: Vec<Buf>,
}

/// Receives a batch from `src` whose pieces are checked by `expect` (see [`check_head`]) as
/// soon as its head arrives, leaving the inline pieces in the batch frame.
pub async fn recv_held(
    ep: &Endpoint<'_>,
    src: usize,
    tag: u32,
    mut expect: impl FnMut(&PieceMeta) -> std::result::Result<(), String> + Send,
) -> Result<Held> {
    let head = recv_head(ep, src, tag).await?;
    check_head(ep, src, &head.pieces, &mut expect)?;
    let mut rest = Vec::new();
    for m in head.pieces.iter().filter(|m| !m.inline) {
        rest.push(recv_data(ep, src, tag, m).await?);
    }
    Ok(Held { head, rest })
}

impl Held {
    /// Hands every piece to `each` in batch order, except that a whole inline piece of a dense
    /// partition `table` holds is folded straight from the frame ([`Table::fold_bytes`]): a
    /// small message costs no buffer per partition. (`assemble::absorb_held` combines a held
    /// batch this way.)
    pub fn for_each_piece(
        self,
        table: &mut Table,
        pool: &Pool,
        mut each: impl FnMut(&mut Table, In) -> Result<()>,
    ) -> Result<()> {
        let BatchHead {
            pieces,
            mut frame,
            inline_at,
            ..
        } = self.head;
        let mut rest = self.rest.into_iter();
        let last_inline = pieces.iter().rposition(|p| p.inline);
        let mut at = inline_at;
        // Every piece's bounds were checked when the head was decoded (`wire::decode_batch`).
        for (i, m) in pieces.iter().enumerate() {
            let buf = if m.inline {
                let range = inline_range(&frame, &mut at, m.len)?;
                if m.whole() && table.fold_bytes(m.pid, m.layout, &frame[range.clone()])? {
                    continue;
                }
                take_inline(pool, &mut frame, range, Some(i) == last_inline)
            } else {
                rest.next()
                    .ok_or_else(|| Error::Protocol("batch lost a data frame".into()))?
            };
            each(table, In { meta: *m, buf })?;
        }
        Ok(())
    }
}

/// The pieces of a batch payload whose pieces all travel inline, decoded and checked exactly
/// as [`parse_head`] and [`recv_pieces`] do (no endpoint needed: tests and fuzzing use it).
pub fn decode_inline_batch(pool: &Pool, mut frame: Buf) -> Result<Vec<In>> {
    let BatchLayout { pieces, inline_at } = wire::decode_batch(&frame, MAX_FRAME)?;
    if let Some(m) = pieces.iter().find(|m| !m.inline) {
        return Err(Error::Protocol(format!(
            "piece of partition {} does not travel inline",
            m.pid
        )));
    }
    let mut at = inline_at;
    let n = pieces.len();
    let mut out = Vec::with_capacity(n);
    for (i, m) in pieces.into_iter().enumerate() {
        let buf = inline_bytes(pool, &mut frame, &mut at, m.len, i + 1 == n)?;
        check_piece(&m)?;
        out.push(In { meta: m, buf });
    }
    Ok(out)
}

fn check_piece(m: &PieceMeta) -> Result<()> {
    m.layout.check_piece(m.pid, m.total, m.offset, m.len)
}

/// Receives a whole batch.
pub async fn recv_batch(
    ep: &Endpoint<'_>,
    pool: &Pool,
    src: usize,
    tag: u32,
) -> Result<(Header, Vec<In>)> {
    recv_batch_expecting(ep, pool, src, tag, |_| Ok(())).await
}

/// What a receiving step expects of each piece: `Err(why)` when a piece is not one it can
/// legitimately get (e.g. not a segment of the plan owned by the sender).
pub type Expect<'e> = dyn FnMut(&PieceMeta) -> std::result::Result<(), String> + Send + 'e;

/// A piece that must be a whole partition (steps that exchange whole tables).
pub fn whole_piece(m: &PieceMeta) -> std::result::Result<(), String> {
    if m.whole() {
        return Ok(());
    }
    Err("this step exchanges whole partitions only".into())
}

/// Checks every piece of a received batch head against `expect`, and that no two pieces are
/// the same range: a piece that fails is a protocol error naming the sender, found before any
/// piece is taken or assembled.
pub fn check_head(
    ep: &Endpoint<'_>,
    src: usize,
    pieces: &[PieceMeta],
    expect: &mut Expect<'_>,
) -> Result<()> {
    // Senders list pieces in ascending (partition, offset) order; only a batch that is not
    // needs a set to find a range listed twice.
    let ascending = pieces
        .windows(2)
        .all(|w| (w[0].pid, w[0].offset) < (w[1].pid, w[1].offset));
    let mut seen = std::collections::HashSet::new();
    for m in pieces {
        let why = if ascending || seen.insert((m.pid, m.offset)) {
            expect(m).err()
        } else {
            Some("it is in the batch twice".into())
        };
        if let Some(why) = why {
            return Err(Error::Protocol(format!(
                "{}: rank {} sent bytes {}..+{} of partition {} ({} bytes), which this step does \
                 not expect: {why}",
                ep.ctx, src, m.offset, m.len, m.pid, m.total
            )));
        }
    }
    Ok(())
}

/// Receives a whole batch whose pieces are checked by `expect` (see [`check_head`]) as soon as
/// its head arrives.
pub async fn recv_batch_expecting(
    ep: &Endpoint<'_>,
    pool: &Pool,
    src: usize,
    tag: u32,
    expect: impl FnMut(&PieceMeta) -> std::result::Result<(), String> + Send,
) -> Result<(Header, Vec<In>)> {
    let head = recv_head(ep, src, tag).await?;
    finish_batch(ep, pool, head, expect).await
}

/// The rest of a batch whose head has arrived (from its sender `head.hdr.src`): its pieces,
/// checked by `expect` (see [`check_head`]) before any is received.
pub async fn finish_batch(
    ep: &Endpoint<'_>,
    pool: &Pool,
    head: BatchHead,
    mut expect: impl FnMut(&PieceMeta) -> std::result::Result<(), String> + Send,
) -> Result<(Header, Vec<In>)> {
    let src = head.hdr.src as usize;
    check_head(ep, src, &head.pieces, &mut expect)?;
    let hdr = head.hdr;
    let mut out = Vec::with_capacity(head.pieces.len());
    recv_pieces(ep, pool, src, head, |p| {
        out.push(p);
        async { Ok(()) }
    })
    .await?;
    Ok((hdr, out))
}

/// Two in-process workers for crafted-frame tests: rank 1 sends batches built by hand, rank 0
/// runs a real step of an algorithm and the test looks at its outcome.
#[cfg(test)]
pub(crate) mod crafted {
    use super::*;
    use crate::collective::ctx::Ctx;
    use crate::config::Config;
    use crate::data::{DType, Layout};
    use crate::pool::Pool;
    use crate::topology::Topology;
    use crate::transport::Transport;
    use crate::wire::Op;

    /// A piece `(pid, total, offset, len)` of an f64 partition, filled with ones.
    pub type Piece = (u32, u64, u64, u64);

    /// Runs `step` as rank 0 (operation `op`, algorithm `algo`) while rank 1 sends `pieces` to
    /// rank 0 as one batch with `tag`; returns the step's result.
    pub fn run<T>(
        op: Op,
        algo: u8,
        tag: u32,
        pieces: &[Piece],
        step: impl AsyncFnOnce(&Ctx<'_>) -> Result<T>,
    ) -> Result<T> {
        run_batches(op, algo, &[(tag, pieces)], step)
    }

    /// [`run`] with several batches `(tag, pieces)`, sent in order.
    pub fn run_batches<T>(
        op: Op,
        algo: u8,
        batches: &[(u32, &[Piece])],
        step: impl AsyncFnOnce(&Ctx<'_>) -> Result<T>,
    ) -> Result<T> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let pools = [Pool::default(), Pool::default()];
            let ts = Transport::in_process(1, std::time::Duration::from_secs(10), &pools);
            let all = || batches.iter().flat_map(|b| b.1.iter());
            let max = all().map(|p| p.3).max().unwrap_or(0);
            let ones = vec![1u8; max as usize];
            let out = |&(pid, total, offset, len): &Piece| Out {
                meta: PieceMeta {
                    pid,
                    layout: Layout::dense(DType::F64),
                    total,
                    offset,
                    len,
                    inline: false,
                },
                bytes: &ones[..len as usize],
            };
            let ep1 = ts[1].endpoint(op, algo, 1, "crafted");
            for (tag, pieces) in batches {
                let outs: Vec<Out<'_>> = pieces.iter().map(out).collect();
                send_batch(&ep1, 0, *tag, 0, &outs).await.unwrap();
            }
            let cfg = Config {
                segment_min_bytes: 0,
                ..Config::default()
            };
            let topo = Topology::flat(vec!["a:1".into(), "b:1".into()]);
            let cx = Ctx {
                ep: ts[0].endpoint(op, algo, 1, "crafted"),
                pool: &pools[0],
                cfg: &cfg,
                topo: &topo,
                net: None,
            };
            step(&cx).await
        })
    }

    /// Fails unless `r` is rank 0's protocol error (in operation `op`) refusing a piece from
    /// rank 1 for `why`.
    pub fn refused<T>(r: Result<T>, op: &str, why: &str) {
        let Err(e) = r else { panic!("accepted") };
        assert_eq!(e.kind(), "protocol", "{e}");
        let e = e.to_string();
        assert!(
            e.starts_with(&format!(
                "protocol error: rank 0: {op} #1 'crafted': rank 1 sent bytes "
            )),
            "{e}"
        );
        assert!(
            e.ends_with(&format!("which this step does not expect: {why}")),
            "{e}"
        );
    }
}
