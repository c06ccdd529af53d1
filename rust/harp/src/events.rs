//! Events: messages between workers outside the collectives, and distributed termination
//! detection (docs/events.md).
//!
//! * Sending: [`Worker::send_event`] (one worker, this one included),
//!   [`Worker::send_event_to_all`], [`Worker::send_labeled`] (the label's hash picks
//!   `copies` consecutive workers, [`label_receivers`]). Events from one sender arrive in the
//!   order it sent them (to each receiver); they never mix with collective frames.
//! * Receiving: [`Worker::try_event`] (non-blocking), [`Worker::wait_event`] (with a timeout),
//!   or [`Worker::run_until_quiet`]: handle events until the whole job is quiet (every worker
//!   idle, no event in flight), detected by Mattern's four-counter method in waves led by rank
//!   0; every worker returns the same [`Quiet`] totals.
//!
//! Failures follow the collectives' rules: a peer that failed fails every wait at once with its
//! reason, a silent peer within half the operation timeout, and a worker whose event call
//! failed is poisoned and tells its peers why.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::transport::Endpoint;
use crate::util::fnv1a64;
use crate::wire::{self, EVENT_CONTROL, EVENT_LABELED, EVENT_PLAIN};
use crate::worker::Worker;

pub use crate::transport::{Event, EventQueueStats};

/// The arguments [`label_receivers`] takes from outside the engine (Java's `labelReceivers`):
/// `workers` 1 ..= the most workers a job may have, `copies` 1 ..= `workers`, as a send needs.
pub fn check_label_receivers(copies: usize, workers: usize) -> Result<()> {
    let max = crate::wire::MAX_WORKERS;
    if workers == 0 || workers > max {
        return Err(Error::config(format!(
            "label receivers: workers must be 1..={max}, not {workers}"
        )));
    }
    check_copies(copies, workers).map_err(|why| Error::config(format!("label receivers: {why}")))
}

/// The one rule on `copies` of a labeled event: 1 ..= the number of workers.
fn check_copies(copies: usize, workers: usize) -> std::result::Result<(), String> {
    if copies == 0 || copies > workers {
        return Err(format!(
            "copies must be 1..={workers} (the number of workers), not {copies}"
        ));
    }
    Ok(())
}

/// The receivers of an event labeled `label` sent as `copies` copies among `workers`: worker
/// `h = fnv1a64(label) % workers` (64-bit FNV-1a of the label's UTF-8 bytes) and the next
/// `copies - 1` ranks after it, wrapping around. Stable across runs, hosts and languages.
pub fn label_receivers(label: &str, copies: usize, workers: usize) -> Vec<usize> {
    if workers == 0 {
        return Vec::new();
    }
    let first = (fnv1a64(label.as_bytes()) % workers as u64) as usize;
    (0..copies.min(workers))
        .map(|i| (first + i) % workers)
        .collect()
}

/// What [`Worker::run_until_quiet_with`] calls.
pub trait Handler {
    /// Handles one application event; may send events.
    fn event(&mut self, ev: Event) -> Result<()>;

    /// Called when no event is queued, before this worker counts as idle: the place to send
    /// what the handled events produced, batched (e.g. one event per destination). May send
    /// events; the worker is idle once this returns and nothing new is queued.
    fn idle(&mut self) -> Result<()> {
        Ok(())
    }

    /// Whether the handler has work of its own left that no event will bring (e.g. input
    /// still to read in `idle`, a part at a time): while it has, the loop keeps calling `idle`,
    /// taking the queued events in between, and the worker does not count as idle. The loop
    /// calls `idle` again only once this worker's held sends (docs/events.md) have gone, so a
    /// reader in `idle` runs at most one part ahead of the network.
    fn busy(&mut self) -> Result<bool> {
        Ok(false)
    }
}

/// A closure as a [`Handler`] without an idle step.
struct OnEvent<F>(F);

impl<F: FnMut(Event) -> Result<()>> Handler for OnEvent<F> {
    fn event(&mut self, ev: Event) -> Result<()> {
        (self.0)(ev)
    }
}

