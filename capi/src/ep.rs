//! `ucp_ep_h`: endpoints created from a peer's worker address, their error handlers, flush and
//! close, and the old active-message send (`ucp_am_send_nb`).
//!
//! rucx keeps one endpoint per peer worker: a second `ucp_ep_create` to the same address (or
//! to a peer that connected first) shares it. Closing the last client endpoint on it closes
//! it; closing another one flushes (force: nothing) and leaves it to the others.

use crate::datatype::{send_data, Finish, SendData};
use crate::ffi::*;
use crate::guard::{check_mask, fail, ffi, refuse};
use crate::handles::{err_handler_of, new_ep, ucp_params, worker_ref, Cb, Ep, OpArgs, Worker};
use crate::request::submit;
use std::ffi::{c_uint, c_void};
use ucp::{CloseMode, Completion, EpHandle, Op};

/// The worker and rucx handle of a client endpoint.
#[inline(always)]
pub(crate) fn ep_ref<'a>(name: &str, ep: *mut Ep) -> Result<(&'a Worker, EpHandle), Status> {
    let w = ep_worker(name, ep)?;
    // SAFETY: accepted by ep_worker.
    Ok((w, unsafe { ep_handle(ep) }))
}

/// The worker of a client endpoint, for the hot sends, which read the endpoint's handle with
/// [`ep_handle`] where they use it, after taking the lock and the worker's borrow. The handle
/// [`ep_ref`] gives comes back inside its `Result`, at an offset that splits it, and is carried
/// across that code in a stack slot written and read back in pieces that do not match: a read
/// that cannot take its bytes from the pending writes waits for every earlier store to reach
/// the cache, the previous message's stores into the peer's FIFO included (lines fetched from
/// the receiver's core). Sampled with `perf record -e cpu-clock` on
/// `ucx_perftest -t ucp_am_bw -s 8`, that read was 42% of the sender's time in
/// `ucp_am_send_nbx` when the sends took their handle from `ep_ref`.
#[inline(always)]
pub(crate) fn ep_worker<'a>(name: &str, ep: *mut Ep) -> Result<&'a Worker, Status> {
    if ep.is_null() {
        return Err(refuse(name, UCS_ERR_INVALID_PARAM, "ep is NULL"));
    }
    // SAFETY: a live endpoint from ucp_ep_create; its worker outlives it.
    unsafe {
        if (*ep).connecting {
            // On success the endpoint holds its new handle.
            crate::conn::await_connection(name, ep)?;
        }
        Ok(&*(*ep).worker)
    }
}

/// The rucx handle of client endpoint `ep`, read where it is used (see [`ep_worker`]).
///
/// # Safety
/// `ep` is a live endpoint that [`ep_worker`] accepted.
#[inline(always)]
pub(crate) unsafe fn ep_handle(ep: *mut Ep) -> EpHandle {
    // SAFETY: the caller's contract.
    unsafe { (*ep).h }
}

const EP_KNOWN: u64 = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
    | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
    | UCP_EP_PARAM_FIELD_ERR_HANDLER
    | UCP_EP_PARAM_FIELD_USER_DATA
    | UCP_EP_PARAM_FIELD_SOCK_ADDR
    | UCP_EP_PARAM_FIELD_FLAGS
    | UCP_EP_PARAM_FIELD_CONN_REQUEST
    | UCP_EP_PARAM_FIELD_NAME
    | UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR;

/// Longest address accepted (rucx's addresses are a few hundred bytes).
const MAX_ADDRESS: usize = 1 << 16;

