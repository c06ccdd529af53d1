//! The TCP implementation of [`Link`]: one authenticated connection per pair of workers (rank r
//! dials every rank below it and accepts every rank above it), a read loop per connection and
//! timed, locked writers.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::auth::{self, accept_auth, dial_auth, Authed};
use super::integrity::{Direction, SessionKey};
use super::mailbox::Mailbox;
use super::reader::{heartbeats, read_loop, Inbound};
use super::socket::{dial, Limits, Warn};
use super::{futures_join_all, handshake, heartbeat_interval, Io, Link, Transport, TrySend};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::wire::{Header, COMPACT_MAX};

/// The write half of one connection; `None` once closed.
pub(super) type Writer = tokio::sync::Mutex<Option<Conn>>;

/// The write side of one connection: the buffered socket and, with frame MACs on, the tagging
/// state of this worker's direction.
pub(super) struct Conn {
    wr: BufWriter<OwnedWriteHalf>,
    seal: Option<Direction>,
    /// The tail of a frame that [`Conn::try_frame`] could not write at once; it goes out
    /// before anything else written to this connection ([`Conn::drain`]).
    pending: Vec<u8>,
}

/// The largest frame [`Conn::try_frame`] writes (a larger one takes the buffered path, so a
/// short write never queues more than this).
const TRY_FRAME_MAX: usize = 64 * 1024;

/// The most pieces [`Conn::try_frame`] writes in one vectored write.
const TRY_FRAME_PARTS: usize = 64;

impl Conn {
    pub(super) fn new(wr: OwnedWriteHalf, seal: Option<Direction>) -> Conn {
        Conn {
            wr: BufWriter::with_capacity(64 * 1024, wr),
            seal,
            pending: Vec::new(),
        }
    }

    /// Writes one small frame with one vectored write, without waiting, when nothing else is
    /// queued on the connection and frame MACs are off ([`Link::try_send`]). `hdr.len` is the
    /// parts' total length, as on every frame.
    fn try_frame(&mut self, hdr: &Header, parts: &[&[u8]]) -> TrySend {
        // The header already says how long the parts are together.
        let len = usize::try_from(hdr.len).unwrap_or(usize::MAX);
        debug_assert_eq!(len, parts.iter().map(|p| p.len()).sum::<usize>());
        if self.seal.is_some()
            || !self.pending.is_empty()
            || !self.wr.buffer().is_empty()
            || parts.len() >= TRY_FRAME_PARTS
            || len > TRY_FRAME_MAX
        {
            return TrySend::NotNow;
        }
        let mut b = [0u8; COMPACT_MAX];
        let n = hdr.encode_compact(&mut b);
        let mut iov = [IoSlice::new(&[]); TRY_FRAME_PARTS];
        iov[0] = IoSlice::new(&b[..n]);
        for (v, p) in iov[1..].iter_mut().zip(parts) {
            *v = IoSlice::new(p);
        }
        let total = n + len;
        let written = match self
            .wr
            .get_ref()
            .try_write_vectored(&iov[..1 + parts.len()])
        {
            Ok(w) => w,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return TrySend::NotNow,
            Err(e) => return TrySend::Failed(e),
        };
        if written == total {
            return TrySend::Sent;
        }
        // A short write: the rest of the frame waits here and goes out before anything else.
        let mut skip = written;
        for p in std::iter::once(&b[..n]).chain(parts.iter().copied()) {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            self.pending.extend_from_slice(&p[skip..]);
            skip = 0;
        }
        TrySend::Rest
    }

    /// Writes out the tail a short [`Conn::try_frame`] left (into the buffer; the caller
    /// flushes). Taken piece by piece, so a cancelled drain loses nothing.
    async fn drain(&mut self) -> std::io::Result<()> {
        while !self.pending.is_empty() {
            let n = self.wr.write(&self.pending).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.pending.drain(..n);
        }
        Ok(())
    }

