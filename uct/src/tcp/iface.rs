//! The tcp interface: the listening socket, the connections, and progress.
//!
//! The interface and its endpoints share one [`Inner`] (`Rc<RefCell<_>>`, single-threaded like
//! a UCX worker). Progress never holds that borrow while it calls the sink, so sink callbacks
//! may call endpoint operations: received bytes are taken out of the connection for the
//! duration of the dispatch (a move of a `Vec`, not a copy or an allocation).

use super::md::RegTable;
use super::tag::{TagRx, TagState};
use super::wire::{
    self, Ack, AtomicMode, AtomicReq, AtomicResp, FlushReq, FrameHeader, GetReq, Hello, HelloAck,
    HelloMode, Kind, Reassembler, RxEvent, WireStatus,
};
use super::{
    congestion_for, sock_buf_size, DevAddr, EpAddr, IfaceAddr, NetIf, TcpEp, TCP_CONGESTION,
    TCP_RCVBUF, TCP_SNDBUF,
};
use crate::caps::{
    AtomicCaps, AtomicOps, EventFlags, IfaceAttr, IfaceFlags, OpLimits, PerfModel, TagLimits,
};
use crate::ep::{CompletionId, EpId, PendingId, TagRecvId};
use crate::iface::{EventSink, Iface};
use crate::md::{Iov, MemHandle};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use slab::Slab;
use socket2::{Domain, Protocol, SockAddr, Socket, TcpKeepalive, Type};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::{Duration, Instant};
use ucs::{Error, Outcome, Result};

/// Bytes of a connection's send queue.
pub(crate) const TX_BUF: usize = 128 * 1024;
/// Bytes of a connection's receive buffer.
pub(crate) const RX_BUF: usize = wire::MIN_RX_BUFFER + 64 * 1024;
/// Largest single `recv` into the receive buffer.
const RX_CHUNK: usize = 64 * 1024;
/// The `recv` into the receive buffer right after a streamed (large) payload: large payloads
/// tend to follow each other, and this bounds what of the next one's payload lands in the
/// buffer (and is copied once more) before `direct_rx` takes over. A stream of small frames
/// gets `RX_CHUNK` again from the next call.
const RX_AFTER_STREAM: usize = 4 * 1024;
/// Largest single `recv` straight into a destination (`direct_rx`). `recv` holds the socket
/// lock while it copies, and on loopback the sender's segments (and the ACKs its window waits
/// for) meanwhile go to the socket's backlog: one `recv` of a whole 1 MiB payload made uct
/// put_bw at 1 MiB 0.74 of UCX's; 64 KiB pieces make it 1.18.
const DIRECT_CHUNK: usize = 64 * 1024;
/// Largest single `sendmsg` (see `sendv`): `sendmsg` holds the socket lock while it copies, and
/// on loopback the receiver's ACKs wait meanwhile. Sending a queue of 1 MiB puts in one call
/// made uct put_bw at 1 MiB swing between 2.9 and 7.9 GB/s; 512 KiB calls give 7.5–8.8 (256 KiB
/// and 1 MiB calls were slower).
const SEND_CHUNK: usize = 512 * 1024;
/// Entries of a connection's send queue.
pub(crate) const MAX_TX_ITEMS: usize = 128;
/// Outstanding requests (get, fetching atomic, put_zcopy, flush) per connection.
pub(crate) const MAX_REQS: usize = 256;
/// Largest iov count of a zcopy operation.
pub(crate) const MAX_IOV: usize = 8;
/// `am.max_short` and `put.max_short`.
pub(crate) const MAX_SHORT: usize = 1024;
/// `max_bcopy` of AM, put and get.
pub(crate) const MAX_BCOPY: usize = 8192;
/// Largest user header of `am_zcopy`.
pub(crate) const AM_MAX_HDR: usize = 128;
/// Largest frame the send path copies: header, largest sub-header, bcopy payload.
pub(crate) const MAX_COPY_FRAME: usize = FrameHeader::LEN + AtomicReq::LEN + MAX_BCOPY;
/// Room a response needs in the send queue (header + largest response sub-header).
const RESP_ROOM: usize = FrameHeader::LEN + max(AtomicResp::LEN, GetReq::LEN);

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}
/// Send-queue bytes operations leave free for responses.
const RESERVE_BYTES: usize = 4096;
/// Send-queue entries operations leave free for responses.
const RESERVE_ITEMS: usize = 8;
/// The listening socket's epoll token.
const LISTENER_TOKEN: u64 = u64::MAX;
/// Epoll token of the timer that ends a pause of the listening socket.
const ACCEPT_TIMER_TOKEN: u64 = u64::MAX - 1;
/// Progress calls between two looks at the listening socket (when nothing else needs epoll).
const EPOLL_EVERY: u32 = 16;
/// Up to this many connections, progress reads each directly instead of asking epoll.
const DIRECT_MAX: usize = 4;
/// Empty direct polls of a connection after which it waits for epoll (see `Conn::rx_gated`):
/// a ping-pong waits through a few dozen, a peer that went quiet or a slow bulk sender
/// through many more.
const GATE_AFTER: u32 = 256;

/// A deferred completion.
pub(crate) type Done = (CompletionId, Result<u64>);

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

/// One entry of a send queue.
pub(crate) enum TxItem {
    /// Bytes in the queue's buffer.
    Copy(usize),
    /// Caller memory (am/put zcopy), with the completion to report when the kernel took it.
    Zcopy(Segs, Option<CompletionId>),
    /// This process's registered memory (a get response), re-checked before every send.
    Local {
        key: u64,
        addr: u64,
        len: usize,
        sent: usize,
    },
}

impl TxItem {
    fn remaining(&self) -> usize {
        match self {
            TxItem::Copy(n) => *n,
            TxItem::Zcopy(s, _) => s.remaining(),
            TxItem::Local { len, sent, .. } => len - sent,
        }
    }
}

/// A connection's send queue: copied bytes and zero-copy pieces, in order.
pub(crate) struct TxQueue {
    buf: Box<[u8]>,
    head: usize,
    tail: usize,
    items: VecDeque<TxItem>,
}

impl TxQueue {
    fn new() -> Self {
        TxQueue {
            buf: vec![0u8; TX_BUF].into_boxed_slice(),
            head: 0,
            tail: 0,
            items: VecDeque::with_capacity(MAX_TX_ITEMS),
        }
    }
    /// True when nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// True when `bytes` copied bytes and `items` entries fit.
    /// True when an operation of `bytes` copied bytes and `items` entries fits, leaving the
    /// reserve that responses to the peer's requests may use.
    pub(crate) fn fits(&self, bytes: usize, items: usize) -> bool {
        self.items.len() + items + RESERVE_ITEMS <= MAX_TX_ITEMS
            && TX_BUF - (self.tail - self.head) >= bytes + RESERVE_BYTES
    }
    /// True when one response fits (responses may use the reserve; operations may not, so
    /// a queue full of our own requests never stops us from answering the peer's, and the
    /// two sides cannot block each other).
    pub(crate) fn fits_response(&self) -> bool {
        self.items.len() + 2 <= MAX_TX_ITEMS && TX_BUF - (self.tail - self.head) >= RESP_ROOM
    }
    fn make_room(&mut self, n: usize) {
        if TX_BUF - self.tail < n {
            self.buf.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
    }
    /// Space for `n` bytes at the tail (the caller checked `fits`).
    pub(crate) fn reserve(&mut self, n: usize) -> &mut [u8] {
        self.make_room(n);
        &mut self.buf[self.tail..self.tail + n]
    }
    /// Queues `n` bytes written into the reserved space.
    pub(crate) fn commit(&mut self, n: usize) {
        self.tail += n;
        match self.items.back_mut() {
            Some(TxItem::Copy(k)) => *k += n,
            _ => self.items.push_back(TxItem::Copy(n)),
        }
    }
    /// Queues the bytes of `pieces` after the first `skip`.
    pub(crate) fn push_pieces(&mut self, pieces: &[&[u8]], mut skip: usize) {
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        if skip >= total {
            return;
        }
        let n = total - skip;
        let dst = self.reserve(n);
        let mut at = 0;
        for p in pieces {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            let src = &p[skip..];
            skip = 0;
            dst[at..at + src.len()].copy_from_slice(src);
            at += src.len();
        }
        self.commit(n);
    }
    /// Puts `b` before everything queued (a connection's first frame, ahead of the frames an
    /// endpoint queued while the connection was being set up; the caller checked that nothing
    /// was sent yet and that `b` fits, which the operations' reserve guarantees).
    pub(crate) fn push_front(&mut self, b: &[u8]) {
        let n = b.len();
        if self.head < n {
            self.buf.copy_within(self.head..self.tail, n);
            self.tail = self.tail - self.head + n;
            self.head = n;
        }
        self.head -= n;
        self.buf[self.head..self.head + n].copy_from_slice(b);
        self.items.push_front(TxItem::Copy(n));
    }
    /// Queues a zero-copy entry.
    pub(crate) fn push_item(&mut self, item: TxItem) {
        self.items.push_back(item);
    }

    /// Sends what the socket takes. Completed zcopy entries go to `done`. Gives Ok(true) when
    /// the queue is empty afterwards.
    pub(crate) fn progress(&mut self, fd: RawFd, done: &mut VecDeque<Done>) -> Result<bool> {
        loop {
            let mut iov = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; 16];
            let mut cnt = 0;
            let mut boff = self.head;
            for item in self.items.iter() {
                if cnt == iov.len() {
                    break;
                }
                match item {
                    TxItem::Copy(n) => {
                        iov[cnt] = libc::iovec {
                            iov_base: self.buf[boff..].as_ptr() as *mut libc::c_void,
                            iov_len: *n,
                        };
                        boff += n;
                        cnt += 1;
                    }
                    TxItem::Zcopy(s, _) => s.fill(&mut iov, &mut cnt),
                    TxItem::Local {
                        key,
                        addr,
                        len,
                        sent,
                    } => {
                        let left = len - sent;
                        if left > 0 {
                            let p = RegTable::global()
                                .lookup(*key, addr + *sent as u64, left as u64)
                                .map_err(|_| {
                                    Error::RemoteAccess(format!(
                                        "memory at {addr:#x} was deregistered while a get \
                                         response from it was being sent"
                                    ))
                                })?;
                            iov[cnt] = libc::iovec {
                                iov_base: p as *mut libc::c_void,
                                iov_len: left,
                            };
                            cnt += 1;
                        }
                    }
                }
            }
            let n = if cnt == 0 { 0 } else { sendv(fd, &iov[..cnt])? };
            let wanted: usize = iov[..cnt].iter().map(|v| v.iov_len).sum();
            self.consume(n, done);
            if self.items.is_empty() {
                return Ok(true);
            }
            if n < wanted || n == 0 {
                return Ok(false);
            }
        }
    }

    fn consume(&mut self, mut n: usize, done: &mut VecDeque<Done>) {
        while let Some(front) = self.items.front_mut() {
            let rem = front.remaining();
            if rem == 0 {
                if let Some(TxItem::Zcopy(_, Some(comp))) = self.items.pop_front() {
                    done.push_back((comp, Ok(0)));
                }
                continue;
            }
            if n == 0 {
                break;
            }
            let k = n.min(rem);
            n -= k;
            match front {
                TxItem::Copy(c) => {
                    *c -= k;
                    self.head += k;
                }
                TxItem::Zcopy(s, _) => s.advance(k),
                TxItem::Local { sent, .. } => *sent += k,
            }
        }
        if self.items.is_empty() {
            self.head = 0;
            self.tail = 0;
        }
    }

