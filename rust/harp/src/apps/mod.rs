//! Applications written against the worker API.
pub mod kmeans;
