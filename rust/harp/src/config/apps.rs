//! The applications' options, each written once: its name (the engine's field and the key of
//! the K-means job description from Java), CLI flag, Java job configuration key, default and
//! help. [`JOBS`] is the one registry of the application jobs: the `harp` command line makes
//! each job's flags and their help from it, the JNI library and the Java examples take their
//! names and keys from it, and the engine's `Options` take their defaults from it.
//! `harp options` prints it after the engine options.

/// How an option takes its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value the job needs (`--input PATH`).
    Required,
    /// A value, with the default of the row or none (then the job decides).
    Value,
    /// A flag alone means on (`--resume`).
    Switch,
}

/// One option of an application job.
#[derive(Debug)]
pub struct AppOption {
    /// The engine's name (`skip_columns`).
    pub name: &'static str,
    /// The Java job configuration key (`harp.kmeans.skip.columns`).
    pub java: &'static str,
    pub kind: Kind,
    /// The default, as the CLI shows and parses it; `None`: required, a switch, or decided by
    /// the job when unset (its help says how).
    pub default: Option<&'static str>,
    /// What it sets.
    pub help: &'static str,
}

impl AppOption {
    /// The help without its final period, as `--help` shows every line.
    pub fn short_help(&self) -> &'static str {
        self.help.strip_suffix('.').unwrap_or(self.help)
    }

    /// The CLI flag, without `--`: the name with `-` for `_` (`skip-columns`).
    pub fn flag(&self) -> String {
        self.name.replace('_', "-")
    }
}

/// A row of a job's table.
const fn opt(
    name: &'static str,
    java: &'static str,
    kind: Kind,
    default: Option<&'static str>,
    help: &'static str,
) -> AppOption {
    AppOption {
        name,
        java,
        kind,
        default,
        help,
    }
}

/// `--overwrite`, an option of every job that writes an output directory.
pub const OVERWRITE: AppOption = opt(
    "overwrite",
    "harp.overwrite",
    Kind::Switch,
    None,
    "Replace the result of an existing output directory; without it, an output directory \
     that holds anything is refused (the result is committed only when the run succeeds).",
);

/// `--checkpoint-every`, `--checkpoint-dir` and `--resume`: the checkpoint options of every
/// iterative job (`harp::checkpoint::Recovery`), the same keys for all of them.
pub const CHECKPOINT_EVERY: AppOption = opt(
    "checkpoint_every",
    "harp.checkpoint.every",
    Kind::Value,
    Some("0"),
    "Save a checkpoint every N iterations (and after the last); 0: never.",
);
/// See [`CHECKPOINT_EVERY`].
pub const CHECKPOINT_DIR: AppOption = opt(
    "checkpoint_dir",
    "harp.checkpoint.dir",
    Kind::Value,
    None,
    "Checkpoint directory (default: OUTPUT/_checkpoints).",
);
/// See [`CHECKPOINT_EVERY`].
pub const RESUME: AppOption = opt(
    "resume",
    "harp.resume",
    Kind::Switch,
    None,
    "Continue from the newest complete checkpoint up to --iterations (from the start if there \
     is none).",
);

/// An application job and its options.
#[derive(Debug)]
pub struct AppJob {
    /// The job's name: the `harp` subcommand and the Hadoop example's.
    pub name: &'static str,
    /// One line for `--help` and the examples' list.
    pub about: &'static str,
    pub options: &'static [AppOption],
}

impl AppJob {
    /// The option called `name`; a name missing from the table is a bug of the caller.
    pub fn option(&self, name: &str) -> &'static AppOption {
        self.options
            .iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("harp {} has no option {name}", self.name))
    }

    /// The help of option `name` as `--help` shows it ([`AppOption::short_help`]).
    pub fn help(&self, name: &str) -> &'static str {
        self.option(name).short_help()
    }

    /// The default of option `name`, as text; an option without one is a bug of the caller.
    pub fn default(&self, name: &str) -> &'static str {
        self.option(name)
            .default
            .unwrap_or_else(|| panic!("harp {} --{} has no default", self.name, name))
    }

    /// The default of option `name`, parsed (`0.85`, `20`, …).
    pub fn default_of<T: std::str::FromStr>(&self, name: &str) -> T {
        self.default(name).parse().unwrap_or_else(|_| {
            panic!(
                "harp {} --{}: the default {:?} does not parse",
                self.name,
                name,
                self.default(name)
            )
        })
    }
}

