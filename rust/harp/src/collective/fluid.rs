//! The fluid model of a worker's intake: transfers into one worker share its host's intake
//! max-min fairly, each capped by its own link (the cost models' and the relay plan's view of
//! many senders at once).

use crate::netmodel::NetModel;

/// When the last of the transfers `(child, start, bytes)` into worker `u` is in: they share u's
/// host intake ([`fluid_finish`]), each capped by its link B(c,u).
pub fn intake(net: &NetModel, u: usize, from: impl Iterator<Item = (usize, f64, u64)>) -> f64 {
    let flows: Vec<Flow> = from
        .map(|(c, start, bytes)| Flow {
            start,
            bytes: bytes as f64,
            cap: net.bandwidth(c, u),
        })
        .collect();
    fluid_finish(&flows, host_intake(net, u, &flows))
}

/// Worker `u`'s host intake for `flows`: its host capacity when the model has one, else
/// B_in(u) = max_c B(c,u) (its links share one interface as fast as the fastest of them).
pub fn host_intake(net: &NetModel, u: usize, flows: &[Flow]) -> f64 {
    net.host(u)
        .unwrap_or_else(|| flows.iter().map(|f| f.cap).fold(0.0, f64::max))
}

/// A transfer into one worker: it starts at `start` (seconds), carries `bytes`, and its link
/// takes at most `cap` bytes per second.
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    pub start: f64,
    pub bytes: f64,
    pub cap: f64,
}

/// When the last of `flows` is in, the flows sharing `capacity` bytes per second max-min
/// fairly (each at most its `cap`: the water-filling share, recomputed whenever a flow starts
/// or ends). A child that is ready late cannot use the intake its earlier siblings left idle,
/// and a slow link leaves the rest of the intake to the others (e.g. a worker taking n bytes at
/// once over a half-rate link and, from n/B on, over a full-rate one is done at 2.5 n/B, not
/// 2 n/B).
pub fn fluid_finish(flows: &[Flow], capacity: f64) -> f64 {
    let start = flows.iter().map(|f| f.start).fold(0.0, f64::max);
    fluid_finishes(flows, capacity)
        .into_iter()
        .fold(start, f64::max)
}

/// When each of `flows` is in ([`fluid_finish`]'s sharing); a flow of no bytes is in when it
/// starts.
pub fn fluid_finishes(flows: &[Flow], capacity: f64) -> Vec<f64> {
    if !capacity.is_finite() {
        return flows.iter().map(|f| f.start + f.bytes / f.cap).collect();
    }
    let mut done: Vec<f64> = flows.iter().map(|f| f.start).collect();
    let mut left: Vec<f64> = flows.iter().map(|f| f.bytes).collect();
    let mut t = flows.iter().map(|f| f.start).fold(f64::INFINITY, f64::min);
    loop {
        let mut active: Vec<usize> = (0..flows.len())
            .filter(|&i| left[i] > 0.0 && flows[i].start <= t)
            .collect();
        let next_start = flows
            .iter()
            .enumerate()
            .filter(|&(i, f)| left[i] > 0.0 && f.start > t)
            .map(|(_, f)| f.start)
            .fold(f64::INFINITY, f64::min);
        if active.is_empty() {
            if next_start.is_infinite() {
                return done;
            }
            t = next_start;
            continue;
        }
        // Water-filling: the slowest links take their cap, the rest share what is left.
        active.sort_by(|&a, &b| flows[a].cap.total_cmp(&flows[b].cap));
        let mut rate = vec![0.0f64; flows.len()];
        let mut free = capacity;
        for (k, &i) in active.iter().enumerate() {
            let share = free / (active.len() - k) as f64;
            rate[i] = flows[i].cap.min(share);
            free -= rate[i];
        }
        let dt = active
            .iter()
            .map(|&i| left[i] / rate[i])
            .fold(next_start - t, f64::min);
        t += dt;
        for &i in &active {
            left[i] -= rate[i] * dt;
            if left[i] <= flows[i].bytes * 1e-12 {
                left[i] = 0.0;
                done[i] = t;
            }
        }
        if active.iter().all(|&i| left[i] == 0.0) && next_start.is_infinite() {
            return done;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A uniform model keeps today's choices at large sizes (the chain, direct gather and
    /// scatter); an uneven one picks the network-aware chain, and the predictions order the
    /// algorithms as the measurements on the emulated network do.
    /// The intake is shared max-min fairly, flows capped by their links, late flows unable to
    /// use capacity left idle before they start.
    #[test]
    fn fluid_intake() {
        let f = |start: f64, bytes: f64, cap: f64| Flow { start, bytes, cap };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b.max(1.0);
        // Seven children at once over full-rate links: 7 n/B.
        assert!(close(fluid_finish(&[f(0.0, 1.0, 1.0); 7], 1.0), 7.0));
        // A half-rate link from 0 and a full-rate one from 1: the first has 0.5 left at t = 1,
        // both then get 0.5 until it is done at 2, the second finishes its last 0.5 at 2.5.
        assert!(close(
            fluid_finish(&[f(0.0, 1.0, 0.5), f(1.0, 1.0, 1.0)], 1.0),
            2.5
        ));
        // A slow link leaves the rest of the intake to the other: 0.25 and 1 of 1.
        assert!(close(
            fluid_finish(&[f(0.0, 1.0, 0.25), f(0.0, 1.5, 1.0)], 1.0),
            4.0
        ));
        let done = fluid_finish(&[f(0.0, 1.0, 0.25), f(0.0, 1.5, 1.0)], 1.0);
        assert!(done >= 4.0 - 1e-9, "{done}");
        // Nothing to send: ready when the last child is.
        assert!(close(
            fluid_finish(&[f(3.0, 0.0, 1.0), f(1.0, 0.0, 1.0)], 1.0),
            3.0
        ));
    }
}
