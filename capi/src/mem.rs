//! Memory for remote access: `ucp_mem_map` / `ucp_mem_unmap` / `ucp_mem_query` /
//! `ucp_mem_advise`.
//!
//! rucx maps memory per worker, while UCX maps it per context: a context's mappings are made
//! with its first live worker (MPI libraries create one worker per context). A mapping made
//! before the context has a worker (ucx_perftest maps right after `ucp_init`) is allocated (or
//! recorded, for the client's memory) at once and registered with the context's first worker
//! when that worker is created (or at `ucp_rkey_pack`); until then it has no remote key.
//!
//! `UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED` (OpenSHMEM's symmetric heap, at the same address
//! in every process) is served by aliasing: rucx allocates its mapping where it likes (a shared
//! segment when a shared-memory transport is on, heap otherwise), and a shared segment is then
//! mapped a second time at the client's address (`mremap` with an old size of 0 maps the same
//! pages again). The client sees only its address; remote keys carry the difference between the
//! two (see [`crate::rma`]), so peers' accesses at the client's addresses land on the same pages.
//! Without a shared segment, fresh anonymous memory is mapped at the client's address and
//! registered as user memory.
//!
//! Every mapping has a process-unique id and a liveness flag: a remote key unpacked in the
//! process that owns the mapping (a rank talking to itself) refuses accesses once the mapping is
//! unmapped, instead of writing memory that may have been freed and reused.

use crate::ffi::*;
use crate::guard::{check_mask, fail, ffi, refuse};
use crate::handles::{Context, Worker};
use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use ucp::MemMap;

/// An access that reads the peer's memory (get, fetching atomics).
pub(crate) const ACCESS_READ: u8 = 1;
/// An access that writes the peer's memory (put, atomics).
pub(crate) const ACCESS_WRITE: u8 = 2;

/// A memory handle.
pub struct Mem {
    /// The worker the memory is registered with; null until the context has one.
    pub(crate) worker: *const Worker,
    pub(crate) context: *const Context,
    /// The mapping; none for a zero-length one.
    pub(crate) map: Option<MemMap>,
    /// What the client sees: its address (for a fixed mapping) or rucx's.
    pub(crate) address: *mut c_void,
    pub(crate) length: usize,
    /// Client address minus rucx's address of the same memory (non-zero for a fixed alias).
    pub(crate) delta: u64,
    /// Memory this handle mapped itself, unmapped after rucx's mapping: the alias at the
    /// client's address, or the memory allocated before the context had a worker.
    alias: Option<(usize, usize)>,
    /// Process-unique id of the mapping (packed into its remote keys).
    pub(crate) id: u64,
    /// False once unmapped; remote keys unpacked in this process hold it.
    pub(crate) alive: Arc<AtomicBool>,
    /// Remote accesses the mapping's protection denies (`ACCESS_*` bits, packed
    /// into its keys).
    pub(crate) deny: u8,
    /// The pages were locked (`UCP_MEM_MAP_LOCK`): unlocked at unmap.
    locked: bool,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Mem {
    /// A handle for `map` (none for a zero-length mapping), registered as live.
    fn new(
        worker: *const Worker,
        context: *const Context,
        map: Option<MemMap>,
        alias: Option<(usize, usize)>,
        delta: u64,
    ) -> Box<Mem> {
        let (address, length) = match &map {
            Some(m) => (m.address().wrapping_add(delta) as *mut c_void, m.len()),
            None => (std::ptr::null_mut(), 0),
        };
        Self::with_range(worker, context, map, alias, delta, address, length)
    }

    /// A handle of `length` bytes at `address` not registered with a worker yet (the context
    /// has none): `owned` is the memory this handle allocated for it, if any.
    fn unbound(
        context: *const Context,
        address: *mut c_void,
        length: usize,
        owned: Option<(usize, usize)>,
    ) -> Box<Mem> {
        Self::with_range(std::ptr::null(), context, None, owned, 0, address, length)
    }

    fn with_range(
        worker: *const Worker,
        context: *const Context,
        map: Option<MemMap>,
        alias: Option<(usize, usize)>,
        delta: u64,
        address: *mut c_void,
        length: usize,
    ) -> Box<Mem> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let alive = Arc::new(AtomicBool::new(true));
        live()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::downgrade(&alive));
        Box::new(Mem {
            worker,
            context,
            address,
            length,
            map,
            delta,
            alias,
            id,
            alive,
            deny: 0,
            locked: false,
        })
    }
}

