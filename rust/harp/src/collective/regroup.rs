//! Regroup, reduce-scatter, push, pull and rotate: operations that move partitions to the
//! workers that own them.

use std::collections::{HashMap, HashSet};

use super::algorithm::ReduceScatterAlgorithm;
use super::assemble::{absorb, absorb_held};
use super::choose;
use super::ctx::{owners, Ctx, IdMap};
use super::doubling::large_flag;
use super::framing::{
    recv_batch, recv_batch_expecting, recv_held, send_batch, table_pieces, whole_piece, In, Out,
};
use super::join::{boxed, join_all};
use super::rings::ring_reduce_scatter;
use super::segment::Segmenter;
use super::tags;
use crate::data::{Partitioner, Table};
use crate::error::{Error, Result};
use crate::wire::PieceMeta;

/// Receives a worker has outstanding at once in [`exchange`]: the rest wait their turn, their
/// frames held by the mailbox meanwhile (it keeps every frame until an operation takes it), so
/// the order changes nothing but the memory: p − 1 pending receives per worker would be
/// p(p − 1) in a simulation of p workers, 23.7 GB at p = 4,096.
const RECV_WINDOW: usize = 64;

/// Sends each worker the pieces of `src` it owns and receives what the others send: every send
/// at once, the receives [`RECV_WINDOW`] at a time (every worker sends every other worker one
/// batch, possibly empty, so nobody needs a count in advance). Returns the received pieces, in
/// rank order.
/// A received partition that this worker's `part` does not give it is a protocol error naming
/// the sender (the workers' partitioners differ).
async fn exchange(
    cx: &Ctx<'_>,
    src: &Table,
    part: &Partitioner,
    owner: &IdMap<usize>,
    tag: u32,
) -> Result<Vec<Vec<In>>> {
    let (r, p) = (cx.rank(), cx.size());
    let mut sends = Vec::new();
    // Each owner's partitions in table order, in one pass over the table.
    let mut by_owner: Vec<Vec<Out<'_>>> = (0..p).map(|_| Vec::new()).collect();
    for (id, a) in src.iter() {
        by_owner[owner[&id]].push(Out::whole(id, a));
    }
    // Rotate the start so that not every worker sends to rank 0 first.
    for i in 1..p {
        let dst = (r + i) % p;
        let pieces = std::mem::take(&mut by_owner[dst]);
        sends.push(boxed(async move {
            send_batch(&cx.ep, dst, tag, 0, &pieces).await
        }));
    }
    let mine = move |m: &PieceMeta| -> std::result::Result<(), String> {
        match part.owner(m.pid, p) {
            Ok(o) if o == r => Ok(()),
            Ok(o) => Err(format!(
                "this worker's partitioner gives partition {} to rank {o} (do the workers' \
                 partitioners differ?)",
                m.pid
            )),
            Err(e) => Err(e.to_string()),
        }
    };
    let froms: Vec<usize> = (1..p).map(|i| (r + p - i) % p).collect();
    let recvs = boxed(async move {
        let mut got = Vec::with_capacity(froms.len());
        for window in froms.chunks(RECV_WINDOW) {
            let futs = window
                .iter()
                .map(|&from| {
                    boxed(async move {
                        let got = recv_batch_expecting(&cx.ep, cx.pool, from, tag, mine).await?;
                        Ok((from, got.1))
                    })
                })
                .collect();
            got.extend(join_all(futs).await?);
        }
        Ok(got)
    });
    let sends = boxed(async move {
        join_all(sends)
            .await
            .map(|_| Vec::<(usize, Vec<In>)>::new())
    });
    // Both sides at once, failing fast on the first error of either.
    let mut got: Vec<(usize, Vec<In>)> = join_all(vec![sends, recvs])
        .await?
        .into_iter()
        .flatten()
        .collect();
    got.sort_by_key(|(from, _)| *from);
    Ok(got.into_iter().map(|(_, v)| v).collect())
}

