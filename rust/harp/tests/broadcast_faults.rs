//! The fault-tolerant chain broadcast (`broadcast_retries`, docs/algorithms.md "Broadcast fault
//! tolerance") over real sockets on loopback: a link that stops delivering in the middle of a
//! 64 MiB broadcast is routed around (the data arrives identical and the root's warning names
//! the link and the attempt); with no fault the result is the plain chain's; a dead peer still
//! fails every worker, naming it, within the timeout.

mod common;

use std::time::{Duration, Instant};

use harp::collective::algorithm::BroadcastAlgorithm;
use harp::config::LinkFault;
use harp::{Array, Collectives, Combiner, Config, NetModel, Opts, Pool, Table, Worker};

use common::{keep_warnings, on_workers, tcp_job, warnings_with};

/// The root's table: `parts` partitions of f64 (the first larger than the others, one of odd
/// length) adding up to about `bytes`, every value distinct.
fn root_table(pool: &Pool, bytes: usize, parts: usize) -> Table {
    let mut t = Table::new(Combiner::Sum);
    let per = bytes / 8 / parts;
    for pid in 0..parts {
        let n = if pid == 0 { per + per / 2 } else { per - 3 };
        let v: Vec<f64> = (0..n).map(|i| (pid * 1_000_003 + i) as f64 * 0.5).collect();
        t.add(pid as u32, Array::from_slice(pool, &v)).unwrap();
    }
    t
}

/// A receiver's table before the broadcast: something the broadcast must replace.
fn stale_table(pool: &Pool) -> Table {
    let mut t = Table::new(Combiner::Sum);
    t.add(99, Array::from_slice(pool, &[7.0f64; 5])).unwrap();
    t
}

/// Whether `t` holds exactly `want`'s partitions, byte for byte.
fn same(t: &Table, want: &Table) -> bool {
    t.len() == want.len()
        && want
            .iter()
            .all(|(id, a)| t.get(id).is_some_and(|b| b.bytes() == a.bytes()))
}

/// A network model file of `p` loopback workers at 1 GB/s (the acknowledgement window's size
/// term), removed when dropped.
struct ModelFile(std::path::PathBuf);

impl ModelFile {
    fn new(p: usize, name: &str) -> ModelFile {
        let path = std::env::temp_dir().join(format!(
            "harp-bcast-faults-{}-{name}.model",
            std::process::id()
        ));
        std::fs::write(&path, NetModel::uniform(p, 1e-4, 1e9).to_text()).unwrap();
        ModelFile(path)
    }
}

impl Drop for ModelFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn ft_config(timeout: Duration, window: Duration, model: &ModelFile) -> Config {
    Config {
        op_timeout: timeout,
        broadcast_retries: 2,
        broadcast_ack_window: window,
        net_model: Some(model.0.display().to_string()),
        ..Config::default()
    }
}

const CHAIN: BroadcastAlgorithm = BroadcastAlgorithm::Chain;

