//! The tag-offload state of an rc_verbs interface: the posted receives, the READs of matched
//! rendezvous, the sender's outstanding rendezvous operations, and the reports and retries
//! progress owes. What the interface's shared state holds; the operations on it are in
//! `tag/mod.rs` (receiving side) and `tag/send.rs` (sending side).

use super::wire::{AckHdr, PutReqHdr};
use crate::ep::{CompletionId, TagRecvId};
use crate::md::{Iov, MemHandle};
use crate::rc_verbs::ffi::ibv_sge;
use crate::rc_verbs::mem_of;
use crate::tag_posted::{Posted, PostedRecvs};
use std::collections::VecDeque;
use ucs::{Error, Outcome, Result};

/// Most receives posted (and matched by a rendezvous not finished yet) at once.
pub const MAX_POSTED: usize = 128;
/// Largest number of pieces of a posted receive.
pub const RECV_MAX_IOV: usize = 4;
/// Most rendezvous operations outstanding per interface, as a sender.
pub const MAX_RNDV_OPS: usize = 4096;
/// Low bits of a rendezvous operation id that hold its slot plus one; the rest is a sequence
/// number, so an acknowledgement for a canceled operation whose slot was reused is ignored.
const OP_SLOT_BITS: u32 = 16;
const OP_SLOT_MASK: u64 = (1 << OP_SLOT_BITS) - 1;
const _: () = assert!(MAX_RNDV_OPS < OP_SLOT_MASK as usize);

/// Unexpected rendezvous announcements remembered per interface (the oldest is forgotten; a
/// forgotten one is read by one READ, as before).
pub const UNEXP_REMEMBERED: usize = 64;
/// Marks the slot of a split get (in `TxKind::TagRead` and `PutReqHdr::slot`).
pub(super) const GET_SLOT: u32 = 1 << 31;

/// An announcement that went up as unexpected.
#[derive(Clone, Copy, Debug)]
pub(super) struct Unexp {
    pub(super) key: usize,
    pub(super) gen: u16,
    pub(super) addr: u64,
    pub(super) rkey: u32,
    pub(super) length: u64,
    pub(super) op_id: u64,
}

/// A split get in flight.
pub(super) struct SplitGet {
    pub(super) comp: CompletionId,
    pub(super) op_id: u64,
    pub(super) key: usize,
    pub(super) gen: u16,
    /// READs of this get in flight: the head's, then the tail's when the sender could not
    /// write it.
    pub(super) reads_out: u8,
    /// The sender's report on the tail has not come yet.
    pub(super) report_due: bool,
    /// The tail, for reading it ourselves when the sender cannot write it.
    pub(super) tail: TailRead,
}

/// Where the tail of a split get is and goes.
#[derive(Clone, Copy, Debug)]
pub(super) struct TailRead {
    pub(super) local: u64,
    pub(super) lkey: u32,
    pub(super) remote: u64,
    pub(super) rkey: u32,
    pub(super) len: u32,
}

/// A completion of a posted receive: `(ctx, tag, imm, length, result)`.
pub(super) type TagDone = (TagRecvId, u64, u64, usize, Result<()>);

/// The buffer of a posted receive: its registered pieces, and clones of their handles so the
/// registrations outlive a READ into them.
pub(crate) struct RecvBuf {
    pub(super) n: usize,
    pub(super) sges: [ibv_sge; RECV_MAX_IOV],
    /// Remote key of the first piece (for the sender's write of a split rendezvous).
    pub(super) rkey0: u32,
    pub(super) _keep: [Option<MemHandle>; RECV_MAX_IOV],
}

