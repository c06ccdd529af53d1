//! The only native library the Java side loads: a thin shell over the `harp` engine. Each
//! module serves the Java class that declares its native methods; none holds engine logic.
//!
//! - [`native`]: `harp.Native` (starting a worker, the shared vocabularies, the self-test);
//! - [`worker`]: `harp.Worker` (rank, size, pool counters, close, abort, one export per
//!   collective);
//! - [`pending`]: `harp.Pending` (collectives started without blocking: `Worker.*Start`,
//!   test, get, close);
//! - [`table`]: `harp.Table` (partitions as direct buffers over pooled memory; key-value
//!   entry batches);
//! - [`kmeans`]: `harp.KMeans` (the engine's whole K-means loop);
//! - [`job`]: `harp.HarpJob` (one of the `harp` tool's jobs, run by a Hadoop task);
//! - [`checkpoint`]: `harp.Checkpoints` (a Java job's checkpoints of named tables and the
//!   iteration it resumes from);
//! - [`events`]: `harp.Events` (events between workers and termination detection, with Java
//!   handlers called back);
//! - [`kv_combiner`]: `harp.KvCombiner` (key-value combiners written in Java, called back);
//! - [`dense_combiner`]: `harp.DenseCombiner` (combiners of dense partitions written in Java,
//!   called back);
//! - [`errors`]: the one jni error policy (engine errors and panics become
//!   `harp.HarpException`), [`handles`]: the registry behind the `long` handles, [`convert`]:
//!   Java values, [`vocabulary`]: the names shared with Java.
//!
//! One tokio runtime serves every worker of the process; each worker has its own pool,
//! connections and sequence numbers (several mappers of one JVM are independent). The contract
//! of each method is documented in `docs/jni-contract.md`.

mod checkpoint;
mod convert;
mod dense_combiner;
mod errors;
mod events;
mod handles;
mod job;
mod kmeans;
mod kv_combiner;
mod native;
mod pending;
mod table;
mod vocabulary;
mod worker;
