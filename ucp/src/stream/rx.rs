//! Received stream bytes no receive has taken yet, per endpoint: the peer's messages in
//! arrival order, each still in the transport's receive buffer ([`uct::HeldBuf`]: the bytes
//! are copied once, into the receive that takes them) or, when the transport cannot spare the
//! buffer, copied out into a vector of its own.

use std::collections::VecDeque;
use uct::HeldBuf;

/// Vectors of consumed messages kept for the next copies (a receiver that falls behind then
/// allocates nothing per message).
const SPARE_VECS: usize = 8;

/// One message the peer sent, or what is left of it.
enum Seg {
    /// Copied out of the transport's buffer.
    Owned(Vec<u8>),
    /// Still in the transport's receive buffer, released when consumed.
    Held(HeldBuf),
}

impl Seg {
    fn bytes(&self) -> &[u8] {
        match self {
            Seg::Owned(v) => v,
            Seg::Held(h) => h.data(),
        }
    }
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
    spare: Vec<Vec<u8>>,
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
        self.segs.capacity() == 0 && self.spare.is_empty()
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
        let mut v = self.spare.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(data);
        self.len += data.len();
        self.segs.push_back(Seg::Owned(v));
    }

    /// Messages waiting in the transport's buffers.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.segs
            .iter()
            .filter(|s| matches!(s, Seg::Held(_)))
            .count()
    }

    /// Bytes left of the oldest message (0 when none waits).
    pub(crate) fn front_message_left(&self) -> usize {
        self.segs
            .front()
            .map_or(0, |s| s.bytes().len() - self.front_off)
    }

    /// Copies the oldest bytes into `dst`, as many as fit and are there, and consumes them
    /// (releasing each message used up). Gives how many.
    pub(crate) fn copy_out(&mut self, dst: &mut [u8]) -> usize {
        let mut n = 0;
        while n < dst.len() {
            let Some(seg) = self.segs.front() else {
                break;
            };
            let src = &seg.bytes()[self.front_off..];
            let k = src.len().min(dst.len() - n);
            dst[n..n + k].copy_from_slice(&src[..k]);
            n += k;
            self.consume_front(k);
        }
        n
    }

    /// Appends up to `max` of the oldest bytes to `out` and consumes them.
    pub(crate) fn take(&mut self, out: &mut Vec<u8>, max: usize) {
        let mut left = max.min(self.len);
        while left > 0 {
            let Some(seg) = self.segs.front() else {
                break;
            };
            let src = &seg.bytes()[self.front_off..];
            let k = src.len().min(left);
            out.extend_from_slice(&src[..k]);
            left -= k;
            self.consume_front(k);
        }
    }

    /// Consumes `k` bytes of the front message (at most what is left of it).
    fn consume_front(&mut self, k: usize) {
        self.len -= k;
        self.front_off += k;
        let done = self
            .segs
            .front()
            .is_some_and(|s| self.front_off >= s.bytes().len());
        if done {
            self.front_off = 0;
            if let Some(Seg::Owned(v)) = self.segs.pop_front() {
                if self.spare.len() < SPARE_VECS {
                    self.spare.push(v);
                }
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
        // The consumed messages' vectors are kept for the next copies.
        assert_eq!(rx.spare.len(), 2);
        rx.push_copy(b"again");
        assert_eq!(rx.spare.len(), 1);
    }
}
