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
//! | 12   | `Detach`    | none             | none                       | either    |
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
//! `Detach` says that the sender's endpoint on the connection was destroyed and that no
//! endpoint of the sender will use the connection again: the side that has no endpoint on it
//! either once both sides detached closes it (after its queued bytes left).
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

mod hdr;
mod reasm;
#[cfg(test)]
mod tests;

pub use hdr::*;
pub use reasm::*;
/// A frame that could not be decoded (the codec's one error type).
pub use ucs::codec::WireError;
use ucs::codec::{head, put_u32_at, u16_at, u32_at};

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
    /// The sender's endpoint on this connection is gone, and no endpoint of the sender will
    /// use the connection again.
    Detach = 12,
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
            12 => Kind::Detach,
            16 => Kind::TagEager,
            17 => Kind::TagRndv,
            18 => Kind::TagGet,
            _ => {
                return Err(WireError::BadField {
                    what: "tcp frame header",
                    field: "kind",
                    value: v as u64,
                })
            }
        })
    }

    /// The frame's body, as error messages name it.
    pub fn frame(self) -> &'static str {
        match self {
            Kind::Hello => "tcp Hello frame body",
            Kind::Am => "tcp Am frame body",
            Kind::Put => "tcp Put frame body",
            Kind::PutAck => "tcp PutAck frame body",
            Kind::GetReq => "tcp GetReq frame body",
            Kind::GetResp => "tcp GetResp frame body",
            Kind::AtomicReq => "tcp AtomicReq frame body",
            Kind::AtomicResp => "tcp AtomicResp frame body",
            Kind::FlushReq => "tcp FlushReq frame body",
            Kind::FlushAck => "tcp FlushAck frame body",
            Kind::HelloAck => "tcp HelloAck frame body",
            Kind::Detach => "tcp Detach frame body",
            Kind::TagEager => "tcp TagEager frame body",
            Kind::TagRndv => "tcp TagRndv frame body",
            Kind::TagGet => "tcp TagGet frame body",
        }
    }

    /// Length of the kind's fixed sub-header at the start of the body.
    pub fn sub_len(self) -> usize {
        match self {
            Kind::Hello => Hello::LEN,
            Kind::Am | Kind::Detach => 0,
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
        put_u32_at(out, 4, self.length);
    }

    /// The encoded header as an array.
    #[inline]
    pub fn to_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        self.encode(&mut b);
        b
    }

    /// The header at the start of `buf` when it is a valid `Am` header (the common frame,
    /// checked in a few instructions); `None` for anything else, which [`FrameHeader::decode`]
    /// then reads or rejects.
    #[inline]
    pub fn decode_am(buf: &[u8]) -> Option<Self> {
        let b = buf.first_chunk::<{ Self::LEN }>()?;
        let length = u32_at(b, 4);
        let ok = b[0] == Kind::Am as u8
            && b[1] < crate::ep::AM_ID_MAX
            && b[2] == 0
            && b[3] == 0
            && length as usize <= MAX_AM_BODY;
        ok.then_some(FrameHeader {
            kind: Kind::Am,
            am_id: b[1],
            length,
        })
    }

    /// Reads and validates a header: kind, flags, AM id and the body length against the kind.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp frame header")?;
        let kind = Kind::from_u8(buf[0])?;
        let am_id = buf[1];
        let flags = u16_at(buf, 2);
        if flags != 0 {
            return Err(WireError::BadField {
                what: "tcp frame header",
                field: "flags",
                value: flags as u64,
            });
        }
        let ok_id = if kind == Kind::Am {
            am_id < crate::ep::AM_ID_MAX
        } else {
            am_id == 0
        };
        if !ok_id {
            return Err(WireError::BadField {
                what: kind.frame(),
                field: "active message id",
                value: am_id as u64,
            });
        }
        let length = u32_at(buf, 4);
        let sub = kind.sub_len() as u64;
        let len = length as u64;
        if len < sub || (kind.max_payload() == 0 && len != sub) {
            return Err(WireError::BadLength {
                what: kind.frame(),
                len,
                expected: sub,
            });
        }
        let max = sub + kind.max_payload() as u64;
        if len > max {
            return Err(WireError::TooLong {
                what: kind.frame(),
                len,
                max,
            });
        }
        Ok(FrameHeader {
            kind,
            am_id,
            length,
        })
    }
}
