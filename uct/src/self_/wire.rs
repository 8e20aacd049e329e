//! Wire formats of the self transport: device, interface and endpoint addresses, and the packed
//! remote key. The device and interface addresses are varints ([`ucs::varint`]); the endpoint
//! address and the key are little-endian, fixed length. `decode` rejects anything but one
//! encoding.

use ucs::codec::{exact, put_u32_at, put_u64_at, u32_at, u64_at, Reader, Writer};
use ucs::{Error, Result};

/// First four bytes of a self remote key: `"RSLF"`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"RSLF");

/// The device address: which process the self interface lives in: its process id as a varint
/// ([`ucs::varint`]), then a random number drawn once per process (u64 LE), so processes of
/// other PID namespaces that carry the same id (each namespace counts from 1) are told apart.
/// The format is versioned by the worker address that carries it.
///
/// ```text
///  +---------------------+---------------------+
///  | pid (varint, 1-5 B) | nonce (u64 LE, 8 B) |
///  +---------------------+---------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAddr {
    /// Process id of the owner.
    pub pid: u32,
    /// The owner's [`process_nonce`].
    pub nonce: u64,
}

impl DeviceAddr {
    /// Largest encoded length.
    pub const LEN: usize = 5 + 8;
    /// This process.
    pub fn local() -> Self {
        DeviceAddr {
            pid: std::process::id(),
            nonce: process_nonce(),
        }
    }
    /// Encodes to bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        Writer::new(&mut v).var(self.pid as u64).u64(self.nonce);
        v
    }
    /// Decodes exactly one encoding; pid 0, a short nonce or trailing bytes give
    /// [`Error::Wire`].
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(b, "self device address");
        let pid = r.var_u32("pid")?;
        let nonce = r.u64("process nonce")?;
        r.finish()?;
        if pid == 0 {
            return Err(Error::Wire("self device address has pid 0".into()));
        }
        Ok(DeviceAddr { pid, nonce })
    }
    /// `Ok` when this address is of the calling process, else why self cannot reach it.
    pub fn check_this_process(&self) -> Result<()> {
        let me = Self::local();
        if self.pid != me.pid {
            return Err(Error::Unreachable(format!(
                "self reaches only its own process ({}), not process {}",
                me.pid, self.pid
            )));
        }
        if self.nonce != me.nonce {
            return Err(Error::Unreachable(format!(
                "self reaches only its own process: process {} of the address is another one \
                 with the same id (another PID namespace, or a forked copy)",
                self.pid
            )));
        }
        Ok(())
    }
}

/// A random number drawn once per process (again in a forked child, whose process id differs
/// from the one it was drawn for).
pub fn process_nonce() -> u64 {
    // The pid the nonce was drawn for, and the nonce (not on a data path: interfaces and
    // reachability checks ask).
    static NONCE: std::sync::Mutex<(u32, u64)> = std::sync::Mutex::new((0, 0));
    let me = std::process::id();
    let mut g = NONCE.lock().unwrap_or_else(|p| p.into_inner());
    if g.0 != me {
        *g = (me, ucs::random::secret_u64());
    }
    g.1
}

/// The interface address: a process-unique interface number, as a varint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfaceAddr {
    /// Interface id (never 0).
    pub iface_id: u64,
}

impl IfaceAddr {
    /// Largest encoded length.
    pub const LEN: usize = ucs::varint::MAX_LEN;
    /// Encodes to bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(ucs::varint::len(self.iface_id));
        Writer::new(&mut v).var(self.iface_id);
        v
    }
    /// Decodes exactly one encoding; id 0 or trailing bytes give [`Error::Wire`].
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(b, "self interface address");
        let iface_id = r.var("interface id")?;
        r.finish()?;
        if iface_id == 0 {
            return Err(Error::Wire("self interface id 0 is invalid".into()));
        }
        Ok(IfaceAddr { iface_id })
    }
}

/// The endpoint address, for `connect_to_ep`: the interface and the endpoint number in it.
///
/// ```text
///  0                               8               12
///  +-------------------------------+---------------+
///  |        interface id           |  endpoint id  |
///  +-------------------------------+---------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpAddr {
    /// Interface id (never 0).
    pub iface_id: u64,
    /// Endpoint id inside that interface.
    pub ep_id: u32,
}

impl EpAddr {
    /// Encoded length.
    pub const LEN: usize = 12;
    /// Encodes to bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put_u64_at(&mut b, 0, self.iface_id);
        put_u32_at(&mut b, 8, self.ep_id);
        b
    }
    /// Decodes; wrong length or interface id 0 gives [`Error::Wire`].
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "self endpoint address")?;
        let iface_id = u64_at(b, 0);
        if iface_id == 0 {
            return Err(Error::Wire("self interface id 0 is invalid".into()));
        }
        Ok(EpAddr {
            iface_id,
            ep_id: u32_at(b, 8),
        })
    }
}

/// The packed remote key of a self memory region. Valid only in the process that packed it.
///
/// ```text
///  0       4       8               16              24              32
///  +-------+-------+---------------+---------------+---------------+
///  | magic |  pid  |   region id   | base address  |    length     |
///  +-------+-------+---------------+---------------+---------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedRkey {
    /// Process that owns the region.
    pub pid: u32,
    /// Process-unique registration number (never 0).
    pub region_id: u64,
    /// Start address of the region.
    pub base: u64,
    /// Length of the region.
    pub len: u64,
}

