//! `ucp_put_nbx` of scattered data: an IOV datatype (`ucp_dt_make_iov`: the pieces, gathered
//! in order, go to one remote range) or UCX 1.20's scatter-gather lists (`ucp_dt_make_sgl` as
//! both the local datatype and `remote_datatype`): element `i` of the local list, `counts[i]`
//! blocks of `lengths[i]` bytes `strides[i]` apart from `buffers[i]` (one block when the list has
//! no counts and strides), is written to element `i` of the remote list, `remote_addrs[i]` with
//! `rkeys[i]`, whose length must be the element's whole size; the blocks land there one after
//! another. Lists of equal element counts only (UCX's "N->N mapping").
//!
//! Every element is checked (lengths, keys and their access) before anything is written. The
//! operation completes when every block was handed over: at once when each did, else when a
//! flush of the endpoint completes (which covers the blocks still queued).

use super::{rkey_for, CRkey};
use crate::datatype::{send_data, slice, SendData};
use crate::ep::ep_ref;
use crate::ffi::*;
use crate::guard::refuse;
use crate::handles::{Ep, OpArgs, Worker};
use crate::mem::ACCESS_WRITE;
use crate::param::parse_param;
use crate::request::submit;
use std::ffi::c_void;
use ucp::{Completion, EpHandle, Op, Rkey};

/// The `op_attr_mask` bits of the remote descriptor (UCX 1.20).
const REMOTE_FIELDS: u32 =
    UCP_OP_ATTR_FIELD_REMOTE_DATATYPE | UCP_OP_ATTR_FIELD_REMOTE | UCP_OP_ATTR_FIELD_REMOTE_COUNT;
/// The local list's fields a put needs.
const LOCAL_NEEDED: u64 = UCP_DT_LOCAL_SGL_FIELD_BUFFERS | UCP_DT_LOCAL_SGL_FIELD_LENGTHS;
/// The remote list's fields a put needs.
const REMOTE_NEEDED: u64 = UCP_DT_REMOTE_SGL_FIELD_REMOTE_ADDRS
    | UCP_DT_REMOTE_SGL_FIELD_LENGTHS
    | UCP_DT_REMOTE_SGL_FIELD_RKEYS;
/// The first UCX API minor whose `ucp_request_param_t` has the remote fields.
const REMOTE_FIELDS_MINOR: u32 = 20;

/// True when a put's `param` is for this module: a remote datatype, or a local IOV or SGL one.
///
/// # Safety
/// `param` NULL or valid.
#[inline]
pub unsafe fn wanted(param: *const RequestParam) -> bool {
    if param.is_null() {
        return false;
    }
    // SAFETY: the caller's param (non-NULL).
    let p = unsafe { &*param };
    let class = p.datatype & UCP_DATATYPE_CLASS_MASK;
    p.op_attr_mask & REMOTE_FIELDS != 0
        || (p.op_attr_mask & UCP_OP_ATTR_FIELD_DATATYPE != 0
            && (class == UCP_DATATYPE_IOV || class == UCP_DATATYPE_SGL))
}

/// One block to write: local bytes, remote address (the client's), key.
struct Block {
    src: *const c_void,
    len: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
}

