//! Receive buffers the receiver keeps: a message that arrived in its element's buffer may stay
//! there after the element is consumed (the receiver's [`AmKeep::keep`] gives a [`HeldBuf`]),
//! and is read from there once, when it is wanted, instead of being copied out first.
//!
//! The FIFO segment has [`SPARE_BUFS`] buffers beyond one per element, free in a `Spares`
//! list. Keeping a message hands its element a free spare and takes the element's old buffer
//! out of circulation until the [`HeldBuf`] drops, which returns it to the list (that logic is
//! transport-neutral, in [`crate::held`]); this table then writes the element's `buf` word so
//! the next producer uses the spare (`RxBufs::name_kept`). No producer is directed to a held
//! buffer: only elements name buffers, and no element names a held one. When no spare is free,
//! [`AmKeep::keep`] gives `None` and the receiver copies the message as before. Keeping and
//! releasing allocate nothing and call nothing virtual.
//!
//! Which buffer each element has is known from this private table, never read back from the
//! shared `buf` words (producers can write those).

use super::fifo::{FifoPtrs, NBUFS, NELEMS, SPARE_BUFS};
use super::segment::Segment;
#[cfg(doc)]
use crate::held::HeldBuf;
use crate::held::{AmKeep, Spares, SPARES_MAX};
use std::cell::Cell;
use std::rc::Rc;

const _: () = assert!(SPARE_BUFS <= SPARES_MAX && NBUFS <= u16::MAX as usize);

/// The receiver's private record of the FIFO's buffers: which element has which, and the free
/// spares. The spares keep the segment, so a held buffer keeps the mapping alive.
pub(super) struct RxBufs {
    fifo: FifoPtrs,
    /// Buffer of each element.
    slot: [Cell<u16>; NELEMS as usize],
    /// Free spares, shared with the held buffers; they own the segment.
    spares: Rc<Spares>,
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
            spares: Rc::new(Spares::new(
                NELEMS as u16,
                SPARE_BUFS,
                seg.map(|s| Box::new(s) as Box<dyn std::any::Any>),
            )),
        }
    }

    /// The buffer of the element of `pos`.
    #[inline(always)]
    pub(super) fn slot(&self, pos: u64) -> u16 {
        self.slot[(pos & (NELEMS - 1)) as usize].get()
    }

    /// The offer to keep `data`, the message of the element of `pos`. After the sink has
    /// seen it, `RxBufs::name_kept` must run before `pos` is released.
    #[inline(always)]
    pub(super) fn offer<'a>(&'a self, pos: u64, data: &'a [u8]) -> AmKeep<'a> {
        AmKeep::new(
            &self.spares,
            &self.slot[(pos & (NELEMS - 1)) as usize],
            data,
        )
    }

    /// When the message of `pos` (which arrived in buffer `was`) was kept, names the spare
    /// its element got in the element's `buf` word, for the next producers.
    #[inline(always)]
    pub(super) fn name_kept(&self, pos: u64, was: u16) {
        let now = self.slot(pos);
        if now != was {
            self.name(pos, now);
        }
    }

    /// Names buffer `buf` in the `buf` word of the element of `pos`.
    #[cold]
    #[inline(never)]
    fn name(&self, pos: u64, buf: u16) {
        self.fifo.set_buf(pos, buf);
    }

    /// Spares free now.
    #[cfg(test)]
    pub(super) fn free_count(&self) -> usize {
        self.spares.free_count()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::fifo::{Polled, BUF_DATA_MAX, BUF_DATA_OFF, BUF_SIZE, KIND_BUF};
    use super::*;
    use crate::held::HeldBuf;

    #[repr(C, align(4096))]
    struct Page([u8; 4096]);

    struct Fixture {
        f: FifoPtrs,
        bufs: RxBufs,
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
        let bufs = unsafe { RxBufs::new(f, None) };
        Fixture {
            f,
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
            let buf = self.bufs.slot(pos);
            // SAFETY: single consumer at its next position, with its own buffer table.
            let r = unsafe { self.f.poll(pos, buf) };
            let Polled::Buf(_, data) = r else {
                panic!("expected a buffer message, got {r:?}")
            };
            let copy = data.to_vec();
            let held = keep
                .then(|| self.bufs.offer(pos, data).keep(&data[8..]))
                .flatten();
            self.bufs.name_kept(pos, buf);
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
        assert!(x.bufs.offer(pos, data).keep(&other).is_none());
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
