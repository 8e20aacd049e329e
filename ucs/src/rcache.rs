//! A registration cache: keeps memory registrations alive after use so registering the same
//! buffer again is a lookup, not a system call.
//!
//! Modelled on UCX's `ucs_rcache`. The cache is generic over a [`Registrar`] (a memory domain:
//! verbs `ibv_reg_mr`, a CMA key, …) and its registration value. [`Rcache::get`] finds a cached
//! region that covers `(addr, len)` or registers a new one, page-aligned and merged with any
//! cached regions it overlaps, so cached regions never overlap and a lookup is one ordered-map
//! search. The returned [`Region`] is a reference: while any exists the registration stays.
//! Unreferenced regions stay cached in least-recently-used order and are evicted beyond
//! `max_regions` / `max_size`. When the owner unmaps memory it calls [`Rcache::invalidate`]:
//! overlapping regions leave the cache at once and are deregistered as soon as their last
//! reference drops. With `RUCX_RCACHE_ENABLE=n` the cache is a pass-through: every `get`
//! registers exactly the requested range and the region is deregistered on drop.

use crate::config::{ConfigVar, Size};
use crate::status::{Error, Result};
use slab::Slab;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

/// `RUCX_RCACHE_ENABLE` as a constant for variable tables.
pub const RCACHE_ENABLE_VAR: ConfigVar = ConfigVar {
    name: "RCACHE_ENABLE",
    default: "y",
    doc: "Cache memory registrations (y) or register and deregister on every use (n)",
};
/// `RUCX_RCACHE_MAX_REGIONS` as a constant for variable tables.
pub const RCACHE_MAX_REGIONS_VAR: ConfigVar = ConfigVar {
    name: "RCACHE_MAX_REGIONS",
    default: "inf",
    doc: "Most regions kept in a registration cache; unused ones beyond it are evicted (number or inf)",
};
/// `RUCX_RCACHE_MAX_SIZE` as a constant for variable tables.
pub const RCACHE_MAX_SIZE_VAR: ConfigVar = ConfigVar {
    name: "RCACHE_MAX_SIZE",
    default: "inf",
    doc: "Most bytes kept registered by a registration cache; unused regions beyond it are evicted (size or inf)",
};

/// `RUCX_RCACHE_ENABLE`: y (default) or n.
pub static RCACHE_ENABLE: ConfigVar = RCACHE_ENABLE_VAR;
/// `RUCX_RCACHE_MAX_REGIONS`: a count or `inf` (default).
pub static RCACHE_MAX_REGIONS: ConfigVar = RCACHE_MAX_REGIONS_VAR;
/// `RUCX_RCACHE_MAX_SIZE`: a size or `inf` (default).
pub static RCACHE_MAX_SIZE: ConfigVar = RCACHE_MAX_SIZE_VAR;

/// Registers and deregisters memory for a cache (a memory domain).
pub trait Registrar {
    /// The registration (a memory region handle, keys…).
    type Reg;
    /// Registers `len` bytes at `addr`.
    fn register(&mut self, addr: usize, len: usize) -> Result<Self::Reg>;
    /// Releases a registration made by `register(addr, len)`.
    fn deregister(&mut self, addr: usize, len: usize, reg: Self::Reg);
}

/// How an [`Rcache`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RcacheConfig {
    /// Cache registrations; `false` makes the cache a pass-through.
    pub enable: bool,
    /// Most regions cached (referenced ones are never evicted, so this can be exceeded).
    pub max_regions: usize,
    /// Most bytes cached (same caveat).
    pub max_size: usize,
    /// Registered ranges are widened to this alignment (a power of two; the page size).
    pub alignment: usize,
}

impl Default for RcacheConfig {
    fn default() -> Self {
        RcacheConfig {
            enable: true,
            max_regions: usize::MAX,
            max_size: usize::MAX,
            alignment: 4096,
        }
    }
}

