//! Hostile connections with real sockets: hundreds of idle strangers on a worker's listener
//! (more than the pending-connection cap), then the same while the process is out of file
//! descriptors (EMFILE). The real peers must still start the job, and the warnings stay few
//! (rate-limited, no busy loop writing log lines).
//!
//! One test function: it lowers this process's file limit, which would disturb any test
//! running beside it.

use std::net::{SocketAddr, TcpStream as StdStream};
use std::time::{Duration, Instant};

mod common;

use harp::config::Config;
use harp::pool::Pool;
use harp::transport::{job_id, listen, Transport};

const SECRET: &[u8] = b"fuzz-connections-secret-0123456789";

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// Starts a two-worker job after `strangers` idle connections to rank 0's listener (opened
/// before the real peer dials, so they are accepted first). With `fd_headroom`, the file
/// limit is lowered to leave only that many free descriptors once everything is open.
fn job_with_strangers(strangers: usize, fd_headroom: Option<u64>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cfg = Config {
        connect_timeout: Duration::from_secs(120),
        ..Config::default()
    };
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (l0, l1) = rt.block_on(async { (listen(any, &cfg).unwrap(), listen(any, &cfg).unwrap()) });
    let hosts = [l0.local_addr().unwrap(), l1.local_addr().unwrap()];
    let idle: Vec<StdStream> = (0..strangers)
        .map(|_| StdStream::connect(hosts[0]).unwrap())
        .collect();
    let old_limit = fd_headroom.map(|h| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: lim is a valid rlimit to fill / read.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
            let low = libc::rlimit {
                rlim_cur: open_fds() + h,
                rlim_max: lim.rlim_max,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &low), 0);
        }
        lim
    });
    let job = job_id("strangers");
    let (r0, r1) =
        rt.block_on(async {
            // Rank 1 first, so that it holds its socket before rank 0's accepts use up the limit.
            let t1 = tokio::spawn({
                let cfg = cfg.clone();
                async move {
                    Transport::connect(&cfg, &hosts, 1, job, SECRET, l1, Pool::default()).await
                }
            });
            tokio::task::yield_now().await;
            let t0 = Transport::connect(&cfg, &hosts, 0, job, SECRET, l0, Pool::default()).await;
            (t0, t1.await.unwrap())
        });
    if let Some(lim) = old_limit {
        // SAFETY: restores the limit read above.
        unsafe { assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0) };
    }
    let (t0, t1) = (r0.unwrap(), r1.unwrap());
    assert_eq!((t0.rank, t1.rank, t0.size), (0, 1, 2));
    drop(idle);
}

#[test]
fn idle_strangers_and_fd_exhaustion_do_not_keep_the_job_from_starting() {
    common::keep_warnings();
    let start = Instant::now();
    // More than the cap of 64 pending connections: the oldest are dropped.
    job_with_strangers(300, None);
    let after_cap = common::warnings_with("").len() as u64;
    assert!(after_cap >= 1, "dropping strangers is worth a warning");
    // Out of descriptors: accept fails with EMFILE until pending strangers are dropped.
    job_with_strangers(200, Some(6));
    let warnings = common::warnings_with("").len() as u64;
    // At most one warning per 5 s per worker, plus the first of each: not one per stranger or
    // per failed accept.
    let bound = 4 + 2 * (start.elapsed().as_secs() / 5 + 1);
    eprintln!(
        "{warnings} warnings ({after_cap} in the first job) in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(warnings <= bound, "{warnings} warnings (at most {bound})");
}
