//! Requests: allocation, the scrambled ids they carry on the wire, completion (`finish`), user
//! callbacks, and the public test/take/wait/cancel calls.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::request::{Completion, Op, Request};
use crate::worker::state::{Notify, RecvStage, Req, ReqKind, State};
use crate::worker::Worker;
use ucs::{Error, Result};

impl Worker {
    /// True when the request has finished.
    pub fn request_test(&self, req: &Request) -> bool {
        match self.st.reqs.get(req.key as usize) {
            Some(r) if r.gen == req.gen => r.done.is_some(),
            _ => true,
        }
    }

    /// Takes a finished request's result, or gives the request back if it is still running.
    pub fn request_take(&mut self, req: Request) -> std::result::Result<Completion, Request> {
        match self.st.reqs.get(req.key as usize) {
            Some(r) if r.gen == req.gen && r.done.is_some() => {
                // Moving `done` out of the removed request (not `take` before the removal)
                // leaves less to drop.
                let r = self.st.reqs.remove(req.key as usize);
                Ok(r.done.unwrap_or_else(Completion::ok))
            }
            Some(r) if r.gen == req.gen => Err(req),
            _ => Ok(Completion {
                status: Err(Error::InvalidParam("request was already taken".into())),
                ..Completion::ok()
            }),
        }
    }

