//! Per-frame integrity (`frame_mac`, off by default): every frame after the authentication
//! carries a 16-byte HMAC-SHA256 tag after its payload, over
//! `direction ‖ sequence number ‖ header ‖ payload`, keyed by a session key that both ends of
//! one connection derive from the job secret, the job, both ranks and both handshake nonces.
//!
//! * the direction byte (0: from the dialer, 1: from the acceptor) stops a frame from being
//!   reflected back to its sender;
//! * the sequence number is implicit (both ends count the frames of each direction from 0), so
//!   a replayed, dropped or reordered frame fails to verify;
//! * the session key differs per connection and per job run (fresh nonces), so a frame cannot
//!   be moved to another connection or replayed into a later job.
//!
//! The tag is HMAC-SHA256 truncated to its first 16 bytes (128 bits: a forgery succeeds with
//! probability 2^-128 per try, and any failure ends the job; RFC 2104 §5 allows truncation to
//! half the hash). It follows the payload and is not counted in the header's `len`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of the tag that follows every frame's payload when frame MACs are on.
pub(crate) const TAG_LEN: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// The HMAC key of one connection (both directions; the direction byte separates them).
#[derive(Clone)]
pub(crate) struct SessionKey([u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)") // never the key itself
    }
}

impl SessionKey {
    /// Derives the key of the connection `dialer` → `acceptor` of `job` from the job secret and
    /// both nonces of its authentication (HMAC-SHA256 as a PRF keyed by the secret).
    pub fn derive(
        secret: &[u8],
        job: u64,
        dialer: u32,
        acceptor: u32,
        dialer_nonce: &[u8; 16],
        acceptor_nonce: &[u8; 16],
    ) -> SessionKey {
        let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
        m.update(b"harp-frame-key-v1");
        m.update(&job.to_le_bytes());
        m.update(&dialer.to_le_bytes());
        m.update(&acceptor.to_le_bytes());
        m.update(dialer_nonce);
        m.update(acceptor_nonce);
        SessionKey(m.finalize().into_bytes().into())
    }

    /// The tagging state of one direction: `from_dialer` says who sends.
    pub fn direction(&self, from_dialer: bool) -> Direction {
        Direction {
            keyed: HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length"),
            dir: if from_dialer { 0 } else { 1 },
            next: 0,
        }
    }
}

/// One direction of one connection: the keyed MAC and the sequence number of the next frame.
/// The sender tags with one, the receiver verifies with its twin.
pub(crate) struct Direction {
    keyed: HmacSha256,
    dir: u8,
    next: u64,
}

/// The MAC of one frame being written or read; feed it the payload, then seal or verify.
pub(crate) struct FrameMac {
    mac: HmacSha256,
    /// The frame's sequence number in its direction.
    pub seq: u64,
}

impl Direction {
    /// Starts the MAC of the next frame of this direction, with header `hdr`.
    pub fn begin(&mut self, hdr: &[u8]) -> FrameMac {
        let mut mac = self.keyed.clone();
        let seq = self.next;
        self.next += 1;
        mac.update(&[self.dir]);
        mac.update(&seq.to_le_bytes());
        mac.update(hdr);
        FrameMac { mac, seq }
    }

    /// The tag of a whole frame (header `hdr`, payload the concatenation of `parts`).
    #[cfg(test)]
    pub fn tag(&mut self, hdr: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let mut m = self.begin(hdr);
        for p in parts {
            m.update(p);
        }
        m.seal()
    }
}

impl FrameMac {
    pub fn update(&mut self, bytes: &[u8]) {
        self.mac.update(bytes);
    }

