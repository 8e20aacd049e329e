//! Atomics (`ucp_atomic_post`, `ucp_atomic_fetch_nb`, `ucp_atomic_op_nbx` and the blocking
//! `ucp_atomic_add32` … `ucp_atomic_cswap64` of `ucp_compat.h`) and the ordering calls
//! `ucp_worker_fence` and `ucp_worker_flush`.
//!
//! An atomic takes one of three paths: CPU atomics on the peer's segment mapped in this
//! process, the transport's own atomics, or an active message the peer's worker applies with
//! CPU atomics. All three end in the same CPU instructions on the same memory, so operations
//! on one word are atomic with respect to each other whichever path each took.

use crate::datatype::Finish;
use crate::ep::{ep_ref, wait};
use crate::ffi::*;
use crate::guard::{ffi, refuse, status_of};
use crate::handles::{user_of, worker_ref, Cb, Ep, OpArgs, Worker};
use crate::request::{request_mem, submit, write_fetched, write_header};
use crate::rma::CRkey;
use std::ffi::{c_uint, c_void};
use ucp::{AmoSize, AmoStart};
use uct::AtomicOp;

/// What an atomic does.
enum Amo {
    /// A non-fetching operation.
    Post(AtomicOp),
    /// A fetching operation (swap included).
    Fetch(AtomicOp),
    /// Compare-and-swap.
    Cswap { compare: u64 },
}

fn size_of_op(name: &str, op_size: usize) -> Result<AmoSize, Status> {
    match op_size {
        4 => Ok(AmoSize::U32),
        8 => Ok(AmoSize::U64),
        n => Err(refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            format!("atomic size {n} (4 or 8)"),
        )),
    }
}

