//! The simulator (`harp sim`, docs/benchmarks.md "Simulated scale"): the engine's own
//! collective code run on p in-process workers over a recording link
//! ([`Transport::recording`](crate::transport::Transport::recording)), its schedules of sends
//! and receives then replayed over a modelled network of hosts, racks, uneven pairs and
//! latency ([`network`], [`replay`]). Nothing of an algorithm is re-implemented here: a change
//! to an algorithm changes what the simulator replays.
//!
//! Layers inside: [`network`] (the network description), [`replay`] (the discrete-event fluid
//! replay), [`run`] (recording a collective), then [`simulate`] joining them.

pub mod network;
pub mod replay;
pub mod run;

pub use network::SimNet;
pub use replay::{replay, Outcome};
pub use run::{bench_table, record, Case, Recorded};

use crate::config::Config;
use crate::error::Result;

/// One simulated call.
#[derive(Debug, Clone)]
pub struct Simulated {
    /// The algorithm that ran.
    pub algorithm: String,
    /// The replay's outcome.
    pub outcome: Outcome,
    /// The bandwidth bound of the call on `net` (seconds; `None` for a barrier).
    pub bound: Option<f64>,
}

/// Records `case` on `net.p` workers (with the network model when `model`) and replays it
/// over `net`.
pub fn simulate(net: &SimNet, cfg: &Config, case: &Case, model: bool) -> Result<Simulated> {
    let rec = record(net, cfg, case, model)?;
    let outcome = replay(net, &rec.schedules)?;
    Ok(Simulated {
        algorithm: rec.algorithm,
        outcome,
        bound: bound(net, &case.op, case.bytes),
    })
}

