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
    parts: Parts,
}

/// Up to this many partitions a table keeps them in a sorted vector; past it, in a B-tree.
const SMALL: usize = 64;

/// A table's partitions in ascending id order. A small table (at most [`SMALL`] partitions,
/// the usual case for the tables collectives move) is a sorted vector: a lookup is a binary
/// search, and adding, removing or keeping partitions allocates nothing and shifts at most a
/// few kilobytes. A larger one is a B-tree, so a table of a million partitions added in any
/// order costs O(log n) per partition. It goes back to the vector when it shrinks to half
/// of [`SMALL`].
#[derive(Debug)]
enum Parts {
    Small(Vec<(u32, Array)>),
    Large(BTreeMap<u32, Array>),
}

impl Default for Parts {
    fn default() -> Self {
        Parts::Small(Vec::new())
    }
}

impl Parts {
    fn len(&self) -> usize {
        match self {
            Parts::Small(v) => v.len(),
            Parts::Large(m) => m.len(),
        }
    }
    fn get(&self, id: u32) -> Option<&Array> {
        match self {
            Parts::Small(v) => v.binary_search_by_key(&id, |e| e.0).ok().map(|i| &v[i].1),
            Parts::Large(m) => m.get(&id),
        }
    }
    fn get_mut(&mut self, id: u32) -> Option<&mut Array> {
        match self {
            Parts::Small(v) => match v.binary_search_by_key(&id, |e| e.0) {
                Ok(i) => Some(&mut v[i].1),
                Err(_) => None,
            },
            Parts::Large(m) => m.get_mut(&id),
        }
    }
    /// Inserts or replaces; returns the partition replaced.
    fn insert(&mut self, id: u32, data: Array) -> Option<Array> {
        let v = match self {
            Parts::Large(m) => return m.insert(id, data),
            Parts::Small(v) => v,
        };
        // Ids usually come in ascending order: append without a search.
        if v.last().is_none_or(|e| e.0 < id) && v.len() < SMALL {
            v.push((id, data));
            return None;
        }
        match v.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => Some(std::mem::replace(&mut v[i].1, data)),
            Err(_) if v.len() >= SMALL => {
                let mut m: BTreeMap<u32, Array> = std::mem::take(v).into_iter().collect();
                m.insert(id, data);
                *self = Parts::Large(m);
                None
            }
            Err(i) => {
                v.insert(i, (id, data));
                None
            }
        }
    }
    fn remove(&mut self, id: u32) -> Option<Array> {
        let out = match self {
            Parts::Small(v) => {
                let i = v.binary_search_by_key(&id, |e| e.0).ok()?;
                return Some(v.remove(i).1);
            }
            Parts::Large(m) => m.remove(&id),
        };
        self.shrink();
        out
    }
    fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        match self {
            Parts::Small(v) => v.retain(|e| keep(e.0)),
            Parts::Large(m) => m.retain(|id, _| keep(*id)),
        }
        self.shrink();
    }
    /// A B-tree that has shrunk to half of [`SMALL`] becomes a vector again.
    fn shrink(&mut self) {
        if let Parts::Large(m) = self {
            if m.len() <= SMALL / 2 {
                *self = Parts::Small(std::mem::take(m).into_iter().collect());
            }
        }
    }
    fn iter(&self) -> Iter<'_> {
        match self {
            Parts::Small(v) => Iter::Small(v.iter()),
            Parts::Large(m) => Iter::Large(m.iter()),
        }
    }
    fn iter_mut(&mut self) -> IterMut<'_> {
        match self {
            Parts::Small(v) => IterMut::Small(v.iter_mut()),
            Parts::Large(m) => IterMut::Large(m.iter_mut()),
        }
    }
    /// Every partition, in ascending id order, leaving this empty.
    fn take(&mut self) -> Vec<(u32, Array)> {
        match std::mem::take(self) {
            Parts::Small(v) => v,
            Parts::Large(m) => m.into_iter().collect(),
        }
    }
}

/// The partitions of a table in ascending id order ([`Table::iter`]).
pub enum Iter<'a> {
    Small(std::slice::Iter<'a, (u32, Array)>),
    Large(std::collections::btree_map::Iter<'a, u32, Array>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (u32, &'a Array);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Small(it) => it.next().map(|(k, v)| (*k, v)),
            Iter::Large(it) => it.next().map(|(k, v)| (*k, v)),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Small(it) => it.size_hint(),
            Iter::Large(it) => it.size_hint(),
        }
    }
}

/// The partitions of a table in ascending id order, mutable ([`Table::iter_mut`]).
pub enum IterMut<'a> {
    Small(std::slice::IterMut<'a, (u32, Array)>),
    Large(std::collections::btree_map::IterMut<'a, u32, Array>),
}

impl<'a> Iterator for IterMut<'a> {
    type Item = (u32, &'a mut Array);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            IterMut::Small(it) => it.next().map(|(k, v)| (*k, v)),
            IterMut::Large(it) => it.next().map(|(k, v)| (*k, v)),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            IterMut::Small(it) => it.size_hint(),
            IterMut::Large(it) => it.size_hint(),
        }
    }
}

impl FromIterator<(u32, Array)> for Parts {
    /// From partitions in ascending id order without repeats (another table's).
    fn from_iter<I: IntoIterator<Item = (u32, Array)>>(it: I) -> Self {
        let v: Vec<(u32, Array)> = it.into_iter().collect();
        debug_assert!(v.windows(2).all(|w| w[0].0 < w[1].0));
        if v.len() <= SMALL {
            Parts::Small(v)
        } else {
            Parts::Large(v.into_iter().collect())
        }
    }
}

