//! Requests: what a non-blocking ucp operation gives back, and the typed results of finished
//! ones.
//!
//! An operation either finishes at once ([`Op::Done`]) or gives a [`Request`] to test, wait on,
//! cancel or await through its worker. The worker owns everything an unfinished request needs — a
//! receive's buffer included — so dropping a `Request` never lets data land in freed memory: a
//! dropped request keeps running inside the worker, and its slot and buffer are recycled when it
//! finishes (at the next `progress()` call if it already had).
//!
//! Results are typed per operation: [`Completion`] carries every field any operation fills, and
//! [`Completion::into_recv`] (receives: tag, stream, `get`), [`Completion::into_value`] (fetching
//! atomics) and [`Completion::into_result`] (everything else) give what that operation
//! produced; `Worker::wait_recv`, `Worker::wait_fetch` and `Worker::wait_done` wait and convert in
//! one call.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use ucs::{Error, Result};

/// What a worker shares with the requests it hands out (the (key, generation) pairs of the
/// handles dropped since the worker last released them) and with the interfaces that ring it
/// when they get work ([`uct::Iface::ring_on_work`]: the self transport). A request's identity
/// check compares this allocation's address with its worker's.
#[derive(Default)]
pub(crate) struct ReqShared {
    released: RefCell<Vec<(u32, u32)>>,
    /// [`DROPPED`] and [`RUNG`]: what progress looks at on every call, in one load.
    dirty: Cell<u8>,
}

/// Bit of `ReqShared::dirty`: a handle was dropped since `pop` last found the list empty.
const DROPPED: u8 = 1;
/// Bit of `ReqShared::dirty`: an interface that rings got work since `take_rung`.
const RUNG: u8 = 2;

impl ReqShared {
    /// The next dropped handle, if any.
    pub(crate) fn pop(&self) -> Option<(u32, u32)> {
        let next = self.released.try_borrow_mut().ok()?.pop();
        if next.is_none() {
            self.dirty.set(self.dirty.get() & !DROPPED);
        }
        next
    }

    /// True when a handle was dropped since the last `pop` gave `None`, or an interface rang
    /// since the last `take_rung`.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.dirty.get() != 0
    }

    /// True when a handle was dropped since the last `pop` gave `None`.
    #[inline]
    pub(crate) fn dropped(&self) -> bool {
        self.dirty.get() & DROPPED != 0
    }

    /// Whether an interface rang since the last call; clears the ring.
    #[inline]
    pub(crate) fn take_rung(&self) -> bool {
        let d = self.dirty.get();
        self.dirty.set(d & !RUNG);
        d & RUNG != 0
    }

    #[cold]
    fn push(&self, key: u32, gen: u32) {
        if let Ok(mut l) = self.released.try_borrow_mut() {
            l.push((key, gen));
            self.dirty.set(self.dirty.get() | DROPPED);
        }
    }
}

impl uct::WorkBell for ReqShared {
    fn ring(&self) {
        self.dirty.set(self.dirty.get() | RUNG);
    }
}

/// A handle to an unfinished operation of one worker: test it with `Worker::request_test`, finish
/// it with `Worker::wait`, `Worker::wait_timeout` or `Worker::request_take`, or await it with
/// [`crate::OpFuture`]. It is valid with the worker that created it only: any other worker
/// answers it with `InvalidParam` and leaves its own requests alone.
///
/// Dropping it releases the operation: it runs to its end inside the worker, which then frees
/// its slot and buffer. Once a callback or token is set (`Worker::request_set_callback`,
/// `Worker::request_set_token`) the worker frees it after delivering the result, and dropping
/// the handle does nothing more.
#[must_use = "an unfinished operation: wait on it, take its result, or drop it to release it"]
pub struct Request {
    pub(crate) key: u32,
    /// The request's generation, with [`ARMED`] set while dropping the handle releases the
    /// request (one word, so that a handle stays two words wide).
    gen_armed: Cell<u32>,
    pub(crate) owner: Rc<ReqShared>,
}

/// Bit of `Request::gen_armed`: dropping the handle releases the request. Generations use the
/// low 28 bits.
const ARMED: u32 = 1 << 31;

impl Request {
    pub(crate) fn new(key: usize, gen: u32, owner: &Rc<ReqShared>) -> Self {
        Request {
            key: key as u32,
            gen_armed: Cell::new(gen | ARMED),
            owner: Rc::clone(owner),
        }
    }

    /// The request's generation.
    #[inline]
    pub(crate) fn gen(&self) -> u32 {
        self.gen_armed.get() & !ARMED
    }

    /// True when `owner` is the shared part of the worker this request belongs to.
    #[inline]
    pub(crate) fn is_of(&self, owner: &Rc<ReqShared>) -> bool {
        Rc::ptr_eq(&self.owner, owner)
    }

