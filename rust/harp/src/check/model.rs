//! The sequential model: deterministic random tables that every worker can regenerate for any
//! rank from a seed, and the result each collective must produce, computed on one machine.
//! Values are small integers, so sums are exact in every element type and distributed results
//! must match the model bit for bit.

use std::collections::BTreeMap;

use crate::data::{Array, Combiner, DType, Elem, Table};
use crate::error::{Error, Result};
use crate::pool::Pool;

/// splitmix64
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hash of several numbers (the model's source of randomness).
pub fn h(parts: &[u64]) -> u64 {
    parts.iter().fold(0x1234_5678u64, |acc, &x| mix(acc ^ x))
}

/// One round's shape, shared by all ranks: element type, combiner, partition lengths.
pub struct Shape {
    pub dtype: DType,
    pub combiner: Combiner,
    pub len_of: BTreeMap<u32, usize>,
}

/// The shape of `round`: a random element type and combiner, and for each of 12 partition ids
/// a length among 0, 1, 3, 100, 1000, `max_elems`/7 and `max_elems`.
pub fn shape(seed: u64, round: u64, max_elems: usize) -> Shape {
    let dtype = [DType::F64, DType::F32, DType::I64, DType::I32, DType::U8]
        [(h(&[seed, round, 1]) % 5) as usize];
    let combiner =
        [Combiner::Sum, Combiner::Min, Combiner::Max][(h(&[seed, round, 2]) % 3) as usize].clone();
    let sizes = [0usize, 1, 3, 100, 1000, max_elems / 7, max_elems];
    let len_of = (0..12u32)
        .map(|pid| {
            (
                pid,
                sizes[(h(&[seed, round, 3, pid as u64]) % sizes.len() as u64) as usize],
            )
        })
        .collect();
    Shape {
        dtype,
        combiner,
        len_of,
    }
}

/// Rank `r`'s random table for (seed, round, salt): a random subset of the 12 partition ids
/// (possibly none), restricted to the ids `only` accepts.
pub fn gen(
    pool: &Pool,
    s: &Shape,
    seed: u64,
    round: u64,
    salt: u64,
    r: usize,
    only: Option<&dyn Fn(u32) -> bool>,
) -> Table {
    let mut t = Table::new(s.combiner.clone());
    let count = h(&[seed, round, salt, r as u64, 4]) % 7;
    for k in 0..count {
        let pid = (h(&[seed, round, salt, r as u64, 5, k]) % 12) as u32;
        if t.contains(pid) || only.is_some_and(|f| !f(pid)) {
            continue;
        }
        let n = s.len_of[&pid];
        let mut a = Array::zeros(pool, s.dtype, n);
        fill(&mut a, &[seed, round, salt, r as u64, pid as u64]);
        t.add(pid, a).expect("fresh id");
    }
    t
}

/// Fills `a` with small random integers in [-100, 100] derived from `key`, so that sums are
/// exact in every element type.
pub fn fill(a: &mut Array, key: &[u64]) {
    let base = h(key);
    let v = |i: usize| (mix(base ^ i as u64) % 201) as i64 - 100;
    match a.dtype() {
        DType::F64 => set(a, |i| v(i) as f64),
        DType::F32 => set(a, |i| v(i) as f32),
        DType::I64 => set(a, v),
        DType::I32 => set(a, |i| v(i) as i32),
        DType::U8 => set(a, |i| v(i) as u8),
    }
}

/// Sets element i of `a` (of element type T) to `f(i)`.
fn set<T: Elem>(a: &mut Array, f: impl Fn(usize) -> T) {
    let xs = a.as_mut_slice::<T>().expect("the array's element type");
    xs.iter_mut().enumerate().for_each(|(i, x)| *x = f(i));
}

/// A deep copy of `t`.
pub fn copy(pool: &Pool, t: &Table) -> Table {
    let mut c = Table::new(t.combiner().clone());
    for (id, a) in t.iter() {
        c.put(id, a.duplicate(pool));
    }
    c
}

/// Union of tables with the combiner, in rank order: the result of allreduce and allgather,
/// and of reduce and gather at the root.
pub fn combine_all(pool: &Pool, tables: &[Table]) -> Table {
    let mut out = Table::new(
        tables
            .first()
            .map(|t| t.combiner().clone())
            .unwrap_or_default(),
    );
    for t in tables {
        for (id, a) in t.iter() {
            out.add(id, a.duplicate(pool)).expect("model combine");
        }
    }
    out
}

/// The partitions of `t` that rank `r` of `p` owns under the modulo partitioner.
pub fn owned(pool: &Pool, t: &Table, r: usize, p: usize) -> Table {
    let mut c = Table::new(t.combiner().clone());
    for (id, a) in t.iter() {
        if id as usize % p == r {
            c.put(id, a.duplicate(pool));
        }
    }
    c
}

/// Compares a distributed result with the model, byte for byte; the error names `op`, the
/// partition and the first differing byte.
pub fn same(op: &str, got: &Table, want: &Table) -> Result<()> {
    if got.ids() != want.ids() {
        return Err(Error::data(format!(
            "{op}: partition ids {:?}, expected {:?}",
            got.ids(),
            want.ids()
        )));
    }
    for (id, a) in want.iter() {
        let g = got.get(id).expect("same ids");
        if g.dtype() != a.dtype() || g.bytes() != a.bytes() {
            let at = g.bytes().iter().zip(a.bytes()).position(|(x, y)| x != y);
            return Err(Error::data(format!(
                "{op}: partition {id} differs ({} {} bytes vs expected {} {} bytes, first difference at byte {at:?})",
                g.dtype().name(),
                g.bytes().len(),
                a.dtype().name(),
                a.bytes().len()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_reproducible_and_the_model_combines_in_rank_order() {
        let pool = Pool::default();
        let s = shape(5, 0, 50);
        let a = gen(&pool, &s, 5, 0, 0, 1, None);
        let b = gen(&pool, &s, 5, 0, 0, 1, None);
        same("regenerated", &a, &b).unwrap();
        let mut t1 = Table::new(Combiner::Sum);
        let mut x = Array::zeros(&pool, DType::I32, 3);
        x.as_mut_slice::<i32>().unwrap().copy_from_slice(&[1, 2, 3]);
        t1.put(4, x);
        let mut t2 = copy(&pool, &t1);
        let mut y = Array::zeros(&pool, DType::I32, 1);
        y.as_mut_slice::<i32>().unwrap()[0] = 7;
        t2.put(5, y);
        let all = combine_all(&pool, &[t1, t2]);
        assert_eq!(all.ids(), vec![4, 5]);
        assert_eq!(all.get(4).unwrap().as_slice::<i32>().unwrap(), &[2, 4, 6]);
        assert_eq!(owned(&pool, &all, 1, 2).ids(), vec![5]);
        let e = same("allreduce", &all, &owned(&pool, &all, 0, 2))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("allreduce: partition ids [4, 5], expected [4]"),
            "{e}"
        );
    }
}
