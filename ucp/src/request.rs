//! Requests: what a non-blocking ucp operation gives back.
//!
//! An operation either finishes at once ([`Op::Done`]) or gives a [`Request`] to test, wait on
//! or cancel through its worker. The worker owns everything an unfinished request needs — a
//! receive's buffer included — so dropping a `Request` can never let data land in freed memory:
//! at worst the worker keeps the buffer until the operation ends and then recycles the slot.

use ucs::Result;

/// A handle to an unfinished operation of one worker (test it with `Worker::request_test`,
/// finish it with `Worker::wait` or `Worker::request_take`).
#[must_use = "an unfinished operation: wait on it, take its result, or release it"]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Request {
    pub(crate) key: u32,
    pub(crate) gen: u32,
}

/// The result of a finished operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// Success, or the error that ended the operation.
    pub status: Result<()>,
    /// The buffer the operation owned: a receive's buffer (data in `buf[..len]`), or the vector a
    /// `*_vec` send took.
    pub buf: Option<Vec<u8>>,
    /// Real length of a received message (also on `Truncated`).
    pub len: usize,
    /// Tag of the received message.
    pub tag: u64,
    /// Fetched value of an atomic operation.
    pub value: u64,
}

impl Completion {
    pub(crate) fn ok() -> Self {
        Completion {
            status: Ok(()),
            buf: None,
            len: 0,
            tag: 0,
            value: 0,
        }
    }
}

/// What a non-blocking operation did.
#[must_use = "an operation may still be running: check for Pending"]
#[derive(Debug)]
pub enum Op {
    /// Finished at once.
    Done(Completion),
    /// Running; finish it through the worker.
    Pending(Request),
}

impl Op {
    /// True when finished at once.
    pub fn is_done(&self) -> bool {
        matches!(self, Op::Done(_))
    }
}
