//! Tag matching with MPI semantics, independent of any transport.
//!
//! - An arriving message matches the earliest-posted receive whose `(tag & mask)` fits, across
//!   exact and wildcard receives (a sequence number orders the two queues).
//! - A posted receive matches the earliest-arrived unexpected message that fits.
//! - Messages from one sender arrive in send order (the transport lane is ordered), so they match
//!   in send order.
//!
//! Exact receives (mask of all ones) sit in hash buckets so an arrival looks at one short list;
//! wildcard receives sit in one list. The matcher stores only ids: the worker keeps the request
//! or the unexpected message in its own pools. Queues are reused, so after warm-up matching does
//! not allocate.

use super::queue::Queue;

/// Mask that matches only the exact tag.
pub const EXACT: u64 = u64::MAX;
const BUCKETS: usize = 256;

#[derive(Debug, Clone, Copy)]
struct Expected {
    seq: u64,
    tag: u64,
    mask: u64,
    id: u64,
}

/// True when a message tag fits a receive's tag and mask.
#[inline]
pub fn tag_fits(msg_tag: u64, recv_tag: u64, mask: u64) -> bool {
    (msg_tag ^ recv_tag) & mask == 0
}

#[inline]
fn bucket(tag: u64) -> usize {
    (tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % BUCKETS
}

/// Expected receives and unexpected messages of one worker.
#[derive(Debug)]
pub struct TagMatcher {
    seq: u64,
    exact: Box<[Queue<Expected>; BUCKETS]>,
    wild: Queue<Expected>,
    unexpected: Queue<(u64, u64)>,
    /// Arrivals that matched a posted receive so far (wraps).
    matched: u64,
}

impl Default for TagMatcher {
    fn default() -> Self {
        Self::new()
    }
}

impl TagMatcher {
    /// Empty queues.
    pub fn new() -> Self {
        TagMatcher {
            seq: 0,
            exact: Box::new(std::array::from_fn(|_| Queue::default())),
            wild: Queue::default(),
            unexpected: Queue::default(),
            matched: 0,
        }
    }

    /// Posts a receive `id` for `tag` under `mask`. If an unexpected message fits, it is removed
    /// and its id returned (the receive is then not queued); otherwise the receive is queued.
    pub fn post(&mut self, tag: u64, mask: u64, id: u64) -> Option<u64> {
        if let Some(u) = self.take_unexpected(tag, mask) {
            return Some(u);
        }
        self.queue(tag, mask, id);
        None
    }

    /// Queues receive `id` for `tag` under `mask` without looking at the unexpected messages
    /// (the caller found none that fits: [`TagMatcher::take_unexpected`] gave `None`).
    #[inline(always)]
    pub fn queue(&mut self, tag: u64, mask: u64, id: u64) {
        self.seq += 1;
        let e = Expected {
            seq: self.seq,
            tag,
            mask,
            id,
        };
        if mask == EXACT {
            self.exact[bucket(tag)].push_back(e);
        } else {
            self.wild.push_back(e);
        }
    }

    /// A message with `tag` arrived. Gives the id of the receive it matches (removed from the
    /// queue), or, when none fits, queues `unexp_id` as unexpected and gives `None`.
    #[inline]
    pub fn arrive(&mut self, tag: u64, unexp_id: u64) -> Option<u64> {
        match self.match_expected(tag) {
            Some(id) => Some(id),
            None => {
                self.push_unexpected(tag, unexp_id);
                None
            }
        }
    }

    /// Queues message `unexp_id` with `tag` as unexpected (the caller found no receive for it:
    /// [`TagMatcher::match_expected`] gave `None`).
    #[inline]
    pub fn push_unexpected(&mut self, tag: u64, unexp_id: u64) {
        self.unexpected.push_back((tag, unexp_id));
    }

    /// Removes and gives the earliest-posted receive that fits `tag`, if any.
    #[inline]
    pub fn match_expected(&mut self, tag: u64) -> Option<u64> {
        // No wildcard receive: the earliest exact one for the tag wins, usually the first of
        // its bucket. Each way that finds a receive counts it in `matched`.
        if self.wild.is_empty() {
            let b = &mut self.exact[bucket(tag)];
            match b.front() {
                None => return None,
                Some(e) if e.tag == tag => {
                    let id = b.pop_front().map(|e| e.id);
                    self.matched = self.matched.wrapping_add(1);
                    return id;
                }
                Some(_) => {}
            }
        }
        self.match_expected_scan(tag)
    }

    /// How many arrivals matched a posted receive so far (wrapping): compare two readings to
    /// see whether one did in between.
    #[inline]
    pub fn matched(&self) -> u64 {
        self.matched
    }

    /// False when no posted receive can fit `tag` (no wildcard receive, none in its bucket): a
    /// message with it arriving now would be unexpected.
    #[inline]
    pub fn may_match(&self, tag: u64) -> bool {
        !self.wild.is_empty() || !self.exact[bucket(tag)].is_empty()
    }

    /// [`TagMatcher::match_expected`] when the receive is not at the front of its bucket, or
    /// wildcard receives are waiting; counts a receive found in `matched`.
    #[inline(never)]
    fn match_expected_scan(&mut self, tag: u64) -> Option<u64> {
        let id = self.find_expected(tag);
        self.matched = self.matched.wrapping_add(id.is_some() as u64);
        id
    }

    /// [`TagMatcher::match_expected_scan`] without the count.
    #[inline(always)]
    fn find_expected(&mut self, tag: u64) -> Option<u64> {
        let b = &mut self.exact[bucket(tag)];
        if self.wild.is_empty() {
            let i = b.iter().position(|e| e.tag == tag)?;
            return b.remove(i).map(|e| e.id);
        }
        let ei = b.iter().position(|e| e.tag == tag);
        let wi = self.wild.iter().position(|e| tag_fits(tag, e.tag, e.mask));
        match (ei, wi) {
            (None, None) => None,
            (Some(i), None) => b.remove(i).map(|e| e.id),
            (None, Some(j)) => self.wild.remove(j).map(|e| e.id),
            (Some(i), Some(j)) => {
                if b[i].seq < self.wild[j].seq {
                    b.remove(i).map(|e| e.id)
                } else {
                    self.wild.remove(j).map(|e| e.id)
                }
            }
        }
    }

    /// Removes a posted receive; false if it is not queued (already matched or canceled).
    pub fn cancel(&mut self, tag: u64, mask: u64, id: u64) -> bool {
        let q = if mask == EXACT {
            &mut self.exact[bucket(tag)]
        } else {
            &mut self.wild
        };
        let pos = q.iter().position(|e| e.id == id);
        match pos {
            Some(i) => {
                q.remove(i);
                true
            }
            None => false,
        }
    }

    /// The earliest unexpected message that fits, without removing it: `(tag, id)`.
    #[inline]
    pub fn probe(&self, tag: u64, mask: u64) -> Option<(u64, u64)> {
        // Usually the earliest message is the one.
        match self.unexpected.front() {
            None => None,
            Some(&(t, id)) if tag_fits(t, tag, mask) => Some((t, id)),
            Some(_) => self.probe_scan(tag, mask),
        }
    }

    #[inline(never)]
    fn probe_scan(&self, tag: u64, mask: u64) -> Option<(u64, u64)> {
        self.unexpected
            .iter()
            .find(|&(t, _)| tag_fits(t, tag, mask))
    }

    /// Removes and gives the earliest unexpected message that fits.
    #[inline]
    pub fn take_unexpected(&mut self, tag: u64, mask: u64) -> Option<u64> {
        match self.unexpected.front() {
            None => None,
            Some(&(t, _)) if tag_fits(t, tag, mask) => {
                self.unexpected.pop_front().map(|(_, id)| id)
            }
            Some(_) => self.take_unexpected_scan(tag, mask),
        }
    }

    #[inline(never)]
    fn take_unexpected_scan(&mut self, tag: u64, mask: u64) -> Option<u64> {
        let i = self
            .unexpected
            .iter()
            .position(|(t, _)| tag_fits(t, tag, mask))?;
        self.unexpected.remove(i).map(|(_, id)| id)
    }

    /// True when unexpected message `id` is queued (not taken by a receive or a removing
    /// probe).
    pub fn is_unexpected_queued(&self, id: u64) -> bool {
        self.unexpected.iter().any(|(_, u)| u == id)
    }

    /// Number of queued receives.
    pub fn expected_len(&self) -> usize {
        self.wild.len() + self.exact.iter().map(|b| b.len()).sum::<usize>()
    }

    /// Number of unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn posting_order_across_exact_and_wildcard() {
        let mut m = TagMatcher::new();
        assert_eq!(m.post(5, 0, 1), None); // wildcard, posted first
        assert_eq!(m.post(5, EXACT, 2), None);
        assert_eq!(m.arrive(5, 100), Some(1));
        assert_eq!(m.arrive(5, 101), Some(2));
        assert_eq!(m.arrive(5, 102), None);
        assert_eq!(m.probe(0, 0), Some((5, 102)));
        assert_eq!(m.post(6, EXACT, 3), None);
        assert_eq!(m.post(5, EXACT, 4), Some(102));
        assert!(m.cancel(6, EXACT, 3));
        assert!(!m.cancel(6, EXACT, 3));
        assert_eq!(m.expected_len(), 0);
    }

    #[test]
    fn counts_matches_and_tells_which_tags_may_match() {
        let mut m = TagMatcher::new();
        assert!(!m.may_match(5));
        assert_eq!(m.arrive(5, 100), None);
        assert_eq!(m.matched(), 0);
        assert_eq!(m.post(6, EXACT, 1), None);
        assert!(m.may_match(6));
        assert!(!m.may_match(5), "an exact receive for another tag");
        assert_eq!(m.arrive(6, 101), Some(1));
        assert_eq!(m.matched(), 1);
        assert!(!m.may_match(6));
        // A receive matched by its posting (message first) is no arrival match.
        assert_eq!(m.post(5, EXACT, 3), Some(100));
        assert_eq!(m.matched(), 1);
        assert_eq!(m.post(7, 0, 2), None);
        assert!(m.may_match(5), "a wildcard receive may fit any tag");
        assert_eq!(m.arrive(8, 102), Some(2));
        assert_eq!(m.matched(), 2);
    }

    #[test]
    fn mask_selects_bits() {
        let mut m = TagMatcher::new();
        assert_eq!(m.post(0xAB00, 0xFF00, 1), None);
        assert_eq!(m.arrive(0xAC01, 9), None);
        assert_eq!(m.arrive(0xAB77, 10), Some(1));
        assert_eq!(m.take_unexpected(0xAC00, 0xFF00), Some(9));
    }

    /// The obviously-correct model: two lists scanned front to back.
    #[derive(Default)]
    struct Model {
        expected: Vec<(u64, u64, u64)>,
        unexpected: Vec<(u64, u64)>,
    }

    impl Model {
        fn post(&mut self, tag: u64, mask: u64, id: u64) -> Option<u64> {
            if let Some(i) = self
                .unexpected
                .iter()
                .position(|&(t, _)| (t & mask) == (tag & mask))
            {
                return Some(self.unexpected.remove(i).1);
            }
            self.expected.push((tag, mask, id));
            None
        }
        fn arrive(&mut self, tag: u64, uid: u64) -> Option<u64> {
            if let Some(i) = self
                .expected
                .iter()
                .position(|&(t, m, _)| (t & m) == (tag & m))
            {
                return Some(self.expected.remove(i).2);
            }
            self.unexpected.push((tag, uid));
            None
        }
        fn cancel(&mut self, id: u64) -> Option<(u64, u64)> {
            let i = self.expected.iter().position(|&(_, _, x)| x == id)?;
            let (t, m, _) = self.expected.remove(i);
            Some((t, m))
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Post { tag: u64, mask: u64 },
        Arrive { tag: u64 },
        Cancel { nth: usize },
        Probe { tag: u64, mask: u64, remove: bool },
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct tags so matches, collisions and wildcards happen often.
        let tag = prop_oneof![0u64..6, Just(u64::MAX), Just(0x1_0000_0000)];
        let mask = prop_oneof![Just(EXACT), Just(0u64), Just(0x3u64), Just(!1u64)];
        prop_oneof![
            4 => (tag.clone(), mask.clone()).prop_map(|(tag, mask)| Op::Post { tag, mask }),
            4 => tag.clone().prop_map(|tag| Op::Arrive { tag }),
            1 => (0usize..8).prop_map(|nth| Op::Cancel { nth }),
            1 => (tag, mask, any::<bool>()).prop_map(|(tag, mask, remove)| Op::Probe { tag, mask, remove }),
        ]
    }

    proptest! {
        #[test]
        fn matches_reference_model(ops in proptest::collection::vec(op(), 1..200)) {
            let mut real = TagMatcher::new();
            let mut model = Model::default();
            let mut next = 0u64;
            for op in ops {
                next += 1;
                match op {
                    Op::Post { tag, mask } => {
                        prop_assert_eq!(real.post(tag, mask, next), model.post(tag, mask, next));
                    }
                    Op::Arrive { tag } => {
                        prop_assert_eq!(real.arrive(tag, next), model.arrive(tag, next));
                    }
                    Op::Cancel { nth } => {
                        if model.expected.is_empty() { continue; }
                        let id = model.expected[nth % model.expected.len()].2;
                        let (t, m) = model.cancel(id).unwrap();
                        prop_assert!(real.cancel(t, m, id));
                    }
                    Op::Probe { tag, mask, remove } => {
                        let want = model.unexpected.iter().copied()
                            .find(|&(t, _)| (t & mask) == (tag & mask));
                        prop_assert_eq!(real.probe(tag, mask), want);
                        if remove {
                            let got = real.take_unexpected(tag, mask);
                            prop_assert_eq!(got, want.map(|w| w.1));
                            if let Some((_, u)) = want {
                                model.unexpected.retain(|&(_, x)| x != u);
                            }
                        }
                    }
                }
                prop_assert_eq!(real.expected_len(), model.expected.len());
                prop_assert_eq!(real.unexpected_len(), model.unexpected.len());
            }
        }
    }
}
