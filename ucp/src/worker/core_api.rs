//! The worker core's interface to the protocol families: what a family (tag, rendezvous, RMA,
//! atomics, active messages, stream, wire-up) may ask of the worker's [`Core`] besides its own state.
//!
//! The core owns endpoints and their lanes, the request table, the progress queues, the
//! buffer pool, the clock and the counters; a family reaches them through these methods and
//! the few others listed here, and keeps its own per-worker state in its own struct
//! (`State::tag`, with tag offload's, `State::rndv`, `State::amo`, `State::am`), whose fields only
//! the family names. The set:
//! - endpoints: [`Core::ep`], [`Core::ep_get`], [`Core::ep_mut`], [`Core::ep_queue_empty`],
//!   [`Core::ep_ready`], [`Core::ep_gen`], [`Core::lane_mut`], [`Core::am_lane_mut`],
//!   [`Core::am_lane_ref`], [`Core::am_lane_and_req`], [`Core::ep_and_req_mut`],
//!   [`Core::req_step`], [`Core::add_lane`], [`Core::register_lane`],
//!   [`Core::unregister_lane`], [`Core::release_iface`], [`Core::ep_of_peer`],
//!   [`Core::iface_users`], [`Core::ep_note_tx`], [`Core::ep_note_rx`],
//!   [`Core::queue_after_acks`]; the lanes through
//!   [`Ep::ready_lanes`]/[`Ep::ready_am`]/[`Ep::ready_proto`];
//! - one endpoint's record ([`Ep`], whose fields are private to `worker`): [`Ep::gen`],
//!   [`Ep::peer_uuid`], [`Ep::state`], [`Ep::is_down`], [`Ep::queue_empty`], [`Ep::ready`],
//!   [`Ep::lanes`], [`Ep::lanes_mut`], [`Ep::lanes_mut_with_extra`], [`Ep::proto`],
//!   [`Ep::set_proto`], [`Ep::connected`], [`Ep::extra`], [`Ep::extra_get_mut`],
//!   [`Ep::extra_mut`], [`Ep::note_amo_sent`], [`Ep::note_amo_acked`],
//!   [`Ep::set_err_handler`];
//! - interfaces and memory domains: [`Core::iface`], [`Core::ifaces`], [`Core::md`];
//! - one request's record ([`Req`]: its `kind`, the families' records, is theirs; the rest
//!   is private to `worker`): [`Req::gen`], [`Req::ep`], [`Req::set_ep`],
//!   [`Req::is_finished`], [`Req::kind_with_notify`], [`Req::notify_hook`],
//!   [`Req::keep_result`];
//! - requests: [`Core::req_get`], [`Core::req_mut`], [`Core::requests`],
//!   [`Core::next_wire_id`],
//!   [`Core::drop_req`], [`Core::take_finished`], [`Core::deliver_detached`],
//!   [`Core::hook_waiting`], and `new_req`, `wire_id`, `req_ep`,
//!   `req_by_wire`, `finish` (`worker/request.rs`), `peer_id`/`peer_req`
//!   (`worker/peer_req.rs`);
//! - progress queues: `start_req`, `queue_req` and `mark_pending` (`worker/pending.rs`: a
//!   request's first step, or queued behind an endpoint's earlier sends), `send_ctl`/`send_ctl_now`/`send_ctl2` (control
//!   messages that wait their turn), [`Core::am_short_now`] and [`Core::short2_now`] /
//!   [`Core::short2_at`] (a message that goes inline now or not at all; the tag send's
//!   eager-short step passes its size test);
//! - the worker's identity, time and counters: [`Core::worker_uuid`], [`Core::worker_id`],
//!   `now`, [`Core::now_stamp`], [`Core::new_msg_id`], [`Core::peek_msg_id`],
//!   [`Core::stats_mut`]; the buffer pool (`get_buf`/`put_buf`).
//!
//! `Core`'s fields are private to `worker` (`pub(super)`), and these methods are `Core`'s, so
//! they can reach no family's state (the compiler checks it); `State` is the core plus the
//! families' state structs and derefs to the core. A family's code runs on its view
//! ([`Family`](crate::worker::state::Family)): these methods, its own state struct, and the
//! views of the families it calls by design.

