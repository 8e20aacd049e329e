//! The worker: owns the transport interfaces, the endpoints, the requests and tag matching, and
//! drives every protocol from `progress()`.
//!
//! Peers are not trusted. A message that names one of our requests (SYNC_ACK, ATS, RTR,
//! RNDV_DATA, ATP, ATOMIC_REP) is checked by `State::peer_req` against the request's owning
//! endpoint, kind and stage before anything is touched; a mismatch fails the endpoint that sent
//! it and nothing else. Request ids on the wire are scrambled with a secret drawn per endpoint,
//! so one peer cannot name another endpoint's requests. No `unwrap`, `expect`, `unreachable!`
//! or `panic!` is allowed here outside tests (the lint below); the two request accessors that
//! assert a kind are internal invariants, documented where they are allowed.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::address::{TlAddress, WorkerAddress};
use crate::config::UcpConfig;
use crate::context::{Context, Features};
use crate::request::{Completion, Op, Request};
use crate::rma::{MemMap, Rkey, RkeyBundle};
use crate::tag_match::TagMatcher;
use crate::wire::{
    am_id, split_prefix, EagerFirstHdr, EagerHdr, EagerSyncHdr, FragHdr, Msg, RemoteBuf, ReqHdr,
    RtrHdr, RtrMode, RtsHdr, NO_REQ,
};
use crate::wire::{AtomicRepHdr, AtomicReqHdr, EpAddrHdr, UserAmHdr, PREFIX_LEN};
use crate::wireup::{
    select_lanes, Admit, AmSwitchGate, LaneSelection, LocalTl, ProtoConfig, RndvScheme,
};
use slab::Slab;
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::time::Duration;
use ucs::config::ConfigVar;
use ucs::time::{Clock, MonotonicClock};
use ucs::{Error, Outcome, Result};
use uct::{
    AnyEp, AnyIface, AnyMd, CompletionId, Endpoint as _, EpId, EventFlags, EventSink, Iface as _,
    IfaceAttr, IfaceFlags, Iov, MdFlags, MemHandle, MemoryDomain as _, RemoteKey,
};

#[path = "peer_req.rs"]
mod peer_req;
#[path = "raw_mem.rs"]
mod raw_mem;
#[path = "tag_offload.rs"]
mod tag_offload;
use peer_req::{Named, PEER_ID_MASK};
use raw_mem::{RecvBuf, SendBuf};
pub use tag_offload::{TmStats, TM_ENABLE, TM_THRESH};

/// Hashes worker uuids (random 64-bit numbers) with one multiply instead of SipHash: every
/// arriving message looks its sender up by uuid, and SipHash cost about 150 instructions of it.
type UuidHash = std::hash::BuildHasherDefault<UuidHasher>;

/// The [`std::hash::Hasher`] of [`UuidHash`]: a Fibonacci multiply, folding the high half in so
/// both the bucket index (low bits) and the control tag (high bits) depend on every input bit.
#[derive(Default)]
struct UuidHasher(u64);

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

/// An endpoint of a worker: a handle valid with the worker that created it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpHandle {
    idx: u32,
    gen: u32,
}

/// A user active-message handler: gets the sending endpoint, the user header and the data, which
/// it owns (keep it as long as needed; [`Worker::am_data_release`] recycles it).
pub type AmHandler = Box<dyn FnMut(EpHandle, &[u8], Vec<u8>)>;

/// An endpoint error handler: called from `progress()` once, when the endpoint fails.
pub type ErrHandler = Box<dyn FnMut(EpHandle, &Error)>;

/// Parameters of [`Worker::ep_create`].
#[derive(Default)]
pub struct EpParams {
    /// Called once when the endpoint fails (peer died, keepalive timeout, protocol error).
    pub err_handler: Option<ErrHandler>,
}

/// How [`Worker::ep_close`] closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseMode {
    /// Finish every outstanding send, tell the peer, then close.
    Flush,
    /// Fail outstanding requests with `Canceled` and close at once.
    Force,
}

/// Information about an unexpected message found by [`Worker::tag_probe`].
#[derive(Debug, PartialEq, Eq)]
pub struct ProbeInfo {
    /// The message's tag.
    pub tag: u64,
    /// Its length.
    pub len: usize,
    /// With `remove`: the message, to receive with [`Worker::tag_msg_recv`].
    pub msg: Option<Message>,
}

/// An unexpected message taken off the queue by a removing probe.
#[must_use = "receive it with tag_msg_recv, or its data stays in the worker"]
#[derive(Debug, PartialEq, Eq)]
pub struct Message {
    uid: usize,
}

/// Counters of the protocols a worker used (for tests and debugging).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProtoStats {
    /// Single-fragment eager messages sent.
    pub eager_single: u64,
    /// Multi-fragment eager messages sent.
    pub eager_multi: u64,
    /// Eager messages sent zero-copy from the caller's vector.
    pub eager_zcopy: u64,
    /// Rendezvous requests (RTS) sent.
    pub rndv_rts: u64,
    /// Rendezvous received with get_zcopy.
    pub rndv_get: u64,
    /// Rendezvous received by asking for put_zcopy.
    pub rndv_put: u64,
    /// Rendezvous received over the AM pipeline.
    pub rndv_am: u64,
    /// Endpoints failed.
    pub ep_failures: u64,
    /// Endpoints whose AM lane moved to a connect-to-endpoint lane (rc_verbs) after wire-up.
    pub am_lane_switches: u64,
    /// Messages that arrived on a peer's new AM lane before its lane-switch marker and were
    /// held until it (see [`crate::wireup::AmSwitchGate`]).
    pub am_switch_held: u64,
    /// Messages that named a request their sender may not touch (unknown, finished, another
    /// endpoint's, or of the wrong kind or stage): each failed its sender's endpoint and left
    /// the request named alone.
    pub forged_ids: u64,
}

// ---------------------------------------------------------------------------------------------
// Internal state

const COMP_GET: u64 = 1;
const COMP_PUT: u64 = 2;
const COMP_FLUSH: u64 = 3;
const COMP_ATOMIC: u64 = 4;
const COMP_ZCOPY: u64 = 5;

fn comp_id(kind: u64, wire: u64) -> CompletionId {
    kind << 60 | (wire & ((1 << 60) - 1))
}

struct Lanes {
    uct: Vec<(usize, AnyEp)>,
    am: usize,
    rma: Option<usize>,
    amo: Option<usize>,
    /// The atomic lane chosen but not yet connected: a transport the AM and RMA lanes do not
    /// use gets its endpoint when a remote key is first unpacked (so a tag-only endpoint over
    /// shared memory opens no tcp connection just for atomics).
    amo_later: Option<crate::wireup::LanePick>,
    /// The RMA lane over a connect-to-endpoint transport (rc_verbs) while its endpoint address
    /// exchange runs over the AM lane; it joins `uct` as `rma` once both sides are connected.
    rma_wait: Option<WaitLane>,
    /// The connected connect-to-endpoint lane (index in `uct`) the AM lane moves to as soon as
    /// no message is pending on the old one (see `State::am_switch_try`).
    am_next: Option<usize>,
    /// The old AM lane (index in `uct`) after a switch, when no other purpose uses it: it no
    /// longer counts as a user of its interface (polled like an idle one), but stays connected
    /// (its failure still fails the endpoint).
    released: Option<usize>,
}

/// A connect-to-endpoint lane being wired up (see [`EpAddrHdr`]).
struct WaitLane {
    /// Local interface index.
    li: usize,
    /// The peer's transport entry index (its device address).
    remote: usize,
    /// The unconnected (or connected, not yet confirmed) endpoint.
    ep: AnyEp,
    /// `connect_to_ep` done on our side.
    connected: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum EpState {
    Connecting,
    Ready,
    Failed(Error),
    Closed,
}

enum Pending {
    Req(usize),
    Ctl { id: u8, body: Vec<u8> },
}

struct Ep {
    gen: u32,
    /// Scrambles the ids of this endpoint's requests on the wire (see [`State::peer_id`]).
    secret: u64,
    uuid: u64,
    addr: WorkerAddress,
    lanes: Option<Lanes>,
    proto: Option<ProtoConfig>,
    state: EpState,
    pending: VecDeque<Pending>,
    in_pending_list: bool,
    err_handler: Option<ErrHandler>,
    stream_rx: VecDeque<u8>,
    stream_waiters: VecDeque<usize>,
    close_acked: bool,
    /// A peer endpoint address that arrived before this endpoint's lanes were created.
    peer_ep_addr: Option<(bool, Vec<u8>)>,
    /// Receive side of the peer's AM lane switch.
    rx_gate: AmSwitchGate,
    last_tx: Duration,
    last_rx: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendStage {
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

struct SendReq {
    tag: u64,
    data: SendBuf,
    give_back: bool,
    sync: bool,
    stage: SendStage,
    offset: usize,
    msg_id: u64,
    memh: Option<MemHandle>,
    rkey: Option<RemoteKey>,
    remote_addr: u64,
    rreq: u64,
    inflight: usize,
    rts_sent: bool,
    /// A user `put` (no rendezvous messages around it).
    user_rma: bool,
    /// User active message sent by rendezvous: id and user header.
    am: Option<(u16, Vec<u8>)>,
    /// A synchronous send whose SYNC_ACK came while fragments were still going out: it
    /// finishes as soon as they are out.
    acked: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecvStage {
    Posted,
    Eager,
    RndvGet,
    RndvWait,
}

struct RecvReq {
    tag: u64,
    mask: u64,
    buf: RecvBuf,
    stage: RecvStage,
    sender_tag: u64,
    total: usize,
    received: usize,
    memh: Option<MemHandle>,
    rkey: Option<RemoteKey>,
    remote_addr: u64,
    sreq: u64,
    offset: usize,
    inflight: usize,
    /// A user `get` (no rendezvous messages around it).
    user_rma: bool,
    /// Data of a user active message arriving by rendezvous: id and user header.
    am: Option<(u16, Vec<u8>)>,
}

enum ReqKind {
    Send(SendReq),
    Recv(RecvReq),
    StreamRecv { buf: Vec<u8>, filled: usize },
    Atomic { value: u64 },
    Close,
    Flush { eps_left: usize, retry: Vec<usize> },
}

struct Req {
    gen: u32,
    ep: Option<usize>,
    kind: ReqKind,
    done: Option<Completion>,
    /// Invoked with the result when the request finishes (instead of `request_take`).
    callback: Option<RequestCallback>,
}

/// A completion callback set with [`Worker::request_set_callback`].
pub type RequestCallback = Box<dyn FnOnce(Completion)>;

enum UnexpKind {
    Eager {
        data: Vec<u8>,
        total: usize,
        sreq: u64,
    },
    Rts {
        sreq: u64,
        len: usize,
        addr: u64,
        tl: String,
        rkey: Vec<u8>,
    },
}

struct Unexp {
    ep: usize,
    tag: u64,
    kind: UnexpKind,
    /// Multi-fragment message still being assembled (key in `assembling`).
    msg_key: Option<(u64, u64)>,
}

#[derive(Clone, Copy)]
enum Target {
    Unexp(usize),
    Req(usize),
}

struct IfaceInfo {
    tl_name: &'static str,
    dev_name: String,
    attr: IfaceAttr,
    md_reg: bool,
    /// Connects endpoint to endpoint only (rc_verbs): a peer's AM lane after its switch.
    ep_only: bool,
}

struct State {
    uuid: u64,
    cfg: UcpConfig,
    features: Features,
    clock: Box<dyn Clock>,
    mds: Vec<AnyMd>,
    info: Vec<IfaceInfo>,
    address: Vec<u8>,
    eps: Slab<Ep>,
    ep_gen: u32,
    by_uuid: HashMap<u64, usize, UuidHash>,
    by_uct: HashMap<(usize, u32), usize>,
    /// Transport endpoints per interface (index as `info`): interfaces without any are polled
    /// only every [`IDLE_IFACE_PERIOD`] progress calls.
    iface_users: Vec<u32>,
    reqs: Slab<Req>,
    req_gen: u32,
    matcher: TagMatcher,
    unexp: Slab<Unexp>,
    assembling: HashMap<(u64, u64), Target>,
    pool: Vec<Vec<u8>>,
    to_connect: Vec<usize>,
    pending_eps: Vec<usize>,
    flushes: Vec<usize>,
    failed_notify: Vec<usize>,
    next_msg_id: u64,
    scratch: Vec<u8>,
    /// Reused buffer for the remote key an RTS carries (see [`State::rts_rkey`]).
    rkey_scratch: Vec<u8>,
    next_timer: Duration,
    /// The clock as read at the start of the current (or last) progress call: message
    /// timestamps for keepalive use it, so the data path reads no clock per message.
    now_cache: Duration,
    malformed_unknown: u64,
    stats: ProtoStats,
    am_handlers: HashMap<u16, AmHandler>,
    regions: crate::rma::Regions,
    amo_hw: u64,
    amo_emulated: u64,
    quarantine: Vec<Vec<u8>>,
    /// Finished requests whose callback is due at the end of this progress call.
    callbacks_due: Vec<usize>,
    closings: Vec<Closing>,
    /// Tag offload (see `tag_offload`).
    tm: tag_offload::TmState,
}

/// A ucp worker: a progress engine with its own transport interfaces, endpoints and requests.
///
/// One thread at a time: every method takes `&mut self` and no lock is taken on the data path.
/// Its transports are thread-bound (it is not `Send`); for several threads use [`crate::MtWorker`].
pub struct Worker {
    ifaces: Vec<AnyIface>,
    epfd: Option<RawFd>,
    st: State,
    /// Progress calls so far (wrapping): paces the polling of idle interfaces.
    tick: u32,
    /// Per interface, the tick of its last event: an interface without endpoints that had
    /// one recently (a peer uses it to reach us) is polled on every call for a while.
    last_event: Vec<u32>,
    /// The next progress call polls every interface (set after an event-fd wakeup or a busy
    /// arm, whose event may be on an idle interface).
    poll_all: bool,
}

/// An interface no endpoint uses yet (it may still receive a peer's first wire-up message or
/// connection) is polled on one progress call in this many: polling an idle tcp interface costs
/// system calls, several times the cost of a whole shared-memory message.
const IDLE_IFACE_PERIOD: u32 = 32;
/// For this many progress calls after an event, an interface without endpoints is polled on
/// every call.
const IDLE_IFACE_RECENT: u32 = 4096;

fn new_uuid() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::collections::hash_map::RandomState::new().hash_one((std::process::id(), t, n))
}

const POOL_MAX: usize = 64;
const POOL_BUF_MAX: usize = 1 << 20;

impl Worker {
    /// Creates a worker on the real monotonic clock.
    pub fn new(ctx: &Context) -> Result<Self> {
        Self::with_clock(ctx, MonotonicClock::new())
    }

    /// Creates a worker whose timers (keepalive) read `clock`; tests pass a
    /// [`ucs::time::ManualClock`].
    pub fn with_clock(ctx: &Context, clock: impl Clock + 'static) -> Result<Self> {
        let mut ifaces = Vec::new();
        let mut mds = Vec::new();
        let mut info = Vec::new();
        let mut failures = Vec::new();
        for r in ctx.resources() {
            match uct::open(r.tl_name, &r.device.name) {
                Ok((md, iface)) => {
                    info.push(IfaceInfo {
                        tl_name: r.tl_name,
                        dev_name: r.device.name.clone(),
                        attr: iface.attr().clone(),
                        md_reg: md.attr().flags.contains(MdFlags::REG),
                        ep_only: crate::wireup::connect_to_ep_only(iface.attr()),
                    });
                    mds.push(md);
                    ifaces.push(iface);
                }
                Err(e) => {
                    tracing::warn!(tl = r.tl_name, dev = %r.device.name, "cannot open: {e}");
                    failures.push(format!("{}/{}: {e}", r.tl_name, r.device.name));
                }
            }
        }
        if ifaces.is_empty() {
            return Err(Error::NoDevice(format!(
                "no transport interface could be opened: {}",
                failures.join("; ")
            )));
        }
        let uuid = new_uuid();
        let addr = WorkerAddress {
            uuid,
            tls: ifaces
                .iter()
                .map(|i| TlAddress {
                    tl_name: i.tl_name().to_owned(),
                    device_addr: i.device_address().to_vec(),
                    iface_addr: i.iface_address().to_vec(),
                })
                .collect(),
        };
        let address = addr.to_bytes()?;
        let now = clock.now();
        let n_ifaces = ifaces.len();
        let epfd = if ctx.features().contains(Features::WAKEUP) {
            Some(make_epoll(&ifaces)?)
        } else {
            None
        };
        let mut w = Worker {
            ifaces,
            epfd,
            st: State {
                uuid,
                cfg: ctx.config().clone(),
                features: ctx.features(),
                clock: Box::new(clock),
                mds,
                info,
                address,
                eps: Slab::new(),
                ep_gen: 0,
                by_uuid: HashMap::default(),
                by_uct: HashMap::new(),
                iface_users: vec![0; n_ifaces],
                reqs: Slab::new(),
                req_gen: 0,
                matcher: TagMatcher::new(),
                unexp: Slab::new(),
                assembling: HashMap::new(),
                pool: Vec::new(),
                to_connect: Vec::new(),
                pending_eps: Vec::new(),
                flushes: Vec::new(),
                failed_notify: Vec::new(),
                next_msg_id: 1,
                scratch: Vec::new(),
                rkey_scratch: Vec::new(),
                now_cache: now,
                next_timer: now,
                malformed_unknown: 0,
                stats: ProtoStats::default(),
                am_handlers: HashMap::new(),
                regions: Default::default(),
                amo_hw: 0,
                amo_emulated: 0,
                quarantine: Vec::new(),
                callbacks_due: Vec::new(),
                closings: Vec::new(),
                tm: tag_offload::TmState::new(),
            },
            tick: 0,
            last_event: vec![0; n_ifaces],
            poll_all: true,
        };
        tag_offload::TmState::init(&w.ifaces, &mut w.st)?;
        Ok(w)
    }

    /// This worker's packed address, for a peer's [`Worker::ep_create`].
    pub fn address(&self) -> &[u8] {
        &self.st.address
    }

    /// This worker's uuid (also the first field of its address).
    pub fn uuid(&self) -> u64 {
        self.st.uuid
    }

    /// Features of the context this worker belongs to.
    pub fn features(&self) -> Features {
        self.st.features
    }

    /// Names of the opened interfaces, as `tl/device`.
    pub fn interfaces(&self) -> Vec<String> {
        self.st
            .info
            .iter()
            .map(|i| format!("{}/{}", i.tl_name, i.dev_name))
            .collect()
    }

    /// Protocol counters.
    pub fn stats(&self) -> ProtoStats {
        self.st.stats
    }

    /// Number of malformed messages dropped because their sender could not be identified.
    pub fn malformed_dropped(&self) -> u64 {
        self.st.malformed_unknown
    }

    /// Creates an endpoint to the worker whose packed address is `peer_address`: picks lanes,
    /// connects, and sends this worker's address so the peer can reply.
    pub fn ep_create(&mut self, peer_address: &[u8], params: EpParams) -> Result<EpHandle> {
        let addr = WorkerAddress::decode(peer_address)?;
        if let Some(&idx) = self.st.by_uuid.get(&addr.uuid) {
            let ep = &mut self.st.eps[idx];
            if matches!(ep.state, EpState::Ready | EpState::Connecting) {
                if params.err_handler.is_some() {
                    ep.err_handler = params.err_handler;
                }
                return Ok(EpHandle {
                    idx: idx as u32,
                    gen: ep.gen,
                });
            }
        }
        let idx = self.st.new_ep(addr, params.err_handler);
        if let Err(e) = connect_ep(&mut self.ifaces, &mut self.st, idx) {
            let ep = self.st.eps.remove(idx);
            self.st.by_uuid.remove(&ep.uuid);
            return Err(e);
        }
        let body = self.st.address.clone();
        self.st.send_ctl(idx, am_id::WIREUP, &body)?;
        self.st.ep_lane_start(idx)?;
        Ok(EpHandle {
            idx: idx as u32,
            gen: self.st.eps[idx].gen,
        })
    }

    /// Client side of client/server: connects to a [`crate::Listener`] on `server`, exchanges
    /// worker addresses, and creates the endpoint. A rejected request gives `ConnectionReset`.
    pub fn connect(&mut self, server: std::net::SocketAddr, params: EpParams) -> Result<EpHandle> {
        let addr = crate::listener::client_exchange(server, &self.st.address)?;
        self.ep_create(&addr, params)
    }

    /// Server side: accepts a connection request and creates the endpoint to the client.
    pub fn accept(&mut self, req: crate::ConnRequest, params: EpParams) -> Result<EpHandle> {
        let mut req = req;
        let ep = match self.ep_create(&req.client_address, params) {
            Ok(ep) => ep,
            Err(e) => {
                let _ = crate::listener::write_reject(&mut req.stream, &e.to_string());
                return Err(e);
            }
        };
        let addr = self.st.address.clone();
        crate::listener::write_msg(&mut req.stream, crate::listener::CmKind::Accept, &addr)?;
        Ok(ep)
    }

    /// True when this worker has a usable endpoint to the worker whose packed address is
    /// `peer_address`: one created here, or one created when that worker's wire-up arrived.
    /// A side that knows its peer is creating an endpoint to it can wait for this before its
    /// own `ep_create`, which then returns that endpoint and rides the peer's connections
    /// (tcp: one two-way connection instead of one per direction).
    pub fn has_ep_to(&self, peer_address: &[u8]) -> Result<bool> {
        let addr = WorkerAddress::decode(peer_address)?;
        Ok(self.st.by_uuid.get(&addr.uuid).is_some_and(|&idx| {
            matches!(self.st.eps[idx].state, EpState::Ready | EpState::Connecting)
        }))
    }

    /// The endpoint's state: `Ok` while usable, or the error that failed it.
    pub fn ep_status(&self, ep: EpHandle) -> Result<()> {
        let idx = self.st.ep_idx(ep)?;
        match &self.st.eps[idx].state {
            EpState::Failed(e) => Err(e.clone()),
            EpState::Closed => Err(Error::ConnectionReset("endpoint is closed".into())),
            _ => Ok(()),
        }
    }

    /// The endpoint's AM lane as `transport/device` (for example `rc_verbs/rxe0:1` once the
    /// lane moved there after wire-up); `Busy` while the endpoint is connecting.
    pub fn ep_am_lane(&self, ep: EpHandle) -> Result<String> {
        let idx = self.st.ep_idx(ep)?;
        let l = self.st.eps[idx]
            .lanes
            .as_ref()
            .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))?;
        let i = &self.st.info[l.uct[l.am].0];
        Ok(format!("{}/{}", i.tl_name, i.dev_name))
    }

