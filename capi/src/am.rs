//! Active messages in their current form: `ucp_worker_set_am_recv_handler`,
//! `ucp_am_send_nbx`, `ucp_am_recv_data_nbx`, `ucp_am_data_release`.
//!
//! A handler runs from `ucp_worker_progress` with the user header and the data. An eager
//! message comes whole. A small one (see [`ucp::SmallAm`]) comes without
//! `UCP_AM_RECV_ATTR_FLAG_DATA`, from the worker's queue or, over shared memory, in place in
//! the receive FIFO ([`ucp::LentAm`]: valid until the worker progresses again, which a
//! handler must not do, as in UCX); a larger one comes in a buffer of its own, with the
//! flag: the handler may keep that data by returning `UCS_INPROGRESS` and release it later with
//! `ucp_am_data_release`. A message sent
//! by rendezvous comes with `UCP_AM_RECV_ATTR_FLAG_RNDV` and a descriptor in place of the
//! data: `ucp_am_recv_data_nbx` reads the data from the sender straight into the client's
//! memory (rucx's rendezvous, [`ucp::AmRndv`]), `ucp_am_data_release` declines it, and a
//! handler that returns `UCS_OK` without either declines it too. Every message carries a reply
//! endpoint (`UCP_AM_RECV_ATTR_FIELD_REPLY_EP`): the client's endpoint to the sender, or one
//! this library makes for that purpose. Sends choose eager or rendezvous by size
//! (`UCP_AM_SEND_FLAG_EAGER` and `_RNDV` are hints, as in UCX's protocol selection); the header
//! is always copied, so `UCP_AM_SEND_FLAG_COPY_HEADER` holds whatever the flags say.

use crate::datatype::{recv_target, send_data, Finish, SendData};
use crate::ep::{ep_handle, ep_worker};
use crate::ffi::*;
use crate::guard::{check_mask, ffi, ffi_hot, refuse};
use crate::handles::{new_ep, worker_ref, Cb, Ep, OpArgs, Worker};
use crate::param::{check_param, param_datatype, ParamArgs, SEND};
use crate::request::submit;
use crate::worker_ext::Held;
use std::ffi::{c_uint, c_void};
use ucp::{AmRndv, Completion, EpHandle, LentAm, Op, SmallAm};

/// Longest user header `ucp_am_send_nbx` takes (`ucp_worker_query`'s `max_am_header`): a
/// header travels in the first fragment, and every rucx transport's fragment holds this much
/// next to rucx's own headers.
pub const MAX_AM_HEADER: usize = 2048;

/// The first flag bit UCX keeps for itself in AM handler flags.
const AM_CB_PRIV_FIRST_FLAG: u32 = 1 << 15;

/// The client endpoint a handler gets as reply endpoint for messages from rucx endpoint `h`:
/// the client's first one there, else one made (and kept until the worker is destroyed).
#[inline]
pub fn reply_ep(w: &Worker, h: EpHandle) -> *mut Ep {
    let first = w.inner.borrow().eps.first(h);
    if !first.is_null() {
        return first;
    }
    implicit_ep(w, h)
}

/// [`reply_ep`] when the client has no endpoint on rucx endpoint `h`: one made for replies.
#[cold]
#[inline(never)]
fn implicit_ep(w: &Worker, h: EpHandle) -> *mut Ep {
    // SAFETY: a zeroed parameter struct is "no fields".
    let p: EpParams = unsafe { std::mem::zeroed() };
    let ep = new_ep(w, h, &p, false);
    w.ext.borrow_mut().implicit.push(ep as usize);
    ep
}

/// Takes the oldest small eager active message queued for a `ucp_worker_set_am_recv_handler`
/// handler and runs the handler ([`run_small`]): in place when its transport lent it, else on
/// its copy ([`deliver_copied`]). Gives whether more messages wait, `None` when no small one
/// did. Worker locked, nothing borrowed.
#[inline(always)]
pub fn deliver_small(w: &Worker) -> Option<bool> {
    // The lent message (the oldest) is taken apart from the ring's: its few words stay in
    // registers, where `SmallTaken`, as large as a ring slot, went through the stack.
    let lent = {
        let mut i = w.inner.borrow_mut();
        match i.w.am_pop_lent() {
            Some((l, more)) => {
                let handler = i.am_recv_handlers.get(l.id);
                let first = i.eps.first(l.ep);
                Some((l, more, handler, first))
            }
            None => None,
        }
    };
    let Some((l, more, handler, first)) = lent else {
        return deliver_copied(w);
    };
    run_lent(w, l, handler, first);
    Some(more)
}

