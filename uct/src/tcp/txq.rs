//! A connection's send queue: copied frames and zero-copy pieces, sent in order with as few
//! `sendmsg` calls as the socket allows.

use super::iov::{sendv, Segs};
use super::md::RegTable;
use super::wire::{AtomicResp, FrameHeader, GetReq};
use crate::ep::CompletionId;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use ucs::{Error, Result};

/// A deferred completion.
pub(crate) type Done = (CompletionId, Result<u64>);

/// Bytes of a connection's send queue (its buffer grows to this size on demand).
pub(crate) const TX_BUF: usize = 128 * 1024;
/// Smallest buffer of a send queue, allocated when the first bytes are queued and the pool has
/// no spare: small, since every endpoint of a worker queues its first frames while it connects
/// (a hub with 1,000 of them holds 1,000 such buffers at once, and the heap keeps that peak;
/// the frames an endpoint queues while it connects take about 100 bytes).
const TX_MIN: usize = 128;
/// Entries of a connection's send queue.
pub(crate) const MAX_TX_ITEMS: usize = 128;
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
/// Spare send queues (buffer and entry list) an interface keeps for connections that queue next.
const TX_POOL: usize = 4;

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
    pub(super) fn remaining(&self) -> usize {
        match self {
            TxItem::Copy(n) => *n,
            TxItem::Zcopy(s, _) => s.remaining(),
            TxItem::Local { len, sent, .. } => len - sent,
        }
    }
}

/// A connection's send queue: copied bytes and zero-copy pieces, in order. A connection holds a
/// buffer and an entry list only while something is queued: the first bytes or entry borrow a
/// spare pair from the interface's [`TxPool`], and once everything has left (or the connection
/// failed) the pair goes back, so idle connections hold none. Frames the socket takes at once
/// are never copied. The buffer grows on demand, doubling from [`TX_MIN`] up to [`TX_BUF`].
/// The copied bytes after the last entry are counted in `tail_copy`, not listed: a queue of
/// copied frames only (what an endpoint queues while it connects) allocates no entry list.
/// The entry list is boxed and the buffer a boxed slice: every connection holds a queue, and
/// an idle one is then 48 bytes.
pub(crate) struct TxQueue {
    buf: Box<[u8]>,
    head: usize,
    tail: usize,
    /// Copied bytes queued after the last entry of `items` (all of them when it is empty).
    tail_copy: usize,
    items: Option<Box<Items>>,
}

/// The entry list of a send queue.
type Items = VecDeque<TxItem>;
/// A spare buffer and entry list of the [`TxPool`].
type Spare = (Box<[u8]>, Option<Box<Items>>);

