//! A worker's transport (its [`Link`] to the peers and its mailbox) and the [`Endpoint`]: one
//! operation's view of it, which stamps every frame with the operation's group, sequence
//! number, kind and algorithm and bounds every wait by the operation's deadline.
//!
//! An operation of a sub-group ([`Members`]) sees only the members, in *group ranks*: the
//! endpoint's `rank()` and `size()` are the group's, the ranks an algorithm sends to and
//! receives from are group ranks (mapped to world ranks here), and a received frame's
//! `hdr.src` is the sender's group rank. So every algorithm runs unchanged on a group. Errors
//! about a peer (gone, silent, timed out, mismatch) name its world rank.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::mailbox::{Call, Mailbox, Take, LEFT};
use super::{heartbeat_interval, Frame, Link, TrySend};
use crate::config::LinkFault;
use crate::error::{Error, OpContext, Result};
use crate::wire::{self, Header, Kind, Op};

/// A spinning receive gives the runtime a turn every this many rounds (it reads its own
/// peers' sockets in the others).
const RUNTIME_EVERY: u32 = 32;

/// How long a failed write waits for the peer's reason for leaving to arrive.
const SEND_FAILURE_GRACE: Duration = Duration::from_secs(1);

/// The connections of one worker to all its peers (TCP or in-process) and its mailbox.
pub struct Transport {
    pub rank: usize,
    pub size: usize,
    pub job: u64,
    op_timeout: Duration,
    /// How long a receive polls before it sleeps ([`Transport::set_spin`]).
    spin: Duration,
    pub(super) mailbox: Arc<Mailbox>,
    link: Box<dyn Link>,
    /// A link fault of the tests ([`crate::config::LinkFault`]) and, once it has begun, when.
    fault: std::sync::OnceLock<std::sync::Mutex<FaultState>>,
}

/// Where a [`LinkFault`] stands at one of its ends.
struct FaultState {
    fault: LinkFault,
    /// Data frames this worker has sent over the link.
    sent: u64,
    /// When the link delivers again, once the fault has begun.
    until: Option<tokio::time::Instant>,
}

impl Transport {
    pub(super) fn new(
        rank: usize,
        size: usize,
        job: u64,
        op_timeout: Duration,
        mailbox: Arc<Mailbox>,
        link: Box<dyn Link>,
    ) -> Transport {
        Transport {
            rank,
            size,
            job,
            op_timeout,
            spin: Duration::ZERO,
            mailbox,
            link,
            fault: std::sync::OnceLock::new(),
        }
    }

    /// Sets the link fault of the tests (`Config::link_fault`): this worker's data frames over
    /// that link stall once it has sent `after` of them.
    pub fn set_link_fault(&self, fault: Option<LinkFault>) {
        if let Some(fault) = fault.filter(|f| f.a == self.rank || f.b == self.rank) {
            let _ = self.fault.set(std::sync::Mutex::new(FaultState {
                fault,
                sent: 0,
                until: None,
            }));
        }
    }

    /// How long a frame of `kind` to world rank `dst` must wait for the link fault, if any.
    fn stalled_until(&self, dst: usize, kind: Kind) -> Option<tokio::time::Instant> {
        let mut st = self.fault.get()?.lock().unwrap_or_else(|e| e.into_inner());
        let f = st.fault;
        if !(f.a == dst || f.b == dst) || f.a == f.b {
            return None;
        }
        if st.until.is_none() && kind == Kind::Data {
            st.sent += 1;
            if st.sent > f.after {
                tracing::debug!(rank = self.rank, peer = dst, "link fault: the link stalls");
                st.until = Some(tokio::time::Instant::now() + f.stall);
            }
        }
        st.until.filter(|&u| u > tokio::time::Instant::now())
    }

