//! Workers (`uct_worker_h`): the progress queue `uct_worker_progress` walks inline.
//!
//! The C struct starts with UCX's `ucs_callbackq_t`: an array of (callback, argument) pairs
//! ended by a NULL callback, which the header-inline `uct_worker_progress` calls in order. An
//! interface joins it with `uct_iface_progress_enable` (its progress function and itself), and
//! a client with `uct_worker_progress_register_safe`. At most 7 callbacks fit (UCX's fast
//! path); more are refused with a log line.

use crate::ffi::*;
use crate::guard::{ffi, refuse};
use std::ffi::{c_int, c_uint, c_void};
use uct::PeerProcs;

/// A worker. `repr(C)` with the callback queue first, as `uct_worker_t`.
#[repr(C)]
pub struct Worker {
    /// The queue `uct_worker_progress` dispatches.
    pub progress_q: ucs_callbackq_t,
    /// The peer processes of this worker's interfaces' endpoints, shared between them.
    pub procs: PeerProcs,
    /// Interfaces opened on it and not yet closed.
    pub ifaces: usize,
    /// The next callback id.
    next_id: c_int,
    /// The thread mode asked for.
    pub thread_mode: c_int,
}

const EMPTY: ucs_callbackq_elem_t = ucs_callbackq_elem_t {
    cb: None,
    arg: std::ptr::null_mut(),
    flags: 0,
    id: -1,
};

impl Worker {
    /// Adds a callback; gives its id, or `None` when the queue is full.
    pub fn add(&mut self, cb: ucs_callback_t, arg: *mut c_void, flags: c_uint) -> Option<c_int> {
        let q = &mut self.progress_q.fast_elems;
        let n = q.iter().position(|e| e.cb.is_none())?;
        if n >= UCS_CALLBACKQ_FAST_COUNT {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        q[n] = ucs_callbackq_elem_t {
            cb: Some(cb),
            arg,
            flags,
            id,
        };
        q[n + 1] = EMPTY;
        Some(id)
    }

    /// Removes the callback with `id`, keeping the others in order.
    pub fn remove(&mut self, id: c_int) -> bool {
        let q = &mut self.progress_q.fast_elems;
        let Some(i) = q
            .iter()
            .take_while(|e| e.cb.is_some())
            .position(|e| e.id == id)
        else {
            return false;
        };
        q.copy_within(i + 1.., i);
        q[UCS_CALLBACKQ_FAST_COUNT] = EMPTY;
        true
    }

    /// Removes every callback with argument `arg` (an interface being closed).
    pub fn remove_arg(&mut self, arg: *mut c_void) {
        while let Some(id) = self
            .progress_q
            .fast_elems
            .iter()
            .take_while(|e| e.cb.is_some())
            .find(|e| e.arg == arg)
            .map(|e| e.id)
        {
            self.remove(id);
        }
    }

    /// The worker behind a C handle.
    ///
    /// # Safety
    /// `h` must be NULL or a live handle from [`uct_worker_create`].
    pub unsafe fn from_handle<'a>(name: &str, h: *mut c_void) -> Option<&'a mut Worker> {
        if h.is_null() {
            refuse(name, UCS_ERR_INVALID_PARAM, "NULL worker");
            return None;
        }
        // SAFETY: forwarded from the caller.
        Some(unsafe { &mut *h.cast::<Worker>() })
    }
}

/// `ucs_status_t uct_worker_create(ucs_async_context_t *async, ucs_thread_mode_t thread_mode,
/// uct_worker_h *worker_p)`: SINGLE or SERIALIZED (MULTI is refused: the interfaces keep
/// their state for one thread at a time).
///
/// # Safety
/// `worker_p` must be valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_worker_create(
    _async: *mut c_void,
    thread_mode: c_int,
    worker_p: *mut *mut c_void,
) -> Status {
    ffi("uct_worker_create", UCS_ERR_NO_MEMORY, || {
        if worker_p.is_null() {
            return refuse(
                "uct_worker_create",
                UCS_ERR_INVALID_PARAM,
                "NULL output pointer",
            );
        }
        if !(0..UCS_THREAD_MODE_LAST).contains(&thread_mode) {
            return refuse(
                "uct_worker_create",
                UCS_ERR_INVALID_PARAM,
                format!("unknown thread mode {thread_mode}"),
            );
        }
        if thread_mode == UCS_THREAD_MODE_MULTI {
            return refuse(
                "uct_worker_create",
                UCS_ERR_UNSUPPORTED,
                "UCS_THREAD_MODE_MULTI: rucx's uct interfaces are used by one thread at a time \
                 (SINGLE or SERIALIZED)",
            );
        }
        let w = Box::new(Worker {
            progress_q: ucs_callbackq_t {
                fast_elems: [EMPTY; UCS_CALLBACKQ_FAST_COUNT + 1],
                priv_: [0; 72],
            },
            procs: PeerProcs::new(),
            ifaces: 0,
            next_id: 0,
            thread_mode,
        });
        // SAFETY: checked non-null.
        unsafe { *worker_p = Box::into_raw(w).cast() };
        UCS_OK
    })
}

