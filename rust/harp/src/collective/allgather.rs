//! Allgather: afterwards every worker's table is the union of all tables (equal ids combined
//! with the table's combiner, in rank order of arrival).

use super::algorithm::AllgatherAlgorithm;
use super::assemble::absorb;
use super::choose;
use super::ctx::Ctx;
use super::doubling::doubling;
use super::framing::{recv_batch, send_batch, table_pieces, In, Out};
use super::tags;
use crate::data::Table;
use crate::error::{Error, Result};

/// Allgather with `algo`.
pub async fn allgather(cx: &Ctx<'_>, table: &mut Table, algo: AllgatherAlgorithm) -> Result<()> {
    match algo {
        AllgatherAlgorithm::Auto => auto(cx, table).await,
        AllgatherAlgorithm::Ring => ring(cx, table).await,
        AllgatherAlgorithm::KnownTotal(n) => known_total(cx, table, n).await,
        AllgatherAlgorithm::RecursiveDoubling => recursive_doubling(cx, table).await,
    }
}

/// The automatic allgather: recursive doubling that agrees on the way whether any worker's
/// table reaches `Config::allreduce_crossover` (exactly as the automatic allreduce does, see
/// [`choose`]), then the ring if one does. At 64 MiB, p = 8 the ring holds the bound where
/// recursive doubling takes 1.39× it (bench/history-netns.md, Part 0).
pub async fn auto(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    let large = choose::allreduce_large(table.bytes(), cx.cfg.allreduce_crossover);
    if doubling(cx, table, Some(large)).await? {
        ring(cx, table).await?;
    }
    Ok(())
}

/// Recursive doubling: the union grows by swapping everything held with rank r xor 2^k in
/// round k (equal ids combined on arrival, as in the ring). It is bidirectional exchange's
/// exchange pattern, whose combining already is the allgather's union. Cost for n bytes
/// gathered in total: log2 p · α + (p−1)/p · nβ when p is a power of two (the ring's bytes in
/// log2 p instead of p−1 steps); otherwise (⌊log2 p⌋ + 2)α + (p−1)/p · nβ + (n/p + n)β for
/// folding the extra ranks in and sending them the result.
pub async fn recursive_doubling(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    doubling(cx, table, None).await.map(|_| ())
}

/// Ring allgather. Cost: (p−1)α + (p−1)/p · nβ for n bytes gathered in total.
pub async fn ring(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    tags::check_workers(p)?;
    let mut received: Vec<Vec<In>> = Vec::with_capacity(p - 1);
    for k in 0..p - 1 {
        let outs: Vec<Out<'_>> = match received.last() {
            None => table_pieces(table),
            Some(prev) => prev.iter().map(In::out).collect(),
        };
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, right, tags::RING_GATHER.at(k), 0, &outs),
            recv_batch(&cx.ep, cx.pool, left, tags::RING_GATHER.at(k))
        );
        sent?;
        drop(outs);
        received.push(got?.1);
    }
    for pieces in received {
        absorb(table, cx.pool, pieces)?;
    }
    Ok(())
}

/// Per-partition pipelined ring for a known total. Cost ≈ (p−1)/p · nβ + (p−1 + m)α for m
/// partitions per worker, with every partition forwarded as soon as it arrives. `aux` carries
/// the partition's origin rank, with [`LAST`] on the origin's last one (an origin without
/// partitions sends an empty batch with it), so a worker knows when it has everything whatever
/// the total says; a total that differs from what the workers hold fails every worker.
pub async fn known_total(cx: &Ctx<'_>, table: &mut Table, total: usize) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    let own = table.len();
    if total < own {
        return Err(Error::config(format!(
            "{}: known total {total} is smaller than this worker's {own} partitions",
            cx.ep.ctx
        )));
    }
    let tag = tags::MAIN.tag();
    if p > 1 {
        if own == 0 {
            send_batch(&cx.ep, right, tag, r as u32 | LAST, &[]).await?;
        }
        for (i, (pid, a)) in table.iter().enumerate() {
            let aux = r as u32 | if i + 1 == own { LAST } else { 0 };
            send_batch(&cx.ep, right, tag, aux, &[Out::whole(pid, a)]).await?;
        }
    }
    // The total is the caller's word: it sizes the list, within reason.
    let mut received = Vec::with_capacity((total - own).min(1 << 16));
    let mut finished = 0;
    while finished < p - 1 {
        let (hdr, pieces) = recv_batch(&cx.ep, cx.pool, left, tag).await?;
        let origin = (hdr.aux & !LAST) as usize;
        if origin >= p || origin == r {
            return Err(Error::Protocol(format!(
                "{}: rank {left} forwarded partitions of origin {origin}, not another worker",
                cx.ep.ctx
            )));
        }
        if right != origin {
            let outs: Vec<Out<'_>> = pieces.iter().map(In::out).collect();
            send_batch(&cx.ep, right, tag, hdr.aux, &outs).await?;
        }
        finished += (hdr.aux & LAST != 0) as usize;
        received.extend(pieces);
    }
    if own + received.len() != total {
        return Err(Error::config(format!(
            "{}: known total {total}, but the workers hold {} partitions",
            cx.ep.ctx,
            own + received.len()
        )));
    }
    absorb(table, cx.pool, received)
}

/// `aux` bit of [`known_total`]: the origin's last partition.
const LAST: u32 = 1 << 31;
