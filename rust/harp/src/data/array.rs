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

/// A partition's data in a pooled buffer: a typed array ([`Layout::Dense`]) or the encoded
/// bytes of another layout (key-value partitions, [`super::kv`]; edge partitions,
/// [`super::graph`]).
pub struct Array {
    layout: Layout,
    buf: Buf,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.layout {
            Layout::Dense { dtype } => write!(f, "Array<{}>[{}]", dtype.name(), self.len()),
            l => write!(f, "Array<{l:?}>[{} bytes]", self.buf.len()),
        }
    }
}

impl Array {
    /// An array of `len` zeros.
    pub fn zeros(pool: &Pool, dtype: DType, len: usize) -> Array {
        Array {
            layout: Layout::dense(dtype),
            buf: pool.get_zeroed(len * dtype.size()),
        }
    }
    /// An array of `len` elements whose values are unspecified (left from earlier use).
    pub fn uninit(pool: &Pool, dtype: DType, len: usize) -> Array {
        Array {
            layout: Layout::dense(dtype),
            buf: pool.get(len * dtype.size()),
        }
    }
    /// A pooled copy of `values`.
    pub fn from_slice<T: Elem>(pool: &Pool, values: &[T]) -> Array {
        Array {
            layout: Layout::dense(T::DTYPE),
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
        Ok(Array {
            layout: Layout::dense(dtype),
            buf,
        })
    }
    /// Wraps a buffer holding a partition of `layout`; the bytes are validated (a malformed
    /// key-value partition is a data error).
    pub fn from_layout(layout: Layout, buf: Buf) -> Result<Array> {
        match layout {
            Layout::Dense { dtype } => Array::from_buf(dtype, buf),
            Layout::KeyValue { .. } => {
                super::kv::validate(layout, buf.as_slice())
                    .map_err(|why| Error::data(format!("malformed key-value partition: {why}")))?;
                Ok(Array { layout, buf })
            }
            Layout::Edges { weighted } => {
                super::graph::check_size(weighted, buf.len())?;
                Ok(Array { layout, buf })
            }
        }
    }
    /// A partition `pid` of `layout` received from a peer: validated like [`Array::from_layout`],
    /// a malformed one is a protocol error naming the partition.
    pub fn received(pid: u32, layout: Layout, buf: Buf) -> Result<Array> {
        Array::from_layout(layout, buf)
            .map_err(|e| Error::Protocol(format!("partition {pid} ({layout:?}): {e}")))
    }
    /// Checks a partition assembled from received pieces (as [`Array::received`]).
    pub fn check_received(&self, pid: u32) -> Result<()> {
        match self.layout {
            // Whole units were checked piece by piece: any whole records are valid edges.
            Layout::Dense { .. } | Layout::Edges { .. } => Ok(()),
            Layout::KeyValue { .. } => super::kv::validate(self.layout, self.bytes())
                .map(|_| ())
                .map_err(|why| {
                    Error::Protocol(format!(
                        "partition {pid} ({:?}): malformed key-value partition: {why}",
                        self.layout
                    ))
                }),
        }
    }
    /// A partition of `layout` and `bytes` bytes whose values are unspecified (to be filled by
    /// received pieces, then checked with [`Array::check_received`]).
    pub fn uninit_layout(pool: &Pool, layout: Layout, bytes: u64) -> Array {
        match layout {
            Layout::Dense { dtype } => Array::uninit(pool, dtype, (bytes / layout.unit()) as usize),
            Layout::KeyValue { .. } | Layout::Edges { .. } => Array {
                layout,
                buf: pool.get(bytes as usize),
            },
        }
    }
    /// The element type of a dense array; `u8` for the encoded bytes of other layouts.
    pub fn dtype(&self) -> DType {
        match self.layout {
            Layout::Dense { dtype } => dtype,
            Layout::KeyValue { .. } | Layout::Edges { .. } => DType::U8,
        }
    }
    /// How this array's bytes are arranged (on the wire).
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// The pool this array's buffer came from (`None` for an empty array).
    pub fn pool(&self) -> Option<Pool> {
        self.buf.pool()
    }
    /// Number of elements (of a dense array; bytes for other layouts).
    pub fn len(&self) -> usize {
        self.buf.len() / self.dtype().size()
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
        let Layout::Dense { dtype } = self.layout else {
            return Err(Error::data(format!(
                "a {:?} partition was read as an array of {}",
                self.layout,
                T::DTYPE.name()
            )));
        };
        if T::DTYPE != dtype {
            return Err(Error::data(format!(
                "array holds {} but was read as {}",
                dtype.name(),
                T::DTYPE.name()
            )));
        }
        Ok(())
    }
    /// A pooled copy.
    pub fn duplicate(&self, pool: &Pool) -> Array {
        Array {
            layout: self.layout,
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
