//! Interfaces (`uct_iface_h`): open, close, query, addresses, active-message handlers,
//! progress, flush, fence and events.
//!
//! The C handle points to an [`Iface`], `repr(C)` with the operations table first, as
//! `uct_iface_t`: the header-inline calls (`uct_ep_am_short`, `uct_iface_progress` …) load the
//! function from `ops` and land in this library. Progress runs rucx's interface into a
//! [`crate::sink::Sink`] that calls the client's handlers.

use crate::addr_slot;
use crate::component::Md;
use crate::ep::{
    ep_am_bcopy, ep_am_short, ep_am_short_iov, ep_am_short_mm, ep_am_zcopy, ep_connect_to_ep_op,
    ep_create_op, ep_destroy_op, ep_fence, ep_flush, ep_get_address_op, ep_pending_add,
    ep_pending_purge,
};
use crate::ffi::*;
use crate::guard::{fail, ffi, hot, outcome, refuse, text};
use crate::handle::{slice_or_empty, AmHandler, Ep, Iface, State};
use crate::ops::IfaceOps;
use crate::rma::{
    ep_atomic32_fetch, ep_atomic32_post, ep_atomic64_fetch, ep_atomic64_post, ep_atomic_cswap32,
    ep_atomic_cswap64, ep_get_bcopy, ep_get_short, ep_get_zcopy, ep_put_bcopy, ep_put_bcopy_mm,
    ep_put_short, ep_put_zcopy,
};
use crate::sink::{iface_progress, new_scratch, poll_flush, progress_cb};
use crate::worker::Worker;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use uct::{AnyIface, CompletionId, EventFlags, Iface as _, IfaceAttr, IfaceFlags, IfaceParams};

/// The interface flags UCX's and rucx's definitions share bit for bit.
const SAME_BITS: u64 = 0x7 | 0x70 | 0x700 | (3 << 30) | (3 << 40);

/// UCX's attributes for rucx's.
pub fn build_attr(a: &IfaceAttr, dev_len: usize, iface_len: usize) -> uct_iface_attr_t {
    let mut flags = (a.flags.bits() & SAME_BITS) | UCT_IFACE_FLAG_CB_SYNC;
    if a.flags.contains(IfaceFlags::PENDING) {
        flags |= UCT_IFACE_FLAG_PENDING;
    }
    if a.flags.contains(IfaceFlags::ERRHANDLE_PEER_FAILURE) {
        flags |= UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
    }
    let mut event_flags = 0;
    for (r, u) in [
        (EventFlags::SEND_COMP, UCT_IFACE_FLAG_EVENT_SEND_COMP),
        (EventFlags::RECV, UCT_IFACE_FLAG_EVENT_RECV),
        (EventFlags::FD, UCT_IFACE_FLAG_EVENT_FD),
    ] {
        if a.event_flags.contains(r) {
            event_flags |= u;
        }
    }
    let rma = |l: &uct::OpLimits| uct_rma_cap_t {
        max_short: l.max_short,
        max_bcopy: l.max_bcopy,
        min_zcopy: l.min_zcopy,
        max_zcopy: l.max_zcopy,
        opt_zcopy_align: 1,
        align_mtu: 1,
        max_iov: l.max_iov.min(crate::ep::MAX_IOV),
    };
    let cap = uct_iface_cap_t {
        put: rma(&a.put),
        get: rma(&a.get),
        am: uct_am_cap_t {
            max_short: a.am.max_short,
            max_bcopy: a.am.max_bcopy,
            min_zcopy: a.am.min_zcopy,
            max_zcopy: a.am.max_zcopy,
            opt_zcopy_align: 1,
            align_mtu: 1,
            max_hdr: a.am.max_hdr,
            max_iov: a.am.max_iov.min(crate::ep::MAX_IOV),
        },
        tag: uct_tag_cap_t::default(),
        atomic32: uct_atomic_cap_t {
            op_flags: a.atomics.op32.bits() as u64,
            fop_flags: a.atomics.fop32.bits() as u64,
        },
        atomic64: uct_atomic_cap_t {
            op_flags: a.atomics.op64.bits() as u64,
            fop_flags: a.atomics.fop64.bits() as u64,
        },
        flags,
        event_flags,
    };
    uct_iface_attr_t {
        cap,
        device_addr_len: dev_len,
        iface_addr_len: iface_len,
        ep_addr_len: a.ep_addr_len,
        max_conn_priv: 0,
        // SAFETY: sockaddr_storage is plain data; all-zero is valid.
        listen_sockaddr: unsafe { std::mem::zeroed() },
        overhead: a.perf.send_overhead,
        bandwidth: uct_ppn_bandwidth_t {
            dedicated: a.perf.bandwidth,
            shared: 0.0,
        },
        latency: ucs_linear_func_t {
            c: a.perf.latency,
            m: 0.0,
        },
        priority: a.priority,
        max_num_eps: usize::MAX,
        dev_num_paths: 1,
    }
}

