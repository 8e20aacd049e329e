//! The memory domain of the shared-memory transports: `mem_alloc` gives a shared segment, and a
//! peer's `rkey_unpack` maps it.

use super::segment::Segment;
use super::wire::{RkeyWire, SegKind};
use crate::caps::{MdAttr, MdFlags};
use crate::md::{MemHandle, MemoryDomain, RemoteKey};
use std::ptr::NonNull;
use std::sync::Arc;
use ucs::{Error, Result};

/// Memory domain `posix` or `sysv`.
pub struct MmMd {
    kind: SegKind,
    attr: MdAttr,
}

impl MmMd {
    /// The domain for segments of `kind`.
    pub fn new(kind: SegKind) -> Self {
        let max_alloc = match kind {
            SegKind::Posix => 1 << 40,
            SegKind::Sysv => std::fs::read_to_string("/proc/sys/kernel/shmmax")
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map_or(1 << 30, |m| m.min(1 << 40) as usize),
        };
        MmMd {
            kind,
            attr: MdAttr {
                flags: MdFlags::ALLOC | MdFlags::NEED_RKEY | MdFlags::RKEY_PTR,
                max_alloc,
                max_reg: 0,
                rkey_packed_size: RkeyWire::LEN,
                reg_cost: (0.0, 0.0),
            },
        }
    }
    /// Kind of segments this domain makes.
    pub fn kind(&self) -> SegKind {
        self.kind
    }
}

impl MemoryDomain for MmMd {
    fn name(&self) -> &'static str {
        self.kind.name()
    }
    fn attr(&self) -> &MdAttr {
        &self.attr
    }
    fn mem_alloc(&self, len: usize) -> Result<MemHandle> {
        if len == 0 || len > self.attr.max_alloc {
            return Err(Error::InvalidParam(format!(
                "{} mem_alloc of {len} bytes: accepted 1..={}",
                self.name(),
                self.attr.max_alloc
            )));
        }
        let seg = Segment::create(self.kind, len)?;
        let base = seg.base();
        // SAFETY: the segment owns the mapping of at least `len` bytes and is kept as the
        // handle's private data, so the memory lives as long as the handle.
        Ok(unsafe { MemHandle::new(base, len, self.name(), Some(Box::new(seg))) })
    }
    /// Registers existing memory for local use only: zero-copy sources and posted tag
    /// receives (a peer's interface reads a tag rendezvous from it with `process_vm_readv`). It
    /// has no remote key (`rkey_pack` refuses it), so peers cannot put, get or do atomics on it,
    /// and the domain does not advertise `REG`.
    unsafe fn mem_reg(&self, addr: NonNull<u8>, len: usize) -> Result<MemHandle> {
        if len == 0 {
            return Err(Error::InvalidParam(format!(
                "{} mem_reg of 0 bytes",
                self.name()
            )));
        }
        // SAFETY: the caller guarantees the range stays valid while the handle lives.
        Ok(unsafe { MemHandle::new(addr, len, self.name(), None) })
    }
    fn rkey_pack(&self, memh: &MemHandle, out: &mut Vec<u8>) -> Result<()> {
        let seg = memh
            .tl_data::<Segment>()
            .filter(|_| memh.md_name() == self.name())
            .ok_or_else(|| {
                Error::InvalidParam(format!(
                    "{memh:?} was not allocated by memory domain {} (registered memory has no \
                     remote key: allocate with mem_alloc, or use cma)",
                    self.name()
                ))
            })?;
        RkeyWire {
            seg: seg.seg_ref(),
            base: memh.addr() as u64,
            len: memh.len() as u64,
            offset: memh.addr() as u64 - seg.base().as_ptr() as u64,
        }
        .encode(out);
        Ok(())
    }
    fn rkey_unpack(&self, packed: &[u8]) -> Result<RemoteKey> {
        let k = RkeyWire::decode(packed)?;
        if k.seg.kind != self.kind {
            return Err(Error::Wire(format!(
                "remote key of a {} segment given to memory domain {}",
                k.seg.kind.name(),
                self.name()
            )));
        }
        let seg = Arc::new(Segment::attach(k.seg)?);
        // decode() checked offset + len <= segment length, which attach() mapped.
        let mapped = NonNull::new(seg.base().as_ptr().wrapping_add(k.offset as usize))
            .expect("inside a mapping");
        let tail = seg.scratch_after(k.offset, k.len);
        // SAFETY: the mapping covers offset..offset+len and is kept alive by the key's owner;
        // `tail` bytes after the region are its segment's padding and scratch tail.
        Ok(unsafe { RemoteKey::mapped(k.base, k.len, mapped, 0, Some(seg)).with_tail_room(tail) })
    }
}
