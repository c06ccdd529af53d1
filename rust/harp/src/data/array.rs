//! Typed arrays: the element types ([`DType`], [`Elem`]) and [`Array`], a typed vector in a
//! pooled, 64-byte aligned buffer whose bytes are little-endian native values (they go on the
//! wire and across JNI without any encoding).

use super::layout::Layout;
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

/// A typed array in a pooled buffer. Partitions of other layouts (edges) are arrays of bytes
/// (`u8`) that remember their layout.
pub struct Array {
    dtype: DType,
    buf: Buf,
    /// Set for partitions whose layout is not a dense array of `dtype`.
    other: Option<Layout>,
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
            other: None,
        }
    }
    /// An array of `len` elements whose values are unspecified (left from earlier use).
    pub fn uninit(pool: &Pool, dtype: DType, len: usize) -> Array {
        Array {
            dtype,
            buf: pool.get(len * dtype.size()),
            other: None,
        }
    }
    /// A pooled copy of `values`.
    pub fn from_slice<T: Elem>(pool: &Pool, values: &[T]) -> Array {
        Array {
            dtype: T::DTYPE,
            buf: pool.copy_of(bytemuck::cast_slice(values)),
            other: None,
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
        Ok(Array {
            dtype,
            buf,
            other: None,
        })
    }
    /// Wraps a buffer holding a partition of `layout`.
    pub fn from_layout(layout: Layout, buf: Buf) -> Result<Array> {
        match layout {
            Layout::Dense { dtype } => Array::from_buf(dtype, buf),
            Layout::Edges { weighted } => {
                super::graph::check_size(weighted, buf.len())?;
                Ok(Array {
                    dtype: DType::U8,
                    buf,
                    other: Some(layout),
                })
            }
        }
    }
    /// A partition of `layout` and `bytes` bytes whose values are unspecified.
    pub fn uninit_layout(pool: &Pool, layout: Layout, bytes: u64) -> Array {
        match layout {
            Layout::Dense { dtype } => Array::uninit(pool, dtype, (bytes / layout.unit()) as usize),
            Layout::Edges { .. } => Array {
                other: Some(layout),
                ..Array::uninit(
                    pool,
                    DType::U8,
                    (bytes / layout.unit() * layout.unit()) as usize,
                )
            },
        }
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// How this array's bytes are arranged (on the wire).
    pub fn layout(&self) -> Layout {
        self.other.unwrap_or(Layout::dense(self.dtype))
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
            other: self.other,
        }
    }
    /// The pool this array's buffer returns to (none for an empty array).
    pub fn pool(&self) -> Option<Pool> {
        self.buf.pool()
    }
    pub fn into_buf(self) -> Buf {
        self.buf
    }
    /// Pointer to the first byte; stable while the array lives (zero-copy views, e.g. JNI).
    pub fn as_ptr(&self) -> *const u8 {
        self.buf.as_ptr()
    }
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
        assert!(DType::parse("float").is_err());
        let pool = Pool::default();
        assert!(Array::from_slice(&pool, &[1u8]).as_slice::<f64>().is_err());
        let e = Array::from_buf(DType::F64, pool.copy_of(&[0u8; 12]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("12 bytes") && e.contains("f64"), "{e}");
    }
}
