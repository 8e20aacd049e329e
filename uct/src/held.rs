//! Receive buffers a transport lends to its caller: with a message that arrived in a buffer
//! the receiver may keep, the transport offers an [`AmKeep`] (see
//! [`EventSink::am_keep`](crate::EventSink::am_keep)); [`AmKeep::keep`] turns it into a
//! [`HeldBuf`], which reads the message where it arrived and gives the buffer back when it
//! drops. UCX's "return `UCS_INPROGRESS` from the AM callback, release the descriptor later",
//! made safe.
//!
//! The types name no transport. A transport whose receive slots each name a buffer (mm's FIFO
//! elements, [`crate::mm::keep`]) keeps a few spare buffers in a `Spares` list: keeping a
//! message hands its slot a free spare and takes the slot's old buffer out of circulation
//! until the [`HeldBuf`] drops, which puts it back on the list. The transport then tells its
//! producers the slot's new buffer (it sees the slot change when the sink returns). Keeping
//! and giving back are plain inlined code: no allocation, no virtual call.

use std::any::Any;
use std::cell::Cell;
use std::rc::Rc;

/// Most buffers a `Spares` list holds.
pub(crate) const SPARES_MAX: usize = 64;

/// The free spare buffers of a transport's receive slots, shared by the transport and every
/// [`HeldBuf`] taken from it; it also keeps the memory the buffers are in alive.
pub(crate) struct Spares {
    /// Free buffers: `free[..nfree]`.
    free: [Cell<u16>; SPARES_MAX],
    nfree: Cell<usize>,
    /// The buffers' memory (None for memory the owner keeps alive itself); dropped last.
    _mem: Option<Box<dyn Any>>,
}

impl Spares {
    /// A list with buffers `first..first + count` free, keeping `mem` alive with them.
    ///
    /// # Panics
    /// If `count` exceeds [`SPARES_MAX`] or the numbers do not fit a `u16` (a construction
    /// error of the transport, checked once at set-up).
    pub(crate) fn new(first: u16, count: usize, mem: Option<Box<dyn Any>>) -> Self {
        assert!(count <= SPARES_MAX, "at most {SPARES_MAX} spare buffers");
        assert!(first as usize + count <= u16::MAX as usize + 1);
        Spares {
            free: std::array::from_fn(|i| Cell::new(first.wrapping_add(i as u16))),
            nfree: Cell::new(count),
            _mem: mem,
        }
    }

    /// Spares free now.
    #[cfg(test)]
    pub(crate) fn free_count(&self) -> usize {
        self.nfree.get()
    }

    /// Takes a free spare, or `None` when none is free.
    #[inline(always)]
    fn pop(&self) -> Option<u16> {
        let n = self.nfree.get().checked_sub(1)?;
        self.nfree.set(n);
        Some(self.free[n].get())
    }

    /// Returns a buffer to the free list.
    #[inline(always)]
    fn push(&self, buf: u16) {
        let n = self.nfree.get();
        // Every held buffer came out of `pop`'s exchange, so the list has room; a full list
        // would mean a buffer returned twice, which is dropped rather than listed again.
        if let Some(cell) = self.free.get(n) {
            cell.set(buf);
            self.nfree.set(n + 1);
        }
    }
}

/// Offered with a message that arrived in a buffer the receiver may keep: [`AmKeep::keep`]
/// leaves the message there. Unused, the message is released with its buffer as usual.
pub struct AmKeep<'a> {
    spares: &'a Rc<Spares>,
    /// The buffer number of the message's receive slot.
    slot: &'a Cell<u16>,
    data: &'a [u8],
}

impl<'a> AmKeep<'a> {
    /// The offer for `data`, the message in the buffer `slot` names; a kept message's slot is
    /// given a buffer from `spares`.
    #[inline(always)]
    pub(crate) fn new(spares: &'a Rc<Spares>, slot: &'a Cell<u16>, data: &'a [u8]) -> Self {
        AmKeep { spares, slot, data }
    }

