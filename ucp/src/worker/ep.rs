//! One endpoint's record in the worker core: its lanes (one transport endpoint per purpose),
//! its state, its pending queue and its rarely used extras; the interfaces' facts the lanes
//! use; an endpoint being flush-closed.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::address::WorkerAddress;
use crate::stream::rx::EpStream;
use crate::wireup::{AmSwitchGate, ProtoConfig};
use crate::worker::api_types::ErrHandler;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;
use ucs::async_ctx::TimerId;
use ucs::{Error, Result};
use uct::{AnyEp, IfaceAttr};

/// An endpoint's lanes: the transport endpoints it sends on (each with its interface's index
/// in the worker), and which of them carries active messages, RMA and atomics. Its fields are
/// the worker's; the families and wire-up use the methods below.
pub(crate) struct Lanes {
    pub(super) uct: Vec<(usize, AnyEp)>,
    pub(super) am: usize,
    /// The RMA lane (index in `uct`; see [`Lanes::rma`]).
    rma_lane: Option<u8>,
    /// The atomic lane (index in `uct`; see [`Lanes::amo`]).
    amo_lane: Option<u8>,
    /// The atomic lane chosen but not yet connected: a transport the AM and RMA lanes do not
    /// use gets its endpoint when a remote key is first unpacked (so a tag-only endpoint over
    /// shared memory opens no tcp connection just for atomics). Boxed: most endpoints have none.
    pub(super) amo_later: Option<Box<crate::wireup::LanePick>>,
    /// The RMA lane over a connect-to-endpoint transport (rc_verbs) while its endpoint address
    /// exchange runs over the AM lane; it joins `uct` as `rma` once both sides are connected.
    /// Boxed: most endpoints have none.
    pub(super) rma_wait: Option<Box<WaitLane>>,
    /// The connected connect-to-endpoint lane (index in `uct`) the AM lane moves to as soon as
    /// no message is pending on the old one (see `Core::am_switch_try`).
    pub(super) am_next: Option<u8>,
    /// The old AM lane (index in `uct`) after a switch, when no other purpose uses it: it no
    /// longer counts as a user of its interface (polled like an idle one), but stays connected
    /// (its failure still fails the endpoint).
    pub(super) released: Option<u8>,
}

impl Lanes {
    /// Lanes `uct`, with the AM lane at `am` and the RMA and atomic lanes at `rma` and `amo`.
    pub(crate) fn new(
        uct: Vec<(usize, AnyEp)>,
        am: usize,
        rma: Option<usize>,
        amo: Option<usize>,
    ) -> Self {
        Lanes {
            uct,
            am,
            rma_lane: rma.and_then(|r| u8::try_from(r).ok()),
            amo_lane: amo.and_then(|a| u8::try_from(a).ok()),
            amo_later: None,
            rma_wait: None,
            am_next: None,
            released: None,
        }
    }

    /// The RMA lane (index in `uct`).
    #[inline]
    pub(crate) fn rma(&self) -> Option<usize> {
        self.rma_lane.map(usize::from)
    }

    /// The atomic lane (index in `uct`).
    #[inline]
    pub(crate) fn amo(&self) -> Option<usize> {
        self.amo_lane.map(usize::from)
    }

    /// Makes `lane` (index in `uct`) the RMA lane.
    pub(crate) fn set_rma(&mut self, lane: usize) {
        self.rma_lane = u8::try_from(lane).ok();
    }

    /// Makes `lane` (index in `uct`) the atomic lane.
    pub(crate) fn set_amo(&mut self, lane: usize) {
        self.amo_lane = u8::try_from(lane).ok();
    }

    /// How many lanes there are.
    #[inline]
    pub(crate) fn count(&self) -> usize {
        self.uct.len()
    }

    /// The AM lane (index).
    #[inline]
    pub(crate) fn am(&self) -> usize {
        self.am
    }

    /// The worker's index of lane `lane`'s interface.
    #[inline]
    pub(crate) fn iface_of(&self, lane: usize) -> usize {
        self.uct[lane].0
    }

    /// The worker's index of the AM lane's interface.
    #[inline]
    pub(crate) fn am_iface(&self) -> usize {
        self.uct[self.am].0
    }

