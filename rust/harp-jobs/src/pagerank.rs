//! `harp pagerank`.

use clap::Args;
use harp::apps::pagerank::{self, Messages, Options};
use harp::config::apps;
use harp::{Error, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct PagerankArgs {
    #[arg(long, help = apps::PAGERANK.help("input"))]
    pub input: String,
    #[arg(long, help = apps::PAGERANK.help("iterations"), default_value = apps::PAGERANK.default("iterations"))]
    pub iterations: usize,
    #[arg(long, help = apps::PAGERANK.help("damping"), default_value = apps::PAGERANK.default("damping"))]
    pub damping: f64,
    #[arg(long, help = apps::PAGERANK.help("threads"), default_value = apps::PAGERANK.default("threads"))]
    pub threads: usize,
    #[arg(long, help = apps::PAGERANK.help("messages"), default_value = apps::PAGERANK.default("messages"))]
    pub messages: String,
    #[arg(long, help = apps::PAGERANK.help("output"))]
    pub output: String,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

fn options(a: &PagerankArgs) -> Result<Options> {
    let mut o = Options::new(a.input.clone(), a.iterations);
    o.damping = a.damping;
    o.threads = a.threads;
    o.messages = a
        .messages
        .parse::<Messages>()
        .map_err(|e| Error::config(format!("--messages: {e}")))?;
    o.validate()?;
    Ok(o)
}

pub fn run(w: &Worker, a: &PagerankArgs) -> Result<()> {
    let opts = options(a)?;
    let out = crate::output::prepare_output(w, &a.output, &[&a.input], &a.out, "pagerank-output")?;
    let master = w.is_master();
    let done = (|| {
        let res = pagerank::run(w, &opts, |it, secs| {
            if master {
                println!("iteration {it:>3}/{}  {secs:.4} s", opts.iterations);
            }
        })?;
        let text = pagerank::format_ranks(&res.vertices, &res.ranks);
        out.commit_parts(w, "pagerank-commit", text.as_bytes(), &[])?;
        Ok(res)
    })();
    let res = match done {
        Ok(r) => r,
        Err(e) => {
            // The output directory goes back to what it was (no staging left behind).
            if master {
                out.abort();
            }
            return Err(e);
        }
    };
    if master {
        // An empty f64 sum is -0.0: start from +0.0 so no iterations print 0.000, not -0.000.
        let iters: f64 = res.iteration_s.iter().fold(0.0, |a, b| a + b);
        println!(
            "pagerank: {} vertices, {} edges, {} iterations; load {:.3} s, iterations {:.3} s \
             ({:.4} s each), total {:.3} s",
            res.n,
            res.edges,
            opts.iterations,
            res.load_s,
            iters,
            iters / opts.iterations.max(1) as f64,
            res.load_s + iters
        );
        println!("wrote {} part files to {}", w.size(), out.dir());
    }
    Ok(())
}
