//! Requests: allocation, the scrambled ids they carry on the wire, completion (`finish`), user
//! callbacks, tokens and wakers, the release of dropped handles, and the public
//! test/take/wait/cancel calls (with the typed waits and the sleeping `wait`).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::request::{Completion, Op, Received, Request, RequestId};
use crate::worker::api_types::{CompletionHook, RecvOk};
use crate::worker::req::{
    AmByRndv, Done, Notify, RecvBuf, RecvReq, RecvStage, ReqKind, SendBuf, SendData, SendReq,
};
use crate::worker::req_table::TakeRecv;
use crate::worker::state::{Core, State, QUEUED_RECV_OK};
use crate::worker::Worker;
use std::task::Waker;
use std::time::{Duration, Instant};
use ucs::{Error, Result};

/// Progress calls in a row that find nothing to do before `wait` sleeps on the event fd.
const IDLE_SPINS: u32 = 4096;
/// Longest sleep of `wait` when every interface signals its events on the event fd (a bound
/// against a missed wakeup, not the expected wait).
const SLEEP_MAX: Duration = Duration::from_millis(50);
/// Longest sleep of `wait` when some interface has no event fd (its events are found only by
/// polling).
const SLEEP_MAX_POLLED: Duration = Duration::from_millis(1);

#[cold]
fn foreign() -> Error {
    Error::InvalidParam("the request belongs to another worker".into())
}

#[cold]
fn taken() -> Error {
    Error::InvalidParam("the request was already taken".into())
}

impl Worker {
    /// True when the request has finished (also when its result went to a callback or token).
    /// A request of another worker is an error.
    pub fn request_test(&self, req: &Request) -> Result<bool> {
        if !req.is_of(&self.st.req_shared) {
            return Err(foreign());
        }
        Ok(match self.st.reqs.get(req.key as usize) {
            Some(r) if r.gen == req.gen() => r.done.is_some(),
            _ => true,
        })
    }

    /// Takes a finished request's result, or gives the request back if it is still running. A
    /// request of another worker gives a completion with `InvalidParam` and this worker is left
    /// alone (the handle is dropped, which releases it on its own worker).
    #[inline]
    pub fn request_take(&mut self, req: Request) -> std::result::Result<Completion, Request> {
        match self.take_plain_recv(&req) {
            TakeRecv::Taken(r) => {
                req.into_key();
                // A receive's value is always 0.
                Ok(Completion {
                    status: Ok(()),
                    buf: Some(r.buf),
                    len: r.len,
                    tag: r.tag,
                    value: 0,
                })
            }
            TakeRecv::Running => Err(req),
            TakeRecv::Other => self.request_take_other(req),
        }
    }

    /// The fast path of [`Worker::request_take`] and [`Worker::request_take_recv`]
    /// ([`ReqTable::take_recv`] on a handle of this worker): on `Taken` the request is freed
    /// and the caller disarms the handle; `Other` (a foreign handle among them) is left to the
    /// caller's general path.
    ///
    /// [`ReqTable::take_recv`]: crate::worker::req_table::ReqTable::take_recv
    #[inline(always)]
    fn take_plain_recv(&mut self, req: &Request) -> TakeRecv {
        if !req.is_of(&self.st.req_shared) {
            return TakeRecv::Other;
        }
        self.st.reqs.take_recv(req.key as usize, req.gen())
    }

    /// [`Worker::request_take`] of anything but a plain finished receive.
    #[inline(never)]
    fn request_take_other(&mut self, req: Request) -> std::result::Result<Completion, Request> {
        if !req.is_of(&self.st.req_shared) {
            return Ok(Completion::failed(foreign()));
        }
        let key = req.key as usize;
        match self.st.reqs.get_mut(key) {
            Some(r) if r.gen == req.gen() => match r.done.take() {
                Some(c) => {
                    self.st.reqs.free(req.into_key());
                    Ok(c.into())
                }
                None => Err(req),
            },
            _ => {
                req.disarm();
                Ok(Completion::failed(taken()))
            }
        }
    }

    /// Takes a finished receive's result (tag, stream or `get`), or gives the request back if
    /// it is still running: what [`Worker::request_take`] and [`Completion::into_recv`] give,
    /// without a whole [`Completion`] on the way.
    #[inline(always)]
    pub fn request_take_recv(
        &mut self,
        req: Request,
    ) -> std::result::Result<Result<Received>, Request> {
        match self.take_plain_recv(&req) {
            TakeRecv::Taken(r) => {
                req.into_key();
                Ok(Ok(r))
            }
            TakeRecv::Running => Err(req),
            TakeRecv::Other => self.request_take_recv_other(req),
        }
    }

