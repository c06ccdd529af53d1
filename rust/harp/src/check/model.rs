//! The sequential model: deterministic random tables that every worker can regenerate for any
//! rank from a seed, and the result each collective must produce, computed on one machine.
//! Values are small integers, so sums are exact in every element type and distributed results
//! must match the model bit for bit.

use std::collections::BTreeMap;

use crate::data::graph::{edge_bytes, EdgeBuilder};
use crate::data::kv::{self, Key, KeyType, KvTable, Value, ValueType};
use crate::data::{Array, Combiner, DType, Elem, Layout, Table};
use crate::error::{Error, Result};
use crate::pool::Pool;

/// splitmix64
pub use crate::util::splitmix64 as mix;

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
    let dtype = DType::ALL[(h(&[seed, round, 1]) % DType::ALL.len() as u64) as usize];
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
        DType::I16 => set(a, |i| v(i) as i16),
        DType::I8 => set(a, |i| v(i) as i8),
        DType::U16 => set(a, |i| v(i) as u16),
        DType::U32 => set(a, |i| v(i) as u32),
        DType::U64 => set(a, |i| v(i) as u64),
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
        if g.layout() != a.layout() || g.bytes() != a.bytes() {
            let at = g.bytes().iter().zip(a.bytes()).position(|(x, y)| x != y);
            return Err(Error::data(format!(
                "{op}: partition {id} differs ({} vs expected {}, first difference at byte {at:?})",
                g.layout().describe(g.bytes().len() as u64),
                a.layout().describe(a.bytes().len() as u64),
            )));
        }
    }
    Ok(())
}

/// One key-value round's shape, shared by all ranks: key type, combiner (sum of i64 scalars or
/// append of i32 arrays), and the number of distinct keys each partition id draws from.
pub struct KvShape {
    pub key: KeyType,
    pub combiner: Combiner,
    pub keys_of: BTreeMap<u32, u64>,
}

impl KvShape {
    pub fn value(&self) -> ValueType {
        match self.combiner {
            Combiner::Append => ValueType::Array(DType::I32),
            _ => ValueType::Scalar(DType::I64),
        }
    }
    pub fn layout(&self) -> Layout {
        Layout::KeyValue {
            key: self.key,
            value: self.value(),
        }
    }
    /// E.g. "str → i64 sum".
    pub fn describe(&self) -> String {
        format!(
            "{} → {} {}",
            self.key.name(),
            self.value().name(),
            self.combiner.name()
        )
    }
}

/// The key-value shape of `round`: i64 or str keys, sum or append, and for each of 9 partition
/// ids a key space of 0, 1, 4, 60 or 3000 keys (so partitions are uneven and ranks share keys).
pub fn kv_shape(seed: u64, round: u64) -> KvShape {
    let key = [KeyType::I64, KeyType::Str][(h(&[seed, round, 21]) % 2) as usize];
    let combiner = [Combiner::Sum, Combiner::Append][(h(&[seed, round, 22]) % 2) as usize].clone();
    let sizes = [0u64, 1, 4, 60, 3000];
    let keys_of = (0..9u32)
        .map(|pid| (pid, sizes[(h(&[seed, round, 23, pid as u64]) % 5) as usize]))
        .collect();
    KvShape {
        key,
        combiner,
        keys_of,
    }
}

/// The `i`-th key of a key space: i64 keys spread over the whole range (negative too), str
/// keys of varying length with bytes that are not UTF-8.
fn kv_key(key: KeyType, i: u64, buf: &mut Vec<u8>) -> Key<'_> {
    let z = mix(i ^ 0x5eed);
    match key {
        KeyType::I64 => Key::I64(z as i64),
        KeyType::I32 => Key::I32(z as i32),
        KeyType::Str => {
            buf.clear();
            buf.extend_from_slice(format!("k{i}").as_bytes());
            buf.extend(std::iter::repeat_n(0xff - (z % 7) as u8, (z % 5) as usize));
            Key::Str(buf)
        }
    }
}

