//! Interfaces (`uct_iface_h`) and the event sink that progress delivers into.

use crate::caps::{EventFlags, IfaceAttr};
use crate::ep::{CompletionId, EpId, PendingId, TagRecvId, AM_ID_MAX};
use crate::md::Iov;
use crate::Endpoint;
use std::os::fd::RawFd;
use ucs::{Error, Outcome, Result};

/// Parameters for opening an interface.
#[derive(Debug, Clone, Default)]
pub struct IfaceParams {
    /// Device name, as listed by the resource query (`memory`, `memory0`, `lo`, `eth0`, `rxe0:1`).
    pub device: String,
    /// Endpoints whose connection is still being made refuse operations with `NoResource`
    /// (the operation waits as a pending request, as with UCX's transports) instead of
    /// queueing them: then no operation completes before its bytes can reach the peer, and a
    /// process that ends right after a completed send loses nothing. ucp asks for it; the
    /// default (false) lets a new endpoint queue at once. Transports whose endpoints are
    /// usable at once ignore it.
    pub connect_backpressure: bool,
}

/// A rendezvous announced by a peer through tag offload, not matched by a posted receive.
#[derive(Debug, Clone, Copy)]
pub struct RndvRemote<'a> {
    /// The sender's rendezvous header (from `tag_rndv_zcopy`/`tag_rndv_request`).
    pub header: &'a [u8],
    /// Address of the data in the sender's memory (0 for `tag_rndv_request`).
    pub remote_addr: u64,
    /// Length of the data.
    pub length: usize,
    /// The sender's packed remote key for the data (empty for `tag_rndv_request`).
    pub rkey: &'a [u8],
}

/// Takes receives back from an interface's tag matching from anywhere, including inside a
/// progress callback of any interface: the layer above matches messages that came another way
/// in its callbacks and must take the receive back from the transport at that moment, before the
/// transport can match it too.
pub trait TagRecvCancel {
    /// As [`Iface::tag_recv_cancel`]: removes the receive if it is still posted. Gives
    /// [`Error::Busy`] when a message already matched it (it completes normally) and
    /// [`Error::InvalidParam`] for an unknown receive.
    fn cancel(&self, ctx: TagRecvId, force: bool) -> Result<()>;
}

/// A shared handle to an interface's [`TagRecvCancel`] (see [`Iface::tag_recv_canceler`]).
pub type TagRecvCanceler = std::rc::Rc<dyn TagRecvCancel>;

/// What an interface rings when it gets work (see [`Iface::ring_on_work`]).
pub trait WorkBell {
    /// Notes that an interface that rings this bell has work.
    fn ring(&self);
}

