//! TCP transport: one authenticated connection per pair of workers, a reader task per
//! connection that files incoming frames into a mailbox keyed by (operation sequence, sender,
//! tag), and timed, locked writers.
//!
//! Start-up:
//! 1. Every worker listens; rank r dials every rank below it and accepts every rank above it.
//! 2. Each new connection is authenticated with the job secret by a mutual HMAC-SHA256
//!    challenge-response (`Hello` → `Challenge` → `Proof`). A peer that cannot prove the secret,
//!    names another job or a rank that is not expected is logged and dropped; the real peer can
//!    still connect afterwards.
//! 3. The three-step handshake of the Harp paper: the master pings every worker, each answers,
//!    then the master tells everyone the job is initialised.
//!
//! Failure handling: a reader that hits end-of-file, a reset or an `Abort` frame marks the
//! sender gone and wakes every waiter; a waiter whose peer is gone (and has nothing queued)
//! fails at once, and every wait has a deadline. A failing worker sends `Abort` with its error
//! to all peers and closes its connections, so a failure spreads to every worker quickly and
//! with the original cause in the message.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::error::{Error, OpContext, Result};
use crate::pool::{Buf, Pool};
use crate::wire::{self, Header, Kind, Op, HEADER_LEN};

/// Largest frame payload accepted from a peer (1 TiB): protects against garbage lengths.
const MAX_FRAME: u64 = 1 << 40;

/// A received frame.
#[derive(Debug)]
pub struct Frame {
    pub hdr: Header,
    pub body: Buf,
}

type Key = (u64, u32, u32); // (seq, src, tag)

#[derive(Default)]
struct MbState {
    queues: HashMap<Key, VecDeque<Frame>>,
    gone: Vec<Option<String>>,
}

struct Mailbox {
    state: Mutex<MbState>,
    notify: Vec<Notify>,
    /// Woken on every arrival (for receives that accept any sender).
    any: Notify,
    /// When each peer last sent anything (milliseconds since `epoch`).
    last_seen: Vec<AtomicU64>,
    epoch: Instant,
}

impl Mailbox {
    fn seen(&self, peer: usize) {
        self.last_seen[peer].store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn silence(&self, peer: usize) -> Duration {
        let last = Duration::from_millis(self.last_seen[peer].load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, MbState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn push(&self, frame: Frame) {
        let src = frame.hdr.src as usize;
        let key = (frame.hdr.seq, frame.hdr.src, frame.hdr.tag);
        self.lock().queues.entry(key).or_default().push_back(frame);
        self.notify[src].notify_waiters();
        self.any.notify_waiters();
    }
    fn mark_gone(&self, src: usize, reason: String) {
        let mut st = self.lock();
        if st.gone[src].is_none() {
            st.gone[src] = Some(reason);
        }
        drop(st);
        self.notify[src].notify_waiters();
        self.any.notify_waiters();
    }
}

type Writer = tokio::sync::Mutex<Option<BufWriter<OwnedWriteHalf>>>;

/// The connections of one worker to all its peers.
pub struct Transport {
    pub rank: usize,
    pub size: usize,
    pub job: u64,
    op_timeout: Duration,
    writers: Arc<Vec<Option<Writer>>>,
    mailbox: Arc<Mailbox>,
    readers: Mutex<Vec<JoinHandle<()>>>,
}

/// Job id on the wire: FNV-1a of the job name.
pub fn job_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Binds a listening socket with the configured buffer sizes (they are inherited by accepted
/// connections). Must run inside the runtime.
pub fn listen(addr: SocketAddr, cfg: &Config) -> Result<TcpListener> {
    let sock = new_socket(addr, cfg).map_err(|e| Error::io(format!("socket for {addr}"), e))?;
    sock.set_reuseaddr(true)
        .map_err(|e| Error::io("SO_REUSEADDR", e))?;
    sock.bind(addr)
        .map_err(|e| Error::io(format!("cannot listen on {addr}"), e))?;
    sock.listen(1024)
        .map_err(|e| Error::io(format!("cannot listen on {addr}"), e))
}

fn new_socket(addr: SocketAddr, cfg: &Config) -> std::io::Result<TcpSocket> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(n) = cfg.send_buffer {
        sock.set_send_buffer_size(n)?;
    }
    if let Some(n) = cfg.recv_buffer {
        sock.set_recv_buffer_size(n)?;
    }
    if let Some(cc) = &cfg.tcp_congestion {
        set_congestion(&sock, cc)?;
    }
    Ok(sock)
}

/// Sets the socket's TCP congestion control (Linux `TCP_CONGESTION`). Accepted connections
/// inherit it from their listener.
#[cfg(target_os = "linux")]
fn set_congestion(sock: &impl std::os::fd::AsRawFd, name: &str) -> std::io::Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes, which outlive the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    let allowed = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
        .unwrap_or_default();
    Err(std::io::Error::new(
        e.kind(),
        format!(
            "cannot use TCP congestion control {name:?} ({e}); allowed here: {}",
            allowed.trim()
        ),
    ))
}

#[cfg(not(target_os = "linux"))]
fn set_congestion(_sock: &impl std::os::fd::AsRawFd, name: &str) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("TCP congestion control {name:?}: only supported on Linux"),
    ))
}

