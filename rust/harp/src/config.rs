//! Worker configuration: timeouts, socket buffers, pipelining, pool limits, algorithm overrides.

use std::time::Duration;

use crate::pool::PoolConfig;

#[derive(Debug, Clone)]
pub struct Config {
    /// Time allowed for connecting to every peer and completing the start-up handshake.
    pub connect_timeout: Duration,
    /// Longest silence tolerated from a peer inside a collective (and for one socket write).
    pub op_timeout: Duration,
    /// SO_SNDBUF / SO_RCVBUF for every connection (None: the OS default with autotuning).
    pub send_buffer: Option<u32>,
    pub recv_buffer: Option<u32>,
    /// Pipelined broadcast chunk size in bytes; 0 picks one from the message size and p.
    pub chunk_size: usize,
    /// `BroadcastAlgorithm::Auto` uses the binomial tree up to this many bytes, the chain above.
    pub broadcast_crossover: u64,
    /// Allreduce switches from bidirectional exchange to regroup-allgather at this many bytes;
    /// 0 uses the measured default for the number of workers (`allreduce::default_crossover`).
    pub allreduce_crossover: u64,
    /// Partitions at least this large are split into p segments by the segment-based
    /// algorithms (allreduce regroup-allgather, reduce scatter-gather).
    pub segment_min_bytes: u64,
    pub pool: PoolConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            connect_timeout: Duration::from_secs(60),
            op_timeout: Duration::from_secs(120),
            send_buffer: None,
            recv_buffer: None,
            chunk_size: 0,
            broadcast_crossover: 16 * 1024,
            allreduce_crossover: 0,
            segment_min_bytes: 16 * 1024,
            pool: PoolConfig::default(),
        }
    }
}
