//! Received stream bytes no receive has taken yet, per endpoint: the peer's messages in
//! arrival order, each still in the transport's receive buffer ([`uct::HeldBuf`]: the bytes
//! are copied once, into the receive that takes them) or, when the transport cannot spare the
//! buffer, copied into the endpoint's byte buffer (one buffer for all such messages, so a
//! receiver that falls behind a stream of small messages allocates nothing per message).

use crate::tag::copy::copy_in;
use std::collections::VecDeque;
use uct::HeldBuf;

/// Consumed bytes at the front of the copied bytes' buffer above which (and above half of
/// it) the buffer is compacted before more is appended: a receiver that never drains it
/// completely does not make it grow for ever, and each byte moves at most once on average.
const COMPACT_MIN: usize = 64 * 1024;
/// Capacity of the copied bytes' buffer kept once it drains; a larger one (after a burst) is
/// freed.
const KEEP_CAP_MAX: usize = 1 << 20;

/// One message the peer sent, or what is left of it.
enum Seg {
    /// Copied into [`StreamRx::copied`]: its length there.
    Copied(usize),
    /// Still in the transport's receive buffer, released when consumed.
    Held(HeldBuf),
}

/// The stream family's part of one endpoint: the received bytes no receive took yet, and the
/// receives waiting for bytes (request keys, in posting order).
#[derive(Default)]
pub(crate) struct EpStream {
    pub(in crate::stream) rx: StreamRx,
    pub(in crate::stream) waiters: VecDeque<usize>,
}

impl EpStream {
    /// Holds nothing and keeps no memory (the endpoint's rarely used part may be freed).
    pub(crate) fn is_unused(&self) -> bool {
        self.rx.is_unused() && self.waiters.capacity() == 0
    }

    /// Messages waiting in the transport's buffers.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.rx.held()
    }
}

/// The received, not yet consumed stream bytes of one endpoint.
#[derive(Default)]
pub(crate) struct StreamRx {
    segs: VecDeque<Seg>,
    /// Bytes of the front message already consumed.
    front_off: usize,
    /// Bytes not yet consumed, in all messages.
    len: usize,
    /// The bytes of the [`Seg::Copied`] messages, in arrival order; those before
    /// `copied_off` are consumed.
    copied: Vec<u8>,
    copied_off: usize,
}

impl StreamRx {
    /// Bytes not yet consumed.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// No byte waits.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Holds no memory (an endpoint's rarely used part with only this may be dropped).
    pub(crate) fn is_unused(&self) -> bool {
        self.segs.capacity() == 0 && self.copied.capacity() == 0
    }

    /// Appends a message kept in the transport's buffer.
    pub(crate) fn push_held(&mut self, h: HeldBuf) {
        if !h.data().is_empty() {
            self.len += h.data().len();
            self.segs.push_back(Seg::Held(h));
        }
    }

    /// Appends a copy of a message.
    pub(crate) fn push_copy(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.copied_off >= COMPACT_MIN && self.copied_off >= self.copied.len() / 2 {
            self.copied.drain(..self.copied_off);
            self.copied_off = 0;
        }
        self.copied.extend_from_slice(data);
        self.len += data.len();
        self.segs.push_back(Seg::Copied(data.len()));
    }

