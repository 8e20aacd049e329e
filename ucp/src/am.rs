//! User active messages: handlers by id, eager sends, large ones by rendezvous (AM_RTS), and
//! delivery to the handler.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

pub(crate) mod inbox;
pub(crate) mod stages;
pub(crate) mod state;

use crate::am::state::Taken;
use crate::request::Op;
use crate::wire::{am_id, EagerHdr, RtsHdr, UserAmHdr};
use crate::wireup::ProtoConfig;
use crate::worker::ep::connecting;
use crate::worker::pending::am_send;
use crate::worker::req::{zeroed_buf, ReqKind, SendData, SendStage};
use crate::worker::state::AmFamily;
use crate::worker::{EpHandle, Worker};
use stages::AmSend;
use ucs::Outcome;
use ucs::{Error, Result};

/// Largest user header plus data [`AmFamily::am_send_short`] gathers on the stack for a
/// message with a user header (one without goes out from the caller's data): the inline
/// limit of the shared-memory FIFO element is below it.
const SHORT_GATHER_MAX: usize = 256;

/// Where [`AmFamily::am_send_short`] finds its endpoint.
#[derive(Clone, Copy)]
pub(crate) enum At {
    /// An endpoint index, already checked.
    Idx(usize),
    /// A client's handle, checked with the send's lookup.
    Handle(EpHandle),
}

impl Worker {
    /// Sets the handler of user active-message `id` (replacing any previous one).
    pub fn am_set_handler(
        &mut self,
        id: u16,
        handler: impl FnMut(EpHandle, &[u8], Vec<u8>) + 'static,
    ) {
        self.st.am.set(id, Box::new(handler));
    }

    /// Gives a buffer an active-message handler kept back to the worker's pool.
    pub fn am_data_release(&mut self, data: Vec<u8>) {
        self.st.put_buf(data);
    }

    /// Sends user active message `id` with a header and data. Data larger than one fragment
    /// (or above the rendezvous threshold) goes by rendezvous.
    pub fn am_send(&mut self, ep: EpHandle, id: u16, header: &[u8], data: &[u8]) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st
            .am_family()
            .am_send(idx, id, header, SendData::Borrowed(data))
    }

    /// Sends user active message `id` when it goes out at once as one short transport message
    /// (the common small message: header and data copied into the transport now, nothing left
    /// to complete). Gives false, having sent nothing, when it does not (too long, sends queued
    /// before it, back-pressure, an endpoint still connecting): [`Worker::am_send`] or
    /// [`Worker::am_send_raw`] then takes it.
    #[inline(always)]
    pub fn am_send_short(
        &mut self,
        ep: EpHandle,
        id: u16,
        header: &[u8],
        data: &[u8],
    ) -> Result<bool> {
        self.st
            .am_family()
            .am_send_short(At::Handle(ep), id, header, data)
    }

    /// Like [`Worker::am_send`], taking the data vector (given back in the completion).
    pub fn am_send_vec(
        &mut self,
        ep: EpHandle,
        id: u16,
        header: &[u8],
        data: Vec<u8>,
    ) -> Result<Op> {
        let idx = self.st.ep_idx(ep)?;
        self.st
            .am_family()
            .am_send(idx, id, header, SendData::Owned(data))
    }
}