    /// Has `callback` invoked with the request's result when it finishes, during a later
    /// `progress()` call (at once, here, if it has already finished). The request is consumed:
    /// its result goes to the callback only (the handle stays usable for `request_cancel`). A
    /// stale or already taken request is an error.
    pub fn request_set_callback(
        &mut self,
        req: &Request,
        callback: impl FnOnce(Completion) + 'static,
    ) -> Result<()> {
        let key = req.key as usize;
        match self.st.reqs.get_mut(key) {
            Some(r) if r.gen == req.gen && r.done.is_none() => {
                r.notify = Notify::Callback(Box::new(callback));
                Ok(())
            }
            Some(r) if r.gen == req.gen => {
                let r = self.st.reqs.remove(key);
                callback(r.done.unwrap_or_else(Completion::ok));
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
    pub fn request_set_token(&mut self, req: &Request, token: u64) -> Result<Option<Completion>> {
        let key = req.key as usize;
        match self.st.reqs.get_mut(key) {
            Some(r) if r.gen == req.gen && r.done.is_none() => {
                r.notify = Notify::Token(token);
                Ok(None)
            }
            Some(r) if r.gen == req.gen => {
                let r = self.st.reqs.remove(key);
                Ok(Some(r.done.unwrap_or_else(Completion::ok)))
            }
            _ => Err(Error::InvalidParam(
                "request was already taken or does not belong to this worker".into(),
            )),
        }
    }

    /// True when a token request has finished since the last [`Worker::take_done_tokens`].
    #[inline]
    pub fn has_done_tokens(&self) -> bool {
        !self.st.tokens_done.is_empty()
    }

    /// Moves the results of finished token requests to the end of `out`.
    #[inline]
    pub fn take_done_tokens(&mut self, out: &mut Vec<(u64, Completion)>) {
        if !self.st.tokens_done.is_empty() {
            out.append(&mut self.st.tokens_done);
        }
    }

    /// Cancels a posted receive that has not matched: it completes with `Canceled` and gives its
    /// buffer back. Gives false when the request can no longer be canceled.
    pub fn request_cancel(&mut self, req: &Request) -> bool {
        self.st.cancel(req.key as usize, req.gen)
    }

    /// Progresses until the request finishes and gives its result.
    pub fn wait(&mut self, req: Request) -> Completion {
        let mut req = req;
        let mut idle = 0u32;
        loop {
            match self.request_take(req) {
                Ok(c) => return c,
                Err(r) => req = r,
            }
            if self.progress() == 0 {
                idle += 1;
                if idle > 64 {
                    std::thread::yield_now();
                }
            } else {
                idle = 0;
            }
        }
    }

    /// Finishes `op`: its completion at once, or after waiting on its request.
    pub fn complete(&mut self, op: Op) -> Completion {
        match op {
            Op::Done(c) => c,
            Op::Pending(r) => self.wait(r),
        }
    }
}

impl State {
    pub(crate) fn new_req(&mut self, ep: Option<usize>, kind: ReqKind) -> usize {
        self.req_gen = self.req_gen.wrapping_add(1) & 0x0FFF_FFFF;
        self.reqs.insert(Req {
            gen: self.req_gen,
            ep,
            kind,
            done: None,
            notify: Notify::Take,
        })
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
            return Op::Pending(Request {
                key: key as u32,
                gen: r.gen,
            });
        }
        let r = self.reqs.remove(key);
        Op::Done(r.done.unwrap_or_else(Completion::ok))
    }

    /// Finishes request `key` with `status`, releasing what the protocol held.
    pub(crate) fn finish(&mut self, key: usize, status: Result<()>) {
        let r = &self.reqs[key];
        if r.done.is_some() {
            return;
        }
        if let ReqKind::Flush {
            parent: Some(p), ..
        } = r.kind
        {
            self.flush_part_done(key, p, status);
            return;
        }
        if matches!(r.kind, ReqKind::Send(_)) {
            self.tm_send_finishing(key);
        }
        let r = &mut self.reqs[key];
        let mut recycle = None;
        let mut am = None;
        let (buf, len, tag, value) = match &mut r.kind {
            ReqKind::Send(s) => {
                s.memh = None;
                s.rkey = None;
                let data = std::mem::take(&mut s.data).into_vec();
                if s.give_back {
                    (data, 0, s.tag, 0)
                } else {
                    recycle = data;
                    (None, 0, s.tag, 0)
                }
            }
            ReqKind::Recv(rv) => {
                // A receive that failed while the peer may still write into it (rendezvous
                // put into our registered buffer) keeps its buffer in quarantine until the
                // worker is dropped, so a late write never lands in freed memory.
                let exposed = status.is_err()
                    && rv.memh.is_some()
                    && matches!(rv.stage, RecvStage::RndvWait | RecvStage::RndvGet);
                rv.memh = None;
                rv.rkey = None;
                am = rv.am.take();
                let buf = std::mem::take(&mut rv.buf).into_vec();
                let buf = if exposed {
                    self.quarantine.extend(buf);
                    None
                } else {
                    buf
                };
                (buf, rv.total, rv.sender_tag, 0)
            }
            ReqKind::StreamRecv { buf, filled } => (Some(std::mem::take(buf)), *filled, 0, 0),
            ReqKind::Atomic { value } => (None, 0, 0, *value),
            ReqKind::Flush { .. } | ReqKind::Close => (None, 0, 0, 0),
        };
        if let Some((id, hdr)) = am {
            // A user active message that came by rendezvous: hand it to its handler.
            let ep = r.ep;
            self.reqs.remove(key);
            match (status, buf, ep) {
                (Ok(()), Some(data), Some(ep)) => self.deliver_am(ep, id, &hdr, data),
                (Ok(()), Some(data), None) => {
                    tracing::warn!("active message {id} lost: its request has no endpoint");
                    self.put_buf(data);
                }
                (Err(e), _, _) => tracing::warn!("active message {id} lost: {e}"),
                _ => {}
            }
            return;
        }
        r.done = Some(Completion {
            status,
            buf,
            len,
            tag,
            value,
        });
        if !matches!(r.notify, Notify::Take) {
            self.callbacks_due.push(key);
        }
        if let Some(v) = recycle {
            self.put_buf(v);
        }
    }

    /// Invokes the callbacks of requests that finished and queues the results of token
    /// requests; each request is consumed.
    pub(crate) fn run_callbacks(&mut self) -> usize {
        let mut n = 0;
        while let Some(key) = self.callbacks_due.pop() {
            let due = self
                .reqs
                .get(key)
                .is_some_and(|r| r.done.is_some() && !matches!(r.notify, Notify::Take));
            if due {
                let r = self.reqs.remove(key);
                match (r.notify, r.done) {
                    (Notify::Callback(cb), Some(c)) => cb(c),
                    (Notify::Token(t), Some(c)) => self.tokens_done.push((t, c)),
                    _ => continue,
                }
                n += 1;
            }
        }
        n
    }
}