    fn fail(&mut self, err: &Error, done: &mut VecDeque<Done>) {
        for item in self.items.drain(..) {
            if let TxItem::Zcopy(_, Some(comp)) = item {
                done.push_back((comp, Err(err.clone())));
            }
        }
        self.head = 0;
        self.tail = 0;
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
fn sendmsg_once(fd: RawFd, iov: &[libc::iovec]) -> Result<usize> {
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

fn sock_error(what: &str, e: io::Error) -> Error {
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

/// A connection's receive buffer and decoder.
#[derive(Default)]
pub(crate) struct RxBuf {
    buf: Vec<u8>,
    head: usize,
    tail: usize,
    reasm: Reassembler,
    eof: bool,
    /// `direct_rx` just found the socket empty (no second `recv` right after).
    drained: bool,
    /// A streamed payload was just received: the next `recv` is an [`RX_AFTER_STREAM`] one.
    after_stream: bool,
    /// The last `recv` was a short one and filled its whole length.
    small_full: bool,
}

impl RxBuf {
    fn new() -> Self {
        RxBuf {
            buf: vec![0u8; RX_BUF],
            ..Default::default()
        }
    }
    fn has_data(&self) -> bool {
        self.head < self.tail
    }
    /// One non-blocking `recv`. Gives the byte count (0 on EAGAIN); sets `eof`.
    fn recv(&mut self, fd: RawFd) -> Result<usize> {
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

/// One non-blocking `recv` into `dst..dst+len`. Gives the count (0 on EAGAIN) and whether
/// the peer closed the connection.
fn recv_raw(fd: RawFd, dst: *mut u8, len: usize) -> Result<(usize, bool)> {
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

/// An outstanding request waiting for the peer's response.
pub(crate) enum Req {
    /// put_zcopy waiting for its ack.
    PutZcopy { comp: CompletionId },
    /// get_zcopy: the destination.
    GetZcopy { segs: Segs, comp: CompletionId },
    /// get_bcopy.
    GetBcopy { len: usize, comp: CompletionId },
    /// Fetching atomic or cswap.
    Atomic { comp: CompletionId },
    /// Sender of `tag_rndv_zcopy`: the data, until the receiver's `TagGet` (or a cancel).
    TagRndv { segs: Segs, comp: CompletionId },
    /// Receiver of a matched tagged rendezvous: the posted buffer the `TagGet` fills.
    TagGet {
        segs: Segs,
        ctx: TagRecvId,
        tag: u64,
        /// Bytes asked for (the posted capacity, or less).
        want: usize,
        /// The message's real length.
        length: usize,
    },
    /// Flush of an endpoint (`comp`) or part of an interface flush.
    Flush {
        comp: Option<CompletionId>,
        iface_flush: Option<usize>,
        put_seq: u64,
    },
}

/// Connection states.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ConnState {
    /// `ep_create`d, `connect_to_ep` not called yet, peer not arrived.
    Idle,
    /// Passive side of connect-to-ep: waiting for the peer's connection.
    Waiting,
    /// Non-blocking connect in flight.
    Connecting,
    /// Connect-to-iface dial: connected, the hello is (being) sent, and operations queue
    /// until the acceptor's `HelloAck` (see `wire::Hello` for simultaneous connects).
    Handshake,
    /// Up.
    Connected,
    /// Closed, with the reason.
    Failed(Error),
}

/// One TCP connection (or a connect-to-ep endpoint waiting for one).
pub(crate) struct Conn {
    pub(crate) sock: Option<Socket>,
    pub(crate) state: ConnState,
    /// The endpoint owning it (None for accepted connections).
    pub(crate) ep: Option<EpId>,
    pub(crate) ep_alive: bool,
    pub(crate) conn_id: u64,
    pub(crate) peer_conn_id: u64,
    pub(crate) expect_hello: bool,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) tx: TxQueue,
    pub(crate) rx: RxBuf,
    pub(crate) reqs: Slab<Req>,
    pub(crate) pending: VecDeque<PendingId>,
    pub(crate) dispatching: bool,
    pub(crate) put_seq: u64,
    pub(crate) acked_seq: u64,
    pub(crate) deferred_err: Option<Error>,
    pub(crate) epoll_mask: EpollFlags,
    pub(crate) rx_paused: bool,
    /// epoll reported the socket readable (or closed) since the last `recv`.
    pub(crate) readable: bool,
    /// The peer's interface address (from its hello, or the address we dialed): an endpoint
    /// to that interface reuses this connection when no endpoint owns it.
    pub(crate) peer_iface: Option<IfaceAddr>,
    /// Tag offload: where the tagged eager message being received goes.
    pub(crate) tag_rx: TagRx,
    /// Tag offload: staging for a large unexpected tagged eager message (kept for reuse).
    pub(crate) tag_stage: Vec<u8>,
    /// Connect-to-iface: the connection sequence number (ours if `dialed`, else the
    /// connector's from its hello).
    pub(crate) seq: u64,
    /// A connect-to-iface connection this side dialed.
    pub(crate) dialed: bool,
    /// An accepted connection that lost a simultaneous connect: never acknowledged, never
    /// used, closed when the peer closes it.
    pub(crate) rejected: bool,
    /// The hello of a connect-to-iface dial, sent before anything else.
    pub(crate) ctl: [u8; FrameHeader::LEN + Hello::LEN],
    /// Bytes of `ctl` to send, and sent so far.
    pub(crate) ctl_len: usize,
    pub(crate) ctl_sent: usize,
    /// The socket refused bytes: the send queue waits for epoll to report it writable
    /// instead of retrying `sendmsg` at every call (each retry takes the socket lock the
    /// peer's incoming data and ACKs need; on loopback that halves large-message bandwidth).
    pub(crate) wait_out: bool,
    /// The next `recv` waits for epoll's "readable" instead of polling the socket at every
    /// call (a `recv` takes the socket lock the sender's incoming segments need;
    /// `epoll_wait` does not). Set in the middle of a large payload when the socket had no
    /// more bytes, and after [`GATE_AFTER`] empty polls in a row between frames; a burst
    /// of small messages (a ping-pong) is polled directly, which is what its latency wants.
    pub(crate) rx_gated: bool,
    /// Direct polls in a row that found nothing.
    pub(crate) empty_polls: u32,
}

impl Conn {
    fn new(state: ConnState, ep: Option<EpId>) -> Self {
        Conn {
            sock: None,
            state,
            ep,
            ep_alive: ep.is_some(),
            conn_id: 0,
            peer_conn_id: 0,
            expect_hello: false,
            peer: None,
            tx: TxQueue::new(),
            rx: RxBuf::new(),
            reqs: Slab::with_capacity(MAX_REQS + super::tag::MAX_POSTED),
            pending: VecDeque::with_capacity(64),
            dispatching: false,
            put_seq: 0,
            acked_seq: 0,
            deferred_err: None,
            epoll_mask: EpollFlags::empty(),
            rx_paused: false,
            readable: false,
            peer_iface: None,
            tag_rx: TagRx::Idle,
            tag_stage: Vec::new(),
            seq: 0,
            dialed: false,
            rejected: false,
            ctl: [0; FrameHeader::LEN + Hello::LEN],
            ctl_len: 0,
            ctl_sent: 0,
            wait_out: false,
            rx_gated: false,
            empty_polls: 0,
        }
    }
    pub(crate) fn fd(&self) -> RawFd {
        self.sock.as_ref().map_or(-1, |s| s.as_raw_fd())
    }
    pub(crate) fn is_connected(&self) -> bool {
        self.state == ConnState::Connected
    }
    /// Nothing queued or outstanding.
    pub(crate) fn is_idle(&self) -> bool {
        self.tx.is_empty()
            && self.reqs.is_empty()
            && self.put_seq == self.acked_seq
            && self.deferred_err.is_none()
    }
    /// Err if the connection failed.
    pub(crate) fn check_usable(&self) -> Result<()> {
        match &self.state {
            ConnState::Failed(e) => Err(e.clone()),
            ConnState::Idle => Err(Error::InvalidParam(
                "tcp endpoint is not connected: call connect_to_ep first".into(),
            )),
            _ => Ok(()),
        }
    }
    /// True when any operation would find room right now.
    pub(crate) fn has_room(&self) -> bool {
        self.tx.fits(MAX_COPY_FRAME, 2) && self.reqs.len() < MAX_REQS
    }
}

/// Socket options from the environment.
#[derive(Debug, Clone)]
pub(crate) struct SockCfg {
    pub(crate) sndbuf: Option<usize>,
    pub(crate) rcvbuf: Option<usize>,
    /// `TCP_CONGESTION` to set (`RUCX_TCP_CONGESTION`), or `None` for the system's.
    pub(crate) congestion: Option<String>,
}

/// Sets the socket's congestion control algorithm.
fn set_congestion(s: &Socket, name: &str) -> Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the option value is `name`'s bytes with their length; the kernel copies them.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr() as *const libc::c_void,
            name.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(Error::io(
            format!("TCP_CONGESTION {name}"),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

impl SockCfg {
    fn from_env(dev: &NetIf) -> Result<Self> {
        let mut cfg = SockCfg {
            sndbuf: sock_buf_size(&TCP_SNDBUF)?,
            rcvbuf: sock_buf_size(&TCP_RCVBUF)?,
            congestion: congestion_for(&TCP_CONGESTION, dev)?,
        };
        if let Some(cc) = cfg.congestion.clone() {
            // Checked once here, on a probe socket: a name the kernel does not allow is an
            // error for an explicit choice and means "keep the system's" for auto.
            let probe = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
                .map_err(|e| Error::io("creating a tcp socket", e))?;
            if let Err(e) = set_congestion(&probe, &cc) {
                if TCP_CONGESTION.raw().trim().eq_ignore_ascii_case("auto") {
                    tracing::debug!(
                        "tcp on {}: keeping the system's congestion control: {e}",
                        dev.name
                    );
                    cfg.congestion = None;
                } else {
                    let allowed = std::fs::read_to_string(
                        "/proc/sys/net/ipv4/tcp_allowed_congestion_control",
                    )
                    .unwrap_or_default();
                    return Err(Error::Config(format!(
                        "{}={cc}: {e}; allowed here: {}, or auto or system",
                        TCP_CONGESTION.env_name(),
                        allowed.trim()
                    )));
                }
            }
        }
        Ok(cfg)
    }
    fn apply(&self, s: &Socket) -> Result<()> {
        let ctx = |what: &'static str| move |e: io::Error| Error::io(what, e);
        s.set_nonblocking(true).map_err(ctx("O_NONBLOCK"))?;
        s.set_nodelay(true).map_err(ctx("TCP_NODELAY"))?;
        if let Some(cc) = &self.congestion {
            set_congestion(s, cc)?;
        }
        if let Some(n) = self.sndbuf {
            s.set_send_buffer_size(n).map_err(ctx("SO_SNDBUF"))?;
        }
        if let Some(n) = self.rcvbuf {
            s.set_recv_buffer_size(n).map_err(ctx("SO_RCVBUF"))?;
        }
        // A peer host that vanishes without a FIN or RST is detected in about 16 s.
        let ka = TcpKeepalive::new()
            .with_time(Duration::from_secs(10))
            .with_interval(Duration::from_secs(2))
            .with_retries(3);
        s.set_tcp_keepalive(&ka).map_err(ctx("SO_KEEPALIVE"))?;
        Ok(())
    }
}

/// State shared by the interface and its endpoints.
pub(crate) struct Inner {
    pub(crate) conns: Slab<Conn>,
    pub(crate) active: Vec<usize>,
    pub(crate) epoll: Epoll,
    pub(crate) listener: Option<Socket>,
    pub(crate) done: VecDeque<Done>,
    pub(crate) errors: VecDeque<(EpId, Error)>,
    pub(crate) by_conn_id: HashMap<u64, usize>,
    pub(crate) iface_flushes: Slab<(CompletionId, usize, Option<Error>)>,
    pub(crate) next_ep: u32,
    pub(crate) next_conn_id: u64,
    pub(crate) sock_cfg: SockCfg,
    pub(crate) connecting: usize,
    pub(crate) local: IfaceAddr,
    pub(crate) cleanup: bool,
    pub(crate) closed: bool,
    pub(crate) force_epoll: bool,
    /// Tag offload: posted receives and their completions.
    pub(crate) tag: TagState,
    /// Connect-to-iface: the sequence number the next endpoint to each peer interface gets.
    pub(crate) next_seq: HashMap<IfaceAddr, u64>,
    /// Connections with `wait_out` set (progress asks epoll while there are any).
    pub(crate) waiting_out: usize,
    /// Connections with `rx_gated` set (progress asks epoll while there are any).
    pub(crate) gated: usize,
    /// At the descriptor limit: the listening socket is out of the epoll set until this time.
    pub(crate) accept_paused_until: Option<Instant>,
    /// The pause the next descriptor-limit failure gets (doubles up to `ACCEPT_PAUSE_MAX`,
    /// back to `ACCEPT_PAUSE_MIN` after an accept succeeds).
    pub(crate) accept_pause: Duration,
    /// Accept failures are logged at most once a second.
    pub(crate) accept_log: ucs::limits::RateLimit,
    /// A timerfd in the epoll set that fires when a pause ends, so a caller sleeping on the
    /// interface's event fd wakes to resume accepting (`None` if it could not be created:
    /// then the pause ends at the first progress after it).
    pub(crate) accept_timer: Option<std::os::fd::OwnedFd>,
}

/// A non-blocking monotonic timerfd, or `None`.
fn new_timer() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    // SAFETY: `fd` is a new descriptor this function owns.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// First pause of the listening socket after `accept` hits the descriptor limit.
const ACCEPT_PAUSE_MIN: Duration = Duration::from_millis(100);
/// Longest pause of the listening socket after repeated descriptor-limit failures.
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

impl Inner {
    fn set_mask(&mut self, key: usize, mask: EpollFlags) {
        let c = &mut self.conns[key];
        if c.epoll_mask == mask {
            return;
        }
        if let Some(s) = c.sock.as_ref() {
            let mut ev = EpollEvent::new(mask, key as u64);
            let r = if c.epoll_mask.is_empty() {
                self.epoll.add(s.as_fd(), ev)
            } else {
                self.epoll.modify(s.as_fd(), &mut ev)
            };
            if let Err(e) = r {
                tracing::warn!("epoll_ctl on a tcp connection failed: {e}");
            }
            c.epoll_mask = mask;
        }
    }

    /// Sends what the socket takes of `key`'s send queue, unless the queue waits for
    /// writability; when the socket refuses bytes, the queue waits (see `Conn::wait_out`).
    #[inline]
    pub(crate) fn flush_tx(&mut self, key: usize) -> Result<()> {
        let c = &mut self.conns[key];
        if c.tx.is_empty() || c.wait_out || !c.is_connected() {
            return Ok(());
        }
        let fd = c.fd();
        if c.tx.progress(fd, &mut self.done)? {
            if c.epoll_mask.contains(EpollFlags::EPOLLOUT) {
                self.set_mask(key, EpollFlags::EPOLLIN);
            }
        } else {
            self.wait_writable(key);
        }
        Ok(())
    }

    /// The socket of `key` took less than offered: wait for epoll to report it writable.
    pub(crate) fn wait_writable(&mut self, key: usize) {
        let c = &mut self.conns[key];
        if !c.wait_out {
            c.wait_out = true;
            self.waiting_out += 1;
        }
        self.set_mask(key, EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT);
    }

    fn clear_wait_out(&mut self, key: usize) {
        let c = &mut self.conns[key];
        if c.wait_out {
            c.wait_out = false;
            self.waiting_out -= 1;
        }
        if c.rx_gated {
            c.rx_gated = false;
            self.gated -= 1;
        }
    }

    /// Closes a connection with `err`: completes everything outstanding with it and reports
    /// an endpoint error (once). `quiet` logs at debug level (a clean close by the peer of an
    /// accepted connection).
    pub(crate) fn fail(&mut self, key: usize, err: Error, quiet: bool) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if matches!(c.state, ConnState::Failed(_)) {
            return;
        }
        if c.state == ConnState::Connecting {
            self.connecting -= 1;
        }
        if c.wait_out {
            c.wait_out = false;
            self.waiting_out -= 1;
        }
        if c.rx_gated {
            c.rx_gated = false;
            self.gated -= 1;
        }
        if let Some(s) = c.sock.take() {
            if !c.epoll_mask.is_empty() {
                let _ = self.epoll.delete(s.as_fd());
            }
            c.epoll_mask = EpollFlags::empty();
        }
        c.tx.fail(&err, &mut self.done);
        for req in c.reqs.drain() {
            match req {
                Req::PutZcopy { comp }
                | Req::GetZcopy { comp, .. }
                | Req::GetBcopy { comp, .. }
                | Req::Atomic { comp }
                | Req::TagRndv { comp, .. } => self.done.push_back((comp, Err(err.clone()))),
                Req::TagGet { ctx, tag, .. } => {
                    self.tag.done.push_back((ctx, tag, 0, 0, Err(err.clone())))
                }
                Req::Flush {
                    comp, iface_flush, ..
                } => {
                    if let Some(comp) = comp {
                        self.done.push_back((comp, Err(err.clone())));
                    }
                    if let Some(i) = iface_flush {
                        iface_flush_part_done(
                            &mut self.iface_flushes,
                            &mut self.done,
                            i,
                            Some(err.clone()),
                        );
                    }
                }
            }
        }
        if let TagRx::Posted { p, hdr, .. } = std::mem::take(&mut c.tag_rx) {
            self.tag
                .done
                .push_back((p.ctx, hdr.tag, hdr.imm, 0, Err(err.clone())));
        }
        let peer = c.peer.map(|p| p.to_string()).unwrap_or_default();
        match c.ep {
            Some(ep) if c.ep_alive => {
                tracing::debug!(ep = ep.0, peer, "tcp endpoint failed: {err}");
                self.errors.push_back((ep, err.clone()));
            }
            _ if quiet => tracing::debug!(peer, "tcp connection closed: {err}"),
            _ => tracing::warn!(peer, "closing tcp connection: {err}"),
        }
        let was_dial = c.dialed && !matches!(c.state, ConnState::Connected);
        let (peer_iface, seq) = (c.peer_iface, c.seq);
        c.state = ConnState::Failed(err);
        self.cleanup = true;
        if was_dial {
            // A dial that won a simultaneous connect failed before it was acknowledged: the
            // peer's endpoint waits on the connection we left unanswered; closing it tells
            // the peer (an endpoint error there instead of a wait).
            let losers: Vec<usize> = self
                .active
                .iter()
                .copied()
                .filter(|&k| {
                    let o = &self.conns[k];
                    o.rejected && o.peer_iface == peer_iface && o.seq == seq
                })
                .collect();
            for k in losers {
                self.fail(
                    k,
                    Error::ConnectionReset(
                        "the connection that won a simultaneous connect failed".into(),
                    ),
                    true,
                );
            }
        }
    }

    /// Sends what is left of the connection's hello.
    fn send_ctl(&mut self, key: usize) -> Result<()> {
        let c = &mut self.conns[key];
        if c.ctl_sent >= c.ctl_len {
            return Ok(());
        }
        let rest = &c.ctl[c.ctl_sent..c.ctl_len];
        let iov = [libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        }];
        c.ctl_sent += sendv(c.fd(), &iov)?;
        let mask = if c.ctl_sent < c.ctl_len {
            EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT
        } else {
            EpollFlags::EPOLLIN
        };
        self.set_mask(key, mask);
        Ok(())
    }

    /// The state a dial enters once its TCP connect completed.
    fn connected_state(&self, key: usize) -> ConnState {
        if self.conns[key].dialed {
            ConnState::Handshake
        } else {
            ConnState::Connected
        }
    }

    fn remove(&mut self, key: usize) {
        self.clear_wait_out(key);
        let c = self.conns.remove(key);
        if let Some(s) = c.sock.as_ref() {
            if !c.epoll_mask.is_empty() {
                let _ = self.epoll.delete(s.as_fd());
            }
        }
        if c.state == ConnState::Connecting {
            self.connecting -= 1;
        }
        if c.conn_id != 0 {
            self.by_conn_id.remove(&c.conn_id);
        }
        self.active.retain(|&k| k != key);
    }

    /// Adds a connection owned by a new endpoint.
    pub(crate) fn add_conn(&mut self, state: ConnState) -> (usize, EpId) {
        let id = EpId(self.next_ep);
        self.next_ep = self.next_ep.wrapping_add(1);
        let key = self.conns.insert(Conn::new(state, Some(id)));
        self.active.push(key);
        (key, id)
    }

    /// Starts a non-blocking connect of `key` to `to`, queueing `hello` first.
    pub(crate) fn dial(&mut self, key: usize, to: SocketAddrV4, hello: Hello) -> Result<()> {
        let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| Error::io("creating a tcp socket", e))?;
        self.sock_cfg.apply(&sock)?;
        let connected = match sock.connect(&SockAddr::from(to)) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => false,
            Err(e) => {
                return Err(Error::Unreachable(format!(
                    "tcp connect to {to} failed: {e}"
                )))
            }
        };
        let c = &mut self.conns[key];
        let mut hb = [0u8; FrameHeader::LEN + Hello::LEN];
        FrameHeader::new(Kind::Hello, 0, 0).encode(&mut hb);
        hello.encode(&mut hb[FrameHeader::LEN..]);
        if hello.mode == HelloMode::Iface {
            // The hello goes first; operations queue behind it until the HelloAck.
            c.ctl = hb;
            c.ctl_len = hb.len();
            c.ctl_sent = 0;
            c.dialed = true;
            c.seq = hello.src_conn_id;
            c.peer_iface = Some(IfaceAddr {
                ip: *to.ip(),
                port: to.port(),
            });
        } else {
            c.tx.push_pieces(&[&hb], 0);
        }
        c.sock = Some(sock);
        c.peer = Some(SocketAddr::V4(to));
        if connected {
            let state = self.connected_state(key);
            self.conns[key].state = state;
            self.set_mask(key, EpollFlags::EPOLLIN);
            self.send_ctl(key)?;
        } else {
            c.state = ConnState::Connecting;
            self.connecting += 1;
            self.set_mask(key, EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT);
        }
        Ok(())
    }

    /// Finishes a connect that epoll reported.
    fn finish_connect(&mut self, key: usize) {
        let c = &mut self.conns[key];
        let res = c.sock.as_ref().map(|s| s.take_error());
        match res {
            Some(Ok(None)) => {
                self.connecting -= 1;
                let state = self.connected_state(key);
                let c = &mut self.conns[key];
                c.state = state;
                let mask = EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT;
                c.epoll_mask = mask;
                let out = !c.tx.is_empty() && c.state == ConnState::Connected;
                self.set_mask(key, if out { mask } else { EpollFlags::EPOLLIN });
                if let Err(e) = self.send_ctl(key) {
                    self.fail(key, e, false);
                }
            }
            Some(Ok(Some(e))) | Some(Err(e)) => {
                let peer = c.peer.map(|p| p.to_string()).unwrap_or_default();
                self.fail(
                    key,
                    Error::Unreachable(format!("tcp connect to {peer} failed: {e}")),
                    false,
                );
            }
            None => {}
        }
    }

    /// Sets the listening socket's epoll interest: readable, or nothing (paused).
    fn arm_listener(&mut self, on: bool) {
        let Some(l) = self.listener.as_ref() else {
            return;
        };
        let flags = if on {
            EpollFlags::EPOLLIN
        } else {
            EpollFlags::empty()
        };
        let mut ev = EpollEvent::new(flags, LISTENER_TOKEN);
        if let Err(e) = self.epoll.modify(l.as_fd(), &mut ev) {
            tracing::warn!("epoll_ctl on the tcp listening socket failed: {e}");
        }
    }

    /// Puts the listening socket back in the epoll set once its pause is over; true when it
    /// was resumed (the caller accepts what waited meanwhile).
    fn resume_accept(&mut self, now: Instant) -> bool {
        match self.accept_paused_until {
            Some(t) if now >= t => {
                self.accept_paused_until = None;
                self.arm_listener(true);
                true
            }
            _ => false,
        }
    }

    /// `accept` failed: at the descriptor limit the listening socket leaves the epoll set for
    /// a pause (level-triggered readiness would otherwise report it again at once, forever),
    /// and the waiting client stays in the kernel's backlog until descriptors free up. Logged
    /// at most once a second, with the limit.
    fn accept_failed(&mut self, e: &io::Error) {
        let now = Instant::now();
        let fd_limit = ucs::limits::is_fd_limit(e);
        if let Some(held) = self.accept_log.allow(now) {
            let more = if held > 0 {
                format!(" ({held} similar failures not logged)")
            } else {
                String::new()
            };
            let then = if fd_limit {
                format!(
                    "; new connections wait in the backlog, retrying in {} ms",
                    self.accept_pause.as_millis()
                )
            } else {
                String::new()
            };
            tracing::warn!(
                "tcp {}:{}: cannot accept a connection: {}{then}{more}",
                self.local.ip,
                self.local.port,
                ucs::limits::explain_io(e)
            );
        }
        if fd_limit {
            self.arm_listener(false);
            self.accept_paused_until = Some(now + self.accept_pause);
            if let Some(t) = self.accept_timer.as_ref() {
                let spec = libc::itimerspec {
                    it_interval: libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    },
                    it_value: libc::timespec {
                        tv_sec: self.accept_pause.as_secs() as libc::time_t,
                        tv_nsec: self.accept_pause.subsec_nanos() as libc::c_long,
                    },
                };
                // SAFETY: `t` is our timerfd; `spec` is a valid itimerspec; no old value asked.
                unsafe { libc::timerfd_settime(t.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
            }
            self.accept_pause = (self.accept_pause * 2).min(ACCEPT_PAUSE_MAX);
        }
    }

    fn accept_all(&mut self) {
        if self.accept_paused_until.is_some() {
            return;
        }
        loop {
            let Some(l) = self.listener.as_ref() else {
                return;
            };
            let (sock, addr) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.accept_failed(&e);
                    return;
                }
            };
            self.accept_pause = ACCEPT_PAUSE_MIN;
            if let Err(e) = self.sock_cfg.apply(&sock) {
                tracing::warn!("configuring an accepted tcp connection failed: {e}");
                continue;
            }
            let mut c = Conn::new(ConnState::Connected, None);
            c.expect_hello = true;
            c.peer = addr.as_socket();
            c.sock = Some(sock);
            let key = self.conns.insert(c);
            self.active.push(key);
            self.set_mask(key, EpollFlags::EPOLLIN);
        }
    }

    /// Queues a response frame on `key` (room was checked before the request was decoded).
    fn respond(&mut self, key: usize, kind: Kind, sub: &[u8], local: Option<TxItem>) {
        let payload = local.as_ref().map_or(0, |l| l.remaining());
        let c = &mut self.conns[key];
        let hdr = FrameHeader::new(kind, 0, payload).to_bytes();
        c.tx.push_pieces(&[&hdr, sub], 0);
        if let Some(l) = local {
            c.tx.push_item(l);
        }
    }
}

fn iface_flush_part_done(
    flushes: &mut Slab<(CompletionId, usize, Option<Error>)>,
    done: &mut VecDeque<Done>,
    i: usize,
    err: Option<Error>,
) {
    let Some(f) = flushes.get_mut(i) else {
        return;
    };
    f.1 -= 1;
    if f.2.is_none() {
        f.2 = err;
    }
    if f.1 == 0 {
        let (comp, _, err) = flushes.remove(i);
        done.push_back((comp, err.map_or(Ok(0), Err)));
    }
}

/// What the dispatch loop does after an event.
enum Flow {
    Continue,
    /// The remaining bytes belong to another connection (connect-to-ep attach).
    Redirect(usize),
    Fail(Error),
}

/// The tcp interface.
pub struct TcpIface {
    pub(crate) inner: Rc<RefCell<Inner>>,
    attr: IfaceAttr,
    dev: NetIf,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    netns: u64,
    tick: u32,
    events: Box<[EpollEvent; 64]>,
}

impl std::fmt::Debug for TcpIface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TcpIface({} {})",
            self.dev.name,
            self.inner.borrow().local.socket_addr()
        )
    }
}

