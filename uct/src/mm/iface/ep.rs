//! The shared-memory endpoint: claims elements of the peer's FIFO and fills them (active
//! messages), and reads and writes mapped remote memory directly (put, get, atomics).

use super::*;

/// An endpoint to a peer's FIFO.
pub struct MmEp {
    pub(in crate::mm) fifo: FifoPtrs,
    /// Our pid, stamped into claimed elements.
    pub(in crate::mm) pid: u32,
    pub(in crate::mm) cached_tail: u64,
    /// The interface's [`Common::rx_rounds`] at our previous send.
    pub(in crate::mm) rx_seen: u16,
    /// Set when the CPU can prefetch for writing.
    pub(in crate::mm) prefetchw: Option<crate::prefetch::PrefetchW>,
    /// Sends refused for a full FIFO so far; the peer's liveness is asked of the kernel on one
    /// refusal in [`FULL_CHECK_EVERY`] (see [`MmEp::no_resource`]).
    pub(in crate::mm) full_refusals: u8,
    pub(in crate::mm) shared: Rc<EpShared>,
    pub(in crate::mm) common: Rc<Common>,
    /// The peer's data segments mapped for its remote keys ([`Endpoint::peer_rkey_unpack`]).
    pub(in crate::mm) maps: super::super::peer_maps::PeerMaps,
}

/// Smallest buffer message after which a streaming sender prefetches the next position's buffer
/// ([`fifo::FifoPtrs::prefetch_next_buf`]): a stream of large messages is likely to continue.
const NEXT_BUF_MIN: usize = 2048;
/// Sends refused for a full FIFO between two looks at whether the peer exited (a divisor of
/// 256, so the 8-bit count wraps in step).
const FULL_CHECK_EVERY: u8 = 64;
const _: () = assert!(256 % FULL_CHECK_EVERY as usize == 0);

/// Publishes a claimed element as "skip" if the sender unwinds before publishing it, so the
/// receiver never stalls on a hole.
struct ClaimGuard<'a> {
    fifo: &'a FifoPtrs,
    pos: u64,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the position was claimed by this sender and is not published yet.
        unsafe { self.fifo.publish(self.pos, 0, fifo::KIND_SKIP, 0) };
    }
}

impl MmEp {
    /// This endpoint's id.
    pub(in crate::mm) fn shared_id(&self) -> EpId {
        self.shared.id
    }

    /// Whether the peer process said the kernel lets it trace us, so it can read our ordinary
    /// memory with cma ([`crate::grant::peer_may_trace_us`], remembered once true).
    pub(in crate::mm) fn peer_reads_us(&self) -> bool {
        if !self.shared.peer_reads_us.get()
            && crate::grant::peer_may_trace_us(self.shared.peer_pid())
        {
            self.shared.peer_reads_us.set(true);
        }
        self.shared.peer_reads_us.get()
    }

    #[inline(always)]
    pub(in crate::mm) fn check_alive(&self) -> Result<()> {
        if self.shared.failed.get() {
            return Err(self.shared.peer_error());
        }
        Ok(())
    }

    /// The FIFO is full: a dead peer is an error, otherwise back-pressure. Whether the peer
    /// exited costs a system call, so it is asked on the first refusal and then on one in
    /// [`FULL_CHECK_EVERY`]: a sender that outruns a live receiver retries many times a
    /// microsecond, and a dead peer is still found within a few retries (and by the
    /// interface's periodic peer check).
    #[cold]
    fn no_resource<T>(&mut self) -> Result<Outcome<T>> {
        let n = self.full_refusals;
        self.full_refusals = n.wrapping_add(1);
        if n.is_multiple_of(FULL_CHECK_EVERY) && self.shared.peer.exited() {
            self.mark_failed();
            return Err(self.shared.peer_error());
        }
        Ok(Outcome::NoResource)
    }

    fn mark_failed(&self) {
        self.shared.mark_failed(&self.common);
    }

    #[cold]
    fn wake(&self) {
        super::wake_peer(&self.common.sock, &self.shared.peer_addr());
    }

