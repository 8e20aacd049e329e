//! Tag matching, MPI style: the public tag send/receive/probe calls; [`matcher`] keeps the
//! ordering (per-sender order, posting order across exact and wildcard tags), `send` and `recv`
//! run the eager protocol and `offload` lets a transport match tags itself.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

pub(crate) mod copy;
pub mod matcher;
pub(crate) mod message;
pub(crate) mod offload;
pub(crate) mod probe;
mod queue;
mod recv;
mod send;
pub(crate) mod small;
pub(crate) mod stages;
pub(crate) mod state;
pub(crate) mod unexp;

use crate::request::{Completion, HookedOp, Op, Request};
use crate::rma::MemMap;
use crate::wireup::TagSendMode;
use crate::worker::req::RecvBuf;
use crate::worker::req::SendData;
use crate::worker::{EpHandle, Message, ProbeInfo, Worker};
use ucs::{Error, Result};

impl Worker {
    /// Sends a tagged message. Small messages are copied and finish at once; large ones (and any
    /// that meet back-pressure) are copied into a worker-owned buffer.
    ///
    /// The eager-short case is decided out of line and its completion built here, in the
    /// caller, so that it costs no copy of the result.
    #[inline]
    pub fn tag_send(&mut self, ep: EpHandle, tag: u64, data: &[u8]) -> Result<Op> {
        let data = SendData::Borrowed(data);
        if self.st.tag_family().tag_send_short_out(ep, tag, &data)? {
            return Ok(Op::Done(Completion {
                tag,
                ..Completion::ok()
            }));
        }
        let idx = self.st.ep_idx(ep)?;
        self.st
            .tag_send_proto(idx, tag, data, TagSendMode::Standard)
    }

    /// [`Worker::tag_send`] that gives `None` when the send finished at once (as UCX's
    /// `ucp_tag_send_nbx` gives NULL), or the request of a send still running: the common case
    /// makes no completion for the caller to take apart. A send that finished at once with an
    /// error gives that error.
    pub fn tag_send_nb(&mut self, ep: EpHandle, tag: u64, data: &[u8]) -> Result<Option<Request>> {
        if self
            .st
            .tag_family()
            .tag_send_short_at(ep, tag, &SendData::Borrowed(data))?
        {
            return Ok(None);
        }
        self.tag_send_nb_rest(ep, tag, data)
    }

    /// [`Worker::tag_send_nb`] of a message the eager-short step did not send.
    #[inline(never)]
    fn tag_send_nb_rest(&mut self, ep: EpHandle, tag: u64, data: &[u8]) -> Result<Option<Request>> {
        let idx = self.st.ep_idx(ep)?;
        request_of(self.st.tag_send_proto(
            idx,
            tag,
            SendData::Borrowed(data),
            TagSendMode::Standard,
        )?)
    }

