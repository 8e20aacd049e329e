//! The conformance tests, generic over a [`Fixture`]. Each is a plain function; the
//! `uct_conformance_tests!` macro turns them into `#[test]`s for one fixture type.

use super::fixture::{
    local_mem, pattern, progress_until, remote_mem, run_op, Fixture, Recorder, RemoteMem, WATCHDOG,
};
use crate::caps::{AtomicOps, EventFlags, IfaceAttr, IfaceFlags};
use crate::ep::{AtomicOp, Endpoint, AM_ID_MAX};
use crate::iface::Iface;
use crate::md::{Iov, MemHandle, MemoryDomain, RemoteKey};
use crate::{CompletionId, PendingId, TagRecvId};
use std::fmt::Debug;
use std::ptr::NonNull;
use std::time::Instant;
use ucs::{Error, Outcome, Result};

/// Largest buffer a test allocates for one operation; limits above it are tested up to it.
const CAP: usize = 1 << 20;

macro_rules! skip {
    ($($t:tt)*) => {{
        eprintln!("conformance: skipped: {}", format!($($t)*));
        return;
    }};
}

fn open<F: Fixture>() -> Option<F> {
    match F::new() {
        Ok(f) => Some(f),
        Err(e @ (Error::NoDevice(_) | Error::Unsupported(_) | Error::Unreachable(_))) => {
            eprintln!("conformance: skipped, transport not available here: {e}");
            None
        }
        Err(e) => panic!("opening the fixture failed: {e}"),
    }
}

fn attr<F: Fixture>(fx: &mut F) -> IfaceAttr {
    fx.iface(0).attr().clone()
}

/// An advertised operation must succeed; a non-advertised one must say Unsupported.
fn expect_support<T: Debug>(advertised: bool, what: &str, r: Result<T>) {
    if advertised {
        if let Err(e) = r {
            panic!("{what} is advertised but failed: {e}");
        }
    } else {
        match r {
            Err(Error::Unsupported(_)) => {}
            other => panic!("{what} is not advertised but gave {other:?} instead of Unsupported"),
        }
    }
}

fn is_too_long<T: Debug>(r: &Result<T>) -> bool {
    matches!(r, Err(Error::MessageTooLong { .. }))
}

/// Progresses until `n` active messages were received.
fn wait_ams<F: Fixture>(fx: &mut F, rec: &mut Recorder, n: usize) {
    progress_until(fx, rec, &format!("{n} active messages"), |r| {
        r.ams.len() >= n
    });
}

/// A handle over a test-owned buffer that belongs to no domain: only for checking that
/// operations a transport does not advertise are refused before touching memory.
fn foreign_memh(buf: &mut [u64]) -> MemHandle {
    let p = NonNull::new(buf.as_mut_ptr().cast::<u8>()).expect("non-empty buffer");
    // SAFETY: the caller keeps `buf` alive longer than the handle.
    unsafe { MemHandle::new(p, buf.len() * 8, "conformance-foreign", None) }
}

mod am;
mod caps;
mod event;
mod rma;

pub use am::*;
pub use caps::*;
pub use event::*;
pub use rma::*;