    /// Claims an element, lets `fill` write the payload into (inline area, buffer area) and
    /// give (kind, length), then publishes it.
    ///
    /// When nothing arrived at our interface since our previous send (a stream of sends, the
    /// receiver working behind us) it also prefetches the next position's element for writing
    /// ([`FifoPtrs::prefetch_claim`]), and after a buffer message of at least [`NEXT_BUF_MIN`]
    /// bytes the first lines of that position's buffer ([`FifoPtrs::prefetch_next_buf`]): the
    /// next claim's locked compare-and-swap waits for this message's stores to drain, and the
    /// next pack would start with no line of its buffer on the way. Not after a receive
    /// (request and reply): there the receiver may already poll that element, and taking the
    /// line from it delays the reply we wait for.
    #[inline(always)]
    pub(in crate::mm) fn send<T>(
        &mut self,
        am_id: u8,
        fill: impl FnOnce(*mut u8, fifo::BufArea) -> Result<(u8, usize, T)>,
    ) -> Result<Outcome<T>> {
        self.check_alive()?;
        let Some(c) = self.fifo.claim(&mut self.cached_tail) else {
            return self.no_resource();
        };
        let guard = ClaimGuard {
            fifo: &self.fifo,
            pos: c.pos,
        };
        // The element's line is asked for writing before anything touches it: a buffer
        // message's fill reads the element's buffer word ([`fifo::BufArea`]), and a read that
        // reached the line first would bring it shared and the writes would fetch it again.
        if let Some(cpu) = self.prefetchw {
            self.fifo.prefetch_claim(c.pos, cpu);
        }
        self.fifo.stamp(c.pos, self.pid);
        self.shared.sent_unchecked.set(true);
        let rx = self.common.rx_rounds.get();
        let stream = self.prefetchw.filter(|_| rx == self.rx_seen);
        if let Some(cpu) = stream {
            self.fifo.prefetch_claim(c.pos + 1, cpu);
        }
        self.rx_seen = rx;
        let r = fill(self.fifo.inline_area(c.pos), self.fifo.lazy_buf_area(c.pos));
        std::mem::forget(guard);
        // The wake-up follows the publish in each arm, so the result is built last, after
        // every call: kept across the call, the `Result` would be stored and moved on the
        // stack on every send (about 20 instructions per `am_short`).
        match r {
            Ok((kind, len, v)) => {
                // SAFETY: claimed above, not yet published.
                unsafe { self.fifo.publish(c.pos, am_id, kind, len as u32) };
                let large = kind == fifo::KIND_BUF && len >= NEXT_BUF_MIN;
                if let (Some(cpu), true) = (stream, large) {
                    self.fifo
                        .prefetch_next_buf(c.pos + 1, self.cached_tail, cpu);
                }
                if c.wake {
                    self.wake();
                }
                Ok(Outcome::Done(v))
            }
            Err(e) => {
                // SAFETY: as above; the element is skipped by the receiver.
                unsafe { self.fifo.publish(c.pos, 0, fifo::KIND_SKIP, 0) };
                if c.wake {
                    self.wake();
                }
                Err(e)
            }
        }
    }

    /// The local address of the peer's `remote_addr..+len`. Inlined into put/get short, which
    /// would otherwise pay two calls and a moved `Result` per 8-byte put; errors are built out
    /// of line.
    #[inline]
    fn rma_ptr(&self, rkey: &RemoteKey, remote_addr: u64, len: usize) -> Result<*mut u8> {
        self.check_alive()?;
        match rkey.local_ptr(remote_addr, len) {
            Ok(p) => Ok(p),
            Err(e) => Err(rma_error(e)),
        }
    }

    fn atomic_ptr<T>(&self, rkey: &RemoteKey, remote_addr: u64) -> Result<*mut T> {
        let size = std::mem::size_of::<T>();
        let p = self.rma_ptr(rkey, remote_addr, size)?;
        if !(p as usize).is_multiple_of(size) {
            return Err(Error::RemoteAccess(format!(
                "{size}-byte atomic at {remote_addr:#x} is not aligned"
            )));
        }
        Ok(p as *mut T)
    }
}

/// A put_bcopy's pack wrote more than the region holds from its start.
#[cold]
#[inline(never)]
fn past_region(len: usize, remote_addr: u64, rkey: &RemoteKey) -> Error {
    Error::RemoteAccess(format!(
        "put_bcopy of {len} bytes at {remote_addr:#x} runs past the remote region {:#x}+{}",
        rkey.remote_base, rkey.len
    ))
}

