//! The client side of client/server connection establishment, without blocking: UCX's
//! `ucp_ep_create` from a socket address returns at once and the connection completes in the
//! background. [`Connecting`] connects a non-blocking TCP socket to a [`crate::Listener`],
//! sends the connection request (this worker's address, [`crate::listener::CmHdr`] framing),
//! and reads the answer as [`Connecting::poll`] is called; the server's worker address it gives
//! is what [`crate::Worker::ep_create`] then connects to. [`crate::Worker::connect`] is the
//! blocking form.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::listener::{CmHdr, CmKind, CM_TIMEOUT};
use crate::worker::Worker;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::time::{Duration, Instant};
use ucs::async_ctx::{EventSet, Interest};
use ucs::{Error, Result};

/// A connection request on its way: socket connecting, request being written, answer being
/// read.
#[derive(Debug)]
pub struct Connecting {
    stream: TcpStream,
    server: SocketAddr,
    /// The request (header and this worker's address) and how much of it is written.
    out: Vec<u8>,
    sent: usize,
    /// The answer so far, and its whole length once the header is in.
    inp: Vec<u8>,
    need: usize,
    /// The TCP connection is established.
    connected: bool,
    deadline: Instant,
}

/// What [`Connecting::poll`] found.
#[derive(Debug)]
pub enum ConnectPoll {
    /// Still under way.
    Pending,
    /// The server accepted: its worker address.
    Accepted(Vec<u8>),
}

fn sockaddr_of(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn unreachable_err(server: SocketAddr, e: &std::io::Error) -> Error {
    Error::Unreachable(format!(
        "cannot connect to {server}: {} (is the server running?)",
        ucs::limits::explain_io(e)
    ))
}

impl Connecting {
    /// Starts connecting to `server` (from `local`, when given) and queues the request
    /// carrying `our_address` (and `client_id`, when given, which the server's
    /// [`crate::ConnRequest::client_id`] then gives).
    pub fn start(
        server: SocketAddr,
        local: Option<SocketAddr>,
        our_address: &[u8],
        client_id: Option<u64>,
    ) -> Result<Self> {
        let family = if server.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: plain syscall.
        let fd = unsafe {
            libc::socket(
                family,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(Error::last_os("socket"));
        }
        // SAFETY: a socket this call just made, owned from here on.
        let stream = unsafe { TcpStream::from_raw_fd(fd) };
        if let Some(l) = local {
            let (ss, len) = sockaddr_of(&l);
            // SAFETY: a valid address of `len` bytes.
            if unsafe { libc::bind(fd, (&ss as *const libc::sockaddr_storage).cast(), len) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(Error::io(format!("binding the client socket to {l}"), e));
            }
        }
        let (ss, len) = sockaddr_of(&server);
        // SAFETY: a valid address of `len` bytes.
        let r = unsafe { libc::connect(fd, (&ss as *const libc::sockaddr_storage).cast(), len) };
        let connected = if r == 0 {
            true
        } else {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(unreachable_err(server, &e));
            }
            false
        };
        let _ = stream.set_nodelay(true);
        let id = client_id.map(u64::to_le_bytes);
        let id = id.as_ref().map_or(&[][..], |b| &b[..]);
        let mut out = CmHdr {
            kind: if client_id.is_some() {
                CmKind::RequestWithId
            } else {
                CmKind::Request
            },
            addr_len: (id.len() + our_address.len()) as u32,
        }
        .encode()
        .to_vec();
        out.extend_from_slice(id);
        out.extend_from_slice(our_address);
        Ok(Connecting {
            stream,
            server,
            out,
            sent: 0,
            inp: Vec::new(),
            need: CmHdr::LEN,
            connected,
            deadline: Instant::now() + CM_TIMEOUT,
        })
    }

    /// The socket: readable or writable when [`Connecting::poll`] has something to do.
    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// The server's address.
    pub fn server(&self) -> SocketAddr {
        self.server
    }

    /// This side's address of the connection (once the socket is bound).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.stream.local_addr().ok()
    }

    /// Advances the exchange as far as the socket allows, without blocking. An error ends it:
    /// `Unreachable` (no server), `ConnectionReset` (rejected, or closed without an answer),
    /// `Timeout` (no answer within [`CM_TIMEOUT`]), `Wire` (not a rucx server).
    pub fn poll(&mut self) -> Result<ConnectPoll> {
        if !self.connected {
            match self.stream.take_error() {
                Ok(Some(e)) => return Err(unreachable_err(self.server, &e)),
                Err(e) => return Err(unreachable_err(self.server, &e)),
                Ok(None) => {}
            }
            match self.stream.peer_addr() {
                Ok(_) => self.connected = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {
                    return self.pending();
                }
                Err(e) => return Err(unreachable_err(self.server, &e)),
            }
        }
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return self.pending(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(unreachable_err(self.server, &e)),
            }
        }
        let mut chunk = [0u8; 4096];
        while self.inp.len() < self.need {
            let want = (self.need - self.inp.len()).min(chunk.len());
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => {
                    return Err(Error::ConnectionReset(format!(
                        "server {} closed the connection without answering the request",
                        self.server
                    )))
                }
                Ok(n) => {
                    self.inp.extend_from_slice(&chunk[..n]);
                    if self.inp.len() == CmHdr::LEN {
                        let h = CmHdr::decode(&self.inp)?;
                        self.need = CmHdr::LEN + h.addr_len as usize;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return self.pending(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::ConnectionReset(format!(
                        "server {}: {}",
                        self.server,
                        ucs::limits::explain_io(&e)
                    )))
                }
            }
        }
        let h = CmHdr::decode(&self.inp)?;
        let body = self.inp.split_off(CmHdr::LEN);
        match h.kind {
            CmKind::Accept => Ok(ConnectPoll::Accepted(body)),
            CmKind::Reject if body.is_empty() => Err(Error::ConnectionReset(format!(
                "server {} rejected the connection",
                self.server
            ))),
            CmKind::Reject => Err(Error::ConnectionReset(format!(
                "server {} rejected the connection: {}",
                self.server,
                String::from_utf8_lossy(&body)
            ))),
            CmKind::Request | CmKind::RequestWithId => Err(Error::Wire(format!(
                "server {} answered with a request",
                self.server
            ))),
        }
    }

    /// Waits up to `timeout` (and at most until the exchange's deadline) for the answer,
    /// sleeping on the socket through a ucs event set between looks.
    pub fn wait(&mut self, timeout: Duration) -> Result<ConnectPoll> {
        let end = Instant::now() + timeout;
        let set = EventSet::new()?;
        let mut registered: Option<Interest> = None;
        loop {
            if let ConnectPoll::Accepted(a) = self.poll()? {
                return Ok(ConnectPoll::Accepted(a));
            }
            let now = Instant::now();
            if now >= end {
                return Ok(ConnectPoll::Pending);
            }
            let want = if self.connected && self.sent == self.out.len() {
                Interest::READABLE
            } else {
                Interest::WRITABLE
            };
            match registered {
                None => set.add(self.fd(), want, 0)?,
                Some(had) if had != want => set.modify(self.fd(), want, 0)?,
                Some(_) => {}
            }
            registered = Some(want);
            let wait = (end - now).clamp(Duration::from_millis(1), Duration::from_secs(1));
            set.wait_any(Some(wait))?;
        }
    }

    /// `Pending`, or `Timeout` past the deadline.
    fn pending(&self) -> Result<ConnectPoll> {
        if Instant::now() >= self.deadline {
            return Err(Error::Timeout(format!(
                "server {} did not answer the connection request within {} s",
                self.server,
                CM_TIMEOUT.as_secs()
            )));
        }
        Ok(ConnectPoll::Pending)
    }
}

