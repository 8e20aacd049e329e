//! Wire formats of rc_verbs' software tag offload. Each message is one RC send whose first
//! byte is a transport-private id (at or above [`ID_TAG_EAGER`], beyond the active-message
//! ids), then one of these headers, little-endian, then the payload or user header.

use ucs::codec::{exact, head, put_u32_at, put_u64_at, u32_at, u64_at};
use ucs::{Error, Result};

/// Id byte of a tagged eager message ([`EagerHdr`] + payload).
pub const ID_TAG_EAGER: u8 = 0xe0;
/// Id byte of a rendezvous announcement or request ([`RndvHdr`] + user header).
pub const ID_TAG_RNDV: u8 = 0xe1;
/// Id byte of a rendezvous acknowledgement, receiver to sender ([`AckHdr`]).
pub const ID_TAG_ACK: u8 = 0xe2;
/// Id byte of a request to write the tail of a matched rendezvous, receiver to sender
/// ([`PutReqHdr`]).
pub const ID_TAG_PUT_REQ: u8 = 0xe3;
/// Id byte of the sender's report that it wrote the tail ([`PutDoneHdr`]).
pub const ID_TAG_PUT_DONE: u8 = 0xe4;
/// Ids from here on belong to tag offload (active-message ids are below 32).
pub const ID_TAG_MIN: u8 = ID_TAG_EAGER;

/// A tagged eager message's header.
///
/// ```text
///  0     1          9          17
///  +-----+----------+----------+------------------
///  | id  | tag le64 | imm le64 | payload (the rest)
///  +-----+----------+----------+------------------
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EagerHdr {
    /// The message's tag.
    pub tag: u64,
    /// Immediate data (0 from `tag_eager_short`).
    pub imm: u64,
}

impl EagerHdr {
    /// Length with the id byte.
    pub const LEN: usize = 17;
    /// Encodes with the id byte.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = ID_TAG_EAGER;
        put_u64_at(&mut b, 1, self.tag);
        put_u64_at(&mut b, 9, self.imm);
        b
    }
    /// Decodes a whole message (id byte included) into header and payload.
    pub fn decode(b: &[u8]) -> Result<(Self, &[u8])> {
        let h = head::<{ Self::LEN }>(b, "rc_verbs tagged eager message")?;
        Ok((
            EagerHdr {
                tag: u64_at(h, 1),
                imm: u64_at(h, 9),
            },
            &b[Self::LEN..],
        ))
    }
}

/// A rendezvous announcement (`op_id` non-zero: the receiver may read the data with RDMA READ
/// and acknowledges) or request (`op_id` 0: always unexpected, no data described).
///
/// ```text
///  0    1         9           17             25           33          37
///  +----+---------+-----------+--------------+------------+-----------+--------------
///  | id | tag le64| op_id le64| address le64 | length le64| rkey le32 | user header
///  +----+---------+-----------+--------------+------------+-----------+--------------
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RndvHdr {
    /// The message's tag.
    pub tag: u64,
    /// The sender's operation (0: a request without data).
    pub op_id: u64,
    /// Where the data lies in the sender's memory.
    pub addr: u64,
    /// Length of the data.
    pub length: u64,
    /// Remote key of the data's registration.
    pub rkey: u32,
}

impl RndvHdr {
    /// Length with the id byte.
    pub const LEN: usize = 37;
    /// Encodes with the id byte.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = ID_TAG_RNDV;
        put_u64_at(&mut b, 1, self.tag);
        put_u64_at(&mut b, 9, self.op_id);
        put_u64_at(&mut b, 17, self.addr);
        put_u64_at(&mut b, 25, self.length);
        put_u32_at(&mut b, 33, self.rkey);
        b
    }
    /// Decodes a whole message into header and user header.
    pub fn decode(b: &[u8]) -> Result<(Self, &[u8])> {
        let f = head::<{ Self::LEN }>(b, "rc_verbs rendezvous header")?;
        let h = RndvHdr {
            tag: u64_at(f, 1),
            op_id: u64_at(f, 9),
            addr: u64_at(f, 17),
            length: u64_at(f, 25),
            rkey: u32_at(f, 33),
        };
        if h.addr.checked_add(h.length).is_none() || (h.op_id == 0 && h.length != 0) {
            return Err(Error::Wire(format!(
                "rc_verbs rendezvous of {} bytes at {:#x} (operation {}) is impossible",
                h.length, h.addr, h.op_id
            )));
        }
        Ok((h, &b[Self::LEN..]))
    }
}

