//! The modelled network, described as `scripts/netns-cluster.sh` builds its emulated one: one
//! worker per host, every host sending and receiving at most a rate R (or H with
//! `--host-rate`), optional racks (host i in rack ⌊i·K/p⌋) joined to a core by uplinks of U in
//! each direction, optional uneven pairs (pair {a,b} at R/d, d ∈ {1, 2, 4} drawn from the seed
//! exactly as the script draws it) and a one-way latency per message.

use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::topology::Topology;

/// TCP payload over the shaped link's frames: the share of a configured rate a transfer gets
/// (`scripts/bench-netns.sh` models the emulated network with the same factor).
pub const TCP_PAYLOAD: f64 = 0.956;

/// The one-way latency of a message on the emulated network without `--delay` (seconds), as
/// the model `bench-netns.sh --net-model status` writes it.
pub const BASE_LATENCY: f64 = 100e-6;

/// A modelled network of `p` hosts. Rates are configured bit/s, as the netns scripts take them.
#[derive(Debug, Clone, PartialEq)]
pub struct SimNet {
    pub p: usize,
    /// Each host's send and receive rate, and with `uneven` each pair's before division.
    pub rate_bits: f64,
    /// Each host's own limit in both directions when the pairs are uneven (`--host-rate`).
    pub host_rate_bits: Option<f64>,
    /// `(K, U bit/s)`: K racks whose uplinks carry U in each direction.
    pub racks: Option<(usize, f64)>,
    /// The seed of the uneven pair rates.
    pub uneven: Option<u64>,
    /// One-way latency of every message (seconds).
    pub latency: f64,
}

/// The divisor of pair {a, b}'s rate under `--uneven seed`: 1, 2 or 4 (the script's
/// `pair_div`: a 32-bit mix of seed, min and max).
pub fn pair_div(seed: u64, a: usize, b: usize) -> u32 {
    let (a, b) = (a.min(b) as u64, a.max(b) as u64);
    let m = 0xFFFF_FFFFu64;
    let mut h = (seed
        .wrapping_mul(2654435761)
        .wrapping_add(a.wrapping_mul(2246822519))
        .wrapping_add(b.wrapping_mul(3266489917))
        .wrapping_add(374761393))
        & m;
    h = ((h ^ (h >> 15)).wrapping_mul(2246822519)) & m;
    h = ((h ^ (h >> 13)).wrapping_mul(3266489917)) & m;
    h ^= h >> 16;
    1 << (h % 3)
}

/// A rate in tc syntax (`200mbit`, `1gbit`, `10mibit`, `25mbps`, a bare number is bit/s) as
/// bit/s.
pub fn parse_rate(s: &str) -> std::result::Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let units: [(&str, f64); 12] = [
        ("gibit", 1024.0 * 1024.0 * 1024.0),
        ("mibit", 1024.0 * 1024.0),
        ("kibit", 1024.0),
        ("gbit", 1e9),
        ("mbit", 1e6),
        ("kbit", 1e3),
        ("gbps", 8e9),
        ("mbps", 8e6),
        ("kbps", 8e3),
        ("bps", 8.0),
        ("bit", 1.0),
        ("", 1.0),
    ];
    let (num, mult) = units
        .iter()
        .find_map(|&(u, m)| t.strip_suffix(u).map(|n| (n, m)))
        .unwrap_or((&t, 1.0));
    match num.trim().parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x * mult),
        _ => Err(format!(
            "'{s}' is not a rate (a number > 0 with bit, kbit, mbit, gbit, kibit, mibit, gibit, \
             bps, kbps, mbps or gbps)"
        )),
    }
}

/// A time in tc syntax (`100us`, `1ms`, `0.5s`; a bare number is microseconds, as tc takes
/// it) as seconds.
pub fn parse_delay(s: &str) -> std::result::Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t.as_str(), 1e-6)
    };
    match num.trim().parse::<f64>() {
        Ok(x) if x >= 0.0 && x.is_finite() => Ok(x * mult),
        _ => Err(format!("'{s}' is not a time (e.g. 100us, 1ms, 0.5s)")),
    }
}

/// A link resource a transfer crosses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Res {
    /// Host i's sending side.
    Out(usize),
    /// Host i's receiving side.
    In(usize),
    /// Rack k's uplink toward the core.
    Up(usize),
    /// Rack k's downlink from the core.
    Down(usize),
}

impl SimNet {
    /// A uniform network of `p` hosts at `rate_bits` with the base latency.
    pub fn uniform(p: usize, rate_bits: f64) -> SimNet {
        SimNet {
            p,
            rate_bits,
            host_rate_bits: None,
            racks: None,
            uneven: None,
            latency: BASE_LATENCY,
        }
    }

    /// Fails on a shape the netns script would refuse.
    pub fn check(&self) -> Result<()> {
        if self.p < 1 {
            return Err(Error::config("the simulated network needs at least 1 host"));
        }
        if let Some((k, u)) = self.racks {
            if k < 1 || k > self.p || u.is_nan() || u <= 0.0 {
                return Err(Error::config(format!(
                    "--racks {k}: expected 1 ≤ K ≤ p = {} racks with an uplink rate > 0",
                    self.p
                )));
            }
        }
        if let Some(h) = self.host_rate_bits {
            if self.uneven.is_none() || h < self.rate_bits {
                return Err(Error::config(
                    "--host-rate needs --uneven and a rate at least --rate",
                ));
            }
        }
        Ok(())
    }

    /// Host i's rack (0 without racks).
    pub fn rack(&self, i: usize) -> usize {
        self.racks.map_or(0, |(k, _)| i * k / self.p)
    }

