//! rc_verbs wire formats: device address, endpoint address, packed remote key and the
//! active-message header. All little-endian, with explicit lengths; decoding checks everything.

use ucs::codec::WireError;
use ucs::codec::{array_at, exact, put_u16_at, put_u32_at, put_u64_at, u16_at, u32_at, u64_at};
use ucs::{Error, Result};

/// Link layer values carried in a device address.
pub const LL_INFINIBAND: u8 = 1;
/// Ethernet (RoCE).
pub const LL_ETHERNET: u8 = 2;

/// The device address: how to route to a port.
///
/// ```text
///  0        1            2         4                        20
///  +--------+------------+---------+------------------------+
///  | ver=1  | link layer | LID le16| GID (16 bytes, as is)  |
///  +--------+------------+---------+------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevAddr {
    /// `LL_INFINIBAND` or `LL_ETHERNET`.
    pub link_layer: u8,
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// GID of the entry in use (network byte order, as the device reports it).
    pub gid: [u8; 16],
}

impl DevAddr {
    /// Encoded length.
    pub const LEN: usize = 20;
    const VERSION: u8 = 1;
    /// Encodes into `LEN` bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = Self::VERSION;
        b[1] = self.link_layer;
        put_u16_at(&mut b, 2, self.lid);
        b[4..20].copy_from_slice(&self.gid);
        b
    }
    /// Decodes; extra trailing bytes are an error too.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "rc_verbs device address")?;
        if b[0] != Self::VERSION {
            return Err(Error::Wire(format!(
                "rc_verbs device address version {} (expected {})",
                b[0],
                Self::VERSION
            )));
        }
        if b[1] != LL_INFINIBAND && b[1] != LL_ETHERNET {
            return Err(Error::Wire(format!("unknown link layer {}", b[1])));
        }
        Ok(DevAddr {
            link_layer: b[1],
            lid: u16_at(b, 2),
            gid: array_at(b, 4),
        })
    }
}

/// The endpoint address exchanged for connect-to-ep.
///
/// ```text
///  0       1          5          9                17           21            23       24
///  +-------+----------+----------+----------------+------------+-------------+--------+
///  | ver=1 | QPN le32 | PSN le32 | credit addr le64| credit rkey| rx credits  | path   |
///  |       |          |          |  (word the peer |   le32     |   le16      | MTU    |
///  |       |          |          |  RDMA-writes)   |            |             | (enum) |
///  +-------+----------+----------+----------------+------------+-------------+--------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpAddr {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// Initial packet sequence number (24 bits).
    pub psn: u32,
    /// Address of the 8-byte word where the peer writes how many receives it has reposted.
    pub credit_addr: u64,
    /// Remote key of that word.
    pub credit_rkey: u32,
    /// Receive buffers this endpoint posts: the peer's initial send credits.
    pub rx_credits: u16,
    /// Active MTU of the port (`enum ibv_mtu`).
    pub mtu: u8,
}

impl EpAddr {
    /// Encoded length.
    pub const LEN: usize = 24;
    const VERSION: u8 = 1;
    /// Encodes into `LEN` bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = Self::VERSION;
        put_u32_at(&mut b, 1, self.qpn);
        put_u32_at(&mut b, 5, self.psn);
        put_u64_at(&mut b, 9, self.credit_addr);
        put_u32_at(&mut b, 17, self.credit_rkey);
        put_u16_at(&mut b, 21, self.rx_credits);
        b[23] = self.mtu;
        b
    }
    /// Decodes and validates.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "rc_verbs endpoint address")?;
        if b[0] != Self::VERSION {
            return Err(Error::Wire(format!(
                "rc_verbs endpoint address version {} (expected {})",
                b[0],
                Self::VERSION
            )));
        }
        let a = EpAddr {
            qpn: u32_at(b, 1),
            psn: u32_at(b, 5),
            credit_addr: u64_at(b, 9),
            credit_rkey: u32_at(b, 17),
            rx_credits: u16_at(b, 21),
            mtu: b[23],
        };
        if a.qpn > 0xff_ffff || a.psn > 0xff_ffff {
            return Err(Error::Wire(format!(
                "QPN {:#x} / PSN {:#x} exceed 24 bits",
                a.qpn, a.psn
            )));
        }
        if a.rx_credits == 0 || !(1..=5).contains(&a.mtu) {
            return Err(Error::Wire(format!(
                "endpoint address with {} receive credits and MTU code {}",
                a.rx_credits, a.mtu
            )));
        }
        Ok(a)
    }
}

