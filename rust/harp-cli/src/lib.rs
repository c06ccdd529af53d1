//! `harp`: runs Harp-RS jobs on an embedded local cluster (worker processes on loopback) or as
//! one worker of a cluster described by a hosts file. The binary (`main.rs`) calls [`main`].
//! The jobs themselves (their arguments and how each runs on a worker) are `harp_jobs`, which
//! the JNI library shares.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod cluster;
mod sim;
#[cfg(test)]
mod vocabulary_tests;

use harp_jobs::{cg, jobs, kmeans, lda, mds, mfsgd, options};

#[derive(Parser)]
#[command(
    name = "harp",
    version,
    about = "Harp-RS: Map-Collective jobs with MPI-style collectives",
    after_help = "`harp JOB --workers W …` runs JOB on W local worker processes; \
                  `harp worker … JOB …` runs one rank of it."
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
    /// A job on W local worker processes (the jobs: src/jobs.rs).
    #[command(flatten)]
    Launch(jobs::Job<jobs::Local>),
    /// Run this process as one rank of a cluster (hosts file or the local launcher).
    Worker(cluster::WorkerArgs),
    /// List the engine options: CLI flag, Java job key, engine key, default, meaning.
    Options(options::OptionsArgs),
    /// Simulate one collective's own schedule on a modelled network of p hosts.
    Sim(sim::SimArgs),
}

#[derive(Subcommand)]
enum GenCmd {
    /// Reproducible points (a mixture of Gaussian blobs) and, with --init, initial centroids.
    Points(kmeans::GenArgs),
    /// A reproducible N×N Euclidean distance matrix (for `harp mds`).
    Dist(mds::GenDistArgs),
    /// A reproducible corpus generated from known topics (for `harp lda`).
    Corpus(lda::GenCorpusArgs),
    /// Reproducible ratings (a low-rank truth plus noise, power-law users and items) for
    /// `harp mfsgd`: a training and a test file.
    Ratings(mfsgd::GenRatingsArgs),
    /// The 2-D Poisson matrix of a G×G grid, as `harp cg --input` reads it.
    Poisson(cg::GenPoissonArgs),
}

/// The `harp` command line.
pub fn main() -> ExitCode {
    init_logging();
    let matches = options::whole_numbers(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let res = match cli.cmd {
        Cmd::Gen {
            what: GenCmd::Points(a),
        } => kmeans::gen(&a),
        Cmd::Gen {
            what: GenCmd::Dist(a),
        } => mds::gen(&a),
        Cmd::Gen {
            what: GenCmd::Corpus(a),
        } => lda::gen(&a),
        Cmd::Gen {
            what: GenCmd::Ratings(a),
        } => mfsgd::gen(&a),
        Cmd::Gen {
            what: GenCmd::Poisson(a),
        } => cg::gen(&a),
        Cmd::Launch(job) => cluster::launch(&job, matches.subcommand_name().expect("a job")),
        Cmd::Worker(w) => cluster::worker(w),
        Cmd::Options(a) => options::print(&a),
        Cmd::Sim(a) => sim::run(&a),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            cluster::report_error(&e);
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
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_runs_in_both_modes_and_only_the_launcher_takes_workers() {
        for job in [
            "kmeans",
            "wordcount",
            "pagerank",
            "lda",
            "mds",
            "layout",
            "components",
            "id3",
            "mfsgd",
            "nbody",
            "cg",
            "bench",
            "check",
            "events-check",
            "netmap",
        ] {
            let extra: &[&str] = match job {
                "kmeans" | "wordcount" | "pagerank" | "lda" | "mds" | "layout" | "components"
                | "id3" | "mfsgd" => &["--input", "p", "--output", "o"],
                "nbody" => &["--output", "o"],
                "cg" => &["--grid", "4", "--output", "o"],
                "bench" => &["allreduce"],
                _ => &[],
            };
            let local = Cli::try_parse_from(
                [&["harp", job, "-w", "3", "--timeout", "7"][..], extra].concat(),
            )
            .unwrap_or_else(|e| panic!("{job}: {e}"));
            match local.cmd {
                Cmd::Launch(j) => {
                    assert_eq!(j.extra().workers, 3);
                    assert_eq!(j.cluster().config().unwrap().op_timeout.as_secs(), 7);
                }
                _ => panic!("{job} is not a launched job"),
            }
            let worker = [&["harp", "worker", "--rank", "0", job][..], extra].concat();
            assert!(Cli::try_parse_from(&worker).is_ok(), "{job}");
            let with_workers = [&worker[..], &["--workers", "3"]].concat();
            assert!(Cli::try_parse_from(with_workers).is_err(), "{job}");
        }
    }

    /// One rule for whole numbers in every job, through the same parser the binary and
    /// `run_job` use: negatives name the option and the range; a count in AT_LEAST_ONE
    /// refuses 0 whichever job has it.
    #[test]
    fn whole_number_options_refuse_negatives_and_zero_counts() {
        use clap::{CommandFactory, FromArgMatches};
        let parse = |args: &[&str]| {
            options::whole_numbers(Cli::command())
                .try_get_matches_from(args)
                .and_then(|m| Cli::from_arg_matches(&m))
                .map(|_| ())
        };
        let io = ["--input", "i", "--output", "o"];
        for job in ["kmeans", "pagerank", "lda", "mds", "layout"] {
            for (v, want) in [
                ("0", "expected a whole number, at least 1"),
                ("-1", "negative numbers are not allowed"),
                ("x", "expected a whole number, at least 1"),
            ] {
                let args = [&["harp", job][..], &io, &["--iterations", v]].concat();
                let e = parse(&args).unwrap_err().to_string();
                assert!(
                    e.contains(&format!("invalid value '{v}' for '--iterations"))
                        && e.contains(want),
                    "{job} {v}: {e}"
                );
            }
            parse(&[&["harp", job][..], &io, &["--iterations", "3"]].concat()).unwrap();
        }
        let e = parse(&["harp", "worker", "--rank", "-1", "check"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected a whole number, at least 0"), "{e}");
        // Signed and fractional options still take negative values (checked by their jobs).
        parse(&[
            "harp",
            "kmeans",
            "--input",
            "i",
            "--output",
            "o",
            "--tolerance",
            "-1",
        ])
        .unwrap();
        parse(&[
            "harp",
            "pagerank",
            "--input",
            "i",
            "--output",
            "o",
            "--damping",
            "-2",
        ])
        .unwrap();
    }
}
