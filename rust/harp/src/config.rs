//! Worker configuration: timeouts, socket buffers, pipelining, pool limits, algorithm overrides.
//!
//! [`OPTIONS`] is the one table of the engine's settable options: each row names the option in
//! every layer (the engine key of [`Config::set`], the CLI flag, the Java job configuration
//! key), its unit and its meaning; defaults always come from [`Config::default`].
//! [`JAVA_ONLY`] lists the `harp.*` job keys that belong to the Java and YARN layers, and
//! [`apps`] the applications' options (name, flag, Java key, default, help, one table per job);
//! [`Config::set`] accepts and ignores the Java keys of both (so the Java side can pass every
//! `harp.*` entry of a job).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::pool::PoolConfig;

pub mod apps;

#[derive(Debug, Clone)]
pub struct Config {
    /// Time allowed for connecting to every peer and completing the start-up handshake.
    pub connect_timeout: Duration,
    /// Longest silence tolerated from a peer inside a collective (and for one socket write).
    pub op_timeout: Duration,
    /// SO_SNDBUF / SO_RCVBUF for every connection (None: the OS default with autotuning).
    pub send_buffer: Option<u32>,
    pub recv_buffer: Option<u32>,
    /// TCP congestion control for every connection (Linux `TCP_CONGESTION`), see
    /// [`TcpCongestion`]; the default picks a loss-based one when the kernel allows it.
    pub tcp_congestion: TcpCongestion,
    /// Pipelined broadcast chunk size in bytes; 0 picks one from the message size and p.
    pub chunk_size: usize,
    /// `BroadcastAlgorithm::Auto` uses the binomial tree up to this many bytes, the chain above.
    pub broadcast_crossover: u64,
    /// The fault-tolerant chain broadcast (docs/algorithms.md, "Broadcast fault tolerance"):
    /// how many times the root restarts a chain broadcast around a link that did not deliver
    /// within the acknowledgement window before it fails; 0: off (the plain chain).
    pub broadcast_retries: u32,
    /// The fixed part of the root's wait for every receiver's acknowledgement in one attempt of
    /// the fault-tolerant chain broadcast; the message's time at 10 MB/s is added to it.
    pub broadcast_ack_window: Duration,
    /// A link fault for tests (no option: set in code only): the link between two ranks
    /// delivers nothing for a while, as a cut cable or a firewall rule that drops its packets.
    pub link_fault: Option<LinkFault>,
    /// `AllreduceAlgorithm::Auto` uses bidirectional exchange below this many bytes,
    /// regroup-allgather from it on, up to p = 8 or with racks (above, the crossover grows with p:
    /// `choose::allreduce_crossover_at`); the automatic allgather and reduce-scatter use recursive
    /// doubling below it and the ring from it on (the largest table of any worker decides).
    pub allreduce_crossover: u64,
    /// Partitions at least this large are split into p segments by the segment-based
    /// algorithms (allreduce regroup-allgather, reduce scatter-gather).
    pub segment_min_bytes: u64,
    /// Every TCP frame after the authentication carries an HMAC-SHA256 tag under a
    /// per-connection session key (docs/wire-protocol.md, "Per-frame integrity"); every worker
    /// of a job must use the same setting.
    pub frame_mac: bool,
    /// A network model file (`crate::netmodel`, text form) every worker loads at start
    /// ([`Worker::start`](crate::Worker::start)); None: no model, the network-aware
    /// algorithms fall back to rank order and the automatic choices ignore the network.
    pub net_model: Option<String>,
    /// Flow control of events: the most bytes of events (labels and payloads) this worker has
    /// sent to one peer that the peer has not yet taken; a send that would exceed it waits for
    /// the peer's credit (docs/events.md, "Flow control"). 0: no limit.
    pub event_window: u64,
    /// Whether workers started by the `harp` tool measure the network at start
    /// (`crate::calibrate`).
    pub net_measure: NetMeasure,
    /// Bytes of the timed one-way transfer per ordered worker pair.
    pub net_measure_bytes: u64,
    /// Time budget of the whole measurement (the transfers shrink to fit it).
    pub net_measure_time: Duration,
    /// Whether the iterative jobs that hold a network model measure it anew when the measured
    /// times of their collectives drift more than 20% from its predictions
    /// ([`Worker::recalibrate_on_drift`](crate::Worker::recalibrate_on_drift), checked at the
    /// end of every iteration).
    pub net_recalibrate: bool,
    /// Directory of the measurement cache (None: `$XDG_CACHE_HOME/harp` or `~/.cache/harp`).
    pub net_cache_dir: Option<String>,
    /// A cache entry older than this is measured again.
    pub net_cache_max_age: Duration,
    /// Which thread runs a TCP worker's socket reads and heartbeats
    /// ([`crate::transport::Driver`]).
    pub io_driver: IoDriver,
    pub pool: PoolConfig,
}

/// Which thread runs a TCP worker's I/O ([`Config::io_driver`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoDriver {
    /// The worker's own single-threaded runtime, driven by the thread in an operation and by a
    /// background thread between operations (no thread hand-over per received frame).
    Caller,
    /// The shared multi-threaded runtime the worker was started with.
    Threads,
}

impl IoDriver {
    pub fn name(self) -> &'static str {
        match self {
            IoDriver::Caller => "caller",
            IoDriver::Threads => "threads",
        }
    }
    pub fn parse(v: &str) -> Result<IoDriver> {
        [IoDriver::Caller, IoDriver::Threads]
            .into_iter()
            .find(|m| m.name() == v)
            .ok_or_else(|| {
                Error::config(format!(
                    "io_driver: expected caller or threads, got {}",
                    quote(v)
                ))
            })
    }
}

