//! The tag family's state: the matcher, the unexpected messages it indexes, the messages being
//! assembled from fragments, and the handles of messages taken by a removing probe.

use crate::tag::matcher::TagMatcher;
use crate::tag::message::MsgDrops;
use crate::tag::small::SmallUnexps;
use crate::tag::unexp::{Target, Unexp, UnexpKind};
use slab::Slab;
use std::collections::HashMap;
use std::sync::Arc;

/// What the tag family keeps per worker (the worker's `State::tag`).
#[derive(Default)]
pub(crate) struct TagState {
    pub(crate) matcher: TagMatcher,
    pub(crate) unexp: Slab<Unexp>,
    /// Small unexpected messages (see `tag::small`).
    pub(crate) small_unexp: SmallUnexps,
    /// Multi-fragment messages being assembled, by (sender uuid, message id).
    pub(crate) assembling: HashMap<(u64, u64), Target>,
    /// Shared with every [`Message`](crate::Message) handed out: the ones dropped unreceived.
    pub(crate) msg_drops: Arc<MsgDrops>,
    /// Unexpected messages taken by a removing probe whose sender failed before they were
    /// complete (their data stays until the handle is received or dropped).
    pub(crate) msgs_failed: Vec<usize>,
    /// Set by [`crate::Worker::fail_tag_recvs`]: a tag receive that finds no message waiting
    /// fails at once with it.
    pub(crate) recv_failure: Option<ucs::Error>,
}

impl TagState {
    /// Endpoint `idx` (peer `uuid`) failed: its unexpected messages that can no longer
    /// complete (incomplete, or rendezvous whose data sits with the failed peer) are dropped;
    /// complete eager ones stay receivable.
    pub(crate) fn peer_failed(&mut self, idx: usize, uuid: u64) {
        let dead: Vec<usize> = self
            .unexp
            .iter()
            .filter(|(_, u)| {
                u.ep == idx && (u.msg_key.is_some() || matches!(u.kind, UnexpKind::Rts { .. }))
            })
            .map(|(k, _)| k)
            .collect();
        for uid in dead {
            if !self.matcher.remove_unexpected(uid as u64) {
                // Taken by a removing probe: its handle fails when received, and its slot
                // stays taken until then (see `Worker::msg_uid`).
                self.msgs_failed.push(uid);
                continue;
            }
            let u = self.unexp.remove(uid);
            if let Some(mk) = u.msg_key {
                self.assembling.remove(&mk);
            }
        }
        self.assembling.retain(|(s, _), _| *s != uuid);
    }
}