use crate::request::{Completion, RequestId};
use crate::wire::PREFIX_LEN;
use crate::wireup::ProtoConfig;
use crate::worker::api_types::ErrHandler;
use crate::worker::api_types::{EpHandle, ProtoStats};
use crate::worker::endpoint::bad_handle;
use crate::worker::ep::{Ep, EpExtra, EpState, IfaceInfo, Lanes, Pending, Stamp};
use crate::worker::req::{Done, Notify, Req, ReqKind};
use crate::worker::state::Core;
use std::rc::Rc;
use ucs::{Outcome, Result};
use uct::{AnyEp, AnyMd, Endpoint as _, IfaceAttr, IfaceFlags};

/// What a protocol step for one request on one endpoint works on at once: the endpoint, the
/// worker's interfaces (as its lanes name them), the request and the counters (see
/// [`Core::req_step`]).
pub(crate) struct ReqStep<'a> {
    pub(crate) ep: &'a mut Ep,
    pub(crate) ifaces: &'a [IfaceInfo],
    pub(crate) req: &'a mut Req,
    pub(crate) stats: &'a mut ProtoStats,
}

/// An endpoint's AM lane, ready to send on (see [`Core::am_lane_and_req`]).
pub(crate) struct AmLane<'a> {
    /// The endpoint's protocol thresholds.
    pub(crate) proto: ProtoConfig,
    /// The lane's transport endpoint.
    pub(crate) uep: &'a mut AnyEp,
    /// Its interface's attributes.
    pub(crate) attr: &'a IfaceAttr,
    /// The endpoint's time of last send, to note a send in.
    pub(crate) last_tx: &'a mut Stamp,
}

/// An endpoint's AM lane, ready to send on, with its thresholds by reference (see
/// [`Core::am_lane_ref`]).
pub(crate) struct AmLaneRef<'a> {
    /// The endpoint's protocol thresholds.
    pub(crate) proto: &'a ProtoConfig,
    /// The lane's transport endpoint.
    pub(crate) uep: &'a mut AnyEp,
    /// Its interface's attributes.
    pub(crate) attr: &'a IfaceAttr,
    /// The endpoint's time of last send, to note a send in.
    pub(crate) last_tx: &'a mut Stamp,
    /// The worker's clock stamp, to note (read it after the send: the clock then stays out of
    /// the registers the send needs).
    pub(crate) now: &'a Stamp,
}

impl Core {
    /// Transport endpoints per interface (index as the interfaces'): how much each is used.
    #[inline]
    pub(crate) fn iface_users(&self) -> &[u32] {
        &self.iface_users
    }

    /// Endpoint `idx` (an index the caller holds: a live endpoint).
    #[inline]
    pub(crate) fn ep(&self, idx: usize) -> &Ep {
        &self.eps[idx]
    }

    /// Endpoint `idx`, if there is one (an index from the user or a peer).
    #[inline]
    pub(crate) fn ep_get(&self, idx: usize) -> Option<&Ep> {
        self.eps.get(idx)
    }

    /// Endpoint `idx`, if there is one, to change.
    #[inline]
    pub(crate) fn ep_get_mut(&mut self, idx: usize) -> Option<&mut Ep> {
        self.eps.get_mut(idx)
    }

    /// Endpoint `idx`, to change (as [`Core::ep`]).
    #[inline]
    pub(crate) fn ep_mut(&mut self, idx: usize) -> &mut Ep {
        &mut self.eps[idx]
    }

    /// Lane `lane` of endpoint `idx` (an index into its lanes), with the description of its
    /// interface; `Busy` while the endpoint is connecting.
    #[inline]
    pub(crate) fn lane_mut(&mut self, idx: usize, lane: usize) -> Result<(&mut AnyEp, &IfaceInfo)> {
        let (li, uep) = &mut self.eps[idx].ready_lanes()?.uct[lane];
        Ok((uep, &self.info[*li]))
    }

