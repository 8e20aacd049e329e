//! The remaining calls: `ucp_tag_send_nbr` / `ucp_tag_recv_nbr` on caller request memory
//! (`ucp_request_alloc`), `ucp_tag_recv_request_test`, `ucp_ep_modify_nb`,
//! `ucp_ep_evaluate_perf`, and the host-memory additions of UCX 1.14-1.18: `ucp_dt_query`,
//! `ucp_memh_pack` / `ucp_memh_buffer_release`, `ucp_rkey_compare`.

use crate::ffi::*;
use crate::guard::{check_mask, fail, ffi, refuse};
use crate::handles::{hdr_of, worker_ref, Ep, ReqHdr, Worker, F_COMPLETED, F_POOLED};
use std::ffi::c_void;
use std::sync::atomic::Ordering;

/// Marks request memory from `ucp_request_alloc` (kept in the header's `user_data` until an
/// operation uses the memory): the `_nbr` calls then give it back to the pool when it is freed.
const ALLOC_MARK: usize = 0x7275_6378_616c_6c63; // "rucxallc"

/// `void *ucp_request_alloc(ucp_worker_h worker)`: request memory for the `_nbr` calls
/// (released with `ucp_request_free` once its operation completed).
///
/// # Safety
/// A live worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_alloc(worker: *mut Worker) -> *mut c_void {
    const NAME: &str = "ucp_request_alloc";
    ffi(NAME, std::ptr::null_mut(), || {
        let Ok(w) = worker_ref(NAME, worker) else {
            return std::ptr::null_mut();
        };
        let _g = w.lock.lock();
        let args = crate::handles::OpArgs::with_cb(crate::handles::Cb::None, false);
        let (h, pooled) = crate::request::request_mem(w, &args);
        crate::request::write_header(
            h,
            w,
            &args,
            pooled | F_COMPLETED,
            None,
            crate::datatype::Finish::None,
        );
        // SAFETY: the header just written.
        unsafe { (*h).user_data = ALLOC_MARK as *mut c_void };
        crate::handles::user_of(h)
    })
}

/// True when `req` is memory from `ucp_request_alloc` of `w` not used by an operation yet.
fn from_alloc(w: &Worker, req: *mut c_void) -> bool {
    let h: *mut ReqHdr = hdr_of(req);
    // SAFETY: the caller promises `HDR_SIZE` bytes before `req` (the `_nbr` contract); they
    // are read, not trusted: only our header has this worker, pool bit and mark.
    unsafe {
        std::ptr::eq((*h).worker, w)
            && (*h).flags.load(Ordering::Relaxed) & F_POOLED != 0
            && (*h).user_data as usize == ALLOC_MARK
    }
}

/// The status of an `_nbr` call from what the `_nbx` call gave.
fn nbr_status(r: StatusPtr, req: *mut c_void) -> Status {
    if r.is_null() {
        UCS_OK
    } else if ptr_is_err(r) {
        r as isize as Status
    } else {
        debug_assert_eq!(r, req);
        UCS_INPROGRESS
    }
}

/// Runs an `_nbx` call on caller request memory `req`, keeping memory from
/// `ucp_request_alloc` the pool's.
fn nbr(w: &Worker, req: *mut c_void, call: impl FnOnce(&RequestParam) -> StatusPtr) -> Status {
    if req.is_null() {
        return refuse("ucp_tag_*_nbr", UCS_ERR_INVALID_PARAM, "req is NULL");
    }
    let _g = w.lock.lock();
    let alloc = from_alloc(w, req);
    // SAFETY: an all-zero param is valid (no fields), filled below.
    let mut p: RequestParam = unsafe { std::mem::zeroed() };
    p.op_attr_mask = UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.request = req;
    let r = call(&p);
    if alloc && !ptr_is_err(r) {
        // SAFETY: our header, just rewritten by the operation.
        unsafe { (*hdr_of(req)).flags.fetch_or(F_POOLED, Ordering::Release) };
    }
    nbr_status(r, req)
}

