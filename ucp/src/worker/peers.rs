//! The endpoint of each peer worker, by the peer's uuid (the prefix of every ucp message), with
//! the last sender looked up kept aside so that a run of messages from one peer finds its
//! endpoint without hashing, and the peers whose endpoints closed lately (a message from one of
//! them is a late message of a normal run, not a sign of trouble).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use std::collections::{HashMap, VecDeque};

/// Hashes worker uuids (random 64-bit numbers) with one multiply instead of SipHash: every
/// arriving message looks its sender up by uuid, and SipHash cost about 150 instructions of it.
pub(crate) type UuidHash = std::hash::BuildHasherDefault<UuidHasher>;

/// The [`std::hash::Hasher`] of [`UuidHash`]: a Fibonacci multiply, folding the high half in so
/// both the bucket index (low bits) and the control tag (high bits) depend on every input bit.
#[derive(Default)]
pub(crate) struct UuidHasher(u64);

/// [`UuidHash`] started from a random seed of its own: for keys a peer chooses (such as its
/// message ids), which it then cannot pick to collide without knowing the seed.
#[derive(Clone)]
pub(crate) struct SeededUuidHash(u64);

impl Default for SeededUuidHash {
    fn default() -> Self {
        use std::hash::BuildHasher;
        SeededUuidHash(std::collections::hash_map::RandomState::new().hash_one(0u64))
    }
}

impl std::hash::BuildHasher for SeededUuidHash {
    type Hasher = UuidHasher;
    #[inline]
    fn build_hasher(&self) -> UuidHasher {
        UuidHasher(self.0)
    }
}

impl std::hash::Hasher for UuidHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        let m = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = m ^ (m >> 32);
    }
}

/// How many closed peers [`PeerIndex`] remembers.
const CLOSED_KEPT: usize = 256;

/// Peer uuid to endpoint index. Every change of the map forgets the kept-aside entry, so a
/// lookup always gives what the map holds.
#[derive(Default)]
pub(crate) struct PeerIndex {
    map: HashMap<u64, usize, UuidHash>,
    /// The last `(uuid, endpoint)` [`PeerIndex::lookup`] found.
    last: Option<(u64, usize)>,
    /// Peers forgotten by [`PeerIndex::remove`], newest last, at most [`CLOSED_KEPT`].
    closed: VecDeque<u64>,
}

impl PeerIndex {
    /// The endpoint of peer `uuid`.
    pub(crate) fn get(&self, uuid: &u64) -> Option<&usize> {
        self.map.get(uuid)
    }

    /// The endpoint of peer `uuid`, remembering it for the next lookup (the per-message path).
    #[inline]
    pub(crate) fn lookup(&mut self, uuid: u64) -> Option<usize> {
        if let Some((u, idx)) = self.last {
            if u == uuid {
                return Some(idx);
            }
        }
        let idx = *self.map.get(&uuid)?;
        self.last = Some((uuid, idx));
        Some(idx)
    }

    /// Maps peer `uuid` to endpoint `idx`; gives the endpoint it replaced.
    pub(crate) fn insert(&mut self, uuid: u64, idx: usize) -> Option<usize> {
        self.last = None;
        self.map.insert(uuid, idx)
    }

    /// Forgets peer `uuid` (remembered as closed); gives its endpoint.
    pub(crate) fn remove(&mut self, uuid: &u64) -> Option<usize> {
        self.last = None;
        let idx = self.map.remove(uuid)?;
        if self.closed.len() == CLOSED_KEPT {
            self.closed.pop_front();
        }
        self.closed.push_back(*uuid);
        Some(idx)
    }

    /// Whether peer `uuid` had an endpoint here that closed lately (and has none now).
    pub(crate) fn closed_lately(&self, uuid: u64) -> bool {
        !self.map.contains_key(&uuid) && self.closed.contains(&uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_follows_every_change() {
        let mut p = PeerIndex::default();
        assert_eq!(p.lookup(7), None);
        p.insert(7, 1);
        assert_eq!(p.lookup(7), Some(1));
        assert_eq!(p.lookup(7), Some(1));
        // Replaced: the kept-aside entry must not answer.
        assert_eq!(p.insert(7, 2), Some(1));
        assert_eq!(p.lookup(7), Some(2));
        p.insert(9, 3);
        assert_eq!(p.lookup(9), Some(3));
        assert_eq!(p.lookup(7), Some(2));
        assert_eq!(p.remove(&7), Some(2));
        assert_eq!(p.lookup(7), None);
        assert_eq!(p.get(&9), Some(&3));
        assert_eq!(p.lookup(9), Some(3));
        p.remove(&9);
        assert_eq!(p.lookup(9), None);
        assert!(p.closed_lately(9) && p.closed_lately(7));
        assert!(!p.closed_lately(8), "never seen");
        p.insert(9, 4);
        assert!(!p.closed_lately(9), "wired up again");
        for u in 100..100 + CLOSED_KEPT as u64 {
            p.insert(u, 5);
            p.remove(&u);
        }
        assert!(!p.closed_lately(7), "the oldest are forgotten");
        assert!(p.closed_lately(100 + CLOSED_KEPT as u64 - 1));
    }
}
