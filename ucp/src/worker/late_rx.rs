//! Messages that arrive for an endpoint that has already failed.
//!
//! A peer's messages and its failure travel apart: a shared-memory peer writes into our FIFO and
//! exits, and the worker may learn of the exit before it reads what the peer wrote: the connect
//! its wire-up queued runs after the exit and fails, or a transport reports the exit ahead of
//! the peer's last messages (the shared-memory transport waits for them since it reads its
//! FIFO up to where the exit was seen, but nothing in the transport contract promises it).
//! Those messages were sent whole by a peer that kept the protocol; losing them without a word
//! would lose data whose send had completed. So the endpoint remembers why it failed:
//!
//! - the peer went away (its process exited, its connection was reset, its address no longer
//!   reaches it), or keepalive found it silent for longer than its timeout (a peer that was
//!   only busy writes on when it comes back, and what it sent is good): a tag message that is complete in itself (EAGER_ONLY, EAGER_SYNC_ONLY, whose
//!   acknowledgement has nowhere to go) is still delivered, to its receive or to the unexpected
//!   queue. A message that cannot complete without the peer (the first fragment of a longer
//!   message, a rendezvous whose data stays with the peer) fails the posted receive it matches
//!   with the endpoint's error, or, when none matches, waits unexpected as lost for the
//!   receive that matches it later to fail so;
//! - anything else (the peer broke the protocol, a local error): its messages are dropped. A
//!   peer that misbehaved is not trusted again.
//!
//! Every message dropped here is logged: the endpoint's first at warn level with the reason,
//! the rest at debug level; control messages (wire-up, keepalive, close) at debug level only,
//! as after a normal failure some are still in flight.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::wire::{am_id, EagerHdr, Msg, NO_REQ};
use crate::worker::state::State;
use ucs::Error;

/// Whether failure `err` means the peer went away or fell silent (keepalive's `Timeout`),
/// rather than that it misbehaved or that something went wrong here: what it wrote is still
/// good.
fn peer_gone(err: &Error) -> bool {
    matches!(
        err,
        Error::PeerFailure(_)
            | Error::ConnectionReset(_)
            | Error::Unreachable(_)
            | Error::Timeout(_)
    )
}

/// What happened to a message of a failed endpoint.
enum Fate {
    Delivered,
    /// The posted receive it matched failed with the endpoint's error.
    RecvFailed,
    /// No receive matched it: kept as lost, for the one that matches it later to fail.
    Lost,
    /// Dropped, for the reason given.
    Dropped(&'static str),
}

impl State {
    /// Endpoint `idx` fails with `err`: notes what becomes of its peer's later messages.
    pub(super) fn late_rx_on_failure(&mut self, idx: usize, err: &Error) {
        if let Some(ep) = self.eps.get_mut(idx) {
            let x = ep.extra_mut();
            x.late_rx.deliver = peer_gone(err) && !x.late_rx.misbehaved;
        }
    }

    /// The peer of endpoint `idx` broke the protocol: nothing it sends is delivered any more.
    pub(super) fn late_rx_distrust(&mut self, idx: usize) {
        if let Some(ep) = self.eps.get_mut(idx) {
            let x = ep.extra_mut();
            x.late_rx.misbehaved = true;
            x.late_rx.deliver = false;
        }
    }

