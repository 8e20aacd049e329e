//! The tcp transport's wire format and stream reassembler.
//!
//! Everything on a tcp connection is a sequence of frames. A frame is an 8-byte
//! [`FrameHeader`] followed by `length` body bytes; the body of each [`Kind`] starts with a
//! fixed sub-header (possibly empty) followed by payload. All integers are little-endian.
//!
//! ```text
//!  0        1        2        3        4        5        6        7        8
//!  +--------+--------+--------+--------+--------+--------+--------+--------+
//!  |  kind  | am_id  |  flags (u16 LE) |        body length (u32 LE)       |
//!  +--------+--------+--------+--------+--------+--------+--------+--------+
//!  | body: kind's sub-header, then payload ...                             |
//! ```
//!
//! | kind | name        | sub-header       | payload                    | sent by   |
//! |------|-------------|------------------|----------------------------|-----------|
//! | 1    | `Hello`     | [`Hello`] (32)   | none                       | connector |
//! | 11   | `HelloAck`  | [`HelloAck`] (8) | none                       | acceptor  |
//! | 2    | `Am`        | none             | AM bytes (≤ [`MAX_AM_BODY`]) | sender  |
//! | 3    | `Put`       | [`PutHdr`] (24)  | data written to the target | initiator |
//! | 4    | `PutAck`    | [`Ack`] (16)     | none                       | target    |
//! | 5    | `GetReq`    | [`GetReq`] (32)  | none                       | initiator |
//! | 6    | `GetResp`   | [`Ack`] (16)     | data read from the target  | target    |
//! | 7    | `AtomicReq` | [`AtomicReq`] (48) | none                     | initiator |
//! | 8    | `AtomicResp`| [`AtomicResp`] (24) | none                    | target    |
//! | 9    | `FlushReq`  | [`FlushReq`] (8) | none                       | initiator |
//! | 10   | `FlushAck`  | [`Ack`] (16)     | none                       | target    |
//! | 16   | `TagEager`  | [`TagHdr`] (16)  | message (≤ [`MAX_TAG_EAGER`]) | sender |
//! | 17   | `TagRndv`   | [`TagRndvHdr`] (40) | user header (≤ [`MAX_TAG_RNDV_HDR`]) | sender |
//! | 18   | `TagGet`    | [`GetReq`] (32)  | none                       | receiver  |
//!
//! `flags` is reserved and must be zero. Connection set-up: a connect-to-iface connector
//! sends `Hello` and holds every other frame until the acceptor's `HelloAck` arrives; an
//! acceptor that lost a simultaneous connect (see [`Hello`]) never acknowledges, so no frame
//! is ever sent on a connection that gets dropped. Connect-to-ep hellos are not acknowledged.
//! Tag offload: a `TagEager` payload above
//! [`TAG_WHOLE`] bytes is streamed, and the reassembler reports its start (an empty first
//! chunk) as soon as the sub-header is in, so the receiver matches the tag against its posted
//! receives before the payload and can `recv` the payload straight into the posted buffer. A
//! `TagRndv` announces `length` bytes held by the sender under operation id `op_id` (0: a
//! rendezvous *request*, which never matches a posted receive); a receiver whose posted receive
//! matched asks for the data with `TagGet` (`GetReq` with `key` = the sender's op id and
//! `remote_addr` = 0), and the sender answers with a `GetResp` sent straight from its buffer,
//! which the receiver `recv`s straight into the posted buffer. That is why `Put`, `GetResp` and
//! `TagEager` payloads are delivered as a stream of chunks: the consumer picks the destination
//! from the sub-header before the payload arrives.
//!
//! [`Reassembler`] is a pure state machine (no I/O): it turns bytes, split anywhere, into
//! [`RxEvent`]s, and rejects malformed input with a [`WireError`].

use std::fmt;

/// Magic number at the start of [`Hello`]: `"RUCX"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"RUCX");
/// Protocol version carried in [`Hello`] (2: connect-to-iface hellos carry a connection
/// sequence number and are answered with [`HelloAck`]).
pub const VERSION: u8 = 2;
/// Largest body of an `Am` frame (the AM bytes).
pub const MAX_AM_BODY: usize = 64 * 1024;
/// `Put` and `GetResp` payloads up to this size are delivered in one chunk; larger ones in
/// chunks as bytes arrive, so the receiver can `recv` most of them straight into their
/// destination (above this size that saves more than the extra system call costs).
pub const MAX_WHOLE: usize = 16 * 1024;
/// Largest payload of one `Put` or `GetResp` (and length of a `GetReq`).
pub const MAX_RMA: usize = 1 << 30;
/// Smallest receive buffer a [`Reassembler`] user must offer: a whole `Am` frame or a whole
/// small `Put`/`GetResp` frame must fit.
pub const MIN_RX_BUFFER: usize = FrameHeader::LEN
    + if MAX_AM_BODY > PutHdr::LEN + MAX_WHOLE {
        MAX_AM_BODY
    } else {
        PutHdr::LEN + MAX_WHOLE
    };
/// Largest payload of a `TagEager` frame.
pub const MAX_TAG_EAGER: usize = 1 << 20;
/// `TagEager` payloads up to this size are delivered in one chunk (they arrive with their
/// header in one `recv`, and one copy is cheaper than a second system call); larger ones are
/// streamed.
pub const TAG_WHOLE: usize = 1024;
/// Largest user header of a `TagRndv` frame.
pub const MAX_TAG_RNDV_HDR: usize = 256;

