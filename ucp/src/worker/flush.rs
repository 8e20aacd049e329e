//! Flush and fence: worker-wide and per-endpoint flushes, which complete when every lane of the
//! endpoints has flushed its outstanding operations and every emulated atomic is acknowledged;
//! a fence, which orders later operations after earlier ones without waiting.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::request::{Completion, Op};
use crate::worker::ep::{Ep, EpState, Pending};
use crate::worker::req::{comp_id, Req, ReqKind, COMP_FLUSH};
use crate::worker::state::{Core, State};
use crate::worker::{EpHandle, Worker};
use ucs::{Error, Outcome, Result};
use uct::Endpoint as _;

/// Completion id of the transport flushes nobody waits for (the quiet check of a worker-wide
/// flush): it names no request, so its completion is dropped.
const UNWATCHED: uct::CompletionId = uct::CompletionId((COMP_FLUSH << 60) | 0xFFFF_FFFF);

/// True when endpoint `ep` has nothing outstanding: no queued operation, no unacknowledged
/// emulated atomic, and every transport lane flushed at once. A lane that is still busy is
/// left with a flush whose completion nobody waits for.
#[inline]
fn ep_quiet(ep: &mut Ep) -> bool {
    if !ep.pending.is_empty() || ep.amo_sent != ep.amo_acked {
        return false;
    }
    let Some(l) = ep.lanes.as_mut() else {
        return false;
    };
    l.uct
        .iter_mut()
        .all(|(_, uep)| matches!(uep.flush(UNWATCHED), Ok(Outcome::Done(()))))
}

impl Worker {
    /// Flushes every endpoint: completes when everything sent before has completed remotely.
    /// When nothing is outstanding it is done at once, without a request.
    pub fn flush(&mut self) -> Result<Op> {
        let quiet = self
            .st
            .eps
            .iter_mut()
            .all(|(_, e)| e.state != EpState::Ready || ep_quiet(e));
        if quiet {
            return Ok(Op::Done(Completion::ok()));
        }
        let eps: Vec<usize> = self
            .st
            .eps
            .iter()
            .filter(|(_, e)| e.state == EpState::Ready)
            .map(|(i, _)| i)
            .collect();
        self.st.flush_eps(&eps)
    }

    /// True when a flush of endpoint `ep` would be done at once: it is connected and its lanes
    /// have nothing outstanding (see [`Worker::ep_flush`]). False for an unknown handle.
    #[inline]
    pub fn ep_is_quiet(&mut self, ep: EpHandle) -> bool {
        match self.st.core.eps.get_mut(ep.idx as usize) {
            Some(e) if e.gen == ep.gen && ep.wid == self.st.core.id => {
                e.state == EpState::Ready && ep_quiet(e)
            }
            _ => false,
        }
    }

