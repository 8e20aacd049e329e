//! The protocol thresholds, tested from made-up interface attributes.

use super::*;
use crate::config::RndvSchemeCfg;
use uct::{OpLimits, PerfModel};

fn attr(flags: IfaceFlags, lat: f64, bw: f64) -> IfaceAttr {
    IfaceAttr {
        flags,
        am: OpLimits {
            max_short: 128,
            max_bcopy: 8192,
            ..Default::default()
        },
        perf: PerfModel {
            send_overhead: 1e-7,
            recv_overhead: 1e-7,
            bandwidth: bw,
            latency: lat,
        },
        ..Default::default()
    }
}

#[test]
fn thresholds_follow_limits_and_overrides() {
    let am = attr(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY, 1e-6, 5e9);
    let cma = IfaceAttr {
        flags: IfaceFlags::GET_ZCOPY,
        perf: PerfModel {
            bandwidth: 12e9,
            latency: 1e-6,
            ..Default::default()
        },
        ..Default::default()
    };
    let cfg = UcpConfig::default();
    let p = ProtoConfig::compute(&am, false, Some(&cma), &cfg);
    assert_eq!(p.short_max, Some(128 - 16));
    assert_eq!(p.bcopy_single_max, 8192 - 16);
    assert_eq!(p.first_frag, 8192 - 40);
    assert_eq!(p.middle_frag, 8192 - 24);
    assert_eq!(p.rndv, RndvScheme::Get);
    assert!(
        p.rndv_thresh > 256 && p.rndv_thresh <= EAGER_CAP,
        "{}",
        p.rndv_thresh
    );
    let none = ProtoConfig::compute(&am, false, None, &cfg);
    assert_eq!(none.rndv, RndvScheme::AmPipeline);
    let cfg = UcpConfig {
        rndv_thresh: Some(1000),
        ..Default::default()
    };
    let p = ProtoConfig::compute(&am, false, Some(&cma), &cfg);
    assert_eq!(p.rndv_thresh, 1000);
    let t = p.table("posix/memory", Some("cma/memory"));
    assert!(
        t.contains("eager short") && t.contains("rendezvous get_zcopy"),
        "{t}"
    );
    assert!(t.contains("cma/memory"), "{t}");
}

/// A shared-memory-like AM lane (bcopy copies at 12 GB/s) beside a cross-memory-attach-like
/// RMA lane (8 GB/s, 400 ns per call): the pipeline takes rendezvous up to the cache bound,
/// get_zcopy above; a forced scheme applies to every size.
#[test]
fn rndv_pipeline_below_crossover_rma_above() {
    let mut am = attr(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY, 105e-9, 12e9);
    am.perf.send_overhead = 40e-9;
    am.perf.recv_overhead = 20e-9;
    let cma = IfaceAttr {
        flags: IfaceFlags::GET_ZCOPY | IfaceFlags::PUT_ZCOPY,
        perf: PerfModel {
            send_overhead: 400e-9,
            bandwidth: 8e9,
            latency: 80e-9,
            ..Default::default()
        },
        ..Default::default()
    };
    let p = ProtoConfig::compute(&am, false, Some(&cma), &UcpConfig::default());
    assert_eq!(p.rndv, RndvScheme::Get);
    assert_eq!(p.rndv_am_max, PIPELINE_CACHE_MAX);
    for n in [p.rndv_thresh, 64 << 10, 1 << 20, PIPELINE_CACHE_MAX] {
        assert_eq!(p.rndv_for(n), RndvScheme::AmPipeline, "{n}");
    }
    for n in [PIPELINE_CACHE_MAX + 1, 16 << 20] {
        assert_eq!(p.rndv_for(n), RndvScheme::Get, "{n}");
    }
    assert!(p.boundaries().contains(&(PIPELINE_CACHE_MAX + 1)));
    let t = p.table("posix/memory", Some("cma/memory"));
    let pipe = format!(
        "{:>10} .. {:<10} rendezvous RTR + AM pipeline",
        p.rndv_thresh,
        PIPELINE_CACHE_MAX + 1
    );
    assert!(t.contains(&pipe), "{t}");
    assert!(t.contains("rendezvous get_zcopy + ATS"), "{t}");

    // An RMA lane much faster per byte than the AM lane's copies leaves the pipeline the
    // small sizes only, where its lower fixed cost wins.
    let fast = IfaceAttr {
        perf: PerfModel {
            bandwidth: 100e9,
            ..cma.perf
        },
        ..cma.clone()
    };
    let f = ProtoConfig::compute(&am, false, Some(&fast), &UcpConfig::default());
    assert!(f.rndv_am_max < 64 << 10, "{}", f.rndv_am_max);

    for (scheme, want) in [
        (RndvSchemeCfg::Get, RndvScheme::Get),
        (RndvSchemeCfg::Put, RndvScheme::Put),
        (RndvSchemeCfg::Am, RndvScheme::AmPipeline),
    ] {
        let cfg = UcpConfig {
            rndv_scheme: scheme,
            ..Default::default()
        };
        let q = ProtoConfig::compute(&am, false, Some(&cma), &cfg);
        assert_eq!(q.rndv_am_max, 0, "{scheme:?}");
        for n in [64 << 10, 16 << 20] {
            assert_eq!(q.rndv_for(n), want, "{scheme:?} {n}");
        }
    }
    let cfg = UcpConfig {
        rndv_am_max: Some(100_000),
        ..Default::default()
    };
    let q = ProtoConfig::compute(&am, false, Some(&cma), &cfg);
    assert_eq!(q.rndv_for(100_000), RndvScheme::AmPipeline);
    assert_eq!(q.rndv_for(100_001), RndvScheme::Get);
    // No RMA lane: the pipeline moves everything, with no separate range.
    let none = ProtoConfig::compute(&am, false, None, &UcpConfig::default());
    assert_eq!((none.rndv, none.rndv_am_max), (RndvScheme::AmPipeline, 0));
}

