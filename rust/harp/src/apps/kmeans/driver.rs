//! Distributed K-means (Lloyd's algorithm) on the worker API, as in the Harp paper's
//! allreduce-style K-means: the master broadcasts the initial centroids, every worker assigns its
//! share of the points with the blocked multithreaded kernel, one allreduce combines the
//! per-centroid sums, counts and the inertia, and every worker computes the same new centroids.
//! A cluster that receives no point keeps its previous centroid.

use std::time::Instant;

use super::input::{self, Format, Points};
use super::kernel::Kernel;
use crate::collective::{AllreduceAlgorithm, BroadcastAlgorithm};
use crate::data::{Array, Combiner, DType, Table};
use crate::error::{Error, Result};
use crate::storage;
use crate::worker::Worker;

#[derive(Debug, Clone)]
pub struct Options {
    pub input: String,
    pub init: String,
    pub iterations: usize,
    pub threads: usize,
    pub format: Format,
    pub skip_columns: usize,
    pub allreduce: AllreduceAlgorithm,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Iteration {
    pub iteration: usize,
    /// Sum of squared distances of every point to its nearest centroid (before the update).
    pub inertia: f64,
    pub compute_s: f64,
    pub comm_s: f64,
    /// The pool's allocation counter after this iteration (flat in the steady state).
    pub pool_allocations: u64,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub centroids: Points,
    pub points: u64,
    pub iterations: Vec<Iteration>,
    pub load_s: f64,
}

/// Runs K-means; every worker returns the same centroids. `progress` sees every iteration.
pub fn run(w: &Worker, o: &Options, mut progress: impl FnMut(&Iteration)) -> Result<Outcome> {
    let pool = w.pool();
    // Initial centroids: read by the master, broadcast to all (shape in partition 1).
    let mut init = Table::new(Combiner::Reject);
    if w.is_master() {
        let c = input::read_centroids(
            &*storage::for_path_on(&o.init, Some(w.runtime().clone()))?,
            &o.init,
        )?;
        init.put(0, Array::from_slice(pool, &c.data));
        init.put(1, Array::from_slice(pool, &[c.n as i64, c.dim as i64]));
    }
    w.broadcast("kmeans-init", &mut init, 0, BroadcastAlgorithm::Auto)?;
    let shape = init
        .get(1)
        .ok_or_else(|| Error::Protocol("initial centroids did not arrive".into()))?
        .as_slice::<i64>()?
        .to_vec();
    let (k, dim) = (shape[0] as usize, shape[1] as usize);
    let mut centroids = init.get(0).expect("centroids").as_slice::<f64>()?.to_vec();
    drop(init);

    let t0 = Instant::now();
    let points = input::load_share(
        &*storage::for_path_on(&o.input, Some(w.runtime().clone()))?,
        &o.input,
        o.format,
        o.skip_columns,
        dim,
        w.rank(),
        w.size(),
    )?;
    let load_s = t0.elapsed().as_secs_f64();
    let mut total = Table::new(Combiner::Sum);
    total.put(0, Array::from_slice(pool, &[points.n as i64]));
    w.allreduce(
        "kmeans-count",
        &mut total,
        AllreduceAlgorithm::BidirectionalExchange,
    )?;
    let n_total = total.get(0).expect("count").as_slice::<i64>()?[0] as u64;
    if n_total == 0 {
        return Err(Error::config(format!("no points in {}", o.input)));
    }

    let kernel = Kernel::new(o.threads)?;
    let mut its = Vec::with_capacity(o.iterations);
    for it in 1..=o.iterations {
        let t0 = Instant::now();
        // One partition: k·dim sums, k counts, then the inertia.
        let mut acc = Array::zeros(pool, DType::F64, k * dim + k + 1);
        {
            let v = acc.as_mut_slice::<f64>()?;
            let (sums, rest) = v.split_at_mut(k * dim);
            let (counts, inertia) = rest.split_at_mut(k);
            inertia[0] = kernel.assign_accumulate(&points.data, dim, &centroids, k, sums, counts);
        }
        let mut table = Table::new(Combiner::Sum);
        table.put(0, acc);
        let compute_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        w.allreduce("kmeans-sums", &mut table, o.allreduce)?;
        let comm_s = t1.elapsed().as_secs_f64();
        let v = table.get(0).expect("sums").as_slice::<f64>()?;
        let (sums, rest) = v.split_at(k * dim);
        for j in 0..k {
            if rest[j] > 0.0 {
                for d in 0..dim {
                    centroids[j * dim + d] = sums[j * dim + d] / rest[j];
                }
            }
        }
        let rec = Iteration {
            iteration: it,
            inertia: rest[k],
            compute_s,
            comm_s,
            pool_allocations: pool.stats().allocations,
        };
        drop(table);
        progress(&rec);
        its.push(rec);
    }
    Ok(Outcome {
        centroids: Points {
            n: k,
            dim,
            data: centroids,
        },
        points: n_total,
        iterations: its,
        load_s,
    })
}

/// Single-process reference (plain loops, no blocking, no threads): the same algorithm the
/// distributed run must reproduce.
pub fn reference(points: &Points, init: &Points, iterations: usize) -> Points {
    let (k, dim) = (init.n, init.dim);
    let mut c = init.data.clone();
    for _ in 0..iterations {
        let mut sums = vec![0.0; k * dim];
        let mut counts = vec![0.0; k];
        super::kernel::assign_naive(&points.data, dim, &c, k, 1, &mut sums, &mut counts);
        for j in 0..k {
            if counts[j] > 0.0 {
                for d in 0..dim {
                    c[j * dim + d] = sums[j * dim + d] / counts[j];
                }
            }
        }
    }
    Points { n: k, dim, data: c }
}
