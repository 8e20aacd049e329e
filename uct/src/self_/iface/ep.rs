//! The self endpoint: active messages go into the target interface's receive ring; put, get and
//! atomics act at once on the memory a remote key maps.

use super::{
    resolve_ep_addr, EpSlot, IfaceInner, ScratchLoan, SlotLoan, SlotState, MAX_AM_HDR, RX_RING_LEN,
    SEG_SIZE,
};
use crate::cpu_atomic::{self, reject_post_swap, Word};
use crate::ep::{check_am_id, check_len, AtomicOp, CompletionId, Endpoint, EpId, PendingId};
use crate::md::{Iov, RemoteKey};
use crate::self_::wire::{DeviceAddr, EpAddr};
use std::rc::{Rc, Weak};
use ucs::{Error, Outcome, Result};

/// A self endpoint.
pub struct SelfEp {
    id: EpId,
    iface: Weak<IfaceInner>,
    target: Option<Weak<IfaceInner>>,
}

impl std::fmt::Debug for SelfEp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SelfEp({:?})", self.id)
    }
}

fn iface_closed() -> Error {
    Error::InvalidParam(
        "self endpoint used after its interface was closed; create a new endpoint".into(),
    )
}

/// Total length of byte pieces, checking the piece count.
fn iov_total(n: usize, total: usize) -> Result<usize> {
    if n > super::MAX_IOV {
        return Err(Error::InvalidParam(format!(
            "{n} iov entries exceed self's limit of {}",
            super::MAX_IOV
        )));
    }
    Ok(total)
}

/// Checks the size and alignment of an atomic's target and gives its local address.
fn atomic_ptr<W: Word>(rkey: &RemoteKey, remote_addr: u64) -> Result<*mut u8> {
    let size = W::SIZE;
    let p = rkey.local_ptr(remote_addr, size)?;
    if !cpu_atomic::is_aligned::<W>(p) || !remote_addr.is_multiple_of(size as u64) {
        return Err(Error::InvalidParam(format!(
            "remote address {remote_addr:#x} is not {size}-byte aligned for a {}-bit atomic",
            size * 8
        )));
    }
    Ok(p)
}

impl SelfEp {
    pub(crate) fn new(id: EpId, iface: Weak<IfaceInner>, target: Option<Weak<IfaceInner>>) -> Self {
        SelfEp { id, iface, target }
    }

    #[inline]
    fn iface(&self) -> Result<Rc<IfaceInner>> {
        self.iface.upgrade().ok_or_else(iface_closed)
    }

    /// The interface this endpoint sends to (checking that both ends are alive).
    #[inline]
    fn target(&self) -> Result<Rc<IfaceInner>> {
        if self.iface.strong_count() == 0 {
            return Err(iface_closed());
        }
        match &self.target {
            Some(t) => t.upgrade().ok_or_else(|| {
                Error::PeerFailure("the self interface this endpoint sends to was closed".into())
            }),
            None => Err(Error::InvalidParam(
                "self endpoint is not connected; call connect_to_ep first".into(),
            )),
        }
    }

    /// Checks that remote operations may run: the endpoint's interface is alive.
    #[inline]
    fn check_alive(&self) -> Result<()> {
        if self.iface.strong_count() == 0 {
            Err(iface_closed())
        } else {
            Ok(())
        }
    }

    /// Copies a message into the target ring with `fill`, which gets the slot buffer and gives
    /// the length. `fill` is our own copy code (never user code), so it may run under the borrow.
    #[inline]
    fn push(&self, am_id: u8, fill: impl FnOnce(&mut [u8]) -> usize) -> Result<Outcome> {
        let target = self.target()?;
        {
            let mut ring = target.ring.borrow_mut();
            let Some(idx) = ring.reserve() else {
                return Ok(Outcome::NoResource);
            };
            target.mark_work();
            let slot = &mut ring.slots[idx];
            let len = fill(&mut slot.buf);
            slot.am_id = am_id;
            slot.state = SlotState::Ready(len);
        }
        target.notify_recv();
        Ok(Outcome::DONE)
    }
}

