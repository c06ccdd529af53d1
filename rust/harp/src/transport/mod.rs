//! Transport: how one worker's frames reach its peers and wait for the operation that takes
//! them. The [`Endpoint`] (one operation's view) sends through a `Link` and receives from
//! the worker's mailbox; two links exist:
//!
//! * `mesh` (TCP): one authenticated connection per pair of workers that talk, opened on
//!   first use, a reader task per connection, timed and locked writers, heartbeats on idle
//!   connections;
//! * `local` (in-process): the workers of one job as threads of one process
//!   ([`Transport::in_process`], used by the tests), frames copied straight into the
//!   receiver's mailbox.
//!
//! TCP start-up ([`Transport::connect`]):
//! 1. Every worker listens (`socket`) and accepts for as long as it runs; at start-up every
//!    rank above 0 dials rank 0. Any other connection is dialed when it is first needed: by
//!    the first send to a peer, or by a receive that has waited one heartbeat interval for a
//!    peer that has not connected. When two workers dial each other at once, the dial of the
//!    higher rank is kept: the acceptor answers every authenticated dial with a verdict before
//!    any frame.
//! 2. Each new connection is authenticated with the job secret by a mutual HMAC-SHA256
//!    challenge-response (`auth`: `Hello` → `Challenge` → `Proof`). A peer that cannot prove
//!    the secret, names another job or a rank that is not expected is logged and dropped; the
//!    real peer can still connect afterwards. Both ends also agree on per-frame integrity
//!    (`frame_mac`): with it on, every later frame carries an HMAC tag under a per-connection
//!    session key (`integrity`); a peer with the other setting fails start-up.
//! 3. The three-step handshake of the Harp paper (`handshake`): the master pings every
//!    worker, each answers, then the master tells everyone the job is initialised.
//!
//! Events (`events`): `Event` frames outside the collectives go to the mailbox's event lane
//! (one FIFO per sender); an event to oneself goes straight into one's own mailbox.
//!
//! Failure handling: a link that sees a peer end (end-of-file, a reset or an `Abort` frame
//! over TCP; an abort, close or drop in process) marks the peer gone in the `mailbox` and
//! wakes every waiter on it; a waiter whose peer is gone (and has nothing queued) fails at
//! once, and every wait has a deadline. A failing worker sends `Abort` with its error to all
//! peers and closes its connections, so a failure spreads to every worker quickly and with the
//! original cause in the message.

mod auth;
mod driver;
mod endpoint;
pub(crate) mod event_state;
mod events;
mod handshake;
mod integrity;
mod local;
mod mailbox;
mod mesh;
mod reader;
mod record;
mod socket;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use driver::{CallerDriver, Driver, HANDOVER_AFTER, RECV_SPIN};
pub use endpoint::{Endpoint, Members, Transport};
pub use events::Event;
pub use mailbox::{EventQueueStats, Frame};
pub use record::{Recorder, Step};
pub use socket::auto_congestion;
#[cfg(target_os = "linux")]
pub use socket::congestion_of;
pub use socket::listen;

use crate::wire::Header;

/// Job id on the wire: FNV-1a 64 of the job name.
pub fn job_id(name: &str) -> u64 {
    crate::util::fnv1a64(name.as_bytes())
}

/// A boxed future borrowing the link (what a [`Link`] method returns).
pub(crate) type Io<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a link from one worker to its peers must do. Received frames and gone peers are
/// reported into the worker's mailbox, which the link shares with the [`Endpoint`]: a link
/// files each frame from a peer in order, and marks the peer gone (with a reason naming the
/// cause) after its last frame. Dropping a link closes it; the peers then see this worker gone.
pub(crate) trait Link: Send + Sync {
    /// Writes one frame to `dst`: `hdr` followed by the concatenation of `parts`. An error
    /// means the connection to `dst` is closed or broken.
    fn send<'a>(
        &'a self,
        dst: usize,
        hdr: Header,
        parts: &'a [&'a [u8]],
    ) -> Io<'a, std::io::Result<()>>;

    /// Sends `last` (an `Abort` or `Bye` frame with `body`) to every peer, best effort and
    /// briefly, then closes every connection; later sends fail.
    fn close<'a>(&'a self, last: Header, body: &'a [u8]) -> Io<'a, ()>;

    /// Writes the frame [`Link::send`] would, without waiting, when that can be done at once
    /// (a small frame, a connection nobody else is writing to, room in the socket). It saves
    /// a small message the future, the timer and the buffered copy of the waiting path. A link
    /// without such a path (the tests' links whose sends never finish) keeps this default.
    fn try_send(&self, _dst: usize, _hdr: Header, _parts: &[&[u8]]) -> TrySend {
        TrySend::NotNow
    }

    /// Reads what has arrived from `peer` and files it in the mailbox now, without waiting,
    /// when the link can (the TCP link reads the socket itself, unless its reader task is
    /// reading it). Whether anything changed: a frame filed, part of one read, or the peer
    /// marked gone. A receive calls it before it waits, so a frame already in the socket costs
    /// no turn of the runtime; an in-process link files frames as they are sent and keeps this
    /// default.
    fn pull(&self, _peer: usize) -> bool {
        false
    }

    /// A receive is about to wait for `peer`: a link that opens connections on first use
    /// makes sure one will come ([`mesh`]); the others keep this default.
    fn expect(&self, _peer: usize) {}

    /// How many connections this worker has opened to its peers so far (`None`: a link
    /// without connections, such as the in-process one).
    fn connections(&self) -> Option<usize> {
        None
    }

    /// The peers this worker has an open connection to: they send heartbeats, so a silence
    /// of theirs means trouble even when no operation waits for them (a link without
    /// connections keeps this default).
    fn open_peers(&self) -> Vec<usize> {
        Vec::new()
    }

    /// The operation took the frame with header `hdr` from the mailbox (the recording link
    /// logs it; the others keep this default).
    fn took(&self, _hdr: &Header) {}

    /// Writes out what a [`TrySend::Rest`] left queued for `dst` (a link whose `try_send`
    /// never returns `Rest` keeps this default).
    fn drain<'a>(&'a self, _dst: usize) -> Io<'a, std::io::Result<()>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// What [`Link::try_send`] did.
pub(crate) enum TrySend {
    /// The whole frame was written.
    Sent,
    /// The connection is closed or broken.
    Failed(std::io::Error),
    /// Nothing was written: send it with [`Link::send`].
    NotNow,
    /// Part of the frame was written and the rest is queued on the connection: wait for
    /// [`Link::drain`].
    Rest,
}

/// Heartbeats go out four times per silence limit (half the operation timeout).
fn heartbeat_interval(op_timeout: Duration) -> Duration {
    (op_timeout / 8).clamp(Duration::from_millis(20), Duration::from_secs(5))
}

/// Runs futures concurrently and waits for all (small helper to avoid a futures dependency).
pub(crate) async fn futures_join_all<F: Future<Output = ()>>(futs: impl IntoIterator<Item = F>) {
    let mut set: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        set.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if set.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}