/// `ucp_put_nbx` for a param [`wanted`] says is this module's.
///
/// # Safety
/// As `ucp_put_nbx`; `param` non-NULL.
pub unsafe fn put(
    name: &str,
    ep: *mut Ep,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut CRkey,
    param: *const RequestParam,
) -> StatusPtr {
    let (w, h) = match ep_ref(name, ep) {
        Ok(x) => x,
        Err(s) => return status_ptr(s),
    };
    // SAFETY: the caller's param (non-NULL).
    let mut plain = unsafe { *param };
    let remote = plain.op_attr_mask & REMOTE_FIELDS;
    plain.op_attr_mask &= !REMOTE_FIELDS;
    // SAFETY: a valid param on the stack.
    let nbx = match unsafe { parse_param(name, &plain, true) } {
        Ok(p) => p,
        Err(s) => return status_ptr(s),
    };
    let args = nbx.send_args();
    match (nbx.datatype & UCP_DATATYPE_CLASS_MASK, remote) {
        (UCP_DATATYPE_SGL, REMOTE_FIELDS) => {
            // SAFETY: forwarded; the remote fields are read only after their checks.
            let blocks = match unsafe { sgl_blocks(name, w, buffer, count, param) } {
                Ok(b) => b,
                Err(s) => return status_ptr(s),
            };
            put_blocks(name, w, h, &blocks, &args)
        }
        (UCP_DATATYPE_SGL, _) => status_ptr(refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            "an SGL datatype needs the remote datatype, descriptor and count \
             (UCP_OP_ATTR_FIELD_REMOTE_DATATYPE, _REMOTE, _REMOTE_COUNT)",
        )),
        (UCP_DATATYPE_IOV, 0) => {
            // SAFETY: forwarded contract.
            let data = match unsafe { send_data(name, buffer, count, nbx.datatype) } {
                Ok(SendData::Owned(v)) => v,
                Ok(SendData::Slice(s)) => s.to_vec(),
                Err(s) => return status_ptr(s),
            };
            let block = Block {
                src: data.as_ptr().cast(),
                len: data.len(),
                remote_addr,
                rkey,
            };
            put_blocks(name, w, h, &[block], &args)
        }
        _ => status_ptr(refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            "a remote datatype goes with a local SGL datatype only",
        )),
    }
}

