//! The interface's posted tag receives and the tag-matching state of a connection's tagged
//! eager message: what the interface, its connections and the receive path share, apart from
//! the tag operations themselves (those are in `tag.rs`).

use super::iov::Segs;
use super::wire::{TagHdr, TagRndvHdr, WireStatus};
use crate::ep::TagRecvId;
use crate::md::Iov;
use std::collections::VecDeque;
use ucs::{Error, Outcome, Result};

/// Most receives posted at once (`TagLimits::recv_max_outstanding`).
pub(crate) const MAX_POSTED: usize = 128;

/// A completion of a posted receive: `(ctx, tag, imm, length, result)`.
pub(crate) type TagDone = (TagRecvId, u64, u64, usize, Result<()>);

/// A receive posted with `tag_recv_zcopy`.
pub(crate) struct Posted {
    pub(crate) tag: u64,
    pub(crate) mask: u64,
    pub(crate) segs: Segs,
    pub(crate) ctx: TagRecvId,
}

/// Where a connection's tagged eager message goes. A matched posted receive waits in the
/// interface's [`TagState`] (preallocated: no allocation per message), so this stays small.
#[derive(Default)]
pub(crate) enum TagRx {
    /// No tagged eager message in progress.
    #[default]
    Idle,
    /// Into a posted receive.
    Posted {
        /// The receive's slot in [`TagState::matched`].
        slot: usize,
        hdr: TagHdr,
        total: usize,
    },
    /// Unexpected (into the staging buffer unless it arrived whole).
    Unexp { hdr: TagHdr },
}

/// The interface's posted receives and their completions.
pub(crate) struct TagState {
    posted: VecDeque<Posted>,
    /// Posted receives a tagged eager message matched, until it has arrived whole (they count
    /// against [`MAX_POSTED`] with the posted ones, so this never grows past its capacity).
    matched: slab::Slab<Posted>,
    pub(crate) done: VecDeque<TagDone>,
}

impl TagState {
    pub(crate) fn new() -> Self {
        TagState {
            posted: VecDeque::with_capacity(MAX_POSTED),
            matched: slab::Slab::with_capacity(MAX_POSTED),
            done: VecDeque::with_capacity(MAX_POSTED),
        }
    }

    /// Removes and gives the first posted receive matching `tag`.
    fn take_match(&mut self, tag: u64) -> Option<Posted> {
        let i = self
            .posted
            .iter()
            .position(|p| (p.tag ^ tag) & p.mask == 0)?;
        self.posted.remove(i)
    }

    /// Matches the start of a tagged eager message of `total` bytes.
    pub(crate) fn match_eager(&mut self, hdr: TagHdr, total: usize) -> TagRx {
        match self.take_match(hdr.tag) {
            Some(p) => TagRx::Posted {
                slot: self.matched.insert(p),
                hdr,
                total,
            },
            None => TagRx::Unexp { hdr },
        }
    }
    /// The matched receive in `slot`.
    pub(crate) fn matched(&self, slot: usize) -> Option<&Posted> {
        self.matched.get(slot)
    }
    /// Takes the matched receive in `slot` out (its message arrived, or the connection failed).
    pub(crate) fn take_matched(&mut self, slot: usize) -> Option<Posted> {
        self.matched.try_remove(slot)
    }

    /// Matches a tagged rendezvous (a request never matches).
    pub(crate) fn match_rndv(&mut self, h: &TagRndvHdr) -> Option<Posted> {
        if h.op_id == 0 {
            return None;
        }
        self.take_match(h.tag)
    }

    pub(crate) fn post(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        if self.posted.len() + self.matched.len() >= MAX_POSTED {
            return Ok(Outcome::NoResource);
        }
        let segs = Segs::new(iov)?;
        self.posted.push_back(Posted {
            tag,
            mask,
            segs,
            ctx,
        });
        Ok(Outcome::InProgress)
    }

    pub(crate) fn cancel(&mut self, ctx: TagRecvId, force: bool) -> Option<()> {
        let i = self.posted.iter().position(|p| p.ctx == ctx)?;
        let p = self.posted.remove(i)?;
        if !force {
            self.done
                .push_back((p.ctx, p.tag, 0, 0, Err(Error::Canceled)));
        }
        Some(())
    }
}

/// Result of a posted receive that asked for `want` bytes of a `length`-byte message.
pub(crate) fn rndv_result(status: WireStatus, want: usize, length: usize) -> Result<()> {
    match status {
        WireStatus::Ok if want < length => Err(Error::Truncated {
            len: length,
            capacity: want,
        }),
        WireStatus::Ok => Ok(()),
        WireStatus::RemoteAccess => Err(Error::RemoteAccess(
            "the sender refused the rendezvous data (canceled or unknown operation)".into(),
        )),
    }
}
