//! The TCP side of liveness: one read loop per connection that files frames into the mailbox
//! (and marks the peer gone when the connection ends), and the heartbeats sent on idle
//! connections. With frame MACs on, the read loop verifies every frame's tag before acting
//! on it; a frame that fails, like a header that does not belong on the connection, is a
//! protocol violation by the peer.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, BufReader};
use tokio::net::tcp::OwnedReadHalf;

use super::integrity::{Direction, TAG_LEN};
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

/// Why a read loop stopped.
enum End {
    /// The connection ended or the peer left or failed (the peer is gone).
    Gone(String),
    /// The peer broke the protocol (the peer is gone, and waiters fail with a protocol error).
    Violation(String),
}

/// Reads frames from `peer` until the connection ends, then marks the peer gone with the reason.
/// `open` verifies the peer's frame tags when frame MACs are on.
pub(super) async fn read_loop(
    peer: usize,
    job: u64,
    rd: OwnedReadHalf,
    mut open: Option<Direction>,
    mb: Arc<Mailbox>,
    pool: Pool,
    limits: Limits,
) {
    let mut rd = BufReader::with_capacity(256 * 1024, rd);
    let end = loop {
        let mut hb = [0u8; COMPACT_MAX];
        if let Err(e) = rd.read_exact(&mut hb[..1]).await {
            break End::Gone(lost(&e, ""));
        }
        let n = 1 + usize::from(hb[0]);
        if n > COMPACT_MAX {
            break End::Violation(format!(
                "sent a malformed frame: a header of {n} bytes (at most {COMPACT_MAX})"
            ));
        }
        if let Err(e) = rd.read_exact(&mut hb[1..n]).await {
            break End::Gone(lost(&e, " in the middle of a frame"));
        }
        let hb = &hb[..n];
        let h = match check_header(hb, peer, job, &limits) {
            Ok(h) => h,
            Err(e) => break End::Violation(e),
        };
        mb.seen(peer);
        let mut mac = open.as_mut().map(|d| d.begin(hb));
        let fed = |b: &[u8]| {
            if let Some(m) = mac.as_mut() {
                m.update(b);
            }
            mb.seen(peer);
        };
        let body = match read_body(&mut rd, h.len, &pool, &limits, fed).await {
            Ok(b) => b,
            Err(e) => break End::Gone(lost(&e, " in the middle of a frame")),
        };
        if let Some(m) = mac {
            let seq = m.seq;
            let mut tag = [0u8; TAG_LEN];
            if let Err(e) = rd.read_exact(&mut tag).await {
                break End::Gone(lost(&e, " in the middle of a frame"));
            }
            if !m.verify(&tag) {
                break End::Violation(format!(
                    "sent a {:?} frame whose integrity tag does not verify (frame {seq} on its \
                     connection: altered, replayed, reordered or forged by a process without \
                     the job secret)",
                    h.kind
                ));
            }
        }
        match h.kind {
            Kind::Heartbeat => {}
            Kind::Bye => break End::Gone("it left the job (finished its work)".to_string()),
            Kind::Abort => break End::Gone(format!("it failed: {}", abort_text(&body))),
            _ => mb.push(lane_of(&h), Frame { hdr: h, body }),
        }
    };
    match end {
        End::Gone(reason) => {
            tracing::debug!("reader for rank {peer} stops: {reason}");
            mb.mark_gone(peer, reason);
        }
        End::Violation(reason) => {
            tracing::warn!("rank {peer} {reason}; its connection is closed");
            mb.mark_violation(peer, reason);
        }
    }
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

/// Reads a payload of `len` bytes (already checked against `limits.max_frame`) into a pooled
/// buffer, in slices of at most 1 MiB, passing each slice to `fed` as it arrives. Payloads above
/// `limits.eager_alloc` are not allocated up front: the buffer doubles as bytes arrive, so
/// a peer that announces a large frame and sends little of it costs little memory.
pub(crate) async fn read_body<R: AsyncRead + Unpin>(
    rd: &mut R,
    len: u64,
    pool: &Pool,
    limits: &Limits,
    mut fed: impl FnMut(&[u8]),
) -> std::io::Result<Buf> {
    let len = usize::try_from(len).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes does not fit in memory"),
        )
    })?;
    let mut body = pool.get(len.min(limits.eager_alloc.max(1 << 20)));
    let mut at = 0;
    while at < len {
        if at == body.len() {
            let mut bigger = pool.get(len.min(body.len().saturating_mul(2)));
            bigger[..at].copy_from_slice(&body[..at]);
            body = bigger;
        }
        let end = (at + (1 << 20)).min(body.len());
        rd.read_exact(&mut body[at..end]).await?;
        fed(&body[at..end]);
        at = end;
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A frame announcing 1 GiB of which 3 MiB arrive allocates a few MiB, not 1 GiB, and
    /// fails with the connection; a whole frame arrives intact across the doublings.
    #[test]
    fn bodies_grow_with_the_bytes_received() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let pool = Pool::default();
            let l = limits(1 << 40, 1 << 20);
            let sent: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
            let mut rd = &sent[..];
            let mut calls = 0;
            let e = read_body(&mut rd, 1 << 30, &pool, &l, |_| calls += 1)
                .await
                .unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
            assert_eq!(calls, 3);
            assert!(
                pool.stats().bytes_in_use == 0 && pool.stats().bytes_held < 16 << 20,
                "{:?}",
                pool.stats()
            );

            let mut rd = &sent[..];
            let got = read_body(&mut rd, sent.len() as u64, &pool, &l, |_| {})
                .await
                .unwrap();
            assert_eq!(&got[..], &sent[..]);
            let empty = read_body(&mut &[][..], 0, &pool, &l, |_| {}).await.unwrap();
            assert!(empty.is_empty());
        });
    }
}
