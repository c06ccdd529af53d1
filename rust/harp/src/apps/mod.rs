//! Applications written against the worker API, and what they share.
//! * [`output`]: a job's result directory, committed with `_SUCCESS` (nothing on failure).
//! * [`kmeans`]: K-means (Lloyd's algorithm).
//! * [`components`]: connected components by label propagation over events.
pub mod components;
pub mod kmeans;
pub mod output;
