//! Rendezvous, sender side: RTS with the data's remote key, zero-copy eager, put_zcopy after an
//! RTR (then ATP), the AM pipeline, and ATS.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use super::{zcopy_run, ZcopyRun};
use crate::rndv::stages::RndvSend;
use crate::tag::stages::TagSend;
use crate::wire::{
    am_id, EagerFirstHdr, FragHdr, RemoteBuf, ReqHdr, RtrHdr, RtrMode, RtsHdr, UserAmHdr, NO_REQ,
    PREFIX_LEN,
};
use crate::wireup::RndvScheme;
use crate::worker::core_api::ReqStep;
use crate::worker::peer_req::Named;
use crate::worker::pending::am_send;
use crate::worker::pending::SendMade;
use crate::worker::req::{comp_id, ReqKind, SendData, SendStage, COMP_PUT, COMP_ZCOPY};
use crate::worker::state::{Core, RndvFamily};
use std::ptr::NonNull;
use ucs::{Error, Outcome, Result};
use uct::Endpoint as _;
use uct::MemoryDomain as _;
use uct::{IfaceFlags, Iov, MemHandle};

impl RndvFamily<'_> {
    /// Advances zero-copy or rendezvous send `key`, in `stage`, as far as resources allow (see
    /// `State::send_step`). Gives false on back-pressure.
    pub(crate) fn rndv_send_step(&mut self, key: usize, stage: RndvSend) -> Result<bool> {
        match stage {
            RndvSend::Put => self.put_step(key),
            RndvSend::Pipeline => self.pipeline_step(key),
            RndvSend::EagerZcopy => self.zcopy_step(key),
            RndvSend::PutFlushRetry => self.put_done(key),
            RndvSend::WaitRndv | RndvSend::WaitPutFlush => Ok(true),
        }
    }

    /// Makes an eager send straight from the caller's vector (registered with the AM lane's
    /// memory domain; bcopy fragments from it if registration fails), for the caller to start.
    pub(crate) fn zcopy_send(&mut self, idx: usize, tag: u64, v: Vec<u8>, sync: bool) -> SendMade {
        let li = self.ep(idx).lanes().map(|l| l.am_iface());
        let key = self.new_send(idx, tag, SendData::Owned(v), sync);
        let id = self.new_msg_id();
        let s = self.send_mut(key);
        s.msg_id = id;
        let ptr = NonNull::new(s.data.as_mut_ptr());
        let len = s.data.len();
        if let (Some(li), Some(p)) = (li, ptr) {
            // SAFETY: the vector is owned by the request and not moved or resized until the
            // request finishes, which drops the handle first.
            if let Ok(m) = unsafe { self.md(li).mem_reg(p, len) } {
                self.send_rndv(key).memh = Some(m);
                self.send_mut(key).stage = SendStage::Rndv(RndvSend::EagerZcopy);
            }
        }
        let ready = self.ep_ready(idx);
        SendMade::Req {
            idx,
            key,
            behind: !ready,
        }
    }

    pub(crate) fn zcopy_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        let wire = self.wire_id(key);
        let peer_wire = self.peer_id(idx, key);
        let uuid = self.worker_uuid().to_le_bytes();
        let now = self.now_stamp();
        let ReqStep {
            ep,
            ifaces: info,
            req,
            stats,
        } = self.req_step(idx, key);
        let (proto, (li, uep), last_tx) = ep.ready_am()?;
        let attr = &info[*li].attr;
        let s = match &mut req.kind {
            ReqKind::Send(s) => s,
            _ => return Ok(true),
        };
        let x = s
            .rndv
            .as_deref_mut()
            .ok_or_else(|| Error::InvalidParam("zcopy without registration".into()))?;
        let memh = x
            .memh
            .clone()
            .ok_or_else(|| Error::InvalidParam("zcopy without registration".into()))?;
        let len = s.data.len();
        let sreq = if s.sync { peer_wire } else { NO_REQ };
        while s.offset < len {
            let mut hdr = [0u8; PREFIX_LEN + EagerFirstHdr::LEN];
            hdr[..PREFIX_LEN].copy_from_slice(&uuid);
            let (id, hlen, n) = if s.offset == 0 {
                let h = EagerFirstHdr {
                    tag: s.tag,
                    msg_id: s.msg_id,
                    total_len: len as u64,
                    sreq,
                }
                .encode();
                hdr[PREFIX_LEN..].copy_from_slice(&h);
                (
                    am_id::EAGER_FIRST,
                    PREFIX_LEN + EagerFirstHdr::LEN,
                    proto.first_frag,
                )
            } else {
                let h = FragHdr {
                    id: s.msg_id,
                    offset: s.offset as u64,
                }
                .encode();
                hdr[PREFIX_LEN..PREFIX_LEN + FragHdr::LEN].copy_from_slice(&h);
                (
                    am_id::EAGER_MIDDLE,
                    PREFIX_LEN + FragHdr::LEN,
                    proto.middle_frag,
                )
            };
            let n = n.min(attr.am.max_zcopy).min(len - s.offset).max(1);
            let iov = Iov::new(&memh, s.offset, n)?;
            match uep.am_zcopy(id, &hdr[..hlen], &[iov], comp_id(COMP_ZCOPY, wire))? {
                Outcome::NoResource => return Ok(false),
                Outcome::InProgress => x.inflight += 1,
                Outcome::Done(()) => {}
            }
            if s.offset == 0 {
                stats.eager_zcopy += 1;
            }
            *last_tx = now;
            s.offset += n;
        }
        if x.inflight == 0 {
            self.zcopy_done(key);
        }
        Ok(true)
    }

    pub(crate) fn zcopy_done(&mut self, key: usize) {
        let s = self.send_mut(key);
        if s.sync && !s.acked {
            s.stage = SendStage::Tag(TagSend::WaitAck);
            s.drop_memh();
        } else {
            self.finish(key, Ok(()));
        }
    }

    pub(crate) fn send_rts(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        let wire = self.peer_id(idx, key);
        // Register the data on the RMA lane's memory domain once, unless the size goes by the
        // AM pipeline (the RTS then carries no remote key; the receiver asks by RTR).
        let len = self.send_mut(key).data.len();
        let pipelined = self
            .ep(idx)
            .proto()
            .is_some_and(|p| p.rndv_for(len) == RndvScheme::AmPipeline);
        let rma_iface = self
            .ep(idx)
            .lanes()
            .and_then(|l| l.rma_iface())
            .filter(|_| !pipelined);
        let s = self.send_mut(key);
        if !s.rts_sent && s.memh().is_none() && !s.data.is_empty() {
            if let Some(li) = rma_iface {
                let ptr = NonNull::new(s.data.as_mut_ptr());
                let len = s.data.len();
                if let Some(ptr) = ptr {
                    // SAFETY: the vector is owned by this request and neither moved nor resized
                    // until the request finishes, which drops the handle first.
                    match unsafe { self.md(li).mem_reg(ptr, len) } {
                        Ok(m) => self.send_rndv(key).memh = Some(m),
                        Err(e) => tracing::debug!("rendezvous send buffer not registered: {e}"),
                    }
                }
            }
        }
        let s = self.send_mut(key);
        let addr = s.data.as_ptr() as u64;
        let (tag, len) = (s.tag, s.data.len());
        let memh = s.memh().cloned();
        let (tl, rkey) = self.rts_rkey(rma_iface, memh.as_ref());
        let mut body = self.take_scratch();
        body.clear();
        let am = self
            .send_mut(key)
            .rndv
            .as_ref()
            .and_then(|x| x.am.as_ref())
            .map(|(id, h)| (*id, h.clone()));
        let rts_id = match &am {
            Some((id, h)) => {
                body.extend_from_slice(
                    &UserAmHdr {
                        id: *id,
                        hdr_len: h.len() as u32,
                    }
                    .encode(),
                );
                body.extend_from_slice(h);
                am_id::AM_RTS
            }
            None => am_id::RTS,
        };
        RtsHdr {
            tag,
            sreq: wire,
            len: len as u64,
            buf: RemoteBuf {
                addr,
                tl,
                rkey: &rkey,
            },
        }
        .encode(&mut body);
        // Sent now or not at all: the request is at the head of the endpoint's queue (or the
        // queue is empty), and queueing the RTS behind later messages would reorder matching.
        let r = self.send_ctl_now(idx, rts_id, &body);
        self.put_scratch(body);
        self.put_rkey_scratch(rkey);
        if !r? {
            return Ok(false);
        }
        self.stats_mut().rndv_rts += 1;
        let s = self.send_mut(key);
        s.rts_sent = true;
        s.stage = SendStage::Rndv(RndvSend::WaitRndv);
        Ok(true)
    }

    pub(crate) fn put_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        let wire = self.wire_id(key);
        let ReqStep {
            ep,
            ifaces: info,
            req,
            ..
        } = self.req_step(idx, key);
        let l = ep.ready_lanes()?;
        let rma = l
            .rma()
            .ok_or_else(|| Error::Unsupported("no RMA lane".into()))?;
        let (li, uep) = l.lane_mut(rma);
        let attr = &info[li].attr;
        let s = match &mut req.kind {
            ReqKind::Send(s) => s,
            _ => return Ok(true),
        };
        let Some(x) = s.rndv.as_deref_mut() else {
            return Err(Error::InvalidParam("put without registration".into()));
        };
        let total = s.data.len();
        let chunk = if attr.put.max_zcopy == 0 {
            total
        } else {
            attr.put.max_zcopy
        };
        let run = zcopy_run(
            x,
            &mut s.offset,
            &mut 0,
            total,
            chunk,
            false,
            "put",
            |iov, addr, rkey| uep.put_zcopy(&[iov], addr, rkey, comp_id(COMP_PUT, wire)),
        )?;
        if run == ZcopyRun::Blocked {
            return Ok(false);
        }
        if x.inflight == 0 {
            return self.put_done(key);
        }
        Ok(true)
    }

    /// A put (or the flush after the puts) of send `key` completed: after the last put, the
    /// flush starts (and the request waits in the endpoint's queue when it meets
    /// back-pressure); after the flush, the receiver is told (ATP) and the send finishes.
    pub(crate) fn put_completed(&mut self, key: usize) -> Result<()> {
        let x = self.send_rndv(key);
        x.inflight = x.inflight.saturating_sub(1);
        let (inflight, rreq) = (x.inflight, x.peer_req);
        let s = self.send_mut(key);
        let wait_flush = s.stage == SendStage::Rndv(RndvSend::WaitPutFlush);
        if inflight != 0 || s.offset != s.data.len() {
            return Ok(());
        }
        if wait_flush {
            let r = self
                .req_ep(key)
                .and_then(|ep| self.send_ctl(ep, am_id::ATP, &ReqHdr { req: rreq }.encode()));
            self.finish(key, Ok(()));
            return r;
        }
        if !self.put_done(key)? {
            let ep = self.req_ep(key)?;
            self.queue_req(ep, key);
        }
        Ok(())
    }

    /// An eager zero-copy fragment of tag send `key` completed: after the last one, the send
    /// finishes (or waits for its acknowledgement).
    pub(crate) fn rndv_zcopy_completed(&mut self, key: usize) {
        if self.zcopy_piece_done(key)
            && self.send_mut(key).stage == SendStage::Rndv(RndvSend::EagerZcopy)
        {
            self.zcopy_done(key);
        }
    }

    /// All puts of a send completed: flush the RMA lane, then tell the receiver (ATP). Gives
    /// false when the flush met back-pressure (retry later).
    pub(crate) fn put_done(&mut self, key: usize) -> Result<bool> {
        if self.send_mut(key).user_rma {
            self.finish(key, Ok(()));
            return Ok(true);
        }
        let idx = self.req_ep(key)?;
        let wire = self.wire_id(key);
        let l = self.ep_mut(idx).ready_lanes()?;
        let rma = l.rma().unwrap_or(l.am());
        let out = l.lane_mut(rma).1.flush(comp_id(COMP_PUT, wire))?;
        match out {
            Outcome::Done(()) => {
                let rreq = self.send_rndv(key).peer_req;
                self.send_ctl(idx, am_id::ATP, &ReqHdr { req: rreq }.encode())?;
                self.finish(key, Ok(()));
            }
            Outcome::NoResource => {
                // The caller queues the request; ATP only after remote completion.
                self.send_mut(key).stage = SendStage::Rndv(RndvSend::PutFlushRetry);
                return Ok(false);
            }
            Outcome::InProgress => {
                self.send_rndv(key).inflight = 1;
                self.send_mut(key).stage = SendStage::Rndv(RndvSend::WaitPutFlush);
            }
        }
        Ok(true)
    }

    pub(crate) fn pipeline_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        let uuid = self.worker_uuid().to_le_bytes();
        let now = self.now_stamp();
        let ReqStep {
            ep,
            ifaces: info,
            req,
            ..
        } = self.req_step(idx, key);
        let (proto, (li, uep), last_tx) = ep.ready_am()?;
        let attr = &info[*li].attr;
        let s = match &mut req.kind {
            ReqKind::Send(s) => s,
            _ => return Ok(true),
        };
        let rreq = s.rndv.as_ref().map_or(NO_REQ, |x| x.peer_req);
        while s.offset < s.data.len() {
            let n = proto.middle_frag.min(s.data.len() - s.offset);
            let h = FragHdr {
                id: rreq,
                offset: s.offset as u64,
            }
            .encode();
            let out = am_send(
                uep,
                attr,
                am_id::RNDV_DATA,
                &[&uuid, &h, &s.data[s.offset..s.offset + n]],
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

    /// ATS: the receiver got the data of a rendezvous send.
    pub(crate) fn on_ats(&mut self, idx: usize, h: ReqHdr) -> Result<()> {
        let key = self.peer_req(idx, h.req, Named::Ats)?;
        // A send that tag offload holds an entry of is finished through `State::finish`,
        // which cancels the entry.
        self.finish(key, Ok(()));
        Ok(())
    }

    /// RTR for send `key` (the dispatcher looked up `h.sreq` and had the tag family copy a
    /// mapped send's data into the request): the receiver asks for the data, by put_zcopy
    /// into its buffer or by the pipeline.
    pub(crate) fn on_rtr(&mut self, idx: usize, key: usize, h: RtrHdr<'_>) -> Result<()> {
        let rma = self.ep(idx).lanes().and_then(|l| l.rma_iface());
        self.send_rndv(key).peer_req = h.rreq;
        let s = self.send_mut(key);
        s.offset = 0;
        let mut use_put = false;
        if let (RtrMode::Put, Some(li), Some(_)) = (h.mode, rma, s.memh()) {
            if self.iface(li).tl_name == h.buf.tl
                && self.iface(li).attr.flags.contains(IfaceFlags::PUT_ZCOPY)
            {
                if let Ok(rk) = self.md(li).rkey_unpack(h.buf.rkey) {
                    let x = self.send_rndv(key);
                    x.rkey = Some(rk);
                    x.remote_addr = h.buf.addr;
                    use_put = true;
                }
            }
        }
        let stage = if use_put {
            RndvSend::Put
        } else {
            RndvSend::Pipeline
        };
        self.send_mut(key).stage = SendStage::Rndv(stage);
        if !self.ep(idx).queue_empty() || !self.rndv_send_step(key, stage)? {
            self.queue_req(idx, key);
        }
        Ok(())
    }
}

impl Core {
    /// The remote key an RTS carries for `memh` on RMA interface `li`, packed into the reused
    /// `rkey_scratch` (give the buffer back there once the RTS is encoded), with the transport's
    /// name; an empty key and name when there is no RMA lane or the key cannot be packed (the
    /// peer then asks for the data by RTR).
    pub(crate) fn rts_rkey(
        &mut self,
        li: Option<usize>,
        memh: Option<&MemHandle>,
    ) -> (&'static str, Vec<u8>) {
        let mut rkey = self.take_rkey_scratch();
        rkey.clear();
        if let (Some(li), Some(m)) = (li, memh) {
            if self.md(li).rkey_pack(m, &mut rkey).is_ok() {
                return (self.iface(li).tl_name, rkey);
            }
            rkey.clear();
        }
        ("", rkey)
    }
}
