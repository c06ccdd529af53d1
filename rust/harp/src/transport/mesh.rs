//! The TCP implementation of [`Link`]: one authenticated connection per pair of workers that
//! talk, opened when it is first needed (every rank connects to rank 0 at start-up), a read
//! loop per connection and timed, locked writers.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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
use crate::wire::{Header, Kind, COMPACT_MAX};

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

/// Where the connection to one peer stands. Connections are made on first use: the first
/// send to a peer dials it, and a receive that waits for a peer that has not connected dials
/// it after one heartbeat interval. When both ends dial at once, the connection dialed by the
/// higher rank is kept: the acceptor answers every authenticated dial with a verdict
/// ([`auth::write_verdict`]) before either side sends a frame on it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// Not connected and not wanted yet.
    Idle,
    /// A receive waits for the peer: it is dialed after one heartbeat interval unless it
    /// connects first.
    Expecting,
    /// This worker is dialing the peer.
    Dialing,
    /// The peer refused this worker's dial because its own dial to this worker wins the tie;
    /// that connection is on its way.
    Refused,
    /// An authenticated connection from the peer is being taken.
    Accepting,
    Open,
    /// Dialing failed for this reason (the peer is marked gone once the job has started).
    Failed(String),
    /// This worker has closed its connections.
    Closed,
}

/// A worker's connections to its peers, opened as they are first needed.
struct Peers {
    rank: usize,
    size: usize,
    job: u64,
    hosts: Vec<SocketAddr>,
    secret: Arc<[u8]>,
    cfg: Config,
    limits: Limits,
    mailbox: Arc<Mailbox>,
    pool: Pool,
    stages: Mutex<Vec<Stage>>,
    /// Woken whenever a stage changes (or a start-up error is recorded).
    changed: tokio::sync::Notify,
    /// The write half of each connection (`None` inside until it is open; the outer `None`
    /// is this worker itself).
    writers: Arc<Vec<Option<Writer>>>,
    /// The receiving side of each open connection.
    inbound: Vec<OnceLock<Arc<Inbound>>>,
    /// The accept loop, the dialers, the read loops and the heartbeat task.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// A start-up error found while authenticating (a peer with the other `frame_mac`
    /// setting).
    fatal: Mutex<Option<Error>>,
    /// Start-up is over: every worker listens, so a refused dial means the peer is gone.
    started: AtomicBool,
    /// Connections opened so far.
    opened: AtomicUsize,
}

impl Peers {
    fn new(
        cfg: &Config,
        hosts: &[SocketAddr],
        rank: usize,
        job: u64,
        secret: &[u8],
        mailbox: Arc<Mailbox>,
        pool: Pool,
    ) -> Arc<Peers> {
        let size = hosts.len();
        Arc::new(Peers {
            rank,
            size,
            job,
            hosts: hosts.to_vec(),
            secret: secret.into(),
            cfg: cfg.clone(),
            limits: Limits::from_config(cfg),
            mailbox,
            pool,
            stages: Mutex::new(vec![Stage::Idle; size]),
            changed: tokio::sync::Notify::new(),
            writers: Arc::new(
                (0..size)
                    .map(|p| (p != rank).then(|| tokio::sync::Mutex::new(None)))
                    .collect(),
            ),
            inbound: (0..size).map(|_| OnceLock::new()).collect(),
            tasks: Mutex::new(Vec::new()),
            fatal: Mutex::new(None),
            started: AtomicBool::new(false),
            opened: AtomicUsize::new(0),
        })
    }

