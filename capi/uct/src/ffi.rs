//! The C types of UCX 1.13's transport API (`uct/api/uct.h`, `uct_def.h`, `tl.h`), declared
//! from the headers' documented layouts (nothing of UCX is copied). Sizes are checked at
//! compile time here and field offsets from C by `capi/uct/tests/c/uct_abi.c`.

#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `ucs_status_t`: a one-byte signed enum.
pub type Status = i8;

pub const UCS_OK: Status = 0;
pub const UCS_INPROGRESS: Status = 1;
pub const UCS_ERR_NO_MESSAGE: Status = -1;
pub const UCS_ERR_NO_RESOURCE: Status = -2;
pub const UCS_ERR_IO_ERROR: Status = -3;
pub const UCS_ERR_NO_MEMORY: Status = -4;
pub const UCS_ERR_INVALID_PARAM: Status = -5;
pub const UCS_ERR_UNREACHABLE: Status = -6;
pub const UCS_ERR_INVALID_ADDR: Status = -7;
pub const UCS_ERR_MESSAGE_TRUNCATED: Status = -9;
pub const UCS_ERR_NO_ELEM: Status = -12;
pub const UCS_ERR_NO_DEVICE: Status = -14;
pub const UCS_ERR_BUSY: Status = -15;
pub const UCS_ERR_CANCELED: Status = -16;
pub const UCS_ERR_EXCEEDS_LIMIT: Status = -21;
pub const UCS_ERR_UNSUPPORTED: Status = -22;
pub const UCS_ERR_CONNECTION_RESET: Status = -25;
pub const UCS_ERR_ENDPOINT_TIMEOUT: Status = -80;

/// Name lengths (`UCT_*_NAME_MAX`).
pub const UCT_COMPONENT_NAME_MAX: usize = 16;
pub const UCT_TL_NAME_MAX: usize = 10;
pub const UCT_MD_NAME_MAX: usize = 16;
pub const UCT_DEVICE_NAME_MAX: usize = 32;
/// `UCT_AM_ID_MAX`: active-message ids are 0..32.
pub const UCT_AM_ID_MAX: usize = 32;
/// `UCT_INVALID_RKEY`.
pub const UCT_INVALID_RKEY: usize = usize::MAX;

// uct_component_attr_field
pub const UCT_COMPONENT_ATTR_FIELD_NAME: u64 = 1 << 0;
pub const UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT: u64 = 1 << 1;
pub const UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES: u64 = 1 << 2;
pub const UCT_COMPONENT_ATTR_FIELD_FLAGS: u64 = 1 << 3;

// uct_device_type_t
pub const UCT_DEVICE_TYPE_NET: u32 = 0;
pub const UCT_DEVICE_TYPE_SHM: u32 = 1;
pub const UCT_DEVICE_TYPE_SELF: u32 = 3;
/// `UCS_SYS_DEVICE_ID_UNKNOWN`.
pub const UCS_SYS_DEVICE_ID_UNKNOWN: u8 = 0xff;

// Interface capability flags (UCT_IFACE_FLAG_*).
pub const UCT_IFACE_FLAG_AM_SHORT: u64 = 1 << 0;
pub const UCT_IFACE_FLAG_AM_BCOPY: u64 = 1 << 1;
pub const UCT_IFACE_FLAG_AM_ZCOPY: u64 = 1 << 2;
pub const UCT_IFACE_FLAG_PENDING: u64 = 1 << 3;
pub const UCT_IFACE_FLAG_PUT_SHORT: u64 = 1 << 4;
pub const UCT_IFACE_FLAG_PUT_BCOPY: u64 = 1 << 5;
pub const UCT_IFACE_FLAG_PUT_ZCOPY: u64 = 1 << 6;
pub const UCT_IFACE_FLAG_GET_SHORT: u64 = 1 << 8;
pub const UCT_IFACE_FLAG_GET_BCOPY: u64 = 1 << 9;
pub const UCT_IFACE_FLAG_GET_ZCOPY: u64 = 1 << 10;
pub const UCT_IFACE_FLAG_ATOMIC_CPU: u64 = 1 << 30;
pub const UCT_IFACE_FLAG_ATOMIC_DEVICE: u64 = 1 << 31;
pub const UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE: u64 = 1 << 38;
pub const UCT_IFACE_FLAG_CONNECT_TO_IFACE: u64 = 1 << 40;
pub const UCT_IFACE_FLAG_CONNECT_TO_EP: u64 = 1 << 41;
pub const UCT_IFACE_FLAG_CB_SYNC: u64 = 1 << 44;

