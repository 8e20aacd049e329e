//! `rc_verbs`: RDMA over reliable-connected queue pairs, through libibverbs.
//!
//! - **Devices** are named as UCX names them, `<ibdev>:<port>` (`mlx5_0:1`, `rxe0:1`); only
//!   active ports are listed. Without libibverbs or without kernel RDMA support, [`RcVerbs`]'s
//!   `devices()` says why and every other transport keeps working (the library is loaded at run
//!   time by [`ffi`], never linked).
//! - **Memory domain** ([`RcVerbsMd`]): one protection domain per device; `mem_reg` is
//!   `ibv_reg_mr` with local write, remote read/write/atomic access; rkeys pack as
//!   [`wire::PackedRkey`]; `mem_reg` goes through `ucs::rcache` (`RUCX_RCACHE_ENABLE=n` turns it
//!   off; see [`RcVerbsMd::invalidate`]).
//! - **Interface** ([`RcVerbsIface`]): send and receive CQs on one completion channel (the event
//!   fd), a registered pool of send bounce buffers, and per-endpoint registered receive buffers.
//! - **Endpoints** ([`RcVerbsEp`]) are RC QPs connected endpoint-to-endpoint: [`wire::EpAddr`]
//!   carries QPN, PSN and the flow-control word; RESET→INIT at creation, INIT→RTR→RTS at
//!   `connect_to_ep` with timeout/retry from `RUCX_RC_TIMEOUT`, `RUCX_RC_RETRY_COUNT`,
//!   `RUCX_RC_RNR_RETRY_COUNT`. On RoCE the GID index is the RoCE v2 IPv4-mapped entry unless
//!   `RUCX_IB_GID_INDEX` says otherwise.
//! - **Flow control**: a sender may have at most as many active messages outstanding as the
//!   peer endpoint posted receives; the receiver reports the running count of buffers it has
//!   reposted in the immediate data of each active message it sends back (a send with
//!   immediate: no extra work request, so a ping-pong never sends credits on their own), and,
//!   when a quarter of its receives plus one repost batch were reposted with no message going
//!   back, by RDMA-writing it into a word of the sender's memory (no receive consumed, so the
//!   credit channel cannot deadlock). Consumed receive buffers are reposted in batches of up
//!   to 16 (a quarter of the queue if less), one chained `ibv_post_recv` each, as UCX batches
//!   its receive posts. Sends are signaled every `RUCX_RC_TX_MODERATION` work requests (default 64, as
//!   UCX's `RC_TX_CQ_MODERATION`) or when a completion is needed; a completion frees the
//!   send-queue slots of every request up to it (RC completes in order), and only requests
//!   that owe something (a buffer, a completion) are remembered. Progress polls the receive
//!   CQ first and the send CQ only while a signaled request is in flight (else on one call in
//!   16, for an unsignaled request's error completion). A full send queue or no
//!   credits give `NoResource`, and queued pending requests are retried from progress. Any
//!   error completion fails the endpoint: its outstanding operations complete with the error
//!   and `EventSink::ep_error` is called once.
//! - **Tag offload** ([`tag`]): done by the interface in software (rxe has no tag-matching
//!   hardware): receives posted to the interface, tagged messages matched as they arrive,
//!   eager data copied into the posted buffer, a matched rendezvous read by RDMA READ
//!   straight into it. The module docs say where a hardware TM-SRQ (mlx5) would plug in.
//! - **Event fd caveat**: credits written by RDMA raise no completion event; while
//!   an endpoint waits for credits with requests pending, `event_arm` gives `Busy` (poll
//!   instead of sleeping).

mod ep;
pub mod ffi;
mod iface;
mod state;
pub mod tag;
pub mod wire;

pub use ep::RcVerbsEp;
pub use iface::RcVerbsIface;
pub(crate) use state::RegMem;

