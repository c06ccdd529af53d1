//! Allreduce: afterwards every worker's table is the combination of all tables,
//! bit-identical on every worker.

use super::choose;
use super::ctx::Ctx;
use super::doubling::doubling;
use super::rings::{ring_allgather_segments, ring_reduce_scatter};
use super::segment::Segmenter;
use crate::data::Table;
use crate::error::Result;

/// Recursive doubling ("bidirectional exchange"). Non-powers of two fold the extra ranks into
/// the first ones before and send the result back after.
/// Cost: ⌈log2 p⌉ (α + nβ) (+ 2(α + nβ) when p is not a power of two).
pub async fn bidirectional_exchange(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    doubling(cx, table, None).await.map(|_| ())
}

/// The automatic allreduce: bidirectional exchange that agrees on the way whether any
/// worker's table reaches the crossover for p (`Config::allreduce_crossover` up to p = 8 or
/// with racks, growing with p beyond: [`choose::allreduce_crossover_at`]), then
/// regroup-allgather if one does (how and at what cost: [`choose`]).
pub async fn auto(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    let crossover = choose::allreduce_crossover_at(cx.topo, cx.cfg.allreduce_crossover);
    let large = choose::allreduce_large(table.bytes(), crossover);
    if doubling(cx, table, Some(large)).await? {
        regroup_allgather(cx, table).await?;
    }
    Ok(())
}

/// Regroup-allgather: ring reduce-scatter of segments, then ring allgather of the reduced
/// segments. Large partitions with an element-wise combiner are cut into p segments, so even a
/// single big partition is spread evenly. Cost: 2(p−1)/p · nβ + 2(p−1)α.
pub async fn regroup_allgather(cx: &Ctx<'_>, table: &mut Table) -> Result<()> {
    let seg = Segmenter::new(cx, table);
    ring_reduce_scatter(cx, table, &seg).await?;
    ring_allgather_segments(cx, table, &seg).await
}