// Event capability flags.
pub const UCT_IFACE_FLAG_EVENT_SEND_COMP: u64 = 1 << 0;
pub const UCT_IFACE_FLAG_EVENT_RECV: u64 = 1 << 1;
pub const UCT_IFACE_FLAG_EVENT_FD: u64 = 1 << 3;

// uct_iface_event_types
pub const UCT_EVENT_SEND_COMP: c_uint = 1 << 0;
pub const UCT_EVENT_RECV: c_uint = 1 << 1;
pub const UCT_EVENT_RECV_SIG: c_uint = 1 << 2;

// uct_flush_flags
pub const UCT_FLUSH_FLAG_CANCEL: c_uint = 1 << 0;

// uct_progress_types
pub const UCT_PROGRESS_SEND: c_uint = 1 << 0;
pub const UCT_PROGRESS_RECV: c_uint = 1 << 1;
pub const UCT_PROGRESS_THREAD_SAFE: c_uint = 1 << 7;

// uct_cb_param_flags
pub const UCT_CB_PARAM_FLAG_DESC: c_uint = 1 << 0;

// uct_cb_flags
pub const UCT_CB_FLAG_RESERVED: u32 = 1 << 1;
pub const UCT_CB_FLAG_ASYNC: u32 = 1 << 2;

// uct_iface_open_mode
pub const UCT_IFACE_OPEN_MODE_DEVICE: u64 = 1 << 0;

// uct_iface_params_field
pub const UCT_IFACE_PARAM_FIELD_CPU_MASK: u64 = 1 << 0;
pub const UCT_IFACE_PARAM_FIELD_OPEN_MODE: u64 = 1 << 1;
pub const UCT_IFACE_PARAM_FIELD_DEVICE: u64 = 1 << 2;
pub const UCT_IFACE_PARAM_FIELD_SOCKADDR: u64 = 1 << 3;
pub const UCT_IFACE_PARAM_FIELD_STATS_ROOT: u64 = 1 << 4;
pub const UCT_IFACE_PARAM_FIELD_RX_HEADROOM: u64 = 1 << 5;
pub const UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG: u64 = 1 << 6;
pub const UCT_IFACE_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 7;
pub const UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS: u64 = 1 << 8;
pub const UCT_IFACE_PARAM_FIELD_KEEPALIVE_INTERVAL: u64 = 1 << 15;
pub const UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT: u64 = 1 << 16;
pub const UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET: u64 = 1 << 17;
pub const UCT_IFACE_PARAM_FIELD_FEATURES: u64 = 1 << 18;

// uct_ep_params_field
pub const UCT_EP_PARAM_FIELD_IFACE: u64 = 1 << 0;
pub const UCT_EP_PARAM_FIELD_USER_DATA: u64 = 1 << 1;
pub const UCT_EP_PARAM_FIELD_DEV_ADDR: u64 = 1 << 2;
pub const UCT_EP_PARAM_FIELD_IFACE_ADDR: u64 = 1 << 3;
pub const UCT_EP_PARAM_FIELD_PATH_INDEX: u64 = 1 << 12;

// MD flags (UCT_MD_FLAG_*).
pub const UCT_MD_FLAG_ALLOC: u64 = 1 << 0;
pub const UCT_MD_FLAG_REG: u64 = 1 << 1;
pub const UCT_MD_FLAG_NEED_MEMH: u64 = 1 << 2;
pub const UCT_MD_FLAG_NEED_RKEY: u64 = 1 << 3;
pub const UCT_MD_FLAG_RKEY_PTR: u64 = 1 << 6;

// uct_md_mem_flags
pub const UCT_MD_MEM_FLAG_FIXED: c_uint = 1 << 1;

// uct_alloc_method_t
pub const UCT_ALLOC_METHOD_THP: u32 = 0;
pub const UCT_ALLOC_METHOD_MD: u32 = 1;
pub const UCT_ALLOC_METHOD_HEAP: u32 = 2;
pub const UCT_ALLOC_METHOD_MMAP: u32 = 3;
pub const UCT_ALLOC_METHOD_HUGE: u32 = 4;
pub const UCT_ALLOC_METHOD_LAST: u32 = 5;

// uct_mem_alloc_params_field_t
pub const UCT_MEM_ALLOC_PARAM_FIELD_FLAGS: u64 = 1 << 0;
pub const UCT_MEM_ALLOC_PARAM_FIELD_ADDRESS: u64 = 1 << 1;
pub const UCT_MEM_ALLOC_PARAM_FIELD_MEM_TYPE: u64 = 1 << 2;
pub const UCT_MEM_ALLOC_PARAM_FIELD_MDS: u64 = 1 << 3;
pub const UCT_MEM_ALLOC_PARAM_FIELD_NAME: u64 = 1 << 4;

