//! Measuring the network: the latency and bandwidth of every ordered worker pair (the L and B
//! matrices of [`NetModel`], CMPI seed 001 §4.1) and each worker's host intake, as one
//! collective, [`Worker::calibrate`], and the cache of measured models per set of hosts
//! ([`Worker::calibrate_at_start`], `Config::net_measure`). docs/network-model.md describes the method, its bounds and its cost.
//!
//! Schedule: a round-robin tournament (the circle method) over p workers (p + 1 with a bye
//! when p is odd): p − 1 rounds (p rounds when odd) in which every worker is in at most one
//! pair, so a link carries one measurement at a time. In its round, a pair (a, b), a < b,
//! measures a → b, then b → a; each direction is
//!
//! 1. `pings` ping-pongs of empty frames started by the sender: L(sender, receiver) is half the
//!    median round trip;
//! 2. a timed one-way transfer of at most `bytes` bytes in 16 KiB `Data` frames, started by the
//!    receiver's `GO` and ended by the sender's `Ctrl` frame with the byte count and the
//!    smallest round trip of step 1. The receiver acknowledges every frame and the sender keeps
//!    unacknowledged at most what the link carried in 10 ms (or two round trips; at least
//!    64 KiB), so a link's queues never hold more than that (without it, TCP fills the sockets
//!    and the shaper's queue: megabytes that still have to drain after the sender stops, and
//!    that the receiver would take in bursts). The sender stops early, after at least 80 KiB
//!    (less makes the rate a shaper's burst), when the schedule is due: transfer i of the
//!    2·rounds is due at i + 1 shares of the time budget from the start, so a late transfer is
//!    shortened and the whole measurement ends about on budget even on slow links. The
//!    receiver times it from the frame that completes the first 48 KiB (or half the transfer)
//!    to the last: B = (bytes after that frame) / (time between them), which leaves out the
//!    start-up latency, TCP's first round trips and a shaper's burst (a token bucket lets its
//!    first bytes through at line rate); with a single frame (a slow link and a small budget),
//!    from sending `GO` to taking the frame, less the round trip.
//!
//! With three workers or more, p intake phases follow: in phase u every other worker tells u
//! it is ready, u sends them all `GO`, and all run the same timed transfer into u at once. u
//! takes its host intake as the bytes of all flows between the last flow's warm-up mark and the
//! first flow's end over that time ([`window_rate`]; the plain total over the whole phase would
//! count the time when the fast flows are done), at least its fastest link. Its
//! acknowledgements stop the senders once `bytes` more have come after every warm-up, or once a
//! flow has ended. Each intake phase has a share of the budget like a pair transfer.
//!
//! Then every worker sends its row of latencies, its column of bandwidths and its intake to the
//! master, which builds the model (the intakes as host capacities, [`NetModel::with_host`]) and
//! sends it to every worker; each sets it ([`Worker::set_net_model`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::collective::{tags, AllreduceAlgorithm, Ctx};
use crate::config::{Config, NetMeasure};
use crate::data::{Array, Combiner, Table};
use crate::error::{Error, Result};
use crate::netmodel::NetModel;
use crate::topology::Topology;
use crate::transport::Frame;
use crate::wire::{Kind, Op};
use crate::worker::Worker;
use crate::Collectives;
use crate::Opts;

/// One `Data` frame of a timed transfer (small, so that a sender past its schedule stops
/// soon even on a slow link).
const CHUNK: usize = 16 * 1024;
/// The receiver starts its clock at the first frame that completes this many bytes (or half
/// the transfer): the bytes a shaper's token bucket lets through at once come before it.
const WARMUP: u64 = 48 * 1024;
/// The sender keeps unacknowledged at most what the link carries in 10 ms (or two round
/// trips), at least this many bytes.
const MIN_WINDOW: u64 = 64 * 1024;
/// The sender's schedule never stops a transfer before this many bytes (the warm-up and two
/// frames after it), without which the rate would be a shaper's burst.
const MIN_BYTES: u64 = WARMUP + 2 * CHUNK as u64;

/// How a measurement is bounded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibrateOptions {
    /// At most this many bytes per ordered pair in the timed transfer.
    pub bytes: u64,
    /// The whole measurement's budget: each of the 2·rounds transfers gets an equal share.
    pub time: Duration,
    /// Ping-pongs per ordered pair (the latency is half the median round trip).
    pub pings: usize,
}

