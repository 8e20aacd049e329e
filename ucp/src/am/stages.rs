//! The user active-message family's send stages, held in the worker core's request record as
//! `SendStage::Am` (the core knows the family, not its stages).

/// Where a user active-message send that did not go out at once is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AmSend {
    /// An eager message queued behind back-pressure or earlier sends: `head` is what follows
    /// the sender's uuid on the wire before the data (the `UserAmHdr` word, then the user
    /// header), built once when the message was first tried and sent as it is (a buffer of
    /// the worker's pool, given back when the message has gone out).
    Eager { head: Vec<u8> },
    /// A message going by rendezvous whose RTS (AM_RTS, carrying its id and user header from
    /// the request's `rndv.am`) has not gone out yet; then it is a rendezvous send.
    Rts,
}

impl AmSend {
    /// A SYNC_ACK never names an active-message send.
    #[inline]
    pub(crate) fn takes_sync_ack(&self, _offset: usize) -> bool {
        false
    }
}