/// `ucs_status_t ucp_tag_send_nbr(ucp_ep_h ep, const void *buffer, size_t count,
/// ucp_datatype_t datatype, ucp_tag_t tag, void *req)`: `UCS_INPROGRESS` until
/// `ucp_request_test` says otherwise.
///
/// # Safety
/// As the header documents: `req` has `ucp_context_query`'s `request_size` bytes before it.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nbr(
    ep: *mut Ep,
    buffer: *const c_void,
    count: usize,
    datatype: Datatype,
    tag: Tag,
    req: *mut c_void,
) -> Status {
    const NAME: &str = "ucp_tag_send_nbr";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let (w, _) = match crate::ep::ep_ref(NAME, ep) {
            Ok(x) => x,
            Err(s) => return s,
        };
        nbr(w, req, |p| {
            let mut p = *p;
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
            p.datatype = datatype;
            // SAFETY: forwarded.
            unsafe { crate::tag::ucp_tag_send_nbx(ep, buffer, count, tag, &p) }
        })
    })
}

/// `ucs_status_t ucp_tag_recv_nbr(ucp_worker_h worker, void *buffer, size_t count,
/// ucp_datatype_t datatype, ucp_tag_t tag, ucp_tag_t tag_mask, void *req)`: completion and
/// receive info through `ucp_tag_recv_request_test`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nbr(
    worker: *mut Worker,
    buffer: *mut c_void,
    count: usize,
    datatype: Datatype,
    tag: Tag,
    tag_mask: Tag,
    req: *mut c_void,
) -> Status {
    const NAME: &str = "ucp_tag_recv_nbr";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        nbr(w, req, |p| {
            let mut p = *p;
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
            p.datatype = datatype;
            // SAFETY: forwarded.
            unsafe { crate::tag::ucp_tag_recv_nbx(worker, buffer, count, tag, tag_mask, &p) }
        })
    })
}

/// `ucs_status_t ucp_tag_recv_request_test(void *request, ucp_tag_recv_info_t *info)`.
///
/// # Safety
/// A receive request; `info` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_request_test(
    request: *mut c_void,
    info: *mut TagRecvInfo,
) -> Status {
    // SAFETY: forwarded.
    unsafe { crate::request::ucp_request_test(request, info) }
}

/// `ucs_status_ptr_t ucp_ep_modify_nb(ucp_ep_h ep, const ucp_ep_params_t *params)`: changes
/// the error handler and `user_data` (as UCX: the address, socket address and error handling
/// mode cannot change).
///
/// # Safety
/// A live endpoint and valid `params`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_modify_nb(ep: *mut Ep, params: *const EpParams) -> StatusPtr {
    const NAME: &str = "ucp_ep_modify_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        if ep.is_null() || params.is_null() {
            return status_ptr(refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument"));
        }
        // SAFETY: caller pointers.
        let (e, p) = unsafe { (&mut *ep, &*params) };
        let fixed = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
            | UCP_EP_PARAM_FIELD_SOCK_ADDR
            | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
            | UCP_EP_PARAM_FIELD_CONN_REQUEST;
        if p.field_mask & fixed != 0 {
            return status_ptr(refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "the address, socket address, connection request and error handling mode cannot change",
            ));
        }
        // SAFETY: the endpoint's worker outlives it.
        let w = unsafe { &*e.worker };
        let _g = w.lock.lock();
        if p.field_mask & UCP_EP_PARAM_FIELD_ERR_HANDLER != 0 {
            let had = e.err_cb.is_some();
            e.err_cb = p.err_handler.cb;
            e.err_arg = p.err_handler.arg;
            if !had && e.err_cb.is_some() && !e.connecting {
                // rucx reports failures only to endpoints that asked: ask now (the same
                // rucx endpoint comes back, with the handler set).
                let params = crate::handles::ucp_params(w, e.err_cb);
                let r = w.inner.borrow_mut().w.ep_set_err_handler(e.h, params);
                if let Err(err) = r {
                    return status_ptr(fail(NAME, &err));
                }
            }
        }
        if p.field_mask & UCP_EP_PARAM_FIELD_USER_DATA != 0 {
            e.user_data = p.user_data;
            if p.field_mask & UCP_EP_PARAM_FIELD_ERR_HANDLER == 0 {
                e.err_arg = p.user_data;
            }
        }
        std::ptr::null_mut()
    })
}

