//! Incoming messages: checks the sender prefix, finds the sender's endpoint (or wires up a new
//! one), holds messages behind a peer's AM lane switch, and routes each message id to the handler of
//! its protocol family (tag, rendezvous, active messages, atomics, stream, wire-up, close).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::wire::{
    am_id, split_eager_only, split_prefix, AtomicRepHdr, EagerHdr, FragHdr, Msg, UserAmHdr, NO_REQ,
};
use crate::wireup::Admit;
use crate::worker::ep::EpState;
use crate::worker::peer_req::Named;
use crate::worker::state::{Core, State};
use ucs::{Error, Result};

impl State {
    /// The peer's lane-switch marker (`on_new`: it came over the new lane, a protocol error):
    /// dispatches the messages its new lane delivered early, in order (wire-up's lane switch;
    /// the replay is the dispatcher's).
    pub(crate) fn on_lane_switch(&mut self, idx: usize, on_new: bool) -> Result<()> {
        let held = self.ep_mut(idx).extra_mut().rx_gate.marker(on_new)?;
        let gen = self.ep(idx).gen();
        for (id, data) in held {
            if self
                .ep_get(idx)
                .is_none_or(|e| e.gen() != gen || e.is_down())
            {
                break;
            }
            self.handle_am_from(None, id, &data);
        }
        Ok(())
    }

    pub(crate) fn handle_am(&mut self, id: u8, data: &[u8]) {
        self.handle_am_from(None, id, data);
    }

    /// An active message that arrived on interface `iface` (`None`: not from an AM lane, e.g.
    /// a tag-offload rendezvous header). The common message, a whole eager tag message from a
    /// known peer on its usual lane, goes straight to the tag matching; everything else (and
    /// anything malformed) takes the general path.
    ///
    /// Inlined into the transports' receive loops (through the event sink), with the eager
    /// fast path; the rest is one call.
    #[inline(always)]
    pub(crate) fn handle_am_from(&mut self, iface: Option<usize>, id: u8, data: &[u8]) {
        if id == am_id::EAGER_ONLY && self.eager_only_fast(iface, data, None) {
            return;
        }
        self.handle_am_by_id(iface, id, data);
    }

    /// [`State::handle_am_from`] of a message whose transport lends its bytes
    /// ([`uct::EventSink::am_lend`]; a USER_AM one): gives true when the AM inbox kept them
    /// there.
    #[inline(always)]
    pub(crate) fn handle_am_lend(&mut self, iface: Option<usize>, id: u8, data: &[u8]) -> bool {
        if id == am_id::USER_AM {
            return self.user_am_msg(iface, data, true);
        }
        self.handle_am_by_id(iface, id, data);
        false
    }

    /// [`State::handle_am_from`] past the eager fast path: stream bytes and user active
    /// messages to their families' fast paths (calls in tail position: no frame of their
    /// own here), the rest to [`State::handle_am_other`].
    #[inline(never)]
    fn handle_am_by_id(&mut self, iface: Option<usize>, id: u8, data: &[u8]) {
        match id {
            am_id::STREAM => self.stream_msg(iface, data),
            am_id::USER_AM => {
                self.user_am_msg(iface, data, false);
            }
            _ => self.handle_am_other(iface, id, data),
        }
    }

    /// A USER_AM message: one call from the transport's receive loop to the active-message
    /// family (not through [`State::handle_am_other`]'s tests of other ids); anything
    /// [`State::user_am_fast`] does not take goes to the general path. Gives true when the
    /// message was lent.
    #[inline(never)]
    fn user_am_msg(&mut self, iface: Option<usize>, data: &[u8], lend: bool) -> bool {
        match self.user_am_fast(iface, data, lend) {
            Some(lent) => lent,
            None => {
                self.handle_am_general(iface, am_id::USER_AM, data);
                false
            }
        }
    }

    /// A STREAM message: the bytes of a known, usable peer on its usual lane go straight to
    /// the stream family; anything else takes the general path.
    #[inline(never)]
    fn stream_msg(&mut self, iface: Option<usize>, data: &[u8]) {
        match self.fast_body(iface, data) {
            Some((idx, _, body)) => self.on_stream_inline(idx, body, None),
            None => self.handle_am_general(iface, am_id::STREAM, data),
        }
    }