/// When the workers measure the network ([`Config::net_measure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetMeasure {
    /// Never at start (`Worker::calibrate` still measures on request).
    Off,
    /// Always at start.
    Start,
    /// At start unless the cache holds a young enough model for this set of hosts.
    Cached,
}

impl NetMeasure {
    pub fn name(self) -> &'static str {
        match self {
            NetMeasure::Off => "off",
            NetMeasure::Start => "start",
            NetMeasure::Cached => "cached",
        }
    }
    pub fn parse(v: &str) -> Result<NetMeasure> {
        [NetMeasure::Off, NetMeasure::Start, NetMeasure::Cached]
            .into_iter()
            .find(|m| m.name() == v)
            .ok_or_else(|| {
                Error::config(format!(
                    "net_measure: expected off, start or cached, got {}",
                    quote(v)
                ))
            })
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            connect_timeout: Duration::from_secs(60),
            op_timeout: Duration::from_secs(120),
            send_buffer: None,
            recv_buffer: None,
            tcp_congestion: TcpCongestion::Auto,
            chunk_size: 0,
            broadcast_crossover: 8 * 1024,
            broadcast_retries: 0,
            broadcast_ack_window: Duration::from_secs(2),
            link_fault: None,
            allreduce_crossover: 16 * 1024,
            segment_min_bytes: 16 * 1024,
            event_window: 16 << 20,
            frame_mac: false,
            net_model: None,
            net_measure: NetMeasure::Off,
            net_measure_bytes: 4 << 20,
            net_measure_time: Duration::from_secs(20),
            net_recalibrate: true,
            net_cache_dir: None,
            net_cache_max_age: Duration::from_secs(24 * 3600),
            io_driver: IoDriver::Caller,
            pool: PoolConfig::default(),
        }
    }
}

/// A link that stops delivering for a while ([`Config::link_fault`], tests only): once a worker
/// at one end of the link between ranks `a` and `b` has sent `after` data frames of collectives
/// over it, each of its frames to the other end waits until `stall` has passed since then.
/// Both ends hold the same value; each counts its own frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkFault {
    pub a: usize,
    pub b: usize,
    pub after: u64,
    pub stall: Duration,
}

/// The TCP congestion control of every connection (option `tcp_congestion`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TcpCongestion {
    /// `auto` (the default, also the empty value): a loss-based congestion control
    /// ([`crate::transport::auto_congestion`]) when the kernel's default is not one and the
    /// kernel allows one; else, silently (a debug line), the kernel's default. Under BBR the
    /// flows of an all-to-all share a link unfairly and the collective waits for the slowest
    /// (docs/benchmarks-netns.md).
    #[default]
    Auto,
    /// `kernel` or `default`: the kernel's default, untouched.
    Kernel,
    /// A name from `net.ipv4.tcp_allowed_congestion_control` (e.g. `reno`); a name the kernel
    /// refuses fails the worker's start with an error listing the allowed ones.
    Named(String),
}

impl TcpCongestion {
    /// The value as the option writes it.
    pub fn as_str(&self) -> &str {
        match self {
            TcpCongestion::Auto => "auto",
            TcpCongestion::Kernel => "kernel",
            TcpCongestion::Named(n) => n,
        }
    }

    /// From the option's value (`name` has checked its characters): empty or `auto`,
    /// `kernel` or `default`, or a congestion control name.
    fn from_name(name: Option<String>) -> TcpCongestion {
        match name.as_deref() {
            None | Some("auto") => TcpCongestion::Auto,
            Some("kernel" | "default") => TcpCongestion::Kernel,
            Some(n) => TcpCongestion::Named(n.to_string()),
        }
    }
}

/// The longest duration any option accepts: 365 days (a job that must never time out can use
/// it; every deadline computed from it stays far from overflowing a clock).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// The most restarts [`Config::broadcast_retries`] allows.
pub const MAX_BROADCAST_RETRIES: u32 = 16;

/// The shortest duration any option accepts.
pub const MIN_DURATION: Duration = Duration::from_millis(1);
/// The largest value any byte option ([`Unit::Bytes`]) accepts: 4 GiB. Buffers, chunks and
/// windows beyond it cannot help (a socket buffer is capped by the kernel far below), and a
/// crossover of 4 GiB already means "always the small-message algorithm".
pub const MAX_BYTES: u64 = 4 << 30;

/// The most partitions a table of a job of `workers` workers may have (the `--partitions` of
/// the applications and of `harp bench`): 65,536, or 8 per worker when there are more than
/// 8,192 workers. Every partition costs memory and a header on every message whether it holds
/// data or not, so more partitions than that only cost memory and time.
pub fn max_partitions(workers: usize) -> u64 {
    (1u64 << 16).max(8 * workers as u64)
}

/// Fails unless `partitions` (a value of option `flag`) is from 1 to [`max_partitions`] for a
/// job of `workers` workers.
pub fn check_partitions(flag: &str, partitions: u64, workers: usize) -> Result<()> {
    let max = max_partitions(workers);
    if partitions == 0 || partitions > max {
        return Err(Error::config(format!(
            "{flag} {partitions}: a table has from 1 to {max} partitions with {workers} \
             worker(s) (65536, or 8 per worker beyond 8192 workers)"
        )));
    }
    Ok(())
}

/// How an option's value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A duration: whole milliseconds for the engine and Java keys, seconds (a decimal number)
    /// for the CLI flag; from 1 ms to [`MAX_DURATION`] (365 days) in both. Anything else, `inf`
    /// and `NaN` included, is an error naming the option and the allowed range.
    Millis,
    /// A number of bytes: an integer from 0 to [`MAX_BYTES`] (4 GiB), optionally followed by
    /// `k`, `m`, `g` or `t` (KiB, MiB, GiB, TiB) as [`parse_bytes`] reads it. One rule for every
    /// byte option: a larger value is an error naming the option and the limit.
    Bytes,
    /// A name (letters, digits and `_`, shorter than 16); empty means unset.
    Name,
    /// On or off: `true` or `false` (also `1`, `0`, `yes`, `no`, `on`, `off`); the CLI flag
    /// alone means `true`.
    Switch,
    /// A file system path (no control characters); empty means unset.
    Path,
    /// A whole number (a count of times or things), from 0.
    Count,
}

