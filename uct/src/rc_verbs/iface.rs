//! rc_verbs interface and endpoints: CQs, bounce buffers, RC QPs, flow control, progress.

use super::ffi::{
    self, ibv_qp_attr, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wc, CompChannel, Cq, Mr, Qp,
};
use super::wire::{AmHdr, DevAddr, EpAddr, LL_ETHERNET, LL_INFINIBAND};
use super::{mem_of, DevPort, RcConfig, RcVerbsMd};
use crate::caps::{AtomicCaps, AtomicOps, EventFlags, IfaceAttr, IfaceFlags, OpLimits, PerfModel};
use crate::ep::{check_am_id, check_len, AtomicOp, CompletionId, Endpoint, EpId, PendingId};
use crate::iface::{EventSink, Iface};
use crate::md::{Iov, RemoteKey};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;
use ucs::{Error, Outcome, Result};

/// Work completions polled at once.
const POLL_BATCH: usize = 16;
/// Largest user header of `am_zcopy`.
const MAX_AM_HDR: usize = 128;
/// Scatter/gather entries requested per send work request.
const MAX_SEND_SGE: u32 = 8;

/// Registered memory owned by the interface or an endpoint (mapping dropped after the MR).
struct RegMem {
    mr: Mr,
    map: memmap2::MmapMut,
}

impl RegMem {
    fn new(dev: &DevPort, len: usize, access: i32, what: &str) -> Result<RegMem> {
        let mut map = memmap2::MmapMut::map_anon(len)
            .map_err(|e| Error::NoMemory(format!("{what}: mmap of {len} bytes: {e}")))?;
        // SAFETY: the mapping lives in the same struct and is dropped after the MR.
        let mr = unsafe { Mr::register(&dev.pd, map.as_mut_ptr(), len, access) }
            .map_err(|e| Error::NoMemory(format!("{what}: ibv_reg_mr of {len} bytes: {e}")))?;
        Ok(RegMem { mr, map })
    }
    fn base(&self) -> *mut u8 {
        self.map.as_ptr() as *mut u8
    }
}

/// What a posted send work request owes when it completes.
#[derive(Debug, Clone, Copy)]
enum TxKind {
    /// Nothing (inline data, credit update).
    Plain,
    /// Free a bounce buffer.
    Buf(u32),
    /// Report a completion.
    Comp(CompletionId),
    /// Free a bounce buffer and report a completion.
    BufComp(u32, CompletionId),
    /// `get_bcopy`: deliver `len` bytes of the buffer, free it, report the completion.
    Get(u32, u32, CompletionId),
    /// Fetching atomic: read the old value from the buffer, free it, report it.
    Fetch(u32, CompletionId),
    /// Endpoint flush marker (no work request of its own when `wqe` is false).
    Flush(CompletionId),
    /// Interface flush marker: one of the endpoints an interface flush waits for.
    IfaceFlush(u32),
}

#[derive(Debug, Clone, Copy)]
struct TxOp {
    seq: u32,
    /// Whether this entry took a send-queue slot.
    wqe: bool,
    kind: TxKind,
}

/// Receive side of an endpoint: buffers, kept alive across a delivery by an `Rc`.
struct RxMem {
    mem: RegMem,
}

struct EpState {
    gen: u16,
    /// Dropped first: destroying the QP stops every access to the memory below.
    qp: Qp,
    rx: Rc<RxMem>,
    /// Word 0: reposted-receive count the peer writes here; word 1: ours, the source we write.
    credit: RegMem,
    psn: u32,
    remote: Option<EpAddr>,
    failed: Option<Error>,
    error_reported: bool,
    sq_avail: u32,
    next_seq: u32,
    unsignaled: u32,
    last_wqe_signaled: bool,
    ops: VecDeque<TxOp>,
    fence: bool,
    am_sent: u64,
    rx_reposted: u64,
    rx_reported: u64,
    pending: VecDeque<PendingId>,
}

impl EpState {
    fn peer_reposted(&self) -> u64 {
        // SAFETY: word 0 of the registered credit page; the peer's NIC writes it, so read it
        // volatile. It is 8-byte aligned (page start).
        unsafe { std::ptr::read_volatile(self.credit.base().cast::<u64>()) }
    }
    fn am_credits(&self) -> u64 {
        let peer = self.remote.map_or(0, |r| r.rx_credits as u64);
        (peer + self.peer_reposted()).saturating_sub(self.am_sent)
    }
    fn status(&self) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.remote.is_none() {
            return Err(Error::InvalidParam(
                "rc_verbs endpoint is not connected yet (call connect_to_ep)".into(),
            ));
        }
        Ok(())
    }
}

struct FlushWait {
    comp: CompletionId,
    remaining: u32,
}

struct Inner {
    dev: Arc<DevPort>,
    md_name: &'static str,
    cfg: RcConfig,
    /// Dropped after every endpoint QP (eps hold no CQ reference, the iface drops eps first).
    eps: slab::Slab<EpState>,
    next_gen: u16,
    tx: RegMem,
    tx_free: Vec<u32>,
    max_inline: u32,
    max_send_sge: u32,
    max_eps: usize,
    flush_waits: slab::Slab<FlushWait>,
    stash_send: Vec<ibv_wc>,
    stash_recv: Vec<ibv_wc>,
    scratch: Vec<usize>,
    recv_cq: Cq,
    send_cq: Cq,
    channel: Arc<CompChannel>,
}

