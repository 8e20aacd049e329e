//! The lock-free logic of the shared-memory FIFO: multi-producer claim, publish, single-consumer
//! poll and release, and the receiver's "armed" flag for wake-ups.
//!
//! The ring is a bounded sequence of positions `0, 1, 2, …`; position `p` lives in slot
//! `p % N`. Three kinds of shared words take part:
//! - `head`: the next position to claim. Producers claim with a CAS (`h -> h + 1`). Bit 63
//!   ([`ARMED`]) is set by a receiver about to sleep; the producer whose CAS clears it must wake
//!   the receiver after it publishes.
//! - `tail`: every position below it has been consumed and its slot may be reused. Only the
//!   consumer writes it, in batches, so the fast path of a producer never reads it.
//! - each slot's `seq`: `p + 1` once position `p` is published (written last, with Release). A
//!   stale value from an earlier lap is `p + 1 - k·N`, so it never matches.
//!
//! The functions are generic over [`Atom64`] so the same code runs on `std` atomics inside
//! shared memory and on loom's atomics in the model checker (`--cfg loom`).

use std::sync::atomic::Ordering;

/// Bit of `head` set while the receiver sleeps and wants a wake-up.
pub const ARMED: u64 = 1 << 63;

/// The atomic operations the ring needs on a 64-bit word.
pub trait Atom64 {
    /// Atomic load.
    fn load(&self, order: Ordering) -> u64;
    /// Atomic store.
    fn store(&self, value: u64, order: Ordering);
    /// Weak compare-and-exchange.
    fn cas_weak(&self, current: u64, new: u64, ok: Ordering, err: Ordering) -> Result<u64, u64>;
    /// Atomic or; gives the old value.
    fn fetch_or(&self, value: u64, order: Ordering) -> u64;
    /// Atomic and; gives the old value.
    fn fetch_and(&self, value: u64, order: Ordering) -> u64;
}

macro_rules! impl_atom64 {
    ($t:ty) => {
        impl Atom64 for $t {
            #[inline(always)]
            fn load(&self, order: Ordering) -> u64 {
                <$t>::load(self, order)
            }
            #[inline(always)]
            fn store(&self, value: u64, order: Ordering) {
                <$t>::store(self, value, order)
            }
            #[inline(always)]
            fn cas_weak(
                &self,
                current: u64,
                new: u64,
                ok: Ordering,
                err: Ordering,
            ) -> Result<u64, u64> {
                <$t>::compare_exchange_weak(self, current, new, ok, err)
            }
            #[inline(always)]
            fn fetch_or(&self, value: u64, order: Ordering) -> u64 {
                <$t>::fetch_or(self, value, order)
            }
            #[inline(always)]
            fn fetch_and(&self, value: u64, order: Ordering) -> u64 {
                <$t>::fetch_and(self, value, order)
            }
        }
    };
}

impl_atom64!(std::sync::atomic::AtomicU64);
#[cfg(loom)]
impl_atom64!(loom::sync::atomic::AtomicU64);

/// A claimed position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The position; its slot is `pos % N`.
    pub pos: u64,
    /// The receiver was armed: wake it after publishing.
    pub wake: bool,
}

/// True when a producer that last saw `tail` cannot claim `head` in a ring of `n` slots.
#[inline(always)]
fn looks_full(head: u64, tail: u64, n: u64) -> bool {
    // Signed: a tail read after a newer head can be ahead of `head`; that is "not full" (the CAS
    // then fails on the moved head and the producer retries).
    (head.wrapping_sub(tail) as i64) >= n as i64
}

