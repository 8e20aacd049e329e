//! Remote memory access: `ucp_mem_map` / `ucp_mem_unmap` / `ucp_mem_query`, remote keys
//! (`ucp_rkey_pack`, `ucp_ep_rkey_unpack`, …), put and get.
//!
//! rucx maps memory per worker, while UCX maps it per context: a context's mappings are made
//! with its first live worker (MPI libraries create one worker per context), and remote keys
//! are unpacked on the endpoint's worker. A packed remote key is a 4-byte little-endian length
//! followed by rucx's key bundle (so `ucp_ep_rkey_unpack`, which gets no length, knows its end).

use crate::context::Context;
use crate::datatype::{slice, Finish};
use crate::ep::{ep_ref, wait, Ep};
use crate::ffi::*;
use crate::guard::{check_mask, fail, ffi, refuse};
use crate::request::{submit, Cb, OpArgs};
use crate::worker::Worker;
use std::ffi::c_void;
use ucp::{MemMap, Rkey};

/// A memory handle.
pub struct Mem {
    worker: *const Worker,
    map: Option<MemMap>,
    address: *mut c_void,
    length: usize,
}

/// The rucx key of a client key.
///
/// # Safety
/// A live key from `ucp_ep_rkey_unpack`.
pub(crate) unsafe fn rkey_of<'a>(k: *mut CRkey) -> &'a Rkey {
    // SAFETY: per the contract.
    unsafe { &(*k).rkey }
}

/// The address and length of a mapping.
pub(crate) fn range_of(m: &Mem) -> (usize, usize) {
    (m.address as usize, m.length)
}

/// An unpacked remote key.
pub struct CRkey {
    worker: *const Worker,
    rkey: Rkey,
}

const MAP_KNOWN: u64 = UCP_MEM_MAP_PARAM_FIELD_ADDRESS
    | UCP_MEM_MAP_PARAM_FIELD_LENGTH
    | UCP_MEM_MAP_PARAM_FIELD_FLAGS
    | UCP_MEM_MAP_PARAM_FIELD_PROT
    | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;

fn first_worker<'a>(name: &str, c: &Context) -> Result<&'a Worker, Status> {
    let ws = c.workers.lock().unwrap_or_else(|p| p.into_inner());
    match ws.first() {
        // SAFETY: workers unregister before they are freed.
        Some(&w) => Ok(unsafe { &*(w as *const Worker) }),
        None => Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            "rucx maps memory with a worker: create one first",
        )),
    }
}

/// `ucs_status_t ucp_mem_map(ucp_context_h context, const ucp_mem_map_params_t *params,
/// ucp_mem_h *memh_p)`: allocates (`UCP_MEM_MAP_ALLOCATE`) or registers the client's memory
/// for remote access.
///
/// # Safety
/// A live context with a worker; valid params; registered memory stays valid until unmapped.
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
        let flags = if has(UCP_MEM_MAP_PARAM_FIELD_FLAGS) {
            p.flags
        } else {
            0
        };
        if flags & !(UCP_MEM_MAP_NONBLOCK | UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED) != 0 {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                format!("unknown flags {flags:#x}"),
            );
        }
        if has(UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE)
            && p.memory_type != UCS_MEMORY_TYPE_HOST
            && p.memory_type != UCS_MEMORY_TYPE_UNKNOWN
        {
            return refuse(NAME, UCS_ERR_UNSUPPORTED, "rucx maps host memory only");
        }
        if !has(UCP_MEM_MAP_PARAM_FIELD_LENGTH) || p.length == 0 {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "length missing or 0");
        }
        let address = if has(UCP_MEM_MAP_PARAM_FIELD_ADDRESS) {
            p.address
        } else {
            std::ptr::null_mut()
        };
        let allocate = flags & UCP_MEM_MAP_ALLOCATE != 0;
        if allocate && flags & UCP_MEM_MAP_FIXED != 0 {
            return refuse(
                NAME,
                UCS_ERR_UNSUPPORTED,
                "UCP_MEM_MAP_FIXED (allocation at a given address)",
            );
        }
        if !allocate && address.is_null() {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "no address and no UCP_MEM_MAP_ALLOCATE",
            );
        }
        let w = match first_worker(NAME, c) {
            Ok(w) => w,
            Err(s) => return s,
        };
        let _g = w.lock.lock();
        let res = {
            let mut i = w.inner.borrow_mut();
            if allocate {
                i.w.mem_map(p.length)
            } else {
                // SAFETY: the client keeps the memory valid until ucp_mem_unmap (documented).
                unsafe { i.w.mem_map_raw(address as *mut u8, p.length) }
            }
        };
        let map = match res {
            Ok(m) => m,
            Err(e) => return fail(NAME, &e),
        };
        let mem = Box::new(Mem {
            worker: w,
            address: map.address() as *mut c_void,
            length: map.len(),
            map: Some(map),
        });
        // SAFETY: checked non-null.
        unsafe { *memh_p = Box::into_raw(mem) };
        UCS_OK
    })
}

