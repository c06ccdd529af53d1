//! The event lane's two ends: sending an `Event` frame (to a peer over the link, or to this
//! worker itself straight into its own mailbox) and taking events from the mailbox's per-sender
//! FIFOs, with the failure rules of the collectives (a failed peer fails the wait at once with
//! its reason, a peer silent for half the timeout fails it as silent).
//!
//! An event frame: kind `Event`, op 0, seq 0, `tag` one of `wire::EVENT_*`, `aux` the length
//! of the label (labeled events only), payload `[label bytes][application bytes]`.

use std::time::Duration;

use super::mailbox::{Lane, Take, LEFT};
use super::{heartbeat_interval, Endpoint, Frame, Transport};
use crate::error::{Error, OpContext, Result};
use crate::pool::{Buf, Pool};
use crate::wire::{Kind, Op, EVENT_CONTROL, EVENT_CREDIT, EVENT_LABELED, EVENT_PLAIN, MAX_LABEL};

/// An event received from a worker (possibly this one).
#[derive(Debug)]
pub struct Event {
    /// The sender's rank.
    pub src: usize,
    /// The label it was sent with ([`crate::Worker::send_labeled`]), if any.
    pub label: Option<String>,
    body: Buf,
    /// Where the application bytes start in `body` (after the label).
    at: usize,
    /// A message of the termination protocol, not an application event.
    pub(crate) control: bool,
}

impl Event {
    /// The application bytes.
    pub fn payload(&self) -> &[u8] {
        &self.body[self.at..]
    }

    /// The payload as a dense array of `dtype` (copied into a buffer of `pool`); a payload that
    /// is not a whole number of elements is a protocol error naming the sender.
    pub fn array(&self, pool: &Pool, dtype: crate::DType) -> Result<crate::Array> {
        crate::Array::from_buf(dtype, pool.copy_of(self.payload())).map_err(|e| {
            // The cause's own text, without a second "protocol error:" prefix.
            let cause = match e {
                Error::Protocol(m) => m,
                e => e.to_string(),
            };
            Error::Protocol(format!("event from rank {}: {cause}", self.src))
        })
    }

    #[cfg(test)]
    pub(crate) fn from_frame_for_tests(f: Frame) -> Result<Event> {
        Event::from_frame(f)
    }

    /// Decodes a frame of the event lane; bad bytes are a protocol error naming the sender.
    fn from_frame(f: Frame) -> Result<Event> {
        let src = f.hdr.src as usize;
        let bad = |what: String| Error::Protocol(format!("rank {src} sent an event {what}"));
        let (label, at, control) = match f.hdr.tag {
            EVENT_PLAIN | EVENT_CONTROL if f.hdr.aux != 0 => {
                return Err(bad(format!(
                    "(tag {}) announcing a {}-byte label (labels are on tag {EVENT_LABELED} only)",
                    f.hdr.tag, f.hdr.aux
                )))
            }
            EVENT_PLAIN => (None, 0, false),
            EVENT_CONTROL => (None, 0, true),
            EVENT_LABELED => {
                let n = f.hdr.aux as usize;
                let bytes = f
                    .body
                    .get(..n)
                    .filter(|_| f.hdr.aux <= MAX_LABEL)
                    .ok_or_else(|| {
                        bad(format!(
                            "announcing a {n}-byte label in a {}-byte payload",
                            f.body.len()
                        ))
                    })?;
                let label = std::str::from_utf8(bytes).map_err(|_| {
                    bad(format!(
                        "whose label {} is not UTF-8",
                        crate::util::quote(bytes)
                    ))
                })?;
                (Some(label.to_string()), n, false)
            }
            tag => return Err(bad(format!("with unknown tag {tag}"))),
        };
        Ok(Event {
            src,
            label,
            body: f.body,
            at,
            control,
        })
    }
}

impl Transport {
    /// Sets the event window this worker applies to its sends (bytes; 0: no limit).
    pub fn set_event_window(&self, window: u64) {
        self.mailbox.set_event_window(window);
    }

    /// The queued event bytes now and the most ever queued from one sender.
    pub fn events_stats(&self) -> super::mailbox::EventQueueStats {
        self.mailbox.events_stats()
    }

    /// An endpoint for the event lane (`what` names the call in errors, as a collective's label
    /// does), with the operation timeout as its silence limit.
    pub fn event_endpoint(&self, what: &str) -> Endpoint<'_> {
        let mut ep = self.endpoint(Op::Handshake, 0, 0, what);
        ep.ctx = OpContext {
            rank: self.rank,
            op: "events",
            seq: 0,
            label: what.to_string(),
            group: None,
        };
        ep
    }
}