/// `ucs_status_t ucp_ep_evaluate_perf(ucp_ep_h ep, const ucp_ep_evaluate_perf_param_t
/// *param, ucp_ep_evaluate_perf_attr_t *attr)`: the estimated time (seconds) of a message of
/// `message_size` bytes, from the performance model of the endpoint's fastest lane.
///
/// # Safety
/// A live endpoint; valid `param` and `attr`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_evaluate_perf(
    ep: *mut Ep,
    param: *const EpPerfParam,
    attr: *mut EpPerfAttr,
) -> Status {
    const NAME: &str = "ucp_ep_evaluate_perf";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if param.is_null() || attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: caller pointers.
        let (p, a) = unsafe { (&*param, &mut *attr) };
        if let Err(s) = check_mask(
            NAME,
            "ucp_ep_evaluate_perf_param_t.field_mask",
            p.field_mask,
            UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE,
        ) {
            return s;
        }
        if let Err(s) = check_mask(
            NAME,
            "ucp_ep_evaluate_perf_attr_t.field_mask",
            a.field_mask,
            UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME,
        ) {
            return s;
        }
        if p.field_mask & UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE == 0
            || a.field_mask & UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME == 0
        {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "message size and estimated time must be asked",
            );
        }
        let (w, h) = match crate::ep::ep_ref(NAME, ep) {
            Ok(x) => x,
            Err(s) => return s,
        };
        let _g = w.lock.lock();
        let r = w.inner.borrow().w.ep_estimate_time(h, p.message_size);
        match r {
            Ok(t) => {
                a.estimated_time = t;
                UCS_OK
            }
            Err(e) => fail(NAME, &e),
        }
    })
}

/// `ucs_status_t ucp_dt_query(ucp_datatype_t datatype, ucp_datatype_attr_t *attr)`: the
/// packed size of `count` elements at `buffer` (contiguous: count times the element size;
/// IOV: the entries' total; generic: the datatype's `packed_size`, which needs the buffer).
///
/// # Safety
/// `attr` valid; `buffer` and `count` describe the data as the datatype needs.
#[no_mangle]
pub unsafe extern "C" fn ucp_dt_query(datatype: Datatype, attr: *mut DatatypeAttr) -> Status {
    const NAME: &str = "ucp_dt_query";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "attr is NULL");
        }
        // SAFETY: the caller's struct.
        let a = unsafe { &mut *attr };
        let known = UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE
            | UCP_DATATYPE_ATTR_FIELD_BUFFER
            | UCP_DATATYPE_ATTR_FIELD_COUNT;
        if let Err(s) = check_mask(NAME, "ucp_datatype_attr_t.field_mask", a.field_mask, known) {
            return s;
        }
        if a.field_mask & UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE == 0 {
            return UCS_OK;
        }
        let count = if a.field_mask & UCP_DATATYPE_ATTR_FIELD_COUNT != 0 {
            a.count
        } else {
            1
        };
        let buffer = if a.field_mask & UCP_DATATYPE_ATTR_FIELD_BUFFER != 0 {
            a.buffer
        } else {
            std::ptr::null()
        };
        // SAFETY: forwarded contract.
        match unsafe { crate::datatype::packed_size(NAME, buffer, count, datatype) } {
            Ok(n) => {
                a.packed_size = n;
                UCS_OK
            }
            Err(s) => s,
        }
    })
}