/// What [`Worker::run_until_quiet`] returns: `events` and `waves` are the same on every worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    /// Application events sent by all workers during this phase (= handled by all workers).
    pub events: u64,
    /// Events this worker handled during this phase.
    pub handled: u64,
    /// Detection waves rank 0 ran during this phase.
    pub waves: u64,
}

pub(crate) use crate::transport::event_state::{Ctrl, Held, Inner, State};

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn counts(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::SeqCst),
            self.received.load(Ordering::SeqCst),
        )
    }

    fn start(&self, size: usize) -> usize {
        self.cursor.fetch_add(1, Ordering::Relaxed) % size.max(1)
    }
}

/// What the next take found.
enum Item {
    App(Event),
    Ctrl(usize, Ctrl),
}

fn item(ev: Event) -> Result<Item> {
    if !ev.control {
        return Ok(Item::App(ev));
    }
    let msg = wire::decode(ev.payload()).map_err(|e| {
        Error::Protocol(format!(
            "rank {} sent a malformed termination message: {e}",
            ev.src
        ))
    })?;
    Ok(Item::Ctrl(ev.src, msg))
}

/// How often `run_until_quiet` tries to send held events while it has nothing else to do.
const HELD_POLL: Duration = Duration::from_millis(1);

/// Shortest and longest pause rank 0 makes before a new wave after a wave that saw events
/// still in flight (doubling in between); after a wave that saw none, the next starts at once.
const BACKOFF_MIN: Duration = Duration::from_micros(500);
const BACKOFF_MAX: Duration = Duration::from_millis(20);

/// Rank 0's side of the detection: the current wave and the previous wave's received total.
struct Coordinator {
    wave: u64,
    reports: Vec<Option<(u64, u64)>>,
    outstanding: bool,
    started: Instant,
    prev_received: Option<u64>,
    next_at: Instant,
    backoff: Duration,
}

enum Step {
    /// Send `Probe(wave)` to every other worker.
    Probe(u64),
    /// Terminated: `End` with this total.
    End(u64),
    Wait,
}

impl Coordinator {
    fn new(size: usize, now: Instant) -> Coordinator {
        Coordinator {
            wave: 0,
            reports: vec![None; size],
            outstanding: false,
            started: now,
            prev_received: None,
            next_at: now,
            backoff: Duration::ZERO,
        }
    }

    fn report(&mut self, src: usize, wave: u64, sent: u64, received: u64) -> Result<()> {
        if !self.outstanding || wave != self.wave || self.reports[src].is_some() {
            return Err(Error::Protocol(format!(
                "rank {src} reported for detection wave {wave} (the current wave is {}, \
                 {}; its report {})",
                self.wave,
                if self.outstanding { "running" } else { "done" },
                if self.reports[src].is_some() {
                    "was already in"
                } else {
                    "was not in"
                }
            )));
        }
        self.reports[src] = Some((sent, received));
        Ok(())
    }

    /// Called while rank 0 is idle with nothing queued; `own` are its counters now. Ends a
    /// complete wave (terminated when the previous wave's received total equals this wave's
    /// sent total), then starts the next wave when its time has come.
    fn step(&mut self, own: (u64, u64), now: Instant) -> Step {
        if self.outstanding && self.reports.iter().all(Option::is_some) {
            self.outstanding = false;
            let (sent, received) = self
                .reports
                .iter()
                .flatten()
                .fold((0u64, 0u64), |(s, r), &(a, b)| (s + a, r + b));
            if self.prev_received == Some(sent) {
                return Step::End(sent);
            }
            self.prev_received = Some(received);
            self.backoff = if sent == received {
                Duration::ZERO
            } else {
                (self.backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX)
            };
            self.next_at = now + self.backoff;
        }
        if self.outstanding || now < self.next_at {
            return Step::Wait;
        }
        self.wave += 1;
        self.reports.iter_mut().for_each(|r| *r = None);
        self.reports[0] = Some(own);
        self.outstanding = true;
        self.started = now;
        Step::Probe(self.wave)
    }

