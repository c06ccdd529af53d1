//! The data model: typed arrays → partitions → tables.
//!
//! * An [`Array`] is a typed vector (f64, f32, i64, i32 or u8) held in a pooled, 64-byte aligned
//!   [`Buf`]. Its bytes are little-endian native values, so they go on the wire and across JNI
//!   without any encoding.
//! * A partition is an id (`u32`) plus an array. A [`Table`] maps partition ids to arrays and has a
//!   [`Combiner`] that is applied whenever a partition arrives with an id the table already holds.
//! * Key-value and graph partitions are meant to be added as byte (`U8`) arrays in a documented
//!   encoding together with a custom combiner that decodes, merges and re-encodes them; the
//!   collectives only ever see typed arrays, so nothing here has to change for them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::pool::{Buf, Pool};

/// Element type of an [`Array`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum DType {
    F64 = 0,
    F32 = 1,
    I64 = 2,
    I32 = 3,
    U8 = 4,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::U8 => 1,
        }
    }
    pub fn from_u8(v: u8) -> Result<DType> {
        Ok(match v {
            0 => DType::F64,
            1 => DType::F32,
            2 => DType::I64,
            3 => DType::I32,
            4 => DType::U8,
            _ => return Err(Error::Protocol(format!("unknown element type {v}"))),
        })
    }
    /// Every element type, in wire-code order.
    pub const ALL: [DType; 5] = [DType::F64, DType::F32, DType::I64, DType::I32, DType::U8];

    /// Parses a name given by [`DType::name`] (the vocabulary shared with Java).
    pub fn parse(name: &str) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown element type {name:?} (f64, f32, i64, i32, u8)"
                ))
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::U8 => "u8",
        }
    }
}

/// A Rust element type that an [`Array`] can hold.
pub trait Elem: bytemuck::Pod + PartialOrd + std::ops::Add<Output = Self> + Send + Sync {
    const DTYPE: DType;
}
impl Elem for f64 {
    const DTYPE: DType = DType::F64;
}
impl Elem for f32 {
    const DTYPE: DType = DType::F32;
}
impl Elem for i64 {
    const DTYPE: DType = DType::I64;
}
impl Elem for i32 {
    const DTYPE: DType = DType::I32;
}
impl Elem for u8 {
    const DTYPE: DType = DType::U8;
}

/// A typed array in a pooled buffer.
pub struct Array {
    dtype: DType,
    buf: Buf,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Array<{}>[{}]", self.dtype.name(), self.len())
    }
}

