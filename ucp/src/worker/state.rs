//! The worker's internal state: endpoints and their lanes, requests and their stages, the
//! unexpected queue, and the buffer pool, shared by every protocol family's handlers.
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
use crate::config::UcpConfig;
use crate::context::Features;
use crate::request::Completion;
use crate::rma::raw_mem::{RecvBuf, SendBuf};
use crate::wireup::{AmSwitchGate, ProtoConfig};
use crate::worker::close::Closing;
use crate::worker::{ErrHandler, ProtoStats, RequestCallback};
use slab::Slab;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;
use ucs::time::Clock;
use ucs::{Error, Result};
use uct::{AnyEp, AnyMd, CompletionId, IfaceAttr, MemHandle, RemoteKey};

/// Hashes worker uuids (random 64-bit numbers) with one multiply instead of SipHash: every
/// arriving message looks its sender up by uuid, and SipHash cost about 150 instructions of it.
pub(crate) type UuidHash = std::hash::BuildHasherDefault<UuidHasher>;

/// The [`std::hash::Hasher`] of [`UuidHash`]: a Fibonacci multiply, folding the high half in so
/// both the bucket index (low bits) and the control tag (high bits) depend on every input bit.
#[derive(Default)]
pub(crate) struct UuidHasher(u64);

impl std::hash::Hasher for UuidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        let m = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = m ^ (m >> 32);
    }
}

pub(crate) use super::req_table::Done;
pub(crate) use super::uct_index::UctIndex;

pub(crate) const COMP_GET: u64 = 1;
pub(crate) const COMP_PUT: u64 = 2;
pub(crate) const COMP_FLUSH: u64 = 3;
pub(crate) const COMP_ATOMIC: u64 = 4;
pub(crate) const COMP_ZCOPY: u64 = 5;

pub(crate) fn comp_id(kind: u64, wire: u64) -> CompletionId {
    CompletionId(kind << 60 | (wire & ((1 << 60) - 1)))
}

pub(crate) struct Lanes {
    pub(crate) uct: Vec<(usize, AnyEp)>,
    pub(crate) am: usize,
    /// The RMA lane (index in `uct`; see [`Lanes::rma`]).
    rma_lane: Option<u8>,
    /// The atomic lane (index in `uct`; see [`Lanes::amo`]).
    amo_lane: Option<u8>,
    /// The atomic lane chosen but not yet connected: a transport the AM and RMA lanes do not
    /// use gets its endpoint when a remote key is first unpacked (so a tag-only endpoint over
    /// shared memory opens no tcp connection just for atomics). Boxed: most endpoints have none.
    pub(crate) amo_later: Option<Box<crate::wireup::LanePick>>,
    /// The RMA lane over a connect-to-endpoint transport (rc_verbs) while its endpoint address
    /// exchange runs over the AM lane; it joins `uct` as `rma` once both sides are connected.
    /// Boxed: most endpoints have none.
    pub(crate) rma_wait: Option<Box<WaitLane>>,
    /// The connected connect-to-endpoint lane (index in `uct`) the AM lane moves to as soon as
    /// no message is pending on the old one (see `State::am_switch_try`).
    pub(crate) am_next: Option<u8>,
    /// The old AM lane (index in `uct`) after a switch, when no other purpose uses it: it no
    /// longer counts as a user of its interface (polled like an idle one), but stays connected
    /// (its failure still fails the endpoint).
    pub(crate) released: Option<u8>,
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
}

/// A connect-to-endpoint lane being wired up (see [`EpAddrHdr`]).
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
/// A reading of the worker's clock (`State::now_cache`) kept in an endpoint, in nanoseconds:
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
    pub(crate) gen: u32,
    pub(crate) in_pending_list: bool,
    pub(crate) close_acked: bool,
    /// Atomics emulated over active messages (ATOMIC_REQ) sent or queued, and replies to
    /// them received (wrapping counts): a flush waits until they are equal, a fence until the
    /// replies reach the count at the fence.
    pub(crate) amo_sent: u32,
    pub(crate) amo_acked: u32,
    /// Scrambles the ids of this endpoint's requests on the wire (see [`State::peer_id`]).
    pub(crate) secret: u64,
    pub(crate) uuid: u64,
    pub(crate) lanes: Option<Lanes>,
    /// The protocol thresholds, shared by every endpoint with the same ones (see
    /// [`State::intern_proto`]).
    pub(crate) proto: Option<Rc<ProtoConfig>>,
    pub(crate) state: EpState,
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) err_handler: Option<ErrHandler>,
    pub(crate) last_tx: Stamp,
    pub(crate) last_rx: Stamp,
    pub(crate) extra: Option<Box<EpExtra>>,
}