/// A frame that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the structure needs.
    #[error("truncated {what}: {have} of {need} bytes")]
    Truncated {
        /// The structure.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// The kind byte names no frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Reserved flags were set.
    #[error("reserved frame flags {0:#06x} set")]
    BadFlags(u16),
    /// An AM id out of range, or a non-zero id on a frame that is not an AM.
    #[error("bad active message id {id} on a {kind} frame")]
    BadAmId {
        /// The frame kind.
        kind: Kind,
        /// The id.
        id: u8,
    },
    /// A body longer than the kind allows.
    #[error("{kind} frame body of {len} bytes exceeds the limit of {max}")]
    Oversized {
        /// The frame kind.
        kind: Kind,
        /// Length announced.
        len: u64,
        /// Largest allowed.
        max: u64,
    },
    /// A body whose length does not fit its kind's fixed layout.
    #[error("{kind} frame body of {len} bytes, expected {expected}")]
    BadLength {
        /// The frame kind.
        kind: Kind,
        /// Length announced.
        len: u64,
        /// Length (or minimum length) expected.
        expected: u64,
    },
    /// The hello frame does not start with [`MAGIC`].
    #[error("bad magic {0:#010x} (not a rucx tcp peer)")]
    BadMagic(u32),
    /// The hello frame has an unsupported version.
    #[error("unsupported protocol version {0} (this side speaks {VERSION})")]
    BadVersion(u8),
    /// A field holds a value outside its domain.
    #[error("bad {field} value {value}")]
    BadField {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
}

impl From<WireError> for ucs::Error {
    fn from(e: WireError) -> Self {
        ucs::Error::Wire(e.to_string())
    }
}

fn need(what: &'static str, buf: &[u8], n: usize) -> Result<(), WireError> {
    if buf.len() < n {
        Err(WireError::Truncated {
            what,
            need: n,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

#[inline]
fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
#[inline]
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
#[inline]
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
#[inline]
fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// First frame of every connection.
    Hello = 1,
    /// An active message.
    Am = 2,
    /// Write to the target's memory.
    Put = 3,
    /// The target applied a put that asked for an ack (or refused one).
    PutAck = 4,
    /// Read request.
    GetReq = 5,
    /// Read response with the data.
    GetResp = 6,
    /// Atomic operation request.
    AtomicReq = 7,
    /// Atomic operation response.
    AtomicResp = 8,
    /// Asks the target to acknowledge once everything before it was applied.
    FlushReq = 9,
    /// Acknowledges a flush.
    FlushAck = 10,
    /// The acceptor took a connect-to-iface connection: the connector may send.
    HelloAck = 11,
    /// A tagged eager message (tag offload).
    TagEager = 16,
    /// A tagged rendezvous announcement or request (tag offload).
    TagRndv = 17,
    /// The receiver of a matched `TagRndv` asks the sender for its data.
    TagGet = 18,
}

impl Kind {
    /// Decodes a kind byte.
    pub fn from_u8(v: u8) -> Result<Kind, WireError> {
        Ok(match v {
            1 => Kind::Hello,
            2 => Kind::Am,
            3 => Kind::Put,
            4 => Kind::PutAck,
            5 => Kind::GetReq,
            6 => Kind::GetResp,
            7 => Kind::AtomicReq,
            8 => Kind::AtomicResp,
            9 => Kind::FlushReq,
            10 => Kind::FlushAck,
            11 => Kind::HelloAck,
            16 => Kind::TagEager,
            17 => Kind::TagRndv,
            18 => Kind::TagGet,
            _ => return Err(WireError::UnknownKind(v)),
        })
    }

    /// Length of the kind's fixed sub-header at the start of the body.
    pub fn sub_len(self) -> usize {
        match self {
            Kind::Hello => Hello::LEN,
            Kind::Am => 0,
            Kind::Put => PutHdr::LEN,
            Kind::PutAck | Kind::GetResp | Kind::FlushAck => Ack::LEN,
            Kind::GetReq | Kind::TagGet => GetReq::LEN,
            Kind::TagEager => TagHdr::LEN,
            Kind::TagRndv => TagRndvHdr::LEN,
            Kind::AtomicReq => AtomicReq::LEN,
            Kind::AtomicResp => AtomicResp::LEN,
            Kind::FlushReq => FlushReq::LEN,
            Kind::HelloAck => HelloAck::LEN,
        }
    }

    /// Largest payload after the sub-header.
    pub fn max_payload(self) -> usize {
        match self {
            Kind::Am => MAX_AM_BODY,
            Kind::Put | Kind::GetResp => MAX_RMA,
            Kind::TagEager => MAX_TAG_EAGER,
            Kind::TagRndv => MAX_TAG_RNDV_HDR,
            _ => 0,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The 8-byte header of every frame.
///
/// ```text
///  0        1        2                 4                                   8
///  +--------+--------+--------+--------+--------+--------+--------+--------+
///  |  kind  | am_id  |  flags (u16 LE) |        body length (u32 LE)       |
///  +--------+--------+--------+--------+--------+--------+--------+--------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Frame kind.
    pub kind: Kind,
    /// Active-message id (`Am` only, else 0).
    pub am_id: u8,
    /// Body length: sub-header plus payload.
    pub length: u32,
}

impl FrameHeader {
    /// Encoded size.
    pub const LEN: usize = 8;

    /// A header for `kind` with a payload of `payload_len` bytes after the sub-header.
    #[inline]
    pub fn new(kind: Kind, am_id: u8, payload_len: usize) -> Self {
        FrameHeader {
            kind,
            am_id,
            length: (kind.sub_len() + payload_len) as u32,
        }
    }

    /// Writes the header into `out[..8]`.
    #[inline]
    pub fn encode(&self, out: &mut [u8]) {
        out[0] = self.kind as u8;
        out[1] = self.am_id;
        out[2] = 0;
        out[3] = 0;
        put_u32(out, 4, self.length);
    }

    /// The encoded header as an array.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        self.encode(&mut b);
        b
    }

    /// Reads and validates a header: kind, flags, AM id and the body length against the kind.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("frame header", buf, Self::LEN)?;
        let kind = Kind::from_u8(buf[0])?;
        let am_id = buf[1];
        let flags = u16_at(buf, 2);
        if flags != 0 {
            return Err(WireError::BadFlags(flags));
        }
        let ok_id = if kind == Kind::Am {
            am_id < crate::ep::AM_ID_MAX
        } else {
            am_id == 0
        };
        if !ok_id {
            return Err(WireError::BadAmId { kind, id: am_id });
        }
        let length = u32_at(buf, 4);
        let sub = kind.sub_len() as u64;
        let len = length as u64;
        if len < sub || (kind.max_payload() == 0 && len != sub) {
            return Err(WireError::BadLength {
                kind,
                len,
                expected: sub,
            });
        }
        let max = sub + kind.max_payload() as u64;
        if len > max {
            return Err(WireError::Oversized { kind, len, max });
        }
        Ok(FrameHeader {
            kind,
            am_id,
            length,
        })
    }
}

/// Connection mode announced in [`Hello`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloMode {
    /// A connect-to-iface endpoint: AMs and requests flow from the connector, responses back.
    Iface = 0,
    /// A connect-to-ep pair: the connection serves both endpoints in both directions.
    Ep = 1,
}

/// First frame on every connection, sent by the connecting side.
///
/// In `Iface` mode `src_conn_id` is the connection *sequence number*: a connector numbers its
/// connect-to-iface endpoints to each peer interface 0, 1, 2, ... in creation order, and the
/// acceptor's endpoint number k to that interface pairs with the connector's number k. When
/// both sides dialed pair k at the same time (each receives the other's hello while its own
/// dial waits for a [`HelloAck`]), the connection dialed by the side with the smaller
/// interface address (IPv4 address, then port) wins: the larger side moves its endpoint,
/// with its held frames, onto the winning connection and acknowledges it there, then closes
/// its own dial; the smaller side leaves the losing connection unanswered until the peer
/// closes it.
///
/// ```text
///  0                                   4        5        6                 8
///  +--------+--------+--------+--------+--------+--------+--------+--------+
///  |  magic "RUCX" (u32 LE)            | ver=1  | mode   | src_port (u16)  |
///  +--------+--------+--------+--------+--------+--------+--------+--------+
///  |  src_conn_id (u64 LE): connector's endpoint id (ep) or sequence (iface) |  8..16
///  +-----------------------------------------------------------------------+
///  |  dst_conn_id (u64 LE): the acceptor's endpoint id (ep mode) or 0      |  16..24
///  +-----------------------------------+-----------------------------------+
///  |  src_ip (IPv4, network order)     |  reserved (0)                     |  24..32
///  +-----------------------------------+-----------------------------------+
/// ```
/// `src_ip:src_port` is the connector's interface address (its listening socket), so the
/// acceptor can send its own messages back over this connection instead of dialing another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Connection mode.
    pub mode: HelloMode,
    /// The connector's endpoint id (`Ep`) or connection sequence number (`Iface`).
    pub src_conn_id: u64,
    /// The acceptor's endpoint id (connect-to-ep) or 0.
    pub dst_conn_id: u64,
    /// The connector's interface address (IPv4, as a big-endian u32).
    pub src_ip: u32,
    /// The connector's interface port.
    pub src_port: u16,
}

impl Hello {
    /// Encoded size.
    pub const LEN: usize = 32;
    /// Writes into `out[..32]`.
    pub fn encode(&self, out: &mut [u8]) {
        put_u32(out, 0, MAGIC);
        out[4] = VERSION;
        out[5] = self.mode as u8;
        out[6..8].copy_from_slice(&self.src_port.to_le_bytes());
        put_u64(out, 8, self.src_conn_id);
        put_u64(out, 16, self.dst_conn_id);
        out[24..28].copy_from_slice(&self.src_ip.to_be_bytes());
        put_u32(out, 28, 0);
    }
    /// Reads and validates.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("hello", buf, Self::LEN)?;
        let magic = u32_at(buf, 0);
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        if buf[4] != VERSION {
            return Err(WireError::BadVersion(buf[4]));
        }
        let mode = match buf[5] {
            0 => HelloMode::Iface,
            1 => HelloMode::Ep,
            v => {
                return Err(WireError::BadField {
                    field: "hello mode",
                    value: v as u64,
                })
            }
        };
        let reserved = u32_at(buf, 28);
        if reserved != 0 {
            return Err(WireError::BadField {
                field: "hello reserved",
                value: reserved as u64,
            });
        }
        Ok(Hello {
            mode,
            src_conn_id: u64_at(buf, 8),
            dst_conn_id: u64_at(buf, 16),
            src_ip: u32::from_be_bytes([buf[24], buf[25], buf[26], buf[27]]),
            src_port: u16_at(buf, 6),
        })
    }
}

/// Sub-header of `HelloAck`: the acceptor answers a connect-to-iface [`Hello`].
///
/// ```text
///  0                                       8
///  +---------------------------------------+
///  |  seq (u64 LE): the hello's sequence   |
///  +---------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloAck {
    /// The connection sequence number of the acknowledged hello (its `src_conn_id`).
    pub seq: u64,
}

