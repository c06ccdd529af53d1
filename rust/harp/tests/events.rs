//! Events between in-process workers: order per sender, labels, interleaving with collectives,
//! termination detection under adversarial schedules, and failures.

mod common;

use harp::Collectives;
use harp::Opts;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{config, on_workers};
use harp::events::{label_receivers, Quiet};
use harp::util::Rng;
use harp::{Array, Combiner, DType, Table, Worker};

fn cfg() -> harp::Config {
    config(Duration::from_secs(20))
}

fn enc(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn dec(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// After termination nothing arrives on any worker, even a while later.
fn nothing_after(w: &Worker) {
    std::thread::sleep(Duration::from_millis(30));
    assert!(w.try_event().unwrap().is_none(), "rank {}", w.rank());
}

/// Every worker sends numbered events to every worker (itself included) and labeled ones;
/// each receiver sees every sender's events in order, and labeled ones only where the label's
/// hash sends them.
#[test]
fn events_keep_each_senders_order_and_labels_pick_their_receivers() {
    for p in 1..=4 {
        const N: u64 = 200;
        let res = on_workers(p, cfg(), |w: Worker| {
            let r = w.rank();
            for i in 0..N {
                w.send_event((r + i as usize) % p, &enc(&[r as u64, i]))
                    .unwrap();
                if i % 10 == 0 {
                    let label = format!("key-{}", i / 10);
                    let to = w
                        .send_labeled(&label, 1 + (i as usize / 10) % p, &enc(&[r as u64, i]))
                        .unwrap();
                    assert_eq!(to, label_receivers(&label, 1 + (i as usize / 10) % p, p));
                }
            }
            let mut next = vec![0u64; p];
            let mut labeled = 0u64;
            let q = w
                .run_until_quiet(|ev| {
                    let v = dec(ev.payload());
                    assert_eq!(v[0], ev.src as u64);
                    match &ev.label {
                        None => {
                            assert!(v[1] >= next[ev.src], "out of order from {}", ev.src);
                            assert_eq!((ev.src + v[1] as usize) % p, r);
                            next[ev.src] = v[1] + 1;
                        }
                        Some(l) => {
                            let copies = 1 + (v[1] as usize / 10) % p;
                            assert_eq!(l, &format!("key-{}", v[1] / 10));
                            assert!(label_receivers(l, copies, p).contains(&r));
                            labeled += 1;
                        }
                    }
                    Ok(())
                })
                .unwrap();
            nothing_after(&w);
            w.close();
            (q, labeled)
        });
        let plain = N * p as u64;
        let labeled: u64 = (0..N / 10)
            .map(|k| (1 + k as usize % p) as u64 * p as u64)
            .sum();
        let handled: u64 = res.iter().map(|(q, _)| q.handled).sum();
        assert_eq!(handled, plain + labeled, "p={p}");
        assert_eq!(res.iter().map(|(_, l)| l).sum::<u64>(), labeled);
        for (q, _) in &res {
            assert_eq!((q.events, q.waves), (res[0].0.events, res[0].0.waves));
            assert_eq!(q.events, plain + labeled);
        }
    }
}

/// Events queued while collectives run are not taken by them, and the collectives' frames are
/// not taken as events: a worker sends events, then joins an allreduce and a barrier while its
/// peers' events pile up; all arrive afterwards, in order, and the sums are right.
#[test]
fn events_and_collectives_interleave_without_confusion() {
    for p in 2..=4 {
        let res = on_workers(p, cfg(), |w: Worker| {
            let r = w.rank();
            let pool = w.pool().clone();
            let mut got = vec![Vec::new(); p];
            for round in 0..5u64 {
                // Uneven: rank r sends r + 1 events per round to every other worker.
                for dst in (0..p).filter(|&d| d != r) {
                    for k in 0..=r as u64 {
                        w.send_event(dst, &enc(&[round, k])).unwrap();
                    }
                }
                if r == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let mut t = Table::new(Combiner::Sum);
                t.add(0, Array::from_slice(&pool, &[r as i64 + round as i64]))
                    .unwrap();
                w.allreduce("sum", &mut t, Opts::default()).unwrap();
                let want: i64 = (0..p as i64).map(|k| k + round as i64).sum();
                assert_eq!(t.get(0).unwrap().as_slice::<i64>().unwrap(), &[want]);
                // Half the events are taken between the two collectives, the rest after.
                let expect = (p * (p + 1) / 2 - (r + 1)) as u64;
                let mut taken = 0;
                while taken < expect / 2 {
                    let ev = w.wait_event(Duration::from_secs(10)).unwrap().unwrap();
                    got[ev.src].push(dec(ev.payload()));
                    taken += 1;
                }
                w.barrier("mid").unwrap();
                while taken < expect {
                    let ev = w.wait_event(Duration::from_secs(10)).unwrap().unwrap();
                    got[ev.src].push(dec(ev.payload()));
                    taken += 1;
                }
                w.barrier("round").unwrap();
            }
            assert!(w.try_event().unwrap().is_none());
            w.close();
            got
        });
        for (r, got) in res.iter().enumerate() {
            for (src, evs) in got.iter().enumerate() {
                let want: Vec<Vec<u64>> = if src == r {
                    vec![]
                } else {
                    (0..5u64)
                        .flat_map(|round| (0..=src as u64).map(move |k| vec![round, k]))
                        .collect()
                };
                assert_eq!(evs, &want, "p={p} rank {r} from {src}");
            }
        }
    }
}

/// A random workload with adversarial timing: every handled event spawns 0..3 events to random
/// workers while its hop budget lasts, handlers sometimes sleep, one worker joins late, and one
/// chain hop waits long enough for many detection waves to pass. Detection never ends early:
/// every sent event is handled, totals agree everywhere, nothing arrives afterwards; several
/// phases run back to back.
#[test]
fn termination_is_never_early_under_adversarial_schedules() {
    for p in 1..=4 {
        let sent_total = AtomicU64::new(0);
        let res = on_workers(p, cfg(), |w: Worker| {
            let r = w.rank();
            let mut rng = Rng::new(0x5eed + r as u64 * 7919 + p as u64);
            let mut quiets: Vec<Quiet> = Vec::new();
            let mut handled_total = 0;
            for phase in 0..4u64 {
                if r == p - 1 && phase % 2 == 1 {
                    // Joins late: the others are idle and probing in the meantime.
                    std::thread::sleep(Duration::from_millis(60));
                }
                let mut sent = 0;
                for _ in 0..3 {
                    let dst = rng.below(p);
                    w.send_event(dst, &enc(&[6, 0])).unwrap();
                    sent += 1;
                }
                if r == 0 && phase == 2 {
                    // A late wake-up: one event after a long pause inside a handler chain.
                    w.send_event(p - 1, &enc(&[0, 1])).unwrap();
                    sent += 1;
                }
                let q = w
                    .run_until_quiet(|ev| {
                        let v = dec(ev.payload());
                        let (hops, slow) = (v[0], v[1]);
                        if slow == 1 {
                            std::thread::sleep(Duration::from_millis(150));
                            w.send_event(0, &enc(&[0, 2]))?;
                            sent += 1;
                            return Ok(());
                        }
                        if rng.below(8) == 0 {
                            std::thread::sleep(Duration::from_millis(rng.below(4) as u64));
                        }
                        if hops > 0 {
                            for _ in 0..rng.below(3) {
                                let dst = rng.below(p);
                                w.send_event(dst, &enc(&[hops - 1, 0]))?;
                                sent += 1;
                            }
                        }
                        Ok(())
                    })
                    .unwrap();
                nothing_after(&w);
                sent_total.fetch_add(sent, Ordering::SeqCst);
                handled_total += q.handled;
                quiets.push(q);
                w.barrier("phase").unwrap();
            }
            w.close();
            (quiets, handled_total)
        });
        let handled: u64 = res.iter().map(|(_, h)| h).sum();
        assert_eq!(handled, sent_total.load(Ordering::SeqCst), "p={p}");
        for phase in 0..4 {
            let first = res[0].0[phase];
            let sum: u64 = res.iter().map(|(q, _)| q[phase].handled).sum();
            assert_eq!(sum, first.events, "p={p} phase {phase}");
            for (q, _) in &res {
                assert_eq!(
                    (q[phase].events, q[phase].waves),
                    (first.events, first.waves)
                );
            }
        }
        // The slow hop (150 ms) spans many waves; the phase still counted it.
        assert!(res[0].0[2].waves >= 2, "{:?}", res[0].0[2]);
    }
}

/// A phase with no events at all ends on every worker; so does a single worker's.
#[test]
fn a_job_without_events_is_quiet_at_once() {
    for p in 1..=4 {
        let res = on_workers(p, cfg(), |w: Worker| {
            let t0 = Instant::now();
            let q = w.run_until_quiet(|_| panic!("no events")).unwrap();
            w.close();
            (q, t0.elapsed())
        });
        for (q, took) in res {
            assert_eq!((q.events, q.handled), (0, 0));
            assert!(took < Duration::from_secs(2), "{took:?}");
        }
    }
}

/// A handler error on one worker fails `run_until_quiet` everywhere with its message; an abort
/// fails a waiting `wait_event`; the worker is poisoned afterwards.
#[test]
fn failures_reach_every_waiting_worker_with_the_cause() {
    let errs = on_workers(3, cfg(), |w: Worker| {
        if w.rank() == 2 {
            w.send_event(2, b"boom").unwrap();
        }
        let e = w
            .run_until_quiet(|ev| {
                if ev.payload() == b"boom" {
                    std::thread::sleep(Duration::from_millis(20));
                    return Err(harp::Error::data("bad vertex 7"));
                }
                Ok(())
            })
            .unwrap_err();
        let again = w.try_event().unwrap_err();
        assert_eq!(again.kind(), "poisoned", "{again}");
        e.to_string()
    });
    assert_eq!(errs[2], "bad vertex 7");
    for e in &errs[..2] {
        assert!(
            e.contains("rank 2 is gone: it failed: rank 2: bad vertex 7"),
            "{e}"
        );
    }

    // A handler's bad argument (a configuration error, which leaves a worker usable outside a
    // phase) ends the phase too: the peer learns the cause at once, not at the timeout.
    let errs = on_workers(2, cfg(), |w: Worker| {
        if w.rank() == 0 {
            w.send_event(1, b"go").unwrap();
        }
        let t0 = Instant::now();
        let e = w.run_until_quiet(|_| w.send_event(9, b"x")).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5), "{e}");
        e.to_string()
    });
    assert!(errs[1].contains("no worker 9"), "{}", errs[1]);
    assert!(
        errs[0].contains("rank 1 is gone: it failed: rank 1:") && errs[0].contains("no worker 9"),
        "{}",
        errs[0]
    );

    // A handler that runs a collective (only handlers run in a phase; the others are not
    // calling it) is refused before anything is sent, and ends the phase on every worker.
    let errs = on_workers(2, cfg(), |w: Worker| {
        if w.rank() == 0 {
            w.send_event(1, b"go").unwrap();
        }
        let t0 = Instant::now();
        let e = w.run_until_quiet(|_| w.barrier("inside")).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5), "{e}");
        e.to_string()
    });
    let refused = "barrier 'inside' called from a run_until_quiet handler";
    assert!(
        errs[1].contains(&format!("rank 1: {refused}")),
        "{}",
        errs[1]
    );
    assert!(
        errs[0].contains("rank 1 is gone: it failed: rank 1:") && errs[0].contains(refused),
        "{}",
        errs[0]
    );

    let errs = on_workers(2, cfg(), |w: Worker| {
        if w.rank() == 1 {
            std::thread::sleep(Duration::from_millis(50));
            w.abort("disk full");
            return String::new();
        }
        let t0 = Instant::now();
        let e = w.wait_event(Duration::from_secs(15)).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5));
        e.to_string()
    });
    assert!(
        errs[0].contains("events #0 'wait_event': rank 1 is gone: it failed: rank 1: disk full"),
        "{}",
        errs[0]
    );
}

