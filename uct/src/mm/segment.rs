//! Shared-memory segments: created private (mode 0600) and unlinked at once, attached by peers
//! through the creator's pid and the segment id. Nothing remains after every user has gone, even
//! after `kill -9`.
//!
//! - posix: a memfd (never visible in /dev/shm); peers open `/proc/<pid>/fd/<fd>`.
//! - sysv: `shmget(IPC_PRIVATE, 0600)` + `shmat` + `IPC_RMID` straight away; Linux lets peers
//!   `shmat` a removed segment while someone still has it attached.
//!
//! A posix segment is a shared read-write `mmap` of the whole memfd, unmapped on drop; a sysv
//! one is attached and detached with `shmat`/`shmdt`. Either way the segment keeps only its
//! address and reference (a hub holds one per peer's FIFO).

use super::wire::{SegKind, SegRef};
use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use ucs::{Error, Result};

/// Rounds up to the page size.
pub fn page_align(len: usize) -> Option<usize> {
    const PAGE: usize = 4096;
    len.checked_add(PAGE - 1).map(|l| l & !(PAGE - 1))
}

/// A mapped segment, created here or attached from a peer. Unmapped on drop.
pub struct Segment {
    base: NonNull<u8>,
    /// Where it lives; `seg.len` is the mapped length.
    seg: SegRef,
    /// The memfd (posix creator only): peers reach the segment through it.
    _fd: Option<OwnedFd>,
    /// Inode of an attached posix segment (0 otherwise): tells it from a later segment that
    /// reuses its descriptor number.
    ino: u64,
    /// Bytes of private scratch memory mapped right after an attached data segment (0
    /// otherwise): see [`SCRATCH_TAIL`].
    tail: usize,
}

/// Private, anonymous memory mapped right after every attached data segment (the peer's
/// `mem_alloc` memory), as large as the longest `put_bcopy`. A put's pack callback may write
/// up to that many bytes wherever the put starts; with this tail, what it writes past a
/// region at the end of the segment lands in this process's own scratch pages, never in the
/// peer's other memory, so the put can pack straight into the peer's memory instead of into
/// a bounce buffer and copying again (ucx_perftest `put_bw -D bcopy -s 4096` on a 4 KiB
/// region: one copy instead of two). The pages are never touched unless such a pack runs
/// long, so they cost address space only.
pub const SCRATCH_TAIL: usize = 8192;

// SAFETY: a Segment is a mapping; it hands out raw addresses only, and all access through them is
// by copies and atomics behind `unsafe` with their own justification.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Segment({:?} at {:p})", self.seg, self.base)
    }
}

fn own_pid() -> u32 {
    std::process::id()
}

impl Segment {
    /// Creates a zero-filled segment of at least `len` bytes (rounded up to pages).
    pub fn create(kind: SegKind, len: usize) -> Result<Segment> {
        let len = match page_align(len) {
            Some(l) if l > 0 => l,
            _ => return Err(Error::InvalidParam(format!("segment size {len}"))),
        };
        match kind {
            SegKind::Posix => Self::create_posix(len),
            SegKind::Sysv => Self::create_sysv(len),
        }
    }

