//! Key-value tables: partitions of [`Layout::KeyValue`] hold entries `(key, value)` with
//! distinct keys in ascending order, encoded as below; when two partitions with the same id
//! meet, entries with equal keys are combined by the table's [`Combiner`] applied to their
//! values.
//!
//! # Types
//!
//! Keys ([`KeyType`]): `i64`, `i32`, or `str` (arbitrary byte strings, UTF-8 not required:
//! Hadoop's `Text` is bytes). Values ([`ValueType`]): a numeric scalar of a [`DType`] (`f64`,
//! `i64`, …), a numeric array of a [`DType`] of any length per entry (`f64[]`, …), or `bytes`.
//!
//! # Encoding of a partition (docs/wire-protocol.md, "Key-value partitions")
//!
//! A partition is its entries one after the other, nothing before or after (an empty partition
//! has 0 bytes). All integers are little-endian.
//!
//! ```text
//! entry  = key value
//! key    = i64: 8 bytes | i32: 4 bytes | str: u32 n, n bytes
//! value  = scalar T: size(T) bytes | T[]: u32 n, n·size(T) bytes | bytes: u32 n, n bytes
//! ```
//!
//! Keys are strictly increasing: i64 and i32 numerically, str bytewise (a prefix sorts first).
//! So a partition is canonical (same entries → same bytes), has no duplicate keys, can be
//! validated in one pass ([`validate`]), iterated without allocating ([`entries`]), built by
//! appending ([`Writer`]), and two partitions are combined by one merge pass.
//!
//! # Partitioning keys
//!
//! A key goes to partition `partition_of(key, n) = hash(key) mod n` ([`partition_of`]):
//! `hash` is splitmix64 ([`splitmix64`]) of the key as a u64 (i32 keys sign-extended to i64
//! first, so `5i32` and `5i64` land together) and FNV-1a 64 ([`fnv1a64`]) of a str key's bytes.
//!
//! # Building
//!
//! [`KvTable`] holds one hash map per partition id and combines on insert; several builders
//! (one per thread) are merged with [`KvTable::aggregate`] (rayon) before anything is sent;
//! [`KvTable::into_table`] encodes them into a [`Table`] of key-value partitions.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::array::{Array, DType, Elem};
use super::combiner::Combiner;
use super::layout::Layout;
use super::table::Table;
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::util::{fnv1a64, splitmix64};

/// The type of a key-value table's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeyType {
    I64,
    I32,
    /// A byte string (UTF-8 not required).
    Str,
}

impl KeyType {
    pub const ALL: [KeyType; 3] = [KeyType::I64, KeyType::I32, KeyType::Str];

    /// The name shared with Java: `i64`, `i32`, `str`.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::I64 => "i64",
            KeyType::I32 => "i32",
            KeyType::Str => "str",
        }
    }

    pub fn parse(name: &str) -> Result<KeyType> {
        KeyType::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown key type {} (i64, i32, str)",
                    crate::util::quote(name.as_bytes())
                ))
            })
    }
}

/// The type of a key-value table's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ValueType {
    /// One number of the element type.
    Scalar(DType),
    /// Numbers of the element type, any count per entry.
    Array(DType),
    /// A byte string.
    Bytes,
}

impl ValueType {
    /// Every value type, scalars then arrays (in [`DType::ALL`] order) then bytes.
    pub fn all() -> Vec<ValueType> {
        let mut v: Vec<ValueType> = DType::ALL.into_iter().map(ValueType::Scalar).collect();
        v.extend(DType::ALL.into_iter().map(ValueType::Array));
        v.push(ValueType::Bytes);
        v
    }

    /// The name shared with Java: `f64` (scalar), `f64[]` (array), …, `bytes`.
    pub fn name(self) -> String {
        match self {
            ValueType::Scalar(d) => d.name().to_string(),
            ValueType::Array(d) => format!("{}[]", d.name()),
            ValueType::Bytes => "bytes".to_string(),
        }
    }

    pub fn parse(name: &str) -> Result<ValueType> {
        ValueType::all()
            .into_iter()
            .find(|v| v.name() == name)
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown value type {name:?} (a number type f64, f32, i64, i32, u8, i16, i8, \
                     u16, u32, u64; an array of one, e.g. f64[]; or bytes)"
                ))
            })
    }
}

/// A key, borrowed from a partition or given by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'a> {
    I64(i64),
    I32(i32),
    Str(&'a [u8]),
}

impl<'a> Key<'a> {
    pub fn key_type(&self) -> KeyType {
        match self {
            Key::I64(_) => KeyType::I64,
            Key::I32(_) => KeyType::I32,
            Key::Str(_) => KeyType::Str,
        }
    }
    /// The key's bytes as they are encoded in a partition, without a str key's length prefix.
    fn raw(&self) -> RawKey<'a> {
        match *self {
            Key::I64(v) => RawKey::Num(v.to_le_bytes()),
            Key::I32(v) => RawKey::Num((v as i64).to_le_bytes()),
            Key::Str(s) => RawKey::Str(s),
        }
    }
}

impl std::fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::I64(v) => write!(f, "{v}"),
            Key::I32(v) => write!(f, "{v}"),
            // Quoted like a Rust string (invalid UTF-8 as U+FFFD), cut after 64 bytes: a huge
            // key must not become a huge message.
            Key::Str(s) => {
                write!(f, "{:?}", String::from_utf8_lossy(&s[..s.len().min(64)]))?;
                if s.len() > 64 {
                    write!(f, "… ({} bytes)", s.len())?;
                }
                Ok(())
            }
        }
    }
}

impl From<i64> for Key<'_> {
    fn from(v: i64) -> Self {
        Key::I64(v)
    }
}
impl From<i32> for Key<'_> {
    fn from(v: i32) -> Self {
        Key::I32(v)
    }
}
impl<'a> From<&'a [u8]> for Key<'a> {
    fn from(v: &'a [u8]) -> Self {
        Key::Str(v)
    }
}
impl<'a> From<&'a str> for Key<'a> {
    fn from(v: &'a str) -> Self {
        Key::Str(v.as_bytes())
    }
}

enum RawKey<'a> {
    /// i64 and i32 keys as 8 little-endian bytes of the i64.
    Num([u8; 8]),
    Str(&'a [u8]),
}

impl RawKey<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            RawKey::Num(b) => b,
            RawKey::Str(s) => s,
        }
    }
}

/// A value: its type and its payload (the elements, little-endian, or the bytes; without the
/// length prefix of the encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value<'a> {
    pub ty: ValueType,
    pub payload: &'a [u8],
}

impl<'a> Value<'a> {
    /// A scalar value (`v` must outlive the value: `Value::scalar(&1i64)`).
    pub fn scalar<T: Elem>(v: &'a T) -> Value<'a> {
        Value {
            ty: ValueType::Scalar(T::DTYPE),
            payload: bytemuck::bytes_of(v),
        }
    }
    /// An array value.
    pub fn array<T: Elem>(v: &'a [T]) -> Value<'a> {
        Value {
            ty: ValueType::Array(T::DTYPE),
            payload: bytemuck::cast_slice(v),
        }
    }
    /// A byte-string value.
    pub fn bytes(v: &'a [u8]) -> Value<'a> {
        Value {
            ty: ValueType::Bytes,
            payload: v,
        }
    }
    /// The number of a scalar value of element type `T`.
    pub fn get<T: Elem>(&self) -> Result<T> {
        match self.ty {
            ValueType::Scalar(d) if d == T::DTYPE => Ok(bytemuck::pod_read_unaligned(self.payload)),
            _ => Err(self.mismatch(T::DTYPE.name())),
        }
    }
    /// The numbers of an array value of element type `T` (payloads are not aligned: this
    /// reads them one by one, without allocating).
    pub fn elems<T: Elem>(&self) -> Result<impl Iterator<Item = T> + 'a> {
        match self.ty {
            ValueType::Array(d) if d == T::DTYPE => Ok(self
                .payload
                .chunks_exact(d.size())
                .map(bytemuck::pod_read_unaligned)),
            _ => Err(self.mismatch(&format!("{}[]", T::DTYPE.name()))),
        }
    }
    /// The numbers of an array value as a vector.
    pub fn to_vec<T: Elem>(&self) -> Result<Vec<T>> {
        Ok(self.elems::<T>()?.collect())
    }
    fn mismatch(&self, want: &str) -> Error {
        Error::data(format!(
            "value of type {} was read as {want}",
            self.ty.name()
        ))
    }
    /// Checks that the payload is a well-formed value of its type.
    fn check(&self) -> std::result::Result<(), String> {
        let n = self.payload.len();
        let ok = match self.ty {
            ValueType::Scalar(d) => n == d.size(),
            // The encoding's u32 count: at most u32::MAX elements or bytes.
            ValueType::Array(d) => n.is_multiple_of(d.size()) && n / d.size() <= u32::MAX as usize,
            ValueType::Bytes => n <= u32::MAX as usize,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{n} bytes are not a value of type {}",
                self.ty.name()
            ))
        }
    }
}

