//! The stream API: `ucp_stream_send_nb(x)`, `ucp_stream_recv_nb(x)`,
//! `ucp_stream_recv_data_nb` / `ucp_stream_data_release`, `ucp_stream_recv_request_test`,
//! `ucp_stream_worker_poll`.
//!
//! Each endpoint carries an ordered byte stream (rucx's [`ucp::Worker::stream_send_raw`]).
//! A receive fills the client's buffer in place: with `UCP_STREAM_RECV_FLAG_WAITALL` it
//! completes when the buffer is full, otherwise with the bytes that have arrived (at least
//! one element of the datatype; whole elements only). Receives complete in posting order.

use crate::datatype::{contig_len, recv_target, send_data, Finish, SendData};
use crate::ep::ep_ref;
use crate::ffi::*;
use crate::guard::{ffi, ffi_hot, refuse};
use crate::handles::{worker_ref, Cb, Ep, OpArgs, ReqArgs, ReqHdr, Worker};
use crate::param::{check_param, param_datatype, ParamArgs, SEND, STREAM_RECV};
use crate::request::{request_mem, submit, submit_hooked};
use std::ffi::{c_uint, c_void};
use ucp::{Op, StreamRecvNow};

/// Starts a stream send of the client's data; `args` (read only when a request is made) and
/// `no_imm` (`UCP_OP_ATTR_FLAG_NO_IMM_CMPL`) say how it completes.
///
/// # Safety
/// As the header documents.
#[inline(always)]
unsafe fn send(
    name: &str,
    ep: *mut Ep,
    buffer: *const c_void,
    count: usize,
    dt: Datatype,
    no_imm: bool,
    args: impl ReqArgs,
) -> StatusPtr {
    let (w, h) = match ep_ref(name, ep) {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    // SAFETY: forwarded contract.
    let data = match unsafe { send_data(name, buffer, count, dt) } {
        Ok(d) => d,
        Err(s) => return status_ptr(s),
    };
    let _g = w.lock.lock();
    let res = {
        let mut i = w.inner.borrow_mut();
        // The common send, small enough to go out at once, gives UCS_OK without a completion
        // to build and take apart (a failure here is found again, and reported, below).
        if let (SendData::Slice(s), false) = (&data, no_imm) {
            if let Ok(true) = i.w.stream_send_short(h, s) {
                return status_ptr(UCS_OK);
            }
        }
        match data {
            // SAFETY: the client keeps the buffer until the request completes.
            SendData::Slice(s) => unsafe { i.w.stream_send_raw(h, s.as_ptr(), s.len()) },
            SendData::Owned(v) => i.w.stream_send(h, &v),
        }
    };
    // A send that finished at once gives UCS_OK (as `ucp_tag_send_nbx`): its completion owns
    // nothing, so it is forgotten, not dropped.
    match res {
        Ok(Op::Done(c)) if !no_imm && c.status.is_ok() && c.buf.is_none() => {
            std::mem::forget(c);
            status_ptr(UCS_OK)
        }
        res => submit(name, w, res, &args, Finish::None),
    }
}

/// `ucs_status_ptr_t ucp_stream_send_nb(ucp_ep_h ep, const void *buffer, size_t count,
/// ucp_datatype_t datatype, ucp_send_callback_t cb, unsigned flags)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_send_nb(
    ep: *mut Ep,
    buffer: *const c_void,
    count: usize,
    datatype: Datatype,
    cb: Option<SendCb>,
    flags: c_uint,
) -> StatusPtr {
    const NAME: &str = "ucp_stream_send_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        if flags != 0 {
            // Reserved in UCX.
            tracing::debug!("{NAME}: ignoring flags {flags:#x}");
        }
        let args = OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false);
        // SAFETY: forwarded.
        unsafe { send(NAME, ep, buffer, count, datatype, false, args) }
    })
}

