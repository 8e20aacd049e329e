//! The multi-thread mode: [`MtWorker`], one worker that many threads may call into at once.
//!
//! ## Design: a worker that never leaves its thread
//!
//! A [`Worker`] is single-thread on purpose: its transports keep `Rc`/`RefCell` state, and the
//! self transport even finds its peers through a `thread_local!` registry of interfaces, so a
//! worker is tied to the thread that created it — not merely "not yet proven `Send`". The
//! obvious multi-thread wrapper, a `Mutex<Worker>` with an `unsafe impl Send + Sync`, would
//! therefore be unsound: dropping or progressing the worker from another thread touches the
//! creating thread's `thread_local` registry's `Weak` counts without synchronisation, and every
//! user callback, `MemMap` or `Rkey` the API hands out would have to be audited (and kept
//! audited as the transports evolve) for thread-bound values.
//!
//! `MtWorker` takes the route that needs no such audit and no `unsafe impl` at all:
//!
//! * the [`Worker`] is **created, used and dropped on one dedicated progress thread** and never
//!   crosses a thread boundary;
//! * callers send it commands — `Box<dyn FnOnce(&mut Engine) + Send>` — through a bounded
//!   lock-free [`ucs::mpmc::MpmcQueue`];
//! * results come back through one-shot completion slots (`Mutex` + `Condvar`): an operation
//!   gives an [`MtRequest`] at once and its [`Completion`] (status, the owned buffer, length, tag)
//!   when the worker finishes it.
//!
//! Soundness is then checked by the compiler, not argued: everything that crosses threads must
//! be `Send` (the command closures, their captures, their results), so a thread-bound value such
//! as a `MemMap` cannot be returned by [`MtWorker::with`], and user callbacks ([`MtAmHandler`],
//! [`MtErrHandler`]) must be `Send` because they are moved to the progress thread. What callers
//! do hold is plain data the worker re-resolves on every use: [`EpHandle`] (index + generation:
//! a stale one gives an error), [`Message`] (an index into the unexpected queue), a `Request`
//! from [`MtWorker::with`] (key + generation), [`MtMem`] (an id of a mapping kept on the
//! progress thread), [`Rkey`] (an endpoint id and the transports' remote keys, whose `Send` uct
//! states with its own `SAFETY` comment), and owned `Vec<u8>` buffers the worker gives back in
//! the completion. `MtWorker` and `MtRequest` are `Send + Sync` by auto-traits (checked at
//! compile time below): this module has no `unsafe impl`, and nothing requires `Worker: Send`.
//!
//! The compiler rejects letting a thread-bound value out, for example a [`MemMap`] (it shares
//! `Rc` state with its worker; [`MtWorker::mem_map`] keeps it on the progress thread and hands
//! out an [`MtMem`] id instead):
//!
//! ```compile_fail,E0277
//! fn leak(mt: &ucp::MtWorker) {
//!     let _map = mt.with(|w| w.mem_map(4096));
//! }
//! ```
//!
//! or a handler that is not `Send`:
//!
//! ```compile_fail,E0277
//! fn handler(mt: &ucp::MtWorker) {
//!     let counter = std::rc::Rc::new(std::cell::Cell::new(0));
//!     let _ = mt.am_set_handler(1, Box::new(move |_, _, _| counter.set(counter.get() + 1)));
//! }
//! ```
//!
//! ## Progress and sleeping
//! The progress thread runs queued commands, calls [`Worker::progress`] and hands finished
//! requests to their waiters. When idle it spins briefly, then sleeps as [`Worker::wait_event`]
//! does, on the worker's event set: the interfaces' event fds (armed) and the worker's
//! [`Worker::waker`], which submitters signal when (and only when) the thread is asleep, so a
//! busy worker takes no syscall per command. The sleep ends by the next timer (keepalive) at the
//! latest. Create the context with [`Features::WAKEUP`](crate::Features::WAKEUP); without it the
//! thread cannot sleep on the transports and polls them every millisecond when idle. Callers
//! never call `progress` themselves; waiting on an [`MtRequest`] blocks on its condition
//! variable.
//!
//! ## Costs
//! The single-thread [`Worker`] is untouched: no lock or atomic was added to its path. The
//! multi-thread path pays one boxed command and one completion slot per operation, one
//! uncontended mutex per completion, and a thread hop; that is the price of sharing.
//!
//! Handlers run on the progress thread. They may submit operations (which only enqueue), but a
//! blocking call from a handler ([`MtWorker::ep_create`], [`MtWorker::with`], waiting on a
//! request) would wait for the thread it runs on: blocking calls made there fail with
//! `Error::Busy` instead of deadlocking. A panic in a handler or a [`MtWorker::with`] closure
//! ends the progress thread (the worker's state may be mid-update, so it is not reused): every
//! outstanding and later request completes with `Canceled`, blocking calls give `Canceled`,
//! and nothing hangs.
//!
//! ## Transports
//! Every transport works, with one consequence of the design: the `self` transport reaches only
//! workers created on the same thread, so an `MtWorker` talks to other workers (including other
//! `MtWorker`s in the same process) over shared memory, cma or tcp.

