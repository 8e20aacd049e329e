//! Accepting TCP clients that open with one framed message, without blocking on any of them.
//!
//! [`Acceptor`] accepts what waits in the kernel's backlog and reads each connection's first
//! message with non-blocking reads: partial reads accumulate per connection, a connection whose
//! message is not complete by its own deadline is closed (debug log), and a complete message is
//! handed out at once, whatever the other connections are doing. So N idle or half-written
//! connections never delay a client that sends its message. [`crate::Listener`] uses it for
//! connection requests; perftest's server for its side channel. [`Acceptor::wait`] sleeps on
//! an [`EventSet`] of the listening socket and the connections being read, bounded by the
//! earliest connection deadline and the end of an accept pause.
//!
//! At the descriptor limit (`EMFILE`, `ENFILE`) it keeps nothing spinning: it frees a
//! descriptor it holds in reserve, accepts one waiting client, sends it the refusal the
//! framing builds (naming the limit), and closes it; without a reserve it stops accepting for
//! a moment and leaves the clients in the backlog. Either way it logs at most once a second.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use ucs::async_ctx::{EventSet, Interest};
use ucs::{Error, Result};

/// Most accepted connections whose message is still being read; a newer one closes the oldest.
pub const MAX_PENDING: usize = 256;
/// Most connections accepted by one [`Acceptor::poll`] call.
const ACCEPT_BATCH: usize = 64;
/// Pause of the listening socket when the descriptor limit leaves no way to even refuse a
/// client (no reserve descriptor).
const ACCEPT_PAUSE: Duration = Duration::from_millis(200);
/// Event-set token of the listening socket (connections being read all use [`CONN_TOKEN`]:
/// a wake-up reads every one of them anyway).
const LISTENER_TOKEN: u64 = 0;
/// Event-set token of a connection whose first message is being read.
const CONN_TOKEN: u64 = 1;

/// How the first message of a connection is framed.
#[derive(Debug, Clone, Copy)]
pub struct Framing {
    /// Length of the fixed header.
    pub header_len: usize,
    /// From a complete header: the message's whole length (header included), or why the
    /// header is refused (bad magic, wrong kind, oversized).
    pub total_len: fn(&[u8]) -> Result<usize>,
    /// The bytes that tell a client it was refused, and why.
    pub refusal: fn(&str) -> Vec<u8>,
}

/// A connection whose first message arrived whole.
#[derive(Debug)]
pub struct Accepted {
    /// The connection, back in blocking mode.
    pub stream: TcpStream,
    /// The client's address.
    pub peer: SocketAddr,
    /// The message, header included.
    pub msg: Vec<u8>,
}

/// An accepted connection whose message is being read.
#[derive(Debug)]
struct Incoming {
    stream: TcpStream,
    peer: SocketAddr,
    /// What arrived so far.
    buf: Vec<u8>,
    /// Bytes the message has in all (the header length until the header is decoded).
    need: usize,
    /// When this connection is closed if its message is still incomplete.
    deadline: Instant,
}

impl Incoming {
    /// Reads what the socket has, up to the end of the message: true once it is complete.
    fn read(&mut self, framing: &Framing) -> Result<bool> {
        let mut chunk = [0u8; 4096];
        loop {
            let want = (self.need - self.buf.len()).min(chunk.len());
            if want == 0 {
                return Ok(true);
            }
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => {
                    return Err(Error::ConnectionReset(format!(
                        "client {} closed the connection after {} bytes of its first message",
                        self.peer,
                        self.buf.len()
                    )))
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if self.buf.len() == framing.header_len {
                        let peer = self.peer;
                        self.need = (framing.total_len)(&self.buf).map_err(|e| match e {
                            Error::Wire(m) => Error::Wire(format!("client {peer}: {m}")),
                            other => other,
                        })?;
                        self.need = self.need.max(framing.header_len);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::io(
                        format!("reading the first message of {}", self.peer),
                        e,
                    ))
                }
            }
        }
    }
}

