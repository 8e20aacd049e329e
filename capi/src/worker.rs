//! `ucp_worker_h`: a rucx [`ucp::Worker`] behind a reentrant lock, with the queues that carry
//! completions, endpoint failures and active messages out of rucx's progress call to the
//! client's callbacks.
//!
//! Thread modes: a `UCS_THREAD_MODE_MULTI` worker is locked on entry to each call; the lock
//! admits its holder again, so callbacks may call into the library. Single-thread and
//! serialized workers of a context without `mt_workers_shared` take no lock: their client calls
//! in from one thread at a time, as the header requires.

use crate::ctext::write_name;
use crate::ffi::*;
use crate::guard::{check_mask, fail, ffi, ffi_hot, refuse};
use crate::handles::{worker_ref, Cb, Context, Inner, OpArgs, Pool, ReqHdr, Worker};
use crate::lock::RLock;
use crate::request::{complete, hooked, run_callback, submit};
use std::cell::Cell;
use std::cell::RefCell;
use std::ffi::{c_uint, c_void, CStr};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use ucp::{AmArrival, Completion, EpHandle, WorkerAddress};

/// [`Worker::progress`]'s mask: queued completions or endpoint failures (beside ucp's
/// `QUEUED_RECV_OK` and `QUEUED_AM`).
const QUEUED_OTHERS: u8 = 2;
const _: () = assert!(QUEUED_OTHERS & (ucp::QUEUED_RECV_OK | ucp::QUEUED_AM) == 0);

impl Worker {
    /// Runs rucx's progress, then (outside it) the callbacks of the requests it finished, and
    /// the completions, endpoint failures and active messages it queued. Gives the number of
    /// events.
    #[inline(always)]
    pub fn progress(&self) -> usize {
        let _g = self.lock.lock();
        let (n, queued) = {
            let mut i = self.inner.borrow_mut();
            let n = i.w.progress();
            // The common case, a spin with nothing finished, touches no queue.
            let others = !i.done.is_empty() || i.w.has_done_tokens() || i.failures_queued();
            // ucp's bits (receives as records, active messages) and this library's own.
            (
                n,
                i.w.client_queued() | if others { QUEUED_OTHERS } else { 0 },
            )
        };
        let n = if queued != 0 || !self.due_head.get().is_null() {
            n + self.after_progress(queued)
        } else {
            n
        };
        if self.sockets.get() {
            n + crate::conn::poll_sockets(self)
        } else {
            n
        }
    }

    /// The part of [`Worker::progress`] after rucx's progress call when it finished something:
    /// the receives that finished into client memory without error (`queued` has
    /// `QUEUED_RECV_OK`), the due callbacks, then the queued completions and endpoint failures
    /// ([`QUEUED_OTHERS`]) and the active messages (`QUEUED_AM`).
    #[inline(never)]
    fn after_progress(&self, queued: u8) -> usize {
        let n = if queued & ucp::QUEUED_RECV_OK != 0 {
            self.deliver_recv_ok()
        } else {
            0
        };
        let n = n + self.run_due();
        let n = if queued & QUEUED_OTHERS != 0 {
            n + self.deliver()
        } else {
            n
        };
        if queued & ucp::QUEUED_AM != 0 {
            n + self.deliver_ams()
        } else {
            n
        }
    }

    /// Calls the callbacks [`hooked`] queued, in order (also those queued by callbacks that
    /// finish more operations). Gives their number.
    #[inline(always)]
    fn run_due(&self) -> usize {
        let mut n = 0;
        loop {
            let h = self.due_head.get();
            if h.is_null() {
                return n;
            }
            // SAFETY: a queued request's header (queued requests are not recycled).
            let next = unsafe { (*h).next };
            self.due_head.set(next);
            if next.is_null() {
                self.due_tail.set(std::ptr::null_mut());
            }
            // SAFETY: `h` was just taken off the queue.
            unsafe { run_callback(self, h) };
            n += 1;
        }
    }

    /// True when requests finished through the completion hook wait for their callbacks.
    pub fn has_due(&self) -> bool {
        !self.due_head.get().is_null()
    }

