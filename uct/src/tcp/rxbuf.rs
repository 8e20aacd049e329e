//! A connection's receive buffer: bytes `recv`d from the socket and the stream decoder that
//! turns them into frames.

use super::iov::sock_error;
use super::wire::{self, Reassembler};
use std::io;
use std::os::fd::RawFd;
use ucs::Result;

/// Bytes of a connection's receive buffer.
pub(crate) const RX_BUF: usize = wire::MIN_RX_BUFFER + 64 * 1024;
/// Largest single `recv` into the receive buffer.
const RX_CHUNK: usize = 64 * 1024;
/// The `recv` into the receive buffer right after a streamed (large) payload: large payloads
/// tend to follow each other, and this bounds what of the next one's payload lands in the
/// buffer (and is copied once more) before `direct_rx` takes over. A stream of small frames
/// gets `RX_CHUNK` again from the next call.
const RX_AFTER_STREAM: usize = 4 * 1024;

/// A connection's receive buffer and decoder.
#[derive(Default)]
pub(crate) struct RxBuf {
    pub(super) buf: Vec<u8>,
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
}

impl RxBuf {
    pub(super) fn new() -> Self {
        RxBuf {
            buf: vec![0u8; RX_BUF],
            ..Default::default()
        }
    }
    pub(super) fn has_data(&self) -> bool {
        self.head < self.tail
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
        if self.tail == self.buf.len() || self.eof {
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