    /// The worker's index of the RMA lane's interface, if there is an RMA lane.
    #[inline]
    pub(crate) fn rma_iface(&self) -> Option<usize> {
        self.rma().map(|r| self.uct[r].0)
    }

    /// The interfaces of the lanes, in lane order.
    pub(crate) fn ifaces(&self) -> impl Iterator<Item = usize> + '_ {
        self.uct.iter().map(|(li, _)| *li)
    }

    /// Lane `lane`: its interface's index and its transport endpoint.
    #[inline]
    pub(crate) fn lane_mut(&mut self, lane: usize) -> (usize, &mut AnyEp) {
        let (li, ep) = &mut self.uct[lane];
        (*li, ep)
    }

    /// Lane `lane`, or `None` past the last one.
    #[inline]
    pub(crate) fn get_mut(&mut self, lane: usize) -> Option<(usize, &mut AnyEp)> {
        self.uct.get_mut(lane).map(|(li, ep)| (*li, ep))
    }

    /// The AM lane's transport endpoint.
    #[inline]
    pub(crate) fn am_ep_mut(&mut self) -> &mut AnyEp {
        &mut self.uct[self.am].1
    }

    /// Wire-up: the lanes still to connect (an atomic lane picked for later, a
    /// connect-to-endpoint RMA lane waiting for its address exchange).
    pub(crate) fn set_waiting(
        &mut self,
        amo_later: Option<Box<crate::wireup::LanePick>>,
        rma_wait: Option<Box<WaitLane>>,
    ) {
        self.amo_later = amo_later;
        self.rma_wait = rma_wait;
    }

    /// The atomic lane picked for later, taken (to connect it now).
    pub(crate) fn take_amo_later(&mut self) -> Option<Box<crate::wireup::LanePick>> {
        self.amo_later.take()
    }

    /// The connect-to-endpoint RMA lane waiting for its address exchange.
    pub(crate) fn rma_wait(&self) -> Option<&WaitLane> {
        self.rma_wait.as_deref()
    }

    /// [`Lanes::rma_wait`], to connect it.
    pub(crate) fn rma_wait_mut(&mut self) -> Option<&mut WaitLane> {
        self.rma_wait.as_deref_mut()
    }

    /// [`Lanes::rma_wait`], taken (it connected, or failed to).
    pub(crate) fn take_rma_wait(&mut self) -> Option<Box<WaitLane>> {
        self.rma_wait.take()
    }

    /// Adds a lane on interface `li` as the RMA lane; gives its index.
    pub(crate) fn add_rma_lane(&mut self, li: usize, ep: AnyEp) -> usize {
        self.uct.push((li, ep));
        let lane = self.uct.len() - 1;
        self.set_rma(lane);
        lane
    }

    /// The lane the AM lane moves to once nothing is pending on the old one.
    pub(crate) fn am_next(&self) -> Option<usize> {
        self.am_next.map(usize::from)
    }

    /// Makes `lane` the one the AM lane moves to.
    pub(crate) fn set_am_next(&mut self, lane: usize) {
        self.am_next = u8::try_from(lane).ok();
    }

    /// Moves the AM lane to [`Lanes::am_next`]. The old one, unless it is the RMA lane, is
    /// released (it no longer counts as a user of its interface): gives that interface's
    /// index then.
    pub(crate) fn switch_am(&mut self) -> Option<usize> {
        let new = self.am_next.take().map(usize::from)?;
        let old = std::mem::replace(&mut self.am, new);
        (self.rma() != Some(old)).then(|| {
            self.released = u8::try_from(old).ok();
            self.uct[old].0
        })
    }
}