impl CalibrateOptions {
    /// From `net_measure_bytes` and `net_measure_time_ms`, 7 pings.
    pub fn from_config(cfg: &Config) -> CalibrateOptions {
        CalibrateOptions {
            bytes: cfg.net_measure_bytes,
            time: cfg.net_measure_time,
            pings: 7,
        }
    }
}

/// A measured model with the measurement's own cost.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub model: Arc<NetModel>,
    /// Bytes of the timed transfers, all pairs together (pings and the gathering of the model
    /// add a few KiB).
    pub bytes: u64,
    /// Wall-clock seconds of the whole collective on this worker.
    pub secs: f64,
    /// Where the model came from: "measured" or the cache file.
    pub source: String,
}

/// The partner of `r` in round `k` of the circle method over `n` (even) seats: seat n − 1
/// stays, the others rotate. A partner ≥ p is the bye.
fn partner(k: usize, r: usize, n: usize) -> usize {
    let m = n - 1;
    if r == m {
        return k % m;
    }
    if r == k % m {
        return m;
    }
    (2 * k + m - r % m) % m
}

/// Rounds of the tournament over `p` workers.
fn rounds(p: usize) -> usize {
    if p < 2 {
        0
    } else {
        p + p % 2 - 1
    }
}

/// A model as it travels: latencies, bandwidths (row-major) and the host capacities if known.
type Matrices = (Vec<f64>, Vec<f64>, Option<Vec<f64>>);

/// Plan message of the cached start: the master's cached model, or `None`: measure.
type Plan = Option<Matrices>;

/// What every worker sends the master: its latency row L(r, ·), its bandwidth column B(·, r),
/// its host intake (with three workers or more) and the bytes it received in timed transfers.
type Row = (Vec<f64>, Vec<f64>, Option<f64>, u64);

/// Measures this worker's pairs, then (with three workers or more) its host intake; returns
/// its row of latencies, its column of bandwidths, its intake and the bytes it received.
async fn measure(cx: &Ctx<'_>, opts: &CalibrateOptions) -> Result<Row> {
    let (r, p) = (cx.rank(), cx.size());
    let mut lat = vec![0.0; p];
    let mut bw = vec![f64::INFINITY; p];
    let mut received = 0u64;
    let rounds = rounds(p);
    if rounds == 0 {
        return Ok((lat, bw, None, 0));
    }
    let n = p + p % 2;
    let start = Instant::now();
    // Transfer i is due at (i + 1) shares of the budget: 2·rounds pair transfers, then one
    // intake phase per worker.
    let phases = if p >= 3 { p } else { 0 };
    let shares = (2 * rounds + phases) as f64;
    let due = |i: usize| start + opts.time.mul_f64((i + 1) as f64 / shares);
    let pings = opts.pings.max(1);
    let chunk = vec![0u8; CHUNK.min(opts.bytes.max(1) as usize)];
    for k in 0..rounds {
        let q = partner(k, r, n);
        if q >= p {
            continue;
        }
        let (lo, hi) = (r.min(q), r.max(q));
        for (dir, s) in [lo, hi].into_iter().enumerate() {
            if r == s {
                let (l, rtt) = ping(cx, q, k, pings).await?;
                lat[q] = l;
                let stop = due(2 * k + dir);
                send_timed(cx, q, k, opts.bytes, stop, &chunk, rtt).await?;
            } else {
                pong(cx, q, k, pings).await?;
                let (b, n) = recv_timed(cx, q, k).await?;
                bw[q] = b;
                received += n;
            }
        }
    }
    // Intake phase u (tags of round `rounds + u`): every other worker sends to u at once.
    let mut intake = None;
    for (u, to_u) in lat.iter().copied().enumerate().take(phases) {
        let k = rounds + u;
        if r == u {
            let fastest = bw
                .iter()
                .copied()
                .filter(|b| b.is_finite())
                .fold(0.0, f64::max);
            let (h, n) = recv_intake(cx, k, opts.bytes).await?;
            intake = Some(h.unwrap_or(0.0).max(fastest));
            received += n;
        } else {
            // Ready: u starts every flow at once when all are (workers leave the previous
            // phase at different times, and flows that do not overlap measure nothing).
            cx.ep
                .send_frame(u, Kind::Ctrl, tags::CAL_PING.at(k), 0, &[])
                .await?;
            let stop = due(2 * rounds + u);
            send_timed(cx, u, k, opts.bytes, stop, &chunk, 2.0 * to_u).await?;
        }
    }
    Ok((lat, bw, intake, received))
}

