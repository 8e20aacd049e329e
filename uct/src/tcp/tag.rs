//! Tag offload for tcp: receives posted on the interface, matched as tagged frames arrive.
//!
//! - **Posted receives** (`tag_recv_zcopy`) wait in posting order in [`TagState`]. A tagged
//!   frame is matched (tag under the receive's mask) against them as soon as its sub-header is
//!   decoded, before its payload: the first posted receive that fits takes it.
//! - **Eager** (`TagEager`): a matched payload goes straight into the posted buffer. A payload
//!   above [`wire::TAG_WHOLE`] bytes is streamed: the bytes already in the connection's receive
//!   buffer are copied once, the rest is `recv`d directly into the posted buffer. An unmatched
//!   message goes to [`EventSink::tag_unexp_eager`] (from the receive buffer when it arrived
//!   whole, else from a per-connection staging buffer that is kept for reuse). A message larger
//!   than the posted buffer fills it and completes with [`Error::Truncated`].
//! - **Rendezvous** (`TagRndv`): a matched one makes the receiver send `TagGet`; the sender
//!   answers with a `GetResp` written from its buffer (zero-copy send), which the receiver
//!   `recv`s straight into the posted buffer; the sender's `tag_rndv_zcopy` completes when the
//!   kernel took the data, the receive when it landed. An unmatched one (and every
//!   `tag_rndv_request`) goes to [`EventSink::tag_unexp_rndv`] with the sender's address and a
//!   packed tcp rkey (when the data is one tcp-registered region), so the layer above can fetch
//!   it itself and then `tag_rndv_cancel` the sender's operation.
//! - **Cancel**: a receive still posted is removed; without `force` it completes with
//!   [`Error::Canceled`]. A receive that already matched cannot be canceled (it completes).
//!
//! Nothing here allocates on the data path: the posted queue and the staging buffers keep
//! their capacity.
//!
//! [`wire::TAG_WHOLE`]: super::wire::TAG_WHOLE
//! [`TagState`]: super::posted::TagState

use super::conn::Req;
use super::ep::Sent;
use super::iov::Segs;
use super::posted::TagRx;
use super::wire::{self, FrameHeader, Kind};
use super::wire::{TagHdr, TagRndvHdr};
use super::{TcpEp, TcpIface};
use crate::ep::{check_len, CompletionId, TagRecvId};
use crate::iface::EventSink;
use crate::md::Iov;
use ucs::{Error, Outcome, Result};

impl TcpIface {
    /// Reports the connection's finished tagged eager message: to its posted receive, or as
    /// unexpected (`whole`: the payload when it arrived in one chunk, else the staging buffer).
    pub(crate) fn tag_finish<S: EventSink>(
        &mut self,
        key: usize,
        whole: Option<&[u8]>,
        sink: &mut S,
    ) {
        let (rx, stage, posted) = {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            let c = &mut inner.conns[key];
            let rx = std::mem::take(&mut c.tag_rx);
            let stage = match (&rx, whole) {
                (TagRx::Unexp { .. }, None) => std::mem::take(&mut c.tag_stage),
                _ => Vec::new(),
            };
            let posted = match &rx {
                TagRx::Posted { slot, .. } => inner.tag.take_matched(*slot),
                _ => None,
            };
            (rx, stage, posted)
        };
        match rx {
            TagRx::Posted { hdr, total, .. } => {
                let Some(p) = posted else {
                    return;
                };
                let cap = p.segs.total();
                let res = if total > cap {
                    Err(Error::Truncated {
                        len: total,
                        capacity: cap,
                    })
                } else {
                    Ok(())
                };
                sink.tag_recv_done(p.ctx, hdr.tag, hdr.imm, total, res);
            }
            TagRx::Unexp { hdr } => {
                sink.tag_unexp_eager(hdr.tag, hdr.imm, whole.unwrap_or(&stage));
                if whole.is_none() {
                    if let Some(c) = self.inner.borrow_mut().conns.get_mut(key) {
                        c.tag_stage = stage;
                    }
                }
            }
            TagRx::Idle => {}
        }
    }

    /// `tag_recv_zcopy`: posts a receive.
    pub(crate) fn tag_post(
        &mut self,
        tag: u64,
        mask: u64,
        iov: &[Iov<'_>],
        ctx: TagRecvId,
    ) -> Result<Outcome> {
        self.inner.borrow_mut().tag.post(tag, mask, iov, ctx)
    }

    /// `tag_recv_cancel`: removes a posted receive.
    pub(crate) fn tag_cancel(&mut self, ctx: TagRecvId, force: bool) -> Result<()> {
        self.tag_canceler().cancel(ctx, force)
    }
}

/// Cancels posted receives of a tcp interface from anywhere, including inside a progress
/// callback of any interface (the layer above matches messages of other transports in its
/// callbacks and must take a receive back from the transport at that moment, before the
/// transport can match it too). A clone of the interface's shared state, no lock.
#[derive(Clone)]
pub struct TagCanceler(std::rc::Rc<std::cell::RefCell<super::inner::Inner>>);

impl std::fmt::Debug for TagCanceler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TagCanceler")
    }
}

impl TagCanceler {
    /// As [`crate::Iface::tag_recv_cancel`]: removes the receive if it is still posted. Gives
    /// [`Error::Busy`] when a message already matched it (it completes normally) and
    /// [`Error::InvalidParam`] for an unknown receive.
    pub fn cancel(&self, ctx: TagRecvId, force: bool) -> Result<()> {
        let Ok(mut g) = self.0.try_borrow_mut() else {
            return Err(Error::Busy(
                "the tcp interface is inside progress and holds its state".into(),
            ));
        };
        if g.tag.cancel(ctx, force).is_some() {
            return Ok(());
        }
        drop(g);
        cancel_miss(&self.0.borrow(), ctx)
    }
}

