//! The jobs of Harp-RS in one place, shared by the `harp` tool (`rust/harp-cli`) and the JNI
//! library (`rust/harp-jni`, for `harp.HarpJob` in Java): [`jobs::Job`], the one registry (each
//! job's arguments, parsed with clap, and the function that runs it on a worker), one module per
//! job, the engine option flags ([`options`]) and a job's output directory ([`output`]).
//! [`run_job`] runs a job as the part of a worker someone else started (a Hadoop task), with the
//! same arguments, checks and output as `harp worker … JOB …`.

use clap::{CommandFactory, FromArgMatches, Parser};
use harp::Worker;

pub mod bench;
pub mod cg;
pub mod check;
pub mod components;
pub mod events_check;
pub mod id3;
pub mod jobs;
pub mod kmeans;
pub mod layout;
pub mod lda;
pub mod mds;
pub mod mfsgd;
pub mod nbody;
pub mod netmap;
pub mod options;
pub mod output;
pub mod pagerank;
pub mod wordcount;

/// A job's arguments alone, as `harp worker … JOB …` takes them after the worker's own.
#[derive(Parser)]
#[command(name = "harp", no_binary_name = true)]
struct JobOnly {
    #[command(subcommand)]
    job: jobs::Job<jobs::InWorker>,
}

/// Runs `args` (`["pagerank", "--input", …]`: a job and its arguments, exactly as after
/// `harp worker … `) as worker `w`'s part of that job. A usage error is a config error carrying
/// clap's message; the job's own options that set up workers (timeouts, sockets) are those `w`
/// was started with.
pub fn run_job(w: &Worker, args: &[String]) -> harp::Result<()> {
    let parsed = options::whole_numbers(JobOnly::command())
        .try_get_matches_from(args)
        .and_then(|m| JobOnly::from_arg_matches(&m))
        .map_err(|e| harp::Error::config(e.render().to_string().trim_end().to_string()))?;
    if let Some(flag) = process_fault(&parsed.job) {
        return Err(harp::Error::config(format!(
            "{flag}: fault injection kills or stops the whole process, here the JVM of the task; \
             it is for `harp worker` processes (tests/), not for jobs run inside Java"
        )));
    }
    if let Some(e) = worker_flag(args) {
        return Err(e);
    }
    parsed.job.run(w)
}

/// A flag among `args` that sets up a worker (`--timeout`, `--frame-mac`, `--io-threads`, …):
/// inside Java the worker already runs, started from the job's configuration, so the flag
/// would be ignored. The error names the configuration key to use instead.
fn worker_flag(args: &[String]) -> Option<harp::Error> {
    args.iter().find_map(|a| {
        let name = a.strip_prefix("--")?;
        let name = name.split_once('=').map_or(name, |(n, _)| n);
        let instead = match harp::config::OPTIONS.iter().find(|o| o.flag == name) {
            Some(o) => format!("set {} in the job configuration instead", o.java),
            None if name == "io-threads" => "a worker inside Java has one I/O thread".to_string(),
            None => return None,
        };
        Some(harp::Error::config(format!(
            "--{name}: inside Java the worker is already started from the job's configuration, \
             so this flag would be ignored; {instead}"
        )))
    })
}

/// The fault-injection flag of a job, if it has one set: these end or freeze the process
/// (`abort`, `exit`, SIGSTOP), which inside a JVM would take the Hadoop task with it.
fn process_fault<X: clap::Args>(job: &jobs::Job<X>) -> Option<&'static str> {
    match job {
        jobs::Job::Check(a) => [
            (a.job.die_rank, "--die-rank"),
            (a.job.stall_rank, "--stall-rank"),
            (a.job.hang_rank, "--hang-rank"),
        ]
        .into_iter()
        .find_map(|(r, flag)| r.map(|_| flag)),
        jobs::Job::EventsCheck(a) => [
            (a.job.die_rank, "--die-rank"),
            (a.job.hang_rank, "--hang-rank"),
        ]
        .into_iter()
        .find_map(|(r, flag)| r.map(|_| flag)),
        _ => None,
    }
}