/// `ucs_status_t ucp_ep_create(ucp_worker_h worker, const ucp_ep_params_t *params,
/// ucp_ep_h *ep_p)`: from a remote worker address, from a socket address (client side of
/// client/server: returns at once, the connection completes in the background, see
/// [`crate::conn`]), or from a connection request a listener gave (server side). Error
/// handling modes NONE and PEER are both honored the same way: when the peer fails,
/// outstanding requests complete with an error and the error handler, if given, runs from
/// `ucp_worker_progress`.
///
/// # Safety
/// A live worker; valid `params` whose address came from `ucp_worker_get_address` /
/// `ucp_worker_query` of a rucx worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_create(
    worker: *mut Worker,
    params: *const EpParams,
    ep_p: *mut *mut Ep,
) -> Status {
    const NAME: &str = "ucp_ep_create";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        if params.is_null() || ep_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: the caller's params.
        let p = unsafe { &*params };
        if let Err(s) = check_mask(NAME, "ucp_ep_params_t.field_mask", p.field_mask, EP_KNOWN) {
            return s;
        }
        let has = |b: u64| p.field_mask & b != 0;
        // As UCX: a mode other than PEER is NONE (FAILOVER has no second path to fail over
        // to in rucx, so it is PEER).
        if has(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE) && p.err_mode > UCP_ERR_HANDLING_MODE_FAILOVER
        {
            tracing::debug!("{NAME}: error handling mode {} taken as NONE", p.err_mode);
        }
        let known_flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER
            | UCP_EP_PARAMS_FLAGS_NO_LOOPBACK
            | UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID;
        if has(UCP_EP_PARAM_FIELD_FLAGS) && p.flags & !known_flags != 0 {
            tracing::debug!(
                "{NAME}: ignoring endpoint flags {:#x}",
                p.flags & !known_flags
            );
        }
        let sources = [
            UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
            UCP_EP_PARAM_FIELD_SOCK_ADDR,
            UCP_EP_PARAM_FIELD_CONN_REQUEST,
        ]
        .iter()
        .filter(|&&b| has(b))
        .count();
        if sources != 1 {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "exactly one of REMOTE_ADDRESS, SOCK_ADDR and CONN_REQUEST must be set",
            );
        }
        let made = if has(UCP_EP_PARAM_FIELD_SOCK_ADDR) {
            crate::conn::ep_to_sockaddr(NAME, w, p)
        } else if has(UCP_EP_PARAM_FIELD_CONN_REQUEST) {
            crate::conn::ep_from_request(NAME, w, p)
        } else {
            ep_to_address(NAME, w, p)
        };
        match made {
            Ok(ep) => {
                // SAFETY: checked non-null.
                unsafe { *ep_p = ep };
                UCS_OK
            }
            Err(s) => s,
        }
    })
}

/// [`ucp_ep_create`] from a remote worker address.
fn ep_to_address(name: &str, w: &Worker, p: &EpParams) -> Result<*mut Ep, Status> {
    if p.address.is_null() {
        return Err(refuse(name, UCS_ERR_INVALID_PARAM, "no remote address"));
    }
    // SAFETY: the address starts with its 4-byte length (see worker::client_address).
    let bytes = unsafe {
        let mut len = [0u8; 4];
        std::ptr::copy_nonoverlapping(p.address as *const u8, len.as_mut_ptr(), 4);
        let len = u32::from_le_bytes(len) as usize;
        if len == 0 || len > MAX_ADDRESS {
            return Err(refuse(
                name,
                UCS_ERR_INVALID_ADDR,
                format!("not a rucx worker address (length {len})"),
            ));
        }
        std::slice::from_raw_parts((p.address as *const u8).add(4), len)
    };
    let (err_cb, _) = err_handler_of(p);
    let _g = w.lock.lock();
    let params = ucp_params(w, err_cb);
    let res = w.inner.borrow_mut().w.ep_create(bytes, params);
    match res {
        Ok(h) => Ok(new_ep(w, h, p, false)),
        Err(e) => Err(fail(name, &e)),
    }
}

/// Forgets a client endpoint and frees it.
fn forget(w: &Worker, ep: *mut Ep) {
    // SAFETY: a live client endpoint, taken out before it is freed.
    unsafe { w.inner.borrow_mut().eps.remove(ep) };
    // SAFETY: created by ucp_ep_create, freed once.
    drop(unsafe { Box::from_raw(ep) });
}