// Every endpoint has one (1,000 endpoints, 1,000 of these): keep it small.
const _: () = assert!(std::mem::size_of::<Ep>() <= 168);

/// The rarely used part of an [`Ep`] (see there).
#[derive(Default)]
pub(crate) struct EpExtra {
    /// The peer's decoded address while a lane still needs it: until the lanes are connected,
    /// and after that only for a deferred atomic lane or a connect-to-endpoint lane.
    pub(crate) addr: Option<WorkerAddress>,
    pub(crate) stream_rx: VecDeque<u8>,
    /// Bytes left of each message (fragment) in `stream_rx`, oldest first.
    pub(crate) stream_frags: VecDeque<usize>,
    pub(crate) stream_waiters: VecDeque<usize>,
    /// A peer endpoint address that arrived before this endpoint's lanes were created.
    pub(crate) peer_ep_addr: Option<(bool, Vec<u8>)>,
    /// Receive side of the peer's AM lane switch.
    pub(crate) rx_gate: AmSwitchGate,
    /// The error that failed the endpoint ([`EpState::Failed`]).
    pub(crate) error: Option<Error>,
}

impl EpExtra {
    /// Holds nothing an empty one would not.
    fn is_empty(&self) -> bool {
        self.addr.is_none()
            && self.stream_rx.capacity() == 0
            && self.stream_frags.capacity() == 0
            && self.stream_waiters.capacity() == 0
            && self.peer_ep_addr.is_none()
            && !self.rx_gate.switched()
            && self.rx_gate.held() == 0
            && self.error.is_none()
    }
}

