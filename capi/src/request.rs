//! Requests: what an `_nb`/`_nbx` call returns, and how it completes.
//!
//! A request is `HDR_SIZE` bytes of rucx state ([`ReqHdr`]) followed by the client's area of
//! `ucp_params_t.request_size` bytes; the pointer the client sees is the start of its area.
//! Request memory comes from a per-worker free list (`request_init` runs once when a memory is
//! created, `request_cleanup` once before it is freed at `ucp_worker_destroy`), or from the
//! client (`UCP_OP_ATTR_FIELD_REQUEST`: the header is built in the `HDR_SIZE` bytes before the
//! pointer it passes, which is why `ucp_context_query` reports `HDR_SIZE` as `request_size`).
//!
//! An operation whose data needs no further delivery (contiguous memory, sends) completes
//! through rucx's completion hook ([`hooked`]): the moment rucx finishes it, the status and the
//! receive info are written into the header; a request without a callback is marked completed
//! there and then, and one with a callback is queued (by header address) for
//! `ucp_worker_progress`, which marks it completed and calls the callback after rucx's own
//! progress call has returned — so the client's callbacks (which often call back into the
//! library) never run inside rucx's worker. Operations whose data still has to be delivered
//! (IOV and generic datatypes, fetched atomic values) have their completions queued on the
//! worker instead and drained by `ucp_worker_progress` ([`complete`]), which delivers the data
//! first. Either way, a request the client freed before its completion is put back on the list
//! instead of being called back.

use crate::datatype::Finish;
use crate::ffi::*;
use crate::guard::{ffi, ffi_hot, status_of};
use crate::handles::{
    hdr_of, user_of, Cb, ReqArgs, ReqHdr, Worker, F_CB_DUE, F_CB_OFF, F_COMPLETED, F_POOLED,
    F_RELEASED,
};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use ucp::{Completion, HookedOp, Op, RequestId};

/// Request memory for an operation: the caller's (FIELD_REQUEST) or the pool's, and the
/// `F_POOLED` bit that says which.
#[inline(always)]
pub(crate) fn request_mem(w: &Worker, args: &impl ReqArgs) -> (*mut ReqHdr, u32) {
    let caller_req = args.caller_req();
    if caller_req.is_null() {
        (w.pool.borrow_mut().get() as *mut ReqHdr, F_POOLED)
    } else {
        (hdr_of(caller_req), 0)
    }
}

/// Writes a request header into request memory from [`request_mem`].
#[inline(always)]
pub(crate) fn write_header(
    hdr: *mut ReqHdr,
    w: &Worker,
    args: &impl ReqArgs,
    flags: u32,
    req: Option<RequestId>,
    finish: Finish,
) {
    // SAFETY: `hdr` starts HDR_SIZE bytes of request memory (ours, or the caller's per the
    // FIELD_REQUEST contract), aligned for the header.
    unsafe {
        hdr.write(ReqHdr {
            flags: AtomicU32::new(flags),
            status: UCS_INPROGRESS,
            info: TagRecvInfo::default(),
            worker: w,
            cb: args.cb(),
            user_data: args.user_data(),
            req,
            finish,
            next: std::ptr::null_mut(),
        })
    };
}

/// Builds a request header (in caller memory or from the pool).
#[inline(always)]
fn new_request(w: &Worker, args: &impl ReqArgs, flags: u32) -> *mut ReqHdr {
    let (hdr, pooled) = request_mem(w, args);
    write_header(hdr, w, args, flags | pooled, None, Finish::None);
    hdr
}

/// Sets flag bits of a request. Every writer of the flags holds the worker's lock (or is the
/// one thread a single-thread worker admits), so a load and a release store suffice; readers
/// that do not lock (`ucp_request_check_status`) see the bits with an acquire load.
#[inline(always)]
fn set_flags(hdr: &ReqHdr, bits: u32) -> u32 {
    let prev = hdr.flags.load(Ordering::Relaxed);
    hdr.flags.store(prev | bits, Ordering::Release);
    prev
}

