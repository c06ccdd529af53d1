//! `harp cg`: conjugate gradient on a sparse symmetric positive-definite system, and
//! `harp gen poisson`.

use clap::Args;
use harp::apps::cg::{self, Options};
use harp::apps::exchange::Exchange;
use harp::config::apps;
use harp::{storage, Error, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct CgArgs {
    #[arg(long, help = apps::CG.help("input"))]
    pub input: Option<String>,
    #[arg(long, help = apps::CG.help("grid"))]
    pub grid: Option<usize>,
    #[arg(long, help = apps::CG.help("rhs"))]
    pub rhs: Option<String>,
    #[arg(long, help = apps::CG.help("tolerance"), default_value = apps::CG.default("tolerance"))]
    pub tolerance: f64,
    #[arg(long, help = apps::CG.help("max_iterations"), default_value = apps::CG.default("max_iterations"))]
    pub max_iterations: usize,
    #[arg(long, help = apps::CG.help("threads"), default_value = apps::CG.default("threads"))]
    pub threads: usize,
    #[arg(long, help = apps::CG.help("exchange"), default_value = apps::CG.default("exchange"),
          value_parser = <Exchange as std::str::FromStr>::from_str)]
    pub exchange: Exchange,
    #[arg(long, help = apps::CG.help("output"))]
    pub output: String,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub recovery: crate::output::RecoveryOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

fn options(a: &CgArgs) -> Result<Options> {
    let o = Options {
        input: a.input.clone(),
        grid: a.grid,
        rhs: a.rhs.clone(),
        tolerance: a.tolerance,
        max_iterations: a.max_iterations,
        threads: a.threads,
        exchange: a.exchange,
        recovery: a.recovery.recovery(&a.output)?,
    };
    o.validate()?;
    Ok(o)
}

pub fn run(w: &Worker, a: &CgArgs) -> Result<()> {
    let o = options(a)?;
    let inputs: Vec<&str> = a.input.iter().chain(&a.rhs).map(String::as_str).collect();
    // With --resume the output directory may hold the result of the run being continued.
    let oo = a.recovery.output(&a.out);
    let out = crate::output::prepare_output(w, &a.output, &inputs, &oo, "cg-output")?;
    let master = w.is_master();
    crate::output::into_output(w, out, |out| {
        let res = cg::run(w, &o, |it| {
            if master {
                println!(
                    "iteration {:>4}  residual {:.6e}  compute {:.4} s  comm {:.4} s",
                    it.iteration, it.residual, it.compute_s, it.comm_s
                );
            }
        })?;
        if let (true, Some(k)) = (master, res.resumed_from) {
            println!("resumed from the checkpoint at iteration {k}");
        }
        let iterations = res.iterations.len();
        // The seconds per iteration of the iterations this run made.
        let made = iterations - res.resumed_from.unwrap_or(0);
        let per_iteration = res.iterations_s / made.max(1) as f64;
        let compute: f64 = res.iterations.iter().map(|s| s.compute_s).sum();
        let comm: f64 = res.iterations.iter().map(|s| s.comm_s).sum();
        let summary = || {
            serde_json::json!({
                "workers": w.size(),
                "threads": o.threads,
                "n": res.n,
                "nnz": res.nnz,
                "input": o.input,
                "grid": o.grid,
                "rhs": o.rhs,
                "exchange": o.exchange.name(),
                "network_model": w.net_model().is_some(),
                "tolerance": o.tolerance,
                "norm": "2-norm of the residual r = b - A x, against that of r0 = b",
                "g0": res.g0,
                "residual": res.residual,
                "relative_residual": if res.g0 > 0.0 { res.residual / res.g0 } else { 0.0 },
                "converged": res.converged,
                "iterations": iterations,
                "load_s": res.load_s,
                "iterations_s": res.iterations_s,
                "iteration_s": per_iteration,
                "resumed_from": res.resumed_from,
                "compute_s": compute,
                "comm_s": comm,
                "per_iteration": res.iterations,
            })
        };
        let part = cg::format_x(&res);
        crate::output::commit_with_summary(w, out, "cg", summary, &part)?;
        if master {
            println!(
                "cg: n {} ({} entries) on {} workers ({}, network model {}): {} after {} \
                 iterations, |r| {:.3e} = {:.3e} |r0|; {:.5} s per iteration",
                res.n,
                res.nnz,
                w.size(),
                o.exchange,
                if w.net_model().is_some() { "on" } else { "off" },
                if res.converged {
                    "converged"
                } else {
                    "not converged"
                },
                iterations,
                res.residual,
                if res.g0 > 0.0 {
                    res.residual / res.g0
                } else {
                    0.0
                },
                per_iteration
            );
            println!("wrote {}/part-* and summary.json", out.dir());
        }
        Ok(())
    })
}

/// `harp gen poisson`.
#[derive(Args, Clone, Debug)]
pub struct GenPoissonArgs {
    /// Grid side G: the matrix has G² rows.
    #[arg(long)]
    pub grid: usize,
    /// The matrix file to write (`row col value` lines of the lower triangle).
    #[arg(long)]
    pub output: String,
}

pub fn gen(a: &GenPoissonArgs) -> Result<()> {
    if a.grid == 0 || a.grid > cg::MAX_GRID {
        return Err(Error::config(format!(
            "--grid must be from 1 to {}, not {}",
            cg::MAX_GRID,
            a.grid
        )));
    }
    let rows = a.grid as u128 * a.grid as u128;
    harp::util::memory::check_fits("the generated matrix", rows.checked_mul(3 * 40))?;
    let entries = cg::poisson_lower(a.grid);
    let mut s = String::with_capacity(entries.len() * 24);
    for (i, j, v) in &entries {
        s.push_str(&format!("{i} {j} {v}\n"));
    }
    storage::for_path(&a.output)?.write_all(&a.output, s.as_bytes())?;
    println!(
        "wrote the {}×{} grid's Poisson matrix ({} rows, {} lower entries) to {}",
        a.grid,
        a.grid,
        rows,
        entries.len(),
        a.output
    );
    Ok(())
}
