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

use harp_jobs::jobs::{InWorker, Job, Local};

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

/// The environment variable through which the launcher tells its workers its pid.
const LAUNCHER_PID: &str = "HARP_LAUNCHER_PID";

/// A worker started by the local launcher dies with it: the kernel kills it (SIGKILL) when the
/// launcher exits, however it exits (Linux `PR_SET_PDEATHSIG`). If the launcher is already
/// gone, the worker stops at once.
fn die_with_launcher() -> Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid only change or read this process's state.
        let (set, parent) = unsafe {
            (
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ),
                libc::getppid(),
            )
        };
        if set != 0 {
            return Err(Error::io(
                "cannot tie the worker to its launcher (prctl)",
                std::io::Error::last_os_error(),
            ));
        }
        let launcher = std::env::var(LAUNCHER_PID).ok();
        if launcher.is_some_and(|l| l != parent.to_string()) {
            return Err(Error::config(
                "the launcher exited before this worker started",
            ));
        }
    }
    Ok(())
}

/// Prints the `harp: error: ...` line of a failed command (one write call, so lines of
/// several workers sharing a pipe never interleave).
pub fn report_error(e: &dyn std::fmt::Display) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("harp: error: {e}\n").as_bytes());
}

/// Runs this process as one worker.
pub fn worker(args: WorkerArgs) -> Result<()> {
    if args.rendezvous {
        die_with_launcher()?;
    }
    let cfg = args.run.cluster().config()?;
    let rt = harp::worker::runtime(args.run.cluster().io_threads.into())?;
    let secret = match &args.secret_file {
        Some(f) => harp_jobs::options::secret_file(f)?,
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
    harp::util::memory::set_workers_on_host(match topo.addrs() {
        Ok(addrs) => harp_jobs::jobs::workers_on_host(&addrs, args.rank),
        Err(_) => 1,
    });
    let w = Worker::start(
        rt.handle().clone(),
        cfg,
        topo,
        args.rank,
        &job,
        &secret,
        listener,
    )?;
    // A job that fails, inside or outside the collectives, tells every peer why before it
    // exits, so the peers' errors name this rank and the cause (not just a closed connection).
    // `--net-measure start|cached`: the network model first (a collective), then the job.
    // While the job computes outside the collectives, a dead or stopped peer is noticed by
    // the watcher within about the timeout: it tells the peers, prints the error a collective
    // would have returned and ends this worker with the same failure status.
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let res = std::thread::scope(|s| {
        let w = &w;
        s.spawn(move || {
            if let Some(e) = w.watch_peers(&stopped) {
                report_error(&e);
                std::process::exit(1);
            }
        });
        let res = w
            .calibrate_at_start()
            .and_then(|_| compute_before_job())
            .and_then(|_| args.run.run(w));
        drop(stop);
        res
    });
    match res {
        Ok(()) => {
            w.close();
            Ok(())
        }
        Err(e) => {
            w.abort(&e.to_string());
            Err(e)
        }
    }
}

/// Fault injection for tests: `HARP_COMPUTE_BEFORE_JOB=S` makes a worker spend `S` seconds
/// outside the collectives (asleep, as a long computation) after start-up, before its job.
pub const COMPUTE_BEFORE_JOB: &str = "HARP_COMPUTE_BEFORE_JOB";

fn compute_before_job() -> Result<()> {
    let Ok(v) = std::env::var(COMPUTE_BEFORE_JOB) else {
        return Ok(());
    };
    let secs: f64 = v
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s < 1e9)
        .ok_or_else(|| {
            Error::config(format!(
                "{COMPUTE_BEFORE_JOB}: expected seconds (a number from 0), got '{v}'"
            ))
        })?;
    std::thread::sleep(std::time::Duration::from_secs_f64(secs));
    Ok(())
}

/// `n` bytes from the operating system's random source, as hex. There is no fallback: a job
/// secret guessed from the time and the process id would not be a secret.
fn random_hex(n: usize) -> Result<String> {
    let mut b = vec![0u8; n];
    getrandom::getrandom(&mut b).map_err(|e| {
        Error::config(format!(
            "cannot draw the job secret from the OS random source: {e}"
        ))
    })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The signal (SIGTERM or SIGINT) the launcher received, 0 if none.
static SIGNALLED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, std::sync::atomic::Ordering::SeqCst);
}

/// From now on SIGTERM and SIGINT ask the launcher to stop its workers and exit (the workers
/// get SIGTERM; exec resets the handler in them).
fn catch_stop_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
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

/// Whether process `pid` is stopped (state `T` or `t` in `/proc/PID/stat`: SIGSTOP, a
/// tracer). False when it cannot be told.
fn is_stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold any byte.
    let state = stat
        .rfind(')')
        .and_then(|at| stat[at + 1..].trim_start().chars().next());
    matches!(state, Some('T' | 't'))
}

