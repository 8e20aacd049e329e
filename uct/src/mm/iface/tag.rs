//! Tag offload for the shared-memory transports: receives posted on the interface, matched as
//! tagged messages are polled from the FIFO.
//!
//! Tagged messages travel through the same FIFO as active messages (so they keep their order
//! with them), under active-message ids above [`AM_ID_MAX`](crate::ep::AM_ID_MAX) that only the
//! transport uses: [`ID_EAGER`], [`ID_RNDV`] and [`ID_ACK`].
//!
//! - **Posted receives** (`tag_recv_zcopy`) wait in posting order. A tagged message takes the
//!   first one whose tag matches under its mask.
//! - **Eager** ([`EagerHdr`] + payload, inline in the element or in its buffer): a matched
//!   payload is copied once, straight from the FIFO element into the posted buffer; an
//!   unmatched one goes to [`EventSink::tag_unexp_eager`] from the element (no copy). A payload
//!   larger than the posted buffer fills it and completes with [`Error::Truncated`].
//! - **Rendezvous** ([`RndvHdr`] in the element's inline area, the user header in its buffer):
//!   the sender announces where its data is. When
//!   a posted receive matches, the *receiving interface* copies the data into the posted buffer
//!   itself — from the sender's shared segment, mapped, when the data lies in memory from
//!   `mem_alloc` of posix/sysv; otherwise with one `process_vm_readv` (cross-memory attach) —
//!   and then tells the sender through the sender's own FIFO ([`Ack`]; by the interface's
//!   endpoint to the sender when it has one, else by a cached mapping), which completes the
//!   sender's `tag_rndv_zcopy`. No layer above takes part. An unmatched rendezvous (and every
//!   `tag_rndv_request`) goes to [`EventSink::tag_unexp_rndv`] with the sender's address and,
//!   for segment memory, a posix/sysv remote key, so the layer above can fetch the data itself
//!   and then `tag_rndv_cancel` the sender's operation.
//! - **Failures**: a receiver that cannot read the data (the sender died, or the kernel refused
//!   the cross-memory read) completes the receive with [`Error::PeerFailure`] or
//!   [`Error::RemoteAccess`] and acknowledges with an error status, so the sender's operation
//!   completes with [`Error::RemoteAccess`]. A sender whose receiver dies gets its outstanding
//!   rendezvous operations completed with [`Error::PeerFailure`] once the endpoint's failure is
//!   found (see [`crate::mm`]).
//!
//! Nothing here allocates on the data path (`tests/tests/shm_tag_no_alloc.rs`): the posted
//! queue, the operation table and the queues of deferred events keep their capacity; attaching
//! a sender's FIFO (for the first acknowledgement to a sender without an endpoint) or a sender's
//! segment (for the first rendezvous from it) maps memory once and is cached (a cached posix
//! segment is checked by inode, since its reference is a reusable descriptor number); both go
//! when an endpoint to that sender drops or finds it dead, so nothing of a killed peer stays
//! mapped.
//!
//! Limits: a rendezvous takes one piece of memory (several give `InvalidParam`); eager messages
//! take one FIFO element buffer ([`EAGER_MAX_BCOPY`]), so `tag_eager_zcopy` copies once into it
//! like bcopy (nothing is gained over bcopy, it exists for the API).
//!
//! Peers are not trusted: an acknowledgement can come from any process that can write into
//! our FIFO, so a rendezvous operation's id carries an unguessable nonce (see
//! `TagState::op_alloc`); headers are checked before use, and nothing here panics on peer
//! bytes (the lint below).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use super::{check_iov, Common, MmEp, MmIface, PeerWatch};
use crate::ep::{check_len, CompletionId, EpId, TagRecvId};
use crate::iface::{EventSink, RndvRemote, TagRecvCancel};
use crate::md::{Iov, MemHandle};
use crate::mm::fifo::{self, FifoPtrs, BUF_DATA_MAX, INLINE_MAX};
use crate::mm::segment::Segment;
use crate::mm::wire::{IfaceAddr, RkeyWire, SegRef};
pub use crate::mm::wire_tag::{Ack, EagerHdr, RndvHdr, RndvSrc};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use ucs::{Error, Outcome, Result};

mod send;

const _: () = assert!(RndvHdr::LEN <= INLINE_MAX);

