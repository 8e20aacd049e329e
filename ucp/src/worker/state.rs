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

use crate::config::UcpConfig;
use crate::context::Features;
use crate::request::Completion;
use crate::rndv::RndvState;
use crate::wireup::ProtoConfig;
use crate::worker::api_types::{CompletionHook, ProtoStats, RecvOkQueue};
use crate::worker::ep::{Closing, Ep, IfaceInfo, Stamp};
use crate::worker::req::{ReqKind, Rndv, POOL_BUF_MAX, POOL_MAX};
use crate::worker::uct_index::UctIndex;
use slab::Slab;
use std::rc::Rc;
use std::time::Duration;
use ucs::time::Clock;
use uct::AnyMd;

/// The worker core: endpoints and their lanes, the request table, the progress and pending
/// queues, the clock, the configuration and the counters. The protocol families reach it
/// through the methods of `worker/core_api.rs` (its fields are private to `worker`).
pub(crate) struct Core {
    pub(super) uuid: u64,
    /// Process-unique worker id, carried by every [`EpHandle`](crate::EpHandle).
    pub(super) id: u32,
    /// Shared with every [`Request`](crate::Request) handed out: its identity, and the handles
    /// dropped since the last progress call.
    pub(super) req_shared: std::rc::Rc<crate::request::ReqShared>,
    pub(super) cfg: UcpConfig,
    pub(super) features: Features,
    pub(super) clock: Box<dyn Clock>,
    pub(super) mds: Vec<AnyMd>,
    pub(super) info: Vec<IfaceInfo>,
    /// Some interface of `info` is `ep_only` (set once, with `info`).
    pub(super) any_ep_only: bool,
    pub(super) address: Vec<u8>,
    pub(super) eps: Slab<Ep>,
    pub(super) ep_gen: u32,
    pub(super) by_uuid: crate::worker::peers::PeerIndex,
    pub(super) by_uct: UctIndex,
    /// Transport endpoints per interface (index as `info`): interfaces without any are polled
    /// only every [`IDLE_IFACE_PERIOD`](crate::worker::progress::IDLE_IFACE_PERIOD) progress calls.
    pub(super) iface_users: Vec<u32>,
    pub(super) reqs: crate::worker::req_table::ReqTable,
    pub(super) req_gen: u32,
    pub(super) pool: Vec<Vec<u8>>,
    /// Cleared [`Rndv`] boxes of finished requests, reused by the next ones that need one
    /// (boxes, not values: a request holds its box, and the pool keeps the allocations).
    #[allow(clippy::vec_box)]
    pub(super) rndv_boxes: Vec<Box<Rndv>>,
    /// The memory this worker mapped for remote access (shared with each [`MemMap`](crate::MemMap),
    /// which removes its range when dropped).
    pub(super) regions: crate::rma::Regions,
    pub(super) to_connect: Vec<usize>,
    /// Set when something is queued on `to_connect`, `pending_eps`, `flushes`, `closings`,
    /// `failed_notify`, `callbacks_due`, `held_done`, `to_fail` or `rndv.gets` (and left set until `progress` finds them
    /// all empty
    /// again): one load tells a progress call whether it has queued work.
    pub(super) more_work: bool,
    pub(super) pending_eps: Vec<usize>,
    pub(super) flushes: Vec<usize>,
    pub(super) failed_notify: Vec<usize>,
    pub(super) next_msg_id: u64,
    pub(super) scratch: Vec<u8>,
    /// Reused buffer for the remote key an RTS carries (see [`Core::rts_rkey`]).
    pub(super) rkey_scratch: Vec<u8>,
    /// The worker's timers (keepalive, close deadlines).
    pub(super) timers: crate::worker::timer_queue::Timers,
    /// The earliest timer deadline (`Duration::MAX` without timers): progress runs the timers
    /// once `now_cache` reaches it.
    pub(super) next_timer: Duration,
    /// The clock as read at the start of the current (or last) progress call: message
    /// timestamps for keepalive use it, so the data path reads no clock per message.
    pub(super) now_cache: Duration,
    /// `now_cache` as a [`Stamp`], what endpoints note as their last send and receive times.
    pub(super) now_stamp: Stamp,
    /// Set when the worker may have slept (`arm`), a timer is due already, or the last calls
    /// were slow (`progress::SLOW_CALL`): the next progress call reads the clock.
    pub(super) clock_stale: bool,
    pub(super) malformed_unknown: u64,
    pub(super) stats: ProtoStats,
    pub(super) quarantine: Vec<Vec<u8>>,
    /// Finished requests whose callback or token is due at the end of this progress call.
    pub(super) callbacks_due: Vec<usize>,
    /// Requests a family finished through [`Core::finish`] while another family still holds
    /// part of them (a tag-offload send's transport entry, an active message that came by
    /// rendezvous): [`State::settle_held`] finishes them through [`State::finish`], which
    /// releases that part first.
    /// Each with the request's generation (the slot may be reused before they settle).
    pub(super) held_done: Vec<(usize, u32, ucs::Result<()>)>,
    /// Endpoints a family found failed where it cannot fail them itself (failing one
    /// finishes every family's requests on it): the next progress call fails them
    /// (see [`Core::fail_ep_soon`]).
    /// Each with the endpoint's generation (a closed endpoint's slot may be reused).
    pub(super) to_fail: Vec<(usize, u32, ucs::Error)>,
    /// Results of token requests, waiting for `take_done_tokens`.
    pub(super) tokens_done: Vec<(u64, Completion)>,
    /// Where the results of hook requests go (`None`: to `tokens_done`, like a token's).
    pub(super) completion_hook: Option<CompletionHook>,
    /// With [`Worker::queue_recv_ok`](crate::Worker::queue_recv_ok) on: the hook receives
    /// that finished whole and without error, for
    /// [`Worker::pop_recv_ok`](crate::Worker::pop_recv_ok) (the hook is not called for them).
    pub(crate) recv_ok: RecvOkQueue,
    /// [`Worker::queue_recv_ok`](crate::Worker::queue_recv_ok) is on.
    pub(crate) recv_ok_on: bool,
    /// What waits for the client ([`Worker::client_queued`](crate::Worker::client_queued)):
    /// [`QUEUED_RECV_OK`] when `recv_ok` has records, [`QUEUED_AM`] when the AM family's inbox
    /// has messages. Set when they are queued, cleared when the last is taken: one load tells
    /// a progress call of the C library whether it has anything to hand out.
    pub(crate) client_queued: u8,
    pub(super) closings: Vec<Closing>,
    /// The distinct protocol configurations of the endpoints (see [`Core::intern_proto`]).
    pub(super) protos: Vec<Rc<ProtoConfig>>,
    /// The smallest tag rendezvous threshold of any endpoint's configuration (`usize::MAX`
    /// before the first): tag offload posts a receive that can only get eager messages only
    /// where that saves a copy.
    pub(super) min_tag_rndv: usize,
    /// Tag offload allowed (`RUCX_TM_ENABLE`): read by wire-up, which sets the endpoints'
    /// thresholds for it, and by the tag family, which sends and posts by it.
    pub(super) tm_enabled: bool,
}

