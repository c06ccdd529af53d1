//! The network model a worker's NP-aware algorithms read, and how far the measured times of
//! its operations drift from the model's predictions (the hook for recalibrating).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::Worker;
use crate::error::{Error, Result};
use crate::netmodel::NetModel;

/// Operations [`Worker::model_drift`] looks back on.
pub const DRIFT_WINDOW: usize = 16;
/// Relative drift above which the worker warns and asks for recalibration.
pub const DRIFT_LIMIT: f64 = 0.2;
/// A recalibration after which the drift comes back at once is followed by a longer wait:
/// the next needs [`DRIFT_WINDOW`] × 2^k predictions since the model was set, k the number of
/// recalibrations in a row without a calm window between them, at most this.
pub const DRIFT_BACKOFF_MAX: u32 = 6;

/// Predicted and measured seconds of the latest operations.
#[derive(Default)]
pub(super) struct Drift {
    window: VecDeque<(f64, f64)>,
    /// Whether the last recorded drift was over the limit (warn once per excursion).
    warned: bool,
    /// Predictions recorded since the model was set.
    seen: usize,
    /// Recalibrations in a row without a full window under the limit between them (kept when
    /// the model is set anew).
    streak: u32,
}

/// What recording one prediction found.
#[derive(Debug, PartialEq)]
struct Recorded {
    /// The drift over the window, with this operation.
    drift: f64,
    /// The drift has just gone over [`DRIFT_LIMIT`] (it was not over at the last record).
    warn: bool,
}

impl Drift {
    /// (Σ measured − Σ predicted) / Σ predicted over the window; None when it is empty.
    fn value(&self) -> Option<f64> {
        let (p, m) = self
            .window
            .iter()
            .fold((0.0, 0.0), |(p, m), &(a, b)| (p + a, m + b));
        (p > 0.0).then(|| (m - p) / p)
    }

    /// Adds one operation (dropping the oldest of a full window); None, recording nothing, for a
    /// prediction that is not a positive number of seconds.
    fn record(&mut self, predicted: f64, measured: f64) -> Option<Recorded> {
        if !(predicted.is_finite() && predicted > 0.0) {
            return None;
        }
        if self.window.len() == DRIFT_WINDOW {
            self.window.pop_front();
        }
        self.window.push_back((predicted, measured));
        self.seen += 1;
        let drift = self.value().unwrap_or(0.0);
        let over = drift.abs() > DRIFT_LIMIT;
        if !over && self.window.len() == DRIFT_WINDOW {
            self.streak = 0;
        }
        let warn = over && !self.warned;
        self.warned = over;
        Some(Recorded { drift, warn })
    }

    /// A full window drifting more than [`DRIFT_LIMIT`], after at least the predictions the
    /// back-off asks for ([`DRIFT_BACKOFF_MAX`]).
    fn needs_recalibration(&self) -> bool {
        self.window.len() == DRIFT_WINDOW
            && self.seen >= DRIFT_WINDOW << self.streak.min(DRIFT_BACKOFF_MAX)
            && self.value().is_some_and(|x| x.abs() > DRIFT_LIMIT)
    }

    /// A new model: the window starts empty; the back-off is kept.
    fn reset(&mut self) {
        *self = Drift {
            streak: self.streak,
            ..Drift::default()
        };
    }
}

