//! Tag matching: `ucp_tag_send_*`, `ucp_tag_recv_*`,  and `ucp_tag_msg_recv_*`
//! (the parsing of `ucp_request_param_t` is in [`crate::param`]).

use crate::datatype::{contig_len, recv_target, send_data, Finish, SendData};
use crate::ep::{ep_handle, ep_worker};
use crate::ffi::*;
use crate::guard::{ffi, ffi_hot, refuse};
use crate::handles::{worker_ref, Cb, OpArgs, ReqArgs, Worker};
use crate::param::{check_param, param_datatype, parse_param, ParamArgs, SEND, TAG_RECV};
use crate::request::{fatal_send_failure, recv_contig, submit};
use std::ffi::{c_int, c_void};
use ucp::{Message, Op, TagSendMode};

/// Starts a tag send of `mode` (`Sync`: completes when the receiver matched it).
///
/// # Safety
/// A live endpoint; buffer valid for the datatype.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn tag_send(
    name: &str,
    ep: *mut crate::handles::Ep,
    buffer: *const c_void,
    count: usize,
    dt: Datatype,
    tag: Tag,
    mode: TagSendMode,
    no_imm: bool,
    args: impl ReqArgs,
) -> StatusPtr {
    let w = match ep_worker(name, ep) {
        Ok(w) => w,
        Err(s) => return status_ptr(s),
    };
    // SAFETY: forwarded contract.
    let data = match unsafe { send_data(name, buffer, count, dt) } {
        Ok(d) => d,
        Err(s) => return status_ptr(s),
    };
    let _g = w.lock.lock();
    let (res, h) = {
        let mut i = w.inner.borrow_mut();
        // SAFETY: accepted by ep_worker above.
        let h = unsafe { ep_handle(ep) };
        // The common send, small enough to go out at once, gives UCS_OK without a completion
        // to build and take apart (a failure here is found again, and reported, below).
        if let (SendData::Slice(s), false) = (&data, mode == TagSendMode::Sync || no_imm) {
            if let Ok(true) = i.w.tag_send_short(h, tag, s) {
                return status_ptr(UCS_OK);
            }
        }
        let res = match data {
            // SAFETY: the client keeps a send buffer unchanged until the request completes
            // (the contract of every UCX send), so rucx reads it in place.
            SendData::Slice(s) => unsafe { i.w.tag_send_raw(h, tag, s.as_ptr(), s.len(), mode) },
            SendData::Owned(v) if mode == TagSendMode::Sync => i.w.tag_send_sync(h, tag, &v),
            SendData::Owned(v) => i.w.tag_send_vec(h, tag, v),
        };
        (res, h)
    };
    // A send that finished at once gives UCS_OK and leaves caller-supplied request memory
    // untouched, as UCX does (Open MPI's blocking send returns on UCS_OK without reading it).
    // Its completion owns nothing (no error, no buffer), so it is forgotten, not dropped.
    // The request arguments are read only when a request is made.
    match res {
        Ok(Op::Done(c)) if !no_imm && c.status.is_ok() && c.buf.is_none() => {
            std::mem::forget(c);
            status_ptr(UCS_OK)
        }
        Err(e) if !w.handles_errors.get() => {
            // A send refused because the peer is gone, on a worker without error handling:
            // the endpoint failed or was closed, or the transport found the connection reset
            // or timed out as it sent (the endpoint fails on the next progress call).
            if let Err(why) = w.inner.borrow().w.ep_status(h) {
                fatal_send_failure(name, &why);
            }
            if let ucs::Error::ConnectionReset(_)
            | ucs::Error::PeerFailure(_)
            | ucs::Error::Timeout(_) = e
            {
                fatal_send_failure(name, &e);
            }
            submit(name, w, Err(e), &args, Finish::None)
        }
        res => submit(name, w, res, &args, Finish::None),
    }
}

/// `ucs_status_ptr_t ucp_tag_send_nb(ucp_ep_h ep, const void *buffer, size_t count,
/// ucp_datatype_t datatype, ucp_tag_t tag, ucp_send_callback_t cb)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nb(
    ep: *mut crate::handles::Ep,
    buffer: *const c_void,
    count: usize,
    datatype: Datatype,
    tag: Tag,
    cb: Option<SendCb>,
) -> StatusPtr {
    const NAME: &str = "ucp_tag_send_nb";
    ffi_hot(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        let args = OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false);
        let mode = TagSendMode::Standard;
        // SAFETY: forwarded.
        unsafe { tag_send(NAME, ep, buffer, count, datatype, tag, mode, false, args) }
    })
}

/// `ucs_status_ptr_t ucp_tag_send_sync_nb(...)`: as `ucp_tag_send_nb`, completing when the
/// receiver has matched the message.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_sync_nb(
    ep: *mut crate::handles::Ep,
    buffer: *const c_void,
    count: usize,
    datatype: Datatype,
    tag: Tag,
    cb: Option<SendCb>,
) -> StatusPtr {
    const NAME: &str = "ucp_tag_send_sync_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        let args = OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false);
        let mode = TagSendMode::Sync;
        // SAFETY: forwarded.
        unsafe { tag_send(NAME, ep, buffer, count, datatype, tag, mode, false, args) }
    })
}

