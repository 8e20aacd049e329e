//! Tag receive: posting, cancelling, matching against the unexpected queue, and eager arrivals
//! (single messages and fragments being assembled).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use super::copy::{copy_in, copy_payload, extend_payload};
use super::small::SMALL_UID;
use crate::request::{Completion, Op};
use crate::tag::stages::TagRecv;
use crate::tag::unexp::{Target, Unexp, UnexpKind, UNEXP_INLINE};
use crate::wire::{am_id, EagerFirstHdr, FragHdr, ReqHdr, RtsHdr, NO_REQ};
use crate::worker::recv_status;
use crate::worker::req::RecvBuf;
use crate::worker::req::{Done, Notify, RecvStage, ReqKind};
use crate::worker::state::TagFamily;
use ucs::{Error, Result};

impl TagFamily<'_> {
    /// Queues a receive for `tag` under `mask` in the matcher (the caller found no waiting
    /// message that fits; it may then go to the transport, see `Worker::tag_recv_buf`). Gives
    /// the new request's key and generation. Inlined into the C library's receive (where
    /// `#[inline]` alone left it a call of its own on the family's view: 29 instructions
    /// more per receive, `capi/bench/callgrind-per-call.sh`).
    #[inline(always)]
    pub(crate) fn tag_recv_post(&mut self, buf: RecvBuf, tag: u64, mask: u64) -> (usize, u32) {
        let key = self.new_recv(buf, tag, mask);
        // `wire_id(key)`: the new request has the latest generation.
        let gen = self.last_req_gen();
        let wire = (gen as u64) << 32 | key as u64;
        debug_assert_eq!(wire, self.wire_id(key));
        self.own().matcher.queue(tag, mask, wire);
        (key, gen)
    }

    /// Receives unexpected message `uid` (already off the matcher's queue) into `buf`: a whole
    /// eager message is copied and finishes at once without a request; the others go through
    /// a receive request (`deliver_unexp`).
    #[inline]
    pub(crate) fn recv_unexp_now(
        &mut self,
        mut buf: RecvBuf,
        tag: u64,
        mask: u64,
        uid: usize,
    ) -> Op {
        if uid as u64 & SMALL_UID != 0 {
            return self.recv_small_now(buf, uid as u64);
        }
        let u = self.own().unexp.remove(uid);
        let (total, sreq) = match u.kind {
            UnexpKind::Inline { len, data, sreq } => {
                let len = usize::from(len).min(UNEXP_INLINE);
                copy_in(&mut buf, &data[..len]);
                (len, sreq)
            }
            UnexpKind::Eager { data, total, sreq } if u.msg_key.is_none() => {
                copy_in(&mut buf, &data);
                self.put_buf(data);
                (total, sreq)
            }
            UnexpKind::Held(held) => {
                copy_in(&mut buf, held.data());
                (held.data().len(), NO_REQ)
            }
            _ => return self.recv_unexp_request(buf, tag, mask, u),
        };
        if sreq != NO_REQ {
            self.sync_ack(u.ep, sreq);
        }
        let cap = buf.len();
        Op::Done(Completion {
            status: recv_status(total, cap),
            buf: buf.into_vec(),
            len: total,
            tag: u.tag,
            value: 0,
        })
    }

    /// [`TagFamily::recv_unexp_now`] of a small message ([`SMALL_UID`]): copied, finished at once.
    #[inline(always)]
    fn recv_small_now(&mut self, mut buf: RecvBuf, uid: u64) -> Op {
        let Some(e) = self.own().small_unexp.get(uid) else {
            return Op::Done(Completion::failed(Error::InvalidParam(
                "the unexpected message is gone".into(),
            )));
        };
        let (total, tag) = (usize::from(e.len), e.tag);
        copy_in(&mut buf, &e.data[..total]);
        self.own().small_unexp.free(uid);
        let cap = buf.len();
        Op::Done(Completion {
            status: recv_status(total, cap),
            buf: buf.into_vec(),
            len: total,
            tag,
            value: 0,
        })
    }

    /// [`TagFamily::recv_unexp_now`] of a message that needs a receive request: fragments still
    /// arriving, or a rendezvous.
    #[inline(never)]
    fn recv_unexp_request(&mut self, buf: RecvBuf, tag: u64, mask: u64, u: Unexp) -> Op {
        let key = self.new_recv(buf, tag, mask);
        self.deliver_unexp(key, u);
        self.op_of(key)
    }

    /// Length of general unexpected message `uid` (not a small one).
    pub(crate) fn unexp_len(&self, uid: usize) -> usize {
        match &self.own_ref().unexp[uid].kind {
            UnexpKind::Inline { len, .. } => usize::from(*len),
            UnexpKind::Eager { total, .. } => *total,
            UnexpKind::Held(held) => held.data().len(),
            UnexpKind::Rts { len, .. } | UnexpKind::Lost { len, .. } => *len,
        }
    }

    /// Acknowledges synchronous send `sreq` of the peer of endpoint `ep` (a failure shows on
    /// the endpoint).
    #[inline(never)]
    fn sync_ack(&mut self, ep: usize, sreq: u64) {
        let _ = self.send_ctl(ep, am_id::SYNC_ACK, &ReqHdr { req: sreq }.encode());
    }

    pub(crate) fn cancel(&mut self, key: usize, gen: u32) -> bool {
        self.unpost(key, gen, Error::Canceled)
    }

    /// Fails every tag receive waiting in the matcher with `err`, and makes every one posted
    /// later that finds no message waiting fail at once with it. Gives how many failed now.
    pub(crate) fn fail_tag_recvs(&mut self, err: Error) -> usize {
        let posted: Vec<(usize, u32)> = self
            .requests()
            .filter_map(|(k, r)| match &r.kind {
                ReqKind::Recv(rr)
                    if !r.is_finished() && rr.stage == RecvStage::Tag(TagRecv::Posted) =>
                {
                    Some((k, r.gen()))
                }
                _ => None,
            })
            .collect();
        let n = posted
            .into_iter()
            .filter(|&(k, g)| self.unpost(k, g, err.clone()))
            .count();
        self.own().recv_failure = Some(err);
        n
    }

    /// Takes receive `key` (generation `gen`), posted and not matched, off the matcher and
    /// finishes it with `err`; false when it can no longer be (matched, finished or gone).
    pub(crate) fn unpost(&mut self, key: usize, gen: u32, err: Error) -> bool {
        let (tag, mask) = match self.req_get(key) {
            Some(req) if req.gen() == gen && !req.is_finished() => match &req.kind {
                ReqKind::Recv(r) if r.stage == RecvStage::Tag(TagRecv::Posted) => (r.tag, r.mask),
                _ => return false,
            },
            _ => return false,
        };
        let wire = self.wire_id(key);
        let Some(offloaded) = self.tm_before_cancel(wire) else {
            return false;
        };
        if self.own().matcher.cancel(tag, mask, wire) {
            self.tm_after_cancel(offloaded);
            self.finish(key, Err(err));
            true
        } else {
            false
        }
    }

    /// Delivers unexpected message `uid` to receive `key`.
    pub(crate) fn recv_from_unexp(&mut self, key: usize, uid: usize) {
        if uid as u64 & SMALL_UID != 0 {
            let Some(&e) = self.own().small_unexp.get(uid as u64) else {
                return self.finish(
                    key,
                    Err(Error::InvalidParam("the unexpected message is gone".into())),
                );
            };
            self.own().small_unexp.free(uid as u64);
            let len = usize::from(e.len);
            self.req_mut(key).set_ep(e.ep as usize);
            let r = self.recv_mut(key);
            r.sender_tag = e.tag;
            r.total = len;
            r.stage = RecvStage::Tag(TagRecv::Eager);
            copy_in(&mut r.buf, &e.data[..len]);
            r.received = len;
            return self.recv_check_done(key);
        }
        let u = self.own().unexp.remove(uid);
        self.deliver_unexp(key, u);
    }

    /// Delivers unexpected message `u` (out of the queue) to receive `key`.
    fn deliver_unexp(&mut self, key: usize, u: Unexp) {
        // A lost message's endpoint is gone (the index may name another one by now).
        if !matches!(u.kind, UnexpKind::Lost { .. }) {
            self.req_mut(key).set_ep(u.ep);
        }
        let eager = |st: &mut Self, data: &[u8], total: usize, sreq: u64| {
            if sreq != NO_REQ {
                let _ = st.send_ctl(u.ep, am_id::SYNC_ACK, &ReqHdr { req: sreq }.encode());
            }
            let r = st.recv_mut(key);
            r.sender_tag = u.tag;
            r.total = total;
            r.stage = RecvStage::Tag(TagRecv::Eager);
            copy_in(&mut r.buf, data);
            r.received = data.len();
            match u.msg_key {
                Some(mk) => {
                    st.own().assembling.insert(mk, Target::Req(key));
                }
                None => st.recv_check_done(key),
            }
        };
        match u.kind {
            UnexpKind::Inline { len, data, sreq } => {
                let len = usize::from(len);
                eager(self, &data[..len], len, sreq);
            }
            UnexpKind::Eager { data, total, sreq } => {
                eager(self, &data, total, sreq);
                self.put_buf(data);
            }
            UnexpKind::Held(held) => eager(self, held.data(), held.data().len(), NO_REQ),
            UnexpKind::Rts {
                sreq,
                len,
                addr,
                tl,
                rkey,
            } => {
                let r = self
                    .rndv()
                    .rndv_recv_start(key, u.ep, u.tag, sreq, len, addr, &tl, &rkey);
                if let Err(e) = r {
                    self.fail_ep_soon(u.ep, e);
                }
            }
            UnexpKind::Lost { len, err } => {
                let r = self.recv_mut(key);
                r.sender_tag = u.tag;
                r.total = len;
                self.finish(key, Err(err));
            }
        }
    }

    /// Copies `data` (cut to fit) into matched receive `key` from endpoint `idx`; false when
    /// `key` is not a receive (the matcher holds receives only).
    fn copy_into_matched(&mut self, key: usize, idx: usize, data: &[u8]) -> bool {
        let req = self.req_mut(key);
        let ReqKind::Recv(r) = &mut req.kind else {
            return false;
        };
        copy_in(&mut r.buf, data);
        req.set_ep(idx);
        true
    }

    /// The receive of wire id `wire` (if it is still waiting), matched to the whole eager
    /// message `data` of `total` bytes with `tag` from endpoint `idx`: copies it in and
    /// finishes. The slot is looked up once. A receive whose result stays in its slot (the
    /// common case) gets it written there directly; the others go through
    /// [`Core::finish`](crate::worker::state::Core::finish).
    #[inline(always)]
    fn recv_eager_whole(&mut self, wire: u64, idx: usize, tag: u64, data: &[u8], total: usize) {
        let Some((key, req)) = self.req_waiting_by_wire(wire) else {
            return;
        };
        let (kind, notify) = req.kind_with_notify();
        let ReqKind::Recv(rv) = kind else {
            return;
        };
        let cap = rv.buf.len();
        copy_in(&mut rv.buf, data);
        if rv.rndv.is_none() && matches!(notify, Notify::Take) {
            // The result holds length and tag; nothing reads the request's endpoint, tag,
            // lengths or stage once it has one, so they are left as posted.
            let buf = std::mem::take(&mut rv.buf).into_vec();
            // `done` is empty (`waiting_by_wire` checked).
            req.keep_result(Done::new(recv_status(total, cap), buf, total, tag));
            return;
        }
        if let (None, Notify::Hook(t)) = (&rv.rndv, notify) {
            let t = *t;
            let buf = std::mem::take(&mut rv.buf).into_vec();
            if buf.is_none() && total <= cap {
                return self.hook_ok(key, t, total, tag);
            }
            return self.eager_hook_done(key, t, buf, recv_status(total, cap), total, tag);
        }
        rv.sender_tag = tag;
        rv.total = total;
        rv.received = total;
        rv.stage = RecvStage::Tag(TagRecv::Eager);
        req.set_ep(idx);
        self.finish(key, recv_status(total, cap))
    }

    /// [`TagFamily::recv_eager_whole`] into a hook receive: as `finish` does for one, without
    /// looking the request up again (the kind owns nothing once `buf` is out of it, nor does
    /// the notification). Out of line, so the other receives keep their code as it was.
    #[inline(never)]
    fn eager_hook_done(
        &mut self,
        key: usize,
        token: u64,
        buf: Option<Vec<u8>>,
        status: Result<()>,
        len: usize,
        tag: u64,
    ) {
        self.free_plain_req(key);
        let c = Completion {
            status,
            buf,
            len,
            tag,
            value: 0,
        };
        self.hook_done(token, c);
    }

    /// An eager message or its first fragment (`data` of `total` bytes; `sreq`: the sender's
    /// request to acknowledge, or `NO_REQ`; `msg_id`: the message id of a fragmented one) from
    /// endpoint `idx`: into the earliest posted receive that fits, or queued unexpected.
    /// `keep`: the transport offers to leave the message in its receive buffer; a whole
    /// unexpected message without acknowledgement above [`UNEXP_INLINE`] bytes then stays
    /// there (copied once, into its receive), unless the transport has no spare buffer.
    ///
    /// Always inlined: the common message (EAGER_ONLY, whole, no acknowledgement) calls it with
    /// constants for `total`, `sreq` and `msg_id`, which leave only the match, the copy and
    /// the finish.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn eager_arrived(
        &mut self,
        idx: usize,
        src: u64,
        tag: u64,
        data: &[u8],
        total: usize,
        sreq: u64,
        msg_id: Option<u64>,
        keep: Option<uct::AmKeep<'_>>,
    ) {
        let Some(wire) = self.tm_match(tag) else {
            let whole = sreq == NO_REQ && msg_id.is_none() && data.len() >= total;
            if whole && total <= UNEXP_INLINE {
                // The common small message: its checks fold away for EAGER_ONLY.
                return self.eager_unexpected_inline(idx, tag, &data[..total]);
            }
            if let Some(held) = keep.filter(|_| whole).and_then(|k| k.keep(&data[..total])) {
                return self.eager_unexpected_held(idx, tag, held);
            }
            return self.eager_unexpected(idx, src, tag, data, total, sreq, msg_id);
        };
        if sreq == NO_REQ && data.len() >= total {
            // All of it is here (as `recv_check_done` would find), nothing to acknowledge.
            return self.recv_eager_whole(wire, idx, tag, data, total);
        }
        let Some(key) = self.req_by_wire(wire) else {
            return;
        };
        if sreq != NO_REQ {
            let _ = self.send_ctl(idx, am_id::SYNC_ACK, &ReqHdr { req: sreq }.encode());
        }
        if data.len() >= total {
            return self.recv_eager_whole(wire, idx, tag, data, total);
        }
        if !self.copy_into_matched(key, idx, data) {
            return;
        }
        if let ReqKind::Recv(r) = &mut self.req_mut(key).kind {
            r.sender_tag = tag;
            r.total = total;
            r.stage = RecvStage::Tag(TagRecv::Eager);
            r.received = data.len();
        }
        if let Some(m) = msg_id {
            self.own().assembling.insert((src, m), Target::Req(key));
        }
    }

    /// [`TagFamily::eager_arrived`] of a whole message of at most [`UNEXP_INLINE`] bytes without
    /// acknowledgement that matched no posted receive: it waits in the unexpected queue,
    /// copied into a small entry (see `small`).
    #[inline(always)]
    fn eager_unexpected_inline(&mut self, idx: usize, tag: u64, data: &[u8]) {
        let uid = self.own().small_unexp.insert(idx, tag, data);
        self.own().matcher.push_unexpected(tag, uid);
    }

    /// [`TagFamily::eager_arrived`] of a whole message without acknowledgement that matched no
    /// posted receive and stays in the transport's receive buffer `held` while it waits.
    #[inline(never)]
    fn eager_unexpected_held(&mut self, idx: usize, tag: u64, held: uct::HeldBuf) {
        let uid = self.own().unexp.insert(Unexp {
            ep: idx,
            tag,
            kind: UnexpKind::Held(held),
            msg_key: None,
        });
        self.own().matcher.push_unexpected(tag, uid as u64);
    }

    /// [`TagFamily::eager_arrived`] that matched no posted receive: the message waits in the
    /// unexpected queue (its fragments, if any, join it there).
    #[allow(clippy::too_many_arguments)]
    fn eager_unexpected(
        &mut self,
        idx: usize,
        src: u64,
        tag: u64,
        data: &[u8],
        total: usize,
        sreq: u64,
        msg_id: Option<u64>,
    ) {
        let whole = data.len() >= total;
        let kind = if whole && total <= UNEXP_INLINE {
            let mut inline = [0u8; UNEXP_INLINE];
            inline[..total].copy_from_slice(&data[..total]);
            UnexpKind::Inline {
                len: total as u8,
                data: inline,
                sreq,
            }
        } else {
            let mut v = self.get_buf();
            v.reserve(total.min(1 << 26));
            extend_payload(&mut v, data);
            UnexpKind::Eager {
                data: v,
                total,
                sreq,
            }
        };
        let msg_key = if whole {
            None
        } else {
            msg_id.map(|m| (src, m))
        };
        let uid = self.own().unexp.insert(Unexp {
            ep: idx,
            tag,
            kind,
            msg_key,
        });
        self.own().matcher.push_unexpected(tag, uid as u64);
        if let Some(mk) = msg_key {
            self.own().assembling.insert(mk, Target::Unexp(uid));
        }
    }

    pub(crate) fn eager_middle(&mut self, src: u64, h: FragHdr, data: &[u8]) -> Result<()> {
        let Some(&t) = self.own().assembling.get(&(src, h.id)) else {
            return Err(Error::Wire(format!(
                "fragment of unknown message {} (no first fragment)",
                h.id
            )));
        };
        let off = h.offset as usize;
        match t {
            Target::Req(key) => {
                let r = match self.req_get_mut(key).map(|r| &mut r.kind) {
                    Some(ReqKind::Recv(r)) => r,
                    _ => {
                        self.own().assembling.remove(&(src, h.id));
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
                    copy_payload(&mut r.buf[off..off + n], data);
                }
                r.received += data.len();
                if r.received >= r.total {
                    self.own().assembling.remove(&(src, h.id));
                    self.recv_check_done(key);
                }
            }
            Target::Unexp(uid) => {
                let u = &mut self.own().unexp[uid];
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
                extend_payload(buf, data);
                if buf.len() >= *total {
                    u.msg_key = None;
                    self.own().assembling.remove(&(src, h.id));
                }
            }
        }
        Ok(())
    }

    /// EAGER_FIRST: the first fragment of a multi-fragment eager message.
    pub(crate) fn on_eager_first(
        &mut self,
        idx: usize,
        src: u64,
        h: EagerFirstHdr,
        data: &[u8],
    ) -> Result<()> {
        let total = usize::try_from(h.total_len)
            .map_err(|_| Error::Wire("message length overflows".into()))?;
        if self.own().assembling.contains_key(&(src, h.msg_id)) {
            return Err(Error::Wire(format!(
                "first fragment of message {} repeated",
                h.msg_id
            )));
        }
        self.eager_arrived(idx, src, h.tag, data, total, h.sreq, Some(h.msg_id), None);
        Ok(())
    }

    /// RTS: a rendezvous send arrived; it starts on the matching receive or waits unexpected.
    pub(crate) fn on_rts(&mut self, idx: usize, h: RtsHdr<'_>) -> Result<()> {
        let len = usize::try_from(h.len)
            .map_err(|_| Error::Wire("rendezvous length overflows".into()))?;
        let uid = self.own().next_unexp_id();
        match self.tm_arrive(h.tag, uid as u64) {
            Some(wire) => match self.req_by_wire(wire) {
                Some(key) => self.rndv().rndv_recv_start(
                    key, idx, h.tag, h.sreq, len, h.buf.addr, h.buf.tl, h.buf.rkey,
                ),
                None => Ok(()),
            },
            None => {
                let b = &h.buf;
                self.own()
                    .park_rts(idx, h.tag, h.sreq, len, b.addr, b.tl, b.rkey);
                Ok(())
            }
        }
    }
}
