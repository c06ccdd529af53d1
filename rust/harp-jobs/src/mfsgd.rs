//! `harp mfsgd`, and `harp gen ratings`.

use clap::Args;
use harp::apps::mfsgd::{self, GenSpec, Options, Rotation};
use harp::config::apps;
use harp::{storage, Error, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct MfsgdArgs {
    #[arg(long, help = apps::MFSGD.help("input"))]
    pub input: String,
    #[arg(long, help = apps::MFSGD.help("test"))]
    pub test: Option<String>,
    #[arg(long, help = apps::MFSGD.help("rank"), default_value = apps::MFSGD.default("rank"))]
    pub rank: usize,
    #[arg(long, help = apps::MFSGD.help("lambda"), default_value = apps::MFSGD.default("lambda"))]
    pub lambda: f32,
    #[arg(long, help = apps::MFSGD.help("alpha"), default_value = apps::MFSGD.default("alpha"))]
    pub alpha: f32,
    #[arg(long, help = apps::MFSGD.help("decay"), default_value = apps::MFSGD.default("decay"))]
    pub decay: f32,
    #[arg(long, help = apps::MFSGD.help("epochs"), default_value = apps::MFSGD.default("epochs"))]
    pub epochs: usize,
    #[arg(long, help = apps::MFSGD.help("seed"), default_value = apps::MFSGD.default("seed"))]
    pub seed: u64,
    #[arg(long, help = apps::MFSGD.help("threads"), default_value = apps::MFSGD.default("threads"))]
    pub threads: usize,
    #[arg(long, help = apps::MFSGD.help("blocks"), default_value = apps::MFSGD.default("blocks"))]
    pub blocks: usize,
    #[arg(long, help = apps::MFSGD.help("rotation"), default_value = apps::MFSGD.default("rotation"))]
    pub rotation: String,
    #[arg(long, help = apps::MFSGD.help("output"))]
    pub output: String,
    #[command(flatten)]
    pub out: crate::output::OutputOpts,
    #[command(flatten)]
    pub recovery: crate::output::RecoveryOpts,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

fn options(a: &MfsgdArgs) -> Result<Options> {
    let mut o = Options::new(a.input.clone());
    o.test = a.test.clone();
    o.rank = a.rank;
    o.lambda = a.lambda;
    o.alpha = a.alpha;
    o.decay = a.decay;
    o.epochs = a.epochs;
    o.seed = a.seed;
    o.threads = a.threads;
    o.blocks = a.blocks;
    o.rotation = a
        .rotation
        .parse::<Rotation>()
        .map_err(|e| Error::config(format!("--rotation: {e}")))?;
    o.recovery = a.recovery.recovery(&a.output)?;
    o.validate()?;
    Ok(o)
}

pub fn run(w: &Worker, a: &MfsgdArgs) -> Result<()> {
    let opts = options(a)?;
    let mut inputs = vec![a.input.as_str()];
    inputs.extend(a.test.as_deref());
    let oo = a.recovery.output(&a.out);
    let out = crate::output::prepare_output(w, &a.output, &inputs, &oo, "mfsgd-output")?;
    let master = w.is_master();
    crate::output::into_output(w, out, |out| {
        let res = mfsgd::run(w, &opts, |epoch, secs, rmse, trained| {
            if master {
                // `trained`: seconds since the input was read (time-to-RMSE counts from there).
                let r = if rmse.is_nan() {
                    String::new()
                } else {
                    format!("  test rmse {rmse:.6}")
                };
                println!(
                    "epoch {epoch:>3}/{}  {secs:.4} s{r}  trained {trained:.3} s",
                    opts.epochs
                );
            }
        })?;
        let mut rmse = String::new();
        for (i, r) in res.rmse.iter().enumerate() {
            rmse.push_str(&format!("{}\t{r}\n", i + 1));
        }
        let text = mfsgd::format_factors(&res, opts.rank);
        let extra: &[&str] = if res.rmse.is_empty() {
            &[]
        } else {
            if master {
                out.write("rmse.txt", rmse.as_bytes())?;
            }
            &["rmse.txt"]
        };
        out.commit_parts(w, "mfsgd-commit", text.as_bytes(), extra)?;
        if let (true, Some(e)) = (master, res.resumed_from) {
            println!("resumed from the checkpoint at epoch {e}");
        }
        if master {
            // Those of a checkpoint resumed from included; from +0.0, as an empty sum is -0.0.
            let train_s: f64 = res.epoch_s.iter().fold(0.0, |a, b| a + b);
            let test: f64 = res.test_s.iter().fold(0.0, |a, b| a + b);
            println!(
                "mfsgd: {} ratings ({} test), {} users, {} items, rank {}, {} epochs; read {:.3} s, \
                 blocks {:.3} s, epochs {:.3} s ({:.4} s each), tests {:.3} s",
                res.ratings,
                res.test_ratings,
                res.n_users,
                res.n_items,
                opts.rank,
                opts.epochs,
                res.read_s,
                res.load_s - res.read_s,
                train_s,
                train_s / opts.epochs.max(1) as f64,
                test
            );
            println!("wrote {} part files to {}", w.size(), out.dir());
        }
        Ok(())
    })
}

/// `harp gen ratings`.
#[derive(Args, Clone, Debug)]
pub struct GenRatingsArgs {
    /// Number of users (ids 0…N−1).
    #[arg(long)]
    pub users: u64,
    /// Number of items (ids 0…N−1).
    #[arg(long)]
    pub items: u64,
    /// Number of ratings (training and test together).
    #[arg(long)]
    pub ratings: u64,
    /// Rank of the true factors.
    #[arg(long, default_value_t = 16)]
    pub rank: usize,
    /// Standard deviation of the Gaussian noise on each rating.
    #[arg(long, default_value_t = 0.5)]
    pub noise: f64,
    /// Power-law skew γ: an id is ⌊N·u^γ⌋ for u uniform (1: uniform; 2: id 0 the most rated).
    #[arg(long, default_value_t = 2.0)]
    pub skew: f64,
    /// Fraction of the ratings written to the test file.
    #[arg(long, default_value_t = 0.1)]
    pub test_fraction: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The training file to write.
    #[arg(long)]
    pub output: String,
    /// The test file to write.
    #[arg(long)]
    pub test: String,
}

pub fn gen(a: &GenRatingsArgs) -> Result<()> {
    if a.users == 0 || a.items == 0 || a.rank == 0 || a.rank > mfsgd::MAX_RANK {
        return Err(Error::config(
            "--users and --items must be at least 1, --rank from 1 to 4096",
        ));
    }
    let noise_ok = a.noise.is_finite() && a.noise >= 0.0;
    let skew_ok = a.skew.is_finite() && a.skew > 0.0;
    if !noise_ok || !skew_ok || !(0.0..=1.0).contains(&a.test_fraction) {
        return Err(Error::config(
            "--noise must be ≥ 0, --skew > 0 and --test-fraction in [0, 1]",
        ));
    }
    harp::util::memory::check_fits(
        "the generated ratings",
        (a.ratings as u128 * 48)
            .checked_add((a.users as u128 + a.items as u128) * a.rank as u128 * 4),
    )?;
    let (train, test) = mfsgd::generate(&GenSpec {
        users: a.users,
        items: a.items,
        ratings: a.ratings,
        rank: a.rank,
        noise: a.noise,
        skew: a.skew,
        test_fraction: a.test_fraction,
        seed: a.seed,
    });
    storage::for_path(&a.output)?.write_all(&a.output, train.as_bytes())?;
    storage::for_path(&a.test)?.write_all(&a.test, test.as_bytes())?;
    println!(
        "wrote {} training and {} test ratings to {} and {}",
        train.lines().count(),
        test.lines().count(),
        a.output,
        a.test
    );
    Ok(())
}