    /// Keeps `part` (a part of the message this was offered with) where it is, until the
    /// [`HeldBuf`] drops. `None` when the transport cannot spare the buffer or `part` is not in
    /// the message: copy it then.
    #[inline]
    pub fn keep(self, part: &[u8]) -> Option<HeldBuf> {
        let start = self.data.as_ptr() as usize;
        let end = start + self.data.len();
        let p = part.as_ptr() as usize;
        if p < start || p + part.len() > end {
            return None;
        }
        let spare = self.spares.pop()?;
        let buf = self.slot.replace(spare);
        Some(HeldBuf {
            spares: Rc::clone(self.spares),
            ptr: part.as_ptr(),
            len: part.len(),
            buf,
        })
    }
}

/// A message kept in its receive buffer; the buffer goes back to its transport when this
/// drops. Its bytes are only read (the header that named them was decoded on arrival).
pub struct HeldBuf {
    /// Takes the buffer back, and keeps the memory it is in alive.
    spares: Rc<Spares>,
    ptr: *const u8,
    len: usize,
    buf: u16,
}

impl HeldBuf {
    /// The kept bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` lies in buffer `buf`, whose memory `spares` keeps mapped; a
        // held buffer is named by no receive slot, so nobody writes it until it is given back.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for HeldBuf {
    #[inline]
    fn drop(&mut self) {
        self.spares.push(self.buf);
    }
}

impl std::fmt::Debug for HeldBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldBuf")
            .field("buf", &self.buf)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_part_reads_in_place_and_its_buffer_comes_back_on_drop() {
        let spares = Rc::new(Spares::new(10, 1, None));
        let slot = Cell::new(2);
        let msg = *b"headpayload";
        let held = AmKeep::new(&spares, &slot, &msg)
            .keep(&msg[4..])
            .expect("lent");
        assert_eq!(held.data(), b"payload");
        assert_eq!(
            held.data().as_ptr(),
            msg[4..].as_ptr(),
            "read where it arrived"
        );
        assert_eq!(slot.get(), 10, "the slot has the spare");
        assert_eq!(spares.free_count(), 0);
        // Nothing more to lend: the caller copies, and the slot keeps its buffer.
        assert!(AmKeep::new(&spares, &slot, &msg).keep(&msg).is_none());
        assert_eq!(slot.get(), 10);
        drop(held);
        assert_eq!(spares.free_count(), 1);
        let again = AmKeep::new(&spares, &slot, &msg).keep(&msg).expect("lent");
        assert_eq!(slot.get(), 2, "the given-back buffer is lent again");
        drop(again);
    }

    #[test]
    fn part_outside_the_message_is_not_kept() {
        let spares = Rc::new(Spares::new(1, 1, None));
        let slot = Cell::new(0);
        let msg = [1u8; 16];
        let other = [2u8; 4];
        assert!(AmKeep::new(&spares, &slot, &msg[..8])
            .keep(&other)
            .is_none());
        assert!(AmKeep::new(&spares, &slot, &msg[..8])
            .keep(&msg[4..12])
            .is_none());
        assert_eq!(spares.free_count(), 1, "nothing was lent");
        assert_eq!(slot.get(), 0);
    }

    #[test]
    fn buffers_memory_lives_until_the_last_held_buffer_drops() {
        let alive = Rc::new(());
        let spares = Rc::new(Spares::new(4, 2, Some(Box::new(alive.clone()))));
        let slot = Cell::new(0);
        let msg = [0u8; 8];
        let held = AmKeep::new(&spares, &slot, &msg).keep(&msg).expect("lent");
        drop(spares);
        assert_eq!(
            Rc::strong_count(&alive),
            2,
            "a held buffer keeps the memory"
        );
        drop(held);
        assert_eq!(Rc::strong_count(&alive), 1);
    }
}
