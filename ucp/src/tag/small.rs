//! Small unexpected messages: whole eager messages of at most [`UNEXP_INLINE`] bytes without
//! acknowledgement (the common unexpected message of a message-rate loop), each kept in one
//! cache line of a reused table instead of a general [`Unexp`](crate::tag::unexp::Unexp)
//! entry. The matcher names them by their slot with [`SMALL_UID`] set.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::tag::unexp::UNEXP_INLINE;

/// Bit of a matcher id that names a slot of the [`SmallUnexps`] table (ids without it name an
/// entry of `State::unexp`).
pub(crate) const SMALL_UID: u64 = 1 << 63;

/// One small unexpected message: `data[..len]` from endpoint `ep`, with `tag`.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct SmallUnexp {
    pub(crate) tag: u64,
    pub(crate) ep: u32,
    pub(crate) len: u8,
    pub(crate) data: [u8; UNEXP_INLINE],
}

const _: () = assert!(std::mem::size_of::<SmallUnexp>() == 64);
const _: () = assert!(UNEXP_INLINE <= u8::MAX as usize);

/// Slots of small unexpected messages, reused through a stack of vacant ones, so that after
/// warm-up a message costs no allocation.
#[derive(Default)]
pub(crate) struct SmallUnexps {
    slots: Vec<SmallUnexp>,
    /// Vacant slots; the last one is used next.
    free: Vec<u32>,
}

impl SmallUnexps {
    /// Keeps `data` (cut to [`UNEXP_INLINE`] bytes) with `tag` from endpoint `ep`; gives its
    /// matcher id (with [`SMALL_UID`]).
    #[inline(always)]
    pub(crate) fn insert(&mut self, ep: usize, tag: u64, data: &[u8]) -> u64 {
        let len = data.len().min(UNEXP_INLINE);
        let slot = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(SmallUnexp {
                    tag: 0,
                    ep: 0,
                    len: 0,
                    data: [0; UNEXP_INLINE],
                });
                self.slots.len() - 1
            }
        };
        if let Some(e) = self.slots.get_mut(slot) {
            e.tag = tag;
            e.ep = ep as u32;
            e.len = len as u8;
            super::copy::copy_in(&mut e.data, &data[..len]);
        }
        slot as u64 | SMALL_UID
    }

    /// The message of matcher id `uid` (with [`SMALL_UID`]), still kept.
    #[inline(always)]
    pub(crate) fn get(&self, uid: u64) -> Option<&SmallUnexp> {
        self.slots.get((uid & !SMALL_UID) as usize)
    }

    /// Frees the slot of matcher id `uid` (its message was received).
    #[inline(always)]
    pub(crate) fn free(&mut self, uid: u64) {
        self.free.push((uid & !SMALL_UID) as u32);
    }

    /// Messages kept.
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_keep_what_was_inserted() {
        let mut t = SmallUnexps::default();
        let a = t.insert(3, 7, b"hello");
        let b = t.insert(4, 8, &[9u8; 100]);
        assert!(a & SMALL_UID != 0 && b & SMALL_UID != 0 && a != b);
        assert_eq!(t.len(), 2);
        let e = *t.get(b).unwrap();
        assert_eq!((e.tag, e.ep, usize::from(e.len)), (8, 4, UNEXP_INLINE));
        assert!(e.data.iter().all(|&x| x == 9));
        t.free(a);
        assert_eq!(t.len(), 1);
        let c = t.insert(5, 9, b"xy");
        assert_eq!(c, a, "the vacant slot is reused");
        let e = t.get(c).unwrap();
        assert_eq!(
            (e.tag, e.ep, &e.data[..usize::from(e.len)]),
            (9, 5, &b"xy"[..])
        );
    }
}