    fn stages(&self) -> std::sync::MutexGuard<'_, Vec<Stage>> {
        self.stages.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        let t = tokio::spawn(f);
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(t);
    }

    /// Sets `peer`'s stage when it is one of `from`; whether it was.
    fn shift(&self, peer: usize, from: &[Stage], to: Stage) -> bool {
        let moved = {
            let mut st = self.stages();
            let moved = from.contains(&st[peer]);
            if moved {
                st[peer] = to;
            }
            moved
        };
        if moved {
            self.changed.notify_waiters();
        }
        moved
    }

    /// Starts dialing `peer` unless it is connected or being connected.
    fn want(self: &Arc<Self>, peer: usize) {
        if peer == self.rank || !self.shift(peer, &[Stage::Idle, Stage::Expecting], Stage::Dialing)
        {
            return;
        }
        // Its silence counts from now, not from start-up.
        self.mailbox.seen(peer);
        let me = self.clone();
        self.spawn(async move { me.dial(peer).await });
    }

    /// A receive waits for `peer`: unless it connects within one heartbeat interval (it usually
    /// does, as the sender dials), this worker dials it.
    fn expect(self: &Arc<Self>, peer: usize) {
        if peer == self.rank || !self.shift(peer, &[Stage::Idle], Stage::Expecting) {
            return;
        }
        self.mailbox.seen(peer);
        let me = self.clone();
        self.spawn(async move {
            tokio::time::sleep(heartbeat_interval(me.cfg.op_timeout)).await;
            if me.shift(peer, &[Stage::Expecting], Stage::Idle) {
                me.want(peer);
            }
        });
    }

    /// Waits until the connection to `peer` is open, dialing it if nobody is.
    async fn ready(self: &Arc<Self>, peer: usize) -> std::io::Result<()> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match &self.stages()[peer] {
                Stage::Open => return Ok(()),
                Stage::Closed => return Err(closed()),
                Stage::Failed(why) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        why.clone(),
                    ))
                }
                _ => {}
            }
            self.want(peer);
            changed.await;
        }
    }

    /// Dials `peer`, authenticates and waits for its verdict; a handshake cut short (the
    /// peer's accept loop was busy) is dialed again with backoff until the connect timeout.
    async fn dial(self: Arc<Self>, peer: usize) {
        let addr = self.hosts[peer];
        let deadline = Instant::now() + self.cfg.connect_timeout;
        // Before start-up is over the peer may not listen yet.
        let retry = !self.started.load(Ordering::Acquire);
        let mut backoff = Duration::from_millis(20);
        let (rank, job, mac) = (self.rank, self.job, self.cfg.frame_mac);
        let why = loop {
            let mut s = match dial(addr, &self.cfg, deadline, retry).await {
                Ok(s) => s,
                Err(e) => break format!("rank {peer}: {e}"),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let auth = async {
                let key = dial_auth(&mut s, rank, peer, job, &self.secret, mac).await?;
                let welcome = auth::read_verdict(&mut s, job).await?;
                Ok::<_, Error>((key, welcome))
            };
            let why = match tokio::time::timeout(left, auth).await {
                Ok(Ok((key, true))) => return self.install(peer, s, key, true).await,
                Ok(Ok((_, false))) => {
                    // The peer's own dial to this worker wins the tie.
                    self.shift(peer, &[Stage::Dialing], Stage::Refused);
                    return;
                }
                Ok(Err(e @ Error::Startup { .. })) => {
                    let why = e.to_string();
                    self.fatal
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(e);
                    break why;
                }
                Ok(Err(e)) => format!("connection to rank {peer} at {addr}: {e}"),
                Err(_) => format!("rank {peer} at {addr} did not answer the handshake"),
            };
            if Instant::now() + backoff >= deadline {
                break why;
            }
            tracing::debug!(
                "rank {rank}: {why}; dialing again in {} ms",
                backoff.as_millis()
            );
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        };
        self.shift(
            peer,
            &[Stage::Dialing, Stage::Refused],
            Stage::Failed(why.clone()),
        );
        if self.started.load(Ordering::Acquire) {
            self.mailbox
                .mark_gone(peer, format!("could not connect: {why}"));
        }
    }

    /// Whether an authenticated connection from `peer` is taken: yes unless this worker is
    /// connected to it already, or is dialing it from the higher rank (that dial wins).
    fn admit(&self, peer: usize) -> bool {
        let take = {
            let mut st = self.stages();
            let take = match st[peer] {
                Stage::Idle | Stage::Expecting | Stage::Refused => true,
                Stage::Dialing => peer > self.rank,
                _ => false,
            };
            if take {
                st[peer] = Stage::Accepting;
            }
            take
        };
        if take {
            self.changed.notify_waiters();
        }
        take
    }

    /// Answers an authenticated connection from `peer` and, when it is taken, opens it.
    async fn answer(self: Arc<Self>, peer: usize, mut s: TcpStream, key: Option<SessionKey>) {
        let take = self.admit(peer);
        let told = tokio::time::timeout(
            self.limits.auth_timeout,
            auth::write_verdict(&mut s, self.rank, self.job, take),
        )
        .await;
        if !take {
            return;
        }
        match told {
            Ok(Ok(())) => self.install(peer, s, key, false).await,
            _ => {
                // The dialer will try again, or this worker dials when it needs the peer.
                self.shift(peer, &[Stage::Accepting], Stage::Idle);
            }
        }
    }

    /// Opens the connection `s` to `peer` (dialed by this worker when `dialer`): its writer,
    /// its reader task, and the stage.
    async fn install(&self, peer: usize, s: TcpStream, key: Option<SessionKey>, dialer: bool) {
        if self.stages()[peer] == Stage::Closed {
            return;
        }
        if let Err(e) = s.set_nodelay(true) {
            tracing::debug!("rank {}: TCP_NODELAY to rank {peer}: {e}", self.rank);
        }
        let (rd, wr) = s.into_split();
        let seal = key.as_ref().map(|k| k.direction(dialer));
        let open = key.as_ref().map(|k| k.direction(!dialer));
        *self.writer(peer).lock().await = Some(Conn::new(wr, seal));
        let inb = Arc::new(Inbound::new(
            peer,
            self.job,
            rd,
            open,
            self.mailbox.clone(),
            self.pool.clone(),
            self.limits.clone(),
        ));
        let _ = self.inbound[peer].set(inb.clone());
        self.spawn(read_loop(inb));
        self.mailbox.seen(peer);
        self.opened.fetch_add(1, Ordering::Relaxed);
        let open_now = [
            Stage::Idle,
            Stage::Expecting,
            Stage::Dialing,
            Stage::Refused,
            Stage::Accepting,
        ];
        self.shift(peer, &open_now, Stage::Open);
    }

    /// Waits until the connections to every one of `need` are open (start-up).
    async fn open_all(self: &Arc<Self>, need: &[usize], dial: bool) -> Result<()> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(e) = self.fatal.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return Err(e);
            }
            let mut all = true;
            for &p in need {
                let st = self.stages()[p].clone();
                match st {
                    Stage::Open => continue,
                    Stage::Failed(why) => {
                        return Err(Error::Startup {
                            rank: self.rank,
                            msg: why,
                        })
                    }
                    _ if dial => self.want(p),
                    _ => {}
                }
                all = false;
            }
            if all {
                return Ok(());
            }
            changed.await;
        }
    }

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

