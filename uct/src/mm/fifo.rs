//! The receive FIFO's layout in shared memory and the producer/consumer views over it.
//!
//! One segment per interface, of [`SEG_LEN`] bytes:
//!
//! ```text
//! offset 0        FifoCtl (384 bytes): info line | head line | tail line
//! offset 512      NELEMS elements of ELEM_SIZE bytes:
//!                   0..8   seq   (AtomicU64, published last: position + 1)
//!                   8..12  len   (u32, payload length)
//!                  12      am_id (u8)
//!                  13      kind  (u8: 1 inline, 2 in the element's buffer)
//!                  14..16  buf   (AtomicU16, written by the consumer: 0 for buffer i, b + 1
//!                          for buffer b)
//!                  16..24  owner (AtomicU64: claimer's pid << 32 | low 32 bits of the
//!                          position, stamped right after the claim)
//!                  24..256 inline payload (INLINE_MAX bytes)
//! offset BUFS_OFF NBUFS buffers of BUF_SIZE bytes (line aligned): NELEMS, one per element,
//!                 and SPARE_BUFS spares. A bcopy sender packs straight into the buffer its
//!                 element names (no extra copy), from BUF_DATA_OFF on.
//! ```
//!
//! Element i starts with buffer i. The consumer may keep a message in its buffer after the
//! element is consumed (see `keep`): it then hands the element a spare buffer, writing the
//! element's `buf` before it releases the position, so the next producer of that element packs
//! into the spare and no producer is directed to the kept buffer. The consumer reads buffers
//! through its own private table of which element has which buffer, never through `buf` (which
//! producers can write).
//!
//! The control block and the first elements share the first page, and a worker address fits
//! inline: a peer that sends a few first messages (wire-up, one short message) touches one page
//! of this segment in all. Its RSS grows by that page per peer, not by a control page, an
//! element page and a buffer page.
//!
//! Everything is addressed by offsets from the segment base; no pointers live in shared memory.
//! A producer trusts nothing it reads except the atomics' protocol; the consumer bounds-checks
//! every length before it touches payload bytes.

use super::ring::{self, Claim};
use crate::prefetch::PrefetchW;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

/// Number of elements (a power of two).
pub const NELEMS: u64 = 256;
/// Size of one element.
pub const ELEM_SIZE: usize = 256;
/// Bytes of an element's header.
pub const ELEM_HDR: usize = 24;
/// Largest payload carried inside an element.
pub const INLINE_MAX: usize = ELEM_SIZE - ELEM_HDR;
/// Size of one element's bcopy buffer: 8 KiB of payload after a 16-byte header and
/// [`BUF_DATA_OFF`] fit one buffer, so an 8 KiB tag message (a common MPI size: HPCC's
/// RandomAccess buckets) goes out as one fragment, not two (UCX's posix buffers are 8256 bytes
/// too). A multiple of a cache line; [`NBUFS`] of them make whole pages.
pub const BUF_SIZE: usize = 8256;
/// Where a message starts in its buffer: 16 bytes before a cache line, so that after a 16-byte
/// header (ucp's eager header: sender id and tag; the tag offload's tag and immediate value)
/// the payload is line-aligned. Both copies of it (the sender's pack, the receiver's copy
/// out) then store and load whole lines, and a user buffer at the same offset in its page does
/// not sit 16 bytes behind it (4 KiB aliasing of the sender's loads with its own stores).
pub const BUF_DATA_OFF: usize = 48;
/// Lines of the next position's buffer a producer streaming large messages prefetches
/// ([`FifoPtrs::prefetch_next_buf`]).
pub const NEXT_BUF_LINES: usize = 16;
/// Largest message in a buffer.
pub const BUF_DATA_MAX: usize = BUF_SIZE - BUF_DATA_OFF;
/// Offset of the element array: right after the control block, in its page.
pub const ELEMS_OFF: usize = 512;
/// Elements in one page of the element array (the first page holds fewer: the control block
/// comes first).
pub const ELEMS_PER_PAGE: usize = 4096 / ELEM_SIZE;
/// Offset of the buffer array (the first page boundary after the elements).
pub const BUFS_OFF: usize = (ELEMS_OFF + NELEMS as usize * ELEM_SIZE).next_multiple_of(4096);
/// Buffers beyond one per element: what the consumer can keep at once.
pub const SPARE_BUFS: usize = 64;
/// Number of buffers.
pub const NBUFS: usize = NELEMS as usize + SPARE_BUFS;
/// Size of a FIFO segment.
pub const SEG_LEN: usize = BUFS_OFF + NBUFS * BUF_SIZE;
const _: () = assert!(SEG_LEN.is_multiple_of(4096) && BUF_SIZE.is_multiple_of(64));
/// Identifies a rucx FIFO segment ("rucxfifo").
pub const MAGIC: u64 = u64::from_le_bytes(*b"rucxfifo");
/// Layout version.
pub const VERSION: u32 = 5;
/// The consumer publishes `tail` at least every this many messages.
pub const RELEASE_BATCH: u64 = NELEMS / 4;