/// FIFO id of a tagged eager message.
pub const ID_EAGER: u8 = 0xe0;
/// FIFO id of a rendezvous announcement or request.
pub const ID_RNDV: u8 = 0xe1;
/// FIFO id of a rendezvous acknowledgement (receiver to sender).
pub const ID_ACK: u8 = 0xe2;

/// Most receives posted at once (`TagLimits::recv_max_outstanding`).
pub const MAX_POSTED: usize = 128;
/// Largest iov count of a posted receive (`TagLimits::recv_max_iov`); small, so a posted
/// receive stays a few cache lines.
pub const RECV_MAX_IOV: usize = 4;
/// Most rendezvous operations outstanding per interface.
pub const MAX_RNDV_OPS: usize = 256;
/// Largest `tag_eager_short` payload (inline in the element).
pub const EAGER_MAX_SHORT: usize = INLINE_MAX - EagerHdr::LEN;
/// Largest `tag_eager_bcopy` / `tag_eager_zcopy` payload (one element buffer).
pub const EAGER_MAX_BCOPY: usize = BUF_DATA_MAX - EagerHdr::LEN;
/// Largest rendezvous user header.
pub const RNDV_MAX_HDR: usize = BUF_DATA_MAX - RkeyWire::LEN;
/// Largest rendezvous.
pub const RNDV_MAX_ZCOPY: usize = 1 << 30;
/// Bits of a rendezvous operation id that hold its slot (plus one).
const OP_SLOT_BITS: u32 = 16;
const OP_SLOT_MASK: u64 = (1 << OP_SLOT_BITS) - 1;
const _: () = assert!(MAX_RNDV_OPS < OP_SLOT_MASK as usize);
/// Senders' FIFOs kept attached for acknowledgements.
const MAX_REPLIES: usize = 64;
/// Senders' segments kept attached for rendezvous reads.
const MAX_SOURCES: usize = 16;

/// A receive posted with `tag_recv_zcopy`: its buffer pieces (the handles are kept so memory
/// from `mem_alloc` stays mapped until the receive is done).
struct Posted {
    tag: u64,
    mask: u64,
    ctx: TagRecvId,
    n: usize,
    segs: [(*mut u8, usize); RECV_MAX_IOV],
    keep: [Option<MemHandle>; RECV_MAX_IOV],
}

impl Posted {
    fn capacity(&self) -> usize {
        self.segs[..self.n].iter().map(|s| s.1).sum()
    }

    /// Copies `len` bytes from `src` (which must be readable for `len` bytes) into the
    /// buffer pieces, in order, as far as they reach; gives the bytes copied.
    ///
    /// # Safety
    /// `src..src+len` must be readable; the pieces are the caller's posted buffer.
    unsafe fn scatter(&self, src: *const u8, len: usize) -> usize {
        let mut at = 0;
        for &(p, l) in &self.segs[..self.n] {
            if at == len {
                break;
            }
            let k = l.min(len - at);
            // SAFETY: the posted piece is writable for `l >= k` bytes (tag_recv_zcopy's
            // contract, checked against its registration); the source by the caller.
            unsafe { std::ptr::copy(src.add(at), p, k) };
            at += k;
        }
        at
    }

    /// Reads `want` bytes at `addr` of process `pid` into the buffer pieces, once `pid` is
    /// known to have granted this process access.
    fn cma_read(&self, pid: u32, addr: u64, want: usize) -> Result<()> {
        // The header's pid is the sender's claim: read only a process that granted us access.
        crate::grant::check_now(pid, "a cross-memory rendezvous read")?;
        let mut done = 0usize;
        for &(p, l) in &self.segs[..self.n] {
            let mut off = 0usize;
            while off < l && done < want {
                let k = (l - off).min(want - done);
                let local = libc::iovec {
                    iov_base: p.wrapping_add(off) as *mut libc::c_void,
                    iov_len: k,
                };
                let remote = libc::iovec {
                    iov_base: (addr as usize).wrapping_add(done) as *mut libc::c_void,
                    iov_len: k,
                };
                // SAFETY: FFI; the local range is a piece of the posted buffer (writable), the
                // kernel checks the remote range in the peer.
                let n =
                    unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
                if n <= 0 {
                    let err = std::io::Error::last_os_error();
                    return Err(match err.raw_os_error() {
                        Some(libc::ESRCH) => Error::PeerFailure(format!(
                            "the rendezvous sender (process {pid}) has exited"
                        )),
                        _ if n == 0 => Error::RemoteAccess(format!(
                            "cross-memory read of process {pid} made no progress"
                        )),
                        _ => Error::RemoteAccess(format!(
                            "cross-memory read of {k} bytes at {addr:#x} in process {pid}: {err}"
                        )),
                    });
                }
                off += n as usize;
                done += n as usize;
            }
            if done == want {
                break;
            }
        }
        Ok(())
    }
}

