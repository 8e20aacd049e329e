//! Tag offload for rc_verbs, done by the transport in software: the receiving interface
//! matches arriving tagged messages against the receives posted to it, eager data lands in the
//! posted buffer, and a matched rendezvous is completed by the receiving interface with one
//! RDMA READ straight into the posted buffer.
//!
//! - **Wire** ([`wire`]): tagged messages are RC sends on the endpoint's queue pair, in order
//!   with its active messages, with a transport-private id byte (`0xe0`..`0xe4`) and a header;
//!   they carry receive credits in their immediate data like every active message.
//! - **Posted receives** ([`PostedRecvs`], shared with any transport that matches in software)
//!   wait in posting order; a tagged message takes the first one whose tag matches under its
//!   mask. The buffer must be registered with this device (its pieces need local keys for
//!   the READ); up to [`RECV_MAX_IOV`] pieces.
//! - **Eager**: a matched payload is copied once from the receive buffer into the posted
//!   buffer (the active-message path copies once too: `TagLimits::eager_saves_copy` is
//!   false); an unmatched one goes to `tag_unexp_eager` straight from the receive buffer.
//!   Larger than the posted buffer: it fills the buffer and completes with `Truncated`.
//! - **Rendezvous**: the sender announces address, length and rkey of one registered region
//!   and keeps the region's handle. A matched announcement makes the receiving interface post
//!   an RDMA READ of `min(length, capacity)` bytes into the posted pieces on the endpoint the
//!   announcement came on; when the READ completes the receive completes (with `Truncated`
//!   when the buffer was smaller) and an acknowledgement goes back, which completes the
//!   sender's `tag_rndv_zcopy`. Nothing above the transport takes part. An unmatched one (and
//!   every `tag_rndv_request`) goes to `tag_unexp_rndv` with the sender's address and a packed
//!   rc_verbs rkey, so the layer above can read the data itself and `tag_rndv_cancel` the
//!   sender's operation. The interface remembers the last unmatched announcements, and a
//!   `get_zcopy` of exactly one's data is split as below (`get`: with receives reposted as
//!   earlier ones complete, most announcements beat their receive).
//! - **Split rendezvous**: a matched rendezvous of at least `RUCX_RC_TM_RNDV_SPLIT` bytes
//!   (default 32k; `inf` turns it off) into a one-piece buffer, when the endpoint has two send
//!   slots and a credit, is moved in two halves at once: the receiver asks the sender
//!   ([`wire::PutReqHdr`]) to RDMA-WRITE the tail (from the first page boundary at or below
//!   the middle) into the posted buffer and READs the head itself; the sender posts the
//!   WRITE and then its report ([`wire::PutDoneHdr`], which RC delivers after the written
//!   data). The receive completes, and the acknowledgement goes, when the READ has completed
//!   and the report has come. A software RDMA device (rxe) does a READ's work on the reader's
//!   side (the responder runs from the READ request's arrival) and a WRITE's on the writer's,
//!   in its `ibv_post_send`: on one host the two halves are copied by two CPUs in parallel,
//!   where a whole READ keeps one busy. A sender that no longer has the operation (canceled)
//!   writes nothing and reports failure; the receive then fails with `RemoteAccess`.
//! - **Back-pressure**: a READ or acknowledgement that finds no send slot (or no credit) waits
//!   in a queue retried from progress; nothing is dropped.
//! - **Failures**: a failed endpoint completes its READs (receive with the endpoint's error)
//!   and its outstanding rendezvous operations (with the error) when the failure is reported;
//!   an endpoint dropped with a READ in flight completes that receive with `ConnectionReset`.
//!
//! ## Where a hardware TM-SRQ implementation plugs in
//! mlx5 devices (ConnectX-5 and later) match tags in the NIC: an SRQ created with
//! `ibv_create_srq_ex` of type `IBV_SRQT_TM` (capabilities from `ibv_query_device_ex`:
//! `tm_caps.max_num_tags`, `max_ops`, `max_sge`, `max_rndv_hdr_size`, flag `IBV_TM_CAP_RC`),
//! receives posted as tag-list operations with `ibv_post_srq_ops` (`IBV_WR_TAG_ADD` gives a
//! handle, `IBV_WR_TAG_DEL` cancels by it, `IBV_WR_TAG_SYNC` after unexpected messages), sends
//! carrying the hardware's tag header (`struct ibv_tmh`: opcode, application context, tag;
//! rendezvous adds `struct ibv_rvh`: address, rkey, length) via `IBV_WR_SEND`/`_WITH_IMM` with
//! the header as the first scatter entry, and completions `IBV_WC_TM_ADD`, `IBV_WC_TM_DEL`,
//! `IBV_WC_TM_RECV` (flag `IBV_WC_TM_MATCH` / `IBV_WC_TM_DATA_VALID`) and `IBV_WC_TM_NO_TAG`
//! for unexpected ones; the NIC itself runs the READ of a matched rendezvous. In this module
//! that replaces exactly three things, and nothing outside it changes (the `Iface` and
//! `Endpoint` tag methods, `TagLimits` and ucp stay as they are):
//! 1. `TagState::post` / `TagState::cancel`: a tag-list operation on the TM-SRQ instead of
//!    [`PostedRecvs`] (a cancel completes on its `TM_DEL` completion; the "already matched"
//!    answer is the `Busy` given here for a receive with a READ in flight);
//! 2. `RcVerbsIface::tag_arrived` becomes the handling of the TM completions of the receive
//!    CQ (the endpoints' QPs then use the TM-SRQ as their SRQ, so the receive buffers move
//!    from the endpoints to the interface);
//! 3. the sends in `send.rs` encode `ibv_tmh`/`ibv_rvh` (big-endian) instead of
//!    [`wire::EagerHdr`]/[`wire::RndvHdr`], and the acknowledgement becomes the NIC's.
//!
//! The FFI would need `ibv_query_device_ex`, `ibv_create_srq_ex`, the `ibv_post_srq_ops` and
//! `ibv_create_qp_ex` entries of the extended context, and the `ibv_wc.tm_info` fields.
//! Soft-RoCE has no TM-SRQ, so this software matcher is what runs there (issue 7 tracks the
//! hardware path).
//!
//! Nothing here allocates per message: the queues and tables keep their capacity; a posted
//! receive holds clones of its memory handles (reference counts).
//!
//! The state all this works on (`TagState`) is in `state.rs`.
//!
//! [`PostedRecvs`]: crate::tag_posted::PostedRecvs
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