/// Regroup: every partition goes to its owner under `part`, equal ids are combined there, and
/// each worker keeps exactly the partitions it owns. Direct all-to-all: (p−1)/p · nβ + α per
/// worker when data is balanced.
pub async fn regroup(cx: &Ctx<'_>, table: &mut Table, part: &Partitioner) -> Result<()> {
    let r = cx.rank();
    let owner = owners(table, part, cx.size())?;
    let got = exchange(cx, table, part, &owner, tags::MAIN.tag()).await?;
    table.retain(|id| owner[&id] == r);
    for pieces in got {
        absorb(table, cx.pool, pieces)?;
    }
    Ok(())
}

/// The master-decided plan for a regroup whose owners are not known in advance: the master
/// gathers every worker's (partition id, bytes), gives each id to the worker already holding
/// most of its bytes unless that worker is over its fair share (then to the least loaded
/// one), and sends the plan to everyone. Costs two extra control rounds.
pub async fn plan(cx: &Ctx<'_>, table: &Table) -> Result<Partitioner> {
    let (r, p) = (cx.rank(), cx.size());
    let (t_stats, t_plan) = (tags::PLAN_STATS.tag(), tags::PLAN.tag());
    let mine: Vec<(u32, u64)> = table
        .iter()
        .map(|(id, a)| (id, a.bytes().len() as u64))
        .collect();
    let map: Vec<(u32, u32)> = if r == 0 {
        let mut held: HashMap<u32, Vec<(usize, u64)>> = HashMap::new();
        for (id, b) in mine {
            held.entry(id).or_default().push((0, b));
        }
        for src in 1..p {
            let theirs: Vec<(u32, u64)> = cx.ep.recv_ctrl(src, t_stats).await?;
            for (id, b) in theirs {
                held.entry(id).or_default().push((src, b));
            }
        }
        let map = assign(&held, p);
        for dst in 1..p {
            cx.ep.send_ctrl(dst, t_plan, &map).await?;
        }
        map
    } else {
        cx.ep.send_ctrl(0, t_stats, &mine).await?;
        cx.ep.recv_ctrl(0, t_plan).await?
    };
    Ok(Partitioner::Map(std::sync::Arc::new(
        map.into_iter().map(|(id, w)| (id, w as usize)).collect(),
    )))
}

/// The plan for the sizes `held[id] = [(worker, bytes)]`: ids in decreasing size (then id)
/// order each go to the worker holding most of their bytes unless that would put it over its
/// fair share of the total, else to the least loaded worker. Returns (id, owner) pairs.
pub fn assign(held: &HashMap<u32, Vec<(usize, u64)>>, p: usize) -> Vec<(u32, u32)> {
    let mut ids: Vec<(u32, u64)> = held
        .iter()
        .map(|(id, v)| (*id, v.iter().map(|x| x.1).max().unwrap_or(0)))
        .collect();
    ids.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let total: u64 = ids.iter().map(|x| x.1).sum();
    let fair = total.div_ceil(p as u64).max(1);
    let mut load = vec![0u64; p];
    let mut map = Vec::with_capacity(ids.len());
    for (id, size) in ids {
        let mut holders = held[&id].clone();
        holders.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let best = holders
            .iter()
            .map(|h| h.0)
            .find(|&w| load[w] + size <= fair);
        let w = best.unwrap_or_else(|| (0..p).min_by_key(|&w| (load[w], w)).expect("p >= 1"));
        load[w] += size;
        map.push((id, w as u32));
    }
    map
}

/// Reduce-scatter with `algo`: each worker ends with the fully combined partitions it owns
/// under `part` and nothing else.
pub async fn reduce_scatter(
    cx: &Ctx<'_>,
    table: &mut Table,
    part: &Partitioner,
    algo: ReduceScatterAlgorithm,
) -> Result<()> {
    match algo {
        ReduceScatterAlgorithm::RecursiveHalving => recursive_halving(cx, table, part).await,
        ReduceScatterAlgorithm::Ring => ring(cx, table, part).await,
        ReduceScatterAlgorithm::Auto => {
            let large = choose::allreduce_large(table.bytes(), cx.cfg.allreduce_crossover);
            if halving(cx, table, part, Some(large)).await? {
                return ring(cx, table, part).await;
            }
            Ok(())
        }
    }
}