    /// How long a receive that finds nothing polls (yielding the CPU between polls) before it
    /// sleeps until the frame comes: only worth it when the waiting thread drives the I/O itself
    /// (`io_driver = caller`), where polling runs the readers; zero (the default) sleeps at once.
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// An endpoint for one operation of the whole job.
    pub fn endpoint(&self, op: Op, algo: u8, seq: u64, label: &str) -> Endpoint<'_> {
        self.group_endpoint(None, op, algo, seq, label)
    }

    /// A peer's frames for operation `seq` of `group` or an earlier one that this worker did
    /// not take ([`super::mailbox::Mailbox::stray`]).
    pub fn stray(&self, group: u64, seq: u64) -> Option<(usize, u64, usize)> {
        self.mailbox.stray(group, seq)
    }

    /// The (group, sender) pairs with frames waiting in the collective lane (group 0: the whole
    /// job), for explaining a timeout.
    pub fn queued_groups(&self) -> Vec<(u64, usize)> {
        self.mailbox.queued_groups()
    }

    /// An endpoint for one operation of `group` (`None`: the whole job); `seq` counts that
    /// group's operations.
    pub fn group_endpoint(
        &self,
        group: Option<Members>,
        op: Op,
        algo: u8,
        seq: u64,
        label: &str,
    ) -> Endpoint<'_> {
        Endpoint {
            t: self,
            op,
            algo,
            seq,
            ctx: OpContext::new(
                self.rank,
                op.name(),
                seq,
                label,
                group.as_ref().map(|g| g.world.clone()),
            ),
            group,
            timeout: self.op_timeout,
            root: AtomicU32::new(NO_ROOT),
        }
    }

    /// Sends `Abort(reason)` to every peer (best effort, briefly) and closes all connections.
    pub async fn abort(&self, reason: &str) {
        let h = Header::control(Kind::Abort, self.rank, self.job, reason.len());
        self.link.close(h, reason.as_bytes()).await;
    }

    /// How many connections this worker has opened to its peers so far (`None` in process).
    pub fn connections(&self) -> Option<usize> {
        self.link.connections()
    }

    /// How often a worker outside its operations looks at its peers
    /// ([`Transport::peer_trouble`]): the heartbeat interval.
    pub fn watch_interval(&self) -> Duration {
        heartbeat_interval(self.op_timeout)
    }

    /// What dooms this worker's next operation, seen without running one: a peer recorded
    /// gone for a failure (the first one), or a peer with an open connection that has sent
    /// nothing, not even heartbeats, for half the timeout. The error is the one a collective
    /// would return, in context `ctx`.
    pub fn peer_trouble(&self, ctx: &OpContext) -> Option<Error> {
        let mb = &self.mailbox;
        if let Some((peer, reason)) = mb.first_failure() {
            return Some(Error::PeerLost {
                ctx: ctx.clone(),
                peer,
                reason,
            });
        }
        self.link
            .open_peers()
            .into_iter()
            .filter(|&p| p != self.rank && !mb.is_gone(p))
            .map(|p| (p, mb.silence(p)))
            .find(|&(_, quiet)| quiet >= self.op_timeout / 2)
            .map(|(peer, quiet)| Error::Silent {
                ctx: ctx.clone(),
                peer,
                secs: quiet.as_secs_f64(),
            })
    }

    /// Orderly shutdown: `Bye` to every peer, then close.
    pub async fn close(&self) {
        let h = Header::control(Kind::Bye, self.rank, self.job, 0);
        self.link.close(h, &[]).await;
    }
}

/// The members of a sub-group, as its operations see them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    /// The group's id in every frame header (never 0, which is the whole job).
    pub id: u64,
    /// `world[g]` is the world rank of group rank g.
    pub world: Arc<[usize]>,
    /// This worker's group rank.
    pub me: usize,
}

/// One worker's view of one operation: sends and receives frames tagged with the operation's
/// group, sequence number, kind and algorithm, with the operation's deadline.
pub struct Endpoint<'a> {
    pub t: &'a Transport,
    pub op: Op,
    pub algo: u8,
    pub seq: u64,
    pub ctx: OpContext,
    /// The sub-group this operation runs in (`None`: every worker).
    group: Option<Members>,
    timeout: Duration,
    /// The root of a rooted operation ([`Endpoint::set_root`]), else [`NO_ROOT`].
    root: AtomicU32,
}