    /// Endpoint `idx` with request `key` (`None`: no request there), both to change.
    #[inline]
    pub(crate) fn ep_and_req_mut(&mut self, idx: usize, key: usize) -> (&mut Ep, Option<&mut Req>) {
        (&mut self.eps[idx], self.reqs.get_mut(key))
    }

    /// Endpoint `idx`'s AM lane, to send for request `key` (which it gives too); `Busy` while
    /// the endpoint is connecting.
    #[inline]
    pub(crate) fn am_lane_and_req(
        &mut self,
        idx: usize,
        key: usize,
    ) -> Result<(AmLane<'_>, &mut Req)> {
        let (proto, (li, uep), last_tx) = self.eps[idx].ready_am()?;
        let lane = AmLane {
            proto,
            uep,
            attr: &self.info[*li].attr,
            last_tx,
        };
        Ok((lane, &mut self.reqs[key]))
    }

    /// Endpoint `idx`, request `key` and what a step sending for it needs, at once.
    #[inline]
    pub(crate) fn req_step(&mut self, idx: usize, key: usize) -> ReqStep<'_> {
        ReqStep {
            ep: &mut self.eps[idx],
            ifaces: &self.info,
            req: &mut self.reqs[key],
            stats: &mut self.stats,
        }
    }

    /// Endpoint `idx`'s AM lane: its interface index, transport endpoint and the interface's
    /// description (`None` while the endpoint is connecting).
    #[inline]
    pub(crate) fn am_lane_mut(&mut self, idx: usize) -> Option<(usize, &mut AnyEp, &IfaceInfo)> {
        let l = self.eps[idx].lanes.as_mut()?;
        let (li, uep) = &mut l.uct[l.am];
        Some((*li, uep, &self.info[*li]))
    }

    /// Endpoint `idx`'s protocol thresholds and AM lane, to send on (`None` while the endpoint
    /// is connecting); see [`AmLaneRef`].
    #[inline(always)]
    pub(crate) fn am_lane_ref(&mut self, idx: usize) -> Option<AmLaneRef<'_>> {
        let ep = &mut self.eps[idx];
        let (Some(proto), Some(l)) = (ep.proto.as_deref(), ep.lanes.as_mut()) else {
            return None;
        };
        let (li, uep) = &mut l.uct[l.am];
        Some(AmLaneRef {
            proto,
            uep,
            attr: &self.info[*li].attr,
            last_tx: &mut ep.last_tx,
            now: &self.now_stamp,
        })
    }

    /// Whether nothing waits on endpoint `idx`'s pending list: a new operation may start at
    /// once without overtaking earlier ones.
    #[inline]
    pub(crate) fn ep_queue_empty(&self, idx: usize) -> bool {
        self.eps[idx].pending.is_empty()
    }

    /// Whether endpoint `idx` is connected and nothing waits on its pending list.
    #[inline]
    pub(crate) fn ep_ready(&self, idx: usize) -> bool {
        let ep = &self.eps[idx];
        ep.pending.is_empty() && ep.lanes.is_some()
    }

    /// The generation of endpoint slot `idx` (`None`: no endpoint there).
    #[inline]
    pub(crate) fn ep_gen(&self, idx: usize) -> Option<u32> {
        self.eps.get(idx).map(|e| e.gen)
    }

    /// Interface `i` of the worker (as the lanes name them).
    #[inline]
    pub(crate) fn iface(&self, i: usize) -> &IfaceInfo {
        &self.info[i]
    }

    /// Every interface of the worker, in lane-index order.
    #[inline]
    pub(crate) fn ifaces(&self) -> &[IfaceInfo] {
        &self.info
    }

    /// The memory domain of interface `i`.
    #[inline]
    pub(crate) fn md(&self, i: usize) -> &AnyMd {
        &self.mds[i]
    }

    /// Request `key`, if there is one.
    #[inline]
    pub(crate) fn req_get(&self, key: usize) -> Option<&Req> {
        self.reqs.get(key)
    }

    /// Request `key`, to change (as [`Core::req_get`]).
    #[inline]
    pub(crate) fn req_mut(&mut self, key: usize) -> &mut Req {
        &mut self.reqs[key]
    }

    /// The time of the current progress call, as endpoints note their last send and receive.
    #[inline]
    pub(crate) fn now_stamp(&self) -> Stamp {
        self.now_stamp
    }

    /// This worker's uuid (what its messages carry as the sender).
    #[inline]
    pub(crate) fn worker_uuid(&self) -> u64 {
        self.uuid
    }

    /// This worker's process-unique id (what its handles carry).
    #[inline]
    pub(crate) fn worker_id(&self) -> u32 {
        self.id
    }
}