impl Unit {
    /// The unit's name as the CLI shows it (`--timeout SECONDS`).
    pub fn cli_name(self) -> &'static str {
        match self {
            Unit::Millis => "SECONDS",
            Unit::Bytes => "BYTES",
            Unit::Name => "NAME",
            Unit::Switch => "BOOL",
            Unit::Path => "PATH",
            Unit::Count => "N",
        }
    }

    /// The unit's name for the engine and Java keys.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Millis => "ms",
            Unit::Bytes => "bytes",
            Unit::Name => "name",
            Unit::Switch => "boolean",
            Unit::Path => "path",
            Unit::Count => "count",
        }
    }
}

/// A parsed option value.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Time(Duration),
    Bytes(u64),
    Name(Option<String>),
    Switch(bool),
    Count(u64),
}

/// One settable engine option, named in every layer.
pub struct EngineOption {
    /// The key of [`Config::set`] and of the `key=value` lines of [`Config::apply`].
    pub key: &'static str,
    /// The CLI flag, without `--`.
    pub flag: &'static str,
    /// The Java job configuration key (also accepted by [`Config::set`]).
    pub java: &'static str,
    pub unit: Unit,
    /// What it sets; the default and the unit are shown next to it.
    pub help: &'static str,
    get: fn(&Config) -> Value,
    put: fn(&mut Config, Value) -> Result<()>,
}

