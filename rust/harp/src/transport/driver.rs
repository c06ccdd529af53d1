//! Who runs a worker's I/O: the thread that waits in an operation, or a thread pool.
//!
//! With `io_driver = caller` (the default for TCP workers) each worker has its own
//! single-threaded tokio runtime. The thread that runs an operation drives it: the reader
//! tasks, the heartbeats and the operation share that thread, so a frame that arrives is read,
//! filed and taken without handing over to another thread (with a thread pool, every received
//! frame costs a wake-up and a context switch: the reader's thread wakes the thread blocked in
//! the operation). Between operations a background thread drives the runtime, so heartbeats go
//! out, frames are read and events arrive while the caller computes; it takes over only after
//! the caller has been out of operations for one or two periods of [`HANDOVER_AFTER`] and gives the runtime back as
//! soon as the next operation starts.
//!
//! With `io_driver = threads` the worker uses the shared multi-threaded runtime it was given
//! (in-process workers always do).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};
use tokio::sync::Notify;

/// How often the background thread checks whether the caller is out of operations; it drives
/// the runtime once a whole period has passed without one (back-to-back operations keep it on
/// the caller's thread), so between operations frames and heartbeats wait at most two periods.
pub const HANDOVER_AFTER: Duration = Duration::from_millis(4);

/// How long a receive of a worker driven by its caller polls before it sleeps
/// ([`super::Transport::set_spin`]): a reply within this time costs no sleep and wake-up. Since
/// a receive reads its peer's socket itself while it polls, a round costs one `sched_yield` and
/// one `recv` (when each round turned the runtime instead, 45 % of the receives of a 1 KiB
/// allgather with 8 workers on 2 cores slept after 30 µs; reading the socket, 5-7 %). Loopback
/// p = 8, 1 KiB, alternating: allgather 104-111 µs at 100 µs against 115-121 at 30,
/// reduce-scatter 135-161 against 164-168 (300 µs: no better); docs/benchmarks-netns.md,
/// Part 0, item o.
pub const RECV_SPIN: Duration = Duration::from_micros(100);

/// Runs a worker's futures on its runtime (see the module docs).
pub enum Driver {
    /// A shared multi-threaded runtime: its threads run the I/O, callers block on a handle.
    Threads(Handle),
    /// The worker's own single-threaded runtime, driven by the caller during operations.
    Caller(CallerDriver),
}

impl Driver {
    /// Runs `f` to completion on this driver from a thread outside the runtime.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        match self {
            Driver::Threads(h) => h.block_on(f),
            Driver::Caller(c) => c.block_on(f),
        }
    }

    /// A handle to the runtime (for entering its context, e.g. to register sockets).
    pub fn handle(&self) -> &Handle {
        match self {
            Driver::Threads(h) => h,
            Driver::Caller(c) => c.shared.rt.handle(),
        }
    }
}

struct Shared {
    rt: Runtime,
    /// Threads in `block_on` now (callers wanting or holding the runtime).
    busy: AtomicUsize,
    /// Calls of `block_on` so far (the background thread sees whether any came while it slept).
    calls: AtomicU64,
    /// Tells the background thread to give the runtime back.
    yield_now: Notify,
    stop: AtomicBool,
    /// The background thread sleeps on this between its checks (and is woken by `drop`).
    nap: Mutex<()>,
    nap_cv: Condvar,
}

/// A single-threaded runtime driven by the thread in an operation, and by a background thread
/// between operations.
pub struct CallerDriver {
    shared: Arc<Shared>,
    background: Option<JoinHandle<()>>,
}

