//! Tag offload: eager tag messages matched by the transport, straight into the user's buffer.
//!
//! A lane whose interface advertises `TAG_EAGER_BCOPY` and `tag.eager_saves_copy` (tcp: the
//! payload is `recv`'d straight into the posted buffer) sends eager messages of
//! [`TM_THRESH`]..=`tag.eager_max_zcopy` bytes (below the rendezvous threshold) as tagged
//! frames (`tag_eager_bcopy` up to `tag.eager_max_bcopy`, `tag_eager_zcopy` above; the immediate
//! value carries the sender's worker uuid). The receiving worker posts receives to its tag
//! interface (`tag_recv_zcopy`): of the interfaces that offer tag offload and a canceler
//! ([`uct::Iface::tag_recv_canceler`]), the one that serves the most endpoints, the lowest
//! latency among equals (chosen again whenever nothing is posted), with no transport named
//! here. A tagged message is matched before its payload is read
//! and the payload lands in the receive's buffer with no intermediate copy; one that matches
//! no posted receive (or arrives on another interface) comes as `tag_unexp_eager` and takes the
//! ordinary eager arrival path. Where eager matching saves no copy (posix, sysv: one copy out of
//! the FIFO element either way), eager messages go by active messages and only receives that
//! may get a rendezvous (at least the smallest rendezvous threshold of any endpoint) are
//! posted: posting a small receive would cost a registration and a post for nothing.
//!
//! Rendezvous (messages at or above the rendezvous threshold and the endpoint's
//! `tm_rndv_min`, when the AM lane offers `TAG_RNDV_ZCOPY`; smaller ones go by ucp's own
//! rendezvous, see [`ProtoConfig::tm_rndv_min`](crate::wireup::ProtoConfig::tm_rndv_min)): the sender registers the data on the AM lane's domain for the transport,
//! and sends its ordinary RTS message (describing the data for the RMA lane, exactly as the
//! software rendezvous does) as the header of `tag_rndv_zcopy`. A posted receive the peer's
//! transport matched gets the data straight into its buffer, moved by the transport (tcp: a
//! `TagGet` answered from the sender's memory; posix/sysv: the receiving interface maps the
//! sender's segment or reads with `process_vm_readv`, then acknowledges through the sender's
//! FIFO); the send completes when the transport says so: no ATS, no ucp message at all. An
//! unmatched one arrives as `tag_unexp_rndv`; its header goes through ucp's RTS handler
//! (matching, get or pipeline, ATS), and the sender cancels the transport operation when its
//! request finishes that way.
//!
//! ucp's [`TagMatcher`](crate::tag_match::TagMatcher) stays the single source of truth for
//! ordering (the approach of UCX's `ucp_tag_offload`):
//! - every receive is in the matcher's expected queue, offloaded or not;
//! - a receive is posted to the transport only when the matcher had no unexpected message for
//!   it (it was queued), its mask is exact, and no receive that is *not* offloaded is waiting
//!   (`sw_only == 0`): otherwise an earlier software-only receive (a wildcard, say) could lose a
//!   message to a later offloaded one;
//! - when a message arriving by any other path (another transport, an active message, an
//!   unexpected tagged frame) matches an offloaded receive in the matcher, the receive is taken
//!   back from the transport at once ([`uct::TagRecvCancel`] works inside callbacks); if the
//!   transport already matched it (a frame whose payload is still arriving), the receive belongs
//!   to that frame, which came first, and the matcher tries the next receive: a receive is
//!   never matched twice;
//! - `tag_recv_done` removes the receive from the matcher and completes it; cancel takes the
//!   receive back from the transport first and fails if the transport already matched it.
//!
//! Messages between two workers keep their order because every tag message of an endpoint
//! (tagged frame or active message) goes over the same lane, i.e. the same tcp connection or
//! shared-memory FIFO, and offload is only used when nothing is queued on the endpoint.
//!
//! Limitation: receives are posted to one interface at a time; tagged messages arriving on
//! another (a worker that talks to local peers by shared memory and to remote ones by tcp)
//! are matched by ucp as unexpected, correctly but without the offload's saved copy.
//!
//! Sends from mapped memory ([`Worker::tag_send_mapped`]): a rendezvous whose data lies in a
//! [`MemMap`](crate::MemMap)'s posix/sysv segment passes the segment's own memory handle to `tag_rndv_zcopy`,
//! so the receiving interface copies straight from the mapped segment (one `memcpy`, no
//! `process_vm_readv`), and its RTS (for the software path, or with offload off) describes the
//! data in place with the segment's own key when the AM lane reads it in place (posix, sysv:
//! the receiver gets it on that lane, see the `rndv` module), else with the RMA lane's
//! registration of the segment: the sender copies nothing.
//! A heap mapping (no shared-memory transport, e.g. tcp alone) is read in place the same way
//! through its registrations with the AM lane's and the RMA lane's transports. The request
//! keeps the segment (or heap block) alive until it finishes, so the memory stays valid even
//! if the `MemMap` is dropped; a receiver that answers with RTR (put or pipelined
//! active messages) or back-pressure on the RTS makes the request copy the data first
//! (`tm_mapped_materialize`), after which it proceeds like any send.
//!
//! `RUCX_TM_ENABLE=n` turns offload off (sending and posting); a worker always accepts tagged
//! frames. `RUCX_PROTO_INFO=y` shows the offloaded size range in the endpoint's table.
//! Registering the buffers costs one small allocation per zero-copy message and per posted
//! receive (a `MemHandle`), as ucp's rendezvous registrations do.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