impl Array {
    /// An array of `len` zeros.
    pub fn zeros(pool: &Pool, dtype: DType, len: usize) -> Array {
        Array {
            dtype,
            buf: pool.get_zeroed(len * dtype.size()),
        }
    }
    /// An array of `len` elements whose values are unspecified (left from earlier use).
    pub fn uninit(pool: &Pool, dtype: DType, len: usize) -> Array {
        Array {
            dtype,
            buf: pool.get(len * dtype.size()),
        }
    }
    /// A pooled copy of `values`.
    pub fn from_slice<T: Elem>(pool: &Pool, values: &[T]) -> Array {
        Array {
            dtype: T::DTYPE,
            buf: pool.copy_of(bytemuck::cast_slice(values)),
        }
    }
    /// Wraps a buffer whose length is a multiple of the element size.
    pub fn from_buf(dtype: DType, buf: Buf) -> Result<Array> {
        if !buf.len().is_multiple_of(dtype.size()) {
            return Err(Error::Protocol(format!(
                "{} bytes is not a whole number of {} elements",
                buf.len(),
                dtype.name()
            )));
        }
        Ok(Array { dtype, buf })
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.buf.len() / self.dtype.size()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn bytes(&self) -> &[u8] {
        self.buf.as_slice()
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }
    /// The elements as `&[T]`; fails if `T` is not this array's type.
    pub fn as_slice<T: Elem>(&self) -> Result<&[T]> {
        self.check::<T>()?;
        Ok(bytemuck::cast_slice(self.buf.as_slice()))
    }
    pub fn as_mut_slice<T: Elem>(&mut self) -> Result<&mut [T]> {
        self.check::<T>()?;
        Ok(bytemuck::cast_slice_mut(self.buf.as_mut_slice()))
    }
    fn check<T: Elem>(&self) -> Result<()> {
        if T::DTYPE != self.dtype {
            return Err(Error::data(format!(
                "array holds {} but was read as {}",
                self.dtype.name(),
                T::DTYPE.name()
            )));
        }
        Ok(())
    }
    /// A pooled copy.
    pub fn duplicate(&self, pool: &Pool) -> Array {
        Array {
            dtype: self.dtype,
            buf: pool.copy_of(self.bytes()),
        }
    }
    pub fn into_buf(self) -> Buf {
        self.buf
    }
    /// Pointer to the first byte; stable while the array lives (zero-copy views, e.g. JNI).
    pub fn as_ptr(&self) -> *const u8 {
        self.buf.as_ptr()
    }
}

/// A custom, user-defined combiner.
pub trait CustomCombiner: Send + Sync {
    /// A short name for logs and errors.
    fn name(&self) -> &str;
    /// Folds `other` into `acc`.
    fn combine(&self, acc: &mut Array, other: &Array) -> Result<()>;
    /// True when the result at element i depends only on element i of both inputs; allows the
    /// engine to split large partitions into segments (reduce-scatter based allreduce).
    fn elementwise(&self) -> bool {
        false
    }
}

/// What happens when two partitions with the same id meet.
#[derive(Clone, Default)]
pub enum Combiner {
    /// Element-wise sum.
    #[default]
    Sum,
    /// Element-wise minimum.
    Min,
    /// Element-wise maximum.
    Max,
    /// Keep the partition already in the table, drop the newcomer.
    KeepFirst,
    /// Meeting the same id twice is an error.
    Reject,
    Custom(Arc<dyn CustomCombiner>),
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn fold<T: Elem>(acc: &mut [u8], other: &[u8], f: impl Fn(T, T) -> T) {
    let acc: &mut [T] = bytemuck::cast_slice_mut(acc);
    let other: &[T] = bytemuck::cast_slice(other);
    for (a, b) in acc.iter_mut().zip(other) {
        *a = f(*a, *b);
    }
}

fn fold_typed(dtype: DType, acc: &mut [u8], other: &[u8], op: &Combiner) {
    fn pick<T: Elem>(op: &Combiner) -> fn(T, T) -> T {
        match op {
            Combiner::Min => |a: T, b: T| if b < a { b } else { a },
            Combiner::Max => |a: T, b: T| if b > a { b } else { a },
            _ => |a: T, b: T| a + b,
        }
    }
    match dtype {
        DType::F64 => fold::<f64>(acc, other, pick::<f64>(op)),
        DType::F32 => fold::<f32>(acc, other, pick::<f32>(op)),
        DType::I64 => fold::<i64>(acc, other, |a, b| match op {
            Combiner::Sum => a.wrapping_add(b),
            _ => pick::<i64>(op)(a, b),
        }),
        DType::I32 => fold::<i32>(acc, other, |a, b| match op {
            Combiner::Sum => a.wrapping_add(b),
            _ => pick::<i32>(op)(a, b),
        }),
        DType::U8 => fold::<u8>(acc, other, |a, b| match op {
            Combiner::Sum => a.wrapping_add(b),
            _ => pick::<u8>(op)(a, b),
        }),
    }
}

impl Combiner {
    /// Parses the name of a built-in combiner (the vocabulary shared with Java).
    pub fn parse(name: &str) -> Result<Combiner> {
        Ok(match name {
            "sum" => Combiner::Sum,
            "min" => Combiner::Min,
            "max" => Combiner::Max,
            "keep-first" => Combiner::KeepFirst,
            "reject" => Combiner::Reject,
            _ => {
                return Err(Error::config(format!(
                    "unknown combiner {name:?} (sum, min, max, keep-first, reject)"
                )))
            }
        })
    }

    pub fn name(&self) -> &str {
        match self {
            Combiner::Sum => "sum",
            Combiner::Min => "min",
            Combiner::Max => "max",
            Combiner::KeepFirst => "keep-first",
            Combiner::Reject => "reject",
            Combiner::Custom(c) => c.name(),
        }
    }