/// Receives everything progress produces. Callbacks may call any endpoint operation
/// (transports never hold internal borrows across a callback), but must not call `progress`.
pub trait EventSink {
    /// An active message arrived; `data` is valid only during this call (copy it to keep it).
    fn am(&mut self, id: u8, data: &[u8]);
    /// An active message arrived in a receive buffer the sink may keep: `keep.keep(part)`
    /// leaves `part` of `data` there until the returned [`HeldBuf`](crate::HeldBuf) drops
    /// (or gives `None`: copy it then). By default handled as [`EventSink::am`].
    #[inline]
    fn am_keep(&mut self, id: u8, data: &[u8], keep: crate::held::AmKeep<'_>) {
        let _ = keep;
        self.am(id, data);
    }
    /// Whether the sink may borrow the bytes of active messages with `id` past the call that
    /// delivers them ([`EventSink::am_lend`]). By default never.
    #[inline]
    fn lends(&self, id: u8) -> bool {
        let _ = id;
        false
    }
    /// An active message of an id [`EventSink::lends`] names, whose bytes the sink may borrow
    /// past this call: a transport that calls this (rather than [`EventSink::am`]) keeps
    /// `data` where it is, unreleased, until its next progress call when the sink gives true
    /// ("lent"), the message counted as taken; the call may go on with the messages behind it
    /// (shared memory does when the next one is written already). The sink's caller then reads
    /// the bytes in place before it progresses the interface again. By default handled as
    /// [`EventSink::am`] (nothing lent).
    #[inline]
    fn am_lend(&mut self, id: u8, data: &[u8]) -> bool {
        self.am(id, data);
        false
    }
    /// Whether the interface should end its progress call before active message `id` with
    /// `data`, leaving it for the next call (the sink delivered what its caller waits for, and
    /// the message would only be parked). Asked only after a call has taken a message, so
    /// every call takes at least one. By default never.
    #[inline]
    fn defer(&mut self, id: u8, data: &[u8]) -> bool {
        let _ = (id, data);
        false
    }
    /// An operation that returned `InProgress` finished. `result` holds the fetched value of
    /// fetching atomics (zero-extended), 0 otherwise, or the error.
    fn completion(&mut self, comp: CompletionId, result: Result<u64>);
    /// Data of a `get_bcopy` that returned `InProgress` (followed by its completion).
    fn get_bcopy_data(&mut self, comp: CompletionId, data: &[u8]) {
        let _ = (comp, data);
    }
    /// Send resources returned on `ep`: retry the request. Return `false` if it still got
    /// `NoResource` — it then stays first in the queue and dispatch stops for now.
    fn pending(&mut self, ep: EpId, req: PendingId) -> bool {
        let _ = (ep, req);
        true
    }
    /// The endpoint failed (peer died, connection reset, protocol error). Reported once.
    fn ep_error(&mut self, ep: EpId, err: Error) {
        let _ = (ep, err);
    }
    /// Tag offload: a tagged eager message matched no posted receive.
    fn tag_unexp_eager(&mut self, tag: u64, imm: u64, data: &[u8]) {
        let _ = (tag, imm, data);
    }
    /// Tag offload: a rendezvous matched no posted receive.
    fn tag_unexp_rndv(&mut self, tag: u64, rndv: RndvRemote<'_>) {
        let _ = (tag, rndv);
    }
    /// Tag offload: a posted receive completed (`len` bytes landed) or failed.
    fn tag_recv_done(
        &mut self,
        ctx: TagRecvId,
        tag: u64,
        imm: u64,
        len: usize,
        result: Result<()>,
    ) {
        let _ = (ctx, tag, imm, len, result);
    }
}

/// An interface: a transport opened on a device, owning the receive side.
pub trait Iface {
    /// This transport's endpoint type.
    type Ep: Endpoint;

    /// Capabilities, limits and performance model.
    fn attr(&self) -> &IfaceAttr;
    /// Transport name (`self`, `posix`, `sysv`, `cma`, `tcp`, `rc_verbs`).
    fn tl_name(&self) -> &'static str;
    /// Device name this interface was opened on.
    fn device_name(&self) -> &str;
    /// The device address (host identity, IP address, GID…).
    fn device_address(&self) -> &[u8];
    /// The interface address peers connect to (empty without CONNECT_TO_IFACE).
    fn iface_address(&self) -> &[u8];
    /// Whether a peer with these addresses can be reached; `Err` says why not.
    fn is_reachable(
        &self,
        dev_addr: &[u8],
        iface_addr: Option<&[u8]>,
    ) -> std::result::Result<(), String>;

    /// Creates an endpoint connected to a peer interface (CONNECT_TO_IFACE).
    fn ep_create_connected(&mut self, dev_addr: &[u8], iface_addr: &[u8]) -> Result<Self::Ep>;
    /// Creates an unconnected endpoint, to be connected with `connect_to_ep` (CONNECT_TO_EP).
    fn ep_create(&mut self) -> Result<Self::Ep> {
        Err(Error::Unsupported(format!(
            "{} cannot connect endpoint to endpoint",
            self.tl_name()
        )))
    }

    /// Makes progress: receives messages, completes operations, dispatches pending requests and
    /// endpoint errors into `sink`. Gives the number of events delivered.
    fn progress<S: EventSink>(&mut self, sink: &mut S) -> usize;
    /// A poll that finds nothing to do, when that can be seen in a few loads: true means this
    /// call was the poll (it counts as one) and `progress` would have delivered nothing; false
    /// means `progress` must run. Callers inline it to answer an idle spin without calls. The
    /// default (a transport without such a quick look) says false.
    #[inline(always)]
    fn idle_poll(&mut self) -> bool {
        false
    }
    /// Asks the interface to ring `bell` whenever it gets work. True when it will: its work
    /// only ever comes from calls made on this thread (the self transport: its ring is filled
    /// by its own endpoints' sends), so a caller may poll it only after a ring, provided it
    /// rings again itself when [`Iface::idle_poll`] still finds work after a poll. False (the
    /// default): poll as usual.
    fn ring_on_work(&mut self, bell: std::rc::Rc<dyn WorkBell>) -> bool {
        let _ = bell;
        false
    }
    /// `progress` right after [`Iface::idle_poll`] said false, without looking again (the
    /// default is `progress` itself).
    fn progress_not_idle<S: EventSink>(&mut self, sink: &mut S) -> usize {
        self.progress(sink)
    }
    /// Completes when every operation issued on this interface has completed remotely.
    fn flush(&mut self, comp: CompletionId) -> Result<Outcome>;
    /// Orders operations issued after it behind those issued before it, on every endpoint.
    fn fence(&mut self) -> Result<()> {
        Ok(())
    }