/// `ucs_status_ptr_t ucp_tag_send_nbx(ucp_ep_h ep, const void *buffer, size_t count,
/// ucp_tag_t tag, const ucp_request_param_t *param)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nbx(
    ep: *mut crate::handles::Ep,
    buffer: *const c_void,
    count: usize,
    tag: Tag,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_tag_send_nbx";
    ffi_hot(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { check_param(NAME, param) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let no_imm = p.op_attr_mask & UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0;
        // The caller waits for this send at once (a blocking MPI send): see
        // `TagSendMode::FastCompletion`.
        let mode = if p.op_attr_mask & UCP_OP_ATTR_FLAG_FAST_CMPL != 0 {
            TagSendMode::FastCompletion
        } else {
            TagSendMode::Standard
        };
        // SAFETY: forwarded.
        unsafe {
            tag_send(
                NAME,
                ep,
                buffer,
                count,
                param_datatype(p),
                tag,
                mode,
                no_imm,
                ParamArgs::<SEND>::new(p),
            )
        }
    })
}

/// `ucs_status_ptr_t ucp_tag_send_sync_nbx(...)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_sync_nbx(
    ep: *mut crate::handles::Ep,
    buffer: *const c_void,
    count: usize,
    tag: Tag,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_tag_send_sync_nbx";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { check_param(NAME, param) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let no_imm = p.op_attr_mask & UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0;
        // SAFETY: forwarded.
        unsafe {
            tag_send(
                NAME,
                ep,
                buffer,
                count,
                param_datatype(p),
                tag,
                TagSendMode::Sync,
                no_imm,
                ParamArgs::<SEND>::new(p),
            )
        }
    })
}

/// A receive posted (`msg`: of a message taken by a removing probe).
///
/// # Safety
/// A live worker; buffer valid for the datatype until completion.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn tag_recv(
    name: &str,
    worker: *mut Worker,
    buffer: *mut c_void,
    count: usize,
    dt: Datatype,
    tag: Tag,
    mask: Tag,
    msg: Option<*mut c_void>,
    args: impl ReqArgs,
) -> StatusPtr {
    let w = match worker_ref(name, worker) {
        Ok(w) => w,
        Err(s) => return status_ptr(s),
    };
    // The common receive (contiguous memory, no probed message) goes straight to the data path
    // (the data lands in the client's buffer) without building a `Finish` to drop.
    if msg.is_none() && dt & UCP_DATATYPE_CLASS_MASK == UCP_DATATYPE_CONTIG {
        let len = match contig_len(name, count, dt) {
            Ok(len) => len,
            Err(s) => return status_ptr(s),
        };
        if len > 0 && buffer.is_null() {
            return status_ptr(refuse(name, UCS_ERR_INVALID_PARAM, "buffer is NULL"));
        }
        let _g = w.lock.lock();
        // SAFETY: the client keeps its buffer until the request completes (the contract of
        // every UCX receive).
        return unsafe { recv_contig(name, w, buffer.cast(), len, tag, mask, args) };
    }
    let message = match msg {
        Some(m) if m.is_null() || m == probed_marker() => {
            return status_ptr(refuse(
                name,
                UCS_ERR_INVALID_PARAM,
                "message handle is not from a removing probe",
            ))
        }
        // SAFETY: a handle from ucp_tag_probe_nb with remove, received once.
        Some(m) => Some(unsafe { Box::from_raw(m as *mut Message) }),
        None => None,
    };
    // SAFETY: forwarded contract.
    let (cap, finish) = match unsafe { recv_target(name, buffer, count, dt) } {
        Ok(x) => x,
        Err(s) => {
            if let Some(m) = message {
                // Receive the message anyway (into nothing) so its data does not stay queued.
                let _g = w.lock.lock();
                let _ = w.inner.borrow_mut().w.tag_msg_recv(Vec::new(), *m);
            }
            return status_ptr(s);
        }
    };
    let _g = w.lock.lock();
    let (res, finish) = {
        let mut i = w.inner.borrow_mut();
        match finish {
            // Contiguous memory: the data lands in the client's buffer.
            Finish::Copy { dst, cap } => {
                // SAFETY: the client keeps its buffer until the request completes (the
                // contract of every UCX receive).
                let r = unsafe {
                    match message {
                        Some(m) => i.w.tag_msg_recv_raw(dst, cap, *m),
                        None => i.w.tag_recv_raw(dst, cap, tag, mask),
                    }
                };
                (r, Finish::None)
            }
            // IOV and generic datatypes: received whole, then scattered or unpacked.
            finish => {
                let buf = vec![0u8; cap];
                let r = match message {
                    Some(m) => i.w.tag_msg_recv(buf, *m),
                    None => i.w.tag_recv(buf, tag, mask),
                };
                (r, finish)
            }
        }
    };
    submit(name, w, res, &args, finish)
}

