//! The protocol thresholds of one endpoint configuration, chosen from the lanes' performance
//! models: eager short, bcopy and zcopy limits, the rendezvous threshold and the rendezvous data
//! path per size, and the table `RUCX_PROTO_INFO` prints.

use crate::config::{RndvSchemeCfg, UcpConfig};
use crate::wire::{EagerFirstHdr, EagerHdr, FragHdr, PREFIX_LEN};
use std::fmt::Write as _;
use uct::{IfaceAttr, IfaceFlags};

/// Smallest eager message sent by tag offload: smaller ones arrive whole with their header, so
/// the active-message path costs the same copy.
pub const TM_THRESH: usize = 1025;

/// What a tag send's caller waits for, which moves its rendezvous threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagSendMode {
    /// Completes when the data has left the caller's buffer (UCX's `ucp_tag_send_nbx`).
    Standard,
    /// Completes when the receiver has matched the message (`ucp_tag_send_sync_nbx`).
    Sync,
    /// As `Standard`, from a caller that waits for the completion at once (a blocking send:
    /// UCX's `UCP_OP_ATTR_FLAG_FAST_CMPL`). Same thresholds as `Standard`: with both directions
    /// busy, a blocking send is faster by rendezvous from the same size on (see
    /// `ProtoConfig::compute`'s note on it).
    FastCompletion,
}

/// How rendezvous moves data for this configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RndvScheme {
    /// Receiver reads with `get_zcopy` then sends ATS.
    Get,
    /// Receiver asks (RTR) and the sender writes with `put_zcopy` then sends ATP.
    Put,
    /// No zero-copy RMA: the sender streams the data in active messages after the RTR.
    AmPipeline,
}

/// Protocol thresholds of one endpoint configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProtoConfig {
    /// Largest tag payload sent with `am_short` (`None`: the lane has no AM_SHORT).
    pub short_max: Option<usize>,
    /// Largest tag payload of one bcopy fragment.
    pub bcopy_single_max: usize,
    /// Payload of a first fragment.
    pub first_frag: usize,
    /// Payload of a middle fragment (also rendezvous AM fragments).
    pub middle_frag: usize,
    /// Messages of at least this size go by rendezvous.
    pub rndv_thresh: usize,
    /// Non-synchronous tag messages of at least this size go by rendezvous: `rndv_thresh`, or
    /// more where the AM lane's tag offload receives eager messages straight into posted
    /// buffers (set by the worker, see `Core::tm_adjust_proto`).
    pub tag_rndv_thresh: usize,
    /// Rendezvous data path of messages above `rndv_am_max`.
    pub rndv: RndvScheme,
    /// Rendezvous messages up to this size stream through the AM lane ([`RndvScheme::AmPipeline`])
    /// although `rndv` is `Get` or `Put` (0: none). See [`ProtoConfig::rndv_for`].
    pub rndv_am_max: usize,
    /// Bytes a rendezvous read on a shared-memory device (cma, or the sender's mapped segment)
    /// moves in one step; the receiver's progress runs between steps (see `RndvFamily::get_step`).
    pub rndv_frag: usize,
    /// Rendezvous sends of at least this size may go by the AM lane's tag offload
    /// (`TAG_RNDV_ZCOPY`) where it has one; smaller ones go by ucp's RTS (`usize::MAX`: none).
    pub tm_rndv_min: usize,
    /// Eager messages from caller-owned vectors of at least this size go by `am_zcopy`
    /// (`None`: the AM lane cannot).
    pub zcopy_thresh: Option<usize>,
    /// Non-synchronous tag payloads shorter than this go eager-short: `short_max + 1` capped
    /// by `tag_rndv_thresh` and the tag offload threshold, 0 without `short_max`. Derived from
    /// the fields above by [`ProtoConfig::with_tag_short_lim`], so the send tests one number.
    pub(crate) tag_short_lim: usize,
}

