//! Receive buffers the receiver keeps: a message that arrived in its element's buffer may stay
//! there after the element is consumed (this table lends it as a [`BufLender`]: the receiver's
//! [`AmKeep::keep`] gives a [`HeldBuf`]), and is read from there once, when it is
//! wanted, instead of being copied out first.
//!
//! The FIFO segment has [`SPARE_BUFS`] buffers beyond one per element. Keeping a message hands
//! its element a free spare (the element's `buf` word names it for the next producer) and
//! takes the element's old buffer out of circulation until the [`HeldBuf`] drops, which returns
//! it to the free list. No producer is directed to a held buffer: only elements name buffers,
//! and no element names a held one. When no spare is free, [`AmKeep::keep`] gives `None` and
//! the receiver copies the message as before. The free list is a fixed array: keeping and
//! releasing allocate nothing.
//!
//! Which buffer each element has is known from this private table, never read back from the
//! shared `buf` words (producers can write those).

use super::fifo::{FifoPtrs, NBUFS, NELEMS, SPARE_BUFS};
use super::segment::Segment;
use crate::held::BufLender;
#[cfg(doc)]
use crate::held::{AmKeep, HeldBuf};
use std::cell::Cell;

/// The receiver's private record of the FIFO's buffers: which element has which, and the free
/// spares. Owns the segment, so a held buffer keeps the mapping alive.
pub(super) struct RxBufs {
    fifo: FifoPtrs,
    /// Buffer of each element.
    slot: [Cell<u16>; NELEMS as usize],
    /// Free spares: `free[..nfree]`.
    free: [Cell<u16>; SPARE_BUFS],
    nfree: Cell<usize>,
    /// Kept alive with the buffers (None for a test's own memory).
    _seg: Option<Segment>,
}

impl RxBufs {
    /// The table of a fresh FIFO (element `i` has buffer `i`, every spare free).
    ///
    /// # Safety
    /// `fifo` must stay mapped as long as the table (and any [`HeldBuf`] of it) lives: it is
    /// `seg`'s mapping, or memory the caller keeps.
    pub(super) unsafe fn new(fifo: FifoPtrs, seg: Option<Segment>) -> Self {
        RxBufs {
            fifo,
            slot: std::array::from_fn(|i| Cell::new(i as u16)),
            free: std::array::from_fn(|i| Cell::new((NELEMS as usize + i) as u16)),
            nfree: Cell::new(SPARE_BUFS),
            _seg: seg,
        }
    }

    /// The buffer of the element of `pos`.
    #[inline(always)]
    pub(super) fn slot(&self, pos: u64) -> u16 {
        self.slot[(pos & (NELEMS - 1)) as usize].get()
    }

    /// Spares free now.
    #[cfg(test)]
    pub(super) fn free_count(&self) -> usize {
        self.nfree.get()
    }

    /// Takes the buffer of the element of `pos` out of circulation, handing the element a free
    /// spare; gives the taken buffer, or `None` when no spare is free.
    #[inline]
    fn take(&self, pos: u64) -> Option<u16> {
        let n = self.nfree.get().checked_sub(1)?;
        self.nfree.set(n);
        let spare = self.free[n].get();
        let i = (pos & (NELEMS - 1)) as usize;
        let held = self.slot[i].replace(spare);
        self.fifo.set_buf(pos, spare);
        Some(held)
    }

    /// Returns a held buffer to the free spares.
    #[inline]
    fn put(&self, buf: u16) {
        let n = self.nfree.get();
        // Every held buffer came out of `take`, so the list has room; a full list would mean a
        // buffer returned twice, which is dropped rather than listed again.
        if let Some(cell) = self.free.get(n) {
            cell.set(buf);
            self.nfree.set(n + 1);
        }
    }
}

impl BufLender for RxBufs {
    #[inline]
    fn lend(&self, pos: u64) -> Option<u32> {
        let buf = self.take(pos)?;
        debug_assert!((buf as usize) < NBUFS);
        Some(buf.into())
    }

