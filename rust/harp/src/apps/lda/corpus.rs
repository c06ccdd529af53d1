//! Documents: `doc_id word word …` lines, parsed into a worker's share, and a corpus generated
//! from known topics.

use std::collections::HashMap;
use std::io::Write;

use crate::error::{Error, Result};
use crate::io::lines::for_each_line_of_share;
use crate::storage::{FileInfo, Storage};
use crate::util::quote;
use crate::util::rng::Rng;

named_enum!(
    /// What the words of a line are.
    Words, "word kind", {
        /// Any tokens without spaces; the vocabulary is the sorted set of distinct tokens.
        #[default]
        Tokens => "tokens",
        /// Integer ids from 0 to [`MAX_WORD_ID`]; the vocabulary is 0 to the largest id.
        Ids => "ids",
    }
);

/// The largest word id `--words ids` accepts.
pub const MAX_WORD_ID: u32 = (1 << 31) - 2;

/// A worker's documents: ids, and word ids one document after the other.
#[derive(Debug, Default, Clone)]
pub struct Share {
    pub ids: Vec<Vec<u8>>,
    /// Document d's words are `words[start[d]..start[d + 1]]`.
    pub start: Vec<usize>,
    /// Word ids: global ids with `--words ids`, else indices into `tokens` until
    /// [`Share::renumber`].
    pub words: Vec<u32>,
    /// With `--words tokens`: this share's distinct tokens, in the order first seen.
    pub tokens: Vec<Box<[u8]>>,
    index: HashMap<Box<[u8]>, u32>,
}

impl Share {
    pub fn new() -> Share {
        Share {
            start: vec![0],
            ..Share::default()
        }
    }

    pub fn docs(&self) -> usize {
        self.ids.len()
    }

    pub fn doc(&self, d: usize) -> &[u32] {
        &self.words[self.start[d]..self.start[d + 1]]
    }

    /// Parses one line; a blank line is skipped, a line with an id alone is an empty document.
    pub fn parse_line(&mut self, line: &[u8], words: Words) -> Result<(), String> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let mut fields = line
            .split(|b| *b == b' ' || *b == b'\t')
            .filter(|f| !f.is_empty());
        let Some(id) = fields.next() else {
            return Ok(());
        };
        for f in fields {
            let w = match words {
                Words::Ids => parse_id(f)?,
                Words::Tokens => match self.index.get(f) {
                    Some(&w) => w,
                    None => {
                        let w = self.tokens.len() as u32;
                        self.tokens.push(f.into());
                        self.index.insert(f.into(), w);
                        w
                    }
                },
            };
            self.words.push(w);
        }
        if self.words.len() >= u32::MAX as usize {
            return Err(format!(
                "more than {} words on one worker: use more workers",
                u32::MAX - 1
            ));
        }
        self.ids.push(id.to_vec());
        self.start.push(self.words.len());
        Ok(())
    }

    /// Replaces the local token numbers by positions in `vocab` (sorted, holding every token
    /// of this share).
    pub fn renumber(&mut self, vocab: &[Box<[u8]>]) -> Result<()> {
        let mut to = Vec::with_capacity(self.tokens.len());
        for t in &self.tokens {
            let i = vocab
                .binary_search(t)
                .map_err(|_| Error::data(format!("token {} is not in the vocabulary", quote(t))))?;
            to.push(i as u32);
        }
        for w in &mut self.words {
            *w = to[*w as usize];
        }
        self.tokens = Vec::new();
        self.index = HashMap::new();
        Ok(())
    }

    /// This share's distinct tokens, sorted, one per line (for the vocabulary exchange).
    pub fn sorted_tokens(&self) -> Vec<u8> {
        let mut t: Vec<&[u8]> = self.tokens.iter().map(|t| &t[..]).collect();
        t.sort_unstable();
        let mut out = Vec::with_capacity(t.iter().map(|x| x.len() + 1).sum());
        for x in t {
            out.extend_from_slice(x);
            out.push(b'\n');
        }
        out
    }
}

fn parse_id(f: &[u8]) -> Result<u32, String> {
    std::str::from_utf8(f)
        .ok()
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|&w| w <= MAX_WORD_ID)
        .ok_or_else(|| {
            format!(
                "bad word id {}: expected an integer from 0 to {MAX_WORD_ID} (--words ids)",
                quote(f)
            )
        })
}

/// The documents of the lines of `files` that belong to `rank` of `workers` (Hadoop-style line
/// shares); a bad line is an error naming its file and line.
pub fn load_share(
    storage: &dyn Storage,
    files: &[FileInfo],
    rank: usize,
    workers: usize,
    words: Words,
) -> Result<Share> {
    let mut out = Share::new();
    for_each_line_of_share(storage, files, rank, workers, |line| {
        out.parse_line(line, words)
    })?;
    Ok(out)
}

/// The sorted union of the workers' [`Share::sorted_tokens`].
pub fn merge_vocabulary<'a>(lists: impl Iterator<Item = &'a [u8]>) -> Vec<Box<[u8]>> {
    let mut all: Vec<Box<[u8]>> = Vec::new();
    for l in lists {
        all.extend(
            l.split(|b| *b == b'\n')
                .filter(|t| !t.is_empty())
                .map(Box::from),
        );
    }
    all.sort_unstable();
    all.dedup();
    all
}

/// A corpus generated from known topics (`harp gen corpus`).
#[derive(Debug, Clone)]
pub struct Generate {
    pub docs: usize,
    pub vocabulary: usize,
    pub topics: usize,
    /// Mean document length (lengths uniform from half to 1.5 times it).
    pub length: usize,
    pub seed: u64,
    /// Words as integer ids instead of `wN` tokens.
    pub ids: bool,
}

