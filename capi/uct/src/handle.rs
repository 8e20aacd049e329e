//! The handle types every part of this library shares: an interface ([`Iface`]: UCX's
//! operations table, then its [`State`]), an endpoint ([`Ep`]), the active-message handlers and
//! the records of operations that complete later. This module imports no API module, so the
//! modules that implement the calls ([`crate::iface`], [`crate::ep`], [`crate::rma`],
//! [`crate::sink`], [`crate::mem`]) all build on it without importing one another in a circle.

use crate::ffi::*;
use crate::guard::refuse;
use crate::ops::IfaceOps;
use crate::worker::Worker;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::rc::Rc;
use uct::{AnyEp, AnyIface, AnyMd, EpId};

/// The state behind the operations table.
pub struct State {
    /// rucx's interface. Mutably borrowed only by progress and the calls that change it,
    /// never across a client callback except progress's own (see [`State::busy`]).
    pub iface: UnsafeCell<AnyIface>,
    /// The worker it was opened on.
    pub worker: *mut Worker,
    /// The memory domain handle it was opened with.
    pub md: *mut c_void,
    /// rucx's domain of its device.
    pub dom: Rc<AnyMd>,
    /// The attributes `uct_iface_query` gives.
    pub attr: Box<uct_iface_attr_t>,
    /// Active-message handlers by id.
    pub am: UnsafeCell<[AmHandler; UCT_AM_ID_MAX]>,
    /// The client's endpoint error handler and its argument.
    pub err: Option<(uct_error_handler_t, *mut c_void)>,
    /// Bytes before the data of a descriptor, for the client.
    pub rx_headroom: usize,
    /// Live endpoints by rucx id.
    pub eps: RefCell<HashMap<EpId, *mut Ep>>,
    /// Operations with a [`Record`], keyed by their completion id.
    pub records: RefCell<slab::Slab<Record>>,
    /// `UCT_PROGRESS_*` flags enabled, and the progress queue entry.
    pub progress_flags: Cell<c_uint>,
    pub(crate) progress_id: Cell<c_int>,
    /// True while progress runs: calls that change the interface are refused then.
    pub busy: Cell<bool>,
    /// The flush of a caller polling `uct_iface_flush` without a completion.
    pub polled_flush: Cell<Option<usize>>,
    /// Messages the transport gives only for the call ([`uct::EventSink::am`]: the short
    /// ones in shared memory's FIFO elements) go to the handler in place, without
    /// `UCT_CB_PARAM_FLAG_DESC`, as UCX's own transport of that name gives them (its mm
    /// transport: posix, sysv); otherwise they are copied into a descriptor when they fit one.
    pub am_in_place: bool,
    /// The descriptor the next copied message goes into.
    pub(crate) scratch: Cell<*mut u8>,
    /// A handler kept a message it was given in place (reported once).
    pub(crate) misuse_reported: Cell<bool>,
}

/// An interface: the operations table, then the state.
#[repr(C)]
pub struct Iface {
    /// UCX's `uct_iface_t`: the table the header-inline calls read.
    pub ops: IfaceOps,
    /// The state.
    pub st: State,
}

impl Iface {
    /// The interface behind a C handle.
    ///
    /// # Safety
    /// `h` must be NULL or a live handle from [`crate::iface::uct_iface_open`].
    pub unsafe fn from_handle<'a>(name: &str, h: *mut c_void) -> Option<&'a Iface> {
        if h.is_null() {
            refuse(name, UCS_ERR_INVALID_PARAM, "NULL interface");
            return None;
        }
        // SAFETY: forwarded from the caller.
        Some(unsafe { &*h.cast::<Iface>() })
    }

    /// rucx's interface, mutably, for a call that changes it; `Err` (logged) inside progress.
    ///
    /// # Safety
    /// No other reference to the rucx interface may be live (single-threaded use, and
    /// [`State::busy`] keeps progress callbacks out).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn iface_mut(&self, name: &str) -> Result<&mut AnyIface, Status> {
        if self.st.busy.get() {
            return Err(refuse(
                name,
                UCS_ERR_BUSY,
                "called from a callback inside this interface's progress: call it after progress returns",
            ));
        }
        // SAFETY: forwarded from the caller; busy is false, so progress holds no borrow.
        Ok(unsafe { &mut *self.st.iface.get() })
    }

    /// rucx's interface, shared.
    pub fn iface(&self) -> &AnyIface {
        // SAFETY: shared reads of the interface's immutable parts (addresses, attributes)
        // while no call changes it (single-threaded use).
        unsafe { &*self.st.iface.get() }
    }
}

/// The memory domain handle and rucx domain of an interface.
///
/// # Safety
/// `h` must be a live interface handle.
pub unsafe fn md_of(h: *mut c_void) -> (*mut c_void, Rc<AnyMd>) {
    // SAFETY: forwarded from the caller.
    let it = unsafe { &*h.cast::<Iface>() };
    (it.st.md, Rc::clone(&it.st.dom))
}

/// An endpoint: its interface first, as `uct_ep_t`.
#[repr(C)]
pub struct Ep {
    /// UCX's `uct_ep_t::iface`.
    pub iface: *mut Iface,
    /// rucx's endpoint.
    pub ep: AnyEp,
    /// This endpoint's serial number.
    pub serial: u64,
    /// `uct_ep_params_t::user_data`.
    pub user_data: *mut c_void,
    /// rucx's id of it.
    pub id: EpId,
    /// The flush of a caller polling `uct_ep_flush` without a completion.
    pub polled_flush: std::cell::Cell<Option<usize>>,
}

/// An active-message handler set with `uct_iface_set_am_handler`.
#[derive(Clone, Copy)]
pub struct AmHandler {
    /// The callback (`None`: unset).
    pub cb: Option<uct_am_callback_t>,
    /// Its argument.
    pub arg: *mut c_void,
}

/// An operation whose completion carries more than the client's `uct_completion_t`.
pub enum Record {
    /// A 32-bit fetching atomic: the old value goes to `result`.
    Fetch32 {
        /// The client's completion.
        comp: *mut uct_completion_t,
        /// Where the old value goes.
        result: *mut u32,
    },
    /// A 64-bit fetching atomic.
    Fetch64 {
        /// The client's completion.
        comp: *mut uct_completion_t,
        /// Where the old value goes.
        result: *mut u64,
    },
    /// A `get_bcopy` whose data arrive later.
    GetBcopy {
        /// The client's completion.
        comp: *mut uct_completion_t,
        /// The client's function that copies the data out.
        unpack: uct_unpack_callback_t,
        /// Its argument.
        arg: *mut c_void,
    },
    /// A flush started for a caller that polls without a completion (see
    /// [`crate::sink::poll_flush`]); `status` is set when it completes.
    PollFlush {
        /// The flush's status once it completed.
        status: Option<Status>,
    },
}

/// A C buffer as a slice (empty for NULL or length 0).
///
/// # Safety
/// A non-null `p` must point to `len` readable bytes.
pub unsafe fn slice_or_empty<'a>(p: *const u8, len: usize) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}
