//! An active message as a descriptor handler gets it, and the handler's type.

use crate::worker::api_types::EpHandle;

/// An active message as a descriptor handler gets it.
pub struct AmMsg {
    /// The user header (`header_len` bytes), then for an eager message the data.
    pub buf: Vec<u8>,
    /// Length of the user header at the start of `buf`.
    pub header_len: usize,
    /// For a message sent by rendezvous: its data, still at the sender (boxed: an eager
    /// message, the common one, then moves as five words).
    pub rndv: Option<Box<AmRndv>>,
}

/// The data of an active message sent by rendezvous, still in the sender's memory.
#[derive(Debug)]
pub struct AmRndv {
    /// The endpoint the message came from.
    pub ep: EpHandle,
    pub(super) sreq: u64,
    pub(super) len: usize,
    pub(super) addr: u64,
    pub(super) tl: String,
    pub(super) rkey: Vec<u8>,
}

impl AmRndv {
    /// The data's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a message without data.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A descriptor handler: gets the endpoint the message came from and the message.
pub type AmDescHandler = Box<dyn FnMut(EpHandle, AmMsg)>;