/// Closes an endpoint; the request completes when it is closed.
fn close(name: &str, ep: *mut Ep, mode: CloseMode, args: OpArgs) -> StatusPtr {
    // SAFETY: a live endpoint (checked non-null first).
    if !ep.is_null() && unsafe { (*ep).connecting } {
        // A connection under way (or one that failed) has nothing to flush: dropped.
        // SAFETY: a live connecting endpoint, closed once (the client's contract).
        return unsafe { crate::conn::close_connecting(ep) };
    }
    let (w, h) = match ep_ref(name, ep) {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    let _g = w.lock.lock();
    let shared = w.inner.borrow().eps.of(h).nth(1).is_some();
    let res = if shared {
        // Another client endpoint still uses the rucx endpoint, which stays: a flush close
        // waits for what was sent to complete; a force close lets it run and returns at once
        // (rucx cannot tell this endpoint's operations from the other's to cancel them).
        match mode {
            CloseMode::Force => Ok(Op::Done(Completion {
                status: Ok(()),
                buf: None,
                len: 0,
                tag: 0,
                value: 0,
            })),
            _ => w.inner.borrow_mut().w.ep_flush(h),
        }
    } else {
        w.inner.borrow_mut().w.ep_close_nb(h, mode)
    };
    forget(w, ep);
    submit(name, w, res, &args, Finish::None)
}

/// `ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep)`: flushes and closes (the deprecated form of
/// `ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FLUSH)`).
///
/// # Safety
/// A live endpoint, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_disconnect_nb(ep: *mut Ep) -> StatusPtr {
    ffi("ucp_disconnect_nb", status_ptr(UCS_ERR_NO_MEMORY), || {
        close(
            "ucp_disconnect_nb",
            ep,
            CloseMode::Flush,
            OpArgs::with_cb(Cb::None, false),
        )
    })
}

/// `ucs_status_ptr_t ucp_ep_close_nb(ucp_ep_h ep, unsigned mode)`.
///
/// # Safety
/// A live endpoint, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_close_nb(ep: *mut Ep, mode: c_uint) -> StatusPtr {
    const NAME: &str = "ucp_ep_close_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        let m = match mode {
            UCP_EP_CLOSE_MODE_FORCE => CloseMode::Force,
            // As UCX: every mode but FORCE flushes.
            _ => CloseMode::Flush,
        };
        close(NAME, ep, m, OpArgs::with_cb(Cb::None, false))
    })
}

/// `ucs_status_ptr_t ucp_ep_close_nbx(ucp_ep_h ep, const ucp_request_param_t *param)`:
/// `UCP_EP_CLOSE_FLAG_FORCE` in `param->flags` closes at once.
///
/// # Safety
/// A live endpoint, not used afterwards; valid `param`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_close_nbx(ep: *mut Ep, param: *const RequestParam) -> StatusPtr {
    const NAME: &str = "ucp_ep_close_nbx";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { crate::param::parse_param(NAME, param, true) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: checked by parse_param.
        let raw = unsafe { &*param };
        let force = raw.op_attr_mask & UCP_OP_ATTR_FIELD_FLAGS != 0 && raw.flags & 1 != 0;
        close(
            NAME,
            ep,
            if force {
                CloseMode::Force
            } else {
                CloseMode::Flush
            },
            p.send_args(),
        )
    })
}

/// Progresses `w` until the request finishes; gives its status.
pub(crate) fn wait(w: &Worker, r: StatusPtr) -> Status {
    if r.is_null() {
        return UCS_OK;
    }
    if ptr_is_err(r) {
        return r as isize as Status;
    }
    loop {
        // SAFETY: a request just returned.
        let s = unsafe { crate::request::ucp_request_check_status(r) };
        if s != UCS_INPROGRESS {
            // SAFETY: released once.
            unsafe { crate::request::ucp_request_free(r) };
            return s;
        }
        w.progress();
    }
}

/// `void ucp_ep_destroy(ucp_ep_h ep)`: flushes and closes, blocking.
///
/// # Safety
/// A live endpoint, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_destroy(ep: *mut Ep) {
    ffi("ucp_ep_destroy", (), || {
        let Ok((w, _)) = ep_ref("ucp_ep_destroy", ep) else {
            return;
        };
        let r = close(
            "ucp_ep_destroy",
            ep,
            CloseMode::Flush,
            OpArgs::with_cb(Cb::None, false),
        );
        wait(w, r);
    })
}

