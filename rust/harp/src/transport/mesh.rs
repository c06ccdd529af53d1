//! The TCP implementation of [`Link`]: one authenticated connection per pair of workers (rank r
//! dials every rank below it and accepts every rank above it), a read loop per connection and
//! timed, locked writers.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::auth::{accept_auth, dial_auth};
use super::mailbox::Mailbox;
use super::reader::{heartbeats, read_loop};
use super::socket::dial;
use super::{futures_join_all, handshake, heartbeat_interval, Io, Link, Transport};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::wire::Header;

/// The write half of one connection; `None` once closed.
pub(super) type Writer = tokio::sync::Mutex<Option<BufWriter<OwnedWriteHalf>>>;

/// The connections of one worker to all its peers.
struct TcpMesh {
    writers: Arc<Vec<Option<Writer>>>,
    /// The read loops and the heartbeat task.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl TcpMesh {
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
            let w = self.writers[dst].as_ref().expect("no connection to self");
            let mut g = w.lock().await;
            let Some(wr) = g.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "connection already closed",
                ));
            };
            wr.write_all(&hdr.encode()).await?;
            for p in parts {
                wr.write_all(p).await?;
            }
            wr.flush().await
        })
    }

    fn close<'a>(&'a self, last: Header, body: &'a [u8]) -> Io<'a, ()> {
        Box::pin(async move {
            let sends = self.writers.iter().flatten().map(|w| async move {
                let fut = async {
                    let mut g = w.lock().await;
                    if let Some(mut wr) = g.take() {
                        let _ = wr.write_all(&last.encode()).await;
                        let _ = wr.write_all(body).await;
                        let _ = wr.flush().await;
                        let _ = wr.shutdown().await;
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

/// Accepts and authenticates the `expected` ranks above `rank` (a connection that fails to
/// authenticate is logged and dropped; the real peer can still connect).
async fn accept_all(
    listener: TcpListener,
    rank: usize,
    size: usize,
    job: u64,
    secret: Vec<u8>,
) -> Vec<(usize, TcpStream)> {
    let expected = size - rank - 1;
    let mut got: Vec<(usize, TcpStream)> = Vec::new();
    let mut pending = tokio::task::JoinSet::new();
    while got.len() < expected {
        tokio::select! {
            acc = listener.accept() => {
                let (mut s, from) = match acc {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        continue;
                    }
                };
                let secret = secret.clone();
                pending.spawn(async move {
                    let auth = accept_auth(&mut s, rank, size, job, &secret);
                    let r = tokio::time::timeout(Duration::from_secs(10), auth).await;
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
        let acceptor = tokio::spawn(accept_all(listener, rank, size, job, secret.to_vec()));
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

        let mailbox = Arc::new(Mailbox::new(size));
        let mut writers = Vec::with_capacity(size);
        let mut tasks = Vec::new();
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
            let reader = read_loop(peer, job, rd, mailbox.clone(), pool.clone());
            tasks.push(tokio::spawn(reader));
        }
        let writers = Arc::new(writers);
        let every = heartbeat_interval(cfg.op_timeout);
        tasks.push(tokio::spawn(heartbeats(writers.clone(), rank, job, every)));
        let link = TcpMesh {
            writers,
            tasks: Mutex::new(tasks),
        };
        let t = Transport::new(rank, size, job, cfg.op_timeout, mailbox, Box::new(link));
        handshake::run(&t, cfg.connect_timeout).await?;
        Ok(t)
    }
}
