//! The data model: typed arrays → partitions → tables.
//!
//! * [`array`]: an [`Array`] is a typed vector (f64, f32, i64, i32, u8, i16, i8, u16, u32 or u64) held
//!   in a pooled,
//!   64-byte aligned [`Buf`](crate::pool::Buf). Its bytes are little-endian native values, so
//!   they go on the wire and across JNI without any encoding.
//! * [`layout`]: how a partition's bytes are arranged ([`Layout`]); every piece on the wire
//!   carries one, so receivers validate and combine without guessing.
//! * [`combiner`]: what happens when two partitions with the same id meet.
//! * [`partitioner`]: which worker owns a partition id.
//! * [`table`]: a partition is an id (`u32`) plus an array; a [`Table`] maps partition ids to
//!   arrays and applies its [`Combiner`] whenever a partition arrives with an id it already
//!   holds.
//!
//! * [`kv`]: key-value tables ([`Layout::KeyValue`]): key and value types, the partition
//!   encoding, key-wise combining, the stable key → partition hash, and the [`kv::KvTable`]
//!   builder with local aggregation.
//!
//! * [`graph`]: edge partitions ([`Layout::Edges`]: fixed-size `(src, dst[, weight])`
//!   records, concatenated when ids meet) with their builder and reader; vertex and message
//!   partitions are key-value tables with i64 keys, placed by [`graph::vertex_partition`].
//!
//! The collectives move pieces of any layout.

pub mod array;
pub mod combiner;
pub mod graph;
pub mod kv;
pub mod layout;
pub mod partitioner;
pub mod table;

pub use array::{Array, DType, Elem};
pub use combiner::{Combiner, CustomCombiner};
pub use kv::{Key, KeyType, KvCombiner, KvTable, Value, ValueType};
pub use layout::Layout;
pub use partitioner::Partitioner;
pub use table::{aggregate, Partition, Table};
