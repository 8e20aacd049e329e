//! Flush: worker-wide and per-endpoint flushes, which complete when every lane of the endpoints
//! has flushed its outstanding operations.
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
use crate::worker::state::{comp_id, EpState, Req, ReqKind, State, COMP_FLUSH};
use crate::worker::{EpHandle, Worker};
use ucs::{Outcome, Result};
use uct::Endpoint as _;

impl Worker {
    /// Flushes every endpoint: completes when everything sent before has completed remotely.
    pub fn flush(&mut self) -> Result<Op> {
        let eps: Vec<usize> = self
            .st
            .eps
            .iter()
            .filter(|(_, e)| e.state == EpState::Ready)
            .map(|(i, _)| i)
            .collect();
        self.st.flush_eps(&eps)
    }

    /// Flushes one endpoint.
    pub fn ep_flush(&mut self, ep: EpHandle) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st.flush_eps(&[idx])
    }
}

impl State {
    pub(crate) fn flush_eps(&mut self, eps: &[usize]) -> Result<Op> {
        for &idx in eps {
            self.ep_usable(idx)?;
        }
        let key = self.new_req(
            None,
            ReqKind::Flush {
                eps_left: 0,
                retry: eps.to_vec(),
            },
        );
        self.reqs[key].ep = eps.first().copied();
        self.flush_step(key)?;
        if self.reqs[key].done.is_none() {
            self.flushes.push(key);
        }
        Ok(self.op_of(key))
    }

    /// Issues the transport flushes a flush request still owes: an endpoint whose ucp queue is
    /// not empty waits for it to drain; a transport `NoResource` is retried on the next call.
    pub(crate) fn flush_step(&mut self, key: usize) -> Result<()> {
        let wire = self.wire_id(key);
        let retry = match &mut self.reqs[key].kind {
            ReqKind::Flush { retry, .. } => std::mem::take(retry),
            _ => return Ok(()),
        };
        let mut still = Vec::new();
        let mut started = 0usize;
        for idx in retry {
            if let Err(e) = self.ep_usable(idx) {
                self.finish(key, Err(e));
                return Ok(());
            }
            let ep = &mut self.eps[idx];
            if !ep.pending.is_empty() || ep.lanes.is_none() {
                still.push(idx);
                continue;
            }
            let l = ep.lanes.as_mut().map(|l| &mut l.uct);
            let mut again = false;
            for (_, uep) in l.into_iter().flatten() {
                match uep.flush(comp_id(COMP_FLUSH, wire))? {
                    Outcome::InProgress => started += 1,
                    Outcome::NoResource => again = true,
                    Outcome::Done(()) => {}
                }
            }
            if again {
                still.push(idx);
            }
        }
        if let ReqKind::Flush { eps_left, retry } = &mut self.reqs[key].kind {
            *eps_left += started;
            *retry = still;
            if *eps_left == 0 && retry.is_empty() {
                self.finish(key, Ok(()));
            }
        }
        Ok(())
    }

    pub(crate) fn progress_flushes(&mut self) {
        if self.flushes.is_empty() {
            return;
        }
        let list = std::mem::take(&mut self.flushes);
        for key in list {
            let waiting = match self.reqs.get(key) {
                Some(Req {
                    done: None,
                    kind: ReqKind::Flush { retry, .. },
                    ..
                }) => !retry.is_empty(),
                _ => continue,
            };
            if waiting {
                if let Err(e) = self.flush_step(key) {
                    self.finish(key, Err(e));
                    continue;
                }
            }
            if self.reqs.get(key).is_some_and(|r| r.done.is_none()) {
                self.flushes.push(key);
            }
        }
    }
}