mod slot;

use crate::request::{Completion, Op, Request};
use crate::rma::{MemMap, Rkey};
use crate::worker::{CloseMode, EpHandle, EpParams, Message, ProbeInfo, Worker};
use crate::Context;
use slot::{Reply, Slot};
use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};
use ucs::async_ctx::Waker;
use ucs::mpmc::MpmcQueue;
use ucs::{Error, Result};

/// An active-message handler of an [`MtWorker`]: runs on the progress thread, so it must be
/// `Send`. It gets the sending endpoint, the user header and the data, which it owns.
pub type MtAmHandler = Box<dyn FnMut(EpHandle, &[u8], Vec<u8>) + Send>;

/// An endpoint error handler of an [`MtWorker`]: runs once on the progress thread when the
/// endpoint fails.
pub type MtErrHandler = Box<dyn FnMut(EpHandle, &Error) + Send>;

/// Commands queued before submitters wait for room.
const QUEUE_DEPTH: usize = 1024;
/// Idle loops the progress thread spins before it sleeps.
const IDLE_SPINS: u32 = 256;
/// Longest sleep of the progress thread (the worker's timers end it sooner when due).
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// Sleep of the progress thread when the transports give no event fd.
const POLL_SLEEP: Duration = Duration::from_millis(1);

/// What the progress thread owns: the worker and the requests it still has to hand back.
struct Engine {
    /// Mappings made through [`MtWorker::mem_map`], by id (dropped before the worker).
    maps: HashMap<u64, MemMap>,
    next_map: u64,
    worker: Worker,
    pending: Vec<(Request, Reply<Completion>)>,
}

impl Engine {
    /// Registers the outcome of an operation: finished ones complete their slot now, running
    /// ones are watched by the progress loop.
    fn track(&mut self, op: Result<Op>, reply: Reply<Completion>) {
        match op {
            Ok(Op::Done(c)) => reply.send(c),
            Ok(Op::Pending(r)) => self.pending.push((r, reply)),
            Err(e) => reply.send(failed(e)),
        }
    }

    /// Hands every finished request to its waiter; gives how many finished.
    fn reap(&mut self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.pending.len() {
            if self.worker.request_test(&self.pending[i].0).unwrap_or(true) {
                let (req, reply) = self.pending.swap_remove(i);
                let c = self
                    .worker
                    .request_take(req)
                    .unwrap_or_else(|_| failed(Error::Busy("request still running".into())));
                reply.send(c);
                n += 1;
            } else {
                i += 1;
            }
        }
        n
    }
}

type Cmd = Box<dyn FnOnce(&mut Engine) + Send>;