    /// True once the endpoint's wire-up is complete: its lanes exist, a connect-to-endpoint
    /// lane (rc_verbs) is connected or given up, and a due AM lane switch happened. Until then
    /// messages go over the wire-up lane (tcp); remote keys unpacked before an RMA lane joins
    /// cannot use it, so one-sided users wait for this first.
    pub fn ep_wired_up(&self, ep: EpHandle) -> Result<bool> {
        let idx = self.st.ep_idx(ep)?;
        self.st.ep_usable(idx)?;
        Ok(self.st.eps[idx]
            .lanes
            .as_ref()
            .is_some_and(|l| l.rma_wait.is_none() && l.am_next.is_none()))
    }

    /// The protocol table of the endpoint (what `RUCX_PROTO_INFO=y` prints).
    pub fn ep_proto_info(&self, ep: EpHandle) -> Result<String> {
        let idx = self.st.ep_idx(ep)?;
        self.st.proto_table(idx)
    }

    /// The endpoint's protocol thresholds.
    pub fn ep_proto_config(&self, ep: EpHandle) -> Result<ProtoConfig> {
        let idx = self.st.ep_idx(ep)?;
        self.st.eps[idx]
            .proto
            .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))
    }

    /// Sends a tagged message. Small messages are copied and finish at once; large ones (and any
    /// that meet back-pressure) are copied into a worker-owned buffer.
    pub fn tag_send(&mut self, ep: EpHandle, tag: u64, data: &[u8]) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.tag_send(idx, tag, SendData::Borrowed(data), false)
    }

    /// Sends a tagged message from a vector the worker takes and gives back in the completion's
    /// `buf`; rendezvous then reads it in place without a copy.
    pub fn tag_send_vec(&mut self, ep: EpHandle, tag: u64, data: Vec<u8>) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.tag_send(idx, tag, SendData::Owned(data), false)
    }

    /// Sends a tagged message that completes only when the receiver has matched it.
    pub fn tag_send_sync(&mut self, ep: EpHandle, tag: u64, data: &[u8]) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.tag_send(idx, tag, SendData::Borrowed(data), true)
    }

    /// Sends `len` bytes at `offset` of `map` (from [`Worker::mem_map`]) as a tagged message.
    ///
    /// When `map` is a shared-memory segment (posix, sysv) and the message goes by rendezvous,
    /// the data is read in place: the transport gets the segment's memory handle, so a peer on
    /// this host copies straight from the mapped segment into its posted receive (one memory
    /// copy, no cross-memory read), and the software rendezvous fetches it from the segment
    /// (get over the RMA lane). Heap mappings (no shared-memory transport, e.g. tcp alone)
    /// are read in place too, through their registrations: tcp sends the payload straight
    /// from the mapping. Eager sizes and back-pressure copy the bytes like
    /// [`Worker::tag_send`]. The send is not synchronous (it may complete before the receiver
    /// matched it, as [`Worker::tag_send`]).
    ///
    /// The request keeps the memory alive until it completes, so dropping `map` early is
    /// safe; the bytes must not be changed until completion (the peer may see either). A range
    /// outside the mapping, or an empty one, gives [`Error::InvalidParam`].
    pub fn tag_send_mapped(
        &mut self,
        ep: EpHandle,
        tag: u64,
        map: &MemMap,
        offset: usize,
        len: usize,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.tag_send_mapped(idx, tag, map, offset, len)
    }

    /// Posts a receive for `tag` under `mask` into `buf` (its length is the capacity). The
    /// completion gives the buffer back with the data in `buf[..len]`.
    pub fn tag_recv(&mut self, buf: Vec<u8>, tag: u64, mask: u64) -> Result<Op> {
        let op = self.st.tag_recv(buf, tag, mask)?;
        tag_offload::after_post(&mut self.ifaces, &mut self.st, &op);
        Ok(op)
    }

    /// Looks for an unexpected message that fits; with `remove` it is taken off the queue and
    /// must be received with [`Worker::tag_msg_recv`].
    pub fn tag_probe(&mut self, tag: u64, mask: u64, remove: bool) -> Option<ProbeInfo> {
        let (mtag, uid) = self.st.matcher.probe(tag, mask)?;
        let len = match &self.st.unexp[uid as usize].kind {
            UnexpKind::Eager { total, .. } => *total,
            UnexpKind::Rts { len, .. } => *len,
        };
        let msg = if remove {
            let got = self.st.matcher.take_unexpected(tag, mask);
            debug_assert_eq!(got, Some(uid));
            Some(Message { uid: uid as usize })
        } else {
            None
        };
        Some(ProbeInfo {
            tag: mtag,
            len,
            msg,
        })
    }

    /// Receives a message taken by a removing probe into `buf`.
    pub fn tag_msg_recv(&mut self, buf: Vec<u8>, msg: Message) -> Result<Op> {
        let key = self.st.new_recv(buf, msg.uid as u64, 0);
        self.st.recv_from_unexp(key, msg.uid);
        Ok(self.st.op_of(key))
    }

    /// Sets the handler of user active-message `id` (replacing any previous one).
    pub fn am_set_handler(
        &mut self,
        id: u16,
        handler: impl FnMut(EpHandle, &[u8], Vec<u8>) + 'static,
    ) {
        self.st.am_handlers.insert(id, Box::new(handler));
    }

    /// Gives a buffer an active-message handler kept back to the worker's pool.
    pub fn am_data_release(&mut self, data: Vec<u8>) {
        self.st.put_buf(data);
    }

    /// Sends user active message `id` with a header and data. Data larger than one fragment
    /// (or above the rendezvous threshold) goes by rendezvous.
    pub fn am_send(&mut self, ep: EpHandle, id: u16, header: &[u8], data: &[u8]) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.am_send(idx, id, header, SendData::Borrowed(data))
    }

    /// Like [`Worker::am_send`], taking the data vector (given back in the completion).
    pub fn am_send_vec(
        &mut self,
        ep: EpHandle,
        id: u16,
        header: &[u8],
        data: Vec<u8>,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.am_send(idx, id, header, SendData::Owned(data))
    }

    /// Appends bytes to the endpoint's ordered stream.
    pub fn stream_send(&mut self, ep: EpHandle, data: &[u8]) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.stream_send(idx, SendData::Borrowed(data))
    }

    /// Receives exactly `buf.len()` stream bytes from the endpoint (in order, after earlier
    /// stream receives); the completion gives the buffer back.
    pub fn stream_recv(&mut self, ep: EpHandle, buf: Vec<u8>) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.stream_recv(idx, buf)
    }

    /// Stream bytes received and not yet consumed on the endpoint.
    pub fn stream_available(&self, ep: EpHandle) -> Result<usize> {
        let idx = self.st.ep_idx(ep)?;
        Ok(self.st.eps[idx].stream_rx.len())
    }

    /// Allocates `len` zeroed bytes peers can access remotely (`ucp_mem_map` allocate mode).
    ///
    /// With a shared-memory transport (posix, sysv) the memory is a shared segment from its
    /// memory domain, so peers on this host map it and put/get/atomics on it are plain memory
    /// accesses; it is also registered with every transport that registers memory (cma, tcp),
    /// and the packed remote key carries every one of those keys.
    pub fn mem_map(&mut self, len: usize) -> Result<MemMap> {
        if len == 0 {
            return Err(Error::InvalidParam("cannot map 0 bytes".into()));
        }
        let st = &self.st;
        let mut shared = None;
        // Domains whose allocations peers map; `self` (reachable only from this worker) last.
        let mut order: Vec<usize> = (0..st.info.len()).collect();
        order.sort_by_key(|&i| st.info[i].tl_name == "self");
        for i in order {
            let info = &st.info[i];
            let f = st.mds[i].attr().flags;
            if !f.contains(MdFlags::ALLOC | MdFlags::RKEY_PTR) || len > st.mds[i].attr().max_alloc {
                continue;
            }
            match st.mds[i].mem_alloc(len) {
                Ok(m) => {
                    let mut packed = Vec::new();
                    match st.mds[i].rkey_pack(&m, &mut packed) {
                        Ok(()) => {
                            shared = Some((info.tl_name, m, packed));
                            break;
                        }
                        Err(e) => tracing::debug!("{} cannot pack its key: {e}", info.tl_name),
                    }
                }
                Err(e) => tracing::debug!("{} cannot allocate {len} bytes: {e}", info.tl_name),
            }
        }
        let (ptr, backing) = match &shared {
            Some((_, m, _)) => {
                let ptr = NonNull::new(m.addr())
                    .ok_or_else(|| Error::NoMemory("shared segment at null".into()))?;
                // Segments are fresh mappings (zero-filled by the kernel).
                (
                    ptr,
                    crate::rma::Backing::Shared {
                        _segment: m.clone(),
                    },
                )
            }
            None => MemMap::heap(len)?,
        };
        let mut keys: Vec<_> = shared.into_iter().collect();
        // SAFETY: the MemMap owns the memory and drops these handles before releasing it.
        unsafe { self.st.register_all(ptr, len, &mut keys) };
        MemMap::new(ptr, len, backing, self.st.regions.clone(), keys)
    }

    /// Maps the user's buffer for remote access (`ucp_mem_map` of existing memory): it is
    /// registered with every transport that registers memory, so peers reach it through cma
    /// on this host or the network. The mapping owns the vector; `MemMap::into_vec` gives it
    /// back.
    pub fn mem_map_vec(&mut self, mut buf: Vec<u8>) -> Result<MemMap> {
        let len = buf.len();
        let ptr = NonNull::new(buf.as_mut_ptr())
            .filter(|_| len > 0)
            .ok_or_else(|| Error::InvalidParam("cannot map an empty buffer".into()))?;
        let mut keys = Vec::new();
        // SAFETY: the vector's heap block does not move while the MemMap owns it, and the
        // MemMap drops the registrations before the vector.
        unsafe { self.st.register_all(ptr, len, &mut keys) };
        MemMap::new(
            ptr,
            len,
            crate::rma::Backing::User(buf),
            self.st.regions.clone(),
            keys,
        )
    }

    /// Unpacks a peer's packed remote keys (from its `MemMap::rkey_packed`) for use on `ep`.
    ///
    /// When a lane of the endpoint is a shared-memory transport whose key is in the bundle,
    /// the peer's segment is mapped here and put/get/atomics go through it.
    pub fn rkey_unpack(&mut self, ep: EpHandle, packed: &[u8]) -> Result<Rkey> {
        let idx = self.st.ep_idx(ep)?;
        let bundle = RkeyBundle::decode(packed)?;
        self.connect_amo_lane(idx);
        let lanes = self.st.eps[idx]
            .lanes
            .as_ref()
            .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))?;
        let key_for = |li: usize| -> Option<uct::RemoteKey> {
            let tl = self.st.info[li].tl_name;
            let (_, k) = bundle.entries.iter().find(|(t, _)| t == tl)?;
            self.st.mds[li].rkey_unpack(k).ok()
        };
        let unpack = |lane: Option<usize>| key_for(lanes.uct[lane?].0);
        let mapped = lanes.uct.iter().enumerate().find_map(|(pos, (li, _))| {
            let f = self.st.info[*li].attr.flags;
            if !f.contains(IfaceFlags::PUT_SHORT | IfaceFlags::PUT_BCOPY)
                || !f.contains(IfaceFlags::GET_SHORT | IfaceFlags::GET_BCOPY)
            {
                return None;
            }
            key_for(*li).filter(|k| k.is_mapped()).map(|k| (pos, k))
        });
        Ok(Rkey {
            ep: (ep.idx, ep.gen),
            rma: unpack(lanes.rma),
            amo: unpack(lanes.amo),
            mapped,
        })
    }

    /// Connects the endpoint's deferred atomic lane, if any. When the transport cannot connect,
    /// atomics stay emulated over the AM lane (they were correct either way).
    fn connect_amo_lane(&mut self, idx: usize) {
        let st = &mut self.st;
        let Some(l) = st.eps[idx].lanes.as_mut() else {
            return;
        };
        let Some(p) = l.amo_later.take() else {
            return;
        };
        let r = &st.eps[idx].addr.tls[p.remote];
        match self.ifaces[p.local].ep_create_connected(&r.device_addr, &r.iface_addr) {
            Ok(uep) => {
                let Some(l) = st.eps[idx].lanes.as_mut() else {
                    return;
                };
                l.uct.push((p.local, uep));
                l.amo = Some(l.uct.len() - 1);
                st.by_uct
                    .insert((p.local, l.uct[l.uct.len() - 1].1.id().0), idx);
                st.iface_users[p.local] += 1;
            }
            Err(e) => tracing::debug!(
                "atomic lane {} not connected, atomics are emulated: {e}",
                st.info[p.local].tl_name
            ),
        }
    }

    /// Writes `data` to `remote_addr` in the peer's mapping (completes locally; `ep_flush` for
    /// remote completion).
    pub fn put(&mut self, ep: EpHandle, data: &[u8], remote_addr: u64, rkey: &Rkey) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.rma(idx, RmaDir::Put(data), remote_addr, rkey)
    }

    /// Reads `buf.len()` bytes at `remote_addr` of the peer's mapping into `buf` (given back in
    /// the completion).
    pub fn get(&mut self, ep: EpHandle, buf: Vec<u8>, remote_addr: u64, rkey: &Rkey) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.rma(idx, RmaDir::Get(buf.into()), remote_addr, rkey)
    }

    /// A non-fetching atomic (`Add`, `And`, `Or`, `Xor`) on a 4- or 8-byte word of the peer's
    /// mapping.
    pub fn atomic_post(
        &mut self,
        ep: EpHandle,
        op: uct::AtomicOp,
        size: AmoSize,
        value: u64,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        if op == uct::AtomicOp::Swap {
            return Err(Error::InvalidParam("swap is fetch-only".into()));
        }
        let idx = self.st.ep_idx(ep)?;
        self.st.atomic(
            idx,
            AmoKind::Op(op),
            size,
            value,
            0,
            remote_addr,
            rkey,
            false,
        )
    }

    /// A fetching atomic; the old value is the completion's `value`.
    pub fn atomic_fetch(
        &mut self,
        ep: EpHandle,
        op: uct::AtomicOp,
        size: AmoSize,
        value: u64,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.atomic(
            idx,
            AmoKind::Op(op),
            size,
            value,
            0,
            remote_addr,
            rkey,
            true,
        )
    }

    /// Compare-and-swap; the old value is the completion's `value`.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_cswap(
        &mut self,
        ep: EpHandle,
        size: AmoSize,
        compare: u64,
        swap: u64,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.atomic(
            idx,
            AmoKind::Cswap,
            size,
            swap,
            compare,
            remote_addr,
            rkey,
            true,
        )
    }

    /// Atomics since creation: (through the transport, emulated over active messages).
    pub fn atomic_counts(&self) -> (u64, u64) {
        (self.st.amo_hw, self.st.amo_emulated)
    }

    /// True when the request has finished.
    pub fn request_test(&self, req: &Request) -> bool {
        match self.st.reqs.get(req.key as usize) {
            Some(r) if r.gen == req.gen => r.done.is_some(),
            _ => true,
        }
    }

    /// Takes a finished request's result, or gives the request back if it is still running.
    pub fn request_take(&mut self, req: Request) -> std::result::Result<Completion, Request> {
        match self.st.reqs.get(req.key as usize) {
            Some(r) if r.gen == req.gen && r.done.is_some() => {
                // Moving `done` out of the removed request (not `take` before the removal)
                // leaves less to drop.
                let r = self.st.reqs.remove(req.key as usize);
                Ok(r.done.unwrap_or_else(Completion::ok))
            }
            Some(r) if r.gen == req.gen => Err(req),
            _ => Ok(Completion {
                status: Err(Error::InvalidParam("request was already taken".into())),
                ..Completion::ok()
            }),
        }
    }

    /// Has `callback` invoked with the request's result when it finishes, during a later
    /// `progress()` call (at once, here, if it has already finished). The request is consumed:
    /// its result goes to the callback only (the handle stays usable for `request_cancel`). A
    /// stale or already taken request is an error.
    pub fn request_set_callback(
        &mut self,
        req: &Request,
        callback: impl FnOnce(Completion) + 'static,
    ) -> Result<()> {
        let key = req.key as usize;
        match self.st.reqs.get_mut(key) {
            Some(r) if r.gen == req.gen && r.done.is_none() => {
                r.callback = Some(Box::new(callback));
                Ok(())
            }
            Some(r) if r.gen == req.gen => {
                let r = self.st.reqs.remove(key);
                callback(r.done.unwrap_or_else(Completion::ok));
                Ok(())
            }
            _ => Err(Error::InvalidParam(
                "request was already taken or does not belong to this worker".into(),
            )),
        }
    }

    /// Cancels a posted receive that has not matched: it completes with `Canceled` and gives its
    /// buffer back. Gives false when the request can no longer be canceled.
    pub fn request_cancel(&mut self, req: &Request) -> bool {
        self.st.cancel(req.key as usize, req.gen)
    }

    /// Progresses until the request finishes and gives its result.
    pub fn wait(&mut self, req: Request) -> Completion {
        let mut req = req;
        let mut idle = 0u32;
        loop {
            match self.request_take(req) {
                Ok(c) => return c,
                Err(r) => req = r,
            }
            if self.progress() == 0 {
                idle += 1;
                if idle > 64 {
                    std::thread::yield_now();
                }
            } else {
                idle = 0;
            }
        }
    }

    /// Finishes `op`: its completion at once, or after waiting on its request.
    pub fn complete(&mut self, op: Op) -> Completion {
        match op {
            Op::Done(c) => c,
            Op::Pending(r) => self.wait(r),
        }
    }

    /// Makes progress on every interface, then on queued sends and timers. Gives the number of
    /// events handled.
    pub fn progress(&mut self) -> usize {
        let mut n = 0;
        self.tick = self.tick.wrapping_add(1);
        self.st.now_cache = self.st.clock.now_coarse();
        let all = std::mem::take(&mut self.poll_all) || self.tick.is_multiple_of(IDLE_IFACE_PERIOD);
        for (i, iface) in self.ifaces.iter_mut().enumerate() {
            let idle = self.st.iface_users[i] == 0;
            if idle && !all && self.tick.wrapping_sub(self.last_event[i]) > IDLE_IFACE_RECENT {
                continue;
            }
            let mut sink = Sink {
                st: &mut self.st,
                iface: i,
            };
            let k = iface.progress(&mut sink);
            if k > 0 {
                self.last_event[i] = self.tick;
                n += k;
            }
        }
        while let Some(idx) = self.st.to_connect.pop() {
            if let Err(e) = connect_ep(&mut self.ifaces, &mut self.st, idx)
                .and_then(|()| self.st.ep_lane_start(idx))
            {
                self.st.fail_ep(idx, e);
            }
            n += 1;
        }
        n += self.st.progress_pending();
        self.st.progress_flushes();
        self.st.progress_closings();
        self.st.timers();
        n += self.st.notify_failures();
        n += self.st.run_callbacks();
        n
    }

    /// The event fd to sleep on (needs [`Features::WAKEUP`]): readable when progress has work.
    pub fn efd(&self) -> Result<RawFd> {
        self.epfd.ok_or_else(|| {
            Error::Unsupported("the context was created without Features::WAKEUP".into())
        })
    }

    /// Arms every interface's event fd. Gives `Ok(false)` when events are already pending: call
    /// `progress()` instead of sleeping.
    pub fn arm(&mut self) -> Result<bool> {
        self.efd()?;
        if !self.st.pending_eps.is_empty() || !self.st.to_connect.is_empty() {
            return Ok(false);
        }
        for i in &mut self.ifaces {
            if i.event_fd().is_none() {
                continue;
            }
            match i.event_arm(EventFlags::RECV | EventFlags::SEND_COMP) {
                Ok(()) => {}
                Err(Error::Busy(_)) => {
                    self.poll_all = true;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Sleeps until an interface has events or `timeout` passes (`None`: the next keepalive
    /// deadline). Gives at once when events are already pending.
    pub fn wait_event(&mut self, timeout: Option<Duration>) -> Result<()> {
        let fd = self.efd()?;
        if !self.arm()? {
            return Ok(());
        }
        let t = timeout
            .or(self.st.cfg.keepalive_interval)
            .map(|d| d.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(-1);
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: `fd` is our epoll fd and `ev` a valid buffer of one event.
        let rc = unsafe { libc::epoll_wait(fd, &mut ev, 1, t) };
        self.poll_all = true;
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io("epoll_wait on the worker event fd", e));
            }
        }
        Ok(())
    }

    /// Flushes every endpoint: completes when everything sent before has completed remotely.
    pub fn flush(&mut self) -> Result<Op> {
        let eps: Vec<usize> = self
            .st
            .eps
            .iter()
            .filter(|(_, e)| e.state == EpState::Ready)
            .map(|(i, _)| i)
            .collect();
        self.st.flush_eps(&eps)
    }

    /// Flushes one endpoint.
    pub fn ep_flush(&mut self, ep: EpHandle) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.flush_eps(&[idx])
    }

    /// Closes an endpoint (see [`CloseMode`]); the handle is stale afterwards. A flush that fails
    /// (other than because the peer closed first) is reported after the endpoint is closed.
    pub fn ep_close(&mut self, ep: EpHandle, mode: CloseMode) -> Result<()> {
        let op = self.ep_close_nb(ep, mode)?;
        self.complete(op).status
    }

    /// Starts closing an endpoint; the request finishes when it is closed. `Flush` flushes,
    /// sends CLOSE and waits (at most the keepalive timeout) until the peer has processed it,
    /// so everything sent before reached the peer's application.
    pub fn ep_close_nb(&mut self, ep: EpHandle, mode: CloseMode) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        let key = self.st.new_req(None, ReqKind::Close);
        if mode == CloseMode::Force || self.st.eps[idx].state != EpState::Ready {
            self.st.close_now(idx, key, Ok(()));
            return Ok(self.st.op_of(key));
        }
        let flush = match self.st.flush_eps(&[idx])? {
            Op::Done(c) => {
                if let Err(e) = c.status {
                    self.st.close_now(idx, key, Err(e));
                    return Ok(self.st.op_of(key));
                }
                None
            }
            Op::Pending(r) => Some(r.key as usize),
        };
        let mut c = Closing {
            ep: idx,
            req: key,
            flush,
            deadline: None,
        };
        if c.flush.is_none() {
            self.st.send_close(&mut c);
        }
        self.st.closings.push(c);
        self.st.progress_closings();
        Ok(self.st.op_of(key))
    }
}