/// A packed remote key.
///
/// ```text
///  0           4                 12                20
///  +-----------+-----------------+-----------------+
///  | rkey le32 | base addr le64  | length le64     |
///  +-----------+-----------------+-----------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedRkey {
    /// The verbs rkey.
    pub rkey: u32,
    /// Start of the region in the owner's address space.
    pub base: u64,
    /// Length of the region.
    pub len: u64,
}

impl PackedRkey {
    /// Encoded length.
    pub const LEN: usize = 20;
    /// Encodes into `LEN` bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put_u32_at(&mut b, 0, self.rkey);
        put_u64_at(&mut b, 4, self.base);
        put_u64_at(&mut b, 12, self.len);
        b
    }
    /// Decodes.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "rc_verbs packed rkey")?;
        let k = PackedRkey {
            rkey: u32_at(b, 0),
            base: u64_at(b, 4),
            len: u64_at(b, 12),
        };
        if k.base.checked_add(k.len).is_none() || k.base == 0 || k.len == 0 {
            return Err(Error::Wire(format!(
                "packed rkey region {:#x}+{} is empty, at address 0 or wraps around",
                k.base, k.len
            )));
        }
        Ok(k)
    }
}

/// The active-message header at the start of every send.
///
/// ```text
///  0
///  +-------+---------------------
///  | AM id | payload (the rest)
///  +-------+---------------------
/// ```
pub struct AmHdr;

impl AmHdr {
    /// Header length.
    pub const LEN: usize = 1;
    /// Splits a received message into id and payload.
    pub fn decode(b: &[u8]) -> Result<(u8, &[u8])> {
        match b.split_first() {
            Some((&id, rest)) if id < crate::ep::AM_ID_MAX => Ok((id, rest)),
            Some((&id, _)) => Err(Error::Wire(format!("active message id {id} out of range"))),
            None => Err(WireError::Truncated {
                what: "rc_verbs active message",
                field: "id",
                need: Self::LEN,
                have: 0,
            }
            .into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_addr_round_trip_and_errors() {
        let a = DevAddr {
            link_layer: LL_ETHERNET,
            lid: 0x1234,
            gid: [7; 16],
        };
        let b = a.encode();
        assert_eq!(b[2..4], [0x34, 0x12]);
        assert_eq!(DevAddr::decode(&b).unwrap(), a);
        for n in 0..DevAddr::LEN {
            assert!(matches!(DevAddr::decode(&b[..n]), Err(Error::Wire(_))));
        }
        let mut bad = b;
        bad[0] = 9;
        assert!(DevAddr::decode(&bad).is_err());
        bad = b;
        bad[1] = 3;
        assert!(DevAddr::decode(&bad).is_err());
    }

    #[test]
    fn ep_addr_round_trip_and_errors() {
        let a = EpAddr {
            qpn: 0x12_3456,
            psn: 0xab_cdef,
            credit_addr: 0x7fff_0000_1000,
            credit_rkey: 0xdead_beef,
            rx_credits: 64,
            mtu: 3,
        };
        let b = a.encode();
        assert_eq!(b[1..5], [0x56, 0x34, 0x12, 0]);
        assert_eq!(EpAddr::decode(&b).unwrap(), a);
        for n in 0..EpAddr::LEN {
            assert!(matches!(EpAddr::decode(&b[..n]), Err(Error::Wire(_))));
        }
        let mut long = b.to_vec();
        long.push(0);
        assert!(EpAddr::decode(&long).is_err());
        let mut bad = b;
        bad[4] = 1; // QPN above 24 bits
        assert!(EpAddr::decode(&bad).is_err());
        bad = b;
        bad[23] = 0; // MTU code
        assert!(EpAddr::decode(&bad).is_err());
        bad = b;
        bad[21] = 0; // zero credits
        assert!(EpAddr::decode(&bad).is_err());
    }

    #[test]
    fn rkey_round_trip_and_errors() {
        let k = PackedRkey {
            rkey: 0x0102_0304,
            base: 0x1000,
            len: 4096,
        };
        let b = k.encode();
        assert_eq!(b[0..4], [4, 3, 2, 1]);
        assert_eq!(PackedRkey::decode(&b).unwrap(), k);
        for n in 0..PackedRkey::LEN {
            assert!(PackedRkey::decode(&b[..n]).is_err());
        }
        let wrap = PackedRkey {
            rkey: 1,
            base: u64::MAX - 10,
            len: 100,
        };
        assert!(PackedRkey::decode(&wrap.encode()).is_err());
        assert!(PackedRkey::decode(&[0; PackedRkey::LEN]).is_err());
    }

    #[test]
    fn am_header() {
        assert_eq!(AmHdr::decode(&[3, 9, 9]).unwrap(), (3, &[9u8, 9][..]));
        assert!(AmHdr::decode(&[]).is_err());
        assert!(AmHdr::decode(&[200]).is_err());
    }
}