    /// Queues request `h` (finished, callback due) for [`Worker::run_due`].
    ///
    /// # Safety
    /// `h` is a live request header of this worker, not queued already.
    #[inline(always)]
    pub unsafe fn due_push(&self, h: *mut ReqHdr) {
        let tail = self.due_tail.get();
        // SAFETY: `h` is a live header; `tail`, when set, is a queued one.
        unsafe {
            (*h).next = std::ptr::null_mut();
            if tail.is_null() {
                self.due_head.set(h);
            } else {
                (*tail).next = h;
            }
        }
        self.due_tail.set(h);
    }

    /// Runs the client's callbacks for what the last progress call produced: completions, then
    /// endpoint failures. Gives their number.
    #[inline(never)]
    fn deliver(&self) -> usize {
        let (done, failed) = {
            let i = self.inner.borrow();
            (
                !i.done.is_empty() || i.w.has_done_tokens(),
                i.failures_queued(),
            )
        };
        let n = if done { self.deliver_done() } else { 0 };
        if failed {
            n + self.deliver_failures()
        } else {
            n
        }
    }

    /// Completes the receives rucx queued as finished into client memory without error
    /// (`ucp::Worker::pop_recv_ok`), in order, calling their callbacks (one at a time off the
    /// queue: a callback that progresses the worker completes the ones behind its own). Gives
    /// their number.
    #[inline(always)]
    fn deliver_recv_ok(&self) -> usize {
        let mut n = 0;
        loop {
            let (e, more) = {
                let mut i = self.inner.borrow_mut();
                match i.w.pop_recv_ok() {
                    Some(e) => (e, i.w.has_recv_ok()),
                    None => return n,
                }
            };
            // SAFETY: the token of a hook receive is its live header, not completed yet.
            unsafe { crate::request::complete_recv_ok(self, &e) };
            n += 1;
            if !more {
                return n;
            }
        }
    }

    /// Runs the callbacks of the finished operations queued for the client. Gives their
    /// number.
    fn deliver_done(&self) -> usize {
        let mut done = {
            let mut i = self.inner.borrow_mut();
            let mut done = std::mem::take(&mut *self.spare.borrow_mut());
            if !i.done.is_empty() {
                std::mem::swap(&mut done, &mut i.done);
            }
            i.w.take_done_tokens(&mut done);
            done
        };
        let n = done.len();
        // Each entry is completed where it lies and then dropped; the length is cleared first,
        // so a callback that panics leaks the rest instead of dropping them twice.
        // SAFETY: `done[..n]` are initialized; each is dropped once, and `done` no longer owns
        // them once its length is 0.
        unsafe {
            done.set_len(0);
            let base = done.as_mut_ptr();
            for k in 0..n {
                let e = base.add(k);
                complete(self, (*e).0 as usize, &(*e).1);
                // A successful completion without a buffer owns nothing to drop.
                if (*e).1.status.is_err() || (*e).1.buf.is_some() {
                    std::ptr::drop_in_place(e);
                }
            }
        }
        let old = std::mem::replace(&mut *self.spare.borrow_mut(), done);
        if old.capacity() != 0 {
            // A callback progressed the worker and left its own vector: free it.
            drop(old);
        } else {
            std::mem::forget(old);
        }
        n
    }

    /// Runs the handlers of the active messages queued. Gives their number.
    #[inline(always)]
    fn deliver_ams(&self) -> usize {
        let mut n = 0;
        // One message at a time off the front: a handler that progresses the worker delivers
        // the ones behind its own, and each is delivered once.
        loop {
            // The ring of small messages first: they are older than the general queue's.
            match crate::am::deliver_small(self) {
                Some(true) => {
                    n += 1;
                    continue;
                }
                Some(false) => return n + 1,
                None => {}
            }
            let a = self.inner.borrow_mut().w.am_pop();
            let Some(a) = a else {
                return n;
            };
            n += 1;
            match a {
                AmArrival::Small(id, mut m, ep) => {
                    crate::am::deliver_small_queued(self, id, &mut m, ep)
                }
                AmArrival::Eager(id, buf, header_len, ep) => {
                    crate::am::deliver_eager(self, id, buf, header_len, ep)
                }
                AmArrival::Whole(id, data, ep) => self.deliver_am(id, data, ep),
                AmArrival::Rndv(id, msg, ep) => {
                    let (header, d) = *msg;
                    crate::am::deliver_rndv(self, id, header, d, ep)
                }
            }
        }
    }

