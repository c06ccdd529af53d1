//! The three-step start-up handshake of the Harp paper: the master (rank 0) pings every worker,
//! each answers, then the master tells everyone the job is initialised.

use std::time::Duration;

use super::Transport;
use crate::error::{Error, Result};
use crate::wire::Op;

#[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
enum Handshake {
    Ping { workers: u32 },
    Pong { rank: u32 },
    Initialized,
}

/// Ping → answer → initialised, driven by the master; every wait of the master is bounded by
/// `timeout` (the connect timeout), every wait of a worker by twice that: the master bounds the
/// start-up and, when a worker is missing, tells the connected ones who it is, which must reach
/// them before their own wait ends (a dead or silent master is noticed sooner, by its closed
/// connection or its missing heartbeats).
pub(super) async fn run(t: &Transport, timeout: Duration) -> Result<()> {
    let timeout = if t.rank == 0 { timeout } else { timeout * 2 };
    let comm = t
        .endpoint(Op::Handshake, 0, 0, "start-up")
        .with_timeout(timeout);
    let (rank, size) = (t.rank, t.size);
    if rank == 0 {
        for peer in 1..size {
            let ping = Handshake::Ping {
                workers: size as u32,
            };
            comm.send_ctrl(peer, 0, &ping).await?;
        }
        for peer in 1..size {
            let pong: Handshake = comm.recv_ctrl(peer, 1).await?;
            if pong != (Handshake::Pong { rank: peer as u32 }) {
                return Err(Error::Startup {
                    rank: 0,
                    msg: format!("rank {peer} answered {pong:?}"),
                });
            }
        }
        for peer in 1..size {
            comm.send_ctrl(peer, 2, &Handshake::Initialized).await?;
        }
        return Ok(());
    }
    let ping: Handshake = comm.recv_ctrl(0, 0).await?;
    if ping
        != (Handshake::Ping {
            workers: size as u32,
        })
    {
        return Err(Error::Startup {
            rank,
            msg: format!("master sent {ping:?}, but this worker's host list has {size} workers"),
        });
    }
    comm.send_ctrl(0, 1, &Handshake::Pong { rank: rank as u32 })
        .await?;
    let init: Handshake = comm.recv_ctrl(0, 2).await?;
    if init != Handshake::Initialized {
        return Err(Error::Startup {
            rank,
            msg: format!("master sent {init:?}"),
        });
    }
    Ok(())
}
