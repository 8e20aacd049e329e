//! The TCP side channel between perftest's client and server: framed messages that carry the
//! test parameters, the verdict, the transport addresses and the start/finish barriers.
//!
//! Every message is a [`FrameHeader`] followed by its payload. Reads have a timeout, so a peer
//! that stops answering is an error, never a hang.

use crate::params::{Reader, TestParams};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use ucs::{Error, Result};

/// Frame magic: `RXPT` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"RXPT");
/// Side-channel protocol version.
pub const VERSION: u8 = 1;
/// Largest payload accepted.
pub const MAX_PAYLOAD: usize = 64 * 1024;

/// The kind of a side-channel message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Client → server: [`TestParams`].
    Request = 1,
    /// Server → client: the test is accepted (empty payload).
    Accept = 2,
    /// Server → client: the test is refused; payload is a UTF-8 reason (u16 length + bytes).
    Reject = 3,
    /// Both ways: [`AddressInfo`].
    Address = 4,
    /// Both ways: endpoints are connected, ready to run (empty payload).
    Ready = 5,
    /// Both ways: the test finished on this side; payload is a u64 status (0 = success).
    Done = 6,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Request,
            2 => Kind::Accept,
            3 => Kind::Reject,
            4 => Kind::Address,
            5 => Kind::Ready,
            6 => Kind::Done,
            _ => return None,
        })
    }
}

/// The header of every side-channel message.
///
/// ```text
///  0            4         5       6            8             12
///  +------------+---------+-------+------------+-------------+
///  | magic u32  | version | kind  | reserved=0 | payload len |
///  | "RXPT"     | u8      | u8    | u16        | u32         |
///  +------------+---------+-------+------------+-------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Message kind.
    pub kind: Kind,
    /// Payload length in bytes.
    pub len: u32,
}

impl FrameHeader {
    /// Encoded length.
    pub const LEN: usize = 12;

    /// Encodes the header.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = VERSION;
        b[5] = self.kind as u8;
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes a header; a wrong magic, version, kind or an oversized payload is [`Error::Wire`].
    pub fn decode(buf: &[u8]) -> Result<FrameHeader> {
        let mut r = Reader::new(buf, "side-channel frame header");
        let magic = r.u32()?;
        let version = r.u8()?;
        let kind = r.u8()?;
        let _reserved = r.u16()?;
        let len = r.u32()?;
        if magic != MAGIC {
            return Err(Error::Wire(format!(
                "bad magic {magic:#x}: the peer is not a rucx perftest"
            )));
        }
        if version != VERSION {
            return Err(Error::Wire(format!(
                "side-channel version {version}, expected {VERSION}: use the same perftest build on both sides"
            )));
        }
        let kind = Kind::from_u8(kind)
            .ok_or_else(|| Error::Wire(format!("unknown message kind {kind}")))?;
        if len as usize > MAX_PAYLOAD {
            return Err(Error::Wire(format!(
                "payload of {len} bytes exceeds {MAX_PAYLOAD}"
            )));
        }
        Ok(FrameHeader { kind, len })
    }
}

/// A peer's transport addresses and its exposed memory.
///
/// ```text
///  0                 8                 16       18        20       22      24
///  +-----------------+-----------------+--------+---------+--------+-------+
///  | buffer addr u64 | buffer len u64  |dev len |iface len| ep len | rkey  |
///  |                 |                 | u16    | u16     | u16    |len u16|
///  +-----------------+-----------------+--------+---------+--------+-------+
///  24: device address, interface address, endpoint address, packed rkey
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddressInfo {
    /// Address of the exposed buffer in the peer's address space (0 if none).
    pub buffer_addr: u64,
    /// Length of the exposed buffer.
    pub buffer_len: u64,
    /// Device address.
    pub device_addr: Vec<u8>,
    /// Interface address (CONNECT_TO_IFACE), or a ucp worker address.
    pub iface_addr: Vec<u8>,
    /// Endpoint address (CONNECT_TO_EP).
    pub ep_addr: Vec<u8>,
    /// Packed remote key of the buffer (remote-memory tests).
    pub rkey: Vec<u8>,
}

impl AddressInfo {
    /// Fixed part, bytes.
    pub const LEN: usize = 24;

