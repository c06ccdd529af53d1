//! The in-process implementation of [`Link`]: the workers of one job live in one process and a
//! frame is copied straight into the receiver's mailbox (into a buffer of the receiver's pool,
//! as the TCP reader would). Failure behaves as over TCP: a worker that aborts, closes or is
//! dropped is marked gone in every peer's mailbox with the reason, after every frame it sent;
//! a send to a worker that has left fails. A heartbeat task keeps each worker visibly alive, so
//! a worker whose thread is stuck in user code is reported by the peers' timeouts, not as
//! silent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::mailbox::{lane_of, Frame, Mailbox, LEFT};
use super::{heartbeat_interval, Io, Link, Transport, TrySend};
use crate::pool::{Buf, Pool};
use crate::wire::{Header, Kind};

/// What the workers of one in-process job share.
struct Hub {
    mailboxes: Vec<Arc<Mailbox>>,
    pools: Vec<Pool>,
    /// Whether each worker has left (closed, aborted or dropped). A sender learns it from its
    /// own mailbox, where the reason is filed first (as a TCP reader marks a peer gone).
    left: Vec<AtomicBool>,
}

/// One worker's link to the other workers of its process.
struct Local {
    rank: usize,
    hub: Arc<Hub>,
    heartbeat: JoinHandle<()>,
}

impl Local {
    /// Leaves the job once: every peer sees this worker gone for `reason`.
    fn leave(&self, reason: impl Fn() -> String) {
        if self.hub.left[self.rank].swap(true, Ordering::SeqCst) {
            return;
        }
        self.heartbeat.abort();
        for (peer, mb) in self.hub.mailboxes.iter().enumerate() {
            if peer != self.rank {
                mb.mark_gone(self.rank, reason());
            }
        }
    }

    /// Copies a frame into `dst`'s mailbox, or says why it cannot.
    fn deliver(&self, dst: usize, hdr: Header, parts: &[&[u8]]) -> std::io::Result<()> {
        let hub = &self.hub;
        if hub.left[self.rank].load(Ordering::SeqCst) {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "connection already closed",
            ))
        } else if hub.mailboxes[self.rank].is_gone(dst) {
            Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the peer has left",
            ))
        } else {
            let body = gather(&hub.pools[dst], parts);
            hub.mailboxes[dst].seen(self.rank);
            hub.mailboxes[dst].push(lane_of(&hdr), Frame { hdr, body });
            Ok(())
        }
    }
}

/// The concatenation of `parts` in a buffer of `pool` (a frame's body as its receiver holds
/// it).
pub(super) fn gather(pool: &Pool, parts: &[&[u8]]) -> Buf {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut body = pool.get(len);
    let mut at = 0;
    for p in parts {
        body[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    body
}

/// Why the peers see a worker gone whose link closes with `last` (an `Abort` with its error
/// as `body`, or a `Bye`).
pub(super) fn leave_reason(last: Header, body: &[u8]) -> String {
    match last.kind {
        Kind::Abort => format!("it failed: {}", String::from_utf8_lossy(body)),
        _ => LEFT.to_string(),
    }
}

impl Link for Local {
    fn send<'a>(
        &'a self,
        dst: usize,
        hdr: Header,
        parts: &'a [&'a [u8]],
    ) -> Io<'a, std::io::Result<()>> {
        Box::pin(std::future::ready(self.deliver(dst, hdr, parts)))
    }

    fn try_send(&self, dst: usize, hdr: Header, parts: &[&[u8]]) -> TrySend {
        match self.deliver(dst, hdr, parts) {
            Ok(()) => TrySend::Sent,
            Err(e) => TrySend::Failed(e),
        }
    }

    fn close<'a>(&'a self, last: Header, body: &'a [u8]) -> Io<'a, ()> {
        let reason = leave_reason(last, body);
        self.leave(|| reason.clone());
        Box::pin(std::future::ready(()))
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.leave(|| {
            "connection closed (the worker was dropped without closing: its thread ended or \
             panicked)"
                .to_string()
        });
    }
}

/// Marks every live peer of `rank` as seen, `every` interval, until aborted.
async fn heartbeats(hub: Arc<Hub>, rank: usize, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (peer, mb) in hub.mailboxes.iter().enumerate() {
            if peer != rank && !hub.left[peer].load(Ordering::Relaxed) {
                mb.seen(rank);
            }
        }
    }
}

impl Transport {
    /// The transports of `pools.len()` workers of job `job` connected in memory (`pools[r]` is
    /// rank r's pool; received frames are allocated from it). Must run inside the tokio runtime
    /// (each worker has a heartbeat task).
    pub fn in_process(job: u64, op_timeout: Duration, pools: &[Pool]) -> Vec<Transport> {
        let n = pools.len();
        let hub = Arc::new(Hub {
            mailboxes: (0..n).map(|_| Arc::new(Mailbox::new(n))).collect(),
            pools: pools.to_vec(),
            left: (0..n).map(|_| AtomicBool::new(false)).collect(),
        });
        let every = heartbeat_interval(op_timeout);
        (0..n)
            .map(|rank| {
                let link = Local {
                    rank,
                    hub: hub.clone(),
                    heartbeat: tokio::spawn(heartbeats(hub.clone(), rank, every)),
                };
                let mb = hub.mailboxes[rank].clone();
                Transport::new(rank, n, job, op_timeout, mb, Box::new(link))
            })
            .collect()
    }
}
