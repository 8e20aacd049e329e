//! A connection's receive buffer: bytes `recv`d from the socket and the stream decoder that
//! turns them into frames.

use super::iov::sock_error;
use super::wire::{self, Reassembler};
use std::io;
use std::os::fd::RawFd;
use ucs::Result;

/// Largest receive buffer of a connection (the buffer grows to this size on demand).
pub(crate) const RX_BUF: usize = wire::MIN_RX_BUFFER + 64 * 1024;
/// First size of a receive buffer, allocated at the first `recv` that finds no spare one:
/// enough for small messages.
const RX_MIN: usize = 4 * 1024;
/// Largest single `recv` into the receive buffer.
const RX_CHUNK: usize = 64 * 1024;
/// The `recv` into the receive buffer right after a streamed (large) payload: large payloads
/// tend to follow each other, and this bounds what of the next one's payload lands in the
/// buffer (and is copied once more) before `direct_rx` takes over. A stream of small frames
/// gets `RX_CHUNK` again from the next call.
const RX_AFTER_STREAM: usize = 4 * 1024;

/// Receive buffers the interface keeps for connections that read next.
const RX_POOL: usize = 4;

/// A connection's receive buffer and decoder. A connection holds a buffer only while bytes
/// wait in it: after a dispatch that consumed everything, the buffer goes back to the
/// interface's [`RxPool`] and the next `recv` of any connection borrows it, so idle
/// connections hold none. A buffer grows on demand, doubling from [`RX_MIN`] up to
/// [`RX_BUF`]: when a frame does not fit in what is left after compaction, and when a `recv`
/// filled all the room it was offered (the socket may hold more, and a busy connection wants
/// large `recv`s).
#[derive(Default)]
pub(crate) struct RxBuf {
    /// A boxed slice (every connection holds a receive buffer, mostly empty).
    pub(super) buf: Box<[u8]>,
    pub(super) head: usize,
    pub(super) tail: usize,
    pub(super) reasm: Reassembler,
    pub(super) eof: bool,
    /// `direct_rx` just found the socket empty (no second `recv` right after).
    pub(super) drained: bool,
    /// A streamed payload was just received: the next `recv` is an [`RX_AFTER_STREAM`] one.
    pub(super) after_stream: bool,
    /// The last `recv` was a short one and filled its whole length.
    pub(super) small_full: bool,
    /// The last `recv` filled all the room the buffer had (less than it asked for): the next
    /// one grows the buffer first.
    fill_up: bool,
}

impl RxBuf {
    /// An empty receive buffer (nothing allocated before the first `recv`).
    pub(super) fn new() -> Self {
        RxBuf::default()
    }
    pub(super) fn has_data(&self) -> bool {
        self.head < self.tail
    }
    /// Bytes allocated for the buffer.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }
    /// Doubles the buffer (the first one is [`RX_MIN`] bytes), up to [`RX_BUF`].
    fn grow(&mut self) {
        self.fill_up = false;
        let len = (self.buf.len() * 2).clamp(RX_MIN, RX_BUF);
        if len > self.buf.len() {
            let mut b = std::mem::take(&mut self.buf).into_vec();
            b.reserve_exact(len - b.len());
            b.resize(len, 0);
            self.buf = b.into_boxed_slice();
        }
    }
    /// One non-blocking `recv`. Gives the byte count (0 on EAGAIN); sets `eof`.
    pub(super) fn recv(&mut self, fd: RawFd) -> Result<usize> {
        if self.head == self.tail {
            self.head = 0;
            self.tail = 0;
        } else if self.tail == self.buf.len() {
            self.buf.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
        if self.eof {
            return Ok(0);
        }
        if self.tail == self.buf.len() || self.fill_up {
            self.grow();
        }
        if self.tail == self.buf.len() {
            return Ok(0);
        }
        loop {
            // At most RX_CHUNK per call: the start of a large put or get payload that lands
            // here is copied once more, the rest is received straight into its destination.
            let chunk = if self.after_stream {
                RX_AFTER_STREAM
            } else {
                RX_CHUNK
            };
            let end = self.buf.len().min(self.tail + chunk);
            let dst = &mut self.buf[self.tail..end];
            // SAFETY: `dst` is a valid writable slice of `dst.len()` bytes.
            let r = unsafe {
                libc::recv(
                    fd,
                    dst.as_mut_ptr() as *mut libc::c_void,
                    dst.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                self.tail += r as usize;
                // A full short read: small frames may be coming in bulk, use full reads
                // unless the frames in it end in a streamed payload again.
                self.small_full = self.after_stream && r as usize == chunk;
                self.fill_up = r as usize == dst.len() && dst.len() < chunk;
                return Ok(r as usize);
            }
            if r == 0 {
                self.eof = true;
                return Ok(0);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(sock_error("recv", e)),
            }
        }
    }
}

/// The interface's spare receive buffers (at most [`RX_POOL`]): lent to a connection for a
/// `recv`, taken back once the dispatch consumed every byte.
pub(crate) struct RxPool {
    free: Vec<Box<[u8]>>,
}

impl RxPool {
    /// An empty pool (with room for [`RX_POOL`] buffers, so lending and taking back never
    /// allocates).
    pub(crate) fn new() -> Self {
        RxPool {
            free: Vec::with_capacity(RX_POOL),
        }
    }
    /// Gives `rx` a spare buffer if it has none.
    pub(crate) fn lend(&mut self, rx: &mut RxBuf) {
        if rx.buf.is_empty() {
            if let Some(b) = self.free.pop() {
                rx.buf = b;
            }
        }
    }
    /// Takes `rx`'s buffer back when no bytes wait in it (one beyond [`RX_POOL`] is freed).
    pub(crate) fn take_back(&mut self, rx: &mut RxBuf) {
        if rx.head == rx.tail && !rx.buf.is_empty() {
            rx.head = 0;
            rx.tail = 0;
            let b = std::mem::take(&mut rx.buf);
            if self.free.len() < RX_POOL {
                self.free.push(b);
            }
        }
    }
    /// Takes `rx`'s buffer back and drops the bytes waiting in it (a failed connection's).
    pub(crate) fn release(&mut self, rx: &mut RxBuf) {
        rx.head = rx.tail;
        self.take_back(rx);
    }
    /// Bytes the spare buffers hold.
    pub(crate) fn capacity(&self) -> usize {
        self.free.iter().map(|b| b.len()).sum()
    }
}