/// The status and receive info of a completion, after moving its data where the client wants
/// it.
#[inline(always)]
fn finalize(finish: Finish, c: &Completion) -> (Status, TagRecvInfo) {
    // The common case: a successful operation with nothing to copy or write back.
    if let (Finish::None, Ok(())) = (&finish, &c.status) {
        // Nothing to drop (not dropping spares an out-of-line drop call on the hot path).
        std::mem::forget(finish);
        return (
            UCS_OK,
            TagRecvInfo {
                sender_tag: c.tag,
                length: c.len,
            },
        );
    }
    finalize_slow(finish, c)
}

/// [`finalize`] of a failed operation, or of one whose data goes somewhere.
#[inline(never)]
fn finalize_slow(finish: Finish, c: &Completion) -> (Status, TagRecvInfo) {
    let mut status = match &c.status {
        Ok(()) => UCS_OK,
        Err(e) => status_of(e),
    };
    let info = TagRecvInfo {
        sender_tag: c.tag,
        length: c.len,
    };
    if let (Finish::Fetch { dst, size }, true) = (&finish, status == UCS_OK) {
        // SAFETY: the client's result location of `size` bytes (4 or 8), valid until
        // completion.
        unsafe {
            if *size == 4 {
                (*dst as *mut u32).write_unaligned(c.value as u32)
            } else {
                (*dst as *mut u64).write_unaligned(c.value)
            }
        }
    }
    if let Some(s) = finish.deliver(c.buf.as_deref(), c.len) {
        if status == UCS_OK {
            status = s;
        }
    }
    (status, info)
}

/// Hands an operation's outcome to the client: `NULL` / an error pointer when it finished
/// at once, else a request. Called with the worker locked and its rucx worker not borrowed.
#[inline(always)]
pub fn submit(
    name: &str,
    w: &Worker,
    res: ucs::Result<Op>,
    args: &impl ReqArgs,
    finish: Finish,
) -> StatusPtr {
    match res {
        Err(e) => submit_failed(name, &e, finish),
        Ok(Op::Done(c)) => submit_done(w, args, finish, c),
        Ok(Op::Pending(r)) => submit_pending(w, args, finish, r),
    }
}

/// [`submit`] of an operation that finished at once: `NULL` or an error pointer (caller
/// memory gets a completed header too), or a request when the client asked for one.
#[inline(always)]
fn submit_done(w: &Worker, args: &impl ReqArgs, finish: Finish, c: Completion) -> StatusPtr {
    if args.no_imm() {
        return submit_done_later(w, args, finish, c);
    }
    let (status, info) = finalize(finish, &c);
    let info_out = args.info_out();
    if !info_out.is_null() {
        // SAFETY: the client's recv_info pointer.
        unsafe { *info_out = info };
    }
    let len_out = args.len_out();
    if !len_out.is_null() {
        // SAFETY: the client's length pointer.
        unsafe { *len_out = info.length };
    }
    if !args.caller_req().is_null() {
        let h = new_request(w, args, 0);
        // SAFETY: a header just built.
        unsafe {
            (*h).status = status;
            (*h).info = info;
            set_flags(&*h, F_COMPLETED);
        }
    }
    status_ptr(status)
}

/// [`submit`] of an operation that failed to start.
#[cold]
#[inline(never)]
fn submit_failed(name: &str, e: &ucs::Error, finish: Finish) -> StatusPtr {
    finish.abort();
    tracing::debug!("{name}: {e}");
    status_ptr(status_of(e))
}

/// [`submit`] of an operation that finished at once when the client asked for a request
/// anyway (`NO_IMM_CMPL`): it completes from the next `ucp_worker_progress`.
#[inline(never)]
fn submit_done_later(w: &Worker, args: &impl ReqArgs, finish: Finish, c: Completion) -> StatusPtr {
    let h = new_request(w, args, 0);
    // SAFETY: a header just built.
    unsafe { (*h).finish = finish };
    w.inner.borrow_mut().done.push((h as u64, c));
    user_of(h)
}