fn wr_id(key: usize, gen: u16, low: u32) -> u64 {
    ((key as u64) << 48) | ((gen as u64) << 32) | low as u64
}
fn split_wr_id(id: u64) -> (usize, u16, u32) {
    ((id >> 48) as usize, (id >> 32) as u16, id as u32)
}
fn ep_id(key: usize, gen: u16) -> EpId {
    EpId(((gen as u32) << 16) | key as u32)
}

/// Maps a failed work completion to an error.
fn wc_error(status: i32, what: &str) -> Error {
    let text = format!("{what}: {}", ffi::wc_status_str(status));
    match status {
        ffi::IBV_WC_REM_ACCESS_ERR | ffi::IBV_WC_LOC_PROT_ERR => Error::RemoteAccess(text),
        ffi::IBV_WC_RETRY_EXC_ERR | ffi::IBV_WC_RNR_RETRY_EXC_ERR => Error::PeerFailure(text),
        ffi::IBV_WC_WR_FLUSH_ERR => Error::ConnectionReset(text),
        _ => Error::PeerFailure(text),
    }
}

impl Inner {
    fn ep(&mut self, key: usize, gen: u16) -> Option<&mut EpState> {
        self.eps.get_mut(key).filter(|e| e.gen == gen)
    }

    fn tx_buf(&self, idx: u32) -> *mut u8 {
        self.tx
            .base()
            .wrapping_add(idx as usize * self.cfg.seg_size)
    }

    /// Posts a send work request on `key`, recording what its completion owes.
    /// `needs_comp` forces a signaled request.
    fn post(
        &mut self,
        key: usize,
        wr: &mut ibv_send_wr,
        kind: TxKind,
        needs_comp: bool,
    ) -> Result<()> {
        let moderation = self.cfg.moderation;
        let ep = &mut self.eps[key];
        let seq = ep.next_seq;
        let signaled = needs_comp || ep.unsignaled + 1 >= moderation || ep.sq_avail <= 1;
        wr.wr_id = wr_id(key, ep.gen, seq);
        if signaled {
            wr.send_flags |= ffi::IBV_SEND_SIGNALED;
        }
        if ep.fence {
            wr.send_flags |= ffi::IBV_SEND_FENCE;
        }
        // SAFETY: every sge points at registered memory that stays valid until completion:
        // bounce buffers are freed only when their op completes; user memory is kept alive by
        // the caller per the zcopy contract; inline data is copied during the call.
        unsafe { ep.qp.post_send(wr) }.map_err(|e| {
            Error::io(
                "ibv_post_send on an rc_verbs endpoint",
                std::io::Error::from_raw_os_error(e),
            )
        })?;
        ep.fence = false;
        ep.next_seq = seq.wrapping_add(1);
        ep.sq_avail -= 1;
        ep.last_wqe_signaled = signaled;
        ep.unsignaled = if signaled { 0 } else { ep.unsignaled + 1 };
        ep.ops.push_back(TxOp {
            seq,
            wqe: true,
            kind,
        });
        Ok(())
    }