/// Rank `r`'s random key-value table for (seed, round, salt): for a random subset of the 9
/// partition ids (possibly none), a random number of keys drawn from the id's key space
/// (entries keyed by the partition id the key hashes to are left out: a table's partition ids
/// are its own, the model only needs tables of many uneven partitions), with values: small i64
/// for sum, arrays of 0–3 small i32 for append.
pub fn kv_gen(pool: &Pool, s: &KvShape, seed: u64, round: u64, salt: u64, r: usize) -> Table {
    let mut t = Table::new(s.combiner.clone());
    let count = h(&[seed, round, salt, r as u64, 24]) % 6;
    let mut buf = Vec::new();
    for k in 0..count {
        let pid = (h(&[seed, round, salt, r as u64, 25, k]) % 9) as u32;
        let space = s.keys_of[&pid];
        if t.contains(pid) {
            continue;
        }
        let mut b = KvTable::new(s.key, s.value(), s.combiner.clone(), 1).expect("suits");
        let n = h(&[seed, round, salt, r as u64, 26, pid as u64]) % (space + 1);
        for e in 0..n {
            let x = h(&[seed, round, salt, r as u64, 27, pid as u64, e]);
            let key = kv_key(s.key, pid as u64 * 1_000_003 + x % space.max(1), &mut buf);
            let v = (x >> 20) % 201;
            let res = match s.value() {
                ValueType::Scalar(_) => b.add(key, Value::scalar(&(v as i64 - 100))),
                _ => {
                    let a: Vec<i32> = (0..(x >> 40) % 4).map(|j| (v + j) as i32 - 100).collect();
                    b.add(key, Value::array(&a))
                }
            };
            res.expect("model entry");
        }
        let part = b.into_table(pool).expect("encodes").remove(0);
        let a = part.unwrap_or_else(|| Array::uninit_layout(pool, s.layout(), 0));
        t.put(pid, a);
    }
    t
}

/// One edge round's shape, shared by all ranks: weighted or not, and the most edges a rank
/// holds in each of 9 partition ids.
pub struct EdgeShape {
    pub weighted: bool,
    pub edges_of: BTreeMap<u32, u64>,
}

impl EdgeShape {
    /// E.g. "weighted edges, sum".
    pub fn describe(&self) -> String {
        let w = if self.weighted { "weighted " } else { "" };
        format!("{w}edges, {}", self.combiner().name())
    }
    /// Edge partitions with the same id concatenate under sum (and min and max).
    pub fn combiner(&self) -> Combiner {
        Combiner::Sum
    }
}

/// The edge shape of `round`: weighted or not, and for each of 9 partition ids up to 0, 1, 5,
/// 200 or 3000 edges (72 KB weighted: above the crossovers, so segmenting algorithms and the
/// chunked broadcast must keep records whole).
pub fn edge_shape(seed: u64, round: u64) -> EdgeShape {
    let sizes = [0u64, 1, 5, 200, 3000];
    EdgeShape {
        weighted: h(&[seed, round, 31]) % 2 == 1,
        edges_of: (0..9u32)
            .map(|pid| (pid, sizes[(h(&[seed, round, 32, pid as u64]) % 5) as usize]))
            .collect(),
    }
}

/// Rank `r`'s random edge table for (seed, round, salt): for a random subset of the 9
/// partition ids (possibly none), a random number of edges between vertices in ±2^40 with
/// weights in (0, 4].
pub fn edge_gen(pool: &Pool, s: &EdgeShape, seed: u64, round: u64, salt: u64, r: usize) -> Table {
    let mut t = Table::new(s.combiner());
    let count = h(&[seed, round, salt, r as u64, 34]) % 6;
    for k in 0..count {
        let pid = (h(&[seed, round, salt, r as u64, 35, k]) % 9) as u32;
        if t.contains(pid) {
            continue;
        }
        let n = h(&[seed, round, salt, r as u64, 36, pid as u64]) % (s.edges_of[&pid] + 1);
        let mut b = EdgeBuilder::new(s.weighted);
        for e in 0..n {
            let x = h(&[seed, round, salt, r as u64, 37, pid as u64, e]);
            let v = |z: u64| (z % (1 << 41)) as i64 - (1 << 40);
            b.push(v(x), v(mix(x)), ((x >> 50) % 16 + 1) as f64 / 4.0);
        }
        t.put(pid, b.build(pool));
    }
    t
}

