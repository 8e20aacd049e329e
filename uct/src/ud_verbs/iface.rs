//! ud_verbs interface: opens the UD queue pair, its CQs and buffer pools, creates and pairs
//! endpoints, and progresses received datagrams, acknowledgements, timers, pending requests,
//! flushes and endpoint failures.

use super::ep::UdVerbsEp;
use super::state::*;
use super::wire::{self, Creq, Hdr, IfaceAddr, Kind, FLAG_ACK_REQ, FLAG_NAK, NO_EP};
use super::UdConfig;
use crate::caps::{EventFlags, IfaceAttr, IfaceFlags, OpLimits, PerfModel};
use crate::ep::{CompletionId, AM_ID_MAX};
use crate::iface::{EventSink, Iface};
use crate::rc_verbs::ffi::{self, ibv_qp_attr, ibv_wc, CompChannel, Cq, Qp};
use crate::rc_verbs::wire::{DevAddr, LL_ETHERNET, LL_INFINIBAND};
use crate::rc_verbs::{RcVerbsMd, RegMem};
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Duration;
use ucs::time::{Clock, MonotonicClock};
use ucs::{Error, Outcome, Result};

/// A ud_verbs interface.
pub struct UdVerbsIface {
    pub(super) inner: Rc<RefCell<Inner>>,
    attr: IfaceAttr,
    device: String,
    dev_addr: [u8; DevAddr::LEN],
    iface_addr: [u8; IfaceAddr::LEN],
    channel_fd: RawFd,
    /// Completions found by `event_arm`, handed to the next progress call.
    stash: Vec<ibv_wc>,
    /// Endpoint keys walked by `progress_attention` (capacity kept).
    scratch: Vec<usize>,
}

