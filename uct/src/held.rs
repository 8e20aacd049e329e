//! Receive buffers a transport lends to its caller: with a message that arrived in a buffer
//! the receiver may keep, the transport offers an [`AmKeep`] (see
//! [`EventSink::am_keep`](crate::EventSink::am_keep)); [`AmKeep::keep`] turns it into a
//! [`HeldBuf`], which reads the message where it arrived and gives the buffer back when it
//! drops. UCX's "return `UCS_INPROGRESS` from the AM callback, release the descriptor later",
//! made safe.
//!
//! The types name no transport: a transport's buffer table implements [`BufLender`] (today
//! mm's FIFO buffers, [`crate::mm::keep`]). Keeping and giving back allocate nothing.

use std::rc::Rc;

/// A transport's table of receive buffers that can lend one out while its caller keeps a
/// message in it.
pub(crate) trait BufLender {
    /// Takes the buffer holding the message at receive position `pos` out of circulation;
    /// gives its number, or `None` when the transport cannot spare it now.
    fn lend(&self, pos: u64) -> Option<u32>;
    /// Returns buffer `buf`, which [`BufLender::lend`] gave out.
    fn give_back(&self, buf: u32);
}

/// Offered with a message that arrived in a buffer the receiver may keep: [`AmKeep::keep`]
/// leaves the message there. Unused, the message is released with its buffer as usual.
pub struct AmKeep<'a> {
    lender: &'a Rc<dyn BufLender>,
    pos: u64,
    data: &'a [u8],
}

impl<'a> AmKeep<'a> {
    /// The offer for `data`, the message at receive position `pos` of `lender`'s buffers.
    #[inline]
    pub(crate) fn new(lender: &'a Rc<dyn BufLender>, pos: u64, data: &'a [u8]) -> Self {
        AmKeep { lender, pos, data }
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
        let buf = self.lender.lend(self.pos)?;
        Some(HeldBuf {
            lender: Rc::clone(self.lender),
            ptr: part.as_ptr(),
            len: part.len(),
            buf,
        })
    }
}

/// A message kept in its receive buffer; the buffer goes back to its transport when this
/// drops. Its bytes are only read (the header that named them was decoded on arrival).
pub struct HeldBuf {
    /// Keeps the buffers (and the memory they are in) alive.
    lender: Rc<dyn BufLender>,
    ptr: *const u8,
    len: usize,
    buf: u32,
}

impl HeldBuf {
    /// The kept bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` lies in buffer `buf`, which `lender` lent out and keeps
        // mapped; a lent buffer is written by nobody until it is given back.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for HeldBuf {
    fn drop(&mut self) {
        self.lender.give_back(self.buf);
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
    use std::cell::{Cell, RefCell};

    /// Lends buffer numbers from a list; records what came back.
    struct Lender {
        next: Cell<Option<u32>>,
        back: RefCell<Vec<u32>>,
    }

    impl BufLender for Lender {
        fn lend(&self, pos: u64) -> Option<u32> {
            self.next.take().map(|b| b + pos as u32)
        }
        fn give_back(&self, buf: u32) {
            self.back.borrow_mut().push(buf);
        }
    }

    #[test]
    fn kept_part_reads_in_place_and_its_buffer_comes_back_on_drop() {
        let l = Rc::new(Lender {
            next: Cell::new(Some(10)),
            back: RefCell::new(Vec::new()),
        });
        let dl: Rc<dyn BufLender> = l.clone();
        let msg = *b"headpayload";
        let held = AmKeep::new(&dl, 2, &msg).keep(&msg[4..]).expect("lent");
        assert_eq!(held.data(), b"payload");
        assert_eq!(
            held.data().as_ptr(),
            msg[4..].as_ptr(),
            "read where it arrived"
        );
        assert!(l.back.borrow().is_empty());
        drop(held);
        assert_eq!(*l.back.borrow(), [12]);
        // Nothing more to lend: the caller copies.
        assert!(AmKeep::new(&dl, 3, &msg).keep(&msg).is_none());
    }

    #[test]
    fn part_outside_the_message_is_not_kept() {
        let l = Rc::new(Lender {
            next: Cell::new(Some(1)),
            back: RefCell::new(Vec::new()),
        });
        let dl: Rc<dyn BufLender> = l.clone();
        let msg = [1u8; 16];
        let other = [2u8; 4];
        assert!(AmKeep::new(&dl, 0, &msg[..8]).keep(&other).is_none());
        assert!(AmKeep::new(&dl, 0, &msg[..8]).keep(&msg[4..12]).is_none());
        assert_eq!(l.next.get(), Some(1), "nothing was lent");
    }
}