    #[inline]
    fn give_back(&self, buf: u32) {
        // Only numbers `lend` gave come back, so the conversion holds.
        if let Ok(buf) = u16::try_from(buf) {
            self.put(buf);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::fifo::{Polled, BUF_DATA_MAX, BUF_DATA_OFF, BUF_SIZE, KIND_BUF};
    use super::*;
    use crate::held::{AmKeep, HeldBuf};
    use std::rc::Rc;

    #[repr(C, align(4096))]
    struct Page([u8; 4096]);

    struct Fixture {
        f: FifoPtrs,
        bufs: Rc<RxBufs>,
        /// `bufs` as the receiver's [`AmKeep`] sees it.
        lender: Rc<dyn BufLender>,
        tail: u64,
        read: u64,
        /// Last: dropped after every view of it.
        mem: Vec<Page>,
    }

    fn fresh() -> Fixture {
        let mut mem: Vec<Page> = (0..super::super::fifo::SEG_LEN / 4096)
            .map(|_| Page([0; 4096]))
            .collect();
        // SAFETY: the Vec is SEG_LEN bytes, page aligned, and is the fixture's last field, so
        // it outlives the views (each test's HeldBufs drop before its fixture).
        let f = unsafe { FifoPtrs::new(mem.as_mut_ptr() as *mut u8) };
        // SAFETY: fresh memory, nobody else sees it.
        unsafe { f.init(7) };
        // SAFETY: the memory lives in the fixture as long as `bufs` is used.
        let bufs = Rc::new(unsafe { RxBufs::new(f, None) });
        Fixture {
            f,
            lender: bufs.clone(),
            bufs,
            tail: 0,
            read: 0,
            mem,
        }
    }

    impl Fixture {
        /// A producer sends `len` bytes of `fill` in a buffer message.
        fn send(&mut self, fill: u8, len: usize) {
            let c = self.f.claim(&mut self.tail).expect("room");
            // SAFETY: claimed position; its buffer area is BUF_DATA_MAX bytes.
            unsafe {
                std::ptr::write_bytes(self.f.buf_area(c.pos), fill, len);
                self.f.publish(c.pos, 1, KIND_BUF, len as u32);
            }
        }
        /// The consumer takes the next message, keeping it when `keep` (and a spare is free),
        /// and releases its position.
        fn recv(&mut self, keep: bool) -> (Vec<u8>, Option<HeldBuf>) {
            let pos = self.read;
            // SAFETY: single consumer at its next position, with its own buffer table.
            let r = unsafe { self.f.poll(pos, self.bufs.slot(pos)) };
            let Polled::Buf(_, data) = r else {
                panic!("expected a buffer message, got {r:?}")
            };
            let copy = data.to_vec();
            let held = keep
                .then(|| AmKeep::new(&self.lender, pos, data).keep(&data[8..]))
                .flatten();
            self.read += 1;
            self.f.release(self.read);
            (copy, held)
        }
    }

    #[test]
    fn kept_buffer_is_not_reused_and_spare_takes_its_place() {
        let mut x = fresh();
        x.send(0xa1, 4096);
        let (_, held) = x.recv(true);
        let held = held.expect("a spare is free");
        assert_eq!(held.data().len(), 4096 - 8);
        assert_eq!(x.bufs.free_count(), SPARE_BUFS - 1);
        // A full round of the FIFO: element 0 comes round again with a spare.
        for i in 0..NELEMS {
            x.send(i as u8, BUF_DATA_MAX);
            let (d, h) = x.recv(false);
            assert!(h.is_none());
            assert!(d.iter().all(|&b| b == i as u8));
        }
        assert!(
            held.data().iter().all(|&b| b == 0xa1),
            "a producer wrote into a held buffer"
        );
        drop(held);
        assert_eq!(x.bufs.free_count(), SPARE_BUFS);
    }

    #[test]
    fn exhausted_spares_fall_back_and_refill_on_release() {
        let mut x = fresh();
        let mut held = Vec::new();
        for i in 0..SPARE_BUFS {
            x.send(i as u8, 100);
            let (_, h) = x.recv(true);
            held.push(h.expect("spare free"));
        }
        assert_eq!(x.bufs.free_count(), 0);
        x.send(0xee, 100);
        let (d, h) = x.recv(true);
        assert!(h.is_none(), "no spare left: the receiver must copy");
        assert!(d.iter().all(|&b| b == 0xee));
        // Messages keep flowing through every element while all spares are held.
        for i in 0..2 * NELEMS {
            x.send(i as u8, 64);
            let (d, _) = x.recv(false);
            assert!(d.iter().all(|&b| b == i as u8));
        }
        for (i, h) in held.iter().enumerate() {
            assert!(
                h.data().iter().all(|&b| b == i as u8),
                "held buffer {i} changed"
            );
        }
        drop(held.pop());
        assert_eq!(x.bufs.free_count(), 1);
        x.send(0x42, 100);
        let (_, h) = x.recv(true);
        assert!(h.is_some(), "a released spare is used again");
        drop(h);
        drop(held);
        assert_eq!(x.bufs.free_count(), SPARE_BUFS);
    }

    #[test]
    fn part_outside_the_message_is_not_kept() {
        let mut x = fresh();
        x.send(1, 64);
        let pos = x.read;
        // SAFETY: single consumer at its next position.
        let Polled::Buf(_, data) = (unsafe { x.f.poll(pos, x.bufs.slot(pos)) }) else {
            panic!("expected a buffer message")
        };
        let other = [0u8; 8];
        assert!(AmKeep::new(&x.lender, pos, data).keep(&other).is_none());
        assert_eq!(x.bufs.free_count(), SPARE_BUFS);
        assert_eq!(x.bufs.slot(pos), 0);
    }

    #[test]
    fn forged_buffer_word_stays_in_the_segment() {
        use super::super::fifo::{ElemHdr, BUFS_OFF, ELEM_HDR};
        let mut x = fresh();
        let base = x.mem.as_mut_ptr() as *mut u8;
        let own = base.wrapping_add(BUFS_OFF + 3 * BUF_SIZE + BUF_DATA_OFF);
        assert_eq!(x.f.buf_area(3), own);
        // A producer scribbles an out-of-range buffer number into element 3: producers then
        // use the element's own buffer.
        let hdr = x.f.inline_area(3).wrapping_sub(ELEM_HDR) as *const ElemHdr;
        // SAFETY: element 3's header lies in the memory; its buf word is accessed atomically.
        let word = unsafe { &(*hdr).buf };
        word.store(u16::MAX, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(x.f.buf_area(3), own);
        // An in-range forged number stays a buffer of the segment.
        word.store(NBUFS as u16, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            x.f.buf_area(3),
            base.wrapping_add(BUFS_OFF + (NBUFS - 1) * BUF_SIZE + BUF_DATA_OFF)
        );
        // The consumer's table is untouched by either.
        assert_eq!(x.bufs.slot(3), 3);
    }
}
