//! Broadcast: after the call every worker's table holds exactly the root's partitions (the
//! receivers' previous partitions are dropped; their combiner is kept).

use super::algorithm::BroadcastAlgorithm;
use super::assemble::Assembler;
use super::choose;
use super::ctx::{check_root, Ctx};
use super::framing::{
    finish_batch, parse_head, recv_batch_expecting, recv_head, recv_pieces, send_batch,
    send_batch_inline, table_pieces, BatchHead, In, Out,
};
use super::join::{boxed, join_all};
use super::segment::{self, chunks, Segmenter};
use super::shapes::{self, tree};
use super::tags;
use crate::data::Table;
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::topology::Topology;
use crate::wire::Kind;

/// A broadcast batch travels inline (one frame, store-and-forward) only up to this size.
const BCAST_INLINE_MAX: u64 = 4 * 1024;

/// The possible parents of non-root `r` under an automatic broadcast from `root`: its parent
/// in each tree [`choose::broadcast`] can pick (binomial first, then chain, then with a model
/// net-chain, net-hierarchy and net-tree, last the root, which sends the scatter-allgather's
/// first frame; each parent once).
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
/// one-by-one = (p−1)(nβ + α); scatter-allgather ≈ 2(p−1)α + 2(p−1)/p · nβ
/// ([`scatter_allgather_root`]).
pub async fn broadcast(
    cx: &Ctx<'_>,
    table: &mut Table,
    root: usize,
    algo: BroadcastAlgorithm,
) -> Result<()> {
    check_root(cx, root, "broadcast root")?;
    if algo == BroadcastAlgorithm::Chain && cx.cfg.broadcast_retries > 0 && cx.size() > 1 {
        return chain_ft(cx, table, root).await;
    }
    let auto = algo == BroadcastAlgorithm::Auto;
    let net = cx.net.as_deref();
    let chunk = segment::chunk(cx.cfg, table.bytes(), cx.size());
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
        let pieces = chunked(table, chunk);
        if algo == BroadcastAlgorithm::ScatterAllgather {
            drop(pieces);
            return scatter_allgather_root(cx, table, root, announce).await;
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
    let (head, children, algo) = if auto {
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
        (parse_head(&cx.ep, f)?, children, chosen)
    } else {
        (
            recv_head(&cx.ep, parent.expect("non-root has a parent"), tag).await?,
            children,
            algo,
        )
    };
    if algo == BroadcastAlgorithm::ScatterAllgather {
        return scatter_allgather_receive(cx, head, table, root).await;
    }
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

/// The root's table as the chain sends it: each partition cut into chunks of `chunk` bytes
/// (whole units of its layout).
fn chunked(table: &Table, chunk: u64) -> Vec<Out<'_>> {
    let mut pieces = Vec::new();
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
    pieces
}

/// The segments of a scatter-allgather broadcast: every partition of at least
/// `Config::segment_min_bytes` whose layout can be cut (dense arrays) in p segments, the
/// others whole; segment s of partition `pid` belongs to rank (pid + s) mod p. Receivers judge
/// every piece by this plan from its announced size alone.
fn sa_segments(cx: &Ctx<'_>) -> Segmenter {
    Segmenter::split(cx.size(), true, cx.cfg.segment_min_bytes)
}

/// The ring of a scatter-allgather broadcast: the rack-order chain from the root (position 0);
/// position v sends to v + 1, and the last position sends nothing (the root holds every
/// segment already).
fn sa_ring(cx: &Ctx<'_>, root: usize) -> Vec<usize> {
    shapes::order(
        BroadcastAlgorithm::ScatterAllgather,
        cx.topo,
        cx.net.as_deref(),
        cx.size(),
        root,
    )
}

/// The rank whose segments (its *bucket*) position `v` of `ring` sends in step `k` of the
/// allgather: position v − k's (mod p). Position v + 1 receives that bucket in the same step.
fn sa_bucket(ring: &[usize], v: usize, k: usize) -> usize {
    let p = ring.len();
    ring[(v + p - k % p) % p]
}

/// Scatter-allgather broadcast, the root's side (van de Geijn's bucket broadcast). Phase 1:
/// the root sends every other worker its bucket (its segments, [`sa_segments`]), all at once.
/// Phase 2: in step k = 0 … p−2 ring position v sends the bucket of position v − k to v + 1,
/// which is the bucket it received in step k − 1 (its own in step 0); position p − 1 sends
/// nothing, and the root, which holds every bucket, sends position −k's (so the ring never
/// carries a bucket back into the root).
///
/// Cost (n bytes, p workers): scatter (p−1)α + (p−1)/p · nβ at the root's link, then
/// (p−1)(α + nβ/p) around the ring: ≈ 2(p−1)α + 2(p−1)/p · nβ. Ahead of the binomial
/// tree's ⌈log2 p⌉ nβ for p ≥ 3; twice the pipelined chain's (n + (p−2)c)β + (p−1)α for
/// large n, and ahead of it in the α-β model only while n < p·c (measured: only at 16 KiB,
/// p = 4, docs/benchmarks-netns.md).
async fn scatter_allgather_root(
    cx: &Ctx<'_>,
    table: &Table,
    root: usize,
    announce: u32,
) -> Result<()> {
    let p = cx.size();
    tags::check_workers(p)?;
    let seg = sa_segments(cx);
    let ring = sa_ring(cx, root);
    let main = tags::MAIN.tag();
    let mut buckets = Vec::with_capacity(p - 1);
    for &w in &ring[1..] {
        buckets.push((w, seg.pieces(table, w, None)?));
    }
    let sends = buckets
        .iter()
        .map(|(w, pieces)| boxed(send_batch(&cx.ep, *w, main, announce, pieces)))
        .collect();
    join_all(sends).await?;
    drop(buckets);
    if p < 2 {
        return Ok(());
    }
    for k in 0..p - 1 {
        let pieces = seg.pieces(table, sa_bucket(&ring, 0, k), None)?;
        send_batch(&cx.ep, ring[1], tags::RING_GATHER.at(k), announce, &pieces).await?;
    }
    Ok(())
}

/// Scatter-allgather broadcast at a worker other than the root, whose bucket's batch head
/// `head` arrived (see [`scatter_allgather_root`]). Every received piece must be exactly a
/// segment of the bucket its step carries (else a protocol error naming the sender, before
/// it is taken); each bucket is forwarded as received, then assembled into the table, and a
/// partition left incomplete at the end is an error.
async fn scatter_allgather_receive(
    cx: &Ctx<'_>,
    head: BatchHead,
    table: &mut Table,
    root: usize,
) -> Result<()> {
    tags::check_workers(cx.size())?;
    let (seg, ring, r) = (sa_segments(cx), sa_ring(cx, root), cx.rank());
    let v = ring
        .iter()
        .position(|&x| x == r)
        .expect("the ring holds every rank");
    let announce = head.hdr.aux;
    let (_, mut last) = finish_batch(&cx.ep, cx.pool, head, |m| seg.expect(m, r)).await?;
    table.clear();
    let mut asm = Assembler::default();
    for k in 0..ring.len() - 1 {
        let tag = tags::RING_GATHER.at(k);
        let recv_b = sa_bucket(&ring, v - 1, k);
        let outs: Vec<Out<'_>> = last.iter().map(In::out).collect();
        let send = async {
            match ring.get(v + 1) {
                Some(&right) => send_batch(&cx.ep, right, tag, announce, &outs).await,
                None => Ok(()),
            }
        };
        let (sent, got) = tokio::join!(
            send,
            recv_batch_expecting(&cx.ep, cx.pool, ring[v - 1], tag, |m| seg.expect(m, recv_b))
        );
        sent?;
        drop(outs);
        for piece in std::mem::replace(&mut last, got?.1) {
            asm.add(table, cx.pool, piece)?;
        }
    }
    for piece in last {
        asm.add(table, cx.pool, piece)?;
    }
    asm.finish(table)
}

// ---------------------------------------------------------------------------------------------
// Fault-tolerant chain broadcast (docs/algorithms.md, "Broadcast fault tolerance").

/// A link between two ranks, the smaller rank first.
pub type Link = (usize, usize);

fn link(a: usize, b: usize) -> Link {
    (a.min(b), a.max(b))
}

/// The most chain extensions [`chain_around`] tries before it gives up.
const SEARCH_BUDGET: usize = 1 << 20;

/// The chain of one attempt of the fault-tolerant broadcast: the ranks of `base` (the chain
/// order, the root first) in an order where no two neighbours are the ends of a link in
/// `failed`. Depth-first, each position taking the first rank of `base` that fits, so with no
/// failed link the chain is `base` itself and a failed link moves as few ranks as the search
/// finds. `None` when no such order exists (or the search gives up).
pub fn chain_around(base: &[usize], failed: &[Link]) -> Option<Vec<usize>> {
    let p = base.len();
    if p == 0 {
        return Some(Vec::new());
    }
    let ok = |a: usize, b: usize| !failed.contains(&link(a, b));
    let mut used = vec![false; p];
    // idx[d]: the index in `base` of position d; next[d]: the next index position d+1 tries.
    let (mut idx, mut next) = (vec![0usize], vec![0usize]);
    used[0] = true;
    let mut budget = SEARCH_BUDGET;
    while idx.len() < p {
        let d = idx.len() - 1;
        let last = base[idx[d]];
        let mut i = next[d];
        while i < p && (used[i] || !ok(last, base[i])) {
            i += 1;
        }
        if i < p {
            budget = budget.checked_sub(1)?;
            next[d] = i + 1;
            used[i] = true;
            idx.push(i);
            next.push(0);
        } else {
            if d == 0 {
                return None;
            }
            next.pop();
            used[idx.pop().expect("a position to undo")] = false;
        }
    }
    Some(idx.into_iter().map(|i| base[i]).collect())
}

/// How long the root waits for every acknowledgement of one attempt: the configured window
/// plus twice the message's time over the slowest link of `order` (by the network model, or
/// at 10 MB/s without one).
fn ack_window(cx: &Ctx<'_>, order: &[usize], bytes: u64) -> std::time::Duration {
    let rate = match cx.net.as_deref() {
        Some(m) => order
            .windows(2)
            .map(|w| m.bandwidth(w[0], w[1]))
            .fold(f64::INFINITY, f64::min),
        None => 10e6,
    };
    let rate = if rate.is_finite() && rate > 0.0 {
        rate
    } else {
        10e6
    };
    cx.cfg.broadcast_ack_window + std::time::Duration::from_secs_f64(2.0 * bytes as f64 / rate)
}

/// The root's verdict on an attempt: done (empty body), or restart around a link (its two
/// ranks, 4 bytes each, little-endian).
fn verdict_body(failed: Option<Link>) -> Vec<u8> {
    match failed {
        None => Vec::new(),
        Some((a, b)) => [(a as u32).to_le_bytes(), (b as u32).to_le_bytes()].concat(),
    }
}

fn parse_verdict(cx: &Ctx<'_>, body: &[u8]) -> Result<Option<Link>> {
    let p = cx.size();
    match body.len() {
        0 => Ok(None),
        8 => {
            let a = u32::from_le_bytes(body[..4].try_into().expect("4 bytes")) as usize;
            let b = u32::from_le_bytes(body[4..].try_into().expect("4 bytes")) as usize;
            if a < p && b < p && a != b {
                Ok(Some(link(a, b)))
            } else {
                Err(Error::Protocol(format!(
                    "{}: the broadcast root named the link {a}-{b}, not a link of {p} workers",
                    cx.ep.ctx
                )))
            }
        }
        n => Err(Error::Protocol(format!(
            "{}: a broadcast verdict of {n} bytes (expected 0 or 8)",
            cx.ep.ctx
        ))),
    }
}

/// What a receiver has of one attempt, shared between its receiving and its forwarding.
/// `done` is also set when the attempt is abandoned.
#[derive(Default)]
struct Inbox {
    /// The batch frame's payload, to forward.
    head: std::cell::RefCell<Option<std::rc::Rc<Vec<u8>>>>,
    /// The pieces received so far, in batch order.
    pieces: std::cell::RefCell<Vec<std::rc::Rc<In>>>,
    /// Every piece has arrived.
    done: std::cell::Cell<bool>,
    /// Woken at each of the above.
    more: tokio::sync::Notify,
}

impl Inbox {
    fn changed(&self) {
        self.more.notify_waiters();
    }
}

/// Waits until `ready` holds, woken by the inbox's changes.
async fn until(inbox: &Inbox, ready: impl Fn(&Inbox) -> bool) {
    loop {
        let n = inbox.more.notified();
        tokio::pin!(n);
        n.as_mut().enable();
        if ready(inbox) {
            return;
        }
        n.await;
    }
}

/// Forwards what `inbox` receives to `child`: the batch frame, then each piece that travels in
/// its own frame, as it arrives. Once `stop` is set it finishes the frame it is writing (a frame
/// cut short would garble the connection) and sends no more.
async fn forward(
    cx: &Ctx<'_>,
    child: usize,
    tag: u32,
    inbox: std::rc::Rc<Inbox>,
    stop: std::rc::Rc<std::cell::Cell<bool>>,
) -> Result<()> {
    until(&inbox, |i| i.head.borrow().is_some() || i.done.get()).await;
    let Some(head) = inbox.head.borrow().clone() else {
        return Ok(());
    };
    if stop.get() {
        return Ok(());
    }
    cx.ep
        .send_frame(child, Kind::Batch, tag, 0, &[&head])
        .await?;
    let mut at = 0;
    loop {
        until(&inbox, |i| i.done.get() || i.pieces.borrow().len() > at).await;
        let next = inbox.pieces.borrow().get(at).cloned();
        let Some(piece) = next else {
            return Ok(());
        };
        at += 1;
        if piece.meta.inline {
            continue;
        }
        if stop.get() {
            return Ok(());
        }
        cx.ep
            .send_frame(child, Kind::Data, tag, 0, &[&piece.buf])
            .await?;
    }
}

/// The frames an attempt abandoned while writing them: waited for at the end of the
/// operation (their failures only logged; the data went another way).
type Leftovers<'f> = Vec<Fut<'f>>;

/// A boxed send of the fault-tolerant broadcast.
type Fut<'f> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + 'f>>;

async fn finish_leftovers(cx: &Ctx<'_>, leftovers: Leftovers<'_>) {
    for f in leftovers {
        if let Err(e) = f.await {
            tracing::debug!(
                rank = cx.rank(),
                "{}: an abandoned attempt's send: {e}",
                cx.ep.ctx
            );
        }
    }
}

/// Fault-tolerant chain broadcast (seed 000 §4.5). Attempt k (k = 0 … `broadcast_retries`)
/// runs the pipelined chain over the order [`chain_around`] gives for the links failed so far,
/// with its own tags (`BCAST_TRY`, `BCAST_ACK`, `BCAST_VERDICT` at step k). Every receiver
/// takes its parent's data whatever its own child does (its forwarding runs apart, so a stalled
/// link downstream holds nobody upstream) and acknowledges to the root once it has everything.
/// The root waits [`ack_window`] for all acknowledgements: with all of them it tells every
/// receiver "done"; else the first rank of the chain that has not acknowledged and its parent
/// are the failed link, a warning names it and the attempt, and the root tells every receiver
/// to restart around it. Frames of the abandoned attempt still on their way are dropped
/// (`Endpoint::discard`). After the last attempt the root fails with a timeout naming the rank
/// and the link. A peer that is gone (a dead process) fails the operation at once, as in the
/// plain chain.
///
/// Cost without a fault: the chain's (n + (p−2)c)β + (p−1)α, plus one acknowledgement from every
/// receiver to the root and one verdict back: 2α at the root's link per receiver, in parallel.
async fn chain_ft(cx: &Ctx<'_>, table: &mut Table, root: usize) -> Result<()> {
    let p = cx.size();
    tags::check_workers(p)?;
    let base = shapes::order(
        BroadcastAlgorithm::Chain,
        cx.topo,
        cx.net.as_deref(),
        p,
        root,
    );
    let retries = cx.cfg.broadcast_retries as usize;
    let mut failed: Vec<Link> = Vec::new();
    if cx.rank() == root {
        let pieces = chunked(table, segment::chunk(cx.cfg, table.bytes(), p));
        let (head, data) = super::framing::batch_frames(&pieces, BCAST_INLINE_MAX)?;
        let (head, data) = (&head, &data);
        let mut leftovers: Leftovers<'_> = Vec::new();
        for attempt in 0..=retries {
            let order = chain_around(&base, &failed).ok_or_else(|| no_chain(cx, &failed))?;
            let window = ack_window(cx, &order, table.bytes());
            let (tag, ack) = (tags::BCAST_TRY.at(attempt), tags::BCAST_ACK.at(attempt));
            let stop = std::rc::Rc::new(std::cell::Cell::new(false));
            let child = order[1];
            let s = stop.clone();
            let mut send: Fut<'_> = Box::pin(async move {
                cx.ep
                    .send_frame(child, Kind::Batch, tag, 0, &[head])
                    .await?;
                for d in data {
                    if s.get() {
                        return Ok(());
                    }
                    cx.ep.send_frame(child, Kind::Data, tag, 0, &[d]).await?;
                }
                Ok(())
            });
            let acked = std::cell::RefCell::new(vec![false; p]);
            acked.borrow_mut()[root] = true;
            let collect = async {
                loop {
                    let missing: Vec<usize> = (0..p).filter(|&r| !acked.borrow()[r]).collect();
                    if missing.is_empty() {
                        return Ok::<(), Error>(());
                    }
                    let f = cx.ep.recv_frame_from_any(&missing, &[], ack).await?;
                    acked.borrow_mut()[f.hdr.src as usize] = true;
                }
            };
            let mut sent = false;
            let all = tokio::time::timeout(window, async {
                tokio::pin!(collect);
                loop {
                    tokio::select! {
                        r = &mut send, if !sent => { r?; sent = true; }
                        r = &mut collect => return r,
                    }
                }
            })
            .await;
            let late = match all {
                Ok(r) => {
                    r?;
                    None
                }
                Err(_) => order.iter().position(|&r| !acked.borrow()[r]),
            };
            let Some(v) = late else {
                if !sent {
                    send.await?;
                }
                verdict_to_all(cx, root, attempt, None).await?;
                finish_leftovers(cx, leftovers).await;
                return Ok(());
            };
            let (a, b) = (order[v - 1], order[v]);
            if attempt == retries {
                return Err(Error::Timeout {
                    ctx: cx.ep.ctx.clone(),
                    peer: cx.ep.world_rank(b),
                    secs: window.as_secs_f64(),
                    hint: format!(
                        "; the fault-tolerant broadcast ran {} attempt(s) and rank {} never \
                         acknowledged (last suspected link: rank {} - rank {})",
                        retries + 1,
                        cx.ep.world_rank(b),
                        cx.ep.world_rank(a),
                        cx.ep.world_rank(b)
                    ),
                });
            }
            tracing::warn!(
                rank = cx.rank(),
                attempt,
                "{}: broadcast attempt {} of {}: rank {} did not acknowledge within {:.1} s; \
                 restarting with the link rank {} - rank {} routed around",
                cx.ep.ctx,
                attempt + 1,
                retries + 1,
                cx.ep.world_rank(b),
                window.as_secs_f64(),
                cx.ep.world_rank(a),
                cx.ep.world_rank(b)
            );
            stop.set(true);
            if !sent {
                leftovers.push(send);
            }
            cx.ep.discard(ack..ack + 1);
            failed.push(link(a, b));
            verdict_to_all(cx, root, attempt, Some(link(a, b))).await?;
        }
        unreachable!("the last attempt returns");
    }
    let mut leftovers: Leftovers<'_> = Vec::new();
    for attempt in 0..=retries {
        let order = chain_around(&base, &failed).ok_or_else(|| no_chain(cx, &failed))?;
        let v = order
            .iter()
            .position(|&x| x == cx.rank())
            .expect("the chain holds every rank");
        let (parent, child) = (order[v - 1], order.get(v + 1).copied());
        let (tag, ack) = (tags::BCAST_TRY.at(attempt), tags::BCAST_ACK.at(attempt));
        let inbox = std::rc::Rc::new(Inbox::default());
        let stop = std::rc::Rc::new(std::cell::Cell::new(false));
        let mut fwd: Option<Fut<'_>> =
            child.map(|c| Box::pin(forward(cx, c, tag, inbox.clone(), stop.clone())) as _);
        let recv = async {
            let head = recv_head(&cx.ep, parent, tag).await?;
            *inbox.head.borrow_mut() = Some(std::rc::Rc::new(head.raw().to_vec()));
            inbox.changed();
            recv_pieces(&cx.ep, cx.pool, parent, head, |piece| {
                inbox.pieces.borrow_mut().push(std::rc::Rc::new(piece));
                inbox.changed();
                async { Ok(()) }
            })
            .await?;
            inbox.done.set(true);
            inbox.changed();
            cx.ep.send_frame(root, Kind::Ctrl, ack, 0, &[]).await
        };
        tokio::pin!(recv);
        let verdict = cx.ep.recv_frame(root, tags::BCAST_VERDICT.at(attempt));
        tokio::pin!(verdict);
        let (mut got, mut fwd_done) = (false, fwd.is_none());
        let verdict = loop {
            tokio::select! {
                r = &mut recv, if !got => { r?; got = true; }
                r = async { fwd.as_mut().expect("a child").await }, if !fwd_done => {
                    r?;
                    fwd_done = true;
                }
                v = &mut verdict => break v?,
            }
        };
        match parse_verdict(cx, &verdict.body)? {
            None => {
                if !got {
                    return Err(Error::Protocol(format!(
                        "{}: the broadcast root said done before rank {} had its data",
                        cx.ep.ctx,
                        cx.rank()
                    )));
                }
                if let (Some(f), false) = (fwd.take(), fwd_done) {
                    f.await?;
                }
                finish_leftovers(cx, leftovers).await;
                table.clear();
                let mut asm = Assembler::default();
                let pieces = std::mem::take(&mut *inbox.pieces.borrow_mut());
                for piece in pieces {
                    let piece = std::rc::Rc::try_unwrap(piece).unwrap_or_else(|rc| In {
                        meta: rc.meta,
                        buf: cx.pool.copy_of(&rc.buf),
                    });
                    asm.add(table, cx.pool, piece)?;
                }
                return asm.finish(table);
            }
            Some(bad) => {
                // The forwarding stops after the frame it is writing, if any; marking the
                // inbox done wakes it when it waits for a piece that will not come.
                stop.set(true);
                inbox.done.set(true);
                inbox.changed();
                if let (Some(f), false) = (fwd.take(), fwd_done) {
                    leftovers.push(f);
                }
                cx.ep.discard(tag..tag + 1);
                tracing::debug!(
                    rank = cx.rank(),
                    "{}: broadcast attempt {} abandoned; the link {}-{} is routed around",
                    cx.ep.ctx,
                    attempt + 1,
                    bad.0,
                    bad.1
                );
                failed.push(bad);
            }
        }
    }
    Err(Error::Protocol(format!(
        "{}: the broadcast root asked for more than {} attempts",
        cx.ep.ctx,
        retries + 1
    )))
}