/// A user-defined combiner of values: what a key-value table does when two entries with the
/// same key meet. Used as [`Combiner::KeyValue`].
pub trait KvCombiner: Send + Sync {
    /// A short name for logs and errors.
    fn name(&self) -> &str;
    /// Writes into `out` (empty on entry) the payload of the combination of `acc` (the value
    /// already in the table) and `other` (the one arriving); both have the table's value type
    /// and so must the result (a scalar of that size, whole array elements). An error fails
    /// the operation.
    fn combine(
        &self,
        key: Key<'_>,
        acc: Value<'_>,
        other: Value<'_>,
        out: &mut Vec<u8>,
    ) -> Result<()>;
}

/// The stable hash of a key: splitmix64 of an i64 key (an i32 key sign-extended to i64) as a
/// u64, FNV-1a 64 of a str key's bytes.
pub fn key_hash(key: Key<'_>) -> u64 {
    match key {
        Key::I64(v) => splitmix64(v as u64),
        Key::I32(v) => splitmix64(v as i64 as u64),
        Key::Str(s) => fnv1a64(s),
    }
}

/// The partition id of `key` among `n` partitions: `key_hash(key) mod n` (n > 0).
pub fn partition_of(key: Key<'_>, n: u32) -> u32 {
    (key_hash(key) % n.max(1) as u64) as u32
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// The key and value types of a key-value layout (what [`Layout::KeyValue`] holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Types {
    key: KeyType,
    value: ValueType,
}

fn types(layout: Layout) -> std::result::Result<Types, String> {
    match layout {
        Layout::KeyValue { key, value } => Ok(Types { key, value }),
        l => Err(format!("{l:?} is not a key-value layout")),
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Reads the entry at byte `at`: its key, value and the end of the entry; or why not.
fn read_entry(
    t: Types,
    b: &[u8],
    at: usize,
) -> std::result::Result<(Key<'_>, Value<'_>, usize), String> {
    let short = || format!("truncated entry at byte {at} of {}", b.len());
    let (key, mut p) = match t.key {
        KeyType::I64 => {
            let s = b.get(at..at + 8).ok_or_else(short)?;
            (
                Key::I64(i64::from_le_bytes(s.try_into().expect("8"))),
                at + 8,
            )
        }
        KeyType::I32 => {
            let s = b.get(at..at + 4).ok_or_else(short)?;
            (
                Key::I32(i32::from_le_bytes(s.try_into().expect("4"))),
                at + 4,
            )
        }
        KeyType::Str => {
            let n = u32_at(b, at).ok_or_else(short)? as usize;
            let s = b.get(at + 4..).and_then(|r| r.get(..n)).ok_or_else(|| {
                format!(
                    "entry at byte {at}: a key of {n} bytes runs past the end ({} bytes)",
                    b.len()
                )
            })?;
            (Key::Str(s), at + 4 + n)
        }
    };
    let n = match t.value {
        ValueType::Scalar(d) => d.size(),
        ValueType::Array(d) => {
            let c = u32_at(b, p).ok_or_else(short)? as usize;
            p += 4;
            c * d.size()
        }
        ValueType::Bytes => {
            let c = u32_at(b, p).ok_or_else(short)? as usize;
            p += 4;
            c
        }
    };
    let payload = b.get(p..).and_then(|r| r.get(..n)).ok_or_else(|| {
        format!(
            "entry at byte {at} (key {key}): a value of {n} bytes runs past the end ({} bytes)",
            b.len()
        )
    })?;
    Ok((
        key,
        Value {
            ty: t.value,
            payload,
        },
        p + n,
    ))
}

fn key_order(a: &Key<'_>, b: &Key<'_>) -> std::cmp::Ordering {
    match (a, b) {
        (Key::I64(x), Key::I64(y)) => x.cmp(y),
        (Key::I32(x), Key::I32(y)) => x.cmp(y),
        (Key::Str(x), Key::Str(y)) => x.cmp(y),
        _ => unreachable!("keys of one layout have one type"),
    }
}

/// Checks in one pass that `bytes` is a well-formed partition of `layout` (entries inside the
/// bytes, keys strictly increasing); returns the number of entries, or why not. Allocates
/// nothing.
pub fn validate(layout: Layout, bytes: &[u8]) -> std::result::Result<usize, String> {
    let mut c = Cursor::new(types(layout)?, bytes, "entries");
    let mut n = 0;
    while c.next()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// Iterator over the entries of a validated partition (see [`entries`]).
pub struct Entries<'a> {
    t: Types,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Entries<'a> {
    type Item = (Key<'a>, Value<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        // Validated when the iterator was made, and the bytes are borrowed: cannot fail.
        let (k, v, end) = read_entry(self.t, self.bytes, self.at).ok()?;
        self.at = end;
        Some((k, v))
    }
}

/// The entries of a key-value partition in key order, as views into its bytes (no allocation
/// per entry). Fails if `a` is not a well-formed key-value partition.
pub fn entries(a: &Array) -> Result<Entries<'_>> {
    let layout = a.layout();
    validate(layout, a.bytes())
        .map_err(|why| Error::data(format!("key-value partition: {why}")))?;
    Ok(Entries {
        t: types(layout).expect("validated"),
        bytes: a.bytes(),
        at: 0,
    })
}

/// The value of `key` in a key-value partition, if present (a scan in key order).
pub fn get<'a>(a: &'a Array, key: Key<'_>) -> Result<Option<Value<'a>>> {
    for (k, v) in entries(a)? {
        match key_order(&k, &key) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Equal => return Ok(Some(v)),
            std::cmp::Ordering::Greater => return Ok(None),
        }
    }
    Ok(None)
}

/// Builds a partition by appending entries in ascending key order.
pub struct Writer {
    t: Types,
    out: Vec<u8>,
}

