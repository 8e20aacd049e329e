//! # libucm.so.0 — UCX's memory-event interface, as far as MPI libraries use it
//!
//! UCX's libucm installs hooks on `mmap`/`munmap`/`brk`… so that registration caches learn
//! when memory goes away. rucx installs **no hooks on system calls**: its shared-memory and tcp
//! transports do not pin memory, so they need no such events. What this library does:
//!
//! - keeps a real registry of event handlers (`ucm_set_event_handler` /
//!   `ucm_unset_event_handler`) and of the events the application reports itself
//!   (`ucm_set_external_event` / `ucm_unset_external_event`);
//! - delivers `UCM_EVENT_VM_MAPPED` / `UCM_EVENT_VM_UNMAPPED` to the registered handlers when
//!   the application reports them (`ucm_vm_mmap` / `ucm_vm_munmap`, which Open MPI's own memory
//!   hooks call with `--mca opal_common_ucx_opal_mem_hooks 1`);
//! - `ucm_test_events` / `ucm_test_external_events` really test: they register a probe handler,
//!   map and unmap a page, and answer `UCS_OK` only if the probe saw that unmap. Since rucx has
//!   no hooks of its own, `ucm_test_events` succeeds only when the application reports unmaps
//!   (so Open MPI warns that memory events are not handled unless its own hooks are on; that
//!   warning is true of rucx, and harmless for transports that do not pin memory).

#![warn(missing_docs)]

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// `UCM_EVENT_VM_MAPPED`.
pub const UCM_EVENT_VM_MAPPED: i32 = 1 << 16;
/// `UCM_EVENT_VM_UNMAPPED`.
pub const UCM_EVENT_VM_UNMAPPED: i32 = 1 << 17;

const UCS_OK: i8 = 0;
const UCS_ERR_INVALID_PARAM: i8 = -5;
const UCS_ERR_UNSUPPORTED: i8 = -22;

/// The `vm_mapped` / `vm_unmapped` member of `ucm_event_t`, padded to the size of the whole
/// union (the largest member is four words), so a handler that reads the union is in bounds.
#[repr(C)]
struct VmEvent {
    address: *mut c_void,
    size: usize,
    _rest: [usize; 2],
}

/// `ucm_event_callback_t`: `void (*)(ucm_event_type_t, ucm_event_t *, void *arg)`.
pub type EventCallback = unsafe extern "C" fn(i32, *mut c_void, *mut c_void);

struct Handler {
    events: i32,
    priority: i32,
    cb: EventCallback,
    arg: usize,
}

static HANDLERS: Mutex<Vec<Handler>> = Mutex::new(Vec::new());
static EXTERNAL: AtomicI32 = AtomicI32::new(0);

fn dispatch(event: i32, address: *mut c_void, size: usize) {
    let list: Vec<(EventCallback, usize)> = match HANDLERS.lock() {
        Ok(h) => h
            .iter()
            .filter(|h| h.events & event != 0)
            .map(|h| (h.cb, h.arg))
            .collect(),
        Err(_) => return,
    };
    for (cb, arg) in list {
        let mut ev = VmEvent {
            address,
            size,
            _rest: [0; 2],
        };
        // SAFETY: a handler registered through ucm_set_event_handler, called with the event
        // type it asked for and a pointer to a union-sized event.
        unsafe { cb(event, (&mut ev as *mut VmEvent).cast(), arg as *mut c_void) };
    }
}

/// `ucs_status_t ucm_set_event_handler(int events, int priority, ucm_event_callback_t cb,
/// void *arg)`: registers `cb` for `events` (handlers run in increasing priority order).
///
/// # Safety
/// `cb` must be callable with `arg` until it is removed.
#[no_mangle]
pub unsafe extern "C" fn ucm_set_event_handler(
    events: i32,
    priority: i32,
    cb: Option<EventCallback>,
    arg: *mut c_void,
) -> i8 {
    let Some(cb) = cb else {
        return UCS_ERR_INVALID_PARAM;
    };
    let Ok(mut h) = HANDLERS.lock() else {
        return UCS_ERR_INVALID_PARAM;
    };
    let pos = h.partition_point(|x| x.priority <= priority);
    h.insert(
        pos,
        Handler {
            events,
            priority,
            cb,
            arg: arg as usize,
        },
    );
    UCS_OK
}

