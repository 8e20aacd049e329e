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
//!   found (see [`super`]).
//!
//! Nothing here allocates on the data path (`tests/tests/shm_tag_no_alloc.rs`): the posted
//! queue, the operation table and the queues of deferred events keep their capacity; attaching
//! a sender's FIFO (for the first acknowledgement to a sender without an endpoint) or a sender's
//! segment (for the first rendezvous from it) maps memory once and is cached (a cached posix
//! segment is checked by inode, since its reference is a reusable descriptor number).
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

use super::fifo::{self, FifoPtrs, BUF_SIZE, INLINE_MAX};
use super::iface::{abstract_addr, check_iov, Common, MmEp, MmIface, PeerWatch};
use super::segment::Segment;
use super::wire::{IfaceAddr, RkeyWire, SegRef};
pub use super::wire_tag::{Ack, EagerHdr, RndvHdr, RndvSrc};
use crate::ep::{check_len, CompletionId, EpId, TagRecvId};
use crate::iface::{EventSink, RndvRemote, TagRecvCancel};
use crate::md::{Iov, MemHandle};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use ucs::{Error, Outcome, Result};

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
pub const EAGER_MAX_BCOPY: usize = BUF_SIZE - EagerHdr::LEN;
/// Largest rendezvous user header.
pub const RNDV_MAX_HDR: usize = BUF_SIZE - RkeyWire::LEN;
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
    wake: (libc::sockaddr_un, libc::socklen_t),
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
        push_ack(&r.fifo, &mut r.cached_tail, &r.wake, pid, ack, sock) || r.watch.exited()
    }
}

/// Writes `ack` into a sender's FIFO and wakes it if it sleeps. Gives false when the FIFO is
/// full.
fn push_ack(
    f: &FifoPtrs,
    cached_tail: &mut u64,
    wake: &(libc::sockaddr_un, libc::socklen_t),
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
        let one = 0u8;
        // SAFETY: FFI with a one-byte buffer and a valid address; a full or gone socket is
        // harmless (the sender polls, and its death is found by its watchers).
        unsafe {
            libc::sendto(
                sock.as_raw_fd(),
                &one as *const u8 as *const libc::c_void,
                1,
                libc::MSG_DONTWAIT,
                &wake.0 as *const _ as *const libc::sockaddr,
                wake.1,
            );
        }
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
        wake: abstract_addr(&IfaceAddr::socket_name(to.seg.pid, to.nonce)),
        watch,
    })
}

impl MmIface {
    /// Handles a FIFO message with a tag-offload id.
    pub(super) fn tag_msg<S: EventSink>(&mut self, id: u8, data: &[u8], sink: &mut S) {
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
    pub(super) fn tag_progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
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
            if ep.peer_addr == *to && !ep.failed.get() {
                let mut tail = ep.iface_tail.get();
                let sent = push_ack(&ep.remote, &mut tail, &ep.wake, pid, ack, &self.sock);
                ep.iface_tail.set(tail);
                // A full FIFO of a dead peer never drains: drop the acknowledgement.
                return sent || ep.peer.exited();
            }
        }
        self.common.tag.borrow_mut().send_ack(to, ack, &self.sock)
    }

    /// `tag_recv_zcopy`.
    pub(super) fn tag_post(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        self.common.tag.borrow_mut().post(tag, mask, iov, ctx)
    }

    /// `tag_recv_cancel`.
    pub(super) fn tag_cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
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