use crate::caps::{DeviceType, MdAttr, MdFlags, TlRoles};
use crate::md::{MemHandle, MemoryDomain, RemoteKey};
use crate::transport::{DeviceInfo, Transport};
use crate::IfaceParams;
use ffi::{Context, Mr, Pd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use ucs::config::ConfigVar;
use ucs::rcache::{Rcache, RcacheConfig, RcacheStats, Region, Registrar};
use ucs::{Error, Result};

/// The rc_verbs transport.
pub struct RcVerbs;

/// `RUCX_IB_GID_INDEX`: GID table index to use (`auto`: the RoCE v2 IPv4-mapped entry on RoCE, 0
/// on InfiniBand).
pub const GID_INDEX: ConfigVar = ConfigVar {
    name: "IB_GID_INDEX",
    default: "auto",
    doc: "GID table index for RoCE/IB addressing; auto picks the RoCE v2 IPv4-mapped entry",
};
/// `RUCX_RC_TX_QUEUE_LEN`: send queue depth of each QP.
pub const TX_QUEUE_LEN: ConfigVar = ConfigVar {
    name: "RC_TX_QUEUE_LEN",
    default: "128",
    doc: "send work requests outstanding per rc_verbs endpoint",
};
/// `RUCX_RC_RX_QUEUE_LEN`: receive buffers posted per endpoint (the peer's send credits).
pub const RX_QUEUE_LEN: ConfigVar = ConfigVar {
    name: "RC_RX_QUEUE_LEN",
    default: "64",
    doc: "receive buffers per rc_verbs endpoint (active-message credits of the peer)",
};
/// `RUCX_RC_SEG_SIZE`: size of a send or receive buffer (largest active message + 1).
pub const SEG_SIZE: ConfigVar = ConfigVar {
    name: "RC_SEG_SIZE",
    default: "8k",
    doc: "rc_verbs bounce/receive buffer size; bounds am_bcopy/am_zcopy and put/get_bcopy",
};
/// `RUCX_RC_TX_BUFS`: bounce buffers per interface.
pub const TX_BUFS: ConfigVar = ConfigVar {
    name: "RC_TX_BUFS",
    default: "256",
    doc: "registered send bounce buffers per rc_verbs interface",
};
/// `RUCX_RC_TX_MODERATION`: signal one send in N.
pub const TX_MODERATION: ConfigVar = ConfigVar {
    name: "RC_TX_MODERATION",
    default: "64",
    doc: "request a send completion every N work requests (completion moderation)",
};
/// `RUCX_RC_MAX_INLINE`: inline data requested per QP.
pub const MAX_INLINE: ConfigVar = ConfigVar {
    name: "RC_MAX_INLINE",
    default: "128",
    doc: "bytes sent inline in the work request (bounds am_short and put_short)",
};
/// `RUCX_RC_CQ_LEN`: completion-queue length (bounds the number of endpoints).
pub const CQ_LEN: ConfigVar = ConfigVar {
    name: "RC_CQ_LEN",
    default: "8192",
    doc: "entries of each rc_verbs completion queue (endpoints x queue length must fit)",
};
/// `RUCX_RC_TIMEOUT`: transport retry timeout.
pub const TIMEOUT: ConfigVar = ConfigVar {
    name: "RC_TIMEOUT",
    default: "1s",
    doc: "RC ack timeout before a retransmission (rounded to 4.096us x 2^n)",
};
/// `RUCX_RC_RETRY_COUNT`: transport retries before the endpoint fails. The default is 6, not
/// UCX's 7: Soft-RoCE (rxe) treats 7 as "retry forever", so a dead peer would never be reported.
pub const RETRY_COUNT: ConfigVar = ConfigVar {
    name: "RC_RETRY_COUNT",
    default: "6",
    doc: "RC retransmissions before the endpoint fails (0-7; rxe retries forever with 7)",
};
/// `RUCX_RC_RNR_RETRY_COUNT`: receiver-not-ready retries (7 = forever).
pub const RNR_RETRY_COUNT: ConfigVar = ConfigVar {
    name: "RC_RNR_RETRY_COUNT",
    default: "7",
    doc: "RC receiver-not-ready retries (0-7, 7 means unlimited)",
};

/// `RUCX_RC_TM_RNDV_SPLIT`: tag-offload rendezvous at least this long are split between the
/// receiver's RDMA READ of the head and the sender's RDMA WRITE of the tail (matched ones, and
/// the get of one that went unexpected: `tag/get.rs`). The split buys a second CPU for the
/// copying on a software device (rxe copies a READ on the reader's CPU, a WRITE on the
/// writer's) and costs a write request and a report. Default 32k, measured in the Soft-RoCE VM
/// (tag_bw, offload on, split against not split, alternating in one boot): 32 KiB 18.7 against
/// 12.3 MB/s (medians of 4, split faster in each round), 16 KiB 1.0-1.3x, 8 KiB 0.8x (slower).
pub const TM_RNDV_SPLIT: ConfigVar = ConfigVar {
    name: "RC_TM_RNDV_SPLIT",
    default: "32k",
    doc: "tag-offload rendezvous of at least this size (matched, or read by a get after going \
          unexpected) are moved half by the receiver's RDMA READ, half by the sender's RDMA \
          WRITE (inf: READ only)",
};

/// Every rc_verbs configuration variable, registered with `ucs::config::register` when the
/// transport is queried or opened (so the unknown-variable check knows them).
pub static RC_VERBS_VARS: [ConfigVar; 12] = [
    GID_INDEX,
    TX_QUEUE_LEN,
    RX_QUEUE_LEN,
    SEG_SIZE,
    TX_BUFS,
    TX_MODERATION,
    MAX_INLINE,
    CQ_LEN,
    TIMEOUT,
    RETRY_COUNT,
    RNR_RETRY_COUNT,
    TM_RNDV_SPLIT,
];

pub(crate) fn uint_var(v: &ConfigVar, min: u64, max: u64) -> Result<u64> {
    let n = v
        .uint_or_auto()?
        .ok_or_else(|| Error::Config(format!("{} must be a number, not auto", v.env_name())))?;
    if !(min..=max).contains(&n) {
        return Err(Error::Config(format!(
            "{}={n}: accepted {min}..={max}",
            v.env_name()
        )));
    }
    Ok(n)
}

/// The configuration an interface runs with.
#[derive(Debug, Clone)]
pub(crate) struct RcConfig {
    pub tx_queue_len: u32,
    pub rx_queue_len: u32,
    pub seg_size: usize,
    pub tx_bufs: u32,
    pub moderation: u32,
    pub max_inline: u32,
    pub cq_len: u32,
    pub timeout: u8,
    pub retry_count: u8,
    pub rnr_retry: u8,
    /// Shortest tag-offload rendezvous that is split (`u64::MAX`: none).
    pub tm_split: u64,
}

impl RcConfig {
    pub(crate) fn from_env() -> Result<Self> {
        let seg = SEG_SIZE.size()?.bytes();
        if !(64..=(1 << 20)).contains(&seg) {
            return Err(Error::Config(format!(
                "RUCX_RC_SEG_SIZE={seg}: accepted 64..=1m"
            )));
        }
        let tx_queue_len = uint_var(&TX_QUEUE_LEN, 4, 16384)? as u32;
        let moderation = (uint_var(&TX_MODERATION, 1, 1024)? as u32).min(tx_queue_len / 2);
        Ok(RcConfig {
            tx_queue_len,
            rx_queue_len: uint_var(&RX_QUEUE_LEN, 2, 16384)? as u32,
            seg_size: seg as usize,
            tx_bufs: uint_var(&TX_BUFS, 4, 65536)? as u32,
            moderation: moderation.max(1),
            max_inline: uint_var(&MAX_INLINE, 16, 1024)? as u32,
            cq_len: uint_var(&CQ_LEN, 64, 1 << 22)? as u32,
            timeout: ib_timeout_exponent(TIMEOUT.duration()?),
            retry_count: uint_var(&RETRY_COUNT, 0, 7)? as u8,
            rnr_retry: uint_var(&RNR_RETRY_COUNT, 0, 7)? as u8,
            tm_split: TM_RNDV_SPLIT.size()?.bytes(),
        })
    }
}

/// The IB timeout exponent `n` (timeout = 4.096 us * 2^n) closest above `t`, in 1..=31.
pub(crate) fn ib_timeout_exponent(t: std::time::Duration) -> u8 {
    let units = t.as_secs_f64() / 4.096e-6;
    let n = units.max(1.0).log2().ceil() as i64;
    n.clamp(1, 31) as u8
}

/// Splits `rxe0:1` into (`rxe0`, 1).
pub(crate) fn split_device(device: &str) -> Result<(&str, u8)> {
    let (dev, port) = device.rsplit_once(':').ok_or_else(|| {
        Error::NoDevice(format!(
            "rc_verbs device '{device}' must be <ibdev>:<port>, for example rxe0:1"
        ))
    })?;
    let port: u8 =
        port.parse().ok().filter(|&p| p >= 1).ok_or_else(|| {
            Error::NoDevice(format!("bad port number in rc_verbs device '{device}'"))
        })?;
    if dev.is_empty() {
        return Err(Error::NoDevice(format!("empty device name in '{device}'")));
    }
    Ok((dev, port))
}

/// GID type of an entry, from sysfs (`RoCE v2`, `IB/RoCE v1`).
fn gid_type(dev: &str, port: u8, index: u32) -> Option<String> {
    std::fs::read_to_string(format!(
        "/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}"
    ))
    .ok()
    .map(|s| s.trim().to_owned())
}

fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// Formats a GID as IPv6 text (`::ffff:10.0.0.1`, `fe80::…`).
pub(crate) fn gid_text(gid: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*gid).to_string()
}

