//! The network measurement (`Worker::calibrate`) on in-process workers: every worker ends with
//! the same complete model, every ordered pair measured, the byte bound and the time budget
//! hold, and the cached start uses the master's cache.

mod common;

use harp::Collectives;
use harp::Opts;
use std::time::Duration;

use harp::calibrate::{cache_store, CalibrateOptions};
use harp::config::NetMeasure;
use harp::{Config, NetModel};

use common::{config, on_workers};

fn opts(bytes: u64, time: Duration) -> CalibrateOptions {
    CalibrateOptions {
        bytes,
        time,
        pings: 3,
    }
}

#[test]
fn every_worker_gets_the_same_model_of_every_pair_within_the_byte_bound() {
    for p in 1..=6 {
        let results = on_workers(p, config(Duration::from_secs(30)), |w| {
            let m = w
                .measure_network(&opts(256 * 1024, Duration::from_secs(60)))
                .unwrap();
            assert_eq!(
                w.net_model().as_deref(),
                Some(&*m.model),
                "set on the worker"
            );
            w.close();
            m
        });
        let first = &results[0];
        for m in &results {
            assert_eq!(m.model, first.model);
            assert_eq!(m.bytes, first.bytes);
            assert_eq!(m.source, "measured");
        }
        let model = &first.model;
        assert_eq!(model.workers(), p);
        for i in 0..p {
            for j in 0..p {
                if i != j {
                    let (l, b) = (model.latency(i, j), model.bandwidth(i, j));
                    assert!(l > 0.0 && l < 1.0, "p {p}: L({i},{j}) = {l}");
                    assert!(b.is_finite() && b > 1e5, "p {p}: B({i},{j}) = {b}");
                }
            }
        }
        // With three workers or more, each measured its intake: at least its fastest link.
        for u in 0..p {
            match model.host(u) {
                Some(h) => {
                    let fastest = (0..p)
                        .filter(|&j| j != u)
                        .map(|j| model.bandwidth(j, u))
                        .fold(0.0, f64::max);
                    assert!(p >= 3 && h >= fastest, "p {p}: host {u}: {h} < {fastest}");
                }
                None => assert!(p < 3, "p {p}: no intake of {u}"),
            }
        }
        // Every ordered pair moved exactly the bound alone (the budget is ample here); each
        // intake phase at least the bound and at most the bound per sender.
        let (pairs, bound) = ((p * (p - 1)) as u64, 256 * 1024);
        if p >= 3 {
            let intake = first.bytes - pairs * bound;
            assert!(intake >= p as u64 * bound, "p {p}: {intake}");
            assert!(intake <= pairs * bound, "p {p}: {intake}");
        } else {
            assert_eq!(first.bytes, pairs * bound, "p {p}");
        }
    }
}

/// A budget far too small for the bytes asked: the transfers shrink (at least one 16 KiB
/// frame per ordered pair) instead of moving 1 GiB each.
#[test]
fn the_time_budget_shrinks_the_transfers() {
    let results = on_workers(4, config(Duration::from_secs(30)), |w| {
        let m = w
            .measure_network(&opts(1 << 30, Duration::from_millis(60)))
            .unwrap();
        w.close();
        m
    });
    let m = &results[0];
    assert!(m.bytes >= 12 * 16 * 1024, "{}", m.bytes);
    assert!(m.bytes < 12 * (1 << 30), "{}", m.bytes);
    assert!(m.secs < 20.0, "{}", m.secs);
}

