//! Broadcast: after the call every worker's table holds exactly the root's partitions (the
//! receivers' previous partitions are dropped; their combiner is kept).

use super::assemble::Assembler;
use super::framing::{
    parse_head, recv_head, recv_pieces, send_batch, send_batch_inline, table_pieces, Out,
};
use super::hierarchy::Tree;
use super::segment::chunks;
use super::{choose, tags, Ctx};
use crate::data::Table;
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::topology::Topology;
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
    /// Pipelined chain in the order with the fastest slowest link of the network model
    /// ([`hierarchy::best_path`](super::hierarchy::best_path)); the rack-order chain without
    /// a model.
    NetChain,
    /// Pipelined chain over the network performance hierarchy (CMPI §4.3: every group a
    /// contiguous stretch entered at its best-connected member,
    /// [`hierarchy::hierarchy_chain`](super::hierarchy::hierarchy_chain)); the rack-order chain
    /// without a model.
    NetHierarchy,
    /// Pipelined over the spanning tree of least predicted time under the network model
    /// ([`hierarchy::best_broadcast_tree`](super::hierarchy::best_broadcast_tree): every tree up
    /// to 8 workers, e.g. a root that feeds two children over fast links where every chain
    /// crosses a slow one); the net-chain beyond 8 workers, the rack-order chain without a model.
    NetTree,
}

impl BroadcastAlgorithm {
    pub fn code(self) -> u8 {
        match self {
            BroadcastAlgorithm::Auto => 0,
            BroadcastAlgorithm::Chain => 1,
            BroadcastAlgorithm::ChainRandom(_) => 2,
            BroadcastAlgorithm::Binomial => 3,
            BroadcastAlgorithm::OneByOne => 4,
            BroadcastAlgorithm::NetChain => 5,
            BroadcastAlgorithm::NetHierarchy => 6,
            BroadcastAlgorithm::NetTree => 7,
        }
    }
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => BroadcastAlgorithm::Auto,
            "chain" => BroadcastAlgorithm::Chain,
            "chain-random" => BroadcastAlgorithm::ChainRandom(1),
            "binomial" | "mst" => BroadcastAlgorithm::Binomial,
            "one-by-one" => BroadcastAlgorithm::OneByOne,
            "net-chain" => BroadcastAlgorithm::NetChain,
            "net-hierarchy" => BroadcastAlgorithm::NetHierarchy,
            "net-tree" => BroadcastAlgorithm::NetTree,
            _ => {
                return Err(Error::config(format!(
                    "unknown broadcast algorithm '{s}' (auto, chain, chain-random, binomial, \
                     one-by-one, net-chain, net-hierarchy, net-tree)"
                )))
            }
        })
    }
    /// The concrete algorithm `Auto` picks for `bytes` (the root's table size; see
    /// [`choose::broadcast`]).
    pub fn resolve(
        self,
        bytes: u64,
        crossover: u64,
        net: Option<&NetModel>,
        topo: &Topology,
        root: usize,
        chunk: u64,
    ) -> BroadcastAlgorithm {
        match self {
            BroadcastAlgorithm::Auto => choose::broadcast(bytes, crossover, net, topo, root, chunk),
            a => a,
        }
    }

    /// The algorithm an automatic broadcast's root announced by its [`code`](Self::code) (never
    /// `Auto`, nor a seeded random chain).
    fn from_announced(code: u32) -> Option<BroadcastAlgorithm> {
        use BroadcastAlgorithm::*;
        [Chain, Binomial, OneByOne, NetChain, NetHierarchy, NetTree]
            .into_iter()
            .find(|a| u32::from(a.code()) == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            BroadcastAlgorithm::Auto => "auto",
            BroadcastAlgorithm::Chain => "chain",
            BroadcastAlgorithm::ChainRandom(_) => "chain-random",
            BroadcastAlgorithm::Binomial => "binomial",
            BroadcastAlgorithm::OneByOne => "one-by-one",
            BroadcastAlgorithm::NetChain => "net-chain",
            BroadcastAlgorithm::NetHierarchy => "net-hierarchy",
            BroadcastAlgorithm::NetTree => "net-tree",
        }
    }
}

/// A broadcast batch travels inline (one frame, store-and-forward) only up to this size.
const BCAST_INLINE_MAX: u64 = 4 * 1024;

