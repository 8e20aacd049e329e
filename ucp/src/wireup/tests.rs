//! Lane selection and the AM switch gate, tested without a transport.

use super::*;
use crate::address::TlAddress;
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

fn peer(names: &[&str]) -> WorkerAddress {
    WorkerAddress {
        uuid: 0xabc,
        tls: names
            .iter()
            .map(|n| TlAddress {
                tl_name: n.to_string(),
                device_addr: vec![],
                iface_addr: vec![],
            })
            .collect(),
    }
}

#[test]
fn prefers_reachable_fastest_am_and_separate_rma() {
    let am = IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY;
    let tcp = attr(am, 10e-6, 1e9);
    let posix = attr(am, 0.3e-6, 10e9);
    let cma = IfaceAttr {
        flags: IfaceFlags::GET_ZCOPY | IfaceFlags::PUT_ZCOPY,
        perf: PerfModel {
            bandwidth: 12e9,
            latency: 1e-6,
            ..Default::default()
        },
        ..Default::default()
    };
    let locals = [
        LocalTl {
            tl_name: "tcp",
            dev_name: "lo",
            attr: &tcp,
            md_reg: true,
        },
        LocalTl {
            tl_name: "posix",
            dev_name: "memory",
            attr: &posix,
            md_reg: false,
        },
        LocalTl {
            tl_name: "cma",
            dev_name: "memory",
            attr: &cma,
            md_reg: true,
        },
    ];
    let p = peer(&["tcp", "posix", "cma"]);
    let sel = select_lanes(&locals, &p, |_, _| Ok(())).unwrap();
    assert_eq!(
        sel.am,
        LanePick {
            local: 1,
            remote: 1
        }
    );
    assert_eq!(
        sel.rma,
        Some(LanePick {
            local: 2,
            remote: 2
        })
    );
    // A remote peer: shared memory does not reach, tcp carries everything.
    let sel = select_lanes(&locals, &p, |l, _| {
        if l == 0 {
            Ok(())
        } else {
            Err("different host".into())
        }
    })
    .unwrap();
    assert_eq!(
        sel.am,
        LanePick {
            local: 0,
            remote: 0
        }
    );
    // This tcp offers no zero-copy RMA, so rendezvous will use the AM pipeline.
    assert_eq!(sel.rma, None);
}

#[test]
fn connect_to_ep_only_lane_serves_rma_not_am() {
    // tcp also offers (emulated) RMA and models itself faster here, yet RMA goes to the
    // separate rc_verbs lane, beside the AM traffic.
    let tcp = attr(
        IfaceFlags::AM_SHORT
            | IfaceFlags::AM_BCOPY
            | IfaceFlags::GET_ZCOPY
            | IfaceFlags::PUT_ZCOPY
            | IfaceFlags::CONNECT_TO_IFACE,
        1e-6,
        20e9,
    );
    let mut rc = attr(
        IfaceFlags::AM_SHORT
            | IfaceFlags::AM_BCOPY
            | IfaceFlags::GET_ZCOPY
            | IfaceFlags::PUT_ZCOPY
            | IfaceFlags::CONNECT_TO_EP,
        1e-6,
        10e9,
    );
    rc.atomics.op64 = uct::AtomicOps::all();
    let locals = [
        LocalTl {
            tl_name: "tcp",
            dev_name: "eth0",
            attr: &tcp,
            md_reg: true,
        },
        LocalTl {
            tl_name: "rc_verbs",
            dev_name: "rxe0:1",
            attr: &rc,
            md_reg: true,
        },
    ];
    let sel = select_lanes(&locals, &peer(&["tcp", "rc_verbs"]), |_, _| Ok(())).unwrap();
    assert_eq!(
        sel.am,
        LanePick {
            local: 0,
            remote: 0
        }
    );
    assert_eq!(
        sel.rma,
        Some(LanePick {
            local: 1,
            remote: 1
        })
    );
    assert_eq!(sel.amo, None);
    // rc_verbs alone cannot carry the wire-up: no AM lane, and the error says why.
    let e = select_lanes(&locals[1..], &peer(&["rc_verbs"]), |_, _| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("connects endpoint to endpoint"), "{e}");
    assert!(e.contains("add tcp to RUCX_TLS"), "{e}");
}

