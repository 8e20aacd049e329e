//! Sleeping until there is work: `ucp_worker_get_efd`, `ucp_worker_arm`, `ucp_worker_wait`,
//! `ucp_worker_signal`, `ucp_worker_wait_mem` (all but the last need `UCP_FEATURE_WAKEUP`,
//! as in UCX: `UCS_ERR_INVALID_PARAM` without it).
//!
//! The descriptor the client sleeps on is an epoll set of rucx's worker event fd (its
//! interfaces' events and the waker `ucp_worker_signal` pulls) and the sockets of the
//! worker's listeners and client connections ([`crate::worker_ext::Ext::efd`]). `arm` says
//! `UCS_ERR_BUSY` while anything waits for `ucp_worker_progress`: completions and events this
//! library queued, or what rucx's own arm finds.

use crate::ffi::*;
use crate::guard::{fail, ffi, refuse};
use crate::handles::{worker_ref, Worker};
use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Longest sleep of `ucp_worker_wait` while sockets are watched: rucx's timers (keepalive,
/// close deadlines) run from the progress call that follows.
const WAIT_SLICE: Duration = Duration::from_millis(100);

fn wakeup_worker<'a>(name: &str, worker: *mut Worker) -> Result<&'a Worker, Status> {
    let w = worker_ref(name, worker)?;
    if w.waker.is_none() {
        return Err(refuse(
            name,
            UCS_ERR_INVALID_PARAM,
            "the context was created without UCP_FEATURE_WAKEUP",
        ));
    }
    Ok(w)
}

/// `ucs_status_t ucp_worker_get_efd(ucp_worker_h worker, int *fd)`: a descriptor that becomes
/// readable when the worker has work (after `ucp_worker_arm` said `UCS_OK`).
/// `UCS_ERR_UNSUPPORTED` for a worker made with an external event fd, as in UCX.
///
/// # Safety
/// A live worker; `fd` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_efd(worker: *mut Worker, fd: *mut c_int) -> Status {
    const NAME: &str = "ucp_worker_get_efd";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match wakeup_worker(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        if fd.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "fd is NULL");
        }
        let x = w.ext.borrow();
        if x.external.is_some() {
            return refuse(
                NAME,
                UCS_ERR_UNSUPPORTED,
                "the worker was created with an external event fd",
            );
        }
        match &x.efd {
            // SAFETY: checked non-null.
            Some(set) => unsafe { *fd = set.as_raw_fd() },
            None => return refuse(NAME, UCS_ERR_UNSUPPORTED, "the worker has no event fd"),
        }
        UCS_OK
    })
}

/// True when this library holds completions or events for the next progress call.
fn queued(w: &Worker) -> bool {
    let i = w.inner.borrow();
    !i.done.is_empty()
        || i.w.has_recv_ok()
        || i.w.has_done_tokens()
        || w.has_due()
        || i.has_events()
}

/// Arms the worker: `Ok(true)` when it may sleep on its descriptor.
fn arm(w: &Worker) -> Result<bool, ucs::Error> {
    w.ext.borrow_mut().countdown = 1;
    if queued(w) {
        return Ok(false);
    }
    w.inner.borrow_mut().w.arm()
}

/// `ucs_status_t ucp_worker_arm(ucp_worker_h worker)`: `UCS_OK` when the worker may sleep on
/// its descriptor, `UCS_ERR_BUSY` when events wait for `ucp_worker_progress`.
///
/// # Safety
/// A live worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_arm(worker: *mut Worker) -> Status {
    const NAME: &str = "ucp_worker_arm";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match wakeup_worker(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        let _g = w.lock.lock();
        match arm(w) {
            Ok(true) => UCS_OK,
            Ok(false) => UCS_ERR_BUSY,
            Err(e) => fail(NAME, &e),
        }
    })
}

/// `ucs_status_t ucp_worker_wait(ucp_worker_h worker)`: sleeps until the worker has work (at
/// once when it has already), or `ucp_worker_signal` is called.
///
/// # Safety
/// A live worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait(worker: *mut Worker) -> Status {
    const NAME: &str = "ucp_worker_wait";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match wakeup_worker(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        let _g = w.lock.lock();
        if queued(w) {
            return UCS_OK;
        }
        if !w.sockets.get() {
            // rucx's own sleep: armed, bounded by its timers.
            let r = w.inner.borrow_mut().w.wait_event(None);
            w.ext.borrow_mut().countdown = 1;
            return match r {
                Ok(()) => UCS_OK,
                Err(e) => fail(NAME, &e),
            };
        }
        match arm(w) {
            Ok(false) => return UCS_OK,
            Ok(true) => {}
            Err(e) => return fail(NAME, &e),
        }
        let bound = w
            .inner
            .borrow()
            .w
            .wake_within()
            .map_or(WAIT_SLICE, |d| d.min(WAIT_SLICE));
        let x = w.ext.borrow();
        if let Some(set) = &x.efd {
            if let Err(e) = set.wait_any(Some(bound)) {
                return fail(NAME, &e);
            }
        }
        UCS_OK
    })
}

/// `ucs_status_t ucp_worker_signal(ucp_worker_h worker)`: ends a `ucp_worker_wait` (or makes
/// the worker's descriptor readable) from any thread; takes no lock.
///
/// # Safety
/// A live worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_signal(worker: *mut Worker) -> Status {
    const NAME: &str = "ucp_worker_signal";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match wakeup_worker(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        match w.waker.as_ref().map(|k| k.wake()) {
            Some(Err(e)) => fail(NAME, &e),
            _ => UCS_OK,
        }
    })
}

/// Spins of `ucp_worker_wait_mem` before it returns with the word unchanged.
const WAIT_MEM_SPINS: u32 = 64;

/// `void ucp_worker_wait_mem(ucp_worker_h worker, void *address)`: waits a little for the
/// 64-bit word at `address` to change (a few dozen spin-loop hints: x86 has no instruction to
/// sleep on a memory location, and UCX returns at once there). The caller checks the word
/// again either way.
///
/// # Safety
/// `address` valid for an 8-byte read (NULL returns at once).
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait_mem(_worker: *mut Worker, address: *mut c_void) {
    if address.is_null() {
        return;
    }
    let p = address as *const u64;
    // SAFETY: the caller's word, read volatile (another process or thread writes it).
    let first = unsafe { p.read_volatile() };
    for _ in 0..WAIT_MEM_SPINS {
        std::hint::spin_loop();
        // SAFETY: as above.
        if unsafe { p.read_volatile() } != first {
            return;
        }
    }
}