impl RcacheConfig {
    /// Defaults overridden by `RUCX_RCACHE_ENABLE`, `RUCX_RCACHE_MAX_REGIONS` and
    /// `RUCX_RCACHE_MAX_SIZE`; a bad value gives [`Error::Config`] naming it.
    pub fn from_env() -> Result<Self> {
        let to_usize = |s: Size| usize::try_from(s.bytes()).unwrap_or(usize::MAX);
        let max_regions = match RCACHE_MAX_REGIONS.raw().trim() {
            t if t.eq_ignore_ascii_case("inf") => usize::MAX,
            t => t.parse().map_err(|_| {
                Error::Config(format!(
                    "{}={t:?}: accepted: a non-negative integer or inf",
                    RCACHE_MAX_REGIONS.env_name()
                ))
            })?,
        };
        Ok(RcacheConfig {
            enable: RCACHE_ENABLE.bool()?,
            max_regions,
            max_size: to_usize(RCACHE_MAX_SIZE.size()?),
            ..Default::default()
        })
    }
}

/// Counters of an [`Rcache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RcacheStats {
    /// Lookups served by a cached region.
    pub hits: u64,
    /// Lookups that registered memory.
    pub misses: u64,
    /// Unreferenced regions deregistered to respect the limits.
    pub evictions: u64,
    /// Regions removed by [`Rcache::invalidate`].
    pub invalidations: u64,
    /// Regions in the cache now.
    pub regions: usize,
    /// Bytes covered by cached regions now.
    pub bytes: usize,
}

struct RegionData<R> {
    start: usize,
    end: usize,
    reg: R,
}

struct Entry<R> {
    data: Rc<RegionData<R>>,
    refs: usize,
    /// In the lookup tree (cached); false once invalidated or merged, or in pass-through mode.
    in_tree: bool,
    lru_prev: Option<usize>,
    lru_next: Option<usize>,
    in_lru: bool,
}

struct Inner<M: Registrar> {
    cfg: RcacheConfig,
    registrar: M,
    entries: Slab<Entry<M::Reg>>,
    /// Cached regions by start address; they never overlap.
    tree: BTreeMap<usize, usize>,
    /// Least recently released unreferenced region first.
    lru_head: Option<usize>,
    lru_tail: Option<usize>,
    bytes: usize,
    stats: RcacheStats,
}

impl<M: Registrar> Inner<M> {
    fn lru_unlink(&mut self, id: usize) {
        let (prev, next) = {
            let e = &mut self.entries[id];
            if !e.in_lru {
                return;
            }
            e.in_lru = false;
            (e.lru_prev.take(), e.lru_next.take())
        };
        match prev {
            Some(p) => self.entries[p].lru_next = next,
            None => self.lru_head = next,
        }
        match next {
            Some(n) => self.entries[n].lru_prev = prev,
            None => self.lru_tail = prev,
        }
    }

    fn lru_push_back(&mut self, id: usize) {
        let tail = self.lru_tail;
        {
            let e = &mut self.entries[id];
            e.in_lru = true;
            e.lru_prev = tail;
            e.lru_next = None;
        }
        match tail {
            Some(t) => self.entries[t].lru_next = Some(id),
            None => self.lru_head = Some(id),
        }
        self.lru_tail = Some(id);
    }

    /// Removes an entry from the slab and deregisters it. Only for unreferenced entries.
    fn destroy(&mut self, id: usize) {
        let entry = self.entries.remove(id);
        debug_assert_eq!(entry.refs, 0);
        match Rc::try_unwrap(entry.data) {
            Ok(d) => self.registrar.deregister(d.start, d.end - d.start, d.reg),
            // Cannot happen: handles drop their `Rc` before releasing their reference.
            Err(d) => tracing::error!(
                start = d.start,
                end = d.end,
                "rcache region still shared when destroyed; registration leaked"
            ),
        }
    }

    /// Takes a cached region out of the lookup tree; destroys it now if unreferenced.
    fn remove_from_tree(&mut self, id: usize) {
        let (start, len) = {
            let e = &mut self.entries[id];
            e.in_tree = false;
            (e.data.start, e.data.end - e.data.start)
        };
        self.tree.remove(&start);
        self.bytes -= len;
        self.lru_unlink(id);
        if self.entries[id].refs == 0 {
            self.destroy(id);
        }
    }

    fn over_limits(&self) -> bool {
        self.tree.len() > self.cfg.max_regions || self.bytes > self.cfg.max_size
    }

    fn evict(&mut self) {
        while self.over_limits() {
            let Some(id) = self.lru_head else { break };
            self.remove_from_tree(id);
            self.stats.evictions += 1;
        }
    }

    fn acquire(&mut self, id: usize) -> Rc<RegionData<M::Reg>> {
        self.lru_unlink(id);
        let e = &mut self.entries[id];
        e.refs += 1;
        Rc::clone(&e.data)
    }