    /// How long rank 0 may wait for the next event; `Err(rank)`: the first worker whose report
    /// has not come within `limit` of the wave's start.
    fn wait(&self, now: Instant, limit: Duration) -> std::result::Result<Duration, usize> {
        if !self.outstanding {
            return Ok(self.next_at.saturating_duration_since(now));
        }
        let end = self.started + limit;
        if now >= end {
            return Err(self.reports.iter().position(Option::is_none).unwrap_or(0));
        }
        Ok(end - now)
    }
}

impl Worker {
    /// Sends an application event; the send is counted before it leaves (the sent total may
    /// never lag behind a receiver's count).
    fn send_app(
        &self,
        dst: usize,
        tag: u32,
        label: &str,
        payload: &[u8],
        what: &str,
    ) -> Result<()> {
        self.check_usable()?;
        if dst >= self.size() {
            return Err(Error::config(format!(
                "rank {}: {what}: no worker {dst} (the job has {})",
                self.rank(),
                self.size()
            )));
        }
        self.events.sent.fetch_add(1, Ordering::SeqCst);
        let ep = self.transport().event_endpoint(what);
        let res = if dst != self.rank() && self.events.quiet.load(Ordering::SeqCst) {
            self.send_or_hold(&ep, dst, tag, label, payload)
        } else {
            self.block_on(ep.send_event(dst, tag, label, payload, self.pool()))
        };
        self.failed_events(res)
    }

