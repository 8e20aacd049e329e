//! Wire formats of shared-memory tag offload: the headers of tagged eager messages and
//! rendezvous announcements, and rendezvous acknowledgements (see [`super::iface::tag`] for how they
//! travel through the FIFO). Little-endian, fixed layouts, strict decode: every header is
//! checked before use, and nothing here panics on peer bytes (the lint below).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use super::wire::{IfaceAddr, RkeyWire};
use ucs::codec::SliceWriter;
use ucs::codec::{exact, head, put_u16_at, put_u32_at, put_u64_at, u16_at, u32_at, u64_at};
use ucs::{Error, Result};

/// Header of a tagged eager message; the payload follows.
///
/// ```text
/// 0          8          16
/// +----------+----------+---------------
/// | tag u64  | imm u64  | payload ...
/// +----------+----------+---------------
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EagerHdr {
    /// The message's tag.
    pub tag: u64,
    /// Immediate data (0 for `tag_eager_short`).
    pub imm: u64,
}

impl EagerHdr {
    /// Encoded length.
    pub const LEN: usize = 16;
    /// Encodes into the first [`Self::LEN`] bytes of `out`.
    pub fn encode(&self, out: &mut [u8; Self::LEN]) {
        put_u64_at(out, 0, self.tag);
        put_u64_at(out, 8, self.imm);
    }
    /// Decodes a message into its header and payload.
    pub fn decode(b: &[u8]) -> Result<(Self, &[u8])> {
        let h = head::<{ Self::LEN }>(b, "tagged eager message")?;
        Ok((
            EagerHdr {
                tag: u64_at(h, 0),
                imm: u64_at(h, 8),
            },
            &b[Self::LEN..],
        ))
    }
}

/// Where the data of a rendezvous is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RndvSrc {
    /// `tag_rndv_request`: no data, never matched by the transport.
    Request,
    /// Ordinary memory of the sender, read with `process_vm_readv`.
    Cma,
    /// A posix/sysv segment of the sender (memory from `mem_alloc`), mapped by the receiver.
    Seg(RkeyWire),
}

/// A rendezvous announcement. Its fixed header travels in the FIFO element's inline area; the
/// element's buffer holds the segment key (only for a segment source) and the sender's user
/// header. The receiver of a matched rendezvous reads only the inline part (the same cache
/// lines as an inline active message); the buffer is read for an unexpected one.
///
/// Inline area (the fixed header, [`RndvHdr::LEN`] bytes):
/// ```text
/// 0        8        16        24        32        36    37    38         40
/// +--------+--------+---------+---------+---------+-----+-----+----------+
/// | tag    | op id  | length  | address | pid u32 | src | 0   | hdr len  |
/// +--------+--------+---------+---------+---------+-----+-----+----------+
/// 40                                   72
/// +------------------------------------+
/// | reply: sender's interface address |
/// | (IfaceAddr, 32 bytes)              |
/// +------------------------------------+
/// ```
/// Buffer (`hdr len` + 48 bytes for a segment source, else `hdr len`):
/// ```text
/// +------------------------------------------------+-----------------------------+
/// | segment key (RkeyWire, 48 bytes; only src = 2) | user header (hdr len bytes) |
/// +------------------------------------------------+-----------------------------+
/// ```
///
/// `src`: 0 request (op id 0, length 0), 1 cross-memory read of `address` in process `pid`,
/// 2 segment. All integers little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RndvHdr {
    /// The message's tag.
    pub tag: u64,
    /// The sender's operation id (0 for a request).
    pub op_id: u64,
    /// Data length.
    pub length: u64,
    /// Data address in the sender.
    pub addr: u64,
    /// The sender's process id.
    pub pid: u32,
    /// Where the data is.
    pub src: RndvSrc,
    /// Where acknowledgements go.
    pub reply: IfaceAddr,
}

impl RndvHdr {
    /// Length of the fixed (inline) header.
    pub const LEN: usize = 72;

