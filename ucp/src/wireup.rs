//! Wire-up: choosing lanes to a peer from the transports' capabilities and performance models,
//! and the protocol thresholds of one endpoint configuration.
//!
//! Pure functions over [`uct::IfaceAttr`] and reachability answers, so they are tested without a
//! transport. The worker calls them once per endpoint; nothing here runs on the data path except
//! [`AmSwitchGate::admit`] (one branch per message).
//!
//! ## Moving the AM lane to a connect-to-endpoint transport (rc_verbs)
//! rc_verbs endpoints connect endpoint to endpoint, so they cannot carry the first message to a
//! peer. Wire-up therefore starts on a connect-to-interface AM lane (tcp): the worker address
//! goes over it, then the rc_verbs endpoint addresses (`EP_ADDR`, three messages: ours, the
//! peer's marked connected, ours marked connected). Once both QPs are connected the lane serves
//! RMA, and when [`carries_am`] accepts it the AM lane (eager, rendezvous control, user AM,
//! stream, keepalive, close) moves to it as well:
//!
//! - Sender: the switch waits until the endpoint's pending queue is empty (no message is half
//!   sent on the old lane), then sends `AM_LANE_SWITCH` as the last message on the old lane and
//!   from then on sends every active message on the new lane. If the marker meets
//!   back-pressure the switch is retried from progress; nothing is sent on the new lane before
//!   the marker went out.
//! - Receiver ([`AmSwitchGate`], one per peer): active messages from that peer arriving on a
//!   connect-to-endpoint interface before its marker are held (copied, in arrival order); the
//!   marker releases them in order, after everything the old lane delivered before it. Since
//!   each lane is itself ordered, per-sender order holds across the switch. The copies only
//!   happen in the short window between the peer's switch and our reading of its marker.
//! - If the rc_verbs endpoint cannot connect (either side), that side drops the lane and never
//!   sends its "connected" address, so neither side switches: both stay on tcp. A failure of the
//!   rc_verbs lane after the switch is an endpoint error, like a failure of any lane.

pub(crate) mod ep;
mod proto;
pub use proto::TM_THRESH;

pub use proto::{ProtoConfig, RndvScheme, TagSendMode};

use crate::address::WorkerAddress;
use crate::config::UcpConfig;
use ucs::{Error, Result};
use uct::{IfaceAttr, IfaceFlags};

/// What wire-up knows about one local interface.
#[derive(Debug, Clone)]
pub struct LocalTl<'a> {
    /// Transport name.
    pub tl_name: &'a str,
    /// Device name.
    pub dev_name: &'a str,
    /// Capabilities.
    pub attr: &'a IfaceAttr,
    /// Whether its memory domain can register memory (needed for zero-copy rendezvous).
    pub md_reg: bool,
}

/// A usable path: local interface index and remote transport entry index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanePick {
    /// Index of the local interface.
    pub local: usize,
    /// Index of the remote entry in the peer's address.
    pub remote: usize,
}

/// The lanes of an endpoint, one per purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneSelection {
    /// Active messages (tag eager, control, rendezvous over AM).
    pub am: LanePick,
    /// Zero-copy RMA for rendezvous and put/get (if any transport offers it).
    pub rma: Option<LanePick>,
    /// Remote atomics (if any transport offers them).
    pub amo: Option<LanePick>,
}

/// Whether endpoints of this interface can only connect endpoint to endpoint (rc_verbs): they
/// need an address exchange over another, already connected lane.
pub fn connect_to_ep_only(a: &IfaceAttr) -> bool {
    a.flags.contains(IfaceFlags::CONNECT_TO_EP) && !a.flags.contains(IfaceFlags::CONNECT_TO_IFACE)
}

fn am_cost(a: &IfaceAttr) -> f64 {
    a.perf.time_for(64)
}

fn rma_cost(a: &IfaceAttr) -> f64 {
    a.perf.time_for(1 << 20)
}

fn better(cost: f64, prio: u8, best: Option<(f64, u8)>) -> bool {
    match best {
        None => true,
        Some((c, p)) => cost < c || (cost == c && prio > p),
    }
}