/// `t` with the elements of every array value of its key-value partitions sorted, and the
/// records of its edge partitions sorted: the order in which `append` and edge concatenation
/// combine depends on the order partitions meet, which differs between algorithms and
/// workers, so results are compared in this form.
pub fn canonical(pool: &Pool, t: &Table) -> Result<Table> {
    let mut c = Table::new(t.combiner().clone());
    for (id, a) in t.iter() {
        if let Layout::Edges { weighted } = a.layout() {
            let mut recs: Vec<&[u8]> = a.bytes().chunks(edge_bytes(weighted)).collect();
            recs.sort_unstable();
            c.put(
                id,
                Array::from_layout(a.layout(), pool.copy_of(&recs.concat()))?,
            );
            continue;
        }
        let Layout::KeyValue {
            value: ValueType::Array(DType::I32),
            ..
        } = a.layout()
        else {
            c.put(id, a.duplicate(pool));
            continue;
        };
        let mut w = kv::Writer::new(a.layout())?;
        for (k, v) in kv::entries(a)? {
            let mut xs = v.to_vec::<i32>()?;
            xs.sort_unstable();
            w.push(k, Value::array(&xs))?;
        }
        c.put(id, w.finish(pool)?);
    }
    Ok(c)
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

    /// Edge tables are reproducible, weighted in some rounds and not in others, uneven (empty
    /// and large partitions), share partition ids between ranks, and the model concatenates
    /// them; canonical form sorts the records.
    #[test]
    fn edge_tables_are_uneven_and_concatenate() {
        use crate::data::graph::Edges;
        let pool = Pool::default();
        let (mut kinds, mut edges, mut shared) = (BTreeMap::new(), Vec::new(), false);
        for round in 0..8 {
            let s = edge_shape(3, round);
            kinds.insert(s.describe(), ());
            let ts: Vec<Table> = (0..4)
                .map(|r| edge_gen(&pool, &s, 3, round, 0, r))
                .collect();
            same("regenerated", &ts[2], &edge_gen(&pool, &s, 3, round, 0, 2)).unwrap();
            let all = combine_all(&pool, &ts);
            let c = canonical(&pool, &all).unwrap();
            for (id, a) in all.iter() {
                let parts: Vec<usize> = ts
                    .iter()
                    .filter_map(|t| t.get(id))
                    .map(|x| Edges::of(x).unwrap().len())
                    .collect();
                shared |= parts.len() > 1;
                let n = Edges::of(a).unwrap().len();
                assert_eq!(
                    n,
                    parts.iter().sum::<usize>(),
                    "round {round} partition {id}"
                );
                edges.push(n);
                let sorted: Vec<_> = Edges::of(c.get(id).unwrap()).unwrap().iter().collect();
                let mut want: Vec<_> = Edges::of(a).unwrap().iter().collect();
                let key = |e: &crate::data::graph::Edge| {
                    let mut b = e.src.to_le_bytes().to_vec();
                    b.extend(e.dst.to_le_bytes());
                    b.extend(e.weight.to_le_bytes());
                    b
                };
                want.sort_by_key(key);
                assert_eq!(sorted, want);
            }
        }
        edges.sort_unstable();
        assert_eq!(kinds.len(), 2, "{kinds:?}");
        assert!(
            shared && edges.contains(&0) && *edges.last().unwrap() > 3000,
            "{edges:?}"
        );
    }

    /// Key-value tables are reproducible, uneven, share keys between ranks, and the model's
    /// combination of them (sum, append) is the key-wise combination.
    #[test]
    fn key_value_tables_are_uneven_and_overlap() {
        let pool = Pool::default();
        let (mut sizes, mut overlap, mut kinds) = (Vec::new(), false, BTreeMap::new());
        for round in 0..8 {
            let s = kv_shape(3, round);
            kinds.insert(s.describe(), ());
            let ts: Vec<Table> = (0..4).map(|r| kv_gen(&pool, &s, 3, round, 0, r)).collect();
            same("regenerated", &ts[1], &kv_gen(&pool, &s, 3, round, 0, 1)).unwrap();
            let all = combine_all(&pool, &ts);
            let mut want: BTreeMap<(u32, Vec<u8>), Vec<i64>> = BTreeMap::new();
            for t in &ts {
                for (id, a) in t.iter() {
                    sizes.push(a.bytes().len());
                    for (k, v) in kv::entries(a).unwrap() {
                        let key = (id, format!("{k}").into_bytes());
                        overlap |= want.contains_key(&key);
                        let e = want.entry(key).or_default();
                        match v.ty {
                            ValueType::Scalar(_) => {
                                e.resize(1, 0);
                                e[0] += v.get::<i64>().unwrap();
                            }
                            _ => e.extend(v.elems::<i32>().unwrap().map(i64::from)),
                        }
                    }
                }
            }
            let mut got: BTreeMap<(u32, Vec<u8>), Vec<i64>> = BTreeMap::new();
            for (id, a) in canonical(&pool, &all).unwrap().iter() {
                for (k, v) in kv::entries(a).unwrap() {
                    let vals = match v.ty {
                        ValueType::Scalar(_) => vec![v.get::<i64>().unwrap()],
                        _ => v.elems::<i32>().unwrap().map(i64::from).collect(),
                    };
                    got.insert((id, format!("{k}").into_bytes()), vals);
                }
            }
            for v in want.values_mut() {
                v.sort_unstable();
            }
            assert_eq!(got, want, "round {round}");
        }
        sizes.sort_unstable();
        assert!(overlap && kinds.len() == 4, "{kinds:?}");
        assert!(
            sizes.contains(&0) && *sizes.last().unwrap() > 16384,
            "{sizes:?}"
        );
    }
}