    /// Bytes the segment key takes at the start of the buffer.
    pub fn key_len(&self) -> usize {
        match self.src {
            RndvSrc::Seg(_) => RkeyWire::LEN,
            _ => 0,
        }
    }

    /// Encodes the fixed header, for a user header of `hdr_len` bytes, into `out`.
    pub fn encode(&self, hdr_len: u16, out: &mut [u8; Self::LEN]) {
        put_u64_at(out, 0, self.tag);
        put_u64_at(out, 8, self.op_id);
        put_u64_at(out, 16, self.length);
        put_u64_at(out, 24, self.addr);
        put_u32_at(out, 32, self.pid);
        out[36] = match self.src {
            RndvSrc::Request => 0,
            RndvSrc::Cma => 1,
            RndvSrc::Seg(_) => 2,
        };
        out[37] = 0;
        put_u16_at(out, 38, hdr_len);
        self.reply
            .encode_to(&mut SliceWriter::new(&mut out[40..72]));
    }

    /// Encodes the buffer part (segment key, then `user`) into `out`, which must hold
    /// `key_len() + user.len()` bytes.
    pub fn encode_body(&self, user: &[u8], out: &mut [u8]) {
        let mut v = SliceWriter::new(out);
        if let RndvSrc::Seg(k) = self.src {
            k.encode_to(&mut v);
        }
        v.bytes(user);
    }

    /// Decodes the fixed header (the first [`Self::LEN`] bytes of `fixed`) and the buffer
    /// part; gives the header, the segment key's bytes (empty without one) and the user header.
    pub fn decode<'a>(fixed: &[u8], body: &'a [u8]) -> Result<(Self, &'a [u8], &'a [u8])> {
        let b = head::<{ Self::LEN }>(fixed, "rendezvous header")?;
        if b[37] != 0 {
            return Err(Error::Wire("rendezvous header reserved byte".into()));
        }
        let hdr_len = u16_at(b, 38) as usize;
        let key_len = if b[36] == 2 { RkeyWire::LEN } else { 0 };
        if body.len() != key_len + hdr_len {
            return Err(Error::Wire(format!(
                "rendezvous body of {} bytes, expected {key_len} + {hdr_len}",
                body.len()
            )));
        }
        let (key, user) = body.split_at(key_len);
        let h = RndvHdr {
            tag: u64_at(b, 0),
            op_id: u64_at(b, 8),
            length: u64_at(b, 16),
            addr: u64_at(b, 24),
            pid: u32_at(b, 32),
            src: match b[36] {
                0 => RndvSrc::Request,
                1 => RndvSrc::Cma,
                2 => RndvSrc::Seg(RkeyWire::decode(key)?),
                s => return Err(Error::Wire(format!("rendezvous source kind {s}"))),
            },
            reply: IfaceAddr::decode_fixed(&b[40..72])?,
        };
        match h.src {
            RndvSrc::Request if h.op_id != 0 || h.length != 0 => {
                return Err(Error::Wire("a rendezvous request carries data".into()))
            }
            RndvSrc::Cma | RndvSrc::Seg(_) if h.op_id == 0 => {
                return Err(Error::Wire("a rendezvous without an operation id".into()))
            }
            RndvSrc::Seg(k) if k.base != h.addr || k.len < h.length => {
                return Err(Error::Wire(format!(
                    "rendezvous of {} bytes at {:#x} outside its segment key {:#x}+{}",
                    h.length, h.addr, k.base, k.len
                )))
            }
            _ => {}
        }
        if h.pid == 0 {
            return Err(Error::Wire("rendezvous from pid 0".into()));
        }
        Ok((h, key, user))
    }
}

/// A rendezvous acknowledgement, inline in the sender's FIFO.
///
/// ```text
/// 0          8        9            16
/// +----------+--------+------------+
/// | op id    | status | zero (7)   |
/// +----------+--------+------------+
/// ```
/// `status`: 0 the receiver has the data, 1 it could not read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The sender's operation id.
    pub op_id: u64,
    /// 0 ok, 1 failed.
    pub status: u8,
}

