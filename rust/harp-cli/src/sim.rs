//! `harp sim`: one collective simulated on a modelled network (`harp::sim`), the network given
//! as `scripts/netns-cluster.sh up` takes it, the call as `harp bench` makes it.

use clap::Args;
use harp::sim::{self, network, Case, SimNet};
use harp::{Error, Result};
use harp_jobs::options::EngineFlags;

#[derive(Args, Clone, Debug)]
pub struct SimArgs {
    /// broadcast, reduce, gather, scatter, allgather, allreduce, reduce-scatter, regroup or
    /// barrier.
    pub op: String,
    /// Worker counts to simulate, comma separated (one host per worker).
    #[arg(long, value_delimiter = ',', default_value = "4,8,16")]
    pub p: Vec<usize>,
    /// Message size in bytes (suffixes k, m, g), as `harp bench --bytes` (for allgather and
    /// gather the total gathered; for every other op each worker's table).
    #[arg(long, value_parser = harp::config::parse_bytes, default_value = "1m")]
    pub bytes: u64,
    /// Algorithm, as `harp bench --algorithm` names it.
    #[arg(long, default_value = "auto")]
    pub algorithm: String,
    /// Partitions per table (default: 1; reduce-scatter, regroup and scatter 4 per worker).
    #[arg(long)]
    pub partitions: Option<usize>,
    /// Each host's send and receive rate (tc syntax: 200mbit, 1gbit, …).
    #[arg(long, default_value = "200mbit", value_parser = network::parse_rate)]
    pub rate: f64,
    /// Racks: host i in rack ⌊i·K/p⌋ (with --uplink).
    #[arg(long, requires = "uplink")]
    pub racks: Option<usize>,
    /// Each rack uplink's rate in each direction (tc syntax).
    #[arg(long, requires = "racks", value_parser = network::parse_rate)]
    pub uplink: Option<f64>,
    /// Uneven pairs: pair {a,b} at rate/d, d ∈ {1,2,4} from this seed (as the netns script).
    #[arg(long)]
    pub uneven: Option<u64>,
    /// With --uneven: each host's own limit in all (tc syntax).
    #[arg(long, requires = "uneven", value_parser = network::parse_rate)]
    pub host_rate: Option<f64>,
    /// Extra one-way delay per message (tc syntax: 100us, 1ms), added to the 100 µs base.
    #[arg(long, value_parser = network::parse_delay)]
    pub delay: Option<f64>,
    /// Give the algorithms the network's model (the configured rates × 0.956 and the latency,
    /// as `bench-netns.sh --net-model status`), turning on the network-aware choices.
    #[arg(long)]
    pub net_model: bool,
    /// One JSON object per worker count instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineFlags,
}

/// The modelled network of `a` for `p` hosts.
fn network(a: &SimArgs, p: usize) -> SimNet {
    SimNet {
        p,
        rate_bits: a.rate,
        host_rate_bits: a.host_rate,
        racks: a.racks.zip(a.uplink),
        uneven: a.uneven,
        latency: network::BASE_LATENCY + a.delay.unwrap_or(0.0),
    }
}

fn json_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn json_num(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.9}"),
        _ => "null".into(),
    }
}

pub fn run(a: &SimArgs) -> Result<()> {
    if a.p.is_empty() || a.p.contains(&0) {
        return Err(Error::config("--p: expected worker counts of at least 1"));
    }
    let mut cfg = a.engine.config.clone();
    // Recording a large p takes real time; the engine's waits must not call it silence.
    cfg.op_timeout = cfg.op_timeout.max(std::time::Duration::from_secs(3600));
    for &p in &a.p {
        let net = network(a, p);
        let case = Case {
            op: a.op.clone(),
            algorithm: a.algorithm.clone(),
            bytes: a.bytes,
            partitions: a.partitions,
        };
        let t0 = std::time::Instant::now();
        let s = sim::simulate(&net, &cfg, &case, a.net_model)?;
        let wall = t0.elapsed().as_secs_f64();
        let o = &s.outcome;
        let ratio = s.bound.filter(|&b| b > 0.0).map(|b| o.time / b);
        if a.json {
            println!(
                "{{\"kind\":\"sim\",\"op\":{},\"algorithm\":{},\"asked\":{},\"workers\":{p},\
                 \"bytes\":{},\"net\":{},\"net_model\":{},\"time_s\":{},\"bound_s\":{},\
                 \"ratio\":{},\"frames\":{},\"payload_bytes\":{},\"wall_s\":{wall:.3}}}",
                json_str(&a.op),
                json_str(&s.algorithm),
                json_str(&a.algorithm),
                a.bytes,
                json_str(&net.describe()),
                a.net_model,
                json_num(Some(o.time)),
                json_num(s.bound),
                json_num(ratio),
                o.frames,
                o.bytes,
            );
        } else {
            println!(
                "{} ({}) workers={p} bytes={}: {:.6} s simulated{} on {} ({} frames, {:.1} s to \
                 simulate)",
                a.op,
                s.algorithm,
                a.bytes,
                o.time,
                match (s.bound, ratio) {
                    (Some(b), Some(r)) => format!(", bound {b:.6} s, {r:.2}× the bound"),
                    _ => String::new(),
                },
                net.describe(),
                o.frames,
                wall
            );
        }
    }
    Ok(())
}