fn make_attr(dev: &NetIf) -> IfaceAttr {
    let lim = |short, bcopy, zcopy, hdr| OpLimits {
        max_short: short,
        max_bcopy: bcopy,
        min_zcopy: 0,
        max_zcopy: zcopy,
        max_iov: MAX_IOV,
        max_hdr: hdr,
    };
    // Loopback numbers are what tests/tests/tcp_bench.rs measures here (3.5 us one-way for an
    // 8-byte am_short, 0.5-2 GB/s for 1 MiB puts on a loaded 2-core machine).
    let bw = if dev.loopback {
        1.5e9
    } else {
        std::fs::read_to_string(format!("/sys/class/net/{}/speed", dev.name))
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|&mbit| mbit > 0.0)
            .map_or(1.25e9, |mbit| mbit * 1e6 / 8.0)
    };
    IfaceAttr {
        flags: IfaceFlags::AM_SHORT
            | IfaceFlags::AM_BCOPY
            | IfaceFlags::AM_ZCOPY
            | IfaceFlags::PUT_SHORT
            | IfaceFlags::PUT_BCOPY
            | IfaceFlags::PUT_ZCOPY
            | IfaceFlags::GET_BCOPY
            | IfaceFlags::GET_ZCOPY
            | IfaceFlags::ATOMIC_CPU
            | IfaceFlags::PENDING
            | IfaceFlags::CONNECT_TO_IFACE
            | IfaceFlags::CONNECT_TO_EP
            | IfaceFlags::ERRHANDLE_PEER_FAILURE
            | IfaceFlags::TAG_EAGER_SHORT
            | IfaceFlags::TAG_EAGER_BCOPY
            | IfaceFlags::TAG_EAGER_ZCOPY
            | IfaceFlags::TAG_RNDV_ZCOPY,
        event_flags: EventFlags::FD | EventFlags::RECV | EventFlags::SEND_COMP,
        atomics: AtomicCaps {
            op32: AtomicOps::POST_ALL,
            fop32: AtomicOps::FETCH_ALL,
            op64: AtomicOps::POST_ALL,
            fop64: AtomicOps::FETCH_ALL,
        },
        am: lim(
            MAX_SHORT,
            MAX_BCOPY,
            wire::MAX_AM_BODY - AM_MAX_HDR,
            AM_MAX_HDR,
        ),
        put: lim(MAX_SHORT, MAX_BCOPY, wire::MAX_RMA, 0),
        get: lim(0, MAX_BCOPY, wire::MAX_RMA, 0),
        tag: TagLimits {
            eager_max_short: MAX_SHORT,
            eager_max_bcopy: MAX_BCOPY,
            eager_max_zcopy: wire::MAX_TAG_EAGER,
            rndv_max_hdr: wire::MAX_TAG_RNDV_HDR,
            rndv_max_zcopy: wire::MAX_RMA,
            recv_max_outstanding: super::tag::MAX_POSTED,
            recv_max_iov: MAX_IOV,
            eager_saves_copy: true,
        },
        device_addr_len: DevAddr::LEN,
        iface_addr_len: IfaceAddr::LEN,
        ep_addr_len: EpAddr::LEN,
        perf: PerfModel {
            send_overhead: 1e-6,
            recv_overhead: 1e-6,
            bandwidth: bw,
            latency: if dev.loopback { 1.5e-6 } else { 10e-6 },
        },
        priority: 0,
    }
}

