//! ucp wire headers: explicit little-endian structs carried in uct active messages.
//!
//! Every ucp active message starts with the sender worker's uuid, so the receiver knows which
//! endpoint it came from (for replies, keepalive and failing the right endpoint on bad input):
//!
//! ```text
//!  0                8
//!  +----------------+---------------------+-----------------+
//!  | src uuid u64LE | header (per AM id)  | payload         |
//!  +----------------+---------------------+-----------------+
//! ```
//!
//! [`Msg::decode`] parses a whole message; it never panics and gives [`Error::Wire`] naming the
//! message kind and what was missing.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

mod onesided;

pub use onesided::{AtomicRepHdr, AtomicReqHdr, PutReqHdr};
use ucs::codec::{exact, head, u16_at, u32_at, u64_at, Reader};
use ucs::{Error, Result};

/// uct active-message ids used by ucp.
pub mod am_id {
    /// Worker address of a new peer: [`super::Msg::Wireup`].
    pub const WIREUP: u8 = 1;
    /// Single-fragment tag message.
    pub const EAGER_ONLY: u8 = 2;
    /// Single-fragment synchronous tag message.
    pub const EAGER_SYNC_ONLY: u8 = 3;
    /// First fragment of a multi-fragment tag message.
    pub const EAGER_FIRST: u8 = 4;
    /// Later fragment of a multi-fragment tag message.
    pub const EAGER_MIDDLE: u8 = 5;
    /// Acknowledges a matched synchronous send.
    pub const SYNC_ACK: u8 = 6;
    /// Rendezvous request to send.
    pub const RTS: u8 = 7;
    /// Rendezvous: receiver fetched the data.
    pub const ATS: u8 = 8;
    /// Rendezvous: receiver is ready to receive (put or pipelined AM).
    pub const RTR: u8 = 9;
    /// Rendezvous data fragment over active messages.
    pub const RNDV_DATA: u8 = 10;
    /// Rendezvous: sender finished writing (after put).
    pub const ATP: u8 = 11;
    /// Keepalive.
    pub const KEEPALIVE: u8 = 12;
    /// User active message.
    pub const USER_AM: u8 = 13;
    /// Stream data.
    pub const STREAM: u8 = 14;
    /// The peer closes its endpoint.
    pub const CLOSE: u8 = 15;
    /// Rendezvous request carrying a user active message's header.
    pub const AM_RTS: u8 = 16;
    /// Emulated atomic operation request.
    pub const ATOMIC_REQ: u8 = 17;
    /// Emulated atomic operation reply.
    pub const ATOMIC_REP: u8 = 18;
    /// The peer processed our CLOSE (everything before it was delivered).
    pub const CLOSE_ACK: u8 = 19;
    /// Endpoint address of a connect-to-endpoint lane (rc_verbs): [`super::EpAddrHdr`].
    pub const EP_ADDR: u8 = 20;
    /// The sender's last message on its old AM lane: everything after it comes over the
    /// connect-to-endpoint lane (rc_verbs). No body: [`super::Msg::AmLaneSwitch`].
    pub const AM_LANE_SWITCH: u8 = 21;
    /// Emulated put: [`super::PutReqHdr`] and the bytes to write; acknowledged by an
    /// ATOMIC_REP without a request.
    pub const PUT_REQ: u8 = 22;
}

/// Length of the uuid prefix.
pub const PREFIX_LEN: usize = 8;
/// Request id meaning "no request" (a non-synchronous multi-fragment send).
pub const NO_REQ: u64 = u64::MAX;

/// Header of a single-fragment tag message.
///
/// ```text
/// 0         8
/// +---------+---------
/// | tag u64 | payload
/// +---------+---------
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EagerHdr {
    /// Tag.
    pub tag: u64,
}

impl EagerHdr {
    /// Encoded length.
    pub const LEN: usize = 8;
    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        self.tag.to_le_bytes()
    }
    /// Decodes the header from the front of `b`.
    #[inline]
    pub fn decode(b: &[u8]) -> Result<Self> {
        let h = head::<{ Self::LEN }>(b, "eager header")?;
        Ok(EagerHdr { tag: u64_at(h, 0) })
    }
}

/// Header of a single-fragment synchronous tag message.
///
/// ```text
/// 0         8               16
/// +---------+---------------+---------
/// | tag u64 | sender req u64| payload
/// +---------+---------------+---------
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EagerSyncHdr {
    /// Tag.
    pub tag: u64,
    /// Sender's request, echoed in the [`ReqHdr`] of the SYNC_ACK.
    pub sreq: u64,
}

