//! The boundary with C: every exported function runs its body through [`ffi`], which starts
//! logging on first use and turns a Rust panic into an error value and one log line (a panic
//! never unwinds into C). Errors of rucx map to UCX status codes here.

use crate::ffi::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;
use ucs::Error;

static LOG: Once = Once::new();

/// Starts logging once: the level comes from `RUCX_LOG_LEVEL`, or from `UCX_LOG_LEVEL` when
/// only that is set (same level names; default `warn`).
#[inline(always)]
pub fn init_logging() {
    if !LOG.is_completed() {
        start_logging();
    }
}

/// The first [`init_logging`].
#[cold]
#[inline(never)]
fn start_logging() {
    LOG.call_once(|| {
        let rucx = std::env::var("RUCX_LOG_LEVEL").ok();
        let ucx = std::env::var("UCX_LOG_LEVEL").ok();
        match (rucx, ucx) {
            (None, Some(level)) => {
                let (filter, err) = ucs::log::filter_for(&level);
                let ok = ucs::log::install(filter);
                if let (true, Some(err)) = (ok, err) {
                    tracing::warn!("UCX_LOG_LEVEL: {err}; using warn");
                }
            }
            _ => ucs::log::init(),
        }
    });
}

/// Runs an exported function's body: logging started, panics caught (logged once, `on_panic`
/// returned). Inlined into each exported function, so a call costs the `Once` check and no
/// extra frame.
#[inline(always)]
pub fn ffi<R>(name: &str, on_panic: R, body: impl FnOnce() -> R) -> R {
    init_logging();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(p) => {
            panicked(name, p);
            on_panic
        }
    }
}

/// [`ffi`] for calls that only work on a worker, endpoint or request an earlier call made
/// (`ucp_init` and `ucp_worker_create` started logging then): no logging check.
#[inline(always)]
pub fn ffi_hot<R>(name: &str, on_panic: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(p) => {
            panicked(name, p);
            on_panic
        }
    }
}

/// Logs a panic caught at the C boundary.
#[cold]
#[inline(never)]
fn panicked(name: &str, p: Box<dyn std::any::Any + Send>) {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    tracing::error!("{name}: internal error (panic: {what}); returning an error");
}

/// Logs one line for a refused call and gives its status.
#[cold]
#[inline(never)]
pub fn refuse(name: &str, status: Status, why: impl std::fmt::Display) -> Status {
    tracing::warn!("{name}: {why}");
    status
}

/// The UCX status for a rucx error.
pub fn status_of(e: &Error) -> Status {
    match e {
        Error::Unsupported(_) => UCS_ERR_UNSUPPORTED,
        Error::InvalidParam(_) | Error::Config(_) => UCS_ERR_INVALID_PARAM,
        Error::MessageTooLong { .. } => UCS_ERR_EXCEEDS_LIMIT,
        Error::Unreachable(_) => UCS_ERR_UNREACHABLE,
        Error::ConnectionReset(_) | Error::PeerFailure(_) => UCS_ERR_CONNECTION_RESET,
        Error::Timeout(_) => UCS_ERR_ENDPOINT_TIMEOUT,
        Error::RemoteAccess(_) | Error::Wire(_) | Error::Io { .. } => UCS_ERR_IO_ERROR,
        Error::Truncated { .. } => UCS_ERR_MESSAGE_TRUNCATED,
        Error::Canceled => UCS_ERR_CANCELED,
        Error::Busy(_) => UCS_ERR_BUSY,
        Error::NoDevice(_) => UCS_ERR_NO_DEVICE,
        Error::NoMemory(_) => UCS_ERR_NO_MEMORY,
    }
}

/// Logs a rucx error for `name` and gives its status.
pub fn fail(name: &str, e: &Error) -> Status {
    refuse(name, status_of(e), e)
}

/// Checks a field mask against the bits a call knows: unknown bits are refused.
#[inline]
pub fn check_mask(name: &str, what: &str, mask: u64, known: u64) -> Result<(), Status> {
    if mask & !known != 0 {
        return Err(unknown_bits(name, what, mask, known));
    }
    Ok(())
}

/// The refusal of a mask with bits this library does not know.
#[cold]
fn unknown_bits(name: &str, what: &str, mask: u64, known: u64) -> Status {
    refuse(
        name,
        UCS_ERR_INVALID_PARAM,
        format!(
            "{what} has unknown bits {:#x} (known: {known:#x})",
            mask & !known
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_errors() {
        let r = ffi("test_fn", -5i8, || -> i8 { panic!("boom") });
        assert_eq!(r, -5);
        assert_eq!(ffi("ok_fn", 0i8, || 7i8), 7);
    }

    #[test]
    fn masks_and_statuses() {
        assert!(check_mask("f", "m", 0b11, 0b11).is_ok());
        assert_eq!(
            check_mask("f", "m", 0b100, 0b11),
            Err(UCS_ERR_INVALID_PARAM)
        );
        assert_eq!(status_of(&Error::Canceled), UCS_ERR_CANCELED);
        assert_eq!(
            status_of(&Error::Truncated {
                len: 2,
                capacity: 1
            }),
            UCS_ERR_MESSAGE_TRUNCATED
        );
    }
}
