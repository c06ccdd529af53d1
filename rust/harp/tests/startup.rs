//! Start-up over real sockets on loopback: when a worker never joins, every worker that waits
//! for it fails at the connect timeout naming it (rank and address), not "some rank".

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use harp::config::Config;
use harp::pool::Pool;
use harp::transport::{job_id, listen, Transport};

const SECRET: &[u8] = b"startup-test-secret-0123456789ab";

/// A runtime, a 1 s connect timeout, and three bound listeners on loopback with their
/// addresses (the worker list).
fn three_listeners() -> (
    tokio::runtime::Runtime,
    Config,
    Vec<tokio::net::TcpListener>,
    Vec<SocketAddr>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cfg = Config {
        connect_timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let listeners = rt.block_on(async {
        (0..3)
            .map(|_| listen(any, &cfg).unwrap())
            .collect::<Vec<_>>()
    });
    let hosts = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    (rt, cfg, listeners, hosts)
}

#[test]
fn a_worker_that_never_joins_is_named_at_the_connect_timeout() {
    // Rank 2 has an address (its listener is bound) but its worker never starts.
    let (rt, cfg, listeners, hosts) = three_listeners();
    let mut listeners = listeners.into_iter();
    let (l0, l1) = (listeners.next().unwrap(), listeners.next().unwrap());
    let job = job_id("startup");
    let start = Instant::now();
    let (r0, r1) =
        rt.block_on(async {
            let t1 = tokio::spawn({
                let (cfg, hosts) = (cfg.clone(), hosts.clone());
                async move {
                    Transport::connect(&cfg, &hosts, 1, job, SECRET, l1, Pool::default()).await
                }
            });
            let t0 = Transport::connect(&cfg, &hosts, 0, job, SECRET, l0, Pool::default()).await;
            (t0, t1.await.unwrap())
        });
    let secs = start.elapsed().as_secs_f64();
    assert!(
        secs < 10.0,
        "both gave up at the timeout, not later ({secs:.1} s)"
    );
    let want = format!("rank 2 ({}) did not connect within 1 s", hosts[2]);
    for (r, res) in [(0, r0), (1, r1)] {
        let e = res.err().expect("start-up fails").to_string();
        assert!(e.starts_with(&format!("rank {r}: start-up failed")), "{e}");
        // Rank 0 also waited for rank 1, which joined: only rank 2 is named.
        assert!(e.ends_with(&want), "rank {r}: {e}");
    }
}

/// Two workers started as rank 0 (the second should have been rank 1): the real rank 0 names
/// rank 1, which never joined, at the connect timeout, and so does rank 2, which hears it from
/// rank 0 (connections open on first use: at start-up only rank 0 is dialed, so nobody dials the
/// duplicate; a worker that did would be answered by a rank 0 and fail at once saying so).
#[test]
fn two_workers_started_with_the_same_rank_fail_naming_the_missing_one() {
    let (rt, cfg, listeners, hosts) = three_listeners();
    let job = job_id("startup");
    let results = rt.block_on(async {
        let tasks: Vec<_> = listeners
            .into_iter()
            .zip([0usize, 0, 2])
            .map(|(l, rank)| {
                let (cfg, hosts) = (cfg.clone(), hosts.clone());
                tokio::spawn(async move {
                    Transport::connect(&cfg, &hosts, rank, job, SECRET, l, Pool::default()).await
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap().err().map(|e| e.to_string()));
        }
        out
    });
    for r in [0, 2] {
        let e = results[r].as_deref().expect("start-up fails");
        assert!(e.starts_with(&format!("rank {r}: start-up failed")), "{e}");
        assert!(
            e.contains(&format!("rank 1 ({}) did not connect", hosts[1])),
            "{e}"
        );
    }
}
