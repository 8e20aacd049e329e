//! Unpredictable numbers from the kernel, for values a peer must not guess (the per-endpoint
//! secrets that scramble request ids on the wire).
//!
//! [`secret_u64`] reads `getrandom(2)`; where that fails (a seccomp filter, an old kernel) it
//! reads `/dev/urandom`, and as a last resort it hashes the time, the pid and a counter with a
//! randomly keyed SipHash (std's `RandomState`), which is still not guessable from outside the
//! process. It never fails and never blocks once the kernel's pool is initialised.
//!
//! [`SeededRng`] is the opposite: a small generator whose whole sequence follows from its seed,
//! for choices that must repeat run after run (fault injection, test schedules). Never use it for
//! secrets.

use std::hash::BuildHasher;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

/// A 64-bit number no peer can predict.
pub fn secret_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: `b` is a valid writable buffer of `b.len()` bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        return u64::from_le_bytes(b);
    }
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return u64::from_le_bytes(b);
        }
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    std::collections::hash_map::RandomState::new().hash_one((t, std::process::id(), c))
}

/// A seeded generator (SplitMix64): the same seed gives the same sequence on every run and
/// machine. Predictable by design: never use it for secrets.
#[derive(Debug, Clone)]
pub struct SeededRng {
    state: u64,
}

impl SeededRng {
    /// A generator whose sequence follows from `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRng { state: seed }
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((self.next_u64() as u128 * n as u128) >> 64) as u64
        }
    }
    /// True with probability `p` (0 never, 1 always). Draws nothing when `p <= 0`, so a knob
    /// left at zero does not shift the sequence the other knobs see.
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        // 53 random bits as a fraction in [0, 1).
        ((self.next_u64() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_sequences_repeat_and_differ_by_seed() {
        let a: Vec<u64> = {
            let mut r = SeededRng::new(7);
            (0..16).map(|_| r.next_u64()).collect()
        };
        let mut r = SeededRng::new(7);
        assert_eq!(a, (0..16).map(|_| r.next_u64()).collect::<Vec<_>>());
        let mut r = SeededRng::new(8);
        assert_ne!(a, (0..16).map(|_| r.next_u64()).collect::<Vec<_>>());
        let mut r = SeededRng::new(1);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_eq!(r.below(0), 0);
        let hits = (0..10_000).filter(|_| r.chance(0.25)).count();
        assert!((2000..3000).contains(&hits), "{hits} of 10000 at p=0.25");
        assert!((0..100).all(|_| !r.chance(0.0) && r.chance(1.0)));
    }

    #[test]
    fn secrets_differ() {
        let v: Vec<u64> = (0..64).map(|_| secret_u64()).collect();
        let mut s = v.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), v.len(), "64 draws gave a repeat: {v:?}");
    }
}
