//! CPU atomics on memory mapped in this process: the remote atomics of the transports whose
//! remote keys map the target memory (self, posix, sysv) and the targets of atomics that
//! arrive as requests (tcp). Each transport checks bounds, alignment and its peer first; these
//! functions only apply the operation.
//!
//! One generic set serves both widths: [`fetch`] and [`cswap`] over a [`Word`] (`u32` or
//! `u64`) when the width is known at compile time, [`apply_sized`] when it arrives at run time
//! (a wire request).

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

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// A word the CPU atomics apply to: `u32` or `u64`.
pub(crate) trait Word: sealed::Sealed + Copy + Eq + Into<u64> {
    /// Size and required alignment in bytes.
    const SIZE: usize;
    /// The low `SIZE` bytes of `v`.
    fn truncate(v: u64) -> Self;
    /// Applies `op` to the word at `p`; gives the old value.
    ///
    /// # Safety
    /// As [`fetch`].
    unsafe fn fetch_at(p: *mut u8, op: AtomicOp, value: Self) -> Self;
    /// Compare-and-swap on the word at `p`; gives the old value.
    ///
    /// # Safety
    /// As [`fetch`].
    unsafe fn cswap_at(p: *mut u8, compare: Self, swap: Self) -> Self;
}

macro_rules! word {
    ($word:ty, $atomic:ty) => {
        impl Word for $word {
            const SIZE: usize = std::mem::size_of::<$word>();

            #[inline]
            fn truncate(v: u64) -> Self {
                v as $word
            }

            #[inline]
            unsafe fn fetch_at(p: *mut u8, op: AtomicOp, value: Self) -> Self {
                // SAFETY: the caller guarantees alignment, validity and atomic-only access.
                let a = unsafe { <$atomic>::from_ptr(p.cast()) };
                match op {
                    AtomicOp::Add => a.fetch_add(value, Ordering::SeqCst),
                    AtomicOp::And => a.fetch_and(value, Ordering::SeqCst),
                    AtomicOp::Or => a.fetch_or(value, Ordering::SeqCst),
                    AtomicOp::Xor => a.fetch_xor(value, Ordering::SeqCst),
                    AtomicOp::Swap => a.swap(value, Ordering::SeqCst),
                }
            }

            #[inline]
            unsafe fn cswap_at(p: *mut u8, compare: Self, swap: Self) -> Self {
                // SAFETY: the caller guarantees alignment, validity and atomic-only access.
                let a = unsafe { <$atomic>::from_ptr(p.cast()) };
                match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        }
    };
}

word!(u32, AtomicU32);
word!(u64, AtomicU64);

/// Whether `p` is aligned for a `W` atomic.
#[inline]
pub(crate) fn is_aligned<W: Word>(p: *const u8) -> bool {
    (p as usize).is_multiple_of(W::SIZE)
}

/// Applies `op` to the word at `p`; gives the old value.
///
/// # Safety
/// `p` must be aligned for `W` and valid for reads and writes of `W::SIZE` bytes for the call,
/// and every other access to that word (by this process or a peer) must be atomic or a plain
/// copy.
#[inline]
pub(crate) unsafe fn fetch<W: Word>(p: *mut u8, op: AtomicOp, value: W) -> W {
    // SAFETY: forwarded from the caller.
    unsafe { W::fetch_at(p, op, value) }
}

/// Compare-and-swap on the word at `p`: writes `swap` if it holds `compare`; gives the old
/// value.
///
/// # Safety
/// As [`fetch`].
#[inline]
pub(crate) unsafe fn cswap<W: Word>(p: *mut u8, compare: W, swap: W) -> W {
    // SAFETY: forwarded from the caller.
    unsafe { W::cswap_at(p, compare, swap) }
}

/// What an atomic whose width arrives at run time does (see [`apply_sized`]).
// tcp's request handler is the user; it moves to this helper in the tcp transport's own change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Apply {
    /// `op` with the value; fetching or posted alike (the caller drops the old value).
    Op(AtomicOp),
    /// Compare-and-swap: the value is written if the word holds `compare`.
    Cswap {
        /// The value the word must hold.
        compare: u64,
    },
}

