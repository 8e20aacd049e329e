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
use ucs::{Error, Outcome, Result};
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
    /// Flushes endpoints `eps`. Several endpoints get one flush request each, parts of the
    /// returned worker-wide request, so a failed transport flush fails the endpoint it belongs
    /// to (and the worker-wide flush with it).
    pub(crate) fn flush_eps(&mut self, eps: &[usize]) -> Result<Op> {
        for &idx in eps {
            self.ep_usable(idx)?;
        }
        if let [] | [_] = eps {
            let ep = eps.first().copied();
            let key = self.new_flush(ep, None);
            if let Err(e) = self.flush_step(key) {
                self.reqs.remove(key);
                if let Some(idx) = ep {
                    self.fail_ep(idx, e.clone());
                }
                return Err(e);
            }
            self.flush_watch(key);
            return Ok(self.op_of(key));
        }
        let key = self.new_req(
            None,
            ReqKind::Flush {
                eps_left: eps.len(),
                retry: Vec::new(),
                parent: None,
            },
        );
        let wire = self.wire_id(key);
        for &idx in eps {
            let part = self.new_flush(Some(idx), Some(wire));
            match self.flush_step(part) {
                Ok(()) => self.flush_watch(part),
                Err(e) => self.flush_failed(part, e),
            }
        }
        Ok(self.op_of(key))
    }

    /// A flush request for endpoint `ep` (none: nothing to flush).
    fn new_flush(&mut self, ep: Option<usize>, parent: Option<u64>) -> usize {
        self.new_req(
            ep,
            ReqKind::Flush {
                eps_left: 0,
                retry: ep.into_iter().collect(),
                parent,
            },
        )
    }

    /// Keeps an unfinished flush request on the list `progress` steps.
    fn flush_watch(&mut self, key: usize) {
        if self.reqs.get(key).is_some_and(|r| r.done.is_none()) {
            self.flushes.push(key);
        }
    }

    /// A transport refused a flush: the flush request fails, and so does its endpoint.
    fn flush_failed(&mut self, key: usize, e: Error) {
        let ep = self.reqs.get(key).and_then(|r| r.ep);
        self.finish(key, Err(e.clone()));
        if let Some(idx) = ep {
            self.fail_ep(idx, e);
        }
    }

    /// One endpoint's part of a worker-wide flush finished: the part is forgotten, and the
    /// worker-wide request finishes with the first error or after its last part.
    pub(crate) fn flush_part_done(&mut self, key: usize, parent: u64, status: Result<()>) {
        self.reqs.remove(key);
        self.flushes.retain(|&k| k != key);
        let Some(p) = self.req_by_wire(parent) else {
            return;
        };
        match status {
            Err(e) => self.finish(p, Err(e)),
            Ok(()) => {
                if let ReqKind::Flush { eps_left, .. } = &mut self.reqs[p].kind {
                    *eps_left = eps_left.saturating_sub(1);
                    if *eps_left == 0 {
                        self.finish(p, Ok(()));
                    }
                }
            }
        }
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
        if let ReqKind::Flush {
            eps_left, retry, ..
        } = &mut self.reqs[key].kind
        {
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
                    self.flush_failed(key, e);
                    continue;
                }
            }
            if self.reqs.get(key).is_some_and(|r| r.done.is_none()) {
                self.flushes.push(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker};

    fn workers(n: usize) -> Vec<Worker> {
        let ctx = Context::new(ContextParams {
            features: Features::TAG,
            config: Some(UcpConfig {
                tls: vec!["tcp".into()],
                ..Default::default()
            }),
        })
        .expect("context");
        (0..n).map(|_| Worker::new(&ctx).expect("worker")).collect()
    }

    /// A worker-wide flush over two endpoints runs as one part per endpoint: it completes once,
    /// after both, and no part is left behind among the worker's requests.
    #[test]
    fn worker_flush_over_two_endpoints_completes_and_leaves_no_part() {
        let mut w = workers(3);
        let (a, peers) = w.split_first_mut().expect("three workers");
        let eps: Vec<_> = peers
            .iter()
            .map(|p| a.ep_create(p.address(), EpParams::default()).expect("ep"))
            .collect();
        // Wire both endpoints up, with eager data sent on each (no receive is posted).
        for (i, &ep) in eps.iter().enumerate() {
            let mut op = a.tag_send(ep, i as u64, &[7u8; 1000]).expect("send");
            let mut spins = 0u64;
            while let Op::Pending(r) = op {
                a.progress();
                peers.iter_mut().for_each(|p| {
                    p.progress();
                });
                op = match a.request_take(r) {
                    Ok(c) => Op::Done(c),
                    Err(r) => Op::Pending(r),
                };
                spins += 1;
                assert!(spins < 50_000_000, "send {i} never completed (watchdog)");
            }
        }
        let mut op = a.flush().expect("flush");
        let mut spins = 0u64;
        let done = loop {
            match op {
                Op::Done(c) => break c,
                Op::Pending(r) => {
                    a.progress();
                    peers.iter_mut().for_each(|p| {
                        p.progress();
                    });
                    op = match a.request_take(r) {
                        Ok(c) => Op::Done(c),
                        Err(r) => Op::Pending(r),
                    };
                }
            }
            spins += 1;
            assert!(spins < 50_000_000, "flush never completed (watchdog)");
        };
        assert!(done.status.is_ok(), "flush: {:?}", done.status);
        for &ep in &eps {
            assert!(a.ep_status(ep).is_ok(), "endpoint failed");
        }
        assert!(a.st.reqs.is_empty(), "a flush part is left behind");
        assert!(a.st.flushes.is_empty(), "a flush part is still stepped");
    }
}