/// Picks lanes to `peer`. `reach(local, remote)` answers the local interface's `is_reachable`
/// for the remote entry. Without any AM lane the error names every transport and why.
pub fn select_lanes(
    locals: &[LocalTl<'_>],
    peer: &WorkerAddress,
    mut reach: impl FnMut(usize, usize) -> std::result::Result<(), String>,
) -> Result<LaneSelection> {
    let mut why: Vec<String> = Vec::new();
    let mut am: Option<(LanePick, f64, u8)> = None;
    let mut rma_cands: Vec<(LanePick, f64, u8)> = Vec::new();
    let mut amo: Option<(LanePick, f64, u8)> = None;
    for (li, l) in locals.iter().enumerate() {
        let remotes: Vec<usize> = peer
            .tls
            .iter()
            .enumerate()
            .filter(|(_, r)| r.tl_name == l.tl_name)
            .map(|(i, _)| i)
            .collect();
        if remotes.is_empty() {
            why.push(format!(
                "{}/{}: the peer has no {} interface",
                l.tl_name, l.dev_name, l.tl_name
            ));
            continue;
        }
        for ri in remotes {
            if let Err(e) = reach(li, ri) {
                why.push(format!("{}/{}: {e}", l.tl_name, l.dev_name));
                continue;
            }
            let pick = LanePick {
                local: li,
                remote: ri,
            };
            let f = l.attr.flags;
            let prio = l.attr.priority;
            // A connect-to-endpoint-only transport (rc_verbs) is connected during wire-up over
            // the AM lane, so it is chosen for RMA here; the worker moves the AM lane to it once
            // connected (see the module docs), behind an ordering marker.
            let ep_only = connect_to_ep_only(l.attr);
            if !ep_only
                && f.intersects(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY)
                && l.attr.am.max_bcopy > 64
            {
                let c = am_cost(l.attr);
                if better(c, prio, am.map(|a| (a.1, a.2))) {
                    am = Some((pick, c, prio));
                }
            } else if ep_only {
                why.push(format!(
                    "{}/{}: reachable, but connects endpoint to endpoint: its wire-up needs a \
                     tcp lane that reaches the peer (add tcp to RUCX_TLS, and its netdev to \
                     RUCX_NET_DEVICES)",
                    l.tl_name, l.dev_name
                ));
            } else {
                why.push(format!(
                    "{}/{}: reachable, but has no active messages (used for RMA only)",
                    l.tl_name, l.dev_name
                ));
            }
            if l.md_reg && f.intersects(IfaceFlags::GET_ZCOPY | IfaceFlags::PUT_ZCOPY) {
                rma_cands.push((pick, rma_cost(l.attr), prio));
            }
            let at = &l.attr.atomics;
            if !ep_only && l.md_reg && !(at.fop64.is_empty() && at.op64.is_empty()) {
                let c = am_cost(l.attr);
                if better(c, prio, amo.map(|a| (a.1, a.2))) {
                    amo = Some((pick, c, prio));
                }
            }
        }
    }
    // RMA prefers a transport other than the AM lane's when one reaches the peer: rendezvous
    // data then moves beside the active messages instead of queueing behind them on the same
    // connection (for example rc_verbs next to tcp). Otherwise the cheapest RMA lane.
    let pick_rma = |am_local: Option<usize>| {
        let mut best: Option<(LanePick, f64, u8)> = None;
        let mut best_other: Option<(LanePick, f64, u8)> = None;
        for &(p, c, prio) in &rma_cands {
            if better(c, prio, best.map(|b| (b.1, b.2))) {
                best = Some((p, c, prio));
            }
            let other = am_local.is_none_or(|a| locals[p.local].tl_name != locals[a].tl_name);
            if other && better(c, prio, best_other.map(|b| (b.1, b.2))) {
                best_other = Some((p, c, prio));
            }
        }
        best_other.or(best)
    };
    let rma = pick_rma(am.map(|a| a.0.local));
    match am {
        Some((am, _, _)) => Ok(LaneSelection {
            am,
            rma: rma.map(|r| r.0),
            amo: amo.map(|r| r.0),
        }),
        None => {
            if locals.is_empty() {
                why.push(
                    "this worker has no transport (check RUCX_TLS and RUCX_NET_DEVICES)".into(),
                );
            }
            Err(Error::Unreachable(format!(
                "no transport reaches worker {:#018x}: {}",
                peer.uuid,
                why.join("; ")
            )))
        }
    }
}

/// Smallest `max_bcopy` a lane needs to carry ucp active messages (control messages with a
/// packed remote key, fragment headers).
pub const AM_MIN_BCOPY: usize = 256;

/// Whether a connected connect-to-endpoint lane (rc_verbs) can take over the AM lane: it has
/// bcopy (or short) active messages big enough for every ucp control message, and the
/// configuration allows it (`RUCX_AM_LANE_SWITCH`).
pub fn carries_am(a: &IfaceAttr, cfg: &UcpConfig) -> bool {
    cfg.am_lane_switch && a.flags.contains(IfaceFlags::AM_BCOPY) && a.am.max_bcopy >= AM_MIN_BCOPY
}

/// What [`AmSwitchGate::admit`] decided for one arriving message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Handle it now.
    Now,
    /// Held until the peer's lane-switch marker (a copy is kept in the gate).
    Held,
}

/// Receive side of one peer's AM lane switch (see the module docs): messages that arrive on the
/// peer's new (connect-to-endpoint) lane before the marker on its old lane are held, in order.
#[derive(Debug, Default)]
pub struct AmSwitchGate {
    seen: bool,
    held: std::collections::VecDeque<(u8, Vec<u8>)>,
}

impl AmSwitchGate {
    /// A gate that has not seen the marker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the peer's marker has arrived (its AM lane is the new one).
    pub fn switched(&self) -> bool {
        self.seen
    }

    /// Messages held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Decides for a message `id`/`data` (the whole message, uuid prefix included) that arrived
    /// on the new lane (`on_new_lane`) or the old one.
    pub fn admit(&mut self, on_new_lane: bool, id: u8, data: &[u8]) -> Admit {
        if self.seen || !on_new_lane {
            return Admit::Now;
        }
        self.held.push_back((id, data.to_vec()));
        Admit::Held
    }

    /// The peer's marker arrived (`on_new_lane`: over which lane). Gives the held messages in
    /// arrival order, to be handled now. A marker on the new lane or a second one is a protocol
    /// error.
    pub fn marker(
        &mut self,
        on_new_lane: bool,
    ) -> Result<std::collections::VecDeque<(u8, Vec<u8>)>> {
        if on_new_lane {
            return Err(Error::Wire(
                "AM lane switch marker arrived on the new lane".into(),
            ));
        }
        if self.seen {
            return Err(Error::Wire("second AM lane switch marker".into()));
        }
        self.seen = true;
        Ok(std::mem::take(&mut self.held))
    }

    /// Drops the held messages (the endpoint failed or closed).
    pub fn clear(&mut self) {
        self.held.clear();
    }
}

#[cfg(test)]
mod tests;