/// Payload kind: inline in the element.
pub const KIND_INLINE: u8 = 1;
/// Payload kind: in the element's buffer.
pub const KIND_BUF: u8 = 2;
/// No message: a sender claimed the element but failed before filling it.
pub const KIND_SKIP: u8 = 3;

/// What the consumer found at its next position.
#[derive(Debug)]
pub enum Polled<'a> {
    /// Nothing published yet.
    Empty,
    /// A message inline in its element: active-message id and payload.
    Msg(u8, &'a [u8]),
    /// A message in the element's buffer: active-message id and payload.
    Buf(u8, &'a [u8]),
    /// An element to step over without a message.
    Skip,
    /// A corrupt element (bad kind or length), stepped over.
    Corrupt(String),
}

/// Read-only description of the FIFO, written once by its owner before it is shared.
#[repr(C, align(128))]
pub struct FifoInfo {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// [`NELEMS`].
    pub nelems: u32,
    /// [`ELEM_SIZE`].
    pub elem_size: u32,
    /// [`BUF_SIZE`].
    pub buf_size: u32,
    /// Owner's process id.
    pub owner_pid: u32,
    /// [`NBUFS`].
    pub nbufs: u32,
    /// [`ELEMS_OFF`].
    pub elems_off: u64,
    /// [`BUFS_OFF`].
    pub bufs_off: u64,
}

/// An atomic word alone on its (pair of) cache lines.
#[repr(C, align(128))]
pub struct Line(pub AtomicU64);

/// The FIFO's control block at offset 0.
#[repr(C)]
pub struct FifoCtl {
    /// Description.
    pub info: FifoInfo,
    /// Next position to claim (bit 63: receiver armed).
    pub head: Line,
    /// Positions below it are consumed.
    pub tail: Line,
}

/// An element's header (the first 128 bytes of its [`ELEM_SIZE`]; the inline payload follows).
#[repr(C, align(128))]
pub struct ElemHdr {
    /// Publish word.
    pub seq: AtomicU64,
    /// Payload length.
    pub len: u32,
    /// Active-message id.
    pub am_id: u8,
    /// [`KIND_INLINE`] or [`KIND_BUF`].
    pub kind: u8,
    /// The element's buffer, written by the consumer: 0 for buffer `i` of element `i`,
    /// `b + 1` for buffer `b`.
    pub buf: AtomicU16,
    /// Who claimed the element: `pid << 32 | (position as u32)`. Lets the consumer step over
    /// an element whose producer died between its claim and its publish.
    pub owner: AtomicU64,
}

const _: () = {
    assert!(std::mem::size_of::<FifoInfo>() == 128);
    assert!(std::mem::size_of::<FifoCtl>() == 384);
    assert!(std::mem::size_of::<FifoCtl>() <= ELEMS_OFF);
    assert!(std::mem::offset_of!(FifoCtl, head) == 128);
    assert!(std::mem::offset_of!(FifoCtl, tail) == 256);
    assert!(std::mem::size_of::<ElemHdr>() == 128);
    assert!(ELEM_SIZE.is_multiple_of(std::mem::size_of::<ElemHdr>()));
    assert!(std::mem::offset_of!(ElemHdr, len) == 8);
    assert!(std::mem::offset_of!(ElemHdr, am_id) == 12);
    assert!(std::mem::offset_of!(ElemHdr, kind) == 13);
    assert!(std::mem::offset_of!(ElemHdr, buf) == 14);
    assert!(NBUFS < u16::MAX as usize);
    assert!(std::mem::offset_of!(ElemHdr, owner) == 16);
    assert!(ELEM_HDR == 24);
    assert!(NELEMS.is_power_of_two());
    assert!(ELEMS_OFF.is_multiple_of(std::mem::align_of::<ElemHdr>()));
    assert!(BUFS_OFF.is_multiple_of(4096));
    // The control block and the first elements share one page.
    assert!(ELEMS_OFF + 4 * ELEM_SIZE <= 4096);
    assert!(std::mem::size_of::<AtomicU64>() == 8);
};

/// Where the message of a claimed position goes when it does not fit the element
/// ([`FifoPtrs::buf_area`]), looked up only by a sender that uses it. The lookup reads the
/// element's buffer word, in the line the sender is about to write: a read that reaches the
/// line before the writes brings it over shared (the receiver's core keeps a copy), and the
/// writes fetch it again. When every send looked it up, a ping-pong of 8-byte tagged messages
/// spent two thirds of `ucp_tag_send_nbx`'s time on that read (perf, cpu-clock samples).
#[derive(Debug, Clone, Copy)]
pub struct BufArea {
    fifo: FifoPtrs,
    pos: u64,
}

impl BufArea {
    /// The buffer area ([`BUF_DATA_MAX`] bytes).
    #[inline(always)]
    pub fn ptr(self) -> *mut u8 {
        self.fifo.buf_area(self.pos)
    }
}

/// Raw addresses of a mapped FIFO. Valid while the mapping it was made from lives.
#[derive(Debug, Clone, Copy)]
pub struct FifoPtrs {
    base: *mut u8,
}

impl FifoPtrs {
    /// Views a mapping of at least [`SEG_LEN`] bytes.
    ///
    /// # Safety
    /// `base..base+SEG_LEN` must be mapped, 128-byte aligned, and stay mapped while the view (and
    /// any copy) is used.
    pub unsafe fn new(base: *mut u8) -> Self {
        FifoPtrs { base }
    }

    /// Initializes a fresh (zero-filled) segment as an empty FIFO owned by `pid`.
    ///
    /// # Safety
    /// No one else may access the segment yet.
    pub unsafe fn init(&self, pid: u32) {
        let info = self.base as *mut FifoInfo;
        // SAFETY: the segment is ours alone and large enough (caller's contract).
        unsafe {
            info.write(FifoInfo {
                magic: MAGIC,
                version: VERSION,
                nelems: NELEMS as u32,
                elem_size: ELEM_SIZE as u32,
                buf_size: BUF_SIZE as u32,
                owner_pid: pid,
                nbufs: NBUFS as u32,
                elems_off: ELEMS_OFF as u64,
                bufs_off: BUFS_OFF as u64,
            });
        }
        // head, tail and every seq start at zero: the segment is zero-filled. The element
        // pages are touched now, a per-FIFO cost paid once (as UCX initialises its FIFO), so
        // the first round of messages takes no page faults on the senders' side.
        for off in (ELEMS_OFF..BUFS_OFF).step_by(4096) {
            // SAFETY: inside the segment (ELEMS_OFF..BUFS_OFF lies below SEG_LEN), which no
            // one else maps yet; writing the zero it holds.
            unsafe { self.base.add(off).write_volatile(0) };
        }
    }

    /// Checks that the segment holds a FIFO of this layout owned by `pid`.
    pub fn validate(&self, pid: u32) -> Result<(), String> {
        // SAFETY: the mapping is at least SEG_LEN bytes (constructor's contract); these fields
        // are written once before the segment is shared, so plain reads are fine.
        let info = unsafe { &*(self.base as *const FifoInfo) };
        if info.magic != MAGIC {
            return Err("the segment does not hold a rucx FIFO (bad magic)".into());
        }
        if info.version != VERSION
            || info.nelems as u64 != NELEMS
            || info.elem_size as usize != ELEM_SIZE
            || info.buf_size as usize != BUF_SIZE
            || info.nbufs as usize != NBUFS
            || info.elems_off as usize != ELEMS_OFF
            || info.bufs_off as usize != BUFS_OFF
        {
            return Err(format!(
                "FIFO layout version {} ({} x {} B, {} B buffers) differs from ours",
                info.version, info.nelems, info.elem_size, info.buf_size
            ));
        }
        if info.owner_pid != pid {
            return Err(format!(
                "FIFO belongs to process {}, not {pid}",
                info.owner_pid
            ));
        }
        Ok(())
    }

    #[inline(always)]
    fn ctl(&self) -> &FifoCtl {
        // SAFETY: offset 0 holds a FifoCtl (constructor's contract); its atomics are only used
        // atomically and its info only read.
        unsafe { &*(self.base as *const FifoCtl) }
    }
    #[inline(always)]
    fn head(&self) -> &AtomicU64 {
        &self.ctl().head.0
    }
    #[inline(always)]
    fn tail(&self) -> &AtomicU64 {
        &self.ctl().tail.0
    }
    #[inline(always)]
    fn elem(&self, pos: u64) -> *mut ElemHdr {
        let idx = (pos & (NELEMS - 1)) as usize;
        self.base.wrapping_add(ELEMS_OFF + idx * ELEM_SIZE) as *mut ElemHdr
    }
    #[inline(always)]
    fn seq(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: the element lies inside the mapping; seq is only accessed atomically.
        unsafe { &(*self.elem(pos)).seq }
    }
    #[inline(always)]
    fn inline_ptr(&self, pos: u64) -> *mut u8 {
        (self.elem(pos) as *mut u8).wrapping_add(ELEM_HDR)
    }
    /// Buffer `b` (`b < NBUFS`).
    #[inline(always)]
    fn buf_ptr(&self, b: u16) -> *mut u8 {
        let b = (b as usize).min(NBUFS - 1);
        self.base.wrapping_add(BUFS_OFF + b * BUF_SIZE)
    }
    #[inline(always)]
    fn buf_word(&self, pos: u64) -> &AtomicU16 {
        // SAFETY: the element lies inside the mapping; buf is only accessed atomically.
        unsafe { &(*self.elem(pos)).buf }
    }

    // ---- producer side ----

    /// Claims a position, or `None` when the FIFO is full.
    #[inline(always)]
    pub fn claim(&self, cached_tail: &mut u64) -> Option<Claim> {
        ring::claim(self.head(), self.tail(), cached_tail, NELEMS)
    }
    /// True when a claim would succeed now.
    #[inline]
    pub fn has_space(&self, cached_tail: &mut u64) -> bool {
        ring::has_space(self.head(), self.tail(), cached_tail, NELEMS)
    }
    /// The inline payload area of a claimed position ([`INLINE_MAX`] bytes).
    #[inline(always)]
    pub fn inline_area(&self, pos: u64) -> *mut u8 {
        self.inline_ptr(pos)
    }
    /// Where the message of a claimed position goes ([`BUF_DATA_MAX`] bytes at
    /// [`BUF_DATA_OFF`] in the buffer its element names; a word out of range names the
    /// element's own buffer, and either way it lies in the segment).
    #[inline(always)]
    pub fn buf_area(&self, pos: u64) -> *mut u8 {
        let w = self.buf_word(pos).load(Ordering::Relaxed);
        let b = if w == 0 || w as usize > NBUFS {
            (pos & (NELEMS - 1)) as u16
        } else {
            w - 1
        };
        self.buf_ptr(b).wrapping_add(BUF_DATA_OFF)
    }
    /// The buffer area of claimed position `pos`, found only when a sender asks for it
    /// ([`BufArea::ptr`]).
    #[inline(always)]
    pub fn lazy_buf_area(&self, pos: u64) -> BufArea {
        BufArea { fifo: *self, pos }
    }
    /// Asks the CPU to start reading the first line of position `pos`'s element (the consumer,
    /// ahead of its poll). A hint only.
    #[inline(always)]
    pub fn prefetch_elem(&self, pos: u64) {
        crate::prefetch::prefetch_read(self.elem(pos) as *const u8);
    }
    /// Asks the CPU to bring the first line of position `pos`'s element into this core's cache
    /// for writing, ahead of the producer's stores to it. The line was last read by the
    /// consumer's core; without the hint the producer's next claim (a locked CAS, which waits
    /// for earlier stores to drain) waits for that line's ownership to come back. A hint only:
    /// it reads and writes no memory and never faults.
    #[inline(always)]
    pub fn prefetch_claim(&self, pos: u64, cpu: PrefetchW) {
        cpu.prefetch(self.elem(pos) as *const u8);
    }
    /// Asks the CPU to bring the first [`NEXT_BUF_LINES`] lines of the message area of
    /// position `pos`'s buffer into this core's cache for writing, when the ring does not look
    /// full to a producer that last saw `cached_tail` (a full ring's buffers are still the
    /// consumer's to read). A hint only: it reads the element's buffer word, writes nothing.
    #[inline(always)]
    pub fn prefetch_next_buf(&self, pos: u64, cached_tail: u64, cpu: PrefetchW) {
        if pos.wrapping_sub(cached_tail) >= NELEMS {
            return;
        }
        let p = self.buf_area(pos);
        for i in 0..NEXT_BUF_LINES {
            cpu.prefetch(p.wrapping_add(i * 64));
        }
    }
    /// Records that process `pid` claimed `pos` (right after the claim).
    #[inline(always)]
    pub fn stamp(&self, pos: u64, pid: u32) {
        // SAFETY: the element lies inside the mapping; owner is only accessed atomically.
        let owner = unsafe { &(*self.elem(pos)).owner };
        owner.store((pid as u64) << 32 | (pos as u32 as u64), Ordering::Relaxed);
    }

    /// The process that claimed `pos`, if it has stamped it.
    pub fn owner_of(&self, pos: u64) -> Option<u32> {
        // SAFETY: the element lies inside the mapping; owner is only accessed atomically.
        let owner = unsafe { &(*self.elem(pos)).owner }.load(Ordering::Relaxed);
        (owner as u32 == pos as u32 && owner >> 32 != 0).then_some((owner >> 32) as u32)
    }

    /// Writes the header of a claimed position and publishes it.
    ///
    /// # Safety
    /// `pos` must have been claimed by this caller and not yet published.
    #[inline(always)]
    pub unsafe fn publish(&self, pos: u64, am_id: u8, kind: u8, len: u32) {
        let e = self.elem(pos);
        // SAFETY: the claim gives this producer the element until publish (ring protocol).
        unsafe {
            std::ptr::addr_of_mut!((*e).len).write(len);
            std::ptr::addr_of_mut!((*e).am_id).write(am_id);
            std::ptr::addr_of_mut!((*e).kind).write(kind);
        }
        ring::publish(self.seq(pos), pos);
    }

    // ---- consumer side ----

    /// True when position `pos` has been published (what [`FifoPtrs::poll`] looks at first).
    #[inline(always)]
    pub fn is_ready(&self, pos: u64) -> bool {
        ring::is_ready(self.seq(pos), pos)
    }

    /// What is at position `pos`, whose element has buffer `buf` (from the consumer's own
    /// table). Every result but [`Polled::Empty`] consumes the position.
    ///
    /// # Safety
    /// Only the FIFO's single consumer may call this, for its next position; the slice is valid
    /// until the consumer releases the position (or, for a kept buffer, until it frees it).
    #[inline(always)]
    pub unsafe fn poll<'a>(&self, pos: u64, buf: u16) -> Polled<'a> {
        if !ring::is_ready(self.seq(pos), pos) {
            return Polled::Empty;
        }
        let e = self.elem(pos);
        // SAFETY: published (Acquire above), so the header is written and producers leave the
        // element alone until released; lengths are bounds-checked before slicing.
        unsafe {
            let len = std::ptr::addr_of!((*e).len).read() as usize;
            let am_id = std::ptr::addr_of!((*e).am_id).read();
            let kind = std::ptr::addr_of!((*e).kind).read();
            let (p, max) = match kind {
                KIND_INLINE => (self.inline_ptr(pos), INLINE_MAX),
                KIND_BUF => (self.buf_ptr(buf).wrapping_add(BUF_DATA_OFF), BUF_DATA_MAX),
                KIND_SKIP => return Polled::Skip,
                k => return Polled::Corrupt(format!("unknown element kind {k}")),
            };
            if len > max {
                return Polled::Corrupt(format!("length {len} exceeds {max}"));
            }
            let data = std::slice::from_raw_parts(p, len);
            if kind == KIND_BUF {
                Polled::Buf(am_id, data)
            } else {
                Polled::Msg(am_id, data)
            }
        }
    }
    /// Names buffer `buf` as the buffer of the element of `pos` for its next producers (the
    /// consumer, before it releases `pos`).
    #[inline]
    pub fn set_buf(&self, pos: u64, buf: u16) {
        let w = if buf as u64 == pos & (NELEMS - 1) {
            0
        } else {
            buf + 1
        };
        self.buf_word(pos).store(w, Ordering::Relaxed);
    }
    /// Tells producers that every position below `read_pos` is consumed.
    #[inline(always)]
    pub fn release(&self, read_pos: u64) {
        ring::release(self.tail(), read_pos);
    }
    /// Arms for a wake-up; `false` when messages are already on the way.
    pub fn arm(&self, read_pos: u64) -> bool {
        ring::arm(self.head(), read_pos)
    }
    /// True when a position at or after `read_pos` has been claimed.
    pub fn claimed_beyond(&self, read_pos: u64) -> bool {
        self.head().load(Ordering::Acquire) & !ring::ARMED != read_pos
    }
    /// The first position no producer has claimed yet: everything a producer wrote before
    /// this call lies below it.
    pub fn claimed_end(&self) -> u64 {
        self.head().load(Ordering::Acquire) & !ring::ARMED
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[repr(C, align(4096))]
    struct Page([u8; 4096]);

    fn fresh() -> (Vec<Page>, FifoPtrs) {
        let mut mem: Vec<Page> = (0..SEG_LEN / 4096).map(|_| Page([0; 4096])).collect();
        // SAFETY: the Vec is SEG_LEN bytes, page aligned, and outlives the view in each test.
        let f = unsafe { FifoPtrs::new(mem.as_mut_ptr() as *mut u8) };
        // SAFETY: fresh memory, nobody else sees it.
        unsafe { f.init(42) };
        (mem, f)
    }

    #[test]
    fn inline_and_buffer_messages_round_trip() {
        let (_mem, f) = fresh();
        f.validate(42).unwrap();
        assert!(f.validate(43).is_err());
        let mut tail = 0;
        let c = f.claim(&mut tail).unwrap();
        // SAFETY: claimed position, INLINE_MAX bytes available.
        unsafe {
            std::ptr::copy_nonoverlapping(b"hello".as_ptr(), f.inline_area(c.pos), 5);
            f.publish(c.pos, 3, KIND_INLINE, 5);
        }
        let c = f.claim(&mut tail).unwrap();
        let big = vec![0xabu8; BUF_DATA_MAX];
        // SAFETY: claimed position, BUF_DATA_MAX bytes available.
        unsafe {
            std::ptr::copy_nonoverlapping(big.as_ptr(), f.buf_area(c.pos), BUF_DATA_MAX);
            f.publish(c.pos, 4, KIND_BUF, BUF_DATA_MAX as u32);
        }
        // SAFETY: single consumer in this test.
        unsafe {
            match f.poll(0, 0) {
                Polled::Msg(id, d) => assert_eq!((id, d), (3, &b"hello"[..])),
                other => panic!("{other:?}"),
            }
            match f.poll(1, 1) {
                Polled::Buf(id, d) => {
                    assert_eq!(id, 4);
                    assert_eq!(d, &big[..]);
                }
                other => panic!("{other:?}"),
            }
            assert!(matches!(f.poll(2, 2), Polled::Empty));
        }
    }

    #[test]
    fn prefetching_claims_changes_no_element() {
        let (_mem, f) = fresh();
        let mut tail = 0;
        let c = f.claim(&mut tail).unwrap();
        // SAFETY: claimed position, INLINE_MAX bytes available.
        unsafe {
            std::ptr::copy_nonoverlapping(b"kept".as_ptr(), f.inline_area(c.pos), 4);
            f.publish(c.pos, 1, KIND_INLINE, 4);
        }
        if let Some(cpu) = PrefetchW::detect() {
            for pos in 0..2 * NELEMS {
                f.prefetch_claim(pos, cpu);
                f.prefetch_next_buf(pos, 0, cpu);
                f.prefetch_next_buf(pos, pos, cpu);
            }
        }
        // SAFETY: single consumer.
        match unsafe { f.poll(0, 0) } {
            Polled::Msg(id, d) => assert_eq!((id, d), (1, &b"kept"[..])),
            other => panic!("{other:?}"),
        }
        // SAFETY: single consumer.
        assert!(matches!(unsafe { f.poll(1, 0) }, Polled::Empty));
    }

    #[test]
    fn full_fifo_refuses_until_released_and_corrupt_length_is_caught() {
        let (_mem, f) = fresh();
        let mut tail = 0;
        for _ in 0..NELEMS {
            let c = f.claim(&mut tail).unwrap();
            // SAFETY: claimed; a corrupt length is published on purpose.
            unsafe { f.publish(c.pos, 0, KIND_INLINE, INLINE_MAX as u32 + 1) };
        }
        assert!(f.claim(&mut tail).is_none());
        assert!(!f.has_space(&mut tail));
        // SAFETY: single consumer.
        let r = unsafe { f.poll(0, 0) };
        assert!(
            matches!(r, Polled::Corrupt(_)),
            "oversized inline length must be rejected"
        );
        f.release(1);
        assert!(f.has_space(&mut tail));
        assert_eq!(f.claim(&mut tail).unwrap().pos, NELEMS);
    }
}
