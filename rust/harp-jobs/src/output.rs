//! The output directory of a job: the `--overwrite` option every job that writes one has, and
//! preparing it for this job (its staging named by the job's name) so that a failed run leaves
//! it as it was.

use clap::Args;
use harp::apps::output::Output;
use harp::checkpoint::Recovery;
use harp::config::apps;
use harp::{Error, Result, Worker};

/// The options of every job that writes an output directory, besides `--output`.
#[derive(Args, Clone, Debug, Default)]
pub struct OutputOpts {
    #[arg(long, help = harp::config::apps::OVERWRITE.short_help())]
    pub overwrite: bool,
}

/// `--checkpoint-every`, `--checkpoint-dir`, `--resume`: the checkpoint options of the
/// iterative jobs that resume bit-identically with the same number of workers (PageRank, MDS,
/// layout), from `harp::config::apps`.
#[derive(Args, Clone, Debug, Default)]
pub struct RecoveryOpts {
    #[arg(long, help = apps::CHECKPOINT_EVERY.short_help(), default_value = apps::CHECKPOINT_EVERY.default.expect("a default"))]
    pub checkpoint_every: usize,
    #[arg(long, help = apps::CHECKPOINT_DIR.short_help())]
    pub checkpoint_dir: Option<String>,
    #[arg(long, help = apps::RESUME.short_help())]
    pub resume: bool,
}

impl RecoveryOpts {
    /// The engine's recovery options for a job writing into `output`: the checkpoint directory
    /// defaults to `OUTPUT/_checkpoints`; a failure is injected when `HARP_FAIL_AFTER` says so
    /// (tests).
    pub fn recovery(&self, output: &str) -> Result<Recovery> {
        let on = self.checkpoint_every > 0 || self.resume;
        if !on && self.checkpoint_dir.is_some() {
            return Err(Error::config(
                "--checkpoint-dir needs --checkpoint-every N or --resume",
            ));
        }
        let dir = self
            .checkpoint_dir
            .clone()
            .unwrap_or_else(|| format!("{}/_checkpoints", output.trim_end_matches('/')));
        let mut r = Recovery {
            every: self.checkpoint_every,
            dir: on.then_some(dir),
            resume: self.resume,
            fail_after: None,
            job: job_name(),
        };
        r.fail_after_from_env()?;
        Ok(r)
    }

    /// The output options of a run with these: `--resume` continues the run whose result and
    /// checkpoints the output directory holds, so it may hold a result.
    pub fn output(&self, out: &OutputOpts) -> OutputOpts {
        OutputOpts {
            overwrite: out.overwrite || self.resume,
        }
    }
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

/// The end of a job that writes its part and a `summary.json`: the master writes `summary`
/// (built only there), every worker learns whether it could, then every worker's `part` is
/// committed with it.
pub fn commit_with_summary(
    w: &Worker,
    out: &Output,
    job: &str,
    summary: impl FnOnce() -> serde_json::Value,
    part: &str,
) -> Result<()> {
    let wrote = if w.is_master() {
        let text = serde_json::to_string_pretty(&summary()).expect("json");
        out.write("summary.json", text.as_bytes())
    } else {
        Ok(())
    };
    harp::worker::agree(w, &format!("{job}-summary"), wrote)?;
    out.commit_parts(
        w,
        &format!("{job}-commit"),
        part.as_bytes(),
        &["summary.json"],
    )
}