impl UdVerbsIface {
    pub(super) fn open(md: &RcVerbsMd, device: &str, cfg: UdConfig) -> Result<Self> {
        let dev = md.dev.clone();
        let (name, port) = crate::rc_verbs::split_device(device)?;
        if name != dev.ctx().name() || port != dev.port {
            return Err(Error::InvalidParam(format!(
                "interface device {device} does not belong to memory domain {}:{}",
                dev.ctx().name(),
                dev.port
            )));
        }
        if dev.port_attr.state != ffi::IBV_PORT_ACTIVE {
            return Err(Error::NoDevice(format!("{device} is not active")));
        }
        let ctx = dev.ctx().clone();
        let da = &dev.dev_attr;
        let seg = ffi::mtu_bytes(dev.port_attr.active_mtu);
        if seg < 256 {
            return Err(Error::NoDevice(format!(
                "{device}: active MTU {seg} is too small for ud_verbs"
            )));
        }
        let sq = cfg.tx_queue_len.min(da.max_qp_wr.max(16) as u32);
        let rq = cfg.rx_queue_len.min(da.max_qp_wr.max(16) as u32);
        let channel = CompChannel::create(&ctx).map_err(Error::NoDevice)?;
        let send_cq = Cq::create(&ctx, sq, Some(&channel)).map_err(Error::NoDevice)?;
        let recv_cq = Cq::create(&ctx, rq, Some(&channel)).map_err(Error::NoDevice)?;
        let qp = Qp::create_ud(
            &dev.pd,
            &send_cq,
            &recv_cq,
            ffi::ibv_qp_cap {
                max_send_wr: sq,
                max_recv_wr: rq,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: (MAX_SHORT + Hdr::LEN + 1) as u32,
            },
        )
        .map_err(|e| Error::NoDevice(format!("creating a UD QP on {device}: {e}")))?;
        let max_inline = qp.cap.max_inline_data;
        if (max_inline as usize) < Hdr::LEN + Creq::LEN {
            return Err(Error::NoDevice(format!(
                "{device} grants only {max_inline} bytes of inline data to a UD QP"
            )));
        }
        let mut a = ibv_qp_attr {
            qp_state: ffi::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: dev.port,
            qkey: QKEY,
            ..Default::default()
        };
        qp.modify(
            &mut a,
            ffi::IBV_QP_STATE | ffi::IBV_QP_PKEY_INDEX | ffi::IBV_QP_PORT | ffi::IBV_QP_QKEY,
        )
        .map_err(|e| Error::io("ud_verbs QP RESET->INIT", e))?;
        let mut a = ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTR,
            ..Default::default()
        };
        qp.modify(&mut a, ffi::IBV_QP_STATE)
            .map_err(|e| Error::io("ud_verbs QP INIT->RTR", e))?;
        let mut a = ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTS,
            sq_psn: 0,
            ..Default::default()
        };
        qp.modify(&mut a, ffi::IBV_QP_STATE | ffi::IBV_QP_SQ_PSN)
            .map_err(|e| Error::io("ud_verbs QP RTR->RTS", e))?;
        let tx = RegMem::new(
            &dev,
            cfg.tx_bufs as usize * seg,
            ffi::IBV_ACCESS_LOCAL_WRITE,
            "ud_verbs send buffers",
        )?;
        let rx_seg = GRH_LEN + seg;
        let rx = RegMem::new(
            &dev,
            rq as usize * rx_seg,
            ffi::IBV_ACCESS_LOCAL_WRITE,
            "ud_verbs receive buffers",
        )?;
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
        let qpn = qp.qp_num();
        let bw = dev.bandwidth();
        let attr = IfaceAttr {
            flags: IfaceFlags::AM_SHORT
                | IfaceFlags::AM_BCOPY
                | IfaceFlags::PENDING
                | IfaceFlags::CONNECT_TO_IFACE
                | IfaceFlags::ERRHANDLE_PEER_FAILURE,
            event_flags: EventFlags::SEND_COMP | EventFlags::RECV | EventFlags::FD,
            am: OpLimits {
                max_short: MAX_SHORT,
                max_bcopy: seg - Hdr::LEN - 1,
                max_iov: 8,
                ..Default::default()
            },
            device_addr_len: DevAddr::LEN,
            iface_addr_len: IfaceAddr::LEN,
            perf: PerfModel {
                send_overhead: 100e-9,
                recv_overhead: 100e-9,
                bandwidth: if bw > 0.0 { bw * 0.9 } else { 1e9 },
                latency: if dev.is_roce() { 1.5e-6 } else { 0.8e-6 },
            },
            ..Default::default()
        };
        let channel_fd = channel.fd();
        let fault = cfg.drop.map(|(share, seed)| FaultDrop {
            rng: ucs::random::SeededRng::new(seed ^ qpn as u64),
            share,
            dropped: 0,
        });
        let mut inner = Inner {
            qp,
            eps: slab::Slab::new(),
            peers: HashMap::new(),
            dev,
            next_gen: 1,
            tx,
            tx_free: (0..cfg.tx_bufs).rev().collect(),
            rx: Rc::new(rx),
            rx_free: Vec::with_capacity(RX_POST_BATCH),
            seg,
            rx_seg,
            max_inline,
            sq_depth: sq as u64,
            sq_posted: 0,
            sq_done: 0,
            sq_signaled: 0,
            dev_addr,
            qpn,
            clock: Rc::new(MonotonicClock::new()),
            next_deadline: None,
            acks_owed: Vec::with_capacity(POLL_BATCH),
            attention: false,
            iface_flushes: Vec::new(),
            fault,
            cfg,
            recv_cq,
            send_cq,
            channel,
        };
        let slots: Vec<u32> = (0..rq).collect();
        inner.post_recvs(&slots)?;
        Ok(UdVerbsIface {
            inner: Rc::new(RefCell::new(inner)),
            attr,
            device: device.to_owned(),
            dev_addr,
            iface_addr: IfaceAddr { qpn }.encode(),
            channel_fd,
            stash: Vec::with_capacity(POLL_BATCH),
            scratch: Vec::new(),
        })
    }

    /// Replaces the clock the timers read (tests move a `ucs::time::ManualClock` by hand).
    #[doc(hidden)]
    pub fn set_clock(&mut self, clock: Rc<dyn Clock>) {
        self.inner.borrow_mut().clock = clock;
    }

    /// Datagrams dropped on purpose so far (`RUCX_UD_FAULT_DROP`).
    pub fn fault_dropped(&self) -> u64 {
        self.inner.borrow().fault.as_ref().map_or(0, |f| f.dropped)
    }

    /// Handles received datagrams; gives the active messages delivered.
    fn handle_recvs<S: EventSink>(&mut self, wcs: &[ibv_wc], sink: &mut S) -> usize {
        let (rx, rx_seg, now) = {
            let g = self.inner.borrow();
            (g.rx.clone(), g.rx_seg, g.clock.now_coarse())
        };
        let mut count = 0;
        for wc in wcs {
            let slot = wc.wr_id as u32;
            let len = (wc.byte_len as usize).min(rx_seg);
            if wc.status != ffi::IBV_WC_SUCCESS || len < GRH_LEN + Hdr::LEN {
                if wc.status != ffi::IBV_WC_SUCCESS {
                    tracing::warn!(status = ffi::wc_status_str(wc.status), "ud_verbs receive");
                }
                self.inner.borrow_mut().recv_done(slot);
                continue;
            }
            // SAFETY: the NIC wrote `len` bytes into receive buffer `slot`, which is reposted
            // only after this datagram was handled; `rx` keeps the region alive.
            let data = unsafe {
                std::slice::from_raw_parts(
                    rx.base().add(slot as usize * rx_seg + GRH_LEN),
                    len - GRH_LEN,
                )
            };
            let deliver = {
                let mut g = self.inner.borrow_mut();
                let inner = &mut *g;
                let dropped = inner.fault.as_mut().is_some_and(|f| {
                    let d = f.rng.chance(f.share);
                    f.dropped += d as u64;
                    d
                });
                if dropped {
                    None
                } else {
                    match handle_datagram(inner, wc.src_qp, data, now) {
                        Ok(d) => d,
                        Err(e) => {
                            tracing::warn!(%e, "malformed ud_verbs datagram dropped");
                            None
                        }
                    }
                }
            };
            if let Some(body) = deliver {
                match body.split_first() {
                    Some((&id, payload)) if id < AM_ID_MAX => {
                        sink.am(id, payload);
                        count += 1;
                    }
                    // A liveness probe (`Endpoint::check`): sequenced, acknowledged, no message.
                    None => {}
                    Some((&id, _)) => {
                        tracing::warn!(id, "ud_verbs active message with an invalid id dropped")
                    }
                }
            }
            self.inner.borrow_mut().recv_done(slot);
        }
        count
    }

    /// Reports endpoint errors, completes flushes, and retries pending requests.
    #[inline(never)]
    fn progress_attention<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut keys = std::mem::take(&mut self.scratch);
        keys.clear();
        {
            let mut inner = self.inner.borrow_mut();
            inner.attention = false;
            keys.extend(inner.eps.iter().map(|(k, _)| k));
        }
        let mut count = 0;
        for &key in &keys {
            // A failure: its flushes complete with the error, then the error, once.
            loop {
                let next = {
                    let mut inner = self.inner.borrow_mut();
                    let Some(ep) = inner.eps.get_mut(key) else {
                        break;
                    };
                    match (&ep.failed, ep.error_reported) {
                        (Some(e), false) => match ep.flushes.pop_front() {
                            Some(c) => Some((Err(e.clone()), Some(c))),
                            None => {
                                ep.error_reported = true;
                                let user = ep.user;
                                let e = e.clone();
                                user.then_some((Err(e), None))
                            }
                        },
                        (None, _) if ep.tx.is_empty() => {
                            ep.flushes.pop_front().map(|c| (Ok(()), Some(c)))
                        }
                        _ => None,
                    }
                };
                match next {
                    Some((r, Some(c))) => sink.completion(c, r.map(|()| 0)),
                    Some((Err(e), None)) => {
                        let id = self.inner.borrow().sink_id(key);
                        sink.ep_error(id, e);
                    }
                    _ => break,
                }
                count += 1;
            }
            // Pending requests while resources last.
            loop {
                let next = {
                    let mut inner = self.inner.borrow_mut();
                    let ready = inner.eps.get(key).is_some_and(|ep| {
                        ep.failed.is_none() && ep.dest != NO_EP && !ep.tx.is_full()
                    }) && !inner.tx_free.is_empty();
                    if !ready {
                        break;
                    }
                    let id = inner.sink_id(key);
                    match inner.eps[key].pending.pop_front() {
                        Some(req) => (id, req),
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
            let mut inner = self.inner.borrow_mut();
            if inner.eps.get(key).is_some_and(|ep| {
                ep.failed.is_none() && (!ep.pending.is_empty() || !ep.flushes.is_empty())
            }) {
                inner.attention = true;
            }
        }
        self.scratch = keys;
        // Interface flushes: every endpoint's window empty.
        loop {
            let c = {
                let mut inner = self.inner.borrow_mut();
                if inner.iface_flushes.is_empty() {
                    break;
                }
                if inner.eps.iter().any(|(_, e)| !e.tx.is_empty()) {
                    inner.attention = true;
                    break;
                }
                inner.iface_flushes.remove(0)
            };
            sink.completion(c, Ok(0));
            count += 1;
        }
        count
    }
}

/// Handles one datagram from QP `src_qp` at `now`; gives the body of an active message to
/// deliver (AM id and payload) when it is the next in order.
fn handle_datagram<'a>(
    inner: &mut Inner,
    src_qp: u32,
    data: &'a [u8],
    now: Duration,
) -> Result<Option<&'a [u8]>> {
    let (h, body) = Hdr::decode(data)?;
    if h.kind == Kind::Creq {
        on_creq(inner, src_qp, &Creq::decode(body)?)?;
        return Ok(None);
    }
    let (key, gen) = split_ep_id(h.dest);
    let ok = inner
        .ep(key, gen)
        .is_some_and(|ep| ep.remote_qpn == src_qp && ep.failed.is_none());
    if !ok {
        tracing::trace!(
            dest = h.dest,
            src_qp,
            "ud_verbs datagram for no endpoint dropped"
        );
        return Ok(None);
    }
    match h.kind {
        Kind::Crep => {
            let peer_ep = wire::decode_crep(body)?;
            let ep = &mut inner.eps[key];
            if ep.dest == NO_EP {
                ep.dest = peer_ep;
                ep.conn_deadline = None;
                ep.conn_tries = 0;
                inner.attention = true;
            }
            Ok(None)
        }
        Kind::Ack => {
            inner.on_ack(key, h.ack, now);
            if h.flags & FLAG_NAK != 0 {
                inner.resend(key);
            }
            Ok(None)
        }
        Kind::Data => {
            inner.on_ack(key, h.ack, now);
            let ep = &mut inner.eps[key];
            let verdict = ep.rx.on_data(h.psn);
            let asked = h.flags & FLAG_ACK_REQ != 0;
            match verdict {
                super::proto::Verdict::Deliver => {
                    if asked || ep.rx.unacked >= ACK_EVERY {
                        inner.owe_ack(key, false);
                    } else if ep.ack_since.is_none() {
                        ep.ack_since = Some(now);
                        inner.arm(now + ACK_DELAY);
                    }
                    Ok(Some(body))
                }
                super::proto::Verdict::Duplicate => {
                    inner.owe_ack(key, false);
                    Ok(None)
                }
                super::proto::Verdict::Gap(nak) => {
                    if nak || asked {
                        inner.owe_ack(key, nak);
                    }
                    Ok(None)
                }
            }
        }
        Kind::Creq => Ok(None),
    }
}