/// [`deliver_small`] when no message is lent: the oldest in the ring, run on its copy (its
/// bytes only, copied out of the slot: a handler that progresses the worker may reuse the
/// slot). Out of line: the lent message's path (the common one when messages do not pile up)
/// and the other completions' stay small.
#[inline(never)]
fn deliver_copied(w: &Worker) -> Option<bool> {
    let mut m = SmallAm::EMPTY;
    let (id, ep, more, handler, first) = {
        let mut i = w.inner.borrow_mut();
        let (id, ep, more) = i.w.am_pop_copied(&mut m)?;
        (id, ep, more, i.am_recv_handlers.get(id), i.eps.first(ep))
    };
    run_small(w, id, SmallMsg::of(&mut m), ep, handler, first);
    Some(more)
}

/// [`run_small`] on message `l`, read where its transport lent it.
#[inline(always)]
fn run_lent(w: &Worker, l: LentAm, handler: Option<(AmRecvCb, usize, u32)>, first: *mut Ep) {
    // SAFETY: the worker has not progressed since it lent the message (this runs right after
    // its progress call, and a handler must not progress the worker).
    let (header, data) = unsafe { l.parts() };
    let m = SmallMsg {
        header: header.as_ptr(),
        header_len: header.len(),
        data: data.as_ptr() as *mut u8,
        len: data.len(),
    };
    run_small(w, l.id, m, l.ep, handler, first);
}

/// [`deliver_small`] for a small message queued behind a larger one.
pub fn deliver_small_queued(w: &Worker, id: u16, m: &mut SmallAm, ep: EpHandle) {
    let (handler, first) = {
        let i = w.inner.borrow();
        (i.am_recv_handlers.get(id), i.eps.first(ep))
    };
    run_small(w, id, SmallMsg::of(m), ep, handler, first);
}

/// Where a small message's user header and data are for its handler: a copy's, or the bytes
/// its transport lent.
struct SmallMsg {
    header: *const u8,
    header_len: usize,
    data: *mut u8,
    len: usize,
}

impl SmallMsg {
    /// The parts of copy `m`.
    #[inline(always)]
    fn of(m: &mut SmallAm) -> SmallMsg {
        let header_len = m.header().len();
        let header = m.header().as_ptr();
        let data = m.data();
        SmallMsg {
            header,
            header_len,
            data: data.as_mut_ptr(),
            len: data.len(),
        }
    }
}

/// Runs `handler`, the handler of small eager active message `id` from `ep`, on `m` (a copy,
/// or bytes lent by the transport until the next progress call): without
/// `UCP_AM_RECV_ATTR_FLAG_DATA` (the handler copies what it keeps); `first` is the client's
/// first endpoint on `ep` (null: a reply endpoint is made). Nothing borrowed.
#[inline(always)]
fn run_small(
    w: &Worker,
    id: u16,
    m: SmallMsg,
    ep: EpHandle,
    handler: Option<(AmRecvCb, usize, u32)>,
    first: *mut Ep,
) {
    let Some((cb, arg, _flags)) = handler else {
        tracing::warn!("active message {id} arrived with no handler set; dropped");
        return;
    };
    let reply = if first.is_null() {
        implicit_ep(w, ep)
    } else {
        first
    };
    let param = AmRecvParam {
        recv_attr: UCP_AM_RECV_ATTR_FIELD_REPLY_EP,
        reply_ep: reply.cast(),
    };
    // SAFETY: the client's handler; header and data stay valid during the call.
    let s = unsafe {
        cb(
            arg as *mut c_void,
            m.header.cast(),
            m.header_len,
            m.data.cast(),
            m.len,
            &param,
        )
    };
    if s == UCS_INPROGRESS {
        kept_unlent(id);
    }
}

