//! Sockets: listening, dialing with retries until a deadline, buffer sizes and TCP congestion
//! control (Linux `TCP_CONGESTION`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::config::{Config, TcpCongestion};
use crate::error::{Error, Result};

/// Bounds on what peers (and strangers) may make this worker hold. The defaults are safe for
/// any job and are deliberately not engine options (docs/wire-protocol.md, "Limits"): the frame
/// limit must agree with what every sender checks (`wire::MAX_FRAME`), and the accept-loop
/// bounds need no tuning. Tests set other values directly.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest frame payload accepted from a peer; a larger announcement ends the connection
    /// with a protocol error naming both sizes.
    pub max_frame: u64,
    /// Frame payloads up to this size are allocated when their header arrives; larger ones
    /// grow (doubling) as their bytes arrive, so memory follows the bytes actually received.
    pub eager_alloc: usize,
    /// At most this many accepted connections may be authenticating at once. Beyond it the
    /// oldest that has not yet sent a valid hello is dropped; a connection past its hello is
    /// never dropped for a newer one (when every pending connection is past it, accepting
    /// waits until one finishes, at most `auth_timeout`). So a stranger who opens many
    /// connections cannot push out the real peers, nor can many real peers at once push out
    /// each other.
    pub max_pending: usize,
    /// An accepted connection must finish authenticating within this time.
    pub auth_timeout: Duration,
    /// Accept errors (e.g. EMFILE: out of file descriptors) back off from this delay,
    /// doubling up to `accept_backoff_max`.
    pub accept_backoff_min: Duration,
    pub accept_backoff_max: Duration,
    /// At most one warning about dropped connections or accept errors per this interval (the
    /// count of suppressed ones is logged with the next).
    pub warn_every: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame: crate::wire::MAX_FRAME,
            eager_alloc: 64 << 20,
            max_pending: 64,
            auth_timeout: Duration::from_secs(10),
            accept_backoff_min: Duration::from_millis(10),
            accept_backoff_max: Duration::from_secs(1),
            warn_every: Duration::from_secs(5),
        }
    }
}

impl Limits {
    /// The limits for a job of this configuration: the defaults (see the type's comment).
    pub fn from_config(_cfg: &Config) -> Limits {
        Limits::default()
    }
}

/// A rate-limited warning: at most one line per `every`; the next line says how many were
/// suppressed in between.
pub(super) struct Warn {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
    /// Lines written so far.
    pub emitted: u64,
}

impl Warn {
    pub fn new(every: Duration) -> Warn {
        Warn {
            every,
            last: None,
            suppressed: 0,
            emitted: 0,
        }
    }
    /// Logs `msg()` unless a line was written less than `every` before `now`.
    pub fn warn(&mut self, now: Instant, msg: impl FnOnce() -> String) {
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < self.every)
        {
            self.suppressed += 1;
            return;
        }
        let more = match std::mem::take(&mut self.suppressed) {
            0 => String::new(),
            n => format!(" ({n} similar warnings suppressed)"),
        };
        let text = msg();
        tracing::warn!("{text}{more}");
        self.last = Some(now);
        self.emitted += 1;
    }
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
    match &cfg.tcp_congestion {
        TcpCongestion::Kernel => {}
        TcpCongestion::Named(cc) => set_congestion(&sock, cc)?,
        TcpCongestion::Auto => {
            let read = |f: &str| std::fs::read_to_string(f).unwrap_or_default();
            let default = read("/proc/sys/net/ipv4/tcp_congestion_control");
            let allowed = read("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
            match auto_congestion(&default, &allowed) {
                Some(cc) => {
                    if let Err(e) = set_congestion(&sock, cc) {
                        tracing::debug!("tcp_congestion=auto: keeping the kernel's default: {e}");
                    }
                }
                None => tracing::debug!(
                    "tcp_congestion=auto: keeping the kernel's default {:?} (allowed: {:?})",
                    default.trim(),
                    allowed.trim()
                ),
            }
        }
    }
    Ok(sock)
}

/// Loss-based congestion controls, in the order `auto` prefers them. Both share a link fairly
/// between the flows of an all-to-all; on the emulated 200 Mbit/s cluster reno holds every
/// collective within 1.01× of the bound where BBR costs up to 1.24× (docs/benchmarks-netns.md).
const LOSS_BASED: &[&str] = &["cubic", "reno"];

/// What `tcp_congestion=auto` sets, from the kernel's default congestion control and its
/// allowed list (the contents of `/proc/sys/net/ipv4/tcp_congestion_control` and
/// `tcp_allowed_congestion_control`): nothing (None) when the default is already loss-based
/// or nothing loss-based is allowed, else the first allowed of [`LOSS_BASED`].
pub fn auto_congestion(default: &str, allowed: &str) -> Option<&'static str> {
    if LOSS_BASED.contains(&default.trim()) {
        return None;
    }
    let allowed: Vec<&str> = allowed.split_whitespace().collect();
    LOSS_BASED.iter().copied().find(|c| allowed.contains(c))
}

