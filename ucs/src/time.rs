//! Monotonic time and an injectable clock, so protocol timers can be tested without sleeping.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A source of monotonic time. Timers and timeouts read one of these, never `Instant::now()`
/// directly, so tests can use [`ManualClock`].
pub trait Clock {
    /// Time elapsed since this clock's origin.
    fn now(&self) -> Duration;

    /// Like [`now`](Clock::now), but may lag it by up to one scheduler tick (a few ms) and is
    /// much cheaper to read: for per-progress bookkeeping such as keepalive stamps, where a few
    /// milliseconds do not matter but a fine clock read on every poll would.
    fn now_coarse(&self) -> Duration {
        self.now()
    }
}

/// The real monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
    /// `origin` as a `CLOCK_MONOTONIC` reading, for [`Clock::now_coarse`].
    origin_since_boot: Duration,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let origin = Instant::now();
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let origin_since_boot = if rc == 0 {
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        } else {
            Duration::ZERO
        };
        MonotonicClock {
            origin,
            origin_since_boot,
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// `CLOCK_MONOTONIC_COARSE`, the last tick's value of the clock `Instant` reads (about 11 ns
    /// against 40 ns for a fine read here). Never before the origin: saturates at zero.
    fn now_coarse(&self) -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC_COARSE exists on Linux.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        if rc != 0 {
            return self.now();
        }
        let coarse = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        coarse.saturating_sub(self.origin_since_boot)
    }
}

/// A clock that moves only when told; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Rc<Cell<Duration>>,
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }
    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.now.set(self.now.get() + by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        self.now.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new();
        let c2 = c.clone();
        assert_eq!(c.now(), Duration::ZERO);
        c2.advance(Duration::from_millis(5));
        assert_eq!(c.now(), Duration::from_millis(5));
    }

    #[test]
    fn coarse_reading_lags_the_fine_one_by_at_most_a_tick() {
        let c = MonotonicClock::new();
        std::thread::sleep(Duration::from_millis(20));
        let coarse = c.now_coarse();
        let fine = c.now();
        assert!(coarse <= fine, "coarse {coarse:?} after fine {fine:?}");
        // One scheduler tick is 1-10 ms; a second is far beyond any tick.
        assert!(
            fine - coarse < Duration::from_secs(1),
            "{coarse:?} vs {fine:?}"
        );
        assert!(coarse > Duration::ZERO, "20 ms after the origin reads zero");
        assert!(c.now_coarse() >= coarse);
    }

    #[test]
    fn monotonic_clock_does_not_go_back() {
        let c = MonotonicClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