/// Half the median and the smallest round trip of `pings` empty ping-pongs to `q`.
async fn ping(cx: &Ctx<'_>, q: usize, k: usize, pings: usize) -> Result<(f64, f64)> {
    let mut rtt = Vec::with_capacity(pings);
    for _ in 0..pings {
        let t0 = Instant::now();
        cx.ep
            .send_frame(q, Kind::Ctrl, tags::CAL_PING.at(k), 0, &[])
            .await?;
        cx.ep.recv_frame(q, tags::CAL_PONG.at(k)).await?;
        rtt.push(t0.elapsed().as_secs_f64());
    }
    rtt.sort_by(f64::total_cmp);
    Ok((rtt[rtt.len() / 2] / 2.0, rtt[0]))
}

async fn pong(cx: &Ctx<'_>, q: usize, k: usize, pings: usize) -> Result<()> {
    for _ in 0..pings {
        cx.ep.recv_frame(q, tags::CAL_PING.at(k)).await?;
        cx.ep
            .send_frame(q, Kind::Ctrl, tags::CAL_PONG.at(k), 0, &[])
            .await?;
    }
    Ok(())
}

/// Waits for `q`'s `GO`, then sends `Data` frames of `chunk` (with at most 10 ms or two round
/// trips of data unacknowledged, at least [`MIN_WINDOW`]) until `bytes` are sent, `stop` has
/// come ([`MIN_BYTES`] at least) or an acknowledgement says the receiver has enough, then the
/// count and the round trip `rtt` (seconds); then takes the acknowledgements still due (one per
/// frame).
async fn send_timed(
    cx: &Ctx<'_>,
    q: usize,
    k: usize,
    bytes: u64,
    stop: Instant,
    chunk: &[u8],
    rtt: f64,
) -> Result<()> {
    let tag = tags::CAL_DATA.at(k);
    cx.ep.recv_frame(q, tags::CAL_GO.at(k)).await?;
    let t0 = Instant::now();
    let (mut sent, mut acked, mut frames, mut acks) = (0u64, 0u64, 0u64, 0u64);
    // An acknowledgement: the bytes taken so far, and whether the receiver has what it needs
    // (an intake phase after its first flow ended).
    let ack = async |acks: &mut u64| -> Result<(u64, bool)> {
        *acks += 1;
        cx.ep.recv_ctrl(q, tags::CAL_ACK.at(k)).await
    };
    let window = |acked: u64| {
        let rate = acked as f64 / t0.elapsed().as_secs_f64().max(1e-6);
        ((rate * (2.0 * rtt).max(0.01)) as u64).max(MIN_WINDOW)
    };
    let least = MIN_BYTES.min(bytes);
    let mut enough = false;
    loop {
        while !enough && sent - acked >= window(acked) {
            (acked, enough) = ack(&mut acks).await?;
        }
        if enough {
            break;
        }
        let n = (bytes - sent).min(chunk.len() as u64) as usize;
        cx.ep
            .send_frame(q, Kind::Data, tag, 0, &[&chunk[..n]])
            .await?;
        sent += n as u64;
        frames += 1;
        if sent >= bytes || (sent >= least && Instant::now() >= stop) {
            break;
        }
    }
    cx.ep.send_ctrl(q, tag, &(sent, rtt)).await?;
    while acks < frames {
        ack(&mut acks).await?;
    }
    Ok(())
}

/// Sends `GO` to `q` and times its transfer; returns the rate (bytes per second) and the bytes.
async fn recv_timed(cx: &Ctx<'_>, q: usize, k: usize) -> Result<(f64, u64)> {
    let tag = tags::CAL_DATA.at(k);
    cx.ep
        .send_frame(q, Kind::Ctrl, tags::CAL_GO.at(k), 0, &[])
        .await?;
    let t_go = Instant::now();
    let mut flow = Flow::default();
    let rtt = loop {
        let f = cx.ep.recv_frame(q, tag).await?;
        if let Some(rtt) = flow.take(cx, q, k, f, false).await? {
            break rtt;
        }
    };
    let rate = window_rate(&[&flow]).unwrap_or_else(|| {
        let (last, got) = *flow.points.last().expect("a flow has a frame");
        let time = last.duration_since(t_go).as_secs_f64().max(1e-6);
        got as f64 / (time - rtt).max(time / 2.0)
    });
    Ok((rate, flow.got))
}

