//! Address and remote-key blobs of the shared-memory transports. Little-endian, fixed length,
//! strict decode.

use ucs::codec::{exact, u32_at, u64_at, Reader, Writer};
use ucs::{Error, Result};

/// Blob version written first in every blob.
pub const WIRE_VERSION: u8 = 1;

/// Kind of shared-memory segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegKind {
    /// A memfd, reached by peers through `/proc/<pid>/fd/<fd>`.
    Posix = 1,
    /// A System V segment, reached by its shmid.
    Sysv = 2,
}

impl SegKind {
    pub(crate) fn from_u8(v: u8) -> Result<Self> {
        match v {
            1 => Ok(SegKind::Posix),
            2 => Ok(SegKind::Sysv),
            _ => Err(Error::Wire(format!("unknown segment kind {v}"))),
        }
    }
    /// Transport / memory-domain name.
    pub fn name(self) -> &'static str {
        match self {
            SegKind::Posix => "posix",
            SegKind::Sysv => "sysv",
        }
    }
}

/// Where a segment lives: its kind, its creator's pid, and its id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegRef {
    /// Kind of segment.
    pub kind: SegKind,
    /// Creator's process id.
    pub pid: u32,
    /// Posix: the memfd's descriptor number in the creator (low 32 bits) and a serial unique
    /// in the creator (high 32 bits). Sysv: the shmid.
    pub id: u64,
    /// Mapped length.
    pub len: u64,
}

/// The device address: which host (boot) and which namespaces, so `is_reachable` rejects peers
/// that cannot map our segments. posix, sysv and cma carry the same one, which the worker
/// address then packs once. Both parts are 64-bit FNV-1a hashes (like UCX's machine guid): a
/// peer on another host or in another container differs in one of them but for a 2^-64 chance,
/// and the address stays 16 bytes. The format is versioned by the worker address that
/// carries it.
///
/// ```text
/// 0                   8                   16
/// +-------------------+-------------------+
/// | host (u64 LE)     | namespaces (u64)  |
/// +-------------------+-------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAddr {
    /// Hash of `/proc/sys/kernel/random/boot_id`: this host since its boot.
    pub host: u64,
    /// Hash of the inodes of `/proc/self/ns/{pid,ipc,net}` (the net namespace counts: abstract
    /// unix sockets wake the receiver).
    pub ns: u64,
}

/// 64-bit FNV-1a of `data`, continuing from `h`.
fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

impl DeviceAddr {
    /// Encoded length.
    pub const LEN: usize = 16;

    /// This host and these namespaces.
    pub fn local() -> Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map_err(|e| Error::io("reading the boot id", e))?;
        let boot = text.trim();
        if boot.len() != 36 || !boot.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-') {
            return Err(Error::NoDevice(format!("unexpected boot id '{boot}'")));
        }
        let ino = |p: &str| {
            std::fs::metadata(p)
                .map(|m| m.ino())
                .map_err(|e| Error::io(format!("reading {p}"), e))
        };
        let mut ns = FNV_OFFSET;
        for p in [
            "/proc/self/ns/pid",
            "/proc/self/ns/ipc",
            "/proc/self/ns/net",
        ] {
            ns = fnv1a(&ino(p)?.to_le_bytes(), ns);
        }
        Ok(DeviceAddr {
            host: fnv1a(boot.to_ascii_lowercase().as_bytes(), FNV_OFFSET),
            ns,
        })
    }

    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out).u64(self.host).u64(self.ns);
    }

    /// Decodes exactly [`Self::LEN`] bytes.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(b, "shared-memory device address");
        let d = DeviceAddr {
            host: r.u64("host")?,
            ns: r.u64("namespaces")?,
        };
        r.finish()?;
        Ok(d)
    }

    /// Why a peer with this device address cannot be reached from `self`, if it cannot.
    pub fn unreachable_reason(&self, peer: &DeviceAddr) -> Option<String> {
        if self.host != peer.host {
            return Some("shared memory needs the same host (the peer's boot id differs)".into());
        }
        if self.ns != peer.ns {
            return Some(
                "shared memory needs the same pid, ipc and net namespaces (the peer is in another container)"
                    .into(),
            );
        }
        None
    }
}

/// The interface address: the receive FIFO's segment and the wake-up socket. The integers but
/// the nonce are varints ([`ucs::varint`]).
///
/// ```text
/// +------+-----------+-------------------+--------------------+---------------------+
/// | kind | pid (var) | segment id (var)  | segment len (var)  | socket nonce (u64)  |
/// +------+-----------+-------------------+--------------------+---------------------+
/// ```
/// The wake-up socket is the abstract unix datagram socket `\0rucx-mm-<pid>-<nonce>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfaceAddr {
    /// The FIFO segment.
    pub seg: SegRef,
    /// Names the wake-up socket.
    pub nonce: u64,
}