/// `ucs_status_t ucp_mem_unmap(ucp_context_h context, ucp_mem_h memh)`.
///
/// # Safety
/// A handle from `ucp_mem_map`, unmapped once.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_unmap(_context: *mut Context, memh: *mut Mem) -> Status {
    const NAME: &str = "ucp_mem_unmap";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if memh.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "memh is NULL");
        }
        // SAFETY: created by ucp_mem_map.
        let mut m = unsafe { Box::from_raw(memh) };
        // SAFETY: the worker outlives its mappings.
        let w = unsafe { &*m.worker };
        let _g = w.lock.lock();
        drop(m.map.take());
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

/// `ucs_status_t ucp_rkey_pack(ucp_context_h context, ucp_mem_h memh, void **rkey_buffer_p,
/// size_t *size_p)`.
///
/// # Safety
/// A live handle and writable pointers.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_pack(
    _context: *mut Context,
    memh: *mut Mem,
    rkey_buffer_p: *mut *mut c_void,
    size_p: *mut usize,
) -> Status {
    const NAME: &str = "ucp_rkey_pack";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if memh.is_null() || rkey_buffer_p.is_null() || size_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: a live handle.
        let m = unsafe { &*memh };
        // SAFETY: its worker is alive.
        let w = unsafe { &*m.worker };
        let _g = w.lock.lock();
        let Some(map) = &m.map else {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "memory is unmapped");
        };
        let key = map.rkey_packed();
        let total = 4 + key.len();
        // SAFETY: malloc of a non-zero size, filled below.
        let p = unsafe { libc::malloc(total) } as *mut u8;
        if p.is_null() {
            return UCS_ERR_NO_MEMORY;
        }
        // SAFETY: `p` holds `total` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping((key.len() as u32).to_le_bytes().as_ptr(), p, 4);
            std::ptr::copy_nonoverlapping(key.as_ptr(), p.add(4), key.len());
            *rkey_buffer_p = p.cast();
            *size_p = total;
        }
        UCS_OK
    })
}

/// `void ucp_rkey_buffer_release(void *rkey_buffer)`.
///
/// # Safety
/// A buffer from `ucp_rkey_pack`, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_buffer_release(rkey_buffer: *mut c_void) {
    // SAFETY: malloc'd by ucp_rkey_pack.
    ffi("ucp_rkey_buffer_release", (), || unsafe {
        libc::free(rkey_buffer)
    })
}