    /// Runs the error handlers of the endpoints that failed. Gives their number.
    #[cold]
    #[inline(never)]
    fn deliver_failures(&self) -> usize {
        let errs = std::mem::take(&mut *self.inner.borrow().ep_errors.borrow_mut());
        let n = errs.len();
        for (h, status) in errs {
            self.ep_failed(h, status);
        }
        n
    }

    /// Runs the error handlers of the client endpoints over failed rucx endpoint `h`. When
    /// none of them has one (UCX's `UCP_ERR_HANDLING_MODE_NONE`, as Open MPI and MPICH create
    /// their endpoints), nobody would learn of the failure, and a tag receive (which names no
    /// peer) waiting for the dead peer would wait for ever: the failure is logged as an error
    /// naming the peer, and fails every tag receive waiting now and every later one that
    /// finds no message (for such a client a failed peer ends the job; MPI prints the error
    /// and aborts).
    pub(crate) fn ep_failed(&self, h: EpHandle, status: Status) {
        let eps: Vec<_> = self.inner.borrow().eps.of(h).collect();
        // SAFETY: live client endpoints (removed from `eps` before they are freed).
        let handled = eps.iter().any(|&ep| unsafe { (*ep).err_cb.is_some() });
        if !eps.is_empty() && !handled {
            self.unhandled_failure(h, status);
        }
        for ep in eps {
            // SAFETY: a live client endpoint (removed from `eps` before it is freed).
            let (cb, arg) = unsafe {
                if (*ep).failed {
                    continue;
                }
                (*ep).failed = true;
                ((*ep).err_cb, (*ep).err_arg)
            };
            if let Some(cb) = cb {
                // SAFETY: the client's error handler with its documented arguments.
                unsafe { cb(arg, ep.cast(), status) };
            }
        }
    }

    /// [`Worker::ep_failed`] without an error handler to run: tag receives waiting now, and
    /// later ones that find no message, fail; on a worker with no error handler at all that
    /// ends the process (see `fatal_recv_failure` in [`crate::request`]).
    #[cold]
    fn unhandled_failure(&self, h: EpHandle, status: Status) {
        let mut i = self.inner.borrow_mut();
        let err = match i.w.ep_status(h) {
            Err(e) => e,
            Ok(()) => ucs::Error::PeerFailure(format!("status {status}")),
        };
        let n = i.w.fail_tag_recvs(err.clone());
        tracing::error!(
            "{err}; the endpoint has no error handler (UCP_ERR_HANDLING_MODE_NONE): failing \
             the worker's {n} waiting tag receives, and later ones that find no message"
        );
    }

    fn deliver_am(&self, id: u16, mut data: Vec<u8>, ep: EpHandle) {
        let handler = self.inner.borrow().am_handlers.get(id);
        let reply = crate::am::reply_ep(self, ep);
        match handler {
            Some((cb, arg, _)) => {
                // SAFETY: the client's handler; the data stays valid during the call (no
                // UCP_CB_PARAM_FLAG_DATA: the handler may not keep it).
                let s = unsafe {
                    cb(
                        arg as *mut c_void,
                        data.as_mut_ptr().cast(),
                        data.len(),
                        reply as *mut c_void,
                        0,
                    )
                };
                if s == UCS_INPROGRESS {
                    tracing::warn!("active message {id}: the handler kept data it was not given (no UCP_CB_PARAM_FLAG_DATA); ignored");
                }
            }
            None => tracing::warn!("active message {id} arrived with no handler set; dropped"),
        }
        self.inner.borrow_mut().w.am_data_release(data);
    }
}

const WPARAM_KNOWN: u64 = UCP_WORKER_PARAM_FIELD_THREAD_MODE
    | UCP_WORKER_PARAM_FIELD_CPU_MASK
    | UCP_WORKER_PARAM_FIELD_EVENTS
    | UCP_WORKER_PARAM_FIELD_USER_DATA
    | UCP_WORKER_PARAM_FIELD_EVENT_FD
    | UCP_WORKER_PARAM_FIELD_FLAGS
    | UCP_WORKER_PARAM_FIELD_NAME
    | UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT
    | UCP_WORKER_PARAM_FIELD_CLIENT_ID;