/// Bytes per second assumed for a memory copy (bcopy costs one on each side) in the one-way
/// model.
const MEMCPY_BW: f64 = 5e9;
/// Messages this large are never eager when rendezvous is possible: bounds unexpected buffering.
const EAGER_CAP: usize = 512 << 10;
/// Bytes of one shared-memory rendezvous read step (`RUCX_RNDV_FRAG_SIZE` overrides it): UCX's
/// cma segment. tag_bibw over posix + cma (--mem heap, medians of 5, SCHED_FIFO, 2-core AMD
/// EPYC VM) moved 1 MiB at 7.5 GiB/s per direction in 512 KiB steps against 6.8-6.9 in 128 KiB
/// steps or in one call; at 16 MiB all three were within 5% (3.7-4.0 GiB/s).
const RNDV_FRAG: usize = 512 << 10;
/// ucp's own work per rendezvous message on each core beyond the AM lane's per-message
/// overheads and the RMA lane's call: the request, registering the data, packing and
/// unpacking its key, matching the RTS, finishing on the ATS. With the posix and cma models it
/// puts the threshold at 12 KiB, between the sizes measured on either side: tag_bibw over
/// posix + cma (--mem heap, medians of 3) moved 8 KiB at 4.0 GiB/s per direction eager
/// against 3.7 by rendezvous, 16 KiB at 4.4 against 6.0, 32 KiB at 5.2 against 9.8.
const RNDV_OVERHEAD: f64 = 0.5e-6;
/// Largest rendezvous the AM pipeline takes from an RMA lane under the auto scheme in the
/// one-way model, even where the performance models favour the pipeline beyond it: the
/// pipeline's two overlapped copies only beat one copy while the message stays in the cores'
/// caches.
const PIPELINE_CACHE_MAX: usize = 4 << 20;

/// The cost model with traffic both ways, for an RMA lane whose get is one copy by the
/// receiver's CPU (`SYNC_ONLY`: cma). UCX 1.22's proto v2 over posix + cma (`UCX_PROTO_INFO=y`)
/// picks "rendezvous zero-copy read from remote" by cma from 5029 bytes (6031 with several
/// messages in flight, 256 KiB for fast-completion sends), from one-way costs; this model
/// keeps eager longer, since with both directions busy a round trip per message is not hidden. Each core sends a stream of `n`-byte messages and
/// receives one, and a protocol's cost is the time one core spends on its share of one
/// message each way: nothing of it overlaps with the other direction, which keeps the other
/// core just as busy. (One-way ping-pong hides what the receiver does while the sender copies,
/// so eager's two copies look like one; with both directions busy both are on the clock.)
struct BothWays<'a> {
    am: &'a IfaceAttr,
    r: &'a IfaceAttr,
    /// Payload of an eager or pipeline fragment.
    frag: usize,
    /// Bytes of one get step.
    get_frag: usize,
}

impl BothWays<'_> {
    /// A send and a receive overhead of the AM lane: one message out and one in.
    fn per_msg(&self) -> f64 {
        self.am.perf.send_overhead + self.am.perf.recv_overhead
    }

    /// Seconds per byte of one copy through the AM lane.
    fn am_copy(&self) -> f64 {
        if self.am.perf.bandwidth > 0.0 {
            1.0 / self.am.perf.bandwidth
        } else {
            0.0
        }
    }

    /// Eager: a send and a receive per fragment, the copy of this core's message into the
    /// FIFO and the copy of the peer's out of it.
    fn eager(&self, n: usize) -> f64 {
        n.div_ceil(self.frag).max(1) as f64 * self.per_msg() + 2.0 * n as f64 * self.am_copy()
    }

    /// Get: the RTS and the ATS (each out and in), ucp's rendezvous work, the RMA lane's call
    /// per step and one copy of the peer's message.
    fn get(&self, n: usize) -> f64 {
        let bw = if self.r.perf.bandwidth > 0.0 {
            n as f64 / self.r.perf.bandwidth
        } else {
            0.0
        };
        2.0 * self.per_msg()
            + RNDV_OVERHEAD
            + n.div_ceil(self.get_frag).max(1) as f64 * self.r.perf.send_overhead
            + bw
    }

    /// Pipeline: the RTS and the RTR, ucp's rendezvous work, then the fragments as eager.
    fn pipeline(&self, n: usize) -> f64 {
        2.0 * self.per_msg() + RNDV_OVERHEAD + self.eager(n)
    }

    /// The smallest size (in steps of 1 KiB, above one bcopy fragment) from which a get
    /// costs less than eager, at most [`EAGER_CAP`].
    fn rndv_thresh(&self, bcopy_single_max: usize) -> usize {
        let first = bcopy_single_max + 1;
        let mut n = first.next_multiple_of(1024);
        while n < EAGER_CAP && self.get(n) >= self.eager(n) {
            n += 1024;
        }
        n.max(first)
    }

    /// The largest power-of-two size (up to [`EAGER_CAP`]) the pipeline moves for less than
    /// a get, 0 if none.
    fn pipeline_max(&self) -> usize {
        let mut best = 0;
        let mut n = self.frag.next_power_of_two();
        while n <= EAGER_CAP {
            if self.pipeline(n) < self.get(n) {
                best = n;
            }
            n *= 2;
        }
        best
    }
}

