//! Async contexts (`ucs_async_context_t`): the context a client gives `uct_worker_create`
//! and embeds in its own structures (`ucx_perftest` does, by value).
//!
//! rucx's transports make all their progress in the caller's progress calls (their sockets,
//! timers and wake-ups sit in each worker's own event set), so a context carries no handler of
//! its own: it records its mode and whether it is initialized, and `ucs_async_poll` has
//! nothing to dispatch. The record uses the first 16 bytes of the client's struct, which in
//! UCX 1.13 is far larger (a thread or signal context, a queue and a timestamp).

use crate::status::{codes::*, Status};
use std::ffi::c_void;

/// `UCS_ASYNC_MODE_LAST`: modes are SIGNAL 0, THREAD_SPINLOCK 1, THREAD_MUTEX 2, POLL 3.
pub const ASYNC_MODE_LAST: i32 = 4;

/// Marks an initialized context ("rucxasyn").
const MAGIC: u32 = 0x7275_6378;

/// The part of a client's `ucs_async_context_t` rucx uses.
#[repr(C)]
struct Context {
    magic: u32,
    mode: i32,
    /// Handlers registered on it (always 0: see the module's note).
    num_handlers: u32,
    _pad: u32,
}

/// `ucs_status_t ucs_async_context_init(ucs_async_context_t *async, ucs_async_mode_t mode)`.
///
/// # Safety
/// `async` must point to a client's `ucs_async_context_t` (at least 16 bytes).
#[no_mangle]
pub unsafe extern "C" fn ucs_async_context_init(async_ctx: *mut c_void, mode: i32) -> Status {
    if async_ctx.is_null() {
        tracing::warn!(target: "ucx", "ucs_async_context_init: NULL context");
        return UCS_ERR_INVALID_PARAM;
    }
    if !(0..ASYNC_MODE_LAST).contains(&mode) {
        tracing::warn!(target: "ucx", "ucs_async_context_init: unknown async mode {mode}");
        return UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's struct has room for the 16-byte record.
    unsafe {
        async_ctx.cast::<Context>().write_unaligned(Context {
            magic: MAGIC,
            mode,
            num_handlers: 0,
            _pad: 0,
        })
    };
    UCS_OK
}

/// `void ucs_async_context_cleanup(ucs_async_context_t *async)`: ends an initialized context;
/// anything else gets a log line.
///
/// # Safety
/// `async` must point to a context given to [`ucs_async_context_init`] (or be NULL).
#[no_mangle]
pub unsafe extern "C" fn ucs_async_context_cleanup(async_ctx: *mut c_void) {
    if async_ctx.is_null() {
        return;
    }
    // SAFETY: the caller's struct has room for the record.
    let mut c = unsafe { async_ctx.cast::<Context>().read_unaligned() };
    if c.magic != MAGIC {
        tracing::warn!(target: "ucx", "ucs_async_context_cleanup: context {async_ctx:p} is not initialized");
        return;
    }
    c.magic = 0;
    // SAFETY: as above.
    unsafe { async_ctx.cast::<Context>().write_unaligned(c) };
}

/// The size rucx allocates for a context made by [`ucs_async_context_create`].
const CREATED_SIZE: usize = 64;

/// `ucs_status_t ucs_async_context_create(ucs_async_mode_t mode, ucs_async_context_t **p)`.
///
/// # Safety
/// `async_p` must point to a pointer (or be NULL: refused).
#[no_mangle]
pub unsafe extern "C" fn ucs_async_context_create(mode: i32, async_p: *mut *mut c_void) -> Status {
    if async_p.is_null() {
        return UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: plain calloc.
    let p = unsafe { libc::calloc(1, CREATED_SIZE) };
    if p.is_null() {
        return UCS_ERR_NO_MEMORY;
    }
    // SAFETY: p has CREATED_SIZE bytes.
    let status = unsafe { ucs_async_context_init(p, mode) };
    if status != UCS_OK {
        // SAFETY: p came from calloc.
        unsafe { libc::free(p) };
        return status;
    }
    // SAFETY: checked non-null.
    unsafe { *async_p = p };
    UCS_OK
}

/// `void ucs_async_context_destroy(ucs_async_context_t *async)`.
///
/// # Safety
/// `async` must come from [`ucs_async_context_create`] (or be NULL).
#[no_mangle]
pub unsafe extern "C" fn ucs_async_context_destroy(async_ctx: *mut c_void) {
    if async_ctx.is_null() {
        return;
    }
    // SAFETY: forwarded from the caller; the memory came from calloc.
    unsafe {
        ucs_async_context_cleanup(async_ctx);
        libc::free(async_ctx);
    }
}

/// `void ucs_async_poll(ucs_async_context_t *async)`: dispatches the context's pending events
/// (a rucx context has none: see the module's note).
#[no_mangle]
pub extern "C" fn ucs_async_poll(_async_ctx: *mut c_void) {}

/// The mode of an initialized context, `None` for anything else.
///
/// # Safety
/// `async_ctx` must be NULL or point to at least 16 readable bytes.
pub unsafe fn mode_of(async_ctx: *const c_void) -> Option<i32> {
    if async_ctx.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees 16 readable bytes.
    let c = unsafe { async_ctx.cast::<Context>().read_unaligned() };
    (c.magic == MAGIC).then_some(c.mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_initialize_check_their_mode_and_clean_up() {
        let mut storage = [0u64; 32];
        let p = storage.as_mut_ptr().cast::<c_void>();
        // SAFETY: 256 bytes of storage.
        unsafe {
            assert_eq!(ucs_async_context_init(p, 7), UCS_ERR_INVALID_PARAM);
            assert_eq!(ucs_async_context_init(p, 1), UCS_OK);
            assert_eq!(mode_of(p), Some(1));
            ucs_async_context_cleanup(p);
            assert_eq!(mode_of(p), None);
            let mut created = std::ptr::null_mut();
            assert_eq!(ucs_async_context_create(3, &mut created), UCS_OK);
            assert_eq!(mode_of(created), Some(3));
            ucs_async_context_destroy(created);
            assert_eq!(
                ucs_async_context_create(3, std::ptr::null_mut()),
                UCS_ERR_INVALID_PARAM
            );
        }
    }
}