/// Chooses the GID index: `RUCX_IB_GID_INDEX`, else on RoCE the first RoCE v2 entry holding an
/// IPv4-mapped address (then any RoCE v2 entry, then 0), on InfiniBand 0.
fn choose_gid(ctx: &Context, port: u8, attr: &ffi::ibv_port_attr) -> Result<(u32, [u8; 16])> {
    if let Some(i) = GID_INDEX.uint_or_auto()? {
        let i = u32::try_from(i)
            .ok()
            .filter(|&i| (i as i64) < attr.gid_tbl_len as i64)
            .ok_or_else(|| {
                Error::Config(format!(
                    "RUCX_IB_GID_INDEX={i} is outside the GID table of {}:{port} ({} entries)",
                    ctx.name(),
                    attr.gid_tbl_len
                ))
            })?;
        let gid = ctx.query_gid(port, i).map_err(Error::NoDevice)?;
        return Ok((i, gid.raw));
    }
    if attr.link_layer != ffi::IBV_LINK_LAYER_ETHERNET {
        let gid = ctx.query_gid(port, 0).map_err(Error::NoDevice)?;
        return Ok((0, gid.raw));
    }
    let mut any_v2 = None;
    let limit = attr.gid_tbl_len.clamp(0, 256) as u32;
    for i in 0..limit {
        let Ok(gid) = ctx.query_gid(port, i) else {
            continue;
        };
        if gid.raw == [0; 16] {
            continue;
        }
        if gid_type(ctx.name(), port, i).as_deref() == Some("RoCE v2") {
            if is_ipv4_mapped(&gid.raw) {
                return Ok((i, gid.raw));
            }
            any_v2.get_or_insert((i, gid.raw));
        }
    }
    if let Some(found) = any_v2 {
        return Ok(found);
    }
    let gid = ctx.query_gid(port, 0).map_err(Error::NoDevice)?;
    Ok((0, gid.raw))
}