/// `ucs_status_ptr_t ucp_tag_recv_nb(ucp_worker_h worker, void *buffer, size_t count,
/// ucp_datatype_t datatype, ucp_tag_t tag, ucp_tag_t tag_mask, ucp_tag_recv_callback_t cb)`:
/// always returns a request (the callback runs from `ucp_worker_progress`).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nb(
    worker: *mut Worker,
    buffer: *mut c_void,
    count: usize,
    datatype: Datatype,
    tag: Tag,
    tag_mask: Tag,
    cb: Option<TagRecvCb>,
) -> StatusPtr {
    const NAME: &str = "ucp_tag_recv_nb";
    ffi_hot(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        let args = OpArgs::with_cb(cb.map(Cb::Recv).unwrap_or(Cb::None), true);
        // SAFETY: forwarded.
        unsafe {
            tag_recv(
                NAME, worker, buffer, count, datatype, tag, tag_mask, None, args,
            )
        }
    })
}

/// `ucs_status_ptr_t ucp_tag_recv_nbx(ucp_worker_h worker, void *buffer, size_t count,
/// ucp_tag_t tag, ucp_tag_t tag_mask, const ucp_request_param_t *param)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nbx(
    worker: *mut Worker,
    buffer: *mut c_void,
    count: usize,
    tag: Tag,
    tag_mask: Tag,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_tag_recv_nbx";
    ffi_hot(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { check_param(NAME, param) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        // The request fields are read only when a request is made.
        // SAFETY: forwarded.
        unsafe {
            tag_recv(
                NAME,
                worker,
                buffer,
                count,
                param_datatype(p),
                tag,
                tag_mask,
                None,
                ParamArgs::<TAG_RECV>::new(p),
            )
        }
    })
}

/// What a non-removing probe returns: a non-NULL handle that is not a message.
fn probed_marker() -> *mut c_void {
    static MARK: u8 = 0;
    &MARK as *const u8 as *mut c_void
}

/// `ucp_tag_message_h ucp_tag_probe_nb(ucp_worker_h worker, ucp_tag_t tag, ucp_tag_t tag_mask,
/// int remove, ucp_tag_recv_info_t *info)`: NULL when no unexpected message fits; with
/// `remove` the message is taken off the queue and must be received with
/// `ucp_tag_msg_recv_nb(x)`.
///
/// # Safety
/// A live worker; `info` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_probe_nb(
    worker: *mut Worker,
    tag: Tag,
    tag_mask: Tag,
    remove: c_int,
    info: *mut TagRecvInfo,
) -> *mut c_void {
    const NAME: &str = "ucp_tag_probe_nb";
    ffi_hot(NAME, std::ptr::null_mut(), || {
        let Ok(w) = worker_ref(NAME, worker) else {
            return std::ptr::null_mut();
        };
        if info.is_null() {
            refuse(NAME, UCS_ERR_INVALID_PARAM, "info is NULL");
            return std::ptr::null_mut();
        }
        let _g = w.lock.lock();
        let found = w.inner.borrow_mut().w.tag_probe(tag, tag_mask, remove != 0);
        match found {
            None => std::ptr::null_mut(),
            Some(p) => {
                // SAFETY: checked non-null.
                unsafe {
                    *info = TagRecvInfo {
                        sender_tag: p.tag,
                        length: p.len,
                    }
                };
                match p.msg {
                    Some(m) => Box::into_raw(Box::new(m)).cast(),
                    None => probed_marker(),
                }
            }
        }
    })
}

/// `ucs_status_ptr_t ucp_tag_msg_recv_nb(ucp_worker_h worker, void *buffer, size_t count,
/// ucp_datatype_t datatype, ucp_tag_message_h message, ucp_tag_recv_callback_t cb)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_msg_recv_nb(
    worker: *mut Worker,
    buffer: *mut c_void,
    count: usize,
    datatype: Datatype,
    message: *mut c_void,
    cb: Option<TagRecvCb>,
) -> StatusPtr {
    const NAME: &str = "ucp_tag_msg_recv_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        let args = OpArgs::with_cb(cb.map(Cb::Recv).unwrap_or(Cb::None), true);
        // SAFETY: forwarded.
        unsafe {
            tag_recv(
                NAME,
                worker,
                buffer,
                count,
                datatype,
                0,
                0,
                Some(message),
                args,
            )
        }
    })
}

/// `ucs_status_ptr_t ucp_tag_msg_recv_nbx(ucp_worker_h worker, void *buffer, size_t count,
/// ucp_tag_message_h message, const ucp_request_param_t *param)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_msg_recv_nbx(
    worker: *mut Worker,
    buffer: *mut c_void,
    count: usize,
    message: *mut c_void,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_tag_msg_recv_nbx";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { parse_param(NAME, param, false) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: forwarded.
        unsafe {
            tag_recv(
                NAME,
                worker,
                buffer,
                count,
                p.datatype,
                0,
                0,
                Some(message),
                p.recv_args(),
            )
        }
    })
}
