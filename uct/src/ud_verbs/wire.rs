//! ud_verbs wire formats: the interface address and the header every datagram starts with
//! (after the 40-byte GRH the receive buffer holds), all little-endian.

use ucs::codec::{array_at, exact, head, put_u16_at, put_u32_at, u16_at, u32_at};
use ucs::{Error, Result};

/// The interface address: the UD queue pair peers send to.
///
/// ```text
///  0       1
///  +-------+----------+
///  | ver=1 | QPN le32 |
///  +-------+----------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfaceAddr {
    /// Queue pair number (24 bits).
    pub qpn: u32,
}

impl IfaceAddr {
    /// Encoded length.
    pub const LEN: usize = 5;
    const VERSION: u8 = 1;
    /// Encodes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = Self::VERSION;
        put_u32_at(&mut b, 1, self.qpn);
        b
    }
    /// Decodes and validates.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "ud_verbs interface address")?;
        if b[0] != Self::VERSION {
            return Err(Error::Wire(format!(
                "ud_verbs interface address version {} (expected {})",
                b[0],
                Self::VERSION
            )));
        }
        let qpn = u32_at(b, 1);
        if qpn == 0 || qpn > 0xff_ffff {
            return Err(Error::Wire(format!("ud_verbs QPN {qpn:#x} is not valid")));
        }
        Ok(IfaceAddr { qpn })
    }
}

/// What a datagram is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An active message, sequenced and acknowledged.
    Data,
    /// A connection request from a new endpoint ([`Creq`] follows the header).
    Creq,
    /// The answer to a connection request (the answering endpoint's id follows the header).
    Crep,
    /// An acknowledgement alone.
    Ack,
}

/// Flag: the sender asks for an acknowledgement now (its window fills, or it retransmits).
pub const FLAG_ACK_REQ: u8 = 0x40;
/// Flag on an acknowledgement: the receiver saw a gap after `ack` (resend from there now).
pub const FLAG_NAK: u8 = 0x80;
const KIND_MASK: u8 = 0x0f;
/// The endpoint id of a connection request, whose receiver has no endpoint yet.
pub const NO_EP: u32 = u32::MAX;

/// The header of every datagram.
///
/// ```text
///  0            1              5          7          9
///  +------------+--------------+----------+----------+-----------------------------+
///  | kind|flags | dest ep le32 | psn le16 | ack le16 | Data: AM id + payload;      |
///  |            |              |          |          | Creq: Creq; Crep: ep le32   |
///  +------------+--------------+----------+----------+-----------------------------+
/// ```
/// `psn` numbers the sender endpoint's active messages (from 1, wrapping); `ack` is the last
/// one the sender received in order from the peer endpoint (0: none yet), carried by every
/// datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hdr {
    /// What follows.
    pub kind: Kind,
    /// [`FLAG_ACK_REQ`], [`FLAG_NAK`].
    pub flags: u8,
    /// The receiving endpoint's id ([`NO_EP`] in a connection request).
    pub dest: u32,
    /// Sequence number of an active message (0 otherwise).
    pub psn: u16,
    /// Cumulative acknowledgement.
    pub ack: u16,
}

impl Hdr {
    /// Encoded length.
    pub const LEN: usize = 9;
    /// Offset of the `ack` field, rewritten when a datagram is sent again.
    pub const ACK_AT: usize = 7;
    /// Encodes into the first `LEN` bytes of `b`.
    pub fn encode_into(&self, b: &mut [u8]) {
        let kind = match self.kind {
            Kind::Data => 0,
            Kind::Creq => 1,
            Kind::Crep => 2,
            Kind::Ack => 3,
        };
        b[0] = kind | self.flags;
        put_u32_at(b, 1, self.dest);
        put_u16_at(b, 5, self.psn);
        put_u16_at(b, 7, self.ack);
    }
    /// Decodes the start of a datagram; gives the header and the rest.
    pub fn decode(b: &[u8]) -> Result<(Self, &[u8])> {
        let h = head::<{ Self::LEN }>(b, "ud_verbs datagram header")?;
        let kind = match h[0] & KIND_MASK {
            0 => Kind::Data,
            1 => Kind::Creq,
            2 => Kind::Crep,
            3 => Kind::Ack,
            k => return Err(Error::Wire(format!("ud_verbs datagram kind {k}"))),
        };
        let flags = h[0] & !KIND_MASK;
        if flags & !(FLAG_ACK_REQ | FLAG_NAK) != 0 {
            return Err(Error::Wire(format!("ud_verbs datagram flags {flags:#x}")));
        }
        Ok((
            Hdr {
                kind,
                flags,
                dest: u32_at(h, 1),
                psn: u16_at(h, 5),
                ack: u16_at(h, 7),
            },
            &b[Self::LEN..],
        ))
    }
}

