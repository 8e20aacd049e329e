//! The tcp memory domain: registration, allocation and remote keys.
//!
//! Remote memory is never touched by a peer directly: a peer's put/get/atomic arrives as a
//! request frame and the target's progress applies it. The target therefore checks every
//! request against its own registration table: a packed rkey carries `base`, `len` and a
//! `key` id; the target looks the key up in [`RegTable`] (a process-wide table of atomic
//! slots), and accepts the access only if the key is live and the whole range lies inside the
//! region registered under it. A forged, stale (deregistered) or out-of-range access gives
//! [`ucs::Error::RemoteAccess`] on the initiator, never a wild write.

use crate::caps::{MdAttr, MdFlags};
use crate::md::{MemHandle, MemoryDomain, RemoteKey};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use ucs::{Error, Result};

/// Number of registration slots in the process-wide table.
pub const REG_SLOTS: usize = 1 << 14;
const SLOT_BITS: u32 = 14;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// Marks a slot being filled.
const RESERVED: u64 = u64::MAX;

struct Slot {
    key: AtomicU64,
    addr: AtomicU64,
    len: AtomicU64,
}

/// The process-wide registration table. Registration and deregistration are control-path
/// operations (a scan and a CAS); lookups on the data path are two atomic loads and no lock.
pub struct RegTable {
    slots: Box<[Slot]>,
    next_gen: AtomicU32,
    hint: AtomicUsize,
}