    /// Messages waiting in the transport's buffers.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.segs
            .iter()
            .filter(|s| matches!(s, Seg::Held(_)))
            .count()
    }

    /// The unconsumed bytes of the oldest message (None when none waits).
    #[inline]
    fn front(&self) -> Option<&[u8]> {
        match self.segs.front()? {
            Seg::Copied(n) => {
                let left = n - self.front_off;
                self.copied.get(self.copied_off..self.copied_off + left)
            }
            Seg::Held(h) => h.data().get(self.front_off..),
        }
    }

    /// Bytes left of the oldest message (0 when none waits).
    pub(crate) fn front_message_left(&self) -> usize {
        self.front().map_or(0, |b| b.len())
    }

    /// Copies the oldest bytes into `dst`, as many as fit and are there, and consumes them
    /// (releasing each message used up). Gives how many. The common receive of a client
    /// behind its sender, one small copied message for a receive of its size or more, takes
    /// one look at the front and one small copy inline ([`copy_in`]); the rest go round
    /// [`StreamRx::copy_out_each`].
    #[inline]
    pub(crate) fn copy_out(&mut self, dst: &mut [u8]) -> usize {
        if let Some(&Seg::Copied(m)) = self.segs.front() {
            let (at, left) = (self.copied_off, m - self.front_off);
            if left <= dst.len() && self.segs.len() == 1 && at + left == self.copied.len() {
                // The last message waiting, a copy, taken whole: the buffer starts over.
                if let Some(src) = self.copied.get(at..at + left) {
                    copy_in(dst, src);
                    self.len -= left;
                    self.front_off = 0;
                    self.segs.clear();
                    self.copied_drained();
                    return left;
                }
            } else if left >= dst.len() {
                if let Some(src) = self.copied.get(at..at + dst.len()) {
                    let k = dst.len();
                    copy_in(dst, src);
                    self.len -= k;
                    self.copied_off += k;
                    if k == left {
                        self.front_off = 0;
                        self.segs.pop_front();
                    } else {
                        self.front_off += k;
                    }
                    return k;
                }
            }
        }
        self.copy_out_each(dst)
    }

    /// [`StreamRx::copy_out`] message by message.
    #[inline(never)]
    fn copy_out_each(&mut self, dst: &mut [u8]) -> usize {
        let mut n = 0;
        while n < dst.len() {
            let Some(src) = self.front() else {
                break;
            };
            let k = src.len().min(dst.len() - n);
            copy_in(&mut dst[n..n + k], src);
            n += k;
            self.consume_front(k);
        }
        n
    }

    /// Every copied byte is consumed: the buffer starts over (freed after a burst).
    #[inline]
    fn copied_drained(&mut self) {
        self.copied_off = 0;
        if self.copied.capacity() > KEEP_CAP_MAX {
            self.copied = Vec::new();
        } else {
            self.copied.clear();
        }
    }

    /// Appends up to `max` of the oldest bytes to `out` and consumes them.
    pub(crate) fn take(&mut self, out: &mut Vec<u8>, max: usize) {
        let mut left = max.min(self.len);
        while left > 0 {
            let Some(src) = self.front() else {
                break;
            };
            let k = src.len().min(left);
            out.extend_from_slice(&src[..k]);
            left -= k;
            self.consume_front(k);
        }
    }

    /// Consumes `k` bytes of the front message (at most what is left of it).
    #[inline]
    fn consume_front(&mut self, k: usize) {
        self.len -= k;
        self.front_off += k;
        let (copied, done) = match self.segs.front() {
            Some(Seg::Copied(n)) => (true, self.front_off >= *n),
            Some(Seg::Held(h)) => (false, self.front_off >= h.data().len()),
            None => (false, false),
        };
        if copied {
            self.copied_off += k;
        }
        if done {
            self.front_off = 0;
            self.segs.pop_front();
            if copied && self.copied_off == self.copied.len() {
                self.copied_drained();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_out_in_order_across_messages() {
        let mut rx = StreamRx::default();
        rx.push_copy(b"hello ");
        rx.push_copy(b"");
        rx.push_copy(b"stream world");
        assert_eq!(rx.len(), 18);
        assert_eq!(rx.front_message_left(), 6);
        let mut a = [0u8; 4];
        assert_eq!(rx.copy_out(&mut a), 4);
        assert_eq!(&a, b"hell");
        assert_eq!(rx.front_message_left(), 2);
        let mut out = Vec::new();
        rx.take(&mut out, 5);
        assert_eq!(out, b"o str");
        assert_eq!(rx.front_message_left(), 9);
        let mut b = [0u8; 64];
        assert_eq!(rx.copy_out(&mut b), 9);
        assert_eq!(&b[..9], b"eam world");
        assert!(rx.is_empty());
        assert_eq!(rx.copy_out(&mut b), 0);
        assert_eq!(rx.front_message_left(), 0);
        // The copied bytes' buffer is kept for the next copies.
        assert!(rx.copied.capacity() >= 18 && rx.copied.is_empty());
        rx.push_copy(b"again");
        assert_eq!(rx.copied, b"again");
    }

    /// The short ways of `copy_out` (a copied front message taken whole, the last one or one
    /// of several, or in part) keep the bytes in order and the buffer's accounting right.
    #[test]
    fn receives_of_a_message_size_take_one_message_each() {
        let mut rx = StreamRx::default();
        for m in 0u8..4 {
            rx.push_copy(&[m; 8]);
        }
        let mut b = [0u8; 8];
        for m in 0u8..3 {
            assert_eq!(rx.copy_out(&mut b), 8);
            assert_eq!(b, [m; 8]);
            assert_eq!(rx.len(), (3 - usize::from(m)) * 8);
        }
        let mut half = [0u8; 5];
        assert_eq!(rx.copy_out(&mut half), 5);
        assert_eq!(half, [3; 5]);
        assert_eq!(rx.front_message_left(), 3);
        let mut big = [0u8; 16];
        assert_eq!(rx.copy_out(&mut big), 3, "the last message's rest");
        assert_eq!(&big[..3], &[3; 3]);
        assert!(rx.is_empty() && rx.copied.is_empty() && rx.copied_off == 0);
        rx.push_copy(b"abc");
        rx.push_copy(b"defgh");
        assert_eq!(rx.copy_out(&mut big), 8, "across messages");
        assert_eq!(&big[..8], b"abcdefgh");
        assert!(rx.is_empty() && rx.copied.is_empty());
    }

    /// A receiver that always leaves some bytes behind: the buffer is compacted, stays bounded,
    /// and the bytes still come out in order.
    #[test]
    fn a_receiver_that_never_drains_keeps_the_buffer_bounded() {
        let mut rx = StreamRx::default();
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        for _ in 0..200_000 {
            rx.push_copy(&next_in.to_le_bytes());
            next_in += 1;
            if rx.len() > 64 {
                let mut b = [0u8; 4];
                assert_eq!(rx.copy_out(&mut b), 4);
                assert_eq!(u32::from_le_bytes(b), next_out);
                next_out += 1;
            }
        }
        assert!(
            rx.copied.len() <= 2 * COMPACT_MIN + 128,
            "{}",
            rx.copied.len()
        );
        let mut rest = Vec::new();
        rx.take(&mut rest, usize::MAX);
        for w in rest.chunks(4) {
            assert_eq!(u32::from_le_bytes(w.try_into().unwrap()), next_out);
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
        assert!(rx.is_empty() && rx.copied.is_empty());
    }
}