#[cfg(test)]
mod run_job_tests {
    use super::*;

    /// Inside a JVM the process is the Hadoop task: fault injection that aborts, exits or
    /// stops the process is refused before the job starts, naming the flag.
    #[test]
    fn fault_injection_is_refused_for_jobs_inside_a_process() {
        let cfg = harp::Config::default();
        let w = Worker::in_process(1, cfg).unwrap().pop().unwrap();
        for (args, flag) in [
            (vec!["check", "--die-rank", "0"], "--die-rank"),
            (vec!["check", "--stall-rank", "0"], "--stall-rank"),
            (vec!["check", "--hang-rank", "0"], "--hang-rank"),
            (vec!["events-check", "--die-rank", "0"], "--die-rank"),
            (vec!["events-check", "--hang-rank", "0"], "--hang-rank"),
        ] {
            let args: Vec<String> = args.into_iter().map(String::from).collect();
            let e = run_job(&w, &args).unwrap_err();
            assert_eq!(e.kind(), "config", "{e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("{flag}: fault injection kills or stops")),
                "{e}"
            );
        }
        // A job inside Java parses whole numbers as the command line does.
        let args: Vec<String> = [
            "pagerank",
            "--input",
            "i",
            "--output",
            "o",
            "--iterations",
            "0",
        ]
        .map(String::from)
        .to_vec();
        let e = run_job(&w, &args).unwrap_err().to_string();
        assert!(
            e.contains("invalid value '0' for '--iterations <ITERATIONS>'"),
            "{e}"
        );
        // Without the flags the check runs.
        let args: Vec<String> = ["check", "--rounds", "1"].map(String::from).to_vec();
        run_job(&w, &args).unwrap();
        w.close();
    }

    /// Workers of one job given different output directories (each task has its own
    /// arguments in Java) are refused on every worker before anything is written.
    #[test]
    fn workers_naming_different_outputs_are_refused_before_writing() {
        let d = std::env::temp_dir().join(format!("harp-outs-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("in.txt"), "a b a\n").unwrap();
        let workers = Worker::in_process(2, harp::Config::default()).unwrap();
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = workers
                .into_iter()
                .map(|w| {
                    let d = d.clone();
                    s.spawn(move || {
                        let out = d.join(format!("out-{}", w.rank()));
                        let args: Vec<String> = [
                            "wordcount",
                            "--input",
                            d.join("in.txt").to_str().unwrap(),
                            "--output",
                            out.to_str().unwrap(),
                        ]
                        .map(String::from)
                        .to_vec();
                        let e = run_job(&w, &args).unwrap_err().to_string();
                        w.close();
                        e
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for e in &errs {
            assert!(
                e.contains("the output directory differs between workers"),
                "{e}"
            );
        }
        assert!(!d.join("out-0").exists() && !d.join("out-1").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The flags that set up a worker would be ignored inside Java (the worker runs already):
    /// refused, naming the job configuration key that sets the same thing.
    #[test]
    fn worker_flags_are_refused_inside_a_process_naming_the_key() {
        let cfg = harp::Config::default();
        let w = Worker::in_process(1, cfg).unwrap().pop().unwrap();
        for (flag, key) in [
            ("--timeout", "harp.collective.timeout.ms"),
            ("--frame-mac", "harp.frame.mac"),
            ("--io-threads=2", "one I/O thread"),
        ] {
            let mut args: Vec<String> = ["check", "--rounds", "1", flag].map(String::from).to_vec();
            if flag == "--timeout" {
                args.push("1".into());
            }
            let e = run_job(&w, &args).unwrap_err();
            assert_eq!(e.kind(), "config", "{e}");
            let name = flag.split('=').next().unwrap();
            assert!(
                e.to_string().starts_with(&format!("{name}: inside Java"))
                    && e.to_string().contains(key),
                "{e}"
            );
        }
        w.close();
    }
}