impl Table {
    pub fn new(combiner: Combiner) -> Table {
        Table {
            combiner,
            parts: Parts::default(),
        }
    }
    pub fn combiner(&self) -> &Combiner {
        &self.combiner
    }
    /// Adds a partition; if the id is already present the two are combined.
    pub fn add(&mut self, id: u32, data: Array) -> Result<()> {
        match self.parts.get_mut(id) {
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
        match self.parts.get_mut(id) {
            Some(acc) if acc.layout() == layout && acc.bytes().len() == bytes.len() => {
                // Same type and length, and a sum, min or max: nothing left to check.
                self.combiner.fold_same(dtype, acc.bytes_mut(), bytes);
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
        self.parts.get(id)
    }
    pub fn get_mut(&mut self, id: u32) -> Option<&mut Array> {
        self.parts.get_mut(id)
    }
    pub fn remove(&mut self, id: u32) -> Option<Array> {
        self.parts.remove(id)
    }
    pub fn contains(&self, id: u32) -> bool {
        self.parts.get(id).is_some()
    }
    /// Partition ids in ascending order.
    pub fn ids(&self) -> Vec<u32> {
        self.parts.iter().map(|(id, _)| id).collect()
    }
    pub fn len(&self) -> usize {
        self.parts.len()
    }
    pub fn is_empty(&self) -> bool {
        self.parts.len() == 0
    }
    /// Total payload bytes.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|(_, a)| a.bytes().len() as u64).sum()
    }
    /// Partitions in ascending id order.
    pub fn iter(&self) -> Iter<'_> {
        self.parts.iter()
    }
    pub fn iter_mut(&mut self) -> IterMut<'_> {
        self.parts.iter_mut()
    }
    /// Removes all partitions (their buffers go back to the pool).
    pub fn clear(&mut self) {
        self.parts = Parts::default();
    }
    /// Takes all partitions out in ascending id order, leaving the table empty.
    pub fn take_all(&mut self) -> Vec<Partition> {
        self.parts
            .take()
            .into_iter()
            .map(|(id, data)| Partition { id, data })
            .collect()
    }
    /// Keeps only the partitions for which `keep(id)` is true.
    pub fn retain(&mut self, keep: impl FnMut(u32) -> bool) {
        self.parts.retain(keep);
    }
    /// A copy of every partition in buffers of `pool`, with the same combiner.
    pub fn duplicate(&self, pool: &Pool) -> Table {
        Table {
            combiner: self.combiner.clone(),
            parts: self
                .parts
                .iter()
                .map(|(id, a)| (id, a.duplicate(pool)))
                .collect(),
        }
    }
    /// Folds every partition of `other` into this table.
    pub fn merge(&mut self, mut other: Table) -> Result<()> {
        for (id, data) in other.parts.take() {
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

    /// The table against a B-tree model under a pseudo-random mix of adds, puts, removals
    /// and retains that grows it past the vector's limit, shrinks it back and grows it again:
    /// the same partitions, in ascending order, after every step.
    #[test]
    fn small_and_large_tables_hold_the_same_partitions_in_order() {
        let pool = Pool::default();
        let mut t = Table::new(Combiner::Sum);
        let mut model: BTreeMap<u32, f64> = BTreeMap::new();
        let mut x = 0x2545_f491_u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut largest, mut changes, mut was_small) = (0, 0, true);
        for step in 0..6000u32 {
            // Ids spread over 0..400 so that a table crosses SMALL both ways.
            let phase = (step / 1000) % 2; // even thousands grow, odd ones empty it
            let id = next(400) as u32;
            match (next(8), phase) {
                (0..=3, 0) => {
                    t.add(id, Array::from_slice(&pool, &[1.0f64])).unwrap();
                    *model.entry(id).or_default() += 1.0;
                }
                (4, 0) => {
                    let old = t.put(id, Array::from_slice(&pool, &[5.0f64]));
                    let was = model.insert(id, 5.0);
                    assert_eq!(old.map(|a| a.as_slice::<f64>().unwrap()[0]), was);
                }
                (0..=6, 1) | (5, 0) => {
                    let got = t.remove(id).map(|a| a.as_slice::<f64>().unwrap()[0]);
                    assert_eq!(got, model.remove(&id));
                }
                (7, 1) => {
                    let m = next(5) as u32 + 2;
                    t.retain(|id| id % m != 0);
                    model.retain(|id, _| id % m != 0);
                }
                _ => assert_eq!(t.contains(id), model.contains_key(&id)),
            }
            largest = largest.max(t.len());
            let small = matches!(t.parts, Parts::Small(_));
            changes += (small != was_small) as u32;
            was_small = small;
            let got: Vec<(u32, f64)> = t
                .iter()
                .map(|(id, a)| (id, a.as_slice::<f64>().unwrap()[0]))
                .collect();
            let want: Vec<(u32, f64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            assert_eq!(got, want, "step {step}");
            assert_eq!(t.len(), model.len());
            assert_eq!(t.bytes(), 8 * model.len() as u64);
        }
        assert!(
            largest > 4 * SMALL,
            "the table grew to {largest} partitions"
        );
        assert!(
            changes >= 4,
            "vector and B-tree changed places {changes} times"
        );
        // Taking everything out keeps the order; the table is then empty and small.
        let ids: Vec<u32> = t.take_all().iter().map(|p| p.id).collect();
        assert_eq!(ids, model.keys().copied().collect::<Vec<_>>());
        assert!(t.is_empty() && matches!(t.parts, Parts::Small(_)));
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