    fn release(&mut self, id: usize) {
        let e = &mut self.entries[id];
        e.refs -= 1;
        if e.refs > 0 {
            return;
        }
        if e.in_tree {
            self.lru_push_back(id);
            self.evict();
        } else {
            self.destroy(id);
        }
    }

    /// Ids of cached regions overlapping `[start, end)`.
    fn overlapping(&self, start: usize, end: usize) -> Vec<usize> {
        self.tree
            .range(..end)
            .rev()
            .take_while(|(_, &id)| self.entries[id].data.end > start)
            .map(|(_, &id)| id)
            .collect()
    }

    fn insert(&mut self, start: usize, end: usize, reg: M::Reg, in_tree: bool) -> usize {
        let id = self.entries.insert(Entry {
            data: Rc::new(RegionData { start, end, reg }),
            refs: 1,
            in_tree,
            lru_prev: None,
            lru_next: None,
            in_lru: false,
        });
        if in_tree {
            self.tree.insert(start, id);
            self.bytes += end - start;
        }
        id
    }
}

impl<M: Registrar> Drop for Inner<M> {
    fn drop(&mut self) {
        // Every `Region` holds the cache, so nothing is referenced any more.
        let ids: Vec<usize> = self.entries.iter().map(|(id, _)| id).collect();
        for id in ids {
            self.destroy(id);
        }
    }
}

/// A registration cache over a [`Registrar`]. Single-threaded; cloning gives another handle to
/// the same cache.
pub struct Rcache<M: Registrar> {
    inner: Rc<RefCell<Inner<M>>>,
}

impl<M: Registrar> Clone for Rcache<M> {
    fn clone(&self) -> Self {
        Rcache {
            inner: Rc::clone(&self.inner),
        }
    }
}

impl<M: Registrar> fmt::Debug for Rcache<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rcache")
            .field("stats", &self.stats())
            .finish()
    }
}

fn align_down(x: usize, a: usize) -> usize {
    x & !(a - 1)
}

fn align_up(x: usize, a: usize) -> usize {
    x.checked_next_multiple_of(a).unwrap_or(x)
}

impl<M: Registrar> Rcache<M> {
    /// A cache over `registrar`. Gives [`Error::InvalidParam`] for an alignment that is not a
    /// power of two.
    pub fn new(registrar: M, cfg: RcacheConfig) -> Result<Self> {
        if !cfg.alignment.is_power_of_two() {
            return Err(Error::InvalidParam(format!(
                "rcache alignment {} is not a power of two",
                cfg.alignment
            )));
        }
        Ok(Rcache {
            inner: Rc::new(RefCell::new(Inner {
                cfg,
                registrar,
                entries: Slab::new(),
                tree: BTreeMap::new(),
                lru_head: None,
                lru_tail: None,
                bytes: 0,
                stats: RcacheStats::default(),
            })),
        })
    }

    /// A registered region covering `len` bytes at `addr`: a cached one if one covers the
    /// range, otherwise a new registration (page-aligned, merged with overlapping cached
    /// regions). Gives [`Error::InvalidParam`] for an empty or wrapping range, and the
    /// registrar's error if registration fails.
    pub fn get(&self, addr: usize, len: usize) -> Result<Region<M>> {
        if len == 0 {
            return Err(Error::InvalidParam(
                "cannot register an empty memory range".into(),
            ));
        }
        let end = addr.checked_add(len).ok_or_else(|| {
            Error::InvalidParam(format!("memory range {addr:#x}+{len} wraps around"))
        })?;
        let mut inner = self.inner.borrow_mut();
        if !inner.cfg.enable {
            let reg = inner.registrar.register(addr, len)?;
            inner.stats.misses += 1;
            let id = inner.insert(addr, end, reg, false);
            let data = Rc::clone(&inner.entries[id].data);
            return Ok(self.handle(id, data));
        }
        let hit = inner
            .tree
            .range(..=addr)
            .next_back()
            .map(|(_, &id)| id)
            .filter(|&id| inner.entries[id].data.end >= end);
        if let Some(id) = hit {
            inner.stats.hits += 1;
            let data = inner.acquire(id);
            return Ok(self.handle(id, data));
        }
        let align = inner.cfg.alignment;
        let (mut start, mut stop) = (align_down(addr, align), align_up(end, align));
        for id in inner.overlapping(start, stop) {
            start = start.min(inner.entries[id].data.start);
            stop = stop.max(inner.entries[id].data.end);
            inner.remove_from_tree(id);
        }
        let reg = inner.registrar.register(start, stop - start)?;
        inner.stats.misses += 1;
        let id = inner.insert(start, stop, reg, true);
        let data = Rc::clone(&inner.entries[id].data);
        inner.evict();
        Ok(self.handle(id, data))
    }

