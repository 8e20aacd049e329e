//! # rucx-capi — libucp.so.0 for C programs
//!
//! UCX's public ucp C API (`ucp/api/ucp.h`, `ucp_compat.h`: every function of UCX 1.13 and
//! those 1.14-1.22 added, with the parameter fields of 1.22; `ucp_get_version` says 1.22) on top of rucx's `ucp` crate, so MPI
//! libraries built against UCX (Debian's Open MPI 4.1 and MPICH 4.0), UCX's example programs
//! and `io_demo` run on rucx with nothing changed but `LD_LIBRARY_PATH`. `capi/build.sh OUT_DIR` builds `libucp.so.0` (this crate),
//! `libucs.so.0` (`capi/ucs`) and `libucm.so.0` (`capi/ucm`) into one folder.
//!
//! The C types are declared in [`ffi`] from the headers (nothing of UCX is copied). Every
//! exported function runs through [`guard::ffi`]: bad input gives `UCS_ERR_INVALID_PARAM` /
//! `UCS_ERR_UNSUPPORTED` and one log line, and a panic never crosses into C. Requests, their
//! memory layout and callbacks are described in [`request`]; datatypes in [`datatype`].

#![warn(missing_docs)]

pub mod am;
pub mod amo;
pub mod compat;
pub mod config;
pub mod config_vars;
pub mod conn;
pub mod context;
pub mod ctext;
pub mod datatype;
pub mod ep;
pub mod ffi;
pub mod guard;
pub mod handles;
pub mod lock;
pub mod mem;
pub mod memtype;
pub mod param;
pub mod query;
pub mod request;
pub mod rma;
pub mod stream;
pub mod tag;
pub mod wakeup;
pub mod worker;
pub mod worker_ext;

/// UCX's status codes and `ucs_status_string`, compiled from `capi/ucs` (the source of
/// libucs.so.0) so libucp exports `ucs_status_string` too.
#[path = "../ucs/src/lib.rs"]
pub mod ucs_codes;