    /// The event file descriptor to sleep on (EventFlags::FD), readable when progress has work.
    fn event_fd(&self) -> Option<RawFd> {
        None
    }
    /// The longest a caller sleeping on the event fd may sleep before calling progress again,
    /// when timed work is due that no descriptor signals (tcp: a listening socket paused at the
    /// descriptor limit resumes then). `None`: no such work.
    fn wake_within(&self) -> Option<std::time::Duration> {
        None
    }
    /// Arms the event fd for `events`. Gives [`Error::Busy`] when events are already pending
    /// (call progress instead of sleeping).
    fn event_arm(&mut self, events: EventFlags) -> Result<()> {
        let _ = events;
        Err(Error::Unsupported(format!(
            "{} has no event fd",
            self.tl_name()
        )))
    }

    /// Tag offload: posts a receive for `tag` under `mask` into registered memory.
    fn tag_recv_zcopy(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        let _ = (tag, mask, iov, ctx);
        Err(Error::Unsupported(format!(
            "{} has no tag offload",
            self.tl_name()
        )))
    }
    /// Tag offload: cancels a posted receive; with `force` it is dropped without a completion,
    /// otherwise it completes with [`Error::Canceled`].
    fn tag_recv_cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
        let _ = (ctx, force);
        Err(Error::Unsupported(format!(
            "{} has no tag offload",
            self.tl_name()
        )))
    }
    /// Tag offload: a handle that cancels this interface's posted receives from anywhere (see
    /// [`TagRecvCancel`]); `None` without tag offload.
    fn tag_recv_canceler(&self) -> Option<TagRecvCanceler> {
        None
    }
}

/// An active-message handler: gets the message bytes.
pub type AmHandler = Box<dyn FnMut(&[u8])>;
/// A completion handler: gets the completion id and result.
pub type CompletionHandler = Box<dyn FnMut(CompletionId, Result<u64>)>;

/// A ready-made sink with one handler per active-message id, like `uct_iface_set_am_handler`.
/// Messages for an id without a handler are dropped with a warning.
#[derive(Default)]
pub struct AmHandlers {
    handlers: [Option<AmHandler>; AM_ID_MAX as usize],
    on_completion: Option<CompletionHandler>,
    /// Endpoint errors seen, in order.
    pub errors: Vec<(EpId, Error)>,
    /// Pending requests that were told to retry, in order.
    pub retries: Vec<(EpId, PendingId)>,
}

impl AmHandlers {
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the handler of an active-message id (`uct_iface_set_am_handler`).
    pub fn set_am_handler(&mut self, id: u8, handler: impl FnMut(&[u8]) + 'static) -> Result<()> {
        crate::ep::check_am_id(id)?;
        self.handlers[id as usize] = Some(Box::new(handler));
        Ok(())
    }
    /// Sets the handler called for every completion.
    pub fn on_completion(&mut self, handler: impl FnMut(CompletionId, Result<u64>) + 'static) {
        self.on_completion = Some(Box::new(handler));
    }
}

impl EventSink for AmHandlers {
    fn am(&mut self, id: u8, data: &[u8]) {
        match self.handlers.get_mut(id as usize).and_then(|h| h.as_mut()) {
            Some(h) => h(data),
            None => tracing::warn!(
                id,
                len = data.len(),
                "active message for an id without handler dropped"
            ),
        }
    }
    fn completion(&mut self, comp: CompletionId, result: Result<u64>) {
        if let Some(h) = self.on_completion.as_mut() {
            h(comp, result);
        }
    }
    fn pending(&mut self, ep: EpId, req: PendingId) -> bool {
        self.retries.push((ep, req));
        true
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.errors.push((ep, err));
    }
}
