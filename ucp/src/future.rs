//! Operations as futures, for a worker an async runtime drives on one thread.
//!
//! The worker stays runtime-agnostic: [`Worker::poll_request`] registers a task's waker on a
//! request, and the `progress()` call that finishes the request wakes it. Some task must keep
//! calling `progress()` while others await: typically a driver that waits for the worker's
//! event fd ([`Worker::efd`]) to become readable after [`Worker::arm`] gave `Ok(true)`, then
//! progresses until idle (the `ucp_tokio` example does it with tokio's `AsyncFd`).

use crate::request::{Completion, Op, Received};
use crate::worker::Worker;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use ucs::Result;

/// An operation as a [`Future`] resolving to its [`Completion`], for a worker shared by the
/// tasks of one thread as `Rc<RefCell<Worker>>`.
///
/// A poll takes the result if the operation has finished; otherwise it calls `progress()` once,
/// looks again, and leaves the task's waker with the request. The worker is borrowed only inside
/// `poll`; a handler running inside `progress()` must not borrow it (the poll then finds it
/// busy and asks to be polled again). Dropping the future drops its request, which releases it
/// (see [`crate::Request`]).
#[must_use = "futures do nothing unless awaited"]
pub struct OpFuture {
    worker: Rc<RefCell<Worker>>,
    op: Option<Op>,
}

impl OpFuture {
    /// A future over `op`, an operation of `worker`.
    pub fn new(worker: &Rc<RefCell<Worker>>, op: Op) -> Self {
        OpFuture {
            worker: Rc::clone(worker),
            op: Some(op),
        }
    }

    /// Awaits a receive and gives what it received (see [`Completion::into_recv`]).
    pub async fn recv(self) -> Result<Received> {
        self.await.into_recv()
    }

    /// Awaits a fetching atomic and gives the fetched value.
    pub async fn fetch(self) -> Result<u64> {
        self.await.into_value()
    }

    /// Awaits any operation and gives its status.
    pub async fn done(self) -> Result<()> {
        self.await.into_result()
    }
}

impl Future for OpFuture {
    type Output = Completion;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completion> {
        let this = &mut *self;
        let req = match this.op.take() {
            Some(Op::Done(c)) => return Poll::Ready(c),
            Some(Op::Pending(r)) => r,
            None => {
                return Poll::Ready(Completion::failed(ucs::Error::InvalidParam(
                    "the operation's future was polled after it finished".into(),
                )))
            }
        };
        let Ok(mut w) = this.worker.try_borrow_mut() else {
            this.op = Some(Op::Pending(req));
            cx.waker().wake_by_ref();
            return Poll::Pending;
        };
        let req = match w.request_take(req) {
            Ok(c) => return Poll::Ready(c),
            Err(r) => r,
        };
        w.progress();
        match w.poll_request(req, cx.waker()) {
            Ok(c) => Poll::Ready(c),
            Err(r) => {
                this.op = Some(Op::Pending(r));
                Poll::Pending
            }
        }
    }
}