/// Waits until every other worker is ready (an empty `CAL_PING` frame), sends each `GO` and
/// times their transfers into this one, all at once, until `bytes` more have come after every
/// flow passed its warm-up or a flow has ended (then the acknowledgements stop the others).
/// Returns the host intake (bytes per second, [`window_rate`] over all the flows; `None` when
/// they did not all run at the same time after their warm-up) and the bytes.
async fn recv_intake(cx: &Ctx<'_>, k: usize, bytes: u64) -> Result<(Option<f64>, u64)> {
    let (r, p) = (cx.rank(), cx.size());
    let tag = tags::CAL_DATA.at(k);
    let mut live: Vec<usize> = (0..p).filter(|&q| q != r).collect();
    for &q in &live {
        cx.ep.recv_frame(q, tags::CAL_PING.at(k)).await?;
    }
    for &q in &live {
        cx.ep
            .send_frame(q, Kind::Ctrl, tags::CAL_GO.at(k), 0, &[])
            .await?;
    }
    let mut flows: Vec<Flow> = (0..p).map(|_| Flow::default()).collect();
    let (mut enough, mut total, mut warm) = (false, 0u64, None);
    while !live.is_empty() {
        let f = cx.ep.recv_frame_from_any(&live, &[], tag).await?;
        let q = f.hdr.src as usize;
        total += f.body.len() as u64;
        if flows[q].take(cx, q, k, f, enough).await?.is_some() {
            live.retain(|&x| x != q);
            enough = true;
        }
        if warm.is_none()
            && flows
                .iter()
                .enumerate()
                .all(|(i, f)| i == r || f.got >= WARMUP)
        {
            warm = Some(total);
        }
        enough |= warm.is_some_and(|w| total - w >= bytes);
    }
    let running: Vec<&Flow> = flows.iter().filter(|f| f.got > 0).collect();
    Ok((window_rate(&running), running.iter().map(|f| f.got).sum()))
}

/// The frames of one timed transfer as the receiver took them.
#[derive(Default)]
struct Flow {
    /// (when taken, bytes so far) of every `Data` frame.
    points: Vec<(Instant, u64)>,
    got: u64,
}

impl Flow {
    /// Takes frame `f` of `q`'s transfer (tag round `k`): a `Data` frame is counted and
    /// acknowledged (`None`; with `enough`, the acknowledgement stops the sender); the closing
    /// `Ctrl` frame is checked against the count and gives the sender's round trip.
    async fn take(
        &mut self,
        cx: &Ctx<'_>,
        q: usize,
        k: usize,
        f: Frame,
        enough: bool,
    ) -> Result<Option<f64>> {
        match f.hdr.kind {
            Kind::Data => {
                self.got += f.body.len() as u64;
                self.points.push((Instant::now(), self.got));
                let ack = (self.got, enough);
                cx.ep.send_ctrl(q, tags::CAL_ACK.at(k), &ack).await?;
                Ok(None)
            }
            Kind::Ctrl => {
                let (sent, rtt): (u64, f64) = crate::wire::decode(&f.body)?;
                let got = self.got;
                if sent != got || got == 0 || !(0.0..1e4).contains(&rtt) {
                    return Err(Error::Protocol(format!(
                        "{}: rank {} announced {sent} bytes of measurement (round trip {rtt} s), \
                         {got} arrived",
                        cx.ep.ctx,
                        cx.ep.world_rank(q)
                    )));
                }
                Ok(Some(rtt))
            }
            other => Err(Error::Protocol(format!(
                "{}: unexpected {other:?} frame from rank {} in a measurement",
                cx.ep.ctx,
                cx.ep.world_rank(q)
            ))),
        }
    }

    /// When the flow passed its warm-up (the frame that completes [`WARMUP`] bytes or half the
    /// flow, if a later frame follows; else its first frame) and when it ended.
    fn span(&self) -> Option<(Instant, Instant)> {
        let &(last, _) = self.points.last()?;
        let mark = WARMUP.min(self.got / 2);
        let (start, _) = self
            .points
            .iter()
            .copied()
            .find(|&(_, cum)| cum >= mark)
            .filter(|&(t, _)| t < last)
            .unwrap_or(self.points[0]);
        Some((start, last))
    }