    /// [`Worker::request_take_recv`] of anything but a plain finished receive.
    #[inline(never)]
    fn request_take_recv_other(
        &mut self,
        req: Request,
    ) -> std::result::Result<Result<Received>, Request> {
        self.request_take_other(req).map(Completion::into_recv)
    }

    /// Has `callback` invoked with the request's result when it finishes, during a later
    /// `progress()` call (at once, here, if it has already finished). The request is consumed:
    /// its result goes to the callback only, the worker frees it afterwards, and the handle stays
    /// usable for `request_cancel` (dropping it does nothing more). A stale or already taken
    /// request, or one of another worker, is an error.
    pub fn request_set_callback(
        &mut self,
        req: &Request,
        callback: impl FnOnce(Completion) + 'static,
    ) -> Result<()> {
        if !req.is_of(&self.st.req_shared) {
            return Err(foreign());
        }
        let key = req.key as usize;
        match self.st.reqs.get_mut(key) {
            Some(r) if r.gen == req.gen() && r.done.is_none() => {
                req.disarm();
                r.notify = Notify::Callback(Box::new(callback));
                Ok(())
            }
            Some(r) if r.gen == req.gen() => {
                req.disarm();
                let c = self.st.reqs.take_done(key);
                callback(c.unwrap_or_else(Completion::ok));
                Ok(())
            }
            _ => Err(Error::InvalidParam(
                "request was already taken or does not belong to this worker".into(),
            )),
        }
    }

    /// Has the request's result queued with `token` when it finishes, for
    /// [`Worker::take_done_tokens`] after a later `progress()` call; no allocation. Gives the
    /// result at once if the request has already finished. The request is consumed as by
    /// [`Worker::request_set_callback`].
    #[inline]
    pub fn request_set_token(&mut self, req: &Request, token: u64) -> Result<Option<Completion>> {
        if !req.is_of(&self.st.req_shared) {
            return Err(foreign());
        }
        let key = req.key as usize;
        match self.st.reqs.get_mut(key) {
            Some(r) if r.gen == req.gen() && r.done.is_none() => {
                req.disarm();
                r.notify = Notify::Token(token);
                Ok(None)
            }
            Some(r) if r.gen == req.gen() => {
                req.disarm();
                let c = self.st.reqs.take_done(key);
                Ok(Some(c.unwrap_or_else(Completion::ok)))
            }
            _ => Err(taken()),
        }
    }

    /// Like [`Worker::request_set_token`], consuming the handle: gives the request's plain
    /// [`RequestId`] (to cancel it with [`Worker::request_cancel_id`]; nothing to drop) and its
    /// result if it has already finished.
    #[inline]
    pub fn request_into_token(
        &mut self,
        req: Request,
        token: u64,
    ) -> Result<(RequestId, Option<Completion>)> {
        let done = self.request_set_token(&req, token)?;
        let id = RequestId {
            wid: self.st.id,
            key: req.key,
            gen: req.gen(),
        };
        req.into_key();
        Ok((id, done))
    }

    /// Like [`Worker::request_into_token`], but a request that has already finished has its
    /// result queued for [`Worker::take_done_tokens`] too: only the id comes back (no
    /// completion is moved through the caller).
    #[inline]
    pub fn request_into_token_queued(&mut self, req: Request, token: u64) -> Result<RequestId> {
        self.request_into_notify(req, token, Notify::Token(token))
    }

    /// Gives request `req` the notification `notify` if it is still running, or queues its
    /// result with `token` for [`Worker::take_done_tokens`]; gives its plain id.
    #[inline]
    fn request_into_notify(
        &mut self,
        req: Request,
        token: u64,
        notify: Notify,
    ) -> Result<RequestId> {
        if !req.is_of(&self.st.req_shared) {
            return Err(foreign());
        }
        let key = req.key as usize;
        let gen = req.gen();
        match self.st.reqs.get_mut(key) {
            Some(r) if r.gen == gen => {
                if r.done.is_none() {
                    r.notify = notify;
                } else {
                    let c = self.st.reqs.take_done(key).unwrap_or_else(Completion::ok);
                    self.st.tokens_done.push((token, c));
                }
                req.into_key();
                Ok(RequestId {
                    wid: self.st.id,
                    key: key as u32,
                    gen,
                })
            }
            _ => {
                req.disarm();
                Err(taken())
            }
        }
    }

