//! WordCount, the MapReduce example, as a Map-Collective job on a key-value table.
//!
//! Each worker reads its Hadoop-style share of the input's lines ([`crate::io`]), splits them
//! into tokens exactly like Hadoop's `WordCount` (`java.util.StringTokenizer` with its default
//! delimiters: space, `\t`, `\n`, `\r`, `\f`; nothing else), on bytes, and counts them with `T`
//! threads, each into its own [`KvTable`] (str → i64, sum) whose keys are spread over `N`
//! partition ids by the stable key hash. The per-thread tables are merged locally (Twister's
//! shuffle reduction: each word leaves the worker once, with its local count), encoded into a
//! [`Table`] of key-value partitions, and ONE regroup moves partition `i` to worker `i mod W`,
//! combining the counts of equal words on the way in. Each worker then owns every count of its
//! words and writes them, sorted by word, as `word<TAB>count` lines.

use std::collections::HashMap;

use crate::data::kv::{self, Key, KeyType, KvTable, ValueType};
use crate::data::{Array, Combiner, DType, Partitioner, Table};
use crate::error::{Error, Result};
use crate::io::{read_lines, spread, LineError};
use crate::storage::Storage;
use crate::worker::Worker;
use crate::Collectives;
use crate::Opts;

/// The delimiters of `java.util.StringTokenizer`'s default: `" \t\n\r\f"`.
pub fn is_delimiter(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0c)
}

/// The tokens of `text` (runs of non-delimiter bytes), in order.
pub fn tokens(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(|&b| is_delimiter(b)).filter(|t| !t.is_empty())
}

/// The options of a run.
#[derive(Debug, Clone)]
pub struct Options {
    /// A file or a directory of files.
    pub input: String,
    /// Counting threads per worker.
    pub threads: usize,
    /// Partition ids the words are spread over (partition `i` ends on worker `i mod W`).
    pub partitions: u32,
}

/// What a worker holds after the regroup.
pub struct Counts {
    /// This worker's key-value partitions (str → i64).
    pub table: Table,
    /// Distinct words over all workers.
    pub words: u64,
    /// Tokens over all workers.
    pub tokens: u64,
    /// Seconds this worker spent reading, counting and merging its threads' tables.
    pub count_s: f64,
    /// Seconds this worker spent encoding its table and in the regroup.
    pub regroup_s: f64,
}

/// A new counting table: str keys, i64 counts, summed.
fn counter(partitions: u32) -> Result<KvTable> {
    KvTable::new(
        KeyType::Str,
        ValueType::Scalar(DType::I64),
        Combiner::Sum,
        partitions,
    )
}

/// Counts the tokens of `text` into `t`; returns how many there were.
fn count_into(t: &mut KvTable, text: &[u8]) -> Result<u64> {
    let mut n = 0;
    for tok in tokens(text) {
        t.add_scalar(tok, 1i64)?;
        n += 1;
    }
    Ok(n)
}

/// `text` cut into at most `n` pieces at delimiters (no token is cut).
fn pieces(text: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(n);
    let mut at = 0;
    for i in 1..=n {
        let mut end = (text.len() * i / n).max(at);
        while end < text.len() && !is_delimiter(text[end]) {
            end += 1;
        }
        if i == n {
            end = text.len();
        }
        if end > at {
            out.push(&text[at..end]);
        }
        at = end;
    }
    out
}

/// Counts the words of the lines of `input` that rank `rank` of `workers` owns, with `threads`
/// threads each counting into its own table, then merges those tables (rayon). Returns the
/// merged table and the number of tokens. Memory: one block of input
/// ([`crate::io::lines::STREAM_BLOCK`]) plus the tables.
pub fn count_share(
    storage: &dyn Storage,
    input: &str,
    rank: usize,
    workers: usize,
    threads: usize,
    partitions: u32,
) -> Result<(KvTable, u64)> {
    use rayon::prelude::*;
    let files = storage.list_input(input, false)?;
    let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
    let threads = threads.max(1);
    let mut tables = (0..threads)
        .map(|_| counter(partitions))
        .collect::<Result<Vec<_>>>()?;
    let mut tokens = 0u64;
    let mut failed: Option<Error> = None;
    for (f, (s, e)) in files.iter().zip(spread(&sizes, rank, workers)) {
        let block = crate::io::lines::STREAM_BLOCK;
        let r = read_lines(storage, f, s, e, block, |lines, _| {
            let parts = pieces(lines, threads);
            let counted: Result<Vec<u64>> = tables
                .par_iter_mut()
                .zip(parts.par_iter())
                .map(|(t, text)| count_into(t, text))
                .collect();
            match counted {
                Ok(c) => {
                    tokens += c.iter().sum::<u64>();
                    Ok(())
                }
                Err(err) => {
                    let msg = err.to_string();
                    failed = Some(err);
                    Err(LineError { line_start: 0, msg })
                }
            }
        });
        if let Some(err) = failed.take() {
            return Err(err); // not about a line
        }
        r?;
    }
    let merged = KvTable::aggregate(tables)?.expect("at least one thread");
    Ok((merged, tokens))
}

