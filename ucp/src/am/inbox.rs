//! Active messages queued for a client that runs their handlers after the progress call
//! ([`Worker::am_set_queued`](crate::Worker::am_set_queued)): the C library, whose handlers
//! may call back into the library, so they run once the worker is no longer borrowed.
//!
//! A small eager message (user header and data together at most [`SMALL_AM_MAX`] bytes) is
//! copied into a slot of a ring of small messages, written in place, and taken out with one
//! copy of the slot: no buffer is taken or given back for it. A larger eager message is copied
//! into a buffer of its own, from a list of spares, which the client may keep (and give back
//! with [`Worker::am_recycle`](crate::Worker::am_recycle)); it and every other kind wait in the
//! general queue. Order is kept across the two: a small message goes to the ring only while
//! the general queue is empty, so everything in the ring is older than everything in the
//! queue, and the ring is emptied first. Both are taken from the front one message at a time,
//! so a handler that progresses the worker delivers the messages behind its own, in order, and
//! none twice.
//!
//! A small message that arrives while nothing waits, from a transport that can lend it
//! ([`uct::EventSink::am_lend`]: shared memory), is not copied at all: the inbox notes where
//! its bytes are ([`LentAm`]), the transport keeps them there until its next progress call,
//! and the client reads them in place. The messages behind it in the same call are copied (the
//! inbox is not empty then). A lent message not taken before the next progress call is copied
//! into the ring first (at its front: it is the oldest).

use crate::am_desc::AmRndv;
use crate::tag::copy::copy_in;
use crate::worker::api_types::EpHandle;
use std::collections::VecDeque;

/// Largest user header plus data copied into a queue entry: an 8-byte-aligned entry of this
/// size holds the small messages of latency and message-rate tests (8 B of data and a header
/// of up to 56 B) while the entry stays two cache lines.
pub const SMALL_AM_MAX: usize = 64;

/// Spare message buffers kept for reuse, at most.
const SPARES_MAX: usize = 64;
/// Buffers larger than this are freed, not kept as spares.
const SPARE_CAP_MAX: usize = 64 * 1024;

/// A small eager message's bytes: the data first (so it starts 8-byte aligned), then the user
/// header.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct SmallAm {
    /// Data, then header.
    pub bytes: [u8; SMALL_AM_MAX],
    /// Length of the data.
    pub len: u8,
    /// Length of the user header.
    pub header_len: u8,
}

impl SmallAm {
    /// No message (a place to copy one into).
    pub const EMPTY: SmallAm = SmallAm {
        bytes: [0; SMALL_AM_MAX],
        len: 0,
        header_len: 0,
    };

    /// The message of `header` and `data`, if it fits.
    #[inline(always)]
    pub fn of(header: &[u8], data: &[u8]) -> Option<SmallAm> {
        if header.len() + data.len() > SMALL_AM_MAX {
            return None;
        }
        let mut m = SmallAm {
            bytes: [0; SMALL_AM_MAX],
            len: 0,
            header_len: 0,
        };
        m.fill(header, data);
        Some(m)
    }

    /// Writes `header` and `data` (together at most [`SMALL_AM_MAX`] bytes: the caller checks;
    /// a longer one is cut to fit) into this message, in place.
    #[inline(always)]
    fn fill(&mut self, header: &[u8], data: &[u8]) {
        let d = data.len().min(SMALL_AM_MAX);
        let h = header.len().min(SMALL_AM_MAX - d);
        self.len = d as u8;
        self.header_len = h as u8;
        // Small copies inline (8 to 16 bytes of data, the common message, without a call).
        copy_in(&mut self.bytes[..d], data);
        if h > 0 {
            copy_in(&mut self.bytes[d..d + h], header);
        }
    }

    /// The data.
    #[inline(always)]
    pub fn data(&mut self) -> &mut [u8] {
        &mut self.bytes[..usize::from(self.len)]
    }

    /// The user header.
    #[inline(always)]
    pub fn header(&self) -> &[u8] {
        let d = usize::from(self.len);
        &self.bytes[d..d + usize::from(self.header_len)]
    }
}

