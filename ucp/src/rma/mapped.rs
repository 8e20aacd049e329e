//! The direct path of one-sided operations on peer memory mapped in this process (a peer's
//! shared segment on this host): an atomic is one CPU atomic and a put or get one copy, done
//! during the call with no request, no transport call and no completion to hand back. An
//! operation the direct path cannot take gives `None`, and the caller takes the general path
//! (`atomic_*`, `put`, `get`), which also reports errors.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::rma::Rkey;
use crate::worker::api_types::AmoSize;
use crate::worker::ep::EpState;
use crate::worker::{EpHandle, Worker};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use uct::AtomicOp;

/// Copies `len` bytes from `src` to `dst` (the ranges may overlap): a word-sized piece (an
/// MPI_Put of one value) is one load and one store instead of a `memmove` call; anything
/// else is one `memmove` (glibc's picks `rep movsb` or vector moves for the CPU; cached
/// stores, so the peer or the next put finds the bytes in cache).
///
/// # Safety
/// `src` valid for `len` bytes of reads, `dst` for `len` bytes of writes.
#[inline(always)]
pub unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: per the contract; each piece is read whole before it is written.
    unsafe {
        match len {
            8 => dst
                .cast::<u64>()
                .write_unaligned(src.cast::<u64>().read_unaligned()),
            4 => dst
                .cast::<u32>()
                .write_unaligned(src.cast::<u32>().read_unaligned()),
            _ => std::ptr::copy(src, dst, len),
        }
    }
}

impl Worker {
    /// The local address of `len` bytes at `remote_addr` of the peer memory `rkey` maps here,
    /// when endpoint `ep` may access it directly now: the key belongs to this endpoint and is
    /// mapped on a lane that accesses memory by CPU loads, stores and atomics (`need_atomics`:
    /// for operands of `size`), the endpoint is connected, and nothing is queued on it (a
    /// queued operation or fence must go first).
    #[inline(always)]
    fn mapped_ptr(
        &self,
        ep: EpHandle,
        rkey: &Rkey,
        remote_addr: u64,
        len: usize,
        atomics: Option<AmoSize>,
    ) -> Option<*mut u8> {
        let d = rkey.direct.as_ref()?;
        // Another worker's key or endpoint: the ordinary path refuses it.
        if rkey.ep != ep || ep.wid != self.st.worker_id() {
            return None;
        }
        let e = self.st.ep_get(ep.idx as usize)?;
        if e.gen() != ep.gen || e.state() != EpState::Ready || !e.queue_empty() {
            return None;
        }
        if let Some(size) = atomics {
            if !rkey.mapped_amo[size as usize] {
                return None;
            }
        }
        d.ptr(remote_addr, len)
    }

    /// An atomic on a mapped peer word, done now with a CPU atomic: `op` (`None`: compare
    /// `compare` and swap in `value`) on the 4- or 8-byte word at `remote_addr`. Gives the old
    /// value, or `None` when the general path must take it (see the module doc; a misaligned
    /// or out-of-range word goes there too, which refuses it).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn atomic_mapped(
        &mut self,
        ep: EpHandle,
        op: Option<AtomicOp>,
        size: AmoSize,
        value: u64,
        compare: u64,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Option<u64> {
        let bytes = match size {
            AmoSize::U32 => 4,
            AmoSize::U64 => 8,
        };
        let p = self.mapped_ptr(ep, rkey, remote_addr, bytes, Some(size))?;
        if !(p as usize).is_multiple_of(bytes) {
            return None;
        }
        self.st.amo.started_hw();
        // SAFETY: `p` is an aligned word inside the peer's segment, mapped while `rkey` lives;
        // peers access such words only atomically or by plain copies.
        let old = unsafe {
            match size {
                AmoSize::U64 => {
                    let a = AtomicU64::from_ptr(p.cast());
                    match op {
                        None => a
                            .compare_exchange(compare, value, SeqCst, SeqCst)
                            .unwrap_or_else(|v| v),
                        Some(AtomicOp::Add) => a.fetch_add(value, SeqCst),
                        Some(AtomicOp::And) => a.fetch_and(value, SeqCst),
                        Some(AtomicOp::Or) => a.fetch_or(value, SeqCst),
                        Some(AtomicOp::Xor) => a.fetch_xor(value, SeqCst),
                        Some(AtomicOp::Swap) => a.swap(value, SeqCst),
                    }
                }
                AmoSize::U32 => {
                    let a = AtomicU32::from_ptr(p.cast());
                    let (v, c) = (value as u32, compare as u32);
                    u64::from(match op {
                        None => a
                            .compare_exchange(c, v, SeqCst, SeqCst)
                            .unwrap_or_else(|v| v),
                        Some(AtomicOp::Add) => a.fetch_add(v, SeqCst),
                        Some(AtomicOp::And) => a.fetch_and(v, SeqCst),
                        Some(AtomicOp::Or) => a.fetch_or(v, SeqCst),
                        Some(AtomicOp::Xor) => a.fetch_xor(v, SeqCst),
                        Some(AtomicOp::Swap) => a.swap(v, SeqCst),
                    })
                }
            }
        };
        Some(old)
    }

    /// The local address of the `len` bytes at `remote_addr` of peer memory mapped here, when
    /// endpoint `ep` may put or get them now with one [`copy`] (see the module doc); `None`
    /// when the general path must take the operation. The range lies inside the mapping
    /// (bounds checked), which stays mapped while `rkey` lives, so the caller may make the
    /// copy after releasing the worker.
    #[inline(always)]
    pub fn mapped_range(
        &self,
        ep: EpHandle,
        rkey: &Rkey,
        remote_addr: u64,
        len: usize,
    ) -> Option<*mut u8> {
        self.mapped_ptr(ep, rkey, remote_addr, len, None)
    }

