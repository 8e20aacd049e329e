//! Tag send: eager (short, bcopy, multi-fragment) and synchronous sends, the choice of eager or
//! rendezvous, and SYNC_ACK.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::request::{Completion, Op};
use crate::tag::stages::TagSend;
use crate::wire::{am_id, EagerFirstHdr, EagerHdr, EagerSyncHdr, FragHdr, ReqHdr, NO_REQ};
use crate::wireup::TM_THRESH;
use crate::worker::endpoint::bad_handle;
use crate::worker::ep::{Ep, EpState};
use crate::worker::peer_req::Named;
use crate::worker::pending::am_send;
use crate::worker::req::SendBuf;
use crate::worker::req::{ReqKind, SendData, SendReq, SendStage};
use crate::worker::state::State;
use crate::worker::EpHandle;
use ucs::{Outcome, Result};
use uct::Endpoint as _;

impl State {
    /// Sends a tagged message: eager short at once when it can (see [`State::tag_send_short`]),
    /// otherwise by the protocol its size and the endpoint choose.
    #[inline]
    pub(crate) fn tag_send(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'_>,
        sync: bool,
    ) -> Result<Op> {
        if !sync && self.tag_send_short(idx, tag, &data)? {
            return Ok(sent_at_once(data, tag));
        }
        self.tag_send_proto(idx, tag, data, sync)
    }

    /// The common case of a non-synchronous send, in as few steps as it takes: see
    /// [`short_on`]. Gives false (nothing sent) when the message does not qualify or meets
    /// back-pressure: [`State::tag_send_proto`] then takes it.
    #[inline(always)]
    pub(crate) fn tag_send_short(
        &mut self,
        idx: usize,
        tag: u64,
        data: &SendData<'_>,
    ) -> Result<bool> {
        let ep = &mut self.eps[idx];
        if !short_on(ep, self.uuid, tag, data)? {
            return Ok(false);
        }
        // Read after the write: the clock stays out of the registers the write needs.
        ep.last_tx = self.now_stamp;
        self.short_sent();
        Ok(true)
    }

    /// [`State::tag_send_short`] on the endpoint handle `h`, checked and looked up once as
    /// [`State::ep_idx`] does, with its error. On false the handle is valid and `h.idx` is the
    /// endpoint's index.
    #[inline(always)]
    pub(crate) fn tag_send_short_at(
        &mut self,
        h: EpHandle,
        tag: u64,
        data: &SendData<'_>,
    ) -> Result<bool> {
        let wid = self.id;
        let Some(ep) = self
            .eps
            .get_mut(h.idx as usize)
            .filter(|e| e.gen == h.gen && h.wid == wid)
        else {
            return Err(bad_handle(h.wid != wid));
        };
        if !short_on(ep, self.uuid, tag, data)? {
            return Ok(false);
        }
        // Read after the write: the clock stays out of the registers the write needs.
        ep.last_tx = self.now_stamp;
        self.short_sent();
        Ok(true)
    }

    /// Counts a message [`short_on`] sent.
    #[inline(always)]
    fn short_sent(&mut self) {
        self.next_msg_id += 1;
        self.stats.eager_single += 1;
    }

    /// [`State::tag_send_short_at`], kept out of line (for `Worker::tag_send`, which builds the
    /// completion itself).
    #[inline(never)]
    pub(crate) fn tag_send_short_out(
        &mut self,
        h: EpHandle,
        tag: u64,
        data: &SendData<'_>,
    ) -> Result<bool> {
        self.tag_send_short_at(h, tag, data)
    }