    /// True when partitions may be split into element ranges and combined range by range.
    pub fn elementwise(&self) -> bool {
        match self {
            Combiner::Sum | Combiner::Min | Combiner::Max => true,
            Combiner::KeepFirst | Combiner::Reject => false,
            Combiner::Custom(c) => c.elementwise(),
        }
    }

    /// Folds `other` into `acc` (partition `id`, for error messages).
    pub fn combine(&self, id: u32, acc: &mut Array, other: &Array) -> Result<()> {
        match self {
            Combiner::KeepFirst => Ok(()),
            Combiner::Reject => Err(Error::data(format!(
                "partition {id} arrived twice and the table's combiner rejects duplicates"
            ))),
            Combiner::Custom(c) => c.combine(acc, other),
            _ => {
                self.combine_bytes(id, acc.dtype, acc.bytes_mut(), other.dtype, other.bytes())?;
                Ok(())
            }
        }
    }

    /// Folds a byte range of `other_dtype` values into `acc` (element-wise combiners only).
    pub fn combine_bytes(
        &self,
        id: u32,
        dtype: DType,
        acc: &mut [u8],
        other_dtype: DType,
        other: &[u8],
    ) -> Result<()> {
        if dtype != other_dtype {
            return Err(Error::data(format!(
                "partition {id}: cannot combine {} with {}",
                dtype.name(),
                other_dtype.name()
            )));
        }
        if acc.len() != other.len() {
            return Err(Error::data(format!(
                "partition {id}: cannot combine {} {} elements with {}",
                acc.len() / dtype.size(),
                dtype.name(),
                other.len() / dtype.size()
            )));
        }
        match self {
            Combiner::Sum | Combiner::Min | Combiner::Max => {
                fold_typed(dtype, acc, other, self);
                Ok(())
            }
            Combiner::Custom(c) if c.elementwise() => {
                // Custom element-wise combiners work on whole arrays; wrap the ranges.
                let pool = Pool::new(crate::pool::PoolConfig {
                    max_free_per_class: 0,
                    max_bytes_held: 0,
                });
                let mut a = Array {
                    dtype,
                    buf: pool.copy_of(acc),
                };
                let b = Array {
                    dtype,
                    buf: pool.copy_of(other),
                };
                c.combine(&mut a, &b)?;
                acc.copy_from_slice(a.bytes());
                Ok(())
            }
            _ => Err(Error::data(format!(
                "partition {id}: combiner {} cannot combine element ranges",
                self.name()
            ))),
        }
    }
}

/// Decides which worker owns a partition id.
#[derive(Clone, Default)]
pub enum Partitioner {
    /// `id mod workers`.
    #[default]
    Modulo,
    /// A user function from partition id to worker rank (must return < workers, and the same
    /// answer on every worker).
    Custom(Arc<dyn Fn(u32) -> usize + Send + Sync>),
    /// An explicit map (ids not in the map fall back to modulo). Built by the master-decided
    /// regroup plan, or given by the caller.
    Map(Arc<std::collections::HashMap<u32, usize>>),
}

impl std::fmt::Debug for Partitioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Partitioner::Modulo => f.write_str("modulo"),
            Partitioner::Custom(_) => f.write_str("custom"),
            Partitioner::Map(m) => write!(f, "map({} ids)", m.len()),
        }
    }
}

impl Partitioner {
    /// The owner of `id` among `workers`; an out-of-range answer from a custom function is an
    /// error.
    pub fn owner(&self, id: u32, workers: usize) -> Result<usize> {
        let w = match self {
            Partitioner::Modulo => id as usize % workers,
            Partitioner::Custom(f) => f(id),
            Partitioner::Map(m) => m.get(&id).copied().unwrap_or(id as usize % workers),
        };
        if w >= workers {
            return Err(Error::data(format!(
                "partitioner sent partition {id} to worker {w}, but there are only {workers} workers"
            )));
        }
        Ok(w)
    }
}

/// A partition: an id and its array.
#[derive(Debug)]
pub struct Partition {
    pub id: u32,
    pub data: Array,
}

/// A table of partitions keyed by id, with the combiner applied when ids meet.
#[derive(Debug, Default)]
pub struct Table {
    combiner: Combiner,
    parts: BTreeMap<u32, Array>,
}

