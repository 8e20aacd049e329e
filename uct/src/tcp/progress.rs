//! Progress: epoll, sending queued bytes, receiving, and dispatching frames and pending
//! requests.

use super::accept::LISTENER_TOKEN;
use super::conn::{Conn, ConnState, Req};
use super::frames::{is_request, unknown_req, Flow};
use super::inner::{ungate, Inner};
use super::iov::recv_raw;
use super::md::RegTable;
use super::posted::{TagRx, TagState};
use super::rxbuf::RxBuf;
use super::rxfast::{RxStart, Taken};
use super::wire::{self, Ack, Kind, StreamPos, StreamSub, WireStatus};
use super::TcpIface;
use crate::iface::EventSink;
use std::time::{Duration, Instant};
use ucs::async_ctx::Ready;
use ucs::{Error, Result};

// The tuning decisions of progress, each named where it is made. Numbers are from the
// commits that introduced them (loopback, callgrind or the perftest/ucp benchmarks).

/// Largest single `recv` straight into a destination (`direct_rx`). `recv` holds the socket
/// lock while it copies, and on loopback the sender's segments (and the ACKs its window waits
/// for) meanwhile go to the socket's backlog: one `recv` of a whole 1 MiB payload made uct
/// put_bw at 1 MiB 0.74 of UCX's; 64 KiB pieces make it 1.18.
const DIRECT_CHUNK: usize = 64 * 1024;
/// Progress calls between two looks at the listening socket and connects in flight when
/// nothing else needs epoll. Buys: a busy loop with few connections makes no `epoll_wait`
/// on 15 calls of 16 (a direct `recv` per connection is all it costs); an incoming
/// connection waits at most 16 calls to be accepted.
const EPOLL_EVERY: u32 = 16;
/// Progress calls between two looks at quiet connections (see `Conn::gate_idle`). Buys: a
/// busy loop makes a quarter of the system calls it made asking at every call, and a message
/// after a quiet spell (a ping-pong whose peer was descheduled) waits at most this many
/// calls, each without a system call: about what one `epoll_wait` per call cost it (16 made
/// that wait too long).
const IDLE_EPOLL_EVERY: u32 = 4;
/// Up to this many connections, progress reads each with a direct non-blocking `recv`
/// instead of asking epoll. Buys: lower ping-pong latency than `epoll_wait` + `recv` (the
/// tcp ping-pong benchmark, tests/tests/tcp_bench.rs); past it, one `epoll_wait(0)` is
/// cheaper than a `recv` per connection.
const DIRECT_MAX: usize = 4;
/// Empty direct polls of a connection after which it waits for epoll (see `Conn::rx_gated`):
/// a ping-pong waits through a few dozen, a peer that went quiet or a slow bulk sender
/// through many more. Buys: each `recv` takes the socket lock the peer's segments and ACKs
/// need; gating cut the receiver's `recv` calls per MiB tenfold (as few as UCX's) with
/// ping-pong latency unchanged.
const GATE_AFTER: u32 = 256;

impl TcpIface {
    /// One progress call: completions, epoll when needed, every connection, completions.
    /// The common calls (no epoll due, nothing to report: see [`TcpIface::quiet`]) take one
    /// look at the connections and service the ones with something to do, with a direct
    /// `recv`; the rest goes out of line to [`TcpIface::progress_busy`]. That split (the short
    /// way inlined, epoll, reports and the general loop out of line) bought 2,378 -> 2,179
    /// instructions per 8-byte tagged message over tcp, 387 -> 343 per idle call
    /// (`bench/ucp-instr.sh`, callgrind).
    #[inline(always)]
    pub(super) fn progress_all<S: EventSink>(&mut self, sink: &mut S) -> usize {
        self.tick = self.tick.wrapping_add(1);
        let first = {
            let g = self.inner.borrow();
            if !Self::quiet(&g, self.tick) {
                None
            } else {
                // A connection with nothing to do costs this look only.
                Some(
                    g.active
                        .iter()
                        .position(|&k| !g.conns[k].nothing_to_do(true)),
                )
            }
        };
        match first {
            None => self.progress_busy(sink),
            Some(None) => 0,
            Some(Some(i)) => self.service_from(i, sink, true, false),
        }
    }

