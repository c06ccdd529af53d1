//! Cluster description: the hosts file (`host:port` per line in rank order, optionally followed
//! by the host's rack name, e.g. `10.0.0.5:7700 /rack2` as YARN names racks; a line starting with
//! `#rack` starts a new rack for the lines without a name; other `#` lines and blank lines are
//! comments) and the rack-aware orders used by the pipelined chain.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct Topology {
    /// `hosts[r]` is rank r's listening address as written.
    pub hosts: Vec<String>,
    /// `rack[r]` is rank r's rack index (0 when the file names no racks).
    pub rack: Vec<usize>,
}

impl Topology {
    /// All ranks in one rack.
    pub fn flat(hosts: Vec<String>) -> Topology {
        let rack = vec![0; hosts.len()];
        Topology { hosts, rack }
    }

    /// `p` made-up hosts (`h0:1`, `h1:1`, …) in one rack, for tests.
    #[cfg(test)]
    pub(crate) fn of_size(p: usize) -> Topology {
        Topology::flat((0..p).map(|i| format!("h{i}:1")).collect())
    }

    /// Parses a hosts file's text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Topology> {
        /// A rack as the file gives it: a `#rack` block, or a name after the address.
        #[derive(PartialEq)]
        enum Key<'a> {
            Block(usize),
            Named(&'a str),
        }
        let mut hosts = Vec::new();
        let mut keys: Vec<Key> = Vec::new();
        let mut rack = Vec::new();
        let mut current = 0usize;
        let mut seen_rack = false;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("#rack") {
                if rest.is_empty() || rest.starts_with(char::is_whitespace) {
                    if seen_rack || !hosts.is_empty() {
                        current += 1;
                    }
                    seen_rack = true;
                    continue;
                }
            }
            if line.starts_with('#') {
                continue;
            }
            let bad = |what: &str| Error::Input {
                file: file.into(),
                line: i as u64 + 1,
                msg: format!("expected host:port [rack], {what} '{}'", clip(line)),
            };
            let mut fields = line.split_whitespace();
            let addr = fields.next().unwrap_or_default();
            let named = fields.next();
            if fields.next().is_some() {
                return Err(bad("found"));
            }
            let Some((h, port)) = addr.rsplit_once(':') else {
                return Err(bad("found"));
            };
            if h.is_empty() || port.parse::<u16>().is_err() {
                return Err(bad("found"));
            }
            let key = named.map_or(Key::Block(current), Key::Named);
            let index = match keys.iter().position(|k| *k == key) {
                Some(x) => x,
                None => {
                    keys.push(key);
                    keys.len() - 1
                }
            };
            hosts.push(addr.to_string());
            rack.push(index);
        }
        if hosts.is_empty() {
            return Err(Error::Input {
                file: file.into(),
                line: 1,
                msg: "no hosts listed".into(),
            });
        }
        Ok(Topology { hosts, rack })
    }

    /// The number of racks (1 when the hosts file names none).
    pub fn racks(&self) -> usize {
        self.rack.iter().copied().max().map_or(1, |r| r + 1)
    }

    pub fn size(&self) -> usize {
        self.hosts.len()
    }

    /// Resolves every host to a socket address.
    pub fn addrs(&self) -> Result<Vec<SocketAddr>> {
        self.hosts
            .iter()
            .enumerate()
            .map(|(r, h)| {
                h.to_socket_addrs()
                    .map_err(|e| Error::io(format!("cannot resolve rank {r}'s address {h}"), e))?
                    .next()
                    .ok_or_else(|| {
                        Error::config(format!("rank {r}'s address {h} resolves to nothing"))
                    })
            })
            .collect()
    }

    /// The order of a pipelined chain from `root`: the root's rack first (in rank order from the
    /// root), then every other rack in turn, so the chain crosses each rack uplink once per
    /// direction.
    pub fn chain_order(&self, root: usize) -> Vec<usize> {
        let p = self.size();
        let racks = self.racks();
        let mut order = Vec::with_capacity(p);
        for k in 0..racks {
            let rk = (self.rack[root] + k) % racks;
            for i in 0..p {
                let r = (root + i) % p;
                if self.rack[r] == rk {
                    order.push(r);
                }
            }
        }
        order
    }
}

/// At most 200 characters of a bad line, for error messages.
fn clip(line: &str) -> String {
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_racks_and_orders_chain_by_rack() {
        let t = Topology::parse(
            "#rack a\nh0:1\nh1:2\n#rack b\nh2:3\nh3:4\n# comment\n\n#rack\nh4:5\n",
            "hosts",
        )
        .unwrap();
        assert_eq!(t.rack, vec![0, 0, 1, 1, 2]);
        assert_eq!(t.chain_order(0), vec![0, 1, 2, 3, 4]);
        assert_eq!(t.chain_order(3), vec![3, 2, 4, 0, 1]);
        let flat = Topology::parse("a:1\nb:2\nc:3\n", "h").unwrap();
        assert_eq!(flat.rack, vec![0, 0, 0]);
        assert_eq!(flat.chain_order(1), vec![1, 2, 0]);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let e = Topology::parse("a:1\n\nnoport\n", "hosts.txt")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "hosts.txt:3: expected host:port [rack], found 'noport'");
        assert!(Topology::parse("a:1 /r1 extra\n", "h").is_err());
        assert!(Topology::parse("# only comments\n", "h").is_err());
    }

    #[test]
    fn named_racks_need_not_be_contiguous_in_rank_order() {
        // As YARN places workers: ranks 0 and 2 on /r1, 1 and 3 on /r2.
        let t = Topology::parse("h0:1 /r1\nh1:1 /r2\nh2:1 /r1\nh3:1 /r2\n", "w").unwrap();
        assert_eq!(t.rack, vec![0, 1, 0, 1]);
        assert_eq!(t.chain_order(0), vec![0, 2, 1, 3]);
        assert_eq!(t.chain_order(1), vec![1, 3, 2, 0]);
        assert_eq!(t.hosts, vec!["h0:1", "h1:1", "h2:1", "h3:1"]);
    }
}