impl RecvBuf {
    pub(super) fn new(iov: &[Iov<'_>], md_name: &str) -> Result<Self> {
        if iov.len() > RECV_MAX_IOV {
            return Err(Error::InvalidParam(format!(
                "a tag receive takes at most {RECV_MAX_IOV} pieces, not {}",
                iov.len()
            )));
        }
        let mut b = RecvBuf {
            n: iov.len(),
            sges: [ibv_sge::default(); RECV_MAX_IOV],
            rkey0: 0,
            _keep: Default::default(),
        };
        for (i, v) in iov.iter().enumerate() {
            let mem = mem_of(v.memh(), md_name)?;
            b.sges[i] = ibv_sge {
                addr: v.ptr() as u64,
                length: u32::try_from(v.len()).map_err(|_| {
                    Error::InvalidParam("a tag receive piece is longer than 4 GiB".into())
                })?,
                lkey: mem.lkey(),
            };
            if i == 0 {
                b.rkey0 = mem.rkey();
            }
            b._keep[i] = Some(v.memh().clone());
        }
        Ok(b)
    }

    pub(super) fn capacity(&self) -> usize {
        self.sges[..self.n].iter().map(|s| s.length as usize).sum()
    }

    /// Copies `src` into the pieces, in order, as far as they reach.
    pub(super) fn scatter(&self, src: &[u8]) {
        let mut at = 0;
        for s in &self.sges[..self.n] {
            if at == src.len() {
                break;
            }
            let k = (s.length as usize).min(src.len() - at);
            // SAFETY: the piece is writable for `s.length >= k` bytes (checked against its
            // registration when posted, kept alive by `_keep`); `src` is a separate buffer.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(at), s.addr as *mut u8, k) };
            at += k;
        }
    }

    /// The scatter entries covering the first `len` bytes; gives how many.
    pub(super) fn read_sges(&self, len: usize, out: &mut [ibv_sge; RECV_MAX_IOV]) -> usize {
        let mut left = len;
        let mut n = 0;
        for s in &self.sges[..self.n] {
            if left == 0 {
                break;
            }
            let k = (s.length as usize).min(left);
            if k == 0 {
                continue;
            }
            out[n] = ibv_sge {
                length: k as u32,
                ..*s
            };
            n += 1;
            left -= k;
        }
        n
    }
}

/// A matched rendezvous: the READ into a posted receive, posted or waiting for a send slot;
/// when split, the sender writes the last `put` bytes and the receive completes once the READ
/// has completed and the sender's [`super::wire::PutDoneHdr`] has come.
pub(super) struct Read {
    pub(super) ctx: TagRecvId,
    pub(super) tag: u64,
    pub(super) length: usize,
    pub(super) addr: u64,
    pub(super) rkey: u32,
    pub(super) op_id: u64,
    pub(super) key: usize,
    pub(super) gen: u16,
    pub(super) buf: RecvBuf,
    /// Bytes at the end that the sender writes (0: not split).
    pub(super) put: usize,
    /// Where the sender's half stands.
    pub(super) tail: Tail,
}

/// The sender's half of a matched rendezvous (its RDMA WRITE of the tail and the report that
/// follows it); the READ is the receiver's half. A split rendezvous starts `Awaited`; the
/// READ's completion and the sender's report then come in either order:
///
/// ```text
/// Awaited --READ completes--> AwaitedReadDone --report--> receive completes
///    |--report: written--> Settled --READ completes--> receive completes
///    `--report: failed---> Failed  --READ completes--> receive fails (RemoteAccess)
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Tail {
    /// Nothing owed by the sender: not split, or its write is reported done.
    Settled,
    /// The sender's report has not come; the READ is in flight or waits for a slot.
    Awaited,
    /// The sender's report has not come, and the READ has completed.
    AwaitedReadDone,
    /// The sender reported that it could not write.
    Failed,
}

impl Tail {
    /// The state of a rendezvous whose sender writes `put` bytes (0: not split).
    pub(super) fn new(put: usize) -> Self {
        if put > 0 {
            Tail::Awaited
        } else {
            Tail::Settled
        }
    }

