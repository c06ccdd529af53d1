//! The output directory of a job: the `--overwrite` option every job that writes one has, and
//! preparing it for this job (its staging named by the job's name) so that a failed run leaves
//! it as it was.

use clap::Args;
use harp::apps::output::Output;
use harp::{Result, Worker};

/// The options of every job that writes an output directory, besides `--output`.
#[derive(Args, Clone, Debug, Default)]
pub struct OutputOpts {
    #[arg(long, help = harp::config::apps::OVERWRITE.short_help())]
    pub overwrite: bool,
}

/// Runs `body` writing into `out` ([`prepare_output`]); if it fails, the master removes the
/// staging, so the directory stays as it was.
pub fn into_output(
    w: &Worker,
    out: Output,
    body: impl FnOnce(&Output) -> Result<()>,
) -> Result<()> {
    let done = body(&out);
    if done.is_err() && w.is_master() {
        out.abort();
    }
    done
}

/// [`harp::apps::output::Output::prepare`] for this job ([`job_name`]) with the output options:
/// the output directory `dir` must be apart from the job's `inputs`
/// ([`harp::apps::output::check_apart`]) and hold no result unless `opts.overwrite`; `label`
/// names the step.
pub fn prepare_output(
    w: &Worker,
    dir: &str,
    inputs: &[&str],
    opts: &OutputOpts,
    label: &str,
) -> Result<Output> {
    Output::prepare(w, dir, inputs, &job_name(), label, opts.overwrite)
}

/// The job's name, as the launcher set it for its workers (HARP_JOB), or "harp": names the
/// staging directory of a job's output.
pub fn job_name() -> String {
    std::env::var("HARP_JOB")
        .ok()
        .filter(|j| !j.is_empty())
        .unwrap_or_else(|| "harp".into())
}
