//! The sending side of rc_verbs' tag offload: tagged eager messages (inline, bounce buffer,
//! zero-copy) and rendezvous announcements, each one RC send carrying credits like an active
//! message (seam 3 of the module docs).

use super::state::{RndvOp, MAX_RNDV_OPS};
use super::wire::{EagerHdr, RndvHdr};
use crate::ep::{check_len, CompletionId};
use crate::md::Iov;
use crate::rc_verbs::ep::RcVerbsEp;
use crate::rc_verbs::ffi::{self, ibv_send_wr, ibv_sge};
use crate::rc_verbs::mem_of;
use crate::rc_verbs::state::{Inner, TxKind, MAX_SEND_SGE};
use ucs::{Error, Outcome, Result};

impl RcVerbsEp {
    /// Runs `f` on the interface state once the endpoint is known to exist and to be able to
    /// send an active message now; `Ok(None)` when it must wait (`NoResource`).
    fn tag_ready<T>(
        &mut self,
        f: impl FnOnce(&mut Inner, usize) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        if !inner.am_ready(self.key, self.gen)? {
            return Ok(None);
        }
        f(inner, self.key).map(Some)
    }

    /// `tag_eager_short`: the header and the data inline.
    pub(in crate::rc_verbs) fn tag_eager_short_impl(
        &mut self,
        tag: u64,
        data: &[u8],
    ) -> Result<Outcome> {
        let hdr = EagerHdr { tag, imm: 0 }.encode();
        let max = self.inner.borrow().max_inline as usize - EagerHdr::LEN;
        check_len(data.len(), max)?;
        let r = self.tag_ready(|inner, k| {
            let mut sges = [
                ibv_sge {
                    addr: hdr.as_ptr() as u64,
                    length: hdr.len() as u32,
                    lkey: 0,
                },
                ibv_sge {
                    addr: data.as_ptr() as u64,
                    length: data.len() as u32,
                    lkey: 0,
                },
            ];
            let mut wr = ibv_send_wr {
                sg_list: sges.as_mut_ptr(),
                num_sge: if data.is_empty() { 1 } else { 2 },
                send_flags: ffi::IBV_SEND_INLINE,
                ..Default::default()
            };
            inner.post_am(k, &mut wr, TxKind::Plain, false)
        })?;
        Ok(r.map_or(Outcome::NoResource, |()| Outcome::DONE))
    }

