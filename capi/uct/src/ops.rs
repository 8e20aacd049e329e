//! UCX's operations table (`uct_iface_ops_t`, 50 function pointers in `tl.h`'s order): every
//! interface carries it first, so the header-inline calls of UCX's clients land here.
//! Operations rucx does not offer through this API (tag offload, connection managers,
//! endpoint checks) answer `UCS_ERR_UNSUPPORTED`, and the attributes never announce them.

use crate::ep::*;
use crate::ffi::*;
use crate::iface::*;
use crate::rma::*;
use crate::sink::*;
use std::ffi::{c_int, c_uint, c_void};

type Ptr = *mut c_void;

/// `uct_iface_ops_t`.
#[repr(C)]
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

/// An operation rucx does not offer through this API: `UCS_ERR_UNSUPPORTED`.
unsafe extern "C" fn unsupported() -> Status {
    UCS_ERR_UNSUPPORTED
}

/// As [`unsupported`], for the operations that return `ssize_t`.
unsafe extern "C" fn unsupported_len() -> isize {
    UCS_ERR_UNSUPPORTED as isize
}

/// As [`unsupported`], for `ep_tag_rndv_zcopy`, which returns a status pointer.
unsafe extern "C" fn unsupported_ptr() -> Ptr {
    UCS_ERR_UNSUPPORTED as isize as Ptr
}

/// The table every interface carries.
pub const OPS: IfaceOps = IfaceOps {
    ep_put_short,
    ep_put_bcopy,
    ep_put_zcopy,
    ep_get_short,
    ep_get_bcopy,
    ep_get_zcopy,
    ep_am_short,
    ep_am_short_iov,
    ep_am_bcopy,
    ep_am_zcopy,
    ep_atomic_cswap64,
    ep_atomic_cswap32,
    ep_atomic32_post,
    ep_atomic64_post,
    ep_atomic32_fetch,
    ep_atomic64_fetch,
    ep_tag_eager_short: unsupported,
    ep_tag_eager_bcopy: unsupported_len,
    ep_tag_eager_zcopy: unsupported,
    ep_tag_rndv_zcopy: unsupported_ptr,
    ep_tag_rndv_cancel: unsupported,
    ep_tag_rndv_request: unsupported,
    iface_tag_recv_zcopy: unsupported,
    iface_tag_recv_cancel: unsupported,
    ep_pending_add,
    ep_pending_purge,
    ep_flush,
    ep_fence,
    ep_check: unsupported,
    ep_create: ep_create_op,
    ep_connect: unsupported,
    ep_disconnect: unsupported,
    cm_ep_conn_notify: unsupported,
    ep_destroy: ep_destroy_op,
    ep_get_address: ep_get_address_op,
    ep_connect_to_ep: ep_connect_to_ep_op,
    iface_accept: unsupported,
    iface_reject: unsupported,
    iface_flush,
    iface_fence,
    iface_progress_enable,
    iface_progress_disable,
    iface_progress,
    iface_event_fd_get,
    iface_event_arm,
    iface_close: iface_close_op,
    iface_query: iface_query_op,
    iface_get_device_address: uct_iface_get_device_address,
    iface_get_address: uct_iface_get_address,
    iface_is_reachable: uct_iface_is_reachable,
};