impl AmFamily<'_> {
    pub(crate) fn deliver_am(&mut self, ep: usize, id: u16, hdr: &[u8], data: Vec<u8>) {
        let Some(gen) = self.ep_gen(ep) else {
            tracing::warn!(id, "active message for an endpoint that is gone dropped");
            self.put_buf(data);
            return;
        };
        let h = self.ep_handle(ep, gen);
        self.deliver_am_to(h, id, hdr, data);
    }

    /// [`AmFamily::deliver_am`] from endpoint handle `h`.
    #[inline]
    fn deliver_am_to(&mut self, h: EpHandle, id: u16, hdr: &[u8], data: Vec<u8>) {
        match self.own().take_whole(id, h, hdr, data) {
            Ok(taken) => self.note_taken(taken),
            Err(data) => {
                tracing::warn!(
                    id,
                    len = data.len(),
                    "active message without handler dropped"
                );
                self.put_buf(data);
            }
        }
    }

    /// User active message `id` with user header `hdr`, received by rendezvous on endpoint
    /// `ep` into `data` (its request gone): to its handler, or logged as lost when the
    /// transfer failed.
    pub(crate) fn am_rndv_received(
        &mut self,
        ep: Option<usize>,
        id: u16,
        hdr: &[u8],
        status: Result<()>,
        data: Option<Vec<u8>>,
    ) {
        match (status, data, ep) {
            (Ok(()), Some(data), Some(ep)) => self.deliver_am(ep, id, hdr, data),
            (Ok(()), Some(data), None) => {
                tracing::warn!("active message {id} lost: its request has no endpoint");
                self.put_buf(data);
            }
            (Err(e), _, _) => tracing::warn!("active message {id} lost: {e}"),
            _ => {}
        }
    }

    /// Sends a small eager active message at once, inline on endpoint `idx`'s AM lane in one
    /// transport call (prefix, [`UserAmHdr`] word, then header and data): the common small
    /// message without a request or a pooled buffer. False when it was not sent (too large,
    /// above the rendezvous threshold, the endpoint not ready, something queued before it, or
    /// back-pressure): [`AmFamily::am_send`] then takes it.
    /// The endpoint is `at`: a handle from the client is checked and looked up once, with the
    /// send (an index, already checked, is looked up directly).
    #[inline(always)]
    pub(crate) fn am_send_short(
        &mut self,
        at: At,
        id: u16,
        header: &[u8],
        data: &[u8],
    ) -> Result<bool> {
        let n = header.len() + data.len();
        // `short_max` is the payload after the prefix and one 8-byte word, as here.
        let fits =
            |p: &ProtoConfig| p.short_max.is_some_and(|m| n <= m) && data.len() < p.rndv_thresh;
        let word = UserAmHdr {
            id,
            hdr_len: header.len() as u32,
        }
        .word();
        if header.is_empty() {
            return self.user_am_short2(at, word, data, fits);
        }
        if n > SHORT_GATHER_MAX {
            return Ok(false);
        }
        // Header and data side by side for the one transport call (a few dozen bytes).
        let mut g = [0u8; SHORT_GATHER_MAX];
        g[..header.len()].copy_from_slice(header);
        g[header.len()..n].copy_from_slice(data);
        self.user_am_short2(at, word, &g[..n], fits)
    }

    /// The one `am_short2` of [`AmFamily::am_send_short`]: USER_AM with header word `word`.
    #[inline(always)]
    fn user_am_short2(
        &mut self,
        at: At,
        word: u64,
        data: &[u8],
        fits: impl FnOnce(&ProtoConfig) -> bool,
    ) -> Result<bool> {
        match at {
            At::Idx(idx) => self.short2_now(idx, am_id::USER_AM, word, data, fits),
            At::Handle(h) => self.short2_at(h, am_id::USER_AM, word, data, fits),
        }
    }

    /// Advances active-message send `key` (at a [`SendStage::Am`] stage) as far as resources
    /// allow (see `State::send_step`). Gives false on back-pressure.
    pub(crate) fn am_send_step(&mut self, key: usize) -> Result<bool> {
        if matches!(self.send_mut(key).stage, SendStage::Am(AmSend::Rts)) {
            return self.rndv().send_rts(key);
        }
        self.am_eager_step(key)
    }

    /// Sends eager active message `key` (queued by [`AmFamily::am_send`]) whatever is queued
    /// behind it, with the head its stage keeps. Gives false on back-pressure.
    fn am_eager_step(&mut self, key: usize) -> Result<bool> {
        let idx = self.req_ep(key)?;
        let uuid = self.worker_uuid().to_le_bytes();
        let now = self.now_stamp();
        let (lane, req) = self.am_lane_and_req(idx, key)?;
        let ReqKind::Send(s) = &mut req.kind else {
            return Ok(true);
        };
        let SendStage::Am(AmSend::Eager { head }) = &mut s.stage else {
            return Ok(true);
        };
        let out = am_send(lane.uep, lane.attr, am_id::USER_AM, &[&uuid, head, &s.data])?;
        if out == Outcome::NoResource {
            return Ok(false);
        }
        *lane.last_tx = now;
        let head = std::mem::take(head);
        self.put_buf(head);
        self.finish(key, Ok(()));
        Ok(true)
    }

    pub(crate) fn am_send(
        &mut self,
        idx: usize,
        id: u16,
        header: &[u8],
        data: SendData<'_>,
    ) -> Result<Op> {
        if self.am_send_short(At::Idx(idx), id, header, data.as_slice())? {
            return Ok(data.sent_at_once(0));
        }
        self.ep_usable(idx)?;
        let proto = self.ep(idx).proto().copied().ok_or_else(connecting)?;
        let hlen = u32::try_from(header.len())
            .map_err(|_| Error::InvalidParam("active-message header too long".into()))?;
        let total = UserAmHdr::LEN + header.len() + data.as_slice().len();
        if total + EagerHdr::LEN <= proto.bcopy_single_max
            && data.as_slice().len() < proto.rndv_thresh
        {
            // The headers are gathered with the data by the transport's pack (no copy of the
            // data on the way).
            let mut head = self.get_buf();
            head.extend_from_slice(&UserAmHdr { id, hdr_len: hlen }.encode());
            head.extend_from_slice(header);
            let sent = match self.send_ctl2_now(idx, am_id::USER_AM, &head, data.as_slice()) {
                Ok(sent) => sent,
                Err(e) => {
                    self.put_buf(head);
                    return Err(e);
                }
            };
            if sent {
                self.put_buf(head);
                return Ok(data.sent_at_once(0));
            }
            // Back-pressure, sends queued before it, or still connecting: a request that
            // finishes when the message has gone out (so a client that waits for its sends
            // waits for the receiver, instead of queueing without bound); it keeps the head.
            let key = self.new_send(idx, 0, data, false);
            self.send_mut(key).stage = SendStage::Am(AmSend::Eager { head });
            self.queue_req(idx, key);
            return Ok(self.op_of(key));
        }
        if header.len() + 64 > proto.bcopy_single_max {
            return Err(Error::MessageTooLong {
                len: header.len(),
                max: proto.bcopy_single_max.saturating_sub(64),
            });
        }
        let key = self.new_send(idx, 0, data, false);
        self.send_rndv(key).am = Some((id, header.to_vec()));
        self.send_mut(key).stage = SendStage::Am(AmSend::Rts);
        let ready = self.ep_ready(idx);
        if !ready || !self.rndv().send_rts(key)? {
            self.queue_req(idx, key);
        }
        Ok(self.op_of(key))
    }

    /// USER_AM: a user active message sent eagerly from endpoint `idx` of generation `gen`
    /// (inlined into the dispatch's fast path).
    /// With `lend` its transport lends `data`: gives true when the inbox kept it there
    /// ([`Taken::Lent`]).
    #[inline(always)]
    pub(crate) fn on_user_am(
        &mut self,
        idx: usize,
        gen: u32,
        h: UserAmHdr,
        uh: &[u8],
        data: &[u8],
        lend: bool,
    ) -> bool {
        let ep = self.ep_handle(idx, gen);
        let (am, pool) = self.own_and_pool();
        match am.take_eager(h.id, ep, uh, data, lend, || pool.pop().unwrap_or_default()) {
            Taken::No => {
                tracing::warn!(
                    id = h.id,
                    len = data.len(),
                    "active message without handler dropped"
                );
                false
            }
            taken => {
                self.note_taken(taken);
                taken == Taken::Lent
            }
        }
    }

    /// AM_RTS: a user active message sent by rendezvous; its data is fetched into a new buffer.
    pub(crate) fn on_am_rts(
        &mut self,
        idx: usize,
        h: UserAmHdr,
        uh: &[u8],
        rts: RtsHdr<'_>,
    ) -> Result<()> {
        if self.am_desc_rts(idx, h, uh, &rts)? {
            return Ok(());
        }
        let len = usize::try_from(rts.len)
            .map_err(|_| Error::Wire("rendezvous length overflows".into()))?;
        if len > (1usize << 40) {
            return Err(Error::Wire(format!(
                "active message of {len} bytes is implausibly large"
            )));
        }
        let key = self.new_recv(zeroed_buf(len)?, 0, 0);
        self.recv_rndv(key).am = Some((h.id, uh.to_vec()));
        self.rndv().rndv_recv_start(
            key,
            idx,
            0,
            rts.sreq,
            len,
            rts.buf.addr,
            rts.buf.tl,
            rts.buf.rkey,
        )
    }
}