/// The error of a step that needs an endpoint's lanes while the endpoint is still connecting.
#[cold]
pub(crate) fn connecting() -> Error {
    Error::Busy("connecting".into())
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendStage {
    Eager,
    WaitAck,
    WaitRndv,
    Put,
    WaitPutFlush,
    PutFlushRetry,
    Pipeline,
    EagerZcopy,
    Stream,
}

/// What a send or receive needs only for rendezvous, zero-copy or RMA: held in a box taken
/// from `RndvState::pool` when first needed (see [`State::send_rndv`]) and given back when
/// the request finishes, so an eager request carries one empty pointer instead.
#[derive(Default)]
pub(crate) struct Rndv {
    pub(crate) memh: Option<MemHandle>,
    pub(crate) rkey: Option<RemoteKey>,
    pub(crate) remote_addr: u64,
    /// The peer's id of its side of the transfer: the receive's (from RTR) for a send, the
    /// send's (from RTS) for a receive.
    pub(crate) peer_req: u64,
    pub(crate) inflight: usize,
    /// A receive's rendezvous get: the lane (index in the endpoint's `uct`) whose transport
    /// reads the sender's key, when not the RMA lane.
    pub(crate) get_lane: Option<usize>,
    /// User active message sent or received by rendezvous: id and user header.
    pub(crate) am: Option<(u16, Vec<u8>)>,
}

pub(crate) struct SendReq {
    pub(crate) tag: u64,
    pub(crate) data: SendBuf,
    pub(crate) offset: usize,
    pub(crate) msg_id: u64,
    /// Rendezvous, zero-copy and RMA state (`None` for an eager send).
    pub(crate) rndv: Option<Box<Rndv>>,
    pub(crate) give_back: bool,
    pub(crate) sync: bool,
    pub(crate) stage: SendStage,
    pub(crate) rts_sent: bool,
    /// A user `put` (no rendezvous messages around it).
    pub(crate) user_rma: bool,
    /// A synchronous send whose SYNC_ACK came while fragments were still going out: it
    /// finishes as soon as they are out.
    pub(crate) acked: bool,
}

impl SendReq {
    /// An eager send of `data` not yet started.
    #[inline]
    pub(crate) fn new(tag: u64, data: SendBuf, give_back: bool, sync: bool) -> Self {
        SendReq {
            tag,
            data,
            offset: 0,
            msg_id: 0,
            rndv: None,
            give_back,
            sync,
            stage: SendStage::Eager,
            rts_sent: false,
            user_rma: false,
            acked: false,
        }
    }

    /// The registration of the data, if any.
    pub(crate) fn memh(&self) -> Option<&MemHandle> {
        self.rndv.as_ref().and_then(|x| x.memh.as_ref())
    }

    /// Drops the registration of the data, if any.
    pub(crate) fn drop_memh(&mut self) {
        if let Some(x) = self.rndv.as_deref_mut() {
            x.memh = None;
        }
    }

    /// A user active message sent by rendezvous (it has a user header).
    pub(crate) fn is_am(&self) -> bool {
        self.rndv.as_ref().is_some_and(|x| x.am.is_some())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvStage {
    Posted,
    Eager,
    RndvGet,
    RndvWait,
}

pub(crate) struct RecvReq {
    pub(crate) tag: u64,
    pub(crate) mask: u64,
    pub(crate) buf: RecvBuf,
    pub(crate) sender_tag: u64,
    pub(crate) total: usize,
    pub(crate) received: usize,
    pub(crate) offset: usize,
    /// Rendezvous, RMA and user active message state (`None` for an eager receive).
    pub(crate) rndv: Option<Box<Rndv>>,
    pub(crate) stage: RecvStage,
    /// A user `get` (no rendezvous messages around it).
    pub(crate) user_rma: bool,
}

impl RecvReq {
    /// A receive into `buf` of a message matching `tag` under `mask`, not yet matched.
    #[inline]
    pub(crate) fn new(buf: RecvBuf, tag: u64, mask: u64) -> Self {
        RecvReq {
            tag,
            mask,
            buf,
            sender_tag: 0,
            total: 0,
            received: 0,
            offset: 0,
            rndv: None,
            stage: RecvStage::Posted,
            user_rma: false,
        }
    }

    /// True when the receive holds no memory of its own (its buffer was given back or is the
    /// caller's, and it has no rendezvous state): dropping it would do nothing.
    #[inline(always)]
    pub(crate) fn owns_nothing(&self) -> bool {
        self.rndv.is_none()
            && match &self.buf {
                RecvBuf::Owned(v) => v.capacity() == 0,
                RecvBuf::Raw { .. } => true,
            }
    }

    /// The registration of the buffer, if any.
    pub(crate) fn memh(&self) -> Option<&MemHandle> {
        self.rndv.as_ref().and_then(|x| x.memh.as_ref())
    }
}

pub(crate) enum ReqKind {
    Send(SendReq),
    Recv(RecvReq),
    StreamRecv {
        buf: crate::rma::raw_mem::RecvBuf,
        filled: usize,
        /// Completes only when `buf` is full; otherwise as soon as it holds any byte.
        waitall: bool,
    },
    Atomic {
        value: u64,
    },
    Close,
    /// A flush: `eps_left` transport flushes (or, with endpoint parts, parts) still running,
    /// `retry` endpoints whose flush waits for their queue to drain or for resources.
    Flush {
        eps_left: usize,
        retry: Vec<usize>,
        /// Wire id of the worker-wide flush this request is one endpoint's part of.
        parent: Option<u64>,
    },
}

pub(crate) struct Req {
    pub(crate) gen: u32,
    pub(crate) ep: Option<usize>,
    pub(crate) kind: ReqKind,
    pub(crate) done: Option<Done>,
    /// Who learns of the result when the request finishes.
    pub(crate) notify: Notify,
}

/// How a finished request's result is handed over.
pub(crate) enum Notify {
    /// Kept in the slot until `request_take` (or `wait`).
    Take,
    /// Given to a callback at the end of a progress call.
    Callback(RequestCallback),
    /// Queued with this token for [`crate::Worker::take_done_tokens`]: an eager receive's result
    /// as soon as it finishes, the others' at the end of a progress call.
    Token(u64),
    /// Given with this token to the worker's completion hook
    /// ([`crate::Worker::set_completion_hook`]): an eager receive's result as soon as it
    /// finishes, the others' at the end of a progress call.
    Hook(u64),
    /// Kept in the slot like `Take`, and this waker woken at the end of a progress call.
    Waker(std::task::Waker),
    /// The handle was dropped: freed at the end of a progress call.
    Release,
}

/// Largest whole eager message an unexpected entry keeps inline (no pooled buffer); the entry
/// is no larger for it than one of a rendezvous.
pub(crate) const UNEXP_INLINE: usize = 48;

/// What an unexpected message holds until a receive takes it.
pub(crate) enum UnexpKind {
    /// A whole eager message without acknowledgement, left in the transport's receive buffer
    /// (copied once, into the receive that takes it).
    Held(uct::HeldBuf),
    /// A whole eager message of `len` (at most [`UNEXP_INLINE`]) bytes, in `data[..len]`.
    Inline {
        len: u8,
        data: [u8; UNEXP_INLINE],
        sreq: u64,
    },
    /// An eager message of `total` bytes, or the fragments of it that arrived so far.
    Eager {
        data: Vec<u8>,
        total: usize,
        sreq: u64,
    },
    /// A rendezvous announcement.
    Rts {
        sreq: u64,
        len: usize,
        addr: u64,
        tl: String,
        rkey: Vec<u8>,
    },
}

pub(crate) struct Unexp {
    pub(crate) ep: usize,
    pub(crate) tag: u64,
    pub(crate) kind: UnexpKind,
    /// Multi-fragment message still being assembled (key in `assembling`).
    pub(crate) msg_key: Option<(u64, u64)>,
}

#[derive(Clone, Copy)]
pub(crate) enum Target {
    Unexp(usize),
    Req(usize),
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

pub(crate) struct State {
    pub(crate) uuid: u64,
    /// Process-unique worker id, carried by every [`EpHandle`](crate::EpHandle).
    pub(crate) id: u32,
    /// Shared with every [`Request`](crate::Request) handed out: its identity, and the handles
    /// dropped since the last progress call.
    pub(crate) req_shared: std::rc::Rc<crate::request::ReqShared>,
    pub(crate) cfg: UcpConfig,
    pub(crate) features: Features,
    pub(crate) clock: Box<dyn Clock>,
    pub(crate) mds: Vec<AnyMd>,
    pub(crate) info: Vec<IfaceInfo>,
    /// Some interface of `info` is `ep_only` (set once, with `info`).
    pub(crate) any_ep_only: bool,
    pub(crate) address: Vec<u8>,
    pub(crate) eps: Slab<Ep>,
    pub(crate) ep_gen: u32,
    pub(crate) by_uuid: crate::worker::peers::PeerIndex,
    pub(crate) by_uct: UctIndex,
    /// Transport endpoints per interface (index as `info`): interfaces without any are polled
    /// only every [`IDLE_IFACE_PERIOD`] progress calls.
    pub(crate) iface_users: Vec<u32>,
    pub(crate) reqs: crate::worker::req_table::ReqTable,
    pub(crate) req_gen: u32,
    pub(crate) pool: Vec<Vec<u8>>,
    pub(crate) to_connect: Vec<usize>,
    /// Set when something is queued on `to_connect`, `pending_eps`, `flushes`, `closings`,
    /// `failed_notify`, `callbacks_due` or `rndv.gets` (and left set until `progress` finds them all empty
    /// again): one load tells a progress call whether it has queued work.
    pub(crate) more_work: bool,
    pub(crate) pending_eps: Vec<usize>,
    pub(crate) flushes: Vec<usize>,
    pub(crate) failed_notify: Vec<usize>,
    pub(crate) next_msg_id: u64,
    pub(crate) scratch: Vec<u8>,
    /// Reused buffer for the remote key an RTS carries (see [`State::rts_rkey`]).
    pub(crate) rkey_scratch: Vec<u8>,
    /// The worker's timers (keepalive, close deadlines).
    pub(crate) timers: crate::worker::timers::Timers,
    /// The earliest timer deadline (`Duration::MAX` without timers): progress runs the timers
    /// once `now_cache` reaches it.
    pub(crate) next_timer: Duration,
    /// The clock as read at the start of the current (or last) progress call: message
    /// timestamps for keepalive use it, so the data path reads no clock per message.
    pub(crate) now_cache: Duration,
    /// `now_cache` as a [`Stamp`], what endpoints note as their last send and receive times.
    pub(crate) now_stamp: Stamp,
    /// Set when the worker may have slept (`arm`): the next progress call reads the clock.
    pub(crate) clock_stale: bool,
    pub(crate) malformed_unknown: u64,
    pub(crate) stats: ProtoStats,
    /// User active messages: the handlers.
    pub(crate) am: crate::am::AmState,
    pub(crate) regions: crate::rma::Regions,
    /// Atomics: how many went which way.
    pub(crate) amo: crate::amo::AmoState,
    pub(crate) quarantine: Vec<Vec<u8>>,
    /// Finished requests whose callback or token is due at the end of this progress call.
    pub(crate) callbacks_due: Vec<usize>,
    /// Results of token requests, waiting for `take_done_tokens`.
    pub(crate) tokens_done: Vec<(u64, Completion)>,
    /// Where the results of hook requests go (`None`: to `tokens_done`, like a token's).
    pub(crate) completion_hook: Option<crate::worker::request::CompletionHook>,
    pub(crate) closings: Vec<Closing>,
    /// Tag matching: the matcher and the unexpected messages.
    pub(crate) tag: crate::tag::state::TagState,
    /// Tag offload (see `tag_offload`).
    pub(crate) tm: crate::tag::offload::TmState,
    /// Rendezvous: the pool of rendezvous boxes, the reads in progress.
    pub(crate) rndv: crate::rndv::RndvState,
    /// The distinct protocol configurations of the endpoints (see [`State::intern_proto`]).
    pub(crate) protos: Vec<Rc<ProtoConfig>>,
}

pub(crate) const POOL_MAX: usize = 64;
/// Distinct protocol configurations [`State::intern_proto`] keeps.
pub(crate) const PROTOS_MAX: usize = 32;
pub(crate) const POOL_BUF_MAX: usize = 1 << 20;

/// A zeroed buffer of `len` bytes for data a peer announced, or `NoMemory` when the allocator
/// refuses it (a peer's size must not abort the process). Zeroed pages come from the allocator
/// lazily, as `vec![0; len]` does.
pub(crate) fn zeroed_buf(len: usize) -> Result<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len)
        .map_err(|_| Error::NoMemory(format!("{len} bytes cannot be allocated")))?;
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return Err(Error::NoMemory(format!(
            "cannot allocate {len} bytes for a message a peer announced"
        )));
    }
    // SAFETY: `p` comes from the global allocator with the layout of `len` u8s (capacity
    // `len`), and all `len` bytes are initialised (zero).
    Ok(unsafe { Vec::from_raw_parts(p, len, len) })
}

pub(crate) enum SendData<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
    /// Caller memory that stays valid and unchanged until the send completes (see
    /// `Worker::tag_send_raw`): a request reads it in place instead of copying it.
    Raw(&'a [u8]),
}

impl SendData<'_> {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            SendData::Borrowed(b) | SendData::Raw(b) => b,
            SendData::Owned(v) => v,
        }
    }
}

