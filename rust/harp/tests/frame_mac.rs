//! Per-frame integrity (`Config::frame_mac`) over real sockets on loopback: a job with frame
//! MACs gives the results of the sequential model and the same bytes as without; workers with
//! different settings refuse each other at start-up, naming the setting; and a bit flipped on
//! the wire by a man in the middle fails the job with a protocol error naming the sender (while
//! without frame MACs the same flip silently changes the result).

use harp::Collectives;
use harp::Opts;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use harp::check::{self, Faults, Spec};
use harp::collective::AllreduceAlgorithm;
use harp::{Array, Combiner, Config, Table, Worker};

mod common;
use common::tcp_job;

fn cfg(frame_mac: bool) -> Config {
    Config {
        frame_mac,
        op_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

/// Rank r's table: partition 0 of `n` i64 values depending on r, and a small partition 1.
fn table(r: usize, n: usize, pool: &harp::Pool) -> Table {
    let mut t = Table::new(Combiner::Sum);
    let big: Vec<i64> = (0..n as i64).map(|i| i * 7 + r as i64 * 1000).collect();
    t.add(0, Array::from_slice(pool, &big)).unwrap();
    t.add(1, Array::from_slice(pool, &[r as i64, 1])).unwrap();
    t
}

/// The allreduced partitions 0 and 1 of a `p`-worker job.
fn expected(p: usize, n: usize) -> (Vec<i64>, Vec<i64>) {
    let s: i64 = (0..p as i64).map(|r| r * 1000).sum();
    let big = (0..n as i64).map(|i| i * 7 * p as i64 + s).collect();
    let small = vec![(0..p as i64).sum(), p as i64];
    (big, small)
}

/// Allreduces the test table with both algorithms; returns partition 0 and 1 of the result.
fn allreduce_job(w: &Worker, n: usize) -> harp::Result<Vec<Vec<i64>>> {
    let mut out = Vec::new();
    for algo in [
        AllreduceAlgorithm::BidirectionalExchange,
        AllreduceAlgorithm::RegroupAllgather,
    ] {
        let mut t = table(w.rank(), n, w.pool());
        w.allreduce("sum", &mut t, Opts::default().algorithm(algo))?;
        for pid in [0, 1] {
            out.push(t.get(pid).unwrap().as_slice::<i64>()?.to_vec());
        }
    }
    Ok(out)
}

#[test]
fn a_job_with_frame_macs_matches_the_model_and_the_same_job_without() {
    let n = 300_000;
    let (big, small) = expected(3, n);
    let mut results = Vec::new();
    for mac in [true, false] {
        let got = tcp_job(
            &[cfg(mac), cfg(mac), cfg(mac)],
            |_, a| a.to_vec(),
            |w| {
                let w = w.unwrap();
                let spec = Spec {
                    rounds: 1,
                    ..Spec::default()
                };
                let report = check::run(&w, &spec, &Faults::default(), &mut |_, _| Ok(())).unwrap();
                let sums = allreduce_job(&w, n).unwrap();
                w.close();
                (report.verified, sums)
            },
        );
        for (r, (verified, sums)) in got.iter().enumerate() {
            assert!(*verified > 0, "frame_mac={mac} rank {r}");
            assert_eq!(sums[0], big, "frame_mac={mac} rank {r}");
            assert_eq!(sums[1], small, "frame_mac={mac} rank {r}");
            assert_eq!(sums[2], big, "frame_mac={mac} rank {r}");
        }
        results.push(got);
    }
    assert_eq!(
        results[0], results[1],
        "the same results with and without frame MACs"
    );
}

#[test]
fn workers_with_different_settings_refuse_each_other_at_start_up() {
    for (mac0, mac1) in [(true, false), (false, true)] {
        let start = Instant::now();
        let errs = tcp_job(
            &[cfg(mac0), cfg(mac1)],
            |_, a| a.to_vec(),
            |w| w.err().expect("start-up must fail"),
        );
        let on_off = |b: bool| if b { "on" } else { "off" };
        for (r, e) in errs.iter().enumerate() {
            let (mine, theirs) = if r == 0 { (mac0, mac1) } else { (mac1, mac0) };
            assert_eq!(e.kind(), "startup", "{e}");
            let want = format!(
                "rank {r}: start-up failed: rank {} has per-frame integrity (frame_mac, \
                 --frame-mac, harp.frame.mac) {} and this worker has it {}",
                1 - r,
                on_off(theirs),
                on_off(mine)
            );
            assert!(e.to_string().starts_with(&want), "{e}");
        }
        // Refused at once, not after the 20 s connect timeout.
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }
}

/// A proxy for one connection to `to` that flips one bit of the byte at offset `at` of the
/// stream from the dialer to `to`.
fn flipping_proxy(to: SocketAddr, at: u64) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut inbound, _) = l.accept().unwrap();
        let mut outbound = TcpStream::connect(to).unwrap();
        let (mut back_in, mut back_out) =
            (outbound.try_clone().unwrap(), inbound.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut back_in, &mut back_out);
            let _ = back_out.shutdown(std::net::Shutdown::Write);
        });
        let (mut seen, mut buf) = (0u64, vec![0u8; 64 * 1024]);
        loop {
            let n = match inbound.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if (seen..seen + n as u64).contains(&at) {
                buf[(at - seen) as usize] ^= 0x10;
            }
            if outbound.write_all(&buf[..n]).is_err() {
                break;
            }
            seen += n as u64;
        }
        let _ = outbound.shutdown(std::net::Shutdown::Write);
    });
    addr
}

/// Rank 1 reaches rank 0 through a proxy that flips a bit 1 MiB into rank 1's stream (inside
/// the payload of its first large piece).
fn tampered_job(mac: bool) -> Vec<harp::Result<Vec<Vec<i64>>>> {
    tcp_job(
        &[cfg(mac), cfg(mac)],
        |r, a| {
            let mut a = a.to_vec();
            if r == 1 {
                a[0] = flipping_proxy(a[0], 1 << 20);
            }
            a
        },
        |w| {
            let w = w.unwrap();
            let got = allreduce_job(&w, 1 << 20);
            if got.is_ok() {
                w.close();
            }
            got
        },
    )
}

#[test]
fn a_bit_flipped_on_the_wire_is_a_protocol_error_naming_the_sender() {
    let got = tampered_job(true);
    let e = got[0].as_ref().unwrap_err();
    assert_eq!(e.kind(), "protocol", "{e}");
    assert!(
        e.to_string()
            .contains("rank 1 sent a Data frame whose integrity tag does not verify"),
        "{e}"
    );
    let e = got[1].as_ref().unwrap_err().to_string();
    assert!(e.contains("rank 0 is gone: it failed: "), "{e}");

    // Without frame MACs the same flip goes unnoticed: rank 0's result is wrong.
    let got = tampered_job(false);
    let (big, _) = expected(2, 1 << 20);
    let sums = got[0].as_ref().expect("without MACs nothing is detected");
    assert_ne!(sums[0], big, "the flipped bit changed rank 0's result");
}
