//! Combiners: what happens when two partitions with the same id meet (built-in element-wise
//! folds for every element type, keep-first, reject, or a user-defined [`CustomCombiner`]).

use std::sync::Arc;

use super::array::{Array, DType, Elem};
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
        if acc.layout().is_edges() || other.layout().is_edges() {
            return super::graph::combine(self, id, acc, other);
        }
        match self {
            Combiner::KeepFirst => Ok(()),
            Combiner::Reject => Err(Error::data(format!(
                "partition {id} arrived twice and the table's combiner rejects duplicates"
            ))),
            Combiner::Custom(c) => c.combine(acc, other),
            _ => {
                let dtype = acc.dtype();
                self.combine_bytes(id, dtype, acc.bytes_mut(), other.dtype(), other.bytes())?;
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
        for c in ["sum", "min", "max", "keep-first", "reject"] {
            assert_eq!(Combiner::parse(c).unwrap().name(), c);
        }
        assert!(Combiner::parse("avg")
            .unwrap_err()
            .to_string()
            .contains("keep-first"));
    }
}