/// The posix AM lane's and cma's models as the transports give them.
fn posix_and_cma() -> (IfaceAttr, IfaceAttr) {
    let mut am = attr(
        IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY | IfaceFlags::GET_ZCOPY,
        105e-9,
        12e9,
    );
    am.perf.send_overhead = 40e-9;
    am.perf.recv_overhead = 20e-9;
    let cma = IfaceAttr {
        flags: IfaceFlags::GET_ZCOPY | IfaceFlags::PUT_ZCOPY | IfaceFlags::SYNC_ONLY,
        perf: PerfModel {
            send_overhead: 400e-9,
            bandwidth: 12e9,
            latency: 80e-9,
            ..Default::default()
        },
        ..Default::default()
    };
    (am, cma)
}

/// Beside an RMA lane whose get is the receiver's copy (cma), the thresholds come from the
/// cost with both directions busy: a stream of 8 KiB messages stays eager, 16 KiB and up go by
/// one get (no AM pipeline range: its two copies per core lose to the one get at every size),
/// read in `rndv_frag` steps, and the AM lane's tag-offload rendezvous is left out.
#[test]
fn both_ways_model_picks_get_above_the_eager_crossover() {
    let (am, cma) = posix_and_cma();
    let p = ProtoConfig::compute(&am, false, Some(&cma), &UcpConfig::default());
    assert_eq!(p.rndv, RndvScheme::Get);
    assert!(
        p.rndv_thresh > 8192 && p.rndv_thresh <= 16384,
        "threshold {}",
        p.rndv_thresh
    );
    assert_eq!(p.rndv_thresh % 1024, 0);
    assert_eq!(p.rndv_am_max, 0);
    for n in [p.rndv_thresh, 64 << 10, 1 << 20, 16 << 20] {
        assert_eq!(p.rndv_for(n), RndvScheme::Get, "{n}");
    }
    assert_eq!(p.rndv_frag, RNDV_FRAG);
    assert_eq!(p.tm_rndv_min, usize::MAX);
    let t = p.table("posix/memory", Some("cma/memory"));
    assert!(!t.contains("pipeline"), "{t}");
    assert!(
        t.contains(&format!(
            "{:>10} .. {:<10} rendezvous get_zcopy + ATS",
            p.rndv_thresh, "inf"
        )),
        "{t}"
    );

    // The model itself: eager's two copies per core against the get's one copy and fixed
    // costs; the pipeline never wins.
    let m = BothWays {
        am: &am,
        r: &cma,
        frag: p.middle_frag,
        get_frag: RNDV_FRAG,
    };
    assert!(m.eager(8192) < m.get(8192));
    assert!(m.eager(16384) > m.get(16384));
    for n in [16 << 10, 1 << 20, 16 << 20] {
        assert!(m.pipeline(n) > m.get(n), "{n}");
    }
    // A slow get (half the AM lane's copy bandwidth, a long call) moves the threshold up and
    // leaves the pipeline the middle sizes.
    let slow = IfaceAttr {
        perf: PerfModel {
            bandwidth: 5e9,
            send_overhead: 5e-6,
            ..cma.perf
        },
        ..cma.clone()
    };
    let q = ProtoConfig::compute(&am, false, Some(&slow), &UcpConfig::default());
    assert!(q.rndv_thresh > p.rndv_thresh, "{}", q.rndv_thresh);
    assert!(q.rndv_am_max > 0, "{}", q.rndv_am_max);
}

/// Overrides keep their meaning beside a cma lane: a fixed threshold, a fragment size, and an
/// explicit pipeline bound, above which the AM lane's tag offload takes rendezvous as before.
#[test]
fn both_ways_model_follows_overrides() {
    let (am, cma) = posix_and_cma();
    let cfg = UcpConfig {
        rndv_thresh: Some(8192),
        rndv_frag_size: Some(128 << 10),
        rndv_am_max: Some(100_000),
        ..Default::default()
    };
    let p = ProtoConfig::compute(&am, false, Some(&cma), &cfg);
    assert_eq!(p.rndv_thresh, 8192);
    assert_eq!(p.rndv_frag, 128 << 10);
    assert_eq!(p.rndv_for(100_000), RndvScheme::AmPipeline);
    assert_eq!(p.rndv_for(100_001), RndvScheme::Get);
    assert_eq!(p.tm_rndv_min, 100_001);
    // Without a receiver-copy lane the old one-way model applies: the offload follows the
    // pipeline's range.
    let q = ProtoConfig::compute(&am, false, None, &UcpConfig::default());
    assert_eq!(q.tm_rndv_min, 1);
}