impl Worker {
    /// The network model the NP-aware algorithms use, if any.
    pub fn net_model(&self) -> Option<Arc<NetModel>> {
        self.net.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sets (or clears) the network model. Every worker of the job must hold the same model
    /// (it decides algorithms and trees that all of them follow); measuring it collectively or
    /// loading the same file on every worker gives that. A model for another number of
    /// workers is refused.
    pub fn set_net_model(&self, model: Option<NetModel>) -> Result<()> {
        if let Some(m) = &model {
            if m.workers() != self.size {
                return Err(Error::config(format!(
                    "net model of {} workers for a job of {}",
                    m.workers(),
                    self.size
                )));
            }
        }
        *self.net.lock().unwrap_or_else(|e| e.into_inner()) = model.map(Arc::new);
        self.drift.lock().unwrap_or_else(|e| e.into_inner()).reset();
        Ok(())
    }

    /// Notes that the workers agreed to recalibrate: the next recalibration waits longer unless
    /// a full window under the limit comes first ([`DRIFT_BACKOFF_MAX`]). Returns the
    /// predictions the next one needs.
    pub(crate) fn note_recalibration(&self) -> usize {
        let mut d = self.drift.lock().unwrap_or_else(|e| e.into_inner());
        d.streak = (d.streak + 1).min(DRIFT_BACKOFF_MAX);
        DRIFT_WINDOW << d.streak
    }

    /// How far the measured times of the latest operations (up to [`DRIFT_WINDOW`]) that had a
    /// prediction stray from the model: (Σ measured − Σ predicted) / Σ predicted; None without
    /// a model or before the first prediction. A prediction is recorded where the worker knows
    /// the operation's size afterwards: every worker of a broadcast, the root of a reduce,
    /// gather or scatter.
    pub fn model_drift(&self) -> Option<f64> {
        self.drift.lock().unwrap_or_else(|e| e.into_inner()).value()
    }

    /// The predicted and measured seconds of the recorded operations, oldest first.
    pub fn model_predictions(&self) -> Vec<(f64, f64)> {
        let d = self.drift.lock().unwrap_or_else(|e| e.into_inner());
        d.window.iter().copied().collect()
    }

    /// True when a full window of predictions drifts more than [`DRIFT_LIMIT`] (20%) from the
    /// model, and, after recalibrations that did not bring the drift under the limit, enough
    /// predictions have been made since ([`DRIFT_BACKOFF_MAX`]): the hook for recalibrating. Each worker sees its own drift, so the job must
    /// agree before measuring again (all workers take part in a measurement): e.g. every
    /// worker contributes this flag to an allreduce (or the master broadcasts its own), and if
    /// it is set all of them measure anew (`Worker::calibrate` of the measurement layer) and
    /// pass the result to [`Worker::set_net_model`], which clears the window.
    pub fn needs_recalibration(&self) -> bool {
        let d = self.drift.lock().unwrap_or_else(|e| e.into_inner());
        d.needs_recalibration()
    }

    /// Records one operation's predicted and measured seconds (see [`Worker::model_drift`]);
    /// logs a warning when the drift first exceeds [`DRIFT_LIMIT`].
    fn record_prediction(&self, op: &str, predicted: f64, measured: f64) {
        let mut d = self.drift.lock().unwrap_or_else(|e| e.into_inner());
        let Some(Recorded { drift: x, warn }) = d.record(predicted, measured) else {
            return;
        };
        tracing::debug!(
            rank = self.rank,
            op,
            predicted,
            measured,
            drift = x,
            "model prediction"
        );
        if warn {
            tracing::warn!(
                rank = self.rank,
                op,
                drift = x,
                "measured collective times drift {:.0}% from the network model; \
                 recalibrate (Worker::needs_recalibration)",
                x * 100.0
            );
        }
    }

    /// Seconds since `t0` recorded in the drift window against `predict()` on `model` (the
    /// worker's or a group's), when there is one.
    pub(super) fn predicted_on(
        &self,
        model: Option<Arc<NetModel>>,
        op: &str,
        t0: Instant,
        predict: impl FnOnce(&NetModel) -> f64,
    ) {
        if let Some(m) = model {
            let measured = t0.elapsed().as_secs_f64();
            self.record_prediction(op, predict(&m), measured);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_the_relative_excess_of_measured_over_predicted_sums() {
        let mut d = Drift::default();
        assert_eq!(d.value(), None);
        d.record(1.0, 1.5).unwrap();
        d.record(3.0, 2.5).unwrap();
        // (4 - 4) / 4
        assert_eq!(d.value(), Some(0.0));
        let r = d.record(4.0, 6.0).unwrap();
        // (10 - 8) / 8
        assert_eq!(r.drift, 0.25);
        assert_eq!(d.value(), Some(0.25));
    }

    #[test]
    fn predictions_that_are_not_positive_seconds_are_not_recorded() {
        let mut d = Drift::default();
        for p in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(d.record(p, 1.0), None);
        }
        assert!(d.window.is_empty());
        assert_eq!(d.value(), None);
    }

    #[test]
    fn the_window_keeps_the_latest_operations() {
        let mut d = Drift::default();
        for i in 0..DRIFT_WINDOW + 3 {
            d.record(1.0 + i as f64, 1.0).unwrap();
        }
        assert_eq!(d.window.len(), DRIFT_WINDOW);
        assert_eq!(d.window.front(), Some(&(4.0, 1.0)));
        assert_eq!(d.window.back(), Some(&((DRIFT_WINDOW + 3) as f64, 1.0)));
    }

    #[test]
    fn a_warning_comes_once_per_excursion_over_the_limit() {
        let mut d = Drift::default();
        // 50% slower than predicted: over the limit, warned once.
        assert!(d.record(1.0, 1.5).unwrap().warn);
        assert!(!d.record(1.0, 1.5).unwrap().warn);
        // Back under the limit, then over again: a new warning.
        let back = d.record(10.0, 10.0).unwrap();
        assert!(back.drift.abs() <= DRIFT_LIMIT && !back.warn);
        assert!(d.record(1.0, 100.0).unwrap().warn);
    }

    #[test]
    fn recalibration_needs_a_full_window_over_the_limit() {
        let mut d = Drift::default();
        for _ in 0..DRIFT_WINDOW - 1 {
            d.record(1.0, 2.0).unwrap();
        }
        assert!(!d.needs_recalibration(), "the window is not full yet");
        d.record(1.0, 2.0).unwrap();
        assert!(d.needs_recalibration());
        // Faster than predicted counts too.
        let mut fast = Drift::default();
        for _ in 0..DRIFT_WINDOW {
            fast.record(1.0, 0.5).unwrap();
        }
        assert!(fast.needs_recalibration());
        let mut close = Drift::default();
        for _ in 0..DRIFT_WINDOW {
            close.record(1.0, 1.1).unwrap();
        }
        assert!(!close.needs_recalibration());
    }

    #[test]
    fn a_drift_that_comes_back_after_recalibrating_waits_longer_each_time() {
        let mut d = Drift::default();
        let fill = |d: &mut Drift, n: usize, measured: f64| {
            for _ in 0..n {
                d.record(1.0, measured).unwrap();
            }
        };
        fill(&mut d, DRIFT_WINDOW, 2.0);
        assert!(d.needs_recalibration());
        for k in 1..=DRIFT_BACKOFF_MAX + 1 {
            // Recalibrated; the drift comes back at once.
            d.streak = (d.streak + 1).min(DRIFT_BACKOFF_MAX);
            d.reset();
            let need = DRIFT_WINDOW << k.min(DRIFT_BACKOFF_MAX);
            fill(&mut d, need - 1, 2.0);
            assert!(!d.needs_recalibration(), "{k}: {} predictions", need - 1);
            fill(&mut d, 1, 2.0);
            assert!(d.needs_recalibration(), "{k}: {need} predictions");
        }
        // A calm full window ends the back-off.
        d.streak = 3;
        d.reset();
        fill(&mut d, DRIFT_WINDOW, 1.0);
        assert_eq!(d.streak, 0);
        fill(&mut d, DRIFT_WINDOW, 2.0);
        assert!(d.needs_recalibration());
    }
}
