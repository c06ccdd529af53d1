//! K-means (Lloyd's algorithm) on the Map-Collective model.
//!
//! * [`input`]: reading points (text or raw f32, split across workers) and centroids.
//! * [`kernel`]: the map step, a blocked GEMM-based nearest-centroid assignment.
//! * [`pruned`]: the exact KD-tree assignment for low dimensions.
//! * [`yinyang`]: the exact bound-based assignment (Yinyang K-means) for any dimension.
//! * [`gen`]: reproducible test data.
//! * [`driver`]: the distributed iteration loop on the worker API, and a sequential reference.
//! * [`bench`](mod@bench): a micro-benchmark of the kernel.

pub mod bench;
pub mod driver;
mod fused;
pub mod gen;
pub mod input;
pub mod kernel;
pub mod pruned;
pub mod real;
pub mod yinyang;