    /// A send from a `run_until_quiet` handler: it goes now if the receiver's event window has
    /// room and nothing is held for that receiver, else it is held (in order) and sent by the
    /// loop as credit comes. A handler never waits for credit: while it waited it would take
    /// no events, so two handlers sending more than a window to each other would wait for each
    /// other until the timeout.
    fn send_or_hold(
        &self,
        ep: &Endpoint<'_>,
        dst: usize,
        tag: u32,
        label: &str,
        payload: &[u8],
    ) -> Result<()> {
        let free = self.events.lock().held[dst].0.is_empty();
        if free && self.block_on(ep.try_send_event(dst, tag, label, payload, Duration::ZERO))? {
            return Ok(());
        }
        let mut i = self.events.lock();
        let (queue, since) = &mut i.held[dst];
        queue.push_back(Held {
            tag,
            label: label.to_string(),
            payload: payload.to_vec(),
        });
        since.get_or_insert_with(Instant::now);
        self.events.holding.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Sends the held events that fit their receivers' windows now; whether any is still held.
    /// A receiver that has taken none of them for the operation timeout (or is gone or silent)
    /// fails the call, as a waiting send would.
    fn release_held(&self, ep: &Endpoint<'_>) -> Result<bool> {
        if self.events.holding.load(Ordering::SeqCst) == 0 {
            return Ok(false);
        }
        let mut any = false;
        for dst in 0..self.size() {
            loop {
                let (next, waiting) = {
                    let mut i = self.events.lock();
                    let Some(h) = i.held[dst].0.pop_front() else {
                        break;
                    };
                    let since = i.held[dst].1;
                    (h, since.map_or(Duration::ZERO, |t| t.elapsed()))
                };
                let sent = self.block_on(ep.try_send_event(
                    dst,
                    next.tag,
                    &next.label,
                    &next.payload,
                    waiting,
                ))?;
                let mut i = self.events.lock();
                let (queue, since) = &mut i.held[dst];
                if !sent {
                    queue.push_front(next);
                    any = true;
                    break;
                }
                // Progress: the next one waits from now.
                *since = (!queue.is_empty()).then(Instant::now);
                self.events.holding.fetch_sub(1, Ordering::SeqCst);
            }
        }
        Ok(any)
    }

    /// Sends `payload` as an event to worker `dst` (this worker included). Events from one
    /// sender to one receiver are received in the order they were sent.
    pub fn send_event(&self, dst: usize, payload: &[u8]) -> Result<()> {
        self.send_app(dst, EVENT_PLAIN, "", payload, "send_event")
    }

    /// Sends `payload` as an event to every worker, this one included.
    pub fn send_event_to_all(&self, payload: &[u8]) -> Result<()> {
        (0..self.size())
            .try_for_each(|dst| self.send_app(dst, EVENT_PLAIN, "", payload, "send_event_to_all"))
    }

    /// Sends `payload` labeled `label` (at most `wire::MAX_LABEL` bytes) to `copies` workers
    /// chosen by the label's hash ([`label_receivers`]: the same label always reaches the same
    /// workers); returns them. `copies` must be 1 ..= the number of workers.
    pub fn send_labeled(&self, label: &str, copies: usize, payload: &[u8]) -> Result<Vec<usize>> {
        check_copies(copies, self.size()).map_err(|why| {
            Error::config(format!(
                "rank {}: send_labeled {}: {why}",
                self.rank(),
                crate::util::quote(label.as_bytes())
            ))
        })?;
        let to = label_receivers(label, copies, self.size());
        for &dst in &to {
            self.send_app(dst, EVENT_LABELED, label, payload, "send_labeled")?;
        }
        Ok(to)
    }

    /// The next event queued for this worker, without waiting (`None`: nothing queued). Fails
    /// when nothing is queued and a peer has failed (with its reason).
    pub fn try_event(&self) -> Result<Option<Event>> {
        self.next_event(None)
    }

    /// The next event, waiting at most `timeout` (`None`: nothing came). Fails as
    /// [`Worker::try_event`] does, when every peer has left the job (nothing can come), and
    /// when a peer has been silent (no data, no heartbeat) for half the operation timeout.
    pub fn wait_event(&self, timeout: Duration) -> Result<Option<Event>> {
        // A wait beyond the longest timeout any option takes (365 days) is that long: an
        // instant `now + Duration::MAX` cannot be formed.
        self.next_event(Some(
            Instant::now() + timeout.min(crate::config::MAX_DURATION),
        ))
    }

    fn next_event(&self, deadline: Option<Instant>) -> Result<Option<Event>> {
        self.check_usable()?;
        let what = if deadline.is_some() {
            "wait_event"
        } else {
            "try_event"
        };
        let ep = self.transport().event_endpoint(what);
        let res = (|| loop {
            let start = self.events.start(self.size());
            let got = match deadline {
                None => ep.poll_event(start, &[], false)?,
                Some(d) => {
                    let wait = d.saturating_duration_since(Instant::now());
                    self.block_on(ep.wait_event(start, &[], wait))?
                }
            };
            self.flush_credits(&ep)?;
            match got.map(item).transpose()? {
                None => return Ok(None),
                Some(Item::App(ev)) => {
                    self.events.received.fetch_add(1, Ordering::SeqCst);
                    return Ok(Some(ev));
                }
                // A termination message for a `run_until_quiet` still to come on this worker.
                Some(Item::Ctrl(src, msg)) => self.events.lock().stash.push_back((src, msg)),
            }
        })();
        self.failed_events(res)
    }

    /// Sends the credits due for the events taken (flow control; docs/events.md).
    fn flush_credits(&self, ep: &Endpoint<'_>) -> Result<()> {
        if ep.credit_due() {
            self.block_on(ep.flush_credits())?;
        }
        Ok(())
    }

    /// Event bytes queued at this worker now, and the most ever queued from one sender (flow
    /// control bounds it by the senders' event window, `Config::event_window`).
    pub fn events_stats(&self) -> EventQueueStats {
        self.transport().events_stats()
    }

    /// On an error: poisons this worker and tells every peer why (the message starts with this
    /// worker's rank). A configuration error (a bad argument of one call, e.g. a destination
    /// that is not a worker) leaves the worker usable.
    fn failed_events<T>(&self, res: Result<T>) -> Result<T> {
        match res {
            Err(e @ Error::Config(_)) => Err(e),
            res => self.failed_phase(res),
        }
    }

    /// [`Worker::failed_events`] for an error that ends a phase: whatever its kind (a handler's
    /// bad argument too), the peers cannot finish the phase without this worker, so they are
    /// told at once instead of waiting out the timeout.
    fn failed_phase<T>(&self, res: Result<T>) -> Result<T> {
        if let Err(e) = &res {
            if !matches!(e, Error::Poisoned { .. }) {
                let msg = e.to_string();
                let own = format!("rank {}:", self.rank());
                if msg.starts_with(&own) {
                    self.fail(&msg)
                } else {
                    self.fail(&format!("{own} {msg}"))
                }
            }
        }
        res
    }

    /// Handles events with `handle` until the whole job is quiet: every worker is inside its
    /// `run_until_quiet` and idle (not running its handler) and no event is in flight or
    /// queued. Returns on every worker, with the same [`Quiet::events`] and [`Quiet::waves`].
    ///
    /// Every worker must call it (a *phase*); events sent before the call are part of the
    /// phase. The handler may send events, not call collectives (one is refused with a
    /// configuration error). Between two phases, call a
    /// collective (e.g. a barrier) before sending the next phase's events. An error from the
    /// handler, or a failed or silent peer, fails the call on this worker and then on every
    /// worker, with the cause; so does a worker whose handler has not returned within the
    /// operation timeout (rank 0 waits that long for its report).
    pub fn run_until_quiet(&self, handle: impl FnMut(Event) -> Result<()>) -> Result<Quiet> {
        self.run_until_quiet_with(&mut OnEvent(handle))
    }

    /// [`Worker::run_until_quiet`] with a [`Handler`], whose `idle` step runs whenever the
    /// worker has no event queued (before it counts as idle).
    pub fn run_until_quiet_with(&self, handler: &mut dyn Handler) -> Result<Quiet> {
        self.check_usable()?;
        self.events
            .lock()
            .held
            .resize_with(self.size(), Default::default);
        self.events.quiet.store(true, Ordering::SeqCst);
        let res = self.quiet_loop(handler);
        self.events.quiet.store(false, Ordering::SeqCst);
        if res.is_err() {
            // Held events die with the phase (the worker is failing).
            self.events.lock().held.clear();
            self.events.holding.store(0, Ordering::SeqCst);
        }
        self.failed_phase(res)
    }

    fn quiet_loop(&self, handler: &mut dyn Handler) -> Result<Quiet> {
        let (rank, size) = (self.rank(), self.size());
        let st = &self.events;
        let phase = {
            let mut i = st.lock();
            i.phase += 1;
            i.phase
        };
        let ep = self.transport().event_endpoint("run_until_quiet");
        // Peers whose leaving, even normally, is an error before the end: rank 0 needs every
        // report; the others need rank 0's END (every other worker may finish first).
        let needed: Vec<usize> = if rank == 0 {
            (1..size).collect()
        } else {
            vec![0]
        };
        let limit = ep.timeout();
        let mut coord = (rank == 0).then(|| Coordinator::new(size, Instant::now()));
        let mut probe: Option<u64> = None;
        let mut handled = 0u64;
        let mut heard_from_0 = Instant::now();
        let mut next: Option<Event> = None;
        // Whether the handler's idle step has run since the last event.
        let mut idle_done = false;
        loop {
            // 0. Held events whose receivers have room now.
            let holding = self.release_held(&ep)?;
            // 1. Everything queued: control messages taken earlier, then the mailbox.
            let stashed = st.lock().stash.pop_front();
            let taken = match (stashed, next.take()) {
                (Some((src, msg)), ev) => {
                    next = ev;
                    Some(Item::Ctrl(src, msg))
                }
                (None, Some(ev)) => Some(item(ev)?),
                (None, None) => {
                    let got = ep.poll_event(st.start(size), &needed, true)?;
                    self.flush_credits(&ep)?;
                    got.map(item).transpose()?
                }
            };
            match taken {
                Some(Item::App(ev)) => {
                    // Rank 0 busy with its own work (`Handler::busy`) runs no waves, but its
                    // events show it is at work.
                    if ev.src == 0 {
                        heard_from_0 = Instant::now();
                    }
                    st.received.fetch_add(1, Ordering::SeqCst);
                    handled += 1;
                    idle_done = false;
                    handler.event(ev)?;
                    continue;
                }
                Some(Item::Ctrl(src, msg)) => {
                    if src == 0 {
                        heard_from_0 = Instant::now();
                    }
                    match (msg, coord.as_mut()) {
                        (Ctrl::Probe { phase: p, wave }, None) if src == 0 && p == phase => {
                            probe = Some(wave)
                        }
                        (
                            Ctrl::Report {
                                phase: p,
                                wave,
                                sent,
                                received,
                            },
                            Some(c),
                        ) if p == phase => c.report(src, wave, sent, received)?,
                        (
                            Ctrl::End {
                                phase: p,
                                waves,
                                total,
                            },
                            None,
                        ) if src == 0 && p == phase => {
                            return Ok(self.finish(total, handled, waves))
                        }
                        (msg, _) => {
                            return Err(Error::Protocol(format!(
                                "rank {src} sent the termination message {msg:?} to rank \
                                 {rank}, which is in phase {phase}"
                            )))
                        }
                    }
                    continue;
                }
                None => {}
            }
            // 2. Nothing queued: the handler's idle step, then this worker is idle. Answer a
            //    probe with the counters now.
            if !idle_done {
                idle_done = true;
                handler.idle()?;
                continue;
            }
            let busy = handler.busy()?;
            if busy && !holding {
                handler.idle()?;
                continue;
            }
            // Busy (and waiting for its held sends to go): not idle, no report, no wave.
            if let Some(wave) = probe.take_if(|_| !busy) {
                let (sent, received) = st.counts();
                let msg = Ctrl::Report {
                    phase,
                    wave,
                    sent,
                    received,
                };
                self.send_ctrl(&ep, 0, &msg)?;
            }
            let wait = match coord.as_mut() {
                Some(_) if busy => HELD_POLL,
                Some(c) => match c.step(st.counts(), Instant::now()) {
                    Step::End(total) => {
                        let waves = c.wave;
                        for dst in 1..size {
                            self.send_ctrl(
                                &ep,
                                dst,
                                &Ctrl::End {
                                    phase,
                                    waves,
                                    total,
                                },
                            )?;
                        }
                        return Ok(self.finish(total, handled, waves));
                    }
                    Step::Probe(wave) => {
                        for dst in 1..size {
                            self.send_ctrl(&ep, dst, &Ctrl::Probe { phase, wave })?;
                        }
                        continue;
                    }
                    Step::Wait => c
                        .wait(Instant::now(), limit)
                        .map_err(|late| Error::Timeout {
                            ctx: ep.ctx.clone(),
                            peer: late,
                            secs: limit.as_secs_f64(),
                            hint: String::new(),
                        })?,
                },
                None => {
                    let left = (2 * limit).saturating_sub(heard_from_0.elapsed());
                    if left.is_zero() {
                        return Err(Error::Timeout {
                            ctx: ep.ctx.clone(),
                            peer: 0,
                            secs: (2 * limit).as_secs_f64(),
                            hint: String::new(),
                        });
                    }
                    left
                }
            };
            // Credit for held events comes without an event: look again soon.
            let wait = if holding { wait.min(HELD_POLL) } else { wait };
            let start = st.start(size);
            next = self.block_on(ep.wait_event(start, &needed, wait))?;
        }
    }

    fn send_ctrl(&self, ep: &Endpoint<'_>, dst: usize, msg: &Ctrl) -> Result<()> {
        let bytes = wire::encode(msg);
        self.block_on(ep.send_event(dst, EVENT_CONTROL, "", &bytes, self.pool()))
    }

    fn finish(&self, total: u64, handled: u64, waves: u64) -> Quiet {
        let mut i = self.events.lock();
        let events = total.saturating_sub(i.total_at_end);
        i.total_at_end = total;
        Quiet {
            events,
            handled,
            waves,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_pick_consecutive_workers_from_their_hash() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        let h = (0xaf63_dc4c_8601_ec8cu64 % 5) as usize;
        assert_eq!(label_receivers("a", 1, 5), vec![h]);
        assert_eq!(
            label_receivers("a", 3, 5),
            vec![h, (h + 1) % 5, (h + 2) % 5]
        );
        assert_eq!(label_receivers("a", 9, 2).len(), 2);
        assert!(label_receivers("a", 1, 0).is_empty());
        let mut hit = [0; 4];
        for i in 0..400 {
            hit[label_receivers(&format!("key{i}"), 1, 4)[0]] += 1;
        }
        assert!(hit.iter().all(|&n| n > 60), "{hit:?}");
    }

    /// The coordinator ends only when the previous wave's received total equals this wave's
    /// sent total, and waits (with a doubling pause) after a wave that saw events in flight.
    #[test]
    fn the_coordinator_needs_two_agreeing_waves() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(2, t0);
        let Step::Probe(1) = c.step((3, 1), t0) else {
            panic!("the first wave starts at once")
        };
        assert!(matches!(c.step((3, 1), t0), Step::Wait));
        assert!(c.report(1, 2, 0, 0).is_err(), "wrong wave");
        c.report(1, 1, 1, 2).unwrap();
        assert!(c.report(1, 1, 1, 2).is_err(), "twice");
        // Wave 1: sent 4, received 3: not quiet; the next wave waits for the pause.
        assert!(matches!(c.step((4, 3), t0), Step::Wait));
        assert_eq!(c.wait(t0, Duration::from_secs(1)), Ok(BACKOFF_MIN));
        let t1 = t0 + BACKOFF_MIN;
        let Step::Probe(2) = c.step((4, 4), t1) else {
            panic!("wave 2")
        };
        c.report(1, 2, 1, 1).unwrap();
        // Wave 2: sent 5 ≠ the 3 received in wave 1: not yet, next wave at once (5 = 5).
        let Step::Probe(3) = c.step((4, 4), t1) else {
            panic!("wave 3 starts at once")
        };
        c.report(1, 3, 1, 1).unwrap();
        assert!(matches!(c.step((4, 4), t1), Step::End(5)));
        let mut late = Coordinator::new(3, t0);
        let _ = late.step((0, 0), t0);
        late.report(2, 1, 0, 0).unwrap();
        assert_eq!(
            late.wait(t0 + Duration::from_secs(2), Duration::from_secs(1)),
            Err(1)
        );
    }

    /// Termination messages round-trip; random bytes decode to some message or fail as a
    /// protocol error naming the sender, never a panic.
    #[test]
    fn control_messages_round_trip_and_random_bytes_fail_cleanly() {
        let msgs = [
            Ctrl::Probe { phase: 1, wave: 7 },
            Ctrl::Report {
                phase: 2,
                wave: 3,
                sent: u64::MAX,
                received: 0,
            },
            Ctrl::End {
                phase: 9,
                waves: 2,
                total: 1 << 40,
            },
        ];
        for m in msgs {
            let b = wire::encode(&m);
            assert!(b.len() < 40, "{m:?}: {} bytes", b.len());
            assert_eq!(wire::decode::<Ctrl>(&b).unwrap(), m);
        }
        let mut rng = crate::util::Rng::new(5);
        let pool = crate::pool::Pool::default();
        for _ in 0..20_000 {
            let bytes: Vec<u8> = (0..rng.below(30)).map(|_| rng.below(256) as u8).collect();
            let mut hdr = crate::wire::Header::control(crate::wire::Kind::Event, 2, 1, bytes.len());
            hdr.tag = EVENT_CONTROL;
            let f = crate::transport::Frame {
                hdr,
                body: pool.copy_of(&bytes),
            };
            let ev = Event::from_frame_for_tests(f).unwrap();
            if let Err(e) = item(ev) {
                assert_eq!(e.kind(), "protocol");
                assert!(e
                    .to_string()
                    .contains("rank 2 sent a malformed termination message"));
            }
        }
    }
}