/// Every application job, in the order `harp --help` lists them.
pub static JOBS: [&AppJob; 11] = [
    &KMEANS,
    &WORDCOUNT,
    &PAGERANK,
    &LDA,
    &MDS,
    &LAYOUT,
    &COMPONENTS,
    &ID3,
    &MFSGD,
    &NBODY,
    &CG,
];

/// The application job called `name`.
pub fn job(name: &str) -> Option<&'static AppJob> {
    JOBS.iter().copied().find(|j| j.name == name)
}

/// The option whose Java key is `key`, with its job (several jobs share `harp.overwrite` and
/// the checkpoint keys: the first is returned).
pub fn find_java(key: &str) -> Option<(&'static AppJob, &'static AppOption)> {
    JOBS.iter()
        .find_map(|j| j.options.iter().find(|o| o.java == key).map(|o| (*j, o)))
}

/// Earlier spellings of Java keys that the Hadoop examples still read, each with the key that
/// replaces it (documented as aliases in java/README.md); the new key wins when both are set.
pub static JAVA_ALIASES: &[(&str, &str)] = &[
    ("kmeans.skip.columns", "harp.kmeans.skip.columns"),
    ("kmeans.precision", "harp.kmeans.precision"),
    ("wordcount.partitions", "harp.wordcount.partitions"),
];

/// `harp kmeans`.
#[rustfmt::skip]
pub static KMEANS: AppJob = AppJob {
    name: "kmeans",
    about: "K-means (Lloyd's algorithm).",
    options: &[
        opt("input", "harp.kmeans.input", Kind::Required, None, "Points: a file or a directory of files."),
        opt("init", "harp.kmeans.init", Kind::Value, None, "Initial centroids (text, one per line); K and the dimension come from this file. Without it, --init-method kmeans++ or random with --k chooses them from the points."),
        opt("init_method", "harp.kmeans.init.method", Kind::Value, None, "Initialisation: file (--init), kmeans++ or random (need --k; reproducible from --seed)."),
        opt("k", "harp.kmeans.k", Kind::Value, None, "Number of centroids for --init-method kmeans++|random."),
        opt("seed", "harp.kmeans.seed", Kind::Value, Some("1"), "Seed for --init-method kmeans++|random."),
        opt("dim", "harp.kmeans.dim", Kind::Value, None, "Dimension of f32 input without --init (text input gives it on its first line)."),
        opt("iterations", "harp.kmeans.iterations", Kind::Value, Some("10"), "Iterations of Lloyd's algorithm (fewer when --tolerance stops it)."),
        opt("output", "harp.kmeans.output", Kind::Required, None, "Output directory for centroids.txt, summary.json and _SUCCESS (written by rank 0 when the run is complete; a failed run leaves the directory's earlier result as it was)."),
        OVERWRITE,
        CHECKPOINT_EVERY,
        CHECKPOINT_DIR,
        RESUME,
        opt("threads", "harp.kmeans.threads", Kind::Value, Some("1"), "Compute threads per worker."),
        opt("format", "harp.kmeans.format", Kind::Value, Some("text"), "Input format: text (one point per line) or f32 (raw little-endian f32 records)."),
        opt("skip_columns", "harp.kmeans.skip.columns", Kind::Value, Some("0"), "Leading columns to ignore on each text line (3 for the papers' HOG files)."),
        opt("allreduce", "harp.kmeans.allreduce", Kind::Value, Some("auto"), "Allreduce algorithm: auto, bidirectional-exchange or regroup-allgather."),
        opt("precision", "harp.kmeans.precision", Kind::Value, Some("f64"), "Arithmetic: f64 (default) or f32 (f32 points and centroids, sums in f64)."),
        opt("assign", "harp.kmeans.assign", Kind::Value, Some("auto"), "Assignment path: auto, gemm, pruned (exact, for low dimension and many centroids), yinyang (exact, skips distances with bounds) or hamerly (yinyang with one bound per point)."),
        opt("tolerance", "harp.kmeans.tolerance", Kind::Value, None, "Stop when an iteration lowers the inertia by at most this fraction (or nothing moves)."),
        opt("empty_cluster", "harp.kmeans.empty.cluster", Kind::Value, Some("keep"), "Empty-cluster rule: keep (the old centre) or split-largest."),
        opt("labels", "harp.kmeans.labels", Kind::Value, None, "Directory for per-point labels: each worker writes part-RRRRR, one label per line."),
    ],
};