/// Recursive halving at partition granularity. With p a power of two, in round k (mask
/// m = p/2^(k+1)) worker r sends rank r xor m the partitions whose owners are on that rank's
/// side of bit m and combines what it receives into its own, so after log2 p rounds it holds
/// exactly the combined partitions it owns. When p is not a power of two, with p' the largest
/// power of two below p, rank r ≥ p' first sends its whole table to r − p', which halves on
/// its behalf (owner o ≥ p' counts as o − p') and sends it its partitions at the end.
/// Cost for n bytes per worker: log2 p · α + (p−1)/p · nβ (p a power of two), else
/// (log2 p' + 2)α + (p'−1)/p' · 2n·β + nβ/p roughly (the extra ranks' n bytes fold in first).
/// A received partition that is not whole, or not owned on the receiver's side of the round,
/// is a protocol error naming the sender.
pub async fn recursive_halving(cx: &Ctx<'_>, table: &mut Table, part: &Partitioner) -> Result<()> {
    halving(cx, table, part, None).await.map(|_| ())
}

/// [`recursive_halving`], and with `agree = Some(large)` the automatic choice's agreement, as
/// in the doubling of the automatic allreduce: every message carries in `aux` whether its sender
/// has seen a large table (`large` for its own); partitions move only between workers that
/// have not. The result says whether any worker's table was large (the flags meet in the
/// butterfly exactly as the data would): then the tables hold what the halving left, for the
/// ring. The work is done in place: a partition leaves a worker only when its partner combines
/// it (partitions move, never get copied), so every partition still adds up over the workers to
/// the same combination, whatever round the flag arrived in. An extra rank whose table its
/// partner folded in learns so from the last message (bit 1 of `aux` set: kept, not folded)
/// and empties its table.
async fn halving(
    cx: &Ctx<'_>,
    table: &mut Table,
    part: &Partitioner,
    agree: Option<bool>,
) -> Result<bool> {
    let (r, p) = (cx.rank(), cx.size());
    let p2 = 1usize << (usize::BITS - 1 - p.leading_zeros());
    let extra = p - p2;
    let mut large = agree.unwrap_or(false);
    let flag = |hdr: &crate::wire::Header| large_flag(cx, hdr, agree.is_some(), "reduce-scatter");
    // The rank of the first p' that holds an owner's partitions while halving.
    let virt = |o: usize| if o >= p2 { o - p2 } else { o };
    let owned_by = |want: usize| {
        move |m: &PieceMeta| -> std::result::Result<(), String> {
            whole_piece(m)?;
            match part.owner(m.pid, p) {
                Ok(o) if o == want => Ok(()),
                Ok(o) => Err(format!(
                    "partition {} is owned by rank {o}; this step takes rank {want}'s",
                    m.pid
                )),
                Err(e) => Err(e.to_string()),
            }
        }
    };
    if r >= p2 {
        let partner = r - p2;
        let pieces = if large { vec![] } else { table_pieces(table) };
        send_batch(&cx.ep, partner, tags::FOLD_IN.tag(), large as u32, &pieces).await?;
        drop(pieces);
        let tag = tags::FOLD_OUT.tag();
        let got = recv_held(&cx.ep, partner, tag, owned_by(r)).await?;
        // Bit 1: the partner kept out of this table (only ever with the agreement).
        let mut hdr = got.head.hdr;
        let kept = agree.is_some() && hdr.aux & KEPT != 0;
        hdr.aux &= !KEPT;
        let any_large = flag(&hdr)?;
        if !kept {
            table.clear();
        }
        if any_large {
            return Ok(true);
        }
        absorb_held(got, table, cx.pool)?;
        return Ok(false);
    }
    let mut kept = false;
    if r < extra {
        let tag = tags::FOLD_IN.tag();
        let got = recv_held(&cx.ep, r + p2, tag, whole_piece).await?;
        let theirs = flag(&got.head.hdr)?;
        if !large && !theirs {
            absorb_held(got, table, cx.pool)?;
        } else {
            kept = true;
        }
        large |= theirs;
    }
    // Every partition held from here on has a valid owner: this table's are checked now, the
    // received ones by `expect`.
    for (id, _) in table.iter() {
        part.owner(id, p)?;
    }
    let owner = |id: u32| part.owner(id, p).unwrap_or(r);
    let (mut mask, mut round) = (p2 >> 1, 0usize);
    while mask > 0 {
        let partner = r ^ mask;
        let theirs = |id: &u32| virt(owner(*id)) & mask != r & mask;
        let mut outs: Vec<Out<'_>> = Vec::new();
        if !large {
            outs.reserve(table.len());
            let moving = table.iter().filter(|(id, _)| theirs(id));
            outs.extend(moving.map(|(id, a)| Out::whole(id, a)));
        }
        // Partitions this rank may get now: owners agreeing with r on bit m and above.
        let high = !(mask - 1);
        let expect = |m: &PieceMeta| -> std::result::Result<(), String> {
            whole_piece(m)?;
            match part.owner(m.pid, p) {
                Ok(o) if (virt(o) ^ r) & high == 0 => Ok(()),
                Ok(o) => Err(format!(
                    "partition {} is owned by rank {o}, not on rank {r}'s side of round {round}",
                    m.pid
                )),
                Err(e) => Err(e.to_string()),
            }
        };
        let tag = tags::ROUND.at(round);
        let (sent, got) = tokio::join!(
            send_batch(&cx.ep, partner, tag, large as u32, &outs),
            recv_held(&cx.ep, partner, tag, expect)
        );
        sent?;
        drop(outs);
        let got = got?;
        let theirs_large = flag(&got.head.hdr)?;
        if !large && !theirs_large {
            table.retain(|id| !theirs(&id));
            absorb_held(got, table, cx.pool)?;
        }
        large |= theirs_large;
        mask >>= 1;
        round += 1;
    }
    if r < extra {
        let outs: Vec<Out<'_>> = if large {
            vec![]
        } else {
            table
                .iter()
                .filter(|(id, _)| owner(*id) == r + p2)
                .map(|(id, a)| Out::whole(id, a))
                .collect()
        };
        let aux = large as u32 | if kept { KEPT } else { 0 };
        send_batch(&cx.ep, r + p2, tags::FOLD_OUT.tag(), aux, &outs).await?;
    }
    if large {
        return Ok(true);
    }
    table.retain(|id| owner(id) == r);
    Ok(false)
}

