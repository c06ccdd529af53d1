//! `harp netmap`: measures the latency and bandwidth of every ordered worker pair and each
//! worker's host intake ([`harp::Worker::measure_network`]), prints the two matrices (ms and
//! Mbit/s), the intake row and the measurement's cost, and with `--output FILE` writes the
//! model's text form (what `--net-model FILE` loads). Bounded by `--net-measure-bytes` and `--net-measure-time`.

use std::path::PathBuf;

use clap::Args;
use harp::calibrate::CalibrateOptions;
use harp::{Error, NetModel, Result, Worker};

use crate::options::ClusterOpts;

#[derive(Args, Clone, Debug)]
pub struct NetmapArgs {
    /// Write the model's text form here (rank 0).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Ping-pongs per ordered pair (the latency is half the median round trip), 1 to 1000.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub pings: u16,
    #[command(flatten)]
    pub cluster: ClusterOpts,
}

pub fn run(w: &Worker, a: &NetmapArgs) -> Result<()> {
    let opts = CalibrateOptions {
        pings: a.pings.into(),
        ..CalibrateOptions::from_config(w.config())
    };
    let m = w.measure_network(&opts)?;
    if w.rank() != 0 {
        return Ok(());
    }
    print!("{}", matrices(&m.model, &w.topology().hosts));
    println!(
        "netmap: {} workers measured in {:.2} s, {:.1} MiB of timed transfers \
         (bound {} bytes per ordered pair, budget {:.1} s)",
        w.size(),
        m.secs,
        m.bytes as f64 / (1 << 20) as f64,
        opts.bytes,
        opts.time.as_secs_f64()
    );
    if let Some(out) = &a.output {
        let text = format!(
            "# harp netmap of {}\n{}",
            w.topology().hosts.join(" "),
            m.model.to_text()
        );
        std::fs::write(out, text)
            .map_err(|e| Error::io(format!("cannot write {}", out.display()), e))?;
        println!("netmap: model written to {}", out.display());
    }
    Ok(())
}

/// The latency (ms) and bandwidth (Mbit/s) matrices, row = sender, column = receiver.
fn matrices(m: &NetModel, hosts: &[String]) -> String {
    let p = m.workers();
    let mut s = String::from("hosts:\n");
    for (r, h) in hosts.iter().enumerate() {
        s += &format!("  {r:>3}  {h}\n");
    }
    let table = |title: &str, cell: &dyn Fn(usize, usize) -> String| {
        let mut t = format!("{title} (row: from, column: to)\n  from\\to");
        for j in 0..p {
            t += &format!("{j:>9}");
        }
        t.push('\n');
        for i in 0..p {
            t += &format!("  {i:>7}");
            for j in 0..p {
                t += &format!("{:>9}", if i == j { "-".to_string() } else { cell(i, j) });
            }
            t.push('\n');
        }
        t
    };
    s += &table("latency, ms", &|i, j| {
        format!("{:.3}", m.latency(i, j) * 1e3)
    });
    s += &table("bandwidth, Mbit/s", &|i, j| {
        format!("{:.1}", m.bandwidth(i, j) * 8.0 / 1e6)
    });
    if m.host(0).is_some() {
        s += "host intake, Mbit/s (all others sending at once)\n         ";
        for u in 0..p {
            s += &format!("{:>9.1}", m.host(u).unwrap_or(0.0) * 8.0 / 1e6);
        }
        s.push('\n');
    }
    s
}
