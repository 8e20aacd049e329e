//! ud_verbs state an interface shares with its endpoints: the queue pair and buffer pools, the
//! endpoints (address handle, send window, receive state, connection), the pairing of
//! endpoints by peer interface and connection number, and how datagrams are posted.

use super::proto::{RxState, Timeout, TxWindow};
use super::wire::{Creq, Hdr, IfaceAddr, Kind, FLAG_ACK_REQ, FLAG_NAK, NO_EP};
use super::UdConfig;
use crate::ep::{CompletionId, EpId, PendingId};
use crate::rc_verbs::ffi::{self, ibv_send_wr, ibv_sge, Ah, CompChannel, Cq, Qp};
use crate::rc_verbs::wire::DevAddr;
use crate::rc_verbs::{DevPort, RegMem};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use ucs::time::Clock;
use ucs::{Error, Result};

/// Unacknowledged datagrams per endpoint.
pub(crate) const TX_WINDOW: usize = 128;
/// Largest retransmission timeout (the back-off stops doubling there).
pub(crate) const RTO_MAX: Duration = Duration::from_secs(1);
/// Longest a receiver keeps an acknowledgement back, hoping to carry it on a datagram of its
/// own (it also acknowledges when asked or after a quarter window).
pub(crate) const ACK_DELAY: Duration = Duration::from_millis(1);
/// Delivered datagrams after which a receiver acknowledges without waiting.
pub(crate) const ACK_EVERY: u32 = (TX_WINDOW / 4) as u32;
/// Largest `am_short` header and payload (copied into a send buffer, sent inline).
pub(crate) const MAX_SHORT: usize = 128;
/// Bytes of the global routing header in front of every received datagram.
pub(crate) const GRH_LEN: usize = 40;
/// The Q_Key every ud_verbs queue pair uses.
pub(crate) const QKEY: u32 = 0x1ee7_0a5d;
/// Work completions polled at once.
pub(crate) const POLL_BATCH: usize = 16;
/// Receive buffers reposted with one chained `ibv_post_recv`.
pub(crate) const RX_POST_BATCH: usize = 16;
/// Send work requests per signaled one.
pub(crate) const TX_MODERATION: u64 = 16;

/// A peer interface: its GID and QPN.
pub(crate) type PeerKey = ([u8; 16], u32);

/// The endpoints towards one peer interface, by connection number.
#[derive(Default)]
pub(crate) struct PeerConns {
    /// The connection number the next endpoint created here towards the peer takes.
    pub next_sn: u32,
    /// Endpoint key by connection number.
    pub by_sn: HashMap<u32, usize>,
}

/// An endpoint: the route to its peer interface and both directions' reliability state.
pub(crate) struct UdEp {
    pub gen: u16,
    pub ah: Ah,
    pub remote_qpn: u32,
    pub peer: PeerKey,
    pub conn_sn: u32,
    /// The paired endpoint at the peer ([`NO_EP`] until it answered).
    pub dest: u32,
    /// A user's handle owns it (else it was made for a peer's connection request).
    pub user: bool,
    pub tx: TxWindow,
    pub rx: RxState,
    /// An acknowledgement (a NAK with `nak`) goes out at the end of this progress call.
    pub ack_now: bool,
    pub nak: bool,
    /// Since when a delivered datagram waits for its acknowledgement.
    pub ack_since: Option<Duration>,
    /// Connection requests sent without answer, and when the next one is due.
    pub conn_tries: u32,
    pub conn_deadline: Option<Duration>,
    pub failed: Option<Error>,
    pub error_reported: bool,
    pub pending: VecDeque<PendingId>,
    pub flushes: VecDeque<CompletionId>,
}