    /// Encodes the addresses; fails if one is longer than 65535 bytes.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        out.extend_from_slice(&self.buffer_addr.to_le_bytes());
        out.extend_from_slice(&self.buffer_len.to_le_bytes());
        for part in [
            &self.device_addr,
            &self.iface_addr,
            &self.ep_addr,
            &self.rkey,
        ] {
            let len = u16::try_from(part.len()).map_err(|_| {
                Error::InvalidParam(format!("an address of {} bytes is too long", part.len()))
            })?;
            out.extend_from_slice(&len.to_le_bytes());
        }
        for part in [
            &self.device_addr,
            &self.iface_addr,
            &self.ep_addr,
            &self.rkey,
        ] {
            out.extend_from_slice(part);
        }
        Ok(())
    }

    /// Decodes addresses; truncated or trailing input is [`Error::Wire`].
    pub fn decode(buf: &[u8]) -> Result<AddressInfo> {
        let mut r = Reader::new(buf, "address message");
        let buffer_addr = r.u64()?;
        let buffer_len = r.u64()?;
        let lens = [r.u16()?, r.u16()?, r.u16()?, r.u16()?];
        let device_addr = r.bytes(lens[0] as usize)?.to_vec();
        let iface_addr = r.bytes(lens[1] as usize)?.to_vec();
        let ep_addr = r.bytes(lens[2] as usize)?.to_vec();
        let rkey = r.bytes(lens[3] as usize)?.to_vec();
        r.finish()?;
        Ok(AddressInfo {
            buffer_addr,
            buffer_len,
            device_addr,
            iface_addr,
            ep_addr,
            rkey,
        })
    }
}

/// Encodes a reject reason: u16 length + UTF-8 bytes (cut at 4096 bytes).
pub fn encode_reason(reason: &str, out: &mut Vec<u8>) {
    let mut end = reason.len().min(4096);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&reason.as_bytes()[..end]);
}

/// Decodes a reject reason.
pub fn decode_reason(buf: &[u8]) -> Result<String> {
    let mut r = Reader::new(buf, "reject message");
    let n = r.u16()? as usize;
    let s = r.string(n)?;
    r.finish()?;
    Ok(s)
}

/// Encodes a done status.
pub fn encode_status(status: u64) -> [u8; 8] {
    status.to_le_bytes()
}

/// Decodes a done status.
pub fn decode_status(buf: &[u8]) -> Result<u64> {
    let mut r = Reader::new(buf, "done message");
    let v = r.u64()?;
    r.finish()?;
    Ok(v)
}

/// The side channel: a TCP stream with framed messages.
pub struct Channel {
    stream: TcpStream,
    peer: String,
}

fn io_err(what: &str, peer: &str, e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            Error::Timeout(format!("{peer} did not answer ({what})"))
        }
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe => {
            Error::ConnectionReset(format!("{peer} closed the side channel ({what})"))
        }
        _ => Error::io(format!("side channel to {peer}: {what}"), e),
    }
}