impl Drop for SelfEp {
    fn drop(&mut self) {
        if let Some(iface) = self.iface.upgrade() {
            let mut eps = iface.eps.borrow_mut();
            if let Some(slot) = eps.try_remove(self.id.0 as usize) {
                iface
                    .n_pending
                    .set(iface.n_pending.get() - slot.pending.len());
            }
        }
    }
}

impl Endpoint for SelfEp {
    fn id(&self) -> EpId {
        self.id
    }

    #[inline]
    fn am_short(&mut self, id: u8, header: u64, payload: &[u8]) -> Result<Outcome> {
        check_am_id(id)?;
        check_len(8 + payload.len(), SEG_SIZE)?;
        self.push(id, |buf| {
            buf[..8].copy_from_slice(&header.to_le_bytes());
            buf[8..8 + payload.len()].copy_from_slice(payload);
            8 + payload.len()
        })
    }

    fn am_short_iov(&mut self, id: u8, iov: &[&[u8]]) -> Result<Outcome> {
        check_am_id(id)?;
        let total = iov_total(iov.len(), iov.iter().map(|p| p.len()).sum())?;
        check_len(total, SEG_SIZE)?;
        self.push(id, |buf| {
            let mut off = 0;
            for piece in iov {
                buf[off..off + piece.len()].copy_from_slice(piece);
                off += piece.len();
            }
            off
        })
    }