impl TcpIface {
    /// Opens an interface on `dev`: a non-blocking listening socket on its address.
    pub fn open(dev: NetIf) -> Result<Self> {
        let sock_cfg = SockCfg::from_env(&dev)?;
        let ctx = |what: String| move |e: io::Error| Error::io(what, e);
        let listener = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
            .map_err(ctx("creating the tcp listening socket".into()))?;
        listener
            .set_reuse_address(true)
            .map_err(ctx("SO_REUSEADDR".into()))?;
        listener
            .set_nonblocking(true)
            .map_err(ctx("O_NONBLOCK".into()))?;
        let bind_to = SocketAddrV4::new(dev.ip, 0);
        listener
            .bind(&SockAddr::from(bind_to))
            .map_err(ctx(format!(
                "binding a tcp socket to {bind_to} ({})",
                dev.name
            )))?;
        listener
            .listen(1024)
            .map_err(ctx(format!("listening on {bind_to}")))?;
        let port = listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket_ipv4())
            .map(|a| a.port())
            .ok_or_else(|| Error::NoDevice(format!("no port bound on {}", dev.name)))?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::io("epoll_create1", e.into()))?;
        epoll
            .add(
                listener.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, LISTENER_TOKEN),
            )
            .map_err(|e| Error::io("epoll_ctl(listener)", e.into()))?;
        let accept_timer = new_timer().filter(|t| {
            epoll
                .add(t, EpollEvent::new(EpollFlags::EPOLLIN, ACCEPT_TIMER_TOKEN))
                .is_ok()
        });
        let local = IfaceAddr { ip: dev.ip, port };
        let netns = super::netns_id()?;
        let dev_addr = DevAddr {
            ip: dev.ip,
            prefix: dev.prefix,
            loopback: dev.loopback,
            netns,
        }
        .encode();
        let seed = (std::process::id() as u64) << 40
            ^ (port as u64) << 24
            ^ Instant::now().elapsed().as_nanos() as u64;
        let inner = Inner {
            conns: Slab::new(),
            active: Vec::new(),
            epoll,
            listener: Some(listener),
            done: VecDeque::with_capacity(1024),
            errors: VecDeque::with_capacity(16),
            by_conn_id: HashMap::new(),
            iface_flushes: Slab::new(),
            next_ep: 0,
            next_conn_id: seed | 1,
            sock_cfg,
            connecting: 0,
            local,
            cleanup: false,
            closed: false,
            force_epoll: false,
            tag: TagState::new(),
            next_seq: HashMap::new(),
            waiting_out: 0,
            gated: 0,
            accept_paused_until: None,
            accept_pause: ACCEPT_PAUSE_MIN,
            accept_log: ucs::limits::RateLimit::new(Duration::from_secs(1)),
            accept_timer,
        };
        Ok(TcpIface {
            inner: Rc::new(RefCell::new(inner)),
            attr: make_attr(&dev),
            iface_addr: local.encode(),
            dev_addr,
            dev,
            netns,
            tick: 0,
            events: Box::new([EpollEvent::empty(); 64]),
        })
    }

    /// The listening address.
    pub fn listen_addr(&self) -> SocketAddrV4 {
        self.inner.borrow().local.socket_addr()
    }

    /// Number of open connections (both directions), for tests and diagnostics.
    pub fn connection_count(&self) -> usize {
        let inner = self.inner.borrow();
        inner.conns.iter().filter(|(_, c)| c.sock.is_some()).count()
    }

    fn deliver<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut n = 0;
        loop {
            let e = self.inner.borrow_mut().errors.pop_front();
            match e {
                Some((ep, err)) => {
                    sink.ep_error(ep, err);
                    n += 1;
                }
                None => break,
            }
        }
        loop {
            let d = self.inner.borrow_mut().tag.done.pop_front();
            match d {
                Some((ctx, tag, imm, len, res)) => {
                    sink.tag_recv_done(ctx, tag, imm, len, res);
                    n += 1;
                }
                None => break,
            }
        }
        loop {
            let d = self.inner.borrow_mut().done.pop_front();
            match d {
                Some((comp, res)) => {
                    sink.completion(comp, res);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    fn poll_events(&mut self) {
        let mut inner = self.inner.borrow_mut();
        let n = match inner.epoll.wait(&mut self.events[..], 0u8) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("epoll_wait failed: {e}");
                return;
            }
        };
        inner.force_epoll = false;
        if inner.accept_paused_until.is_some() && inner.resume_accept(Instant::now()) {
            inner.accept_all();
        }
        for ev in &self.events[..n] {
            let token = ev.data();
            if token == LISTENER_TOKEN {
                inner.accept_all();
                continue;
            }
            if token == ACCEPT_TIMER_TOKEN {
                if let Some(t) = inner.accept_timer.as_ref() {
                    let mut ticks = [0u8; 8];
                    // SAFETY: reads at most 8 bytes into `ticks` from our non-blocking timerfd.
                    unsafe { libc::read(t.as_raw_fd(), ticks.as_mut_ptr().cast(), ticks.len()) };
                }
                if inner.resume_accept(Instant::now()) {
                    inner.accept_all();
                }
                continue;
            }
            let key = token as usize;
            let flags = ev.events();
            let Some(c) = inner.conns.get_mut(key) else {
                continue;
            };
            let err = EpollFlags::EPOLLERR | EpollFlags::EPOLLHUP;
            let (mut ungate, mut unblock) = (false, false);
            if flags.intersects(EpollFlags::EPOLLIN | err) {
                c.readable = true;
                ungate = std::mem::take(&mut c.rx_gated);
            }
            if flags.intersects(EpollFlags::EPOLLOUT | err) {
                unblock = std::mem::take(&mut c.wait_out);
            }
            inner.gated -= ungate as usize;
            inner.waiting_out -= unblock as usize;
            let Some(c) = inner.conns.get_mut(key) else {
                continue;
            };
            let connecting = c.state == ConnState::Connecting;
            if connecting
                && ev
                    .events()
                    .intersects(EpollFlags::EPOLLOUT | EpollFlags::EPOLLERR | EpollFlags::EPOLLHUP)
            {
                inner.finish_connect(key);
            }
        }
    }

    /// Sends queued bytes, receives and dispatches, retries pending requests.
    fn service<S: EventSink>(&mut self, key: usize, sink: &mut S, direct: bool) -> usize {
        {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            let Some(c) = inner.conns.get_mut(key) else {
                return 0;
            };
            match c.state {
                ConnState::Connected => {}
                ConnState::Handshake => {
                    if let Err(e) = inner.send_ctl(key) {
                        inner.fail(key, e, false);
                        return 0;
                    }
                }
                _ => return 0,
            }
            if let Err(e) = inner.flush_tx(key) {
                inner.fail(key, e, false);
                return 0;
            }
        }
        let mut n = self.rx(key, sink, direct);
        n += self.dispatch_pending(key, sink);
        n
    }

    fn dispatch_pending<S: EventSink>(&mut self, key: usize, sink: &mut S) -> usize {
        let mut n = 0;
        loop {
            let (ep, req) = {
                let mut g = self.inner.borrow_mut();
                let Some(c) = g.conns.get_mut(key) else {
                    return n;
                };
                if c.pending.is_empty() || !c.has_room() || !c.ep_alive {
                    return n;
                }
                let Some(ep) = c.ep else { return n };
                let Some(req) = c.pending.pop_front() else {
                    return n;
                };
                c.dispatching = true;
                (ep, req)
            };
            let ok = sink.pending(ep, req);
            n += 1;
            let mut g = self.inner.borrow_mut();
            let Some(c) = g.conns.get_mut(key) else {
                return n;
            };
            c.dispatching = false;
            if !ok {
                c.pending.push_front(req);
                return n;
            }
        }
    }

    /// Receives (always when `direct`, else if epoll said the socket is readable) and
    /// dispatches.
    fn rx<S: EventSink>(&mut self, key: usize, sink: &mut S, direct: bool) -> usize {
        let mut tag_fin = false;
        let mut rxb = {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            let Some(c) = inner.conns.get_mut(key) else {
                return 0;
            };
            if c.rx_paused && c.tx.fits_response() {
                c.rx_paused = false;
            }
            let want = std::mem::take(&mut c.readable) || direct && !c.rx_gated;
            if !c.rx_paused && want {
                match direct_rx(inner, key) {
                    Err(e) => {
                        inner.fail(key, e, false);
                        return 0;
                    }
                    Ok(true) => tag_fin = true,
                    Ok(false) => {}
                }
                let c = &mut inner.conns[key];
                let fd = c.fd();
                if !std::mem::take(&mut c.rx.drained) {
                    if let Err(e) = c.rx.recv(fd) {
                        inner.fail(key, e, false);
                        return 0;
                    }
                }
                if direct {
                    if c.rx.has_data() || c.rx.eof || tag_fin {
                        c.empty_polls = 0;
                    } else {
                        c.empty_polls += 1;
                        let streaming = c.rx.reasm.streaming().is_some();
                        if !c.rx_gated && (streaming || c.empty_polls >= GATE_AFTER) {
                            c.rx_gated = true;
                            c.empty_polls = 0;
                            inner.gated += 1;
                        }
                    }
                }
            }
            let c = &mut inner.conns[key];
            if !c.rx.has_data() && !c.rx.eof && !tag_fin {
                return 0;
            }
            std::mem::take(&mut c.rx)
        };
        let mut count = 0;
        if tag_fin {
            // A tagged message received straight into its destination: report it before any
            // later frame, so unexpected messages keep their arrival order.
            self.tag_finish(key, None, sink);
            count += 1;
        }
        let mut flow = Flow::Continue;
        let mut stalled = false;
        loop {
            // Before a request frame (it will queue a response), make sure the response fits;
            // otherwise stop reading this connection until the send queue drains.
            if rxb.reasm.at_boundary() && rxb.has_data() && is_request(rxb.buf[rxb.head]) {
                let g = self.inner.borrow();
                if !g.conns[key].tx.fits_response() {
                    drop(g);
                    self.inner.borrow_mut().conns[key].rx_paused = true;
                    break;
                }
            }
            match rxb.reasm.next(&rxb.buf[rxb.head..rxb.tail]) {
                Err(e) => {
                    flow = Flow::Fail(Error::Wire(format!("bad frame: {e}")));
                    break;
                }
                Ok((0, None)) => {
                    stalled = true;
                    break;
                }
                Ok((n, ev)) => {
                    rxb.head += n;
                    if let Some(ev) = ev {
                        count += 1;
                        flow = self.handle(key, ev, sink);
                        if !matches!(flow, Flow::Continue) {
                            break;
                        }
                    }
                }
            }
        }
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        match flow {
            Flow::Redirect(to) => {
                let old = std::mem::replace(&mut inner.conns[to].rx, rxb);
                inner.conns[key].rx = old;
                inner.conns[key].state = ConnState::Failed(Error::Canceled);
                inner.cleanup = true;
            }
            Flow::Fail(e) => {
                inner.conns[key].rx = rxb;
                inner.fail(key, e, false);
            }
            Flow::Continue => {
                let eof_now = rxb.eof && (stalled || !rxb.has_data());
                let clean = !rxb.has_data() && rxb.reasm.at_boundary();
                if rxb.reasm.streaming().is_some() {
                    // A large payload is coming: its rest is for `direct_rx`, and the frame
                    // after it starts with a short `recv` (until a short one fills up with
                    // small frames).
                    rxb.after_stream = true;
                } else if std::mem::take(&mut rxb.small_full) {
                    rxb.after_stream = false;
                }
                inner.conns[key].rx = rxb;
                if eof_now {
                    let c = &inner.conns[key];
                    let accepted = c.ep.is_none();
                    let err = if clean {
                        Error::ConnectionReset("the peer closed the connection".into())
                    } else {
                        Error::ConnectionReset(
                            "the peer closed the connection in the middle of a frame".into(),
                        )
                    };
                    inner.fail(key, err, clean && accepted);
                } else if inner.conns.contains(key) {
                    // Responses queued by the dispatch go out now: a get is one round trip.
                    if let Err(e) = inner.flush_tx(key) {
                        inner.fail(key, e, false);
                    }
                }
            }
        }
        count
    }

    fn handle<S: EventSink>(&mut self, key: usize, ev: RxEvent<'_>, sink: &mut S) -> Flow {
        let mut comp: Option<Done> = None;
        {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            let c = &mut inner.conns[key];
            if c.expect_hello {
                let RxEvent::Hello(h) = ev else {
                    return Flow::Fail(Error::Wire(
                        "the first frame on a connection is not a hello".into(),
                    ));
                };
                c.expect_hello = false;
                return match h.mode {
                    HelloMode::Iface => iface_hello(inner, key, h),
                    HelloMode::Ep => attach(inner, key, h),
                };
            }
            if c.state == ConnState::Handshake {
                return match ev {
                    RxEvent::HelloAck(a) if a.seq == c.seq => {
                        // Acknowledged: the frames held since the dial go out now.
                        c.state = ConnState::Connected;
                        Flow::Continue
                    }
                    RxEvent::HelloAck(a) => Flow::Fail(Error::Wire(format!(
                        "hello ack for connection {} on connection {}",
                        a.seq, c.seq
                    ))),
                    _ => Flow::Fail(Error::Wire(
                        "the acceptor's first frame is not a hello ack".into(),
                    )),
                };
            }
            if c.rejected {
                return Flow::Fail(Error::Wire(
                    "a frame on a connection that lost a simultaneous connect".into(),
                ));
            }
            match ev {
                RxEvent::Hello(_) => {
                    return Flow::Fail(Error::Wire("unexpected second hello".into()))
                }
                RxEvent::HelloAck(_) => {
                    return Flow::Fail(Error::Wire("unexpected hello ack".into()))
                }
                RxEvent::Am { .. } => {}
                RxEvent::TagEager(t, chunk) => {
                    if matches!(c.tag_rx, TagRx::Idle) {
                        // The frame's first event: match before the payload.
                        c.tag_rx = inner.tag.match_eager(t, chunk.total as usize);
                        if let TagRx::Unexp { .. } = c.tag_rx {
                            if !chunk.last {
                                c.tag_stage.clear();
                                c.tag_stage.resize(chunk.total as usize, 0);
                            }
                        }
                    }
                    match &c.tag_rx {
                        TagRx::Posted { p, .. } => {
                            p.segs.scatter(chunk.offset as usize, chunk.data)
                        }
                        TagRx::Unexp { .. } if !(chunk.offset == 0 && chunk.last) => {
                            let at = chunk.offset as usize;
                            match c.tag_stage.get_mut(at..at + chunk.data.len()) {
                                Some(dst) => dst.copy_from_slice(chunk.data),
                                None => {
                                    return Flow::Fail(Error::Wire(
                                        "tagged eager bytes beyond the announced length".into(),
                                    ))
                                }
                            }
                        }
                        TagRx::Unexp { .. } => {}
                        TagRx::Idle => {
                            return Flow::Fail(Error::Wire(
                                "tagged eager bytes without a start".into(),
                            ))
                        }
                    }
                    if chunk.last {
                        drop(g);
                        let whole = (chunk.offset == 0).then_some(chunk.data);
                        self.tag_finish(key, whole, sink);
                        return Flow::Continue;
                    }
                    return Flow::Continue;
                }
                RxEvent::TagRndv(h, user_hdr) => {
                    if let Some(p) = inner.tag.match_rndv(&h) {
                        let want = (h.length as usize).min(p.segs.total());
                        let mut segs = p.segs;
                        segs.truncate(want);
                        let req_id = c.reqs.insert(Req::TagGet {
                            segs,
                            ctx: p.ctx,
                            tag: h.tag,
                            want,
                            length: h.length as usize,
                        }) as u64
                            + 1;
                        let mut sub = [0u8; GetReq::LEN];
                        GetReq {
                            req_id,
                            remote_addr: 0,
                            key: h.op_id,
                            length: want as u64,
                        }
                        .encode(&mut sub);
                        inner.respond(key, Kind::TagGet, &sub, None);
                        return Flow::Continue;
                    }
                    drop(g);
                    let rkey = super::md::PackedRkey {
                        base: h.remote_addr,
                        len: h.length,
                        key: h.key,
                    }
                    .to_bytes();
                    let rkey: &[u8] = if h.key != 0 { &rkey } else { &[] };
                    sink.tag_unexp_rndv(
                        h.tag,
                        crate::iface::RndvRemote {
                            header: user_hdr,
                            remote_addr: h.remote_addr,
                            length: h.length as usize,
                            rkey,
                        },
                    );
                    return Flow::Continue;
                }
                RxEvent::TagGet(r) => {
                    let idx = r.key.wrapping_sub(1) as usize;
                    let ok = matches!(c.reqs.get(idx), Some(Req::TagRndv { segs, .. })
                        if r.length as usize <= segs.total());
                    let mut sub = [0u8; Ack::LEN];
                    if ok {
                        let Some(Req::TagRndv { mut segs, comp }) = c.reqs.try_remove(idx) else {
                            return Flow::Fail(unknown_req("tag get", r.key));
                        };
                        segs.truncate(r.length as usize);
                        Ack {
                            req_id: r.req_id,
                            status: WireStatus::Ok,
                        }
                        .encode(&mut sub);
                        inner.respond(
                            key,
                            Kind::GetResp,
                            &sub,
                            Some(TxItem::Zcopy(segs, Some(comp))),
                        );
                    } else {
                        tracing::warn!(
                            op = r.key,
                            "refused a tag get for an unknown or canceled rendezvous"
                        );
                        Ack {
                            req_id: r.req_id,
                            status: WireStatus::RemoteAccess,
                        }
                        .encode(&mut sub);
                        inner.respond(key, Kind::GetResp, &sub, None);
                    }
                }
                RxEvent::Put(h, chunk) => {
                    let r = RegTable::global().lookup(h.key, h.remote_addr, chunk.total);
                    if let Ok(p) = r {
                        // SAFETY: lookup checked that remote_addr..+total lies in a live
                        // registration of this process; offset + len <= total.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                chunk.data.as_ptr(),
                                p.add(chunk.offset as usize),
                                chunk.data.len(),
                            )
                        };
                    }
                    if chunk.last {
                        let status = match &r {
                            Ok(_) => WireStatus::Ok,
                            Err(e) => {
                                tracing::warn!("refused a put from the peer: {e}");
                                WireStatus::RemoteAccess
                            }
                        };
                        if h.req_id != 0 || status != WireStatus::Ok {
                            let mut sub = [0u8; Ack::LEN];
                            Ack {
                                req_id: h.req_id,
                                status,
                            }
                            .encode(&mut sub);
                            inner.respond(key, Kind::PutAck, &sub, None);
                        }
                    }
                }
                RxEvent::PutAck(a) => {
                    if a.req_id == 0 {
                        if a.status != WireStatus::Ok {
                            c.deferred_err = Some(refused("put or atomic"));
                        }
                    } else {
                        let idx = (a.req_id - 1) as usize;
                        match c.reqs.get(idx) {
                            Some(Req::PutZcopy { .. }) => {
                                let Some(Req::PutZcopy { comp: cid }) = c.reqs.try_remove(idx)
                                else {
                                    return Flow::Fail(unknown_req("put ack", a.req_id));
                                };
                                comp = Some((cid, status_result(a.status, "put", 0)));
                            }
                            _ => return Flow::Fail(unknown_req("put ack", a.req_id)),
                        }
                    }
                }
                RxEvent::GetReq(g) => {
                    let r = RegTable::global().lookup(g.key, g.remote_addr, g.length);
                    let status = match &r {
                        Ok(_) => WireStatus::Ok,
                        Err(e) => {
                            tracing::warn!("refused a get from the peer: {e}");
                            WireStatus::RemoteAccess
                        }
                    };
                    let mut sub = [0u8; Ack::LEN];
                    Ack {
                        req_id: g.req_id,
                        status,
                    }
                    .encode(&mut sub);
                    let local = (r.is_ok() && g.length > 0).then_some(TxItem::Local {
                        key: g.key,
                        addr: g.remote_addr,
                        len: g.length as usize,
                        sent: 0,
                    });
                    inner.respond(key, Kind::GetResp, &sub, local);
                }
                RxEvent::GetResp(a, chunk) => {
                    let idx = a.req_id.wrapping_sub(1) as usize;
                    let bad_len = |want: usize| {
                        Flow::Fail(Error::Wire(format!(
                            "get response of {} bytes for a request of {want}",
                            chunk.total
                        )))
                    };
                    match c.reqs.get(idx) {
                        Some(Req::GetZcopy { segs, comp: cid }) => {
                            if a.status != WireStatus::Ok {
                                if chunk.total != 0 {
                                    return bad_len(0);
                                }
                                comp = Some((*cid, status_result(a.status, "get", 0)));
                                c.reqs.remove(idx);
                            } else {
                                if chunk.total as usize != segs.total() {
                                    return bad_len(segs.total());
                                }
                                segs.scatter(chunk.offset as usize, chunk.data);
                                if chunk.last {
                                    comp = Some((*cid, Ok(0)));
                                    c.reqs.remove(idx);
                                }
                            }
                        }
                        Some(Req::TagGet { segs, want, .. }) => {
                            let want = *want;
                            if a.status == WireStatus::Ok && chunk.total as usize != want {
                                return bad_len(want);
                            }
                            if a.status == WireStatus::Ok {
                                segs.scatter(chunk.offset as usize, chunk.data);
                            }
                            if a.status != WireStatus::Ok || chunk.last {
                                let Some(Req::TagGet {
                                    ctx, tag, length, ..
                                }) = c.reqs.try_remove(idx)
                                else {
                                    return Flow::Fail(unknown_req("get response", a.req_id));
                                };
                                let res = super::tag::rndv_result(a.status, want, length);
                                inner.tag.done.push_back((ctx, tag, 0, length, res));
                            }
                        }
                        Some(Req::GetBcopy { len, comp: cid }) => {
                            let (len, cid) = (*len, *cid);
                            c.reqs.remove(idx);
                            if a.status != WireStatus::Ok {
                                comp = Some((cid, status_result(a.status, "get", 0)));
                            } else {
                                if chunk.total as usize != len || !chunk.last || chunk.offset != 0 {
                                    return bad_len(len);
                                }
                                drop(g);
                                sink.get_bcopy_data(cid, chunk.data);
                                sink.completion(cid, Ok(0));
                                return Flow::Continue;
                            }
                        }
                        _ => return Flow::Fail(unknown_req("get response", a.req_id)),
                    }
                }
                RxEvent::AtomicReq(r) => {
                    let res = do_atomic(&r);
                    if let Err(e) = &res {
                        tracing::warn!("refused an atomic from the peer: {e}");
                    }
                    if r.mode != AtomicMode::Post || res.is_err() {
                        let mut sub = [0u8; AtomicResp::LEN];
                        AtomicResp {
                            req_id: if r.mode == AtomicMode::Post {
                                0
                            } else {
                                r.req_id
                            },
                            status: if res.is_ok() {
                                WireStatus::Ok
                            } else {
                                WireStatus::RemoteAccess
                            },
                            value: res.unwrap_or(0),
                        }
                        .encode(&mut sub);
                        inner.respond(key, Kind::AtomicResp, &sub, None);
                    }
                }
                RxEvent::AtomicResp(a) => {
                    if a.req_id == 0 {
                        if a.status != WireStatus::Ok {
                            c.deferred_err = Some(refused("put or atomic"));
                        }
                    } else {
                        let idx = (a.req_id - 1) as usize;
                        match c.reqs.get(idx) {
                            Some(Req::Atomic { comp: cid }) => {
                                comp = Some((*cid, status_result(a.status, "atomic", a.value)));
                                c.reqs.remove(idx);
                            }
                            _ => return Flow::Fail(unknown_req("atomic response", a.req_id)),
                        }
                    }
                }
                RxEvent::FlushReq(f) => {
                    let mut sub = [0u8; Ack::LEN];
                    Ack {
                        req_id: f.req_id,
                        status: WireStatus::Ok,
                    }
                    .encode(&mut sub);
                    inner.respond(key, Kind::FlushAck, &sub, None);
                }
                RxEvent::FlushAck(a) => {
                    let idx = a.req_id.wrapping_sub(1) as usize;
                    match c.reqs.get(idx) {
                        Some(Req::Flush { .. }) => {
                            let Some(Req::Flush {
                                comp: cid,
                                iface_flush,
                                put_seq,
                            }) = c.reqs.try_remove(idx)
                            else {
                                return Flow::Fail(unknown_req("flush ack", a.req_id));
                            };
                            c.acked_seq = c.acked_seq.max(put_seq);
                            let err = c.deferred_err.take();
                            if let Some(cid) = cid {
                                comp = Some((cid, err.clone().map_or(Ok(0), Err)));
                            }
                            if let Some(i) = iface_flush {
                                iface_flush_part_done(
                                    &mut inner.iface_flushes,
                                    &mut inner.done,
                                    i,
                                    err,
                                );
                            }
                        }
                        _ => return Flow::Fail(unknown_req("flush ack", a.req_id)),
                    }
                }
            }
        }
        if let RxEvent::Am { id, data } = ev {
            sink.am(id, data);
        }
        if let Some((cid, res)) = comp {
            sink.completion(cid, res);
        }
        Flow::Continue
    }

    fn cleanup(&mut self) {
        let mut g = self.inner.borrow_mut();
        if !g.cleanup {
            return;
        }
        g.cleanup = false;
        let mut i = 0;
        while i < g.active.len() {
            let key = g.active[i];
            let c = &g.conns[key];
            let failed = matches!(c.state, ConnState::Failed(_));
            if failed && !c.ep_alive {
                g.remove(key);
            } else {
                i += 1;
            }
        }
    }
}