impl UdEp {
    pub(crate) fn status(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
    /// The earliest time this endpoint's timers need a look.
    fn deadline(&self) -> Option<Duration> {
        [
            self.tx.deadline(),
            self.conn_deadline,
            self.ack_since.map(|t| t + ACK_DELAY),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// The id peers address an endpoint by: its slot and generation.
#[inline]
pub(crate) fn ep_id(key: usize, gen: u16) -> u32 {
    ((gen as u32) << 16) | key as u32
}
#[inline]
pub(crate) fn split_ep_id(id: u32) -> (usize, u16) {
    ((id & 0xffff) as usize, (id >> 16) as u16)
}

/// Drops received datagrams on purpose (`RUCX_UD_FAULT_DROP`).
pub(crate) struct FaultDrop {
    pub rng: ucs::random::SeededRng,
    pub share: f64,
    pub dropped: u64,
}

pub(crate) struct Inner {
    /// Dropped first: destroying the QP stops every access to the buffers below.
    pub qp: Qp,
    pub eps: slab::Slab<UdEp>,
    pub peers: HashMap<PeerKey, PeerConns>,
    pub dev: Arc<DevPort>,
    pub cfg: UdConfig,
    pub next_gen: u16,
    pub tx: RegMem,
    pub tx_free: Vec<u32>,
    pub rx: Rc<RegMem>,
    pub rx_free: Vec<u32>,
    /// Bytes of a send buffer: the largest datagram (one path MTU).
    pub seg: usize,
    /// Bytes of a receive buffer: GRH plus `seg`.
    pub rx_seg: usize,
    pub max_inline: u32,
    pub sq_depth: u64,
    /// Send work requests posted and completed (completions come in order on one QP).
    pub sq_posted: u64,
    pub sq_done: u64,
    /// Signaled send work requests whose completion has not been polled: the send CQ is
    /// polled only while there are some.
    pub sq_signaled: u32,
    pub dev_addr: [u8; DevAddr::LEN],
    pub qpn: u32,
    pub clock: Rc<dyn Clock>,
    /// The earliest endpoint timer (`None`: no timer runs, the clock is not read).
    pub next_deadline: Option<Duration>,
    /// Endpoints owe an explicit acknowledgement at the end of this progress call.
    pub acks_owed: Vec<usize>,
    /// Some endpoint has pending requests, flushes, or an unreported error.
    pub attention: bool,
    pub iface_flushes: Vec<CompletionId>,
    pub fault: Option<FaultDrop>,
    pub recv_cq: Cq,
    pub send_cq: Cq,
    pub channel: Arc<CompChannel>,
}

impl Inner {
    #[inline]
    pub(crate) fn ep(&mut self, key: usize, gen: u16) -> Option<&mut UdEp> {
        self.eps.get_mut(key).filter(|e| e.gen == gen)
    }
    #[inline]
    pub(crate) fn tx_buf(&self, b: u32) -> *mut u8 {
        self.tx.base().wrapping_add(b as usize * self.seg)
    }
    #[inline]
    fn sq_free(&self) -> u64 {
        self.sq_depth - (self.sq_posted - self.sq_done)
    }
    /// Moves the earliest timer to `at` if that is sooner.
    #[inline]
    pub(crate) fn arm(&mut self, at: Duration) {
        if self.next_deadline.is_none_or(|d| at < d) {
            self.next_deadline = Some(at);
        }
    }

    /// Whether endpoint `key` can send an active message now (`Err` once it failed).
    #[inline]
    pub(crate) fn data_ready(&self, key: usize) -> Result<bool> {
        let ep = &self.eps[key];
        ep.status()?;
        Ok(ep.dest != NO_EP
            && ep.pending.is_empty()
            && !ep.tx.is_full()
            && !ep.tx.recovering()
            && !self.tx_free.is_empty()
            && self.sq_free() > 0)
    }

    /// Posts `len` bytes at `addr` (registered under `lkey`, or copied inline) to endpoint
    /// `key`'s peer interface.
    fn post(&mut self, key: usize, addr: u64, len: usize, lkey: u32) -> Result<()> {
        let signaled = self.sq_posted % TX_MODERATION == TX_MODERATION - 1 || self.sq_free() <= 1;
        let ep = &self.eps[key];
        let mut sge = ibv_sge {
            addr,
            length: len as u32,
            lkey,
        };
        let mut flags = 0;
        if len <= self.max_inline as usize {
            flags |= ffi::IBV_SEND_INLINE;
        }
        if signaled {
            flags |= ffi::IBV_SEND_SIGNALED;
        }
        let mut wr = ibv_send_wr {
            wr_id: self.sq_posted,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ffi::IBV_WR_SEND,
            send_flags: flags,
            ..Default::default()
        };
        wr.set_ud(ep.ah.raw(), ep.remote_qpn, QKEY);
        // SAFETY: the scatter entry is a send buffer of the interface (registered, kept until
        // the datagram is acknowledged, which is after this send completed) or stack memory
        // copied inline during the call.
        unsafe { self.qp.post_send(&mut wr) }.map_err(|e| {
            Error::io(
                "ibv_post_send on a ud_verbs interface",
                std::io::Error::from_raw_os_error(e),
            )
        })?;
        self.sq_posted += 1;
        self.sq_signaled += signaled as u32;
        Ok(())
    }

    /// Sends an active message already written into send buffer `buf` after its header's
    /// place: fills in the header, records it in the window and posts it.
    pub(crate) fn send_data(&mut self, key: usize, buf: u32, len: usize) -> Result<()> {
        let now = self.clock.now_coarse();
        let p = self.tx_buf(buf);
        let ep = &mut self.eps[key];
        let hdr = Hdr {
            kind: Kind::Data,
            flags: if ep.tx.wants_ack() { FLAG_ACK_REQ } else { 0 },
            dest: ep.dest,
            psn: ep.tx.next_psn(),
            ack: ep.rx.ack_psn(),
        };
        // SAFETY: send buffer `buf` is ours and at least a header long.
        hdr.encode_into(unsafe { std::slice::from_raw_parts_mut(p, Hdr::LEN) });
        ep.rx.unacked = 0;
        ep.ack_since = None;
        ep.tx.push(buf, len as u32, now);
        let d = ep.tx.deadline();
        let lkey = self.tx.mr.lkey();
        if let Some(d) = d {
            self.arm(d);
        }
        self.post(key, p as u64, len, lkey)
    }

    /// Sends a control datagram (`body` after the header) to endpoint `key`'s peer, from the
    /// stack (inline). Failures fail the endpoint.
    pub(crate) fn send_ctrl(&mut self, key: usize, kind: Kind, flags: u8, dest: u32, body: &[u8]) {
        if self.sq_free() == 0 {
            // The peer asks again (a request is resent, a missing acknowledgement makes the
            // sender resend and ask): nothing is lost by dropping it.
            return;
        }
        let ep = &mut self.eps[key];
        let mut b = [0u8; Hdr::LEN + Creq::LEN];
        Hdr {
            kind,
            flags,
            dest,
            psn: 0,
            ack: ep.rx.ack_psn(),
        }
        .encode_into(&mut b);
        b[Hdr::LEN..Hdr::LEN + body.len()].copy_from_slice(body);
        if kind == Kind::Ack {
            ep.rx.unacked = 0;
            ep.ack_since = None;
        }
        if let Err(e) = self.post(key, b.as_ptr() as u64, Hdr::LEN + body.len(), 0) {
            self.fail_ep(key, e);
        }
    }

    /// Sends endpoint `key`'s connection request (again) and arms its timer.
    pub(crate) fn send_creq(&mut self, key: usize) {
        let now = self.clock.now_coarse();
        let ep = &mut self.eps[key];
        let creq = Creq {
            src_ep: ep_id(key, ep.gen),
            conn_sn: ep.conn_sn,
            dev_addr: self.dev_addr,
            iface: IfaceAddr { qpn: self.qpn },
        };
        let wait = (self.cfg.rto * (1 << ep.conn_tries.min(6))).min(RTO_MAX);
        ep.conn_tries += 1;
        ep.conn_deadline = Some(now + wait);
        self.arm(now + wait);
        let mut body = [0u8; Creq::LEN];
        creq.encode_into(&mut body);
        self.send_ctrl(key, Kind::Creq, 0, NO_EP, &body);
    }

    /// Starts a recovery of endpoint `key` (a NAK or a timeout): its unacknowledged
    /// datagrams go out again, a burst now and the rest as acknowledgements return.
    pub(crate) fn resend(&mut self, key: usize) {
        self.eps[key].tx.begin_recovery();
        self.resend_due(key);
    }

    /// Sends the datagrams of endpoint `key`'s recovery that are due, asking for an
    /// acknowledgement, as far as the send queue takes them (a timeout covers the rest).
    pub(crate) fn resend_due(&mut self, key: usize) {
        let lkey = self.tx.mr.lkey();
        let mut due = [(0u32, 0u32); super::proto::RESEND_BURST as usize];
        let mut n = 0;
        let ack = self.eps[key].rx.ack_psn();
        self.eps[key].tx.resend_due(|e| {
            if n < due.len() {
                due[n] = (e.buf, e.len);
                n += 1;
            }
        });
        for &(buf, len) in &due[..n] {
            if self.sq_free() == 0 {
                break;
            }
            let p = self.tx_buf(buf);
            // SAFETY: the datagram's send buffer, ours until acknowledged: its first byte
            // (kind and flags) and the acknowledgement field are brought up to date.
            unsafe {
                *p |= FLAG_ACK_REQ;
                std::ptr::copy_nonoverlapping(ack.to_le_bytes().as_ptr(), p.add(Hdr::ACK_AT), 2);
            }
            if let Err(e) = self.post(key, p as u64, len as usize, lkey) {
                self.fail_ep(key, e);
                return;
            }
        }
        let ep = &mut self.eps[key];
        ep.rx.unacked = 0;
        ep.ack_since = None;
    }

    /// An acknowledgement from endpoint `key`'s peer: frees what it covers.
    #[inline]
    pub(crate) fn on_ack(&mut self, key: usize, ack: u16, now: Duration) {
        let ep = &mut self.eps[key];
        let free = &mut self.tx_free;
        if ep.tx.ack(ack, now, |b| free.push(b)) {
            if let Some(d) = ep.tx.deadline() {
                self.next_deadline = Some(self.next_deadline.map_or(d, |n| n.min(d)));
            }
            if self.eps[key].tx.recovering() {
                self.resend_due(key);
            }
            let ep = &self.eps[key];
            if !ep.pending.is_empty() || !ep.flushes.is_empty() || !self.iface_flushes.is_empty() {
                self.attention = true;
            }
        }
    }

    /// Fails endpoint `key`: its window is emptied (buffers back to the pool), its flushes
    /// and the error are reported by progress.
    pub(crate) fn fail_ep(&mut self, key: usize, err: Error) {
        let ep = &mut self.eps[key];
        if ep.failed.is_some() {
            return;
        }
        tracing::debug!(ep = key, %err, "ud_verbs endpoint failed");
        ep.failed = Some(err);
        ep.conn_deadline = None;
        ep.ack_since = None;
        let free = &mut self.tx_free;
        ep.tx.clear(|b| free.push(b));
        self.attention = true;
    }

    /// Runs the timers of every endpoint that are due at `now`, and finds the next one.
    pub(crate) fn run_timers(&mut self, now: Duration) {
        self.next_deadline = None;
        let mut key = 0;
        let cap = self.eps.capacity();
        while key < cap {
            let Some(ep) = self.eps.get_mut(key) else {
                key += 1;
                continue;
            };
            if ep.failed.is_some() {
                key += 1;
                continue;
            }
            if ep.conn_deadline.is_some_and(|d| now >= d) {
                if ep.conn_tries > self.cfg.retry_count {
                    let tries = ep.conn_tries;
                    self.fail_ep(
                        key,
                        Error::PeerFailure(format!(
                            "the ud_verbs peer answered none of {tries} connection requests"
                        )),
                    );
                    key += 1;
                    continue;
                }
                self.send_creq(key);
            }
            let ep = &mut self.eps[key];
            if ep.tx.deadline().is_some_and(|d| now >= d) {
                match ep.tx.on_timeout(now) {
                    Timeout::Resend => {
                        tracing::trace!(ep = key, n = ep.tx.in_flight(), "ud_verbs resend");
                        self.resend(key);
                    }
                    Timeout::PeerFailed => {
                        let (n, t) = (self.cfg.retry_count, self.cfg.peer_timeout);
                        self.fail_ep(
                            key,
                            Error::PeerFailure(format!(
                                "the ud_verbs peer acknowledged nothing in {n} retransmissions \
                                 and at least {t:?} (RUCX_UD_RETRY_COUNT, RUCX_UD_TIMEOUT)"
                            )),
                        );
                        key += 1;
                        continue;
                    }
                }
            }
            let ep = &self.eps[key];
            if ep.ack_since.is_some_and(|t| now >= t + ACK_DELAY) {
                let dest = ep.dest;
                self.send_ctrl(key, Kind::Ack, 0, dest, &[]);
            }
            if let Some(d) = self.eps[key].deadline() {
                self.arm(d);
            }
            key += 1;
        }
    }

    /// Sends the acknowledgements owed at the end of a progress call.
    pub(crate) fn send_owed_acks(&mut self) {
        let mut owed = std::mem::take(&mut self.acks_owed);
        for &key in &owed {
            let Some(ep) = self.eps.get_mut(key) else {
                continue;
            };
            if !ep.ack_now || ep.failed.is_some() {
                continue;
            }
            ep.ack_now = false;
            let flags = if std::mem::take(&mut ep.nak) {
                FLAG_NAK
            } else {
                0
            };
            let dest = ep.dest;
            self.send_ctrl(key, Kind::Ack, flags, dest, &[]);
        }
        owed.clear();
        self.acks_owed = owed;
    }

    /// Endpoint `key` owes an acknowledgement now (a NAK with `nak`).
    #[inline]
    pub(crate) fn owe_ack(&mut self, key: usize, nak: bool) {
        let ep = &mut self.eps[key];
        ep.nak |= nak;
        if !ep.ack_now {
            ep.ack_now = true;
            self.acks_owed.push(key);
        }
    }

    /// Posts receive buffers `slots`, in chains of up to [`RX_POST_BATCH`].
    pub(crate) fn post_recvs(&mut self, slots: &[u32]) -> Result<()> {
        let base = self.rx.base() as u64;
        let lkey = self.rx.mr.lkey();
        // SAFETY: the buffers belong to the interface's registered receive region, which
        // lives until the QP is destroyed (the QP is dropped first).
        unsafe {
            self.qp
                .post_recv_slots::<RX_POST_BATCH>(base, self.rx_seg, lkey, slots, u64::from)
        }
        .map_err(|e| {
            Error::io(
                "ibv_post_recv on a ud_verbs interface",
                std::io::Error::from_raw_os_error(e),
            )
        })?;
        Ok(())
    }

    /// A receive buffer is free again: reposted with others once a batch waits.
    #[inline]
    pub(crate) fn recv_done(&mut self, slot: u32) {
        self.rx_free.push(slot);
        if self.rx_free.len() < RX_POST_BATCH {
            return;
        }
        let mut slots = [0u32; RX_POST_BATCH];
        let n = self.rx_free.len().min(RX_POST_BATCH);
        slots[..n].copy_from_slice(&self.rx_free[..n]);
        self.rx_free.drain(..n);
        if let Err(e) = self.post_recvs(&slots[..n]) {
            tracing::error!(%e, "ud_verbs could not repost receive buffers");
        }
    }

    /// A signaled send completed: every request up to it did.
    #[inline]
    pub(crate) fn send_completed(&mut self, wr_id: u64, ok: bool, status: i32) {
        if !ok {
            tracing::warn!(
                status = ffi::wc_status_str(status),
                "ud_verbs send completed with an error"
            );
        }
        if wr_id + 1 > self.sq_done {
            self.sq_done = wr_id + 1;
        }
        self.sq_signaled = self.sq_signaled.saturating_sub(1);
    }

    /// Creates an endpoint towards peer `peer` (`dev` its device address) with connection
    /// number `conn_sn`; `dest` is the peer's endpoint when it is known.
    pub(crate) fn new_ep(
        &mut self,
        dev: &DevAddr,
        peer: PeerKey,
        conn_sn: u32,
        dest: u32,
        user: bool,
    ) -> Result<usize> {
        if self.eps.vacant_key() > 0xffff {
            return Err(Error::NoMemory(
                "a ud_verbs interface has at most 65536 endpoints".into(),
            ));
        }
        let mut attr = ffi::ibv_ah_attr {
            dlid: dev.lid,
            port_num: self.dev.port,
            ..Default::default()
        };
        if self.dev.is_roce() {
            attr.is_global = 1;
            attr.grh = ffi::ibv_global_route {
                dgid: ffi::ibv_gid { raw: dev.gid },
                flow_label: 0,
                sgid_index: self.dev.gid_index as u8,
                hop_limit: 64,
                traffic_class: 0,
            };
        }
        let ah = Ah::create(&self.dev.pd, &mut attr)
            .map_err(|e| Error::io("ibv_create_ah for a ud_verbs peer", e))?;
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        let key = self.eps.insert(UdEp {
            gen,
            ah,
            remote_qpn: peer.1,
            peer,
            conn_sn,
            dest,
            user,
            tx: TxWindow::new(
                TX_WINDOW,
                self.cfg.rto,
                RTO_MAX,
                self.cfg.retry_count,
                self.cfg.peer_timeout,
            ),
            rx: RxState::default(),
            ack_now: false,
            nak: false,
            ack_since: None,
            conn_tries: 0,
            conn_deadline: None,
            failed: None,
            error_reported: false,
            pending: VecDeque::with_capacity(16),
            flushes: VecDeque::with_capacity(4),
        });
        self.peers
            .entry(peer)
            .or_default()
            .by_sn
            .insert(conn_sn, key);
        Ok(key)
    }

    /// Removes endpoint `key` (its handle was dropped), returning its buffers to the pool.
    pub(crate) fn remove_ep(&mut self, key: usize) {
        let mut ep = self.eps.remove(key);
        let free = &mut self.tx_free;
        ep.tx.clear(|b| free.push(b));
        if let Some(p) = self.peers.get_mut(&ep.peer) {
            if p.by_sn.get(&ep.conn_sn) == Some(&key) {
                p.by_sn.remove(&ep.conn_sn);
            }
        }
        self.acks_owed.retain(|&k| k != key);
    }

    /// The id a sink is told for endpoint `key`.
    pub(crate) fn sink_id(&self, key: usize) -> EpId {
        EpId(ep_id(key, self.eps[key].gen))
    }
}
