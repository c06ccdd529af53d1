//! Layouts: how a partition's bytes are arranged. Every piece on the wire carries the layout of
//! its partition, so a receiver validates each piece and combines it with a partition it holds
//! without guessing.
//!
//! Layouts: [`Layout::Dense`], a typed array, [`Layout::KeyValue`], the entries of a
//! key-value table encoded as in [`super::kv`] (also the vertex and message partitions of
//! graphs), and [`Layout::Edges`], the edge records of [`super::graph`]. Each says here which
//! byte ranges a piece may cover
//! ([`Layout::unit`]), whether partitions may be cut into ranges that are combined range by
//! range ([`Layout::splittable`]) and what it is called in errors ([`Layout::describe`]).

use serde::{Deserialize, Serialize};

use super::array::DType;
use super::kv::{KeyType, ValueType};
use crate::error::{Error, Result};

/// The arrangement of a partition's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Layout {
    /// A dense array of `dtype` elements, little-endian.
    Dense { dtype: DType },
    /// Entries of a key-value table, keys ascending (encoding: [`super::kv`]). Pieces are
    /// byte ranges (unit 1) that are only ever reassembled into whole partitions before they
    /// are combined: a key-value partition is never combined range by range.
    KeyValue { key: KeyType, value: ValueType },
    /// Edge records `(src i64, dst i64[, weight f64])`, little-endian (`data/graph.rs`); equal
    /// ids concatenate, never combined range by range.
    Edges { weighted: bool },
}

impl Layout {
    pub fn dense(dtype: DType) -> Layout {
        Layout::Dense { dtype }
    }

    pub fn is_edges(self) -> bool {
        matches!(self, Layout::Edges { .. })
    }

    /// The indivisible run of bytes: a partition's size and every piece's offset and length
    /// are whole multiples of it.
    pub fn unit(self) -> u64 {
        match self {
            Layout::Dense { dtype } => dtype.size() as u64,
            Layout::KeyValue { .. } => 1,
            Layout::Edges { weighted } => super::graph::edge_bytes(weighted) as u64,
        }
    }

    /// True when a partition may be cut into ranges of units that are combined range by range
    /// with the same range of another partition (dense arrays); false when only whole
    /// partitions can be combined (key-value partitions: sizes differ, entries have no fixed
    /// place).
    pub fn splittable(self) -> bool {
        match self {
            Layout::Dense { .. } => true,
            Layout::KeyValue { .. } | Layout::Edges { .. } => false,
        }
    }

    /// A partition of `total` bytes in words, e.g. "10 f64 elements".
    pub fn describe(self, total: u64) -> String {
        match self {
            Layout::Dense { dtype } => {
                format!("{} {} elements", total / self.unit(), dtype.name())
            }
            Layout::Edges { weighted } => super::graph::describe(weighted, total / self.unit()),
            Layout::KeyValue { key, value } => format!(
                "a key-value partition of {total} bytes ({} keys, {} values)",
                key.name(),
                value.name()
            ),
        }
    }

    /// Checks that bytes `[offset, offset+len)` of partition `pid` of `total` bytes are whole
    /// units inside the partition (a malformed piece is a protocol error).
    pub fn check_piece(self, pid: u32, total: u64, offset: u64, len: u64) -> Result<()> {
        let unit = self.unit();
        let inside = offset.checked_add(len).is_some_and(|end| end <= total);
        // Units are mostly powers of two (1, 4, 8 bytes): a mask instead of three divisions.
        let whole = if unit.is_power_of_two() {
            (total | offset | len) & (unit - 1) == 0
        } else {
            [total, offset, len].iter().all(|v| v.is_multiple_of(unit))
        };
        if !inside || !whole {
            return Err(Error::Protocol(format!(
                "piece of partition {pid} has inconsistent bounds: bytes {offset}..+{len} of a \
                 partition of {total} bytes in {unit}-byte units ({self:?})"
            )));
        }
        Ok(())
    }