fn refused(what: &str) -> Error {
    Error::RemoteAccess(format!(
        "the target refused a {what}: its key is not a live registration there or the range is \
         outside it"
    ))
}

fn unknown_req(what: &str, id: u64) -> Error {
    Error::Wire(format!("{what} for unknown request {id}"))
}

fn status_result(s: WireStatus, what: &str, v: u64) -> Result<u64> {
    match s {
        WireStatus::Ok => Ok(v),
        WireStatus::RemoteAccess => Err(refused(what)),
    }
}

/// True for the kinds of frame the receiver answers (put may need an ack or a refusal).
fn is_request(kind: u8) -> bool {
    kind == Kind::TagRndv as u8
        || kind == Kind::TagGet as u8
        || kind == Kind::Put as u8
        || kind == Kind::GetReq as u8
        || kind == Kind::AtomicReq as u8
        || kind == Kind::FlushReq as u8
}

/// Applies a peer's atomic to this process's registered memory; gives the old value.
fn do_atomic(r: &AtomicReq) -> Result<u64> {
    use crate::ep::AtomicOp as O;
    use std::sync::atomic::Ordering::SeqCst;
    let p = RegTable::global().lookup(r.key, r.remote_addr, r.size as u64)?;
    if !(p as usize).is_multiple_of(r.size as usize) {
        return Err(Error::RemoteAccess(format!(
            "atomic at {:#x} is not {}-byte aligned",
            r.remote_addr, r.size
        )));
    }
    if r.size == 4 {
        // SAFETY: lookup checked the 4 bytes lie in a live registration; aligned above. Peers
        // and this process access the location only through atomics or transport copies.
        let a = unsafe { AtomicU32::from_ptr(p as *mut u32) };
        let v = r.value as u32;
        Ok(match r.mode {
            AtomicMode::Cswap => match a.compare_exchange(r.compare as u32, v, SeqCst, SeqCst) {
                Ok(old) | Err(old) => old,
            },
            _ => match r.op {
                O::Add => a.fetch_add(v, SeqCst),
                O::And => a.fetch_and(v, SeqCst),
                O::Or => a.fetch_or(v, SeqCst),
                O::Xor => a.fetch_xor(v, SeqCst),
                O::Swap => a.swap(v, SeqCst),
            },
        } as u64)
    } else {
        // SAFETY: as above, for 8 bytes.
        let a = unsafe { AtomicU64::from_ptr(p as *mut u64) };
        let v = r.value;
        Ok(match r.mode {
            AtomicMode::Cswap => match a.compare_exchange(r.compare, v, SeqCst, SeqCst) {
                Ok(old) | Err(old) => old,
            },
            _ => match r.op {
                O::Add => a.fetch_add(v, SeqCst),
                O::And => a.fetch_and(v, SeqCst),
                O::Or => a.fetch_or(v, SeqCst),
                O::Xor => a.fetch_xor(v, SeqCst),
                O::Swap => a.swap(v, SeqCst),
            },
        })
    }
}