    fn handle(&self, id: usize, data: Rc<RegionData<M::Reg>>) -> Region<M> {
        Region {
            data: Some(data),
            id,
            cache: Rc::clone(&self.inner),
        }
    }

    /// Removes every cached region overlapping `len` bytes at `addr` (call it when that memory
    /// is unmapped). Unreferenced regions are deregistered now, referenced ones when their last
    /// [`Region`] drops; later lookups register afresh. Gives the number of regions removed.
    pub fn invalidate(&self, addr: usize, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let end = addr.saturating_add(len);
        let mut inner = self.inner.borrow_mut();
        let ids = inner.overlapping(addr, end);
        for &id in &ids {
            inner.remove_from_tree(id);
        }
        inner.stats.invalidations += ids.len() as u64;
        ids.len()
    }

    /// Deregisters every unreferenced cached region. Gives the number deregistered.
    pub fn purge(&self) -> usize {
        let mut inner = self.inner.borrow_mut();
        let mut n = 0;
        while let Some(id) = inner.lru_head {
            inner.remove_from_tree(id);
            n += 1;
        }
        n
    }

    /// Counters and current size.
    pub fn stats(&self) -> RcacheStats {
        let inner = self.inner.borrow();
        RcacheStats {
            regions: inner.tree.len(),
            bytes: inner.bytes,
            ..inner.stats
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> RcacheConfig {
        self.inner.borrow().cfg.clone()
    }

    /// Runs `f` on the registrar (for example to query the memory domain).
    pub fn with_registrar<T>(&self, f: impl FnOnce(&mut M) -> T) -> T {
        f(&mut self.inner.borrow_mut().registrar)
    }
}

/// A reference to a registered region from [`Rcache::get`]; the registration lives at least as
/// long as this. Cloning takes another reference.
pub struct Region<M: Registrar> {
    /// Always `Some` except inside `drop`.
    data: Option<Rc<RegionData<M::Reg>>>,
    id: usize,
    cache: Rc<RefCell<Inner<M>>>,
}

impl<M: Registrar> Region<M> {
    fn data(&self) -> &RegionData<M::Reg> {
        match &self.data {
            Some(d) => d,
            None => unreachable!("a Region's data is only taken in drop"),
        }
    }
    /// The registration value.
    pub fn reg(&self) -> &M::Reg {
        &self.data().reg
    }
    /// Start of the registered range (at or below the requested address).
    pub fn start(&self) -> usize {
        self.data().start
    }
    /// Length of the registered range (covers the requested range).
    pub fn len(&self) -> usize {
        self.data().end - self.data().start
    }
    /// True for an empty range (never, for regions from `get`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether `len` bytes at `addr` lie inside the registered range.
    pub fn covers(&self, addr: usize, len: usize) -> bool {
        addr >= self.data().start
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.data().end)
    }
}

impl<M: Registrar> Clone for Region<M> {
    fn clone(&self) -> Self {
        let data = self.cache.borrow_mut().acquire(self.id);
        Region {
            data: Some(data),
            id: self.id,
            cache: Rc::clone(&self.cache),
        }
    }
}

impl<M: Registrar> Drop for Region<M> {
    fn drop(&mut self) {
        // Drop our share of the data first so the cache can take the registration back.
        self.data = None;
        self.cache.borrow_mut().release(self.id);
    }
}

impl<M: Registrar> fmt::Debug for Region<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Region({:#x}+{})", self.start(), self.len())
    }
}

#[cfg(test)]
mod tests_support {
    use super::*;

    #[derive(Default)]
    pub(super) struct Log {
        pub(super) next: u32,
        pub(super) live: Vec<(usize, usize, u32)>,
        pub(super) registered: usize,
        pub(super) deregistered: usize,
        pub(super) fail: bool,
    }