/// `ucs_status_t ucp_memh_pack(ucp_mem_h memh, const ucp_memh_pack_params_t *params, void
/// **buffer_p, size_t *buffer_size_p)`: the memory handle packed for a peer (its remote key,
/// as `ucp_rkey_pack`). `UCP_MEMH_PACK_FLAG_EXPORT` (a handle another process maps as its
/// own local memory) gives `UCS_ERR_UNSUPPORTED`, as UCX does where no memory domain can
/// export host memory.
///
/// # Safety
/// A live memory handle; writable output pointers.
#[no_mangle]
pub unsafe extern "C" fn ucp_memh_pack(
    memh: *mut crate::mem::Mem,
    params: *const MemhPackParams,
    buffer_p: *mut *mut c_void,
    buffer_size_p: *mut usize,
) -> Status {
    const NAME: &str = "ucp_memh_pack";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if memh.is_null() || params.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: the caller's params.
        let p = unsafe { &*params };
        if let Err(s) = check_mask(
            NAME,
            "ucp_memh_pack_params_t.field_mask",
            p.field_mask,
            UCP_MEMH_PACK_PARAM_FIELD_FLAGS,
        ) {
            return s;
        }
        let flags = if p.field_mask & UCP_MEMH_PACK_PARAM_FIELD_FLAGS != 0 {
            p.flags
        } else {
            0
        };
        if flags & UCP_MEMH_PACK_FLAG_EXPORT != 0 {
            return refuse(
                NAME,
                UCS_ERR_UNSUPPORTED,
                "exporting a memory handle to another process is not supported (no rucx memory domain exports)",
            );
        }
        // SAFETY: a live handle; its context outlives it.
        let ctx = unsafe { (*memh).context } as *mut crate::handles::Context;
        // SAFETY: forwarded.
        unsafe { crate::rma::ucp_rkey_pack(ctx, memh, buffer_p, buffer_size_p) }
    })
}

/// `void ucp_memh_buffer_release(void *buffer, const ucp_memh_buffer_release_params_t
/// *params)`.
///
/// # Safety
/// A buffer from `ucp_memh_pack`, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_memh_buffer_release(buffer: *mut c_void, params: *const MaskOnly) {
    const NAME: &str = "ucp_memh_buffer_release";
    ffi(NAME, (), || {
        if !params.is_null() {
            // SAFETY: the caller's params.
            let m = unsafe { (*params).field_mask };
            if check_mask(NAME, "ucp_memh_buffer_release_params_t.field_mask", m, 0).is_err() {
                return;
            }
        }
        // SAFETY: forwarded.
        unsafe { crate::rma::ucp_rkey_buffer_release(buffer) }
    })
}

/// `ucs_status_t ucp_rkey_compare(ucp_worker_h worker, ucp_rkey_h rkey1, ucp_rkey_h rkey2,
/// const ucp_rkey_compare_params_t *params, int *result)`: 0 when both keys reach the same
/// mapping, otherwise a consistent order (< 0 or > 0). Keys of another worker are refused.
///
/// # Safety
/// A live worker, two of its keys, writable `result`.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_compare(
    worker: *mut Worker,
    rkey1: *mut crate::rma::CRkey,
    rkey2: *mut crate::rma::CRkey,
    params: *const MaskOnly,
    result: *mut std::ffi::c_int,
) -> Status {
    const NAME: &str = "ucp_rkey_compare";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if worker.is_null()
            || rkey1.is_null()
            || rkey2.is_null()
            || params.is_null()
            || result.is_null()
        {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: caller pointers.
        let (a, b, p) = unsafe { (&*rkey1, &*rkey2, &*params) };
        if let Err(s) = check_mask(
            NAME,
            "ucp_rkey_compare_params_t.field_mask",
            p.field_mask,
            0,
        ) {
            return s;
        }
        if !std::ptr::eq(a.worker(), worker) || !std::ptr::eq(b.worker(), worker) {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "a key belongs to another worker",
            );
        }
        // SAFETY: checked non-null.
        unsafe {
            *result = match a.identity().cmp(&b.identity()) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            }
        };
        UCS_OK
    })
}