/// A queued active message (not a small one in the ring).
pub enum AmArrival {
    /// For an id queued whole ([`Worker::am_set_queued`](crate::Worker::am_set_queued) with `whole`):
    /// id, data, sender endpoint.
    Whole(u16, Vec<u8>, EpHandle),
    /// A small eager message, copied inline (queued behind a larger one): id, message, sender
    /// endpoint.
    Small(u16, SmallAm, EpHandle),
    /// An eager message: id, buffer (user header, then data), header length, sender endpoint.
    Eager(u16, Vec<u8>, usize, EpHandle),
    /// A message sent by rendezvous: id, user header and descriptor (boxed: rare, and large
    /// next to the eager forms), sender endpoint.
    Rndv(u16, Box<(Vec<u8>, AmRndv)>, EpHandle),
}

/// A small message in the ring: id, sender endpoint and bytes.
#[derive(Clone, Copy)]
pub struct SmallSlot {
    /// Data, then header.
    pub m: SmallAm,
    /// Active-message id.
    pub id: u16,
    /// Sender endpoint.
    pub ep: EpHandle,
}

/// A small eager message lent by its transport: its bytes are still in the transport's
/// receive buffer, where they stay until the worker's next progress call.
pub struct LentAm {
    /// Active-message id.
    pub id: u16,
    /// Sender endpoint.
    pub ep: EpHandle,
    header: *const u8,
    header_len: usize,
    data: *const u8,
    len: usize,
}

impl LentAm {
    /// Where `header` and `data` are (both lent by the transport).
    #[inline(always)]
    fn new(id: u16, ep: EpHandle, header: &[u8], data: &[u8]) -> LentAm {
        LentAm {
            id,
            ep,
            header: header.as_ptr(),
            header_len: header.len(),
            data: data.as_ptr(),
            len: data.len(),
        }
    }

    /// The user header and the data.
    ///
    /// # Safety
    /// Only before the worker's next progress call: the transport keeps the bytes until then.
    #[inline(always)]
    pub unsafe fn parts(&self) -> (&[u8], &[u8]) {
        // SAFETY: the caller's contract; both were slices when lent.
        unsafe {
            (
                std::slice::from_raw_parts(self.header, self.header_len),
                std::slice::from_raw_parts(self.data, self.len),
            )
        }
    }
}

/// A small message taken from the inbox ([`Worker::am_pop_small`](crate::Worker::am_pop_small)).
pub enum SmallTaken {
    /// Lent by its transport: read in place before the next progress call.
    Lent(LentAm),
    /// Copied out of the ring.
    Copied(SmallSlot),
}

/// Slots the ring of small messages starts with (it doubles when full).
const RING_START: usize = 64;

/// The worker's queued active messages, and spare buffers for the larger ones.
#[derive(Default)]
pub(crate) struct AmInbox {
    /// Small messages, older than everything in `queue`: `ring[head..head + len]`, wrapping
    /// (its length is zero or a power of two).
    ring: Vec<SmallSlot>,
    head: usize,
    len: usize,
    queue: VecDeque<AmArrival>,
    spares: Vec<Vec<u8>>,
    /// The message lent by its transport, older than everything in `ring` and `queue`.
    lent: Option<LentAm>,
}