    /// Has the results of hook requests ([`Worker::request_into_hook`]) given to `hook`, with
    /// their tokens, the moment they finish: during the worker call that finishes them (a
    /// `progress()`, a cancel, a send that completes queued work), while the worker is still
    /// borrowed — so the hook must not reach the worker (it records the result; whoever owns
    /// the token acts on it after the call returns). Replaces an earlier hook; `None` removes
    /// it (results then queue for [`Worker::take_done_tokens`], as a token's do). The hook
    /// sees the result in place; what it holds (a buffer, an error) is dropped after the call.
    pub fn set_completion_hook(&mut self, hook: Option<CompletionHook>) {
        self.st.completion_hook = hook;
    }

    /// With `on`, a hook receive (tag or stream) that finishes into the client's memory without
    /// error is not given to the completion hook: it is queued, as a
    /// [`RecvOk`], for [`Worker::pop_recv_ok`] (a plain record instead of a call with a
    /// [`Completion`]; whoever drains it completes the request). Off (the default), or turned
    /// off, every result goes to the hook; turning it off drops what is queued.
    pub fn queue_recv_ok(&mut self, on: bool) {
        self.st.recv_ok_on = on;
        self.st.client_queued &= !QUEUED_RECV_OK;
        self.st.recv_ok = if on {
            crate::worker::api_types::RecvOkQueue::with_capacity(64)
        } else {
            Default::default()
        };
    }

    /// True when [`Worker::pop_recv_ok`] has something to give.
    #[inline(always)]
    pub fn has_recv_ok(&self) -> bool {
        self.st.client_queued & QUEUED_RECV_OK != 0
    }

    /// What waits for the client, in one byte: [`QUEUED_RECV_OK`] when
    /// [`Worker::pop_recv_ok`] has something to give, [`QUEUED_AM`](crate::QUEUED_AM) when
    /// [`Worker::am_pop_small`] or [`Worker::am_pop`] has.
    #[inline(always)]
    pub fn client_queued(&self) -> u8 {
        self.st.client_queued
    }

    /// The oldest queued [`RecvOk`], taken off the queue.
    #[inline(always)]
    pub fn pop_recv_ok(&mut self) -> Option<RecvOk> {
        let r = self.st.recv_ok.pop();
        if self.st.recv_ok.is_empty() {
            self.st.client_queued &= !QUEUED_RECV_OK;
        }
        r
    }

    /// Like [`Worker::request_into_token_queued`], but the result goes to the completion hook
    /// ([`Worker::set_completion_hook`]) when the request finishes. A request that has finished
    /// already has its result queued for [`Worker::take_done_tokens`] with the token (so the
    /// hook never runs inside this call). Gives the request's plain id (for
    /// [`Worker::request_cancel_id`]).
    #[inline(always)]
    pub fn request_into_hook(&mut self, req: Request, token: u64) -> Result<RequestId> {
        let key = req.key as usize;
        let gen = req.gen();
        if req.is_of(&self.st.req_shared) {
            if let Some(r) = self.st.reqs.get_mut(key) {
                if r.gen == gen && r.done.is_none() {
                    req.into_key();
                    r.notify = Notify::Hook(token);
                    return Ok(RequestId {
                        wid: self.st.id,
                        key: key as u32,
                        gen,
                    });
                }
            }
        }
        self.request_into_hook_other(req, token)
    }

    /// [`Worker::request_into_hook`] of a request that has finished, was taken, or belongs to
    /// another worker.
    #[cold]
    #[inline(never)]
    fn request_into_hook_other(&mut self, req: Request, token: u64) -> Result<RequestId> {
        self.request_into_notify(req, token, Notify::Hook(token))
    }

    /// [`Worker::request_cancel`] by plain id; an id of another worker is an error.
    pub fn request_cancel_id(&mut self, id: RequestId) -> Result<bool> {
        if id.wid != self.st.id {
            return Err(foreign());
        }
        Ok(self.st.tag_family().cancel(id.key as usize, id.gen))
    }