/// `net_measure = cached`: the first start measures and stores, the second takes the master's
/// cache entry (no transfer), and every worker holds the stored model.
#[test]
fn a_cached_start_uses_the_masters_cache_entry() {
    let dir = std::env::temp_dir().join(format!("harp-calibrate-test-{}", std::process::id()));
    let cfg = Config {
        net_measure: NetMeasure::Cached,
        net_measure_bytes: 64 * 1024,
        net_cache_dir: Some(dir.display().to_string()),
        ..config(Duration::from_secs(30))
    };
    let first = on_workers(3, cfg.clone(), |w| {
        let m = w.calibrate_at_start().unwrap().expect("measured");
        w.close();
        m
    });
    assert_eq!(first[0].source, "measured");
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 1, "one cache entry");
    // The measured model has every worker's intake, and the cache keeps it.
    assert!((0..3).all(|u| first[0].model.host(u).is_some()));
    // Replace the entry by a model no measurement would give, to see it come back with its
    // host capacities.
    let fake = NetModel::uniform(3, 0.5, 1234.0)
        .with_host(vec![2000.0, 3000.0, 4000.0])
        .unwrap();
    let topo = harp::Topology::flat((0..3).map(|r| format!("in-process:{r}")).collect());
    cache_store(&cfg, &topo, &fake).unwrap();
    let second = on_workers(3, cfg.clone(), |w| {
        let m = w.calibrate_at_start().unwrap().expect("from the cache");
        w.close();
        m
    });
    for m in &second {
        assert_eq!(*m.model, fake);
        assert_eq!(m.bytes, 0);
    }
    assert!(second[0].source.contains("net-"), "{}", second[0].source);
    let off = on_workers(2, config(Duration::from_secs(30)), |w| {
        let m = w.calibrate_at_start().unwrap();
        w.close();
        m.is_none()
    });
    assert_eq!(off, vec![true, true]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Recalibration on drift: with a model that promises far more than the network gives, 16
/// broadcasts drift well over 20% on every worker, `recalibrate_if_drifted` agrees and measures
/// anew (the new model replaces the promise and the drift window is cleared); called again
/// right away it measures nothing. Without a model nothing drifts and nothing is measured.
#[test]
fn drift_over_the_limit_recalibrates_every_worker_once() {
    use harp::collective::BroadcastAlgorithm;
    use harp::worker::DRIFT_WINDOW;
    use harp::{Array, Combiner, Table};
    let o = opts(128 * 1024, Duration::from_secs(30));
    let res = on_workers(3, config(Duration::from_secs(30)), |w| {
        assert!(w.recalibrate_if_drifted(&o).unwrap().is_none(), "no model");
        let promise = NetModel::uniform(3, 1e-9, 1e13);
        w.set_net_model(Some(promise.clone())).unwrap();
        for i in 0..DRIFT_WINDOW {
            let mut t = Table::new(Combiner::Sum);
            if w.rank() == 0 {
                t.add(0, Array::from_slice(w.pool(), &vec![1.0f64; 1 << 17]))
                    .unwrap();
            }
            w.broadcast(
                &format!("b{i}"),
                &mut t,
                Opts::default().algorithm(BroadcastAlgorithm::Chain),
            )
            .unwrap();
        }
        assert!(w.needs_recalibration(), "{:?}", w.model_drift());
        let m = w.recalibrate_if_drifted(&o).unwrap().expect("recalibrated");
        assert_ne!(*m, promise);
        assert_eq!(w.net_model().as_deref(), Some(&*m));
        assert_eq!(w.model_drift(), None, "window cleared");
        assert!(w.recalibrate_if_drifted(&o).unwrap().is_none(), "once");
        w.close();
        m
    });
    assert!(
        res.iter().all(|m| m == &res[0]),
        "the same new model everywhere"
    );
}

/// A worker that leaves instead of measuring makes every other worker fail naming it, long
/// before the timeout (a wait for it would show up as a timeout error instead).
#[test]
fn a_worker_that_leaves_the_measurement_is_named_by_everyone() {
    let t0 = std::time::Instant::now();
    let errors = on_workers(4, config(Duration::from_secs(120)), |w| {
        if w.rank() == 3 {
            drop(w);
            return None;
        }
        let e = w
            .measure_network(&opts(256 * 1024, Duration::from_secs(60)))
            .expect_err("rank 3 is gone");
        Some((e.kind().to_string(), e.to_string()))
    });
    for (r, e) in errors.iter().enumerate().take(3) {
        let (kind, msg) = e.as_ref().unwrap();
        assert!(kind == "peer-lost" || kind == "poisoned", "rank {r}: {msg}");
        assert!(msg.contains("rank 3 is gone"), "rank {r}: {msg}");
    }
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
}
