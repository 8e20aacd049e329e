//! What the atomics family keeps per worker.

/// What the atomics family keeps per worker (the worker's `State::amo`): counts of the
/// atomics started since creation, by how.
#[derive(Default)]
pub(crate) struct AmoState {
    /// Through the transport (or straight on mapped memory).
    hw: u64,
    /// Emulated over active messages (ATOMIC_REQ).
    emulated: u64,
}

impl AmoState {
    /// Counts an atomic done by the transport or straight on mapped memory.
    #[inline]
    pub(crate) fn started_hw(&mut self) {
        self.hw += 1;
    }

    /// Counts an atomic emulated over active messages.
    #[inline]
    pub(crate) fn started_emulated(&mut self) {
        self.emulated += 1;
    }

    /// The counts: (through the transport, emulated).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.hw, self.emulated)
    }
}