    /// True when a token request has finished since the last [`Worker::take_done_tokens`].
    #[inline]
    pub fn has_done_tokens(&self) -> bool {
        !self.st.tokens_done.is_empty()
    }

    /// Moves the results of finished token requests to the end of `out`. An empty `out` is
    /// swapped with the worker's queue (nothing is copied; the worker keeps `out`'s capacity).
    #[inline]
    pub fn take_done_tokens(&mut self, out: &mut Vec<(u64, Completion)>) {
        if self.st.tokens_done.is_empty() {
            return;
        }
        if out.is_empty() {
            std::mem::swap(out, &mut self.st.tokens_done);
        } else {
            out.append(&mut self.st.tokens_done);
        }
    }

    /// Cancels a posted receive that has not matched: it completes with `Canceled` and gives its
    /// buffer back. Gives `Ok(false)` when the request can no longer be canceled; a request of
    /// another worker is an error.
    pub fn request_cancel(&mut self, req: &Request) -> Result<bool> {
        if !req.is_of(&self.st.req_shared) {
            return Err(foreign());
        }
        Ok(self.st.tag_family().cancel(req.key as usize, req.gen()))
    }

    /// Takes a finished request's result, or registers `waker` to be woken by the `progress()`
    /// call that finishes it and gives the request back (what a [`std::future::Future`] over a
    /// request does; see [`crate::OpFuture`]). A request whose result goes to a callback or
    /// token gives `InvalidParam`, as one of another worker does.
    pub fn poll_request(
        &mut self,
        req: Request,
        waker: &Waker,
    ) -> std::result::Result<Completion, Request> {
        if !req.is_of(&self.st.req_shared) {
            return Ok(Completion::failed(foreign()));
        }
        let key = req.key as usize;
        let Some(r) = self.st.reqs.get_mut(key).filter(|r| r.gen == req.gen()) else {
            req.disarm();
            return Ok(Completion::failed(taken()));
        };
        if r.done.is_some() {
            let c = self.st.reqs.take_done(req.into_key());
            return Ok(c.unwrap_or_else(Completion::ok));
        }
        match &mut r.notify {
            Notify::Waker(w) if w.will_wake(waker) => {}
            n @ (Notify::Take | Notify::Waker(_)) => *n = Notify::Waker(waker.clone()),
            _ => {
                req.disarm();
                return Ok(Completion::failed(Error::InvalidParam(
                    "the request's result goes to a callback or token".into(),
                )));
            }
        }
        Err(req)
    }

    /// Progresses until the request finishes and gives its result. After a while without
    /// anything to do it sleeps on the worker's event fd (with
    /// [`Features::WAKEUP`](crate::Features::WAKEUP)) instead of spinning.
    pub fn wait(&mut self, req: Request) -> Completion {
        match self.wait_until(req, None) {
            Ok(c) => c,
            Err(_) => Completion::failed(Error::Timeout("wait without a deadline ended".into())),
        }
    }

    /// Like [`Worker::wait`], but gives the request back (still running) when it has not
    /// finished within `timeout`.
    pub fn wait_timeout(
        &mut self,
        req: Request,
        timeout: Duration,
    ) -> std::result::Result<Completion, Request> {
        self.wait_until(req, Some(Instant::now() + timeout))
    }

    fn wait_until(
        &mut self,
        req: Request,
        deadline: Option<Instant>,
    ) -> std::result::Result<Completion, Request> {
        let mut req = req;
        let mut idle = 0u32;
        loop {
            match self.request_take(req) {
                Ok(c) => return Ok(c),
                Err(r) => req = r,
            }
            let now = deadline.map(|_| Instant::now());
            if let (Some(d), Some(now)) = (deadline, now) {
                if now >= d {
                    return Err(req);
                }
            }
            if self.progress() > 0 {
                idle = 0;
                continue;
            }
            idle = idle.saturating_add(1);
            if idle > IDLE_SPINS && self.ifaces.event_fd().is_some() {
                let all_fds = self.ifaces.iter().all(|i| {
                    use uct::Iface as _;
                    i.event_fd().is_some()
                });
                let mut t = if all_fds { SLEEP_MAX } else { SLEEP_MAX_POLLED };
                if let (Some(d), Some(now)) = (deadline, now) {
                    t = t.min(d.saturating_duration_since(now));
                }
                if let Err(e) = self.wait_event(Some(t)) {
                    tracing::debug!("wait: sleeping on the event fd failed: {e}");
                    std::thread::yield_now();
                }
            } else if idle > 64 {
                std::thread::yield_now();
            }
        }
    }

