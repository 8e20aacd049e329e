//! Memory: registration (`uct_md_mem_reg` / `_dereg`), allocation (`uct_iface_mem_alloc`,
//! `uct_mem_alloc` and their frees), and remote keys (`uct_md_mkey_pack`, `uct_rkey_unpack`,
//! `uct_rkey_ptr`, `uct_rkey_release`).
//!
//! A memory handle (`uct_mem_h`) is a boxed [`Memh`] holding rucx's `MemHandle`. A packed
//! remote key is rucx's key behind a 4-byte length. An unpacked key ([`Rkey`], the bundle's
//! `rkey`) keeps the packed bytes and is resolved on the endpoint that first uses it (shared
//! memory maps the segment through the endpoint, which checks that the key names its peer's
//! memory; other transports unpack with the component's domain); the result is cached for
//! that endpoint, so repeated operations cost one comparison.

use crate::component::{Component, Md, RKEY_HEADER};
use crate::ffi::*;
use crate::guard::{fail, ffi, refuse, text};
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_uint, c_void};
use std::ptr::NonNull;
use std::rc::Rc;
use uct::{AnyMd, MdFlags, MemHandle, MemoryDomain, RemoteKey};

/// How a [`Memh`]'s memory was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The client's memory, registered.
    Registered,
    /// Allocated by the memory domain (freed with the handle).
    MdAlloc,
    /// An anonymous mapping made here, registered (unmapped after the handle).
    Mmap,
}

/// A memory handle (`uct_mem_h`).
pub struct Memh {
    /// rucx's handle.
    pub memh: MemHandle,
    /// How the memory was obtained.
    pub origin: Origin,
}

impl Memh {
    fn into_handle(self) -> *mut c_void {
        Box::into_raw(Box::new(self)).cast()
    }

    /// The handle behind a C `uct_mem_h`.
    ///
    /// # Safety
    /// `h` must be NULL or a live handle from this library.
    pub unsafe fn from_handle<'a>(h: *mut c_void) -> Option<&'a Memh> {
        // SAFETY: forwarded from the caller.
        (!h.is_null()).then(|| unsafe { &*h.cast::<Memh>() })
    }
}

fn reg(md: &AnyMd, addr: *mut c_void, len: usize) -> ucs::Result<MemHandle> {
    let p = NonNull::new(addr.cast::<u8>())
        .ok_or_else(|| ucs::Error::InvalidParam("NULL address".into()))?;
    // SAFETY: UCX's contract: the client keeps the memory until it deregisters.
    unsafe { md.mem_reg(p, len) }
}

/// `ucs_status_t uct_md_mem_reg(uct_md_h md, void *address, size_t length, unsigned flags,
/// uct_mem_h *memh_p)`.
///
/// # Safety
/// `md` live; `address..+length` the client's memory, kept until deregistered.
#[no_mangle]
pub unsafe extern "C" fn uct_md_mem_reg(
    md: *mut c_void,
    address: *mut c_void,
    length: usize,
    _flags: c_uint,
    memh_p: *mut *mut c_void,
) -> Status {
    const NAME: &str = "uct_md_mem_reg";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        // SAFETY: forwarded from the caller.
        let Some(md) = (unsafe { Md::from_handle(NAME, md) }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        if memh_p.is_null() || length == 0 {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "NULL output pointer or empty range",
            );
        }
        match reg(&md.primary(), address, length) {
            Ok(memh) => {
                // SAFETY: checked non-null.
                unsafe {
                    *memh_p = Memh {
                        memh,
                        origin: Origin::Registered,
                    }
                    .into_handle()
                };
                UCS_OK
            }
            Err(e) => fail(NAME, &e),
        }
    })
}