/// Status of an acknowledged rendezvous: the receiver read the data.
pub const ACK_OK: u8 = 0;
/// Status of an acknowledged rendezvous: the receiver could not read it.
pub const ACK_FAILED: u8 = 1;

/// The receiver's acknowledgement that completes the sender's rendezvous.
///
/// ```text
///  0    1           9
///  +----+-----------+--------+
///  | id | op_id le64| status |
///  +----+-----------+--------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckHdr {
    /// The sender's operation.
    pub op_id: u64,
    /// [`ACK_OK`] or [`ACK_FAILED`].
    pub status: u8,
}

impl AckHdr {
    /// Length with the id byte.
    pub const LEN: usize = 10;
    /// Encodes with the id byte.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = ID_TAG_ACK;
        put_u64_at(&mut b, 1, self.op_id);
        b[9] = self.status;
        b
    }
    /// Decodes a whole message.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "rc_verbs rendezvous acknowledgement")?;
        if b[9] > ACK_FAILED {
            return Err(Error::Wire(format!(
                "rc_verbs rendezvous acknowledgement with status {}",
                b[9]
            )));
        }
        Ok(AckHdr {
            op_id: u64_at(b, 1),
            status: b[9],
        })
    }
}

/// The receiver asks the sender to RDMA-write the tail of a matched rendezvous (bytes
/// `offset..offset + length` of the announced data) to `addr` with `rkey`, while it reads the
/// head itself (a split rendezvous, `RUCX_RC_TM_RNDV_SPLIT`). `slot` names the receiver's
/// matched rendezvous and comes back in the [`PutDoneHdr`].
///
/// ```text
///  0    1           9            17           25            33          37          41
///  +----+-----------+------------+------------+-------------+-----------+-----------+
///  | id | op_id le64| offset le64| length le64| address le64| rkey le32 | slot le32 |
///  +----+-----------+------------+------------+-------------+-----------+-----------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutReqHdr {
    /// The sender's operation.
    pub op_id: u64,
    /// Where the tail starts in the announced data.
    pub offset: u64,
    /// Length of the tail.
    pub length: u64,
    /// Where the tail goes in the receiver's memory.
    pub addr: u64,
    /// Remote key of the receive buffer's registration.
    pub rkey: u32,
    /// The receiver's matched rendezvous.
    pub slot: u32,
}

impl PutReqHdr {
    /// Length with the id byte.
    pub const LEN: usize = 41;
    /// Encodes with the id byte.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = ID_TAG_PUT_REQ;
        put_u64_at(&mut b, 1, self.op_id);
        put_u64_at(&mut b, 9, self.offset);
        put_u64_at(&mut b, 17, self.length);
        put_u64_at(&mut b, 25, self.addr);
        put_u32_at(&mut b, 33, self.rkey);
        put_u32_at(&mut b, 37, self.slot);
        b
    }
    /// Decodes a whole message.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "rc_verbs rendezvous write request")?;
        let h = PutReqHdr {
            op_id: u64_at(b, 1),
            offset: u64_at(b, 9),
            length: u64_at(b, 17),
            addr: u64_at(b, 25),
            rkey: u32_at(b, 33),
            slot: u32_at(b, 37),
        };
        let end = h.offset.checked_add(h.length);
        if end.is_none() || h.addr.checked_add(h.length).is_none() || h.length > u32::MAX as u64 {
            return Err(Error::Wire(format!(
                "rc_verbs rendezvous write of {} bytes at offset {} is impossible",
                h.length, h.offset
            )));
        }
        Ok(h)
    }
}

/// The sender's report on a [`PutReqHdr`]: [`ACK_OK`] when the write was posted before this
/// message (RC delivers it after the written data), [`ACK_FAILED`] when the sender had no such
/// operation or the range was outside its data (nothing was written).
///
/// ```text
///  0    1           9           13
///  +----+-----------+-----------+--------+
///  | id | op_id le64| slot le32 | status |
///  +----+-----------+-----------+--------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutDoneHdr {
    /// The sender's operation, as in the request.
    pub op_id: u64,
    /// The receiver's matched rendezvous, as in the request.
    pub slot: u32,
    /// [`ACK_OK`] or [`ACK_FAILED`].
    pub status: u8,
}

