//! The tag family's request stages, held in the worker core's request record as
//! `SendStage::Tag` and `RecvStage::Tag` (the core knows the family, not its stages).

/// Where a tagged eager send (or an eager user active message) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TagSend {
    /// Sending its eager fragments (none sent yet at `offset` 0).
    Eager,
    /// All sent; a synchronous send waits for the receiver's SYNC_ACK.
    WaitAck,
}

impl TagSend {
    /// A SYNC_ACK may name the send now: it waits for one, or its first fragment (the one the
    /// receiver matches) left at `offset` > 0 while the rest still goes out.
    #[inline]
    pub(crate) fn takes_sync_ack(self, offset: usize) -> bool {
        match self {
            TagSend::WaitAck => true,
            TagSend::Eager => offset > 0,
        }
    }
}

/// Where a tag receive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TagRecv {
    /// Waiting in the matcher for a message.
    Posted,
    /// Matched to an eager message whose fragments are arriving.
    Eager,
}