/// `ucs_status_t uct_md_mem_dereg(uct_md_h md, uct_mem_h memh)`.
///
/// # Safety
/// `memh` must come from [`uct_md_mem_reg`] and not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn uct_md_mem_dereg(_md: *mut c_void, memh: *mut c_void) -> Status {
    ffi("uct_md_mem_dereg", UCS_ERR_INVALID_PARAM, || {
        if memh.is_null() {
            return refuse(
                "uct_md_mem_dereg",
                UCS_ERR_INVALID_PARAM,
                "NULL memory handle",
            );
        }
        // SAFETY: made by into_handle.
        let m = unsafe { Box::from_raw(memh.cast::<Memh>()) };
        if m.origin != Origin::Registered {
            let s = refuse(
                "uct_md_mem_dereg",
                UCS_ERR_INVALID_PARAM,
                "the handle is of allocated memory: free it with its free call",
            );
            Box::leak(m);
            return s;
        }
        UCS_OK
    })
}

/// `ucs_status_t uct_md_mem_advise(uct_md_h, uct_mem_h, void *addr, size_t length, advice)`:
/// checks the range lies in the handle's memory (rucx maps memory eagerly: nothing to change).
///
/// # Safety
/// `memh` must be a live handle.
#[no_mangle]
pub unsafe extern "C" fn uct_md_mem_advise(
    _md: *mut c_void,
    memh: *mut c_void,
    addr: *mut c_void,
    length: usize,
    _advice: u32,
) -> Status {
    ffi("uct_md_mem_advise", UCS_ERR_INVALID_PARAM, || {
        // SAFETY: forwarded from the caller.
        let Some(m) = (unsafe { Memh::from_handle(memh) }) else {
            return refuse(
                "uct_md_mem_advise",
                UCS_ERR_INVALID_PARAM,
                "NULL memory handle",
            );
        };
        let off = (addr as usize).wrapping_sub(m.memh.addr() as usize);
        match m.memh.range(off, length) {
            Ok(_) => UCS_OK,
            Err(e) => fail("uct_md_mem_advise", &e),
        }
    })
}

/// `ucs_status_t uct_md_mem_query(uct_md_h, const void *address, size_t length,
/// uct_md_mem_attr_t *mem_attr)`: rucx's domains serve host memory only.
///
/// # Safety
/// `mem_attr` must point to a `uct_md_mem_attr_t`.
#[no_mangle]
pub unsafe extern "C" fn uct_md_mem_query(
    _md: *mut c_void,
    address: *const c_void,
    length: usize,
    mem_attr: *mut uct_md_mem_attr_t,
) -> Status {
    ffi("uct_md_mem_query", UCS_ERR_INVALID_PARAM, || {
        if mem_attr.is_null() {
            return refuse("uct_md_mem_query", UCS_ERR_INVALID_PARAM, "NULL attributes");
        }
        // SAFETY: checked non-null.
        let a = unsafe { &mut *mem_attr };
        if a.field_mask & UCT_MD_MEM_ATTR_FIELD_MEM_TYPE != 0 {
            a.mem_type = UCS_MEMORY_TYPE_HOST;
        }
        if a.field_mask & UCT_MD_MEM_ATTR_FIELD_SYS_DEV != 0 {
            a.sys_dev = UCS_SYS_DEVICE_ID_UNKNOWN;
        }
        if a.field_mask & UCT_MD_MEM_ATTR_FIELD_BASE_ADDRESS != 0 {
            a.base_address = address as *mut c_void;
        }
        if a.field_mask & UCT_MD_MEM_ATTR_FIELD_ALLOC_LENGTH != 0 {
            a.alloc_length = length;
        }
        UCS_OK
    })
}

/// `ucs_status_t uct_md_detect_memory_type(uct_md_h, const void *, size_t, ucs_memory_type_t *)`:
/// unsupported, as for every host-memory domain of UCX (none detects memory types).
#[no_mangle]
pub extern "C" fn uct_md_detect_memory_type(
    _md: *mut c_void,
    _addr: *const c_void,
    _length: usize,
    _mem_type_p: *mut u32,
) -> Status {
    UCS_ERR_UNSUPPORTED
}