/// A connection request: pairs it with our endpoint of the same connection number towards
/// the asker (made now if there is none) and answers with that endpoint's id.
fn on_creq(inner: &mut Inner, src_qp: u32, creq: &Creq) -> Result<()> {
    let dev = DevAddr::decode(&creq.dev_addr)?;
    if creq.iface.qpn != src_qp {
        return Err(Error::Wire(format!(
            "ud_verbs connection request names QPN {:#x} but came from {src_qp:#x}",
            creq.iface.qpn
        )));
    }
    let peer: PeerKey = (dev.gid, creq.iface.qpn);
    let existing = inner
        .peers
        .get(&peer)
        .and_then(|p| p.by_sn.get(&creq.conn_sn))
        .copied();
    let key = match existing {
        Some(k) => {
            let ep = &mut inner.eps[k];
            if ep.dest == NO_EP {
                ep.dest = creq.src_ep;
                ep.conn_deadline = None;
                ep.conn_tries = 0;
                inner.attention = true;
            } else if ep.dest != creq.src_ep {
                return Err(Error::Wire(format!(
                    "ud_verbs connection request {} for an endpoint paired with another",
                    creq.conn_sn
                )));
            }
            k
        }
        None => inner.new_ep(&dev, peer, creq.conn_sn, creq.src_ep, false)?,
    };
    let me = ep_id(key, inner.eps[key].gen);
    inner.send_ctrl(key, Kind::Crep, 0, creq.src_ep, &me.to_le_bytes());
    Ok(())
}

