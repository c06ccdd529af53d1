//! `harp id3`: an ID3 decision tree over events (Anthill's filters routed by label).

use clap::Args;
use harp::apps::id3;
use harp::apps::output::Output;
use harp::config::apps;
use harp::{storage, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct Id3Args {
    #[arg(long, help = apps::ID3.help("input"))]
    pub input: String,
    #[arg(long, help = apps::ID3.help("output"))]
    pub output: String,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

pub fn run(w: &Worker, a: &Id3Args) -> Result<()> {
    let out = crate::output::prepare_output(w, &a.output, &[&a.input], &a.out, "id3-output")?;
    crate::output::into_output(w, out, |out| run_into(w, a, out))
}

fn run_into(w: &Worker, a: &Id3Args, out: &Output) -> Result<()> {
    let st = storage::for_path_on(&a.input, Some(w.runtime().clone()))?;
    let r = id3::run(w, &*st, &a.input)?;
    out.commit_parts(w, "id3-commit", id3::format(&r.tree).as_bytes(), &[])?;
    println!(
        "rank {}: {} tuples read, {} nodes decided; job: {} events, {} detection waves",
        w.rank(),
        r.tuples,
        r.tree.len(),
        r.events,
        r.waves
    );
    if w.is_master() {
        println!("wrote {}/part-* and _SUCCESS", out.dir());
    }
    Ok(())
}