impl HelloAck {
    /// Encoded size.
    pub const LEN: usize = 8;
    /// Writes into `out[..8]`.
    pub fn encode(&self, out: &mut [u8]) {
        put_u64(out, 0, self.seq);
    }
    /// Reads.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("hello ack", buf, Self::LEN)?;
        Ok(HelloAck {
            seq: u64_at(buf, 0),
        })
    }
}

/// Sub-header of `TagEager`: the tag and the immediate value.
///
/// ```text
///  0                                       8                                      16
///  +---------------------------------------+---------------------------------------+
///  |  tag (u64 LE)                         |  imm (u64 LE)                         |
///  +---------------------------------------+---------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagHdr {
    /// The message's tag.
    pub tag: u64,
    /// Immediate data (`tag_eager_bcopy`/`zcopy`; 0 for short).
    pub imm: u64,
}

impl TagHdr {
    /// Encoded size.
    pub const LEN: usize = 16;
    /// Writes into `out[..16]`.
    pub fn encode(&self, out: &mut [u8]) {
        put_u64(out, 0, self.tag);
        put_u64(out, 8, self.imm);
    }
    /// Reads.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("tag header", buf, Self::LEN)?;
        Ok(TagHdr {
            tag: u64_at(buf, 0),
            imm: u64_at(buf, 8),
        })
    }
}

/// Sub-header of `TagRndv`; the user header follows as the payload.
///
/// ```text
///  0                                       8                                      16
///  +---------------------------------------+---------------------------------------+
///  |  tag (u64 LE)                         |  op_id (u64 LE; 0 = rendezvous request)|
///  +---------------------------------------+---------------------------------------+
///  |  remote_addr (u64 LE): data address   |  key (u64 LE): tcp registration key   |  16..32
///  +---------------------------------------+---------------------------------------+
///  |  length (u64 LE): data length         |                                          32..40
///  +---------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagRndvHdr {
    /// The message's tag.
    pub tag: u64,
    /// The sender's operation id (`TagGet` names it), 0 for a request.
    pub op_id: u64,
    /// Address of the data at the sender (for a software get of an unexpected rendezvous).
    pub remote_addr: u64,
    /// The sender's registration key of the data (0 if not registered with tcp).
    pub key: u64,
    /// Length of the data.
    pub length: u64,
}

impl TagRndvHdr {
    /// Encoded size.
    pub const LEN: usize = 40;
    /// Writes into `out[..40]`.
    pub fn encode(&self, out: &mut [u8]) {
        put_u64(out, 0, self.tag);
        put_u64(out, 8, self.op_id);
        put_u64(out, 16, self.remote_addr);
        put_u64(out, 24, self.key);
        put_u64(out, 32, self.length);
    }
    /// Reads, rejecting a request that claims data and a length above [`MAX_RMA`].
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("tag rendezvous header", buf, Self::LEN)?;
        let h = TagRndvHdr {
            tag: u64_at(buf, 0),
            op_id: u64_at(buf, 8),
            remote_addr: u64_at(buf, 16),
            key: u64_at(buf, 24),
            length: u64_at(buf, 32),
        };
        if h.length > MAX_RMA as u64 || (h.op_id == 0 && h.length != 0) {
            return Err(WireError::BadField {
                field: "tag rendezvous length",
                value: h.length,
            });
        }
        Ok(h)
    }
}

/// Sub-header of `Put`: where the payload goes.
///
/// ```text
///  0                                       8                                      16
///  +---------------------------------------+---------------------------------------+
///  |  req_id (u64 LE; 0 = no ack wanted)   |  remote_addr (u64 LE)                 |
///  +---------------------------------------+---------------------------------------+
///  |  key (u64 LE): the target's registration key id                              |  16..24
///  +-------------------------------------------------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutHdr {
    /// Request id to acknowledge, or 0 (only a refusal is reported).
    pub req_id: u64,
    /// Target address.
    pub remote_addr: u64,
    /// Registration key id.
    pub key: u64,
}

