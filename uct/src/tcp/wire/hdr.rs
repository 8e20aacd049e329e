//! The sub-headers that follow a [`FrameHeader`](super::FrameHeader) (see the table in
//! [`super`]).

use super::{MAGIC, MAX_RMA, VERSION};
use ucs::codec::{head, put_u16_at, put_u32_at, put_u64_at, u16_at, u32_at, u64_at, WireError};

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
        put_u32_at(out, 0, MAGIC);
        out[4] = VERSION;
        out[5] = self.mode as u8;
        put_u16_at(out, 6, self.src_port);
        put_u64_at(out, 8, self.src_conn_id);
        put_u64_at(out, 16, self.dst_conn_id);
        out[24..28].copy_from_slice(&self.src_ip.to_be_bytes());
        put_u32_at(out, 28, 0);
    }
    /// Reads and validates.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp hello")?;
        let magic = u32_at(buf, 0);
        if magic != MAGIC {
            return Err(WireError::BadField {
                what: "tcp hello (not a rucx tcp peer)",
                field: "magic",
                value: magic as u64,
            });
        }
        if buf[4] != VERSION {
            return Err(WireError::BadField {
                what: "tcp hello",
                field: "protocol version",
                value: buf[4] as u64,
            });
        }
        let mode = match buf[5] {
            0 => HelloMode::Iface,
            1 => HelloMode::Ep,
            v => {
                return Err(WireError::BadField {
                    what: "tcp frame",
                    field: "hello mode",
                    value: v as u64,
                })
            }
        };
        let reserved = u32_at(buf, 28);
        if reserved != 0 {
            return Err(WireError::BadField {
                what: "tcp frame",
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
        put_u64_at(out, 0, self.seq);
    }
    /// Reads.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp hello ack")?;
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
        put_u64_at(out, 0, self.tag);
        put_u64_at(out, 8, self.imm);
    }
    /// Reads.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp tag header")?;
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
        put_u64_at(out, 0, self.tag);
        put_u64_at(out, 8, self.op_id);
        put_u64_at(out, 16, self.remote_addr);
        put_u64_at(out, 24, self.key);
        put_u64_at(out, 32, self.length);
    }
    /// Reads, rejecting a request that claims data and a length above [`MAX_RMA`].
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp tag rendezvous header")?;
        let h = TagRndvHdr {
            tag: u64_at(buf, 0),
            op_id: u64_at(buf, 8),
            remote_addr: u64_at(buf, 16),
            key: u64_at(buf, 24),
            length: u64_at(buf, 32),
        };
        if h.length > MAX_RMA as u64 || (h.op_id == 0 && h.length != 0) {
            return Err(WireError::BadField {
                what: "tcp frame",
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
        put_u64_at(out, 0, self.req_id);
        put_u64_at(out, 8, self.remote_addr);
        put_u64_at(out, 16, self.key);
    }
    /// Reads.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp put header")?;
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
                what: "tcp frame",
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
        put_u64_at(out, 0, self.req_id);
        put_u32_at(out, 8, self.status as u32);
        put_u32_at(out, 12, 0);
    }
    /// Reads and validates.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp ack")?;
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
        put_u64_at(out, 0, self.req_id);
        put_u64_at(out, 8, self.remote_addr);
        put_u64_at(out, 16, self.key);
        put_u64_at(out, 24, self.length);
    }
    /// Reads and validates the length.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp get request")?;
        let length = u64_at(buf, 24);
        if length > MAX_RMA as u64 {
            return Err(WireError::TooLong {
                what: "tcp get request",
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
        put_u64_at(out, 0, self.req_id);
        put_u64_at(out, 8, self.remote_addr);
        put_u64_at(out, 16, self.key);
        put_u64_at(out, 24, self.value);
        put_u64_at(out, 32, self.compare);
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
        let buf = head::<{ Self::LEN }>(buf, "tcp atomic request")?;
        let op = match buf[40] {
            0 => O::Add,
            1 => O::And,
            2 => O::Or,
            3 => O::Xor,
            4 => O::Swap,
            v => {
                return Err(WireError::BadField {
                    what: "tcp frame",
                    field: "atomic op",
                    value: v as u64,
                })
            }
        };
        let size = buf[41];
        if size != 4 && size != 8 {
            return Err(WireError::BadField {
                what: "tcp frame",
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
                    what: "tcp frame",
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
        put_u64_at(out, 0, self.req_id);
        put_u32_at(out, 8, self.status as u32);
        put_u32_at(out, 12, 0);
        put_u64_at(out, 16, self.value);
    }
    /// Reads and validates.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp atomic response")?;
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
        put_u64_at(out, 0, self.req_id);
    }
    /// Reads.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let buf = head::<{ Self::LEN }>(buf, "tcp flush request")?;
        Ok(FlushReq {
            req_id: u64_at(buf, 0),
        })
    }
}
