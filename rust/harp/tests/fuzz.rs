//! Hostile input through the real decode path: the minimal inputs that used to panic or allocate
//! a declared size up front (issue 14), and a bounded randomized run (deterministic seed) of
//! mutated valid batches and headers. Every input must end in `Ok` or a protocol/data error:
//! no panic, and no allocation out of proportion to the input.
//!
//! `HARP_FUZZ_ITERS=N` runs longer (default 40 000 batches + 40 000 headers); see
//! docs/wire-protocol.md, "Fuzzing".

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;

use harp::collective::framing::decode_inline_batch;
use harp::collective::{absorb, write_pieces};
use harp::data::{Array, Combiner, DType, Key, KeyType, KvTable, Layout, Table, Value, ValueType};
use harp::pool::Pool;
use harp::wire::{self, Header, Kind, Op, PieceMeta, COMPACT_MAX, HEADER_LEN};

/// Records the largest single allocation made by the current thread (what a hostile size
/// would blow up).
struct Peak;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, l: AllocLayout) -> *mut u8 {
        note(l.size());
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: AllocLayout) -> *mut u8 {
        note(l.size());
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: AllocLayout, n: usize) -> *mut u8 {
        note(n);
        System.realloc(p, l, n)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: AllocLayout) {
        System.dealloc(p, l)
    }
}

fn note(n: usize) {
    let _ = LARGEST.try_with(|c| c.set(c.get().max(n)));
}

