//! CPU atomics on memory mapped in this process: the remote atomics of the transports whose
//! remote keys map the target memory (self, posix, sysv). Each transport checks bounds,
//! alignment and its peer first; these functions only apply the operation.

use crate::ep::AtomicOp;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use ucs::{Error, Result};

/// Swap has no post (non-fetching) form.
pub(crate) fn reject_post_swap(op: AtomicOp) -> Result<()> {
    if op == AtomicOp::Swap {
        return Err(Error::Unsupported(
            "atomic swap has no post form; use the fetching call".into(),
        ));
    }
    Ok(())
}

/// Applies `op` to the 32-bit word at `p`; gives the old value.
///
/// # Safety
/// `p` must be 4-byte aligned and valid for reads and writes for the call, and every other
/// access to that word (by this process or a peer) must be atomic or a plain copy.
pub(crate) unsafe fn fetch32(p: *mut u8, op: AtomicOp, value: u32) -> u32 {
    // SAFETY: the caller guarantees alignment, validity and atomic-only access.
    let a = unsafe { AtomicU32::from_ptr(p.cast()) };
    match op {
        AtomicOp::Add => a.fetch_add(value, Ordering::SeqCst),
        AtomicOp::And => a.fetch_and(value, Ordering::SeqCst),
        AtomicOp::Or => a.fetch_or(value, Ordering::SeqCst),
        AtomicOp::Xor => a.fetch_xor(value, Ordering::SeqCst),
        AtomicOp::Swap => a.swap(value, Ordering::SeqCst),
    }
}

/// Applies `op` to the 64-bit word at `p`; gives the old value.
///
/// # Safety
/// As [`fetch32`], with 8 bytes and 8-byte alignment.
pub(crate) unsafe fn fetch64(p: *mut u8, op: AtomicOp, value: u64) -> u64 {
    // SAFETY: the caller guarantees alignment, validity and atomic-only access.
    let a = unsafe { AtomicU64::from_ptr(p.cast()) };
    match op {
        AtomicOp::Add => a.fetch_add(value, Ordering::SeqCst),
        AtomicOp::And => a.fetch_and(value, Ordering::SeqCst),
        AtomicOp::Or => a.fetch_or(value, Ordering::SeqCst),
        AtomicOp::Xor => a.fetch_xor(value, Ordering::SeqCst),
        AtomicOp::Swap => a.swap(value, Ordering::SeqCst),
    }
}

/// Compare-and-swap on the 32-bit word at `p`; gives the old value.
///
/// # Safety
/// As [`fetch32`].
pub(crate) unsafe fn cswap32(p: *mut u8, compare: u32, swap: u32) -> u32 {
    // SAFETY: the caller guarantees alignment, validity and atomic-only access.
    let a = unsafe { AtomicU32::from_ptr(p.cast()) };
    match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(v) | Err(v) => v,
    }
}

/// Compare-and-swap on the 64-bit word at `p`; gives the old value.
///
/// # Safety
/// As [`fetch64`].
pub(crate) unsafe fn cswap64(p: *mut u8, compare: u64, swap: u64) -> u64 {
    // SAFETY: the caller guarantees alignment, validity and atomic-only access.
    let a = unsafe { AtomicU64::from_ptr(p.cast()) };
    match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(v) | Err(v) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_apply_and_return_the_old_value() {
        let mut w64 = 0b1100u64;
        let p = (&mut w64 as *mut u64).cast::<u8>();
        // SAFETY: a live, aligned local word used only through these calls.
        unsafe {
            assert_eq!(fetch64(p, AtomicOp::Add, 1), 0b1100);
            assert_eq!(fetch64(p, AtomicOp::And, 0b0101), 0b1101);
            assert_eq!(fetch64(p, AtomicOp::Or, 0b1000), 0b0101);
            assert_eq!(fetch64(p, AtomicOp::Xor, 0b1111), 0b1101);
            assert_eq!(fetch64(p, AtomicOp::Swap, 7), 0b0010);
            assert_eq!(cswap64(p, 6, 9), 7, "failed compare leaves the word");
            assert_eq!(cswap64(p, 7, 9), 7);
        }
        assert_eq!(w64, 9);
        let mut w32 = 5u32;
        let p = (&mut w32 as *mut u32).cast::<u8>();
        // SAFETY: as above.
        unsafe {
            assert_eq!(fetch32(p, AtomicOp::Add, u32::MAX), 5);
            assert_eq!(cswap32(p, 4, 1), 4);
        }
        assert_eq!(w32, 1);
        assert!(reject_post_swap(AtomicOp::Swap).is_err());
        assert!(reject_post_swap(AtomicOp::Add).is_ok());
    }
}
