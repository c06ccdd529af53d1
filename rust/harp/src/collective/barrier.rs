//! Barrier.

use super::ctx::Ctx;
use super::tags;
use crate::error::Result;
use crate::wire::Kind;

/// Dissemination barrier: in round k every worker signals rank + 2^k and waits for rank − 2^k.
/// No worker leaves before every worker has entered. Cost: ⌈log2 p⌉ α (the original Harp
/// barrier was centralised, O(p) at the master).
pub async fn dissemination(cx: &Ctx<'_>) -> Result<()> {
    for (round, to, from) in rounds(cx) {
        let tag = tags::ROUND.at(round);
        cx.ep.send_frame(to, Kind::Ctrl, tag, 0, &[]).await?;
        cx.ep.recv_frame(from, tag).await?;
    }
    Ok(())
}

/// The dissemination rounds of this worker: (round k, rank + 2^k, rank − 2^k) while 2^k < p.
fn rounds(cx: &Ctx<'_>) -> impl Iterator<Item = (usize, usize, usize)> {
    let (r, p) = (cx.rank(), cx.size());
    std::iter::successors(Some(1usize), |d| d.checked_mul(2))
        .take_while(move |&d| d < p)
        .enumerate()
        .map(move |(k, d)| (k, (r + d) % p, (r + p - d) % p))
}

/// The largest of every worker's `mine`, known to every worker: dissemination rounds (round k:
/// send the largest seen so far to rank + 2^k, take rank − 2^k's), ⌈log2 p⌉ small messages on
/// the critical path, with tags of `phase`.
pub async fn agree_max(cx: &Ctx<'_>, mine: u64, phase: tags::Phase) -> Result<u64> {
    let mut max = mine;
    for (round, to, from) in rounds(cx) {
        let tag = phase.at(round);
        cx.ep.send_ctrl(to, tag, &max).await?;
        let theirs: u64 = cx.ep.recv_ctrl(from, tag).await?;
        max = max.max(theirs);
    }
    Ok(max)
}