/// The order of the workers the tree of `algo` from `root` is built on (root first).
pub fn order(
    algo: BroadcastAlgorithm,
    topo: &Topology,
    net: Option<&NetModel>,
    p: usize,
    root: usize,
) -> Vec<usize> {
    match (algo, net) {
        (BroadcastAlgorithm::NetChain, Some(m)) => super::hierarchy::best_path(m, root, false),
        (BroadcastAlgorithm::NetHierarchy, Some(m)) => {
            super::hierarchy::hierarchy_chain(&super::hierarchy::Hierarchy::of(m), m, root)
        }
        (BroadcastAlgorithm::NetTree, Some(m)) => super::hierarchy::best_path(m, root, false),
        (
            BroadcastAlgorithm::Chain
            | BroadcastAlgorithm::NetChain
            | BroadcastAlgorithm::NetHierarchy
            | BroadcastAlgorithm::NetTree,
            _,
        ) => topo.chain_order(root),
        (BroadcastAlgorithm::ChainRandom(seed), _) => {
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
        _ => super::rooted::from_root(p, root),
    }
}

/// Parent and children of `r` of `p` workers in the broadcast tree of `algo` from `root`.
pub fn tree(
    algo: BroadcastAlgorithm,
    topo: &Topology,
    net: Option<&NetModel>,
    r: usize,
    p: usize,
    root: usize,
) -> (Option<usize>, Vec<usize>) {
    if let (BroadcastAlgorithm::NetTree, Some(m)) = (algo, net) {
        let t = super::hierarchy::best_broadcast_tree(m, root);
        return (t.parent[r], t.children[r].clone());
    }
    tree_in(algo, &order(algo, topo, net, p, root), r)
}

/// The whole broadcast tree of `algo` from `root` ([`tree`] for every rank).
pub fn broadcast_tree(
    algo: BroadcastAlgorithm,
    topo: &Topology,
    net: Option<&NetModel>,
    p: usize,
    root: usize,
) -> Tree {
    let mut t = Tree::empty(p);
    for r in 0..p {
        (t.parent[r], t.children[r]) = tree(algo, topo, net, r, p, root);
    }
    t
}

/// [`tree`] on an order from [`order`].
pub fn tree_in(algo: BroadcastAlgorithm, order: &[usize], r: usize) -> (Option<usize>, Vec<usize>) {
    let p = order.len();
    let pos = order.iter().position(|&x| x == r).expect("rank in order");
    match algo {
        BroadcastAlgorithm::Auto => unreachable!("Auto is resolved before the tree is built"),
        // (NetTree here only without a model: [`tree`] takes the model's tree.)
        BroadcastAlgorithm::Chain
        | BroadcastAlgorithm::ChainRandom(_)
        | BroadcastAlgorithm::NetChain
        | BroadcastAlgorithm::NetHierarchy
        | BroadcastAlgorithm::NetTree => (
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

/// The possible parents of non-root `r` under an automatic broadcast from `root`: its parent
/// in each tree [`choose::broadcast`] can pick (binomial first, then chain, then with a model
/// net-chain and net-hierarchy; each parent once).
pub fn auto_parents(
    topo: &Topology,
    net: Option<&NetModel>,
    r: usize,
    p: usize,
    root: usize,
) -> Vec<usize> {
    let mut parents = Vec::new();
    for &algo in choose::broadcast_candidates(net) {
        if let (Some(q), _) = tree(algo, topo, net, r, p, root) {
            if !parents.contains(&q) {
                parents.push(q);
            }
        }
    }
    parents
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
    super::rooted::check_root(cx, root, "broadcast root")?;
    let auto = algo == BroadcastAlgorithm::Auto;
    let net = cx.net.as_deref();
    let chunk = choose::chunk(cx.cfg, table.bytes(), cx.size());
    let mut algo = algo;
    if auto && cx.rank() == root {
        let crossover = cx.cfg.broadcast_crossover;
        algo = choose::broadcast(table.bytes(), crossover, net, cx.topo, root, chunk);
    }
    // The concrete algorithm travels in `aux` of every frame.
    let announce = algo.code() as u32;
    let (parent, children) = if auto && cx.rank() != root {
        (None, Vec::new())
    } else {
        tree(algo, cx.topo, net, cx.rank(), cx.size(), root)
    };
    let tag = tags::MAIN.tag();
    if cx.rank() == root {
        // Root: cut partitions into chunks, then stream them.
        let mut pieces: Vec<Out<'_>> = Vec::new();
        for (pid, a) in table.iter() {
            let n = a.bytes().len() as u64;
            for (off, len) in chunks(n, a.layout().unit(), chunk) {
                pieces.push(if len == n {
                    Out::whole(pid, a)
                } else {
                    Out::range(pid, a, off, len)
                });
            }
        }
        if algo == BroadcastAlgorithm::OneByOne {
            let whole = table_pieces(table);
            for &c in &children {
                send_batch(&cx.ep, c, tag, announce, &whole).await?;
            }
            return Ok(());
        }
        return send_batch_inline(&cx.ep, &children, tag, announce, &pieces, BCAST_INLINE_MAX)
            .await;
    }
    let (head, children) = if auto {
        // Learn the root's choice from the first frame. Only this worker's parent under one of
        // the trees the root can pick may send it; the wait fails at once, naming the peer, when
        // one of those parents or the root itself has failed.
        let parents = auto_parents(cx.topo, net, cx.rank(), cx.size(), root);
        let f = cx.ep.recv_frame_from_any(&parents, &[root], tag).await?;
        let chosen = BroadcastAlgorithm::from_announced(f.hdr.aux).ok_or_else(|| {
            Error::Protocol(format!(
                "{}: unknown broadcast algorithm {} announced",
                cx.ep.ctx, f.hdr.aux
            ))
        })?;
        let (parent, children) = tree(chosen, cx.topo, net, cx.rank(), cx.size(), root);
        if parent != Some(f.hdr.src as usize) {
            return Err(Error::Protocol(format!(
                "{}: rank {} sent the broadcast, but this worker's parent is {parent:?}",
                cx.ep.ctx, f.hdr.src
            )));
        }
        (parse_head(&cx.ep, f)?, children)
    } else {
        (
            recv_head(&cx.ep, parent.expect("non-root has a parent"), tag).await?,
            children,
        )
    };
    let parent = head.hdr.src as usize;
    let announce = head.hdr.aux;
    for &c in &children {
        cx.ep
            .send_frame(c, Kind::Batch, tag, announce, &[head.raw()])
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
                        .send_frame(c, Kind::Data, tag, announce, &[&piece.buf])
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Auto waits for exactly the parents the two trees it can pick give.
    #[test]
    fn auto_parents_are_the_binomial_and_chain_parents() {
        for p in 2..=17 {
            let topo = Topology::flat((0..p).map(|i| format!("h{i}:1")).collect());
            for root in 0..p {
                for r in (0..p).filter(|&r| r != root) {
                    let got = auto_parents(&topo, None, r, p, root);
                    let b = tree(BroadcastAlgorithm::Binomial, &topo, None, r, p, root)
                        .0
                        .unwrap();
                    let c = tree(BroadcastAlgorithm::Chain, &topo, None, r, p, root)
                        .0
                        .unwrap();
                    assert_eq!(got[0], b);
                    assert!(got.contains(&c) && got.len() == 1 + usize::from(b != c));
                    assert!(!got.contains(&r));
                }
            }
        }
        let topo = Topology::flat((0..4).map(|i| format!("h{i}:1")).collect());
        assert_eq!(auto_parents(&topo, None, 2, 4, 0), vec![0, 1]);
        assert_eq!(auto_parents(&topo, None, 3, 4, 0), vec![2]);
    }

    /// Every rank is reached exactly once from the root, parents and children agree.
    #[test]
    fn trees_reach_every_rank_once() {
        for p in 1..=33 {
            let hosts: Vec<String> = (0..p).map(|i| format!("h{i}:1")).collect();
            let racked: String = (0..p).map(|i| format!("h{i}:1 /r{}\n", i % 3)).collect();
            let uneven = crate::collective::hierarchy::tests::uneven(p, p as u64);
            for (topo, net) in [
                (Topology::flat(hosts.clone()), None),
                (Topology::parse(&racked, "t").unwrap(), None),
                (Topology::flat(hosts), (p <= 8).then_some(&uneven)),
            ] {
                for root in 0..p {
                    for algo in [
                        BroadcastAlgorithm::Chain,
                        BroadcastAlgorithm::ChainRandom(p as u64),
                        BroadcastAlgorithm::Binomial,
                        BroadcastAlgorithm::OneByOne,
                        BroadcastAlgorithm::NetChain,
                        BroadcastAlgorithm::NetHierarchy,
                    ] {
                        let t: Vec<_> =
                            (0..p).map(|r| tree(algo, &topo, net, r, p, root)).collect();
                        let mut seen = vec![0; p];
                        let mut todo = vec![root];
                        seen[root] = 1;
                        while let Some(r) = todo.pop() {
                            for &c in &t[r].1 {
                                assert_eq!(t[c].0, Some(r), "{algo:?} p={p} root={root}");
                                seen[c] += 1;
                                todo.push(c);
                            }
                        }
                        assert_eq!(seen, vec![1; p], "{algo:?} p={p} root={root}");
                        assert_eq!(t[root].0, None);
                        let depth = |mut r: usize| {
                            let mut d = 0;
                            while let Some(q) = t[r].0 {
                                r = q;
                                d += 1;
                            }
                            d
                        };
                        let deepest = (0..p).map(depth).max().unwrap();
                        let want = match algo {
                            BroadcastAlgorithm::Binomial => p.ilog2() as usize,
                            BroadcastAlgorithm::OneByOne => usize::from(p > 1),
                            _ => p - 1,
                        };
                        assert_eq!(deepest, want, "{algo:?} p={p} root={root}");
                        if algo == BroadcastAlgorithm::Binomial {
                            let rounds = p.next_power_of_two().trailing_zeros() as usize;
                            assert_eq!(t[root].1.len(), rounds, "p={p}");
                        }
                    }
                }
            }
        }
    }
}