/// The socket's TCP congestion control (Linux), for tests and diagnostics.
#[cfg(target_os = "linux")]
pub fn congestion_of(sock: &impl std::os::fd::AsRawFd) -> std::io::Result<String> {
    let mut buf = [0u8; 16];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf and len describe a writable buffer of len bytes.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let b = &buf[..len as usize];
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    Ok(String::from_utf8_lossy(&b[..end]).into_owned())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Hello {
    rank: u32,
    nonce: [u8; 16],
}
#[derive(serde::Serialize, serde::Deserialize)]
struct Challenge {
    rank: u32,
    nonce: [u8; 16],
    mac: Vec<u8>,
}
#[derive(serde::Serialize, serde::Deserialize)]
struct Proof {
    mac: Vec<u8>,
}
#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
enum Handshake {
    Ping { workers: u32 },
    Pong { rank: u32 },
    Initialized,
}

fn mac(
    secret: &[u8],
    role: &[u8],
    job: u64,
    nonce: &[u8; 16],
    dialer: u32,
    acceptor: u32,
) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(role);
    m.update(&job.to_le_bytes());
    m.update(nonce);
    m.update(&dialer.to_le_bytes());
    m.update(&acceptor.to_le_bytes());
    m.finalize().into_bytes().to_vec()
}

fn verify(
    secret: &[u8],
    role: &[u8],
    job: u64,
    nonce: &[u8; 16],
    dialer: u32,
    acceptor: u32,
    tag: &[u8],
) -> bool {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(role);
    m.update(&job.to_le_bytes());
    m.update(nonce);
    m.update(&dialer.to_le_bytes());
    m.update(&acceptor.to_le_bytes());
    m.verify_slice(tag).is_ok()
}

fn nonce() -> [u8; 16] {
    let mut n = [0u8; 16];
    getrandom::getrandom(&mut n).expect("the OS random source works");
    n
}

async fn write_msg<T: serde::Serialize>(
    s: &mut TcpStream,
    kind: Kind,
    src: usize,
    job: u64,
    v: &T,
) -> std::io::Result<()> {
    let body = wire::encode(v);
    s.write_all(&Header::control(kind, src, job, body.len()).encode())
        .await?;
    s.write_all(&body).await?;
    s.flush().await
}

async fn read_msg<T: serde::de::DeserializeOwned>(
    s: &mut TcpStream,
    kind: Kind,
    job: u64,
) -> Result<(Header, T)> {
    let mut hb = [0u8; HEADER_LEN];
    s.read_exact(&mut hb)
        .await
        .map_err(|e| Error::io("reading handshake", e))?;
    let h = Header::decode(&hb)?;
    if h.kind != kind {
        return Err(Error::Protocol(format!(
            "expected {kind:?}, got {:?}",
            h.kind
        )));
    }
    if h.job != job {
        return Err(Error::Protocol(format!(
            "peer belongs to another job ({:#x})",
            h.job
        )));
    }
    if h.len > 4096 {
        return Err(Error::Protocol(format!(
            "handshake message of {} bytes is too long",
            h.len
        )));
    }
    let mut body = vec![0u8; h.len as usize];
    s.read_exact(&mut body)
        .await
        .map_err(|e| Error::io("reading handshake", e))?;
    Ok((h, wire::decode(&body)?))
}