    /// Whether the sender's report is still to come.
    pub(super) fn awaited(self) -> bool {
        matches!(self, Tail::Awaited | Tail::AwaitedReadDone)
    }
}

/// A sender's outstanding rendezvous.
pub(super) struct RndvOp {
    pub(super) id: u64,
    pub(super) comp: CompletionId,
    pub(super) key: usize,
    pub(super) gen: u16,
    /// The data (address, length, local key), for the tail a receiver asks us to write.
    pub(super) addr: u64,
    pub(super) len: u64,
    pub(super) lkey: u32,
    /// Keeps the data's registration while the receiver may read it.
    pub(super) _keep: MemHandle,
}

/// The interface's tag-offload state.
pub(crate) struct TagState {
    pub(super) posted: PostedRecvs<RecvBuf>,
    pub(super) reads: slab::Slab<Read>,
    /// READs that found no send slot, retried from progress.
    pub(super) reads_waiting: VecDeque<usize>,
    /// Acknowledgements that found no send slot or credit: `(endpoint, generation, ack)`.
    pub(super) acks_owed: VecDeque<(usize, u16, AckHdr)>,
    /// Write requests of split rendezvous (as a sender) that found no send slot or credit.
    pub(super) puts_owed: VecDeque<(usize, u16, PutReqHdr)>,
    /// Receive completions to report from progress (canceled receives, failed READs).
    pub(super) done: VecDeque<TagDone>,
    /// Sender completions to report from progress (rendezvous of failed endpoints).
    pub(super) comps: VecDeque<(CompletionId, Result<u64>)>,
    pub(super) ops: slab::Slab<RndvOp>,
    pub(super) op_seq: u64,
    /// Rendezvous announcements that went up as unexpected (see `get.rs`).
    pub(super) unexp: VecDeque<Unexp>,
    /// Split gets in flight (see `get.rs`).
    pub(super) gets: slab::Slab<SplitGet>,
    /// Split gets whose tail READ found no send slot, retried from progress.
    pub(super) gets_waiting: VecDeque<usize>,
    /// Gets split so far (for tests and diagnostics).
    pub(super) split_gets: u64,
}

impl TagState {
    pub(in crate::rc_verbs) fn new() -> Self {
        TagState {
            posted: PostedRecvs::new(MAX_POSTED),
            reads: slab::Slab::with_capacity(MAX_POSTED),
            reads_waiting: VecDeque::with_capacity(MAX_POSTED),
            acks_owed: VecDeque::with_capacity(MAX_POSTED),
            puts_owed: VecDeque::with_capacity(MAX_POSTED),
            done: VecDeque::with_capacity(MAX_POSTED),
            comps: VecDeque::with_capacity(64),
            ops: slab::Slab::with_capacity(256),
            op_seq: 0,
            unexp: VecDeque::with_capacity(UNEXP_REMEMBERED),
            gets: slab::Slab::with_capacity(UNEXP_REMEMBERED),
            gets_waiting: VecDeque::with_capacity(UNEXP_REMEMBERED),
            split_gets: 0,
        }
    }

    /// Whether progress has tag work to do (reports, retries).
    pub(in crate::rc_verbs) fn has_work(&self) -> bool {
        !self.done.is_empty()
            || !self.comps.is_empty()
            || !self.reads_waiting.is_empty()
            || !self.acks_owed.is_empty()
            || !self.puts_owed.is_empty()
            || !self.gets_waiting.is_empty()
    }

    /// `tag_recv_zcopy` (seam 1 of the module docs).
    pub(super) fn post(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
        md_name: &str,
    ) -> Result<Outcome> {
        let buf = RecvBuf::new(iov, md_name)?;
        if self.posted.is_full(self.reads.len()) {
            return Ok(Outcome::NoResource);
        }
        self.posted.push(Posted {
            tag,
            mask,
            ctx,
            buf,
        })?;
        Ok(Outcome::InProgress)
    }

    /// `tag_recv_cancel` (seam 1 of the module docs): `true` when a completion was queued.
    pub(super) fn cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<bool> {
        if let Some(p) = self.posted.take_ctx(ctx) {
            if !force {
                self.done
                    .push_back((p.ctx, p.tag, 0, 0, Err(Error::Canceled)));
            }
            return Ok(!force);
        }
        if self.reads.iter().any(|(_, r)| r.ctx == ctx) {
            return Err(Error::Busy(format!(
                "tag receive {ctx} already matched a rendezvous; it completes normally"
            )));
        }
        Err(Error::InvalidParam(format!(
            "no tag receive {ctx} is posted"
        )))
    }

    /// A new operation id for slot `slot`.
    pub(super) fn op_id(&mut self, slot: usize) -> u64 {
        self.op_seq = self.op_seq.wrapping_add(1);
        (self.op_seq << OP_SLOT_BITS) | (slot as u64 + 1)
    }

    /// The operation `id` of endpoint `key`/`gen`.
    pub(super) fn op(&self, id: u64, key: usize, gen: u16) -> Option<&RndvOp> {
        let slot = ((id & OP_SLOT_MASK) as usize).checked_sub(1)?;
        self.ops
            .get(slot)
            .filter(|o| o.id == id && o.key == key && o.gen == gen)
    }

    /// Takes the operation `id` of endpoint `key`/`gen` out of the table.
    pub(super) fn take_op(&mut self, id: u64, key: usize, gen: u16) -> Option<RndvOp> {
        let slot = ((id & OP_SLOT_MASK) as usize).checked_sub(1)?;
        let op = self.ops.get(slot)?;
        if op.id != id || op.key != key || op.gen != gen {
            return None;
        }
        Some(self.ops.remove(slot))
    }
}