/// A sender's outstanding rendezvous.
struct RndvOp {
    comp: CompletionId,
    ep: EpId,
    /// The unguessable part of the operation's id (see [`TagState::op_alloc`]).
    nonce: u64,
    /// Keeps memory from `mem_alloc` mapped while the receiver may read it.
    _src: Option<MemHandle>,
}

/// A sender's FIFO, attached to send it acknowledgements.
struct Reply {
    addr: IfaceAddr,
    fifo: FifoPtrs,
    _seg: Segment,
    cached_tail: u64,
    watch: PeerWatch,
}

/// Tag-offload state of an interface, shared with its endpoints and cancelers.
pub(crate) struct TagState {
    posted: VecDeque<Posted>,
    /// Receives canceled without force, reported by the next progress: (ctx, tag).
    canceled: VecDeque<(TagRecvId, u64)>,
    ops: Vec<Option<RndvOp>>,
    free_ops: Vec<u32>,
    /// Keys the operation-id nonces (randomly keyed SipHash of `op_count`).
    op_keys: std::collections::hash_map::RandomState,
    /// Operations allocated so far.
    op_count: u64,
    /// Operations failed by their peer's death, reported by the next progress.
    failed_ops: VecDeque<(CompletionId, Error)>,
    /// Acknowledgements waiting for room in their sender's FIFO.
    acks: VecDeque<(IfaceAddr, Ack)>,
    replies: Vec<Reply>,
    sources: Vec<Segment>,
    my_pid: u32,
}

impl TagState {
    pub(crate) fn new() -> Self {
        TagState {
            posted: VecDeque::with_capacity(MAX_POSTED),
            canceled: VecDeque::with_capacity(MAX_POSTED),
            ops: (0..MAX_RNDV_OPS).map(|_| None).collect(),
            free_ops: (0..MAX_RNDV_OPS as u32).rev().collect(),
            op_keys: std::collections::hash_map::RandomState::new(),
            op_count: 0,
            failed_ops: VecDeque::with_capacity(MAX_RNDV_OPS),
            acks: VecDeque::with_capacity(MAX_RNDV_OPS),
            replies: Vec::with_capacity(MAX_REPLIES),
            sources: Vec::with_capacity(MAX_SOURCES),
            my_pid: std::process::id(),
        }
    }

    /// Deferred events wait for progress.
    pub(crate) fn has_work(&self) -> bool {
        !self.canceled.is_empty() || !self.failed_ops.is_empty() || !self.acks.is_empty()
    }

    fn take_match(&mut self, tag: u64) -> Option<Posted> {
        let i = self
            .posted
            .iter()
            .position(|p| (p.tag ^ tag) & p.mask == 0)?;
        self.posted.remove(i)
    }

    fn post(&mut self, tag: u64, mask: u64, iov: &[Iov<'_>], ctx: TagRecvId) -> Result<Outcome> {
        if iov.len() > RECV_MAX_IOV {
            return Err(Error::InvalidParam(format!(
                "{} iov entries in a posted receive, at most {RECV_MAX_IOV}",
                iov.len()
            )));
        }
        if self.posted.len() >= MAX_POSTED {
            return Ok(Outcome::NoResource);
        }
        let mut p = Posted {
            tag,
            mask,
            ctx,
            n: iov.len(),
            segs: [(std::ptr::null_mut(), 0); RECV_MAX_IOV],
            keep: Default::default(),
        };
        for (i, v) in iov.iter().enumerate() {
            p.segs[i] = (v.ptr(), v.len());
            p.keep[i] = Some(v.memh().clone());
        }
        self.posted.push_back(p);
        Ok(Outcome::InProgress)
    }

    fn cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
        let Some(i) = self.posted.iter().position(|p| p.ctx == ctx) else {
            return Err(Error::InvalidParam(format!(
                "no tag receive {ctx} is posted"
            )));
        };
        let Some(p) = self.posted.remove(i) else {
            return Ok(());
        };
        if !force {
            self.canceled.push_back((p.ctx, p.tag));
        }
        Ok(())
    }

