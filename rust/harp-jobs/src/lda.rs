//! `harp lda`, and `harp gen corpus`.

use clap::Args;
use harp::apps::lda::{self, Generate, Options, Rotation, Words};
use harp::config::apps;
use harp::{Error, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct LdaArgs {
    #[arg(long, help = apps::LDA.help("input"))]
    pub input: String,
    #[arg(long, help = apps::LDA.help("words"), default_value = apps::LDA.default("words"))]
    pub words: String,
    #[arg(long, help = apps::LDA.help("topics"), default_value = apps::LDA.default("topics"))]
    pub topics: usize,
    #[arg(long, help = apps::LDA.help("alpha"), default_value = apps::LDA.default("alpha"))]
    pub alpha: f64,
    #[arg(long, help = apps::LDA.help("beta"), default_value = apps::LDA.default("beta"))]
    pub beta: f64,
    #[arg(long, help = apps::LDA.help("iterations"), default_value = apps::LDA.default("iterations"))]
    pub iterations: usize,
    #[arg(long, help = apps::LDA.help("seed"), default_value = apps::LDA.default("seed"))]
    pub seed: u64,
    #[arg(long, help = apps::LDA.help("threads"), default_value = apps::LDA.default("threads"))]
    pub threads: usize,
    #[arg(long, help = apps::LDA.help("rotation"), default_value = apps::LDA.default("rotation"))]
    pub rotation: String,
    #[arg(long, help = apps::LDA.help("top_words"), default_value = apps::LDA.default("top_words"))]
    pub top_words: usize,
    #[arg(long, help = apps::LDA.help("output"))]
    pub output: String,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub recovery: crate::output::RecoveryOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

fn options(a: &LdaArgs) -> Result<Options> {
    let words = a
        .words
        .parse::<Words>()
        .map_err(|e| Error::config(format!("--words: {e}")))?;
    let o = Options {
        input: a.input.clone(),
        topics: a.topics,
        alpha: a.alpha,
        beta: a.beta,
        iterations: a.iterations,
        seed: a.seed,
        threads: a.threads,
        words,
        top_words: a.top_words,
        rotation: a
            .rotation
            .parse::<Rotation>()
            .map_err(|e| Error::config(format!("--rotation: {e}")))?,
        recovery: a.recovery.recovery(&a.output)?,
    };
    o.validate()?;
    Ok(o)
}

/// The checks the launcher makes before it starts workers.
pub fn precheck(a: &LdaArgs) -> Result<()> {
    options(a).map(|_| ())
}

pub fn run(w: &Worker, a: &LdaArgs) -> Result<()> {
    let opts = options(a)?;
    let oo = a.recovery.output(&a.out);
    let out = crate::output::prepare_output(w, &a.output, &[&a.input], &oo, "lda-output")?;
    let master = w.is_master();
    crate::output::into_output(w, out, |out| {
        let res = lda::run(w, &opts, |x| {
            if master {
                println!(
                    "iteration {:>3}/{}  loglik/token {:.6}  {:.3} s",
                    x.it, opts.iterations, x.ll, x.secs
                );
            }
        })?;
        if let Some(t) = &res.topics {
            out.write("topics.txt", t.as_bytes())?;
        }
        out.commit_parts(w, "lda-commit", res.mixtures.as_bytes(), &["topics.txt"])?;
        if let (true, Some(it)) = (master, res.resumed_from) {
            println!("resumed from the checkpoint at iteration {it}");
        }
        if master {
            let secs: f64 = res
                .iterations
                .iter()
                .map(|x| x.secs)
                .fold(0.0, |a, b| a + b);
            let n = res.iterations.len();
            println!(
                "lda: {} documents, {} tokens, {} words, {} topics, {} iterations; load {:.3} s, \
                 iterations {:.3} s ({:.0} tokens/s), final loglik/token {}",
                res.docs,
                res.tokens,
                res.vocabulary,
                opts.topics,
                n,
                res.load_s,
                secs,
                if secs > 0.0 {
                    res.tokens as f64 * n as f64 / secs
                } else {
                    0.0
                },
                res.iterations
                    .last()
                    .map_or("-".into(), |x| format!("{:.6}", x.ll))
            );
            println!(
                "wrote {} part files and topics.txt to {}",
                w.size(),
                out.dir()
            );
        }
        Ok(())
    })
}

#[derive(Args, Clone, Debug)]
pub struct GenCorpusArgs {
    /// Number of documents.
    #[arg(long)]
    pub docs: usize,
    /// Number of distinct words.
    #[arg(long, default_value_t = 10000)]
    pub vocabulary: usize,
    /// Number of true topics: topic k draws 90 % of its words from its band of V/K words
    /// (a Zipf law), 10 % from all; a document mixes 1 to 3 topics.
    #[arg(long, default_value_t = 20)]
    pub topics: usize,
    /// Mean document length in tokens (uniform from half to 1.5 times it).
    #[arg(long, default_value_t = 200)]
    pub length: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write words as integer ids (for --words ids) instead of wN tokens.
    #[arg(long)]
    pub ids: bool,
    /// The file to write.
    #[arg(long)]
    pub output: String,
}

/// `harp gen corpus`.
pub fn gen(a: &GenCorpusArgs) -> Result<()> {
    let g = Generate {
        docs: a.docs,
        vocabulary: a.vocabulary,
        topics: a.topics,
        length: a.length,
        seed: a.seed,
        ids: a.ids,
    };
    g.validate()?;
    let f = std::fs::File::create(&a.output)
        .map_err(|e| Error::io(format!("gen corpus: {}", a.output), e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, f);
    let tokens = g.write(&mut out)?;
    std::io::Write::flush(&mut out)
        .map_err(|e| Error::io(format!("gen corpus: {}", a.output), e))?;
    println!(
        "wrote {} documents, {tokens} tokens over {} words from {} topics to {}",
        a.docs, a.vocabulary, a.topics, a.output
    );
    Ok(())
}
