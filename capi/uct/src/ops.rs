//! The layout of UCX's operations table (`uct_iface_ops_t`, 50 function pointers in `tl.h`'s
//! order), which every interface carries first. The table itself, filled with this library's
//! functions, is [`crate::iface::OPS`].

use crate::ffi::*;
use std::ffi::{c_int, c_uint, c_void};

type Ptr = *mut c_void;

/// `uct_iface_ops_t`: each field is the member of `tl.h` of the same name, in its order (the
/// operations UCX's inline calls and `uct_iface_*`/`uct_ep_*` functions reach through the
/// table); the entries rucx does not offer take no arguments and answer `UCS_ERR_UNSUPPORTED`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IfaceOps {
    pub ep_put_short: unsafe extern "C" fn(Ptr, *const c_void, c_uint, u64, usize) -> Status,
    pub ep_put_bcopy:
        unsafe extern "C" fn(Ptr, Option<uct_pack_callback_t>, Ptr, u64, usize) -> isize,
    pub ep_put_zcopy: unsafe extern "C" fn(
        Ptr,
        *const uct_iov_t,
        usize,
        u64,
        usize,
        *mut uct_completion_t,
    ) -> Status,
    pub ep_get_short: unsafe extern "C" fn(Ptr, Ptr, c_uint, u64, usize) -> Status,
    pub ep_get_bcopy: unsafe extern "C" fn(
        Ptr,
        Option<uct_unpack_callback_t>,
        Ptr,
        usize,
        u64,
        usize,
        *mut uct_completion_t,
    ) -> Status,
    pub ep_get_zcopy: unsafe extern "C" fn(
        Ptr,
        *const uct_iov_t,
        usize,
        u64,
        usize,
        *mut uct_completion_t,
    ) -> Status,
    pub ep_am_short: unsafe extern "C" fn(Ptr, u8, u64, *const c_void, c_uint) -> Status,
    pub ep_am_short_iov: unsafe extern "C" fn(Ptr, u8, *const uct_iov_t, usize) -> Status,
    pub ep_am_bcopy:
        unsafe extern "C" fn(Ptr, u8, Option<uct_pack_callback_t>, Ptr, c_uint) -> isize,
    pub ep_am_zcopy: unsafe extern "C" fn(
        Ptr,
        u8,
        *const c_void,
        c_uint,
        *const uct_iov_t,
        usize,
        c_uint,
        *mut uct_completion_t,
    ) -> Status,
    pub ep_atomic_cswap64:
        unsafe extern "C" fn(Ptr, u64, u64, u64, usize, *mut u64, *mut uct_completion_t) -> Status,
    pub ep_atomic_cswap32:
        unsafe extern "C" fn(Ptr, u32, u32, u64, usize, *mut u32, *mut uct_completion_t) -> Status,
    pub ep_atomic32_post: unsafe extern "C" fn(Ptr, c_uint, u32, u64, usize) -> Status,
    pub ep_atomic64_post: unsafe extern "C" fn(Ptr, c_uint, u64, u64, usize) -> Status,
    pub ep_atomic32_fetch: unsafe extern "C" fn(
        Ptr,
        c_uint,
        u32,
        *mut u32,
        u64,
        usize,
        *mut uct_completion_t,
    ) -> Status,
    pub ep_atomic64_fetch: unsafe extern "C" fn(
        Ptr,
        c_uint,
        u64,
        *mut u64,
        u64,
        usize,
        *mut uct_completion_t,
    ) -> Status,
    pub ep_tag_eager_short: unsafe extern "C" fn() -> Status,
    pub ep_tag_eager_bcopy: unsafe extern "C" fn() -> isize,
    pub ep_tag_eager_zcopy: unsafe extern "C" fn() -> Status,
    pub ep_tag_rndv_zcopy: unsafe extern "C" fn() -> Ptr,
    pub ep_tag_rndv_cancel: unsafe extern "C" fn() -> Status,
    pub ep_tag_rndv_request: unsafe extern "C" fn() -> Status,
    pub iface_tag_recv_zcopy: unsafe extern "C" fn() -> Status,
    pub iface_tag_recv_cancel: unsafe extern "C" fn() -> Status,
    pub ep_pending_add: unsafe extern "C" fn(Ptr, *mut uct_pending_req_t, c_uint) -> Status,
    pub ep_pending_purge: unsafe extern "C" fn(Ptr, Option<uct_pending_purge_callback_t>, Ptr),
    pub ep_flush: unsafe extern "C" fn(Ptr, c_uint, *mut uct_completion_t) -> Status,
    pub ep_fence: unsafe extern "C" fn(Ptr, c_uint) -> Status,
    pub ep_check: unsafe extern "C" fn() -> Status,
    pub ep_create: unsafe extern "C" fn(*const uct_ep_params_t, *mut Ptr) -> Status,
    pub ep_connect: unsafe extern "C" fn() -> Status,
    pub ep_disconnect: unsafe extern "C" fn() -> Status,
    pub cm_ep_conn_notify: unsafe extern "C" fn() -> Status,
    pub ep_destroy: unsafe extern "C" fn(Ptr),
    pub ep_get_address: unsafe extern "C" fn(Ptr, *mut u8) -> Status,
    pub ep_connect_to_ep: unsafe extern "C" fn(Ptr, *const u8, *const u8) -> Status,
    pub iface_accept: unsafe extern "C" fn() -> Status,
    pub iface_reject: unsafe extern "C" fn() -> Status,
    pub iface_flush: unsafe extern "C" fn(Ptr, c_uint, *mut uct_completion_t) -> Status,
    pub iface_fence: unsafe extern "C" fn(Ptr, c_uint) -> Status,
    pub iface_progress_enable: unsafe extern "C" fn(Ptr, c_uint),
    pub iface_progress_disable: unsafe extern "C" fn(Ptr, c_uint),
    pub iface_progress: unsafe extern "C" fn(Ptr) -> c_uint,
    pub iface_event_fd_get: unsafe extern "C" fn(Ptr, *mut c_int) -> Status,
    pub iface_event_arm: unsafe extern "C" fn(Ptr, c_uint) -> Status,
    pub iface_close: unsafe extern "C" fn(Ptr),
    pub iface_query: unsafe extern "C" fn(Ptr, *mut uct_iface_attr_t) -> Status,
    pub iface_get_device_address: unsafe extern "C" fn(Ptr, *mut u8) -> Status,
    pub iface_get_address: unsafe extern "C" fn(Ptr, *mut u8) -> Status,
    pub iface_is_reachable: unsafe extern "C" fn(Ptr, *const u8, *const u8) -> c_int,
}

const _: () = assert!(std::mem::size_of::<IfaceOps>() == 400);