const KNOWN_PARAMS: u64 = UCT_IFACE_PARAM_FIELD_CPU_MASK
    | UCT_IFACE_PARAM_FIELD_OPEN_MODE
    | UCT_IFACE_PARAM_FIELD_DEVICE
    | UCT_IFACE_PARAM_FIELD_SOCKADDR
    | UCT_IFACE_PARAM_FIELD_STATS_ROOT
    | UCT_IFACE_PARAM_FIELD_RX_HEADROOM
    | UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG
    | UCT_IFACE_PARAM_FIELD_ERR_HANDLER
    | UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS
    | (0xf << 9) // the tag-offload and async-event callbacks
    | UCT_IFACE_PARAM_FIELD_KEEPALIVE_INTERVAL
    | UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT
    | UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET
    | UCT_IFACE_PARAM_FIELD_FEATURES;

/// `ucs_status_t uct_iface_open(uct_md_h md, uct_worker_h worker,
/// const uct_iface_params_t *params, const uct_iface_config_t *config, uct_iface_h *iface_p)`:
/// opens the transport on a device (`UCT_IFACE_OPEN_MODE_DEVICE`; socket-address modes are
/// not supported).
///
/// # Safety
/// `md` and `worker` live; `params` valid; `iface_p` valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_open(
    md: *mut c_void,
    worker: *mut c_void,
    params: *const uct_iface_params_t,
    _config: *const c_void,
    iface_p: *mut *mut c_void,
) -> Status {
    const NAME: &str = "uct_iface_open";
    ffi(NAME, UCS_ERR_NO_DEVICE, || {
        // SAFETY: forwarded from the caller.
        let (Some(m), Some(w)) = (unsafe { Md::from_handle(NAME, md) }, unsafe {
            Worker::from_handle(NAME, worker)
        }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        if params.is_null() || iface_p.is_null() {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "NULL parameters or output pointer",
            );
        }
        // SAFETY: checked non-null.
        let p = unsafe { &*params };
        if let Err(s) =
            crate::guard::check_mask(NAME, "params->field_mask", p.field_mask, KNOWN_PARAMS)
        {
            return s;
        }
        let mode = if p.field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE != 0 {
            p.open_mode
        } else {
            0
        };
        if mode != UCT_IFACE_OPEN_MODE_DEVICE {
            return refuse(NAME, UCS_ERR_UNSUPPORTED, format!("open mode {mode:#x}: rucx opens interfaces on devices only (UCT_IFACE_OPEN_MODE_DEVICE)"));
        }
        // SAFETY: the device names are C strings.
        let (tl, dev) = unsafe { (text(p.mode_device.tl_name), text(p.mode_device.dev_name)) };
        let (Some(tl), Some(dev)) = (tl, dev) else {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL transport or device name");
        };
        if tl != m.component.tl_name || !m.devices.iter().any(|d| d.name == dev) {
            return refuse(
                NAME,
                UCS_ERR_NO_DEVICE,
                format!("memory domain {} has no {tl}/{dev}", m.name),
            );
        }
        let dom = match m.for_device(&dev) {
            Ok(d) => d,
            Err(e) => return fail(NAME, &e),
        };
        let iface = match AnyIface::open_shared(
            &dom,
            &IfaceParams {
                device: dev.to_string(),
                // As UCX's transports: an endpoint whose connection is being made answers
                // UCS_ERR_NO_RESOURCE until it is up.
                connect_backpressure: true,
            },
            &w.procs,
        ) {
            Ok(i) => i,
            Err(e) => return fail(NAME, &e),
        };
        let (Some(dev_len), Some(iface_len)) = (
            addr_slot::slot_len(iface.device_address().len()),
            addr_slot::slot_len(iface.iface_address().len()),
        ) else {
            return refuse(
                NAME,
                UCS_ERR_UNSUPPORTED,
                format!(
                    "{tl}/{dev}: an address longer than {} bytes",
                    addr_slot::ADDR_SLOT - 1
                ),
            );
        };
        let attr = Box::new(build_attr(iface.attr(), dev_len, iface_len));
        let rx_headroom = if p.field_mask & UCT_IFACE_PARAM_FIELD_RX_HEADROOM != 0 {
            p.rx_headroom
        } else {
            0
        };
        let err = match (
            p.field_mask & UCT_IFACE_PARAM_FIELD_ERR_HANDLER != 0,
            p.err_handler,
        ) {
            (true, Some(h)) => {
                let arg = if p.field_mask & UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG != 0 {
                    p.err_handler_arg
                } else {
                    std::ptr::null_mut()
                };
                Some((h, arg))
            }
            _ => None,
        };
        let scratch = new_scratch(rx_headroom);
        if scratch.is_null() {
            return UCS_ERR_NO_MEMORY;
        }
        let am_in_place = matches!(iface, AnyIface::Posix(_) | AnyIface::Sysv(_));
        let it = Box::new(Iface {
            ops: ops_for(&iface),
            st: State {
                iface: UnsafeCell::new(iface),
                worker: w,
                md,
                dom,
                attr,
                am: UnsafeCell::new(
                    [AmHandler {
                        cb: None,
                        arg: std::ptr::null_mut(),
                    }; UCT_AM_ID_MAX],
                ),
                err,
                rx_headroom,
                eps: RefCell::new(HashMap::new()),
                records: RefCell::new(slab::Slab::new()),
                progress_flags: Cell::new(0),
                progress_id: Cell::new(-1),
                busy: Cell::new(false),
                polled_flush: Cell::new(None),
                am_in_place,
                scratch: Cell::new(scratch),
                misuse_reported: Cell::new(false),
            },
        });
        w.ifaces += 1;
        // SAFETY: checked non-null.
        unsafe { *iface_p = Box::into_raw(it).cast() };
        UCS_OK
    })
}