    /// True when a progress call needs neither epoll nor a report first: few connections
    /// (each polled with a direct `recv`), no connect or blocked send or gated payload, no
    /// forced epoll, no cleanup, the listening socket and quiet connections not due (they are
    /// looked at every [`EPOLL_EVERY`], [`IDLE_EPOLL_EVERY`] calls), and no events queued.
    /// (`progress_busy` tests the same epoll conditions again: written out in both places
    /// because sharing them cost the idle progress call 1-2 instructions, callgrind.)
    #[inline(always)]
    fn quiet(g: &Inner, tick: u32) -> bool {
        let quiet_due = g.idle_gated > 0 && tick.is_multiple_of(IDLE_EPOLL_EVERY);
        g.active.len() <= DIRECT_MAX
            && (g.connecting | g.waiting_out | g.gated) == 0
            && !(g.force_epoll | g.cleanup | quiet_due)
            && !tick.is_multiple_of(EPOLL_EVERY)
            && !g.has_events()
    }

    /// [`TcpIface::progress_all`] for a call that is not [`TcpIface::quiet`]: reports
    /// events, asks epoll when it is due, then services the connections. Few connections:
    /// a non-blocking recv on each (cheaper than epoll_wait + recv, and measurably lower
    /// latency). Many connections: one epoll_wait(0), then recv on the ready ones.
    #[inline(never)]
    fn progress_busy<S: EventSink>(&mut self, sink: &mut S) -> usize {
        let mut count = 0;
        let tick = self.tick;
        let (events, polled, few, cleanup) = {
            let g = self.inner.borrow();
            let few = g.active.len() <= DIRECT_MAX;
            let polled = !few
                || (g.connecting | g.waiting_out | g.gated) != 0
                || g.force_epoll
                || g.idle_gated > 0 && tick.is_multiple_of(IDLE_EPOLL_EVERY)
                || tick.is_multiple_of(EPOLL_EVERY);
            (g.has_events(), polled, few, g.cleanup)
        };
        if events {
            count += self.deliver(sink);
        }
        if polled {
            self.poll_events();
        }
        // A call that asked epoll reads the sockets it reported readable, and no others:
        // polling every socket with `recv` as well would only add system calls (and socket
        // lock round trips the peer's incoming segments wait on).
        let direct = few && !polled;
        count + self.service_from(0, sink, direct, events || polled || cleanup)
    }

    /// Services the connections from `active[i]` on that have something to do, then reports
    /// what that (or, with `after`, what came before) queued and cleans up.
    #[inline(never)]
    fn service_from<S: EventSink>(
        &mut self,
        mut i: usize,
        sink: &mut S,
        direct: bool,
        mut after: bool,
    ) -> usize {
        let mut count = 0;
        loop {
            let key = {
                let g = self.inner.borrow();
                // A connection with nothing to do costs this look only.
                loop {
                    match g.active.get(i) {
                        Some(&k) if g.conns[k].nothing_to_do(direct) => i += 1,
                        Some(&k) => break Some(k),
                        None => break None,
                    }
                }
            };
            let Some(key) = key else { break };
            i += 1;
            after = true;
            count += self.service(key, sink, direct);
        }
        // Only what ran in this call (epoll, a connection, the sink) queues events or
        // cleanup work.
        if after {
            let (events, cleanup) = {
                let g = self.inner.borrow();
                (g.has_events(), g.cleanup)
            };
            if events {
                count += self.deliver(sink);
            }
            if cleanup {
                self.cleanup();
            }
        }
        count
    }

    /// Reports the queued endpoint errors, tagged receive completions and completions.
    #[inline(never)]
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

    /// Asks epoll which sockets are ready and marks them. A full batch of events means more
    /// may be ready: epoll is asked again, up to once per batch's worth of connections, so one
    /// progress call sees every ready socket (a hub whose 1,000 peers closed at once reads
    /// every close in one call, not 64 per call).
    #[inline(never)]
    fn poll_events(&mut self) {
        let cap = self.events.capacity();
        if self.poll_batch() < cap {
            return;
        }
        let rounds = self.inner.borrow().active.len() / cap.max(1);
        for _ in 0..rounds {
            if self.poll_batch() < cap {
                break;
            }
        }
    }

