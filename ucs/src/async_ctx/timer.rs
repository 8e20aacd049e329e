//! Deadline timers: one-shot and periodic timers in a binary heap, each carrying a caller value
//! (what to do when it fires). The queue never reads a clock: [`TimerQueue::expire`] takes the
//! time, so tests drive it with [`ManualClock`](crate::time::ManualClock) and never sleep.
//!
//! Times are offsets from a [`Clock`](crate::time::Clock)'s origin. A waiter bounds its sleep
//! with [`TimerQueue::next_deadline`]; whoever polls compares the clock with that deadline (one
//! comparison) and calls `expire` only when it has passed.

use crate::status::{Error, Result};
use slab::Slab;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Identifies a timer in a [`TimerQueue`]; stays unique after the timer is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(u64);

impl TimerId {
    fn new(index: usize, generation: u32) -> Self {
        TimerId((u64::from(generation) << 32) | index as u64)
    }
    fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The id as a number (for logs).
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

#[derive(Debug)]
struct Timer<T> {
    deadline: Duration,
    period: Option<Duration>,
    generation: u32,
    data: T,
}

/// One-shot and periodic timers ordered by deadline, each with a value of type `T` given back
/// when it fires.
#[derive(Debug)]
pub struct TimerQueue<T> {
    timers: Slab<Timer<T>>,
    /// (deadline, sequence, index, generation); entries of canceled timers are skipped lazily.
    heap: BinaryHeap<Reverse<(Duration, u64, usize, u32)>>,
    seq: u64,
    generation: u32,
}

impl<T> Default for TimerQueue<T> {
    fn default() -> Self {
        TimerQueue {
            timers: Slab::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            generation: 0,
        }
    }
}

impl<T: Copy> TimerQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a timer due at `deadline` carrying `data`; with a `period` it fires again every
    /// period after that. Gives [`Error::InvalidParam`] for a zero period or too many timers.
    pub fn add(
        &mut self,
        deadline: Duration,
        period: Option<Duration>,
        data: T,
    ) -> Result<TimerId> {
        if period == Some(Duration::ZERO) {
            return Err(Error::InvalidParam(
                "a periodic timer needs a non-zero period".into(),
            ));
        }
        if self.timers.len() >= u32::MAX as usize {
            return Err(Error::InvalidParam("too many timers".into()));
        }
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let index = self.timers.insert(Timer {
            deadline,
            period,
            generation,
            data,
        });
        self.push_heap(deadline, index, generation);
        Ok(TimerId::new(index, generation))
    }

    fn push_heap(&mut self, deadline: Duration, index: usize, generation: u32) {
        self.seq += 1;
        self.heap
            .push(Reverse((deadline, self.seq, index, generation)));
    }

    fn live(&self, index: usize, generation: u32, deadline: Duration) -> bool {
        self.timers
            .get(index)
            .is_some_and(|t| t.generation == generation && t.deadline == deadline)
    }

    /// Cancels a timer; false if it already fired (one-shot) or was canceled.
    pub fn cancel(&mut self, id: TimerId) -> bool {
        match self.timers.get(id.index()) {
            Some(t) if t.generation == id.generation() => {
                self.timers.remove(id.index());
                // Drop stale heap entries once they dominate.
                if self.heap.len() > 2 * self.timers.len() + 32 {
                    let timers = &self.timers;
                    self.heap.retain(|Reverse((d, _, i, g))| {
                        timers
                            .get(*i)
                            .is_some_and(|t| t.generation == *g && t.deadline == *d)
                    });
                }
                true
            }
            _ => false,
        }
    }

    /// Appends the timers due at `now` to `due` (id and value), earliest first, and gives their
    /// number. One-shot timers are removed; a periodic timer fires once per call even if several
    /// periods passed, and is rescheduled to its first deadline after `now` (keeping its
    /// phase). Allocates nothing once `due` and the queue have reached their working size.
    pub fn expire(&mut self, now: Duration, due: &mut Vec<(TimerId, T)>) -> usize {
        let mut n = 0;
        while let Some(&Reverse((deadline, _, index, generation))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            if !self.live(index, generation, deadline) {
                continue;
            }
            let t = &mut self.timers[index];
            due.push((TimerId::new(index, generation), t.data));
            n += 1;
            match t.period {
                Some(period) => {
                    let p = period.as_nanos();
                    let missed = (now - deadline).as_nanos() / p;
                    let next_ns = deadline.as_nanos() + p * (missed + 1);
                    let next = u64::try_from(next_ns)
                        .map(Duration::from_nanos)
                        .unwrap_or(Duration::MAX);
                    t.deadline = next;
                    self.push_heap(next, index, generation);
                }
                None => {
                    self.timers.remove(index);
                }
            }
        }
        n
    }

    /// The earliest deadline of a live timer.
    pub fn next_deadline(&mut self) -> Option<Duration> {
        while let Some(&Reverse((deadline, _, index, generation))) = self.heap.peek() {
            if self.live(index, generation, deadline) {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// Number of live timers.
    pub fn len(&self) -> usize {
        self.timers.len()
    }

    /// True without live timers.
    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn timer_queue_one_shot_and_periodic() {
        let mut q = TimerQueue::new();
        let once = q.add(ms(10), None, 1u8).unwrap();
        let every = q.add(ms(5), Some(ms(5)), 2).unwrap();
        let mut due = Vec::new();
        assert_eq!(q.next_deadline(), Some(ms(5)));
        assert_eq!(q.expire(ms(4), &mut due), 0);
        assert_eq!(q.expire(ms(5), &mut due), 1);
        assert_eq!(due, vec![(every, 2)]);
        due.clear();
        assert_eq!(q.expire(ms(10), &mut due), 2);
        assert_eq!(
            due,
            vec![(once, 1), (every, 2)],
            "equal deadlines fire in scheduling order"
        );
        due.clear();
        assert_eq!(q.len(), 1, "the one-shot timer is gone");
        assert!(!q.cancel(once), "already fired");
        // Three periods pass: it fires once and keeps its phase.
        assert_eq!(q.expire(ms(27), &mut due), 1);
        assert_eq!(q.next_deadline(), Some(ms(30)));
        assert!(q.cancel(every));
        assert!(!q.cancel(every));
        due.clear();
        assert_eq!(q.expire(ms(1000), &mut due), 0);
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn timer_queue_cancel_and_stale_ids() {
        let mut q = TimerQueue::new();
        let a = q.add(ms(1), None, 0u8).unwrap();
        assert!(q.cancel(a));
        let b = q.add(ms(1), None, 0u8).unwrap();
        assert_ne!(a, b, "a reused slot gets a new id");
        assert!(!q.cancel(a), "a stale id does not cancel the new timer");
        let mut due = Vec::new();
        q.expire(ms(1), &mut due);
        assert_eq!(due, vec![(b, 0)]);
        assert!(matches!(
            q.add(ms(1), Some(Duration::ZERO), 0),
            Err(Error::InvalidParam(_))
        ));
    }

    #[test]
    fn timer_queue_compacts_canceled_entries() {
        let mut q = TimerQueue::new();
        let keep = q.add(ms(500), None, 0u8).unwrap();
        for i in 0..10_000 {
            let id = q.add(ms(1000 + i), None, 0u8).unwrap();
            assert!(q.cancel(id));
        }
        assert!(
            q.heap.len() <= 2 * q.len() + 33,
            "heap holds {}",
            q.heap.len()
        );
        let mut due = Vec::new();
        q.expire(Duration::MAX, &mut due);
        assert_eq!(due, vec![(keep, 0)]);
    }
}
