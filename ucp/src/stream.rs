//! Stream API: an ordered byte stream per endpoint; received bytes fill waiting receives in
//! order. A receive waits for its whole buffer ([`Worker::stream_recv`]) or completes with the
//! first bytes that reach it ([`Worker::stream_recv_raw`] without `waitall`, UCX's default);
//! [`Worker::stream_take`] hands out what arrived without a receive.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

pub(crate) mod rx;
pub(crate) mod stages;

use crate::request::{Completion, HookedOp, Op};
use crate::tag::copy::copy_in;
use crate::wire::am_id;
use crate::wire::PREFIX_LEN;
use crate::worker::pending::{am_send, SendMade};
use crate::worker::req::RecvBuf;
use crate::worker::req::{comp_id, Notify, ReqKind, SendData, SendStage, COMP_ZCOPY};
use crate::worker::state::Core;
use crate::worker::{EpHandle, Worker};
use stages::{StreamRecv, StreamSend};
use std::ptr::NonNull;
use ucs::{Error, Outcome, Result};
use uct::Endpoint as _;
use uct::Iov;
use uct::MemoryDomain as _;

/// What [`Worker::stream_recv_raw_now_or_hooked`] did with a receive.
pub enum StreamRecvNow {
    /// The bytes were there: this many copied, the receive complete (no completion made).
    Copied(usize),
    /// As [`Worker::stream_recv_raw_hooked`] gives it.
    Hooked(HookedOp),
}

