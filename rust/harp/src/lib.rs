//! Harp-RS engine: the Map-Collective model in Rust.
//!
//! Layers, bottom to top (each uses only the ones above it in this list):
//! * [`error`]: one error type, every message names the rank, the operation and the peer.
//! * [`pool`]: size-classed, aligned, reusable buffers with statistics.
//! * [`data`]: typed arrays → partitions → tables, combiners, partitioners, local aggregation.
//! * [`storage`]: local files (and later `hdfs://`) behind one trait.
//! * [`apps`]: applications written against the worker API (K-means).

pub mod apps;
pub mod check;
pub mod data;
pub mod error;
pub mod pool;
pub mod storage;

pub use data::{Array, Combiner, DType, Partition, Partitioner, Table};
pub use error::{Error, Result};
pub use pool::{Buf, Pool, PoolConfig, PoolStats};
pub mod collective;
pub mod config;
pub mod topology;
pub mod transport;
pub mod wire;
pub mod worker;

pub use config::Config;
pub use topology::Topology;
pub use worker::{Listener, Worker};
