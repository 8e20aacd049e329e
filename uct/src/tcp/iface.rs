//! The tcp interface: opening it, its attributes, endpoint creation, flush, events, and
//! closing it. Progress is in `progress.rs`, received frames in `frames.rs`, connection set-up
//! in `handshake.rs`.
//!
//! The interface and its endpoints share one [`Inner`] (`Rc<RefCell<_>>`, single-threaded like
//! a UCX worker). Progress never holds that borrow while it calls the sink, so sink callbacks
//! may call endpoint operations: received bytes are taken out of the connection for the
//! duration of the dispatch (a move of a `Vec`, not a copy or an allocation).

use super::accept::{ACCEPT_PAUSE_MIN, LISTENER_TOKEN};
use super::conn::{Conn, ConnState, Req, AM_MAX_HDR, MAX_BCOPY, MAX_REQS, MAX_SHORT};
use super::inner::Inner;
use super::iov::MAX_IOV;
use super::posted::TagState;
use super::rxbuf::RxPool;
use super::sockopt::SockCfg;
use super::txq::TxPool;
use super::wire::{self, FlushReq, FrameHeader, Hello, HelloMode, Kind};
use super::{DevAddr, EpAddr, IfaceAddr, NetIf, TcpEp};
use crate::caps::{
    AtomicCaps, AtomicOps, EventFlags, IfaceAttr, IfaceFlags, OpLimits, PerfModel, TagLimits,
};
use crate::ep::{CompletionId, EpId, TagRecvId};
use crate::iface::{EventSink, Iface};
use crate::md::Iov;
use slab::Slab;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};
use ucs::async_ctx::{EventSet, Events, Interest};
use ucs::{Error, Outcome, Result};