/// A non-blocking listening socket with a per-connection reader for the first message.
#[derive(Debug)]
pub struct Acceptor {
    sock: TcpListener,
    framing: Framing,
    incoming: Vec<Incoming>,
    timeout: Duration,
    /// A spare descriptor, closed to accept-and-refuse a client at the descriptor limit.
    reserve: Option<std::fs::File>,
    /// Without a reserve at the limit: accept nothing until this time (the listening socket
    /// is out of `events` meanwhile, so a full backlog does not wake [`Acceptor::wait`]).
    paused_until: Option<Instant>,
    limit_log: ucs::limits::RateLimit,
    /// The listening socket (readable) and every connection in `incoming` (readable).
    events: EventSet,
}

fn open_reserve() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

impl Acceptor {
    /// Takes over a bound listening socket (made non-blocking here); each accepted connection
    /// has `timeout` to send its first message.
    pub fn new(sock: TcpListener, framing: Framing, timeout: Duration) -> Result<Self> {
        sock.set_nonblocking(true)
            .map_err(|e| Error::io("making the listener non-blocking", e))?;
        let events = EventSet::new()?;
        events.add(sock.as_raw_fd(), Interest::READABLE, LISTENER_TOKEN)?;
        Ok(Acceptor {
            sock,
            framing,
            incoming: Vec::new(),
            timeout,
            reserve: open_reserve(),
            paused_until: None,
            limit_log: ucs::limits::RateLimit::new(Duration::from_secs(1)),
            events,
        })
    }
    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.sock
            .local_addr()
            .map_err(|e| Error::io("querying the listener address", e))
    }
    /// The epoll set [`Acceptor::wait`] sleeps on: readable while [`Acceptor::poll`] has
    /// something to read or accept.
    pub fn event_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd as _;
        self.events.as_raw_fd()
    }
    /// How long a connection accepted from now on has to send its first message.
    pub fn set_request_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }
    /// Accepted connections whose first message is still incomplete.
    pub fn pending(&self) -> usize {
        self.incoming.len()
    }
    /// A connection whose first message is complete, if one is. Never blocks: accepts what
    /// waits, reads what each connection sent, closes connections past their deadline. A
    /// connection that sends a bad header or goes away is dropped and reported as an error;
    /// the others stay (call again).
    pub fn poll(&mut self) -> Result<Option<Accepted>> {
        self.accept_waiting();
        let now = Instant::now();
        let mut i = 0;
        while i < self.incoming.len() {
            match self.incoming[i].read(&self.framing) {
                Ok(true) => {
                    let Incoming {
                        stream, peer, buf, ..
                    } = self.take(i);
                    stream
                        .set_nonblocking(false)
                        .map_err(|e| Error::io("configuring an accepted connection", e))?;
                    return Ok(Some(Accepted {
                        stream,
                        peer,
                        msg: buf,
                    }));
                }
                Ok(false) if now >= self.incoming[i].deadline => {
                    let c = self.take(i);
                    tracing::debug!(
                        "closing the connection from {}: no complete first message within {:.1} \
                         s ({} bytes arrived)",
                        c.peer,
                        self.timeout.as_secs_f64(),
                        c.buf.len()
                    );
                }
                Ok(false) => i += 1,
                Err(e) => {
                    // Tell the client why (if it still listens) before closing.
                    let c = self.take(i);
                    refuse(c.stream, &(self.framing.refusal)(&e.to_string()));
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    /// Waits up to `timeout` for a connection whose first message is complete: polls, then
    /// sleeps until the listening socket or a connection being read is readable, the earliest
    /// connection deadline (to close it on time), the end of an accept pause, or the end of
    /// `timeout`, and polls again. Errors as [`Acceptor::poll`].
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<Accepted>> {
        let end = Instant::now().checked_add(timeout);
        loop {
            if let Some(a) = self.poll()? {
                return Ok(Some(a));
            }
            let now = Instant::now();
            if end.is_some_and(|end| now >= end) {
                return Ok(None);
            }
            let wake = self
                .incoming
                .iter()
                .map(|c| c.deadline)
                .chain(self.paused_until)
                .chain(end)
                .min();
            let sleep = wake.map(|t| t.saturating_duration_since(now));
            self.events.wait_any(sleep)?;
        }
    }

    /// Removes connection `i` from `incoming` and from the event set.
    fn take(&mut self, i: usize) -> Incoming {
        let c = self.incoming.swap_remove(i);
        if let Err(e) = self.events.remove(c.stream.as_raw_fd()) {
            tracing::debug!("{e}");
        }
        c
    }

    /// Sets whether the event set watches the listening socket (not during an accept pause).
    fn watch_listener(&self, on: bool) {
        let interest = if on {
            Interest::READABLE
        } else {
            Interest::empty()
        };
        let fd = self.sock.as_raw_fd();
        if let Err(e) = self.events.modify(fd, interest, LISTENER_TOKEN) {
            tracing::warn!("{e}");
        }
    }

    /// Accepts the connections waiting in the kernel's backlog into `incoming`.
    fn accept_waiting(&mut self) {
        if let Some(t) = self.paused_until {
            if Instant::now() < t {
                return;
            }
            self.paused_until = None;
            self.watch_listener(true);
        }
        for _ in 0..ACCEPT_BATCH {
            let (stream, peer) = match self.sock.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if ucs::limits::is_fd_limit(&e) => {
                    self.at_fd_limit(&e);
                    return;
                }
                Err(e) => {
                    self.log_limited(&format!(
                        "accepting a connection: {}",
                        ucs::limits::explain_io(&e)
                    ));
                    return;
                }
            };
            if let Err(e) = stream
                .set_nonblocking(true)
                .and_then(|_| stream.set_nodelay(true))
            {
                tracing::debug!("dropping the connection from {peer}: {e}");
                continue;
            }
            if self.incoming.len() >= MAX_PENDING {
                let oldest = (0..self.incoming.len())
                    .min_by_key(|&i| self.incoming[i].deadline)
                    .unwrap_or(0);
                let c = self.take(oldest);
                tracing::debug!(
                    "closing the connection from {}: {MAX_PENDING} incomplete first messages \
                     are waiting and it is the oldest",
                    c.peer
                );
            }
            if let Err(e) = self
                .events
                .add(stream.as_raw_fd(), Interest::READABLE, CONN_TOKEN)
            {
                tracing::debug!("dropping the connection from {peer}: {e}");
                continue;
            }
            self.incoming.push(Incoming {
                stream,
                peer,
                buf: Vec::with_capacity(self.framing.header_len),
                need: self.framing.header_len,
                deadline: Instant::now() + self.timeout,
            });
        }
    }

    /// `accept` hit the descriptor limit: with the reserve descriptor freed, accept one waiting
    /// client and refuse it with the reason; without one, stop accepting for a moment (the
    /// clients stay in the backlog). Either way nothing spins.
    fn at_fd_limit(&mut self, e: &std::io::Error) {
        let why = ucs::limits::explain_io(e);
        let local = self
            .local_addr()
            .map_or_else(|_| "the listener".to_owned(), |a| a.to_string());
        self.log_limited(&format!("cannot accept a connection on {local}: {why}"));
        let mut refused = false;
        if self.reserve.take().is_some() {
            if let Ok((s, peer)) = self.sock.accept() {
                refuse(
                    s,
                    &(self.framing.refusal)(&format!("the server cannot accept: {why}")),
                );
                tracing::debug!("refused {peer}: {why}");
                refused = true;
            }
            self.reserve = open_reserve();
        }
        // Nobody was waiting (accept fails at the limit even then), or no reserve: wait a
        // little before trying again.
        if !refused || self.reserve.is_none() {
            self.paused_until = Some(Instant::now() + ACCEPT_PAUSE);
            self.watch_listener(false);
        }
    }

    fn log_limited(&mut self, text: &str) {
        if let Some(held) = self.limit_log.allow(Instant::now()) {
            if held > 0 {
                tracing::warn!("{text} ({held} similar failures not logged)");
            } else {
                tracing::warn!("{text}");
            }
        }
    }
}

/// Sends a refusal without blocking (it fits in an empty socket buffer) and closes. What the
/// client already sent is read first: closing with unread bytes would reset the connection,
/// and the client could lose the refusal.
fn refuse(mut s: TcpStream, msg: &[u8]) {
    use std::io::Write;
    let _ = s.set_nonblocking(true);
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match s.read(&mut sink) {
            Ok(n) if n > 0 => continue,
            _ => break,
        }
    }
    let _ = s.write(msg);
    let _ = s.shutdown(std::net::Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A toy framing: 1-byte length header, then that many bytes.
    fn toy() -> Framing {
        Framing {
            header_len: 1,
            total_len: |h| {
                if h[0] == 0 {
                    return Err(Error::Wire("zero length".into()));
                }
                Ok(1 + h[0] as usize)
            },
            refusal: |r| r.as_bytes().to_vec(),
        }
    }

    fn poll_until(a: &mut Acceptor) -> Result<Accepted> {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(x) = a.poll()? {
                return Ok(x);
            }
            assert!(Instant::now() < end, "watchdog: nothing complete");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn idle_connections_do_not_delay_a_complete_one() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut a = Acceptor::new(l, toy(), Duration::from_secs(60)).unwrap();
        let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut half = TcpStream::connect(addr).unwrap();
        half.write_all(&[5, b'a']).unwrap();
        let mut good = TcpStream::connect(addr).unwrap();
        good.write_all(&[3, b'x', b'y', b'z']).unwrap();
        let got = poll_until(&mut a).unwrap();
        assert_eq!(got.msg, vec![3, b'x', b'y', b'z']);
        assert_eq!(
            a.pending(),
            5,
            "the idle and half-written ones are still open"
        );
        // The half-written one completes later, in pieces.
        half.write_all(b"bcd").unwrap();
        assert!(a.poll().unwrap().is_none(), "5 of 6 bytes at most");
        half.write_all(b"e").unwrap();
        let got = poll_until(&mut a).unwrap();
        assert_eq!(got.msg, b"\x05abcde");
        drop(idle);
    }

    #[test]
    fn deadline_closes_only_the_late_connection_and_bad_headers_are_errors() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut a = Acceptor::new(l, toy(), Duration::from_millis(300)).unwrap();
        let mut late = TcpStream::connect(addr).unwrap();
        while a.pending() == 0 {
            assert!(a.poll().unwrap().is_none());
        }
        std::thread::sleep(Duration::from_millis(400));
        assert!(a.poll().unwrap().is_none());
        assert_eq!(a.pending(), 0);
        let mut b = [0u8; 1];
        late.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(late.read(&mut b).unwrap_or(0), 0, "closed by the listener");

        a.set_request_timeout(Duration::from_secs(60));
        let mut bad = TcpStream::connect(addr).unwrap();
        bad.write_all(&[0]).unwrap();
        let e = loop {
            match a.poll() {
                Err(e) => break e,
                Ok(x) => assert!(x.is_none()),
            }
        };
        assert!(e.to_string().contains("zero length"), "{e}");
    }

    #[test]
    fn wait_sleeps_until_a_request_arrives_and_times_out_empty() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut a = Acceptor::new(l, toy(), Duration::from_secs(60)).unwrap();
        let t0 = Instant::now();
        assert!(a.wait(Duration::from_millis(50)).unwrap().is_none());
        assert!(t0.elapsed() >= Duration::from_millis(50), "returned early");
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&[2]).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b"ok").unwrap();
            s
        });
        let got = a.wait(Duration::from_secs(20)).unwrap().expect("watchdog");
        assert_eq!(got.msg, b"\x02ok");
        assert_eq!(a.pending(), 0);
        // The handed-out connection is no longer watched: its bytes do not end a wait.
        let mut s = client.join().unwrap();
        s.write_all(b"more").unwrap();
        assert!(a.wait(Duration::from_millis(20)).unwrap().is_none());
    }

    #[test]
    fn wait_closes_a_late_connection_at_its_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut a = Acceptor::new(l, toy(), Duration::from_millis(100)).unwrap();
        // The client sends its request only once the listener closed its idle connection, so
        // the wait returns it only if it woke for that connection's deadline.
        let client = std::thread::spawn(move || {
            let mut late = TcpStream::connect(addr).unwrap();
            late.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let mut b = [0u8; 1];
            let closed = matches!(late.read(&mut b), Ok(0));
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&[1, b'z']).unwrap();
            closed
        });
        let got = a.wait(Duration::from_secs(20)).unwrap().expect("watchdog");
        assert_eq!(got.msg, b"\x01z");
        assert!(client.join().unwrap(), "the idle connection was closed");
        assert_eq!(a.pending(), 0);
    }
}
