//! Replaying recorded schedules over a [`SimNet`]: a discrete-event simulation with a fluid
//! network. Each worker walks its schedule in program order from time 0: a send is issued
//! when every receive before it has completed; a receive completes when its frame has
//! arrived. Frames between one pair of workers travel one after another (one TCP connection
//! per pair); the frames in flight share every host's sending and receiving side and every
//! rack uplink max-min fairly (progressive filling, recomputed for the flows a start or an end
//! touches), each also capped by its pair's rate. A frame arrives one latency after its last
//! byte has left.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use super::network::{Res, SimNet};
use crate::error::{Error, Result};
use crate::transport::Step;

/// Bytes a frame costs on the wire besides its payload (the compact header).
pub const FRAME_OVERHEAD: u64 = 24;

/// What a replay found.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// When the last worker finished (its last receive, or its last frame arrived), seconds.
    pub time: f64,
    /// When each worker finished.
    pub finish: Vec<f64>,
    /// Frames and payload bytes moved.
    pub frames: usize,
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy)]
struct Msg {
    src: usize,
    dst: usize,
    bytes: f64,
}

/// A frame being transmitted.
struct Flow {
    msg: usize,
    res: Vec<usize>,
    cap: f64,
    left: f64,
    rate: f64,
    /// When `left` was last settled.
    at: f64,
    /// Bumped whenever the rate changes (older finish events are stale).
    version: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ev {
    /// The flow's last byte left (if `version` is still the flow's).
    Sent { flow: usize, version: u64 },
    /// The frame reached its receiver.
    Arrived { msg: usize },
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Timed(f64, u64, Ev);

impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    fn cmp(&self, o: &Self) -> CmpOrdering {
        // A min-heap on (time, insertion order).
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
    }
}

/// Matches every receive with the send it took: the k-th frame of (sender, receiver,
/// operation, tag) sent is the k-th taken. Returns the messages and each worker's schedule
/// as (is_send, message) steps; fails on a receive no send matches.
/// Each worker's schedule as (is a send, message) steps.
type Program = Vec<Vec<(bool, usize)>>;

fn match_messages(s: &[Vec<Step>]) -> Result<(Vec<Msg>, Program)> {
    let mut msgs = Vec::new();
    let mut open: HashMap<(usize, usize, u64, u32), VecDeque<usize>> = HashMap::new();
    let mut prog: Program = vec![Vec::new(); s.len()];
    for (r, steps) in s.iter().enumerate() {
        for st in steps {
            if let Step::Send {
                peer,
                bytes,
                seq,
                tag,
            } = *st
            {
                let id = msgs.len();
                msgs.push(Msg {
                    src: r,
                    dst: peer,
                    bytes: (bytes + FRAME_OVERHEAD) as f64,
                });
                open.entry((r, peer, seq, tag)).or_default().push_back(id);
            }
        }
    }
    let mut send_ids: Vec<VecDeque<usize>> = vec![VecDeque::new(); s.len()];
    for (id, m) in msgs.iter().enumerate() {
        send_ids[m.src].push_back(id);
    }
    for (r, steps) in s.iter().enumerate() {
        for st in steps {
            match *st {
                Step::Send { .. } => {
                    let id = send_ids[r].pop_front().expect("one id per send");
                    prog[r].push((true, id));
                }
                Step::Recv { peer, seq, tag } => {
                    let id = open
                        .get_mut(&(peer, r, seq, tag))
                        .and_then(|q| q.pop_front())
                        .ok_or_else(|| {
                            Error::Protocol(format!(
                                "schedule: rank {r} took a frame from rank {peer} (operation \
                                 #{seq}, tag {tag}) that no schedule sent"
                            ))
                        })?;
                    prog[r].push((false, id));
                }
            }
        }
    }
    Ok((msgs, prog))
}

/// The simulation's state.
struct Sim<'a> {
    net: &'a SimNet,
    msgs: Vec<Msg>,
    prog: Program,
    /// Each worker's next step.
    at: Vec<usize>,
    finish: Vec<f64>,
    arrived: Vec<bool>,
    /// Frames waiting for their pair's connection, per (src, dst).
    pair_queue: HashMap<(usize, usize), VecDeque<usize>>,
    /// Pairs with a frame in flight.
    pair_busy: HashMap<(usize, usize), bool>,
    /// Resource index by resource, and each resource's capacity and active flows.
    res_index: HashMap<Res, usize>,
    res_cap: Vec<f64>,
    res_flows: Vec<Vec<usize>>,
    flows: Vec<Option<Flow>>,
    free_flows: Vec<usize>,
    heap: BinaryHeap<Timed>,
    order: u64,
}