    /// Bytes taken up to and including time `t`.
    fn bytes_at(&self, t: Instant) -> u64 {
        let n = self.points.partition_point(|&(at, _)| at <= t);
        n.checked_sub(1).map_or(0, |i| self.points[i].1)
    }
}

/// The rate of `flows` together while all of them ran: from the last warm-up mark
/// ([`Flow::span`]) to the first end, the bytes taken in between over that time. `None` when
/// there is no such time (a flow ended before another passed its warm-up). With one flow this
/// is its own rate after the warm-up.
fn window_rate(flows: &[&Flow]) -> Option<f64> {
    let spans: Vec<(Instant, Instant)> = flows.iter().map(|f| f.span()).collect::<Option<_>>()?;
    let from = spans.iter().map(|s| s.0).max()?;
    let to = spans.iter().map(|s| s.1).min()?;
    let secs = to.checked_duration_since(from)?.as_secs_f64();
    let bytes: u64 = flows
        .iter()
        .map(|f| f.bytes_at(to) - f.bytes_at(from))
        .sum();
    (secs > 0.0 && bytes > 0).then(|| bytes as f64 / secs)
}

/// The whole collective: optionally the master's plan (a cached model or measure), the
/// measurement, the rows to the master and the model back. Returns the model, the bytes of the
/// timed transfers and whether it was measured.
async fn calibrate(
    cx: &Ctx<'_>,
    opts: &CalibrateOptions,
    plan: Option<Plan>,
) -> Result<(NetModel, u64, bool)> {
    let (r, p) = (cx.rank(), cx.size());
    let model_of = |m: Matrices, from: usize| {
        NetModel::from_matrices(p, m).map_err(|e| {
            Error::Protocol(format!(
                "{}: bad network model from rank {}: {e}",
                cx.ep.ctx,
                cx.ep.world_rank(from)
            ))
        })
    };
    if let Some(plan) = plan {
        // The master decides between its cached model and measuring.
        let plan: Plan = if r == 0 {
            for q in 1..p {
                cx.ep.send_ctrl(q, tags::CAL_PLAN.tag(), &plan).await?;
            }
            plan
        } else {
            cx.ep.recv_ctrl(0, tags::CAL_PLAN.tag()).await?
        };
        if let Some(m) = plan {
            return Ok((model_of(m, 0)?, 0, false));
        }
    }
    let row = measure(cx, opts).await?;
    if r != 0 {
        cx.ep.send_ctrl(0, tags::CAL_ROW.tag(), &row).await?;
        let (m, bytes): (Matrices, u64) = cx.ep.recv_ctrl(0, tags::CAL_MODEL.tag()).await?;
        return Ok((model_of(m, 0)?, bytes, true));
    }
    let mut lat = vec![0.0; p * p];
    let mut bw = vec![f64::INFINITY; p * p];
    let mut host = Vec::with_capacity(p);
    let mut bytes = 0u64;
    for q in 0..p {
        let (l, b, h, n) = if q == 0 {
            row.clone()
        } else {
            cx.ep.recv_ctrl::<Row>(q, tags::CAL_ROW.tag()).await?
        };
        if l.len() != p || b.len() != p {
            return Err(Error::Protocol(format!(
                "{}: rank {} sent {} latencies and {} bandwidths for {p} workers",
                cx.ep.ctx,
                cx.ep.world_rank(q),
                l.len(),
                b.len()
            )));
        }
        for j in 0..p {
            lat[q * p + j] = l[j];
            bw[j * p + q] = b[j];
        }
        host.push(h);
        bytes = bytes.saturating_add(n);
    }
    // Every worker measured its intake, or (fewer than three) none did.
    let host: Option<Vec<f64>> = host.into_iter().collect();
    let m: Matrices = (lat, bw, host);
    let model = model_of(m.clone(), 0)?;
    for q in 1..p {
        cx.ep
            .send_ctrl(q, tags::CAL_MODEL.tag(), &(&m, bytes))
            .await?;
    }
    Ok((model, bytes, true))
}

impl Worker {
    /// Measures the latency and bandwidth of every ordered worker pair (a collective: every
    /// worker calls it at the same position) and sets the model on every worker
    /// ([`Worker::set_net_model`]); every worker returns the same model. Bounded by `opts`
    /// (bytes per pair, total time). Call it again to recalibrate at any time, e.g. when the
    /// measured times of collectives drift from the model's predictions.
    pub fn calibrate(&self, opts: &CalibrateOptions) -> Result<Arc<NetModel>> {
        Ok(self.measure_network(opts)?.model)
    }

