//! The handle types every part of the C API shares: the context, the worker (with its inner
//! state), the client endpoint and the endpoint index, and the request memory (header, pool).
//! They live here, apart from the calls that implement the API, so that every API module
//! (`worker`, `ep`, `request`, `tag`, `rma`, `am`, `conn` …) names them without importing
//! another API module, and the modules form no cycle. The calls on them stay with their
//! family: `impl Worker` progress in [`crate::worker`], requests in [`crate::request`].

use crate::datatype::Finish;
use crate::ffi::*;
use crate::guard::{refuse, status_of};
use crate::lock::RLock;
use crate::worker_ext::Ext;
use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::ffi::{c_uint, c_void};
use std::rc::Rc;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;
use ucp::{Completion, EpHandle, EpParams as UcpEpParams, RequestId};

/// A context: rucx's [`ucp::Context`] plus what the client asked for its requests.
pub struct Context {
    /// rucx's context (features, configuration, resources).
    pub ucp: ucp::Context,
    /// Bytes of the client's area in each request (`ucp_params_t.request_size`).
    pub user_req_size: usize,
    /// Called once on each request memory the library creates.
    pub request_init: Option<RequestInitCb>,
    /// Called once on each request memory before the library frees it.
    pub request_cleanup: Option<RequestInitCb>,
    /// The context's name.
    pub name: String,
    /// Live workers (addresses of `Worker`s): memory mapping uses the first one.
    pub workers: Mutex<Vec<usize>>,
    /// Mappings (addresses of `Mem`s) made before the context had a worker, registered with
    /// its first worker when that is created.
    pub unbound: Mutex<Vec<usize>>,
    /// `mt_workers_shared`: workers of this context run on several threads, so every worker
    /// locks (memory mapping reaches the first worker from any thread).
    pub mt_workers_shared: bool,
    /// The API minor of the header the client was built with (`ucp_init_version`).
    pub client_minor: c_uint,
    /// The features asked for (`UCP_FEATURE_*`).
    pub features: u64,
}

/// What only the lock holder touches while no client code runs.
pub struct Inner {
    /// rucx's worker.
    pub w: ucp::Worker,
    /// Finished operations waiting for `ucp_worker_progress`: (request header address, result).
    pub done: Vec<(u64, Completion)>,
    /// Endpoints that failed: (handle, status).
    pub ep_errors: Rc<RefCell<Vec<(EpHandle, Status)>>>,
    /// Old-API active-message handlers: id -> (callback, arg, flags).
    pub am_handlers: IdTable<(AmCb, usize, u32)>,
    /// Handlers of `ucp_worker_set_am_recv_handler`: id -> (callback, arg, flags).
    pub am_recv_handlers: IdTable<(AmRecvCb, usize, u32)>,
    /// Client endpoints (`Ep` addresses) per rucx endpoint.
    pub eps: EpIndex,
}

impl Inner {
    /// True when an endpoint failure or an active message waits for delivery (out of the hot
    /// path: `ucp_worker_arm`).
    pub fn has_events(&self) -> bool {
        self.failures_queued() || self.w.am_has_queued()
    }

    /// True when an endpoint failure waits for delivery.
    #[inline(always)]
    pub(crate) fn failures_queued(&self) -> bool {
        // SAFETY: the queue is filled by rucx's callbacks during `progress` and emptied by
        // `deliver`; neither holds a borrow when this is called (between calls, with the
        // worker locked), so reading its length through the cell's pointer is sound.
        unsafe { !(*self.ep_errors.as_ptr()).is_empty() }
    }
}

/// Values by active-message id, looked up by index on each arrival (ids are small numbers
/// the client picks; the table grows to the largest one set).
pub struct IdTable<T: Copy> {
    slots: Vec<Option<T>>,
}

impl<T: Copy> Default for IdTable<T> {
    fn default() -> Self {
        IdTable { slots: Vec::new() }
    }
}

impl<T: Copy> IdTable<T> {
    /// The value of `id`, if set.
    #[inline]
    pub fn get(&self, id: u16) -> Option<T> {
        self.slots.get(id as usize).copied().flatten()
    }