impl AmInbox {
    /// True when no message waits.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.queue.is_empty() && self.lent.is_none()
    }

    /// True when a lent message waits (to be taken, or copied by [`AmInbox::unlend`] before
    /// its transport progresses again).
    #[inline(always)]
    pub fn has_lent(&self) -> bool {
        self.lent.is_some()
    }

    /// The lent message, if one waits (the oldest of all).
    #[inline(always)]
    pub fn take_lent(&mut self) -> Option<LentAm> {
        self.lent.take()
    }

    /// The oldest small message: the lent one, else the ring's first, copied out of its slot.
    #[inline(always)]
    pub fn pop_small(&mut self) -> Option<SmallTaken> {
        if let Some(l) = self.lent.take() {
            return Some(SmallTaken::Lent(l));
        }
        if self.len == 0 {
            return None;
        }
        let s = *self.ring.get(self.head)?;
        self.head = (self.head + 1) & (self.ring.len() - 1);
        self.len -= 1;
        Some(SmallTaken::Copied(s))
    }

    /// The oldest small message in the ring (none is lent: take [`AmInbox::take_lent`] first),
    /// its bytes copied into `out`: its id and sender endpoint. Only the bytes the message
    /// holds are copied, not the slot.
    #[inline(always)]
    pub fn pop_copied(&mut self, out: &mut SmallAm) -> Option<(u16, EpHandle)> {
        if self.len == 0 {
            return None;
        }
        let s = self.ring.get(self.head)?;
        let n = (usize::from(s.m.len) + usize::from(s.m.header_len)).min(SMALL_AM_MAX);
        copy_in(&mut out.bytes[..n], &s.m.bytes[..n]);
        out.len = s.m.len;
        out.header_len = s.m.header_len;
        let taken = (s.id, s.ep);
        self.head = (self.head + 1) & (self.ring.len() - 1);
        self.len -= 1;
        Some(taken)
    }

    /// Copies the lent message into the ring, at its front, before its transport progresses
    /// again (it was not taken after the progress call that lent it).
    #[cold]
    #[inline(never)]
    pub fn unlend(&mut self) {
        let Some(l) = self.lent.take() else {
            return;
        };
        // SAFETY: the transport keeps the bytes until its next progress call, which has not
        // begun (the worker calls this first).
        let (header, data) = unsafe { l.parts() };
        if self.len == self.ring.len() {
            self.grow(l.id, l.ep);
        }
        let mask = self.ring.len() - 1;
        let at = (self.head + mask) & mask;
        let Some(s) = self.ring.get_mut(at) else {
            return;
        };
        self.head = at;
        self.len += 1;
        s.id = l.id;
        s.ep = l.ep;
        s.m.fill(header, data);
    }

    /// Writes small message `id` from `ep` (`header` and `data` together fit in
    /// [`SMALL_AM_MAX`] bytes) into the ring's next slot, in place.
    #[inline(always)]
    fn push_small(&mut self, id: u16, ep: EpHandle, header: &[u8], data: &[u8]) {
        if self.len == self.ring.len() {
            self.grow(id, ep);
        }
        let at = (self.head + self.len) & (self.ring.len() - 1);
        let Some(s) = self.ring.get_mut(at) else {
            return;
        };
        self.len += 1;
        s.id = id;
        s.ep = ep;
        s.m.fill(header, data);
    }

    /// Doubles the ring (the first time: [`RING_START`] slots), its messages first, in order;
    /// new slots are filled with a message of `id` from `ep` (overwritten when used).
    #[cold]
    #[inline(never)]
    fn grow(&mut self, id: u16, ep: EpHandle) {
        let cap = (self.ring.len() * 2).max(RING_START);
        let fill = SmallSlot {
            m: SmallAm {
                bytes: [0; SMALL_AM_MAX],
                len: 0,
                header_len: 0,
            },
            id,
            ep,
        };
        let mut ring = Vec::with_capacity(cap);
        let mask = self.ring.len().wrapping_sub(1);
        ring.extend((0..self.len).map(|k| self.ring[(self.head + k) & mask]));
        ring.resize(cap, fill);
        self.ring = ring;
        self.head = 0;
    }

    /// Queues a message for its handler.
    #[inline(always)]
    pub fn push(&mut self, a: AmArrival) {
        self.queue.push_back(a);
    }

    /// The oldest message of the general queue (younger than any in the ring: take
    /// [`AmInbox::pop_small`] first).
    #[inline(always)]
    pub fn pop(&mut self) -> Option<AmArrival> {
        self.queue.pop_front()
    }

    /// Queues eager message `id` from `ep` (user header, data): inline when small and
    /// `inline_ok` (the client asks for no alignment above 8), else in a buffer of its own.
    /// With `lend` (its transport lends the bytes), a small one that finds nothing waiting is
    /// noted where it is instead ([`LentAm`]): gives true then.
    #[inline(always)]
    pub fn push_eager(
        &mut self,
        id: u16,
        ep: EpHandle,
        header: &[u8],
        data: &[u8],
        inline_ok: bool,
        lend: bool,
    ) -> bool {
        if lend && inline_ok && header.len() + data.len() <= SMALL_AM_MAX && self.is_empty() {
            self.lent = Some(LentAm::new(id, ep, header, data));
            return true;
        }
        self.push_eager_copy(id, ep, header, data, inline_ok);
        false
    }

    /// [`AmInbox::push_eager`] of a message not lent: copied into the ring (the common case
    /// here: messages behind a lent one), else [`AmInbox::push_eager_queued`]. Out of line, so
    /// the lent message's path keeps its values in registers.
    #[inline(never)]
    fn push_eager_copy(
        &mut self,
        id: u16,
        ep: EpHandle,
        header: &[u8],
        data: &[u8],
        inline_ok: bool,
    ) {
        if inline_ok && header.len() + data.len() <= SMALL_AM_MAX && self.queue.is_empty() {
            self.push_small(id, ep, header, data);
            return;
        }
        self.push_eager_queued(id, ep, header, data, inline_ok);
    }

    /// [`AmInbox::push_eager_copy`] of a message that does not go into the ring: into the
    /// queue, inline or in a buffer of its own. Out of line: the ring's path saves fewer
    /// registers.
    #[inline(never)]
    fn push_eager_queued(
        &mut self,
        id: u16,
        ep: EpHandle,
        header: &[u8],
        data: &[u8],
        inline_ok: bool,
    ) {
        if inline_ok && header.len() + data.len() <= SMALL_AM_MAX {
            if let Some(m) = SmallAm::of(header, data) {
                self.push(AmArrival::Small(id, m, ep));
                return;
            }
        }
        let mut buf = self.spares.pop().unwrap_or_default();
        buf.clear();
        buf.reserve(header.len() + data.len());
        buf.extend_from_slice(header);
        buf.extend_from_slice(data);
        self.push(AmArrival::Eager(id, buf, header.len(), ep));
    }

    /// Takes back a message buffer once its data is no longer used.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spares.len() < SPARES_MAX && buf.capacity() <= SPARE_CAP_MAX {
            self.spares.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small message copied out of the ring (none is lent in these tests).
    fn copied(t: Option<SmallTaken>) -> Option<SmallSlot> {
        match t? {
            SmallTaken::Copied(s) => Some(s),
            SmallTaken::Lent(_) => panic!("a message was lent"),
        }
    }

    /// An endpoint handle (the inbox only carries it).
    fn an_endpoint() -> EpHandle {
        EpHandle {
            wid: 1,
            idx: 0,
            gen: 1,
        }
    }

    #[test]
    fn small_messages_keep_data_aligned_and_header_after_it() {
        let mut m = SmallAm::of(b"hdr", b"12345678").expect("fits");
        assert_eq!(m.data(), b"12345678");
        assert_eq!(m.header(), b"hdr");
        assert!((m.data().as_ptr() as usize).is_multiple_of(8));
        assert!(SmallAm::of(&[1; 60], &[2; 4]).is_some());
        assert!(SmallAm::of(&[1; 60], &[2; 5]).is_none());
        let mut empty = SmallAm::of(b"", b"").expect("fits");
        assert!(empty.data().is_empty() && empty.header().is_empty());
    }

    #[test]
    fn messages_come_out_in_order_and_buffers_are_reused() {
        let mut q = AmInbox::default();
        let ep = an_endpoint();
        q.push_eager(1, ep, b"h", b"small", true, false);
        q.push_eager(2, ep, b"h", &[7; 100], true, false);
        q.push_eager(3, ep, b"h", b"no inline", false, false);
        let Some(SmallTaken::Copied(SmallSlot { id: 1, mut m, .. })) = q.pop_small() else {
            panic!("small message not inline")
        };
        assert_eq!(m.data(), b"small");
        assert_eq!(m.header(), b"h");
        assert!(q.pop_small().is_none());
        let Some(AmArrival::Eager(2, buf, 1, _)) = q.pop() else {
            panic!("large message not in a buffer")
        };
        assert_eq!(&buf[1..], &[7; 100][..]);
        let addr = buf.as_ptr();
        q.recycle(buf);
        assert!(matches!(q.pop(), Some(AmArrival::Eager(3, _, 1, _))));
        assert!(q.pop().is_none() && q.is_empty());
        q.push_eager(4, ep, b"", &[1; 80], true, false);
        let Some(AmArrival::Eager(4, buf, 0, _)) = q.pop() else {
            panic!("large message not in a buffer")
        };
        assert_eq!(buf.as_ptr(), addr, "the spare buffer was not reused");
    }

    /// `pop_copied` gives the ring's messages in order, each with its own bytes only (what an
    /// earlier, longer message left in the place they are copied into does not show).
    #[test]
    fn popped_copies_hold_each_message_alone() {
        let mut q = AmInbox::default();
        let ep = an_endpoint();
        q.push_eager(1, ep, b"head", &[9; 40], true, false);
        q.push_eager(2, ep, b"", b"12345678", true, false);
        q.push_eager(3, ep, b"h", b"abc", true, false);
        let mut out = SmallAm::EMPTY;
        assert_eq!(q.pop_copied(&mut out).map(|t| t.0), Some(1));
        assert_eq!(out.header(), b"head");
        assert_eq!(out.data(), &[9u8; 40][..]);
        assert_eq!(q.pop_copied(&mut out).map(|t| t.0), Some(2));
        assert!(out.header().is_empty());
        assert_eq!(out.data(), b"12345678");
        assert_eq!(q.pop_copied(&mut out).map(|t| t.0), Some(3));
        assert_eq!(out.header(), b"h");
        assert_eq!(out.data(), b"abc");
        assert!(q.pop_copied(&mut out).is_none() && q.is_empty());
    }

    /// Small messages behind a larger one wait behind it; the ring grows past its first size
    /// with its messages in order, also when they wrap around its end.
    #[test]
    fn small_messages_keep_their_order_with_the_others_and_across_growth() {
        let mut q = AmInbox::default();
        let ep = an_endpoint();
        let mut next = 0u16;
        let mut want = 0u16;
        // Wrap the ring's start, then fill it past its size.
        for _ in 0..RING_START / 2 {
            q.push_eager(next, ep, b"", &next.to_le_bytes(), true, false);
            next += 1;
        }
        for _ in 0..RING_START / 2 {
            let s = copied(q.pop_small()).expect("small message");
            assert_eq!(s.id, want);
            want += 1;
        }
        for _ in 0..RING_START * 3 {
            q.push_eager(next, ep, b"", &next.to_le_bytes(), true, false);
            next += 1;
        }
        q.push_eager(next, ep, b"", &[1; 100], true, false);
        next += 1;
        q.push_eager(next, ep, b"", b"late", true, false);
        while let Some(mut s) = copied(q.pop_small()) {
            assert_eq!((s.id, &*s.m.data()), (want, &want.to_le_bytes()[..]));
            want += 1;
        }
        assert_eq!(want, next - 1, "small messages left the ring out of order");
        assert!(matches!(q.pop(), Some(AmArrival::Eager(id, ..)) if id == next - 1));
        assert!(matches!(q.pop(), Some(AmArrival::Small(id, ..)) if id == next));
        assert!(q.is_empty());
    }

    /// A small message that finds nothing waiting is lent (the later ones go to the ring);
    /// it comes out first, in place, or copied to the ring's front by `unlend` (here over a
    /// full ring, which grows). Nothing is lent while anything waits.
    #[test]
    fn a_lent_message_comes_out_first_in_place_or_copied() {
        let ep = an_endpoint();
        let lent_bytes = *b"lent";
        let mut q = AmInbox::default();
        assert!(q.push_eager(1, ep, b"h", &lent_bytes, true, true));
        assert!(!q.push_eager(2, ep, b"", b"ring", true, true), "lent twice");
        assert!(!q.is_empty() && q.has_lent());
        let Some(SmallTaken::Lent(l)) = q.pop_small() else {
            panic!("the lent message did not come first")
        };
        // SAFETY: `lent_bytes` and the header literal outlive this.
        let (h, d) = unsafe { l.parts() };
        assert_eq!((l.id, h, d), (1, &b"h"[..], &b"lent"[..]));
        assert_eq!(
            d.as_ptr(),
            lent_bytes.as_ptr(),
            "the lent message was copied"
        );
        assert_eq!(copied(q.pop_small()).map(|s| s.id), Some(2));
        assert!(q.is_empty());

        assert!(q.push_eager(3, ep, b"", &lent_bytes, true, true));
        for id in 4..4 + RING_START as u16 {
            assert!(!q.push_eager(id, ep, b"", &id.to_le_bytes(), true, true));
        }
        q.unlend();
        assert!(!q.has_lent());
        let mut s = copied(q.pop_small()).expect("the lent message");
        assert_eq!((s.id, &*s.m.data()), (3, &b"lent"[..]));
        for id in 4..4 + RING_START as u16 {
            assert_eq!(copied(q.pop_small()).map(|s| s.id), Some(id));
        }
        assert!(q.is_empty());

        q.push_eager(9, ep, b"", &[1; 100], true, true);
        assert!(
            !q.push_eager(10, ep, b"", b"late", true, true),
            "lent behind a queued one"
        );
        assert!(
            !q.push_eager(11, ep, b"", b"x", false, true),
            "lent without inline_ok"
        );
    }
}