    /// One `epoll_wait(0)`: marks the sockets it reports. Gives the number of events.
    #[inline]
    fn poll_batch(&mut self) -> usize {
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let n = match inner.epoll.wait(&mut self.events, Some(Duration::ZERO)) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("epoll_wait failed: {e}");
                return 0;
            }
        };
        inner.force_epoll = false;
        if inner.accept_paused_until.is_some() && inner.resume_accept(Instant::now()) {
            inner.accept_all();
        }
        for ev in self.events.iter().take(n) {
            let token = ev.token;
            if token == LISTENER_TOKEN {
                inner.accept_all();
                continue;
            }
            let key = token as usize;
            let flags = ev.ready;
            let Some(c) = inner.conns.get_mut(key) else {
                continue;
            };
            let err = Ready::ERROR | Ready::HANGUP;
            let mut unblock = false;
            if flags.intersects(Ready::READABLE | err) {
                c.readable = true;
                ungate(c, &mut inner.gated, &mut inner.idle_gated);
            }
            if flags.intersects(Ready::WRITABLE | err) {
                unblock = std::mem::take(&mut c.wait_out);
            }
            inner.waiting_out -= unblock as usize;
            let Some(c) = inner.conns.get_mut(key) else {
                continue;
            };
            let connecting = c.state == ConnState::Connecting;
            if connecting && flags.intersects(Ready::WRITABLE | err) {
                inner.finish_connect(key);
            }
        }
        n
    }

    /// Sends queued bytes, receives and dispatches, retries pending requests.
    #[inline]
    fn service<S: EventSink>(&mut self, key: usize, sink: &mut S, direct: bool) -> usize {
        let taken = {
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
            inner.rx_start(key, direct)
        };
        let mut n = match taken {
            RxStart::Nothing => 0,
            RxStart::Am { buf, head, tail } => self.rx_am(key, buf, head, tail, sink),
            RxStart::General(t) => self.rx(key, t, sink),
        };
        let (pending, detached) = {
            let g = self.inner.borrow();
            match g.conns.get(key) {
                Some(c) => (!c.pending.is_empty(), c.peer_detached),
                None => return n,
            }
        };
        if pending {
            n += self.dispatch_pending(key, sink);
        }
        if pending || detached {
            // A connection both sides detached from closes once its last queued bytes left.
            self.inner.borrow_mut().close_if_unused(key);
        }
        n
    }

    fn dispatch_pending<S: EventSink>(&mut self, key: usize, sink: &mut S) -> usize {
        let mut n = 0;
        loop {
            let (ep, req) = {
                let mut g = self.inner.borrow_mut();
                let bp = g.connect_backpressure;
                let Some(c) = g.conns.get_mut(key) else {
                    return n;
                };
                if c.pending.is_empty() || !c.has_room(bp) || !c.ep_alive {
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

    /// Dispatches what [`Inner::rx_take`] took: a tagged eager message received straight
    /// into its destination (`tag_fin`), then the frames of the receive buffer.
    pub(super) fn rx<S: EventSink>(&mut self, key: usize, taken: Taken, sink: &mut S) -> usize {
        let Taken {
            mut rxb,
            tag_fin,
            established,
        } = taken;
        let mut count = 0;
        if tag_fin {
            // A tagged message received straight into its destination: report it before any
            // later frame, so unexpected messages keep their arrival order.
            self.tag_finish(key, None, sink);
            count += 1;
        }
        let (flow, stalled, n) = self.rx_frames(key, &mut rxb, established, sink);
        count += n;
        self.inner.borrow_mut().rx_settle(key, rxb, flow, stalled);
        count
    }

    /// Decodes and applies the frames in `rxb`. Gives what to do next, whether the decoder
    /// waits for more bytes, and the number of frames applied.
    /// `established`: the connection was set up when the receive started (it stays so; see
    /// `Inner::setup_frame`), so its frames skip the set-up check.
    fn rx_frames<S: EventSink>(
        &mut self,
        key: usize,
        rxb: &mut RxBuf,
        mut established: bool,
        sink: &mut S,
    ) -> (Flow, bool, usize) {
        let mut count = 0;
        loop {
            if !rxb.has_data() {
                // Everything consumed (the decoder would only say that it wants more).
                return (Flow::Continue, true, count);
            }
            // Before a request frame (it will queue a response), make sure the response fits;
            // otherwise stop reading this connection until the send queue drains.
            if rxb.reasm.at_boundary() && is_request(rxb.buf[rxb.head]) {
                let g = self.inner.borrow();
                if !g.conns[key].tx.fits_response() {
                    drop(g);
                    self.inner.borrow_mut().conns[key].rx_paused = true;
                    return (Flow::Continue, false, count);
                }
            }
            match rxb.reasm.next(&rxb.buf[rxb.head..rxb.tail]) {
                Err(e) => {
                    let flow = Flow::Fail(Error::Wire(format!("bad frame: {e}")));
                    return (flow, false, count);
                }
                Ok((0, None)) => return (Flow::Continue, true, count),
                Ok((n, ev)) => {
                    rxb.head += n;
                    if let Some(ev) = ev {
                        count += 1;
                        if !established {
                            if let Some(flow) = self.inner.borrow_mut().setup_frame(key, &ev) {
                                if !matches!(flow, Flow::Continue) {
                                    return (flow, false, count);
                                }
                                continue;
                            }
                            established = true;
                        }
                        let flow = self.handle(key, ev, sink);
                        if !matches!(flow, Flow::Continue) {
                            return (flow, false, count);
                        }
                    }
                }
            }
        }
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
        let Some((dst, len)) = stream_dst(c, &inner.tag, pos) else {
            return Ok(false);
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
            return stream_done(inner, key, pos.sub);
        }
        if n < len {
            // The socket had less than asked for: it is empty now (a second `recv` would
            // only say so); epoll tells when more arrived.
            inner.conns[key].rx.drained = true;
            return Ok(false);
        }
    }
}

/// Where the next bytes of the streamed payload at `pos` go, and how many fit there: `None`
/// when the normal path takes them (a refused put, a truncated or malformed frame).
fn stream_dst(c: &mut Conn, tag: &TagState, pos: StreamPos) -> Option<(*mut u8, usize)> {
    let left = (pos.total - pos.done) as usize;
    Some(match pos.sub {
        wire::StreamSub::Put(h) => {
            match RegTable::global().lookup(h.key, h.remote_addr, pos.total) {
                // SAFETY (of the later write): the whole range is a live registration.
                Ok(p) => (p.wrapping_add(pos.done as usize), left),
                // A refused put: the normal path drains and answers it.
                Err(_) => return None,
            }
        }
        wire::StreamSub::GetResp(a) => {
            let idx = a.req_id.wrapping_sub(1) as usize;
            match c.reqs.get(idx) {
                Some(Req::GetZcopy { segs, .. }) if segs.total() as u64 == pos.total => {
                    match segs.locate(pos.done as usize) {
                        Some((p, l)) => (p, l.min(left)),
                        None => return None,
                    }
                }
                Some(Req::TagGet { segs, want, .. }) if *want as u64 == pos.total => {
                    match segs.locate(pos.done as usize) {
                        Some((p, l)) => (p, l.min(left)),
                        None => return None,
                    }
                }
                // Malformed: the normal path reports it.
                _ => return None,
            }
        }
        wire::StreamSub::TagEager(_) => match &c.tag_rx {
            TagRx::Posted { slot, .. } => {
                match tag.matched(*slot)?.segs.locate(pos.done as usize) {
                    Some((p, l)) => (p, l.min(left)),
                    // Beyond the posted capacity (truncated): the normal path drains it.
                    None => return None,
                }
            }
            TagRx::Unexp { .. } if c.tag_stage.len() as u64 == pos.total => {
                // SAFETY (of the later write): `done..total` lies inside `tag_stage`.
                (
                    c.tag_stage.as_mut_ptr().wrapping_add(pos.done as usize),
                    left,
                )
            }
            _ => return None,
        },
    })
}

/// The streamed payload of `sub` on connection `key` is complete: acknowledges a put that
/// asked for it, finishes a get or the `TagGet` of a matched rendezvous. Gives true for a
/// tagged eager message (the caller reports it).
fn stream_done(inner: &mut Inner, key: usize, sub: StreamSub) -> Result<bool> {
    let c = &mut inner.conns[key];
    match sub {
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
                    let res = super::posted::rndv_result(WireStatus::Ok, want, length);
                    inner.tag.done.push_back((ctx, tag, 0, length, res));
                }
                _ => {}
            }
        }
        wire::StreamSub::TagEager(_) => return Ok(true),
    }
    Ok(false)
}