mod get;
mod send;
pub(super) mod state;
pub mod wire;

pub use state::UNEXP_REMEMBERED;
pub use state::{MAX_POSTED, MAX_RNDV_OPS, RECV_MAX_IOV};

use super::ffi::{self, ibv_send_wr, ibv_sge};
use super::iface::RcVerbsIface;
use super::state::{Inner, TxKind};
use super::wire::PackedRkey;
use crate::ep::TagRecvId;
use crate::iface::{EventSink, RndvRemote, TagRecvCancel};
use crate::md::Iov;
use crate::tag_posted::recv_result;
use state::{Read, RecvBuf, Tail};
use state::{Unexp, GET_SLOT};
use std::cell::RefCell;
use std::rc::Rc;
use ucs::{Error, Outcome, Result};
use wire::{
    AckHdr, EagerHdr, PutDoneHdr, PutReqHdr, RndvHdr, ACK_FAILED, ACK_OK, ID_TAG_ACK, ID_TAG_EAGER,
    ID_TAG_PUT_DONE, ID_TAG_PUT_REQ, ID_TAG_RNDV,
};

impl Inner {
    /// Posts the READ of matched rendezvous `slot`, or queues it when the endpoint has no send
    /// slot; completes it at once when there is nothing to read.
    fn tag_start_read(&mut self, slot: usize) {
        let Some(r) = self.tag.reads.get(slot) else {
            return;
        };
        let (key, gen, addr, rkey) = (r.key, r.gen, r.addr, r.rkey);
        let want = r.length.min(r.buf.capacity()) - r.put;
        let mut sges = [ibv_sge::default(); RECV_MAX_IOV];
        let n = r.buf.read_sges(want, &mut sges);
        let state = match self.ep(key, gen) {
            None => Err(Error::ConnectionReset(
                "the endpoint of a matched rendezvous was closed".into(),
            )),
            Some(ep) => match &ep.failed {
                Some(e) => Err(e.clone()),
                None => Ok(ep.sq_avail > 0),
            },
        };
        match state {
            Err(e) => self.tag_read_finish(slot, Some(e)),
            Ok(_) if want == 0 => self.tag_read_finish(slot, None),
            Ok(false) => {
                self.tag.reads_waiting.push_back(slot);
                self.eps_attention = true;
            }
            Ok(true) => {
                let mut wr = ibv_send_wr {
                    sg_list: sges.as_mut_ptr(),
                    num_sge: n as i32,
                    opcode: ffi::IBV_WR_RDMA_READ,
                    ..Default::default()
                };
                wr.set_rdma(addr, rkey);
                if let Err(e) = self.post(key, &mut wr, TxKind::TagRead(slot as u32), true) {
                    self.fail_ep(key, e.clone());
                    self.tag_read_finish(slot, Some(e));
                }
            }
        }
    }