impl RegTable {
    /// The table of this process.
    pub fn global() -> &'static RegTable {
        static TABLE: OnceLock<RegTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            // Start generations at a per-process value so keys of another process (or an
            // earlier run) are unlikely to be live here.
            let seed = std::process::id()
                ^ std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0);
            RegTable {
                slots: (0..REG_SLOTS)
                    .map(|_| Slot {
                        key: AtomicU64::new(0),
                        addr: AtomicU64::new(0),
                        len: AtomicU64::new(0),
                    })
                    .collect(),
                next_gen: AtomicU32::new(seed | 1),
                hint: AtomicUsize::new(0),
            }
        })
    }

    /// Registers `addr..addr+len`, giving its key id.
    pub fn register(&self, addr: u64, len: u64) -> Result<u64> {
        let start = self.hint.load(Ordering::Relaxed);
        for i in 0..REG_SLOTS {
            let idx = (start + i) % REG_SLOTS;
            let s = &self.slots[idx];
            if s.key
                .compare_exchange(0, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                let mut gen = self.next_gen.fetch_add(1, Ordering::Relaxed) as u64;
                if gen == 0 || gen == u32::MAX as u64 {
                    gen = 1;
                }
                let key = (gen << 32) | idx as u64;
                s.addr.store(addr, Ordering::Relaxed);
                s.len.store(len, Ordering::Relaxed);
                s.key.store(key, Ordering::Release);
                self.hint.store((idx + 1) % REG_SLOTS, Ordering::Relaxed);
                return Ok(key);
            }
        }
        Err(Error::NoMemory(format!(
            "tcp registration table is full ({REG_SLOTS} regions registered)"
        )))
    }

    /// Removes a registration; later lookups of `key` fail.
    pub fn unregister(&self, key: u64) {
        if let Some(s) = self.slots.get((key & SLOT_MASK) as usize) {
            let _ = s
                .key
                .compare_exchange(key, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Checks that `key` is live and `addr..addr+len` lies inside its region; gives the
    /// local address.
    #[inline]
    pub fn lookup(&self, key: u64, addr: u64, len: u64) -> Result<*mut u8> {
        let bad = |why: &str| {
            Err(Error::RemoteAccess(format!(
                "{len} bytes at {addr:#x} with key {key:#x}: {why}"
            )))
        };
        if key == 0 || key == RESERVED || (key >> 32) == 0 {
            return bad("not a registration key");
        }
        let Some(s) = self.slots.get((key & SLOT_MASK) as usize) else {
            return bad("not a registration key");
        };
        if (key & 0xffff_ffff) >> SLOT_BITS != 0 {
            return bad("not a registration key");
        }
        if s.key.load(Ordering::Acquire) != key {
            return bad("no live registration has this key (forged or deregistered)");
        }
        let base = s.addr.load(Ordering::Relaxed);
        let rlen = s.len.load(Ordering::Relaxed);
        // Re-check: the slot may have been reused between the loads.
        if s.key.load(Ordering::Acquire) != key {
            return bad("no live registration has this key (forged or deregistered)");
        }
        let off = addr.wrapping_sub(base);
        if addr < base || off.checked_add(len).is_none_or(|end| end > rlen) {
            return bad(&format!("outside the registered region {base:#x}+{rlen}"));
        }
        Ok(addr as *mut u8)
    }
}

/// Owns a registration (and, for `mem_alloc`, the memory); dropped with the [`MemHandle`].
struct TcpMem {
    key: u64,
    alloc: Option<(NonNull<u8>, Layout)>,
}

// SAFETY: the allocation is plain memory owned by this value; nothing here is thread-bound.
unsafe impl Send for TcpMem {}
// SAFETY: as above; TcpMem has no interior mutability.
unsafe impl Sync for TcpMem {}

impl Drop for TcpMem {
    fn drop(&mut self) {
        // Deregister first, so no peer request can reach memory about to be freed.
        RegTable::global().unregister(self.key);
        if let Some((p, layout)) = self.alloc.take() {
            // SAFETY: p was allocated with this layout by mem_alloc and is freed only here.
            unsafe { std::alloc::dealloc(p.as_ptr(), layout) };
        }
    }
}

/// The key id of a tcp registration (for tests and diagnostics).
pub fn reg_key(memh: &MemHandle) -> Option<u64> {
    memh.tl_data::<TcpMem>().map(|m| m.key)
}

/// A packed tcp rkey.
///
/// ```text
///  0        1                                      8
///  +--------+--------------------------------------+
///  | ver=1  | reserved (7 bytes, zero)             |
///  +--------+--------------------------------------+
///  | base (u64 LE): region start at the owner      |  8..16
///  +-----------------------------------------------+
///  | len (u64 LE): region length                   |  16..24
///  +-----------------------------------------------+
///  | key (u64 LE): the owner's registration key id |  24..32
///  +-----------------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedRkey {
    /// Region start in the owner's address space.
    pub base: u64,
    /// Region length.
    pub len: u64,
    /// Registration key id.
    pub key: u64,
}

impl PackedRkey {
    /// Encoded size.
    pub const LEN: usize = 32;
    /// Version byte.
    pub const VERSION: u8 = 1;
    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
    /// The encoding as an array (no allocation).
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = Self::VERSION;
        ucs::codec::put_u64_at(&mut b, 8, self.base);
        ucs::codec::put_u64_at(&mut b, 16, self.len);
        ucs::codec::put_u64_at(&mut b, 24, self.key);
        b
    }
    /// Decodes, rejecting truncated or foreign input.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let b = ucs::codec::exact::<{ Self::LEN }>(b, "tcp rkey")?;
        if b[0] != Self::VERSION || b[1..8].iter().any(|&x| x != 0) {
            return Err(Error::Wire(format!(
                "tcp rkey has version {} (expected {})",
                b[0],
                Self::VERSION
            )));
        }
        Ok(PackedRkey {
            base: ucs::codec::u64_at(b, 8),
            len: ucs::codec::u64_at(b, 16),
            key: ucs::codec::u64_at(b, 24),
        })
    }
}

/// The tcp memory domain.
#[derive(Debug)]
pub struct TcpMd {
    attr: MdAttr,
}

impl TcpMd {
    /// Opens the domain.
    pub fn new() -> Self {
        TcpMd {
            attr: MdAttr {
                flags: MdFlags::ALLOC | MdFlags::REG | MdFlags::NEED_RKEY,
                max_alloc: isize::MAX as usize,
                max_reg: isize::MAX as usize,
                rkey_packed_size: PackedRkey::LEN,
                reg_cost: (50e-9, 0.0),
            },
        }
    }
}

