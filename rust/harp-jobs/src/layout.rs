//! `harp layout`: force-directed graph drawing (Fruchterman–Reingold).

use clap::Args;
use harp::apps::layout;
use harp::apps::output::Output;
use harp::config::apps;
use harp::{Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct LayoutArgs {
    #[arg(long, help = apps::LAYOUT.help("input"))]
    pub input: String,
    #[arg(long, help = apps::LAYOUT.help("iterations"), default_value = apps::LAYOUT.default("iterations"))]
    pub iterations: usize,
    #[arg(long, help = apps::LAYOUT.help("seed"), default_value = apps::LAYOUT.default("seed"))]
    pub seed: u64,
    #[arg(long, help = apps::LAYOUT.help("threads"), default_value = apps::LAYOUT.default("threads"))]
    pub threads: usize,
    #[arg(long, help = apps::LAYOUT.help("output"))]
    pub output: String,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
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
    let out = crate::output::prepare_output(w, &a.output, &[&a.input], &a.out, "layout-output")?;
    crate::output::into_output(w, out, |out| run_into(w, &o, out))
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
