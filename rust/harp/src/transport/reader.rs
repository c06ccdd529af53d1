//! The TCP receiving side and liveness: per connection one non-blocking parser ([`Inbound`])
//! that files frames into the mailbox (and marks the peer gone when the connection ends), read
//! by the connection's reader task when the socket becomes readable and by a receive waiting
//! for that peer ([`Inbound::pull`]); and the heartbeats sent on idle connections. With frame
//! MACs on, the parser verifies every frame's tag before acting on it; a frame that fails, like
//! a header that does not belong on the connection, is a protocol violation by the peer.

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::tcp::OwnedReadHalf;

use super::integrity::{Direction, FrameMac, TAG_LEN};
use super::mailbox::{lane_of, Frame, Mailbox};
use super::mesh::Writer;
use super::socket::Limits;
use crate::pool::{Buf, Pool};
use crate::wire::{
    Header, Kind, COMPACT_MAX, EVENT_CONTROL, EVENT_CREDIT, EVENT_LABELED, EVENT_PLAIN, MAX_LABEL,
};

/// Sends a heartbeat on every idle connection (a busy one is proof of life already).
pub(super) async fn heartbeats(
    writers: Arc<Vec<Option<Writer>>>,
    rank: usize,
    job: u64,
    every: Duration,
) {
    let h = Header::control(Kind::Heartbeat, rank, job, 0);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for w in writers.iter().flatten() {
            if let Ok(mut g) = w.try_lock() {
                if let Some(wr) = g.as_mut() {
                    let _ = tokio::time::timeout(every, async {
                        wr.write_frame(&h, &[]).await?;
                        wr.flush().await
                    })
                    .await;
                }
            }
        }
    }
}

/// Why a connection's reading stopped.
enum End {
    /// The connection ended or the peer left or failed (the peer is gone).
    Gone(String),
    /// The peer broke the protocol (the peer is gone, and waiters fail with a protocol error).
    Violation(String),
}

/// The receiving side of one connection. Its reader task reads when the socket becomes
/// readable, and a receive waiting for this peer may read it itself ([`Inbound::pull`]):
/// whoever holds `parse` reads, so frames are filed in the order they were sent, and a frame
/// that is already in the socket is taken without a turn of the runtime.
pub(super) struct Inbound {
    peer: usize,
    job: u64,
    rd: OwnedReadHalf,
    parse: Mutex<Parse>,
    mb: Arc<Mailbox>,
    pool: Pool,
    limits: Limits,
}

/// Bytes read from the socket and where the stream is in its current frame.
struct Parse {
    buf: Box<[u8]>,
    /// `buf[start..end]` is read and not yet parsed.
    start: usize,
    end: usize,
    at: At,
    /// Verifies the peer's frame tags when frame MACs are on.
    open: Option<Direction>,
    /// Frames filed so far (how [`Inbound::pull`] sees whether the stream moved).
    filed: u64,
}

/// Where the stream is.
enum At {
    /// At a frame boundary, or inside a header.
    Head,
    /// Inside the payload of `hdr`: the first `got` bytes are in `body`.
    Body {
        hdr: Header,
        body: Body,
        got: usize,
        mac: Option<Box<FrameMac>>,
    },
    /// After the payload, before the frame's integrity tag.
    Tag {
        hdr: Header,
        body: Buf,
        mac: Box<FrameMac>,
    },
    /// The connection ended; the mailbox knows why.
    Ended,
}

/// A payload while it arrives. One of at most `Limits::eager_alloc` bytes gets its buffer
/// when its header comes; a larger one is received in pooled pieces of [`PIECE`] bytes, each
/// taken when the bytes reach it, so the memory held follows the bytes received whatever
/// length the header announced (a peer announcing 4 GiB and sending 520 MiB costs 520 MiB and
/// a piece), and is copied into one buffer when its last byte has come.
enum Body {
    Whole(Buf),
    Pieces(Vec<Buf>),
}

/// Bytes of one piece of a large payload.
const PIECE: usize = 4 << 20;

impl Body {
    /// The body of a `len`-byte payload, before its bytes come.
    fn new(len: usize, pool: &Pool, limits: &Limits) -> Body {
        if len <= limits.eager_alloc.max(1 << 20) {
            Body::Whole(pool.get(len))
        } else {
            Body::Pieces(Vec::new())
        }
    }

