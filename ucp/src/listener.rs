//! Client/server connection establishment on `ip:port`: a listener the server accepts or
//! rejects connection requests on, and [`crate::Worker::connect`] for the client.
//!
//! The two sides exchange worker addresses over a short-lived TCP connection, then talk over
//! the lanes wire-up picks (shared memory on one host, tcp otherwise).

use crate::acceptor::{Accepted, Acceptor, Framing};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use ucs::{Error, Result};

/// How long either side waits for the other's half of the exchange.
pub const CM_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest worker address accepted in a connection message.
pub const MAX_ADDR_LEN: usize = 64 << 10;

/// What a connection message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmKind {
    /// Client → server: please connect, here is my worker address.
    Request,
    /// Server → client: accepted, here is my worker address.
    Accept,
    /// Server → client: rejected (no address).
    Reject,
    /// Client → server: please connect; an 8-byte little-endian client id, then my worker
    /// address (UCX's `UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID`).
    RequestWithId,
}

/// Header of a connection message.
///
/// ```text
/// 0              4         5        6                10
/// +--------------+---------+--------+----------------+---------------------+
/// | magic "RUCM" | version | kind   | addr len u32LE | worker address      |
/// +--------------+---------+--------+----------------+---------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmHdr {
    /// Kind of message.
    pub kind: CmKind,
    /// Length of the worker address that follows.
    pub addr_len: u32,
}

const MAGIC: [u8; 4] = *b"RUCM";
const VERSION: u8 = 1;

impl CmHdr {
    /// Encoded length.
    pub const LEN: usize = 10;
    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = match self.kind {
            CmKind::Request => 0,
            CmKind::Accept => 1,
            CmKind::Reject => 2,
            CmKind::RequestWithId => 3,
        };
        ucs::codec::put_u32_at(&mut b, 6, self.addr_len);
        b
    }
    /// Decodes and checks a header.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = ucs::codec::head::<{ Self::LEN }>(b, "connection header")?;
        if b[..4] != MAGIC {
            return Err(Error::Wire(
                "not a rucx connection (bad magic): is the port right?".into(),
            ));
        }
        if b[4] != VERSION {
            return Err(Error::Wire(format!(
                "connection protocol version {} is not supported (this build speaks {VERSION})",
                b[4]
            )));
        }
        let kind = match b[5] {
            0 => CmKind::Request,
            1 => CmKind::Accept,
            2 => CmKind::Reject,
            3 => CmKind::RequestWithId,
            k => return Err(Error::Wire(format!("unknown connection message kind {k}"))),
        };
        let addr_len = ucs::codec::u32_at(b, 6);
        if addr_len as usize > MAX_ADDR_LEN {
            return Err(Error::Wire(format!(
                "worker address of {addr_len} bytes exceeds {MAX_ADDR_LEN}"
            )));
        }
        Ok(CmHdr { kind, addr_len })
    }
}

fn io(ctx: &str, e: std::io::Error) -> Error {
    Error::io(ctx.to_owned(), e)
}

/// Longest reason a reject message carries.
const MAX_REASON: usize = 1024;

/// Writes one connection message.
pub(crate) fn write_msg(s: &mut TcpStream, kind: CmKind, addr: &[u8]) -> Result<()> {
    let h = CmHdr {
        kind,
        addr_len: addr.len() as u32,
    };
    let mut buf = h.encode().to_vec();
    buf.extend_from_slice(addr);
    s.write_all(&buf)
        .map_err(|e| io("sending a connection message", e))
}

/// A reject message whose payload is `reason` (UTF-8, cut at [`MAX_REASON`] bytes), so the
/// client's error says why.
fn reject_bytes(reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let h = CmHdr {
        kind: CmKind::Reject,
        addr_len: end as u32,
    };
    let mut b = h.encode().to_vec();
    b.extend_from_slice(&reason.as_bytes()[..end]);
    b
}

/// Writes a reject message that says why ([`reject_bytes`]).
pub(crate) fn write_reject(s: &mut TcpStream, reason: &str) -> Result<()> {
    s.write_all(&reject_bytes(reason))
        .map_err(|e| io("sending a connection message", e))
}

/// Reads one connection message (blocking, with the socket's timeout).
pub(crate) fn read_msg(s: &mut TcpStream) -> Result<(CmKind, Vec<u8>)> {
    let mut h = [0u8; CmHdr::LEN];
    s.read_exact(&mut h)
        .map_err(|e| io("reading a connection message", e))?;
    let h = CmHdr::decode(&h)?;
    let mut addr = vec![0u8; h.addr_len as usize];
    s.read_exact(&mut addr)
        .map_err(|e| io("reading the peer's worker address", e))?;
    Ok((h.kind, addr))
}

