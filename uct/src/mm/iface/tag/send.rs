//! Tag offload, sending side: eager messages (short, bcopy, zcopy) into the peer's FIFO, and
//! rendezvous announcements whose data the receiving interface reads itself.

use super::*;

impl MmEp {
    /// `tag_eager_short`.
    pub(in crate::mm) fn tag_short(&mut self, tag: u64, data: &[u8]) -> Result<Outcome> {
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
    pub(in crate::mm) fn tag_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        tag: u64,
        imm: u64,
        pack: F,
    ) -> Result<Outcome<usize>> {
        self.send(ID_EAGER, |_, buf| {
            // SAFETY: the claimed element's buffer area is BUF_DATA_MAX bytes only this sender
            // touches until it publishes.
            let dst = unsafe { std::slice::from_raw_parts_mut(buf.ptr(), BUF_DATA_MAX) };
            let Some((h, body)) = dst.split_first_chunk_mut::<{ EagerHdr::LEN }>() else {
                return Err(Error::MessageTooLong {
                    len: EagerHdr::LEN,
                    max: BUF_DATA_MAX,
                });
            };
            let len = pack(body);
            check_len(len, EAGER_MAX_BCOPY)?;
            EagerHdr { tag, imm }.encode(h);
            Ok((fifo::KIND_BUF, EagerHdr::LEN + len, len))
        })
    }

    /// `tag_eager_zcopy`: one copy from the registered pieces into the receiver's element.
    pub(in crate::mm) fn tag_zcopy(
        &mut self,
        tag: u64,
        imm: u64,
        iov: &[Iov<'_>],
    ) -> Result<Outcome> {
        let total = check_iov(iov, EAGER_MAX_BCOPY)?;
        let inline = EagerHdr::LEN + total <= INLINE_MAX;
        self.send(ID_EAGER, |inl, buf| {
            let dst = if inline { inl } else { buf.ptr() };
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

    pub(in crate::mm) fn rndv_send(&mut self, h: &RndvHdr, header: &[u8]) -> Result<Outcome> {
        check_len(header.len(), RNDV_MAX_HDR)?;
        let body = h.key_len() + header.len();
        self.send(ID_RNDV, |inl, buf| {
            let mut fixed = [0u8; RndvHdr::LEN];
            h.encode(header.len() as u16, &mut fixed);
            // SAFETY: the inline area holds INLINE_MAX >= LEN bytes and the buffer area BUF_DATA_MAX >=
            // key + header bytes (checked above), both ours until published.
            unsafe {
                std::ptr::copy_nonoverlapping(fixed.as_ptr(), inl, RndvHdr::LEN);
                h.encode_body(header, std::slice::from_raw_parts_mut(buf.ptr(), body));
            }
            Ok((fifo::KIND_BUF, body, ()))
        })
    }

    /// `tag_rndv_zcopy`: announces the data (one piece); the receiver reads it and
    /// acknowledges, which completes `comp`. Gives the operation id, or `InProgress` with
    /// nothing sent when the data is ordinary memory and the receiving process has not said
    /// that the kernel lets it read us with cma (the caller then uses its ordinary rendezvous).
    pub(in crate::mm) fn tag_rndv(
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
    pub(in crate::mm) fn tag_rndv_cancel_op(&mut self, op: u64) -> Result<()> {
        let id = self.shared_id();
        match self.common.tag.borrow_mut().op_take(op, Some(id)) {
            Some(_) => Ok(()),
            None => Err(Error::InvalidParam(format!(
                "no rendezvous operation {op:#x} on this endpoint"
            ))),
        }
    }

    /// `tag_rndv_request`: always unexpected at the receiver.
    pub(in crate::mm) fn tag_rndv_req(&mut self, tag: u64, header: &[u8]) -> Result<Outcome> {
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
