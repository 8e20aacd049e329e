//! Iovec windows: caller memory of zero-copy operations ([`Segs`]), and the non-blocking
//! `sendmsg`/`recv` calls that move bytes between iovec lists and a socket.

use crate::md::{Iov, MemHandle};
use std::io;
use std::os::fd::RawFd;
use ucs::{Error, Result};

/// Largest iov count of a zcopy operation.
pub(crate) const MAX_IOV: usize = 8;
/// Largest single `sendmsg` (see `sendv`): `sendmsg` holds the socket lock while it copies, and
/// on loopback the receiver's ACKs wait meanwhile. Sending a queue of 1 MiB puts in one call
/// made uct put_bw at 1 MiB swing between 2.9 and 7.9 GB/s; 512 KiB calls give 7.5–8.8 (256 KiB
/// and 1 MiB calls were slower).
const SEND_CHUNK: usize = 512 * 1024;

/// Caller memory of a zero-copy operation, kept alive by `MemHandle` clones until done.
pub(crate) struct Segs {
    seg: [(usize, usize); MAX_IOV],
    memh: [Option<MemHandle>; MAX_IOV],
    n: usize,
    idx: usize,
    off: usize,
}

impl Segs {
    /// Captures an iov list (at most [`MAX_IOV`] pieces).
    pub(crate) fn new(iov: &[Iov<'_>]) -> Result<Self> {
        if iov.len() > MAX_IOV {
            return Err(Error::InvalidParam(format!(
                "{} iov entries exceed the tcp limit of {MAX_IOV}",
                iov.len()
            )));
        }
        let mut s = Segs {
            seg: [(0, 0); MAX_IOV],
            memh: Default::default(),
            n: iov.len(),
            idx: 0,
            off: 0,
        };
        for (i, v) in iov.iter().enumerate() {
            s.seg[i] = (v.ptr() as usize, v.len());
            s.memh[i] = Some(v.memh().clone());
        }
        Ok(s)
    }
    /// Bytes not yet consumed.
    pub(crate) fn remaining(&self) -> usize {
        let mut r: usize = self.seg[self.idx.min(self.n)..self.n]
            .iter()
            .map(|s| s.1)
            .sum();
        r -= self.off.min(r);
        r
    }
    /// Total bytes.
    pub(crate) fn total(&self) -> usize {
        self.seg[..self.n].iter().map(|s| s.1).sum()
    }
    pub(crate) fn advance(&mut self, mut k: usize) {
        while k > 0 && self.idx < self.n {
            let left = self.seg[self.idx].1 - self.off;
            if k >= left {
                k -= left;
                self.idx += 1;
                self.off = 0;
            } else {
                self.off += k;
                k = 0;
            }
        }
        while self.idx < self.n && self.seg[self.idx].1 == self.off {
            self.idx += 1;
            self.off = 0;
        }
    }
    /// Appends the unconsumed pieces to `iov`.
    pub(crate) fn fill(&self, iov: &mut [libc::iovec], cnt: &mut usize) {
        for i in self.idx..self.n {
            if *cnt == iov.len() {
                return;
            }
            let (p, l) = self.seg[i];
            let (p, l) = if i == self.idx {
                (p + self.off, l - self.off)
            } else {
                (p, l)
            };
            if l > 0 {
                iov[*cnt] = libc::iovec {
                    iov_base: p as *mut libc::c_void,
                    iov_len: l,
                };
                *cnt += 1;
            }
        }
    }
    /// Keeps only the first `len` bytes (at most the total).
    pub(crate) fn truncate(&mut self, mut len: usize) {
        for i in 0..self.n {
            if len <= self.seg[i].1 {
                self.seg[i].1 = len;
                for m in &mut self.memh[i + 1..self.n] {
                    *m = None;
                }
                self.n = i + 1;
                return;
            }
            len -= self.seg[i].1;
        }
    }
    /// The piece containing offset `at`: its address at `at` and the bytes left in it.
    pub(crate) fn locate(&self, mut at: usize) -> Option<(*mut u8, usize)> {
        for &(p, l) in &self.seg[..self.n] {
            if at < l {
                return Some(((p + at) as *mut u8, l - at));
            }
            at -= l;
        }
        None
    }
    /// Copies `data` to offset `at` of the pieces (get responses).
    pub(crate) fn scatter(&self, mut at: usize, mut data: &[u8]) {
        for i in 0..self.n {
            let (p, l) = self.seg[i];
            if at >= l {
                at -= l;
                continue;
            }
            let k = (l - at).min(data.len());
            // SAFETY: the piece lies inside a registered region (checked by Iov::new) kept
            // alive by the MemHandle clone in `self.memh[i]`; `at + k <= l`.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (p + at) as *mut u8, k) };
            data = &data[k..];
            at = 0;
            if data.is_empty() {
                return;
            }
        }
    }
}

/// `sendmsg` of an iov list, non-blocking, without SIGPIPE, in calls of at most [`SEND_CHUNK`]
/// bytes until the socket takes less than asked. Gives the bytes sent; `EAGAIN` gives `Ok(0)`.
pub(crate) fn sendv(fd: RawFd, iov: &[libc::iovec]) -> Result<usize> {
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    if total <= SEND_CHUNK {
        return sendmsg_once(fd, iov);
    }
    let mut done = 0;
    let mut part = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 32];
    while done < total {
        let (cnt, asked) = iov_window(iov, done, SEND_CHUNK, &mut part);
        let n = sendmsg_once(fd, &part[..cnt])?;
        done += n;
        if n < asked {
            break;
        }
    }
    Ok(done)
}

