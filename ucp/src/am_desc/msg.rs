//! An active message as a descriptor handler gets it, and the handler's type.

use crate::worker::api_types::EpHandle;

/// An active message as a descriptor handler gets it.
pub enum AmMsg<'a> {
    /// An eager message: its user header and its data, borrowed from the receive buffer they
    /// arrived in for the handler's call only (a handler copies what it keeps).
    Eager {
        /// The user header.
        header: &'a [u8],
        /// The data.
        data: &'a [u8],
    },
    /// A message sent by rendezvous: its user header (borrowed for the call) and a descriptor
    /// of its data, still at the sender.
    Rndv {
        /// The user header.
        header: &'a [u8],
        /// The data's descriptor.
        data: AmRndv,
    },
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
pub type AmDescHandler = Box<dyn FnMut(EpHandle, AmMsg<'_>)>;