/// `ucs_status_ptr_t ucp_stream_send_nbx(ucp_ep_h ep, const void *buffer, size_t count,
/// const ucp_request_param_t *param)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_send_nbx(
    ep: *mut Ep,
    buffer: *const c_void,
    count: usize,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_stream_send_nbx";
    ffi_hot(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { check_param(NAME, param) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let no_imm = p.op_attr_mask & UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0;
        let args = ParamArgs::<SEND>::new(p);
        // SAFETY: forwarded.
        unsafe { send(NAME, ep, buffer, count, param_datatype(p), no_imm, args) }
    })
}

/// Posts a stream receive.
///
/// # Safety
/// As the header documents.
#[inline(always)]
unsafe fn recv(
    name: &str,
    ep: *mut Ep,
    buffer: *mut c_void,
    count: usize,
    dt: Datatype,
    waitall: bool,
    args: impl ReqArgs,
) -> StatusPtr {
    let (w, h) = match ep_ref(name, ep) {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    // Contiguous memory, the common receive: the data lands in the client's buffer, without a
    // `Finish` to build and drop.
    if dt & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_CONTIG {
        let cap = match contig_len(name, count, dt) {
            Ok(len) => len,
            Err(s) => return status_ptr(s),
        };
        if cap > 0 && buffer.is_null() {
            return status_ptr(refuse(name, UCS_ERR_INVALID_PARAM, "buffer is NULL"));
        }
        let elem = ((dt >> UCP_DATATYPE_SHIFT) as usize).max(1);
        let _g = w.lock.lock();
        let mut i = w.inner.borrow_mut();
        let (len, waitall) = whole_elems(&i.w, h, cap, elem, waitall);
        // Request memory is taken only for a receive left waiting (see `recv_contig`). Bytes
        // already there (a receiver behind its sender) are copied at once, and the call gives
        // NULL with the length, as a completion at once would, without building one: not when
        // the client asked for a request in any case, or gave request memory to complete.
        let now = !args.no_imm() && args.caller_req().is_null();
        let mut mem: (*mut ReqHdr, u32) = (std::ptr::null_mut(), 0);
        // SAFETY: the client keeps its buffer until the request completes.
        let res = unsafe {
            i.w.stream_recv_raw_now_or_hooked(
                h,
                buffer.cast(),
                len,
                waitall,
                now,
                #[inline(always)]
                || {
                    mem = request_mem(w, &args);
                    mem.0 as u64
                },
            )
        };
        drop(i);
        let res = match res {
            Ok(StreamRecvNow::Copied(n)) => {
                let len_out = args.len_out();
                if !len_out.is_null() {
                    // SAFETY: the client's length pointer.
                    unsafe { *len_out = n };
                }
                return std::ptr::null_mut();
            }
            Ok(StreamRecvNow::Hooked(op)) => Ok(op),
            Err(e) => Err(e),
        };
        return submit_hooked(name, w, &args, mem, res);
    }
    // SAFETY: forwarded contract.
    unsafe { recv_staged(name, w, h, buffer, count, dt, waitall, args) }
}

/// [`recv`] into IOV or generic datatypes: received whole into a vector, then scattered or
/// unpacked.
///
/// # Safety
/// As the header documents.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn recv_staged(
    name: &str,
    w: &Worker,
    h: ucp::EpHandle,
    buffer: *mut c_void,
    count: usize,
    dt: Datatype,
    waitall: bool,
    args: impl ReqArgs,
) -> StatusPtr {
    // SAFETY: forwarded contract.
    let (cap, then) = match unsafe { recv_target(name, buffer, count, dt) } {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    let _g = w.lock.lock();
    let mut i = w.inner.borrow_mut();
    let (len, waitall) = whole_elems(&i.w, h, cap, 1, waitall);
    let mut buf = vec![0u8; len];
    let dst = buf.as_mut_ptr();
    // SAFETY: `buf`'s memory moves with it into the finish, alive until completion.
    let res = unsafe { i.w.stream_recv_raw(h, dst, len, waitall) };
    drop(i);
    let finish = Finish::Staged {
        buf,
        then: Box::new(then),
    };
    submit(name, w, res, &args, finish)
}

/// The length and WAITALL of a receive of up to `cap` bytes of `elem`-byte elements: whole
/// elements only, so without WAITALL it takes the whole elements that are there, or waits for
/// one.
#[inline(always)]
fn whole_elems(
    w: &ucp::Worker,
    h: ucp::EpHandle,
    cap: usize,
    elem: usize,
    waitall: bool,
) -> (usize, bool) {
    if waitall || elem == 1 {
        return (cap, waitall);
    }
    let have = w.stream_available(h).unwrap_or(0);
    let whole = (have / elem * elem).min(cap);
    (if whole > 0 { whole } else { elem.min(cap) }, true)
}

/// `ucs_status_ptr_t ucp_stream_recv_nb(ucp_ep_h ep, void *buffer, size_t count,
/// ucp_datatype_t datatype, ucp_stream_recv_callback_t cb, size_t *length, unsigned flags)`:
/// NULL with `*length` set when data was there.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_nb(
    ep: *mut Ep,
    buffer: *mut c_void,
    count: usize,
    datatype: Datatype,
    cb: Option<StreamRecvCb>,
    length: *mut usize,
    flags: c_uint,
) -> StatusPtr {
    const NAME: &str = "ucp_stream_recv_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        if length.is_null() {
            return status_ptr(refuse(NAME, UCS_ERR_INVALID_PARAM, "length is NULL"));
        }
        if flags & !UCP_STREAM_RECV_FLAG_WAITALL != 0 {
            tracing::debug!("{NAME}: ignoring unknown flags {flags:#x}");
        }
        let mut args = OpArgs::with_cb(cb.map(Cb::StreamRecv).unwrap_or(Cb::None), false);
        args.len_out = length;
        let waitall = flags & UCP_STREAM_RECV_FLAG_WAITALL != 0;
        // SAFETY: forwarded.
        unsafe { recv(NAME, ep, buffer, count, datatype, waitall, args) }
    })
}