/// A server's listening socket.
///
/// Connection requests are read without blocking, each accepted connection with its own
/// deadline ([`CM_TIMEOUT`] unless [`Listener::set_request_timeout`] says otherwise), so idle
/// or slow clients never delay a client whose request is complete. At the descriptor limit the
/// listener refuses waiting clients with a reason naming the limit, and logs at most once a
/// second (see [`Acceptor`]).
#[derive(Debug)]
pub struct Listener {
    acceptor: Acceptor,
}

/// How connection messages are framed, for the [`Acceptor`].
fn cm_framing() -> Framing {
    Framing {
        header_len: CmHdr::LEN,
        total_len: |h| {
            let h = CmHdr::decode(h)?;
            if !matches!(h.kind, CmKind::Request | CmKind::RequestWithId) {
                return Err(Error::Wire(format!(
                    "{:?} instead of a connection request",
                    h.kind
                )));
            }
            Ok(CmHdr::LEN + h.addr_len as usize)
        },
        refusal: reject_bytes,
    }
}

/// A client's request to connect, to accept with [`crate::Worker::accept`] or reject.
#[derive(Debug)]
pub struct ConnRequest {
    pub(crate) stream: TcpStream,
    pub(crate) client_address: Vec<u8>,
    peer: SocketAddr,
    client_id: Option<u64>,
}

impl ConnRequest {
    /// The client's socket address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
    /// This side's address of the connection (the listener's address, or with a wildcard
    /// listener the local address the client reached).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.stream.local_addr().ok()
    }
    /// The id the client sent with its request, if it sent one.
    pub fn client_id(&self) -> Option<u64> {
        self.client_id
    }
    /// Refuses the connection; the client's `connect` fails with `ConnectionReset`.
    pub fn reject(mut self) -> Result<()> {
        write_msg(&mut self.stream, CmKind::Reject, &[])
    }
}

impl Listener {
    /// Listens on `addr` (port 0 picks a free port).
    pub fn bind(addr: SocketAddr) -> Result<Self> {
        let sock = TcpListener::bind(addr).map_err(|e| io(&format!("listening on {addr}"), e))?;
        Ok(Listener {
            acceptor: Acceptor::new(sock, cm_framing(), CM_TIMEOUT)?,
        })
    }
    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.acceptor.local_addr()
    }
    /// A descriptor that is readable while [`Listener::poll`] has work (an epoll set of the
    /// listening socket and the connections being read), for a caller's own event loop.
    pub fn event_fd(&self) -> std::os::fd::RawFd {
        self.acceptor.event_fd()
    }
    /// How long an accepted connection may take to send its whole request before it is
    /// closed (default [`CM_TIMEOUT`]). Applies to connections accepted from now on.
    pub fn set_request_timeout(&mut self, timeout: Duration) {
        self.acceptor.set_request_timeout(timeout);
    }
    /// Accepted connections whose request is still incomplete.
    pub fn pending(&self) -> usize {
        self.acceptor.pending()
    }
    /// A pending connection request, if a client's is complete. Never blocks: it accepts
    /// what is waiting, reads what each accepted connection sent, and closes connections past
    /// their deadline. A client that sends garbage or goes away is dropped and reported as an
    /// error; the listener keeps working (call again).
    pub fn poll(&mut self) -> Result<Option<ConnRequest>> {
        self.acceptor.poll()?.map(conn_request).transpose()
    }
    /// Waits up to `timeout` for a connection request: sleeps on the listening socket and the
    /// accepted connections (see [`Acceptor::wait`]), waking to close connections at their
    /// deadlines. Errors as [`Listener::poll`].
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<ConnRequest>> {
        self.acceptor.wait(timeout)?.map(conn_request).transpose()
    }
}