/// The worker's state: the [`Core`] and each protocol family's own state struct. It derefs
/// to the core, so the worker's machinery names the core's fields and methods directly.
pub(crate) struct State {
    /// Endpoints, requests, queues, clock, configuration and counters.
    pub(super) core: Core,
    /// User active messages: the handlers.
    pub(crate) am: crate::am::state::AmState,
    /// Atomics: how many went which way.
    pub(crate) amo: crate::amo::state::AmoState,
    /// Tag matching: the matcher, the unexpected messages and tag offload's state.
    pub(crate) tag: crate::tag::state::TagState,
    /// Rendezvous: the reads in progress on shared memory.
    pub(crate) rndv: RndvState,
}

impl std::ops::Deref for State {
    type Target = Core;
    #[inline(always)]
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl std::ops::DerefMut for State {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.core
    }
}

/// What a protocol family's code sees of the worker: the [`Core`] (it derefs to it), the
/// family's own state `S` ([`Family::own`]) and, for the families that call the rendezvous
/// family by design (tag and active messages), that family's view ([`Family::rndv`]);
/// nothing of any other family's (the compiler checks it). [`State`] lends one per call
/// (`State::tag_family`, `State::rndv_family`, ...).
///
/// A view is one pointer to the worker's state, as a `&mut State` is: what it may reach is
/// said by its methods, not by its fields, so lending one costs nothing on the data path (a
/// view of three references cost the receive path 4 instructions per message, built on the
/// stack for each call it was passed to).
pub(crate) struct Family<'w, S> {
    st: &'w mut State,
    own: std::marker::PhantomData<fn(&mut S)>,
}

