//! What the atomics family keeps per worker.

/// What the atomics family keeps per worker (the worker's `State::amo`): counts of the
/// atomics started since creation, by how.
#[derive(Default)]
pub(crate) struct AmoState {
    /// Through the transport (or straight on mapped memory).
    pub(crate) hw: u64,
    /// Emulated over active messages (ATOMIC_REQ).
    pub(crate) emulated: u64,
}