/// `ucs_status_t uct_md_mkey_pack(uct_md_h md, uct_mem_h memh, void *rkey_buffer)`: writes the
/// remote key (at most `rkey_packed_size` bytes of `uct_md_query`).
///
/// # Safety
/// `memh` must be a live handle of `md`; `rkey_buffer` must hold `rkey_packed_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn uct_md_mkey_pack(
    md: *mut c_void,
    memh: *mut c_void,
    rkey_buffer: *mut c_void,
) -> Status {
    const NAME: &str = "uct_md_mkey_pack";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        // SAFETY: forwarded from the caller.
        let (Some(md), Some(m)) = (unsafe { Md::from_handle(NAME, md) }, unsafe {
            Memh::from_handle(memh)
        }) else {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL memory domain or handle");
        };
        if rkey_buffer.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL key buffer");
        }
        let dom = md.primary();
        let mut packed = Vec::new();
        if let Err(e) = dom.rkey_pack(&m.memh, &mut packed) {
            return fail(NAME, &e);
        }
        if packed.len() > dom.attr().rkey_packed_size {
            return refuse(
                NAME,
                UCS_ERR_EXCEEDS_LIMIT,
                "packed key longer than announced",
            );
        }
        let buf = rkey_buffer.cast::<u8>();
        // SAFETY: the caller gave rkey_packed_size = RKEY_HEADER + the domain's bound bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (packed.len() as u32).to_le_bytes().as_ptr(),
                buf,
                RKEY_HEADER,
            );
            std::ptr::copy_nonoverlapping(packed.as_ptr(), buf.add(RKEY_HEADER), packed.len());
        }
        UCS_OK
    })
}

/// `uct_md_mkey_pack_params_t` (UCX 1.15 and later): a field mask and `UCT_MD_MKEY_PACK_FLAG_*`.
#[repr(C)]
pub struct MkeyPackParams {
    /// `UCT_MD_MKEY_PACK_FIELD_FLAGS` (bit 0).
    pub field_mask: u64,
    /// `INVALIDATE_RMA` (bit 0), `INVALIDATE_AMO` (bit 1), `EXPORT` (bit 2).
    pub flags: u32,
}

/// `UCT_MD_MKEY_PACK_FLAG_EXPORT`: a key another process attaches to as local memory.
const MKEY_PACK_FLAG_EXPORT: u32 = 1 << 2;

/// `ucs_status_t uct_md_mkey_pack_v2(uct_md_h md, uct_mem_h memh, void *address, size_t length,
/// const uct_md_mkey_pack_params_t *params, void *mkey_buffer)`, as UCX 1.22's tools call it:
/// the remote key of `memh` (which must hold `address..+length`), as [`uct_md_mkey_pack`].
/// Exported keys (`UCT_MD_MKEY_PACK_FLAG_EXPORT`) are not supported; the invalidation flags
/// need nothing (rucx keys end with their registration).
///
/// # Safety
/// As [`uct_md_mkey_pack`]; `params` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn uct_md_mkey_pack_v2(
    md: *mut c_void,
    memh: *mut c_void,
    address: *mut c_void,
    length: usize,
    params: *const MkeyPackParams,
    mkey_buffer: *mut c_void,
) -> Status {
    const NAME: &str = "uct_md_mkey_pack_v2";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        // SAFETY: NULL or the caller's parameters.
        if let Some(p) = unsafe { params.as_ref() } {
            if p.field_mask & 1 != 0 && p.flags & MKEY_PACK_FLAG_EXPORT != 0 {
                return refuse(
                    NAME,
                    UCS_ERR_UNSUPPORTED,
                    "exported memory keys are not supported",
                );
            }
        }
        // SAFETY: forwarded from the caller.
        if let Some(m) = unsafe { Memh::from_handle(memh) } {
            let off = (address as usize).wrapping_sub(m.memh.addr() as usize);
            if length > 0 {
                if let Err(e) = m.memh.range(off, length) {
                    return fail(NAME, &e);
                }
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { uct_md_mkey_pack(md, memh, mkey_buffer) }
    })
}

