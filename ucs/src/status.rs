//! Outcomes and errors shared by the layers.
//!
//! A data operation either finishes at once ([`Outcome::Done`]), is under way and will report a
//! completion later ([`Outcome::InProgress`]), or cannot start now for lack of resources
//! ([`Outcome::NoResource`]): that is back-pressure, not a failure — queue the operation (for
//! example with an endpoint's pending queue) and retry when told. Real failures are [`Error`]s.

use std::io;

/// What a non-blocking operation did.
#[must_use = "an operation may not have started: check for NoResource"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<T = ()> {
    /// Finished; the value (if any) is here and no completion will be reported.
    Done(T),
    /// Started; its completion is reported later through the progress sink.
    InProgress,
    /// Not started: no send resources now. Queue it and retry when resources return.
    NoResource,
}

impl<T> Outcome<T> {
    /// True for [`Outcome::Done`].
    pub fn is_done(&self) -> bool {
        matches!(self, Outcome::Done(_))
    }
    /// True for [`Outcome::NoResource`].
    pub fn is_no_resource(&self) -> bool {
        matches!(self, Outcome::NoResource)
    }
    /// Drops the value of a `Done`.
    pub fn unit(self) -> Outcome<()> {
        match self {
            Outcome::Done(_) => Outcome::Done(()),
            Outcome::InProgress => Outcome::InProgress,
            Outcome::NoResource => Outcome::NoResource,
        }
    }
}

impl Outcome<()> {
    /// `Outcome::Done(())`, spelled short.
    pub const DONE: Outcome<()> = Outcome::Done(());
}

/// Errors of every rucx layer. Cheap to clone, so one failure can complete many requests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The operation or parameter combination is not supported by this transport or layer.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A caller-supplied argument is invalid; the text says which and why.
    #[error("invalid parameter: {0}")]
    InvalidParam(String),
    /// A message is longer than the operation's limit.
    #[error("message of {len} bytes exceeds this operation's limit of {max} bytes")]
    MessageTooLong {
        /// Length given.
        len: usize,
        /// Largest length accepted.
        max: usize,
    },
    /// No transport or device reaches the peer; the text says what was tried and why it failed.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The connection to the peer was reset or closed.
    #[error("connection reset: {0}")]
    ConnectionReset(String),
    /// A timer expired before the operation finished.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The peer process or its endpoint failed.
    #[error("peer failure: {0}")]
    PeerFailure(String),
    /// A remote memory access fell outside the remote key's region or was otherwise refused.
    #[error("remote access error: {0}")]
    RemoteAccess(String),
    /// A message was longer than the receive buffer.
    #[error("message truncated: {len} bytes did not fit a {capacity}-byte buffer")]
    Truncated {
        /// Real length of the message.
        len: usize,
        /// Size of the buffer it was received into.
        capacity: usize,
    },
    /// The operation was canceled.
    #[error("canceled")]
    Canceled,
    /// The resource is busy (for example: arming an event fd while events are pending).
    #[error("busy: {0}")]
    Busy(String),
    /// Bytes from a peer did not decode: the text says what was wrong.
    #[error("malformed wire data: {0}")]
    Wire(String),
    /// A named device does not exist or cannot be used.
    #[error("no such device: {0}")]
    NoDevice(String),
    /// A memory allocation or registration failed.
    #[error("out of memory: {0}")]
    NoMemory(String),
    /// A configuration variable has a bad value.
    #[error("configuration: {0}")]
    Config(String),
    /// An operating-system call failed.
    #[error("{context}: {kind:?}: {message}")]
    Io {
        /// What rucx was doing.
        context: String,
        /// The error kind.
        kind: io::ErrorKind,
        /// The OS message.
        message: String,
    },
}

impl Error {
    /// Wraps an OS error with what rucx was doing when it happened. A descriptor limit
    /// (`EMFILE`, `ENFILE`) is spelled out with the limit ([`crate::limits::fd::explain_io`]).
    pub fn io(context: impl Into<String>, err: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            kind: err.kind(),
            message: crate::limits::fd::explain_io(&err),
        }
    }
    /// Wraps the current `errno` with what rucx was doing.
    pub fn last_os(context: impl Into<String>) -> Self {
        Self::io(context, io::Error::last_os_error())
    }
}

/// Result with the shared [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_helpers() {
        assert!(Outcome::<u64>::Done(3).is_done());
        assert!(Outcome::<()>::NoResource.is_no_resource());
        assert_eq!(Outcome::Done(7u64).unit(), Outcome::DONE);
        assert_eq!(Outcome::<u64>::InProgress.unit(), Outcome::InProgress);
    }

    #[test]
    fn io_error_keeps_context() {
        let e = Error::io(
            "opening /dev/shm/x",
            io::Error::from_raw_os_error(libc::EACCES),
        );
        let text = e.to_string();
        assert!(text.contains("opening /dev/shm/x"), "{text}");
        assert!(text.contains("PermissionDenied"), "{text}");
    }
}
