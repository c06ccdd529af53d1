//! Typed arrays: the element types ([`DType`], [`Elem`]: f64, f32, i64, i32, u8, i16, i8, u16,
//! u32, u64) and [`Array`], a typed vector in a
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
    I16 = 5,
    I8 = 6,
    U16 = 7,
    U32 = 8,
    U64 = 9,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::I16 | DType::U16 => 2,
            DType::U8 | DType::I8 => 1,
        }
    }
    pub fn from_u8(v: u8) -> Result<DType> {
        Ok(match v {
            0 => DType::F64,
            1 => DType::F32,
            2 => DType::I64,
            3 => DType::I32,
            4 => DType::U8,
            5 => DType::I16,
            6 => DType::I8,
            7 => DType::U16,
            8 => DType::U32,
            9 => DType::U64,
            _ => return Err(Error::Protocol(format!("unknown element type {v}"))),
        })
    }
    /// Every element type, in wire-code order. A code is below 16: a checkpoint's layout byte
    /// keeps 16 and up for the other layouts (`checkpoint.rs`), and a key-value value type's
    /// byte adds 64 for arrays.
    pub const ALL: [DType; 10] = [
        DType::F64,
        DType::F32,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::I16,
        DType::I8,
        DType::U16,
        DType::U32,
        DType::U64,
    ];

    /// Parses a name given by [`DType::name`] (the vocabulary shared with Java).
    pub fn parse(name: &str) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown element type {name:?} (f64, f32, i64, i32, u8, i16, i8, u16, u32, u64)"
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
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }
}

/// A Rust element type that an [`Array`] can hold.
pub trait Elem: bytemuck::Pod + PartialOrd + std::ops::Add<Output = Self> + Send + Sync {
    const DTYPE: DType;
}
/// `impl Elem` for each Rust type and its element type.
macro_rules! elems {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Elem for $t {
            const DTYPE: DType = DType::$d;
        })*
    };
}
elems!(f64 => F64, f32 => F32, i64 => I64, i32 => I32, u8 => U8, i16 => I16, i8 => I8,
    u16 => U16, u32 => U32, u64 => U64);

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
            assert!((d as u8) < 16, "{d:?}: a checkpoint keeps codes 16 and up");
        }
        for (i, d) in DType::ALL.into_iter().enumerate() {
            assert_eq!(d as usize, i, "ALL is in wire-code order");
        }
        assert!(DType::from_u8(DType::ALL.len() as u8).is_err());
        let sizes: Vec<usize> = DType::ALL.into_iter().map(DType::size).collect();
        assert_eq!(sizes, [8, 4, 8, 4, 1, 2, 1, 2, 4, 8]);
        let a = Array::from_slice(&Pool::default(), &[-3i16, 7]);
        assert_eq!(a.layout(), Layout::dense(DType::I16));
        assert_eq!(a.as_slice::<i16>().unwrap(), &[-3, 7]);
        assert!(a.as_slice::<u16>().is_err());
        assert!(DType::parse("float").is_err());
        let pool = Pool::default();
        assert!(Array::from_slice(&pool, &[1u8]).as_slice::<f64>().is_err());
        let e = Array::from_buf(DType::F64, pool.copy_of(&[0u8; 12]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("12 bytes") && e.contains("f64"), "{e}");
    }
}
