//! rc_verbs interface: opens the device's CQs and bounce buffers, creates endpoints (one RC
//! queue pair each), and progresses receives, send completions, failures and pending requests.

use super::ep::RcVerbsEp;
use super::ffi::{self, ibv_qp_attr, ibv_wc, CompChannel, Cq, Qp};
use super::state::*;
use super::tag::state::{TagState, MAX_POSTED, RECV_MAX_IOV};
use super::tag::wire::{EagerHdr, RndvHdr, ID_TAG_MIN};
use super::wire::{AmHdr, DevAddr, EpAddr, LL_ETHERNET, LL_INFINIBAND};
use super::{RcConfig, RcVerbsMd};
use crate::caps::TagLimits;
use crate::caps::{AtomicCaps, AtomicOps, EventFlags, IfaceAttr, IfaceFlags, OpLimits, PerfModel};
use crate::ep::{CompletionId, TagRecvId};
use crate::iface::{EventSink, Iface};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::rc::Rc;
use ucs::{Error, Outcome, Result};

/// An rc_verbs interface.
pub struct RcVerbsIface {
    pub(super) inner: Rc<RefCell<Inner>>,
    attr: IfaceAttr,
    device: String,
    dev_addr: [u8; DevAddr::LEN],
    channel_fd: RawFd,
}