/// An endpoint being flush-closed.
struct Closing {
    ep: usize,
    req: usize,
    /// Flush request still running.
    flush: Option<usize>,
    /// CLOSE sent; give up waiting for the ack at this time.
    deadline: Option<Duration>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(fd) = self.epfd {
            // SAFETY: we created this epoll fd and close it once.
            unsafe { libc::close(fd) };
        }
    }
}

fn make_epoll(ifaces: &[AnyIface]) -> Result<RawFd> {
    // SAFETY: plain syscall; the result is checked.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(Error::last_os("epoll_create1 for the worker event fd"));
    }
    for (i, iface) in ifaces.iter().enumerate() {
        if let Some(fd) = iface.event_fd() {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: i as u64,
            };
            // SAFETY: `ep` is our epoll fd; `fd` is the interface's live event fd.
            if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
                let e = Error::last_os("adding an interface event fd to the worker epoll");
                // SAFETY: closing the fd we just created.
                unsafe { libc::close(ep) };
                return Err(e);
            }
        }
    }
    Ok(ep)
}

/// Creates the transport endpoints of ucp endpoint `idx` from its peer address.
fn connect_ep(ifaces: &mut [AnyIface], st: &mut State, idx: usize) -> Result<()> {
    let addr = st.eps[idx].addr.clone();
    let locals: Vec<LocalTl<'_>> = st
        .info
        .iter()
        .map(|i| LocalTl {
            tl_name: i.tl_name,
            dev_name: &i.dev_name,
            attr: &i.attr,
            md_reg: i.md_reg,
        })
        .collect();
    let sel: LaneSelection = select_lanes(&locals, &addr, |li, ri| {
        let r = &addr.tls[ri];
        ifaces[li].is_reachable(&r.device_addr, Some(&r.iface_addr))
    })?;
    // A connect-to-endpoint RMA lane gets an unconnected endpoint now and is connected by the
    // address exchange over the AM lane (`State::ep_lane_start`).
    let mut rma_wait = None;
    if let Some(p) = sel
        .rma
        .filter(|p| crate::wireup::connect_to_ep_only(&st.info[p.local].attr))
    {
        rma_wait = Some(WaitLane {
            li: p.local,
            remote: p.remote,
            ep: ifaces[p.local].ep_create()?,
            connected: false,
        });
    }
    let mut uct_eps: Vec<(usize, AnyEp)> = Vec::new();
    let mut lane_of =
        |pick: crate::wireup::LanePick, uct_eps: &mut Vec<(usize, AnyEp)>| -> Result<usize> {
            if let Some(p) = uct_eps.iter().position(|(l, _)| *l == pick.local) {
                return Ok(p);
            }
            let r = &addr.tls[pick.remote];
            let ep = ifaces[pick.local].ep_create_connected(&r.device_addr, &r.iface_addr)?;
            uct_eps.push((pick.local, ep));
            Ok(uct_eps.len() - 1)
        };
    let am = lane_of(sel.am, &mut uct_eps)?;
    let rma = match sel.rma {
        Some(_) if rma_wait.is_some() => None,
        Some(p) => Some(lane_of(p, &mut uct_eps)?),
        None => None,
    };
    let (amo, amo_later) = match sel.amo {
        Some(p) if uct_eps.iter().any(|(l, _)| *l == p.local) => {
            (Some(lane_of(p, &mut uct_eps)?), None)
        }
        Some(p) => (None, Some(p)),
        None => (None, None),
    };
    for (li, e) in uct_eps
        .iter()
        .map(|(l, e)| (l, e))
        .chain(rma_wait.iter().map(|w| (&w.li, &w.ep)))
    {
        st.by_uct.insert((*li, e.id().0), idx);
        st.iface_users[*li] += 1;
    }
    let am_attr = &st.info[uct_eps[am].0].attr;
    let rma_attr = rma.map(|r| &st.info[uct_eps[r].0].attr);
    let am_md_reg = st.info[uct_eps[am].0].md_reg;
    let mut proto = ProtoConfig::compute(am_attr, am_md_reg, rma_attr, &st.cfg);
    st.tm_adjust_proto(uct_eps[am].0, &mut proto);
    let ep = &mut st.eps[idx];
    ep.lanes = Some(Lanes {
        uct: uct_eps,
        am,
        rma,
        amo,
        amo_later,
        rma_wait,
        am_next: None,
        released: None,
    });
    ep.proto = Some(proto);
    ep.state = EpState::Ready;
    if st.cfg.proto_info {
        if let Ok(t) = st.proto_table(idx) {
            eprintln!("[rucx] endpoint to {:#018x}:\n{t}", st.eps[idx].uuid);
        }
    }
    if !st.eps[idx].pending.is_empty() {
        st.mark_pending(idx);
    }
    Ok(())
}

/// A zeroed buffer of `len` bytes for data a peer announced, or `NoMemory` when the allocator
/// refuses it (a peer's size must not abort the process). Zeroed pages come from the allocator
/// lazily, as `vec![0; len]` does.
fn zeroed_buf(len: usize) -> Result<Vec<u8>> {
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

/// Operand size of an atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmoSize {
    /// 32 bits.
    U32,
    /// 64 bits.
    U64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AmoKind {
    Op(uct::AtomicOp),
    Cswap,
}

impl AmoKind {
    fn code(self) -> u8 {
        match self {
            AmoKind::Op(uct::AtomicOp::Add) => 0,
            AmoKind::Op(uct::AtomicOp::And) => 1,
            AmoKind::Op(uct::AtomicOp::Or) => 2,
            AmoKind::Op(uct::AtomicOp::Xor) => 3,
            AmoKind::Op(uct::AtomicOp::Swap) => 4,
            AmoKind::Cswap => 5,
        }
    }
}

enum RmaDir<'a> {
    Put(&'a [u8]),
    Get(RecvBuf),
}

enum SendData<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
    /// Caller memory that stays valid and unchanged until the send completes (see
    /// `Worker::tag_send_raw`): a request reads it in place instead of copying it.
    Raw(&'a [u8]),
}

impl SendData<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            SendData::Borrowed(b) | SendData::Raw(b) => b,
            SendData::Owned(v) => v,
        }
    }
}

/// Sends an active message built from `parts` on a lane: inline when it fits `max_short`,
/// otherwise packed into the transport's bcopy buffer.
trait OutcomeExt {
    fn map_done(self, v: u64) -> Outcome<u64>;
}

impl OutcomeExt for Outcome<()> {
    fn map_done(self, v: u64) -> Outcome<u64> {
        match self {
            Outcome::Done(()) => Outcome::Done(v),
            Outcome::InProgress => Outcome::InProgress,
            Outcome::NoResource => Outcome::NoResource,
        }
    }
}

trait OutcomeU32 {
    fn map_done_u32(self) -> Outcome<u64>;
}

impl OutcomeU32 for Outcome<u32> {
    fn map_done_u32(self) -> Outcome<u64> {
        match self {
            Outcome::Done(v) => Outcome::Done(v as u64),
            Outcome::InProgress => Outcome::InProgress,
            Outcome::NoResource => Outcome::NoResource,
        }
    }
}

fn am_send(ep: &mut AnyEp, attr: &IfaceAttr, id: u8, parts: &[&[u8]]) -> Result<Outcome> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if attr.flags.contains(IfaceFlags::AM_SHORT) && total <= attr.am.max_short {
        return ep.am_short_iov(id, parts);
    }
    if attr.flags.contains(IfaceFlags::AM_BCOPY) && total <= attr.am.max_bcopy {
        let r = ep.am_bcopy(id, |buf: &mut [u8]| {
            let mut off = 0;
            for p in parts {
                let end = (off + p.len()).min(buf.len());
                buf[off..end].copy_from_slice(&p[..end - off]);
                off = end;
            }
            off
        })?;
        return Ok(r.unit());
    }
    Err(Error::MessageTooLong {
        len: total,
        max: attr.am.max_bcopy.max(attr.am.max_short),
    })
}

struct Sink<'a> {
    st: &'a mut State,
    iface: usize,
}

impl EventSink for Sink<'_> {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.st.handle_am_from(Some(self.iface), id, data);
    }
    fn completion(&mut self, comp: CompletionId, result: Result<u64>) {
        self.st.handle_completion(comp, result);
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        if let Some(&idx) = self.st.by_uct.get(&(self.iface, ep.0)) {
            self.st.fail_ep(idx, err);
        }
    }
    fn tag_unexp_eager(&mut self, tag: u64, imm: u64, data: &[u8]) {
        self.st.tm_unexp_eager(tag, imm, data);
    }
    fn tag_unexp_rndv(&mut self, _tag: u64, rndv: uct::RndvRemote<'_>) {
        // The header is the sender's whole RTS message: the software rendezvous takes over.
        self.st.handle_am(am_id::RTS, rndv.header);
    }
    fn tag_recv_done(&mut self, ctx: u64, tag: u64, imm: u64, len: usize, res: Result<()>) {
        self.st.tm_recv_done(ctx, tag, imm, len, res);
    }
}

impl State {
    fn now(&self) -> Duration {
        self.clock.now()
    }

    fn new_ep(&mut self, addr: WorkerAddress, err_handler: Option<ErrHandler>) -> usize {
        self.ep_gen = self.ep_gen.wrapping_add(1);
        let now = self.now();
        let uuid = addr.uuid;
        let idx = self.eps.insert(Ep {
            gen: self.ep_gen,
            secret: ucs::random::secret_u64() & PEER_ID_MASK,
            uuid,
            addr,
            lanes: None,
            proto: None,
            state: EpState::Connecting,
            pending: VecDeque::new(),
            in_pending_list: false,
            err_handler,
            stream_rx: VecDeque::new(),
            stream_waiters: VecDeque::new(),
            close_acked: false,
            peer_ep_addr: None,
            rx_gate: AmSwitchGate::new(),
            last_tx: now,
            last_rx: now,
        });
        self.by_uuid.insert(uuid, idx);
        idx
    }

    fn ep_idx(&self, h: EpHandle) -> Result<usize> {
        match self.eps.get(h.idx as usize) {
            Some(e) if e.gen == h.gen => Ok(h.idx as usize),
            _ => Err(Error::InvalidParam(
                "endpoint handle is stale (closed) or from another worker".into(),
            )),
        }
    }