fn failed(e: Error) -> Completion {
    Completion {
        status: Err(e),
        ..Completion::ok()
    }
}

fn stopped() -> Error {
    Error::Canceled
}

// ---------------------------------------------------------------------------------------------
// Shared between callers and the progress thread

struct Shared {
    queue: MpmcQueue<Cmd>,
    /// The progress thread is (about to be) asleep: submitters must wake it.
    sleeping: AtomicBool,
    /// The progress thread has not exited.
    alive: AtomicBool,
    /// Asks the progress thread to finish.
    stop: AtomicBool,
    /// The worker's waker, which ends the progress thread's sleep (set before `MtWorker::new`
    /// returns).
    wake: OnceLock<Arc<Waker>>,
    /// The progress thread, to refuse blocking calls made on it.
    thread: OnceLock<ThreadId>,
}

impl Shared {
    fn on_progress_thread(&self) -> bool {
        self.thread.get() == Some(&std::thread::current().id())
    }

    fn wake(&self) {
        if let Some(w) = self.wake.get() {
            if let Err(e) = w.wake() {
                tracing::error!("waking the MtWorker progress thread: {e}");
            }
        }
    }

    /// Queues a command; gives it back when the worker has stopped (or, from a handler on the
    /// progress thread, when the queue is full).
    fn push(&self, mut cmd: Cmd) -> std::result::Result<(), Cmd> {
        loop {
            if !self.alive.load(Ordering::SeqCst) {
                return Err(cmd);
            }
            match self.queue.push(cmd) {
                Ok(()) => break,
                Err(c) => {
                    if self.on_progress_thread() {
                        return Err(c);
                    }
                    cmd = c;
                    self.wake();
                    std::thread::yield_now();
                }
            }
        }
        // Pairs with the progress thread's `sleeping` store + fence: either it sees our command
        // before sleeping, or we see it asleep and wake it.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake();
        }
        if !self.alive.load(Ordering::SeqCst) {
            // The thread exited after our check: nobody will run what is queued, so drop it
            // (abandoning its reply slots) instead of leaving waiters hanging.
            while let Some(c) = self.queue.pop() {
                drop(c);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The public API

/// A worker several threads may call into at once (UCX's `UCS_THREAD_MODE_MULTI`): a [`Worker`]
/// owned by its own progress thread, driven through a lock-free command queue. See the module
/// docs for the design and why it is sound. Share it by reference (`std::thread::scope`) or in an
/// `Arc`; dropping it stops the progress thread and ends outstanding requests with `Canceled`.
pub struct MtWorker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    address: Vec<u8>,
    uuid: u64,
}

/// An operation submitted to an [`MtWorker`]: wait on it, test it, or cancel it (a posted
/// receive). Dropping it is safe: the worker owns the operation's buffer until it ends and then
/// discards the result.
#[must_use = "an operation of an MtWorker: wait on it to learn its result"]
pub struct MtRequest {
    slot: Arc<Slot<Completion>>,
    shared: Arc<Shared>,
}

// Compile-time check: the multi-thread handles are Send + Sync by auto-traits alone (no
// `unsafe impl` anywhere in this module), without requiring `Worker: Send`.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<MtWorker>();
    send_sync::<MtRequest>();
    send_sync::<EpHandle>();
    send_sync::<Message>();
    send_sync::<Completion>();
};

impl MtWorker {
    /// Starts a progress thread and creates the worker on it (see [`Worker::new`]); gives the
    /// worker's creation error if it fails.
    pub fn new(ctx: &Context) -> Result<Self> {
        let shared = Arc::new(Shared {
            queue: MpmcQueue::new(QUEUE_DEPTH)?,
            sleeping: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            wake: OnceLock::new(),
            thread: OnceLock::new(),
        });
        let (tx, rx) = mpsc::sync_channel(1);
        let ctx = ctx.clone();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ucp-mt-progress".into())
            .spawn(move || run(ctx, sh, tx))
            .map_err(|e| Error::io("spawning the MtWorker progress thread", e))?;
        let (address, uuid) = match rx.recv() {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(Error::Busy(
                    "the MtWorker progress thread died while creating the worker".into(),
                ));
            }
        };
        Ok(MtWorker {
            shared,
            thread: Some(thread),
            address,
            uuid,
        })
    }