/// The whole job on worker `w`: counts its share, merges the threads' tables, ONE regroup of
/// the key-value table (partition `i` to worker `i mod W`, counts of equal words summed), and
/// the global totals. A failure reading the input on any worker fails every worker at once.
pub fn run(w: &Worker, storage: &dyn Storage, o: &Options) -> Result<Counts> {
    if o.threads == 0 || o.partitions == 0 {
        return Err(Error::config(
            "--threads and --partitions must be at least 1",
        ));
    }
    let pool = w.pool().clone();
    let start = std::time::Instant::now();
    let mut count_s = 0.0;
    let counted = (|| {
        let (local, tokens) = count_share(
            storage,
            &o.input,
            w.rank(),
            w.size(),
            o.threads,
            o.partitions,
        )?;
        count_s = start.elapsed().as_secs_f64();
        Ok((local.into_table(&pool)?, tokens))
    })();
    let (mut table, tokens) = crate::worker::agree_on(w, "wordcount-input", counted)?;
    w.regroup("wordcount", &mut table, Some(&Partitioner::Modulo))?;
    let regroup_s = start.elapsed().as_secs_f64() - count_s;
    let mut words = 0u64;
    for (_, a) in table.iter() {
        words += kv::entries(a)?.count() as u64;
    }
    let mut totals = Table::new(Combiner::Sum);
    totals.put(0, Array::from_slice(&pool, &[words as i64, tokens as i64]));
    w.allreduce(
        "wordcount-totals",
        &mut totals,
        Opts::default().algorithm(crate::collective::AllreduceAlgorithm::BidirectionalExchange),
    )?;
    let t = totals.get(0).expect("totals").as_slice::<i64>()?;
    Ok(Counts {
        table,
        words: t[0] as u64,
        tokens: t[1] as u64,
        count_s,
        regroup_s,
    })
}

/// The `word<TAB>count\n` lines of every entry of `table`, sorted by word (bytewise, as
/// Hadoop sorts `Text` keys within a part); words are written verbatim.
pub fn format_counts(table: &Table) -> Result<Vec<u8>> {
    let mut all: Vec<(&[u8], i64)> = Vec::new();
    for (_, a) in table.iter() {
        for (k, v) in kv::entries(a)? {
            let Key::Str(word) = k else {
                return Err(Error::data("word counts have str keys"));
            };
            all.push((word, v.get::<i64>()?));
        }
    }
    all.sort_unstable_by(|x, y| x.0.cmp(y.0));
    let mut out = Vec::with_capacity(all.iter().map(|(w, _)| w.len() + 12).sum());
    for (word, n) in all {
        out.extend_from_slice(word);
        out.push(b'\t');
        out.extend_from_slice(n.to_string().as_bytes());
        out.push(b'\n');
    }
    Ok(out)
}

/// The sequential reference: every token of every file of `input`, counted in one hash map
/// (whole files, no splits, no threads, no key-value tables).
pub fn reference(storage: &dyn Storage, input: &str) -> Result<HashMap<Vec<u8>, u64>> {
    let mut counts = HashMap::new();
    for f in storage.list_input(input, false)? {
        let bytes = storage.read_all(&f.path)?;
        let mut word = Vec::new();
        for &b in bytes.iter().chain(std::iter::once(&b' ')) {
            if is_delimiter(b) {
                if !word.is_empty() {
                    *counts.entry(std::mem::take(&mut word)).or_insert(0) += 1;
                }
            } else {
                word.push(b);
            }
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStorage;

    #[test]
    fn tokens_split_only_at_the_five_delimiters() {
        let t: Vec<&[u8]> = tokens(b" a\tb\x0bc\r\n\x0cd,e  \xff\xfe\x00x\r").collect();
        assert_eq!(t, vec![&b"a"[..], b"b\x0bc", b"d,e", b"\xff\xfe\x00x"]);
        assert_eq!(tokens(b"").count(), 0);
        assert_eq!(tokens(b" \t\r\n\x0c").count(), 0);
        // Non-breaking space (U+00A0) and vertical tab are not delimiters.
        assert_eq!(tokens("a\u{a0}b".as_bytes()).count(), 1);
    }

    #[test]
    fn pieces_never_cut_a_token() {
        let text = b"alpha beta\tgamma\ndelta  epsilon zeta eta theta";
        for n in 1..12 {
            let p = pieces(text, n);
            assert!(p.len() <= n);
            assert_eq!(p.concat(), text.to_vec(), "{n}");
            let joined: Vec<&[u8]> = p.iter().flat_map(|x| tokens(x)).collect();
            assert_eq!(joined, tokens(text).collect::<Vec<_>>(), "{n}");
        }
        assert!(pieces(b"", 3).is_empty());
    }

    /// Every rank's share, with several threads, merged, equals the sequential reference; lines
    /// that cross the cut between two ranks are counted once.
    #[test]
    fn shares_add_up_to_the_reference() {
        let d = std::env::temp_dir().join(format!("harp-wc-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let mut text = Vec::new();
        for i in 0..3000u64 {
            let w = crate::util::splitmix64(i) % 97;
            text.extend_from_slice(format!("w{w} x{} ", i % 5).as_bytes());
            if i % 7 == 0 {
                text.extend_from_slice(b"\r\n\xff\xfe\t");
            }
        }
        std::fs::write(d.join("a.txt"), &text).unwrap();
        std::fs::write(d.join("b.txt"), b"one two\ntwo").unwrap();
        std::fs::write(d.join("_hidden"), b"never counted").unwrap();
        let st = LocalStorage;
        let input = d.to_string_lossy().into_owned();
        let want = reference(&st, &input).unwrap();
        assert!(!want.contains_key(&b"never"[..]));
        for workers in 1..=4 {
            let mut got: HashMap<Vec<u8>, u64> = HashMap::new();
            let mut total = 0;
            for rank in 0..workers {
                let (t, n) = count_share(&st, &input, rank, workers, 3, 5).unwrap();
                total += n;
                let pool = crate::Pool::default();
                for (_, a) in t.into_table(&pool).unwrap().iter() {
                    for (k, v) in kv::entries(a).unwrap() {
                        let Key::Str(k) = k else { unreachable!() };
                        *got.entry(k.to_vec()).or_default() += v.get::<i64>().unwrap() as u64;
                    }
                }
            }
            assert_eq!(got, want, "workers {workers}");
            assert_eq!(total, want.values().sum::<u64>());
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
