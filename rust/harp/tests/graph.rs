//! The graph collectives on in-process workers (p = 1…8) against a sequential model: every
//! edge (and message) ends on the worker holding its vertex, nothing is lost or duplicated,
//! with uneven tables (some workers start with nothing, others with many partitions).

mod common;

use harp::Collectives;
use harp::Opts;
use std::collections::BTreeMap;
use std::time::Duration;

use harp::data::graph::{vertex_partition, Edge, EdgeBuilder, Edges, Endpoint};
use harp::graph::{owner, regroup_edges, send_edges_to_vertices};
use harp::{Array, Combiner, Table};

use common::{config, on_workers};

/// A reproducible pseudo-random number from a few integers.
fn mix(parts: &[u64]) -> u64 {
    parts.iter().fold(0x243f_6a88_85a3_08d3u64, |h, &x| {
        let mut z = (h ^ x).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// Rank `r`'s starting edges of round `seed` among `p` workers: uneven (rank 1 holds none,
/// the others 0..3 partitions of 0..~60 edges with arbitrary ids), weighted or not; a few
/// vertex ids are huge or negative.
fn edges_of(seed: u64, p: usize, r: usize, weighted: bool) -> Vec<(u32, Vec<Edge>)> {
    if r == 1 {
        return Vec::new();
    }
    let parts = mix(&[seed, p as u64, r as u64]) % 4;
    (0..parts)
        .map(|k| {
            let n = mix(&[seed, r as u64, k, 1]) % (20 * (r as u64 + 1) + 1);
            let edges = (0..n)
                .map(|i| {
                    let v = |j| {
                        let x = mix(&[seed, r as u64, k, i, j]);
                        match x % 17 {
                            0 => (1i64 << 40) + (x % 5) as i64,
                            1 => -((x % 3) as i64) - 1,
                            _ => (x % 50) as i64,
                        }
                    };
                    Edge {
                        src: v(2),
                        dst: v(3),
                        weight: if weighted {
                            (i as f64) * 0.5 - k as f64
                        } else {
                            1.0
                        },
                    }
                })
                .collect();
            ((mix(&[seed, r as u64, k, 9]) % 7) as u32, edges)
        })
        .collect()
}

fn table_of(pool: &harp::Pool, parts: &[(u32, Vec<Edge>)], weighted: bool) -> Table {
    let mut t = Table::new(Combiner::Sum);
    for (pid, edges) in parts {
        let mut b = EdgeBuilder::new(weighted);
        for e in edges {
            b.push_edge(*e);
        }
        t.add(*pid, b.build(pool)).unwrap();
    }
    t
}

/// Sorted edges (src, dst, weight bits) per (worker, partition id).
type Placed = BTreeMap<(usize, u32), Vec<(i64, i64, u64)>>;

fn key(e: &Edge) -> (i64, i64, u64) {
    (e.src, e.dst, e.weight.to_bits())
}

/// Every edge of every rank goes to `place(edge)` = (worker, partition id); returns the model's
/// sorted edges per (worker, partition).
fn model(all: &[Vec<(u32, Vec<Edge>)>], place: impl Fn(&Edge) -> (usize, u32)) -> Placed {
    let mut m: Placed = BTreeMap::new();
    for parts in all {
        for (_, edges) in parts {
            for e in edges {
                m.entry(place(e)).or_default().push(key(e));
            }
        }
    }
    for v in m.values_mut() {
        v.sort_unstable();
    }
    m
}

fn got(r: usize, t: &Table) -> Placed {
    t.iter()
        .map(|(pid, a)| {
            let mut v: Vec<_> = Edges::of(a).unwrap().iter().map(|e| key(&e)).collect();
            v.sort_unstable();
            ((r, pid), v)
        })
        .collect()
}

/// Runs `f` on every worker of an in-process job of `p` workers (each closes its worker) and
/// merges what they hold, keyed by (rank, partition id).
fn held_by_all<K: Ord + Send, V: Send>(
    p: usize,
    f: impl Fn(&harp::Worker) -> BTreeMap<K, V> + Sync,
) -> BTreeMap<K, V> {
    on_workers(p, config(Duration::from_secs(30)), |w| {
        let g = f(&w);
        w.close();
        g
    })
    .into_iter()
    .flatten()
    .collect()
}

#[test]
fn regroup_edges_moves_every_edge_to_the_owner_of_its_vertex() {
    for p in 1..=8 {
        for (seed, by, partitions, weighted) in [
            (1u64, Endpoint::Src, 5u32, false),
            (2, Endpoint::Dst, 13, true),
            (3, Endpoint::Src, 1, false),
            (4, Endpoint::Dst, 32, false),
        ] {
            let all: Vec<_> = (0..p).map(|r| edges_of(seed, p, r, weighted)).collect();
            let want = model(&all, |e| {
                let pid = vertex_partition(e.endpoint(by), partitions);
                (owner(pid, p), pid)
            });
            let merged = held_by_all(p, |w| {
                let mut t = table_of(w.pool(), &all[w.rank()], weighted);
                regroup_edges(w, "edges", &mut t, by, partitions).unwrap();
                assert!(t
                    .iter()
                    .all(|(_, a)| a.layout() == harp::Layout::Edges { weighted }));
                got(w.rank(), &t)
            });
            assert_eq!(merged, want, "p = {p}, seed {seed}");
        }
    }
}

#[test]
fn edges_go_to_wherever_the_vertex_partitions_are() {
    for p in 1..=8 {
        let partitions = 11u32;
        // Vertex partition pid is held by rank (pid * 3 + 1) mod p, not by its modulo owner;
        // partition 10 by nobody (its edges go to the modulo owner).
        let holder = |pid: u32| (pid as usize * 3 + 1) % p;
        let all: Vec<_> = (0..p).map(|r| edges_of(7, p, r, false)).collect();
        let want = model(&all, |e| {
            let pid = vertex_partition(e.dst, partitions);
            let w = if pid == 10 {
                owner(pid, p)
            } else {
                holder(pid)
            };
            (w, pid)
        });
        let merged = held_by_all(p, |w| {
            let mut vertices = Table::new(Combiner::Sum);
            for pid in 0..10 {
                if holder(pid) == w.rank() {
                    vertices.put(pid, Array::from_slice(w.pool(), &[pid as f64]));
                }
            }
            let mut t = table_of(w.pool(), &all[w.rank()], false);
            send_edges_to_vertices(w, "to-v", &mut t, Endpoint::Dst, &vertices, partitions)
                .unwrap();
            got(w.rank(), &t)
        });
        assert_eq!(merged, want, "p = {p}");
    }
}

#[test]
fn send_messages_combines_every_message_at_the_owner_of_its_vertex() {
    use harp::data::kv::{self, Key, KeyType, KvTable, ValueType};
    use harp::graph::{send_messages, MessageTable};
    use harp::DType;
    for p in 1..=8 {
        for (seed, partitions, combiner) in [
            (11u64, 5u32, Combiner::Sum),
            (12, 13, Combiner::Min),
            (13, 1, Combiner::Sum),
            (14, 7, Combiner::Max),
        ] {
            // Rank r sends 0..~40·r messages (rank 1 none), several to the same vertex.
            let msgs = |r: usize| -> Vec<(i64, i64)> {
                if r == 1 {
                    return Vec::new();
                }
                let n = mix(&[seed, p as u64, r as u64]) % (40 * r as u64 + 3);
                (0..n)
                    .map(|i| {
                        let x = mix(&[seed, r as u64, i]);
                        let v = if x.is_multiple_of(11) {
                            -(x as i64 % 5) - (1 << 50)
                        } else {
                            (x % 30) as i64
                        };
                        (v, (x >> 20) as i64 % 1000 - 500)
                    })
                    .collect()
            };
            let mut want: BTreeMap<(usize, u32), BTreeMap<i64, i64>> = BTreeMap::new();
            for r in 0..p {
                for (v, x) in msgs(r) {
                    let pid = vertex_partition(v, partitions);
                    let slot = want.entry((owner(pid, p), pid)).or_default();
                    slot.entry(v)
                        .and_modify(|acc| {
                            *acc = match combiner {
                                Combiner::Min => (*acc).min(x),
                                Combiner::Max => (*acc).max(x),
                                _ => *acc + x,
                            }
                        })
                        .or_insert(x);
                }
            }
            let merged = held_by_all(p, |w| {
                // Built with the typed message table or the general key-value builder.
                let mut got = if seed % 2 == 1 {
                    let mut t = MessageTable::<i64>::new(combiner.clone(), partitions).unwrap();
                    for (v, x) in msgs(w.rank()) {
                        t.add(v, x).unwrap();
                    }
                    t.into_table(w.pool()).unwrap()
                } else {
                    let mut t = KvTable::new(
                        KeyType::I64,
                        ValueType::Scalar(DType::I64),
                        combiner.clone(),
                        partitions,
                    )
                    .unwrap();
                    for (v, x) in msgs(w.rank()) {
                        t.add_scalar(v, x).unwrap();
                    }
                    t.into_table(w.pool()).unwrap()
                };
                send_messages(w, "msgs", &mut got, partitions).unwrap();
                let mut g: BTreeMap<(usize, u32), BTreeMap<i64, i64>> = BTreeMap::new();
                for (pid, a) in got.iter() {
                    let m = g.entry((w.rank(), pid)).or_default();
                    for (k, v) in kv::entries(a).unwrap() {
                        let Key::I64(k) = k else { panic!("i64 keys") };
                        m.insert(k, v.get::<i64>().unwrap());
                    }
                }
                g
            });
            assert_eq!(merged, want, "p = {p}, seed {seed}");
        }
    }
}

/// Vertices partitioned differently from the edges would never meet them: a vertex partition
/// id not below P, or a key-value vertices table keyed by something other than i64 vertex ids,
/// fails every worker alike (checked on the gathered ids), naming the rank that holds it.
#[test]
fn vertices_partitioned_differently_from_the_edges_are_refused() {
    use harp::data::kv::{Key, KeyType, KvTable, ValueType};
    let results = on_workers(2, config(Duration::from_secs(10)), |w| {
        let all: Vec<_> = (0..2).map(|r| edges_of(3, 2, r, false)).collect();
        // Rank 1 holds vertex partition 7 of 8, the edges go to 4 partitions.
        let mut vertices = Table::new(Combiner::Sum);
        vertices.put(
            3 + 4 * w.rank() as u32,
            Array::from_slice(w.pool(), &[1.0f64]),
        );
        let mut t = table_of(w.pool(), &all[w.rank()], false);
        let before = t.ids();
        let beyond = send_edges_to_vertices(&w, "to-v", &mut t, Endpoint::Dst, &vertices, 4)
            .unwrap_err()
            .to_string();
        let kept = t.ids() == before;
        // String keys on rank 0.
        let mut kv = KvTable::new(
            if w.rank() == 0 {
                KeyType::Str
            } else {
                KeyType::I64
            },
            ValueType::Scalar(harp::DType::F64),
            Combiner::Sum,
            2,
        )
        .unwrap();
        let key = if w.rank() == 0 {
            Key::Str(b"v")
        } else {
            Key::I64(1)
        };
        kv.add_scalar(key, 1.0f64).unwrap();
        let vertices = kv.into_table(w.pool()).unwrap();
        let keys = send_edges_to_vertices(&w, "to-v", &mut t, Endpoint::Dst, &vertices, 2)
            .unwrap_err()
            .to_string();
        w.close();
        (beyond, kept, keys)
    });
    for (beyond, kept, keys) in &results {
        assert!(
            beyond.contains(
                "rank 1 holds vertex partition 7, but the edges go to 4 vertex partitions"
            ),
            "{beyond}"
        );
        assert!(*kept, "the edges stay where they were");
        assert!(
            keys.contains("rank 0's vertices table is keyed by something other than i64"),
            "{keys}"
        );
    }
}

/// Messages keyed by anything but i64 vertex ids fail the worker before it sends, and its peer
/// at once with the cause (not at the timeout); tables built with different partition counts
/// (whose messages to one vertex would not meet) fail the receivers, naming a key.
#[test]
fn messages_must_be_keyed_by_vertex_id_over_one_partition_count() {
    use harp::data::kv::{Key, KeyType, KvTable, ValueType};
    use harp::graph::{send_messages, MessageTable};
    let t0 = std::time::Instant::now();
    let results = on_workers(2, config(Duration::from_secs(20)), |w| {
        let mut t = if w.rank() == 0 {
            let mut words = KvTable::new(
                KeyType::Str,
                ValueType::Scalar(harp::DType::F64),
                Combiner::Sum,
                2,
            )
            .unwrap();
            words.add_scalar(Key::Str(b"v"), 1.0f64).unwrap();
            words.into_table(w.pool()).unwrap()
        } else {
            let mut m = MessageTable::<f64>::new(Combiner::Sum, 2).unwrap();
            m.add(7, 1.0).unwrap();
            m.into_table(w.pool()).unwrap()
        };
        let e = send_messages(&w, "m", &mut t, 2).unwrap_err();
        (e.kind(), e.to_string())
    });
    assert!(t0.elapsed() < Duration::from_secs(10), "{results:?}");
    let (kind, e) = &results[0];
    assert_eq!(*kind, "data", "{e}");
    assert!(
        e.starts_with("rank 0: regroup #1 'm': partition")
            && e.contains("keyed by vertex id (i64), not"),
        "{e}"
    );
    let (kind, e) = &results[1];
    assert_eq!(*kind, "peer-lost", "{e}");
    assert!(
        e.contains("rank 0 is gone") && e.contains("keyed by vertex id"),
        "{e}"
    );
    let dense = on_workers(1, config(Duration::from_secs(5)), |w| {
        let mut t = Table::new(Combiner::Sum);
        t.put(9, Array::from_slice(w.pool(), &[1.0f64]));
        send_messages(&w, "m", &mut t, 16).unwrap_err().to_string()
    });
    assert!(
        dense[0].contains("partition 9") && dense[0].contains("f64 elements"),
        "{dense:?}"
    );
    assert!(MessageTable::<f64>::new(Combiner::Append, 2).is_err());
    // 8 partitions on rank 0, 5 on rank 1: every worker's result would hold one vertex's
    // messages twice; every receiver fails instead.
    let results = on_workers(2, config(Duration::from_secs(20)), |w| {
        let n = if w.rank() == 0 { 8 } else { 5 };
        let mut m = MessageTable::<f64>::new(Combiner::Sum, n).unwrap();
        for v in 0..50 {
            m.add(v, 1.0).unwrap();
        }
        let mut t = m.into_table(w.pool()).unwrap();
        send_messages(&w, "m", &mut t, n).unwrap_err().to_string()
    });
    for (r, e) in results.iter().enumerate() {
        assert!(
            e.contains("different partition counts")
                || (e.contains("is gone") && e.contains("different partition counts")),
            "rank {r}: {e}"
        );
    }
}

/// Edge pieces from a peer: whole records assemble into an edge partition (and append to the
/// one held); a size that is not whole records, or a piece cut inside a record, is a protocol
/// error naming the partition, before anything is combined.
#[test]
fn received_edge_pieces_are_checked() {
    use harp::collective::{absorb, In};
    use harp::wire::PieceMeta;
    use harp::{Layout, Pool};
    let pool = Pool::default();
    let mut b = EdgeBuilder::new(false);
    b.push(1, 2, 1.0);
    b.push(3, 4, 1.0);
    let bytes = b.build(&pool).bytes().to_vec();
    let piece = |pid, total, offset: u64, len: u64| In {
        meta: PieceMeta {
            pid,
            layout: Layout::Edges { weighted: false },
            total,
            offset,
            len,
            inline: false,
        },
        buf: pool.copy_of(&bytes[offset as usize..(offset + len) as usize]),
    };
    let mut t = Table::new(Combiner::Sum);
    t.add(4, b.build(&pool)).unwrap();
    absorb(
        &mut t,
        &pool,
        vec![piece(4, 32, 16, 16), piece(4, 32, 0, 16)],
    )
    .unwrap();
    let got: Vec<(i64, i64)> = Edges::of(t.get(4).unwrap())
        .unwrap()
        .iter()
        .map(|e| (e.src, e.dst))
        .collect();
    assert_eq!(got, vec![(1, 2), (3, 4), (1, 2), (3, 4)]);
    for bad in [piece(6, 24, 0, 24), piece(6, 32, 8, 16), piece(6, 32, 0, 8)] {
        let e = absorb(&mut t, &pool, vec![bad]).unwrap_err();
        assert_eq!(e.kind(), "protocol", "{e}");
        assert!(e.to_string().contains("partition 6"), "{e}");
    }
    assert_eq!(t.ids(), vec![4]);
}

/// Edge tables travel through the chunked broadcast, the allgather and the allreduce whole or
/// in record-aligned pieces and arrive intact.
#[test]
fn edge_tables_survive_broadcast_and_allgather() {
    use harp::collective::{AllgatherAlgorithm, BroadcastAlgorithm};
    for p in [2usize, 3, 5] {
        for algo in [BroadcastAlgorithm::Chain, BroadcastAlgorithm::Binomial] {
            let results = on_workers(p, config(Duration::from_secs(30)), |w| {
                let mut t = Table::new(Combiner::Sum);
                if w.rank() == 1 {
                    // About 4.8 MB of weighted edges: cut into chunks.
                    let mut b = EdgeBuilder::new(true);
                    for i in 0..200_000i64 {
                        b.push(i, i * 7 - 3, i as f64 / 8.0);
                    }
                    t.put(3, b.build(w.pool()));
                }
                w.broadcast("b", &mut t, Opts::default().root(1).algorithm(algo))
                    .unwrap();
                let e = Edges::of(t.get(3).unwrap()).unwrap();
                let ok = e.len() == 200_000
                    && e.iter().enumerate().all(|(i, e)| {
                        let i = i as i64;
                        e.src == i && e.dst == i * 7 - 3 && e.weight == i as f64 / 8.0
                    });
                let mut g = Table::new(Combiner::Sum);
                let mut b = EdgeBuilder::new(false);
                for i in 0..w.rank() as i64 {
                    b.push(w.rank() as i64, i, 1.0);
                }
                g.put(w.rank() as u32, b.build(w.pool()));
                w.allgather(
                    "g",
                    &mut g,
                    Opts::default().algorithm(AllgatherAlgorithm::Ring),
                )
                .unwrap();
                let sizes: Vec<usize> = (0..p as u32)
                    .map(|r| Edges::of(g.get(r).unwrap()).unwrap().len())
                    .collect();
                // Allreduce of one shared id: every worker ends with every edge.
                let mut a = Table::new(Combiner::Sum);
                let mut b = EdgeBuilder::new(false);
                for i in 0..=w.rank() as i64 {
                    b.push(w.rank() as i64, i, 1.0);
                }
                a.put(0, b.build(w.pool()));
                w.allreduce(
                    "a",
                    &mut a,
                    Opts::default().algorithm(harp::collective::AllreduceAlgorithm::Auto),
                )
                .unwrap();
                let mut all: Vec<(i64, i64)> = Edges::of(a.get(0).unwrap())
                    .unwrap()
                    .iter()
                    .map(|e| (e.src, e.dst))
                    .collect();
                all.sort_unstable();
                let want: Vec<(i64, i64)> = (0..p as i64)
                    .flat_map(|r| (0..=r).map(move |i| (r, i)))
                    .collect();
                assert_eq!(all, want, "allreduce, p = {p}");
                w.close();
                (ok, sizes)
            });
            for (ok, sizes) in results {
                assert!(ok, "p = {p}, {algo:?}");
                assert_eq!(sizes, (0..p).collect::<Vec<_>>());
            }
        }
    }
}