/// Applies `what` with `value` to the `size`-byte word at `p` (`size` 4 or 8; the values are
/// truncated to it); gives the old value widened to 64 bits.
///
/// # Errors
/// [`Error::InvalidParam`] for a size other than 4 or 8, before touching memory.
///
/// # Safety
/// As [`fetch`] for a word of `size` bytes.
#[inline]
pub(crate) unsafe fn apply_sized(p: *mut u8, size: usize, what: Apply, value: u64) -> Result<u64> {
    /// One width of [`apply_sized`].
    ///
    /// # Safety
    /// As [`fetch`].
    #[inline]
    unsafe fn apply<W: Word>(p: *mut u8, what: Apply, value: u64) -> u64 {
        let v = W::truncate(value);
        // SAFETY: forwarded from the caller.
        unsafe {
            match what {
                Apply::Op(op) => fetch(p, op, v),
                Apply::Cswap { compare } => cswap(p, W::truncate(compare), v),
            }
        }
        .into()
    }
    // SAFETY: forwarded from the caller, for the width checked here.
    unsafe {
        match size {
            4 => Ok(apply::<u32>(p, what, value)),
            8 => Ok(apply::<u64>(p, what, value)),
            _ => Err(Error::InvalidParam(format!(
                "an atomic is 4 or 8 bytes wide, not {size}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_apply_and_return_the_old_value() {
        let mut w64 = 0b1100u64;
        let p = (&mut w64 as *mut u64).cast::<u8>();
        assert!(is_aligned::<u64>(p));
        // SAFETY: a live, aligned local word used only through these calls.
        unsafe {
            assert_eq!(fetch(p, AtomicOp::Add, 1u64), 0b1100);
            assert_eq!(fetch(p, AtomicOp::And, 0b0101u64), 0b1101);
            assert_eq!(fetch(p, AtomicOp::Or, 0b1000u64), 0b0101);
            assert_eq!(fetch(p, AtomicOp::Xor, 0b1111u64), 0b1101);
            assert_eq!(fetch(p, AtomicOp::Swap, 7u64), 0b0010);
            assert_eq!(cswap(p, 6u64, 9), 7, "failed compare leaves the word");
            assert_eq!(cswap(p, 7u64, 9), 7);
        }
        assert_eq!(w64, 9);
        let mut w32 = 5u32;
        let p = (&mut w32 as *mut u32).cast::<u8>();
        // SAFETY: as above.
        unsafe {
            assert_eq!(fetch(p, AtomicOp::Add, u32::MAX), 5);
            assert_eq!(cswap(p, 4u32, 1), 4);
        }
        assert_eq!(w32, 1);
        assert!(reject_post_swap(AtomicOp::Swap).is_err());
        assert!(reject_post_swap(AtomicOp::Add).is_ok());
    }

    #[test]
    fn run_time_width_truncates_to_the_word_and_rejects_other_sizes() {
        let mut words = [u32::MAX, 0x55];
        let p = words.as_mut_ptr().cast::<u8>();
        // SAFETY: a live, aligned local array used only through these calls.
        unsafe {
            // A 32-bit add wraps inside its word and leaves the next one alone.
            assert_eq!(
                apply_sized(p, 4, Apply::Op(AtomicOp::Add), 1).unwrap(),
                0xffff_ffff
            );
            assert_eq!(words, [0, 0x55]);
            let cs = Apply::Cswap { compare: 1 << 32 };
            assert_eq!(
                apply_sized(p, 4, cs, 3).unwrap(),
                0,
                "compare truncated to 0"
            );
            assert_eq!(words, [3, 0x55]);
            assert!(apply_sized(p, 2, Apply::Op(AtomicOp::Add), 1).is_err());
            assert!(apply_sized(p, 16, Apply::Op(AtomicOp::Add), 1).is_err());
        }
        assert_eq!(words, [3, 0x55]);
        let mut w64 = 1u64 << 40;
        let p = (&mut w64 as *mut u64).cast::<u8>();
        // SAFETY: as above.
        unsafe {
            assert_eq!(
                apply_sized(p, 8, Apply::Op(AtomicOp::Or), 1).unwrap(),
                1 << 40
            );
        }
        assert_eq!(w64, (1 << 40) | 1);
    }
}