impl Ack {
    /// Encoded length.
    pub const LEN: usize = 16;
    /// Encodes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put_u64_at(&mut b, 0, self.op_id);
        b[8] = self.status;
        b
    }
    /// Decodes exactly [`Self::LEN`] bytes.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "rendezvous acknowledgement")?;
        if b[8] > 1 || b[9..].iter().any(|&x| x != 0) {
            return Err(Error::Wire("rendezvous acknowledgement status".into()));
        }
        Ok(Ack {
            op_id: u64_at(b, 0),
            status: b[8],
        })
    }
}

impl IfaceAddr {
    fn encode_to(&self, out: &mut SliceWriter<'_>) {
        out.bytes(&[super::wire::WIRE_VERSION, self.seg.kind as u8, 0, 0])
            .u32(self.seg.pid)
            .u64(self.seg.id)
            .u64(self.seg.len)
            .u64(self.nonce);
    }

    /// Decodes the fixed form (exactly 32 bytes).
    fn decode_fixed(b: &[u8]) -> Result<Self> {
        let b = exact::<32>(b, "reply address")?;
        if b[0] != super::wire::WIRE_VERSION {
            return Err(Error::Wire(format!("reply address version {}", b[0])));
        }
        if b[2] != 0 || b[3] != 0 {
            return Err(Error::Wire(
                "reply address reserved bytes are not zero".into(),
            ));
        }
        let pid = u32_at(b, 4);
        if pid == 0 {
            return Err(Error::Wire("reply address has pid 0".into()));
        }
        Ok(IfaceAddr {
            seg: super::wire::SegRef {
                kind: super::wire::SegKind::from_u8(b[1])?,
                pid,
                id: u64_at(b, 8),
                len: u64_at(b, 16),
            },
            nonce: u64_at(b, 24),
        })
    }
}