/// The rendezvous threshold of the one-way model (every RMA lane but a receiver's copy): the
/// first power of two above one bcopy fragment where the RTS, the RMA transfer and the ATS
/// cost less than eager's fragments and copies.
fn one_way_thresh(am: &IfaceAttr, r: &IfaceAttr, frag: usize, bcopy_single_max: usize) -> usize {
    // Eager: fragments over the AM lane plus a copy on each side.
    let eager = |n: usize| {
        let frags = n.div_ceil(frag).max(1) as f64;
        frags * (am.perf.send_overhead + am.perf.recv_overhead)
            + am.perf.latency
            + if am.perf.bandwidth > 0.0 {
                n as f64 / am.perf.bandwidth
            } else {
                0.0
            }
            + 2.0 * n as f64 / MEMCPY_BW
    };
    // Rendezvous: RTS, the RMA transfer, and ATS.
    let rdv = |n: usize| 2.0 * am.perf.time_for(64) + r.perf.time_for(n);
    // Rendezvous costs a round trip more than one eager fragment, so it starts above the
    // single-fragment size at the earliest.
    let mut n = (bcopy_single_max + 1).next_power_of_two();
    while n < EAGER_CAP && rdv(n) >= eager(n) {
        n *= 2;
    }
    n.max(bcopy_single_max + 1)
}

