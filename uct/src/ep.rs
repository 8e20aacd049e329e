//! Endpoints: the data operations of a transport (`uct_ep_*`).
//!
//! Every data operation returns quickly and never blocks:
//! - `Ok(Outcome::Done(_))`: finished, no completion will follow;
//! - `Ok(Outcome::InProgress)`: started; the completion with the caller's [`CompletionId`] is
//!   delivered later through [`crate::EventSink::completion`] during progress;
//! - `Ok(Outcome::NoResource)`: not started (back-pressure); queue it with
//!   [`Endpoint::pending_add`] and retry when [`crate::EventSink::pending`] says so;
//! - `Err(_)`: failed (bad argument, unsupported, peer failure…).

use crate::md::{Iov, RemoteKey};
use ucs::{Error, Outcome, Result};

/// Declares a caller-chosen 64-bit identifier as its own type, so one kind of id cannot be passed
/// where another is expected. The wrapper is free: `#[repr(transparent)]` over a `u64`.
macro_rules! caller_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u64);

        impl $name {
            /// The caller's raw value.
            #[inline(always)]
            pub const fn get(self) -> u64 {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl From<u64> for $name {
            #[inline(always)]
            fn from(v: u64) -> Self {
                Self(v)
            }
        }

        impl From<$name> for u64 {
            #[inline(always)]
            fn from(v: $name) -> u64 {
                v.0
            }
        }
    };
}

caller_id!(
    /// Caller-chosen value that identifies an operation's completion.
    CompletionId
);
caller_id!(
    /// Caller-chosen value that identifies a queued pending request.
    PendingId
);
caller_id!(
    /// Caller-chosen value that identifies a receive posted with `tag_recv_zcopy`.
    TagRecvId
);
/// Number of active-message ids; valid ids are `0..AM_ID_MAX`.
pub const AM_ID_MAX: u8 = 32;

/// An endpoint's identity inside its interface, used to report endpoint errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpId(pub u32);

/// A remote atomic operation (swap is fetch-only; compare-and-swap has its own calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `*p += v`.
    Add,
    /// `*p &= v`.
    And,
    /// `*p |= v`.
    Or,
    /// `*p ^= v`.
    Xor,
    /// `*p = v` (fetch only).
    Swap,
}

impl AtomicOp {
    /// The capability flag of this operation.
    pub fn flag(self) -> crate::caps::AtomicOps {
        use crate::caps::AtomicOps as F;
        match self {
            AtomicOp::Add => F::ADD,
            AtomicOp::And => F::AND,
            AtomicOp::Or => F::OR,
            AtomicOp::Xor => F::XOR,
            AtomicOp::Swap => F::SWAP,
        }
    }
    /// Applies the operation to a 64-bit value (for emulation and reference models).
    pub fn apply64(self, old: u64, v: u64) -> u64 {
        match self {
            AtomicOp::Add => old.wrapping_add(v),
            AtomicOp::And => old & v,
            AtomicOp::Or => old | v,
            AtomicOp::Xor => old ^ v,
            AtomicOp::Swap => v,
        }
    }
    /// Applies the operation to a 32-bit value.
    pub fn apply32(self, old: u32, v: u32) -> u32 {
        self.apply64(old as u64, v as u64) as u32
    }
}

/// Checks an active-message id.
#[inline]
pub fn check_am_id(id: u8) -> Result<()> {
    if id < AM_ID_MAX {
        Ok(())
    } else {
        Err(bad_am_id(id))
    }
}

#[cold]
#[inline(never)]
fn bad_am_id(id: u8) -> Error {
    Error::InvalidParam(format!(
        "active message id {id} is out of range 0..{AM_ID_MAX}"
    ))
}

/// Checks a length against a limit.
#[inline]
pub fn check_len(len: usize, max: usize) -> Result<()> {
    if len <= max {
        Ok(())
    } else {
        Err(Error::MessageTooLong { len, max })
    }
}

fn unsupported<T>(what: &str) -> Result<T> {
    Err(Error::Unsupported(format!(
        "{what} is not supported by this transport"
    )))
}

/// An endpoint: a one-way connection to a peer interface or endpoint.
///
/// Methods with a default body return [`Error::Unsupported`]; a transport overrides exactly the
/// operations its capability flags announce.
pub trait Endpoint {
    /// This endpoint's id inside its interface.
    fn id(&self) -> EpId;