/// Per-lane speed of `active_speed`, Gbit/s.
fn lane_gbps(speed: u8) -> f64 {
    match speed {
        1 => 2.5,
        2 => 5.0,
        4 | 8 => 10.0,
        16 => 14.0,
        32 => 25.0,
        64 => 50.0,
        128 => 100.0,
        _ => 0.0,
    }
}

fn lanes(width: u8) -> u32 {
    match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    }
}

/// An opened port: context, PD, and what we route with.
pub(crate) struct DevPort {
    pub pd: Arc<Pd>,
    pub port: u8,
    pub port_attr: ffi::ibv_port_attr,
    pub dev_attr: ffi::ibv_device_attr,
    pub gid_index: u32,
    pub gid: [u8; 16],
}

impl DevPort {
    fn open(device: &str) -> Result<Arc<DevPort>> {
        let (name, port) = split_device(device)?;
        let ctx = Context::open(name).map_err(Error::NoDevice)?;
        let dev_attr = ctx.query_device().map_err(Error::NoDevice)?;
        if port > dev_attr.phys_port_cnt {
            return Err(Error::NoDevice(format!(
                "{name} has {} port(s); there is no port {port}",
                dev_attr.phys_port_cnt
            )));
        }
        let port_attr = ctx.query_port(port).map_err(Error::NoDevice)?;
        let (gid_index, gid) = choose_gid(&ctx, port, &port_attr)?;
        let pd = Pd::alloc(&ctx).map_err(Error::NoDevice)?;
        Ok(Arc::new(DevPort {
            pd,
            port,
            port_attr,
            dev_attr,
            gid_index,
            gid,
        }))
    }
    pub(crate) fn ctx(&self) -> &Arc<Context> {
        &self.pd.ctx
    }
    pub(crate) fn is_roce(&self) -> bool {
        self.port_attr.link_layer == ffi::IBV_LINK_LAYER_ETHERNET
    }
    /// Link bandwidth, bytes per second.
    pub(crate) fn bandwidth(&self) -> f64 {
        lane_gbps(self.port_attr.active_speed) * lanes(self.port_attr.active_width) as f64 * 1e9
            / 8.0
    }
}