impl Worker {
    /// Appends bytes to the endpoint's ordered stream.
    pub fn stream_send(&mut self, ep: EpHandle, data: &[u8]) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        let made = self.st.stream_send(idx, SendData::Borrowed(data));
        self.st.start_made(made)
    }

    /// Receives exactly `buf.len()` stream bytes from the endpoint (in order, after earlier
    /// stream receives); the completion gives the buffer back.
    pub fn stream_recv(&mut self, ep: EpHandle, buf: Vec<u8>) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.stream_recv(idx, RecvBuf::Owned(buf), true)
    }

    /// Receives stream bytes straight into `len` bytes at `ptr`: all `len` with `waitall`,
    /// else the bytes available when the receive reaches the front of the endpoint's queue
    /// (at least one). The completion's `len` is the byte count, its `buf` `None`.
    ///
    /// # Safety
    /// As [`Worker::tag_recv_raw`]: `ptr` valid for writes of `len` bytes and left alone until
    /// the request completes.
    pub unsafe fn stream_recv_raw(
        &mut self,
        ep: EpHandle,
        ptr: *mut u8,
        len: usize,
        waitall: bool,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        // SAFETY: forwarded contract.
        let buf = unsafe { RecvBuf::raw(ptr, len) };
        self.st.stream_recv(idx, buf, waitall)
    }

    /// [`Worker::stream_recv_raw`] with the result going to the completion hook
    /// ([`Worker::set_completion_hook`]) under the token `token()` gives, as
    /// [`Worker::request_into_hook`] of its request would: a receive that finishes at once
    /// gives its completion (and `token` is not called); one left waiting is bound to the hook
    /// without a [`Request`](crate::Request) handle being made and taken apart.
    ///
    /// Inlined into its caller (the C library's receive); the rare cases are one call.
    ///
    /// # Safety
    /// As [`Worker::stream_recv_raw`].
    #[inline(always)]
    pub unsafe fn stream_recv_raw_hooked(
        &mut self,
        ep: EpHandle,
        ptr: *mut u8,
        len: usize,
        waitall: bool,
        token: impl FnOnce() -> u64,
    ) -> Result<HookedOp> {
        let idx = self.st.ep_idx(ep)?;
        // SAFETY: forwarded contract.
        let buf = unsafe { RecvBuf::raw(ptr, len) };
        if self.st.stream_recv_waits(idx, len) {
            let (key, gen) = self.st.stream_recv_wait(idx, buf, waitall)?;
            return Ok(HookedOp::Pending(self.st.hook_waiting(key, gen, token())));
        }
        match self.st.stream_recv_other(idx, buf, waitall)? {
            Ok(c) => Ok(HookedOp::Done(c)),
            Err((key, gen)) => Ok(HookedOp::Pending(self.st.hook_waiting(key, gen, token()))),
        }
    }

    /// [`Worker::stream_recv_raw_hooked`], with the receive that finds its bytes buffered (and
    /// no receive queued before it) served first when `now`: the bytes are copied and the
    /// count given ([`StreamRecvNow::Copied`]), the receive complete without a request or a
    /// completion. The common receive of a client behind its sender (ucx_perftest's
    /// stream_bw); the one posted ahead of its bytes is looked at first, as before. The C
    /// library passes `now` when the client asked for no request.
    ///
    /// # Safety
    /// As [`Worker::stream_recv_raw`].
    #[inline(always)]
    pub unsafe fn stream_recv_raw_now_or_hooked(
        &mut self,
        ep: EpHandle,
        ptr: *mut u8,
        len: usize,
        waitall: bool,
        now: bool,
        token: impl FnOnce() -> u64,
    ) -> Result<StreamRecvNow> {
        let idx = self.st.ep_idx(ep)?;
        if self.st.stream_recv_waits(idx, len) {
            // SAFETY: forwarded contract.
            let buf = unsafe { RecvBuf::raw(ptr, len) };
            let (key, gen) = self.st.stream_recv_wait(idx, buf, waitall)?;
            let id = self.st.hook_waiting(key, gen, token());
            return Ok(StreamRecvNow::Hooked(HookedOp::Pending(id)));
        }
        if now {
            // SAFETY: forwarded contract.
            if let Some(n) = unsafe { self.st.stream_recv_ready(idx, ptr, len, waitall) } {
                return Ok(StreamRecvNow::Copied(n));
            }
        }
        // SAFETY: forwarded contract.
        let buf = unsafe { RecvBuf::raw(ptr, len) };
        Ok(StreamRecvNow::Hooked(
            match self.st.stream_recv_other(idx, buf, waitall)? {
                Ok(c) => HookedOp::Done(c),
                Err((key, gen)) => HookedOp::Pending(self.st.hook_waiting(key, gen, token())),
            },
        ))
    }

    /// Appends `len` bytes at `ptr` to the endpoint's stream, read in place.
    ///
    /// # Safety
    /// `ptr` valid for reads of `len` bytes, unchanged until the request completes.
    pub unsafe fn stream_send_raw(
        &mut self,
        ep: EpHandle,
        ptr: *const u8,
        len: usize,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: forwarded contract.
            unsafe { std::slice::from_raw_parts(ptr, len) }
        };
        let made = self.st.stream_send(idx, SendData::Raw(data));
        self.st.start_made(made)
    }

    /// Sends `data` (1 to the AM lane's short limit bytes) at once in one message when nothing
    /// is queued before it on the endpoint and the lane takes it now: true when it went (the
    /// send is complete), false when nothing was sent and the send takes the general path
    /// ([`Worker::stream_send`]). The C library's common stream send, without a completion to
    /// build and take apart.
    #[inline(always)]
    pub fn stream_send_short(&mut self, ep: EpHandle, data: &[u8]) -> Result<bool> {
        let len = data.len();
        self.st.short1_at(ep, am_id::STREAM, data, |p| {
            len > 0 && p.short_max.is_some_and(|m| len <= m)
        })
    }

    /// Takes up to `max` received stream bytes no receive waits for (none while receives are
    /// queued on the endpoint, whose bytes they are). Gives an empty vector when none are there.
    pub fn stream_take(&mut self, ep: EpHandle, max: usize) -> Result<Vec<u8>> {
        let idx = self.st.ep_idx(ep)?;
        let mut out = self.st.get_buf();
        if let Some(x) = self.st.ep_mut(idx).extra_get_mut() {
            if x.stream.waiters.is_empty() {
                x.stream.rx.take(&mut out, max);
            }
        }
        Ok(out)
    }

    /// As [`Worker::stream_take`], the bytes left of the oldest message the peer sent (UCX's
    /// `ucp_stream_recv_data_nb` gives one received fragment at a time, and clients count on
    /// it: ucx_perftest's stream test with `-r recv_data` counts messages by it).
    pub fn stream_take_message(&mut self, ep: EpHandle) -> Result<Vec<u8>> {
        let idx = self.st.ep_idx(ep)?;
        let first = self
            .st
            .ep(idx)
            .extra()
            .map_or(0, |x| x.stream.rx.front_message_left());
        self.stream_take(ep, first)
    }

    /// Stream bytes received and not yet consumed on the endpoint.
    pub fn stream_available(&self, ep: EpHandle) -> Result<usize> {
        let idx = self.st.ep_idx(ep)?;
        Ok(self.st.ep(idx).extra().map_or(0, |x| x.stream.rx.len()))
    }
}

