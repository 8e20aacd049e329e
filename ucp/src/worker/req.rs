//! One request's record in the worker core: its kind (send, receive, stream receive, atomic,
//! close, flush), each family's stage, the buffers it reads and writes, its result once
//! finished and who learns of it.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

mod buf;

pub(crate) use buf::{RecvBuf, SendBuf, SendData};

use crate::am::stages::AmSend;
use crate::request::Completion;
use crate::rndv::stages::{RndvRecv, RndvSend};
use crate::stream::stages::{StreamRecv, StreamSend};
use crate::tag::stages::{TagRecv, TagSend};
use crate::wireup::TagSendMode;
use crate::worker::api_types::RequestCallback;
use ucs::{Error, Result};
use uct::{CompletionId, MemHandle, RemoteKey};

pub(crate) const COMP_GET: u64 = 1;
pub(crate) const COMP_PUT: u64 = 2;
pub(crate) const COMP_FLUSH: u64 = 3;
pub(crate) const COMP_ATOMIC: u64 = 4;
pub(crate) const COMP_ZCOPY: u64 = 5;

#[inline]
pub(crate) fn comp_id(kind: u64, wire: u64) -> CompletionId {
    CompletionId(kind << 60 | (wire & ((1 << 60) - 1)))
}

/// Where a send is: a stage of the family that runs it (the stage types are the families').
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SendStage {
    Tag(TagSend),
    Rndv(RndvSend),
    Stream(StreamSend),
    Am(AmSend),
}

impl SendStage {
    /// A SYNC_ACK may name the send now (see the families' `takes_sync_ack`); `offset` is how
    /// much of the data went out.
    #[inline]
    pub(crate) fn takes_sync_ack(&self, offset: usize) -> bool {
        match self {
            SendStage::Tag(t) => t.takes_sync_ack(offset),
            SendStage::Rndv(r) => r.takes_sync_ack(offset),
            SendStage::Stream(s) => s.takes_sync_ack(offset),
            SendStage::Am(a) => a.takes_sync_ack(offset),
        }
    }

    /// Waiting for the answer (ATS or RTR) to an RTS it sent.
    #[inline]
    pub(crate) fn waits_rndv_answer(&self) -> bool {
        matches!(self, SendStage::Rndv(r) if r.waits_answer())
    }
}

/// A user active message's id and user header, kept by the rendezvous that brings its data.
pub(crate) type AmByRndv = (u16, Vec<u8>);

/// What a send or receive needs only for rendezvous, zero-copy or RMA: held in a box taken
/// from `RndvState::pool` when first needed (see
/// [`Core::send_rndv`](crate::worker::state::Core::send_rndv)) and given back when
/// the request finishes, so an eager request carries one empty pointer instead.
#[derive(Default)]
pub(crate) struct Rndv {
    pub(crate) memh: Option<MemHandle>,
    pub(crate) rkey: Option<RemoteKey>,
    pub(crate) remote_addr: u64,
    /// The peer's id of its side of the transfer: the receive's (from RTR) for a send, the
    /// send's (from RTS) for a receive.
    pub(crate) peer_req: u64,
    pub(crate) inflight: usize,
    /// A receive's rendezvous get: the lane (index in the endpoint's `uct`) whose transport
    /// reads the sender's key, when not the RMA lane.
    pub(crate) get_lane: Option<usize>,
    /// User active message sent or received by rendezvous: id and user header.
    pub(crate) am: Option<AmByRndv>,
}

