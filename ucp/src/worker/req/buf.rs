//! The buffers a request reads and writes: what a send's caller hands over ([`SendData`]),
//! what a send request reads ([`SendBuf`]) and where a receive writes ([`RecvBuf`]): a vector
//! the worker owns, or caller memory it reads or writes in place.

use crate::request::{Completion, Op};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

pub(crate) enum SendData<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
    /// Caller memory that stays valid and unchanged until the send completes (see
    /// `Worker::tag_send_raw`): a request reads it in place instead of copying it.
    Raw(&'a [u8]),
}

impl SendData<'_> {
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            SendData::Borrowed(b) | SendData::Raw(b) => b,
            SendData::Owned(v) => v,
        }
    }

    /// The result of a send of this data that finished at once (no request): an owned vector
    /// goes back to the caller in its completion.
    #[inline(always)]
    pub(crate) fn sent_at_once(self, tag: u64) -> Op {
        let buf = match self {
            SendData::Owned(v) => Some(v),
            SendData::Borrowed(_) | SendData::Raw(_) => None,
        };
        Op::Done(Completion {
            buf,
            tag,
            ..Completion::ok()
        })
    }
}

/// Where a receive (or get) writes: a vector the worker owns and gives back in the
/// completion, or caller memory (`Raw`) that it writes in place and gives nothing back for.
pub(crate) enum RecvBuf {
    /// A vector owned by the request.
    Owned(Vec<u8>),
    /// Caller memory, valid and untouched by the caller until the request completes (see
    /// [`Worker::tag_recv_raw`](crate::Worker::tag_recv_raw)).
    Raw {
        /// Start.
        ptr: NonNull<u8>,
        /// Capacity in bytes.
        len: usize,
    },
}

impl Default for RecvBuf {
    fn default() -> Self {
        RecvBuf::Owned(Vec::new())
    }
}

impl From<Vec<u8>> for RecvBuf {
    fn from(v: Vec<u8>) -> Self {
        RecvBuf::Owned(v)
    }
}

impl RecvBuf {
    /// Caller memory; a zero-length region needs no valid pointer.
    ///
    /// # Safety
    /// `ptr` valid for writes of `len` bytes until the request completes.
    #[inline(always)]
    pub(crate) unsafe fn raw(ptr: *mut u8, len: usize) -> Self {
        match NonNull::new(ptr).filter(|_| len > 0) {
            Some(ptr) => RecvBuf::Raw { ptr, len },
            None => RecvBuf::Owned(Vec::new()),
        }
    }

    /// True when dropping the buffer would do nothing (caller memory, or a vector given back).
    #[inline(always)]
    pub(crate) fn owns_nothing(&self) -> bool {
        match self {
            RecvBuf::Owned(v) => v.capacity() == 0,
            RecvBuf::Raw { .. } => true,
        }
    }

    /// The vector to give back in a completion (`None` for caller memory).
    #[inline]
    pub(crate) fn into_vec(self) -> Option<Vec<u8>> {
        match self {
            RecvBuf::Owned(v) => Some(v),
            RecvBuf::Raw { .. } => None,
        }
    }
}

impl Deref for RecvBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            RecvBuf::Owned(v) => v,
            // SAFETY: the caller promised `len` valid bytes until completion (see `raw`).
            RecvBuf::Raw { ptr, len } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
        }
    }
}

impl DerefMut for RecvBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            RecvBuf::Owned(v) => v,
            // SAFETY: as in `deref`; the caller does not access the memory meanwhile.
            RecvBuf::Raw { ptr, len } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
        }
    }
}

/// What a send reads: a vector the request owns, or caller memory (`Raw`) valid and unchanged
/// until the request completes (see [`Worker::tag_send_raw`](crate::Worker::tag_send_raw)).
pub(crate) enum SendBuf {
    /// A vector owned by the request.
    Owned(Vec<u8>),
    /// Caller memory.
    Raw {
        /// Start.
        ptr: NonNull<u8>,
        /// Length in bytes.
        len: usize,
    },
}

impl Default for SendBuf {
    fn default() -> Self {
        SendBuf::Owned(Vec::new())
    }
}

impl From<Vec<u8>> for SendBuf {
    fn from(v: Vec<u8>) -> Self {
        SendBuf::Owned(v)
    }
}

impl SendBuf {
    /// Caller memory behind `b`, which the caller keeps valid and unchanged until the request
    /// completes (the contract of [`Worker::tag_send_raw`](crate::Worker::tag_send_raw), the only
    /// maker of `SendData::Raw`).
    pub(crate) fn raw(b: &[u8]) -> Self {
        match NonNull::new(b.as_ptr() as *mut u8).filter(|_| !b.is_empty()) {
            Some(ptr) => SendBuf::Raw { ptr, len: b.len() },
            None => SendBuf::Owned(Vec::new()),
        }
    }

    /// The vector to give back or recycle when the request ends (`None` for caller memory).
    #[inline]
    pub(crate) fn into_vec(self) -> Option<Vec<u8>> {
        match self {
            SendBuf::Owned(v) => Some(v),
            SendBuf::Raw { .. } => None,
        }
    }

    /// Replaces the contents with a copy of `src` (reusing an owned vector).
    pub(crate) fn copy_from(&mut self, src: &[u8]) {
        match self {
            SendBuf::Owned(v) => {
                v.clear();
                v.extend_from_slice(src);
            }
            SendBuf::Raw { .. } => *self = SendBuf::Owned(src.to_vec()),
        }
    }
}

impl Deref for SendBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            SendBuf::Owned(v) => v,
            // SAFETY: the caller keeps `len` bytes valid until completion (see `raw`).
            SendBuf::Raw { ptr, len } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
        }
    }
}

impl DerefMut for SendBuf {
    /// Mutable access is only used for the address given to a memory registration (the bytes
    /// are never written through it).
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            SendBuf::Owned(v) => v,
            // SAFETY: as in `deref`; the send path only takes the pointer to register it.
            SendBuf::Raw { ptr, len } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
        }
    }
}