/// [`submit`] of an operation still running: a request completed by rucx's completion hook
/// ([`hooked`]) when it has nothing to deliver, else through the worker's token queue
/// (`take_done_tokens`, drained by [`complete`]); keyed by the header's address either way.
/// The header is written once, after rucx took the request: nothing reads it before.
#[inline(never)]
pub fn submit_pending(
    w: &Worker,
    args: &impl ReqArgs,
    finish: Finish,
    r: ucp::Request,
) -> StatusPtr {
    let (h, pooled) = request_mem(w, args);
    let res = {
        let mut inner = w.inner.borrow_mut();
        // An operation that finished meanwhile has its result queued with the token (for
        // `complete`) either way: nothing reads the header before this call returns.
        if let Finish::None | Finish::Fetch { .. } = finish {
            inner.w.request_into_hook(r, h as u64)
        } else {
            inner.w.request_into_token_queued(r, h as u64)
        }
    };
    match res {
        Ok(id) => {
            write_header(h, w, args, pooled, Some(id), finish);
            user_of(h)
        }
        Err(e) => {
            finish.abort();
            if pooled != 0 {
                w.pool.borrow_mut().put(h as *mut u8);
            }
            status_ptr(status_of(&e))
        }
    }
}

/// A receive into contiguous client memory (`dst`, `cap` bytes): posted straight into it, and
/// completed through rucx's completion hook if it does not finish at once (request memory is
/// taken only then). Worker locked, rucx worker not borrowed.
///
/// # Safety
/// The client keeps `dst` valid and untouched until the request completes (the contract of
/// every UCX receive).
#[inline(always)]
pub unsafe fn recv_contig(
    name: &str,
    w: &Worker,
    dst: *mut u8,
    cap: usize,
    tag: u64,
    mask: u64,
    args: impl ReqArgs,
) -> StatusPtr {
    let mut inner = w.inner.borrow_mut();
    // Request memory is taken only for a receive left waiting; its header is written after
    // rucx bound the receive to it (a receive that finished meanwhile has its result queued
    // with the token, for `complete`): nothing reads the header before this call returns.
    let mut mem: (*mut ReqHdr, u32) = (std::ptr::null_mut(), 0);
    // SAFETY: forwarded contract.
    let res = unsafe {
        inner.w.tag_recv_raw_hooked(
            dst,
            cap,
            tag,
            mask,
            // Inlined: out of line, the closure's call and its captures in memory cost more
            // than its body.
            #[inline(always)]
            || {
                mem = request_mem(w, &args);
                mem.0 as u64
            },
        )
    };
    drop(inner);
    submit_hooked(name, w, &args, mem, res)
}

/// The client's result of a receive posted through a hooked call (`tag_recv_raw_hooked`,
/// `stream_recv_raw_hooked`) whose token closure took request memory `mem` (null when it was
/// not called): the request for one left waiting, else what [`submit`] gives. Worker locked,
/// rucx worker not borrowed.
#[inline(always)]
pub fn submit_hooked(
    name: &str,
    w: &Worker,
    args: &impl ReqArgs,
    mem: (*mut ReqHdr, u32),
    res: ucs::Result<HookedOp>,
) -> StatusPtr {
    let (h, pooled) = mem;
    match res {
        // rucx asks for the token of every receive it leaves waiting.
        Ok(HookedOp::Pending(id)) if !h.is_null() => {
            write_header(h, w, args, pooled, Some(id), Finish::None);
            user_of(h)
        }
        Ok(HookedOp::Pending(_)) => status_ptr(UCS_ERR_NO_RESOURCE),
        Ok(HookedOp::Done(c)) => submit_done(w, args, Finish::None, c),
        Err(e) => {
            if pooled != 0 {
                w.pool.borrow_mut().put(h as *mut u8);
            }
            submit_failed(name, &e, Finish::None)
        }
    }
}