/// Live mappings of this process by id.
fn live() -> &'static Mutex<HashMap<u64, Weak<AtomicBool>>> {
    static LIVE: std::sync::OnceLock<Mutex<HashMap<u64, Weak<AtomicBool>>>> =
        std::sync::OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The liveness flag of this process's mapping `id`, if it is still mapped.
pub(crate) fn liveness(id: u64) -> Option<Arc<AtomicBool>> {
    let m = live().lock().unwrap_or_else(|p| p.into_inner());
    m.get(&id).and_then(Weak::upgrade)
}

/// The address and length of a mapping, as the client sees them.
pub(crate) fn range_of(m: &Mem) -> (usize, usize) {
    (m.address as usize, m.length)
}

const MAP_KNOWN: u64 = UCP_MEM_MAP_PARAM_FIELD_ADDRESS
    | UCP_MEM_MAP_PARAM_FIELD_LENGTH
    | UCP_MEM_MAP_PARAM_FIELD_FLAGS
    | UCP_MEM_MAP_PARAM_FIELD_PROT
    | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE
    | UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER;

/// The context's first live worker, if it has one.
fn first_worker<'a>(c: &Context) -> Option<&'a Worker> {
    let ws = c.workers.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: workers unregister before they are freed.
    ws.first().map(|&w| unsafe { &*(w as *const Worker) })
}

/// Registers mapping `m`, made before its context had a worker, with worker `w`.
fn bind(name: &str, m: &mut Mem, w: &Worker) -> Result<(), Status> {
    if !m.worker.is_null() {
        return Ok(());
    }
    if m.length > 0 {
        let _g = w.lock.lock();
        let mut i = w.inner.borrow_mut();
        // SAFETY: the handle's memory (its own allocation, or the client's, valid until
        // ucp_mem_unmap as documented) outlives the mapping, which unmap drops first.
        let map = unsafe { i.w.mem_map_raw(m.address as *mut u8, m.length) }
            .map_err(|e| fail(name, &e))?;
        m.map = Some(map);
    }
    m.worker = w;
    Ok(())
}

/// Registers the mappings `context` made before it had a worker with its new worker `w`;
/// a mapping that cannot be registered stays unbound (its `ucp_rkey_pack` then says why).
pub(crate) fn bind_unbound(context: &Context, w: &Worker) {
    let mut list = context.unbound.lock().unwrap_or_else(|p| p.into_inner());
    list.retain(|&m| {
        // SAFETY: handles leave this list in ucp_mem_unmap before they are freed.
        bind("ucp_worker_create", unsafe { &mut *(m as *mut Mem) }, w).is_err()
    });
}

/// Makes sure `m` is registered with a worker (its context's first) before its remote key
/// is packed.
pub(crate) fn bound(name: &str, m: &mut Mem) -> Result<(), Status> {
    if !m.worker.is_null() {
        return Ok(());
    }
    // SAFETY: the context outlives its mappings.
    let c = unsafe { &*m.context };
    let Some(w) = first_worker(c) else {
        return Err(refuse(
            name,
            UCS_ERR_NO_RESOURCE,
            "the memory is registered with the context's first worker: create one first",
        ));
    };
    bind(name, m, w)?;
    c.unbound
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|&x| x != m as *mut Mem as usize);
    Ok(())
}

/// Memory for a mapping made while the context has no worker: `len` fresh zeroed bytes (at
/// `at` when `fixed`), or the client's memory at `at` when not `allocate`.
fn unbound_range(
    name: &str,
    at: usize,
    len: usize,
    allocate: bool,
    fixed: bool,
) -> Result<(usize, Option<(usize, usize)>), Status> {
    if !allocate {
        return Ok((at, None));
    }
    let span = len.div_ceil(page()) * page();
    if fixed {
        if !at.is_multiple_of(page()) {
            return Err(refuse(
                name,
                UCS_ERR_INVALID_PARAM,
                format!("UCP_MEM_MAP_FIXED address {at:#x} is not page aligned"),
            ));
        }
        reserve_at(name, at, span)?;
        return Ok((at, Some((at, span))));
    }
    // SAFETY: a fresh anonymous mapping anywhere; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Err(refuse(
            name,
            UCS_ERR_NO_MEMORY,
            format!("cannot allocate {len} bytes: {e}"),
        ));
    }
    Ok((p as usize, Some((p as usize, span))))
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Reserves `len` bytes at exactly `at` (nothing else may be mapped there): an anonymous
/// private mapping, zero-filled, readable and writable.
fn reserve_at(name: &str, at: usize, len: usize) -> Result<(), Status> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
    let p = unsafe {
        libc::mmap(
            at as *mut c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Err(refuse(
            name,
            UCS_ERR_NO_MEMORY,
            format!("cannot map {len} bytes at the fixed address {at:#x}: {e}"),
        ));
    }
    if p as usize != at {
        // An old kernel without MAP_FIXED_NOREPLACE treats it as a hint.
        // SAFETY: the mapping just made.
        unsafe { libc::munmap(p, len) };
        return Err(refuse(
            name,
            UCS_ERR_NO_MEMORY,
            format!("the fixed address {at:#x} is in use"),
        ));
    }
    Ok(())
}

