//! Connection authentication: a mutual HMAC-SHA256 challenge-response over the job secret
//! (`Hello` → `Challenge` → `Proof`). Each side proves the secret bound to the job, both nonces'
//! owners and both ranks, so a recorded exchange cannot be replayed on another connection.
//! Each side also states (inside its proof) whether it protects frames with MACs
//! (`frame_mac`); a peer with the other setting is refused by both ends once it has proven the
//! secret, naming the setting. With frame MACs on, both ends derive the connection's session
//! key from the secret and both nonces ([`super::integrity`]).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::integrity::SessionKey;
use crate::error::{Error, Result};
use crate::wire::{self, Header, Kind, HEADER_LEN};

#[derive(serde::Serialize, serde::Deserialize)]
struct Hello {
    rank: u32,
    nonce: [u8; 16],
    frame_mac: bool,
}
#[derive(serde::Serialize, serde::Deserialize)]
struct Challenge {
    rank: u32,
    nonce: [u8; 16],
    frame_mac: bool,
    mac: Vec<u8>,
}
#[derive(serde::Serialize, serde::Deserialize)]
struct Proof {
    mac: Vec<u8>,
}

/// What both sides of one connection prove: the job secret, bound to the job and both ranks.
struct Pair<'s> {
    secret: &'s [u8],
    job: u64,
    dialer: u32,
    acceptor: u32,
}

impl Pair<'_> {
    fn keyed(&self, role: &[u8], nonce: &[u8; 16], frame_mac: bool) -> Hmac<Sha256> {
        let mut m = Hmac::<Sha256>::new_from_slice(self.secret).expect("HMAC takes any key length");
        m.update(role);
        m.update(&self.job.to_le_bytes());
        m.update(nonce);
        m.update(&self.dialer.to_le_bytes());
        m.update(&self.acceptor.to_le_bytes());
        m.update(&[frame_mac as u8]);
        m
    }

    /// The proof of `role` (`harp-dialer` or `harp-acceptor`) for the other side's `nonce`,
    /// stating the prover's `frame_mac` setting.
    fn mac(&self, role: &[u8], nonce: &[u8; 16], frame_mac: bool) -> Vec<u8> {
        self.keyed(role, nonce, frame_mac)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// Whether `tag` is `role`'s proof for `nonce` and `frame_mac` (constant-time comparison).
    fn verify(&self, role: &[u8], nonce: &[u8; 16], frame_mac: bool, tag: &[u8]) -> bool {
        self.keyed(role, nonce, frame_mac).verify_slice(tag).is_ok()
    }

    /// The session key of this connection when frame MACs are on.
    fn session(
        &self,
        on: bool,
        dialer_nonce: &[u8; 16],
        acceptor_nonce: &[u8; 16],
    ) -> Option<SessionKey> {
        on.then(|| {
            SessionKey::derive(
                self.secret,
                self.job,
                self.dialer,
                self.acceptor,
                dialer_nonce,
                acceptor_nonce,
            )
        })
    }
}

/// The start-up error of `rank` whose authenticated peer `peer` uses the other frame MAC
/// setting.
fn mismatch(rank: usize, peer: usize, theirs: bool) -> Error {
    let on_off = |b: bool| if b { "on" } else { "off" };
    Error::Startup {
        rank,
        msg: format!(
            "rank {peer} has per-frame integrity (frame_mac, --frame-mac, harp.frame.mac) {} and \
             this worker has it {}; every worker of a job must use the same setting",
            on_off(theirs),
            on_off(!theirs)
        ),
    }
}

/// An authenticated connection's peer and, with frame MACs on, its session key.
pub(super) struct Authed {
    pub peer: usize,
    pub key: Option<SessionKey>,
}

/// Shortest job secret accepted (bytes). The launchers generate 32 random bytes as hex (64).
pub const MIN_SECRET_LEN: usize = 16;