    /// Reposts receive buffer `slot` of endpoint `key`.
    fn post_recv(&mut self, key: usize, slot: u32) -> Result<()> {
        let seg = self.cfg.seg_size;
        let ep = &mut self.eps[key];
        let mut sge = ibv_sge {
            addr: ep.rx.mem.base() as u64 + (slot as usize * seg) as u64,
            length: seg as u32,
            lkey: ep.rx.mem.mr.lkey(),
        };
        let mut wr = ibv_recv_wr {
            wr_id: wr_id(key, ep.gen, slot),
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        // SAFETY: the buffer belongs to the endpoint's registered receive region, which lives
        // until the QP is destroyed (the QP is dropped first).
        unsafe { ep.qp.post_recv(&mut wr) }.map_err(|e| {
            Error::io(
                "ibv_post_recv on an rc_verbs endpoint",
                std::io::Error::from_raw_os_error(e),
            )
        })
    }

    /// Writes our reposted-receive count into the peer's credit word when enough accumulated.
    fn maybe_send_credits(&mut self, key: usize, force: bool) {
        let ep = &mut self.eps[key];
        let Some(remote) = ep.remote else { return };
        let unreported = ep.rx_reposted - ep.rx_reported;
        let threshold = (self.cfg.rx_queue_len as u64 / 4).max(1);
        if ep.failed.is_some() || unreported == 0 || (!force && unreported < threshold) {
            return;
        }
        if ep.sq_avail == 0 {
            return; // retried from progress when the send queue drains
        }
        let src = ep.credit.base().wrapping_add(8).cast::<u64>();
        // SAFETY: word 1 of our registered credit page, written only by us; the NIC reads it
        // when it executes the write (any later value is also correct: counts only grow).
        unsafe { std::ptr::write_volatile(src, ep.rx_reposted) };
        let mut sge = ibv_sge {
            addr: src as u64,
            length: 8,
            lkey: ep.credit.mr.lkey(),
        };
        let mut wr = ibv_send_wr {
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ffi::IBV_WR_RDMA_WRITE,
            ..Default::default()
        };
        wr.set_rdma(remote.credit_addr, remote.credit_rkey);
        let reposted = ep.rx_reposted;
        if self.post(key, &mut wr, TxKind::Plain, false).is_ok() {
            self.eps[key].rx_reported = reposted;
        }
    }

    /// Resources for a new operation on `key`: none queued, a send slot, and (for AM) credits.
    fn check_send(&mut self, key: usize, am: bool) -> Result<bool> {
        let ep = &self.eps[key];
        ep.status()?;
        Ok(ep.pending.is_empty() && ep.sq_avail > 0 && (!am || ep.am_credits() > 0))
    }

    fn alloc_buf(&mut self) -> Option<u32> {
        self.tx_free.pop()
    }

    /// Fails an endpoint: remembers the error (reported once by progress).
    fn fail_ep(&mut self, key: usize, err: Error) {
        let ep = &mut self.eps[key];
        if ep.failed.is_none() {
            tracing::debug!(ep = key, %err, "rc_verbs endpoint failed");
            ep.failed = Some(err);
        }
    }

    /// Releases the resources of a completed op; gives what the sink must be told.
    fn retire(&mut self, key: usize, op: TxOp) -> Delivery {
        if op.wqe {
            self.eps[key].sq_avail += 1;
        }
        match op.kind {
            TxKind::Plain => Delivery::None,
            TxKind::Buf(b) => {
                self.tx_free.push(b);
                Delivery::None
            }
            TxKind::Comp(c) | TxKind::Flush(c) => Delivery::Comp(c, 0),
            TxKind::BufComp(b, c) => {
                self.tx_free.push(b);
                Delivery::Comp(c, 0)
            }
            TxKind::Get(b, len, c) => Delivery::Get(b, len, c),
            TxKind::Fetch(b, c) => {
                // SAFETY: the 8-byte result slot of a bounce buffer the NIC has finished with.
                let v = unsafe { std::ptr::read_unaligned(self.tx_buf(b).cast::<u64>()) };
                self.tx_free.push(b);
                Delivery::Comp(c, v)
            }
            TxKind::IfaceFlush(w) => self.iface_flush_done(w),
        }
    }

    fn iface_flush_done(&mut self, w: u32) -> Delivery {
        let Some(wait) = self.flush_waits.get_mut(w as usize) else {
            return Delivery::None;
        };
        wait.remaining -= 1;
        if wait.remaining == 0 {
            let comp = self.flush_waits.remove(w as usize).comp;
            Delivery::Comp(comp, 0)
        } else {
            Delivery::None
        }
    }
}

enum Delivery {
    None,
    Comp(CompletionId, u64),
    Get(u32, u32, CompletionId),
}

/// An rc_verbs interface.
pub struct RcVerbsIface {
    inner: Rc<RefCell<Inner>>,
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
        if max_inline < 9 {
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
            | IfaceFlags::ERRHANDLE_PEER_FAILURE;
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
            tag: Default::default(),
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

    fn progress_recv<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut wcs = [ibv_wc::default(); POLL_BATCH];
        let n = {
            let mut inner = self.inner.borrow_mut();
            if inner.stash_recv.is_empty() {
                match inner.recv_cq.poll(&mut wcs) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::error!(rc = e, "ibv_poll_cq (receive) failed");
                        0
                    }
                }
            } else {
                let n = inner.stash_recv.len();
                wcs[..n].copy_from_slice(&inner.stash_recv);
                inner.stash_recv.clear();
                n
            }
        };
        let mut count = 0;
        for wc in &wcs[..n] {
            let (key, gen, slot) = split_wr_id(wc.wr_id);
            if wc.status != ffi::IBV_WC_SUCCESS {
                let mut inner = self.inner.borrow_mut();
                if inner.ep(key, gen).is_some() {
                    inner.fail_ep(key, wc_error(wc.status, "receive"));
                }
                continue;
            }
            let (rx, seg) = {
                let mut inner = self.inner.borrow_mut();
                let seg = inner.cfg.seg_size;
                match inner.ep(key, gen) {
                    Some(ep) => (ep.rx.clone(), seg),
                    None => continue,
                }
            };
            let len = (wc.byte_len as usize).min(seg);
            // SAFETY: the NIC wrote `len` bytes into this receive buffer and will not touch it
            // until we repost it below; `rx` keeps the memory alive during the callback.
            let data =
                unsafe { std::slice::from_raw_parts(rx.mem.base().add(slot as usize * seg), len) };
            match AmHdr::decode(data) {
                Ok((id, payload)) => {
                    sink.am(id, payload);
                    count += 1;
                }
                Err(e) => tracing::warn!(%e, "malformed rc_verbs active message dropped"),
            }
            let mut inner = self.inner.borrow_mut();
            if inner.ep(key, gen).is_some() {
                match inner.post_recv(key, slot) {
                    Ok(()) => {
                        inner.eps[key].rx_reposted += 1;
                        inner.maybe_send_credits(key, false);
                    }
                    Err(e) => inner.fail_ep(key, e),
                }
            }
        }
        count
    }

    fn progress_send<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut wcs = [ibv_wc::default(); POLL_BATCH];
        let n = {
            let mut inner = self.inner.borrow_mut();
            if inner.stash_send.is_empty() {
                match inner.send_cq.poll(&mut wcs) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::error!(rc = e, "ibv_poll_cq (send) failed");
                        0
                    }
                }
            } else {
                let n = inner.stash_send.len();
                wcs[..n].copy_from_slice(&inner.stash_send);
                inner.stash_send.clear();
                n
            }
        };
        let mut count = 0;
        for wc in &wcs[..n] {
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
                if !ok {
                    inner.fail_ep(key, wc_error(wc.status, "send"));
                }
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
                    let d = inner.retire(key, op);
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
                }
            }
        }
        count
    }

    /// Reports new endpoint errors, sends owed credits, and retries pending requests.
    fn progress_eps<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut keys = std::mem::take(&mut self.inner.borrow_mut().scratch);
        keys.clear();
        keys.extend(self.inner.borrow().eps.iter().map(|(k, _)| k));
        let mut count = 0;
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
                        Some((ep_id(key, ep.gen), e.clone()))
                    }
                    _ => None,
                }
            };
            if let Some((id, e)) = report {
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
            unsignaled: 0,
            last_wqe_signaled: true,
            ops: VecDeque::with_capacity(sq_depth as usize + 8),
            fence: false,
            am_sent: 0,
            rx_reposted: 0,
            rx_reported: 0,
            pending: VecDeque::with_capacity(64),
        });
        for slot in 0..cfg.rx_queue_len {
            if let Err(e) = inner.post_recv(key, slot) {
                inner.eps.remove(key);
                return Err(e);
            }
        }
        drop(inner);
        Ok(RcVerbsEp {
            inner: self.inner.clone(),
            key,
            gen,
        })
    }

    fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut count = self.progress_send(sink);
        count += self.progress_recv(sink);
        count += self.progress_eps(sink);
        count
    }

    fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
        let mut inner = self.inner.borrow_mut();
        let keys: Vec<usize> = inner
            .eps
            .iter()
            .filter(|(_, e)| e.failed.is_none() && e.ops.iter().any(|o| o.wqe))
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
            let threshold = (inner.cfg.rx_queue_len as u64 / 4).max(1);
            if ep.remote.is_some() && ep.rx_reposted - ep.rx_reported >= threshold {
                return Err(Error::Busy("a credit update waits for a send slot".into()));
            }
        }
        Ok(())
    }
}

