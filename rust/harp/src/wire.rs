//! Wire format. Every message is a frame: a header followed by `len` payload bytes. The three
//! frames of a connection's authentication (`Hello`, `Challenge`, `Proof`) carry the full
//! 56-byte little-endian header, which names the protocol, its version, the sender and the job:
//!
//! ```text
//! offset size field
//!  0     4    magic    0x48415250 ("HARP")
//!  4     2    version  WIRE_VERSION
//!  6     1    kind     Kind
//!  7     1    op       Op (which collective)
//!  8     1    algo     algorithm of that collective
//!  9     3    reserved (zero)
//! 12     4    src      sender's rank
//! 16     8    job      job id (hash of the job name)
//! 24     8    seq      operation sequence number (per job, per worker; the same on every worker)
//! 32     4    tag      step inside the operation
//! 36     4    aux      meaning depends on the algorithm (e.g. origin rank)
//! 40     8    len      payload bytes that follow
//! 48     8    group    the group of the operation (0: every worker; else `Group` id, a hash
//!                      of the member list); `seq` counts that group's operations
//! ```
//!
//! Every later frame of the connection carries the *compact* header
//! ([`Header::encode_compact`]): the same fields but magic, version, src and job, which the
//! authenticated connection already fixed, with the numbers as varints (about 11 bytes).
//!
//! With per-frame integrity on (`Config::frame_mac`), every frame after the authentication is
//! followed by a 16-byte tag, not counted in `len` (see `transport::integrity`).
//!
//! A `Batch` frame carries a set of *pieces* (byte ranges of partitions):
//! `[meta_len][piece list][bytes of the inline pieces]` (the piece list:
//! [`encode_batch_meta`]). Small pieces travel inline;
//! every other piece follows as its own `Data` frame, in order, written straight from the
//! partition's buffer (no staging), and may be forwarded as it arrives (pipelining). Control messages (`Ctrl`) are bincode-encoded values.

use serde::{de::DeserializeOwned, Serialize};

use crate::data::Layout;
use crate::error::{Error, Result};

pub const MAGIC: u32 = 0x4841_5250;
/// 3: `Hello` and `Challenge` state the sender's `frame_mac` setting (2 did not).
/// 4: `Event` frames (messages between workers outside collectives).
/// 5: the 56-byte header with `group` (collectives over sub-groups, each with its own sequence
///    numbers), the `Calibrate` operation (network measurement), and `Event` frames with tag
///    `EVENT_CREDIT` (flow control of events).
/// 6: the compact piece list of `Batch` frames (flags, pid steps, the layout only when it
///    changes; 3 bytes for a small whole piece instead of 7).
/// 7: the compact header on every frame after the authentication (about 11 bytes instead of
///    56), and piece flags for "the next pid" and "the previous total" (1 byte for a small
///    whole piece that follows one of the same size).
///
/// 8–11: docs/wire-protocol.md. 12: the scatter's delegate shape (`aux` 3); a batch's metadata
///    length as a varint, and runs of like pieces (1 byte for a run of small whole pieces).
/// 13: connections on first use: the acceptor's `Ctrl {welcome}` verdict after the proof.
pub const WIRE_VERSION: u16 = 13;
/// The full header (authentication frames).
pub const HEADER_LEN: usize = 56;
/// Longest compact header: its length byte, kind, op, algo and flags, then varints: seq (10
/// bytes), the tag's phase (2) and step (4), aux (5), len (10); and the group id (8).
pub const COMPACT_MAX: usize = 1 + 4 + 10 + 2 + 4 + 5 + 10 + 8;
/// Shortest compact header: every varint one byte, no group.
pub const COMPACT_MIN: usize = 1 + 4 + 1 + 1 + 1 + 1 + 1;
/// Compact header flag: the group id follows (else the group is 0).
const HDR_GROUP: u8 = 1;
/// Batches whose pieces add up to at most this many bytes travel inline in one frame.
pub const INLINE_MAX: u64 = 64 * 1024;
/// In larger batches, pieces up to this size still travel inline.
pub const INLINE_PIECE_MAX: u64 = 4 * 1024;
/// Default largest frame payload a worker accepts (4 GiB): one piece (a partition, a segment or
/// a chunk) travels in one frame, so this is also the largest piece a worker sends. A frame
/// announcing more is a protocol error that ends the connection (never an allocation).
pub const MAX_FRAME: u64 = 1 << 32;
/// Largest partition a piece may claim to belong to (1 TiB). Receivers allocate partitions as
/// their bytes arrive, so this bound only rejects absurd metadata early.
pub const MAX_PARTITION: u64 = 1 << 40;

/// `Event` frame tag: an application event without a label (`aux` = 0).
pub const EVENT_PLAIN: u32 = 0;
/// `Event` frame tag: an application event whose payload starts with a UTF-8 label of `aux`
/// bytes.
pub const EVENT_LABELED: u32 = 1;
/// `Event` frame tag: a message of the termination-detection protocol (`aux` = 0, the payload
/// is a bincode-encoded control message).
pub const EVENT_CONTROL: u32 = 2;
/// `Event` frame tag: flow-control credit (`aux` = 0, an 8-byte payload: the u64 little-endian
/// number of event bytes from the receiver of this frame that its sender has taken since its
/// last credit). Never queued as an event.
pub const EVENT_CREDIT: u32 = 3;
/// Longest event label, in bytes.
pub const MAX_LABEL: u32 = 4096;

