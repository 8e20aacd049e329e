//! Memory for remote access: [`MemMap`] (allocated and registered with every memory domain that
//! can register), the packed remote-key bundle peers unpack, and the unpacked [`Rkey`].

pub(crate) mod mapped;
pub use mapped::copy;
pub(crate) mod ops;
pub(crate) mod raw_mem;
pub(crate) mod shared_file;

use std::alloc::Layout;
use std::cell::RefCell;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Arc;
use ucs::{Error, Result};
use uct::{MemHandle, RemoteKey};

/// Live mapped regions of a worker `(start, len)`, for checking emulated atomics.
pub(crate) type Regions = Rc<RefCell<Vec<(usize, usize)>>>;

const ALIGN: usize = 64;

/// Zeroed heap memory of a [`MemMap`], freed when the last holder drops it: the mapping, or a
/// send that reads it in place after the mapping was dropped.
pub(crate) struct HeapBlock {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the block is plain memory owned by this value; it is only read or written through
// raw pointers by code that documents why the access is valid.
unsafe impl Send for HeapBlock {}
// SAFETY: as above.
unsafe impl Sync for HeapBlock {}

impl Drop for HeapBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `MemMap::heap` with this layout, freed only here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// What keeps the memory of a [`MemMap`] alive while an operation reads it in place.
#[derive(Clone)]
pub(crate) enum Keep {
    /// A shared segment's memory handle (posix/sysv `mem_alloc`).
    Segment(MemHandle),
    /// Heap memory (held, never read through this value).
    Heap(#[allow(dead_code)] Arc<HeapBlock>),
}

impl Keep {
    /// The handle transport `tl` reads the memory through: the shared segment itself, or the
    /// heap block's registration with `tl` (`None` if it has none).
    pub(crate) fn handle_for(&self, map: &MemMap, tl: &str) -> Option<MemHandle> {
        match self {
            Keep::Segment(seg) => Some(seg.clone()),
            Keep::Heap(_) => map.reg_of(tl).cloned(),
        }
    }
}

/// Where the memory of a [`MemMap`] comes from.
pub(crate) enum Backing {
    /// Zeroed heap memory (no shared-memory transport could allocate).
    Heap(Arc<HeapBlock>),
    /// A shared segment from a memory domain's `mem_alloc`; peers on this host map it.
    Shared {
        /// Keeps the segment mapped for as long as the mapping lives.
        _segment: MemHandle,
    },
    /// The user's buffer, owned by the mapping while it lives.
    User(Vec<u8>),
    /// Caller memory the mapping does not own (`Worker::mem_map_raw`): valid while it lives,
    /// by the caller's promise.
    Raw,
}

/// Memory mapped for remote access by a worker's peers (`ucp_mem_map`). Reads and writes go
/// through copies, because peers may access it at any time.
///
/// Allocated mappings come from a shared-memory domain when the worker has one (peers on this
/// host then map the segment and put/get/atomics are plain loads, stores and CPU atomics);
/// mappings of user memory are registered only (peers reach them through cma or the network,
/// or directly when the memory is a shared file mapping their process maps too).
pub struct MemMap {
    ptr: NonNull<u8>,
    len: usize,
    /// Registrations per transport: (tl name, handle). Dropped before the memory.
    regs: Vec<(&'static str, MemHandle)>,
    packed: Vec<u8>,
    regions: Regions,
    backing: Backing,
}

impl std::fmt::Debug for MemMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemMap({:p}+{})", self.ptr, self.len)
    }
}

impl MemMap {
    /// Heap memory of `len` zeroed bytes, for when no shared-memory domain can allocate.
    pub(crate) fn heap(len: usize) -> Result<(NonNull<u8>, Backing)> {
        if len == 0 {
            return Err(Error::InvalidParam("cannot map 0 bytes".into()));
        }
        let layout = Layout::from_size_align(len, ALIGN)
            .map_err(|e| Error::InvalidParam(format!("cannot map {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| Error::NoMemory(format!("allocating {len} bytes to map")))?;
        Ok((ptr, Backing::Heap(Arc::new(HeapBlock { ptr, layout }))))
    }

    /// Wraps `len` bytes at `ptr` held by `backing`; `keys` are the registrations and packed
    /// remote keys, one per transport, in the order peers should prefer them.
    pub(crate) fn new(
        ptr: NonNull<u8>,
        len: usize,
        backing: Backing,
        regions: Regions,
        keys: Vec<(&'static str, MemHandle, Vec<u8>)>,
    ) -> Result<Self> {
        let mut regs = Vec::with_capacity(keys.len());
        let mut entries = Vec::with_capacity(keys.len());
        for (tl, m, packed) in keys {
            entries.push((tl.to_string(), packed));
            regs.push((tl, m));
        }
        // Build the value first so that an encoding error still frees the memory.
        let mut map = MemMap {
            ptr,
            len,
            regs,
            packed: Vec::new(),
            regions,
            backing,
        };
        map.packed = RkeyBundle { entries }.encode()?;
        map.regions.borrow_mut().push((ptr.as_ptr() as usize, len));
        Ok(map)
    }
    /// Adds bundle entry `name` (a key that needs no registration) to the packed remote keys.
    pub(crate) fn add_key(&mut self, name: &str, key: Vec<u8>) -> Result<()> {
        let mut b = RkeyBundle::decode(&self.packed)?;
        b.entries.push((name.to_owned(), key));
        self.packed = b.encode()?;
        Ok(())
    }
    /// Start address (what peers pass as `remote_addr`).
    pub fn address(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Never empty (mapping 0 bytes is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The packed remote keys a peer unpacks with `Worker::rkey_unpack`.
    pub fn rkey_packed(&self) -> &[u8] {
        &self.packed
    }
    /// Transports the memory is registered with (or allocated from).
    pub fn transports(&self) -> Vec<&'static str> {
        self.regs.iter().map(|r| r.0).collect()
    }
    /// True when the memory is a shared segment peers on this host map directly.
    pub fn is_shared(&self) -> bool {
        matches!(self.backing, Backing::Shared { .. })
    }
    /// Gives back the user buffer of a mapping made by `Worker::mem_map_vec` (with whatever
    /// peers wrote into it); `None` for allocated mappings.
    pub fn into_vec(mut self) -> Option<Vec<u8>> {
        match std::mem::replace(&mut self.backing, Backing::User(Vec::new())) {
            Backing::User(v) => {
                // Unregister before the buffer leaves; drop then frees nothing.
                self.regs.clear();
                Some(v)
            }
            other => {
                self.backing = other;
                None
            }
        }
    }
    /// What keeps the memory alive for a send that reads it in place: the shared segment or
    /// the heap block; `None` for user buffers (`mem_map_vec` can give them back).
    pub(crate) fn keep_alive(&self) -> Option<Keep> {
        match &self.backing {
            Backing::Shared { _segment } => Some(Keep::Segment(_segment.clone())),
            Backing::Heap(b) => Some(Keep::Heap(b.clone())),
            Backing::User(_) | Backing::Raw => None,
        }
    }

    /// The registration of the memory with transport `tl`, if it has one.
    pub(crate) fn reg_of(&self, tl: &str) -> Option<&MemHandle> {
        self.regs.iter().find(|r| r.0 == tl).map(|r| &r.1)
    }

    /// Address of `offset` after checking that `offset..offset + n` lies in the mapping and
    /// is not empty; a typed error otherwise.
    /// Inlined into the mapped send's fast path; the errors are made out of line.
    #[inline]
    pub(crate) fn range(&self, offset: usize, n: usize) -> Result<NonNull<u8>> {
        // 1 <= n <= len - offset, without overflow.
        if offset <= self.len && n.wrapping_sub(1) < self.len - offset {
            // SAFETY: `offset < len` (n >= 1), so the pointer stays inside the mapping.
            return Ok(unsafe { self.ptr.add(offset) });
        }
        Err(self.range_error(offset, n))
    }

    /// The error of [`MemMap::range`].
    #[cold]
    fn range_error(&self, offset: usize, n: usize) -> Error {
        if n == 0 {
            return Error::InvalidParam("cannot send 0 bytes of a mapping".into());
        }
        match self.check(offset, n) {
            Err(e) => e,
            Ok(_) => Error::InvalidParam(format!("range {offset}+{n} of the mapping")),
        }
    }

    fn check(&self, offset: usize, n: usize) -> Result<*mut u8> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(self.ptr.as_ptr().wrapping_add(offset)),
            _ => Err(Error::InvalidParam(format!(
                "range {offset}+{n} is outside the {}-byte mapping",
                self.len
            ))),
        }
    }
    /// Copies bytes out of the mapping.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let p = self.check(offset, out.len())?;
        // SAFETY: bounds checked; the memory lives as long as self.
        unsafe { std::ptr::copy(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    /// Copies bytes into the mapping.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let p = self.check(offset, data.len())?;
        // SAFETY: bounds checked; the memory lives as long as self.
        unsafe { std::ptr::copy(data.as_ptr(), p, data.len()) };
        Ok(())
    }
}

impl Drop for MemMap {
    fn drop(&mut self) {
        let start = self.ptr.as_ptr() as usize;
        self.regions.borrow_mut().retain(|&(s, _)| s != start);
        self.regs.clear();
        // The memory (heap block, shared segment or user vector) is released when `backing`
        // drops, after this, unless a send reading it in place still holds it.
    }
}

/// Packed remote keys of one mapping, one per transport.
///
/// ```text
/// 0        1
/// +--------+--------------------------------------------------------------+
/// | n (u8) | n × ( name len u8 | name | rkey len u16 LE | packed rkey )    |
/// +--------+--------------------------------------------------------------+
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RkeyBundle {
    /// (transport name, packed rkey).
    pub entries: Vec<(String, Vec<u8>)>,
}

impl RkeyBundle {
    /// Encodes the bundle.
    pub fn encode(&self) -> Result<Vec<u8>> {
        if self.entries.len() > 255 {
            return Err(Error::InvalidParam("too many remote keys".into()));
        }
        let mut v = Vec::new();
        let mut w = ucs::codec::Writer::new(&mut v);
        w.u8(self.entries.len() as u8);
        for (t, k) in &self.entries {
            if t.len() > 255 || k.len() > u16::MAX as usize {
                return Err(Error::InvalidParam(format!("remote key of {t} too long")));
            }
            w.u8(t.len() as u8)
                .bytes(t.as_bytes())
                .u16(k.len() as u16)
                .bytes(k);
        }
        Ok(v)
    }
    /// Decodes a bundle; truncated or trailing input gives [`Error::Wire`].
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = ucs::codec::Reader::new(b, "packed remote key bundle");
        let n = r.u8("entry count")? as usize;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let nl = r.u8("transport name length")? as usize;
            let name = r.bytes(nl, "transport name")?;
            let kl = r.u16("key length")? as usize;
            let key = r.bytes(kl, "key")?;
            let name = std::str::from_utf8(name)
                .map_err(|_| r.invalid("transport name", "is not UTF-8"))?;
            entries.push((name.to_owned(), key.to_vec()));
        }
        r.finish()?;
        Ok(RkeyBundle { entries })
    }
}

/// A peer's mapping, unpacked for one endpoint's lanes: valid with that endpoint of that
/// worker only (any other gives `InvalidParam`).
#[derive(Debug, Clone)]
pub struct Rkey {
    /// The endpoint it was unpacked for (with its worker's id).
    pub(crate) ep: crate::EpHandle,
    pub(crate) rma: Option<RemoteKey>,
    pub(crate) amo: Option<RemoteKey>,
    /// The peer's shared segment (or its range of a file this process maps too) mapped in
    /// this process, with the endpoint lane (index into its transport endpoints) whose
    /// transport accesses it by loads, stores and CPU atomics.
    pub(crate) mapped: Option<(usize, RemoteKey)>,
    /// The `mapped` lane applies 32-bit and 64-bit atomics with CPU atomics.
    pub(crate) mapped_amo: [bool; 2],
    /// Where `mapped` lies in this process, for the bounds check of the direct path.
    pub(crate) direct: Option<Direct>,
}

/// A peer's mapping as mapped in this process: `len` bytes whose peer address `base` is at
/// local address `local` (kept as a number, so the key stays `Send`; the key's `mapped`
/// remote key keeps the mapping alive).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Direct {
    local: usize,
    base: u64,
    len: u64,
}

impl Direct {
    /// The window of a mapped remote key (`None` when it is not mapped here).
    pub(crate) fn of(k: &RemoteKey) -> Option<Direct> {
        let len = usize::try_from(k.len).ok()?;
        let local = k.local_ptr(k.remote_base, len).ok()? as usize;
        Some(Direct {
            local,
            base: k.remote_base,
            len: k.len,
        })
    }