/// Starts an atomic; a fetched value goes to `result` (`size` bytes).
///
/// # Safety
/// Live endpoint and key; `result` valid until completion for fetching operations.
#[allow(clippy::too_many_arguments)]
unsafe fn start(
    name: &str,
    ep: *mut Ep,
    amo: Amo,
    value: u64,
    op_size: usize,
    result: *mut c_void,
    remote_addr: u64,
    rkey: *mut CRkey,
    args: OpArgs,
) -> StatusPtr {
    let (w, h) = match ep_ref(name, ep) {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    let size = match size_of_op(name, op_size) {
        Ok(s) => s,
        Err(s) => return status_ptr(s),
    };
    if !matches!(amo, Amo::Post(_)) && result.is_null() {
        return status_ptr(refuse(name, UCS_ERR_INVALID_PARAM, "NULL result"));
    }
    let access = crate::mem::ACCESS_READ | crate::mem::ACCESS_WRITE;
    // SAFETY: a live key.
    let (k, delta) = match unsafe { crate::rma::rkey_for(name, rkey, w, access) } {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    let remote_addr = remote_addr.wrapping_sub(delta);
    let _g = w.lock.lock();
    let res = {
        let mut i = w.inner.borrow_mut();
        // A peer word mapped here: one CPU atomic now, no request (unless the client wants one).
        if args.caller_req.is_null() && !args.no_imm {
            // SAFETY: the client's result location (checked non-NULL for fetching operations);
            // the worker is locked.
            if unsafe { direct(&mut i.w, h, &amo, value, size, result, remote_addr, k) } {
                return status_ptr(UCS_OK);
            }
        }
        match amo {
            Amo::Post(op) => i.w.atomic_post(h, op, size, value, remote_addr, k),
            Amo::Fetch(op) => i.w.atomic_fetch(h, op, size, value, remote_addr, k),
            Amo::Cswap { compare } => i.w.atomic_cswap(h, size, compare, value, remote_addr, k),
        }
    };
    if let Err(e) = &res {
        tracing::warn!("{name}: {e}");
    }
    let finish = if matches!(amo, Amo::Post(_)) {
        Finish::None
    } else {
        Finish::Fetch {
            dst: result as *mut u8,
            size: op_size,
        }
    };
    submit(name, w, res, &args, finish)
}

/// The direct path of an atomic on a peer word mapped here: one CPU atomic, the old value
/// written to `result` for fetching operations. False (nothing done) when the word is not
/// mapped here or the endpoint must take the general path (see `ucp::Worker::atomic_mapped`).
///
/// # Safety
/// `result` writable for the operand's size for fetching operations; `remote_addr` already in
/// rucx's address space (the key's delta removed); the worker locked.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn direct(
    w: &mut ucp::Worker,
    h: ucp::EpHandle,
    amo: &Amo,
    value: u64,
    size: AmoSize,
    result: *mut c_void,
    remote_addr: u64,
    k: &ucp::Rkey,
) -> bool {
    let (op, compare) = match *amo {
        Amo::Post(op) | Amo::Fetch(op) => (Some(op), 0),
        Amo::Cswap { compare } => (None, compare),
    };
    let Some(old) = w.atomic_mapped(h, op, size, value, compare, remote_addr, k) else {
        return false;
    };
    if !matches!(amo, Amo::Post(_)) {
        // SAFETY: the client's result location of the operand's size (4 or 8 bytes).
        unsafe {
            match size {
                AmoSize::U32 => (result as *mut u32).write_unaligned(old as u32),
                AmoSize::U64 => (result as *mut u64).write_unaligned(old),
            }
        }
    }
    true
}

/// `op_attr_mask` bits [`op_nbx_simple`] accepts: a callback and its user data, a datatype and
/// a reply buffer (what OpenSHMEM and MPI one-sided libraries pass).
const SIMPLE_MASK: u32 = UCP_OP_ATTR_FIELD_DATATYPE
    | UCP_OP_ATTR_FIELD_REPLY_BUFFER
    | UCP_OP_ATTR_FIELD_CALLBACK
    | UCP_OP_ATTR_FIELD_USER_DATA;

/// `ucp_atomic_op_nbx` with a parameter of the common shape (only [`SIMPLE_MASK`] fields, a
/// contiguous 4- or 8-byte datatype, one element, a known opcode), a live endpoint and a key
/// this worker accepts: on a peer word mapped here, one CPU atomic; otherwise the atomic is
/// started at once under the same lock, with no further parsing. `None` for any other call,
/// which the general path then checks and refuses or runs.
///
/// # Safety
/// As `ucp_atomic_op_nbx`.
#[inline(always)]
unsafe fn op_nbx_simple(
    ep: *mut Ep,
    opcode: c_uint,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    param: *const RequestParam,
) -> Option<StatusPtr> {
    if param.is_null() || ep.is_null() || rkey.is_null() || buffer.is_null() || count != 1 {
        return None;
    }
    // SAFETY: the caller's param.
    let p = unsafe { &*param };
    let m = p.op_attr_mask;
    if m & !SIMPLE_MASK != 0 || m & UCP_OP_ATTR_FIELD_DATATYPE == 0 {
        return None;
    }
    let size = match (
        p.datatype & UCP_DATATYPE_CLASS_MASK,
        p.datatype >> UCP_DATATYPE_SHIFT,
    ) {
        (UCP_DATATYPE_CONTIG, 4) => AmoSize::U32,
        (UCP_DATATYPE_CONTIG, 8) => AmoSize::U64,
        _ => return None,
    };
    let bytes = if size == AmoSize::U32 { 4 } else { 8 };
    let reply = if m & UCP_OP_ATTR_FIELD_REPLY_BUFFER != 0 {
        p.reply_buffer
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: the client's operand (non-NULL, checked above).
    let v = unsafe { read_operand(buffer, bytes) };
    // SAFETY: CSWAP's swap value is in the client's reply buffer (non-NULL for a fetch).
    let (amo, value) = unsafe { amo_of(opcode, !reply.is_null(), v, reply, bytes) }?;
    // SAFETY: a live endpoint (checked non-NULL); its worker outlives it.
    let (w, h) = unsafe { (&*(*ep).worker, (*ep).h) };
    let access = crate::mem::ACCESS_READ | crate::mem::ACCESS_WRITE;
    // SAFETY: a live key (checked non-NULL).
    let (k, delta) = unsafe { crate::rma::rkey_for_quiet(rkey, w, access) }.ok()?;
    let remote_addr = remote_addr.wrapping_sub(delta);
    let _g = w.lock.lock();
    let mut i = w.inner.borrow_mut();
    // SAFETY: the reply buffer holds the operand's size; the worker is locked.
    if unsafe { direct(&mut i.w, h, &amo, value, size, reply, remote_addr, k) } {
        return Some(status_ptr(UCS_OK));
    }
    Some(op_nbx_general(
        w,
        &mut i.w,
        h,
        amo,
        value,
        size,
        reply,
        remote_addr,
        k,
        p,
    ))
}

/// The rest of [`op_nbx_simple`] for an atomic that was not done on a mapped word: started
/// through rucx's worker `rw` of `w` (locked and borrowed by the caller; `remote_addr` in
/// rucx's address space) with the request memory it completes through rucx's completion hook
/// if it does not finish at once (the fetched value written to `reply` there), the client's
/// callback and user data taken from `p`.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn op_nbx_general(
    w: &crate::handles::Worker,
    rw: &mut ucp::Worker,
    h: ucp::EpHandle,
    amo: Amo,
    value: u64,
    size: AmoSize,
    reply: *mut c_void,
    remote_addr: u64,
    k: &ucp::Rkey,
    p: &RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_atomic_op_nbx";
    let m = p.op_attr_mask;
    let cb = if m & UCP_OP_ATTR_FIELD_CALLBACK != 0 {
        // SAFETY: FIELD_CALLBACK of an atomic holds a ucp_send_nbx_callback_t (or NULL).
        match unsafe { p.cb.send } {
            Some(f) => Cb::SendNbx(f),
            None => Cb::None,
        }
    } else {
        Cb::None
    };
    let mut args = OpArgs::with_cb(cb, false);
    if m & UCP_OP_ATTR_FIELD_USER_DATA != 0 {
        args.user_data = p.user_data;
    }
    let (op, fetch, compare) = match amo {
        Amo::Post(op) => (Some(op), false, 0),
        Amo::Fetch(op) => (Some(op), true, 0),
        Amo::Cswap { compare } => (None, true, compare),
    };
    let bytes = if size == AmoSize::U32 { 4 } else { 8 };
    let (hdr, pooled) = request_mem(w, &args);
    let res = rw.atomic_hooked(
        h,
        op,
        fetch,
        size,
        value,
        compare,
        remote_addr,
        k,
        hdr as u64,
    );
    let old = match res {
        Ok(AmoStart::Hooked(id)) => {
            let finish = if fetch {
                Finish::Fetch {
                    dst: reply as *mut u8,
                    size: bytes,
                }
            } else {
                Finish::None
            };
            write_header(hdr, w, &args, pooled, Some(id), finish);
            return user_of(hdr);
        }
        Ok(AmoStart::Done(old)) => Ok(old),
        Err(e) => Err(e),
    };
    if pooled != 0 {
        w.pool.borrow_mut().put(hdr as *mut u8);
    }
    match old {
        Ok(old) => {
            if fetch {
                write_fetched(reply as *mut u8, bytes, old);
            }
            status_ptr(UCS_OK)
        }
        Err(e) => {
            tracing::warn!("{NAME}: {e}");
            status_ptr(status_of(&e))
        }
    }
}

/// The operation of `ucp_atomic_op_t` `opcode` (`fetch`: the caller gave a reply buffer) on
/// operand `v` of `bytes` bytes, and the value it sends. `None`: no such opcode, or a SWAP or
/// CSWAP without a reply buffer.
///
/// # Safety
/// For a CSWAP with `fetch`, `reply` is readable for `bytes` bytes (it holds the swap value).
#[inline(always)]
unsafe fn amo_of(
    opcode: c_uint,
    fetch: bool,
    v: u64,
    reply: *const c_void,
    bytes: usize,
) -> Option<(Amo, u64)> {
    Some(match (opcode, fetch) {
        (0, false) => (Amo::Post(AtomicOp::Add), v),
        (3, false) => (Amo::Post(AtomicOp::And), v),
        (4, false) => (Amo::Post(AtomicOp::Or), v),
        (5, false) => (Amo::Post(AtomicOp::Xor), v),
        (0, true) => (Amo::Fetch(AtomicOp::Add), v),
        (1, true) => (Amo::Fetch(AtomicOp::Swap), v),
        // SAFETY: per the contract.
        (2, true) => (Amo::Cswap { compare: v }, unsafe {
            read_operand(reply, bytes)
        }),
        (3, true) => (Amo::Fetch(AtomicOp::And), v),
        (4, true) => (Amo::Fetch(AtomicOp::Or), v),
        (5, true) => (Amo::Fetch(AtomicOp::Xor), v),
        _ => return None,
    })
}

/// Reads a 4- or 8-byte operand.
///
/// # Safety
/// `p` valid for `size` bytes.
unsafe fn read_operand(p: *const c_void, size: usize) -> u64 {
    // SAFETY: per the contract.
    unsafe {
        if size == 4 {
            (p as *const u32).read_unaligned() as u64
        } else {
            (p as *const u64).read_unaligned()
        }
    }
}

/// `ucs_status_t ucp_atomic_post(ucp_ep_h ep, ucp_atomic_post_op_t opcode, uint64_t value,
/// size_t op_size, uint64_t remote_addr, ucp_rkey_h rkey)`.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_post(
    ep: *mut Ep,
    opcode: c_uint,
    value: u64,
    op_size: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
) -> Status {
    const NAME: &str = "ucp_atomic_post";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let op = match opcode {
            0 => AtomicOp::Add,
            1 => AtomicOp::And,
            2 => AtomicOp::Or,
            3 => AtomicOp::Xor,
            o => return refuse(NAME, UCS_ERR_INVALID_PARAM, format!("post opcode {o}")),
        };
        let args = OpArgs::with_cb(Cb::None, false);
        // SAFETY: forwarded.
        let r = unsafe {
            start(
                NAME,
                ep,
                Amo::Post(op),
                value,
                op_size,
                std::ptr::null_mut(),
                remote_addr,
                rkey,
                args,
            )
        };
        crate::rma::nbi(r)
    })
}