/// The connections of one worker to its peers.
struct TcpMesh {
    peers: Arc<Peers>,
}

/// Waits until the peer has acknowledged every byte written to `w` (Linux's `SIOCOUTQ` reads 0).
/// Closing a socket that still has unread input resets the connection, and a reset throws away
/// what the send queue still holds: without this wait, the end of the last operation's data
/// could be lost to a peer still reading it. The caller bounds the wait. A connection the peer
/// has already closed (it left first: our last frame drew a reset) acknowledges nothing more:
/// no wait then.
async fn acknowledged(w: &OwnedWriteHalf) {
    let fd = w.as_ref().as_raw_fd();
    loop {
        if closed_by_peer(fd) {
            return;
        }
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

/// Whether the TCP connection of `fd` is over (state `CLOSE`: reset by the peer), so that
/// nothing in its send queue will ever be acknowledged.
fn closed_by_peer(fd: std::os::fd::RawFd) -> bool {
    // SAFETY: an all-zero tcp_info is a valid value of this plain C struct.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: TCP_INFO writes at most `len` bytes into `info`; `fd` is an open socket.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    // 7 is TCP_CLOSE in Linux's enum of TCP states (include/net/tcp_states.h).
    r == 0 && info.tcpi_state == 7
}

/// The error of a write to a connection this worker has closed.
fn closed() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "connection already closed",
    )
}