/// `void ucm_unset_event_handler(int events, ucm_event_callback_t cb, void *arg)`: removes
/// `events` from the handler; a handler left with no event is dropped.
///
/// # Safety
/// Any values; only the registry is touched.
#[no_mangle]
pub unsafe extern "C" fn ucm_unset_event_handler(
    events: i32,
    cb: Option<EventCallback>,
    arg: *mut c_void,
) {
    if let Ok(mut h) = HANDLERS.lock() {
        for x in h.iter_mut() {
            if cb.is_some_and(|c| c as usize == x.cb as usize) && x.arg == arg as usize {
                x.events &= !events;
            }
        }
        h.retain(|x| x.events != 0);
    }
}

/// `void ucm_set_external_event(int events)`: the application reports these events itself.
///
/// The caller reports them from hooks of its own (Open MPI's common ucx library installs a
/// memory-release hook right after this call), for as long as the process runs. The shared
/// object that made the call is therefore kept loaded for the rest of the process: Open MPI
/// 4.1's OpenSHMEM layer registers that hook without ever unregistering it, and unloading the
/// library left the hook pointing into unmapped code (a crash in `shmem_finalize`).
#[no_mangle]
pub extern "C" fn ucm_set_external_event(events: i32) {
    EXTERNAL.fetch_or(events, Ordering::AcqRel);
    pin_caller();
}

/// Marks the shared object of the nearest caller outside this library `RTLD_NODELETE`, so
/// `dlclose` never unmaps it. Does nothing when the caller cannot be found (an executable,
/// or no unwind information).
#[inline(never)]
fn pin_caller() {
    let mut frames = [std::ptr::null_mut::<c_void>(); 8];
    // SAFETY: `frames` holds 8 entries.
    let n = unsafe { libc::backtrace(frames.as_mut_ptr(), frames.len() as i32) };
    // SAFETY: an all-zero Dl_info is a valid value to be overwritten.
    let mut own: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address and writes `own`.
    if unsafe { libc::dladdr(pin_caller as *const c_void, &mut own) } == 0 {
        return;
    }
    for &f in &frames[..n.max(0) as usize] {
        // SAFETY: as above.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::dladdr(f, &mut info) } == 0 || info.dli_fbase == own.dli_fbase {
            continue;
        }
        if !info.dli_fname.is_null() {
            // SAFETY: the name of an object already loaded (RTLD_NOLOAD loads nothing); the
            // handle is kept on purpose.
            unsafe {
                libc::dlopen(
                    info.dli_fname,
                    libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
                )
            };
        }
        return;
    }
}

/// `void ucm_unset_external_event(int events)`.
#[no_mangle]
pub extern "C" fn ucm_unset_external_event(events: i32) {
    EXTERNAL.fetch_and(!events, Ordering::AcqRel);
}

/// `void ucm_vm_mmap(void *addr, size_t length)`: delivers `UCM_EVENT_VM_MAPPED`.
#[no_mangle]
pub extern "C" fn ucm_vm_mmap(addr: *mut c_void, length: usize) {
    dispatch(UCM_EVENT_VM_MAPPED, addr, length);
}

/// `void ucm_vm_munmap(void *addr, size_t length)`: delivers `UCM_EVENT_VM_UNMAPPED` to the
/// registered handlers (the application's report that the range is about to be unmapped).
#[no_mangle]
pub extern "C" fn ucm_vm_munmap(addr: *mut c_void, length: usize) {
    dispatch(UCM_EVENT_VM_UNMAPPED, addr, length);
}

static PROBE_ADDR: AtomicUsize = AtomicUsize::new(0);
static PROBE_SEEN: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn probe(_event: i32, ev: *mut c_void, _arg: *mut c_void) {
    // SAFETY: dispatch passes a VmEvent.
    let ev = unsafe { &*(ev as *const VmEvent) };
    let a = ev.address as usize;
    let p = PROBE_ADDR.load(Ordering::Acquire);
    if p != 0 && a <= p && p < a.saturating_add(ev.size) {
        PROBE_SEEN.store(true, Ordering::Release);
    }
}

