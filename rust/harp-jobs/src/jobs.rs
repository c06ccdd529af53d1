//! The jobs `harp` runs, in one place: the launcher (`harp JOB --workers W …`) and the worker
//! mode (`harp worker … JOB …`) both use [`Job`]. Adding a job is one line in `jobs!` below
//! (plus its module): its arguments (a clap `Args` struct with a `cluster: ClusterOpts` field)
//! and the function that runs it on a worker, `fn(&Worker, &Args) -> Result<()>`.

use clap::{Args, Subcommand};
use harp::config::apps;
use harp::{Result, Worker};

use crate::options::ClusterOpts;
use crate::{
    bench, cg, check, components, events_check, id3, kmeans, layout, lda, mds, mfsgd, nbody,
    netmap, pagerank, wordcount,
};

/// Declares [`Job`] from one line per job: its doc (the `--help` line), its name (the
/// subcommand, in kebab case), its arguments and the function that runs it on a worker.
macro_rules! jobs {
    ($($(#[$doc:meta])* $name:ident($args:ty) => $run:path,)+) => {
        #[derive(Subcommand, Clone, Debug)]
        pub enum Job<X: Args> {
            $($(#[$doc])* $name(With<$args, X>),)+
        }

        impl<X: Args> Job<X> {
            /// The job's cluster options and the mode's extra arguments.
            fn parts(&self) -> (&ClusterOpts, &X) {
                match self {
                    $(Job::$name(a) => (&a.job.cluster, &a.extra),)+
                }
            }

            /// Runs the job as this worker's part.
            pub fn run(&self, w: &Worker) -> Result<()> {
                match self {
                    $(Job::$name(a) => $run(w, &a.job),)+
                }
            }
        }
    };
}

jobs! {
    #[command(about = apps::KMEANS.about)]
    Kmeans(kmeans::KmeansArgs) => kmeans::run,
    #[command(about = apps::PAGERANK.about)]
    Pagerank(pagerank::PagerankArgs) => pagerank::run,
    #[command(about = apps::LDA.about)]
    Lda(lda::LdaArgs) => lda::run,
    /// Time one collective.
    Bench(bench::BenchArgs) => bench::run,
    /// Verify every collective against a sequential model.
    Check(check::CheckArgs) => check::run,
    #[command(about = apps::WORDCOUNT.about)]
    Wordcount(wordcount::WordcountArgs) => wordcount::run,
    #[command(about = apps::MDS.about)]
    Mds(mds::MdsArgs) => mds::run,
    #[command(about = apps::LAYOUT.about)]
    Layout(layout::LayoutArgs) => layout::run,
    #[command(about = apps::COMPONENTS.about)]
    Components(components::ComponentsArgs) => components::run,
    #[command(about = apps::ID3.about)]
    Id3(id3::Id3Args) => id3::run,
    #[command(about = apps::MFSGD.about)]
    Mfsgd(mfsgd::MfsgdArgs) => mfsgd::run,
    #[command(about = apps::NBODY.about)]
    Nbody(nbody::NbodyArgs) => nbody::run,
    #[command(about = apps::CG.about)]
    Cg(cg::CgArgs) => cg::run,
    /// Verify events and termination detection under a random workload with delays.
    EventsCheck(events_check::EventsCheckArgs) => events_check::run,
    /// Measure latency and bandwidth of every worker pair (the network model).
    Netmap(netmap::NetmapArgs) => netmap::run,
}

impl<X: Args> Job<X> {
    /// The options of the cluster the job runs on.
    pub fn cluster(&self) -> &ClusterOpts {
        self.parts().0
    }

    /// The directories the job commits a result into (`--output`, K-means' `--labels`): their
    /// staging directories are removed when the job fails.
    pub fn outputs(&self) -> Vec<&str> {
        let (one, labels) = match self {
            Job::Kmeans(a) => (&a.job.output, a.job.labels.as_deref()),
            Job::Pagerank(a) => (&a.job.output, None),
            Job::Lda(a) => (&a.job.output, None),
            Job::Wordcount(a) => (&a.job.output, None),
            Job::Mds(a) => (&a.job.output, None),
            Job::Layout(a) => (&a.job.output, None),
            Job::Components(a) => (&a.job.output, None),
            Job::Id3(a) => (&a.job.output, None),
            Job::Mfsgd(a) => (&a.job.output, None),
            Job::Nbody(a) => (&a.job.output, None),
            Job::Cg(a) => (&a.job.output, None),
            Job::Bench(_) | Job::Check(_) | Job::EventsCheck(_) | Job::Netmap(_) => {
                return Vec::new()
            }
        };
        std::iter::once(one.as_str()).chain(labels).collect()
    }

    /// The arguments of the mode it was started in ([`Local`] or [`InWorker`]).
    pub fn extra(&self) -> &X {
        self.parts().1
    }
}

impl Job<Local> {
    /// The checks of the job's arguments that need no worker, made by the launcher before it
    /// starts any (after [`harp::util::memory::set_workers_on_host`]): a bad value is then one
    /// error line, not one per worker. The workers make the same checks again (a job inside
    /// Java or `harp worker` has no launcher).
    pub fn precheck(&self) -> Result<()> {
        let workers = self.extra().workers;
        match self {
            Job::Kmeans(a) => kmeans::precheck(&a.job),
            Job::Lda(a) => lda::precheck(&a.job),
            Job::Wordcount(a) => match a.job.partitions {
                Some(n) => harp::config::check_partitions("--partitions", n.into(), workers),
                None => Ok(()),
            },
            Job::Bench(a) => match a.job.partitions {
                Some(n) => harp::config::check_partitions("--partitions", n as u64, workers),
                None => Ok(()),
            },
            Job::EventsCheck(a) => {
                events_check::check_flood(a.job.cluster.config()?.event_window, a.job.flood)
            }
            _ => Ok(()),
        }
    }
}

/// How many of the workers at `addrs` run on the same host as rank `rank` (the same IP
/// address), itself included: they share its memory ([`harp::util::memory::check_fits`]).
pub fn workers_on_host(addrs: &[std::net::SocketAddr], rank: usize) -> usize {
    addrs
        .get(rank)
        .map_or(1, |me| addrs.iter().filter(|a| a.ip() == me.ip()).count())
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

#[cfg(test)]
mod tests {
    #[test]
    fn workers_sharing_a_host_are_counted_by_address() {
        let a = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let addrs = [
            a("10.0.0.1:7000"),
            a("10.0.0.2:7000"),
            a("10.0.0.1:7001"),
            a("10.0.0.1:7002"),
        ];
        assert_eq!(super::workers_on_host(&addrs, 0), 3);
        assert_eq!(super::workers_on_host(&addrs, 1), 1);
        assert_eq!(super::workers_on_host(&addrs, 3), 3);
        assert_eq!(super::workers_on_host(&addrs, 9), 1);
    }
}