impl RcVerbsIface {
    pub(super) fn open(md: &RcVerbsMd, device: &str, cfg: RcConfig) -> Result<Self> {
        let dev = md.dev.clone();
        let ctx = dev.ctx().clone();
        let da = &dev.dev_attr;
        if dev.port_attr.state != ffi::IBV_PORT_ACTIVE {
            return Err(Error::NoDevice(format!("{device} is not active")));
        }
        let cq_len = cfg.cq_len.min(da.max_cqe.max(1) as u32);
        let sq_depth = cfg.tx_queue_len.min(da.max_qp_wr.max(1) as u32);
        let rx_depth = cfg.rx_queue_len.min(da.max_qp_wr.max(1) as u32);
        let max_eps = (cq_len / sq_depth.max(rx_depth)) as usize;
        if max_eps == 0 {
            return Err(Error::Config(format!(
                "RUCX_RC_CQ_LEN={cq_len} cannot hold one endpoint's queues"
            )));
        }
        let channel = CompChannel::create(&ctx).map_err(Error::NoDevice)?;
        let send_cq = Cq::create(&ctx, cq_len, Some(&channel)).map_err(Error::NoDevice)?;
        let recv_cq = Cq::create(&ctx, cq_len, Some(&channel)).map_err(Error::NoDevice)?;
        let tx = RegMem::new(
            &dev,
            cfg.tx_bufs as usize * cfg.seg_size,
            ffi::IBV_ACCESS_LOCAL_WRITE,
            "rc_verbs send buffers",
        )?;
        let max_send_sge = MAX_SEND_SGE.min(da.max_sge.max(2) as u32);
        let mut cfg = cfg;
        cfg.tx_queue_len = sq_depth;
        cfg.rx_queue_len = rx_depth;
        // Probe the inline size the provider grants with a throwaway QP.
        let probe = Qp::create_rc(
            &dev.pd,
            &send_cq,
            &recv_cq,
            ffi::ibv_qp_cap {
                max_send_wr: sq_depth,
                max_recv_wr: rx_depth,
                max_send_sge,
                max_recv_sge: 1,
                max_inline_data: cfg.max_inline,
            },
        )
        .map_err(|e| Error::NoDevice(format!("creating an RC QP on {device}: {e}")))?;
        let max_inline = probe.cap.max_inline_data.min(cfg.max_inline);
        drop(probe);
        if max_inline < EagerHdr::LEN as u32 + 1 {
            return Err(Error::NoDevice(format!(
                "{device} grants only {max_inline} bytes of inline data"
            )));
        }
        let seg = cfg.seg_size;
        let max_msg = dev.port_attr.max_msg_sz as usize;
        let atomics = if da.atomic_cap != ffi::IBV_ATOMIC_NONE {
            AtomicCaps {
                op64: AtomicOps::ADD,
                fop64: AtomicOps::ADD | AtomicOps::CSWAP,
                ..Default::default()
            }
        } else {
            AtomicCaps::default()
        };
        let mut flags = IfaceFlags::AM_SHORT
            | IfaceFlags::AM_BCOPY
            | IfaceFlags::AM_ZCOPY
            | IfaceFlags::PUT_SHORT
            | IfaceFlags::PUT_BCOPY
            | IfaceFlags::PUT_ZCOPY
            | IfaceFlags::GET_BCOPY
            | IfaceFlags::GET_ZCOPY
            | IfaceFlags::PENDING
            | IfaceFlags::CONNECT_TO_EP
            | IfaceFlags::ERRHANDLE_PEER_FAILURE
            | IfaceFlags::TAG_EAGER_SHORT
            | IfaceFlags::TAG_EAGER_BCOPY
            | IfaceFlags::TAG_EAGER_ZCOPY
            | IfaceFlags::TAG_RNDV_ZCOPY;
        if atomics != AtomicCaps::default() {
            flags |= IfaceFlags::ATOMIC_DEVICE;
        }
        let bw = dev.bandwidth();
        let attr = IfaceAttr {
            flags,
            event_flags: EventFlags::SEND_COMP | EventFlags::RECV | EventFlags::FD,
            atomics,
            am: OpLimits {
                max_short: max_inline as usize - AmHdr::LEN,
                max_bcopy: seg - AmHdr::LEN,
                min_zcopy: 0,
                max_zcopy: seg - AmHdr::LEN - MAX_AM_HDR,
                max_iov: max_send_sge as usize - 1,
                max_hdr: MAX_AM_HDR,
            },
            put: OpLimits {
                max_short: max_inline as usize,
                max_bcopy: seg,
                min_zcopy: 0,
                max_zcopy: max_msg,
                max_iov: max_send_sge as usize,
                max_hdr: 0,
            },
            get: OpLimits {
                max_short: 0,
                max_bcopy: seg,
                min_zcopy: 0,
                max_zcopy: max_msg,
                max_iov: max_send_sge as usize,
                max_hdr: 0,
            },
            tag: TagLimits {
                eager_max_short: max_inline as usize - EagerHdr::LEN,
                eager_max_bcopy: seg - EagerHdr::LEN,
                eager_max_zcopy: seg - EagerHdr::LEN,
                rndv_max_hdr: seg - RndvHdr::LEN,
                rndv_max_zcopy: max_msg,
                recv_max_outstanding: MAX_POSTED,
                recv_max_iov: RECV_MAX_IOV.min(max_send_sge as usize),
                eager_saves_copy: false,
            },
            device_addr_len: DevAddr::LEN,
            iface_addr_len: 0,
            ep_addr_len: EpAddr::LEN,
            perf: PerfModel {
                send_overhead: 75e-9,
                recv_overhead: 75e-9,
                bandwidth: if bw > 0.0 { bw * 0.95 } else { 1e9 },
                latency: if dev.is_roce() { 1.3e-6 } else { 0.7e-6 },
            },
            priority: 0,
        };
        let dev_addr = DevAddr {
            link_layer: if dev.is_roce() {
                LL_ETHERNET
            } else {
                LL_INFINIBAND
            },
            lid: dev.port_attr.lid,
            gid: dev.gid,
        }
        .encode();
        let channel_fd = channel.fd();
        let rx_batch = (cfg.rx_queue_len as usize / 4).clamp(1, RX_POST_BATCH);
        let inner = Inner {
            md_name: super::intern(ctx.name()),
            dev,
            tx_free: (0..cfg.tx_bufs).rev().collect(),
            cfg,
            eps: slab::Slab::new(),
            next_gen: 1,
            tx,
            max_inline,
            max_send_sge,
            max_eps,
            flush_waits: slab::Slab::new(),
            stash_send: Vec::with_capacity(POLL_BATCH),
            stash_recv: Vec::with_capacity(POLL_BATCH),
            scratch: Vec::with_capacity(max_eps),
            eps_attention: false,
            rx_batch,
            tx_signaled: 0,
            tx_skipped: 0,
            tag: TagState::new(),
            recv_cq,
            send_cq,
            channel,
        };
        Ok(RcVerbsIface {
            inner: Rc::new(RefCell::new(inner)),
            attr,
            device: device.to_owned(),
            dev_addr,
            channel_fd,
        })
    }

    /// The GID index this interface routes with.
    pub fn gid_index(&self) -> u32 {
        self.inner.borrow().dev.gid_index
    }