    /// Sends a tagged message from a vector the worker takes and gives back in the completion's
    /// `buf`; rendezvous then reads it in place without a copy.
    pub fn tag_send_vec(&mut self, ep: EpHandle, tag: u64, data: Vec<u8>) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.tag_send(idx, tag, SendData::Owned(data), false)
    }

    /// Sends a tagged message that completes only when the receiver has matched it.
    pub fn tag_send_sync(&mut self, ep: EpHandle, tag: u64, data: &[u8]) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.tag_send(idx, tag, SendData::Borrowed(data), true)
    }

    /// Sends `len` bytes at `offset` of `map` (from [`Worker::mem_map`]) as a tagged message.
    ///
    /// When `map` is a shared-memory segment (posix, sysv) and the message goes by rendezvous,
    /// the data is read in place: the transport gets the segment's memory handle, so a peer on
    /// this host copies straight from the mapped segment into its posted receive (one memory
    /// copy, no cross-memory read), and the software rendezvous fetches it from the segment
    /// (get over the RMA lane). Heap mappings (no shared-memory transport, e.g. tcp alone)
    /// are read in place too, through their registrations: tcp sends the payload straight
    /// from the mapping. Eager sizes and back-pressure copy the bytes like
    /// [`Worker::tag_send`]. The send is not synchronous (it may complete before the receiver
    /// matched it, as [`Worker::tag_send`]).
    ///
    /// The request keeps the memory alive until it completes, so dropping `map` early is
    /// safe; the bytes must not be changed until completion (the peer may see either). A range
    /// outside the mapping, or an empty one, gives [`Error::InvalidParam`].
    #[inline]
    pub fn tag_send_mapped(
        &mut self,
        ep: EpHandle,
        tag: u64,
        map: &MemMap,
        offset: usize,
        len: usize,
    ) -> Result<Op> {
        let small = self.st.tag_family().mapped_bytes(ep, map, offset, len)?;
        // As `Worker::tag_send`: an eager-short send's completion is built here.
        if self
            .st
            .tag_family()
            .tag_send_short_out(ep, tag, &SendData::Borrowed(small))?
        {
            return Ok(Op::Done(Completion {
                tag,
                ..Completion::ok()
            }));
        }
        let idx = self.st.ep_idx(ep)?;
        self.st.tag_send_mapped(idx, tag, map, offset, len)
    }

    /// [`Worker::tag_send_mapped`] that gives `None` when the send finished at once, or the
    /// request of a send still running (see [`Worker::tag_send_nb`]).
    #[inline(always)]
    pub fn tag_send_mapped_nb(
        &mut self,
        ep: EpHandle,
        tag: u64,
        map: &MemMap,
        offset: usize,
        len: usize,
    ) -> Result<Option<Request>> {
        let small = self.st.tag_family().mapped_bytes(ep, map, offset, len)?;
        if self
            .st
            .tag_family()
            .tag_send_short_at(ep, tag, &SendData::Borrowed(small))?
        {
            return Ok(None);
        }
        self.tag_send_mapped_nb_rest(ep, tag, map, offset, len)
    }

    /// [`Worker::tag_send_mapped_nb`] of a message the eager-short step did not send.
    #[inline(never)]
    fn tag_send_mapped_nb_rest(
        &mut self,
        ep: EpHandle,
        tag: u64,
        map: &MemMap,
        offset: usize,
        len: usize,
    ) -> Result<Option<Request>> {
        let idx = self.st.ep_idx(ep)?;
        request_of(self.st.tag_send_mapped(idx, tag, map, offset, len)?)
    }

    /// Sends `data` as a tagged message when it goes out at once by eager-short (the common
    /// small send: copied into the transport now, nothing left to complete). Gives false,
    /// having sent nothing, when it does not (too long for one short message, sends queued
    /// before it, back-pressure, an endpoint still connecting): [`Worker::tag_send`] or
    /// [`Worker::tag_send_raw`] then takes it.
    #[inline(always)]
    pub fn tag_send_short(&mut self, ep: EpHandle, tag: u64, data: &[u8]) -> Result<bool> {
        self.st
            .tag_family()
            .tag_send_short_at(ep, tag, &SendData::Borrowed(data))
    }

    /// Posts a receive for `tag` under `mask` into `buf` (its length is the capacity). The
    /// completion gives the buffer back with the data in `buf[..len]`.
    #[inline]
    pub fn tag_recv(&mut self, buf: Vec<u8>, tag: u64, mask: u64) -> Result<Op> {
        Ok(self.tag_recv_buf(RecvBuf::Owned(buf), tag, mask))
    }

    /// [`Worker::tag_recv`] into either kind of buffer: a receive left waiting in the matcher
    /// goes to the transport's tag matching when it may (see `offload`).
    /// A message already waiting is received at once (see `TagFamily::recv_unexp_now`); the
    /// common case, no message waiting, builds its pending result here, in the caller.
    #[inline(always)]
    pub(crate) fn tag_recv_buf(&mut self, buf: RecvBuf, tag: u64, mask: u64) -> Op {
        if self.st.tag.matcher.unexpected_len() != 0 {
            return self.tag_recv_unexp(buf, tag, mask);
        }
        let (key, gen) = self.tag_recv_queue(buf, tag, mask);
        Op::Pending(self.st.handle_of(key, gen))
    }

    /// [`Worker::tag_recv_buf`] with messages waiting: one that fits is received at once.
    #[inline(never)]
    fn tag_recv_unexp(&mut self, buf: RecvBuf, tag: u64, mask: u64) -> Op {
        if let Some(uid) = self.st.tag.matcher.take_unexpected(tag, mask) {
            return self
                .st
                .tag_family()
                .recv_unexp_now(buf, tag, mask, uid as usize);
        }
        let (key, gen) = self.tag_recv_queue(buf, tag, mask);
        Op::Pending(self.st.handle_of(key, gen))
    }

    /// [`Worker::tag_recv_raw`] with the result going to the completion hook
    /// ([`Worker::set_completion_hook`]) under the token `token()` gives, as
    /// [`Worker::request_into_hook`] of its request would: a receive that finishes at once
    /// gives its completion (and `token` is not called); a receive left waiting is bound to
    /// the hook without a [`Request`] handle being made and taken apart.
    ///
    /// # Safety
    /// As [`Worker::tag_recv_raw`].
    #[inline(always)]
    pub unsafe fn tag_recv_raw_hooked(
        &mut self,
        ptr: *mut u8,
        len: usize,
        tag: u64,
        mask: u64,
        token: impl FnOnce() -> u64,
    ) -> Result<HookedOp> {
        // SAFETY: forwarded contract.
        let buf = unsafe { RecvBuf::raw(ptr, len) };
        if self.st.tag.matcher.unexpected_len() != 0 {
            return match self.tag_recv_unexp(buf, tag, mask) {
                Op::Done(c) => Ok(HookedOp::Done(c)),
                Op::Pending(r) => self.request_into_hook(r, token()).map(HookedOp::Pending),
            };
        }
        let (key, gen) = self.tag_recv_queue_inline(buf, tag, mask);
        match self.st.req_get_mut(key) {
            Some(r) if r.gen() == gen && !r.is_finished() => {
                Ok(HookedOp::Pending(self.st.hook_waiting(key, gen, token())))
            }
            // Failed at once (a receive failure in force): its result goes with the token.
            _ => {
                let r = self.st.handle_of(key, gen);
                self.request_into_hook(r, token()).map(HookedOp::Pending)
            }
        }
    }

    /// Queues a receive no waiting message fits (it may go to the transport's tag matching).
    /// Gives the new request's key and generation.
    #[inline(never)]
    fn tag_recv_queue(&mut self, buf: RecvBuf, tag: u64, mask: u64) -> (usize, u32) {
        self.tag_recv_queue_inline(buf, tag, mask)
    }

    /// [`Worker::tag_recv_queue`] inlined into its caller (the C library's receive), with the
    /// rare steps (a receive failure in force, a post to the transport) out of line.
    #[inline(always)]
    fn tag_recv_queue_inline(&mut self, buf: RecvBuf, tag: u64, mask: u64) -> (usize, u32) {
        let len = buf.len();
        let (key, gen) = self.st.tag_family().tag_recv_post(buf, tag, mask);
        if self.st.tag.recv_failure.is_some() {
            self.tag_recv_refuse(key, gen);
        } else if self.st.tag.tm.may_post(mask, len) {
            crate::tag::offload::after_post(&mut self.ifaces, &mut self.st.tag_family(), key);
        }
        (key, gen)
    }

    /// Fails receive `key` (generation `gen`), just posted, with the receive failure in force.
    #[cold]
    #[inline(never)]
    fn tag_recv_refuse(&mut self, key: usize, gen: u32) {
        if let Some(e) = self.st.tag.recv_failure.clone() {
            self.st.tag_family().unpost(key, gen, e);
        }
    }

    /// Fails every tag receive waiting for a message with `err`, and from now on every receive
    /// that finds no message waiting. For a client whose endpoints have no error handling
    /// (UCX's `UCP_ERR_HANDLING_MODE_NONE`, as MPI libraries use it): a tag receive names no
    /// peer, so one waiting for a peer that failed would otherwise wait for ever, and for such
    /// a client a failed peer ends the job. Gives how many receives failed now.
    pub fn fail_tag_recvs(&mut self, err: Error) -> usize {
        self.st.tag_family().fail_tag_recvs(err)
    }

    /// Looks for an unexpected message that fits; with `remove` it is taken off the queue, to
    /// receive with [`Worker::tag_msg_recv`] (dropping the [`Message`] discards it).
    #[inline]
    pub fn tag_probe(&mut self, tag: u64, mask: u64, remove: bool) -> Option<ProbeInfo> {
        if self.st.tag.msg_drops.any() {
            self.st.tag_family().discard_dropped_msgs();
        }
        let (mtag, uid) = self.st.tag.matcher.probe(tag, mask)?;
        let len = if uid & small::SMALL_UID != 0 {
            self.st
                .tag
                .small_unexp
                .get(uid)
                .map_or(0, |e| usize::from(e.len))
        } else {
            self.st.tag_family().unexp_len(uid as usize)
        };
        let msg = if remove {
            let got = self.st.tag.matcher.take_unexpected(tag, mask);
            debug_assert_eq!(got, Some(uid));
            Some(Message::new(
                self.st.worker_id(),
                uid as usize,
                &self.st.tag.msg_drops,
            ))
        } else {
            None
        };
        Some(ProbeInfo {
            tag: mtag,
            len,
            msg,
        })
    }

    /// Receives a message taken by a removing probe into `buf`. Another worker's message
    /// gives `InvalidParam` (and goes back to its worker, which discards it).
    pub fn tag_msg_recv(&mut self, buf: Vec<u8>, msg: Message) -> Result<Op> {
        let uid = self.msg_uid(msg)?;
        Ok(self
            .st
            .tag_family()
            .recv_unexp_now(RecvBuf::Owned(buf), uid as u64, 0, uid))
    }
}

/// The request of a send still running, or `None` for one that finished at once (its error,
/// if it failed). Only for sends that give no buffer back.
fn request_of(op: Op) -> Result<Option<Request>> {
    match op {
        Op::Pending(r) => Ok(Some(r)),
        Op::Done(c) => c.status.map(|()| None),
    }
}
