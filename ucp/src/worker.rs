//! The worker: owns the transport interfaces, the endpoints and the requests, and drives every
//! protocol from `progress()`.
//!
//! This module holds the [`Worker`] struct, its public types and its creation; the worker's
//! machinery is split by job: `ep` and `req` (the records of endpoints and requests),
//! `api_types` (the public types the core holds), `state` (`State`, composing the core and the
//! families' state), `endpoint`, `request`, `progress` (polling and the event sink), `wait`
//! (sleeping), `timers` (keepalive, close deadlines), `pending` (lane sends, back-pressure and
//! resuming a queued send in its family), `dispatch` (incoming messages, routed to their
//! protocol family), `flush`, `close` and `failure` (endpoint failure). The protocol families
//! live beside it, each with its wire messages' handlers: `tag`, `rndv`, [`crate::rma`], `amo`,
//! `am`, `stream` and [`crate::wireup`].
//!
//! Peers are not trusted. A message that names one of our requests (SYNC_ACK, ATS, RTR,
//! RNDV_DATA, ATP, ATOMIC_REP) is checked by `Core::peer_req` against the request's owning
//! endpoint, kind and stage before anything is touched; a mismatch fails the endpoint that sent
//! it and nothing else. Request ids on the wire are scrambled with a secret drawn per endpoint,
//! so one peer cannot name another endpoint's requests. No `unwrap`, `expect`, `unreachable!`
//! or `panic!` is allowed in the worker or the protocol families outside tests (the lint below,
//! repeated in each of their modules); the two request accessors that assert a kind are internal
//! invariants, documented where they are allowed.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

pub(crate) mod api_types;
mod close;
pub(crate) mod core_api;
mod dispatch;
pub(crate) mod endpoint;
pub(crate) mod ep;
mod failure;
mod flush;
mod late_rx;
#[cfg(test)]
mod late_rx_tests;
pub(crate) mod peer_req;
pub(crate) mod peers;
pub(crate) mod pending;
pub(crate) mod progress;
pub use progress::CLOCK_PERIOD;
pub(crate) mod req;
mod req_table;
mod request;
pub(crate) use request::recv_status;
#[cfg(test)]
mod held_tests;
pub(crate) mod state;
#[cfg(test)]
mod take_tests;
pub(crate) mod timer_queue;
pub(crate) mod timers;
mod uct_index;
mod wait;

pub use crate::config::TM_ENABLE;
pub use crate::tag::offload::state::TmStats;
pub use crate::wireup::TM_THRESH;
pub use api_types::{
    AmHandler, AmoSize, EpHandle, ErrHandler, ProtoStats, RecvOk, RequestCallback,
};

use crate::address::{TlAddress, WorkerAddress};
use crate::context::{Context, Features};
use crate::worker::ep::IfaceInfo;
use crate::worker::state::{Core, State};
use slab::Slab;
use std::rc::Rc;
use std::time::Duration;
use ucs::time::{Clock, MonotonicClock};
use ucs::{Error, Result};
use uct::Iface as _;
use uct::MdFlags;
use uct::MemoryDomain as _;

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

pub use crate::tag::message::Message;

/// A ucp worker: a progress engine with its own transport interfaces, endpoints and requests.
///
/// One thread at a time: every method takes `&mut self` and no lock is taken on the data path.
/// Its transports are thread-bound (it is not `Send`); for several threads use [`crate::MtWorker`].
pub struct Worker {
    /// The interfaces (a slice by deref) and the event set the worker sleeps on.
    pub(crate) ifaces: uct::Worker,
    pub(crate) st: State,
    /// Progress calls so far (wrapping): paces the polling of idle interfaces.
    pub(crate) tick: u32,
    /// Per interface, the tick of its last event: an interface without endpoints that had
    /// one recently (a peer uses it to reach us) is polled on every call for a while.
    pub(crate) last_event: Vec<u32>,
    /// The next progress call polls every interface (set after an event-fd wakeup or a busy
    /// arm, whose event may be on an idle interface).
    pub(crate) poll_all: bool,
    /// The interfaces the calls between two clock reads poll when they are not one (`solo`);
    /// see [`Worker::progress`].
    pub(crate) polled: progress::PollList,
    /// The one interface the calls between two clock reads poll, when exactly one qualifies
    /// (polled inline, the common case); `None`: they go through `polled`.
    pub(crate) solo: Option<usize>,
    /// `solo` has no endpoints (it is polled for a recent event): its events are noted in
    /// `last_event`, which keeps it polled; those of an interface with endpoints need not be.
    pub(crate) solo_idle: bool,
    /// Once the clock reaches this, the next call that finds it moved polls every interface
    /// (see [`progress::IDLE_IFACE_WAIT`]).
    pub(crate) idle_due: Duration,
    /// The tick and the clock of the last call that read the clock: how long the calls since
    /// took tells slow calls (see [`progress::SLOW_CALL`]).
    pub(crate) clock_read_tick: u32,
    pub(crate) clock_read_at: Duration,
    /// The interfaces polled after they ring ([`uct::Iface::ring_on_work`]: the self
    /// transport) and on calls that read the clock; never `solo` or in `polled`.
    pub(crate) rung: Vec<usize>,
}

