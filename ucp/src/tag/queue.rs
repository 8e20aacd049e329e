//! A first-in first-out queue of small `Copy` entries for the tag matcher: a ring of
//! power-of-two capacity, so that adding at the back and taking from the front (all the data
//! path does) are a few instructions each. It grows by doubling and never shrinks, so after
//! warm-up it does not allocate.

/// FIFO queue of `Copy` entries (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Queue<T: Copy> {
    /// The slots; the length is zero or a power of two.
    buf: Vec<T>,
    /// Slot of the front entry.
    head: usize,
    /// Entries queued.
    len: usize,
}

impl<T: Copy> Default for Queue<T> {
    fn default() -> Self {
        Queue {
            buf: Vec::new(),
            head: 0,
            len: 0,
        }
    }
}

impl<T: Copy> Queue<T> {
    /// Entries queued.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn slot(&self, i: usize) -> usize {
        (self.head + i) & (self.buf.len().wrapping_sub(1))
    }

    /// Adds `v` at the back.
    #[inline(always)]
    pub(crate) fn push_back(&mut self, v: T) {
        if self.len == self.buf.len() {
            self.grow(v);
        }
        let s = self.slot(self.len);
        if let Some(x) = self.buf.get_mut(s) {
            *x = v;
        }
        self.len += 1;
    }

    /// Doubles the capacity (at least 4 slots), keeping the entries in order from slot 0.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, fill: T) {
        let cap = (self.buf.len() * 2).max(4);
        let mut buf = Vec::with_capacity(cap);
        buf.extend(self.iter());
        buf.resize(cap, fill);
        self.buf = buf;
        self.head = 0;
    }

    /// The front entry.
    #[inline(always)]
    pub(crate) fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.buf.get(self.head)
    }

    /// Takes the front entry.
    #[inline(always)]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = *self.buf.get(self.head)?;
        self.head = self.slot(1);
        self.len -= 1;
        Some(v)
    }

    /// Entry `i` from the front.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        self.buf.get(self.slot(i))
    }

    /// The entries from front to back.
    pub(crate) fn iter(&self) -> impl Iterator<Item = T> + '_ {
        (0..self.len).filter_map(move |i| self.buf.get(self.slot(i)).copied())
    }

    /// Removes and gives entry `i` from the front, keeping the order of the others.
    pub(crate) fn remove(&mut self, i: usize) -> Option<T> {
        let v = *self.get(i)?;
        // Moves the entries behind it one slot forward.
        for j in i..self.len - 1 {
            let (from, to) = (self.slot(j + 1), self.slot(j));
            self.buf[to] = self.buf[from];
        }
        self.len -= 1;
        Some(v)
    }
}

impl<T: Copy> std::ops::Index<usize> for Queue<T> {
    type Output = T;
    /// Entry `i` from the front; `i` must be below [`Queue::len`].
    fn index(&self, i: usize) -> &T {
        assert!(i < self.len, "queue index {i} out of range {}", self.len);
        &self.buf[self.slot(i)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    proptest! {
        /// Behaves as `VecDeque` under pushes, pops and removals, across growth and wrap-around.
        #[test]
        fn matches_vecdeque(ops in proptest::collection::vec((0u8..4, 0usize..40), 1..300)) {
            let mut q = Queue::default();
            let mut m = VecDeque::new();
            let mut next = 0u32;
            for (op, i) in ops {
                match op {
                    0 | 1 => {
                        q.push_back(next);
                        m.push_back(next);
                        next += 1;
                    }
                    2 => prop_assert_eq!(q.pop_front(), m.pop_front()),
                    _ => {
                        let i = if m.is_empty() { i } else { i % (m.len() + 1) };
                        prop_assert_eq!(q.remove(i), m.remove(i));
                    }
                }
                prop_assert_eq!(q.len(), m.len());
                prop_assert_eq!(q.front(), m.front());
                prop_assert_eq!(q.iter().collect::<Vec<_>>(), m.iter().copied().collect::<Vec<_>>());
                if !m.is_empty() {
                    prop_assert_eq!(q[m.len() - 1], m[m.len() - 1]);
                }
            }
        }
    }
}