/// `ucs_status_ptr_t ucp_atomic_fetch_nb(ucp_ep_h ep, ucp_atomic_fetch_op_t opcode,
/// uint64_t value, void *result, size_t op_size, uint64_t remote_addr, ucp_rkey_h rkey,
/// ucp_send_callback_t cb)`: the old value lands in `result`; for CSWAP `value` is the compare
/// value and `*result` the value to swap in.
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_fetch_nb(
    ep: *mut Ep,
    opcode: c_uint,
    value: u64,
    result: *mut c_void,
    op_size: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    cb: Option<SendCb>,
) -> StatusPtr {
    const NAME: &str = "ucp_atomic_fetch_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        if result.is_null() || (op_size != 4 && op_size != 8) {
            return status_ptr(refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "NULL result or a size other than 4/8",
            ));
        }
        let (amo, v) = match opcode {
            0 => (Amo::Fetch(AtomicOp::Add), value),
            1 => (Amo::Fetch(AtomicOp::Swap), value),
            // SAFETY: the swap value is in the client's result.
            2 => (Amo::Cswap { compare: value }, unsafe {
                read_operand(result, op_size)
            }),
            3 => (Amo::Fetch(AtomicOp::And), value),
            4 => (Amo::Fetch(AtomicOp::Or), value),
            5 => (Amo::Fetch(AtomicOp::Xor), value),
            o => {
                return status_ptr(refuse(
                    NAME,
                    UCS_ERR_INVALID_PARAM,
                    format!("fetch opcode {o}"),
                ))
            }
        };
        let args = OpArgs::with_cb(cb.map(Cb::Send).unwrap_or(Cb::None), false);
        // SAFETY: forwarded.
        unsafe { start(NAME, ep, amo, v, op_size, result, remote_addr, rkey, args) }
    })
}