    /// Delivers the active messages of receive completions `wcs` and reposts their buffers.
    fn deliver_recvs<S: EventSink>(&mut self, wcs: &[ibv_wc], sink: &mut S) -> usize {
        let mut count = 0;
        for wc in wcs {
            let (key, gen, slot) = split_wr_id(wc.wr_id);
            if wc.status != ffi::IBV_WC_SUCCESS {
                let mut inner = self.inner.borrow_mut();
                if inner.ep(key, gen).is_some() {
                    inner.fail_ep(key, wc_error(wc.status, "receive"));
                }
                continue;
            }
            let (rx, seg, repost_after) = {
                let mut g = self.inner.borrow_mut();
                let inner = &mut *g;
                let (seg, batch) = (inner.cfg.seg_size, inner.rx_batch);
                match inner.ep(key, gen) {
                    Some(ep) => {
                        if wc.wc_flags & ffi::IBV_WC_WITH_IMM != 0 {
                            ep.peer_imm_update(u32::from_be(wc.imm_data));
                        }
                        // The buffer joins the repost batch now unless it completes the batch
                        // (then after the delivery): nothing else reposts this endpoint's
                        // buffers while the callback runs.
                        let complete = ep.rx_free.len() + 1 >= batch;
                        if !complete {
                            ep.rx_free.push(slot);
                        }
                        (ep.rx.clone(), seg, complete)
                    }
                    None => continue,
                }
            };
            let len = (wc.byte_len as usize).min(seg);
            // SAFETY: the NIC wrote `len` bytes into this receive buffer and will not touch it
            // until it is reposted, after this callback; `rx` keeps the memory alive during
            // the callback.
            let data =
                unsafe { std::slice::from_raw_parts(rx.mem.base().add(slot as usize * seg), len) };
            if data.first().is_some_and(|&id| id >= ID_TAG_MIN) {
                count += self.tag_arrived(key, gen, data, sink);
            } else {
                match AmHdr::decode(data) {
                    Ok((id, payload)) => {
                        sink.am(id, payload);
                        count += 1;
                    }
                    Err(e) => tracing::warn!(%e, "malformed rc_verbs active message dropped"),
                }
            }
            if repost_after {
                let mut inner = self.inner.borrow_mut();
                if inner.ep(key, gen).is_some() {
                    inner.recv_done(key, slot);
                }
            }
        }
        count
    }