impl Sim<'_> {
    fn push(&mut self, t: f64, ev: Ev) {
        self.order += 1;
        self.heap.push(Timed(t, self.order, ev));
    }

    fn res(&mut self, r: Res) -> usize {
        if let Some(&i) = self.res_index.get(&r) {
            return i;
        }
        let i = self.res_cap.len();
        self.res_index.insert(r, i);
        self.res_cap.push(self.net.capacity(r));
        self.res_flows.push(Vec::new());
        i
    }

    /// Walks worker `r`'s schedule as far as its receives allow, at time `t`; flows started
    /// go into `touched`.
    fn advance(&mut self, r: usize, t: f64, touched: &mut Vec<usize>) {
        while let Some(&(send, m)) = self.prog[r].get(self.at[r]) {
            if send {
                let (s, d) = (self.msgs[m].src, self.msgs[m].dst);
                if *self.pair_busy.get(&(s, d)).unwrap_or(&false) {
                    self.pair_queue.entry((s, d)).or_default().push_back(m);
                } else {
                    self.start(m, t, touched);
                }
            } else if self.arrived[m] {
                self.finish[r] = self.finish[r].max(t);
            } else {
                return;
            }
            self.at[r] += 1;
        }
    }

    /// Starts transmitting frame `m` at `t`.
    fn start(&mut self, m: usize, t: f64, touched: &mut Vec<usize>) {
        let Msg { src, dst, bytes } = self.msgs[m];
        self.pair_busy.insert((src, dst), true);
        let res: Vec<usize> = self
            .net
            .path(src, dst)
            .into_iter()
            .map(|x| self.res(x))
            .collect();
        let flow = Flow {
            msg: m,
            res,
            cap: self.net.pair_bytes(src, dst),
            left: bytes,
            rate: 0.0,
            at: t,
            version: 0,
        };
        let id = match self.free_flows.pop() {
            Some(i) => {
                self.flows[i] = Some(flow);
                i
            }
            None => {
                self.flows.push(Some(flow));
                self.flows.len() - 1
            }
        };
        for k in 0..self.flows[id].as_ref().expect("new flow").res.len() {
            let x = self.flows[id].as_ref().expect("new flow").res[k];
            self.res_flows[x].push(id);
        }
        touched.push(id);
    }

    /// The flows that share a resource, transitively, with any of `seeds` (and the resources
    /// of the ended flows in `res_seeds`).
    fn component(&self, seeds: &[usize], res_seeds: &[usize]) -> Vec<usize> {
        let mut seen_f = std::collections::HashSet::new();
        let mut seen_r = std::collections::HashSet::new();
        let mut todo_r: Vec<usize> = res_seeds.to_vec();
        for &f in seeds {
            if let Some(fl) = &self.flows[f] {
                if seen_f.insert(f) {
                    todo_r.extend(&fl.res);
                }
            }
        }
        while let Some(r) = todo_r.pop() {
            if !seen_r.insert(r) {
                continue;
            }
            for &f in &self.res_flows[r] {
                if seen_f.insert(f) {
                    todo_r.extend(&self.flows[f].as_ref().expect("active").res);
                }
            }
        }
        let mut v: Vec<usize> = seen_f.into_iter().collect();
        v.sort_unstable();
        v
    }

    /// Max-min fair rates (progressive filling) of the flows `comp` at time `t`: settles what
    /// each has sent at its old rate, then schedules its end at the new one.
    fn rebalance(&mut self, comp: &[usize], t: f64) {
        for &f in comp {
            let fl = self.flows[f].as_mut().expect("active");
            fl.left = (fl.left - fl.rate * (t - fl.at)).max(0.0);
            fl.at = t;
        }
        let mut rem: HashMap<usize, f64> = HashMap::new();
        let mut count: HashMap<usize, usize> = HashMap::new();
        for &f in comp {
            for &r in &self.flows[f].as_ref().expect("active").res {
                rem.insert(r, self.res_cap[r]);
                *count.entry(r).or_default() += 1;
            }
        }
        let mut open: Vec<usize> = comp.to_vec();
        let mut rate: HashMap<usize, f64> = HashMap::new();
        while !open.is_empty() {
            let share = count
                .iter()
                .filter(|&(_, &c)| c > 0)
                .map(|(r, &c)| rem[r] / c as f64)
                .fold(f64::INFINITY, f64::min);
            let capmin = open
                .iter()
                .map(|&f| self.flows[f].as_ref().expect("active").cap)
                .fold(f64::INFINITY, f64::min);
            let s = share.min(capmin);
            if !s.is_finite() {
                // Nothing limits these flows: they are instant.
                for &f in &open {
                    rate.insert(f, f64::INFINITY);
                }
                break;
            }
            let tight: Vec<usize> = count
                .iter()
                .filter(|&(r, &c)| c > 0 && rem[r] / c as f64 <= s * (1.0 + 1e-12))
                .map(|(&r, _)| r)
                .collect();
            let (fix, keep): (Vec<usize>, Vec<usize>) = open.iter().partition(|&&f| {
                let fl = self.flows[f].as_ref().expect("active");
                fl.cap <= s * (1.0 + 1e-12) || fl.res.iter().any(|r| tight.contains(r))
            });
            for &f in &fix {
                rate.insert(f, s);
                for &r in &self.flows[f].as_ref().expect("active").res {
                    *rem.get_mut(&r).expect("resource") -= s;
                    *count.get_mut(&r).expect("resource") -= 1;
                }
            }
            open = keep;
        }
        for &f in comp {
            let new = rate[&f];
            let fl = self.flows[f].as_mut().expect("active");
            fl.rate = new;
            fl.version += 1;
            let end = if new.is_infinite() || fl.left <= 0.0 {
                t
            } else {
                t + fl.left / new
            };
            let ev = Ev::Sent {
                flow: f,
                version: fl.version,
            };
            self.push(end, ev);
        }
    }
}