/// The blocks of an SGL put, every element checked.
///
/// # Safety
/// As `ucp_put_nbx`: `buffer` a `ucp_dt_local_sgl_t`, `param` (non-NULL) a UCX 1.20
/// `ucp_request_param_t` whose remote descriptor is a `ucp_dt_remote_sgl_t`, their arrays of
/// `count` entries.
unsafe fn sgl_blocks(
    name: &str,
    w: &Worker,
    buffer: *const c_void,
    count: usize,
    param: *const RequestParam,
) -> Result<Vec<Block>, Status> {
    let bad = |why: String| refuse(name, UCS_ERR_INVALID_PARAM, why);
    // SAFETY: the worker's context outlives it.
    let minor = unsafe { (*w.ctx).client_minor };
    if minor < REMOTE_FIELDS_MINOR {
        return Err(bad(format!(
            "the client was built against UCX API 1.{minor}, whose request parameter has no \
             remote fields"
        )));
    }
    // SAFETY: a 1.20 client's param continues with the remote fields.
    let ext = unsafe { *(param.add(1) as *const RequestParamRemote) };
    if ext.remote_datatype & UCP_DATATYPE_CLASS_MASK != UCP_DATATYPE_SGL {
        return Err(bad(format!(
            "remote datatype {:#x} (only ucp_dt_make_sgl() is supported)",
            ext.remote_datatype
        )));
    }
    if ext.remote_count != count {
        return Err(bad(format!(
            "{count} local elements against {} remote ones (only N->N is supported)",
            ext.remote_count
        )));
    }
    if buffer.is_null() || ext.remote.is_null() {
        return Err(bad("an SGL descriptor is NULL".into()));
    }
    // SAFETY: the client's descriptors (non-NULL).
    let (local, remote) = unsafe {
        (
            *(buffer as *const DtLocalSgl),
            *(ext.remote as *const DtRemoteSgl),
        )
    };
    if local.field_mask & LOCAL_NEEDED != LOCAL_NEEDED {
        return Err(bad("the local SGL lacks buffers or lengths".into()));
    }
    if remote.field_mask & REMOTE_NEEDED != REMOTE_NEEDED {
        return Err(bad("the remote SGL lacks addresses, lengths or keys".into()));
    }
    let repeats =
        local.field_mask & (UCP_DT_LOCAL_SGL_FIELD_COUNTS | UCP_DT_LOCAL_SGL_FIELD_STRIDES);
    if repeats != 0 && repeats != UCP_DT_LOCAL_SGL_FIELD_COUNTS | UCP_DT_LOCAL_SGL_FIELD_STRIDES {
        return Err(bad(
            "the local SGL has counts without strides, or strides without counts".into(),
        ));
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the client's arrays of `count` entries, each checked non-NULL first.
    let arr = |p: *const usize| unsafe { std::slice::from_raw_parts(p, count) };
    if local.buffers.is_null()
        || local.lengths.is_null()
        || remote.remote_addrs.is_null()
        || remote.lengths.is_null()
        || remote.rkeys.is_null()
        || (repeats != 0 && (local.counts.is_null() || local.strides.is_null()))
    {
        return Err(bad("an SGL array is NULL".into()));
    }
    // SAFETY: as above.
    let (buffers, addrs, rkeys) = unsafe {
        (
            std::slice::from_raw_parts(local.buffers, count),
            std::slice::from_raw_parts(remote.remote_addrs, count),
            std::slice::from_raw_parts(remote.rkeys, count),
        )
    };
    let (lengths, remote_lengths) = (arr(local.lengths), arr(remote.lengths));
    let mut blocks = Vec::with_capacity(count);
    for i in 0..count {
        let (n, stride) = if repeats != 0 {
            (arr(local.counts)[i], arr(local.strides)[i])
        } else {
            (1, 0)
        };
        let len = lengths[i];
        let total = len
            .checked_mul(n)
            .ok_or_else(|| bad(format!("element {i} overflows")))?;
        if total != remote_lengths[i] {
            return Err(bad(format!(
                "element {i}: {total} local bytes against {} remote ones",
                remote_lengths[i]
            )));
        }
        if total > 0 && buffers[i].is_null() {
            return Err(bad(format!("element {i}: its buffer is NULL")));
        }
        let rkey = rkeys[i] as *mut CRkey;
        // SAFETY: a key from `ucp_ep_rkey_unpack`, or NULL (refused).
        unsafe { rkey_for(name, rkey, w, ACCESS_WRITE) }?;
        for k in 0..n {
            if len == 0 {
                break;
            }
            blocks.push(Block {
                src: (buffers[i] as *const u8).wrapping_add(k * stride).cast(),
                len,
                remote_addr: addrs[i].wrapping_add((k * len) as u64),
                rkey,
            });
        }
    }
    Ok(blocks)
}

/// Writes `blocks` on rucx endpoint `h` and makes the client's request: done when every block
/// was handed over at once, else the flush of the endpoint that covers those still queued.
fn put_blocks(name: &str, w: &Worker, h: EpHandle, blocks: &[Block], args: &OpArgs) -> StatusPtr {
    let _g = w.lock.lock();
    let res = {
        let mut i = w.inner.borrow_mut();
        let mut queued = false;
        let mut failed = None;
        for b in blocks {
            // SAFETY: checked by `sgl_blocks` (or the gathered IOV's own key below).
            let (k, delta): (&Rkey, u64) = match unsafe { rkey_for(name, b.rkey, w, ACCESS_WRITE) }
            {
                Ok(x) => x,
                Err(s) => return status_ptr(s),
            };
            let addr = b.remote_addr.wrapping_sub(delta);
            // SAFETY: the client's block of `len` bytes (or the gathered copy).
            let data = unsafe { slice(b.src, b.len) };
            if i.w.put_mapped(h, data, addr, k).is_some() {
                continue;
            }
            match i.w.put(h, data, addr, k) {
                Ok(Op::Done(_)) => {}
                Ok(Op::Pending(r)) => {
                    // Its result reaches the client through the flush below.
                    let _ = i.w.request_set_callback(&r, |_| {});
                    queued = true;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None if queued => i.w.ep_flush(h),
            None => Ok(Op::Done(Completion {
                status: Ok(()),
                buf: None,
                len: 0,
                tag: 0,
                value: 0,
            })),
        }
    };
    if let Err(e) = &res {
        tracing::warn!("{name}: {e}");
    }
    submit(name, w, res, args, crate::datatype::Finish::None)
}