impl TxQueue {
    pub(super) fn new() -> Self {
        TxQueue {
            buf: Box::default(),
            head: 0,
            tail: 0,
            tail_copy: 0,
            items: None,
        }
    }
    /// True when nothing is queued.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        // One test for the common case, no copied bytes and no entry list.
        let list = self
            .items
            .as_deref()
            .map_or(0, |i| i as *const Items as usize);
        (self.tail_copy | list) == 0 || self.items_empty()
    }
    /// Nothing queued, the slow way (an entry list or copied bytes exist).
    #[inline(never)]
    fn items_empty(&self) -> bool {
        self.tail_copy == 0 && self.items.as_ref().is_none_or(|i| i.is_empty())
    }
    /// Queued entries, the trailing run of copied bytes counting as one.
    fn entries(&self) -> usize {
        self.items.as_ref().map_or(0, |i| i.len()) + usize::from(self.tail_copy > 0)
    }
    /// True when `bytes` copied bytes and `items` entries fit.
    /// True when an operation of `bytes` copied bytes and `items` entries fits, leaving the
    /// reserve that responses to the peer's requests may use.
    pub(crate) fn fits(&self, bytes: usize, items: usize) -> bool {
        self.entries() + items + RESERVE_ITEMS <= MAX_TX_ITEMS
            && TX_BUF - (self.tail - self.head) >= bytes + RESERVE_BYTES
    }
    /// True when one response fits (responses may use the reserve; operations may not, so
    /// a queue full of our own requests never stops us from answering the peer's, and the
    /// two sides cannot block each other).
    pub(crate) fn fits_response(&self) -> bool {
        self.entries() + 2 <= MAX_TX_ITEMS && TX_BUF - (self.tail - self.head) >= RESP_ROOM
    }
    /// Bytes allocated for the buffer.
    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }
    /// True when the queue holds an entry list (it has queued something and not given the
    /// list back yet).
    pub(crate) fn holds_items(&self) -> bool {
        self.items.is_some()
    }
    /// Grows the buffer to hold at least `need` bytes: the next power of two, at least
    /// [`TX_MIN`], at most [`TX_BUF`] (callers checked `fits`, so `need` is at most that).
    fn grow(&mut self, need: usize) {
        let len = need.next_power_of_two().clamp(TX_MIN, TX_BUF).max(need);
        if len > self.buf.len() {
            let mut b = std::mem::take(&mut self.buf).into_vec();
            b.reserve_exact(len - b.len());
            b.resize(len, 0);
            self.buf = b.into_boxed_slice();
        }
    }
    /// Makes `n` bytes of room after the tail: moves the queued bytes to the front, then grows
    /// the buffer if that was not enough.
    pub(super) fn make_room(&mut self, n: usize) {
        if self.buf.len() - self.tail >= n {
            return;
        }
        if self.head > 0 {
            self.buf.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
        if self.buf.len() - self.tail < n {
            self.grow(self.tail + n);
        }
    }
    /// Space for `n` bytes at the tail (the caller checked `fits`).
    pub(crate) fn reserve(&mut self, pool: &mut TxPool, n: usize) -> &mut [u8] {
        pool.lend(self);
        self.make_room(n);
        &mut self.buf[self.tail..self.tail + n]
    }
    /// Queues `n` bytes written into the reserved space.
    #[inline]
    pub(crate) fn commit(&mut self, n: usize) {
        self.tail += n;
        self.tail_copy += n;
    }
    /// Appends a zero-copy or local entry (after listing the copied bytes queued before it).
    /// The first entry list a queue allocates itself (the pool had no spare) holds two entries,
    /// not the default four (an entry is a few hundred bytes).
    fn push_back(&mut self, item: TxItem) {
        let copy = std::mem::take(&mut self.tail_copy);
        let items = self
            .items
            .get_or_insert_with(|| Box::new(VecDeque::with_capacity(2)));
        if copy > 0 {
            items.push_back(TxItem::Copy(copy));
        }
        items.push_back(item);
    }
    /// Queues the bytes of `pieces` after the first `skip`.
    pub(crate) fn push_pieces(&mut self, pool: &mut TxPool, pieces: &[&[u8]], mut skip: usize) {
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        if skip >= total {
            return;
        }
        let n = total - skip;
        let dst = self.reserve(pool, n);
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
    pub(crate) fn push_front(&mut self, pool: &mut TxPool, b: &[u8]) {
        pool.lend(self);
        let n = b.len();
        if self.head < n {
            self.grow(self.tail - self.head + n);
            self.buf.copy_within(self.head..self.tail, n);
            self.tail = self.tail - self.head + n;
            self.head = n;
        }
        self.head -= n;
        self.buf[self.head..self.head + n].copy_from_slice(b);
        match self.items.as_deref_mut() {
            Some(items) if !items.is_empty() => match items.front_mut() {
                Some(TxItem::Copy(k)) => *k += n,
                _ => items.push_front(TxItem::Copy(n)),
            },
            _ => self.tail_copy += n,
        }
    }
    /// Queues a zero-copy entry.
    pub(crate) fn push_item(&mut self, pool: &mut TxPool, item: TxItem) {
        pool.lend(self);
        self.push_back(item);
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
            for item in self.items.iter().flat_map(|i| i.iter()) {
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
            if self.tail_copy > 0 && cnt < iov.len() {
                iov[cnt] = libc::iovec {
                    iov_base: self.buf[boff..].as_ptr() as *mut libc::c_void,
                    iov_len: self.tail_copy,
                };
                cnt += 1;
            }
            let n = if cnt == 0 { 0 } else { sendv(fd, &iov[..cnt])? };
            let wanted: usize = iov[..cnt].iter().map(|v| v.iov_len).sum();
            self.consume(n, done);
            if self.is_empty() {
                return Ok(true);
            }
            if n < wanted || n == 0 {
                return Ok(false);
            }
        }
    }

    pub(super) fn consume(&mut self, mut n: usize, done: &mut VecDeque<Done>) {
        let mut empty = VecDeque::new();
        let items = self.items.as_deref_mut().unwrap_or(&mut empty);
        while let Some(front) = items.front_mut() {
            let rem = front.remaining();
            if rem == 0 {
                if let Some(TxItem::Zcopy(_, Some(comp))) = items.pop_front() {
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
        if items.is_empty() {
            let k = n.min(self.tail_copy);
            self.tail_copy -= k;
            self.head += k;
            if self.tail_copy == 0 {
                self.head = 0;
                self.tail = 0;
            }
        }
    }

    /// Fails every queued entry with `err` and gives the buffers back to `pool`.
    pub(super) fn fail(&mut self, err: &Error, done: &mut VecDeque<Done>, pool: &mut TxPool) {
        for item in self.items.iter_mut().flat_map(|i| i.drain(..)) {
            if let TxItem::Zcopy(_, Some(comp)) = item {
                done.push_back((comp, Err(err.clone())));
            }
        }
        self.head = 0;
        self.tail = 0;
        self.tail_copy = 0;
        pool.take_back(self);
    }
}

/// The interface's spare send queues (at most [`TX_POOL`] buffer and entry-list pairs): lent to
/// a connection when it queues, taken back once its queue is empty.
pub(crate) struct TxPool {
    free: Vec<Spare>,
}

impl TxPool {
    /// An empty pool (with room for [`TX_POOL`] pairs, so lending and taking back never
    /// allocates).
    pub(crate) fn new() -> Self {
        TxPool {
            free: Vec::with_capacity(TX_POOL),
        }
    }
    /// Gives `q` a spare pair if it holds neither a buffer nor an entry list.
    fn lend(&mut self, q: &mut TxQueue) {
        if q.buf.is_empty() && q.items.is_none() {
            if let Some((b, i)) = self.free.pop() {
                q.buf = b;
                q.items = i;
            }
        }
    }
    /// Takes `q`'s buffer and entry list back when nothing is queued (one beyond [`TX_POOL`] is
    /// freed).
    pub(crate) fn take_back(&mut self, q: &mut TxQueue) {
        if !q.is_empty() || (q.buf.is_empty() && q.items.is_none()) {
            return;
        }
        q.head = 0;
        q.tail = 0;
        let pair = (std::mem::take(&mut q.buf), std::mem::take(&mut q.items));
        if self.free.len() < TX_POOL {
            self.free.push(pair);
        }
    }
    /// Bytes the spare buffers hold.
    pub(crate) fn capacity(&self) -> usize {
        self.free.iter().map(|(b, _)| b.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::md::{Iov, MemoryDomain};
    use crate::tcp::md::TcpMd;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn queue(q: &mut TxQueue, pool: &mut TxPool, b: &[u8]) {
        q.reserve(pool, b.len()).copy_from_slice(b);
        q.commit(b.len());
    }

    /// Sends everything queued and gives the bytes the peer got.
    fn drain(q: &mut TxQueue, pool: &mut TxPool, done: &mut VecDeque<Done>) -> Vec<u8> {
        let (tx, mut rx) = UnixStream::pair().unwrap();
        assert!(q.progress(tx.as_raw_fd(), done).unwrap());
        pool.take_back(q);
        drop(tx);
        let mut got = Vec::new();
        rx.read_to_end(&mut got).unwrap();
        got
    }

    #[test]
    fn copied_frames_alone_hold_no_entry_list() {
        let (mut q, mut pool) = (TxQueue::new(), TxPool::new());
        queue(&mut q, &mut pool, b"world");
        queue(&mut q, &mut pool, b"!");
        q.push_front(&mut pool, b"hello ");
        assert!(!q.is_empty());
        assert!(!q.holds_items(), "copied bytes only: no entry list");
        assert_eq!(q.capacity(), TX_MIN);
        let mut done = VecDeque::new();
        assert_eq!(drain(&mut q, &mut pool, &mut done), b"hello world!");
        assert!(q.is_empty() && q.capacity() == 0 && done.is_empty());
    }

    #[test]
    fn copies_and_zero_copy_entries_leave_in_order() {
        let md = TcpMd::new();
        let m = md.mem_alloc(4).unwrap();
        m.write(0, b"ZZZZ").unwrap();
        let (mut q, mut pool) = (TxQueue::new(), TxPool::new());
        queue(&mut q, &mut pool, b"a");
        let segs = Segs::new(&[Iov::whole(&m)]).unwrap();
        q.push_item(&mut pool, TxItem::Zcopy(segs, Some(CompletionId(5))));
        queue(&mut q, &mut pool, b"bc");
        queue(&mut q, &mut pool, b"d");
        q.push_front(&mut pool, b"<");
        assert!(q.fits(1, 1));
        let mut done = VecDeque::new();
        assert_eq!(drain(&mut q, &mut pool, &mut done), b"<aZZZZbcd");
        assert!(q.is_empty());
        assert!(matches!(done.pop_front(), Some((CompletionId(5), Ok(0)))));
        // Partly consumed: the rest leaves from where the first send stopped.
        queue(&mut q, &mut pool, b"xyz");
        q.consume(1, &mut done);
        assert_eq!(drain(&mut q, &mut pool, &mut done), b"yz");
    }
}
