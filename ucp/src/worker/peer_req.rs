//! Checks on messages that name one of our requests (SYNC_ACK, ATS, RTR, RNDV_DATA, ATP,
//! ATOMIC_REP): a request's id on the wire is scrambled with its endpoint's secret, and a named
//! request must belong to the sending endpoint and be of the kind and stage the message may
//! touch. The worker's lint against `unwrap`, `expect`, `unreachable!` and `panic!` covers this
//! module too.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::worker::req::ReqKind;
use crate::worker::state::Core;
use ucs::{Error, Result};

/// A message that names one of our requests, for [`Core::peer_req`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    SyncAck,
    Ats,
    Rtr,
    RndvData,
    Atp,
    AtomicRep,
}

/// Bits of a request's internal id (and of an endpoint's secret): generation and slot.
pub(crate) const PEER_ID_MASK: u64 = (1 << 60) - 1;

impl Named {
    /// True when a request of this kind and stage may get the message.
    fn fits(self, kind: &ReqKind) -> bool {
        match (self, kind) {
            // Acknowledges a synchronous eager send whose first fragment went out.
            (Named::SyncAck, ReqKind::Send(s)) => {
                s.sync && !s.acked && s.stage.takes_sync_ack(s.offset)
            }
            // Answers an RTS that went out.
            (Named::Ats | Named::Rtr, ReqKind::Send(s)) => {
                s.rts_sent && s.stage.waits_rndv_answer()
            }
            // Data for a receive that sent its RTR.
            (Named::RndvData, ReqKind::Recv(r)) => r.stage.waits_rndv_data() && !r.user_rma,
            // Put done: only a receive that offered its buffer for put (it holds a registration).
            (Named::Atp, ReqKind::Recv(r)) => {
                r.stage.waits_rndv_data() && r.memh().is_some() && !r.user_rma
            }
            (Named::AtomicRep, ReqKind::Atomic { .. }) => true,
            _ => false,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Named::SyncAck => "SYNC_ACK",
            Named::Ats => "ATS",
            Named::Rtr => "RTR",
            Named::RndvData => "RNDV_DATA",
            Named::Atp => "ATP",
            Named::AtomicRep => "ATOMIC_REP",
        }
    }

    fn expects(self) -> &'static str {
        match self {
            Named::SyncAck => "a synchronous send waiting for its acknowledgement",
            Named::Ats | Named::Rtr => "a rendezvous send waiting for an answer to its RTS",
            Named::RndvData => "a receive waiting for rendezvous data",
            Named::Atp => "a receive waiting for a rendezvous put",
            Named::AtomicRep => "an atomic waiting for its reply",
        }
    }
}

impl Core {
    /// The id request `key` has on the wire towards the peer of endpoint `idx`: its internal
    /// id (generation and slot, 60 bits) scrambled with the endpoint's secret, so no other peer
    /// can guess it. The top four bits stay clear: it is never [`NO_REQ`](crate::wire::NO_REQ).
    pub(crate) fn peer_id(&self, idx: usize, key: usize) -> u64 {
        self.wire_id(key) ^ self.eps[idx].secret
    }

    /// The request the peer of endpoint `idx` names by `id` in message `named`, checked: a
    /// live request of that endpoint, of the kind and in the stage the message may touch.
    /// Anything else (a guessed, finished or another endpoint's request, or one in the wrong
    /// stage) is a protocol error, counted in [`ProtoStats::forged_ids`](crate::ProtoStats::forged_ids) and logged; the caller
    /// fails the endpoint, and the request named is left as it was.
    pub(crate) fn peer_req(&mut self, idx: usize, id: u64, named: Named) -> Result<usize> {
        let wire = id ^ self.eps[idx].secret;
        let key = (wire & 0xFFFF_FFFF) as usize;
        let fits = match self.reqs.get(key) {
            Some(r) if r.gen as u64 == wire >> 32 && r.done.is_none() && r.ep == Some(idx) => {
                named.fits(&r.kind)
            }
            _ => false,
        };
        if fits {
            return Ok(key);
        }
        self.stats.forged_ids += 1;
        let what = named.name();
        let expects = named.expects();
        tracing::warn!(
            "worker {:#018x} sent a {what} naming request {id:#018x}, not {expects} of its \
             endpoint: failing that endpoint",
            self.eps[idx].uuid
        );
        Err(Error::Wire(format!(
            "{what} names request {id:#018x}, which is not {expects} of this endpoint"
        )))
    }
}