impl PutHdr {
    /// Encoded size.
    pub const LEN: usize = 24;
    /// Writes into `out[..24]`.
    pub fn encode(&self, out: &mut [u8]) {
        put_u64(out, 0, self.req_id);
        put_u64(out, 8, self.remote_addr);
        put_u64(out, 16, self.key);
    }
    /// Reads.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("put header", buf, Self::LEN)?;
        Ok(PutHdr {
            req_id: u64_at(buf, 0),
            remote_addr: u64_at(buf, 8),
            key: u64_at(buf, 16),
        })
    }
}

/// Result status on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireStatus {
    /// Success.
    Ok = 0,
    /// The key, range or alignment was refused by the target.
    RemoteAccess = 1,
}

impl WireStatus {
    fn from_u32(v: u32) -> Result<Self, WireError> {
        match v {
            0 => Ok(WireStatus::Ok),
            1 => Ok(WireStatus::RemoteAccess),
            v => Err(WireError::BadField {
                field: "status",
                value: v as u64,
            }),
        }
    }
}

/// Sub-header of `PutAck`, `GetResp` and `FlushAck`.
///
/// ```text
///  0                                       8                   12                  16
///  +---------------------------------------+-------------------+-------------------+
///  |  req_id (u64 LE)                      |  status (u32 LE)  |  reserved (0)     |
///  +---------------------------------------+-------------------+-------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The request answered.
    pub req_id: u64,
    /// Its status.
    pub status: WireStatus,
}

impl Ack {
    /// Encoded size.
    pub const LEN: usize = 16;
    /// Writes into `out[..16]`.
    pub fn encode(&self, out: &mut [u8]) {
        put_u64(out, 0, self.req_id);
        put_u32(out, 8, self.status as u32);
        put_u32(out, 12, 0);
    }
    /// Reads and validates.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("ack", buf, Self::LEN)?;
        Ok(Ack {
            req_id: u64_at(buf, 0),
            status: WireStatus::from_u32(u32_at(buf, 8))?,
        })
    }
}

/// Sub-header of `GetReq`.
///
/// ```text
///  0                     8                     16                    24                    32
///  +---------------------+---------------------+---------------------+---------------------+
///  | req_id (u64 LE)     | remote_addr (u64 LE)| key (u64 LE)        | length (u64 LE)     |
///  +---------------------+---------------------+---------------------+---------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetReq {
    /// Request id echoed in the `GetResp`.
    pub req_id: u64,
    /// Source address at the target.
    pub remote_addr: u64,
    /// Registration key id.
    pub key: u64,
    /// Bytes to read (≤ [`MAX_RMA`]).
    pub length: u64,
}

impl GetReq {
    /// Encoded size.
    pub const LEN: usize = 32;
    /// Writes into `out[..32]`.
    pub fn encode(&self, out: &mut [u8]) {
        put_u64(out, 0, self.req_id);
        put_u64(out, 8, self.remote_addr);
        put_u64(out, 16, self.key);
        put_u64(out, 24, self.length);
    }
    /// Reads and validates the length.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("get request", buf, Self::LEN)?;
        let length = u64_at(buf, 24);
        if length > MAX_RMA as u64 {
            return Err(WireError::Oversized {
                kind: Kind::GetReq,
                len: length,
                max: MAX_RMA as u64,
            });
        }
        Ok(GetReq {
            req_id: u64_at(buf, 0),
            remote_addr: u64_at(buf, 8),
            key: u64_at(buf, 16),
            length,
        })
    }
}

/// The operation of an [`AtomicReq`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicMode {
    /// Post: no result wanted.
    Post = 0,
    /// Fetch: the old value comes back.
    Fetch = 1,
    /// Compare-and-swap: `compare` is used, the old value comes back.
    Cswap = 2,
}

/// Sub-header of `AtomicReq`.
///
/// ```text
///  0                     8                     16                    24
///  +---------------------+---------------------+---------------------+
///  | req_id (u64 LE)     | remote_addr (u64 LE)| key (u64 LE)        |
///  +---------------------+---------------------+---------------------+
///  | value (u64 LE)      | compare (u64 LE)    | op | size | mode | 0 0 0 0 0 |  24..48
///  +---------------------+---------------------+---------------------+
/// ```
/// `op`: 0 add, 1 and, 2 or, 3 xor, 4 swap; `size`: 4 or 8; `mode`: [`AtomicMode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicReq {
    /// Request id (0 for post).
    pub req_id: u64,
    /// Target address.
    pub remote_addr: u64,
    /// Registration key id.
    pub key: u64,
    /// Operand.
    pub value: u64,
    /// Compare value (cswap).
    pub compare: u64,
    /// Operation (ignored for cswap).
    pub op: crate::ep::AtomicOp,
    /// Operand size in bytes: 4 or 8.
    pub size: u8,
    /// Post, fetch or cswap.
    pub mode: AtomicMode,
}

impl AtomicReq {
    /// Encoded size.
    pub const LEN: usize = 48;
    /// Writes into `out[..48]`.
    pub fn encode(&self, out: &mut [u8]) {
        use crate::ep::AtomicOp as O;
        put_u64(out, 0, self.req_id);
        put_u64(out, 8, self.remote_addr);
        put_u64(out, 16, self.key);
        put_u64(out, 24, self.value);
        put_u64(out, 32, self.compare);
        out[40] = match self.op {
            O::Add => 0,
            O::And => 1,
            O::Or => 2,
            O::Xor => 3,
            O::Swap => 4,
        };
        out[41] = self.size;
        out[42] = self.mode as u8;
        out[43..48].fill(0);
    }
    /// Reads and validates op, size and mode.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        use crate::ep::AtomicOp as O;
        need("atomic request", buf, Self::LEN)?;
        let op = match buf[40] {
            0 => O::Add,
            1 => O::And,
            2 => O::Or,
            3 => O::Xor,
            4 => O::Swap,
            v => {
                return Err(WireError::BadField {
                    field: "atomic op",
                    value: v as u64,
                })
            }
        };
        let size = buf[41];
        if size != 4 && size != 8 {
            return Err(WireError::BadField {
                field: "atomic size",
                value: size as u64,
            });
        }
        let mode = match buf[42] {
            0 => AtomicMode::Post,
            1 => AtomicMode::Fetch,
            2 => AtomicMode::Cswap,
            v => {
                return Err(WireError::BadField {
                    field: "atomic mode",
                    value: v as u64,
                })
            }
        };
        Ok(AtomicReq {
            req_id: u64_at(buf, 0),
            remote_addr: u64_at(buf, 8),
            key: u64_at(buf, 16),
            value: u64_at(buf, 24),
            compare: u64_at(buf, 32),
            op,
            size,
            mode,
        })
    }
}