impl Default for TcpMd {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryDomain for TcpMd {
    fn name(&self) -> &'static str {
        "tcp"
    }
    fn attr(&self) -> &MdAttr {
        &self.attr
    }
    fn mem_alloc(&self, len: usize) -> Result<MemHandle> {
        let layout = Layout::from_size_align(len.max(1), 64)
            .map_err(|e| Error::InvalidParam(format!("mem_alloc of {len} bytes: {e}")))?;
        // SAFETY: layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let p = NonNull::new(p)
            .ok_or_else(|| Error::NoMemory(format!("mem_alloc of {len} bytes failed")))?;
        let key = match RegTable::global().register(p.as_ptr() as u64, len as u64) {
            Ok(k) => k,
            Err(e) => {
                // SAFETY: allocated just above with this layout.
                unsafe { std::alloc::dealloc(p.as_ptr(), layout) };
                return Err(e);
            }
        };
        let owner = TcpMem {
            key,
            alloc: Some((p, layout)),
        };
        // SAFETY: `owner` owns the allocation, which lives as long as the handle.
        Ok(unsafe { MemHandle::new(p, len, "tcp", Some(Box::new(owner))) })
    }
    unsafe fn mem_reg(&self, addr: NonNull<u8>, len: usize) -> Result<MemHandle> {
        let key = RegTable::global().register(addr.as_ptr() as u64, len as u64)?;
        let owner = TcpMem { key, alloc: None };
        // SAFETY: the caller guarantees the range stays valid while the handle lives.
        Ok(unsafe { MemHandle::new(addr, len, "tcp", Some(Box::new(owner))) })
    }
    fn rkey_pack(&self, memh: &MemHandle, out: &mut Vec<u8>) -> Result<()> {
        let key = reg_key(memh).ok_or_else(|| {
            Error::InvalidParam(format!(
                "{memh:?} was not registered with the tcp memory domain"
            ))
        })?;
        PackedRkey {
            base: memh.addr() as u64,
            len: memh.len() as u64,
            key,
        }
        .encode(out);
        Ok(())
    }
    fn rkey_unpack(&self, packed: &[u8]) -> Result<RemoteKey> {
        let p = PackedRkey::decode(packed)?;
        Ok(RemoteKey::unmapped(p.base, p.len, p.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rkey_round_trip_and_bad_input() {
        let md = TcpMd::new();
        let m = md.mem_alloc(100).unwrap();
        let mut v = Vec::new();
        md.rkey_pack(&m, &mut v).unwrap();
        assert_eq!(v.len(), PackedRkey::LEN);
        let rk = md.rkey_unpack(&v).unwrap();
        assert_eq!(rk.remote_base, m.addr() as u64);
        assert_eq!(rk.len, 100);
        assert!(matches!(md.rkey_unpack(&v[..31]), Err(Error::Wire(_))));
        let mut bad = v.clone();
        bad[0] = 7;
        assert!(matches!(md.rkey_unpack(&bad), Err(Error::Wire(_))));
    }

    #[test]
    fn table_checks_key_and_range() {
        let md = TcpMd::new();
        let m = md.mem_alloc(64).unwrap();
        let key = reg_key(&m).unwrap();
        let t = RegTable::global();
        let base = m.addr() as u64;
        assert!(t.lookup(key, base, 64).is_ok());
        assert!(t.lookup(key, base + 8, 56).is_ok());
        assert!(matches!(
            t.lookup(key, base + 8, 57),
            Err(Error::RemoteAccess(_))
        ));
        assert!(matches!(
            t.lookup(key, base - 1, 1),
            Err(Error::RemoteAccess(_))
        ));
        assert!(matches!(
            t.lookup(key ^ (1 << 40), base, 1),
            Err(Error::RemoteAccess(_))
        ));
        assert!(matches!(t.lookup(0, base, 1), Err(Error::RemoteAccess(_))));
        assert!(matches!(
            t.lookup(u64::MAX - 1, base, 1),
            Err(Error::RemoteAccess(_))
        ));
        drop(m);
        assert!(matches!(
            t.lookup(key, base, 1),
            Err(Error::RemoteAccess(_))
        ));
    }

    #[test]
    fn mem_reg_registers_caller_memory() {
        let md = TcpMd::new();
        let mut buf = vec![0u8; 32];
        let p = NonNull::new(buf.as_mut_ptr()).unwrap();
        // SAFETY: buf outlives the handle (dropped at the end of the test, after m).
        let m = unsafe { md.mem_reg(p, 32) }.unwrap();
        let key = reg_key(&m).unwrap();
        assert!(RegTable::global()
            .lookup(key, buf.as_ptr() as u64, 32)
            .is_ok());
        drop(m);
        assert!(RegTable::global()
            .lookup(key, buf.as_ptr() as u64, 32)
            .is_err());
    }
}