    #[inline(never)]
    fn progress_send<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut buf = [MaybeUninit::<ibv_wc>::uninit(); POLL_BATCH];
        let wcs = {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            take_wcs(&inner.send_cq, &mut inner.stash_send, &mut buf, "send")
        };
        let mut count = 0;
        for wc in wcs {
            let (key, gen, seq) = split_wr_id(wc.wr_id);
            let ok = wc.status == ffi::IBV_WC_SUCCESS;
            tracing::trace!(
                ep = key,
                seq,
                status = wc.status,
                "rc_verbs send completion"
            );
            {
                let mut inner = self.inner.borrow_mut();
                if inner.ep(key, gen).is_none() {
                    continue;
                }
                inner.send_completed(key);
                if !ok {
                    inner.fail_ep(key, wc_error(wc.status, "send"));
                }
                inner.sq_complete(key, seq);
            }
            // Retire every op up to `seq` (RC completes in order), or all of them on error.
            loop {
                let (delivery, err, tx_base, seg) = {
                    let mut inner = self.inner.borrow_mut();
                    let Some(ep) = inner.ep(key, gen) else { break };
                    let Some(&op) = ep.ops.front() else { break };
                    let err = ep.failed.clone();
                    if err.is_none() && (seq.wrapping_sub(op.seq) as i32) < 0 {
                        break;
                    }
                    ep.ops.pop_front();
                    let d = inner.retire(op);
                    (d, err, inner.tx.base(), inner.cfg.seg_size)
                };
                match delivery {
                    Delivery::None => {}
                    Delivery::Comp(c, v) => {
                        count += 1;
                        sink.completion(c, err.map_or(Ok(v), Err));
                    }
                    Delivery::Get(b, len, c) => {
                        count += 1;
                        if err.is_none() {
                            // SAFETY: the RDMA READ finished writing `len` bytes into this
                            // bounce buffer, which is freed only after the callback.
                            let data = unsafe {
                                std::slice::from_raw_parts(
                                    tx_base.add(b as usize * seg),
                                    len as usize,
                                )
                            };
                            sink.get_bcopy_data(c, data);
                        }
                        self.inner.borrow_mut().tx_free.push(b);
                        sink.completion(c, err.map_or(Ok(0), Err));
                    }
                    Delivery::TagRead(slot) => {
                        self.inner.borrow_mut().tag_read_finish(slot as usize, err);
                        count += self.progress_tag(sink);
                    }
                }
            }
        }
        count
    }

    /// Reports new endpoint errors, sends owed credits, and retries pending requests (called
    /// while `eps_attention` is set; it stays set while a request waits).
    #[inline(never)]
    fn progress_eps<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut keys = {
            let mut inner = self.inner.borrow_mut();
            inner.eps_attention = false;
            std::mem::take(&mut inner.scratch)
        };
        keys.clear();
        keys.extend(self.inner.borrow().eps.iter().map(|(k, _)| k));
        let mut count = self.progress_tag(sink);
        for &key in &keys {
            // Errors, once.
            let report = {
                let mut inner = self.inner.borrow_mut();
                let Some(ep) = inner.eps.get_mut(key) else {
                    continue;
                };
                match (&ep.failed, ep.error_reported) {
                    (Some(e), false) => {
                        ep.error_reported = true;
                        let (gen, e) = (ep.gen, e.clone());
                        inner.tag_ep_failed(key, gen, &e);
                        Some((ep_id(key, gen), e))
                    }
                    _ => None,
                }
            };
            if let Some((id, e)) = report {
                count += self.progress_tag(sink);
                sink.ep_error(id, e);
                count += 1;
                continue;
            }
            // Credits owed to the peer (a previous attempt may have found the queue full).
            self.inner.borrow_mut().maybe_send_credits(key, false);
            // Pending requests while resources last.
            loop {
                let next = {
                    let mut inner = self.inner.borrow_mut();
                    let Some(ep) = inner.eps.get_mut(key) else {
                        break;
                    };
                    if ep.failed.is_some() || ep.sq_avail == 0 || ep.am_credits() == 0 {
                        break;
                    }
                    match ep.pending.pop_front() {
                        Some(req) => (ep_id(key, ep.gen), req),
                        None => break,
                    }
                };
                count += 1;
                if !sink.pending(next.0, next.1) {
                    if let Some(ep) = self.inner.borrow_mut().eps.get_mut(key) {
                        ep.pending.push_front(next.1);
                    }
                    break;
                }
            }
            // Requests still waiting need another look (credits arrive without an event).
            let mut inner = self.inner.borrow_mut();
            if inner.eps.get(key).is_some_and(|ep| !ep.pending.is_empty()) {
                inner.eps_attention = true;
            }
        }
        self.inner.borrow_mut().scratch = keys;
        count
    }
}

