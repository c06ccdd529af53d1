//! The measured network: the latency and bandwidth matrices L and B of every ordered worker pair
//! (CMPI, seed 001 §4.1). The cost of sending `m` bytes from i to j is M(i,j) = L(i,j) +
//! m / B(i,j). Measuring fills a model, algorithms read it; neither depends on the other.
//!
//! The text form (a file given to `--net-model`, a cache entry) is
//!
//! ```text
//! # harp net model v1
//! workers 3
//! latency_s
//! 0 1.2e-4 1.1e-4
//! 1.3e-4 0 1.0e-4
//! 1.1e-4 1.0e-4 0
//! bandwidth_Bps
//! inf 2.5e7 6.2e6
//! 2.5e7 inf 2.5e7
//! 6.2e6 2.5e7 inf
//! ```
//!
//! row = sender, column = receiver; the diagonal is 0 for latency and `inf` for bandwidth.
//! Blank lines and `#` lines are ignored. An optional last section gives each worker's host
//! capacity, the most it sends or receives in all at once (bytes per second):
//!
//! ```text
//! host_Bps
//! 1e8 1e8 1e8
//! ```
//!
//! Without it a worker's intake is taken as its fastest link's (the links of a host share one
//! network interface); with it, several slow links into one worker add up to at most its host
//! capacity (pairs limited apart from their hosts, as between cloud VMs). A measurement of
//! three workers or more fills it with each worker's intake from all others at once
//! (`calibrate`); a configured model or `NetModel::with_host` may give it.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// Latency (seconds) and bandwidth (bytes per second) of every ordered pair of `workers`.
#[derive(Debug, Clone, PartialEq)]
pub struct NetModel {
    workers: usize,
    /// Row-major, `latency[i * workers + j]` from i to j.
    latency: Vec<f64>,
    /// Row-major, `bandwidth[i * workers + j]` from i to j.
    bandwidth: Vec<f64>,
    /// Each worker's host capacity (bytes per second), if known (module docs).
    host: Option<Vec<f64>>,
    /// What algorithms derived from the model ([`NetModel::derived`]).
    memo: Memo,
}

/// Results derived from a model, by key. Not part of the model's value: a clone starts empty
/// and equality ignores it.
#[derive(Default)]
struct Memo(Mutex<HashMap<MemoKey, Arc<dyn Any + Send + Sync>>>);

