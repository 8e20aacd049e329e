//! The C types of UCX 1.13's `ucp.h` / `ucp_def.h` / `ucp_compat.h`, written from the headers:
//! structs with their exact field order, the field-mask bits, flags and callback signatures.
//! The C test (`tests/c/abi_layout.c`, compiled against the installed headers) checks sizes
//! and offsets against these by exercising the library.

#![allow(missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

mod am;
mod conn;
pub mod consts;
mod query;
pub use am::*;
pub use conn::*;
pub use consts::*;
pub use query::*;

pub use crate::ucs_codes::codes::*;
pub use crate::ucs_codes::Status;

/// `ucs_status_ptr_t`: NULL (done), a request pointer, or a status cast to a pointer.
pub type StatusPtr = *mut c_void;
/// `ucp_tag_t`.
pub type Tag = u64;
/// `ucp_datatype_t`: class in the low 3 bits.
pub type Datatype = u64;

/// `ucs_thread_mode_t`.
pub const UCS_THREAD_MODE_SINGLE: c_uint = 0;
pub const UCS_THREAD_MODE_SERIALIZED: c_uint = 1;
pub const UCS_THREAD_MODE_MULTI: c_uint = 2;
/// `UCS_MEMORY_TYPE_HOST`.
pub const UCS_MEMORY_TYPE_HOST: c_uint = 0;
/// `UCS_MEMORY_TYPE_UNKNOWN` (= `UCS_MEMORY_TYPE_LAST`) of UCX 1.13's header; later headers
/// have more memory types before it (see [`crate::memtype`]).
pub const UCS_MEMORY_TYPE_UNKNOWN: c_uint = 5;

pub const fn bit(n: u32) -> u64 {
    1 << n
}

// ucp_params_t.field_mask
pub const UCP_PARAM_FIELD_FEATURES: u64 = bit(0);
pub const UCP_PARAM_FIELD_REQUEST_SIZE: u64 = bit(1);
pub const UCP_PARAM_FIELD_REQUEST_INIT: u64 = bit(2);
pub const UCP_PARAM_FIELD_REQUEST_CLEANUP: u64 = bit(3);
pub const UCP_PARAM_FIELD_TAG_SENDER_MASK: u64 = bit(4);
pub const UCP_PARAM_FIELD_MT_WORKERS_SHARED: u64 = bit(5);
pub const UCP_PARAM_FIELD_ESTIMATED_NUM_EPS: u64 = bit(6);
pub const UCP_PARAM_FIELD_ESTIMATED_NUM_PPN: u64 = bit(7);
pub const UCP_PARAM_FIELD_NAME: u64 = bit(8);
/// UCX 1.22: `node_local_id`, after `name`.
pub const UCP_PARAM_FIELD_NODE_LOCAL_ID: u64 = bit(9);

// ucp_feature
pub const UCP_FEATURE_TAG: u64 = bit(0);
pub const UCP_FEATURE_RMA: u64 = bit(1);
pub const UCP_FEATURE_AMO32: u64 = bit(2);
pub const UCP_FEATURE_AMO64: u64 = bit(3);
pub const UCP_FEATURE_WAKEUP: u64 = bit(4);
pub const UCP_FEATURE_STREAM: u64 = bit(5);
pub const UCP_FEATURE_AM: u64 = bit(6);
/// UCX 1.14: memory handles exported to other processes (`ucp_memh_pack` with
/// `UCP_MEMH_PACK_FLAG_EXPORT`).
pub const UCP_FEATURE_EXPORTED_MEMH: u64 = bit(7);
/// UCX 1.20: GPU-device API (out of scope: refused).
pub const UCP_FEATURE_DEVICE: u64 = bit(8);

// ucp_context_attr_t.field_mask
pub const UCP_ATTR_FIELD_REQUEST_SIZE: u64 = bit(0);
pub const UCP_ATTR_FIELD_THREAD_MODE: u64 = bit(1);
pub const UCP_ATTR_FIELD_MEMORY_TYPES: u64 = bit(2);
pub const UCP_ATTR_FIELD_NAME: u64 = bit(3);
/// UCX 1.22: `device_counter_size`, after `name` (GPU-device API).
pub const UCP_ATTR_FIELD_DEVICE_COUNTER_SIZE: u64 = bit(4);