    /// Sets the value of `id`.
    pub fn insert(&mut self, id: u16, v: T) {
        let i = id as usize;
        if i >= self.slots.len() {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = Some(v);
    }

    /// Unsets `id`.
    pub fn remove(&mut self, id: u16) {
        if let Some(s) = self.slots.get_mut(id as usize) {
            *s = None;
        }
    }
}

/// A worker.
pub struct Worker {
    /// Taken by every call on the worker.
    pub lock: RLock,
    /// rucx state; borrowed only while no client code runs.
    pub inner: RefCell<Inner>,
    /// Request memories.
    pub pool: RefCell<Pool>,
    /// The first and last of the requests finished through the completion hook whose callbacks
    /// are due, in completion order (linked through their headers' `next`).
    pub(crate) due_head: Cell<*mut ReqHdr>,
    pub(crate) due_tail: Cell<*mut ReqHdr>,
    /// An empty vector with capacity, swapped with the completion queue by each progress call
    /// (so the queue does not reallocate).
    pub spare: RefCell<Vec<(u64, Completion)>>,
    /// The context.
    pub ctx: *const Context,
    /// Thread mode asked for.
    pub thread_mode: c_uint,
    /// Name.
    pub name: String,
    /// What the families beyond the MPI slice keep: listeners, connecting endpoints, held
    /// active-message data, the wake-up descriptor (see [`crate::worker_ext`]).
    pub ext: RefCell<Ext>,
    /// True while listeners or connecting client endpoints exist: progress polls them.
    pub sockets: Cell<bool>,
    /// Ends a `ucp_worker_wait` from any thread (`ucp_worker_signal`); with
    /// `UCP_FEATURE_WAKEUP` only.
    pub waker: Option<std::sync::Arc<ucs::async_ctx::Waker>>,
    /// `ucp_worker_params_t.client_id`: sent with client/server connection requests of
    /// endpoints with `UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID`.
    pub client_id: u64,
    /// `ucp_worker_params_t.am_alignment` (1: none): the alignment of active-message data
    /// handed to handlers.
    pub am_alignment: usize,
    /// True once an endpoint with a client error handler was made on this worker: the client
    /// handles errors, so a failed tag receive is reported to it; until then a tag receive
    /// failed by a peer's failure ends the process ([`crate::request`]'s `fatal_recv_failure`),
    /// as does a tag send refused at once because its peer failed (`fatal_send_failure`).
    pub handles_errors: Cell<bool>,
}

// SAFETY: every access to `inner`, `pool` and the due queue (`due_head`, `due_tail`; whose
// objects are single-threaded: Rc, RefCell, Cell) happens with `lock` held — rucx's completion
// hook runs inside calls that hold it — so one thread at a time touches them; nothing inside
// is shared with objects outside the worker.
unsafe impl Send for Worker {}
// SAFETY: as above.
unsafe impl Sync for Worker {}

/// The worker of a handle, or an error status.
#[inline(always)]
pub(crate) fn worker_ref<'a>(name: &str, w: *mut Worker) -> Result<&'a Worker, Status> {
    if w.is_null() {
        return Err(refuse(name, UCS_ERR_INVALID_PARAM, "worker is NULL"));
    }
    // SAFETY: a live worker handle from the client.
    Ok(unsafe { &*w })
}

/// A client endpoint.
pub struct Ep {
    /// Its worker.
    pub worker: *const Worker,
    /// rucx's endpoint.
    pub h: EpHandle,
    /// Error handler (`ucp_err_handler_t.cb`).
    pub err_cb: Option<ErrHandlerCb>,
    /// Its argument (`user_data` when given, else `err_handler.arg`).
    pub err_arg: *mut c_void,
    /// The error handler ran (it runs once per endpoint).
    pub failed: bool,
    /// The next client endpoint in its [`EpIndex`] slot (an `Ep` address), or 0.
    next: usize,
    /// A client endpoint from a socket address whose connection is not made yet: `h` names
    /// no endpoint until it is (see [`crate::conn`]).
    pub connecting: bool,
    /// `ucp_ep_params_t.user_data` (`ucp_ep_query`, `ucp_stream_worker_poll`).
    pub user_data: *mut c_void,
    /// What few endpoints have: a name, socket addresses, a connection under way.
    pub ext: Option<Box<EpExt>>,
}

/// The rarely used parts of a client endpoint.
#[derive(Default)]
pub struct EpExt {
    /// `ucp_ep_params_t.name`.
    pub name: Option<String>,
    /// Local and remote socket addresses of a client/server endpoint.
    pub sockaddrs: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
    /// A client connection under way (with `connecting`) and the rucx parameters to create
    /// the endpoint with once the server answers.
    pub conn: Option<ucp::Connecting>,
    /// Why the connection failed (`UCS_OK` while it has not).
    pub conn_failed: Status,
    /// Transport and device names `ucp_ep_query` gave out (kept while the endpoint lives).
    pub tl_names: Vec<(std::ffi::CString, std::ffi::CString)>,
}

/// A worker's client endpoints by rucx endpoint, for error handlers, active-message replies and
/// close. One word per rucx endpoint slot ([`EpHandle::slot`]: small, dense, reused after an
/// endpoint is gone) holds the first client endpoint created there (an `Ep` address, or 0); the
/// others follow it through `Ep::next`, in creation order. A slot can hold client endpoints of
/// an older rucx endpoint that a client has not closed yet, so lookups compare whole handles.
#[derive(Default)]
pub struct EpIndex {
    heads: Vec<usize>,
}

impl EpIndex {
    /// Adds a client endpoint (after those already on its rucx endpoint).
    ///
    /// # Safety
    /// `ep` is a live client endpoint not in the index; every endpoint in it is live.
    pub(crate) unsafe fn insert(&mut self, ep: *mut Ep) {
        // SAFETY: the caller's contract.
        let slot = unsafe { (*ep).h }.slot();
        if slot >= self.heads.len() {
            self.heads.resize(slot + 1, 0);
        }
        let mut at: *mut usize = &mut self.heads[slot];
        // SAFETY: `at` points at the slot's word or at a live endpoint's `next`.
        unsafe {
            while *at != 0 {
                at = &mut (*(*at as *mut Ep)).next;
            }
            (*ep).next = 0;
            *at = ep as usize;
        }
    }