    /// `tag_eager_bcopy`: the header and what `pack` writes, from a bounce buffer.
    pub(in crate::rc_verbs) fn tag_eager_bcopy_impl<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        tag: u64,
        imm: u64,
        pack: F,
    ) -> Result<Outcome<usize>> {
        let Some((b, buf, seg)) = self
            .tag_ready(|inner, _| {
                Ok(inner
                    .alloc_buf()
                    .map(|b| (b, inner.tx_buf(b), inner.cfg.seg_size)))
            })?
            .flatten()
        else {
            return Ok(Outcome::NoResource);
        };
        // SAFETY: bounce buffer `b` is ours until its send completes; no borrow of the state
        // is held while `pack` runs.
        let slice = unsafe { std::slice::from_raw_parts_mut(buf, seg) };
        slice[..EagerHdr::LEN].copy_from_slice(&EagerHdr { tag, imm }.encode());
        let len = pack(&mut slice[EagerHdr::LEN..]);
        let mut inner = self.inner.borrow_mut();
        if len > seg - EagerHdr::LEN {
            inner.tx_free.push(b);
            return Err(Error::MessageTooLong {
                len,
                max: seg - EagerHdr::LEN,
            });
        }
        let mut sge = ibv_sge {
            addr: buf as u64,
            length: (EagerHdr::LEN + len) as u32,
            lkey: inner.tx.mr.lkey(),
        };
        let mut wr = ibv_send_wr {
            sg_list: &mut sge,
            num_sge: 1,
            ..Default::default()
        };
        if let Err(e) = inner.post_am(self.key, &mut wr, TxKind::Buf(b), false) {
            inner.tx_free.push(b);
            return Err(e);
        }
        Ok(Outcome::Done(len))
    }

    /// `tag_eager_zcopy`: the header from a bounce buffer, the data from the caller's
    /// registered memory; completes when the send did.
    pub(in crate::rc_verbs) fn tag_eager_zcopy_impl(
        &mut self,
        tag: u64,
        imm: u64,
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        let total = Iov::total_len(iov);
        let r = {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            check_len(total, inner.cfg.seg_size - EagerHdr::LEN)?;
            let lim = inner.max_send_sge as usize;
            let mut sges = [ibv_sge::default(); MAX_SEND_SGE as usize];
            let n = Self::lkey_sges(inner, iov, &mut sges[1..lim])?;
            if !inner.am_ready(self.key, self.gen)? {
                return Ok(Outcome::NoResource);
            }
            let Some(b) = inner.alloc_buf() else {
                return Ok(Outcome::NoResource);
            };
            let buf = inner.tx_buf(b);
            let hdr = EagerHdr { tag, imm }.encode();
            // SAFETY: bounce buffer `b` is ours and holds at least the header.
            unsafe { std::ptr::copy_nonoverlapping(hdr.as_ptr(), buf, hdr.len()) };
            sges[0] = ibv_sge {
                addr: buf as u64,
                length: hdr.len() as u32,
                lkey: inner.tx.mr.lkey(),
            };
            let mut wr = ibv_send_wr {
                sg_list: sges.as_mut_ptr(),
                num_sge: (n + 1) as i32,
                ..Default::default()
            };
            let r = inner.post_am(self.key, &mut wr, TxKind::BufComp(b, comp), true);
            if r.is_err() {
                inner.tx_free.push(b);
            }
            r
        };
        r.map(|()| Outcome::InProgress)
    }

    /// Sends a rendezvous header (`op_id` 0: a request) and `user` from a bounce buffer.
    fn rndv_send(&mut self, h: RndvHdr, user: &[u8]) -> Result<Option<()>> {
        let r = self.tag_ready(|inner, k| {
            let Some(b) = inner.alloc_buf() else {
                return Ok(None);
            };
            let buf = inner.tx_buf(b);
            let hdr = h.encode();
            // SAFETY: bounce buffer `b` is ours; header and user header fit (checked by the
            // callers against `seg_size - RndvHdr::LEN`).
            unsafe {
                std::ptr::copy_nonoverlapping(hdr.as_ptr(), buf, hdr.len());
                std::ptr::copy_nonoverlapping(user.as_ptr(), buf.add(hdr.len()), user.len());
            }
            let mut sge = ibv_sge {
                addr: buf as u64,
                length: (hdr.len() + user.len()) as u32,
                lkey: inner.tx.mr.lkey(),
            };
            let mut wr = ibv_send_wr {
                sg_list: &mut sge,
                num_sge: 1,
                ..Default::default()
            };
            if let Err(e) = inner.post_am(k, &mut wr, TxKind::Buf(b), false) {
                inner.tx_free.push(b);
                return Err(e);
            }
            Ok(Some(()))
        })?;
        Ok(r.flatten())
    }

    /// `tag_rndv_zcopy`: announces one registered region; the receiver reads it when a posted
    /// receive matches and acknowledges, which completes `comp`. Gives the operation id.
    pub(in crate::rc_verbs) fn tag_rndv_zcopy_impl(
        &mut self,
        tag: u64,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        let [v] = iov else {
            return Err(Error::InvalidParam(format!(
                "an rc_verbs tag rendezvous takes one piece of memory, not {}",
                iov.len()
            )));
        };
        let (max_hdr, max_len, md_name) = {
            let inner = self.inner.borrow();
            (
                inner.cfg.seg_size - RndvHdr::LEN,
                inner.dev.port_attr.max_msg_sz as usize,
                inner.md_name,
            )
        };
        check_len(header.len(), max_hdr)?;
        check_len(v.len(), max_len)?;
        let mem = mem_of(v.memh(), md_name)?;
        let (rkey, lkey) = (mem.rkey(), mem.lkey());
        let slot = {
            let mut inner = self.inner.borrow_mut();
            if inner.tag.ops.len() >= MAX_RNDV_OPS {
                return Ok(Outcome::NoResource);
            }
            let slot = inner.tag.ops.vacant_key();
            let id = inner.tag.op_id(slot);
            inner.tag.ops.insert(RndvOp {
                id,
                comp,
                key: self.key,
                gen: self.gen,
                addr: v.ptr() as u64,
                len: v.len() as u64,
                lkey,
                _keep: v.memh().clone(),
            })
        };
        let id = self.inner.borrow().tag.ops[slot].id;
        let h = RndvHdr {
            tag,
            op_id: id,
            addr: v.ptr() as u64,
            length: v.len() as u64,
            rkey,
        };
        match self.rndv_send(h, header) {
            Ok(Some(())) => Ok(Outcome::Done(id)),
            r => {
                self.inner.borrow_mut().tag.ops.remove(slot);
                r.map(|_| Outcome::NoResource)
            }
        }
    }

    /// `tag_rndv_cancel`: forgets an outstanding rendezvous (its acknowledgement, if one still
    /// comes, is ignored; no completion is reported).
    pub(in crate::rc_verbs) fn tag_rndv_cancel_impl(&mut self, op: u64) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        match inner.tag.take_op(op, self.key, self.gen) {
            Some(_) => Ok(()),
            None => Err(Error::InvalidParam(format!(
                "no tag rendezvous {op} is outstanding on this rc_verbs endpoint"
            ))),
        }
    }

    /// `tag_rndv_request`: a rendezvous header without data, always unexpected at the peer.
    pub(in crate::rc_verbs) fn tag_rndv_request_impl(
        &mut self,
        tag: u64,
        header: &[u8],
    ) -> Result<Outcome> {
        let max_hdr = self.inner.borrow().cfg.seg_size - RndvHdr::LEN;
        check_len(header.len(), max_hdr)?;
        let h = RndvHdr {
            tag,
            op_id: 0,
            addr: 0,
            length: 0,
            rkey: 0,
        };
        Ok(match self.rndv_send(h, header)? {
            Some(()) => Outcome::DONE,
            None => Outcome::NoResource,
        })
    }
}
