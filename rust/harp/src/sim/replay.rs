//! Replaying recorded schedules over a [`SimNet`]: a discrete-event simulation with a fluid
//! network. Each worker walks its schedule in program order from time 0: a send is issued
//! when every receive before it has completed; a receive completes when its frame has
//! arrived. Frames between one pair of workers travel one after another (one TCP connection
//! per pair); the frames in flight share every host's sending and receiving side and every
//! rack uplink max-min fairly (progressive filling, recomputed for the flows a start or an end
//! touches), each also capped by its pair's rate. A frame arrives one latency after its last
//! byte has left.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, VecDeque};

use super::network::{Res, SimNet};
use crate::data::kv::FastMap;
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
    src: u32,
    dst: u32,
    bytes: f64,
}

/// The most resources a path crosses (out, in, uplink, downlink).
const MAX_PATH: usize = 4;

/// A frame being transmitted.
struct Flow {
    msg: u32,
    res: [u32; MAX_PATH],
    nres: u8,
    cap: f64,
    left: f64,
    rate: f64,
    /// When `left` was last settled.
    at: f64,
    /// Bumped whenever the rate changes (older finish events are stale).
    version: u32,
}

impl Flow {
    fn res(&self) -> &[u32] {
        &self.res[..self.nres as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ev {
    /// The flow's last byte left (if `version` is still the flow's).
    Sent { flow: u32, version: u32 },
    /// The frame reached its receiver.
    Arrived { msg: u32 },
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

/// A step of a program: a message id, with [`SEND`] set for a send.
const SEND: u32 = 1 << 31;

/// Every worker's program, one after another: worker r's steps are
/// `steps[start[r]..start[r + 1]]`.
struct Program {
    steps: Vec<u32>,
    start: Vec<usize>,
}

impl Program {
    fn len(&self, r: usize) -> usize {
        self.start[r + 1] - self.start[r]
    }
    fn get(&self, r: usize, i: usize) -> Option<u32> {
        (i < self.len(r)).then(|| self.steps[self.start[r] + i])
    }
}

/// A frame's matching key: (sender, receiver), operation, tag, then its order among the
/// sender's sends or the receiver's receives, and its message id or program slot.
type Key = (u64, u64, u32, u32);

fn pair_key(src: usize, dst: usize) -> u64 {
    ((src as u64) << 32) | dst as u64
}

/// Matches every receive with the send it took: the k-th frame of (sender, receiver,
/// operation, tag) sent is the k-th taken. Returns the messages and the programs (message ids
/// in program order); fails on a receive no send matches. Sorting both sides by key keeps
/// the memory at a few words per frame, whatever the number of distinct keys.
fn match_messages(s: &[Vec<Step>]) -> Result<(Vec<Msg>, Program)> {
    let total: usize = s.iter().map(Vec::len).sum();
    if total >= SEND as usize {
        return Err(Error::config(format!(
            "schedule: {total} steps, more than the replay's {SEND}"
        )));
    }
    let mut msgs = Vec::new();
    let mut sends: Vec<Key> = Vec::new();
    let mut recvs: Vec<Key> = Vec::new();
    let mut steps = vec![0u32; total];
    let mut start = Vec::with_capacity(s.len() + 1);
    let mut slot = 0usize;
    for (r, prog) in s.iter().enumerate() {
        start.push(slot);
        for st in prog {
            match *st {
                Step::Send {
                    peer,
                    bytes,
                    seq,
                    tag,
                } => {
                    let id = msgs.len() as u32;
                    msgs.push(Msg {
                        src: r as u32,
                        dst: peer as u32,
                        bytes: (bytes + FRAME_OVERHEAD) as f64,
                    });
                    steps[slot] = id | SEND;
                    sends.push((pair_key(r, peer), seq, tag, id));
                }
                Step::Recv { peer, seq, tag } => {
                    recvs.push((pair_key(peer, r), seq, tag, slot as u32));
                }
            }
            slot += 1;
        }
    }
    start.push(slot);
    // Ids and slots grow in program order, so equal keys sort in the order sent or taken.
    sends.sort_unstable();
    recvs.sort_unstable();
    let mut i = 0;
    for &(pair, seq, tag, at) in &recvs {
        while i < sends.len() && (sends[i].0, sends[i].1, sends[i].2) < (pair, seq, tag) {
            i += 1; // sent and never taken
        }
        match sends.get(i) {
            Some(&(p2, q2, t2, id)) if (p2, q2, t2) == (pair, seq, tag) => {
                steps[at as usize] = id;
                i += 1;
            }
            _ => {
                let (peer, r) = (pair >> 32, pair & 0xFFFF_FFFF);
                return Err(Error::Protocol(format!(
                    "schedule: rank {r} took a frame from rank {peer} (operation #{seq}, tag \
                     {tag}) that no schedule sent"
                )));
            }
        }
    }
    Ok((msgs, Program { steps, start }))
}

/// A pair's connection: whether a frame is on it, and the frames waiting for it.
#[derive(Default)]
struct Pair {
    busy: bool,
    queue: VecDeque<u32>,
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
    /// The pairs with a frame in flight (a pair leaves the map when it goes idle).
    pairs: FastMap<u64, Pair>,
    /// Each resource's capacity and active flows, indexed by [`Sim::res`].
    res_cap: Vec<f64>,
    res_flows: Vec<Vec<u32>>,
    flows: Vec<Option<Flow>>,
    free_flows: Vec<u32>,
    heap: BinaryHeap<Timed>,
    order: u64,
    /// Marks of [`Sim::component`]'s walk: a flow or resource is seen when its mark is `walk`.
    walk: u32,
    flow_mark: Vec<u32>,
    res_mark: Vec<u32>,
}

impl Sim<'_> {
    fn push(&mut self, t: f64, ev: Ev) {
        self.order += 1;
        self.heap.push(Timed(t, self.order, ev));
    }

    /// The index of a resource: hosts' sending sides, receiving sides, uplinks, downlinks.
    fn res(&self, r: Res) -> u32 {
        let p = self.net.p;
        let k = self.net.racks.map_or(0, |(k, _)| k);
        (match r {
            Res::Out(i) => i,
            Res::In(i) => p + i,
            Res::Up(x) => 2 * p + x,
            Res::Down(x) => 2 * p + k + x,
        }) as u32
    }

    fn flow(&self, f: u32) -> &Flow {
        self.flows[f as usize].as_ref().expect("active flow")
    }

    /// Walks worker `r`'s schedule as far as its receives allow, at time `t`; flows started
    /// go into `touched`.
    fn advance(&mut self, r: usize, t: f64, touched: &mut Vec<u32>) {
        while let Some(step) = self.prog.get(r, self.at[r]) {
            let m = step & !SEND;
            if step & SEND != 0 {
                let Msg { src, dst, .. } = self.msgs[m as usize];
                let pair = self
                    .pairs
                    .entry(pair_key(src as usize, dst as usize))
                    .or_default();
                if pair.busy {
                    pair.queue.push_back(m);
                } else {
                    self.start(m, t, touched);
                }
            } else if self.arrived[m as usize] {
                self.finish[r] = self.finish[r].max(t);
            } else {
                return;
            }
            self.at[r] += 1;
        }
    }

    /// Starts transmitting frame `m` at `t`.
    fn start(&mut self, m: u32, t: f64, touched: &mut Vec<u32>) {
        let Msg { src, dst, bytes } = self.msgs[m as usize];
        let (src, dst) = (src as usize, dst as usize);
        self.pairs.entry(pair_key(src, dst)).or_default().busy = true;
        let path = self.net.path(src, dst);
        let mut res = [0u32; MAX_PATH];
        for (x, &r) in res.iter_mut().zip(&path) {
            *x = self.res(r);
        }
        let flow = Flow {
            msg: m,
            res,
            nres: path.len() as u8,
            cap: self.net.pair_bytes(src, dst),
            left: bytes,
            rate: 0.0,
            at: t,
            version: 0,
        };
        let id = match self.free_flows.pop() {
            Some(i) => {
                self.flows[i as usize] = Some(flow);
                i
            }
            None => {
                self.flows.push(Some(flow));
                self.flow_mark.push(0);
                (self.flows.len() - 1) as u32
            }
        };
        for &x in &res[..path.len()] {
            self.res_flows[x as usize].push(id);
        }
        touched.push(id);
    }

    /// The flows that share a resource, transitively, with any of `seeds` (and the resources
    /// of the ended flows in `res_seeds`), in increasing order.
    fn component(&mut self, seeds: &[u32], res_seeds: &[u32]) -> Vec<u32> {
        self.walk += 1;
        let w = self.walk;
        let mut out = Vec::new();
        let mut todo_r: Vec<u32> = res_seeds.to_vec();
        for &f in seeds {
            if let Some(fl) = &self.flows[f as usize] {
                if self.flow_mark[f as usize] != w {
                    self.flow_mark[f as usize] = w;
                    out.push(f);
                    todo_r.extend(fl.res());
                }
            }
        }
        while let Some(r) = todo_r.pop() {
            if self.res_mark[r as usize] == w {
                continue;
            }
            self.res_mark[r as usize] = w;
            for &f in &self.res_flows[r as usize] {
                if self.flow_mark[f as usize] != w {
                    self.flow_mark[f as usize] = w;
                    out.push(f);
                    todo_r.extend(self.flows[f as usize].as_ref().expect("active").res());
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Max-min fair rates (progressive filling) of the flows `comp` at time `t`: settles what
    /// each has sent at its old rate, then schedules its end at the new one.
    fn rebalance(&mut self, comp: &[u32], t: f64) {
        for &f in comp {
            let fl = self.flows[f as usize].as_mut().expect("active");
            fl.left = (fl.left - fl.rate * (t - fl.at)).max(0.0);
            fl.at = t;
        }
        // The resources the component crosses, with what is left of each and its unfixed
        // flows.
        let mut used: Vec<u32> = Vec::new();
        let mut rem: FastMap<u32, (f64, usize)> = FastMap::default();
        for &f in comp {
            for &r in self.flow(f).res() {
                rem.entry(r)
                    .or_insert_with(|| {
                        used.push(r);
                        (self.res_cap[r as usize], 0)
                    })
                    .1 += 1;
            }
        }
        let mut open: Vec<u32> = comp.to_vec();
        let mut rates: Vec<(u32, f64)> = Vec::with_capacity(comp.len());
        let mut tight: FastMap<u32, ()> = FastMap::default();
        while !open.is_empty() {
            let share = used
                .iter()
                .map(|r| rem[r])
                .filter(|&(_, c)| c > 0)
                .map(|(x, c)| x / c as f64)
                .fold(f64::INFINITY, f64::min);
            let capmin = open
                .iter()
                .map(|&f| self.flow(f).cap)
                .fold(f64::INFINITY, f64::min);
            let s = share.min(capmin);
            if !s.is_finite() {
                // Nothing limits these flows: they are instant.
                rates.extend(open.iter().map(|&f| (f, f64::INFINITY)));
                break;
            }
            tight.clear();
            for r in &used {
                let (x, c) = rem[r];
                if c > 0 && x / c as f64 <= s * (1.0 + 1e-12) {
                    tight.insert(*r, ());
                }
            }
            let (fix, keep): (Vec<u32>, Vec<u32>) = open.iter().partition(|&&f| {
                let fl = self.flow(f);
                fl.cap <= s * (1.0 + 1e-12) || fl.res().iter().any(|r| tight.contains_key(r))
            });
            for &f in &fix {
                rates.push((f, s));
                for &r in self.flow(f).res() {
                    let e = rem.get_mut(&r).expect("resource");
                    e.0 -= s;
                    e.1 -= 1;
                }
            }
            open = keep;
        }
        rates.sort_unstable_by_key(|&(f, _)| f);
        for (f, new) in rates {
            let fl = self.flows[f as usize].as_mut().expect("active");
            fl.rate = new;
            fl.version = fl.version.wrapping_add(1);
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
    let nres = 2 * p + 2 * net.racks.map_or(0, |(k, _)| k);
    let mut sim = Sim {
        net,
        arrived: vec![false; msgs.len()],
        msgs,
        prog,
        at: vec![0; p],
        finish: vec![0.0; p],
        pairs: FastMap::default(),
        res_cap: Vec::with_capacity(nres),
        res_flows: vec![Vec::new(); nres],
        flows: Vec::new(),
        free_flows: Vec::new(),
        heap: BinaryHeap::new(),
        order: 0,
        walk: 0,
        flow_mark: Vec::new(),
        res_mark: vec![0; nres],
    };
    let k = net.racks.map_or(0, |(k, _)| k);
    let all = (0..p)
        .map(Res::Out)
        .chain((0..p).map(Res::In))
        .chain((0..k).map(Res::Up))
        .chain((0..k).map(Res::Down));
    sim.res_cap = all.map(|r| net.capacity(r)).collect();
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
                    let live = matches!(&sim.flows[flow as usize], Some(f) if f.version == version);
                    if !live {
                        continue;
                    }
                    let fl = sim.flows[flow as usize].take().expect("live flow");
                    sim.free_flows.push(flow);
                    for &r in fl.res() {
                        let list = &mut sim.res_flows[r as usize];
                        if let Some(i) = list.iter().position(|&x| x == flow) {
                            list.remove(i);
                        }
                        freed.push(r);
                    }
                    let Msg { src, dst, .. } = sim.msgs[fl.msg as usize];
                    sim.finish[src as usize] = sim.finish[src as usize].max(t);
                    let key = pair_key(src as usize, dst as usize);
                    let next = sim.pairs.get_mut(&key).and_then(|q| {
                        q.busy = false;
                        q.queue.pop_front()
                    });
                    match next {
                        Some(next) => sim.start(next, t, &mut touched),
                        None => {
                            sim.pairs.remove(&key);
                        }
                    }
                    let lat = net.latency;
                    sim.push(t + lat, Ev::Arrived { msg: fl.msg });
                }
                Ev::Arrived { msg } => {
                    sim.arrived[msg as usize] = true;
                    let d = sim.msgs[msg as usize].dst as usize;
                    sim.finish[d] = sim.finish[d].max(t);
                    sim.advance(d, t, &mut touched);
                }
            }
        }
        touched.retain(|&f| sim.flows[f as usize].is_some());
        if !touched.is_empty() || !freed.is_empty() {
            let comp = sim.component(&touched, &freed);
            if !comp.is_empty() {
                sim.rebalance(&comp, t);
            }
        }
    }
    if let Some(r) = (0..p).find(|&r| sim.at[r] < sim.prog.len(r)) {
        return Err(Error::Protocol(format!(
            "schedule: rank {r} waits forever at step {} of {} (its frame is never sent)",
            sim.at[r],
            sim.prog.len(r)
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
        // Frames match by (sender, receiver, operation, tag), the k-th sent to the k-th taken,
        // whatever the order of other keys in between; a frame never taken is allowed.
        let tagged = |peer, bytes, tag| Step::Send {
            peer,
            bytes,
            seq: 1,
            tag,
        };
        let took = |peer, tag| Step::Recv { peer, seq: 1, tag };
        let s = vec![
            vec![took(1, 7), took(2, 0), took(1, 3)],
            vec![tagged(0, n, 3), tagged(0, n, 7), tagged(2, n, 0)],
            vec![tagged(0, n, 0)],
        ];
        let (msgs, prog) = match_messages(&s).unwrap();
        let ids: Vec<u32> = (0..3).map(|i| prog.get(0, i).unwrap()).collect();
        assert_eq!(ids, vec![1, 3, 0], "{:?}", prog.steps);
        assert_eq!((msgs[3].src, msgs[3].dst), (2, 0));
        let o = replay(&net, &s).unwrap();
        assert_eq!(o.frames, 4);
        // A receive no one sends fails, naming it.
        let e = replay(&net, &[vec![recv(1)], vec![], vec![]]).unwrap_err();
        assert!(
            e.to_string().contains("rank 0 took a frame from rank 1"),
            "{e}"
        );
    }
}
