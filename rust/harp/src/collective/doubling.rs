//! Recursive doubling with the agreement on the way: whole tables swapped with a partner in
//! each of ⌈log2 p⌉ rounds (bidirectional exchange, the recursive-doubling allgather), each
//! message also carrying whether its sender has seen a large table (the automatic allreduce,
//! allgather and reduce-scatter agree on their algorithm this way, see `choose`).

use super::assemble::absorb;
use super::ctx::Ctx;
use super::framing::{recv_batch_expecting, send_batch, table_pieces, whole_piece, In};
use super::tags;
use crate::data::Table;
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::wire::Header;

/// Recursive doubling. With `agree = Some(large)` every message carries in `aux` whether its
/// sender has seen a large table (`large` for its own), tables travel only between workers
/// that have not, and the result says whether any worker's table was large: then every table
/// is left as it was on entry. With `None` it is plain bidirectional exchange (`aux` 0).
pub async fn doubling(cx: &Ctx<'_>, table: &mut Table, agree: Option<bool>) -> Result<bool> {
    let (r, p) = (cx.rank(), cx.size());
    let p2 = 1usize << (usize::BITS - 1 - p.leading_zeros());
    let extra = p - p2;
    let mut large = agree.unwrap_or(false);
    let flag = |hdr: &Header| large_flag(cx, hdr, agree.is_some(), "allreduce");
    if r >= p2 {
        let partner = r - p2;
        let pieces = if large { vec![] } else { table_pieces(table) };
        send_batch(&cx.ep, partner, tags::FOLD_IN.tag(), large as u32, &pieces).await?;
        drop(pieces);
        if agree.is_none() {
            table.clear(); // its buffers can take the result
        }
        let tag = tags::FOLD_OUT.tag();
        let (hdr, got) = recv_batch_expecting(&cx.ep, cx.pool, partner, tag, whole_piece).await?;
        if flag(&hdr)? {
            return Ok(true); // the table is still whole: regroup-allgather starts from it
        }
        table.clear();
        absorb(table, cx.pool, got)?;
        return Ok(false);
    }
    // While the choice is open, partners' tables are combined into a copy (made before the
    // first one arrives), so that `table` can still go to regroup-allgather unchanged.
    let mut work: Option<Table> = None;
    let copy = agree.is_some();
    if r < extra {
        let tag = tags::FOLD_IN.tag();
        let (hdr, got) = recv_batch_expecting(&cx.ep, cx.pool, r + p2, tag, whole_piece).await?;
        let theirs = flag(&hdr)?;
        if !large && !theirs {
            take(table, &mut work, copy, cx.pool, got, false)?;
        }
        large |= theirs;
    }
    let (mut mask, mut round) = (1usize, 0usize);
    while mask < p2 {
        let partner = r ^ mask;
        let tag = tags::ROUND.at(round);
        let current = work.as_ref().unwrap_or(table);
        let pieces = if large { vec![] } else { table_pieces(current) };
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, partner, tag, large as u32, &pieces),
            recv_batch_expecting(&cx.ep, cx.pool, partner, tag, whole_piece)
        );
        sent?;
        drop(pieces);
        let (hdr, got) = got?;
        let theirs = flag(&hdr)?;
        if !large && !theirs {
            take(table, &mut work, copy, cx.pool, got, partner < r)?;
        }
        large |= theirs;
        mask <<= 1;
        round += 1;
    }
    if r < extra {
        let current = work.as_ref().unwrap_or(table);
        let pieces = if large { vec![] } else { table_pieces(current) };
        send_batch(&cx.ep, r + p2, tags::FOLD_OUT.tag(), large as u32, &pieces).await?;
    }
    if !large {
        if let Some(w) = work {
            *table = w;
        }
    }
    Ok(large)
}

/// The "large table seen" flag in `aux` of a frame of an agreeing exchange (the automatic
/// allreduce's doubling, the automatic reduce-scatter's halving): 0 or 1, and only 0 when
/// the exchange does not agree (`agreeing` false); anything else is a protocol error naming the
/// sender and `what` the operation is.
pub fn large_flag(cx: &Ctx<'_>, hdr: &Header, agreeing: bool, what: &str) -> Result<bool> {
    match hdr.aux {
        0 => Ok(false),
        1 if agreeing => Ok(true),
        x => Err(Error::Protocol(format!(
            "{}: rank {} sent {what} flag {x}",
            cx.ep.ctx, hdr.src
        ))),
    }
}

/// Combines `got` into `table`, or into `work` when `copy` (a copy of `table` made now if
/// there is none yet). `theirs_first`: `got` comes from a lower rank, so a combiner for which
/// order matters (anything but sum, min and max: keep-first, reject's message, append, custom)
/// combines it first and the held table second. Every worker then combines in rank order,
/// and the result is the same on all of them.
fn take(
    table: &mut Table,
    work: &mut Option<Table>,
    copy: bool,
    pool: &Pool,
    got: Vec<In>,
    theirs_first: bool,
) -> Result<()> {
    let acc = match work {
        Some(w) => w,
        None if copy => work.insert(table.duplicate(pool)),
        None => table,
    };
    if theirs_first && !acc.combiner().folds_bytes() {
        let mut theirs = Table::new(acc.combiner().clone());
        absorb(&mut theirs, pool, got)?;
        let mine = std::mem::replace(acc, theirs);
        return acc.merge(mine);
    }
    absorb(acc, pool, got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted;
    use crate::data::{Array, Combiner, DType};
    use crate::wire::Op;

    #[test]
    fn bidirectional_exchange_takes_whole_partitions_only() {
        let r = crafted::run(
            Op::Allreduce,
            1,
            tags::ROUND.at(0),
            &[(0, 32768, 0, 8)],
            async |cx| {
                let mut t = Table::new(Combiner::Sum);
                t.add(0, Array::zeros(cx.pool, DType::F64, 4096)).unwrap();
                doubling(cx, &mut t, None).await?;
                Ok(t)
            },
        );
        crafted::refused(r, "allreduce", "this step exchanges whole partitions only");
    }
}