/// `ucs_status_ptr_t ucp_atomic_op_nbx(ucp_ep_h ep, ucp_atomic_op_t opcode, const void *buffer,
/// size_t count, uint64_t remote_addr, ucp_rkey_h rkey, const ucp_request_param_t *param)`:
/// one 4- or 8-byte element (`param->datatype` contiguous); with `UCP_OP_ATTR_FIELD_REPLY_BUFFER`
/// the old value lands in `reply_buffer` (for CSWAP, `*buffer` is the compare value and
/// `*reply_buffer` the value to swap in).
///
/// # Safety
/// As the header documents.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_op_nbx(
    ep: *mut Ep,
    opcode: c_uint,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_atomic_op_nbx";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        // SAFETY: forwarded.
        let simple = unsafe { op_nbx_simple(ep, opcode, buffer, count, remote_addr, rkey, param) };
        if let Some(r) = simple {
            return r;
        }
        // SAFETY: forwarded.
        let p = match unsafe { crate::param::parse_param(NAME, param, true) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: checked non-null by parse_param.
        let raw = unsafe { &*param };
        let reply = if raw.op_attr_mask & UCP_OP_ATTR_FIELD_REPLY_BUFFER != 0 {
            raw.reply_buffer
        } else {
            std::ptr::null_mut()
        };
        let size = (p.datatype >> UCP_DATATYPE_SHIFT) as usize;
        if p.datatype & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_CONTIG || (size != 4 && size != 8) {
            return status_ptr(refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "datatype must be contiguous 4 or 8 bytes",
            ));
        }
        if count != 1 || buffer.is_null() {
            return status_ptr(refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "one element, non-NULL buffer",
            ));
        }
        // SAFETY: the client's operand.
        let v = unsafe { read_operand(buffer, size) };
        let fetch = !reply.is_null();
        // SAFETY: CSWAP's swap value is in the client's reply buffer (non-NULL for a fetch).
        let (amo, value) = match unsafe { amo_of(opcode, fetch, v, reply, size) } {
            Some(x) => x,
            None if matches!(opcode, 1 | 2) && !fetch => {
                return status_ptr(refuse(
                    NAME,
                    UCS_ERR_INVALID_PARAM,
                    "SWAP/CSWAP need a reply buffer",
                ))
            }
            None => {
                return status_ptr(refuse(
                    NAME,
                    UCS_ERR_INVALID_PARAM,
                    format!("opcode {opcode}"),
                ))
            }
        };
        // SAFETY: forwarded.
        unsafe {
            start(
                NAME,
                ep,
                amo,
                value,
                size,
                reply,
                remote_addr,
                rkey,
                p.send_args(),
            )
        }
    })
}

