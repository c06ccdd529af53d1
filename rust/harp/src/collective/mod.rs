//! Collective operations. One file per family, one function per algorithm; the cost of each
//! algorithm is in its doc comment with α the per-message latency, β the time per byte, n the
//! bytes involved and p the number of workers. Every automatic choice lives in [`choose`].
//!
//! All algorithms move *pieces*: byte ranges of partitions (a whole partition is one piece).
//! Large pieces are written straight from the partition's pooled buffer and received straight
//! into a pooled buffer that becomes the partition (no copy) when the piece is whole.
//!
//! The files form one-way layers: a file uses only files of the layers above it in this list
//! (and, inside a layer, only those listed before it).
//!
//! 1. Pieces: [`tags`] (the tag range of every phase), [`ctx`] (an operation's context, the
//!    root check), [`join`] (concurrent sends and receives), [`framing`] (batches of pieces on
//!    the wire), [`assemble`] (received pieces into tables), [`segment`] (cutting partitions
//!    into segments and chunks).
//! 2. Names: [`algorithm`] (the algorithm type of every family).
//! 3. Trees: [`trees`] (the [`Tree`](trees::Tree) type and the shapes that need no network
//!    model), [`hierarchy`] (the network performance hierarchy and the network-aware orders
//!    and trees), [`shapes`] (which tree each algorithm runs on).
//! 4. Exchanges shared by several families: [`barrier`] (dissemination rounds: the barrier
//!    and the agreement on a maximum), [`doubling`] (recursive doubling with the agreement on
//!    the way), [`rings`] (ring reduce-scatter and allgather over segments), [`pipeline`]
//!    (pipelined reduce along a tree).
//! 5. Cost models: [`fluid`] (a worker's intake shared by many senders), [`relay`] (the relay
//!    plan, searched with the fluid model), [`costs`] (the predicted time of every algorithm).
//! 6. [`choose`]: every automatic choice, and `resolve` of the algorithm types.
//! 7. The families: [`broadcast`], [`reduce`], [`gather`], [`scatter`], [`allgather`],
//!    [`allreduce`], [`regroup`] (regroup, reduce-scatter, push, pull, rotate); each runs its
//!    automatic algorithm by asking [`choose`], and no family uses another.

pub mod assemble;
pub mod ctx;
pub mod framing;
pub mod join;
pub mod segment;
pub mod tags;

pub mod algorithm;

pub mod hierarchy;
pub mod shapes;
pub mod trees;

pub mod barrier;
pub mod doubling;
pub mod pipeline;
pub mod rings;

pub mod costs;
pub mod fluid;
pub mod relay;

pub mod choose;

pub mod allgather;
pub mod allreduce;
pub mod broadcast;
pub mod gather;
pub mod reduce;
pub mod regroup;
pub mod scatter;

pub use algorithm::{
    AllgatherAlgorithm, AllreduceAlgorithm, BroadcastAlgorithm, GatherAlgorithm, ReduceAlgorithm,
    ReduceScatterAlgorithm, ScatterAlgorithm,
};
pub use assemble::{absorb, write_pieces, Assembler};
pub use ctx::{Ctx, IdMap};
pub use framing::{
    parse_head, recv_batch, recv_head, recv_pieces, send_batch, send_batch_inline, send_batch_many,
    table_pieces, BatchHead, In, Out,
};
pub use join::{boxed, join_all};
pub use segment::{split_ranges, Segmenter};