/// The root's verdict on `attempt` to every receiver, all at once.
async fn verdict_to_all(
    cx: &Ctx<'_>,
    root: usize,
    attempt: usize,
    failed: Option<Link>,
) -> Result<()> {
    let body = verdict_body(failed);
    let tag = tags::BCAST_VERDICT.at(attempt);
    let sends = (0..cx.size())
        .filter(|&r| r != root)
        .map(|r| {
            let body = &body;
            boxed(async move { cx.ep.send_frame(r, Kind::Ctrl, tag, 0, &[body]).await })
        })
        .collect();
    join_all(sends).await.map(|_| ())
}

fn no_chain(cx: &Ctx<'_>, failed: &[Link]) -> Error {
    Error::Protocol(format!(
        "{}: no broadcast chain avoids the failed links {failed:?}",
        cx.ep.ctx
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::framing::crafted::{self, Piece};
    use crate::wire::Op;

    /// Rank 0 receives a scatter-allgather broadcast from root 1 (two workers, every partition
    /// cut in two: bytes 0.. are rank 0's bucket, 16384.. rank 1's) whose scatter batch and
    /// ring step are `scatter` and `ring`.
    fn receive(scatter: &[Piece], ring: &[Piece]) -> Result<Table> {
        let batches = [(tags::MAIN.tag(), scatter), (tags::RING_GATHER.at(0), ring)];
        let algo = BroadcastAlgorithm::ScatterAllgather;
        crafted::run_batches(Op::Broadcast, algo.code(), &batches, async |cx| {
            let mut t = Table::new(crate::data::Combiner::Sum);
            broadcast(cx, &mut t, 1, algo).await?;
            Ok(t)
        })
    }

    /// A receiver takes exactly its bucket from the scatter and the ring's bucket from its
    /// left, and a partition the ring leaves incomplete is an error, not a table with a hole.
    #[test]
    fn scatter_allgather_takes_exactly_the_planned_buckets() {
        let t = receive(&[(0, 32768, 0, 16384)], &[(0, 32768, 16384, 16384)]).unwrap();
        let a = t.get(0).unwrap();
        assert_eq!(a.bytes().len(), 32768);
        assert!(a.bytes().iter().all(|&b| b == 1));
        crafted::refused(
            receive(&[(0, 32768, 16384, 16384)], &[(0, 32768, 0, 16384)]),
            "broadcast",
            "that segment is owned by rank 1; this step takes rank 0's",
        );
        crafted::refused(
            receive(&[(0, 32768, 0, 16384)], &[(0, 32768, 0, 16384)]),
            "broadcast",
            "that segment is owned by rank 0; this step takes rank 1's",
        );
        crafted::refused(
            receive(&[(0, 32768, 0, 8192)], &[]),
            "broadcast",
            "the segment at byte 0 has 16384 bytes",
        );
        let e = receive(&[(0, 32768, 0, 16384)], &[]).unwrap_err();
        assert!(
            e.to_string().contains("partition 0 arrived incomplete"),
            "{e}"
        );
    }

    /// Whether `order` holds each rank of `base` once, starts at the root and has no failed
    /// link between neighbours.
    fn valid(order: &[usize], base: &[usize], failed: &[Link]) -> bool {
        let mut a = order.to_vec();
        let mut b = base.to_vec();
        a.sort_unstable();
        b.sort_unstable();
        a == b
            && order.first() == base.first()
            && order
                .windows(2)
                .all(|w| !failed.contains(&link(w[0], w[1])))
    }

    /// The chain around failed links: the plain chain without any; the failed link's far end
    /// moved as little as possible; every pair of a small job failed alone and in pairs still
    /// gives a valid chain whenever one exists (checked by brute force), and `None` only then.
    #[test]
    fn chain_around_avoids_failed_links_and_keeps_the_order_otherwise() {
        let base = vec![0, 1, 2, 3];
        assert_eq!(chain_around(&base, &[]), Some(base.clone()));
        assert_eq!(chain_around(&base, &[(1, 2)]), Some(vec![0, 1, 3, 2]));
        assert_eq!(chain_around(&base, &[(0, 1)]), Some(vec![0, 2, 1, 3]));
        assert_eq!(chain_around(&base, &[(2, 3)]), Some(vec![0, 2, 1, 3]));
        assert_eq!(
            chain_around(&base, &[(1, 2), (0, 3)]),
            Some(vec![0, 1, 3, 2])
        );
        // Rank 1 can only neighbour the root, which is first: no chain.
        assert_eq!(chain_around(&base, &[(1, 2), (1, 3)]), None);
        // The root cut from everyone: no chain.
        assert_eq!(chain_around(&base, &[(0, 1), (0, 2), (0, 3)]), None);
        assert_eq!(chain_around(&[5], &[]), Some(vec![5]));
        // A rotated base (root 2) keeps the root first.
        assert_eq!(
            chain_around(&[2, 3, 0, 1], &[(0, 3)]),
            Some(vec![2, 3, 1, 0])
        );
        for p in 2..=6usize {
            let base: Vec<usize> = (0..p).collect();
            let pairs: Vec<Link> = (0..p)
                .flat_map(|a| (a + 1..p).map(move |b| (a, b)))
                .collect();
            let mut sets: Vec<Vec<Link>> = pairs.iter().map(|&l| vec![l]).collect();
            for (i, &x) in pairs.iter().enumerate() {
                for &y in &pairs[i + 1..] {
                    sets.push(vec![x, y]);
                }
            }
            for failed in sets {
                let exists = permutations(&base[1..])
                    .into_iter()
                    .any(|rest| valid(&[vec![0], rest].concat(), &base, &failed));
                match chain_around(&base, &failed) {
                    Some(o) => assert!(valid(&o, &base, &failed), "p {p}, {failed:?}: {o:?}"),
                    None => assert!(!exists, "p {p}, {failed:?}: a chain exists"),
                }
            }
        }
        // Large jobs: a few failed links cost a short search, and the order stays near.
        let base: Vec<usize> = (0..4096).collect();
        let failed = [(10, 11), (2000, 2001), (4094, 4095)];
        let o = chain_around(&base, &failed).unwrap();
        assert!(valid(&o, &base, &failed));
        assert_eq!(&o[..11], &base[..11]);
    }

    fn permutations(v: &[usize]) -> Vec<Vec<usize>> {
        if v.is_empty() {
            return vec![Vec::new()];
        }
        let mut out = Vec::new();
        for i in 0..v.len() {
            let mut rest = v.to_vec();
            let x = rest.remove(i);
            for mut p in permutations(&rest) {
                p.insert(0, x);
                out.push(p);
            }
        }
        out
    }

    /// Auto waits for exactly the parents the two trees it can pick without a model give.
    #[test]
    fn auto_parents_are_the_binomial_and_chain_parents() {
        for p in 2..=17 {
            let topo = Topology::of_size(p);
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
        let topo = Topology::of_size(4);
        assert_eq!(auto_parents(&topo, None, 2, 4, 0), vec![0, 1]);
        assert_eq!(auto_parents(&topo, None, 3, 4, 0), vec![2]);
        // With a model the root is a possible parent too (scatter-allgather's first frame).
        let m = NetModel::uniform(4, 1e-4, 25e6);
        assert!(auto_parents(&topo, Some(&m), 3, 4, 0).contains(&0));
    }
}
