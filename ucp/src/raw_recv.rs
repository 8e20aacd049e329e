//! Receives and gets into memory the worker does not own (for a C API whose callers pass raw
//! buffers): the receive state holds a [`RecvBuf`], either a vector the worker owns or the
//! caller's memory, and the `unsafe` entry points below post receives and gets straight into
//! caller memory, so the data lands there without a copy through a vector.

use super::*;
use std::ops::{Deref, DerefMut};

/// Where a receive (or get) writes: a vector the worker owns and gives back in the
/// completion, or caller memory (`Raw`) that it writes in place and gives nothing back for.
pub(crate) enum RecvBuf {
    /// A vector owned by the request.
    Owned(Vec<u8>),
    /// Caller memory, valid and untouched by the caller until the request completes (see
    /// [`Worker::tag_recv_raw`]).
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
    unsafe fn raw(ptr: *mut u8, len: usize) -> Self {
        match NonNull::new(ptr).filter(|_| len > 0) {
            Some(ptr) => RecvBuf::Raw { ptr, len },
            None => RecvBuf::Owned(Vec::new()),
        }
    }

    /// The vector to give back in a completion (`None` for caller memory).
    pub(crate) fn into_vec(self) -> Option<Vec<u8>> {
        match self {
            RecvBuf::Owned(v) => Some(v),
            RecvBuf::Raw { .. } => None,
        }
    }
}

impl Deref for RecvBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            RecvBuf::Owned(v) => v,
            // SAFETY: the caller promised `len` valid bytes until completion (see `raw`).
            RecvBuf::Raw { ptr, len } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
        }
    }
}

impl DerefMut for RecvBuf {
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

impl Worker {
    /// Posts a receive for `tag` under `mask` straight into `len` bytes at `ptr`: the data
    /// lands there (truncated to `len`, with `Truncated` and the real length as
    /// [`Worker::tag_recv`]); the completion's `buf` is `None`.
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes, and the caller must neither read, write
    /// nor free that memory until the request completes (including by cancel), or until the
    /// worker is dropped. After a receive failed by a peer's failure during a rendezvous, that
    /// peer may still have written into the memory before it died.
    pub unsafe fn tag_recv_raw(
        &mut self,
        ptr: *mut u8,
        len: usize,
        tag: u64,
        mask: u64,
    ) -> Result<Op> {
        // SAFETY: forwarded contract.
        let op = self
            .st
            .tag_recv(unsafe { RecvBuf::raw(ptr, len) }, tag, mask)?;
        tag_offload::after_post(&mut self.ifaces, &mut self.st, &op);
        Ok(op)
    }

    /// Receives a message taken by a removing probe straight into `len` bytes at `ptr`.
    ///
    /// # Safety
    /// As [`Worker::tag_recv_raw`].
    pub unsafe fn tag_msg_recv_raw(
        &mut self,
        ptr: *mut u8,
        len: usize,
        msg: Message,
    ) -> Result<Op> {
        // SAFETY: forwarded contract.
        let key = self
            .st
            .new_recv(unsafe { RecvBuf::raw(ptr, len) }, msg.uid as u64, 0);
        self.st.recv_from_unexp(key, msg.uid);
        Ok(self.st.op_of(key))
    }

    /// Reads `len` bytes at `remote_addr` of the peer's mapping straight into `ptr`.
    ///
    /// # Safety
    /// As [`Worker::tag_recv_raw`].
    pub unsafe fn get_raw(
        &mut self,
        ep: EpHandle,
        ptr: *mut u8,
        len: usize,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        // SAFETY: forwarded contract.
        let buf = unsafe { RecvBuf::raw(ptr, len) };
        self.st.rma(idx, RmaDir::Get(buf), remote_addr, rkey)
    }

    /// Maps `len` bytes of caller memory at `ptr` for remote access (`ucp_mem_map` of existing
    /// memory), registered as [`Worker::mem_map_vec`] registers its vector.
    ///
    /// # Safety
    /// The memory must stay valid (not freed or unmapped) until the returned mapping is
    /// dropped; peers may read and write it at any time meanwhile.
    pub unsafe fn mem_map_raw(&mut self, ptr: *mut u8, len: usize) -> Result<MemMap> {
        let ptr = NonNull::new(ptr)
            .filter(|_| len > 0)
            .ok_or_else(|| Error::InvalidParam("cannot map an empty or null region".into()))?;
        let mut keys = Vec::new();
        // SAFETY: the caller keeps the memory valid while the MemMap lives, and the MemMap
        // drops the registrations first.
        unsafe { self.st.register_all(ptr, len, &mut keys) };
        MemMap::new(
            ptr,
            len,
            crate::rma::Backing::Raw,
            self.st.regions.clone(),
            keys,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recv_buf_views() {
        let mut mem = [0u8; 8];
        // SAFETY: a local array outliving the view.
        let mut b = unsafe { RecvBuf::raw(mem.as_mut_ptr(), 8) };
        b[2..4].copy_from_slice(&[7, 9]);
        assert_eq!(b.len(), 8);
        assert!(b.into_vec().is_none());
        assert_eq!(mem[2..4], [7, 9]);
        // SAFETY: zero length needs no memory.
        let e = unsafe { RecvBuf::raw(std::ptr::null_mut(), 0) };
        assert_eq!(e.into_vec(), Some(Vec::new()));
    }
}
