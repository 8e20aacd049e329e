//! Remote memory access on an endpoint, the operations table's put, get and atomic entries:
//! each resolves the remote key for the endpoint (cached after the first use) and runs
//! rucx's operation; fetching atomics carry their result location in a completion record.

use crate::ep::{bcopy_result, key, pack_into, parts, Pieces};
use crate::ffi::*;
use crate::guard::{hot, outcome, refuse};
use crate::handle::{slice_or_empty, Record, State};
use crate::sink::{forget_record, record};
use std::ffi::{c_uint, c_void};
use uct::{AnyEp, AtomicOp, CompletionId, Endpoint as _, Outcome};

// ---- put / get ---------------------------------------------------------------------------

/// Ops `ep_put_short`.
pub(crate) unsafe extern "C" fn ep_put_short(
    ep: *mut c_void,
    buffer: *const c_void,
    length: c_uint,
    remote_addr: u64,
    rkey: usize,
) -> Status {
    hot("uct_ep_put_short", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint and `length` bytes.
        let (e, _) = unsafe { parts(ep) };
        // SAFETY: as above.
        let data = unsafe { slice_or_empty(buffer.cast(), length as usize) };
        let r = key(e, rkey).and_then(|k| e.ep.put_short(data, remote_addr, k));
        outcome(r, "uct_ep_put_short")
    })
}

/// Ops `ep_put_bcopy`.
pub(crate) unsafe extern "C" fn ep_put_bcopy(
    ep: *mut c_void,
    pack: Option<uct_pack_callback_t>,
    arg: *mut c_void,
    remote_addr: u64,
    rkey: usize,
) -> isize {
    hot("uct_ep_put_bcopy", UCS_ERR_IO_ERROR as isize, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, _) = unsafe { parts(ep) };
        let Some(pack) = pack else {
            return refuse(
                "uct_ep_put_bcopy",
                UCS_ERR_INVALID_PARAM,
                "NULL pack callback",
            ) as isize;
        };
        let mut packed = 0;
        let r = key(e, rkey).and_then(|k| {
            e.ep.put_bcopy(|buf| pack_into(buf, pack, arg, &mut packed), remote_addr, k)
        });
        bcopy_result(r, packed, "uct_ep_put_bcopy")
    })
}

/// Ops `ep_put_bcopy` of the shared-memory interfaces (posix and sysv:
/// [`crate::iface::ops_for`]): [`ep_put_bcopy`] going straight to mm's endpoint, as
/// [`crate::ep::ep_am_short_mm`] does, so the call does not depend on whether the compiler
/// inlines the general dispatch over every transport (when it did not, `ucx_perftest -t put_bw
/// -x posix -D bcopy -s 4096` counted 607 instructions per call instead of 596). An endpoint
/// of another kind, which these interfaces never make, takes the general way.
pub(crate) unsafe extern "C" fn ep_put_bcopy_mm(
    ep: *mut c_void,
    pack: Option<uct_pack_callback_t>,
    arg: *mut c_void,
    remote_addr: u64,
    rkey: usize,
) -> isize {
    hot("uct_ep_put_bcopy", UCS_ERR_IO_ERROR as isize, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, _) = unsafe { parts(ep) };
        let Some(pack) = pack else {
            return refuse(
                "uct_ep_put_bcopy",
                UCS_ERR_INVALID_PARAM,
                "NULL pack callback",
            ) as isize;
        };
        let mut packed = 0;
        let r = key(e, rkey).and_then(|k| match &mut e.ep {
            AnyEp::Posix(m) | AnyEp::Sysv(m) => {
                m.put_bcopy(|buf| pack_into(buf, pack, arg, &mut packed), remote_addr, k)
            }
            other => other.put_bcopy(|buf| pack_into(buf, pack, arg, &mut packed), remote_addr, k),
        });
        bcopy_result(r, packed, "uct_ep_put_bcopy")
    })
}

/// Ops `ep_put_zcopy`.
pub(crate) unsafe extern "C" fn ep_put_zcopy(
    ep: *mut c_void,
    iov: *const uct_iov_t,
    iovcnt: usize,
    remote_addr: u64,
    rkey: usize,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_ep_put_zcopy", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint and iovs.
        let (e, st) = unsafe { parts(ep) };
        // SAFETY: as above.
        let r = unsafe { Pieces::new(&st.dom, iov, iovcnt) }.and_then(|p| {
            let k = key(e, rkey)?;
            p.with(|v| e.ep.put_zcopy(v, remote_addr, k, CompletionId(comp as u64)))
        });
        outcome(r, "uct_ep_put_zcopy")
    })
}