/// The link between ranks 1 and 2 of the chain 0 → 1 → 2 → 3 delivers nothing for 6 s once 4
/// data frames have crossed it, in the middle of a 64 MiB broadcast. The root sees no
/// acknowledgement from rank 2 within its window, warns naming the link and the attempt, and
/// restarts on a chain without that link; every worker ends with the root's table, byte for
/// byte, and the next broadcast runs as usual.
#[test]
fn a_link_that_stops_mid_broadcast_is_routed_around() {
    keep_warnings();
    let model = ModelFile::new(4, "stall");
    let stall = Duration::from_secs(6);
    let cfg = Config {
        link_fault: Some(LinkFault {
            a: 1,
            b: 2,
            after: 4,
            stall,
        }),
        chunk_size: 1 << 20,
        ..ft_config(Duration::from_secs(60), Duration::from_secs(2), &model)
    };
    let cfgs = vec![cfg; 4];
    let out = tcp_job(
        &cfgs,
        |_, a| a.to_vec(),
        |w| {
            let w = w.expect("worker starts");
            let want = root_table(w.pool(), 64 << 20, 3);
            let mut t = if w.rank() == 0 {
                root_table(w.pool(), 64 << 20, 3)
            } else {
                stale_table(w.pool())
            };
            let t0 = Instant::now();
            let r = w.broadcast("ft", &mut t, Opts::default().algorithm(CHAIN));
            let secs = t0.elapsed().as_secs_f64();
            let first = r.map(|()| same(&t, &want));
            // And again, with the link well again: one attempt.
            let mut u = if w.rank() == 0 {
                root_table(w.pool(), 1 << 20, 2)
            } else {
                stale_table(w.pool())
            };
            let second = w
                .broadcast("after", &mut u, Opts::default().algorithm(CHAIN))
                .map(|()| same(&u, &root_table(w.pool(), 1 << 20, 2)));
            w.close();
            (first, second, secs)
        },
    );
    for (rank, (first, second, secs)) in out.into_iter().enumerate() {
        assert!(first.expect("the broadcast completes"), "rank {rank}");
        assert!(second.expect("the next broadcast completes"), "rank {rank}");
        // Bounded: the window, the new chain, and the abandoned frame once the link is back.
        assert!(secs < 40.0, "rank {rank}: {secs} s");
    }
    let w = warnings_with("restarting with the link rank 1 - rank 2 routed around");
    assert_eq!(w.len(), 1, "{:?}", warnings_with(""));
    assert!(
        w[0].contains("broadcast attempt 1 of 3: rank 2 did not acknowledge"),
        "{}",
        w[0]
    );
}

/// With no fault the fault-tolerant chain gives every worker the root's table for every root
/// and size (empty, one small partition, uneven partitions cut into chunks), in one attempt.
#[test]
fn without_a_fault_every_worker_gets_the_roots_table() {
    keep_warnings();
    let model = ModelFile::new(5, "plain");
    let cfg = Config {
        chunk_size: 64 << 10,
        ..ft_config(Duration::from_secs(30), Duration::from_secs(10), &model)
    };
    let before = warnings_with("restarting").len();
    let out = on_workers(5, cfg, |w: Worker| {
        let mut ok = Vec::new();
        for root in [0, 3] {
            for (bytes, parts) in [(0, 1), (64, 1), (1 << 20, 4)] {
                let want = root_table(w.pool(), bytes, parts);
                let mut t = if w.rank() == root {
                    root_table(w.pool(), bytes, parts)
                } else {
                    stale_table(w.pool())
                };
                let opts = Opts::default().algorithm(CHAIN).root(root);
                w.broadcast("plain", &mut t, opts).unwrap();
                ok.push(same(&t, &want));
            }
        }
        w.close();
        ok
    });
    for (rank, ok) in out.into_iter().enumerate() {
        assert!(ok.iter().all(|&b| b), "rank {rank}: {ok:?}");
    }
    assert_eq!(warnings_with("restarting").len(), before);
}

/// A worker that dies (aborts) instead of taking part is not retried around: every other worker
/// fails at once with an error naming it, well within the timeout.
#[test]
fn a_dead_peer_still_fails_every_worker_naming_it() {
    keep_warnings();
    let model = ModelFile::new(4, "dead");
    let timeout = Duration::from_secs(20);
    let cfgs = vec![ft_config(timeout, Duration::from_secs(2), &model); 4];
    let out = tcp_job(
        &cfgs,
        |_, a| a.to_vec(),
        |w| {
            let w = w.expect("worker starts");
            if w.rank() == 2 {
                w.abort("killed for the test");
                return None;
            }
            let mut t = if w.rank() == 0 {
                root_table(w.pool(), 8 << 20, 2)
            } else {
                stale_table(w.pool())
            };
            let t0 = Instant::now();
            let e = w
                .broadcast("dead", &mut t, Opts::default().algorithm(CHAIN))
                .expect_err("a dead peer fails the broadcast");
            Some((e.to_string(), t0.elapsed()))
        },
    );
    for (rank, r) in out.into_iter().enumerate() {
        let Some((e, took)) = r else { continue };
        assert!(e.contains("rank 2"), "rank {rank}: {e}");
        assert!(took < timeout, "rank {rank}: {took:?}");
    }
}