/// A connection whose request arrived whole, as a [`ConnRequest`] (its socket writes with
/// [`CM_TIMEOUT`]).
fn conn_request(a: Accepted) -> Result<ConnRequest> {
    a.stream
        .set_write_timeout(Some(CM_TIMEOUT))
        .map_err(|e| io("configuring an accepted connection", e))?;
    let h = CmHdr::decode(&a.msg)?;
    let body = &a.msg[CmHdr::LEN..];
    let (client_id, addr) = match h.kind {
        CmKind::RequestWithId if body.len() >= 8 => {
            let mut id = [0u8; 8];
            id.copy_from_slice(&body[..8]);
            (Some(u64::from_le_bytes(id)), &body[8..])
        }
        CmKind::RequestWithId => {
            return Err(Error::Wire(format!(
                "client {}: a request with an id of {} bytes",
                a.peer,
                body.len()
            )))
        }
        _ => (None, body),
    };
    Ok(ConnRequest {
        stream: a.stream,
        client_address: addr.to_vec(),
        peer: a.peer,
        client_id,
    })
}

/// A client-side read error, said plainly: a server that does not answer in time is a
/// timeout (not the socket's `WouldBlock`), a closed connection a reset.
fn client_read_error(server: SocketAddr, e: Error) -> Error {
    match e {
        Error::Io {
            kind: std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut,
            ..
        } => Error::Timeout(format!(
            "server {server} did not answer the connection request within {} s (is it \
                 overloaded, or not a rucx listener?)",
            CM_TIMEOUT.as_secs()
        )),
        Error::Io {
            kind: std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset,
            ..
        } => Error::ConnectionReset(format!(
            "server {server} closed the connection without answering the request"
        )),
        other => other,
    }
}

/// Client side of the exchange: sends our address, gives the server's.
pub(crate) fn client_exchange(server: SocketAddr, our_address: &[u8]) -> Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&server, CM_TIMEOUT).map_err(|e| {
        Error::Unreachable(format!(
            "cannot connect to {server}: {} (is the server running?)",
            ucs::limits::explain_io(&e)
        ))
    })?;
    s.set_read_timeout(Some(CM_TIMEOUT))
        .and_then(|_| s.set_nodelay(true))
        .map_err(|e| io("configuring the connection", e))?;
    write_msg(&mut s, CmKind::Request, our_address)?;
    match read_msg(&mut s).map_err(|e| client_read_error(server, e))? {
        (CmKind::Accept, addr) => Ok(addr),
        (CmKind::Reject, reason) if reason.is_empty() => Err(Error::ConnectionReset(format!(
            "server {server} rejected the connection"
        ))),
        (CmKind::Reject, reason) => Err(Error::ConnectionReset(format!(
            "server {server} rejected the connection: {}",
            String::from_utf8_lossy(&reason)
        ))),
        (CmKind::Request | CmKind::RequestWithId, _) => Err(Error::Wire(format!(
            "server {server} answered with a request"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_does_not_answer_is_a_timeout_not_would_block() {
        let server: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let e = client_read_error(
            server,
            Error::io("reading", std::io::ErrorKind::WouldBlock.into()),
        );
        assert!(matches!(e, Error::Timeout(_)), "{e}");
        assert!(e.to_string().contains("did not answer"), "{e}");
        assert!(!e.to_string().contains("WouldBlock"), "{e}");
        let e = client_read_error(
            server,
            Error::io("reading", std::io::ErrorKind::UnexpectedEof.into()),
        );
        assert!(matches!(e, Error::ConnectionReset(_)), "{e}");
    }

    #[test]
    fn reject_carries_its_reason() {
        let b = reject_bytes("too many open files");
        let h = CmHdr::decode(&b).unwrap();
        assert_eq!(h.kind, CmKind::Reject);
        assert_eq!(&b[CmHdr::LEN..], b"too many open files");
        let long = "é".repeat(MAX_REASON);
        let b = reject_bytes(&long);
        assert!(b.len() - CmHdr::LEN <= MAX_REASON);
        assert!(std::str::from_utf8(&b[CmHdr::LEN..]).is_ok());
    }

    #[test]
    fn header_round_trip_and_bad_input() {
        for kind in [
            CmKind::Request,
            CmKind::Accept,
            CmKind::Reject,
            CmKind::RequestWithId,
        ] {
            let h = CmHdr { kind, addr_len: 77 };
            assert_eq!(CmHdr::decode(&h.encode()).unwrap(), h);
        }
        let b = CmHdr {
            kind: CmKind::Accept,
            addr_len: 1,
        }
        .encode();
        for n in 0..b.len() {
            assert!(CmHdr::decode(&b[..n]).is_err());
        }
        let mut bad = b;
        bad[0] = b'X';
        assert!(CmHdr::decode(&bad)
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut bad = b;
        bad[5] = 9;
        assert!(CmHdr::decode(&bad).is_err());
        let mut bad = b;
        bad[6..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(CmHdr::decode(&bad).is_err());
    }
}