/// A connect-to-endpoint lane being wired up (see [`EpAddrHdr`](crate::wire::EpAddrHdr)).
pub(crate) struct WaitLane {
    /// Local interface index.
    pub(crate) li: usize,
    /// The peer's transport entry index (its device address).
    pub(crate) remote: usize,
    /// The unconnected (or connected, not yet confirmed) endpoint.
    pub(crate) ep: AnyEp,
    /// `connect_to_ep` done on our side.
    pub(crate) connected: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EpState {
    Connecting,
    Ready,
    /// Failed, with the error in [`EpExtra::error`] (the state is in every endpoint, the
    /// error in few).
    Failed,
    Closed,
}

pub(crate) enum Pending {
    Req(usize),
    Ctl {
        id: u8,
        body: Vec<u8>,
    },
    /// A fence, with its flush request and the endpoint's `amo_sent` when it was posted: what
    /// is queued behind it starts once everything before it has completed at the target (see
    /// `State::fence_passed`).
    Fence {
        key: usize,
        amo_sent: u32,
    },
    /// Holds what is queued behind it until the target has acknowledged every emulated put
    /// and atomic sent before it (the endpoint's `amo_sent` then): a cma access that follows
    /// an emulated put to the same memory sees it.
    Acked {
        amo_sent: u32,
    },
}

/// One endpoint. A hub worker holds one per peer, so what only some endpoints use (streams,
/// the lane-switch gate, an early peer endpoint address, the decoded peer address once its
/// lanes are connected) lives in [`EpExtra`], allocated when first needed.
/// A reading of the worker's clock (`Core::now_cache`) kept in an endpoint, in nanoseconds:
/// 8 bytes where a `Duration` takes 16.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp(u64);

impl Stamp {
    /// The reading `t`.
    #[inline(always)]
    pub(crate) fn of(t: Duration) -> Stamp {
        Stamp(t.as_secs().wrapping_mul(1_000_000_000) + u64::from(t.subsec_nanos()))
    }

    /// Time from this reading to `now` (zero when `now` is earlier).
    pub(crate) fn until(self, now: Duration) -> Duration {
        now.saturating_sub(Duration::from_nanos(self.0))
    }
}

pub(crate) struct Ep {
    pub(super) gen: u32,
    pub(super) in_pending_list: bool,
    pub(super) close_acked: bool,
    /// Atomics emulated over active messages (ATOMIC_REQ) sent or queued, and replies to
    /// them received (wrapping counts): a flush waits until they are equal, a fence until the
    /// replies reach the count at the fence.
    pub(super) amo_sent: u32,
    pub(super) amo_acked: u32,
    /// Scrambles the ids of this endpoint's requests on the wire (see
    /// [`Core::peer_id`](crate::worker::state::Core::peer_id)).
    pub(super) secret: u64,
    pub(super) uuid: u64,
    pub(super) lanes: Option<Lanes>,
    /// The protocol thresholds, shared by every endpoint with the same ones (see
    /// [`Core::intern_proto`](crate::worker::state::Core::intern_proto)).
    pub(super) proto: Option<Rc<ProtoConfig>>,
    pub(super) state: EpState,
    pub(super) pending: VecDeque<Pending>,
    pub(super) err_handler: Option<ErrHandler>,
    pub(super) last_tx: Stamp,
    pub(super) last_rx: Stamp,
    pub(super) extra: Option<Box<EpExtra>>,
}

// Every endpoint has one (1,000 endpoints, 1,000 of these): keep it small.
const _: () = assert!(std::mem::size_of::<Ep>() <= 168);

/// The rarely used part of an [`Ep`] (see there).
#[derive(Default)]
pub(crate) struct EpExtra {
    /// The peer's decoded address while a lane still needs it: until the lanes are connected,
    /// and after that only for a deferred atomic lane or a connect-to-endpoint lane.
    pub(crate) addr: Option<WorkerAddress>,
    /// The stream family's part: received bytes no receive took yet, waiting receives.
    pub(crate) stream: EpStream,
    /// A peer endpoint address that arrived before this endpoint's lanes were created.
    pub(crate) peer_ep_addr: Option<(bool, Vec<u8>)>,
    /// Receive side of the peer's AM lane switch.
    pub(crate) rx_gate: AmSwitchGate,
    /// The error that failed the endpoint ([`EpState::Failed`]).
    pub(super) error: Option<Error>,
    /// What becomes of the peer's messages that arrive after the endpoint failed.
    pub(super) late_rx: LateRx,
}

/// What becomes of the messages that arrive for a failed endpoint (see `worker::late_rx`);
/// kept in the endpoint's `EpExtra` from its failure on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LateRx {
    /// The endpoint failed because its peer went away, and the peer never broke the protocol:
    /// its complete tag messages are delivered.
    pub(super) deliver: bool,
    /// The peer broke the protocol (the endpoint failed by it, or a message of the failed
    /// endpoint was malformed).
    pub(super) misbehaved: bool,
    /// A dropped message was logged at warn level.
    pub(super) warned: bool,
}