    /// Takes a client endpoint out (nothing if it is not in).
    ///
    /// # Safety
    /// `ep` is a live client endpoint; every endpoint in the index is live.
    pub(crate) unsafe fn remove(&mut self, ep: *mut Ep) {
        // SAFETY: the caller's contract.
        let slot = unsafe { (*ep).h }.slot();
        let Some(head) = self.heads.get_mut(slot) else {
            return;
        };
        let mut at: *mut usize = head;
        // SAFETY: `at` points at the slot's word or at a live endpoint's `next`.
        unsafe {
            while *at != 0 {
                if *at == ep as usize {
                    *at = (*ep).next;
                    (*ep).next = 0;
                    return;
                }
                at = &mut (*(*at as *mut Ep)).next;
            }
        }
    }

    /// Every client endpoint in the index.
    pub fn all(&self) -> Vec<*mut Ep> {
        let mut out = Vec::new();
        for &head in &self.heads {
            let mut e = head;
            while e != 0 {
                out.push(e as *mut Ep);
                // SAFETY: every endpoint in the index is live.
                e = unsafe { (*(e as *mut Ep)).next };
            }
        }
        out
    }

    /// The first client endpoint created on rucx endpoint `h`, or null.
    pub fn first(&self, h: EpHandle) -> *mut Ep {
        self.of(h).next().unwrap_or(std::ptr::null_mut())
    }

    /// The client endpoints on rucx endpoint `h`, in creation order.
    pub fn of(&self, h: EpHandle) -> impl Iterator<Item = *mut Ep> + '_ {
        let mut e = self.heads.get(h.slot()).copied().unwrap_or(0);
        std::iter::from_fn(move || loop {
            if e == 0 {
                return None;
            }
            let ep = e as *mut Ep;
            // SAFETY: every endpoint in the index is live (removed before it is freed).
            let (eh, next) = unsafe { ((*ep).h, (*ep).next) };
            e = next;
            if eh == h {
                return Some(ep);
            }
        })
    }
}

/// The error handler and its argument from endpoint parameters.
pub(crate) fn err_handler_of(p: &EpParams) -> (Option<ErrHandlerCb>, *mut c_void) {
    let has = |b: u64| p.field_mask & b != 0;
    if has(UCP_EP_PARAM_FIELD_ERR_HANDLER) {
        let arg = if has(UCP_EP_PARAM_FIELD_USER_DATA) {
            p.user_data
        } else {
            p.err_handler.arg
        };
        (p.err_handler.cb, arg)
    } else {
        (None, std::ptr::null_mut())
    }
}