/// Refuses a job secret too short to resist guessing (checked before any connection is made).
pub fn check_secret(secret: &[u8]) -> Result<()> {
    if secret.len() < MIN_SECRET_LEN {
        return Err(Error::config(format!(
            "the job secret is {} bytes long; at least {MIN_SECRET_LEN} are required (use 32 \
             random bytes, e.g. `head -c 32 /dev/urandom | xxd -p -c 64`)",
            secret.len()
        )));
    }
    Ok(())
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
    // One write: a header and a body written apart wait for the peer's delayed ACK (Nagle's
    // algorithm is still on during the handshake), 40 ms a message on Linux.
    let mut msg = Header::control(kind, src, job, body.len())
        .encode()
        .to_vec();
    msg.extend_from_slice(&body);
    s.write_all(&msg).await?;
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

/// Acceptor side of the authentication; returns the authenticated dialer. A dialer that proves
/// the secret with the other `frame_mac` setting is an [`Error::Startup`] (the job is
/// misconfigured); any other error means the connection is dropped.
#[allow(clippy::too_many_arguments)]
pub(super) async fn accept_auth(
    s: &mut TcpStream,
    rank: usize,
    size: usize,
    job: u64,
    secret: &[u8],
    frame_mac: bool,
    hello_seen: &std::sync::atomic::AtomicBool,
) -> Result<Authed> {
    let (_, hello): (_, Hello) = read_msg(s, Kind::Hello, job).await?;
    let d = hello.rank as usize;
    if d == rank || d >= size {
        return Err(Error::Protocol(format!(
            "unexpected rank {d} dialed rank {rank}"
        )));
    }
    // A well-formed hello of this job from a rank that dials us: the connection is making
    // progress, and the accept loop will not push it out for a newer one.
    hello_seen.store(true, std::sync::atomic::Ordering::Release);
    let pair = Pair {
        secret,
        job,
        dialer: d as u32,
        acceptor: rank as u32,
    };
    let my_nonce = nonce();
    let ch = Challenge {
        rank: rank as u32,
        nonce: my_nonce,
        frame_mac,
        mac: pair.mac(b"harp-acceptor", &hello.nonce, frame_mac),
    };
    write_msg(s, Kind::Challenge, rank, job, &ch)
        .await
        .map_err(|e| Error::io("writing challenge", e))?;
    let (_, proof): (_, Proof) = read_msg(s, Kind::Proof, job).await?;
    if !pair.verify(b"harp-dialer", &my_nonce, hello.frame_mac, &proof.mac) {
        return Err(Error::Protocol(format!(
            "peer claiming rank {d} failed to prove the job secret"
        )));
    }
    if hello.frame_mac != frame_mac {
        return Err(mismatch(rank, d, hello.frame_mac));
    }
    Ok(Authed {
        peer: d,
        key: pair.session(frame_mac, &hello.nonce, &my_nonce),
    })
}

/// The acceptor's answer to an authenticated dial, before any frame: whether it keeps the
/// connection (`false`: it has one to the dialer already, or dials it from the higher rank).
#[derive(serde::Serialize, serde::Deserialize)]
struct Verdict {
    welcome: bool,
}

/// Acceptor side: tells the dialer whether this connection is kept.
pub(super) async fn write_verdict(
    s: &mut TcpStream,
    rank: usize,
    job: u64,
    welcome: bool,
) -> std::io::Result<()> {
    write_msg(s, Kind::Ctrl, rank, job, &Verdict { welcome }).await
}

/// Dialer side: whether the acceptor keeps this connection.
pub(super) async fn read_verdict(s: &mut TcpStream, job: u64) -> Result<bool> {
    let (_, v): (_, Verdict) = read_msg(s, Kind::Ctrl, job).await?;
    Ok(v.welcome)
}

/// Dialer side of the authentication. An acceptor that proves the secret with the other
/// `frame_mac` setting gets this side's proof (so that it fails at once too) and is an
/// [`Error::Startup`].
pub(super) async fn dial_auth(
    s: &mut TcpStream,
    rank: usize,
    peer: usize,
    job: u64,
    secret: &[u8],
    frame_mac: bool,
) -> Result<Option<SessionKey>> {
    let pair = Pair {
        secret,
        job,
        dialer: rank as u32,
        acceptor: peer as u32,
    };
    let my_nonce = nonce();
    let hello = Hello {
        rank: rank as u32,
        nonce: my_nonce,
        frame_mac,
    };
    write_msg(s, Kind::Hello, rank, job, &hello)
        .await
        .map_err(|e| Error::io("writing hello", e))?;
    let (_, ch): (_, Challenge) = read_msg(s, Kind::Challenge, job).await?;
    if ch.rank as usize != peer {
        // Unproven (the proof binds the rank), but the likely cause is a start-up mistake.
        return Err(Error::Protocol(format!(
            "the process at rank {peer}'s address answers as rank {}: two workers were started \
             with the same rank, or their worker lists differ",
            ch.rank
        )));
    }
    if !pair.verify(b"harp-acceptor", &my_nonce, ch.frame_mac, &ch.mac) {
        return Err(Error::Protocol(format!(
            "the process at rank {peer}'s address failed to prove the job secret"
        )));
    }
    let proof = Proof {
        mac: pair.mac(b"harp-dialer", &ch.nonce, frame_mac),
    };
    write_msg(s, Kind::Proof, rank, job, &proof)
        .await
        .map_err(|e| Error::io("writing proof", e))?;
    if ch.frame_mac != frame_mac {
        return Err(mismatch(rank, peer, ch.frame_mac));
    }
    Ok(pair.session(frame_mac, &my_nonce, &ch.nonce))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_secrets_are_refused() {
        for s in [&b""[..], b"s3cret", b"fifteen-bytes!!"] {
            let e = check_secret(s).unwrap_err();
            assert_eq!(e.kind(), "config");
            assert!(
                e.to_string()
                    .contains(&format!("is {} bytes long; at least 16", s.len())),
                "{e}"
            );
        }
        assert!(check_secret(b"sixteen-bytes!!!").is_ok());
        assert!(check_secret(&[0u8; 64]).is_ok());
    }

    #[test]
    fn a_proof_binds_the_secret_the_role_the_job_and_both_ranks() {
        let pair = |secret: &'static [u8], job, dialer, acceptor| Pair {
            secret,
            job,
            dialer,
            acceptor,
        };
        let n = [7u8; 16];
        let good = pair(b"s3cret", 1, 2, 0);
        let tag = good.mac(b"harp-dialer", &n, false);
        assert!(good.verify(b"harp-dialer", &n, false, &tag));
        assert!(
            !good.verify(b"harp-dialer", &n, true, &tag),
            "frame_mac setting"
        );
        assert!(!good.verify(b"harp-acceptor", &n, false, &tag), "role");
        assert!(
            !good.verify(b"harp-dialer", &[8u8; 16], false, &tag),
            "nonce"
        );
        for other in [
            pair(b"guess", 1, 2, 0),
            pair(b"s3cret", 9, 2, 0),
            pair(b"s3cret", 1, 3, 0),
            pair(b"s3cret", 1, 2, 1),
        ] {
            assert!(!other.verify(b"harp-dialer", &n, false, &tag));
        }
    }
}