/// `harp wordcount`.
#[rustfmt::skip]
pub static WORDCOUNT: AppJob = AppJob {
    name: "wordcount",
    about: "WordCount (Hadoop's example) on a key-value table.",
    options: &[
        opt("input", "harp.wordcount.input", Kind::Required, None, "Text: a file or a directory of files (names starting with `_` or `.` skipped)."),
        opt("output", "harp.wordcount.output", Kind::Required, None, "Output directory: part-RRRRR per worker (`word<TAB>count` lines, sorted by word) and _SUCCESS, committed when every worker has succeeded (a failed run leaves it as it was)."),
        OVERWRITE,
        opt("threads", "harp.wordcount.threads", Kind::Value, Some("1"), "Counting threads per worker."),
        opt("partitions", "harp.wordcount.partitions", Kind::Value, None, "Partition ids the words are spread over (default: 8 per worker); partition i ends on worker i mod W."),
    ],
};

/// `harp pagerank`.
#[rustfmt::skip]
pub static PAGERANK: AppJob = AppJob {
    name: "pagerank",
    about: "PageRank of an edge list.",
    options: &[
        opt("input", "harp.pagerank.input", Kind::Required, None, "Edges: a file or a directory of files, one `src dst [weight]` line per edge (non-negative integer ids, an optional positive weight, 1 when absent; blank lines and lines starting with `#` are skipped)."),
        opt("iterations", "harp.pagerank.iterations", Kind::Value, Some("20"), "Iterations of the power method."),
        opt("damping", "harp.pagerank.damping", Kind::Value, Some("0.85"), "Damping factor d in [0, 1]."),
        opt("threads", "harp.pagerank.threads", Kind::Value, Some("1"), "Compute threads per worker."),
        opt("messages", "harp.pagerank.messages", Kind::Value, Some("compiled"), "How contributions travel: compiled (dense arrays in a fixed key order) or kv (a key-value message table every iteration). Same ranks either way."),
        opt("output", "harp.pagerank.output", Kind::Required, None, "Output directory: one part-RRRRR file per worker of `vertex<TAB>rank` lines, and _SUCCESS (nothing is written on failure)."),
        OVERWRITE,
        CHECKPOINT_EVERY,
        CHECKPOINT_DIR,
        RESUME,
    ],
};

/// `harp lda`.
#[rustfmt::skip]
pub static LDA: AppJob = AppJob {
    name: "lda",
    about: "Latent Dirichlet allocation by collapsed Gibbs sampling with model rotation.",
    options: &[
        opt("input", "harp.lda.input", Kind::Required, None, "Documents: a file or a directory of files, one `doc_id word word …` line per document (fields separated by spaces or tabs; blank lines skipped)."),
        opt("words", "harp.lda.words", Kind::Value, Some("tokens"), "What the words are: tokens (any text without spaces) or ids (integers from 0 to 2147483646)."),
        opt("topics", "harp.lda.topics", Kind::Value, Some("100"), "Number of topics K (1 to 65535)."),
        opt("alpha", "harp.lda.alpha", Kind::Value, Some("0.1"), "Symmetric Dirichlet prior of the document-topic mixtures (per topic)."),
        opt("beta", "harp.lda.beta", Kind::Value, Some("0.01"), "Symmetric Dirichlet prior of the topic-word distributions (per word)."),
        opt("iterations", "harp.lda.iterations", Kind::Value, Some("50"), "Gibbs sampling sweeps over every token."),
        opt("seed", "harp.lda.seed", Kind::Value, Some("1"), "Seed of the first topics and of the sampling (a run is reproducible for a given worker count, --threads and seed)."),
        opt("threads", "harp.lda.threads", Kind::Value, Some("1"), "Sampling threads per worker (each samples its own documents against its own part of the word slice)."),
        opt("rotation", "harp.lda.rotation", Kind::Value, Some("pipelined"), "pipelined (two slices per worker: one rotates while the worker samples the other) or blocking (each rotate is waited for). Same counts either way."),
        opt("top_words", "harp.lda.top.words", Kind::Value, Some("10"), "Words listed per topic in topics.txt."),
        opt("output", "harp.lda.output", Kind::Required, None, "Output directory: part-RRRRR per worker (`doc_id<TAB>topic:share …` lines, the document's topic mixture), topics.txt (`topic<TAB>word:probability …`, the top words) and _SUCCESS; nothing is written on failure."),
        OVERWRITE,
        CHECKPOINT_EVERY,
        CHECKPOINT_DIR,
        RESUME,
    ],
};