    fn create_posix(len: usize) -> Result<Segment> {
        // SAFETY: FFI with a valid NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"rucx-mm".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os(
                "memfd_create for a posix shared-memory segment",
            ));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: FFI on our own descriptor.
        if unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } != 0 {
            return Err(Error::last_os("fchmod 0600 of a posix segment"));
        }
        // SAFETY: FFI on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(Error::NoMemory(format!(
                "cannot size a posix segment to {len} bytes: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Segment {
            base: map_fd(&fd, len, "mmap of a new posix segment")?,
            seg: SegRef {
                kind: SegKind::Posix,
                pid: own_pid(),
                id: posix_seg_id(fd.as_raw_fd()),
                len: len as u64,
            },
            _fd: Some(fd),
            ino: 0,
            tail: 0,
        })
    }

    fn create_sysv(len: usize) -> Result<Segment> {
        // SAFETY: FFI; IPC_PRIVATE always creates a new segment.
        let id = unsafe { libc::shmget(libc::IPC_PRIVATE, len, libc::IPC_CREAT | 0o600) };
        if id < 0 {
            return Err(Error::NoMemory(format!(
                "shmget of {len} bytes failed: {} (see /proc/sys/kernel/shmmax, shmall)",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: FFI; attaching the segment we just created at an address the kernel picks.
        let p = unsafe { libc::shmat(id, std::ptr::null(), 0) };
        let attach_err = std::io::Error::last_os_error();
        // Remove it at once: it lives until the last detach (our own, at the latest at exit).
        // SAFETY: FFI on our own segment id.
        unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        if p as isize == -1 {
            return Err(Error::io("shmat of a new sysv segment", attach_err));
        }
        Ok(Segment {
            base: NonNull::new(p as *mut u8).expect("shmat succeeded"),
            seg: SegRef {
                kind: SegKind::Sysv,
                pid: own_pid(),
                id: id as u64,
                len: len as u64,
            },
            _fd: None,
            ino: 0,
            tail: 0,
        })
    }

    /// Maps a peer's data segment (memory from `mem_alloc`, named by a remote key or a
    /// rendezvous header). Fails with [`Error::RemoteAccess`] unless the creator process
    /// granted this process access ([`crate::grant`]; the pid in `seg` is only the peer's
    /// claim; a grant not there yet is waited for up to [`crate::grant::GRANT_WAIT`]), and with [`Error::Unreachable`] when it is gone or not a rucx segment of that
    /// size created by that process.
    /// The mapping has [`SCRATCH_TAIL`] bytes of private scratch after it.
    pub fn attach(seg: SegRef) -> Result<Segment> {
        crate::grant::check(seg.pid, &format!("mapping a {} segment", seg.kind.name()))?;
        Self::attach_unchecked(seg, SCRATCH_TAIL)
    }

    /// [`Segment::attach`] without waiting for a grant that has not arrived (for paths inside
    /// `progress`, where a peer naming a process that never grants must not stall us).
    pub fn attach_no_wait(seg: SegRef) -> Result<Segment> {
        crate::grant::check_now(seg.pid, &format!("mapping a {} segment", seg.kind.name()))?;
        Self::attach_unchecked(seg, SCRATCH_TAIL)
    }

    /// Maps a peer's receive FIFO: any process may send to a rucx interface, so no grant is
    /// needed, but the segment must still be a rucx segment of that size held (posix) or
    /// created (sysv) by the named process, and the caller validates the FIFO header.
    ///
    /// The first page (control block and first elements) is mapped writable at once
    /// (`MADV_POPULATE_WRITE`, without touching its bytes): a sender's first access would
    /// otherwise be a read fault, and on a memfd the kernel then also maps the neighbouring
    /// pages the receiver has used ("fault-around"), which would count in this process's RSS
    /// although it never touches them. Later pages are first touched by writes, which map
    /// only the page written. Without the advice (kernels before 5.14) nothing else changes.
    pub fn attach_fifo(seg: SegRef) -> Result<Segment> {
        let s = Self::attach_unchecked(seg, 0)?;
        // SAFETY: FFI on the first page of our own mapping; the advice only fills page tables.
        unsafe {
            libc::madvise(
                s.base.as_ptr() as *mut libc::c_void,
                4096.min(s.size()),
                libc::MADV_POPULATE_WRITE,
            )
        };
        Ok(s)
    }

    /// Maps `seg` with `tail` bytes of private scratch after it (see [`SCRATCH_TAIL`]).
    fn attach_unchecked(seg: SegRef, tail: usize) -> Result<Segment> {
        let len = usize::try_from(seg.len)
            .ok()
            .filter(|l| *l > 0 && page_align(*l) == Some(*l))
            .filter(|l| l.checked_add(tail).is_some())
            .ok_or_else(|| Error::Wire(format!("segment length {}", seg.len)))?;
        match seg.kind {
            SegKind::Posix => Self::attach_posix(seg, len, tail),
            SegKind::Sysv => Self::attach_sysv(seg, len, tail),
        }
    }

    fn attach_posix(seg: SegRef, len: usize, tail: usize) -> Result<Segment> {
        let fd_no = i32::try_from(posix_fd(seg.id))
            .map_err(|_| Error::Wire(format!("posix segment fd {}", seg.id)))?;
        // The path and the link target live on the stack: a hub attaches one FIFO per peer,
        // and heap temporaries between its long-lived per-endpoint allocations fragment them.
        let mut buf = [0u8; 64];
        let path = proc_fd_path(&mut buf, seg.pid, fd_no);
        let mut target = [0u8; 64];
        // SAFETY: FFI with a NUL-terminated path and a buffer of `target.len()` bytes.
        let n = unsafe { libc::readlink(path.as_ptr(), target.as_mut_ptr().cast(), target.len()) };
        // Only a rucx memfd is acceptable: never map some other file of the peer's.
        if n < 0 {
            return Err(Error::Unreachable(format!(
                "cannot reach posix segment {} (has the peer exited?): {}",
                path.to_string_lossy(),
                std::io::Error::last_os_error()
            )));
        }
        let target = &target[..n as usize];
        if !target.starts_with(b"/memfd:rucx-mm") {
            return Err(Error::Unreachable(format!(
                "{} is {} and not a rucx shared-memory segment",
                path.to_string_lossy(),
                String::from_utf8_lossy(target)
            )));
        }
        // SAFETY: FFI with a valid path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Unreachable(format!(
                "cannot open posix segment {}: {}",
                path.to_string_lossy(),
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: FFI on our descriptor with a valid out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || (st.st_size as u64) < seg.len {
            return Err(Error::Unreachable(format!(
                "posix segment {} is smaller than the {len} bytes announced",
                path.to_string_lossy()
            )));
        }
        let base = if tail == 0 {
            map_fd(&fd, len, "mmap of a peer's posix segment")?
        } else {
            let area = reserve(len + tail, "mmap of a peer's posix segment")?;
            // SAFETY: FFI; replaces the first `len` bytes of the area we just reserved (and
            // own) with the segment, shared and read-write.
            let p = unsafe {
                libc::mmap(
                    area.as_ptr().cast(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                let e = Error::last_os("mmap of a peer's posix segment");
                // SAFETY: the area we reserved; nothing else uses it.
                unsafe { libc::munmap(area.as_ptr().cast(), len + tail) };
                return Err(e);
            }
            area
        };
        Ok(Segment {
            base,
            seg,
            _fd: None,
            ino: st.st_ino,
            tail,
        })
    }

    fn attach_sysv(seg: SegRef, len: usize, tail: usize) -> Result<Segment> {
        let id = i32::try_from(seg.id)
            .map_err(|_| Error::Wire(format!("sysv segment id {}", seg.id)))?;
        // SAFETY: an all-zero shmid_ds is a valid out-parameter.
        let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
        // SAFETY: FFI with a valid out-pointer.
        if unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) } != 0 {
            return Err(Error::Unreachable(format!(
                "sysv segment {id} is gone (has the peer exited?): {}",
                std::io::Error::last_os_error()
            )));
        }
        if ds.shm_cpid as u32 != seg.pid || (ds.shm_segsz as u64) < seg.len {
            return Err(Error::Unreachable(format!(
                "sysv segment {id} was not made by process {} with {len} bytes",
                seg.pid
            )));
        }
        // With a tail, the segment replaces the start of an area reserved for both.
        let area = match tail {
            0 => None,
            _ => Some(reserve(
                len + tail,
                "reserving address space for a sysv segment",
            )?),
        };
        let (at, flags) = match area {
            Some(a) => (a.as_ptr() as *const libc::c_void, libc::SHM_REMAP),
            None => (std::ptr::null(), 0),
        };
        // SAFETY: FFI; the kernel picks the address, or we name the start of the area we
        // reserved (page-aligned, which SHMLBA needs on Linux) and own.
        let p = unsafe { libc::shmat(id, at, flags) };
        if p as isize == -1 {
            let e = std::io::Error::last_os_error();
            if let Some(a) = area {
                // SAFETY: the area we reserved; nothing else uses it.
                unsafe { libc::munmap(a.as_ptr().cast(), len + tail) };
            }
            return Err(Error::Unreachable(format!(
                "cannot attach sysv segment {id}: {e}"
            )));
        }
        Ok(Segment {
            base: NonNull::new(p as *mut u8).expect("shmat succeeded"),
            seg,
            _fd: None,
            ino: 0,
            tail,
        })
    }

    /// Bytes after the region `offset..offset+len` of this segment that writes may land on
    /// harmlessly: when the region ends in the segment's last page (as a `mem_alloc` region
    /// does), the rest of that page and the private scratch tail (see [`SCRATCH_TAIL`]);
    /// otherwise none (the bytes after the region may be someone's data).
    pub fn scratch_after(&self, offset: u64, len: u64) -> u64 {
        let size = self.seg.len;
        match offset.checked_add(len) {
            Some(end) if end <= size && page_align(end as usize) == Some(size as usize) => {
                size - end + self.tail as u64
            }
            _ => 0,
        }
    }

    /// Start of the mapping.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }
    /// Mapped length.
    pub fn size(&self) -> usize {
        // Checked to fit a usize when made or attached.
        self.seg.len as usize
    }
    /// Where peers find it.
    pub fn seg_ref(&self) -> SegRef {
        self.seg
    }

    /// For a mapping kept in a cache: whether the peer's segment reference still names this
    /// segment. A posix reference carries a per-process serial next to the descriptor number
    /// (the peer may reuse the number for a new segment once it freed this one), so equal
    /// references name the same segment; a reference without one (an older peer) is checked
    /// by inode (one `stat`). A sysv id carries a sequence number and is not reused in
    /// practice.
    pub fn still_current(&self) -> bool {
        // A reference with a serial (see `posix_seg_id`) names one segment only: a new
        // segment on a reused descriptor has another serial, so no `stat` is needed.
        if self.ino == 0 || self.seg.id >> 32 != 0 {
            return true;
        }
        let mut path = [0u8; 64];
        let mut w = &mut path[..];
        use std::io::Write;
        if write!(w, "/proc/{}/fd/{}\0", self.seg.pid, posix_fd(self.seg.id)).is_err() {
            return false;
        }
        // SAFETY: an all-zero stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: FFI with a NUL-terminated path in `path` and a valid out-pointer.
        let r = unsafe { libc::stat(path.as_ptr() as *const libc::c_char, &mut st) };
        r == 0 && st.st_ino == self.ino
    }
}

/// The id of a posix segment: its descriptor number in the low 32 bits, where peers open it
/// (`/proc/PID/fd/N`), and a serial unique in this process in the high 32 bits, so a peer
/// that cached a mapping never mistakes a new segment on a reused descriptor number for it
/// (and needs no `stat` per use to check).
fn posix_seg_id(fd: i32) -> u64 {
    static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let serial = SERIAL
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        .max(1);
    (serial as u64) << 32 | fd as u32 as u64
}

/// The descriptor number in a posix segment id (see [`posix_seg_id`]).
/// `/proc/<pid>/fd/<fd>` as a C string in `buf` (room for any pid and descriptor number).
fn proc_fd_path(buf: &mut [u8; 64], pid: u32, fd: i32) -> &CStr {
    use std::io::Write;
    let mut w = &mut buf[..];
    // 20 + 10 + 10 digits and a NUL fit in 64 bytes.
    let _ = write!(w, "/proc/{pid}/fd/{fd}\0");
    CStr::from_bytes_until_nul(&buf[..]).unwrap_or(c"/proc/self/fd/-1")
}

fn posix_fd(id: u64) -> u32 {
    id as u32
}

/// Maps `len` bytes of a memfd shared and read-write (`mmap(MAP_SHARED)` at a kernel-chosen
/// address); [`Segment`]'s drop unmaps it.
fn map_fd(fd: &OwnedFd, len: usize, what: &str) -> Result<NonNull<u8>> {
    // SAFETY: FFI; a new mapping at an address the kernel picks, of a descriptor we hold.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os(what));
    }
    NonNull::new(p.cast()).ok_or_else(|| Error::NoMemory(format!("{what}: mapped at address 0")))
}

/// Reserves `len` bytes of private, zero-filled, read-write memory at an address the kernel
/// picks: the area an attached segment and its scratch tail go in.
fn reserve(len: usize, what: &str) -> Result<NonNull<u8>> {
    // SAFETY: FFI; a new anonymous mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os(what));
    }
    NonNull::new(p.cast()).ok_or_else(|| Error::NoMemory(format!("{what}: mapped at address 0")))
}

impl Drop for Segment {
    fn drop(&mut self) {
        let len = self.seg.len as usize;
        match self.seg.kind {
            // SAFETY: our own mapping of `seg.len` bytes and its tail (the kernel rounds the
            // length up to whole pages, as it did when mapping); nobody uses it after drop
            // (holders keep the Segment).
            SegKind::Posix => unsafe {
                libc::munmap(self.base.as_ptr().cast(), len + self.tail);
            },
            // SAFETY: we own this attachment and the tail after it; nobody uses them after
            // drop.
            SegKind::Sysv => unsafe {
                libc::shmdt(self.base.as_ptr() as *const libc::c_void);
                if self.tail > 0 {
                    libc::munmap(self.base.as_ptr().add(len).cast(), self.tail);
                }
            },
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn roundtrip(kind: SegKind) {
        let a = Segment::create(kind, 10000).unwrap();
        assert_eq!(a.size(), 12288);
        let b = Segment::attach(a.seg_ref()).unwrap();
        // SAFETY: both mappings are 12288 bytes of the same segment.
        unsafe {
            a.base().as_ptr().add(5000).write(0x5a);
            assert_eq!(b.base().as_ptr().add(5000).read(), 0x5a);
        }
        let mut bad = a.seg_ref();
        bad.len *= 2;
        assert!(Segment::attach(bad).is_err(), "oversized attach must fail");
        let mut bad = a.seg_ref();
        bad.id += 1000;
        assert!(Segment::attach(bad).is_err());
    }

    #[test]
    fn posix_segment_attach_and_checks() {
        roundtrip(SegKind::Posix);
        // A non-memfd descriptor of ours (stdin or similar) is refused.
        let mut bad = Segment::create(SegKind::Posix, 4096).unwrap().seg_ref();
        bad.id = 0;
        assert!(matches!(Segment::attach(bad), Err(Error::Unreachable(_))));
    }

    #[test]
    fn sysv_segment_attach_and_checks() {
        roundtrip(SegKind::Sysv);
    }
}