/// Sub-header of `AtomicResp`.
///
/// ```text
///  0                     8                   12                  16                    24
///  +---------------------+-------------------+-------------------+---------------------+
///  | req_id (u64 LE)     | status (u32 LE)   | reserved (0)      | old value (u64 LE)  |
///  +---------------------+-------------------+-------------------+---------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicResp {
    /// The request answered.
    pub req_id: u64,
    /// Its status.
    pub status: WireStatus,
    /// The value before the operation (zero-extended).
    pub value: u64,
}

impl AtomicResp {
    /// Encoded size.
    pub const LEN: usize = 24;
    /// Writes into `out[..24]`.
    pub fn encode(&self, out: &mut [u8]) {
        put_u64(out, 0, self.req_id);
        put_u32(out, 8, self.status as u32);
        put_u32(out, 12, 0);
        put_u64(out, 16, self.value);
    }
    /// Reads and validates.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("atomic response", buf, Self::LEN)?;
        Ok(AtomicResp {
            req_id: u64_at(buf, 0),
            status: WireStatus::from_u32(u32_at(buf, 8))?,
            value: u64_at(buf, 16),
        })
    }
}

/// Sub-header of `FlushReq`.
///
/// ```text
///  0                                       8
///  +---------------------------------------+
///  |  req_id (u64 LE)                      |
///  +---------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushReq {
    /// Request id echoed in the `FlushAck`.
    pub req_id: u64,
}

impl FlushReq {
    /// Encoded size.
    pub const LEN: usize = 8;
    /// Writes into `out[..8]`.
    pub fn encode(&self, out: &mut [u8]) {
        put_u64(out, 0, self.req_id);
    }
    /// Reads.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        need("flush request", buf, Self::LEN)?;
        Ok(FlushReq {
            req_id: u64_at(buf, 0),
        })
    }
}

/// A piece of a streamed payload (`Put` or `GetResp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// Offset of `data` inside the frame's payload.
    pub offset: u64,
    /// Total payload length of the frame.
    pub total: u64,
    /// The bytes.
    pub data: &'a [u8],
    /// True on the frame's last chunk (also for an empty payload).
    pub last: bool,
}

/// What the reassembler produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxEvent<'a> {
    /// A hello frame.
    Hello(Hello),
    /// A hello acknowledgement.
    HelloAck(HelloAck),
    /// A whole active message.
    Am {
        /// AM id.
        id: u8,
        /// AM bytes.
        data: &'a [u8],
    },
    /// Put payload bytes.
    Put(PutHdr, Chunk<'a>),
    /// A put acknowledgement.
    PutAck(Ack),
    /// A get request.
    GetReq(GetReq),
    /// Get response bytes.
    GetResp(Ack, Chunk<'a>),
    /// Tagged eager bytes; a streamed frame starts with an empty chunk at offset 0.
    TagEager(TagHdr, Chunk<'a>),
    /// A tagged rendezvous with its user header.
    TagRndv(TagRndvHdr, &'a [u8]),
    /// A request for the data of a tagged rendezvous (`key` is the op id).
    TagGet(GetReq),
    /// An atomic request.
    AtomicReq(AtomicReq),
    /// An atomic response.
    AtomicResp(AtomicResp),
    /// A flush request.
    FlushReq(FlushReq),
    /// A flush acknowledgement.
    FlushAck(Ack),
}

/// The frame whose payload is being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSub {
    /// A large put.
    Put(PutHdr),
    /// A large get response.
    GetResp(Ack),
    /// A large tagged eager message.
    TagEager(TagHdr),
}

/// Where a streamed payload stands (see [`Reassembler::streaming`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPos {
    /// The frame.
    pub sub: StreamSub,
    /// Payload bytes consumed so far.
    pub done: u64,
    /// Payload length.
    pub total: u64,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Header,
    Stream {
        sub: StreamSub,
        total: u64,
        done: u64,
    },
}

/// Turns a byte stream into [`RxEvent`]s. Pure: the caller owns the bytes and does the I/O.
#[derive(Debug, Clone)]
pub struct Reassembler {
    state: State,
}

impl Default for Reassembler {
    fn default() -> Self {
        Self::new()
    }
}

impl Reassembler {
    /// At a frame boundary.
    pub fn new() -> Self {
        Reassembler {
            state: State::Header,
        }
    }

    /// True between frames (an EOF here is clean; elsewhere it cuts a frame).
    pub fn at_boundary(&self) -> bool {
        matches!(self.state, State::Header)
    }

    /// The large payload being streamed, if any. A caller that knows the payload's
    /// destination may read the next bytes straight into it (no intermediate buffer) and
    /// report them with [`Reassembler::advance_stream`] instead of passing them to `next`.
    pub fn streaming(&self) -> Option<StreamPos> {
        match self.state {
            State::Stream { sub, total, done } => Some(StreamPos { sub, done, total }),
            State::Header => None,
        }
    }

    /// Consumes `n` payload bytes the caller placed itself (at most the remaining ones).
    /// Gives true when that finished the frame.
    pub fn advance_stream(&mut self, n: u64) -> bool {
        if let State::Stream { sub, total, done } = self.state {
            let done = (done + n).min(total);
            if done == total {
                self.state = State::Header;
                return true;
            }
            self.state = State::Stream { sub, total, done };
        }
        false
    }

    /// Decodes from the start of `input` (the bytes not consumed so far). Gives the number of
    /// bytes consumed and maybe an event borrowing from `input`. `(0, None)` means more bytes
    /// are needed (at most [`MIN_RX_BUFFER`] in total for any frame); `(n > 0, None)` means
    /// bytes were consumed without an event yet: call again.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<RxEvent<'a>>), WireError> {
        match self.state {
            State::Stream { sub, total, done } => {
                if input.is_empty() {
                    return Ok((0, None));
                }
                let n = ((total - done) as usize).min(input.len());
                let chunk = Chunk {
                    offset: done,
                    total,
                    data: &input[..n],
                    last: done + n as u64 == total,
                };
                self.state = if chunk.last {
                    State::Header
                } else {
                    State::Stream {
                        sub,
                        total,
                        done: done + n as u64,
                    }
                };
                Ok((n, Some(stream_event(sub, chunk))))
            }
            State::Header => {
                if input.len() < FrameHeader::LEN {
                    return Ok((0, None));
                }
                let h = FrameHeader::decode(input)?;
                let body_len = h.length as usize;
                let sub_len = h.kind.sub_len();
                let payload = body_len - sub_len;
                let streamed = (matches!(h.kind, Kind::Put | Kind::GetResp) && payload > MAX_WHOLE)
                    || (h.kind == Kind::TagEager && payload > TAG_WHOLE);
                let want = if streamed {
                    FrameHeader::LEN + sub_len
                } else {
                    FrameHeader::LEN + body_len
                };
                if input.len() < want {
                    return Ok((0, None));
                }
                let body = &input[FrameHeader::LEN..want];
                let sub = &body[..sub_len];
                let data = &body[sub_len..];
                let whole = |offset| Chunk {
                    offset,
                    total: payload as u64,
                    data,
                    last: true,
                };
                let ev = match h.kind {
                    Kind::Hello => RxEvent::Hello(Hello::decode(sub)?),
                    Kind::HelloAck => RxEvent::HelloAck(HelloAck::decode(sub)?),
                    Kind::Am => RxEvent::Am {
                        id: h.am_id,
                        data: body,
                    },
                    Kind::Put | Kind::GetResp => {
                        let s = if h.kind == Kind::Put {
                            StreamSub::Put(PutHdr::decode(sub)?)
                        } else {
                            StreamSub::GetResp(Ack::decode(sub)?)
                        };
                        if streamed {
                            self.state = State::Stream {
                                sub: s,
                                total: payload as u64,
                                done: 0,
                            };
                            return Ok((want, None));
                        }
                        stream_event(s, whole(0))
                    }
                    Kind::TagEager => {
                        let t = TagHdr::decode(sub)?;
                        if streamed {
                            self.state = State::Stream {
                                sub: StreamSub::TagEager(t),
                                total: payload as u64,
                                done: 0,
                            };
                            // The start, so the receiver can match before the payload.
                            let start = Chunk {
                                offset: 0,
                                total: payload as u64,
                                data: &[],
                                last: false,
                            };
                            return Ok((want, Some(RxEvent::TagEager(t, start))));
                        }
                        RxEvent::TagEager(t, whole(0))
                    }
                    Kind::TagRndv => RxEvent::TagRndv(TagRndvHdr::decode(sub)?, data),
                    Kind::TagGet => RxEvent::TagGet(GetReq::decode(sub)?),
                    Kind::PutAck => RxEvent::PutAck(Ack::decode(sub)?),
                    Kind::GetReq => RxEvent::GetReq(GetReq::decode(sub)?),
                    Kind::AtomicReq => RxEvent::AtomicReq(AtomicReq::decode(sub)?),
                    Kind::AtomicResp => RxEvent::AtomicResp(AtomicResp::decode(sub)?),
                    Kind::FlushReq => RxEvent::FlushReq(FlushReq::decode(sub)?),
                    Kind::FlushAck => RxEvent::FlushAck(Ack::decode(sub)?),
                };
                Ok((want, Some(ev)))
            }
        }
    }
}

