//! The send path of a tcp endpoint: a frame (its pieces copied, maybe followed by zero-copy
//! segments) goes to the socket, or into the connection's send queue when the socket does not
//! take it all or bytes wait before it; bcopy frames are packed straight into the queue; the
//! request frames of gets and atomics.

use super::super::conn::{ConnState, Req, MAX_BCOPY, MAX_REQS};
use super::super::iov::{send_once, sendv, Segs, MAX_IOV};
use super::super::txq::TxItem;
use super::super::wire::{AtomicMode, AtomicReq, FrameHeader, GetReq, Kind};
use super::TcpEp;
use crate::ep::{AtomicOp, CompletionId};
use crate::md::RemoteKey;
use crate::small_copy::put_small;
use std::mem::MaybeUninit;
use ucs::{Error, Outcome, Result};

/// Largest frame `send` copies into one stack buffer for a single-buffer `send` (larger
/// ones go out with `sendmsg` of their pieces).
const SMALL_FRAME: usize = 256;

/// How far a frame got.
pub(in crate::tcp) enum Sent {
    /// The kernel took all of it.
    All,
    /// Some or all of it waits in the connection's send queue.
    Queued,
}

impl TcpEp {
    /// Sends `pieces` (copied if they cannot leave now) followed by the zero-copy `z`.
    /// `Ok(None)` is back-pressure. `req`, if given, is recorded once the frame is accepted.
    #[inline]
    pub(in crate::tcp) fn send(
        &mut self,
        pieces: &[&[u8]],
        z: Option<(Segs, Option<CompletionId>)>,
        req: Option<Req>,
    ) -> Result<Option<Sent>> {
        if z.is_none() && req.is_none() {
            let len = pieces.iter().map(|p| p.len()).sum();
            if let Some(r) = self.send_small(&[], pieces, len) {
                return r;
            }
        }
        self.send_any(pieces, z, req)
    }

