//! rc_verbs state an interface shares with its endpoints: the bounce buffers, each endpoint's
//! queue pair, receive buffers, credits and outstanding send operations, and what a send
//! completion owes (buffer release, completion, fetched data).

use super::ffi::{self, ibv_send_wr, ibv_sge, ibv_wc, CompChannel, Cq, Mr, Qp};
use super::wire::EpAddr;
use super::{DevPort, RcConfig};
use crate::ep::{CompletionId, EpId, PendingId};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use ucs::{Error, Result};

/// Work completions polled at once.
pub(super) const POLL_BATCH: usize = 16;
/// Most receive buffers reposted with one `ibv_post_recv` (a chain of work requests): consumed
/// buffers wait until this many (or a quarter of the receive queue, if less) are free, as UCX
/// batches its receive posts.
pub(super) const RX_POST_BATCH: usize = 16;
/// Progress calls between two looks at the send CQ while no signaled send is in flight (only
/// the error completion of an unsignaled request can arrive then).
pub(super) const SEND_POLL_EVERY: u32 = 16;
/// Largest user header of `am_zcopy`.
pub(super) const MAX_AM_HDR: usize = 128;
/// Scatter/gather entries requested per send work request.
pub(super) const MAX_SEND_SGE: u32 = 8;

/// Registered memory owned by the interface or an endpoint (mapping dropped after the MR).
pub(crate) struct RegMem {
    pub(crate) mr: Mr,
    pub(crate) map: memmap2::MmapMut,
}

impl RegMem {
    pub(crate) fn new(dev: &DevPort, len: usize, access: i32, what: &str) -> Result<RegMem> {
        let mut map = memmap2::MmapMut::map_anon(len)
            .map_err(|e| Error::NoMemory(format!("{what}: mmap of {len} bytes: {e}")))?;
        // SAFETY: the mapping lives in the same struct and is dropped after the MR.
        let mr = unsafe { Mr::register(&dev.pd, map.as_mut_ptr(), len, access) }
            .map_err(|e| Error::NoMemory(format!("{what}: ibv_reg_mr of {len} bytes: {e}")))?;
        Ok(RegMem { mr, map })
    }
    #[inline]
    pub(crate) fn base(&self) -> *mut u8 {
        self.map.as_ptr() as *mut u8
    }
}

