//! The self memory domain: zeroed allocations, registration of caller memory, and remote keys
//! that map straight back to local memory (valid only inside the process that packed them).
//!
//! Every live region is listed in a process-wide table by a unique id; `rkey_unpack` accepts a
//! key only if its region is still registered with exactly the packed base and length, so a
//! corrupt or stale key gives an error instead of a pointer into arbitrary memory.

use super::wire::PackedRkey;
use crate::caps::{MdAttr, MdFlags};
use crate::md::{MemHandle, MemoryDomain, RemoteKey};
use std::alloc::Layout;
use std::any::Any;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use ucs::{Error, Result};

/// Memory-domain name.
pub const MD_NAME: &str = "self";

/// Alignment of `mem_alloc` memory (a cache line, so every atomic size is aligned at offset 0).
const ALLOC_ALIGN: usize = 64;

static NEXT_REGION: AtomicU64 = AtomicU64::new(1);
static REGIONS: Mutex<BTreeMap<u64, Weak<Region>>> = Mutex::new(BTreeMap::new());

/// A registered or allocated region, shared by its [`MemHandle`] and by remote keys unpacked from
/// it. An allocation is freed when the last of them is dropped.
struct Region {
    id: u64,
    base: usize,
    len: usize,
    /// The allocation owned by this region (mem_alloc), or None (mem_reg of caller memory).
    alloc: Option<Layout>,
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(layout) = self.alloc {
            // SAFETY: `base` was returned by `alloc_zeroed(layout)` in `mem_alloc` and is freed
            // only here, once, when the last owner drops.
            unsafe { std::alloc::dealloc(self.base as *mut u8, layout) };
        }
    }
}

/// Stored in the handle's transport data: unlists the region when the handle is dropped.
struct Registration(Arc<Region>);

impl Drop for Registration {
    fn drop(&mut self) {
        let mut map = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&self.0.id);
    }
}

fn register(region: Region) -> Arc<Region> {
    let region = Arc::new(region);
    let mut map = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
    map.insert(region.id, Arc::downgrade(&region));
    region
}

/// The self memory domain.
#[derive(Debug)]
pub struct SelfMd {
    attr: MdAttr,
}

impl SelfMd {
    /// Opens the domain.
    pub fn new() -> Self {
        SelfMd {
            attr: MdAttr {
                flags: MdFlags::ALLOC | MdFlags::REG | MdFlags::NEED_RKEY | MdFlags::RKEY_PTR,
                max_alloc: isize::MAX as usize - ALLOC_ALIGN,
                max_reg: isize::MAX as usize,
                rkey_packed_size: PackedRkey::LEN,
                reg_cost: (50e-9, 0.0),
            },
        }
    }
}

impl Default for SelfMd {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryDomain for SelfMd {
    fn name(&self) -> &'static str {
        MD_NAME
    }

    fn attr(&self) -> &MdAttr {
        &self.attr
    }