/// `harp mds`.
#[rustfmt::skip]
pub static MDS: AppJob = AppJob {
    name: "mds",
    about: "Multidimensional scaling (WDA-SMACOF).",
    options: &[
        opt("input", "harp.mds.input", Kind::Required, None, "The N×N distance matrix: a file or a directory of files."),
        opt("weights", "harp.mds.weights", Kind::Value, None, "Weights, an N×N matrix in the same format (default: every weight 1)."),
        opt("format", "harp.mds.format", Kind::Value, Some("text"), "Matrix format: text (one row per line) or f64 (raw little-endian, row after row)."),
        opt("dim", "harp.mds.dim", Kind::Value, Some("2"), "Dimension of the embedding."),
        opt("iterations", "harp.mds.iterations", Kind::Value, Some("10"), "SMACOF iterations."),
        opt("init", "harp.mds.init", Kind::Value, None, "Initial coordinates: N lines of --dim numbers (default: uniform in [0,1) from --seed)."),
        opt("seed", "harp.mds.seed", Kind::Value, Some("1"), "Seed of the initial coordinates without --init."),
        opt("threads", "harp.mds.threads", Kind::Value, Some("1"), "Compute threads per worker."),
        opt("solver", "harp.mds.solver", Kind::Value, Some("auto"), "auto (guttman without --weights, cg with), guttman or cg."),
        opt("cg_iterations", "harp.mds.cg.iterations", Kind::Value, Some("20"), "Most conjugate-gradient steps per iteration."),
        opt("cg_tolerance", "harp.mds.cg.tolerance", Kind::Value, Some("1e-10"), "CG stops when the residual is at most this fraction of the right-hand side."),
        opt("temperature", "harp.mds.temperature", Kind::Value, Some("0"), "Deterministic annealing: initial temperature (0: off)."),
        opt("cooling", "harp.mds.cooling", Kind::Value, Some("0.95"), "Deterministic annealing: temperature factor per iteration, in (0, 1)."),
        opt("output", "harp.mds.output", Kind::Required, None, "Output directory: coords.txt, stress.txt, summary.json, _SUCCESS."),
        OVERWRITE,
        CHECKPOINT_EVERY,
        CHECKPOINT_DIR,
        RESUME,
    ],
};

/// `harp layout`.
#[rustfmt::skip]
pub static LAYOUT: AppJob = AppJob {
    name: "layout",
    about: "Force-directed graph drawing (Fruchterman–Reingold).",
    options: &[
        opt("input", "harp.layout.input", Kind::Required, None, "Edges: `src dst [weight]` lines of non-negative integer ids (a file or a directory of files; a weight is checked and not used)."),
        opt("iterations", "harp.layout.iterations", Kind::Value, Some("50"), "Iterations of the force simulation."),
        opt("seed", "harp.layout.seed", Kind::Value, Some("1"), "Seed of the initial positions (each vertex's from the seed and its id)."),
        opt("threads", "harp.layout.threads", Kind::Value, Some("1"), "Compute threads per worker."),
        opt("output", "harp.layout.output", Kind::Required, None, "Output directory: part-RRRRR files of `vertex x y` lines (each worker's vertices, in id order), summary.json, _SUCCESS."),
        OVERWRITE,
        CHECKPOINT_EVERY,
        CHECKPOINT_DIR,
        RESUME,
    ],
};

/// `harp components`.
#[rustfmt::skip]
pub static COMPONENTS: AppJob = AppJob {
    name: "components",
    about: "Connected components by label propagation over events.",
    options: &[
        opt("input", "harp.components.input", Kind::Required, None, "Edges: a file or a directory of files, one `src dst [weight]` line per edge (non-negative integer vertex ids; undirected; every id seen is a vertex; a weight is checked and not used; lines starting with `#` are skipped)."),
        opt("output", "harp.components.output", Kind::Required, None, "Output directory: `vertex<TAB>component` lines (component = the smallest vertex id in it), one part-RRRRR file per worker, then _SUCCESS; nothing is written on failure."),
        OVERWRITE,
    ],
};

