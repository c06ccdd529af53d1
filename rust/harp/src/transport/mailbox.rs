//! The mailbox: where a worker's received frames wait until an operation takes them.
//!
//! Two lanes:
//! * the **collective lane**, keyed by (group, operation sequence, sender, tag): an operation
//!   takes the frames of its own sequence number in its own group (0: the whole job; every
//!   group counts its operations apart), so a fast peer may already be sending the next
//!   operation's frames, or another group's;
//! * the **event lane**, one FIFO per sender in arrival order, for messages between workers
//!   outside collectives (`Event` frames, not keyed by any sequence; `transport::events`,
//!   `crate::events`).
//!
//! Waiters register the spots they wait on (a collective position (group, sequence, sender), or a
//! sender's event FIFO); an arriving frame wakes only the waiters of its spot, and a peer that is
//! gone wakes every waiter on that peer. A receive never scans unrelated queues.
//!
//! Besides frames, the mailbox keeps this worker's last rooted calls and what each peer last
//! said it waits in (`Waiting` frames, [`Mailbox::root_conflict`]), so that calls that name
//! different roots are found while every worker waits, not at the timeout.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::data::kv::FastMap;
use crate::pool::Buf;
use crate::wire::{Header, Kind, Op, EVENT_CREDIT, EVENT_LABELED, EVENT_PLAIN};

/// The reason filed for a peer that left the job normally (`Bye` over TCP, `close` in
/// process). Every other reason is a failure.
pub(crate) const LEFT: &str = "it left the job (finished its work)";

/// A rooted operation (broadcast, reduce, gather, scatter) as called: its position and root
/// (a group rank in a group). Recorded for this worker's own calls, and received from a peer
/// whose wait has lasted a heartbeat interval (a `Waiting` frame, root in `aux`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call {
    pub group: u64,
    pub seq: u64,
    pub op: Op,
    pub root: u32,
}

/// How many emptied tag lists and queues the collective lane keeps for reuse.
const SPARES: usize = 64;

/// How many of its own rooted calls a worker keeps to compare with its peers' (a peer waits in
/// one at most a few operations behind: every rooted call needs every member).
const CALLS_KEPT: usize = 64;

/// This worker's last rooted calls, and the call each peer last said it waits in.
struct Calls {
    mine: VecDeque<Call>,
    theirs: Vec<Option<Call>>,
}

/// A received frame.
#[derive(Debug)]
pub struct Frame {
    pub hdr: Header,
    pub body: Buf,
}

/// Which queue of the mailbox a frame goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Frames of a collective, matched by (group, operation sequence, sender, tag).
    Collective,
    /// Events outside collectives: one FIFO per sender.
    Event,
}

/// The lane of a frame received from a peer: `Event` frames go to the event lane, every other
/// kind belongs to a collective.
pub(crate) fn lane_of(hdr: &Header) -> Lane {
    match hdr.kind {
        Kind::Event => Lane::Event,
        _ => Lane::Collective,
    }
}

/// What a waiter waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Spot {
    Op {
        group: u64,
        seq: u64,
        src: usize,
    },
    Event {
        src: usize,
    },
    /// Credit from `src` for the events this worker sent it (flow control).
    Credit {
        src: usize,
    },
}

impl Spot {
    fn src(self) -> usize {
        match self {
            Spot::Op { src, .. } | Spot::Event { src } | Spot::Credit { src } => src,
        }
    }
}

/// Whether an event frame is an application event (counted by flow control): not a message of
/// the termination protocol, not a credit.
fn is_app_event(hdr: &Header) -> bool {
    hdr.kind == Kind::Event && (hdr.tag == EVENT_PLAIN || hdr.tag == EVENT_LABELED)
}

/// Flow control of events (docs/events.md, "Flow control"), per peer.
struct Flow {
    /// The event window (bytes; 0: no limit) this worker applies to its own sends.
    window: u64,
    /// Receiving: application event bytes queued from each sender, and the largest such
    /// number seen for any one sender.
    queued: Vec<u64>,
    peak: u64,
    /// Receiving: bytes taken from each sender and not yet credited back, and credits due to go.
    uncredited: Vec<u64>,
    due: Vec<u64>,
    /// Sending: bytes sent to each peer and not yet credited by it.
    in_flight: Vec<u64>,
}

/// What [`Mailbox::events_stats`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventQueueStats {
    /// Application event bytes queued now (every sender).
    pub queued_bytes: u64,
    /// The most application event bytes ever queued from one sender at once.
    pub peak_sender_bytes: u64,
}

/// The frames queued at one position (group, sequence, sender) of the collective lane. They all
/// come from one operation of the sender, so the first frame's operation and algorithm stand
/// for all. The tags are a list in arrival order, not a map: an operation has one or two
/// queued at a time (a ring's sender gets at most p − 1 steps ahead), and a receiver takes them
/// in the order they were sent, so the one it wants is almost always the first.
struct Position {
    op: Op,
    algo: u8,
    tags: Vec<(u32, VecDeque<Frame>)>,
}