/// An unmapped key names the memory domain to unpack it with; other errors pass.
#[cold]
#[inline(never)]
fn rma_error(e: Error) -> Error {
    match e {
        Error::Unsupported(_) => Error::RemoteAccess(
            "the remote key is not mapped: unpack it with the posix/sysv memory domain".into(),
        ),
        e => e,
    }
}

/// Two unaligned 8-byte moves covering `n` bytes, 8 to 16 (a ucp header, a worker uuid, an
/// 8-byte payload), in place of a `memcpy`/`memmove` call. Both are read before either is
/// written, so `src` and `dst` may overlap.
///
/// # Safety
/// `8 <= n <= 16`; `src` must be valid for `n` bytes of reads and `dst` for `n` bytes of writes.
#[inline(always)]
unsafe fn move_8_to_16(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: both 8-byte windows (at 0 and at n - 8) lie inside the n >= 8 bytes of `src` and
    // of `dst` (the caller's contract); unaligned reads and writes are used.
    unsafe {
        let head = (src as *const u64).read_unaligned();
        let tail = (src.add(n - 8) as *const u64).read_unaligned();
        (dst as *mut u64).write_unaligned(head);
        (dst.add(n - 8) as *mut u64).write_unaligned(tail);
    }
}

/// Moves `n` bytes from `src` to `dst`, which may overlap (the peer's mapped region may hold
/// the caller's own buffer): put and get short.
///
/// # Safety
/// `src` must be valid for `n` bytes of reads and `dst` for `n` bytes of writes.
#[inline(always)]
unsafe fn move_piece(dst: *mut u8, src: *const u8, n: usize) {
    match n {
        // SAFETY: the caller's contract, with 8 <= n <= 16.
        8..=16 => unsafe { move_8_to_16(dst, src, n) },
        // SAFETY: the caller's contract.
        _ => unsafe { std::ptr::copy(src, dst, n) },
    }
}

/// Copies `src` to `dst`, which do not overlap: AM headers and payloads into the FIFO.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and must not overlap `src`.
#[inline(always)]
unsafe fn copy_piece(dst: *mut u8, src: &[u8]) {
    match src.len() {
        // An `am_short` with its header only (`ucx_perftest -s 8`): no `memcpy` call.
        0 => {}
        // SAFETY: the caller's contract, with 8 <= n <= 16.
        n @ 8..=16 => unsafe { move_8_to_16(dst, src.as_ptr(), n) },
        // SAFETY: the caller's contract.
        n => unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n) },
    }
}

impl Endpoint for MmEp {
    fn id(&self) -> EpId {
        self.shared.id
    }

    /// Maps the peer's segment once for all its keys (see [`super::super::peer_maps`]); an
    /// endpoint whose peer failed unmaps them all and refuses.
    fn peer_rkey_unpack(&mut self, packed: &[u8]) -> Result<Option<RemoteKey>> {
        if let Err(e) = self.check_alive() {
            self.maps.clear();
            return Err(e);
        }
        self.maps
            .unpack(self.shared._seg.seg_ref(), packed)
            .map(Some)
    }

    /// Always inlined: into the registry's dispatch and into libuct's posix/sysv entry
    /// (`rucx_uct::ep::ep_am_short_mm`), which would otherwise pay a call and a `Result`
    /// returned through memory per message.
    #[inline(always)]
    fn am_short(&mut self, id: u8, header: u64, payload: &[u8]) -> Result<Outcome> {
        check_am_id(id)?;
        let len = 8 + payload.len();
        check_len(len, INLINE_MAX)?;
        self.send(id, |inl, _| {
            // SAFETY: the inline area of a claimed element holds INLINE_MAX >= len bytes.
            unsafe {
                (inl as *mut [u8; 8]).write_unaligned(header.to_le_bytes());
                copy_piece(inl.add(8), payload);
            }
            Ok((fifo::KIND_INLINE, len, ()))
        })
    }

