//! rc_verbs endpoint: active messages (inline, bounce buffer, zero-copy), RDMA put/get,
//! atomics, flush and fence, pending requests, and the endpoint-to-endpoint connection.

use super::ffi::{self, ibv_qp_attr, ibv_send_wr, ibv_sge};
use super::mem_of;
use super::state::*;
use super::wire::{AmHdr, DevAddr, EpAddr, LL_ETHERNET, LL_INFINIBAND};
use crate::ep::{check_am_id, check_len, AtomicOp, CompletionId, Endpoint, EpId, PendingId};
use crate::md::{Iov, RemoteKey};
use crate::small_copy::put_small;
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::rc::Rc;
use ucs::{Error, Outcome, Result};

/// An rc_verbs endpoint: one RC queue pair.
pub struct RcVerbsEp {
    pub(super) inner: Rc<RefCell<Inner>>,
    pub(super) key: usize,
    pub(super) gen: u16,
}

impl Drop for RcVerbsEp {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            if inner.eps.get(self.key).is_some_and(|e| e.gen == self.gen) {
                let ep = inner.eps.remove(self.key);
                inner.tx_signaled -= ep.signaled_out;
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
                inner.tag_ep_gone(self.key, self.gen);
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

    pub(super) fn lkey_sges(inner: &Inner, iov: &[Iov<'_>], sges: &mut [ibv_sge]) -> Result<usize> {
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

    /// The common steps of the short sends, under one borrow: the id, the length against the
    /// inline limit, the endpoint's readiness (`NoResource` when it must wait), and the post
    /// of `parts` gathered into one inline entry. `None` when the parts do not fit `GATHER`
    /// bytes: the caller posts them as separate entries. Always inlined: with a fixed number
    /// of parts the gathering unrolls.
    #[inline(always)]
    fn am_short_gathered(&mut self, id: u8, parts: &[&[u8]]) -> Result<Option<Outcome>> {
        check_am_id(id)?;
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        check_len(total, inner.max_inline as usize - AmHdr::LEN)?;
        if !inner.am_ready(self.key, self.gen)? {
            return Ok(Some(Outcome::NoResource));
        }
        match post_gathered(inner, self.key, id, parts) {
            Some(r) => r.map(|()| Some(Outcome::DONE)),
            None => Ok(None),
        }
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
            send_flags: if inline { ffi::IBV_SEND_INLINE } else { 0 },
            ..Default::default()
        };
        inner.post_am(self.key, &mut wr, kind, needs)
    }
}

/// Largest inline active message (id and parts) gathered into one buffer before posting.
const GATHER: usize = 128;

/// Posts an inline active message of the id and `parts` gathered into one stack buffer, as one
/// scatter entry of endpoint `key` (the provider then copies one piece instead of one per
/// part, during the call). `None` when they do not fit `GATHER` bytes (the caller posts the
/// parts). Always inlined: with a fixed number of parts the gathering loop unrolls.
#[inline(always)]
fn post_gathered(inner: &mut Inner, key: usize, id: u8, parts: &[&[u8]]) -> Option<Result<()>> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if AmHdr::LEN + total > GATHER {
        return None;
    }
    let mut buf = [MaybeUninit::<u8>::uninit(); GATHER];
    buf[0].write(id);
    let mut at = AmHdr::LEN;
    for p in parts {
        put_small(&mut buf, at, p);
        at += p.len();
    }
    let mut sge = ibv_sge {
        addr: buf.as_ptr() as u64,
        length: at as u32,
        lkey: 0,
    };
    let mut wr = ibv_send_wr {
        sg_list: &mut sge,
        num_sge: 1,
        send_flags: ffi::IBV_SEND_INLINE,
        ..Default::default()
    };
    Some(inner.post_am(key, &mut wr, TxKind::Plain, false))
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
        if let Some(o) = self.am_short_gathered(id, &[&header.to_le_bytes(), payload])? {
            return Ok(o);
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

    /// The two header words and a payload that fit `GATHER` bytes go into one inline
    /// scatter entry under one borrow, without the general gather of
    /// [`Endpoint::am_short_iov`] (which takes longer messages). Inlined into the dispatch
    /// over every transport's endpoint (`AnyEp`): out of line it cost the rc_verbs send about
    /// 50 more instructions, inlined it costs the shared-memory send about 20 (callgrind).
    #[inline]
    fn am_short2(&mut self, id: u8, h0: u64, h1: u64, payload: &[u8]) -> Result<Outcome> {
        let parts: [&[u8]; 3] = [&h0.to_le_bytes(), &h1.to_le_bytes(), payload];
        match self.am_short_gathered(id, &parts)? {
            Some(o) => Ok(o),
            None => self.am_short_iov(id, &parts),
        }
    }

    fn am_short_iov(&mut self, id: u8, iov: &[&[u8]]) -> Result<Outcome> {
        check_am_id(id)?;
        let total: usize = iov.iter().map(|b| b.len()).sum();
        {
            // One borrow for the checks and, for a message that fits GATHER bytes, the post.
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            check_len(total, inner.max_inline as usize - AmHdr::LEN)?;
            // Empty parts take no scatter entry: counted only when the parts could be too many.
            let max_sge = inner.max_send_sge as usize;
            if iov.len() + 1 > max_sge {
                let parts = iov.iter().filter(|b| !b.is_empty()).count();
                if parts + 1 > max_sge {
                    return Err(Error::InvalidParam(format!(
                        "{parts} iov entries exceed the limit of {}",
                        max_sge - 1
                    )));
                }
            }
            if !inner.am_ready(self.key, self.gen)? {
                return Ok(Outcome::NoResource);
            }
            if let Some(r) = post_gathered(inner, self.key, id, iov) {
                return r.map(|()| Outcome::DONE);
            }
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
                ..Default::default()
            };
            if let Err(e) = inner.post_am(k, &mut wr, TxKind::BufComp(b, comp), true) {
                inner.tx_free.push(b);
                return Err(e);
            }
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
            let local = ibv_sge {
                addr: data.as_ptr() as u64,
                length: data.len() as u32,
                lkey: 0,
            };
            let remote = (remote_addr, rkey.tl_value as u32);
            inner.post_rdma_write(k, local, remote, ffi::IBV_SEND_INLINE, TxKind::Plain, false)?;
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
        let local = ibv_sge {
            addr: buf as u64,
            length: len as u32,
            lkey,
        };
        let remote = (remote_addr, rkey.tl_value as u32);
        if let Err(e) = inner.post_rdma_write(self.key, local, remote, 0, TxKind::Buf(b), false) {
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
        // A get of a rendezvous that went unexpected may be split (`tag/get.rs`).
        if let Some(done) =
            self.with(|inner, k| inner.tag_split_get(k, iov, remote_addr, rkey, comp))?
        {
            return Ok(done);
        }
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
            if ep.next_seq == ep.done_seq {
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

    /// An idle, connected endpoint posts a credit write the peer's adapter must acknowledge;
    /// one with operations in flight needs none (they are acknowledged, or fail, already).
    fn check(&mut self) -> Result<()> {
        self.with(|inner, k| {
            let ep = &inner.eps[k];
            if let Some(e) = &ep.failed {
                return Err(e.clone());
            }
            if ep.remote.is_none() || ep.next_seq != ep.done_seq || ep.sq_avail < 2 {
                return Ok(());
            }
            post_credit_write(inner, k, TxKind::Plain)
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
            inner.eps_attention = true;
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

    fn tag_eager_short(&mut self, tag: u64, data: &[u8]) -> Result<Outcome> {
        self.tag_eager_short_impl(tag, data)
    }
    fn tag_eager_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        tag: u64,
        imm: u64,
        pack: F,
    ) -> Result<Outcome<usize>> {
        self.tag_eager_bcopy_impl(tag, imm, pack)
    }
    fn tag_eager_zcopy(
        &mut self,
        tag: u64,
        imm: u64,
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        self.tag_eager_zcopy_impl(tag, imm, iov, comp)
    }
    fn tag_rndv_zcopy(
        &mut self,
        tag: u64,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        self.tag_rndv_zcopy_impl(tag, header, iov, comp)
    }
    fn tag_rndv_cancel(&mut self, op: u64) -> Result<()> {
        self.tag_rndv_cancel_impl(op)
    }
    fn tag_rndv_request(&mut self, tag: u64, header: &[u8]) -> Result<Outcome> {
        self.tag_rndv_request_impl(tag, header)
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
