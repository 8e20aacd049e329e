//! Sending on a lane and back-pressure: control messages and requests that meet `NoResource` wait
//! in their endpoint's pending queue, retried in order from `progress`.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::request::Op;
use crate::wire::PREFIX_LEN;
use crate::wireup::TagSendMode;
use crate::worker::ep::{EpState, Pending};
use crate::worker::req::{ReqKind, SendData, SendStage};
use crate::worker::state::{Core, State};
use ucs::{Error, Outcome, Result};
use uct::Endpoint as _;
use uct::{AnyEp, IfaceAttr, IfaceFlags};

pub(crate) trait OutcomeExt {
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

pub(crate) trait OutcomeU32 {
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

/// Sends an active message built from `parts` on a lane: inline when it fits `max_short`,
/// otherwise packed into the transport's bcopy buffer.
#[inline]
pub(crate) fn am_send(
    ep: &mut AnyEp,
    attr: &IfaceAttr,
    id: u8,
    parts: &[&[u8]],
) -> Result<Outcome> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if attr.flags.contains(IfaceFlags::AM_SHORT) && total <= attr.am.max_short {
        return ep.am_short_iov(id, parts);
    }
    if attr.flags.contains(IfaceFlags::AM_BCOPY) && total <= attr.am.max_bcopy {
        let r = ep.am_bcopy(id, |buf: &mut [u8]| {
            let mut off = 0;
            for p in parts {
                let end = (off + p.len()).min(buf.len());
                crate::tag::copy::copy_payload(&mut buf[off..end], p);
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

/// What a family's code on the [`Core`] made of a send or an RMA operation: done at once, or
/// a request that [`State::start_made`] starts (its first step may be any family's).
pub(crate) enum SendMade {
    /// Nothing left to do: the operation's result.
    Done(Op),
    /// Request `key` on endpoint `idx`, its stage set, to start: its first step now unless
    /// `behind` (it waits its turn behind the endpoint's queued operations).
    Req {
        idx: usize,
        key: usize,
        behind: bool,
    },
}

impl State {
    /// Starts what a family made of a send ([`SendMade`]): a request's first step (see
    /// [`State::start_req`]). Gives the operation.
    pub(crate) fn start_made(&mut self, made: Result<SendMade>) -> Result<Op> {
        match made? {
            SendMade::Done(op) => Ok(op),
            SendMade::Req { idx, key, behind } => {
                self.start_req(idx, key, behind)?;
                Ok(self.op_of(key))
            }
        }
    }

    /// Sends a tagged message ([`TagFamily::tag_send`](crate::worker::state::TagFamily), started).
    #[inline]
    pub(crate) fn tag_send(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'_>,
        sync: bool,
    ) -> Result<Op> {
        let made = self.tag_family().tag_send(idx, tag, data, sync);
        self.start_made(made)
    }

    /// Sends a tagged message by the protocol its size chooses
    /// ([`TagFamily::tag_send_proto`](crate::worker::state::TagFamily), started).
    pub(crate) fn tag_send_proto(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'_>,
        mode: TagSendMode,
    ) -> Result<Op> {
        let made = self.tag_family().tag_send_proto(idx, tag, data, mode);
        self.start_made(made)
    }

    /// Sends bytes of a mapped region ([`TagFamily::tag_send_mapped`](crate::worker::state::TagFamily), started).
    pub(crate) fn tag_send_mapped(
        &mut self,
        idx: usize,
        tag: u64,
        map: &crate::MemMap,
        offset: usize,
        len: usize,
    ) -> Result<Op> {
        let made = self
            .tag_family()
            .tag_send_mapped(idx, tag, map, offset, len);
        self.start_made(made)
    }

    /// Advances send request `key` as far as resources allow, in the family that owns its
    /// stage. Gives false on back-pressure.
    pub(crate) fn send_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        match self.send_mut(key).stage {
            SendStage::Tag(stage) => self.tag_family().tag_send_step(key, idx, stage),
            SendStage::Rndv(stage) => self.rndv_family().rndv_send_step(key, stage),
            SendStage::Stream(stage) => self.stream_send_step(key, stage),
            SendStage::Am(_) => self.am_family().am_send_step(key),
        }
    }

    /// A zero-copy fragment of send `key` completed (the transport's completion
    /// `COMP_ZCOPY`), in the family that owns its stage.
    pub(crate) fn zcopy_completed(&mut self, key: usize) {
        match self.send_mut(key).stage {
            SendStage::Stream(_) => self.stream_zcopy_completed(key),
            _ => self.rndv_family().rndv_zcopy_completed(key),
        }
    }

    /// Starts request `key` (a send, or an RMA get) on endpoint `idx`: its first step unless
    /// `behind` (earlier operations wait on the endpoint), queued when it cannot go now. An
    /// error while nothing has gone out removes the request and is returned, so the call fails
    /// as if it never started; one after part of the operation went out (a fragment, a
    /// zero-copy piece the transport still reads, an announcement the peer may answer) fails
    /// the endpoint instead, as `progress_pending` does, which finishes the request with it.
    pub(crate) fn start_req(&mut self, idx: usize, key: usize, behind: bool) -> Result<()> {
        let went = if behind {
            false
        } else {
            let step = match &self.reqs[key].kind {
                ReqKind::Recv(_) => self.rndv_family().get_step(key),
                _ => self.send_step(key),
            };
            match step {
                Ok(went) => went,
                Err(e) if self.req_untouched(key) => {
                    self.drop_req(key);
                    return Err(e);
                }
                Err(e) => {
                    self.fail_ep(idx, e);
                    return Ok(());
                }
            }
        };
        if !went && self.reqs[key].done.is_none() {
            self.queue_req(idx, key);
        }
        Ok(())
    }
}

impl Core {
    /// `r`, removing request `key` (made for an operation that then failed to start) when
    /// it is an error.
    pub(crate) fn unless_failed<T>(&mut self, key: usize, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.drop_req(key);
        }
        r
    }

    /// Request `key` is unfinished and nothing of it has gone out yet.
    fn req_untouched(&self, key: usize) -> bool {
        let r = &self.reqs[key];
        let idle = |x: &Option<Box<crate::worker::req::Rndv>>| {
            x.as_deref().is_none_or(|x| x.inflight == 0)
        };
        r.done.is_none()
            && match &r.kind {
                ReqKind::Send(s) => s.offset == 0 && idle(&s.rndv) && !s.stage.waits_rndv_answer(),
                ReqKind::Recv(r) => r.offset == 0 && idle(&r.rndv),
                _ => false,
            }
    }

    pub(crate) fn mark_pending(&mut self, idx: usize) {
        let ep = &mut self.eps[idx];
        if !ep.in_pending_list {
            ep.in_pending_list = true;
            self.pending_eps.push(idx);
            self.more_work = true;
        }
    }

    /// Queues request `key` behind the earlier sends of endpoint `idx`: it goes on from
    /// `progress_pending`, in order.
    #[inline]
    pub(crate) fn queue_req(&mut self, idx: usize, key: usize) {
        self.eps[idx].pending.push_back(Pending::Req(key));
        self.mark_pending(idx);
    }

    /// Sends a control message on the AM lane now, whatever is queued (for the request at the
    /// head of the endpoint's queue). False on back-pressure.
    pub(crate) fn send_ctl_now(&mut self, idx: usize, id: u8, body: &[u8]) -> Result<bool> {
        let uuid = self.uuid.to_le_bytes();
        let ep = &mut self.eps[idx];
        let l = ep.ready_lanes()?;
        let (li, uep) = &mut l.uct[l.am];
        if am_send(uep, &self.info[*li].attr, id, &[&uuid, body])? == Outcome::NoResource {
            return Ok(false);
        }
        ep.last_tx = self.now_stamp;
        Ok(true)
    }

    /// Sends a control message whose body is `head` then `tail`, or queues it (as one copy)
    /// behind earlier sends of the endpoint.
    pub(crate) fn send_ctl2(&mut self, idx: usize, id: u8, head: &[u8], tail: &[u8]) -> Result<()> {
        self.ep_usable(idx)?;
        if self.send_ctl2_now(idx, id, head, tail)? {
            return Ok(());
        }
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(head);
        v.extend_from_slice(tail);
        self.eps[idx]
            .pending
            .push_back(Pending::Ctl { id, body: v });
        self.mark_pending(idx);
        Ok(())
    }

    /// Sends message `id` with body `head` then `tail` on endpoint `idx`'s AM lane now (inline
    /// or by bcopy), when nothing is queued before it and the endpoint is connected. False when
    /// it was not sent (queued sends, connecting, back-pressure): nothing is queued here.
    #[inline]
    pub(crate) fn send_ctl2_now(
        &mut self,
        idx: usize,
        id: u8,
        head: &[u8],
        tail: &[u8],
    ) -> Result<bool> {
        let ep = &mut self.eps[idx];
        if ep.pending.is_empty() {
            if let Some(l) = ep.lanes.as_mut() {
                let (li, uep) = &mut l.uct[l.am];
                let attr = &self.info[*li].attr;
                let out = if tail.is_empty()
                    && attr.flags.contains(IfaceFlags::AM_SHORT)
                    && PREFIX_LEN + head.len() <= attr.am.max_short
                {
                    // The prefix as the transport's 8-byte header: one piece to copy.
                    uep.am_short(id, self.uuid, head)?
                } else {
                    am_send(uep, attr, id, &[&self.uuid.to_le_bytes(), head, tail])?
                };
                if out != Outcome::NoResource {
                    ep.last_tx = self.now_stamp;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Sends a control message, or queues it behind earlier sends of the endpoint.
    #[inline]
    pub(crate) fn send_ctl(&mut self, idx: usize, id: u8, body: &[u8]) -> Result<()> {
        self.send_ctl2(idx, id, body, &[])
    }
}

impl State {
    pub(crate) fn progress_pending(&mut self) -> usize {
        if self.core.pending_eps.is_empty() {
            return 0;
        }
        let mut n = 0;
        // The endpoints still pending afterwards are kept at the front of `list` (`kept` of
        // them), so a sender that meets back-pressure on every call allocates nothing here.
        let mut list = std::mem::take(&mut self.core.pending_eps);
        let mut kept = 0;
        for i in 0..list.len() {
            let idx = list[i];
            let Some(ep) = self.core.eps.get_mut(idx) else {
                continue;
            };
            ep.in_pending_list = false;
            if ep.lanes.is_none() || ep.state != EpState::Ready {
                if ep.state == EpState::Connecting {
                    list[kept] = idx;
                    kept += 1;
                }
                continue;
            }
            while let Some(p) = self.core.eps[idx].pending.pop_front() {
                let r = match &p {
                    Pending::Ctl { id, body } => {
                        let uuid = self.core.uuid.to_le_bytes();
                        let ep = &mut self.core.eps[idx];
                        let l = ep.lanes.as_mut().map(|l| (l.am, &mut l.uct));
                        match l {
                            Some((am, uct)) => {
                                let (li, uep) = &mut uct[am];
                                am_send(uep, &self.core.info[*li].attr, *id, &[&uuid, body])
                                    .map(|o| o != Outcome::NoResource)
                            }
                            None => Ok(false),
                        }
                    }
                    Pending::Fence { key, amo_sent } => self.fence_passed(idx, *key, *amo_sent),
                    Pending::Acked { amo_sent } => {
                        Ok((amo_sent.wrapping_sub(self.core.eps[idx].amo_acked) as i32) <= 0)
                    }
                    Pending::Req(key) => {
                        let key = *key;
                        if self.core.reqs.get(key).is_none_or(|r| r.done.is_some()) {
                            Ok(true)
                        } else {
                            match &self.core.reqs[key].kind {
                                ReqKind::Recv(_) => self.rndv_family().get_step(key),
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
                        self.core.eps[idx].pending.push_front(p);
                        list[kept] = idx;
                        kept += 1;
                        break;
                    }
                    Err(e) => {
                        self.fail_ep(idx, e);
                        break;
                    }
                }
            }
            // The queue drained on the old lane: a due AM lane switch happens now.
            let due = self.core.eps.get(idx).is_some_and(|e| {
                e.state == EpState::Ready
                    && e.pending.is_empty()
                    && e.lanes.as_ref().is_some_and(|l| l.am_next.is_some())
            });
            if due {
                match self.am_switch_try(idx) {
                    Ok(true) => n += 1,
                    Ok(false) => {
                        list[kept] = idx;
                        kept += 1;
                    }
                    Err(e) => self.fail_ep(idx, e),
                }
            }
        }
        list.truncate(kept);
        if self.core.pending_eps.is_empty() {
            // Nothing was marked meanwhile: the kept endpoints (each once) are the list.
            for &idx in &list {
                if let Some(ep) = self.core.eps.get_mut(idx) {
                    ep.in_pending_list = true;
                }
            }
            self.core.more_work |= !list.is_empty();
            self.core.pending_eps = list;
        } else {
            for idx in list {
                self.mark_pending(idx);
            }
        }
        n
    }
}
