//! Harp-RS engine: the Map-Collective model in Rust.
//!
//! Modules, bottom to top (each uses only the ones listed before it; `tests/architecture.rs`
//! checks it against the table of docs/architecture.md):
//! * [`error`]: one error type, every message names the rank, the operation and the peer.
//! * [`util`]: quoting for error messages, the stable hashes (splitmix64, FNV-1a), the random
//!   generator, the host's available memory.
//! * [`pool`]: size-classed, aligned, reusable buffers with statistics.
//! * [`data`]: typed arrays → partitions → tables, layouts, combiners, partitioners, local
//!   aggregation.
//! * [`wire`]: the frame header, batch metadata (pieces with their layouts), op codes.
//! * [`config`]: timeouts, socket options, crossovers of the automatic algorithms.
//! * [`transport`]: authenticated connections, the mailbox, heartbeats, timeouts, aborts.
//! * [`topology`]: hosts, racks, rack-ordered chains.
//! * [`netmodel`]: the measured latency and bandwidth of every worker pair (CMPI's L and B).
//! * [`collective`]: the collective algorithms, their automatic choices and the piece machinery.
//! * [`worker`]: a running worker and its synchronous collective API.
//! * [`calibrate`]: measuring the network model (`Worker::calibrate`) and its cache.
//! * [`graph`]: the graph collectives (regroup edges, send edges or messages to vertices).
//! * [`events`]: events between workers outside the collectives (to one, all, or by label)
//!   and distributed termination detection (`Worker::run_until_quiet`).
//! * [`check`]: the sequential model of every collective and fault injection, for tests and
//!   `harp check`.
//! * [`storage`]: local files and `hdfs://` behind one trait.
//! * [`io`]: Hadoop-style input splitting and reading of a worker's share (lines, records).
//! * [`checkpoint`]: consistent checkpoints of named tables at an iteration (resume).
//! * [`apps`]: applications written against the worker API (K-means).

pub mod apps;
pub mod calibrate;
pub mod check;
pub mod checkpoint;
pub mod collective;
pub mod config;
pub mod data;
pub mod error;
pub mod events;
pub mod graph;
pub mod io;
pub mod netmodel;
pub mod pool;
pub mod sched;
pub mod sim;
pub mod storage;
pub mod topology;
pub mod transport;
pub mod util;
pub mod wire;
pub mod worker;

pub use config::{Config, TcpCongestion};
pub use data::{Array, Combiner, DType, Layout, Partition, Partitioner, Table};
pub use error::{Error, Result};
pub use netmodel::NetModel;
pub use pool::{Buf, Pool, PoolConfig, PoolStats};
pub use topology::Topology;
pub use worker::{Collectives, Group, Listener, Opts, Pending, Worker};