/// A derived result's kind and parameters.
type MemoKey = (&'static str, u64);

impl Clone for Memo {
    fn clone(&self) -> Memo {
        Memo::default()
    }
}

impl PartialEq for Memo {
    fn eq(&self, _: &Memo) -> bool {
        true
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

/// One number of a model, for its validity check (shared by [`NetModel::new`],
/// [`NetModel::with_host`] and the text parser, which adds the line).
#[derive(Clone, Copy)]
enum Entry {
    Latency(usize, usize),
    Bandwidth(usize, usize),
    Host(usize),
}

impl Entry {
    /// Why `x` cannot be this entry (off the diagonal: latencies finite and ≥ 0, bandwidths and
    /// host capacities > 0, infinity allowed for no limit), or `None`.
    fn error(self, x: f64) -> Option<String> {
        let (what, ok, want) = match self {
            Entry::Latency(i, j) => (
                format!("latency {i}->{j}"),
                x.is_finite() && x >= 0.0,
                "a finite number >= 0",
            ),
            Entry::Bandwidth(i, j) => (format!("bandwidth {i}->{j}"), x > 0.0, "a number > 0"),
            Entry::Host(i) => (
                format!("host capacity of worker {i}"),
                x > 0.0,
                "a number > 0",
            ),
        };
        (!ok).then(|| format!("net model: {what} is {x}, expected {want}"))
    }
}

impl NetModel {
    /// Every pair with the same latency and bandwidth.
    pub fn uniform(workers: usize, latency: f64, bandwidth: f64) -> NetModel {
        let mut m = NetModel {
            workers,
            latency: vec![latency; workers * workers],
            bandwidth: vec![bandwidth; workers * workers],
            host: None,
            memo: Memo::default(),
        };
        for i in 0..workers {
            m.latency[i * workers + i] = 0.0;
            m.bandwidth[i * workers + i] = f64::INFINITY;
        }
        m
    }

    /// A model from row-major matrices; fails on wrong sizes, negative or NaN latencies and
    /// non-positive or NaN bandwidths off the diagonal.
    pub fn new(workers: usize, latency: Vec<f64>, bandwidth: Vec<f64>) -> Result<NetModel> {
        let n = workers * workers;
        if latency.len() != n || bandwidth.len() != n {
            return Err(Error::config(format!(
                "net model of {workers} workers needs {n} latencies and bandwidths, got {} and {}",
                latency.len(),
                bandwidth.len()
            )));
        }
        for i in 0..workers {
            for j in (0..workers).filter(|&j| j != i) {
                let (l, b) = (latency[i * workers + j], bandwidth[i * workers + j]);
                if let Some(e) = Entry::Latency(i, j)
                    .error(l)
                    .or_else(|| Entry::Bandwidth(i, j).error(b))
                {
                    return Err(Error::config(e));
                }
            }
        }
        let mut m = NetModel {
            workers,
            latency,
            bandwidth,
            host: None,
            memo: Memo::default(),
        };
        for i in 0..workers {
            m.latency[i * workers + i] = 0.0;
            m.bandwidth[i * workers + i] = f64::INFINITY;
        }
        Ok(m)
    }

    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Seconds from `i` to `j` for an empty message.
    pub fn latency(&self, i: usize, j: usize) -> f64 {
        self.latency[i * self.workers + j]
    }

    /// Bytes per second from `i` to `j`.
    pub fn bandwidth(&self, i: usize, j: usize) -> f64 {
        self.bandwidth[i * self.workers + j]
    }

    /// The model with each worker's host capacity (bytes per second; module docs); fails on a
    /// wrong count or a capacity that is not a number > 0.
    pub fn with_host(mut self, host: Vec<f64>) -> Result<NetModel> {
        if host.len() != self.workers {
            return Err(Error::config(format!(
                "net model of {} workers needs {} host capacities, got {}",
                self.workers,
                self.workers,
                host.len()
            )));
        }
        if let Some(e) = host
            .iter()
            .enumerate()
            .find_map(|(i, &h)| Entry::Host(i).error(h))
        {
            return Err(Error::config(e));
        }
        self.host = Some(host);
        self.memo = Memo::default();
        Ok(self)
    }

    /// A model from what [`NetModel::matrices`] returns: [`NetModel::new`], then
    /// [`NetModel::with_host`] when there are host capacities.
    pub fn from_matrices(
        workers: usize,
        (latency, bandwidth, host): (Vec<f64>, Vec<f64>, Option<Vec<f64>>),
    ) -> Result<NetModel> {
        let m = NetModel::new(workers, latency, bandwidth)?;
        match host {
            Some(h) => m.with_host(h),
            None => Ok(m),
        }
    }

    /// Worker `i`'s host capacity (bytes per second), if the model has them.
    pub fn host(&self, i: usize) -> Option<f64> {
        self.host.as_ref().map(|h| h[i])
    }

    /// The row-major latency and bandwidth matrices (the arguments of [`NetModel::new`]) and the
    /// host capacities if the model has them ([`NetModel::with_host`]).
    pub fn matrices(&self) -> (Vec<f64>, Vec<f64>, Option<Vec<f64>>) {
        (
            self.latency.clone(),
            self.bandwidth.clone(),
            self.host.clone(),
        )
    }

    /// The model of the workers `ranks` (indices into this model), in that order: entry (a, b)
    /// of the result is entry (ranks[a], ranks[b]) here. A group's collectives see this.
    pub fn sub(&self, ranks: &[usize]) -> NetModel {
        let pick = |v: &[f64]| -> Vec<f64> {
            ranks
                .iter()
                .flat_map(|&i| ranks.iter().map(move |&j| v[i * self.workers + j]))
                .collect()
        };
        NetModel {
            workers: ranks.len(),
            latency: pick(&self.latency),
            bandwidth: pick(&self.bandwidth),
            host: self
                .host
                .as_ref()
                .map(|h| ranks.iter().map(|&i| h[i]).collect()),
            memo: Memo::default(),
        }
    }

    /// What `make` derives from this model (an order, a tree, a hierarchy), computed once per
    /// `key` and kept with the model, so that operations after the first do not search again.
    /// `key` names the result (kind and parameters); one key must always mean one type.
    pub fn derived<T: Any + Send + Sync>(
        &self,
        key: MemoKey,
        make: impl FnOnce(&NetModel) -> T,
    ) -> Arc<T> {
        let lock = || self.memo.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = lock().get(&key) {
            return v.clone().downcast().expect("one key, one type");
        }
        let v = Arc::new(make(self));
        lock().insert(key, v.clone());
        v
    }

    /// M(i,j) for `bytes`: the predicted seconds to send them from `i` to `j`.
    pub fn cost(&self, i: usize, j: usize, bytes: u64) -> f64 {
        if i == j {
            return 0.0;
        }
        self.latency(i, j) + bytes as f64 / self.bandwidth(i, j)
    }

    /// The text form (module docs).
    pub fn to_text(&self) -> String {
        let p = self.workers;
        let mut s = format!("# harp net model v1\nworkers {p}\nlatency_s\n");
        let row = |v: &[f64], i: usize| {
            v[i * p..(i + 1) * p]
                .iter()
                .map(|x| format!("{x:e}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        for i in 0..p {
            s += &row(&self.latency, i);
            s.push('\n');
        }
        s += "bandwidth_Bps\n";
        for i in 0..p {
            s += &row(&self.bandwidth, i);
            s.push('\n');
        }
        if let Some(h) = &self.host {
            s += "host_Bps\n";
            s += &h
                .iter()
                .map(|x| format!("{x:e}"))
                .collect::<Vec<_>>()
                .join(" ");
            s.push('\n');
        }
        s
    }

    /// Parses the text form; `file` names it in errors (with the 1-based line).
    pub fn parse(text: &str, file: &str) -> Result<NetModel> {
        let bad = |line: usize, msg: String| Error::Input {
            file: file.into(),
            line: line as u64,
            msg,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
            .peekable();
        // Past the last line: what is missing is reported at the file's last line (counted
        // only then).
        let end = || (text.lines().count().max(1), "");
        let found = |l: &str| match l {
            "" => "the end of the file".to_string(),
            l => crate::util::quote(l.as_bytes()),
        };
        let (n, first) = lines.next().unwrap_or_else(end);
        let max = crate::wire::MAX_WORKERS;
        let workers = first
            .strip_prefix("workers ")
            .and_then(|w| w.trim().parse::<u64>().ok())
            .ok_or_else(|| bad(n, format!("expected 'workers N', found {}", found(first))))?;
        let workers = usize::try_from(workers)
            .ok()
            .filter(|w| (1..=max).contains(w))
            .ok_or_else(|| bad(n, format!("workers {workers}: expected 1 to {max}")))?;
        // `entry(row, column)` says what a number is, for its check (none on the diagonal).
        let matrix = |lines: &mut std::iter::Peekable<_>,
                      name: &str,
                      rows: usize,
                      entry: &dyn Fn(usize, usize) -> Option<Entry>|
         -> Result<Vec<f64>> {
            let (n, head) = lines.next().unwrap_or_else(end);
            if head != name {
                return Err(bad(n, format!("expected '{name}', found {}", found(head))));
            }
            let mut v = Vec::with_capacity(rows.min(4096) * workers.min(4096));
            for i in 0..rows {
                let (n, row) = lines.next().unwrap_or_else(end);
                let before = v.len();
                for tok in row.split_whitespace() {
                    let x = tok.parse::<f64>().map_err(|_| {
                        bad(
                            n,
                            format!("not a number: {}", crate::util::quote(tok.as_bytes())),
                        )
                    })?;
                    let j = v.len() - before;
                    if let Some(e) = entry(i, j).and_then(|e| e.error(x)) {
                        return Err(bad(n, e));
                    }
                    v.push(x);
                    if v.len() - before > workers {
                        break;
                    }
                }
                if v.len() - before != workers {
                    return Err(bad(
                        n,
                        format!("{name}: expected a row of {workers} numbers"),
                    ));
                }
            }
            Ok(v)
        };
        let pair = |make: fn(usize, usize) -> Entry| {
            move |i: usize, j: usize| (i != j && j < workers).then(|| make(i, j))
        };
        let latency = matrix(&mut lines, "latency_s", workers, &pair(Entry::Latency))?;
        let bandwidth = matrix(
            &mut lines,
            "bandwidth_Bps",
            workers,
            &pair(Entry::Bandwidth),
        )?;
        let host = match lines.peek() {
            Some((_, "host_Bps")) => Some(matrix(&mut lines, "host_Bps", 1, &|_, j| {
                (j < workers).then_some(Entry::Host(j))
            })?),
            _ => None,
        };
        if let Some((n, extra)) = lines.next() {
            return Err(bad(
                n,
                format!(
                    "unexpected line after the matrices: {}",
                    crate::util::quote(extra.as_bytes())
                ),
            ));
        }
        NetModel::from_matrices(workers, (latency, bandwidth, host))
            .map_err(|e| bad(end().0, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip_and_cost() {
        let mut m = NetModel::uniform(3, 1e-4, 25e6);
        m.bandwidth[2] = 6.25e6; // 0 -> 2 is four times slower
        let back = NetModel::parse(&m.to_text(), "m.txt").unwrap();
        assert_eq!(back, m);
        assert_eq!(back.cost(1, 1, 1 << 20), 0.0);
        assert!((back.cost(0, 2, 6_250_000) - (1e-4 + 1.0)).abs() < 1e-12);
        assert!((back.cost(2, 0, 25_000_000) - (1e-4 + 1.0)).abs() < 1e-12);
        let sub = m.sub(&[2, 0]);
        assert_eq!(sub.workers(), 2);
        assert_eq!(sub.bandwidth(1, 0), 6.25e6, "0 -> 2 is group 1 -> 0");
        assert_eq!(sub.bandwidth(0, 1), 25e6);
        assert_eq!(sub.latency(0, 0), 0.0);
    }

    #[test]
    fn host_capacities_are_optional_kept_and_checked() {
        let m = NetModel::uniform(3, 1e-4, 25e6);
        assert_eq!(m.host(1), None);
        assert!(!m.to_text().contains("host_Bps"));
        let h = m.with_host(vec![1e8, 5e7, 1e8]).unwrap();
        let back = NetModel::parse(&h.to_text(), "m.txt").unwrap();
        assert_eq!(back, h);
        assert_eq!(back.host(1), Some(5e7));
        assert_eq!(back.sub(&[2, 1]).host(1), Some(5e7));
        let bad = |text: &str| NetModel::parse(text, "m.txt").unwrap_err().to_string();
        let good = h.to_text();
        let e = bad(&good.replace("1e8 5e7 1e8", "1e8 0 1e8"));
        assert!(
            e.contains("m.txt:12: net model: host capacity of worker 1 is 0"),
            "{e}"
        );
        let e = bad(&good.replace("1e8 5e7 1e8", "1e8 NaN 1e8"));
        assert!(e.contains("m.txt:12:") && e.contains("is NaN"), "{e}");
        let e = NetModel::uniform(2, 1e-4, 1e6)
            .with_host(vec![1e6, -1.0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("host capacity of worker 1 is -1"), "{e}");
        let e = bad(&good.replace("1e8 5e7 1e8", "1e8 5e7"));
        assert!(e.contains("host_Bps: expected a row of 3 numbers"), "{e}");
        let e = bad(&format!("{good}1 2 3\n"));
        assert!(e.contains("unexpected line after the matrices"), "{e}");
        let e = NetModel::uniform(2, 1e-4, 1e6)
            .with_host(vec![1e6])
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs 2 host capacities, got 1"), "{e}");
    }

    #[test]
    fn derived_results_are_made_once_per_key_and_not_cloned() {
        let m = NetModel::uniform(3, 1e-4, 25e6);
        let mut calls = 0;
        let a = m.derived(("order", 0), |_| {
            calls += 1;
            vec![0usize, 1, 2]
        });
        let b = m.derived(("order", 0), |_| {
            calls += 1;
            vec![9usize]
        });
        assert_eq!((calls, &*a, &*b), (1, &vec![0, 1, 2], &vec![0, 1, 2]));
        let other = m.derived(("order", 1), |_| vec![2usize, 1, 0]);
        assert_eq!(*other, vec![2, 1, 0]);
        let c = m.clone();
        assert_eq!(c, m);
        assert_eq!(*c.derived(("order", 0), |_| vec![7usize]), vec![7]);
    }

    #[test]
    fn bad_text_names_the_line() {
        let good = NetModel::uniform(2, 1e-4, 1e6).to_text();
        let cut: String = good.lines().take(4).map(|l| format!("{l}\n")).collect();
        // (text, what the error must end with: file, line and message)
        let cases = [
            (good.replace("1e6", "x"), "m.txt:7: not a number: 'x'"),
            (
                good.replacen("0e0 1e-4\n", "0e0\n", 1),
                "m.txt:4: latency_s: expected a row of 2 numbers",
            ),
            (
                good.replacen("0e0 1e-4\n", "0e0 1e-4 5\n", 1),
                "m.txt:4: latency_s: expected a row of 2 numbers",
            ),
            (
                String::new(),
                "m.txt:1: expected 'workers N', found the end of the file",
            ),
            (
                "# x\nworkers 2\n".into(),
                "m.txt:2: expected 'latency_s', found the end of the file",
            ),
            (cut, "m.txt:4: latency_s: expected a row of 2 numbers"),
            (
                "workers 0\n".into(),
                "m.txt:1: workers 0: expected 1 to 16777216",
            ),
            (
                "workers x\n".into(),
                "m.txt:1: expected 'workers N', found 'workers x'",
            ),
            (
                good.replace("1e-4", "-1e0"),
                "m.txt:4: net model: latency 0->1 is -1, expected a finite number >= 0",
            ),
            (
                good.replacen("1e-4", "inf", 1),
                "m.txt:4: net model: latency 0->1 is inf, expected a finite number >= 0",
            ),
            (
                good.replacen("1e6", "0", 1),
                "m.txt:7: net model: bandwidth 0->1 is 0, expected a number > 0",
            ),
        ];
        for (text, want) in cases {
            let e = NetModel::parse(&text, "m.txt").unwrap_err().to_string();
            assert!(e.ends_with(want), "{e}\nwanted: {want}");
        }
        let inf = NetModel::parse(&good.replacen("1e6", "inf", 1), "m.txt");
        assert!(inf.is_ok(), "an infinite bandwidth is no limit: {inf:?}");
    }
}