impl Table {
    pub fn new(combiner: Combiner) -> Table {
        Table {
            combiner,
            parts: BTreeMap::new(),
        }
    }
    pub fn combiner(&self) -> &Combiner {
        &self.combiner
    }
    /// Adds a partition; if the id is already present the two are combined.
    pub fn add(&mut self, id: u32, data: Array) -> Result<()> {
        match self.parts.get_mut(&id) {
            Some(acc) => self.combiner.combine(id, acc, &data),
            None => {
                self.parts.insert(id, data);
                Ok(())
            }
        }
    }
    /// Inserts or replaces a partition without combining; returns the old one.
    pub fn put(&mut self, id: u32, data: Array) -> Option<Array> {
        self.parts.insert(id, data)
    }
    pub fn get(&self, id: u32) -> Option<&Array> {
        self.parts.get(&id)
    }
    pub fn get_mut(&mut self, id: u32) -> Option<&mut Array> {
        self.parts.get_mut(&id)
    }
    pub fn remove(&mut self, id: u32) -> Option<Array> {
        self.parts.remove(&id)
    }
    pub fn contains(&self, id: u32) -> bool {
        self.parts.contains_key(&id)
    }
    /// Partition ids in ascending order.
    pub fn ids(&self) -> Vec<u32> {
        self.parts.keys().copied().collect()
    }
    pub fn len(&self) -> usize {
        self.parts.len()
    }
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }
    /// Total payload bytes.
    pub fn bytes(&self) -> u64 {
        self.parts.values().map(|a| a.bytes().len() as u64).sum()
    }
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Array)> {
        self.parts.iter().map(|(k, v)| (*k, v))
    }
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut Array)> {
        self.parts.iter_mut().map(|(k, v)| (*k, v))
    }
    /// Removes all partitions (their buffers go back to the pool).
    pub fn clear(&mut self) {
        self.parts.clear();
    }
    /// Takes all partitions out, leaving the table empty.
    pub fn take_all(&mut self) -> Vec<Partition> {
        std::mem::take(&mut self.parts)
            .into_iter()
            .map(|(id, data)| Partition { id, data })
            .collect()
    }
    /// Keeps only the partitions for which `keep(id)` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        self.parts.retain(|id, _| keep(*id));
    }
    /// Folds every partition of `other` into this table.
    pub fn merge(&mut self, other: Table) -> Result<()> {
        for (id, data) in other.parts {
            self.add(id, data)?;
        }
        Ok(())
    }
}