/// `ucs_status_t ucp_ep_rkey_unpack(ucp_ep_h ep, const void *rkey_buffer, ucp_rkey_h *rkey_p)`.
///
/// # Safety
/// A live endpoint; a buffer packed by a rucx `ucp_rkey_pack`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_rkey_unpack(
    ep: *mut Ep,
    rkey_buffer: *const c_void,
    rkey_p: *mut *mut CRkey,
) -> Status {
    const NAME: &str = "ucp_ep_rkey_unpack";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let (w, h) = match ep_ref(NAME, ep) {
            Ok(x) => x,
            Err(s) => return s,
        };
        if rkey_buffer.is_null() || rkey_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: a packed key starts with its 4-byte length.
        let bytes = unsafe {
            let mut len = [0u8; 4];
            std::ptr::copy_nonoverlapping(rkey_buffer as *const u8, len.as_mut_ptr(), 4);
            let len = u32::from_le_bytes(len) as usize;
            if len > 1 << 20 {
                return refuse(NAME, UCS_ERR_INVALID_PARAM, "not a rucx remote key");
            }
            slice((rkey_buffer as *const u8).add(4).cast(), len)
        };
        let _g = w.lock.lock();
        let rkey = match w.inner.borrow_mut().w.rkey_unpack(h, bytes) {
            Ok(k) => k,
            Err(e) => return fail(NAME, &e),
        };
        // SAFETY: checked non-null.
        unsafe { *rkey_p = Box::into_raw(Box::new(CRkey { worker: w, rkey })) };
        UCS_OK
    })
}

/// `void ucp_rkey_destroy(ucp_rkey_h rkey)`.
///
/// # Safety
/// A key from `ucp_ep_rkey_unpack`, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_destroy(rkey: *mut CRkey) {
    ffi("ucp_rkey_destroy", (), || {
        if rkey.is_null() {
            return;
        }
        // SAFETY: created by ucp_ep_rkey_unpack.
        let k = unsafe { Box::from_raw(rkey) };
        // SAFETY: the worker outlives its keys.
        let w = unsafe { &*k.worker };
        let _g = w.lock.lock();
        drop(k);
    })
}

/// Starts a put or get.
///
/// # Safety
/// Live endpoint and key; `buffer` valid for `length` bytes until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn rma(
    name: &str,
    ep: *mut Ep,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    get: bool,
    args: OpArgs,
) -> StatusPtr {
    let (w, h) = match ep_ref(name, ep) {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    if rkey.is_null() || (buffer.is_null() && length > 0) {
        return status_ptr(refuse(name, UCS_ERR_INVALID_PARAM, "NULL rkey or buffer"));
    }
    // SAFETY: a live key.
    let k = unsafe { &(*rkey).rkey };
    let _g = w.lock.lock();
    let res = {
        let mut i = w.inner.borrow_mut();
        if get {
            // SAFETY: the client's buffer stays valid until completion (documented contract).
            unsafe { i.w.get_raw(h, buffer as *mut u8, length, remote_addr, k) }
        } else {
            // SAFETY: the client's buffer of `length` bytes.
            i.w.put(h, unsafe { slice(buffer, length) }, remote_addr, k)
        }
    };
    submit(name, w, res, &args, Finish::None)
}

/// For `_nbi` calls: a request becomes internal (freed at once: it completes on its own, and
/// a flush waits for it).
pub(crate) fn nbi(r: StatusPtr) -> Status {
    if r.is_null() {
        UCS_OK
    } else if ptr_is_err(r) {
        r as isize as Status
    } else {
        // SAFETY: a request just returned; freeing it only drops the callback.
        unsafe { crate::request::ucp_request_free(r) };
        UCS_INPROGRESS
    }
}

/// `ucs_status_t ucp_put_nbi(ucp_ep_h ep, const void *buffer, size_t length,
/// uint64_t remote_addr, ucp_rkey_h rkey)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbi(
    ep: *mut Ep,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
) -> Status {
    ffi("ucp_put_nbi", UCS_ERR_NO_MEMORY, || {
        // SAFETY: forwarded.
        nbi(unsafe {
            rma(
                "ucp_put_nbi",
                ep,
                buffer as *mut c_void,
                length,
                remote_addr,
                rkey,
                false,
                OpArgs::with_cb(Cb::None, false),
            )
        })
    })
}

/// `ucs_status_ptr_t ucp_put_nb(ucp_ep_h ep, const void *buffer, size_t length,
/// uint64_t remote_addr, ucp_rkey_h rkey, ucp_send_callback_t cb)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nb(
    ep: *mut Ep,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    cb: Option<SendCb>,
) -> StatusPtr {
    ffi("ucp_put_nb", status_ptr(UCS_ERR_NO_MEMORY), || {
        let args = OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false);
        // SAFETY: forwarded.
        unsafe {
            rma(
                "ucp_put_nb",
                ep,
                buffer as *mut c_void,
                length,
                remote_addr,
                rkey,
                false,
                args,
            )
        }
    })
}