fn stream_event(sub: StreamSub, chunk: Chunk<'_>) -> RxEvent<'_> {
    match sub {
        StreamSub::Put(h) => RxEvent::Put(h, chunk),
        StreamSub::GetResp(a) => RxEvent::GetResp(a, chunk),
        StreamSub::TagEager(t) => RxEvent::TagEager(t, chunk),
    }
}

/// An owned copy of an event, for tests and fuzzing: streamed chunks are merged per frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedEvent {
    /// A control frame (hello, acks, requests) as its borrowed-free event.
    Control(String),
    /// An active message.
    Am(u8, Vec<u8>),
    /// A whole put payload.
    Put(PutHdr, Vec<u8>),
    /// A whole get response payload.
    GetResp(Ack, Vec<u8>),
    /// A whole tagged eager payload.
    TagEager(TagHdr, Vec<u8>),
    /// A tagged rendezvous and its user header.
    TagRndv(TagRndvHdr, Vec<u8>),
}

/// Decodes `chunks` (the stream, split anywhere) with a buffer of at most `buf_cap` bytes the
/// way a connection does, merging streamed chunks. Stops at the first error. Pure; used by
/// the property test and the fuzz target.
pub fn decode_stream<'c>(
    chunks: impl IntoIterator<Item = &'c [u8]>,
    buf_cap: usize,
) -> (Vec<OwnedEvent>, Result<(), WireError>) {
    let buf_cap = buf_cap.max(MIN_RX_BUFFER);
    let mut out = Vec::new();
    let mut r = Reassembler::new();
    let mut buf: Vec<u8> = Vec::with_capacity(buf_cap);
    let mut partial: Option<OwnedEvent> = None;
    for c in chunks {
        let mut c = c;
        while !c.is_empty() {
            let room = buf_cap - buf.len();
            let take = room.min(c.len());
            buf.extend_from_slice(&c[..take]);
            c = &c[take..];
            let mut pos = 0;
            loop {
                match r.next(&buf[pos..]) {
                    Err(e) => return (out, Err(e)),
                    Ok((0, None)) => break,
                    Ok((n, ev)) => {
                        pos += n;
                        if let Some(ev) = ev {
                            collect(ev, &mut partial, &mut out);
                        }
                    }
                }
            }
            buf.drain(..pos);
        }
    }
    (out, Ok(()))
}

