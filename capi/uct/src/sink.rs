//! What interface progress delivers, handed to the client: active messages to its handlers
//! (in descriptors it may keep), completions counted down, pending requests retried,
//! endpoint errors to its error handler; and the progress entry points themselves.
//!
//! Received active messages: one of at most [`DESC_COPY_MAX`] bytes is copied into a
//! descriptor laid out as UCX's (`uct_recv_desc_t *`, the interface's `rx_headroom`, the
//! data) and given with `UCT_CB_PARAM_FLAG_DESC`, so the handler may keep it (return
//! `UCS_INPROGRESS`) until `uct_iface_release_desc`. A longer message is given in place,
//! without the flag: the handler reads it during the call. So are the short messages of the
//! shared-memory interfaces (posix, sysv), whatever their size, as UCX's mm transport gives
//! its inline messages ([`State::am_in_place`]): an `am_short` then reaches its handler
//! without a copy.

use crate::ffi::*;
use crate::guard::{hot, outcome};
use crate::handle::{Iface, Record, State};
use std::cell::Cell;
use std::ffi::{c_uint, c_void};
use uct::{CompletionId, EpId, EventSink, Iface as _, PendingId};

/// Counts one completion of `comp` with `status` (the first failure is kept), and calls its
/// function when the count reaches zero.
///
/// # Safety
/// `comp` must be NULL or the client's live `uct_completion_t`.
pub unsafe fn complete(comp: *mut uct_completion_t, status: Status) {
    if comp.is_null() {
        return;
    }
    // SAFETY: the client's completion, live until its count reaches zero.
    unsafe {
        if status != UCS_OK && (*comp).status == UCS_OK {
            (*comp).status = status;
        }
        (*comp).count -= 1;
        if (*comp).count == 0 {
            if let Some(f) = (*comp).func {
                f(comp);
            }
        }
    }
}

/// Completes what `id` names: a client `uct_completion_t`, or a [`Record`] (odd ids).
pub fn complete_id(st: &State, id: CompletionId, result: ucs::Result<u64>) {
    let status = match &result {
        Ok(_) => UCS_OK,
        Err(e) => crate::guard::status_of(e),
    };
    if id.0 & 1 == 0 {
        // SAFETY: an even id is the client's completion pointer given to the operation.
        unsafe { complete(id.0 as *mut uct_completion_t, status) };
        return;
    }
    let key = (id.0 >> 1) as usize;
    if let Some(Record::PollFlush { status: s }) = st.records.borrow_mut().get_mut(key) {
        // Kept for the poller to find, with its status.
        *s = Some(status);
        return;
    }
    let rec = st.records.borrow_mut().try_remove(key);
    let comp = match rec {
        Some(Record::Fetch32 { comp, result: r }) => {
            if let Ok(v) = result {
                // SAFETY: the client's result location, live until completion.
                unsafe { *r = v as u32 };
            }
            comp
        }
        Some(Record::Fetch64 { comp, result: r }) => {
            if let Ok(v) = result {
                // SAFETY: as above.
                unsafe { *r = v };
            }
            comp
        }
        Some(Record::GetBcopy { comp, .. }) => comp,
        // Handled above (kept in place).
        Some(Record::PollFlush { .. }) | None => return,
    };
    // SAFETY: the client's completion recorded with the operation.
    unsafe { complete(comp, status) };
}

pub(crate) fn record(st: &State, r: Record) -> (usize, CompletionId) {
    let key = st.records.borrow_mut().insert(r);
    (key, CompletionId(((key as u64) << 1) | 1))
}

pub(crate) fn forget_record(st: &State, key: usize) {
    st.records.borrow_mut().try_remove(key);
}

/// Longest active message copied into a descriptor the handler may keep. Copying up to four
/// cache lines costs less than the handler's own work; a longer message is handed in place,
/// so bandwidth runs pay no copy at the receiver.
pub const DESC_COPY_MAX: usize = 256;