    /// Checks that a piece of a partition of `theirs` layout and `their_total` bytes can be
    /// combined with the local partition `pid` of this layout and `total` bytes: same layout,
    /// and for splittable layouts the same size (key-value partitions differ in size).
    pub fn check_same(self, pid: u32, total: u64, theirs: Layout, their_total: u64) -> Result<()> {
        if self != theirs || (self.splittable() && total != their_total) {
            return Err(Error::data(format!(
                "partition {pid}: this worker holds {}, a peer sent a piece of a partition of {}",
                self.describe(total),
                theirs.describe(their_total)
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_whole_units_inside_the_partition() {
        let f64s = Layout::dense(DType::F64);
        assert_eq!(f64s.unit(), 8);
        assert!(f64s.check_piece(1, 80, 0, 80).is_ok());
        assert!(f64s.check_piece(1, 80, 72, 8).is_ok());
        assert!(f64s.check_piece(1, 0, 0, 0).is_ok());
        for (total, off, len) in [
            (80, 76, 8),
            (80, 4, 8),
            (80, 8, 4),
            (84, 0, 8),
            (80, u64::MAX, 2),
        ] {
            let e = f64s.check_piece(7, total, off, len).unwrap_err();
            assert_eq!(e.kind(), "protocol");
            assert!(e.to_string().contains("partition 7"), "{e}");
        }
        assert!(Layout::dense(DType::U8).check_piece(1, 3, 1, 1).is_ok());
        // A unit that is not a power of two: weighted edges, 24 bytes.
        let edges = Layout::Edges { weighted: true };
        assert_eq!(edges.unit(), 24);
        assert!(edges.check_piece(1, 72, 24, 48).is_ok());
        for (total, off, len) in [(72, 16, 24), (72, 24, 32), (64, 0, 24)] {
            assert!(
                edges.check_piece(1, total, off, len).is_err(),
                "{total} {off} {len}"
            );
        }
    }

    #[test]
    fn combining_needs_the_same_layout_and_size() {
        let a = Layout::dense(DType::F64);
        assert!(a.check_same(2, 80, a, 80).is_ok());
        let e = a.check_same(2, 80, a, 16).unwrap_err().to_string();
        assert_eq!(
            e,
            "partition 2: this worker holds 10 f64 elements, a peer sent a piece of a partition \
             of 2 f64 elements"
        );
        let e = a
            .check_same(2, 80, Layout::dense(DType::F32), 80)
            .unwrap_err();
        assert!(e.to_string().contains("20 f32 elements"), "{e}");
        assert_eq!(e.kind(), "data");
    }

    #[test]
    fn travels_in_bincode() {
        let mut all: Vec<Layout> = DType::ALL.into_iter().map(Layout::dense).collect();
        for key in KeyType::ALL {
            for value in ValueType::all() {
                all.push(Layout::KeyValue { key, value });
            }
        }
        for l in all {
            assert_eq!(
                crate::wire::decode::<Layout>(&crate::wire::encode(&l)).unwrap(),
                l
            );
        }
        // The documented encoding: variant 1, key 2 (str), value variant 0 (scalar), dtype 2.
        let l = Layout::KeyValue {
            key: KeyType::Str,
            value: ValueType::Scalar(DType::I64),
        };
        assert_eq!(crate::wire::encode(&l), vec![1, 2, 0, 2]);
    }

    /// Key-value partitions with one id differ in size: only the layout must match, and they
    /// are never cut into ranges.
    #[test]
    fn key_value_partitions_combine_whole() {
        let kv = Layout::KeyValue {
            key: KeyType::I64,
            value: ValueType::Bytes,
        };
        assert_eq!(kv.unit(), 1);
        assert!(!kv.splittable() && Layout::dense(DType::U8).splittable());
        assert!(kv.check_same(3, 100, kv, 7).is_ok());
        let e = kv
            .check_same(3, 100, Layout::dense(DType::U8), 100)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("a key-value partition of 100 bytes (i64 keys, bytes values)"),
            "{e}"
        );
    }
}