/// `void uct_iface_close(uct_iface_h iface)` (also the ops table's `iface_close`). Endpoints
/// still open are detached (with a log line): rucx's endpoint stays until the client's
/// `uct_ep_destroy`, so a late destroy frees it instead of touching freed memory.
///
/// # Safety
/// `h` must come from [`uct_iface_open`] (or be NULL) and not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_close(h: *mut c_void) {
    ffi("uct_iface_close", (), || {
        if h.is_null() {
            return;
        }
        // SAFETY: made by Box::into_raw in uct_iface_open.
        let it = unsafe { &*h.cast::<Iface>() };
        if it.st.busy.get() {
            refuse(
                "uct_iface_close",
                UCS_ERR_BUSY,
                "called from inside the interface's progress: not closed",
            );
            return;
        }
        let eps: Vec<*mut Ep> = it.st.eps.borrow_mut().drain().map(|(_, e)| e).collect();
        if !eps.is_empty() {
            tracing::warn!(
                "uct_iface_close: {} endpoints were not destroyed first: they are detached from \
                 the interface and freed by their uct_ep_destroy (their operations must not be \
                 called any more)",
                eps.len()
            );
            for ep in eps {
                // SAFETY: live endpoints of this interface; the C handle stays valid for
                // uct_ep_destroy, which frees a detached endpoint without its interface.
                unsafe { (*ep).iface = std::ptr::null_mut() };
            }
        }
        // SAFETY: the worker outlives its interfaces (uct_worker_destroy keeps it otherwise).
        let w = unsafe { &mut *it.st.worker };
        w.remove_arg(h);
        w.ifaces -= 1;
        // SAFETY: made by Box::into_raw in uct_iface_open; no reference to it remains.
        let it = unsafe { Box::from_raw(h.cast::<Iface>()) };
        // SAFETY: the current descriptor block came from new_scratch.
        unsafe { libc::free(it.st.scratch.get().cast()) };
        drop(it);
    })
}