/// `ucs_status_t ucp_worker_create(ucp_context_h context, const ucp_worker_params_t *params,
/// ucp_worker_h *worker_p)`. Accepted fields: thread mode (all modes are safe), name, flags
/// (`UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK`), and hints rucx has no use for (CPU mask, events,
/// user data, AM alignment, client id). An external event fd is not supported.
///
/// # Safety
/// A live context; `params` and `worker_p` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_create(
    context: *mut Context,
    params: *const WorkerParams,
    worker_p: *mut *mut Worker,
) -> Status {
    const NAME: &str = "ucp_worker_create";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if context.is_null() || params.is_null() || worker_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: caller pointers.
        let (ctx, p) = unsafe { (&*context, &*params) };
        if let Err(s) = check_mask(
            NAME,
            "ucp_worker_params_t.field_mask",
            p.field_mask,
            WPARAM_KNOWN,
        ) {
            return s;
        }
        let has = |b: u64| p.field_mask & b != 0;
        let wakeup = ctx.features & UCP_FEATURE_WAKEUP != 0;
        if has(UCP_WORKER_PARAM_FIELD_EVENT_FD) && !wakeup {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                "an event fd needs a context with UCP_FEATURE_WAKEUP",
            );
        }
        // Only `UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK` has a meaning; other bits are ignored, as
        // UCX does: Open MPI 4.1 ORs that flag into an uninitialised `flags` field.
        if has(UCP_WORKER_PARAM_FIELD_FLAGS) && p.flags & !UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK != 0
        {
            tracing::debug!(
                "{NAME}: ignoring unknown worker flags {:#x}",
                p.flags & !UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK
            );
        }
        let mode = if has(UCP_WORKER_PARAM_FIELD_THREAD_MODE) {
            p.thread_mode
        } else {
            UCS_THREAD_MODE_SINGLE
        };
        if mode > UCS_THREAD_MODE_MULTI {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, format!("thread mode {mode}"));
        }
        if has(UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT)
            && p.am_alignment > 1
            && !p.am_alignment.is_power_of_two()
        {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                format!("am_alignment {} is not a power of two", p.am_alignment),
            );
        }
        let mut w = match ucp::Worker::new(&ctx.ucp) {
            Ok(w) => w,
            Err(e) => return fail(NAME, &e),
        };
        let waker = if wakeup {
            match w.waker() {
                Ok(k) => Some(k),
                Err(e) => return fail(NAME, &e),
            }
        } else {
            None
        };
        let ext = match crate::worker_ext::Ext::new(
            &w,
            has(UCP_WORKER_PARAM_FIELD_EVENT_FD).then_some(p.event_fd),
        ) {
            Ok(x) => x,
            Err(s) => return refuse(NAME, s, "cannot set up the worker's wake-up descriptor"),
        };
        let name = if has(UCP_WORKER_PARAM_FIELD_NAME) && !p.name.is_null() {
            // SAFETY: a C string.
            unsafe { CStr::from_ptr(p.name) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("{}:{:x}", ctx.name, w.uuid())
        };
        let inner = Inner {
            w,
            done: Vec::new(),
            ep_errors: Rc::default(),
            am_handlers: Default::default(),
            am_recv_handlers: Default::default(),
            eps: Default::default(),
        };
        let worker = Box::new(Worker {
            lock: RLock::new(mode == UCS_THREAD_MODE_MULTI || ctx.mt_workers_shared),
            inner: RefCell::new(inner),
            pool: RefCell::new(Pool::new(
                ctx.user_req_size,
                ctx.request_init,
                ctx.request_cleanup,
            )),
            due_head: Cell::new(std::ptr::null_mut()),
            due_tail: Cell::new(std::ptr::null_mut()),
            spare: RefCell::new(Vec::with_capacity(64)),
            ctx: context,
            thread_mode: mode,
            name,
            ext: RefCell::new(ext),
            sockets: Cell::new(false),
            waker,
            client_id: if has(UCP_WORKER_PARAM_FIELD_CLIENT_ID) {
                p.client_id
            } else {
                0
            },
            am_alignment: if has(UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT) {
                p.am_alignment.max(1)
            } else {
                1
            },
            handles_errors: Cell::new(false),
        });
        let raw = Box::into_raw(worker);
        let addr = raw as usize;
        // SAFETY: the worker just made; the hook is removed in ucp_worker_destroy before the
        // worker is freed, so `addr` is live whenever rucx calls it.
        unsafe { &*raw }
            .inner
            .borrow_mut()
            .w
            .set_completion_hook(Some(Box::new(move |token, c| {
                // SAFETY: as above.
                hooked(unsafe { &*(addr as *const Worker) }, token, c)
            })));
        // Receives that finish into client memory without error come as plain records instead,
        // completed by `deliver_recv_ok` after progress.
        // SAFETY: the worker just made.
        unsafe { &*raw }.inner.borrow_mut().w.queue_recv_ok(true);
        ctx.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(raw as usize);
        // SAFETY: the worker just made.
        crate::mem::bind_unbound(ctx, unsafe { &*raw });
        // SAFETY: checked non-null.
        unsafe { *worker_p = raw };
        UCS_OK
    })
}