/// A 24-bit PSN that differs between runs and QPs.
fn random_psn(qpn: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ qpn.rotate_left(7) ^ std::process::id().wrapping_mul(2_654_435_761)) & 0xff_ffff
}

/// Appends a flush marker to endpoint `k`: after its last work request when that one is
/// signaled, else behind a new signaled 8-byte credit write.
fn ep_flush_marker(inner: &mut Inner, k: usize, kind: TxKind) -> Result<()> {
    let ep = &mut inner.eps[k];
    if ep.last_wqe_signaled {
        let seq = ep.next_seq.wrapping_sub(1);
        ep.ops.push_back(TxOp {
            seq,
            wqe: false,
            kind,
        });
        return Ok(());
    }
    let remote = ep
        .remote
        .ok_or_else(|| Error::InvalidParam("rc_verbs endpoint is not connected yet".into()))?;
    // A signaled 8-byte write of our credit count (always valid to repeat) rather than a
    // zero-length write: rxe never retransmits nor times out a zero-length RDMA WRITE whose
    // peer is gone, so the flush would hang instead of failing.
    let src = ep.credit.base().wrapping_add(8).cast::<u64>();
    // SAFETY: word 1 of our registered credit page, written only by us (see maybe_send_credits).
    unsafe { std::ptr::write_volatile(src, ep.rx_reposted) };
    let mut sge = ibv_sge {
        addr: src as u64,
        length: 8,
        lkey: ep.credit.mr.lkey(),
    };
    let mut wr = ibv_send_wr {
        sg_list: &mut sge,
        num_sge: 1,
        opcode: ffi::IBV_WR_RDMA_WRITE,
        ..Default::default()
    };
    wr.set_rdma(remote.credit_addr, remote.credit_rkey);
    let reposted = ep.rx_reposted;
    tracing::trace!(
        ep = k,
        seq = ep.next_seq,
        "rc_verbs flush: signaled credit write"
    );
    inner.post(k, &mut wr, kind, true)?;
    inner.eps[k].rx_reported = reposted;
    Ok(())
}

/// An rc_verbs endpoint: one RC queue pair.
pub struct RcVerbsEp {
    inner: Rc<RefCell<Inner>>,
    key: usize,
    gen: u16,
}

impl Drop for RcVerbsEp {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            if inner.eps.get(self.key).is_some_and(|e| e.gen == self.gen) {
                let ep = inner.eps.remove(self.key);
                for op in &ep.ops {
                    if let TxKind::Buf(b)
                    | TxKind::BufComp(b, _)
                    | TxKind::Get(b, _, _)
                    | TxKind::Fetch(b, _) = op.kind
                    {
                        inner.tx_free.push(b);
                    }
                    if let TxKind::IfaceFlush(w) = op.kind {
                        let _ = inner.iface_flush_done(w);
                    }
                }
                drop(ep); // destroys the QP, then its memory
            }
        }
    }
}

impl RcVerbsEp {
    fn with<T>(&self, f: impl FnOnce(&mut Inner, usize) -> Result<T>) -> Result<T> {
        let mut inner = self.inner.borrow_mut();
        if inner.ep(self.key, self.gen).is_none() {
            return Err(Error::InvalidParam("rc_verbs endpoint is gone".into()));
        }
        f(&mut inner, self.key)
    }

