//! Broadcast: after the call every worker's table holds exactly the root's partitions (the
//! receivers' previous partitions are dropped; their combiner is kept).

use super::{
    parse_head, recv_head, recv_pieces, send_batch, send_batch_inline, table_pieces, Assembler,
    Ctx, Out,
};
use crate::data::Table;
use crate::error::{Error, Result};
use crate::wire::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BroadcastAlgorithm {
    /// Binomial tree for messages up to `Config::broadcast_crossover` bytes (latency-bound:
    /// ⌈log2 p⌉ hops instead of p−1), pipelined chain above. The root decides (only it knows the
    /// size) and announces its choice in the first frame.
    Auto,
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
            BroadcastAlgorithm::Auto => 0,
            BroadcastAlgorithm::Chain => 1,
            BroadcastAlgorithm::ChainRandom(_) => 2,
            BroadcastAlgorithm::Binomial => 3,
            BroadcastAlgorithm::OneByOne => 4,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => BroadcastAlgorithm::Auto,
            "chain" => BroadcastAlgorithm::Chain,
            "chain-random" => BroadcastAlgorithm::ChainRandom(1),
            "binomial" | "mst" => BroadcastAlgorithm::Binomial,
            "one-by-one" => BroadcastAlgorithm::OneByOne,
            _ => {
                return Err(Error::config(format!(
                    "unknown broadcast algorithm '{s}' (auto, chain, chain-random, binomial, one-by-one)"
                )))
            }
        })
    }
    /// The concrete algorithm `Auto` picks for `bytes` (the root's table size).
    pub fn resolve(self, bytes: u64, crossover: u64) -> BroadcastAlgorithm {
        match self {
            BroadcastAlgorithm::Auto if bytes <= crossover => BroadcastAlgorithm::Binomial,
            BroadcastAlgorithm::Auto => BroadcastAlgorithm::Chain,
            a => a,
        }
    }

    fn from_announced(code: u32) -> Option<BroadcastAlgorithm> {
        match code {
            1 => Some(BroadcastAlgorithm::Chain),
            3 => Some(BroadcastAlgorithm::Binomial),
            4 => Some(BroadcastAlgorithm::OneByOne),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BroadcastAlgorithm::Auto => "auto",
            BroadcastAlgorithm::Chain => "chain",
            BroadcastAlgorithm::ChainRandom(_) => "chain-random",
            BroadcastAlgorithm::Binomial => "binomial",
            BroadcastAlgorithm::OneByOne => "one-by-one",
        }
    }
}

/// Pipeline chunk: small enough that the chain's fill time ((p−2)·c/B) stays near 0.5 % of n/B,
/// large enough that per-frame costs vanish.
pub fn auto_chunk(total: u64, p: usize) -> u64 {
    let c = total / 200 / (p.saturating_sub(2).max(1) as u64);
    // At least 8 KiB: above the inline piece limit, so every chunk is its own frame.
    c.clamp(8 * 1024, 256 * 1024) / 64 * 64
}

/// A broadcast batch travels inline (one frame, store-and-forward) only up to this size.
const BCAST_INLINE_MAX: u64 = 4 * 1024;

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
        BroadcastAlgorithm::Auto => unreachable!("Auto is resolved before the tree is built"),
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
    let auto = algo == BroadcastAlgorithm::Auto;
    let mut algo = algo;
    if auto && cx.rank() == root {
        algo = algo.resolve(table.bytes(), cx.cfg.broadcast_crossover);
    }
    // The concrete algorithm travels in `aux` of every frame.
    let announce = algo.code() as u32;
    let (parent, children) = if auto && cx.rank() != root {
        (None, Vec::new())
    } else {
        tree(cx, algo, root)
    };
    let chunk = if cx.cfg.chunk_size > 0 {
        cx.cfg.chunk_size as u64
    } else {
        auto_chunk(table.bytes(), cx.size())
    };
    if cx.rank() == root {
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
                send_batch(&cx.ep, c, 0, announce, &whole).await?;
            }
            return Ok(());
        }
        return send_batch_inline(&cx.ep, &children, 0, announce, &pieces, BCAST_INLINE_MAX).await;
    }
    let (head, children) = if auto {
        // Learn the root's choice from the first frame, whoever sends it, then check that the
        // sender is this worker's parent in that tree.
        let others: Vec<usize> = (0..cx.size()).filter(|&x| x != cx.rank()).collect();
        let f = cx.ep.recv_frame_from_any(&others, 0).await?;
        let chosen = BroadcastAlgorithm::from_announced(f.hdr.aux).ok_or_else(|| {
            Error::Protocol(format!(
                "{}: unknown broadcast algorithm {} announced",
                cx.ep.ctx, f.hdr.aux
            ))
        })?;
        let (parent, children) = tree(cx, chosen, root);
        if parent != Some(f.hdr.src as usize) {
            return Err(Error::Protocol(format!(
                "{}: rank {} sent the broadcast, but this worker's parent is {parent:?}",
                cx.ep.ctx, f.hdr.src
            )));
        }
        (parse_head(&cx.ep, f)?, children)
    } else {
        (
            recv_head(&cx.ep, parent.expect("non-root has a parent"), 0).await?,
            children,
        )
    };
    let parent = head.hdr.src as usize;
    let announce = head.hdr.aux;
    for &c in &children {
        cx.ep
            .send_frame(c, Kind::Batch, 0, announce, &[head.raw()])
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
                    cx.ep
                        .send_frame(c, Kind::Data, 0, announce, &[&piece.buf])
                        .await?;
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