/// rucx's endpoint parameters for a client endpoint: an error handler that queues the failure
/// for `ucp_worker_progress`. Every failure is reported (a small allocation per endpoint): an
/// endpoint without a client error handler still fails the worker's waiting receives (see
/// `Worker::ep_failed`).
pub(crate) fn ucp_params(w: &Worker, _err_cb: Option<ErrHandlerCb>) -> UcpEpParams {
    let q = w.inner.borrow().ep_errors.clone();
    let err_handler: Option<ucp::ErrHandler> = Some(Box::new(move |h, e: &ucs::Error| {
        q.borrow_mut().push((h, status_of(e)))
    }));
    UcpEpParams { err_handler }
}

/// A client endpoint on rucx endpoint `h` (or, `connecting`, on one still to be made), in
/// the worker's index unless connecting. Worker locked, rucx worker not borrowed.
pub(crate) fn new_ep(w: &Worker, h: EpHandle, p: &EpParams, connecting: bool) -> *mut Ep {
    let (err_cb, err_arg) = err_handler_of(p);
    if err_cb.is_some() {
        w.handles_errors.set(true);
    }
    let has = |b: u64| p.field_mask & b != 0;
    let name = if has(UCP_EP_PARAM_FIELD_NAME) && !p.name.is_null() {
        // SAFETY: a C string from the caller.
        Some(
            unsafe { std::ffi::CStr::from_ptr(p.name) }
                .to_string_lossy()
                .into_owned(),
        )
    } else {
        None
    };
    let ep = Box::into_raw(Box::new(Ep {
        worker: w,
        h,
        err_cb,
        err_arg,
        failed: false,
        next: 0,
        connecting,
        user_data: if has(UCP_EP_PARAM_FIELD_USER_DATA) {
            p.user_data
        } else {
            std::ptr::null_mut()
        },
        ext: name.map(|name| {
            Box::new(EpExt {
                name: Some(name),
                ..EpExt::default()
            })
        }),
    }));
    if !connecting {
        // SAFETY: the new endpoint; the index holds live ones only.
        unsafe { w.inner.borrow_mut().eps.insert(ep) };
    }
    ep
}

/// Bytes of rucx state before the client's area of every request: the header's size, rounded up
/// to [`ALIGN`] (96 bytes now). Every posted receive holds one pooled request memory, so a
/// worker with a receive posted per peer pays this per peer.
pub const HDR_SIZE: usize = std::mem::size_of::<ReqHdr>().next_multiple_of(ALIGN);
/// Alignment of request memory.
pub(crate) const ALIGN: usize = 16;

/// The request has finished (status and info are valid).
pub const F_COMPLETED: u32 = 1;
/// The client released the request (`ucp_request_free` or `ucp_request_release`): recycled on
/// completion, after its callback unless [`F_CB_OFF`].
pub const F_RELEASED: u32 = 2;
/// The memory belongs to the worker's free list (not the client's).
pub const F_POOLED: u32 = 4;
/// Finished, status and info written, the callback queued for `ucp_worker_progress` (which
/// then sets `F_COMPLETED` and calls it).
pub const F_CB_DUE: u32 = 8;
/// Released by `ucp_request_free`, which (in UCX's code as in its header) also turns the
/// callback off; `ucp_request_release` leaves it on (ucx_perftest releases its first send
/// that way and counts on the callback). Open MPI frees incomplete requests whose callbacks
/// must then not run.
pub const F_CB_OFF: u32 = 16;

/// The completion callback of a request, with its C signature.
#[derive(Clone, Copy)]
pub enum Cb {
    /// None.
    None,
    /// `ucp_send_callback_t`.
    Send(SendCb),
    /// `ucp_send_nbx_callback_t`.
    SendNbx(SendNbxCb),
    /// `ucp_tag_recv_callback_t`.
    Recv(TagRecvCb),
    /// `ucp_tag_recv_nbx_callback_t`.
    RecvNbx(TagRecvNbxCb),
    /// `ucp_stream_recv_callback_t` (the length is the received byte count).
    StreamRecv(StreamRecvCb),
    /// `ucp_stream_recv_nbx_callback_t`, also `ucp_am_recv_data_nbx_callback_t`.
    StreamRecvNbx(StreamRecvNbxCb),
}

/// rucx's state of one request, in the bytes before the client's area.
#[repr(C)]
pub struct ReqHdr {
    /// `F_*` bits.
    pub flags: AtomicU32,
    /// Final status (valid with `F_COMPLETED`).
    pub status: Status,
    /// Receive info (valid with `F_COMPLETED`).
    pub info: TagRecvInfo,
    /// The worker that owns the operation.
    pub worker: *const Worker,
    /// Completion callback.
    pub cb: Cb,
    /// `user_data` for `_nbx` callbacks.
    pub user_data: *mut c_void,
    /// rucx's id of the running operation (for cancel).
    pub req: Option<RequestId>,
    /// What to do with the data when the operation completes (taken then).
    pub finish: Finish,
    /// The next request in the worker's queue of due callbacks (while `F_CB_DUE`).
    pub next: *mut ReqHdr,
}

