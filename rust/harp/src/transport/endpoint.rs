//! A worker's transport (its [`Link`] to the peers and its mailbox) and the [`Endpoint`]: one
//! operation's view of it, which stamps every frame with the operation's sequence number, kind
//! and algorithm and bounds every wait by the operation's deadline.

use std::sync::Arc;
use std::time::Duration;

use super::mailbox::{Mailbox, Take};
use super::{heartbeat_interval, Frame, Link};
use crate::error::{Error, OpContext, Result};
use crate::wire::{self, Header, Kind, Op};

/// The connections of one worker to all its peers (TCP or in-process) and its mailbox.
pub struct Transport {
    pub rank: usize,
    pub size: usize,
    pub job: u64,
    op_timeout: Duration,
    mailbox: Arc<Mailbox>,
    link: Box<dyn Link>,
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
            mailbox,
            link,
        }
    }

    /// An endpoint for one operation.
    pub fn endpoint(&self, op: Op, algo: u8, seq: u64, label: &str) -> Endpoint<'_> {
        Endpoint {
            t: self,
            op,
            algo,
            seq,
            ctx: OpContext {
                rank: self.rank,
                op: op.name(),
                seq,
                label: label.to_string(),
            },
            timeout: self.op_timeout,
        }
    }

    /// Sends `Abort(reason)` to every peer (best effort, briefly) and closes all connections.
    pub async fn abort(&self, reason: &str) {
        let h = Header::control(Kind::Abort, self.rank, self.job, reason.len());
        self.link.close(h, reason.as_bytes()).await;
    }

    /// Orderly shutdown: `Bye` to every peer, then close.
    pub async fn close(&self) {
        let h = Header::control(Kind::Bye, self.rank, self.job, 0);
        self.link.close(h, &[]).await;
    }
}

/// One worker's view of one operation: sends and receives frames tagged with the operation's
/// sequence number, kind and algorithm, with the operation's deadline.
pub struct Endpoint<'a> {
    pub t: &'a Transport,
    pub op: Op,
    pub algo: u8,
    pub seq: u64,
    pub ctx: OpContext,
    timeout: Duration,
}

impl Endpoint<'_> {
    pub fn rank(&self) -> usize {
        self.t.rank
    }
    pub fn size(&self) -> usize {
        self.t.size
    }

    /// The same endpoint with another deadline (the start-up handshake uses the connect timeout).
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn header(&self, kind: Kind, tag: u32, aux: u32, len: u64) -> Header {
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
        }
    }

    fn lost(&self, peer: usize, reason: String) -> Error {
        Error::PeerLost {
            ctx: self.ctx.clone(),
            peer,
            reason,
        }
    }

    fn timed_out(&self, peer: usize) -> Error {
        Error::Timeout {
            ctx: self.ctx.clone(),
            peer,
            secs: self.timeout.as_secs_f64(),
        }
    }

    /// Writes one frame whose payload is the concatenation of `parts`, straight from the
    /// caller's buffers.
    pub async fn send_frame(
        &self,
        dst: usize,
        kind: Kind,
        tag: u32,
        aux: u32,
        parts: &[&[u8]],
    ) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let h = self.header(kind, tag, aux, len as u64);
        match tokio::time::timeout(self.timeout, self.t.link.send(dst, h, parts)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                let reason = self
                    .t
                    .mailbox
                    .gone(dst)
                    .unwrap_or_else(|| format!("send failed: {e}"));
                Err(self.lost(dst, reason))
            }
            Err(_) => Err(self.timed_out(dst)),
        }
    }

    /// Turns a mailbox answer into this operation's result (`None`: nothing yet).
    fn taken(&self, t: Take) -> Option<Result<Frame>> {
        match t {
            Take::Frame(f) => Some(Ok(f)),
            Take::Mismatch { peer, op, algo } => Some(Err(Error::OpMismatch {
                ctx: self.ctx.clone(),
                peer,
                theirs: format!("{} (algorithm {algo})", op.name()),
            })),
            Take::Gone { peer, reason } => Some(Err(self.lost(peer, reason))),
            Take::Empty => None,
        }
    }

    /// Waits for the next frame from `src` with `tag` in this operation. Fails when `src` is
    /// gone, when it has sent nothing at all for half the timeout (silent: hung or cut off), or
    /// when the frame has not come within the timeout.
    pub async fn recv_frame(&self, src: usize, tag: u32) -> Result<Frame> {
        self.wait(&[src], tag, true).await
    }

    /// Waits for the first frame with `tag` in this operation from any of `from` (used when only
    /// the sender knows what comes next, e.g. the automatically chosen broadcast tree). Fails
    /// when every candidate is gone, or at the timeout.
    pub async fn recv_frame_from_any(&self, from: &[usize], tag: u32) -> Result<Frame> {
        self.wait(from, tag, false).await
    }

    /// Waits for a frame with `tag` from the first of `from` that has one. With `silence`, also
    /// wakes every heartbeat interval to fail when the (single) sender has gone silent.
    async fn wait(&self, from: &[usize], tag: u32, silence: bool) -> Result<Frame> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let silent_limit = self.timeout / 2;
        let slice = heartbeat_interval(self.timeout);
        let first = from.first().copied().unwrap_or(0);
        let mb = &self.t.mailbox;
        let watch = mb.watch_op(self.seq, from);
        loop {
            let notified = watch.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let got = mb.take_any(self.seq, from, tag, self.op, self.algo);
            if let Some(r) = self.taken(got) {
                return r;
            }
            let wake = match silence {
                true => deadline.min(tokio::time::Instant::now() + slice),
                false => deadline,
            };
            if tokio::time::timeout_at(wake, notified).await.is_err() {
                let quiet = mb.silence(first);
                if silence && quiet >= silent_limit {
                    return Err(Error::Silent {
                        ctx: self.ctx.clone(),
                        peer: first,
                        secs: quiet.as_secs_f64(),
                    });
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(self.timed_out(first));
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
        wire::decode(&f.body)
    }
}