impl Core {
    /// A stream send of `data` on endpoint `idx`: sent at once when it fits one fragment and
    /// the lane takes it, else a request for [`State::start_made`](crate::worker::state::State::start_made).
    pub(crate) fn stream_send(&mut self, idx: usize, data: SendData<'_>) -> Result<SendMade> {
        self.ep_usable(idx)?;
        // Bytes that fit one fragment and go out now need no request.
        let fits = self
            .ep(idx)
            .proto()
            .is_some_and(|p| (1..=p.bcopy_single_max).contains(&data.as_slice().len()));
        if fits && self.send_ctl2_now(idx, am_id::STREAM, data.as_slice(), &[])? {
            return Ok(SendMade::Done(data.sent_at_once(0)));
        }
        let key = self.new_send(idx, 0, data, false);
        self.send_mut(key).stage = SendStage::Stream(StreamSend::Bcopy);
        let behind = !self.ep_ready(idx);
        Ok(SendMade::Req { idx, key, behind })
    }

    /// Advances stream send `key`, in `stage`, as far as resources allow (see
    /// `State::send_step`). Gives false on back-pressure.
    pub(crate) fn stream_send_step(&mut self, key: usize, stage: StreamSend) -> Result<bool> {
        match stage {
            StreamSend::Bcopy => self.stream_step(key),
            StreamSend::Zcopy => self.stream_zcopy_step(key),
        }
    }