impl EagerSyncHdr {
    /// Encoded length.
    pub const LEN: usize = 16;
    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..8].copy_from_slice(&self.tag.to_le_bytes());
        b[8..].copy_from_slice(&self.sreq.to_le_bytes());
        b
    }
    /// Decodes the header from the front of `b`.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let h = head::<{ Self::LEN }>(b, "eager sync header")?;
        Ok(EagerSyncHdr {
            tag: u64_at(h, 0),
            sreq: u64_at(h, 8),
        })
    }
}

/// Header of the first fragment of a multi-fragment tag message.
///
/// ```text
/// 0         8            16              24                 32
/// +---------+------------+---------------+------------------+---------
/// | tag u64 | msg id u64 | total len u64 | sender req u64   | payload
/// +---------+------------+---------------+------------------+---------
/// ```
/// `sreq` is [`NO_REQ`] unless the send is synchronous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EagerFirstHdr {
    /// Tag.
    pub tag: u64,
    /// Sender-unique message id, repeated in every middle fragment.
    pub msg_id: u64,
    /// Length of the whole message.
    pub total_len: u64,
    /// Sender request to acknowledge (synchronous send) or [`NO_REQ`].
    pub sreq: u64,
}

impl EagerFirstHdr {
    /// Encoded length.
    pub const LEN: usize = 32;
    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..8].copy_from_slice(&self.tag.to_le_bytes());
        b[8..16].copy_from_slice(&self.msg_id.to_le_bytes());
        b[16..24].copy_from_slice(&self.total_len.to_le_bytes());
        b[24..].copy_from_slice(&self.sreq.to_le_bytes());
        b
    }
    /// Decodes the header from the front of `b`.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let h = head::<{ Self::LEN }>(b, "eager first header")?;
        Ok(EagerFirstHdr {
            tag: u64_at(h, 0),
            msg_id: u64_at(h, 8),
            total_len: u64_at(h, 16),
            sreq: u64_at(h, 24),
        })
    }
}

/// Header of a later fragment (eager middle, or rendezvous data over AM).
///
/// ```text
/// 0            8            16
/// +------------+------------+---------
/// | id u64     | offset u64 | payload
/// +------------+------------+---------
/// ```
/// `id` is the message id (eager) or the receiver's request (rendezvous data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragHdr {
    /// Message id or receive request.
    pub id: u64,
    /// Offset of the payload in the message.
    pub offset: u64,
}

impl FragHdr {
    /// Encoded length.
    pub const LEN: usize = 16;
    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..].copy_from_slice(&self.offset.to_le_bytes());
        b
    }
    /// Decodes the header from the front of `b`.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let h = head::<{ Self::LEN }>(b, "fragment header")?;
        Ok(FragHdr {
            id: u64_at(h, 0),
            offset: u64_at(h, 8),
        })
    }
}

/// A header naming one request: SYNC_ACK and ATS (sender's request), ATP (receiver's request).
///
/// ```text
/// 0
/// +----------+
/// | req u64  |
/// +----------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqHdr {
    /// The request.
    pub req: u64,
}

impl ReqHdr {
    /// Encoded length.
    pub const LEN: usize = 8;
    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        self.req.to_le_bytes()
    }
    /// Decodes the header; trailing bytes are an error.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let h = exact::<{ Self::LEN }>(b, "request header")?;
        Ok(ReqHdr { req: u64_at(h, 0) })
    }
}

/// A remote buffer: address, the transport whose memory domain packed the key, and the key.
///
/// ```text
/// 0            8        9             9+n          11+n
/// +------------+--------+-------------+------------+-----------+
/// | addr u64   | n (u8) | tl name (n) | k (u16 LE) | rkey (k)  |
/// +------------+--------+-------------+------------+-----------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuf<'a> {
    /// Address in the owner's memory.
    pub addr: u64,
    /// Transport that packed the key (empty: no key).
    pub tl: &'a str,
    /// Packed key.
    pub rkey: &'a [u8],
}