/// Acceptor side of the authentication; returns the authenticated dialer's rank.
async fn accept_auth(
    s: &mut TcpStream,
    rank: usize,
    size: usize,
    job: u64,
    secret: &[u8],
) -> Result<usize> {
    let (_, hello): (_, Hello) = read_msg(s, Kind::Hello, job).await?;
    let d = hello.rank as usize;
    if d <= rank || d >= size {
        return Err(Error::Protocol(format!(
            "unexpected rank {d} dialed rank {rank}"
        )));
    }
    let my_nonce = nonce();
    let ch = Challenge {
        rank: rank as u32,
        nonce: my_nonce,
        mac: mac(
            secret,
            b"harp-acceptor",
            job,
            &hello.nonce,
            d as u32,
            rank as u32,
        ),
    };
    write_msg(s, Kind::Challenge, rank, job, &ch)
        .await
        .map_err(|e| Error::io("writing challenge", e))?;
    let (_, proof): (_, Proof) = read_msg(s, Kind::Proof, job).await?;
    if !verify(
        secret,
        b"harp-dialer",
        job,
        &my_nonce,
        d as u32,
        rank as u32,
        &proof.mac,
    ) {
        return Err(Error::Protocol(format!(
            "peer claiming rank {d} failed to prove the job secret"
        )));
    }
    Ok(d)
}

/// Dialer side of the authentication.
async fn dial_auth(
    s: &mut TcpStream,
    rank: usize,
    peer: usize,
    job: u64,
    secret: &[u8],
) -> Result<()> {
    let my_nonce = nonce();
    write_msg(
        s,
        Kind::Hello,
        rank,
        job,
        &Hello {
            rank: rank as u32,
            nonce: my_nonce,
        },
    )
    .await
    .map_err(|e| Error::io("writing hello", e))?;
    let (_, ch): (_, Challenge) = read_msg(s, Kind::Challenge, job).await?;
    if ch.rank as usize != peer
        || !verify(
            secret,
            b"harp-acceptor",
            job,
            &my_nonce,
            rank as u32,
            peer as u32,
            &ch.mac,
        )
    {
        return Err(Error::Protocol(format!(
            "the process at rank {peer}'s address failed to prove the job secret"
        )));
    }
    let proof = Proof {
        mac: mac(
            secret,
            b"harp-dialer",
            job,
            &ch.nonce,
            rank as u32,
            peer as u32,
        ),
    };
    write_msg(s, Kind::Proof, rank, job, &proof)
        .await
        .map_err(|e| Error::io("writing proof", e))
}