    /// Recalibration on drift (a collective: every worker calls it at the same position, e.g.
    /// once per iteration). Every worker contributes whether its own predictions drift more
    /// than 20% from the model ([`Worker::needs_recalibration`]); the flags are agreed with one
    /// small allreduce, and when any worker's is set every worker measures anew
    /// ([`Worker::calibrate`], which clears the drift window) and gets the new model. Returns
    /// None, after the one allreduce, when no worker drifted. A drift that comes back right
    /// after a recalibration (a network the measurement does not describe, e.g. loopback)
    /// makes the next one wait twice as many predictions, up to 2^6 windows
    /// ([`crate::worker::DRIFT_BACKOFF_MAX`]).
    pub fn recalibrate_if_drifted(&self, opts: &CalibrateOptions) -> Result<Option<Arc<NetModel>>> {
        let mut flag = Table::new(Combiner::Max);
        let mine = self.needs_recalibration() as i64;
        flag.add(0, Array::from_slice(self.pool(), &[mine]))?;
        self.allreduce(
            "recalibrate?",
            &mut flag,
            Opts::default().algorithm(AllreduceAlgorithm::BidirectionalExchange),
        )?;
        let any = flag
            .get(0)
            .map(|a| a.as_slice::<i64>().map(|v| v.first().copied().unwrap_or(0)))
            .transpose()?
            .unwrap_or(0);
        if any == 0 {
            return Ok(None);
        }
        let next = self.note_recalibration();
        tracing::info!(
            rank = self.rank(),
            "recalibrating the network model (drift); should the drift come back at once, the \
             next recalibration waits for {next} predictions"
        );
        self.calibrate(opts).map(Some)
    }

    /// The recalibration the iterative jobs run at the end of every iteration: with a network
    /// model and `net_recalibrate` on (the default), [`Worker::recalibrate_if_drifted`] with the
    /// configured measurement bounds (one small allreduce, and a measurement only when a
    /// worker's predictions drift more than 20%); nothing, and no collective, without a model.
    /// Every worker of a job holds a model or none (it is set collectively or from the same
    /// file), so all of them take the same path.
    pub fn recalibrate_on_drift(&self) -> Result<Option<Arc<NetModel>>> {
        if !self.config().net_recalibrate || self.net_model().is_none() {
            return Ok(None);
        }
        self.recalibrate_if_drifted(&CalibrateOptions::from_config(self.config()))
    }

    /// [`Worker::calibrate`] with the measurement's cost.
    pub fn measure_network(&self, opts: &CalibrateOptions) -> Result<Measurement> {
        self.calibrate_op(opts, None)
    }

    /// What `Config::net_measure` asks for at the start of a job: nothing (`off`), a
    /// measurement (`start`), or (`cached`) the master's cached model for this set of hosts
    /// when it is younger than `net_cache_max_age`, else a measurement. A measured model is
    /// stored in the cache by the master (a failure to write it is only logged). Collective.
    pub fn calibrate_at_start(&self) -> Result<Option<Measurement>> {
        let opts = CalibrateOptions::from_config(self.config());
        let m = match self.config().net_measure {
            NetMeasure::Off => return Ok(None),
            NetMeasure::Start => self.calibrate_op(&opts, None)?,
            NetMeasure::Cached => {
                let cached = if self.is_master() {
                    cache_lookup(self.config(), self.topology())
                } else {
                    None
                };
                let plan = cached.as_ref().map(|(m, _)| m.matrices());
                let mut m = self.calibrate_op(&opts, Some(plan))?;
                if let Some((_, file)) = cached {
                    m.source = file.display().to_string();
                }
                m
            }
        };
        if self.is_master() && m.source == "measured" {
            match cache_store(self.config(), self.topology(), &m.model) {
                Ok(file) => tracing::info!("network model stored in {}", file.display()),
                Err(e) => tracing::warn!("cannot store the network model in the cache: {e}"),
            }
        }
        Ok(Some(m))
    }