    /// Waits for a receive (tag, stream or `get`; finished or running) and gives what it
    /// received.
    pub fn wait_recv(&mut self, op: impl Into<Op>) -> Result<Received> {
        self.complete(op.into()).into_recv()
    }

    /// Waits for a fetching atomic (finished or running) and gives the fetched value.
    pub fn wait_fetch(&mut self, op: impl Into<Op>) -> Result<u64> {
        self.complete(op.into()).into_value()
    }

    /// Waits for any operation (finished or running) and gives its status.
    pub fn wait_done(&mut self, op: impl Into<Op>) -> Result<()> {
        self.complete(op.into()).into_result()
    }

    /// Finishes `op`: its completion at once, or after waiting on its request.
    pub fn complete(&mut self, op: Op) -> Completion {
        match op {
            Op::Done(c) => c,
            Op::Pending(r) => self.wait(r),
        }
    }

    /// Requests this worker holds: running ones, and finished ones whose result was not taken
    /// yet (a dropped request counts until it is released).
    pub fn request_count(&self) -> usize {
        self.st.reqs.len()
    }
}

impl Core {
    #[inline]
    pub(crate) fn new_req(&mut self, ep: Option<usize>, kind: ReqKind) -> usize {
        self.req_gen = self.req_gen.wrapping_add(1) & 0x0FFF_FFFF;
        self.reqs.insert_with(self.req_gen, ep, kind)
    }

    pub(crate) fn wire_id(&self, key: usize) -> u64 {
        (self.reqs[key].gen as u64) << 32 | key as u64
    }

    /// The endpoint request `key` works for. A send, a stream receive or a matched receive
    /// always has one; a request without one is an error here, never endpoint 0.
    pub(crate) fn req_ep(&self, key: usize) -> Result<usize> {
        self.reqs.get(key).and_then(|r| r.ep).ok_or_else(|| {
            Error::InvalidParam(format!("request {key} is not bound to an endpoint"))
        })
    }

    pub(crate) fn req_by_wire(&self, id: u64) -> Option<usize> {
        let key = (id & 0xFFFF_FFFF) as usize;
        match self.reqs.get(key) {
            Some(r) if r.gen as u64 == id >> 32 && r.done.is_none() => Some(key),
            _ => None,
        }
    }

    pub(crate) fn op_of(&mut self, key: usize) -> Op {
        let r = &self.reqs[key];
        if r.done.is_none() {
            return Op::Pending(Request::new(key, r.gen, &self.req_shared));
        }
        Op::Done(self.reqs.take_done(key).unwrap_or_else(Completion::ok))
    }

    /// Invokes the callbacks of requests that finished, queues the results of token requests,
    /// wakes the wakers of awaited ones (which stay for the awaiting future to take) and frees
    /// released ones.
    pub(crate) fn run_callbacks(&mut self) -> usize {
        let mut n = 0;
        while let Some(key) = self.callbacks_due.pop() {
            let Some(r) = self.reqs.get_mut(key) else {
                continue;
            };
            if r.done.is_none() {
                continue;
            }
            match std::mem::replace(&mut r.notify, Notify::Take) {
                Notify::Take => continue,
                Notify::Waker(w) => w.wake(),
                Notify::Callback(cb) => {
                    cb(self.reqs.take_done(key).unwrap_or_else(Completion::ok));
                }
                Notify::Token(t) => {
                    let c = self.reqs.take_done(key).unwrap_or_else(Completion::ok);
                    self.tokens_done.push((t, c));
                }
                Notify::Hook(t) => {
                    let c = self.reqs.take_done(key).unwrap_or_else(Completion::ok);
                    self.hook_done(t, c);
                }
                Notify::Release => self.free_req(key),
            }
            n += 1;
        }
        n
    }

