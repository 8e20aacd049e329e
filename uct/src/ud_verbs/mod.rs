//! `ud_verbs`: active messages over unreliable-datagram queue pairs, through libibverbs, made
//! reliable by the transport itself, as UCX's ud.
//!
//! - **Devices and memory domain** are rc_verbs' (`<ibdev>:<port>`, one protection domain per
//!   device, [`RcVerbsMd`]); ud_verbs registers only its own buffers.
//! - **Interface** ([`UdVerbsIface`]): one UD queue pair (its QPN is the interface address),
//!   send and receive CQs on one completion channel (the event fd), a registered pool of send
//!   buffers and one of receive buffers (each a 40-byte GRH plus one path MTU).
//! - **Endpoints** ([`UdVerbsEp`]) connect to an interface address (CONNECT_TO_IFACE): an
//!   address handle made from the peer's GID, then a connection request (`Creq`) that the peer
//!   answers with its endpoint id. The n-th endpoint of interface A towards B pairs with the
//!   n-th of B towards A (`conn_sn`, as UCX's ud): a request that finds no such endpoint makes
//!   an internal one, which B's next `ep_create_connected` towards A adopts. The two paired
//!   endpoints carry each other's acknowledgements, so a ping-pong sends no extra datagram.
//!   Until the answer arrives, sends give `NoResource` (queue them with `pending_add`).
//! - **Reliability** ([`proto`]): every active message is one datagram with a 16-bit sequence
//!   number, kept in its send buffer until acknowledged (cumulative acknowledgements ride on
//!   every datagram; a receiver acknowledges on its own when asked, after a quarter window, or
//!   after `state::ACK_DELAY`); go-back-N: duplicates and datagrams after a gap are dropped
//!   and answered (a NAK makes the sender resend at once); a timeout (`RUCX_UD_RTO`, doubling
//!   up to `state::RTO_MAX`) resends everything unacknowledged, and after
//!   `RUCX_UD_RETRY_COUNT` timeouts in a row, once the peer has also acknowledged nothing for
//!   `RUCX_UD_TIMEOUT` (30 s, as UCX's), the endpoint fails with `PeerFailure`
//!   (ERRHANDLE_PEER_FAILURE). Delivery is once and in order per endpoint pair.
//! - **Memory per peer is fixed**: an endpoint holds an address handle, a window of
//!   `state::TX_WINDOW` entries allocated when it is created and never grown, and its
//!   receive state (a few words); buffers come from the interface's pools.
//! - **Faults on purpose**: `RUCX_UD_FAULT_DROP=P[,seed=N]` drops a share `P` of the received
//!   datagrams before they are looked at, as a lossy network would (the loss tests use it).
//! - Active messages: `am_short` (header and payload up to `state::MAX_SHORT`) and `am_bcopy`
//!   (one path MTU minus the header); no zero-copy, RMA or atomics, as UCX's ud_verbs.

mod ep;
mod iface;
pub mod proto;
mod state;
pub mod wire;

pub use ep::UdVerbsEp;
pub use iface::UdVerbsIface;

use crate::caps::TlRoles;
use crate::rc_verbs::{uint_var, RcVerbs, RcVerbsMd};
use crate::transport::{DeviceInfo, Transport};
use crate::IfaceParams;
use std::time::Duration;
use ucs::config::ConfigVar;
use ucs::{Error, Result};

/// The ud_verbs transport.
pub struct UdVerbs;

/// `RUCX_UD_TX_QUEUE_LEN`: send queue depth of the interface's QP.
pub const TX_QUEUE_LEN: ConfigVar = ConfigVar {
    name: "UD_TX_QUEUE_LEN",
    default: "256",
    doc: "send work requests outstanding on a ud_verbs interface",
};
/// `RUCX_UD_RX_QUEUE_LEN`: receive buffers posted on the interface's QP.
pub const RX_QUEUE_LEN: ConfigVar = ConfigVar {
    name: "UD_RX_QUEUE_LEN",
    default: "512",
    doc: "receive buffers of a ud_verbs interface (datagrams beyond them are lost and resent)",
};
/// `RUCX_UD_TX_BUFS`: send buffers per interface (unacknowledged datagrams of all endpoints).
pub const TX_BUFS: ConfigVar = ConfigVar {
    name: "UD_TX_BUFS",
    default: "1024",
    doc: "send buffers of a ud_verbs interface, held until their datagram is acknowledged",
};
/// `RUCX_UD_RTO`: first retransmission timeout.
pub const RTO: ConfigVar = ConfigVar {
    name: "UD_RTO",
    default: "20ms",
    doc: "ud_verbs retransmission timeout (doubles on each retry up to 1s)",
};
/// `RUCX_UD_RETRY_COUNT`: timeouts in a row before the peer is declared failed.
pub const RETRY_COUNT: ConfigVar = ConfigVar {
    name: "UD_RETRY_COUNT",
    default: "10",
    doc: "ud_verbs retransmissions without an acknowledgement before the endpoint fails",
};
/// `RUCX_UD_TIMEOUT`: UCX's `UCX_UD_TIMEOUT` (30 s there too): the shortest silence of a peer
/// before its endpoint fails. The retries alone (20 ms doubling to 1 s, 10 of them) span
/// about 5 s, which a live peer outlasted: over `RUCX_TLS=rc_verbs,ud_verbs` a receiver of
/// tag_bw 1 MiB with tag offload off spends 50-150 ms inside each RDMA READ's `ibv_post_send`
/// (rxe runs the READ's responder and completer in that call's softirq) under the VM's
/// emulated CPU, and polls the ud_verbs wire-up interface beside the busy rc_verbs lane at
/// most once per such call (ucp polls it on every call once calls are slow:
/// `ucp/src/worker/progress.rs`, `SLOW_CALL`; before that, on one call in 64 or 256). The
/// sender's keepalive probe went unacknowledged through all 10 retries on a loaded host
/// (`compare-ucx-tag.sh 5`, host load 7-9: 2 of 10 offload-off 1 MiB runs ended with "the
/// ud_verbs peer acknowledged nothing in 10 retransmissions").
pub const TIMEOUT: ConfigVar = ConfigVar {
    name: "UD_TIMEOUT",
    default: "30s",
    doc: "ud_verbs: a peer that acknowledges nothing for this long (and RUCX_UD_RETRY_COUNT \
          retransmissions) fails its endpoint",
};
/// `RUCX_UD_FAULT_DROP`: fault injection, a share of received datagrams dropped.
pub const FAULT_DROP: ConfigVar = ConfigVar {
    name: "UD_FAULT_DROP",
    default: "0",
    doc: "testing: drop this share (0..1) of received ud_verbs datagrams, e.g. 0.05,seed=7",
};