    /// Message `id` (body `body`, after the sender prefix) from peer `src` of endpoint `idx`,
    /// which has failed (see the module docs).
    #[cold]
    #[inline(never)]
    pub(super) fn late_msg(&mut self, idx: usize, src: u64, id: u8, body: &[u8]) {
        if matches!(
            id,
            am_id::WIREUP | am_id::KEEPALIVE | am_id::CLOSE | am_id::CLOSE_ACK
        ) {
            tracing::debug!(
                "ucp control message {id} from worker {src:#018x} after its endpoint failed"
            );
            return;
        }
        let late = self.eps[idx]
            .extra
            .as_deref()
            .map(|x| x.late_rx)
            .unwrap_or_default();
        let fate = if late.deliver {
            self.late_deliver(idx, src, id, body)
        } else if late.misbehaved {
            Fate::Dropped("the peer broke the protocol before, nothing from it is trusted")
        } else {
            Fate::Dropped("only the messages of a peer that went away are still delivered")
        };
        match fate {
            Fate::Delivered => {
                self.stats.late_delivered += 1;
            }
            Fate::RecvFailed => {
                tracing::debug!(
                    "ucp message {id} from worker {src:#018x} cannot complete after its \
                     endpoint failed: the receive it matched fails"
                );
            }
            Fate::Lost => {
                tracing::debug!(
                    "ucp message {id} from worker {src:#018x} cannot complete after its \
                     endpoint failed: kept as lost, the receive that matches it will fail"
                );
            }
            Fate::Dropped(why) => self.late_dropped(idx, src, id, body.len(), why),
        }
    }

    /// [`State::late_msg`] of an endpoint whose peer went away.
    fn late_deliver(&mut self, idx: usize, src: u64, id: u8, body: &[u8]) -> Fate {
        // (tag, the whole message when it is here, else the length announced)
        let (tag, whole, len) = if id == am_id::EAGER_ONLY {
            match EagerHdr::decode(body) {
                Ok(h) => (h.tag, Some(&body[EagerHdr::LEN..]), 0),
                Err(e) => return self.late_malformed(idx, src, id, e),
            }
        } else {
            match Msg::decode(id, body) {
                Ok(Msg::Eager(h, data)) => (h.tag, Some(data), 0),
                // Its acknowledgement has no one to go to: delivered as a plain message.
                Ok(Msg::EagerSync(h, data)) => (h.tag, Some(data), 0),
                // The rest of the message, or its data, stays with the peer.
                Ok(Msg::EagerFirst(h, _)) => (h.tag, None, h.total_len),
                Ok(Msg::Rts(h)) => (h.tag, None, h.len),
                Ok(_) => return Fate::Dropped("it cannot be handled without the peer"),
                Err(e) => return self.late_malformed(idx, src, id, e),
            }
        };
        if let Some(data) = whole {
            let total = data.len();
            self.tag_family()
                .eager_arrived(idx, src, tag, data, total, NO_REQ, None, None);
            return Fate::Delivered;
        }
        let err = self.eps[idx].failure();
        let uid = self.tag.next_unexp_id();
        match self.tag_family().tm_arrive(tag, uid as u64) {
            Some(wire) => {
                if let Some(key) = self.req_by_wire(wire) {
                    self.finish(key, Err(err));
                }
                Fate::RecvFailed
            }
            None => {
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                self.tag.park_lost(idx, tag, len, err);
                self.stats.unexp_lost += 1;
                Fate::Lost
            }
        }
    }

    /// A malformed message of a failed endpoint whose peer went away: the peer is no longer
    /// trusted.
    fn late_malformed(&mut self, idx: usize, src: u64, id: u8, e: Error) -> Fate {
        tracing::debug!("malformed ucp message {id} from worker {src:#018x}: {e}");
        self.late_rx_distrust(idx);
        Fate::Dropped("it is malformed")
    }

    /// Logs message `id` (`len` bytes) of failed endpoint `idx` dropped for reason `why`: the
    /// endpoint's first at warn level, the rest at debug level.
    #[cold]
    fn late_dropped(&mut self, idx: usize, src: u64, id: u8, len: usize, why: &str) {
        self.stats.late_dropped += 1;
        let err = self.eps[idx].failure();
        let x = self.eps[idx].extra_mut();
        if std::mem::replace(&mut x.late_rx.warned, true) {
            tracing::debug!(
                "dropping ucp message {id} ({len} bytes) from worker {src:#018x}: its endpoint \
                 failed ({err}); {why}"
            );
            return;
        }
        tracing::warn!(
            "dropping ucp message {id} ({len} bytes) from worker {src:#018x}: its endpoint \
             failed ({err}); {why} (later drops from this endpoint are logged at debug level)"
        );
    }
}