    /// The worker's packed address, for a peer's `ep_create`.
    pub fn address(&self) -> &[u8] {
        &self.address
    }

    /// The worker's uuid.
    pub fn uuid(&self) -> u64 {
        self.uuid
    }

    /// Runs `f` on the progress thread with the worker and gives its result: the escape hatch
    /// for everything without a dedicated method (RMA, atomics, counters). Only `Send` values
    /// can come back, so worker-bound objects (`MemMap`, `Rkey`, `Request`) cannot escape the
    /// progress thread: use them within one call. Blocks until `f` ran.
    pub fn with<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut Worker) -> R + Send + 'static,
    {
        self.with_engine(move |e| f(&mut e.worker))
    }

    /// Submits an operation that gives an [`Op`] (the form of every non-blocking [`Worker`]
    /// call) and gives its request at once; the worker watches it and completes the request.
    pub fn submit<F>(&self, f: F) -> MtRequest
    where
        F: FnOnce(&mut Worker) -> Result<Op> + Send + 'static,
    {
        let slot = Slot::new();
        let reply = Reply(Some(slot.clone()));
        let cmd: Cmd = Box::new(move |e: &mut Engine| {
            let op = f(&mut e.worker);
            e.track(op, reply);
        });
        let req = MtRequest {
            slot,
            shared: self.shared.clone(),
        };
        if let Err(cmd) = self.shared.push(cmd) {
            // Dropping the command abandons the slot: the request ends with `Canceled`.
            drop(cmd);
        }
        req
    }

    /// Creates an endpoint to a peer's packed worker address (see [`Worker::ep_create`]).
    pub fn ep_create(
        &self,
        peer_address: &[u8],
        err_handler: Option<MtErrHandler>,
    ) -> Result<EpHandle> {
        let addr = peer_address.to_vec();
        self.with(move |w| {
            let params = EpParams {
                err_handler: err_handler.map(|mut h| {
                    Box::new(move |ep: EpHandle, e: &Error| h(ep, e)) as crate::ErrHandler
                }),
            };
            w.ep_create(&addr, params)
        })?
    }

    /// Closes an endpoint (see [`Worker::ep_close_nb`]); the request ends when it is closed.
    pub fn ep_close(&self, ep: EpHandle, mode: CloseMode) -> MtRequest {
        self.submit(move |w| w.ep_close_nb(ep, mode))
    }

    /// Sends a tagged message; the completion gives `data` back in `buf`.
    pub fn tag_send(&self, ep: EpHandle, tag: u64, data: Vec<u8>) -> MtRequest {
        self.submit(move |w| w.tag_send_vec(ep, tag, data))
    }

    /// Sends a tagged message that completes only when the receiver matched it.
    pub fn tag_send_sync(&self, ep: EpHandle, tag: u64, data: Vec<u8>) -> MtRequest {
        self.submit(move |w| w.tag_send_sync(ep, tag, &data))
    }

    /// Posts a receive for `tag` under `mask` into `buf` (its length is the capacity); the
    /// completion gives the buffer back with the data in `buf[..len]` and the message's tag.
    pub fn tag_recv(&self, buf: Vec<u8>, tag: u64, mask: u64) -> MtRequest {
        self.submit(move |w| w.tag_recv(buf, tag, mask))
    }

    /// Looks for an unexpected message (see [`Worker::tag_probe`]); with `remove` the returned
    /// [`Message`] must be received with [`MtWorker::tag_msg_recv`].
    pub fn tag_probe(&self, tag: u64, mask: u64, remove: bool) -> Result<Option<ProbeInfo>> {
        self.with(move |w| w.tag_probe(tag, mask, remove))
    }

    /// Receives a message taken by a removing probe.
    pub fn tag_msg_recv(&self, buf: Vec<u8>, msg: Message) -> MtRequest {
        self.submit(move |w| w.tag_msg_recv(buf, msg))
    }

    /// Sets the handler of user active-message `id`; it runs on the progress thread.
    pub fn am_set_handler(&self, id: u16, mut handler: MtAmHandler) -> Result<()> {
        self.with(move |w| w.am_set_handler(id, move |ep, h, d| handler(ep, h, d)))
    }

    /// Sends user active message `id` with a header and data (given back in the completion).
    pub fn am_send(&self, ep: EpHandle, id: u16, header: Vec<u8>, data: Vec<u8>) -> MtRequest {
        self.submit(move |w| w.am_send_vec(ep, id, &header, data))
    }

    /// Appends bytes to the endpoint's ordered stream.
    pub fn stream_send(&self, ep: EpHandle, data: Vec<u8>) -> MtRequest {
        self.submit(move |w| w.stream_send(ep, &data))
    }

    /// Receives exactly `buf.len()` stream bytes from the endpoint; the completion gives the
    /// buffer back.
    pub fn stream_recv(&self, ep: EpHandle, buf: Vec<u8>) -> MtRequest {
        self.submit(move |w| w.stream_recv(ep, buf))
    }

    /// Flushes every endpoint.
    pub fn flush(&self) -> MtRequest {
        self.submit(|w| w.flush())
    }

    /// Flushes one endpoint: completes when everything sent on it completed remotely.
    pub fn ep_flush(&self, ep: EpHandle) -> MtRequest {
        self.submit(move |w| w.ep_flush(ep))
    }

    /// Maps `len` bytes for remote access (see [`Worker::mem_map`]). The [`MemMap`] itself is
    /// thread-bound and stays on the progress thread; the caller gets an [`MtMem`] naming it,
    /// with the address and packed rkey a peer needs. Release it with [`MtWorker::mem_unmap`]
    /// (or when the worker stops).
    pub fn mem_map(&self, len: usize) -> Result<MtMem> {
        self.with_engine(move |e| {
            let m = e.worker.mem_map(len)?;
            let id = e.next_map;
            e.next_map += 1;
            let mem = MtMem {
                id,
                address: m.address(),
                len: m.len(),
                rkey: m.rkey_packed().to_vec(),
            };
            e.maps.insert(id, m);
            Ok(mem)
        })?
    }

    /// Releases a mapping made by [`MtWorker::mem_map`]; gives `InvalidParam` for an unknown
    /// or already released one.
    pub fn mem_unmap(&self, mem: MtMem) -> Result<()> {
        self.with_engine(move |e| {
            e.maps
                .remove(&mem.id)
                .map(drop)
                .ok_or_else(|| unknown_map(mem.id))
        })?
    }

    /// Copies `len` bytes at `offset` out of a mapping.
    pub fn mem_read(&self, mem: &MtMem, offset: usize, len: usize) -> Result<Vec<u8>> {
        let id = mem.id;
        self.with_engine(move |e| {
            let m = e.maps.get(&id).ok_or_else(|| unknown_map(id))?;
            let mut out = vec![0; len];
            m.read(offset, &mut out)?;
            Ok(out)
        })?
    }

    /// Copies `data` into a mapping at `offset`.
    pub fn mem_write(&self, mem: &MtMem, offset: usize, data: Vec<u8>) -> Result<()> {
        let id = mem.id;
        self.with_engine(move |e| {
            e.maps
                .get(&id)
                .ok_or_else(|| unknown_map(id))?
                .write(offset, &data)
        })?
    }

    /// Unpacks a peer's packed rkey for `ep` (see [`Worker::rkey_unpack`]). An [`Rkey`] is plain
    /// data naming the endpoint and the transports' remote keys; the worker checks it against
    /// the endpoint on every use.
    pub fn rkey_unpack(&self, ep: EpHandle, packed: &[u8]) -> Result<Rkey> {
        let packed = packed.to_vec();
        self.with(move |w| w.rkey_unpack(ep, &packed))?
    }

    /// Writes `data` to `remote_addr` of the peer's mapping (local completion:
    /// [`MtWorker::ep_flush`] for remote completion).
    pub fn put(&self, ep: EpHandle, data: Vec<u8>, remote_addr: u64, rkey: Rkey) -> MtRequest {
        self.submit(move |w| w.put(ep, &data, remote_addr, &rkey))
    }

    /// Reads `buf.len()` bytes at `remote_addr` of the peer's mapping into `buf` (given back in
    /// the completion).
    pub fn get(&self, ep: EpHandle, buf: Vec<u8>, remote_addr: u64, rkey: Rkey) -> MtRequest {
        self.submit(move |w| w.get(ep, buf, remote_addr, &rkey))
    }

    /// Runs `f` with the engine (worker plus the mappings it keeps) on the progress thread.
    fn with_engine<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut Engine) -> R + Send + 'static,
    {
        if self.shared.on_progress_thread() {
            return Err(reentry());
        }
        let slot = Slot::new();
        let reply = Reply(Some(slot.clone()));
        let cmd: Cmd = Box::new(move |e: &mut Engine| reply.send(f(e)));
        self.shared.push(cmd).map_err(|_| stopped())?;
        match slot.take(None) {
            Ok(Some(v)) => Ok(v),
            _ => Err(stopped()),
        }
    }
}