impl Core {
    /// The wire id the next [`Core::new_req`] will give: an operation that may finish at
    /// once names itself with it and creates the request only when it does not.
    #[inline]
    pub(crate) fn next_wire_id(&self) -> u64 {
        let gen = self.req_gen.wrapping_add(1) & 0x0FFF_FFFF;
        u64::from(gen) << 32 | self.reqs.vacant_key() as u64
    }

    /// Removes request `key`, never handed out (its operation failed to start).
    pub(crate) fn drop_req(&mut self, key: usize) {
        self.reqs.remove(key);
    }

    /// The result of request `key` when it finished already (its slot freed); `None` while
    /// it runs.
    pub(crate) fn take_finished(&mut self, key: usize) -> Option<Completion> {
        self.reqs[key].done.as_ref()?;
        Some(self.reqs.take_done(key).unwrap_or_else(Completion::ok))
    }

    /// Completes request `key` at once when its result goes to a token or the completion hook
    /// (the C API's): its slot is freed and `c()` queued for `take_done_tokens` or given to
    /// the hook, as the end of the progress call would do after `finish`. False (nothing
    /// done) for a request someone holds a handle of. Only for requests whose kind owns
    /// nothing (a value).
    pub(crate) fn deliver_detached(&mut self, key: usize, c: impl FnOnce() -> Completion) -> bool {
        match self.reqs[key].notify {
            Notify::Token(t) => {
                self.reqs.free_plain(key);
                self.tokens_done.push((t, c()));
                true
            }
            Notify::Hook(t) => {
                self.reqs.free_plain(key);
                self.hook_done(t, c());
                true
            }
            _ => false,
        }
    }