    /// Hook receive `key` (token `token`) finished into the client's memory without error,
    /// with `len` bytes and `tag` (0 for a stream): its slot is freed, and the result queued as
    /// a [`RecvOk`] when [`Worker::queue_recv_ok`] is on, else given to the hook with a status
    /// and buffer that are constants (nothing of it is dropped after the hook). The common
    /// completion of the C library's tag and stream receives.
    #[inline(never)]
    pub(crate) fn hook_ok(&mut self, key: usize, token: u64, len: usize, tag: u64) {
        self.free_plain_req(key);
        if self.recv_ok_on {
            self.recv_ok.push(RecvOk { token, len, tag });
            self.client_queued |= QUEUED_RECV_OK;
            return;
        }
        let c = Completion {
            status: Ok(()),
            buf: None,
            len,
            tag,
            value: 0,
        };
        self.hook_done(token, c);
    }

    /// Gives a hook request's result to the completion hook (or, without one, queues it as a
    /// token's).
    #[inline]
    pub(crate) fn hook_done(&mut self, token: u64, c: Completion) {
        match self.completion_hook.as_mut() {
            Some(hook) => hook(token, &c),
            None => self.tokens_done.push((token, c)),
        }
    }

    /// Releases the requests whose handles were dropped: a finished one is freed now, a running
    /// one when it finishes. Gives how many were freed.
    pub(crate) fn release_dropped(&mut self) -> usize {
        let mut n = 0;
        while let Some((key, gen)) = self.req_shared.pop() {
            let key = key as usize;
            let Some(r) = self.reqs.get_mut(key).filter(|r| r.gen == gen) else {
                continue;
            };
            if !matches!(r.notify, Notify::Take | Notify::Waker(_)) {
                continue;
            }
            if r.done.is_some() {
                self.free_req(key);
                n += 1;
            } else {
                r.notify = Notify::Release;
            }
        }
        n
    }

    /// A new send request on endpoint `idx` of `data` (copied into a pool buffer when
    /// borrowed), tagged `tag`.
    pub(crate) fn new_send(
        &mut self,
        idx: usize,
        tag: u64,
        data: SendData<'_>,
        sync: bool,
    ) -> usize {
        let (data, give_back) = match data {
            SendData::Owned(v) => (SendBuf::from(v), true),
            SendData::Borrowed(b) => {
                let mut v = self.get_buf();
                v.extend_from_slice(b);
                (SendBuf::from(v), false)
            }
            SendData::Raw(b) => (SendBuf::raw(b), false),
        };
        self.new_req(
            Some(idx),
            ReqKind::Send(SendReq::new(tag, data, give_back, sync)),
        )
    }

    /// The send request `key`. Internal invariant: callers pass keys of requests they know are
    /// sends (created as one, or checked by [`Core::peer_req`](crate::worker::state::Core::peer_req) or the completion kind); a
    /// peer's id never reaches here unchecked.
    #[allow(clippy::unreachable)]
    pub(crate) fn send_mut(&mut self, key: usize) -> &mut SendReq {
        match &mut self.req_mut(key).kind {
            ReqKind::Send(s) => s,
            _ => unreachable!("request {key} is not a send"),
        }
    }

    /// A new receive request into `buf` for `tag` under `mask`.
    #[inline]
    pub(crate) fn new_recv(&mut self, buf: impl Into<RecvBuf>, tag: u64, mask: u64) -> usize {
        let buf = buf.into();
        self.new_req(None, ReqKind::Recv(RecvReq::new(buf, tag, mask)))
    }

    /// The receive request `key`. Internal invariant, as [`Core::send_mut`].
    #[allow(clippy::unreachable)]
    pub(crate) fn recv_mut(&mut self, key: usize) -> &mut RecvReq {
        match &mut self.req_mut(key).kind {
            ReqKind::Recv(r) => r,
            _ => unreachable!("request {key} is not a receive"),
        }
    }

    /// Removes request `key`, recycling the buffer its result holds.
    fn free_req(&mut self, key: usize) {
        if let Some(buf) = self.reqs.take_done(key).and_then(|c| c.buf) {
            self.put_buf(buf);
        }
    }
}

impl State {
    /// Finishes request `key` with `status`: first what a family holds of it (a tag-offload
    /// send's entry is released, an active message that came by rendezvous goes to its
    /// handler), then [`Core::finish`].
    #[inline]
    pub(crate) fn finish(&mut self, key: usize, status: Result<()>) {
        let Some(r) = self.core.reqs.get(key) else {
            return;
        };
        if r.done.is_some() {
            return;
        }
        match &r.kind {
            ReqKind::Recv(rv) if rv.rndv.is_none() => {}
            ReqKind::Recv(rv) if rv.rndv.as_ref().is_some_and(|x| x.am.is_some()) => {
                return self.finish_am_by_rndv(key, status);
            }
            ReqKind::Send(s) if s.tm_held => self.tag_family().tm_send_finishing(key),
            _ => {}
        }
        self.core.finish(key, status);
    }

