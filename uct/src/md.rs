//! Memory domains: registration, allocation of shareable memory, and remote keys.

use crate::caps::MdAttr;
use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
use ucs::{Error, Result};

/// A registered or allocated memory region. Cloning is cheap (reference count); the region stays
/// valid while any clone lives, so a transport that finishes an operation after the call returned
/// keeps a clone until then.
#[derive(Clone)]
pub struct MemHandle(Arc<MemRegion>);

/// The region behind a [`MemHandle`].
pub struct MemRegion {
    addr: NonNull<u8>,
    len: usize,
    md_name: &'static str,
    /// Transport-private data (a shared segment, a verbs MR…), dropped with the region.
    tl_data: Option<Box<dyn Any + Send + Sync>>,
}

// SAFETY: the region is plain memory; rucx never hands out references into it without `unsafe`,
// and accesses through `read`/`write` are copies. Transports keep their own data Send + Sync.
unsafe impl Send for MemRegion {}
// SAFETY: as above.
unsafe impl Sync for MemRegion {}

impl fmt::Debug for MemHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MemHandle({}: {:p}+{})",
            self.0.md_name, self.0.addr, self.0.len
        )
    }
}

impl MemHandle {
    /// Wraps a region for a memory domain.
    ///
    /// # Safety
    /// `addr..addr+len` must be valid for reads and writes for as long as the handle (any clone)
    /// lives; `tl_data` may own that memory, in which case this holds by construction.
    pub unsafe fn new(
        addr: NonNull<u8>,
        len: usize,
        md_name: &'static str,
        tl_data: Option<Box<dyn Any + Send + Sync>>,
    ) -> Self {
        MemHandle(Arc::new(MemRegion {
            addr,
            len,
            md_name,
            tl_data,
        }))
    }
    /// Start address in this process.
    pub fn addr(&self) -> *mut u8 {
        self.0.addr.as_ptr()
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len
    }
    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
    /// Name of the memory domain that made it.
    pub fn md_name(&self) -> &'static str {
        self.0.md_name
    }
    /// The transport's private data, downcast.
    pub fn tl_data<T: 'static>(&self) -> Option<&T> {
        self.0.tl_data.as_ref()?.downcast_ref()
    }
    /// Checks that `offset..offset+len` lies inside the region and returns its address.
    pub fn range(&self, offset: usize, len: usize) -> Result<*mut u8> {
        match offset.checked_add(len) {
            Some(end) if end <= self.0.len => Ok(self.0.addr.as_ptr().wrapping_add(offset)),
            _ => Err(Error::InvalidParam(format!(
                "range {offset}+{len} is outside the {}-byte region",
                self.0.len
            ))),
        }
    }
    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let p = self.range(offset, out.len())?;
        // SAFETY: range() checked bounds; the region is valid while self lives.
        unsafe { std::ptr::copy(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let p = self.range(offset, data.len())?;
        // SAFETY: range() checked bounds; the region is valid while self lives.
        unsafe { std::ptr::copy(data.as_ptr(), p, data.len()) };
        Ok(())
    }
    /// The region as a slice.
    ///
    /// # Safety
    /// No one (this process or a peer) may write the region while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller guarantees no concurrent writes; bounds are the region's.
        unsafe { std::slice::from_raw_parts(self.addr(), self.len()) }
    }
    /// True when both handles are the same registration.
    pub fn same(&self, other: &MemHandle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One piece of a zero-copy operation: a range of a registered region.
#[derive(Debug, Clone, Copy)]
pub struct Iov<'a> {
    memh: &'a MemHandle,
    offset: usize,
    len: usize,
}

impl<'a> Iov<'a> {
    /// A range of `memh`; fails if it is not inside the region.
    pub fn new(memh: &'a MemHandle, offset: usize, len: usize) -> Result<Self> {
        memh.range(offset, len)?;
        Ok(Iov { memh, offset, len })
    }
    /// The whole region.
    pub fn whole(memh: &'a MemHandle) -> Self {
        Iov {
            memh,
            offset: 0,
            len: memh.len(),
        }
    }
    /// The region this piece belongs to.
    pub fn memh(&self) -> &'a MemHandle {
        self.memh
    }
    /// Offset inside the region.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for an empty piece.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Start address of the piece (valid while the memh lives).
    pub fn ptr(&self) -> *mut u8 {
        self.memh.addr().wrapping_add(self.offset)
    }
    /// Total length of a list of pieces.
    pub fn total_len(iov: &[Iov<'_>]) -> usize {
        iov.iter().map(|i| i.len).sum()
    }
}