/// Ops `ep_get_short`.
pub(crate) unsafe extern "C" fn ep_get_short(
    ep: *mut c_void,
    buffer: *mut c_void,
    length: c_uint,
    remote_addr: u64,
    rkey: usize,
) -> Status {
    hot("uct_ep_get_short", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint and a `length`-byte buffer.
        let (e, _) = unsafe { parts(ep) };
        if buffer.is_null() && length > 0 {
            return refuse("uct_ep_get_short", UCS_ERR_INVALID_PARAM, "NULL buffer");
        }
        let buf: &mut [u8] = if length == 0 {
            &mut []
        } else {
            // SAFETY: checked non-null; the caller's buffer of `length` bytes.
            unsafe { std::slice::from_raw_parts_mut(buffer.cast(), length as usize) }
        };
        let r = key(e, rkey).and_then(|k| e.ep.get_short(buf, remote_addr, k));
        outcome(r, "uct_ep_get_short")
    })
}

/// Ops `ep_get_bcopy`: the data go to `unpack` now (`UCS_OK`) or later, before `comp`.
pub(crate) unsafe extern "C" fn ep_get_bcopy(
    ep: *mut c_void,
    unpack: Option<uct_unpack_callback_t>,
    arg: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: usize,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_ep_get_bcopy", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, st) = unsafe { parts(ep) };
        let Some(unpack) = unpack else {
            return refuse(
                "uct_ep_get_bcopy",
                UCS_ERR_INVALID_PARAM,
                "NULL unpack callback",
            );
        };
        let (rec, id) = record(st, Record::GetBcopy { comp, unpack, arg });
        // SAFETY: the client's unpack callback, with the data during the call.
        let mut now = |data: &[u8]| unsafe { unpack(arg, data.as_ptr().cast(), data.len()) };
        let r = key(e, rkey).and_then(|k| e.ep.get_bcopy(length, remote_addr, k, id, &mut now));
        if !matches!(r, Ok(Outcome::InProgress)) {
            forget_record(st, rec);
        }
        outcome(r, "uct_ep_get_bcopy")
    })
}

/// Ops `ep_get_zcopy`.
pub(crate) unsafe extern "C" fn ep_get_zcopy(
    ep: *mut c_void,
    iov: *const uct_iov_t,
    iovcnt: usize,
    remote_addr: u64,
    rkey: usize,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_ep_get_zcopy", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint and iovs.
        let (e, st) = unsafe { parts(ep) };
        // SAFETY: as above.
        let r = unsafe { Pieces::new(&st.dom, iov, iovcnt) }.and_then(|p| {
            let k = key(e, rkey)?;
            p.with(|v| e.ep.get_zcopy(v, remote_addr, k, CompletionId(comp as u64)))
        });
        outcome(r, "uct_ep_get_zcopy")
    })
}

// ---- atomics -----------------------------------------------------------------------------

fn atomic_op(opcode: c_uint, fetch: bool) -> ucs::Result<AtomicOp> {
    Ok(match opcode {
        UCT_ATOMIC_OP_ADD => AtomicOp::Add,
        UCT_ATOMIC_OP_AND => AtomicOp::And,
        UCT_ATOMIC_OP_OR => AtomicOp::Or,
        UCT_ATOMIC_OP_XOR => AtomicOp::Xor,
        UCT_ATOMIC_OP_SWAP if fetch => AtomicOp::Swap,
        _ => {
            return Err(ucs::Error::InvalidParam(format!(
                "atomic opcode {opcode} (fetch: {fetch})"
            )))
        }
    })
}

/// Ops `ep_atomic32_post`.
pub(crate) unsafe extern "C" fn ep_atomic32_post(
    ep: *mut c_void,
    opcode: c_uint,
    value: u32,
    remote_addr: u64,
    rkey: usize,
) -> Status {
    hot("uct_ep_atomic32_post", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, _) = unsafe { parts(ep) };
        let r = atomic_op(opcode, false).and_then(|op| {
            let k = key(e, rkey)?;
            e.ep.atomic32_post(op, value, remote_addr, k)
        });
        outcome(r, "uct_ep_atomic32_post")
    })
}