/// A flush for a caller that polls without a completion (`uct_iface_flush(iface, 0, NULL)`
/// in a loop, as `ucx_perftest` does): the first call starts one flush with a record of its
/// own, later calls answer `UCS_INPROGRESS` until it completed, and the call after that
/// checks again from the start. Starting a new flush on every poll would never finish on a
/// transport whose flush itself sends a request (tcp).
pub fn poll_flush(
    st: &State,
    slot: &Cell<Option<usize>>,
    name: &str,
    flush: impl FnOnce(CompletionId) -> ucs::Result<uct::Outcome>,
) -> Status {
    if let Some(key) = slot.get() {
        let status = match st.records.borrow().get(key) {
            Some(Record::PollFlush { status }) => *status,
            _ => Some(UCS_OK),
        };
        match status {
            None => return UCS_INPROGRESS,
            Some(s) => {
                st.records.borrow_mut().try_remove(key);
                slot.set(None);
                if s != UCS_OK {
                    return s;
                }
            }
        }
    }
    let key = st
        .records
        .borrow_mut()
        .insert(Record::PollFlush { status: None });
    let id = CompletionId(((key as u64) << 1) | 1);
    match flush(id) {
        Ok(uct::Outcome::InProgress) => {
            slot.set(Some(key));
            UCS_INPROGRESS
        }
        r => {
            st.records.borrow_mut().try_remove(key);
            match outcome(r, name) {
                UCS_ERR_NO_RESOURCE => UCS_INPROGRESS,
                s => s,
            }
        }
    }
}

/// `uct_recv_desc_t` of every descriptor this library hands out: its callback frees it.
static RELEASE_DESC: uct_recv_desc_t = uct_recv_desc_t { cb: release_desc };

/// Frees a descriptor given with `UCT_CB_PARAM_FLAG_DESC` (called by the header-inline
/// `uct_iface_release_desc(desc)`, `desc` being the data minus `rx_headroom`).
unsafe extern "C" fn release_desc(_this: *mut uct_recv_desc_t, desc: *mut c_void) {
    // SAFETY: desc is 8 bytes into a block from new_scratch.
    unsafe { libc::free(desc.cast::<u8>().sub(8).cast()) }
}

/// A descriptor block: the release pointer, `headroom` bytes, room for DESC_COPY_MAX bytes.
pub(crate) fn new_scratch(headroom: usize) -> *mut u8 {
    // SAFETY: plain allocation.
    let p = unsafe { libc::malloc(8 + headroom + DESC_COPY_MAX) }.cast::<u8>();
    if !p.is_null() {
        // SAFETY: the block starts with room for the pointer.
        unsafe {
            p.cast::<*const uct_recv_desc_t>()
                .write_unaligned(&RELEASE_DESC)
        };
    }
    p
}

/// Receives what rucx's progress delivers and calls the client.
pub struct Sink<'a> {
    st: &'a State,
}