/// Zero-copy receive: when the buffered bytes ran out in the middle of a large put, get
/// response or tagged eager message, reads the rest of its payload with `recv` straight into
/// the destination (the registered target region, the get's iov, the posted receive's
/// buffer, or the staging of an unexpected tagged message), without the intermediate receive
/// buffer. Gives true when a tagged eager message finished (the caller reports it).
fn direct_rx(inner: &mut Inner, key: usize) -> Result<bool> {
    loop {
        let c = &mut inner.conns[key];
        if c.rx.has_data() || c.rx.eof {
            return Ok(false);
        }
        let Some(pos) = c.rx.reasm.streaming() else {
            return Ok(false);
        };
        let left = (pos.total - pos.done) as usize;
        let (dst, len) = match pos.sub {
            wire::StreamSub::Put(h) => {
                match RegTable::global().lookup(h.key, h.remote_addr, pos.total) {
                    // SAFETY (of the later write): the whole range is a live registration.
                    Ok(p) => (p.wrapping_add(pos.done as usize), left),
                    // A refused put: the normal path drains and answers it.
                    Err(_) => return Ok(false),
                }
            }
            wire::StreamSub::GetResp(a) => {
                let idx = a.req_id.wrapping_sub(1) as usize;
                match c.reqs.get(idx) {
                    Some(Req::GetZcopy { segs, .. }) if segs.total() as u64 == pos.total => {
                        match segs.locate(pos.done as usize) {
                            Some((p, l)) => (p, l.min(left)),
                            None => return Ok(false),
                        }
                    }
                    Some(Req::TagGet { segs, want, .. }) if *want as u64 == pos.total => {
                        match segs.locate(pos.done as usize) {
                            Some((p, l)) => (p, l.min(left)),
                            None => return Ok(false),
                        }
                    }
                    // Malformed: the normal path reports it.
                    _ => return Ok(false),
                }
            }
            wire::StreamSub::TagEager(_) => match &c.tag_rx {
                TagRx::Posted { p, .. } => match p.segs.locate(pos.done as usize) {
                    Some((p, l)) => (p, l.min(left)),
                    // Beyond the posted capacity (truncated): the normal path drains it.
                    None => return Ok(false),
                },
                TagRx::Unexp { .. } if c.tag_stage.len() as u64 == pos.total => {
                    // SAFETY (of the later write): `done..total` lies inside `tag_stage`.
                    (
                        c.tag_stage.as_mut_ptr().wrapping_add(pos.done as usize),
                        left,
                    )
                }
                _ => return Ok(false),
            },
        };
        // At most DIRECT_CHUNK per call (see there); the loop goes on while the socket has more.
        let len = len.min(DIRECT_CHUNK);
        let (n, eof) = recv_raw(c.fd(), dst, len)?;
        if eof {
            c.rx.eof = true;
            return Ok(false);
        }
        if n == 0 {
            c.rx.drained = true;
            return Ok(false);
        }
        if c.rx.reasm.advance_stream(n as u64) {
            c.rx.after_stream = true;
            match pos.sub {
                wire::StreamSub::Put(h) => {
                    if h.req_id != 0 {
                        let mut sub = [0u8; Ack::LEN];
                        Ack {
                            req_id: h.req_id,
                            status: WireStatus::Ok,
                        }
                        .encode(&mut sub);
                        inner.respond(key, Kind::PutAck, &sub, None);
                    }
                }
                wire::StreamSub::GetResp(a) => {
                    // The request was checked (kind and size) before the recv.
                    let idx = a.req_id.wrapping_sub(1) as usize;
                    match c.reqs.get(idx) {
                        Some(Req::GetZcopy { .. } | Req::TagGet { .. }) => {}
                        _ => return Err(unknown_req("get response", a.req_id)),
                    }
                    match c.reqs.remove(idx) {
                        Req::GetZcopy { comp, .. } => inner.done.push_back((comp, Ok(0))),
                        Req::TagGet {
                            ctx,
                            tag,
                            want,
                            length,
                            ..
                        } => {
                            let res = super::tag::rndv_result(WireStatus::Ok, want, length);
                            inner.tag.done.push_back((ctx, tag, 0, length, res));
                        }
                        _ => {}
                    }
                }
                wire::StreamSub::TagEager(_) => return Ok(true),
            }
            return Ok(false);
        }
        if n < len {
            // The socket had less than asked for: it is empty now (a second `recv` would
            // only say so); epoll tells when more arrived.
            inner.conns[key].rx.drained = true;
            return Ok(false);
        }
    }
}