    /// Takes an operation slot. The id on the wire is the slot (plus one, low 16 bits) under a
    /// 48-bit nonce from a randomly keyed SipHash of a counter: the acknowledgement that
    /// completes the operation can come from any process that can write into our FIFO, so the
    /// id must not be guessable, not even from the ids of other operations a receiver saw.
    fn op_alloc(&mut self, comp: CompletionId, ep: EpId, src: Option<MemHandle>) -> Option<u64> {
        use std::hash::BuildHasher;
        let idx = self.free_ops.pop()?;
        self.op_count += 1;
        let nonce = self.op_keys.hash_one(self.op_count) >> OP_SLOT_BITS;
        self.ops[idx as usize] = Some(RndvOp {
            comp,
            ep,
            nonce,
            _src: src,
        });
        Some(nonce << OP_SLOT_BITS | (idx as u64 + 1))
    }

    fn op_take(&mut self, id: u64, ep: Option<EpId>) -> Option<RndvOp> {
        let idx = ((id & OP_SLOT_MASK) as usize).checked_sub(1)?;
        let slot = self.ops.get_mut(idx)?;
        match slot {
            Some(op) if op.nonce == id >> OP_SLOT_BITS && ep.is_none_or(|e| e == op.ep) => {
                let op = slot.take();
                self.free_ops.push(idx as u32);
                op
            }
            _ => None,
        }
    }

    /// Fails every outstanding rendezvous of endpoint `ep` (its peer died).
    pub(crate) fn fail_ops(&mut self, ep: EpId, err: &Error) {
        for (idx, slot) in self.ops.iter_mut().enumerate() {
            if let Some(op) = slot.take_if(|o| o.ep == ep) {
                self.free_ops.push(idx as u32);
                self.failed_ops.push_back((op.comp, err.clone()));
            }
        }
    }

    /// Unmaps the cached segments and FIFO of process `pid` (a peer whose endpoint dropped or
    /// found it dead), so nothing of it stays mapped here.
    pub(crate) fn forget_peer(&mut self, pid: u32) {
        self.sources.retain(|s| s.seg_ref().pid != pid);
        self.replies.retain(|r| r.addr.seg.pid != pid);
    }

    /// The mapping of a sender's segment (attached once, then cached).
    fn source(&mut self, seg: SegRef) -> Result<&Segment> {
        let hit = self.sources.iter().position(|s| s.seg_ref() == seg);
        if let Some(i) = hit.filter(|&i| !self.sources[i].still_current()) {
            // The sender freed that segment and reused its id for a new one.
            self.sources.remove(i);
        }
        let i = match self.sources.iter().position(|s| s.seg_ref() == seg) {
            Some(i) => i,
            None => {
                let s = Segment::attach_no_wait(seg).map_err(|e| {
                    Error::RemoteAccess(format!("cannot map the rendezvous sender's segment: {e}"))
                })?;
                if self.sources.len() >= MAX_SOURCES {
                    self.sources.remove(0);
                }
                self.sources.push(s);
                self.sources.len() - 1
            }
        };
        Ok(&self.sources[i])
    }

    /// Copies a matched rendezvous's first `want` bytes into the posted buffer.
    fn read_rndv(&mut self, h: &RndvHdr, want: usize, p: &Posted) -> Result<()> {
        if want == 0 {
            return Ok(());
        }
        match h.src {
            RndvSrc::Request => Ok(()),
            RndvSrc::Cma => p.cma_read(h.pid, h.addr, want),
            RndvSrc::Seg(k) => {
                let s = self.source(k.seg)?;
                // RkeyWire::decode checked offset + len <= the segment's length, attach mapped
                // that length, and RndvHdr::decode checked length <= len.
                let src = s.base().as_ptr().wrapping_add(k.offset as usize);
                // SAFETY: `want <= length <= k.len` bytes at `src` lie inside the mapping.
                unsafe { p.scatter(src, want) };
                Ok(())
            }
        }
    }

    /// Sends `ack` to the sender at `to` through the reply cache (attached on first use).
    /// Gives false when its FIFO is full (queue it); a gone sender drops it.
    fn send_ack(&mut self, to: &IfaceAddr, ack: Ack, sock: &OwnedFd) -> bool {
        let i = match self.replies.iter().position(|r| r.addr == *to) {
            Some(i) => i,
            None => match attach_reply(to) {
                Ok(r) => {
                    if self.replies.len() >= MAX_REPLIES {
                        self.replies.remove(0);
                    }
                    self.replies.push(r);
                    self.replies.len() - 1
                }
                Err(e) => {
                    tracing::debug!("rendezvous acknowledgement dropped: {e}");
                    return true;
                }
            },
        };
        let pid = self.my_pid;
        let r = &mut self.replies[i];
        push_ack(&r.fifo, &mut r.cached_tail, &r.addr, pid, ack, sock) || r.watch.exited()
    }
}