impl Generate {
    /// The true topic whose band holds word `w`: topic k draws 90 % of its words from
    /// `band(k)`, a Zipf law over its `V/K` words, and 10 % uniformly from all of them.
    pub fn band_of(&self, w: usize) -> usize {
        (w * self.topics / self.vocabulary).min(self.topics - 1)
    }

    fn band(&self, k: usize) -> (usize, usize) {
        (
            k * self.vocabulary / self.topics,
            (k + 1) * self.vocabulary / self.topics,
        )
    }

    pub fn validate(&self) -> Result<()> {
        if self.topics == 0 || self.vocabulary < self.topics || self.length == 0 {
            return Err(Error::config(
                "gen corpus: --topics and --length must be at least 1, --vocabulary at least --topics",
            ));
        }
        Ok(())
    }

    /// Writes the corpus, one `d<N> word …` line per document (a document's 1 to 3 topics
    /// with random weights); returns the number of tokens.
    pub fn write(&self, out: &mut impl Write) -> Result<u64> {
        self.validate()?;
        let mut rng = Rng::new(self.seed);
        // Cumulative Zipf weights of each band's words.
        let cum: Vec<Vec<f64>> = (0..self.topics)
            .map(|k| {
                let (a, b) = self.band(k);
                let mut c = 0.0;
                (a..b)
                    .map(|i| {
                        c += 1.0 / (i - a + 1) as f64;
                        c
                    })
                    .collect()
            })
            .collect();
        let mut tokens = 0u64;
        let mut line = Vec::new();
        for d in 0..self.docs {
            let n = 1 + rng.below(3).min(self.topics - 1);
            let mut topics: Vec<usize> = Vec::with_capacity(n);
            while topics.len() < n {
                let t = rng.below(self.topics);
                if !topics.contains(&t) {
                    topics.push(t);
                }
            }
            let weights: Vec<f64> = (0..n).map(|_| rng.uniform(0.2, 1.0)).collect();
            let total: f64 = weights.iter().sum();
            let len = self.length / 2 + rng.below(self.length + 1);
            line.clear();
            write!(line, "d{d}").expect("memory");
            for _ in 0..len {
                let mut x = rng.next_f64() * total;
                let mut t = topics[n - 1];
                for (i, &wt) in weights.iter().enumerate() {
                    if x < wt {
                        t = topics[i];
                        break;
                    }
                    x -= wt;
                }
                let w = if rng.next_f64() < 0.9 {
                    let c = &cum[t];
                    let u = rng.next_f64() * c[c.len() - 1];
                    self.band(t).0 + c.partition_point(|&v| v <= u).min(c.len() - 1)
                } else {
                    rng.below(self.vocabulary)
                };
                if self.ids {
                    write!(line, " {w}").expect("memory");
                } else {
                    write!(line, " w{w}").expect("memory");
                }
            }
            line.push(b'\n');
            tokens += len as u64;
            out.write_all(&line)
                .map_err(|e| Error::io("gen corpus: writing", e))?;
        }
        Ok(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_documents() {
        let mut s = Share::new();
        for l in ["d1 b a b\r", "", "  ", "d2\ta", "d3"] {
            s.parse_line(l.as_bytes(), Words::Tokens).unwrap();
        }
        assert_eq!(s.docs(), 3);
        assert_eq!(s.ids, vec![b"d1".to_vec(), b"d2".to_vec(), b"d3".to_vec()]);
        assert_eq!(s.doc(0), &[0, 1, 0]);
        assert_eq!(s.doc(1), &[1]);
        assert!(s.doc(2).is_empty());
        let vocab = merge_vocabulary([&s.sorted_tokens()[..], b"c\n"].into_iter());
        assert_eq!(vocab.len(), 3);
        s.renumber(&vocab).unwrap();
        assert_eq!(s.doc(0), &[1, 0, 1], "a = 0, b = 1, c = 2");

        let mut s = Share::new();
        s.parse_line(b"x 3 0 2147483646", Words::Ids).unwrap();
        assert_eq!(s.doc(0), &[3, 0, MAX_WORD_ID]);
        for bad in ["-1", "w3", "2147483647", "1.0", "+1"] {
            let e = s
                .parse_line(format!("y 1 {bad}").as_bytes(), Words::Ids)
                .unwrap_err();
            assert!(e.contains(&format!("bad word id '{bad}'")), "{e}");
        }
    }

    #[test]
    fn the_generated_corpus_is_reproducible_and_follows_its_bands() {
        let g = Generate {
            docs: 50,
            vocabulary: 100,
            topics: 5,
            length: 40,
            seed: 4,
            ids: true,
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let n = g.write(&mut a).unwrap();
        g.write(&mut b).unwrap();
        assert_eq!(a, b);
        let mut s = Share::new();
        for l in a.split(|c| *c == b'\n') {
            s.parse_line(l, Words::Ids).unwrap();
        }
        assert_eq!((s.docs(), s.words.len() as u64), (50, n));
        assert!(s.words.iter().all(|&w| w < 100));
        // Most of a document's words come from the bands of at most 3 topics.
        let mut in_top3 = 0;
        for d in 0..s.docs() {
            let mut c = [0usize; 5];
            for &w in s.doc(d) {
                c[g.band_of(w as usize)] += 1;
            }
            c.sort_unstable();
            in_top3 += c[2] + c[3] + c[4];
        }
        assert!(in_top3 as f64 > 0.9 * n as f64, "{in_top3} of {n}");
    }
}