/// `ucs_status_t uct_iface_query(uct_iface_h iface, uct_iface_attr_t *iface_attr)`.
///
/// # Safety
/// `h` live; `attr` valid for writing.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_query(h: *mut c_void, attr: *mut uct_iface_attr_t) -> Status {
    ffi("uct_iface_query", UCS_ERR_INVALID_PARAM, || {
        // SAFETY: forwarded from the caller.
        let Some(it) = (unsafe { Iface::from_handle("uct_iface_query", h) }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        if attr.is_null() {
            return refuse("uct_iface_query", UCS_ERR_INVALID_PARAM, "NULL attributes");
        }
        // SAFETY: checked non-null; attr is a plain C struct.
        unsafe { std::ptr::copy_nonoverlapping(&*it.st.attr as *const uct_iface_attr_t, attr, 1) };
        UCS_OK
    })
}

fn copy_addr(name: &str, h: *mut c_void, out: *mut u8, which: fn(&AnyIface) -> &[u8]) -> Status {
    ffi(name, UCS_ERR_INVALID_PARAM, || {
        // SAFETY: the caller passes a live interface.
        let Some(it) = (unsafe { Iface::from_handle(name, h) }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        let a = which(it.iface());
        if a.is_empty() {
            return UCS_OK;
        }
        if out.is_null() {
            return refuse(name, UCS_ERR_INVALID_PARAM, "NULL address buffer");
        }
        // SAFETY: the caller sized the buffer from the attributes' length, a slot.
        unsafe { addr_slot::write(a, out) };
        UCS_OK
    })
}

/// `ucs_status_t uct_iface_get_device_address(uct_iface_h, uct_device_addr_t *addr)`.
///
/// # Safety
/// `h` live; `addr` holds `device_addr_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_get_device_address(h: *mut c_void, addr: *mut u8) -> Status {
    copy_addr("uct_iface_get_device_address", h, addr, |i| {
        i.device_address()
    })
}

/// `ucs_status_t uct_iface_get_address(uct_iface_h, uct_iface_addr_t *addr)`.
///
/// # Safety
/// `h` live; `addr` holds `iface_addr_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_get_address(h: *mut c_void, addr: *mut u8) -> Status {
    copy_addr("uct_iface_get_address", h, addr, |i| i.iface_address())
}