    /// Bytes per second of payload a host sends or receives at most.
    pub fn host_bytes(&self) -> f64 {
        self.host_rate_bits.unwrap_or(self.rate_bits) / 8.0 * TCP_PAYLOAD
    }

    /// The cap of pair (a, b) on its own, bytes per second of payload (infinite when only the
    /// hosts and racks limit it).
    pub fn pair_bytes(&self, a: usize, b: usize) -> f64 {
        match self.uneven {
            Some(seed) => self.rate_bits / f64::from(pair_div(seed, a, b)) / 8.0 * TCP_PAYLOAD,
            None => f64::INFINITY,
        }
    }

    /// Capacity of a resource, bytes per second of payload.
    pub fn capacity(&self, r: Res) -> f64 {
        match r {
            Res::Out(_) | Res::In(_) => self.host_bytes(),
            Res::Up(_) | Res::Down(_) => {
                self.racks.map_or(f64::INFINITY, |(_, u)| u) / 8.0 * TCP_PAYLOAD
            }
        }
    }

    /// The resources a transfer from a to b crosses (2, or 4 across racks).
    pub fn path(&self, a: usize, b: usize) -> Vec<Res> {
        let mut v = vec![Res::Out(a), Res::In(b)];
        if self.racks.is_some() && self.rack(a) != self.rack(b) {
            v.push(Res::Up(self.rack(a)));
            v.push(Res::Down(self.rack(b)));
        }
        v
    }

    /// Pair (a, b)'s bandwidth alone on the network: the least capacity on its path.
    pub fn bandwidth(&self, a: usize, b: usize) -> f64 {
        self.path(a, b)
            .into_iter()
            .map(|r| self.capacity(r))
            .fold(self.pair_bytes(a, b), f64::min)
    }

    /// The network model the network-aware algorithms get: every pair's latency and
    /// bandwidth alone, and with `--host-rate` each host's capacity (what
    /// `bench-netns.sh --net-model status` writes for the emulated network).
    pub fn net_model(&self) -> Result<NetModel> {
        let p = self.p;
        let mut lat = vec![0.0; p * p];
        let mut bw = vec![f64::INFINITY; p * p];
        for a in 0..p {
            for b in (0..p).filter(|&b| b != a) {
                lat[a * p + b] = self.latency;
                bw[a * p + b] = self.bandwidth(a, b);
            }
        }
        let m = NetModel::new(p, lat, bw)?;
        match self.host_rate_bits {
            Some(_) => m.with_host(vec![self.host_bytes(); p]),
            None => Ok(m),
        }
    }

    /// The topology the workers see: the hosts in rank order, in their racks (as the netns
    /// hosts file gives them with `#rack` lines).
    pub fn topology(&self) -> Topology {
        let hosts = (0..self.p)
            .map(|i| format!("10.77.{}.{}:7700", (i + 1) / 256, (i + 1) % 256))
            .collect();
        let mut t = Topology::flat(hosts);
        t.rack = (0..self.p).map(|i| self.rack(i)).collect();
        t
    }

    /// One line naming the shape, as the netns bench names it (`flat`, `racks4-uplink100mbit`,
    /// `uneven42`, …).
    pub fn describe(&self) -> String {
        let mut s = format!("{} hosts at {}", self.p, fmt_rate(self.rate_bits));
        if let Some(h) = self.host_rate_bits {
            s += &format!(" per pair, host {}", fmt_rate(h));
        }
        if let Some((k, u)) = self.racks {
            s += &format!(", {k} racks, uplink {}", fmt_rate(u));
        }
        if let Some(seed) = self.uneven {
            s += &format!(", uneven seed {seed}");
        }
        s + &format!(", latency {:.0} µs", self.latency * 1e6)
    }
}

/// A rate in bit/s as tc would print it.
fn fmt_rate(bits: f64) -> String {
    if bits >= 1e9 && (bits / 1e9).fract() == 0.0 {
        format!("{}gbit", bits / 1e9)
    } else if bits >= 1e6 {
        format!("{}mbit", bits / 1e6)
    } else {
        format!("{bits}bit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The divisors are the script's: values from `pair_div` in netns-cluster.sh run by bash.
    #[test]
    fn pair_divisors_match_the_script() {
        // bash: for a in 0 1 2; do for b in 1 2 3; do pair_div 42 $a $b; done; done
        let want = include_str!("pair_div_42.txt");
        let got: Vec<u32> = (0..3)
            .flat_map(|a| (1..4).map(move |b| pair_div(42, a, b)))
            .collect();
        let want: Vec<u32> = want
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect();
        assert_eq!(got, want);
        assert_eq!(pair_div(7, 3, 9), pair_div(7, 9, 3));
    }

    #[test]
    fn rates_and_paths() {
        assert_eq!(parse_rate("200mbit").unwrap(), 200e6);
        assert_eq!(parse_rate("1gbit").unwrap(), 1e9);
        assert_eq!(parse_rate("25mbps").unwrap(), 200e6);
        assert!(parse_rate("fast").is_err() && parse_rate("0mbit").is_err());
        assert_eq!(parse_delay("1ms").unwrap(), 1e-3);
        let mut n = SimNet::uniform(8, 200e6);
        n.racks = Some((2, 100e6));
        assert_eq!(n.rack(3), 0);
        assert_eq!(n.rack(4), 1);
        assert_eq!(n.path(0, 1).len(), 2);
        assert_eq!(n.path(0, 5).len(), 4);
        assert!((n.bandwidth(0, 5) - 100e6 / 8.0 * TCP_PAYLOAD).abs() < 1e-6);
        assert!((n.bandwidth(0, 1) - 200e6 / 8.0 * TCP_PAYLOAD).abs() < 1e-6);
    }
}
