//! # libucs.so.0 — the part of UCX's `ucs` library that MPI libraries import
//!
//! Open MPI's UCX components and MPICH import one function from libucs: `ucs_status_string`.
//! This crate defines UCX 1.13's status codes (`ucs/type/status.h`: a one-byte enum) and that
//! function. libucp (the `rucx-capi` crate) links this crate too and so exports the same symbol,
//! which clients that only load libucp find there.

#![warn(missing_docs)]

use std::ffi::{c_char, CStr};

pub mod io_demo;

/// `ucs_status_t`: UCX's status code, a packed (one-byte) signed enum.
pub type Status = i8;

/// The status codes of UCX 1.13 (`ucs/type/status.h`), by their C names.
#[allow(missing_docs)]
pub mod codes {
    use super::Status;
    pub const UCS_OK: Status = 0;
    pub const UCS_INPROGRESS: Status = 1;
    pub const UCS_ERR_NO_MESSAGE: Status = -1;
    pub const UCS_ERR_NO_RESOURCE: Status = -2;
    pub const UCS_ERR_IO_ERROR: Status = -3;
    pub const UCS_ERR_NO_MEMORY: Status = -4;
    pub const UCS_ERR_INVALID_PARAM: Status = -5;
    pub const UCS_ERR_UNREACHABLE: Status = -6;
    pub const UCS_ERR_INVALID_ADDR: Status = -7;
    pub const UCS_ERR_NOT_IMPLEMENTED: Status = -8;
    pub const UCS_ERR_MESSAGE_TRUNCATED: Status = -9;
    pub const UCS_ERR_NO_PROGRESS: Status = -10;
    pub const UCS_ERR_BUFFER_TOO_SMALL: Status = -11;
    pub const UCS_ERR_NO_ELEM: Status = -12;
    pub const UCS_ERR_SOME_CONNECTS_FAILED: Status = -13;
    pub const UCS_ERR_NO_DEVICE: Status = -14;
    pub const UCS_ERR_BUSY: Status = -15;
    pub const UCS_ERR_CANCELED: Status = -16;
    pub const UCS_ERR_SHMEM_SEGMENT: Status = -17;
    pub const UCS_ERR_ALREADY_EXISTS: Status = -18;
    pub const UCS_ERR_OUT_OF_RANGE: Status = -19;
    pub const UCS_ERR_TIMED_OUT: Status = -20;
    pub const UCS_ERR_EXCEEDS_LIMIT: Status = -21;
    pub const UCS_ERR_UNSUPPORTED: Status = -22;
    pub const UCS_ERR_REJECTED: Status = -23;
    pub const UCS_ERR_NOT_CONNECTED: Status = -24;
    pub const UCS_ERR_CONNECTION_RESET: Status = -25;
    pub const UCS_ERR_FIRST_LINK_FAILURE: Status = -40;
    pub const UCS_ERR_LAST_LINK_FAILURE: Status = -59;
    pub const UCS_ERR_FIRST_ENDPOINT_FAILURE: Status = -60;
    pub const UCS_ERR_ENDPOINT_TIMEOUT: Status = -80;
    pub const UCS_ERR_LAST_ENDPOINT_FAILURE: Status = -89;
    pub const UCS_ERR_LAST: Status = -100;
}

/// A short English description of a status code (NUL-terminated, static).
pub fn status_cstr(status: Status) -> &'static CStr {
    use codes::*;
    match status {
        UCS_OK => c"Success",
        UCS_INPROGRESS => c"Operation in progress",
        UCS_ERR_NO_MESSAGE => c"No pending message",
        UCS_ERR_NO_RESOURCE => c"No resources are available to initiate the operation",
        UCS_ERR_IO_ERROR => c"Input/output error",
        UCS_ERR_NO_MEMORY => c"Out of memory",
        UCS_ERR_INVALID_PARAM => c"Invalid parameter",
        UCS_ERR_UNREACHABLE => c"Destination is unreachable",
        UCS_ERR_INVALID_ADDR => c"Address not valid",
        UCS_ERR_NOT_IMPLEMENTED => c"Function not implemented",
        UCS_ERR_MESSAGE_TRUNCATED => c"Message truncated",
        UCS_ERR_NO_PROGRESS => c"No progress",
        UCS_ERR_BUFFER_TOO_SMALL => c"Provided buffer is too small",
        UCS_ERR_NO_ELEM => c"No such element",
        UCS_ERR_SOME_CONNECTS_FAILED => c"Failed to connect some of the requested endpoints",
        UCS_ERR_NO_DEVICE => c"No such device",
        UCS_ERR_BUSY => c"Device is busy",
        UCS_ERR_CANCELED => c"Request canceled",
        UCS_ERR_SHMEM_SEGMENT => c"Shared memory error",
        UCS_ERR_ALREADY_EXISTS => c"Element already exists",
        UCS_ERR_OUT_OF_RANGE => c"Index out of range",
        UCS_ERR_TIMED_OUT => c"Operation timed out",
        UCS_ERR_EXCEEDS_LIMIT => c"User-defined limit was reached",
        UCS_ERR_UNSUPPORTED => c"Unsupported operation",
        UCS_ERR_REJECTED => c"Operation rejected by remote peer",
        UCS_ERR_NOT_CONNECTED => c"Endpoint is not connected",
        UCS_ERR_CONNECTION_RESET => c"Connection reset by remote peer",
        UCS_ERR_ENDPOINT_TIMEOUT => c"Endpoint timeout",
        s if (UCS_ERR_LAST_LINK_FAILURE..=UCS_ERR_FIRST_LINK_FAILURE).contains(&s) => {
            c"Link failure"
        }
        s if (UCS_ERR_LAST_ENDPOINT_FAILURE..=UCS_ERR_FIRST_ENDPOINT_FAILURE).contains(&s) => {
            c"Endpoint failure"
        }
        _ => c"Unknown error",
    }
}

/// `const char *ucs_status_string(ucs_status_t status)`: the description of a status code.
#[no_mangle]
pub extern "C" fn ucs_status_string(status: Status) -> *const c_char {
    status_cstr(status).as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_own_text() {
        assert_eq!(status_cstr(codes::UCS_OK).to_str().unwrap(), "Success");
        assert_eq!(
            status_cstr(codes::UCS_ERR_MESSAGE_TRUNCATED)
                .to_str()
                .unwrap(),
            "Message truncated"
        );
        assert_eq!(status_cstr(-45).to_str().unwrap(), "Link failure");
        assert_eq!(status_cstr(-70).to_str().unwrap(), "Endpoint failure");
        assert_eq!(status_cstr(-99).to_str().unwrap(), "Unknown error");
        // SAFETY: the function returns a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(ucs_status_string(codes::UCS_ERR_CANCELED)) };
        assert_eq!(s.to_str().unwrap(), "Request canceled");
    }
}