/// Connect-to-iface: the accepted connection `key` brought the hello `h`. Without a dial of
/// ours for the same pair (peer interface, sequence number) it is acknowledged and waits,
/// unowned, for our endpoint of that number. With one, the connects were simultaneous: the
/// connection dialed by the smaller interface address wins (see `wire::Hello`).
fn iface_hello(inner: &mut Inner, key: usize, h: Hello) -> Flow {
    if h.src_port == 0 || h.dst_conn_id != 0 {
        return Flow::Fail(Error::Wire(format!(
            "connect-to-iface hello with port {} and endpoint {:#x}",
            h.src_port, h.dst_conn_id
        )));
    }
    let peer = IfaceAddr {
        ip: Ipv4Addr::from(h.src_ip),
        port: h.src_port,
    };
    let seq = h.src_conn_id;
    let local = inner.local;
    let c = &mut inner.conns[key];
    c.peer_iface = Some(peer);
    c.seq = seq;
    // A connection to ourselves is never "simultaneous": both ends are the same dial.
    let mine = (peer != local)
        .then(|| {
            inner.active.iter().copied().find(|&k| {
                let o = &inner.conns[k];
                o.dialed
                    && o.seq == seq
                    && o.peer_iface == Some(peer)
                    && !matches!(o.state, ConnState::Failed(_))
            })
        })
        .flatten();
    if let Some(y) = mine {
        let we_win = (u32::from(local.ip), local.port) < (u32::from(peer.ip), peer.port);
        if we_win {
            // Our dial wins; the peer moves its endpoint onto it and closes this one.
            inner.conns[key].rejected = true;
            return Flow::Continue;
        }
        if matches!(
            inner.conns[y].state,
            ConnState::Connecting | ConnState::Handshake
        ) {
            return adopt(inner, key, y);
        }
        // Our dial was acknowledged although the peer's should have won: not a rucx peer
        // following this protocol. Take the connection as an independent one.
        tracing::warn!(
            peer = %peer.socket_addr(),
            seq,
            "simultaneous connect: the peer acknowledged the losing connection"
        );
    }
    let mut sub = [0u8; HelloAck::LEN];
    HelloAck { seq }.encode(&mut sub);
    inner.respond(key, Kind::HelloAck, &sub, None);
    Flow::Continue
}

/// Simultaneous connect lost by our dial `y`: `y` takes the accepted connection `key` (its
/// socket and received bytes), acknowledges it ahead of the frames its endpoint queued, and
/// closes its own socket (nothing but the hello was sent there, and the peer never answers
/// it).
fn adopt(inner: &mut Inner, key: usize, y: usize) -> Flow {
    let x = &mut inner.conns[key];
    let sock = x.sock.take();
    let mask = std::mem::replace(&mut x.epoll_mask, EpollFlags::empty());
    let (peer, readable) = (x.peer, x.readable);
    let t = &mut inner.conns[y];
    if let Some(old) = t.sock.take() {
        if !t.epoll_mask.is_empty() {
            let _ = inner.epoll.delete(old.as_fd());
        }
    }
    if t.state == ConnState::Connecting {
        inner.connecting -= 1;
    }
    t.sock = sock;
    t.peer = peer;
    t.readable = readable;
    t.state = ConnState::Connected;
    t.ctl_len = 0;
    t.ctl_sent = 0;
    let mut f = [0u8; FrameHeader::LEN + HelloAck::LEN];
    FrameHeader::new(Kind::HelloAck, 0, 0).encode(&mut f);
    HelloAck { seq: t.seq }.encode(&mut f[FrameHeader::LEN..]);
    t.tx.push_front(&f);
    // Re-register the socket under its new owner's key (an accepted socket is registered).
    let out = EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT;
    t.epoll_mask = out;
    if let Some(s) = t.sock.as_ref() {
        let mut ev = EpollEvent::new(out, y as u64);
        let r = if mask.is_empty() {
            inner.epoll.add(s.as_fd(), ev)
        } else {
            inner.epoll.modify(s.as_fd(), &mut ev)
        };
        if let Err(e) = r {
            tracing::warn!("epoll_ctl on a tcp connection failed: {e}");
        }
    }
    tracing::debug!(
        seq = t.seq,
        "simultaneous connect: moved to the peer's connection"
    );
    Flow::Redirect(y)
}

/// Connect-to-ep: the accepted connection `key` says it is for our endpoint `h.dst_conn_id`.
fn attach(inner: &mut Inner, key: usize, h: Hello) -> Flow {
    let Some(&to) = inner.by_conn_id.get(&h.dst_conn_id) else {
        return Flow::Fail(Error::Wire(format!(
            "hello for endpoint {:#x}, which does not exist here",
            h.dst_conn_id
        )));
    };
    let t = &inner.conns[to];
    if !matches!(t.state, ConnState::Idle | ConnState::Waiting) || t.sock.is_some() {
        return Flow::Fail(Error::Wire(format!(
            "hello for endpoint {:#x}, which is already connected",
            h.dst_conn_id
        )));
    }
    if t.state == ConnState::Waiting && t.peer_conn_id != h.src_conn_id {
        return Flow::Fail(Error::Wire(format!(
            "hello from endpoint {:#x} for endpoint {:#x}, which waits for {:#x}",
            h.src_conn_id, h.dst_conn_id, t.peer_conn_id
        )));
    }
    let sock = inner.conns[key].sock.take();
    let mask = inner.conns[key].epoll_mask;
    inner.conns[key].epoll_mask = EpollFlags::empty();
    let peer = inner.conns[key].peer;
    let t = &mut inner.conns[to];
    t.sock = sock;
    t.peer = peer;
    t.peer_conn_id = h.src_conn_id;
    t.state = ConnState::Connected;
    t.epoll_mask = mask;
    if let Some(s) = t.sock.as_ref() {
        let mut ev = EpollEvent::new(mask, to as u64);
        let _ = inner.epoll.modify(s.as_fd(), &mut ev);
    }
    Flow::Redirect(to)
}