// ucp_worker_params_t.field_mask
pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = bit(0);
pub const UCP_WORKER_PARAM_FIELD_CPU_MASK: u64 = bit(1);
pub const UCP_WORKER_PARAM_FIELD_EVENTS: u64 = bit(2);
pub const UCP_WORKER_PARAM_FIELD_USER_DATA: u64 = bit(3);
pub const UCP_WORKER_PARAM_FIELD_EVENT_FD: u64 = bit(4);
pub const UCP_WORKER_PARAM_FIELD_FLAGS: u64 = bit(5);
pub const UCP_WORKER_PARAM_FIELD_NAME: u64 = bit(6);
pub const UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT: u64 = bit(7);
pub const UCP_WORKER_PARAM_FIELD_CLIENT_ID: u64 = bit(8);
pub const UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK: u64 = bit(0);

// ucp_worker_attr_t.field_mask
pub const UCP_WORKER_ATTR_FIELD_THREAD_MODE: u64 = bit(0);
pub const UCP_WORKER_ATTR_FIELD_ADDRESS: u64 = bit(1);
pub const UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS: u64 = bit(2);
pub const UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER: u64 = bit(3);
pub const UCP_WORKER_ATTR_FIELD_NAME: u64 = bit(4);
pub const UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING: u64 = bit(5);
pub const UCP_WORKER_ADDRESS_FLAG_NET_ONLY: u32 = 1;

// ucp_ep_params_t.field_mask
pub const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = bit(0);
pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = bit(1);
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = bit(2);
pub const UCP_EP_PARAM_FIELD_USER_DATA: u64 = bit(3);
pub const UCP_EP_PARAM_FIELD_SOCK_ADDR: u64 = bit(4);
pub const UCP_EP_PARAM_FIELD_FLAGS: u64 = bit(5);
pub const UCP_EP_PARAM_FIELD_CONN_REQUEST: u64 = bit(6);
pub const UCP_EP_PARAM_FIELD_NAME: u64 = bit(7);
pub const UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR: u64 = bit(8);
pub const UCP_ERR_HANDLING_MODE_NONE: c_uint = 0;
pub const UCP_ERR_HANDLING_MODE_PEER: c_uint = 1;
pub const UCP_EP_PARAMS_FLAGS_CLIENT_SERVER: c_uint = 1;
pub const UCP_EP_PARAMS_FLAGS_NO_LOOPBACK: c_uint = 2;
pub const UCP_EP_CLOSE_MODE_FORCE: c_uint = 0;
pub const UCP_EP_CLOSE_MODE_FLUSH: c_uint = 1;

// ucp_mem_map_params_t.field_mask and flags
pub const UCP_MEM_MAP_PARAM_FIELD_ADDRESS: u64 = bit(0);
pub const UCP_MEM_MAP_PARAM_FIELD_LENGTH: u64 = bit(1);
pub const UCP_MEM_MAP_PARAM_FIELD_FLAGS: u64 = bit(2);
pub const UCP_MEM_MAP_PARAM_FIELD_PROT: u64 = bit(3);
pub const UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE: u64 = bit(4);
/// UCX 1.14: `exported_memh_buffer`, after `memory_type`.
pub const UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER: u64 = bit(5);
pub const UCP_MEM_MAP_NONBLOCK: c_uint = 1;
pub const UCP_MEM_MAP_ALLOCATE: c_uint = 2;
pub const UCP_MEM_MAP_FIXED: c_uint = 4;
/// UCX 1.19: the remote key may be used with every peer's mapping of the same layout.
pub const UCP_MEM_MAP_SYMMETRIC_RKEY: c_uint = 8;
/// UCX 1.20: lock the pages in memory (`mlock`).
pub const UCP_MEM_MAP_LOCK: c_uint = 16;
pub const UCP_MEM_MAP_PROT_LOCAL_READ: c_uint = 1 << 0;
pub const UCP_MEM_MAP_PROT_LOCAL_WRITE: c_uint = 1 << 1;
pub const UCP_MEM_MAP_PROT_REMOTE_READ: c_uint = 1 << 8;
pub const UCP_MEM_MAP_PROT_REMOTE_WRITE: c_uint = 1 << 9;
pub const UCP_MEM_ATTR_FIELD_ADDRESS: u64 = bit(0);
pub const UCP_MEM_ATTR_FIELD_LENGTH: u64 = bit(1);
pub const UCP_MEM_ATTR_FIELD_MEM_TYPE: u64 = bit(2);

// ucp_dt_type
pub const UCP_DATATYPE_CONTIG: u64 = 0;
pub const UCP_DATATYPE_STRIDED: u64 = 1;
pub const UCP_DATATYPE_IOV: u64 = 2;
/// UCX 1.20: scatter-gather list (`ucp_dt_local_sgl_t`).
pub const UCP_DATATYPE_SGL: u64 = 4;
pub const UCP_DATATYPE_GENERIC: u64 = 7;
pub const UCP_DATATYPE_SHIFT: u32 = 3;
pub const UCP_DATATYPE_CLASS_MASK: u64 = 7;