/// `void ucp_worker_destroy(ucp_worker_h worker)`: closes the worker; request memories are
/// cleaned up (`request_cleanup`) and freed.
///
/// # Safety
/// A worker from `ucp_worker_create`, destroyed once, with no call running on it.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_destroy(worker: *mut Worker) {
    ffi("ucp_worker_destroy", (), || {
        if worker.is_null() {
            return;
        }
        // SAFETY: created by ucp_worker_create.
        let w = unsafe { Box::from_raw(worker) };
        // SAFETY: the context outlives its workers.
        let ctx = unsafe { &*w.ctx };
        ctx.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&x| x != worker as usize);
        // Results rucx gives from now on (while it drops) queue in rucx and go with it.
        w.inner.borrow_mut().w.set_completion_hook(None);
        release_ext(&w);
        let Worker { inner, pool, .. } = *w;
        // rucx's worker (and the callbacks that point at requests) goes first.
        drop(inner);
        drop(pool);
    })
}

/// `unsigned ucp_worker_progress(ucp_worker_h worker)`.
///
/// A call that found nothing ends with a spin-loop hint (`pause`): clients call this in a
/// tight loop while they wait, and a loop without it is slower to see the message it waits
/// for. Measured (UCX 1.22's ucx_perftest on rucx's libraries, tag_lat 8 B over shared memory,
/// pinned, alternating, medians of 9): 0.255 -> 0.233 us; an Open MPI 8 B ping-pong (9 runs):
/// 0.268 -> 0.236 us; tag_bw and ucp_am_bw 8 B unchanged. (The same hint in ucp's own idle
/// path gave 0.214 -> 0.200 and 0.286 -> 0.253, but nothing for the Rust API's perftest.)
///
/// # Safety
/// A live worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_progress(worker: *mut Worker) -> c_uint {
    ffi_hot("ucp_worker_progress", 0, || {
        match worker_ref("ucp_worker_progress", worker) {
            Ok(w) => {
                let n = w.progress();
                if n == 0 {
                    std::hint::spin_loop();
                }
                n.min(c_uint::MAX as usize) as c_uint
            }
            Err(_) => 0,
        }
    })
}

/// The address bytes given to clients: a 4-byte little-endian length, then rucx's packed
/// worker address (so `ucp_ep_create`, which gets no length, knows where it ends). With
/// `net_only`, only network transports are kept.
pub fn client_address(w: &ucp::Worker, net_only: bool) -> Result<Vec<u8>, ucs::Error> {
    let mut raw = w.address().to_vec();
    if net_only {
        let mut a = WorkerAddress::decode(&raw)?;
        a.tls
            .retain(|t| matches!(t.tl_name.as_str(), "tcp" | "rc_verbs"));
        raw = a.to_bytes()?;
    }
    let mut out = Vec::with_capacity(4 + raw.len());
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    out.extend_from_slice(&raw);
    Ok(out)
}

/// Hands an address to the client as malloc'd memory (freed by `ucp_worker_release_address`).
fn give_address(bytes: &[u8]) -> *mut c_void {
    // SAFETY: malloc of a non-zero size, filled below.
    let p = unsafe { libc::malloc(bytes.len()) };
    if !p.is_null() {
        // SAFETY: `p` holds `bytes.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p as *mut u8, bytes.len()) };
    }
    p
}