/// Sends SIGTERM to every worker still running, gives them 2 s, then kills the rest.
fn stop_workers(kids: &mut [Child]) {
    for c in kids.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on our own child, which has not been waited for yet.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        }
    }
    let until = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < until
        && kids.iter_mut().any(|c| matches!(c.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    for c in kids.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
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
    // Every worker needs its own memory on this host; arguments checked once, here.
    harp::util::memory::set_workers_on_host(workers);
    job.precheck()?;
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
    let secret = random_hex(32)?;
    let jobname = format!("local-{}-{}", std::process::id(), random_hex(4)?);
    let staged = Staged::of(job, &jobname);
    catch_stop_signals();
    let done = run_workers(workers, timeout, &exe, name, &rest, &secret, &jobname);
    // A failed or stopped job leaves no staging and no result (its workers are gone: a master
    // killed before its own clean-up, say).
    if done.is_err() {
        staged.remove();
    }
    done
}

/// The staging directories `DIR/_temporary/JOB` of a job's outputs, and whether each `DIR`
/// existed before the job started.
struct Staged(Vec<(String, bool)>, String);

impl Staged {
    fn of(job: &Job<Local>, jobname: &str) -> Staged {
        let dirs = job
            .outputs()
            .into_iter()
            .map(|d| d.trim_end_matches('/').to_string())
            .filter(|d| !d.is_empty())
            .map(|d| {
                let existed = harp::storage::for_path(&d).and_then(|st| st.exists(&d));
                (d, !matches!(existed, Ok(false)))
            })
            .collect();
        Staged(dirs, jobname.to_string())
    }

    /// Removes each staging directory, `DIR/_temporary` when nothing else is left in it, and
    /// `DIR` when the job created it and it is empty (best effort: the job's own error is what
    /// the user sees).
    fn remove(&self) {
        for (dir, existed) in &self.0 {
            let Ok(st) = harp::storage::for_path(dir) else {
                continue;
            };
            let staging = format!("{dir}/_temporary/{}", self.1);
            harp::apps::output::remove_staging(&*st, dir, &staging, !existed);
        }
    }
}

/// Starts the worker processes and waits for them (see [`launch`]).
fn run_workers(
    workers: usize,
    timeout: Duration,
    exe: &std::path::Path,
    name: &str,
    rest: &[String],
    secret: &str,
    jobname: &str,
) -> Result<()> {
    let mut kids = Kill(Vec::new());
    for r in 0..workers {
        let child = Command::new(exe)
            .args(["worker", "--rendezvous", "--rank", &r.to_string(), name])
            .args(rest)
            .env("HARP_SECRET", secret)
            .env("HARP_JOB", jobname)
            .env(LAUNCHER_PID, std::process::id().to_string())
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
            .ok_or_else(|| match line.trim() {
                "" => Error::config(format!(
                    "worker {r} exited before it started; see its error above"
                )),
                said => Error::config(format!(
                    "worker {r} failed to start (said {}); see its error above",
                    harp::util::quote(said.as_bytes())
                )),
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
    // Forward every worker's standard output (only rank 0 prints results). When our own output
    // is closed (`harp ... | head`), the rest is read and dropped: the job runs to its end and
    // no worker blocks on a full pipe.
    let pumps: Vec<_> = readers
        .into_iter()
        .map(|mut out| {
            std::thread::spawn(move || {
                let mut buf = String::new();
                let mut open = true;
                while out.read_line(&mut buf).map(|n| n > 0).unwrap_or(false) {
                    if open {
                        let mut o = std::io::stdout().lock();
                        open = o.write_all(buf.as_bytes()).and_then(|_| o.flush()).is_ok();
                    }
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
        let sig = SIGNALLED.load(std::sync::atomic::Ordering::SeqCst);
        if sig != 0 {
            stop_workers(&mut kids.0);
            return Err(Error::config(format!(
                "stopped by signal {sig}: the workers were stopped too"
            )));
        }
        // Once the job has failed, a worker that is stopped (SIGSTOP, a debugger) will never
        // fail by itself: when only such workers are left, nobody has a cause left to report,
        // so they are killed at once instead of after the grace period.
        let only_stopped = failed_at.is_some()
            && kids
                .0
                .iter()
                .enumerate()
                .all(|(r, c)| status[r].is_some() || is_stopped(c.id()));
        if only_stopped || failed_at.is_some_and(|t| t.elapsed() > grace) {
            for (r, c) in kids.0.iter_mut().enumerate() {
                if status[r].is_none() {
                    let _ = c.kill();
                    let _ = c.wait();
                    status[r] = Some(if only_stopped {
                        format!(
                            "worker {r} was stopped (not running) and was killed when the job \
                             failed"
                        )
                    } else {
                        format!(
                            "worker {r} killed {:.0} s after the job failed",
                            grace.as_secs_f64()
                        )
                    });
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