    fn calibrate_op(&self, opts: &CalibrateOptions, plan: Option<Plan>) -> Result<Measurement> {
        let t0 = Instant::now();
        let algo = plan.is_some() as u8;
        let mut out = None;
        let done = &mut out;
        self.run_op(
            Op::Calibrate,
            algo,
            "calibrate",
            crate::worker::body(move |cx| async move {
                *done = Some(calibrate(&cx, opts, plan).await?);
                Ok(())
            }),
        )?;
        let (model, bytes, measured) = out.expect("set by a calibration that succeeded");
        self.set_net_model(Some(model))?;
        let model = self.net_model().expect("just set");
        let secs = t0.elapsed().as_secs_f64();
        tracing::info!(
            rank = self.rank(),
            secs,
            bytes,
            measured,
            "network model ready"
        );
        Ok(Measurement {
            model,
            bytes,
            secs,
            source: if measured { "measured" } else { "cache" }.to_string(),
        })
    }
}

/// The cache directory: `net_cache_dir`, else `$XDG_CACHE_HOME/harp`, else `~/.cache/harp`.
pub fn cache_dir(cfg: &Config) -> Option<PathBuf> {
    if let Some(d) = &cfg.net_cache_dir {
        return Some(PathBuf::from(d));
    }
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("harp"))
}

/// A host without its port (`10.0.0.1:7700` → `10.0.0.1`): the cache is per set of machines,
/// whatever ports the workers listen on.
fn machine(host: &str) -> &str {
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

/// The cache file of the hosts of `topo`: `net-<FNV-1a of the sorted host list>.txt`.
pub fn cache_file(dir: &std::path::Path, topo: &Topology) -> PathBuf {
    let mut hosts: Vec<&str> = topo.hosts.iter().map(|h| machine(h)).collect();
    hosts.sort_unstable();
    let key = crate::util::fnv1a64(hosts.join("\n").as_bytes());
    dir.join(format!("net-{key:016x}.txt"))
}

/// Writes `model` for the hosts of `topo` (rank order, in a `# hosts` line) into the cache,
/// atomically (a temporary file renamed).
pub fn cache_store(cfg: &Config, topo: &Topology, model: &NetModel) -> Result<PathBuf> {
    let dir = cache_dir(cfg).ok_or_else(|| {
        Error::config("no cache directory: set net_cache_dir, XDG_CACHE_HOME or HOME")
    })?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let file = cache_file(&dir, topo);
    let hosts: Vec<&str> = topo.hosts.iter().map(|h| machine(h)).collect();
    let text = format!("# hosts {}\n{}", hosts.join(" "), model.to_text());
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &file))
        .map_err(|e| Error::io(format!("cannot write {}", file.display()), e))?;
    Ok(file)
}

/// The cached model of the hosts of `topo`, in this job's rank order, if the cache has one
/// younger than `net_cache_max_age` that names the same hosts; with its file. A missing, old
/// or unreadable entry is `None` (logged).
pub fn cache_lookup(cfg: &Config, topo: &Topology) -> Option<(NetModel, PathBuf)> {
    let file = cache_file(&cache_dir(cfg)?, topo);
    let age = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())?;
    if age > cfg.net_cache_max_age {
        tracing::info!(
            "cached network model {} is {:.0} s old: measuring again",
            file.display(),
            age.as_secs_f64()
        );
        return None;
    }
    match load_cached(&file, topo) {
        Ok(m) => Some((m, file)),
        Err(e) => {
            tracing::warn!("ignoring the cached network model: {e}");
            None
        }
    }
}

