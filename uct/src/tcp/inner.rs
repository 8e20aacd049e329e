//! The state the interface and its endpoints share ([`Inner`]), and what every part of the
//! transport does with it: epoll interest, sending, closing a failed connection, queueing a
//! response.

use super::conn::{Conn, ConnState, Req};
use super::posted::{TagRx, TagState};
use super::rxbuf::RxPool;
use super::sockopt::SockCfg;
use super::txq::{Done, TxItem, TxPool};
use super::wire::{FrameHeader, Kind};
use super::IfaceAddr;
use crate::ep::{CompletionId, EpId};
use slab::Slab;
use socket2::Socket;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddrV4;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use ucs::async_ctx::{EventSet, Interest};
use ucs::{Error, Result};

/// State shared by the interface and its endpoints.
pub(crate) struct Inner {
    /// The connections, boxed: the slab keeps its capacity after connections close (a hub
    /// that lost many simultaneous connects keeps twice its connection count in slots), and a
    /// vacant slot then costs a pointer, not a whole connection.
    pub(crate) conns: Slab<Box<Conn>>,
    pub(crate) active: Vec<usize>,
    pub(crate) epoll: EventSet,
    pub(crate) listener: Option<Socket>,
    pub(crate) done: VecDeque<Done>,
    pub(crate) errors: VecDeque<(EpId, Error)>,
    pub(crate) by_conn_id: HashMap<u64, usize>,
    pub(crate) iface_flushes: Slab<(CompletionId, usize, Option<Error>)>,
    pub(crate) next_ep: u32,
    pub(crate) next_conn_id: u64,
    pub(crate) sock_cfg: SockCfg,
    /// Operations on a connection not up yet get back-pressure instead of being queued
    /// ([`crate::IfaceParams::connect_backpressure`]).
    pub(crate) connect_backpressure: bool,
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
    /// Connections with `rx_gated` set in the middle of a payload (progress asks epoll at
    /// every call while there are any).
    pub(crate) gated: usize,
    /// Connections with `rx_gated` and `gate_idle` set (quiet ones: epoll is asked for them
    /// on one progress call in a few, so a quiet connection does not cost a busy progress
    /// loop a system call per call).
    pub(crate) idle_gated: usize,
    /// At the descriptor limit: the listening socket is out of the epoll set until this time.
    pub(crate) accept_paused_until: Option<Instant>,
    /// The pause the next descriptor-limit failure gets (doubles up to `ACCEPT_PAUSE_MAX`,
    /// back to `ACCEPT_PAUSE_MIN` after an accept succeeds).
    pub(crate) accept_pause: Duration,
    /// Accept failures are logged at most once a second.
    pub(crate) accept_log: ucs::limits::RateLimit,
    /// Spare receive buffers, lent to the connections that read.
    pub(crate) rx_pool: RxPool,
    /// Spare send queues, lent to the connections that queue.
    pub(crate) tx_pool: TxPool,
}

impl Inner {
    /// True when endpoint errors, tagged receive completions or completions wait to be
    /// reported.
    #[inline]
    pub(super) fn has_events(&self) -> bool {
        !(self.errors.is_empty() && self.tag.done.is_empty() && self.done.is_empty())
    }

