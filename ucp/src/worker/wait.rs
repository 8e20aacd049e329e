//! Sleeping until there is work: the worker's event fd, arming it, and `wait_event`, on
//! `uct::Worker`'s event set (the interfaces' event fds and a waker, in one epoll set from
//! `ucs`). A sleep never outlasts the next timer (keepalive, close deadlines), so timers run
//! on time from the `progress` that follows.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::context::Features;
use crate::worker::Worker;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;
use ucs::async_ctx::Waker;
use ucs::{Error, Result};

impl Worker {
    /// The event fd to sleep on (needs [`Features::WAKEUP`]): readable when progress has work.
    pub fn efd(&self) -> Result<RawFd> {
        self.ifaces.event_fd().ok_or_else(|| {
            Error::Unsupported("the context was created without Features::WAKEUP".into())
        })
    }

    /// Arms every interface's event fd. Gives `Ok(false)` when events are already pending: call
    /// `progress()` instead of sleeping. Either way the next `progress()` polls every
    /// interface: a caller that sleeps on [`Worker::efd`] in its own event loop wakes for an
    /// event on any of them, also one progress would otherwise skip as idle (an interface
    /// without endpoints, where a peer's first message arrives).
    pub fn arm(&mut self) -> Result<bool> {
        self.efd()?;
        self.st.clock_stale = true;
        self.poll_all = true;
        // Work the next progress does at once (not waiting for a transport event) must not
        // wait for one either: queued sends, endpoints to connect, completions whose callbacks
        // or tokens are due, failures to report.
        if !self.st.pending_eps.is_empty()
            || !self.st.to_connect.is_empty()
            || !self.st.callbacks_due.is_empty()
            || !self.st.tokens_done.is_empty()
            || !self.st.failed_notify.is_empty()
        {
            return Ok(false);
        }
        if !self.ifaces.arm()? {
            self.poll_all = true;
            return Ok(false);
        }
        Ok(true)
    }

    /// Sleeps until an interface has events, [`Worker::waker`] is signalled, `timeout` passes
    /// (`None`: no limit) or the next timer is due, whichever comes first. Gives at once when
    /// events are already pending. Needs [`Features::WAKEUP`].
    pub fn wait_event(&mut self, timeout: Option<Duration>) -> Result<()> {
        self.efd()?;
        self.sleep(timeout)
    }

    /// The longest a caller sleeping on [`Worker::efd`] may sleep before calling progress
    /// again: the nearest timed work of an interface that no descriptor signals (`None`: none).
    pub fn wake_within(&self) -> Option<Duration> {
        self.ifaces.wake_within()
    }

    /// A waker that ends this worker's [`Worker::wait_event`] from any thread (UCX's
    /// `ucp_worker_signal`); every call gives the same one.
    pub fn waker(&mut self) -> Result<Arc<Waker>> {
        self.ifaces.waker()
    }

    /// Sleeps like [`Worker::wait_event`]; without [`Features::WAKEUP`] only the waker and
    /// `timeout` end the sleep (the multi-thread worker's idle wait).
    pub(crate) fn sleep(&mut self, timeout: Option<Duration>) -> Result<()> {
        if self.st.features.contains(Features::WAKEUP) && !self.arm()? {
            return Ok(());
        }
        let bound = match (timeout, self.st.until_next_timer()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.ifaces.wait(bound)?;
        // The event may be on an interface progress would skip as idle.
        self.poll_all = true;
        Ok(())
    }
}
