//! The embedded local cluster (launcher + rendezvous) and the worker mode.
//!
//! Local rendezvous: the launcher starts W copies of `harp worker --rendezvous --rank r JOB…`
//! with a fresh job name and secret in the environment. Each worker binds 127.0.0.1:0 and
//! prints `HARP-PORT <port>`; the launcher collects every port and writes the full host list
//! to every worker's standard input; the workers then connect, authenticate and handshake.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clap::Args;
use harp::{Error, Listener, Result, Topology, Worker};

use crate::jobs::{InWorker, Job, Local};

#[derive(Args)]
pub struct WorkerArgs {
    /// Hosts file: `host:port` per line in rank order, `#rack` lines start a rack.
    #[arg(long, conflicts_with = "rendezvous")]
    hosts: Option<String>,
    /// Get the peers from the local launcher (internal).
    #[arg(long, hide = true)]
    rendezvous: bool,
    /// This worker's rank (0 is the master and prints the results).
    #[arg(long)]
    rank: usize,
    /// Address to listen on (default: this rank's line of the hosts file).
    #[arg(long)]
    bind: Option<SocketAddr>,
    /// File holding the job secret (default: the HARP_SECRET environment variable).
    #[arg(long)]
    secret_file: Option<String>,
    /// Job name; every worker of a job must use the same (default: HARP_JOB or "harp").
    #[arg(long)]
    job: Option<String>,
    #[command(subcommand)]
    run: Job<InWorker>,
}

// `check.rs` (and the jobs) name the cluster options by this path.
pub use crate::options::ClusterOpts;

/// Runs this process as one worker.
pub fn worker(args: WorkerArgs) -> Result<()> {
    let cfg = args.run.cluster().config()?;
    let rt = harp::worker::runtime(args.run.cluster().io_threads)?;
    let secret = match &args.secret_file {
        Some(f) => {
            std::fs::read(f).map_err(|e| Error::io(format!("cannot read secret file {f}"), e))?
        }
        None => std::env::var("HARP_SECRET")
            .map_err(|_| Error::config("no job secret: set HARP_SECRET or pass --secret-file"))?
            .into_bytes(),
    };
    let job = args
        .job
        .clone()
        .or_else(|| std::env::var("HARP_JOB").ok())
        .unwrap_or_else(|| "harp".into());
    let (topo, listener) = if args.rendezvous {
        let listener = Listener::bind(rt.handle(), "127.0.0.1:0".parse().expect("valid"), &cfg)?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "HARP-PORT {}", listener.addr.port())
            .and_then(|_| out.flush())
            .map_err(|e| Error::io("stdout", e))?;
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Error::io("reading the host list from the launcher", e))?;
        (Topology::parse(&text, "<launcher>")?, listener)
    } else {
        let file = args
            .hosts
            .as_deref()
            .ok_or_else(|| Error::config("worker needs --hosts FILE"))?;
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::io(format!("cannot read hosts file {file}"), e))?;
        let topo = Topology::parse(&text, file)?;
        if args.rank >= topo.size() {
            return Err(Error::config(format!(
                "--rank {} but {file} lists only {} hosts",
                args.rank,
                topo.size()
            )));
        }
        let bind = match args.bind {
            Some(a) => a,
            None => topo.addrs()?[args.rank],
        };
        let listener = Listener::bind(rt.handle(), bind, &cfg)?;
        (topo, listener)
    };
    let w = Worker::start(
        rt.handle().clone(),
        cfg,
        topo,
        args.rank,
        &job,
        &secret,
        listener,
    )?;
    let res = args.run.run(&w);
    if res.is_ok() {
        w.close();
    }
    res
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom_fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn getrandom_fill(b: &mut [u8]) {
    // /dev/urandom is always there on Linux; fall back to time-based bytes elsewhere.
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(b).is_ok() {
            return;
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (t >> ((i % 16) * 8)) as u8 ^ (std::process::id() as u8);
    }
}

