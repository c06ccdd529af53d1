//! Named tag ranges. Inside one operation (one sequence number) frames are matched by
//! (sender, tag); every phase of an algorithm owns its own range of tags, so phases never
//! take each other's frames whatever the number of workers.
//!
//! A tag is `phase << 24 | step`: 256 phases of 2^24 steps each. Step-indexed phases (rings)
//! use steps `0..p−1`, round-indexed ones (trees, doubling) steps `0..⌈log2 p⌉`, so the ranges
//! are disjoint for every p up to [`MAX_WORKERS`]; [`check_workers`] rejects larger jobs.

use crate::error::{Error, Result};
use crate::wire::{MAX_WORKERS, TAG_STEP_BITS as STEP_BITS};

/// A range of tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase(u32);

impl Phase {
    /// The tag of step `step` of this phase.
    pub fn at(self, step: usize) -> u32 {
        debug_assert!(step < MAX_WORKERS, "step {step} outside its tag range");
        self.0 << STEP_BITS | step as u32
    }
    /// The tag of a phase that has a single step.
    pub fn tag(self) -> u32 {
        self.at(0)
    }
}

/// Single-message operations and the main exchange of the others (broadcast, gather, scatter,
/// regroup, push, pull requests, rotate, known-total allgather).
pub const MAIN: Phase = Phase(0);
/// Rounds of tree and doubling algorithms (barrier, binomial reduce, bidirectional exchange).
pub const ROUND: Phase = Phase(1);
/// Steps of the ring reduce-scatter.
pub const RING_REDUCE: Phase = Phase(2);
/// Steps of the ring allgathers.
pub const RING_GATHER: Phase = Phase(3);
/// Bidirectional exchange, p not a power of two: the extra ranks' tables folded in...
pub const FOLD_IN: Phase = Phase(4);
/// ... and the results sent back to them.
pub const FOLD_OUT: Phase = Phase(5);
/// Reduced segments sent to the root (scatter-gather reduce).
pub const TO_ROOT: Phase = Phase(6);
/// Master-decided regroup: every worker's partition sizes to the master...
pub const PLAN_STATS: Phase = Phase(7);
/// ... and the plan back.
pub const PLAN: Phase = Phase(8);
/// Pull: the owners' replies.
pub const PULL_REPLY: Phase = Phase(9);
/// Network measurement (`Worker::calibrate`), per round of the tournament: pings...
pub const CAL_PING: Phase = Phase(10);
/// ... their echoes ...
pub const CAL_PONG: Phase = Phase(11);
/// ... the receiver's start signal for a timed transfer ...
pub const CAL_GO: Phase = Phase(12);
/// ... the timed transfer (`Data` frames, then a `Ctrl` frame with the bytes sent).
pub const CAL_DATA: Phase = Phase(13);
/// Every worker's measurements to the master, and the model back (single step each); the
/// master's choice between a cached model and measuring.
pub const CAL_ROW: Phase = Phase(14);
pub const CAL_MODEL: Phase = Phase(15);
pub const CAL_PLAN: Phase = Phase(16);
/// The receiver's acknowledgements during a timed transfer (bytes received so far).
pub const CAL_ACK: Phase = Phase(17);
/// The size agreement of an automatic reduce with a network model (dissemination rounds of the
/// largest table seen, a `Ctrl` u64 each).
pub const AGREE: Phase = Phase(18);
/// The fault-tolerant chain broadcast, per attempt (the step): the data along the chain...
pub const BCAST_TRY: Phase = Phase(19);
/// ... every receiver's acknowledgement to the root ...
pub const BCAST_ACK: Phase = Phase(20);
/// ... and the root's verdict to every receiver (done, or restart around a link).
pub const BCAST_VERDICT: Phase = Phase(21);

/// Fails clearly when `p` workers would need more ring steps than a phase holds.
pub fn check_workers(p: usize) -> Result<()> {
    if p > MAX_WORKERS {
        return Err(Error::config(format!(
            "{p} workers: the collectives support at most {MAX_WORKERS}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every phase of this file; `all_lists_every_phase_of_this_file` checks none is missing.
    const ALL: [Phase; 22] = [
        MAIN,
        ROUND,
        RING_REDUCE,
        RING_GATHER,
        FOLD_IN,
        FOLD_OUT,
        TO_ROOT,
        PLAN_STATS,
        PLAN,
        PULL_REPLY,
        CAL_PING,
        CAL_PONG,
        CAL_GO,
        CAL_DATA,
        CAL_ROW,
        CAL_MODEL,
        CAL_PLAN,
        CAL_ACK,
        AGREE,
        BCAST_TRY,
        BCAST_ACK,
        BCAST_VERDICT,
    ];

    #[test]
    fn ranges_are_disjoint_for_every_supported_size() {
        let p = MAX_WORKERS;
        let mut spans: Vec<(u32, u32)> = ALL.iter().map(|f| (f.at(0), f.at(p - 1))).collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 < w[1].0, "{w:?} overlap");
        }
        // The old collision: reduce's tag 1000 was ring step 1000 at p > 1001.
        assert_ne!(TO_ROOT.tag(), RING_REDUCE.at(1000));
        assert!(check_workers(MAX_WORKERS).is_ok());
        let e = check_workers(MAX_WORKERS + 1).unwrap_err().to_string();
        assert!(e.contains("at most 16777216"), "{e}");
    }

    #[test]
    fn all_lists_every_phase_of_this_file() {
        // The constants declared here, read from the source: a new phase missing from `ALL`
        // would escape the disjointness test above.
        let src = include_str!("tags.rs");
        let declared = src
            .lines()
            .filter(|l| l.starts_with("pub const ") && l.contains(": Phase = Phase("))
            .count();
        assert_eq!(declared, ALL.len(), "a Phase constant is missing from ALL");
        let mut ids: Vec<u32> = ALL.iter().map(|f| f.0).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), ALL.len(), "two phases share a number");
    }
}
