//! Dividing an input across workers.

/// One input split with Hadoop `FileSplit` semantics: `length` bytes of the file `path` from
/// byte `start`. A text split owns every line that *starts* inside it (the first split of a file
/// starts at 0); a split of fixed-size records owns every record that starts inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ByteRange {
    pub path: String,
    pub start: u64,
    pub length: u64,
}

impl ByteRange {
    pub fn new(path: impl Into<String>, start: u64, length: u64) -> ByteRange {
        ByteRange {
            path: path.into(),
            start,
            length,
        }
    }
}

/// The range `[start, end)` of `total` units (bytes or records) owned by `rank` of `workers`.
pub fn share(total: u64, rank: usize, workers: usize) -> (u64, u64) {
    let cut = |r: usize| (total as u128 * r as u128 / workers as u128) as u64;
    (cut(rank), cut(rank + 1))
}

/// The share of `rank` of `workers` in files of `sizes` units, concatenated in order: for each
/// file its range `[s, e)` in its own units (empty, `s >= e`, when it holds none of the share).
pub fn spread(sizes: &[u64], rank: usize, workers: usize) -> Vec<(u64, u64)> {
    let total: u64 = sizes.iter().sum();
    let (gs, ge) = share(total, rank, workers);
    let mut file_start = 0u64;
    sizes
        .iter()
        .map(|&size| {
            let file_end = file_start + size;
            let range = (
                gs.max(file_start) - file_start,
                ge.min(file_end).saturating_sub(file_start),
            );
            file_start = file_end;
            range
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unit of every file belongs to exactly one worker, in order.
    #[test]
    fn shares_cover_every_unit_once() {
        for sizes in [vec![0u64], vec![5, 0, 1, 13, 2], vec![1000], vec![0, 0, 3]] {
            for workers in 1..=9 {
                let mut next = vec![0u64; sizes.len()];
                for rank in 0..workers {
                    for (f, (s, e)) in spread(&sizes, rank, workers).into_iter().enumerate() {
                        if s < e {
                            assert_eq!(s, next[f], "{sizes:?} w={workers} r={rank}");
                            next[f] = e;
                        }
                    }
                }
                assert_eq!(next, sizes, "w={workers}");
            }
        }
        let (a, b) = share(10, 2, 3);
        assert_eq!((a, b), (6, 10));
        assert_eq!(share(u64::MAX, 1, 2), (u64::MAX / 2, u64::MAX));
    }
}
