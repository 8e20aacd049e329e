//! A reentrant lock: the thread that holds a worker's lock may take it again. UCX runs
//! completion callbacks with the worker locked, and callbacks call back into the library
//! (free the request, post the next send), so the lock must admit its own holder. A lock made
//! with [`RLock::new`]`(false)` (single-thread and serialized workers) does nothing: the client
//! promises that one thread at a time calls into that worker.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

thread_local! {
    static THREAD_TAG: u8 = const { 0 };
}

/// A non-zero number unique to the calling thread while it lives.
fn me() -> usize {
    THREAD_TAG.with(|t| t as *const u8 as usize)
}

/// A mutex its holder may lock again; [`RLock::lock`] gives a guard that unlocks one level.
pub struct RLock {
    /// False for a worker whose client serializes its calls: `lock` is then free.
    enabled: bool,
    mutex: Mutex<()>,
    owner: AtomicUsize,
    /// Depth and the outermost guard; touched only by the owner.
    held: UnsafeCell<(u32, Option<MutexGuard<'static, ()>>)>,
}

// SAFETY: `held` is only accessed by the thread recorded in `owner`, which holds `mutex`.
unsafe impl Sync for RLock {}
// SAFETY: as above; the guard inside is dropped by the thread that took it (depth returns to
// zero before any other thread can own the lock).
unsafe impl Send for RLock {}

impl Default for RLock {
    fn default() -> Self {
        RLock::new(true)
    }
}

impl RLock {
    /// A lock that locks when `enabled`, and does nothing otherwise.
    pub fn new(enabled: bool) -> Self {
        RLock {
            enabled,
            mutex: Mutex::new(()),
            owner: AtomicUsize::new(0),
            held: UnsafeCell::new((0, None)),
        }
    }
}

/// One level of an [`RLock`] (`None`: the lock is disabled).
pub struct RGuard<'a>(Option<&'a RLock>);

impl RLock {
    /// True when [`RLock::lock`] locks (false: the client serializes the worker's calls).
    #[inline(always)]
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Locks (again, if this thread holds it already); free when the lock is disabled.
    #[inline(always)]
    pub fn lock(&self) -> RGuard<'_> {
        if !self.enabled {
            return RGuard(None);
        }
        self.lock_enabled()
    }

    /// [`RLock::lock`] of an enabled lock (kept out of line: the callers that run without a
    /// lock stay small).
    #[inline(never)]
    fn lock_enabled(&self) -> RGuard<'_> {
        let id = me();
        if self.owner.load(Ordering::Acquire) == id {
            // SAFETY: this thread owns the lock, so it alone touches `held`.
            unsafe { (*self.held.get()).0 += 1 };
            return RGuard(Some(self));
        }
        let g = self.mutex.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the guard borrows `self.mutex`, which outlives it: the guard is dropped in
        // `RGuard::drop` before `self` can be dropped (a guard borrows `self`).
        let g: MutexGuard<'static, ()> = unsafe { std::mem::transmute(g) };
        self.owner.store(id, Ordering::Release);
        // SAFETY: we now hold the mutex.
        unsafe { *self.held.get() = (1, Some(g)) };
        RGuard(Some(self))
    }

    /// Gives up one level of this thread's hold.
    #[inline(never)]
    fn unlock_one(&self) {
        // SAFETY: the holder of a guard owns the lock.
        let held = unsafe { &mut *self.held.get() };
        held.0 -= 1;
        if held.0 == 0 {
            self.owner.store(0, Ordering::Release);
            drop(held.1.take());
        }
    }
}

impl Drop for RGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(lock) = self.0 {
            lock.unlock_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn reentrant_and_exclusive() {
        let l = Arc::new(RLock::default());
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        {
            let _a = l.lock();
            let _b = l.lock();
        }
        let mut th = Vec::new();
        for _ in 0..4 {
            let (l, c) = (l.clone(), count.clone());
            th.push(std::thread::spawn(move || {
                for _ in 0..10_000 {
                    let _g = l.lock();
                    let _h = l.lock();
                    let v = c.load(Ordering::Relaxed);
                    c.store(v + 1, Ordering::Relaxed);
                }
            }));
        }
        for t in th {
            t.join().unwrap();
        }
        assert_eq!(count.load(Ordering::Relaxed), 40_000);
    }
}