/// Interns a device name so it can be a `&'static str` (one leak per distinct name).
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(n);
    n
}

/// Access rights of every registration: local write, remote read, write and atomics.
const ACCESS: i32 = ffi::IBV_ACCESS_LOCAL_WRITE
    | ffi::IBV_ACCESS_REMOTE_WRITE
    | ffi::IBV_ACCESS_REMOTE_READ
    | ffi::IBV_ACCESS_REMOTE_ATOMIC;

/// Registers with `ibv_reg_mr` for the registration cache.
struct VerbsRegistrar {
    pd: Arc<Pd>,
}

impl Registrar for VerbsRegistrar {
    type Reg = Mr;
    fn register(&mut self, addr: usize, len: usize) -> Result<Mr> {
        // SAFETY: the cache registers ranges that `mem_reg` callers promised to keep mapped
        // while their handles live; a cached region outliving its handles is the cache's
        // documented contract (call `RcVerbsMd::invalidate` when unmapping).
        unsafe { Mr::register(&self.pd, addr as *mut u8, len, ACCESS) }.map_err(|e| {
            Error::NoMemory(format!(
                "ibv_reg_mr({addr:#x}, {len}): {e} (is the locked-memory limit, ulimit -l, too low?)"
            ))
        })
    }
    fn deregister(&mut self, _addr: usize, _len: usize, reg: Mr) {
        drop(reg);
    }
}

/// The `Rc`-based registration cache behind a mutex, so handles can move between threads.
struct SharedCache {
    cache: Mutex<Rcache<VerbsRegistrar>>,
}

// SAFETY: every use of the cache and of the `Rc`s inside it (lookups, region clones and region
// drops) happens while holding `cache`'s mutex: `get` and `invalidate` below lock it, and
// `CachedReg::drop` locks it before dropping its region. Nothing else reaches those `Rc`s.
unsafe impl Send for SharedCache {}
// SAFETY: as above.
unsafe impl Sync for SharedCache {}

/// A reference to a cached region, released under the cache's lock.
struct CachedReg {
    region: std::mem::ManuallyDrop<Region<VerbsRegistrar>>,
    cache: Arc<SharedCache>,
}

// SAFETY: the region's reference count is only touched under `cache`'s mutex (in drop); the
// keys are copied out at creation, so no other access happens.
unsafe impl Send for CachedReg {}
// SAFETY: as above.
unsafe impl Sync for CachedReg {}

impl Drop for CachedReg {
    fn drop(&mut self) {
        let _guard = self.cache.cache.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: dropped exactly once, here, under the cache's lock.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.region) };
    }
}

/// What keeps a handle's registration alive (held only to be dropped with the handle).
#[allow(dead_code)]
enum RegOwner {
    /// A registration of the domain's own allocation (MR dropped before the mapping).
    Owned(Mr, memmap2::MmapMut),
    /// A direct registration (`RUCX_RCACHE_ENABLE=n`).
    Direct(Mr),
    /// A reference to a cached registration.
    Cached(CachedReg),
}

/// What a verbs [`MemHandle`] carries: the keys and what keeps them valid.
pub(crate) struct RcMem {
    lkey: u32,
    rkey: u32,
    _owner: RegOwner,
}

impl RcMem {
    /// Local key for scatter/gather entries.
    pub(crate) fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key for peers.
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }
}

/// The rc_verbs memory domain: one protection domain on one device, with a registration cache
/// (`RUCX_RCACHE_ENABLE`, default on).
///
/// Without memory hooks the cache cannot see `munmap`: a program that unmaps registered memory
/// and maps new memory at the same address must call [`RcVerbsMd::invalidate`] first, or run
/// with `RUCX_RCACHE_ENABLE=n` (heap memory that is freed and reused without unmapping is fine).
pub struct RcVerbsMd {
    pub(crate) dev: Arc<DevPort>,
    name: &'static str,
    attr: MdAttr,
    cache: Option<Arc<SharedCache>>,
}