/// Fills `out` with the part of `iov` that starts `skip` bytes in and is at most `max` bytes
/// long (fewer if `out` runs out of entries). Gives the entries used and their byte count.
pub(super) fn iov_window(
    iov: &[libc::iovec],
    mut skip: usize,
    max: usize,
    out: &mut [libc::iovec],
) -> (usize, usize) {
    let (mut cnt, mut taken) = (0, 0);
    for v in iov {
        if cnt == out.len() || taken == max {
            break;
        }
        if skip >= v.iov_len {
            skip -= v.iov_len;
            continue;
        }
        let len = (v.iov_len - skip).min(max - taken);
        out[cnt] = libc::iovec {
            iov_base: (v.iov_base as *mut u8).wrapping_add(skip) as *mut libc::c_void,
            iov_len: len,
        };
        skip = 0;
        cnt += 1;
        taken += len;
    }
    (cnt, taken)
}

/// One non-blocking `sendmsg` of `iov`. `EAGAIN` gives `Ok(0)`.
pub(super) fn sendmsg_once(fd: RawFd, iov: &[libc::iovec]) -> Result<usize> {
    // SAFETY: msghdr is plain data; all-zero is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    loop {
        // SAFETY: `msg` points at `iov`, whose entries describe readable memory the caller
        // keeps alive for the call (queue buffer, caller slices, registered regions).
        let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(sock_error("send", e)),
        }
    }
}

/// One non-blocking `send` of `buf`, without SIGPIPE (one buffer: the kernel has no iovec
/// array to copy in, unlike `sendmsg`). `EAGAIN` gives `Ok(0)`.
pub(super) fn send_once(fd: RawFd, buf: &[u8]) -> Result<usize> {
    loop {
        // SAFETY: `buf` is readable memory of `buf.len()` bytes for the call.
        let r = unsafe {
            libc::send(
                fd,
                buf.as_ptr() as *const libc::c_void,
                buf.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(sock_error("send", e)),
        }
    }
}

pub(super) fn sock_error(what: &str, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ECONNRESET) | Some(libc::EPIPE) | Some(libc::ENOTCONN) => {
            Error::ConnectionReset(format!("{what}: {e}"))
        }
        Some(libc::ETIMEDOUT) | Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => {
            Error::PeerFailure(format!("{what}: {e}"))
        }
        _ => Error::io(what, e),
    }
}

/// One non-blocking `recv` into `dst..dst+len`. Gives the count (0 on EAGAIN) and whether
/// the peer closed the connection.
pub(super) fn recv_raw(fd: RawFd, dst: *mut u8, len: usize) -> Result<(usize, bool)> {
    loop {
        // SAFETY: the caller guarantees dst..dst+len is writable memory it owns or that is
        // registered and checked (see `direct_rx`).
        let r = unsafe { libc::recv(fd, dst as *mut libc::c_void, len, libc::MSG_DONTWAIT) };
        if r > 0 {
            return Ok((r as usize, false));
        }
        if r == 0 {
            return Ok((0, true));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok((0, false)),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(sock_error("recv", e)),
        }
    }
}