/// rucx's completion hook: the result of request `token` (its header address), given the
/// moment rucx finishes it, while rucx's worker is borrowed (so it touches only the header,
/// the pool and the worker's callback queue). Status and info go into the header; a request
/// without a callback is completed here (or recycled, if the client freed it), one with a
/// callback is queued for [`run_callback`] from `ucp_worker_progress`.
#[inline]
pub fn hooked(w: &Worker, token: u64, c: &Completion) {
    let h = token as *mut ReqHdr;
    // SAFETY: a request of this worker that has not completed yet (hook requests have
    // `Finish::None` or `Finish::Fetch`): its memory is valid (the client keeps caller memory until completion;
    // pooled memory is recycled only after).
    let hdr = unsafe { &mut *h };
    // A fetching atomic's value is a plain store into client memory: done here too.
    if let Finish::Fetch { dst, size } = hdr.finish {
        hdr.finish = Finish::None;
        if c.status.is_ok() {
            write_fetched(dst, size, c.value);
        }
    }
    let (status, info) = finalize(Finish::None, c);
    hdr.status = status;
    hdr.info = info;
    if let Cb::None = hdr.cb {
        let prev = set_flags(hdr, F_COMPLETED);
        if prev & F_RELEASED != 0 {
            recycle(w, h, prev);
        }
    } else {
        set_flags(hdr, F_CB_DUE);
        // SAFETY: a live header of `w`; a request finishes once, so it is not queued yet.
        unsafe { w.due_push(h) };
    }
}

/// Completes the hook receive of `e` (tag or stream: rucx put what it waited for into its
/// buffer, without error): its status and info, then its callback, then its recycling if the
/// client freed it meanwhile, as [`hooked`] and [`run_callback`] do in two steps for other results. Worker
/// locked, rucx worker not borrowed.
///
/// # Safety
/// `e.token` is a live request header of `w` that has not completed.
#[inline(always)]
pub unsafe fn complete_recv_ok(w: &Worker, e: &ucp::RecvOk) {
    let h = e.token as *mut ReqHdr;
    // SAFETY: as the contract says (a receive's header: `Finish::None`).
    let hdr = unsafe { &mut *h };
    hdr.status = UCS_OK;
    hdr.info = TagRecvInfo {
        sender_tag: e.tag,
        length: e.len,
    };
    let prev = set_flags(hdr, F_COMPLETED);
    if prev & F_CB_OFF == 0 {
        call_back(h, hdr.cb, hdr.user_data, UCS_OK, hdr.info);
    }
    if prev & F_RELEASED != 0 {
        recycle(w, h, prev);
    }
}

/// Completes a request [`hooked`] queued: marks it completed and calls its callback, then
/// recycles it if the client freed it meanwhile. Worker locked, rucx worker not borrowed.
///
/// # Safety
/// `h` is a request of `w` taken off its queue of due callbacks.
#[inline]
pub unsafe fn run_callback(w: &Worker, h: *mut ReqHdr) {
    // SAFETY: a queued request: finished, not recycled (a free while queued only marks it).
    let hdr = unsafe { &*h };
    let prev = hdr.flags.load(Ordering::Relaxed);
    hdr.flags
        .store((prev & !F_CB_DUE) | F_COMPLETED, Ordering::Release);
    if prev & F_CB_OFF == 0 {
        call_back(h, hdr.cb, hdr.user_data, hdr.status, hdr.info);
    }
    if prev & F_RELEASED != 0 {
        recycle(w, h, prev);
    }
}