/// Ops `ep_atomic64_post`.
pub(crate) unsafe extern "C" fn ep_atomic64_post(
    ep: *mut c_void,
    opcode: c_uint,
    value: u64,
    remote_addr: u64,
    rkey: usize,
) -> Status {
    hot("uct_ep_atomic64_post", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, _) = unsafe { parts(ep) };
        let r = atomic_op(opcode, false).and_then(|op| {
            let k = key(e, rkey)?;
            e.ep.atomic64_post(op, value, remote_addr, k)
        });
        outcome(r, "uct_ep_atomic64_post")
    })
}

/// Runs a fetching atomic with a [`Record`] carrying its result location; writes the value
/// at once when it is done.
fn fetch<T: Copy>(
    st: &State,
    rec: Record,
    result: *mut T,
    name: &str,
    op: impl FnOnce(CompletionId) -> ucs::Result<Outcome<T>>,
) -> Status {
    if result.is_null() {
        return refuse(name, UCS_ERR_INVALID_PARAM, "NULL result pointer");
    }
    let (key, id) = record(st, rec);
    let r = op(id);
    match r {
        Ok(Outcome::Done(v)) => {
            forget_record(st, key);
            // SAFETY: checked non-null; the client's result location.
            unsafe { *result = v };
            UCS_OK
        }
        Ok(Outcome::InProgress) => UCS_INPROGRESS,
        other => {
            forget_record(st, key);
            outcome(other, name)
        }
    }
}

/// Ops `ep_atomic32_fetch`.
pub(crate) unsafe extern "C" fn ep_atomic32_fetch(
    ep: *mut c_void,
    opcode: c_uint,
    value: u32,
    result: *mut u32,
    remote_addr: u64,
    rkey: usize,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_ep_atomic32_fetch", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, st) = unsafe { parts(ep) };
        fetch(
            st,
            Record::Fetch32 { comp, result },
            result,
            "uct_ep_atomic32_fetch",
            |id| {
                let op = atomic_op(opcode, true)?;
                let k = key(e, rkey)?;
                e.ep.atomic32_fetch(op, value, remote_addr, k, id)
            },
        )
    })
}

/// Ops `ep_atomic64_fetch`.
pub(crate) unsafe extern "C" fn ep_atomic64_fetch(
    ep: *mut c_void,
    opcode: c_uint,
    value: u64,
    result: *mut u64,
    remote_addr: u64,
    rkey: usize,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_ep_atomic64_fetch", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, st) = unsafe { parts(ep) };
        fetch(
            st,
            Record::Fetch64 { comp, result },
            result,
            "uct_ep_atomic64_fetch",
            |id| {
                let op = atomic_op(opcode, true)?;
                let k = key(e, rkey)?;
                e.ep.atomic64_fetch(op, value, remote_addr, k, id)
            },
        )
    })
}

/// Ops `ep_atomic_cswap32`.
pub(crate) unsafe extern "C" fn ep_atomic_cswap32(
    ep: *mut c_void,
    compare: u32,
    swap: u32,
    remote_addr: u64,
    rkey: usize,
    result: *mut u32,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_ep_atomic_cswap32", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, st) = unsafe { parts(ep) };
        fetch(
            st,
            Record::Fetch32 { comp, result },
            result,
            "uct_ep_atomic_cswap32",
            |id| {
                let k = key(e, rkey)?;
                e.ep.atomic_cswap32(compare, swap, remote_addr, k, id)
            },
        )
    })
}

/// Ops `ep_atomic_cswap64`.
pub(crate) unsafe extern "C" fn ep_atomic_cswap64(
    ep: *mut c_void,
    compare: u64,
    swap: u64,
    remote_addr: u64,
    rkey: usize,
    result: *mut u64,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_ep_atomic_cswap64", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live endpoint.
        let (e, st) = unsafe { parts(ep) };
        fetch(
            st,
            Record::Fetch64 { comp, result },
            result,
            "uct_ep_atomic_cswap64",
            |id| {
                let k = key(e, rkey)?;
                e.ep.atomic_cswap64(compare, swap, remote_addr, k, id)
            },
        )
    })
}