/// An unpacked remote key (`uct_rkey_t`): the packed bytes, and the key resolved for the last
/// endpoint that used it.
pub struct Rkey {
    component: &'static Component,
    packed: Vec<u8>,
    /// (endpoint serial, key) of the last resolution.
    cache: UnsafeCell<Option<(u64, RemoteKey)>>,
    /// The key unpacked without an endpoint, for `uct_rkey_ptr` (kept while the key lives,
    /// so the pointers it gave stay valid).
    local: std::cell::OnceCell<RemoteKey>,
}

thread_local! {
    /// One rucx domain per component, to unpack keys no endpoint resolves.
    static UNPACKERS: std::cell::RefCell<Vec<(&'static str, Rc<AnyMd>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn unpacker(c: &'static Component) -> ucs::Result<Rc<AnyMd>> {
    UNPACKERS.with(|u| {
        if let Some((_, m)) = u.borrow().iter().find(|(n, _)| *n == c.name) {
            return Ok(Rc::clone(m));
        }
        let dev = c.devices().into_iter().next().ok_or_else(|| {
            ucs::Error::NoDevice(format!("component {} has no device here", c.name))
        })?;
        let m = Rc::new(AnyMd::open(c.tl_name, &dev.name)?);
        u.borrow_mut().push((c.name, Rc::clone(&m)));
        Ok(m)
    })
}

impl Rkey {
    /// The key resolved for the endpoint with `serial` (through `ep` the first time).
    ///
    /// # Safety
    /// No other reference to this key's cache may be live (keys are used from one thread, and
    /// no operation resolves a key while another resolution of it is under way).
    #[inline(always)]
    pub unsafe fn resolve(&self, serial: u64, ep: &mut uct::AnyEp) -> ucs::Result<&RemoteKey> {
        // SAFETY: the caller guarantees exclusive access to the cache.
        if let Some((s, key)) = unsafe { &*self.cache.get() } {
            if *s == serial {
                return Ok(key);
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.resolve_slow(serial, ep) }
    }

    /// [`Rkey::resolve`] for an endpoint the cache does not hold: unpacks and caches.
    ///
    /// # Safety
    /// As [`Rkey::resolve`].
    #[cold]
    #[inline(never)]
    unsafe fn resolve_slow(&self, serial: u64, ep: &mut uct::AnyEp) -> ucs::Result<&RemoteKey> {
        use uct::Endpoint;
        // SAFETY: the caller guarantees exclusive access to the cache.
        let cache = unsafe { &mut *self.cache.get() };
        {
            let key = match ep.peer_rkey_unpack(&self.packed)? {
                Some(k) => k,
                None => unpacker(self.component)?.rkey_unpack(&self.packed)?,
            };
            *cache = Some((serial, key));
        }
        Ok(&cache.as_ref().expect("just filled").1)
    }

    /// The key behind a C `uct_rkey_t`; `None` for NULL or `UCT_INVALID_RKEY`.
    ///
    /// # Safety
    /// `rkey` must be one [`uct_rkey_unpack`] gave and not yet released.
    pub unsafe fn from_rkey<'a>(rkey: usize) -> Option<&'a Rkey> {
        // SAFETY: forwarded from the caller.
        (rkey != 0 && rkey != UCT_INVALID_RKEY).then(|| unsafe { &*(rkey as *const Rkey) })
    }
}

/// `ucs_status_t uct_rkey_unpack(uct_component_h component, const void *rkey_buffer,
/// uct_rkey_bundle_t *rkey_ob)`.
///
/// # Safety
/// `rkey_buffer` must hold a key packed by `uct_md_mkey_pack` of the same component;
/// `rkey_ob` must be valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_rkey_unpack(
    component: *mut c_void,
    rkey_buffer: *const c_void,
    rkey_ob: *mut uct_rkey_bundle_t,
) -> Status {
    const NAME: &str = "uct_rkey_unpack";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        let Some(c) = Component::from_handle(NAME, component) else {
            return UCS_ERR_INVALID_PARAM;
        };
        if rkey_buffer.is_null() || rkey_ob.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL key buffer or bundle");
        }
        let buf = rkey_buffer.cast::<u8>();
        let mut len = [0u8; RKEY_HEADER];
        // SAFETY: a packed key starts with its 4-byte length.
        unsafe { std::ptr::copy_nonoverlapping(buf, len.as_mut_ptr(), RKEY_HEADER) };
        let len = u32::from_le_bytes(len) as usize;
        let bound = match unpacker(c) {
            Ok(m) => m.attr().rkey_packed_size,
            Err(e) => return fail(NAME, &e),
        };
        if len == 0 || len > bound {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                format!("packed {} key of {len} bytes (at most {bound})", c.name),
            );
        }
        // SAFETY: the length was checked against the component's bound; the caller's buffer
        // holds the packed key.
        let packed = unsafe { std::slice::from_raw_parts(buf.add(RKEY_HEADER), len) }.to_vec();
        let k = Box::into_raw(Box::new(Rkey {
            component: c,
            packed,
            cache: UnsafeCell::new(None),
            local: std::cell::OnceCell::new(),
        }));
        // SAFETY: checked non-null.
        unsafe {
            *rkey_ob = uct_rkey_bundle_t {
                rkey: k as usize,
                handle: k.cast(),
                type_: c.handle(),
            };
        }
        UCS_OK
    })
}

