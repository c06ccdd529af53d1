//! `harp mds` (WDA-SMACOF) and `harp gen dist`.

use clap::Args;
use harp::apps::mds::{self, input};
use harp::apps::output::Output;
use harp::config::apps;
use harp::{storage, Error, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct MdsArgs {
    #[arg(long, help = apps::MDS.help("input"))]
    pub input: String,
    #[arg(long, help = apps::MDS.help("weights"))]
    pub weights: Option<String>,
    #[arg(long, help = apps::MDS.help("format"), default_value = apps::MDS.default("format"))]
    pub format: String,
    #[arg(long, help = apps::MDS.help("dim"), default_value = apps::MDS.default("dim"))]
    pub dim: usize,
    #[arg(long, help = apps::MDS.help("iterations"), default_value = apps::MDS.default("iterations"))]
    pub iterations: usize,
    #[arg(long, help = apps::MDS.help("init"))]
    pub init: Option<String>,
    #[arg(long, help = apps::MDS.help("seed"), default_value = apps::MDS.default("seed"))]
    pub seed: u64,
    #[arg(long, help = apps::MDS.help("threads"), default_value = apps::MDS.default("threads"))]
    pub threads: usize,
    #[arg(long, help = apps::MDS.help("solver"), default_value = apps::MDS.default("solver"))]
    pub solver: String,
    #[arg(long, help = apps::MDS.help("cg_iterations"), default_value = apps::MDS.default("cg_iterations"))]
    pub cg_iterations: usize,
    #[arg(long, help = apps::MDS.help("cg_tolerance"), default_value = apps::MDS.default("cg_tolerance"))]
    pub cg_tolerance: f64,
    #[arg(long, help = apps::MDS.help("temperature"), default_value = apps::MDS.default("temperature"))]
    pub temperature: f64,
    #[arg(long, help = apps::MDS.help("cooling"), default_value = apps::MDS.default("cooling"))]
    pub cooling: f64,
    #[arg(long, help = apps::MDS.help("output"))]
    pub output: String,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

fn flag<T>(name: &str, r: Result<T>) -> Result<T> {
    r.map_err(|e| Error::config(format!("{name}: {e}")))
}

/// The engine's options from the command line.
pub fn options(a: &MdsArgs) -> Result<mds::Options> {
    let mut o = mds::Options::new(a.input.clone());
    o.format = flag("--format", a.format.parse())?;
    o.weights = a.weights.clone();
    o.dim = a.dim;
    o.iterations = a.iterations;
    o.init = a.init.clone();
    o.seed = a.seed;
    o.threads = a.threads;
    o.solver = flag("--solver", a.solver.parse())?;
    o.cg_iterations = a.cg_iterations;
    o.cg_tolerance = a.cg_tolerance;
    o.temperature = a.temperature;
    o.cooling = a.cooling;
    o.validate()?;
    Ok(o)
}

pub fn run(w: &Worker, a: &MdsArgs) -> Result<()> {
    let o = options(a)?;
    // A failed run leaves the output directory as it was (no staging left behind).
    let out = crate::output::prepare_output(w, &a.output, &[&a.input], &a.out, "mds-output")?;
    crate::output::into_output(w, out, |out| run_into(w, &o, out))
}

fn run_into(w: &Worker, o: &mds::Options, out: &Output) -> Result<()> {
    let master = w.is_master();
    let res = mds::run(w, o, |it| {
        if master {
            println!(
                "iteration {:>3}/{}  stress {:.9e}  normalized {:.6e}{}  compute {:.3} s  comm {:.4} s",
                it.iteration,
                o.iterations,
                it.stress,
                it.normalized_stress,
                if it.temperature > 0.0 {
                    format!("  T {:.4e}", it.temperature)
                } else {
                    String::new()
                },
                it.compute_s,
                it.comm_s
            );
        }
    })?;
    // The commit waits until every worker has finished without error (the final agreement);
    // a failure of the commit itself is the master's.
    out.finish(w, "mds-commit")?;
    let written = if master {
        (|| {
            out.write(
                "coords.txt",
                input::format_rows(&res.coords, res.dim).as_bytes(),
            )?;
            let mut s = String::new();
            for it in &res.iterations {
                s.push_str(&format!(
                    "{} {:e} {:e}\n",
                    it.iteration, it.stress, it.normalized_stress
                ));
            }
            out.write("stress.txt", s.as_bytes())?;
            let n_it = res.iterations.len().max(1) as f64;
            let compute: f64 = res.iterations.iter().map(|i| i.compute_s).sum();
            let comm: f64 = res.iterations.iter().map(|i| i.comm_s).sum();
            let summary = serde_json::json!({
                "workers": w.size(),
                "threads": o.threads,
                "n": res.n,
                "dim": res.dim,
                "rows": res.rows,
                "solver": res.solver.name(),
                "weights": o.weights,
                "input": o.input,
                "format": o.format.name(),
                "init": o.init,
                "temperature": o.temperature,
                "cooling": o.cooling,
                "iterations": res.iterations,
                "load_s": res.load_s,
                "compute_s": compute,
                "comm_s": comm,
                "seconds_per_iteration": (compute + comm) / n_it,
                "comm_s_per_iteration": comm / n_it,
                "final_stress": res.final_stress.0,
                "final_normalized_stress": res.final_stress.1,
            });
            out.write(
                "summary.json",
                serde_json::to_string_pretty(&summary)
                    .expect("json")
                    .as_bytes(),
            )?;
            let files = RESULT_FILES.map(String::from);
            out.commit(&files, |name| RESULT_FILES.contains(&name))
        })()
    } else {
        Ok(())
    };
    written?;
    if master {
        println!(
            "final stress {:.9e} (normalized {:.6e}); wrote {}/coords.txt, stress.txt, summary.json \
             (N={}, dim={})",
            res.final_stress.0,
            res.final_stress.1,
            out.dir(),
            res.n,
            res.dim
        );
    }
    Ok(())
}

/// The files of a result.
const RESULT_FILES: [&str; 3] = ["coords.txt", "stress.txt", "summary.json"];

#[derive(Args, Clone, Debug)]
pub struct GenDistArgs {
    /// Number of points (the matrix is N×N).
    #[arg(long)]
    pub n: usize,
    /// Dimension of the random points (uniform in [0,1)).
    #[arg(long, default_value_t = 3)]
    pub dim: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Multiplicative noise: each distance times 1 + noise·u, u uniform in [-1, 1).
    #[arg(long, default_value_t = 0.0)]
    pub noise: f64,
    /// text or f64.
    #[arg(long, default_value = "text")]
    pub format: String,
    /// The file to write.
    #[arg(long)]
    pub output: String,
}

pub fn gen(a: &GenDistArgs) -> Result<()> {
    if a.n == 0 || a.dim == 0 {
        return Err(Error::config("--n and --dim must be at least 1"));
    }
    if !(a.noise.is_finite() && (0.0..1.0).contains(&a.noise)) {
        return Err(Error::config("--noise must be in [0, 1)"));
    }
    let format: input::Format = flag("--format", a.format.parse())?;
    harp::util::memory::check_fits(
        &format!("--n {}: an {0}×{0} matrix of f64", a.n),
        (a.n as u128).checked_mul(a.n as u128 * 8 * 3),
    )?;
    let d = mds::euclidean_distances(a.n, a.dim, a.seed, a.noise);
    let bytes = match format {
        input::Format::Text => input::format_rows(&d, a.n).into_bytes(),
        input::Format::F64 => d.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    storage::for_path(&a.output)?.write_all(&a.output, &bytes)?;
    println!(
        "wrote a {0}×{0} distance matrix ({1}) to {2}",
        a.n, format, a.output
    );
    Ok(())
}