/// A mapping of an [`MtWorker`] (see [`MtWorker::mem_map`]): an id the worker resolves on every
/// use, plus what a peer needs to access it.
#[derive(Debug, PartialEq, Eq)]
pub struct MtMem {
    id: u64,
    /// Start address of the mapping (the base for a peer's `remote_addr`).
    pub address: u64,
    /// Its length in bytes.
    pub len: usize,
    /// The packed remote keys, for a peer's `rkey_unpack`.
    pub rkey: Vec<u8>,
}

fn unknown_map(id: u64) -> Error {
    Error::InvalidParam(format!("MtMem {id} is not a live mapping of this MtWorker"))
}

fn reentry() -> Error {
    Error::Busy(
        "a blocking MtWorker call from its own progress thread (a handler) would deadlock".into(),
    )
}

impl Drop for MtWorker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            if t.thread().id() == std::thread::current().id() {
                return; // dropped by a handler on the progress thread: it exits by itself
            }
            let _ = t.join();
        }
    }
}

impl MtRequest {
    /// True when the operation has finished (its result is ready for [`MtRequest::wait`]).
    pub fn test(&self) -> bool {
        self.slot.is_ready()
    }

    /// Blocks until the operation finishes and gives its result. Called from a handler on the
    /// progress thread it gives `Busy` unless the operation already finished.
    pub fn wait(self) -> Completion {
        if self.shared.on_progress_thread() && !self.test() {
            return failed(Error::Busy(
                "waiting on an MtRequest from the MtWorker's progress thread would deadlock".into(),
            ));
        }
        match self.slot.take(None) {
            Ok(Some(c)) => c,
            _ => failed(stopped()),
        }
    }

