//! Barrier.

use super::{tags, Ctx};
use crate::error::Result;
use crate::wire::Kind;

/// Dissemination barrier: in round k every worker signals rank + 2^k and waits for rank − 2^k.
/// No worker leaves before every worker has entered. Cost: ⌈log2 p⌉ α (the original Harp
/// barrier was centralised, O(p) at the master).
pub async fn dissemination(cx: &Ctx<'_>) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let (mut d, mut round) = (1usize, 0usize);
    while d < p {
        cx.ep
            .send_frame((r + d) % p, Kind::Ctrl, tags::ROUND.at(round), 0, &[])
            .await?;
        cx.ep
            .recv_frame((r + p - d) % p, tags::ROUND.at(round))
            .await?;
        d *= 2;
        round += 1;
    }
    Ok(())
}

/// The largest of every worker's `mine`, known to every worker: dissemination rounds (round k:
/// send the largest seen so far to rank + 2^k, take rank − 2^k's), ⌈log2 p⌉ small messages on
/// the critical path, with tags of `phase`.
pub async fn agree_max(cx: &Ctx<'_>, mine: u64, phase: tags::Phase) -> Result<u64> {
    let (r, p) = (cx.rank(), cx.size());
    let (mut d, mut round, mut max) = (1usize, 0usize, mine);
    while d < p {
        let tag = phase.at(round);
        cx.ep.send_ctrl((r + d) % p, tag, &max).await?;
        let theirs: u64 = cx.ep.recv_ctrl((r + p - d) % p, tag).await?;
        max = max.max(theirs);
        d *= 2;
        round += 1;
    }
    Ok(max)
}