fn check_label(label: &str) -> Result<()> {
    if label.len() > MAX_LABEL as usize {
        return Err(Error::config(format!(
            "event label {} is longer than the {MAX_LABEL} bytes a label may have",
            crate::util::quote(label.as_bytes())
        )));
    }
    Ok(())
}

impl Endpoint<'_> {
    /// Sends one event frame to `dst` (this worker itself included: then it goes straight into
    /// its own mailbox, in order with its other events to itself). `label` is empty for
    /// unlabeled events and control messages.
    pub async fn send_event(
        &self,
        dst: usize,
        tag: u32,
        label: &str,
        payload: &[u8],
        pool: &Pool,
    ) -> Result<()> {
        check_label(label)?;
        let aux = label.len() as u32;
        if dst != self.rank() {
            if tag != EVENT_CONTROL {
                self.credit_for(dst, (label.len() + payload.len()) as u64)
                    .await?;
            }
            let parts = [label.as_bytes(), payload];
            return self.send_frame(dst, Kind::Event, tag, aux, &parts).await;
        }
        let mut body = pool.get(label.len() + payload.len());
        body[..label.len()].copy_from_slice(label.as_bytes());
        body[label.len()..].copy_from_slice(payload);
        let hdr = self.header(Kind::Event, tag, aux, body.len() as u64);
        self.t.mailbox.push(Lane::Event, Frame { hdr, body });
        Ok(())
    }

    /// Sends one application event to another worker only if the event window allows it now
    /// (flow control, docs/events.md): `Ok(false)` when it does not fit; nothing is sent then.
    /// `waiting` is how long the caller has been waiting to send to `dst`: past the limits of
    /// a waiting send it fails as [`Endpoint::send_event`] would have.
    pub async fn try_send_event(
        &self,
        dst: usize,
        tag: u32,
        label: &str,
        payload: &[u8],
        waiting: Duration,
    ) -> Result<bool> {
        check_label(label)?;
        if !self
            .t
            .mailbox
            .reserve_credit(dst, (label.len() + payload.len()) as u64)
        {
            self.credit_stuck(dst, waiting)?;
            return Ok(false);
        }
        let parts = [label.as_bytes(), payload];
        self.send_frame(dst, Kind::Event, tag, label.len() as u32, &parts)
            .await?;
        Ok(true)
    }

    /// Why a send that has waited `waited` for credit from `dst` must fail now, if it must:
    /// `dst` is gone (naming it and why), silent for half the timeout, or has taken none of the
    /// events for the whole operation timeout.
    fn credit_stuck(&self, dst: usize, waited: Duration) -> Result<()> {
        let mb = &self.t.mailbox;
        if let Some(reason) = mb.gone(dst) {
            return Err(self.lost(dst, reason));
        }
        let quiet = mb.silence(dst);
        if quiet >= self.timeout() / 2 {
            return Err(self.silent(dst, quiet));
        }
        if waited >= self.timeout() {
            return Err(Error::EventCredit {
                ctx: self.ctx.clone(),
                peer: dst,
                secs: waited.as_secs_f64(),
                window: mb.event_window(),
            });
        }
        Ok(())
    }

    /// Waits until `len` more bytes of events to `dst` fit in the event window (flow control,
    /// docs/events.md): fails when `dst` is gone (naming it and why), silent for half the
    /// timeout, or has taken none of them for the whole operation timeout.
    async fn credit_for(&self, dst: usize, len: u64) -> Result<()> {
        let mb = &self.t.mailbox;
        let start = tokio::time::Instant::now();
        let deadline = start + self.timeout();
        let slice = heartbeat_interval(self.timeout());
        let watch = mb.watch_credit(dst);
        loop {
            let notified = watch.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if mb.reserve_credit(dst, len) {
                return Ok(());
            }
            let now = tokio::time::Instant::now();
            self.credit_stuck(dst, now - start)?;
            let _ = tokio::time::timeout_at(deadline.min(now + slice), notified).await;
        }
    }

    /// Sends the credits due for the events this worker took (flow control); a peer gone by
    /// then needs none.
    pub async fn flush_credits(&self) -> Result<()> {
        let mb = &self.t.mailbox;
        for (peer, bytes) in mb.take_due() {
            if mb.is_gone(peer) {
                continue;
            }
            let res = self
                .send_frame(peer, Kind::Event, EVENT_CREDIT, 0, &[&bytes.to_le_bytes()])
                .await;
            if res.is_err() && !mb.is_gone(peer) {
                return res;
            }
        }
        Ok(())
    }

    /// Whether credits are due ([`Endpoint::flush_credits`]).
    pub fn credit_due(&self) -> bool {
        self.t.mailbox.credit_due()
    }

    /// The senders in the order the next take tries them, from `start` round.
    fn order(&self, start: usize) -> Vec<usize> {
        let n = self.size();
        (0..n).map(|i| (start + i) % n).collect()
    }

    /// Takes the next queued event, trying the senders from `start` round (callers rotate it
    /// for fairness). With nothing queued, fails if a peer is gone for a failure, if one of
    /// `needed` is gone for any reason (it left before the caller's protocol was done), or, with
    /// `waiting`, if every peer has left (no event can come any more); else `None`.
    pub fn poll_event(
        &self,
        start: usize,
        needed: &[usize],
        waiting: bool,
    ) -> Result<Option<Event>> {
        let mb = &self.t.mailbox;
        if let Take::Frame(f) = mb.take_event(&self.order(start), self.rank()) {
            return Event::from_frame(f).map(Some);
        }
        let peers = (0..self.size()).filter(|&p| p != self.rank());
        let mut all_left = waiting && self.size() > 1;
        for p in peers {
            match mb.gone(p) {
                Some(why) if why != LEFT || needed.contains(&p) => {
                    return Err(match mb.first_failure() {
                        Some((q, first)) => self.lost(q, first),
                        None => self.lost(p, why),
                    })
                }
                Some(_) => {}
                None => all_left = false,
            }
        }
        if all_left {
            let first = (0..self.size()).find(|&p| p != self.rank()).unwrap_or(0);
            return Err(self.lost(first, format!("{LEFT}, as did every other worker")));
        }
        Ok(None)
    }

    /// Waits until an event is queued (see [`Endpoint::poll_event`]) or `wait` has passed
    /// (`None`). Fails as [`Endpoint::poll_event`] does, and when a peer has sent nothing at
    /// all (no heartbeat either) for half the operation timeout.
    pub async fn wait_event(
        &self,
        start: usize,
        needed: &[usize],
        wait: Duration,
    ) -> Result<Option<Event>> {
        let deadline = tokio::time::Instant::now() + wait.min(crate::config::MAX_DURATION);
        let slice = heartbeat_interval(self.timeout());
        let mb = &self.t.mailbox;
        let watch = mb.watch_events(&self.order(0));
        loop {
            let notified = watch.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(ev) = self.poll_event(start, needed, true)? {
                self.flush_credits().await?;
                return Ok(Some(ev));
            }
            for p in (0..self.size()).filter(|&p| p != self.rank() && !mb.is_gone(p)) {
                let quiet = mb.silence(p);
                if quiet >= self.timeout() / 2 {
                    return Err(self.silent(p, quiet));
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let _ = tokio::time::timeout_at(deadline.min(now + slice), notified).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::mailbox::Mailbox;
    use crate::transport::{Io, Link};
    use crate::wire::Header;
    use std::sync::Arc;

    /// A link that sends nowhere: its peers never send anything (not even heartbeats).
    struct Mute;

    impl Link for Mute {
        fn send<'a>(
            &'a self,
            _dst: usize,
            _hdr: Header,
            _parts: &'a [&'a [u8]],
        ) -> Io<'a, std::io::Result<()>> {
            Box::pin(std::future::ready(Ok(())))
        }
        fn close<'a>(&'a self, _last: Header, _body: &'a [u8]) -> Io<'a, ()> {
            Box::pin(std::future::ready(()))
        }
    }

    /// A peer that sends nothing at all fails a wait as silent after half the timeout (not at
    /// the caller's longer wait); events to itself arrive in order; a failed peer fails at once.
    #[test]
    fn waits_fail_on_silent_or_failed_peers_and_self_events_keep_order() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let pool = Pool::default();
            let mb = Arc::new(Mailbox::new(3));
            let t = Transport::new(
                0,
                3,
                1,
                Duration::from_millis(400),
                mb.clone(),
                Box::new(Mute),
            );
            let ep = t.event_endpoint("wait_event");
            for i in 0..3u8 {
                ep.send_event(0, EVENT_PLAIN, "", &[i], &pool)
                    .await
                    .unwrap();
            }
            ep.send_event(0, EVENT_LABELED, "k", &[9], &pool)
                .await
                .unwrap();
            for i in 0..3u8 {
                let ev = ep.poll_event(0, &[], true).unwrap().unwrap();
                assert_eq!((ev.src, ev.payload()), (0, &[i][..]));
            }
            let ev = ep.poll_event(0, &[], true).unwrap().unwrap();
            assert_eq!((ev.label.as_deref(), ev.payload()), (Some("k"), &[9][..]));
            let t0 = std::time::Instant::now();
            let e = ep
                .wait_event(0, &[], Duration::from_secs(30))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), "silent", "{e}");
            assert!(e
                .to_string()
                .contains("events #0 'wait_event': rank 1 has been silent"));
            assert!(t0.elapsed() < Duration::from_secs(5));

            mb.seen(1);
            mb.seen(2);
            mb.mark_gone(2, "it failed: rank 2: out of memory".into());
            let e = ep.poll_event(0, &[], false).unwrap_err().to_string();
            assert!(
                e.ends_with("rank 2 is gone: it failed: rank 2: out of memory"),
                "{e}"
            );
        });
    }

    fn frame(tag: u32, aux: u32, body: &[u8]) -> Frame {
        let mut hdr = Header::control(Kind::Event, 3, 1, body.len());
        (hdr.tag, hdr.aux) = (tag, aux);
        Frame {
            hdr,
            body: Pool::default().copy_of(body),
        }
    }

    #[test]
    fn events_split_their_label_and_reject_bad_bytes_without_panicking() {
        let ev = Event::from_frame(frame(EVENT_LABELED, 3, b"keypayload")).unwrap();
        assert_eq!((ev.src, ev.label.as_deref()), (3, Some("key")));
        assert_eq!((ev.payload(), ev.control), (&b"payload"[..], false));
        let ev = Event::from_frame(frame(EVENT_PLAIN, 0, b"abc")).unwrap();
        assert_eq!((ev.label.as_deref(), ev.payload()), (None, &b"abc"[..]));
        assert!(
            Event::from_frame(frame(EVENT_CONTROL, 0, b""))
                .unwrap()
                .control
        );
        let e = Event::from_frame(frame(EVENT_LABELED, 2, b"\xff\xfepayload")).unwrap_err();
        assert_eq!(e.kind(), "protocol");
        assert!(
            e.to_string().contains("rank 3 sent an event whose label"),
            "{e}"
        );
        let e = Event::from_frame(frame(EVENT_LABELED, 9, b"abc")).unwrap_err();
        assert!(
            e.to_string().contains("9-byte label in a 3-byte payload"),
            "{e}"
        );
        let e = Event::from_frame(frame(7, 0, b"abc")).unwrap_err();
        assert!(e.to_string().contains("unknown tag 7"), "{e}");
        let pool = Pool::default();
        let odd = Event::from_frame(frame(EVENT_PLAIN, 0, b"abc")).unwrap();
        let e = odd.array(&pool, crate::DType::F32).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("protocol error: event from rank 3: "),
            "{e}"
        );
        assert_eq!(e.to_string().matches("protocol error").count(), 1, "{e}");
    }

    /// Random tags, label lengths and bytes (valid UTF-8 or not) either pass the reader's header
    /// check and decode, or fail cleanly; nothing panics and a decoded label is the bytes sent.
    #[test]
    fn random_event_frames_decode_or_fail_cleanly() {
        let mut rng = crate::util::Rng::new(13);
        let limits = super::super::socket::Limits::default();
        for _ in 0..20_000 {
            let len = rng.below(40);
            let body: Vec<u8> = (0..len)
                .map(|_| match rng.below(3) {
                    0 => rng.below(256) as u8,
                    _ => b'a' + rng.below(26) as u8,
                })
                .collect();
            let tag = rng.below(4) as u32;
            let aux = match rng.below(3) {
                0 => rng.below(50) as u32,
                1 => rng.next_u64() as u32,
                _ => 0,
            };
            let f = frame(tag, aux, &body);
            let mut hb = [0u8; crate::wire::COMPACT_MAX];
            let n = f.hdr.encode_compact(&mut hb);
            let header_ok = super::super::reader::check_header(&hb[..n], 3, 1, &limits);
            match Event::from_frame(f) {
                Ok(ev) => {
                    assert!(header_ok.is_ok(), "{header_ok:?}");
                    let n = ev.label.as_ref().map_or(0, |l| l.len());
                    assert_eq!(
                        ev.label.as_deref().map(str::as_bytes),
                        (tag == 1).then(|| &body[..n])
                    );
                    assert_eq!(ev.payload(), &body[n..]);
                }
                Err(e) => assert_eq!(e.kind(), "protocol", "{e}"),
            }
        }
    }
}
