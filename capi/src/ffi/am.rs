//! C types of the current active-message API, streams and wake-up (`ucp.h`, `ucp_def.h`).

use super::{bit, Status};
use std::ffi::{c_uint, c_void};

// ucp_am_handler_param_t.field_mask
pub const UCP_AM_HANDLER_PARAM_FIELD_ID: u64 = bit(0);
pub const UCP_AM_HANDLER_PARAM_FIELD_FLAGS: u64 = bit(1);
pub const UCP_AM_HANDLER_PARAM_FIELD_CB: u64 = bit(2);
pub const UCP_AM_HANDLER_PARAM_FIELD_ARG: u64 = bit(3);
// ucp_am_recv_param_t.recv_attr
pub const UCP_AM_RECV_ATTR_FIELD_REPLY_EP: u64 = bit(0);
pub const UCP_AM_RECV_ATTR_FLAG_DATA: u64 = bit(16);
pub const UCP_AM_RECV_ATTR_FLAG_RNDV: u64 = bit(17);
/// `UCP_AM_SEND_FLAG_COPY_HEADER` (UCX 1.14): the header may be reused once the call returns.
pub const UCP_AM_SEND_FLAG_COPY_HEADER: u32 = 8;
/// `UCP_AM_SEND_REPLY` (the old name of `UCP_AM_SEND_FLAG_REPLY`).
pub const UCP_AM_SEND_REPLY: u32 = 1;

/// `ucp_stream_recv_flags_t`.
pub const UCP_STREAM_RECV_FLAG_WAITALL: u32 = 1;

// ucp_wakeup_event_t (worker params' `events`)
pub const UCP_WAKEUP_RMA: c_uint = 1 << 0;
pub const UCP_WAKEUP_AMO: c_uint = 1 << 1;
pub const UCP_WAKEUP_TAG_SEND: c_uint = 1 << 2;
pub const UCP_WAKEUP_TAG_RECV: c_uint = 1 << 3;
pub const UCP_WAKEUP_TX: c_uint = 1 << 10;
pub const UCP_WAKEUP_RX: c_uint = 1 << 11;
pub const UCP_WAKEUP_EDGE: c_uint = 1 << 16;

/// `ucp_am_recv_callback_t`.
pub type AmRecvCb = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    usize,
    *mut c_void,
    usize,
    *const AmRecvParam,
) -> Status;
/// `ucp_stream_recv_callback_t`.
pub type StreamRecvCb = unsafe extern "C" fn(*mut c_void, Status, usize);
/// `ucp_stream_recv_nbx_callback_t` (and `ucp_am_recv_data_nbx_callback_t`, the same shape).
pub type StreamRecvNbxCb = unsafe extern "C" fn(*mut c_void, Status, usize, *mut c_void);

/// `ucp_am_handler_param_t` (32 bytes).
#[repr(C)]
pub struct AmHandlerParam {
    pub field_mask: u64,
    pub id: c_uint,
    pub flags: u32,
    pub cb: Option<AmRecvCb>,
    pub arg: *mut c_void,
}

/// `ucp_am_recv_param_t` (16 bytes).
#[repr(C)]
pub struct AmRecvParam {
    pub recv_attr: u64,
    pub reply_ep: *mut c_void,
}

/// `ucp_stream_poll_ep_t` (40 bytes, no mask).
#[repr(C)]
pub struct StreamPollEp {
    pub ep: *mut c_void,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub reserved: [u8; 16],
}

const _: () = {
    assert!(std::mem::size_of::<AmHandlerParam>() == 32);
    assert!(std::mem::size_of::<AmRecvParam>() == 16);
    assert!(std::mem::size_of::<StreamPollEp>() == 40);
};