impl State {
    pub(crate) fn now(&self) -> Duration {
        self.clock.now()
    }

    /// `p` shared: the endpoints with the same thresholds hold one copy (the few distinct ones
    /// are kept; past [`PROTOS_MAX`] of them, a new copy each). Its eager-short limit is
    /// derived again here (`tm_adjust_proto` may have moved `tag_rndv_thresh`).
    pub(crate) fn intern_proto(&mut self, p: ProtoConfig) -> Rc<ProtoConfig> {
        let p = p.with_tag_short_lim();
        if let Some(r) = self.protos.iter().find(|r| ***r == p) {
            return r.clone();
        }
        let r = Rc::new(p);
        if self.protos.len() < PROTOS_MAX {
            self.protos.push(r.clone());
        }
        r
    }

    pub(crate) fn get_buf(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_default()
    }

    pub(crate) fn put_buf(&mut self, mut v: Vec<u8>) {
        if v.capacity() <= POOL_BUF_MAX && self.pool.len() < POOL_MAX {
            v.clear();
            self.pool.push(v);
        }
    }

    /// The rendezvous state of send `key`, taken from the pool (or allocated) on first use.
    /// Internal invariant, as [`State::send_mut`].
    #[allow(clippy::unreachable)]
    pub(crate) fn send_rndv(&mut self, key: usize) -> &mut Rndv {
        match &mut self.reqs[key].kind {
            ReqKind::Send(s) => rndv_in(&mut s.rndv, &mut self.rndv.pool),
            _ => unreachable!("request {key} is not a send"),
        }
    }

    /// The rendezvous state of receive `key`, as [`State::send_rndv`].
    #[allow(clippy::unreachable)]
    pub(crate) fn recv_rndv(&mut self, key: usize) -> &mut Rndv {
        match &mut self.reqs[key].kind {
            ReqKind::Recv(r) => rndv_in(&mut r.rndv, &mut self.rndv.pool),
            _ => unreachable!("request {key} is not a receive"),
        }
    }
}

/// The box in `slot`, filled from `pool` (or allocated) when empty.
#[allow(clippy::vec_box)]
fn rndv_in<'a>(slot: &'a mut Option<Box<Rndv>>, pool: &mut Vec<Box<Rndv>>) -> &'a mut Rndv {
    slot.get_or_insert_with(|| pool.pop().unwrap_or_default())
}