/// Every engine option, in the order the CLI lists them.
pub static OPTIONS: &[EngineOption] = &[
    EngineOption {
        key: "op_timeout_ms",
        flag: "timeout",
        java: "harp.collective.timeout.ms",
        unit: Unit::Millis,
        help: "How long a worker waits for a silent peer inside a collective before failing.",
        get: |c| Value::Time(c.op_timeout),
        put: |c, v| {
            c.op_timeout = v.time();
            Ok(())
        },
    },
    EngineOption {
        key: "connect_timeout_ms",
        flag: "connect-timeout",
        java: "harp.connect.timeout.ms",
        unit: Unit::Millis,
        help: "Time allowed at start-up for every worker to join, connect and handshake.",
        get: |c| Value::Time(c.connect_timeout),
        put: |c, v| {
            c.connect_timeout = v.time();
            Ok(())
        },
    },
    EngineOption {
        key: "socket_buffer",
        flag: "socket-buffer",
        java: "harp.socket.buffer.bytes",
        unit: Unit::Bytes,
        help: "Socket send and receive buffers of every connection (0: the OS's autotuning).",
        get: |c| Value::Bytes(c.send_buffer.unwrap_or(0).into()),
        put: |c, v| {
            // MAX_BYTES is 4 GiB, one more than a u32 holds: the kernel caps the buffers at
            // net.core.wmem_max / rmem_max (a few MiB) anyway.
            let n = match v.bytes() {
                0 => None,
                n => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            };
            c.send_buffer = n;
            c.recv_buffer = n;
            Ok(())
        },
    },
    EngineOption {
        key: "chunk",
        flag: "chunk",
        java: "harp.broadcast.chunk.bytes",
        unit: Unit::Bytes,
        help: "Pipeline chunk of the chain broadcast and of the pipelined reduces (0: automatic, from the size of the table or partition).",
        get: |c| Value::Bytes(c.chunk_size as u64),
        put: |c, v| {
            c.chunk_size = usize::try_from(v.bytes())
                .map_err(|_| Error::config("broadcast chunk: too large"))?;
            Ok(())
        },
    },
    EngineOption {
        key: "broadcast_crossover",
        flag: "broadcast-crossover",
        java: "harp.broadcast.crossover.bytes",
        unit: Unit::Bytes,
        help: "Automatic broadcast uses the binomial tree up to this size, the chain above.",
        get: |c| Value::Bytes(c.broadcast_crossover),
        put: |c, v| {
            c.broadcast_crossover = v.bytes();
            Ok(())
        },
    },
    EngineOption {
        key: "broadcast_retries",
        flag: "broadcast-retries",
        java: "harp.broadcast.retries",
        unit: Unit::Count,
        help: "Chain broadcast: restarts around a link that did not deliver within the acknowledgement window before failing (0: off, the plain chain; at most 16).",
        get: |c| Value::Count(u64::from(c.broadcast_retries)),
        put: |c, v| {
            c.broadcast_retries = u32::try_from(v.count()).unwrap_or(u32::MAX);
            if c.broadcast_retries > MAX_BROADCAST_RETRIES {
                return Err(Error::config(format!(
                    "option broadcast_retries: {} is more than {MAX_BROADCAST_RETRIES}",
                    c.broadcast_retries
                )));
            }
            Ok(())
        },
    },
    EngineOption {
        key: "broadcast_ack_window_ms",
        flag: "broadcast-ack-window",
        java: "harp.broadcast.ack.window.ms",
        unit: Unit::Millis,
        help: "Fault-tolerant chain broadcast: the root's wait for every receiver's acknowledgement in one attempt, plus the message's time at 10 MB/s.",
        get: |c| Value::Time(c.broadcast_ack_window),
        put: |c, v| {
            c.broadcast_ack_window = v.time();
            Ok(())
        },
    },
    EngineOption {
        key: "allreduce_crossover",
        flag: "allreduce-crossover",
        java: "harp.allreduce.crossover.bytes",
        unit: Unit::Bytes,
        help: "Automatic allreduce uses bidirectional exchange below this size, \
               regroup-allgather from it on (up to 8 workers or with racks; above, on one \
               rack, the size grows with the ring's latencies: about 29x at 1,024 \
               workers, 93x at 4,096); automatic \
               allgather and reduce-scatter use recursive doubling below it, the ring from it on.",
        get: |c| Value::Bytes(c.allreduce_crossover),
        put: |c, v| {
            c.allreduce_crossover = v.bytes();
            Ok(())
        },
    },
    EngineOption {
        key: "tcp_congestion",
        flag: "tcp-congestion",
        java: "harp.tcp.congestion",
        unit: Unit::Name,
        help: "TCP congestion control of every connection (Linux TCP_CONGESTION): auto \
               (a loss-based one, cubic or reno, when the kernel's default is not loss-based \
               and the kernel allows one; else the kernel's), kernel (the kernel's default), or a name \
               from /proc/sys/net/ipv4/tcp_allowed_congestion_control.",
        get: |c| Value::Name(Some(c.tcp_congestion.as_str().to_string())),
        put: |c, v| {
            c.tcp_congestion = TcpCongestion::from_name(v.name());
            Ok(())
        },
    },
    EngineOption {
        key: "io_driver",
        flag: "io-driver",
        java: "harp.io.driver",
        unit: Unit::Name,
        help: "Which thread reads a worker's sockets: caller (the thread in a collective reads \
               them itself, a background thread between collectives; the fastest for small \
               messages) or threads (a shared pool of I/O threads).",
        get: |c| Value::Name(Some(c.io_driver.name().to_string())),
        put: |c, v| {
            c.io_driver = IoDriver::parse(v.name().as_deref().unwrap_or("caller"))?;
            Ok(())
        },
    },
    EngineOption {
        key: "frame_mac",
        flag: "frame-mac",
        java: "harp.frame.mac",
        unit: Unit::Switch,
        help: "Protect every frame with an HMAC-SHA256 tag (integrity and authenticity, not \
               secrecy; see docs/wire-protocol.md); every worker of a job must agree.",
        get: |c| Value::Switch(c.frame_mac),
        put: |c, v| {
            c.frame_mac = v.switch();
            Ok(())
        },
    },
    EngineOption {
        key: "net_model",
        flag: "net-model",
        java: "harp.net.model",
        unit: Unit::Path,
        help: "Network model file (latency and bandwidth of every worker pair, the text form \
               of `harp netmap --output`) loaded by every worker at start; the network-aware \
               algorithms and the automatic choices use it (docs/algorithms.md).",
        get: |c| Value::Name(c.net_model.clone()),
        put: |c, v| {
            c.net_model = v.name();
            Ok(())
        },
    },
    EngineOption {
        key: "net_measure",
        flag: "net-measure",
        java: "harp.net.measure",
        unit: Unit::Name,
        help: "Measure latency and bandwidth of every worker pair at start: off, start, or \
               cached (a cached model of the same hosts if young enough, else measure and \
               store it); docs/network-model.md.",
        get: |c| Value::Name(Some(c.net_measure.name().to_string())),
        put: |c, v| {
            c.net_measure = NetMeasure::parse(v.name().as_deref().unwrap_or("off"))?;
            Ok(())
        },
    },
    EngineOption {
        key: "event_window",
        flag: "event-window",
        java: "harp.events.window.bytes",
        unit: Unit::Bytes,
        help: "Flow control of events: the most event bytes sent to one worker and not yet \
               taken by it; a send beyond waits for it (0: no limit; one event larger than \
               the window still goes alone).",
        get: |c| Value::Bytes(c.event_window),
        put: |c, v| {
            c.event_window = v.bytes();
            Ok(())
        },
    },
    EngineOption {
        key: "net_measure_bytes",
        flag: "net-measure-bytes",
        java: "harp.net.measure.bytes",
        unit: Unit::Bytes,
        help: "Bytes of the timed one-way transfer of each ordered worker pair when measuring \
               the network (at least 64 KiB).",
        get: |c| Value::Bytes(c.net_measure_bytes),
        put: |c, v| {
            let n = v.bytes();
            if n < 64 * 1024 {
                return Err(Error::config(format!(
                    "net_measure_bytes: {n} is less than 65536"
                )));
            }
            c.net_measure_bytes = n;
            Ok(())
        },
    },
    EngineOption {
        key: "net_measure_time_ms",
        flag: "net-measure-time",
        java: "harp.net.measure.time.ms",
        unit: Unit::Millis,
        help: "Time budget of the whole network measurement; the transfers shrink to fit it.",
        get: |c| Value::Time(c.net_measure_time),
        put: |c, v| {
            c.net_measure_time = v.time();
            Ok(())
        },
    },
    EngineOption {
        key: "net_recalibrate",
        flag: "net-recalibrate",
        java: "harp.net.recalibrate",
        unit: Unit::Switch,
        help: "With a network model, the iterative jobs (K-means, PageRank, MDS, layout, N-body, \
               CG, MF-SGD, LDA, Java jobs that checkpoint) measure the network anew at the end of an \
               iteration when the measured times of the last 16 predicted collectives drift more \
               than 20% from the model (docs/network-model.md).",
        get: |c| Value::Switch(c.net_recalibrate),
        put: |c, v| {
            c.net_recalibrate = v.switch();
            Ok(())
        },
    },
    EngineOption {
        key: "net_cache_dir",
        flag: "net-cache-dir",
        java: "harp.net.cache.dir",
        unit: Unit::Path,
        help: "Directory of the network measurement cache (unset: $XDG_CACHE_HOME/harp or \
               ~/.cache/harp).",
        get: |c| Value::Name(c.net_cache_dir.clone()),
        put: |c, v| {
            c.net_cache_dir = v.name();
            Ok(())
        },
    },
    EngineOption {
        key: "net_cache_max_age_ms",
        flag: "net-cache-max-age",
        java: "harp.net.cache.max.age.ms",
        unit: Unit::Millis,
        help: "With net_measure=cached, a cached model older than this is measured again.",
        get: |c| Value::Time(c.net_cache_max_age),
        put: |c, v| {
            c.net_cache_max_age = v.time();
            Ok(())
        },
    },
];

