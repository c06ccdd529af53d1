//! `harp events-check`: a random event workload with adversarial timing, to verify the events
//! and the termination detection with real processes (docs/events.md). Every handled event
//! sends 0..3 events to random workers while its hop budget lasts; handlers sometimes sleep;
//! the last rank joins odd phases late; phase 2 has one hop that sleeps long inside a handler
//! while the detection waves run. After each phase the job checks, with one allreduce, that the
//! events sent by all workers equal those handled and the detected total, and that nothing
//! arrives afterwards. `--die-rank`/`--hang-rank` inject a crash or a stuck handler.
//!
//! `--flood BYTES` checks the flow control of events instead ([`flood`]).

use harp::Collectives;
use harp::Opts;
use std::time::Duration;

use clap::Args;
use harp::util::Rng;
use harp::{Array, Combiner, Error, Result, Table, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct EventsCheckArgs {
    /// Phases (calls of run_until_quiet) to run.
    #[arg(long, default_value_t = 4)]
    pub phases: u64,
    /// Hop budget of the initial events.
    #[arg(long, default_value_t = 6)]
    pub hops: u64,
    /// Longest random sleep inside a handler, in milliseconds.
    #[arg(long, default_value_t = 3)]
    pub delay_ms: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// This rank's process exits (as if killed) at its first event of phase 1.
    #[arg(long)]
    pub die_rank: Option<usize>,
    /// This rank's handler hangs (sleeps an hour) at its first event of phase 1.
    #[arg(long)]
    pub hang_rank: Option<usize>,
    /// Flow-control check instead of the phases: every rank but 0 sends BYTES of 4 KiB events
    /// to rank 0 (which takes them slowly), with an allreduce while the event lane is full
    /// (suffixes k, m, g = KiB, MiB, GiB).
    #[arg(long, value_parser = harp::config::parse_bytes, default_value = "0")]
    pub flood: u64,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

/// Fails unless `--flood BYTES` (0: no flood check) can run with an event window of
/// `window` bytes: at least one event, and a window that holds one.
pub fn check_flood(window: u64, flood: u64) -> Result<()> {
    if flood == 0 {
        return Ok(());
    }
    if window < FLOOD_EVENT as u64 {
        return Err(Error::config(format!(
            "events-check --flood needs --event-window of at least {FLOOD_EVENT} bytes, not \
             {window}"
        )));
    }
    if flood < FLOOD_EVENT as u64 {
        return Err(Error::config(format!(
            "events-check --flood {flood}: at least one event of {FLOOD_EVENT} bytes"
        )));
    }
    Ok(())
}

/// The events of [`flood`].
const FLOOD_EVENT: usize = 4096;

/// The flow-control check (`--flood BYTES`, needs an event window of at least one event):
/// 1. every rank but 0 sends rank 0 one event window's worth of events (all it may send
///    without credit), then every worker runs a 4 MiB allreduce and a barrier while rank 0
///    has taken none of them (collectives must pass a full event lane on the same
///    connections);
/// 2. the senders send the rest of their BYTES as fast as they can (blocking on credit), rank 0
///    takes every event in sender order, sleeping 1 ms every 16 events;
/// 3. rank 0 checks the content and that at most one window of event bytes was ever queued
///    from one sender (`Worker::events_stats`), and prints the figures.
///
/// `--die-rank 0` / `--hang-rank 0` make rank 0 exit / hang after its first 64 events of step
/// 2: the blocked senders must fail naming it.
pub fn flood(w: &Worker, a: &EventsCheckArgs) -> Result<()> {
    let (r, p) = (w.rank(), w.size());
    let window = w.config().event_window;
    check_flood(window, a.flood)?;
    let total = a.flood / FLOOD_EVENT as u64;
    let first = (window / FLOOD_EVENT as u64).min(total);
    let event = |i: u64| {
        let mut m = vec![r as u8; FLOOD_EVENT];
        m[..8].copy_from_slice(&i.to_le_bytes());
        m
    };
    if r != 0 {
        for i in 0..first {
            w.send_event(0, &event(i))?;
        }
    }
    let mut t = Table::new(Combiner::Sum);
    t.put(0, Array::from_slice(w.pool(), &vec![1.0f64; 512 * 1024]));
    w.allreduce("flood-full-lane", &mut t, Opts::default())?;
    if t.get(0).expect("sum").as_slice::<f64>()?[0] != p as f64 {
        return Err(Error::data(
            "events-check --flood: allreduce next to a full event lane is wrong",
        ));
    }
    w.barrier("flood-full-lane")?;
    if r != 0 {
        for i in first..total {
            w.send_event(0, &event(i))?;
        }
    } else {
        let mut next = vec![0u64; p];
        let mut taken = 0u64;
        while taken < total * (p as u64 - 1) {
            let Some(ev) = w.wait_event(w.config().op_timeout)? else {
                continue;
            };
            let m = ev.payload();
            let i = u64::from_le_bytes(m[..8].try_into().expect("8 bytes"));
            if m.len() != FLOOD_EVENT
                || i != next[ev.src]
                || m[8..].iter().any(|&b| b != ev.src as u8)
            {
                return Err(Error::data(format!(
                    "events-check --flood: event {i} of rank {} (expected {}) is wrong",
                    ev.src, next[ev.src]
                )));
            }
            next[ev.src] += 1;
            taken += 1;
            if taken == 64 {
                if a.die_rank == Some(0) {
                    eprintln!("rank 0: exiting on purpose (--die-rank)");
                    std::process::exit(9);
                }
                if a.hang_rank == Some(0) {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            if taken.is_multiple_of(16) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let s = w.events_stats();
        if s.peak_sender_bytes > window || s.queued_bytes != 0 {
            return Err(Error::data(format!(
                "events-check --flood: {} event bytes queued from one sender at most (the window \
                 is {window}), {} still queued",
                s.peak_sender_bytes, s.queued_bytes
            )));
        }
        println!(
            "flood: {} bytes of events from each of {} senders taken in order; at most {} bytes \
             queued from one sender (window {window})",
            total * FLOOD_EVENT as u64,
            p - 1,
            s.peak_sender_bytes
        );
    }
    w.barrier("flood-end")
}

fn msg(hops: u64, slow: bool) -> [u8; 9] {
    let mut m = [0u8; 9];
    m[..8].copy_from_slice(&hops.to_le_bytes());
    m[8] = slow as u8;
    m
}

pub fn run(w: &Worker, a: &EventsCheckArgs) -> Result<()> {
    crate::check::fault_rank("--die-rank", a.die_rank, w.size())?;
    crate::check::fault_rank("--hang-rank", a.hang_rank, w.size())?;
    if a.flood > 0 {
        return flood(w, a);
    }
    let (r, p) = (w.rank(), w.size());
    let mut rng = Rng::new(a.seed ^ (r as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
    for phase in 1..=a.phases {
        if r == p - 1 && phase % 2 == 1 {
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut sent = 0u64;
        for _ in 0..3 {
            w.send_event(rng.below(p), &msg(a.hops, false))?;
            sent += 1;
        }
        if r == 0 && phase == 2 {
            w.send_event(p - 1, &msg(0, true))?;
            sent += 1;
        }
        let mut first = true;
        let q = w.run_until_quiet(|ev| {
            let m = ev.payload();
            if m.len() != 9 {
                return Err(Error::data(format!(
                    "events-check: rank {} sent a {}-byte event",
                    ev.src,
                    m.len()
                )));
            }
            if phase == 1 && std::mem::take(&mut first) {
                if a.die_rank == Some(r) {
                    eprintln!("rank {r}: exiting on purpose (--die-rank)");
                    std::process::exit(9);
                }
                if a.hang_rank == Some(r) {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            let hops = u64::from_le_bytes(m[..8].try_into().expect("8 bytes"));
            if m[8] == 1 {
                std::thread::sleep(Duration::from_millis(150));
                w.send_event(0, &msg(0, false))?;
                sent += 1;
                return Ok(());
            }
            if a.delay_ms > 0 && rng.below(8) == 0 {
                std::thread::sleep(Duration::from_millis(
                    rng.below(a.delay_ms as usize + 1) as u64
                ));
            }
            if hops > 0 {
                for _ in 0..rng.below(3) {
                    w.send_event(rng.below(p), &msg(hops - 1, false))?;
                    sent += 1;
                }
            }
            Ok(())
        })?;
        // Nothing may arrive after termination, even a while later.
        std::thread::sleep(Duration::from_millis(20));
        if let Some(ev) = w.try_event()? {
            return Err(Error::data(format!(
                "events-check phase {phase}: an event from rank {} arrived after termination",
                ev.src
            )));
        }
        let mut t = Table::new(Combiner::Sum);
        t.put(
            0,
            Array::from_slice(w.pool(), &[sent as i64, q.handled as i64]),
        );
        w.allreduce("events-check", &mut t, Opts::default())?;
        let sums = t.get(0).expect("sums").as_slice::<i64>()?.to_vec();
        if sums[0] != sums[1] || sums[0] as u64 != q.events {
            return Err(Error::data(format!(
                "events-check phase {phase}: {} events sent, {} handled, {} detected",
                sums[0], sums[1], q.events
            )));
        }
        if w.is_master() {
            println!(
                "phase {phase}: {} events sent = handled = detected, {} detection waves",
                q.events, q.waves
            );
        }
    }
    Ok(())
}
