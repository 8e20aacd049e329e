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

use crate::am_desc::AmDescHandler;
use crate::request::{Completion, Op};
use crate::wire::{am_id, EagerHdr, RtsHdr, UserAmHdr};
use crate::worker::req::{zeroed_buf, SendData};
use crate::worker::state::State;
use crate::worker::{AmHandler, EpHandle, Worker};
use std::collections::HashMap;
use ucs::{Error, Result};

/// The user active-message family's state: one handler per id, of either kind (a whole-message
/// [`AmHandler`] or a descriptor [`AmDescHandler`]).
#[derive(Default)]
pub(crate) struct AmState {
    handlers: HashMap<u16, AmHandler>,
    desc_handlers: HashMap<u16, AmDescHandler>,
}

impl AmState {
    /// Makes `h` the handler of `id`, replacing any of either kind.
    pub(crate) fn set(&mut self, id: u16, h: AmHandler) {
        self.desc_handlers.remove(&id);
        self.handlers.insert(id, h);
    }

    /// Makes `h` the descriptor handler of `id`, replacing any of either kind.
    pub(crate) fn set_desc(&mut self, id: u16, h: AmDescHandler) {
        self.handlers.remove(&id);
        self.desc_handlers.insert(id, h);
    }

    /// Removes the handler of `id`, of either kind.
    pub(crate) fn remove(&mut self, id: u16) {
        self.handlers.remove(&id);
        self.desc_handlers.remove(&id);
    }

    /// The whole-message handler of `id`.
    pub(crate) fn handler(&mut self, id: u16) -> Option<&mut AmHandler> {
        self.handlers.get_mut(&id)
    }

    /// The descriptor handler of `id`.
    pub(crate) fn desc_handler(&mut self, id: u16) -> Option<&mut AmDescHandler> {
        self.desc_handlers.get_mut(&id)
    }

    /// `id` has a descriptor handler. The empty test first: a worker with whole-message
    /// handlers only pays no lookup.
    #[inline]
    pub(crate) fn has_desc(&self, id: u16) -> bool {
        !self.desc_handlers.is_empty() && self.desc_handlers.contains_key(&id)
    }
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
        self.st.am_send(idx, id, header, SendData::Borrowed(data))
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
        self.st.am_send(idx, id, header, SendData::Owned(data))
    }
}

impl State {
    pub(crate) fn deliver_am(&mut self, ep: usize, id: u16, hdr: &[u8], data: Vec<u8>) {
        let Some(gen) = self.eps.get(ep).map(|e| e.gen) else {
            tracing::warn!(id, "active message for an endpoint that is gone dropped");
            self.put_buf(data);
            return;
        };
        let h = self.ep_handle(ep, gen);
        match self.am.handler(id) {
            Some(cb) => cb(h, hdr, data),
            None => {
                tracing::warn!(
                    id,
                    len = data.len(),
                    "active message without handler dropped"
                );
                self.put_buf(data);
            }
        }
    }

    pub(crate) fn am_send(
        &mut self,
        idx: usize,
        id: u16,
        header: &[u8],
        data: SendData<'_>,
    ) -> Result<Op> {
        self.ep_usable(idx)?;
        let proto = self.eps[idx]
            .proto
            .as_deref()
            .copied()
            .ok_or_else(|| Error::Busy("endpoint is still connecting".into()))?;
        let hlen = u32::try_from(header.len())
            .map_err(|_| Error::InvalidParam("active-message header too long".into()))?;
        let total = UserAmHdr::LEN + header.len() + data.as_slice().len();
        if total + EagerHdr::LEN <= proto.bcopy_single_max
            && data.as_slice().len() < proto.rndv_thresh
        {
            let mut body = self.get_buf();
            body.extend_from_slice(&UserAmHdr { id, hdr_len: hlen }.encode());
            body.extend_from_slice(header);
            body.extend_from_slice(data.as_slice());
            let r = self.send_ctl(idx, am_id::USER_AM, &body);
            self.put_buf(body);
            r?;
            let give = match data {
                SendData::Owned(v) => Some(v),
                SendData::Borrowed(_) | SendData::Raw(_) => None,
            };
            return Ok(Op::Done(Completion {
                buf: give,
                ..Completion::ok()
            }));
        }
        if header.len() + 64 > proto.bcopy_single_max {
            return Err(Error::MessageTooLong {
                len: header.len(),
                max: proto.bcopy_single_max.saturating_sub(64),
            });
        }
        let key = self.new_send(idx, 0, data, false);
        self.send_rndv(key).am = Some((id, header.to_vec()));
        let ready = self.eps[idx].pending.is_empty() && self.eps[idx].lanes.is_some();
        if !ready || !self.send_rts(key)? {
            self.queue_req(idx, key);
        }
        Ok(self.op_of(key))
    }

    /// USER_AM: a user active message sent eagerly.
    pub(crate) fn on_user_am(&mut self, idx: usize, h: UserAmHdr, uh: &[u8], data: &[u8]) {
        if self.am_desc_eager(idx, h, uh, data) {
            return;
        }
        let mut v = self.get_buf();
        v.extend_from_slice(data);
        self.deliver_am(idx, h.id, uh, v);
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
        self.rndv_recv_start(
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