/// The lower bound of `op` on `n` bytes as `scripts/bench-bound.jq` computes it for the
/// emulated network, B being each host's payload rate (with racks behind a slower uplink,
/// B_inter for broadcast and reduce, and the root rack's uplink share for gather and scatter).
pub fn bound(net: &SimNet, op: &str, n: u64) -> Option<f64> {
    let p = net.p as f64;
    let n = n as f64;
    let b = net.host_bytes();
    let bi = net
        .racks
        .filter(|&(k, _)| k > 1)
        .map(|(_, u)| u / 8.0 * network::TCP_PAYLOAD)
        .filter(|&bi| bi < b);
    let share = (p - 1.0) / p * n / b;
    Some(match op {
        "broadcast" | "reduce" => n / bi.unwrap_or(b),
        "allreduce" => 2.0 * share,
        "allgather" | "reduce-scatter" | "regroup" => share,
        "gather" | "scatter" => {
            let k = net.racks.map_or(1, |(k, _)| k);
            let f = (p - (net.p.div_ceil(k)) as f64) / p;
            match bi {
                Some(bi) if k > 1 && f * n / bi > share => f * n / bi,
                _ => share,
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::replay::FRAME_OVERHEAD;
    use super::run::{config, record_tables};
    use super::*;
    use crate::collective::shapes::tree;
    use crate::collective::BroadcastAlgorithm;
    use crate::transport::Step;

    /// 1 MB/s of payload per host side, 1 ms latency.
    fn tiny(p: usize) -> SimNet {
        SimNet {
            latency: 1e-3,
            ..SimNet::uniform(p, 8e6 / network::TCP_PAYLOAD)
        }
    }

    fn case(op: &str, algorithm: &str, bytes: u64) -> Case {
        Case {
            op: op.into(),
            algorithm: algorithm.into(),
            bytes,
            partitions: None,
        }
    }

    /// `op` with `algorithm` recorded on `tiny(p)` without a model, and the tables after it.
    fn recorded(
        p: usize,
        op: &str,
        algorithm: &str,
        bytes: u64,
    ) -> (SimNet, Recorded, Vec<crate::data::Table>) {
        let net = tiny(p);
        let (rec, tables) =
            record_tables(&net, &config(), &case(op, algorithm, bytes), false).unwrap();
        (net, rec, tables)
    }

    /// Sends of a schedule as (peer, bytes).
    fn sends(s: &[Step]) -> Vec<(usize, u64)> {
        s.iter()
            .filter_map(|st| match *st {
                Step::Send { peer, bytes, .. } => Some((peer, bytes)),
                Step::Recv { .. } => None,
            })
            .collect()
    }

    fn recvs(s: &[Step]) -> Vec<usize> {
        s.iter()
            .filter_map(|st| match *st {
                Step::Recv { peer, .. } => Some(peer),
                Step::Send { .. } => None,
            })
            .collect()
    }

    /// Every worker's table holds the root's values (rank 0 filled it with 1.0).
    fn all_hold_roots(tables: &[crate::data::Table], elems: usize) {
        for (r, t) in tables.iter().enumerate() {
            let a = t
                .get(0)
                .unwrap_or_else(|| panic!("rank {r} has no partition 0"));
            let v = a.as_slice::<f64>().unwrap();
            assert_eq!(v.len(), elems, "rank {r}");
            assert!(v.iter().all(|&x| x == 1.0), "rank {r}");
        }
    }

    /// Checks that a one-frame broadcast's schedule is `algo`'s tree (`shapes::tree`, what
    /// the algorithm reads): each worker takes one frame from its parent and sends one frame of
    /// the same size to each child. Returns that size.
    fn follows_tree(net: &SimNet, rec: &Recorded, algo: BroadcastAlgorithm) -> u64 {
        let (topo, p) = (net.topology(), net.p);
        let frame = sends(&rec.schedules[0])[0].1;
        for (r, s) in rec.schedules.iter().enumerate() {
            let (parent, kids) = tree(algo, &topo, None, r, p, 0);
            assert_eq!(recvs(s), parent.into_iter().collect::<Vec<_>>(), "rank {r}");
            let mut got = sends(s);
            got.sort_unstable();
            let mut want: Vec<(usize, u64)> = kids.iter().map(|&k| (k, frame)).collect();
            want.sort_unstable();
            assert_eq!(got, want, "rank {r}");
        }
        frame
    }

    /// A small chain broadcast is one frame per hop, store and forward: (p−1)(τ + L) with
    /// τ = the frame's bytes / B. The recorded schedule is the chain's tree, and the data the
    /// recorded frames carried is what every worker ends with.
    #[test]
    fn chain_broadcast_by_hand() {
        let p = 5;
        let (net, rec, tables) = recorded(p, "broadcast", "chain", 1024);
        all_hold_roots(&tables, 128);
        let frame = follows_tree(&net, &rec, BroadcastAlgorithm::Chain);
        let tau = (frame + FRAME_OVERHEAD) as f64 / 1e6;
        let got = replay(&net, &rec.schedules).unwrap().time;
        let want = (p - 1) as f64 * (tau + 1e-3);
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    }

    /// A pipelined chain broadcast: frames f_1..f_k (a head, then the chunks) on p−1 hops
    /// with no contention is a flow shop: hop h ends frame j at
    /// C(h, j) = max(C(h, j−1), C(h−1, j) + L) + f_j/B; done at C(p−1, k) + L.
    #[test]
    fn pipelined_chain_broadcast_by_hand() {
        let p = 6;
        let net = tiny(p);
        let cfg = Config {
            chunk_size: 64 * 1024,
            ..config()
        };
        let (rec, tables) =
            record_tables(&net, &cfg, &case("broadcast", "chain", 512 * 1024), false).unwrap();
        all_hold_roots(&tables, 64 * 1024);
        let frames: Vec<u64> = sends(&rec.schedules[0]).iter().map(|s| s.1).collect();
        assert!(frames.len() >= 8, "{frames:?}");
        assert_eq!(frames.iter().sum::<u64>() / 1024, 512, "{frames:?}");
        for s in &rec.schedules[1..p - 1] {
            let mine: Vec<u64> = sends(s).iter().map(|s| s.1).collect();
            assert_eq!(mine, frames);
        }
        let (l, k) = (1e-3, frames.len());
        let tau: Vec<f64> = frames
            .iter()
            .map(|&f| (f + FRAME_OVERHEAD) as f64 / 1e6)
            .collect();
        let mut prev = vec![0.0f64; k]; // C(h−1, j) + L, ready times at hop h
        let mut last = 0.0;
        for h in 0..p - 1 {
            let mut c = vec![0.0f64; k];
            for j in 0..k {
                let ready = if h == 0 { 0.0 } else { prev[j] + l };
                let free = if j == 0 { 0.0 } else { c[j - 1] };
                c[j] = ready.max(free) + tau[j];
            }
            last = c[k - 1] + l;
            prev = c;
        }
        let got = replay(&net, &rec.schedules).unwrap().time;
        assert!((got - last).abs() < 1e-9, "{got} vs {last}");
    }

    /// A small binomial broadcast on 8 workers: the root's three frames share its sending
    /// side (done at 3τ), rank 4's two at 5τ + L, rank 6's one at 6τ + 2L: 6τ + 3L.
    #[test]
    fn binomial_broadcast_by_hand() {
        let (net, rec, tables) = recorded(8, "broadcast", "binomial", 1024);
        all_hold_roots(&tables, 128);
        let frame = follows_tree(&net, &rec, BroadcastAlgorithm::Binomial);
        assert_eq!(sends(&rec.schedules[0]).len(), 3);
        let tau = (frame + FRAME_OVERHEAD) as f64 / 1e6;
        let got = replay(&net, &rec.schedules).unwrap().time;
        let want = 6.0 * tau + 3.0 * 1e-3;
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    }

    /// The ring allgather's schedule is the ring: p−1 frames to the right neighbour, p−1 from
    /// the left, each received before the next is sent; every worker ends with every block.
    #[test]
    fn ring_allgather_schedule() {
        let p = 5;
        let (net, rec, tables) = recorded(p, "allgather", "ring", 5 * 800);
        for (r, t) in tables.iter().enumerate() {
            assert_eq!(t.len(), p, "rank {r}");
            for (id, a) in t.iter() {
                let v = a.as_slice::<f64>().unwrap();
                assert!(
                    v.iter().all(|&x| x == id as f64 + 1.0),
                    "rank {r} block {id}"
                );
            }
        }
        for (r, s) in rec.schedules.iter().enumerate() {
            let right = (r + 1) % p;
            let left = (r + p - 1) % p;
            assert!(sends(s).iter().all(|&(d, _)| d == right), "rank {r}");
            assert!(recvs(s).iter().all(|&q| q == left), "rank {r}");
            assert_eq!(sends(s).len(), p - 1, "rank {r}");
            assert_eq!(recvs(s).len(), p - 1, "rank {r}");
            // Step k's send follows step k−1's receive.
            let at = |send: bool| -> Vec<usize> {
                (0..s.len())
                    .filter(|&i| matches!(s[i], Step::Send { .. }) == send)
                    .collect()
            };
            let (sent, got) = (at(true), at(false));
            assert_eq!(sent[0], 0, "rank {r}: {s:?}");
            for k in 1..p - 1 {
                assert!(sent[k] > got[k - 1], "rank {r} step {k}: {s:?}");
            }
        }
        // Every frame sent is taken, and the replay finishes.
        let o = replay(&net, &rec.schedules).unwrap();
        assert_eq!(o.frames, p * (p - 1));
    }

    /// A bound at least the bandwidth floor; the simulation of a large chain broadcast is
    /// close to it, and an unknown operation is refused by name.
    #[test]
    fn bounds_and_refusals() {
        let net = tiny(4);
        let s = simulate(&net, &config(), &case("broadcast", "chain", 4 << 20), false).unwrap();
        let b = s.bound.unwrap();
        assert!(s.outcome.time >= b && s.outcome.time < 1.2 * b, "{s:?}");
        let e = simulate(&net, &config(), &case("shuffle", "auto", 1), false).unwrap_err();
        assert!(e.to_string().contains("unknown operation 'shuffle'"), "{e}");
    }
}