    fn ep_usable(&self, idx: usize) -> Result<()> {
        match &self.eps[idx].state {
            EpState::Failed(e) => Err(e.clone()),
            EpState::Closed => Err(Error::ConnectionReset("endpoint is closed".into())),
            _ => Ok(()),
        }
    }

    fn proto_table(&self, idx: usize) -> Result<String> {
        let ep = &self.eps[idx];
        let (lanes, proto) = match (&ep.lanes, &ep.proto) {
            (Some(l), Some(p)) => (l, p),
            _ => return Err(Error::Busy("endpoint is still connecting".into())),
        };
        let name = |lane: usize| {
            let i = &self.info[lanes.uct[lane].0];
            format!("{}/{}", i.tl_name, i.dev_name)
        };
        let mut t = proto.table(&name(lanes.am), lanes.rma.map(name).as_deref());
        let li = lanes.uct[lanes.am].0;
        t.push_str(&self.tm_proto_row(li, proto, &name(lanes.am)));
        Ok(t)
    }

    fn get_buf(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_default()
    }

    fn put_buf(&mut self, mut v: Vec<u8>) {
        if v.capacity() <= POOL_BUF_MAX && self.pool.len() < POOL_MAX {
            v.clear();
            self.pool.push(v);
        }
    }

    fn new_req(&mut self, ep: Option<usize>, kind: ReqKind) -> usize {
        self.req_gen = self.req_gen.wrapping_add(1) & 0x0FFF_FFFF;
        self.reqs.insert(Req {
            gen: self.req_gen,
            ep,
            kind,
            done: None,
            callback: None,
        })
    }

    fn wire_id(&self, key: usize) -> u64 {
        (self.reqs[key].gen as u64) << 32 | key as u64
    }

    fn req_by_wire(&self, id: u64) -> Option<usize> {
        let key = (id & 0xFFFF_FFFF) as usize;
        match self.reqs.get(key) {
            Some(r) if r.gen as u64 == id >> 32 && r.done.is_none() => Some(key),
            _ => None,
        }
    }

    fn op_of(&mut self, key: usize) -> Op {
        let r = &self.reqs[key];
        if r.done.is_none() {
            return Op::Pending(Request {
                key: key as u32,
                gen: r.gen,
            });
        }
        let r = self.reqs.remove(key);
        Op::Done(r.done.unwrap_or_else(Completion::ok))
    }

    /// Finishes request `key` with `status`, releasing what the protocol held.
    fn finish(&mut self, key: usize, status: Result<()>) {
        let r = &self.reqs[key];
        if r.done.is_some() {
            return;
        }
        if matches!(r.kind, ReqKind::Send(_)) {
            self.tm_send_finishing(key);
        }
        let r = &mut self.reqs[key];
        let mut recycle = None;
        let mut am = None;
        let (buf, len, tag, value) = match &mut r.kind {
            ReqKind::Send(s) => {
                s.memh = None;
                s.rkey = None;
                let data = std::mem::take(&mut s.data).into_vec();
                if s.give_back {
                    (data, 0, s.tag, 0)
                } else {
                    recycle = data;
                    (None, 0, s.tag, 0)
                }
            }
            ReqKind::Recv(rv) => {
                // A receive that failed while the peer may still write into it (rendezvous
                // put into our registered buffer) keeps its buffer in quarantine until the
                // worker is dropped, so a late write never lands in freed memory.
                let exposed = status.is_err()
                    && rv.memh.is_some()
                    && matches!(rv.stage, RecvStage::RndvWait | RecvStage::RndvGet);
                rv.memh = None;
                rv.rkey = None;
                am = rv.am.take();
                let buf = std::mem::take(&mut rv.buf).into_vec();
                let buf = if exposed {
                    self.quarantine.extend(buf);
                    None
                } else {
                    buf
                };
                (buf, rv.total, rv.sender_tag, 0)
            }
            ReqKind::StreamRecv { buf, filled } => (Some(std::mem::take(buf)), *filled, 0, 0),
            ReqKind::Atomic { value } => (None, 0, 0, *value),
            ReqKind::Flush { .. } | ReqKind::Close => (None, 0, 0, 0),
        };
        if let Some((id, hdr)) = am {
            // A user active message that came by rendezvous: hand it to its handler.
            let ep = r.ep.unwrap_or(0);
            self.reqs.remove(key);
            match (status, buf) {
                (Ok(()), Some(data)) => self.deliver_am(ep, id, &hdr, data),
                (Err(e), _) => tracing::warn!("active message {id} lost: {e}"),
                _ => {}
            }
            return;
        }
        r.done = Some(Completion {
            status,
            buf,
            len,
            tag,
            value,
        });
        if r.callback.is_some() {
            self.callbacks_due.push(key);
        }
        if let Some(v) = recycle {
            self.put_buf(v);
        }
    }

    /// Invokes the callbacks of requests that finished; each request is consumed.
    fn run_callbacks(&mut self) -> usize {
        let mut n = 0;
        while let Some(key) = self.callbacks_due.pop() {
            let due = self
                .reqs
                .get(key)
                .is_some_and(|r| r.done.is_some() && r.callback.is_some());
            if due {
                let r = self.reqs.remove(key);
                if let (Some(cb), Some(c)) = (r.callback, r.done) {
                    cb(c);
                    n += 1;
                }
            }
        }
        n
    }

    fn deliver_am(&mut self, ep: usize, id: u16, hdr: &[u8], data: Vec<u8>) {
        let h = EpHandle {
            idx: ep as u32,
            gen: self.eps.get(ep).map(|e| e.gen).unwrap_or(0),
        };
        match self.am_handlers.get_mut(&id) {
            Some(cb) => cb(h, hdr, data),
            None => {
                tracing::warn!(
                    id,
                    len = data.len(),
                    "active message without handler dropped"
                );
                self.put_buf(data);
            }
        }
    }

