//! The rendezvous family's request stages (zero-copy sends, rendezvous and the user RMA
//! operations that reuse them), held in the worker core's request record as
//! `SendStage::Rndv` and `RecvStage::Rndv`.

/// Where a zero-copy or rendezvous send is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RndvSend {
    /// Sending eager fragments zero-copy from the caller's vector.
    EagerZcopy,
    /// RTS sent: waiting for the receiver's ATS (it got the data) or RTR (it wants a put).
    WaitRndv,
    /// Putting the data into the receiver's buffer (RTR scheme, or a user `put`).
    Put,
    /// All put: waiting for the lane's flush before ATP.
    WaitPutFlush,
    /// All put: the flush before ATP met back-pressure and is retried.
    PutFlushRetry,
    /// Sending the data as active-message fragments (the AM pipeline scheme).
    Pipeline,
}

impl RndvSend {
    /// A SYNC_ACK may name the send now: a synchronous zero-copy eager send whose first
    /// fragment left at `offset` > 0.
    #[inline]
    pub(crate) fn takes_sync_ack(self, offset: usize) -> bool {
        self == RndvSend::EagerZcopy && offset > 0
    }

    /// Waiting for the answer (ATS or RTR) to the RTS it sent.
    #[inline]
    pub(crate) fn waits_answer(self) -> bool {
        self == RndvSend::WaitRndv
    }
}

/// Where a rendezvous (or user `get`) receive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RndvRecv {
    /// Reading the sender's data (get_zcopy).
    Get,
    /// Waiting for the sender: its put and ATP, or its pipelined data.
    Wait,
}

impl RndvRecv {
    /// Waiting for the sender's data (its put and ATP, or its pipelined data).
    #[inline]
    pub(crate) fn waits_data(self) -> bool {
        self == RndvRecv::Wait
    }
}