    /// A put into mapped peer memory, done now with one copy; `None` when the general path
    /// must take it (see the module doc).
    #[inline]
    pub fn put_mapped(
        &mut self,
        ep: EpHandle,
        data: &[u8],
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Option<()> {
        let p = self.mapped_range(ep, rkey, remote_addr, data.len())?;
        // SAFETY: `p..p + data.len()` lies inside the peer's segment (bounds checked), mapped
        // while `rkey` lives.
        unsafe { copy(data.as_ptr(), p, data.len()) };
        Some(())
    }

    /// A get from mapped peer memory into `len` bytes at `dst`, done now with one copy;
    /// `None` when the general path must take it (see the module doc).
    ///
    /// # Safety
    /// `dst` must be valid for `len` bytes of writes.
    #[inline]
    pub unsafe fn get_mapped(
        &mut self,
        ep: EpHandle,
        dst: *mut u8,
        len: usize,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Option<()> {
        let p = self.mapped_range(ep, rkey, remote_addr, len)?;
        // SAFETY: the source lies inside the peer's segment (bounds checked); the caller
        // guarantees the destination.
        unsafe { copy(p, dst, len) };
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use crate::worker::api_types::AmoSize;
    use crate::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker};
    use uct::AtomicOp;

    fn wait(w: &mut [Worker], mut op: Op) {
        let mut spins = 0u64;
        while let Op::Pending(r) = op {
            for x in w.iter_mut() {
                x.progress();
            }
            op = match w[1].request_take(r) {
                Ok(c) => Op::Done(c),
                Err(r) => Op::Pending(r),
            };
            spins += 1;
            assert!(spins < 50_000_000, "never completed (watchdog)");
        }
    }

    /// Over shared memory, atomics, puts and gets on the peer's allocated mapping take the
    /// direct path and act on its memory; a word outside the mapping, a misaligned word and an
    /// endpoint with a fence queued are left to the general path.
    #[test]
    fn direct_path_over_shared_memory() {
        let ctx = Context::new(ContextParams {
            features: Features::RMA | Features::AMO32 | Features::AMO64,
            config: Some(UcpConfig {
                tls: vec!["posix".into()],
                ..Default::default()
            }),
        })
        .expect("context");
        let mut w: Vec<Worker> = (0..2).map(|_| Worker::new(&ctx).expect("worker")).collect();
        let mem = w[0].mem_map(4096).expect("map");
        let base = mem.address();
        let addr = w[0].address().to_vec();
        let ep = w[1].ep_create(&addr, EpParams::default()).expect("ep");
        let packed = mem.rkey_packed().to_vec();
        let rkey = loop {
            match w[1].rkey_unpack(ep, &packed) {
                Ok(k) => break k,
                Err(_) => {
                    w[0].progress();
                    w[1].progress();
                }
            }
        };
        assert!(rkey.is_mapped());
        let a = &mut w[1];
        assert_eq!(
            a.atomic_mapped(ep, Some(AtomicOp::Add), AmoSize::U64, 5, 0, base + 8, &rkey),
            Some(0)
        );
        assert_eq!(
            a.atomic_mapped(ep, None, AmoSize::U64, 9, 5, base + 8, &rkey),
            Some(5)
        );
        assert_eq!(
            a.atomic_mapped(
                ep,
                Some(AtomicOp::Or),
                AmoSize::U32,
                0x10,
                0,
                base + 16,
                &rkey
            ),
            Some(0)
        );
        assert_eq!(a.put_mapped(ep, b"direct", base + 100, &rkey), Some(()));
        let mut back = [0u8; 6];
        // SAFETY: a local buffer of 6 bytes.
        let got = unsafe { a.get_mapped(ep, back.as_mut_ptr(), 6, base + 100, &rkey) };
        assert_eq!(got, Some(()));
        assert_eq!(&back, b"direct");
        // SAFETY: the mapping is live; the words are read after the atomics above.
        let (w64, w32, bytes) = unsafe {
            let p = mem.address() as *const u8;
            (
                *(p.add(8) as *const u64),
                *(p.add(16) as *const u32),
                std::slice::from_raw_parts(p.add(100), 6).to_vec(),
            )
        };
        assert_eq!((w64, w32, &bytes[..]), (9, 0x10, &b"direct"[..]));
        assert_eq!(
            a.atomic_mapped(
                ep,
                Some(AtomicOp::Add),
                AmoSize::U64,
                1,
                0,
                base + 4096,
                &rkey
            ),
            None
        );
        assert_eq!(
            a.atomic_mapped(ep, Some(AtomicOp::Add), AmoSize::U64, 1, 0, base + 4, &rkey),
            None
        );
        assert_eq!(a.put_mapped(ep, &[1; 16], base + 4088, &rkey), None);
        // A fence with an operation outstanding: an emulated atomic posted through the
        // general path keeps the endpoint busy until the target acknowledges it.
        let st = &mut a.st;
        let idx = ep.idx as usize;
        st.ep_mut(idx).note_amo_sent();
        assert!(!a.ep_is_quiet(ep), "an atomic is unacknowledged");
        a.fence();
        assert_eq!(
            a.put_mapped(ep, b"x", base, &rkey),
            None,
            "a fence is queued"
        );
        a.st.ep_mut(idx).note_amo_acked();
        let op = a.flush().expect("flush");
        wait(&mut w, op);
        assert_eq!(
            w[1].put_mapped(ep, b"x", base, &rkey),
            Some(()),
            "the fence has passed"
        );
        assert!(w[1].ep_is_quiet(ep), "nothing is outstanding");
        assert!(
            matches!(w[1].ep_flush(ep), Ok(Op::Done(_))),
            "a flush with nothing outstanding is done at once"
        );
    }
}
