//! Address and remote-key blobs of the shared-memory transports. Little-endian, fixed length,
//! strict decode.

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

fn need(buf: &[u8], len: usize, what: &str) -> Result<()> {
    if buf.len() < len {
        return Err(Error::Wire(format!(
            "{what} is truncated: {} bytes, need {len}",
            buf.len()
        )));
    }
    if buf.len() > len {
        return Err(Error::Wire(format!(
            "{what} has {} bytes, expected {len}",
            buf.len()
        )));
    }
    Ok(())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
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
/// address then packs once. The namespace inodes are varints ([`ucs::varint`]); the format is
/// versioned by the worker address that carries it.
///
/// ```text
/// 0              16
/// +--------------+------------------+------------------+------------------+
/// | boot id (16) | pid ns (varint)  | ipc ns (varint)  | net ns (varint)  |
/// +--------------+------------------+------------------+------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAddr {
    /// `/proc/sys/kernel/random/boot_id` as 16 bytes.
    pub boot_id: [u8; 16],
    /// Inode of `/proc/self/ns/pid`.
    pub pid_ns: u64,
    /// Inode of `/proc/self/ns/ipc`.
    pub ipc_ns: u64,
    /// Inode of `/proc/self/ns/net` (abstract unix sockets wake the receiver).
    pub net_ns: u64,
}

impl DeviceAddr {
    /// Largest encoded length (the namespace inodes take 1 to 10 bytes each).
    pub const LEN: usize = 16 + 3 * ucs::varint::MAX_LEN;

    /// This host and these namespaces.
    pub fn local() -> Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map_err(|e| Error::io("reading the boot id", e))?;
        let hex: Vec<u8> = text.trim().bytes().filter(|c| *c != b'-').collect();
        if hex.len() != 32 {
            return Err(Error::NoDevice(format!(
                "unexpected boot id '{}'",
                text.trim()
            )));
        }
        let mut boot_id = [0u8; 16];
        for (i, b) in boot_id.iter_mut().enumerate() {
            let s = std::str::from_utf8(&hex[2 * i..2 * i + 2]).unwrap_or("zz");
            *b = u8::from_str_radix(s, 16)
                .map_err(|_| Error::NoDevice(format!("bad boot id '{}'", text.trim())))?;
        }
        let ino = |p: &str| {
            std::fs::metadata(p)
                .map(|m| m.ino())
                .map_err(|e| Error::io(format!("reading {p}"), e))
        };
        Ok(DeviceAddr {
            boot_id,
            pid_ns: ino("/proc/self/ns/pid")?,
            ipc_ns: ino("/proc/self/ns/ipc")?,
            net_ns: ino("/proc/self/ns/net")?,
        })
    }

    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.boot_id);
        for ns in [self.pid_ns, self.ipc_ns, self.net_ns] {
            ucs::varint::put(out, ns);
        }
    }

    /// Decodes exactly one encoding (no trailing bytes).
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = ucs::varint::Reader::new(b, "shared-memory device address");
        let d = DeviceAddr {
            boot_id: r.array("boot id")?,
            pid_ns: r.var("pid namespace")?,
            ipc_ns: r.var("ipc namespace")?,
            net_ns: r.var("net namespace")?,
        };
        r.finish()?;
        Ok(d)
    }

    /// Why a peer with this device address cannot be reached from `self`, if it cannot.
    pub fn unreachable_reason(&self, peer: &DeviceAddr) -> Option<String> {
        if self.boot_id != peer.boot_id {
            return Some("shared memory needs the same host (the peer's boot id differs)".into());
        }
        if self.pid_ns != peer.pid_ns || self.ipc_ns != peer.ipc_ns || self.net_ns != peer.net_ns {
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
        out.push(self.seg.kind as u8);
        ucs::varint::put(out, self.seg.pid as u64);
        ucs::varint::put(out, self.seg.id);
        ucs::varint::put(out, self.seg.len);
        out.extend_from_slice(&self.nonce.to_le_bytes());
    }

    /// Decodes exactly one encoding (no trailing bytes); pid 0 is an error.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = ucs::varint::Reader::new(b, "shared-memory interface address");
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
        let nonce = r.u64_le("socket nonce")?;
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
        out.push(WIRE_VERSION);
        out.push(self.seg.kind as u8);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.seg.pid.to_le_bytes());
        out.extend_from_slice(&self.seg.id.to_le_bytes());
        out.extend_from_slice(&self.seg.len.to_le_bytes());
        out.extend_from_slice(&self.base.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
    }

    /// Decodes exactly [`Self::LEN`] bytes and checks the region lies inside the segment.
    pub fn decode(b: &[u8]) -> Result<Self> {
        need(b, Self::LEN, "shared-memory remote key")?;
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
        assert!(v.len() <= DeviceAddr::LEN);
        assert_eq!(DeviceAddr::decode(&v).unwrap(), a);
        for n in 0..v.len() {
            assert!(matches!(DeviceAddr::decode(&v[..n]), Err(Error::Wire(_))));
        }
        let mut long = v.clone();
        long.push(0);
        assert!(matches!(DeviceAddr::decode(&long), Err(Error::Wire(_))));
        let mut bad = v[..16].to_vec();
        bad.extend_from_slice(&[0x80, 0x00, 1, 1]);
        let e = DeviceAddr::decode(&bad).unwrap_err().to_string();
        assert!(e.contains("shortest"), "{e}");
        assert!(a.unreachable_reason(&a).is_none());
        let mut other = a;
        other.boot_id[0] ^= 1;
        assert!(a.unreachable_reason(&other).unwrap().contains("same host"));
        let mut other = a;
        other.pid_ns += 1;
        assert!(a.unreachable_reason(&other).is_some());
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
            let _ = crate::cma::CmaRkey::decode(&bytes);
            let _ = crate::cma::CmaIfaceAddr::decode(&bytes);
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
        fn device_addr_round_trips(
            boot_id in any::<[u8; 16]>(), pid_ns in any::<u64>(), ipc_ns in any::<u64>(),
            net_ns in any::<u64>()
        ) {
            let d = DeviceAddr { boot_id, pid_ns, ipc_ns, net_ns };
            let mut v = Vec::new();
            d.encode(&mut v);
            prop_assert_eq!(DeviceAddr::decode(&v).unwrap(), d);
        }
    }
}