/// Reads a cache entry and orders it by this job's ranks (hosts matched by name, workers on
/// the same machine in turn).
fn load_cached(file: &std::path::Path, topo: &Topology) -> Result<NetModel> {
    let name = file.display().to_string();
    let text =
        std::fs::read_to_string(file).map_err(|e| Error::io(format!("cannot read {name}"), e))?;
    let model = NetModel::parse(&text, &name)?;
    let saved: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("# hosts "))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let mut used = vec![false; saved.len()];
    let mut order = Vec::with_capacity(topo.size());
    for h in &topo.hosts {
        let at = (0..saved.len())
            .find(|&i| !used[i] && saved[i] == machine(h))
            .ok_or_else(|| {
                Error::config(format!(
                    "{name}: its hosts {saved:?} are not this job's (no entry left for {h})"
                ))
            })?;
        used[at] = true;
        order.push(at);
    }
    if saved.len() != topo.size() || model.workers() != saved.len() {
        return Err(Error::config(format!(
            "{name}: a model of {} workers on {} hosts for a job of {}",
            model.workers(),
            saved.len(),
            topo.size()
        )));
    }
    Ok(model.sub(&order))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tournament_pairs_every_two_workers_once_one_pair_per_worker_per_round() {
        for p in 2..=9 {
            let n = p + p % 2;
            let mut met = std::collections::HashMap::new();
            for k in 0..rounds(p) {
                for r in 0..p {
                    let q = partner(k, r, n);
                    assert_ne!(q, r);
                    if q < p {
                        assert_eq!(partner(k, q, n), r, "p {p} round {k}");
                        *met.entry((r, q)).or_insert(0) += 1;
                    }
                }
            }
            assert_eq!(met.len(), p * (p - 1), "p {p}: every ordered pair meets");
            assert!(met.values().all(|&c| c == 1), "p {p}: once");
        }
    }

    /// Flows of 16 KiB frames, one per `step` ms from `first` ms on, `n` frames.
    fn flow(t0: Instant, first: u64, step: u64, n: u64) -> Flow {
        let mut f = Flow::default();
        for i in 0..n {
            f.got += 16 * 1024;
            f.points
                .push((t0 + Duration::from_millis(first + i * step), f.got));
        }
        f
    }

    #[test]
    fn an_intake_is_the_rate_while_every_flow_runs() {
        let t0 = Instant::now();
        // A: frames at 1..=20 ms; warm-up (48 KiB) at 3 ms. B: 5..=14 ms, warm-up at 7 ms.
        let (a, b) = (flow(t0, 1, 1, 20), flow(t0, 5, 1, 10));
        // From 7 to 14 ms both took 7 frames: 2 × 7 × 16 KiB in 7 ms.
        let both = window_rate(&[&a, &b]).unwrap();
        assert!((both - 2.0 * 16384.0 / 1e-3).abs() < 1.0, "{both}");
        // One flow alone: its rate after the warm-up (A: 17 frames in 17 ms).
        let one = window_rate(&[&a]).unwrap();
        assert!((one - 16384.0 / 1e-3).abs() < 1.0, "{one}");
        // A slower flow counts with its own rate: C one frame per 2 ms from 2 ms (warm-up 6 ms).
        let c = flow(t0, 2, 2, 10);
        let ac = window_rate(&[&a, &c]).unwrap();
        // 6..20 ms: A 14 frames, C 7 frames, in 14 ms.
        assert!((ac - 21.0 * 16384.0 / 14e-3).abs() < 1.0, "{ac}");
        // D ended (4 ms) before B passed its warm-up (7 ms): no time when all ran.
        let d = flow(t0, 1, 1, 4);
        assert_eq!(window_rate(&[&b, &d]), None);
        assert_eq!(window_rate(&[&Flow::default()]), None);
    }

    #[test]
    fn the_cache_is_per_set_of_hosts_and_reorders_by_rank() {
        let dir = std::env::temp_dir().join(format!("harp-netcache-{}", std::process::id()));
        let cfg = Config {
            net_cache_dir: Some(dir.display().to_string()),
            ..Config::default()
        };
        let topo = Topology::flat(vec!["a:1".into(), "b:1".into(), "c:1".into()]);
        let mut lat = vec![0.0; 9];
        for i in 0..3 {
            for j in 0..3 {
                lat[i * 3 + j] = if i == j { 0.0 } else { (10 * i + j) as f64 };
            }
        }
        let m = NetModel::new(3, lat, vec![1e6; 9]).unwrap();
        let file = cache_store(&cfg, &topo, &m).unwrap();
        // The same machines on other ports and in another rank order: c, a, b.
        let other = Topology::flat(vec!["c:9".into(), "a:9".into(), "b:9".into()]);
        assert_eq!(cache_file(&dir, &other), file);
        let (back, _) = cache_lookup(&cfg, &other).unwrap();
        assert_eq!(back.latency(0, 1), 20.0, "c -> a");
        assert_eq!(back.latency(2, 0), 12.0, "b -> c");
        // Too old, or other hosts: no entry.
        let young = Config {
            net_cache_max_age: Duration::from_millis(1),
            ..cfg.clone()
        };
        std::thread::sleep(Duration::from_millis(5));
        assert!(cache_lookup(&young, &topo).is_none());
        let d = Topology::flat(vec!["a:1".into(), "b:1".into(), "d:1".into()]);
        assert!(cache_lookup(&cfg, &d).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