#[test]
fn rc_lane_takes_over_am_when_it_can() {
    let rc = attr(
        IfaceFlags::AM_SHORT
            | IfaceFlags::AM_BCOPY
            | IfaceFlags::GET_ZCOPY
            | IfaceFlags::PUT_ZCOPY
            | IfaceFlags::CONNECT_TO_EP,
        1e-6,
        10e9,
    );
    let cfg = UcpConfig::default();
    assert!(cfg.am_lane_switch);
    assert!(carries_am(&rc, &cfg));
    // Switched off by configuration: AM stays on the wire-up lane.
    let off = UcpConfig {
        am_lane_switch: false,
        ..Default::default()
    };
    assert!(!carries_am(&rc, &off));
    // RMA-only, or segments too small for a control message with a remote key.
    let mut rma_only = rc.clone();
    rma_only.flags = IfaceFlags::GET_ZCOPY | IfaceFlags::CONNECT_TO_EP;
    assert!(!carries_am(&rma_only, &cfg));
    let mut tiny = rc.clone();
    tiny.am.max_bcopy = AM_MIN_BCOPY - 1;
    assert!(!carries_am(&tiny, &cfg));
    // After the switch the thresholds follow the new lane's limits.
    let mut rc_small = rc.clone();
    rc_small.am.max_bcopy = 4096;
    rc_small.am.max_short = 60;
    let p = ProtoConfig::compute(&rc_small, true, Some(&rc_small), &cfg);
    assert_eq!(p.short_max, Some(60 - 16));
    // Eager-short up to short_max, and below a lower rendezvous threshold once set.
    assert!(p.tag_short(0) && p.tag_short(60 - 16) && !p.tag_short(60 - 15));
    let low = ProtoConfig {
        tag_rndv_thresh: 10,
        ..p
    }
    .with_tag_short_lim();
    assert!(low.tag_short(9) && !low.tag_short(10));
    let none = ProtoConfig {
        short_max: None,
        ..p
    }
    .with_tag_short_lim();
    assert!(!none.tag_short(0));
    assert_eq!(p.bcopy_single_max, 4096 - 16);
    assert_eq!(p.rndv, RndvScheme::Get);
    // One interface for both lanes: every rendezvous size goes by its zero-copy get.
    assert_eq!(p.rndv_am_max, 0);
    // The same limits on another interface's RMA lane are weighed against the pipeline.
    let other = rc_small.clone();
    assert!(ProtoConfig::compute(&rc_small, true, Some(&other), &cfg).rndv_am_max > 0);
    let t = p.table("rc_verbs/rxe0:1", Some("rc_verbs/rxe0:1"));
    assert!(
        t.contains("eager short") && t.contains("rc_verbs/rxe0:1"),
        "{t}"
    );
    assert!(!t.contains("tcp"), "{t}");
}

#[test]
fn switch_gate_holds_new_lane_until_marker_in_order() {
    let mut g = AmSwitchGate::new();
    // Old lane: handled at once, before and after anything held.
    assert_eq!(g.admit(false, 2, b"tcp-1"), Admit::Now);
    assert_eq!(g.admit(true, 2, b"rc-1"), Admit::Held);
    assert_eq!(g.admit(true, 4, b"rc-2"), Admit::Held);
    assert_eq!(g.admit(false, 2, b"tcp-2"), Admit::Now);
    assert_eq!(g.held(), 2);
    assert!(!g.switched());
    let out: Vec<_> = g.marker(false).unwrap().into_iter().collect();
    assert_eq!(out, vec![(2, b"rc-1".to_vec()), (4, b"rc-2".to_vec())]);
    assert!(g.switched());
    assert_eq!(g.held(), 0);
    assert_eq!(g.admit(true, 2, b"rc-3"), Admit::Now);
    // A second marker is a protocol error.
    assert!(matches!(g.marker(false), Err(Error::Wire(_))));
    // A marker on the new lane is a protocol error, and releases nothing.
    let mut g = AmSwitchGate::new();
    assert_eq!(g.admit(true, 2, b"x"), Admit::Held);
    assert!(matches!(g.marker(true), Err(Error::Wire(_))));
    assert_eq!(g.held(), 1);
    g.clear();
    assert_eq!(g.held(), 0);
}

#[test]
fn unreachable_names_every_transport_and_reason() {
    let am = IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY;
    let a = attr(am, 1e-6, 1e9);
    let locals = [
        LocalTl {
            tl_name: "posix",
            dev_name: "memory",
            attr: &a,
            md_reg: false,
        },
        LocalTl {
            tl_name: "tcp",
            dev_name: "eth0",
            attr: &a,
            md_reg: false,
        },
        LocalTl {
            tl_name: "self",
            dev_name: "memory0",
            attr: &a,
            md_reg: false,
        },
    ];
    let p = peer(&["posix", "tcp"]);
    let e = select_lanes(&locals, &p, |l, _| {
        Err(if l == 0 {
            "needs the same host".into()
        } else {
            "no route from eth0".into()
        })
    })
    .unwrap_err();
    let t = e.to_string();
    assert!(matches!(e, Error::Unreachable(_)));
    assert!(t.contains("posix/memory: needs the same host"), "{t}");
    assert!(t.contains("tcp/eth0: no route from eth0"), "{t}");
    assert!(
        t.contains("self/memory0: the peer has no self interface"),
        "{t}"
    );
    let e = select_lanes(&[], &p, |_, _| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("RUCX_TLS"), "{e}");
}