    /// Finishes matched rendezvous `slot` (its READ completed, failed, or had nothing to
    /// read): queues the receive's completion and, on success, the acknowledgement.
    pub(super) fn tag_read_finish(&mut self, slot: usize, mut err: Option<Error>) {
        if slot as u32 & GET_SLOT != 0 {
            return self.tag_get_read_done((slot as u32 & !GET_SLOT) as usize, err);
        }
        let Some(r) = self.tag.reads.get_mut(slot) else {
            return;
        };
        if err.is_none() {
            match r.tail {
                Tail::Awaited | Tail::AwaitedReadDone => {
                    r.tail = Tail::AwaitedReadDone;
                    return;
                }
                Tail::Failed => {
                    err = Some(Error::RemoteAccess(
                        "the sender could not write its part of the rendezvous".into(),
                    ));
                }
                Tail::Settled => {}
            }
        }
        let r = self.tag.reads.remove(slot);
        let res = match err {
            Some(e) => Err(e),
            None => {
                self.tag_send_ack(
                    r.key,
                    r.gen,
                    AckHdr {
                        op_id: r.op_id,
                        status: ACK_OK,
                    },
                );
                recv_result(r.length, r.buf.capacity())
            }
        };
        self.tag.done.push_back((r.ctx, r.tag, 0, r.length, res));
        self.eps_attention = true;
    }

    /// Sends an acknowledgement on endpoint `key` now, or queues it until a send slot and a
    /// credit are free. Dropped when the endpoint is gone or failed (its sender then learns of
    /// the failure from its own endpoint).
    fn tag_send_ack(&mut self, key: usize, gen: u16, ack: AckHdr) {
        let ready = match self.ep(key, gen) {
            Some(ep) if ep.failed.is_none() => ep.sq_avail > 0 && ep.am_credits() > 0,
            _ => return,
        };
        if !ready {
            self.tag.acks_owed.push_back((key, gen, ack));
            self.eps_attention = true;
            return;
        }
        let b = ack.encode();
        if let Err(e) = self.post_inline_am(key, &b) {
            self.fail_ep(key, e);
        }
    }

    /// How many bytes at the end of matched rendezvous of `want` bytes into `buf` on endpoint
    /// `key`/`gen` the sender should write (0: the READ takes it all). Split when the
    /// rendezvous is at least `RUCX_RC_TM_RNDV_SPLIT` long, the buffer is one piece and the
    /// write request can go now (a send slot for it and one for the READ, and a credit).
    fn tag_split_len(&mut self, key: usize, gen: u16, want: usize, buf: &RecvBuf) -> usize {
        if (want as u64) < self.cfg.tm_split || buf.n != 1 {
            return 0;
        }
        match self.ep(key, gen) {
            Some(ep) if ep.failed.is_none() && ep.sq_avail >= 2 && ep.am_credits() > 0 => {}
            _ => return 0,
        }
        // The head ends on a page boundary (READ responses then fill whole pages).
        let head = (want / 2) & !4095;
        if head == 0 {
            0
        } else {
            want - head
        }
    }

    /// Asks the sender of matched rendezvous `slot` to write the last `put` bytes (the
    /// resources were checked by [`Self::tag_split_len`]).
    fn tag_send_put_req(&mut self, slot: usize) -> Result<()> {
        let Some(r) = self.tag.reads.get(slot) else {
            return Ok(());
        };
        let head = r.length.min(r.buf.capacity()) - r.put;
        let h = PutReqHdr {
            op_id: r.op_id,
            offset: head as u64,
            length: r.put as u64,
            addr: r.buf.sges[0].addr + head as u64,
            rkey: r.buf.rkey0,
            slot: slot as u32,
        };
        let key = r.key;
        let b = h.encode();
        self.post_inline_am(key, &b)
    }