/// `int uct_iface_is_reachable(const uct_iface_h, const uct_device_addr_t *dev_addr,
/// const uct_iface_addr_t *iface_addr)`: whether a peer with these addresses can be reached
/// (the reason is logged at debug level when not). `iface_addr` may be NULL for transports
/// that connect endpoint to endpoint.
///
/// # Safety
/// The addresses must hold the lengths `uct_iface_query` gives.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_is_reachable(
    h: *mut c_void,
    dev_addr: *const u8,
    iface_addr: *const u8,
) -> c_int {
    ffi("uct_iface_is_reachable", 0, || {
        // SAFETY: forwarded from the caller.
        let Some(it) = (unsafe { Iface::from_handle("uct_iface_is_reachable", h) }) else {
            return 0;
        };
        let a = &*it.st.attr;
        if dev_addr.is_null() && a.device_addr_len > 0 {
            return 0;
        }
        // SAFETY: the peer's addresses have this library's lengths.
        let dev = unsafe { slice_or_empty(dev_addr, a.device_addr_len) };
        // SAFETY: as above.
        let ifa = (!iface_addr.is_null())
            .then(|| unsafe { slice_or_empty(iface_addr, a.iface_addr_len) });
        let (dev, ifa) = match (addr_slot::read(dev), ifa.map(addr_slot::read).transpose()) {
            (Ok(d), Ok(i)) => (d, i),
            (Err(why), _) | (_, Err(why)) => {
                tracing::debug!("uct_iface_is_reachable: {why}");
                return 0;
            }
        };
        match it.iface().is_reachable(dev, ifa) {
            Ok(()) => 1,
            Err(why) => {
                tracing::debug!("uct_iface_is_reachable: {why}");
                0
            }
        }
    })
}

/// `ucs_status_t uct_iface_set_am_handler(uct_iface_h, uint8_t id, uct_am_callback_t cb,
/// void *arg, uint32_t flags)`: NULL `cb` unsets. Handlers run only inside progress (the
/// interfaces are `CB_SYNC`), also when `UCT_CB_FLAG_ASYNC` is asked for.
///
/// # Safety
/// `h` must be a live interface.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_set_am_handler(
    h: *mut c_void,
    id: u8,
    cb: Option<uct_am_callback_t>,
    arg: *mut c_void,
    flags: u32,
) -> Status {
    const NAME: &str = "uct_iface_set_am_handler";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        // SAFETY: the caller passes a live interface.
        let Some(it) = (unsafe { Iface::from_handle(NAME, h) }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        if id as usize >= UCT_AM_ID_MAX {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                format!("active message id {id} is out of range 0..{UCT_AM_ID_MAX}"),
            );
        }
        if flags & !(UCT_CB_FLAG_ASYNC | UCT_CB_FLAG_RESERVED) != 0 {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                format!("unknown flags {flags:#x}"),
            );
        }
        // SAFETY: a whole-entry store; progress reads entries by copy.
        unsafe { (*it.st.am.get())[id as usize] = AmHandler { cb, arg } };
        UCS_OK
    })
}

/// `ucs_status_t uct_iface_set_am_tracer(uct_iface_h, uct_am_tracer_t, void *arg)`: not
/// supported (rucx traces through its log, `RUCX_LOG_LEVEL=trace`).
#[no_mangle]
pub extern "C" fn uct_iface_set_am_tracer(
    _h: *mut c_void,
    _tracer: *mut c_void,
    _arg: *mut c_void,
) -> Status {
    refuse(
        "uct_iface_set_am_tracer",
        UCS_ERR_UNSUPPORTED,
        "rucx has no active-message tracer; use RUCX_LOG_LEVEL=trace",
    )
}

