//! `ucp_request_param_t`, the parameter every `_nbx` call takes: checked and read once into
//! an [`Nbx`], which gives the request arguments of a send or a receive.

use crate::ffi::*;
use crate::guard::{check_mask, refuse};
use crate::handles::{Cb, OpArgs, ReqArgs};
use std::ffi::c_void;

/// A parsed `ucp_request_param_t`.
pub struct Nbx {
    /// `request` (FIELD_REQUEST) or null.
    pub request: *mut c_void,
    /// The raw callback (FIELD_CALLBACK) or null.
    pub cb: *const c_void,
    /// `user_data` (FIELD_USER_DATA) or null.
    pub user_data: *mut c_void,
    /// `datatype` (FIELD_DATATYPE), default bytes.
    pub datatype: Datatype,
    /// NO_IMM_CMPL.
    pub no_imm: bool,
    /// `recv_info` (FIELD_RECV_INFO) or null.
    pub recv_info: *mut c_void,
}

impl Nbx {
    #[inline(always)]
    fn args(&self, cb: Cb) -> OpArgs {
        OpArgs {
            caller_req: self.request,
            cb,
            user_data: self.user_data,
            no_imm: self.no_imm,
            info_out: std::ptr::null_mut(),
            len_out: std::ptr::null_mut(),
        }
    }

    /// Arguments of a send-like operation (callback `ucp_send_nbx_callback_t`).
    #[inline]
    pub fn send_args(&self) -> OpArgs {
        let cb = if self.cb.is_null() {
            Cb::None
        } else {
            // SAFETY: FIELD_CALLBACK of a send-like call holds a ucp_send_nbx_callback_t.
            Cb::SendNbx(unsafe { std::mem::transmute::<*const c_void, SendNbxCb>(self.cb) })
        };
        self.args(cb)
    }

    /// Arguments of a tag receive (callback `ucp_tag_recv_nbx_callback_t`).
    #[inline]
    pub fn recv_args(&self) -> OpArgs {
        let cb = if self.cb.is_null() {
            Cb::None
        } else {
            // SAFETY: FIELD_CALLBACK of a tag receive holds a ucp_tag_recv_nbx_callback_t.
            Cb::RecvNbx(unsafe { std::mem::transmute::<*const c_void, TagRecvNbxCb>(self.cb) })
        };
        let mut a = self.args(cb);
        a.info_out = self.recv_info.cast();
        a
    }
}

/// The callback of [`ParamArgs`]: a send's (`ucp_send_nbx_callback_t`).
pub const SEND: u8 = 0;
/// The callback of [`ParamArgs`]: a tag receive's (`ucp_tag_recv_nbx_callback_t`), whose
/// `recv_info` is the tag info to fill on immediate completion.
pub const TAG_RECV: u8 = 1;

/// The callback of [`ParamArgs`]: a stream receive's (`ucp_stream_recv_nbx_callback_t`), whose
/// `recv_info` (or the call's own `length` argument) is the length to fill on immediate
/// completion.
pub const STREAM_RECV: u8 = 2;

/// The request arguments of a checked `ucp_request_param_t` (see [`check_param`]) of a call
/// whose callback has shape `KIND` ([`SEND`], [`TAG_RECV`], [`STREAM_RECV`]), each field read
/// where it is used (building a whole [`OpArgs`] first costs the fields an outcome does not
/// need).
#[derive(Clone, Copy)]
pub struct ParamArgs<'a, const KIND: u8> {
    p: &'a RequestParam,
    /// A stream receive's `length` argument (null: `recv_info`, if given).
    length: *mut usize,
}

impl<'a, const KIND: u8> ParamArgs<'a, KIND> {
    /// The arguments of `p`, checked by [`check_param`].
    #[inline(always)]
    pub fn new(p: &'a RequestParam) -> Self {
        ParamArgs {
            p,
            length: std::ptr::null_mut(),
        }
    }

    /// The arguments of a stream receive's `p` with its `length` argument (NULL or not).
    #[inline(always)]
    pub fn with_length(p: &'a RequestParam, length: *mut usize) -> Self {
        ParamArgs { p, length }
    }

