//! Registered memory that is a shared mapping of a file (`MAP_SHARED`, e.g. a segment in
//! `/dev/shm` an MPI library allocated its window in), reached by peers on this host through
//! their own mapping of the same file: put, get and atomics become loads, stores and CPU
//! atomics instead of cma system calls or messages.
//!
//! The owner describes the mapping in its remote-key bundle (entry [`TL_NAME`], a
//! [`FileKey`]): the kernel's boot id, the file's device and inode, and where the mapped range
//! lies in the file. A peer whose process maps that range of the same file (same boot id,
//! device and inode) maps those pages a second time (`mremap` of its own mapping, which needs
//! no privilege) and checks the new mapping is of the named file; that mapping lives as long
//! as the unpacked key. Anything that does not fit leaves the key unused and the operations
//! take the registered path.
//!
//! Trust: a key can only direct this process's accesses into pages of a file it already maps
//! shared, within the range the key names (checked as for any mapped key).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;
use ucs::{Error, Result};
use uct::RemoteKey;

/// Name of the bundle entry that describes a shared file mapping.
pub(crate) const TL_NAME: &str = "shfile";

/// Wire form of a shared file mapping (little-endian):
///
/// ```text
/// 0          16      24      32          40          48      56
/// +----------+-------+-------+-----------+-----------+-------+
/// | boot id  | dev   | inode | file off  | base addr | len   |
/// +----------+-------+-------+-----------+-----------+-------+
/// ```
///
/// `base addr` is the owner's address of the range, `file off` where that address lies in
/// the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileKey {
    pub boot: [u8; 16],
    pub dev: u64,
    pub ino: u64,
    pub offset: u64,
    pub base: u64,
    pub len: u64,
}

impl FileKey {
    pub const LEN: usize = 56;

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&self.boot);
        for x in [self.dev, self.ino, self.offset, self.base, self.len] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }

    /// Decodes a key; any length other than [`FileKey::LEN`] gives [`Error::Wire`].
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() != Self::LEN {
            return Err(Error::Wire(format!(
                "shared-file key of {} bytes (expected {})",
                b.len(),
                Self::LEN
            )));
        }
        let mut boot = [0u8; 16];
        boot.copy_from_slice(&b[..16]);
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[16 + 8 * i..24 + 8 * i]);
            u64::from_le_bytes(w)
        };
        Ok(FileKey {
            boot,
            dev: word(0),
            ino: word(1),
            offset: word(2),
            base: word(3),
            len: word(4),
        })
    }
}

/// The kernel's boot id (16 bytes), which tells whether two processes run on the same host
/// (read once).
fn boot_id() -> Option<[u8; 16]> {
    static ID: std::sync::OnceLock<Option<[u8; 16]>> = std::sync::OnceLock::new();
    *ID.get_or_init(read_boot_id)
}

fn read_boot_id() -> Option<[u8; 16]> {
    let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: Vec<u8> = s.bytes().filter(|c| c.is_ascii_hexdigit()).collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        id[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(id)
}

/// One line of `/proc/self/maps` that maps a file shared and writable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MapLine {
    start: u64,
    end: u64,
    offset: u64,
    dev: u64,
    ino: u64,
}

/// Parses a line of `/proc/self/maps`; `None` unless it is a shared writable file mapping.
fn parse_line(l: &str) -> Option<MapLine> {
    let mut f = l.split_ascii_whitespace();
    let (range, perms, off, dev, ino) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    let p = perms.as_bytes();
    if p.len() < 4 || p[0] != b'r' || p[1] != b'w' || p[3] != b's' {
        return None;
    }
    let (s, e) = range.split_once('-')?;
    let (maj, min) = dev.split_once(':')?;
    let ino: u64 = ino.parse().ok()?;
    if ino == 0 {
        return None;
    }
    let maj = u32::from_str_radix(maj, 16).ok()?;
    let min = u32::from_str_radix(min, 16).ok()?;
    Some(MapLine {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        offset: u64::from_str_radix(off, 16).ok()?,
        dev: libc::makedev(maj, min),
        ino,
    })
}

