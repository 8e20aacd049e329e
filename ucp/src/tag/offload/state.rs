//! What the tag-offload family keeps per worker: the interface receives are posted to, the
//! receives and rendezvous the transport holds, and its counters.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::unreachable,
        clippy::panic
    )
)]

use crate::rma::Keep;
use crate::wireup::TM_THRESH;
use crate::worker::ep::IfaceInfo;
use uct::Iface as _;
use uct::{AnyIface, IfaceFlags, MemHandle};

/// Tag-offload state of a worker.
#[derive(Default)]
pub(crate) struct TmState {
    /// The interface receives are posted to, and its canceler.
    pub(super) iface: Option<(usize, uct::TagRecvCanceler)>,
    /// Every interface that could be the tag interface: (index, canceler, max posted), by
    /// latency, lowest first.
    pub(super) cands: Vec<(usize, uct::TagRecvCanceler, usize)>,
    /// Receives (wire ids) posted to the transport, with their registrations.
    pub(super) posted: Vec<(u64, MemHandle)>,
    pub(super) max_posted: usize,
    /// Receives in the matcher's expected queue that are not offloaded.
    pub(super) sw_only: usize,
    /// Messages sent by tag offload.
    pub(super) sent: u64,
    /// Receives completed by the transport.
    pub(super) matched: u64,
    /// Rendezvous sent by `tag_rndv_zcopy` and not finished: (send wire id, operation id, the
    /// registration the transport reads the data through).
    pub(super) rndv_ops: Vec<(u64, u64, MemHandle)>,
    /// Rendezvous sent by tag offload.
    pub(super) sent_rndv: u64,
    /// Rendezvous the peer's transport pulled (no ATS).
    pub(super) matched_rndv: u64,
    /// Sends reading their data in place from a [`MemMap`](crate::MemMap)'s shared segment, not finished.
    pub(super) mapped: Vec<MappedSend>,
    /// Rendezvous sent from a mapped segment (by tag offload or the software RTS).
    pub(super) sent_mapped: u64,
}

/// A rendezvous send whose data stays in a [`MemMap`](crate::MemMap)'s shared segment until it finishes.
pub(super) struct MappedSend {
    /// Wire id of the send request.
    pub(super) wire: u64,
    /// Address and length of the data inside the mapping.
    pub(super) addr: usize,
    pub(super) len: usize,
    /// Keeps the memory alive (the `MemMap` may be dropped meanwhile).
    pub(super) _keep: Keep,
}

impl TmState {
    /// Finds the interfaces with tag offload and a receive canceler; the one with the lowest
    /// latency is the tag interface until endpoints connect (see [`TmState::repick`]).
    pub(crate) fn init(&mut self, ifaces: &[AnyIface], info: &[IfaceInfo]) {
        let mut cands: Vec<(f64, usize, uct::TagRecvCanceler, usize)> = Vec::new();
        for (i, iface) in ifaces.iter().enumerate() {
            let a = &info[i].attr;
            if !a.flags.contains(IfaceFlags::TAG_EAGER_BCOPY) || a.tag.recv_max_outstanding == 0 {
                continue;
            }
            let Some(c) = iface.tag_recv_canceler() else {
                continue;
            };
            cands.push((a.perf.latency, i, c, a.tag.recv_max_outstanding));
        }
        cands.sort_by(|a, b| a.0.total_cmp(&b.0));
        let most = cands.iter().map(|c| c.3).max().unwrap_or(0);
        self.posted = Vec::with_capacity(most);
        self.cands = cands.into_iter().map(|(_, i, c, m)| (i, c, m)).collect();
        if let Some((i, c, m)) = self.cands.first().cloned() {
            self.max_posted = m;
            self.iface = Some((i, c));
        }
    }

    /// For a receive of `len` bytes under `mask` just queued in the matcher: false when it
    /// cannot be posted to the transport (a wildcard, a small one, or a software-only receive
    /// waiting before it), and then counts it as software-only; true when [`after_post`](crate::tag::offload::after_post) is
    /// to decide.
    #[inline]
    pub(crate) fn may_post(&mut self, mask: u64, len: usize) -> bool {
        if mask != crate::tag_match::EXACT || self.sw_only > 0 || len < TM_THRESH {
            self.sw_only += 1;
            return false;
        }
        true
    }
}

/// Tag-offload counters of a worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TmStats {
    /// Whether this worker posts receives to a transport (`RUCX_TM_ENABLE` and a tag interface).
    pub posting: bool,
    /// Eager messages sent as tagged frames.
    pub sent: u64,
    /// Receives the transport matched and filled.
    pub matched: u64,
    /// Receives currently posted to the transport.
    pub posted: usize,
    /// Rendezvous sent by `tag_rndv_zcopy`.
    pub sent_rndv: u64,
    /// Of those, pulled by the peer's transport into a posted receive (the rest went by the
    /// software rendezvous).
    pub matched_rndv: u64,
    /// Rendezvous sent by [`Worker::tag_send_mapped`](crate::Worker::tag_send_mapped) with
    /// the data in place in a shared segment (by tag offload or the software RTS).
    pub sent_mapped: u64,
}