/// `aux` bit of the halving's last message to an extra rank: its partner did not fold its table
/// in (one of them was large), so the extra rank keeps it for the ring.
const KEPT: u32 = 2;

/// Reduce-scatter at partition granularity around a ring: each worker ends with the fully
/// combined partitions it owns under `part` and nothing else. (p−1)/p · nβ + (p−1)α.
pub async fn ring(cx: &Ctx<'_>, table: &mut Table, part: &Partitioner) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let seg = Segmenter::whole(p, part.clone());
    ring_reduce_scatter(cx, table, &seg).await?;
    let keep = owners(table, part, p)?;
    table.retain(|id| keep[&id] == r);
    Ok(())
}

/// Push: every partition of `local` is combined into the `global` table of its owner under
/// `part` (the owner's own partitions are combined locally). `local` is unchanged.
pub async fn push(
    cx: &Ctx<'_>,
    local: &Table,
    global: &mut Table,
    part: &Partitioner,
) -> Result<()> {
    let r = cx.rank();
    let owner = owners(local, part, cx.size())?;
    let got = exchange(cx, local, part, &owner, tags::MAIN.tag()).await?;
    for (id, a) in local.iter() {
        if owner[&id] == r {
            global.add(id, a.duplicate(cx.pool))?;
        }
    }
    for pieces in got {
        absorb(global, cx.pool, pieces)?;
    }
    Ok(())
}