impl RcVerbsMd {
    pub(crate) fn open(device: &str) -> Result<Self> {
        let dev = DevPort::open(device)?;
        let name = intern(dev.ctx().name());
        let attr = MdAttr {
            flags: MdFlags::ALLOC | MdFlags::REG | MdFlags::NEED_RKEY,
            max_alloc: usize::MAX,
            max_reg: dev.dev_attr.max_mr_size as usize,
            rkey_packed_size: wire::PackedRkey::LEN,
            reg_cost: (16e-6, 0.06e-9),
        };
        let cfg = RcacheConfig::from_env()?;
        let cache = if cfg.enable {
            let registrar = VerbsRegistrar { pd: dev.pd.clone() };
            Some(Arc::new(SharedCache {
                cache: Mutex::new(Rcache::new(registrar, cfg)?),
            }))
        } else {
            None
        };
        Ok(RcVerbsMd {
            dev,
            name,
            attr,
            cache,
        })
    }

    /// Drops cached registrations overlapping `len` bytes at `addr`; call it before unmapping
    /// memory that was registered (handles still alive keep their registration until dropped).
    /// Gives the number of cached regions removed (0 without a cache).
    pub fn invalidate(&self, addr: usize, len: usize) -> usize {
        match &self.cache {
            Some(c) => c
                .cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .invalidate(addr, len),
            None => 0,
        }
    }

    /// Registration-cache counters (`None` when the cache is off).
    pub fn rcache_stats(&self) -> Option<RcacheStats> {
        self.cache
            .as_ref()
            .map(|c| c.cache.lock().unwrap_or_else(|e| e.into_inner()).stats())
    }
}

impl MemoryDomain for RcVerbsMd {
    fn name(&self) -> &'static str {
        self.name
    }
    fn attr(&self) -> &MdAttr {
        &self.attr
    }
    fn mem_alloc(&self, len: usize) -> Result<MemHandle> {
        if len == 0 {
            return Err(Error::InvalidParam("cannot allocate 0 bytes".into()));
        }
        let mut map = memmap2::MmapMut::map_anon(len)
            .map_err(|e| Error::NoMemory(format!("mmap of {len} bytes: {e}")))?;
        let addr = map.as_mut_ptr();
        // SAFETY: the mapping is owned by the RcMem stored in the handle, and the MR is dropped
        // before it.
        let mr = unsafe { Mr::register(&self.dev.pd, addr, len, ACCESS) }.map_err(|e| {
            Error::NoMemory(format!("ibv_reg_mr of {len} bytes on {}: {e}", self.name))
        })?;
        let mem = RcMem {
            lkey: mr.lkey(),
            rkey: mr.rkey(),
            _owner: RegOwner::Owned(mr, map),
        };
        let addr = NonNull::new(addr).ok_or_else(|| Error::NoMemory("mmap gave NULL".into()))?;
        // SAFETY: `mem` owns the mapping, which lives as long as the handle.
        Ok(unsafe { MemHandle::new(addr, len, self.name, Some(Box::new(mem))) })
    }
    unsafe fn mem_reg(&self, addr: NonNull<u8>, len: usize) -> Result<MemHandle> {
        if len == 0 {
            return Err(Error::InvalidParam("cannot register 0 bytes".into()));
        }
        let mem = match &self.cache {
            Some(shared) => {
                let region = shared
                    .cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(addr.as_ptr() as usize, len)?;
                RcMem {
                    lkey: region.reg().lkey(),
                    rkey: region.reg().rkey(),
                    _owner: RegOwner::Cached(CachedReg {
                        region: std::mem::ManuallyDrop::new(region),
                        cache: shared.clone(),
                    }),
                }
            }
            None => {
                // SAFETY: the caller keeps the range valid while the handle lives.
                let mr = unsafe { Mr::register(&self.dev.pd, addr.as_ptr(), len, ACCESS) }
                    .map_err(|e| {
                        Error::NoMemory(format!(
                            "ibv_reg_mr({addr:p}, {len}) on {}: {e} (is the locked-memory limit, ulimit -l, too low?)",
                            self.name
                        ))
                    })?;
                RcMem {
                    lkey: mr.lkey(),
                    rkey: mr.rkey(),
                    _owner: RegOwner::Direct(mr),
                }
            }
        };
        // SAFETY: forwarded from the caller's guarantee.
        Ok(unsafe { MemHandle::new(addr, len, self.name, Some(Box::new(mem))) })
    }
    fn rkey_pack(&self, memh: &MemHandle, out: &mut Vec<u8>) -> Result<()> {
        let mem = mem_of(memh, self.name)?;
        out.extend_from_slice(
            &wire::PackedRkey {
                rkey: mem.rkey(),
                base: memh.addr() as u64,
                len: memh.len() as u64,
            }
            .encode(),
        );
        Ok(())
    }
    fn rkey_unpack(&self, packed: &[u8]) -> Result<RemoteKey> {
        let k = wire::PackedRkey::decode(packed)?;
        Ok(RemoteKey::unmapped(k.base, k.len, k.rkey as u64))
    }
}

