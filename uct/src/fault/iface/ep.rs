//! The fault wrapper's endpoint: send-side faults (stall, partial, drop, die) in front of the
//! wrapped transport's endpoint.

use super::{Core, Count};
use crate::caps::{AtomicOps, IfaceAttr, IfaceFlags};
use crate::ep::{AtomicOp, CompletionId, Endpoint, EpId, PendingId};
use crate::md::{Iov, RemoteKey};
use std::cell::RefCell;
use std::rc::Rc;
use ucs::{Error, Outcome, Result};

/// What an endpoint holds: the wrapped endpoint (gone once its connection was dropped) and an
/// active message taken by a partial send that has not reached it yet.
pub(in crate::fault) struct EpState<E> {
    pub(in crate::fault) inner: Option<E>,
    pub(in crate::fault) backlog: Option<(u8, Vec<u8>)>,
}

impl<E: Endpoint> EpState<E> {
    /// Passes the backlog to the wrapped endpoint. True when nothing is left; an error means the
    /// message could not go out (the endpoint is then closed by the caller).
    pub(in crate::fault) fn drain(&mut self) -> Result<bool> {
        let Some((id, data)) = self.backlog.as_ref() else {
            return Ok(true);
        };
        let Some(inner) = self.inner.as_mut() else {
            return Err(reset());
        };
        let out = inner.am_bcopy(*id, |b: &mut [u8]| {
            let n = data.len().min(b.len());
            b[..n].copy_from_slice(&data[..n]);
            n
        })?;
        if out == Outcome::NoResource {
            return Ok(false);
        }
        self.backlog = None;
        Ok(true)
    }
}

fn reset() -> Error {
    Error::ConnectionReset("fault injection dropped this endpoint's connection".into())
}

/// An endpoint of a fault-injecting interface (see the module documentation).
pub struct FaultEp<E: Endpoint> {
    id: EpId,
    st: Rc<RefCell<EpState<E>>>,
    core: Rc<RefCell<Core<E>>>,
}

impl<E: Endpoint> FaultEp<E> {
    pub(in crate::fault) fn new(inner: E, core: Rc<RefCell<Core<E>>>) -> Self {
        FaultEp {
            id: inner.id(),
            st: Rc::new(RefCell::new(EpState {
                inner: Some(inner),
                backlog: None,
            })),
            core,
        }
    }

    /// The wrapped endpoint, taken out (tests use it to keep a connection without faults).
    #[cfg(test)]
    pub(in crate::fault) fn take_inner(self) -> Option<E> {
        self.st.borrow_mut().inner.take()
    }

    /// Closes the connection: the wrapped endpoint is destroyed and the error reported once
    /// from progress.
    fn drop_conn(&self, st: &mut EpState<E>, err: Error) -> Error {
        st.inner = None;
        st.backlog = None;
        self.core.borrow_mut().dropped.push((self.id, err.clone()));
        err
    }

    /// Decides the fate of a send operation: `Ok(true)` go ahead, `Ok(false)` answer
    /// `NoResource` (stalled, or a partial send still waiting), `Err` the connection is gone.
    /// An operation that is not `valid` (an operation or size the capabilities rule out) meets
    /// no fault: the wrapped endpoint gives its own error.
    fn gate(&mut self, valid: bool) -> Result<bool> {
        let mut st = self.st.borrow_mut();
        if st.inner.is_none() {
            return Err(reset());
        }
        if !valid {
            return Ok(true);
        }
        match st.drain() {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => return Err(self.drop_conn(&mut st, e)),
        }
        let mut c = self.core.borrow_mut();
        if !c.armed() {
            return Ok(true);
        }
        if c.roll(|k| k.die) {
            tracing::warn!("fault injection: process {} dies now", std::process::id());
            // SAFETY: plain syscall signalling this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        if c.roll(|k| k.drop) {
            c.count(Count::Drop);
            drop(c);
            return Err(self.drop_conn(&mut st, reset()));
        }
        if c.roll(|k| k.stall) {
            c.count(Count::Stall);
            return Ok(false);
        }
        Ok(true)
    }

    /// True when the wrapped interface offers the operation of `flag`.
    fn can(&self, flag: IfaceFlags) -> bool {
        self.core.borrow().attr.flags.contains(flag)
    }

    /// The wrapped interface's capabilities and limits.
    fn lim(&self) -> IfaceAttr {
        self.core.borrow().attr.clone()
    }

    /// Runs `f` on the wrapped endpoint once the gate let the operation through.
    fn with<T>(
        &mut self,
        valid: bool,
        f: impl FnOnce(&mut E) -> Result<Outcome<T>>,
    ) -> Result<Outcome<T>> {
        if !self.gate(valid)? {
            return Ok(Outcome::NoResource);
        }
        let mut st = self.st.borrow_mut();
        match st.inner.as_mut() {
            Some(e) => f(e),
            None => Err(reset()),
        }
    }
}