/// `wait_event` returns `None` after its timeout when the peers are alive and send nothing;
/// a peer that left normally is not a failure while others remain; events queued before a
/// peer leaves are still delivered; a typed array round-trips.
#[test]
fn waiting_times_out_quietly_and_departures_are_not_failures() {
    let res = on_workers(3, cfg(), |w: Worker| {
        let pool = w.pool().clone();
        match w.rank() {
            2 => {
                let a = Array::from_slice(&pool, &[1.5f64, -2.0]);
                w.send_event(0, a.bytes()).unwrap();
                w.close();
                None
            }
            1 => {
                std::thread::sleep(Duration::from_millis(400));
                w.close();
                None
            }
            _ => {
                std::thread::sleep(Duration::from_millis(100));
                let ev = w.wait_event(Duration::from_secs(5)).unwrap().unwrap();
                let a = ev.array(&pool, DType::F64).unwrap();
                assert_eq!(a.as_slice::<f64>().unwrap(), &[1.5, -2.0]);
                assert_eq!(ev.array(&pool, DType::F64).unwrap().len(), 2);
                let t0 = Instant::now();
                assert!(w.wait_event(Duration::from_millis(150)).unwrap().is_none());
                assert!(t0.elapsed() >= Duration::from_millis(150));
                // Once every peer has left, nothing can come: an error, not a hang.
                let e = w.wait_event(Duration::from_secs(10)).unwrap_err();
                Some(e.to_string())
            }
        }
    });
    let e = res[0].as_ref().unwrap();
    assert!(e.contains("as did every other worker"), "{e}");
}