/// `ucs_status_ptr_t ucp_stream_recv_nbx(ucp_ep_h ep, void *buffer, size_t count, size_t
/// *length, const ucp_request_param_t *param)`: `UCP_STREAM_RECV_FLAG_WAITALL` in
/// `param->flags`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_nbx(
    ep: *mut Ep,
    buffer: *mut c_void,
    count: usize,
    length: *mut usize,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_stream_recv_nbx";
    ffi_hot(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { check_param(NAME, param) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let flags = if p.op_attr_mask & UCP_OP_ATTR_FIELD_FLAGS != 0 {
            p.flags
        } else {
            0
        };
        let args = ParamArgs::<STREAM_RECV>::with_length(p, length);
        let waitall = flags & UCP_STREAM_RECV_FLAG_WAITALL != 0;
        // SAFETY: forwarded.
        unsafe { recv(NAME, ep, buffer, count, param_datatype(p), waitall, args) }
    })
}

/// `ucs_status_ptr_t ucp_stream_recv_data_nb(ucp_ep_h ep, size_t *length)`: the bytes left of
/// the oldest message that arrived and no receive waits for (one message a call, as UCX gives
/// one fragment), lent until `ucp_stream_data_release`; NULL when none.
///
/// # Safety
/// A live endpoint; `length` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_data_nb(ep: *mut Ep, length: *mut usize) -> StatusPtr {
    const NAME: &str = "ucp_stream_recv_data_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        if length.is_null() {
            return status_ptr(refuse(NAME, UCS_ERR_INVALID_PARAM, "length is NULL"));
        }
        let (w, h) = match ep_ref(NAME, ep) {
            Ok(x) => x,
            Err(s) => return status_ptr(s),
        };
        let _g = w.lock.lock();
        let mut i = w.inner.borrow_mut();
        let data = match i.w.stream_take_message(h) {
            Ok(d) => d,
            Err(e) => return status_ptr(crate::guard::fail(NAME, &e)),
        };
        if data.is_empty() {
            i.w.am_data_release(data);
            // Nothing there: report a failed endpoint, else "no data".
            if let Err(e) = i.w.ep_status(h) {
                return status_ptr(crate::guard::status_of(&e));
            }
            // SAFETY: checked non-null.
            unsafe { *length = 0 };
            return std::ptr::null_mut();
        }
        // SAFETY: checked non-null.
        unsafe { *length = data.len() };
        let p = data.as_ptr() as *mut c_void;
        w.ext.borrow_mut().stream_data.insert(p as usize, data);
        p
    })
}