    #[derive(Clone, Default)]
    pub(super) struct FakeMd(pub(super) Rc<RefCell<Log>>);

    impl Registrar for FakeMd {
        type Reg = u32;
        fn register(&mut self, addr: usize, len: usize) -> Result<u32> {
            let mut log = self.0.borrow_mut();
            if log.fail {
                return Err(Error::NoMemory("fake registration failure".into()));
            }
            log.next += 1;
            let key = log.next;
            log.live.push((addr, len, key));
            log.registered += 1;
            Ok(key)
        }
        fn deregister(&mut self, addr: usize, len: usize, reg: u32) {
            let mut log = self.0.borrow_mut();
            let pos = log
                .live
                .iter()
                .position(|&r| r == (addr, len, reg))
                .expect("deregistering something registered, once");
            log.live.remove(pos);
            log.deregistered += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;

    fn cache(cfg: RcacheConfig) -> (Rcache<FakeMd>, FakeMd) {
        let md = FakeMd::default();
        (Rcache::new(md.clone(), cfg).unwrap(), md)
    }

    const PAGE: usize = 4096;

    #[test]
    fn hit_reuses_covering_region() {
        let (rc, md) = cache(RcacheConfig::default());
        let a = rc.get(0x10_100, 100).unwrap();
        assert_eq!(a.start(), 0x10_000, "aligned down to the page");
        assert_eq!(a.len(), PAGE);
        assert!(a.covers(0x10_100, 100));
        let b = rc.get(0x10_800, 200).unwrap();
        assert_eq!(b.reg(), a.reg(), "same registration");
        let s = rc.stats();
        assert_eq!((s.hits, s.misses, s.regions, s.bytes), (1, 1, 1, PAGE));
        assert_eq!(md.0.borrow().registered, 1);
    }

    #[test]
    fn unreferenced_region_stays_cached_until_invalidated() {
        let (rc, md) = cache(RcacheConfig::default());
        let key = *rc.get(0x20_000, 10).unwrap().reg();
        assert_eq!(md.0.borrow().live.len(), 1, "kept after the last reference");
        assert_eq!(*rc.get(0x20_010, 10).unwrap().reg(), key);
        assert_eq!(rc.invalidate(0x20_fff, 1), 1);
        assert_eq!(
            md.0.borrow().live.len(),
            0,
            "unreferenced: deregistered at once"
        );
        let again = rc.get(0x20_010, 10).unwrap();
        assert_ne!(*again.reg(), key, "registered afresh after invalidation");
        assert_eq!(rc.stats().invalidations, 1);
    }

    #[test]
    fn invalidate_defers_deregistration_of_referenced_region() {
        let (rc, md) = cache(RcacheConfig::default());
        let a = rc.get(0x30_000, 100).unwrap();
        let a2 = a.clone();
        assert_eq!(rc.invalidate(0x30_000, PAGE), 1);
        assert_eq!(rc.stats().regions, 0);
        assert_eq!(md.0.borrow().live.len(), 1, "still referenced");
        drop(a);
        assert_eq!(md.0.borrow().live.len(), 1, "a clone still refers to it");
        assert_eq!(*a2.reg(), 1);
        drop(a2);
        assert_eq!(md.0.borrow().live.len(), 0);
        assert_eq!(
            rc.invalidate(0x30_000, PAGE),
            0,
            "nothing left to invalidate"
        );
    }

    #[test]
    fn overlapping_miss_merges_regions() {
        let (rc, md) = cache(RcacheConfig::default());
        let a = rc.get(0, PAGE).unwrap();
        drop(rc.get(3 * PAGE, PAGE).unwrap());
        // Overlaps both: one merged region [0, 4 pages).
        let m = rc.get(PAGE / 2, 3 * PAGE).unwrap();
        assert_eq!((m.start(), m.len()), (0, 4 * PAGE));
        let s = rc.stats();
        assert_eq!((s.regions, s.bytes), (1, 4 * PAGE));
        // The unreferenced old region is gone; the referenced one waits for `a`.
        assert_eq!(md.0.borrow().live.len(), 2);
        drop(a);
        assert_eq!(md.0.borrow().live, vec![(0, 4 * PAGE, 3)]);
        assert_eq!(
            *rc.get(2 * PAGE, 10).unwrap().reg(),
            3,
            "hit on merged region"
        );
    }

    #[test]
    fn lru_eviction_by_count_spares_referenced_regions() {
        let (rc, md) = cache(RcacheConfig {
            max_regions: 2,
            ..Default::default()
        });
        let held = rc.get(0, 1).unwrap();
        drop(rc.get(10 * PAGE, 1).unwrap()); // key 2, unreferenced
        drop(rc.get(20 * PAGE, 1).unwrap()); // key 3: over the limit, evicts key 2 (LRU)
        let keys: Vec<u32> = md.0.borrow().live.iter().map(|r| r.2).collect();
        assert_eq!(keys, vec![1, 3]);
        assert_eq!(rc.stats().evictions, 1);
        drop(rc.get(30 * PAGE, 1).unwrap()); // evicts key 3; key 1 is referenced
        let keys: Vec<u32> = md.0.borrow().live.iter().map(|r| r.2).collect();
        assert_eq!(keys, vec![1, 4]);
        drop(held);
        assert_eq!(rc.stats().regions, 2);
    }

    #[test]
    fn lru_order_follows_use() {
        let (rc, md) = cache(RcacheConfig {
            max_regions: 2,
            ..Default::default()
        });
        drop(rc.get(0, 1).unwrap()); // key 1
        drop(rc.get(PAGE * 10, 1).unwrap()); // key 2
        drop(rc.get(0, 1).unwrap()); // touch key 1: key 2 is now least recent
        drop(rc.get(PAGE * 20, 1).unwrap()); // key 3 evicts key 2
        let keys: Vec<u32> = md.0.borrow().live.iter().map(|r| r.2).collect();
        assert_eq!(keys, vec![1, 3]);
    }

    #[test]
    fn eviction_by_size() {
        let (rc, md) = cache(RcacheConfig {
            max_size: 3 * PAGE,
            ..Default::default()
        });
        drop(rc.get(0, 2 * PAGE).unwrap());
        drop(rc.get(10 * PAGE, 2 * PAGE).unwrap());
        assert_eq!(rc.stats().bytes, 2 * PAGE);
        assert_eq!(md.0.borrow().live.len(), 1);
        assert_eq!(md.0.borrow().live[0].0, 10 * PAGE);
    }

    #[test]
    fn pass_through_registers_every_time() {
        let (rc, md) = cache(RcacheConfig {
            enable: false,
            ..Default::default()
        });
        let a = rc.get(0x1234, 10).unwrap();
        assert_eq!((a.start(), a.len()), (0x1234, 10), "exact range");
        let b = rc.get(0x1234, 10).unwrap();
        assert_ne!(a.reg(), b.reg());
        drop(a);
        assert_eq!(md.0.borrow().live.len(), 1, "deregistered on drop");
        drop(b);
        assert_eq!(md.0.borrow().live.len(), 0);
        assert_eq!(rc.stats().regions, 0);
        assert_eq!(rc.stats().misses, 2);
    }

    #[test]
    fn bad_ranges_and_failures_are_errors() {
        let (rc, md) = cache(RcacheConfig::default());
        assert!(matches!(rc.get(0x1000, 0), Err(Error::InvalidParam(_))));
        assert!(matches!(rc.get(usize::MAX, 2), Err(Error::InvalidParam(_))));
        md.0.borrow_mut().fail = true;
        assert!(matches!(rc.get(0x1000, 8), Err(Error::NoMemory(_))));
        assert_eq!(rc.stats().regions, 0);
        md.0.borrow_mut().fail = false;
        assert!(rc.get(0x1000, 8).is_ok());
        assert!(matches!(
            Rcache::new(
                md,
                RcacheConfig {
                    alignment: 3,
                    ..Default::default()
                }
            ),
            Err(Error::InvalidParam(_))
        ));
    }

    #[test]
    fn top_of_address_space_does_not_overflow() {
        let (rc, _md) = cache(RcacheConfig::default());
        let r = rc.get(usize::MAX - 10, 10).unwrap();
        assert!(r.covers(usize::MAX - 10, 10));
    }

    #[test]
    fn dropping_cache_deregisters_everything() {
        let (rc, md) = cache(RcacheConfig::default());
        drop(rc.get(0, 1).unwrap());
        let held = rc.get(10 * PAGE, 1).unwrap();
        assert_eq!(rc.purge(), 1);
        assert_eq!(md.0.borrow().live.len(), 1);
        drop(rc.get(20 * PAGE, 1).unwrap());
        drop(rc);
        assert_eq!(
            md.0.borrow().live.len(),
            2,
            "a region keeps the cache alive"
        );
        drop(held);
        assert_eq!(md.0.borrow().live.len(), 0);
        assert_eq!(md.0.borrow().registered, md.0.borrow().deregistered);
    }

    #[test]
    fn config_from_env() {
        assert!(RcacheConfig::default().enable);
        std::env::set_var("RUCX_RCACHE_ENABLE", "n");
        std::env::set_var("RUCX_RCACHE_MAX_REGIONS", "17");
        std::env::set_var("RUCX_RCACHE_MAX_SIZE", "1m");
        let cfg = RcacheConfig::from_env();
        std::env::set_var("RUCX_RCACHE_MAX_REGIONS", "lots");
        let bad = RcacheConfig::from_env();
        std::env::remove_var("RUCX_RCACHE_ENABLE");
        std::env::remove_var("RUCX_RCACHE_MAX_REGIONS");
        std::env::remove_var("RUCX_RCACHE_MAX_SIZE");
        let cfg = cfg.unwrap();
        assert!(!cfg.enable);
        assert_eq!(cfg.max_regions, 17);
        assert_eq!(cfg.max_size, 1 << 20);
        let err = bad.unwrap_err().to_string();
        assert!(
            err.contains("RUCX_RCACHE_MAX_REGIONS") && err.contains("lots"),
            "{err}"
        );
        assert_eq!(RcacheConfig::from_env().unwrap(), RcacheConfig::default());
    }
}

#[cfg(test)]
mod model_tests {
    use super::tests_support::*;
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Get { page: usize, off: usize, len: usize },
        Drop(usize),
        Invalidate { page: usize, pages: usize },
        Purge,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..32usize, 0..4096usize, 1..12_000usize)
                .prop_map(|(page, off, len)| Op::Get { page, off, len }),
            3 => (0..16usize).prop_map(Op::Drop),
            1 => (0..32usize, 1..4usize).prop_map(|(page, pages)| Op::Invalidate { page, pages }),
            1 => Just(Op::Purge),
        ]
    }

