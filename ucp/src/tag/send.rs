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

use crate::tag::stages::TagSend;
use crate::wire::{am_id, EagerFirstHdr, EagerHdr, EagerSyncHdr, FragHdr, ReqHdr, NO_REQ};
use crate::wireup::{ProtoConfig, TagSendMode, TM_THRESH};
use crate::worker::core_api::AmLaneRef;
use crate::worker::ep::connecting;
use crate::worker::peer_req::Named;
use crate::worker::pending::{am_send, SendMade};
use crate::worker::req::{SendData, SendStage};
use crate::worker::state::TagFamily;
use crate::worker::EpHandle;
use ucs::{Outcome, Result};

impl TagFamily<'_> {
    /// Sends a tagged message: eager short at once when it can (see [`TagFamily::tag_send_short`]),
    /// otherwise by the protocol its size and the endpoint choose.
    #[inline]
    pub(crate) fn tag_send(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'_>,
        sync: bool,
    ) -> Result<SendMade> {
        if !sync && self.tag_send_short(idx, tag, &data)? {
            return Ok(SendMade::Done(data.sent_at_once(tag)));
        }
        let mode = if sync {
            TagSendMode::Sync
        } else {
            TagSendMode::Standard
        };
        self.tag_send_proto(idx, tag, data, mode)
    }

    /// The common case of a non-synchronous send, in as few steps as it takes: see
    /// [`short_fits`]. Gives false (nothing sent) when the message does not qualify or meets
    /// back-pressure: [`TagFamily::tag_send_proto`] then takes it.
    #[inline(always)]
    pub(crate) fn tag_send_short(
        &mut self,
        idx: usize,
        tag: u64,
        data: &SendData<'_>,
    ) -> Result<bool> {
        if !self.short2_now(idx, am_id::EAGER_ONLY, tag, data.as_slice(), |p| {
            short_fits(p, data)
        })? {
            return Ok(false);
        }
        self.short_sent();
        Ok(true)
    }

    /// [`TagFamily::tag_send_short`] on the endpoint handle `h`, checked and looked up once as
    /// [`Core::ep_idx`](crate::worker::state::Core::ep_idx) does, with its error. On false the handle is valid and `h.idx` is the
    /// endpoint's index.
    #[inline(always)]
    pub(crate) fn tag_send_short_at(
        &mut self,
        h: EpHandle,
        tag: u64,
        data: &SendData<'_>,
    ) -> Result<bool> {
        if !self.short2_at(h, am_id::EAGER_ONLY, tag, data.as_slice(), |p| {
            short_fits(p, data)
        })? {
            return Ok(false);
        }
        self.short_sent();
        Ok(true)
    }

    /// Counts a message sent eager-short.
    #[inline(always)]
    fn short_sent(&mut self) {
        self.new_msg_id();
        self.stats_mut().eager_single += 1;
    }

    /// [`TagFamily::tag_send_short_at`], kept out of line (for `Worker::tag_send`, which builds the
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

    /// [`TagFamily::tag_send`] by the protocol the message's size and the endpoint choose
    /// (eager short or bcopy, fragments, zero-copy, tag offload, rendezvous), queued behind
    /// earlier sends or on back-pressure.
    pub(crate) fn tag_send_proto(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'_>,
        mode: TagSendMode,
    ) -> Result<SendMade> {
        self.ep_usable(idx)?;
        let sync = mode == TagSendMode::Sync;
        let len = data.as_slice().len();
        let ep = self.ep(idx);
        let ready = ep.ready();
        let (rndv, zc) = match ep.proto() {
            Some(p) => (len >= p.tag_thresh(mode), p.zcopy_thresh),
            None => (false, None),
        };
        // Tag offload when the lane offers it and nothing is queued before this message (it
        // sends eager messages of TM_THRESH bytes and more only).
        let data = if ready && !sync && (rndv || len >= TM_THRESH) {
            match self.tm_send(idx, tag, data, rndv)? {
                Ok(op) => return Ok(SendMade::Done(op)),
                Err(data) => data,
            }
        } else {
            data
        };
        // Zero-copy eager from a caller-owned vector the AM lane's domain can register.
        if let (Some(z), false) = (zc, rndv) {
            if len >= z && len > 0 {
                if let SendData::Owned(v) = data {
                    return Ok(self.rndv().zcopy_send(idx, tag, v, sync));
                }
            }
        }
        // Fast path: a non-synchronous eager message sent completely right now needs no request.
        if ready && !sync && !rndv {
            let msg_id = self.peek_msg_id();
            let mut offset = 0;
            let done = self.eager_send(idx, tag, data.as_slice(), NO_REQ, msg_id, &mut offset)?;
            if offset > 0 {
                self.new_msg_id();
            }
            if done {
                return Ok(SendMade::Done(data.sent_at_once(tag)));
            }
            let key = self.new_send(idx, tag, data, sync);
            let s = self.send_mut(key);
            s.offset = offset;
            s.msg_id = msg_id;
            s.fast_cmpl = mode == TagSendMode::FastCompletion;
            // The rest goes from the endpoint's queue.
            return Ok(SendMade::Req {
                idx,
                key,
                behind: true,
            });
        }
        let key = self.new_send(idx, tag, data, sync);
        let id = self.new_msg_id();
        let s = self.send_mut(key);
        s.msg_id = id;
        s.fast_cmpl = mode == TagSendMode::FastCompletion;
        // Back-pressure queues the request (it resumes from `progress_pending`, in order).
        Ok(SendMade::Req {
            idx,
            key,
            behind: !ready,
        })
    }

    /// Sends eager fragments of `data` from `*offset`. Gives true when all are out.
    ///
    /// A message that fits one fragment goes here, inline in the caller; longer ones (and the
    /// errors of an endpoint still connecting) in [`TagFamily::eager_send_frags`].
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
        let uuid = self.worker_uuid().to_le_bytes();
        let Some(AmLaneRef {
            proto,
            uep,
            attr,
            last_tx,
            now,
        }) = self.am_lane_ref(idx)
        else {
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
        *last_tx = *now;
        *offset = len.max(1);
        self.stats_mut().eager_single += 1;
        Ok(true)
    }

    /// [`TagFamily::eager_send`] of a message in several fragments (or on an endpoint without
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
        let uuid = self.worker_uuid().to_le_bytes();
        let AmLaneRef {
            proto,
            uep,
            attr,
            last_tx,
            now,
        } = self.am_lane_ref(idx).ok_or_else(connecting)?;
        let len = data.len();
        // Whether the first fragment went out now (the message counts as a multi-fragment one).
        let mut first_out = false;
        let r = 'send: {
            while *offset < len {
                let (out, n) = if *offset == 0 {
                    let n = proto.first_frag.min(len);
                    let h = EagerFirstHdr {
                        tag,
                        msg_id,
                        total_len: len as u64,
                        sreq,
                    }
                    .encode();
                    let o = am_send(uep, attr, am_id::EAGER_FIRST, &[&uuid, &h, &data[..n]]);
                    (o, n)
                } else {
                    let n = proto.middle_frag.min(len - *offset);
                    let h = FragHdr {
                        id: msg_id,
                        offset: *offset as u64,
                    }
                    .encode();
                    let piece = &data[*offset..*offset + n];
                    (
                        am_send(uep, attr, am_id::EAGER_MIDDLE, &[&uuid, &h, piece]),
                        n,
                    )
                };
                match out {
                    Ok(Outcome::NoResource) => break 'send Ok(false),
                    Ok(_) => {}
                    Err(e) => break 'send Err(e),
                }
                first_out |= *offset == 0;
                *last_tx = *now;
                *offset += n;
            }
            Ok(true)
        };
        if first_out {
            self.stats_mut().eager_multi += 1;
        }
        r
    }

    /// Advances eager send `key` of endpoint `idx`, in `stage`, as far as resources allow
    /// (see `State::send_step`). Gives false on back-pressure.
    pub(crate) fn tag_send_step(&mut self, key: usize, idx: usize, stage: TagSend) -> Result<bool> {
        let wire = self.peer_id(idx, key);
        match stage {
            TagSend::Eager => {
                let proto = *self.ep(idx).ready_proto()?;
                let s = self.send_mut(key);
                let len = s.data.len();
                // (Only before the first eager fragment left: a tag message below the tag
                // threshold may have started eager.)
                if s.offset == 0 && len >= proto.tag_thresh(s.mode()) {
                    return self.rndv().send_rts(key);
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

/// Whether a tag message of `data` goes eager-short on an endpoint with thresholds `p`: it
/// fits one `am_short` of the AM lane
/// ([`ProtoConfig::short_max`]) and lies below the
/// rendezvous, tag offload and (for a caller-owned vector) zero-copy thresholds. The rest of
/// the step ([`Core::short2_now`](crate::worker::state::Core::short2_now)) writes it straight into the transport as one EAGER_ONLY
/// message when the endpoint is usable, connected and has nothing queued.
#[inline(always)]
fn short_fits(p: &ProtoConfig, data: &SendData<'_>) -> bool {
    let len = data.as_slice().len();
    // The AM lane's `am_short` limit (the thresholds were computed from that lane), below the
    // rendezvous and tag offload thresholds: one comparison.
    p.tag_short(len)
        && !(matches!(data, SendData::Owned(_))
            && p.zcopy_thresh.is_some_and(|z| len >= z && len > 0))
}