/// A handler returned `UCS_INPROGRESS` for data it was not lent.
#[cold]
fn kept_unlent(id: u16) {
    tracing::warn!(
        "active message {id}: the handler kept data it was not lent (no \
         UCP_AM_RECV_ATTR_FLAG_DATA); ignored"
    );
}

/// Runs the handler of an eager active message (`buf`: `header_len` bytes of user header,
/// then the data) that came for a `ucp_worker_set_am_recv_handler` handler: the data is
/// passed in place with `UCP_AM_RECV_ATTR_FLAG_DATA`, and kept for `ucp_am_data_release` when
/// the handler returns `UCS_INPROGRESS`. Worker locked, nothing borrowed.
pub fn deliver_eager(w: &Worker, id: u16, buf: Vec<u8>, header_len: usize, ep: EpHandle) {
    let handler = w.inner.borrow().am_recv_handlers.get(id);
    let Some((cb, arg, _flags)) = handler else {
        tracing::warn!("active message {id} arrived with no handler set; dropped");
        recycle(w, buf);
        return;
    };
    let param = AmRecvParam {
        recv_attr: UCP_AM_RECV_ATTR_FIELD_REPLY_EP | UCP_AM_RECV_ATTR_FLAG_DATA,
        reply_ep: reply_ep(w, ep).cast(),
    };
    let (buf, data_off) = aligned(w, buf, header_len);
    let data = buf[data_off..].as_ptr() as *mut c_void;
    let header = buf[data_off - header_len..].as_ptr();
    let len = buf.len() - data_off;
    // SAFETY: the client's handler; header and data stay valid during the call (and the data
    // after it, if the handler keeps it).
    let s = unsafe {
        cb(
            arg as *mut c_void,
            header.cast(),
            header_len,
            data,
            len,
            &param,
        )
    };
    if s == UCS_INPROGRESS {
        w.ext
            .borrow_mut()
            .held
            .insert(data as usize, Held::Data(buf));
    } else {
        recycle(w, buf);
    }
}

/// Gives an eager message's buffer back to the worker's spares.
fn recycle(w: &Worker, buf: Vec<u8>) {
    w.inner.borrow_mut().w.am_recycle(buf);
}

/// Runs the handler of an active message sent by rendezvous (`header`: its user header, `d`:
/// its data at the sender) that came for a `ucp_worker_set_am_recv_handler` handler. Worker
/// locked, nothing borrowed.
pub fn deliver_rndv(w: &Worker, id: u16, header: Vec<u8>, d: AmRndv, ep: EpHandle) {
    let handler = w.inner.borrow().am_recv_handlers.get(id);
    let Some((cb, arg, _flags)) = handler else {
        tracing::warn!("active message {id} arrived with no handler set; dropped");
        if let Err(e) = w.inner.borrow_mut().w.am_rndv_drop(d) {
            tracing::debug!("declining an active message: {e}");
        }
        return;
    };
    let param = AmRecvParam {
        recv_attr: UCP_AM_RECV_ATTR_FIELD_REPLY_EP | UCP_AM_RECV_ATTR_FLAG_RNDV,
        reply_ep: reply_ep(w, ep).cast(),
    };
    let len = d.len();
    // The descriptor the client holds: a box whose address names it in `held`.
    let desc = Box::into_raw(Box::new(0u8)) as usize;
    w.ext
        .borrow_mut()
        .held
        .insert(desc, Held::Rndv(Box::new(d)));
    // SAFETY: the client's handler; the header stays valid during the call.
    let s = unsafe {
        cb(
            arg as *mut c_void,
            header.as_ptr().cast(),
            header.len(),
            desc as *mut c_void,
            len,
            &param,
        )
    };
    if s != UCS_INPROGRESS {
        // Neither received nor kept: declined.
        release(w, desc);
    }
}