impl MmEp {
    /// `tag_eager_short`.
    pub(super) fn tag_short(&mut self, tag: u64, data: &[u8]) -> Result<Outcome> {
        check_len(data.len(), EAGER_MAX_SHORT)?;
        self.send(ID_EAGER, |inl, _| {
            let mut h = [0u8; EagerHdr::LEN];
            EagerHdr { tag, imm: 0 }.encode(&mut h);
            // SAFETY: the inline area holds INLINE_MAX >= 16 + data.len() bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(h.as_ptr(), inl, EagerHdr::LEN);
                std::ptr::copy_nonoverlapping(data.as_ptr(), inl.add(EagerHdr::LEN), data.len());
            }
            Ok((fifo::KIND_INLINE, EagerHdr::LEN + data.len(), ()))
        })
    }

    /// `tag_eager_bcopy`: `pack` writes straight into the receiver's element buffer.
    pub(super) fn tag_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        tag: u64,
        imm: u64,
        pack: F,
    ) -> Result<Outcome<usize>> {
        self.send(ID_EAGER, |_, buf| {
            // SAFETY: the claimed element's buffer is BUF_SIZE bytes only this sender touches
            // until it publishes.
            let dst = unsafe { std::slice::from_raw_parts_mut(buf, BUF_SIZE) };
            let Some((h, body)) = dst.split_first_chunk_mut::<{ EagerHdr::LEN }>() else {
                return Err(Error::MessageTooLong {
                    len: EagerHdr::LEN,
                    max: BUF_SIZE,
                });
            };
            let len = pack(body);
            check_len(len, EAGER_MAX_BCOPY)?;
            EagerHdr { tag, imm }.encode(h);
            Ok((fifo::KIND_BUF, EagerHdr::LEN + len, len))
        })
    }

    /// `tag_eager_zcopy`: one copy from the registered pieces into the receiver's element.
    pub(super) fn tag_zcopy(&mut self, tag: u64, imm: u64, iov: &[Iov<'_>]) -> Result<Outcome> {
        let total = check_iov(iov, EAGER_MAX_BCOPY)?;
        let inline = EagerHdr::LEN + total <= INLINE_MAX;
        self.send(ID_EAGER, |inl, buf| {
            let dst = if inline { inl } else { buf };
            let mut h = [0u8; EagerHdr::LEN];
            EagerHdr { tag, imm }.encode(&mut h);
            // SAFETY: 16 + total bytes fit the chosen area (checked above); the pieces were
            // bounds-checked against their registrations when they were made.
            unsafe {
                std::ptr::copy_nonoverlapping(h.as_ptr(), dst, EagerHdr::LEN);
                let mut at = EagerHdr::LEN;
                for v in iov {
                    std::ptr::copy_nonoverlapping(v.ptr(), dst.add(at), v.len());
                    at += v.len();
                }
            }
            let kind = if inline {
                fifo::KIND_INLINE
            } else {
                fifo::KIND_BUF
            };
            Ok((kind, EagerHdr::LEN + total, ()))
        })
    }

    fn rndv_send(&mut self, h: &RndvHdr, header: &[u8]) -> Result<Outcome> {
        check_len(header.len(), RNDV_MAX_HDR)?;
        let body = h.key_len() + header.len();
        self.send(ID_RNDV, |inl, buf| {
            let mut fixed = [0u8; RndvHdr::LEN];
            h.encode(header.len() as u16, &mut fixed);
            // SAFETY: the inline area holds INLINE_MAX >= LEN bytes and the buffer BUF_SIZE >=
            // key + header bytes (checked above), both ours until published.
            unsafe {
                std::ptr::copy_nonoverlapping(fixed.as_ptr(), inl, RndvHdr::LEN);
                h.encode_body(header, std::slice::from_raw_parts_mut(buf, body));
            }
            Ok((fifo::KIND_BUF, body, ()))
        })
    }

    /// `tag_rndv_zcopy`: announces the data (one piece); the receiver reads it and
    /// acknowledges, which completes `comp`. Gives the operation id, or `InProgress` with
    /// nothing sent when the data is ordinary memory and the receiving process has not said
    /// that the kernel lets it read us with cma (the caller then uses its ordinary rendezvous).
    pub(super) fn tag_rndv(
        &mut self,
        tag: u64,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        if iov.len() > 1 {
            return Err(Error::InvalidParam(format!(
                "a shared-memory rendezvous takes one piece, not {}",
                iov.len()
            )));
        }
        check_len(header.len(), RNDV_MAX_HDR)?;
        let (addr, length, memh) = match iov.first() {
            Some(v) => (v.ptr() as u64, v.len(), Some(v.memh())),
            None => (0, 0, None),
        };
        check_len(length, RNDV_MAX_ZCOPY)?;
        let src = match memh.and_then(|m| m.tl_data::<Segment>().map(|s| (m, s))) {
            Some((m, s)) if m.md_name() == "posix" || m.md_name() == "sysv" => {
                RndvSrc::Seg(RkeyWire {
                    seg: s.seg_ref(),
                    base: addr,
                    len: length as u64,
                    offset: addr - s.base().as_ptr() as u64,
                })
            }
            // Ordinary memory is read by the receiver with cma: only when it said it can (the
            // kernel may forbid it to trace us). Otherwise the caller takes its ordinary path.
            _ if self.peer_reads_us() => RndvSrc::Cma,
            _ => return Ok(Outcome::InProgress),
        };
        self.check_alive()?;
        let id = self.shared_id();
        let op = self
            .common
            .tag
            .borrow_mut()
            .op_alloc(comp, id, memh.cloned());
        let Some(op_id) = op else {
            return Ok(Outcome::NoResource);
        };
        let h = RndvHdr {
            tag,
            op_id,
            length: length as u64,
            addr,
            pid: self.pid,
            src,
            reply: self.common.self_addr,
        };
        match self.rndv_send(&h, header) {
            Ok(Outcome::Done(())) => Ok(Outcome::Done(op_id)),
            other => {
                self.common.tag.borrow_mut().op_take(op_id, None);
                other.map(|o| match o {
                    Outcome::NoResource => Outcome::NoResource,
                    _ => Outcome::InProgress,
                })
            }
        }
    }

    /// `tag_rndv_cancel`.
    pub(super) fn tag_rndv_cancel_op(&mut self, op: u64) -> Result<()> {
        let id = self.shared_id();
        match self.common.tag.borrow_mut().op_take(op, Some(id)) {
            Some(_) => Ok(()),
            None => Err(Error::InvalidParam(format!(
                "no rendezvous operation {op:#x} on this endpoint"
            ))),
        }
    }

    /// `tag_rndv_request`: always unexpected at the receiver.
    pub(super) fn tag_rndv_req(&mut self, tag: u64, header: &[u8]) -> Result<Outcome> {
        let h = RndvHdr {
            tag,
            op_id: 0,
            length: 0,
            addr: 0,
            pid: self.pid,
            src: RndvSrc::Request,
            reply: self.common.self_addr,
        };
        self.rndv_send(&h, header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn op_ids_are_not_reused_across_generations() {
        let mut t = TagState::new();
        let a = t.op_alloc(CompletionId(1), EpId(0), None).unwrap();
        assert!(
            t.op_take(a, Some(EpId(1))).is_none(),
            "another endpoint's op"
        );
        assert!(t.op_take(a, Some(EpId(0))).is_some());
        let b = t.op_alloc(CompletionId(2), EpId(0), None).unwrap();
        assert_ne!(a, b);
        assert!(t.op_take(a, None).is_none(), "stale id");
        assert_eq!(t.op_take(b, None).map(|o| o.comp), Some(CompletionId(2)));
        for i in 0..MAX_RNDV_OPS {
            assert!(t.op_alloc(CompletionId(i as u64), EpId(3), None).is_some());
        }
        assert!(
            t.op_alloc(CompletionId(0), EpId(3), None).is_none(),
            "table full"
        );
        t.fail_ops(EpId(3), &Error::PeerFailure("gone".into()));
        assert_eq!(t.failed_ops.len(), MAX_RNDV_OPS);
        assert!(t.op_alloc(CompletionId(0), EpId(4), None).is_some());
    }

    use crate::iface::Iface;
    use crate::md::MemoryDomain;
    use crate::mm::{MmMd, PosixTransport, DEVICE};
    use crate::registry::Transport;
    use crate::Endpoint;
    use crate::IfaceParams;

    /// tag, header, remote address, length, rkey.
    type Unexp = (u64, Vec<u8>, u64, usize, Vec<u8>);

    #[derive(Default)]
    struct Rec {
        done: Vec<(TagRecvId, u64, usize, Result<()>)>,
        comps: Vec<(CompletionId, Result<u64>)>,
        unexp: Vec<Unexp>,
    }

    impl EventSink for Rec {
        fn am(&mut self, id: u8, _data: &[u8]) {
            panic!("unexpected active message {id}");
        }
        fn completion(&mut self, comp: CompletionId, result: Result<u64>) {
            self.comps.push((comp, result));
        }
        fn tag_unexp_rndv(&mut self, tag: u64, r: RndvRemote<'_>) {
            self.unexp.push((
                tag,
                r.header.to_vec(),
                r.remote_addr,
                r.length,
                r.rkey.to_vec(),
            ));
        }
        fn tag_recv_done(
            &mut self,
            ctx: TagRecvId,
            tag: u64,
            _imm: u64,
            len: usize,
            r: Result<()>,
        ) {
            self.done.push((ctx, tag, len, r));
        }
    }

    fn reg(md: &MmMd, v: &mut [u8]) -> MemHandle {
        let p = std::ptr::NonNull::new(v.as_mut_ptr()).unwrap();
        // SAFETY: every test keeps the vector alive (unmoved) longer than the handle.
        unsafe { md.mem_reg(p, v.len()) }.unwrap()
    }

    /// A rendezvous from ordinary (registered, not shared) memory is read by the receiving
    /// interface with process_vm_readv straight into the posted buffer and acknowledged
    /// through the sender's FIFO; an unmatched one arrives with the sender's address and no
    /// key, and cancels cleanly.
    #[test]
    fn rndv_from_registered_memory_is_read_by_cma() {
        let md = PosixTransport::open_md(DEVICE).unwrap();
        let p = IfaceParams {
            device: DEVICE.into(),
        };
        let mut a = PosixTransport::open_iface(&md, &p).unwrap();
        let mut b = PosixTransport::open_iface(&md, &p).unwrap();
        let mut ep = a
            .ep_create_connected(b.device_address(), b.iface_address())
            .unwrap();
        let n = 300_000;
        let mut src: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
        let mut dst = vec![0u8; n + 8];
        let sm = reg(&md, &mut src);
        let dm = reg(&md, &mut dst);
        let mut rec = Rec::default();
        let iov_r = [
            Iov::new(&dm, 0, 100_000).unwrap(),
            Iov::new(&dm, 100_000, n + 8 - 100_000).unwrap(),
        ];
        assert_eq!(
            b.tag_recv_zcopy(5, u64::MAX, &iov_r, TagRecvId(1)).unwrap(),
            Outcome::InProgress
        );
        let op = match ep
            .tag_rndv_zcopy(5, b"h", &[Iov::whole(&sm)], CompletionId(9))
            .unwrap()
        {
            Outcome::Done(op) => op,
            o => panic!("{o:?}"),
        };
        assert_ne!(op, 0);
        for _ in 0..1000 {
            if !rec.done.is_empty() && !rec.comps.is_empty() {
                break;
            }
            b.progress(&mut rec);
            a.progress(&mut rec);
        }
        assert_eq!(rec.done.len(), 1);
        let (ctx, tag, len, r) = rec.done.pop().unwrap();
        assert_eq!((ctx, tag, len), (TagRecvId(1), 5, n));
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(rec.comps.len(), 1);
        assert!(matches!(rec.comps.pop().unwrap(), (CompletionId(9), Ok(_))));
        drop(dm);
        assert!(dst[..n] == src[..], "cma rendezvous data differs");
        assert_eq!(&dst[n..], &[0u8; 8]);
        // The acknowledged operation is gone.
        assert!(ep.tag_rndv_cancel(op).is_err());

        // Unexpected: address and length, no key (the memory is not a shared segment).
        let op = match ep
            .tag_rndv_zcopy(6, b"hdr", &[Iov::whole(&sm)], CompletionId(10))
            .unwrap()
        {
            Outcome::Done(op) => op,
            o => panic!("{o:?}"),
        };
        for _ in 0..100 {
            b.progress(&mut rec);
        }
        assert_eq!(rec.unexp.len(), 1);
        let (tag, hdr, addr, len, rkey) = rec.unexp.pop().unwrap();
        assert_eq!(
            (tag, hdr.as_slice(), addr, len),
            (6, &b"hdr"[..], src.as_ptr() as u64, n)
        );
        assert!(rkey.is_empty());
        ep.tag_rndv_cancel(op).unwrap();
        for _ in 0..100 {
            a.progress(&mut rec);
        }
        assert!(rec.comps.is_empty(), "a canceled rendezvous completed");
        // Several pieces are refused.
        let two = [
            Iov::new(&sm, 0, 10).unwrap(),
            Iov::new(&sm, 10, 10).unwrap(),
        ];
        assert!(matches!(
            ep.tag_rndv_zcopy(6, b"", &two, CompletionId(11)),
            Err(Error::InvalidParam(_))
        ));
        drop(sm);
    }

    /// Acknowledgements complete a rendezvous only when they name its id exactly: a process
    /// that can write into the sender's FIFO (here the receiver of another rendezvous, which
    /// knows that one's id) cannot complete an operation by guessing. Guesses tried: the
    /// slot-and-counter ids this transport used to give, and the known id with every other
    /// slot. The operation then completes by its real acknowledgement.
    #[test]
    fn forged_acks_complete_no_rendezvous() {
        let md = PosixTransport::open_md(DEVICE).unwrap();
        let p = IfaceParams {
            device: DEVICE.into(),
        };
        let mut a = PosixTransport::open_iface(&md, &p).unwrap();
        let mut b = PosixTransport::open_iface(&md, &p).unwrap();
        let mut c = PosixTransport::open_iface(&md, &p).unwrap();
        let mut to_b = a
            .ep_create_connected(b.device_address(), b.iface_address())
            .unwrap();
        let mut to_c = a
            .ep_create_connected(c.device_address(), c.iface_address())
            .unwrap();
        let mut src: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
        let sm = reg(&md, &mut src);
        let mut rec = Rec::default();
        let known = match to_b
            .tag_rndv_zcopy(1, b"", &[Iov::whole(&sm)], CompletionId(7))
            .unwrap()
        {
            Outcome::Done(op) => op,
            o => panic!("{o:?}"),
        };
        let victim = match to_c
            .tag_rndv_zcopy(2, b"", &[Iov::whole(&sm)], CompletionId(8))
            .unwrap()
        {
            Outcome::Done(op) => op,
            o => panic!("{o:?}"),
        };
        assert_ne!(
            known >> OP_SLOT_BITS,
            victim >> OP_SLOT_BITS,
            "nonces repeat"
        );
        let mut guesses: Vec<u64> = (1..8u64)
            .flat_map(|g| (1..8u64).map(move |s| g << 32 | s))
            .collect();
        guesses.extend((1..=MAX_RNDV_OPS as u64).map(|s| known & !OP_SLOT_MASK | s));
        guesses.retain(|&g| g != known);
        let to = a.common.self_addr;
        for op_id in guesses {
            let ack = Ack { op_id, status: 0 };
            while !b.common.tag.borrow_mut().send_ack(&to, ack, &b.sock) {
                a.progress(&mut rec);
            }
        }
        for _ in 0..1000 {
            a.progress(&mut rec);
        }
        assert!(
            rec.comps.is_empty(),
            "a forged ack completed {:?}",
            rec.comps
        );
        // The real receiver of the victim's rendezvous acknowledges it.
        let ack = Ack {
            op_id: victim,
            status: 0,
        };
        assert!(c.common.tag.borrow_mut().send_ack(&to, ack, &c.sock));
        for _ in 0..1000 {
            if !rec.comps.is_empty() {
                break;
            }
            a.progress(&mut rec);
        }
        assert_eq!(rec.comps.len(), 1);
        assert!(matches!(rec.comps[0], (CompletionId(8), Ok(_))));
        to_b.tag_rndv_cancel(known).unwrap();
        b.progress(&mut rec);
        c.progress(&mut rec);
        drop(sm);
    }

    /// A matched rendezvous whose sender has exited completes the receive with an error (the
    /// process is gone, so it holds no grant: `RemoteAccess`), never a hang or a panic.
    #[test]
    fn rndv_from_a_dead_sender_fails_the_receive() {
        let md = PosixTransport::open_md(DEVICE).unwrap();
        let p = IfaceParams {
            device: DEVICE.into(),
        };
        let mut a = PosixTransport::open_iface(&md, &p).unwrap();
        let mut b = PosixTransport::open_iface(&md, &p).unwrap();
        let mut ep = a
            .ep_create_connected(b.device_address(), b.iface_address())
            .unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let mut dst = vec![0u8; 100];
        let dm = reg(&md, &mut dst);
        assert_eq!(
            b.tag_recv_zcopy(3, u64::MAX, &[Iov::whole(&dm)], TagRecvId(4))
                .unwrap(),
            Outcome::InProgress
        );
        let h = RndvHdr {
            tag: 3,
            op_id: 1 << 32 | 1,
            length: 100,
            addr: 0x10000,
            pid: dead,
            src: RndvSrc::Cma,
            reply: a.common.self_addr,
        };
        assert_eq!(ep.rndv_send(&h, b"").unwrap(), Outcome::DONE);
        let mut rec = Rec::default();
        for _ in 0..100 {
            b.progress(&mut rec);
            a.progress(&mut rec);
        }
        assert_eq!(rec.done.len(), 1);
        let (ctx, tag, len, r) = rec.done.pop().unwrap();
        assert_eq!((ctx, tag, len), (TagRecvId(4), 3, 100));
        assert!(matches!(r, Err(Error::RemoteAccess(_))), "{r:?}");
        // The error acknowledgement names no operation of `a`: nothing completes.
        assert!(rec.comps.is_empty());
        drop(dm);
        assert_eq!(dst, vec![0u8; 100]);
    }

    /// The receiver caches its mappings of senders' segments; a sender that frees a segment
    /// and allocates a new one (which usually reuses the descriptor number) must still have
    /// the new data read, never the old mapping's: the references differ by their serial.
    #[test]
    fn rndv_from_a_reallocated_segment_reads_the_new_one() {
        let md = PosixTransport::open_md(DEVICE).unwrap();
        let p = IfaceParams {
            device: DEVICE.into(),
        };
        let mut a = PosixTransport::open_iface(&md, &p).unwrap();
        let mut b = PosixTransport::open_iface(&md, &p).unwrap();
        let mut ep = a
            .ep_create_connected(b.device_address(), b.iface_address())
            .unwrap();
        let n = 8192;
        let mut refs = Vec::new();
        for round in 0..3u8 {
            let src = md.mem_alloc(n).unwrap();
            src.write(0, &vec![round + 1; n]).unwrap();
            let mut dst = vec![0u8; n];
            let dm = reg(&md, &mut dst);
            assert_eq!(
                b.tag_recv_zcopy(1, u64::MAX, &[Iov::whole(&dm)], TagRecvId(1))
                    .unwrap(),
                Outcome::InProgress
            );
            assert!(matches!(
                ep.tag_rndv_zcopy(1, b"", &[Iov::whole(&src)], CompletionId(2))
                    .unwrap(),
                Outcome::Done(_)
            ));
            let mut rec = Rec::default();
            for _ in 0..100 {
                b.progress(&mut rec);
                a.progress(&mut rec);
            }
            assert_eq!(rec.done.len(), 1, "round {round}");
            assert!(rec.done[0].3.is_ok(), "{:?}", rec.done[0].3);
            assert_eq!(rec.comps.len(), 1);
            drop(dm);
            assert_eq!(dst, vec![round + 1; n], "round {round} read stale data");
            refs.push(src.tl_data::<Segment>().unwrap().seg_ref());
            drop(src);
        }
        // Every new segment has its own reference, even on a reused descriptor number.
        assert!(refs.windows(2).all(|w| w[0] != w[1]), "{refs:?}");
        // Usually the descriptor number is reused (the case under test); tests running in
        // parallel threads may take it first, which leaves only the plain case.
        if !refs.windows(2).any(|w| w[0].id as u32 == w[1].id as u32) {
            eprintln!("note: no descriptor number was reused: {refs:?}");
        }
    }
}