/// `ucs_status_t uct_rkey_release(uct_component_h component, const uct_rkey_bundle_t *rkey_ob)`.
///
/// # Safety
/// `rkey_ob` must hold a key from [`uct_rkey_unpack`], not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn uct_rkey_release(
    _component: *mut c_void,
    rkey_ob: *const uct_rkey_bundle_t,
) -> Status {
    ffi("uct_rkey_release", UCS_ERR_INVALID_PARAM, || {
        if rkey_ob.is_null() {
            return refuse("uct_rkey_release", UCS_ERR_INVALID_PARAM, "NULL bundle");
        }
        // SAFETY: checked non-null.
        let h = unsafe { (*rkey_ob).handle };
        if !h.is_null() {
            // SAFETY: made by Box::into_raw in uct_rkey_unpack.
            drop(unsafe { Box::from_raw(h.cast::<Rkey>()) });
        }
        UCS_OK
    })
}

/// `ucs_status_t uct_rkey_ptr(uct_component_h, uct_rkey_bundle_t *rkey_ob, uint64_t remote_addr,
/// void **addr_p)`: a local pointer to remote memory that is mapped in this process (shared
/// memory, self); `UCS_ERR_UNREACHABLE` otherwise.
///
/// # Safety
/// `rkey_ob` must hold a live key; `addr_p` valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_rkey_ptr(
    _component: *mut c_void,
    rkey_ob: *mut uct_rkey_bundle_t,
    remote_addr: u64,
    addr_p: *mut *mut c_void,
) -> Status {
    const NAME: &str = "uct_rkey_ptr";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if rkey_ob.is_null() || addr_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL bundle or output pointer");
        }
        // SAFETY: forwarded from the caller.
        let Some(k) = (unsafe { Rkey::from_rkey((*rkey_ob).rkey) }) else {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "invalid remote key");
        };
        if k.local.get().is_none() {
            match unpacker(k.component).and_then(|m| m.rkey_unpack(&k.packed)) {
                Ok(key) => {
                    let _ = k.local.set(key);
                }
                Err(e) => return fail(NAME, &e),
            }
        }
        match k.local.get().expect("set above").local_ptr(remote_addr, 1) {
            Ok(p) => {
                // SAFETY: checked non-null. The mapping lives as long as the key.
                unsafe { *addr_p = p.cast() };
                UCS_OK
            }
            Err(e) => refuse(NAME, UCS_ERR_UNREACHABLE, e),
        }
    })
}