const _: () = assert!(std::mem::size_of::<ReqHdr>() <= HDR_SIZE);
const _: () = assert!(HDR_SIZE.is_multiple_of(ALIGN) && std::mem::align_of::<ReqHdr>() <= ALIGN);

/// How the client asked for the operation.
pub struct OpArgs {
    /// Caller-supplied request memory (`UCP_OP_ATTR_FIELD_REQUEST`), or null.
    pub caller_req: *mut c_void,
    /// Callback.
    pub cb: Cb,
    /// `user_data`.
    pub user_data: *mut c_void,
    /// `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`: always return a request.
    pub no_imm: bool,
    /// `recv_info.tag_info` to fill on immediate completion, or null.
    pub info_out: *mut TagRecvInfo,
    /// A length to fill on immediate completion (`recv_info.length` of stream and AM data
    /// receives, or their `length` argument), or null.
    pub len_out: *mut usize,
}

impl OpArgs {
    /// A request with a callback and nothing else (`_nb` calls).
    pub fn with_cb(cb: Cb, no_imm: bool) -> Self {
        OpArgs {
            caller_req: std::ptr::null_mut(),
            cb,
            user_data: std::ptr::null_mut(),
            no_imm,
            info_out: std::ptr::null_mut(),
            len_out: std::ptr::null_mut(),
        }
    }
}

/// The request arguments of an operation, each read where it is used: an [`OpArgs`], or a
/// `ucp_request_param_t` read field by field ([`crate::param::ParamArgs`]), so an operation that
/// finishes at once reads only what its outcome needs.
pub trait ReqArgs {
    /// Caller-supplied request memory (`UCP_OP_ATTR_FIELD_REQUEST`), or null.
    fn caller_req(&self) -> *mut c_void;
    /// Callback.
    fn cb(&self) -> Cb;
    /// `user_data`.
    fn user_data(&self) -> *mut c_void;
    /// `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`: always return a request.
    fn no_imm(&self) -> bool;
    /// `recv_info.tag_info` to fill on immediate completion, or null.
    fn info_out(&self) -> *mut TagRecvInfo;
    /// A length to fill on immediate completion, or null.
    fn len_out(&self) -> *mut usize;
}

impl ReqArgs for OpArgs {
    #[inline(always)]
    fn caller_req(&self) -> *mut c_void {
        self.caller_req
    }
    #[inline(always)]
    fn cb(&self) -> Cb {
        self.cb
    }
    #[inline(always)]
    fn user_data(&self) -> *mut c_void {
        self.user_data
    }
    #[inline(always)]
    fn no_imm(&self) -> bool {
        self.no_imm
    }
    #[inline(always)]
    fn info_out(&self) -> *mut TagRecvInfo {
        self.info_out
    }
    #[inline(always)]
    fn len_out(&self) -> *mut usize {
        self.len_out
    }
}

/// Most request memories one allocation of the pool holds.
const MAX_BLOCK: usize = 64;

/// The per-worker free list of request memories. They are allocated in blocks (1, 2, 4, ...
/// memories, then [`MAX_BLOCK`] at a time), so a worker with a request outstanding per peer
/// pays no allocator overhead per request, and one with a few requests holds a few memories.
/// `request_init` runs on each memory when its block is made, `request_cleanup` on each when
/// the pool drops.
pub struct Pool {
    free: Vec<usize>,
    /// The blocks: (address, memories).
    blocks: Vec<(usize, usize)>,
    /// One request memory.
    layout: Layout,
    /// Memories in the next block.
    next_block: usize,
    init: Option<RequestInitCb>,
    cleanup: Option<RequestInitCb>,
}

impl Pool {
    /// A pool for client areas of `user` bytes.
    pub fn new(user: usize, init: Option<RequestInitCb>, cleanup: Option<RequestInitCb>) -> Self {
        let size = HDR_SIZE + user.div_ceil(ALIGN) * ALIGN;
        Pool {
            free: Vec::new(),
            blocks: Vec::new(),
            layout: Layout::from_size_align(size, ALIGN).expect("request layout"),
            next_block: 1,
            init,
            cleanup,
        }
    }

