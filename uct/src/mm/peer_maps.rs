//! An endpoint's mappings of its peer's data segments, for remote keys the peer sends (a
//! rendezvous announces its data with one key per message): the first key to a segment maps
//! it, later keys to the same segment reuse the mapping instead of mapping it again and
//! faulting every page in once more.
//!
//! The mappings belong to the endpoint: they go when it drops (ucp drops the endpoints of a
//! failed or closed connection), and a use after the endpoint failed drops them too, so a
//! killed peer's segments do not stay mapped here. Each key is still checked on its own: it
//! must name a segment of the endpoint's own peer process (a peer cannot make us read another
//! process's memory), of this endpoint's kind, with its region inside the segment, and the key
//! made from a cached mapping carries that region's bounds only.
//!
//! Cost: a segment the peer freed stays mapped here, so its memory stays allocated, until
//! newer segments evict it ([`MAX_PEER_MAPS`] per endpoint) or the endpoint goes.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use super::segment::Segment;
use super::wire::{RkeyWire, SegRef};
use crate::md::RemoteKey;
use std::ptr::NonNull;
use std::sync::Arc;
use ucs::{Error, Result};

/// Most segments of one peer kept mapped (least recently used goes first).
pub const MAX_PEER_MAPS: usize = 8;

/// Mapped segments of one peer, most recently used last. Boxed and allocated at the first
/// mapping: every shared-memory endpoint has the cache, and most never use it.
#[derive(Default)]
pub struct PeerMaps {
    // One word in the endpoint where a Vec takes three, for one more allocation at first use.
    #[allow(clippy::box_collection)]
    segs: Option<Box<Vec<Arc<Segment>>>>,
}

impl PeerMaps {
    /// Segments mapped now.
    pub fn len(&self) -> usize {
        self.segs.as_ref().map_or(0, |v| v.len())
    }

    /// True when nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Unmaps everything (keys made earlier keep their own segment until they drop).
    pub fn clear(&mut self) {
        self.segs = None;
    }

    /// Unpacks `packed`, a remote key from the peer `peer` (its FIFO's segment reference: the
    /// peer's pid and the endpoint's segment kind), mapping its segment or reusing the mapping
    /// of an earlier key to it.
    pub fn unpack(&mut self, peer: SegRef, packed: &[u8]) -> Result<RemoteKey> {
        let k = RkeyWire::decode(packed)?;
        if k.seg.kind != peer.kind {
            return Err(Error::Wire(format!(
                "remote key of a {} segment given to a {} endpoint",
                k.seg.kind.name(),
                peer.kind.name()
            )));
        }
        if k.seg.pid != peer.pid {
            return Err(Error::RemoteAccess(format!(
                "remote key names a segment of process {}, not of the peer (process {})",
                k.seg.pid, peer.pid
            )));
        }
        let seg = self.segment(k.seg)?;
        // decode() checked offset + len <= the segment's length, which is mapped whole.
        let mapped = NonNull::new(seg.base().as_ptr().wrapping_add(k.offset as usize))
            .ok_or_else(|| Error::RemoteAccess("mapping at address 0".into()))?;
        let tail = seg.scratch_after(k.offset, k.len);
        // SAFETY: the mapping covers offset..offset+len of the segment and is kept alive by
        // the key's owner (the Arc); the key's bounds are the region the peer packed; `tail`
        // bytes after it are the segment's padding and scratch tail.
        Ok(unsafe { RemoteKey::mapped(k.base, k.len, mapped, 0, Some(seg)).with_tail_room(tail) })
    }