/// Ops table `iface_progress_enable`: puts the interface in its worker's progress queue.
pub(crate) unsafe extern "C" fn iface_progress_enable(h: *mut c_void, flags: c_uint) {
    ffi("uct_iface_progress_enable", (), || {
        // SAFETY: the caller passes a live interface.
        let Some(it) = (unsafe { Iface::from_handle("uct_iface_progress_enable", h) }) else {
            return;
        };
        let f = flags & (UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
        it.st.progress_flags.set(it.st.progress_flags.get() | f);
        if f != 0 && it.st.progress_id.get() == -1 {
            // SAFETY: the worker outlives its interfaces.
            let w = unsafe { &mut *it.st.worker };
            match w.add(progress_cb, h, 0) {
                Some(id) => it.st.progress_id.set(id),
                None => {
                    refuse(
                        "uct_iface_progress_enable",
                        UCS_ERR_EXCEEDS_LIMIT,
                        "the worker's progress queue is full (7 callbacks)",
                    );
                }
            }
        }
    })
}

/// Ops table `iface_progress_disable`: takes the flags back; with none left, the interface
/// leaves the progress queue.
pub(crate) unsafe extern "C" fn iface_progress_disable(h: *mut c_void, flags: c_uint) {
    ffi("uct_iface_progress_disable", (), || {
        // SAFETY: the caller passes a live interface.
        let Some(it) = (unsafe { Iface::from_handle("uct_iface_progress_disable", h) }) else {
            return;
        };
        let left = it.st.progress_flags.get() & !flags;
        it.st.progress_flags.set(left);
        if left & (UCT_PROGRESS_SEND | UCT_PROGRESS_RECV) == 0 && it.st.progress_id.get() != -1 {
            // SAFETY: the worker outlives its interfaces.
            unsafe { &mut *it.st.worker }.remove(it.st.progress_id.replace(-1));
        }
    })
}

/// Ops table `iface_flush`: `UCS_OK` when everything issued completed, else `UCS_INPROGRESS`
/// (with `comp` completed later) or, with a `comp`, `UCS_ERR_NO_RESOURCE` (nothing started:
/// call again). Without a `comp` the caller polls: see [`poll_flush`].
pub(crate) unsafe extern "C" fn iface_flush(
    h: *mut c_void,
    _flags: c_uint,
    comp: *mut uct_completion_t,
) -> Status {
    hot("uct_iface_flush", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live interface.
        let it = unsafe { &*h.cast::<Iface>() };
        // SAFETY: single-threaded use.
        let i = match unsafe { it.iface_mut("uct_iface_flush") } {
            Ok(i) => i,
            Err(s) => return s,
        };
        if comp.is_null() {
            return poll_flush(&it.st, &it.st.polled_flush, "uct_iface_flush", |id| {
                i.flush(id)
            });
        }
        outcome(i.flush(CompletionId(comp as u64)), "uct_iface_flush")
    })
}

/// Ops table `iface_fence`.
pub(crate) unsafe extern "C" fn iface_fence(h: *mut c_void, _flags: c_uint) -> Status {
    hot("uct_iface_fence", UCS_ERR_IO_ERROR, || {
        // SAFETY: the caller passes a live interface.
        let it = unsafe { &*h.cast::<Iface>() };
        // SAFETY: single-threaded use.
        match unsafe { it.iface_mut("uct_iface_fence") }.map(|i| i.fence()) {
            Ok(Ok(())) => UCS_OK,
            Ok(Err(e)) => fail("uct_iface_fence", &e),
            Err(s) => s,
        }
    })
}

/// Ops table `iface_event_fd_get`: the descriptor that becomes readable when progress has
/// work, after `uct_iface_event_arm`.
pub(crate) unsafe extern "C" fn iface_event_fd_get(h: *mut c_void, fd_p: *mut c_int) -> Status {
    ffi("uct_iface_event_fd_get", UCS_ERR_INVALID_PARAM, || {
        // SAFETY: the caller passes a live interface.
        let Some(it) = (unsafe { Iface::from_handle("uct_iface_event_fd_get", h) }) else {
            return UCS_ERR_INVALID_PARAM;
        };
        match (it.iface().event_fd(), fd_p.is_null()) {
            (Some(fd), false) => {
                // SAFETY: checked non-null.
                unsafe { *fd_p = fd };
                UCS_OK
            }
            (None, _) => refuse(
                "uct_iface_event_fd_get",
                UCS_ERR_UNSUPPORTED,
                "this interface has no event descriptor",
            ),
            (_, true) => refuse(
                "uct_iface_event_fd_get",
                UCS_ERR_INVALID_PARAM,
                "NULL output pointer",
            ),
        }
    })
}