impl ProtoConfig {
    /// Computes the thresholds from the AM and RMA lanes' capabilities, with `cfg`'s overrides.
    pub fn compute(
        am: &IfaceAttr,
        am_md_reg: bool,
        rma: Option<&IfaceAttr>,
        cfg: &UcpConfig,
    ) -> Self {
        let only_hdr = PREFIX_LEN + EagerHdr::LEN;
        let short_max = (am.flags.contains(IfaceFlags::AM_SHORT) && am.am.max_short >= only_hdr)
            .then(|| am.am.max_short - only_hdr);
        let bcopy = am.am.max_bcopy;
        let bcopy_single_max = bcopy.saturating_sub(only_hdr);
        let first_frag = bcopy.saturating_sub(PREFIX_LEN + EagerFirstHdr::LEN).max(1);
        let middle_frag = bcopy.saturating_sub(PREFIX_LEN + FragHdr::LEN).max(1);
        let get = rma.is_some_and(|r| r.flags.contains(IfaceFlags::GET_ZCOPY));
        let put = rma.is_some_and(|r| r.flags.contains(IfaceFlags::PUT_ZCOPY));
        let rndv = match cfg.rndv_scheme {
            RndvSchemeCfg::Auto | RndvSchemeCfg::Get if get => RndvScheme::Get,
            RndvSchemeCfg::Auto | RndvSchemeCfg::Put if put => RndvScheme::Put,
            RndvSchemeCfg::Get if put => RndvScheme::Put,
            _ => RndvScheme::AmPipeline,
        };
        let rndv_frag = cfg.rndv_frag_size.unwrap_or(RNDV_FRAG);
        // An RMA lane whose get is one copy by the receiver's CPU (cma: the call returns when
        // the bytes are there) is weighed with both directions busy; others by one-way cost.
        let both_ways = match (rndv, rma) {
            (RndvScheme::Get, Some(r)) if r.flags.contains(IfaceFlags::SYNC_ONLY) => {
                Some(BothWays {
                    am,
                    r,
                    frag: middle_frag,
                    get_frag: rndv_frag,
                })
            }
            _ => None,
        };
        let auto = match (rndv, rma, &both_ways) {
            (RndvScheme::AmPipeline, _, _) | (_, None, _) => EAGER_CAP,
            (_, _, Some(m)) => m.rndv_thresh(bcopy_single_max),
            (_, Some(r), None) => one_way_thresh(am, r, middle_frag, bcopy_single_max),
        };
        let rndv_thresh = cfg.rndv_thresh.unwrap_or(auto);
        // A blocking send (`TagSendMode::FastCompletion`) takes the same threshold. Until
        // 2026-12-07 such sends stayed eager up to 128 KiB where the both-ways model sets the
        // threshold (measured then: MPI_Sendrecv at 64 KiB eager 7.6-8.1 GB/s per direction
        // against rendezvous 4.5-6.8). Measured again with `bench/sendrecv.c` under Open MPI
        // (posix + cma, 2-core VM, ranks under SCHED_FIFO, MB/s per direction), rendezvous
        // against eager against UCX 1.22: 16 KiB 3789-4092 / 3375-3540 / 4769-4787, 32 KiB
        // 6996-7026 / 3534-3862 / 6919-7014, 64 KiB 10545-11341 / 4100-4430 / 6006-6789,
        // 128 KiB 12793 / 5568 / 6041-7321: the rendezvous' single copy wins from the
        // model's threshold on.
        // The pipeline is weighed only against another interface's RMA (shared memory's AM
        // lane against cma): where one interface serves both lanes (`rma` is `am` itself), its
        // zero-copy moves the same bytes over the same link without the pipeline's two copies,
        // which the models do not count.
        let rndv_am_max = match (rndv, rma) {
            (RndvScheme::Get | RndvScheme::Put, Some(r))
                if cfg.rndv_scheme == RndvSchemeCfg::Auto
                    && am.flags.contains(IfaceFlags::AM_BCOPY)
                    && !std::ptr::eq(am, r) =>
            {
                cfg.rndv_am_max.unwrap_or_else(|| match &both_ways {
                    Some(m) => m.pipeline_max(),
                    None => pipeline_max(am, r, middle_frag),
                })
            }
            _ => 0,
        };
        // The AM lane's own (tag offload) rendezvous reads a whole message in one call on the
        // receiver; where ucp's get reads it in fragments between progress steps, that wins
        // (tag_bibw 64 KiB over posix + cma: 8.4 GiB/s per direction against 6.3). An explicit
        // `RUCX_RNDV_AM_MAX` hands every rendezvous above it to the offload, as before.
        let tm_rndv_min = match (cfg.rndv_am_max, &both_ways) {
            (None, Some(_)) => usize::MAX,
            _ => rndv_am_max.saturating_add(1),
        };
        let zcopy_thresh = (am_md_reg
            && am.flags.contains(IfaceFlags::AM_ZCOPY)
            && am.am.max_zcopy > 0
            && am.am.max_hdr >= PREFIX_LEN + EagerFirstHdr::LEN)
            .then(|| cfg.zcopy_thresh.unwrap_or(bcopy_single_max + 1));
        ProtoConfig {
            short_max,
            bcopy_single_max,
            first_frag,
            middle_frag,
            rndv_thresh,
            tag_rndv_thresh: rndv_thresh,
            rndv,
            rndv_am_max,
            rndv_frag,
            tm_rndv_min,
            zcopy_thresh,
            tag_short_lim: 0,
        }
        .with_tag_short_lim()
    }

    /// This configuration with `tag_short_lim` derived from its other fields (again after a
    /// change of `short_max` or `tag_rndv_thresh`).
    #[must_use]
    pub(crate) fn with_tag_short_lim(mut self) -> Self {
        self.tag_short_lim = self.short_max.map_or(0, |m| {
            m.saturating_add(1).min(self.tag_rndv_thresh).min(TM_THRESH)
        });
        self
    }

    /// Whether a non-synchronous tag payload of `len` bytes goes eager-short (it fits the AM
    /// lane's `am_short` and lies below the rendezvous and tag offload thresholds).
    #[inline(always)]
    pub(crate) fn tag_short(&self, len: usize) -> bool {
        len < self.tag_short_lim
    }

    /// The rendezvous data path of a `len`-byte message.
    #[inline]
    pub fn rndv_for(&self, len: usize) -> RndvScheme {
        if len <= self.rndv_am_max {
            RndvScheme::AmPipeline
        } else {
            self.rndv
        }
    }

    /// The rendezvous threshold of a tag send of `mode`.
    #[inline]
    pub fn tag_thresh(&self, mode: TagSendMode) -> usize {
        match mode {
            TagSendMode::Standard => self.tag_rndv_thresh,
            TagSendMode::Sync => self.rndv_thresh,
            TagSendMode::FastCompletion => self.tag_rndv_thresh,
        }
    }