    /// A request memory (header start), calling `request_init` on a new one.
    #[inline(always)]
    pub(crate) fn get(&mut self) -> *mut u8 {
        match self.free.pop() {
            Some(p) => p as *mut u8,
            None => self.create(),
        }
    }

    /// The layout of a block of `n` memories (the size is a multiple of `ALIGN`, so they
    /// follow each other aligned).
    fn block_layout(&self, n: usize) -> Layout {
        let size = self
            .layout
            .size()
            .checked_mul(n)
            .expect("request block size");
        Layout::from_size_align(size, ALIGN).expect("request block layout")
    }

    /// A new block of request memories, `request_init` called on each client area; gives one
    /// and puts the others on the free list.
    #[inline(never)]
    fn create(&mut self) -> *mut u8 {
        let n = self.next_block;
        self.next_block = (n * 2).min(MAX_BLOCK);
        let layout = self.block_layout(n);
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        self.blocks.push((base as usize, n));
        self.free.reserve(n);
        // Given out in address order: the last one pushed is taken first.
        for k in (0..n).rev() {
            // SAFETY: memory `k` of the block just allocated.
            let p = unsafe { base.add(k * self.layout.size()) };
            if let Some(init) = self.init {
                // SAFETY: the client's area of a fresh request memory.
                unsafe { init(p.add(HDR_SIZE).cast()) };
            }
            if k > 0 {
                self.free.push(p as usize);
            }
        }
        base
    }

    #[inline(always)]
    pub(crate) fn put(&mut self, p: *mut u8) {
        self.free.push(p as usize);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for &(base, n) in &self.blocks {
            let base = base as *mut u8;
            if let Some(cleanup) = self.cleanup {
                for k in 0..n {
                    // SAFETY: the client's area of memory `k` of a block made by `create`.
                    unsafe { cleanup(base.add(k * self.layout.size() + HDR_SIZE).cast()) };
                }
            }
            // SAFETY: allocated by `create` with this layout.
            unsafe { std::alloc::dealloc(base, self.block_layout(n)) };
        }
    }
}

/// The header of the request whose client pointer is `user`.
pub fn hdr_of(user: *mut c_void) -> *mut ReqHdr {
    (user as *mut u8).wrapping_sub(HDR_SIZE).cast()
}

/// The client pointer of a header.
pub fn user_of(hdr: *mut ReqHdr) -> *mut c_void {
    (hdr as *mut u8).wrapping_add(HDR_SIZE).cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering;

    static INITS: AtomicUsize = AtomicUsize::new(0);
    static CLEANUPS: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn init(p: *mut c_void) {
        // SAFETY: the client area of a pool memory: 16 bytes here.
        unsafe { (p as *mut u64).write(0x5eed) };
        INITS.fetch_add(1, Ordering::Relaxed);
    }

    unsafe extern "C" fn cleanup(p: *mut c_void) {
        // SAFETY: as in `init`, which wrote it.
        assert_eq!(unsafe { (p as *mut u64).read() }, 0x5eed);
        CLEANUPS.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn pool_memories_are_distinct_aligned_reused_and_initialized_once() {
        let mut pool = Pool::new(16, Some(init), Some(cleanup));
        let stride = HDR_SIZE + 16;
        // 200 memories at once, as a worker with a receive posted per peer holds.
        let got: Vec<*mut u8> = (0..200).map(|_| pool.get()).collect();
        let set: HashSet<usize> = got.iter().map(|&p| p as usize).collect();
        assert_eq!(set.len(), 200);
        for &p in &got {
            assert_eq!(p as usize % ALIGN, 0);
            // No memory overlaps the next one in address order.
            for &q in &got {
                let (p, q) = (p as usize, q as usize);
                assert!(p == q || p.abs_diff(q) >= stride);
            }
        }
        // Blocks of 1, 2, 4, ..., 64, 64, 64 memories: 255 made for 200, each initialized once.
        assert_eq!(INITS.load(Ordering::Relaxed), 255);
        assert_eq!(pool.blocks.len(), 9);
        for &p in &got {
            pool.put(p);
        }
        let again = pool.get();
        assert!(set.contains(&(again as usize)));
        assert_eq!(INITS.load(Ordering::Relaxed), 255);
        pool.put(again);
        drop(pool);
        assert_eq!(CLEANUPS.load(Ordering::Relaxed), 255);
    }
}