impl Inner {
    /// Receives what connection `key` has (straight into a streamed payload's destination,
    /// then into the receive buffer) and takes the receive buffer out of the connection for
    /// the dispatch. Gives it, and whether a tagged eager message finished in its destination;
    /// `None` when there is nothing to dispatch.
    pub(super) fn rx_take(&mut self, key: usize, direct: bool) -> Option<Taken> {
        let c = self.conns.get_mut(key)?;
        if c.rx_paused && c.tx.fits_response() {
            c.rx_paused = false;
        }
        let mut tag_fin = false;
        let want = std::mem::take(&mut c.readable) || direct && !c.rx_gated;
        if !c.rx_paused && want {
            tag_fin = match self.rx_recv(key) {
                Err(e) => {
                    self.fail(key, e, false);
                    return None;
                }
                Ok(fin) => fin,
            };
            if direct {
                self.count_poll(key, tag_fin);
            }
        }
        let c = &mut self.conns[key];
        if !c.rx.has_data() && !c.rx.eof && !tag_fin {
            self.rx_pool.take_back(&mut c.rx);
            return None;
        }
        Some(Taken {
            established: !c.expect_hello && c.state != ConnState::Handshake && !c.rejected,
            rxb: std::mem::take(&mut c.rx),
            tag_fin,
        })
    }

