//! C types of the query, datatype and memory-handle calls added after the MPI slice:
//! `ucp_lib_attr_t`, `ucp_request_attr_t`, `ucp_worker_address_attr_t`, endpoint performance,
//! `ucp_datatype_attr_t`, memory-handle packing and remote-key comparison.

use super::{bit, Status};
use std::ffi::{c_char, c_uint};

pub const UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL: u64 = bit(0);
pub const UCP_WORKER_ADDRESS_ATTR_FIELD_UID: u64 = bit(0);
pub const UCP_REQUEST_ATTR_FIELD_INFO_STRING: u64 = bit(0);
pub const UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE: u64 = bit(1);
pub const UCP_REQUEST_ATTR_FIELD_STATUS: u64 = bit(2);
pub const UCP_REQUEST_ATTR_FIELD_MEM_TYPE: u64 = bit(3);
pub const UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE: u64 = bit(0);
pub const UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME: u64 = bit(0);
pub const UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE: u64 = bit(0);
pub const UCP_DATATYPE_ATTR_FIELD_BUFFER: u64 = bit(1);
pub const UCP_DATATYPE_ATTR_FIELD_COUNT: u64 = bit(2);
pub const UCP_MEMH_PACK_PARAM_FIELD_FLAGS: u64 = bit(0);
pub const UCP_MEMH_PACK_FLAG_EXPORT: u64 = bit(0);

/// `ucp_lib_attr_t` (16 bytes).
#[repr(C)]
pub struct LibAttr {
    pub field_mask: u64,
    pub max_thread_level: c_uint,
}

/// `ucp_worker_address_attr_t` (16 bytes).
#[repr(C)]
pub struct WorkerAddressAttr {
    pub field_mask: u64,
    pub worker_uid: u64,
}

/// `ucp_request_attr_t` (32 bytes).
#[repr(C)]
pub struct RequestAttr {
    pub field_mask: u64,
    pub debug_string: *mut c_char,
    pub debug_string_size: usize,
    pub status: Status,
    pub mem_type: c_uint,
}

/// `ucp_ep_evaluate_perf_param_t` (16 bytes).
#[repr(C)]
pub struct EpPerfParam {
    pub field_mask: u64,
    pub message_size: usize,
}

/// `ucp_ep_evaluate_perf_attr_t` (16 bytes).
#[repr(C)]
pub struct EpPerfAttr {
    pub field_mask: u64,
    pub estimated_time: f64,
}

/// `ucp_datatype_attr_t` (32 bytes, UCX 1.14).
#[repr(C)]
pub struct DatatypeAttr {
    pub field_mask: u64,
    pub packed_size: usize,
    pub buffer: *const std::ffi::c_void,
    pub count: usize,
}

/// `ucp_memh_pack_params_t` (16 bytes, UCX 1.14).
#[repr(C)]
pub struct MemhPackParams {
    pub field_mask: u64,
    pub flags: u64,
}

/// `ucp_memh_buffer_release_params_t` and `ucp_rkey_compare_params_t` (a mask with no
/// fields defined yet).
#[repr(C)]
pub struct MaskOnly {
    pub field_mask: u64,
}

const _: () = {
    assert!(std::mem::size_of::<LibAttr>() == 16);
    assert!(std::mem::size_of::<RequestAttr>() == 32);
    assert!(std::mem::size_of::<DatatypeAttr>() == 32);
    assert!(std::mem::offset_of!(RequestAttr, mem_type) == 28);
};