// uct_md_mem_attr_field
pub const UCT_MD_MEM_ATTR_FIELD_MEM_TYPE: u64 = 1 << 0;
pub const UCT_MD_MEM_ATTR_FIELD_SYS_DEV: u64 = 1 << 1;
pub const UCT_MD_MEM_ATTR_FIELD_BASE_ADDRESS: u64 = 1 << 2;
pub const UCT_MD_MEM_ATTR_FIELD_ALLOC_LENGTH: u64 = 1 << 3;

// uct_atomic_op_t
pub const UCT_ATOMIC_OP_ADD: c_uint = 0;
pub const UCT_ATOMIC_OP_AND: c_uint = 1;
pub const UCT_ATOMIC_OP_OR: c_uint = 2;
pub const UCT_ATOMIC_OP_XOR: c_uint = 3;
pub const UCT_ATOMIC_OP_SWAP: c_uint = 4;
pub const UCT_ATOMIC_OP_CSWAP: c_uint = 5;

/// `UCS_MEMORY_TYPE_HOST` / `_UNKNOWN` (= LAST in 1.13).
pub const UCS_MEMORY_TYPE_HOST: u32 = 0;
pub const UCS_MEMORY_TYPE_UNKNOWN: u32 = 5;

/// `ucs_thread_mode_t` values.
pub const UCS_THREAD_MODE_MULTI: c_int = 2;
pub const UCS_THREAD_MODE_LAST: c_int = 3;

/// `uct_md_resource_desc_t`.
#[repr(C)]
pub struct uct_md_resource_desc_t {
    pub md_name: [c_char; UCT_MD_NAME_MAX],
}

/// `uct_component_attr_t`.
#[repr(C)]
pub struct uct_component_attr_t {
    pub field_mask: u64,
    pub name: [c_char; UCT_COMPONENT_NAME_MAX],
    pub md_resource_count: c_uint,
    pub md_resources: *mut uct_md_resource_desc_t,
    pub flags: u64,
}

/// `uct_tl_resource_desc_t`.
#[repr(C)]
pub struct uct_tl_resource_desc_t {
    pub tl_name: [c_char; UCT_TL_NAME_MAX],
    pub dev_name: [c_char; UCT_DEVICE_NAME_MAX],
    pub dev_type: u32,
    pub sys_device: u8,
}

/// `ucs_linear_func_t`: `c + m * x`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ucs_linear_func_t {
    pub c: f64,
    pub m: f64,
}

/// `uct_md_attr_t.cap`.
#[repr(C)]
pub struct uct_md_cap_t {
    pub max_alloc: u64,
    pub max_reg: usize,
    pub flags: u64,
    pub reg_mem_types: u64,
    pub detect_mem_types: u64,
    pub alloc_mem_types: u64,
    pub access_mem_types: u64,
}

/// `uct_md_attr_t`.
#[repr(C)]
pub struct uct_md_attr_t {
    pub cap: uct_md_cap_t,
    pub reg_cost: ucs_linear_func_t,
    pub component_name: [c_char; UCT_COMPONENT_NAME_MAX],
    pub rkey_packed_size: usize,
    pub local_cpus: [u8; 128],
}

/// The put/get capabilities of `uct_iface_attr_t.cap`.
#[repr(C)]
#[derive(Default)]
pub struct uct_rma_cap_t {
    pub max_short: usize,
    pub max_bcopy: usize,
    pub min_zcopy: usize,
    pub max_zcopy: usize,
    pub opt_zcopy_align: usize,
    pub align_mtu: usize,
    pub max_iov: usize,
}

/// The active-message capabilities of `uct_iface_attr_t.cap`.
#[repr(C)]
#[derive(Default)]
pub struct uct_am_cap_t {
    pub max_short: usize,
    pub max_bcopy: usize,
    pub min_zcopy: usize,
    pub max_zcopy: usize,
    pub opt_zcopy_align: usize,
    pub align_mtu: usize,
    pub max_hdr: usize,
    pub max_iov: usize,
}

/// The tag-offload capabilities of `uct_iface_attr_t.cap` (recv 4, eager 4, rndv 3 words).
#[repr(C)]
#[derive(Default)]
pub struct uct_tag_cap_t {
    pub words: [usize; 11],
}

/// `uct_iface_attr_t.cap.atomic32/64`.
#[repr(C)]
#[derive(Default)]
pub struct uct_atomic_cap_t {
    pub op_flags: u64,
    pub fop_flags: u64,
}