    fn lkey_sges(inner: &Inner, iov: &[Iov<'_>], sges: &mut [ibv_sge]) -> Result<usize> {
        if iov.len() > sges.len() {
            return Err(Error::InvalidParam(format!(
                "{} iov entries exceed this endpoint's limit of {}",
                iov.len(),
                sges.len()
            )));
        }
        for (s, v) in sges.iter_mut().zip(iov) {
            let mem = mem_of(v.memh(), inner.md_name)?;
            *s = ibv_sge {
                addr: v.ptr() as u64,
                length: u32::try_from(v.len())
                    .map_err(|_| Error::InvalidParam("iov entry longer than 4 GiB".into()))?,
                lkey: mem.lkey(),
            };
        }
        Ok(iov.len())
    }

    fn rdma_zcopy(
        &mut self,
        opcode: i32,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome> {
        let len = Iov::total_len(iov);
        rkey.check(remote_addr, len)?;
        self.with(|inner, k| {
            let lim = inner.max_send_sge as usize;
            let mut sges = [ibv_sge::default(); MAX_SEND_SGE as usize];
            let n = Self::lkey_sges(inner, iov, &mut sges[..lim])?;
            if !inner.check_send(k, false)? {
                return Ok(Outcome::NoResource);
            }
            let mut wr = ibv_send_wr {
                sg_list: sges.as_mut_ptr(),
                num_sge: n as i32,
                opcode,
                ..Default::default()
            };
            wr.set_rdma(remote_addr, rkey.tl_value as u32);
            inner.post(k, &mut wr, TxKind::Comp(comp), true)?;
            Ok(Outcome::InProgress)
        })
    }

    fn atomic(
        &mut self,
        opcode: i32,
        compare_add: u64,
        swap: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Option<CompletionId>,
    ) -> Result<Outcome<u64>> {
        rkey.check(remote_addr, 8)?;
        if remote_addr & 7 != 0 {
            return Err(Error::InvalidParam(format!(
                "64-bit atomic target {remote_addr:#x} is not 8-byte aligned"
            )));
        }
        self.with(|inner, k| {
            if inner.dev.dev_attr.atomic_cap == ffi::IBV_ATOMIC_NONE {
                return Err(Error::Unsupported("device has no atomics".into()));
            }
            if !inner.check_send(k, false)? {
                return Ok(Outcome::NoResource);
            }
            let Some(b) = inner.alloc_buf() else {
                return Ok(Outcome::NoResource);
            };
            let mut sge = ibv_sge {
                addr: inner.tx_buf(b) as u64,
                length: 8,
                lkey: inner.tx.mr.lkey(),
            };
            let mut wr = ibv_send_wr {
                sg_list: &mut sge,
                num_sge: 1,
                opcode,
                ..Default::default()
            };
            wr.set_atomic(remote_addr, compare_add, swap, rkey.tl_value as u32);
            let (kind, needs) = match comp {
                Some(c) => (TxKind::Fetch(b, c), true),
                None => (TxKind::Buf(b), false),
            };
            if let Err(e) = inner.post(k, &mut wr, kind, needs) {
                inner.tx_free.push(b);
                return Err(e);
            }
            Ok(if comp.is_some() {
                Outcome::InProgress
            } else {
                Outcome::Done(0)
            })
        })
    }

    fn am_send_sges(
        &mut self,
        sges: &mut [ibv_sge],
        inline: bool,
        kind: TxKind,
        needs: bool,
    ) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        let mut wr = ibv_send_wr {
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as i32,
            opcode: ffi::IBV_WR_SEND,
            send_flags: if inline { ffi::IBV_SEND_INLINE } else { 0 },
            ..Default::default()
        };
        inner.post(self.key, &mut wr, kind, needs)?;
        inner.eps[self.key].am_sent += 1;
        Ok(())
    }
}

fn unsupported_atomic<T>(what: &str) -> Result<T> {
    Err(Error::Unsupported(format!(
        "rc_verbs supports 64-bit fetch-add and compare-swap only, not {what}"
    )))
}

impl Endpoint for RcVerbsEp {
    fn id(&self) -> EpId {
        ep_id(self.key, self.gen)
    }

    fn am_short(&mut self, id: u8, header: u64, payload: &[u8]) -> Result<Outcome> {
        check_am_id(id)?;
        let max = self.inner.borrow().max_inline as usize - AmHdr::LEN;
        check_len(8 + payload.len(), max)?;
        if !self.with(|inner, k| inner.check_send(k, true))? {
            return Ok(Outcome::NoResource);
        }
        let idb = [id];
        let hdr = header.to_le_bytes();
        let mut sges = [
            ibv_sge {
                addr: idb.as_ptr() as u64,
                length: 1,
                lkey: 0,
            },
            ibv_sge {
                addr: hdr.as_ptr() as u64,
                length: 8,
                lkey: 0,
            },
            ibv_sge {
                addr: payload.as_ptr() as u64,
                length: payload.len() as u32,
                lkey: 0,
            },
        ];
        let n = if payload.is_empty() { 2 } else { 3 };
        self.am_send_sges(&mut sges[..n], true, TxKind::Plain, false)?;
        Ok(Outcome::DONE)
    }