    /// Writes one frame: the compact header, the concatenation of `parts` and, with frame MACs
    /// on, its tag (computed as the bytes are written). The caller flushes.
    pub async fn write_frame(&mut self, hdr: &Header, parts: &[&[u8]]) -> std::io::Result<()> {
        self.drain().await?;
        let mut b = [0u8; COMPACT_MAX];
        let n = hdr.encode_compact(&mut b);
        let h = &b[..n];
        let mut mac = self.seal.as_mut().map(|d| d.begin(h));
        self.wr.write_all(h).await?;
        for p in parts {
            for c in p.chunks(1 << 20) {
                if let Some(m) = mac.as_mut() {
                    m.update(c);
                }
                self.wr.write_all(c).await?;
            }
        }
        if let Some(m) = mac {
            self.wr.write_all(&m.seal()).await?;
        }
        Ok(())
    }

    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.drain().await?;
        self.wr.flush().await
    }
}

/// The connections of one worker to all its peers.
struct TcpMesh {
    writers: Arc<Vec<Option<Writer>>>,
    /// The receiving side of each connection (`None` for this worker itself).
    inbound: Vec<Option<Arc<Inbound>>>,
    /// The read loops and the heartbeat task.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// Waits until the peer has acknowledged every byte written to `w` (Linux's `SIOCOUTQ` reads 0).
/// Closing a socket that still has unread input resets the connection, and a reset throws away
/// what the send queue still holds: without this wait, the end of the last operation's data
/// could be lost to a peer still reading it. The caller bounds the wait.
async fn acknowledged(w: &OwnedWriteHalf) {
    let fd = w.as_ref().as_raw_fd();
    loop {
        let mut queued: libc::c_int = 0;
        // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int through the pointer; `fd` is the open
        // socket of `w`, which outlives this call.
        let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut queued) };
        if r != 0 || queued <= 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The error of a write to a connection this worker has closed.
fn closed() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "connection already closed",
    )
}

impl TcpMesh {
    /// The writer of the connection to `dst`.
    fn writer(&self, dst: usize) -> &Writer {
        self.writers[dst].as_ref().expect("no connection to self")
    }

    fn stop_tasks(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

impl Link for TcpMesh {
    fn send<'a>(
        &'a self,
        dst: usize,
        hdr: Header,
        parts: &'a [&'a [u8]],
    ) -> Io<'a, std::io::Result<()>> {
        Box::pin(async move {
            let mut g = self.writer(dst).lock().await;
            let wr = g.as_mut().ok_or_else(closed)?;
            wr.write_frame(&hdr, parts).await?;
            wr.flush().await
        })
    }

    fn try_send(&self, dst: usize, hdr: Header, parts: &[&[u8]]) -> TrySend {
        let Ok(mut g) = self.writer(dst).try_lock() else {
            return TrySend::NotNow;
        };
        match g.as_mut() {
            Some(c) => c.try_frame(&hdr, parts),
            None => TrySend::Failed(closed()),
        }
    }

    fn pull(&self, peer: usize) -> bool {
        self.inbound
            .get(peer)
            .and_then(Option::as_ref)
            .is_some_and(|i| i.pull())
    }

    fn drain<'a>(&'a self, dst: usize) -> Io<'a, std::io::Result<()>> {
        Box::pin(async move {
            let mut g = self.writer(dst).lock().await;
            g.as_mut().ok_or_else(closed)?.flush().await
        })
    }

    fn close<'a>(&'a self, last: Header, body: &'a [u8]) -> Io<'a, ()> {
        Box::pin(async move {
            let sends = self.writers.iter().flatten().map(|w| async move {
                let fut = async {
                    let mut g = w.lock().await;
                    if let Some(mut c) = g.take() {
                        let _ = c.write_frame(&last, &[body]).await;
                        let _ = c.wr.flush().await;
                        let _ = c.wr.shutdown().await;
                        acknowledged(c.wr.get_ref()).await;
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(2), fut).await;
            });
            futures_join_all(sends).await;
            self.stop_tasks();
        })
    }
}

impl Drop for TcpMesh {
    fn drop(&mut self) {
        self.stop_tasks();
    }
}

/// What the accept loop did, for the caller's log and the tests.
#[derive(Debug, Default)]
pub(super) struct Accepted {
    /// The authenticated higher ranks, their connections and session keys.
    pub peers: Vec<(usize, TcpStream, Option<SessionKey>)>,
    /// Why start-up must fail: an authenticated peer uses another `frame_mac` setting.
    pub fatal: Option<Error>,
    /// Connections dropped without being authenticated (failed, timed out, or pushed out as
    /// the oldest without a hello beyond `Limits::max_pending`).
    pub dropped: u64,
    /// Errors of `accept` itself (e.g. EMFILE), each followed by a back-off.
    pub accept_errors: u64,
    /// Warning lines written.
    pub warnings: u64,
}

