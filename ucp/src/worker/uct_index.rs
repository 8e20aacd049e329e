//! [`UctIndex`]: which ucp endpoint a transport endpoint belongs to.

use crate::worker::peers::UuidHash;
use std::collections::HashMap;

/// The ucp endpoint of each transport endpoint, by (interface index, transport endpoint id).
/// Transports number their endpoints from 0 up (a counter or a slab key), so ids below
/// [`UctIndex::DENSE_IDS`] live in one vector per interface, 4 bytes per id (a hub with 1,000
/// endpoints of two lanes holds 8 KB instead of a 70 KB hash map); larger ids (a generation in
/// the high bits, or a counter past the limit) go to a hash map.
#[derive(Default)]
pub(crate) struct UctIndex {
    dense: Vec<Vec<u32>>,
    sparse: HashMap<u64, u32, UuidHash>,
}

impl UctIndex {
    /// Ids kept in the per-interface vectors (at most 256 KiB each).
    const DENSE_IDS: u32 = 1 << 16;
    /// A vacant slot of a per-interface vector.
    const VACANT: u32 = u32::MAX;

    fn key((li, id): (usize, u32)) -> u64 {
        (li as u64) << 32 | u64::from(id)
    }

    /// The endpoint of transport endpoint `id` of interface `li`.
    #[inline]
    pub(crate) fn get(&self, &(li, id): &(usize, u32)) -> Option<usize> {
        if id < Self::DENSE_IDS {
            let v = *self.dense.get(li)?.get(id as usize)?;
            return (v != Self::VACANT).then_some(v as usize);
        }
        self.sparse.get(&Self::key((li, id))).map(|&v| v as usize)
    }

    /// Maps transport endpoint `k` to endpoint `idx`.
    pub(crate) fn insert(&mut self, (li, id): (usize, u32), idx: usize) {
        // Endpoint indexes are slab keys of a worker's endpoints: far below u32::MAX.
        let idx = idx as u32;
        if id >= Self::DENSE_IDS {
            self.sparse.insert(Self::key((li, id)), idx);
            return;
        }
        if self.dense.len() <= li {
            self.dense.resize_with(li + 1, Vec::new);
        }
        let v = &mut self.dense[li];
        if v.len() <= id as usize {
            v.resize(id as usize + 1, Self::VACANT);
        }
        v[id as usize] = idx;
    }

    /// Forgets transport endpoint `k`; gives the endpoint it was mapped to.
    pub(crate) fn remove(&mut self, &(li, id): &(usize, u32)) -> Option<usize> {
        if id >= Self::DENSE_IDS {
            return self.sparse.remove(&Self::key((li, id))).map(|v| v as usize);
        }
        let slot = self.dense.get_mut(li)?.get_mut(id as usize)?;
        let v = std::mem::replace(slot, Self::VACANT);
        (v != Self::VACANT).then_some(v as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_ids_map_and_unmap() {
        let mut x = UctIndex::default();
        assert_eq!(x.get(&(0, 0)), None);
        x.insert((2, 5), 7);
        x.insert((0, 0), 1);
        let big = UctIndex::DENSE_IDS + 3;
        x.insert((2, big), 9);
        x.insert((2, u32::MAX), 4);
        assert_eq!(x.get(&(2, 5)), Some(7));
        assert_eq!(x.get(&(0, 0)), Some(1));
        assert_eq!(x.get(&(2, big)), Some(9));
        assert_eq!(x.get(&(2, u32::MAX)), Some(4));
        assert_eq!(x.get(&(2, 4)), None, "a hole in the vector");
        assert_eq!(x.get(&(1, 5)), None, "an interface with no entries");
        assert_eq!(x.get(&(9, 5)), None, "an interface past the table");
        assert_eq!(
            x.dense[2].len(),
            6,
            "ids past the limit take no vector slots"
        );
        assert_eq!(x.remove(&(2, 5)), Some(7));
        assert_eq!(x.remove(&(2, 5)), None);
        assert_eq!(x.get(&(2, 5)), None);
        assert_eq!(x.remove(&(2, big)), Some(9));
        assert_eq!(x.get(&(2, big)), None);
        assert_eq!(x.remove(&(7, 1)), None);
        x.insert((2, 5), 8);
        assert_eq!(x.get(&(2, 5)), Some(8), "a slot is reused");
    }
}