    /// The `recv` calls of one read of connection `key`: the rest of a streamed payload goes
    /// straight to its destination, then (unless the socket ran empty) one `recv` into the
    /// receive buffer. Gives true when a tagged eager message finished.
    fn rx_recv(&mut self, key: usize) -> Result<bool> {
        let tag_fin = direct_rx(self, key)?;
        let c = &mut self.conns[key];
        let fd = c.fd();
        if !std::mem::take(&mut c.rx.drained) {
            self.rx_pool.lend(&mut c.rx);
            c.rx.recv(fd)?;
        }
        Ok(tag_fin)
    }

    /// After a direct poll of `key`: counts empty polls, and makes the connection wait for
    /// epoll in the middle of a large payload or after [`GATE_AFTER`] empty polls in a row.
    pub(super) fn count_poll(&mut self, key: usize, tag_fin: bool) {
        let c = &mut self.conns[key];
        if c.rx.has_data() || c.rx.eof || tag_fin {
            c.empty_polls = 0;
            return;
        }
        c.empty_polls += 1;
        let streaming = c.rx.reasm.streaming().is_some();
        if !c.rx_gated && (streaming || c.empty_polls >= GATE_AFTER) {
            c.rx_gated = true;
            c.gate_idle = !streaming;
            c.empty_polls = 0;
            if streaming {
                self.gated += 1;
            } else {
                self.idle_gated += 1;
            }
        }
    }

    /// Puts the receive buffer back after a dispatch that ended with `flow` (into the
    /// connection that took over the socket, for a redirect), and closes the connection on a
    /// failure or on the peer's close; otherwise sends the responses the dispatch queued.
    fn rx_settle(&mut self, key: usize, mut rxb: RxBuf, flow: Flow, stalled: bool) {
        match flow {
            Flow::Redirect(to) => {
                let old = std::mem::replace(&mut self.conns[to].rx, rxb);
                self.conns[key].rx = old;
                self.rx_pool.release(&mut self.conns[key].rx);
                self.conns[key].state = ConnState::Failed(Box::new(Error::Canceled));
                self.cleanup = true;
                // The connection that took the socket over holds a buffer only for bytes
                // left in it, and sends what it queued (an adopting dial's hello ack) now.
                self.rx_pool.take_back(&mut self.conns[to].rx);
                if let Err(e) = self.flush_tx(to) {
                    self.fail(to, e, false);
                }
            }
            Flow::Fail(e) => {
                self.conns[key].rx = rxb;
                self.fail(key, e, false);
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
                let c = &mut self.conns[key];
                c.rx = rxb;
                if matches!(c.state, ConnState::Failed(_)) {
                    self.rx_pool.release(&mut c.rx);
                } else {
                    self.rx_pool.take_back(&mut c.rx);
                }
                if eof_now {
                    let accepted = self.conns[key].ep.is_none();
                    let err = if clean {
                        Error::ConnectionReset("the peer closed the connection".into())
                    } else {
                        Error::ConnectionReset(
                            "the peer closed the connection in the middle of a frame".into(),
                        )
                    };
                    self.fail(key, err, clean && accepted);
                } else if self.conns.contains(key) {
                    // Responses queued by the dispatch go out now: a get is one round trip.
                    if let Err(e) = self.flush_tx(key) {
                        self.fail(key, e, false);
                    }
                    // The peer detached, or answered our last request after we did.
                    self.close_if_unused(key);
                }
            }
        }
    }
}
