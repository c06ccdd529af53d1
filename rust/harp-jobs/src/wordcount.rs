//! `harp wordcount`: Hadoop's WordCount example on a key-value table (harp::apps::wordcount).

use clap::Args;
use harp::apps::wordcount::{self, Options};
use harp::config::apps;
use harp::{storage, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct WordcountArgs {
    #[arg(long, help = apps::WORDCOUNT.help("input"))]
    pub input: String,
    #[arg(long, help = apps::WORDCOUNT.help("output"))]
    pub output: String,
    #[arg(long, help = apps::WORDCOUNT.help("threads"), default_value = apps::WORDCOUNT.default("threads"))]
    pub threads: usize,
    #[arg(long, help = apps::WORDCOUNT.help("partitions"))]
    pub partitions: Option<u32>,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

pub fn run(w: &Worker, a: &WordcountArgs) -> Result<()> {
    let start = std::time::Instant::now();
    let opts = Options {
        input: a.input.clone(),
        threads: a.threads,
        partitions: a
            .partitions
            .unwrap_or((w.size() * 8).min(u32::MAX as usize) as u32),
    };
    if opts.threads == 0 {
        return Err(harp::Error::config("--threads must be at least 1"));
    }
    harp::config::check_partitions("--partitions", opts.partitions.into(), w.size())?;
    // Before anything is written: the output is not a file and the input can be listed (every
    // worker fails at once with the cause otherwise).
    let st = storage::for_path_on(&a.input, Some(w.runtime().clone()));
    let checked = (|| -> Result<()> {
        let out = storage::for_path_on(&a.output, Some(w.runtime().clone()))?;
        harp::apps::output::check_not_a_file(&*out, &a.output)?;
        st.as_ref()
            .map_err(|e| harp::Error::config(e.to_string()))?
            .list_input(&a.input, false)?;
        Ok(())
    })();
    harp::worker::agree(w, "wordcount-check", checked)?;
    let st = st?;
    // The output must be usable before any input is read.
    let out = crate::output::prepare_output(w, &a.output, &[&a.input], &a.out, "wordcount-output")?;
    let counted = (|| {
        let counts = wordcount::run(w, &*st, &opts)?;
        let part = wordcount::format_counts(&counts.table)?;
        out.commit_parts(w, "wordcount-commit", &part, &[])?;
        Ok(counts)
    })();
    let counts = match counted {
        Ok(c) => c,
        Err(e) => {
            if w.is_master() {
                out.abort();
            }
            return Err(e);
        }
    };
    if w.is_master() {
        println!(
            "wordcount: {} distinct words, {} tokens, {} workers × {} threads, {} partitions, {:.3} s \
             (master: count {:.3} s, encode+regroup {:.3} s) -> {}",
            counts.words,
            counts.tokens,
            w.size(),
            opts.threads,
            opts.partitions,
            start.elapsed().as_secs_f64(),
            counts.count_s,
            counts.regroup_s,
            out.dir()
        );
    }
    Ok(())
}
