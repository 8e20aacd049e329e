//! Atomics and cells for the lock-free structures, switched to `loom`'s under `--cfg loom`.
//!
//! Normal builds use `std`; `RUSTFLAGS="--cfg loom"` swaps in loom's model-checked versions so
//! the same code is explored under every interleaving loom can produce. Only the lock-free code
//! (the MPMC queue) goes through this module.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std`'s `UnsafeCell` behind loom's closure-based API, so callers are written once.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// Wraps a value.
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }
    /// Runs `f` with a mutable raw pointer to the value.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
