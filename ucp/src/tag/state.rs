//! The tag family's state: the matcher, the unexpected messages it indexes, the messages being
//! assembled from fragments, and the handles of messages taken by a removing probe.

use crate::tag::matcher::TagMatcher;
use crate::tag::message::MsgDrops;
use crate::tag::offload::state::TmState;
use crate::tag::small::SmallUnexps;
use crate::tag::unexp::{Target, Unexp, UnexpKind};
use crate::worker::peers::SeededUuidHash;
use slab::Slab;
use std::collections::HashMap;
use std::sync::Arc;

/// What the tag family keeps per worker (the worker's `State::tag`).
#[derive(Default)]
pub(crate) struct TagState {
    pub(super) matcher: TagMatcher,
    pub(super) unexp: Slab<Unexp>,
    /// Small unexpected messages (see `tag::small`).
    pub(super) small_unexp: SmallUnexps,
    /// Multi-fragment messages being assembled, by (sender uuid, message id): looked up by
    /// every fragment, so hashed by two multiplies rather than SipHash (about 200 instructions
    /// a lookup, 900 of a 16 KiB message's).
    pub(super) assembling: HashMap<(u64, u64), Target, SeededUuidHash>,
    /// Shared with every [`Message`](crate::Message) handed out: the ones dropped unreceived.
    pub(super) msg_drops: Arc<MsgDrops>,
    /// Unexpected messages taken by a removing probe whose sender failed before they were
    /// complete (their data stays until the handle is received or dropped).
    pub(super) msgs_failed: Vec<usize>,
    /// Set by [`crate::Worker::fail_tag_recvs`]: a tag receive that finds no message waiting
    /// fails at once with it.
    pub(super) recv_failure: Option<ucs::Error>,
    /// Tag offload's state (see `tag::offload`).
    pub(crate) tm: TmState,
}

impl TagState {
    /// How many receives the matcher has matched so far (a counter that only grows: a sink
    /// compares it before and after a call to learn whether a receive completed meanwhile).
    #[inline]
    pub(crate) fn matched(&self) -> u64 {
        self.matcher.matched()
    }

    /// Whether a receive is posted that a message with `tag` would match.
    #[inline]
    pub(crate) fn may_match(&self, tag: u64) -> bool {
        self.matcher.may_match(tag)
    }

    /// Whether a [`Message`](crate::Message) handle was dropped unreceived since the last
    /// `discard_dropped_msgs`.
    #[inline]
    pub(crate) fn has_dropped_msgs(&self) -> bool {
        self.msg_drops.any()
    }

    /// The unexpected messages the matcher holds.
    #[cfg(test)]
    pub(crate) fn unexpected_len(&self) -> usize {
        self.matcher.unexpected_len()
    }

    /// The id the next unexpected message will get (what the transport is told when it may
    /// match it first, see `tm_arrive`).
    #[inline]
    pub(crate) fn next_unexp_id(&self) -> usize {
        self.unexp.vacant_key()
    }

    /// Keeps a message of `len` bytes from endpoint `ep` that can no longer complete as an
    /// unexpected [`UnexpKind::Lost`] one, under the id [`TagState::next_unexp_id`] gave: the
    /// receive that matches it fails with `err`.
    pub(crate) fn park_lost(&mut self, ep: usize, tag: u64, len: usize, err: ucs::Error) {
        self.unexp.insert(Unexp {
            ep,
            tag,
            kind: UnexpKind::Lost { len, err },
            msg_key: None,
        });
    }

    /// Keeps the rendezvous announcement (RTS) from endpoint `ep` as an unexpected message,
    /// under the id [`TagState::next_unexp_id`] gave.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn park_rts(
        &mut self,
        ep: usize,
        tag: u64,
        sreq: u64,
        len: usize,
        addr: u64,
        tl: &str,
        rkey: &[u8],
    ) {
        self.unexp.insert(Unexp {
            ep,
            tag,
            kind: UnexpKind::Rts {
                sreq,
                len,
                addr,
                tl: tl.to_owned(),
                rkey: rkey.to_vec(),
            },
            msg_key: None,
        });
    }

    /// Endpoint `idx` (peer `uuid`) failed or was closed with `err`: its unexpected messages
    /// that can no longer complete (incomplete, or rendezvous whose data sits with the peer)
    /// become [`UnexpKind::Lost`], so that the receive that matches one fails with `err`
    /// rather than waiting for a later message; complete eager ones stay receivable. Gives how
    /// many were lost.
    pub(crate) fn peer_failed(&mut self, idx: usize, uuid: u64, err: &ucs::Error) -> usize {
        let dead: Vec<usize> = self
            .unexp
            .iter()
            .filter(|(_, u)| {
                u.ep == idx && (u.msg_key.is_some() || matches!(u.kind, UnexpKind::Rts { .. }))
            })
            .map(|(k, _)| k)
            .collect();
        let n = dead.len();
        for uid in dead {
            if self.matcher.is_unexpected_queued(uid as u64) {
                let u = &mut self.unexp[uid];
                let len = match &u.kind {
                    UnexpKind::Eager { total, .. } => *total,
                    UnexpKind::Rts { len, .. } => *len,
                    _ => 0,
                };
                let old = std::mem::replace(
                    &mut u.kind,
                    UnexpKind::Lost {
                        len,
                        err: err.clone(),
                    },
                );
                if let Some(mk) = u.msg_key.take() {
                    self.assembling.remove(&mk);
                }
                drop(old);
            } else {
                // Taken by a removing probe: its handle fails when received, and its slot
                // stays taken until then (see `Worker::msg_uid`).
                self.msgs_failed.push(uid);
            }
        }
        self.assembling.retain(|(s, _), _| *s != uuid);
        n
    }
}