    /// Flushes one endpoint (done at once, without a request, when nothing is outstanding).
    pub fn ep_flush(&mut self, ep: EpHandle) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        // The common case first: a connected endpoint whose lanes have nothing outstanding.
        let e = &mut self.st.eps[idx];
        if e.state == EpState::Ready && ep_quiet(e) {
            return Ok(Op::Done(Completion::ok()));
        }
        self.st.ep_usable(idx)?;
        let ready = {
            let e = &self.st.eps[idx];
            e.pending.is_empty() && e.lanes.is_some()
        };
        if !ready {
            return self.st.flush_eps(&[idx]);
        }
        match self.st.flush_lanes_now(idx) {
            Ok(Some(key)) => {
                self.st.flush_watch(key);
                Ok(self.st.op_of(key))
            }
            Ok(None) => Ok(Op::Done(Completion::ok())),
            Err(e) => {
                self.st.fail_ep(idx, e.clone());
                Err(e)
            }
        }
    }

    /// Orders the operations started after this call after those started before it, at every
    /// target, without waiting: a memory barrier orders the loads, stores and CPU atomics on
    /// peer memory mapped here; an endpoint with operations still outstanding gets a fence in
    /// its queue (with a flush of its lanes), and what is started on it afterwards waits there
    /// until they have completed.
    pub fn fence(&mut self) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        for idx in 0..self.st.eps.capacity() {
            let Some(ep) = self.st.eps.get(idx) else {
                continue;
            };
            if ep.state != EpState::Ready
                || matches!(ep.pending.back(), Some(Pending::Fence { .. }))
            {
                continue;
            }
            let key = if ep.pending.is_empty() && ep.lanes.is_some() {
                match self.st.flush_lanes_now(idx) {
                    Ok(Some(key)) => key,
                    Ok(None) => continue,
                    Err(e) => {
                        self.st.fail_ep(idx, e);
                        continue;
                    }
                }
            } else {
                // Started when the fence reaches the head of the queue.
                self.st.new_req(
                    Some(idx),
                    ReqKind::Flush {
                        eps_left: 0,
                        retry: vec![idx],
                        parent: None,
                    },
                )
            };
            let ep = &mut self.st.eps[idx];
            let amo_sent = ep.amo_sent;
            ep.pending.push_back(Pending::Fence { key, amo_sent });
            self.st.mark_pending(idx);
        }
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
            self.more_work = true;
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
            if !ep.pending.is_empty() || ep.lanes.is_none() || ep.amo_sent != ep.amo_acked {
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

    /// Flushes the lanes of endpoint `idx` (whose queue is empty) now. `None` when everything
    /// has completed (no request is made); otherwise the flush request that completes when the
    /// lanes have flushed and every emulated atomic is acknowledged. The request's wire id is
    /// known before it exists (the slab's next key, the next generation), so the transports
    /// get it while nothing is allocated yet.
    pub(crate) fn flush_lanes_now(&mut self, idx: usize) -> Result<Option<usize>> {
        let gen = self.req_gen.wrapping_add(1) & 0x0FFF_FFFF;
        let wire = u64::from(gen) << 32 | self.reqs.vacant_key() as u64;
        let ep = &mut self.eps[idx];
        let mut started = 0usize;
        let mut again = ep.amo_sent != ep.amo_acked;
        if let Some(l) = ep.lanes.as_mut() {
            for (_, uep) in l.uct.iter_mut() {
                match uep.flush(comp_id(COMP_FLUSH, wire))? {
                    Outcome::InProgress => started += 1,
                    Outcome::NoResource => again = true,
                    Outcome::Done(()) => {}
                }
            }
        }
        if started == 0 && !again {
            return Ok(None);
        }
        let key = self.new_req(
            Some(idx),
            ReqKind::Flush {
                eps_left: started,
                retry: if again { vec![idx] } else { Vec::new() },
                parent: None,
            },
        );
        debug_assert_eq!(self.wire_id(key), wire);
        Ok(Some(key))
    }

    /// The fence with flush request `key` at the head of endpoint `idx`'s queue: true once
    /// everything started before it has completed at the target (the request is then gone and
    /// the fence leaves the queue). Its flush starts here if it had not.
    pub(crate) fn fence_passed(&mut self, idx: usize, key: usize, amo_sent: u32) -> Result<bool> {
        // Atomics behind the fence are not sent yet: every reply so far is for one before it.
        let unacked = (amo_sent.wrapping_sub(self.eps[idx].amo_acked) as i32) > 0;
        let Some(r) = self.reqs.get_mut(key) else {
            return Ok(true);
        };
        let (left, waiting) = match &mut r.kind {
            ReqKind::Flush {
                eps_left, retry, ..
            } => (*eps_left, std::mem::take(retry)),
            _ => return Ok(true),
        };
        if r.done.is_none() && !waiting.is_empty() {
            // Not started, or a lane pushed back: flush the lanes (again).
            let wire = self.wire_id(key);
            let mut started = 0usize;
            let mut again = false;
            if let Some(l) = self.eps[idx].lanes.as_mut() {
                for (_, uep) in l.uct.iter_mut() {
                    match uep.flush(comp_id(COMP_FLUSH, wire))? {
                        Outcome::InProgress => started += 1,
                        Outcome::NoResource => again = true,
                        Outcome::Done(()) => {}
                    }
                }
            }
            if started == 0 && !again && !unacked {
                self.reqs.remove(key);
                return Ok(true);
            }
            if let ReqKind::Flush {
                eps_left, retry, ..
            } = &mut self.reqs[key].kind
            {
                *eps_left += started;
                if again {
                    *retry = waiting;
                }
            }
            return Ok(false);
        }
        let done = self.reqs[key].done.is_some() || left == 0;
        if done && !unacked {
            self.reqs.remove(key);
            return Ok(true);
        }
        Ok(false)
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
                self.more_work = true;
            }
        }
    }
}

impl Core {
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