impl Sink<'_> {
    /// The handler of `id`; `None` (with a log line) for an id without one.
    #[inline(always)]
    fn handler(&self, id: u8, data: &[u8]) -> Option<(uct_am_callback_t, *mut c_void)> {
        // SAFETY: handlers change only through uct_iface_set_am_handler, which copies whole
        // entries; a copy is read here.
        let h = unsafe { (*self.st.am.get())[id as usize] };
        match h.cb {
            Some(cb) => Some((cb, h.arg)),
            None => {
                no_handler(id, data.len());
                None
            }
        }
    }

    /// Gives `data` to the handler of `id` in a descriptor it may keep when it fits one
    /// ([`DESC_COPY_MAX`]), else in place.
    #[inline(always)]
    fn deliver_desc(&mut self, id: u8, data: &[u8]) {
        let Some((cb, arg)) = self.handler(id, data) else {
            return;
        };
        let scratch = self.st.scratch.get();
        if data.len() <= DESC_COPY_MAX && !scratch.is_null() {
            // SAFETY: the block holds 8 + headroom + DESC_COPY_MAX bytes.
            let dst = unsafe { scratch.add(8 + self.st.rx_headroom) };
            // SAFETY: data fits (checked above).
            unsafe { copy_small(data, dst) };
            // SAFETY: the client's handler, with the descriptor's data.
            let s = unsafe { cb(arg, dst.cast(), data.len(), UCT_CB_PARAM_FLAG_DESC) };
            if s == UCS_INPROGRESS {
                // The handler keeps the descriptor until uct_iface_release_desc.
                self.st.scratch.set(new_scratch(self.st.rx_headroom));
            }
        } else {
            self.deliver_in_place(cb, arg, id, data);
        }
    }

    /// Gives `data` to the handler in place, without `UCT_CB_PARAM_FLAG_DESC`: it reads the
    /// message during the call and may not keep it.
    #[inline(always)]
    fn deliver_in_place(&mut self, cb: uct_am_callback_t, arg: *mut c_void, id: u8, data: &[u8]) {
        // SAFETY: the client's handler, reading the message in place during the call.
        let s = unsafe { cb(arg, data.as_ptr() as *mut c_void, data.len(), 0) };
        if s == UCS_INPROGRESS {
            kept_in_place(self.st, id);
        }
    }
}

/// The log line for an active message whose id has no handler (it is dropped).
#[cold]
#[inline(never)]
fn no_handler(id: u8, len: usize) {
    tracing::warn!(
        id,
        len,
        "active message for an id without a handler dropped"
    );
}

/// The log line (once per interface) for a handler that returned `UCS_INPROGRESS` for a
/// message given in place.
#[cold]
#[inline(never)]
fn kept_in_place(st: &State, id: u8) {
    if !st.misuse_reported.replace(true) {
        tracing::error!(
            "active message handler for id {id} returned UCS_INPROGRESS for a message \
             given without UCT_CB_PARAM_FLAG_DESC: the data is valid only during the call"
        );
    }
}

/// Copies `data` to `dst`: a message of 8 to 16 bytes (an active message's header and a
/// short payload, the latency tests' size) as two overlapping 8-byte moves, longer ones with
/// `memcpy`.
///
/// # Safety
/// `dst` must have room for `data.len()` bytes.
#[inline(always)]
unsafe fn copy_small(data: &[u8], dst: *mut u8) {
    let n = data.len();
    let src = data.as_ptr();
    if (8..=16).contains(&n) {
        // SAFETY: both 8-byte windows lie inside `data` and inside `dst`'s room (n >= 8).
        unsafe {
            let head = src.cast::<u64>().read_unaligned();
            let tail = src.add(n - 8).cast::<u64>().read_unaligned();
            dst.cast::<u64>().write_unaligned(head);
            dst.add(n - 8).cast::<u64>().write_unaligned(tail);
        }
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    }
}

