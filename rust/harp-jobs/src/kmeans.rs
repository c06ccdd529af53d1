//! `harp kmeans` and `harp gen points`.

use clap::Args;
use harp::apps::kmeans::{driver, gen as generate, input};
use harp::apps::output::Output;
use harp::collective::AllreduceAlgorithm;
use harp::config::apps;
use harp::{storage, Error, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct KmeansArgs {
    #[arg(long, help = apps::KMEANS.help("input"))]
    pub input: String,
    #[arg(long, help = apps::KMEANS.help("init"))]
    pub init: Option<String>,
    #[arg(long, help = apps::KMEANS.help("init_method"))]
    pub init_method: Option<driver::InitMethod>,
    #[arg(long, help = apps::KMEANS.help("k"))]
    pub k: Option<usize>,
    #[arg(long, help = apps::KMEANS.help("seed"), default_value = apps::KMEANS.default("seed"))]
    pub seed: u64,
    #[arg(long, help = apps::KMEANS.help("dim"))]
    pub dim: Option<usize>,
    #[arg(long, help = apps::KMEANS.help("iterations"), default_value = apps::KMEANS.default("iterations"))]
    pub iterations: usize,
    #[arg(long, help = apps::KMEANS.help("output"))]
    pub output: String,
    #[arg(long, help = apps::KMEANS.help("checkpoint_every"), default_value = apps::KMEANS.default("checkpoint_every"))]
    pub checkpoint_every: usize,
    #[arg(long, help = apps::KMEANS.help("checkpoint_dir"))]
    pub checkpoint_dir: Option<String>,
    #[arg(long, help = apps::KMEANS.help("resume"))]
    pub resume: bool,
    #[arg(long, help = apps::KMEANS.help("threads"), default_value = apps::KMEANS.default("threads"))]
    pub threads: usize,
    #[arg(long, help = apps::KMEANS.help("format"), default_value = apps::KMEANS.default("format"))]
    pub format: String,
    #[arg(long, help = apps::KMEANS.help("skip_columns"), default_value = apps::KMEANS.default("skip_columns"))]
    pub skip_columns: usize,
    #[arg(long, help = apps::KMEANS.help("allreduce"), default_value = apps::KMEANS.default("allreduce"))]
    pub allreduce: String,
    #[arg(long, help = apps::KMEANS.help("precision"), default_value = apps::KMEANS.default("precision"))]
    pub precision: driver::Precision,
    #[arg(long, help = apps::KMEANS.help("assign"), default_value = apps::KMEANS.default("assign"))]
    pub assign: driver::AssignPath,
    #[arg(long, help = apps::KMEANS.help("tolerance"), allow_negative_numbers = true)]
    pub tolerance: Option<f64>,
    #[arg(long, help = apps::KMEANS.help("empty_cluster"), default_value = apps::KMEANS.default("empty_cluster"))]
    pub empty_cluster: driver::EmptyCluster,
    #[arg(long, help = apps::KMEANS.help("labels"))]
    pub labels: Option<String>,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

#[derive(Args, Clone, Debug)]
pub struct GenArgs {
    /// Number of points.
    #[arg(long)]
    pub n: usize,
    /// Dimension.
    #[arg(long)]
    pub dim: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory: points go to DIR/points/, initial centroids to DIR/init.txt.
    #[arg(long)]
    pub output: String,
    /// Also write K initial centroids to DIR/init.txt.
    #[arg(long)]
    pub init: Option<usize>,
    /// Number of point files.
    #[arg(long, default_value_t = 4)]
    pub files: usize,
    /// Number of Gaussian blobs the points are drawn from.
    #[arg(long, default_value_t = 16)]
    pub clusters: usize,
    /// text or f32.
    #[arg(long, default_value = "text")]
    pub format: String,
}

pub fn gen(a: &GenArgs) -> Result<()> {
    if a.n == 0 || a.dim == 0 || a.files == 0 || a.clusters == 0 {
        return Err(Error::config(
            "--n, --dim, --files and --clusters must be at least 1",
        ));
    }
    let format: input::Format = flag("--format", a.format.parse())?;
    if a.init == Some(0) {
        return Err(Error::config("--init must be at least 1"));
    }
    // Every size is checked before anything is written: points, then initial centroids.
    generate::check_points_memory(a.n, a.dim, a.files, a.clusters, format)?;
    if let Some(k) = a.init {
        generate::check_init_memory(k, a.dim)?;
    }
    let st = storage::for_path(&a.output)?;
    generate::generate_points(
        &*st, &a.output, a.n, a.dim, a.seed, a.files, format, a.clusters,
    )?;
    println!(
        "wrote {} points of dimension {} to {}/points/",
        a.n, a.dim, a.output
    );
    if let Some(k) = a.init {
        let path = format!("{}/init.txt", a.output.trim_end_matches('/'));
        generate::generate_init(&*st, &path, k, a.dim, a.seed ^ 0x5eed)?;
        println!("wrote {k} initial centroids to {path}");
    }
    Ok(())
}

/// Refuses, before any input is read, an `--iterations` or `--k` whose memory (the per-iteration
/// records; K centroids with their sums, of `--dim` values or at least 1) cannot fit in this host.
fn check_sizes(a: &KmeansArgs) -> Result<()> {
    use harp::util::memory::check_fits;
    if a.dim == Some(0) {
        return Err(Error::config("--dim must be at least 1"));
    }
    let per_iteration = std::mem::size_of::<driver::Iteration>() as u128;
    check_fits(
        &format!(
            "--iterations {}: the record of every iteration",
            a.iterations
        ),
        (a.iterations as u128).checked_mul(per_iteration),
    )?;
    if let Some(k) = a.k {
        let dim = a.dim.unwrap_or(1);
        let of = match a.dim {
            Some(d) => format!("of dimension {d}"),
            None => "(of at least one value each)".to_string(),
        };
        // Centroids, their sums and the new centroids, in f64; k-means++ samples 4k points.
        check_fits(
            &format!("--k {k}: {k} centroids {of} with their sums and samples"),
            (k as u128)
                .checked_mul(dim as u128)
                .and_then(|v| v.checked_mul(8 * 7)),
        )?;
    }
    Ok(())
}

/// Prefixes an error with the flag it came from.
fn flag<T>(name: &str, r: Result<T>) -> Result<T> {
    r.map_err(|e| Error::config(format!("{name}: {e}")))
}

/// The driver's options from the command line; every bad value names its flag.
pub fn options(a: &KmeansArgs) -> Result<driver::Options> {
    if a.iterations == 0 || a.threads == 0 {
        return Err(Error::config(
            "--iterations and --threads must be at least 1",
        ));
    }
    let init_method = match a.init_method {
        Some(m) => m,
        None if a.init.is_some() => driver::InitMethod::File,
        None if a.k.is_some() => driver::InitMethod::KmeansPlusPlus,
        None => {
            return Err(Error::config(
                "--init FILE or --init-method kmeans++|random with --k is required",
            ))
        }
    };
    match (init_method, &a.init, a.k) {
        (driver::InitMethod::File, None, _) => {
            return Err(Error::config("--init-method file needs --init FILE"))
        }
        (driver::InitMethod::File, Some(_), Some(_)) => {
            return Err(Error::config(
                "--k is only for --init-method kmeans++|random (K comes from the --init file)",
            ))
        }
        (driver::InitMethod::KmeansPlusPlus | driver::InitMethod::Random, _, None) => {
            return Err(Error::config(format!(
                "--init-method {init_method} needs --k"
            )))
        }
        (driver::InitMethod::KmeansPlusPlus | driver::InitMethod::Random, Some(_), _) => {
            return Err(Error::config(format!(
                "--init and --init-method {init_method} exclude each other"
            )))
        }
        (_, _, Some(0)) => return Err(Error::config("--k must be at least 1")),
        _ => {}
    }
    check_sizes(a)?;
    let mut o = driver::Options::new(a.input.clone(), a.init.clone().unwrap_or_default());
    o.iterations = a.iterations;
    o.threads = a.threads;
    o.format = flag("--format", a.format.parse())?;
    o.skip_columns = a.skip_columns;
    o.allreduce = flag("--allreduce", AllreduceAlgorithm::parse(&a.allreduce))?;
    o.precision = a.precision;
    o.assign = a.assign;
    o.empty_cluster = a.empty_cluster;
    if let Some(t) = a.tolerance {
        if !(t.is_finite() && t >= 0.0) {
            return Err(Error::config(format!(
                "--tolerance must be a finite number >= 0, not {t}"
            )));
        }
    }
    o.tolerance = a.tolerance;
    o.init_method = init_method;
    o.k = a.k;
    o.seed = a.seed;
    o.labels = a.labels.clone();
    o.dim = a.dim;
    o.checkpoint_every = a.checkpoint_every;
    o.resume = a.resume;
    if a.checkpoint_every > 0 || a.resume {
        o.checkpoint_dir = Some(
            a.checkpoint_dir
                .clone()
                .unwrap_or_else(|| format!("{}/_checkpoints", a.output.trim_end_matches('/'))),
        );
    } else if a.checkpoint_dir.is_some() {
        return Err(Error::config(
            "--checkpoint-dir needs --checkpoint-every N or --resume",
        ));
    }
    o.job = crate::output::job_name();
    flag("--checkpoint-dir/HARP_JOB", o.validate())?;
    Ok(o)
}

/// The checks [`run`] starts with that need no worker, for the local launcher to make once
/// before it starts any: the options (the memory of all the workers on this host included,
/// [`harp::util::memory::check_fits`]) and, for a local path, that the `--init` file exists.
pub fn precheck(a: &KmeansArgs) -> Result<()> {
    options(a)?;
    match &a.init {
        Some(p) if !p.contains("://") => std::fs::metadata(p).map(|_| ()).map_err(|e| {
            Error::io(
                format!("--init: cannot read {}", harp::util::quote(p.as_bytes())),
                e,
            )
        }),
        _ => Ok(()),
    }
}

/// The files of a result, in the order they are moved into the output directory.
const RESULT_FILES: [&str; 2] = ["centroids.txt", "summary.json"];

pub fn run(w: &Worker, a: &KmeansArgs) -> Result<()> {
    let opts = options(a)?;
    // The output must be usable before any iteration runs (an earlier run's result stays
    // untouched, and a failed run leaves the output as it was).
    // --resume continues the run whose result and checkpoints the output directory holds.
    let out = Output::prepare(
        w,
        &a.output,
        &[&a.input],
        &opts.job,
        "kmeans-output",
        a.out.overwrite || a.resume,
    )?;
    let done = run_into(w, a, &opts, &out);
    if done.is_err() && w.is_master() {
        out.abort();
    }
    done
}

fn run_into(w: &Worker, a: &KmeansArgs, opts: &driver::Options, dest: &Output) -> Result<()> {
    let master = w.is_master();
    let dir = dest.dir();
    let out = driver::run(w, opts, |it| {
        if master {
            let share = it
                .distances
                .map(|d| format!("  distances {:.1}%", d * 100.0))
                .unwrap_or_default();
            println!(
                "iteration {:>3}/{}  inertia {:.6e}  compute {:.3} s  comm {:.4} s{share}",
                it.iteration, a.iterations, it.inertia, it.compute_s, it.comm_s
            );
        }
    })?;
    // The commit waits until every worker has finished its last collective without error.
    dest.finish(w, "kmeans-commit")?;
    driver::commit_labels(w, opts)?;
    if !master {
        return Ok(());
    }
    dest.write(
        "centroids.txt",
        input::format_centroids(&out.centroids).as_bytes(),
    )?;
    let compute: f64 = out.iterations.iter().map(|i| i.compute_s).sum();
    let comm: f64 = out.iterations.iter().map(|i| i.comm_s).sum();
    let summary = serde_json::json!({
        "workers": w.size(),
        "threads": a.threads,
        "points": out.points,
        "k": out.centroids.n,
        "dim": out.centroids.dim,
        "iterations": out.iterations,
        "load_s": out.load_s,
        "compute_s": compute,
        "comm_s": comm,
        "final_inertia": out.iterations.last().map(|i| i.inertia),
        "stop_reason": out.stop_reason,
        "precision": opts.precision.name(),
        "assign": out.assign.name(),
        "empty_cluster": opts.empty_cluster.name(),
        "tolerance": opts.tolerance,
        "input": a.input,
        "init": a.init,
        "init_method": opts.init_method.name(),
        "resumed_from": out.resumed_from,
    });
    dest.write(
        "summary.json",
        serde_json::to_string_pretty(&summary)
            .expect("json")
            .as_bytes(),
    )?;
    let files: Vec<String> = RESULT_FILES.iter().map(|f| f.to_string()).collect();
    dest.commit(&files, |name| RESULT_FILES.contains(&name))?;
    if let Some(it) = out.resumed_from {
        println!("resumed from the checkpoint at iteration {it}");
    }
    println!(
        "wrote {dir}/centroids.txt and {dir}/summary.json ({} points, k={}, dim={})",
        out.points, out.centroids.n, out.centroids.dim
    );
    Ok(())
}