/// Maps `len` bytes at the client's fixed address `at`: rucx's mapping plus, for a shared
/// segment, an alias at `at`; gives the mapping, the alias's extent and the address delta.
fn map_fixed(
    name: &str,
    i: &mut ucp::Worker,
    at: usize,
    len: usize,
) -> Result<(MemMap, (usize, usize), u64), Status> {
    let pg = page();
    if !at.is_multiple_of(pg) {
        return Err(refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            format!("UCP_MEM_MAP_FIXED address {at:#x} is not page aligned"),
        ));
    }
    let span = len.div_ceil(pg) * pg;
    reserve_at(name, at, span)?;
    let undo = |why: Status| {
        // SAFETY: the reservation (or alias) made above, at `at`.
        unsafe { libc::munmap(at as *mut c_void, span) };
        why
    };
    let map = i.mem_map(len).map_err(|e| undo(fail(name, &e)))?;
    if map.is_shared() {
        // SAFETY: `map` is a shared segment of at least `span` bytes (segments are whole
        // pages); with an old size of 0, mremap maps the same pages again at `at`, replacing
        // the reservation made there (and leaving it in place if it fails).
        let p = unsafe {
            libc::mremap(
                map.address() as *mut c_void,
                0,
                span,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                at as *mut c_void,
            )
        };
        if p as usize == at {
            let delta = (at as u64).wrapping_sub(map.address());
            return Ok((map, (at, span), delta));
        }
        tracing::debug!(
            "{name}: cannot map the shared segment again at {at:#x} ({}); using private memory",
            std::io::Error::last_os_error()
        );
    }
    // Heap memory cannot be aliased: the reservation becomes the memory, registered as user
    // memory.
    drop(map);
    // SAFETY: the reservation stays mapped until this handle's unmap, after the mapping.
    let map = unsafe { i.mem_map_raw(at as *mut u8, len) }.map_err(|e| undo(fail(name, &e)))?;
    Ok((map, (at, span), 0))
}