/// Calls a request's callback with its C signature.
#[inline(always)]
fn call_back(h: *mut ReqHdr, cb: Cb, ud: *mut c_void, status: Status, mut info: TagRecvInfo) {
    if status < 0 && matches!(cb, Cb::Recv(_) | Cb::RecvNbx(_)) {
        fatal_recv_failure(h, status);
    }
    let user = user_of(h);
    // SAFETY: the client's callbacks, called with the signatures of the header.
    unsafe {
        match cb {
            Cb::None => {}
            Cb::Send(f) => f(user, status),
            Cb::SendNbx(f) => f(user, status, ud),
            Cb::Recv(f) => f(user, status, &mut info),
            Cb::RecvNbx(f) => f(user, status, &info, ud),
            Cb::StreamRecv(f) => f(user, status, info.length),
            Cb::StreamRecvNbx(f) => f(user, status, info.length, ud),
        }
    }
}

/// A tag receive failed with `status`. A client that made no endpoint with an error handler
/// (UCX's `UCP_ERR_HANDLING_MODE_NONE`, as Open MPI and MPICH make theirs) has not asked to
/// learn of errors, and some read a failed receive's callback as a success (MPICH's takes
/// every status but a cancel or truncation as the message's arrival, with the length in the
/// info: the receiver would go on with data that never came). A receive that fails for any
/// other reason than those two therefore ends such a process, after one line saying why (the
/// peer's failure was logged before, naming it), as UCX ends a process on an error it cannot
/// report.
#[cold]
#[inline(never)]
fn fatal_recv_failure(h: *mut ReqHdr, status: Status) {
    if status == UCS_ERR_CANCELED || status == UCS_ERR_MESSAGE_TRUNCATED {
        return;
    }
    // SAFETY: a live request header; its worker outlives it.
    let w = unsafe { &*(*h).worker };
    if w.handles_errors.get() {
        return;
    }
    let what = crate::ucs_codes::status_cstr(status).to_string_lossy();
    log_queued_failures(w);
    tracing::error!(
        "a tag receive failed ({what}) on a worker whose endpoints have no error handler \
         (UCP_ERR_HANDLING_MODE_NONE): the client cannot tell it from an arrival, so the \
         process ends here"
    );
    std::process::abort();
}

/// Logs the endpoint failures `ucp_worker_progress` has queued but not yet delivered, each
/// naming its peer: a receive failed by a peer's failure can complete (and end the process)
/// before the failure itself is delivered and logged.
#[cold]
fn log_queued_failures(w: &Worker) {
    let Ok(i) = w.inner.try_borrow() else {
        return;
    };
    let Ok(errs) = i.ep_errors.try_borrow() else {
        return;
    };
    for &(h, status) in errs.iter() {
        match i.w.ep_status(h) {
            Err(e) => tracing::error!("{e}"),
            Ok(()) => tracing::error!("an endpoint failed (status {status})"),
        }
    }
}

/// A tag send failed at once because its endpoint can no longer deliver (`why`: the peer
/// failed, or closed its endpoint), on a worker whose endpoints have no error handler
/// (`UCP_ERR_HANDLING_MODE_NONE`, as Open MPI and MPICH make theirs). Such a client has not
/// asked to learn of peer failures, and an MPI library may go on past the failed send with
/// data that never came: MPICH's recursive-doubling allreduce records the error of one step's
/// `MPIC_Sendrecv`, reduces the receive buffer that step never filled, sends that on to the
/// next partner and can return `MPI_SUCCESS` (a rank whose link was cut then reported garbage
/// as its result, tests/netns/mpi-hosts.sh's cut case). As a failed receive does
/// ([`fatal_recv_failure`]), the send ends the process, after one line saying why (naming the
/// peer), as UCX ends a process on an error it cannot report.
#[cold]
#[inline(never)]
pub(crate) fn fatal_send_failure(name: &str, why: &ucs::Error) -> ! {
    tracing::error!(
        "{name}: a tag send failed at once ({why}) on a worker whose endpoints have no error \
         handler (UCP_ERR_HANDLING_MODE_NONE): the client may go on as if the message had \
         been sent, so the process ends here"
    );
    std::process::abort();
}