    fn mem_alloc(&self, len: usize) -> Result<MemHandle> {
        let layout = Layout::from_size_align(len.max(1), ALLOC_ALIGN)
            .map_err(|_| Error::NoMemory(format!("cannot allocate {len} bytes: size too large")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let addr = NonNull::new(p)
            .ok_or_else(|| Error::NoMemory(format!("allocation of {len} bytes failed")))?;
        let region = register(Region {
            id: NEXT_REGION.fetch_add(1, Ordering::Relaxed),
            base: addr.as_ptr() as usize,
            len,
            alloc: Some(layout),
        });
        let data: Box<dyn Any + Send + Sync> = Box::new(Registration(region));
        // SAFETY: the memory is owned by the region, which the handle keeps alive through
        // `data`; it is valid for reads and writes of `len` bytes.
        Ok(unsafe { MemHandle::new(addr, len, MD_NAME, Some(data)) })
    }

    unsafe fn mem_reg(&self, addr: NonNull<u8>, len: usize) -> Result<MemHandle> {
        if (addr.as_ptr() as usize).checked_add(len).is_none() {
            return Err(Error::InvalidParam(format!(
                "region {:p}+{len} wraps the address space",
                addr
            )));
        }
        let region = register(Region {
            id: NEXT_REGION.fetch_add(1, Ordering::Relaxed),
            base: addr.as_ptr() as usize,
            len,
            alloc: None,
        });
        let data: Box<dyn Any + Send + Sync> = Box::new(Registration(region));
        // SAFETY: the caller guarantees the memory stays valid while the handle lives.
        Ok(unsafe { MemHandle::new(addr, len, MD_NAME, Some(data)) })
    }

    fn rkey_pack(&self, memh: &MemHandle, out: &mut Vec<u8>) -> Result<()> {
        let reg = memh.tl_data::<Registration>().ok_or_else(|| {
            Error::InvalidParam(format!(
                "memory handle from memory domain '{}' cannot be packed by the self domain",
                memh.md_name()
            ))
        })?;
        let key = PackedRkey {
            pid: std::process::id(),
            region_id: reg.0.id,
            base: reg.0.base as u64,
            len: reg.0.len as u64,
        };
        out.extend_from_slice(&key.encode());
        Ok(())
    }

    fn rkey_unpack(&self, packed: &[u8]) -> Result<RemoteKey> {
        let key = PackedRkey::decode(packed)?;
        let me = std::process::id();
        if key.pid != me {
            return Err(Error::Unreachable(format!(
                "self remote key was packed by process {}, but self keys work only inside the \
                 process that packed them (this is process {me}); use a shared-memory or network \
                 transport between processes",
                key.pid
            )));
        }
        let region = {
            let map = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
            map.get(&key.region_id).and_then(Weak::upgrade)
        };
        let region = region.ok_or_else(|| {
            Error::RemoteAccess(format!(
                "self remote key names region #{} which is not registered (deregistered, or a \
                 corrupt key)",
                key.region_id
            ))
        })?;
        if region.base as u64 != key.base || region.len as u64 != key.len {
            return Err(Error::Wire(format!(
                "self remote key for region #{} says {:#x}+{}, but the region is {:#x}+{}",
                key.region_id, key.base, key.len, region.base, region.len
            )));
        }
        let mapped = NonNull::new(region.base as *mut u8)
            .ok_or_else(|| Error::Wire("self remote key with a null base".into()))?;
        let owner: Arc<dyn Any + Send + Sync> = region;
        // SAFETY: the region is registered in this process. An allocated region stays valid
        // while `owner` lives; a registered region stays valid while its handle lives (the
        // `mem_reg` contract, which extends to keys packed from it).
        Ok(unsafe { RemoteKey::mapped(key.base, key.len, mapped, key.region_id, Some(owner)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_is_zeroed_and_aligned() {
        let md = SelfMd::new();
        let h = md.mem_alloc(1000).unwrap();
        assert_eq!(h.len(), 1000);
        assert_eq!(h.addr() as usize % ALLOC_ALIGN, 0);
        // SAFETY: nobody else writes the fresh region.
        assert!(unsafe { h.as_slice() }.iter().all(|&b| b == 0));
        let h0 = md.mem_alloc(0).unwrap();
        assert!(h0.is_empty());
    }

    #[test]
    fn rkey_maps_back_to_local_memory() {
        let md = SelfMd::new();
        let h = md.mem_alloc(64).unwrap();
        h.write(8, b"hello").unwrap();
        let mut packed = Vec::new();
        md.rkey_pack(&h, &mut packed).unwrap();
        assert_eq!(packed.len(), md.attr().rkey_packed_size);
        let rk = md.rkey_unpack(&packed).unwrap();
        assert!(rk.is_mapped());
        assert_eq!(rk.remote_base, h.addr() as u64);
        assert_eq!(
            rk.local_ptr(h.addr() as u64 + 8, 5).unwrap(),
            h.addr().wrapping_add(8)
        );
        assert!(matches!(
            rk.local_ptr(h.addr() as u64 + 60, 5),
            Err(Error::RemoteAccess(_))
        ));
    }

    #[test]
    fn alloc_outlives_handle_through_key() {
        let md = SelfMd::new();
        let h = md.mem_alloc(16).unwrap();
        h.write(0, &[7; 16]).unwrap();
        let mut packed = Vec::new();
        md.rkey_pack(&h, &mut packed).unwrap();
        let rk = md.rkey_unpack(&packed).unwrap();
        drop(h);
        // The key keeps the allocation alive: reading it is still sound.
        let p = rk.local_ptr(rk.remote_base, 16).unwrap();
        // SAFETY: the key's owner keeps the 16 bytes allocated.
        assert_eq!(unsafe { std::slice::from_raw_parts(p, 16) }, &[7; 16]);
        // But a new unpack of the stale key fails: the region is deregistered.
        assert!(matches!(
            md.rkey_unpack(&packed),
            Err(Error::RemoteAccess(_))
        ));
    }

    #[test]
    fn registered_memory_and_bad_keys() {
        let md = SelfMd::new();
        let mut buf = vec![0u8; 128];
        let addr = NonNull::new(buf.as_mut_ptr()).unwrap();
        // SAFETY: `buf` outlives the handle.
        let h = unsafe { md.mem_reg(addr, 128) }.unwrap();
        let mut packed = Vec::new();
        md.rkey_pack(&h, &mut packed).unwrap();
        assert!(md.rkey_unpack(&packed).is_ok());

        // Foreign pid.
        let mut foreign = PackedRkey::decode(&packed).unwrap();
        foreign.pid = foreign.pid.wrapping_add(1);
        assert!(matches!(
            md.rkey_unpack(&foreign.encode()),
            Err(Error::Unreachable(_))
        ));
        // Wrong length for a real region.
        let mut longer = PackedRkey::decode(&packed).unwrap();
        longer.len += 1;
        assert!(matches!(
            md.rkey_unpack(&longer.encode()),
            Err(Error::Wire(_))
        ));
        // Unknown region.
        let mut unknown = PackedRkey::decode(&packed).unwrap();
        unknown.region_id = u64::MAX;
        assert!(md.rkey_unpack(&unknown.encode()).is_err());
        // Every single-byte corruption and every truncation is an error or a key equal to the
        // original (never a key to other memory).
        for i in 0..packed.len() {
            let mut bad = packed.clone();
            bad[i] ^= 0x5a;
            assert!(
                md.rkey_unpack(&bad).is_err(),
                "byte {i} flipped was accepted"
            );
        }
        for n in 0..packed.len() {
            assert!(md.rkey_unpack(&packed[..n]).is_err());
        }
        drop(h);
        assert!(md.rkey_unpack(&packed).is_err());
    }

    #[test]
    fn pack_rejects_foreign_handle() {
        let md = SelfMd::new();
        let mut x = [0u8; 8];
        // SAFETY: `x` outlives the handle; the handle has no self registration data.
        let foreign =
            unsafe { MemHandle::new(NonNull::new(x.as_mut_ptr()).unwrap(), 8, "other", None) };
        let mut out = Vec::new();
        assert!(matches!(
            md.rkey_pack(&foreign, &mut out),
            Err(Error::InvalidParam(_))
        ));
        assert!(out.is_empty());
    }
}