#[global_allocator]
static A: Peak = Peak;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Decodes `body` as a received batch and puts its pieces into a table (as gather/allgather
/// do) and into another one (as the reduce root does); returns the first error.
fn take(body: &[u8]) -> harp::error::Result<()> {
    let pool = Pool::default();
    let pieces = decode_inline_batch(&pool, pool.copy_of(body))?;
    let again = decode_inline_batch(&pool, pool.copy_of(body))?;
    let mut t = Table::new(Combiner::Sum);
    t.add(1, Array::zeros(&pool, DType::F64, 4))?;
    let absorbed = absorb(&mut t, &pool, pieces);
    let mut w = Table::new(Combiner::Sum);
    let written = write_pieces(&mut w, &pool, again);
    absorbed.and(written)
}

fn expect_protocol(body: &[u8], what: &str) -> String {
    let e = take(body).expect_err(what);
    assert_eq!(e.kind(), "protocol", "{what}: {e}");
    e.to_string()
}

/// A piece whose bytes travel inline.
fn inline_piece(pid: u32, layout: Layout, total: u64, offset: u64, len: u64) -> PieceMeta {
    PieceMeta {
        pid,
        layout,
        total,
        offset,
        len,
        inline: true,
    }
}

/// A batch payload: the piece list of `pieces` (today's encoding), then `inline` bytes.
fn batch(pieces: &[PieceMeta], inline: &[u8]) -> Vec<u8> {
    let mut b = vec![];
    wire::encode_batch_meta(pieces, &mut b);
    b.extend_from_slice(inline);
    b
}

/// The three minimal inputs of issue 14, in the encoding of their time (a bare dtype where the
/// layout is now; the bincode piece list of wire versions 1 to 5, hence the hex) and rebuilt
/// for today's encoding.
#[test]
fn issue_14_minimal_inputs_are_protocol_errors() {
    // Offset + length wrap around: offset 2^64 − 8, length 8, of a 16-byte i32 partition.
    let old = unhex("0f00000001010310fdf8ffffffffffffff08011111111111111111");
    let i32s = Layout::dense(DType::I32);
    let new = batch(&[inline_piece(1, i32s, 16, u64::MAX - 7, 8)], &[0x11; 8]);
    expect_protocol(&old, "old offset+len wrap");
    let e = expect_protocol(&new, "offset+len wrap");
    assert!(
        e.contains("partition 1") && e.contains("inconsistent bounds"),
        "{e}"
    );

    // Inline lengths that sum past 2^64 back to the bytes present.
    let old =
        unhex("150000000200041000100101040000fdffffffffffffffff01111111111111111111111111111111");
    expect_protocol(&old, "old inline length sum wrap");
    // 16 + (2^64 − 1) wraps to 15: give 15 inline bytes so that a wrapping check would pass.
    let new = batch(
        &[
            inline_piece(0, Layout::dense(DType::U8), 16, 0, 16),
            inline_piece(1, Layout::dense(DType::U8), 0, 0, u64::MAX),
        ],
        &[0x11u8; 15],
    );
    let e = expect_protocol(&new, "inline length sum wrap");
    assert!(e.contains("partition 1"), "{e}");

    // A partial piece of a 64 MiB partition (and of 1 TiB): 8 bytes arrive, nothing large is
    // allocated, and the partition is reported incomplete.
    let old = unhex("0b000000010104fc000000040008011111111111111111");
    expect_protocol(&old, "old 64 MiB up front");
    for total in [64 << 20, 1 << 40] {
        let body = batch(
            &[inline_piece(1, Layout::dense(DType::U8), total, 0, 8)],
            &[0x11u8; 8],
        );
        LARGEST.with(|c| c.set(0));
        let e = expect_protocol(&body, "declared size up front");
        assert!(
            e.contains("incomplete") || e.contains("would create partition 1"),
            "{e}"
        );
        let largest = LARGEST.with(|c| c.get());
        assert!(largest < 2 << 20, "allocated {largest} bytes for 8");
    }
}

/// A frame header announcing 2^40 bytes decodes (it is the reader that refuses it against its
/// limit, see transport::reader), but no header field can make decoding panic.
#[test]
fn huge_lengths_in_headers_decode_without_allocating() {
    let mut h = Header::control(Kind::Data, 1, 7, 0);
    h.len = 1 << 40;
    LARGEST.with(|c| c.set(0));
    assert_eq!(Header::decode(&h.encode()).unwrap().len, 1 << 40);
    let mut b = [0u8; COMPACT_MAX];
    let n = h.encode_compact(&mut b);
    assert_eq!(Header::decode_compact(&b[..n], 1, 7).unwrap().len, 1 << 40);
    assert!(LARGEST.with(|c| c.get()) < 4096);
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A valid batch payload: 1–5 partitions, dense ones whole or cut in two pieces, key-value ones
/// whole, inline, as a sender encodes them (pids from 2: partition 1 is already in the
/// receiving table).
fn valid_batch(rng: &mut Rng) -> Vec<u8> {
    let n = 1 + rng.below(5) as u32;
    let mut pieces = Vec::new();
    let mut bytes = Vec::new();
    for pid in 2..2 + n {
        if rng.below(3) == 0 {
            // A key-value partition, whole (only whole ones are written into tables).
            let kv = kv_partition(rng);
            let total = kv.len() as u64;
            pieces.push(inline_piece(pid, KV, total, 0, total));
            bytes.extend(kv);
            continue;
        }
        let dtype = DType::ALL[rng.below(DType::ALL.len() as u64) as usize];
        let unit = dtype.size() as u64;
        let elems = rng.below(40);
        let total = elems * unit;
        let cut = rng.below(elems + 1) * unit;
        let ranges = match rng.below(2) {
            0 => vec![(0, total)],
            _ => vec![(cut, total - cut), (0, cut)],
        };
        for (offset, len) in ranges {
            pieces.push(inline_piece(pid, Layout::dense(dtype), total, offset, len));
            bytes.extend((0..len).map(|_| rng.next() as u8));
        }
    }
    batch(&pieces, &bytes)
}

const KV: Layout = Layout::KeyValue {
    key: KeyType::Str,
    value: ValueType::Array(DType::I32),
};

/// The bytes of a valid key-value partition (str keys → i32 arrays) of 0–8 entries.
fn kv_partition(rng: &mut Rng) -> Vec<u8> {
    let mut t = KvTable::new(
        KeyType::Str,
        ValueType::Array(DType::I32),
        Combiner::Append,
        1,
    )
    .expect("append suits arrays");
    for _ in 0..rng.below(9) {
        let key: Vec<u8> = (0..rng.below(6)).map(|_| rng.next() as u8).collect();
        let vals: Vec<i32> = (0..rng.below(4)).map(|_| rng.next() as i32).collect();
        t.add(Key::Str(&key), Value::array(&vals)).unwrap();
    }
    let pool = Pool::default();
    let table = t.into_table(&pool).unwrap();
    table.get(0).map(|a| a.bytes().to_vec()).unwrap_or_default()
}

const INTERESTING: [u64; 10] = [
    0,
    1,
    0xfb,
    0xfc,
    0xfd,
    u32::MAX as u64,
    1 << 32,
    1 << 40,
    u64::MAX - 7,
    u64::MAX,
];

fn mutate(rng: &mut Rng, b: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() as u64 + 1) as usize;
        match rng.below(7) {
            0 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] = rng.next() as u8;
            }
            2 => b.insert(at, rng.next() as u8),
            3 if at < b.len() => {
                b.remove(at);
            }
            4 => b.truncate(at),
            5 => {
                // A bincode varint of an interesting value (u64 marker 0xfd + 8 bytes).
                let v = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
                let mut enc = vec![0xfd];
                enc.extend(v.to_le_bytes());
                let end = (at + enc.len()).min(b.len());
                b.splice(at..end, enc);
            }
            _ => {
                // Rewrite the metadata length prefix.
                let v = INTERESTING[rng.below(INTERESTING.len() as u64) as usize] as u32;
                if b.len() >= 4 {
                    b[..4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
}

fn iterations() -> u64 {
    std::env::var("HARP_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000)
}

/// Mutated valid batches through decode, absorb and write: no panic, allocation bounded by
/// the input. Valid batches (before mutation) must decode.
#[test]
fn randomized_batches_never_panic_or_over_allocate() {
    let iters = iterations();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let (mut ok, mut refused, mut panics) = (0u64, 0u64, Vec::new());
    // Mutated key-value partitions refused by their validation.
    let mut kv_refused = 0u64;
    let mut worst = 0usize;
    let start = std::time::Instant::now();
    for _ in 0..iters {
        let valid = valid_batch(&mut rng);
        if let Err(e) = take(&valid) {
            panic!("a valid batch must be taken: {e} for {}", hex(&valid));
        }
        let mut b = valid.clone();
        mutate(&mut rng, &mut b);
        LARGEST.with(|c| c.set(0));
        match std::panic::catch_unwind(|| take(&b)) {
            Ok(Ok(())) => ok += 1,
            Ok(Err(e)) => {
                assert!(
                    matches!(e.kind(), "protocol" | "data"),
                    "{e} for {}",
                    hex(&b)
                );
                refused += 1;
                kv_refused += e.to_string().contains("malformed key-value partition") as u64;
            }
            Err(_) => panics.push(hex(&b)),
        }
        let largest = LARGEST.with(|c| c.get());
        worst = worst.max(largest);
        // The only allocation not proportional to the input is a partition created by a piece
        // (at most 1 MiB, or 4096 times the piece): inputs here are under 2 KiB.
        assert!(
            largest <= (2 << 20).max(4200 * b.len()),
            "{largest} bytes allocated for {} input bytes: {}",
            b.len(),
            hex(&b)
        );
    }
    eprintln!(
        "fuzz batches: {iters} inputs in {:.2} s: {ok} accepted, {refused} refused ({kv_refused} \
         malformed key-value partitions), {} panics, largest allocation {worst} bytes",
        start.elapsed().as_secs_f64(),
        panics.len()
    );
    assert!(
        panics.is_empty(),
        "{} panics, first: {:?}",
        panics.len(),
        &panics[..panics.len().min(3)]
    );
    assert!(
        kv_refused > iters / 1000,
        "{kv_refused} key-value partitions refused"
    );
    assert!(
        refused > iters / 10 && ok > 0,
        "mutations too weak or too strong"
    );
}

/// Random and mutated headers: decoding never panics, and whatever decodes encodes back to the
/// same bytes (apart from the reserved ones).
#[test]
fn randomized_headers_round_trip_or_fail_cleanly() {
    let iters = iterations();
    let mut rng = Rng(0xfeed_beef_0bad_cafe);
    let mut decoded = 0u64;
    for i in 0..iters {
        let mut h = Header::control(Kind::Batch, rng.below(64) as usize, rng.next(), 0);
        h.op = Op::from_u8(rng.below(13) as u8).unwrap();
        h.seq = rng.next();
        h.len = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
        let mut b = h.encode();
        if i % 2 == 0 {
            for _ in 0..1 + rng.below(3) {
                b[rng.below(HEADER_LEN as u64) as usize] = rng.next() as u8;
            }
        }
        if let Ok(d) = Header::decode(&b) {
            decoded += 1;
            let mut again = d.encode();
            again[9..12].copy_from_slice(&b[9..12]);
            assert_eq!(again, b);
        }
    }
    assert!(decoded > iters / 2, "{decoded} of {iters}");
}

/// The compact header of every frame after the authentication: random fields, half of them
/// mutated (bytes changed, cut, or one added); decoding never panics, and whatever decodes
/// encodes back to exactly the same bytes (every header has one encoding).
#[test]
fn randomized_compact_headers_round_trip_or_fail_cleanly() {
    let iters = iterations();
    let mut rng = Rng(0x0dd_c0de_5eed_f00d);
    let mut decoded = 0u64;
    let mut seen = [0u64; COMPACT_MAX + 1];
    for i in 0..iters {
        let mut h = Header::control(Kind::Batch, 3, 11, 0);
        h.op = Op::from_u8(rng.below(14) as u8).unwrap();
        h.algo = rng.next() as u8;
        // Numbers of every width: one byte, all bits, or only the low 0-63 bits.
        let num = |rng: &mut Rng| match rng.below(4) {
            0 => rng.below(128),
            _ => rng.next() >> rng.below(64),
        };
        h.seq = num(&mut rng);
        h.tag = num(&mut rng) as u32;
        h.aux = num(&mut rng) as u32;
        h.len = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
        h.group = if i % 3 == 0 { num(&mut rng) } else { 0 };
        let mut b = [0u8; COMPACT_MAX];
        let n = h.encode_compact(&mut b);
        seen[n] += 1;
        let mut b = b[..n].to_vec();
        assert_eq!(Header::decode_compact(&b, 3, 11).unwrap(), h);
        if i % 2 == 0 {
            match rng.below(4) {
                0 => b.truncate(rng.below(n as u64) as usize),
                1 => b.push(rng.next() as u8),
                _ => {
                    for _ in 0..1 + rng.below(3) {
                        let at = rng.below(b.len() as u64) as usize;
                        b[at] = rng.next() as u8;
                    }
                }
            }
        }
        if let Ok(d) = Header::decode_compact(&b, 3, 11) {
            decoded += 1;
            let mut again = [0u8; COMPACT_MAX];
            let m = d.encode_compact(&mut again);
            assert_eq!(&again[..m], &b[..], "{d:?}");
        }
    }
    assert!(decoded > iters / 2, "{decoded} of {iters}");
    assert!(
        seen[wire::COMPACT_MIN] > 0 && seen[30..].iter().sum::<u64>() > 0,
        "{seen:?}"
    );
}

/// Control messages of the collectives (bincode values) and the batch metadata itself:
/// mutated encodings decode or fail, never panic.
#[test]
fn randomized_control_messages_fail_cleanly() {
    let iters = iterations();
    let mut rng = Rng(42);
    let mut failed = 0u64;
    for _ in 0..iters {
        let v: (u32, Vec<u64>, String) = (
            rng.next() as u32,
            (0..rng.below(6)).map(|_| rng.next()).collect(),
            "x".repeat(rng.below(20) as usize),
        );
        let mut b = wire::encode(&v);
        mutate(&mut rng, &mut b);
        LARGEST.with(|c| c.set(0));
        let r = std::panic::catch_unwind(|| {
            let a = wire::decode::<(u32, Vec<u64>, String)>(&b).is_err();
            let m = wire::decode_pieces(&b, b.len() as u64).is_err();
            let l = wire::decode::<Layout>(&b).is_err();
            a || m || l
        });
        failed += r.unwrap_or_else(|_| panic!("panic on {}", hex(&b))) as u64;
        let largest = LARGEST.with(|c| c.get());
        assert!(largest <= 2 << 20, "{largest} bytes for {}", hex(&b));
    }
    assert!(failed > 0);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