async fn dial(addr: SocketAddr, cfg: &Config, deadline: Instant) -> Result<TcpStream> {
    loop {
        let sock = new_socket(addr, cfg).map_err(|e| Error::io(format!("socket for {addr}"), e))?;
        match tokio::time::timeout_at(deadline.into(), sock.connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) if Instant::now() + Duration::from_millis(50) < deadline => {
                tracing::trace!("connect to {addr}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(Err(e)) => return Err(Error::io(format!("cannot connect to {addr}"), e)),
            Err(_) => {
                return Err(Error::io(
                    format!("cannot connect to {addr}"),
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
                ))
            }
        }
    }
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
        let size = hosts.len();
        let fail = |msg: String| Error::Startup { rank, msg };
        if rank >= size {
            return Err(fail(format!("rank {rank} is outside the {size} hosts")));
        }
        let deadline = Instant::now() + cfg.connect_timeout;
        let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();

        // Accept the higher ranks in the background while dialing the lower ones.
        let expected = size - rank - 1;
        let secret_owned = secret.to_vec();
        let acceptor = tokio::spawn(async move {
            let mut got: Vec<(usize, TcpStream)> = Vec::new();
            let mut pending = tokio::task::JoinSet::new();
            while got.len() < expected {
                tokio::select! {
                    acc = listener.accept() => {
                        let (mut s, from) = match acc { Ok(a) => a, Err(e) => { tracing::warn!("accept failed: {e}"); continue } };
                        let secret = secret_owned.clone();
                        pending.spawn(async move {
                            let r = tokio::time::timeout(Duration::from_secs(10), accept_auth(&mut s, rank, size, job, &secret)).await;
                            (from, r, s)
                        });
                    }
                    Some(done) = pending.join_next(), if !pending.is_empty() => {
                        let Ok((from, r, s)) = done else { continue };
                        match r {
                            Ok(Ok(d)) if got.iter().all(|(g, _)| *g != d) => got.push((d, s)),
                            Ok(Ok(d)) => tracing::warn!("rank {rank}: dropped a second connection claiming rank {d} from {from}"),
                            Ok(Err(e)) => tracing::warn!("rank {rank}: dropped connection from {from}: {e}"),
                            Err(_) => tracing::warn!("rank {rank}: dropped connection from {from}: authentication timed out"),
                        }
                    }
                }
            }
            got
        });
        for (peer, addr) in hosts.iter().enumerate().take(rank) {
            let mut s = dial(*addr, cfg, deadline)
                .await
                .map_err(|e| fail(format!("rank {peer}: {e}")))?;
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, dial_auth(&mut s, rank, peer, job, secret)).await {
                Ok(Ok(())) => streams[peer] = Some(s),
                Ok(Err(e)) => {
                    return Err(fail(format!("connection to rank {peer} at {addr}: {e}")))
                }
                Err(_) => {
                    return Err(fail(format!(
                        "rank {peer} at {addr} did not answer the handshake"
                    )))
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let accepted = match tokio::time::timeout(left, acceptor).await {
            Ok(Ok(got)) => got,
            Ok(Err(e)) => return Err(fail(format!("accept task failed: {e}"))),
            Err(_) => {
                return Err(fail(format!(
                    "ranks above {rank} did not all connect within {:.0} s",
                    cfg.connect_timeout.as_secs_f64()
                )))
            }
        };
        for (d, s) in accepted {
            streams[d] = Some(s);
        }

        let mailbox = Arc::new(Mailbox {
            state: Mutex::new(MbState {
                queues: HashMap::new(),
                gone: vec![None; size],
            }),
            notify: (0..size).map(|_| Notify::new()).collect(),
            any: Notify::new(),
            last_seen: (0..size).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
        });
        let mut writers = Vec::with_capacity(size);
        let mut readers = Vec::new();
        for (peer, s) in streams.into_iter().enumerate() {
            let Some(s) = s else {
                writers.push(None);
                continue;
            };
            s.set_nodelay(true)
                .map_err(|e| Error::io("TCP_NODELAY", e))?;
            let (rd, wr) = s.into_split();
            writers.push(Some(tokio::sync::Mutex::new(Some(
                BufWriter::with_capacity(64 * 1024, wr),
            ))));
            readers.push(tokio::spawn(read_loop(
                peer,
                job,
                rd,
                mailbox.clone(),
                pool.clone(),
            )));
        }
        let writers = Arc::new(writers);
        readers.push(tokio::spawn(heartbeats(
            writers.clone(),
            rank,
            job,
            heartbeat_interval(cfg.op_timeout),
        )));
        let t = Transport {
            rank,
            size,
            job,
            op_timeout: cfg.op_timeout,
            writers,
            mailbox,
            readers: Mutex::new(readers),
        };
        t.handshake(cfg.connect_timeout).await?;
        Ok(t)
    }

    /// Ping → answer → initialised, driven by the master (rank 0).
    async fn handshake(&self, timeout: Duration) -> Result<()> {
        let ctx = |_: ()| OpContext {
            rank: self.rank,
            op: "handshake",
            seq: 0,
            label: "start-up".into(),
        };
        let comm = Endpoint {
            t: self,
            op: Op::Handshake,
            algo: 0,
            seq: 0,
            ctx: ctx(()),
            timeout,
        };
        if self.rank == 0 {
            for peer in 1..self.size {
                comm.send_ctrl(
                    peer,
                    0,
                    &Handshake::Ping {
                        workers: self.size as u32,
                    },
                )
                .await?;
            }
            for peer in 1..self.size {
                let pong: Handshake = comm.recv_ctrl(peer, 1).await?;
                if pong != (Handshake::Pong { rank: peer as u32 }) {
                    return Err(Error::Startup {
                        rank: 0,
                        msg: format!("rank {peer} answered {pong:?}"),
                    });
                }
            }
            for peer in 1..self.size {
                comm.send_ctrl(peer, 2, &Handshake::Initialized).await?;
            }
        } else {
            let ping: Handshake = comm.recv_ctrl(0, 0).await?;
            if ping
                != (Handshake::Ping {
                    workers: self.size as u32,
                })
            {
                return Err(Error::Startup {
                    rank: self.rank,
                    msg: format!(
                        "master sent {ping:?}, but this worker's host list has {} workers",
                        self.size
                    ),
                });
            }
            comm.send_ctrl(
                0,
                1,
                &Handshake::Pong {
                    rank: self.rank as u32,
                },
            )
            .await?;
            let init: Handshake = comm.recv_ctrl(0, 2).await?;
            if init != Handshake::Initialized {
                return Err(Error::Startup {
                    rank: self.rank,
                    msg: format!("master sent {init:?}"),
                });
            }
        }
        Ok(())
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
        self.close_all(Some((h, reason.as_bytes()))).await;
    }

    /// Orderly shutdown: `Bye` to every peer, then close.
    pub async fn close(&self) {
        let h = Header::control(Kind::Bye, self.rank, self.job, 0);
        self.close_all(Some((h, &[]))).await;
    }

    async fn close_all(&self, last: Option<(Header, &[u8])>) {
        let sends = self.writers.iter().flatten().map(|w| async move {
            let fut = async {
                let mut g = w.lock().await;
                if let Some(mut wr) = g.take() {
                    if let Some((h, body)) = last {
                        let _ = wr.write_all(&h.encode()).await;
                        let _ = wr.write_all(body).await;
                    }
                    let _ = wr.flush().await;
                    let _ = wr.shutdown().await;
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), fut).await;
        });
        futures_join_all(sends).await;
        for r in self
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            r.abort();
        }
    }
}

/// Runs futures concurrently and waits for all (small helper to avoid a futures dependency).
pub(crate) async fn futures_join_all<F: std::future::Future<Output = ()>>(
    futs: impl IntoIterator<Item = F>,
) {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
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

impl Drop for Transport {
    fn drop(&mut self) {
        for r in self
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            r.abort();
        }
    }
}

/// Heartbeats go out four times per silence limit (half the operation timeout).
fn heartbeat_interval(op_timeout: Duration) -> Duration {
    (op_timeout / 8).clamp(Duration::from_millis(20), Duration::from_secs(5))
}

/// Sends a heartbeat on every idle connection (a busy one is proof of life already).
async fn heartbeats(writers: Arc<Vec<Option<Writer>>>, rank: usize, job: u64, every: Duration) {
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

async fn read_loop(peer: usize, job: u64, rd: OwnedReadHalf, mb: Arc<Mailbox>, pool: Pool) {
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
            _ => mb.push(Frame { hdr: h, body }),
        }
    };
    tracing::debug!("reader for rank {peer} stops: {reason}");
    mb.mark_gone(peer, reason);
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
        let w = self.t.writers[dst].as_ref().expect("no connection to self");
        let io = async {
            let mut g = w.lock().await;
            let Some(wr) = g.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "connection already closed",
                ));
            };
            wr.write_all(&h.encode()).await?;
            for p in parts {
                wr.write_all(p).await?;
            }
            wr.flush().await
        };
        match tokio::time::timeout(self.timeout, io).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                let reason = self.t.mailbox.lock().gone[dst]
                    .clone()
                    .unwrap_or_else(|| format!("send failed: {e}"));
                Err(Error::PeerLost {
                    ctx: self.ctx.clone(),
                    peer: dst,
                    reason,
                })
            }
            Err(_) => Err(Error::Timeout {
                ctx: self.ctx.clone(),
                peer: dst,
                secs: self.timeout.as_secs_f64(),
            }),
        }
    }

    /// Waits for the next frame from `src` with `tag` in this operation. Fails when `src` is
    /// gone, when it has sent nothing at all for half the timeout (silent: hung or cut off), or
    /// when the frame has not come within the timeout.
    pub async fn recv_frame(&self, src: usize, tag: u32) -> Result<Frame> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let silent_limit = self.timeout / 2;
        let slice = heartbeat_interval(self.timeout);
        let key = (self.seq, src as u32, tag);
        let mb = &self.t.mailbox;
        loop {
            let notified = mb.notify[src].notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = mb.lock();
                // Any frame from src at this position with another op/algorithm is a mismatch.
                for (k, q) in st.queues.iter() {
                    if k.0 == self.seq && k.1 == src as u32 {
                        if let Some(f) = q.front() {
                            if f.hdr.op != self.op || f.hdr.algo != self.algo {
                                return Err(Error::OpMismatch {
                                    ctx: self.ctx.clone(),
                                    peer: src,
                                    theirs: format!(
                                        "{} (algorithm {})",
                                        f.hdr.op.name(),
                                        f.hdr.algo
                                    ),
                                });
                            }
                        }
                    }
                }
                if let Some(q) = st.queues.get_mut(&key) {
                    if let Some(f) = q.pop_front() {
                        if q.is_empty() {
                            st.queues.remove(&key);
                        }
                        return Ok(f);
                    }
                }
                if let Some(reason) = &st.gone[src] {
                    return Err(Error::PeerLost {
                        ctx: self.ctx.clone(),
                        peer: src,
                        reason: reason.clone(),
                    });
                }
            }
            let wake = deadline.min(tokio::time::Instant::now() + slice);
            if tokio::time::timeout_at(wake, notified).await.is_err() {
                let quiet = mb.silence(src);
                if quiet >= silent_limit {
                    return Err(Error::Silent {
                        ctx: self.ctx.clone(),
                        peer: src,
                        secs: quiet.as_secs_f64(),
                    });
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(Error::Timeout {
                        ctx: self.ctx.clone(),
                        peer: src,
                        secs: self.timeout.as_secs_f64(),
                    });
                }
            }
        }
    }

    /// Waits for the first frame with `tag` in this operation from any of `from` (used when only
    /// the sender knows what comes next, e.g. the automatically chosen broadcast tree). Fails
    /// when every candidate is gone, or at the timeout.
    pub async fn recv_frame_from_any(&self, from: &[usize], tag: u32) -> Result<Frame> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mb = &self.t.mailbox;
        loop {
            let notified = mb.any.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = mb.lock();
                for &src in from {
                    let key = (self.seq, src as u32, tag);
                    if let Some(q) = st.queues.get_mut(&key) {
                        if let Some(f) = q.pop_front() {
                            if q.is_empty() {
                                st.queues.remove(&key);
                            }
                            if f.hdr.op != self.op || f.hdr.algo != self.algo {
                                return Err(Error::OpMismatch {
                                    ctx: self.ctx.clone(),
                                    peer: src,
                                    theirs: format!(
                                        "{} (algorithm {})",
                                        f.hdr.op.name(),
                                        f.hdr.algo
                                    ),
                                });
                            }
                            return Ok(f);
                        }
                    }
                }
                if let Some(&src) = from
                    .first()
                    .filter(|_| from.iter().all(|&s| st.gone[s].is_some()))
                {
                    let reason = st.gone[src].clone().unwrap_or_default();
                    return Err(Error::PeerLost {
                        ctx: self.ctx.clone(),
                        peer: src,
                        reason,
                    });
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Error::Timeout {
                    ctx: self.ctx.clone(),
                    peer: from.first().copied().unwrap_or(0),
                    secs: self.timeout.as_secs_f64(),
                });
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A congestion control other than the system default when one is allowed (so inheritance
    /// by the accepted socket is visible), else reno, which every Linux kernel has.
    fn non_default_cc() -> String {
        let read = |f: &str| std::fs::read_to_string(f).unwrap_or_default();
        let default = read("/proc/sys/net/ipv4/tcp_congestion_control");
        let allowed = read("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
        allowed
            .split_whitespace()
            .find(|c| *c != default.trim())
            .unwrap_or("reno")
            .to_string()
    }

    #[test]
    fn congestion_control_applies_to_both_ends() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let cc = non_default_cc();
            let cfg = Config {
                tcp_congestion: Some(cc.clone()),
                ..Config::default()
            };
            let l = listen("127.0.0.1:0".parse().unwrap(), &cfg).unwrap();
            let addr = l.local_addr().unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            let (dialed, accepted) = tokio::join!(dial(addr, &cfg, deadline), l.accept());
            let (dialed, (accepted, _)) = (dialed.unwrap(), accepted.unwrap());
            assert_eq!(congestion_of(&dialed).unwrap(), cc);
            assert_eq!(congestion_of(&accepted).unwrap(), cc);

            let bad = Config {
                tcp_congestion: Some("nosuchcc".into()),
                ..Config::default()
            };
            let e = listen("127.0.0.1:0".parse().unwrap(), &bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains("nosuchcc") && e.contains("allowed here"), "{e}");
        });
    }
}