impl Iface for UdVerbsIface {
    type Ep = UdVerbsEp;

    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn tl_name(&self) -> &'static str {
        "ud_verbs"
    }
    fn device_name(&self) -> &str {
        &self.device
    }
    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }
    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }
    fn is_reachable(
        &self,
        dev_addr: &[u8],
        iface_addr: Option<&[u8]>,
    ) -> std::result::Result<(), String> {
        let peer = DevAddr::decode(dev_addr).map_err(|e| e.to_string())?;
        if let Some(ia) = iface_addr {
            IfaceAddr::decode(ia).map_err(|e| e.to_string())?;
        }
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

    fn ep_create_connected(&mut self, dev_addr: &[u8], iface_addr: &[u8]) -> Result<UdVerbsEp> {
        let dev = DevAddr::decode(dev_addr)?;
        let ia = IfaceAddr::decode(iface_addr)?;
        let peer: PeerKey = (dev.gid, ia.qpn);
        let mut inner = self.inner.borrow_mut();
        let conns = inner.peers.entry(peer).or_default();
        let sn = conns.next_sn;
        conns.next_sn += 1;
        let made = conns.by_sn.get(&sn).copied();
        let key = match made {
            Some(k) if !inner.eps[k].user => {
                // Made for the peer's connection request: adopt it.
                inner.eps[k].user = true;
                k
            }
            _ => {
                let k = inner.new_ep(&dev, peer, sn, NO_EP, true)?;
                inner.send_creq(k);
                k
            }
        };
        let gen = inner.eps[key].gen;
        Ok(UdVerbsEp {
            inner: self.inner.clone(),
            key,
            gen,
        })
    }

    fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut buf = [MaybeUninit::<ibv_wc>::uninit(); POLL_BATCH];
        let wcs: &[ibv_wc] = if self.stash.is_empty() {
            let g = self.inner.borrow();
            match g.recv_cq.poll_uninit(&mut buf) {
                Ok(w) => w,
                Err(e) => {
                    tracing::error!(rc = e, "ibv_poll_cq (ud_verbs receive) failed");
                    &[]
                }
            }
        } else {
            let n = self.stash.len().min(POLL_BATCH);
            for (d, s) in buf.iter_mut().zip(self.stash.drain(..n)) {
                d.write(s);
            }
            // SAFETY: the first `n` entries were just written.
            unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<ibv_wc>(), n) }
        };
        let mut count = 0;
        if !wcs.is_empty() {
            count += self.handle_recvs(wcs, sink);
        }
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        if inner.sq_signaled > 0 {
            let mut sbuf = [MaybeUninit::<ibv_wc>::uninit(); POLL_BATCH];
            if let Ok(done) = inner.send_cq.poll_uninit(&mut sbuf) {
                for wc in done {
                    inner.send_completed(wc.wr_id, wc.status == ffi::IBV_WC_SUCCESS, wc.status);
                }
            }
        }
        if let Some(d) = inner.next_deadline {
            let now = inner.clock.now_coarse();
            if now >= d {
                inner.run_timers(now);
            }
        }
        if !inner.acks_owed.is_empty() {
            inner.send_owed_acks();
        }
        let attention = inner.attention;
        drop(g);
        if attention {
            count += self.progress_attention(sink);
        }
        count
    }

    fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
        let mut inner = self.inner.borrow_mut();
        if inner
            .eps
            .iter()
            .all(|(_, e)| e.tx.is_empty() || e.failed.is_some())
        {
            return Ok(Outcome::DONE);
        }
        inner.iface_flushes.push(comp);
        inner.attention = true;
        Ok(Outcome::InProgress)
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.channel_fd)
    }

    fn wake_within(&self) -> Option<Duration> {
        let inner = self.inner.borrow();
        let d = inner.next_deadline?;
        Some(d.saturating_sub(inner.clock.now_coarse()))
    }

    fn event_arm(&mut self, events: EventFlags) -> Result<()> {
        let _ = events;
        let inner = self.inner.borrow();
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
        if !self.stash.is_empty() {
            return Err(Error::Busy("completions are waiting".into()));
        }
        if inner.attention || !inner.acks_owed.is_empty() {
            return Err(Error::Busy("ud_verbs work is waiting".into()));
        }
        // Completions that arrived before arming raise no event: look for them now.
        let mut wcs = [ibv_wc::default(); POLL_BATCH];
        let m = inner.recv_cq.poll(&mut wcs).unwrap_or(0);
        drop(inner);
        self.stash.extend_from_slice(&wcs[..m]);
        if m > 0 {
            return Err(Error::Busy("completions are waiting".into()));
        }
        Ok(())
    }
}