    /// Sends the control message `id` with body `req` then `rest` at once, inline on endpoint
    /// `idx`'s AM lane in one transport call, when nothing is queued on the endpoint, it is
    /// usable and connected, and the message fits the lane's short messages. False when it was
    /// not sent (the caller queues it, e.g. with `send_ctl2`).
    #[inline(always)]
    pub(crate) fn am_short_now(
        &mut self,
        idx: usize,
        id: u8,
        req: u64,
        rest: &[u8],
    ) -> Result<bool> {
        let ep = &mut self.eps[idx];
        if ep.pending.is_empty() && !matches!(ep.state, EpState::Failed | EpState::Closed) {
            if let Some(l) = ep.lanes.as_mut() {
                if let Some((li, uep)) = l.uct.get_mut(l.am) {
                    let a = &self.info[*li].attr;
                    if a.flags.contains(IfaceFlags::AM_SHORT)
                        && PREFIX_LEN + 8 + rest.len() <= a.am.max_short
                        && uep.am_short2(id, self.uuid, req, rest)? != Outcome::NoResource
                    {
                        ep.last_tx = self.now_stamp;
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Sends message `id` of the prefix, the word `h1` and `data` at once in one `am_short2` on
    /// endpoint `idx`'s AM lane, when the endpoint is usable, connected, has nothing queued
    /// and `fits` accepts its protocol thresholds (the family's size test); notes the send
    /// time. False when it was not sent (nothing was). The eager-short step of the tag send.
    #[inline(always)]
    pub(crate) fn short2_now(
        &mut self,
        idx: usize,
        id: u8,
        h1: u64,
        data: &[u8],
        fits: impl FnOnce(&ProtoConfig) -> bool,
    ) -> Result<bool> {
        let ep = &mut self.eps[idx];
        if !short2_on(ep, self.uuid, id, h1, data, fits)? {
            return Ok(false);
        }
        // Read after the write: the clock stays out of the registers the write needs.
        ep.last_tx = self.now_stamp;
        Ok(true)
    }

    /// [`Core::short2_now`] on the endpoint handle `h`, checked and looked up once as
    /// [`Core::ep_idx`] does, with its error.
    #[inline(always)]
    pub(crate) fn short2_at(
        &mut self,
        h: EpHandle,
        id: u8,
        h1: u64,
        data: &[u8],
        fits: impl FnOnce(&ProtoConfig) -> bool,
    ) -> Result<bool> {
        let ep = ep_at(&mut self.eps, self.id, h)?;
        if !short2_on(ep, self.uuid, id, h1, data, fits)? {
            return Ok(false);
        }
        ep.last_tx = self.now_stamp;
        Ok(true)
    }

    /// [`Core::short2_at`] of message `id` of the prefix and `data` (no other header word),
    /// in one `am_short`: the stream send's one-message step.
    #[inline(always)]
    pub(crate) fn short1_at(
        &mut self,
        h: EpHandle,
        id: u8,
        data: &[u8],
        fits: impl FnOnce(&ProtoConfig) -> bool,
    ) -> Result<bool> {
        let ep = ep_at(&mut self.eps, self.id, h)?;
        let Some(uep) = short_lane(ep, fits) else {
            return Ok(false);
        };
        if uep.am_short(id, self.uuid, data)? == Outcome::NoResource {
            return Ok(false);
        }
        ep.last_tx = self.now_stamp;
        Ok(true)
    }

    /// The id the next message sent in fragments gets from [`Core::new_msg_id`].
    #[inline]
    pub(crate) fn peek_msg_id(&self) -> u64 {
        self.next_msg_id
    }

    /// Tells the next progress call that a queue of its steps holds work (a family queued
    /// something progress must come back to).
    #[inline]
    pub(crate) fn note_queued_work(&mut self) {
        self.more_work = true;
    }

    /// Every request of the worker, with its key (in no particular order).
    pub(crate) fn requests(&self) -> impl Iterator<Item = (usize, &Req)> {
        self.reqs.iter()
    }

    /// Counts transport endpoint `ep_id` of interface `li` as a lane of endpoint `idx`: its
    /// events find the endpoint, and its interface counts one more user (it is polled on
    /// every progress call while it has users).
    #[inline]
    pub(crate) fn register_lane(&mut self, idx: usize, li: usize, ep_id: u32) {
        self.by_uct.insert((li, ep_id), idx);
        self.iface_users[li] += 1;
    }

    /// Forgets transport endpoint `ep_id` of interface `li` as a lane (a lane that did not
    /// connect): its interface counts one user less.
    pub(crate) fn unregister_lane(&mut self, li: usize, ep_id: u32) {
        if self.by_uct.remove(&(li, ep_id)).is_some() {
            self.release_iface(li);
        }
    }

    /// Interface `li` counts one user less (an endpoint moved its AM lane off it, keeping the
    /// transport endpoint connected).
    pub(crate) fn release_iface(&mut self, li: usize) {
        self.iface_users[li] = self.iface_users[li].saturating_sub(1);
    }

    /// Adds transport endpoint `uep` of interface `li` to the lanes of endpoint `idx` (a lane
    /// connected after the others): its events find the endpoint, and its interface counts it.
    /// Gives the new lane's index (`None`: the endpoint has no lanes).
    pub(crate) fn add_lane(&mut self, idx: usize, li: usize, uep: AnyEp) -> Option<usize> {
        self.eps[idx].lanes.as_ref()?;
        self.register_lane(idx, li, uep.id().0);
        let l = self.eps[idx].lanes.as_mut()?;
        l.uct.push((li, uep));
        Some(l.uct.len() - 1)
    }
}

impl Core {
    /// Request `key` (a live request the caller holds).
    #[inline]
    pub(crate) fn req(&self, key: usize) -> &Req {
        &self.reqs[key]
    }

    /// The protocol counters.
    #[inline]
    pub(crate) fn stats_mut(&mut self) -> &mut ProtoStats {
        &mut self.stats
    }

    /// A new id for a message sent in fragments (unique per sender).
    #[inline]
    pub(crate) fn new_msg_id(&mut self) -> u64 {
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        id
    }
}

impl Core {
    /// The worker's reused encoding buffer (give it back with [`Core::put_scratch`]).
    #[inline]
    pub(crate) fn take_scratch(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.scratch)
    }

    /// Gives the encoding buffer back, for the next message.
    #[inline]
    pub(crate) fn put_scratch(&mut self, v: Vec<u8>) {
        self.scratch = v;
    }

    /// The worker's reused buffer for a packed remote key (give it back with
    /// [`Core::put_rkey_scratch`]).
    #[inline]
    pub(crate) fn take_rkey_scratch(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.rkey_scratch)
    }

    /// Gives the remote-key buffer back, for the next message.
    #[inline]
    pub(crate) fn put_rkey_scratch(&mut self, v: Vec<u8>) {
        self.rkey_scratch = v;
    }
}

impl Core {
    /// Request `key`, if there is one, to change.
    #[inline]
    pub(crate) fn req_get_mut(&mut self, key: usize) -> Option<&mut Req> {
        self.reqs.get_mut(key)
    }

    /// The generation of the request [`Core::new_req`] made last.
    #[inline]
    pub(crate) fn last_req_gen(&self) -> u32 {
        self.req_gen
    }

    /// The unfinished request wire id `wire` names, with its key.
    #[inline]
    pub(crate) fn req_waiting_by_wire(&mut self, wire: u64) -> Option<(usize, &mut Req)> {
        self.reqs.waiting_by_wire(wire)
    }

    /// Frees request `key`, whose kind and notification own nothing.
    #[inline]
    pub(crate) fn free_plain_req(&mut self, key: usize) {
        self.reqs.free_plain(key);
    }

    /// Removes request `key` from the table, giving it whole.
    pub(crate) fn remove_req(&mut self, key: usize) -> Req {
        self.reqs.remove(key)
    }

    /// The user's handle of request `key` (generation `gen`).
    #[inline]
    pub(crate) fn handle_of(&self, key: usize, gen: u32) -> crate::request::Request {
        crate::request::Request::new(key, gen, &self.req_shared)
    }

    /// Binds waiting request `key` (generation `gen`, just made: nobody holds a handle of it)
    /// to the completion hook under `token`, as `Worker::request_into_hook` of its handle
    /// would, without the handle.
    #[inline(always)]
    pub(crate) fn hook_waiting(&mut self, key: usize, gen: u32, token: u64) -> RequestId {
        self.reqs[key].notify_hook(token);
        RequestId {
            wid: self.id,
            key: key as u32,
            gen,
        }
    }

    /// The endpoint connected to the worker with uuid `uuid`.
    #[inline]
    pub(crate) fn ep_of_peer(&self, uuid: u64) -> Option<usize> {
        self.by_uuid.get(&uuid).copied()
    }

    /// Counts a message from a worker no endpoint knows (dropped).
    pub(crate) fn note_unknown_sender(&mut self) {
        self.malformed_unknown += 1;
    }

    /// The worker's configuration.
    #[inline]
    pub(crate) fn config(&self) -> &crate::config::UcpConfig {
        &self.cfg
    }
}

impl Core {
    /// Queues endpoint `idx` to connect its lanes on the next progress call.
    pub(crate) fn queue_connect(&mut self, idx: usize) {
        self.to_connect.push(idx);
        self.more_work = true;
    }

    /// This worker's packed address.
    pub(crate) fn worker_address(&self) -> &[u8] {
        &self.address
    }
}

/// What a family reads and changes of an endpoint record ([`Ep`]'s fields are the core's).
impl Ep {
    /// The generation of the endpoint's slot (what its handles carry).
    #[inline]
    pub(crate) fn gen(&self) -> u32 {
        self.gen
    }

    /// The uuid of the peer worker.
    #[inline]
    pub(crate) fn peer_uuid(&self) -> u64 {
        self.uuid
    }

    /// Where the endpoint is in its life.
    #[inline]
    pub(crate) fn state(&self) -> EpState {
        self.state
    }

    /// Failed or closed: no new operation may start.
    #[inline]
    pub(crate) fn is_down(&self) -> bool {
        matches!(self.state, EpState::Failed | EpState::Closed)
    }

    /// Whether nothing waits on the endpoint's pending list (see [`Core::ep_queue_empty`]).
    #[inline]
    pub(crate) fn queue_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Connected (it has lanes) and nothing waits on its pending list.
    #[inline]
    pub(crate) fn ready(&self) -> bool {
        self.pending.is_empty() && self.lanes.is_some()
    }

    /// The lanes (`None` while connecting).
    #[inline]
    pub(crate) fn lanes(&self) -> Option<&Lanes> {
        self.lanes.as_ref()
    }

    /// The lanes, to change (`None` while connecting).
    #[inline]
    pub(crate) fn lanes_mut(&mut self) -> Option<&mut Lanes> {
        self.lanes.as_mut()
    }

    /// The lanes, to change, beside the rarely used part (both `None` until there is one).
    #[inline]
    pub(crate) fn lanes_mut_with_extra(&mut self) -> (Option<&mut Lanes>, Option<&EpExtra>) {
        (self.lanes.as_mut(), self.extra.as_deref())
    }

    /// The protocol thresholds (`None` while connecting).
    #[inline]
    pub(crate) fn proto(&self) -> Option<&ProtoConfig> {
        self.proto.as_deref()
    }

    /// New protocol thresholds (the lanes changed).
    pub(crate) fn set_proto(&mut self, proto: Rc<ProtoConfig>) {
        self.proto = Some(proto);
    }

    /// The endpoint's lanes are connected: it gets them and their thresholds and is ready.
    pub(crate) fn connected(&mut self, lanes: Lanes, proto: Rc<ProtoConfig>) {
        self.lanes = Some(lanes);
        self.proto = Some(proto);
        self.state = EpState::Ready;
    }

    /// The rarely used part, if it was allocated (see [`Ep::extra_mut`]).
    #[inline]
    pub(crate) fn extra(&self) -> Option<&EpExtra> {
        self.extra.as_deref()
    }

    /// The rarely used part, to change, if it was allocated.
    #[inline]
    pub(crate) fn extra_get_mut(&mut self) -> Option<&mut EpExtra> {
        self.extra.as_deref_mut()
    }

    /// Counts an emulated put or atomic sent or queued (a wrapping count; the flushes and
    /// fences of the endpoint wait for as many replies).
    #[inline]
    pub(crate) fn note_amo_sent(&mut self) {
        self.amo_sent = self.amo_sent.wrapping_add(1);
    }

    /// Counts a reply to an emulated put or atomic.
    #[inline]
    pub(crate) fn note_amo_acked(&mut self) {
        self.amo_acked = self.amo_acked.wrapping_add(1);
    }

    /// Sets who learns of the endpoint's failure.
    pub(crate) fn set_err_handler(&mut self, h: Option<ErrHandler>) {
        self.err_handler = h;
    }
}

/// What a family reads and changes of a request record besides its kind ([`Req`]'s other
/// fields are the core's).
impl Req {
    /// The generation of the request's slot (what its handles carry).
    #[inline]
    pub(crate) fn gen(&self) -> u32 {
        self.gen
    }

    /// The endpoint the request runs on (`None`: none yet, or a worker-wide one).
    #[inline]
    pub(crate) fn ep(&self) -> Option<usize> {
        self.ep
    }

    /// Ties the request to endpoint `idx` (a receive matched to a message from it; an RMA
    /// operation on it): its failure fails the request.
    #[inline]
    pub(crate) fn set_ep(&mut self, idx: usize) {
        self.ep = Some(idx);
    }

    /// The request's kind, to change, beside who learns of its result.
    #[inline(always)]
    pub(crate) fn kind_with_notify(&mut self) -> (&mut ReqKind, &Notify) {
        (&mut self.kind, &self.notify)
    }

    /// Whether the request has its result.
    #[inline]
    pub(crate) fn is_finished(&self) -> bool {
        self.done.is_some()
    }

    /// Gives the result to the completion hook under `token` instead (see [`Notify::Hook`]).
    #[inline]
    pub(crate) fn notify_hook(&mut self, token: u64) {
        let old = std::mem::replace(&mut self.notify, Notify::Hook(token));
        // A request just made is `Take`, which owns nothing: not dropping it spares an
        // out-of-line drop call.
        if matches!(old, Notify::Take) {
            std::mem::forget(old);
        }
    }

    /// Keeps result `d` in the slot of a request that had none (checked by the caller, as
    /// [`Core::req_waiting_by_wire`] does) and is kept for `request_take` (`Notify::Take`):
    /// what [`Core::finish`] does for it, without its other checks.
    #[inline(always)]
    pub(crate) fn keep_result(&mut self, d: Done) {
        debug_assert!(self.done.is_none() && matches!(self.notify, Notify::Take));
        // `done` is empty: nothing to drop.
        std::mem::forget(self.done.replace(d));
    }
}

impl Core {
    /// Notes a send on endpoint `idx` now (its keepalive's last send time).
    #[inline]
    pub(crate) fn ep_note_tx(&mut self, idx: usize) {
        self.eps[idx].last_tx = self.now_stamp;
    }

    /// Notes a receive on endpoint `idx` now (its keepalive's last receive time).
    #[inline]
    pub(crate) fn ep_note_rx(&mut self, idx: usize) {
        self.eps[idx].last_rx = self.now_stamp;
    }

    /// Holds what is queued on endpoint `idx` after this until the target has applied every
    /// emulated put and atomic sent before it (when some are unacknowledged and nothing is
    /// queued yet).
    pub(crate) fn queue_after_acks(&mut self, idx: usize) {
        let ep = &mut self.eps[idx];
        if ep.amo_sent != ep.amo_acked && ep.pending.is_empty() {
            let amo_sent = ep.amo_sent;
            ep.pending.push_back(Pending::Acked { amo_sent });
            self.mark_pending(idx);
        }
    }
}

/// The endpoint of handle `h` among `eps` (of worker `wid`), or the handle's error, as
/// [`Core::ep_idx`] checks it: the short sends' one lookup.
#[inline(always)]
fn ep_at(eps: &mut slab::Slab<Ep>, wid: u32, h: EpHandle) -> Result<&mut Ep> {
    match eps.get_mut(h.idx as usize) {
        Some(e) if e.gen == h.gen && h.wid == wid => Ok(e),
        _ => Err(bad_handle(h.wid != wid)),
    }
}

/// The send of [`Core::short2_now`] on endpoint `ep`: false (nothing sent) when the endpoint
/// failed, closed, has sends queued or no lanes yet, when `fits` refuses its thresholds, or on
/// back-pressure.
#[inline(always)]
fn short2_on(
    ep: &mut Ep,
    uuid: u64,
    id: u8,
    h1: u64,
    data: &[u8],
    fits: impl FnOnce(&ProtoConfig) -> bool,
) -> Result<bool> {
    let Some(uep) = short_lane(ep, fits) else {
        return Ok(false);
    };
    Ok(uep.am_short2(id, uuid, h1, data)? != Outcome::NoResource)
}

/// The AM lane of endpoint `ep` for a send of [`Core::short2_now`] or [`Core::short1_at`]:
/// `None` when the endpoint failed, closed, has sends queued or no lanes yet, or when `fits`
/// refuses its thresholds. (The transport's call stays in the caller: passed in as a closure
/// it was left out of line, 48 instructions more per tag send.)
#[inline(always)]
fn short_lane(ep: &mut Ep, fits: impl FnOnce(&ProtoConfig) -> bool) -> Option<&mut AnyEp> {
    if matches!(ep.state, EpState::Failed | EpState::Closed) || !ep.pending.is_empty() {
        return None;
    }
    let (Some(p), Some(l)) = (&ep.proto, &mut ep.lanes) else {
        return None;
    };
    if !fits(p) {
        return None;
    }
    l.uct.get_mut(l.am).map(|(_, uep)| uep)
}