impl Writer {
    /// A writer for a partition of `layout` (a key-value layout).
    pub fn new(layout: Layout) -> Result<Writer> {
        Ok(Writer {
            t: types(layout).map_err(Error::config)?,
            out: Vec::new(),
        })
    }
    fn key(&mut self, k: RawKey<'_>) {
        match (self.t.key, k) {
            (KeyType::I64, RawKey::Num(b)) => self.out.extend_from_slice(&b),
            (KeyType::I32, RawKey::Num(b)) => self.out.extend_from_slice(&b[..4]),
            (_, k) => {
                let s = k.bytes();
                self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                self.out.extend_from_slice(s);
            }
        }
    }
    fn value(&mut self, payload: &[u8]) {
        match self.t.value {
            ValueType::Scalar(_) => {}
            ValueType::Array(d) => self
                .out
                .extend_from_slice(&((payload.len() / d.size()) as u32).to_le_bytes()),
            ValueType::Bytes => self
                .out
                .extend_from_slice(&(payload.len() as u32).to_le_bytes()),
        }
        self.out.extend_from_slice(payload);
    }
    /// Appends an entry; its key must be greater than the previous one (checked when the
    /// partition is finished) and its types those of the layout.
    pub fn push(&mut self, key: Key<'_>, value: Value<'_>) -> Result<()> {
        check_entry(self.t, &key, &value)?;
        self.key(key.raw());
        self.value(value.payload);
        Ok(())
    }
    /// The finished partition in a buffer of `pool` (validated: keys must have been pushed in
    /// ascending order).
    pub fn finish(self, pool: &Pool) -> Result<Array> {
        let layout = Layout::KeyValue {
            key: self.t.key,
            value: self.t.value,
        };
        Array::from_layout(layout, pool.copy_of(&self.out))
    }
}

fn check_entry(t: Types, key: &Key<'_>, v: &Value<'_>) -> Result<()> {
    if key.key_type() != t.key {
        return Err(Error::data(format!(
            "key {key} is not of the table's key type {}",
            t.key.name()
        )));
    }
    if let Key::Str(s) = key {
        if s.len() > u32::MAX as usize {
            return Err(Error::data(format!(
                "key {key}: longer than {} bytes",
                u32::MAX
            )));
        }
    }
    if v.ty != t.value {
        return Err(Error::data(format!(
            "key {key}: a value of type {} given to a table of {} values",
            v.ty.name(),
            t.value.name()
        )));
    }
    v.check()
        .map_err(|why| Error::data(format!("key {key}: {why}")))
}

// ---------------------------------------------------------------------------------------------
// Combining

/// Checks that `combiner` can combine values of `value` type: sum, min and max need numbers,
/// append needs arrays or bytes, a partition-level custom combiner cannot combine key-value
/// partitions.
pub fn check_combiner(combiner: &Combiner, value: ValueType) -> Result<()> {
    let why = match (combiner, value) {
        (Combiner::Sum | Combiner::Min | Combiner::Max, ValueType::Bytes) => {
            "combines numbers, not byte strings"
        }
        (Combiner::Append, ValueType::Scalar(_)) => {
            "concatenates arrays or byte strings; a scalar value cannot hold both"
        }
        (Combiner::Custom(_), _) => {
            "is a partition combiner; key-value tables take a value combiner (Combiner::KeyValue)"
        }
        _ => return Ok(()),
    };
    Err(Error::config(format!(
        "combiner {} cannot combine key-value values of type {}: it {why}",
        combiner.name(),
        value.name()
    )))
}

/// Folds the payload `other` into `acc` (values of type `ty` of key `key`).
fn combine_values(
    c: &Combiner,
    ty: ValueType,
    key: Key<'_>,
    acc: &mut Vec<u8>,
    other: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<()> {
    match c {
        Combiner::Sum | Combiner::Min | Combiner::Max => {
            let d = match ty {
                ValueType::Scalar(d) | ValueType::Array(d) => d,
                ValueType::Bytes => return Err(check_combiner(c, ty).unwrap_err()),
            };
            if acc.len() != other.len() {
                return Err(Error::data(format!(
                    "key {key}: cannot {} an array of {} {} elements with one of {}",
                    c.name(),
                    acc.len() / d.size(),
                    d.name(),
                    other.len() / d.size()
                )));
            }
            // Unaligned payloads: fold through an aligned copy of each element.
            super::combiner::fold_unaligned(d, acc, other, c);
            Ok(())
        }
        Combiner::Append => match ty {
            ValueType::Scalar(_) => Err(check_combiner(c, ty).unwrap_err()),
            _ => {
                acc.extend_from_slice(other);
                Value { ty, payload: acc }
                    .check()
                    .map_err(|why| Error::data(format!("key {key}: appended, {why}")))
            }
        },
        Combiner::KeepFirst => Ok(()),
        Combiner::Reject => Err(Error::data(format!(
            "key {key} arrived twice and the table's combiner rejects duplicates"
        ))),
        Combiner::Custom(_) => Err(check_combiner(c, ty).unwrap_err()),
        Combiner::KeyValue(f) => {
            scratch.clear();
            f.combine(
                key,
                Value { ty, payload: acc },
                Value { ty, payload: other },
                scratch,
            )?;
            Value {
                ty,
                payload: scratch,
            }
            .check()
            .map_err(|why| {
                Error::data(format!("key {key}: combiner {} returned {why}", f.name()))
            })?;
            std::mem::swap(acc, scratch);
            Ok(())
        }
    }
}

/// Combines key-value partition `other` into `acc` (partition `id`): one merge pass; entries
/// with equal keys are combined by `c` applied to their values. The result replaces `acc` (in
/// a buffer of the pool of `acc` or `other`).
pub(crate) fn combine_partitions(
    c: &Combiner,
    id: u32,
    acc: &mut Array,
    other: &Array,
) -> Result<()> {
    let bad = |why: String| Error::data(format!("partition {id}: {why}"));
    let layout = acc.layout();
    let t = types(layout).map_err(bad)?;
    check_combiner(c, t.value).map_err(|e| bad(e.to_string()))?;
    let Some(pool) = acc.pool().or_else(|| other.pool()) else {
        return Ok(()); // both empty
    };
    let (a, b) = (acc.bytes(), other.bytes());
    let mut w = Writer {
        t,
        out: Vec::with_capacity(a.len() + b.len()),
    };
    let mut x = Cursor::new(t, a, "this worker's copy");
    let mut y = Cursor::new(t, b, "the arriving copy");
    let (mut acc_v, mut scratch) = (Vec::new(), Vec::new());
    let (mut ex, mut ey) = (x.next().map_err(bad)?, y.next().map_err(bad)?);
    loop {
        let order = match (&ex, &ey) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(p), Some(q)) => key_order(&p.0, &q.0),
        };
        match order {
            std::cmp::Ordering::Less => {
                w.out.extend_from_slice(ex.expect("some").2);
                ex = x.next().map_err(bad)?;
            }
            std::cmp::Ordering::Greater => {
                w.out.extend_from_slice(ey.expect("some").2);
                ey = y.next().map_err(bad)?;
            }
            std::cmp::Ordering::Equal => {
                let ((key, va, _), (_, vb, _)) = (ex.expect("some"), ey.expect("some"));
                acc_v.clear();
                acc_v.extend_from_slice(va.payload);
                combine_values(c, t.value, key, &mut acc_v, vb.payload, &mut scratch)
                    .map_err(|e| bad(e.to_string()))?;
                w.key(key.raw());
                w.value(&acc_v);
                ex = x.next().map_err(bad)?;
                ey = y.next().map_err(bad)?;
            }
        }
    }
    *acc = Array::from_layout(layout, pool.copy_of(&w.out))?;
    Ok(())
}

/// Reads a partition's entries one by one, checking that they lie inside the bytes and that
/// keys ascend (the merge relies on both).
struct Cursor<'a> {
    t: Types,
    bytes: &'a [u8],
    at: usize,
    prev: Option<Key<'a>>,
    what: &'static str,
}

impl<'a> Cursor<'a> {
    fn new(t: Types, bytes: &'a [u8], what: &'static str) -> Cursor<'a> {
        Cursor {
            t,
            bytes,
            at: 0,
            prev: None,
            what,
        }
    }
    /// The next entry: key, value and its encoded bytes.
    #[allow(clippy::type_complexity)]
    fn next(&mut self) -> std::result::Result<Option<(Key<'a>, Value<'a>, &'a [u8])>, String> {
        if self.at >= self.bytes.len() {
            return Ok(None);
        }
        let (k, v, end) =
            read_entry(self.t, self.bytes, self.at).map_err(|w| format!("{}: {w}", self.what))?;
        if let Some(p) = self.prev {
            if key_order(&p, &k) != std::cmp::Ordering::Less {
                return Err(format!(
                    "{}: entry at byte {}: key {k} does not follow key {p} (keys must be \
                     distinct and ascending)",
                    self.what, self.at
                ));
            }
        }
        let raw = &self.bytes[self.at..end];
        self.prev = Some(k);
        self.at = end;
        Ok(Some((k, v, raw)))
    }
}

