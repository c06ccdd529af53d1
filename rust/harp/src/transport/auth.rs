//! Connection authentication: a mutual HMAC-SHA256 challenge-response over the job secret
//! (`Hello` → `Challenge` → `Proof`). Each side proves the secret bound to the job, both nonces'
//! owners and both ranks, so a recorded exchange cannot be replayed on another connection.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{Error, Result};
use crate::wire::{self, Header, Kind, HEADER_LEN};

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

fn keyed(
    secret: &[u8],
    role: &[u8],
    job: u64,
    nonce: &[u8; 16],
    dialer: u32,
    acceptor: u32,
) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(role);
    m.update(&job.to_le_bytes());
    m.update(nonce);
    m.update(&dialer.to_le_bytes());
    m.update(&acceptor.to_le_bytes());
    m
}

fn mac(
    secret: &[u8],
    role: &[u8],
    job: u64,
    nonce: &[u8; 16],
    dialer: u32,
    acceptor: u32,
) -> Vec<u8> {
    keyed(secret, role, job, nonce, dialer, acceptor)
        .finalize()
        .into_bytes()
        .to_vec()
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
    keyed(secret, role, job, nonce, dialer, acceptor)
        .verify_slice(tag)
        .is_ok()
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
pub(super) async fn accept_auth(
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
pub(super) async fn dial_auth(
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