/// A message whose data (after `header_len` bytes of header) starts at the worker's
/// `am_alignment`: the one given, or a copy placed so (a buffer with room to shift the start).
/// Gives the buffer and the data's offset in it (the header is just before).
fn aligned(w: &Worker, buf: Vec<u8>, header_len: usize) -> (Vec<u8>, usize) {
    let align = w.am_alignment;
    if align <= 1 || (buf.as_ptr() as usize + header_len).is_multiple_of(align) {
        return (buf, header_len);
    }
    let mut v = Vec::with_capacity(buf.len() + align);
    let base = v.as_ptr() as usize + header_len;
    let pad = base.next_multiple_of(align) - base;
    v.resize(pad, 0);
    v.extend_from_slice(&buf);
    recycle(w, buf);
    (v, pad + header_len)
}

/// Releases held data or declines a held descriptor; false when `data` names neither.
fn release(w: &Worker, data: usize) -> bool {
    let held = w.ext.borrow_mut().held.remove(&data);
    match held {
        Some(Held::Data(buf)) => recycle(w, buf),
        Some(Held::Rndv(d)) => {
            // SAFETY: the descriptor's box, made in `deliver`.
            drop(unsafe { Box::from_raw(data as *mut u8) });
            if let Err(e) = w.inner.borrow_mut().w.am_rndv_drop(*d) {
                tracing::debug!("declining an active message: {e}");
            }
        }
        None => return false,
    }
    true
}

const HANDLER_KNOWN: u64 = UCP_AM_HANDLER_PARAM_FIELD_ID
    | UCP_AM_HANDLER_PARAM_FIELD_FLAGS
    | UCP_AM_HANDLER_PARAM_FIELD_CB
    | UCP_AM_HANDLER_PARAM_FIELD_ARG;

/// `ucs_status_t ucp_worker_set_am_recv_handler(ucp_worker_h worker, const
/// ucp_am_handler_param_t *param)`: the handler of active message `id` (a NULL callback
/// removes it). It replaces an old-API handler of the same id.
///
/// # Safety
/// A live worker and a valid `param`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_set_am_recv_handler(
    worker: *mut Worker,
    param: *const AmHandlerParam,
) -> Status {
    const NAME: &str = "ucp_worker_set_am_recv_handler";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        if param.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "param is NULL");
        }
        // SAFETY: the caller's param.
        let p = unsafe { &*param };
        if let Err(s) = check_mask(
            NAME,
            "ucp_am_handler_param_t.field_mask",
            p.field_mask,
            HANDLER_KNOWN,
        ) {
            return s;
        }
        let has = |b: u64| p.field_mask & b != 0;
        if !has(UCP_AM_HANDLER_PARAM_FIELD_ID) {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "no id (UCP_AM_HANDLER_PARAM_FIELD_ID)",
            );
        }
        let Ok(id) = u16::try_from(p.id) else {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                format!("id {} is over 65535", p.id),
            );
        };
        let flags = if has(UCP_AM_HANDLER_PARAM_FIELD_FLAGS) {
            p.flags
        } else {
            0
        };
        if flags >= AM_CB_PRIV_FIRST_FLAG {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                format!("unsupported flags {flags:#x}"),
            );
        }
        let cb = if has(UCP_AM_HANDLER_PARAM_FIELD_CB) {
            p.cb
        } else {
            None
        };
        let arg = if has(UCP_AM_HANDLER_PARAM_FIELD_ARG) {
            p.arg
        } else {
            std::ptr::null_mut()
        };
        let _g = w.lock.lock();
        let mut i = w.inner.borrow_mut();
        i.am_handlers.remove(id);
        match cb {
            Some(cb) => {
                i.am_recv_handlers.insert(id, (cb, arg as usize, flags));
                // Data handed over inline is 8-byte aligned: enough unless more is asked.
                i.w.am_set_queued(id, false, w.am_alignment <= 8);
            }
            None => {
                i.am_recv_handlers.remove(id);
                i.w.am_remove_handler(id);
            }
        }
        UCS_OK
    })
}

