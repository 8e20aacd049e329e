//! The stream family's request records, held in the worker core's request record as
//! `SendStage::Stream` and `ReqKind::StreamRecv` (the core knows the family, not its stages).

use crate::worker::req::RecvBuf;

/// How a stream send goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamSend {
    /// Going out in bcopy fragments of the AM lane (its first step may turn it zero-copy).
    Bcopy,
    /// Going out in zero-copy fragments from the sender's memory (its registration in
    /// `rndv.memh`, the fragments the transport has not completed counted in `rndv.inflight`).
    Zcopy,
}

impl StreamSend {
    /// A SYNC_ACK never names a stream send.
    #[inline]
    pub(crate) fn takes_sync_ack(self, _offset: usize) -> bool {
        false
    }
}

/// A stream receive: its buffer and how much of it is filled.
pub(crate) struct StreamRecv {
    pub(in crate::stream) buf: RecvBuf,
    pub(in crate::stream) filled: usize,
    /// Completes only when `buf` is full; otherwise as soon as it holds any byte.
    pub(in crate::stream) waitall: bool,
}

impl StreamRecv {
    /// A receive into `buf`, nothing filled yet.
    #[inline]
    pub(crate) fn new(buf: RecvBuf, waitall: bool) -> Self {
        StreamRecv {
            buf,
            filled: 0,
            waitall,
        }
    }

    /// True when dropping the receive would do nothing (its buffer is the caller's or was
    /// given back).
    #[inline(always)]
    pub(crate) fn owns_nothing(&self) -> bool {
        self.buf.owns_nothing()
    }

    /// What the receive's completion carries: its vector (`None` for caller memory), taken
    /// out, and the bytes filled.
    #[inline]
    pub(crate) fn take_result(&mut self) -> (Option<Vec<u8>>, usize) {
        (std::mem::take(&mut self.buf).into_vec(), self.filled)
    }

    /// Bytes it still waits for (with `waitall`, or not).
    #[inline]
    pub(in crate::stream) fn room(&self) -> usize {
        self.buf.len() - self.filled
    }

    /// Whether it is complete: full, or (without `waitall`) holding any byte.
    #[inline]
    pub(in crate::stream) fn satisfied(&self) -> bool {
        self.filled == self.buf.len() || (!self.waitall && self.filled > 0)
    }
}