/// The maps use the engine's fast hasher: every received frame is filed and taken through them
/// (SipHash showed at a few per cent of a small collective's CPU).
struct State {
    ops: FastMap<(u64, u64, usize), Position>,
    /// Emptied tag lists and queues of taken positions, kept for the next ones (a small
    /// collective files and takes a few frames per operation; this spares it their
    /// allocations). At most [`SPARES`] of each.
    spare_tags: Vec<Vec<(u32, VecDeque<Frame>)>>,
    spare_queues: Vec<VecDeque<Frame>>,
    events: Vec<VecDeque<Frame>>,
    gone: Vec<Option<String>>,
    /// Whether each gone peer went for breaking the protocol (a bad frame or integrity tag).
    violated: Vec<bool>,
    /// The first peer recorded gone for a failure (not [`LEFT`]), with its reason.
    first_failure: Option<(usize, String)>,
    watchers: FastMap<Spot, Vec<Arc<Notify>>>,
    flow: Flow,
    /// Tag ranges of operations whose frames are dropped on arrival (group, sequence, tags):
    /// an abandoned attempt's frames still on their way ([`Mailbox::discard`]); the last
    /// [`DISCARDS_KEPT`].
    discarded: VecDeque<(u64, u64, std::ops::Range<u32>)>,
}

/// How many discarded tag ranges the mailbox remembers.
const DISCARDS_KEPT: usize = 64;

/// The outcome of one attempt to take a frame.
#[derive(Debug)]
pub(crate) enum Take {
    Frame(Frame),
    /// `peer` sent frames at this position for another operation or algorithm.
    Mismatch {
        peer: usize,
        op: Op,
        algo: u8,
    },
    /// `peer` is gone and nothing from it is queued.
    Gone {
        peer: usize,
        reason: String,
    },
    /// Nothing yet: wait and try again.
    Empty,
}

pub(crate) struct Mailbox {
    state: Mutex<State>,
    /// Rooted calls, apart from the frames' lock (touched once per rooted operation).
    calls: Mutex<Calls>,
    /// When each peer last sent anything (milliseconds since `epoch`).
    last_seen: Vec<AtomicU64>,
    epoch: Instant,
    /// Whether some credit is due ([`Mailbox::take_due`]), readable without the lock.
    credit_due: AtomicBool,
}

/// A registered waiter; it is woken by frames for its spots and by their senders going away.
/// Dropping it unregisters it.
pub(crate) struct Watch<'m> {
    mb: &'m Mailbox,
    notify: Arc<Notify>,
    spots: Vec<Spot>,
}

impl Watch<'_> {
    /// A wake-up to `enable()` before checking the mailbox and to await after.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut st = self.mb.lock();
        for spot in &self.spots {
            if let Some(ws) = st.watchers.get_mut(spot) {
                ws.retain(|w| !Arc::ptr_eq(w, &self.notify));
                if ws.is_empty() {
                    st.watchers.remove(spot);
                }
            }
        }
    }
}