    /// Posts `msg` inline as an active message on `key` (the caller checked slot and credit).
    pub(super) fn post_inline_am(&mut self, key: usize, msg: &[u8]) -> Result<()> {
        let mut sge = ibv_sge {
            addr: msg.as_ptr() as u64,
            length: msg.len() as u32,
            lkey: 0,
        };
        let mut wr = ibv_send_wr {
            sg_list: &mut sge,
            num_sge: 1,
            send_flags: ffi::IBV_SEND_INLINE,
            ..Default::default()
        };
        self.post_am(key, &mut wr, TxKind::Plain, false)
    }

    /// As the sender, writes the tail a receiver asked for and reports it, or reports that it
    /// cannot; `false` when the endpoint has no two send slots and a credit now (retry later).
    fn tag_try_put(&mut self, key: usize, gen: u16, h: PutReqHdr) -> bool {
        match self.ep(key, gen) {
            Some(ep) if ep.failed.is_none() => {
                if ep.sq_avail < 2 || ep.am_credits() == 0 {
                    return false;
                }
            }
            _ => return true,
        }
        let src = self
            .tag
            .op(h.op_id, key, gen)
            .filter(|o| h.length > 0 && h.offset.checked_add(h.length).is_some_and(|e| e <= o.len))
            .map(|o| (o.addr + h.offset, o.lkey));
        let mut status = ACK_FAILED;
        if let Some((addr, lkey)) = src {
            let local = ibv_sge {
                addr,
                length: h.length as u32,
                lkey,
            };
            let remote = (h.addr, h.rkey);
            if let Err(e) = self.post_rdma_write(key, local, remote, 0, TxKind::Plain, false) {
                self.fail_ep(key, e);
                return true;
            }
            status = ACK_OK;
        }
        let done = PutDoneHdr {
            op_id: h.op_id,
            slot: h.slot,
            status,
        }
        .encode();
        if let Err(e) = self.post_inline_am(key, &done) {
            self.fail_ep(key, e);
        }
        true
    }

    /// As the receiver, the sender's report on the tail of matched rendezvous `h.slot`.
    fn tag_put_done(&mut self, key: usize, gen: u16, h: PutDoneHdr) {
        if h.slot & GET_SLOT != 0 {
            let slot = (h.slot & !GET_SLOT) as usize;
            return self.tag_get_put_done(slot, key, gen, h.op_id, h.status == ACK_OK);
        }
        let slot = h.slot as usize;
        let Some(r) = self.tag.reads.get_mut(slot) else {
            return;
        };
        if r.op_id != h.op_id || r.key != key || r.gen != gen || !r.tail.awaited() {
            return;
        }
        let read_done = r.tail == Tail::AwaitedReadDone;
        r.tail = if h.status == ACK_OK {
            Tail::Settled
        } else {
            Tail::Failed
        };
        if read_done {
            self.tag_read_finish(slot, None);
        }
    }

    /// Retries the READs and acknowledgements that waited for send resources (one pass).
    fn tag_retry(&mut self) {
        for _ in 0..self.tag.reads_waiting.len() {
            let Some(slot) = self.tag.reads_waiting.pop_front() else {
                break;
            };
            self.tag_start_read(slot);
        }
        for _ in 0..self.tag.acks_owed.len() {
            let Some((key, gen, ack)) = self.tag.acks_owed.pop_front() else {
                break;
            };
            self.tag_send_ack(key, gen, ack);
        }
        for _ in 0..self.tag.gets_waiting.len() {
            let Some(slot) = self.tag.gets_waiting.pop_front() else {
                break;
            };
            self.tag_get_read_tail(slot);
        }
        for _ in 0..self.tag.puts_owed.len() {
            let Some((key, gen, h)) = self.tag.puts_owed.pop_front() else {
                break;
            };
            if !self.tag_try_put(key, gen, h) {
                self.tag.puts_owed.push_back((key, gen, h));
            }
        }
    }