mod send;
pub(crate) mod state;

use crate::tag::stages::TagRecv;
use crate::wire::NO_REQ;
use crate::wireup::ProtoConfig;
use crate::wireup::TM_THRESH;
use crate::worker::req::{RecvStage, ReqKind};
use crate::worker::state::{Core, TagFamily};
use crate::worker::Worker;
use state::{TmState, TmStats};
use std::ptr::NonNull;
use ucs::{Outcome, Result};
use uct::Iface as _;
use uct::MemoryDomain as _;
use uct::{AnyIface, IfaceAttr, IfaceFlags, Iov, TagRecvId};

/// Where tag offload receives eager messages straight into posted buffers (tcp), tag messages
/// up to this size go eager even above the rendezvous threshold: eager then costs the same
/// single copy as a rendezvous and one message instead of a round trip more, and this bound
/// still limits what an unexpected message makes the receiver buffer. Measured over tcp
/// loopback: at 64 KiB eager gives tag_lat 19 µs against 24.6 (offloaded rendezvous) and 29
/// (software rendezvous) with tag_bw level; at 128 KiB the offloaded rendezvous has more
/// bandwidth.
pub const TM_EAGER_MAX: usize = 64 << 10;

/// Completion kind of a `tag_eager_zcopy` send.
pub(crate) const COMP_TM: u64 = 7;

impl TmState {
    /// With nothing posted to the transport, makes the tag interface the candidate that serves
    /// the most endpoints (`users`, per interface), the lowest latency among equals: receives
    /// go where the messages arrive (shared memory for local peers, tcp for remote ones).
    #[inline]
    fn repick(&mut self, users: &[u32]) {
        if self.cands.len() < 2 || !self.posted.is_empty() {
            return;
        }
        let mut best = 0;
        for (k, c) in self.cands.iter().enumerate() {
            if users[c.0] > users[self.cands[best].0] {
                best = k;
            }
        }
        let (i, c, m) = &self.cands[best];
        if self.iface.as_ref().map(|x| x.0) != Some(*i) {
            self.iface = Some((*i, c.clone()));
            self.max_posted = *m;
        }
    }
}

/// After `tag_recv`: posts receive `key`, still waiting in the matcher, to the transport, or
/// counts it as software-only. Inlined into the receive post (`tag_recv_queue`): a call of
/// its own cost 23 instructions per expected 4 KiB message over posix (ucp-instr.sh).
#[inline]
pub(crate) fn after_post(ifaces: &mut [AnyIface], st: &mut TagFamily<'_>, key: usize) {
    let (tag, mask, ptr, len) = match st.req_get_mut(key) {
        Some(r) if !r.is_finished() => match &mut r.kind {
            ReqKind::Recv(rv) if rv.stage == RecvStage::Tag(TagRecv::Posted) => {
                (rv.tag, rv.mask, rv.buf.as_mut_ptr(), rv.buf.len())
            }
            _ => return,
        },
        _ => return,
    };
    let wire = st.wire_id(key);
    if try_post(ifaces, st, tag, mask, ptr, len, wire) {
        return;
    }
    st.own().tm.sw_only += 1;
}