/// `void uct_worker_destroy(uct_worker_h worker)`: its interfaces must be closed first (one
/// still open is reported, and the worker is then kept so that interface stays usable).
///
/// # Safety
/// `worker` must come from [`uct_worker_create`] (or be NULL).
#[no_mangle]
pub unsafe extern "C" fn uct_worker_destroy(worker: *mut c_void) {
    ffi("uct_worker_destroy", (), || {
        if worker.is_null() {
            return;
        }
        // SAFETY: made by Box::into_raw in uct_worker_create.
        let w = unsafe { Box::from_raw(worker.cast::<Worker>()) };
        if w.ifaces > 0 {
            refuse(
                "uct_worker_destroy",
                UCS_ERR_BUSY,
                format!(
                    "{} interfaces are still open on worker {worker:p}: kept",
                    w.ifaces
                ),
            );
            Box::leak(w);
        }
    })
}

/// `void uct_worker_progress_register_safe(uct_worker_h, ucs_callback_t func, void *arg,
/// unsigned flags, uct_worker_cb_id_t *id_p)`: adds `func(arg)` to the progress queue, once
/// (`*id_p` must be `UCS_CALLBACKQ_ID_NULL`, -1, to add).
///
/// # Safety
/// `worker` must be live; `id_p` valid.
#[no_mangle]
pub unsafe extern "C" fn uct_worker_progress_register_safe(
    worker: *mut c_void,
    func: Option<ucs_callback_t>,
    arg: *mut c_void,
    flags: c_uint,
    id_p: *mut c_int,
) {
    const NAME: &str = "uct_worker_progress_register_safe";
    ffi(NAME, (), || {
        // SAFETY: forwarded from the caller.
        let Some(w) = (unsafe { Worker::from_handle(NAME, worker) }) else {
            return;
        };
        let (Some(func), false) = (func, id_p.is_null()) else {
            refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL callback or id pointer");
            return;
        };
        // SAFETY: checked non-null.
        if unsafe { *id_p } != -1 {
            return;
        }
        match w.add(func, arg, flags) {
            // SAFETY: checked non-null.
            Some(id) => unsafe { *id_p = id },
            None => {
                refuse(
                    NAME,
                    UCS_ERR_EXCEEDS_LIMIT,
                    "the worker's progress queue is full (7 callbacks)",
                );
            }
        }
    })
}

/// `void uct_worker_progress_unregister_safe(uct_worker_h, uct_worker_cb_id_t *id_p)`.
///
/// # Safety
/// `worker` must be live; `id_p` valid.
#[no_mangle]
pub unsafe extern "C" fn uct_worker_progress_unregister_safe(
    worker: *mut c_void,
    id_p: *mut c_int,
) {
    const NAME: &str = "uct_worker_progress_unregister_safe";
    ffi(NAME, (), || {
        // SAFETY: forwarded from the caller.
        let Some(w) = (unsafe { Worker::from_handle(NAME, worker) }) else {
            return;
        };
        if id_p.is_null() {
            return;
        }
        // SAFETY: checked non-null.
        let id = unsafe { *id_p };
        if id != -1 {
            w.remove(id);
            // SAFETY: checked non-null.
            unsafe { *id_p = -1 };
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn count(arg: *mut c_void) -> c_uint {
        // SAFETY: the tests pass a pointer to a u32.
        unsafe { *arg.cast::<u32>() += 1 };
        1
    }

    #[test]
    fn the_queue_dispatches_in_order_and_stays_terminated() {
        let mut w: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid output pointer.
        let s = unsafe { uct_worker_create(std::ptr::null_mut(), 0, &mut w) };
        assert_eq!(s, UCS_OK);
        // SAFETY: live worker.
        let wk = unsafe { Worker::from_handle("t", w) }.unwrap();
        let mut hits = [0u32; 8];
        let ids: Vec<_> = (0..8)
            .map(|i| wk.add(count, (&mut hits[i] as *mut u32).cast(), 0))
            .collect();
        assert!(ids[..7].iter().all(Option::is_some));
        assert!(ids[7].is_none(), "the eighth does not fit");
        assert!(wk.remove(ids[2].unwrap()));
        // What the header-inline dispatch does: walk until the NULL callback.
        let mut n = 0;
        for e in wk.progress_q.fast_elems.iter() {
            let Some(cb) = e.cb else { break };
            // SAFETY: the callbacks and arguments added above.
            n += unsafe { cb(e.arg) };
        }
        assert_eq!(n, 6);
        assert_eq!(hits, [1, 1, 0, 1, 1, 1, 1, 0]);
        // SAFETY: made above.
        unsafe { uct_worker_destroy(w) };
    }
}