/// Who reads a [`JAVA_ONLY`] key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// The Java API (docs/java-guide.md).
    Java,
    /// The YARN client and application master (docs/yarn.md).
    Yarn,
    /// Set by the framework for its own use, or a test seam; not for users.
    Internal,
}

/// The `harp.*` job configuration keys of the Java and YARN layers: [`Config::set`] accepts
/// and ignores them.
pub static JAVA_ONLY: &[(&str, Layer)] = &[
    ("harp.workers", Layer::Java),
    ("harp.log.level", Layer::Java),
    ("harp.worker.host", Layer::Java),
    ("harp.progress.interval.ms", Layer::Java),
    ("harp.local", Layer::Java),
    ("harp.am.host", Layer::Yarn),
    ("harp.yarn.worker.memory.mb", Layer::Yarn),
    ("harp.yarn.worker.vcores", Layer::Yarn),
    ("harp.yarn.gang.timeout.ms", Layer::Yarn),
    ("harp.yarn.workers.per.node", Layer::Yarn),
    ("harp.yarn.failure.grace.ms", Layer::Yarn),
    ("harp.yarn.am.memory.mb", Layer::Yarn),
    ("harp.yarn.am.vcores", Layer::Yarn),
    ("harp.yarn.worker.java.opts", Layer::Yarn),
    ("harp.yarn.am.max.attempts", Layer::Yarn),
    ("harp.worker.rank", Layer::Internal),
    ("harp.rendezvous.dir", Layer::Internal),
    ("harp.am.address", Layer::Internal),
    ("harp.yarn.rm.factory", Layer::Internal),
    ("harp.yarn.am.attempt", Layer::Internal),
    ("harp.example.job", Layer::Internal),
    ("harp.example.args", Layer::Internal),
];

impl Value {
    fn time(self) -> Duration {
        match self {
            Value::Time(d) => d,
            v => unreachable!("a duration option got {v:?}"),
        }
    }
    fn bytes(self) -> u64 {
        match self {
            Value::Bytes(n) => n,
            v => unreachable!("a byte option got {v:?}"),
        }
    }
    fn name(self) -> Option<String> {
        match self {
            Value::Name(n) => n,
            v => unreachable!("a name option got {v:?}"),
        }
    }
    fn count(self) -> u64 {
        match self {
            Value::Count(n) => n,
            v => unreachable!("a count option got {v:?}"),
        }
    }
    fn switch(self) -> bool {
        match self {
            Value::Switch(b) => b,
            v => unreachable!("a switch option got {v:?}"),
        }
    }
}

impl EngineOption {
    /// The row whose engine key or Java key is `key`.
    pub fn find(key: &str) -> Option<&'static EngineOption> {
        OPTIONS.iter().find(|o| o.key == key || o.java == key)
    }

    /// The row whose CLI flag (without `--`) is `flag`.
    pub fn by_flag(flag: &str) -> Option<&'static EngineOption> {
        OPTIONS.iter().find(|o| o.flag == flag)
    }

    /// The default as the engine and Java keys write it (`120000`, `8192`; empty when unset).
    pub fn default_value(&self) -> String {
        match (self.get)(&Config::default()) {
            Value::Time(d) => d.as_millis().to_string(),
            Value::Bytes(n) => n.to_string(),
            Value::Name(n) => n.unwrap_or_default(),
            Value::Switch(b) => b.to_string(),
            Value::Count(n) => n.to_string(),
        }
    }

    /// The default as the CLI flag writes it (`120` seconds), None when unset.
    pub fn default_flag_value(&self) -> Option<String> {
        match (self.get)(&Config::default()) {
            Value::Time(d) => Some(d.as_secs_f64().to_string()),
            Value::Bytes(n) => Some(n.to_string()),
            Value::Name(n) => n,
            Value::Switch(b) => Some(b.to_string()),
            Value::Count(n) => Some(n.to_string()),
        }
    }

    /// Sets this option in `cfg` from `value` written in the engine's unit (milliseconds).
    pub fn set(&self, cfg: &mut Config, value: &str) -> Result<()> {
        self.set_as(self.key, cfg, value)
    }

    /// [`EngineOption::set`], naming the option `key` (as the caller called it) in errors.
    fn set_as(&self, key: &str, cfg: &mut Config, value: &str) -> Result<()> {
        let v = match self.unit {
            Unit::Millis => Value::Time(millis(key, value)?),
            Unit::Bytes => Value::Bytes(
                parse_bytes(value)
                    .and_then(|n| match n {
                        n if n > MAX_BYTES => Err(format!(
                            "{} is more than {MAX_BYTES} bytes (4g), the most a byte option takes",
                            quote(value)
                        )),
                        n => Ok(n),
                    })
                    .map_err(|e| Error::config(format!("option {key}: {e}")))?,
            ),
            Unit::Name => name(key, value)?,
            Unit::Switch => Value::Switch(switch(key, value)?),
            Unit::Path => path(key, value)?,
            Unit::Count => Value::Count(value.trim().parse::<u64>().map_err(|_| {
                Error::config(format!(
                    "option {key}: expected a whole number, got {}",
                    quote(value)
                ))
            })?),
        };
        (self.put)(cfg, v)
    }

    /// Sets this option in `cfg` from `value` written as the CLI flag takes it (seconds, from
    /// 0.001 to [`MAX_DURATION`]).
    pub fn set_flag(&self, cfg: &mut Config, value: &str) -> Result<()> {
        match self.unit {
            Unit::Millis => {
                let max = MAX_DURATION.as_secs_f64();
                match value.trim().parse::<f64>() {
                    // Compared before converting: Duration::from_secs_f64 panics on inf,
                    // NaN and values past u64 seconds.
                    Ok(s) if s.is_finite() && s >= 0.001 && s <= max => {
                        (self.put)(cfg, Value::Time(Duration::from_secs_f64(s)))
                    }
                    _ => Err(Error::config(format!(
                        "--{}: expected a positive number of seconds from 0.001 to {max:.0} \
                         (365 days), got {}",
                        self.flag,
                        quote(value)
                    ))),
                }
            }
            _ => self.set(cfg, value),
        }
    }
}

