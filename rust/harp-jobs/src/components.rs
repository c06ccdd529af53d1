//! `harp components`: connected components by label propagation over events.

use clap::Args;
use harp::apps::components;
use harp::apps::output::Output;
use harp::config::apps;
use harp::{storage, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct ComponentsArgs {
    #[arg(long, help = apps::COMPONENTS.help("input"))]
    pub input: String,
    #[arg(long, help = apps::COMPONENTS.help("output"))]
    pub output: String,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

pub fn run(w: &Worker, a: &ComponentsArgs) -> Result<()> {
    // A failed run leaves the output directory as it was (no staging left behind).
    let out =
        crate::output::prepare_output(w, &a.output, &[&a.input], &a.out, "components-output")?;
    crate::output::into_output(w, out, |out| run_into(w, a, out))
}

fn run_into(w: &Worker, a: &ComponentsArgs, out: &Output) -> Result<()> {
    let st = storage::for_path_on(&a.input, Some(w.runtime().clone()))?;
    let c = components::run(w, &*st, &a.input)?;
    let text = components::format(&c.labels);
    out.commit_parts(w, "components-commit", text.as_bytes(), &[])?;
    println!(
        "rank {}: {} edge lines read, {} vertices owned; job: {} label events, {} detection \
         waves",
        w.rank(),
        c.edges_read,
        c.labels.len(),
        c.label_events,
        c.waves
    );
    if w.is_master() {
        println!("wrote {}/part-* and _SUCCESS", out.dir());
    }
    Ok(())
}