/// Claims the next position, or gives `None` when the ring is full. `cached_tail` is the
/// producer's private copy of `tail`, refreshed only when the ring looks full.
#[inline(always)]
pub fn claim<A: Atom64>(head: &A, tail: &A, cached_tail: &mut u64, n: u64) -> Option<Claim> {
    let mut hv = head.load(Ordering::Relaxed);
    loop {
        let h = hv & !ARMED;
        if looks_full(h, *cached_tail, n) {
            // Acquire: the consumer's reads of the slots below `tail` happen before our writes.
            *cached_tail = tail.load(Ordering::Acquire);
            if looks_full(h, *cached_tail, n) {
                return None;
            }
        }
        // Acquire on success pairs with the consumer's SeqCst fetch_or in `arm`, so a producer
        // that sees ARMED also sees the arming; clearing ARMED hands the wake-up to this producer.
        match head.cas_weak(hv, h + 1, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => {
                return Some(Claim {
                    pos: h,
                    wake: hv & ARMED != 0,
                })
            }
            Err(actual) => hv = actual,
        }
    }
}

/// True when a claim would succeed now (used to decide when pending requests may retry).
#[inline]
pub fn has_space<A: Atom64>(head: &A, tail: &A, cached_tail: &mut u64, n: u64) -> bool {
    let h = head.load(Ordering::Relaxed) & !ARMED;
    if !looks_full(h, *cached_tail, n) {
        return true;
    }
    *cached_tail = tail.load(Ordering::Acquire);
    !looks_full(h, *cached_tail, n)
}

/// Publishes position `pos` after its slot was written: the slot's `seq` becomes `pos + 1`.
#[inline(always)]
pub fn publish<A: Atom64>(seq: &A, pos: u64) {
    seq.store(pos + 1, Ordering::Release);
}

/// True when position `pos` has been published in its slot (`seq` is that slot's word).
#[inline(always)]
pub fn is_ready<A: Atom64>(seq: &A, pos: u64) -> bool {
    seq.load(Ordering::Acquire) == pos + 1
}

/// Releases every position below `read_pos` to producers.
#[inline(always)]
pub fn release<A: Atom64>(tail: &A, read_pos: u64) {
    tail.store(read_pos, Ordering::Release);
}