/// `ucs_status_t ucp_worker_get_address(ucp_worker_h worker, ucp_address_t **address_p,
/// size_t *address_length_p)`.
///
/// # Safety
/// A live worker and writable pointers.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_address(
    worker: *mut Worker,
    address_p: *mut *mut c_void,
    address_length_p: *mut usize,
) -> Status {
    const NAME: &str = "ucp_worker_get_address";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        if address_p.is_null() || address_length_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL output pointer");
        }
        let _g = w.lock.lock();
        let bytes = match client_address(&w.inner.borrow().w, false) {
            Ok(b) => b,
            Err(e) => return fail(NAME, &e),
        };
        let p = give_address(&bytes);
        if p.is_null() {
            return UCS_ERR_NO_MEMORY;
        }
        // SAFETY: checked non-null.
        unsafe {
            *address_p = p;
            *address_length_p = bytes.len();
        }
        UCS_OK
    })
}

/// `void ucp_worker_release_address(ucp_worker_h worker, ucp_address_t *address)`.
///
/// # Safety
/// An address from `ucp_worker_get_address` or `ucp_worker_query`, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_release_address(_worker: *mut Worker, address: *mut c_void) {
    ffi("ucp_worker_release_address", (), || {
        // SAFETY: malloc'd by give_address (free(NULL) is a no-op).
        unsafe { libc::free(address) };
    })
}

/// `ucs_status_t ucp_worker_query(ucp_worker_h worker, ucp_worker_attr_t *attr)`. With
/// `UCP_WORKER_ADDRESS_FLAG_NET_ONLY` the address carries only network transports.
///
/// # Safety
/// A live worker and a writable `attr`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_query(worker: *mut Worker, attr: *mut WorkerAttr) -> Status {
    const NAME: &str = "ucp_worker_query";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        if attr.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "attr is NULL");
        }
        // SAFETY: the caller's struct.
        let a = unsafe { &mut *attr };
        let known = UCP_WORKER_ATTR_FIELD_THREAD_MODE
            | UCP_WORKER_ATTR_FIELD_ADDRESS
            | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS
            | UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER
            | UCP_WORKER_ATTR_FIELD_NAME
            | UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING;
        if let Err(s) = check_mask(NAME, "ucp_worker_attr_t.field_mask", a.field_mask, known) {
            return s;
        }
        let has = |b: u64| a.field_mask & b != 0;
        if has(UCP_WORKER_ATTR_FIELD_THREAD_MODE) {
            a.thread_mode = w.thread_mode;
        }
        if has(UCP_WORKER_ATTR_FIELD_ADDRESS) {
            let flags = if has(UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS) {
                a.address_flags
            } else {
                0
            };
            if flags & !UCP_WORKER_ADDRESS_FLAG_NET_ONLY != 0 {
                // UCX tests the bit it knows and ignores the others.
                tracing::debug!(
                    "{NAME}: ignoring unknown address flags {:#x}",
                    flags & !UCP_WORKER_ADDRESS_FLAG_NET_ONLY
                );
            }
            let _g = w.lock.lock();
            let bytes = match client_address(
                &w.inner.borrow().w,
                flags & UCP_WORKER_ADDRESS_FLAG_NET_ONLY != 0,
            ) {
                Ok(b) => b,
                Err(e) => return fail(NAME, &e),
            };
            let p = give_address(&bytes);
            if p.is_null() {
                return UCS_ERR_NO_MEMORY;
            }
            a.address = p;
            a.address_length = bytes.len();
        }
        if has(UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER) {
            a.max_am_header = crate::am::MAX_AM_HEADER;
        }
        if has(UCP_WORKER_ATTR_FIELD_NAME) {
            write_name(&mut a.name, &w.name);
        }
        if has(UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING) {
            a.max_debug_string = crate::ctext::MAX_INFO_STRING;
        }
        UCS_OK
    })
}