/// Replays the schedules `s` (one per worker, as recorded) over `net`.
pub fn replay(net: &SimNet, s: &[Vec<Step>]) -> Result<Outcome> {
    let (msgs, prog) = match_messages(s)?;
    let p = s.len();
    let frames = msgs.len();
    let bytes = s
        .iter()
        .flatten()
        .map(|st| match st {
            Step::Send { bytes, .. } => *bytes,
            Step::Recv { .. } => 0,
        })
        .sum();
    let mut sim = Sim {
        net,
        arrived: vec![false; msgs.len()],
        msgs,
        prog,
        at: vec![0; p],
        finish: vec![0.0; p],
        pair_queue: HashMap::new(),
        pair_busy: HashMap::new(),
        res_index: HashMap::new(),
        res_cap: Vec::new(),
        res_flows: Vec::new(),
        flows: Vec::new(),
        free_flows: Vec::new(),
        heap: BinaryHeap::new(),
        order: 0,
    };
    let mut touched = Vec::new();
    for r in 0..p {
        sim.advance(r, 0.0, &mut touched);
    }
    let comp = sim.component(&touched, &[]);
    sim.rebalance(&comp, 0.0);
    while let Some(Timed(t, _, _)) = sim.heap.peek().copied() {
        // Every event at this instant, then one rebalance of the flows they touched.
        let mut touched = Vec::new();
        let mut freed = Vec::new();
        while let Some(&Timed(u, _, ev)) = sim.heap.peek() {
            if u > t {
                break;
            }
            sim.heap.pop();
            match ev {
                Ev::Sent { flow, version } => {
                    let live = matches!(&sim.flows[flow], Some(f) if f.version == version);
                    if !live {
                        continue;
                    }
                    let fl = sim.flows[flow].take().expect("live flow");
                    sim.free_flows.push(flow);
                    for &r in &fl.res {
                        sim.res_flows[r].retain(|&x| x != flow);
                        freed.push(r);
                    }
                    let Msg { src, dst, .. } = sim.msgs[fl.msg];
                    sim.finish[src] = sim.finish[src].max(t);
                    sim.pair_busy.insert((src, dst), false);
                    if let Some(next) = sim
                        .pair_queue
                        .get_mut(&(src, dst))
                        .and_then(|q| q.pop_front())
                    {
                        sim.start(next, t, &mut touched);
                    }
                    let lat = net.latency;
                    sim.push(t + lat, Ev::Arrived { msg: fl.msg });
                }
                Ev::Arrived { msg } => {
                    sim.arrived[msg] = true;
                    let d = sim.msgs[msg].dst;
                    sim.finish[d] = sim.finish[d].max(t);
                    sim.advance(d, t, &mut touched);
                }
            }
        }
        touched.retain(|&f| sim.flows[f].is_some());
        if !touched.is_empty() || !freed.is_empty() {
            let comp = sim.component(&touched, &freed);
            if !comp.is_empty() {
                sim.rebalance(&comp, t);
            }
        }
    }
    if let Some(r) = (0..p).find(|&r| sim.at[r] < sim.prog[r].len()) {
        return Err(Error::Protocol(format!(
            "schedule: rank {r} waits forever at step {} of {} (its frame is never sent)",
            sim.at[r],
            sim.prog[r].len()
        )));
    }
    let time = sim.finish.iter().copied().fold(0.0, f64::max);
    Ok(Outcome {
        time,
        finish: sim.finish,
        frames,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(peer: usize, bytes: u64) -> Step {
        Step::Send {
            peer,
            bytes,
            seq: 1,
            tag: 0,
        }
    }
    fn recv(peer: usize) -> Step {
        Step::Recv {
            peer,
            seq: 1,
            tag: 0,
        }
    }

    /// Two senders into one receiver share its intake; a pair's frames go one after another.
    #[test]
    fn sharing_and_order() {
        let net = SimNet {
            latency: 0.0,
            ..SimNet::uniform(3, 8.0 / super::super::network::TCP_PAYLOAD)
        };
        // 1 byte/s everywhere. Ranks 1 and 2 each send 100 bytes (+ overhead) to 0.
        let n = 100 - FRAME_OVERHEAD;
        let s = vec![vec![recv(1), recv(2)], vec![send(0, n)], vec![send(0, n)]];
        let o = replay(&net, &s).unwrap();
        assert!((o.time - 200.0).abs() < 1e-6, "{o:?}");
        // One sender, two frames to 0: in order, 100 s each; rank 0 is done at 200 s.
        let s = vec![vec![recv(1), recv(1)], vec![send(0, n), send(0, n)], vec![]];
        let o = replay(&net, &s).unwrap();
        assert!((o.time - 200.0).abs() < 1e-6, "{o:?}");
        // A receive no one sends fails, naming it.
        let e = replay(&net, &[vec![recv(1)], vec![], vec![]]).unwrap_err();
        assert!(
            e.to_string().contains("rank 0 took a frame from rank 1"),
            "{e}"
        );
    }
}
