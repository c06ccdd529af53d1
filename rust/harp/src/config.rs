//! Worker configuration: timeouts, socket buffers, pipelining, pool limits, algorithm overrides.

use std::time::Duration;

use crate::error::{Error, Result};
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
    /// TCP congestion control for every connection (Linux `TCP_CONGESTION`, e.g. "reno",
    /// "cubic", "bbr"); None keeps the system default. The name must be in
    /// `net.ipv4.tcp_allowed_congestion_control`.
    pub tcp_congestion: Option<String>,
    /// Pipelined broadcast chunk size in bytes; 0 picks one from the message size and p.
    pub chunk_size: usize,
    /// `BroadcastAlgorithm::Auto` uses the binomial tree up to this many bytes, the chain above.
    pub broadcast_crossover: u64,
    /// `AllreduceAlgorithm::Auto` uses bidirectional exchange below this many bytes,
    /// regroup-allgather from it on.
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
            tcp_congestion: None,
            chunk_size: 0,
            broadcast_crossover: 8 * 1024,
            allreduce_crossover: 16 * 1024,
            segment_min_bytes: 16 * 1024,
            pool: PoolConfig::default(),
        }
    }
}

impl Config {
    /// Applies `key=value` lines (blank lines and `#` comments ignored), the form in which the
    /// Java side passes its `harp.*` job configuration. Keys: `op_timeout_ms`,
    /// `connect_timeout_ms`, `socket_buffer` (bytes, both directions), `tcp_congestion`,
    /// `chunk`, `broadcast_crossover`, `allreduce_crossover` (bytes).
    pub fn apply(&mut self, text: &str) -> Result<()> {
        for (no, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line.split_once('=').ok_or_else(|| {
                Error::config(format!(
                    "option line {}: expected key=value, got {line:?}",
                    no + 1
                ))
            })?;
            self.set(key.trim(), value.trim())?;
        }
        Ok(())
    }

    /// Sets one option by name (see [`Config::apply`]).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let num = |min: u64| -> Result<u64> {
            match value.parse::<u64>() {
                Ok(n) if n >= min => Ok(n),
                _ => Err(Error::config(format!(
                    "option {key}: expected an integer >= {min}, got {value:?}"
                ))),
            }
        };
        match key {
            "op_timeout_ms" => self.op_timeout = Duration::from_millis(num(1)?),
            "connect_timeout_ms" => self.connect_timeout = Duration::from_millis(num(1)?),
            "socket_buffer" => {
                let n = num(0)?;
                let n = if n == 0 {
                    None
                } else {
                    Some(u32::try_from(n).map_err(|_| {
                        Error::config(format!("option {key}: {n} is too large"))
                    })?)
                };
                self.send_buffer = n;
                self.recv_buffer = n;
            }
            "tcp_congestion" => {
                self.tcp_congestion = match value {
                    "" => None,
                    v if v.len() < 16 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
                        Some(v.to_string())
                    }
                    v => {
                        return Err(Error::config(format!(
                            "option {key}: {v:?} is not a congestion control name"
                        )))
                    }
                }
            }
            "chunk" => self.chunk_size = num(0)? as usize,
            "broadcast_crossover" => self.broadcast_crossover = num(0)?,
            "allreduce_crossover" => self.allreduce_crossover = num(0)?,
            _ => {
                return Err(Error::config(format!(
                    "unknown option {key:?} (known: op_timeout_ms, connect_timeout_ms, \
                     socket_buffer, tcp_congestion, chunk, broadcast_crossover, allreduce_crossover)"
                )))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_apply_and_reject() {
        let mut c = Config::default();
        c.apply("# comment\nsocket_buffer = 262144\n\ntcp_congestion=reno\nallreduce_crossover=0\nop_timeout_ms=1500")
            .unwrap();
        assert_eq!(c.send_buffer, Some(262144));
        assert_eq!(c.recv_buffer, Some(262144));
        assert_eq!(c.tcp_congestion.as_deref(), Some("reno"));
        assert_eq!(c.allreduce_crossover, 0);
        assert_eq!(c.op_timeout, Duration::from_millis(1500));
        let e = c.apply("chunk=-1").unwrap_err().to_string();
        assert!(e.contains("chunk") && e.contains("-1"), "{e}");
        let e = c.apply("x=1").unwrap_err().to_string();
        assert!(e.contains("unknown option \"x\""), "{e}");
        let e = c.apply("ok\nnot a pair").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        let e = c.apply("tcp_congestion=re no").unwrap_err().to_string();
        assert!(e.contains("not a congestion control"), "{e}");
        let e = c.apply("op_timeout_ms=0").unwrap_err().to_string();
        assert!(e.contains(">= 1"), "{e}");
    }
}