impl Link for TcpMesh {
    fn send<'a>(
        &'a self,
        dst: usize,
        hdr: Header,
        parts: &'a [&'a [u8]],
    ) -> Io<'a, std::io::Result<()>> {
        Box::pin(async move {
            self.peers.ready(dst).await?;
            let mut g = self.peers.writer(dst).lock().await;
            let wr = g.as_mut().ok_or_else(closed)?;
            wr.write_frame(&hdr, parts).await?;
            wr.flush().await
        })
    }

    fn try_send(&self, dst: usize, hdr: Header, parts: &[&[u8]]) -> TrySend {
        let Ok(mut g) = self.peers.writer(dst).try_lock() else {
            return TrySend::NotNow;
        };
        match g.as_mut() {
            Some(c) => c.try_frame(&hdr, parts),
            // Not open yet, or closed: the waiting path tells which.
            None => TrySend::NotNow,
        }
    }

    fn pull(&self, peer: usize) -> bool {
        self.peers
            .inbound
            .get(peer)
            .and_then(OnceLock::get)
            .is_some_and(|i| i.pull())
    }

    fn expect(&self, peer: usize) {
        self.peers.expect(peer);
    }

    fn connections(&self) -> Option<usize> {
        Some(self.peers.opened.load(Ordering::Relaxed))
    }

    fn open_peers(&self) -> Vec<usize> {
        let st = self.peers.stages();
        (0..st.len()).filter(|&p| st[p] == Stage::Open).collect()
    }

    fn drain<'a>(&'a self, dst: usize) -> Io<'a, std::io::Result<()>> {
        Box::pin(async move {
            let mut g = self.peers.writer(dst).lock().await;
            g.as_mut().ok_or_else(closed)?.flush().await
        })
    }

    fn close<'a>(&'a self, last: Header, body: &'a [u8]) -> Io<'a, ()> {
        Box::pin(async move {
            {
                let mut st = self.peers.stages();
                st.iter_mut().for_each(|s| *s = Stage::Closed);
            }
            self.peers.changed.notify_waiters();
            let sends = self.peers.writers.iter().flatten().map(|w| async move {
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
            self.peers.stop_tasks();
        })
    }
}

impl Drop for TcpMesh {
    fn drop(&mut self) {
        self.peers.stop_tasks();
    }
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

/// Accepts and authenticates the peers that dial this worker, for as long as it runs, and
/// hands each authenticated connection to [`Peers::answer`]. A connection that fails to
/// authenticate within `limits.auth_timeout` is dropped; the real peer can still connect.
/// At most `limits.max_pending` connections authenticate at once: for a new one, the oldest
/// that has sent no valid hello is dropped, never one past its hello (when all are past it,
/// accepting waits for one to finish, and the dialers wait in the listen backlog). Accept
/// errors back off (doubling, and dropping the oldest pending connection without a hello when
/// out of descriptors), and warnings are rate-limited, so idle strangers can neither keep the
/// real peers out nor make the worker spin or flood its log, and hundreds of real peers
/// dialing at once all get in. A peer that proves the secret with the other `frame_mac`
/// setting is recorded as the start-up error ([`Peers::fatal`]).
async fn accept_loop(listener: TcpListener, peers: Arc<Peers>) {
    let (rank, size, job, frame_mac) = (peers.rank, peers.size, peers.job, peers.cfg.frame_mac);
    let limits = peers.limits.clone();
    let mut warn = Warn::new(limits.warn_every);
    let mut pending = tokio::task::JoinSet::new();
    let mut order = Pending::new();
    let max = limits.max_pending.max(1);
    let mut backoff = limits.accept_backoff_min;
    let mut paused: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            // Full of connections that all sent their hello: wait for one to finish.
            acc = listener.accept(), if paused.is_none() && (order.len() < max || has_idle(&order)) => match acc {
                Ok((mut s, from)) => {
                    backoff = limits.accept_backoff_min;
                    // The oldest without a hello; if all have sent one (since the check above),
                    // the new connection waits its turn beside them.
                    while order.len() >= max && drop_oldest_idle(&mut order) {
                        warn.warn(Instant::now(), || format!(
                            "rank {rank}: dropped the oldest connection that sent no hello (more \
                             than {max} pending)"
                        ));
                    }
                    let secret = peers.secret.clone();
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
                    if out_of_descriptors(&e) {
                        drop_oldest_idle(&mut order);
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
                        // Aborted (pushed out) or panicked: nothing to keep.
                        order.retain(|(h, _)| h.id() != e.id());
                        continue;
                    }
                };
                order.retain(|(h, _)| h.id() != id);
                let why = match r {
                    Ok(Ok(Authed { peer, key })) => {
                        let p = peers.clone();
                        peers.spawn(p.answer(peer, s, key));
                        continue;
                    }
                    Ok(Err(e @ Error::Startup { .. })) => {
                        let why = e.to_string();
                        peers.fatal.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                        peers.changed.notify_waiters();
                        why
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "authentication timed out".to_string(),
                };
                warn.warn(Instant::now(), || format!("rank {rank}: dropped connection from {from}: {why}"));
            }
        }
    }
}

impl Transport {
    /// Starts the worker's connections: its accept loop, then (ranks above 0) a connection to
    /// rank 0, or (rank 0) the connections of every other rank, and the three-step handshake.
    /// Every other connection is opened when it is first needed. Must run inside the tokio
    /// runtime. `hosts[r]` is rank r's address.
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
        if rank >= size {
            return Err(Error::Startup {
                rank,
                msg: format!("rank {rank} is outside the {size} hosts"),
            });
        }
        let deadline = Instant::now() + cfg.connect_timeout;
        let mailbox = Arc::new(Mailbox::new(size));
        let peers = Peers::new(cfg, hosts, rank, job, secret, mailbox.clone(), pool);
        peers.spawn(accept_loop(listener, peers.clone()));
        // Rank 0 waits for every other rank; each other rank dials rank 0 (its own dial
        // ends at the connect timeout with the reason, a moment before this wait does).
        let (need, dial): (Vec<usize>, bool) = if rank == 0 {
            ((1..size).collect(), false)
        } else {
            (vec![0], true)
        };
        let wait_until = if dial {
            deadline + Duration::from_secs(2)
        } else {
            deadline
        };
        // Heartbeats from the start: the workers connected to rank 0 wait for its handshake
        // while it waits for the others, and must not take it for silent.
        let every = heartbeat_interval(cfg.op_timeout.min(cfg.connect_timeout));
        peers.spawn(heartbeats(peers.writers.clone(), rank, job, every));
        let waited = tokio::time::timeout_at(wait_until.into(), peers.open_all(&need, dial)).await;
        let failed = match waited {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => {
                let st = peers.stages();
                let missing: Vec<String> = need
                    .iter()
                    .filter(|&&r| st[r] != Stage::Open)
                    .map(|&r| format!("rank {r} ({})", hosts[r]))
                    .collect();
                Some(Error::Startup {
                    rank,
                    msg: format!(
                        "{} did not connect within {} s",
                        missing.join(", "),
                        cfg.connect_timeout.as_secs_f64()
                    ),
                })
            }
        };
        let link = TcpMesh { peers };
        if let Some(e) = failed {
            // The workers already connected (to rank 0) learn why at once.
            let why = e.to_string();
            let h = Header::control(Kind::Abort, rank, job, why.len());
            link.close(h, why.as_bytes()).await;
            return Err(e);
        }
        link.peers.started.store(true, Ordering::Release);
        let t = Transport::new(rank, size, job, cfg.op_timeout, mailbox, Box::new(link));
        t.set_event_window(cfg.event_window);
        handshake::run(&t, cfg.connect_timeout)
            .await
            .map_err(|e| match e {
                // Rank 0 failed its start-up (it names the rank that did not connect).
                Error::PeerLost { peer, reason, .. } => Error::Startup {
                    rank,
                    msg: format!("rank {peer} is gone: {reason}"),
                },
                e => e,
            })?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// The last worker to leave writes its `Bye` to a peer that has already closed its end: the
    /// peer's kernel answers with a reset, and the frame stays counted in the send queue for
    /// ever. The wait for its acknowledgement ends at once instead of at the close timeout.
    #[test]
    fn no_wait_for_an_acknowledgement_from_a_peer_that_has_left() {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let dialed = TcpStream::connect(l.local_addr().unwrap());
            let (ours, theirs) = tokio::join!(dialed, l.accept());
            let (mut rd, mut wr) = ours.unwrap().into_split();
            // The peer leaves: its end is closed, its FIN reaches us.
            drop(theirs.unwrap());
            let mut b = [0u8; 1];
            assert_eq!(rd.read(&mut b).await.unwrap(), 0);
            // Our Bye draws the reset.
            let _ = wr.write_all(b"bye-frame!").await;
            let _ = wr.flush().await;
            let fd = wr.as_ref().as_raw_fd();
            let deadline = Instant::now() + Duration::from_secs(20);
            while !closed_by_peer(fd) {
                assert!(Instant::now() < deadline, "no reset from the closed peer");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let _ = wr.shutdown().await;
            // Bounded only so that a regression fails instead of hanging the test run: the
            // close itself bounds this wait at 2 s, so an unbounded wait for an acknowledgement
            // that never comes would show up here as a timeout.
            tokio::time::timeout(Duration::from_secs(20), acknowledged(&wr))
                .await
                .expect("waited for an acknowledgement from a peer that has left");
        });
    }

    /// Two workers that dial each other at the same moment, many times over, end with one
    /// connection each (the one the higher rank dialed), and a frame crosses it both ways.
    #[test]
    fn workers_dialing_each_other_at_once_keep_one_connection() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            for round in 0..20 {
                let ls = [
                    TcpListener::bind("127.0.0.1:0").await.unwrap(),
                    TcpListener::bind("127.0.0.1:0").await.unwrap(),
                ];
                let hosts: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
                let cfg = Config::default();
                let secret = b"both-dial-secret-0123456789";
                let peers: Vec<Arc<Peers>> = (0..2)
                    .map(|r| {
                        let mb = Arc::new(Mailbox::new(2));
                        Peers::new(&cfg, &hosts, r, 7, secret, mb, Pool::default())
                    })
                    .collect();
                for (p, l) in peers.iter().zip(ls) {
                    p.spawn(accept_loop(l, p.clone()));
                    p.started.store(true, Ordering::Release);
                }
                // Both want the other at once.
                peers[0].want(1);
                peers[1].want(0);
                let (a, b) = tokio::join!(peers[0].ready(1), peers[1].ready(0));
                a.unwrap();
                b.unwrap();
                // Let a losing dial finish: it must not open a second connection.
                tokio::time::sleep(Duration::from_millis(20)).await;
                for p in &peers {
                    assert_eq!(p.opened.load(Ordering::Relaxed), 1, "round {round}");
                }
                let links: Vec<TcpMesh> =
                    peers.into_iter().map(|peers| TcpMesh { peers }).collect();
                let sent = Instant::now();
                for (from, to) in [(0usize, 1usize), (1, 0)] {
                    let h = Header::control(Kind::Heartbeat, from, 7, 0);
                    links[from].send(to, h, &[]).await.unwrap();
                }
                for (r, l) in links.iter().enumerate() {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    // Heard once the peer was last seen after the sends began (a busy machine
                    // may run this check long after the frame arrived). Silence is counted in
                    // whole milliseconds; before the frame the peer was last seen at least
                    // 20 ms before the sends.
                    while l.peers.mailbox.silence(1 - r) > sent.elapsed() + Duration::from_millis(5)
                    {
                        assert!(Instant::now() < deadline, "rank {r} heard nothing");
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    let gone = l.peers.mailbox.gone(1 - r);
                    assert!(gone.is_none(), "round {round}: {gone:?}");
                }
            }
        });
    }

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