fn collect(ev: RxEvent<'_>, partial: &mut Option<OwnedEvent>, out: &mut Vec<OwnedEvent>) {
    let (chunk, fresh) = match ev {
        RxEvent::Am { id, data } => {
            out.push(OwnedEvent::Am(id, data.to_vec()));
            return;
        }
        RxEvent::Put(h, c) => (c, OwnedEvent::Put(h, Vec::new())),
        RxEvent::GetResp(a, c) => (c, OwnedEvent::GetResp(a, Vec::new())),
        RxEvent::TagEager(t, c) => (c, OwnedEvent::TagEager(t, Vec::new())),
        RxEvent::TagRndv(h, d) => {
            out.push(OwnedEvent::TagRndv(h, d.to_vec()));
            return;
        }
        other => {
            out.push(OwnedEvent::Control(format!("{other:?}")));
            return;
        }
    };
    let p = partial.get_or_insert(fresh);
    if let OwnedEvent::Put(_, v) | OwnedEvent::GetResp(_, v) | OwnedEvent::TagEager(_, v) = p {
        v.extend_from_slice(chunk.data);
    }
    if chunk.last {
        out.extend(partial.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ep::AtomicOp;
    use proptest::prelude::*;

    fn frame(kind: Kind, am_id: u8, sub: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut v = FrameHeader::new(kind, am_id, payload.len())
            .to_bytes()
            .to_vec();
        v.extend_from_slice(sub);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn header_round_trip_and_truncation() {
        let h = FrameHeader::new(Kind::Am, 7, 100);
        let b = h.to_bytes();
        assert_eq!(FrameHeader::decode(&b), Ok(h));
        for n in 0..FrameHeader::LEN {
            assert!(matches!(
                FrameHeader::decode(&b[..n]),
                Err(WireError::Truncated { .. })
            ));
        }
    }

    #[test]
    fn header_rejects_bad_fields() {
        let mut b = FrameHeader::new(Kind::Am, 1, 4).to_bytes();
        b[0] = 99;
        assert_eq!(FrameHeader::decode(&b), Err(WireError::UnknownKind(99)));
        let mut b = FrameHeader::new(Kind::Am, 1, 4).to_bytes();
        b[2] = 1;
        assert_eq!(FrameHeader::decode(&b), Err(WireError::BadFlags(1)));
        let b = FrameHeader::new(Kind::Am, 32, 4).to_bytes();
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(WireError::BadAmId { .. })
        ));
        let b = FrameHeader::new(Kind::Put, 3, 4).to_bytes();
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(WireError::BadAmId { .. })
        ));
        let b = FrameHeader::new(Kind::Am, 0, MAX_AM_BODY + 1).to_bytes();
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(WireError::Oversized { .. })
        ));
        let b = FrameHeader::new(Kind::FlushReq, 0, 1).to_bytes();
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(WireError::BadLength { .. })
        ));
        let mut b = FrameHeader::new(Kind::Put, 0, 0).to_bytes();
        b[4..8].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(WireError::BadLength { .. })
        ));
    }

    #[test]
    fn sub_headers_round_trip_and_truncation() {
        fn check<T: PartialEq + std::fmt::Debug>(
            v: T,
            len: usize,
            enc: impl Fn(&T, &mut [u8]),
            dec: impl Fn(&[u8]) -> Result<T, WireError>,
        ) {
            let mut b = vec![0u8; len];
            enc(&v, &mut b);
            assert_eq!(dec(&b).unwrap(), v);
            assert!(matches!(
                dec(&b[..len - 1]),
                Err(WireError::Truncated { .. })
            ));
        }
        check(
            Hello {
                mode: HelloMode::Ep,
                src_conn_id: 5,
                dst_conn_id: u64::MAX,
                src_ip: 0x7f00_0001,
                src_port: 4242,
            },
            Hello::LEN,
            Hello::encode,
            Hello::decode,
        );
        check(
            PutHdr {
                req_id: 1,
                remote_addr: 0xdead_beef,
                key: 9,
            },
            PutHdr::LEN,
            PutHdr::encode,
            PutHdr::decode,
        );
        check(
            TagHdr {
                tag: u64::MAX - 1,
                imm: 42,
            },
            TagHdr::LEN,
            TagHdr::encode,
            TagHdr::decode,
        );
        check(
            TagRndvHdr {
                tag: 7,
                op_id: 3,
                remote_addr: 0x1000,
                key: 5,
                length: 1 << 20,
            },
            TagRndvHdr::LEN,
            TagRndvHdr::encode,
            TagRndvHdr::decode,
        );
        // A rendezvous request (op 0) carries no data; lengths above MAX_RMA are refused.
        for (op, len) in [(0u64, 1u64), (1, MAX_RMA as u64 + 1)] {
            let mut b = [0u8; TagRndvHdr::LEN];
            TagRndvHdr {
                tag: 1,
                op_id: op,
                remote_addr: 0,
                key: 0,
                length: len,
            }
            .encode(&mut b);
            assert!(matches!(
                TagRndvHdr::decode(&b),
                Err(WireError::BadField { .. })
            ));
        }
        check(
            Ack {
                req_id: 3,
                status: WireStatus::RemoteAccess,
            },
            Ack::LEN,
            Ack::encode,
            Ack::decode,
        );
        check(
            GetReq {
                req_id: 3,
                remote_addr: 4,
                key: 5,
                length: 6,
            },
            GetReq::LEN,
            GetReq::encode,
            GetReq::decode,
        );
        check(
            AtomicReq {
                req_id: 1,
                remote_addr: 2,
                key: 3,
                value: 4,
                compare: 5,
                op: AtomicOp::Xor,
                size: 4,
                mode: AtomicMode::Cswap,
            },
            AtomicReq::LEN,
            AtomicReq::encode,
            AtomicReq::decode,
        );
        check(
            AtomicResp {
                req_id: 1,
                status: WireStatus::Ok,
                value: 77,
            },
            AtomicResp::LEN,
            AtomicResp::encode,
            AtomicResp::decode,
        );
        check(
            FlushReq { req_id: 8 },
            FlushReq::LEN,
            FlushReq::encode,
            FlushReq::decode,
        );
        check(
            HelloAck { seq: u64::MAX - 3 },
            HelloAck::LEN,
            HelloAck::encode,
            HelloAck::decode,
        );
    }

    #[test]
    fn hello_rejects_garbage() {
        let mut b = [0u8; Hello::LEN];
        assert!(matches!(Hello::decode(&b), Err(WireError::BadMagic(0))));
        Hello {
            mode: HelloMode::Iface,
            src_conn_id: 0,
            dst_conn_id: 0,
            src_ip: 0,
            src_port: 0,
        }
        .encode(&mut b);
        b[4] = 9;
        assert_eq!(Hello::decode(&b), Err(WireError::BadVersion(9)));
    }

    #[test]
    fn hello_ack_frame_decodes_and_rejects_bad_lengths() {
        let mut sub = [0u8; HelloAck::LEN];
        HelloAck {
            seq: 0x0102_0304_0506_0708,
        }
        .encode(&mut sub);
        assert_eq!(sub, [8, 7, 6, 5, 4, 3, 2, 1]);
        let f = frame(Kind::HelloAck, 0, &sub, &[]);
        assert_eq!(f[0], 11);
        let mut r = Reassembler::new();
        assert_eq!(r.next(&f[..f.len() - 1]).unwrap(), (0, None));
        assert_eq!(
            r.next(&f).unwrap(),
            (
                f.len(),
                Some(RxEvent::HelloAck(HelloAck {
                    seq: 0x0102_0304_0506_0708
                }))
            )
        );
        // The body is exactly the 8-byte sub-header; an AM id is refused.
        for len in [0usize, 7, 9, 16] {
            let mut b = FrameHeader::new(Kind::HelloAck, 0, 0).to_bytes();
            b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
            assert!(matches!(
                FrameHeader::decode(&b),
                Err(WireError::BadLength { .. })
            ));
        }
        let b = FrameHeader::new(Kind::HelloAck, 1, 0).to_bytes();
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(WireError::BadAmId { .. })
        ));
    }

    #[test]
    fn large_put_is_streamed() {
        let payload: Vec<u8> = (0..MAX_WHOLE + 1000).map(|i| i as u8).collect();
        let mut sub = [0u8; PutHdr::LEN];
        let ph = PutHdr {
            req_id: 1,
            remote_addr: 2,
            key: 3,
        };
        ph.encode(&mut sub);
        let f = frame(Kind::Put, 0, &sub, &payload);
        let mut r = Reassembler::new();
        let (n, ev) = r.next(&f).unwrap();
        assert_eq!((n, ev), (FrameHeader::LEN + PutHdr::LEN, None));
        assert!(!r.at_boundary());
        let (n2, ev) = r.next(&f[n..n + 10]).unwrap();
        assert_eq!(n2, 10);
        let Some(RxEvent::Put(h, c)) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(h, ph);
        assert_eq!((c.offset, c.last, c.data), (0, false, &payload[..10]));
        let (n3, ev) = r.next(&f[n + 10..]).unwrap();
        assert_eq!(n3, payload.len() - 10);
        let Some(RxEvent::Put(_, c)) = ev else {
            panic!()
        };
        assert!(c.last);
        assert!(r.at_boundary());
    }

    #[test]
    fn tag_eager_reports_its_start_before_the_payload() {
        let mut sub = [0u8; TagHdr::LEN];
        TagHdr { tag: 5, imm: 6 }.encode(&mut sub);
        // Small: one whole chunk.
        let f = frame(Kind::TagEager, 0, &sub, &[1, 2, 3]);
        let mut r = Reassembler::new();
        let (n, ev) = r.next(&f).unwrap();
        assert_eq!(n, f.len());
        let Some(RxEvent::TagEager(t, c)) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (t.tag, t.imm, c.data, c.last),
            (5, 6, &[1u8, 2, 3][..], true)
        );
        // Large: the start (no bytes, not last) as soon as the sub-header is in, even with no
        // payload byte buffered; then the payload is streamed.
        let payload = vec![9u8; TAG_WHOLE + 1];
        let f = frame(Kind::TagEager, 0, &sub, &payload);
        let hl = FrameHeader::LEN + TagHdr::LEN;
        let mut r = Reassembler::new();
        let (n, ev) = r.next(&f[..hl]).unwrap();
        assert_eq!(n, hl);
        let Some(RxEvent::TagEager(_, c)) = ev else {
            panic!("{ev:?}")
        };
        assert!(c.data.is_empty() && !c.last && c.total == payload.len() as u64);
        let pos = r.streaming().expect("streaming");
        assert_eq!((pos.done, pos.total), (0, payload.len() as u64));
        assert!(r.advance_stream(payload.len() as u64));
        assert!(r.at_boundary());
    }

    fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (0u8..32, proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(id, p)| frame(
                Kind::Am,
                id,
                &[],
                &p
            )),
            (any::<u64>(), 0usize..(MAX_WHOLE + 3000)).prop_map(|(k, len)| {
                let mut sub = [0u8; PutHdr::LEN];
                PutHdr {
                    req_id: k,
                    remote_addr: k ^ 1,
                    key: k.rotate_left(7),
                }
                .encode(&mut sub);
                let p: Vec<u8> = (0..len).map(|i| (i as u64 ^ k) as u8).collect();
                frame(Kind::Put, 0, &sub, &p)
            }),
            (any::<u64>(), 0usize..2000).prop_map(|(k, len)| {
                let mut sub = [0u8; Ack::LEN];
                Ack {
                    req_id: k,
                    status: WireStatus::Ok,
                }
                .encode(&mut sub);
                frame(Kind::GetResp, 0, &sub, &vec![k as u8; len])
            }),
            (any::<u64>(), any::<u64>(), 0usize..(3 * TAG_WHOLE)).prop_map(|(tag, imm, len)| {
                let mut sub = [0u8; TagHdr::LEN];
                TagHdr { tag, imm }.encode(&mut sub);
                let p: Vec<u8> = (0..len).map(|i| (i as u64 ^ tag) as u8).collect();
                frame(Kind::TagEager, 0, &sub, &p)
            }),
            (any::<u64>(), 0u64..5, 0usize..MAX_TAG_RNDV_HDR).prop_map(|(tag, op, hl)| {
                let mut sub = [0u8; TagRndvHdr::LEN];
                TagRndvHdr {
                    tag,
                    op_id: op,
                    remote_addr: tag ^ 3,
                    key: 9,
                    length: if op == 0 { 0 } else { tag % 100_000 },
                }
                .encode(&mut sub);
                frame(Kind::TagRndv, 0, &sub, &vec![tag as u8; hl])
            }),
            any::<u64>().prop_map(|k| {
                let mut sub = [0u8; FlushReq::LEN];
                FlushReq { req_id: k }.encode(&mut sub);
                frame(Kind::FlushReq, 0, &sub, &[])
            }),
            any::<u64>().prop_map(|k| {
                let mut sub = [0u8; HelloAck::LEN];
                HelloAck { seq: k }.encode(&mut sub);
                frame(Kind::HelloAck, 0, &sub, &[])
            }),
            any::<u64>().prop_map(|k| {
                let mut sub = [0u8; GetReq::LEN];
                GetReq {
                    req_id: k,
                    remote_addr: 1,
                    key: 2,
                    length: k % 1000,
                }
                .encode(&mut sub);
                frame(Kind::GetReq, 0, &sub, &[])
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// A valid frame sequence split into arbitrary chunks yields exactly the messages that
        /// decoding it in one piece yields, and those are the frames that were encoded.
        #[test]
        fn split_stream_yields_same_messages(
            frames in proptest::collection::vec(arb_frame(), 1..12),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..40),
        ) {
            let stream: Vec<u8> = frames.concat();
            let (whole, res) = decode_stream([stream.as_slice()], stream.len());
            prop_assert_eq!(res, Ok(()));
            prop_assert_eq!(whole.len(), frames.len());
            for (f, ev) in frames.iter().zip(&whole) {
                if let OwnedEvent::Am(id, data) = ev {
                    prop_assert_eq!(*id, f[1]);
                    prop_assert_eq!(&data[..], &f[8..]);
                }
                if let OwnedEvent::Put(_, data) = ev {
                    prop_assert_eq!(&data[..], &f[8 + PutHdr::LEN..]);
                }
                if let OwnedEvent::TagEager(t, data) = ev {
                    prop_assert_eq!(t.tag, u64::from_le_bytes(f[8..16].try_into().unwrap()));
                    prop_assert_eq!(&data[..], &f[8 + TagHdr::LEN..]);
                }
                if let OwnedEvent::TagRndv(_, data) = ev {
                    prop_assert_eq!(&data[..], &f[8 + TagRndvHdr::LEN..]);
                }
            }
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
            points.sort_unstable();
            let mut pieces = Vec::new();
            let mut prev = 0;
            for p in points {
                pieces.push(&stream[prev..p]);
                prev = p;
            }
            pieces.push(&stream[prev..]);
            let (split, res) = decode_stream(pieces, 0);
            prop_assert_eq!(res, Ok(()));
            prop_assert_eq!(split, whole);
        }

        /// Random bytes never panic the decoder.
        #[test]
        fn random_bytes_do_not_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..2000),
            chunk in 1usize..64,
        ) {
            // The fuzz target's property: chunking never changes the result, even for garbage.
            let whole = decode_stream([bytes.as_slice()], 0);
            let split = decode_stream(bytes.chunks(chunk), 0);
            prop_assert_eq!(whole, split);
        }
    }
}