/// Posts a receive to the tag interface when one is picked and takes it (see
/// `after_post`); false leaves it software-only.
#[inline]
fn try_post(
    ifaces: &mut [AnyIface],
    st: &mut TagFamily<'_>,
    tag: u64,
    mask: u64,
    ptr: *mut u8,
    len: usize,
    wire: u64,
) -> bool {
    // The checks that do not depend on the tag interface first: a small or wildcard receive
    // (most of them) costs no interface pick.
    if mask != crate::tag_match::EXACT || st.own().tm.sw_only > 0 || len < TM_THRESH {
        return false;
    }
    let (core, own) = st.split();
    own.tm.repick(core.iface_users());
    let tm = &st.own_ref().tm;
    let Some((ti, _)) = tm.iface.as_ref() else {
        return false;
    };
    let ti = *ti;
    if tm.posted.len() >= tm.max_posted {
        return false;
    }
    // Where the transport's eager matching saves no copy, a receive that can only get eager
    // messages would cost a registration and a post for nothing.
    if !st.iface(ti).attr.tag.eager_saves_copy && len < st.min_tag_rndv() {
        return false;
    }
    let Some(p) = NonNull::new(ptr) else {
        return false;
    };
    // SAFETY: `ptr..ptr+len` is the receive's buffer, owned by its request, which keeps it
    // (without reallocating) until the receive completes; the registration is dropped when the
    // transport gives the receive back or completes it, before the buffer is returned.
    let memh = match unsafe { st.md(ti).mem_reg(p, len) } {
        Ok(m) => m,
        Err(_) => return false,
    };
    let r = ifaces[ti].tag_recv_zcopy(tag, mask, &[Iov::whole(&memh)], TagRecvId(wire));
    match r {
        Ok(Outcome::InProgress) => {
            st.own().tm.posted.push((wire, memh));
            true
        }
        _ => false,
    }
}

impl TagFamily<'_> {
    /// Takes receive `wire` back from the transport if it is posted there. `Ok(true)`: it was
    /// offloaded and is now back; `Ok(false)`: it was never offloaded; `Err`: the transport
    /// already matched it.
    #[inline]
    pub(crate) fn tm_unpost(&mut self, wire: u64) -> std::result::Result<bool, ()> {
        if self.own().tm.posted.is_empty() {
            return Ok(false);
        }
        self.tm_unpost_posted(wire)
    }

    /// [`TagFamily::tm_unpost`] when some receive is posted to the transport.
    #[inline(never)]
    fn tm_unpost_posted(&mut self, wire: u64) -> std::result::Result<bool, ()> {
        let Some(i) = self.own().tm.posted.iter().position(|p| p.0 == wire) else {
            return Ok(false);
        };
        let Some((_, c)) = self.own().tm.iface.as_ref() else {
            return Ok(false);
        };
        match c.cancel(TagRecvId(wire), true) {
            Ok(()) => {
                self.own().tm.posted.swap_remove(i);
                Ok(true)
            }
            Err(_) => Err(()),
        }
    }

    /// `matcher.arrive` for a message that did not come through the transport's matching.
    pub(crate) fn tm_arrive(&mut self, tag: u64, uid: u64) -> Option<u64> {
        let wire = self.tm_match(tag);
        if wire.is_none() {
            self.own().matcher.push_unexpected(tag, uid);
        }
        wire
    }

    /// `matcher.match_expected` for a message that did not come through the transport's
    /// matching: the receive it takes, if any (then no longer posted to the transport). The
    /// caller queues it as unexpected when there is none.
    #[inline(always)]
    pub(crate) fn tm_match(&mut self, tag: u64) -> Option<u64> {
        let wire = self.own().matcher.match_expected(tag)?;
        if self.own().tm.posted.is_empty() {
            self.own().tm.sw_only = self.own().tm.sw_only.saturating_sub(1);
            return Some(wire);
        }
        self.tm_match_posted(tag, wire)
    }

    /// [`TagFamily::tm_match`] that found receive `wire` while some receive is posted to the
    /// transport.
    #[inline(never)]
    fn tm_match_posted(&mut self, tag: u64, mut wire: u64) -> Option<u64> {
        loop {
            match self.tm_unpost_posted(wire) {
                Ok(true) => return Some(wire),
                Ok(false) => {
                    self.own().tm.sw_only = self.own().tm.sw_only.saturating_sub(1);
                    return Some(wire);
                }
                // The transport matched it with an earlier message: try the next receive.
                Err(()) => wire = self.own().matcher.match_expected(tag)?,
            }
        }
    }

    /// Before canceling receive `wire`: false when the transport already matched it (the
    /// cancel fails, the receive completes). Gives whether it was offloaded.
    pub(crate) fn tm_before_cancel(&mut self, wire: u64) -> Option<bool> {
        self.tm_unpost(wire).ok()
    }

    /// After receive `wire` left the matcher by cancel.
    pub(crate) fn tm_after_cancel(&mut self, offloaded: bool) {
        if !offloaded {
            self.own().tm.sw_only = self.own().tm.sw_only.saturating_sub(1);
        }
    }

    /// A tagged frame matched no posted receive: an ordinary eager arrival from `imm` (the
    /// sender's uuid).
    pub(crate) fn tm_unexp_eager(&mut self, tag: u64, imm: u64, data: &[u8]) {
        let Some(idx) = self.ep_of_peer(imm) else {
            self.note_unknown_sender();
            tracing::warn!(
                "tagged message from unknown worker {imm:#018x} dropped ({} bytes)",
                data.len()
            );
            return;
        };
        self.ep_note_rx(idx);
        self.eager_arrived(idx, imm, tag, data, data.len(), NO_REQ, None, None);
    }

    /// The transport completed receive `wire`.
    pub(crate) fn tm_recv_done(
        &mut self,
        wire: u64,
        tag: u64,
        imm: u64,
        len: usize,
        res: Result<()>,
    ) {
        if let Some(i) = self.own().tm.posted.iter().position(|p| p.0 == wire) {
            self.own().tm.posted.swap_remove(i);
        }
        let Some(key) = self.req_by_wire(wire) else {
            return;
        };
        if !matches!(self.req(key).kind, ReqKind::Recv(_)) {
            return;
        }
        self.own().tm.matched += 1;
        if let Some(idx) = self.ep_of_peer(imm) {
            self.req_mut(key).set_ep(idx);
            self.ep_note_rx(idx);
        }
        let (rtag, rmask) = {
            let r = self.recv_mut(key);
            (r.tag, r.mask)
        };
        // Still in the matcher unless a software arrival skipped it (see `tm_arrive`).
        self.own().matcher.cancel(rtag, rmask, wire);
        let r = self.recv_mut(key);
        r.sender_tag = tag;
        r.total = len;
        r.received = len;
        r.stage = RecvStage::Tag(TagRecv::Eager);
        self.finish(key, res);
    }
}