/// `harp id3`.
#[rustfmt::skip]
pub static ID3: AppJob = AppJob {
    name: "id3",
    about: "An ID3 decision tree over events (Anthill's filters routed by label).",
    options: &[
        opt("input", "harp.id3.input", Kind::Required, None, "Tuples: a file or a directory of files, one CSV line `v1,…,vk,class` per tuple (the same k ≥ 1 on every line; fields trimmed; no quoting)."),
        opt("output", "harp.id3.output", Kind::Required, None, "Output directory: `PATH<TAB>split aI` and `PATH<TAB>leaf CLASS` lines (PATH `/` for the root, `aI=value/…` below), the nodes each worker decided in its part-RRRRR file, then _SUCCESS; nothing is written on failure."),
        OVERWRITE,
    ],
};

/// `harp mfsgd`.
#[rustfmt::skip]
pub static MFSGD: AppJob = AppJob {
    name: "mfsgd",
    about: "Matrix factorisation by SGD with model rotation.",
    options: &[
        opt("input", "harp.mfsgd.input", Kind::Required, None, "Training ratings: a file or a directory of files, one `user item rating` line per rating (non-negative integer ids, a finite number; blank lines and lines starting with `#` are skipped)."),
        opt("test", "harp.mfsgd.test", Kind::Value, None, "Held-out ratings in the same format: the test RMSE is printed after every epoch (without it, none)."),
        opt("rank", "harp.mfsgd.rank", Kind::Value, Some("16"), "Factors per user and per item."),
        opt("lambda", "harp.mfsgd.lambda", Kind::Value, Some("0.05"), "L2 regularisation of the factors."),
        opt("alpha", "harp.mfsgd.alpha", Kind::Value, Some("0.04"), "SGD learning rate of the first epoch."),
        opt("decay", "harp.mfsgd.decay", Kind::Value, Some("0.7"), "The learning rate is multiplied by this each epoch, in (0, 1] (1: constant)."),
        opt("epochs", "harp.mfsgd.epochs", Kind::Value, Some("10"), "Passes over the training ratings."),
        opt("seed", "harp.mfsgd.seed", Kind::Value, Some("1"), "Seed of the initial factors (each vector's from the seed and its id)."),
        opt("threads", "harp.mfsgd.threads", Kind::Value, Some("1"), "Compute threads per worker (the result does not depend on it)."),
        opt("blocks", "harp.mfsgd.blocks", Kind::Value, Some("8"), "User groups and item sub-slices per slice: each round updates this many disjoint blocks in parallel (the update order, so the result, depends on it)."),
        opt("rotation", "harp.mfsgd.rotation", Kind::Value, Some("pipelined"), "pipelined (a slice rotates while the worker updates its other slice) or blocking (each rotate is waited for). Same factors either way."),
        opt("output", "harp.mfsgd.output", Kind::Required, None, "Output directory: one part-RRRRR file per worker (`u<TAB>user<TAB>factors` lines for its users, `i<TAB>item<TAB>factors` for the items of its two home slices), rmse.txt (epoch and test RMSE) and _SUCCESS; nothing is written on failure."),
        OVERWRITE,
        CHECKPOINT_EVERY,
        CHECKPOINT_DIR,
        RESUME,
    ],
};

/// `harp nbody`.
#[rustfmt::skip]
pub static NBODY: AppJob = AppJob {
    name: "nbody",
    about: "N-body: direct forces with softening, leapfrog steps, positions allgathered each step.",
    options: &[
        opt("bodies", "harp.nbody.bodies", Kind::Value, Some("4096"), "Bodies, generated from the seed: mass 1/n, a position uniform in the unit ball, a velocity of three normals × 0.1."),
        opt("steps", "harp.nbody.steps", Kind::Value, Some("10"), "Leapfrog steps (kick, drift, positions gathered, forces, kick)."),
        opt("dt", "harp.nbody.dt", Kind::Value, Some("0.001"), "Time step (G = 1)."),
        opt("softening", "harp.nbody.softening", Kind::Value, Some("0.01"), "Softening length ε: forces go as d / (|d|² + ε²)^{3/2}."),
        opt("seed", "harp.nbody.seed", Kind::Value, Some("1"), "Seed of the bodies (each body's from the seed and its index)."),
        opt("threads", "harp.nbody.threads", Kind::Value, Some("1"), "Compute threads per worker (the result does not depend on it)."),
        opt("exchange", "harp.nbody.exchange", Kind::Value, Some("gather-broadcast"), "gather-broadcast (a gather to rank 0, then a broadcast: with a network model the network-aware algorithms) or allgather (the engine's allgather). Same result either way."),
        opt("output", "harp.nbody.output", Kind::Required, None, "Output directory: part-RRRRR files of `i x y z vx vy vz` lines (each worker's bodies, in index order), summary.json (energies and their drift, time per step), _SUCCESS."),
        OVERWRITE,
        CHECKPOINT_EVERY,
        CHECKPOINT_DIR,
        RESUME,
    ],
};

