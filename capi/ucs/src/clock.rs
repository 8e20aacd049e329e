//! The clock UCX's header-inline `ucs_get_time()` reads: the TSC when it is invariant, else
//! `gettimeofday` in microseconds.
//!
//! The inline code calls `ucs_x86_init_tsc_freq()` while `ucs_arch_x86_enable_rdtsc` is TRY;
//! that sets it to YES with the TSC frequency measured here, or to NO when the CPU does not
//! announce an invariant TSC (then one clock unit is a microsecond).
//! `ucs_get_cpu_clocks_per_sec()` gives the matching units per second.

use std::sync::atomic::{AtomicU64, Ordering};

/// `ucs_ternary_auto_value_t` values of `ucs_arch_x86_enable_rdtsc`.
const NO: i32 = 0;
const YES: i32 = 1;
const TRY: i32 = 2;

/// Clock units per second of the generic (microsecond) clock.
const GENERIC_CLOCKS_PER_SEC: f64 = 1.0e6;

/// How long the TSC is measured against the monotonic clock: long enough for five
/// significant digits with microsecond-accurate pairs, short enough to go unnoticed at start.
const MEASURE_FOR: std::time::Duration = std::time::Duration::from_millis(10);

/// The measured TSC frequency (f64 bits), 0 until measured.
static TSC_FREQ: AtomicU64 = AtomicU64::new(0);

#[cfg(target_arch = "x86_64")]
fn read_tsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86_64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// True when the CPU announces an invariant TSC (CPUID 0x80000007, EDX bit 8).
#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    let max = __cpuid(0x8000_0000).eax;
    // Leaf 0x80000007 exists when the highest extended leaf reaches it.
    max >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
}

/// A TSC reading paired with the monotonic clock: the pair whose TSC bracket is the tightest
/// of a few tries, so a preemption between the reads does not skew it.
#[cfg(target_arch = "x86_64")]
fn paired_reading() -> (u64, std::time::Instant) {
    let mut best = (u64::MAX, 0, std::time::Instant::now());
    for _ in 0..16 {
        let a = read_tsc();
        let t = std::time::Instant::now();
        let b = read_tsc();
        if b.wrapping_sub(a) < best.0 {
            best = (b.wrapping_sub(a), a / 2 + b / 2, t);
        }
    }
    (best.1, best.2)
}

/// Measures the TSC frequency (Hz), or gives 0 when the TSC is not invariant.
pub fn measure_tsc_freq() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if !invariant_tsc() {
            return 0.0;
        }
        let (tsc0, t0) = paired_reading();
        while t0.elapsed() < MEASURE_FOR {
            std::hint::spin_loop();
        }
        let (tsc1, t1) = paired_reading();
        tsc1.wrapping_sub(tsc0) as f64 / (t1 - t0).as_secs_f64()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0.0
}

/// `void ucs_x86_init_tsc_freq(void)`: decides between the TSC and the generic clock.
#[no_mangle]
pub extern "C" fn ucs_x86_init_tsc_freq() {
    let freq = measure_tsc_freq();
    if freq > 0.0 {
        TSC_FREQ.store(freq.to_bits(), Ordering::Relaxed);
        crate::data::set_rdtsc(YES);
    } else {
        crate::data::set_rdtsc(NO);
    }
}

/// `double ucs_arch_get_clocks_per_sec(void)`: units per second of `ucs_get_time()`.
#[no_mangle]
pub extern "C" fn ucs_arch_get_clocks_per_sec() -> f64 {
    if crate::data::rdtsc() == TRY {
        ucs_x86_init_tsc_freq();
    }
    if crate::data::rdtsc() == YES {
        f64::from_bits(TSC_FREQ.load(Ordering::Relaxed))
    } else {
        GENERIC_CLOCKS_PER_SEC
    }
}

/// `double ucs_get_cpu_clocks_per_sec(void)`: as [`ucs_arch_get_clocks_per_sec`].
#[no_mangle]
pub extern "C" fn ucs_get_cpu_clocks_per_sec() -> f64 {
    ucs_arch_get_clocks_per_sec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_rate_is_the_measured_tsc_or_a_microsecond() {
        let hz = ucs_get_cpu_clocks_per_sec();
        assert_ne!(crate::data::rdtsc(), TRY);
        if crate::data::rdtsc() == YES {
            assert!(hz > 1.0e8 && hz < 1.0e10, "TSC at {hz} Hz");
            // The TSC advances at that rate against the monotonic clock.
            let (a, t) = (read_tsc(), std::time::Instant::now());
            std::thread::sleep(std::time::Duration::from_millis(50));
            let rate = (read_tsc() - a) as f64 / t.elapsed().as_secs_f64();
            assert!((rate / hz - 1.0).abs() < 0.05, "{rate} vs {hz}");
        } else {
            assert_eq!(hz, GENERIC_CLOCKS_PER_SEC);
        }
    }
}