/// A collective frame's `tag` is `phase << TAG_STEP_BITS | step` (the named phases are
/// `collective::tags`): 256 phases of 2^24 steps each.
pub const TAG_STEP_BITS: u32 = 24;
/// The most workers a job may have: the steps of a ring over all of them fit in one phase.
pub const MAX_WORKERS: usize = 1 << TAG_STEP_BITS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Hello = 1,
    Challenge = 2,
    Proof = 3,
    Ctrl = 4,
    Batch = 5,
    Data = 6,
    /// The sender is leaving the job in an orderly way.
    Bye = 7,
    /// The sender failed; the payload is its error message (UTF-8).
    Abort = 8,
    /// Liveness only (sent on idle connections).
    Heartbeat = 9,
    /// A message outside the collectives (the event lane): `tag` is one of the `EVENT_*`
    /// codes, `aux` the length of the label that starts the payload.
    Event = 10,
    /// The sender has waited a heartbeat interval in the rooted operation of the header's
    /// group, sequence number and op, whose root is `aux`; no payload. The receiver compares
    /// it with its own call of that operation.
    Waiting = 11,
}

impl Kind {
    fn from_u8(v: u8) -> Result<Kind> {
        Ok(match v {
            1 => Kind::Hello,
            2 => Kind::Challenge,
            3 => Kind::Proof,
            4 => Kind::Ctrl,
            5 => Kind::Batch,
            6 => Kind::Data,
            7 => Kind::Bye,
            8 => Kind::Abort,
            9 => Kind::Heartbeat,
            10 => Kind::Event,
            11 => Kind::Waiting,
            _ => return Err(Error::Protocol(format!("unknown frame kind {v}"))),
        })
    }
}

/// The collective a frame belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    Handshake = 0,
    Barrier = 1,
    Broadcast = 2,
    Reduce = 3,
    Gather = 4,
    Scatter = 5,
    Allgather = 6,
    Allreduce = 7,
    ReduceScatter = 8,
    Regroup = 9,
    Push = 10,
    Pull = 11,
    Rotate = 12,
    /// Network measurement (`Worker::calibrate`).
    Calibrate = 13,
}

impl Op {
    pub fn from_u8(v: u8) -> Result<Op> {
        use Op::*;
        const ALL: [Op; 14] = [
            Handshake,
            Barrier,
            Broadcast,
            Reduce,
            Gather,
            Scatter,
            Allgather,
            Allreduce,
            ReduceScatter,
            Regroup,
            Push,
            Pull,
            Rotate,
            Calibrate,
        ];
        ALL.get(v as usize)
            .copied()
            .ok_or_else(|| Error::Protocol(format!("unknown operation {v}")))
    }
    /// Parses a name given by [`Op::name`] (the vocabulary shared with Java).
    pub fn parse(name: &str) -> Result<Op> {
        (0..14u8)
            .map(|v| Op::from_u8(v).expect("in range"))
            .find(|o| o.name() == name)
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown operation {}",
                    crate::util::quote(name.as_bytes())
                ))
            })
    }

    /// The collectives that combine partitions from several workers: their frames carry the
    /// table's combiner beside the algorithm ([`with_combiner`]).
    pub fn combines(self) -> bool {
        matches!(
            self,
            Op::Reduce | Op::Allreduce | Op::ReduceScatter | Op::Regroup | Op::Push
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Handshake => "handshake",
            Op::Barrier => "barrier",
            Op::Broadcast => "broadcast",
            Op::Reduce => "reduce",
            Op::Gather => "gather",
            Op::Scatter => "scatter",
            Op::Allgather => "allgather",
            Op::Allreduce => "allreduce",
            Op::ReduceScatter => "reduce-scatter",
            Op::Regroup => "regroup",
            Op::Push => "push",
            Op::Pull => "pull",
            Op::Rotate => "rotate",
            Op::Calibrate => "calibrate",
        }
    }
}

/// The algorithm byte of a collective that combines ([`Op::combines`]): the algorithm's code
/// in the low four bits, the kind of the table's combiner (`Combiner::code`) in the high four.
/// Workers whose calls differ in either get an operation mismatch, not different results.
pub fn with_combiner(algo: u8, combiner: u8) -> u8 {
    debug_assert!(
        algo < 16 && combiner < 16,
        "algorithm {algo}, combiner {combiner}"
    );
    algo | combiner << 4
}