/// `ucs_status_t ucp_put(ucp_ep_h ep, const void *buffer, size_t length, uint64_t remote_addr,
/// ucp_rkey_h rkey)`: blocking until the buffer may be reused (local completion).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_put(
    ep: *mut Ep,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
) -> Status {
    ffi("ucp_put", UCS_ERR_NO_MEMORY, || {
        let Ok((w, _)) = ep_ref("ucp_put", ep) else {
            return UCS_ERR_INVALID_PARAM;
        };
        // SAFETY: forwarded.
        let r = unsafe {
            rma(
                "ucp_put",
                ep,
                buffer as *mut c_void,
                length,
                remote_addr,
                rkey,
                false,
                OpArgs::with_cb(Cb::None, false),
            )
        };
        wait(w, r)
    })
}

/// `ucs_status_t ucp_get_nbi(ucp_ep_h ep, void *buffer, size_t length, uint64_t remote_addr,
/// ucp_rkey_h rkey)`: the data lands in `buffer` (complete after a flush).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbi(
    ep: *mut Ep,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
) -> Status {
    ffi("ucp_get_nbi", UCS_ERR_NO_MEMORY, || {
        // SAFETY: forwarded.
        nbi(unsafe {
            rma(
                "ucp_get_nbi",
                ep,
                buffer,
                length,
                remote_addr,
                rkey,
                true,
                OpArgs::with_cb(Cb::None, false),
            )
        })
    })
}

/// `ucs_status_ptr_t ucp_get_nb(ucp_ep_h ep, void *buffer, size_t length, uint64_t remote_addr,
/// ucp_rkey_h rkey, ucp_send_callback_t cb)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nb(
    ep: *mut Ep,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    cb: Option<SendCb>,
) -> StatusPtr {
    ffi("ucp_get_nb", status_ptr(UCS_ERR_NO_MEMORY), || {
        let args = OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false);
        // SAFETY: forwarded.
        unsafe {
            rma(
                "ucp_get_nb",
                ep,
                buffer,
                length,
                remote_addr,
                rkey,
                true,
                args,
            )
        }
    })
}

/// The byte length of an `_nbx` RMA call's `count` elements (contiguous datatypes only).
fn nbx_len(name: &str, count: usize, nbx: &crate::tag::Nbx) -> Result<usize, Status> {
    if nbx.datatype & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_CONTIG {
        return Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            "RMA with a non-contiguous datatype",
        ));
    }
    crate::datatype::contig_len(name, count, nbx.datatype)
}

/// `ucs_status_ptr_t ucp_put_nbx(ucp_ep_h ep, const void *buffer, size_t count,
/// uint64_t remote_addr, ucp_rkey_h rkey, const ucp_request_param_t *param)` (contiguous
/// datatypes).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbx(
    ep: *mut Ep,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_put_nbx";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { crate::tag::parse_param(NAME, param, true) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let len = match nbx_len(NAME, count, &p) {
            Ok(l) => l,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: forwarded.
        unsafe {
            rma(
                NAME,
                ep,
                buffer as *mut c_void,
                len,
                remote_addr,
                rkey,
                false,
                p.send_args(),
            )
        }
    })
}

/// `ucs_status_ptr_t ucp_get_nbx(ucp_ep_h ep, void *buffer, size_t count, uint64_t remote_addr,
/// ucp_rkey_h rkey, const ucp_request_param_t *param)` (contiguous datatypes; the data lands
/// in `buffer`).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbx(
    ep: *mut Ep,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_get_nbx";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { crate::tag::parse_param(NAME, param, true) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let len = match nbx_len(NAME, count, &p) {
            Ok(l) => l,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: forwarded.
        unsafe {
            rma(
                NAME,
                ep,
                buffer,
                len,
                remote_addr,
                rkey,
                true,
                p.send_args(),
            )
        }
    })
}
