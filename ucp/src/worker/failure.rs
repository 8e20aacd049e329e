//! Endpoint failure: failing an endpoint (its requests finish with the error, its lanes are torn
//! down, its error handler runs from `progress`). Keepalive, which fails silent peers, is in
//! `timers`.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::worker::ep::{EpState, Pending};
use crate::worker::req::ReqKind;
use crate::worker::state::State;
use crate::worker::EpHandle;
use ucs::Error;
use uct::Endpoint as _;

impl State {
    pub(crate) fn fail_ep(&mut self, idx: usize, err: Error) {
        let Some(ep) = self.eps.get_mut(idx) else {
            return;
        };
        if matches!(ep.state, EpState::Failed | EpState::Closed) {
            return;
        }
        tracing::debug!("endpoint to {:#018x} failed: {err}", ep.uuid);
        ep.state = EpState::Failed;
        ep.extra_mut().error = Some(err.clone());
        self.late_rx_on_failure(idx, &err);
        self.stats.ep_failures += 1;
        self.teardown_ep(idx, &err);
        self.failed_notify.push(idx);
        self.more_work = true;
    }

    pub(crate) fn teardown_ep(&mut self, idx: usize, err: &Error) {
        self.settle_held_first();
        let ep = &mut self.eps[idx];
        let pend: Vec<Pending> = ep.pending.drain(..).collect();
        if let Some(x) = ep.extra.as_deref_mut() {
            x.rx_gate.clear();
        }
        if let Some(mut l) = ep.lanes.take() {
            if let Some(w) = l.rma_wait.take() {
                if self.by_uct.remove(&(w.li, w.ep.id().0)).is_some() {
                    self.iface_users[w.li] = self.iface_users[w.li].saturating_sub(1);
                }
            }
            for (pos, (li, uep)) in l.uct.iter_mut().enumerate() {
                uep.pending_purge(&mut |_| {});
                if self.by_uct.remove(&(*li, uep.id().0)).is_some()
                    && l.released.map(usize::from) != Some(pos)
                {
                    self.iface_users[*li] = self.iface_users[*li].saturating_sub(1);
                }
            }
        }
        for p in pend {
            match p {
                Pending::Ctl { body, .. } => self.put_buf(body),
                Pending::Fence { key, .. } => {
                    self.reqs.try_remove(key);
                }
                Pending::Req(_) | Pending::Acked { .. } => {}
            }
        }
        let keys: Vec<usize> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.ep == Some(idx) && r.done.is_none())
            .map(|(k, _)| k)
            .collect();
        for k in keys {
            if matches!(self.reqs[k].kind, ReqKind::Flush { .. }) {
                self.finish(k, Err(err.clone()));
                continue;
            }
            self.finish(k, Err(err.clone()));
        }
        let (uuid, failed) = (self.eps[idx].uuid, self.eps[idx].state == EpState::Failed);
        let lost = self.tag.peer_failed(idx, uuid, err);
        if lost != 0 {
            self.stats.unexp_lost += lost as u64;
            // A closed endpoint's are the closer's own doing; a failed one's are news.
            if failed {
                tracing::warn!(
                    "endpoint to {uuid:#018x} failed ({err}) with {lost} unexpected messages \
                     incomplete or waiting in rendezvous: their data cannot come, and the \
                     receives that match them fail"
                );
            } else {
                tracing::debug!(
                    "endpoint to {uuid:#018x} closed with {lost} unexpected messages that \
                     cannot complete: the receives that match them fail"
                );
            }
        }
    }

    pub(crate) fn notify_failures(&mut self) -> usize {
        let mut n = 0;
        while let Some(idx) = self.core.failed_notify.pop() {
            let Some(ep) = self.core.eps.get_mut(idx) else {
                continue;
            };
            let h = EpHandle {
                wid: self.core.id,
                idx: idx as u32,
                gen: ep.gen,
            };
            if ep.state == EpState::Failed && ep.err_handler.is_some() {
                let e = ep.failure();
                if let Some(cb) = ep.err_handler.as_mut() {
                    cb(h, &e);
                }
                n += 1;
            }
        }
        n
    }
}