fn cancel_miss(g: &super::inner::Inner, ctx: TagRecvId) -> Result<()> {
    let in_flight = g.conns.iter().any(|(_, c)| {
        matches!(&c.tag_rx, TagRx::Posted { slot, .. }
            if g.tag.matched(*slot).is_some_and(|p| p.ctx == ctx))
            || c.reqs
                .iter()
                .any(|(_, r)| matches!(r, super::conn::Req::TagGet { ctx: x, .. } if *x == ctx))
    });
    if in_flight {
        Err(Error::Busy(format!(
            "tag receive {ctx} already matched a message; it completes normally"
        )))
    } else {
        Err(Error::InvalidParam(format!(
            "no tag receive {ctx} is posted"
        )))
    }
}

impl crate::iface::TagRecvCancel for TagCanceler {
    fn cancel(&self, ctx: TagRecvId, force: bool) -> Result<()> {
        TagCanceler::cancel(self, ctx, force)
    }
}

impl TcpIface {
    /// A handle that cancels this interface's posted receives (see [`TagCanceler`]).
    pub fn tag_canceler(&self) -> TagCanceler {
        TagCanceler(self.inner.clone())
    }
}

impl TcpEp {
    /// `tag_eager_zcopy`: one `TagEager` frame whose payload is sent from the caller's memory.
    pub(super) fn eager_zcopy(
        &mut self,
        tag: u64,
        imm: u64,
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome> {
        let total = Iov::total_len(iov);
        check_len(total, wire::MAX_TAG_EAGER)?;
        let segs = Segs::new(iov)?;
        let mut f = [0u8; FrameHeader::LEN + TagHdr::LEN];
        FrameHeader::new(Kind::TagEager, 0, total).encode(&mut f);
        TagHdr { tag, imm }.encode(&mut f[FrameHeader::LEN..]);
        Ok(match self.send(&[&f], Some((segs, Some(comp))), None)? {
            None => Outcome::NoResource,
            Some(Sent::All) => Outcome::DONE,
            Some(Sent::Queued) => Outcome::InProgress,
        })
    }

    /// `tag_rndv_zcopy`: announces the data; the receiver pulls it when a posted receive matches. On success
    /// gives `Done(op)`: the operation has *started* (its completion with `comp` follows once
    /// the receiver took the data, or with an error) and `op` names it for `tag_rndv_cancel`.
    pub(super) fn rndv_zcopy(
        &mut self,
        tag: u64,
        header: &[u8],
        iov: &[Iov<'_>],
        comp: CompletionId,
    ) -> Result<Outcome<u64>> {
        check_len(header.len(), wire::MAX_TAG_RNDV_HDR)?;
        let total = Iov::total_len(iov);
        check_len(total, wire::MAX_RMA)?;
        let segs = Segs::new(iov)?;
        let Some(op_id) = self.next_req_id() else {
            return Ok(Outcome::NoResource);
        };
        // One tcp-registered region: the receiver may also fetch it with a get (unexpected
        // rendezvous handled by the layer above).
        let (remote_addr, key) = match iov {
            [v] => match super::md::reg_key(v.memh()) {
                Some(k) => (v.ptr() as u64, k),
                None => (0, 0),
            },
            _ => (0, 0),
        };
        let mut f = [0u8; FrameHeader::LEN + TagRndvHdr::LEN];
        FrameHeader::new(Kind::TagRndv, 0, header.len()).encode(&mut f);
        TagRndvHdr {
            tag,
            op_id,
            remote_addr,
            key,
            length: total as u64,
        }
        .encode(&mut f[FrameHeader::LEN..]);
        Ok(
            match self.send(&[&f, header], None, Some(Req::TagRndv { segs, comp }))? {
                None => Outcome::NoResource,
                Some(_) => Outcome::Done(op_id),
            },
        )
    }

    /// `tag_rndv_cancel`: forgets an outstanding rendezvous (a later `TagGet` for it is refused).
    pub(super) fn rndv_cancel(&mut self, op: u64) -> Result<()> {
        let mut g = self.inner.borrow_mut();
        let c = &mut g.conns[self.key];
        let idx = op.wrapping_sub(1) as usize;
        match c.reqs.get(idx) {
            Some(Req::TagRndv { .. }) => {
                c.reqs.remove(idx);
                Ok(())
            }
            _ => Err(Error::InvalidParam(format!(
                "no tag rendezvous {op} is outstanding on this endpoint"
            ))),
        }
    }

    /// `tag_rndv_request`: a `TagRndv` without data (op id 0), which never matches a posted
    /// receive.
    pub(super) fn rndv_request(&mut self, tag: u64, header: &[u8]) -> Result<Outcome> {
        check_len(header.len(), wire::MAX_TAG_RNDV_HDR)?;
        let mut f = [0u8; FrameHeader::LEN + TagRndvHdr::LEN];
        FrameHeader::new(Kind::TagRndv, 0, header.len()).encode(&mut f);
        TagRndvHdr {
            tag,
            op_id: 0,
            remote_addr: 0,
            key: 0,
            length: 0,
        }
        .encode(&mut f[FrameHeader::LEN..]);
        Ok(match self.send(&[&f, header], None, None)? {
            None => Outcome::NoResource,
            Some(_) => Outcome::DONE,
        })
    }
}