    /// Always inlined (into the registry's dispatch): the eager send's transport step.
    #[inline(always)]
    fn am_short2(&mut self, id: u8, h0: u64, h1: u64, payload: &[u8]) -> Result<Outcome> {
        check_am_id(id)?;
        let len = 16 + payload.len();
        check_len(len, INLINE_MAX)?;
        self.send(id, |inl, _| {
            // SAFETY: the inline area of a claimed element holds INLINE_MAX >= len bytes, which
            // the caller's payload cannot overlap (shared memory only we write now).
            unsafe {
                (inl as *mut u64).write_unaligned(h0.to_le());
                (inl.add(8) as *mut u64).write_unaligned(h1.to_le());
                copy_piece(inl.add(16), payload);
            }
            Ok((fifo::KIND_INLINE, len, ()))
        })
    }

    fn am_short_iov(&mut self, id: u8, iov: &[&[u8]]) -> Result<Outcome> {
        check_am_id(id)?;
        let len: usize = iov.iter().map(|b| b.len()).sum();
        check_len(len, INLINE_MAX)?;
        self.send(id, |inl, _| {
            let mut at = 0;
            for b in iov {
                // SAFETY: the total fits INLINE_MAX bytes of the claimed element, which the
                // caller's slices cannot overlap (it is shared memory only we write now).
                unsafe { copy_piece(inl.add(at), b) };
                at += b.len();
            }
            Ok((fifo::KIND_INLINE, len, ()))
        })
    }