pub(crate) struct SendReq {
    pub(crate) tag: u64,
    pub(crate) data: SendBuf,
    pub(crate) offset: usize,
    pub(crate) msg_id: u64,
    /// Rendezvous, zero-copy and RMA state (`None` for an eager send).
    pub(crate) rndv: Option<Box<Rndv>>,
    pub(crate) give_back: bool,
    pub(crate) sync: bool,
    /// A [`TagSendMode::FastCompletion`] send (its caller waits for it at once).
    pub(crate) fast_cmpl: bool,
    pub(crate) stage: SendStage,
    pub(crate) rts_sent: bool,
    /// A user `put` (no rendezvous messages around it).
    pub(crate) user_rma: bool,
    /// A synchronous send whose SYNC_ACK came while fragments were still going out: it
    /// finishes as soon as they are out.
    pub(crate) acked: bool,
    /// The tag-offload family holds a transport entry for it (a rendezvous the transport
    /// announced, or a shared segment the transport reads): `Core::finish` leaves the send to
    /// `State::finish`, which releases it.
    pub(crate) tm_held: bool,
}

impl SendReq {
    /// An eager send of `data` not yet started.
    #[inline]
    pub(crate) fn new(tag: u64, data: SendBuf, give_back: bool, sync: bool) -> Self {
        SendReq {
            tag,
            data,
            offset: 0,
            msg_id: 0,
            rndv: None,
            give_back,
            sync,
            fast_cmpl: false,
            stage: SendStage::Tag(TagSend::Eager),
            rts_sent: false,
            user_rma: false,
            acked: false,
            tm_held: false,
        }
    }

    /// The mode of a tag send: what its rendezvous threshold is.
    #[inline]
    pub(crate) fn mode(&self) -> TagSendMode {
        match (self.sync, self.fast_cmpl) {
            (true, _) => TagSendMode::Sync,
            (false, true) => TagSendMode::FastCompletion,
            (false, false) => TagSendMode::Standard,
        }
    }

    /// The registration of the data, if any.
    #[inline]
    pub(crate) fn memh(&self) -> Option<&MemHandle> {
        self.rndv.as_ref().and_then(|x| x.memh.as_ref())
    }

    /// Drops the registration of the data, if any.
    pub(crate) fn drop_memh(&mut self) {
        if let Some(x) = self.rndv.as_deref_mut() {
            x.memh = None;
        }
    }
}

/// Where a receive is: a stage of the family that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvStage {
    Tag(TagRecv),
    Rndv(RndvRecv),
}

impl RecvStage {
    /// Waiting for a rendezvous sender's data (its put and ATP, or its pipelined data).
    #[inline]
    pub(crate) fn waits_rndv_data(self) -> bool {
        matches!(self, RecvStage::Rndv(r) if r.waits_data())
    }
}

pub(crate) struct RecvReq {
    pub(crate) tag: u64,
    pub(crate) mask: u64,
    pub(crate) buf: RecvBuf,
    pub(crate) sender_tag: u64,
    pub(crate) total: usize,
    pub(crate) received: usize,
    pub(crate) offset: usize,
    /// Rendezvous, RMA and user active message state (`None` for an eager receive).
    pub(crate) rndv: Option<Box<Rndv>>,
    pub(crate) stage: RecvStage,
    /// A user `get` (no rendezvous messages around it).
    pub(crate) user_rma: bool,
}

impl RecvReq {
    /// A receive into `buf` of a message matching `tag` under `mask`, not yet matched.
    #[inline]
    pub(crate) fn new(buf: RecvBuf, tag: u64, mask: u64) -> Self {
        RecvReq {
            tag,
            mask,
            buf,
            sender_tag: 0,
            total: 0,
            received: 0,
            offset: 0,
            rndv: None,
            stage: RecvStage::Tag(TagRecv::Posted),
            user_rma: false,
        }
    }

    /// True when the receive holds no memory of its own (its buffer was given back or is the
    /// caller's, and it has no rendezvous state): dropping it would do nothing.
    #[inline(always)]
    pub(crate) fn owns_nothing(&self) -> bool {
        self.rndv.is_none() && self.buf.owns_nothing()
    }

    /// The registration of the buffer, if any.
    #[inline]
    pub(crate) fn memh(&self) -> Option<&MemHandle> {
        self.rndv.as_ref().and_then(|x| x.memh.as_ref())
    }
}