    /// Sends an active message of an 8-byte header and a payload, inline. The receiver sees
    /// `header.to_le_bytes()` followed by `payload`. Limit: `8 + payload.len() <= am.max_short`.
    fn am_short(&mut self, id: u8, header: u64, payload: &[u8]) -> Result<Outcome> {
        let _ = (id, header, payload);
        unsupported("am_short")
    }
    /// Sends an active message of two 8-byte header words and a payload, inline. The receiver
    /// sees `h0.to_le_bytes()`, `h1.to_le_bytes()`, then `payload`. Limit:
    /// `16 + payload.len() <= am.max_short`. By default the same as [`Endpoint::am_short_iov`]
    /// of the three pieces; a transport overrides it to write the words without a gather loop.
    fn am_short2(&mut self, id: u8, h0: u64, h1: u64, payload: &[u8]) -> Result<Outcome> {
        self.am_short_iov(id, &[&h0.to_le_bytes(), &h1.to_le_bytes(), payload])
    }
    /// Sends an active message gathered from several buffers, inline. Limit: total ≤ am.max_short.
    fn am_short_iov(&mut self, id: u8, iov: &[&[u8]]) -> Result<Outcome> {
        let _ = (id, iov);
        unsupported("am_short_iov")
    }
    /// Sends an active message whose payload `pack` writes straight into the transport's buffer
    /// (of `am.max_bcopy` bytes); `pack` returns the length written. Gives that length.
    fn am_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        id: u8,
        pack: F,
    ) -> Result<Outcome<usize>> {
        let _ = (id, pack);
        unsupported("am_bcopy")
    }
    /// Sends an active message of `header` (copied) plus registered memory sent without copying
    /// where the transport can. The receiver sees `header` followed by the iov's bytes.
    fn am_zcopy(
        &mut self,
        id: u8,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        let _ = (id, header, iov, comp);
        unsupported("am_zcopy")
    }

    /// Writes a small buffer to remote memory.
    fn put_short(&mut self, data: &[u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        let _ = (data, remote_addr, rkey);
        unsupported("put_short")
    }
    /// Writes what `pack` produces (at most `put.max_bcopy` bytes) to remote memory.
    fn put_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        pack: F,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome<usize>> {
        let _ = (pack, remote_addr, rkey);
        unsupported("put_bcopy")
    }
    /// Writes registered memory to remote memory.
    fn put_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome> {
        let _ = (iov, remote_addr, rkey, comp);
        unsupported("put_zcopy")
    }

    /// Reads remote memory into `buf`; only `Done` or `NoResource` (never `InProgress`).
    fn get_short(&mut self, buf: &mut [u8], remote_addr: u64, rkey: &RemoteKey) -> Result<Outcome> {
        let _ = (buf, remote_addr, rkey);
        unsupported("get_short")
    }
    /// Reads `len` bytes of remote memory. On `Done`, `unpack` has been called with the data; on
    /// `InProgress` the data arrive later through [`crate::EventSink::get_bcopy_data`] with
    /// `comp`, followed by the completion.
    fn get_bcopy(
        &mut self,
        len: usize,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
        unpack: &mut dyn FnMut(&[u8]),
    ) -> Result<Outcome> {
        let _ = (len, remote_addr, rkey, comp, unpack);
        unsupported("get_bcopy")
    }
    /// Reads remote memory into registered memory.
    fn get_zcopy(
        &mut self,
        iov: &[Iov<'_>],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome> {
        let _ = (iov, remote_addr, rkey, comp);
        unsupported("get_zcopy")
    }
    /// Unpacks a remote key that this endpoint's peer packed, for RMA on this endpoint. A
    /// transport that maps the peer's memory (posix, sysv) keeps the mappings with the endpoint
    /// for later keys to the same memory, checks that the key names its peer's memory, and
    /// drops them with the endpoint (or at its first use after its peer failed: an error).
    /// `Ok(None)`: the transport keeps nothing per endpoint; unpack with the memory domain's
    /// `rkey_unpack`.
    fn peer_rkey_unpack(&mut self, packed: &[u8]) -> Result<Option<RemoteKey>> {
        let _ = packed;
        Ok(None)
    }

    /// 32-bit atomic without result (add/and/or/xor).
    fn atomic32_post(
        &mut self,
        op: AtomicOp,
        value: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        let _ = (op, value, remote_addr, rkey);
        unsupported("atomic32_post")
    }
    /// 64-bit atomic without result (add/and/or/xor).
    fn atomic64_post(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Outcome> {
        let _ = (op, value, remote_addr, rkey);
        unsupported("atomic64_post")
    }
    /// 32-bit fetching atomic; the old value comes in `Done` or in the completion's result.
    fn atomic32_fetch(
        &mut self,
        op: AtomicOp,
        value: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u32>> {
        let _ = (op, value, remote_addr, rkey, comp);
        unsupported("atomic32_fetch")
    }
    /// 64-bit fetching atomic; the old value comes in `Done` or in the completion's result.
    fn atomic64_fetch(
        &mut self,
        op: AtomicOp,
        value: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        let _ = (op, value, remote_addr, rkey, comp);
        unsupported("atomic64_fetch")
    }
    /// 32-bit compare-and-swap; gives the old value.
    fn atomic_cswap32(
        &mut self,
        compare: u32,
        swap: u32,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u32>> {
        let _ = (compare, swap, remote_addr, rkey, comp);
        unsupported("atomic_cswap32")
    }
    /// 64-bit compare-and-swap; gives the old value.
    fn atomic_cswap64(
        &mut self,
        compare: u64,
        swap: u64,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        let _ = (compare, swap, remote_addr, rkey, comp);
        unsupported("atomic_cswap64")
    }

    /// Completes when every operation issued on this endpoint before it has completed remotely.
    fn flush(&mut self, comp: CompletionId) -> Result<Outcome>;
    /// Orders operations issued after it behind those issued before it.
    fn fence(&mut self) -> Result<()>;

    /// Checks that the peer is still reachable, without needing the peer's application to do
    /// anything (UCX's `uct_ep_check`). A transport that does not notice a dead peer by itself
    /// posts what makes a failure visible (rc_verbs: a small RDMA write the peer's adapter
    /// acknowledges); the failure then arrives through [`crate::EventSink::ep_error`]. The
    /// default does nothing: shared memory and cma watch the peer process (a pidfd), tcp has
    /// the kernel's connection state and keepalive probes, self has no peer to lose.
    fn check(&mut self) -> Result<()> {
        Ok(())
    }

    /// Queues a pending request to be retried when send resources return. Gives
    /// [`Error::Busy`] if resources are available right now (retry at once instead).
    fn pending_add(&mut self, req: PendingId) -> Result<()>;
    /// Removes every queued pending request, passing each to `f`.
    fn pending_purge(&mut self, f: &mut dyn FnMut(PendingId));

    /// This endpoint's address, for a peer's `connect_to_ep` (CONNECT_TO_EP).
    fn ep_address(&self) -> Result<Vec<u8>> {
        unsupported("ep_address (connect-to-ep)")
    }
    /// Connects to a peer endpoint's address (CONNECT_TO_EP).
    fn connect_to_ep(&mut self, dev_addr: &[u8], ep_addr: &[u8]) -> Result<()> {
        let _ = (dev_addr, ep_addr);
        unsupported("connect_to_ep")
    }

    /// Tag offload: sends a small tagged eager message inline.
    fn tag_eager_short(&mut self, tag: u64, data: &[u8]) -> Result<Outcome> {
        let _ = (tag, data);
        unsupported("tag_eager_short")
    }
    /// Tag offload: sends a tagged eager message packed by `pack`, with 64-bit immediate data.
    fn tag_eager_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        tag: u64,
        imm: u64,
        pack: F,
    ) -> Result<Outcome<usize>> {
        let _ = (tag, imm, pack);
        unsupported("tag_eager_bcopy")
    }
    /// Tag offload: sends a tagged eager message from registered memory.
    fn tag_eager_zcopy(
        &mut self,
        tag: u64,
        imm: u64,
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        let _ = (tag, imm, iov, comp);
        unsupported("tag_eager_zcopy")
    }
    /// Tag offload: starts a rendezvous of registered memory; the receiver pulls it into its
    /// posted buffer, or gets `header` as unexpected. Gives an operation id for `tag_rndv_cancel`,
    /// or `InProgress` when nothing was sent because the transport cannot serve this one (the
    /// receiver could not reach the memory): the caller then uses its ordinary rendezvous.
    fn tag_rndv_zcopy(
        &mut self,
        tag: u64,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        let _ = (tag, header, iov, comp);
        unsupported("tag_rndv_zcopy")
    }
    /// Tag offload: cancels a rendezvous started by `tag_rndv_zcopy` (its completion is not reported).
    fn tag_rndv_cancel(&mut self, op: u64) -> Result<()> {
        let _ = op;
        unsupported("tag_rndv_cancel")
    }
    /// Tag offload: sends a rendezvous request that always arrives as unexpected (software rndv).
    fn tag_rndv_request(&mut self, tag: u64, header: &[u8]) -> Result<Outcome> {
        let _ = (tag, header);
        unsupported("tag_rndv_request")
    }
}
