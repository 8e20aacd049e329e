//! C types of client/server connections and endpoint queries (`ucp.h`, `ucp_def.h`):
//! listener parameters and attributes, connection requests, `ucp_ep_attr_t`.

use super::{bit, SockAddr};
use std::ffi::{c_uint, c_void};

// ucp_listener_params_t.field_mask
pub const UCP_LISTENER_PARAM_FIELD_SOCK_ADDR: u64 = bit(0);
pub const UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER: u64 = bit(1);
pub const UCP_LISTENER_PARAM_FIELD_CONN_HANDLER: u64 = bit(2);
// ucp_listener_attr_t.field_mask
pub const UCP_LISTENER_ATTR_FIELD_SOCKADDR: u64 = bit(0);
// ucp_conn_request_attr_t.field_mask
pub const UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR: u64 = bit(0);
pub const UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID: u64 = bit(1);
// ucp_ep_params_t.flags (beyond CLIENT_SERVER and NO_LOOPBACK)
pub const UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID: c_uint = 4;
// ucp_ep_attr_t.field_mask
pub const UCP_EP_ATTR_FIELD_NAME: u64 = bit(0);
pub const UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR: u64 = bit(1);
pub const UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR: u64 = bit(2);
pub const UCP_EP_ATTR_FIELD_TRANSPORTS: u64 = bit(3);
pub const UCP_EP_ATTR_FIELD_USER_DATA: u64 = bit(4);
/// `ucp_ep_close_flags_t`.
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1;
/// `UCP_ERR_HANDLING_MODE_FAILOVER` (UCX 1.22).
pub const UCP_ERR_HANDLING_MODE_FAILOVER: c_uint = 2;

/// `ucp_listener_accept_callback_t`.
pub type AcceptCb = unsafe extern "C" fn(*mut c_void, *mut c_void);
/// `ucp_listener_conn_callback_t`.
pub type ConnCb = unsafe extern "C" fn(*mut c_void, *mut c_void);

/// `ucp_listener_accept_handler_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AcceptHandler {
    pub cb: Option<AcceptCb>,
    pub arg: *mut c_void,
}

/// `ucp_listener_conn_handler_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ConnHandler {
    pub cb: Option<ConnCb>,
    pub arg: *mut c_void,
}

/// `ucp_listener_params_t` (56 bytes).
#[repr(C)]
pub struct ListenerParams {
    pub field_mask: u64,
    pub sockaddr: SockAddr,
    pub accept_handler: AcceptHandler,
    pub conn_handler: ConnHandler,
}

/// `struct sockaddr_storage` (128 bytes, 8-aligned).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct SockaddrStorage(pub [u8; 128]);

/// `ucp_listener_attr_t` (136 bytes).
#[repr(C)]
pub struct ListenerAttr {
    pub field_mask: u64,
    pub sockaddr: SockaddrStorage,
}

/// `ucp_conn_request_attr_t` (144 bytes).
#[repr(C)]
pub struct ConnRequestAttr {
    pub field_mask: u64,
    pub client_address: SockaddrStorage,
    pub client_id: u64,
}

/// `ucp_transport_entry_t` (UCX 1.22).
#[repr(C)]
pub struct TransportEntry {
    pub transport_name: *const std::ffi::c_char,
    pub device_name: *const std::ffi::c_char,
}

/// `ucp_transports_t` (UCX 1.22): an array the caller provides, `entry_size` bytes apart.
#[repr(C)]
pub struct Transports {
    pub entries: *mut TransportEntry,
    pub num_entries: c_uint,
    pub entry_size: usize,
}

/// `ucp_ep_attr_t`: 296 bytes in UCX 1.13 (name and both socket addresses); UCX 1.22 appends
/// `transports` and `user_data` (328 bytes), read and written only when their bits are set.
#[repr(C)]
pub struct EpAttr {
    pub field_mask: u64,
    pub name: [std::ffi::c_char; super::UCP_ENTITY_NAME_MAX],
    pub local_sockaddr: SockaddrStorage,
    pub remote_sockaddr: SockaddrStorage,
    pub transports: Transports,
    pub user_data: *mut c_void,
}

const _: () = {
    assert!(std::mem::size_of::<ListenerParams>() == 56);
    assert!(std::mem::size_of::<ListenerAttr>() == 136);
    assert!(std::mem::size_of::<ConnRequestAttr>() == 144);
    assert!(std::mem::size_of::<EpAttr>() == 328);
    assert!(std::mem::offset_of!(EpAttr, transports) == 296);
};
