//! A recording in-process [`Link`] for the simulator (`crate::sim`): the workers of one job
//! live in one process, as with `local`, but a sent frame is only queued; the driver of the
//! run moves the queued frames into the receivers' mailboxes ([`Recorder::deliver`]) when no
//! worker can go on without them. Each worker's link logs, in program order, every frame of a
//! collective it sends (peer, payload bytes, operation sequence, tag) and every frame its
//! operation takes from the mailbox ([`Link::took`]): the schedule the simulator replays over
//! a modelled network. Frames arrive only when every worker is blocked, so the sends a step
//! issues are logged before the receives it waits for; only a frame that was already waiting
//! when a step both sends and receives (a join) can be logged before that step's sends, which
//! then wait for it in the replay.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::local::{gather, leave_reason};
use super::mailbox::{lane_of, Frame, Mailbox};
use super::{Io, Link, Transport};
use crate::pool::Pool;
use crate::wire::{Header, Kind};

/// One step of a worker's recorded schedule, in program order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A frame to `peer` with `bytes` of payload, in operation `seq`, tag `tag`.
    Send {
        peer: usize,
        bytes: u64,
        seq: u64,
        tag: u32,
    },
    /// The operation took the next frame from `peer` of operation `seq` with tag `tag`.
    Recv { peer: usize, seq: u64, tag: u32 },
}

/// What the workers of one recorded job share.
struct Hub {
    mailboxes: Vec<Arc<Mailbox>>,
    pools: Vec<Pool>,
    left: Vec<AtomicBool>,
    /// Frames sent and not yet delivered: (destination, frame).
    queue: Mutex<Vec<(usize, Frame)>>,
    /// Each worker's schedule so far.
    logs: Vec<Mutex<Vec<Step>>>,
}

/// Whether a frame belongs to a collective's schedule (not liveness or control of the job).
fn scheduled(kind: Kind) -> bool {
    matches!(kind, Kind::Ctrl | Kind::Batch | Kind::Data)
}

/// The driver's handle on a recorded job: delivers queued frames and reads the schedules.
#[derive(Clone)]
pub struct Recorder {
    hub: Arc<Hub>,
}

impl Recorder {
    /// Moves every queued frame into its receiver's mailbox (waking the receiver); how many.
    pub fn deliver(&self) -> usize {
        let frames = std::mem::take(&mut *self.hub.queue.lock().expect("queue lock"));
        let n = frames.len();
        for (dst, f) in frames {
            let mb = &self.hub.mailboxes[dst];
            mb.seen(f.hdr.src as usize);
            mb.push(lane_of(&f.hdr), f);
        }
        n
    }

    /// Takes every worker's schedule recorded so far (the logs start empty again).
    pub fn take_schedules(&self) -> Vec<Vec<Step>> {
        self.hub
            .logs
            .iter()
            .map(|l| std::mem::take(&mut *l.lock().expect("log lock")))
            .collect()
    }
}

/// One worker's recording link.
struct Recording {
    rank: usize,
    hub: Arc<Hub>,
}

impl Recording {
    fn leave(&self, reason: &str) {
        if self.hub.left[self.rank].swap(true, Ordering::SeqCst) {
            return;
        }
        for (peer, mb) in self.hub.mailboxes.iter().enumerate() {
            if peer != self.rank {
                mb.mark_gone(self.rank, reason.to_string());
            }
        }
    }

    fn queue(&self, dst: usize, hdr: Header, parts: &[&[u8]]) -> io::Result<()> {
        let hub = &self.hub;
        if hub.left[self.rank].load(Ordering::SeqCst) || hub.left[dst].load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the peer has left",
            ));
        }
        let body = gather(&hub.pools[dst], parts);
        if scheduled(hdr.kind) {
            hub.logs[self.rank]
                .lock()
                .expect("log lock")
                .push(Step::Send {
                    peer: dst,
                    bytes: body.len() as u64,
                    seq: hdr.seq,
                    tag: hdr.tag,
                });
        }
        hub.queue
            .lock()
            .expect("queue lock")
            .push((dst, Frame { hdr, body }));
        Ok(())
    }
}

/// A frame's payload as the link gets it.
type Parts<'a> = &'a [&'a [u8]];

impl Link for Recording {
    fn send<'a>(&'a self, dst: usize, hdr: Header, parts: Parts<'a>) -> Io<'a, io::Result<()>> {
        Box::pin(std::future::ready(self.queue(dst, hdr, parts)))
    }

    fn close<'a>(&'a self, last: Header, body: &'a [u8]) -> Io<'a, ()> {
        self.leave(&leave_reason(last, body));
        Box::pin(std::future::ready(()))
    }

    fn took(&self, hdr: &Header) {
        if scheduled(hdr.kind) {
            self.hub.logs[self.rank]
                .lock()
                .expect("log lock")
                .push(Step::Recv {
                    peer: hdr.src as usize,
                    seq: hdr.seq,
                    tag: hdr.tag,
                });
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.leave("connection closed (the recorded worker was dropped)");
    }
}

impl Transport {
    /// The transports of `pools.len()` workers of job `job` that record their schedules, and
    /// the [`Recorder`] that delivers their frames. Frames reach a mailbox only through
    /// [`Recorder::deliver`]; no task is spawned.
    pub fn recording(job: u64, op_timeout: Duration, pools: &[Pool]) -> (Vec<Transport>, Recorder) {
        let n = pools.len();
        let hub = Arc::new(Hub {
            mailboxes: (0..n).map(|_| Arc::new(Mailbox::new(n))).collect(),
            pools: pools.to_vec(),
            left: (0..n).map(|_| AtomicBool::new(false)).collect(),
            queue: Mutex::new(Vec::new()),
            logs: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
        });
        let transports = (0..n)
            .map(|rank| {
                let link = Recording {
                    rank,
                    hub: hub.clone(),
                };
                let mb = hub.mailboxes[rank].clone();
                Transport::new(rank, n, job, op_timeout, mb, Box::new(link))
            })
            .collect();
        (transports, Recorder { hub })
    }
}