/// `ucs_status_t ucp_mem_map(ucp_context_h context, const ucp_mem_map_params_t *params,
/// ucp_mem_h *memh_p)`: allocates (`UCP_MEM_MAP_ALLOCATE`, at a given address with
/// `UCP_MEM_MAP_FIXED`) or registers the client's memory for remote access.
///
/// # Safety
/// A live context; valid params; registered memory stays valid until unmapped.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_map(
    context: *mut Context,
    params: *const MemMapParams,
    memh_p: *mut *mut Mem,
) -> Status {
    const NAME: &str = "ucp_mem_map";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if context.is_null() || params.is_null() || memh_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: caller pointers.
        let (c, p) = unsafe { (&*context, &*params) };
        if let Err(s) = check_mask(
            NAME,
            "ucp_mem_map_params_t.field_mask",
            p.field_mask,
            MAP_KNOWN,
        ) {
            return s;
        }
        let has = |b: u64| p.field_mask & b != 0;
        if has(UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER) {
            // No rucx memory domain exports memory handles (`ucp_memh_pack` refuses to
            // make one), so there is none to import.
            return refuse(
                NAME,
                UCS_ERR_UNSUPPORTED,
                "importing an exported memory handle is not supported",
            );
        }
        let flags = if has(UCP_MEM_MAP_PARAM_FIELD_FLAGS) {
            p.flags
        } else {
            0
        };
        // SYMMETRIC_RKEY (UCX 1.19) is a hint: rucx's keys are valid for every peer anyway.
        let known_flags = UCP_MEM_MAP_NONBLOCK
            | UCP_MEM_MAP_ALLOCATE
            | UCP_MEM_MAP_FIXED
            | UCP_MEM_MAP_SYMMETRIC_RKEY
            | UCP_MEM_MAP_LOCK;
        if flags & !known_flags != 0 {
            // UCX tests the bits it knows and ignores the others.
            tracing::debug!("{NAME}: ignoring unknown flags {flags:#x}");
        }
        if has(UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE)
            && !crate::memtype::cpu_accessible(p.memory_type)
        {
            return refuse(NAME, UCS_ERR_UNSUPPORTED, "rucx maps host memory only");
        }
        if !has(UCP_MEM_MAP_PARAM_FIELD_LENGTH) {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "length missing");
        }
        if p.length == 0 {
            // As UCX: a zero-length mapping succeeds, whatever the address and flags, and
            // its remote key reaches no memory.
            tracing::debug!("{NAME}: zero length, mapping nothing");
            let w = first_worker(c).map_or(std::ptr::null(), |w| w as *const Worker);
            // SAFETY: checked non-null.
            unsafe { *memh_p = Box::into_raw(Mem::new(w, context, None, None, 0)) };
            return UCS_OK;
        }
        let address = if has(UCP_MEM_MAP_PARAM_FIELD_ADDRESS) {
            p.address
        } else {
            std::ptr::null_mut()
        };
        let allocate = flags & UCP_MEM_MAP_ALLOCATE != 0;
        let fixed = allocate && flags & UCP_MEM_MAP_FIXED != 0;
        if fixed && address.is_null() {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "UCP_MEM_MAP_FIXED without an address",
            );
        }
        if !allocate && address.is_null() {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "no address and no UCP_MEM_MAP_ALLOCATE",
            );
        }
        let mut mem = match first_worker(c) {
            Some(w) => match map_with(NAME, w, address, p.length, allocate, fixed) {
                Ok((map, alias, delta)) => Mem::new(w, context, Some(map), alias, delta),
                Err(s) => return s,
            },
            None => match unbound_range(NAME, address as usize, p.length, allocate, fixed) {
                Ok((at, owned)) => Mem::unbound(context, at as *mut c_void, p.length, owned),
                Err(s) => return s,
            },
        };
        if has(UCP_MEM_MAP_PARAM_FIELD_PROT) {
            // Peers are held to the protection: keys of this mapping deny what it leaves out.
            if p.prot & UCP_MEM_MAP_PROT_REMOTE_READ == 0 {
                mem.deny |= ACCESS_READ;
            }
            if p.prot & UCP_MEM_MAP_PROT_REMOTE_WRITE == 0 {
                mem.deny |= ACCESS_WRITE;
            }
        }
        if flags & UCP_MEM_MAP_LOCK != 0 && mem.length > 0 {
            // SAFETY: the mapping's own range.
            mem.locked = unsafe { libc::mlock(mem.address, mem.length) } == 0;
            if !mem.locked {
                let e = std::io::Error::last_os_error();
                // SAFETY: the handle just made, unmapped once.
                unsafe { ucp_mem_unmap(context, Box::into_raw(mem)) };
                return refuse(
                    NAME,
                    UCS_ERR_NO_MEMORY,
                    format!("UCP_MEM_MAP_LOCK: cannot lock the pages: {e} (RLIMIT_MEMLOCK?)"),
                );
            }
        }
        let raw = Box::into_raw(mem);
        // SAFETY: the handle just made.
        if unsafe { (*raw).worker.is_null() } {
            c.unbound
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(raw as usize);
        }
        // SAFETY: checked non-null.
        unsafe { *memh_p = raw };
        UCS_OK
    })
}

/// A mapping made with a worker, the memory the handle mapped itself (an alias at the
/// client's address) and the client's address minus rucx's.
type Mapped = (MemMap, Option<(usize, usize)>, u64);

/// Maps `len` bytes with worker `w`: allocated (at `address` when `fixed`) or the client's
/// memory at `address`.
fn map_with(
    name: &str,
    w: &Worker,
    address: *mut c_void,
    len: usize,
    allocate: bool,
    fixed: bool,
) -> Result<Mapped, Status> {
    let _g = w.lock.lock();
    let mut i = w.inner.borrow_mut();
    if fixed {
        let (m, a, d) = map_fixed(name, &mut i.w, address as usize, len)?;
        return Ok((m, Some(a), d));
    }
    let res = if allocate {
        i.w.mem_map(len)
    } else {
        // SAFETY: the client keeps the memory valid until ucp_mem_unmap (documented).
        unsafe { i.w.mem_map_raw(address as *mut u8, len) }
    };
    match res {
        Ok(m) => Ok((m, None, 0)),
        Err(e) => Err(fail(name, &e)),
    }
}