    /// The sizes where the protocol changes: eager short/bcopy limit, first multi-fragment size,
    /// rendezvous threshold (each is the first size of the next protocol, minus one for limits).
    pub fn boundaries(&self) -> Vec<usize> {
        let mut v = Vec::new();
        if let Some(s) = self.short_max {
            v.push(s);
        }
        v.push(self.bcopy_single_max);
        v.push(self.first_frag + self.middle_frag);
        if self.rndv_thresh < (1 << 30) {
            v.push(self.rndv_thresh);
            if self.rndv_am_max >= self.rndv_thresh && self.rndv_am_max < (1 << 30) {
                v.push(self.rndv_am_max + 1);
            }
        }
        v
    }

    /// The protocol table (size ranges → protocol → lanes), as `RUCX_PROTO_INFO` prints it.
    pub fn table(&self, am_lane: &str, rma_lane: Option<&str>) -> String {
        let mut s = String::new();
        let mut from = 0usize;
        let mut row = |s: &mut String, to: usize, proto: &str, lanes: &str| {
            if to > from || (to == from && from == 0) {
                let end = if to == usize::MAX {
                    "inf".to_string()
                } else {
                    format!("{to}")
                };
                let _ = writeln!(s, "  {from:>10} .. {end:<10} {proto:<28} {lanes}");
            }
            from = from.max(to);
        };
        let rt = self.rndv_thresh;
        if let Some(sm) = self.short_max {
            row(&mut s, sm.min(rt), "eager short", am_lane);
        }
        row(
            &mut s,
            self.bcopy_single_max.min(rt),
            "eager bcopy",
            am_lane,
        );
        match self.zcopy_thresh {
            Some(z) if z < rt => {
                // `row` skips empty ranges, so a threshold below the current start is harmless.
                row(&mut s, z, "multi-fragment eager bcopy", am_lane);
                row(&mut s, rt, "eager zcopy (owned vectors)", am_lane);
            }
            _ => row(&mut s, rt, "multi-fragment eager bcopy", am_lane),
        }
        let name = |r: RndvScheme| match r {
            RndvScheme::Get => "rendezvous get_zcopy + ATS",
            RndvScheme::Put => "rendezvous RTR + put_zcopy",
            RndvScheme::AmPipeline => "rendezvous RTR + AM pipeline",
        };
        let rma_lanes = format!("{am_lane} + {}", rma_lane.unwrap_or("-"));
        if self.rndv_am_max > 0 {
            let to = self.rndv_am_max.saturating_add(1);
            row(&mut s, to, name(RndvScheme::AmPipeline), am_lane);
        }
        let lanes = match self.rndv {
            RndvScheme::AmPipeline => am_lane,
            _ => &rma_lanes,
        };
        row(&mut s, usize::MAX, name(self.rndv), lanes);
        s
    }
}

/// The largest power-of-two rendezvous size (up to [`PIPELINE_CACHE_MAX`]) the AM pipeline
/// moves sooner than the RMA lane by the performance models, 0 if none.
///
/// Pipeline: the RTR, then one send and one receive overhead per fragment, the data at the AM
/// lane's bandwidth (its bcopy copies in and out of the transport's buffers overlap on the two
/// cores). RMA: the lane's send overhead and latency, the data at its bandwidth, then the ATS.
fn pipeline_max(am: &IfaceAttr, r: &IfaceAttr, frag: usize) -> usize {
    if am.perf.bandwidth <= 0.0 || r.perf.bandwidth <= 0.0 {
        return 0;
    }
    let pipe = |n: usize| {
        am.perf.latency
            + n.div_ceil(frag) as f64 * (am.perf.send_overhead + am.perf.recv_overhead)
            + n as f64 / am.perf.bandwidth
    };
    let rma = |n: usize| {
        r.perf.send_overhead + r.perf.latency + n as f64 / r.perf.bandwidth + am.perf.latency
    };
    let mut best = 0;
    let mut n = frag.next_power_of_two();
    while n <= PIPELINE_CACHE_MAX {
        if pipe(n) < rma(n) {
            best = n;
        }
        n *= 2;
    }
    best
}

#[cfg(test)]
mod tests;