    #[inline]
    fn am_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        id: u8,
        pack: F,
    ) -> Result<Outcome<usize>> {
        check_am_id(id)?;
        self.send(id, |_, buf| {
            // SAFETY: the claimed element's buffer area is BUF_DATA_MAX bytes that only this
            // sender touches until it publishes.
            let dst = unsafe { std::slice::from_raw_parts_mut(buf.ptr(), BUF_DATA_MAX) };
            let len = pack(dst);
            check_len(len, BUF_DATA_MAX)?;
            Ok((fifo::KIND_BUF, len, len))
        })
    }

    fn am_zcopy(
        &mut self,
        id: u8,
        header: &[u8],
        iov: &[Iov<'_>],
        _comp: CompletionId,
    ) -> Result<Outcome> {
        check_am_id(id)?;
        check_len(header.len(), AM_MAX_HDR)?;
        let total = check_iov(iov, BUF_DATA_MAX - AM_MAX_HDR)?;
        self.send(id, |_, buf| {
            let buf = buf.ptr();
            // SAFETY: header + total <= BUF_DATA_MAX bytes of the claimed buffer; every iov piece
            // was bounds-checked against its registered region when it was made.
            unsafe {
                std::ptr::copy_nonoverlapping(header.as_ptr(), buf, header.len());
                let mut at = header.len();
                for v in iov {
                    std::ptr::copy_nonoverlapping(v.ptr(), buf.add(at), v.len());
                    at += v.len();
                }
            }
            Ok((fifo::KIND_BUF, header.len() + total, ()))
        })
    }

    fn put_short(&mut self, data: &[u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        check_len(data.len(), RMA_MAX_SHORT)?;
        let p = self.rma_ptr(rkey, remote_addr, data.len())?;
        // SAFETY: bounds-checked destination inside the peer's mapped region.
        unsafe { move_piece(p, data.as_ptr(), data.len()) };
        Ok(Outcome::DONE)
    }

    fn put_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        pack: F,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome<usize>> {
        let room = rkey
            .remote_base
            .saturating_add(rkey.len)
            .saturating_sub(remote_addr)
            .min(RMA_MAX_BCOPY as u64) as usize;
        let p = self.rma_ptr(rkey, remote_addr, room)?;
        if room as u64 + rkey.tail_room() >= RMA_MAX_BCOPY as u64 {
            // Pack straight into the peer's memory: max_bcopy bytes fit the region, or what
            // does not lands in the mapping's scratch after it (see `Segment::scratch_after`).
            // SAFETY: `room` bytes at p are inside the mapped region (checked just above) and
            // the key's tail room bytes after the region are writable scratch.
            let dst = unsafe { std::slice::from_raw_parts_mut(p, RMA_MAX_BCOPY) };
            let len = pack(dst);
            check_len(len, RMA_MAX_BCOPY)?;
            if len > room {
                return Err(past_region(len, remote_addr, rkey));
            }
            return Ok(Outcome::Done(len));
        }
        // Near the end of a region without scratch after it (one that ends before its
        // segment's last page): pack into the interface's bounce buffer, so a pack that runs
        // past the region changes nothing there.
        let Ok(mut bounce) = self.common.bounce.try_borrow_mut() else {
            return Err(Error::Busy(
                "put_bcopy called from inside another put_bcopy's pack".into(),
            ));
        };
        let len = pack(&mut bounce[..]);
        check_len(len, RMA_MAX_BCOPY)?;
        if len > room {
            return Err(past_region(len, remote_addr, rkey));
        }
        // SAFETY: len <= room bytes at p are inside the mapped region.
        unsafe { std::ptr::copy_nonoverlapping(bounce.as_ptr(), p, len) };
        Ok(Outcome::Done(len))
    }

    fn put_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome> {
        let total = check_iov(iov, RMA_MAX_ZCOPY)?;
        let p = self.rma_ptr(rkey, remote_addr, total)?;
        let mut at = 0;
        for v in iov {
            // SAFETY: the destination range was bounds-checked for the total; sources are
            // registered ranges checked when the Iov was made.
            unsafe { std::ptr::copy(v.ptr(), p.add(at), v.len()) };
            at += v.len();
        }
        Ok(Outcome::DONE)
    }

    fn get_short(&mut self, buf: &mut [u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        check_len(buf.len(), RMA_MAX_SHORT)?;
        let p = self.rma_ptr(rkey, remote_addr, buf.len())?;
        // SAFETY: bounds-checked source inside the peer's mapped region.
        unsafe { move_piece(buf.as_mut_ptr(), p, buf.len()) };
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
        check_len(len, RMA_MAX_BCOPY)?;
        let p = self.rma_ptr(rkey, remote_addr, len)?;
        // SAFETY: bounds-checked range of the peer's mapped region, read during this call.
        unpack(unsafe { std::slice::from_raw_parts(p, len) });
        Ok(Outcome::DONE)
    }

    fn get_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: CompletionId,
    ) -> Result<Outcome> {
        let total = check_iov(iov, RMA_MAX_ZCOPY)?;
        let p = self.rma_ptr(rkey, remote_addr, total)?;
        let mut at = 0;
        for v in iov {
            // SAFETY: bounds-checked source; registered destinations.
            unsafe { std::ptr::copy(p.add(at), v.ptr(), v.len()) };
            at += v.len();
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
        reject_post_swap(op)?;
        let p = self.atomic_ptr::<AtomicU32>(rkey, remote_addr)?;
        // SAFETY: aligned, bounds-checked word in shared memory that peers access atomically.
        unsafe { cpu_atomic::fetch::<u32>(p.cast(), op, value) };
        Ok(Outcome::DONE)
    }
    fn atomic64_post(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        reject_post_swap(op)?;
        let p = self.atomic_ptr::<AtomicU64>(rkey, remote_addr)?;
        // SAFETY: aligned, bounds-checked word in shared memory that peers access atomically.
        unsafe { cpu_atomic::fetch::<u64>(p.cast(), op, value) };
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
        let p = self.atomic_ptr::<AtomicU32>(rkey, remote_addr)?;
        // SAFETY: aligned, bounds-checked word in shared memory that peers access atomically.
        Ok(Outcome::Done(unsafe {
            cpu_atomic::fetch::<u32>(p.cast(), op, value)
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
        let p = self.atomic_ptr::<AtomicU64>(rkey, remote_addr)?;
        // SAFETY: aligned, bounds-checked word in shared memory that peers access atomically.
        Ok(Outcome::Done(unsafe {
            cpu_atomic::fetch::<u64>(p.cast(), op, value)
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
        let p = self.atomic_ptr::<AtomicU32>(rkey, remote_addr)?;
        // SAFETY: aligned, bounds-checked word in shared memory that peers access atomically.
        Ok(Outcome::Done(unsafe {
            cpu_atomic::cswap::<u32>(p.cast(), compare, swap)
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
        let p = self.atomic_ptr::<AtomicU64>(rkey, remote_addr)?;
        // SAFETY: aligned, bounds-checked word in shared memory that peers access atomically.
        Ok(Outcome::Done(unsafe {
            cpu_atomic::cswap::<u64>(p.cast(), compare, swap)
        }))
    }

    fn tag_eager_short(&mut self, tag: u64, data: &[u8]) -> Result<Outcome> {
        self.tag_short(tag, data)
    }
    fn tag_eager_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        tag: u64,
        imm: u64,
        pack: F,
    ) -> Result<Outcome<usize>> {
        self.tag_bcopy(tag, imm, pack)
    }
    fn tag_eager_zcopy(
        &mut self,
        tag: u64,
        imm: u64,
        iov: &[Iov<'_>],
        _comp: CompletionId,
    ) -> Result<Outcome> {
        self.tag_zcopy(tag, imm, iov)
    }
    fn tag_rndv_zcopy(
        &mut self,
        tag: u64,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        self.tag_rndv(tag, header, iov, comp)
    }
    fn tag_rndv_cancel(&mut self, op: u64) -> Result<()> {
        self.tag_rndv_cancel_op(op)
    }
    fn tag_rndv_request(&mut self, tag: u64, header: &[u8]) -> Result<Outcome> {
        self.tag_rndv_req(tag, header)
    }

    /// Messages are in the peer's FIFO when their send returns; a flush after such sends also
    /// asks the kernel whether the peer process is still there (one `poll` of its pidfd), so
    /// messages written to a process that had died fail the flush instead of being lost
    /// silently. A flush with nothing sent since the last look costs no system call.
    fn flush(&mut self, _comp: CompletionId) -> Result<Outcome> {
        self.check_alive()?;
        if self.shared.sent_unchecked.replace(false) && self.shared.peer.exited() {
            self.mark_failed();
            return Err(self.shared.peer_error());
        }
        if self.shared.pending.is_empty() {
            Ok(Outcome::DONE)
        } else {
            Ok(Outcome::NoResource)
        }
    }

    fn fence(&mut self) -> Result<()> {
        // Stores to shared memory become visible in program order (publish is a Release store).
        std::sync::atomic::fence(Ordering::Release);
        Ok(())
    }

    fn pending_add(&mut self, req: PendingId) -> Result<()> {
        self.check_alive()?;
        if self.shared.pending.is_empty() && self.fifo.has_space(&mut self.cached_tail) {
            return Err(Error::Busy("the peer's FIFO has room: retry now".into()));
        }
        self.shared.pending.push_back(req);
        self.common
            .pending_total
            .set(self.common.pending_total.get() + 1);
        Ok(())
    }

    fn pending_purge(&mut self, f: &mut dyn FnMut(PendingId)) {
        let drained = self.shared.pending.take_all();
        self.common
            .pending_total
            .set(self.common.pending_total.get() - drained.len());
        for r in drained {
            f(r);
        }
    }
}

impl Drop for MmEp {
    fn drop(&mut self) {
        let n = self.shared.pending.len();
        self.common
            .pending_total
            .set(self.common.pending_total.get() - n);
        if self.shared.failed.get() && !self.shared.reported.get() {
            self.common.unreported.set(self.common.unreported.get() - 1);
        }
        // Done with the peer: the interface unmaps the segments of it that rendezvous reads
        // mapped (another endpoint to it maps them again when needed).
        if let Ok(mut t) = self.common.tag.try_borrow_mut() {
            t.forget_peer(self.shared.peer_pid());
        }
    }
}

// One shared-memory endpoint is a lane entry of every ucp endpoint's lane list (sized by the
// largest transport endpoint): keep it within six words.
const _: () = assert!(std::mem::size_of::<MmEp>() <= 48);

#[cfg(test)]
mod tests {
    use super::move_piece;

    /// `move_piece` gives `memmove`'s result for every small length, overlapping both ways.
    #[test]
    fn move_piece_is_memmove() {
        for n in 0..=24 {
            for shift in [-5isize, -1, 0, 1, 3, 8] {
                let mut a: Vec<u8> = (0..64).collect();
                let mut b = a.clone();
                let (src, dst) = (20usize, (20 + shift) as usize);
                // SAFETY: both ranges lie inside the 64-byte buffers.
                unsafe {
                    move_piece(a.as_mut_ptr().add(dst), a.as_ptr().add(src), n);
                    std::ptr::copy(b.as_ptr().add(src), b.as_mut_ptr().add(dst), n);
                }
                assert_eq!(a, b, "n {n} shift {shift}");
            }
        }
    }
}