    /// The mapping of `seg`: a cached one when it still names that segment, else a new one.
    fn segment(&mut self, seg: SegRef) -> Result<Arc<Segment>> {
        let segs = self.segs.get_or_insert_with(Box::default);
        if let Some(i) = segs.iter().rposition(|s| s.seg_ref() == seg) {
            let s = segs.remove(i);
            if s.still_current() {
                segs.push(s.clone());
                return Ok(s);
            }
            // The peer freed that segment and its reference now names another one.
        }
        // Without waiting for a grant: this runs inside progress, and the peer granted us
        // access when it connected (its key arrives after that).
        let s = Arc::new(Segment::attach_no_wait(seg)?);
        if segs.len() >= MAX_PEER_MAPS {
            segs.remove(0);
        }
        segs.push(s.clone());
        Ok(s)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::md::MemoryDomain;
    use crate::mm::wire::SegKind;
    use crate::mm::MmMd;

    fn key(md: &MmMd, h: &crate::md::MemHandle) -> Vec<u8> {
        let mut v = Vec::new();
        md.rkey_pack(h, &mut v).unwrap();
        v
    }

    fn me(kind: SegKind) -> SegRef {
        SegRef {
            kind,
            pid: std::process::id(),
            id: 0,
            len: 0,
        }
    }

    fn reuse_and_bounds(kind: SegKind) {
        let md = MmMd::new(kind);
        let h = md.mem_alloc(8192).unwrap();
        // SAFETY: the handle maps 8192 bytes.
        unsafe { h.addr().add(100).write(7) };
        let mut maps = PeerMaps::default();
        let k1 = maps.unpack(me(kind), &key(&md, &h)).unwrap();
        let k2 = maps.unpack(me(kind), &key(&md, &h)).unwrap();
        assert_eq!(maps.len(), 1, "the second key reuses the mapping");
        let p = k2.local_ptr(h.addr() as u64 + 100, 1).unwrap();
        // SAFETY: bounds-checked inside the mapping.
        assert_eq!(unsafe { p.read() }, 7);
        // Each key keeps its own bounds.
        assert!(k1.local_ptr(h.addr() as u64 + 8192, 1).is_err());
        assert!(k1.local_ptr(h.addr() as u64 - 1, 1).is_err());
        // A key of a wrong kind or of another process is refused.
        let other = match kind {
            SegKind::Posix => SegKind::Sysv,
            SegKind::Sysv => SegKind::Posix,
        };
        assert!(matches!(
            maps.unpack(me(other), &key(&md, &h)),
            Err(Error::Wire(_))
        ));
        let mut stranger = me(kind);
        stranger.pid += 1;
        assert!(matches!(
            maps.unpack(stranger, &key(&md, &h)),
            Err(Error::RemoteAccess(_))
        ));
        maps.clear();
        assert!(maps.is_empty());
        drop(k2);
        // k1 still holds its segment: reading through it stays valid.
        let p = k1.local_ptr(h.addr() as u64 + 100, 1).unwrap();
        // SAFETY: as above; k1 keeps its mapping.
        assert_eq!(unsafe { p.read() }, 7);
    }

    #[test]
    fn posix_peer_maps_reuse_and_check_every_key() {
        reuse_and_bounds(SegKind::Posix);
    }

    #[test]
    fn sysv_peer_maps_reuse_and_check_every_key() {
        reuse_and_bounds(SegKind::Sysv);
    }

    #[test]
    fn peer_maps_evict_least_recently_used() {
        let md = MmMd::new(SegKind::Posix);
        let hs: Vec<_> = (0..MAX_PEER_MAPS + 1)
            .map(|_| md.mem_alloc(4096).unwrap())
            .collect();
        let mut maps = PeerMaps::default();
        for h in &hs {
            maps.unpack(me(SegKind::Posix), &key(&md, h)).unwrap();
        }
        assert_eq!(maps.len(), MAX_PEER_MAPS);
        assert!(!maps
            .segs
            .iter()
            .flat_map(|v| v.iter())
            .any(|s| s.seg_ref().id == md_seg_id(&hs[0])));
    }

    fn md_seg_id(h: &crate::md::MemHandle) -> u64 {
        h.tl_data::<Segment>().unwrap().seg_ref().id
    }

    /// A freed segment whose descriptor number the owner reused for a new segment: a key to the
    /// new one never reads through the old mapping. With the serial in the reference the keys
    /// differ; a reference without one (as an older peer sends) is caught by the inode check.
    #[test]
    fn posix_peer_maps_never_use_a_stale_mapping() {
        let md = MmMd::new(SegKind::Posix);
        let mut maps = PeerMaps::default();
        let h = md.mem_alloc(4096).unwrap();
        // SAFETY: 4096 mapped bytes.
        unsafe { h.addr().write(1) };
        let mut old_key = key(&md, &h);
        let fd_only = |k: &mut Vec<u8>| k[12..16].copy_from_slice(&[0; 4]);
        fd_only(&mut old_key);
        let k = maps.unpack(me(SegKind::Posix), &old_key).unwrap();
        let p = k.local_ptr(h.addr() as u64, 1).unwrap();
        // SAFETY: bounds-checked inside the mapping, which `k` keeps.
        assert_eq!(unsafe { p.read() }, 1);
        drop(k);
        drop(h);
        // The new segment takes the lowest free descriptor: the freed one's (unless another
        // test's descriptor took it meanwhile; the reads below must give 2 either way).
        let h2 = md.mem_alloc(4096).unwrap();
        // SAFETY: 4096 mapped bytes.
        unsafe { h2.addr().write(2) };
        for strip in [false, true] {
            let mut k2 = key(&md, &h2);
            if strip {
                fd_only(&mut k2);
            }
            let k = maps.unpack(me(SegKind::Posix), &k2).unwrap();
            // SAFETY: bounds-checked inside the mapping.
            let v = unsafe { k.local_ptr(h2.addr() as u64, 1).unwrap().read() };
            assert_eq!(v, 2, "read the new segment (serial stripped: {strip})");
        }
    }
}