    /// The frame's tag.
    pub fn seal(self) -> [u8; TAG_LEN] {
        let full = self.mac.finalize().into_bytes();
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&full[..TAG_LEN]);
        t
    }

    /// Whether `tag` is this frame's tag (constant-time comparison).
    pub fn verify(self, tag: &[u8]) -> bool {
        tag.len() == TAG_LEN && self.mac.verify_truncated_left(tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Header, Kind, HEADER_LEN};

    fn key(nonce: u8) -> SessionKey {
        SessionKey::derive(b"sixteen-bytes!!!", 7, 2, 0, &[nonce; 16], &[9; 16])
    }

    fn frame(seq_field: u64, len: usize) -> ([u8; HEADER_LEN], Vec<u8>) {
        let mut h = Header::control(Kind::Data, 2, 7, len);
        h.seq = seq_field;
        let body = (0..len).map(|i| (i * 7 % 256) as u8).collect();
        (h.encode(), body)
    }

    /// Frames tagged by one end verify at the other, in order, including payloads fed in
    /// pieces; the tag is 16 bytes.
    #[test]
    fn tagged_frames_verify_in_order() {
        let k = key(1);
        let (mut tx, mut rx) = (k.direction(true), k.direction(true));
        for i in 0..5u64 {
            let (h, body) = frame(i, 1000 * i as usize);
            let tag = tx.tag(&h, &[&body[..body.len() / 3], &body[body.len() / 3..]]);
            assert_eq!(tag.len(), TAG_LEN);
            let mut m = rx.begin(&h);
            assert_eq!(m.seq, i);
            for c in body.chunks(333) {
                m.update(c);
            }
            assert!(m.verify(&tag), "frame {i}");
        }
    }

    /// A flipped bit anywhere (header, payload, tag), a replayed, dropped or reordered frame,
    /// a frame reflected to its sender, a frame of another connection and a short tag all fail.
    #[test]
    fn altered_replayed_reordered_or_moved_frames_fail() {
        let k = key(1);
        let (h, body) = frame(3, 64);
        let good = k.direction(true).tag(&h, &[&body]);
        let check = |rx: &mut Direction, h: &[u8], body: &[u8], tag: &[u8]| {
            let mut m = rx.begin(h);
            m.update(body);
            m.verify(tag)
        };
        assert!(check(&mut k.direction(true), &h, &body, &good));
        for bit in 0..(48 + 64 + TAG_LEN) * 8 {
            let (mut h2, mut b2, mut t2) = (h, body.clone(), good);
            let (byte, mask) = (bit / 8, 1u8 << (bit % 8));
            match byte {
                b if b < 48 => h2[b] ^= mask,
                b if b < 48 + 64 => b2[b - 48] ^= mask,
                b => t2[b - 48 - 64] ^= mask,
            }
            assert!(
                !check(&mut k.direction(true), &h2, &b2, &t2),
                "bit {bit} flipped"
            );
        }
        // Replay: the same frame again is the receiver's second frame, not its first.
        let mut rx = k.direction(true);
        assert!(check(&mut rx, &h, &body, &good));
        assert!(!check(&mut rx, &h, &body, &good), "replayed");
        // Reordered: the second frame sent arrives first.
        let mut tx = k.direction(true);
        let (h1, b1) = frame(1, 8);
        let (h2, b2) = frame(2, 8);
        let t1 = tx.tag(&h1, &[&b1]);
        let t2 = tx.tag(&h2, &[&b2]);
        let mut rx = k.direction(true);
        assert!(!check(&mut rx, &h2, &b2, &t2), "reordered");
        let mut rx = k.direction(true);
        assert!(check(&mut rx, &h1, &b1, &t1) && check(&mut rx, &h2, &b2, &t2));
        // Reflected: the dialer's frame offered to the dialer as if from the acceptor.
        assert!(
            !check(&mut k.direction(false), &h, &body, &good),
            "reflected"
        );
        // Another connection (other nonce, other ranks) or another secret.
        assert!(!check(&mut key(2).direction(true), &h, &body, &good));
        let other = SessionKey::derive(b"sixteen-bytes!!!", 7, 3, 0, &[1; 16], &[9; 16]);
        assert!(!check(&mut other.direction(true), &h, &body, &good));
        let other = SessionKey::derive(b"sixteen-bytes!!?", 7, 2, 0, &[1; 16], &[9; 16]);
        assert!(!check(&mut other.direction(true), &h, &body, &good));
        // A truncated or empty tag never verifies.
        assert!(!check(&mut k.direction(true), &h, &body, &good[..8]));
        assert!(!check(&mut k.direction(true), &h, &body, &[]));
    }
}