/// A family's state within [`State`] ([`Family::own`] for the family `S`).
pub(crate) trait FamilyState: Sized {
    /// This family's state and the core, borrowed apart.
    fn parts(st: &mut State) -> (&mut Core, &mut Self);
    /// This family's state, to read.
    fn part(st: &State) -> &Self;
}

macro_rules! family_state {
    ($ty:ty, $field:ident) => {
        impl FamilyState for $ty {
            #[inline(always)]
            fn parts(st: &mut State) -> (&mut Core, &mut Self) {
                (&mut st.core, &mut st.$field)
            }
            #[inline(always)]
            fn part(st: &State) -> &Self {
                &st.$field
            }
        }
    };
}
family_state!(crate::tag::state::TagState, tag);
family_state!(crate::am::state::AmState, am);
family_state!(crate::amo::state::AmoState, amo);
family_state!(RndvState, rndv);

/// The tag family's view (matching, eager, tag offload): it starts rendezvous.
pub(crate) type TagFamily<'w> = Family<'w, crate::tag::state::TagState>;

/// The active-message family's view: it sends and receives large messages by rendezvous.
pub(crate) type AmFamily<'w> = Family<'w, crate::am::state::AmState>;

/// The rendezvous family's view.
pub(crate) type RndvFamily<'w> = Family<'w, RndvState>;

impl<'w, S: FamilyState> Family<'w, S> {
    /// The view of family `S` of `st`.
    #[inline(always)]
    fn of(st: &'w mut State) -> Self {
        Family {
            st,
            own: std::marker::PhantomData,
        }
    }

    /// The family's own state.
    #[inline(always)]
    pub(crate) fn own(&mut self) -> &mut S {
        S::parts(self.st).1
    }

    /// The family's own state, to read.
    #[inline(always)]
    pub(crate) fn own_ref(&self) -> &S {
        S::part(self.st)
    }

    /// The core and the family's own state, borrowed apart.
    #[inline(always)]
    pub(crate) fn split(&mut self) -> (&mut Core, &mut S) {
        S::parts(self.st)
    }

    /// The family's own state beside the buffer pool (for a whole message's copy while the
    /// family's state is borrowed).
    #[inline(always)]
    pub(crate) fn own_and_pool(&mut self) -> (&mut S, &mut Vec<Vec<u8>>) {
        let (core, own) = S::parts(self.st);
        (own, &mut core.pool)
    }
}

/// The families that start rendezvous (tag, active messages) reach that family's view.
pub(crate) trait StartsRndv {}
impl StartsRndv for crate::tag::state::TagState {}
impl StartsRndv for crate::am::state::AmState {}

impl<S: StartsRndv> Family<'_, S> {
    /// The rendezvous family's view, lent for one call.
    #[inline(always)]
    pub(crate) fn rndv(&mut self) -> RndvFamily<'_> {
        Family::of(self.st)
    }
}

impl<S> std::ops::Deref for Family<'_, S> {
    type Target = Core;
    #[inline(always)]
    fn deref(&self) -> &Core {
        &self.st.core
    }
}

impl<S> std::ops::DerefMut for Family<'_, S> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.st.core
    }
}

