//! The public types of the worker's API that the worker core and the protocol families also
//! hold: endpoint handles, handler and callback types, protocol counters.

use crate::request::Completion;
use ucs::Error;

/// An endpoint of a worker: a handle valid with the worker that created it only (it carries that
/// worker's id; any other worker answers it with `InvalidParam`).
///
/// `repr(C, align(16))`: a copy is one 16-byte move, so every field read back from a copy the
/// compiler spilled to the stack is served from that one store. Packed in 12 bytes, a spilled
/// copy was stored as 8 bytes and 4 and the send's 8-byte read of index and generation
/// straddled the two: it waited for every earlier store to reach the cache, the previous
/// message's stores into a peer's shared-memory FIFO included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(16))]
pub struct EpHandle {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
    /// The owning worker's id ([`Worker::id`](crate::Worker::id)).
    pub(crate) wid: u32,
}

/// A user active-message handler: gets the sending endpoint, the user header and the data, which
/// it owns (keep it as long as needed; [`Worker::am_data_release`](crate::Worker::am_data_release)
/// recycles it).
pub type AmHandler = Box<dyn FnMut(EpHandle, &[u8], Vec<u8>)>;

/// An endpoint error handler: called from `progress()` once, when the endpoint fails.
pub type ErrHandler = Box<dyn FnMut(EpHandle, &Error)>;

/// Counters of the protocols a worker used (for tests and debugging).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProtoStats {
    /// Single-fragment eager messages sent.
    pub eager_single: u64,
    /// Multi-fragment eager messages sent.
    pub eager_multi: u64,
    /// Eager messages sent zero-copy from the caller's vector.
    pub eager_zcopy: u64,
    /// Stream sends that went out in zero-copy fragments (a lane whose zero-copy messages are
    /// longer than its bcopy ones, such as tcp's).
    pub stream_zcopy: u64,
    /// Rendezvous requests (RTS) sent.
    pub rndv_rts: u64,
    /// Rendezvous received with get_zcopy.
    pub rndv_get: u64,
    /// Of those, read from a key that a lane other than the RMA lane maps in place (a
    /// sender's shared segment read by the shared-memory lane: one copy, no system call).
    pub rndv_get_mapped: u64,
    /// Rendezvous received by asking for put_zcopy.
    pub rndv_put: u64,
    /// Rendezvous received over the AM pipeline.
    pub rndv_am: u64,
    /// Endpoints failed.
    pub ep_failures: u64,
    /// Endpoints whose AM lane moved to a connect-to-endpoint lane (rc_verbs) after wire-up.
    pub am_lane_switches: u64,
    /// Messages that arrived on a peer's new AM lane before its lane-switch marker and were
    /// held until it (see [`crate::wireup::AmSwitchGate`]).
    pub am_switch_held: u64,
    /// Messages that named a request their sender may not touch (unknown, finished, another
    /// endpoint's, or of the wrong kind or stage): each failed its sender's endpoint and left
    /// the request named alone.
    pub forged_ids: u64,
    /// Messages received through the general path: every kind but whole eager messages,
    /// atomic requests and replies, eager user active messages and stream bytes, and those
    /// too from an endpoint the fast paths do not take (unknown, failed, or on its new AM
    /// lane before the lane-switch marker).
    pub rx_general: u64,
    /// Messages that arrived for an endpoint that had failed because its peer went away and
    /// were still delivered (complete tag messages the peer wrote before it went).
    pub late_delivered: u64,
    /// Messages that arrived for a failed endpoint and were dropped (each logged).
    pub late_dropped: u64,
    /// Unexpected messages whose endpoint failed or closed before they could complete
    /// (incomplete, or rendezvous): kept, and the receive that matches one fails.
    pub unexp_lost: u64,
}

/// A completion callback set with
/// [`Worker::request_set_callback`](crate::Worker::request_set_callback).
pub type RequestCallback = Box<dyn FnOnce(Completion)>;

/// What [`Worker::set_completion_hook`](crate::Worker::set_completion_hook) keeps: called with a
/// hook request's token and result.
pub type CompletionHook = Box<dyn FnMut(u64, &Completion)>;

/// A hook receive (tag: a whole eager message; stream: the bytes it waited for) that finished
/// into the client's memory without error: what [`Worker::pop_recv_ok`](crate::Worker::pop_recv_ok) gives instead of
/// a call of the completion hook once [`Worker::queue_recv_ok`](crate::Worker::queue_recv_ok)
/// is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvOk {
    /// The hook request's token.
    pub token: u64,
    /// The message's length (all of it is in the buffer).
    pub len: usize,
    /// The sender's tag (0 for a stream receive).
    pub tag: u64,
}

/// The [`RecvOk`] records waiting for the client, oldest first: a vector read from `head`,
/// emptied when the last is taken (the client drains it after each progress call), so a push
/// is a vector push and a take one load and an index step, without a ring's wrap arithmetic.
#[derive(Debug, Default)]
pub(crate) struct RecvOkQueue {
    items: Vec<RecvOk>,
    head: usize,
}

impl RecvOkQueue {
    /// An empty queue with room for `n` records.
    pub(crate) fn with_capacity(n: usize) -> Self {
        RecvOkQueue {
            items: Vec::with_capacity(n),
            head: 0,
        }
    }

    /// Queues `r` behind the others.
    #[inline(always)]
    pub(crate) fn push(&mut self, r: RecvOk) {
        self.items.push(r);
    }

    /// Takes the oldest record.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<RecvOk> {
        let r = *self.items.get(self.head)?;
        self.head += 1;
        if self.head == self.items.len() {
            self.items.clear();
            self.head = 0;
        }
        Some(r)
    }

    /// Nothing is queued.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Operand size of an atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmoSize {
    /// 32 bits.
    U32,
    /// 64 bits.
    U64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recv_ok_queue_gives_records_in_order_while_pushed_during_the_drain() {
        let r = |token| RecvOk {
            token,
            len: 8,
            tag: 1,
        };
        let mut q = RecvOkQueue::with_capacity(2);
        assert!(q.is_empty() && q.pop().is_none());
        q.push(r(1));
        q.push(r(2));
        assert_eq!(q.pop(), Some(r(1)));
        // A callback that progresses the worker queues more while the client drains.
        q.push(r(3));
        assert!(!q.is_empty());
        assert_eq!(q.pop(), Some(r(2)));
        assert_eq!(q.pop(), Some(r(3)));
        assert!(q.is_empty() && q.pop().is_none());
        q.push(r(4));
        assert_eq!(q.pop(), Some(r(4)));
        assert!(q.is_empty());
    }
}