impl EventSink for Sink<'_> {
    /// A message the transport gives only for the call: on an interface whose short messages
    /// are given in place ([`State::am_in_place`], the shared-memory ones, whose `am` messages
    /// are the short ones in their FIFO elements) it is handed over where it lies, without
    /// `UCT_CB_PARAM_FLAG_DESC`, as UCX's mm transport does; elsewhere in a descriptor when it
    /// fits one.
    #[inline(always)]
    fn am(&mut self, id: u8, data: &[u8]) {
        if self.st.am_in_place {
            if let Some((cb, arg)) = self.handler(id, data) {
                self.deliver_in_place(cb, arg, id, data);
            }
        } else {
            self.deliver_desc(id, data);
        }
    }

    /// A message in a buffer the transport would lend (shared memory's bcopy messages): in a
    /// descriptor when it fits one (the buffer itself is not lent to C), else in place.
    #[inline(always)]
    fn am_keep(&mut self, id: u8, data: &[u8], _keep: uct::AmKeep<'_>) {
        self.deliver_desc(id, data);
    }

    fn completion(&mut self, comp: CompletionId, result: ucs::Result<u64>) {
        complete_id(self.st, comp, result);
    }

    fn get_bcopy_data(&mut self, comp: CompletionId, data: &[u8]) {
        let rec = self
            .st
            .records
            .borrow()
            .get((comp.0 >> 1) as usize)
            .map(|r| match r {
                Record::GetBcopy { unpack, arg, .. } => Some((*unpack, *arg)),
                _ => None,
            });
        if let Some(Some((unpack, arg))) = rec {
            // SAFETY: the client's unpack callback with the data, during the call.
            unsafe { unpack(arg, data.as_ptr().cast(), data.len()) };
        }
    }

    fn pending(&mut self, _ep: EpId, req: PendingId) -> bool {
        let r = req.0 as *mut uct_pending_req_t;
        // SAFETY: the client's request, queued with uct_ep_pending_add and still owned by us.
        match unsafe { (*r).func } {
            // UCS_OK: done and removed. UCS_INPROGRESS or an error: kept first in the queue,
            // and dispatch stops until resources return again.
            // SAFETY: the client's callback with its request.
            Some(f) => (unsafe { f(r) }) == UCS_OK,
            None => true,
        }
    }

    fn ep_error(&mut self, ep: EpId, err: ucs::Error) {
        let status = crate::guard::status_of(&err);
        let ep_h = self.st.eps.borrow().get(&ep).copied();
        match (self.st.err, ep_h) {
            (Some((handler, arg)), Some(ep_h)) => {
                // SAFETY: the client's error handler with its endpoint.
                unsafe { handler(arg, ep_h.cast(), status) };
            }
            // As UCX: without a handler the failure is only noted (the endpoint's operations
            // fail from now on); a peer closing at the end of a run is no error.
            _ => tracing::debug!(
                "endpoint {ep_h:?} failed and the interface has no error handler: {err}"
            ),
        }
    }
}

/// The interface progress function put in the worker's queue.
pub(crate) unsafe extern "C" fn progress_cb(arg: *mut c_void) -> c_uint {
    // SAFETY: the queue holds live interfaces only (removed at close).
    unsafe { iface_progress(arg) }
}

/// `unsigned uct_iface_progress(uct_iface_h)` (ops table): one progress pass.
///
/// # Safety
/// `h` must be a live interface handle.
pub(crate) unsafe extern "C" fn iface_progress(h: *mut c_void) -> c_uint {
    hot("uct_iface_progress", 0, || {
        // SAFETY: forwarded from the caller.
        let it = unsafe { &*h.cast::<Iface>() };
        if it.st.busy.replace(true) {
            return 0; // progress from a callback of this progress: nothing more to do
        }
        let mut sink = Sink { st: &it.st };
        // SAFETY: busy was false: no other borrow of the rucx interface is live.
        let n = unsafe { &mut *it.st.iface.get() }.progress(&mut sink);
        it.st.busy.set(false);
        n as c_uint
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn completions_count_down_keep_the_first_failure_and_call_once() {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        unsafe extern "C" fn cb(_c: *mut uct_completion_t) {
            CALLS.fetch_add(1, Ordering::Relaxed);
        }
        let mut c = uct_completion_t {
            func: Some(cb),
            count: 3,
            status: UCS_OK,
        };
        // SAFETY: a live completion.
        unsafe {
            complete(&mut c, UCS_OK);
            complete(&mut c, UCS_ERR_IO_ERROR);
            assert_eq!((c.count, c.status), (1, UCS_ERR_IO_ERROR));
            complete(&mut c, UCS_ERR_CANCELED);
            assert_eq!(
                (c.count, c.status),
                (0, UCS_ERR_IO_ERROR),
                "the first failure is kept"
            );
            assert_eq!(CALLS.load(Ordering::Relaxed), 1);
            complete(std::ptr::null_mut(), UCS_OK);
        }
    }
}