/// Bad arguments are refused before anything is sent.
#[test]
fn bad_destinations_copies_and_labels_are_refused() {
    on_workers(2, cfg(), |w: Worker| {
        let e = w.send_event(2, b"x").unwrap_err().to_string();
        assert!(e.contains("no worker 2 (the job has 2)"), "{e}");
        let e = w.send_labeled("k", 3, b"x").unwrap_err().to_string();
        assert!(e.contains("copies must be 1..=2"), "{e}");
        let e = w.send_labeled(&"l".repeat(5000), 1, b"x").unwrap_err();
        assert!(
            e.to_string()
                .contains("is longer than the 4096 bytes a label may have"),
            "{e}"
        );
        w.barrier("ok").unwrap();
        w.close();
    });
}

/// Flow control: three fast senders send 1 KiB events to a slow receiver through a 16 KiB
/// window (each blocking on credit) while it handles them in run_until_quiet and answers some
/// from its handler. Every event arrives in order, termination stays exact, and the receiver
/// never holds more than one window of event bytes from one sender.
#[test]
fn a_slow_receiver_holds_at_most_one_window_per_sender() {
    const N: u64 = 300;
    const WINDOW: u64 = 16 * 1024;
    let mut c = cfg();
    c.event_window = WINDOW;
    let res = on_workers(4, c, |w: Worker| {
        let r = w.rank();
        if r != 0 {
            for i in 0..N {
                let mut m = enc(&[i]);
                m.resize(1024, r as u8);
                w.send_event(0, &m).unwrap();
            }
        }
        let mut next = [0u64; 4];
        let q = w
            .run_until_quiet(|ev| {
                if r == 0 {
                    let i = dec(&ev.payload()[..8])[0];
                    assert_eq!((i, ev.payload().len()), (next[ev.src], 1024));
                    next[ev.src] += 1;
                    std::thread::sleep(Duration::from_micros(200));
                    if i.is_multiple_of(50) {
                        w.send_event(ev.src, &enc(&[i])).unwrap();
                    }
                }
                Ok(())
            })
            .unwrap();
        let s = w.events_stats();
        w.barrier("end").unwrap();
        w.close();
        (q, next, s)
    });
    let (q0, next, s) = &res[0];
    assert_eq!(next, &[0, N, N, N]);
    assert_eq!(q0.events, 3 * N + 3 * N.div_ceil(50));
    assert!(
        s.peak_sender_bytes > 0 && s.peak_sender_bytes <= WINDOW,
        "{s:?}"
    );
    assert_eq!(s.queued_bytes, 0);
    for (q, _, _) in &res {
        assert_eq!(q.events, q0.events);
    }
}

