//! Hot paths allocate nothing once warm: checked with a counting global allocator that counts
//! only the calling thread's allocations while a test has counting switched on.

#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;
use ucs::async_ctx::{AsyncContext, AsyncEvent, Interest};
use ucs::mpmc::MpmcQueue;
use ucs::mpool::{MemPool, MemPoolConfig};
use ucs::time::ManualClock;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    if COUNTING.with(|c| c.get()) {
        ALLOCS.with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: forwards every call unchanged to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and gives the number of allocations it made on this thread.
fn allocations_in(f: impl FnOnce()) -> usize {
    ALLOCS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(|a| a.get())
}

#[test]
fn counting_allocator_sees_allocations() {
    let n = allocations_in(|| drop(std::hint::black_box(vec![1u8; 10])));
    assert_eq!(n, 1);
}

#[test]
fn mpool_get_and_drop_do_not_allocate_once_warm() {
    let pool = MemPool::new(MemPoolConfig {
        name: "no-alloc",
        buf_size: 256,
        bufs_per_chunk: 8,
        max_bufs: 32,
        ..Default::default()
    })
    .unwrap();
    pool.reserve(32).unwrap();
    let n = allocations_in(|| {
        for round in 0..100 {
            let mut bufs: [Option<ucs::mpool::PoolBuf>; 32] = std::array::from_fn(|_| None);
            for b in bufs.iter_mut() {
                let mut buf = pool.get().expect("warm pool has buffers");
                buf[0] = round as u8;
                *b = Some(buf);
            }
            assert!(pool.get().is_none());
        }
    });
    assert_eq!(n, 0, "mpool allocated on the hot path");
}

#[test]
fn mpmc_push_pop_do_not_allocate() {
    let q = MpmcQueue::new(16).unwrap();
    let n = allocations_in(|| {
        for i in 0..1000u64 {
            q.push(i).unwrap();
            assert_eq!(q.pop(), Some(i));
        }
    });
    assert_eq!(n, 0);
}

#[test]
fn async_poll_and_timers_do_not_allocate_once_warm() {
    let clock = ManualClock::new();
    let mut ctx = AsyncContext::new(clock.clone()).unwrap();
    let waker = ctx.waker();
    let fd = waker.fd();
    // Watch a second eventfd-like descriptor: the waker's own fd, duplicated as a plain fd.
    // SAFETY: dup of a live descriptor; the copy is closed at the end of the test.
    let dup = unsafe { libc::dup(fd) };
    assert!(dup >= 0);
    ctx.add_fd(dup, Interest::READABLE | Interest::EDGE, 1)
        .unwrap();
    ctx.add_periodic_timer(Duration::from_millis(1)).unwrap();
    let mut seen = 0usize;
    // Warm up: one poll with every kind of event.
    waker.wake().unwrap();
    clock.advance(Duration::from_millis(1));
    ctx.poll_once(Some(Duration::ZERO), |_| {}).unwrap();
    let n = allocations_in(|| {
        for _ in 0..100 {
            waker.wake().unwrap();
            clock.advance(Duration::from_millis(1));
            ctx.poll_once(Some(Duration::ZERO), |e| {
                if matches!(e, AsyncEvent::Timer(_) | AsyncEvent::Wakeup) {
                    seen += 1;
                }
            })
            .unwrap();
        }
    });
    assert_eq!(n, 0, "poll_once allocated");
    assert!(seen >= 200, "timer and wake-up each poll: {seen}");
    // SAFETY: closes the descriptor dup'ed above, once.
    unsafe { libc::close(dup) };
}