    /// Where the next bytes of a `len`-byte payload of which `got` came go: at most
    /// `len - got` bytes (fewer at the end of a piece), mapping a new piece when needed.
    fn room(&mut self, got: usize, len: usize, pool: &Pool) -> &mut [u8] {
        match self {
            Body::Whole(b) => &mut b[got..len],
            Body::Pieces(ps) => {
                if got == ps.len() * PIECE {
                    ps.push(pool.get(PIECE));
                }
                let off = got % PIECE;
                let end = PIECE.min(off + (len - got));
                let last = ps.last_mut().expect("a piece was just taken");
                &mut last[off..end]
            }
        }
    }

    /// The whole `len`-byte payload in one buffer.
    fn finish(self, len: usize, pool: &Pool) -> Buf {
        match self {
            Body::Whole(b) => b,
            Body::Pieces(ps) => {
                let mut whole = pool.get(len);
                for (i, p) in ps.into_iter().enumerate() {
                    let at = i * PIECE;
                    let n = PIECE.min(len - at);
                    whole[at..at + n].copy_from_slice(&p[..n]);
                }
                whole
            }
        }
    }
}

/// What one [`Parse::pump`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pumped {
    /// Read everything the socket had (or someone else is reading it now).
    Idle,
    /// Stopped after [`PUMP_BUDGET`] bytes; there may be more.
    More,
    /// The connection ended (now or before) and the peer is marked gone.
    Ended,
}

/// Read buffer of a connection (larger payloads are read straight into their buffer).
const READ_BUF: usize = 256 * 1024;

/// Bytes one pump reads at most before it lets others run.
const PUMP_BUDGET: usize = 8 << 20;

/// What a pump needs besides the parse state: who the peer is and where frames go.
struct Sink<'a> {
    peer: usize,
    job: u64,
    mb: &'a Mailbox,
    pool: &'a Pool,
    limits: &'a Limits,
}

impl Inbound {
    pub(super) fn new(
        peer: usize,
        job: u64,
        rd: OwnedReadHalf,
        open: Option<Direction>,
        mb: Arc<Mailbox>,
        pool: Pool,
        limits: Limits,
    ) -> Inbound {
        Inbound {
            peer,
            job,
            rd,
            parse: Mutex::new(Parse::new(open)),
            mb,
            pool,
            limits,
        }
    }

    fn sink(&self) -> Sink<'_> {
        Sink {
            peer: self.peer,
            job: self.job,
            mb: &self.mb,
            pool: &self.pool,
            limits: &self.limits,
        }
    }

    /// Reads and files what the socket holds now, without waiting, unless someone else is
    /// reading it. Whether the stream moved: a frame may have been filed or the peer marked
    /// gone.
    pub(super) fn pull(&self) -> bool {
        let Ok(mut p) = self.parse.try_lock() else {
            return false;
        };
        if matches!(p.at, At::Ended) {
            return false;
        }
        let fd = self.rd.as_ref().as_raw_fd();
        let before = p.filed;
        let r = p.pump(&self.sink(), |b| recv_now(fd, b));
        r == Pumped::Ended || p.filed != before
    }
}