/// A connection request's body: who asks, and the how-manieth endpoint of the asking
/// interface towards this one it is (`conn_sn`), which pairs it with the endpoint this side
/// creates towards the asker with the same number.
///
/// ```text
///  0            4              8                      28
///  +------------+--------------+----------------------+------------------+
///  | src ep le32| conn_sn le32 | device address (20)  | iface address (5)|
///  +------------+--------------+----------------------+------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creq {
    /// The asking endpoint's id.
    pub src_ep: u32,
    /// Connection sequence number between the two interfaces.
    pub conn_sn: u32,
    /// The asker's device address (`rc_verbs::wire::DevAddr`).
    pub dev_addr: [u8; crate::rc_verbs::wire::DevAddr::LEN],
    /// The asker's interface address.
    pub iface: IfaceAddr,
}

impl Creq {
    /// Encoded length.
    pub const LEN: usize = 8 + crate::rc_verbs::wire::DevAddr::LEN + IfaceAddr::LEN;
    /// Encodes into the first `LEN` bytes of `b`.
    pub fn encode_into(&self, b: &mut [u8]) {
        put_u32_at(b, 0, self.src_ep);
        put_u32_at(b, 4, self.conn_sn);
        b[8..28].copy_from_slice(&self.dev_addr);
        b[28..33].copy_from_slice(&self.iface.encode());
    }
    /// Decodes (the device address is checked when it is used).
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "ud_verbs connection request")?;
        Ok(Creq {
            src_ep: u32_at(b, 0),
            conn_sn: u32_at(b, 4),
            dev_addr: array_at(b, 8),
            iface: IfaceAddr::decode(&b[28..33])?,
        })
    }
}

/// Decodes a connection reply's body: the answering endpoint's id.
pub fn decode_crep(b: &[u8]) -> Result<u32> {
    Ok(u32_at(exact::<4>(b, "ud_verbs connection reply")?, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iface_addr_round_trip_and_errors() {
        let a = IfaceAddr { qpn: 0x12_3456 };
        let b = a.encode();
        assert_eq!(IfaceAddr::decode(&b).unwrap(), a);
        for n in 0..IfaceAddr::LEN {
            assert!(IfaceAddr::decode(&b[..n]).is_err());
        }
        assert!(IfaceAddr::decode(&IfaceAddr { qpn: 0 }.encode()).is_err());
        assert!(IfaceAddr::decode(&IfaceAddr { qpn: 1 << 24 }.encode()).is_err());
        let mut bad = b;
        bad[0] = 2;
        assert!(IfaceAddr::decode(&bad).is_err());
    }

    #[test]
    fn header_round_trip_and_errors() {
        let h = Hdr {
            kind: Kind::Data,
            flags: FLAG_ACK_REQ,
            dest: 0x0102_0304,
            psn: 0xfffe,
            ack: 7,
        };
        let mut b = [0u8; Hdr::LEN + 2];
        h.encode_into(&mut b);
        b[Hdr::LEN..].copy_from_slice(&[5, 6]);
        assert_eq!(Hdr::decode(&b).unwrap(), (h, &[5u8, 6][..]));
        assert_eq!(b[Hdr::ACK_AT], 7);
        for n in 0..Hdr::LEN {
            assert!(Hdr::decode(&b[..n]).is_err());
        }
        let mut bad = b;
        bad[0] = 9;
        assert!(Hdr::decode(&bad).is_err(), "unknown kind");
        bad[0] = 0x21;
        assert!(Hdr::decode(&bad).is_err(), "unknown flag");
        for k in [Kind::Creq, Kind::Crep, Kind::Ack] {
            let mut c = [0u8; Hdr::LEN];
            Hdr { kind: k, ..h }.encode_into(&mut c);
            assert_eq!(Hdr::decode(&c).unwrap().0.kind, k);
        }
    }

    #[test]
    fn creq_round_trip_and_errors() {
        let c = Creq {
            src_ep: 3,
            conn_sn: 9,
            dev_addr: [4; 20],
            iface: IfaceAddr { qpn: 17 },
        };
        let mut b = [0u8; Creq::LEN];
        c.encode_into(&mut b);
        assert_eq!(Creq::decode(&b).unwrap(), c);
        assert!(Creq::decode(&b[..Creq::LEN - 1]).is_err());
        assert_eq!(decode_crep(&7u32.to_le_bytes()).unwrap(), 7);
        assert!(decode_crep(&[1, 2, 3]).is_err());
    }
}
