//! What the tag family keeps of a message no receive has matched yet.

/// Largest whole eager message an unexpected entry keeps inline (no pooled buffer); the entry
/// is no larger for it than one of a rendezvous.
pub(crate) const UNEXP_INLINE: usize = 48;

/// What an unexpected message holds until a receive takes it.
pub(crate) enum UnexpKind {
    /// A whole eager message without acknowledgement, left in the transport's receive buffer
    /// (copied once, into the receive that takes it).
    Held(uct::HeldBuf),
    /// A whole eager message of `len` (at most [`UNEXP_INLINE`]) bytes, in `data[..len]`.
    Inline {
        len: u8,
        data: [u8; UNEXP_INLINE],
        sreq: u64,
    },
    /// An eager message of `total` bytes, or the fragments of it that arrived so far.
    Eager {
        data: Vec<u8>,
        total: usize,
        sreq: u64,
    },
    /// A message whose data can no longer come (its endpoint failed or was closed while it
    /// was incomplete, or a rendezvous whose data sat with the peer): `len` bytes announced;
    /// the receive that matches it fails with `err`.
    Lost { len: usize, err: ucs::Error },
    /// A rendezvous announcement.
    Rts {
        sreq: u64,
        len: usize,
        addr: u64,
        tl: String,
        rkey: Vec<u8>,
    },
}

pub(crate) struct Unexp {
    pub(crate) ep: usize,
    pub(crate) tag: u64,
    pub(crate) kind: UnexpKind,
    /// Multi-fragment message still being assembled (key in `assembling`).
    pub(crate) msg_key: Option<(u64, u64)>,
}

#[derive(Clone, Copy)]
pub(crate) enum Target {
    Unexp(usize),
    Req(usize),
}
