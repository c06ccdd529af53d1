//! Combiners: what happens when two partitions with the same id meet (built-in element-wise
//! folds for every element type, keep-first, reject, or a user-defined [`CustomCombiner`]).
//!
//! Combiners are layout-aware: on dense arrays they work element by element as above; on
//! key-value partitions ([`Layout::KeyValue`]) entries with equal keys are combined by the
//! combiner applied to their values (sum, min, max of numbers, element-wise for arrays;
//! `append` concatenates arrays or byte strings; keep-first; reject; or a user-defined
//! [`KvCombiner`]), see [`super::kv`]. Edge partitions ([`Layout::Edges`]) with the same id
//! are concatenated ([`super::graph::combine`]).

use std::sync::Arc;

use super::array::{Array, DType, Elem};
use super::kv::KvCombiner;
use super::layout::Layout;
use crate::error::{Error, Result};
use crate::pool::Pool;

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
    /// Meeting the same id twice is an error (for key-value partitions: the same key).
    Reject,
    /// Key-value tables: values with equal keys are concatenated (arrays, byte strings).
    Append,
    /// A user-defined combiner of whole dense partitions.
    Custom(Arc<dyn CustomCombiner>),
    /// A user-defined combiner of the values of equal keys in key-value tables.
    KeyValue(Arc<dyn KvCombiner>),
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Folds `other` into `acc` (aligned for `T`); `other` may lie at any alignment (the bytes of a
/// piece inside a received frame).
fn fold<T: Elem>(acc: &mut [u8], other: &[u8], f: impl Fn(T, T) -> T) {
    let acc: &mut [T] = bytemuck::cast_slice_mut(acc);
    match bytemuck::try_cast_slice::<u8, T>(other) {
        Ok(other) => {
            for (a, b) in acc.iter_mut().zip(other) {
                *a = f(*a, *b);
            }
        }
        Err(_) => {
            let n = std::mem::size_of::<T>();
            for (a, b) in acc.iter_mut().zip(other.chunks_exact(n)) {
                *a = f(*a, bytemuck::pod_read_unaligned(b));
            }
        }
    }
}

/// Folds `other` into `acc`, both runs of `dtype` elements at any alignment (the values of
/// key-value entries), with sum, min or max.
pub(crate) fn fold_unaligned(dtype: DType, acc: &mut [u8], other: &[u8], op: &Combiner) {
    let n = dtype.size();
    let mut x = [0u64; 1];
    let mut y = [0u64; 1];
    for (a, b) in acc.chunks_exact_mut(n).zip(other.chunks_exact(n)) {
        let xa = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut x)[..n];
        xa.copy_from_slice(a);
        bytemuck::cast_slice_mut::<u64, u8>(&mut y)[..n].copy_from_slice(b);
        fold_typed(
            dtype,
            &mut bytemuck::cast_slice_mut::<u64, u8>(&mut x)[..n],
            &bytemuck::cast_slice::<u64, u8>(&y)[..n],
            op,
        );
        a.copy_from_slice(&bytemuck::cast_slice::<u64, u8>(&x)[..n]);
    }
}

fn fold_typed(dtype: DType, acc: &mut [u8], other: &[u8], op: &Combiner) {
    match dtype {
        DType::F64 => fold_op::<f64>(acc, other, op, |a, b| a + b),
        DType::F32 => fold_op::<f32>(acc, other, op, |a, b| a + b),
        DType::I64 => fold_op::<i64>(acc, other, op, i64::wrapping_add),
        DType::I32 => fold_op::<i32>(acc, other, op, i32::wrapping_add),
        DType::U8 => fold_op::<u8>(acc, other, op, u8::wrapping_add),
        DType::I16 => fold_op::<i16>(acc, other, op, i16::wrapping_add),
        DType::I8 => fold_op::<i8>(acc, other, op, i8::wrapping_add),
        DType::U16 => fold_op::<u16>(acc, other, op, u16::wrapping_add),
        DType::U32 => fold_op::<u32>(acc, other, op, u32::wrapping_add),
        DType::U64 => fold_op::<u64>(acc, other, op, u64::wrapping_add),
    }
}

