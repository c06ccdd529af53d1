//! `harp kmeans` and `harp gen points`.

use clap::Args;
use harp::apps::kmeans::{driver, gen as generate, input};
use harp::collective::AllreduceAlgorithm;
use harp::{storage, Error, Result, Worker};

use crate::cluster::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct KmeansArgs {
    /// Points: a file or a directory of files.
    #[arg(long)]
    pub input: String,
    /// Initial centroids (text, one per line); K and the dimension come from this file.
    #[arg(long)]
    pub init: String,
    #[arg(long, default_value_t = 10)]
    pub iterations: usize,
    /// Output directory for centroids.txt and summary.json (written by rank 0).
    #[arg(long)]
    pub output: String,
    /// Compute threads per worker.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Input format: text (one point per line) or f32 (raw little-endian f32 records).
    #[arg(long, default_value = "text")]
    pub format: String,
    /// Leading columns to ignore on each text line (3 for the papers' HOG files).
    #[arg(long, default_value_t = 0)]
    pub skip_columns: usize,
    /// Allreduce algorithm: auto, bidirectional-exchange or regroup-allgather.
    #[arg(long, default_value = "auto")]
    pub allreduce: String,
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
    let format: input::Format = a.format.parse()?;
    let st = storage::for_path(&a.output)?;
    generate::generate_points(
        &*st, &a.output, a.n, a.dim, a.seed, a.files, format, a.clusters,
    )?;
    println!(
        "wrote {} points of dimension {} to {}/points/",
        a.n, a.dim, a.output
    );
    if let Some(k) = a.init {
        if k == 0 {
            return Err(Error::config("--init must be at least 1"));
        }
        let path = format!("{}/init.txt", a.output.trim_end_matches('/'));
        generate::generate_init(&*st, &path, k, a.dim, a.seed ^ 0x5eed)?;
        println!("wrote {k} initial centroids to {path}");
    }
    Ok(())
}

pub fn run(w: &Worker, a: &KmeansArgs) -> Result<()> {
    if a.iterations == 0 || a.threads == 0 {
        return Err(Error::config(
            "--iterations and --threads must be at least 1",
        ));
    }
    let opts = driver::Options {
        input: a.input.clone(),
        init: a.init.clone(),
        iterations: a.iterations,
        threads: a.threads,
        format: a.format.parse()?,
        skip_columns: a.skip_columns,
        allreduce: AllreduceAlgorithm::parse(&a.allreduce)?,
    };
    let master = w.is_master();
    let out = driver::run(w, &opts, |it| {
        if master {
            println!(
                "iteration {:>3}/{}  inertia {:.6e}  compute {:.3} s  comm {:.4} s",
                it.iteration, a.iterations, it.inertia, it.compute_s, it.comm_s
            );
        }
    })?;
    if !master {
        return Ok(());
    }
    let st = storage::for_path_on(&a.output, Some(w.runtime().clone()))?;
    let dir = a.output.trim_end_matches('/');
    st.create_dir_all(dir)?;
    st.write_all(
        &format!("{dir}/centroids.txt"),
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
        "input": a.input,
        "init": a.init,
    });
    st.write_all(
        &format!("{dir}/summary.json"),
        serde_json::to_string_pretty(&summary)
            .expect("json")
            .as_bytes(),
    )?;
    println!(
        "wrote {dir}/centroids.txt and {dir}/summary.json ({} points, k={}, dim={})",
        out.points, out.centroids.n, out.centroids.dim
    );
    Ok(())
}