    /// Like [`MtRequest::wait`], but gives the request back if it has not finished within
    /// `timeout` (for watchdogs).
    pub fn wait_timeout(self, timeout: Duration) -> std::result::Result<Completion, MtRequest> {
        let deadline = if self.shared.on_progress_thread() {
            Instant::now()
        } else {
            Instant::now() + timeout
        };
        match self.slot.take(Some(deadline)) {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Ok(failed(stopped())),
            Err(()) => Err(self),
        }
    }

    /// Cancels a posted receive that has not matched: it then completes with `Canceled` and its
    /// buffer. Gives whether the worker canceled it (false: it had finished or cannot be
    /// canceled any more). Blocks until the worker has handled the cancel.
    pub fn cancel(&self) -> Result<bool> {
        if self.shared.on_progress_thread() {
            return Err(reentry());
        }
        let target = self.slot.clone();
        let slot = Slot::new();
        let reply = Reply(Some(slot.clone()));
        let cmd: Cmd = Box::new(move |e: &mut Engine| {
            let found = e
                .pending
                .iter()
                .find(|(_, r)| r.0.as_ref().is_some_and(|s| Arc::ptr_eq(s, &target)));
            let done = match found {
                Some((req, _)) => e.worker.request_cancel(req).unwrap_or(false),
                None => false,
            };
            e.reap();
            reply.send(done);
        });
        self.shared.push(cmd).map_err(|_| stopped())?;
        match slot.take(None) {
            Ok(Some(v)) => Ok(v),
            _ => Err(stopped()),
        }
    }
}