    /// Endpoint `key`/`gen` failed with `err` (reported now): its rendezvous operations as a
    /// sender complete with the error; its waiting READs fail.
    pub(super) fn tag_ep_failed(&mut self, key: usize, gen: u16, err: &Error) {
        let t = &mut self.tag;
        let comps = &mut t.comps;
        t.ops.retain(|_, o| {
            let mine = o.key == key && o.gen == gen;
            if mine {
                comps.push_back((o.comp, Err(err.clone())));
            }
            !mine
        });
        t.acks_owed.retain(|a| !(a.0 == key && a.1 == gen));
        t.puts_owed.retain(|a| !(a.0 == key && a.1 == gen));
        if !t.reads_waiting.is_empty() {
            self.eps_attention = true;
        }
        // Split rendezvous whose READ completed wait for a report that will not come.
        let mut stuck = [0usize; MAX_POSTED];
        let mut n = 0;
        for (slot, r) in self.tag.reads.iter() {
            if r.key == key && r.gen == gen && r.tail == Tail::AwaitedReadDone && n < MAX_POSTED {
                stuck[n] = slot;
                n += 1;
            }
        }
        for &slot in &stuck[..n] {
            self.tag_read_finish(slot, Some(err.clone()));
        }
        self.tag_gets_ep_failed(key, gen, err);
    }

    /// Endpoint `key`/`gen` is being dropped: its rendezvous operations go without completion
    /// (the caller dropped it), READs on it fail, owed acknowledgements are dropped.
    pub(super) fn tag_ep_gone(&mut self, key: usize, gen: u16) {
        self.tag_gets_ep_gone(key, gen);
        self.tag.ops.retain(|_, o| !(o.key == key && o.gen == gen));
        self.tag.acks_owed.retain(|a| !(a.0 == key && a.1 == gen));
        self.tag.puts_owed.retain(|a| !(a.0 == key && a.1 == gen));
        let mut gone = [0usize; MAX_POSTED];
        let mut n = 0;
        for (slot, r) in self.tag.reads.iter() {
            if r.key == key && r.gen == gen && n < MAX_POSTED {
                gone[n] = slot;
                n += 1;
            }
        }
        self.tag.reads_waiting.retain(|s| !gone[..n].contains(s));
        for &slot in &gone[..n] {
            self.tag_read_finish(
                slot,
                Some(Error::ConnectionReset(
                    "the endpoint of a matched rendezvous was closed".into(),
                )),
            );
        }
    }
}

impl RcVerbsIface {
    /// A tagged message arrived on endpoint `key`/`gen` (seam 2 of the module docs): matched
    /// against the posted receives, or reported unexpected. Gives the events delivered.
    #[inline(never)]
    pub(super) fn tag_arrived<S: EventSink>(
        &mut self,
        key: usize,
        gen: u16,
        data: &[u8],
        sink: &mut S,
    ) -> usize {
        let r = match data[0] {
            ID_TAG_EAGER => self.tag_eager_arrived(data, sink),
            ID_TAG_RNDV => self.tag_rndv_arrived(key, gen, data, sink),
            ID_TAG_ACK => self.tag_ack_arrived(key, gen, data, sink),
            ID_TAG_PUT_REQ => PutReqHdr::decode(data).map(|h| {
                let mut inner = self.inner.borrow_mut();
                if !inner.tag_try_put(key, gen, h) {
                    inner.tag.puts_owed.push_back((key, gen, h));
                    inner.eps_attention = true;
                }
                0
            }),
            ID_TAG_PUT_DONE => PutDoneHdr::decode(data).map(|h| {
                self.inner.borrow_mut().tag_put_done(key, gen, h);
                0
            }),
            id => Err(Error::Wire(format!("unknown rc_verbs message id {id:#x}"))),
        };
        r.unwrap_or_else(|e| {
            tracing::warn!(%e, "malformed rc_verbs tag message dropped");
            0
        })
    }

    fn tag_eager_arrived<S: EventSink>(&mut self, data: &[u8], sink: &mut S) -> Result<usize> {
        let (h, payload) = EagerHdr::decode(data)?;
        let matched = self.inner.borrow_mut().tag.posted.take_match(h.tag);
        match matched {
            Some(p) => {
                p.buf.scatter(payload);
                let res = recv_result(payload.len(), p.buf.capacity());
                sink.tag_recv_done(p.ctx, h.tag, h.imm, payload.len(), res);
            }
            None => sink.tag_unexp_eager(h.tag, h.imm, payload),
        }
        Ok(1)
    }

