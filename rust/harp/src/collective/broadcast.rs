//! Broadcast: after the call every worker's table holds exactly the root's partitions (the
//! receivers' previous partitions are dropped; their combiner is kept).

use super::{
    recv_head, recv_pieces, send_batch, send_batch_many, table_pieces, Assembler, Ctx, Out,
};
use crate::data::Table;
use crate::error::{Error, Result};
use crate::wire::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BroadcastAlgorithm {
    /// Pipelined chain in rack order (Twister/Harp chain broadcast).
    Chain,
    /// Pipelined chain in a seeded random order (the baseline for rack awareness).
    ChainRandom(u64),
    /// Binomial tree (minimum spanning tree), pipelined per chunk.
    Binomial,
    /// The root sends the whole table to every worker in turn (the papers' baseline).
    OneByOne,
}

impl BroadcastAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            BroadcastAlgorithm::Chain => 1,
            BroadcastAlgorithm::ChainRandom(_) => 2,
            BroadcastAlgorithm::Binomial => 3,
            BroadcastAlgorithm::OneByOne => 4,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "chain" => BroadcastAlgorithm::Chain,
            "chain-random" => BroadcastAlgorithm::ChainRandom(1),
            "binomial" | "mst" => BroadcastAlgorithm::Binomial,
            "one-by-one" => BroadcastAlgorithm::OneByOne,
            _ => {
                return Err(Error::config(format!(
                    "unknown broadcast algorithm '{s}' (chain, chain-random, binomial, one-by-one)"
                )))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            BroadcastAlgorithm::Chain => "chain",
            BroadcastAlgorithm::ChainRandom(_) => "chain-random",
            BroadcastAlgorithm::Binomial => "binomial",
            BroadcastAlgorithm::OneByOne => "one-by-one",
        }
    }
}

/// Pipeline chunk: small enough that the chain's fill time ((p−2)·c/B) stays near 2 % of n/B,
/// large enough that per-frame costs vanish.
pub fn auto_chunk(total: u64, p: usize) -> u64 {
    let c = total / 50 / (p.saturating_sub(2).max(1) as u64);
    c.clamp(32 * 1024, 4 << 20) / 64 * 64
}

/// Parent and children of `r` in the broadcast tree of `algo`.
fn tree(cx: &Ctx<'_>, algo: BroadcastAlgorithm, root: usize) -> (Option<usize>, Vec<usize>) {
    let (r, p) = (cx.rank(), cx.size());
    let order: Vec<usize> = match algo {
        BroadcastAlgorithm::Chain => cx.topo.chain_order(root),
        BroadcastAlgorithm::ChainRandom(seed) => {
            let mut rest: Vec<usize> = (0..p).filter(|&x| x != root).collect();
            let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
            for i in (1..rest.len()).rev() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                rest.swap(i, (s % (i as u64 + 1)) as usize);
            }
            std::iter::once(root).chain(rest).collect()
        }
        _ => (0..p).map(|i| (root + i) % p).collect(),
    };
    let pos = order.iter().position(|&x| x == r).expect("rank in order");
    match algo {
        BroadcastAlgorithm::Chain | BroadcastAlgorithm::ChainRandom(_) => (
            pos.checked_sub(1).map(|i| order[i]),
            order.get(pos + 1).copied().into_iter().collect(),
        ),
        BroadcastAlgorithm::OneByOne => {
            if pos == 0 {
                (None, order[1..].to_vec())
            } else {
                (Some(order[0]), vec![])
            }
        }
        BroadcastAlgorithm::Binomial => {
            // Relative position v: parent v − lowbit(v); children v + 2^k for 2^k < lowbit(v).
            let low = if pos == 0 {
                p.next_power_of_two()
            } else {
                pos & pos.wrapping_neg()
            };
            let parent = (pos != 0).then(|| order[pos - low]);
            let mut kids = Vec::new();
            let mut m = low >> 1;
            while m > 0 {
                if pos + m < p {
                    kids.push(order[pos + m]);
                }
                m >>= 1;
            }
            (parent, kids)
        }
    }
}

/// Cost (n bytes, chunk c): chain ≈ (n + (p−2)c)β + (p−1)α, i.e. ≈ n/B whatever p;
/// binomial ≈ ⌈log2 p⌉ (nβ + α) at the root's uplink (pipelined per chunk below it);
/// one-by-one = (p−1)(nβ + α).
pub async fn broadcast(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    algo: BroadcastAlgorithm,
) -> Result<()> {
    if root >= cx.size() {
        return Err(Error::config(format!(
            "broadcast root {root} is not a worker (there are {})",
            cx.size()
        )));
    }
    let (parent, children) = tree(cx, algo, root);
    let chunk = if cx.cfg.chunk_size > 0 {
        cx.cfg.chunk_size as u64
    } else {
        auto_chunk(table.bytes(), cx.size())
    };
    let Some(parent) = parent else {
        // Root: cut partitions into chunks, then stream them.
        let mut pieces: Vec<Out<'_>> = Vec::new();
        for (pid, a) in table.iter() {
            let n = a.bytes().len() as u64;
            let es = a.dtype().size() as u64;
            let c = (chunk / es).max(1) * es;
            if n <= c {
                pieces.push(Out::whole(pid, a));
            } else {
                let mut off = 0;
                while off < n {
                    let len = c.min(n - off);
                    pieces.push(Out::range(pid, a, off, len));
                    off += len;
                }
            }
        }
        if algo == BroadcastAlgorithm::OneByOne {
            let whole = table_pieces(table);
            for &c in &children {
                send_batch(&cx.ep, c, 0, 0, &whole).await?;
            }
            return Ok(());
        }
        return send_batch_many(&cx.ep, &children, 0, 0, &pieces).await;
    };
    let head = recv_head(&cx.ep, parent, 0).await?;
    for &c in &children {
        cx.ep
            .send_frame(c, Kind::Batch, 0, 0, &[head.raw()])
            .await?;
    }
    table.clear();
    let mut asm = Assembler::default();
    let tbl = std::cell::RefCell::new(table);
    let asm_ref = std::cell::RefCell::new(&mut asm);
    recv_pieces(&cx.ep, cx.pool, parent, head, |piece| {
        let children = &children;
        let tbl = &tbl;
        let asm_ref = &asm_ref;
        async move {
            if !piece.meta.inline {
                for &c in children {
                    cx.ep.send_frame(c, Kind::Data, 0, 0, &[&piece.buf]).await?;
                }
            }
            asm_ref
                .borrow_mut()
                .add(&mut tbl.borrow_mut(), cx.pool, piece)
        }
    })
    .await?;
    let table = tbl.into_inner();
    asm.finish(table)
}
