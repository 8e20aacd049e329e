//! Hot paths allocate nothing once warm: checked with a counting global allocator that counts
//! only the calling thread's allocations while a test has counting switched on.

#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;
use ucs::async_ctx::{EventSet, Events, Interest, TimerQueue, Waker};
use ucs::mpmc::MpmcQueue;

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
fn event_wait_wake_and_timers_do_not_allocate_once_warm() {
    let set = EventSet::new().unwrap();
    let waker = Waker::new().unwrap();
    set.add(waker.fd(), Interest::READABLE, 1).unwrap();
    let mut events = Events::with_capacity(4);
    let mut timers = TimerQueue::new();
    let mut due = Vec::with_capacity(4);
    timers
        .add(
            Duration::from_millis(1),
            Some(Duration::from_millis(1)),
            7u32,
        )
        .unwrap();
    let mut now = Duration::ZERO;
    let mut seen = 0usize;
    let n = allocations_in(|| {
        for _ in 0..100 {
            waker.wake().unwrap();
            assert!(set.wait_any(Some(Duration::ZERO)).unwrap());
            seen += set.wait(&mut events, Some(Duration::ZERO)).unwrap();
            waker.drain();
            now += Duration::from_millis(1);
            assert_eq!(timers.next_deadline(), Some(now));
            due.clear();
            seen += timers.expire(now, &mut due);
        }
    });
    assert_eq!(n, 0, "waiting or expiring timers allocated");
    assert_eq!(seen, 200, "a wake-up and a timer each round");
}