/// Tag offload's part of an endpoint's protocol configuration, which wire-up computes:
/// these read only the core (the thresholds depend on the interface and on whether offload
/// is allowed, not on the family's state).
impl Core {
    /// Sets `p.tag_rndv_thresh` for an endpoint whose AM lane is interface `li` (see
    /// [`TM_EAGER_MAX`]). An explicit `RUCX_RNDV_THRESH` wins. Receives from that size on may
    /// get a rendezvous through the transport: from memory the sender mapped (see
    /// `tm_mapped_rndv`) at any rendezvous size, otherwise above the AM pipeline's range
    /// (the core keeps the smallest for receive posting, [`Core::min_tag_rndv`]).
    pub(crate) fn tm_adjust_proto(&self, li: usize, p: &mut ProtoConfig) {
        let a = &self.iface(li).attr;
        if self.tm_enabled()
            && self.config().rndv_thresh.is_none()
            && a.flags
                .contains(IfaceFlags::TAG_EAGER_BCOPY | IfaceFlags::TAG_EAGER_ZCOPY)
            && a.tag.eager_saves_copy
        {
            let cap = TM_EAGER_MAX.min(a.tag.eager_max_zcopy).saturating_add(1);
            p.tag_rndv_thresh = p.rndv_thresh.max(cap);
        }
    }

    /// The rows `RUCX_PROTO_INFO` adds for an endpoint whose AM lane's interface has
    /// attributes `a`.
    pub(crate) fn tm_proto_row(&self, a: &IfaceAttr, proto: &ProtoConfig, lane: &str) -> String {
        let mut s = String::new();
        if !self.tm_enabled() {
            return s;
        }
        let rt = proto.tag_rndv_thresh;
        let to = a.tag.eager_max_zcopy.min(rt.saturating_sub(1));
        if a.flags.contains(IfaceFlags::TAG_EAGER_BCOPY)
            && a.tag.eager_saves_copy
            && to >= TM_THRESH
        {
            s.push_str(&format!(
                "  {TM_THRESH:>10} .. {to:<10} {:<28} {lane}\n",
                "tag offload eager (overrides)"
            ));
        }
        // Rendezvous ucp moves itself stay with ucp (see `tm_rndv_send`).
        let rt = rt.max(proto.tm_rndv_min);
        if a.flags.contains(IfaceFlags::TAG_RNDV_ZCOPY) && rt < usize::MAX {
            let end = if a.tag.rndv_max_zcopy == usize::MAX {
                "inf".to_string()
            } else {
                a.tag.rndv_max_zcopy.to_string()
            };
            s.push_str(&format!(
                "  {rt:>10} .. {end:<10} {:<28} {lane}\n",
                "tag offload rndv (overrides)"
            ));
        }
        s
    }
}

impl Worker {
    /// Tag-offload counters (for tests and diagnostics).
    pub fn tag_offload_stats(&self) -> TmStats {
        let tm = &self.st.tag.tm;
        TmStats {
            posting: self.st.tm_enabled() && tm.iface.is_some(),
            sent: tm.sent,
            matched: tm.matched,
            posted: tm.posted.len(),
            sent_rndv: tm.sent_rndv,
            matched_rndv: tm.matched_rndv,
            sent_mapped: tm.sent_mapped,
        }
    }
}