/// `ucs_status_ptr_t ucp_am_send_nbx(ucp_ep_h ep, unsigned id, const void *header, size_t
/// header_length, const void *buffer, size_t count, const ucp_request_param_t *param)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_send_nbx(
    ep: *mut Ep,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_am_send_nbx";
    ffi_hot(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let p = match unsafe { check_param(NAME, param) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        if let Err(s) = check_send(id, header, header_length, p) {
            return status_ptr(s);
        }
        let w = match ep_worker(NAME, ep) {
            Ok(w) => w,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: the client's header of `header_length` bytes.
        let hdr = unsafe { crate::datatype::slice(header, header_length) };
        // SAFETY: forwarded contract.
        let data = match unsafe { send_data(NAME, buffer, count, param_datatype(p)) } {
            Ok(d) => d,
            Err(s) => return status_ptr(s),
        };
        let id = id as u16;
        let no_imm = p.op_attr_mask & UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0;
        let _g = w.lock.lock();
        let res = {
            let mut i = w.inner.borrow_mut();
            // SAFETY: accepted by ep_worker above.
            let h = unsafe { ep_handle(ep) };
            // The common send, small enough to go out at once, gives UCS_OK without a
            // completion to build and take apart (a failure here is found again, and reported,
            // below).
            if let (SendData::Slice(s), false) = (&data, no_imm) {
                if let Ok(true) = i.w.am_send_short(h, id, hdr, s) {
                    return status_ptr(UCS_OK);
                }
            }
            match data {
                // SAFETY: the client keeps the buffer until the request completes.
                SendData::Slice(s) => unsafe { i.w.am_send_raw(h, id, hdr, s.as_ptr(), s.len()) },
                SendData::Owned(v) => i.w.am_send_vec(h, id, hdr, v),
            }
        };
        // A send that finished at once gives UCS_OK without reading the request fields (as
        // `ucp_tag_send_nbx`): its completion owns nothing, so it is forgotten, not dropped.
        match res {
            Ok(Op::Done(c)) if !no_imm && c.status.is_ok() && c.buf.is_none() => {
                std::mem::forget(c);
                status_ptr(UCS_OK)
            }
            res => submit(NAME, w, res, &ParamArgs::<SEND>::new(p), Finish::None),
        }
    })
}

/// The checks of `ucp_am_send_nbx`'s id, header and flags (unknown flags are ignored, as UCX
/// does).
#[inline(always)]
fn check_send(
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    p: &RequestParam,
) -> Result<(), Status> {
    let flags = if p.op_attr_mask & UCP_OP_ATTR_FIELD_FLAGS != 0 {
        p.flags
    } else {
        0
    };
    let both = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_RNDV;
    if id > u16::MAX as c_uint
        || flags & both == both
        || header_length > MAX_AM_HEADER
        || (header_length > 0 && header.is_null())
    {
        return Err(bad_send(id, header, header_length, flags));
    }
    Ok(())
}

/// The refusal of a `ucp_am_send_nbx` that [`check_send`] found wrong.
#[cold]
#[inline(never)]
fn bad_send(id: c_uint, header: *const c_void, header_length: usize, flags: u32) -> Status {
    const NAME: &str = "ucp_am_send_nbx";
    if id > u16::MAX as c_uint {
        return refuse(
            NAME,
            UCS_ERR_INVALID_PARAM,
            format!("id {id} is over 65535"),
        );
    }
    if flags & UCP_AM_SEND_FLAG_EAGER != 0 && flags & UCP_AM_SEND_FLAG_RNDV != 0 {
        return refuse(NAME, UCS_ERR_INVALID_PARAM, "both EAGER and RNDV flags");
    }
    if header_length > MAX_AM_HEADER {
        return refuse(
            NAME,
            UCS_ERR_INVALID_PARAM,
            format!("header of {header_length} bytes (max_am_header is {MAX_AM_HEADER})"),
        );
    }
    debug_assert!(header_length > 0 && header.is_null());
    refuse(NAME, UCS_ERR_INVALID_PARAM, "header is NULL")
}

