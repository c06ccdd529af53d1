//! `harp layout`: force-directed graph drawing (Fruchterman–Reingold).

use clap::Args;
use harp::apps::layout;
use harp::apps::output::Output;
use harp::{Result, Worker};

use crate::cluster::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct LayoutArgs {
    /// Edges: `src dst [weight]` lines of non-negative integer ids (a file or a directory of
    /// files; a weight is checked and not used).
    #[arg(long)]
    pub input: String,
    #[arg(long, default_value_t = 50)]
    pub iterations: usize,
    /// Seed of the initial positions (each vertex's from the seed and its id).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Compute threads per worker.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Output directory: part-RRRRR files of `vertex x y` lines (each worker's vertices, in id
    /// order), summary.json, _SUCCESS.
    #[arg(long)]
    pub output: String,
    #[command(flatten)]
    pub out: crate::cluster::OutputOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

pub fn run(w: &Worker, a: &LayoutArgs) -> Result<()> {
    let o = layout::Options {
        input: a.input.clone(),
        iterations: a.iterations,
        seed: a.seed,
        threads: a.threads,
    };
    // A failed run leaves the output directory as it was (no staging left behind).
    let out = crate::cluster::prepare_output(w, &a.output, &[&a.input], &a.out, "layout-output")?;
    crate::cluster::into_output(w, out, |out| run_into(w, &o, out))
}

fn run_into(w: &Worker, o: &layout::Options, out: &Output) -> Result<()> {
    let master = w.is_master();
    let res = layout::run(w, o, |it| {
        if master {
            println!(
                "iteration {:>3}/{}  temperature {:.4e}  compute {:.3} s  comm {:.4} s",
                it.iteration, o.iterations, it.temperature, it.compute_s, it.comm_s
            );
        }
    })?;
    let summary = if master {
        let compute: f64 = res.iterations.iter().map(|i| i.compute_s).sum();
        let comm: f64 = res.iterations.iter().map(|i| i.comm_s).sum();
        let s = serde_json::json!({
            "workers": w.size(),
            "threads": o.threads,
            "vertices": res.graph.vertices(),
            "edges": res.graph.edges(),
            "seed": o.seed,
            "input": o.input,
            "iterations": res.iterations,
            "load_s": res.load_s,
            "compute_s": compute,
            "comm_s": comm,
        });
        out.write(
            "summary.json",
            serde_json::to_string_pretty(&s).expect("json").as_bytes(),
        )
    } else {
        Ok(())
    };
    harp::worker::agree(w, "layout-summary", summary)?;
    let part = layout::format_positions(&res, res.first, res.count);
    out.commit_parts(w, "layout-commit", part.as_bytes(), &["summary.json"])?;
    if master {
        println!(
            "wrote {}/part-* and summary.json ({} vertices, {} edges)",
            out.dir(),
            res.graph.vertices(),
            res.graph.edges()
        );
    }
    Ok(())
}