// ---------------------------------------------------------------------------------------------
// Building

/// A fast, non-cryptographic hasher for the builder's maps (keys are the caller's own data).
#[derive(Default)]
pub struct KeyHasher(u64);

/// A `HashMap` with [`KeyHasher`] instead of SipHash: the engine's maps on hot paths (the
/// builder's, partition owners, the mailbox, vertex ids) use it.
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        splitmix64(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0 ^ 0xcbf2_9ce4_8422_2325;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            h = (h ^ u64::from_le_bytes(c.try_into().expect("8")))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h = h.rotate_left(29);
        }
        for &b in chunks.remainder() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = self
            .0
            .wrapping_add(n as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Map = FastMap<MapKey, Slot>;

/// Longest key kept inside the map's own slot.
const INLINE_KEY: usize = 23;
/// Longest value kept inside the map's own slot.
const INLINE_VALUE: usize = 16;

/// Bytes kept inside a builder map's slot when at most `N` long, on the heap otherwise, so that
/// a lookup does not follow a pointer to compare a short key or to add to a short value.
#[derive(Clone)]
enum Small<const N: usize> {
    Inline { len: u8, bytes: [u8; N] },
    Heap(Vec<u8>),
}

/// A builder map's key: the key's raw bytes (most words are inline).
type MapKey = Small<INLINE_KEY>;
/// A builder map's value payload (scalars and short arrays are inline).
type Slot = Small<INLINE_VALUE>;

impl<const N: usize> Small<N> {
    fn new(b: &[u8]) -> Self {
        if b.len() <= N {
            let mut bytes = [0u8; N];
            bytes[..b.len()].copy_from_slice(b);
            Small::Inline {
                len: b.len() as u8,
                bytes,
            }
        } else {
            Small::Heap(b.to_vec())
        }
    }
    fn as_slice(&self) -> &[u8] {
        match self {
            Small::Inline { len, bytes } => &bytes[..*len as usize],
            Small::Heap(v) => v,
        }
    }
}

impl<const N: usize> std::borrow::Borrow<[u8]> for Small<N> {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}
// Hash and equality are those of the byte slice (required by `Borrow<[u8]>`).
impl<const N: usize> std::hash::Hash for Small<N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}
impl<const N: usize> PartialEq for Small<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl<const N: usize> Eq for Small<N> {}

impl Slot {
    /// Folds `other` into this value with `c` (see [`combine_values`]); fixed-size scalars
    /// with sum, min or max are folded in place.
    fn combine(
        &mut self,
        c: &Combiner,
        ty: ValueType,
        key: Key<'_>,
        other: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        if let (
            Combiner::Sum | Combiner::Min | Combiner::Max,
            ValueType::Scalar(d),
            Small::Inline { len, bytes },
        ) = (c, ty, &mut *self)
        {
            // Both are checked scalars of `d`.
            if *len as usize == other.len() {
                super::combiner::fold_unaligned(d, &mut bytes[..*len as usize], other, c);
                return Ok(());
            }
        }
        let mut acc = match std::mem::replace(self, Small::Heap(Vec::new())) {
            Small::Heap(v) => v,
            inline => inline.as_slice().to_vec(),
        };
        let r = combine_values(c, ty, key, &mut acc, other, scratch);
        *self = if acc.len() <= INLINE_VALUE {
            Small::new(&acc)
        } else {
            Small::Heap(acc)
        };
        r
    }
}

/// A key-value table being built: one hash map per partition id (`partition_of(key,
/// partitions)`), values combined on insert with the table's combiner. Encode it with
/// [`KvTable::into_table`].
pub struct KvTable {
    t: Types,
    combiner: Combiner,
    maps: Vec<Map>,
    scratch: Vec<u8>,
}

impl KvTable {
    /// An empty table of `key` → `value` entries spread over `partitions` partition ids
    /// (at least 1), combined with `combiner` (which must suit the value type).
    pub fn new(
        key: KeyType,
        value: ValueType,
        combiner: Combiner,
        partitions: u32,
    ) -> Result<KvTable> {
        check_combiner(&combiner, value)?;
        if partitions == 0 {
            return Err(Error::config(
                "a key-value table needs at least one partition",
            ));
        }
        // One empty map per partition, allocated now: checked when that is large (a check
        // reads /proc/meminfo).
        let maps = partitions as u128 * std::mem::size_of::<Map>() as u128;
        if maps > 64 << 20 {
            crate::util::memory::check_fits(
                &format!("a key-value table of {partitions} partitions"),
                Some(maps),
            )?;
        }
        Ok(KvTable {
            t: Types { key, value },
            combiner,
            maps: (0..partitions).map(|_| Map::default()).collect(),
            scratch: Vec::new(),
        })
    }
    /// The layout of the table's partitions.
    pub fn layout(&self) -> Layout {
        Layout::KeyValue {
            key: self.t.key,
            value: self.t.value,
        }
    }
    pub fn partitions(&self) -> u32 {
        self.maps.len() as u32
    }
    pub fn combiner(&self) -> &Combiner {
        &self.combiner
    }
    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.maps.iter().map(|m| m.len()).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.maps.iter().all(|m| m.is_empty())
    }
    /// Adds an entry, combining its value with the key's value if the key is present.
    pub fn add(&mut self, key: Key<'_>, value: Value<'_>) -> Result<()> {
        check_entry(self.t, &key, &value)?;
        let pid = partition_of(key, self.partitions()) as usize;
        let raw = key.raw();
        let map = &mut self.maps[pid];
        match map.get_mut(raw.bytes()) {
            Some(acc) => acc.combine(
                &self.combiner,
                self.t.value,
                key,
                value.payload,
                &mut self.scratch,
            ),
            None => {
                map.insert(MapKey::new(raw.bytes()), Slot::new(value.payload));
                Ok(())
            }
        }
    }
    /// Adds a scalar value (`t.add_scalar("word", 1i64)`).
    pub fn add_scalar<'k, T: Elem>(&mut self, key: impl Into<Key<'k>>, v: T) -> Result<()> {
        self.add(key.into(), Value::scalar(&v))
    }
    /// The value of `key`, if present.
    pub fn get(&self, key: Key<'_>) -> Option<Value<'_>> {
        if key.key_type() != self.t.key {
            return None;
        }
        let pid = partition_of(key, self.partitions()) as usize;
        self.maps[pid].get(key.raw().bytes()).map(|v| Value {
            ty: self.t.value,
            payload: v.as_slice(),
        })
    }
    /// Folds every entry of `other` (same types and partition count) into this table.
    pub fn merge(&mut self, other: KvTable) -> Result<()> {
        if other.t != self.t || other.maps.len() != self.maps.len() {
            return Err(Error::data(format!(
                "cannot merge a key-value table of {} partitions of {:?} into one of {} of {:?}",
                other.maps.len(),
                other.layout(),
                self.maps.len(),
                self.layout()
            )));
        }
        use std::collections::hash_map::Entry;
        let (kt, vt) = (self.t.key, self.t.value);
        for (pid, theirs) in other.maps.into_iter().enumerate() {
            let mine = &mut self.maps[pid];
            if mine.len() >= theirs.len() {
                for (k, v) in theirs {
                    match mine.get_mut(k.as_slice()) {
                        Some(acc) => {
                            let key = key_of(kt, k.as_slice());
                            acc.combine(&self.combiner, vt, key, v.as_slice(), &mut self.scratch)?;
                        }
                        None => {
                            mine.insert(k, v);
                        }
                    }
                }
                continue;
            }
            // Fold the smaller map (ours) into the larger one, keeping our value as the first
            // operand of the combiner.
            let ours = std::mem::replace(mine, theirs);
            for (k, mut acc) in ours {
                match mine.entry(k) {
                    Entry::Occupied(mut o) => {
                        let key = key_of(kt, o.key().as_slice());
                        acc.combine(
                            &self.combiner,
                            vt,
                            key,
                            o.get().as_slice(),
                            &mut self.scratch,
                        )?;
                        *o.get_mut() = acc;
                    }
                    Entry::Vacant(e) => {
                        e.insert(acc);
                    }
                }
            }
        }
        Ok(())
    }
    /// Local aggregation: merges several builders (one per thread, say) into one, in parallel
    /// (rayon, pairwise). The builders must have the same types and partition count.
    pub fn aggregate(tables: Vec<KvTable>) -> Result<Option<KvTable>> {
        use rayon::prelude::*;
        tables
            .into_par_iter()
            .map(Ok)
            .try_reduce_with(|mut a, b| {
                a.merge(b)?;
                Ok(a)
            })
            .transpose()
    }
    /// Encodes the table: one key-value partition per non-empty partition id, keys sorted, in
    /// buffers of `pool`, with the builder's combiner.
    pub fn into_table(self, pool: &Pool) -> Result<Table> {
        use rayon::prelude::*;
        let t = self.t;
        let layout = self.layout();
        let parts: Vec<(u32, Array)> = self
            .maps
            .into_par_iter()
            .enumerate()
            .filter(|(_, m)| !m.is_empty())
            .map(|(pid, m)| {
                let mut entries: Vec<(&[u8], &[u8])> = m
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_slice()))
                    .collect();
                entries
                    .sort_unstable_by(|x, y| key_order(&key_of(t.key, x.0), &key_of(t.key, y.0)));
                let bytes: usize = entries.iter().map(|(k, v)| k.len() + v.len() + 8).sum();
                let mut w = Writer {
                    t,
                    out: Vec::with_capacity(bytes),
                };
                for (k, v) in &entries {
                    w.key(key_of(t.key, k).raw());
                    w.value(v);
                }
                Ok((
                    pid as u32,
                    Array::from_layout(layout, pool.copy_of(&w.out))?,
                ))
            })
            .collect::<Result<_>>()?;
        let mut table = Table::new(self.combiner);
        for (pid, a) in parts {
            table.put(pid, a);
        }
        Ok(table)
    }
}