/// `ucs_status_ptr_t ucp_am_recv_data_nbx(ucp_worker_h worker, void *data_desc, void
/// *buffer, size_t count, const ucp_request_param_t *param)`: receives the data of a message
/// (a rendezvous descriptor, or eager data the handler kept) into the buffer; the callback
/// (`cb.recv_am`) and `recv_info.length` give its length. Longer data completes with
/// `UCS_ERR_MESSAGE_TRUNCATED`. The descriptor is used up either way.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_recv_data_nbx(
    worker: *mut Worker,
    data_desc: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_am_recv_data_nbx";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: forwarded.
        let nbx = match unsafe { crate::param::parse_param(NAME, param, false) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let _g = w.lock.lock();
        let held = w.ext.borrow_mut().held.remove(&(data_desc as usize));
        let Some(held) = held else {
            return status_ptr(refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "data_desc is not an active-message descriptor this worker holds",
            ));
        };
        let args = stream_args(&nbx);
        // SAFETY: forwarded contract.
        let (cap, finish) = match unsafe { recv_target(NAME, buffer, count, nbx.datatype) } {
            Ok(x) => x,
            Err(s) => {
                // Put it back: the client may try again with a valid buffer.
                w.ext.borrow_mut().held.insert(data_desc as usize, held);
                return status_ptr(s);
            }
        };
        match held {
            Held::Data(buf) => {
                // Eager data the handler kept: delivered now.
                let hdr_len = buf.len() - data_len(&buf, data_desc);
                let data = &buf[hdr_len..];
                let status = if data.len() > cap {
                    UCS_ERR_MESSAGE_TRUNCATED
                } else {
                    UCS_OK
                };
                let fs = finish.deliver(Some(data), data.len());
                let len = data.len();
                recycle(w, buf);
                if status != UCS_OK || fs.is_some() {
                    return status_ptr(fs.unwrap_or(status));
                }
                let done = Completion {
                    status: Ok(()),
                    buf: None,
                    len,
                    tag: 0,
                    value: 0,
                };
                submit(NAME, w, Ok(Op::Done(done)), &args, Finish::None)
            }
            Held::Rndv(d) => {
                // SAFETY: the descriptor's box, made in `deliver`.
                drop(unsafe { Box::from_raw(data_desc as *mut u8) });
                let (res, finish) = match finish {
                    Finish::Copy { dst, cap } => {
                        // SAFETY: the client keeps its buffer until the request completes.
                        let r = unsafe { w.inner.borrow_mut().w.am_rndv_recv_raw(*d, dst, cap) };
                        (r, Finish::None)
                    }
                    other => {
                        let mut buf = vec![0u8; cap];
                        let dst = buf.as_mut_ptr();
                        // SAFETY: `buf`'s memory moves with it into the finish, which lives
                        // until the request completes.
                        let r = unsafe { w.inner.borrow_mut().w.am_rndv_recv_raw(*d, dst, cap) };
                        (
                            r,
                            Finish::Staged {
                                buf,
                                then: Box::new(other),
                            },
                        )
                    }
                };
                submit(NAME, w, res, &args, finish)
            }
        }
    })
}

/// Bytes of held eager data from `data` to the end of its buffer.
fn data_len(buf: &[u8], data: *mut c_void) -> usize {
    let start = buf.as_ptr() as usize;
    let at = (data as usize).clamp(start, start + buf.len());
    start + buf.len() - at
}

/// Request arguments of a stream or AM data receive: the `recv_am`/`recv_stream` callback
/// shape, and `recv_info.length`.
pub fn stream_args(nbx: &crate::param::Nbx) -> OpArgs {
    let cb = if nbx.cb.is_null() {
        Cb::None
    } else {
        // SAFETY: FIELD_CALLBACK of these calls holds a callback of this shape.
        Cb::StreamRecvNbx(unsafe { std::mem::transmute::<*const c_void, StreamRecvNbxCb>(nbx.cb) })
    };
    OpArgs {
        caller_req: nbx.request,
        cb,
        user_data: nbx.user_data,
        no_imm: nbx.no_imm,
        info_out: std::ptr::null_mut(),
        len_out: nbx.recv_info.cast(),
    }
}

/// `void ucp_am_data_release(ucp_worker_h worker, void *data)`: releases data a handler kept,
/// or declines a rendezvous descriptor (its sender's request completes).
///
/// # Safety
/// A live worker; `data` from one of its handlers, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_data_release(worker: *mut Worker, data: *mut c_void) {
    const NAME: &str = "ucp_am_data_release";
    ffi(NAME, (), || {
        let Ok(w) = worker_ref(NAME, worker) else {
            return;
        };
        let _g = w.lock.lock();
        if !release(w, data as usize) {
            refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "data is not active-message data this worker holds",
            );
        }
    })
}