impl RkeyWire {
    fn encode_to(&self, out: &mut SliceWriter<'_>) {
        out.bytes(&[super::wire::WIRE_VERSION, self.seg.kind as u8, 0, 0])
            .u32(self.seg.pid)
            .u64(self.seg.id)
            .u64(self.seg.len)
            .u64(self.base)
            .u64(self.len)
            .u64(self.offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::fifo;
    use crate::mm::wire::SegRef;
    use crate::mm::SegKind;

    fn reply() -> IfaceAddr {
        IfaceAddr {
            seg: SegRef {
                kind: SegKind::Posix,
                pid: 4242,
                id: 7,
                len: fifo::SEG_LEN as u64,
            },
            nonce: 0x1234_5678_9abc_def0,
        }
    }

    /// (fixed inline header, buffer part).
    fn encode_rndv(h: &RndvHdr, user: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut b = [0u8; RndvHdr::LEN];
        h.encode(user.len() as u16, &mut b);
        let mut body = vec![0u8; h.key_len() + user.len()];
        h.encode_body(user, &mut body);
        (b.to_vec(), body)
    }

    #[test]
    fn eager_header_round_trip_and_truncation() {
        let h = EagerHdr {
            tag: 0xdead_beef_0000_0001,
            imm: 99,
        };
        let mut b = [0u8; EagerHdr::LEN];
        h.encode(&mut b);
        assert_eq!(&b[..8], &0xdead_beef_0000_0001u64.to_le_bytes());
        let mut m = b.to_vec();
        m.extend_from_slice(b"payload");
        let (d, p) = EagerHdr::decode(&m).unwrap();
        assert_eq!((d, p), (h, &b"payload"[..]));
        for n in 0..EagerHdr::LEN {
            assert!(matches!(EagerHdr::decode(&m[..n]), Err(Error::Wire(_))));
        }
    }

    #[test]
    fn rndv_header_round_trips_for_every_source() {
        let seg = RndvSrc::Seg(RkeyWire {
            seg: SegRef {
                kind: SegKind::Sysv,
                pid: 4242,
                id: 3,
                len: 1 << 20,
            },
            base: 0x7000_0000,
            len: 5000,
            offset: 4096,
        });
        for (src, op_id, length, addr) in [
            (RndvSrc::Request, 0, 0, 0),
            (RndvSrc::Cma, 5 << 32 | 1, 1 << 20, 0x5555_0000),
            (seg, 7, 5000, 0x7000_0000),
        ] {
            let h = RndvHdr {
                tag: 77,
                op_id,
                length,
                addr,
                pid: 4242,
                src,
                reply: reply(),
            };
            let (f, body) = encode_rndv(&h, b"user header");
            assert_eq!(body.len(), h.key_len() + 11);
            let (d, key, u) = RndvHdr::decode(&f, &body).unwrap();
            assert_eq!(d, h);
            assert_eq!(u, b"user header");
            match src {
                RndvSrc::Seg(k) => assert_eq!(RkeyWire::decode(key).unwrap(), k),
                _ => assert!(key.is_empty()),
            }
            assert_eq!(IfaceAddr::decode_fixed(&f[40..72]).unwrap(), h.reply);
            // Every truncation is an error, never a panic.
            for n in 0..f.len() {
                assert!(
                    RndvHdr::decode(&f[..n], &body).is_err(),
                    "{n} bytes accepted"
                );
            }
            for n in 0..body.len() {
                assert!(
                    RndvHdr::decode(&f, &body[..n]).is_err(),
                    "{n} body bytes accepted"
                );
            }
            // One byte too many for the announced header length.
            let mut long = body.clone();
            long.push(0);
            assert!(RndvHdr::decode(&f, &long).is_err());
        }
    }

    #[test]
    fn rndv_header_rejects_inconsistent_fields() {
        let h = RndvHdr {
            tag: 1,
            op_id: 9,
            length: 10,
            addr: 0x1000,
            pid: 1,
            src: RndvSrc::Cma,
            reply: reply(),
        };
        let (good, body) = encode_rndv(&h, &[]);
        let bad = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut m = good.clone();
            f(&mut m);
            RndvHdr::decode(&m, &body).is_err()
        };
        assert!(bad(&|m| m[36] = 9), "unknown source");
        assert!(bad(&|m| m[37] = 1), "reserved byte");
        assert!(bad(&|m| m[8..16].fill(0)), "data without an operation id");
        assert!(bad(&|m| m[36] = 0), "request with data");
        assert!(bad(&|m| m[36] = 2), "segment source without its key");
        assert!(bad(&|m| m[32..36].fill(0)), "pid 0");
        assert!(bad(&|m| m[40] = 9), "bad reply address version");
        assert!(RndvHdr::decode(&good, &body).is_ok());
        // A segment key that does not cover the data.
        let mut k = RkeyWire {
            seg: reply().seg,
            base: 0x1000,
            len: 10,
            offset: 0,
        };
        let mut hs = RndvHdr {
            src: RndvSrc::Seg(k),
            ..h
        };
        let (f, b) = encode_rndv(&hs, b"u");
        assert!(RndvHdr::decode(&f, &b).is_ok());
        k.len = 9;
        hs.src = RndvSrc::Seg(k);
        let (f, b) = encode_rndv(&hs, b"u");
        assert!(
            RndvHdr::decode(&f, &b).is_err(),
            "key shorter than the data"
        );
    }

    #[test]
    fn ack_round_trip_and_truncation() {
        let a = Ack {
            op_id: 3 << 32 | 17,
            status: 1,
        };
        let b = a.encode();
        assert_eq!(Ack::decode(&b).unwrap(), a);
        for n in 0..Ack::LEN {
            assert!(Ack::decode(&b[..n]).is_err());
        }
        let mut c = b;
        c[8] = 2;
        assert!(Ack::decode(&c).is_err(), "status 2");
        let mut c = b;
        c[15] = 1;
        assert!(Ack::decode(&c).is_err(), "reserved bytes");
    }
}