/// `uct_iface_attr_t.cap`.
#[repr(C)]
#[derive(Default)]
pub struct uct_iface_cap_t {
    pub put: uct_rma_cap_t,
    pub get: uct_rma_cap_t,
    pub am: uct_am_cap_t,
    pub tag: uct_tag_cap_t,
    pub atomic32: uct_atomic_cap_t,
    pub atomic64: uct_atomic_cap_t,
    pub flags: u64,
    pub event_flags: u64,
}

/// `uct_ppn_bandwidth_t`.
#[repr(C)]
#[derive(Default)]
pub struct uct_ppn_bandwidth_t {
    pub dedicated: f64,
    pub shared: f64,
}

/// `uct_iface_attr_t`.
#[repr(C)]
pub struct uct_iface_attr_t {
    pub cap: uct_iface_cap_t,
    pub device_addr_len: usize,
    pub iface_addr_len: usize,
    pub ep_addr_len: usize,
    pub max_conn_priv: usize,
    pub listen_sockaddr: libc::sockaddr_storage,
    pub overhead: f64,
    pub bandwidth: uct_ppn_bandwidth_t,
    pub latency: ucs_linear_func_t,
    pub priority: u8,
    pub max_num_eps: usize,
    pub dev_num_paths: c_uint,
}

/// `uct_iface_params_t.mode.device`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct uct_iface_mode_device_t {
    pub tl_name: *const c_char,
    pub dev_name: *const c_char,
}

/// `uct_iface_params_t`.
#[repr(C)]
pub struct uct_iface_params_t {
    pub field_mask: u64,
    pub cpu_mask: [u8; 128],
    pub open_mode: u64,
    /// The `mode` union: `device` (two pointers) or `sockaddr` (40 bytes).
    pub mode_device: uct_iface_mode_device_t,
    pub mode_rest: [u64; 3],
    pub stats_root: *mut c_void,
    pub rx_headroom: usize,
    pub err_handler_arg: *mut c_void,
    pub err_handler: Option<uct_error_handler_t>,
    pub err_handler_flags: u32,
    pub eager_arg: *mut c_void,
    pub eager_cb: *mut c_void,
    pub rndv_arg: *mut c_void,
    pub rndv_cb: *mut c_void,
    pub async_event_arg: *mut c_void,
    pub async_event_cb: *mut c_void,
    pub keepalive_interval: u64,
    pub am_alignment: usize,
    pub am_align_offset: usize,
    pub features: u64,
}

/// `uct_ep_params_t`.
#[repr(C)]
pub struct uct_ep_params_t {
    pub field_mask: u64,
    pub iface: *mut c_void,
    pub user_data: *mut c_void,
    pub dev_addr: *const u8,
    pub iface_addr: *const u8,
    pub sockaddr: *const c_void,
    pub sockaddr_cb_flags: u32,
    pub sockaddr_pack_cb: *mut c_void,
    pub cm: *mut c_void,
    pub conn_request: *mut c_void,
    pub sockaddr_cb_client: *mut c_void,
    pub sockaddr_cb_server: *mut c_void,
    pub disconnect_cb: *mut c_void,
    pub path_index: c_uint,
    pub cm_resolve_cb: *mut c_void,
    pub private_data: *const c_void,
    pub private_data_length: usize,
    pub local_sockaddr: *const c_void,
}

/// `uct_iov_t`.
#[repr(C)]
pub struct uct_iov_t {
    pub buffer: *mut c_void,
    pub length: usize,
    pub memh: *mut c_void,
    pub stride: usize,
    pub count: c_uint,
}

/// `uct_completion_callback_t`.
pub type uct_completion_callback_t = unsafe extern "C" fn(comp: *mut uct_completion_t);

/// `uct_completion_t`.
#[repr(C)]
pub struct uct_completion_t {
    pub func: Option<uct_completion_callback_t>,
    pub count: c_int,
    pub status: Status,
}

/// `uct_pending_callback_t`.
pub type uct_pending_callback_t = unsafe extern "C" fn(req: *mut uct_pending_req_t) -> Status;

/// `uct_pending_req_t`.
#[repr(C)]
pub struct uct_pending_req_t {
    pub func: Option<uct_pending_callback_t>,
    pub priv_: [c_char; 40],
}

/// `uct_pending_purge_callback_t`.
pub type uct_pending_purge_callback_t =
    unsafe extern "C" fn(req: *mut uct_pending_req_t, arg: *mut c_void);

/// `uct_allocated_memory_t`.
#[repr(C)]
pub struct uct_allocated_memory_t {
    pub address: *mut c_void,
    pub length: usize,
    pub method: u32,
    pub mem_type: u32,
    pub md: *mut c_void,
    pub memh: *mut c_void,
}