    /// [`State::finish`] of a receive that brought a user active message by rendezvous: the
    /// request goes, and the message to the AM family.
    #[cold]
    fn finish_am_by_rndv(&mut self, key: usize, status: Result<()>) {
        let ep = self.core.reqs[key].ep;
        let (buf, am) = self.core.take_recv_result(key, &status);
        self.core.reqs.free(key);
        if let Some((id, hdr)) = am {
            self.am_family().am_rndv_received(ep, id, &hdr, status, buf);
        }
    }

    /// [`State::settle_held`] before the worker finishes requests with an endpoint's failure
    /// or close: a request a family finished before (an ATS, then the peer's close, in one
    /// progress call) keeps its own result.
    #[inline]
    pub(crate) fn settle_held_first(&mut self) {
        if !self.core.held_done.is_empty() {
            self.settle_held();
        }
    }

    /// Finishes the requests [`Core::finish`] left to this level (`held_done`) through
    /// [`State::finish`]. Gives how many.
    #[cold]
    pub(crate) fn settle_held(&mut self) -> usize {
        let mut n = 0;
        while let Some((key, gen, status)) = self.core.held_done.pop() {
            // (A request failed with its endpoint meanwhile is finished already; its slot may
            // hold another request by now.)
            if self.core.reqs.get(key).is_some_and(|r| r.gen == gen) {
                self.finish(key, status);
            }
            n += 1;
        }
        n
    }
}

impl Core {
    /// Finishes request `key` with `status`, releasing what the protocol held. A request
    /// another family holds part of (a tag-offload send's transport entry, an active message
    /// that came by rendezvous) is left to [`State::finish`] (queued on `held_done`, which the
    /// next progress call settles); a flush's part goes to its parent flush. A request
    /// already finished (or freed) is left alone. An eager receive whose result goes to a token is queued for
    /// `take_done_tokens` at once and its slot freed here (nothing else waits on it), without
    /// a pass through `run_callbacks`.
    #[inline]
    pub(crate) fn finish(&mut self, key: usize, status: Result<()>) {
        let Some(r) = self.reqs.get_mut(key) else {
            return;
        };
        if r.done.is_some() {
            return;
        }
        // An eager receive holds nothing but its buffer.
        if let ReqKind::Recv(rv) = &mut r.kind {
            if rv.rndv.is_none() {
                let buf = std::mem::take(&mut rv.buf).into_vec();
                let (len, tag) = (rv.total, rv.sender_tag);
                if let Notify::Hook(t) | Notify::Token(t) = r.notify {
                    // The buffer was moved out and there is no rendezvous state: the kind owns
                    // nothing, nor does a token.
                    let hook = matches!(r.notify, Notify::Hook(_));
                    self.reqs.free_plain(key);
                    let c = Completion {
                        status,
                        buf,
                        len,
                        tag,
                        value: 0,
                    };
                    if hook {
                        self.hook_done(t, c);
                    } else {
                        self.tokens_done.push((t, c));
                    }
                    return;
                }
                // `done` is empty (checked above): nothing to drop.
                std::mem::forget(r.done.replace(Done::new(status, buf, len, tag)));
                if !matches!(r.notify, Notify::Take) {
                    self.callbacks_due.push(key);
                    self.more_work = true;
                }
                return;
            }
        }
        self.finish_any(key, status);
    }

    /// Takes what receive `key`'s result keeps: its buffer (kept in quarantine instead when
    /// it failed while the peer may still write into it: a rendezvous put into our registered
    /// buffer, so a late write never lands in freed memory) and the user active message it
    /// brought by rendezvous, if any. Its rendezvous box goes back to the pool.
    fn take_recv_result(
        &mut self,
        key: usize,
        status: &Result<()>,
    ) -> (Option<Vec<u8>>, Option<AmByRndv>) {
        let ReqKind::Recv(rv) = &mut self.reqs[key].kind else {
            return (None, None);
        };
        let mut rndv = rv.rndv.take();
        let exposed = status.is_err()
            && rndv.as_ref().is_some_and(|x| x.memh.is_some())
            && matches!(rv.stage, RecvStage::Rndv(_));
        let am = rndv.as_mut().and_then(|x| x.am.take());
        let buf = std::mem::take(&mut rv.buf).into_vec();
        let buf = if exposed {
            self.quarantine.extend(buf);
            None
        } else {
            buf
        };
        if let Some(x) = rndv {
            // Drops the registration and remote key before the buffer is given back.
            Core::recycle_rndv(&mut self.rndv_boxes, x);
        }
        (buf, am)
    }