    /// [`State::handle_am_from`] of every message but a fast-path EAGER_ONLY one, STREAM and
    /// USER_AM.
    #[inline(never)]
    fn handle_am_other(&mut self, iface: Option<usize>, id: u8, data: &[u8]) {
        if (id == am_id::ATOMIC_REQ || id == am_id::ATOMIC_REP)
            && self.atomic_msg_fast(iface, id, data)
        {
            return;
        }
        if id == am_id::EAGER_MIDDLE && self.eager_middle_fast(iface, data) {
            return;
        }
        self.handle_am_general(iface, id, data);
    }

    /// A USER_AM message (a small active message) from a known, usable peer on its usual lane,
    /// straight to the active-message family without the general decode: whether it was lent
    /// (`lend`: its transport lends `data`) once delivered; `None` leaves it to the general
    /// path, which checks it all again and reports what is wrong.
    #[inline(always)]
    fn user_am_fast(&mut self, iface: Option<usize>, data: &[u8], lend: bool) -> Option<bool> {
        let (src, body) = split_prefix(data).ok()?;
        let (idx, gen) = self.fast_sender_gen(iface, src)?;
        let h = UserAmHdr::decode(body).ok()?;
        let rest = &body[UserAmHdr::LEN..];
        let uh = rest.get(..h.hdr_len as usize)?;
        Some(
            self.am_family()
                .on_user_am(idx, gen, h, uh, &rest[uh.len()..], lend),
        )
    }

    /// An EAGER_MIDDLE fragment from a known, usable peer on its usual lane, straight to the
    /// tag family without the general decode: true when it was handled (an error it finds
    /// fails the endpoint as on the general path); false leaves it to the general path.
    #[inline(always)]
    fn eager_middle_fast(&mut self, iface: Option<usize>, data: &[u8]) -> bool {
        let Some((idx, src, body)) = self.fast_body(iface, data) else {
            return false;
        };
        let Ok(h) = FragHdr::decode(body) else {
            return false;
        };
        if let Err(e) = self
            .tag_family()
            .eager_middle(src, h, &body[FragHdr::LEN..])
        {
            self.am_failed(idx, src, am_id::EAGER_MIDDLE, e);
        }
        true
    }

    /// [`State::handle_am_from`] of a message in a receive buffer the worker may keep: an
    /// EAGER_ONLY message that finds no receive stays there while unexpected, and so do stream
    /// bytes no receive takes at once.
    #[inline]
    pub(crate) fn handle_am_keep(
        &mut self,
        iface: Option<usize>,
        id: u8,
        data: &[u8],
        keep: uct::AmKeep<'_>,
    ) {
        if id == am_id::STREAM {
            if let Some((idx, _, body)) = self.fast_body(iface, data) {
                // Stream bytes no receive takes now may stay in the buffer.
                self.on_stream(idx, body, Some(keep));
                return;
            }
        } else if id == am_id::EAGER_ONLY && self.eager_only_fast(iface, data, Some(keep)) {
            return;
        }
        self.handle_am_from(iface, id, data);
    }

