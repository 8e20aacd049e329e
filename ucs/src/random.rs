//! Unpredictable numbers from the kernel, for values a peer must not guess (the per-endpoint
//! secrets that scramble request ids on the wire).
//!
//! [`secret_u64`] reads `getrandom(2)`; where that fails (a seccomp filter, an old kernel) it
//! reads `/dev/urandom`, and as a last resort it hashes the time, the pid and a counter with a
//! randomly keyed SipHash (std's `RandomState`), which is still not guessable from outside the
//! process. It never fails and never blocks once the kernel's pool is initialised.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_differ() {
        let v: Vec<u64> = (0..64).map(|_| secret_u64()).collect();
        let mut s = v.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), v.len(), "64 draws gave a repeat: {v:?}");
    }
}