impl CallerDriver {
    /// A new runtime (timers and I/O enabled) and its background thread named `name`.
    pub fn new(name: &str) -> std::io::Result<CallerDriver> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let shared = Arc::new(Shared {
            rt,
            busy: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            yield_now: Notify::new(),
            stop: AtomicBool::new(false),
            nap: Mutex::new(()),
            nap_cv: Condvar::new(),
        });
        let bg = shared.clone();
        let background = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || background(&bg))?;
        Ok(CallerDriver {
            shared,
            background: Some(background),
        })
    }

    /// Runs `f` on this thread, driving the runtime (after the background thread, if it drives
    /// now, has given it back). Costs no system call when the background thread is asleep.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        let s = &*self.shared;
        s.calls.fetch_add(1, Ordering::SeqCst);
        s.busy.fetch_add(1, Ordering::SeqCst);
        s.yield_now.notify_one();
        let out = s.rt.block_on(f);
        s.busy.fetch_sub(1, Ordering::SeqCst);
        out
    }
}

/// The background thread: wakes every [`HANDOVER_AFTER`]; when no caller is in `block_on` and
/// none has called it since the last wake, it drives the runtime until a caller wants it back.
/// (The callers never wake it: back-to-back operations cost it one wake per period.)
fn background(s: &Shared) {
    let mut seen = s.calls.load(Ordering::SeqCst);
    loop {
        {
            let nap = s.nap.lock().unwrap_or_else(|e| e.into_inner());
            if s.stop.load(Ordering::SeqCst) {
                return;
            }
            let _ = s.nap_cv.wait_timeout(nap, HANDOVER_AFTER);
        }
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        let calls = s.calls.load(Ordering::SeqCst);
        if s.busy.load(Ordering::SeqCst) > 0 || calls != seen {
            seen = calls;
            continue;
        }
        s.rt.block_on(async {
            while s.busy.load(Ordering::SeqCst) == 0 && !s.stop.load(Ordering::SeqCst) {
                s.yield_now.notified().await;
            }
        });
        seen = s.calls.load(Ordering::SeqCst);
    }
}

impl Drop for CallerDriver {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.stop.store(true, Ordering::SeqCst);
        s.yield_now.notify_one();
        {
            let _nap = s.nap.lock().unwrap_or_else(|e| e.into_inner());
            s.nap_cv.notify_all();
        }
        // Inside async code a runtime must not be dropped (nor a thread joined): the background
        // thread then holds the last reference and drops the runtime when it ends.
        if let Some(t) = self.background.take() {
            if Handle::try_current().is_err() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A task spawned on the runtime makes progress while no caller is in an operation (the
    /// background thread drives), and the caller's own futures complete on its thread.
    #[test]
    fn tasks_run_between_operations_and_during_them() {
        let d = CallerDriver::new("test-driver").unwrap();
        let ticks = Arc::new(AtomicUsize::new(0));
        let t = ticks.clone();
        let _task = d.shared.rt.spawn(async move {
            loop {
                t.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        // No caller: the background thread alone keeps the task running.
        let deadline = Instant::now() + Duration::from_secs(10);
        while ticks.load(Ordering::SeqCst) < 20 {
            assert!(
                Instant::now() < deadline,
                "the background thread does not drive"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // A caller takes the runtime back and drives it (timers included).
        let me = std::thread::current().id();
        let (on, before) = d.block_on(async {
            let before = ticks.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
            (std::thread::current().id(), before)
        });
        assert_eq!(on, me);
        assert!(ticks.load(Ordering::SeqCst) > before + 5);
        // Back to the background thread after the operation.
        let after = ticks.load(Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while ticks.load(Ordering::SeqCst) < after + 20 {
            assert!(
                Instant::now() < deadline,
                "the background thread did not take over"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(d);
    }

    /// Two threads in `block_on` at once both finish (one drives, the other is woken).
    #[test]
    fn concurrent_callers_both_finish() {
        let d = Arc::new(CallerDriver::new("test-driver").unwrap());
        let n = Arc::new(Notify::new());
        let (d2, n2) = (d.clone(), n.clone());
        let waiter = std::thread::spawn(move || d2.block_on(async move { n2.notified().await }));
        std::thread::sleep(Duration::from_millis(50));
        d.block_on(async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            n.notify_one();
        });
        waiter.join().unwrap();
    }
}