    #[inline(always)]
    fn has(&self, bit: u32) -> bool {
        self.p.op_attr_mask & bit != 0
    }
}

impl<const KIND: u8> ReqArgs for ParamArgs<'_, KIND> {
    #[inline(always)]
    fn caller_req(&self) -> *mut c_void {
        param_request(self.p)
    }
    #[inline(always)]
    fn cb(&self) -> Cb {
        if !self.has(UCP_OP_ATTR_FIELD_CALLBACK) {
            return Cb::None;
        }
        // SAFETY: every member of the union is one function pointer; read it as a pointer.
        let raw = unsafe { self.p.cb.raw };
        if raw.is_null() {
            Cb::None
        } else if KIND == TAG_RECV {
            // SAFETY: FIELD_CALLBACK of a tag receive holds a ucp_tag_recv_nbx_callback_t.
            Cb::RecvNbx(unsafe { std::mem::transmute::<*const c_void, TagRecvNbxCb>(raw) })
        } else if KIND == STREAM_RECV {
            // SAFETY: FIELD_CALLBACK of a stream receive holds a
            // ucp_stream_recv_nbx_callback_t.
            Cb::StreamRecvNbx(unsafe { std::mem::transmute::<*const c_void, StreamRecvNbxCb>(raw) })
        } else {
            // SAFETY: FIELD_CALLBACK of a send-like call holds a ucp_send_nbx_callback_t.
            Cb::SendNbx(unsafe { std::mem::transmute::<*const c_void, SendNbxCb>(raw) })
        }
    }
    #[inline(always)]
    fn user_data(&self) -> *mut c_void {
        if self.has(UCP_OP_ATTR_FIELD_USER_DATA) {
            self.p.user_data
        } else {
            std::ptr::null_mut()
        }
    }
    #[inline(always)]
    fn no_imm(&self) -> bool {
        self.has(UCP_OP_ATTR_FLAG_NO_IMM_CMPL)
    }
    #[inline(always)]
    fn info_out(&self) -> *mut TagRecvInfo {
        if KIND == TAG_RECV && self.has(UCP_OP_ATTR_FIELD_RECV_INFO) {
            self.p.recv_info.cast()
        } else {
            std::ptr::null_mut()
        }
    }
    #[inline(always)]
    fn len_out(&self) -> *mut usize {
        if KIND != STREAM_RECV {
            std::ptr::null_mut()
        } else if !self.length.is_null() {
            self.length
        } else if self.has(UCP_OP_ATTR_FIELD_RECV_INFO) {
            self.p.recv_info.cast()
        } else {
            std::ptr::null_mut()
        }
    }
}

/// Reads a `ucp_request_param_t`: unknown field bits, and memory types other than host, are
/// refused (unknown flag bits are ignored, as UCX does); `FORCE_IMM_CMPL` is not supported;
/// the `memh` and `MULTI_SEND` hints are accepted and have no effect (`FAST_CMPL` marks a tag
/// send as `TagSendMode::FastCompletion`, see `ucp_tag_send_nbx`, which takes the standard
/// thresholds).
///
/// # Safety
/// `param` NULL or valid.
#[inline(always)]
pub unsafe fn parse_param(
    name: &str,
    param: *const RequestParam,
    _send: bool,
) -> Result<Nbx, Status> {
    // SAFETY: forwarded.
    let p = unsafe { check_param(name, param)? };
    Ok(read_param(p))
}

/// The checks of [`parse_param`]; gives the param to read.
///
/// # Safety
/// `param` NULL or valid.
#[inline(always)]
pub(crate) unsafe fn check_param<'a>(
    name: &str,
    param: *const RequestParam,
) -> Result<&'a RequestParam, Status> {
    if param.is_null() {
        return Err(refuse(name, UCS_ERR_INVALID_PARAM, "param is NULL"));
    }
    // SAFETY: the caller's param.
    let p = unsafe { &*param };
    let m = p.op_attr_mask;
    // Unknown bits, FORCE_IMM_CMPL and a memory type are rare: one test sends them all to
    // `check_rare`.
    if m & (!UCP_OP_ATTR_KNOWN | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL | UCP_OP_ATTR_FIELD_MEMORY_TYPE)
        != 0
    {
        check_rare(name, p)?;
    }
    if m & UCP_OP_ATTR_FIELD_REQUEST != 0 && p.request.is_null() {
        return Err(refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            "FIELD_REQUEST with a NULL request",
        ));
    }
    Ok(p)
}