/// [`fold`] with min, max, or `add` for sum: each a loop of its own, so the compiler sees the
/// operation and vectorises it (a function chosen at run time would be called per element).
fn fold_op<T: Elem>(acc: &mut [u8], other: &[u8], op: &Combiner, add: impl Fn(T, T) -> T) {
    match op {
        Combiner::Min => fold::<T>(acc, other, |a, b| if b < a { b } else { a }),
        Combiner::Max => fold::<T>(acc, other, |a, b| if b > a { b } else { a }),
        _ => fold::<T>(acc, other, add),
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
            "append" => Combiner::Append,
            _ => {
                return Err(Error::config(format!(
                    "unknown combiner {name:?} (sum, min, max, keep-first, reject, append)"
                )))
            }
        })
    }

    /// The combiner's kind as a number below 16 (user-defined ones by kind only). Frames of the
    /// collectives that combine carry it beside their algorithm ([`crate::wire::with_combiner`]),
    /// so workers whose tables combine differently fail with an operation mismatch instead of
    /// returning different results.
    pub fn code(&self) -> u8 {
        match self {
            Combiner::Sum => 0,
            Combiner::Min => 1,
            Combiner::Max => 2,
            Combiner::KeepFirst => 3,
            Combiner::Reject => 4,
            Combiner::Append => 5,
            Combiner::Custom(_) => 6,
            Combiner::KeyValue(_) => 7,
        }
    }

    /// The name of a combiner kind given by [`Combiner::code`], for messages.
    pub fn code_name(code: u8) -> &'static str {
        match code {
            0 => "sum",
            1 => "min",
            2 => "max",
            3 => "keep-first",
            4 => "reject",
            5 => "append",
            6 => "a custom combiner",
            7 => "a key-value combiner",
            _ => "an unknown combiner",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Combiner::Sum => "sum",
            Combiner::Min => "min",
            Combiner::Max => "max",
            Combiner::KeepFirst => "keep-first",
            Combiner::Reject => "reject",
            Combiner::Append => "append",
            Combiner::Custom(c) => c.name(),
            Combiner::KeyValue(c) => c.name(),
        }
    }

    /// True when dense partitions may be split into element ranges and combined range by
    /// range. Partitions of other layouts never are ([`Combiner::elementwise_on`]).
    pub fn elementwise(&self) -> bool {
        match self {
            Combiner::Sum | Combiner::Min | Combiner::Max => true,
            Combiner::KeepFirst | Combiner::Reject | Combiner::Append | Combiner::KeyValue(_) => {
                false
            }
            Combiner::Custom(c) => c.elementwise(),
        }
    }

    /// True when partitions of `layout` may be split into element ranges and combined range by
    /// range: dense arrays with an element-wise combiner; never key-value partitions.
    pub fn elementwise_on(&self, layout: Layout) -> bool {
        layout.splittable() && self.elementwise()
    }

    /// Folds `other` into `acc` (partition `id`, for error messages). Dense arrays are folded
    /// element by element; key-value partitions are merged key by key ([`super::kv`]).
    pub fn combine(&self, id: u32, acc: &mut Array, other: &Array) -> Result<()> {
        if acc.layout().is_edges() || other.layout().is_edges() {
            return super::graph::combine(self, id, acc, other);
        }
        if let Layout::KeyValue { .. } = acc.layout() {
            if acc.layout() != other.layout() {
                return Err(Error::data(format!(
                    "partition {id}: cannot combine {} with {}",
                    acc.layout().describe(acc.bytes().len() as u64),
                    other.layout().describe(other.bytes().len() as u64)
                )));
            }
            return super::kv::combine_partitions(self, id, acc, other);
        }
        if let Layout::KeyValue { .. } = other.layout() {
            return Err(Error::data(format!(
                "partition {id}: cannot combine {} with {}",
                acc.layout().describe(acc.bytes().len() as u64),
                other.layout().describe(other.bytes().len() as u64)
            )));
        }
        match self {
            Combiner::KeepFirst => Ok(()),
            Combiner::Reject => Err(Error::data(format!(
                "partition {id} arrived twice and the table's combiner rejects duplicates"
            ))),
            Combiner::Custom(c) => c.combine(acc, other),
            Combiner::Append | Combiner::KeyValue(_) => Err(Error::data(format!(
                "partition {id}: combiner {} combines key-value tables, not dense arrays",
                self.name()
            ))),
            _ => {
                let dtype = acc.dtype();
                self.combine_bytes(id, dtype, acc.bytes_mut(), other.dtype(), other.bytes())?;
                Ok(())
            }
        }
    }

    /// True for the built-in element-wise combiners (sum, min, max), which fold byte ranges
    /// at any alignment without an [`Array`] around them.
    pub fn folds_bytes(&self) -> bool {
        matches!(self, Combiner::Sum | Combiner::Min | Combiner::Max)
    }

    /// Folds `other` into `acc`, both runs of `dtype` values of the same length (`acc` aligned,
    /// `other` at any alignment), for a combiner that [`folds_bytes`](Self::folds_bytes): what
    /// [`combine_bytes`](Self::combine_bytes) does once its checks have passed.
    pub(crate) fn fold_same(&self, dtype: DType, acc: &mut [u8], other: &[u8]) {
        debug_assert!(self.folds_bytes() && acc.len() == other.len());
        fold_typed(dtype, acc, other, self);
    }

    /// Folds a byte range of `other_dtype` values into `acc` (element-wise combiners only;
    /// `acc` aligned for `dtype`, `other` at any alignment).
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
                self.fold_same(dtype, acc, other);
                Ok(())
            }
            Combiner::Custom(c) if c.elementwise() => {
                // Custom element-wise combiners work on whole arrays; wrap the ranges.
                let pool = Pool::new(crate::pool::PoolConfig {
                    max_free_per_class: 0,
                    max_bytes_per_class: 0,
                    max_bytes_held: 0,
                });
                let mut a = Array::from_buf(dtype, pool.copy_of(acc))?;
                let b = Array::from_buf(dtype, pool.copy_of(other))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for c in ["sum", "min", "max", "keep-first", "reject", "append"] {
            assert_eq!(Combiner::parse(c).unwrap().name(), c);
        }
        assert!(Combiner::parse("avg")
            .unwrap_err()
            .to_string()
            .contains("keep-first"));
    }

    #[test]
    fn every_integer_type_folds_with_its_own_arithmetic() {
        let pool = Pool::default();
        let fold = |c: &Combiner, a: Array, b: Array| {
            let mut a = a;
            c.combine(0, &mut a, &b).unwrap();
            a
        };
        let a = |v: &[i16]| Array::from_slice(&pool, v);
        let s = fold(&Combiner::Sum, a(&[i16::MAX, -5, 3]), a(&[1, -6, 4]));
        assert_eq!(s.as_slice::<i16>().unwrap(), &[i16::MIN, -11, 7]);
        let m = fold(&Combiner::Min, a(&[i16::MAX, -5, 3]), a(&[1, -6, 4]));
        assert_eq!(m.as_slice::<i16>().unwrap(), &[1, -6, 3]);
        let x = fold(&Combiner::Max, a(&[i16::MAX, -5, 3]), a(&[1, -6, 4]));
        assert_eq!(x.as_slice::<i16>().unwrap(), &[i16::MAX, -5, 4]);
        // Unsigned types compare unsigned; i8 wraps at its own width.
        let u = |v: &[u16]| Array::from_slice(&pool, v);
        let m = fold(&Combiner::Max, u(&[u16::MAX, 2]), u(&[1, 3]));
        assert_eq!(m.as_slice::<u16>().unwrap(), &[u16::MAX, 3]);
        let w = |v: &[u32]| Array::from_slice(&pool, v);
        let m = fold(&Combiner::Min, w(&[u32::MAX, 2]), w(&[1, 3]));
        assert_eq!(m.as_slice::<u32>().unwrap(), &[1, 2]);
        let q = |v: &[u64]| Array::from_slice(&pool, v);
        let s = fold(&Combiner::Sum, q(&[u64::MAX, 2]), q(&[2, 3]));
        assert_eq!(s.as_slice::<u64>().unwrap(), &[1, 5]);
        let b = |v: &[i8]| Array::from_slice(&pool, v);
        let s = fold(&Combiner::Sum, b(&[100, -100]), b(&[100, -100]));
        assert_eq!(s.as_slice::<i8>().unwrap(), &[-56, 56]);
        // Unaligned folding (the values of key-value entries) agrees with the aligned one.
        let mut acc = 40000u16.to_le_bytes().to_vec();
        fold_unaligned(
            DType::U16,
            &mut acc,
            &30000u16.to_le_bytes(),
            &Combiner::Sum,
        );
        assert_eq!(u16::from_le_bytes([acc[0], acc[1]]), 4464);
        let e = Combiner::Sum
            .combine(0, &mut a(&[1]).duplicate(&pool), &u(&[1]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("i16") && e.contains("u16"), "{e}");
    }
}