impl<'a> RemoteBuf<'a> {
    /// Encoded length.
    pub fn len(&self) -> usize {
        8 + 1 + self.tl.len() + 2 + self.rkey.len()
    }
    /// True when no key is attached.
    pub fn is_empty(&self) -> bool {
        self.tl.is_empty()
    }
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.addr.to_le_bytes());
        out.push(self.tl.len().min(255) as u8);
        out.extend_from_slice(&self.tl.as_bytes()[..self.tl.len().min(255)]);
        out.extend_from_slice(&(self.rkey.len().min(u16::MAX as usize) as u16).to_le_bytes());
        out.extend_from_slice(&self.rkey[..self.rkey.len().min(u16::MAX as usize)]);
    }
    /// Decodes from `b`, giving the rest.
    pub fn decode(b: &'a [u8]) -> Result<(Self, &'a [u8])> {
        let mut r = Reader::new(b, "remote buffer");
        let addr = r.u64("address")?;
        let n = r.u8("transport name length")? as usize;
        let tl = std::str::from_utf8(r.bytes(n, "transport name")?)
            .map_err(|_| r.invalid("transport name", "is not UTF-8"))?;
        let k = r.u16("key length")? as usize;
        let rkey = r.bytes(k, "key")?;
        Ok((RemoteBuf { addr, tl, rkey }, r.rest()))
    }
}

/// Rendezvous request to send.
///
/// ```text
/// 0         8              16          24
/// +---------+--------------+-----------+-------------------------------+
/// | tag u64 | sender req   | len u64   | RemoteBuf (sender's buffer)   |
/// +---------+--------------+-----------+-------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsHdr<'a> {
    /// Tag.
    pub tag: u64,
    /// Sender's request (echoed by ATS / RTR).
    pub sreq: u64,
    /// Message length.
    pub len: u64,
    /// Sender's buffer (an empty `tl` when the sender offers no RMA).
    pub buf: RemoteBuf<'a>,
}

impl<'a> RtsHdr<'a> {
    /// Fixed part's length.
    pub const FIXED_LEN: usize = 24;
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.tag.to_le_bytes());
        out.extend_from_slice(&self.sreq.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        self.buf.encode(out);
    }
    /// Decodes a whole RTS.
    pub fn decode(b: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(b, "RTS");
        let h = r.array::<{ RtsHdr::<'static>::FIXED_LEN }>("header")?;
        let (buf, rest) = RemoteBuf::decode(r.rest())?;
        Reader::new(rest, "RTS").finish()?;
        Ok(RtsHdr {
            tag: u64_at(h, 0),
            sreq: u64_at(h, 8),
            len: u64_at(h, 16),
            buf,
        })
    }
}

/// How the receiver wants rendezvous data, in an RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrMode {
    /// Write it with `put_zcopy` into the receiver's buffer, then send ATP.
    Put,
    /// Send it in RNDV_DATA active-message fragments.
    AmPipeline,
}

/// Rendezvous ready to receive.
///
/// ```text
/// 0            8             16       17
/// +------------+-------------+--------+------------------------------------+
/// | sender req | recv req    | mode u8| RemoteBuf (receiver's, for Put)    |
/// +------------+-------------+--------+------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrHdr<'a> {
    /// Sender's request.
    pub sreq: u64,
    /// Receiver's request (in ATP and RNDV_DATA).
    pub rreq: u64,
    /// Mode.
    pub mode: RtrMode,
    /// Receiver's buffer (for Put).
    pub buf: RemoteBuf<'a>,
}

impl<'a> RtrHdr<'a> {
    /// Fixed part's length.
    pub const FIXED_LEN: usize = 17;
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.sreq.to_le_bytes());
        out.extend_from_slice(&self.rreq.to_le_bytes());
        out.push(match self.mode {
            RtrMode::Put => 0,
            RtrMode::AmPipeline => 1,
        });
        self.buf.encode(out);
    }
    /// Decodes a whole RTR.
    pub fn decode(b: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(b, "RTR");
        let h = r.array::<{ RtrHdr::<'static>::FIXED_LEN }>("header")?;
        let mode = match h[16] {
            0 => RtrMode::Put,
            1 => RtrMode::AmPipeline,
            m => return Err(r.bad("mode", m.into()).into()),
        };
        let (buf, rest) = RemoteBuf::decode(r.rest())?;
        Reader::new(rest, "RTR").finish()?;
        Ok(RtrHdr {
            sreq: u64_at(h, 0),
            rreq: u64_at(h, 8),
            mode,
            buf,
        })
    }
}

/// Header of a user active message: one little-endian word, so a short message goes out as
/// the sender prefix, this word and the user header and data behind them (one `am_short2`).
///
/// ```text
/// 0          2              4               8
/// +----------+--------------+---------------+-------------+---------
/// | id u16   | reserved u16 | hdr len u32   | user header | data
/// +----------+--------------+---------------+-------------+---------
/// ```
///
/// The reserved bytes are 0; a message with any of them set is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserAmHdr {
    /// User's active-message id.
    pub id: u16,
    /// Length of the user header that follows.
    pub hdr_len: u32,
}

