//! `harp nbody`: N-body with direct forces and leapfrog steps.

use clap::Args;
use harp::apps::exchange::Exchange;
use harp::apps::nbody::{self, Options};
use harp::config::apps;
use harp::{Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct NbodyArgs {
    #[arg(long, help = apps::NBODY.help("bodies"), default_value = apps::NBODY.default("bodies"))]
    pub bodies: usize,
    #[arg(long, help = apps::NBODY.help("steps"), default_value = apps::NBODY.default("steps"))]
    pub steps: usize,
    #[arg(long, help = apps::NBODY.help("dt"), default_value = apps::NBODY.default("dt"))]
    pub dt: f64,
    #[arg(long, help = apps::NBODY.help("softening"), default_value = apps::NBODY.default("softening"))]
    pub softening: f64,
    #[arg(long, help = apps::NBODY.help("seed"), default_value = apps::NBODY.default("seed"))]
    pub seed: u64,
    #[arg(long, help = apps::NBODY.help("threads"), default_value = apps::NBODY.default("threads"))]
    pub threads: usize,
    #[arg(long, help = apps::NBODY.help("exchange"), default_value = apps::NBODY.default("exchange"),
          value_parser = <Exchange as std::str::FromStr>::from_str)]
    pub exchange: Exchange,
    #[arg(long, help = apps::NBODY.help("output"))]
    pub output: String,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub recovery: crate::output::RecoveryOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

fn options(a: &NbodyArgs) -> Result<Options> {
    let o = Options {
        bodies: a.bodies,
        steps: a.steps,
        dt: a.dt,
        softening: a.softening,
        seed: a.seed,
        threads: a.threads,
        exchange: a.exchange,
        recovery: a.recovery.recovery(&a.output)?,
    };
    o.validate()?;
    Ok(o)
}

pub fn run(w: &Worker, a: &NbodyArgs) -> Result<()> {
    let o = options(a)?;
    // With --resume the output directory may hold the result of the run being continued.
    let oo = a.recovery.output(&a.out);
    let out = crate::output::prepare_output(w, &a.output, &[], &oo, "nbody-output")?;
    let master = w.is_master();
    crate::output::into_output(w, out, |out| {
        let res = nbody::run(w, &o, |s| {
            if master {
                println!(
                    "step {:>4}/{}  compute {:.4} s  comm {:.4} s",
                    s.step, o.steps, s.compute_s, s.comm_s
                );
            }
        })?;
        if let (true, Some(s)) = (master, res.resumed_from) {
            println!("resumed from the checkpoint at step {s}");
        }
        // The seconds per step of the steps this run made.
        let made = (o.steps - res.resumed_from.unwrap_or(0)).max(1) as f64;
        let compute: f64 = res.steps.iter().map(|s| s.compute_s).sum();
        let comm: f64 = res.steps.iter().map(|s| s.comm_s).sum();
        let summary = || {
            serde_json::json!({
                "workers": w.size(),
                "threads": o.threads,
                "bodies": o.bodies,
                "steps": o.steps,
                "dt": o.dt,
                "softening": o.softening,
                "seed": o.seed,
                "exchange": o.exchange.name(),
                "network_model": w.net_model().is_some(),
                "energy_initial": res.energy_initial,
                "energy_final": res.energy_final,
                "energy_drift": res.energy_drift(),
                "steps_s": res.steps_s,
                "step_s": res.steps_s / made,
                "resumed_from": res.resumed_from,
                "compute_s": compute,
                "comm_s": comm,
                "per_step": res.steps,
            })
        };
        let part = nbody::format_bodies(&res);
        crate::output::commit_with_summary(w, out, "nbody", summary, &part)?;
        if master {
            println!(
                "nbody: {} bodies, {} steps on {} workers ({}, network model {}): {:.4} s per \
                 step; energy {:.9e} -> {:.9e}, drift {:.3e}",
                o.bodies,
                o.steps,
                w.size(),
                o.exchange,
                if w.net_model().is_some() { "on" } else { "off" },
                res.steps_s / made,
                res.energy_initial,
                res.energy_final,
                res.energy_drift()
            );
            println!("wrote {}/part-* and summary.json", out.dir());
        }
        Ok(())
    })
}