/// `ucs_status_t ucp_mem_unmap(ucp_context_h context, ucp_mem_h memh)`.
///
/// # Safety
/// A handle from `ucp_mem_map`, unmapped once.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_unmap(context: *mut Context, memh: *mut Mem) -> Status {
    const NAME: &str = "ucp_mem_unmap";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if memh.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "memh is NULL");
        }
        // SAFETY: a live handle (checked before it is freed below).
        if !context.is_null() && !std::ptr::eq(unsafe { (*memh).context }, context) {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "memh was mapped by another context",
            );
        }
        // SAFETY: created by ucp_mem_map.
        let mut m = unsafe { Box::from_raw(memh) };
        m.alive.store(false, Ordering::Release);
        if m.locked {
            // SAFETY: the range this mapping locked.
            unsafe { libc::munlock(m.address, m.length) };
        }
        live()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&m.id);
        if m.worker.is_null() {
            // SAFETY: the context outlives its mappings.
            let c = unsafe { &*m.context };
            c.unbound
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|&x| x != memh as usize);
        } else {
            // SAFETY: the worker outlives its mappings.
            let w = unsafe { &*m.worker };
            let _g = w.lock.lock();
            drop(m.map.take());
        }
        if let Some((at, span)) = m.alias.take() {
            // SAFETY: the alias (or reservation) this handle mapped; rucx's mapping is gone.
            unsafe { libc::munmap(at as *mut c_void, span) };
        }
        UCS_OK
    })
}

/// `ucs_status_t ucp_mem_query(const ucp_mem_h memh, ucp_mem_attr_t *attr)`.
///
/// # Safety
/// A live handle and a writable `attr`.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_query(memh: *const Mem, attr: *mut MemAttr) -> Status {
    const NAME: &str = "ucp_mem_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if memh.is_null() || attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: caller pointers.
        let (m, a) = unsafe { (&*memh, &mut *attr) };
        let known =
            UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH | UCP_MEM_ATTR_FIELD_MEM_TYPE;
        if let Err(s) = check_mask(NAME, "ucp_mem_attr_t.field_mask", a.field_mask, known) {
            return s;
        }
        if a.field_mask & UCP_MEM_ATTR_FIELD_ADDRESS != 0 {
            a.address = m.address;
        }
        if a.field_mask & UCP_MEM_ATTR_FIELD_LENGTH != 0 {
            a.length = m.length;
        }
        if a.field_mask & UCP_MEM_ATTR_FIELD_MEM_TYPE != 0 {
            a.mem_type = UCS_MEMORY_TYPE_HOST;
        }
        UCS_OK
    })
}

/// `ucp_mem_advise_params_t`.
#[repr(C)]
pub struct MemAdviseParams {
    field_mask: u64,
    address: *mut c_void,
    length: usize,
    advice: c_uint,
}

/// `ucs_status_t ucp_mem_advise(ucp_context_h context, ucp_mem_h memh,
/// ucp_mem_advise_params_t *params)`: checks the advice (`UCP_MADV_NORMAL`,
/// `UCP_MADV_WILLNEED`) and the range; rucx maps and registers memory in full when it is
/// mapped, so there is nothing the advice changes.
///
/// # Safety
/// A live handle and valid params.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_advise(
    _context: *mut c_void,
    memh: *mut Mem,
    params: *mut MemAdviseParams,
) -> Status {
    const NAME: &str = "ucp_mem_advise";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if memh.is_null() || params.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: caller pointers.
        let (m, p) = unsafe { (&*memh, &*params) };
        if let Err(s) = check_mask(
            NAME,
            "ucp_mem_advise_params_t.field_mask",
            p.field_mask,
            0x7,
        ) {
            return s;
        }
        if p.field_mask != 0x7 {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "address, length and advice are required",
            );
        }
        if p.advice > 1 {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, format!("advice {}", p.advice));
        }
        let (a, len) = range_of(m);
        let (s, e) = (
            p.address as usize,
            (p.address as usize).saturating_add(p.length),
        );
        if s < a || e > a + len {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "range outside the mapping");
        }
        UCS_OK
    })
}

const _: () = assert!(std::mem::size_of::<MemAdviseParams>() == 32);