impl IfaceAddr {
    /// Largest encoded length.
    pub const LEN: usize = 1 + 5 + 2 * ucs::varint::MAX_LEN + 8;

    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .u8(self.seg.kind as u8)
            .var(self.seg.pid as u64)
            .var(self.seg.id)
            .var(self.seg.len)
            .u64(self.nonce);
    }

    /// Decodes exactly one encoding (no trailing bytes); pid 0 is an error.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(b, "shared-memory interface address");
        let kind = SegKind::from_u8(r.u8("segment kind")?)?;
        let pid = r.var_u32("pid")?;
        if pid == 0 {
            return Err(Error::Wire("interface address has pid 0".into()));
        }
        let seg = SegRef {
            kind,
            pid,
            id: r.var("segment id")?,
            len: r.var("segment length")?,
        };
        let nonce = r.u64("socket nonce")?;
        r.finish()?;
        Ok(IfaceAddr { seg, nonce })
    }

    /// The wake-up socket's abstract name (without the leading NUL).
    pub fn socket_name(pid: u32, nonce: u64) -> String {
        format!("rucx-mm-{pid}-{nonce:016x}")
    }
}

/// A packed remote key: the segment holding the region and where the region lies.
///
/// ```text
/// 0       1      2      4          8              16              24             32       40
/// +-------+------+------+----------+--------------+---------------+--------------+--------+
/// |version| kind | 0 0  | pid (u32)| seg id (u64) | seg len (u64) | base (u64)   |len(u64)|
/// +-------+------+------+----------+--------------+---------------+--------------+--------+
/// 40..48: offset of the region inside the segment (u64)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RkeyWire {
    /// The segment.
    pub seg: SegRef,
    /// The region's address in its owner.
    pub base: u64,
    /// The region's length.
    pub len: u64,
    /// The region's offset inside the segment.
    pub offset: u64,
}

