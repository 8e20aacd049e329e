//! A cheap timestamp for the measurement loop: the CPU's invariant time-stamp counter where the
//! CPU has one (as UCX's `ucs_get_time`), the monotonic clock otherwise.

use std::time::{Duration, Instant};

/// Timestamps in ticks and their rate.
#[derive(Debug, Clone, Copy)]
pub struct Ticker {
    origin: Instant,
    use_tsc: bool,
    ticks_per_sec: f64,
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no memory effects and is available on every x86_64 CPU; the intrinsic is
    // only `unsafe` on older toolchains.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rdtsc() -> u64 {
    0
}

fn tsc_is_invariant() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| s.contains(" constant_tsc") && s.contains(" nonstop_tsc"))
            .unwrap_or(false)
}

impl Ticker {
    /// Calibrates the tick rate (about 20 ms with the time-stamp counter).
    pub fn new() -> Ticker {
        let origin = Instant::now();
        if !tsc_is_invariant() {
            return Ticker {
                origin,
                use_tsc: false,
                ticks_per_sec: 1e9,
            };
        }
        let t0 = Instant::now();
        let c0 = rdtsc();
        while t0.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let c1 = rdtsc();
        let dt = t0.elapsed().as_secs_f64();
        let rate = (c1.wrapping_sub(c0)) as f64 / dt;
        if !(1e6..1e11).contains(&rate) {
            return Ticker {
                origin,
                use_tsc: false,
                ticks_per_sec: 1e9,
            };
        }
        Ticker {
            origin,
            use_tsc: true,
            ticks_per_sec: rate,
        }
    }

    /// The current time in ticks.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        if self.use_tsc {
            rdtsc()
        } else {
            self.origin.elapsed().as_nanos() as u64
        }
    }

    /// Ticks per second.
    pub fn rate(&self) -> f64 {
        self.ticks_per_sec
    }

    /// Converts ticks to seconds.
    pub fn secs(&self, ticks: u64) -> f64 {
        ticks as f64 / self.ticks_per_sec
    }

    /// Converts seconds to ticks.
    pub fn ticks(&self, secs: f64) -> u64 {
        (secs * self.ticks_per_sec) as u64
    }
}

impl Default for Ticker {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_advance_and_convert() {
        let t = Ticker::new();
        let a = t.now();
        std::thread::sleep(Duration::from_millis(5));
        let b = t.now();
        assert!(b > a);
        let s = t.secs(b - a);
        assert!(s > 0.004, "{s}");
        assert_eq!(t.ticks(1.0), t.rate() as u64);
    }
}