impl Drop for TcpIface {
    fn drop(&mut self) {
        let Ok(mut g) = self.inner.try_borrow_mut() else {
            return;
        };
        let inner = &mut *g;
        // Give queued bytes a bounded chance to leave before the sockets close.
        let deadline = Instant::now() + Duration::from_millis(500);
        let keys: Vec<usize> = inner.active.clone();
        for &key in &keys {
            loop {
                let c = &mut inner.conns[key];
                if !c.is_connected() || c.tx.is_empty() || Instant::now() > deadline {
                    break;
                }
                let fd = c.fd();
                if c.tx.progress(fd, &mut inner.done).is_err() {
                    break;
                }
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; a short bounded wait.
                unsafe { libc::poll(&mut pfd, 1, 10) };
            }
        }
        inner.closed = true;
        for key in keys {
            inner.fail(
                key,
                Error::ConnectionReset("the tcp interface was destroyed".into()),
                true,
            );
        }
        inner.listener = None;
    }
}

impl Iface for TcpIface {
    type Ep = TcpEp;

    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn tl_name(&self) -> &'static str {
        "tcp"
    }
    fn device_name(&self) -> &str {
        &self.dev.name
    }
    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }
    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }

    fn is_reachable(
        &self,
        dev_addr: &[u8],
        iface_addr: Option<&[u8]>,
    ) -> std::result::Result<(), String> {
        let peer = DevAddr::decode(dev_addr).map_err(|e| e.to_string())?;
        if let Some(ia) = iface_addr {
            let ia = IfaceAddr::decode(ia).map_err(|e| e.to_string())?;
            if ia.ip != peer.ip {
                return Err(format!(
                    "interface address {} does not match device address {}",
                    ia.ip, peer.ip
                ));
            }
        }
        reachable(&self.dev, self.netns, &peer)
    }

    fn ep_create_connected(&mut self, dev_addr: &[u8], iface_addr: &[u8]) -> Result<TcpEp> {
        let _ = DevAddr::decode(dev_addr)?;
        let to = IfaceAddr::decode(iface_addr)?;
        let mut g = self.inner.borrow_mut();
        if g.closed {
            return Err(Error::InvalidParam("the tcp interface is closed".into()));
        }
        // Our endpoint number `seq` to that interface pairs with the peer's number `seq`:
        // the connection the peer dialed for it, if it arrived, carries this endpoint too.
        // Otherwise a connection with that interface that no endpoint owns any more (an
        // endpoint of ours or of the peer was destroyed) is reused. Else we dial, and a
        // simultaneous dial by the peer resolves to one connection (see `iface_hello`).
        let seq = {
            let n = g.next_seq.entry(to).or_insert(0);
            *n += 1;
            *n - 1
        };
        let usable = |c: &Conn| {
            c.ep.is_none()
                && c.sock.is_some()
                && !c.rejected
                && c.conn_id == 0
                && c.peer_iface == Some(to)
        };
        let paired = g.active.iter().copied().find(|&k| {
            let c = &g.conns[k];
            usable(c) && !c.dialed && c.seq == seq && c.state == ConnState::Connected
        });
        // An accepted connection with a higher number is kept for our endpoint of that
        // number (taking it would leave that endpoint to dial a connection the peer's dial
        // of the same number may win against, with nothing left to pair).
        let reuse = paired.or_else(|| {
            g.active.iter().copied().find(|&k| {
                let c = &g.conns[k];
                usable(c)
                    && (c.dialed || c.seq < seq)
                    && matches!(
                        c.state,
                        ConnState::Connected | ConnState::Connecting | ConnState::Handshake
                    )
            })
        });
        if let Some(key) = reuse {
            let id = EpId(g.next_ep);
            g.next_ep = g.next_ep.wrapping_add(1);
            let c = &mut g.conns[key];
            c.ep = Some(id);
            c.ep_alive = true;
            drop(g);
            return Ok(TcpEp::new(self.inner.clone(), key, id));
        }
        let (key, id) = g.add_conn(ConnState::Idle);
        let hello = Hello {
            mode: HelloMode::Iface,
            src_conn_id: seq,
            dst_conn_id: 0,
            src_ip: u32::from(g.local.ip),
            src_port: g.local.port,
        };
        if let Err(e) = g.dial(key, to.socket_addr(), hello) {
            g.remove(key);
            return Err(e);
        }
        drop(g);
        Ok(TcpEp::new(self.inner.clone(), key, id))
    }

    fn ep_create(&mut self) -> Result<TcpEp> {
        let mut g = self.inner.borrow_mut();
        if g.closed {
            return Err(Error::InvalidParam("the tcp interface is closed".into()));
        }
        let (key, id) = g.add_conn(ConnState::Idle);
        let conn_id = g.next_conn_id;
        g.next_conn_id = g.next_conn_id.wrapping_add(2);
        g.conns[key].conn_id = conn_id;
        g.by_conn_id.insert(conn_id, key);
        drop(g);
        Ok(TcpEp::new(self.inner.clone(), key, id))
    }

    fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut count = self.deliver(sink);
        self.tick = self.tick.wrapping_add(1);
        let need_epoll = {
            let g = self.inner.borrow();
            g.connecting > 0 || g.force_epoll || g.waiting_out > 0 || g.gated > 0
        };
        // Few connections: a non-blocking recv on each (cheaper than epoll_wait + recv, and
        // measurably lower latency); the listening socket and connects are looked at every
        // EPOLL_EVERY calls. Many connections: one epoll_wait(0), then recv on the ready ones.
        let few = self.inner.borrow().active.len() <= DIRECT_MAX;
        let polled = !few || need_epoll || self.tick.is_multiple_of(EPOLL_EVERY);
        if polled {
            self.poll_events();
        }
        // A call that asked epoll reads the sockets it reported readable, and no others:
        // polling every socket with `recv` as well would only add system calls (and socket
        // lock round trips the peer's incoming segments wait on).
        let direct = few && !polled;
        let mut i = 0;
        loop {
            let key = match self.inner.borrow().active.get(i) {
                Some(&k) => k,
                None => break,
            };
            i += 1;
            count += self.service(key, sink, direct);
        }
        count += self.deliver(sink);
        self.cleanup();
        count
    }

    fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let mut need = 0;
        for &key in &inner.active {
            let c = &inner.conns[key];
            if c.ep.is_none() || matches!(c.state, ConnState::Failed(_) | ConnState::Idle) {
                continue;
            }
            if !c.is_idle() {
                if !c.tx.fits(FrameHeader::LEN + FlushReq::LEN, 1) || c.reqs.len() >= MAX_REQS {
                    return Ok(Outcome::NoResource);
                }
                need += 1;
            }
        }
        if need == 0 {
            return Ok(Outcome::DONE);
        }
        let fi = inner.iface_flushes.insert((comp, need, None));
        for i in 0..inner.active.len() {
            let key = inner.active[i];
            let c = &mut inner.conns[key];
            if c.ep.is_none()
                || matches!(c.state, ConnState::Failed(_) | ConnState::Idle)
                || c.is_idle()
            {
                continue;
            }
            let req_id = c.reqs.insert(Req::Flush {
                comp: None,
                iface_flush: Some(fi),
                put_seq: c.put_seq,
            }) as u64
                + 1;
            let mut f = [0u8; FrameHeader::LEN + FlushReq::LEN];
            FrameHeader::new(Kind::FlushReq, 0, 0).encode(&mut f);
            FlushReq { req_id }.encode(&mut f[FrameHeader::LEN..]);
            c.tx.push_pieces(&[&f], 0);
        }
        Ok(Outcome::InProgress)
    }

    fn tag_recv_zcopy(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        self.tag_post(tag, mask, iov, ctx)
    }

    fn tag_recv_cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
        self.tag_cancel(ctx, force)
    }
    fn tag_recv_canceler(&self) -> Option<crate::iface::TagRecvCanceler> {
        Some(std::rc::Rc::new(self.tag_canceler()))
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.inner.borrow().epoll.0.as_raw_fd())
    }

    fn event_arm(&mut self, events: EventFlags) -> Result<()> {
        let _ = events;
        let mut g = self.inner.borrow_mut();
        if !g.done.is_empty() || !g.errors.is_empty() {
            return Err(Error::Busy("completions are waiting for progress".into()));
        }
        for i in 0..g.active.len() {
            let key = g.active[i];
            let c = &g.conns[key];
            if c.rx.has_data() || !c.pending.is_empty() && c.has_room() {
                return Err(Error::Busy("received data is waiting for progress".into()));
            }
            let unsent_hello = c.state == ConnState::Handshake && c.ctl_sent < c.ctl_len;
            if unsent_hello || c.is_connected() && !c.tx.is_empty() {
                g.set_mask(key, EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT);
            }
        }
        let n = g
            .epoll
            .wait(&mut self.events[..], 0u8)
            .map_err(|e| Error::io("epoll_wait", e.into()))?;
        if n > 0 {
            g.force_epoll = true;
            return Err(Error::Busy("sockets are ready".into()));
        }
        Ok(())
    }
}

/// Whether device `dev` (in namespace `netns`) reaches a peer device.
pub(crate) fn reachable(
    dev: &NetIf,
    netns: u64,
    peer: &DevAddr,
) -> std::result::Result<(), String> {
    if dev.loopback || peer.loopback {
        if dev.loopback && peer.loopback && peer.netns == netns {
            return Ok(());
        }
        return Err(if dev.loopback {
            format!(
                "{} ({}) reaches only peers in the same host and network namespace; the peer \
                 ({}) is elsewhere: use a network device",
                dev.name, dev.ip, peer.ip
            )
        } else {
            format!(
                "the peer's device is a loopback device ({}), which {} ({}) cannot reach",
                peer.ip, dev.name, dev.ip
            )
        });
    }
    let mask = |p: u8| {
        if p == 0 {
            0
        } else {
            u32::MAX << (32 - p as u32)
        }
    };
    let m = mask(dev.prefix);
    if u32::from(dev.ip) & m == u32::from(peer.ip) & m {
        return Ok(());
    }
    // Not on our subnet: ask the kernel which source address a route to the peer would use
    // (a UDP connect sends nothing).
    let probe = || -> io::Result<Ipv4Addr> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.connect(SocketAddrV4::new(peer.ip, 9))?;
        match s.local_addr()? {
            SocketAddr::V4(a) => Ok(*a.ip()),
            SocketAddr::V6(_) => Err(io::Error::other("IPv6 source")),
        }
    };
    match probe() {
        Ok(src) if src == dev.ip => Ok(()),
        Ok(src) => Err(format!(
            "no route from {} ({}/{}) to {}: the kernel routes it from {src}",
            dev.name, dev.ip, dev.prefix, peer.ip
        )),
        Err(e) => Err(format!(
            "no route from {} ({}/{}) to {}: {e}",
            dev.name, dev.ip, dev.prefix, peer.ip
        )),
    }
}