/// Local aggregation: combines several tables (for example one per thread) into one, in
/// parallel (rayon, pairwise tree). Equal ids are combined with the first table's combiner.
pub fn aggregate(tables: Vec<Table>) -> Result<Table> {
    use rayon::prelude::*;
    let combiner = tables
        .first()
        .map(|t| t.combiner.clone())
        .unwrap_or_default();
    tables.into_par_iter().map(Ok).reduce(
        || Ok(Table::new(combiner.clone())),
        |a: Result<Table>, b: Result<Table>| {
            let (mut a, b) = (a?, b?);
            if a.len() < b.len() {
                let mut b = b;
                b.merge(a)?;
                return Ok(b);
            }
            a.merge(b)?;
            Ok(a)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()).unwrap(), d);
            assert_eq!(DType::from_u8(d as u8).unwrap(), d);
        }
        for c in ["sum", "min", "max", "keep-first", "reject"] {
            assert_eq!(Combiner::parse(c).unwrap().name(), c);
        }
        assert!(DType::parse("float").is_err());
        assert!(Combiner::parse("avg")
            .unwrap_err()
            .to_string()
            .contains("keep-first"));
    }

    #[test]
    fn combiners_for_every_type() {
        let pool = Pool::default();
        for comb in [Combiner::Sum, Combiner::Min, Combiner::Max] {
            let mut t = Table::new(comb.clone());
            t.add(1, Array::from_slice(&pool, &[1.0f64, 5.0])).unwrap();
            t.add(1, Array::from_slice(&pool, &[3.0f64, 2.0])).unwrap();
            let got = t.get(1).unwrap().as_slice::<f64>().unwrap().to_vec();
            let want = match comb {
                Combiner::Sum => vec![4.0, 7.0],
                Combiner::Min => vec![1.0, 2.0],
                _ => vec![3.0, 5.0],
            };
            assert_eq!(got, want, "{comb:?}");
        }
        let mut t = Table::new(Combiner::Sum);
        t.add(0, Array::from_slice(&pool, &[i32::MAX, 2])).unwrap();
        t.add(0, Array::from_slice(&pool, &[1i32, 2])).unwrap();
        assert_eq!(t.get(0).unwrap().as_slice::<i32>().unwrap(), &[i32::MIN, 4]);
        let mut t = Table::new(Combiner::Max);
        t.add(0, Array::from_slice(&pool, &[1u8, 9])).unwrap();
        t.add(0, Array::from_slice(&pool, &[4u8, 2])).unwrap();
        assert_eq!(t.get(0).unwrap().as_slice::<u8>().unwrap(), &[4, 9]);
        let mut t = Table::new(Combiner::Min);
        t.add(0, Array::from_slice(&pool, &[1.5f32, -9.0])).unwrap();
        t.add(0, Array::from_slice(&pool, &[-4.0f32, 2.0])).unwrap();
        assert_eq!(t.get(0).unwrap().as_slice::<f32>().unwrap(), &[-4.0, -9.0]);
        let mut t = Table::new(Combiner::Sum);
        t.add(0, Array::from_slice(&pool, &[7i64])).unwrap();
        t.add(0, Array::from_slice(&pool, &[-9i64])).unwrap();
        assert_eq!(t.get(0).unwrap().as_slice::<i64>().unwrap(), &[-2]);
    }

    #[test]
    fn mismatches_are_errors() {
        let pool = Pool::default();
        let mut t = Table::new(Combiner::Sum);
        t.add(3, Array::from_slice(&pool, &[1.0f64, 2.0])).unwrap();
        let e = t
            .add(3, Array::from_slice(&pool, &[1.0f64]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("partition 3") && e.contains("2 f64 elements with 1"),
            "{e}"
        );
        let e = t
            .add(3, Array::from_slice(&pool, &[1.0f32, 2.0]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("f64 with f32"), "{e}");
        let mut r = Table::new(Combiner::Reject);
        r.add(1, Array::from_slice(&pool, &[1u8])).unwrap();
        assert!(r.add(1, Array::from_slice(&pool, &[1u8])).is_err());
        assert!(Array::from_slice(&pool, &[1u8]).as_slice::<f64>().is_err());
    }

    struct Concat;
    impl CustomCombiner for Concat {
        fn name(&self) -> &str {
            "concat-max-first"
        }
        fn combine(&self, acc: &mut Array, other: &Array) -> Result<()> {
            let a = acc.as_mut_slice::<i64>()?;
            a[0] = a[0].max(other.as_slice::<i64>()?[0]);
            Ok(())
        }
    }

    #[test]
    fn custom_combiner_and_aggregate() {
        let pool = Pool::default();
        let mut t = Table::new(Combiner::Custom(Arc::new(Concat)));
        t.add(0, Array::from_slice(&pool, &[1i64, 0])).unwrap();
        t.add(0, Array::from_slice(&pool, &[5i64, 9])).unwrap();
        assert_eq!(t.get(0).unwrap().as_slice::<i64>().unwrap(), &[5, 0]);

        let tables: Vec<Table> = (0..8)
            .map(|i| {
                let mut t = Table::new(Combiner::Sum);
                t.add(i % 3, Array::from_slice(&pool, &[i as f64, 1.0]))
                    .unwrap();
                t
            })
            .collect();
        let all = aggregate(tables).unwrap();
        assert_eq!(all.ids(), vec![0, 1, 2]);
        assert_eq!(
            all.get(0).unwrap().as_slice::<f64>().unwrap(),
            &[0.0 + 3.0 + 6.0, 3.0]
        );
        assert_eq!(
            all.get(2).unwrap().as_slice::<f64>().unwrap(),
            &[2.0 + 5.0, 2.0]
        );
    }

    #[test]
    fn partitioners() {
        assert_eq!(Partitioner::Modulo.owner(7, 3).unwrap(), 1);
        let p = Partitioner::Custom(Arc::new(|id| id as usize / 10));
        assert_eq!(p.owner(25, 3).unwrap(), 2);
        assert!(p.owner(35, 3).is_err());
    }
}
