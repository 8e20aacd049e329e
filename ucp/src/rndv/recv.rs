//! Rendezvous, receiver side: on a matched RTS, get_zcopy from the sender's memory (then ATS),
//! or RTR asking for put_zcopy or the AM pipeline; RNDV_DATA fragments and ATP.
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
use crate::rndv::stages::RndvRecv;
use crate::wire::{am_id, FragHdr, RemoteBuf, ReqHdr, RtrHdr, RtrMode, NO_REQ};
use crate::wireup::RndvScheme;
use crate::worker::core_api::ReqStep;
use crate::worker::peer_req::Named;
use crate::worker::req::{comp_id, RecvStage, ReqKind, COMP_GET};
use crate::worker::state::RndvFamily;
use std::ptr::NonNull;
use ucs::{Error, Result};
use uct::Endpoint as _;
use uct::MemoryDomain as _;
use uct::{IfaceFlags, MdFlags, MemHandle, RemoteKey};

impl RndvFamily<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rndv_recv_start(
        &mut self,
        key: usize,
        ep: usize,
        tag: u64,
        sreq: u64,
        len: usize,
        addr: u64,
        tl: &str,
        rkey: &[u8],
    ) -> Result<()> {
        self.req_mut(key).set_ep(ep);
        let cap = self.recv_mut(key).buf.len();
        {
            let r = self.recv_mut(key);
            r.sender_tag = tag;
            r.total = len;
            let x = self.recv_rndv(key);
            x.peer_req = sreq;
            x.remote_addr = addr;
        }
        if len > cap || len == 0 {
            // Nothing to move: let the sender finish, and complete (truncated or empty).
            self.send_ctl(ep, am_id::ATS, &ReqHdr { req: sreq }.encode())?;
            let st = if len > cap {
                Err(Error::Truncated { len, capacity: cap })
            } else {
                Ok(())
            };
            self.finish(key, st);
            return Ok(());
        }
        let rma_pos = self.ep(ep).lanes().and_then(|l| l.rma());
        let rma = self.ep(ep).lanes().and_then(|l| l.rma_iface());
        let wire = self.peer_id(ep, key);
        // A sender that described its data with a remote key (memory in a mapped segment, or
        // a size above the pipeline's range) is read with the RMA lane's scheme: a key to a
        // mapped segment costs one copy and no system call, where the pipeline costs two.
        // Without a key the data comes by the AM pipeline.
        let scheme = self.ep(ep).proto().map(|p| match p.rndv_for(len) {
            RndvScheme::AmPipeline if !rkey.is_empty() => p.rndv,
            s => s,
        });
        let rma = rma.filter(|_| scheme != Some(RndvScheme::AmPipeline));
        if let Some((gl, li)) = self.get_lane(ep, tl, rkey, rma_pos, scheme) {
            let rk = self.unpack_rkey(ep, gl, li, rkey);
            if let (Ok(rk), Ok(m)) = (rk, self.reg_recv(key, li, len)) {
                let x = self.recv_rndv(key);
                x.rkey = Some(rk);
                x.memh = Some(m);
                x.get_lane = (Some(gl) != rma_pos).then_some(gl);
                self.recv_mut(key).stage = RecvStage::Rndv(RndvRecv::Get);
                self.stats_mut().rndv_get += 1;
                if Some(gl) != rma_pos {
                    self.stats_mut().rndv_get_mapped += 1;
                }
                if !self.get_step(key)? {
                    self.queue_req(ep, key);
                }
                return Ok(());
            }
        }
        if let Some(li) = rma {
            let flags = self.iface(li).attr.flags;
            let reg = |st: &mut Self| st.reg_recv(key, li, len);
            if flags.contains(IfaceFlags::PUT_ZCOPY) && self.iface(li).md_reg {
                if let Ok(m) = reg(self) {
                    let mut packed = Vec::new();
                    if self.md(li).rkey_pack(&m, &mut packed).is_ok() {
                        let baddr = m.addr() as u64;
                        self.recv_rndv(key).memh = Some(m);
                        self.recv_mut(key).stage = RecvStage::Rndv(RndvRecv::Wait);
                        self.stats_mut().rndv_put += 1;
                        let mut body = Vec::new();
                        RtrHdr {
                            sreq,
                            rreq: wire,
                            mode: RtrMode::Put,
                            buf: RemoteBuf {
                                addr: baddr,
                                tl: self.iface(li).tl_name,
                                rkey: &packed,
                            },
                        }
                        .encode(&mut body);
                        return self.send_ctl(ep, am_id::RTR, &body);
                    }
                }
            }
        }
        self.recv_mut(key).stage = RecvStage::Rndv(RndvRecv::Wait);
        self.stats_mut().rndv_am += 1;
        let mut body = Vec::new();
        RtrHdr {
            sreq,
            rreq: wire,
            mode: RtrMode::AmPipeline,
            buf: RemoteBuf {
                addr: 0,
                tl: "",
                rkey: &[],
            },
        }
        .encode(&mut body);
        self.send_ctl(ep, am_id::RTR, &body)
    }

    /// The lane (index in the endpoint's `uct`) that reads a rendezvous sender's data with a
    /// get, if any: the one whose transport made the key (`tl`) and offers get_zcopy. The RMA
    /// lane is taken when the endpoint's scheme for this size is get; another lane (the AM
    /// lane's shared memory, for data in a segment it maps) only when its domain reads the
    /// key in place, which costs one copy and no system call.
    fn get_lane(
        &self,
        ep: usize,
        tl: &str,
        rkey: &[u8],
        rma: Option<usize>,
        scheme: Option<RndvScheme>,
    ) -> Option<(usize, usize)> {
        if rkey.is_empty() || tl.is_empty() {
            return None;
        }
        let l = self.ep(ep).lanes()?;
        let usable = |i: usize| {
            let li = l.iface_of(i);
            self.iface(li).tl_name == tl
                && self.iface(li).attr.flags.contains(IfaceFlags::GET_ZCOPY)
        };
        if let Some(r) = rma.filter(|&r| usable(r) && scheme == Some(RndvScheme::Get)) {
            return Some((r, l.iface_of(r)));
        }
        (0..l.count())
            .find(|&i| {
                Some(i) != rma
                    && usable(i)
                    && self
                        .md(l.iface_of(i))
                        .attr()
                        .flags
                        .contains(MdFlags::RKEY_PTR)
            })
            .map(|i| (i, l.iface_of(i)))
    }

    /// Unpacks the peer's key for lane `lane` (interface `li`) of endpoint `ep`: by the lane's
    /// endpoint when its transport keeps the peer's mappings with it (shared memory: the
    /// sender's segment is mapped once, not per message, and unmapped with the endpoint), else
    /// by the domain.
    fn unpack_rkey(&mut self, ep: usize, lane: usize, li: usize, rkey: &[u8]) -> Result<RemoteKey> {
        let l = self.ep_mut(ep).ready_lanes()?;
        let (_, uep) = l
            .get_mut(lane)
            .ok_or_else(|| Error::InvalidParam(format!("no lane {lane}")))?;
        match uep.peer_rkey_unpack(rkey)? {
            Some(k) => Ok(k),
            None => self.md(li).rkey_unpack(rkey),
        }
    }

    /// Registers the first `len` bytes of receive `key`'s buffer with domain `li`.
    fn reg_recv(&mut self, key: usize, li: usize, len: usize) -> Result<MemHandle> {
        let r = self.recv_mut(key);
        let ptr = NonNull::new(r.buf.as_mut_ptr())
            .ok_or_else(|| Error::InvalidParam("empty receive buffer".into()))?;
        // SAFETY: the buffer is owned by this request and not moved or resized until the
        // request finishes, which drops the handle first.
        unsafe { self.md(li).mem_reg(ptr, len) }
    }

    /// Reads the sender's data of receive `key` (a rendezvous or a user get) with get_zcopy.
    /// Gives false on back-pressure (the caller queues the request in its endpoint's pending
    /// queue).
    ///
    /// On a shared-memory device a get is this core copying (cma's system call, or a copy
    /// from the sender's mapped segment), done when the call returns. A rendezvous there reads
    /// [`ProtoConfig::rndv_frag`](crate::wireup::ProtoConfig) bytes per step and then leaves
    /// the rest to `progress` (`rndv.gets`, one fragment per call, round robin), so between
    /// fragments the worker goes on polling: with traffic both ways, the peer's RTS is
    /// answered and the peer reads this side's data while this side reads its own, and a
    /// large read never holds up the worker's other messages. Other devices take every
    /// fragment at once (their gets complete later); so do user gets, which flushes and
    /// fences order with the endpoint's pending queue.
    pub(crate) fn get_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        let wire = self.wire_id(key);
        let ReqStep {
            ep,
            ifaces: info,
            req,
            ..
        } = self.req_step(idx, key);
        let frag = ep.proto().map_or(usize::MAX, |p| p.rndv_frag);
        let l = ep.ready_lanes()?;
        let lane = match &req.kind {
            ReqKind::Recv(r) => r.rndv.as_ref().and_then(|x| x.get_lane),
            _ => None,
        };
        let rma = lane
            .or(l.rma())
            .filter(|&i| i < l.count())
            .ok_or_else(|| Error::Unsupported("no RMA lane".into()))?;
        let (li, uep) = l.lane_mut(rma);
        let attr = &info[li].attr;
        let r = match &mut req.kind {
            ReqKind::Recv(r) => r,
            _ => return Ok(true),
        };
        let Some(x) = r.rndv.as_deref_mut() else {
            return Err(Error::InvalidParam("get without registration".into()));
        };
        let stepped = !r.user_rma && info[li].dev_type == uct::DeviceType::Shm;
        let max = if attr.get.max_zcopy == 0 {
            r.total
        } else {
            attr.get.max_zcopy
        };
        let chunk = if stepped { max.min(frag).max(1) } else { max };
        let run = zcopy_run(
            x,
            &mut r.offset,
            &mut r.received,
            r.total,
            chunk,
            stepped,
            "get",
            |iov, addr, rkey| uep.get_zcopy(&[iov], addr, rkey, comp_id(COMP_GET, wire)),
        )?;
        match run {
            ZcopyRun::Blocked => return Ok(false),
            ZcopyRun::Paused => {
                self.own().queue_read(key, wire);
                self.note_queued_work();
                return Ok(true);
            }
            ZcopyRun::Started => {}
        }
        if x.inflight == 0 {
            self.get_done(key)?;
        }
        Ok(true)
    }

    /// One step of the first rendezvous read in `rndv.gets` (see [`RndvFamily::get_step`]):
    /// its next fragment; a read with more left goes to the back. A request that finished
    /// meanwhile (failed with its endpoint, or was freed) is dropped from the queue. Gives
    /// the number of reads stepped. A read that fails finishes its request with the error,
    /// and its endpoint fails with it too ([`Core::fail_ep_soon`](crate::worker::state::Core),
    /// which the same progress call carries out).
    pub(crate) fn progress_rndv_gets(&mut self) -> usize {
        let Some((key, wire)) = self.own().next_read() else {
            return 0;
        };
        let live = self.req_by_wire(wire) == Some(key)
            && matches!(&self.req(key).kind,
                ReqKind::Recv(r) if r.stage == RecvStage::Rndv(RndvRecv::Get));
        if !live {
            return 0;
        }
        match self.get_step(key) {
            Ok(true) => {}
            Ok(false) => {
                if let Ok(ep) = self.req_ep(key) {
                    self.queue_req(ep, key);
                }
            }
            Err(e) => {
                let ep = self.req(key).ep();
                self.finish(key, Err(e.clone()));
                if let Some(ep) = ep {
                    self.fail_ep_soon(ep, e);
                }
            }
        }
        1
    }

    /// A get of receive `key` completed: after the last one, the receive is done.
    pub(crate) fn get_completed(&mut self, key: usize) -> Result<()> {
        let x = self.recv_rndv(key);
        x.inflight = x.inflight.saturating_sub(1);
        let inflight = x.inflight;
        let r = self.recv_mut(key);
        if inflight == 0 && r.offset == r.total {
            self.get_done(key)
        } else {
            Ok(())
        }
    }

    pub(crate) fn get_done(&mut self, key: usize) -> Result<()> {
        let idx = self.req_ep(key)?;
        let r = self.recv_mut(key);
        r.received = r.total;
        if r.user_rma {
            self.finish(key, Ok(()));
            return Ok(());
        }
        let sreq = r.rndv.as_ref().map_or(NO_REQ, |x| x.peer_req);
        self.finish(key, Ok(()));
        self.send_ctl(idx, am_id::ATS, &ReqHdr { req: sreq }.encode())
    }

    /// RNDV_DATA: a fragment of a pipelined rendezvous.
    pub(crate) fn on_rndv_data(&mut self, idx: usize, h: FragHdr, data: &[u8]) -> Result<()> {
        let key = self.peer_req(idx, h.id, Named::RndvData)?;
        let r = match &mut self.req_mut(key).kind {
            ReqKind::Recv(r) if r.stage == RecvStage::Rndv(RndvRecv::Wait) => r,
            _ => {
                return Err(Error::Wire(
                    "rendezvous data for a request not expecting it".into(),
                ))
            }
        };
        let off = h.offset as usize;
        // Fragments come in order on one lane: anything else (a repeat, a gap) would complete
        // the receive with bytes missing.
        if off != r.received || off.checked_add(data.len()).is_none_or(|e| e > r.total) {
            return Err(Error::Wire(format!(
                "rendezvous fragment {}+{} is not the next of the {}-byte message \
                 ({} bytes received)",
                h.offset,
                data.len(),
                r.total,
                r.received
            )));
        }
        // Straight into the receive's buffer, with the copy that suits lines the sender's core
        // just wrote (see `copy_payload`).
        crate::tag::copy::copy_payload(&mut r.buf[off..off + data.len()], data);
        r.received += data.len();
        self.recv_check_done(key);
        Ok(())
    }

    /// ATP: the sender finished putting the data into the receive's buffer.
    pub(crate) fn on_atp(&mut self, idx: usize, h: ReqHdr) -> Result<()> {
        let key = self.peer_req(idx, h.req, Named::Atp)?;
        let r = self.recv_mut(key);
        r.received = r.total;
        self.finish(key, Ok(()));
        Ok(())
    }
}
