//! `harp events-check`: a random event workload with adversarial timing, to verify the events
//! and the termination detection with real processes (docs/events.md). Every handled event
//! sends 0..3 events to random workers while its hop budget lasts; handlers sometimes sleep;
//! the last rank joins odd phases late; phase 2 has one hop that sleeps long inside a handler
//! while the detection waves run. After each phase the job checks, with one allreduce, that the
//! events sent by all workers equal those handled and the detected total, and that nothing
//! arrives afterwards. `--die-rank`/`--hang-rank` inject a crash or a stuck handler.

use std::time::Duration;

use clap::Args;
use harp::apps::kmeans::gen::Rng;
use harp::collective::AllreduceAlgorithm;
use harp::{Array, Combiner, Error, Result, Table, Worker};

use crate::cluster::ClusterOpts;

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
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

fn msg(hops: u64, slow: bool) -> [u8; 9] {
    let mut m = [0u8; 9];
    m[..8].copy_from_slice(&hops.to_le_bytes());
    m[8] = slow as u8;
    m
}

pub fn run(w: &Worker, a: &EventsCheckArgs) -> Result<()> {
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
        w.allreduce("events-check", &mut t, AllreduceAlgorithm::Auto)?;
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
