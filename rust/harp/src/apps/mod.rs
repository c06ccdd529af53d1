//! Applications written against the worker API, and what they share.
//! * [`output`]: a job's result directory, committed with `_SUCCESS` (nothing on failure).
//! * [`kmeans`]: K-means (Lloyd's algorithm).
//! * [`pagerank`]: PageRank on the graph tables.
//! * [`wordcount`]: WordCount on a key-value table (local aggregation, one regroup).
pub mod kmeans;
pub mod output;
pub mod pagerank;
pub mod wordcount;
