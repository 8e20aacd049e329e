//! The worker's timers, on a [`ucs::async_ctx::TimerQueue`] read against the worker's clock:
//! the periodic keepalive sweep (each endpoint's transports check their peer; with an
//! application-level keepalive timeout configured, keepalive messages and the failure of silent
//! peers) and the deadline of each flush close waiting for its CLOSE_ACK.
//!
//! Liveness needs nothing from the peer's application: a peer process that computes for hours
//! without calling progress is alive to every transport check (its kernel, its adapter, its
//! process are there). Only `RUCX_KEEPALIVE_TIMEOUT`, off by default, judges a peer by what
//! its worker sends.
//!
//! `Core::next_timer` caches the earliest deadline, so progress spends one comparison on timers
//! per call that reads the clock (a timer added already due marks the clock stale, so the next
//! call reads it), and a sleeper bounds its sleep with it.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::wire::am_id;
use crate::worker::ep::EpState;
use crate::worker::state::State;
use crate::worker::timer_queue::Timer;
use std::time::Duration;
use ucs::async_ctx::TimerId;
use ucs::Error;
use uct::Endpoint as _;

impl State {
    /// Starts the keepalive sweep when the configuration enables keepalive; the first sweep
    /// is due at once.
    pub(crate) fn start_keepalive(&mut self) -> ucs::Result<()> {
        if let Some(interval) = self.cfg.keepalive_interval {
            let period = if self.app_keepalive() {
                // Silence is judged to a quarter interval.
                (interval / 4).max(Duration::from_millis(1))
            } else {
                interval
            };
            let now = self.now_cache;
            self.add_timer(now, Some(period), Timer::Keepalive)?;
        }
        Ok(())
    }

    /// Adds a timer due at `deadline` (on the worker's clock) and updates `next_timer`.
    pub(crate) fn add_timer(
        &mut self,
        deadline: Duration,
        period: Option<Duration>,
        what: Timer,
    ) -> ucs::Result<TimerId> {
        let id = self.timers.queue.add(deadline, period, what)?;
        self.next_timer = self.next_timer.min(deadline);
        if deadline <= self.now_cache {
            // Due already: the next progress call reads the clock and runs it.
            self.clock_stale = true;
        }
        Ok(id)
    }

    /// Time until the next timer is due (zero if overdue), `None` without timers: how long a
    /// sleeper may sleep before progress has timers to run.
    pub(crate) fn until_next_timer(&self) -> Option<Duration> {
        (self.next_timer != Duration::MAX).then(|| self.next_timer.saturating_sub(self.now()))
    }

    /// Runs the timers due at `now_cache` and recomputes `next_timer`.
    pub(crate) fn run_timers(&mut self) {
        let mut due = std::mem::take(&mut self.core.timers.due);
        due.clear();
        self.core.timers.queue.expire(self.core.now_cache, &mut due);
        let mut closes = false;
        for &(id, what) in &due {
            match what {
                Timer::Keepalive => self.keepalive_sweep(),
                Timer::CloseTimeout => closes |= self.close_timed_out(id),
            }
        }
        self.core.timers.due = due;
        if closes {
            self.progress_closings();
        }
        self.core.next_timer = self
            .core
            .timers
            .queue
            .next_deadline()
            .unwrap_or(Duration::MAX);
    }

    /// Whether the application-level keepalive is on (`RUCX_KEEPALIVE_TIMEOUT` set): keepalive
    /// messages, and peers judged by their silence.
    pub(crate) fn app_keepalive(&self) -> bool {
        self.cfg.keepalive_timeout != Duration::MAX
    }

    /// Asks every lane of every ready endpoint to check its peer ([`uct::Endpoint::check`]:
    /// without the peer application's help), failing the endpoints whose check fails at once
    /// (a later failure arrives from the transport's progress). With the application-level
    /// keepalive on, also sends a keepalive to every ready peer we have not sent to for an
    /// interval, and fails the endpoints of peers silent for longer than the timeout.
    fn keepalive_sweep(&mut self) {
        let Some(interval) = self.cfg.keepalive_interval else {
            return;
        };
        let now = self.now_cache;
        let timeout = self.cfg.keepalive_timeout;
        let app = self.app_keepalive();
        let ready: Vec<usize> = self
            .eps
            .iter()
            .filter(|(_, e)| e.state == EpState::Ready)
            .map(|(i, _)| i)
            .collect();
        for idx in ready {
            if let Err(e) = self.check_lanes(idx) {
                self.fail_ep(idx, e);
                continue;
            }
            if !app {
                continue;
            }
            let ep = &self.eps[idx];
            let silent = ep.last_rx.until(now);
            if silent > timeout {
                let e = Error::Timeout(format!(
                    "worker {:#018x} was silent for {:?} (RUCX_KEEPALIVE_TIMEOUT {:?})",
                    ep.uuid, silent, timeout
                ));
                self.fail_ep(idx, e);
                continue;
            }
            if ep.last_tx.until(now) >= interval && ep.pending.is_empty() {
                if let Err(e) = self.send_ctl(idx, am_id::KEEPALIVE, &[]) {
                    self.fail_ep(idx, e);
                }
            }
        }
    }

    /// The transport check of each lane of endpoint `idx` (the first failure, if any).
    fn check_lanes(&mut self, idx: usize) -> ucs::Result<()> {
        let Some(lanes) = self.eps[idx].lanes.as_mut() else {
            return Ok(());
        };
        for (_, uep) in lanes.uct.iter_mut() {
            uep.check()?;
        }
        if let Some(w) = lanes.rma_wait.as_mut() {
            w.ep.check()?;
        }
        Ok(())
    }

    /// The close whose deadline timer is `id` stops waiting; false when none matches (a close
    /// that finished before its deadline left its timer behind).
    fn close_timed_out(&mut self, id: TimerId) -> bool {
        match self.closings.iter_mut().find(|c| c.deadline == Some(id)) {
            Some(c) => {
                c.timed_out = true;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Timer;
    use crate::{Context, ContextParams, Features, UcpConfig, Worker};
    use std::time::Duration;

    /// A timer added already due runs on the next progress call, whichever call that is (the
    /// clock is read only on some calls; adding a due timer marks it stale).
    #[test]
    fn a_timer_added_due_runs_on_the_next_progress_call() {
        let ctx = Context::new(ContextParams {
            features: Features::TAG,
            config: Some(UcpConfig {
                tls: vec!["tcp".into()],
                keepalive_interval: None,
                ..Default::default()
            }),
        })
        .expect("context");
        let mut w = Worker::new(&ctx).expect("worker");
        for round in 0..40u32 {
            let now = w.st.now_cache;
            w.st.add_timer(now, None, Timer::CloseTimeout)
                .expect("add_timer");
            assert_eq!(w.st.next_timer, now, "round {round}: next_timer");
            w.progress();
            assert_eq!(
                w.st.next_timer,
                Duration::MAX,
                "round {round} (tick {}): the due timer did not run",
                w.tick
            );
        }
    }
}