    fn am_short_iov(&mut self, id: u8, iov: &[&[u8]]) -> Result<Outcome> {
        check_am_id(id)?;
        let (max, max_sge) = {
            let i = self.inner.borrow();
            (i.max_inline as usize - AmHdr::LEN, i.max_send_sge as usize)
        };
        let total: usize = iov.iter().map(|b| b.len()).sum();
        check_len(total, max)?;
        let parts = iov.iter().filter(|b| !b.is_empty()).count();
        if parts + 1 > max_sge {
            return Err(Error::InvalidParam(format!(
                "{parts} iov entries exceed the limit of {}",
                max_sge - 1
            )));
        }
        if !self.with(|inner, k| inner.check_send(k, true))? {
            return Ok(Outcome::NoResource);
        }
        let idb = [id];
        let mut sges = [ibv_sge::default(); MAX_SEND_SGE as usize];
        sges[0] = ibv_sge {
            addr: idb.as_ptr() as u64,
            length: 1,
            lkey: 0,
        };
        let mut n = 1;
        for b in iov.iter().filter(|b| !b.is_empty()) {
            sges[n] = ibv_sge {
                addr: b.as_ptr() as u64,
                length: b.len() as u32,
                lkey: 0,
            };
            n += 1;
        }
        self.am_send_sges(&mut sges[..n], true, TxKind::Plain, false)?;
        Ok(Outcome::DONE)
    }

    fn am_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        id: u8,
        pack: F,
    ) -> Result<Outcome<usize>> {
        check_am_id(id)?;
        let (b, buf, seg, lkey) = {
            let mut inner = self.inner.borrow_mut();
            if inner.ep(self.key, self.gen).is_none() {
                return Err(Error::InvalidParam("rc_verbs endpoint is gone".into()));
            }
            if !inner.check_send(self.key, true)? {
                return Ok(Outcome::NoResource);
            }
            let Some(b) = inner.alloc_buf() else {
                return Ok(Outcome::NoResource);
            };
            (b, inner.tx_buf(b), inner.cfg.seg_size, inner.tx.mr.lkey())
        };
        // SAFETY: bounce buffer `b` is ours until its send completes; no borrow of the inner
        // state is held while `pack` runs.
        let slice = unsafe { std::slice::from_raw_parts_mut(buf, seg) };
        slice[0] = id;
        let len = pack(&mut slice[AmHdr::LEN..]);
        if len > seg - AmHdr::LEN {
            self.inner.borrow_mut().tx_free.push(b);
            return Err(Error::MessageTooLong {
                len,
                max: seg - AmHdr::LEN,
            });
        }
        let mut sge = [ibv_sge {
            addr: buf as u64,
            length: (len + AmHdr::LEN) as u32,
            lkey,
        }];
        if let Err(e) = self.am_send_sges(&mut sge, false, TxKind::Buf(b), false) {
            self.inner.borrow_mut().tx_free.push(b);
            return Err(e);
        }
        Ok(Outcome::Done(len))
    }

    fn am_zcopy(
        &mut self,
        id: u8,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        check_am_id(id)?;
        check_len(header.len(), MAX_AM_HDR)?;
        let total = Iov::total_len(iov);
        let key = self.key;
        let r = self.with(|inner, k| {
            let seg = inner.cfg.seg_size;
            check_len(total, seg - AmHdr::LEN - MAX_AM_HDR)?;
            let lim = inner.max_send_sge as usize;
            let mut sges = [ibv_sge::default(); MAX_SEND_SGE as usize];
            let n = Self::lkey_sges(inner, iov, &mut sges[1..lim])?;
            if !inner.check_send(k, true)? {
                return Ok(None);
            }
            let Some(b) = inner.alloc_buf() else {
                return Ok(None);
            };
            let buf = inner.tx_buf(b);
            // SAFETY: bounce buffer `b` is ours; the header fits (checked above).
            unsafe {
                *buf = id;
                std::ptr::copy_nonoverlapping(header.as_ptr(), buf.add(1), header.len());
            }
            sges[0] = ibv_sge {
                addr: buf as u64,
                length: (AmHdr::LEN + header.len()) as u32,
                lkey: inner.tx.mr.lkey(),
            };
            let mut wr = ibv_send_wr {
                sg_list: sges.as_mut_ptr(),
                num_sge: (n + 1) as i32,
                opcode: ffi::IBV_WR_SEND,
                ..Default::default()
            };
            if let Err(e) = inner.post(k, &mut wr, TxKind::BufComp(b, comp), true) {
                inner.tx_free.push(b);
                return Err(e);
            }
            inner.eps[key].am_sent += 1;
            Ok(Some(()))
        })?;
        Ok(match r {
            Some(()) => Outcome::InProgress,
            None => Outcome::NoResource,
        })
    }