    fn tag_rndv_arrived<S: EventSink>(
        &mut self,
        key: usize,
        gen: u16,
        data: &[u8],
        sink: &mut S,
    ) -> Result<usize> {
        let (h, header) = RndvHdr::decode(data)?;
        let length = usize::try_from(h.length)
            .map_err(|_| Error::Wire("rendezvous longer than the address space".into()))?;
        if h.op_id != 0 {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            if let Some(p) = inner.tag.posted.take_match(h.tag) {
                let want = length.min(p.buf.capacity());
                let put = inner.tag_split_len(key, gen, want, &p.buf);
                let slot = inner.tag.reads.insert(Read {
                    ctx: p.ctx,
                    tag: h.tag,
                    length,
                    addr: h.addr,
                    rkey: h.rkey,
                    op_id: h.op_id,
                    key,
                    gen,
                    buf: p.buf,
                    put,
                    tail: Tail::new(put),
                });
                if put > 0 {
                    if let Err(e) = inner.tag_send_put_req(slot) {
                        inner.fail_ep(key, e.clone());
                        inner.tag_read_finish(slot, Some(e));
                        return Ok(0);
                    }
                }
                inner.tag_start_read(slot);
                return Ok(0);
            }
        }
        if h.op_id != 0 {
            self.inner.borrow_mut().tag_remember_unexp(Unexp {
                key,
                gen,
                addr: h.addr,
                rkey: h.rkey,
                length: h.length,
                op_id: h.op_id,
            });
        }
        let packed = PackedRkey {
            rkey: h.rkey,
            base: h.addr,
            len: h.length,
        }
        .encode();
        let rkey: &[u8] = if h.op_id != 0 && h.length != 0 && h.addr != 0 {
            &packed
        } else {
            &[]
        };
        sink.tag_unexp_rndv(
            h.tag,
            RndvRemote {
                header,
                remote_addr: h.addr,
                length,
                rkey,
            },
        );
        Ok(1)
    }

    fn tag_ack_arrived<S: EventSink>(
        &mut self,
        key: usize,
        gen: u16,
        data: &[u8],
        sink: &mut S,
    ) -> Result<usize> {
        let ack = AckHdr::decode(data)?;
        let op = self.inner.borrow_mut().tag.take_op(ack.op_id, key, gen);
        let Some(op) = op else {
            // A canceled operation (the layer above fetched the data itself).
            return Ok(0);
        };
        let res = if ack.status == ACK_OK {
            Ok(0)
        } else {
            Err(Error::RemoteAccess(
                "the receiver could not read the rendezvous data".into(),
            ))
        };
        sink.completion(op.comp, res);
        Ok(1)
    }

    /// Reports queued tag completions and retries waiting READs and acknowledgements.
    pub(super) fn progress_tag<S: EventSink>(&mut self, sink: &mut S) -> usize {
        self.inner.borrow_mut().tag_retry();
        let mut count = 0;
        loop {
            let next = self.inner.borrow_mut().tag.done.pop_front();
            let Some((ctx, tag, imm, len, res)) = next else {
                break;
            };
            sink.tag_recv_done(ctx, tag, imm, len, res);
            count += 1;
        }
        loop {
            let next = self.inner.borrow_mut().tag.comps.pop_front();
            let Some((comp, res)) = next else {
                break;
            };
            sink.completion(comp, res);
            count += 1;
        }
        let mut inner = self.inner.borrow_mut();
        if inner.tag.has_work() {
            inner.eps_attention = true;
        }
        count
    }

    /// `tag_recv_zcopy`.
    pub(super) fn tag_post(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        let mut inner = self.inner.borrow_mut();
        let md_name = inner.md_name;
        inner.tag.post(tag, mask, iov, ctx, md_name)
    }

    /// How many gets of unexpected rendezvous were split (`get.rs`; for tests and
    /// diagnostics).
    pub fn tag_split_gets(&self) -> u64 {
        self.inner.borrow().tag.split_gets
    }

    /// A handle that cancels this interface's posted receives from anywhere.
    pub(super) fn canceler(&self) -> TagCanceler {
        TagCanceler(self.inner.clone())
    }
}

/// Cancels posted receives of an rc_verbs interface from anywhere, including inside a progress
/// callback of any interface (rc_verbs holds no borrow of its state across a callback).
#[derive(Clone)]
pub struct TagCanceler(Rc<RefCell<Inner>>);

impl std::fmt::Debug for TagCanceler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("rc_verbs::TagCanceler")
    }
}

impl TagRecvCancel for TagCanceler {
    fn cancel(&self, ctx: TagRecvId, force: bool) -> Result<()> {
        let Ok(mut g) = self.0.try_borrow_mut() else {
            return Err(Error::Busy(
                "the rc_verbs interface is inside a call and holds its state".into(),
            ));
        };
        if g.tag.cancel(ctx, force)? {
            g.eps_attention = true;
        }
        Ok(())
    }
}