impl Mailbox {
    pub fn new(size: usize) -> Mailbox {
        Mailbox {
            state: Mutex::new(State {
                ops: FastMap::default(),
                spare_tags: Vec::new(),
                spare_queues: Vec::new(),
                events: (0..size).map(|_| VecDeque::new()).collect(),
                gone: vec![None; size],
                violated: vec![false; size],
                first_failure: None,
                watchers: FastMap::default(),
                flow: Flow {
                    window: 0,
                    queued: vec![0; size],
                    peak: 0,
                    uncredited: vec![0; size],
                    due: vec![0; size],
                    in_flight: vec![0; size],
                },
                discarded: VecDeque::new(),
            }),
            calls: Mutex::new(Calls {
                mine: VecDeque::new(),
                theirs: vec![None; size],
            }),
            credit_due: AtomicBool::new(false),
            last_seen: (0..size).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a sign of life from `peer`.
    pub fn seen(&self, peer: usize) {
        self.last_seen[peer].store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// How long `peer` has sent nothing at all.
    pub fn silence(&self, peer: usize) -> Duration {
        let last = Duration::from_millis(self.last_seen[peer].load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }

    /// Why `peer` is gone, if it is.
    pub fn gone(&self, peer: usize) -> Option<String> {
        self.lock().gone[peer].clone()
    }

    /// The first peer recorded gone for a failure (not for leaving normally), with its reason:
    /// the root cause when several peers fail one after the other.
    pub fn first_failure(&self) -> Option<(usize, String)> {
        self.lock().first_failure.clone()
    }

    /// Whether `peer` is gone.
    pub fn is_gone(&self, peer: usize) -> bool {
        self.lock().gone[peer].is_some()
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a rooted call of this worker (the latest [`CALLS_KEPT`] are kept).
    pub fn record_call(&self, call: Call) {
        let mut c = self.calls();
        if c.mine.len() == CALLS_KEPT {
            c.mine.pop_front();
        }
        c.mine.push_back(call);
    }

    /// A peer that waits in a rooted call which this worker made (or makes) differently, with
    /// both calls (`(peer, theirs, mine)`, the lowest such peer). A peer's call at a position
    /// this worker has not reached, or no longer keeps, is no conflict.
    pub fn root_conflict(&self) -> Option<(usize, Call, Call)> {
        let c = self.calls();
        c.theirs.iter().enumerate().find_map(|(src, t)| {
            let t = (*t)?;
            let m = c
                .mine
                .iter()
                .rev()
                .find(|m| m.group == t.group && m.seq == t.seq)?;
            (m.op != t.op || m.root != t.root).then_some((src, t, *m))
        })
    }

    /// Files a frame from `frame.hdr.src` and wakes the waiters of its spot. A `Waiting`
    /// frame only records the call its sender waits in.
    pub fn push(&self, lane: Lane, frame: Frame) {
        let src = frame.hdr.src as usize;
        if frame.hdr.kind == Kind::Waiting {
            let h = &frame.hdr;
            self.calls().theirs[src] = Some(Call {
                group: h.group,
                seq: h.seq,
                op: h.op,
                root: h.aux,
            });
            return;
        }
        let mut st = self.lock();
        let spot = match lane {
            Lane::Collective => {
                let (group, seq, tag) = (frame.hdr.group, frame.hdr.seq, frame.hdr.tag);
                if !st.discarded.is_empty()
                    && st
                        .discarded
                        .iter()
                        .any(|(g, s, r)| *g == group && *s == seq && r.contains(&tag))
                {
                    return;
                }
                let State {
                    ops,
                    spare_tags,
                    spare_queues,
                    ..
                } = &mut *st;
                let pos = ops.entry((group, seq, src)).or_insert_with(|| Position {
                    op: frame.hdr.op,
                    algo: frame.hdr.algo,
                    tags: spare_tags.pop().unwrap_or_default(),
                });
                match pos.tags.iter_mut().find(|(t, _)| *t == tag) {
                    Some((_, q)) => q.push_back(frame),
                    None => {
                        let mut q = spare_queues.pop().unwrap_or_default();
                        q.push_back(frame);
                        pos.tags.push((tag, q));
                    }
                }
                Spot::Op { group, seq, src }
            }
            Lane::Event if frame.hdr.tag == EVENT_CREDIT => {
                let amount = frame.body.get(..8).map_or(u64::MAX, |b| {
                    u64::from_le_bytes(b.try_into().expect("8 bytes"))
                });
                let sent = st.flow.in_flight[src];
                if amount > sent {
                    drop(st);
                    self.mark_violation(
                        src,
                        format!(
                            "sent a credit for {amount} event bytes, more than the {sent} bytes \
                             of events sent to it and not yet credited"
                        ),
                    );
                    return;
                }
                st.flow.in_flight[src] = sent - amount;
                Spot::Credit { src }
            }
            Lane::Event => {
                if is_app_event(&frame.hdr) {
                    let f = &mut st.flow;
                    f.queued[src] += frame.body.len() as u64;
                    f.peak = f.peak.max(f.queued[src]);
                }
                st.events[src].push_back(frame);
                Spot::Event { src }
            }
        };
        if let Some(ws) = st.watchers.get(&spot) {
            ws.iter().for_each(|w| w.notify_waiters());
        }
    }

    /// Sets the event window this worker applies to its sends (bytes; 0: no limit).
    pub fn set_event_window(&self, window: u64) {
        self.lock().flow.window = window;
    }

    /// The event window this worker applies to its sends.
    pub fn event_window(&self) -> u64 {
        self.lock().flow.window
    }

    /// Counts `len` bytes of an application event to send to `dst` as in flight if the window
    /// allows it now: when nothing is in flight to `dst` (one event larger than the window goes
    /// alone), with no window, or when the bytes in flight stay within the window.
    pub fn reserve_credit(&self, dst: usize, len: u64) -> bool {
        let mut st = self.lock();
        let f = &mut st.flow;
        let ok = f.window == 0 || f.in_flight[dst] == 0 || f.in_flight[dst] + len <= f.window;
        if ok {
            f.in_flight[dst] += len;
        }
        ok
    }

    /// A waiter for credit from `dst` (and for `dst` going away).
    pub fn watch_credit(&self, dst: usize) -> Watch<'_> {
        self.watch(vec![Spot::Credit { src: dst }])
    }

    /// Whether some credit is due to be sent ([`Mailbox::take_due`]).
    pub fn credit_due(&self) -> bool {
        self.credit_due.load(Ordering::Acquire)
    }

    /// The credits due, `(peer, bytes)`, now owed to nobody any more.
    pub fn take_due(&self) -> Vec<(usize, u64)> {
        let mut st = self.lock();
        self.credit_due.store(false, Ordering::Release);
        st.flow
            .due
            .iter_mut()
            .enumerate()
            .filter(|(_, d)| **d > 0)
            .map(|(p, d)| (p, std::mem::take(d)))
            .collect()
    }

    /// The queued event bytes now and the most ever queued from one sender.
    pub fn events_stats(&self) -> EventQueueStats {
        let st = self.lock();
        EventQueueStats {
            queued_bytes: st.flow.queued.iter().sum(),
            peak_sender_bytes: st.flow.peak,
        }
    }

    /// Marks `src` gone for breaking the protocol: waiters on it fail with a protocol error.
    pub fn mark_violation(&self, src: usize, reason: String) {
        self.mark(src, reason, true);
    }

    /// Whether `peer` is gone for breaking the protocol ([`Mailbox::mark_violation`]).
    pub fn violated(&self, peer: usize) -> bool {
        self.lock().violated[peer]
    }

    /// Marks `src` gone (the first reason wins) and wakes every waiter on it.
    pub fn mark_gone(&self, src: usize, reason: String) {
        self.mark(src, reason, false);
    }

    fn mark(&self, src: usize, reason: String, violation: bool) {
        let mut st = self.lock();
        if st.gone[src].is_none() {
            st.violated[src] = violation;
            if reason != LEFT && st.first_failure.is_none() {
                st.first_failure = Some((src, reason.clone()));
            }
            st.gone[src] = Some(reason);
        }
        for (spot, ws) in &st.watchers {
            if spot.src() == src {
                ws.iter().for_each(|w| w.notify_waiters());
            }
        }
    }

    fn watch(&self, spots: Vec<Spot>) -> Watch<'_> {
        let notify = Arc::new(Notify::new());
        let mut st = self.lock();
        for &spot in &spots {
            st.watchers.entry(spot).or_default().push(notify.clone());
        }
        drop(st);
        Watch {
            mb: self,
            notify,
            spots,
        }
    }

    /// A waiter for collective frames of operation `seq` of `group` from any of `from`.
    pub fn watch_op(&self, group: u64, seq: u64, from: &[usize]) -> Watch<'_> {
        self.watch(
            from.iter()
                .map(|&src| Spot::Op { group, seq, src })
                .collect(),
        )
    }

    /// A waiter for events from any of `from`.
    pub fn watch_events(&self, from: &[usize]) -> Watch<'_> {
        self.watch(from.iter().map(|&src| Spot::Event { src }).collect())
    }

    /// A peer's frames for an operation of `group` at or before `seq` that this worker has
    /// finished without taking them: the workers' calls disagreed (a root, an algorithm or a
    /// table that differs), and the peer's part went nowhere. The earliest such position and
    /// its sender, with the number of frames.
    pub fn stray(&self, group: u64, seq: u64) -> Option<(usize, u64, usize)> {
        let st = self.lock();
        st.ops
            .iter()
            .filter(|((g, s, _), _)| *g == group && *s <= seq)
            .map(|((_, s, src), pos)| (*src, *s, pos.tags.iter().map(|(_, q)| q.len()).sum()))
            .min_by_key(|&(src, s, _)| (s, src))
    }

    /// Drops the frames of operation `seq` of `group` with a tag in `tags`, from every sender:
    /// those queued now and those that arrive later (an attempt the operation abandoned, whose
    /// frames may still be on their way). The number of frames dropped now.
    pub fn discard(&self, group: u64, seq: u64, tags: std::ops::Range<u32>) -> usize {
        let mut st = self.lock();
        let mut dropped = 0;
        st.ops.retain(|&(g, s, _), pos| {
            if g != group || s != seq {
                return true;
            }
            pos.tags.retain(|(t, q)| {
                let gone = tags.contains(t);
                if gone {
                    dropped += q.len();
                }
                !gone
            });
            !pos.tags.is_empty()
        });
        if st.discarded.len() == DISCARDS_KEPT {
            st.discarded.pop_front();
        }
        st.discarded.push_back((group, seq, tags));
        dropped
    }

    /// The (group, sender) pairs that have collective frames waiting, sorted.
    pub fn queued_groups(&self) -> Vec<(u64, usize)> {
        let st = self.lock();
        let mut v: Vec<(u64, usize)> = st.ops.keys().map(|&(g, _, src)| (g, src)).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A peer whose frames at operation `seq` of `group` belong to another operation or
    /// algorithm than (`op`, `algo`), with what they belong to (the lowest such rank).
    pub fn mismatch(&self, (group, seq): (u64, u64), op: Op, algo: u8) -> Option<(usize, Op, u8)> {
        let st = self.lock();
        st.ops
            .iter()
            .filter(|((g, s, _), pos)| {
                *g == group && *s == seq && (pos.op != op || pos.algo != algo)
            })
            .map(|((_, _, src), pos)| (*src, pos.op, pos.algo))
            .min_by_key(|&(src, _, _)| src)
    }

    /// Takes the next frame of operation `seq` of `group` with `tag` from the first of `from`
    /// that has one. Frames from a candidate at this position for another operation or
    /// algorithm are a mismatch. Gone only when every candidate is gone (naming the first).
    pub fn take_any(
        &self,
        (group, seq): (u64, u64),
        from: &[usize],
        tag: u32,
        op: Op,
        algo: u8,
    ) -> Take {
        let mut st = self.lock();
        for &src in from {
            let Some(pos) = st.ops.get_mut(&(group, seq, src)) else {
                continue;
            };
            if pos.op != op || pos.algo != algo {
                return Take::Mismatch {
                    peer: src,
                    op: pos.op,
                    algo: pos.algo,
                };
            }
            let Some(i) = pos.tags.iter().position(|(t, _)| *t == tag) else {
                continue;
            };
            let q = &mut pos.tags[i].1;
            let f = q.pop_front().expect("empty tag queues are removed");
            if q.is_empty() {
                let (_, q) = pos.tags.remove(i);
                let emptied = pos.tags.is_empty();
                if st.spare_queues.len() < SPARES {
                    st.spare_queues.push(q);
                }
                if emptied {
                    if let Some(pos) = st.ops.remove(&(group, seq, src)) {
                        if st.spare_tags.len() < SPARES {
                            st.spare_tags.push(pos.tags);
                        }
                    }
                }
            }
            return Take::Frame(f);
        }
        all_gone(&st, from)
    }

    /// Takes the oldest event from the first of `from` that has one (callers rotate `from` for
    /// fairness). Gone only when every candidate is gone and has nothing queued. An application
    /// event from a peer (not from `me`) is owed back as credit: once a quarter of the window
    /// is owed, or the sender has nothing more queued (so that a sender waiting for credit
    /// always gets it once its events are taken).
    pub fn take_event(&self, from: &[usize], me: usize) -> Take {
        let mut st = self.lock();
        for &src in from {
            if let Some(f) = st.events[src].pop_front() {
                if is_app_event(&f.hdr) {
                    let len = f.body.len() as u64;
                    let fl = &mut st.flow;
                    fl.queued[src] -= len;
                    let drained = fl.queued[src] == 0;
                    if src != me {
                        fl.uncredited[src] += len;
                        let quarter = match fl.window {
                            0 => u64::MAX,
                            w => (w / 4).max(1),
                        };
                        if drained || fl.uncredited[src] >= quarter {
                            fl.due[src] += std::mem::take(&mut fl.uncredited[src]);
                            self.credit_due.store(true, Ordering::Release);
                        }
                    }
                }
                return Take::Frame(f);
            }
        }
        all_gone(&st, from)
    }
}

fn all_gone(st: &State, from: &[usize]) -> Take {
    match from.first() {
        Some(&first) if from.iter().all(|&s| st.gone[s].is_some()) => Take::Gone {
            peer: first,
            reason: st.gone[first].clone().unwrap_or_default(),
        },
        _ => Take::Empty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Pool, PoolConfig};
    use crate::wire::EVENT_CONTROL;

    fn frame(pool: &Pool, src: u32, seq: u64, tag: u32, op: Op, byte: u8) -> Frame {
        let hdr = Header {
            kind: Kind::Ctrl,
            op,
            algo: 0,
            src,
            job: 1,
            seq,
            tag,
            aux: 0,
            len: 1,
            group: 0,
        };
        Frame {
            hdr,
            body: pool.copy_of(&[byte]),
        }
    }

    /// A peer's `Waiting` frame is compared with this worker's own rooted calls: a different
    /// root or op at the same (group, seq) is a conflict; a position this worker has not
    /// reached, or no longer keeps, is not.
    #[test]
    fn a_peer_waiting_with_another_root_is_a_conflict_only_at_a_kept_position() {
        let pool = Pool::new(PoolConfig::default());
        let mb = Mailbox::new(3);
        let call = |seq, op, root| Call {
            group: 0,
            seq,
            op,
            root,
        };
        let waiting = |src: u32, c: Call| {
            let mut f = frame(&pool, src, c.seq, 0, c.op, 0);
            f.hdr.kind = Kind::Waiting;
            f.hdr.aux = c.root;
            f
        };
        mb.push(Lane::Collective, waiting(2, call(5, Op::Reduce, 0)));
        // Not a frame of any operation, and no call of this worker at #5 yet.
        assert!(mb.stray(0, 5).is_none());
        assert_eq!(mb.root_conflict(), None);
        mb.record_call(call(5, Op::Reduce, 0));
        assert_eq!(mb.root_conflict(), None);
        mb.push(Lane::Collective, waiting(1, call(5, Op::Reduce, 1)));
        assert_eq!(
            mb.root_conflict(),
            Some((1, call(5, Op::Reduce, 1), call(5, Op::Reduce, 0)))
        );
        // Its next wait replaces it; another op at the same position conflicts too.
        mb.push(Lane::Collective, waiting(1, call(5, Op::Gather, 0)));
        assert_eq!(
            mb.root_conflict(),
            Some((1, call(5, Op::Gather, 0), call(5, Op::Reduce, 0)))
        );
        // Positions beyond the kept calls are forgotten.
        for seq in 6..6 + CALLS_KEPT as u64 {
            mb.record_call(call(seq, Op::Broadcast, 0));
        }
        assert_eq!(mb.root_conflict(), None);
    }

    fn body(t: Take) -> u8 {
        match t {
            Take::Frame(f) => f.body[0],
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// Discarded tags of one position go, queued or late; other tags, positions and later
    /// operations keep theirs, and a discarded position leaves nothing astray.
    #[test]
    fn discarded_tags_are_dropped_now_and_on_arrival() {
        let pool = Pool::new(PoolConfig::default());
        let mb = Mailbox::new(3);
        mb.push(Lane::Collective, frame(&pool, 1, 7, 4, Op::Broadcast, 1));
        mb.push(Lane::Collective, frame(&pool, 2, 7, 5, Op::Broadcast, 2));
        mb.push(Lane::Collective, frame(&pool, 2, 7, 9, Op::Broadcast, 3));
        assert_eq!(mb.discard(0, 7, 4..6), 2);
        mb.push(Lane::Collective, frame(&pool, 1, 7, 5, Op::Broadcast, 4));
        mb.push(Lane::Collective, frame(&pool, 1, 8, 5, Op::Broadcast, 5));
        assert!(matches!(
            mb.take_any((0, 7), &[1, 2], 5, Op::Broadcast, 0),
            Take::Empty
        ));
        assert_eq!(body(mb.take_any((0, 7), &[2], 9, Op::Broadcast, 0)), 3);
        assert!(mb.stray(0, 7).is_none());
        assert_eq!(body(mb.take_any((0, 8), &[1], 5, Op::Broadcast, 0)), 5);
    }

    #[test]
    fn collective_lane_matches_sequence_sender_and_tag_in_order() {
        let pool = Pool::new(PoolConfig::default());
        let mb = Mailbox::new(3);
        mb.push(Lane::Collective, frame(&pool, 1, 7, 0, Op::Barrier, 1));
        mb.push(Lane::Collective, frame(&pool, 1, 8, 0, Op::Barrier, 2));
        mb.push(Lane::Collective, frame(&pool, 1, 7, 0, Op::Barrier, 3));
        mb.push(Lane::Collective, frame(&pool, 2, 7, 5, Op::Barrier, 4));
        assert!(matches!(
            mb.take_any((0, 7), &[2], 0, Op::Barrier, 0),
            Take::Empty
        ));
        assert_eq!(body(mb.take_any((0, 7), &[1], 0, Op::Barrier, 0)), 1);
        assert_eq!(body(mb.take_any((0, 7), &[1], 0, Op::Barrier, 0)), 3);
        assert!(matches!(
            mb.take_any((0, 7), &[1], 0, Op::Barrier, 0),
            Take::Empty
        ));
        assert_eq!(body(mb.take_any((0, 8), &[1], 0, Op::Barrier, 0)), 2);
        assert_eq!(body(mb.take_any((0, 7), &[1, 2], 5, Op::Barrier, 0)), 4);
        // Several tags at one position (a sender steps ahead), taken in another order than
        // they came: each tag keeps its own order.
        for (tag, byte) in [(3, 10), (1, 11), (2, 12), (3, 13), (1, 14)] {
            mb.push(Lane::Collective, frame(&pool, 2, 9, tag, Op::Barrier, byte));
        }
        for (tag, byte) in [(2, 12), (1, 11), (3, 10), (3, 13), (1, 14)] {
            assert_eq!(body(mb.take_any((0, 9), &[2], tag, Op::Barrier, 0)), byte);
        }
        assert!(matches!(
            mb.take_any((0, 9), &[2], 1, Op::Barrier, 0),
            Take::Empty
        ));
        let st = mb.lock();
        assert!(st.ops.is_empty(), "drained positions are removed");
    }

    #[test]
    fn groups_have_their_own_positions() {
        let pool = Pool::new(PoolConfig::default());
        let mb = Mailbox::new(3);
        let mut f = frame(&pool, 1, 4, 0, Op::Barrier, 1);
        f.hdr.group = 77;
        mb.push(Lane::Collective, f);
        mb.push(Lane::Collective, frame(&pool, 1, 4, 0, Op::Allreduce, 2));
        assert_eq!(body(mb.take_any((0, 4), &[1], 0, Op::Allreduce, 0)), 2);
        assert!(matches!(
            mb.take_any((0, 4), &[1], 0, Op::Barrier, 0),
            Take::Empty
        ));
        assert!(matches!(
            mb.take_any((78, 4), &[1], 0, Op::Barrier, 0),
            Take::Empty
        ));
        assert_eq!(body(mb.take_any((77, 4), &[1], 0, Op::Barrier, 0)), 1);
    }

    #[test]
    fn another_operation_at_the_same_position_is_a_mismatch() {
        let pool = Pool::new(PoolConfig::default());
        let mb = Mailbox::new(2);
        mb.push(Lane::Collective, frame(&pool, 1, 3, 9, Op::Allreduce, 1));
        match mb.take_any((0, 3), &[1], 0, Op::Broadcast, 0) {
            Take::Mismatch { peer, op, algo } => {
                assert_eq!((peer, op, algo), (1, Op::Allreduce, 0))
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
        assert!(matches!(
            mb.take_any((0, 4), &[1], 0, Op::Broadcast, 0),
            Take::Empty
        ));
    }

    #[test]
    fn queued_frames_come_before_gone_and_gone_needs_every_candidate() {
        let pool = Pool::new(PoolConfig::default());
        let mb = Mailbox::new(3);
        mb.push(Lane::Collective, frame(&pool, 1, 1, 0, Op::Barrier, 1));
        mb.mark_gone(1, "it failed: boom".into());
        mb.mark_gone(1, "second reason".into());
        assert_eq!(body(mb.take_any((0, 1), &[1], 0, Op::Barrier, 0)), 1);
        match mb.take_any((0, 1), &[1], 0, Op::Barrier, 0) {
            Take::Gone { peer, reason } => {
                assert_eq!((peer, reason.as_str()), (1, "it failed: boom"))
            }
            other => panic!("expected gone, got {other:?}"),
        }
        assert!(matches!(
            mb.take_any((0, 1), &[1, 2], 0, Op::Barrier, 0),
            Take::Empty
        ));
        mb.mark_gone(2, "it left".into());
        assert!(matches!(
            mb.take_any((0, 1), &[1, 2], 0, Op::Barrier, 0),
            Take::Gone { peer: 1, .. }
        ));
        assert_eq!(mb.gone(2).as_deref(), Some("it left"));
        assert_eq!(mb.gone(0), None);
        assert_eq!(mb.first_failure(), Some((1, "it failed: boom".to_string())));
    }

    #[test]
    fn a_peer_that_left_normally_is_not_the_first_failure() {
        let mb = Mailbox::new(3);
        mb.mark_gone(2, LEFT.to_string());
        assert_eq!(mb.first_failure(), None);
        mb.mark_gone(1, "connection closed".into());
        mb.mark_gone(0, "it failed: later".into());
        assert_eq!(
            mb.first_failure(),
            Some((1, "connection closed".to_string()))
        );
    }

    #[test]
    fn event_lane_is_a_fifo_per_sender_apart_from_collectives() {
        let pool = Pool::new(PoolConfig::default());
        let mb = Mailbox::new(3);
        mb.push(Lane::Event, frame(&pool, 2, 0, 0, Op::Handshake, 1));
        mb.push(Lane::Event, frame(&pool, 1, 0, 0, Op::Handshake, 2));
        mb.push(Lane::Event, frame(&pool, 2, 0, 0, Op::Handshake, 3));
        mb.push(Lane::Collective, frame(&pool, 2, 0, 0, Op::Handshake, 4));
        assert_eq!(body(mb.take_event(&[2], 0)), 1);
        assert_eq!(body(mb.take_event(&[1, 2], 0)), 2);
        assert_eq!(body(mb.take_event(&[1, 2], 0)), 3);
        assert!(matches!(mb.take_event(&[1, 2], 0), Take::Empty));
        assert_eq!(
            body(mb.take_any((0, 0), &[2], 0, Op::Handshake, 0)),
            4,
            "the collective lane is separate"
        );
        mb.mark_gone(1, "gone".into());
        assert!(matches!(mb.take_event(&[1], 0), Take::Gone { peer: 1, .. }));
    }

    /// Whether the waiter has been woken since `n` was enabled.
    fn woken(n: &mut std::pin::Pin<&mut Notified<'_>>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        std::future::Future::poll(n.as_mut(), &mut cx).is_ready()
    }

    #[test]
    fn a_frame_wakes_only_the_waiters_of_its_spot_and_gone_wakes_all_on_that_peer() {
        let pool = Pool::new(PoolConfig::default());
        let mb = Mailbox::new(3);
        let w_op = mb.watch_op(0, 5, &[1]);
        let w_other = mb.watch_op(0, 6, &[1]);
        let w_ev = mb.watch_events(&[1, 2]);
        {
            let mut n_op = std::pin::pin!(w_op.notified());
            let mut n_other = std::pin::pin!(w_other.notified());
            let mut n_ev = std::pin::pin!(w_ev.notified());
            n_op.as_mut().enable();
            n_other.as_mut().enable();
            n_ev.as_mut().enable();
            mb.push(Lane::Collective, frame(&pool, 1, 5, 3, Op::Barrier, 1));
            assert!(woken(&mut n_op));
            assert!(!woken(&mut n_other), "another position is not woken");
            assert!(!woken(&mut n_ev), "the event lane is not woken");
            mb.push(Lane::Event, frame(&pool, 2, 0, 0, Op::Handshake, 2));
            assert!(woken(&mut n_ev));
            assert!(!woken(&mut n_other));
            mb.mark_gone(1, "gone".into());
            assert!(woken(&mut n_other));
        }
        drop((w_op, w_other));
        assert_eq!(mb.lock().watchers.len(), 2, "dropped waiters unregister");
        drop(w_ev);
        assert!(mb.lock().watchers.is_empty());
    }

    fn event(pool: &Pool, src: u32, tag: u32, body: &[u8]) -> Frame {
        let mut hdr = Header::control(Kind::Event, src as usize, 1, body.len());
        hdr.tag = tag;
        Frame {
            hdr,
            body: pool.copy_of(body),
        }
    }

    /// Sends reserve credit up to the window (one event larger than it goes alone), credits
    /// free it, taking events owes credit (at a quarter of the window, or when the sender has
    /// nothing more queued), and a credit for more than was sent breaks the protocol.
    #[test]
    fn event_credit_is_reserved_owed_and_returned() {
        let pool = Pool::new(PoolConfig::default());
        let mb = Mailbox::new(3);
        mb.set_event_window(100);
        assert!(mb.reserve_credit(1, 60));
        assert!(mb.reserve_credit(1, 40));
        assert!(!mb.reserve_credit(1, 1), "the window to rank 1 is full");
        assert!(mb.reserve_credit(2, 500), "one large event goes alone");
        assert!(!mb.reserve_credit(2, 1));
        mb.push(
            Lane::Event,
            event(&pool, 1, EVENT_CREDIT, &60u64.to_le_bytes()),
        );
        assert!(mb.reserve_credit(1, 60));
        assert!(!mb.reserve_credit(1, 1));

        // Receiving from rank 2: 4 events of 10 bytes; credit is owed at 25 bytes, then when
        // rank 2 has nothing more queued.
        for _ in 0..4 {
            mb.push(Lane::Event, event(&pool, 2, EVENT_PLAIN, &[7; 10]));
        }
        mb.push(Lane::Event, event(&pool, 2, EVENT_CONTROL, &[1]));
        assert_eq!(
            mb.events_stats(),
            EventQueueStats {
                queued_bytes: 40,
                peak_sender_bytes: 40
            }
        );
        for _ in 0..2 {
            assert!(matches!(mb.take_event(&[2], 0), Take::Frame(_)));
        }
        assert!(!mb.credit_due());
        assert!(matches!(mb.take_event(&[2], 0), Take::Frame(_)));
        assert!(mb.credit_due());
        assert_eq!(mb.take_due(), vec![(2, 30)]);
        assert!(matches!(mb.take_event(&[2], 0), Take::Frame(_)));
        assert_eq!(
            mb.take_due(),
            vec![(2, 10)],
            "rank 2 has no event left queued"
        );
        assert!(
            matches!(mb.take_event(&[2], 0), Take::Frame(_)),
            "the control message"
        );
        assert!(!mb.credit_due(), "control messages are not counted");
        assert_eq!(mb.events_stats().queued_bytes, 0);
        // Events from oneself owe nothing.
        mb.push(Lane::Event, event(&pool, 0, EVENT_PLAIN, &[1; 10]));
        assert!(matches!(mb.take_event(&[0], 0), Take::Frame(_)));
        assert!(mb.take_due().is_empty());

        mb.push(
            Lane::Event,
            event(&pool, 1, EVENT_CREDIT, &1000u64.to_le_bytes()),
        );
        assert!(mb.violated(1));
        assert!(mb
            .gone(1)
            .unwrap()
            .contains("credit for 1000 event bytes, more than the 100"));
    }
}
