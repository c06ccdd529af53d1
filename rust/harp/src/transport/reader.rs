//! The TCP side of liveness: one read loop per connection that files frames into the mailbox
//! (and marks the peer gone when the connection ends), and the heartbeats sent on idle
//! connections.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedReadHalf;

use super::mailbox::{lane_of, Frame, Mailbox};
use super::mesh::Writer;
use crate::pool::Pool;
use crate::wire::{Header, Kind, HEADER_LEN};

/// Largest frame payload accepted from a peer (1 TiB): protects against garbage lengths.
const MAX_FRAME: u64 = 1 << 40;

/// Sends a heartbeat on every idle connection (a busy one is proof of life already).
pub(super) async fn heartbeats(
    writers: Arc<Vec<Option<Writer>>>,
    rank: usize,
    job: u64,
    every: Duration,
) {
    let h = Header::control(Kind::Heartbeat, rank, job, 0).encode();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for w in writers.iter().flatten() {
            if let Ok(mut g) = w.try_lock() {
                if let Some(wr) = g.as_mut() {
                    let _ = tokio::time::timeout(every, async {
                        wr.write_all(&h).await?;
                        wr.flush().await
                    })
                    .await;
                }
            }
        }
    }
}

/// Reads frames from `peer` until the connection ends, then marks the peer gone with the reason.
pub(super) async fn read_loop(
    peer: usize,
    job: u64,
    rd: OwnedReadHalf,
    mb: Arc<Mailbox>,
    pool: Pool,
) {
    let mut rd = BufReader::with_capacity(256 * 1024, rd);
    let reason = loop {
        let mut hb = [0u8; HEADER_LEN];
        if let Err(e) = rd.read_exact(&mut hb).await {
            break if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "connection closed (the process exited or was killed)".to_string()
            } else {
                format!("connection lost: {e}")
            };
        }
        let h = match Header::decode(&hb) {
            Ok(h) => h,
            Err(e) => break format!("sent a malformed frame: {e}"),
        };
        if h.src as usize != peer || h.job != job || h.len > MAX_FRAME {
            break format!(
                "sent a frame with src {} job {:#x} len {} on its connection",
                h.src, h.job, h.len
            );
        }
        mb.seen(peer);
        let mut body = pool.get(h.len as usize);
        // Read large bodies in slices so that a long transfer counts as a sign of life.
        let mut at = 0;
        let mut failed = None;
        while at < body.len() {
            let end = (at + (1 << 20)).min(body.len());
            if let Err(e) = rd.read_exact(&mut body[at..end]).await {
                failed = Some(e);
                break;
            }
            mb.seen(peer);
            at = end;
        }
        if let Some(e) = failed {
            break format!("connection lost in the middle of a frame: {e}");
        }
        match h.kind {
            Kind::Heartbeat => {}
            Kind::Bye => break "it left the job (finished its work)".to_string(),
            Kind::Abort => break format!("it failed: {}", String::from_utf8_lossy(&body)),
            _ => mb.push(lane_of(&h), Frame { hdr: h, body }),
        }
    };
    tracing::debug!("reader for rank {peer} stops: {reason}");
    mb.mark_gone(peer, reason);
}
