//! Cluster description: the hosts file (`host:port` per line in rank order; a line starting with
//! `#rack` starts a new rack; other `#` lines and blank lines are comments) and the rack-aware
//! orders used by the pipelined chain.

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

    /// Parses a hosts file's text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Topology> {
        let mut hosts = Vec::new();
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
            let Some((h, port)) = line.rsplit_once(':') else {
                return Err(Error::Input {
                    file: file.into(),
                    line: i as u64 + 1,
                    msg: format!("expected host:port, found '{line}'"),
                });
            };
            if h.is_empty() || port.parse::<u16>().is_err() {
                return Err(Error::Input {
                    file: file.into(),
                    line: i as u64 + 1,
                    msg: format!("expected host:port, found '{line}'"),
                });
            }
            hosts.push(line.to_string());
            rack.push(current);
        }
        if hosts.is_empty() {
            return Err(Error::Input {
                file: file.into(),
                line: 1,
                msg: "no hosts listed".into(),
            });
        }
        // Rack indices are dense even if the file starts with hosts before any #rack line.
        let first = rack[0];
        for r in &mut rack {
            *r -= first;
        }
        Ok(Topology { hosts, rack })
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
        let racks = self.rack.iter().copied().max().unwrap_or(0) + 1;
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
        assert_eq!(flat.chain_order(1), vec![1, 2, 0]);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let e = Topology::parse("a:1\n\nnoport\n", "hosts.txt")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "hosts.txt:3: expected host:port, found 'noport'");
        assert!(Topology::parse("# only comments\n", "h").is_err());
    }
}