/// The datatype of a checked param (default: bytes).
#[inline(always)]
pub(crate) fn param_datatype(p: &RequestParam) -> Datatype {
    if p.op_attr_mask & UCP_OP_ATTR_FIELD_DATATYPE != 0 {
        p.datatype
    } else {
        1 << UCP_DATATYPE_SHIFT
    }
}

/// The request memory of a checked param (FIELD_REQUEST), or null.
#[inline(always)]
pub(crate) fn param_request(p: &RequestParam) -> *mut c_void {
    if p.op_attr_mask & UCP_OP_ATTR_FIELD_REQUEST != 0 {
        p.request
    } else {
        std::ptr::null_mut()
    }
}

/// The fields of a checked param.
#[inline(always)]
pub(crate) fn read_param(p: &RequestParam) -> Nbx {
    let m = p.op_attr_mask;
    let has = |b: u32| m & b != 0;
    Nbx {
        request: param_request(p),
        cb: if has(UCP_OP_ATTR_FIELD_CALLBACK) {
            // SAFETY: every member of the union is one function pointer; read it as a pointer.
            unsafe { p.cb.raw }
        } else {
            std::ptr::null()
        },
        user_data: if has(UCP_OP_ATTR_FIELD_USER_DATA) {
            p.user_data
        } else {
            std::ptr::null_mut()
        },
        datatype: param_datatype(p),
        no_imm: has(UCP_OP_ATTR_FLAG_NO_IMM_CMPL),
        recv_info: if has(UCP_OP_ATTR_FIELD_RECV_INFO) {
            p.recv_info
        } else {
            std::ptr::null_mut()
        },
    }
}

/// `op_attr_mask` bits that name fields (the low 16); the high 16 are flags.
const OP_ATTR_FIELDS: u32 = 0xffff;

/// The checks of `op_attr_mask` bits hot calls do not carry: unknown field bits (refused),
/// unknown flag bits (ignored, as UCX does), `FORCE_IMM_CMPL`, a memory type other than host.
#[cold]
#[inline(never)]
fn check_rare(name: &str, p: &RequestParam) -> Result<(), Status> {
    let remote = UCP_OP_ATTR_FIELD_REMOTE_DATATYPE
        | UCP_OP_ATTR_FIELD_REMOTE
        | UCP_OP_ATTR_FIELD_REMOTE_COUNT;
    if p.op_attr_mask & remote != 0 {
        return Err(refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            "a remote datatype (UCX 1.20's scatter-gather lists) is for ucp_put_nbx only",
        ));
    }
    check_mask(
        name,
        "ucp_request_param_t.op_attr_mask",
        (p.op_attr_mask & OP_ATTR_FIELDS) as u64,
        (UCP_OP_ATTR_KNOWN & OP_ATTR_FIELDS) as u64,
    )?;
    let stray = p.op_attr_mask & !OP_ATTR_FIELDS & !UCP_OP_ATTR_KNOWN;
    if stray != 0 {
        tracing::debug!("{name}: ignoring unknown op_attr_mask flags {stray:#x}");
    }
    let has = |b: u32| p.op_attr_mask & b != 0;
    if has(UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL) {
        return Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            "UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL is not supported",
        ));
    }
    if has(UCP_OP_ATTR_FIELD_MEMORY_TYPE) && !crate::memtype::cpu_accessible(p.memory_type) {
        return Err(refuse(
            name,
            UCS_ERR_UNSUPPORTED,
            format!(
                "memory type {} (rucx moves host memory only)",
                p.memory_type
            ),
        ));
    }
    Ok(())
}