    fn am_send(&mut self, idx: usize, id: u16, header: &[u8], data: SendData<'_>) -> Result<Op> {
        self.ep_usable(idx)?;
        let proto = self.eps[idx]
            .proto
            .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))?;
        let hlen = u32::try_from(header.len())
            .map_err(|_| Error::InvalidParam("active-message header too long".into()))?;
        let total = UserAmHdr::LEN + header.len() + data.as_slice().len();
        if total + EagerHdr::LEN <= proto.bcopy_single_max
            && data.as_slice().len() < proto.rndv_thresh
        {
            let mut body = self.get_buf();
            body.extend_from_slice(&UserAmHdr { id, hdr_len: hlen }.encode());
            body.extend_from_slice(header);
            body.extend_from_slice(data.as_slice());
            let r = self.send_ctl(idx, am_id::USER_AM, &body);
            self.put_buf(body);
            r?;
            let give = match data {
                SendData::Owned(v) => Some(v),
                SendData::Borrowed(_) | SendData::Raw(_) => None,
            };
            return Ok(Op::Done(Completion {
                buf: give,
                ..Completion::ok()
            }));
        }
        if header.len() + 64 > proto.bcopy_single_max {
            return Err(Error::MessageTooLong {
                len: header.len(),
                max: proto.bcopy_single_max.saturating_sub(64),
            });
        }
        let key = self.new_send(idx, 0, data, false);
        self.send_mut(key).am = Some((id, header.to_vec()));
        let ready = self.eps[idx].pending.is_empty() && self.eps[idx].lanes.is_some();
        if !ready || !self.send_rts(key)? {
            self.eps[idx].pending.push_back(Pending::Req(key));
            self.mark_pending(idx);
        }
        Ok(self.op_of(key))
    }

    /// Registers `ptr..ptr+len` with every memory domain that registers memory and packs its
    /// key, appending `(tl name, handle, packed key)` to `keys` (one per transport name).
    ///
    /// # Safety
    /// The memory must stay valid until the returned handles are dropped.
    unsafe fn register_all(
        &self,
        ptr: NonNull<u8>,
        len: usize,
        keys: &mut Vec<(&'static str, MemHandle, Vec<u8>)>,
    ) {
        for (i, info) in self.info.iter().enumerate() {
            if !info.md_reg || keys.iter().any(|(t, _, _)| *t == info.tl_name) {
                continue;
            }
            // SAFETY: the caller keeps the memory valid while the handle lives.
            let m = match unsafe { self.mds[i].mem_reg(ptr, len) } {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!("{} cannot register the mapping: {e}", info.tl_name);
                    continue;
                }
            };
            let mut packed = Vec::new();
            if self.mds[i].rkey_pack(&m, &mut packed).is_ok() {
                keys.push((info.tl_name, m, packed));
            }
        }
    }

    fn rma(&mut self, idx: usize, dir: RmaDir<'_>, remote_addr: u64, rkey: &Rkey) -> Result<Op> {
        self.ep_usable(idx)?;
        if rkey.ep != (idx as u32, self.eps[idx].gen) {
            return Err(Error::InvalidParam(
                "remote key was unpacked for another endpoint".into(),
            ));
        }
        if let Some((lane, mk)) = &rkey.mapped {
            if self.eps[idx].pending.is_empty() {
                return self.rma_mapped(idx, *lane, mk, dir, remote_addr, rkey);
            }
        }
        self.rma_registered(idx, dir, remote_addr, rkey)
    }

    /// Put/get on a peer segment mapped in this process: the lane's short and bcopy
    /// operations, which copy straight between the user's buffer and the segment. Nothing is
    /// registered, allocated or queued; a lane that pushes back hands the rest of the
    /// operation to the registered (cma) path.
    fn rma_mapped(
        &mut self,
        idx: usize,
        lane: usize,
        mk: &RemoteKey,
        dir: RmaDir<'_>,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        let len = match &dir {
            RmaDir::Put(d) => d.len(),
            RmaDir::Get(b) => b.len(),
        };
        mk.check(remote_addr, len)?;
        let l = self.eps[idx]
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))?;
        let (li, uep) = &mut l.uct[lane];
        let attr = &self.info[*li].attr;
        let mut off = 0;
        match dir {
            RmaDir::Put(d) => {
                if len <= attr.put.max_short {
                    if let Outcome::Done(()) = uep.put_short(d, remote_addr, mk)? {
                        off = len;
                    }
                } else {
                    let chunk = attr.put.max_bcopy.max(1);
                    while off < len {
                        let piece = &d[off..len.min(off + chunk)];
                        let at = remote_addr + off as u64;
                        let pack = |dst: &mut [u8]| {
                            dst[..piece.len()].copy_from_slice(piece);
                            piece.len()
                        };
                        match uep.put_bcopy(pack, at, mk)? {
                            Outcome::Done(n) if n == piece.len() => off += n,
                            _ => break,
                        }
                    }
                }
                if off == len {
                    return Ok(Op::Done(Completion::ok()));
                }
                let at = remote_addr + off as u64;
                self.rma_registered(idx, RmaDir::Put(&d[off..]), at, rkey)
            }
            RmaDir::Get(mut buf) => {
                if len <= attr.get.max_short {
                    if let Outcome::Done(()) = uep.get_short(&mut buf, remote_addr, mk)? {
                        off = len;
                    }
                } else {
                    let chunk = attr.get.max_bcopy.max(1);
                    while off < len {
                        let n = chunk.min(len - off);
                        let at = remote_addr + off as u64;
                        let dst = &mut buf[off..off + n];
                        let mut unpack = |src: &[u8]| dst.copy_from_slice(&src[..n]);
                        // Only Done or NoResource: the copy happens during the call.
                        match uep.get_bcopy(n, at, mk, comp_id(COMP_GET, 0), &mut unpack)? {
                            Outcome::Done(()) => off += n,
                            _ => break,
                        }
                    }
                }
                if off == len {
                    return Ok(Op::Done(Completion {
                        len,
                        buf: buf.into_vec(),
                        ..Completion::ok()
                    }));
                }
                // Rare: the lane pushed back. Read the whole buffer through the registered path.
                self.rma_registered(idx, RmaDir::Get(buf), remote_addr, rkey)
            }
        }
    }

    /// Put/get through the RMA lane's zero-copy operations on registered memory (cma on this
    /// host, the network otherwise).
    fn rma_registered(
        &mut self,
        idx: usize,
        dir: RmaDir<'_>,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        let rk = rkey.rma.clone().ok_or_else(|| {
            Error::Unsupported(
                "no zero-copy RMA lane to this peer for this mapping (no common transport that registers memory)"
                    .into(),
            )
        })?;
        let li = self.eps[idx]
            .lanes
            .as_ref()
            .and_then(|l| l.rma.map(|r| l.uct[r].0))
            .ok_or_else(|| Error::Unsupported("no RMA lane".into()))?;
        let len = match &dir {
            RmaDir::Put(d) => d.len(),
            RmaDir::Get(b) => b.len(),
        };
        rk.check(remote_addr, len)?;
        let wants = match dir {
            RmaDir::Put(_) => IfaceFlags::PUT_ZCOPY,
            RmaDir::Get(_) => IfaceFlags::GET_ZCOPY,
        };
        if !self.info[li].attr.flags.contains(wants) {
            return Err(Error::Unsupported(format!(
                "{} has no {wants:?}",
                self.info[li].tl_name
            )));
        }
        match dir {
            RmaDir::Put(d) => {
                let key = self.new_send(idx, 0, SendData::Borrowed(d), false);
                if len == 0 {
                    self.finish(key, Ok(()));
                    return Ok(self.op_of(key));
                }
                let s = self.send_mut(key);
                let ptr = NonNull::new(s.data.as_mut_ptr())
                    .ok_or_else(|| Error::InvalidParam("empty put buffer".into()))?;
                // SAFETY: the vector is owned by the request and outlives the handle.
                let m = unsafe { self.mds[li].mem_reg(ptr, len) }?;
                let s = self.send_mut(key);
                s.memh = Some(m);
                s.rkey = Some(rk);
                s.remote_addr = remote_addr;
                s.user_rma = true;
                s.stage = SendStage::Put;
                let queued = !self.eps[idx].pending.is_empty();
                if queued || !self.put_step(key)? {
                    self.eps[idx].pending.push_back(Pending::Req(key));
                    self.mark_pending(idx);
                }
                Ok(self.op_of(key))
            }
            RmaDir::Get(mut buf) => {
                let ptr = NonNull::new(buf.as_mut_ptr());
                let key = self.new_recv(buf, 0, 0);
                self.reqs[key].ep = Some(idx);
                if len == 0 {
                    self.finish(key, Ok(()));
                    return Ok(self.op_of(key));
                }
                let ptr = ptr.ok_or_else(|| Error::InvalidParam("empty get buffer".into()))?;
                // SAFETY: the buffer is owned by the request and outlives the handle.
                let m = unsafe { self.mds[li].mem_reg(ptr, len) }?;
                let r = self.recv_mut(key);
                r.memh = Some(m);
                r.rkey = Some(rk);
                r.remote_addr = remote_addr;
                r.total = len;
                r.user_rma = true;
                r.stage = RecvStage::RndvGet;
                if !self.get_step(key)? {
                    self.eps[idx].pending.push_back(Pending::Req(key));
                    self.mark_pending(idx);
                }
                Ok(self.op_of(key))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        idx: usize,
        kind: AmoKind,
        size: AmoSize,
        value: u64,
        compare: u64,
        addr: u64,
        rkey: &Rkey,
        fetch: bool,
    ) -> Result<Op> {
        self.ep_usable(idx)?;
        if rkey.ep != (idx as u32, self.eps[idx].gen) {
            return Err(Error::InvalidParam(
                "remote key was unpacked for another endpoint".into(),
            ));
        }
        let bytes = match size {
            AmoSize::U32 => 4,
            AmoSize::U64 => 8,
        };
        if !addr.is_multiple_of(bytes) {
            return Err(Error::InvalidParam(format!(
                "atomic address {addr:#x} is not {bytes}-byte aligned"
            )));
        }
        let key = self.new_req(Some(idx), ReqKind::Atomic { value: 0 });
        let wire = self.wire_id(key);
        let peer_wire = self.peer_id(idx, key);
        // Through the transport when the lane has it and nothing is queued ahead.
        // A peer segment mapped here takes CPU atomics on the shared-memory lane.
        let cpu = |lane: usize| {
            self.eps[idx].lanes.as_ref().is_some_and(|l| {
                let a = &self.info[l.uct[lane].0].attr;
                a.flags.contains(IfaceFlags::ATOMIC_CPU)
                    && match size {
                        AmoSize::U32 => !a.atomics.fop32.is_empty(),
                        AmoSize::U64 => !a.atomics.fop64.is_empty(),
                    }
            })
        };
        let (amo, amo_key) = match &rkey.mapped {
            Some((lane, k)) if cpu(*lane) => (Some(*lane), Some(k)),
            _ => (
                self.eps[idx].lanes.as_ref().and_then(|l| l.amo),
                rkey.amo.as_ref(),
            ),
        };
        if let (Some(lane), Some(rk), true) = (amo, amo_key, self.eps[idx].pending.is_empty()) {
            let l = self.eps[idx]
                .lanes
                .as_mut()
                .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))?;
            let uep = &mut l.uct[lane].1;
            let comp = comp_id(COMP_ATOMIC, wire);
            let out: Outcome<u64> = match (kind, size, fetch) {
                (AmoKind::Op(op), AmoSize::U64, false) => {
                    uep.atomic64_post(op, value, addr, rk)?.unit().map_done(0)
                }
                (AmoKind::Op(op), AmoSize::U32, false) => uep
                    .atomic32_post(op, value as u32, addr, rk)?
                    .unit()
                    .map_done(0),
                (AmoKind::Op(op), AmoSize::U64, true) => {
                    uep.atomic64_fetch(op, value, addr, rk, comp)?
                }
                (AmoKind::Op(op), AmoSize::U32, true) => uep
                    .atomic32_fetch(op, value as u32, addr, rk, comp)?
                    .map_done_u32(),
                (AmoKind::Cswap, AmoSize::U64, _) => {
                    uep.atomic_cswap64(compare, value, addr, rk, comp)?
                }
                (AmoKind::Cswap, AmoSize::U32, _) => uep
                    .atomic_cswap32(compare as u32, value as u32, addr, rk, comp)?
                    .map_done_u32(),
            };
            match out {
                Outcome::Done(v) => {
                    self.amo_hw += 1;
                    self.reqs[key].kind = ReqKind::Atomic { value: v };
                    self.finish(key, Ok(()));
                    return Ok(self.op_of(key));
                }
                Outcome::InProgress => {
                    self.amo_hw += 1;
                    return Ok(self.op_of(key));
                }
                Outcome::NoResource => {} // CPU-coherent atomics: emulation is equivalent
            }
        }
        self.amo_emulated += 1;
        let h = AtomicReqHdr {
            req: if fetch { peer_wire } else { NO_REQ },
            op: kind.code(),
            size: bytes as u8,
            addr,
            value,
            compare,
        };
        self.send_ctl(idx, am_id::ATOMIC_REQ, &h.encode())?;
        if !fetch {
            self.finish(key, Ok(()));
        }
        Ok(self.op_of(key))
    }

    /// Applies an emulated atomic to this worker's mapped memory; gives the old value.
    fn apply_atomic(&self, h: &AtomicReqHdr) -> Result<u64> {
        use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
        let size = h.size as usize;
        let addr = usize::try_from(h.addr)
            .map_err(|_| Error::RemoteAccess("address out of range".into()))?;
        let inside = self
            .regions
            .borrow()
            .iter()
            .any(|&(s, l)| addr >= s && addr.checked_add(size).is_some_and(|e| e <= s + l));
        if !inside || addr % size != 0 {
            return Err(Error::RemoteAccess(format!(
                "{size} bytes at {addr:#x} are not an aligned word of a mapped region"
            )));
        }
        let op = |old: u64, v: u64| -> u64 {
            match h.op {
                0 => old.wrapping_add(v),
                1 => old & v,
                2 => old | v,
                3 => old ^ v,
                _ => v,
            }
        };
        if size == 8 {
            // SAFETY: the word lies inside a live mapping of this worker and is 8-byte aligned;
            // peers access it only through atomics.
            let a = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
            let old = if h.op == 5 {
                match a.compare_exchange(h.compare, h.value, SeqCst, SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            } else {
                a.fetch_update(SeqCst, SeqCst, |o| Some(op(o, h.value)))
                    .unwrap_or_else(|v| v)
            };
            Ok(old)
        } else {
            // SAFETY: as above, 4-byte aligned.
            let a = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
            let old = if h.op == 5 {
                match a.compare_exchange(h.compare as u32, h.value as u32, SeqCst, SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            } else {
                a.fetch_update(SeqCst, SeqCst, |o| {
                    Some(op(o as u64, h.value & 0xFFFF_FFFF) as u32)
                })
                .unwrap_or_else(|v| v)
            };
            Ok(old as u64)
        }
    }

    fn stream_send(&mut self, idx: usize, data: SendData<'_>) -> Result<Op> {
        self.ep_usable(idx)?;
        let key = self.new_send(idx, 0, data, false);
        self.send_mut(key).stage = SendStage::Stream;
        let ready = self.eps[idx].pending.is_empty() && self.eps[idx].lanes.is_some();
        if !ready || !self.stream_step(key)? {
            self.eps[idx].pending.push_back(Pending::Req(key));
            self.mark_pending(idx);
        }
        Ok(self.op_of(key))
    }

    fn stream_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.reqs[key].ep.unwrap_or(0);
        let uuid = self.uuid.to_le_bytes();
        let now = self.clock.now();
        let State {
            eps, reqs, info, ..
        } = self;
        let ep = &mut eps[idx];
        let proto = ep.proto.ok_or_else(|| Error::Busy("connecting".into()))?;
        let l = ep
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("connecting".into()))?;
        let (li, uep) = &mut l.uct[l.am];
        let attr = &info[*li].attr;
        let s = match &mut reqs[key].kind {
            ReqKind::Send(s) => s,
            _ => return Ok(true),
        };
        let frag = proto.bcopy_single_max;
        while s.offset < s.data.len() {
            let n = frag.min(s.data.len() - s.offset);
            let out = am_send(
                uep,
                attr,
                am_id::STREAM,
                &[&uuid, &s.data[s.offset..s.offset + n]],
            )?;
            if out == Outcome::NoResource {
                return Ok(false);
            }
            ep.last_tx = now;
            s.offset += n;
        }
        self.finish(key, Ok(()));
        Ok(true)
    }

    fn stream_recv(&mut self, idx: usize, buf: Vec<u8>) -> Result<Op> {
        // Bytes that arrived before the peer closed can still be read.
        let queued: usize = self.eps[idx]
            .stream_waiters
            .iter()
            .map(|&k| match self.reqs.get(k).map(|r| &r.kind) {
                Some(ReqKind::StreamRecv { buf, filled }) => buf.len() - filled,
                _ => 0,
            })
            .sum();
        if self.eps[idx].stream_rx.len() < queued + buf.len() {
            self.ep_usable(idx)?;
        }
        let key = self.new_req(Some(idx), ReqKind::StreamRecv { buf, filled: 0 });
        self.eps[idx].stream_waiters.push_back(key);
        self.stream_serve(idx);
        Ok(self.op_of(key))
    }

    /// Moves received stream bytes into waiting receives, in posting order.
    fn stream_serve(&mut self, idx: usize) {
        while let Some(&key) = self.eps[idx].stream_waiters.front() {
            let State { eps, reqs, .. } = self;
            let ep = &mut eps[idx];
            let done = match reqs.get_mut(key).map(|r| &mut r.kind) {
                Some(ReqKind::StreamRecv { buf, filled }) => {
                    let n = (buf.len() - *filled).min(ep.stream_rx.len());
                    for (d, s) in buf[*filled..*filled + n]
                        .iter_mut()
                        .zip(ep.stream_rx.drain(..n))
                    {
                        *d = s;
                    }
                    *filled += n;
                    *filled == buf.len()
                }
                _ => true,
            };
            if !done {
                break;
            }
            self.eps[idx].stream_waiters.pop_front();
            if self.reqs.get(key).is_some_and(|r| r.done.is_none()) {
                self.finish(key, Ok(()));
            }
        }
    }

    fn mark_pending(&mut self, idx: usize) {
        let ep = &mut self.eps[idx];
        if !ep.in_pending_list {
            ep.in_pending_list = true;
            self.pending_eps.push(idx);
        }
    }

    /// Sends a control message on the AM lane now, whatever is queued (for the request at the
    /// head of the endpoint's queue). False on back-pressure.
    fn send_ctl_now(&mut self, idx: usize, id: u8, body: &[u8]) -> Result<bool> {
        let uuid = self.uuid.to_le_bytes();
        let ep = &mut self.eps[idx];
        let l = ep
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("connecting".into()))?;
        let (li, uep) = &mut l.uct[l.am];
        if am_send(uep, &self.info[*li].attr, id, &[&uuid, body])? == Outcome::NoResource {
            return Ok(false);
        }
        ep.last_tx = self.now_cache;
        Ok(true)
    }

    /// Sends a control message, or queues it behind earlier sends of the endpoint.
    fn send_ctl(&mut self, idx: usize, id: u8, body: &[u8]) -> Result<()> {
        self.ep_usable(idx)?;
        let uuid = self.uuid.to_le_bytes();
        let ep = &mut self.eps[idx];
        if ep.pending.is_empty() {
            if let Some(l) = ep.lanes.as_mut() {
                let (li, uep) = &mut l.uct[l.am];
                let out = am_send(uep, &self.info[*li].attr, id, &[&uuid, body])?;
                if out != Outcome::NoResource {
                    ep.last_tx = self.now_cache;
                    return Ok(());
                }
            }
        }
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(body);
        self.eps[idx]
            .pending
            .push_back(Pending::Ctl { id, body: v });
        self.mark_pending(idx);
        Ok(())
    }

    fn tag_send(&mut self, idx: usize, tag: u64, data: SendData<'_>, sync: bool) -> Result<Op> {
        self.ep_usable(idx)?;
        let len = data.as_slice().len();
        let ep = &self.eps[idx];
        let ready = ep.pending.is_empty() && ep.lanes.is_some();
        let (rndv, zc) = match &ep.proto {
            Some(p) => (len >= p.tag_thresh(sync), p.zcopy_thresh),
            None => (false, None),
        };
        // Tag offload when the lane offers it and nothing is queued before this message (it
        // sends eager messages of TM_THRESH bytes and more only).
        let data = if ready && !sync && (rndv || len >= TM_THRESH) {
            match self.tm_send(idx, tag, data, rndv)? {
                Ok(op) => return Ok(op),
                Err(data) => data,
            }
        } else {
            data
        };
        // Zero-copy eager from a caller-owned vector the AM lane's domain can register.
        if let (Some(z), false) = (zc, rndv) {
            if len >= z && len > 0 {
                if let SendData::Owned(v) = data {
                    return self.zcopy_send(idx, tag, v, sync);
                }
            }
        }
        // Fast path: a non-synchronous eager message sent completely right now needs no request.
        if ready && !sync && !rndv {
            let msg_id = self.next_msg_id;
            let mut offset = 0;
            let done = self.eager_send(idx, tag, data.as_slice(), NO_REQ, msg_id, &mut offset)?;
            if offset > 0 {
                self.next_msg_id += 1;
            }
            if done {
                let give = match data {
                    SendData::Owned(v) => Some(v),
                    SendData::Borrowed(_) | SendData::Raw(_) => None,
                };
                return Ok(Op::Done(Completion {
                    buf: give,
                    tag,
                    ..Completion::ok()
                }));
            }
            let key = self.new_send(idx, tag, data, sync);
            let s = self.send_mut(key);
            s.offset = offset;
            s.msg_id = msg_id;
            self.eps[idx].pending.push_back(Pending::Req(key));
            self.mark_pending(idx);
            return Ok(self.op_of(key));
        }
        let key = self.new_send(idx, tag, data, sync);
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        self.send_mut(key).msg_id = id;
        // Back-pressure queues the request (it resumes from `progress_pending`, in order).
        let queued = !ready || !self.send_step(key)?;
        if queued && self.reqs[key].done.is_none() {
            self.eps[idx].pending.push_back(Pending::Req(key));
            self.mark_pending(idx);
        }
        Ok(self.op_of(key))
    }

    fn new_send(&mut self, idx: usize, tag: u64, data: SendData<'_>, sync: bool) -> usize {
        let (data, give_back) = match data {
            SendData::Owned(v) => (SendBuf::from(v), true),
            SendData::Borrowed(b) => {
                let mut v = self.get_buf();
                v.extend_from_slice(b);
                (SendBuf::from(v), false)
            }
            SendData::Raw(b) => (SendBuf::raw(b), false),
        };
        self.new_req(
            Some(idx),
            ReqKind::Send(SendReq {
                tag,
                data,
                give_back,
                sync,
                stage: SendStage::Eager,
                offset: 0,
                msg_id: 0,
                memh: None,
                rkey: None,
                remote_addr: 0,
                rreq: 0,
                inflight: 0,
                rts_sent: false,
                user_rma: false,
                am: None,
                acked: false,
            }),
        )
    }

    /// The send request `key`. Internal invariant: callers pass keys of requests they know are
    /// sends (created as one, or checked by [`State::peer_req`] or the completion kind); a
    /// peer's id never reaches here unchecked.
    #[allow(clippy::unreachable)]
    fn send_mut(&mut self, key: usize) -> &mut SendReq {
        match &mut self.reqs[key].kind {
            ReqKind::Send(s) => s,
            _ => unreachable!("request {key} is not a send"),
        }
    }

    /// Sends eager fragments of `data` from `*offset`. Gives true when all are out.
    ///
    /// A message that fits one fragment goes here, inline in the caller; longer ones (and the
    /// errors of an endpoint still connecting) in [`State::eager_send_frags`].
    #[inline]
    fn eager_send(
        &mut self,
        idx: usize,
        tag: u64,
        data: &[u8],
        sreq: u64,
        msg_id: u64,
        offset: &mut usize,
    ) -> Result<bool> {
        let len = data.len();
        let ep = &mut self.eps[idx];
        let (Some(proto), Some(l)) = (ep.proto.as_ref(), ep.lanes.as_mut()) else {
            return self.eager_send_frags(idx, tag, data, sreq, msg_id, offset);
        };
        // A synchronous message's header is longer by the sender's request id.
        let sync_extra = if sreq != NO_REQ {
            EagerSyncHdr::LEN - EagerHdr::LEN
        } else {
            0
        };
        if *offset != 0 || len + sync_extra > proto.bcopy_single_max {
            return self.eager_send_frags(idx, tag, data, sreq, msg_id, offset);
        }
        let uuid = self.uuid.to_le_bytes();
        let (li, uep) = &mut l.uct[l.am];
        let attr = &self.info[*li].attr;
        let out = if sreq != NO_REQ {
            let h = EagerSyncHdr { tag, sreq }.encode();
            am_send(uep, attr, am_id::EAGER_SYNC_ONLY, &[&uuid, &h, data])?
        } else {
            let h = EagerHdr { tag }.encode();
            am_send(uep, attr, am_id::EAGER_ONLY, &[&uuid, &h, data])?
        };
        if out == Outcome::NoResource {
            return Ok(false);
        }
        ep.last_tx = self.now_cache;
        *offset = len.max(1);
        self.stats.eager_single += 1;
        Ok(true)
    }

    /// [`State::eager_send`] of a message in several fragments (or on an endpoint without
    /// lanes yet: `Busy`).
    fn eager_send_frags(
        &mut self,
        idx: usize,
        tag: u64,
        data: &[u8],
        sreq: u64,
        msg_id: u64,
        offset: &mut usize,
    ) -> Result<bool> {
        let uuid = self.uuid.to_le_bytes();
        let ep = &mut self.eps[idx];
        let proto = ep.proto.ok_or_else(|| Error::Busy("connecting".into()))?;
        let l = ep
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("connecting".into()))?;
        let (li, uep) = &mut l.uct[l.am];
        let attr = &self.info[*li].attr;
        let len = data.len();
        while *offset < len {
            let out = if *offset == 0 {
                let n = proto.first_frag.min(len);
                let h = EagerFirstHdr {
                    tag,
                    msg_id,
                    total_len: len as u64,
                    sreq,
                }
                .encode();
                let o = am_send(uep, attr, am_id::EAGER_FIRST, &[&uuid, &h, &data[..n]])?;
                if o != Outcome::NoResource {
                    self.stats.eager_multi += 1;
                }
                (o, n)
            } else {
                let n = proto.middle_frag.min(len - *offset);
                let h = FragHdr {
                    id: msg_id,
                    offset: *offset as u64,
                }
                .encode();
                let o = am_send(
                    uep,
                    attr,
                    am_id::EAGER_MIDDLE,
                    &[&uuid, &h, &data[*offset..*offset + n]],
                )?;
                (o, n)
            };
            if out.0 == Outcome::NoResource {
                return Ok(false);
            }
            ep.last_tx = self.now_cache;
            *offset += out.1;
        }
        Ok(true)
    }

    /// Advances a send request as far as resources allow. Gives false on back-pressure.
    fn send_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.reqs[key].ep.unwrap_or(0);
        let wire = self.peer_id(idx, key);
        let stage = self.send_mut(key).stage;
        match stage {
            SendStage::Eager if self.send_mut(key).am.is_some() => self.send_rts(key),
            SendStage::Eager => {
                let proto = self.eps[idx]
                    .proto
                    .ok_or_else(|| Error::Busy("connecting".into()))?;
                let s = self.send_mut(key);
                let len = s.data.len();
                // (Only before the first eager fragment left: a tag message below the tag
                // threshold may have started eager.)
                if s.offset == 0 && len >= proto.tag_thresh(s.sync) {
                    return self.send_rts(key);
                }
                let (tag, sync, msg_id, mut off) = (s.tag, s.sync, s.msg_id, s.offset);
                let data = std::mem::take(&mut s.data);
                let sreq = if sync { wire } else { NO_REQ };
                let r = self.eager_send(idx, tag, &data, sreq, msg_id, &mut off);
                let s = self.send_mut(key);
                s.data = data;
                s.offset = off;
                if !r? {
                    return Ok(false);
                }
                if sync && !s.acked {
                    s.stage = SendStage::WaitAck;
                } else {
                    self.finish(key, Ok(()));
                }
                Ok(true)
            }
            SendStage::Put => self.put_step(key),
            SendStage::Pipeline => self.pipeline_step(key),
            SendStage::Stream => self.stream_step(key),
            SendStage::EagerZcopy => self.zcopy_step(key),
            SendStage::PutFlushRetry => self.put_done(key),
            SendStage::WaitAck | SendStage::WaitRndv | SendStage::WaitPutFlush => Ok(true),
        }
    }

    /// Sends an eager message straight from the caller's vector (registered with the AM lane's
    /// memory domain); falls back to bcopy fragments from it if registration fails.
    fn zcopy_send(&mut self, idx: usize, tag: u64, v: Vec<u8>, sync: bool) -> Result<Op> {
        let li = self.eps[idx].lanes.as_ref().map(|l| l.uct[l.am].0);
        let key = self.new_send(idx, tag, SendData::Owned(v), sync);
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        let s = self.send_mut(key);
        s.msg_id = id;
        let ptr = NonNull::new(s.data.as_mut_ptr());
        let len = s.data.len();
        if let (Some(li), Some(p)) = (li, ptr) {
            // SAFETY: the vector is owned by the request and not moved or resized until the
            // request finishes, which drops the handle first.
            if let Ok(m) = unsafe { self.mds[li].mem_reg(p, len) } {
                let s = self.send_mut(key);
                s.memh = Some(m);
                s.stage = SendStage::EagerZcopy;
            }
        }
        let ready = self.eps[idx].pending.is_empty() && self.eps[idx].lanes.is_some();
        if !ready || !self.send_step(key)? {
            self.eps[idx].pending.push_back(Pending::Req(key));
            self.mark_pending(idx);
        }
        Ok(self.op_of(key))
    }

    fn zcopy_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.reqs[key].ep.unwrap_or(0);
        let wire = self.wire_id(key);
        let peer_wire = self.peer_id(idx, key);
        let uuid = self.uuid.to_le_bytes();
        let now = self.clock.now();
        let State {
            eps,
            reqs,
            info,
            stats,
            ..
        } = self;
        let ep = &mut eps[idx];
        let proto = ep.proto.ok_or_else(|| Error::Busy("connecting".into()))?;
        let l = ep
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("connecting".into()))?;
        let (li, uep) = &mut l.uct[l.am];
        let attr = &info[*li].attr;
        let s = match &mut reqs[key].kind {
            ReqKind::Send(s) => s,
            _ => return Ok(true),
        };
        let memh = s
            .memh
            .clone()
            .ok_or_else(|| Error::InvalidParam("zcopy without registration".into()))?;
        let len = s.data.len();
        let sreq = if s.sync { peer_wire } else { NO_REQ };
        while s.offset < len {
            let mut hdr = [0u8; PREFIX_LEN + EagerFirstHdr::LEN];
            hdr[..PREFIX_LEN].copy_from_slice(&uuid);
            let (id, hlen, n) = if s.offset == 0 {
                let h = EagerFirstHdr {
                    tag: s.tag,
                    msg_id: s.msg_id,
                    total_len: len as u64,
                    sreq,
                }
                .encode();
                hdr[PREFIX_LEN..].copy_from_slice(&h);
                (
                    am_id::EAGER_FIRST,
                    PREFIX_LEN + EagerFirstHdr::LEN,
                    proto.first_frag,
                )
            } else {
                let h = FragHdr {
                    id: s.msg_id,
                    offset: s.offset as u64,
                }
                .encode();
                hdr[PREFIX_LEN..PREFIX_LEN + FragHdr::LEN].copy_from_slice(&h);
                (
                    am_id::EAGER_MIDDLE,
                    PREFIX_LEN + FragHdr::LEN,
                    proto.middle_frag,
                )
            };
            let n = n.min(attr.am.max_zcopy).min(len - s.offset).max(1);
            let iov = Iov::new(&memh, s.offset, n)?;
            match uep.am_zcopy(id, &hdr[..hlen], &[iov], comp_id(COMP_ZCOPY, wire))? {
                Outcome::NoResource => return Ok(false),
                Outcome::InProgress => s.inflight += 1,
                Outcome::Done(()) => {}
            }
            if s.offset == 0 {
                stats.eager_zcopy += 1;
            }
            ep.last_tx = now;
            s.offset += n;
        }
        if s.inflight == 0 {
            self.zcopy_done(key);
        }
        Ok(true)
    }

    fn zcopy_done(&mut self, key: usize) {
        let s = self.send_mut(key);
        if s.sync && !s.acked {
            s.stage = SendStage::WaitAck;
            s.memh = None;
        } else {
            self.finish(key, Ok(()));
        }
    }

    fn send_rts(&mut self, key: usize) -> Result<bool> {
        let idx = self.reqs[key].ep.unwrap_or(0);
        let wire = self.peer_id(idx, key);
        // Register the data on the RMA lane's memory domain once.
        let rma_iface = self.eps[idx]
            .lanes
            .as_ref()
            .and_then(|l| l.rma.map(|r| l.uct[r].0));
        let s = self.send_mut(key);
        if !s.rts_sent && s.memh.is_none() && !s.data.is_empty() {
            if let Some(li) = rma_iface {
                let ptr = NonNull::new(s.data.as_mut_ptr());
                let len = s.data.len();
                if let Some(ptr) = ptr {
                    // SAFETY: the vector is owned by this request and neither moved nor resized
                    // until the request finishes, which drops the handle first.
                    match unsafe { self.mds[li].mem_reg(ptr, len) } {
                        Ok(m) => self.send_mut(key).memh = Some(m),
                        Err(e) => tracing::debug!("rendezvous send buffer not registered: {e}"),
                    }
                }
            }
        }
        let s = self.send_mut(key);
        let addr = s.data.as_ptr() as u64;
        let (tag, len) = (s.tag, s.data.len());
        let memh = s.memh.clone();
        let (tl, rkey) = self.rts_rkey(rma_iface, memh.as_ref());
        let mut body = std::mem::take(&mut self.scratch);
        body.clear();
        let am = self
            .send_mut(key)
            .am
            .as_ref()
            .map(|(id, h)| (*id, h.clone()));
        let rts_id = match &am {
            Some((id, h)) => {
                body.extend_from_slice(
                    &UserAmHdr {
                        id: *id,
                        hdr_len: h.len() as u32,
                    }
                    .encode(),
                );
                body.extend_from_slice(h);
                am_id::AM_RTS
            }
            None => am_id::RTS,
        };
        RtsHdr {
            tag,
            sreq: wire,
            len: len as u64,
            buf: RemoteBuf {
                addr,
                tl,
                rkey: &rkey,
            },
        }
        .encode(&mut body);
        // Sent now or not at all: the request is at the head of the endpoint's queue (or the
        // queue is empty), and queueing the RTS behind later messages would reorder matching.
        let r = self.send_ctl_now(idx, rts_id, &body);
        self.scratch = body;
        self.rkey_scratch = rkey;
        if !r? {
            return Ok(false);
        }
        self.stats.rndv_rts += 1;
        let s = self.send_mut(key);
        s.rts_sent = true;
        s.stage = SendStage::WaitRndv;
        Ok(true)
    }

    /// The remote key an RTS carries for `memh` on RMA interface `li`, packed into the reused
    /// `rkey_scratch` (give the buffer back there once the RTS is encoded), with the transport's
    /// name; an empty key and name when there is no RMA lane or the key cannot be packed (the
    /// peer then asks for the data by RTR).
    fn rts_rkey(&mut self, li: Option<usize>, memh: Option<&MemHandle>) -> (&'static str, Vec<u8>) {
        let mut rkey = std::mem::take(&mut self.rkey_scratch);
        rkey.clear();
        if let (Some(li), Some(m)) = (li, memh) {
            if self.mds[li].rkey_pack(m, &mut rkey).is_ok() {
                return (self.info[li].tl_name, rkey);
            }
            rkey.clear();
        }
        ("", rkey)
    }

    fn put_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.reqs[key].ep.unwrap_or(0);
        let wire = self.wire_id(key);
        let State {
            eps, reqs, info, ..
        } = self;
        let l = eps[idx]
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("connecting".into()))?;
        let rma = l
            .rma
            .ok_or_else(|| Error::Unsupported("no RMA lane".into()))?;
        let (li, uep) = &mut l.uct[rma];
        let attr = &info[*li].attr;
        let s = match &mut reqs[key].kind {
            ReqKind::Send(s) => s,
            _ => return Ok(true),
        };
        let (Some(memh), Some(rkey)) = (s.memh.clone(), s.rkey.clone()) else {
            return Err(Error::InvalidParam("put without registration".into()));
        };
        let chunk = if attr.put.max_zcopy == 0 {
            s.data.len()
        } else {
            attr.put.max_zcopy
        };
        while s.offset < s.data.len() {
            let n = chunk.min(s.data.len() - s.offset);
            let iov = Iov::new(&memh, s.offset, n)?;
            match uep.put_zcopy(
                &[iov],
                s.remote_addr + s.offset as u64,
                &rkey,
                comp_id(COMP_PUT, wire),
            )? {
                Outcome::NoResource => return Ok(false),
                Outcome::InProgress => s.inflight += 1,
                Outcome::Done(()) => {}
            }
            s.offset += n;
        }
        if s.inflight == 0 {
            return self.put_done(key);
        }
        Ok(true)
    }

    /// All puts of a send completed: flush the RMA lane, then tell the receiver (ATP). Gives
    /// false when the flush met back-pressure (retry later).
    fn put_done(&mut self, key: usize) -> Result<bool> {
        if self.send_mut(key).user_rma {
            self.finish(key, Ok(()));
            return Ok(true);
        }
        let idx = self.reqs[key].ep.unwrap_or(0);
        let wire = self.wire_id(key);
        let l = self.eps[idx]
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("connecting".into()))?;
        let rma = l.rma.unwrap_or(l.am);
        let out = l.uct[rma].1.flush(comp_id(COMP_PUT, wire))?;
        let s = self.send_mut(key);
        match out {
            Outcome::Done(()) => {
                let rreq = s.rreq;
                self.send_ctl(idx, am_id::ATP, &ReqHdr { req: rreq }.encode())?;
                self.finish(key, Ok(()));
            }
            Outcome::NoResource => {
                // The caller queues the request; ATP only after remote completion.
                s.stage = SendStage::PutFlushRetry;
                return Ok(false);
            }
            Outcome::InProgress => {
                s.stage = SendStage::WaitPutFlush;
                s.inflight = 1;
            }
        }
        Ok(true)
    }

    fn pipeline_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.reqs[key].ep.unwrap_or(0);
        let uuid = self.uuid.to_le_bytes();
        let now = self.clock.now();
        let State {
            eps, reqs, info, ..
        } = self;
        let ep = &mut eps[idx];
        let proto = ep.proto.ok_or_else(|| Error::Busy("connecting".into()))?;
        let l = ep
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("connecting".into()))?;
        let (li, uep) = &mut l.uct[l.am];
        let attr = &info[*li].attr;
        let s = match &mut reqs[key].kind {
            ReqKind::Send(s) => s,
            _ => return Ok(true),
        };
        while s.offset < s.data.len() {
            let n = proto.middle_frag.min(s.data.len() - s.offset);
            let h = FragHdr {
                id: s.rreq,
                offset: s.offset as u64,
            }
            .encode();
            let out = am_send(
                uep,
                attr,
                am_id::RNDV_DATA,
                &[&uuid, &h, &s.data[s.offset..s.offset + n]],
            )?;
            if out == Outcome::NoResource {
                return Ok(false);
            }
            ep.last_tx = now;
            s.offset += n;
        }
        self.finish(key, Ok(()));
        Ok(true)
    }

    fn progress_pending(&mut self) -> usize {
        if self.pending_eps.is_empty() {
            return 0;
        }
        let mut n = 0;
        let list = std::mem::take(&mut self.pending_eps);
        let mut keep = Vec::new();
        for idx in list {
            let Some(ep) = self.eps.get_mut(idx) else {
                continue;
            };
            ep.in_pending_list = false;
            if ep.lanes.is_none() || ep.state != EpState::Ready {
                if ep.state == EpState::Connecting {
                    keep.push(idx);
                }
                continue;
            }
            while let Some(p) = self.eps[idx].pending.pop_front() {
                let r = match &p {
                    Pending::Ctl { id, body } => {
                        let uuid = self.uuid.to_le_bytes();
                        let ep = &mut self.eps[idx];
                        let l = ep.lanes.as_mut().map(|l| (l.am, &mut l.uct));
                        match l {
                            Some((am, uct)) => {
                                let (li, uep) = &mut uct[am];
                                am_send(uep, &self.info[*li].attr, *id, &[&uuid, body])
                                    .map(|o| o != Outcome::NoResource)
                            }
                            None => Ok(false),
                        }
                    }
                    Pending::Req(key) => {
                        let key = *key;
                        if self.reqs.get(key).is_none_or(|r| r.done.is_some()) {
                            Ok(true)
                        } else {
                            match &self.reqs[key].kind {
                                ReqKind::Recv(_) => self.get_step(key),
                                _ => self.send_step(key),
                            }
                        }
                    }
                };
                match r {
                    Ok(true) => {
                        n += 1;
                        if let Pending::Ctl { body, .. } = p {
                            self.put_buf(body);
                        }
                    }
                    Ok(false) => {
                        self.eps[idx].pending.push_front(p);
                        keep.push(idx);
                        break;
                    }
                    Err(e) => {
                        self.fail_ep(idx, e);
                        break;
                    }
                }
            }
            // The queue drained on the old lane: a due AM lane switch happens now.
            let due = self.eps.get(idx).is_some_and(|e| {
                e.state == EpState::Ready
                    && e.pending.is_empty()
                    && e.lanes.as_ref().is_some_and(|l| l.am_next.is_some())
            });
            if due {
                match self.am_switch_try(idx) {
                    Ok(true) => n += 1,
                    Ok(false) => keep.push(idx),
                    Err(e) => self.fail_ep(idx, e),
                }
            }
        }
        for idx in keep {
            self.mark_pending(idx);
        }
        n
    }

    // ---- receive side ---------------------------------------------------------------------

    fn new_recv(&mut self, buf: impl Into<RecvBuf>, tag: u64, mask: u64) -> usize {
        let buf = buf.into();
        self.new_req(
            None,
            ReqKind::Recv(RecvReq {
                tag,
                mask,
                buf,
                stage: RecvStage::Posted,
                sender_tag: 0,
                total: 0,
                received: 0,
                memh: None,
                rkey: None,
                remote_addr: 0,
                sreq: NO_REQ,
                offset: 0,
                inflight: 0,
                user_rma: false,
                am: None,
            }),
        )
    }

    /// The receive request `key`. Internal invariant, as [`State::send_mut`].
    #[allow(clippy::unreachable)]
    fn recv_mut(&mut self, key: usize) -> &mut RecvReq {
        match &mut self.reqs[key].kind {
            ReqKind::Recv(r) => r,
            _ => unreachable!("request {key} is not a receive"),
        }
    }

    fn tag_recv(&mut self, buf: impl Into<RecvBuf>, tag: u64, mask: u64) -> Result<Op> {
        let key = self.new_recv(buf, tag, mask);
        // `wire_id(key)`: the new request has the latest generation.
        let wire = (self.req_gen as u64) << 32 | key as u64;
        debug_assert_eq!(wire, self.wire_id(key));
        if let Some(uid) = self.matcher.post(tag, mask, wire) {
            self.recv_from_unexp(key, uid as usize);
        }
        Ok(self.op_of(key))
    }

    fn cancel(&mut self, key: usize, gen: u32) -> bool {
        let (tag, mask) = match self.reqs.get(key) {
            Some(Req {
                gen: g,
                done: None,
                kind: ReqKind::Recv(r),
                ..
            }) if *g == gen && r.stage == RecvStage::Posted => (r.tag, r.mask),
            _ => return false,
        };
        let wire = self.wire_id(key);
        let Some(offloaded) = self.tm_before_cancel(wire) else {
            return false;
        };
        if self.matcher.cancel(tag, mask, wire) {
            self.tm_after_cancel(offloaded);
            self.finish(key, Err(Error::Canceled));
            true
        } else {
            false
        }
    }

    /// Delivers unexpected message `uid` to receive `key`.
    fn recv_from_unexp(&mut self, key: usize, uid: usize) {
        let u = self.unexp.remove(uid);
        self.reqs[key].ep = Some(u.ep);
        match u.kind {
            UnexpKind::Eager { data, total, sreq } => {
                if sreq != NO_REQ {
                    let _ = self.send_ctl(u.ep, am_id::SYNC_ACK, &ReqHdr { req: sreq }.encode());
                }
                let cap = self.recv_mut(key).buf.len();
                let r = self.recv_mut(key);
                r.sender_tag = u.tag;
                r.total = total;
                r.stage = RecvStage::Eager;
                let n = data.len().min(cap);
                r.buf[..n].copy_from_slice(&data[..n]);
                r.received = data.len();
                match u.msg_key {
                    Some(mk) => {
                        self.assembling.insert(mk, Target::Req(key));
                    }
                    None => self.recv_check_done(key),
                }
                self.put_buf(data);
            }
            UnexpKind::Rts {
                sreq,
                len,
                addr,
                tl,
                rkey,
            } => {
                let r = self.rndv_recv_start(key, u.ep, u.tag, sreq, len, addr, &tl, &rkey);
                if let Err(e) = r {
                    self.fail_ep(u.ep, e);
                }
            }
        }
    }

    fn recv_check_done(&mut self, key: usize) {
        let r = self.recv_mut(key);
        if r.received >= r.total {
            let (total, cap) = (r.total, r.buf.len());
            let st = if total > cap {
                Err(Error::Truncated {
                    len: total,
                    capacity: cap,
                })
            } else {
                Ok(())
            };
            self.finish(key, st);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rndv_recv_start(
        &mut self,
        key: usize,
        ep: usize,
        tag: u64,
        sreq: u64,
        len: usize,
        addr: u64,
        tl: &str,
        rkey: &[u8],
    ) -> Result<()> {
        self.reqs[key].ep = Some(ep);
        let cap = self.recv_mut(key).buf.len();
        {
            let r = self.recv_mut(key);
            r.sender_tag = tag;
            r.total = len;
            r.sreq = sreq;
            r.remote_addr = addr;
        }
        if len > cap || len == 0 {
            // Nothing to move: let the sender finish, and complete (truncated or empty).
            self.send_ctl(ep, am_id::ATS, &ReqHdr { req: sreq }.encode())?;
            let st = if len > cap {
                Err(Error::Truncated { len, capacity: cap })
            } else {
                Ok(())
            };
            self.finish(key, st);
            return Ok(());
        }
        let rma = self.eps[ep]
            .lanes
            .as_ref()
            .and_then(|l| l.rma.map(|r| l.uct[r].0));
        let wire = self.peer_id(ep, key);
        let scheme = self.eps[ep].proto.map(|p| p.rndv);
        let rma = rma.filter(|_| scheme != Some(RndvScheme::AmPipeline));
        if let Some(li) = rma {
            let flags = self.info[li].attr.flags;
            let get_ok = scheme == Some(RndvScheme::Get)
                && flags.contains(IfaceFlags::GET_ZCOPY)
                && tl == self.info[li].tl_name
                && !rkey.is_empty();
            let reg = |st: &mut State| -> Result<MemHandle> {
                let r = st.recv_mut(key);
                let ptr = NonNull::new(r.buf.as_mut_ptr())
                    .ok_or_else(|| Error::InvalidParam("empty receive buffer".into()))?;
                // SAFETY: the buffer is owned by this request and not moved or resized until
                // the request finishes, which drops the handle first.
                unsafe { st.mds[li].mem_reg(ptr, len) }
            };
            if get_ok {
                if let (Ok(rk), Ok(m)) = (self.mds[li].rkey_unpack(rkey), reg(self)) {
                    let r = self.recv_mut(key);
                    r.rkey = Some(rk);
                    r.memh = Some(m);
                    r.stage = RecvStage::RndvGet;
                    self.stats.rndv_get += 1;
                    if !self.get_step(key)? {
                        self.eps[ep].pending.push_back(Pending::Req(key));
                        self.mark_pending(ep);
                    }
                    return Ok(());
                }
            }
            if flags.contains(IfaceFlags::PUT_ZCOPY) && self.info[li].md_reg {
                if let Ok(m) = reg(self) {
                    let mut packed = Vec::new();
                    if self.mds[li].rkey_pack(&m, &mut packed).is_ok() {
                        let baddr = m.addr() as u64;
                        let r = self.recv_mut(key);
                        r.memh = Some(m);
                        r.stage = RecvStage::RndvWait;
                        self.stats.rndv_put += 1;
                        let mut body = Vec::new();
                        RtrHdr {
                            sreq,
                            rreq: wire,
                            mode: RtrMode::Put,
                            buf: RemoteBuf {
                                addr: baddr,
                                tl: self.info[li].tl_name,
                                rkey: &packed,
                            },
                        }
                        .encode(&mut body);
                        return self.send_ctl(ep, am_id::RTR, &body);
                    }
                }
            }
        }
        self.recv_mut(key).stage = RecvStage::RndvWait;
        self.stats.rndv_am += 1;
        let mut body = Vec::new();
        RtrHdr {
            sreq,
            rreq: wire,
            mode: RtrMode::AmPipeline,
            buf: RemoteBuf {
                addr: 0,
                tl: "",
                rkey: &[],
            },
        }
        .encode(&mut body);
        self.send_ctl(ep, am_id::RTR, &body)
    }

    fn get_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.reqs[key].ep.unwrap_or(0);
        let wire = self.wire_id(key);
        let State {
            eps, reqs, info, ..
        } = self;
        let l = eps[idx]
            .lanes
            .as_mut()
            .ok_or_else(|| Error::Busy("connecting".into()))?;
        let rma = l
            .rma
            .ok_or_else(|| Error::Unsupported("no RMA lane".into()))?;
        let (li, uep) = &mut l.uct[rma];
        let attr = &info[*li].attr;
        let r = match &mut reqs[key].kind {
            ReqKind::Recv(r) => r,
            _ => return Ok(true),
        };
        let (Some(memh), Some(rkey)) = (r.memh.clone(), r.rkey.clone()) else {
            return Err(Error::InvalidParam("get without registration".into()));
        };
        let chunk = if attr.get.max_zcopy == 0 {
            r.total
        } else {
            attr.get.max_zcopy
        };
        while r.offset < r.total {
            let n = chunk.min(r.total - r.offset);
            let iov = Iov::new(&memh, r.offset, n)?;
            match uep.get_zcopy(
                &[iov],
                r.remote_addr + r.offset as u64,
                &rkey,
                comp_id(COMP_GET, wire),
            )? {
                Outcome::NoResource => return Ok(false),
                Outcome::InProgress => r.inflight += 1,
                Outcome::Done(()) => r.received += n,
            }
            r.offset += n;
        }
        if r.inflight == 0 {
            self.get_done(key)?;
        }
        Ok(true)
    }

    fn get_done(&mut self, key: usize) -> Result<()> {
        let idx = self.reqs[key].ep.unwrap_or(0);
        let r = self.recv_mut(key);
        r.received = r.total;
        if r.user_rma {
            self.finish(key, Ok(()));
            return Ok(());
        }
        let sreq = r.sreq;
        self.finish(key, Ok(()));
        self.send_ctl(idx, am_id::ATS, &ReqHdr { req: sreq }.encode())
    }

    fn handle_completion(&mut self, comp: CompletionId, result: Result<u64>) {
        let kind = comp >> 60;
        let wire = comp & ((1 << 60) - 1);
        let Some(key) = self.req_by_wire(wire) else {
            return;
        };
        // A completion of the wrong kind for its request is dropped (the transport mixed up
        // its operations; the request is left as it is).
        let fits = match (kind, &self.reqs[key].kind) {
            (COMP_GET, ReqKind::Recv(_)) | (COMP_PUT | COMP_ZCOPY, ReqKind::Send(_)) => true,
            (COMP_GET | COMP_PUT | COMP_ZCOPY, _) => false,
            _ => true,
        };
        if !fits {
            tracing::warn!(
                "completion of kind {kind} for request {wire:#x} of another kind dropped"
            );
            return;
        }
        let ep = self.reqs[key].ep.unwrap_or(0);
        if let Err(e) = result {
            self.finish(key, Err(e.clone()));
            self.fail_ep(ep, e);
            return;
        }
        let r = match kind {
            COMP_GET => {
                let r = self.recv_mut(key);
                r.inflight = r.inflight.saturating_sub(1);
                if r.inflight == 0 && r.offset == r.total {
                    self.get_done(key)
                } else {
                    Ok(())
                }
            }
            COMP_PUT => {
                let s = self.send_mut(key);
                s.inflight = s.inflight.saturating_sub(1);
                let stage = s.stage;
                if s.inflight == 0 && s.offset == s.data.len() {
                    if stage == SendStage::WaitPutFlush {
                        let rreq = s.rreq;
                        let r = self.send_ctl(ep, am_id::ATP, &ReqHdr { req: rreq }.encode());
                        self.finish(key, Ok(()));
                        r
                    } else {
                        match self.put_done(key) {
                            Ok(false) => {
                                self.eps[ep].pending.push_back(Pending::Req(key));
                                self.mark_pending(ep);
                                Ok(())
                            }
                            Ok(true) => Ok(()),
                            Err(e) => Err(e),
                        }
                    }
                } else {
                    Ok(())
                }
            }
            COMP_ZCOPY => {
                let s = self.send_mut(key);
                s.inflight = s.inflight.saturating_sub(1);
                if s.inflight == 0 && s.offset >= s.data.len() && s.stage == SendStage::EagerZcopy {
                    self.zcopy_done(key);
                }
                Ok(())
            }
            tag_offload::COMP_TM => {
                self.tm_send_done(key, Ok(()));
                Ok(())
            }
            COMP_ATOMIC => {
                if let (ReqKind::Atomic { value }, Ok(v)) = (&mut self.reqs[key].kind, &result) {
                    *value = *v;
                }
                self.finish(key, Ok(()));
                Ok(())
            }
            COMP_FLUSH => {
                if let ReqKind::Flush { eps_left, retry } = &mut self.reqs[key].kind {
                    *eps_left = eps_left.saturating_sub(1);
                    if *eps_left == 0 && retry.is_empty() {
                        self.finish(key, Ok(()));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(e) = r {
            self.fail_ep(ep, e);
        }
    }

    fn flush_eps(&mut self, eps: &[usize]) -> Result<Op> {
        for &idx in eps {
            self.ep_usable(idx)?;
        }
        let key = self.new_req(
            None,
            ReqKind::Flush {
                eps_left: 0,
                retry: eps.to_vec(),
            },
        );
        self.reqs[key].ep = eps.first().copied();
        self.flush_step(key)?;
        if self.reqs[key].done.is_none() {
            self.flushes.push(key);
        }
        Ok(self.op_of(key))
    }

    /// Issues the transport flushes a flush request still owes: an endpoint whose ucp queue is
    /// not empty waits for it to drain; a transport `NoResource` is retried on the next call.
    fn flush_step(&mut self, key: usize) -> Result<()> {
        let wire = self.wire_id(key);
        let retry = match &mut self.reqs[key].kind {
            ReqKind::Flush { retry, .. } => std::mem::take(retry),
            _ => return Ok(()),
        };
        let mut still = Vec::new();
        let mut started = 0usize;
        for idx in retry {
            if let Err(e) = self.ep_usable(idx) {
                self.finish(key, Err(e));
                return Ok(());
            }
            let ep = &mut self.eps[idx];
            if !ep.pending.is_empty() || ep.lanes.is_none() {
                still.push(idx);
                continue;
            }
            let l = ep.lanes.as_mut().map(|l| &mut l.uct);
            let mut again = false;
            for (_, uep) in l.into_iter().flatten() {
                match uep.flush(comp_id(COMP_FLUSH, wire))? {
                    Outcome::InProgress => started += 1,
                    Outcome::NoResource => again = true,
                    Outcome::Done(()) => {}
                }
            }
            if again {
                still.push(idx);
            }
        }
        if let ReqKind::Flush { eps_left, retry } = &mut self.reqs[key].kind {
            *eps_left += started;
            *retry = still;
            if *eps_left == 0 && retry.is_empty() {
                self.finish(key, Ok(()));
            }
        }
        Ok(())
    }

    fn progress_flushes(&mut self) {
        if self.flushes.is_empty() {
            return;
        }
        let list = std::mem::take(&mut self.flushes);
        for key in list {
            let waiting = match self.reqs.get(key) {
                Some(Req {
                    done: None,
                    kind: ReqKind::Flush { retry, .. },
                    ..
                }) => !retry.is_empty(),
                _ => continue,
            };
            if waiting {
                if let Err(e) = self.flush_step(key) {
                    self.finish(key, Err(e));
                    continue;
                }
            }
            if self.reqs.get(key).is_some_and(|r| r.done.is_none()) {
                self.flushes.push(key);
            }
        }
    }

    // ---- incoming messages ----------------------------------------------------------------

    fn handle_am(&mut self, id: u8, data: &[u8]) {
        self.handle_am_from(None, id, data);
    }

    /// An active message that arrived on interface `iface` (`None`: not from an AM lane, e.g.
    /// a tag-offload rendezvous header).
    fn handle_am_from(&mut self, iface: Option<usize>, id: u8, data: &[u8]) {
        let (src, body) = match split_prefix(data) {
            Ok(x) => x,
            Err(e) => {
                self.malformed_unknown += 1;
                tracing::warn!("dropping a ucp message from an unknown sender: {e}");
                return;
            }
        };
        if id == am_id::WIREUP {
            self.handle_wireup(src, body);
            return;
        }
        let Some(&idx) = self.by_uuid.get(&src) else {
            if id == am_id::CLOSE_ACK {
                // Both sides closed at once: this side forgot the endpoint on the peer's CLOSE
                // before the ack of its own CLOSE arrived.
                tracing::debug!("CLOSE_ACK from {src:#018x} after its endpoint was closed");
                return;
            }
            self.malformed_unknown += 1;
            tracing::warn!(
                "dropping ucp message {id} from unknown worker {src:#018x} (no wire-up seen)"
            );
            return;
        };
        // The peer's AM lane switch: messages on its new lane wait for the marker on the old.
        let on_new = iface.is_some_and(|i| self.info[i].ep_only);
        let ep = &mut self.eps[idx];
        if matches!(ep.state, EpState::Failed(_) | EpState::Closed) {
            return;
        }
        ep.last_rx = self.now_cache;
        if on_new && ep.rx_gate.admit(true, id, data) == Admit::Held {
            self.stats.am_switch_held += 1;
            return;
        }
        let r = if id == am_id::EAGER_ONLY {
            // The common message, without the general decode and dispatch.
            EagerHdr::decode(body).map(|h| {
                let payload = &body[EagerHdr::LEN..];
                self.eager_arrived(idx, src, h.tag, payload, payload.len(), NO_REQ, None);
            })
        } else {
            match Msg::decode(id, body) {
                Ok(Msg::AmLaneSwitch) => self.on_lane_switch(idx, on_new),
                Ok(m) => self.handle_msg(idx, src, m),
                Err(e) => Err(e),
            }
        };
        if let Err(e) = r {
            self.am_failed(idx, src, id, e);
        }
    }

    /// A message from the peer of endpoint `idx` broke the protocol: the endpoint fails.
    #[cold]
    fn am_failed(&mut self, idx: usize, src: u64, id: u8, e: Error) {
        let e = match e {
            Error::Wire(w) => Error::Wire(format!(
                "protocol error from worker {src:#018x} (message id {id}): {w}"
            )),
            other => other,
        };
        self.fail_ep(idx, e);
    }

    fn handle_wireup(&mut self, src: u64, addr: &[u8]) {
        let peer = match WorkerAddress::decode(addr) {
            Ok(p) if p.uuid == src => p,
            Ok(_) => {
                self.malformed_unknown += 1;
                tracing::warn!("wire-up address uuid does not match its sender {src:#018x}");
                return;
            }
            Err(e) => {
                self.malformed_unknown += 1;
                tracing::warn!("bad wire-up address from {src:#018x}: {e}");
                return;
            }
        };
        if let Some(&idx) = self.by_uuid.get(&src) {
            if !matches!(self.eps[idx].state, EpState::Failed(_) | EpState::Closed) {
                self.eps[idx].last_rx = self.now_cache;
                return;
            }
        }
        let idx = self.new_ep(peer, None);
        self.to_connect.push(idx);
    }

    fn handle_msg(&mut self, idx: usize, src: u64, msg: Msg<'_>) -> Result<()> {
        match msg {
            Msg::Wireup(_) | Msg::Keepalive => Ok(()),
            Msg::Eager(h, data) => {
                self.eager_arrived(idx, src, h.tag, data, data.len(), NO_REQ, None);
                Ok(())
            }
            Msg::EagerSync(h, data) => {
                self.eager_arrived(idx, src, h.tag, data, data.len(), h.sreq, None);
                Ok(())
            }
            Msg::EagerFirst(h, data) => {
                let total = usize::try_from(h.total_len)
                    .map_err(|_| Error::Wire("message length overflows".into()))?;
                if self.assembling.contains_key(&(src, h.msg_id)) {
                    return Err(Error::Wire(format!(
                        "first fragment of message {} repeated",
                        h.msg_id
                    )));
                }
                self.eager_arrived(idx, src, h.tag, data, total, h.sreq, Some(h.msg_id));
                Ok(())
            }
            Msg::EagerMiddle(h, data) => self.eager_middle(src, h, data),
            Msg::SyncAck(h) => {
                let key = self.peer_req(idx, h.req, Named::SyncAck)?;
                let s = self.send_mut(key);
                if s.stage == SendStage::WaitAck {
                    self.finish(key, Ok(()));
                } else {
                    // Fragments are still going out: the send finishes when they are.
                    s.acked = true;
                }
                Ok(())
            }
            Msg::Rts(h) => {
                let len = usize::try_from(h.len)
                    .map_err(|_| Error::Wire("rendezvous length overflows".into()))?;
                let uid = self.unexp.vacant_key();
                match self.tm_arrive(h.tag, uid as u64) {
                    Some(wire) => match self.req_by_wire(wire) {
                        Some(key) => self.rndv_recv_start(
                            key, idx, h.tag, h.sreq, len, h.buf.addr, h.buf.tl, h.buf.rkey,
                        ),
                        None => Ok(()),
                    },
                    None => {
                        self.unexp.insert(Unexp {
                            ep: idx,
                            tag: h.tag,
                            kind: UnexpKind::Rts {
                                sreq: h.sreq,
                                len,
                                addr: h.buf.addr,
                                tl: h.buf.tl.to_owned(),
                                rkey: h.buf.rkey.to_vec(),
                            },
                            msg_key: None,
                        });
                        Ok(())
                    }
                }
            }
            Msg::Ats(h) => {
                let key = self.peer_req(idx, h.req, Named::Ats)?;
                let wire = self.wire_id(key);
                self.tm_rndv_ats(key, wire);
                self.finish(key, Ok(()));
                Ok(())
            }
            Msg::Rtr(h) => {
                let key = self.peer_req(idx, h.sreq, Named::Rtr)?;
                self.tm_mapped_materialize(key);
                let rma = self.eps[idx]
                    .lanes
                    .as_ref()
                    .and_then(|l| l.rma.map(|r| l.uct[r].0));
                let s = self.send_mut(key);
                s.rreq = h.rreq;
                s.offset = 0;
                let mut use_put = false;
                if let (RtrMode::Put, Some(li), Some(_)) = (h.mode, rma, s.memh.as_ref()) {
                    if self.info[li].tl_name == h.buf.tl
                        && self.info[li].attr.flags.contains(IfaceFlags::PUT_ZCOPY)
                    {
                        if let Ok(rk) = self.mds[li].rkey_unpack(h.buf.rkey) {
                            let s = self.send_mut(key);
                            s.rkey = Some(rk);
                            s.remote_addr = h.buf.addr;
                            s.stage = SendStage::Put;
                            use_put = true;
                        }
                    }
                }
                if !use_put {
                    self.send_mut(key).stage = SendStage::Pipeline;
                }
                if !self.eps[idx].pending.is_empty() || !self.send_step(key)? {
                    self.eps[idx].pending.push_back(Pending::Req(key));
                    self.mark_pending(idx);
                }
                Ok(())
            }
            Msg::RndvData(h, data) => {
                let key = self.peer_req(idx, h.id, Named::RndvData)?;
                let r = match &mut self.reqs[key].kind {
                    ReqKind::Recv(r) if r.stage == RecvStage::RndvWait => r,
                    _ => {
                        return Err(Error::Wire(
                            "rendezvous data for a request not expecting it".into(),
                        ))
                    }
                };
                let off = h.offset as usize;
                // Fragments come in order on one lane: anything else (a repeat, a gap) would
                // complete the receive with bytes missing.
                if off != r.received || off.checked_add(data.len()).is_none_or(|e| e > r.total) {
                    return Err(Error::Wire(format!(
                        "rendezvous fragment {}+{} is not the next of the {}-byte message \
                         ({} bytes received)",
                        h.offset,
                        data.len(),
                        r.total,
                        r.received
                    )));
                }
                r.buf[off..off + data.len()].copy_from_slice(data);
                r.received += data.len();
                self.recv_check_done(key);
                Ok(())
            }
            Msg::Atp(h) => {
                let key = self.peer_req(idx, h.req, Named::Atp)?;
                let r = self.recv_mut(key);
                r.received = r.total;
                self.finish(key, Ok(()));
                Ok(())
            }
            Msg::UserAm(h, uh, data) => {
                let mut v = self.get_buf();
                v.extend_from_slice(data);
                self.deliver_am(idx, h.id, uh, v);
                Ok(())
            }
            Msg::AmRts(h, uh, rts) => {
                let len = usize::try_from(rts.len)
                    .map_err(|_| Error::Wire("rendezvous length overflows".into()))?;
                if len > (1usize << 40) {
                    return Err(Error::Wire(format!(
                        "active message of {len} bytes is implausibly large"
                    )));
                }
                let key = self.new_recv(zeroed_buf(len)?, 0, 0);
                self.recv_mut(key).am = Some((h.id, uh.to_vec()));
                self.rndv_recv_start(
                    key,
                    idx,
                    0,
                    rts.sreq,
                    len,
                    rts.buf.addr,
                    rts.buf.tl,
                    rts.buf.rkey,
                )
            }
            Msg::AtomicReq(h) => {
                let (status, old) = match self.apply_atomic(&h) {
                    Ok(v) => (0, v),
                    Err(e) => {
                        tracing::debug!("emulated atomic refused: {e}");
                        (1, 0)
                    }
                };
                if h.req != NO_REQ {
                    let rep = AtomicRepHdr {
                        req: h.req,
                        status,
                        value: old,
                    };
                    self.send_ctl(idx, am_id::ATOMIC_REP, &rep.encode())?;
                }
                Ok(())
            }
            Msg::AtomicRep(h) => {
                let key = self.peer_req(idx, h.req, Named::AtomicRep)?;
                if let ReqKind::Atomic { value } = &mut self.reqs[key].kind {
                    *value = h.value;
                }
                let st = if h.status == 0 {
                    Ok(())
                } else {
                    Err(Error::RemoteAccess(
                        "the target refused the atomic: address outside its mapped memory or misaligned"
                            .into(),
                    ))
                };
                self.finish(key, st);
                Ok(())
            }
            Msg::Stream(data) => {
                self.eps[idx].stream_rx.extend(data);
                self.stream_serve(idx);
                Ok(())
            }
            Msg::EpAddr(h) => self.on_ep_addr(idx, h.connected, h.ep_addr),
            Msg::AmLaneSwitch => self.on_lane_switch(idx, false),
            Msg::CloseAck => {
                self.eps[idx].close_acked = true;
                Ok(())
            }
            Msg::Close => {
                // Everything the peer sent before CLOSE has been handled: tell it so.
                let _ = self.send_ctl(idx, am_id::CLOSE_ACK, &[]);
                self.close_ep(
                    idx,
                    Error::ConnectionReset("the peer closed its endpoint".into()),
                );
                Ok(())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn eager_arrived(
        &mut self,
        idx: usize,
        src: u64,
        tag: u64,
        data: &[u8],
        total: usize,
        sreq: u64,
        msg_id: Option<u64>,
    ) {
        let uid = self.unexp.vacant_key();
        let complete = data.len() >= total;
        match self.tm_arrive(tag, uid as u64) {
            Some(wire) => {
                let Some(key) = self.req_by_wire(wire) else {
                    return;
                };
                if sreq != NO_REQ {
                    let _ = self.send_ctl(idx, am_id::SYNC_ACK, &ReqHdr { req: sreq }.encode());
                }
                let req = &mut self.reqs[key];
                // The matcher holds receives only.
                let ReqKind::Recv(r) = &mut req.kind else {
                    return;
                };
                req.ep = Some(idx);
                r.sender_tag = tag;
                r.total = total;
                r.stage = RecvStage::Eager;
                let cap = r.buf.len();
                let n = data.len().min(cap);
                r.buf[..n].copy_from_slice(&data[..n]);
                r.received = data.len();
                if complete {
                    // All of it is here (as `recv_check_done` would find).
                    let st = if total > cap {
                        Err(Error::Truncated {
                            len: total,
                            capacity: cap,
                        })
                    } else {
                        Ok(())
                    };
                    self.finish(key, st);
                } else if let Some(m) = msg_id {
                    self.assembling.insert((src, m), Target::Req(key));
                }
            }
            None => {
                let mut v = self.get_buf();
                v.reserve(total.min(1 << 26));
                v.extend_from_slice(data);
                let msg_key = if complete {
                    None
                } else {
                    msg_id.map(|m| (src, m))
                };
                self.unexp.insert(Unexp {
                    ep: idx,
                    tag,
                    kind: UnexpKind::Eager {
                        data: v,
                        total,
                        sreq,
                    },
                    msg_key,
                });
                if let Some(mk) = msg_key {
                    self.assembling.insert(mk, Target::Unexp(uid));
                }
            }
        }
    }

    fn eager_middle(&mut self, src: u64, h: FragHdr, data: &[u8]) -> Result<()> {
        let Some(&t) = self.assembling.get(&(src, h.id)) else {
            return Err(Error::Wire(format!(
                "fragment of unknown message {} (no first fragment)",
                h.id
            )));
        };
        let off = h.offset as usize;
        match t {
            Target::Req(key) => {
                let r = match self.reqs.get_mut(key).map(|r| &mut r.kind) {
                    Some(ReqKind::Recv(r)) => r,
                    _ => {
                        self.assembling.remove(&(src, h.id));
                        return Ok(());
                    }
                };
                if off != r.received || off + data.len() > r.total {
                    return Err(Error::Wire(format!(
                        "fragment at {off}+{} does not continue message {} ({} of {} bytes)",
                        data.len(),
                        h.id,
                        r.received,
                        r.total
                    )));
                }
                let cap = r.buf.len();
                if off < cap {
                    let n = data.len().min(cap - off);
                    r.buf[off..off + n].copy_from_slice(&data[..n]);
                }
                r.received += data.len();
                if r.received >= r.total {
                    self.assembling.remove(&(src, h.id));
                    self.recv_check_done(key);
                }
            }
            Target::Unexp(uid) => {
                let u = &mut self.unexp[uid];
                let UnexpKind::Eager {
                    data: buf, total, ..
                } = &mut u.kind
                else {
                    return Err(Error::Wire("fragment for a rendezvous message".into()));
                };
                if off != buf.len() || off + data.len() > *total {
                    return Err(Error::Wire(format!(
                        "fragment at {off}+{} does not continue message {} ({} of {} bytes)",
                        data.len(),
                        h.id,
                        buf.len(),
                        total
                    )));
                }
                buf.extend_from_slice(data);
                if buf.len() >= *total {
                    u.msg_key = None;
                    self.assembling.remove(&(src, h.id));
                }
            }
        }
        Ok(())
    }

    // ---- failures, timers, close ----------------------------------------------------------

    fn fail_ep(&mut self, idx: usize, err: Error) {
        let Some(ep) = self.eps.get_mut(idx) else {
            return;
        };
        if matches!(ep.state, EpState::Failed(_) | EpState::Closed) {
            return;
        }
        tracing::debug!("endpoint to {:#018x} failed: {err}", ep.uuid);
        ep.state = EpState::Failed(err.clone());
        self.stats.ep_failures += 1;
        self.teardown_ep(idx, &err);
        self.failed_notify.push(idx);
    }

    /// Closes endpoint `idx` now, finishes close request `key`, and frees the slot.
    fn close_now(&mut self, idx: usize, key: usize, result: Result<()>) {
        self.close_ep(idx, Error::Canceled);
        if self.eps.contains(idx) {
            self.eps.remove(idx);
        }
        self.to_connect.retain(|&i| i != idx);
        self.failed_notify.retain(|&i| i != idx);
        self.pending_eps.retain(|&i| i != idx);
        self.finish(key, result);
    }

    fn send_close(&mut self, c: &mut Closing) {
        let _ = self.send_ctl(c.ep, am_id::CLOSE, &[]);
        c.deadline = Some(self.now() + self.cfg.keepalive_timeout);
    }

    fn progress_closings(&mut self) {
        if self.closings.is_empty() {
            return;
        }
        let list = std::mem::take(&mut self.closings);
        for mut c in list {
            if let Some(fk) = c.flush {
                let status = match self.reqs.get(fk) {
                    Some(r) => match &r.done {
                        Some(d) => d.status.clone(),
                        None => {
                            self.closings.push(c);
                            continue;
                        }
                    },
                    None => Ok(()),
                };
                if self.reqs.contains(fk) {
                    self.reqs.remove(fk);
                }
                c.flush = None;
                let ready = self
                    .eps
                    .get(c.ep)
                    .is_some_and(|e| e.state == EpState::Ready);
                match status {
                    Ok(()) if ready => self.send_close(&mut c),
                    // The peer closed or failed first: nothing is left to deliver to it.
                    Ok(()) | Err(Error::ConnectionReset(_)) => {
                        self.close_now(c.ep, c.req, Ok(()));
                        continue;
                    }
                    Err(_) if !ready => {
                        self.close_now(c.ep, c.req, Ok(()));
                        continue;
                    }
                    Err(e) => {
                        self.close_now(c.ep, c.req, Err(e));
                        continue;
                    }
                }
            }
            let done = match self.eps.get(c.ep) {
                Some(e) => {
                    e.close_acked
                        || e.state != EpState::Ready
                        || c.deadline.is_some_and(|d| self.clock.now() >= d)
                }
                None => true,
            };
            if done {
                self.close_now(c.ep, c.req, Ok(()));
            } else {
                self.closings.push(c);
            }
        }
    }

    fn close_ep(&mut self, idx: usize, err: Error) {
        let Some(ep) = self.eps.get_mut(idx) else {
            return;
        };
        if ep.state == EpState::Closed {
            return;
        }
        ep.state = EpState::Closed;
        self.teardown_ep(idx, &err);
        let uuid = self.eps[idx].uuid;
        if self.by_uuid.get(&uuid) == Some(&idx) {
            self.by_uuid.remove(&uuid);
        }
    }

    /// Fails every request tied to the endpoint and drops its transport endpoints.
    /// Starts the address exchange of a connect-to-endpoint lane once the endpoint's lanes
    /// exist (after the wire-up message on the creator's side): answers an address that
    /// arrived early, or sends ours.
    fn ep_lane_start(&mut self, idx: usize) -> Result<()> {
        if self.eps[idx]
            .lanes
            .as_ref()
            .is_none_or(|l| l.rma_wait.is_none())
        {
            return Ok(());
        }
        if let Some((connected, addr)) = self.eps[idx].peer_ep_addr.take() {
            return self.on_ep_addr(idx, connected, &addr);
        }
        let ep_addr = match self.eps[idx]
            .lanes
            .as_ref()
            .and_then(|l| l.rma_wait.as_ref())
        {
            Some(w) => w.ep.ep_address()?,
            None => return Ok(()),
        };
        let mut body = Vec::new();
        EpAddrHdr {
            connected: false,
            ep_addr: &ep_addr,
        }
        .encode(&mut body);
        self.send_ctl(idx, am_id::EP_ADDR, &body)
    }

    /// The peer's connect-to-endpoint lane address: connect ours to it (replying with our
    /// address, marked connected), and once the peer says it is connected too, start using the
    /// lane for RMA and (when it can carry them) active messages, behind the lane-switch marker
    /// (see the `wireup` module docs). If our endpoint cannot connect, the lane is dropped and
    /// we never say "connected": both sides stay on the wire-up lane.
    fn on_ep_addr(&mut self, idx: usize, peer_connected: bool, addr: &[u8]) -> Result<()> {
        let ep = &mut self.eps[idx];
        let Some(l) = ep.lanes.as_mut() else {
            ep.peer_ep_addr = Some((peer_connected, addr.to_vec()));
            return Ok(());
        };
        let Some(w) = l.rma_wait.as_mut() else {
            // We do not use that transport to this peer (or already do): nothing to connect.
            return Ok(());
        };
        let mut reply = None;
        if !w.connected {
            let dev = ep
                .addr
                .tls
                .get(w.remote)
                .map(|t| t.device_addr.as_slice())
                .unwrap_or_default();
            match w
                .ep
                .connect_to_ep(dev, addr)
                .and_then(|()| w.ep.ep_address())
            {
                Ok(a) => {
                    w.connected = true;
                    reply = Some(a);
                }
                Err(e) => {
                    let Some(w) = l.rma_wait.take() else {
                        return Ok(());
                    };
                    let name = self.info[w.li].tl_name;
                    tracing::warn!(
                        "{name} lane to {:#018x} did not connect, staying on the wire-up lane: {e}",
                        ep.uuid
                    );
                    if self.by_uct.remove(&(w.li, w.ep.id().0)).is_some() {
                        self.iface_users[w.li] = self.iface_users[w.li].saturating_sub(1);
                    }
                    return Ok(());
                }
            }
        }
        if let Some(a) = reply {
            let mut body = Vec::new();
            EpAddrHdr {
                connected: true,
                ep_addr: &a,
            }
            .encode(&mut body);
            self.send_ctl(idx, am_id::EP_ADDR, &body)?;
        }
        if peer_connected {
            let Some(l) = self.eps[idx].lanes.as_mut() else {
                return Ok(());
            };
            let Some(w) = l.rma_wait.take() else {
                return Ok(());
            };
            l.uct.push((w.li, w.ep));
            let lane = l.uct.len() - 1;
            l.rma = Some(lane);
            if crate::wireup::carries_am(&self.info[w.li].attr, &self.cfg) {
                l.am_next = Some(lane);
            }
            let am_li = l.uct[l.am].0;
            let mut proto = ProtoConfig::compute(
                &self.info[am_li].attr,
                self.info[am_li].md_reg,
                Some(&self.info[w.li].attr),
                &self.cfg,
            );
            self.tm_adjust_proto(am_li, &mut proto);
            self.eps[idx].proto = Some(proto);
            if self.cfg.proto_info
                && self.eps[idx]
                    .lanes
                    .as_ref()
                    .is_some_and(|l| l.am_next.is_none())
            {
                if let Ok(t) = self.proto_table(idx) {
                    eprintln!(
                        "[rucx] endpoint to {:#018x} (RMA lane connected):\n{t}",
                        self.eps[idx].uuid
                    );
                }
            }
            if self.eps[idx].pending.is_empty() && !self.am_switch_try(idx)? {
                self.mark_pending(idx);
            } else if !self.eps[idx].pending.is_empty() {
                // `progress_pending` switches once the queue drained.
                self.mark_pending(idx);
            }
        }
        Ok(())
    }

    /// Moves the endpoint's AM lane to `am_next` if one is due: sends the lane-switch marker as
    /// the last message on the old lane, then makes the new lane the AM lane and recomputes
    /// the thresholds from its limits. Call only with an empty pending queue. Gives false when
    /// the marker met back-pressure (retry from progress); true when switched or nothing due.
    fn am_switch_try(&mut self, idx: usize) -> Result<bool> {
        let uuid = self.uuid.to_le_bytes();
        let ep = &mut self.eps[idx];
        let Some(l) = ep.lanes.as_mut() else {
            return Ok(true);
        };
        let Some(new) = l.am_next else {
            return Ok(true);
        };
        let old = l.am;
        {
            let (li, uep) = &mut l.uct[old];
            if am_send(uep, &self.info[*li].attr, am_id::AM_LANE_SWITCH, &[&uuid])?
                == Outcome::NoResource
            {
                return Ok(false);
            }
        }
        ep.last_tx = self.now_cache;
        l.am = new;
        l.am_next = None;
        // The old lane stays connected; if no other purpose uses it, its interface no longer
        // counts this endpoint as a user (it is then polled like an idle interface).
        if l.rma != Some(old) && l.amo != Some(old) {
            l.released = Some(old);
            let li = l.uct[old].0;
            self.iface_users[li] = self.iface_users[li].saturating_sub(1);
        }
        let new_li = l.uct[new].0;
        let rma_li = l.rma.map(|r| l.uct[r].0);
        let mut proto = ProtoConfig::compute(
            &self.info[new_li].attr,
            self.info[new_li].md_reg,
            rma_li.map(|r| &self.info[r].attr),
            &self.cfg,
        );
        self.tm_adjust_proto(new_li, &mut proto);
        self.eps[idx].proto = Some(proto);
        self.stats.am_lane_switches += 1;
        if self.cfg.proto_info {
            if let Ok(t) = self.proto_table(idx) {
                eprintln!(
                    "[rucx] endpoint to {:#018x} (AM and RMA lanes moved to {}):\n{t}",
                    self.eps[idx].uuid, self.info[new_li].tl_name
                );
            }
        }
        Ok(true)
    }

    /// The peer's lane-switch marker (`on_new`: it came over the new lane, a protocol error):
    /// handles the messages its new lane delivered early, in order.
    fn on_lane_switch(&mut self, idx: usize, on_new: bool) -> Result<()> {
        let held = self.eps[idx].rx_gate.marker(on_new)?;
        let gen = self.eps[idx].gen;
        for (id, data) in held {
            if self.eps.get(idx).is_none_or(|e| {
                e.gen != gen || matches!(e.state, EpState::Failed(_) | EpState::Closed)
            }) {
                break;
            }
            self.handle_am_from(None, id, &data);
        }
        Ok(())
    }

    fn teardown_ep(&mut self, idx: usize, err: &Error) {
        let ep = &mut self.eps[idx];
        let pend: Vec<Pending> = ep.pending.drain(..).collect();
        ep.rx_gate.clear();
        if let Some(mut l) = ep.lanes.take() {
            if let Some(w) = l.rma_wait.take() {
                if self.by_uct.remove(&(w.li, w.ep.id().0)).is_some() {
                    self.iface_users[w.li] = self.iface_users[w.li].saturating_sub(1);
                }
            }
            for (pos, (li, uep)) in l.uct.iter_mut().enumerate() {
                uep.pending_purge(&mut |_| {});
                if self.by_uct.remove(&(*li, uep.id().0)).is_some() && l.released != Some(pos) {
                    self.iface_users[*li] = self.iface_users[*li].saturating_sub(1);
                }
            }
        }
        for p in pend {
            if let Pending::Ctl { body, .. } = p {
                self.put_buf(body);
            }
        }
        let keys: Vec<usize> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.ep == Some(idx) && r.done.is_none())
            .map(|(k, _)| k)
            .collect();
        for k in keys {
            if matches!(self.reqs[k].kind, ReqKind::Flush { .. }) {
                self.finish(k, Err(err.clone()));
                continue;
            }
            self.finish(k, Err(err.clone()));
        }
        // Unexpected messages that can no longer complete (incomplete, or rendezvous whose data
        // sits with the failed peer) are dropped; complete eager ones stay receivable.
        let dead: Vec<usize> = self
            .unexp
            .iter()
            .filter(|(_, u)| {
                u.ep == idx && (u.msg_key.is_some() || matches!(u.kind, UnexpKind::Rts { .. }))
            })
            .map(|(k, _)| k)
            .collect();
        for uid in dead {
            self.matcher.remove_unexpected(uid as u64);
            let u = self.unexp.remove(uid);
            if let Some(mk) = u.msg_key {
                self.assembling.remove(&mk);
            }
        }
        let uuid = self.eps[idx].uuid;
        self.assembling.retain(|(s, _), _| *s != uuid);
    }

    fn notify_failures(&mut self) -> usize {
        let mut n = 0;
        while let Some(idx) = self.failed_notify.pop() {
            let Some(ep) = self.eps.get_mut(idx) else {
                continue;
            };
            let h = EpHandle {
                idx: idx as u32,
                gen: ep.gen,
            };
            if let (EpState::Failed(e), Some(cb)) = (&ep.state, ep.err_handler.as_mut()) {
                cb(h, e);
                n += 1;
            }
        }
        n
    }

    fn timers(&mut self) {
        let Some(interval) = self.cfg.keepalive_interval else {
            return;
        };
        let now = self.now_cache;
        if now < self.next_timer {
            return;
        }
        self.next_timer = now + interval / 4;
        let timeout = self.cfg.keepalive_timeout;
        let ready: Vec<usize> = self
            .eps
            .iter()
            .filter(|(_, e)| e.state == EpState::Ready)
            .map(|(i, _)| i)
            .collect();
        for idx in ready {
            let ep = &self.eps[idx];
            let silent = now.saturating_sub(ep.last_rx);
            if silent > timeout {
                let e = Error::Timeout(format!(
                    "worker {:#018x} was silent for {:?} (keepalive timeout {:?})",
                    ep.uuid, silent, timeout
                ));
                self.fail_ep(idx, e);
                continue;
            }
            if now.saturating_sub(ep.last_tx) >= interval && ep.pending.is_empty() {
                if let Err(e) = self.send_ctl(idx, am_id::KEEPALIVE, &[]) {
                    self.fail_ep(idx, e);
                }
            }
        }
    }
}