    fn put_short(&mut self, data: &[u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        rkey.check(remote_addr, data.len())?;
        self.with(|inner, k| {
            check_len(data.len(), inner.max_inline as usize)?;
            if !inner.check_send(k, false)? {
                return Ok(Outcome::NoResource);
            }
            let mut sge = ibv_sge {
                addr: data.as_ptr() as u64,
                length: data.len() as u32,
                lkey: 0,
            };
            let mut wr = ibv_send_wr {
                sg_list: &mut sge,
                num_sge: 1,
                opcode: ffi::IBV_WR_RDMA_WRITE,
                send_flags: ffi::IBV_SEND_INLINE,
                ..Default::default()
            };
            wr.set_rdma(remote_addr, rkey.tl_value as u32);
            inner.post(k, &mut wr, TxKind::Plain, false)?;
            Ok(Outcome::DONE)
        })
    }

    fn put_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        pack: F,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome<usize>> {
        let (b, buf, seg, lkey) = {
            let mut inner = self.inner.borrow_mut();
            if inner.ep(self.key, self.gen).is_none() {
                return Err(Error::InvalidParam("rc_verbs endpoint is gone".into()));
            }
            if !inner.check_send(self.key, false)? {
                return Ok(Outcome::NoResource);
            }
            let Some(b) = inner.alloc_buf() else {
                return Ok(Outcome::NoResource);
            };
            (b, inner.tx_buf(b), inner.cfg.seg_size, inner.tx.mr.lkey())
        };
        // SAFETY: bounce buffer `b` is ours until its write completes; no borrow is held.
        let slice = unsafe { std::slice::from_raw_parts_mut(buf, seg) };
        let len = pack(slice);
        let bad = if len > seg {
            Some(Error::MessageTooLong { len, max: seg })
        } else {
            rkey.check(remote_addr, len).err()
        };
        let mut inner = self.inner.borrow_mut();
        if let Some(e) = bad {
            inner.tx_free.push(b);
            return Err(e);
        }
        let mut sge = ibv_sge {
            addr: buf as u64,
            length: len as u32,
            lkey,
        };
        let mut wr = ibv_send_wr {
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ffi::IBV_WR_RDMA_WRITE,
            ..Default::default()
        };
        wr.set_rdma(remote_addr, rkey.tl_value as u32);
        if let Err(e) = inner.post(self.key, &mut wr, TxKind::Buf(b), false) {
            inner.tx_free.push(b);
            return Err(e);
        }
        Ok(Outcome::Done(len))
    }

    fn put_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome> {
        self.rdma_zcopy(ffi::IBV_WR_RDMA_WRITE, iov, remote_addr, rkey, comp)
    }

    fn get_bcopy(
        &mut self,
        len: usize,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
        unpack: &mut dyn FnMut(&[u8]),
    ) -> Result<Outcome> {
        let _ = unpack; // data arrive later through EventSink::get_bcopy_data
        rkey.check(remote_addr, len)?;
        self.with(|inner, k| {
            check_len(len, inner.cfg.seg_size)?;
            if !inner.check_send(k, false)? {
                return Ok(Outcome::NoResource);
            }
            let Some(b) = inner.alloc_buf() else {
                return Ok(Outcome::NoResource);
            };
            let mut sge = ibv_sge {
                addr: inner.tx_buf(b) as u64,
                length: len as u32,
                lkey: inner.tx.mr.lkey(),
            };
            let mut wr = ibv_send_wr {
                sg_list: &mut sge,
                num_sge: 1,
                opcode: ffi::IBV_WR_RDMA_READ,
                ..Default::default()
            };
            wr.set_rdma(remote_addr, rkey.tl_value as u32);
            if let Err(e) = inner.post(k, &mut wr, TxKind::Get(b, len as u32, comp), true) {
                inner.tx_free.push(b);
                return Err(e);
            }
            Ok(Outcome::InProgress)
        })
    }

    fn get_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome> {
        self.rdma_zcopy(ffi::IBV_WR_RDMA_READ, iov, remote_addr, rkey, comp)
    }

    fn atomic32_post(&mut self, _: AtomicOp, _: u32, _: u64, _: &RemoteKey) -> Result<Outcome> {
        unsupported_atomic("32-bit atomics")
    }
    fn atomic32_fetch(
        &mut self,
        _: AtomicOp,
        _: u32,
        _: u64,
        _: &RemoteKey,
        _: CompletionId,
    ) -> Result<Outcome<u32>> {
        unsupported_atomic("32-bit atomics")
    }
    fn atomic_cswap32(
        &mut self,
        _: u32,
        _: u32,
        _: u64,
        _: &RemoteKey,
        _: CompletionId,
    ) -> Result<Outcome<u32>> {
        unsupported_atomic("32-bit atomics")
    }

    fn atomic64_post(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        if op != AtomicOp::Add {
            return unsupported_atomic(&format!("{op:?}"));
        }
        Ok(self
            .atomic(
                ffi::IBV_WR_ATOMIC_FETCH_AND_ADD,
                value,
                0,
                remote_addr,
                rkey,
                None,
            )?
            .unit())
    }

    fn atomic64_fetch(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        if op != AtomicOp::Add {
            return unsupported_atomic(&format!("fetching {op:?}"));
        }
        self.atomic(
            ffi::IBV_WR_ATOMIC_FETCH_AND_ADD,
            value,
            0,
            remote_addr,
            rkey,
            Some(comp),
        )
    }

    fn atomic_cswap64(
        &mut self,
        compare: u64,
        swap: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        self.atomic(
            ffi::IBV_WR_ATOMIC_CMP_AND_SWP,
            compare,
            swap,
            remote_addr,
            rkey,
            Some(comp),
        )
    }

    fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
        self.with(|inner, k| {
            let ep = &inner.eps[k];
            if let Some(e) = &ep.failed {
                return Err(e.clone());
            }
            if !ep.ops.iter().any(|o| o.wqe) {
                return Ok(Outcome::DONE);
            }
            if !ep.last_wqe_signaled && ep.sq_avail == 0 {
                return Ok(Outcome::NoResource);
            }
            ep_flush_marker(inner, k, TxKind::Flush(comp))?;
            Ok(Outcome::InProgress)
        })
    }

