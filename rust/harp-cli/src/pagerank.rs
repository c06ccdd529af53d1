//! `harp pagerank`.

use clap::Args;
use harp::apps::pagerank::{self, Messages, Options};
use harp::{Error, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct PagerankArgs {
    /// Edges: a file or a directory of files, one `src dst [weight]` line per edge
    /// (non-negative integer ids, an optional positive weight, 1 when absent; blank lines and
    /// lines starting with `#` are skipped).
    #[arg(long)]
    pub input: String,
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// Damping factor d in [0, 1].
    #[arg(long, default_value_t = 0.85)]
    pub damping: f64,
    /// Compute threads per worker.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// How contributions travel: compiled (dense arrays in a fixed key order) or kv (a
    /// key-value message table every iteration). Same ranks either way.
    #[arg(long, default_value = "compiled")]
    pub messages: String,
    /// Output directory: one part-RRRRR file per worker of `vertex<TAB>rank` lines, and
    /// _SUCCESS (nothing is written on failure).
    #[arg(long)]
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
