//! The boundary with C: every exported function runs its body through [`ffi`] (or [`hot`] on
//! the data path), which starts logging on first use and turns a Rust panic into an error
//! status and one log line, so a panic never unwinds into C. rucx errors map to UCX statuses
//! here.

use crate::ffi::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;
use ucs::{Error, Outcome};

static LOG: Once = Once::new();

/// Starts logging once: `RUCX_LOG_LEVEL`, else `UCX_LOG_LEVEL` (same names; default `warn`).
#[inline(always)]
pub fn init_logging() {
    if !LOG.is_completed() {
        start_logging();
    }
}

#[cold]
#[inline(never)]
fn start_logging() {
    LOG.call_once(|| {
        let level = std::env::var("RUCX_LOG_LEVEL")
            .or_else(|_| std::env::var("UCX_LOG_LEVEL"))
            .unwrap_or_else(|_| "warn".into());
        let (filter, err) = ucs::log::filter_for(&level);
        let ok = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .try_init()
            .is_ok();
        if let (true, Some(err)) = (ok, err) {
            tracing::warn!("{err}; using warn");
        }
    });
}

/// Runs an exported function's body with logging started and panics caught (`on_panic` is
/// returned after one log line).
#[inline(always)]
pub fn ffi<R>(name: &str, on_panic: R, body: impl FnOnce() -> R) -> R {
    init_logging();
    hot(name, on_panic, body)
}

/// [`ffi`] for calls on objects an earlier call made (logging is started): no logging check.
#[inline(always)]
pub fn hot<R>(name: &str, on_panic: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(p) => {
            panicked(name, p);
            on_panic
        }
    }
}

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
#[cold]
#[inline(never)]
pub fn fail(name: &str, e: &Error) -> Status {
    refuse(name, status_of(e), e)
}

/// Refuses a mask with bits this library does not know.
pub fn check_mask(name: &str, what: &str, mask: u64, known: u64) -> Result<(), Status> {
    if mask & !known != 0 {
        return Err(refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            format!(
                "{what} has unknown bits {:#x} (known: {known:#x})",
                mask & !known
            ),
        ));
    }
    Ok(())
}

/// Copies `text` into a fixed C name field, truncated and NUL-terminated.
pub fn put_name(field: &mut [std::ffi::c_char], text: &str) {
    field.fill(0);
    let room = field.len().saturating_sub(1);
    for (d, s) in field.iter_mut().zip(text.bytes().take(room)) {
        *d = s as std::ffi::c_char;
    }
}

/// A C string argument as text; `None` for NULL.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string.
pub unsafe fn text<'a>(p: *const std::ffi::c_char) -> Option<std::borrow::Cow<'a, str>> {
    // SAFETY: forwarded from the caller.
    (!p.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy())
}

/// The UCX status of an operation's outcome.
#[inline]
pub fn outcome<T>(r: ucs::Result<Outcome<T>>, name: &str) -> Status {
    match r {
        Ok(Outcome::Done(_)) => UCS_OK,
        Ok(Outcome::InProgress) => UCS_INPROGRESS,
        Ok(Outcome::NoResource) => UCS_ERR_NO_RESOURCE,
        Err(e) => fail(name, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_errors_and_names_are_terminated() {
        assert_eq!(
            ffi("t", UCS_ERR_IO_ERROR, || -> Status { panic!("boom") }),
            UCS_ERR_IO_ERROR
        );
        assert_eq!(status_of(&Error::Canceled), UCS_ERR_CANCELED);
        let mut f = [1 as std::ffi::c_char; 4];
        put_name(&mut f, "posix");
        assert_eq!(f, [b'p' as _, b'o' as _, b's' as _, 0]);
        assert!(check_mask("t", "m", 0b100, 0b11).is_err());
    }
}