impl<E: Endpoint> Endpoint for FaultEp<E> {
    fn id(&self) -> EpId {
        self.id
    }
    fn am_short(&mut self, id: u8, header: u64, payload: &[u8]) -> Result<Outcome> {
        let ok = self.can(IfaceFlags::AM_SHORT)
            && id < crate::AM_ID_MAX
            && 8 + payload.len() <= self.lim().am.max_short;
        self.with(ok, |e| e.am_short(id, header, payload))
    }
    fn am_short_iov(&mut self, id: u8, iov: &[&[u8]]) -> Result<Outcome> {
        let len: usize = iov.iter().map(|p| p.len()).sum();
        let ok = self.can(IfaceFlags::AM_SHORT)
            && id < crate::AM_ID_MAX
            && len <= self.lim().am.max_short;
        self.with(ok, |e| e.am_short_iov(id, iov))
    }
    fn am_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        id: u8,
        pack: F,
    ) -> Result<Outcome<usize>> {
        let valid = self.can(IfaceFlags::AM_BCOPY) && id < crate::AM_ID_MAX;
        if !self.gate(valid)? {
            return Ok(Outcome::NoResource);
        }
        let mut c = self.core.borrow_mut();
        if valid && c.roll(|k| k.partial) {
            // Taken, reported done, and passed on later: the tail of a short write.
            c.count(Count::Partial);
            let mut buf = vec![0u8; c.attr.am.max_bcopy];
            let n = pack(&mut buf);
            crate::ep::check_len(n, buf.len())?;
            buf.truncate(n);
            c.backlogged.push(Rc::downgrade(&self.st));
            drop(c);
            self.st.borrow_mut().backlog = Some((id, buf));
            return Ok(Outcome::Done(n));
        }
        drop(c);
        let mut st = self.st.borrow_mut();
        match st.inner.as_mut() {
            Some(e) => e.am_bcopy(id, pack),
            None => Err(reset()),
        }
    }
    fn am_zcopy(
        &mut self,
        id: u8,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        let l = self.lim().am;
        let ok = self.can(IfaceFlags::AM_ZCOPY)
            && id < crate::AM_ID_MAX
            && header.len() <= l.max_hdr
            && iov.len() <= l.max_iov
            && Iov::total_len(iov) <= l.max_zcopy;
        self.with(ok, |e| e.am_zcopy(id, header, iov, comp))
    }
    fn put_short(&mut self, data: &[u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        let ok = self.can(IfaceFlags::PUT_SHORT) && data.len() <= self.lim().put.max_short;
        self.with(ok, |e| e.put_short(data, remote_addr, rkey))
    }
    fn put_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        pack: F,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome<usize>> {
        let ok = self.can(IfaceFlags::PUT_BCOPY);
        self.with(ok, |e| e.put_bcopy(pack, remote_addr, rkey))
    }
    fn put_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome> {
        let l = self.lim().put;
        let ok = self.can(IfaceFlags::PUT_ZCOPY)
            && iov.len() <= l.max_iov
            && Iov::total_len(iov) <= l.max_zcopy;
        self.with(ok, |e| e.put_zcopy(iov, remote_addr, rkey, comp))
    }
    fn get_short(&mut self, buf: &mut [u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        let ok = self.can(IfaceFlags::GET_SHORT) && buf.len() <= self.lim().get.max_short;
        self.with(ok, |e| e.get_short(buf, remote_addr, rkey))
    }
    fn get_bcopy(
        &mut self,
        len: usize,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
        unpack: &mut dyn FnMut(&[u8]),
    ) -> Result<Outcome> {
        let ok = self.can(IfaceFlags::GET_BCOPY) && len <= self.lim().get.max_bcopy;
        self.with(ok, |e| e.get_bcopy(len, remote_addr, rkey, comp, unpack))
    }
    fn get_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome> {
        let l = self.lim().get;
        let ok = self.can(IfaceFlags::GET_ZCOPY)
            && iov.len() <= l.max_iov
            && Iov::total_len(iov) <= l.max_zcopy;
        self.with(ok, |e| e.get_zcopy(iov, remote_addr, rkey, comp))
    }
    fn peer_rkey_unpack(&mut self, packed: &[u8]) -> Result<Option<RemoteKey>> {
        match self.st.borrow_mut().inner.as_mut() {
            Some(e) => e.peer_rkey_unpack(packed),
            None => Err(reset()),
        }
    }
    fn atomic32_post(
        &mut self,
        op: AtomicOp,
        value: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        let ok = self.lim().atomics.op32.contains(op.flag());
        self.with(ok, |e| e.atomic32_post(op, value, remote_addr, rkey))
    }
    fn atomic64_post(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        let ok = self.lim().atomics.op64.contains(op.flag());
        self.with(ok, |e| e.atomic64_post(op, value, remote_addr, rkey))
    }
    fn atomic32_fetch(
        &mut self,
        op: AtomicOp,
        value: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u32>> {
        let ok = self.lim().atomics.fop32.contains(op.flag());
        self.with(ok, |e| e.atomic32_fetch(op, value, remote_addr, rkey, comp))
    }
    fn atomic64_fetch(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        let ok = self.lim().atomics.fop64.contains(op.flag());
        self.with(ok, |e| e.atomic64_fetch(op, value, remote_addr, rkey, comp))
    }
    fn atomic_cswap32(
        &mut self,
        compare: u32,
        swap: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u32>> {
        let ok = self.lim().atomics.fop32.contains(AtomicOps::CSWAP);
        self.with(ok, |e| {
            e.atomic_cswap32(compare, swap, remote_addr, rkey, comp)
        })
    }
    fn atomic_cswap64(
        &mut self,
        compare: u64,
        swap: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        let ok = self.lim().atomics.fop64.contains(AtomicOps::CSWAP);
        self.with(ok, |e| {
            e.atomic_cswap64(compare, swap, remote_addr, rkey, comp)
        })
    }

    fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
        let mut st = self.st.borrow_mut();
        match st.drain() {
            Ok(true) => {}
            Ok(false) => return Ok(Outcome::NoResource),
            Err(e) => return Err(self.drop_conn(&mut st, e)),
        }
        match st.inner.as_mut() {
            Some(e) => e.flush(comp),
            None => Err(reset()),
        }
    }
    fn fence(&mut self) -> Result<()> {
        match self.st.borrow_mut().inner.as_mut() {
            Some(e) => e.fence(),
            None => Err(reset()),
        }
    }
    fn check(&mut self) -> Result<()> {
        match self.st.borrow_mut().inner.as_mut() {
            Some(e) => e.check(),
            None => Err(reset()),
        }
    }
    fn pending_add(&mut self, req: PendingId) -> Result<()> {
        let r = match self.st.borrow_mut().inner.as_mut() {
            Some(e) => e.pending_add(req),
            None => return Err(reset()),
        };
        match r {
            // The wrapped endpoint has room, but the wrapper held the operation back: the
            // retry comes from the wrapper's progress.
            Err(Error::Busy(_)) => {
                self.core.borrow_mut().retries.push_back((self.id, req));
                Ok(())
            }
            r => r,
        }
    }
    fn pending_purge(&mut self, f: &mut dyn FnMut(PendingId)) {
        let id = self.id;
        self.core.borrow_mut().retries.retain(|&(ep, req)| {
            if ep == id {
                f(req);
                false
            } else {
                true
            }
        });
        if let Some(e) = self.st.borrow_mut().inner.as_mut() {
            e.pending_purge(f);
        }
    }
    fn ep_address(&self) -> Result<Vec<u8>> {
        match self.st.borrow().inner.as_ref() {
            Some(e) => e.ep_address(),
            None => Err(reset()),
        }
    }
    fn connect_to_ep(&mut self, dev_addr: &[u8], ep_addr: &[u8]) -> Result<()> {
        match self.st.borrow_mut().inner.as_mut() {
            Some(e) => e.connect_to_ep(dev_addr, ep_addr),
            None => Err(reset()),
        }
    }
    fn tag_eager_short(&mut self, tag: u64, data: &[u8]) -> Result<Outcome> {
        let ok =
            self.can(IfaceFlags::TAG_EAGER_SHORT) && data.len() <= self.lim().tag.eager_max_short;
        self.with(ok, |e| e.tag_eager_short(tag, data))
    }
    fn tag_eager_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        tag: u64,
        imm: u64,
        pack: F,
    ) -> Result<Outcome<usize>> {
        let ok = self.can(IfaceFlags::TAG_EAGER_BCOPY);
        self.with(ok, |e| e.tag_eager_bcopy(tag, imm, pack))
    }
    fn tag_eager_zcopy(
        &mut self,
        tag: u64,
        imm: u64,
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        let ok = self.can(IfaceFlags::TAG_EAGER_ZCOPY)
            && Iov::total_len(iov) <= self.lim().tag.eager_max_zcopy;
        self.with(ok, |e| e.tag_eager_zcopy(tag, imm, iov, comp))
    }
    fn tag_rndv_zcopy(
        &mut self,
        tag: u64,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        let t = self.lim().tag;
        let ok = self.can(IfaceFlags::TAG_RNDV_ZCOPY)
            && header.len() <= t.rndv_max_hdr
            && Iov::total_len(iov) <= t.rndv_max_zcopy;
        self.with(ok, |e| e.tag_rndv_zcopy(tag, header, iov, comp))
    }
    fn tag_rndv_cancel(&mut self, op: u64) -> Result<()> {
        match self.st.borrow_mut().inner.as_mut() {
            Some(e) => e.tag_rndv_cancel(op),
            None => Err(reset()),
        }
    }
    fn tag_rndv_request(&mut self, tag: u64, header: &[u8]) -> Result<Outcome> {
        let ok =
            self.can(IfaceFlags::TAG_RNDV_ZCOPY) && header.len() <= self.lim().tag.rndv_max_hdr;
        self.with(ok, |e| e.tag_rndv_request(tag, header))
    }
}
