//! Text handed to C: names copied into fixed `char` arrays, text written to a `FILE *`.

use crate::ffi::*;
use std::ffi::{c_char, c_void};

/// Longest request description `ucp_request_query` writes (`max_debug_string` of
/// `ucp_worker_query`).
pub const MAX_INFO_STRING: usize = 256;

/// Writes text to a C `FILE *`.
///
/// # Safety
/// `stream` NULL or an open `FILE *`.
pub unsafe fn write_to(stream: *mut libc::FILE, text: &str) {
    if stream.is_null() {
        return;
    }
    // SAFETY: our bytes to the caller's open stream.
    unsafe { libc::fwrite(text.as_ptr() as *const c_void, 1, text.len(), stream) };
}

/// Copies a name into a fixed C array, truncated and NUL-terminated.
pub fn write_name(dst: &mut [c_char; UCP_ENTITY_NAME_MAX], name: &str) {
    let b = name.as_bytes();
    let n = b.len().min(UCP_ENTITY_NAME_MAX - 1);
    for (d, s) in dst.iter_mut().zip(&b[..n]) {
        *d = *s as c_char;
    }
    dst[n] = 0;
}