impl RkeyWire {
    /// Encoded length.
    pub const LEN: usize = 48;

    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .u8(WIRE_VERSION)
            .u8(self.seg.kind as u8)
            .u16(0)
            .u32(self.seg.pid)
            .u64(self.seg.id)
            .u64(self.seg.len)
            .u64(self.base)
            .u64(self.len)
            .u64(self.offset);
    }

    /// Decodes exactly [`Self::LEN`] bytes and checks the region lies inside the segment.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "shared-memory remote key")?;
        if b[0] != WIRE_VERSION {
            return Err(Error::Wire(format!("remote key version {}", b[0])));
        }
        if b[2] != 0 || b[3] != 0 {
            return Err(Error::Wire("remote key reserved bytes are not zero".into()));
        }
        let k = RkeyWire {
            seg: SegRef {
                kind: SegKind::from_u8(b[1])?,
                pid: u32_at(b, 4),
                id: u64_at(b, 8),
                len: u64_at(b, 16),
            },
            base: u64_at(b, 24),
            len: u64_at(b, 32),
            offset: u64_at(b, 40),
        };
        if k.offset
            .checked_add(k.len)
            .is_none_or(|end| end > k.seg.len)
        {
            return Err(Error::Wire(format!(
                "remote key region {}+{} lies outside its {}-byte segment",
                k.offset, k.len, k.seg.len
            )));
        }
        if k.seg.pid == 0 {
            return Err(Error::Wire("remote key has pid 0".into()));
        }
        Ok(k)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn seg() -> SegRef {
        SegRef {
            kind: SegKind::Sysv,
            pid: 1234,
            id: 0x1122_3344_5566,
            len: 1 << 21,
        }
    }

    #[test]
    fn device_addr_round_trip_truncated_and_reachability() {
        let a = DeviceAddr::local().unwrap();
        let mut v = Vec::new();
        a.encode(&mut v);
        assert_eq!(v.len(), DeviceAddr::LEN);
        assert_eq!(DeviceAddr::decode(&v).unwrap(), a);
        assert_eq!(DeviceAddr::local().unwrap(), a, "the same in every call");
        for n in 0..v.len() {
            assert!(matches!(DeviceAddr::decode(&v[..n]), Err(Error::Wire(_))));
        }
        let mut long = v.clone();
        long.push(0);
        assert!(matches!(DeviceAddr::decode(&long), Err(Error::Wire(_))));
        let e = DeviceAddr::decode(&long).unwrap_err().to_string();
        assert!(e.contains("1 trailing"), "{e}");
        assert!(a.unreachable_reason(&a).is_none());
        let mut other = a;
        other.host ^= 1;
        assert!(a.unreachable_reason(&other).unwrap().contains("same host"));
        let mut other = a;
        other.ns += 1;
        assert!(a.unreachable_reason(&other).unwrap().contains("namespaces"));
    }

    #[test]
    fn iface_addr_round_trip_and_truncated() {
        let a = IfaceAddr {
            seg: seg(),
            nonce: 0xdead_beef,
        };
        let mut v = Vec::new();
        a.encode(&mut v);
        // kind, pid 1234 (2 bytes), id (7), len 2 MiB (4), nonce (8).
        assert_eq!(v.len(), 1 + 2 + 7 + 4 + 8);
        assert_eq!(v[0], 2);
        assert_eq!(&v[1..3], &[0xd2, 0x09]);
        assert_eq!(IfaceAddr::decode(&v).unwrap(), a);
        for n in 0..v.len() {
            assert!(matches!(IfaceAddr::decode(&v[..n]), Err(Error::Wire(_))));
        }
        let mut bad = v.clone();
        bad[0] = 7;
        assert!(matches!(IfaceAddr::decode(&bad), Err(Error::Wire(_))));
        let mut pid0 = vec![2, 0];
        pid0.extend_from_slice(&v[3..]);
        let e = IfaceAddr::decode(&pid0).unwrap_err().to_string();
        assert!(e.contains("pid 0"), "{e}");
        let mut long = v.clone();
        long.push(0);
        let e = IfaceAddr::decode(&long).unwrap_err().to_string();
        assert!(e.contains("trailing"), "{e}");
    }

    #[test]
    fn rkey_round_trip_truncated_and_out_of_segment() {
        let k = RkeyWire {
            seg: seg(),
            base: 0x7f00_0000_1000,
            len: 4096,
            offset: 8192,
        };
        let mut v = Vec::new();
        k.encode(&mut v);
        assert_eq!(v.len(), RkeyWire::LEN);
        assert_eq!(RkeyWire::decode(&v).unwrap(), k);
        for n in 0..v.len() {
            assert!(matches!(RkeyWire::decode(&v[..n]), Err(Error::Wire(_))));
        }
        let bad = RkeyWire {
            offset: (1 << 21) - 100,
            ..k
        };
        let mut v = Vec::new();
        bad.encode(&mut v);
        assert!(matches!(RkeyWire::decode(&v), Err(Error::Wire(_))));
        let bad = RkeyWire {
            offset: u64::MAX,
            ..k
        };
        let mut v = Vec::new();
        bad.encode(&mut v);
        assert!(matches!(RkeyWire::decode(&v), Err(Error::Wire(_))));
    }
}

#[cfg(all(test, not(loom)))]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn seg_ref() -> impl Strategy<Value = SegRef> {
        (any::<bool>(), 1u32.., any::<u64>(), any::<u64>()).prop_map(|(p, pid, id, len)| SegRef {
            kind: if p { SegKind::Posix } else { SegKind::Sysv },
            pid,
            id,
            len,
        })
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = DeviceAddr::decode(&bytes);
            let _ = IfaceAddr::decode(&bytes);
            let _ = RkeyWire::decode(&bytes);
        }

        #[test]
        fn iface_addr_round_trips(seg in seg_ref(), nonce in any::<u64>()) {
            let a = IfaceAddr { seg, nonce };
            let mut v = Vec::new();
            a.encode(&mut v);
            prop_assert!(v.len() <= IfaceAddr::LEN);
            prop_assert_eq!(IfaceAddr::decode(&v).unwrap(), a);
        }

        #[test]
        fn rkey_round_trips_when_inside_its_segment(
            seg in seg_ref(), base in any::<u64>(), a in any::<u64>(), b in any::<u64>()
        ) {
            let (offset, len) = (a % (seg.len / 2 + 1), b % (seg.len / 2 + 1));
            let k = RkeyWire { seg, base, len, offset };
            let mut v = Vec::new();
            k.encode(&mut v);
            prop_assert_eq!(RkeyWire::decode(&v).unwrap(), k);
        }

        #[test]
        fn device_addr_round_trips(host in any::<u64>(), ns in any::<u64>()) {
            let d = DeviceAddr { host, ns };
            let mut v = Vec::new();
            d.encode(&mut v);
            prop_assert_eq!(DeviceAddr::decode(&v).unwrap(), d);
        }
    }
}