impl UserAmHdr {
    /// Encoded length.
    pub const LEN: usize = 8;
    /// The header as the little-endian word it is on the wire.
    #[inline(always)]
    pub fn word(&self) -> u64 {
        self.id as u64 | (self.hdr_len as u64) << 32
    }
    /// Encodes into a fixed array.
    pub fn encode(&self) -> [u8; Self::LEN] {
        self.word().to_le_bytes()
    }
    /// Decodes the header from the front of `b`.
    #[inline]
    pub fn decode(b: &[u8]) -> Result<Self> {
        let h = head::<{ Self::LEN }>(b, "user active message header")?;
        if u16_at(h, 2) != 0 {
            return Err(reserved_set());
        }
        Ok(UserAmHdr {
            id: u16_at(h, 0),
            hdr_len: u32_at(h, 4),
        })
    }
}

/// The error of a user active-message header with reserved bytes set.
#[cold]
fn reserved_set() -> Error {
    Error::Wire("user active message header: reserved bytes set".into())
}

/// Endpoint address of the sender's connect-to-endpoint lane (rc_verbs), exchanged over the
/// already connected AM lane during wire-up.
///
/// ```text
/// 0          1
/// +----------+--------------------------+
/// | flags u8 | uct endpoint address (n) |
/// +----------+--------------------------+
/// ```
///
/// Flag bit 0 (`connected`): the sender has already connected its endpoint to the receiver's,
/// so the receiver may use the lane as soon as its own endpoint is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpAddrHdr<'a> {
    /// The sender's endpoint is connected to the receiver's.
    pub connected: bool,
    /// The sender's uct endpoint address (non-empty).
    pub ep_addr: &'a [u8],
}

impl<'a> EpAddrHdr<'a> {
    /// Length of the fixed part (the flags byte).
    pub const LEN: usize = 1;
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(self.connected));
        out.extend_from_slice(self.ep_addr);
    }
    /// Decodes the message; unknown flags or an empty address are errors.
    pub fn decode(b: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(b, "endpoint address");
        r.need(Self::LEN + 1)?;
        let flags = r.u8("flags")?;
        if flags & !1 != 0 {
            return Err(r.bad("flags", flags.into()).into());
        }
        Ok(EpAddrHdr {
            connected: flags & 1 != 0,
            ep_addr: r.rest(),
        })
    }
}