impl std::fmt::Debug for MtRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MtRequest")
            .field("finished", &self.test())
            .finish()
    }
}

impl std::fmt::Debug for MtWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MtWorker")
            .field("uuid", &self.uuid)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// The progress thread

/// Marks the worker stopped when the progress thread ends (also by a panic) and abandons every
/// command still queued, so no caller waits forever.
struct AliveGuard(Arc<Shared>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        while let Some(c) = self.0.queue.pop() {
            drop(c);
        }
    }
}

type Ready = mpsc::SyncSender<Result<(Vec<u8>, u64)>>;

fn run(ctx: Context, shared: Arc<Shared>, ready: Ready) {
    let _guard = AliveGuard(shared.clone());
    let _ = shared.thread.set(std::thread::current().id());
    let mut worker = match Worker::new(&ctx) {
        Ok(w) => w,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    match worker.waker() {
        Ok(w) => {
            let _ = shared.wake.set(w);
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    }
    let max_sleep = if worker.features().contains(crate::Features::WAKEUP) {
        MAX_SLEEP
    } else {
        POLL_SLEEP
    };
    let _ = ready.send(Ok((worker.address().to_vec(), worker.uuid())));
    drop(ready);
    let mut eng = Engine {
        maps: HashMap::new(),
        next_map: 1,
        worker,
        pending: Vec::new(),
    };
    let mut idle = 0u32;
    loop {
        let mut n = 0;
        // At most one queue's worth per round, so steady submitters cannot starve progress.
        while n < QUEUE_DEPTH {
            let Some(cmd) = shared.queue.pop() else { break };
            cmd(&mut eng);
            n += 1;
        }
        n += eng.worker.progress();
        n += eng.reap();
        if shared.stop.load(Ordering::SeqCst) && shared.queue.is_empty() {
            break;
        }
        if n > 0 {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < IDLE_SPINS {
            std::thread::yield_now();
            continue;
        }
        sleep(&shared, &mut eng, max_sleep);
    }
    // Requests still running end with `Canceled` as `eng.pending`'s replies drop; the worker is
    // dropped here, on the thread that created it.
    drop(eng);
}

/// Sleeps until a command arrives, the transports have events, a timer is due, or `max_sleep`
/// passes.
fn sleep(shared: &Shared, eng: &mut Engine, max_sleep: Duration) {
    shared.sleeping.store(true, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    if shared.queue.is_empty() && !shared.stop.load(Ordering::SeqCst) {
        if let Err(e) = eng.worker.sleep(Some(max_sleep)) {
            tracing::warn!("MtWorker progress thread: sleeping failed ({e}); polling instead");
            std::thread::sleep(POLL_SLEEP);
        }
    }
    shared.sleeping.store(false, Ordering::SeqCst);
}

#[cfg(test)]
mod tests;