/// A duration in whole milliseconds, from [`MIN_DURATION`] to [`MAX_DURATION`].
fn millis(key: &str, value: &str) -> Result<Duration> {
    let (min, max) = (MIN_DURATION.as_millis(), MAX_DURATION.as_millis());
    match value.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&(n as u128)) => Ok(Duration::from_millis(n)),
        _ => Err(Error::config(format!(
            "option {key}: expected an integer number of milliseconds from {min} to {max} \
             (365 days), got {}",
            quote(value)
        ))),
    }
}

/// `value` quoted for an error message, cut to its first 64 bytes when longer.
fn quote(value: &str) -> String {
    crate::util::quote(value.as_bytes())
}

/// A byte count as every byte option and `harp bench --bytes` take it: an integer, optionally
/// followed by `k`, `m`, `g` or `t` (KiB, MiB, GiB, TiB; any case, a trailing `b` or `ib`
/// allowed: `64k`, `16MiB`, `1g`). The error quotes at most the first 64 bytes of `s`.
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        Some('t') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n = num
        .parse::<u64>()
        .map_err(|_| format!("{} is not a byte count (e.g. 1024, 64k, 16m)", quote(s)))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{} bytes is more than 2^64", quote(s)))
}

fn switch(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::config(format!(
            "option {key}: expected true or false, got {}",
            quote(value)
        ))),
    }
}

fn path(key: &str, value: &str) -> Result<Value> {
    match value.trim() {
        "" => Ok(Value::Name(None)),
        v if v.len() <= 4096 && !v.chars().any(char::is_control) => {
            Ok(Value::Name(Some(v.to_string())))
        }
        v => Err(Error::config(format!(
            "option {key}: {} is not a path (at most 4096 bytes, no control characters)",
            quote(v)
        ))),
    }
}

fn name(key: &str, value: &str) -> Result<Value> {
    match value.trim() {
        "" => Ok(Value::Name(None)),
        v if v.len() < 16 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
            Ok(Value::Name(Some(v.to_string())))
        }
        v => Err(Error::config(format!(
            "option {key}: {} is not a congestion control name",
            quote(v)
        ))),
    }
}

/// A file path: unset when empty; no line breaks or NUL (it travels in `key=value` lines).
impl Config {
    /// Fails when a duration set directly in the struct is outside what the options accept
    /// ([`MIN_DURATION`] to [`MAX_DURATION`]): a deadline `now + Duration::MAX` would panic.
    /// Every worker constructor calls it.
    pub fn check(&self) -> Result<()> {
        for o in OPTIONS {
            if let Value::Time(d) = (o.get)(self) {
                if !(MIN_DURATION..=MAX_DURATION).contains(&d) {
                    return Err(Error::config(format!(
                        "option {} (--{}): {d:?} is outside 1 ms to 365 days",
                        o.key, o.flag
                    )));
                }
            }
        }
        Ok(())
    }

    /// Applies `key=value` lines (blank lines and `#` comments ignored), the form in which the
    /// Java side passes its `harp.*` job configuration. Each key goes to [`Config::set`].
    pub fn apply(&mut self, text: &str) -> Result<()> {
        for (no, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line.split_once('=').ok_or_else(|| {
                Error::config(format!(
                    "option line {}: expected key=value, got {}",
                    no + 1,
                    quote(line)
                ))
            })?;
            self.set(key.trim(), value.trim())?;
        }
        Ok(())
    }

