//! Software tag matching for a transport: the receives posted with `tag_recv_zcopy`, matched
//! in posting order as tagged messages arrive (a message takes the first receive whose tag
//! equals the message's under the receive's mask, as MPI orders them). Transport-neutral:
//! what a receive holds besides tag, mask and context (its buffer pieces, their keys) is the
//! transport's `T`. The queue keeps its capacity: nothing allocates per message.
//!
//! A receive the transport has matched but not finished (data still arriving: an RDMA READ,
//! a streamed payload) no longer sits here; the transport counts it with
//! [`PostedRecvs::is_full`]'s `in_flight` so posted plus in-flight receives stay within the
//! limit it advertises (`TagLimits::recv_max_outstanding`).

use crate::ep::TagRecvId;
use std::collections::VecDeque;
use ucs::{Error, Result};

/// A receive posted to a transport.
#[derive(Debug)]
pub struct Posted<T> {
    /// Tag to match.
    pub tag: u64,
    /// Bits of the tag that must match (`u64::MAX`: exact; 0: any tag).
    pub mask: u64,
    /// The caller's identity of the receive.
    pub ctx: TagRecvId,
    /// The transport's part: where the data goes.
    pub buf: T,
}

impl<T> Posted<T> {
    /// Whether a message with `tag` matches this receive.
    #[inline]
    pub fn matches(&self, tag: u64) -> bool {
        (self.tag ^ tag) & self.mask == 0
    }
}

/// The posted receives of one interface, in posting order.
#[derive(Debug)]
pub struct PostedRecvs<T> {
    q: VecDeque<Posted<T>>,
    max: usize,
}

impl<T> PostedRecvs<T> {
    /// An empty queue for at most `max` receives.
    pub fn new(max: usize) -> Self {
        PostedRecvs {
            q: VecDeque::with_capacity(max),
            max,
        }
    }
    /// Receives posted and not matched.
    pub fn len(&self) -> usize {
        self.q.len()
    }
    /// No receive is posted.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
    /// Whether another receive would exceed the limit, with `in_flight` matched receives of the
    /// transport still unfinished.
    pub fn is_full(&self, in_flight: usize) -> bool {
        self.q.len() + in_flight >= self.max
    }
    /// Appends a receive. The caller checks [`PostedRecvs::is_full`] first (and answers
    /// `NoResource`); past the limit this gives `Err(Busy)` instead of growing.
    pub fn push(&mut self, p: Posted<T>) -> Result<()> {
        if self.q.len() >= self.max {
            return Err(Error::Busy(format!(
                "{} tag receives are posted already",
                self.max
            )));
        }
        self.q.push_back(p);
        Ok(())
    }
    /// Removes and gives the first receive that matches `tag`.
    #[inline]
    pub fn take_match(&mut self, tag: u64) -> Option<Posted<T>> {
        if self.q.is_empty() {
            return None;
        }
        let i = self.q.iter().position(|p| p.matches(tag))?;
        self.q.remove(i)
    }
    /// Removes and gives the receive `ctx` (a cancel).
    pub fn take_ctx(&mut self, ctx: TagRecvId) -> Option<Posted<T>> {
        let i = self.q.iter().position(|p| p.ctx == ctx)?;
        self.q.remove(i)
    }
}

/// The result of a receive of `capacity` bytes that got a `len`-byte message.
#[inline]
pub fn recv_result(len: usize, capacity: usize) -> Result<()> {
    if len > capacity {
        Err(Error::Truncated { len, capacity })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(tag: u64, mask: u64, ctx: u64) -> Posted<()> {
        Posted {
            tag,
            mask,
            ctx: TagRecvId(ctx),
            buf: (),
        }
    }

    #[test]
    fn first_match_in_posting_order_under_masks() {
        let mut q = PostedRecvs::new(8);
        q.push(p(0x55, u64::MAX, 1)).unwrap();
        q.push(p(0x07, 0xff, 2)).unwrap();
        q.push(p(0, 0, 3)).unwrap();
        assert_eq!(q.take_match(0x1207).unwrap().ctx, TagRecvId(2));
        assert_eq!(q.take_match(0x55).unwrap().ctx, TagRecvId(1));
        assert_eq!(q.take_match(0x55).unwrap().ctx, TagRecvId(3));
        assert!(q.take_match(0x55).is_none());
    }

    #[test]
    fn limit_counts_in_flight_receives_and_cancel_by_ctx() {
        let mut q = PostedRecvs::new(2);
        q.push(p(1, u64::MAX, 1)).unwrap();
        assert!(!q.is_full(0));
        assert!(q.is_full(1));
        q.push(p(2, u64::MAX, 2)).unwrap();
        assert!(q.push(p(3, u64::MAX, 3)).is_err());
        assert_eq!(q.take_ctx(TagRecvId(1)).unwrap().tag, 1);
        assert!(q.take_ctx(TagRecvId(1)).is_none());
        assert_eq!(q.len(), 1);
        assert!(!q.is_empty());
    }

    #[test]
    fn truncation_result() {
        assert!(recv_result(10, 10).is_ok());
        assert!(matches!(
            recv_result(11, 10),
            Err(Error::Truncated {
                len: 11,
                capacity: 10
            })
        ));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Post(u8, bool),
        Arrive(u8),
        Cancel(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..4, any::<bool>()).prop_map(|(t, wild)| Op::Post(t, wild)),
            (0u8..4).prop_map(Op::Arrive),
            (0u8..16).prop_map(Op::Cancel),
        ]
    }

    proptest! {
        /// Against a naive model: a list scanned front to back.
        #[test]
        fn matches_like_a_naive_list(ops in proptest::collection::vec(op(), 0..64)) {
            let mut q = PostedRecvs::new(16);
            let mut model: Vec<(u64, u64, u64)> = Vec::new();
            let mut next = 0u64;
            for o in ops {
                match o {
                    Op::Post(t, wild) => {
                        let mask = if wild { 0 } else { u64::MAX };
                        if !q.is_full(0) {
                            q.push(p(t as u64, mask, next)).unwrap();
                            model.push((t as u64, mask, next));
                            next += 1;
                        }
                    }
                    Op::Arrive(t) => {
                        let got = q.take_match(t as u64).map(|x| x.ctx.0);
                        let want = model
                            .iter()
                            .position(|m| (m.0 ^ t as u64) & m.1 == 0)
                            .map(|i| model.remove(i).2);
                        prop_assert_eq!(got, want);
                    }
                    Op::Cancel(c) => {
                        let got = q.take_ctx(TagRecvId(c as u64)).map(|x| x.ctx.0);
                        let want = model
                            .iter()
                            .position(|m| m.2 == c as u64)
                            .map(|i| model.remove(i).2);
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(q.len(), model.len());
            }
        }
    }
}