impl Worker {
    /// Starts a client/server connection to the [`crate::Listener`] at `server` without
    /// blocking (see [`Connecting`]); create the endpoint from the address its
    /// [`Connecting::poll`] gives.
    pub fn connect_start(
        &self,
        server: SocketAddr,
        local: Option<SocketAddr>,
        client_id: Option<u64>,
    ) -> Result<Connecting> {
        Connecting::start(server, local, self.st.worker_address(), client_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, ContextParams, EpParams, Features, Listener, UcpConfig};

    fn worker() -> Worker {
        let ctx = Context::new(ContextParams {
            features: Features::TAG,
            config: Some(UcpConfig {
                tls: vec!["tcp".into()],
                net_devices: vec!["lo".into()],
                keepalive_interval: None,
                ..Default::default()
            }),
        })
        .expect("context");
        Worker::new(&ctx).expect("worker")
    }

    /// One thread runs both sides: the client's request is accepted while neither blocks,
    /// and a tagged message crosses the endpoint made from the server's answer. A second
    /// request is rejected and says so; a port nobody listens on is unreachable.
    #[test]
    fn connect_without_blocking_accept_and_reject() {
        let mut server = worker();
        let mut client = worker();
        let mut l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let at = l.local_addr().unwrap();
        let mut c = client.connect_start(at, None, None).unwrap();
        let end = Instant::now() + Duration::from_secs(30);
        let mut sep = None;
        let addr = loop {
            if sep.is_none() {
                if let Some(req) = l.poll().unwrap() {
                    sep = Some(server.accept(req, EpParams::default()).unwrap());
                }
            }
            if let ConnectPoll::Accepted(a) = c.poll().unwrap() {
                break a;
            }
            assert!(Instant::now() < end, "watchdog");
        };
        assert_eq!(c.server(), at);
        let ep = client.ep_create(&addr, EpParams::default()).unwrap();
        let send = client.tag_send(ep, 5, b"over the connection").unwrap();
        let recv = server.tag_recv(vec![0; 64], 5, u64::MAX).unwrap();
        let end = Instant::now() + Duration::from_secs(30);
        let r = loop {
            client.progress();
            server.progress();
            if let crate::Op::Pending(r) = &recv {
                if server.request_test(r).unwrap() {
                    break server.wait_recv(recv).unwrap();
                }
            }
            assert!(Instant::now() < end, "watchdog");
        };
        assert_eq!(r.data(), b"over the connection");
        client.wait_done(send).unwrap();

        let mut c2 = client.connect_start(at, None, Some(0xfeed)).unwrap();
        let req = loop {
            let _ = c2.poll().unwrap();
            if let Some(r) = l.poll().unwrap() {
                break r;
            }
        };
        assert_eq!(req.client_id(), Some(0xfeed));
        req.reject().unwrap();
        let e = loop {
            match c2.poll() {
                Ok(ConnectPoll::Pending) => {}
                Ok(ConnectPoll::Accepted(_)) => panic!("rejected request accepted"),
                Err(e) => break e,
            }
        };
        assert!(matches!(e, Error::ConnectionReset(_)), "{e}");
        assert!(e.to_string().contains("rejected"), "{e}");

        drop(l);
        let mut c3 = client.connect_start(at, None, None).unwrap();
        let e = c3.wait(Duration::from_secs(10)).unwrap_err();
        assert!(matches!(e, Error::Unreachable(_)), "{e}");
    }
}