    /// Sets one option by its engine key or Java key ([`OPTIONS`]), in the engine's unit.
    /// The Java and YARN layers' keys ([`JAVA_ONLY`]) and the applications' ([`apps`]) are
    /// ignored; any other `harp.*` key is ignored with a warning (it may be an application's
    /// own key, or a misspelling); any other key is an error.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        if let Some(o) = EngineOption::find(key) {
            return o.set_as(key, self, value);
        }
        if JAVA_ONLY.iter().any(|(k, _)| *k == key) || apps::find_java(key).is_some() {
            return Ok(());
        }
        if key.starts_with("harp.") {
            tracing::warn!("ignoring job configuration key {key}: not a Harp-RS option");
            return Ok(());
        }
        let known: Vec<&str> = OPTIONS.iter().map(|o| o.key).collect();
        Err(Error::config(format!(
            "unknown option {} (known: {})",
            quote(key),
            known.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes(" 64k "), Ok(64 << 10));
        assert_eq!(parse_bytes("16MiB"), Ok(16 << 20));
        assert_eq!(parse_bytes("1g"), Ok(1 << 30));
        assert_eq!(parse_bytes("2TB"), Ok(2 << 40));
        for bad in ["lots", "", "k", "-1", "1.5m", "1 m", "1x"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        let e = parse_bytes("99999999999g").unwrap_err();
        assert!(e.contains("more than 2^64"), "{e}");
        let e = parse_bytes(&"7".repeat(100_000)).unwrap_err();
        assert!(e.len() < 200, "{e}");
    }

    #[test]
    fn options_apply_and_reject() {
        let mut c = Config::default();
        c.apply("# comment\nsocket_buffer = 262144\n\ntcp_congestion=reno\nallreduce_crossover=0\nop_timeout_ms=1500")
            .unwrap();
        assert_eq!(c.send_buffer, Some(262144));
        assert_eq!(c.recv_buffer, Some(262144));
        assert_eq!(c.tcp_congestion, TcpCongestion::Named("reno".into()));
        assert_eq!(c.allreduce_crossover, 0);
        assert_eq!(c.op_timeout, Duration::from_millis(1500));
        let e = c.apply("chunk=-1").unwrap_err().to_string();
        assert!(e.contains("chunk") && e.contains("-1"), "{e}");
        c.apply("event_window=64k\nchunk=1MiB\nsocket_buffer=2m")
            .unwrap();
        assert_eq!(c.event_window, 64 << 10);
        assert_eq!(c.chunk_size, 1 << 20);
        assert_eq!(c.send_buffer, Some(2 << 20));
        let e = c.apply("event_window=1.5m").unwrap_err().to_string();
        assert!(
            e.contains("event_window") && e.contains("not a byte count"),
            "{e}"
        );
        let e = c.apply("socket_buffer=8g").unwrap_err().to_string();
        assert!(e.contains("more than 4294967296 bytes (4g)"), "{e}");
        let e = c.apply("x=1").unwrap_err().to_string();
        assert!(e.contains("unknown option 'x'"), "{e}");
        let e = c.apply("ok\nnot a pair").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        let e = c.apply("tcp_congestion=re no").unwrap_err().to_string();
        assert!(e.contains("not a congestion control"), "{e}");
        let e = c.apply("op_timeout_ms=0").unwrap_err().to_string();
        assert!(e.contains("from 1 to 31536000000"), "{e}");
    }

    /// Every duration, as a flag (seconds) or a key (milliseconds), is refused outside 1 ms to
    /// 365 days with the allowed range, never a panic; the bounds themselves are accepted.
    #[test]
    fn durations_are_bounded_in_every_layer() {
        for o in OPTIONS.iter().filter(|o| o.unit == Unit::Millis) {
            let mut c = Config::default();
            for bad in [
                "inf",
                "-inf",
                "NaN",
                "1e300",
                "1e19",
                "31536000.001",
                "0.0009",
                "0",
                "-1",
                "",
                "1e-300",
            ] {
                let e = o.set_flag(&mut c, bad).unwrap_err().to_string();
                assert!(
                    e.contains(&format!("--{}", o.flag)) && e.contains("from 0.001 to 31536000"),
                    "{bad}: {e}"
                );
            }
            for bad in [
                "18446744073709551615",
                "31536000001",
                "1e300",
                "inf",
                "0",
                "-5",
                "9".repeat(500).as_str(),
            ] {
                for key in [o.key, o.java] {
                    let e = c.set(key, bad).unwrap_err().to_string();
                    assert!(
                        e.contains(&format!("option {key}")) && e.contains("from 1 to 31536000000"),
                        "{bad}: {e}"
                    );
                    assert!(e.len() < 300, "the value is quoted in short: {e}");
                }
            }
            // The bounds are accepted, in both units.
            o.set_flag(&mut c, "31536000").unwrap();
            assert_eq!((o.get)(&c), Value::Time(MAX_DURATION), "{}", o.key);
            o.set_flag(&mut c, "0.001").unwrap();
            assert_eq!((o.get)(&c), Value::Time(MIN_DURATION), "{}", o.key);
            c.set(o.java, "31536000000").unwrap();
            assert_eq!((o.get)(&c), Value::Time(MAX_DURATION), "{}", o.key);
            c.set(o.key, "1").unwrap();
            assert_eq!((o.get)(&c), Value::Time(MIN_DURATION), "{}", o.key);
        }
    }

    #[test]
    fn java_keys_set_the_same_options_and_layer_keys_are_ignored() {
        let mut c = Config::default();
        c.apply(
            "harp.collective.timeout.ms=2500\nharp.connect.timeout.ms=700\n\
             harp.socket.buffer.bytes=65536\nharp.tcp.congestion=cubic\n\
             harp.broadcast.chunk.bytes=4096\nharp.broadcast.crossover.bytes=1\n\
             harp.allreduce.crossover.bytes=2\nharp.workers=4\nharp.yarn.worker.java.opts=-Xmx1g -Da=b\n\
             harp.some.app.key=x",
        )
        .unwrap();
        assert_eq!(c.op_timeout, Duration::from_millis(2500));
        assert_eq!(c.connect_timeout, Duration::from_millis(700));
        assert_eq!(c.send_buffer, Some(65536));
        assert_eq!(c.tcp_congestion, TcpCongestion::Named("cubic".into()));
        assert_eq!(c.chunk_size, 4096);
        assert_eq!(c.broadcast_crossover, 1);
        assert_eq!(c.allreduce_crossover, 2);
        let e = c
            .apply("harp.collective.timeout.ms=soon")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("option harp.collective.timeout.ms") && e.contains("soon"),
            "{e}"
        );
        // Unset again: 0 buffers and an empty congestion name are the defaults.
        c.apply("socket_buffer=0\ntcp_congestion=").unwrap();
        assert_eq!(
            (c.send_buffer, c.tcp_congestion.clone()),
            (None, TcpCongestion::Auto)
        );
        // One vocabulary: auto (the default), kernel or default, or a name.
        for (v, want) in [
            ("auto", TcpCongestion::Auto),
            ("kernel", TcpCongestion::Kernel),
            (" default ", TcpCongestion::Kernel),
            ("bbr", TcpCongestion::Named("bbr".into())),
        ] {
            c.apply(&format!("tcp_congestion={v}")).unwrap();
            assert_eq!(c.tcp_congestion, want, "{v}");
        }
        assert_eq!(Config::default().tcp_congestion, TcpCongestion::Auto);
        let o = EngineOption::find("harp.tcp.congestion").unwrap();
        assert_eq!(o.default_value(), "auto");
    }

    #[test]
    fn every_row_is_named_once_in_every_layer_and_its_default_round_trips() {
        // Config::set looks keys up among engine and Java keys; flags are their own namespace.
        let mut seen = std::collections::HashSet::new();
        let mut flags = std::collections::HashSet::new();
        for o in OPTIONS {
            assert!(flags.insert(o.flag), "--{} named twice", o.flag);
            for name in [o.key, o.java] {
                assert!(seen.insert(name), "{name} named twice");
            }
            assert!(o.java.starts_with("harp."), "{}", o.java);
            assert!(!JAVA_ONLY.iter().any(|(k, _)| *k == o.java), "{}", o.java);
            // Setting the default (in either unit) changes nothing.
            let mut c = Config::default();
            o.set(&mut c, &o.default_value()).unwrap();
            if let Some(v) = o.default_flag_value() {
                o.set_flag(&mut c, &v).unwrap();
            }
            assert_eq!((o.get)(&c), (o.get)(&Config::default()), "{}", o.key);
        }
        for (k, _) in JAVA_ONLY {
            assert!(seen.insert(k) && k.starts_with("harp."), "{k}");
        }
    }

    /// One rule for every byte option, in every layer: 0 to 4 GiB, a larger value refused
    /// naming the option (`--chunk 100t` and `--event-window 100t` were accepted where
    /// `--socket-buffer 100t` was refused).
    #[test]
    fn every_byte_option_takes_up_to_4_gib() {
        let bytes: Vec<_> = OPTIONS.iter().filter(|o| o.unit == Unit::Bytes).collect();
        assert!(bytes.len() >= 6);
        for o in bytes {
            let mut c = Config::default();
            for bad in ["100t", "4294967297", "5g"] {
                for e in [
                    o.set_flag(&mut c, bad).unwrap_err().to_string(),
                    c.set(o.java, bad).unwrap_err().to_string(),
                ] {
                    assert!(
                        e.contains("more than 4294967296 bytes (4g)") && e.contains(bad),
                        "{}: {e}",
                        o.key
                    );
                }
            }
            o.set_flag(&mut c, "4g").unwrap();
            assert!(
                matches!((o.get)(&c), Value::Bytes(n) if n >= u32::MAX as u64),
                "{}",
                o.key
            );
        }
    }

    #[test]
    fn partitions_are_bounded_by_one_rule() {
        assert_eq!(max_partitions(1), 65536);
        assert_eq!(max_partitions(8192), 65536);
        assert_eq!(max_partitions(10_000), 80_000);
        check_partitions("--partitions", 65536, 2).unwrap();
        check_partitions("--partitions", 1, 1).unwrap();
        for bad in [0, 65537, 100_000_000] {
            let e = check_partitions("--partitions", bad, 2)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("--partitions {bad}: a table has from 1 to 65536")),
                "{e}"
            );
        }
    }

    #[test]
    fn flags_take_seconds_and_engine_keys_milliseconds() {
        let t = EngineOption::by_flag("timeout").unwrap();
        assert_eq!(t.default_value(), "120000");
        assert_eq!(t.default_flag_value().as_deref(), Some("120"));
        let mut c = Config::default();
        t.set_flag(&mut c, "0.25").unwrap();
        assert_eq!(c.op_timeout, Duration::from_millis(250));
        for bad in ["0", "-1", "x", "inf", "1e300", "1e19"] {
            let e = t.set_flag(&mut c, bad).unwrap_err().to_string();
            assert!(e.contains("--timeout") && e.contains("seconds"), "{e}");
        }
        let s = EngineOption::by_flag("socket-buffer").unwrap();
        s.set_flag(&mut c, "1024").unwrap();
        assert_eq!(c.recv_buffer, Some(1024));
        let e = s.set_flag(&mut c, "8589934592").unwrap_err().to_string();
        assert!(e.contains("more than 4294967296 bytes"), "{e}");
        assert_eq!(
            EngineOption::by_flag("tcp-congestion")
                .unwrap()
                .default_flag_value()
                .as_deref(),
            Some("auto")
        );
    }

    #[test]
    fn net_model_is_a_path_in_every_layer() {
        let o = EngineOption::by_flag("net-model").unwrap();
        assert_eq!(
            (o.key, o.java, o.unit),
            ("net_model", "harp.net.model", Unit::Path)
        );
        let mut c = Config::default();
        c.set("harp.net.model", " /data/net model.txt ").unwrap();
        assert_eq!(c.net_model.as_deref(), Some("/data/net model.txt"));
        o.set_flag(&mut c, "").unwrap();
        assert_eq!(c.net_model, None);
        let e = c.set("net_model", "a\nb").unwrap_err().to_string();
        assert!(
            e.contains("net_model") && e.contains("is not a path"),
            "{e}"
        );
    }

    #[test]
    fn frame_mac_is_a_switch_in_every_layer() {
        let o = EngineOption::by_flag("frame-mac").unwrap();
        assert_eq!(o.default_value(), "false");
        assert!(!Config::default().frame_mac);
        let mut c = Config::default();
        c.apply("harp.frame.mac=true").unwrap();
        assert!(c.frame_mac);
        c.apply("frame_mac = off").unwrap();
        assert!(!c.frame_mac);
        o.set_flag(&mut c, "TRUE").unwrap();
        assert!(c.frame_mac);
        for bad in ["", "maybe", "2", "truee"] {
            let e = c.set("harp.frame.mac", bad).unwrap_err().to_string();
            assert!(
                e.contains("option harp.frame.mac: expected true or false"),
                "{bad}: {e}"
            );
        }
        assert!(c.frame_mac, "a refused value changes nothing");
    }
}