/// Ops table `iface_event_arm`: `UCS_ERR_BUSY` when events are waiting (progress first).
pub(crate) unsafe extern "C" fn iface_event_arm(h: *mut c_void, events: c_uint) -> Status {
    ffi("uct_iface_event_arm", UCS_ERR_INVALID_PARAM, || {
        // SAFETY: the caller passes a live interface.
        let it = unsafe { &*h.cast::<Iface>() };
        let mut f = EventFlags::empty();
        if events & UCT_EVENT_SEND_COMP != 0 {
            f |= EventFlags::SEND_COMP;
        }
        if events & (UCT_EVENT_RECV | UCT_EVENT_RECV_SIG) != 0 {
            f |= EventFlags::RECV;
        }
        // SAFETY: single-threaded use.
        match unsafe { it.iface_mut("uct_iface_event_arm") }.map(|i| i.event_arm(f)) {
            Ok(Ok(())) => UCS_OK,
            Ok(Err(ucs::Error::Busy(_))) => UCS_ERR_BUSY,
            Ok(Err(e)) => fail("uct_iface_event_arm", &e),
            Err(s) => s,
        }
    })
}

/// `ucs_status_t uct_iface_event_fd_get(uct_iface_h, int *fd_p)`.
///
/// # Safety
/// As the ops entry.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_event_fd_get(h: *mut c_void, fd_p: *mut c_int) -> Status {
    // SAFETY: forwarded from the caller.
    unsafe { iface_event_fd_get(h, fd_p) }
}

/// `ucs_status_t uct_iface_event_arm(uct_iface_h, unsigned events)`.
///
/// # Safety
/// As the ops entry.
#[no_mangle]
pub unsafe extern "C" fn uct_iface_event_arm(h: *mut c_void, events: c_uint) -> Status {
    // SAFETY: forwarded from the caller.
    unsafe { iface_event_arm(h, events) }
}

/// Ops table `iface_query`.
pub(crate) unsafe extern "C" fn iface_query_op(
    h: *mut c_void,
    attr: *mut uct_iface_attr_t,
) -> Status {
    // SAFETY: forwarded from the caller.
    unsafe { uct_iface_query(h, attr) }
}

/// Ops table `iface_close`.
pub(crate) unsafe extern "C" fn iface_close_op(h: *mut c_void) {
    // SAFETY: forwarded from the caller.
    unsafe { uct_iface_close(h) }
}

/// An operation rucx does not offer through this API: `UCS_ERR_UNSUPPORTED`.
unsafe extern "C" fn unsupported() -> Status {
    UCS_ERR_UNSUPPORTED
}

/// As [`unsupported`], for the operations that return `ssize_t`.
unsafe extern "C" fn unsupported_len() -> isize {
    UCS_ERR_UNSUPPORTED as isize
}

/// As [`unsupported`], for `ep_tag_rndv_zcopy`, which returns a status pointer.
unsafe extern "C" fn unsupported_ptr() -> *mut c_void {
    UCS_ERR_UNSUPPORTED as isize as *mut c_void
}