    proptest! {
        /// Random get/drop/invalidate/purge sequences against the invariants: every region
        /// covers its request and stays registered while held; cached regions never overlap and
        /// respect the limits when nothing is held; nothing is leaked or deregistered twice.
        #[test]
        fn rcache_invariants_hold(ops in proptest::collection::vec(op(), 1..60),
                                  max_regions in 1..6usize,
                                  enable in proptest::bool::weighted(0.8)) {
            let md = FakeMd::default();
            let rc = Rcache::new(md.clone(), RcacheConfig {
                enable,
                max_regions,
                ..Default::default()
            }).unwrap();
            let mut held: Vec<(Region<FakeMd>, usize, usize)> = Vec::new();
            for op in ops {
                match op {
                    Op::Get { page, off, len } => {
                        let addr = page * 4096 + off;
                        let r = rc.get(addr, len).unwrap();
                        prop_assert!(r.covers(addr, len));
                        held.push((r, addr, len));
                    }
                    Op::Drop(i) => {
                        if !held.is_empty() {
                            held.remove(i % held.len());
                        }
                    }
                    Op::Invalidate { page, pages } => {
                        rc.invalidate(page * 4096, pages * 4096);
                    }
                    Op::Purge => {
                        rc.purge();
                    }
                }
                let log = md.0.borrow();
                // Every held region is still registered, with its own key and range.
                for (r, _, _) in &held {
                    prop_assert!(log.live.contains(&(r.start(), r.len(), *r.reg())));
                }
                // Cached regions do not overlap.
                let inner = rc.inner.borrow();
                let mut prev_end = 0;
                for (&start, &id) in &inner.tree {
                    prop_assert!(start >= prev_end);
                    prev_end = inner.entries[id].data.end;
                }
                // Each live registration is known to the cache (no leak).
                prop_assert_eq!(log.live.len(), inner.entries.len());
                if held.is_empty() {
                    prop_assert!(inner.tree.len() <= max_regions);
                }
            }
            drop(held);
            rc.purge();
            prop_assert_eq!(rc.stats().regions, 0);
            prop_assert!(md.0.borrow().live.is_empty());
        }
    }
}