impl PutDoneHdr {
    /// Length with the id byte.
    pub const LEN: usize = 14;
    /// Encodes with the id byte.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = ID_TAG_PUT_DONE;
        put_u64_at(&mut b, 1, self.op_id);
        put_u32_at(&mut b, 9, self.slot);
        b[13] = self.status;
        b
    }
    /// Decodes a whole message.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "rc_verbs rendezvous write report")?;
        if b[13] > ACK_FAILED {
            return Err(Error::Wire(format!(
                "rc_verbs rendezvous write report with status {}",
                b[13]
            )));
        }
        Ok(PutDoneHdr {
            op_id: u64_at(b, 1),
            slot: u32_at(b, 9),
            status: b[13],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eager_round_trip_and_truncation() {
        let h = EagerHdr {
            tag: 0x0102_0304_0506_0708,
            imm: 9,
        };
        let mut m = h.encode().to_vec();
        assert_eq!(m[0], ID_TAG_EAGER);
        assert_eq!(m[1], 8);
        m.extend_from_slice(b"payload");
        let (d, p) = EagerHdr::decode(&m).unwrap();
        assert_eq!((d, p), (h, &b"payload"[..]));
        for n in 0..EagerHdr::LEN {
            assert!(matches!(EagerHdr::decode(&m[..n]), Err(Error::Wire(_))));
        }
    }

    #[test]
    fn rndv_round_trip_and_errors() {
        let h = RndvHdr {
            tag: 5,
            op_id: 0x1_0001,
            addr: 0x7f00_0000_1000,
            length: 70_000,
            rkey: 0xdead_beef,
        };
        let mut m = h.encode().to_vec();
        m.extend_from_slice(b"rts");
        assert_eq!(RndvHdr::decode(&m).unwrap(), (h, &b"rts"[..]));
        for n in 0..RndvHdr::LEN {
            assert!(RndvHdr::decode(&m[..n]).is_err());
        }
        let wrap = RndvHdr {
            addr: u64::MAX - 3,
            ..h
        };
        assert!(RndvHdr::decode(&wrap.encode()).is_err());
        let req_with_data = RndvHdr { op_id: 0, ..h };
        assert!(RndvHdr::decode(&req_with_data.encode()).is_err());
    }

    #[test]
    fn ack_round_trip_and_errors() {
        let a = AckHdr {
            op_id: 77,
            status: ACK_FAILED,
        };
        let b = a.encode();
        assert_eq!(AckHdr::decode(&b).unwrap(), a);
        assert!(AckHdr::decode(&b[..9]).is_err());
        let mut bad = b;
        bad[9] = 7;
        assert!(AckHdr::decode(&bad).is_err());
        let mut long = b.to_vec();
        long.push(0);
        assert!(AckHdr::decode(&long).is_err());
    }

    #[test]
    fn put_req_and_done_round_trip_and_errors() {
        let r = PutReqHdr {
            op_id: 0x2_0003,
            offset: 524_288,
            length: 524_288,
            addr: 0x7f00_0010_0000,
            rkey: 0x1234_5678,
            slot: 9,
        };
        let b = r.encode();
        assert_eq!((b[0], b[9]), (ID_TAG_PUT_REQ, 0));
        assert_eq!(PutReqHdr::decode(&b).unwrap(), r);
        assert!(PutReqHdr::decode(&b[..PutReqHdr::LEN - 1]).is_err());
        let wrap = PutReqHdr {
            offset: u64::MAX - 1,
            ..r
        };
        assert!(PutReqHdr::decode(&wrap.encode()).is_err());
        let huge = PutReqHdr {
            length: 1 << 32,
            ..r
        };
        assert!(PutReqHdr::decode(&huge.encode()).is_err());
        let d = PutDoneHdr {
            op_id: 0x2_0003,
            slot: 9,
            status: ACK_OK,
        };
        let b = d.encode();
        assert_eq!(b[0], ID_TAG_PUT_DONE);
        assert_eq!(PutDoneHdr::decode(&b).unwrap(), d);
        let mut bad = b;
        bad[13] = 2;
        assert!(PutDoneHdr::decode(&bad).is_err());
        assert!(PutDoneHdr::decode(&b[..13]).is_err());
    }
}