/// Handlers that send each other many times the event window in one step finish: inside
/// `run_until_quiet` a send that does not fit is held at the sender (in order) instead of
/// waiting, so every worker keeps taking events and credits keep coming. A handler that is
/// `busy` (here: 40 parts of its own to send, one per idle step) keeps the job from ending
/// until it is done, and the receivers never hold more than one window per sender.
#[test]
fn handlers_sending_many_windows_to_each_other_finish_in_order() {
    const WINDOW: u64 = 4096;
    const PARTS: u64 = 40;
    const PER_PART: u64 = 50; // 50 events of 264 bytes: about 3 windows per part and peer
    struct Flood<'w> {
        w: &'w Worker,
        part: u64,
        next: Vec<u64>,
        echoed: u64,
    }
    impl harp::events::Handler for Flood<'_> {
        fn event(&mut self, ev: harp::events::Event) -> harp::Result<()> {
            let v = dec(&ev.payload()[..16]);
            if v[0] == u64::MAX {
                self.echoed += 1;
                return Ok(());
            }
            assert_eq!(
                v[0],
                self.next[ev.src],
                "rank {} from {}",
                self.w.rank(),
                ev.src
            );
            self.next[ev.src] += 1;
            // Every 100th event is answered at once, from inside the handler.
            if v[0].is_multiple_of(100) {
                self.w.send_event(ev.src, &enc(&[u64::MAX, 0]))?;
            }
            Ok(())
        }
        fn idle(&mut self) -> harp::Result<()> {
            if self.part == PARTS {
                return Ok(());
            }
            let (r, p) = (self.w.rank(), self.w.size());
            for i in self.part * PER_PART..(self.part + 1) * PER_PART {
                for dst in (0..p).filter(|&d| d != r) {
                    let mut m = enc(&[i, r as u64]);
                    m.resize(264, 7);
                    self.w.send_event(dst, &m)?;
                }
            }
            self.part += 1;
            Ok(())
        }
        fn busy(&mut self) -> harp::Result<bool> {
            Ok(self.part < PARTS)
        }
    }
    let mut c = cfg();
    c.event_window = WINDOW;
    for p in [2, 3] {
        let res = on_workers(p, c.clone(), |w: Worker| {
            let mut h = Flood {
                w: &w,
                part: 0,
                next: vec![0; p],
                echoed: 0,
            };
            let q = w.run_until_quiet_with(&mut h).unwrap();
            let (next, echoed) = (h.next, h.echoed);
            let s = w.events_stats();
            nothing_after(&w);
            w.close();
            (q, next, echoed, s)
        });
        let n = PARTS * PER_PART;
        for (r, (q, next, echoed, s)) in res.iter().enumerate() {
            let want: Vec<u64> = (0..p).map(|s| if s == r { 0 } else { n }).collect();
            assert_eq!(next, &want, "p = {p}, rank {r}");
            assert_eq!(*echoed, (p as u64 - 1) * n.div_ceil(100));
            let all = p as u64 * (p as u64 - 1) * (n + n.div_ceil(100));
            assert_eq!(q.events, all);
            assert!(s.peak_sender_bytes <= WINDOW, "{s:?}");
        }
    }
}

/// Durations past what the options take do not panic: a worker refuses a timeout beyond 365
/// days in its configuration, and `wait_event(Duration::MAX)` waits (here: takes the event
/// that is already there) instead of overflowing its deadline.
#[test]
fn huge_durations_are_refused_or_clamped_not_a_panic() {
    let bad = harp::Config {
        op_timeout: Duration::MAX,
        ..cfg()
    };
    let e = Worker::in_process(2, bad)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("option op_timeout_ms (--timeout)"), "{e}");
    let res = on_workers(2, cfg(), |w: Worker| {
        w.send_event(1 - w.rank(), b"hi").unwrap();
        let ev = w.wait_event(Duration::MAX).unwrap().expect("an event");
        w.barrier("end").unwrap();
        ev.payload().to_vec()
    });
    assert_eq!(res, [b"hi".to_vec(), b"hi".to_vec()]);
}