/// `ucs_status_t ucp_worker_fence(ucp_worker_h worker)`: operations started after the fence
/// are applied at their targets after those started before it. It does not wait: a memory
/// barrier orders the loads and stores on peer memory mapped here, and an endpoint with
/// operations still outstanding holds what comes next until they have completed (see
/// `ucp::Worker::fence`).
///
/// # Safety
/// A live worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_fence(worker: *mut Worker) -> Status {
    const NAME: &str = "ucp_worker_fence";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        let _g = w.lock.lock();
        w.inner.borrow_mut().w.fence();
        UCS_OK
    })
}

/// `ucs_status_t ucp_worker_flush(ucp_worker_h worker)`: blocking until every operation
/// started before has completed remotely (progresses the worker).
///
/// # Safety
/// A live worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush(worker: *mut Worker) -> Status {
    const NAME: &str = "ucp_worker_flush";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        // SAFETY: forwarded.
        let r = unsafe { crate::worker::ucp_worker_flush_nb(worker, 0, None) };
        wait(w, r)
    })
}

/// A blocking atomic of `ucp_compat.h`: starts it and waits (progressing the worker); the
/// fetched value, if any, lands in `result`.
///
/// # Safety
/// Live endpoint and key; `result` writable for fetching operations.
#[allow(clippy::too_many_arguments)]
unsafe fn blocking(
    name: &str,
    ep: *mut Ep,
    amo: Amo,
    value: u64,
    size: usize,
    result: *mut c_void,
    remote_addr: u64,
    rkey: *mut CRkey,
) -> Status {
    let w = match ep_ref(name, ep) {
        Ok((w, _)) => w,
        Err(s) => return s,
    };
    let args = OpArgs::with_cb(Cb::None, false);
    // SAFETY: forwarded.
    let r = unsafe { start(name, ep, amo, value, size, result, remote_addr, rkey, args) };
    wait(w, r)
}

