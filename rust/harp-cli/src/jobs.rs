//! The jobs `harp` runs, in one place: the launcher (`harp JOB --workers W …`) and the worker
//! mode (`harp worker … JOB …`) both use [`Job`]. Adding a job is one variant here, with its
//! arguments (which flatten a `cluster: ClusterOpts`) and the function that runs it on a worker.

use clap::{Args, Subcommand};
use harp::{Result, Worker};

use crate::options::ClusterOpts;
use crate::{bench, check, kmeans};

#[derive(Subcommand, Clone, Debug)]
pub enum Job<X: Args> {
    /// K-means (Lloyd's algorithm).
    Kmeans(With<kmeans::KmeansArgs, X>),
    /// Time one collective.
    Bench(With<bench::BenchArgs, X>),
    /// Verify every collective against a sequential model.
    Check(With<check::CheckArgs, X>),
}

impl<X: Args> Job<X> {
    /// The job's own arguments and the mode's extra ones.
    fn parts(&self) -> (&ClusterOpts, &X) {
        match self {
            Job::Kmeans(a) => (&a.job.cluster, &a.extra),
            Job::Bench(a) => (&a.job.cluster, &a.extra),
            Job::Check(a) => (&a.job.cluster, &a.extra),
        }
    }

    /// Runs the job as this worker's part.
    pub fn run(&self, w: &Worker) -> Result<()> {
        match self {
            Job::Kmeans(a) => kmeans::run(w, &a.job),
            Job::Bench(a) => bench::run(w, &a.job),
            Job::Check(a) => check::run(w, &a.job),
        }
    }

    /// The options of the cluster the job runs on.
    pub fn cluster(&self) -> &ClusterOpts {
        self.parts().0
    }

    /// The arguments of the mode it was started in ([`Local`] or [`InWorker`]).
    pub fn extra(&self) -> &X {
        self.parts().1
    }
}

/// A job's arguments plus those of the mode it runs in.
#[derive(Args, Clone, Debug)]
pub struct With<J: Args, X: Args> {
    #[command(flatten)]
    pub extra: X,
    #[command(flatten)]
    pub job: J,
}

/// `harp JOB`: the job on an embedded local cluster of worker processes.
#[derive(Args, Clone, Debug)]
pub struct Local {
    /// Number of worker processes.
    #[arg(long, short = 'w', default_value_t = 2)]
    pub workers: usize,
}

/// `harp worker … JOB`: nothing beyond the job's own arguments.
#[derive(Args, Clone, Debug)]
pub struct InWorker {}
