//! Dense vectors cut into contiguous blocks, one block per worker in rank order (the row blocks
//! of MDS, the vertex blocks of the graph layout), and the collectives that apps built on them
//! use: every block gathered everywhere, a few sums reduced everywhere.
//!
//! A gathered block is untrusted input from the network: its length is checked against the
//! length its sender announced (from [`allgather_counts`]) before anything is copied, and a
//! mismatch is an [`Error::Protocol`] naming the block, never a panic.

use crate::collective::{AllgatherAlgorithm, AllreduceAlgorithm};
use crate::data::array::Elem;
use crate::data::{Array, Combiner, Table};
use crate::error::{Error, Result};
use crate::worker::Worker;
use crate::Collectives;
use crate::Opts;

/// Collective: every worker's `mine`, as one count per rank (an allreduce of a vector with one
/// slot per rank; bit-exact for counts below 2^53).
pub fn allgather_counts(w: &Worker, label: &str, mine: u64) -> Result<Vec<u64>> {
    let mut v = vec![0i64; w.size()];
    v[w.rank()] = i64::try_from(mine)
        .map_err(|_| Error::config(format!("{label}: count {mine} is too large")))?;
    let mut t = Table::new(Combiner::Sum);
    t.put(0, Array::from_slice(w.pool(), &v));
    w.allreduce(
        label,
        &mut t,
        Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
    )?;
    let got = t.get(0).expect("counts").as_slice::<i64>()?;
    if got.len() != w.size() || got.iter().any(|&c| c < 0) {
        return Err(Error::Protocol(format!(
            "{label}: expected {} non-negative counts, got {:?}",
            w.size(),
            &got[..got.len().min(8)]
        )));
    }
    Ok(got.iter().map(|&c| c as u64).collect())
}

/// Collective: the concatenation, in rank order, of every worker's block (`mine` here);
/// `lens[r]` is the number of elements rank `r` contributes. The blocks travel as one partition
/// per rank (id = rank) through the ring allgather.
pub fn allgather_blocks<T: Elem>(
    w: &Worker,
    label: &str,
    mine: &[T],
    lens: &[u64],
) -> Result<Vec<T>> {
    debug_assert_eq!(lens.len(), w.size());
    if lens.get(w.rank()) != Some(&(mine.len() as u64)) {
        return Err(Error::config(format!(
            "{label}: this worker's block has {} elements, {} announced",
            mine.len(),
            lens.get(w.rank()).copied().unwrap_or(0)
        )));
    }
    let total: u64 = lens.iter().sum();
    let mut t = Table::new(Combiner::Reject);
    t.put(w.rank() as u32, Array::from_slice(w.pool(), mine));
    w.allgather(
        label,
        &mut t,
        Opts::default().algorithm(AllgatherAlgorithm::Ring),
    )?;
    let mut out = Vec::new();
    out.try_reserve_exact(total as usize)
        .map_err(|e| Error::config(format!("{label}: cannot hold {total} gathered values: {e}")))?;
    for (r, &len) in lens.iter().enumerate() {
        match t.get(r as u32) {
            Some(a) => {
                let v = a.as_slice::<T>().map_err(|e| {
                    Error::Protocol(format!("{label}: block of rank {r} (partition {r}): {e}"))
                })?;
                if v.len() as u64 != len {
                    return Err(Error::Protocol(format!(
                        "{label}: block of rank {r} (partition {r}) has {} elements, {len} \
                         announced",
                        v.len()
                    )));
                }
                out.extend_from_slice(v);
            }
            None if len == 0 => {}
            None => {
                return Err(Error::Protocol(format!(
                    "{label}: the block of rank {r} (partition {r}, {len} elements) is missing"
                )))
            }
        }
    }
    if t.len() > w.size() {
        return Err(Error::Protocol(format!(
            "{label}: {} partitions gathered from {} workers",
            t.len(),
            w.size()
        )));
    }
    Ok(out)
}