/// Writes `ack` into a sender's FIFO and wakes it if it sleeps. Gives false when the FIFO is
/// full.
fn push_ack(
    f: &FifoPtrs,
    cached_tail: &mut u64,
    to: &IfaceAddr,
    pid: u32,
    ack: Ack,
    sock: &OwnedFd,
) -> bool {
    let Some(c) = f.claim(cached_tail) else {
        return false;
    };
    f.stamp(c.pos, pid);
    let b = ack.encode();
    // SAFETY: a claimed element's inline area holds INLINE_MAX >= 16 bytes, ours until
    // published; nothing between claim and publish can unwind.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), f.inline_area(c.pos), Ack::LEN);
        f.publish(c.pos, ID_ACK, fifo::KIND_INLINE, Ack::LEN as u32);
    }
    if c.wake {
        super::wake_peer(sock, to);
    }
    true
}

fn attach_reply(to: &IfaceAddr) -> Result<Reply> {
    let watch = PeerWatch::new(to.seg.pid);
    if to.seg.len != fifo::SEG_LEN as u64 {
        return Err(Error::Wire(format!(
            "reply FIFO of {} bytes, expected {}",
            to.seg.len,
            fifo::SEG_LEN
        )));
    }
    let seg = Segment::attach_fifo(to.seg)?;
    // SAFETY: attach mapped SEG_LEN bytes, kept by `_seg` as long as the view.
    let f = unsafe { FifoPtrs::new(seg.base().as_ptr()) };
    f.validate(to.seg.pid).map_err(Error::Unreachable)?;
    Ok(Reply {
        addr: *to,
        fifo: f,
        _seg: seg,
        cached_tail: 0,
        watch,
    })
}

impl MmIface {
    /// Handles a FIFO message with a tag-offload id.
    #[inline(never)]
    pub(in crate::mm) fn tag_msg<S: EventSink>(&mut self, id: u8, data: &[u8], sink: &mut S) {
        match id {
            ID_EAGER => {
                let (h, payload) = match EagerHdr::decode(data) {
                    Ok(x) => x,
                    Err(e) => return tracing::warn!("bad tagged eager message dropped: {e}"),
                };
                let m = self.common.tag.borrow_mut().take_match(h.tag);
                match m {
                    Some(p) => {
                        let cap = p.capacity();
                        // SAFETY: the payload slice is readable for its length.
                        unsafe { p.scatter(payload.as_ptr(), payload.len()) };
                        let res = if payload.len() > cap {
                            Err(Error::Truncated {
                                len: payload.len(),
                                capacity: cap,
                            })
                        } else {
                            Ok(())
                        };
                        sink.tag_recv_done(p.ctx, h.tag, h.imm, payload.len(), res);
                    }
                    None => sink.tag_unexp_eager(h.tag, h.imm, payload),
                }
            }
            ID_RNDV => {
                // SAFETY: the element at `read_pos` is published and not yet released; its
                // inline area holds INLINE_MAX >= LEN bytes the sender wrote before publishing.
                let fixed = unsafe {
                    std::slice::from_raw_parts(self.fifo.inline_area(self.read_pos), RndvHdr::LEN)
                };
                let (h, key, user) = match RndvHdr::decode(fixed, data) {
                    Ok(x) => x,
                    Err(e) => return tracing::warn!("bad rendezvous message dropped: {e}"),
                };
                let m = if h.op_id != 0 {
                    self.common.tag.borrow_mut().take_match(h.tag)
                } else {
                    None
                };
                let Some(p) = m else {
                    sink.tag_unexp_rndv(
                        h.tag,
                        RndvRemote {
                            header: user,
                            remote_addr: h.addr,
                            length: h.length as usize,
                            rkey: key,
                        },
                    );
                    return;
                };
                let length = usize::try_from(h.length).unwrap_or(usize::MAX);
                let cap = p.capacity();
                let want = length.min(cap);
                let res = self.common.tag.borrow_mut().read_rndv(&h, want, &p);
                let ack = Ack {
                    op_id: h.op_id,
                    status: res.is_err() as u8,
                };
                if !self.ack(&h.reply, ack) {
                    self.common.tag.borrow_mut().acks.push_back((h.reply, ack));
                    self.common.tag_work.set(true);
                }
                let res = res.and(if length > cap {
                    Err(Error::Truncated {
                        len: length,
                        capacity: cap,
                    })
                } else {
                    Ok(())
                });
                sink.tag_recv_done(p.ctx, h.tag, 0, length, res);
            }
            ID_ACK => {
                let a = match Ack::decode(data) {
                    Ok(a) => a,
                    Err(e) => return tracing::warn!("bad rendezvous acknowledgement: {e}"),
                };
                let op = self.common.tag.borrow_mut().op_take(a.op_id, None);
                if let Some(op) = op {
                    let r = if a.status == 0 {
                        Ok(0)
                    } else {
                        Err(Error::RemoteAccess(
                            "the receiver could not read the rendezvous data".into(),
                        ))
                    };
                    sink.completion(op.comp, r);
                }
            }
            _ => tracing::warn!(id, "shared-memory message with a bad AM id dropped"),
        }
    }