/// Pull: every partition id of `local` is fetched from the `global` table of its owner under
/// `part` and replaces the local partition. Asking for an id the owner does not hold is an
/// error naming the id and the owner. Two rounds: requests, then replies.
pub async fn pull(
    cx: &Ctx<'_>,
    local: &mut Table,
    global: &Table,
    part: &Partitioner,
) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let owner = owners(local, part, p)?;
    let mut futs = Vec::new();
    for i in 1..p {
        let dst = (r + i) % p;
        let want: Vec<u32> = local
            .iter()
            .map(|(id, _)| id)
            .filter(|id| owner[id] == dst)
            .collect();
        futs.push(boxed(async move {
            cx.ep.send_ctrl(dst, tags::MAIN.tag(), &want).await?;
            Ok(())
        }));
    }
    for i in 1..p {
        let from = (r + p - i) % p;
        futs.push(boxed(async move {
            let want: Vec<u32> = cx.ep.recv_ctrl(from, tags::MAIN.tag()).await?;
            let mut pieces = Vec::with_capacity(want.len());
            let mut missing = Vec::new();
            for id in want {
                match global.get(id) {
                    Some(a) => pieces.push(Out::whole(id, a)),
                    None => missing.push(id),
                }
            }
            // Missing ids are reported by the requester (it sees what did not come back).
            send_batch(&cx.ep, from, tags::PULL_REPLY.tag(), 0, &pieces).await
        }));
    }
    let mut replies = Vec::new();
    let recvs: Vec<_> = (1..p)
        .map(|i| {
            let from = (r + p - i) % p;
            boxed(async move {
                recv_batch(&cx.ep, cx.pool, from, tags::PULL_REPLY.tag())
                    .await
                    .map(|x| (from, x.1))
            })
        })
        .collect();
    let (sends, got) = tokio::join!(join_all(futs), join_all(recvs));
    sends?;
    replies.extend(got?);
    let mut wanted: HashSet<u32> = local.iter().map(|(id, _)| id).collect();
    for (id, a) in global.iter() {
        if wanted.contains(&id) && owner[&id] == r {
            local.put(id, a.duplicate(cx.pool));
            wanted.remove(&id);
        }
    }
    for (_, pieces) in replies {
        for piece in pieces {
            wanted.remove(&piece.meta.pid);
            local.put(
                piece.meta.pid,
                crate::data::Array::received(piece.meta.pid, piece.meta.layout, piece.buf)?,
            );
        }
    }
    if let Some(id) = wanted.iter().min() {
        return Err(Error::data(format!(
            "partition {id} is not in the global table of its owner, rank {}",
            owner[id]
        )));
    }
    Ok(())
}