/// The tcp interface.
pub struct TcpIface {
    pub(crate) inner: Rc<RefCell<Inner>>,
    attr: IfaceAttr,
    dev: NetIf,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    netns: u64,
    pub(super) tick: u32,
    pub(super) events: Events,
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
            recv_max_outstanding: super::posted::MAX_POSTED,
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
        Self::open_cfg(dev, sock_cfg)
    }

    /// [`open`](Self::open) with the given socket options.
    pub(crate) fn open_cfg(dev: NetIf, sock_cfg: SockCfg) -> Result<Self> {
        let ctx = |what: String| move |e: io::Error| Error::io(what, e);
        let listener = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
            .map_err(ctx("creating the tcp listening socket".into()))?;
        listener
            .set_reuse_address(true)
            .map_err(ctx("SO_REUSEADDR".into()))?;
        listener
            .set_nonblocking(true)
            .map_err(ctx("O_NONBLOCK".into()))?;
        // Before `listen`: accepted connections negotiate their window from these sizes.
        sock_cfg.apply_buffers(&listener)?;
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
        let epoll = EventSet::new()?;
        epoll.add(listener.as_raw_fd(), Interest::READABLE, LISTENER_TOKEN)?;
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
            connect_backpressure: false,
            connecting: 0,
            local,
            cleanup: false,
            closed: false,
            force_epoll: false,
            tag: TagState::new(),
            next_seq: HashMap::new(),
            waiting_out: 0,
            gated: 0,
            idle_gated: 0,
            accept_paused_until: None,
            accept_pause: ACCEPT_PAUSE_MIN,
            accept_log: ucs::limits::RateLimit::new(Duration::from_secs(1)),
            rx_pool: RxPool::new(),
            tx_pool: TxPool::new(),
        };
        Ok(TcpIface {
            inner: Rc::new(RefCell::new(inner)),
            attr: make_attr(&dev),
            iface_addr: local.encode(),
            dev_addr,
            dev,
            netns,
            tick: 0,
            events: Events::with_capacity(64),
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

    /// Bytes the connections' send and receive buffers hold now, with the spare receive
    /// buffers (they grow on demand), for tests and diagnostics.
    pub fn connection_buffer_bytes(&self) -> usize {
        let inner = self.inner.borrow();
        let conns: usize = inner
            .conns
            .iter()
            .map(|(_, c)| c.tx.capacity() + c.rx.capacity())
            .sum();
        conns + inner.rx_pool.capacity() + inner.tx_pool.capacity()
    }

    /// Connections that hold a send buffer or entry list now (only those with something
    /// queued), for tests and diagnostics.
    pub fn connections_holding_tx(&self) -> usize {
        let inner = self.inner.borrow();
        inner
            .conns
            .iter()
            .filter(|(_, c)| c.tx.capacity() > 0 || c.tx.holds_items())
            .count()
    }

    /// Connections that hold a receive buffer now (only those with bytes waiting in it), for
    /// tests and diagnostics.
    pub fn connections_holding_rx(&self) -> usize {
        let inner = self.inner.borrow();
        inner
            .conns
            .iter()
            .filter(|(_, c)| c.rx.capacity() > 0)
            .count()
    }
}

/// How long a destroyed interface lets queued bytes leave before its sockets close.
const DRAIN_DEADLINE: Duration = Duration::from_millis(500);
/// Longest single wait for a socket to take more bytes while draining.
const DRAIN_WAIT: Duration = Duration::from_millis(10);

/// Gives the queued bytes of connections `keys` a bounded chance to leave (see
/// [`DRAIN_DEADLINE`]): sends what each socket takes and waits in a ucs event set of its own
/// for one to become writable (the interface's set also reports readable sockets, which would
/// end every wait at once). A connection whose send fails is left as it is.
fn drain_queued(inner: &mut Inner, keys: &[usize]) {
    let deadline = Instant::now() + DRAIN_DEADLINE;
    let Ok(writable) = EventSet::new() else {
        return;
    };
    let mut waiting: Vec<usize> = Vec::with_capacity(keys.len());
    for &key in keys {
        let c = &inner.conns[key];
        if c.is_connected()
            && !c.tx.is_empty()
            && writable.add(c.fd(), Interest::WRITABLE, key as u64).is_ok()
        {
            waiting.push(key);
        }
    }
    while !waiting.is_empty() && Instant::now() <= deadline {
        waiting.retain(|&key| {
            let c = &mut inner.conns[key];
            let fd = c.fd();
            let more = c.tx.progress(fd, &mut inner.done).is_ok() && !c.tx.is_empty();
            if !more {
                let _ = writable.remove(fd);
            }
            more
        });
        if !waiting.is_empty() && writable.wait_any(Some(DRAIN_WAIT)).is_err() {
            return;
        }
    }
}

impl Drop for TcpIface {
    fn drop(&mut self) {
        let Ok(mut g) = self.inner.try_borrow_mut() else {
            return;
        };
        let inner = &mut *g;
        let keys: Vec<usize> = inner.active.clone();
        drain_queued(inner, &keys);
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
                && !c.detached
                && !c.peer_detached
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
        self.progress_all(sink)
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
            c.tx.push_pieces(&mut inner.tx_pool, &[&f], 0);
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
        Some(self.inner.borrow().epoll.as_raw_fd())
    }

    fn wake_within(&self) -> Option<Duration> {
        let g = self.inner.borrow();
        g.accept_paused_until
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    fn event_arm(&mut self, events: EventFlags) -> Result<()> {
        let _ = events;
        let mut g = self.inner.borrow_mut();
        if !g.done.is_empty() || !g.errors.is_empty() {
            return Err(Error::Busy("completions are waiting for progress".into()));
        }
        if g.accept_paused_until.is_some_and(|t| Instant::now() >= t) {
            return Err(Error::Busy(
                "the listening socket's pause is over: progress resumes accepting".into(),
            ));
        }
        for i in 0..g.active.len() {
            let key = g.active[i];
            let c = &g.conns[key];
            if c.rx.has_data() || !c.pending.is_empty() && c.has_room(g.connect_backpressure) {
                return Err(Error::Busy("received data is waiting for progress".into()));
            }
            let unsent_hello = c.state == ConnState::Handshake && c.ctl.is_some();
            if unsent_hello || c.is_connected() && !c.tx.is_empty() {
                g.set_mask(key, Interest::READABLE | Interest::WRITABLE);
            }
        }
        let n = g.epoll.wait(&mut self.events, Some(Duration::ZERO))?;
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