    /// Sends the bcopy fragments of stream send `key` that the lane takes now (or, from its
    /// start, goes zero-copy). Gives false on back-pressure.
    fn stream_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        if self.send_mut(key).offset == 0 && self.stream_zcopy_start(idx, key) {
            return self.stream_zcopy_step(key);
        }
        let uuid = self.worker_uuid().to_le_bytes();
        let now = self.now_stamp();
        let (lane, req) = self.am_lane_and_req(idx, key)?;
        let (uep, attr, last_tx) = (lane.uep, lane.attr, lane.last_tx);
        let frag = lane.proto.bcopy_single_max;
        let s = match &mut req.kind {
            ReqKind::Send(s) => s,
            _ => return Ok(true),
        };
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
            *last_tx = now;
            s.offset += n;
        }
        self.finish(key, Ok(()));
        Ok(true)
    }

    /// Whether send `key` goes by zero-copy fragments, registering its data when it does: on
    /// an AM lane whose zero-copy messages are longer than its bcopy ones (tcp: 64 KiB frames
    /// from the caller's memory against 8 KiB copied ones, an eighth of the system calls on
    /// both sides) once the data reaches the lane's zero-copy threshold.
    fn stream_zcopy_start(&mut self, idx: usize, key: usize) -> bool {
        let Some(l) = self.ep(idx).lanes() else {
            return false;
        };
        let li = l.am_iface();
        let len = self.send_mut(key).data.len();
        let Some(proto) = self.ep(idx).proto() else {
            return false;
        };
        let am = &self.iface(li).attr.am;
        let wanted = proto.zcopy_thresh.is_some_and(|t| len >= t)
            && am.max_zcopy > proto.bcopy_single_max
            && am.max_hdr >= PREFIX_LEN;
        if !wanted {
            return false;
        }
        let Some(ptr) = NonNull::new(self.send_mut(key).data.as_mut_ptr()) else {
            return false;
        };
        // SAFETY: the data is owned by the request (or the caller's, left alone until it
        // completes) and neither moved nor resized until the request finishes, which drops the
        // handle first.
        match unsafe { self.md(li).mem_reg(ptr, len) } {
            Ok(m) => {
                self.send_rndv(key).memh = Some(m);
                self.send_mut(key).stage = SendStage::Stream(StreamSend::Zcopy);
                self.stats_mut().stream_zcopy += 1;
                true
            }
            Err(e) => {
                tracing::debug!("stream send buffer not registered, sent by copy: {e}");
                false
            }
        }
    }

    /// Sends the zero-copy fragments of stream send `key` that the lane takes now; the send
    /// finishes when the transport has completed them all
    /// ([`Core::stream_zcopy_completed`]). Gives false on back-pressure.
    fn stream_zcopy_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        let wire = self.wire_id(key);
        let uuid = self.worker_uuid().to_le_bytes();
        let now = self.now_stamp();
        let (lane, req) = self.am_lane_and_req(idx, key)?;
        let max = lane.attr.am.max_zcopy;
        let ReqKind::Send(s) = &mut req.kind else {
            return Ok(true);
        };
        let Some(x) = s.rndv.as_deref_mut() else {
            return Err(Error::InvalidParam(
                "stream zero-copy without registration".into(),
            ));
        };
        let Some(memh) = x.memh.clone() else {
            return Err(Error::InvalidParam(
                "stream zero-copy without registration".into(),
            ));
        };
        let len = s.data.len();
        while s.offset < len {
            let n = max.min(len - s.offset);
            let iov = Iov::new(&memh, s.offset, n)?;
            match lane
                .uep
                .am_zcopy(am_id::STREAM, &uuid, &[iov], comp_id(COMP_ZCOPY, wire))?
            {
                Outcome::NoResource => return Ok(false),
                Outcome::InProgress => x.inflight += 1,
                Outcome::Done(()) => {}
            }
            *lane.last_tx = now;
            s.offset += n;
        }
        if x.inflight == 0 {
            self.finish(key, Ok(()));
        }
        Ok(true)
    }

    /// A zero-copy fragment of stream send `key` completed: after the last one (all sent),
    /// the send finishes.
    pub(crate) fn stream_zcopy_completed(&mut self, key: usize) {
        if self.zcopy_piece_done(key)
            && self.send_mut(key).stage == SendStage::Stream(StreamSend::Zcopy)
        {
            self.finish(key, Ok(()));
        }
    }

    pub(crate) fn stream_recv(&mut self, idx: usize, buf: RecvBuf, waitall: bool) -> Result<Op> {
        Ok(match self.stream_recv_keyed(idx, buf, waitall)? {
            Ok(c) => Op::Done(c),
            Err((key, gen)) => Op::Pending(self.handle_of(key, gen)),
        })
    }

    /// [`Core::stream_recv`] giving a receive left waiting as its request's key and
    /// generation (no [`Request`](crate::Request) handle made).
    #[inline(always)]
    pub(crate) fn stream_recv_keyed(
        &mut self,
        idx: usize,
        buf: RecvBuf,
        waitall: bool,
    ) -> Result<std::result::Result<Completion, (usize, u32)>> {
        if self.stream_recv_waits(idx, buf.len()) {
            return Ok(Err(self.stream_recv_wait(idx, buf, waitall)?));
        }
        self.stream_recv_other(idx, buf, waitall)
    }

    /// Whether a receive of `len` bytes posted now on endpoint `idx` waits for its bytes, as
    /// the common receive, posted ahead of them, does: it wants some, none are buffered and no
    /// receive is queued before it (so nothing is served now).
    #[inline(always)]
    fn stream_recv_waits(&self, idx: usize, len: usize) -> bool {
        len > 0
            && self
                .ep(idx)
                .extra()
                .is_none_or(|x| x.stream.rx.is_empty() && x.stream.waiters.is_empty())
    }

    /// The receive of `len` bytes at `ptr` on endpoint `idx` served at once when no receive is
    /// queued on it and the bytes asked for are buffered (all `len` with `waitall`, else at
    /// least one): copies them and gives how many; `None`, nothing done, otherwise (also for
    /// an empty receive).
    ///
    /// # Safety
    /// `ptr` valid for writes of `len` bytes.
    #[inline(always)]
    unsafe fn stream_recv_ready(
        &mut self,
        idx: usize,
        ptr: *mut u8,
        len: usize,
        waitall: bool,
    ) -> Option<usize> {
        let x = self.ep_mut(idx).extra_get_mut()?;
        let need = if waitall { len } else { len.min(1) };
        if need == 0 || !x.stream.waiters.is_empty() || x.stream.rx.len() < need {
            return None;
        }
        // SAFETY: the caller's `len` writable bytes (`len` > 0 here, so `ptr` is not null).
        let dst = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        Some(x.stream.rx.copy_out(dst))
    }

    /// Queues a receive into `buf` on endpoint `idx` that waits for its bytes
    /// ([`Core::stream_recv_waits`]), when the endpoint is usable: its request's key and
    /// generation.
    #[inline(always)]
    fn stream_recv_wait(
        &mut self,
        idx: usize,
        buf: RecvBuf,
        waitall: bool,
    ) -> Result<(usize, u32)> {
        self.ep_usable(idx)?;
        let key = self.new_req(
            Some(idx),
            ReqKind::StreamRecv(StreamRecv::new(buf, waitall)),
        );
        let ep = self.ep_mut(idx);
        match ep.extra_get_mut() {
            Some(x) => x.stream.waiters.push_back(key),
            None => ep.extra_mut().stream.waiters.push_back(key),
        }
        Ok((key, self.last_req_gen()))
    }

    /// [`Core::stream_recv_keyed`] of a receive that finds bytes buffered, receives queued
    /// before it, or an empty buffer.
    #[inline(never)]
    fn stream_recv_other(
        &mut self,
        idx: usize,
        mut buf: RecvBuf,
        waitall: bool,
    ) -> Result<std::result::Result<Completion, (usize, u32)>> {
        // No receive queued before this one and enough bytes buffered: served now, without a
        // request (what a receiver that is behind its sender meets on every call).
        if let Some(x) = self.ep_mut(idx).extra_get_mut() {
            let need = if waitall { buf.len() } else { buf.len().min(1) };
            if need > 0 && x.stream.waiters.is_empty() && x.stream.rx.len() >= need {
                let len = x.stream.rx.copy_out(&mut buf[..]);
                return Ok(Ok(Completion {
                    status: Ok(()),
                    buf: buf.into_vec(),
                    len,
                    tag: 0,
                    value: 0,
                }));
            }
        }
        // Bytes that arrived before the peer closed can still be read.
        let (have, queued) = match self.ep(idx).extra() {
            None => (0, 0),
            Some(x) => (
                x.stream.rx.len(),
                x.stream
                    .waiters
                    .iter()
                    .map(|&k| match self.req_get(k).map(|r| &r.kind) {
                        Some(ReqKind::StreamRecv(r)) => r.room(),
                        _ => 0,
                    })
                    .sum::<usize>(),
            ),
        };
        let need = if waitall { buf.len() } else { buf.len().min(1) };
        if have < queued + need {
            self.ep_usable(idx)?;
        }
        // With no bytes buffered only an empty receive can complete now.
        let serve = have > 0 || buf.is_empty();
        let key = self.new_req(
            Some(idx),
            ReqKind::StreamRecv(StreamRecv::new(buf, waitall)),
        );
        self.ep_mut(idx).extra_mut().stream.waiters.push_back(key);
        if serve {
            self.stream_serve(idx);
        }
        match self.take_finished(key) {
            Some(c) => Ok(Ok(c)),
            None => Ok(Err((key, self.req_mut(key).gen()))),
        }
    }

    /// Moves received stream bytes into waiting receives, in posting order.
    pub(crate) fn stream_serve(&mut self, idx: usize) {
        while let Some(&key) = self.ep(idx).extra().and_then(|x| x.stream.waiters.front()) {
            let (ep, req) = self.ep_and_req_mut(idx, key);
            let ep = ep.extra_mut();
            let done = match req.map(|r| &mut r.kind) {
                Some(ReqKind::StreamRecv(r)) => {
                    r.filled += ep.stream.rx.copy_out(&mut r.buf[r.filled..]);
                    r.satisfied()
                }
                _ => true,
            };
            if !done {
                break;
            }
            self.stream_waiter_done(idx, key);
        }
    }

    /// STREAM: bytes of the peer's stream, handed to waiting receives; what they do not take
    /// is appended to the endpoint's received bytes.
    #[inline(never)]
    pub(crate) fn on_stream(&mut self, idx: usize, data: &[u8], keep: Option<uct::AmKeep<'_>>) {
        self.on_stream_inline(idx, data, keep);
    }

    /// [`Core::on_stream`], inlined into the STREAM message's fast path.
    #[inline(always)]
    pub(crate) fn on_stream_inline(
        &mut self,
        idx: usize,
        data: &[u8],
        keep: Option<uct::AmKeep<'_>>,
    ) {
        if !data.is_empty() && self.stream_fill_front(idx, data) {
            return;
        }
        self.on_stream_other(idx, data, keep);
    }

    /// The common arrival: endpoint `idx` has no bytes buffered and its oldest waiting receive
    /// has room for all of `data` (not empty): copies it in (true), completing the receive if
    /// it has what it waits for; false, nothing done, otherwise. A receive into the client's
    /// memory whose result goes to the completion hook (the C library's) gets a result of
    /// constants ([`Core::hook_ok`](crate::worker::state::Core::hook_ok), as a tag receive's), without the general finish.
    #[inline(always)]
    fn stream_fill_front(&mut self, idx: usize, data: &[u8]) -> bool {
        let front = match self.ep(idx).extra() {
            Some(x) if x.stream.rx.is_empty() => x.stream.waiters.front().copied(),
            _ => None,
        };
        let Some(key) = front else {
            return false;
        };
        let (ep, req) = self.ep_and_req_mut(idx, key);
        let Some(req) = req.filter(|r| !r.is_finished()) else {
            return false;
        };
        let (kind, notify) = req.kind_with_notify();
        let ReqKind::StreamRecv(r) = kind else {
            return false;
        };
        if data.len() > r.room() {
            return false;
        }
        copy_in(&mut r.buf[r.filled..r.filled + data.len()], data);
        r.filled += data.len();
        if !r.satisfied() {
            return true;
        }
        let len = r.filled;
        let hook = match notify {
            Notify::Hook(t) if r.owns_nothing() => Some(*t),
            _ => None,
        };
        // The part was there (`front` came from it).
        let more = ep.extra_get_mut().is_some_and(|x| {
            let waiters = &mut x.stream.waiters;
            if waiters.len() == 1 {
                // The usual queue of one (clearing it is inline; `pop_front` is a call).
                waiters.clear();
            } else {
                waiters.pop_front();
            }
            !waiters.is_empty()
        });
        match hook {
            Some(t) => self.hook_ok(key, t, len, 0),
            None => self.finish(key, Ok(())),
        }
        if more {
            // An empty receive behind it completes now too.
            self.stream_serve(idx);
        }
        true
    }

    /// [`Core::on_stream`] of bytes that do not all go into the oldest waiting receive (or
    /// find bytes buffered before them).
    #[inline(never)]
    fn on_stream_other(&mut self, idx: usize, data: &[u8], keep: Option<uct::AmKeep<'_>>) {
        let direct = self
            .ep(idx)
            .extra()
            .is_some_and(|x| x.stream.rx.is_empty() && !x.stream.waiters.is_empty());
        let data = if direct {
            self.stream_fill(idx, data)
        } else {
            data
        };
        if !data.is_empty() {
            // Kept in the transport's buffer when it can spare it (one copy, into the receive
            // that takes the bytes), else copied out.
            let held = keep.and_then(|k| k.keep(data));
            let x = self.ep_mut(idx).extra_mut();
            match held {
                Some(h) => x.stream.rx.push_held(h),
                None => x.stream.rx.push_copy(data),
            }
            if x.stream.waiters.is_empty() {
                // Nobody to serve (a receiver behind its sender): the bytes wait.
                return;
            }
        }
        self.stream_serve(idx);
    }
    /// Copies arrived stream bytes straight into the waiting receives of endpoint `idx`, which
    /// has no older bytes buffered, completing those that are satisfied, in posting order.
    /// Gives the bytes no receive took (none when a receive is still waiting).
    fn stream_fill<'d>(&mut self, idx: usize, mut data: &'d [u8]) -> &'d [u8] {
        while !data.is_empty() {
            let Some(&key) = self.ep(idx).extra().and_then(|x| x.stream.waiters.front()) else {
                break;
            };
            let done = match self.req_get_mut(key).map(|r| &mut r.kind) {
                Some(ReqKind::StreamRecv(r)) => {
                    let n = r.room().min(data.len());
                    r.buf[r.filled..r.filled + n].copy_from_slice(&data[..n]);
                    data = &data[n..];
                    r.filled += n;
                    r.satisfied()
                }
                _ => true,
            };
            if !done {
                break;
            }
            self.stream_waiter_done(idx, key);
        }
        data
    }

    /// Receive `key`, the oldest waiting on endpoint `idx`, has what it waits for: it leaves
    /// the queue and completes.
    fn stream_waiter_done(&mut self, idx: usize, key: usize) {
        self.ep_mut(idx).extra_mut().stream.waiters.pop_front();
        if self.req_get(key).is_some_and(|r| !r.is_finished()) {
            self.finish(key, Ok(()));
        }
    }
}