macro_rules! blocking_post {
    ($name:ident, $t:ty) => {
        #[doc = concat!("`ucs_status_t ", stringify!($name), "(ucp_ep_h ep, ", stringify!($t),
                            " add, uint64_t remote_addr, ucp_rkey_h rkey)`: blocking atomic add.")]
        ///
        /// # Safety
        /// As the header documents.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ep: *mut Ep,
            add: $t,
            remote_addr: u64,
            rkey: *mut CRkey,
        ) -> Status {
            ffi(stringify!($name), UCS_ERR_NO_MEMORY, || {
                // SAFETY: forwarded.
                unsafe {
                    blocking(
                        stringify!($name),
                        ep,
                        Amo::Post(AtomicOp::Add),
                        add as u64,
                        std::mem::size_of::<$t>(),
                        std::ptr::null_mut(),
                        remote_addr,
                        rkey,
                    )
                }
            })
        }
    };
}

macro_rules! blocking_fetch {
    ($name:ident, $t:ty, $op:expr) => {
        #[doc = concat!("`ucs_status_t ", stringify!($name), "(ucp_ep_h ep, ", stringify!($t),
                    " value, uint64_t remote_addr, ucp_rkey_h rkey, ", stringify!($t),
                    " *result)`: blocking fetching atomic; the old value lands in `result`.")]
        ///
        /// # Safety
        /// As the header documents.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ep: *mut Ep,
            value: $t,
            remote_addr: u64,
            rkey: *mut CRkey,
            result: *mut $t,
        ) -> Status {
            ffi(stringify!($name), UCS_ERR_NO_MEMORY, || {
                // SAFETY: forwarded.
                unsafe {
                    blocking(
                        stringify!($name),
                        ep,
                        Amo::Fetch($op),
                        value as u64,
                        std::mem::size_of::<$t>(),
                        result.cast(),
                        remote_addr,
                        rkey,
                    )
                }
            })
        }
    };
}

macro_rules! blocking_cswap {
    ($name:ident, $t:ty) => {
        #[doc = concat!("`ucs_status_t ", stringify!($name), "(ucp_ep_h ep, ", stringify!($t),
            " compare, ", stringify!($t), " swap, uint64_t remote_addr, ucp_rkey_h rkey, ",
            stringify!($t), " *result)`: blocking compare-and-swap; the old value lands in `result`.")]
        ///
        /// # Safety
        /// As the header documents.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ep: *mut Ep,
            compare: $t,
            swap: $t,
            remote_addr: u64,
            rkey: *mut CRkey,
            result: *mut $t,
        ) -> Status {
            ffi(stringify!($name), UCS_ERR_NO_MEMORY, || {
                // SAFETY: forwarded.
                unsafe {
                    blocking(
                        stringify!($name),
                        ep,
                        Amo::Cswap {
                            compare: compare as u64,
                        },
                        swap as u64,
                        std::mem::size_of::<$t>(),
                        result.cast(),
                        remote_addr,
                        rkey,
                    )
                }
            })
        }
    };
}

blocking_post!(ucp_atomic_add32, u32);
blocking_post!(ucp_atomic_add64, u64);
blocking_fetch!(ucp_atomic_fadd32, u32, AtomicOp::Add);
blocking_fetch!(ucp_atomic_fadd64, u64, AtomicOp::Add);
blocking_fetch!(ucp_atomic_swap32, u32, AtomicOp::Swap);
blocking_fetch!(ucp_atomic_swap64, u64, AtomicOp::Swap);
blocking_cswap!(ucp_atomic_cswap32, u32);
blocking_cswap!(ucp_atomic_cswap64, u64);