/// The verbs registration behind a handle, or an error naming the handle's real domain.
pub(crate) fn mem_of<'a>(memh: &'a MemHandle, md_name: &str) -> Result<&'a RcMem> {
    memh.tl_data::<RcMem>().ok_or_else(|| {
        Error::InvalidParam(format!(
            "memory handle of domain '{}' is not registered with rc_verbs device {md_name}",
            memh.md_name()
        ))
    })
}

impl Transport for RcVerbs {
    const NAME: &'static str = "rc_verbs";
    const ROLES: TlRoles = TlRoles::NEEDS_WIREUP_HELPER;
    type Md = RcVerbsMd;
    type Iface = RcVerbsIface;
    type Ep = RcVerbsEp;

    fn devices() -> std::result::Result<Vec<DeviceInfo>, String> {
        ucs::config::register(&RC_VERBS_VARS);
        let names = ffi::device_list().map_err(|e| e.to_string())?;
        if names.is_empty() {
            return Err("no RDMA devices found (libibverbs lists none)".into());
        }
        let mut out = Vec::new();
        let mut problems = Vec::new();
        for name in names {
            let ctx = match Context::open(&name) {
                Ok(c) => c,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            let Ok(dattr) = ctx.query_device() else {
                continue;
            };
            for port in 1..=dattr.phys_port_cnt {
                let Ok(pattr) = ctx.query_port(port) else {
                    continue;
                };
                if pattr.state != ffi::IBV_PORT_ACTIVE {
                    problems.push(format!("{name}:{port} is not active"));
                    continue;
                }
                let gid = match choose_gid(&ctx, port, &pattr) {
                    Ok((i, g)) => format!("GID index {i} ({})", gid_text(&g)),
                    Err(e) => format!("no usable GID ({e})"),
                };
                let ll = if pattr.link_layer == ffi::IBV_LINK_LAYER_ETHERNET {
                    "Ethernet (RoCE)".to_owned()
                } else {
                    format!("InfiniBand (LID {})", pattr.lid)
                };
                out.push(DeviceInfo {
                    name: format!("{name}:{port}"),
                    dev_type: DeviceType::Net,
                    details: format!(
                        "link layer {ll}, active MTU {}, {gid}, speed {} Gbps ({}x)",
                        ffi::mtu_bytes(pattr.active_mtu),
                        lane_gbps(pattr.active_speed) * lanes(pattr.active_width) as f64,
                        lanes(pattr.active_width)
                    ),
                });
            }
        }
        if out.is_empty() {
            return Err(format!(
                "no active RDMA port: {}",
                if problems.is_empty() {
                    "devices have no ports".into()
                } else {
                    problems.join("; ")
                }
            ));
        }
        Ok(out)
    }

    fn open_md(device: &str) -> Result<RcVerbsMd> {
        ucs::config::register(&RC_VERBS_VARS);
        RcVerbsMd::open(device)
    }

    fn open_iface(md: &RcVerbsMd, params: &IfaceParams) -> Result<RcVerbsIface> {
        let (dev, port) = split_device(&params.device)?;
        if dev != md.dev.ctx().name() || port != md.dev.port {
            return Err(Error::InvalidParam(format!(
                "interface device {} does not belong to memory domain {}:{}",
                params.device, md.name, md.dev.port
            )));
        }
        RcVerbsIface::open(md, &params.device, RcConfig::from_env()?)
    }
}

#[cfg(test)]
pub(crate) mod tests;