/// An operation and its algorithm byte as messages show them, e.g. `allreduce (algorithm 1,
/// combiner max)`.
pub fn describe(op: Op, algo: u8) -> String {
    if op.combines() {
        format!(
            "{} (algorithm {}, combiner {})",
            op.name(),
            algo & 15,
            crate::data::Combiner::code_name(algo >> 4)
        )
    } else {
        format!("{} (algorithm {algo})", op.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub op: Op,
    pub algo: u8,
    pub src: u32,
    pub job: u64,
    pub seq: u64,
    pub tag: u32,
    pub aux: u32,
    pub len: u64,
    /// The group whose operation `seq` is (0: the whole job).
    pub group: u64,
}

impl Header {
    /// A frame outside any collective (handshake, heartbeat, bye, abort): op 0, seq 0, tag 0.
    pub fn control(kind: Kind, src: usize, job: u64, len: usize) -> Header {
        Header {
            kind,
            op: Op::Handshake,
            algo: 0,
            src: src as u32,
            job,
            seq: 0,
            tag: 0,
            aux: 0,
            len: len as u64,
            group: 0,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&WIRE_VERSION.to_le_bytes());
        b[6] = self.kind as u8;
        b[7] = self.op as u8;
        b[8] = self.algo;
        b[12..16].copy_from_slice(&self.src.to_le_bytes());
        b[16..24].copy_from_slice(&self.job.to_le_bytes());
        b[24..32].copy_from_slice(&self.seq.to_le_bytes());
        b[32..36].copy_from_slice(&self.tag.to_le_bytes());
        b[36..40].copy_from_slice(&self.aux.to_le_bytes());
        b[40..48].copy_from_slice(&self.len.to_le_bytes());
        b[48..56].copy_from_slice(&self.group.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(0) != MAGIC {
            return Err(Error::Protocol(format!(
                "bad magic {:#x}: not a Harp-RS peer",
                u32_at(0)
            )));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != WIRE_VERSION {
            return Err(Error::Protocol(format!(
                "peer speaks wire version {version}, this worker speaks {WIRE_VERSION}"
            )));
        }
        Ok(Header {
            kind: Kind::from_u8(b[6])?,
            op: Op::from_u8(b[7])?,
            algo: b[8],
            src: u32_at(12),
            job: u64_at(16),
            seq: u64_at(24),
            tag: u32_at(32),
            aux: u32_at(36),
            len: u64_at(40),
            group: u64_at(48),
        })
    }

    /// Writes the compact header into `b` and returns its length: a length byte (the bytes
    /// that follow it), kind, op, algo, a flags byte (`HDR_GROUP`), then varints: `seq`, the
    /// tag's phase (`tag >> 24`) and step (its low 24 bits), `aux` and `len`; last
    /// the group id (u64) when it is not 0. `src` and `job` are not written: the connection
    /// fixed them at its authentication.
    pub fn encode_compact(&self, b: &mut [u8; COMPACT_MAX]) -> usize {
        b[1] = self.kind as u8;
        b[2] = self.op as u8;
        b[3] = self.algo;
        b[4] = if self.group != 0 { HDR_GROUP } else { 0 };
        let mut at = 5;
        let mut put = |v: u64, at: &mut usize| {
            let (bytes, n) = varint_bytes(v);
            b[*at..*at + n].copy_from_slice(&bytes[..n]);
            *at += n;
        };
        put(self.seq, &mut at);
        put(u64::from(self.tag >> 24), &mut at);
        put(u64::from(self.tag & 0x00ff_ffff), &mut at);
        put(u64::from(self.aux), &mut at);
        put(self.len, &mut at);
        if self.group != 0 {
            b[at..at + 8].copy_from_slice(&self.group.to_le_bytes());
            at += 8;
        }
        b[0] = (at - 1) as u8;
        at
    }

    /// Reads a compact header ([`Header::encode_compact`], including its length byte) received
    /// on the connection of rank `src` in job `job`. It must fill `b` exactly; unknown kinds,
    /// operations or flags, over-long or redundant varints and a tag over 32 bits are protocol
    /// errors.
    pub fn decode_compact(b: &[u8], src: u32, job: u64) -> Result<Header> {
        let bad = |what: &str| Error::Protocol(format!("malformed frame header: {what}"));
        if b.len() < COMPACT_MIN || b.len() > COMPACT_MAX || usize::from(b[0]) + 1 != b.len() {
            return Err(bad(&format!("{} bytes", b.len())));
        }
        let flags = b[4];
        if flags & !HDR_GROUP != 0 {
            return Err(bad(&format!("unknown flags {flags:#x}")));
        }
        let mut at = 5;
        let seq = get_varint(b, &mut at).map_err(bad)?;
        let phase = get_varint(b, &mut at).map_err(bad)?;
        let step = get_varint(b, &mut at).map_err(bad)?;
        if phase > 0xff || step > 0x00ff_ffff {
            return Err(bad("a tag over 32 bits"));
        }
        let aux = get_varint(b, &mut at).map_err(bad)?;
        let aux = u32::try_from(aux).map_err(|_| bad("aux over 32 bits"))?;
        let len = get_varint(b, &mut at).map_err(bad)?;
        let group = if flags & HDR_GROUP != 0 {
            let g = b.get(at..at + 8).ok_or_else(|| bad("truncated"))?;
            at += 8;
            match u64::from_le_bytes(g.try_into().expect("8 bytes")) {
                0 => return Err(bad("a group id of 0 flagged present")),
                g => g,
            }
        } else {
            0
        };
        if at != b.len() {
            return Err(bad(&format!("{} bytes after the last field", b.len() - at)));
        }
        Ok(Header {
            kind: Kind::from_u8(b[1])?,
            op: Op::from_u8(b[2])?,
            algo: b[3],
            src,
            job,
            seq,
            tag: (phase as u32) << 24 | step as u32,
            aux,
            len,
            group,
        })
    }
}

/// A byte range `[offset, offset+len)` of partition `pid`, which has `total` bytes arranged as
/// `layout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceMeta {
    pub pid: u32,
    pub layout: Layout,
    pub total: u64,
    pub offset: u64,
    pub len: u64,
    /// The bytes travel inside the batch frame (else in a `Data` frame of their own).
    pub inline: bool,
}

impl PieceMeta {
    pub fn whole(&self) -> bool {
        self.offset == 0 && self.len == self.total
    }
}

/// Flags of a piece in the piece list.
const PIECE_INLINE: u8 = 1;
/// The piece is its whole partition: offset 0 and len = total, neither follows.
const PIECE_WHOLE: u8 = 2;
/// A layout follows (else the piece has the previous piece's; the first always has one).
const PIECE_LAYOUT: u8 = 4;
/// The pid follows as its step up from the previous piece's pid (else as itself).
const PIECE_STEP: u8 = 8;
/// The pid is the previous piece's plus one; no pid follows (never with `PIECE_STEP`).
const PIECE_NEXT: u8 = 16;
/// The partition has the previous piece's `total`; no total follows.
const PIECE_SAME_TOTAL: u8 = 32;
/// A varint `k` follows the piece's fields: `k` more pieces like it come next, each in the
/// next partition (pid + 1) with its layout and total, whole and inline. Only on a whole,
/// inline, non-empty piece, so that every piece of a run has its own bytes in the frame.
const PIECE_RUN: u8 = 64;
const PIECE_FLAGS: u8 = PIECE_INLINE
    | PIECE_WHOLE
    | PIECE_LAYOUT
    | PIECE_STEP
    | PIECE_NEXT
    | PIECE_SAME_TOTAL
    | PIECE_RUN;
/// Senders start a run only when it saves bytes: at least this many pieces after the first.
const RUN_MIN: usize = 2;

/// Whether `m` may be in a run ([`PIECE_RUN`]): whole, inline and non-empty, so that it has
/// its own bytes in the frame.
fn may_run(m: &PieceMeta) -> bool {
    m.whole() && m.inline && m.total > 0
}

/// `v` as an unsigned LEB128 varint: the bytes and how many of them are used.
fn varint_bytes(mut v: u64) -> ([u8; 10], usize) {
    let (mut b, mut n) = ([0u8; 10], 0);
    while v >= 0x80 {
        b[n] = v as u8 | 0x80;
        n += 1;
        v >>= 7;
    }
    b[n] = v as u8;
    (b, n + 1)
}

fn put_varint(out: &mut Vec<u8>, v: u64) {
    let (b, n) = varint_bytes(v);
    out.extend_from_slice(&b[..n]);
}

/// Reads a varint at `*at` of `bytes`, refusing one that is cut short, does not fit 64 bits,
/// or has a redundant last byte (zero after the first: every number has one encoding).
fn get_varint(bytes: &[u8], at: &mut usize) -> std::result::Result<u64, &'static str> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at).ok_or("truncated")?;
        *at += 1;
        let bits = u64::from(b & 0x7f);
        if shift == 63 && bits > 1 {
            return Err("a number over 64 bits");
        }
        if b == 0 && shift > 0 {
            return Err("a number with a redundant byte");
        }
        v |= bits << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a number over 64 bits")
}

/// Appends `[meta_len][piece list]`, the head of a `Batch` payload listing `pieces`, to `out`.
/// `meta_len` is the list's length in bytes as a varint. The piece list is the piece count,
/// then per piece a flags byte (`PIECE_*`), the pid (or its step from the previous piece's),
/// the layout if it changed (bincode), `total`, `offset` and `len` unless the piece is whole,
/// and the length of the run it starts if it does; every number an unsigned LEB128 varint
/// (docs/wire-protocol.md, "Batches").
pub fn encode_batch_meta(pieces: &[PieceMeta], out: &mut Vec<u8>) {
    let at = out.len();
    // Room for a one-byte length, the common case; a longer one is made room for below.
    out.push(0);
    put_varint(out, pieces.len() as u64);
    let mut prev: Option<&PieceMeta> = None;
    let mut i = 0;
    while let Some(m) = pieces.get(i) {
        let run = run_after(pieces, i);
        let step = prev.and_then(|q| m.pid.checked_sub(q.pid));
        let layout = prev.is_none_or(|q| q.layout != m.layout);
        let same_total = prev.is_some_and(|q| q.total == m.total);
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        let flags = flag(m.inline, PIECE_INLINE)
            | flag(m.whole(), PIECE_WHOLE)
            | flag(layout, PIECE_LAYOUT)
            | match step {
                Some(1) => PIECE_NEXT,
                Some(_) => PIECE_STEP,
                None => 0,
            }
            | flag(same_total, PIECE_SAME_TOTAL)
            | flag(run > 0, PIECE_RUN);
        out.push(flags);
        if step != Some(1) {
            put_varint(out, u64::from(step.unwrap_or(m.pid)));
        }
        if layout {
            bincode::serde::encode_into_std_write(m.layout, out, config())
                .expect("encoding into memory cannot fail");
        }
        if !same_total {
            put_varint(out, m.total);
        }
        if !m.whole() {
            put_varint(out, m.offset);
            put_varint(out, m.len);
        }
        if run > 0 {
            put_varint(out, run as u64);
        }
        i += 1 + run;
        prev = Some(&pieces[i - 1]);
    }
    let (len, n) = varint_bytes((out.len() - at - 1) as u64);
    out.splice(at..at + 1, len[..n].iter().copied());
}

/// How many pieces after `pieces[i]` a run started there covers ([`PIECE_RUN`]): 0 unless it
/// is whole, inline, non-empty and followed by at least [`RUN_MIN`] like it in the next
/// partitions.
fn run_after(pieces: &[PieceMeta], i: usize) -> usize {
    let m = &pieces[i];
    if !may_run(m) {
        return 0;
    }
    let k = pieces[i + 1..]
        .iter()
        .zip(&pieces[i..])
        .take_while(|(n, q)| {
            q.pid.checked_add(1) == Some(n.pid)
                && n.layout == m.layout
                && n.total == m.total
                && may_run(n)
        })
        .count();
    if k >= RUN_MIN {
        k
    } else {
        0
    }
}

/// Reads a piece list ([`encode_batch_meta`], without the length before it) that must fill
/// `bytes` exactly. Malformed input is a protocol error; the list is allocated by the bytes
/// present, never by the count it claims.
pub fn decode_pieces(bytes: &[u8], inline_bytes: u64) -> Result<Vec<PieceMeta>> {
    let bad = |what: &str| Error::Protocol(format!("malformed piece list: {what}"));
    // Inline bytes the runs claim so far: no more than follow the list.
    let mut claimed = 0u64;
    let mut at = 0usize;
    let varint = |at: &mut usize| get_varint(bytes, at).map_err(bad);
    let count = varint(&mut at)?;
    // A piece takes at least 1 byte; the list grows past the first 4096 as pieces decode.
    let mut pieces = Vec::with_capacity((count as usize).min(bytes.len()).min(4096));
    let mut prev: Option<PieceMeta> = None;
    while (pieces.len() as u64) < count {
        let flags = *bytes.get(at).ok_or_else(|| bad("truncated"))?;
        at += 1;
        if flags & !PIECE_FLAGS != 0 {
            return Err(bad(&format!("unknown piece flags {flags:#x}")));
        }
        let relative = flags & (PIECE_STEP | PIECE_NEXT);
        if relative == PIECE_STEP | PIECE_NEXT {
            return Err(bad("a piece flagged both step and next"));
        }
        let n = if relative == PIECE_NEXT {
            1
        } else {
            varint(&mut at)?
        };
        let pid = match (relative != 0, prev) {
            (true, Some(q)) => u64::from(q.pid).checked_add(n),
            (true, None) => return Err(bad("the first piece's pid is relative")),
            (false, _) => Some(n),
        }
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| bad("a pid over 32 bits"))?;
        let layout = match (flags & PIECE_LAYOUT != 0, prev) {
            (true, _) => {
                let (l, used) = decode_limited::<Layout, 64>(&bytes[at..])?;
                at += used;
                l
            }
            (false, Some(q)) => q.layout,
            (false, None) => return Err(bad("the first piece has no layout")),
        };
        let total = match (flags & PIECE_SAME_TOTAL != 0, prev) {
            (true, Some(q)) => q.total,
            (true, None) => return Err(bad("the first piece has no total")),
            (false, _) => varint(&mut at)?,
        };
        let (offset, len) = if flags & PIECE_WHOLE != 0 {
            (0, total)
        } else {
            (varint(&mut at)?, varint(&mut at)?)
        };
        let m = PieceMeta {
            pid,
            layout,
            total,
            offset,
            len,
            inline: flags & PIECE_INLINE != 0,
        };
        if (flags & PIECE_WHOLE != 0) != m.whole() {
            return Err(bad(&format!(
                "piece of partition {pid} is flagged whole wrongly"
            )));
        }
        let run = if flags & PIECE_RUN != 0 {
            if !may_run(&m) {
                return Err(bad(&format!(
                    "a run from partition {pid}, which is not whole, inline and non-empty"
                )));
            }
            let k = varint(&mut at)?;
            let left = count - pieces.len() as u64 - 1;
            if k > left {
                return Err(bad(&format!(
                    "a run of {k} more pieces from partition {pid}, {left} left in the list"
                )));
            }
            if u64::from(pid) + k > u64::from(u32::MAX) {
                return Err(bad("a pid over 32 bits"));
            }
            claimed = (k + 1)
                .checked_mul(m.total)
                .and_then(|b| b.checked_add(claimed))
                .filter(|&c| c <= inline_bytes)
                .ok_or_else(|| {
                    bad(&format!(
                        "a run of {} pieces of {} bytes from partition {pid}, more than the \
                         {inline_bytes} inline bytes that follow",
                        k + 1,
                        m.total
                    ))
                })?;
            k as u32
        } else {
            0
        };
        for j in 0..=run {
            pieces.push(PieceMeta { pid: pid + j, ..m });
        }
        prev = pieces.last().copied();
    }
    if at != bytes.len() {
        return Err(bad(&format!(
            "{} bytes after the last piece",
            bytes.len() - at
        )));
    }
    Ok(pieces)
}

/// A decoded `Batch` payload: the pieces, and where their inline bytes start in the payload.
/// Every piece has been checked: whole units inside its partition, a partition of at most
/// [`MAX_PARTITION`] bytes, a separate piece of at most `max_frame` bytes, and inline pieces that
/// add up exactly to the bytes that follow the metadata (no arithmetic can wrap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchLayout {
    pub pieces: Vec<PieceMeta>,
    pub inline_at: usize,
}

