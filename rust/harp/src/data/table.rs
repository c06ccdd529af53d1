//! Partitions and tables: a [`Table`] maps partition ids to arrays and applies its
//! [`Combiner`] whenever a partition arrives with an id it already holds; [`aggregate`] combines
//! several tables locally, in parallel.

use std::collections::BTreeMap;

use super::array::Array;
use super::combiner::Combiner;
use crate::error::Result;
use crate::pool::Pool;

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
    /// Folds the bytes of a whole dense partition `id` of `layout` (at any alignment, e.g.
    /// inside a received frame) into the partition this table holds, without a buffer for
    /// them. Only when that is exactly what [`Table::add`] would do: the table holds `id` with
    /// the same layout and size and its combiner is sum, min or max. Returns false, changing
    /// nothing, otherwise (the caller then adds the bytes as an [`Array`]).
    pub fn fold_bytes(&mut self, id: u32, layout: super::Layout, bytes: &[u8]) -> Result<bool> {
        let super::Layout::Dense { dtype } = layout else {
            return Ok(false);
        };
        if !self.combiner.folds_bytes() {
            return Ok(false);
        }
        match self.parts.get_mut(&id) {
            Some(acc) if acc.layout() == layout && acc.bytes().len() == bytes.len() => {
                let c = &self.combiner;
                c.combine_bytes(id, dtype, acc.bytes_mut(), dtype, bytes)?;
                Ok(true)
            }
            _ => Ok(false),
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
    /// A copy of every partition in buffers of `pool`, with the same combiner.
    pub fn duplicate(&self, pool: &Pool) -> Table {
        Table {
            combiner: self.combiner.clone(),
            parts: self
                .parts
                .iter()
                .map(|(id, a)| (*id, a.duplicate(pool)))
                .collect(),
        }
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
    use std::sync::Arc;

    use super::*;
    use crate::data::CustomCombiner;
    use crate::error::Result;

    #[test]
    fn fold_bytes_does_what_add_does_or_nothing() {
        use crate::data::{DType, Layout};
        let pool = Pool::default();
        let f64s = Layout::dense(DType::F64);
        let table = |c: Combiner| {
            let mut t = Table::new(c);
            t.add(1, Array::from_slice(&pool, &[1.0f64, 5.0, -2.0]))
                .unwrap();
            t
        };
        let other = [4.0f64, 2.0, -3.0];
        // The bytes at an odd address, as inside a received frame.
        let mut raw = [0u64; 4];
        bytemuck::cast_slice_mut::<u64, u8>(&mut raw)[1..25]
            .copy_from_slice(bytemuck::cast_slice(&other));
        let bytes = &bytemuck::cast_slice::<u64, u8>(&raw)[1..25];
        for c in [Combiner::Sum, Combiner::Min, Combiner::Max] {
            let mut a = table(c.clone());
            assert!(a.fold_bytes(1, f64s, bytes).unwrap());
            let mut b = table(c);
            b.add(1, Array::from_slice(&pool, &other)).unwrap();
            let got = a.get(1).unwrap().as_slice::<f64>().unwrap().to_vec();
            assert_eq!(got, b.get(1).unwrap().as_slice::<f64>().unwrap());
        }
        // Cases it leaves to `add`: nothing changes.
        let untouched =
            |t: &Table| t.get(1).unwrap().as_slice::<f64>().unwrap() == [1.0, 5.0, -2.0];
        let mut t = table(Combiner::KeepFirst);
        assert!(!t.fold_bytes(1, f64s, bytes).unwrap() && untouched(&t));
        let mut t = table(Combiner::Sum);
        assert!(!t.fold_bytes(2, f64s, bytes).unwrap() && untouched(&t));
        assert!(!t.fold_bytes(1, f64s, &bytes[..16]).unwrap() && untouched(&t));
        assert!(!t.fold_bytes(1, Layout::dense(DType::I64), bytes).unwrap() && untouched(&t));
        assert!(t.get(2).is_none());
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
}