/// The key stored in a builder's map under `raw` bytes.
fn key_of(kt: KeyType, raw: &[u8]) -> Key<'_> {
    match kt {
        KeyType::I64 => Key::I64(i64::from_le_bytes(raw.try_into().expect("8-byte key"))),
        KeyType::I32 => Key::I32(i64::from_le_bytes(raw.try_into().expect("8-byte key")) as i32),
        KeyType::Str => Key::Str(raw),
    }
}

impl KvTable {
    /// Adds every entry of `batch`: entries in the partition encoding (see the module docs) but
    /// in any order and with repeated keys, as a foreign caller (Java) writes them. The batch
    /// is checked whole first, so a malformed one adds nothing and is a data error naming the
    /// byte where it goes wrong. Returns the number of entries.
    pub fn add_encoded(&mut self, batch: &[u8]) -> Result<usize> {
        let bad = |why: String| Error::data(format!("key-value batch: {why}"));
        let mut n = 0;
        let mut at = 0;
        while at < batch.len() {
            let (k, v, end) = read_entry(self.t, batch, at).map_err(bad)?;
            check_entry(self.t, &k, &v)?;
            at = end;
            n += 1;
        }
        at = 0;
        while at < batch.len() {
            let (k, v, end) = read_entry(self.t, batch, at).map_err(bad)?;
            self.add(k, v)?;
            at = end;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod add_encoded_tests {
    use super::*;

    /// A batch as Java writes it: str keys, i64 values, unsorted, repeated keys.
    fn batch(entries: &[(&str, i64)]) -> Vec<u8> {
        let mut b = Vec::new();
        for (k, v) in entries {
            b.extend_from_slice(&(k.len() as u32).to_le_bytes());
            b.extend_from_slice(k.as_bytes());
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn unsorted_batches_with_repeated_keys_are_combined() {
        let mut t = KvTable::new(
            KeyType::Str,
            ValueType::Scalar(DType::I64),
            Combiner::Sum,
            3,
        )
        .unwrap();
        let n = t
            .add_encoded(&batch(&[("b", 2), ("a", 1), ("b", 5), ("", 7)]))
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(Key::Str(b"b")).unwrap().get::<i64>().unwrap(), 7);
        assert_eq!(t.get(Key::Str(b"")).unwrap().get::<i64>().unwrap(), 7);
    }

    #[test]
    fn a_malformed_batch_adds_nothing_and_names_the_byte() {
        let mut t = KvTable::new(
            KeyType::Str,
            ValueType::Scalar(DType::I64),
            Combiner::Sum,
            2,
        )
        .unwrap();
        let mut b = batch(&[("ok", 1), ("cut", 2)]);
        b.truncate(b.len() - 3);
        let e = t.add_encoded(&b).unwrap_err();
        assert_eq!(e.kind(), "data");
        assert!(e.to_string().contains("byte 14"), "{e}");
        assert!(t.is_empty());
        // A key length far beyond the batch: an error, no allocation of that size.
        let e = t.add_encoded(&[0xff, 0xff, 0xff, 0xff, 1]).unwrap_err();
        assert!(e.to_string().contains("runs past the end"), "{e}");
    }
}

/// A key-value combiner from a closure (`kv::combiner_fn("concat", |k, a, b, out| …)`).
pub fn combiner_fn(
    name: &str,
    f: impl Fn(Key<'_>, Value<'_>, Value<'_>, &mut Vec<u8>) -> Result<()> + Send + Sync + 'static,
) -> Combiner {
    struct F<G> {
        name: String,
        f: G,
    }
    impl<G> KvCombiner for F<G>
    where
        G: Fn(Key<'_>, Value<'_>, Value<'_>, &mut Vec<u8>) -> Result<()> + Send + Sync,
    {
        fn name(&self) -> &str {
            &self.name
        }
        fn combine(
            &self,
            key: Key<'_>,
            acc: Value<'_>,
            other: Value<'_>,
            out: &mut Vec<u8>,
        ) -> Result<()> {
            (self.f)(key, acc, other, out)
        }
    }
    Combiner::KeyValue(Arc::new(F {
        name: name.to_string(),
        f,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::aggregate;

    const STR_I64: Layout = Layout::KeyValue {
        key: KeyType::Str,
        value: ValueType::Scalar(DType::I64),
    };

    fn words(pool: &Pool, combiner: Combiner, ws: &[(&str, i64)]) -> Array {
        let mut t = KvTable::new(KeyType::Str, ValueType::Scalar(DType::I64), combiner, 1).unwrap();
        for (w, n) in ws {
            t.add_scalar(*w, *n).unwrap();
        }
        t.into_table(pool)
            .unwrap()
            .remove(0)
            .unwrap_or_else(|| Array::from_layout(STR_I64, crate::pool::Buf::empty()).unwrap())
    }

    fn pairs(a: &Array) -> Vec<(String, i64)> {
        entries(a)
            .unwrap()
            .map(|(k, v)| (k.to_string(), v.get::<i64>().unwrap()))
            .collect()
    }

    #[test]
    fn names_parse_back() {
        for k in KeyType::ALL {
            assert_eq!(KeyType::parse(k.name()).unwrap(), k);
        }
        let all = ValueType::all();
        assert_eq!(all.len(), 2 * DType::ALL.len() + 1);
        for v in all {
            assert_eq!(ValueType::parse(&v.name()).unwrap(), v);
        }
        assert_eq!(
            ValueType::parse("f64[]").unwrap(),
            ValueType::Array(DType::F64)
        );
        assert_eq!(ValueType::parse("bytes").unwrap(), ValueType::Bytes);
        assert!(KeyType::parse("string").is_err());
        assert!(ValueType::parse("f64[][]")
            .unwrap_err()
            .to_string()
            .contains("bytes"));
    }

    /// The documented hash: fixed values, so that a change (which would move keys between
    /// partitions and break Java's copy) is caught.
    #[test]
    fn hashing_is_stable() {
        assert_eq!(key_hash(Key::I64(0)), 0xe220_a839_7b1d_cdaf);
        assert_eq!(key_hash(Key::I32(-7)), key_hash(Key::I64(-7)));
        assert_eq!(key_hash(Key::Str(b"a")), 0xaf63_dc4c_8601_ec8c);
        let got: Vec<u32> = [
            Key::I64(0),
            Key::I64(1),
            Key::I64(-1),
            Key::I32(42),
            Key::Str(b"the"),
            Key::Str(b"Hadoop"),
            Key::Str(b"\xff\x00"),
        ]
        .into_iter()
        .map(|k| partition_of(k, 1000))
        .collect();
        // 0xe220a8397b1dcdaf = 16294208416658607535 → 535.
        assert_eq!(got, vec![535, 465, 936, 413, 924, 752, 834]);
        assert_eq!(partition_of(Key::Str(b"x"), 1), 0);
    }

    #[test]
    fn partitions_encode_iterate_and_look_up() {
        let pool = Pool::default();
        let mut w = Writer::new(Layout::KeyValue {
            key: KeyType::I64,
            value: ValueType::Array(DType::F32),
        })
        .unwrap();
        w.push(Key::I64(-5), Value::array(&[1.0f32, 2.0])).unwrap();
        w.push(Key::I64(3), Value::array::<f32>(&[])).unwrap();
        w.push(Key::I64(70), Value::array(&[9.5f32])).unwrap();
        assert!(w.push(Key::Str(b"x"), Value::array(&[1.0f32])).is_err());
        assert!(w.push(Key::I64(71), Value::array(&[1.0f64])).is_err());
        let a = w.finish(&pool).unwrap();
        // 3 keys of 8 bytes, 3 counts of 4 bytes, 3 floats.
        assert_eq!(a.bytes().len(), 3 * 8 + 3 * 4 + 3 * 4);
        assert_eq!(
            &a.bytes()[..12],
            &[0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0]
        );
        let got: Vec<(i64, Vec<f32>)> = entries(&a)
            .unwrap()
            .map(|(k, v)| match k {
                Key::I64(k) => (k, v.to_vec::<f32>().unwrap()),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            got,
            vec![(-5, vec![1.0, 2.0]), (3, vec![]), (70, vec![9.5])]
        );
        assert_eq!(
            get(&a, Key::I64(70))
                .unwrap()
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![9.5]
        );
        assert!(get(&a, Key::I64(4)).unwrap().is_none());
        assert!(get(&a, Key::I64(-5))
            .unwrap()
            .unwrap()
            .get::<f32>()
            .is_err());
        assert!(a.as_slice::<u8>().is_err());
        // Keys out of order are refused when the partition is finished.
        let mut w = Writer::new(STR_I64).unwrap();
        w.push(Key::Str(b"b"), Value::scalar(&1i64)).unwrap();
        w.push(Key::Str(b"a"), Value::scalar(&1i64)).unwrap();
        let e = w.finish(&pool).unwrap_err().to_string();
        assert!(e.contains("key \"a\" does not follow key \"b\""), "{e}");
        assert!(Writer::new(Layout::dense(DType::F64)).is_err());
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let l = STR_I64;
        let entry = |k: &[u8], v: i64| {
            let mut b = (k.len() as u32).to_le_bytes().to_vec();
            b.extend_from_slice(k);
            b.extend_from_slice(&v.to_le_bytes());
            b
        };
        let mut ok = entry(b"", 1);
        ok.extend(entry(b"a", 2));
        ok.extend(entry(b"ab", 3));
        assert_eq!(validate(l, &ok), Ok(3));
        assert_eq!(validate(l, &[]), Ok(0));
        let mut dup = entry(b"a", 1);
        dup.extend(entry(b"a", 1));
        assert!(validate(l, &dup).unwrap_err().contains("does not follow"));
        let e = validate(l, &ok[..ok.len() - 1]).unwrap_err();
        assert!(e.contains("runs past the end"), "{e}");
        let mut huge = ok.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(validate(l, &huge).unwrap_err().contains("4294967295 bytes"));
        // A received malformed partition is a protocol error naming it.
        let pool = Pool::default();
        let e = Array::received(12, l, pool.copy_of(&dup)).unwrap_err();
        assert_eq!(e.kind(), "protocol");
        assert!(e.to_string().contains("partition 12"), "{e}");
        let arr = l32(&pool);
        assert_eq!(validate(arr.layout(), arr.bytes()), Ok(2));
    }

    fn l32(pool: &Pool) -> Array {
        let mut w = Writer::new(Layout::KeyValue {
            key: KeyType::I32,
            value: ValueType::Bytes,
        })
        .unwrap();
        w.push(Key::I32(i32::MIN), Value::bytes(b"lo")).unwrap();
        w.push(Key::I32(i32::MAX), Value::bytes(b"")).unwrap();
        w.finish(pool).unwrap()
    }

    /// Random truncations and mutations of valid partitions of every key type never panic:
    /// validation refuses them or accepts a well-formed partition, and combining one with a
    /// valid partition either fails or yields a valid partition.
    #[test]
    fn mutated_partitions_never_panic() {
        let pool = Pool::default();
        let mut seeds = Vec::new();
        seeds.push(words(
            &pool,
            Combiner::Sum,
            &[("x", 1), ("yy", 2), ("", 3), ("\u{e9}", 4)],
        ));
        seeds.push(l32(&pool));
        let mut t = KvTable::new(
            KeyType::I64,
            ValueType::Array(DType::I32),
            Combiner::Append,
            1,
        )
        .unwrap();
        for k in 0..20i64 {
            t.add(
                Key::I64(k * k - 50),
                Value::array(&vec![k as i32; k as usize % 4]),
            )
            .unwrap();
        }
        seeds.push(t.into_table(&pool).unwrap().remove(0).unwrap());
        let mut rng = 7u64;
        let mut next = || {
            rng = splitmix64(rng);
            rng
        };
        let mut refused = 0;
        for s in &seeds {
            let layout = s.layout();
            let comb = if let Layout::KeyValue {
                value: ValueType::Scalar(_),
                ..
            } = layout
            {
                Combiner::Sum
            } else {
                Combiner::Append
            };
            for _ in 0..2000 {
                let mut b = s.bytes().to_vec();
                match next() % 3 {
                    0 => b.truncate((next() % (b.len() as u64 + 1)) as usize),
                    1 => {
                        for _ in 0..1 + next() % 3 {
                            let i = (next() % b.len() as u64) as usize;
                            b[i] = next() as u8;
                        }
                    }
                    _ => {
                        let i = (next() % b.len() as u64) as usize;
                        b.insert(i, next() as u8);
                    }
                }
                match Array::received(1, layout, pool.copy_of(&b)) {
                    Err(e) => {
                        assert_eq!(e.kind(), "protocol");
                        refused += 1;
                        // Combining the raw bytes fails cleanly too.
                        let mut acc = s.duplicate(&pool);
                        let mut bad = Array::uninit_layout(&pool, layout, b.len() as u64);
                        bad.bytes_mut().copy_from_slice(&b);
                        assert!(comb.combine(1, &mut acc, &bad).is_err());
                    }
                    Ok(a) => {
                        let mut acc = s.duplicate(&pool);
                        if comb.combine(1, &mut acc, &a).is_ok() {
                            validate(layout, acc.bytes()).unwrap();
                        }
                    }
                }
            }
        }
        assert!(refused > 3000, "{refused}");
    }

    #[test]
    fn scalar_combiners() {
        let pool = Pool::default();
        let x = &[("a", 5), ("c", -1), ("d", 7)];
        let y = &[("b", 2), ("c", 10), ("d", 3)];
        for (c, want_c, want_d) in [
            (Combiner::Sum, 9, 10),
            (Combiner::Min, -1, 3),
            (Combiner::Max, 10, 7),
            (Combiner::KeepFirst, -1, 7),
        ] {
            let mut t = Table::new(c.clone());
            t.add(4, words(&pool, c.clone(), x)).unwrap();
            t.add(4, words(&pool, c.clone(), y)).unwrap();
            let want: Vec<(String, i64)> = [("a", 5), ("b", 2), ("c", want_c), ("d", want_d)]
                .iter()
                .map(|(k, v)| (format!("{k:?}"), *v))
                .collect();
            assert_eq!(pairs(t.get(4).unwrap()), want, "{c:?}");
        }
        let mut t = Table::new(Combiner::Reject);
        t.add(4, words(&pool, Combiner::Reject, x)).unwrap();
        t.add(4, words(&pool, Combiner::Reject, &[("b", 1)]))
            .unwrap();
        let e = t
            .add(4, words(&pool, Combiner::Reject, &[("c", 1)]))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("partition 4: key \"c\" arrived twice"),
            "{e}"
        );
        // Wrapping sums, as for dense arrays.
        let mut t = Table::new(Combiner::Sum);
        t.add(0, words(&pool, Combiner::Sum, &[("m", i64::MAX)]))
            .unwrap();
        t.add(0, words(&pool, Combiner::Sum, &[("m", 1)])).unwrap();
        assert_eq!(
            pairs(t.get(0).unwrap()),
            vec![("\"m\"".to_string(), i64::MIN)]
        );
        // Empty partitions on either side.
        let mut t = Table::new(Combiner::Sum);
        t.add(0, words(&pool, Combiner::Sum, &[])).unwrap();
        t.add(0, words(&pool, Combiner::Sum, x)).unwrap();
        t.add(0, words(&pool, Combiner::Sum, &[])).unwrap();
        assert_eq!(pairs(t.get(0).unwrap()).len(), 3);
    }

    #[test]
    fn small_and_unsigned_integer_values_combine() {
        let pool = Pool::default();
        // i16 scalars: sum wraps like the other integers (32767 - 3 + 32767 = -5 in 16
        // bits); min keeps the smaller.
        for (c, want) in [
            (Combiner::Sum, [(1i64, -5), (2, -7)]),
            (Combiner::Min, [(1, -3), (2, -7)]),
        ] {
            let mut t = KvTable::new(KeyType::I64, ValueType::Scalar(DType::I16), c, 1).unwrap();
            t.add(Key::I64(1), Value::scalar(&i16::MAX)).unwrap();
            t.add(Key::I64(2), Value::scalar(&-7i16)).unwrap();
            t.add(Key::I64(1), Value::scalar(&-3i16)).unwrap();
            t.add(Key::I64(1), Value::scalar(&i16::MAX)).unwrap();
            let got: Vec<(i64, i16)> = entries(&t.into_table(&pool).unwrap().remove(0).unwrap())
                .unwrap()
                .map(|(k, v)| match k {
                    Key::I64(k) => (k, v.get::<i16>().unwrap()),
                    _ => unreachable!(),
                })
                .collect();
            assert_eq!(got, want);
        }
        // u64 arrays under max: compared unsigned (a signed compare would keep 1).
        let mut t =
            KvTable::new(KeyType::I32, ValueType::Array(DType::U64), Combiner::Max, 1).unwrap();
        t.add(Key::I32(4), Value::array(&[1u64, u64::MAX])).unwrap();
        t.add(Key::I32(4), Value::array(&[u64::MAX, 2])).unwrap();
        let a = t.into_table(&pool).unwrap().remove(0).unwrap();
        let (_, v) = entries(&a).unwrap().next().unwrap();
        assert_eq!(v.to_vec::<u64>().unwrap(), vec![u64::MAX, u64::MAX]);
        for d in DType::ALL {
            for v in [ValueType::Scalar(d), ValueType::Array(d)] {
                assert_eq!(ValueType::parse(&v.name()).unwrap(), v);
            }
        }
    }

    #[test]
    fn array_and_bytes_combiners() {
        let pool = Pool::default();
        let arr = |c: Combiner, kvs: &[(i64, &[f64])]| {
            let mut t = KvTable::new(KeyType::I64, ValueType::Array(DType::F64), c, 1).unwrap();
            for (k, v) in kvs {
                t.add(Key::I64(*k), Value::array(v)).unwrap();
            }
            t.into_table(&pool).unwrap().remove(0).unwrap()
        };
        let read = |a: &Array| -> Vec<(i64, Vec<f64>)> {
            entries(a)
                .unwrap()
                .map(|(k, v)| match k {
                    Key::I64(k) => (k, v.to_vec::<f64>().unwrap()),
                    _ => unreachable!(),
                })
                .collect()
        };
        let mut t = Table::new(Combiner::Sum);
        t.add(0, arr(Combiner::Sum, &[(1, &[1.0, 2.0]), (2, &[5.0])]))
            .unwrap();
        t.add(0, arr(Combiner::Sum, &[(1, &[0.5, 0.25])])).unwrap();
        assert_eq!(
            read(t.get(0).unwrap()),
            vec![(1, vec![1.5, 2.25]), (2, vec![5.0])]
        );
        let e = t
            .add(0, arr(Combiner::Sum, &[(2, &[1.0, 1.0])]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("partition 0: key 2: cannot sum an array of 1 f64 elements with one of 2"),
            "{e}"
        );
        let mut t = Table::new(Combiner::Append);
        t.add(0, arr(Combiner::Append, &[(1, &[1.0]), (3, &[])]))
            .unwrap();
        t.add(0, arr(Combiner::Append, &[(1, &[2.0, 3.0]), (3, &[4.0])]))
            .unwrap();
        assert_eq!(
            read(t.get(0).unwrap()),
            vec![(1, vec![1.0, 2.0, 3.0]), (3, vec![4.0])]
        );
        // The builder combines on insert the same way.
        let mut b = KvTable::new(KeyType::Str, ValueType::Bytes, Combiner::Append, 4).unwrap();
        b.add(Key::Str(b"k"), Value::bytes(b"ab")).unwrap();
        b.add(Key::Str(b"k"), Value::bytes(b"\xffc")).unwrap();
        assert_eq!(b.get(Key::Str(b"k")).unwrap().payload, b"ab\xffc");
        // Merging keeps this table's value first, whichever map is larger.
        for extra in [0u8, 5] {
            let mut other =
                KvTable::new(KeyType::Str, ValueType::Bytes, Combiner::Append, 4).unwrap();
            other.add(Key::Str(b"k"), Value::bytes(b"Z")).unwrap();
            for i in 0..extra {
                other.add(Key::Str(&[i]), Value::bytes(b"")).unwrap();
            }
            let mut mine =
                KvTable::new(KeyType::Str, ValueType::Bytes, Combiner::Append, 4).unwrap();
            mine.add(Key::Str(b"k"), Value::bytes(b"ab")).unwrap();
            mine.merge(other).unwrap();
            assert_eq!(mine.get(Key::Str(b"k")).unwrap().payload, b"abZ", "{extra}");
            assert_eq!(mine.len(), 1 + extra as usize);
        }
        // Combiners that do not suit the value type are refused when the table is made.
        for (c, v) in [
            (Combiner::Append, ValueType::Scalar(DType::I64)),
            (Combiner::Sum, ValueType::Bytes),
            (Combiner::Max, ValueType::Bytes),
        ] {
            let e = KvTable::new(KeyType::I64, v, c.clone(), 1)
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains(&format!("combiner {} cannot combine", c.name())),
                "{e}"
            );
        }
        // … and when partitions meet.
        let mut t = Table::new(Combiner::Append);
        t.add(0, words(&pool, Combiner::Sum, &[("a", 1)])).unwrap();
        let e = t
            .add(0, words(&pool, Combiner::Sum, &[("a", 1)]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("partition 0") && e.contains("a scalar value cannot hold both"),
            "{e}"
        );
        // Dense and key-value partitions do not mix, and append does not combine dense arrays.
        let mut t = Table::new(Combiner::Sum);
        t.add(0, Array::from_slice(&pool, &[1u8])).unwrap();
        assert!(t.add(0, words(&pool, Combiner::Sum, &[("a", 1)])).is_err());
        let mut t = Table::new(Combiner::Append);
        t.add(0, Array::from_slice(&pool, &[1u8])).unwrap();
        assert!(t.add(0, Array::from_slice(&pool, &[1u8])).is_err());
        assert!(!Combiner::Sum.elementwise_on(STR_I64));
        assert!(Combiner::Sum.elementwise_on(Layout::dense(DType::F64)));
    }

    #[test]
    fn user_defined_value_combiner() {
        let pool = Pool::default();
        // Keeps the longer byte string; ties: the one already there.
        let longer = combiner_fn("longer", |_k, a, b, out| {
            out.extend_from_slice(if b.payload.len() > a.payload.len() {
                b.payload
            } else {
                a.payload
            });
            Ok(())
        });
        let mk = |kvs: &[(&str, &str)]| {
            let mut t = KvTable::new(KeyType::Str, ValueType::Bytes, longer.clone(), 1).unwrap();
            for (k, v) in kvs {
                t.add(Key::Str(k.as_bytes()), Value::bytes(v.as_bytes()))
                    .unwrap();
            }
            t
        };
        let mut t = Table::new(longer.clone());
        t.add(
            0,
            mk(&[("a", "xx"), ("b", "y")])
                .into_table(&pool)
                .unwrap()
                .remove(0)
                .unwrap(),
        )
        .unwrap();
        t.add(
            0,
            mk(&[("a", "z"), ("b", "yyy")])
                .into_table(&pool)
                .unwrap()
                .remove(0)
                .unwrap(),
        )
        .unwrap();
        let got: Vec<(String, Vec<u8>)> = entries(t.get(0).unwrap())
            .unwrap()
            .map(|(k, v)| (k.to_string(), v.payload.to_vec()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("\"a\"".into(), b"xx".to_vec()),
                ("\"b\"".into(), b"yyy".to_vec())
            ]
        );
        // A combiner returning a malformed value fails, naming the key and the combiner.
        let bad = combiner_fn("half", |_k, a, _b, out| {
            out.extend_from_slice(&a.payload[..3]);
            Ok(())
        });
        let mut t = KvTable::new(KeyType::I32, ValueType::Scalar(DType::F64), bad, 1).unwrap();
        t.add(Key::I32(1), Value::scalar(&1.0f64)).unwrap();
        let e = t
            .add(Key::I32(1), Value::scalar(&1.0f64))
            .unwrap_err()
            .to_string();
        assert!(e.contains("key 1: combiner half returned 3 bytes"), "{e}");
    }

    /// Keys and values on both sides of the builder's inline sizes (23-byte keys, 16-byte
    /// values), growing past them by appending, equal a plain map.
    #[test]
    fn builder_slots_inline_and_on_the_heap() {
        let pool = Pool::default();
        let mut want: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
        let mut t = KvTable::new(KeyType::Str, ValueType::Bytes, Combiner::Append, 3).unwrap();
        for round in 0..6u8 {
            for len in 0..40usize {
                let key: Vec<u8> = (0..len).map(|i| i as u8 ^ 0xa5).collect();
                let val: Vec<u8> = vec![round; len % 7];
                t.add(Key::Str(&key), Value::bytes(&val)).unwrap();
                want.entry(key).or_default().extend(&val);
            }
        }
        let mut got = std::collections::BTreeMap::new();
        for (_, a) in t.into_table(&pool).unwrap().iter() {
            for (k, v) in entries(a).unwrap() {
                let Key::Str(k) = k else { unreachable!() };
                got.insert(k.to_vec(), v.payload.to_vec());
            }
        }
        assert_eq!(got, want);
        // Arrays of 2 f64 (inline) and 3 f64 (heap), summed element-wise.
        let mut t =
            KvTable::new(KeyType::I64, ValueType::Array(DType::F64), Combiner::Sum, 2).unwrap();
        for _ in 0..3 {
            t.add(Key::I64(1), Value::array(&[1.0f64, 2.0])).unwrap();
            t.add(Key::I64(2), Value::array(&[1.0f64, 2.0, 3.0]))
                .unwrap();
        }
        assert_eq!(
            t.get(Key::I64(1)).unwrap().to_vec::<f64>().unwrap(),
            vec![3.0, 6.0]
        );
        assert_eq!(
            t.get(Key::I64(2)).unwrap().to_vec::<f64>().unwrap(),
            vec![3.0, 6.0, 9.0]
        );
        let e = t
            .add(Key::I64(1), Value::array(&[1.0f64]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key 1: cannot sum an array of 2 f64 elements with one of 1"),
            "{e}"
        );
    }

    /// Per-thread builders aggregated with rayon, and the encoded tables aggregated with
    /// `data::aggregate`, both equal a sequential count.
    #[test]
    fn local_aggregation_matches_a_sequential_count() {
        let pool = Pool::default();
        let tokens: Vec<Vec<u8>> = (0..5000u64)
            .map(|i| format!("w{}", splitmix64(i) % 300).into_bytes())
            .collect();
        let mut want: std::collections::BTreeMap<Vec<u8>, i64> = Default::default();
        for t in &tokens {
            *want.entry(t.clone()).or_default() += 1;
        }
        let builders: Vec<KvTable> = tokens
            .chunks(700)
            .map(|c| {
                let mut t = KvTable::new(
                    KeyType::Str,
                    ValueType::Scalar(DType::I64),
                    Combiner::Sum,
                    7,
                )
                .unwrap();
                for w in c {
                    t.add_scalar(&w[..], 1i64).unwrap();
                }
                t
            })
            .collect();
        let tables: Vec<Table> = builders
            .iter()
            .map(|b| {
                let mut c = KvTable::new(b.t.key, b.t.value, Combiner::Sum, 7).unwrap();
                for m in &b.maps {
                    for (k, v) in m {
                        c.add(
                            key_of(b.t.key, k.as_slice()),
                            Value {
                                ty: b.t.value,
                                payload: v.as_slice(),
                            },
                        )
                        .unwrap();
                    }
                }
                c.into_table(&pool).unwrap()
            })
            .collect();
        let merged = KvTable::aggregate(builders).unwrap().unwrap();
        assert_eq!(merged.len(), want.len());
        let read = |t: &Table| {
            let mut got = std::collections::BTreeMap::new();
            for (pid, a) in t.iter() {
                for (k, v) in entries(a).unwrap() {
                    let Key::Str(k) = k else { unreachable!() };
                    assert_eq!(partition_of(Key::Str(k), 7), pid);
                    got.insert(k.to_vec(), v.get::<i64>().unwrap());
                }
            }
            got
        };
        assert_eq!(read(&merged.into_table(&pool).unwrap()), want);
        assert_eq!(read(&aggregate(tables).unwrap()), want);
        assert!(KvTable::aggregate(Vec::new()).unwrap().is_none());
    }
}
