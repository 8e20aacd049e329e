//! Closing endpoints: forced close, and flush close (flush, CLOSE, wait for CLOSE_ACK or a
//! deadline); the peer's CLOSE closes ours.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::request::Op;
use crate::wire::am_id;
use crate::worker::ep::{Closing, EpState};
use crate::worker::req::ReqKind;
use crate::worker::state::State;
use crate::worker::timer_queue::Timer;
use crate::worker::{CloseMode, EpHandle, Worker};
use ucs::{Error, Result};

impl Worker {
    /// Closes an endpoint (see [`CloseMode`]); the handle is stale afterwards. A flush that fails
    /// (other than because the peer closed first) is reported after the endpoint is closed.
    pub fn ep_close(&mut self, ep: EpHandle, mode: CloseMode) -> Result<()> {
        let op = self.ep_close_nb(ep, mode)?;
        self.complete(op).status
    }

    /// Starts closing an endpoint; the request finishes when it is closed. `Flush` flushes,
    /// sends CLOSE and waits (at most `CLOSE_ACK_WAIT`) until the peer has processed it,
    /// so everything sent before reached the peer's application.
    pub fn ep_close_nb(&mut self, ep: EpHandle, mode: CloseMode) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        let key = self.st.new_req(None, ReqKind::Close);
        if mode == CloseMode::Force || self.st.eps[idx].state != EpState::Ready {
            self.st.close_now(idx, key, Ok(()));
            return Ok(self.st.op_of(key));
        }
        let flush = match self.st.flush_eps(&[idx])? {
            Op::Done(c) => {
                if let Err(e) = c.status {
                    self.st.close_now(idx, key, Err(e));
                    return Ok(self.st.op_of(key));
                }
                None
            }
            Op::Pending(r) => Some(r.into_key()),
        };
        let mut c = Closing {
            ep: idx,
            req: key,
            flush,
            deadline: None,
            timed_out: false,
        };
        if c.flush.is_none() {
            self.st.send_close(&mut c);
        }
        self.st.closings.push(c);
        self.st.more_work = true;
        self.st.progress_closings();
        Ok(self.st.op_of(key))
    }
}

/// Longest a flush close waits for the peer's CLOSE_ACK (shorter with a shorter
/// application-level keepalive timeout). The ack needs the peer's progress, so a peer busy
/// elsewhere may not send it in time; the close then completes without it (the data was
/// flushed to the transport already), and the peer is not declared dead.
const CLOSE_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl State {
    /// Closes endpoint `idx` now, finishes close request `key`, and frees the slot.
    pub(crate) fn close_now(&mut self, idx: usize, key: usize, result: Result<()>) {
        self.close_ep(idx, Error::Canceled);
        if self.eps.contains(idx) {
            self.eps.remove(idx);
        }
        self.to_connect.retain(|&i| i != idx);
        self.failed_notify.retain(|&i| i != idx);
        self.pending_eps.retain(|&i| i != idx);
        self.finish(key, result);
    }

    pub(crate) fn send_close(&mut self, c: &mut Closing) {
        let _ = self.send_ctl(c.ep, am_id::CLOSE, &[]);
        let at = self.now() + self.cfg.keepalive_timeout.min(CLOSE_ACK_WAIT);
        match self.add_timer(at, None, Timer::CloseTimeout) {
            Ok(id) => c.deadline = Some(id),
            Err(e) => {
                tracing::warn!("no timer for a close deadline ({e}): closing without the ack");
                c.timed_out = true;
            }
        }
    }

    pub(crate) fn progress_closings(&mut self) {
        if self.closings.is_empty() {
            return;
        }
        let list = std::mem::take(&mut self.closings);
        for mut c in list {
            if let Some(fk) = c.flush {
                let status = match self.reqs.get(fk) {
                    Some(r) => match &r.done {
                        Some(d) => d.status(),
                        None => {
                            self.closings.push(c);
                            self.more_work = true;
                            continue;
                        }
                    },
                    None => Ok(()),
                };
                if self.reqs.contains(fk) {
                    self.reqs.remove(fk);
                }
                c.flush = None;
                let ready = self
                    .eps
                    .get(c.ep)
                    .is_some_and(|e| e.state == EpState::Ready);
                match status {
                    Ok(()) if ready => self.send_close(&mut c),
                    // The peer closed or failed first: nothing is left to deliver to it.
                    Ok(()) | Err(Error::ConnectionReset(_)) => {
                        self.close_now(c.ep, c.req, Ok(()));
                        continue;
                    }
                    Err(_) if !ready => {
                        self.close_now(c.ep, c.req, Ok(()));
                        continue;
                    }
                    Err(e) => {
                        self.close_now(c.ep, c.req, Err(e));
                        continue;
                    }
                }
            }
            let done = match self.eps.get(c.ep) {
                Some(e) => e.close_acked || e.state != EpState::Ready || c.timed_out,
                None => true,
            };
            if done {
                self.close_now(c.ep, c.req, Ok(()));
            } else {
                self.closings.push(c);
                self.more_work = true;
            }
        }
    }

    pub(crate) fn close_ep(&mut self, idx: usize, err: Error) {
        let Some(ep) = self.eps.get_mut(idx) else {
            return;
        };
        if ep.state == EpState::Closed {
            return;
        }
        ep.state = EpState::Closed;
        self.teardown_ep(idx, &err);
        let uuid = self.eps[idx].uuid;
        if self.by_uuid.get(&uuid) == Some(&idx) {
            self.by_uuid.remove(&uuid);
        }
    }

    /// CLOSE: the peer closed its endpoint.
    pub(crate) fn on_close(&mut self, idx: usize) {
        // Everything the peer sent before CLOSE has been handled: tell it so.
        let _ = self.send_ctl(idx, am_id::CLOSE_ACK, &[]);
        self.close_ep(
            idx,
            Error::ConnectionReset("the peer closed its endpoint".into()),
        );
    }
}