/// Decodes and validates a `Batch` payload `[meta_len][piece list][inline bytes]`.
/// Any inconsistency is a protocol error; nothing is allocated beyond the metadata itself.
pub fn decode_batch(body: &[u8], max_frame: u64) -> Result<BatchLayout> {
    let mut at = 0;
    let mlen = get_varint(body, &mut at)
        .map_err(|e| Error::Protocol(format!("batch metadata length: {e}")))?;
    let inline_at = usize::try_from(mlen)
        .ok()
        .and_then(|m| at.checked_add(m))
        .filter(|&end| end <= body.len())
        .ok_or_else(|| {
            Error::Protocol(format!(
                "truncated batch: {mlen} metadata bytes announced, {} present",
                body.len() - at
            ))
        })?;
    let rest = (body.len() - inline_at) as u64;
    let pieces = decode_pieces(&body[at..inline_at], rest)?;
    let mut inline: u64 = 0;
    for p in &pieces {
        if p.total > MAX_PARTITION {
            return Err(Error::Protocol(format!(
                "piece of partition {} claims a partition of {} bytes (at most {MAX_PARTITION})",
                p.pid, p.total
            )));
        }
        p.layout.check_piece(p.pid, p.total, p.offset, p.len)?;
        if p.inline {
            inline = inline.checked_add(p.len).ok_or_else(|| {
                Error::Protocol("batch: inline piece lengths overflow".to_string())
            })?;
        } else if p.len > max_frame {
            return Err(Error::Protocol(format!(
                "piece of partition {} announces a frame of {} bytes (at most {max_frame})",
                p.pid, p.len
            )));
        }
    }
    if inline != rest {
        return Err(Error::Protocol(format!(
            "batch has a wrong length: its inline pieces add up to {inline} bytes, {rest} follow \
             the metadata"
        )));
    }
    Ok(BatchLayout { pieces, inline_at })
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_limit::<{ 1 << 30 }>()
}

pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(v, config()).expect("encoding an in-memory value cannot fail")
}

/// Decodes with a bound `L` on the bytes bincode may claim (allocate) while decoding.
fn decode_limited<T: DeserializeOwned, const L: usize>(bytes: &[u8]) -> Result<(T, usize)> {
    let cfg = bincode::config::standard()
        .with_little_endian()
        .with_limit::<L>();
    bincode::serde::decode_from_slice(bytes, cfg)
        .map_err(|e| Error::Protocol(format!("malformed message: {e}")))
}

/// How many bytes of memory a decoded value may claim per byte of its encoding: a varint of
/// one byte becomes an 8-byte integer, a small struct a few times its encoding.
const CLAIM_PER_BYTE: usize = 64;

/// Decodes a message of exactly `bytes`. A length prefix can claim at most
/// [`CLAIM_PER_BYTE`] times the message's size (rounded up to a power of 16, at least 64 KiB),
/// so a hostile prefix cannot make the decoder allocate more than the input justifies.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let need = bytes.len().saturating_mul(CLAIM_PER_BYTE);
    let (v, used) = match need {
        n if n <= 1 << 16 => decode_limited::<T, { 1 << 16 }>(bytes),
        n if n <= 1 << 20 => decode_limited::<T, { 1 << 20 }>(bytes),
        n if n <= 1 << 24 => decode_limited::<T, { 1 << 24 }>(bytes),
        n if n <= 1 << 28 => decode_limited::<T, { 1 << 28 }>(bytes),
        _ => decode_limited::<T, { 1 << 32 }>(bytes),
    }?;
    if used != bytes.len() {
        return Err(Error::Protocol(format!(
            "{} trailing bytes after message",
            bytes.len() - used
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_have_one_encoding_and_round_trip() {
        let values = [
            0,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            1 << 62,
            u64::MAX,
        ];
        let mut all = Vec::new();
        for v in values {
            let (b, n) = varint_bytes(v);
            let mut out = vec![7u8];
            put_varint(&mut out, v);
            assert_eq!(&out[1..], &b[..n], "{v}");
            all.extend_from_slice(&out[1..]);
        }
        assert_eq!((varint_bytes(127).1, varint_bytes(128).1), (1, 2));
        assert_eq!(varint_bytes(u64::MAX).1, 10);
        let mut at = 0;
        let back: Vec<u64> = values
            .iter()
            .map(|_| get_varint(&all, &mut at).unwrap())
            .collect();
        assert_eq!((back.as_slice(), at), (&values[..], all.len()));
    }

    #[test]
    fn header_round_trip_and_rejects() {
        let h = Header {
            kind: Kind::Batch,
            op: Op::Allreduce,
            algo: 2,
            src: 7,
            job: 0xdead_beef_1234,
            seq: 99,
            tag: 3,
            aux: 5,
            len: 1 << 40,
            group: 0x0123_4567_89ab_cdef,
        };
        let b = h.encode();
        assert_eq!(Header::decode(&b).unwrap(), h);
        let mut bad = b;
        bad[0] = 0;
        assert!(Header::decode(&bad)
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut bad = b;
        bad[4] = 8;
        assert!(Header::decode(&bad)
            .unwrap_err()
            .to_string()
            .contains("version 8"));
        let mut bad = b;
        bad[6] = 77;
        assert!(Header::decode(&bad).is_err());
    }

    /// The compact header round-trips every field but src and job (the connection's), takes
    /// 10 bytes for a small frame of the whole job, and refuses every malformed form.
    #[test]
    fn compact_headers_round_trip_and_reject() {
        let mut h = Header {
            kind: Kind::Data,
            op: Op::ReduceScatter,
            algo: 3,
            src: 7,
            job: 0xdead_beef_1234,
            seq: u64::MAX,
            tag: u32::MAX,
            aux: u32::MAX,
            len: u64::MAX,
            group: 0x0123_4567_89ab_cdef,
        };
        let mut b = [0u8; COMPACT_MAX];
        let n = h.encode_compact(&mut b);
        assert_eq!(n, COMPACT_MAX);
        assert_eq!(
            Header::decode_compact(&b[..n], 7, 0xdead_beef_1234).unwrap(),
            h
        );
        let other = Header::decode_compact(&b[..n], 2, 5).unwrap();
        assert_eq!((other.src, other.job), (2, 5));
        (h.seq, h.tag, h.aux, h.len, h.group) = (3, 2 << 24 | 1, 0, 120, 0);
        let n = h.encode_compact(&mut b);
        assert_eq!(n, COMPACT_MIN);
        let small = b[..n].to_vec();
        assert_eq!(
            Header::decode_compact(&small, 7, 0xdead_beef_1234).unwrap(),
            h
        );
        // Every cut short header, and one with a byte more, is refused.
        for cut in 0..n {
            assert!(
                Header::decode_compact(&small[..cut], 7, 1).is_err(),
                "cut {cut}"
            );
        }
        let bad = |bytes: &[u8], why: &str| {
            let e = Header::decode_compact(bytes, 7, 1).unwrap_err();
            assert_eq!(e.kind(), "protocol");
            assert!(e.to_string().contains(why), "{e}");
        };
        let mut longer = small.clone();
        longer[0] += 1;
        longer.push(0);
        bad(&longer, "1 bytes after the last field");
        let mut wrong = small.clone();
        wrong[0] -= 1;
        bad(&wrong, "10 bytes");
        let with = |i: usize, v: u8| {
            let mut x = small.clone();
            x[i] = v;
            x
        };
        bad(&with(1, 77), "unknown frame kind 77");
        bad(&with(2, 99), "unknown operation 99");
        bad(&with(4, 2), "unknown flags 0x2");
        bad(&with(4, HDR_GROUP), "truncated");
        // seq 3 written with a redundant byte: 0x83 0x00.
        let mut redundant = small.clone();
        redundant.splice(5..6, [0x83, 0x00]);
        redundant[0] += 1;
        bad(&redundant, "redundant byte");
        // A phase of 256.
        let mut phase = small.clone();
        phase.splice(6..7, [0x80, 0x02]);
        phase[0] += 1;
        bad(&phase, "a tag over 32 bits");
        // A group flagged present but 0.
        let mut zero = with(4, HDR_GROUP);
        zero.extend([0; 8]);
        zero[0] += 8;
        bad(&zero, "group id of 0");
    }

    #[test]
    fn batches_are_checked_before_use() {
        let piece = |len, inline| PieceMeta {
            pid: 3,
            layout: Layout::dense(crate::data::DType::U8),
            total: len,
            offset: 0,
            len,
            inline,
        };
        let body = |pieces: Vec<PieceMeta>, extra: usize| {
            let mut b = vec![];
            encode_batch_meta(&pieces, &mut b);
            b.extend(vec![0u8; extra]);
            b
        };
        let ok = decode_batch(&body(vec![piece(5, true), piece(9, false)], 5), 9).unwrap();
        assert_eq!((ok.pieces.len(), ok.inline_at), (2, ok.inline_at));
        let e = decode_batch(&body(vec![piece(10, false)], 0), 9).unwrap_err();
        assert!(
            e.to_string().contains("frame of 10 bytes (at most 9)"),
            "{e}"
        );
        let e = decode_batch(&body(vec![piece(5, true)], 4), 9).unwrap_err();
        assert!(e.to_string().contains("add up to 5 bytes, 4 follow"), "{e}");
        let e = decode_batch(&body(vec![piece(MAX_PARTITION + 1, false)], 0), u64::MAX);
        assert!(e.unwrap_err().to_string().contains("claims a partition"));
        for short in [&[][..], &[0x80], &[2, 1], &[9, 0, 0, 0, 1]] {
            assert_eq!(decode_batch(short, 9).unwrap_err().kind(), "protocol");
        }
    }

    #[test]
    fn piece_lists_round_trip_compactly() {
        use crate::data::{DType, KeyType, ValueType};
        let f64s = Layout::dense(DType::F64);
        let kv = Layout::KeyValue {
            key: KeyType::Str,
            value: ValueType::Array(DType::I32),
        };
        let piece = |pid, layout, total, offset, len, inline| PieceMeta {
            pid,
            layout,
            total,
            offset,
            len,
            inline,
        };
        let lists = [
            vec![],
            vec![piece(u32::MAX, kv, u64::MAX, 0, u64::MAX, false)],
            vec![
                piece(4, f64s, 32, 0, 32, true),
                piece(5, f64s, 32, 0, 32, true),
                piece(12, f64s, 32, 0, 32, true),
                piece(12, kv, 1000, 0, 400, false),
                piece(12, kv, 1000, 400, 600, true),
                piece(3, f64s, 0, 0, 0, true),
                piece(7, Layout::Edges { weighted: true }, 48, 24, 24, false),
            ],
        ];
        let inline_of = |pieces: &[PieceMeta]| -> u64 {
            pieces.iter().filter(|p| p.inline).map(|p| p.len).sum()
        };
        // A run of ten small whole pieces among others, and one that ends the list.
        let mut runs: Vec<PieceMeta> = (20..30).map(|i| piece(i, f64s, 32, 0, 32, true)).collect();
        runs.push(piece(31, f64s, 32, 0, 32, true));
        runs.extend((32..35).map(|i| piece(i, f64s, 8, 0, 8, true)));
        runs.push(piece(35, f64s, 8, 0, 8, false));
        runs.extend((40..43).map(|i| piece(i, kv, 5, 0, 5, true)));
        // Long enough for a two-byte metadata length.
        let long: Vec<PieceMeta> = (0..200)
            .map(|i| piece(2 * i, f64s, 8, 0, 8, true))
            .collect();
        for pieces in lists.into_iter().chain([runs, long]) {
            let mut head = vec![7];
            encode_batch_meta(&pieces, &mut head);
            assert_eq!(head[0], 7);
            let mut at = 1;
            let len = get_varint(&head, &mut at).unwrap() as usize;
            assert_eq!(len, head.len() - at);
            let budget = inline_of(&pieces);
            assert_eq!(decode_pieces(&head[at..], budget).unwrap(), pieces);
            // Every cut short list, and any list with a byte more, is refused.
            for cut in at..head.len() {
                assert!(
                    decode_pieces(&head[at..cut], budget).is_err(),
                    "{pieces:?} cut at {cut}"
                );
            }
            let mut longer = head[at..].to_vec();
            longer.push(0);
            assert!(decode_pieces(&longer, budget).is_err());
        }
        // A small whole piece that follows one of the same size in the next partition costs
        // 1 byte (its flags), another size 2 (flags, total), a gap in the pids 3; sixteen in a
        // row are one run: the first piece and the run's length.
        let run: Vec<PieceMeta> = (0..16).map(|i| piece(i, f64s, 32, 0, 32, true)).collect();
        let mut head = vec![];
        encode_batch_meta(&run, &mut head);
        assert_eq!(head.len(), 1 + 1 + 5 + 1);
        assert_eq!(decode_pieces(&head[1..], 16 * 32).unwrap(), run);
        // The run's pieces must have their bytes in the frame.
        let e = decode_pieces(&head[1..], 16 * 32 - 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than the 511 inline bytes"), "{e}");
        // Two like pieces after the first make a run, one does not.
        for n in 2..=4 {
            let mut head = vec![];
            encode_batch_meta(&run[..n], &mut head);
            assert_eq!(head[2] & PIECE_RUN != 0, n > 2, "{n}");
            assert_eq!(decode_pieces(&head[1..], 1024).unwrap(), run[..n], "{n}");
        }
        let sizes = [
            piece(0, f64s, 8, 0, 8, true),
            piece(1, f64s, 16, 0, 16, true),
        ];
        let gap = [
            piece(0, f64s, 8, 0, 8, true),
            piece(2, f64s, 16, 0, 16, true),
        ];
        for (list, second) in [(&sizes, 2), (&gap, 3)] {
            let mut head = vec![];
            encode_batch_meta(list, &mut head);
            assert_eq!(head.len(), 1 + 1 + 5 + second);
            assert_eq!(decode_pieces(&head[1..], 24).unwrap(), list);
        }
        let bad = |bytes: &[u8], why: &str| {
            let e = decode_pieces(bytes, 1 << 20).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        };
        // A run on a piece that is not inline, not whole or empty; a run past the count.
        let (w, l, r) = (PIECE_WHOLE, PIECE_LAYOUT, PIECE_RUN);
        bad(
            &[3, w | l | r, 0, 0, 0, 8, 2],
            "not whole, inline and non-empty",
        );
        bad(
            &[3, l | r | 1, 0, 0, 0, 8, 0, 4, 2],
            "not whole, inline and non-empty",
        );
        bad(
            &[3, w | l | r | 1, 0, 0, 0, 0, 2],
            "not whole, inline and non-empty",
        );
        bad(
            &[3, w | l | r | 1, 0, 0, 0, 8, 3],
            "run of 3 more pieces from partition 0, 2 left",
        );
        bad(
            &[2, w | l | r | 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 8, 1],
            "over 32 bits",
        );
        bad(&[1, 0x80, 0, 0, 0, 32], "unknown piece flags 0x80");
        bad(
            &[1, PIECE_STEP | PIECE_LAYOUT, 0, 0, 0, 32],
            "first piece's pid is relative",
        );
        bad(
            &[1, PIECE_NEXT | PIECE_LAYOUT, 0, 0, 32],
            "first piece's pid is relative",
        );
        bad(
            &[1, PIECE_SAME_TOTAL | PIECE_LAYOUT, 0, 0, 0],
            "first piece has no total",
        );
        bad(
            &[
                2,
                PIECE_LAYOUT | PIECE_WHOLE,
                0,
                0,
                0,
                8,
                PIECE_STEP | PIECE_NEXT,
                1,
                8,
            ],
            "both step and next",
        );
        bad(
            &[1, PIECE_LAYOUT | PIECE_WHOLE, 0x85, 0, 0, 0, 8],
            "redundant byte",
        );
        bad(&[1, 0, 0, 32], "first piece has no layout");
        bad(
            &[1, PIECE_LAYOUT, 0, 0, 0, 32, 0, 32],
            "flagged whole wrongly",
        );
        bad(
            &[1, PIECE_LAYOUT | PIECE_WHOLE, 0x80, 0x80, 0x80, 0x80, 0x10],
            "over 32 bits",
        );
        let mut huge = vec![0xff; 10];
        huge[9] = 0x02;
        bad(&huge, "over 64 bits");
        // A count far beyond the bytes present allocates nothing and fails.
        bad(&[0xff, 0xff, 0xff, 0xff, 0x0f], "truncated");
    }
}