/// Allocates `length` bytes for `md`: the domain's own memory when it allocates, else an
/// anonymous mapping registered with it.
fn alloc_for(md: &AnyMd, length: usize) -> ucs::Result<(Memh, u32)> {
    if md.attr().flags.contains(MdFlags::ALLOC) {
        let memh = md.mem_alloc(length)?;
        return Ok((
            Memh {
                memh,
                origin: Origin::MdAlloc,
            },
            UCT_ALLOC_METHOD_MD,
        ));
    }
    let p = map_anon(length)?;
    match reg(md, p, length) {
        Ok(memh) => Ok((
            Memh {
                memh,
                origin: Origin::Mmap,
            },
            UCT_ALLOC_METHOD_MMAP,
        )),
        Err(e) => {
            // SAFETY: p is the mapping just made.
            unsafe { libc::munmap(p, length) };
            Err(e)
        }
    }
}

fn map_anon(length: usize) -> ucs::Result<*mut c_void> {
    // SAFETY: an anonymous private mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(ucs::Error::NoMemory(format!(
            "mmap of {length} bytes: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(p)
}

fn fill_allocated(mem: &mut uct_allocated_memory_t, m: Memh, method: u32, md: *mut c_void) {
    mem.address = m.memh.addr().cast();
    mem.length = m.memh.len();
    mem.method = method;
    mem.mem_type = UCS_MEMORY_TYPE_HOST;
    mem.md = md;
    mem.memh = m.into_handle();
}

/// `ucs_status_t uct_iface_mem_alloc(uct_iface_h iface, size_t length, unsigned flags,
/// const char *name, uct_allocated_memory_t *mem)`: memory the interface's zero-copy and
/// remote operations can use, with its handle.
///
/// # Safety
/// `iface` must be live; `mem` valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_mem_alloc(
    iface: *mut c_void,
    length: usize,
    _flags: c_uint,
    _name: *const c_char,
    mem: *mut uct_allocated_memory_t,
) -> Status {
    const NAME: &str = "uct_iface_mem_alloc";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if iface.is_null() || mem.is_null() || length == 0 {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "NULL interface or output, or zero length",
            );
        }
        // SAFETY: the caller passes a live interface.
        let (md_handle, dom) = unsafe { crate::handle::md_of(iface) };
        match alloc_for(&dom, length) {
            Ok((m, method)) => {
                // SAFETY: checked non-null.
                fill_allocated(unsafe { &mut *mem }, m, method, md_handle);
                UCS_OK
            }
            Err(e) => fail(NAME, &e),
        }
    })
}

/// `void uct_iface_mem_free(const uct_allocated_memory_t *mem)`.
///
/// # Safety
/// `mem` must be filled by an allocation call of this library and not freed before.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_mem_free(mem: *const uct_allocated_memory_t) {
    // SAFETY: forwarded from the caller.
    let _ = unsafe { uct_mem_free(mem) };
}