    fn fence(&mut self) -> Result<()> {
        self.with(|inner, k| {
            inner.eps[k].fence = true;
            Ok(())
        })
    }

    fn pending_add(&mut self, req: PendingId) -> Result<()> {
        self.with(|inner, k| {
            let ep = &mut inner.eps[k];
            ep.status()?;
            if ep.pending.is_empty() && ep.sq_avail > 0 && ep.am_credits() > 0 {
                return Err(Error::Busy(
                    "send resources are available: retry now".into(),
                ));
            }
            ep.pending.push_back(req);
            Ok(())
        })
    }

    fn pending_purge(&mut self, f: &mut dyn FnMut(PendingId)) {
        let reqs: Vec<PendingId> = {
            let mut inner = self.inner.borrow_mut();
            match inner.ep(self.key, self.gen) {
                Some(ep) => ep.pending.drain(..).collect(),
                None => Vec::new(),
            }
        };
        for r in reqs {
            f(r);
        }
    }

    fn ep_address(&self) -> Result<Vec<u8>> {
        let inner = self.inner.borrow();
        let ep = inner
            .eps
            .get(self.key)
            .filter(|e| e.gen == self.gen)
            .ok_or_else(|| Error::InvalidParam("rc_verbs endpoint is gone".into()))?;
        Ok(EpAddr {
            qpn: ep.qp.qp_num(),
            psn: ep.psn,
            credit_addr: ep.credit.base() as u64,
            credit_rkey: ep.credit.mr.rkey(),
            rx_credits: inner.cfg.rx_queue_len.min(u16::MAX as u32) as u16,
            mtu: inner.dev.port_attr.active_mtu.clamp(1, 5) as u8,
        }
        .encode()
        .to_vec())
    }

    fn connect_to_ep(&mut self, dev_addr: &[u8], ep_addr: &[u8]) -> Result<()> {
        let dev = DevAddr::decode(dev_addr)?;
        let remote = EpAddr::decode(ep_addr)?;
        self.with(|inner, k| {
            let d = inner.dev.clone();
            let cfg = inner.cfg.clone();
            let ep = &mut inner.eps[k];
            if ep.remote.is_some() {
                return Err(Error::InvalidParam(
                    "rc_verbs endpoint is already connected".into(),
                ));
            }
            let my_ll = if d.is_roce() {
                LL_ETHERNET
            } else {
                LL_INFINIBAND
            };
            if dev.link_layer != my_ll {
                return Err(Error::Unreachable(
                    "peer port has another link layer (RoCE vs InfiniBand)".into(),
                ));
            }
            let mut ah = ffi::ibv_ah_attr {
                dlid: dev.lid,
                port_num: d.port,
                ..Default::default()
            };
            if d.is_roce() {
                ah.is_global = 1;
                ah.grh = ffi::ibv_global_route {
                    dgid: ffi::ibv_gid { raw: dev.gid },
                    flow_label: 0,
                    sgid_index: d.gid_index as u8,
                    hop_limit: 64,
                    traffic_class: 0,
                };
            }
            let rd_atom = d.dev_attr.max_qp_rd_atom.clamp(1, 16) as u8;
            let init_rd_atom = d.dev_attr.max_qp_init_rd_atom.clamp(1, 16) as u8;
            let mtu = (d.port_attr.active_mtu.clamp(1, 5) as u8).min(remote.mtu);
            let mut a = ibv_qp_attr {
                qp_state: ffi::IBV_QPS_RTR,
                path_mtu: mtu as i32,
                dest_qp_num: remote.qpn,
                rq_psn: remote.psn,
                max_dest_rd_atomic: rd_atom,
                min_rnr_timer: 12,
                ah_attr: ah,
                ..Default::default()
            };
            ep.qp
                .modify(
                    &mut a,
                    ffi::IBV_QP_STATE
                        | ffi::IBV_QP_AV
                        | ffi::IBV_QP_PATH_MTU
                        | ffi::IBV_QP_DEST_QPN
                        | ffi::IBV_QP_RQ_PSN
                        | ffi::IBV_QP_MAX_DEST_RD_ATOMIC
                        | ffi::IBV_QP_MIN_RNR_TIMER,
                )
                .map_err(|e| {
                    Error::io("rc_verbs QP INIT->RTR (is the peer's GID reachable?)", e)
                })?;
            let mut a = ibv_qp_attr {
                qp_state: ffi::IBV_QPS_RTS,
                timeout: cfg.timeout,
                retry_cnt: cfg.retry_count,
                rnr_retry: cfg.rnr_retry,
                sq_psn: ep.psn,
                max_rd_atomic: init_rd_atom,
                ..Default::default()
            };
            ep.qp
                .modify(
                    &mut a,
                    ffi::IBV_QP_STATE
                        | ffi::IBV_QP_TIMEOUT
                        | ffi::IBV_QP_RETRY_CNT
                        | ffi::IBV_QP_RNR_RETRY
                        | ffi::IBV_QP_SQ_PSN
                        | ffi::IBV_QP_MAX_QP_RD_ATOMIC,
                )
                .map_err(|e| Error::io("rc_verbs QP RTR->RTS", e))?;
            ep.remote = Some(remote);
            Ok(())
        })
    }
}