/// Reads what the socket `fd` holds into `buf`, without waiting (the runtime's readiness is
/// not consulted: a receive pulling its frame reads before the runtime has polled for it).
fn recv_now(fd: std::os::fd::RawFd, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes and `fd` is an open socket
        // (its `OwnedReadHalf` lives as long as the `Inbound` that holds both).
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads frames from one connection as they come until it ends, filing them in the mailbox;
/// at the end the peer is marked gone with the reason.
pub(super) async fn read_loop(inb: Arc<Inbound>) {
    let fd = inb.rd.as_ref().as_raw_fd();
    let sock: &tokio::net::TcpStream = inb.rd.as_ref();
    loop {
        let r = {
            let mut p = inb.parse.lock().unwrap_or_else(|e| e.into_inner());
            // Through the runtime's readiness, so that a socket read dry waits for the next.
            p.pump(&inb.sink(), |b| {
                sock.try_io(Interest::READABLE, || recv_now(fd, b))
            })
        };
        match r {
            Pumped::Ended => return,
            Pumped::More => tokio::task::yield_now().await,
            Pumped::Idle => {
                if let Err(e) = inb.rd.readable().await {
                    let mut p = inb.parse.lock().unwrap_or_else(|e| e.into_inner());
                    p.end(&inb.sink(), End::Gone(lost(&e, "")));
                    return;
                }
            }
        }
    }
}

impl Parse {
    fn new(open: Option<Direction>) -> Parse {
        Parse {
            buf: vec![0u8; READ_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            at: At::Head,
            open,
            filed: 0,
        }
    }

    /// Reads with `read` (non-blocking: `WouldBlock` when the socket is dry) and parses, filing
    /// every whole frame, until the socket is dry, the budget is spent or the stream ends.
    fn pump(
        &mut self,
        sink: &Sink<'_>,
        mut read: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
    ) -> Pumped {
        let mut budget = PUMP_BUDGET;
        loop {
            if matches!(self.at, At::Ended) {
                return Pumped::Ended;
            }
            match self.step(sink, &mut read, &mut budget) {
                Ok(true) => {}
                Ok(false) => return Pumped::Idle,
                Err(end) => {
                    self.end(sink, end);
                    return Pumped::Ended;
                }
            }
            if budget == 0 {
                return Pumped::More;
            }
        }
    }

    /// Ends the stream: marks the peer gone (or in violation) with the reason, once.
    fn end(&mut self, sink: &Sink<'_>, end: End) {
        if matches!(self.at, At::Ended) {
            return;
        }
        self.at = At::Ended;
        self.buf = Box::new([]);
        (self.start, self.end) = (0, 0);
        match end {
            End::Gone(reason) => {
                tracing::debug!("reader for rank {} stops: {reason}", sink.peer);
                sink.mb.mark_gone(sink.peer, reason);
            }
            End::Violation(reason) => {
                tracing::warn!("rank {} {reason}; its connection is closed", sink.peer);
                sink.mb.mark_violation(sink.peer, reason);
            }
        }
    }

    /// Reads more bytes into the buffer (moving what is left to its front first). `Ok(false)`:
    /// the socket is dry.
    fn fill(
        &mut self,
        sink: &Sink<'_>,
        read: &mut impl FnMut(&mut [u8]) -> std::io::Result<usize>,
        budget: &mut usize,
    ) -> Result<bool, End> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let mid = !matches!(self.at, At::Head) || self.end > 0;
        let r = read(&mut self.buf[self.end..]);
        let Some(n) = took(r, mid, sink, budget)? else {
            return Ok(false);
        };
        self.end += n;
        Ok(true)
    }

    /// One step of the frame in progress: a header, a piece of payload, a tag. `Ok(false)`:
    /// it needs bytes the socket does not have yet.
    fn step(
        &mut self,
        sink: &Sink<'_>,
        read: &mut impl FnMut(&mut [u8]) -> std::io::Result<usize>,
        budget: &mut usize,
    ) -> Result<bool, End> {
        match &mut self.at {
            At::Head => self.head(sink, read, budget),
            At::Body { hdr, got, .. } if *got as u64 == hdr.len => {
                let At::Body { hdr, body, mac, .. } = std::mem::replace(&mut self.at, At::Head)
                else {
                    unreachable!("matched above")
                };
                let body = body.finish(hdr.len as usize, sink.pool);
                match mac {
                    Some(mac) => self.at = At::Tag { hdr, body, mac },
                    None => self.file(sink, hdr, body)?,
                }
                Ok(true)
            }
            At::Body {
                hdr,
                body,
                got,
                mac,
            } => {
                let room = body.room(*got, hdr.len as usize, sink.pool);
                let n = if self.start < self.end {
                    let n = room.len().min(self.end - self.start);
                    room[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
                    self.start += n;
                    n
                } else if room.len() >= self.buf.len() {
                    // A large payload goes straight into its buffer.
                    match took(read(room), true, sink, budget)? {
                        Some(n) => n,
                        None => return Ok(false),
                    }
                } else {
                    return self.fill(sink, read, budget);
                };
                if let Some(m) = mac.as_mut() {
                    m.update(&room[..n]);
                }
                *got += n;
                Ok(true)
            }
            At::Tag { .. } if self.end - self.start < TAG_LEN => self.fill(sink, read, budget),
            At::Tag { .. } => {
                let At::Tag { hdr, body, mac } = std::mem::replace(&mut self.at, At::Head) else {
                    unreachable!("matched above")
                };
                let seq = mac.seq;
                let tag = &self.buf[self.start..self.start + TAG_LEN];
                if !mac.verify(tag) {
                    return Err(End::Violation(format!(
                        "sent a {:?} frame whose integrity tag does not verify (frame {seq} on its \
                         connection: altered, replayed, reordered or forged by a process without \
                         the job secret)",
                        hdr.kind
                    )));
                }
                self.start += TAG_LEN;
                self.file(sink, hdr, body)?;
                Ok(true)
            }
            At::Ended => Ok(false),
        }
    }

    /// At a frame boundary: reads the next header (checked against the limits) and starts the
    /// frame's payload.
    fn head(
        &mut self,
        sink: &Sink<'_>,
        read: &mut impl FnMut(&mut [u8]) -> std::io::Result<usize>,
        budget: &mut usize,
    ) -> Result<bool, End> {
        let have = self.end - self.start;
        let need = if have == 0 {
            1
        } else {
            1 + usize::from(self.buf[self.start])
        };
        if need > COMPACT_MAX {
            return Err(End::Violation(format!(
                "sent a malformed frame: a header of {need} bytes (at most {COMPACT_MAX})"
            )));
        }
        if have < need {
            return self.fill(sink, read, budget);
        }
        let hb = &self.buf[self.start..self.start + need];
        let hdr = check_header(hb, sink.peer, sink.job, sink.limits).map_err(End::Violation)?;
        let mac = self.open.as_mut().map(|d| Box::new(d.begin(hb)));
        self.start += need;
        let len = usize::try_from(hdr.len).map_err(|_| {
            End::Gone(format!(
                "connection lost{MID}: frame of {} bytes does not fit in memory",
                hdr.len
            ))
        })?;
        let body = Body::new(len, sink.pool, sink.limits);
        self.at = At::Body {
            hdr,
            body,
            got: 0,
            mac,
        };
        Ok(true)
    }

    /// Files a whole frame (a heartbeat only counted as a sign of life; `Bye` and `Abort` end
    /// the stream).
    fn file(&mut self, sink: &Sink<'_>, hdr: Header, body: Buf) -> Result<(), End> {
        self.filed += 1;
        match hdr.kind {
            Kind::Heartbeat => Ok(()),
            Kind::Bye => Err(End::Gone("it left the job (finished its work)".to_string())),
            Kind::Abort => Err(End::Gone(format!("it failed: {}", abort_text(&body)))),
            _ => {
                sink.mb.push(lane_of(&hdr), Frame { hdr, body });
                Ok(())
            }
        }
    }
}

/// Where a read error in the middle of a frame happened, for [`lost`].
const MID: &str = " in the middle of a frame";

/// What a read of the socket came to: `Some(n)` bytes (counted against the pump's budget, and
/// a sign of life from the peer), `None` when the socket is dry, or the end of the stream
/// (`mid`: inside a frame).
fn took(
    r: std::io::Result<usize>,
    mid: bool,
    sink: &Sink<'_>,
    budget: &mut usize,
) -> Result<Option<usize>, End> {
    match r {
        Ok(0) => Err(End::Gone(eof(mid))),
        Ok(n) => {
            *budget = budget.saturating_sub(n);
            sink.mb.seen(sink.peer);
            Ok(Some(n))
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(End::Gone(lost(&e, if mid { MID } else { "" }))),
    }
}

/// The reason the connection's end is given when the stream stops (`mid`: inside a frame).
fn eof(mid: bool) -> String {
    let e = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
    lost(&e, if mid { MID } else { "" })
}

/// The reason a read error ends the connection (`at`: where in the stream it happened).
fn lost(e: &std::io::Error, at: &str) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof && at.is_empty() {
        "connection closed (the process exited or was killed)".to_string()
    } else {
        format!("connection lost{at}: {e}")
    }
}

/// Longest abort message kept from a peer (the rest is cut, marked with its length).
const ABORT_TEXT_MAX: usize = 4096;

/// A peer's abort message, cut to [`ABORT_TEXT_MAX`] bytes.
fn abort_text(body: &[u8]) -> String {
    if body.len() <= ABORT_TEXT_MAX {
        return String::from_utf8_lossy(body).into_owned();
    }
    format!(
        "{}… ({} bytes)",
        String::from_utf8_lossy(&body[..ABORT_TEXT_MAX]),
        body.len()
    )
}

/// Decodes a compact frame header (with its length byte) received on the connection of rank
/// `peer` in job `job`, and checks it belongs on this connection: a payload within
/// `limits.max_frame`, none on a heartbeat, and a valid event header. The error is the reason
/// the connection ends.
pub(crate) fn check_header(
    hb: &[u8],
    peer: usize,
    job: u64,
    limits: &Limits,
) -> std::result::Result<Header, String> {
    let h = Header::decode_compact(hb, peer as u32, job)
        .map_err(|e| format!("sent a malformed frame: {e}"))?;
    if h.len > limits.max_frame {
        return Err(format!(
            "announced a frame of {} bytes, more than the largest accepted ({} bytes)",
            h.len, limits.max_frame
        ));
    }
    if matches!(h.kind, Kind::Heartbeat | Kind::Waiting) && h.len != 0 {
        return Err(format!(
            "sent a {:?} frame with a {}-byte payload",
            h.kind, h.len
        ));
    }
    if h.kind == Kind::Event {
        check_event_header(&h)?;
    }
    Ok(h)
}

/// Checks an `Event` frame's header: a known tag, and a label (only on labeled events) of at
/// most [`MAX_LABEL`] bytes inside the payload. The label's UTF-8 is checked when it is taken.
pub(crate) fn check_event_header(h: &Header) -> std::result::Result<(), String> {
    let label_ok = match h.tag {
        EVENT_PLAIN | EVENT_CONTROL => h.aux == 0,
        EVENT_CREDIT if h.aux != 0 || h.len != 8 => {
            return Err(format!(
                "sent a credit frame with aux {} and a {}-byte payload (0 and 8 expected)",
                h.aux, h.len
            ))
        }
        EVENT_CREDIT => true,
        EVENT_LABELED => h.aux <= MAX_LABEL && u64::from(h.aux) <= h.len,
        tag => return Err(format!("sent an event frame with unknown tag {tag}")),
    };
    if !label_ok {
        return Err(format!(
            "sent an event frame (tag {}) announcing a {}-byte label in a {}-byte payload (labels \
             are at most {MAX_LABEL} bytes, on labeled events only)",
            h.tag, h.aux, h.len
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::mailbox::Take;
    use crate::wire::Op;

    fn limits(max_frame: u64, eager: usize) -> Limits {
        Limits {
            max_frame,
            eager_alloc: eager,
            ..Limits::default()
        }
    }

    /// A header encoded compactly, with its length byte.
    fn compact(h: &Header) -> Vec<u8> {
        let mut b = [0u8; COMPACT_MAX];
        let n = h.encode_compact(&mut b);
        b[..n].to_vec()
    }

    #[test]
    fn headers_announcing_too_much_or_malformed_end_the_connection() {
        let l = limits(1 << 20, 1 << 20);
        let h = |kind, len| {
            let mut h = Header::control(kind, 2, 9, 0);
            h.len = len;
            compact(&h)
        };
        let ok = check_header(&h(Kind::Data, 1 << 20), 2, 9, &l).unwrap();
        // src and job come from the connection, not the bytes.
        assert_eq!((ok.src, ok.job, ok.len), (2, 9, 1 << 20));
        let e = check_header(&h(Kind::Data, 1 << 40), 2, 9, &l).unwrap_err();
        assert!(
            e.contains("1099511627776 bytes") && e.contains("1048576"),
            "{e}"
        );
        let e = check_header(&h(Kind::Heartbeat, 5), 2, 9, &l).unwrap_err();
        assert!(e.contains("Heartbeat"), "{e}");
        let e = check_header(&h(Kind::Waiting, 1), 2, 9, &l).unwrap_err();
        assert!(e.contains("Waiting") && e.contains("1-byte payload"), "{e}");
        assert!(check_header(&h(Kind::Waiting, 0), 2, 9, &l).is_ok());
        let mut bad = h(Kind::Data, 0);
        bad[1] = 77;
        let e = check_header(&bad, 2, 9, &l).unwrap_err();
        assert!(
            e.contains("malformed frame") && e.contains("unknown frame kind 77"),
            "{e}"
        );
        let mut bad = h(Kind::Data, 0);
        bad[0] += 1;
        bad.push(0);
        let e = check_header(&bad, 2, 9, &l).unwrap_err();
        assert!(e.contains("1 bytes after the last field"), "{e}");
    }

    #[test]
    fn event_headers_need_a_known_tag_and_a_bounded_label_inside_the_payload() {
        let l = limits(1 << 20, 1 << 20);
        let ev = |tag, aux, len| {
            let mut h = Header::control(Kind::Event, 2, 9, 0);
            (h.tag, h.aux, h.len) = (tag, aux, len);
            check_header(&compact(&h), 2, 9, &l)
        };
        assert!(ev(EVENT_PLAIN, 0, 100).is_ok());
        assert!(ev(EVENT_CONTROL, 0, 7).is_ok());
        assert!(ev(EVENT_LABELED, 5, 5).is_ok());
        assert!(ev(EVENT_LABELED, MAX_LABEL, 1 << 16).is_ok());
        let e = ev(EVENT_LABELED, 6, 5).unwrap_err();
        assert!(e.contains("6-byte label in a 5-byte payload"), "{e}");
        assert!(ev(EVENT_LABELED, MAX_LABEL + 1, 1 << 16).is_err());
        assert!(ev(EVENT_PLAIN, 1, 5).is_err());
        assert!(ev(EVENT_CONTROL, 3, 5).is_err());
        assert!(ev(EVENT_CREDIT, 0, 8).is_ok());
        let e = ev(EVENT_CREDIT, 0, 5).unwrap_err();
        assert!(
            e.contains("credit frame with aux 0 and a 5-byte payload"),
            "{e}"
        );
        assert!(ev(EVENT_CREDIT, 1, 8).is_err());
        assert!(ev(4, 0, 5).unwrap_err().contains("unknown tag 4"));
    }

    /// A peer's byte stream handed out in pieces: `cuts` says how many bytes each read may
    /// return, and a read past the end of a piece is `WouldBlock` until the next pump. After the
    /// last byte, reads return 0 (the peer closed) when `close`, else `WouldBlock`.
    struct Wire {
        bytes: Vec<u8>,
        at: usize,
        limit: usize,
        close: bool,
    }

    impl Wire {
        /// `bytes`, none of them readable yet.
        fn new(bytes: Vec<u8>, close: bool) -> Wire {
            Wire {
                bytes,
                at: 0,
                limit: 0,
                close,
            }
        }

        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            if self.at == self.bytes.len() && self.close {
                return Ok(0);
            }
            let n = b.len().min(self.limit.min(self.bytes.len()) - self.at);
            if n == 0 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            b[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn sink<'a>(mb: &'a Mailbox, pool: &'a Pool, limits: &'a Limits) -> Sink<'a> {
        Sink {
            peer: 1,
            job: 9,
            mb,
            pool,
            limits,
        }
    }

    /// The sealing and opening ends of one direction of a connection when `mac`, else none.
    fn directions(mac: bool) -> (Option<Direction>, Option<Direction>) {
        if !mac {
            return (None, None);
        }
        let key =
            crate::transport::integrity::SessionKey::derive(b"secret", 9, 1, 0, &[1; 16], &[2; 16]);
        (Some(key.direction(true)), Some(key.direction(true)))
    }

    /// Appends one frame (compact header, payload, tag when `seal`) to `out`.
    fn put(out: &mut Vec<u8>, h: &Header, body: &[u8], seal: Option<&mut Direction>) {
        let hb = compact(h);
        out.extend_from_slice(&hb);
        out.extend_from_slice(body);
        if let Some(d) = seal {
            out.extend_from_slice(&d.tag(&hb, &[body]));
        }
    }

    /// Data frames of many sizes (empty, a few bytes, larger than the read buffer, so read
    /// straight into their buffers) and heartbeats between them, cut into reads of every
    /// size and with the socket running dry between reads, are filed whole and in order,
    /// with and without frame MACs; the peer's close after the last frame marks it gone.
    #[test]
    fn frames_cut_anywhere_are_filed_whole_and_in_order() {
        for mac in [false, true] {
            for cut in [1usize, 7, 1000, 64 * 1024 + 3, usize::MAX] {
                let (mut seal, open) = directions(mac);
                let sizes = [
                    0usize,
                    1,
                    5,
                    1000,
                    READ_BUF + 17,
                    3,
                    2 * READ_BUF,
                    0,
                    40_000,
                ];
                let mut bytes = Vec::new();
                let mut sent = Vec::new();
                for (i, &n) in sizes.iter().enumerate() {
                    let body: Vec<u8> = (0..n).map(|j| (i * 31 + j % 253) as u8).collect();
                    let mut h = Header::control(Kind::Data, 1, 9, n);
                    (h.op, h.seq, h.tag) = (Op::Allgather, 5, i as u32);
                    put(&mut bytes, &h, &body, seal.as_mut());
                    put(
                        &mut bytes,
                        &Header::control(Kind::Heartbeat, 1, 9, 0),
                        &[],
                        seal.as_mut(),
                    );
                    sent.push(body);
                }
                let (mb, pool, l) = (Mailbox::new(2), Pool::default(), limits(1 << 30, 1 << 20));
                let mut p = Parse::new(open);
                let mut w = Wire::new(bytes, false);
                let mut pumps = 0;
                while w.at < w.bytes.len() {
                    w.limit = w.at.saturating_add(cut);
                    assert_ne!(p.pump(&sink(&mb, &pool, &l), |b| w.read(b)), Pumped::Ended);
                    pumps += 1;
                    assert!(pumps < 10_000_000, "no progress");
                }
                for (i, body) in sent.iter().enumerate() {
                    let got = match mb.take_any((0, 5), &[1], i as u32, Op::Allgather, 0) {
                        Take::Frame(f) => f,
                        _ => panic!("frame {i} missing (mac {mac}, cut {cut})"),
                    };
                    assert!(
                        got.body[..] == body[..],
                        "frame {i} differs (mac {mac}, cut {cut})"
                    );
                    assert_eq!(got.hdr.len as usize, body.len());
                }
                assert!(mb.gone(1).is_none());
                w.close = true;
                assert_eq!(p.pump(&sink(&mb, &pool, &l), |b| w.read(b)), Pumped::Ended);
                let why = mb.gone(1).expect("the peer's close marks it gone");
                assert!(why.contains("connection closed"), "{why}");
                assert_eq!(p.filed as usize, 2 * sizes.len());
            }
        }
    }

    /// A frame whose tag does not verify ends the connection as a violation before it is
    /// filed; a header longer than any compact header does too.
    #[test]
    fn a_bad_tag_or_header_is_a_violation() {
        let key =
            crate::transport::integrity::SessionKey::derive(b"secret", 9, 1, 0, &[1; 16], &[2; 16]);
        let mut seal = key.direction(true);
        let mut bytes = Vec::new();
        let h = Header::control(Kind::Data, 1, 9, 4);
        put(&mut bytes, &h, b"abcd", Some(&mut seal));
        let n = bytes.len();
        bytes[n - 20] ^= 1; // a payload byte
        let (mb, pool, l) = (Mailbox::new(2), Pool::default(), limits(1 << 30, 1 << 20));
        let mut p = Parse::new(Some(key.direction(true)));
        let mut w = Wire::new(bytes, false);
        w.limit = usize::MAX;
        assert_eq!(p.pump(&sink(&mb, &pool, &l), |b| w.read(b)), Pumped::Ended);
        let why = mb.gone(1).unwrap();
        assert!(why.contains("integrity tag does not verify"), "{why}");
        assert_eq!(p.filed, 0);

        let (mb, mut p) = (Mailbox::new(2), Parse::new(None));
        let mut w = Wire::new(vec![200, 1, 2, 3], false);
        w.limit = usize::MAX;
        assert_eq!(p.pump(&sink(&mb, &pool, &l), |b| w.read(b)), Pumped::Ended);
        let why = mb.gone(1).unwrap();
        assert!(why.contains("a header of 201 bytes"), "{why}");
    }

    /// A frame announcing 1 GiB of which 21 MiB arrive holds pooled memory for the bytes
    /// received and at most one piece more at every step, and fails with the connection,
    /// naming the middle of a frame; whole frames larger than a piece arrive intact, with and
    /// without frame MACs. (The buffer used to double as bytes came, each smaller step kept by
    /// the pool: 63 MiB held for 21 MiB received, 2 GB for 520 MiB.)
    #[test]
    fn memory_follows_the_bytes_received() {
        let pool = Pool::default();
        let l = limits(1 << 40, 1 << 20);
        let sent: Vec<u8> = (0..21u32 << 20).map(|i| (i % 251) as u8).collect();
        let head = compact(&Header::control(Kind::Data, 1, 9, 1 << 30));
        let mut bytes = head.clone();
        bytes.extend_from_slice(&sent);
        let mb = Mailbox::new(2);
        let mut p = Parse::new(None);
        let mut w = Wire::new(bytes, true);
        let mut worst = 0usize;
        loop {
            // 256 KiB per pump, the socket dry in between.
            w.limit = w.at + (256 << 10);
            let r = p.pump(&sink(&mb, &pool, &l), |b| w.read(b));
            let s = pool.stats();
            let held = (s.bytes_in_use + s.bytes_held) as usize;
            let got = w.at.saturating_sub(head.len());
            assert!(
                held <= got + PIECE,
                "{held} bytes held for {got} received ({s:?})"
            );
            worst = worst.max(held - got.min(held));
            if r == Pumped::Ended {
                break;
            }
            assert_eq!(r, Pumped::Idle);
        }
        assert!(worst <= PIECE, "{worst}");
        let why = mb.gone(1).unwrap();
        assert!(why.contains("in the middle of a frame"), "{why}");
        assert_eq!(pool.stats().bytes_in_use, 0);

        for mac in [false, true] {
            let (mut seal, open) = directions(mac);
            let mut bytes = Vec::new();
            let sizes = [sent.len(), PIECE, PIECE + 1, 3 * PIECE - 1, 5];
            for (i, &n) in sizes.iter().enumerate() {
                let mut h = Header::control(Kind::Data, 1, 9, n);
                (h.op, h.seq, h.tag) = (Op::Allgather, 1, i as u32);
                put(&mut bytes, &h, &sent[sent.len() - n..], seal.as_mut());
            }
            let mb = Mailbox::new(2);
            let mut p = Parse::new(open);
            let mut w = Wire::new(bytes, false);
            for cut in [usize::MAX, 1 << 20, 77_777].iter().cycle() {
                if w.at == w.bytes.len() {
                    break;
                }
                w.limit = w.at.saturating_add(*cut);
                assert_ne!(p.pump(&sink(&mb, &pool, &l), |b| w.read(b)), Pumped::Ended);
            }
            for (i, &n) in sizes.iter().enumerate() {
                match mb.take_any((0, 1), &[1], i as u32, Op::Allgather, 0) {
                    Take::Frame(f) => assert!(f.body[..] == sent[sent.len() - n..], "frame {i}"),
                    _ => panic!("the frame of {n} bytes was not filed (mac {mac})"),
                }
            }
        }
    }

    /// Peak resident memory of a process whose reader gets a frame announcing 4 GiB and then
    /// 520 MiB of it: `HARP_RSS_PROBE=1` runs the reader in this test binary, in a process of
    /// its own, which prints its `VmHWM`. The bytes are made as they are read, so the
    /// reader's memory is all the probe adds to the process's start.
    #[test]
    fn a_huge_announced_frame_costs_the_bytes_sent() {
        const SENT: usize = 520 << 20;
        if std::env::var_os("HARP_RSS_PROBE").is_some() {
            let pool = Pool::default();
            let l = limits(4 << 30, 64 << 20);
            let head = compact(&Header::control(Kind::Data, 1, 9, 4 << 30));
            let mb = Mailbox::new(2);
            let mut p = Parse::new(None);
            let mut at = 0usize;
            let mut read = |b: &mut [u8]| -> std::io::Result<usize> {
                if at < head.len() {
                    let n = b.len().min(head.len() - at);
                    b[..n].copy_from_slice(&head[at..at + n]);
                    at += n;
                    return Ok(n);
                }
                let n = b.len().min(SENT + head.len() - at);
                b[..n].fill(7);
                at += n;
                Ok(n)
            };
            while p.pump(&sink(&mb, &pool, &l), &mut read) != Pumped::Ended {}
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let hwm = status.lines().find(|l| l.starts_with("VmHWM")).unwrap();
            println!("probe {hwm}");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let o = std::process::Command::new(exe)
            .args([
                "--exact",
                "transport::reader::tests::a_huge_announced_frame_costs_the_bytes_sent",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HARP_RSS_PROBE", "1")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let kb: usize = out
            .lines()
            .find_map(|l| l.split_once("probe VmHWM:").map(|(_, kb)| kb))
            .unwrap_or_else(|| panic!("no probe figure in:\n{out}"))
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap();
        println!(
            "peak resident memory: {} MiB for {} MiB received",
            kb >> 10,
            SENT >> 20
        );
        // The test binary itself takes a few tens of MiB.
        assert!(kb << 10 <= SENT + SENT / 8 + (64 << 20), "{kb} kB");
    }
}