    /// [`State::tag_send`] by the protocol the message's size and the endpoint choose (eager
    /// short or bcopy, fragments, zero-copy, tag offload, rendezvous), queued behind earlier
    /// sends or on back-pressure.
    pub(crate) fn tag_send_proto(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'_>,
        sync: bool,
    ) -> Result<Op> {
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
                return Ok(sent_at_once(data, tag));
            }
            let key = self.new_send(idx, tag, data, sync);
            let s = self.send_mut(key);
            s.offset = offset;
            s.msg_id = msg_id;
            self.queue_req(idx, key);
            return Ok(self.op_of(key));
        }
        let key = self.new_send(idx, tag, data, sync);
        let id = self.new_msg_id();
        self.send_mut(key).msg_id = id;
        // Back-pressure queues the request (it resumes from `progress_pending`, in order).
        let queued = !ready || !self.send_step(key)?;
        if queued && self.reqs[key].done.is_none() {
            self.queue_req(idx, key);
        }
        Ok(self.op_of(key))
    }

    pub(crate) fn new_send(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'_>,
        sync: bool,
    ) -> usize {
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
            ReqKind::Send(SendReq::new(tag, data, give_back, sync)),
        )
    }

    /// The send request `key`. Internal invariant: callers pass keys of requests they know are
    /// sends (created as one, or checked by [`State::peer_req`] or the completion kind); a
    /// peer's id never reaches here unchecked.
    #[allow(clippy::unreachable)]
    pub(crate) fn send_mut(&mut self, key: usize) -> &mut SendReq {
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
    pub(crate) fn eager_send(
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
        ep.last_tx = self.now_stamp;
        *offset = len.max(1);
        self.stats.eager_single += 1;
        Ok(true)
    }

    /// [`State::eager_send`] of a message in several fragments (or on an endpoint without
    /// lanes yet: `Busy`).
    pub(crate) fn eager_send_frags(
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
        let (proto, (li, uep), last_tx) = ep.ready_am()?;
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
            *last_tx = self.now_stamp;
            *offset += out.1;
        }
        Ok(true)
    }

    /// Advances eager send `key` of endpoint `idx`, in `stage`, as far as resources allow
    /// (see `State::send_step`). Gives false on back-pressure.
    pub(crate) fn tag_send_step(&mut self, key: usize, idx: usize, stage: TagSend) -> Result<bool> {
        let wire = self.peer_id(idx, key);
        match stage {
            TagSend::Eager if self.send_mut(key).is_am() => self.send_rts(key),
            TagSend::Eager => {
                let proto = *self.eps[idx].ready_proto()?;
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
                    s.stage = SendStage::Tag(TagSend::WaitAck);
                } else {
                    self.finish(key, Ok(()));
                }
                Ok(true)
            }
            TagSend::WaitAck => Ok(true),
        }
    }

    /// SYNC_ACK: the peer matched a synchronous send.
    pub(crate) fn on_sync_ack(&mut self, idx: usize, h: ReqHdr) -> Result<()> {
        let key = self.peer_req(idx, h.req, Named::SyncAck)?;
        let s = self.send_mut(key);
        if s.stage == SendStage::Tag(TagSend::WaitAck) {
            self.finish(key, Ok(()));
        } else {
            // Fragments are still going out: the send finishes when they are.
            s.acked = true;
        }
        Ok(())
    }
}

/// The eager-short step on endpoint `ep`: a message that fits one `am_short` of the AM lane
/// ([`ProtoConfig::short_max`](crate::wireup::ProtoConfig::short_max)),
/// on an endpoint that is usable, connected and has nothing queued, below the rendezvous, tag
/// offload and zero-copy thresholds, goes out as one EAGER_ONLY message written straight into
/// the transport. Gives false (nothing sent) when the message does not qualify or meets
/// back-pressure.
#[inline(always)]
fn short_on(ep: &mut Ep, uuid: u64, tag: u64, data: &SendData<'_>) -> Result<bool> {
    let d = data.as_slice();
    let len = d.len();
    if matches!(ep.state, EpState::Failed | EpState::Closed) || !ep.pending.is_empty() {
        return Ok(false);
    }
    let (Some(p), Some(l)) = (&ep.proto, &mut ep.lanes) else {
        return Ok(false);
    };
    // The AM lane's `am_short` limit (the thresholds were computed from that lane), below the
    // rendezvous and tag offload thresholds: one comparison.
    if !p.tag_short(len) {
        return Ok(false);
    }
    if matches!(data, SendData::Owned(_)) && p.zcopy_thresh.is_some_and(|z| len >= z && len > 0) {
        return Ok(false);
    }
    let Some((_, uep)) = l.uct.get_mut(l.am) else {
        return Ok(false);
    };
    Ok(uep.am_short2(am_id::EAGER_ONLY, uuid, tag, d)? != Outcome::NoResource)
}

/// The completion of a send that went out at once: an owned vector comes back in it.
#[inline(always)]
fn sent_at_once(data: SendData<'_>, tag: u64) -> Op {
    let buf = match data {
        SendData::Owned(v) => Some(v),
        SendData::Borrowed(_) | SendData::Raw(_) => None,
    };
    Op::Done(Completion {
        buf,
        tag,
        ..Completion::ok()
    })
}