impl EpExtra {
    /// Holds nothing an empty one would not.
    fn is_empty(&self) -> bool {
        self.addr.is_none()
            && self.stream.is_unused()
            && self.peer_ep_addr.is_none()
            && !self.rx_gate.switched()
            && self.rx_gate.held() == 0
            && self.error.is_none()
            && self.late_rx == Default::default()
    }
}

/// The error of a step that needs an endpoint's lanes while the endpoint is still connecting.
#[cold]
pub(crate) fn connecting() -> Error {
    Error::Busy("endpoint is still connecting".into())
}

impl Ep {
    /// The lanes, or `Busy` while the endpoint is connecting.
    #[inline]
    pub(crate) fn ready_lanes(&mut self) -> Result<&mut Lanes> {
        self.lanes.as_mut().ok_or_else(connecting)
    }

    /// The protocol thresholds, or `Busy` while the endpoint is connecting.
    #[inline]
    pub(crate) fn ready_proto(&self) -> Result<&ProtoConfig> {
        self.proto.as_deref().ok_or_else(connecting)
    }

    /// What a send on the AM lane starts from: the protocol thresholds, the AM lane (interface
    /// index, transport endpoint) and the time of the last send to note; `Busy` while the
    /// endpoint is connecting.
    #[inline]
    pub(crate) fn ready_am(&mut self) -> Result<(ProtoConfig, &mut (usize, AnyEp), &mut Stamp)> {
        let (Some(proto), Some(l)) = (self.proto.as_deref(), self.lanes.as_mut()) else {
            return Err(connecting());
        };
        Ok((*proto, &mut l.uct[l.am], &mut self.last_tx))
    }

    /// The rarely used part, allocated on first use.
    pub(crate) fn extra_mut(&mut self) -> &mut EpExtra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// The error that failed the endpoint (a generic one if none was kept).
    pub(crate) fn failure(&self) -> Error {
        self.extra
            .as_ref()
            .and_then(|x| x.error.clone())
            .unwrap_or_else(|| Error::PeerFailure("endpoint failed".into()))
    }

    /// The peer's decoded address, while kept (see [`EpExtra::addr`]).
    pub(crate) fn peer_addr(&self) -> Option<&WorkerAddress> {
        self.extra.as_ref().and_then(|x| x.addr.as_ref())
    }

    /// Forgets the peer's decoded address unless a lane still needs it (a deferred atomic lane
    /// or a connect-to-endpoint lane being wired up), and frees the rarely used part once it
    /// holds nothing.
    pub(crate) fn addr_done(&mut self) {
        let needed = self
            .lanes
            .as_ref()
            .is_none_or(|l| l.amo_later.is_some() || l.rma_wait.is_some());
        if needed {
            return;
        }
        if let Some(x) = self.extra.as_deref_mut() {
            x.addr = None;
            if x.is_empty() {
                self.extra = None;
            }
        }
    }
}

pub(crate) struct IfaceInfo {
    pub(crate) tl_name: &'static str,
    pub(crate) dev_name: String,
    pub(crate) dev_type: uct::DeviceType,
    pub(crate) attr: IfaceAttr,
    pub(crate) md_reg: bool,
    /// Connects endpoint to endpoint only (rc_verbs): a peer's AM lane after its switch.
    pub(crate) ep_only: bool,
}

/// An endpoint being flush-closed.
pub(crate) struct Closing {
    pub(crate) ep: usize,
    pub(crate) req: usize,
    /// Flush request still running.
    pub(crate) flush: Option<usize>,
    /// CLOSE sent: the timer that ends the wait for the ack.
    pub(crate) deadline: Option<TimerId>,
    /// The deadline passed: close without the ack.
    pub(crate) timed_out: bool,
}