/// Every ud_verbs configuration variable.
pub static UD_VERBS_VARS: [ConfigVar; 7] = [
    TX_QUEUE_LEN,
    RX_QUEUE_LEN,
    TX_BUFS,
    RTO,
    RETRY_COUNT,
    TIMEOUT,
    FAULT_DROP,
];

/// The configuration an interface runs with.
#[derive(Debug, Clone)]
pub(crate) struct UdConfig {
    pub tx_queue_len: u32,
    pub rx_queue_len: u32,
    pub tx_bufs: u32,
    pub rto: Duration,
    pub retry_count: u32,
    /// Shortest silence of a peer before its endpoint fails (besides `retry_count`).
    pub peer_timeout: Duration,
    /// Share of received datagrams dropped on purpose, and the seed of the choice.
    pub drop: Option<(f64, u64)>,
}

/// Parses `RUCX_UD_FAULT_DROP`: `P` or `P,seed=N`.
fn parse_drop(text: &str) -> std::result::Result<Option<(f64, u64)>, String> {
    let mut parts = text.split(',');
    let p: f64 = parts
        .next()
        .unwrap_or("0")
        .trim()
        .parse()
        .map_err(|_| format!("'{text}': the share must be a number in 0..1"))?;
    if !(0.0..1.0).contains(&p) {
        return Err(format!("'{text}': the share must be in 0..1"));
    }
    let mut seed = 1;
    for kv in parts {
        match kv.trim().split_once('=') {
            Some(("seed", v)) => {
                seed = v
                    .parse()
                    .map_err(|_| format!("'{text}': seed must be a number"))?
            }
            _ => return Err(format!("'{text}': unknown part '{kv}' (accepted: seed=N)")),
        }
    }
    Ok((p > 0.0).then_some((p, seed)))
}

impl UdConfig {
    pub(crate) fn from_env() -> Result<Self> {
        let rto = RTO.duration()?;
        if rto < Duration::from_micros(100) || rto > state::RTO_MAX {
            return Err(Error::Config(format!(
                "RUCX_UD_RTO={rto:?}: accepted 100us..=1s"
            )));
        }
        Ok(UdConfig {
            tx_queue_len: uint_var(&TX_QUEUE_LEN, 16, 16384)? as u32,
            rx_queue_len: uint_var(&RX_QUEUE_LEN, 16, 16384)? as u32,
            tx_bufs: uint_var(&TX_BUFS, 16, 65536)? as u32,
            rto,
            retry_count: uint_var(&RETRY_COUNT, 1, 100)? as u32,
            peer_timeout: TIMEOUT.duration()?,
            drop: parse_drop(&FAULT_DROP.raw())
                .map_err(|e| Error::Config(format!("RUCX_UD_FAULT_DROP={e}")))?,
        })
    }
}

impl Transport for UdVerbs {
    const NAME: &'static str = "ud_verbs";
    const ROLES: TlRoles = TlRoles::WIREUP_HELPER;
    type Md = RcVerbsMd;
    type Iface = UdVerbsIface;
    type Ep = UdVerbsEp;

    fn devices() -> std::result::Result<Vec<DeviceInfo>, String> {
        ucs::config::register(&UD_VERBS_VARS);
        RcVerbs::devices()
    }

    fn open_md(device: &str) -> Result<RcVerbsMd> {
        ucs::config::register(&UD_VERBS_VARS);
        RcVerbsMd::open(device)
    }

    fn open_iface(md: &RcVerbsMd, params: &IfaceParams) -> Result<UdVerbsIface> {
        ucs::config::register(&UD_VERBS_VARS);
        UdVerbsIface::open(md, &params.device, UdConfig::from_env()?)
    }
}

#[cfg(test)]
mod tests;