/// Connects to `addr`, retrying every 50 ms (the peer may not listen yet) until `deadline`; with
/// `retry` off (the job has started, so the peer listens), a refused connection fails at once.
pub(super) async fn dial(
    addr: SocketAddr,
    cfg: &Config,
    deadline: Instant,
    retry: bool,
) -> Result<TcpStream> {
    loop {
        let sock = new_socket(addr, cfg).map_err(|e| Error::io(format!("socket for {addr}"), e))?;
        match tokio::time::timeout_at(deadline.into(), sock.connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) if retry && Instant::now() + Duration::from_millis(50) < deadline => {
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
            "cannot use TCP congestion control {} ({e}); allowed here: {}",
            crate::util::quote(name.as_bytes()),
            allowed.trim()
        ),
    ))
}

#[cfg(not(target_os = "linux"))]
fn set_congestion(_sock: &impl std::os::fd::AsRawFd, name: &str) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!(
            "TCP congestion control {}: only supported on Linux",
            crate::util::quote(name.as_bytes())
        ),
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

    /// One line per interval, whatever the number of events; the next line counts the
    /// suppressed ones.
    #[test]
    fn warnings_are_rate_limited() {
        let mut w = Warn::new(Duration::from_secs(5));
        let t0 = Instant::now();
        let mut said = Vec::new();
        for i in 0..10_000u64 {
            w.warn(t0 + Duration::from_millis(i), || {
                said.push(i);
                String::new()
            });
        }
        assert_eq!(said, vec![0, 5000]);
        assert_eq!(w.emitted, 2);
        assert_eq!(w.suppressed, 9998 - 5000 + 1);
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
                tcp_congestion: TcpCongestion::Named(cc.clone()),
                ..Config::default()
            };
            let l = listen("127.0.0.1:0".parse().unwrap(), &cfg).unwrap();
            let addr = l.local_addr().unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            let (dialed, accepted) = tokio::join!(dial(addr, &cfg, deadline, true), l.accept());
            let (dialed, (accepted, _)) = (dialed.unwrap(), accepted.unwrap());
            assert_eq!(congestion_of(&dialed).unwrap(), cc);
            assert_eq!(congestion_of(&accepted).unwrap(), cc);

            let bad = Config {
                tcp_congestion: TcpCongestion::Named("nosuchcc".into()),
                ..Config::default()
            };
            let e = listen("127.0.0.1:0".parse().unwrap(), &bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains("nosuchcc") && e.contains("allowed here"), "{e}");
        });
    }

    #[test]
    fn auto_prefers_a_loss_based_congestion_control() {
        // The kernel's default already loss-based: kept.
        assert_eq!(auto_congestion("cubic\n", "reno cubic bbr\n"), None);
        assert_eq!(auto_congestion("reno", "reno bbr"), None);
        // BBR by default: the first allowed loss-based one.
        assert_eq!(auto_congestion("bbr\n", "reno bbr\n"), Some("reno"));
        assert_eq!(auto_congestion("bbr", "reno cubic bbr"), Some("cubic"));
        assert_eq!(auto_congestion("bbr", "bbr cubic"), Some("cubic"));
        // Nothing loss-based allowed (or /proc unreadable): the kernel's default.
        assert_eq!(auto_congestion("bbr", "bbr"), None);
        assert_eq!(auto_congestion("", ""), None);
        // Whole names only.
        assert_eq!(auto_congestion("bbr", "renoish bbr"), None);
    }

    /// With the default option (auto), both ends of a connection get what auto_congestion
    /// picks when it picks one, else the kernel's default; `kernel` leaves the default.
    #[test]
    fn auto_and_kernel_apply_to_both_ends() {
        let read = |f: &str| std::fs::read_to_string(f).unwrap_or_default();
        let default = read("/proc/sys/net/ipv4/tcp_congestion_control");
        let allowed = read("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
        let auto = auto_congestion(&default, &allowed)
            .unwrap_or(default.trim())
            .to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            for (cfg, want) in [
                (Config::default(), auto.clone()),
                (
                    Config {
                        tcp_congestion: TcpCongestion::Kernel,
                        ..Config::default()
                    },
                    default.trim().to_string(),
                ),
            ] {
                let l = listen("127.0.0.1:0".parse().unwrap(), &cfg).unwrap();
                let addr = l.local_addr().unwrap();
                let deadline = Instant::now() + Duration::from_secs(5);
                let (dialed, accepted) = tokio::join!(dial(addr, &cfg, deadline, true), l.accept());
                let (dialed, (accepted, _)) = (dialed.unwrap(), accepted.unwrap());
                assert_eq!(congestion_of(&dialed).unwrap(), want, "{cfg:?}");
                assert_eq!(congestion_of(&accepted).unwrap(), want, "{cfg:?}");
            }
        });
    }
}