    /// The local address of `n` bytes at peer address `addr`, when they lie inside the window.
    #[inline(always)]
    pub(crate) fn ptr(&self, addr: u64, n: usize) -> Option<*mut u8> {
        let off = addr.wrapping_sub(self.base);
        if addr < self.base || off > self.len || self.len - off < n as u64 {
            return None;
        }
        Some(self.local.wrapping_add(off as usize) as *mut u8)
    }
}

impl Rkey {
    /// True when the peer's memory is mapped in this process (put/get are memory copies).
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// The address in this process of `remote_addr..remote_addr + len` of the peer's mapping,
    /// when the peer's memory is mapped here (`ucp_rkey_ptr`): loads, stores and CPU atomics
    /// there reach the peer's memory. [`Error::Unreachable`] when it is not mapped here, and
    /// [`Error::RemoteAccess`] for a range outside the mapping. The pointer stays valid while
    /// this key (or a clone) lives.
    pub fn local_ptr(&self, remote_addr: u64, len: usize) -> Result<NonNull<u8>> {
        let Some((_, k)) = &self.mapped else {
            return Err(Error::Unreachable(
                "the peer's memory is not mapped in this process".into(),
            ));
        };
        let p = k.local_ptr(remote_addr, len)?;
        NonNull::new(p).ok_or_else(|| Error::RemoteAccess("mapping at null".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_round_trip_and_truncation() {
        let b = RkeyBundle {
            entries: vec![("cma".into(), vec![1, 2, 3]), ("tcp".into(), vec![])],
        };
        let e = b.encode().unwrap();
        assert_eq!(RkeyBundle::decode(&e).unwrap(), b);
        for n in 0..e.len() {
            assert!(RkeyBundle::decode(&e[..n]).is_err(), "prefix {n}");
        }
        let mut t = e.clone();
        t.push(9);
        assert!(RkeyBundle::decode(&t).is_err());
    }

    /// The direct path's window gives local addresses inside the mapping only: ranges that
    /// start before it, end after it or wrap around are refused.
    #[test]
    fn direct_window_bounds() {
        let d = Direct {
            local: 0x1000,
            base: 0x5000,
            len: 64,
        };
        assert_eq!(d.ptr(0x5000, 8), Some(0x1000 as *mut u8));
        assert_eq!(d.ptr(0x5038, 8), Some(0x1038 as *mut u8));
        assert_eq!(d.ptr(0x5000, 64), Some(0x1000 as *mut u8));
        assert_eq!(d.ptr(0x5039, 8), None, "ends past the mapping");
        assert_eq!(d.ptr(0x5000, 65), None, "longer than the mapping");
        assert_eq!(d.ptr(0x4fff, 1), None, "starts before the mapping");
        assert_eq!(d.ptr(0x5041, 0), None, "starts past the mapping");
        assert_eq!(d.ptr(u64::MAX, 8), None, "wraps around");
        assert_eq!(d.ptr(0x5008, usize::MAX), None, "length wraps around");
    }
}