/// The consumer, about to sleep, asks for a wake-up. Gives `false` (and disarms) when a
/// position at or after `read_pos` is already claimed: do not sleep, poll instead. Gives
/// `true` when armed: the producer of the next claim sees [`ARMED`] and must wake the consumer.
#[inline]
pub fn arm<A: Atom64>(head: &A, read_pos: u64) -> bool {
    let old = head.fetch_or(ARMED, Ordering::SeqCst);
    if old & !ARMED != read_pos {
        head.fetch_and(!ARMED, Ordering::SeqCst);
        return false;
    }
    true
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn claim_until_full_then_release() {
        let (head, tail) = (AtomicU64::new(0), AtomicU64::new(0));
        let mut cached = 0;
        for p in 0..4 {
            let c = claim(&head, &tail, &mut cached, 4).expect("space");
            assert_eq!(
                c,
                Claim {
                    pos: p,
                    wake: false
                }
            );
        }
        assert!(claim(&head, &tail, &mut cached, 4).is_none());
        assert!(!has_space(&head, &tail, &mut cached, 4));
        release(&tail, 1);
        assert!(has_space(&head, &tail, &mut cached, 4));
        assert_eq!(claim(&head, &tail, &mut cached, 4).unwrap().pos, 4);
        assert!(claim(&head, &tail, &mut cached, 4).is_none());
    }

    #[test]
    fn publish_is_seen_only_for_its_lap() {
        let seq = AtomicU64::new(0);
        assert!(!is_ready(&seq, 0));
        publish(&seq, 0);
        assert!(is_ready(&seq, 0));
        // Same slot, next lap of a 4-slot ring: the old value does not count.
        assert!(!is_ready(&seq, 4));
        publish(&seq, 4);
        assert!(is_ready(&seq, 4));
    }

    #[test]
    fn arm_hands_the_wakeup_to_the_next_producer() {
        let (head, tail) = (AtomicU64::new(0), AtomicU64::new(0));
        let mut cached = 0;
        assert!(arm(&head, 0));
        let c = claim(&head, &tail, &mut cached, 4).unwrap();
        assert_eq!(c, Claim { pos: 0, wake: true });
        // ARMED is cleared by that claim: the next producer does not wake again.
        let c = claim(&head, &tail, &mut cached, 4).unwrap();
        assert_eq!(
            c,
            Claim {
                pos: 1,
                wake: false
            }
        );
        // Something is claimed beyond read_pos 0: arming refuses and leaves no flag behind.
        assert!(!arm(&head, 0));
        assert_eq!(head.load(Ordering::Relaxed) & ARMED, 0);
        assert!(arm(&head, 2));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicBool, AtomicU64};
    use loom::sync::Arc;

    const N: u64 = 2;

    struct Ring {
        head: AtomicU64,
        tail: AtomicU64,
        seq: [AtomicU64; N as usize],
        data: [UnsafeCell<u64>; N as usize],
        woken: AtomicBool,
    }

    impl Ring {
        fn new() -> Self {
            Ring {
                head: AtomicU64::new(0),
                tail: AtomicU64::new(0),
                seq: [AtomicU64::new(0), AtomicU64::new(0)],
                data: [UnsafeCell::new(0), UnsafeCell::new(0)],
                woken: AtomicBool::new(false),
            }
        }
        fn send(&self, cached: &mut u64, v: u64) {
            loop {
                if let Some(c) = claim(&self.head, &self.tail, cached, N) {
                    let slot = (c.pos % N) as usize;
                    // Loom checks that no one else touches the slot's payload now.
                    self.data[slot].with_mut(|p| unsafe { *p = v });
                    publish(&self.seq[slot], c.pos);
                    if c.wake {
                        self.woken.store(true, Ordering::SeqCst);
                    }
                    return;
                }
                loom::thread::yield_now();
            }
        }
    }

    /// Runs `producers` (each sending its list of values) against one consumer on a two-slot
    /// ring, and checks that every message arrives once, with its payload, in per-producer
    /// order. Loom also checks that no payload access races.
    fn mpsc(producers: &'static [&'static [u64]]) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let ring = Arc::new(Ring::new());
            let handles: Vec<_> = producers
                .iter()
                .map(|vals| {
                    let r = ring.clone();
                    loom::thread::spawn(move || {
                        let mut cached = 0;
                        for &v in vals.iter() {
                            r.send(&mut cached, v);
                        }
                    })
                })
                .collect();
            let total: usize = producers.iter().map(|v| v.len()).sum();
            let mut got = Vec::new();
            let mut read_pos = 0u64;
            while got.len() < total {
                let slot = (read_pos % N) as usize;
                if is_ready(&ring.seq[slot], read_pos) {
                    got.push(ring.data[slot].with(|p| unsafe { *p }));
                    read_pos += 1;
                    release(&ring.tail, read_pos);
                } else {
                    loom::thread::yield_now();
                }
            }
            for h in handles {
                h.join().unwrap();
            }
            for vals in producers {
                let mine: Vec<u64> = got.iter().copied().filter(|v| vals.contains(v)).collect();
                assert_eq!(&mine[..], *vals);
            }
        });
    }

    /// Two producers race for claims (CAS on head) while the consumer drains.
    #[test]
    fn loom_two_producers_claim_publish_consume() {
        mpsc(&[&[10], &[20]]);
    }

    /// One producer fills the two-slot ring and waits for the consumer's release (tail).
    #[test]
    fn loom_full_ring_waits_for_release() {
        mpsc(&[&[1, 2, 3]]);
    }

    /// The consumer arms while a producer sends: either arming sees the claim (and the consumer
    /// polls), or the producer sees ARMED and wakes it. Never both missed.
    #[test]
    fn loom_arm_never_loses_a_wakeup() {
        loom::model(|| {
            let ring = Arc::new(Ring::new());
            let r2 = ring.clone();
            let producer = loom::thread::spawn(move || {
                let mut cached = 0;
                r2.send(&mut cached, 7);
            });
            let armed = arm(&ring.head, 0);
            producer.join().unwrap();
            if armed {
                assert!(
                    ring.woken.load(Ordering::SeqCst),
                    "receiver armed but producer did not wake it"
                );
            }
            assert!(is_ready(&ring.seq[0], 0));
        });
    }
}
