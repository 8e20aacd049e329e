//! Connection set-up: dialing, the hello and its acknowledgement, simultaneous connects, and
//! connect-to-ep attachment (the protocol is described in [`super::wire::Hello`]).

use super::conn::{ConnState, Ctl};
use super::frames::Flow;
use super::inner::Inner;
use super::iov::sendv;
use super::wire::{FrameHeader, Hello, HelloAck, HelloMode, Kind, RxEvent};
use super::IfaceAddr;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use ucs::async_ctx::Interest;
use ucs::{Error, Result};

impl Inner {
    /// The frames a connection takes before it carries data: the first frame of an accepted
    /// connection must be a hello, a dial in its handshake takes only the acceptor's hello
    /// ack, and a connection that lost a simultaneous connect takes nothing. `None` for a frame
    /// of an established connection (the caller applies it).
    #[inline]
    pub(super) fn setup_frame(&mut self, key: usize, ev: &RxEvent<'_>) -> Option<Flow> {
        let c = &self.conns[key];
        if !c.expect_hello && c.state != ConnState::Handshake && !c.rejected {
            return None;
        }
        self.setup_frame_slow(key, *ev)
    }

    /// [`Inner::setup_frame`] for a connection still being set up.
    #[inline(never)]
    fn setup_frame_slow(&mut self, key: usize, ev: RxEvent<'_>) -> Option<Flow> {
        let c = &mut self.conns[key];
        if c.expect_hello {
            let RxEvent::Hello(h) = ev else {
                return Some(Flow::Fail(Error::Wire(
                    "the first frame on a connection is not a hello".into(),
                )));
            };
            c.expect_hello = false;
            return Some(match h.mode {
                HelloMode::Iface => iface_hello(self, key, h),
                HelloMode::Ep => attach(self, key, h),
            });
        }
        if c.state == ConnState::Handshake {
            return Some(match ev {
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
            });
        }
        if c.rejected {
            return Some(Flow::Fail(Error::Wire(
                "a frame on a connection that lost a simultaneous connect".into(),
            )));
        }
        None
    }

    /// Sends what is left of the connection's hello.
    pub(super) fn send_ctl(&mut self, key: usize) -> Result<()> {
        let c = &mut self.conns[key];
        let fd = c.fd();
        let Some(ctl) = c.ctl.as_mut() else {
            return Ok(());
        };
        let rest = &ctl.frame[ctl.sent..];
        let iov = [libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        }];
        ctl.sent += sendv(fd, &iov)?;
        let mask = if ctl.sent < ctl.frame.len() {
            Interest::READABLE | Interest::WRITABLE
        } else {
            c.ctl = None;
            Interest::READABLE
        };
        self.set_mask(key, mask);
        Ok(())
    }

    /// The state a dial enters once its TCP connect completed.
    pub(super) fn connected_state(&self, key: usize) -> ConnState {
        if self.conns[key].dialed {
            ConnState::Handshake
        } else {
            ConnState::Connected
        }
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
            c.ctl = Some(Box::new(Ctl { frame: hb, sent: 0 }));
            c.dialed = true;
            c.seq = hello.src_conn_id;
            c.peer_iface = Some(IfaceAddr {
                ip: *to.ip(),
                port: to.port(),
            });
        } else {
            c.tx.push_pieces(&mut self.tx_pool, &[&hb], 0);
        }
        c.sock = Some(sock);
        c.peer = Some(to);
        if connected {
            let state = self.connected_state(key);
            self.conns[key].state = state;
            self.set_mask(key, Interest::READABLE);
            self.send_ctl(key)?;
        } else {
            c.state = ConnState::Connecting;
            self.connecting += 1;
            self.set_mask(key, Interest::READABLE | Interest::WRITABLE);
        }
        Ok(())
    }

    /// Finishes a connect that epoll reported.
    pub(super) fn finish_connect(&mut self, key: usize) {
        let c = &mut self.conns[key];
        let res = c.sock.as_ref().map(|s| s.take_error());
        match res {
            Some(Ok(None)) => {
                self.connecting -= 1;
                let state = self.connected_state(key);
                let c = &mut self.conns[key];
                c.state = state;
                let mask = Interest::READABLE | Interest::WRITABLE;
                c.epoll_mask = mask;
                let out = !c.tx.is_empty() && c.state == ConnState::Connected;
                self.set_mask(key, if out { mask } else { Interest::READABLE });
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
}

/// Connect-to-iface: the accepted connection `key` brought the hello `h`. Without a dial of
/// ours for the same pair (peer interface, sequence number) it is acknowledged and waits,
/// unowned, for our endpoint of that number. With one, the connects were simultaneous: the
/// connection dialed by the smaller interface address wins (see `wire::Hello`).
pub(super) fn iface_hello(inner: &mut Inner, key: usize, h: Hello) -> Flow {
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
pub(super) fn adopt(inner: &mut Inner, key: usize, y: usize) -> Flow {
    let x = &mut inner.conns[key];
    let sock = x.sock.take();
    let mask = std::mem::replace(&mut x.epoll_mask, Interest::empty());
    let (peer, readable) = (x.peer, x.readable);
    let t = &mut inner.conns[y];
    if let Some(old) = t.sock.take() {
        if !t.epoll_mask.is_empty() {
            let _ = inner.epoll.remove(old.as_raw_fd());
        }
    }
    if t.state == ConnState::Connecting {
        inner.connecting -= 1;
    }
    t.sock = sock;
    t.peer = peer;
    t.readable = readable;
    t.state = ConnState::Connected;
    t.ctl = None;
    let mut f = [0u8; FrameHeader::LEN + HelloAck::LEN];
    FrameHeader::new(Kind::HelloAck, 0, 0).encode(&mut f);
    HelloAck { seq: t.seq }.encode(&mut f[FrameHeader::LEN..]);
    t.tx.push_front(&mut inner.tx_pool, &f);
    // Re-register the socket under its new owner's key (an accepted socket is registered).
    let out = Interest::READABLE | Interest::WRITABLE;
    t.epoll_mask = out;
    if let Some(s) = t.sock.as_ref() {
        let r = if mask.is_empty() {
            inner.epoll.add(s.as_raw_fd(), out, y as u64)
        } else {
            inner.epoll.modify(s.as_raw_fd(), out, y as u64)
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
pub(super) fn attach(inner: &mut Inner, key: usize, h: Hello) -> Flow {
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
    inner.conns[key].epoll_mask = Interest::empty();
    let peer = inner.conns[key].peer;
    let t = &mut inner.conns[to];
    t.sock = sock;
    t.peer = peer;
    t.peer_conn_id = h.src_conn_id;
    t.state = ConnState::Connected;
    t.epoll_mask = mask;
    if let Some(s) = t.sock.as_ref() {
        let _ = inner.epoll.modify(s.as_raw_fd(), mask, to as u64);
    }
    Flow::Redirect(to)
}