/// Collective: the element-wise sums over all workers of `vals` (the same length everywhere),
/// bit-identical on every worker.
pub fn allreduce_sum(w: &Worker, label: &str, vals: &[f64]) -> Result<Vec<f64>> {
    let mut t = Table::new(Combiner::Sum);
    t.put(0, Array::from_slice(w.pool(), vals));
    w.allreduce(label, &mut t, Opts::default())?;
    let got = t.get(0).expect("sums").as_slice::<f64>()?;
    if got.len() != vals.len() {
        return Err(Error::Protocol(format!(
            "{label}: {} sums received, {} expected",
            got.len(),
            vals.len()
        )));
    }
    Ok(got.to_vec())
}

/// The offsets of blocks of lengths `lens`: `offsets[r]..offsets[r + 1]` is rank `r`'s range.
pub fn offsets(lens: &[u64]) -> Vec<usize> {
    let mut o = Vec::with_capacity(lens.len() + 1);
    o.push(0usize);
    for &l in lens {
        o.push(o.last().unwrap() + l as usize);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    /// Blocks of uneven lengths (an empty one included) come back concatenated in rank order on
    /// every worker, for 1..=4 workers.
    #[test]
    fn blocks_are_gathered_in_rank_order() {
        for p in 1..=4usize {
            let workers = Worker::in_process(p, Config::default()).unwrap();
            let handles: Vec<_> = workers
                .into_iter()
                .map(|w| {
                    std::thread::spawn(move || {
                        let r = w.rank();
                        let len = (r * 3) % 4; // 0, 3, 2, 1
                        let mine: Vec<f64> = (0..len).map(|i| (r * 10 + i) as f64).collect();
                        let lens = allgather_counts(&w, "lens", mine.len() as u64).unwrap();
                        let all = allgather_blocks(&w, "blocks", &mine, &lens).unwrap();
                        let sums = allreduce_sum(&w, "sum", &[1.0, r as f64]).unwrap();
                        w.close();
                        (lens, all, sums)
                    })
                })
                .collect();
            let want_lens: Vec<u64> = (0..p).map(|r| ((r * 3) % 4) as u64).collect();
            let want: Vec<f64> = (0..p)
                .flat_map(|r| (0..(r * 3) % 4).map(move |i| (r * 10 + i) as f64))
                .collect();
            for h in handles {
                let (lens, all, sums) = h.join().unwrap();
                assert_eq!(lens, want_lens);
                assert_eq!(all, want);
                assert_eq!(sums, vec![p as f64, (0..p).sum::<usize>() as f64]);
            }
        }
        assert_eq!(offsets(&[2, 0, 3]), vec![0, 2, 2, 5]);
    }

    /// A block whose length differs from what the receiver expects is a protocol error naming
    /// the sender's rank and partition, not a panic or a short result.
    #[test]
    fn a_block_of_the_wrong_length_is_refused() {
        let workers = Worker::in_process(2, Config::default()).unwrap();
        let handles: Vec<_> = workers
            .into_iter()
            .map(|w| {
                std::thread::spawn(move || {
                    // Rank 1 sends 3 values; rank 0 was told 5.
                    let (mine, lens) = if w.rank() == 0 {
                        (vec![1.0], vec![1u64, 5])
                    } else {
                        (vec![2.0; 3], vec![1u64, 3])
                    };
                    let r = allgather_blocks(&w, "blocks", &mine, &lens).map(|v| v.len());
                    w.close();
                    r
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let e = results[0].as_ref().unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e}");
        assert!(
            e.to_string()
                .contains("block of rank 1 (partition 1) has 3 elements, 5 announced"),
            "{e}"
        );
        assert_eq!(results[1].as_ref().ok(), Some(&4));
        // A worker's own block must match its announced length.
        let w = Worker::in_process(1, Config::default()).unwrap().remove(0);
        let e = allgather_blocks(&w, "own", &[1.0, 2.0], &[3]).unwrap_err();
        assert!(e.to_string().contains("has 2 elements, 3 announced"), "{e}");
        w.close();
    }
}