/// Rotate: worker r's whole table moves to `map[r]` (default r+1 mod p) and is replaced by
/// the table of the worker mapping to r. `map` must be a permutation, the same on every worker.
/// Cost: α + nβ.
pub async fn rotate(cx: &Ctx<'_>, table: &mut Table, map: Option<&[usize]>) -> Result<()> {
    let (r, p) = (cx.rank(), cx.size());
    let map: Vec<usize> = match map {
        Some(m) => m.to_vec(),
        None => (0..p).map(|i| (i + 1) % p).collect(),
    };
    let mut seen = vec![false; p];
    if map.len() != p
        || map
            .iter()
            .any(|&d| d >= p || std::mem::replace(&mut seen[d], true))
    {
        return Err(Error::config(format!(
            "{}: rotate map {map:?} is not a permutation of 0..{p}",
            cx.ep.ctx
        )));
    }
    let dst = map[r];
    let src = map.iter().position(|&d| d == r).expect("permutation");
    if dst == r {
        return Ok(());
    }
    let pieces = table_pieces(table);
    let (sent, got) = tokio::join!(
        send_batch(&cx.ep, dst, tags::MAIN.tag(), 0, &pieces),
        recv_batch(&cx.ep, cx.pool, src, tags::MAIN.tag())
    );
    sent?;
    drop(pieces);
    table.clear();
    absorb(table, cx.pool, got?.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted::{self, Piece};
    use crate::data::{Array, Combiner, DType};
    use crate::wire::Op;

    /// Rank 0 of 2 in round 0 of recursive halving (modulo owners) while rank 1 sends
    /// `pieces` of f64 partitions filled with ones; rank 0 holds partitions 0 and 1 of 4 zeros.
    fn halving_with(pieces: &[Piece]) -> Result<Table> {
        let algo = ReduceScatterAlgorithm::RecursiveHalving.code();
        crafted::run(
            Op::ReduceScatter,
            algo,
            tags::ROUND.at(0),
            pieces,
            async |cx| {
                let mut t = Table::new(Combiner::Sum);
                t.add(0, Array::zeros(cx.pool, DType::F64, 4)).unwrap();
                t.add(1, Array::zeros(cx.pool, DType::F64, 4)).unwrap();
                recursive_halving(cx, &mut t, &Partitioner::Modulo).await?;
                Ok(t)
            },
        )
    }

    #[test]
    fn recursive_halving_takes_only_partitions_owned_on_its_side() {
        // Rank 0's own partition 0 (and a new one, 2, it also owns) are combined in; partition
        // 1 went to rank 1.
        let t = halving_with(&[(0, 32, 0, 32), (2, 32, 0, 32)]).unwrap();
        assert_eq!(t.ids(), vec![0, 2]);
        let ones = f64::from_bits(0x0101_0101_0101_0101);
        assert_eq!(t.get(0).unwrap().as_slice::<f64>().unwrap(), &[ones; 4]);
        let refused = |r: Result<Table>, why: &str| crafted::refused(r, "reduce-scatter", why);
        refused(
            halving_with(&[(1, 32, 0, 32)]),
            "partition 1 is owned by rank 1, not on rank 0's side of round 0",
        );
        refused(
            halving_with(&[(0, 32, 0, 16)]),
            "this step exchanges whole partitions only",
        );
    }

    #[test]
    fn plan_keeps_data_in_place_within_fair_shares() {
        // Fair share: 215 bytes / 3 = 72. Id 1 goes over it anywhere: the least loaded (0,
        // its holder); id 2's holder is then full: the least loaded, lowest rank (1); id 4's
        // holder 1 is full too: 2; id 3 goes to its first holder within its share (2).
        let held: HashMap<u32, Vec<(usize, u64)>> = [
            (1, vec![(0, 100), (1, 10)]),
            (2, vec![(0, 90)]),
            (3, vec![(1, 5), (2, 5)]),
            (4, vec![(1, 20)]),
        ]
        .into_iter()
        .collect();
        let plan = assign(&held, 3);
        assert_eq!(plan, vec![(1, 0), (2, 1), (4, 2), (3, 2)]);
        // Within the fair share, data stays where it is.
        let held: HashMap<u32, Vec<(usize, u64)>> = (0..6u32)
            .map(|id| (id, vec![(id as usize % 3, 10)]))
            .collect();
        for (id, w) in assign(&held, 3) {
            assert_eq!(w, id % 3);
        }
        for p in 1..=6 {
            let held: HashMap<u32, Vec<(usize, u64)>> = (0..50u32)
                .map(|id| (id, vec![(id as usize % p, 1 + id as u64 % 7)]))
                .collect();
            let plan = assign(&held, p);
            assert_eq!(plan.len(), 50);
            assert!(plan.iter().all(|&(_, w)| (w as usize) < p));
            let ids: HashSet<u32> = plan.iter().map(|x| x.0).collect();
            assert_eq!(ids.len(), 50, "every id planned once");
        }
    }
}