/// Puts a pooled request memory back on the free list (caller memory is left alone);
/// `flags` are its header's flags as last read (`F_POOLED` is set when the header is written
/// and never changes, so any read tells).
#[inline]
fn recycle(w: &Worker, h: *mut ReqHdr, flags: u32) {
    if flags & F_POOLED != 0 {
        w.pool.borrow_mut().put(h as *mut u8);
    }
}

/// Completes a request from the worker's queue: data delivered, status written, then the
/// callback (and recycling, if the client freed it). Worker locked, rucx worker not borrowed.
/// The completion stays the caller's to drop.
#[inline]
pub fn complete(w: &Worker, key: usize, c: &Completion) {
    let h = key as *mut ReqHdr;
    // SAFETY: a request of this worker that has not completed yet: its memory is valid (the
    // client keeps caller memory until completion; pooled memory is recycled only after).
    let hdr = unsafe { &mut *h };
    let finish = std::mem::replace(&mut hdr.finish, Finish::None);
    hdr.req = None;
    let (status, info) = finalize(finish, c);
    hdr.status = status;
    hdr.info = info;
    let prev = set_flags(hdr, F_COMPLETED);
    if prev & F_CB_OFF == 0 {
        call_back(h, hdr.cb, hdr.user_data, status, info);
    }
    if prev & F_RELEASED != 0 {
        recycle(w, h, prev);
    }
}

/// Logs a call given something that is not a request pointer.
#[cold]
#[inline(never)]
fn not_a_request(name: &str) {
    tracing::warn!("{name}: not a request pointer");
}

/// The header of a request pointer (`None` for NULL and error pointers).
#[inline(always)]
fn hdr_checked(request: *mut c_void) -> Option<*mut ReqHdr> {
    if request.is_null() || ptr_is_err(request) {
        return None;
    }
    Some(hdr_of(request))
}

#[inline(always)]
fn worker_of(request: *mut c_void) -> Option<(&'static Worker, *mut ReqHdr)> {
    if request.is_null() || ptr_is_err(request) {
        return None;
    }
    let h = hdr_of(request);
    // SAFETY: a request pointer given out by this library.
    let w = unsafe { (*h).worker };
    // SAFETY: the worker outlives its requests.
    Some((unsafe { &*w }, h))
}

/// `ucs_status_t ucp_request_check_status(void *request)`.
///
/// # Safety
/// A request from this library.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_check_status(request: *mut c_void) -> Status {
    ffi_hot("ucp_request_check_status", UCS_ERR_INVALID_PARAM, || {
        let Some(h) = hdr_checked(request) else {
            return UCS_ERR_INVALID_PARAM;
        };
        // SAFETY: a live request.
        let hdr = unsafe { &*h };
        if hdr.flags.load(Ordering::Acquire) & F_COMPLETED != 0 {
            hdr.status
        } else {
            UCS_INPROGRESS
        }
    })
}

/// `ucs_status_t ucp_request_test(void *request, ucp_tag_recv_info_t *info)`: the status, and
/// for a finished receive its info.
///
/// # Safety
/// A request from this library; `info` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_test(request: *mut c_void, info: *mut TagRecvInfo) -> Status {
    ffi_hot("ucp_request_test", UCS_ERR_INVALID_PARAM, || {
        let Some(h) = hdr_checked(request) else {
            return UCS_ERR_INVALID_PARAM;
        };
        // SAFETY: a live request.
        let hdr = unsafe { &*h };
        if hdr.flags.load(Ordering::Acquire) & F_COMPLETED == 0 {
            return UCS_INPROGRESS;
        }
        if !info.is_null() {
            // SAFETY: the caller's pointer.
            unsafe { *info = hdr.info };
        }
        hdr.status
    })
}

