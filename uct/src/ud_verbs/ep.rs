//! ud_verbs endpoint: active messages (short and bcopy, each one sequenced datagram from a
//! send buffer kept until acknowledged), flush, pending requests.

use super::state::{Inner, MAX_SHORT};
use super::wire::{Hdr, NO_EP};
use crate::ep::{check_am_id, check_len, CompletionId, Endpoint, EpId, PendingId};
use std::cell::RefCell;
use std::rc::Rc;
use ucs::{Error, Outcome, Result};

/// A ud_verbs endpoint: an address handle and the reliability state towards one peer
/// interface.
pub struct UdVerbsEp {
    pub(super) inner: Rc<RefCell<Inner>>,
    pub(super) key: usize,
    pub(super) gen: u16,
}

impl Drop for UdVerbsEp {
    fn drop(&mut self) {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return;
        };
        let Some(ep) = inner.ep(self.key, self.gen) else {
            return;
        };
        // A connected endpoint stays, as an internal one: the paired endpoint at the peer may
        // still send, and what this one sent is still resent until acknowledged.
        ep.pending.clear();
        ep.flushes.clear();
        ep.error_reported = true;
        if ep.dest != NO_EP && ep.failed.is_none() {
            ep.user = false;
        } else {
            inner.remove_ep(self.key);
        }
    }
}

fn gone() -> Error {
    Error::InvalidParam("ud_verbs endpoint is gone".into())
}

impl UdVerbsEp {
    /// Whether the peer answered the connection request (sends no longer wait for it).
    pub fn is_connected(&self) -> bool {
        self.inner
            .borrow()
            .eps
            .get(self.key)
            .is_some_and(|e| e.gen == self.gen && e.dest != NO_EP)
    }

    /// Sends the id and `parts` (at most [`MAX_SHORT`] bytes) as one datagram.
    fn send_parts(&mut self, id: u8, parts: &[&[u8]]) -> Result<Outcome> {
        check_am_id(id)?;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        check_len(total, MAX_SHORT)?;
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        inner.ep(self.key, self.gen).ok_or_else(gone)?;
        if !inner.data_ready(self.key)? {
            return Ok(Outcome::NoResource);
        }
        let Some(b) = inner.tx_free.pop() else {
            return Ok(Outcome::NoResource);
        };
        let p = inner.tx_buf(b);
        // SAFETY: send buffer `b` is ours and holds a datagram of `seg >= Hdr::LEN + 1 +
        // MAX_SHORT` bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, Hdr::LEN + 1 + MAX_SHORT) };
        buf[Hdr::LEN] = id;
        let mut at = Hdr::LEN + 1;
        for part in parts {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        if let Err(e) = inner.send_data(self.key, b, at) {
            inner.fail_ep(self.key, e.clone());
            return Err(e);
        }
        Ok(Outcome::DONE)
    }
}

impl Endpoint for UdVerbsEp {
    fn id(&self) -> EpId {
        EpId(super::state::ep_id(self.key, self.gen))
    }

    fn am_short(&mut self, id: u8, header: u64, payload: &[u8]) -> Result<Outcome> {
        self.send_parts(id, &[&header.to_le_bytes(), payload])
    }

    fn am_short2(&mut self, id: u8, h0: u64, h1: u64, payload: &[u8]) -> Result<Outcome> {
        self.send_parts(id, &[&h0.to_le_bytes(), &h1.to_le_bytes(), payload])
    }

    fn am_short_iov(&mut self, id: u8, iov: &[&[u8]]) -> Result<Outcome> {
        self.send_parts(id, iov)
    }

    fn am_bcopy<F: FnOnce(&mut [u8]) -> usize>(
        &mut self,
        id: u8,
        pack: F,
    ) -> Result<Outcome<usize>> {
        check_am_id(id)?;
        let (b, p, max) = {
            let mut g = self.inner.borrow_mut();
            let inner = &mut *g;
            inner.ep(self.key, self.gen).ok_or_else(gone)?;
            if !inner.data_ready(self.key)? {
                return Ok(Outcome::NoResource);
            }
            let Some(b) = inner.tx_free.pop() else {
                return Ok(Outcome::NoResource);
            };
            (b, inner.tx_buf(b), inner.seg - Hdr::LEN - 1)
        };
        // SAFETY: send buffer `b` is ours (one datagram, `seg` bytes); no borrow of the state
        // is held while `pack` runs.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, Hdr::LEN + 1 + max) };
        buf[Hdr::LEN] = id;
        let len = pack(&mut buf[Hdr::LEN + 1..]);
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let alive = inner
            .ep(self.key, self.gen)
            .is_some_and(|e| e.failed.is_none());
        if len > max || !alive {
            inner.tx_free.push(b);
            if !alive {
                return Err(gone());
            }
            return Err(Error::MessageTooLong { len, max });
        }
        if let Err(e) = inner.send_data(self.key, b, Hdr::LEN + 1 + len) {
            inner.fail_ep(self.key, e.clone());
            return Err(e);
        }
        Ok(Outcome::Done(len))
    }

    fn flush(&mut self, comp: CompletionId) -> Result<Outcome> {
        let mut inner = self.inner.borrow_mut();
        let ep = inner.ep(self.key, self.gen).ok_or_else(gone)?;
        ep.status()?;
        if ep.tx.is_empty() {
            return Ok(Outcome::DONE);
        }
        ep.flushes.push_back(comp);
        inner.attention = true;
        Ok(Outcome::InProgress)
    }

    fn fence(&mut self) -> Result<()> {
        // Datagrams of one endpoint are delivered in order: nothing to do.
        Ok(())
    }

    /// An idle, connected endpoint sends a probe: a sequenced datagram without an active
    /// message, which the peer's transport acknowledges (its application need not do
    /// anything); a peer that is gone fails the endpoint after the retries. One with
    /// datagrams in flight, or still connecting, is being watched already.
    fn check(&mut self) -> Result<()> {
        let mut g = self.inner.borrow_mut();
        let inner = &mut *g;
        let ep = inner.ep(self.key, self.gen).ok_or_else(gone)?;
        ep.status()?;
        if ep.dest == NO_EP || !ep.tx.is_empty() || !inner.data_ready(self.key)? {
            return Ok(());
        }
        let Some(b) = inner.tx_free.pop() else {
            return Ok(());
        };
        if let Err(e) = inner.send_data(self.key, b, Hdr::LEN) {
            inner.fail_ep(self.key, e.clone());
            return Err(e);
        }
        Ok(())
    }

    fn pending_add(&mut self, req: PendingId) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        inner.ep(self.key, self.gen).ok_or_else(gone)?;
        if inner.data_ready(self.key)? {
            return Err(Error::Busy(
                "send resources are available: retry now".into(),
            ));
        }
        inner.eps[self.key].pending.push_back(req);
        inner.attention = true;
        Ok(())
    }

    fn pending_purge(&mut self, f: &mut dyn FnMut(PendingId)) {
        let reqs: Vec<PendingId> = {
            let mut inner = self.inner.borrow_mut();
            match inner.ep(self.key, self.gen) {
                Some(ep) => ep.pending.drain(..).collect(),
                None => Vec::new(),
            }
        };
        for r in reqs {
            f(r);
        }
    }
}
