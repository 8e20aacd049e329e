//! # libuct.so.0 — UCX's transport API in C over rucx's `uct` crate
//!
//! UCX 1.13's `uct/api/uct.h` for programs written against it (UCX's `uct_hello_world`,
//! `ucx_perftest`'s uct tests): components and memory domains ([`component`]), memory
//! registration, allocation and remote keys ([`mem`]), workers ([`worker`]), interfaces
//! ([`iface`]) and endpoints with their data path ([`ep`]). The handles keep UCX's layouts
//! where the headers reach into them: an interface starts with UCX's operations table
//! ([`ops`]), an endpoint with its interface, a worker with the progress queue
//! `uct_worker_progress` walks inline. The C types are declared in [`ffi`].
//!
//! Every exported function runs through [`guard`]: bad input gives an error status and one
//! log line, and a panic never crosses into C. The connection-manager API (`uct_cm_*`,
//! listeners, socket-address interfaces) is not offered: those calls answer
//! `UCS_ERR_UNSUPPORTED`, and no component announces `UCT_COMPONENT_FLAG_CM`.

#![warn(missing_docs)]

pub mod addr_slot;
pub mod component;
pub mod ep;
pub mod ffi;
pub mod guard;
pub mod handle;
pub mod iface;
pub mod mem;
pub mod ops;
pub mod rma;
pub mod sink;
pub mod worker;

use ffi::*;
use std::ffi::c_void;

/// Defines exported functions of the connection-manager API that answer
/// `UCS_ERR_UNSUPPORTED` with a log line (arguments are ignored).
macro_rules! not_offered {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: the connection-manager API is not offered (`UCS_ERR_UNSUPPORTED`).")]
            #[no_mangle]
            pub extern "C" fn $name() -> Status {
                guard::ffi(stringify!($name), UCS_ERR_UNSUPPORTED, || {
                    guard::refuse(
                        stringify!($name),
                        UCS_ERR_UNSUPPORTED,
                        "rucx's libuct has no connection managers or socket-address interfaces",
                    )
                })
            }
        )*
    };
}

not_offered!(
    uct_cm_open,
    uct_cm_query,
    uct_cm_config_read,
    uct_cm_client_ep_conn_notify,
    uct_listener_create,
    uct_listener_reject,
    uct_listener_query,
    uct_iface_accept,
    uct_iface_reject,
    uct_ep_connect,
    uct_ep_disconnect,
);

/// `void uct_cm_close(uct_cm_h)`: nothing to close (no connection manager is ever opened).
#[no_mangle]
pub extern "C" fn uct_cm_close(_cm: *mut c_void) {}

/// `void uct_listener_destroy(uct_listener_h)`: nothing to destroy (none is ever created).
#[no_mangle]
pub extern "C" fn uct_listener_destroy(_listener: *mut c_void) {}

/// `ucs_status_t uct_ep_check(const uct_ep_h, unsigned flags, uct_completion_t *)`: not
/// offered (no interface announces `UCT_IFACE_FLAG_EP_CHECK`; rucx's transports report a
/// peer's failure to the error handler by themselves).
#[no_mangle]
pub extern "C" fn uct_ep_check(_ep: *mut c_void, _flags: u32, _comp: *mut c_void) -> Status {
    guard::refuse(
        "uct_ep_check",
        UCS_ERR_UNSUPPORTED,
        "no interface announces UCT_IFACE_FLAG_EP_CHECK",
    )
}