impl State {
    /// The active-message family's view of the worker.
    #[inline(always)]
    pub(crate) fn am_family(&mut self) -> AmFamily<'_> {
        Family::of(self)
    }

    /// The atomics family's view of the worker.
    #[inline(always)]
    pub(crate) fn amo_family(&mut self) -> Family<'_, crate::amo::state::AmoState> {
        Family::of(self)
    }

    /// The tag family's view of the worker.
    #[inline(always)]
    pub(crate) fn tag_family(&mut self) -> TagFamily<'_> {
        Family::of(self)
    }

    /// The rendezvous family's view of the worker.
    #[inline(always)]
    pub(crate) fn rndv_family(&mut self) -> RndvFamily<'_> {
        Family::of(self)
    }
}

/// [`Worker::client_queued`](crate::Worker::client_queued): receives queued as [`RecvOk`](crate::RecvOk)
/// records.
pub const QUEUED_RECV_OK: u8 = 1;
/// [`Worker::client_queued`](crate::Worker::client_queued): active messages queued in the
/// inbox.
pub const QUEUED_AM: u8 = 4;

/// Distinct protocol configurations [`Core::intern_proto`] keeps.
pub(crate) const PROTOS_MAX: usize = 32;

impl Core {
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
        self.min_tag_rndv = self.min_tag_rndv.min(p.tag_rndv_thresh);
        let r = Rc::new(p);
        if self.protos.len() < PROTOS_MAX {
            self.protos.push(r.clone());
        }
        r
    }

    /// The smallest tag rendezvous threshold of any endpoint's configuration.
    #[inline]
    pub(crate) fn min_tag_rndv(&self) -> usize {
        self.min_tag_rndv
    }

    /// Tag offload allowed (`RUCX_TM_ENABLE`).
    #[inline]
    pub(crate) fn tm_enabled(&self) -> bool {
        self.tm_enabled
    }

    /// The memory this worker mapped for remote access.
    pub(crate) fn regions(&self) -> &crate::rma::Regions {
        &self.regions
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

    /// The rendezvous box in `slot`, filled from the pool (or allocated) when empty.
    #[inline]
    #[allow(clippy::vec_box)]
    fn rndv_box_in<'a>(
        boxes: &mut Vec<Box<Rndv>>,
        slot: &'a mut Option<Box<Rndv>>,
    ) -> &'a mut Rndv {
        slot.get_or_insert_with(|| boxes.pop().unwrap_or_default())
    }

    /// Gives a finished request's rendezvous box back to the pool `boxes`, cleared.
    #[allow(clippy::vec_box)]
    pub(super) fn recycle_rndv(boxes: &mut Vec<Box<Rndv>>, mut x: Box<Rndv>) {
        if boxes.len() < POOL_MAX {
            *x = Rndv::default();
            boxes.push(x);
        }
    }

    /// The rendezvous state of send `key`, taken from the pool (or allocated) on first use.
    /// Internal invariant, as [`Core::send_mut`].
    #[allow(clippy::unreachable)]
    pub(crate) fn send_rndv(&mut self, key: usize) -> &mut Rndv {
        match &mut self.reqs[key].kind {
            ReqKind::Send(s) => Self::rndv_box_in(&mut self.rndv_boxes, &mut s.rndv),
            _ => unreachable!("request {key} is not a send"),
        }
    }

    /// A zero-copy piece of send `key` completed: counts it off the pieces in flight, and
    /// gives true when none is left and all of the data went out (the families' completion
    /// of a zero-copy send then finishes it).
    pub(crate) fn zcopy_piece_done(&mut self, key: usize) -> bool {
        let x = self.send_rndv(key);
        x.inflight = x.inflight.saturating_sub(1);
        let inflight = x.inflight;
        let s = self.send_mut(key);
        inflight == 0 && s.offset >= s.data.len()
    }

    /// The rendezvous state of receive `key`, as [`Core::send_rndv`].
    #[allow(clippy::unreachable)]
    pub(crate) fn recv_rndv(&mut self, key: usize) -> &mut Rndv {
        match &mut self.reqs[key].kind {
            ReqKind::Recv(r) => Self::rndv_box_in(&mut self.rndv_boxes, &mut r.rndv),
            _ => unreachable!("request {key} is not a receive"),
        }
    }
}