impl Iface for RcVerbsIface {
    type Ep = RcVerbsEp;

    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn tl_name(&self) -> &'static str {
        "rc_verbs"
    }
    fn device_name(&self) -> &str {
        &self.device
    }
    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }
    fn iface_address(&self) -> &[u8] {
        &[]
    }
    fn is_reachable(
        &self,
        dev_addr: &[u8],
        iface_addr: Option<&[u8]>,
    ) -> std::result::Result<(), String> {
        let _ = iface_addr;
        let peer = DevAddr::decode(dev_addr).map_err(|e| e.to_string())?;
        let me = DevAddr::decode(&self.dev_addr).map_err(|e| e.to_string())?;
        if peer.link_layer != me.link_layer {
            return Err(format!(
                "{}: link layer differs from the peer's (RoCE vs InfiniBand)",
                self.device
            ));
        }
        if peer.link_layer == LL_ETHERNET && peer.gid == [0; 16] {
            return Err("peer has no RoCE GID".into());
        }
        if peer.link_layer == LL_INFINIBAND && peer.lid == 0 {
            return Err("peer InfiniBand port has no LID (subnet manager not running?)".into());
        }
        Ok(())
    }
    fn ep_create_connected(&mut self, _dev_addr: &[u8], _iface_addr: &[u8]) -> Result<RcVerbsEp> {
        Err(Error::Unsupported(
            "rc_verbs connects endpoint to endpoint: use ep_create + connect_to_ep".into(),
        ))
    }

    fn ep_create(&mut self) -> Result<RcVerbsEp> {
        let mut inner = self.inner.borrow_mut();
        if inner.eps.len() >= inner.max_eps {
            return Err(Error::NoMemory(format!(
                "{}: at most {} endpoints fit the completion queues (raise RUCX_RC_CQ_LEN)",
                self.device, inner.max_eps
            )));
        }
        let dev = inner.dev.clone();
        let cfg = inner.cfg.clone();
        let qp = Qp::create_rc(
            &dev.pd,
            &inner.send_cq,
            &inner.recv_cq,
            ffi::ibv_qp_cap {
                max_send_wr: cfg.tx_queue_len,
                max_recv_wr: cfg.rx_queue_len,
                max_send_sge: inner.max_send_sge,
                max_recv_sge: 1,
                max_inline_data: inner.max_inline,
            },
        )
        .map_err(|e| Error::NoMemory(format!("ibv_create_qp on {}: {e}", self.device)))?;
        let mut a = ibv_qp_attr {
            qp_state: ffi::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: dev.port,
            qp_access_flags: (ffi::IBV_ACCESS_REMOTE_WRITE
                | ffi::IBV_ACCESS_REMOTE_READ
                | ffi::IBV_ACCESS_REMOTE_ATOMIC) as u32,
            ..Default::default()
        };
        qp.modify(
            &mut a,
            ffi::IBV_QP_STATE
                | ffi::IBV_QP_PKEY_INDEX
                | ffi::IBV_QP_PORT
                | ffi::IBV_QP_ACCESS_FLAGS,
        )
        .map_err(|e| Error::io("rc_verbs QP RESET->INIT", e))?;
        let rx = RegMem::new(
            &dev,
            cfg.rx_queue_len as usize * cfg.seg_size,
            ffi::IBV_ACCESS_LOCAL_WRITE,
            "rc_verbs receive buffers",
        )?;
        let credit = RegMem::new(
            &dev,
            4096,
            ffi::IBV_ACCESS_LOCAL_WRITE | ffi::IBV_ACCESS_REMOTE_WRITE,
            "rc_verbs credit word",
        )?;
        if inner.eps.vacant_key() > u16::MAX as usize {
            return Err(Error::NoMemory("too many rc_verbs endpoints".into()));
        }
        let gen = inner.next_gen;
        inner.next_gen = inner.next_gen.wrapping_add(1).max(1);
        let psn = random_psn(qp.qp_num());
        let sq_depth = qp.cap.max_send_wr.min(cfg.tx_queue_len);
        let key = inner.eps.insert(EpState {
            gen,
            qp,
            rx: Rc::new(RxMem { mem: rx }),
            credit,
            psn,
            remote: None,
            failed: None,
            error_reported: false,
            sq_avail: sq_depth,
            next_seq: 0,
            done_seq: 0,
            unsignaled: 0,
            last_wqe_signaled: true,
            ops: VecDeque::with_capacity(sq_depth as usize + 8),
            fence: false,
            am_sent: 0,
            peer_imm: 0,
            rx_reposted: 0,
            rx_reported: 0,
            rx_free: Vec::with_capacity(RX_POST_BATCH),
            signaled_out: 0,
            pending: VecDeque::with_capacity(64),
        });
        let slots: Vec<u32> = (0..cfg.rx_queue_len).collect();
        if let Err(e) = inner.post_recvs(key, &slots) {
            inner.eps.remove(key);
            return Err(e);
        }
        drop(inner);
        Ok(RcVerbsEp {
            inner: self.inner.clone(),
            key,
            gen,
        })
    }

    fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        // Receives first: in a ping-pong the next message is what the caller waits for. The
        // send CQ only while a completion may be due (see `send_poll_due`).
        let mut buf = [MaybeUninit::<ibv_wc>::uninit(); POLL_BATCH];
        let (wcs, poll_send, attention) = {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            let wcs = take_wcs(&inner.recv_cq, &mut inner.stash_recv, &mut buf, "receive");
            let poll_send = inner.send_poll_due();
            (wcs, poll_send, inner.eps_attention)
        };
        if wcs.is_empty() && !poll_send {
            return if attention {
                self.progress_eps(sink)
            } else {
                0
            };
        }
        let mut count = 0;
        if !wcs.is_empty() {
            count += self.deliver_recvs(wcs, sink);
        }
        if poll_send {
            count += self.progress_send(sink);
        }
        if self.inner.borrow().eps_attention {
            count += self.progress_eps(sink);
        }
        count
    }

    fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
        let mut inner = self.inner.borrow_mut();
        let keys: Vec<usize> = inner
            .eps
            .iter()
            .filter(|(_, e)| e.failed.is_none() && e.next_seq != e.done_seq)
            .map(|(k, _)| k)
            .collect();
        if keys.is_empty() {
            return Ok(Outcome::DONE);
        }
        // Make sure each endpoint's last work request is signaled first.
        for &k in &keys {
            if !inner.eps[k].last_wqe_signaled && inner.eps[k].sq_avail == 0 {
                return Ok(Outcome::NoResource);
            }
        }
        let w = inner.flush_waits.insert(FlushWait {
            comp,
            remaining: keys.len() as u32,
        }) as u32;
        for &k in &keys {
            if let Err(e) = ep_flush_marker(&mut inner, k, TxKind::IfaceFlush(w)) {
                inner.flush_waits.remove(w as usize);
                return Err(e);
            }
        }
        Ok(Outcome::InProgress)
    }

    fn fence(&mut self) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        for (_, ep) in inner.eps.iter_mut() {
            ep.fence = true;
        }
        Ok(())
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.channel_fd)
    }

    fn tag_recv_zcopy(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[crate::md::Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        self.tag_post(tag, mask, iov, ctx)
    }

    fn tag_recv_cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
        crate::iface::TagRecvCancel::cancel(&self.canceler(), ctx, force)
    }

    fn tag_recv_canceler(&self) -> Option<crate::iface::TagRecvCanceler> {
        Some(Rc::new(self.canceler()))
    }

    fn event_arm(&mut self, events: EventFlags) -> Result<()> {
        let _ = events;
        let mut inner = self.inner.borrow_mut();
        inner.channel.drain();
        inner
            .send_cq
            .req_notify()
            .and_then(|_| inner.recv_cq.req_notify())
            .map_err(|e| {
                Error::io(
                    "ibv_req_notify_cq",
                    std::io::Error::from_raw_os_error(e.abs()),
                )
            })?;
        if !inner.stash_send.is_empty() || !inner.stash_recv.is_empty() {
            return Err(Error::Busy("completions are waiting".into()));
        }
        // Completions that arrived before arming raise no event: look for them now.
        let mut wcs = [ibv_wc::default(); POLL_BATCH];
        let n = inner.send_cq.poll(&mut wcs).unwrap_or(0);
        inner.stash_send.extend_from_slice(&wcs[..n]);
        let m = inner.recv_cq.poll(&mut wcs).unwrap_or(0);
        inner.stash_recv.extend_from_slice(&wcs[..m]);
        if n + m > 0 {
            return Err(Error::Busy("completions are waiting".into()));
        }
        if inner.tag.has_work() {
            return Err(Error::Busy("tag offload work is waiting".into()));
        }
        for (_, ep) in inner.eps.iter() {
            if ep.failed.is_some() && !ep.error_reported {
                return Err(Error::Busy("an endpoint error is waiting".into()));
            }
            if !ep.pending.is_empty() {
                return Err(Error::Busy(
                    "pending requests wait for send resources (credits arrive without an event)"
                        .into(),
                ));
            }
            let threshold = inner.credit_threshold();
            if ep.remote.is_some() && ep.rx_reposted - ep.rx_reported >= threshold {
                return Err(Error::Busy("a credit update waits for a send slot".into()));
            }
        }
        Ok(())
    }
}

/// The completions of one poll of `cq` (`what`: for the log), or the ones stashed by
/// `event_arm` first, in `buf`. Always inlined: it runs twice in every progress call.
#[inline(always)]
fn take_wcs<'a>(
    cq: &Cq,
    stash: &mut Vec<ibv_wc>,
    buf: &'a mut [MaybeUninit<ibv_wc>; POLL_BATCH],
    what: &str,
) -> &'a [ibv_wc] {
    if stash.is_empty() {
        return match cq.poll_uninit(buf) {
            Ok(wcs) => wcs,
            Err(e) => {
                tracing::error!(rc = e, "ibv_poll_cq ({what}) failed");
                &[]
            }
        };
    }
    let n = stash.len().min(POLL_BATCH);
    for (d, s) in buf.iter_mut().zip(stash.drain(..n)) {
        d.write(s);
    }
    // SAFETY: the first `n` entries were just written.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<ibv_wc>(), n) }
}

/// A 24-bit PSN that differs between runs and QPs.
fn random_psn(qpn: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ qpn.rotate_left(7) ^ std::process::id().wrapping_mul(2_654_435_761)) & 0xff_ffff
}
