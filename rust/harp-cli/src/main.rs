//! `harp`: runs Harp-RS jobs on an embedded local cluster (worker processes on loopback) or as
//! one worker of a cluster described by a hosts file.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod bench;
mod check;
mod cluster;
mod kmeans;

#[derive(Parser)]
#[command(
    name = "harp",
    version,
    about = "Harp-RS: Map-Collective jobs with MPI-style collectives"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate data sets.
    Gen {
        #[command(subcommand)]
        what: GenCmd,
    },
    /// K-means (Lloyd's algorithm) on W local worker processes.
    Kmeans(Launch<kmeans::KmeansArgs>),
    /// Time one collective on W local worker processes.
    Bench(Launch<bench::BenchArgs>),
    /// Verify every collective against a sequential model on W local worker processes.
    Check(Launch<check::CheckArgs>),
    /// Run this process as one rank of a cluster (hosts file or the local launcher).
    Worker(cluster::WorkerArgs),
}

#[derive(Subcommand)]
enum GenCmd {
    /// Reproducible points (a mixture of Gaussian blobs) and, with --init, initial centroids.
    Points(kmeans::GenArgs),
}

/// A job started on an embedded local cluster.
#[derive(Args, Clone)]
pub struct Launch<J: Args> {
    /// Number of worker processes.
    #[arg(long, short = 'w', default_value_t = 2)]
    workers: usize,
    #[command(flatten)]
    job: J,
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Gen {
            what: GenCmd::Points(a),
        } => kmeans::gen(&a),
        Cmd::Kmeans(l) => cluster::launch(l.workers, "kmeans"),
        Cmd::Bench(l) => cluster::launch(l.workers, "bench"),
        Cmd::Check(l) => cluster::launch(l.workers, "check"),
        Cmd::Worker(w) => cluster::worker(w),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One write call, so lines of several workers sharing a pipe never interleave.
            use std::io::Write;
            let _ = std::io::stderr().write_all(format!("harp: error: {e}\n").as_bytes());
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("HARP_LOG").unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