/// `ucs_status_t uct_mem_alloc(size_t length, const uct_alloc_method_t *methods,
/// unsigned num_methods, const uct_mem_alloc_params_t *params, uct_allocated_memory_t *mem)`:
/// tries the methods in order (MD with `params->mds`, HEAP, MMAP, THP, HUGE).
///
/// # Safety
/// `methods` must hold `num_methods` entries; `params` and `mem` be valid.
#[no_mangle]
pub unsafe extern "C" fn uct_mem_alloc(
    length: usize,
    methods: *const u32,
    num_methods: c_uint,
    params: *const uct_mem_alloc_params_t,
    mem: *mut uct_allocated_memory_t,
) -> Status {
    const NAME: &str = "uct_mem_alloc";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if methods.is_null() || params.is_null() || mem.is_null() || length == 0 || num_methods == 0
        {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "NULL argument, zero length or no method",
            );
        }
        // SAFETY: checked non-null; the caller gave num_methods entries.
        let (methods, params, mem) = unsafe {
            (
                std::slice::from_raw_parts(methods, num_methods as usize),
                &*params,
                &mut *mem,
            )
        };
        if params.field_mask & UCT_MEM_ALLOC_PARAM_FIELD_MEM_TYPE != 0
            && params.mem_type != UCS_MEMORY_TYPE_HOST
        {
            return refuse(NAME, UCS_ERR_UNSUPPORTED, "rucx allocates host memory only");
        }
        if params.field_mask & UCT_MEM_ALLOC_PARAM_FIELD_FLAGS != 0
            && params.flags & UCT_MD_MEM_FLAG_FIXED != 0
        {
            return refuse(
                NAME,
                UCS_ERR_UNSUPPORTED,
                "UCT_MD_MEM_FLAG_FIXED is not supported",
            );
        }
        for &method in methods {
            match method {
                UCT_ALLOC_METHOD_MD if params.field_mask & UCT_MEM_ALLOC_PARAM_FIELD_MDS != 0 => {
                    for i in 0..params.mds_count as usize {
                        // SAFETY: the caller gave mds_count domains.
                        let h = unsafe { *params.mds.add(i) };
                        // SAFETY: a live domain handle.
                        let Some(md) = (unsafe { Md::from_handle(NAME, h) }) else {
                            continue;
                        };
                        let dom = md.primary();
                        if !dom.attr().flags.contains(MdFlags::ALLOC) {
                            continue;
                        }
                        if let Ok(memh) = dom.mem_alloc(length) {
                            fill_allocated(
                                mem,
                                Memh {
                                    memh,
                                    origin: Origin::MdAlloc,
                                },
                                UCT_ALLOC_METHOD_MD,
                                h,
                            );
                            return UCS_OK;
                        }
                    }
                }
                UCT_ALLOC_METHOD_HEAP
                | UCT_ALLOC_METHOD_MMAP
                | UCT_ALLOC_METHOD_THP
                | UCT_ALLOC_METHOD_HUGE => {
                    let Ok(p) = map_anon(length) else { continue };
                    if method == UCT_ALLOC_METHOD_THP {
                        // SAFETY: advice on the mapping just made.
                        unsafe { libc::madvise(p, length, libc::MADV_HUGEPAGE) };
                    }
                    mem.address = p;
                    mem.length = length;
                    mem.method = UCT_ALLOC_METHOD_MMAP;
                    mem.mem_type = UCS_MEMORY_TYPE_HOST;
                    mem.md = std::ptr::null_mut();
                    mem.memh = std::ptr::null_mut();
                    return UCS_OK;
                }
                _ => {}
            }
        }
        // SAFETY: forwarded name (may be NULL).
        let what = unsafe { text(params.name) }
            .unwrap_or_default()
            .into_owned();
        refuse(
            NAME,
            UCS_ERR_NO_MEMORY,
            format!("no method could allocate {length} bytes for '{what}'"),
        )
    })
}

/// `ucs_status_t uct_mem_free(const uct_allocated_memory_t *mem)`.
///
/// # Safety
/// `mem` must be filled by an allocation call of this library and not freed before.
#[no_mangle]
pub unsafe extern "C" fn uct_mem_free(mem: *const uct_allocated_memory_t) -> Status {
    ffi("uct_mem_free", UCS_ERR_INVALID_PARAM, || {
        if mem.is_null() {
            return refuse("uct_mem_free", UCS_ERR_INVALID_PARAM, "NULL memory");
        }
        // SAFETY: checked non-null.
        let mem = unsafe { &*mem };
        let handle = (!mem.memh.is_null())
            // SAFETY: made by into_handle in fill_allocated.
            .then(|| unsafe { Box::from_raw(mem.memh.cast::<Memh>()) });
        let origin = handle.as_ref().map(|h| h.origin);
        drop(handle);
        match (mem.method, origin) {
            (UCT_ALLOC_METHOD_MD, Some(Origin::MdAlloc)) => UCS_OK,
            (UCT_ALLOC_METHOD_MMAP, _) => {
                // SAFETY: the mapping made by map_anon, its handle dropped above.
                unsafe { libc::munmap(mem.address, mem.length) };
                UCS_OK
            }
            _ => refuse(
                "uct_mem_free",
                UCS_ERR_INVALID_PARAM,
                "memory not allocated by this library",
            ),
        }
    })
}