// ucp_op_attr_t
pub const UCP_OP_ATTR_FIELD_REQUEST: u32 = 1 << 0;
pub const UCP_OP_ATTR_FIELD_CALLBACK: u32 = 1 << 1;
pub const UCP_OP_ATTR_FIELD_USER_DATA: u32 = 1 << 2;
pub const UCP_OP_ATTR_FIELD_DATATYPE: u32 = 1 << 3;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;
pub const UCP_OP_ATTR_FIELD_REPLY_BUFFER: u32 = 1 << 5;
pub const UCP_OP_ATTR_FIELD_MEMORY_TYPE: u32 = 1 << 6;
pub const UCP_OP_ATTR_FIELD_RECV_INFO: u32 = 1 << 7;
pub const UCP_OP_ATTR_FIELD_MEMH: u32 = 1 << 8;
/// UCX 1.20 (scatter-gather): `remote_datatype`, `remote`, `remote_count` after `memh`.
pub const UCP_OP_ATTR_FIELD_REMOTE_DATATYPE: u32 = 1 << 9;
pub const UCP_OP_ATTR_FIELD_REMOTE: u32 = 1 << 10;
pub const UCP_OP_ATTR_FIELD_REMOTE_COUNT: u32 = 1 << 11;
pub const UCP_OP_ATTR_FLAG_NO_IMM_CMPL: u32 = 1 << 16;
pub const UCP_OP_ATTR_FLAG_FAST_CMPL: u32 = 1 << 17;
pub const UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL: u32 = 1 << 18;
pub const UCP_OP_ATTR_FLAG_MULTI_SEND: u32 = 1 << 19;
/// Every `op_attr_mask` bit of UCX 1.13 (the remote scatter-gather fields of 1.20 are
/// checked apart: they name fields a 1.13 client's struct does not have).
pub const UCP_OP_ATTR_KNOWN: u32 = 0x1ff | (0xf << 16);

// AM (old API)
pub const UCP_AM_FLAG_WHOLE_MSG: u32 = 1;
pub const UCP_AM_FLAG_PERSISTENT_DATA: u32 = 2;
pub const UCP_AM_SEND_FLAG_REPLY: c_uint = 1;
pub const UCP_AM_SEND_FLAG_EAGER: c_uint = 2;
pub const UCP_AM_SEND_FLAG_RNDV: c_uint = 4;
pub const UCP_CB_PARAM_FLAG_DATA: c_uint = 1;

pub type RequestInitCb = unsafe extern "C" fn(*mut c_void);
pub type SendCb = unsafe extern "C" fn(*mut c_void, Status);
pub type SendNbxCb = unsafe extern "C" fn(*mut c_void, Status, *mut c_void);
pub type TagRecvCb = unsafe extern "C" fn(*mut c_void, Status, *mut TagRecvInfo);
pub type TagRecvNbxCb = unsafe extern "C" fn(*mut c_void, Status, *const TagRecvInfo, *mut c_void);
pub type ErrHandlerCb = unsafe extern "C" fn(*mut c_void, *mut c_void, Status);
pub type AmCb =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void, c_uint) -> Status;

/// `ucp_params_t` (80 bytes).
#[repr(C)]
pub struct UcpParams {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: Option<RequestInitCb>,
    pub request_cleanup: Option<RequestInitCb>,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

/// `UCP_ENTITY_NAME_MAX`.
pub const UCP_ENTITY_NAME_MAX: usize = 32;

/// `ucp_context_attr_t` (64 bytes).
#[repr(C)]
pub struct ContextAttr {
    pub field_mask: u64,
    pub request_size: usize,
    pub thread_mode: c_uint,
    pub memory_types: u64,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
}

/// `ucp_worker_params_t` (200 bytes; `ucs_cpu_set_t` is 1024 bits).
#[repr(C)]
pub struct WorkerParams {
    pub field_mask: u64,
    pub thread_mode: c_uint,
    pub cpu_mask: [u64; 16],
    pub events: c_uint,
    pub user_data: *mut c_void,
    pub event_fd: c_int,
    pub flags: u64,
    pub name: *const c_char,
    pub am_alignment: usize,
    pub client_id: u64,
}

/// `ucp_worker_attr_t` (80 bytes).
#[repr(C)]
pub struct WorkerAttr {
    pub field_mask: u64,
    pub thread_mode: c_uint,
    pub address_flags: u32,
    pub address: *mut c_void,
    pub address_length: usize,
    pub max_am_header: usize,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
    pub max_debug_string: usize,
}

/// `ucp_err_handler_t`.
#[repr(C)]
pub struct ErrHandler {
    pub cb: Option<ErrHandlerCb>,
    pub arg: *mut c_void,
}

/// `ucs_sock_addr_t`.
#[repr(C)]
pub struct SockAddr {
    pub addr: *const c_void,
    pub addrlen: u32,
}

/// `ucp_ep_params_t` (104 bytes).
#[repr(C)]
pub struct EpParams {
    pub field_mask: u64,
    pub address: *const c_void,
    pub err_mode: c_uint,
    pub err_handler: ErrHandler,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub sockaddr: SockAddr,
    pub conn_request: *mut c_void,
    pub name: *const c_char,
    pub local_sockaddr: SockAddr,
}

/// `ucp_tag_recv_info_t` (16 bytes, no mask).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TagRecvInfo {
    pub sender_tag: Tag,
    pub length: usize,
}