/// `harp cg`.
#[rustfmt::skip]
pub static CG: AppJob = AppJob {
    name: "cg",
    about: "Conjugate gradient on a sparse symmetric positive-definite system, rows partitioned.",
    options: &[
        opt("input", "harp.cg.input", Kind::Value, None, "The matrix: `row col value` lines of its lower triangle (row ≥ col, 0-based; the upper half is implied; repeated entries are added; blank lines and lines starting with `#` are skipped). Without it, --grid."),
        opt("grid", "harp.cg.grid", Kind::Value, None, "Generate the 2-D Poisson matrix (5-point Laplacian, Dirichlet) of a G×G grid instead of reading --input: n = G² rows."),
        opt("rhs", "harp.cg.rhs", Kind::Value, None, "The right-hand side: `row value` lines (rows not listed are 0). Without it, b = A·1 (the solution is all ones)."),
        opt("tolerance", "harp.cg.tolerance", Kind::Value, Some("1e-5"), "Stop when ‖r‖₂ ≤ tolerance · ‖r₀‖₂ (r₀ = b, x₀ = 0)."),
        opt("max_iterations", "harp.cg.max.iterations", Kind::Value, Some("1000"), "Stop after this many iterations if not converged (the summary says so)."),
        opt("threads", "harp.cg.threads", Kind::Value, Some("1"), "Compute threads per worker (the result does not depend on it)."),
        opt("exchange", "harp.cg.exchange", Kind::Value, Some("gather-broadcast"), "gather-broadcast (the vector gathered to rank 0 and broadcast, dot products reduced and broadcast: with a network model the network-aware algorithms) or allgather (the engine's allgather and allreduce). Same result either way."),
        opt("output", "harp.cg.output", Kind::Required, None, "Output directory: part-RRRRR files of `row x` lines (each worker's rows), summary.json (iterations, residual, time per iteration), _SUCCESS."),
        OVERWRITE,
        CHECKPOINT_EVERY,
        CHECKPOINT_DIR,
        RESUME,
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_flags_and_keys_follow_one_spelling() {
        let shared = [
            "harp.overwrite",
            "harp.resume",
            "harp.checkpoint.every",
            "harp.checkpoint.dir",
        ];
        for j in JOBS {
            let mut seen = std::collections::HashSet::new();
            for o in j.options {
                assert!(seen.insert(o.name), "{} lists {} twice", j.name, o.name);
                if !shared.contains(&o.java) {
                    assert_eq!(
                        o.java,
                        format!("harp.{}.{}", j.name, o.name.replace('_', ".")),
                        "{}",
                        o.name
                    );
                }
                assert!(
                    !o.help.is_empty() && o.help.ends_with(['.', ')']),
                    "{}",
                    o.help
                );
                match o.kind {
                    Kind::Required | Kind::Switch => assert!(o.default.is_none(), "{}", o.name),
                    Kind::Value => {}
                }
            }
            assert_eq!(job(j.name).map(|x| x.name), Some(j.name));
            // A job whose input can be generated instead (nbody, cg) has none or an optional one.
            if let Some(i) = j.options.iter().find(|o| o.name == "input") {
                assert_ne!(i.kind, Kind::Switch, "{}", j.name);
            }
            assert_eq!(j.option("output").kind, Kind::Required);
            assert_eq!(j.option("overwrite").java, "harp.overwrite");
        }
        assert!(job("bench").is_none());
        for j in JOBS {
            for o in j.options {
                let engine = super::super::EngineOption::find(o.java).is_some()
                    || super::super::JAVA_ONLY.iter().any(|(k, _)| *k == o.java);
                assert!(!engine, "{} is an engine or Java-layer key too", o.java);
                let mut c = super::super::Config::default();
                c.set(o.java, "x").unwrap();
            }
        }
        for (old, new) in JAVA_ALIASES {
            assert!(!old.starts_with("harp."), "{old}");
            assert!(find_java(new).is_some(), "{new}");
        }
        assert_eq!(
            find_java("harp.pagerank.damping").unwrap().1.name,
            "damping"
        );
        assert_eq!(PAGERANK.default_of::<f64>("damping"), 0.85);
        assert_eq!(MDS.default_of::<f64>("cg_tolerance"), 1e-10);
    }
}
