//! Tag offload, sending side: eager messages as tagged frames (`tag_eager_bcopy`/`_zcopy`),
//! rendezvous by `tag_rndv_zcopy` with the RTS as header, and sends from a [`MemMap`]'s memory
//! announced in place; the bookkeeping that ends them (ATS, transport completion, cancel).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use super::state::MappedSend;
use super::COMP_TM;
use crate::request::{Completion, Op};
use crate::rma::{Keep, MemMap};
use crate::rndv::stages::RndvSend;
use crate::wire::{am_id, RemoteBuf, RtsHdr};
use crate::wireup::TM_THRESH;
use crate::worker::ep::connecting;
use crate::worker::pending::SendMade;
use crate::worker::req::{comp_id, ReqKind, SendData, SendStage};
use crate::worker::state::TagFamily;
use crate::worker::EpHandle;
use std::ptr::NonNull;
use ucs::{Error, Outcome, Result};
use uct::Endpoint as _;
use uct::MemoryDomain as _;
use uct::{IfaceFlags, Iov, MdFlags};

impl TagFamily<'_> {
    /// Sends an eager message by tag offload when the endpoint's lane offers it and the size
    /// fits; gives the data back otherwise (nothing was sent).
    pub(crate) fn tm_send<'d>(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'d>,
        rndv: bool,
    ) -> Result<std::result::Result<Op, SendData<'d>>> {
        if !self.tm_enabled() {
            return Ok(Err(data));
        }
        if rndv {
            return self.tm_rndv_send(idx, tag, data);
        }
        let len = data.as_slice().len();
        let uuid = self.worker_uuid();
        let Some((li, uep, info)) = self.am_lane_mut(idx) else {
            return Ok(Err(data));
        };
        let (t, flags) = (info.attr.tag, info.attr.flags);
        if len < TM_THRESH || !flags.contains(IfaceFlags::TAG_EAGER_BCOPY) || !t.eager_saves_copy {
            return Ok(Err(data));
        }
        if len <= t.eager_max_bcopy {
            let src = data.as_slice();
            let out = uep.tag_eager_bcopy(tag, uuid, |b| {
                crate::tag::copy::copy_payload(&mut b[..len], src);
                len
            })?;
            if out.is_no_resource() {
                return Ok(Err(data));
            }
            self.own().tm.sent += 1;
            self.ep_note_tx(idx);
            let buf = match data {
                SendData::Owned(v) => Some(v),
                SendData::Borrowed(_) | SendData::Raw(_) => None,
            };
            return Ok(Ok(Op::Done(Completion {
                buf,
                tag,
                ..Completion::ok()
            })));
        }
        if !flags.contains(IfaceFlags::TAG_EAGER_ZCOPY) || len > t.eager_max_zcopy {
            return Ok(Err(data));
        }
        let key = self.new_send(idx, tag, data, false);
        let wire = self.wire_id(key);
        let s = self.send_mut(key);
        let p = NonNull::new(s.data.as_mut_ptr()).ok_or_else(|| Error::NoMemory("empty".into()))?;
        // SAFETY: the request owns `data` and keeps it unchanged until the send completes;
        // `finish` drops the registration before it gives the vector back.
        let memh = unsafe { self.md(li).mem_reg(p, len) }?;
        let l = self.ep_mut(idx).lanes_mut().ok_or_else(connecting)?;
        let out = l.am_ep_mut().tag_eager_zcopy(
            tag,
            uuid,
            &[Iov::whole(&memh)],
            comp_id(COMP_TM, wire),
        )?;
        match out {
            Outcome::Done(()) => {
                self.own().tm.sent += 1;
                self.finish(key, Ok(()));
            }
            Outcome::InProgress => {
                self.own().tm.sent += 1;
                self.send_rndv(key).memh = Some(memh);
                self.send_mut(key).offset = len;
            }
            Outcome::NoResource => {
                // Nothing left: the ordinary path sends it (in order, through the pending queue).
                let id = self.new_msg_id();
                self.send_mut(key).msg_id = id;
                self.queue_req(idx, key);
                return Ok(Ok(self.op_of(key)));
            }
        }
        self.ep_note_tx(idx);
        Ok(Ok(self.op_of(key)))
    }

    /// Completion of a `tag_eager_zcopy` send, or of a `tag_rndv_zcopy` the receiver's
    /// transport pulled.
    pub(crate) fn tm_send_done(&mut self, key: usize, res: Result<()>) {
        let wire = self.wire_id(key);
        if let Some(i) = self.own().tm.rndv_ops.iter().position(|o| o.0 == wire) {
            self.own().tm.rndv_ops.swap_remove(i);
            self.own().tm.matched_rndv += 1;
        }
        self.finish(key, res);
    }

    /// The receiver took a tag-offload rendezvous in software (unexpected): its ATS finishes the
    /// send, and the transport's operation is canceled.
    pub(crate) fn tm_rndv_ats(&mut self, key: usize, wire: u64) {
        let Some(i) = self.own().tm.rndv_ops.iter().position(|o| o.0 == wire) else {
            return;
        };
        let (_, op, _memh) = self.own().tm.rndv_ops.swap_remove(i);
        let ep = self.req_get(key).and_then(|r| r.ep());
        if let Some(l) = ep
            .and_then(|idx| self.ep_get_mut(idx))
            .and_then(|e| e.lanes_mut())
        {
            if let Err(e) = l.am_ep_mut().tag_rndv_cancel(op) {
                tracing::debug!("tag rendezvous {op} already gone: {e}");
            }
        }
    }

    /// A send request finishes: a transport rendezvous still outstanding for it (the receiver
    /// took it in software, by get, put or pipeline) is canceled, so the transport forgets the
    /// memory before it goes back to the caller. Called by `State::finish` for a send marked
    /// `tm_held`, which it clears.
    pub(crate) fn tm_send_finishing(&mut self, key: usize) {
        self.send_mut(key).tm_held = false;
        let wire = self.wire_id(key);
        self.tm_rndv_ats(key, wire);
        // The transport forgot the memory: the segment may go.
        if let Some(i) = self.own().tm.mapped.iter().position(|m| m.wire == wire) {
            self.own().tm.mapped.swap_remove(i);
        }
    }

    /// Sends `len` bytes at `offset` of `map` (see [`Worker::tag_send_mapped`](crate::Worker::tag_send_mapped)). A rendezvous
    /// from a shared segment announces the data in place: by `tag_rndv_zcopy` with the
    /// segment's own memory handle (the peer's interface then copies straight from the mapped
    /// segment into a posted receive), or by the software RTS with the RMA lane's registration
    /// of the segment. Everything else is sent like [`Worker::tag_send`](crate::Worker::tag_send) (a copy).
    /// `Worker::tag_send_mapped` sends these bytes by the eager-short step first: `len` bytes at
    /// `offset` of `map`. A bad range is an error, after that of a bad handle `h` (the order
    /// `Worker::tag_send_mapped` checks them in).
    #[inline(always)]
    pub(crate) fn mapped_bytes<'m>(
        &self,
        h: EpHandle,
        map: &'m MemMap,
        offset: usize,
        len: usize,
    ) -> Result<&'m [u8]> {
        let ptr = match map.range(offset, len) {
            Ok(p) => p,
            Err(e) => {
                self.ep_idx(h)?;
                return Err(e);
            }
        };
        // SAFETY: `range` checked that the bytes lie in the mapping, which the caller borrows
        // for as long as the slice; the eager short path only copies them before it returns.
        Ok(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) })
    }

    /// The rest of `Worker::tag_send_mapped`, after its eager-short step gave false.
    pub(crate) fn tag_send_mapped(
        &mut self,
        idx: usize,
        tag: u64,
        map: &MemMap,
        offset: usize,
        len: usize,
    ) -> Result<SendMade> {
        let ptr = map.range(offset, len)?;
        self.ep_usable(idx)?;
        let ready = self.ep_ready(idx);
        let rndv = self
            .ep(idx)
            .proto()
            .is_some_and(|p| len >= p.tag_rndv_thresh);
        if ready && !rndv && self.tm_enabled() && len >= TM_THRESH {
            if let Some(op) = self.tm_eager_mapped(idx, tag, map, ptr, len)? {
                return Ok(SendMade::Done(op));
            }
        }
        let keep = match (ready && rndv).then(|| map.keep_alive()).flatten() {
            Some(k) => k,
            None => {
                // SAFETY: `range` checked that the bytes lie in the mapping, which the caller
                // borrows for this call; they are only copied from here.
                let data = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) };
                return self.tag_send(idx, tag, SendData::Borrowed(data), false);
            }
        };
        self.tm_mapped_rndv(idx, tag, map, ptr, len, keep)
            .map(SendMade::Done)
    }

    /// The rendezvous of [`TagFamily::tag_send_mapped`]: an RTS announcing the `len` bytes at `ptr`
    /// in place, by `tag_rndv_zcopy` when the AM lane offloads rendezvous, else as a software
    /// RTS; `keep` holds the memory until the request finishes.
    fn tm_mapped_rndv(
        &mut self,
        idx: usize,
        tag: u64,
        map: &MemMap,
        ptr: NonNull<u8>,
        len: usize,
        keep: Keep,
    ) -> Result<Op> {
        let l = self.ep(idx).lanes().ok_or_else(connecting)?;
        let li = l.am_iface();
        let rma = l
            .rma()
            .map(|r| l.iface_of(r))
            .and_then(|r| map.reg_of(self.iface(r).tl_name).map(|m| (r, m.clone())));
        let a = &self.iface(li).attr;
        // The handle the AM lane's transport reads the data through: the shared segment
        // itself, or the heap block's registration with that transport.
        let am_memh = keep.handle_for(map, self.iface(li).tl_name);
        let offload = self.tm_enabled()
            && a.flags.contains(IfaceFlags::TAG_RNDV_ZCOPY)
            && len <= a.tag.rndv_max_zcopy
            && am_memh.is_some();
        let max_hdr = a.tag.rndv_max_hdr;
        let am_get = a.flags.contains(IfaceFlags::GET_ZCOPY);
        let key = self.new_send(idx, tag, SendData::Borrowed(&[]), false);
        let wire = self.wire_id(key);
        self.send_mut(key).tm_held = true;
        self.own().tm.mapped.push(MappedSend {
            wire,
            addr: ptr.as_ptr() as usize,
            len,
            _keep: keep,
        });
        // The RTS describes the data with the AM lane's key when that lane's transport reads
        // it in place (a shared segment the receiver maps: one copy, no system call), else for
        // the RMA lane, as the software rendezvous does.
        let in_place = self.md(li).attr().flags.contains(MdFlags::RKEY_PTR) && am_get;
        let mut am_key = am_memh
            .as_ref()
            .filter(|_| in_place)
            .map(|m| self.rts_rkey(Some(li), Some(m)));
        if let Some(("", scratch)) = am_key {
            // Packing failed: the key buffer goes back for the RMA lane's key.
            self.put_rkey_scratch(scratch);
            am_key = None;
        }
        let (tl, rkey) = match (am_key, &rma) {
            (Some(k), _) => k,
            (None, Some((r, m))) => self.rts_rkey(Some(*r), Some(m)),
            (None, None) => self.rts_rkey(None, None),
        };
        let mut hdr = self.take_scratch();
        hdr.clear();
        if offload {
            hdr.extend_from_slice(&self.worker_uuid().to_le_bytes());
        }
        RtsHdr {
            tag,
            sreq: self.peer_id(idx, key),
            len: len as u64,
            buf: RemoteBuf {
                addr: ptr.as_ptr() as u64,
                tl,
                rkey: &rkey,
            },
        }
        .encode(&mut hdr);
        self.put_rkey_scratch(rkey);
        let out = if !offload {
            self.send_ctl_now(idx, am_id::RTS, &hdr)
        } else if let (true, Some(memh)) = (hdr.len() <= max_hdr, am_memh) {
            let off = ptr.as_ptr() as usize - memh.addr() as usize;
            self.ep_mut(idx)
                .lanes_mut()
                .ok_or_else(connecting)
                .and_then(|l| {
                    let iov = Iov::new(&memh, off, len)?;
                    l.am_ep_mut()
                        .tag_rndv_zcopy(tag, &hdr, &[iov], comp_id(COMP_TM, wire))
                })
                .map(|o| match o {
                    Outcome::Done(op) => {
                        self.send_mut(key).tm_held = true;
                        self.own().tm.rndv_ops.push((wire, op, memh.clone()));
                        self.own().tm.sent_rndv += 1;
                        true
                    }
                    // `InProgress` carries no operation id: the ordinary path.
                    Outcome::InProgress | Outcome::NoResource => false,
                })
        } else {
            Ok(false)
        };
        self.put_scratch(hdr);
        let sent = match out {
            Ok(sent) => sent,
            Err(e) => {
                // Nothing went out: forget the request.
                self.own().tm.mapped.pop();
                let r = self.remove_req(key);
                if let ReqKind::Send(s) = r.kind {
                    s.data.into_vec().into_iter().for_each(|v| self.put_buf(v));
                }
                return Err(e);
            }
        };
        if !sent {
            // Back-pressure: the ordinary path sends a copy later, in order.
            self.tm_mapped_materialize(key);
            let id = self.new_msg_id();
            self.send_mut(key).msg_id = id;
            self.queue_req(idx, key);
            return Ok(self.op_of(key));
        }
        if !offload {
            let id = self.new_msg_id();
            self.send_mut(key).msg_id = id;
        }
        self.own().tm.sent_mapped += 1;
        self.stats_mut().rndv_rts += 1;
        if let Some((_, m)) = rma {
            self.send_rndv(key).memh = Some(m);
        }
        let s = self.send_mut(key);
        s.rts_sent = true;
        s.stage = SendStage::Rndv(RndvSend::WaitRndv);
        self.ep_note_tx(idx);
        Ok(self.op_of(key))
    }

    /// An eager message from mapped memory by `tag_eager_zcopy` in place, where the AM lane's
    /// transport receives eager messages straight into posted buffers and the size is above
    /// its bcopy limit: the transport reads the mapping through its registration (or the
    /// shared segment's handle), and the request keeps the memory alive until the transport is
    /// done. `None`: not applicable, or back-pressure; the caller sends a copy.
    fn tm_eager_mapped(
        &mut self,
        idx: usize,
        tag: u64,
        map: &MemMap,
        ptr: NonNull<u8>,
        len: usize,
    ) -> Result<Option<Op>> {
        let Some(l) = self.ep(idx).lanes() else {
            return Ok(None);
        };
        let li = l.am_iface();
        let a = &self.iface(li).attr;
        if !a.flags.contains(IfaceFlags::TAG_EAGER_ZCOPY)
            || !a.tag.eager_saves_copy
            || len <= a.tag.eager_max_bcopy
            || len > a.tag.eager_max_zcopy
        {
            return Ok(None);
        }
        let Some(keep) = map.keep_alive() else {
            return Ok(None);
        };
        let Some(memh) = keep.handle_for(map, self.iface(li).tl_name) else {
            return Ok(None);
        };
        let iov = Iov::new(&memh, ptr.as_ptr() as usize - memh.addr() as usize, len)?;
        let key = self.new_send(idx, tag, SendData::Borrowed(&[]), false);
        let wire = self.wire_id(key);
        let uuid = self.worker_uuid();
        let out = match self.ep_mut(idx).lanes_mut() {
            Some(l) => l
                .am_ep_mut()
                .tag_eager_zcopy(tag, uuid, &[iov], comp_id(COMP_TM, wire)),
            None => Ok(Outcome::NoResource),
        };
        match out {
            Ok(Outcome::Done(())) => {
                self.own().tm.sent += 1;
                self.finish(key, Ok(()));
            }
            Ok(Outcome::InProgress) => {
                self.own().tm.sent += 1;
                self.send_mut(key).tm_held = true;
                self.own().tm.mapped.push(MappedSend {
                    wire,
                    addr: ptr.as_ptr() as usize,
                    len,
                    _keep: keep,
                });
                self.send_rndv(key).memh = Some(memh);
                self.send_mut(key).offset = len;
            }
            Ok(Outcome::NoResource) | Err(_) => {
                // Nothing went out: forget the request; the caller sends a copy (or reports
                // the error the ordinary path meets).
                let r = self.remove_req(key);
                if let ReqKind::Send(s) = r.kind {
                    s.data.into_vec().into_iter().for_each(|v| self.put_buf(v));
                }
                return Ok(None);
            }
        }
        self.ep_note_tx(idx);
        Ok(Some(self.op_of(key)))
    }

    /// Before a send request reads its own data (the receiver asked for put or pipelined
    /// active messages, or the RTS met back-pressure): a send from a mapped segment copies the
    /// data into the request, which then proceeds like any other send.
    pub(crate) fn tm_mapped_materialize(&mut self, key: usize) {
        if self.own().tm.mapped.is_empty() {
            return;
        }
        let wire = self.wire_id(key);
        let Some(i) = self.own().tm.mapped.iter().position(|m| m.wire == wire) else {
            return;
        };
        let m = self.own().tm.mapped.swap_remove(i);
        let s = self.send_mut(key);
        // SAFETY: `m._keep` keeps the memory alive, and `addr..addr + len` was checked to lie
        // inside it when the send started.
        let src = unsafe { std::slice::from_raw_parts(m.addr as *const u8, m.len) };
        s.data.copy_from(src);
        // The registration was of the segment, not of this copy.
        s.drop_memh();
    }

    /// Rendezvous by tag offload: the RTS travels as the header of `tag_rndv_zcopy`; a receive
    /// the peer's transport matched gets the data straight into its buffer (no ATS); an
    /// unexpected one reaches the peer's ucp as an ordinary RTS (get + ATS, then cancel here).
    fn tm_rndv_send<'d>(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'d>,
    ) -> Result<std::result::Result<Op, SendData<'d>>> {
        let len = data.as_slice().len();
        let Some(l) = self.ep(idx).lanes() else {
            return Ok(Err(data));
        };
        let li = l.am_iface();
        let rma_li = l.rma_iface();
        let a = &self.iface(li).attr;
        // Sizes ucp's own rendezvous moves better than the transport's (the AM pipeline's
        // range, or every size where ucp reads in steps: see `ProtoConfig::tm_rndv_min`) go by
        // the ordinary RTS.
        let pipelined = self.ep(idx).proto().is_some_and(|p| len < p.tm_rndv_min);
        if !a.flags.contains(IfaceFlags::TAG_RNDV_ZCOPY)
            || len == 0
            || len > a.tag.rndv_max_zcopy
            || pipelined
        {
            return Ok(Err(data));
        }
        let max_hdr = a.tag.rndv_max_hdr;
        let key = self.new_send(idx, tag, data, false);
        let wire = self.wire_id(key);
        let s = self.send_mut(key);
        let addr = s.data.as_ptr() as u64;
        let p = NonNull::new(s.data.as_mut_ptr()).ok_or_else(|| Error::NoMemory("empty".into()))?;
        // SAFETY: the request owns `data` and keeps it unchanged until it finishes; the
        // registration is dropped (and the transport operation canceled) before `finish` gives
        // the vector back.
        let memh = unsafe { self.md(li).mem_reg(p, len) }?;
        // The RTS describes the data for the RMA lane, as the software rendezvous does.
        let rma_memh = match rma_li {
            Some(r) if r == li => Some(memh.clone()),
            // SAFETY: as above.
            Some(r) => unsafe { self.md(r).mem_reg(p, len) }.ok(),
            None => None,
        };
        let (tl, rkey) = self.rts_rkey(rma_li, rma_memh.as_ref());
        let mut hdr = self.take_scratch();
        hdr.clear();
        hdr.extend_from_slice(&self.worker_uuid().to_le_bytes());
        RtsHdr {
            tag,
            sreq: self.peer_id(idx, key),
            len: len as u64,
            buf: RemoteBuf {
                addr,
                tl,
                rkey: &rkey,
            },
        }
        .encode(&mut hdr);
        self.put_rkey_scratch(rkey);
        let out = if hdr.len() <= max_hdr {
            match self.ep_mut(idx).lanes_mut() {
                Some(l) => l.am_ep_mut().tag_rndv_zcopy(
                    tag,
                    &hdr,
                    &[Iov::whole(&memh)],
                    comp_id(COMP_TM, wire),
                ),
                None => Ok(Outcome::NoResource),
            }
        } else {
            Ok(Outcome::NoResource)
        };
        self.put_scratch(hdr);
        match out? {
            Outcome::Done(op) => {
                self.own().tm.sent_rndv += 1;
                self.send_mut(key).tm_held = true;
                self.own().tm.rndv_ops.push((wire, op, memh));
                if let Some(m) = rma_memh {
                    self.send_rndv(key).memh = Some(m);
                }
                let s = self.send_mut(key);
                s.rts_sent = true;
                s.stage = SendStage::Rndv(RndvSend::WaitRndv);
                self.stats_mut().rndv_rts += 1;
                self.ep_note_tx(idx);
            }
            // `InProgress` carries no operation id (not what tcp answers): the ordinary path.
            Outcome::InProgress | Outcome::NoResource => {
                let id = self.new_msg_id();
                self.send_mut(key).msg_id = id;
                self.queue_req(idx, key);
            }
        }
        Ok(Ok(self.op_of(key)))
    }
}