/// No root: the operation is not rooted.
const NO_ROOT: u32 = u32::MAX;

impl Endpoint<'_> {
    /// This worker's rank in the operation's group.
    pub fn rank(&self) -> usize {
        self.group.as_ref().map_or(self.t.rank, |g| g.me)
    }
    /// The number of workers in the operation's group.
    pub fn size(&self) -> usize {
        self.group.as_ref().map_or(self.t.size, |g| g.world.len())
    }

    /// The world rank of group rank `r`.
    pub fn world_rank(&self, r: usize) -> usize {
        self.group.as_ref().map_or(r, |g| g.world[r])
    }

    /// The group rank of world rank `w` (a member: every frame of this operation comes from
    /// one, since only members send in the group's sequence space; a non-member keeps its
    /// world rank).
    fn group_rank(&self, w: usize) -> usize {
        match &self.group {
            Some(g) => g.world.iter().position(|&x| x == w).unwrap_or(w),
            None => w,
        }
    }

    fn group_id(&self) -> u64 {
        self.group.as_ref().map_or(0, |g| g.id)
    }

    /// Whether this is an operation of a group (ranks are group ranks), not of the whole job.
    pub fn is_group(&self) -> bool {
        self.group.is_some()
    }

    /// A received frame as the algorithm sees it: its sender as a group rank.
    fn local(&self, mut f: Frame) -> Frame {
        f.hdr.src = self.group_rank(f.hdr.src as usize) as u32;
        f
    }

    /// How long this endpoint's waits may take (half of it is the silence limit).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Drops this operation's frames with a tag in `tags` from every sender, queued now or
    /// arriving later: the frames of an attempt the operation abandoned (the fault-tolerant
    /// broadcast's). The number dropped now.
    pub fn discard(&self, tags: std::ops::Range<u32>) -> usize {
        self.t.mailbox.discard(self.group_id(), self.seq, tags)
    }

    /// The same endpoint with another deadline (the start-up handshake uses the connect timeout).
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub(super) fn header(&self, kind: Kind, tag: u32, aux: u32, len: u64) -> Header {
        Header {
            kind,
            op: self.op,
            algo: self.algo,
            src: self.t.rank as u32,
            job: self.t.job,
            seq: self.seq,
            tag,
            aux,
            len,
            group: self.group_id(),
        }
    }

    /// `peer` is gone for `reason`. When that is only a broken connection and another peer
    /// failed first, the first failure (the likely root cause) is quoted too. A peer that broke
    /// the protocol (e.g. a frame whose integrity tag does not verify) is a protocol error.
    pub(super) fn lost(&self, peer: usize, reason: String) -> Error {
        let mb = &self.t.mailbox;
        if mb.violated(peer) {
            let why = mb.gone(peer).unwrap_or(reason);
            return Error::Protocol(format!("{}: rank {peer} {why}", self.ctx));
        }
        let reason = match self.t.mailbox.first_failure() {
            Some((first, why)) if first != peer && !reason.starts_with("it failed") => {
                format!("{reason} (the first failure seen here: rank {first} is gone: {why})")
            }
            _ => reason,
        };
        Error::PeerLost {
            ctx: self.ctx.clone(),
            peer,
            reason,
        }
    }

    pub(super) fn silent(&self, peer: usize, quiet: Duration) -> Error {
        Error::Silent {
            ctx: self.ctx.clone(),
            peer,
            secs: quiet.as_secs_f64(),
        }
    }

    fn mismatch(&self, peer: usize, op: Op, algo: u8) -> Error {
        Error::OpMismatch {
            ctx: self.ctx.clone(),
            peer,
            sides: format!(
                "{} at this position, this worker {}",
                wire::describe(op, algo),
                wire::describe(self.op, self.algo)
            ),
        }
    }

    /// While a receive waits: a peer that runs another operation or algorithm at this position
    /// and sends to this worker only frames it does not wait for (say a ring against a
    /// butterfly) would otherwise show only at the timeout. So would a peer that waits in a
    /// rooted operation this worker called with another root ([`Endpoint::set_root`]).
    fn check_mismatch(&self) -> Result<()> {
        let mb = &self.t.mailbox;
        let pos = (self.group_id(), self.seq);
        if let Some((peer, op, algo)) = mb.mismatch(pos, self.op, self.algo) {
            return Err(self.mismatch(peer, op, algo));
        }
        match mb.root_conflict() {
            Some((peer, theirs, mine)) => {
                let (at, there) = if (theirs.group, theirs.seq) == pos {
                    ("this position".to_string(), "")
                } else {
                    (format!("operation #{}", theirs.seq), " there")
                };
                Err(Error::OpMismatch {
                    ctx: self.ctx.clone(),
                    peer,
                    sides: format!(
                        "{} with root {} at {at}, this worker {} with root {}{there}",
                        theirs.op.name(),
                        theirs.root,
                        mine.op.name(),
                        mine.root
                    ),
                })
            }
            None => Ok(()),
        }
    }

    /// Records that this operation is rooted at `root` (a group rank in a group), before
    /// anything is sent: a peer that waits in it with another root is then an operation
    /// mismatch, found within two heartbeat intervals of waiting instead of at the timeout
    /// (roots that differ can leave every worker waiting with no frame astray). Called once,
    /// by the worker's rooted calls, not by the algorithms inside them.
    pub fn set_root(&self, root: usize) {
        let root = u32::try_from(root).unwrap_or(NO_ROOT - 1).min(NO_ROOT - 1);
        self.root.store(root, Ordering::Relaxed);
        self.t.mailbox.record_call(Call {
            group: self.group_id(),
            seq: self.seq,
            op: self.op,
            root,
        });
    }

    /// After a wait in a rooted operation has slept one heartbeat interval (once per wait):
    /// tells the (world rank) peers it waits for the operation and its root, so a peer that
    /// called it with another root finds out ([`Mailbox::root_conflict`]). Best effort: a
    /// send that does not go through within the interval is dropped.
    async fn tell_waiting(&self, peers: &[usize], told: &mut bool) {
        let root = self.root.load(Ordering::Relaxed);
        if root == NO_ROOT || std::mem::replace(told, true) {
            return;
        }
        let h = self.header(Kind::Waiting, 0, root, 0);
        let slice = heartbeat_interval(self.timeout);
        for &p in peers {
            let _ = tokio::time::timeout(slice, self.t.link.send(p, h, &[])).await;
        }
    }

    /// After a wait has slept a heartbeat interval: a peer this worker does not wait for has
    /// failed (its connection broke, or it sent `Abort`), so the job cannot finish. Workers
    /// are not all connected to each other (connections open on first use), so a failure
    /// spreads from those that see it to every worker they are connected to, and each waiting
    /// worker ends within a heartbeat interval of hearing it, not at its timeout.
    fn failed_elsewhere(&self) -> Result<()> {
        match self.t.mailbox.first_failure() {
            Some((peer, why)) => Err(self.lost(peer, why)),
            None => Ok(()),
        }
    }

    fn timed_out(&self, peer: usize) -> Error {
        Error::Timeout {
            ctx: self.ctx.clone(),
            peer,
            secs: self.timeout.as_secs_f64(),
            hint: String::new(),
        }
    }

    /// Writes one frame to group rank `dst` whose payload is the concatenation of `parts`,
    /// straight from the caller's buffers. A send blocked on a peer that takes no data fails when that peer has
    /// been silent for half the timeout (a stopped or cut-off process sends no heartbeats
    /// either), or at the timeout; a failed write names the peer's own reason for leaving (its
    /// `Abort` frame is usually still on its way to this worker's reader).
    pub async fn send_frame(
        &self,
        dst: usize,
        kind: Kind,
        tag: u32,
        aux: u32,
        parts: &[&[u8]],
    ) -> Result<()> {
        let dst = self.world_rank(dst);
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let h = self.header(kind, tag, aux, len as u64);
        if let Some(until) = self.t.stalled_until(dst, kind) {
            // The tests' link fault: nothing is written until the link delivers again.
            tokio::time::sleep_until(until).await;
        }
        // A small frame usually goes out at once; only what must wait takes the timed path.
        let mut send = match self.t.link.try_send(dst, h, parts) {
            TrySend::Sent => return Ok(()),
            TrySend::Failed(e) => return Err(self.send_failed(dst, e).await),
            TrySend::NotNow => self.t.link.send(dst, h, parts),
            TrySend::Rest => self.t.link.drain(dst),
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        let slice = heartbeat_interval(self.timeout);
        let mb = &self.t.mailbox;
        loop {
            let wake = deadline.min(tokio::time::Instant::now() + slice);
            match tokio::time::timeout_at(wake, send.as_mut()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => return Err(self.send_failed(dst, e).await),
                Err(_) => {
                    if let Some(reason) = mb.gone(dst) {
                        return Err(self.lost(dst, reason));
                    }
                    let quiet = mb.silence(dst);
                    if quiet >= self.timeout / 2 {
                        return Err(self.silent(dst, quiet));
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Err(Error::SendTimeout {
                            ctx: self.ctx.clone(),
                            peer: dst,
                            secs: self.timeout.as_secs_f64(),
                        });
                    }
                }
            }
        }
    }

    /// The error for a failed write to `dst`: the reason `dst` left, once its reader has filed
    /// it (waited for briefly), else the write error itself.
    async fn send_failed(&self, dst: usize, e: std::io::Error) -> Error {
        let mb = &self.t.mailbox;
        let grace = tokio::time::Instant::now() + self.timeout.min(SEND_FAILURE_GRACE);
        let watch = mb.watch_op(self.group_id(), self.seq, &[dst]);
        loop {
            let notified = watch.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(reason) = mb.gone(dst) {
                return self.lost(dst, reason);
            }
            if tokio::time::timeout_at(grace, notified).await.is_err() {
                return self.lost(dst, format!("send failed: {e}"));
            }
        }
    }

    /// Reads what has arrived from `peers` into the mailbox now (a frame already in a socket
    /// costs no turn of the runtime, [`Link::pull`]). Whether anything changed.
    fn pull(&self, peers: &[usize]) -> bool {
        let mut moved = false;
        for &p in peers {
            moved |= self.t.link.pull(p);
        }
        moved
    }

    /// The frame `take` finds in the mailbox, or else in the sockets of `peers` read now
    /// ([`Endpoint::pull`]); `None` when neither has it yet.
    fn take_now(&self, peers: &[usize], mut take: impl FnMut() -> Take) -> Option<Result<Frame>> {
        if let Some(r) = self.taken(take()) {
            return Some(r);
        }
        if self.pull(peers) {
            return self.taken(take());
        }
        None
    }

    /// Before a receive goes to sleep: for up to the transport's spin time, lets other
    /// processes run (`sched_yield`) and reads the sockets of `peers` itself, taking the frame
    /// as soon as `take` finds it; every few rounds it also gives the runtime a turn (other
    /// readers, timers, the other branches of a join). A reply that comes within that time
    /// then costs no sleep and wake-up (`Transport::spin`).
    async fn spin(&self, peers: &[usize], mut take: impl FnMut() -> Take) -> Option<Result<Frame>> {
        if self.t.spin.is_zero() {
            return None;
        }
        let until = std::time::Instant::now() + self.t.spin;
        let mut round = 0u32;
        while std::time::Instant::now() < until {
            std::thread::yield_now();
            round += 1;
            if round.is_multiple_of(RUNTIME_EVERY) {
                tokio::task::yield_now().await;
            } else if !self.pull(peers) {
                continue;
            }
            if let Some(r) = self.taken(take()) {
                return Some(r);
            }
        }
        None
    }

    /// Turns a mailbox answer into this operation's result (`None`: nothing yet).
    fn taken(&self, t: Take) -> Option<Result<Frame>> {
        match t {
            Take::Frame(f) => {
                self.t.link.took(&f.hdr);
                Some(Ok(f))
            }
            Take::Mismatch { peer, op, algo } => Some(Err(self.mismatch(peer, op, algo))),
            Take::Gone { peer, reason } => Some(Err(self.lost(peer, reason))),
            Take::Empty => None,
        }
    }

    /// Waits for the next frame from group rank `src` with `tag` in this operation. Fails when
    /// `src` is gone, when it has sent nothing at all for half the timeout (silent: hung or cut
    /// off), or when the frame has not come within the timeout.
    pub async fn recv_frame(&self, src: usize, tag: u32) -> Result<Frame> {
        let f = self.wait(self.world_rank(src), tag).await?;
        Ok(self.local(f))
    }

    /// Waits for the first frame with `tag` in this operation from any of `from`, the peers
    /// that may send it (used when only the sender knows what comes next, e.g. the parent in an
    /// automatically chosen broadcast tree). Fails at once when any of `from` or `watch` (peers
    /// whose failure dooms this wait, e.g. the root) is gone for a failure, or has been silent
    /// for half the timeout; a candidate that left the job normally without sending is no
    /// longer waited for. At the timeout the first candidate still waited for is named.
    pub async fn recv_frame_from_any(
        &self,
        from: &[usize],
        watch: &[usize],
        tag: u32,
    ) -> Result<Frame> {
        let from: Vec<usize> = from.iter().map(|&r| self.world_rank(r)).collect();
        let watch: Vec<usize> = watch.iter().map(|&r| self.world_rank(r)).collect();
        let f = self.wait_any(&from, &watch, tag).await?;
        Ok(self.local(f))
    }

    /// [`Endpoint::recv_frame_from_any`] in world ranks.
    async fn wait_any(&self, from: &[usize], watch: &[usize], tag: u32) -> Result<Frame> {
        let mb = &self.t.mailbox;
        let pos = (self.group_id(), self.seq);
        // A frame that is already here, or in a socket, needs no waiter.
        if let Some(r) = self.take_now(from, || mb.take_any(pos, from, tag, self.op, self.algo)) {
            return r;
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let slice = heartbeat_interval(self.timeout);
        let mut live: Vec<usize> = from.to_vec();
        let mut all: Vec<usize> = from.to_vec();
        all.extend(watch.iter().filter(|w| !from.contains(w)));
        all.iter().for_each(|&p| self.t.link.expect(p));
        let waiter = mb.watch_op(self.group_id(), self.seq, &all);
        let mut told = false;
        loop {
            let notified = waiter.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.taken(mb.take_any(pos, &live, tag, self.op, self.algo)) {
                return r;
            }
            let mut failed = None;
            for &p in &all {
                match mb.gone(p) {
                    Some(reason) if reason == LEFT => live.retain(|&x| x != p),
                    Some(reason) => failed = failed.or(Some((p, reason))),
                    None => {}
                }
            }
            if let Some((p, reason)) = failed {
                // Of several failed peers, name the one that failed first (the likely cause).
                return Err(match mb.first_failure() {
                    Some((q, why)) if all.contains(&q) => self.lost(q, why),
                    _ => self.lost(p, reason),
                });
            }
            if live.is_empty() {
                let first = from.first().copied().unwrap_or(0);
                return Err(self.lost(first, LEFT.to_string()));
            }
            let got = self.spin(&live, || mb.take_any(pos, &live, tag, self.op, self.algo));
            if let Some(r) = got.await {
                return r;
            }
            let wake = deadline.min(tokio::time::Instant::now() + slice);
            if tokio::time::timeout_at(wake, notified).await.is_err() {
                self.check_mismatch()?;
                self.tell_waiting(&live, &mut told).await;
                for &p in &all {
                    let quiet = mb.silence(p);
                    if quiet >= self.timeout / 2 {
                        return Err(self.silent(p, quiet));
                    }
                }
                self.failed_elsewhere()?;
                if tokio::time::Instant::now() >= deadline {
                    return Err(self.timed_out(live[0]));
                }
            }
        }
    }

    /// Waits for a frame with `tag` from world rank `src`, waking every heartbeat interval to
    /// fail when `src` has gone silent.
    async fn wait(&self, src: usize, tag: u32) -> Result<Frame> {
        let mb = &self.t.mailbox;
        let take = || mb.take_any((self.group_id(), self.seq), &[src], tag, self.op, self.algo);
        // A frame that is already here, or in the socket, or that comes while spinning, needs
        // no waiter.
        if let Some(r) = self.take_now(&[src], take) {
            return r;
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.t.link.expect(src);
        if let Some(r) = self.spin(&[src], take).await {
            return r;
        }
        let slice = heartbeat_interval(self.timeout);
        let watch = mb.watch_op(self.group_id(), self.seq, &[src]);
        let mut told = false;
        loop {
            let notified = watch.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.taken(take()) {
                return r;
            }
            let wake = deadline.min(tokio::time::Instant::now() + slice);
            if tokio::time::timeout_at(wake, notified).await.is_err() {
                self.check_mismatch()?;
                self.tell_waiting(&[src], &mut told).await;
                let quiet = mb.silence(src);
                if quiet >= self.timeout / 2 {
                    return Err(self.silent(src, quiet));
                }
                self.failed_elsewhere()?;
                if tokio::time::Instant::now() >= deadline {
                    return Err(self.timed_out(src));
                }
            }
        }
    }

    pub async fn send_ctrl<T: serde::Serialize>(&self, dst: usize, tag: u32, v: &T) -> Result<()> {
        self.send_frame(dst, Kind::Ctrl, tag, 0, &[&wire::encode(v)])
            .await
    }

    pub async fn recv_ctrl<T: serde::de::DeserializeOwned>(
        &self,
        src: usize,
        tag: u32,
    ) -> Result<T> {
        let f = self.recv_frame(src, tag).await?;
        if f.hdr.kind != Kind::Ctrl {
            return Err(Error::Protocol(format!(
                "{}: expected a control message from rank {src}, got {:?}",
                self.ctx, f.hdr.kind
            )));
        }
        wire::decode(&f.body).map_err(|e| match e {
            Error::Protocol(m) => Error::Protocol(format!(
                "{}: rank {} sent a control message that does not decode: {m}",
                self.ctx,
                self.world_rank(src)
            )),
            e => e,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Io;

    /// A link whose sends to rank 1 never finish (a stopped peer) and whose sends to rank 2 fail
    /// at once, the peer's own reason arriving just after the write error.
    struct Stuck {
        mb: Arc<Mailbox>,
    }

    impl Link for Stuck {
        fn send<'a>(
            &'a self,
            dst: usize,
            _hdr: Header,
            _parts: &'a [&'a [u8]],
        ) -> Io<'a, std::io::Result<()>> {
            if dst == 1 {
                return Box::pin(std::future::pending());
            }
            let mb = self.mb.clone();
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                mb.mark_gone(dst, "it failed: rank 2: disk full".into());
            });
            Box::pin(std::future::ready(Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "Broken pipe",
            ))))
        }
        fn close<'a>(&'a self, _last: Header, _body: &'a [u8]) -> Io<'a, ()> {
            Box::pin(std::future::ready(()))
        }
    }

    fn transport(timeout: Duration) -> Transport {
        let mb = Arc::new(Mailbox::new(3));
        let link = Box::new(Stuck { mb: mb.clone() });
        Transport::new(0, 3, 1, timeout, mb, link)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_failed_write_names_the_peers_own_reason_not_the_broken_pipe() {
        rt().block_on(async {
            let t = transport(Duration::from_secs(60));
            let ep = t.endpoint(Op::Barrier, 0, 1, "b");
            let e = ep
                .send_frame(2, Kind::Ctrl, 0, 0, &[b"x"])
                .await
                .unwrap_err();
            let e = e.to_string();
            assert!(
                e.ends_with("rank 2 is gone: it failed: rank 2: disk full"),
                "{e}"
            );
        });
    }

    /// A control message that does not decode (here a u64 where a u32 belongs) names the
    /// operation and its sender, not only the decoder's words.
    #[test]
    fn a_malformed_control_message_names_its_sender_and_the_operation() {
        rt().block_on(async {
            let pools = [crate::pool::Pool::default(), crate::pool::Pool::default()];
            let ts = Transport::in_process(1, Duration::from_secs(5), &pools);
            let from = ts[1].endpoint(Op::Allreduce, 0, 7, "sums");
            let u64_in_varint = [0xfd, 1, 2, 3, 4, 5, 6, 7, 8];
            from.send_frame(0, Kind::Ctrl, 3, 0, &[&u64_in_varint])
                .await
                .unwrap();
            let at = ts[0].endpoint(Op::Allreduce, 0, 7, "sums");
            let e = at.recv_ctrl::<u32>(1, 3).await.unwrap_err();
            assert_eq!(e.kind(), "protocol", "{e}");
            let e = e.to_string();
            assert!(
                e.contains(
                    "rank 0: allreduce #7 'sums': rank 1 sent a control message that does \
                     not decode: malformed message:"
                ),
                "{e}"
            );
        });
    }

    #[test]
    fn a_broken_connection_quotes_the_first_failure_seen() {
        rt().block_on(async {
            let t = transport(Duration::from_secs(60));
            t.mailbox
                .mark_gone(2, "it failed: rank 2: disk full".into());
            t.mailbox.mark_gone(1, "connection closed".into());
            let ep = t.endpoint(Op::Barrier, 0, 1, "b");
            let e = ep.recv_frame(1, 0).await.unwrap_err().to_string();
            assert!(
                e.ends_with(
                    "rank 1 is gone: connection closed (the first failure seen here: rank 2 is \
                     gone: it failed: rank 2: disk full)"
                ),
                "{e}"
            );
            let e = ep.recv_frame(2, 0).await.unwrap_err().to_string();
            assert!(
                e.ends_with("rank 2 is gone: it failed: rank 2: disk full"),
                "{e}"
            );
        });
    }

    /// A send that never completes fails as silent when the peer sends nothing (stopped), and
    /// with the send-side timeout when it keeps sending heartbeats but takes no data.
    #[test]
    fn a_blocked_send_is_silent_or_a_send_timeout_never_a_receive_timeout() {
        rt().block_on(async {
            let t = transport(Duration::from_millis(400));
            let ep = t.endpoint(Op::Barrier, 0, 1, "b");
            let e = ep
                .send_frame(1, Kind::Ctrl, 0, 0, &[b"x"])
                .await
                .unwrap_err();
            assert_eq!(e.kind(), "silent", "{e}");
            assert!(e.to_string().contains("rank 1 has been silent"), "{e}");

            let t = Arc::new(transport(Duration::from_secs(2)));
            let beats = {
                let t = t.clone();
                tokio::spawn(async move {
                    loop {
                        t.mailbox.seen(1);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                })
            };
            let ep = t.endpoint(Op::Barrier, 0, 1, "b");
            let e = ep
                .send_frame(1, Kind::Ctrl, 0, 0, &[b"x"])
                .await
                .unwrap_err();
            beats.abort();
            assert_eq!(e.kind(), "timeout", "{e}");
            assert!(
                e.to_string().contains("could not send to rank 1 for 2.0 s"),
                "{e}"
            );
        });
    }
}