/// A decoded ucp message (borrowing the received bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg<'a> {
    /// A packed worker address of the sender.
    Wireup(&'a [u8]),
    /// Single-fragment tag message.
    Eager(EagerHdr, &'a [u8]),
    /// Single-fragment synchronous tag message.
    EagerSync(EagerSyncHdr, &'a [u8]),
    /// First fragment.
    EagerFirst(EagerFirstHdr, &'a [u8]),
    /// Middle fragment.
    EagerMiddle(FragHdr, &'a [u8]),
    /// Synchronous send matched.
    SyncAck(ReqHdr),
    /// Rendezvous request.
    Rts(RtsHdr<'a>),
    /// Rendezvous acknowledge (receiver fetched).
    Ats(ReqHdr),
    /// Rendezvous ready to receive.
    Rtr(RtrHdr<'a>),
    /// Rendezvous data over AM.
    RndvData(FragHdr, &'a [u8]),
    /// Rendezvous: put done.
    Atp(ReqHdr),
    /// Keepalive.
    Keepalive,
    /// User active message: header, user header, data.
    UserAm(UserAmHdr, &'a [u8], &'a [u8]),
    /// Stream bytes.
    Stream(&'a [u8]),
    /// Peer closed its endpoint.
    Close,
    /// Rendezvous for a user active message: AM header, user header, RTS.
    AmRts(UserAmHdr, &'a [u8], RtsHdr<'a>),
    /// Emulated atomic request.
    AtomicReq(AtomicReqHdr),
    /// Emulated atomic reply.
    AtomicRep(AtomicRepHdr),
    /// Emulated put: header and the bytes to write.
    PutReq(PutReqHdr, &'a [u8]),
    /// The peer processed our CLOSE.
    CloseAck,
    /// The peer's connect-to-endpoint lane address.
    EpAddr(EpAddrHdr<'a>),
    /// The peer moved its AM lane: its later messages come over the connect-to-endpoint lane.
    AmLaneSwitch,
}

/// Splits off the sender uuid.
#[inline]
pub fn split_prefix(b: &[u8]) -> Result<(u64, &[u8])> {
    let h = head::<PREFIX_LEN>(b, "ucp message prefix")?;
    Ok((u64_at(h, 0), &b[PREFIX_LEN..]))
}

/// Splits an EAGER_ONLY message, uuid prefix included, into the sender's uuid, the tag and the
/// payload; `None` when it is too short for the prefix and the [`EagerHdr`] (the general
/// [`split_prefix`] and [`Msg::decode`] then say what is wrong).
#[inline]
pub fn split_eager_only(b: &[u8]) -> Option<(u64, u64, &[u8])> {
    let (h, payload) = b.split_first_chunk::<{ PREFIX_LEN + EagerHdr::LEN }>()?;
    Some((u64_at(h, 0), u64_at(h, PREFIX_LEN), payload))
}

impl<'a> Msg<'a> {
    /// Decodes the body of an active message (after the uuid prefix) of uct id `id`.
    pub fn decode(id: u8, b: &'a [u8]) -> Result<Self> {
        use am_id::*;
        Ok(match id {
            WIREUP => Msg::Wireup(b),
            EAGER_ONLY => Msg::Eager(EagerHdr::decode(b)?, &b[EagerHdr::LEN..]),
            EAGER_SYNC_ONLY => Msg::EagerSync(EagerSyncHdr::decode(b)?, &b[EagerSyncHdr::LEN..]),
            EAGER_FIRST => {
                let h = EagerFirstHdr::decode(b)?;
                let data = &b[EagerFirstHdr::LEN..];
                if (data.len() as u64) > h.total_len {
                    return Err(Error::Wire(format!(
                        "eager first fragment carries {} bytes of a {}-byte message",
                        data.len(),
                        h.total_len
                    )));
                }
                Msg::EagerFirst(h, data)
            }
            EAGER_MIDDLE => Msg::EagerMiddle(FragHdr::decode(b)?, &b[FragHdr::LEN..]),
            SYNC_ACK => Msg::SyncAck(ReqHdr::decode(b)?),
            RTS => Msg::Rts(RtsHdr::decode(b)?),
            ATS => Msg::Ats(ReqHdr::decode(b)?),
            RTR => Msg::Rtr(RtrHdr::decode(b)?),
            RNDV_DATA => Msg::RndvData(FragHdr::decode(b)?, &b[FragHdr::LEN..]),
            ATP => Msg::Atp(ReqHdr::decode(b)?),
            KEEPALIVE => {
                if !b.is_empty() {
                    return Err(Error::Wire("keepalive carries unexpected bytes".into()));
                }
                Msg::Keepalive
            }
            USER_AM => {
                let h = UserAmHdr::decode(b)?;
                let rest = &b[UserAmHdr::LEN..];
                if (rest.len() as u64) < h.hdr_len as u64 {
                    return Err(Error::Wire(format!(
                        "user active message header of {} bytes truncated to {}",
                        h.hdr_len,
                        rest.len()
                    )));
                }
                let (uh, data) = rest.split_at(h.hdr_len as usize);
                Msg::UserAm(h, uh, data)
            }
            STREAM => Msg::Stream(b),
            CLOSE => {
                if !b.is_empty() {
                    return Err(Error::Wire("close carries unexpected bytes".into()));
                }
                Msg::Close
            }
            AM_RTS => {
                let h = UserAmHdr::decode(b)?;
                let rest = &b[UserAmHdr::LEN..];
                if (rest.len() as u64) < h.hdr_len as u64 {
                    return Err(Error::Wire(format!(
                        "active-message RTS header of {} bytes truncated to {}",
                        h.hdr_len,
                        rest.len()
                    )));
                }
                let (uh, rts) = rest.split_at(h.hdr_len as usize);
                Msg::AmRts(h, uh, RtsHdr::decode(rts)?)
            }
            ATOMIC_REQ => Msg::AtomicReq(AtomicReqHdr::decode(b)?),
            EP_ADDR => Msg::EpAddr(EpAddrHdr::decode(b)?),
            CLOSE_ACK => {
                if !b.is_empty() {
                    return Err(Error::Wire("close ack carries unexpected bytes".into()));
                }
                Msg::CloseAck
            }
            ATOMIC_REP => Msg::AtomicRep(AtomicRepHdr::decode(b)?),
            PUT_REQ => {
                let (h, data) = PutReqHdr::decode(b)?;
                Msg::PutReq(h, data)
            }
            AM_LANE_SWITCH => {
                if !b.is_empty() {
                    return Err(Error::Wire(
                        "AM lane switch carries unexpected bytes".into(),
                    ));
                }
                Msg::AmLaneSwitch
            }
            other => return Err(Error::Wire(format!("unknown ucp message id {other}"))),
        })
    }
}

#[cfg(test)]
mod tests;
