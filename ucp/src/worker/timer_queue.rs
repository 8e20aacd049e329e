//! The worker's timer queue and what each timer does when it fires (see `worker::timers`).

use ucs::async_ctx::{TimerId, TimerQueue};

/// What a timer of the worker does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Every keepalive interval (every quarter interval with an application-level timeout):
    /// transport checks, and keepalives to quiet peers and failure of silent ones.
    Keepalive,
    /// A flush close stops waiting for the peer's CLOSE_ACK.
    CloseTimeout,
}

/// The timer queue and the list of due timers it fills (reused: no allocation once warm).
#[derive(Debug, Default)]
pub(crate) struct Timers {
    pub(super) queue: TimerQueue<Timer>,
    pub(super) due: Vec<(TimerId, Timer)>,
}
