//! Batch framing: a batch of pieces is one `Batch` frame (its head: the piece list, with the
//! small pieces inline) followed by one `Data` frame per remaining piece, written straight from
//! the partitions' buffers (see docs/wire-protocol.md).

use std::future::Future;

use crate::data::{Array, Table};
use crate::error::{Error, Result};
use crate::pool::{Buf, Pool};
use crate::transport::{Endpoint, Frame};
use crate::wire::{
    self, BatchLayout, BatchMeta, Header, Kind, PieceMeta, INLINE_MAX, INLINE_PIECE_MAX, MAX_FRAME,
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

/// Marks which pieces travel inline and encodes the batch frame's head.
fn batch_head(pieces: &mut [PieceMeta], inline_max: u64) -> Vec<u8> {
    let total: u64 = pieces.iter().map(|p| p.len).sum();
    for p in pieces.iter_mut() {
        p.inline = total <= inline_max || p.len <= INLINE_PIECE_MAX;
    }
    let meta = wire::encode(&BatchMeta {
        pieces: pieces.to_vec(),
    });
    let mut head = Vec::with_capacity(4 + meta.len());
    head.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    head.extend_from_slice(&meta);
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
    let mut metas: Vec<PieceMeta> = pieces.iter().map(|p| p.meta).collect();
    let head = batch_head(&mut metas, inline_max);
    check_frames(&head, &metas)?;
    let mut parts: Vec<&[u8]> = vec![&head];
    parts.extend(
        pieces
            .iter()
            .zip(&metas)
            .filter(|(_, m)| m.inline)
            .map(|(p, _)| p.bytes),
    );
    for &d in dsts {
        ep.send_frame(d, Kind::Batch, tag, aux, &parts).await?;
    }
    for (p, m) in pieces.iter().zip(&metas) {
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
            let f = ep.recv_frame(src, hdr.tag).await?;
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
            f.body
        };
        check_piece(m)?;
        each(In { meta: *m, buf }).await?;
    }
    Ok(())
}

/// The bytes of the inline piece of `len` bytes at `*at` in `frame` (advancing `*at`); the last
/// one takes over the frame's buffer. The range was validated by [`wire::decode_batch`]; it is
/// checked again so that no input can make a slice panic.
fn inline_bytes(pool: &Pool, frame: &mut Buf, at: &mut usize, len: u64, last: bool) -> Result<Buf> {
    let range = usize::try_from(len)
        .ok()
        .and_then(|l| Some(*at..at.checked_add(l)?))
        .filter(|r| r.end <= frame.len())
        .ok_or_else(|| Error::Protocol("inline piece outside its batch frame".into()))?;
    *at = range.end;
    if last {
        let mut b = std::mem::replace(frame, Buf::empty());
        b.copy_within(range.clone(), 0);
        b.truncate(range.len());
        Ok(b)
    } else {
        Ok(pool.copy_of(&frame[range]))
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
    let head = recv_head(ep, src, tag).await?;
    let hdr = head.hdr;
    let mut out = Vec::with_capacity(head.pieces.len());
    recv_pieces(ep, pool, src, head, |p| {
        out.push(p);
        async { Ok(()) }
    })
    .await?;
    Ok((hdr, out))
}
