//! Applications written against the worker API, and what they share.
//! * [`output`]: a job's result directory, committed with `_SUCCESS` (nothing on failure).
//! * [`dense`]: dense vectors in contiguous per-worker blocks, gathered and reduced.
//! * [`kmeans`]: K-means (Lloyd's algorithm).
//! * [`wordcount`]: WordCount on a key-value table (local aggregation, one regroup).
//! * [`mds`]: multidimensional scaling (WDA-SMACOF).
//! * [`layout`]: force-directed graph drawing (Fruchterman–Reingold).
//! * [`pagerank`]: PageRank on the graph tables.
//! * [`mfsgd`]: matrix factorisation by SGD with model rotation.
//! * [`components`]: connected components by label propagation over events.
//! * [`lda`]: latent Dirichlet allocation by collapsed Gibbs sampling with model rotation.
//! * [`id3`]: an ID3 decision tree over events (Anthill's Counter, Attribute and Decision
//!   filters routed by label).
//! * [`exchange`]: the blocks and fixed-order sums of N-body and CG, gathered by a gather and a
//!   broadcast (the network model's choices) or by the engine's allgather.
//! * [`nbody`]: N-body, direct forces and leapfrog steps.
//! * [`cg`]: conjugate gradient on a sparse symmetric positive-definite system.
// Defines a fieldless option enum with its command-line names: `name()`, `Display` and a
// case-insensitive `FromStr` (the first name is canonical, the others are aliases) whose error
// lists the valid values.
macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident, $what:literal,
     { $($(#[$vm:meta])* $var:ident => $canon:literal $(| $alias:literal)*,)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name { $($(#[$vm])* $var,)+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$var,)+];

            /// The canonical command-line name.
            pub fn name(self) -> &'static str {
                match self { $($name::$var => $canon,)+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::error::Error;
            fn from_str(s: &str) -> $crate::error::Result<$name> {
                match s.to_ascii_lowercase().as_str() {
                    $($canon $(| $alias)* => Ok($name::$var),)+
                    _ => Err($crate::error::Error::config(format!(
                        concat!("unknown ", $what, " '{}': valid values are {}"),
                        s,
                        [$(concat!("'", $canon, "'")),+].join(", ")
                    ))),
                }
            }
        }
    };
}

/// The most compute threads a worker starts for one application (`--threads`): far more than
/// a machine has cores, and few enough to start (100 000 took minutes and never finished).
pub const MAX_THREADS: usize = 1024;

/// Fails unless `threads` is at most [`MAX_THREADS`] (0 follows each application's own rule).
pub fn check_threads(threads: usize) -> crate::error::Result<()> {
    if threads > MAX_THREADS {
        return Err(crate::error::Error::config(format!(
            "--threads {threads}: at most {MAX_THREADS} compute threads per worker"
        )));
    }
    Ok(())
}

/// A pool of `threads` compute threads for one application run.
pub fn compute_threads(threads: usize) -> crate::error::Result<rayon::ThreadPool> {
    check_threads(threads)?;
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| crate::error::Error::config(format!("cannot start {threads} threads: {e}")))
}

pub mod cg;
pub mod components;
pub mod dense;
pub mod exchange;
pub mod id3;
pub mod kmeans;
pub mod layout;
pub mod lda;
pub mod mds;
pub mod mfsgd;
pub mod nbody;
pub mod output;
pub mod pagerank;
pub mod wordcount;