impl PackedRkey {
    /// Encoded length.
    pub const LEN: usize = 32;
    /// Encodes to bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put_u32_at(&mut b, 0, MAGIC);
        put_u32_at(&mut b, 4, self.pid);
        put_u64_at(&mut b, 8, self.region_id);
        put_u64_at(&mut b, 16, self.base);
        put_u64_at(&mut b, 24, self.len);
        b
    }
    /// Decodes; wrong length, wrong magic, region id 0 or a region that wraps the address space
    /// give [`Error::Wire`].
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = exact::<{ Self::LEN }>(b, "self remote key")?;
        let magic = u32_at(b, 0);
        if magic != MAGIC {
            return Err(Error::Wire(format!(
                "not a self remote key (magic {magic:#010x}, expected {MAGIC:#010x})"
            )));
        }
        let k = PackedRkey {
            pid: u32_at(b, 4),
            region_id: u64_at(b, 8),
            base: u64_at(b, 16),
            len: u64_at(b, 24),
        };
        if k.region_id == 0 {
            return Err(Error::Wire("self remote key with region id 0".into()));
        }
        if k.base == 0 || k.base.checked_add(k.len).is_none() {
            return Err(Error::Wire(format!(
                "self remote key region {:#x}+{} is not a valid address range",
                k.base, k.len
            )));
        }
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_addr_round_trip_and_truncation() {
        let a = DeviceAddr {
            pid: 4242,
            nonce: 0x0102_0304_0506_0708,
        };
        let b = a.encode();
        assert_eq!(b, [0x92, 0x21, 8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(DeviceAddr::decode(&b).unwrap(), a);
        for n in 0..b.len() {
            assert!(matches!(DeviceAddr::decode(&b[..n]), Err(Error::Wire(_))));
        }
        let max = DeviceAddr {
            pid: u32::MAX,
            nonce: u64::MAX,
        }
        .encode();
        assert_eq!(max.len(), DeviceAddr::LEN);
        assert_eq!(DeviceAddr::decode(&max).unwrap().pid, u32::MAX);
        for bad in [
            &[0u8, 1, 2, 3, 4, 5, 6, 7, 8][..],
            &[0x92, 0x21, 1, 2, 3, 4, 5, 6, 7, 8, 0],
            &[0xff, 0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8],
        ] {
            assert!(
                matches!(DeviceAddr::decode(bad), Err(Error::Wire(_))),
                "{bad:?}"
            );
        }
    }

    /// The nonce stays for the process, and an address of this process passes the check.
    #[test]
    fn process_nonce_is_stable_and_checked() {
        assert_eq!(process_nonce(), process_nonce());
        assert!(DeviceAddr::local().check_this_process().is_ok());
    }

    #[test]
    fn iface_and_ep_addr_round_trip_and_truncation() {
        let a = IfaceAddr {
            iface_id: 0x0102_0304_0506_0708,
        };
        let b = a.encode();
        assert_eq!(b.len(), 9);
        assert_eq!(b[0], 0x88, "low 7 bits first");
        assert_eq!(IfaceAddr::decode(&b).unwrap(), a);
        assert!(IfaceAddr::decode(&b[..8]).is_err());
        assert!(IfaceAddr::decode(&[0u8]).is_err());
        assert_eq!(IfaceAddr { iface_id: 3 }.encode(), [3]);

        let e = EpAddr {
            iface_id: 9,
            ep_id: 77,
        };
        let b = e.encode();
        assert_eq!(EpAddr::decode(&b).unwrap(), e);
        for n in 0..EpAddr::LEN {
            assert!(matches!(EpAddr::decode(&b[..n]), Err(Error::Wire(_))));
        }
        let mut long = b.to_vec();
        long.push(0);
        assert!(EpAddr::decode(&long).is_err());
    }

    #[test]
    fn rkey_round_trip_and_corruption() {
        let k = PackedRkey {
            pid: 7,
            region_id: 3,
            base: 0x7fff_0000_1000,
            len: 4096,
        };
        let b = k.encode();
        assert_eq!(&b[0..4], b"RSLF");
        assert_eq!(PackedRkey::decode(&b).unwrap(), k);
        for n in 0..PackedRkey::LEN {
            assert!(matches!(PackedRkey::decode(&b[..n]), Err(Error::Wire(_))));
        }
        let wrap = PackedRkey { len: u64::MAX, ..k };
        assert!(PackedRkey::decode(&wrap.encode()).is_err());
        let zero_id = PackedRkey { region_id: 0, ..k };
        assert!(PackedRkey::decode(&zero_id.encode()).is_err());
        let mut bad = b;
        bad[2] = 0;
        assert!(PackedRkey::decode(&bad).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = DeviceAddr::decode(&bytes);
            let _ = IfaceAddr::decode(&bytes);
            let _ = EpAddr::decode(&bytes);
            let _ = PackedRkey::decode(&bytes);
        }

        #[test]
        fn rkey_round_trips(pid: u32, region_id in 1u64.., base in 1u64..1 << 56, len in 0u64..1 << 40) {
            let k = PackedRkey { pid, region_id, base, len };
            proptest::prop_assert_eq!(PackedRkey::decode(&k.encode()).unwrap(), k);
        }

        #[test]
        fn ep_addr_round_trips(iface_id in 1u64.., ep_id: u32) {
            let a = EpAddr { iface_id, ep_id };
            proptest::prop_assert_eq!(EpAddr::decode(&a.encode()).unwrap(), a);
        }
    }
}