/// `uct_rkey_bundle_t`.
#[repr(C)]
pub struct uct_rkey_bundle_t {
    pub rkey: usize,
    pub handle: *mut c_void,
    pub type_: *mut c_void,
}

/// `uct_mem_alloc_params_t`.
#[repr(C)]
pub struct uct_mem_alloc_params_t {
    pub field_mask: u64,
    pub flags: c_uint,
    pub address: *mut c_void,
    pub mem_type: u32,
    pub mds: *const *mut c_void,
    pub mds_count: c_uint,
    pub name: *const c_char,
}

/// `uct_md_mem_attr_t`.
#[repr(C)]
pub struct uct_md_mem_attr_t {
    pub field_mask: u64,
    pub mem_type: u32,
    pub sys_dev: u8,
    pub base_address: *mut c_void,
    pub alloc_length: usize,
}

/// `uct_am_callback_t`.
pub type uct_am_callback_t = unsafe extern "C" fn(
    arg: *mut c_void,
    data: *mut c_void,
    length: usize,
    flags: c_uint,
) -> Status;
/// `uct_error_handler_t`.
pub type uct_error_handler_t =
    unsafe extern "C" fn(arg: *mut c_void, ep: *mut c_void, status: Status) -> Status;
/// `uct_pack_callback_t`.
pub type uct_pack_callback_t = unsafe extern "C" fn(dest: *mut c_void, arg: *mut c_void) -> usize;
/// `uct_unpack_callback_t`.
pub type uct_unpack_callback_t =
    unsafe extern "C" fn(arg: *mut c_void, data: *const c_void, length: usize);
/// `ucs_callback_t`.
pub type ucs_callback_t = unsafe extern "C" fn(arg: *mut c_void) -> c_uint;

/// `uct_recv_desc_t`: what `uct_iface_release_desc` finds in the 8 bytes before a descriptor.
#[repr(C)]
pub struct uct_recv_desc_t {
    pub cb: unsafe extern "C" fn(this: *mut uct_recv_desc_t, desc: *mut c_void),
}

/// `ucs_callbackq_elem_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ucs_callbackq_elem_t {
    pub cb: Option<ucs_callback_t>,
    pub arg: *mut c_void,
    pub flags: c_uint,
    pub id: c_int,
}

/// `UCS_CALLBACKQ_FAST_COUNT`: fast-path callbacks a queue holds (one more entry is the
/// terminating NULL the header-inline dispatch stops at).
pub const UCS_CALLBACKQ_FAST_COUNT: usize = 7;

/// `ucs_callbackq_t`: the fast-path array `uct_worker_progress` walks inline, and 72 private
/// bytes.
#[repr(C)]
pub struct ucs_callbackq_t {
    pub fast_elems: [ucs_callbackq_elem_t; UCS_CALLBACKQ_FAST_COUNT + 1],
    pub priv_: [u8; 72],
}

const _: () = {
    use std::mem::size_of;
    assert!(size_of::<uct_component_attr_t>() == 48);
    assert!(size_of::<uct_md_resource_desc_t>() == 16);
    assert!(size_of::<uct_tl_resource_desc_t>() == 52);
    assert!(size_of::<uct_md_attr_t>() == 224);
    assert!(size_of::<uct_iface_attr_t>() == 536);
    assert!(size_of::<uct_iface_params_t>() == 304);
    assert!(size_of::<uct_ep_params_t>() == 144);
    assert!(size_of::<uct_iov_t>() == 40);
    assert!(size_of::<uct_completion_t>() == 16);
    assert!(size_of::<uct_pending_req_t>() == 48);
    assert!(size_of::<uct_allocated_memory_t>() == 40);
    assert!(size_of::<uct_rkey_bundle_t>() == 24);
    assert!(size_of::<uct_mem_alloc_params_t>() == 56);
    assert!(size_of::<uct_md_mem_attr_t>() == 32);
    assert!(size_of::<ucs_callbackq_t>() == 264);
    assert!(std::mem::offset_of!(uct_iface_attr_t, overhead) == 472);
    assert!(std::mem::offset_of!(uct_iface_attr_t, priority) == 512);
    assert!(std::mem::offset_of!(uct_iface_params_t, rx_headroom) == 192);
    assert!(std::mem::offset_of!(uct_iface_params_t, features) == 296);
    assert!(std::mem::offset_of!(uct_ep_params_t, path_index) == 104);
    assert!(std::mem::offset_of!(uct_md_attr_t, rkey_packed_size) == 88);
};