struct Kill(Vec<Child>);
impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `--workers` local worker processes running `job` (named `name` on the command line)
/// with this process's remaining arguments, forwards their output, and fails if any of them
/// fails.
pub fn launch(job: &Job<Local>, name: &str) -> Result<()> {
    let workers = job.extra().workers;
    let timeout = job.cluster().config()?.op_timeout;
    if workers == 0 || workers > 256 {
        return Err(Error::config(format!(
            "--workers must be between 1 and 256, got {workers}"
        )));
    }
    let exe =
        std::env::current_exe().map_err(|e| Error::io("cannot find the harp executable", e))?;
    // Everything after the job's name is passed on, minus --workers/-w N.
    let argv: Vec<String> = std::env::args().collect();
    let at = argv
        .iter()
        .position(|a| a == name)
        .expect("job name on the command line");
    let mut rest = Vec::new();
    let mut it = argv[at + 1..].iter();
    while let Some(a) = it.next() {
        if a == "--workers" || a == "-w" {
            it.next();
        } else if !(a.starts_with("--workers=") || (a.starts_with("-w") && a.len() > 2)) {
            rest.push(a.clone());
        }
    }
    let secret = random_hex(32);
    let jobname = format!("local-{}-{}", std::process::id(), random_hex(4));
    let mut kids = Kill(Vec::new());
    for r in 0..workers {
        let child = Command::new(&exe)
            .args(["worker", "--rendezvous", "--rank", &r.to_string(), name])
            .args(&rest)
            .env("HARP_SECRET", &secret)
            .env("HARP_JOB", &jobname)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::io(format!("cannot start worker {r}"), e))?;
        kids.0.push(child);
    }
    // Collect every worker's port (bounded wait: a worker that dies early closes its stdout).
    let mut readers = Vec::new();
    let mut hosts = String::new();
    for (r, c) in kids.0.iter_mut().enumerate() {
        let mut out = BufReader::new(c.stdout.take().expect("piped"));
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| Error::io(format!("worker {r}"), e))?;
        let port = line
            .trim()
            .strip_prefix("HARP-PORT ")
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| {
                Error::config(format!(
                    "worker {r} failed to start (said {:?}); see its error above",
                    line.trim()
                ))
            })?;
        hosts.push_str(&format!("127.0.0.1:{port}\n"));
        readers.push(out);
    }
    for (r, c) in kids.0.iter_mut().enumerate() {
        let mut stdin = c.stdin.take().expect("piped");
        // A worker that already died makes this fail; its exit status is reported below.
        if let Err(e) = stdin.write_all(hosts.as_bytes()) {
            tracing::warn!("worker {r}: {e}");
        }
    }
    // Forward every worker's standard output (only rank 0 prints results).
    let pumps: Vec<_> = readers
        .into_iter()
        .map(|mut out| {
            std::thread::spawn(move || {
                let mut buf = String::new();
                while out.read_line(&mut buf).map(|n| n > 0).unwrap_or(false) {
                    print!("{buf}");
                    let _ = std::io::stdout().flush();
                    buf.clear();
                }
            })
        })
        .collect();
    // Wait for every worker. Once one has failed, the others get the collective timeout plus a
    // grace period to fail by themselves (they name the cause); then they are killed.
    let grace = timeout + Duration::from_secs(5);
    let mut status: Vec<Option<String>> = vec![None; workers];
    let mut failed_at: Option<std::time::Instant> = None;
    while status.iter().any(Option::is_none) {
        for (r, c) in kids.0.iter_mut().enumerate() {
            if status[r].is_some() {
                continue;
            }
            if let Some(st) = c
                .try_wait()
                .map_err(|e| Error::io(format!("waiting for worker {r}"), e))?
            {
                if !st.success() {
                    failed_at.get_or_insert_with(std::time::Instant::now);
                }
                status[r] = Some(if st.success() {
                    String::new()
                } else {
                    format!("worker {r} {st}")
                });
            }
        }
        if failed_at.is_some_and(|t| t.elapsed() > grace) {
            for (r, c) in kids.0.iter_mut().enumerate() {
                if status[r].is_none() {
                    let _ = c.kill();
                    let _ = c.wait();
                    status[r] = Some(format!(
                        "worker {r} killed {:.0} s after the job failed",
                        grace.as_secs_f64()
                    ));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let failed: Vec<String> = status
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect();
    kids.0.clear();
    for p in pumps {
        let _ = p.join();
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::config(format!(
            "{} of {workers} workers failed: {}",
            failed.len(),
            failed.join(", ")
        )))
    }
}