/// UCX's operations table every interface carries first (`uct_iface_ops_t`, declared in
/// [`crate::ops`]): the header-inline calls of UCX's clients land in these functions.
/// Operations rucx does not offer through this API (tag offload, connection managers,
/// endpoint checks) answer `UCS_ERR_UNSUPPORTED`, and the attributes never announce them.
pub const OPS: IfaceOps = IfaceOps {
    ep_put_short,
    ep_put_bcopy,
    ep_put_zcopy,
    ep_get_short,
    ep_get_bcopy,
    ep_get_zcopy,
    ep_am_short,
    ep_am_short_iov,
    ep_am_bcopy,
    ep_am_zcopy,
    ep_atomic_cswap64,
    ep_atomic_cswap32,
    ep_atomic32_post,
    ep_atomic64_post,
    ep_atomic32_fetch,
    ep_atomic64_fetch,
    ep_tag_eager_short: unsupported,
    ep_tag_eager_bcopy: unsupported_len,
    ep_tag_eager_zcopy: unsupported,
    ep_tag_rndv_zcopy: unsupported_ptr,
    ep_tag_rndv_cancel: unsupported,
    ep_tag_rndv_request: unsupported,
    iface_tag_recv_zcopy: unsupported,
    iface_tag_recv_cancel: unsupported,
    ep_pending_add,
    ep_pending_purge,
    ep_flush,
    ep_fence,
    ep_check: unsupported,
    ep_create: ep_create_op,
    ep_connect: unsupported,
    ep_disconnect: unsupported,
    cm_ep_conn_notify: unsupported,
    ep_destroy: ep_destroy_op,
    ep_get_address: ep_get_address_op,
    ep_connect_to_ep: ep_connect_to_ep_op,
    iface_accept: unsupported,
    iface_reject: unsupported,
    iface_flush,
    iface_fence,
    iface_progress_enable,
    iface_progress_disable,
    iface_progress,
    iface_event_fd_get,
    iface_event_arm,
    iface_close: iface_close_op,
    iface_query: iface_query_op,
    iface_get_device_address: uct_iface_get_device_address,
    iface_get_address: uct_iface_get_address,
    iface_is_reachable: uct_iface_is_reachable,
};

/// The operations table of `iface`: [`OPS`], with the entries that have a version for its
/// transport (the shared-memory transports' `ep_am_short` and `ep_put_bcopy`: [`ep_am_short_mm`],
/// [`ep_put_bcopy_mm`]).
pub fn ops_for(iface: &AnyIface) -> IfaceOps {
    match iface {
        AnyIface::Posix(_) | AnyIface::Sysv(_) => IfaceOps {
            ep_am_short: ep_am_short_mm,
            ep_put_bcopy: ep_put_bcopy_mm,
            ..OPS
        },
        _ => OPS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uct::{AtomicCaps, AtomicOps};

    #[test]
    fn attributes_use_ucx_bits() {
        let a = IfaceAttr {
            flags: IfaceFlags::AM_SHORT
                | IfaceFlags::PUT_ZCOPY
                | IfaceFlags::PENDING
                | IfaceFlags::ERRHANDLE_PEER_FAILURE
                | IfaceFlags::CONNECT_TO_EP
                | IfaceFlags::SYNC_ONLY
                | IfaceFlags::TAG_EAGER_SHORT,
            event_flags: EventFlags::FD | EventFlags::RECV,
            atomics: AtomicCaps {
                op64: AtomicOps::ADD,
                fop64: AtomicOps::CSWAP,
                ..Default::default()
            },
            ..Default::default()
        };
        let u = build_attr(&a, 16, 8);
        assert_eq!(
            u.cap.flags,
            UCT_IFACE_FLAG_AM_SHORT
                | UCT_IFACE_FLAG_PUT_ZCOPY
                | UCT_IFACE_FLAG_PENDING
                | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE
                | UCT_IFACE_FLAG_CONNECT_TO_EP
                | UCT_IFACE_FLAG_CB_SYNC,
            "rucx-only and tag-offload bits are not announced"
        );
        assert_eq!(
            u.cap.event_flags,
            UCT_IFACE_FLAG_EVENT_FD | UCT_IFACE_FLAG_EVENT_RECV
        );
        assert_eq!(u.cap.atomic64.op_flags, 1 << UCT_ATOMIC_OP_ADD);
        assert_eq!(u.cap.atomic64.fop_flags, 1 << UCT_ATOMIC_OP_CSWAP);
        assert_eq!((u.device_addr_len, u.iface_addr_len), (16, 8));
    }
}