    /// The common case of `send`: a small frame of copied pieces only (`head`, then
    /// `pieces`), on a connection that is up with nothing queued, leaves with one `send` from
    /// a stack buffer (without moving the large `z` and `req` arguments of the general path,
    /// nor gathering `head` and `pieces` into one list first). `len` is the frame's length
    /// (`head` and `pieces` together). `None` when the general path must take the frame.
    #[inline]
    pub(super) fn send_small(
        &mut self,
        head: &[u8],
        pieces: &[&[u8]],
        len: usize,
    ) -> Option<Result<Option<Sent>>> {
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let c = &mut inner.conns[self.key];
        if len > SMALL_FRAME
            || !c.is_connected()
            || !c.tx.is_empty()
            || !c.pending.is_empty() && !c.dispatching
        {
            return None;
        }
        // Not cleared first: only the `at` bytes written below are read.
        let mut b = [MaybeUninit::<u8>::uninit(); SMALL_FRAME];
        let mut at = 0;
        if !head.is_empty() {
            put_small(&mut b, 0, head);
            at = head.len();
        }
        for p in pieces {
            put_small(&mut b, at, p);
            at += p.len();
        }
        // SAFETY: `put_small` initialised the first `at` bytes.
        let frame = unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), at) };
        Some(match send_once(c.fd(), frame) {
            Ok(n) if n == at => Ok(Some(Sent::All)),
            Ok(n) => {
                c.tx.push_pieces(&mut inner.tx_pool, &[frame], n);
                inner.wait_writable(self.key);
                Ok(Some(Sent::Queued))
            }
            Err(e) => {
                inner.fail(self.key, e.clone(), false);
                Err(e)
            }
        })
    }

    /// `send` for any frame.
    #[inline(never)]
    pub(super) fn send_any(
        &mut self,
        pieces: &[&[u8]],
        z: Option<(Segs, Option<CompletionId>)>,
        req: Option<Req>,
    ) -> Result<Option<Sent>> {
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let key = self.key;
        let res = (|| -> Result<Option<Sent>> {
            let c = &mut inner.conns[key];
            c.check_usable()?;
            if !c.pending.is_empty() && !c.dispatching {
                return Ok(None);
            }
            if req.is_some() && c.reqs.len() >= MAX_REQS {
                return Ok(None);
            }
            let copy_len: usize = pieces.iter().map(|p| p.len()).sum();
            let nitems = 1 + z.is_some() as usize;
            let connected = c.is_connected();
            if !connected && inner.connect_backpressure {
                // Back-pressure until the connection is up (as UCX's tcp): an operation that
                // completed now could be lost with its queued bytes if the process ended
                // before the connection did.
                return Ok(None);
            }
            let fd = c.fd();
            if connected && !c.tx.is_empty() {
                inner.flush_tx(key)?;
            }
            let c = &mut inner.conns[key];
            let sent = if connected && c.tx.is_empty() && z.is_none() && copy_len <= SMALL_FRAME {
                // A small frame: copied into one buffer and sent with `send`.
                let mut b = [0u8; SMALL_FRAME];
                let mut at = 0;
                for p in pieces {
                    b[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
                let n = send_once(fd, &b[..at])?;
                if n == at {
                    Sent::All
                } else {
                    c.tx.push_pieces(&mut inner.tx_pool, pieces, n);
                    Sent::Queued
                }
            } else if connected && c.tx.is_empty() {
                let mut iov = [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; MAX_IOV + 4];
                let mut cnt = 0;
                for p in pieces {
                    if !p.is_empty() {
                        iov[cnt] = libc::iovec {
                            iov_base: p.as_ptr() as *mut libc::c_void,
                            iov_len: p.len(),
                        };
                        cnt += 1;
                    }
                }
                let zlen = z.as_ref().map_or(0, |(s, _)| s.remaining());
                if let Some((s, _)) = z.as_ref() {
                    s.fill(&mut iov, &mut cnt);
                }
                let n = sendv(fd, &iov[..cnt])?;
                if n == copy_len + zlen {
                    Sent::All
                } else {
                    c.tx.push_pieces(&mut inner.tx_pool, pieces, n);
                    if let Some((mut s, comp)) = z {
                        s.advance(n.saturating_sub(copy_len));
                        c.tx.push_item(&mut inner.tx_pool, TxItem::Zcopy(s, comp));
                    }
                    Sent::Queued
                }
            } else {
                if !c.tx.fits(copy_len, nitems) {
                    return Ok(None);
                }
                c.tx.push_pieces(&mut inner.tx_pool, pieces, 0);
                if let Some((s, comp)) = z {
                    c.tx.push_item(&mut inner.tx_pool, TxItem::Zcopy(s, comp));
                }
                Sent::Queued
            };
            if let Some(r) = req {
                c.reqs.insert(r);
            }
            if connected && matches!(sent, Sent::Queued) {
                // The socket took less than offered (or the queue waits already).
                inner.wait_writable(key);
            }
            Ok(Some(sent))
        })();
        if let Err(e) = &res {
            if !matches!(
                inner.conns[key].state,
                ConnState::Failed(_) | ConnState::Idle
            ) {
                inner.fail(key, e.clone(), false);
            }
        }
        res
    }

    /// Packs a frame straight into the send queue.
    pub(super) fn bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        kind: Kind,
        am_id: u8,
        sub: &[u8],
        pack: F,
        validate: impl FnOnce(usize) -> Result<()>,
    ) -> Result<Outcome<usize>> {
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let key = self.key;
        let res = (|| -> Result<Outcome<usize>> {
            let c = &mut inner.conns[key];
            c.check_usable()?;
            if !c.pending.is_empty() && !c.dispatching {
                return Ok(Outcome::NoResource);
            }
            let connected = c.is_connected();
            if !connected && inner.connect_backpressure {
                // Back-pressure until the connection is up (see `send_any`).
                return Ok(Outcome::NoResource);
            }
            if connected && !c.tx.is_empty() {
                inner.flush_tx(key)?;
            }
            let c = &mut inner.conns[key];
            let hl = FrameHeader::LEN + sub.len();
            let room = hl + MAX_BCOPY;
            if !c.tx.fits(room, 1) {
                return Ok(Outcome::NoResource);
            }
            let was_empty = c.tx.is_empty();
            let buf = c.tx.reserve(&mut inner.tx_pool, room);
            let len = pack(&mut buf[hl..]);
            if len > MAX_BCOPY {
                return Err(Error::InvalidParam(format!(
                    "pack callback reported {len} bytes, more than the {MAX_BCOPY}-byte buffer"
                )));
            }
            validate(len)?;
            FrameHeader::new(kind, am_id, len).encode(&mut buf[..FrameHeader::LEN]);
            buf[FrameHeader::LEN..hl].copy_from_slice(sub);
            c.tx.commit(hl + len);
            if connected && was_empty {
                inner.flush_tx(key)?;
            }
            Ok(Outcome::Done(len))
        })();
        if let Err(e) = &res {
            let st = &inner.conns[key].state;
            let io_failure = matches!(
                e,
                Error::Io { .. } | Error::ConnectionReset(_) | Error::PeerFailure(_)
            );
            if io_failure && !matches!(st, ConnState::Failed(_)) {
                inner.fail(key, e.clone(), false);
            }
        }
        res
    }

    pub(super) fn note_put(&self) {
        self.inner.borrow_mut().conns[self.key].put_seq += 1;
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn atomic(
        &mut self,
        op: AtomicOp,
        size: u8,
        mode: AtomicMode,
        value: u64,
        compare: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Option<CompletionId>,
    ) -> Result<Outcome<()>> {
        rkey.check(remote_addr, size as usize)?;
        if mode == AtomicMode::Post && op == AtomicOp::Swap {
            return Err(Error::InvalidParam(
                "swap has no post form: use a fetching atomic".into(),
            ));
        }
        let (req_id, req) = match comp {
            Some(comp) => match self.next_req_id() {
                Some(id) => (id, Some(Req::Atomic { comp })),
                None => return Ok(Outcome::NoResource),
            },
            None => (0, None),
        };
        let mut f = [0u8; FrameHeader::LEN + AtomicReq::LEN];
        FrameHeader::new(Kind::AtomicReq, 0, 0).encode(&mut f);
        AtomicReq {
            req_id,
            remote_addr,
            key: rkey.tl_value,
            value,
            compare,
            op,
            size,
            mode,
        }
        .encode(&mut f[FrameHeader::LEN..]);
        match self.send(&[&f], None, req)? {
            None => Ok(Outcome::NoResource),
            Some(_) if comp.is_some() => Ok(Outcome::InProgress),
            Some(_) => {
                self.note_put();
                Ok(Outcome::DONE)
            }
        }
    }

    pub(super) fn get(
        &mut self,
        len: usize,
        remote_addr: u64,
        rkey: &RemoteKey,
        make: impl FnOnce() -> Result<Req>,
    ) -> Result<Outcome> {
        rkey.check(remote_addr, len)?;
        let Some(req_id) = self.next_req_id() else {
            return Ok(Outcome::NoResource);
        };
        let req = make()?;
        let mut f = [0u8; FrameHeader::LEN + GetReq::LEN];
        FrameHeader::new(Kind::GetReq, 0, 0).encode(&mut f);
        GetReq {
            req_id,
            remote_addr,
            key: rkey.tl_value,
            length: len as u64,
        }
        .encode(&mut f[FrameHeader::LEN..]);
        Ok(match self.send(&[&f], None, Some(req))? {
            None => Outcome::NoResource,
            Some(_) => Outcome::InProgress,
        })
    }
}