fn shared_lines() -> Vec<MapLine> {
    std::fs::read_to_string("/proc/self/maps")
        .map(|s| s.lines().filter_map(parse_line).collect())
        .unwrap_or_default()
}

/// The description peers need when `addr..addr + len` of this process lies inside one shared
/// writable file mapping; `None` otherwise (private or anonymous memory, several mappings).
pub(crate) fn describe(addr: u64, len: usize) -> Option<FileKey> {
    let end = addr.checked_add(len as u64)?;
    let l = shared_lines()
        .into_iter()
        .find(|l| l.start <= addr && end <= l.end)?;
    Some(FileKey {
        boot: boot_id()?,
        dev: l.dev,
        ino: l.ino,
        offset: l.offset.checked_add(addr - l.start)?,
        base: addr,
        len: len as u64,
    })
}

/// This process's own mapping of a peer's range, unmapped when the last key holding it drops.
struct OwnMapping {
    ptr: NonNull<c_void>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; it is only accessed through
// the remote key's bounds-checked copies and atomics.
unsafe impl Send for OwnMapping {}
// SAFETY: as above.
unsafe impl Sync for OwnMapping {}

impl Drop for OwnMapping {
    fn drop(&mut self) {
        // SAFETY: mapped by `try_map` with this length, unmapped only here.
        unsafe { libc::munmap(self.ptr.as_ptr(), self.len) };
    }
}

/// A remote key mapped in this process for a peer's shared-file range `k`, when this process
/// maps that range of the same file on the same host; `None` otherwise (with the reason
/// logged at debug level).
pub(crate) fn map_peer_range(k: &FileKey) -> Option<RemoteKey> {
    match try_map(k) {
        Ok(key) => Some(key),
        Err(e) => {
            tracing::debug!("peer's shared-file memory not mapped here: {e}");
            None
        }
    }
}

fn try_map(k: &FileKey) -> Result<RemoteKey> {
    let no = |why: &str| Error::Unreachable(why.into());
    if k.len == 0 || boot_id() != Some(k.boot) {
        return Err(no("empty range or another host"));
    }
    let end = k
        .offset
        .checked_add(k.len)
        .filter(|_| k.base.checked_add(k.len).is_some())
        .ok_or_else(|| no("range wraps around"))?;
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p.is_power_of_two())
        .unwrap_or(4096);
    let start = k.offset & !(page - 1);
    let map_len = usize::try_from(end - start).map_err(|_| no("range too long"))?;
    // This process's mapping of the file that covers the whole range.
    let covers = |l: &MapLine, from: u64| {
        l.dev == k.dev && l.ino == k.ino && l.offset <= from && end - l.offset <= l.end - l.start
    };
    let line = shared_lines()
        .into_iter()
        .find(|l| covers(l, start))
        .ok_or_else(|| no("this process does not map that range of the file"))?;
    let src = line.start + (start - line.offset);
    // A second mapping of the same pages, owned by the key: `mremap` of a shared mapping with
    // old size 0 duplicates it.
    // SAFETY: `src` is page-aligned inside a shared mapping of this process; the new mapping
    // is placed where the kernel picks.
    let p = unsafe { libc::mremap(src as *mut c_void, 0, map_len, libc::MREMAP_MAYMOVE) };
    if p == libc::MAP_FAILED {
        return Err(Error::Unreachable(format!(
            "cannot map the file range again: {}",
            std::io::Error::last_os_error()
        )));
    }
    let ptr = NonNull::new(p).ok_or_else(|| no("mapped at null"))?;
    let own = Arc::new(OwnMapping { ptr, len: map_len });
    // The mapping could have changed between reading the list and duplicating it: the new
    // one must map the range of the named file.
    let at = p as u64;
    let right = shared_lines().iter().any(|l| {
        l.start <= at
            && l.end
                .checked_sub(at)
                .is_some_and(|room| map_len as u64 <= room)
            && covers(l, start)
            && l.offset.checked_add(at - l.start) == Some(start)
    });
    if !right {
        return Err(no("the mapping changed while it was duplicated"));
    }
    let local = NonNull::new(p.cast::<u8>().wrapping_add((k.offset - start) as usize))
        .ok_or_else(|| no("mapped at null"))?;
    // SAFETY: `local..local + len` lies inside the mapping `own` keeps alive.
    Ok(unsafe { RemoteKey::mapped(k.base, k.len, local, 0, Some(own)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_key_round_trip_and_bad_lengths() {
        let k = FileKey {
            boot: [7; 16],
            dev: 27,
            ino: 123_487,
            offset: 2 << 20,
            base: 0x0777_2673_3000,
            len: 2 << 20,
        };
        let e = k.encode();
        assert_eq!(e.len(), FileKey::LEN);
        assert_eq!(FileKey::decode(&e).unwrap(), k);
        for n in 0..e.len() {
            assert!(FileKey::decode(&e[..n]).is_err(), "prefix {n}");
        }
        let mut long = e.clone();
        long.push(0);
        assert!(FileKey::decode(&long).is_err());
    }

    #[test]
    fn maps_lines_keep_only_shared_writable_files() {
        let l = "77726733000-77726b33000 rw-s 00200000 00:1b 123487   /dev/shm/x (deleted)";
        assert_eq!(
            parse_line(l),
            Some(MapLine {
                start: 0x0777_2673_3000,
                end: 0x0777_26b3_3000,
                offset: 0x20_0000,
                dev: libc::makedev(0, 0x1b),
                ino: 123_487,
            })
        );
        assert_eq!(parse_line("7f00-7f10 rw-p 00000000 00:00 0"), None);
        assert_eq!(parse_line("7f00-7f10 r--s 00000000 00:1b 5 /x"), None);
        assert_eq!(parse_line("7f00-7f10 rw-s 00000000 00:1b 0"), None);
        assert_eq!(parse_line("garbage"), None);
        assert_eq!(parse_line(""), None);
    }

    /// A forged key never maps anything it should not: another host, a file this process
    /// does not map, a range past the end of the file, or one that wraps around.
    #[test]
    fn forged_keys_are_refused() {
        let boot = boot_id().expect("the kernel's boot id");
        let base = FileKey {
            boot,
            dev: 1,
            ino: 1,
            offset: 0,
            base: 0x1000,
            len: 8,
        };
        assert!(map_peer_range(&FileKey {
            boot: [0; 16],
            ..base
        })
        .is_none());
        assert!(map_peer_range(&base).is_none(), "file not mapped here");
        assert!(map_peer_range(&FileKey { len: 0, ..base }).is_none());
        assert!(map_peer_range(&FileKey {
            offset: u64::MAX - 4,
            ..base
        })
        .is_none());
    }

    /// A shared file mapping registered with `mem_map_raw` carries its description, and a
    /// peer worker of a process that maps the file reaches it directly: puts, gets and CPU
    /// atomics act on the file's pages (seen through a second mapping of the file). Private
    /// memory carries no description.
    #[test]
    fn shared_file_memory_is_reached_directly() {
        use crate::worker::api_types::AmoSize;
        use crate::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker};
        use std::os::fd::AsRawFd as _;
        use uct::AtomicOp;

        let path = format!("/dev/shm/rucx-shfile-test-{}", std::process::id());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("create the file");
        std::fs::remove_file(&path).expect("unlink");
        file.set_len(3 * 4096).expect("size");
        let map = |len: usize| {
            // SAFETY: a fresh shared mapping of the open file.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            p.cast::<u8>()
        };
        let (owner_view, other_view) = (map(3 * 4096), map(3 * 4096));
        let ctx = Context::new(ContextParams {
            features: Features::RMA | Features::AMO64,
            config: Some(UcpConfig {
                tls: vec!["posix".into(), "cma".into()],
                ..Default::default()
            }),
        })
        .expect("context");
        let mut w: Vec<Worker> = (0..2).map(|_| Worker::new(&ctx).expect("worker")).collect();
        // The window: 5000 bytes from offset 4100 of the file (not page-aligned).
        // SAFETY: the mapping outlives the MemMap (unmapped at the end of the test).
        let mem = unsafe { w[0].mem_map_raw(owner_view.add(4100), 5000) }.expect("map");
        let base = mem.address();
        let bundle = crate::rma::RkeyBundle::decode(mem.rkey_packed()).expect("bundle");
        let (_, k) = bundle
            .entries
            .iter()
            .find(|(t, _)| t == TL_NAME)
            .expect("a shared-file entry");
        let fk = FileKey::decode(k).expect("key");
        assert_eq!((fk.offset, fk.base, fk.len), (4100, base, 5000));
        let to_end = 3 * 4096 - 4100;
        assert!(map_peer_range(&FileKey { len: to_end, ..fk }).is_some());
        assert!(
            map_peer_range(&FileKey {
                len: to_end + 1,
                ..fk
            })
            .is_none(),
            "a range past the pages this process maps"
        );
        let mut private = vec![0u8; 64];
        // SAFETY: the vector outlives the mapping.
        let pm = unsafe { w[0].mem_map_raw(private.as_mut_ptr(), 64) }.expect("map private");
        let pb = crate::rma::RkeyBundle::decode(pm.rkey_packed()).expect("bundle");
        assert!(pb.entries.iter().all(|(t, _)| t != TL_NAME));

        let addr = w[0].address().to_vec();
        let ep = w[1].ep_create(&addr, EpParams::default()).expect("ep");
        let rkey = loop {
            match w[1].rkey_unpack(ep, mem.rkey_packed()) {
                Ok(k) => break k,
                Err(_) => {
                    w[0].progress();
                    w[1].progress();
                }
            }
        };
        assert!(rkey.is_mapped(), "the peer's file range is mapped here");
        let a = &mut w[1];
        assert!(matches!(
            a.put(ep, b"shared", base + 10, &rkey),
            Ok(Op::Done(_))
        ));
        let big: Vec<u8> = (0..3000).map(|i| (i * 13) as u8).collect();
        assert!(matches!(
            a.put(ep, &big, base + 1000, &rkey),
            Ok(Op::Done(_))
        ));
        assert_eq!(
            a.atomic_mapped(
                ep,
                Some(AtomicOp::Add),
                AmoSize::U64,
                5,
                0,
                base + 20,
                &rkey
            ),
            Some(0)
        );
        assert!(a.put(ep, b"x", base + 4999, &rkey).is_ok());
        assert!(
            a.put(ep, b"xy", base + 4999, &rkey).is_err(),
            "past the window"
        );
        assert!(a.ep_is_quiet(ep), "nothing waits for the target");
        // SAFETY: both views map the file's 3 pages.
        unsafe {
            let o = other_view.add(4100);
            assert_eq!(std::slice::from_raw_parts(o.add(10), 6), b"shared");
            assert!(std::slice::from_raw_parts(o.add(1000), 3000) == &big[..]);
            assert_eq!(*(o.add(20) as *const u64), 5);
            assert_eq!(*o.add(4999), b'x');
        }
        let got = match a.get(ep, vec![0; 6], base + 10, &rkey).expect("get") {
            Op::Done(c) => c.buf.expect("buffer"),
            Op::Pending(_) => panic!("a get through the mapping completes at once"),
        };
        assert_eq!(&got, b"shared");
        drop((rkey, pm, mem, w));
        // SAFETY: the views were mapped above with these lengths; nothing uses them now.
        unsafe {
            libc::munmap(owner_view.cast(), 3 * 4096);
            libc::munmap(other_view.cast(), 3 * 4096);
        }
    }
}