    fn am_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        id: u8,
        pack: F,
    ) -> Result<Outcome<usize>> {
        check_am_id(id)?;
        let target = self.target()?;
        // Borrow a slot's buffer, so `pack` (user code) runs without a borrow of the ring. The
        // loan gives it back when dropped, even if `pack` panics.
        let Some(mut loan) = SlotLoan::reserve(&target) else {
            return Ok(Outcome::NoResource);
        };
        let len = pack(&mut loan.buf[..SEG_SIZE]);
        if len > SEG_SIZE {
            drop(loan); // the slot stays Dropped: progress skips it
            return Err(Error::InvalidParam(format!(
                "am_bcopy pack closure claimed {len} bytes in a {SEG_SIZE}-byte buffer"
            )));
        }
        loan.am_id = id;
        loan.state = SlotState::Ready(len);
        drop(loan);
        target.notify_recv();
        Ok(Outcome::Done(len))
    }

    fn am_zcopy(
        &mut self,
        id: u8,
        header: &[u8],
        iov: &[Iov<'_>],
        _comp: CompletionId,
    ) -> Result<Outcome> {
        check_am_id(id)?;
        check_len(header.len(), MAX_AM_HDR)?;
        let total = iov_total(iov.len(), Iov::total_len(iov))?;
        check_len(total, SEG_SIZE)?;
        self.push(id, |buf| {
            buf[..header.len()].copy_from_slice(header);
            let mut off = header.len();
            for piece in iov {
                // SAFETY: an Iov is a bounds-checked range of a registered region, valid while
                // its handle (borrowed by the Iov) lives; the slot buffer has room for
                // MAX_AM_HDR + SEG_SIZE bytes and is a different allocation.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        piece.ptr(),
                        buf.as_mut_ptr().add(off),
                        piece.len(),
                    )
                };
                off += piece.len();
            }
            off
        })
    }

    fn put_short(&mut self, data: &[u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        self.check_alive()?;
        check_len(data.len(), SEG_SIZE)?;
        let p = rkey.local_ptr(remote_addr, data.len())?;
        // SAFETY: `local_ptr` checked the range against the mapped region, which the key keeps
        // valid; `copy` allows the source to overlap it.
        unsafe { std::ptr::copy(data.as_ptr(), p, data.len()) };
        Ok(Outcome::DONE)
    }

    fn put_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        pack: F,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome<usize>> {
        let iface = self.iface()?;
        // Borrow the bounce buffer so `pack` runs without a borrow. A put_bcopy issued from
        // inside `pack` finds it lent and gets NoResource.
        let mut loan = ScratchLoan::take(&iface);
        if loan.buf.is_empty() {
            return Ok(Outcome::NoResource);
        }
        let len = pack(&mut loan.buf);
        check_len(len, loan.buf.len())?;
        let p = rkey.local_ptr(remote_addr, len)?;
        // SAFETY: the range was checked against the mapped region; the bounce buffer is ours.
        unsafe { std::ptr::copy_nonoverlapping(loan.buf.as_ptr(), p, len) };
        Ok(Outcome::Done(len))
    }

    fn put_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome> {
        self.check_alive()?;
        let total = iov_total(iov.len(), Iov::total_len(iov))?;
        let mut p = rkey.local_ptr(remote_addr, total)?;
        for piece in iov {
            // SAFETY: the whole destination range was checked; each source piece is a
            // bounds-checked range of a live registration; `copy` tolerates overlap.
            unsafe {
                std::ptr::copy(piece.ptr(), p, piece.len());
                p = p.add(piece.len());
            }
        }
        Ok(Outcome::DONE)
    }

    fn get_short(&mut self, buf: &mut [u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        self.check_alive()?;
        check_len(buf.len(), SEG_SIZE)?;
        let p = rkey.local_ptr(remote_addr, buf.len())?;
        // SAFETY: the source range was checked against the mapped region.
        unsafe { std::ptr::copy(p, buf.as_mut_ptr(), buf.len()) };
        Ok(Outcome::DONE)
    }

    fn get_bcopy(
        &mut self,
        len: usize,
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
        unpack: &mut dyn FnMut(&[u8]),
    ) -> Result<Outcome> {
        self.check_alive()?;
        check_len(len, SEG_SIZE)?;
        let p = rkey.local_ptr(remote_addr, len)?;
        // SAFETY: the range was checked against the mapped region, which the key keeps valid
        // during the call; like a DMA read, concurrent writers see no ordering guarantee.
        let data = unsafe { std::slice::from_raw_parts(p, len) };
        unpack(data);
        Ok(Outcome::DONE)
    }

    fn get_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome> {
        self.check_alive()?;
        let total = iov_total(iov.len(), Iov::total_len(iov))?;
        let mut p = rkey.local_ptr(remote_addr, total)? as *const u8;
        for piece in iov {
            // SAFETY: the whole source range was checked; each destination piece is a
            // bounds-checked range of a live registration; `copy` tolerates overlap.
            unsafe {
                std::ptr::copy(p, piece.ptr(), piece.len());
                p = p.add(piece.len());
            }
        }
        Ok(Outcome::DONE)
    }

    fn atomic32_post(
        &mut self,
        op: AtomicOp,
        value: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        self.check_alive()?;
        reject_post_swap(op)?;
        let p = atomic_ptr::<u32>(rkey, remote_addr)?;
        // SAFETY: `atomic_ptr` checked that the word lies inside a region mapped in this process
        // (kept alive by the key) and is aligned; rucx accesses it only atomically or by copy.
        unsafe { cpu_atomic::fetch::<u32>(p, op, value) };
        Ok(Outcome::DONE)
    }

    fn atomic64_post(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        self.check_alive()?;
        reject_post_swap(op)?;
        let p = atomic_ptr::<u64>(rkey, remote_addr)?;
        // SAFETY: as in `atomic32_post`.
        unsafe { cpu_atomic::fetch::<u64>(p, op, value) };
        Ok(Outcome::DONE)
    }

    fn atomic32_fetch(
        &mut self,
        op: AtomicOp,
        value: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome<u32>> {
        self.check_alive()?;
        let p = atomic_ptr::<u32>(rkey, remote_addr)?;
        // SAFETY: as in `atomic32_post`.
        Ok(Outcome::Done(unsafe {
            cpu_atomic::fetch::<u32>(p, op, value)
        }))
    }

    fn atomic64_fetch(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        self.check_alive()?;
        let p = atomic_ptr::<u64>(rkey, remote_addr)?;
        // SAFETY: as in `atomic32_post`.
        Ok(Outcome::Done(unsafe {
            cpu_atomic::fetch::<u64>(p, op, value)
        }))
    }

    fn atomic_cswap32(
        &mut self,
        compare: u32,
        swap: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome<u32>> {
        self.check_alive()?;
        let p = atomic_ptr::<u32>(rkey, remote_addr)?;
        // SAFETY: as in `atomic32_post`.
        Ok(Outcome::Done(unsafe {
            cpu_atomic::cswap::<u32>(p, compare, swap)
        }))
    }

    fn atomic_cswap64(
        &mut self,
        compare: u64,
        swap: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        self.check_alive()?;
        let p = atomic_ptr::<u64>(rkey, remote_addr)?;
        // SAFETY: as in `atomic32_post`.
        Ok(Outcome::Done(unsafe {
            cpu_atomic::cswap::<u64>(p, compare, swap)
        }))
    }

    fn flush(&mut self, _comp: CompletionId) -> Result<Outcome> {
        let iface = self.iface()?;
        let eps = iface.eps.borrow();
        match eps.get(self.id.0 as usize) {
            Some(slot) if !slot.pending.is_empty() => Ok(Outcome::NoResource),
            _ => Ok(Outcome::DONE),
        }
    }

    fn fence(&mut self) -> Result<()> {
        // Every operation is applied (or queued in order) before the call returns.
        self.check_alive()
    }

    fn pending_add(&mut self, req: PendingId) -> Result<()> {
        let iface = self.iface()?;
        let target = self.target()?;
        if target.ring.borrow().has_space() {
            return Err(Error::Busy(format!(
                "the receive ring has free buffers (of {RX_RING_LEN}); send now"
            )));
        }
        {
            let mut eps = iface.eps.borrow_mut();
            let slot = eps.get_mut(self.id.0 as usize).ok_or_else(iface_closed)?;
            slot.pending.push_back(req);
        }
        iface.n_pending.set(iface.n_pending.get() + 1);
        iface.mark_work();
        target.add_blocked(&iface);
        Ok(())
    }

    fn pending_purge(&mut self, f: &mut dyn FnMut(PendingId)) {
        let Some(iface) = self.iface.upgrade() else {
            return;
        };
        // Take the queue out so `f` runs without a borrow; put the (empty) allocation back.
        let mut queue = {
            let mut eps = iface.eps.borrow_mut();
            match eps.get_mut(self.id.0 as usize) {
                Some(slot) => std::mem::take(&mut slot.pending),
                None => return,
            }
        };
        iface.n_pending.set(iface.n_pending.get() - queue.len());
        for req in queue.drain(..) {
            f(req);
        }
        let mut eps = iface.eps.borrow_mut();
        if let Some(slot) = eps.get_mut(self.id.0 as usize) {
            if slot.pending.is_empty() {
                slot.pending = queue;
            }
        }
    }

    fn ep_address(&self) -> Result<Vec<u8>> {
        let iface = self.iface()?;
        Ok(EpAddr {
            iface_id: iface.id,
            ep_id: self.id.0,
        }
        .encode()
        .to_vec())
    }

    fn connect_to_ep(&mut self, dev_addr: &[u8], ep_addr: &[u8]) -> Result<()> {
        let iface = self.iface()?;
        let dev = DeviceAddr::decode(dev_addr)?;
        dev.check_this_process()?;
        let peer = EpAddr::decode(ep_addr)?;
        let target = Rc::downgrade(&resolve_ep_addr(&peer)?);
        let mut eps = iface.eps.borrow_mut();
        let slot: &mut EpSlot = eps.get_mut(self.id.0 as usize).ok_or_else(iface_closed)?;
        slot.target = Some(target.clone());
        self.target = Some(target);
        Ok(())
    }
}