static TEST_LOCK: Mutex<()> = Mutex::new(());

/// Maps and unmaps one page with a probe handler registered for `UCM_EVENT_VM_UNMAPPED`, and
/// tells whether the unmap was reported.
fn unmap_reported() -> bool {
    let _one = TEST_LOCK.lock();
    // SAFETY: registering a static function with a null argument.
    unsafe {
        ucm_set_event_handler(
            UCM_EVENT_VM_UNMAPPED,
            -1000,
            Some(probe),
            std::ptr::null_mut(),
        )
    };
    PROBE_SEEN.store(false, Ordering::Release);
    // SAFETY: an anonymous private mapping of one page, unmapped right after.
    let seen = unsafe {
        let len = 4096;
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            false
        } else {
            PROBE_ADDR.store(p as usize, Ordering::Release);
            libc::munmap(p, len);
            PROBE_ADDR.store(0, Ordering::Release);
            PROBE_SEEN.load(Ordering::Acquire)
        }
    };
    // SAFETY: removing the probe registered above.
    unsafe { ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, Some(probe), std::ptr::null_mut()) };
    seen
}

/// `ucs_status_t ucm_test_events(int events)`: tests whether handlers of `events` are called
/// when memory is unmapped. rucx installs no system-call hooks, so this is `UCS_OK` only when
/// the application reports unmaps itself (see the crate documentation); `UCS_ERR_UNSUPPORTED`
/// otherwise. Events other than `UCM_EVENT_VM_UNMAPPED` are not observed: asking for them
/// alone gives `UCS_ERR_UNSUPPORTED`.
#[no_mangle]
pub extern "C" fn ucm_test_events(events: i32) -> i8 {
    if events & UCM_EVENT_VM_UNMAPPED == 0 || !unmap_reported() {
        return UCS_ERR_UNSUPPORTED;
    }
    UCS_OK
}

/// `ucs_status_t ucm_test_external_events(int events)`: tests whether the external events set
/// with `ucm_set_external_event` are reported by the application: `UCS_OK` when
/// `UCM_EVENT_VM_UNMAPPED` is external and an unmap of a test page was reported through
/// `ucm_vm_munmap`; `UCS_OK` too when none of `events` is external (nothing to test);
/// `UCS_ERR_UNSUPPORTED` when the reports do not arrive.
#[no_mangle]
pub extern "C" fn ucm_test_external_events(events: i32) -> i8 {
    let ext = events & EXTERNAL.load(Ordering::Acquire);
    if ext == 0 {
        return UCS_OK;
    }
    if ext & UCM_EVENT_VM_UNMAPPED != 0 && !unmap_reported() {
        return UCS_ERR_UNSUPPORTED;
    }
    UCS_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    static CALLS: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn count(_e: i32, _ev: *mut c_void, _a: *mut c_void) {
        CALLS.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn registry_dispatch_and_tests() {
        // Nothing reports unmaps: the test says so.
        assert_eq!(ucm_test_events(UCM_EVENT_VM_UNMAPPED), UCS_ERR_UNSUPPORTED);
        ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
        assert_eq!(
            ucm_test_external_events(UCM_EVENT_VM_UNMAPPED),
            UCS_ERR_UNSUPPORTED
        );
        // SAFETY: a static handler.
        unsafe {
            ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 0, Some(count), std::ptr::null_mut())
        };
        let mut buf = [0u8; 16];
        ucm_vm_munmap(buf.as_mut_ptr().cast(), 16);
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
        ucm_vm_mmap(buf.as_mut_ptr().cast(), 16);
        assert_eq!(
            CALLS.load(Ordering::SeqCst),
            1,
            "not registered for VM_MAPPED"
        );
        // SAFETY: removing it again.
        unsafe {
            ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, Some(count), std::ptr::null_mut())
        };
        ucm_vm_munmap(buf.as_mut_ptr().cast(), 16);
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
        ucm_unset_external_event(UCM_EVENT_VM_UNMAPPED);
        assert_eq!(ucm_test_external_events(UCM_EVENT_VM_UNMAPPED), UCS_OK);
    }
}