    pub(super) fn set_mask(&mut self, key: usize, mask: Interest) {
        let c = &mut self.conns[key];
        if c.epoll_mask == mask {
            return;
        }
        if let Some(s) = c.sock.as_ref() {
            let r = if c.epoll_mask.is_empty() {
                self.epoll.add(s.as_raw_fd(), mask, key as u64)
            } else {
                self.epoll.modify(s.as_raw_fd(), mask, key as u64)
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
        let c = &self.conns[key];
        if c.tx.is_empty() || c.wait_out || !c.is_connected() {
            return Ok(());
        }
        self.flush_queued(key)
    }

    /// [`Inner::flush_tx`] for a connection with queued bytes.
    #[inline(never)]
    fn flush_queued(&mut self, key: usize) -> Result<()> {
        let c = &mut self.conns[key];
        let fd = c.fd();
        if c.tx.progress(fd, &mut self.done)? {
            self.tx_pool.take_back(&mut c.tx);
            if c.epoll_mask.contains(Interest::WRITABLE) {
                self.set_mask(key, Interest::READABLE);
            }
        } else {
            self.wait_writable(key);
        }
        Ok(())
    }

    /// Closes connection `key` (its socket now) when no endpoint on either side uses it and
    /// nothing is left on it (see `Conn::unused`). Inlined down to the look at
    /// `peer_detached` (false on every busy connection; the rest is out of line).
    #[inline(always)]
    pub(crate) fn close_if_unused(&mut self, key: usize) {
        if self.conns.get(key).is_some_and(|c| c.peer_detached) {
            self.close_detached_if_unused(key);
        }
    }

    #[inline(never)]
    fn close_detached_if_unused(&mut self, key: usize) {
        if self.conns.get(key).is_some_and(|c| c.unused()) {
            self.fail(
                key,
                Error::ConnectionReset("closed: no endpoint uses the connection".into()),
                true,
            );
        }
    }

    /// The socket of `key` took less than offered: wait for epoll to report it writable.
    pub(crate) fn wait_writable(&mut self, key: usize) {
        let c = &mut self.conns[key];
        if !c.wait_out {
            c.wait_out = true;
            self.waiting_out += 1;
        }
        self.set_mask(key, Interest::READABLE | Interest::WRITABLE);
    }

    pub(super) fn clear_wait_out(&mut self, key: usize) {
        let c = &mut self.conns[key];
        if c.wait_out {
            c.wait_out = false;
            self.waiting_out -= 1;
        }
        ungate(c, &mut self.gated, &mut self.idle_gated);
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
        let err = naming_peer(err, c.peer);
        if c.state == ConnState::Connecting {
            self.connecting -= 1;
        }
        if c.wait_out {
            c.wait_out = false;
            self.waiting_out -= 1;
        }
        ungate(c, &mut self.gated, &mut self.idle_gated);
        if let Some(s) = c.sock.take() {
            if !c.epoll_mask.is_empty() {
                let _ = self.epoll.remove(s.as_raw_fd());
            }
            c.epoll_mask = Interest::empty();
        }
        c.tx.fail(&err, &mut self.done, &mut self.tx_pool);
        self.rx_pool.release(&mut c.rx);
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
        if let TagRx::Posted { slot, hdr, .. } = std::mem::take(&mut c.tag_rx) {
            if let Some(p) = self.tag.take_matched(slot) {
                self.tag
                    .done
                    .push_back((p.ctx, hdr.tag, hdr.imm, 0, Err(err.clone())));
            }
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
        c.state = ConnState::Failed(Box::new(err));
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

    pub(super) fn remove(&mut self, key: usize) {
        self.clear_wait_out(key);
        let c = self.conns.remove(key);
        if let Some(s) = c.sock.as_ref() {
            if !c.epoll_mask.is_empty() {
                let _ = self.epoll.remove(s.as_raw_fd());
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
        let key = self.conns.insert(Box::new(Conn::new(state, Some(id))));
        self.active.push(key);
        (key, id)
    }

    /// Queues a response frame on `key` (room was checked before the request was decoded).
    pub(super) fn respond(&mut self, key: usize, kind: Kind, sub: &[u8], local: Option<TxItem>) {
        let payload = local.as_ref().map_or(0, |l| l.remaining());
        let c = &mut self.conns[key];
        let hdr = FrameHeader::new(kind, 0, payload).to_bytes();
        c.tx.push_pieces(&mut self.tx_pool, &[&hdr, sub], 0);
        if let Some(l) = local {
            c.tx.push_item(&mut self.tx_pool, l);
        }
    }
}

pub(super) fn iface_flush_part_done(
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

/// Clears connection `c`'s `rx_gated` (if set) and takes it off its counter (`gated`, or
/// `idle_gated` for a quiet connection). Gives true when it was gated.
pub(super) fn ungate(c: &mut Conn, gated: &mut usize, idle_gated: &mut usize) -> bool {
    if !std::mem::take(&mut c.rx_gated) {
        return false;
    }
    if std::mem::take(&mut c.gate_idle) {
        *idle_gated -= 1;
    } else {
        *gated -= 1;
    }
    true
}

/// `err` with the peer's address in its text (unless it names it already), so the one error a
/// client sees for a lost connection says which peer it was.
fn naming_peer(err: Error, peer: Option<SocketAddrV4>) -> Error {
    let Some(peer) = peer else {
        return err;
    };
    let named = |s: String| {
        let p = peer.to_string();
        if s.contains(&p) {
            s
        } else {
            format!("tcp peer {p}: {s}")
        }
    };
    match err {
        Error::PeerFailure(s) => Error::PeerFailure(named(s)),
        Error::ConnectionReset(s) => Error::ConnectionReset(named(s)),
        Error::Timeout(s) => Error::Timeout(named(s)),
        Error::Unreachable(s) => Error::Unreachable(named(s)),
        Error::Io {
            context,
            kind,
            message,
        } => Error::Io {
            context: named(context),
            kind,
            message,
        },
        other => other,
    }
}
