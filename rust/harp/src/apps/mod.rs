//! Applications written against the worker API, and what they share.
//! * [`output`]: a job's result directory, committed with `_SUCCESS` (nothing on failure).
//! * [`dense`]: dense vectors in contiguous per-worker blocks, gathered and reduced.
//! * [`kmeans`]: K-means (Lloyd's algorithm).
//! * [`mds`]: multidimensional scaling (WDA-SMACOF).
//! * [`layout`]: force-directed graph drawing (Fruchterman–Reingold).
pub mod dense;
pub mod kmeans;
pub mod layout;
pub mod mds;
pub mod output;