    /// [`Core::finish`] of a request another family holds part of: queued for
    /// [`State::settle_held`] (once).
    #[cold]
    #[inline(never)]
    fn leave_held(&mut self, key: usize, status: Result<()>) {
        let gen = self.reqs[key].gen;
        if !self.held_done.iter().any(|&(k, g, _)| k == key && g == gen) {
            self.held_done.push((key, gen, status));
            self.more_work = true;
        }
    }

    /// Has the worker fail endpoint `idx` with `err` on its next progress call: for a family
    /// that finds it failed (failing it finishes every family's requests on it, which only
    /// the worker can).
    #[cold]
    pub(crate) fn fail_ep_soon(&mut self, idx: usize, err: Error) {
        if let Some(gen) = self.ep_gen(idx) {
            self.to_fail.push((idx, gen, err));
            self.more_work = true;
        }
    }

    /// [`Core::finish`] of any request.
    fn finish_any(&mut self, key: usize, status: Result<()>) {
        let (buf, len, tag, value, recycle) = match &mut self.reqs[key].kind {
            ReqKind::Recv(rv) if rv.rndv.as_ref().is_some_and(|x| x.am.is_some()) => {
                return self.leave_held(key, status);
            }
            ReqKind::Send(s) if s.tm_held => return self.leave_held(key, status),
            ReqKind::Flush {
                parent: Some(p), ..
            } => {
                let p = *p;
                return self.flush_part_done(key, p, status);
            }
            ReqKind::Recv(rv) => {
                let (len, tag) = (rv.total, rv.sender_tag);
                let (buf, _) = self.take_recv_result(key, &status);
                (buf, len, tag, 0, None)
            }
            ReqKind::Send(s) => {
                let rndv = s.rndv.take();
                let data = std::mem::take(&mut s.data).into_vec();
                let r = if s.give_back {
                    (data, 0, s.tag, 0, None)
                } else {
                    (None, 0, s.tag, 0, data)
                };
                if let Some(x) = rndv {
                    // Drops the registration before the buffer is given back.
                    Core::recycle_rndv(&mut self.rndv_boxes, x);
                }
                r
            }
            ReqKind::StreamRecv(sr) => {
                let (buf, filled) = sr.take_result();
                (buf, filled, 0, 0, None)
            }
            ReqKind::Atomic { value } => (None, 0, 0, *value, None),
            ReqKind::Flush { .. } | ReqKind::Close => (None, 0, 0, 0, None),
        };
        let c = Completion {
            status,
            buf,
            len,
            tag,
            value,
        };
        let r = &mut self.reqs[key];
        if let Notify::Hook(t) = r.notify {
            // The completion hook (the C library's) touches nothing of the worker: its result
            // goes to it now, not through the callback queue.
            self.reqs.free(key);
            if let Some(v) = recycle {
                self.put_buf(v);
            }
            self.hook_done(t, c);
            return;
        }
        r.done = Some(c.into());
        if !matches!(r.notify, Notify::Take) {
            self.callbacks_due.push(key);
            self.more_work = true;
        }
        if let Some(v) = recycle {
            self.put_buf(v);
        }
    }
}

/// Status of a receive of capacity `cap` that got all `total` bytes of a message.
#[inline]
pub(crate) fn recv_status(total: usize, cap: usize) -> Result<()> {
    if total > cap {
        Err(Error::Truncated {
            len: total,
            capacity: cap,
        })
    } else {
        Ok(())
    }
}

impl Core {
    /// Finishes receive `key` once all its bytes arrived (eager fragments, rendezvous
    /// pipeline data), truncated if they did not fit.
    pub(crate) fn recv_check_done(&mut self, key: usize) {
        let r = self.recv_mut(key);
        if r.received >= r.total {
            let (total, cap) = (r.total, r.buf.len());
            self.finish(key, recv_status(total, cap));
        }
    }
}