/// The next process-unique worker id (never 0).
fn next_worker_id() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    loop {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        if id != 0 {
            return id;
        }
    }
}

pub(crate) fn new_uuid() -> u64 {
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

impl Worker {
    /// Creates a worker on the real monotonic clock.
    pub fn new(ctx: &Context) -> Result<Self> {
        Self::with_clock(ctx, MonotonicClock::new())
    }

    /// Creates a worker whose timers (keepalive) read `clock`; tests pass a
    /// [`ucs::time::ManualClock`].
    pub fn with_clock(ctx: &Context, clock: impl Clock + 'static) -> Result<Self> {
        let mut ifaces = uct::Worker::new();
        let mut mds = Vec::new();
        let mut info = Vec::new();
        let mut failures = Vec::new();
        for r in ctx.resources() {
            // No operation completes before its bytes can reach the peer: a connection still
            // being made gives back-pressure, and the request waits as pending.
            let params = uct::IfaceParams {
                device: r.device.name.clone(),
                connect_backpressure: true,
            };
            match ifaces.open_iface_with(r.tl_name, &params) {
                Ok((md, iface)) => {
                    info.push(IfaceInfo {
                        tl_name: r.tl_name,
                        dev_name: r.device.name.clone(),
                        dev_type: r.device.dev_type,
                        attr: iface.attr().clone(),
                        md_reg: md.attr().flags.contains(MdFlags::REG),
                        ep_only: crate::wireup::connect_to_ep_only(iface.attr()),
                    });
                    mds.push(md);
                    ifaces.add_iface(iface)?;
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
        let req_shared: Rc<crate::request::ReqShared> = Default::default();
        // Interfaces that ring the worker when they get work are polled after a ring only.
        let rung = (0..n_ifaces)
            .filter(|&i| {
                let bell: Rc<dyn uct::WorkBell> = req_shared.clone();
                ifaces.get_mut(i).is_some_and(|f| f.ring_on_work(bell))
            })
            .collect();
        if ctx.features().contains(Features::WAKEUP) {
            ifaces.watch_events()?;
        }
        let mut w = Worker {
            ifaces,
            st: State {
                core: Core {
                    uuid,
                    id: next_worker_id(),
                    req_shared,
                    cfg: ctx.config().clone(),
                    features: ctx.features(),
                    clock: Box::new(clock),
                    mds,
                    any_ep_only: info.iter().any(|i| i.ep_only),
                    info,
                    address,
                    eps: Slab::new(),
                    ep_gen: 0,
                    by_uuid: Default::default(),
                    by_uct: Default::default(),
                    iface_users: vec![0; n_ifaces],
                    reqs: Default::default(),
                    req_gen: 0,
                    pool: Vec::new(),
                    rndv_boxes: Vec::new(),
                    regions: Default::default(),
                    to_connect: Vec::new(),
                    more_work: false,
                    pending_eps: Vec::new(),
                    flushes: Vec::new(),
                    failed_notify: Vec::new(),
                    next_msg_id: 1,
                    scratch: Vec::new(),
                    rkey_scratch: Vec::new(),
                    now_cache: now,
                    now_stamp: crate::worker::ep::Stamp::of(now),
                    timers: Default::default(),
                    next_timer: Duration::MAX,
                    clock_stale: false,
                    malformed_unknown: 0,
                    stats: ProtoStats::default(),
                    quarantine: Vec::new(),
                    callbacks_due: Vec::new(),
                    held_done: Vec::new(),
                    to_fail: Vec::new(),
                    tokens_done: Vec::new(),
                    completion_hook: None,
                    recv_ok: Default::default(),
                    recv_ok_on: false,
                    client_queued: 0,
                    closings: Vec::new(),
                    protos: Vec::new(),
                    min_tag_rndv: usize::MAX,
                    tm_enabled: crate::config::TM_ENABLE.bool()?,
                },
                am: Default::default(),
                tag: Default::default(),
                rndv: Default::default(),
                amo: Default::default(),
            },
            tick: 0,
            last_event: vec![0; n_ifaces],
            poll_all: true,
            polled: progress::PollList::default(),
            solo: None,
            solo_idle: false,
            idle_due: Duration::ZERO,
            clock_read_tick: 0,
            clock_read_at: Duration::ZERO,
            rung,
        };
        w.st.start_keepalive()?;
        if w.st.core.tm_enabled {
            w.st.tag.tm.init(&w.ifaces, &w.st.core.info);
        }
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

    /// This worker's process-unique id, carried by its endpoint handles.
    pub fn id(&self) -> u32 {
        self.st.id
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
}