/// A peer's memory region, unpacked from its packed rkey, ready for put/get/atomics.
#[derive(Clone)]
pub struct RemoteKey {
    /// Start of the region in the owner's address space.
    pub remote_base: u64,
    /// Length of the region.
    pub len: u64,
    /// Where the region is mapped in this process, when the transport maps it (shared memory,
    /// self); loads and stores go straight there.
    mapped: Option<NonNull<u8>>,
    /// A transport value: a verbs rkey, a cma pid, a tcp key id.
    pub tl_value: u64,
    /// Bytes right after the region's end, in this process's mapping, that may be written
    /// without reaching anyone's data (a mapped segment's page padding and its private
    /// scratch tail); 0 unless the transport says so (see [`RemoteKey::with_tail_room`]).
    tail_room: u64,
    /// Keeps a mapping (or other transport state) alive while the key lives.
    _owner: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: `mapped` points into a mapping kept alive by `_owner` (or, for self, by the local
// registration the key was packed from); accesses go through bounds-checked copies and atomics.
unsafe impl Send for RemoteKey {}
// SAFETY: as above.
unsafe impl Sync for RemoteKey {}

impl fmt::Debug for RemoteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RemoteKey({:#x}+{}, mapped: {:?})",
            self.remote_base, self.len, self.mapped
        )
    }
}

impl RemoteKey {
    /// A key for a region reached through the transport (no local mapping).
    pub fn unmapped(remote_base: u64, len: u64, tl_value: u64) -> Self {
        RemoteKey {
            remote_base,
            len,
            mapped: None,
            tl_value,
            tail_room: 0,
            _owner: None,
        }
    }
    /// A key for a region mapped at `mapped` in this process, kept alive by `owner`.
    ///
    /// # Safety
    /// `mapped..mapped+len` must stay valid for reads, writes and atomics while `owner` lives
    /// (or, with `owner == None`, for as long as the key is used).
    pub unsafe fn mapped(
        remote_base: u64,
        len: u64,
        mapped: NonNull<u8>,
        tl_value: u64,
        owner: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Self {
        RemoteKey {
            remote_base,
            len,
            mapped: Some(mapped),
            tl_value,
            tail_room: 0,
            _owner: owner,
        }
    }
    /// The key with `tail_room` bytes after its region's end that writes may land on
    /// harmlessly (see [`RemoteKey::tail_room`]).
    ///
    /// # Safety
    /// `mapped+len..mapped+len+tail_room` must stay valid for writes while the key's owner
    /// lives, and hold nothing anyone reads.
    pub unsafe fn with_tail_room(mut self, tail_room: u64) -> Self {
        self.tail_room = tail_room;
        self
    }
    /// Bytes right after the region's end, in this process's mapping, that may be written
    /// without reaching anyone's data: a pack callback that runs past the region lands there.
    #[inline]
    pub fn tail_room(&self) -> u64 {
        self.tail_room
    }
    /// Checks `remote_addr..remote_addr+len` against the region; gives the offset inside it.
    /// Inlined: every remote access on a mapped key (put/get short over shared memory) starts
    /// here, and the error is built out of line.
    #[inline]
    pub fn check(&self, remote_addr: u64, len: usize) -> Result<u64> {
        let off = remote_addr.wrapping_sub(self.remote_base);
        if remote_addr < self.remote_base
            || off.checked_add(len as u64).is_none_or(|end| end > self.len)
        {
            return Err(self.out_of_bounds(remote_addr, len));
        }
        Ok(off)
    }
    #[cold]
    #[inline(never)]
    fn out_of_bounds(&self, remote_addr: u64, len: usize) -> Error {
        Error::RemoteAccess(format!(
            "{len} bytes at {remote_addr:#x} are outside the remote region {:#x}+{}",
            self.remote_base, self.len
        ))
    }
    /// The local address of `remote_addr..+len` for a mapped key, bounds-checked.
    #[inline]
    pub fn local_ptr(&self, remote_addr: u64, len: usize) -> Result<*mut u8> {
        let off = self.check(remote_addr, len)?;
        match self.mapped {
            Some(p) => Ok(p.as_ptr().wrapping_add(off as usize)),
            None => Err(not_mapped()),
        }
    }
    /// True when the region is mapped in this process.
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }
}

/// The error of [`RemoteKey::local_ptr`] on a key not mapped in this process.
#[cold]
#[inline(never)]
fn not_mapped() -> Error {
    Error::Unsupported("this remote key is not mapped in this process".into())
}

/// A memory domain (`uct_md_h`).
pub trait MemoryDomain {
    /// The domain's name (`self`, `posix`, `sysv`, `cma`, `tcp`, `rxe0`…).
    fn name(&self) -> &'static str;
    /// What the domain can do.
    fn attr(&self) -> &MdAttr;
    /// Allocates `len` bytes that peers can reach (MdFlags::ALLOC). Zero-filled.
    fn mem_alloc(&self, len: usize) -> Result<MemHandle> {
        let _ = len;
        Err(Error::Unsupported(format!(
            "memory domain {} cannot allocate memory",
            self.name()
        )))
    }
    /// Registers existing memory (MdFlags::REG).
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid, and must not be freed or unmapped, while the returned
    /// handle (any clone) lives.
    unsafe fn mem_reg(&self, addr: NonNull<u8>, len: usize) -> Result<MemHandle>;
    /// Appends the packed remote key of `memh` to `out`.
    fn rkey_pack(&self, memh: &MemHandle, out: &mut Vec<u8>) -> Result<()>;
    /// Unpacks a peer's packed remote key. Truncated or corrupt input gives [`Error::Wire`].
    fn rkey_unpack(&self, packed: &[u8]) -> Result<RemoteKey>;
}