    /// Reports deferred tag events (canceled receives, failed operations) and retries queued
    /// acknowledgements. Gives the number of events.
    #[cold]
    #[inline(never)]
    pub(in crate::mm) fn tag_progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut n = 0;
        loop {
            let c = self.common.tag.borrow_mut().canceled.pop_front();
            let Some((ctx, tag)) = c else { break };
            sink.tag_recv_done(ctx, tag, 0, 0, Err(Error::Canceled));
            n += 1;
        }
        loop {
            let f = self.common.tag.borrow_mut().failed_ops.pop_front();
            let Some((comp, err)) = f else { break };
            sink.completion(comp, Err(err));
            n += 1;
        }
        let queued = self.common.tag.borrow().acks.len();
        for _ in 0..queued {
            let a = self.common.tag.borrow_mut().acks.pop_front();
            let Some((to, ack)) = a else { break };
            if !self.ack(&to, ack) {
                self.common.tag.borrow_mut().acks.push_front((to, ack));
                break;
            }
            n += 1;
        }
        let work = self.common.tag.borrow().has_work();
        self.common.tag_work.set(work);
        n
    }

    /// Sends a rendezvous acknowledgement to the interface at `to`: through this interface's
    /// endpoint to it when there is one (its FIFO is mapped already), else through the reply
    /// cache. Gives false when the FIFO is full (retry later).
    fn ack(&mut self, to: &IfaceAddr, ack: Ack) -> bool {
        let pid = self.common.tag.borrow().my_pid;
        for w in &self.eps {
            let Some(ep) = w.upgrade() else { continue };
            if ep.peer_addr() == *to && !ep.failed.get() {
                let mut tail = ep.iface_tail.get();
                let sent = push_ack(&ep.remote(), &mut tail, to, pid, ack, &self.sock);
                ep.iface_tail.set(tail);
                // A full FIFO of a dead peer never drains: drop the acknowledgement.
                return sent || ep.peer.exited();
            }
        }
        self.common.tag.borrow_mut().send_ack(to, ack, &self.sock)
    }

    /// `tag_recv_zcopy`.
    pub(in crate::mm) fn tag_post(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        self.common.tag.borrow_mut().post(tag, mask, iov, ctx)
    }

    /// `tag_recv_cancel`.
    pub(in crate::mm) fn tag_cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
        MmTagCanceler(self.common.clone()).cancel(ctx, force)
    }

    /// A handle that cancels this interface's posted receives from anywhere.
    pub fn tag_canceler(&self) -> MmTagCanceler {
        MmTagCanceler(self.common.clone())
    }
}

/// Cancels posted receives of a posix/sysv interface from anywhere, including inside a progress
/// callback (the interface never holds its tag state across a callback). No lock.
#[derive(Clone)]
pub struct MmTagCanceler(Rc<Common>);

impl std::fmt::Debug for MmTagCanceler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MmTagCanceler")
    }
}

impl TagRecvCancel for MmTagCanceler {
    fn cancel(&self, ctx: TagRecvId, force: bool) -> Result<()> {
        let Ok(mut t) = self.0.tag.try_borrow_mut() else {
            return Err(Error::Busy(
                "the shared-memory interface holds its tag state".into(),
            ));
        };
        t.cancel(ctx, force)?;
        if !force {
            self.0.tag_work.set(true);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