impl Channel {
    /// Wraps a connected stream; reads time out after `timeout`.
    pub fn new(stream: TcpStream, timeout: Duration) -> Result<Channel> {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "peer".into());
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| Error::io("setting the side-channel timeout", e))?;
        let _ = stream.set_nodelay(true);
        Ok(Channel { stream, peer })
    }

    /// The peer's address, for messages.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Changes the read timeout.
    pub fn set_timeout(&self, timeout: Duration) -> Result<()> {
        self.stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| Error::io("setting the side-channel timeout", e))
    }

    /// Sends one message.
    pub fn send(&mut self, kind: Kind, payload: &[u8]) -> Result<()> {
        let hdr = FrameHeader {
            kind,
            len: payload.len() as u32,
        };
        let mut buf = Vec::with_capacity(FrameHeader::LEN + payload.len());
        buf.extend_from_slice(&hdr.encode());
        buf.extend_from_slice(payload);
        self.stream
            .write_all(&buf)
            .map_err(|e| io_err("sending", &self.peer, e))
    }

    /// Receives one message.
    pub fn recv(&mut self) -> Result<(Kind, Vec<u8>)> {
        let mut hb = [0u8; FrameHeader::LEN];
        self.stream
            .read_exact(&mut hb)
            .map_err(|e| io_err("waiting for a message", &self.peer, e))?;
        let hdr = FrameHeader::decode(&hb)?;
        let mut payload = vec![0u8; hdr.len as usize];
        self.stream
            .read_exact(&mut payload)
            .map_err(|e| io_err("reading a message", &self.peer, e))?;
        Ok((hdr.kind, payload))
    }

    /// Receives one message of kind `want`; a `Reject` becomes an error with its reason, any
    /// other kind is a protocol error.
    pub fn expect(&mut self, want: Kind) -> Result<Vec<u8>> {
        let (kind, payload) = self.recv()?;
        if kind == want {
            return Ok(payload);
        }
        if kind == Kind::Reject {
            let reason = decode_reason(&payload)?;
            return Err(Error::InvalidParam(reason));
        }
        Err(Error::Wire(format!(
            "expected a {want:?} message from {}, got {kind:?}",
            self.peer
        )))
    }

    /// Sends the test parameters.
    pub fn send_params(&mut self, p: &TestParams) -> Result<()> {
        let mut b = Vec::new();
        p.encode(&mut b);
        self.send(Kind::Request, &b)
    }

    /// Sends a reject reason.
    pub fn send_reject(&mut self, reason: &str) -> Result<()> {
        let mut b = Vec::new();
        encode_reason(reason, &mut b);
        self.send(Kind::Reject, &b)
    }

    /// Sends addresses.
    pub fn send_address(&mut self, a: &AddressInfo) -> Result<()> {
        let mut b = Vec::new();
        a.encode(&mut b)?;
        self.send(Kind::Address, &b)
    }

    /// Receives addresses.
    pub fn recv_address(&mut self) -> Result<AddressInfo> {
        AddressInfo::decode(&self.expect(Kind::Address)?)
    }

    /// Copies what is waiting on the channel into `buf` without taking it and without
    /// blocking: one `recv(MSG_PEEK | MSG_DONTWAIT)`, `WouldBlock` when nothing waits. The
    /// socket's own mode is left alone. Toggling it around a blocking peek cost two `ioctl`
    /// (`FIONBIO`) per check, and the waits of every test check every 65,536 idle spins: a
    /// tag_bw sender with tag offload off, idle while the receiver copies, made 0.8-1.6 of
    /// them per message under `strace` (what `tests/rdma-vm/count-ucx-tag.sh tag_bw` showed as
    /// an `ioctl` per message; registrations are `ioctl` too, but the cache made none per
    /// message).
    fn peek_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd as _;
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the call, and the
        // descriptor is the stream's own, open while `self` lives.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Checks, without blocking, what the peer said in the middle of a test: nothing yet
    /// (`Ok(false)`), or that it finished cleanly (`Ok(true)`, its `Done` with status 0 is
    /// waiting). A peer that closed the channel, failed, or sent anything else is an error.
    pub fn peer_finished(&self) -> Result<bool> {
        let mut b = [0u8; FrameHeader::LEN + 8];
        let n = match self.peek_now(&mut b) {
            Ok(0) => {
                return Err(Error::ConnectionReset(format!(
                    "{} closed the side channel in the middle of the test",
                    self.peer
                )))
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(io_err("polling", &self.peer, e)),
        };
        if n < FrameHeader::LEN {
            return Ok(false);
        }
        let hdr = FrameHeader::decode(&b[..FrameHeader::LEN])?;
        if hdr.kind != Kind::Done {
            return Err(Error::Wire(format!(
                "{} sent {:?} in the middle of the test",
                self.peer, hdr.kind
            )));
        }
        if n < b.len() {
            return Ok(false);
        }
        match decode_status(&b[FrameHeader::LEN..])? {
            0 => Ok(true),
            st => Err(Error::PeerFailure(format!(
                "{} stopped the test (status {st}; see its error output)",
                self.peer
            ))),
        }
    }

    /// Checks, without blocking, whether the peer has sent a message or closed the channel.
    /// Gives `Ok(true)` when a message is waiting, `Ok(false)` when nothing arrived, and
    /// [`Error::ConnectionReset`] when the peer closed the channel.
    pub fn poll_readable(&self) -> Result<bool> {
        let mut b = [0u8; 1];
        match self.peek_now(&mut b) {
            Ok(0) => Err(Error::ConnectionReset(format!(
                "{} closed the side channel in the middle of the test",
                self.peer
            ))),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(io_err("polling", &self.peer, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_errors() {
        let h = FrameHeader {
            kind: Kind::Address,
            len: 77,
        };
        let b = h.encode();
        assert_eq!(FrameHeader::decode(&b).unwrap(), h);
        for cut in 0..FrameHeader::LEN {
            assert!(matches!(
                FrameHeader::decode(&b[..cut]),
                Err(Error::Wire(_))
            ));
        }
        let mut bad = b;
        bad[0] ^= 1;
        assert!(FrameHeader::decode(&bad)
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut bad = b;
        bad[4] = 9;
        assert!(FrameHeader::decode(&bad)
            .unwrap_err()
            .to_string()
            .contains("version"));
        let mut bad = b;
        bad[5] = 42;
        assert!(FrameHeader::decode(&bad)
            .unwrap_err()
            .to_string()
            .contains("kind"));
        let mut bad = b;
        bad[8..12].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        assert!(FrameHeader::decode(&bad).is_err());
    }

    #[test]
    fn address_round_trip_and_truncation() {
        let a = AddressInfo {
            buffer_addr: 0x7fff_0000_1000,
            buffer_len: 4096,
            device_addr: vec![1, 2, 3],
            iface_addr: vec![4; 10],
            ep_addr: vec![],
            rkey: vec![9; 17],
        };
        let mut b = Vec::new();
        a.encode(&mut b).unwrap();
        assert_eq!(b.len(), AddressInfo::LEN + 3 + 10 + 17);
        assert_eq!(AddressInfo::decode(&b).unwrap(), a);
        for cut in 0..b.len() {
            assert!(matches!(
                AddressInfo::decode(&b[..cut]),
                Err(Error::Wire(_))
            ));
        }
        b.push(1);
        assert!(AddressInfo::decode(&b).is_err());
    }

    #[test]
    fn reason_and_status_round_trip() {
        let mut b = Vec::new();
        encode_reason("no such device: eth9", &mut b);
        assert_eq!(decode_reason(&b).unwrap(), "no such device: eth9");
        assert!(decode_reason(&b[..b.len() - 1]).is_err());
        assert_eq!(decode_status(&encode_status(7)).unwrap(), 7);
        assert!(decode_status(&[0; 7]).is_err());
    }

    #[test]
    fn channel_carries_frames_and_reports_close() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut c = Channel::new(s, Duration::from_secs(5)).unwrap();
            let (k, p) = c.recv().unwrap();
            assert_eq!(k, Kind::Request);
            let params = TestParams::decode(&p).unwrap();
            c.send_reject(&format!("no {}", params.test)).unwrap();
        });
        let s = TcpStream::connect(addr).unwrap();
        let mut c = Channel::new(s, Duration::from_secs(5)).unwrap();
        let p = TestParams {
            test: crate::params::TestId::AmLat,
            layout: crate::params::Layout::Short,
            sizes: vec![8],
            iterations: 10,
            warmup: 1,
            outstanding: 1,
            window: 1,
            transport: "posix".into(),
            device: "memory".into(),
            mem: Default::default(),
        };
        c.send_params(&p).unwrap();
        let e = c.expect(Kind::Accept).unwrap_err().to_string();
        assert!(e.contains("no am_lat"), "{e}");
        t.join().unwrap();
        assert!(matches!(c.poll_readable(), Err(Error::ConnectionReset(_))));
    }

    /// The mid-test checks look at the channel without switching the socket's blocking mode
    /// (they once set it non-blocking and back around each peek: two `ioctl` per check, and
    /// a blocking socket afterwards whatever it was before).
    #[test]
    fn mid_test_checks_leave_the_socket_mode_alone() {
        use std::os::fd::AsRawFd as _;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let client = TcpStream::connect(addr).unwrap();
        let (server, _) = l.accept().unwrap();
        let mut tx = Channel::new(server, Duration::from_secs(5)).unwrap();
        let rx = Channel::new(client, Duration::from_secs(5)).unwrap();
        let fd = rx.stream.as_raw_fd();
        // SAFETY: F_GETFL on an open descriptor reads its flags.
        let nonblocking = || unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
        for mode in [false, true] {
            rx.stream.set_nonblocking(mode).unwrap();
            assert!(!rx.peer_finished().unwrap(), "nothing sent yet");
            assert!(!rx.poll_readable().unwrap(), "nothing sent yet");
            assert_eq!(nonblocking(), mode, "the checks changed the socket's mode");
        }
        rx.stream.set_nonblocking(false).unwrap();
        tx.send(Kind::Done, &encode_status(0)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !rx.peer_finished().unwrap() {
            assert!(std::time::Instant::now() < deadline, "Done never seen");
            std::thread::yield_now();
        }
        assert!(rx.poll_readable().unwrap());
        assert!(!nonblocking());
        drop(tx);
    }
}
