//! One error type for the whole engine. Every message says which worker (rank) saw the problem
//! and, for communication errors, which operation and which peer were involved.

use std::fmt;

/// Result alias used across the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a communication error happened: the collective, its sequence number (per job, or per
/// group for a group's operation), the caller's label and the group's members (world ranks in
/// group-rank order), if it ran in a sub-group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpContext {
    pub rank: usize,
    pub op: &'static str,
    pub seq: u64,
    pub label: String,
    pub group: Option<std::sync::Arc<[usize]>>,
}

impl OpContext {
    /// The context of operation `seq` (`op` by its name) labelled `label` on worker `rank`,
    /// in the group of world ranks `group` (`None`: the whole job).
    pub fn new(
        rank: usize,
        op: &'static str,
        seq: u64,
        label: &str,
        group: Option<std::sync::Arc<[usize]>>,
    ) -> OpContext {
        OpContext {
            rank,
            op,
            seq,
            label: label.to_string(),
            group,
        }
    }
}

impl fmt::Display for OpContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}: {} #{} '{}'",
            self.rank, self.op, self.seq, self.label
        )?;
        if let Some(g) = &self.group {
            write!(f, " in group {g:?}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A live peer did not send what this operation needs within the configured timeout.
    /// `hint`: empty, or what else this worker received meanwhile that may explain it
    /// (starting with "; ").
    #[error("{ctx}: timed out after {secs:.1} s waiting for rank {peer} (it is alive but did not send; it may be stuck outside the collectives or waiting for another worker){hint}")]
    Timeout {
        ctx: OpContext,
        peer: usize,
        secs: f64,
        hint: String,
    },
    /// A send to a peer made no progress within the timeout: the peer is not taking data (kind
    /// `timeout`, like a receive that waited too long).
    #[error("{ctx}: could not send to rank {peer} for {secs:.1} s: it is not taking data (stopped, hung or its network is cut)")]
    SendTimeout {
        ctx: OpContext,
        peer: usize,
        secs: f64,
    },
    /// A receiver took none of the events this worker sent it for the whole timeout while this
    /// worker's event window to it was full (kind `timeout`; docs/events.md, *Flow control*).
    #[error("{ctx}: rank {peer} has not taken the events this worker sent it for {secs:.1} s (the {window}-byte event window to it is full): it is busy, stuck or not taking events")]
    EventCredit {
        ctx: OpContext,
        peer: usize,
        secs: f64,
        window: u64,
    },
    /// A peer sent nothing at all (not even heartbeats) for half the timeout.
    #[error("{ctx}: rank {peer} has been silent for {secs:.1} s (no data, no heartbeat): it is hung, stopped or cut off")]
    Silent {
        ctx: OpContext,
        peer: usize,
        secs: f64,
    },
    /// A peer's connection broke (it died, was killed or left the job).
    #[error("{ctx}: rank {peer} is gone: {reason}")]
    PeerLost {
        ctx: OpContext,
        peer: usize,
        reason: String,
    },
    /// Two workers called different collectives (or algorithms, or combiners) at the same
    /// position. `sides`: what the peer runs there and what this worker runs, as
    /// `allreduce (algorithm 0, combiner max) at this position, this worker allreduce (…)`.
    #[error("{ctx}: operation mismatch: rank {peer} is running {sides} (every worker must call the same collectives in the same order, with the same root and algorithm and, where partitions are combined, tables with the same combiner)")]
    OpMismatch {
        ctx: OpContext,
        peer: usize,
        sides: String,
    },
    /// The worker failed earlier and can no longer take part in collectives.
    #[error("rank {rank}: worker is unusable after an earlier failure: {first}")]
    Poisoned { rank: usize, first: String },
    /// Malformed bytes on the wire or a failed handshake.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Cluster start-up failed (connect, authentication, handshake).
    #[error("rank {rank}: start-up failed: {msg}")]
    Startup { rank: usize, msg: String },
    /// Malformed input data: the file and 1-based line (or record) are named.
    #[error("{file}:{line}: {msg}")]
    Input {
        file: String,
        line: u64,
        msg: String,
    },
    /// Two partitions could not be combined, or a table operation was invalid.
    #[error("{0}")]
    Data(String),
    /// A [`Error::Data`] inside a collective (kind `data`), with where it happened.
    #[error("{ctx}: {msg}")]
    DataIn { ctx: OpContext, msg: String },
    /// Bad arguments or configuration.
    #[error("{0}")]
    Config(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl Error {
    /// Every name [`Error::kind`] can return (the vocabulary mirrored by Java's
    /// `HarpException.Kind`).
    pub const KINDS: [&'static str; 11] = [
        "timeout",
        "silent",
        "peer-lost",
        "op-mismatch",
        "poisoned",
        "protocol",
        "startup",
        "input",
        "data",
        "config",
        "io",
    ];

    /// The stable name of this error's kind, shared with Java (`HarpException.Kind`) and the
    /// docs: `timeout`, `silent`, `peer-lost`, `op-mismatch`, `poisoned`, `protocol`,
    /// `startup`, `input`, `data`, `config`, `io`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Timeout { .. } | Error::SendTimeout { .. } | Error::EventCredit { .. } => {
                "timeout"
            }
            Error::Silent { .. } => "silent",
            Error::PeerLost { .. } => "peer-lost",
            Error::OpMismatch { .. } => "op-mismatch",
            Error::Poisoned { .. } => "poisoned",
            Error::Protocol(_) => "protocol",
            Error::Startup { .. } => "startup",
            Error::Input { .. } => "input",
            Error::Data(_) | Error::DataIn { .. } => "data",
            Error::Config(_) => "config",
            Error::Io { .. } => "io",
        }
    }

    /// The operation context of a communication error (rank, collective, sequence, label).
    pub fn op_context(&self) -> Option<&OpContext> {
        match self {
            Error::Timeout { ctx, .. }
            | Error::SendTimeout { ctx, .. }
            | Error::EventCredit { ctx, .. }
            | Error::Silent { ctx, .. }
            | Error::PeerLost { ctx, .. }
            | Error::OpMismatch { ctx, .. }
            | Error::DataIn { ctx, .. } => Some(ctx),
            _ => None,
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
    pub fn data(msg: impl Into<String>) -> Self {
        Error::Data(msg.into())
    }
    pub fn config(msg: impl Into<String>) -> Self {
        Error::Config(msg.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> OpContext {
        OpContext {
            rank: 2,
            op: "allreduce",
            seq: 7,
            label: "sums".into(),
            group: None,
        }
    }

    #[test]
    fn every_kind_is_listed_once_and_every_listed_kind_is_reachable() {
        let all = [
            Error::Timeout {
                ctx: ctx(),
                peer: 1,
                secs: 1.0,
                hint: String::new(),
            },
            Error::Silent {
                ctx: ctx(),
                peer: 1,
                secs: 1.0,
            },
            Error::PeerLost {
                ctx: ctx(),
                peer: 1,
                reason: "gone".into(),
            },
            Error::OpMismatch {
                ctx: ctx(),
                peer: 1,
                sides: "barrier at this position, this worker allreduce".into(),
            },
            Error::Poisoned {
                rank: 1,
                first: "x".into(),
            },
            Error::Protocol("x".into()),
            Error::Startup {
                rank: 1,
                msg: "x".into(),
            },
            Error::Input {
                file: "f".into(),
                line: 1,
                msg: "x".into(),
            },
            Error::data("x"),
            Error::config("x"),
            Error::io("x", std::io::Error::other("y")),
        ];
        let kinds: Vec<&str> = all.iter().map(Error::kind).collect();
        assert_eq!(kinds, Error::KINDS);
        assert_eq!(all[2].op_context(), Some(&ctx()));
        assert_eq!(all[4].op_context(), None);
    }
}
