//! A bounded lock-free multi-producer multi-consumer queue.
//!
//! Dmitry Vyukov's sequence-numbered ring: every slot carries a sequence number that tells
//! producers and consumers whose turn it is. A producer at position `pos` may write slot
//! `pos % cap` when its sequence equals `pos`; after writing it publishes `pos + 1`. A consumer
//! at `pos` may read the slot when its sequence equals `pos + 1`; after reading it publishes
//! `pos + cap`, handing the slot to the producer one lap later. Positions are claimed with one
//! compare-and-swap on the shared head or tail counter; no locks, no allocation after `new`.
//!
//! The queue is not linearizable at the edges: `push` can report full while a consumer that
//! already claimed a slot has not finished reading it, and `pop` can report empty while a
//! producer that claimed a slot has not finished writing it. Both are transient, and neither
//! loses a value.
//!
//! Checked with loom: `RUSTFLAGS="--cfg loom" cargo test -p ucs --release --lib mpmc`.

use crate::status::{Error, Result};
use crate::sync::{AtomicUsize, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::mem::MaybeUninit;

struct Slot<T> {
    /// Whose turn it is on this slot (see the module docs).
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// A bounded lock-free MPMC queue; share it between threads with an `Arc`.
pub struct MpmcQueue<T> {
    /// Next position to pop.
    head: CachePadded<AtomicUsize>,
    /// Next position to push.
    tail: CachePadded<AtomicUsize>,
    slots: Box<[Slot<T>]>,
    mask: usize,
}

// SAFETY: values of `T` move between threads through the queue (pushed on one, popped on
// another), which is sound when `T: Send`. The queue itself holds no thread-bound state.
unsafe impl<T: Send> Send for MpmcQueue<T> {}
// SAFETY: shared access only goes through `push`/`pop`, which hand each slot to exactly one
// thread at a time through the sequence protocol (acquire/release on `seq`), so no two threads
// touch a slot's value at once; `T` is never shared by reference, only moved, so `T: Send`
// suffices.
unsafe impl<T: Send> Sync for MpmcQueue<T> {}

impl<T> MpmcQueue<T> {
    /// A queue holding at least `capacity` values: the capacity is rounded up to a power of two,
    /// and to at least 2 (see [`MpmcQueue::capacity`]). Gives [`Error::InvalidParam`] for 0 or a
    /// capacity too large to allocate.
    pub fn new(capacity: usize) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::InvalidParam(
                "an MPMC queue needs a capacity of at least 1".into(),
            ));
        }
        let cap = capacity
            .max(2)
            .checked_next_power_of_two()
            .filter(|&c| c <= isize::MAX as usize / 2 / std::mem::size_of::<Slot<T>>().max(1))
            .ok_or_else(|| {
                Error::InvalidParam(format!("MPMC queue capacity {capacity} is too large"))
            })?;
        let slots = (0..cap)
            .map(|i| Slot {
                seq: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ok(MpmcQueue {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            slots,
            mask: cap - 1,
        })
    }

    /// How many values the queue holds when full.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Appends a value, or gives it back when the queue is full.
    pub fn push(&self, value: T) -> std::result::Result<(), T> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & self.mask];
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos) as isize;
            if diff == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the CAS made this thread the only owner of position `pos`;
                        // `seq == pos` (read with Acquire) means the consumer of the previous
                        // lap finished with the slot, and no consumer reads it until we publish
                        // `pos + 1` below.
                        slot.value.with_mut(|p| unsafe { (*p).write(value) });
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(current) => pos = current,
                }
            } else if diff < 0 {
                // The slot still holds last lap's value: full.
                return Err(value);
            } else {
                // Another producer took `pos`; catch up.
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Removes the oldest value, or `None` when the queue is empty.
    pub fn pop(&self) -> Option<T> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & self.mask];
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos.wrapping_add(1)) as isize;
            if diff == 0 {
                match self.head.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the CAS made this thread the only consumer of `pos`;
                        // `seq == pos + 1` (read with Acquire) means the producer's write is
                        // complete and visible. Reading moves the value out; the slot is handed
                        // back to producers by the store below, so it is never read twice.
                        let value = slot.value.with_mut(|p| unsafe { (*p).assume_init_read() });
                        slot.seq
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(value);
                    }
                    Err(current) => pos = current,
                }
            } else if diff < 0 {
                // Nothing published at `pos` yet: empty.
                return None;
            } else {
                // Another consumer took `pos`; catch up.
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Number of values in the queue; a snapshot that may be stale under concurrency.
    pub fn len(&self) -> usize {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        // A stale `tail` can trail `head` under concurrency: report empty, not huge.
        let diff = tail.wrapping_sub(head) as isize;
        (diff.max(0) as usize).min(self.capacity())
    }

    /// True when the queue looked empty at the time of the call.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Drop for MpmcQueue<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

impl<T> fmt::Debug for MpmcQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpmcQueue")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;
    use std::sync::Arc;

    #[test]
    fn mpmc_zero_capacity_is_an_error() {
        assert!(matches!(
            MpmcQueue::<u32>::new(0),
            Err(Error::InvalidParam(_))
        ));
        assert!(matches!(
            MpmcQueue::<u64>::new(usize::MAX),
            Err(Error::InvalidParam(_))
        ));
    }

    #[test]
    fn mpmc_capacity_rounds_up() {
        assert_eq!(MpmcQueue::<u8>::new(1).unwrap().capacity(), 2);
        assert_eq!(MpmcQueue::<u8>::new(2).unwrap().capacity(), 2);
        assert_eq!(MpmcQueue::<u8>::new(5).unwrap().capacity(), 8);
        assert_eq!(MpmcQueue::<u8>::new(64).unwrap().capacity(), 64);
    }

    #[test]
    fn mpmc_fifo_order_full_and_empty() {
        let q = MpmcQueue::new(4).unwrap();
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
        for i in 0..4 {
            assert_eq!(q.push(i), Ok(()));
        }
        assert_eq!(q.len(), 4);
        assert_eq!(q.push(99), Err(99), "full queue gives the value back");
        assert_eq!(q.pop(), Some(0));
        assert_eq!(q.push(4), Ok(()));
        for i in 1..5 {
            assert_eq!(q.pop(), Some(i));
        }
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn mpmc_wraps_many_laps() {
        let q = MpmcQueue::new(2).unwrap();
        for i in 0..1000u32 {
            q.push(i).unwrap();
            q.push(i + 10_000).unwrap();
            assert!(q.push(0).is_err());
            assert_eq!(q.pop(), Some(i));
            assert_eq!(q.pop(), Some(i + 10_000));
            assert_eq!(q.pop(), None);
        }
    }

    #[test]
    fn mpmc_drop_releases_values_left_inside() {
        let counter = Arc::new(());
        {
            let q = MpmcQueue::new(8).unwrap();
            for _ in 0..5 {
                q.push(Arc::clone(&counter)).unwrap();
            }
            drop(q.pop());
            assert_eq!(Arc::strong_count(&counter), 5);
        }
        assert_eq!(Arc::strong_count(&counter), 1);
    }

    #[test]
    fn mpmc_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MpmcQueue<Box<u32>>>();
    }

    proptest::proptest! {
        /// Any single-threaded push/pop sequence behaves like a bounded `VecDeque`.
        #[test]
        fn mpmc_matches_vecdeque_model(
            cap in 1usize..9,
            ops in proptest::collection::vec(proptest::option::of(0u32..1000), 0..200),
        ) {
            let q = MpmcQueue::new(cap).unwrap();
            let cap = q.capacity();
            let mut model = std::collections::VecDeque::new();
            for op in ops {
                match op {
                    Some(v) => {
                        let expect = if model.len() < cap { model.push_back(v); Ok(()) } else { Err(v) };
                        proptest::prop_assert_eq!(q.push(v), expect);
                    }
                    None => proptest::prop_assert_eq!(q.pop(), model.pop_front()),
                }
                proptest::prop_assert_eq!(q.len(), model.len());
            }
        }
    }

    /// 4 producers and 4 consumers move 4 × 50 000 distinct values through a small queue; every
    /// value must arrive exactly once, and each producer's values in order.
    #[test]
    fn mpmc_stress_counts_and_per_producer_order() {
        const PRODUCERS: usize = 4;
        const CONSUMERS: usize = 4;
        const PER: usize = 50_000;
        let q = Arc::new(MpmcQueue::<(usize, usize)>::new(64).unwrap());
        let popped = Arc::new(StdAtomicUsize::new(0));
        let mut producers = Vec::new();
        for p in 0..PRODUCERS {
            let q = Arc::clone(&q);
            producers.push(std::thread::spawn(move || {
                for i in 0..PER {
                    let mut v = (p, i);
                    while let Err(back) = q.push(v) {
                        v = back;
                        std::thread::yield_now();
                    }
                }
            }));
        }
        let mut consumers = Vec::new();
        for _ in 0..CONSUMERS {
            let q = Arc::clone(&q);
            let popped = Arc::clone(&popped);
            consumers.push(std::thread::spawn(move || {
                let mut seen = vec![Vec::new(); PRODUCERS];
                while popped.load(std::sync::atomic::Ordering::Relaxed) < PRODUCERS * PER {
                    match q.pop() {
                        Some((p, i)) => {
                            seen[p].push(i);
                            popped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        None => std::thread::yield_now(),
                    }
                }
                seen
            }));
        }
        for p in producers {
            p.join().unwrap();
        }
        let mut all = vec![Vec::new(); PRODUCERS];
        for c in consumers {
            let seen = c.join().unwrap();
            for (p, values) in seen.into_iter().enumerate() {
                // One consumer sees a producer's values in increasing order.
                assert!(values.windows(2).all(|w| w[0] < w[1]), "order broken");
                all[p].extend(values);
            }
        }
        for values in &mut all {
            values.sort_unstable();
            assert_eq!(values.len(), PER);
            assert!(
                values.iter().copied().eq(0..PER),
                "lost or duplicated values"
            );
        }
        assert!(q.is_empty());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Two producers race for the slots of a 2-slot queue while the main thread consumes.
    #[test]
    fn mpmc_loom_two_producers_one_consumer() {
        loom::model(|| {
            let q = Arc::new(MpmcQueue::new(2).unwrap());
            let handles: Vec<_> = (0..2)
                .map(|p| {
                    let q = Arc::clone(&q);
                    thread::spawn(move || q.push(p).is_ok())
                })
                .collect();
            let mut got = Vec::new();
            if let Some(v) = q.pop() {
                got.push(v);
            }
            let pushed = handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|&ok| ok)
                .count();
            assert_eq!(pushed, 2, "a 2-slot queue must take two values");
            while let Some(v) = q.pop() {
                got.push(v);
            }
            got.sort_unstable();
            assert_eq!(got, vec![0, 1]);
        });
    }

    /// One producer, two consumers: each value is consumed exactly once.
    #[test]
    fn mpmc_loom_one_producer_two_consumers() {
        loom::model(|| {
            let q = Arc::new(MpmcQueue::new(2).unwrap());
            q.push(10u32).unwrap();
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    let q = Arc::clone(&q);
                    thread::spawn(move || q.pop())
                })
                .collect();
            let pushed_second = q.push(20).is_ok();
            let mut got: Vec<u32> = consumers
                .into_iter()
                .filter_map(|h| h.join().unwrap())
                .collect();
            while let Some(v) = q.pop() {
                got.push(v);
            }
            got.sort_unstable();
            assert!(pushed_second, "one slot was free for the second value");
            assert_eq!(got, vec![10, 20]);
        });
    }

    /// A full queue refuses a push until a consumer frees a slot; the slot reuse across laps is
    /// ordered so the new value is never overwritten or read early.
    #[test]
    fn mpmc_loom_wraparound_handoff() {
        loom::model(|| {
            let q = Arc::new(MpmcQueue::new(2).unwrap());
            q.push(1u32).unwrap();
            q.push(2).unwrap();
            let qc = Arc::clone(&q);
            let consumer = thread::spawn(move || {
                let a = qc.pop();
                let b = qc.pop();
                (a, b)
            });
            let third = q.push(3);
            let (a, b) = consumer.join().unwrap();
            assert_eq!(a, Some(1));
            assert_eq!(b, Some(2));
            match third {
                Ok(()) => assert_eq!(q.pop(), Some(3)),
                Err(v) => {
                    assert_eq!(v, 3);
                    assert_eq!(q.pop(), None);
                }
            }
        });
    }
}