/// `int ucp_request_is_completed(void *request)`.
///
/// # Safety
/// A request from this library.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_is_completed(request: *mut c_void) -> i32 {
    // SAFETY: forwarded.
    (unsafe { ucp_request_check_status(request) } != UCS_INPROGRESS) as i32
}

/// `void ucp_request_free(void *request)`: gives the request back. A running operation goes
/// on without its callback (UCX's code clears the callback flag here); the memory is recycled
/// when it completes. A second free is refused.
///
/// # Safety
/// A request from this library, freed once.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_free(request: *mut c_void) {
    ffi_hot("ucp_request_free", (), || {
        // SAFETY: forwarded.
        unsafe { release("ucp_request_free", request, F_RELEASED | F_CB_OFF) }
    })
}

/// `void ucp_request_release(void *request)`: the deprecated form of `ucp_request_free`, which
/// in UCX's code keeps the callback: a running operation still calls it when it completes,
/// and the memory is recycled after that.
///
/// # Safety
/// As `ucp_request_free`.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_release(request: *mut c_void) {
    ffi_hot("ucp_request_release", (), || {
        // SAFETY: forwarded.
        unsafe { release("ucp_request_release", request, F_RELEASED) }
    })
}

/// Marks `request` released with `bits`, recycling it now if it completed with no callback
/// due.
///
/// # Safety
/// A request from this library, released once.
#[inline(always)]
unsafe fn release(name: &str, request: *mut c_void, bits: u32) {
    let Some((w, h)) = worker_of(request) else {
        not_a_request(name);
        return;
    };
    let _g = w.lock.lock();
    // SAFETY: a live request.
    let prev = set_flags(unsafe { &*h }, bits);
    if prev & F_RELEASED != 0 {
        // A callback freeing a request the client had released already (or a double free):
        // recycling twice would hand the memory out twice.
        freed_twice(name);
        return;
    }
    if prev & F_COMPLETED != 0 && prev & F_CB_DUE == 0 {
        recycle(w, h, prev);
    }
}

/// Logs a request freed again (see [`release`]).
#[cold]
#[inline(never)]
fn freed_twice(name: &str) {
    tracing::warn!("{name}: the request was freed already");
}

/// `void ucp_request_cancel(ucp_worker_h worker, void *request)`: a receive that has not
/// matched completes with `UCS_ERR_CANCELED` (its callback runs from `ucp_worker_progress`);
/// other operations, and receives already matched, are not affected.
///
/// # Safety
/// A worker and one of its requests.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_cancel(worker: *mut Worker, request: *mut c_void) {
    ffi("ucp_request_cancel", (), || {
        let Some((w, h)) = worker_of(request) else {
            tracing::warn!("ucp_request_cancel: not a request pointer");
            return;
        };
        if !worker.is_null() && !std::ptr::eq(worker, w) {
            tracing::warn!("ucp_request_cancel: the request belongs to another worker");
            return;
        }
        let _g = w.lock.lock();
        // SAFETY: a live request.
        let hdr = unsafe { &*h };
        if hdr.flags.load(Ordering::Acquire) & (F_COMPLETED | F_CB_DUE) != 0 {
            return;
        }
        if let Some(r) = hdr.req {
            let mut inner = w.inner.borrow_mut();
            match inner.w.request_cancel_id(r) {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!("ucp_request_cancel: the operation can no longer be canceled")
                }
                Err(e) => tracing::warn!("ucp_request_cancel: {e}"),
            }
        }
    })
}

/// Writes a fetching atomic's old value `value` (`size` 4 or 8 bytes) to the client's result
/// location `dst`.
#[inline(always)]
pub(crate) fn write_fetched(dst: *mut u8, size: usize, value: u64) {
    // SAFETY: `dst` is the client's result location of `size` bytes, valid until the atomic
    // completes (the contract of every fetching atomic), which is now.
    unsafe {
        if size == 4 {
            (dst as *mut u32).write_unaligned(value as u32)
        } else {
            (dst as *mut u64).write_unaligned(value)
        }
    }
}