/// `ucs_status_ptr_t ucp_worker_flush_nb(ucp_worker_h worker, unsigned flags,
/// ucp_send_callback_t cb)`: completes when every operation started before has completed
/// remotely.
///
/// # Safety
/// A live worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nb(
    worker: *mut Worker,
    flags: c_uint,
    cb: Option<SendCb>,
) -> StatusPtr {
    const NAME: &str = "ucp_worker_flush_nb";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return status_ptr(s),
        };
        if flags != 0 {
            // Reserved in UCX, which ignores them.
            tracing::debug!("{NAME}: ignoring flags {flags:#x}");
        }
        let _g = w.lock.lock();
        let res = w.inner.borrow_mut().w.flush();
        if let Ok(ucp::Op::Done(Completion { status: Ok(()), .. })) = &res {
            return status_ptr(UCS_OK); // nothing was outstanding
        }
        let cb = cb.map(Cb::Send).unwrap_or(Cb::None);
        submit(
            NAME,
            w,
            res,
            &OpArgs::with_cb(cb, false),
            crate::datatype::Finish::None,
        )
    })
}

/// `ucs_status_ptr_t ucp_worker_flush_nbx(ucp_worker_h worker, const ucp_request_param_t *param)`.
///
/// # Safety
/// A live worker and a valid `param`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nbx(
    worker: *mut Worker,
    param: *const RequestParam,
) -> StatusPtr {
    const NAME: &str = "ucp_worker_flush_nbx";
    ffi(NAME, status_ptr(UCS_ERR_NO_MEMORY), || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: the caller's param.
        let nbx = match unsafe { crate::param::parse_param(NAME, param, true) } {
            Ok(n) => n,
            Err(s) => return status_ptr(s),
        };
        let _g = w.lock.lock();
        let res = w.inner.borrow_mut().w.flush();
        submit(
            NAME,
            w,
            res,
            &nbx.send_args(),
            crate::datatype::Finish::None,
        )
    })
}

/// The first flag bit UCX keeps for itself in AM handler flags.
const AM_CB_PRIV_FIRST_FLAG: u32 = 1 << 15;

/// `ucs_status_t ucp_worker_set_am_handler(ucp_worker_h worker, uint16_t id,
/// ucp_am_callback_t cb, void *arg, uint32_t flags)`: the handler of active message `id`
/// (called from `ucp_worker_progress` with the whole message; the data is valid during the
/// call only). A NULL `cb` removes it.
///
/// # Safety
/// A live worker; `cb` callable with `arg`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_set_am_handler(
    worker: *mut Worker,
    id: u16,
    cb: Option<AmCb>,
    arg: *mut c_void,
    flags: u32,
) -> Status {
    const NAME: &str = "ucp_worker_set_am_handler";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        let w = match worker_ref(NAME, worker) {
            Ok(w) => w,
            Err(s) => return s,
        };
        // As UCX: bits from UCP_AM_CB_PRIV_FIRST_FLAG (bit 15) up are refused, other unknown
        // bits ignored.
        if flags >= AM_CB_PRIV_FIRST_FLAG {
            return refuse(
                NAME,
                UCS_ERR_INVALID_PARAM,
                format!("unsupported flags {flags:#x}"),
            );
        }
        if flags & !(UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA) != 0 {
            tracing::debug!("{NAME}: ignoring unknown flags {flags:#x}");
        }
        let _g = w.lock.lock();
        let mut i = w.inner.borrow_mut();
        match cb {
            Some(cb) => {
                i.am_handlers.insert(id, (cb, arg as usize, flags));
                i.am_recv_handlers.remove(id);
                i.w.am_set_queued(id, true, false);
            }
            None => {
                i.am_handlers.remove(id);
                i.w.am_remove_handler(id);
            }
        }
        UCS_OK
    })
}

/// Releases what a destroyed worker's extra state holds: endpoints made for replies, held
/// data and descriptors (declined), lent stream data, and our place in the client's epoll set.
/// Listeners and client endpoints still open are the client's to destroy (as in UCX).
pub fn release_ext(w: &Worker) {
    let mut x = w.ext.borrow_mut();
    for e in x.implicit.drain(..) {
        // SAFETY: made by `crate::am::reply_ep` with Box::into_raw, freed once here.
        drop(unsafe { Box::from_raw(e as *mut crate::handles::Ep) });
    }
    x.held.clear();
    x.stream_data.clear();
    if let (Some(set), Some(user)) = (&x.efd, x.external) {
        // SAFETY: removing our descriptor from the client's epoll set.
        unsafe {
            libc::epoll_ctl(
                user,
                libc::EPOLL_CTL_DEL,
                set.as_raw_fd(),
                std::ptr::null_mut(),
            )
        };
    }
}