pub(crate) enum ReqKind {
    Send(SendReq),
    Recv(RecvReq),
    StreamRecv(StreamRecv),
    Atomic {
        value: u64,
    },
    Close,
    /// A flush: `eps_left` transport flushes (or, with endpoint parts, parts) still running,
    /// `retry` endpoints whose flush waits for their queue to drain or for resources.
    Flush {
        eps_left: usize,
        retry: Vec<usize>,
        /// Wire id of the worker-wide flush this request is one endpoint's part of.
        parent: Option<u64>,
    },
}

/// One request: its kind (the families' records), and the core's bookkeeping, private to
/// `worker` (the families use the accessors in `worker/core_api.rs`).
pub(crate) struct Req {
    pub(super) gen: u32,
    pub(super) ep: Option<usize>,
    pub(crate) kind: ReqKind,
    pub(super) done: Option<Done>,
    /// Who learns of the result when the request finishes.
    pub(super) notify: Notify,
}

/// How a finished request's result is handed over.
pub(crate) enum Notify {
    /// Kept in the slot until `request_take` (or `wait`).
    Take,
    /// Given to a callback at the end of a progress call.
    Callback(RequestCallback),
    /// Queued with this token for [`crate::Worker::take_done_tokens`]: an eager receive's result
    /// as soon as it finishes, the others' at the end of a progress call.
    Token(u64),
    /// Given with this token to the worker's completion hook
    /// ([`crate::Worker::set_completion_hook`]): an eager receive's result as soon as it
    /// finishes, the others' at the end of a progress call.
    Hook(u64),
    /// Kept in the slot like `Take`, and this waker woken at the end of a progress call.
    Waker(std::task::Waker),
    /// The handle was dropped: freed at the end of a progress call.
    Release,
}

/// A finished request's result as its slot keeps it: a [`Completion`] with the error boxed, so
/// the slot (one per request in flight) is 48 bytes smaller; errors are the rare case.
pub(crate) struct Done {
    pub(super) status: std::result::Result<(), Box<Error>>,
    pub(super) buf: Option<Vec<u8>>,
    pub(super) len: usize,
    pub(super) tag: u64,
    pub(super) value: u64,
}

impl Done {
    /// A result as the slot keeps it (the error boxed).
    #[inline(always)]
    pub(crate) fn new(status: Result<()>, buf: Option<Vec<u8>>, len: usize, tag: u64) -> Done {
        Done {
            status: status.map_err(Box::new),
            buf,
            len,
            tag,
            value: 0,
        }
    }

    /// The status the request finished with.
    pub(crate) fn status(&self) -> Result<()> {
        self.status.as_ref().map_err(|e| (**e).clone()).copied()
    }
}

impl From<Completion> for Done {
    #[inline]
    fn from(c: Completion) -> Self {
        Done {
            status: c.status.map_err(Box::new),
            buf: c.buf,
            len: c.len,
            tag: c.tag,
            value: c.value,
        }
    }
}

impl From<Done> for Completion {
    #[inline]
    fn from(d: Done) -> Self {
        Completion {
            status: d.status.map_err(|e| *e),
            buf: d.buf,
            len: d.len,
            tag: d.tag,
            value: d.value,
        }
    }
}

pub(crate) const POOL_MAX: usize = 64;
pub(crate) const POOL_BUF_MAX: usize = 1 << 20;

/// A zeroed buffer of `len` bytes for data a peer announced, or `NoMemory` when the allocator
/// refuses it (a peer's size must not abort the process). Zeroed pages come from the allocator
/// lazily, as `vec![0; len]` does.
pub(crate) fn zeroed_buf(len: usize) -> Result<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len)
        .map_err(|_| Error::NoMemory(format!("{len} bytes cannot be allocated")))?;
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return Err(Error::NoMemory(format!(
            "cannot allocate {len} bytes for a message a peer announced"
        )));
    }
    // SAFETY: `p` comes from the global allocator with the layout of `len` u8s (capacity
    // `len`), and all `len` bytes are initialised (zero).
    Ok(unsafe { Vec::from_raw_parts(p, len, len) })
}