    /// A message's sender endpoint ([`Core::fast_sender`]), the sender's uuid and the body
    /// after the prefix, for a fast path. None when the message is too short for a prefix or its
    /// sender does not qualify: the general path then checks it all again.
    #[inline(always)]
    fn fast_body<'d>(
        &mut self,
        iface: Option<usize>,
        data: &'d [u8],
    ) -> Option<(usize, u64, &'d [u8])> {
        let (src, body) = split_prefix(data).ok()?;
        let idx = self.fast_sender(iface, src)?;
        Some((idx, src, body))
    }

    /// An EAGER_ONLY message: true when it was delivered here; false leaves it to the general
    /// path (too short, unknown sender, an endpoint that failed or closed, or the new lane of
    /// the peer's AM lane switch), which checks it all again. `keep`: the message's receive
    /// buffer may be kept (see `TagFamily::eager_arrived`).
    #[inline(always)]
    fn eager_only_fast(
        &mut self,
        iface: Option<usize>,
        data: &[u8],
        keep: Option<uct::AmKeep<'_>>,
    ) -> bool {
        let Some((src, tag, payload)) = split_eager_only(data) else {
            return false;
        };
        let Some(idx) = self.fast_sender(iface, src) else {
            return false;
        };
        let total = payload.len();
        self.tag_family()
            .eager_arrived(idx, src, tag, payload, total, NO_REQ, None, keep);
        true
    }

    /// Every message but the common one of [`State::handle_am_from`].
    #[inline(never)]
    fn handle_am_general(&mut self, iface: Option<usize>, id: u8, data: &[u8]) {
        self.core.stats.rx_general += 1;
        let (src, body) = match split_prefix(data) {
            Ok(x) => x,
            Err(e) => {
                self.core.malformed_unknown += 1;
                tracing::warn!("dropping a ucp message from an unknown sender: {e}");
                return;
            }
        };
        if id == am_id::WIREUP {
            self.handle_wireup(src, body);
            return;
        }
        let Some(idx) = self.core.by_uuid.lookup(src) else {
            self.msg_from_unknown(src, id);
            return;
        };
        // The peer's AM lane switch: messages on its new lane wait for the marker on the old.
        let on_new = iface.is_some_and(|i| self.core.info[i].ep_only);
        let ep = &mut self.core.eps[idx];
        match ep.state {
            // What the peer wrote before its endpoint failed (see `late_rx`).
            EpState::Failed => {
                self.late_msg(idx, src, id, body);
                return;
            }
            EpState::Closed => return,
            EpState::Connecting | EpState::Ready => {}
        }
        ep.last_rx = self.core.now_stamp;
        if on_new && ep.extra_mut().rx_gate.admit(true, id, data) == Admit::Held {
            self.core.stats.am_switch_held += 1;
            return;
        }
        let r = if id == am_id::EAGER_ONLY {
            // The common message, without the general decode and dispatch.
            EagerHdr::decode(body).map(|h| {
                let payload = &body[EagerHdr::LEN..];
                self.tag_family().eager_arrived(
                    idx,
                    src,
                    h.tag,
                    payload,
                    payload.len(),
                    NO_REQ,
                    None,
                    None,
                );
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

    /// A message from a worker without an endpoint here. Control messages of a closing or
    /// closed endpoint (CLOSE and its ack when both sides close at once, a keepalive that
    /// crossed the CLOSE) are normal and only logged at debug level; anything else is lost
    /// data, a warning (after this side closed its endpoint on its own, or from a worker that
    /// never wired up).
    #[cold]
    fn msg_from_unknown(&mut self, src: u64, id: u8) {
        let closed = self.by_uuid.closed_lately(src);
        if matches!(id, am_id::CLOSE_ACK | am_id::CLOSE | am_id::KEEPALIVE) {
            tracing::debug!(
                "ucp message {id} from worker {src:#018x} after its endpoint here was {}",
                if closed { "closed" } else { "forgotten" }
            );
            return;
        }
        self.malformed_unknown += 1;
        if closed {
            tracing::warn!(
                "dropping ucp message {id} from worker {src:#018x}: its endpoint here was \
                 closed (the close gave up waiting for the peer, or the peer kept sending after \
                 it)"
            );
        } else {
            tracing::warn!(
                "dropping ucp message {id} from unknown worker {src:#018x} (no wire-up seen)"
            );
        }
    }

    /// A message from the peer of endpoint `idx` broke the protocol: the endpoint fails.
    #[cold]
    pub(crate) fn am_failed(&mut self, idx: usize, src: u64, id: u8, e: Error) {
        let e = match e {
            Error::Wire(w) => Error::Wire(format!(
                "protocol error from worker {src:#018x} (message id {id}): {w}"
            )),
            other => other,
        };
        self.fail_ep(idx, e);
        self.late_rx_distrust(idx);
    }

    /// An ATOMIC_REQ or ATOMIC_REP from a known peer on its usual lane, decoded and handled
    /// without the general dispatch: true when it was handled here (a malformed one fails the
    /// endpoint, as there); false leaves it to the general path (unknown sender, an endpoint
    /// that failed or closed, the new lane of the peer's AM lane switch).
    #[inline]
    pub(crate) fn atomic_msg_fast(&mut self, iface: Option<usize>, id: u8, data: &[u8]) -> bool {
        let Ok((src, body)) = split_prefix(data) else {
            return false;
        };
        let Some(idx) = self.fast_sender(iface, src) else {
            return false;
        };
        let r = if id == am_id::ATOMIC_REQ {
            crate::amo::decode_req(body).and_then(|h| self.amo_family().on_atomic_req(idx, h))
        } else {
            AtomicRepHdr::decode(body).and_then(|h| self.amo_family().on_atomic_rep(idx, h))
        };
        if let Err(e) = r {
            self.am_failed(idx, src, id, e);
        }
        true
    }

    /// A whole eager message (`sreq`: the sender's request to acknowledge, or `NO_REQ`), to
    /// the tag family.
    fn eager_whole(&mut self, idx: usize, src: u64, tag: u64, sreq: u64, data: &[u8]) {
        self.tag_family()
            .eager_arrived(idx, src, tag, data, data.len(), sreq, None, None);
    }

    /// Routes a decoded message to the handler of its protocol family.
    fn handle_msg(&mut self, idx: usize, src: u64, msg: Msg<'_>) -> Result<()> {
        match msg {
            Msg::Wireup(_) | Msg::Keepalive => Ok(()),
            Msg::Eager(h, data) => {
                self.eager_whole(idx, src, h.tag, NO_REQ, data);
                Ok(())
            }
            Msg::EagerSync(h, data) => {
                self.eager_whole(idx, src, h.tag, h.sreq, data);
                Ok(())
            }
            Msg::EagerFirst(h, data) => self.tag_family().on_eager_first(idx, src, h, data),
            Msg::EagerMiddle(h, data) => self.tag_family().eager_middle(src, h, data),
            Msg::SyncAck(h) => self.tag_family().on_sync_ack(idx, h),
            Msg::Rts(h) => self.tag_family().on_rts(idx, h),
            Msg::Ats(h) => self.rndv_family().on_ats(idx, h),
            Msg::Rtr(h) => {
                let key = self.peer_req(idx, h.sreq, Named::Rtr)?;
                // A send from a mapped segment the tag family announced in place gets its
                // own copy of the data first.
                self.tag_family().tm_mapped_materialize(key);
                self.rndv_family().on_rtr(idx, key, h)
            }
            Msg::RndvData(h, data) => self.rndv_family().on_rndv_data(idx, h, data),
            Msg::Atp(h) => self.rndv_family().on_atp(idx, h),
            Msg::UserAm(h, uh, data) => {
                let gen = self.ep(idx).gen();
                self.am_family().on_user_am(idx, gen, h, uh, data, false);
                Ok(())
            }
            Msg::AmRts(h, uh, rts) => self.am_family().on_am_rts(idx, h, uh, rts),
            Msg::AtomicReq(h) => self.amo_family().on_atomic_req(idx, h),
            Msg::AtomicRep(h) => self.amo_family().on_atomic_rep(idx, h),
            Msg::PutReq(h, data) => self.on_put_req(idx, h, data),
            Msg::Stream(data) => {
                self.on_stream(idx, data, None);
                Ok(())
            }
            Msg::EpAddr(h) => self.on_ep_addr(idx, h.connected, h.ep_addr),
            Msg::AmLaneSwitch => self.on_lane_switch(idx, false),
            Msg::CloseAck => {
                self.eps[idx].close_acked = true;
                Ok(())
            }
            Msg::Close => {
                self.on_close(idx);
                Ok(())
            }
        }
    }
}

/// The sender lookup of the fast paths: endpoints only, no family's state.
impl Core {
    /// The endpoint of sender `src` for a fast path: known, usable, and not on the new lane of
    /// its AM lane switch before the switch's marker arrived (such messages the general path
    /// gates); its last receive time is noted. None leaves the message to the general path.
    /// Without an `ep_only` interface there is no such lane: one flag skips that test.
    #[inline(always)]
    pub(crate) fn fast_sender(&mut self, iface: Option<usize>, src: u64) -> Option<usize> {
        self.fast_sender_gen(iface, src).map(|(idx, _)| idx)
    }

    /// [`Core::fast_sender`] with the endpoint's generation (for an [`EpHandle`](crate::EpHandle) of the
    /// sender without a second look at the endpoint table).
    #[inline(always)]
    fn fast_sender_gen(&mut self, iface: Option<usize>, src: u64) -> Option<(usize, u32)> {
        let idx = self.by_uuid.lookup(src)?;
        let ep = &mut self.eps[idx];
        if matches!(ep.state, EpState::Failed | EpState::Closed)
            || (self.any_ep_only
                && iface.is_some_and(|i| self.info[i].ep_only)
                && !ep.extra.as_deref().is_some_and(|x| x.rx_gate.switched()))
        {
            return None;
        }
        ep.last_rx = self.now_stamp;
        Some((idx, ep.gen))
    }
}