    /// The handle stops releasing the request on drop (its result goes elsewhere).
    #[inline]
    pub(crate) fn disarm(&self) {
        self.gen_armed.set(self.gen());
    }

    /// The slot key, consuming the handle without releasing the request (internal users that
    /// keep track of the request themselves).
    #[inline]
    pub(crate) fn into_key(self) -> usize {
        self.disarm();
        self.key as usize
    }
}

impl Drop for Request {
    #[inline]
    fn drop(&mut self) {
        let g = self.gen_armed.get();
        if g & ARMED != 0 {
            self.owner.push(self.key, g & !ARMED);
        }
    }
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("key", &self.key)
            .field("gen", &self.gen())
            .finish()
    }
}

impl PartialEq for Request {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key && self.gen() == o.gen() && Rc::ptr_eq(&self.owner, &o.owner)
    }
}

impl Eq for Request {}

impl std::hash::Hash for Request {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (self.key, self.gen(), Rc::as_ptr(&self.owner)).hash(h);
    }
}

/// A plain, copyable id of a request whose result goes to a token (from
/// [`Worker::request_into_token`](crate::Worker::request_into_token)): it can cancel the request
/// ([`Worker::request_cancel_id`](crate::Worker::request_cancel_id)) and holds nothing, so
/// keeping, copying or dropping it costs nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId {
    pub(crate) wid: u32,
    pub(crate) key: u32,
    pub(crate) gen: u32,
}

/// The result of a finished operation, with every field any operation fills; the typed
/// accessors ([`Completion::into_recv`], [`Completion::into_value`],
/// [`Completion::into_result`]) give what one kind of operation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// Success, or the error that ended the operation.
    pub status: Result<()>,
    /// The buffer the operation owned: a receive's buffer (data in `buf[..len]`), or the vector a
    /// `*_vec` send took.
    pub buf: Option<Vec<u8>>,
    /// Real length of a received message (also on `Truncated`).
    pub len: usize,
    /// Tag of the received message.
    pub tag: u64,
    /// Fetched value of an atomic operation.
    pub value: u64,
}

/// What a finished receive (tag, stream, or RMA `get`) produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The receive's buffer, given back; the data is `buf[..len]`.
    pub buf: Vec<u8>,
    /// Bytes received.
    pub len: usize,
    /// The message's tag (0 for stream and `get`).
    pub tag: u64,
}

impl Received {
    /// The received bytes.
    pub fn data(&self) -> &[u8] {
        &self.buf[..self.len.min(self.buf.len())]
    }

    /// The received bytes as an owned vector (the buffer, cut to the length received).
    pub fn into_data(mut self) -> Vec<u8> {
        self.buf.truncate(self.len);
        self.buf
    }
}

impl Completion {
    pub(crate) fn ok() -> Self {
        Completion {
            status: Ok(()),
            buf: None,
            len: 0,
            tag: 0,
            value: 0,
        }
    }

    pub(crate) fn failed(e: Error) -> Self {
        Completion {
            status: Err(e),
            ..Completion::ok()
        }
    }

    /// The operation's status alone (sends, puts, flushes, closes, non-fetching atomics).
    pub fn into_result(self) -> Result<()> {
        self.status
    }

    /// A receive's result: its buffer, length and tag, or the error that ended it
    /// (`Truncated` carries the real length in its message). A completion without a buffer
    /// (not a receive) gives `InvalidParam`.
    pub fn into_recv(self) -> Result<Received> {
        self.status?;
        let buf = self.buf.ok_or_else(|| {
            Error::InvalidParam("the operation is not a receive: it has no buffer".into())
        })?;
        Ok(Received {
            buf,
            len: self.len,
            tag: self.tag,
        })
    }

    /// A fetching atomic's result: the value the remote word had before the operation.
    pub fn into_value(self) -> Result<u64> {
        self.status.map(|()| self.value)
    }
}

/// What a non-blocking operation did.
#[must_use = "an operation may still be running: check for Pending"]
#[derive(Debug)]
pub enum Op {
    /// Finished at once.
    Done(Completion),
    /// Running; finish it through the worker.
    Pending(Request),
}

/// What an operation whose result goes to the completion hook did
/// ([`crate::Worker::tag_recv_raw_hooked`]).
#[must_use = "a running operation's token is bound: its result comes to the hook"]
#[derive(Debug)]
pub enum HookedOp {
    /// Finished at once (the hook is not called).
    Done(Completion),
    /// Running; its result comes to the completion hook with the token.
    Pending(RequestId),
}

impl Op {
    /// True when finished at once.
    pub fn is_done(&self) -> bool {
        matches!(self, Op::Done(_))
    }
}

impl From<Request> for Op {
    fn from(r: Request) -> Op {
        Op::Pending(r)
    }
}

const _: () = assert!(std::mem::size_of::<Request>() == 16);