/// `ucs_status_ptr_t ucp_ep_flush_nb(ucp_ep_h ep, unsigned flags, ucp_send_callback_t cb)`.
///
/// # Safety
/// A live endpoint.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush_nb(
    ep: *mut Ep,
    flags: c_uint,
    cb: Option<SendCb>,
) -> StatusPtr {
    const NAME: &str = "ucp_ep_flush_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        if flags != 0 {
            // Reserved in UCX, which ignores them.
            tracing::debug!("{NAME}: ignoring flags {flags:#x}");
        }
        let (w, h) = match ep_ref(NAME, ep) {
            Ok(x) => x,
            Err(s) => return status_ptr(s),
        };
        let _g = w.lock.lock();
        let mut i = w.inner.borrow_mut();
        if i.w.ep_is_quiet(h) {
            return status_ptr(UCS_OK); // nothing is outstanding
        }
        let res = i.w.ep_flush(h);
        drop(i);
        if let Ok(Op::Done(Completion { status: Ok(()), .. })) = &res {
            return status_ptr(UCS_OK); // nothing was outstanding
        }
        submit(
            NAME,
            w,
            res,
            &OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false),
            Finish::None,
        )
    })
}

/// `ucs_status_ptr_t ucp_ep_flush_nbx(ucp_ep_h ep, const ucp_request_param_t *param)`.
///
/// # Safety
/// A live endpoint; valid `param`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush_nbx(ep: *mut Ep, param: *const RequestParam) -> StatusPtr {
    const NAME: &str = "ucp_ep_flush_nbx";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { crate::param::parse_param(NAME, param, true) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let (w, h) = match ep_ref(NAME, ep) {
            Ok(x) => x,
            Err(s) => return status_ptr(s),
        };
        let _g = w.lock.lock();
        let args = p.send_args();
        let mut i = w.inner.borrow_mut();
        if args.caller_req.is_null() && !args.no_imm && i.w.ep_is_quiet(h) {
            return status_ptr(UCS_OK); // nothing is outstanding
        }
        let res = i.w.ep_flush(h);
        drop(i);
        if let (Ok(Op::Done(Completion { status: Ok(()), .. })), true, false) =
            (&res, args.caller_req.is_null(), args.no_imm)
        {
            return status_ptr(UCS_OK); // nothing was outstanding
        }
        submit(NAME, w, res, &args, Finish::None)
    })
}

/// `ucs_status_t ucp_ep_flush(ucp_ep_h ep)`: blocking flush (progresses the worker).
///
/// # Safety
/// A live endpoint.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush(ep: *mut Ep) -> Status {
    const NAME: &str = "ucp_ep_flush";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let (w, _) = match ep_ref(NAME, ep) {
            Ok(x) => x,
            Err(s) => return s,
        };
        // SAFETY: forwarded.
        let r = unsafe { ucp_ep_flush_nb(ep, 0, None) };
        wait(w, r)
    })
}

/// `ucs_status_ptr_t ucp_am_send_nb(ucp_ep_h ep, uint16_t id, const void *buffer, size_t count,
/// ucp_datatype_t datatype, ucp_send_callback_t cb, unsigned flags)`: active message `id` to
/// the peer's handler (`ucp_worker_set_am_handler`). `UCP_AM_SEND_FLAG_REPLY` gives the
/// receiver's handler an endpoint to reply on when it has one to the sender.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_send_nb(
    ep: *mut Ep,
    id: u16,
    buffer: *const c_void,
    count: usize,
    datatype: Datatype,
    cb: Option<SendCb>,
    flags: c_uint,
) -> StatusPtr {
    const NAME: &str = "ucp_am_send_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        if flags & !(UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_RNDV) != 0 {
            return status_ptr(refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                format!("unknown flags {flags:#x}"),
            ));
        }
        let (w, h) = match ep_ref(NAME, ep) {
            Ok(x) => x,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: forwarded contract.
        let data = match unsafe { send_data(NAME, buffer, count, datatype) } {
            Ok(d) => d,
            Err(s) => return status_ptr(s),
        };
        let _g = w.lock.lock();
        let res = {
            let mut i = w.inner.borrow_mut();
            match data {
                SendData::Slice(s) => i.w.am_send(h, id, &[], s),
                SendData::Owned(v) => i.w.am_send_vec(h, id, &[], v),
            }
        };
        submit(
            NAME,
            w,
            res,
            &OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false),
            Finish::None,
        )
    })
}