/// `ucp_dt_iov_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DtIov {
    pub buffer: *mut c_void,
    pub length: usize,
}

/// The fields UCX 1.20 added at the end of `ucp_request_param_t` (read only from a client built
/// against 1.20 or later that sets their `UCP_OP_ATTR_FIELD_REMOTE*` bits).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RequestParamRemote {
    pub remote_datatype: Datatype,
    pub remote: *const c_void,
    pub remote_count: usize,
}

/// `ucp_dt_local_sgl_t` (UCX 1.20).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DtLocalSgl {
    pub field_mask: u64,
    pub buffers: *const *const c_void,
    pub lengths: *const usize,
    pub memhs: *const *mut c_void,
    pub counts: *const usize,
    pub strides: *const usize,
}

/// `ucp_dt_remote_sgl_t` (UCX 1.20).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DtRemoteSgl {
    pub field_mask: u64,
    pub remote_addrs: *const u64,
    pub lengths: *const usize,
    pub rkeys: *const *mut c_void,
}

/// `ucp_generic_dt_ops_t` (six callbacks, no mask).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GenericDtOps {
    pub start_pack: Option<unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void>,
    pub start_unpack: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void>,
    pub packed_size: Option<unsafe extern "C" fn(*mut c_void) -> usize>,
    pub pack: Option<unsafe extern "C" fn(*mut c_void, usize, *mut c_void, usize) -> usize>,
    pub unpack: Option<unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize) -> Status>,
    pub finish: Option<unsafe extern "C" fn(*mut c_void)>,
}

/// The `cb` union of `ucp_request_param_t`: one function pointer, typed by the operation.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ParamCb {
    pub send: Option<SendNbxCb>,
    pub recv: Option<TagRecvNbxCb>,
    pub recv_stream: Option<StreamRecvNbxCb>,
    pub raw: *const c_void,
}

/// `ucp_request_param_t` (72 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RequestParam {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: ParamCb,
    pub datatype: Datatype,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_uint,
    /// `recv_info` union: `size_t *length` or `ucp_tag_recv_info_t *tag_info`.
    pub recv_info: *mut c_void,
    pub memh: *mut c_void,
}

/// `ucp_mem_map_params_t` (40 bytes).
#[repr(C)]
pub struct MemMapParams {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: c_uint,
}

/// `ucp_mem_attr_t` (32 bytes).
#[repr(C)]
pub struct MemAttr {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub mem_type: c_uint,
}

const _: () = {
    assert!(std::mem::size_of::<UcpParams>() == 80);
    assert!(std::mem::size_of::<ContextAttr>() == 64);
    assert!(std::mem::size_of::<WorkerParams>() == 200);
    assert!(std::mem::size_of::<WorkerAttr>() == 80);
    assert!(std::mem::size_of::<EpParams>() == 104);
    assert!(std::mem::size_of::<RequestParam>() == 72);
    assert!(std::mem::size_of::<TagRecvInfo>() == 16);
    assert!(std::mem::size_of::<GenericDtOps>() == 48);
    assert!(std::mem::size_of::<MemMapParams>() == 40);
    assert!(std::mem::size_of::<MemAttr>() == 32);
    assert!(std::mem::size_of::<DtIov>() == 16);
    assert!(std::mem::size_of::<RequestParam>() + std::mem::size_of::<RequestParamRemote>() == 96);
    assert!(std::mem::size_of::<DtLocalSgl>() == 48);
    assert!(std::mem::size_of::<DtRemoteSgl>() == 32);
};

/// A status as a `ucs_status_ptr_t` (`UCS_STATUS_PTR`).
pub fn status_ptr(s: Status) -> StatusPtr {
    s as isize as *mut c_void
}

/// `UCS_PTR_IS_ERR`.
pub fn ptr_is_err(p: StatusPtr) -> bool {
    (p as usize) >= (UCS_ERR_LAST as isize as usize)
}