/// What a posted send work request owes when it completes.
#[derive(Debug, Clone, Copy)]
pub(super) enum TxKind {
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
    /// Tag offload: the RDMA READ of a matched rendezvous (its slot in the tag state).
    TagRead(u32),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct TxOp {
    /// The work request it waits for (a flush marker: the last one posted before it).
    pub(super) seq: u32,
    pub(super) kind: TxKind,
}

/// Receive side of an endpoint: buffers, kept alive across a delivery by an `Rc`.
pub(super) struct RxMem {
    pub(super) mem: RegMem,
}

pub(super) struct EpState {
    pub(super) gen: u16,
    /// Dropped first: destroying the QP stops every access to the memory below.
    pub(super) qp: Qp,
    pub(super) rx: Rc<RxMem>,
    /// Word 0: reposted-receive count the peer writes here; word 1: ours, the source we write.
    pub(super) credit: RegMem,
    pub(super) psn: u32,
    pub(super) remote: Option<EpAddr>,
    pub(super) failed: Option<Error>,
    pub(super) error_reported: bool,
    pub(super) sq_avail: u32,
    pub(super) next_seq: u32,
    /// The oldest work request not known to be complete (`next_seq` when none is in flight):
    /// a completion frees the send-queue slots of every request up to it.
    pub(super) done_seq: u32,
    pub(super) unsignaled: u32,
    pub(super) last_wqe_signaled: bool,
    /// Work requests whose completion owes something (not plain ones) and flush markers, in
    /// order.
    pub(super) ops: VecDeque<TxOp>,
    pub(super) fence: bool,
    pub(super) am_sent: u64,
    /// The peer's reposted-receive count as its last active message carried it (immediate
    /// data); the credit word may be newer or older, the larger of the two counts.
    pub(super) peer_imm: u64,
    pub(super) rx_reposted: u64,
    pub(super) rx_reported: u64,
    /// Consumed receive buffers waiting to be reposted together (capacity
    /// [`RX_POST_BATCH`], never exceeded).
    pub(super) rx_free: Vec<u32>,
    /// Signaled send work requests posted and not completed yet.
    pub(super) signaled_out: u32,
    pub(super) pending: VecDeque<PendingId>,
}

impl EpState {
    #[inline]
    pub(super) fn peer_reposted(&self) -> u64 {
        // SAFETY: word 0 of the registered credit page; the peer's NIC writes it, so read it
        // volatile. It is 8-byte aligned (page start).
        unsafe { std::ptr::read_volatile(self.credit.base().cast::<u64>()) }
    }
    #[inline]
    pub(super) fn am_credits(&self) -> u64 {
        let peer = self.remote.map_or(0, |r| r.rx_credits as u64);
        (peer + self.peer_reposted().max(self.peer_imm)).saturating_sub(self.am_sent)
    }
    /// Takes the low 32 bits of the peer's reposted-receive count from a received active
    /// message's immediate data.
    #[inline]
    pub(super) fn peer_imm_update(&mut self, imm: u32) {
        self.peer_imm = advance_count(self.peer_imm, imm);
    }
    #[inline]
    pub(super) fn status(&self) -> Result<()> {
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

pub(super) struct FlushWait {
    pub(super) comp: CompletionId,
    pub(super) remaining: u32,
}

pub(super) struct Inner {
    pub(super) dev: Arc<DevPort>,
    pub(super) md_name: &'static str,
    pub(super) cfg: RcConfig,
    /// Dropped after every endpoint QP (eps hold no CQ reference, the iface drops eps first).
    pub(super) eps: slab::Slab<EpState>,
    pub(super) next_gen: u16,
    pub(super) tx: RegMem,
    pub(super) tx_free: Vec<u32>,
    pub(super) max_inline: u32,
    pub(super) max_send_sge: u32,
    pub(super) max_eps: usize,
    pub(super) flush_waits: slab::Slab<FlushWait>,
    pub(super) stash_send: Vec<ibv_wc>,
    pub(super) stash_recv: Vec<ibv_wc>,
    pub(super) scratch: Vec<usize>,
    /// Some endpoint has an unreported error, pending requests or a credit update waiting
    /// for a send slot: progress looks at the endpoints only while this is set.
    pub(super) eps_attention: bool,
    /// Receive buffers reposted at once (see [`RX_POST_BATCH`]).
    pub(super) rx_batch: usize,
    /// Signaled send work requests in flight on all endpoints: while there are none, no
    /// completion is due but an unsignaled request's error, and progress looks at the send CQ
    /// only every [`SEND_POLL_EVERY`] calls.
    pub(super) tx_signaled: u32,
    /// Progress calls since the send CQ was last polled.
    pub(super) tx_skipped: u32,
    /// Tag offload: posted receives, READs of matched rendezvous, outstanding rendezvous.
    pub(super) tag: super::tag::state::TagState,
    pub(super) recv_cq: Cq,
    pub(super) send_cq: Cq,
    pub(super) channel: Arc<CompChannel>,
}

/// The 64-bit count whose low 32 bits are `low`, from the previous value `prev`: counts only
/// grow and RC delivers in order, so the new value is `prev` plus the 32-bit difference.
#[inline]
pub(super) fn advance_count(prev: u64, low: u32) -> u64 {
    prev + low.wrapping_sub(prev as u32) as u64
}

#[inline]
pub(super) fn wr_id(key: usize, gen: u16, low: u32) -> u64 {
    ((key as u64) << 48) | ((gen as u64) << 32) | low as u64
}
pub(super) fn split_wr_id(id: u64) -> (usize, u16, u32) {
    ((id >> 48) as usize, (id >> 32) as u16, id as u32)
}
#[inline]
pub(super) fn ep_id(key: usize, gen: u16) -> EpId {
    EpId(((gen as u32) << 16) | key as u32)
}

/// Maps a failed work completion to an error.
pub(super) fn wc_error(status: i32, what: &str) -> Error {
    let text = format!("{what}: {}", ffi::wc_status_str(status));
    match status {
        ffi::IBV_WC_REM_ACCESS_ERR | ffi::IBV_WC_LOC_PROT_ERR => Error::RemoteAccess(text),
        ffi::IBV_WC_RETRY_EXC_ERR | ffi::IBV_WC_RNR_RETRY_EXC_ERR => Error::PeerFailure(text),
        ffi::IBV_WC_WR_FLUSH_ERR => Error::ConnectionReset(text),
        _ => Error::PeerFailure(text),
    }
}

impl Inner {
    #[inline]
    pub(super) fn ep(&mut self, key: usize, gen: u16) -> Option<&mut EpState> {
        self.eps.get_mut(key).filter(|e| e.gen == gen)
    }

    #[inline]
    pub(super) fn tx_buf(&self, idx: u32) -> *mut u8 {
        self.tx
            .base()
            .wrapping_add(idx as usize * self.cfg.seg_size)
    }

    /// Posts a send work request on `key`, recording what its completion owes.
    /// `needs_comp` forces a signaled request.
    #[inline]
    pub(super) fn post(
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
        ep.signaled_out += signaled as u32;
        self.tx_signaled += signaled as u32;
        if !matches!(kind, TxKind::Plain) {
            ep.ops.push_back(TxOp { seq, kind });
        }
        Ok(())
    }

    /// Posts one RDMA WRITE of `local` to `remote` (address, rkey) on endpoint `key`; with
    /// [`ffi::IBV_SEND_INLINE`] in `flags` the data are copied during the call (the lkey is
    /// then unused). The caller checked the send slot.
    #[inline]
    pub(super) fn post_rdma_write(
        &mut self,
        key: usize,
        mut local: ibv_sge,
        remote: (u64, u32),
        flags: u32,
        kind: TxKind,
        needs_comp: bool,
    ) -> Result<()> {
        let mut wr = ibv_send_wr {
            sg_list: &mut local,
            num_sge: 1,
            opcode: ffi::IBV_WR_RDMA_WRITE,
            send_flags: flags,
            ..Default::default()
        };
        wr.set_rdma(remote.0, remote.1);
        self.post(key, &mut wr, kind, needs_comp)
    }

    /// Posts an active message (`wr` holds its scatter list and flags) on `key` as a send
    /// with immediate data carrying our reposted-receive count: the peer's credits ride on
    /// the message, so a ping-pong never needs a separate credit write.
    #[inline]
    pub(super) fn post_am(
        &mut self,
        key: usize,
        wr: &mut ibv_send_wr,
        kind: TxKind,
        needs_comp: bool,
    ) -> Result<()> {
        let reposted = self.eps[key].rx_reposted;
        wr.opcode = ffi::IBV_WR_SEND_WITH_IMM;
        wr.imm_data = (reposted as u32).to_be();
        self.post(key, wr, kind, needs_comp)?;
        let ep = &mut self.eps[key];
        ep.am_sent += 1;
        ep.rx_reported = reposted;
        Ok(())
    }

    /// Posts receive buffers `slots` of endpoint `key`, up to [`RX_POST_BATCH`] per
    /// `ibv_post_recv` (one chain of work requests).
    pub(super) fn post_recvs(&mut self, key: usize, slots: &[u32]) -> Result<()> {
        let seg = self.cfg.seg_size;
        let ep = &mut self.eps[key];
        let base = ep.rx.mem.base() as u64;
        let lkey = ep.rx.mem.mr.lkey();
        // SAFETY: the buffers belong to the endpoint's registered receive region, which
        // lives until the QP is destroyed (the QP is dropped first).
        unsafe {
            ep.qp
                .post_recv_slots::<RX_POST_BATCH>(base, seg, lkey, slots, |slot| {
                    wr_id(key, ep.gen, slot)
                })
        }
        .map_err(|e| {
            Error::io(
                "ibv_post_recv on an rc_verbs endpoint",
                std::io::Error::from_raw_os_error(e),
            )
        })?;
        Ok(())
    }

    /// Receive buffer `slot` of endpoint `key` was consumed: reposts it with the ones before
    /// it once [`Inner::rx_batch`] of them wait, and then reports credits if enough grew.
    #[inline]
    pub(super) fn recv_done(&mut self, key: usize, slot: u32) {
        let batch = self.rx_batch;
        let ep = &mut self.eps[key];
        ep.rx_free.push(slot);
        if ep.rx_free.len() < batch {
            return;
        }
        let mut slots = [0u32; RX_POST_BATCH];
        let n = ep.rx_free.len().min(RX_POST_BATCH);
        slots[..n].copy_from_slice(&ep.rx_free[..n]);
        ep.rx_free.clear();
        match self.post_recvs(key, &slots[..n]) {
            Ok(()) => {
                self.eps[key].rx_reposted += n as u64;
                self.maybe_send_credits(key, false);
            }
            Err(e) => self.fail_ep(key, e),
        }
    }

    /// A send completion of endpoint `key` arrived: one signaled request fewer in flight (the
    /// error completion of an unsignaled request, after which the endpoint has failed, may
    /// count too: the count only decides how often the send CQ is polled).
    #[inline]
    pub(super) fn send_completed(&mut self, key: usize) {
        let ep = &mut self.eps[key];
        if ep.signaled_out > 0 {
            ep.signaled_out -= 1;
            self.tx_signaled -= 1;
        }
    }

    /// Frees the send-queue slots of endpoint `key`'s work requests up to `seq` (RC completes
    /// in order), or of all of them once the endpoint has failed.
    #[inline]
    pub(super) fn sq_complete(&mut self, key: usize, seq: u32) {
        let ep = &mut self.eps[key];
        let upto = if ep.failed.is_some() {
            ep.next_seq
        } else {
            seq.wrapping_add(1)
        };
        let n = upto.wrapping_sub(ep.done_seq);
        if (n as i32) > 0 {
            ep.sq_avail += n;
            ep.done_seq = upto;
        }
    }

    /// Whether this progress call polls the send CQ: while a signaled request is in flight or
    /// `event_arm` stashed completions, else on one call in [`SEND_POLL_EVERY`].
    #[inline]
    pub(super) fn send_poll_due(&mut self) -> bool {
        if self.tx_signaled == 0 && self.stash_send.is_empty() {
            self.tx_skipped += 1;
            if self.tx_skipped < SEND_POLL_EVERY {
                return false;
            }
        }
        self.tx_skipped = 0;
        true
    }

    /// Reposted receives not yet reported to the peer after which they are written into its
    /// credit word: a quarter of the receive queue plus one repost batch, so that a batch
    /// reposted just before a message goes back rides on that message. The peer never waits
    /// forever: with no credits left it sent all it may, so more than
    /// `rx_queue_len - threshold` of our buffers are consumed, at least one batch is
    /// reposted, and the count reaches the threshold.
    #[inline]
    pub(super) fn credit_threshold(&self) -> u64 {
        (self.cfg.rx_queue_len as u64 / 4).max(1) + self.rx_batch as u64
    }

    /// Writes our reposted-receive count into the peer's credit word when enough accumulated.
    pub(super) fn maybe_send_credits(&mut self, key: usize, force: bool) {
        let threshold = self.credit_threshold();
        let ep = &mut self.eps[key];
        let Some(remote) = ep.remote else { return };
        let unreported = ep.rx_reposted - ep.rx_reported;
        if ep.failed.is_some() || unreported == 0 || (!force && unreported < threshold) {
            return;
        }
        if ep.sq_avail == 0 {
            // Retried from progress when the send queue drains.
            self.eps_attention = true;
            return;
        }
        let _ = write_credit(self, key, remote, TxKind::Plain, false);
    }

    /// Whether endpoint `key` of generation `gen` can post an active message now: an error
    /// when it is gone or failed, false when it must wait (queued requests, a full send
    /// queue, no receive credits at the peer).
    #[inline]
    pub(super) fn am_ready(&mut self, key: usize, gen: u16) -> Result<bool> {
        if self.ep(key, gen).is_none() {
            return Err(Error::InvalidParam("rc_verbs endpoint is gone".into()));
        }
        self.check_send(key, true)
    }

    /// Resources for a new operation on `key`: none queued, a send slot, and (for AM) credits.
    #[inline]
    pub(super) fn check_send(&mut self, key: usize, am: bool) -> Result<bool> {
        let ep = &self.eps[key];
        ep.status()?;
        Ok(ep.pending.is_empty() && ep.sq_avail > 0 && (!am || ep.am_credits() > 0))
    }

    #[inline]
    pub(super) fn alloc_buf(&mut self) -> Option<u32> {
        self.tx_free.pop()
    }

    /// Fails an endpoint: remembers the error (reported once by progress).
    pub(super) fn fail_ep(&mut self, key: usize, err: Error) {
        let ep = &mut self.eps[key];
        if ep.failed.is_none() {
            tracing::debug!(ep = key, %err, "rc_verbs endpoint failed");
            ep.failed = Some(err);
            self.eps_attention = true;
        }
    }

    /// Releases the resources of a completed op; gives what the sink must be told.
    pub(super) fn retire(&mut self, op: TxOp) -> Delivery {
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
            TxKind::TagRead(slot) => Delivery::TagRead(slot),
        }
    }

    pub(super) fn iface_flush_done(&mut self, w: u32) -> Delivery {
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

pub(super) enum Delivery {
    None,
    Comp(CompletionId, u64),
    Get(u32, u32, CompletionId),
    TagRead(u32),
}

/// Appends a flush marker to endpoint `k`: after its last work request when that one is
/// signaled, else behind a new signaled 8-byte credit write.
pub(super) fn ep_flush_marker(inner: &mut Inner, k: usize, kind: TxKind) -> Result<()> {
    let ep = &mut inner.eps[k];
    if ep.last_wqe_signaled {
        let seq = ep.next_seq.wrapping_sub(1);
        ep.ops.push_back(TxOp { seq, kind });
        return Ok(());
    }
    post_credit_write(inner, k, kind)
}

/// Posts a signaled 8-byte RDMA write of our credit count to the peer's credit page: the
/// flush marker, and the liveness probe of [`crate::Endpoint::check`] (the peer's adapter
/// acknowledges it; a peer that is gone makes it fail after the retries).
pub(super) fn post_credit_write(inner: &mut Inner, k: usize, kind: TxKind) -> Result<()> {
    let ep = &inner.eps[k];
    let remote = ep
        .remote
        .ok_or_else(|| Error::InvalidParam("rc_verbs endpoint is not connected yet".into()))?;
    // A signaled 8-byte write of our credit count (always valid to repeat) rather than a
    // zero-length write: rxe never retransmits nor times out a zero-length RDMA WRITE whose
    // peer is gone, so the flush would hang instead of failing.
    tracing::trace!(
        ep = k,
        seq = ep.next_seq,
        "rc_verbs flush: signaled credit write"
    );
    write_credit(inner, k, remote, kind, true)
}

/// Posts an 8-byte RDMA WRITE of endpoint `k`'s reposted-receive count into the peer's credit
/// word (`remote`); once posted, that count is the reported one.
fn write_credit(
    inner: &mut Inner,
    k: usize,
    remote: EpAddr,
    kind: TxKind,
    signaled: bool,
) -> Result<()> {
    let ep = &mut inner.eps[k];
    let src = ep.credit.base().wrapping_add(8).cast::<u64>();
    // SAFETY: word 1 of our registered credit page, written only by us; the NIC reads it
    // when it executes the write (any later value is also correct: counts only grow).
    unsafe { std::ptr::write_volatile(src, ep.rx_reposted) };
    let local = ibv_sge {
        addr: src as u64,
        length: 8,
        lkey: ep.credit.mr.lkey(),
    };
    let reposted = ep.rx_reposted;
    inner.post_rdma_write(
        k,
        local,
        (remote.credit_addr, remote.credit_rkey),
        0,
        kind,
        signaled,
    )?;
    inner.eps[k].rx_reported = reposted;
    Ok(())
}