/// `void ucp_stream_data_release(ucp_ep_h ep, void *data)`.
///
/// # Safety
/// Data from `ucp_stream_recv_data_nb` of this endpoint, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_data_release(ep: *mut Ep, data: *mut c_void) {
    const NAME: &str = "ucp_stream_data_release";
    ffi(NAME, (), || {
        if ep.is_null() {
            refuse(NAME, UCS_ERR_INVALID_PARAM, "ep is NULL");
            return;
        }
        // SAFETY: a live endpoint; its worker outlives it.
        let w = unsafe { &*(*ep).worker };
        let _g = w.lock.lock();
        let lent = w.ext.borrow_mut().stream_data.remove(&(data as usize));
        match lent {
            Some(v) => w.inner.borrow_mut().w.am_data_release(v),
            None => {
                refuse(
                    NAME,
                    UCS_ERR_INVALID_PARAM,
                    "data was not lent by ucp_stream_recv_data_nb",
                );
            }
        }
    })
}

/// `ucs_status_t ucp_stream_recv_request_test(void *request, size_t *length_p)`.
///
/// # Safety
/// A stream receive request; `length_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_request_test(
    request: *mut c_void,
    length_p: *mut usize,
) -> Status {
    let mut info = TagRecvInfo::default();
    // SAFETY: forwarded.
    let s = unsafe { crate::request::ucp_request_test(request, &mut info) };
    if s != UCS_INPROGRESS && !length_p.is_null() {
        // SAFETY: the caller's pointer.
        unsafe { *length_p = info.length };
    }
    s
}

/// `ssize_t ucp_stream_worker_poll(ucp_worker_h worker, ucp_stream_poll_ep_t *poll_eps,
/// size_t max_eps, unsigned flags)`: the endpoints with stream data waiting (and their
/// `user_data`), after a progress call.
///
/// # Safety
/// A live worker; `poll_eps` holds `max_eps` entries.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_worker_poll(
    worker: *mut Worker,
    poll_eps: *mut StreamPollEp,
    max_eps: usize,
    flags: c_uint,
) -> isize {
    const NAME: &str = "ucp_stream_worker_poll";
    ffi(NAME, UCS_ERR_NO_MEMORY as isize, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s as isize,
        };
        if max_eps > 0 && poll_eps.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "poll_eps is NULL") as isize;
        }
        if flags != 0 {
            tracing::debug!("{NAME}: ignoring flags {flags:#x}");
        }
        w.progress();
        let _g = w.lock.lock();
        let i = w.inner.borrow();
        let mut n = 0;
        for ep in i.eps.all() {
            if n == max_eps {
                break;
            }
            // SAFETY: a live endpoint of the index.
            let (h, ud) = unsafe { ((*ep).h, (*ep).user_data) };
            if i.w.stream_available(h).unwrap_or(0) > 0 {
                // SAFETY: entry `n` of the caller's array.
                unsafe {
                    poll_eps.add(n).write(StreamPollEp {
                        ep: ep.cast(),
                        user_data: ud,
                        flags: 0,
                        reserved: [0; 16],
                    })
                };
                n += 1;
            }
        }
        n as isize
    })
}