/// Whether an accept error means this process is out of descriptors (or kernel memory):
/// dropping a pending connection frees one.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// The connections the accept loop is authenticating, oldest first, each with its "sent a
/// valid hello" flag (set by [`accept_auth`]).
type Pending = VecDeque<(tokio::task::AbortHandle, Arc<AtomicBool>)>;

/// Whether a pending connection has sent no hello yet.
fn has_idle(order: &Pending) -> bool {
    order.iter().any(|(_, seen)| !seen.load(Ordering::Acquire))
}

/// Aborts and forgets the oldest pending connection that has sent no hello; false when every
/// one has.
fn drop_oldest_idle(order: &mut Pending) -> bool {
    let Some(at) = order
        .iter()
        .position(|(_, seen)| !seen.load(Ordering::Acquire))
    else {
        return false;
    };
    let (oldest, _) = order.remove(at).expect("in range");
    oldest.abort();
    true
}

/// Accepts and authenticates the `size − rank − 1` ranks above `rank`. A connection that fails
/// to authenticate within `limits.auth_timeout` is dropped; the real peer can still connect.
/// At most `limits.max_pending` connections authenticate at once: for a new one, the oldest
/// that has sent no valid hello is dropped, never one past its hello (when all are past it,
/// accepting waits for one to finish, and the dialers wait in the listen backlog). Accept
/// errors back off (doubling, and dropping the oldest pending connection without a hello when
/// out of descriptors), and warnings are rate-limited, so idle strangers can neither keep the
/// real peers out nor make the worker spin or flood its log, and hundreds of real peers
/// dialing at once all get in. A peer that proves the secret with
/// the other `frame_mac` setting ends the loop with [`Accepted::fatal`]. Each rank that has
/// joined is added to `joined` as it does (for the start-up timeout's message).
#[allow(clippy::too_many_arguments)]
pub(super) async fn accept_all(
    listener: TcpListener,
    rank: usize,
    size: usize,
    job: u64,
    secret: Vec<u8>,
    frame_mac: bool,
    limits: Limits,
    joined: Arc<std::sync::Mutex<Vec<usize>>>,
) -> Accepted {
    let expected = size - rank - 1;
    let mut out = Accepted::default();
    let mut warn = Warn::new(limits.warn_every);
    let mut pending = tokio::task::JoinSet::new();
    let mut order = Pending::new();
    let max = limits.max_pending.max(1);
    let mut backoff = limits.accept_backoff_min;
    let mut paused: Option<tokio::time::Instant> = None;
    let secret: Arc<[u8]> = secret.into();
    while out.peers.len() < expected {
        tokio::select! {
            // Full of connections that all sent their hello: wait for one to finish.
            acc = listener.accept(), if paused.is_none() && (order.len() < max || has_idle(&order)) => match acc {
                Ok((mut s, from)) => {
                    backoff = limits.accept_backoff_min;
                    // The oldest without a hello; if all have sent one (since the check above),
                    // the new connection waits its turn beside them.
                    while order.len() >= max && drop_oldest_idle(&mut order) {
                        out.dropped += 1;
                        warn.warn(Instant::now(), || format!(
                            "rank {rank}: dropped the oldest connection that sent no hello (more \
                             than {max} pending)"
                        ));
                    }
                    let secret = secret.clone();
                    let timeout = limits.auth_timeout;
                    let seen = Arc::new(AtomicBool::new(false));
                    let flag = seen.clone();
                    let task = pending.spawn(async move {
                        let auth = accept_auth(&mut s, rank, size, job, &secret, frame_mac, &flag);
                        let r = tokio::time::timeout(timeout, auth).await;
                        (from, r, s)
                    });
                    order.push_back((task, seen));
                }
                Err(e) => {
                    out.accept_errors += 1;
                    if out_of_descriptors(&e) && drop_oldest_idle(&mut order) {
                        out.dropped += 1;
                    }
                    warn.warn(Instant::now(), || format!(
                        "rank {rank}: accept failed: {e}; retrying in {} ms",
                        backoff.as_millis()
                    ));
                    paused = Some(tokio::time::Instant::now() + backoff);
                    backoff = (backoff * 2).min(limits.accept_backoff_max);
                }
            },
            _ = tokio::time::sleep_until(paused.unwrap_or_else(tokio::time::Instant::now)), if paused.is_some() => {
                paused = None;
            }
            Some(done) = pending.join_next_with_id(), if !pending.is_empty() => {
                let (id, (from, r, s)) = match done {
                    Ok(d) => d,
                    Err(e) => {
                        // Aborted (pushed out) or panicked: already counted or nothing to keep.
                        order.retain(|(h, _)| h.id() != e.id());
                        continue;
                    }
                };
                order.retain(|(h, _)| h.id() != id);
                let why = match r {
                    Ok(Ok(Authed { peer: d, key })) if out.peers.iter().all(|(g, ..)| *g != d) => {
                        joined.lock().unwrap_or_else(|e| e.into_inner()).push(d);
                        out.peers.push((d, s, key));
                        continue;
                    }
                    Ok(Ok(a)) => format!("a second connection claiming rank {}", a.peer),
                    Ok(Err(e @ Error::Startup { .. })) => {
                        out.fatal = Some(e);
                        break;
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "authentication timed out".to_string(),
                };
                out.dropped += 1;
                warn.warn(Instant::now(), || format!("rank {rank}: dropped connection from {from}: {why}"));
            }
        }
    }
    out.warnings = warn.emitted;
    out
}

impl Transport {
    /// Connects to every peer, authenticates each connection and runs the three-step handshake.
    /// Must run inside the tokio runtime. `hosts[r]` is rank r's address.
    pub async fn connect(
        cfg: &Config,
        hosts: &[SocketAddr],
        rank: usize,
        job: u64,
        secret: &[u8],
        listener: TcpListener,
        pool: Pool,
    ) -> Result<Transport> {
        auth::check_secret(secret)?;
        let size = hosts.len();
        let fail = |msg: String| Error::Startup { rank, msg };
        if rank >= size {
            return Err(fail(format!("rank {rank} is outside the {size} hosts")));
        }
        let deadline = Instant::now() + cfg.connect_timeout;
        let limits = Limits::from_config(cfg);
        let mut streams: Vec<Option<(TcpStream, Option<SessionKey>)>> =
            (0..size).map(|_| None).collect();

        // Accept the higher ranks in the background while dialing the lower ones.
        let joined = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut acceptor = tokio::spawn(accept_all(
            listener,
            rank,
            size,
            job,
            secret.to_vec(),
            cfg.frame_mac,
            limits.clone(),
            joined.clone(),
        ));
        for (peer, addr) in hosts.iter().enumerate().take(rank) {
            // A handshake cut short (the peer's accept loop was busy, or it restarted) is
            // dialed again with backoff until the connect timeout.
            let mut backoff = Duration::from_millis(20);
            let (s, key) = loop {
                let mut s = dial(*addr, cfg, deadline)
                    .await
                    .map_err(|e| fail(format!("rank {peer}: {e}")))?;
                let left = deadline.saturating_duration_since(Instant::now());
                let auth = dial_auth(&mut s, rank, peer, job, secret, cfg.frame_mac);
                let why = match tokio::time::timeout(left, auth).await {
                    Ok(Ok(key)) => break (s, key),
                    Ok(Err(e @ Error::Startup { .. })) => return Err(e),
                    Ok(Err(e)) => format!("connection to rank {peer} at {addr}: {e}"),
                    Err(_) => format!("rank {peer} at {addr} did not answer the handshake"),
                };
                if Instant::now() + backoff >= deadline {
                    return Err(fail(why));
                }
                tracing::debug!(
                    "rank {rank}: {why}; dialing again in {} ms",
                    backoff.as_millis()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            };
            streams[peer] = Some((s, key));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let accepted = match tokio::time::timeout(left, &mut acceptor).await {
            Ok(Ok(Accepted { fatal: Some(e), .. })) => return Err(e),
            Ok(Ok(got)) => got.peers,
            Ok(Err(e)) => return Err(fail(format!("accept task failed: {e}"))),
            Err(_) => {
                acceptor.abort();
                let joined = joined.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let missing: Vec<String> = (rank + 1..size)
                    .filter(|r| !joined.contains(r))
                    .map(|r| format!("rank {r} ({})", hosts[r]))
                    .collect();
                return Err(fail(format!(
                    "{} did not connect within {} s",
                    missing.join(", "),
                    cfg.connect_timeout.as_secs_f64()
                )));
            }
        };
        for (d, s, key) in accepted {
            streams[d] = Some((s, key));
        }

        let mailbox = Arc::new(Mailbox::new(size));
        let mut writers = Vec::with_capacity(size);
        let mut inbound = Vec::with_capacity(size);
        let mut tasks = Vec::new();
        for (peer, s) in streams.into_iter().enumerate() {
            let Some((s, key)) = s else {
                writers.push(None);
                inbound.push(None);
                continue;
            };
            s.set_nodelay(true)
                .map_err(|e| Error::io("TCP_NODELAY", e))?;
            let (rd, wr) = s.into_split();
            // Rank r dialed every lower rank: it is the dialer on those connections.
            let dialer = rank > peer;
            let seal = key.as_ref().map(|k| k.direction(dialer));
            writers.push(Some(tokio::sync::Mutex::new(Some(Conn::new(wr, seal)))));
            let open = key.as_ref().map(|k| k.direction(!dialer));
            let inb = Arc::new(Inbound::new(
                peer,
                job,
                rd,
                open,
                mailbox.clone(),
                pool.clone(),
                limits.clone(),
            ));
            tasks.push(tokio::spawn(read_loop(inb.clone())));
            inbound.push(Some(inb));
        }
        let writers = Arc::new(writers);
        let every = heartbeat_interval(cfg.op_timeout);
        tasks.push(tokio::spawn(heartbeats(writers.clone(), rank, job, every)));
        let link = TcpMesh {
            writers,
            inbound,
            tasks: Mutex::new(tasks),
        };
        let t = Transport::new(rank, size, job, cfg.op_timeout, mailbox, Box::new(link));
        t.set_event_window(cfg.event_window);
        handshake::run(&t, cfg.connect_timeout).await?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Kind;
    use tokio::io::AsyncReadExt;

    /// A frame that `try_frame` can write only in part leaves its tail queued; nothing else
    /// passes it (the next `try_frame` waits), and a flush writes it out, so the peer reads
    /// every frame whole and in order.
    #[test]
    fn a_short_write_queues_the_rest_of_the_frame_in_order() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (mut b, _) = l.accept().await.unwrap();
            let (_ra, wa) = a.into_split();
            let mut conn = Conn::new(wa, None);
            let mut expected = Vec::new();
            let mut got = Vec::new();
            let mut short = false;
            for i in 0..10_000u32 {
                let payload = vec![(i % 251) as u8; 60 * 1024 - 7];
                let hdr = Header::control(Kind::Heartbeat, 1, 7, payload.len());
                match conn.try_frame(&hdr, &[&payload[..1000], &payload[1000..]]) {
                    TrySend::Sent => {}
                    TrySend::Rest => short = true,
                    TrySend::NotNow => {
                        // The socket is full: take some bytes off the other end and retry.
                        let mut chunk = vec![0u8; 3001];
                        let n = b.read(&mut chunk).await.unwrap();
                        got.extend_from_slice(&chunk[..n]);
                        continue;
                    }
                    TrySend::Failed(e) => panic!("{e}"),
                }
                let mut hb = [0u8; COMPACT_MAX];
                let n = hdr.encode_compact(&mut hb);
                expected.extend_from_slice(&hb[..n]);
                expected.extend_from_slice(&payload);
                if short {
                    // Nothing may pass the queued tail.
                    assert!(matches!(conn.try_frame(&hdr, &[&payload]), TrySend::NotNow));
                    break;
                }
            }
            assert!(short, "no short write in 10,000 frames of 60 KiB");
            let total = expected.len();
            let reader = tokio::spawn(async move {
                let mut rest = vec![0u8; total - got.len()];
                b.read_exact(&mut rest).await.unwrap();
                got.extend_from_slice(&rest);
                got
            });
            conn.flush().await.unwrap();
            let got = tokio::time::timeout(Duration::from_secs(20), reader)
                .await
                .expect("the queued tail never arrived")
                .unwrap();
            assert!(
                got == expected,
                "the stream differs from the frames written"
            );
        });
    }
}
