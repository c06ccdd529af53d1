//! The per-worker state of the event lane that every [`crate::Worker`] keeps: counters of
//! application events, control messages of the termination protocol taken early, and events
//! held back for credit. The events layer (`crate::events`) drives it; it lives here, below the
//! worker, so that the worker need not know the layer above it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// A message of the termination protocol (on the event lane, tag `EVENT_CONTROL`). `phase`
/// numbers the calls of `run_until_quiet` (1, 2, …), the same on every worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Ctrl {
    /// Rank 0 → every worker: report your counters for `wave` once you are idle.
    Probe { phase: u64, wave: u64 },
    /// Worker → rank 0: its counters of application events sent and handled, read while idle.
    Report {
        phase: u64,
        wave: u64,
        sent: u64,
        received: u64,
    },
    /// Rank 0 → every worker: the job is quiet; `total` events were sent since the start.
    End { phase: u64, waves: u64, total: u64 },
}

/// A worker's event state: counters of application events (since the worker started) and
/// control messages that a `try_event`/`wait_event` took before `run_until_quiet` needed them.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) sent: AtomicU64,
    pub(crate) received: AtomicU64,
    /// The sender the next take tries first (rotated for fairness).
    pub(crate) cursor: AtomicUsize,
    /// Inside `run_until_quiet`: sends never wait for credit (they are held back instead).
    pub(crate) quiet: AtomicBool,
    /// Events held back now (`Inner::held`).
    pub(crate) holding: AtomicU64,
    pub(crate) inner: Mutex<Inner>,
}

#[derive(Default)]
pub(crate) struct Inner {
    /// Calls of `run_until_quiet` so far.
    pub(crate) phase: u64,
    /// The job's total of sent events at the end of the last phase.
    pub(crate) total_at_end: u64,
    pub(crate) stash: VecDeque<(usize, Ctrl)>,
    /// Per receiver: events a handler sent that did not fit the receiver's event window yet,
    /// in order, and since when the first of them has waited.
    pub(crate) held: Vec<(VecDeque<Held>, Option<Instant>)>,
}

impl State {
    /// Whether this worker is inside `run_until_quiet` (where only its handler runs).
    pub(crate) fn in_phase(&self) -> bool {
        self.quiet.load(Ordering::SeqCst)
    }
}

/// An application event held back at its sender until the receiver's window has room.
pub(crate) struct Held {
    pub(crate) tag: u32,
    pub(crate) label: String,
    pub(crate) payload: Vec<u8>,
}
