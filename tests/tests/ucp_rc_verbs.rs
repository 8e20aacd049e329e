//! Two ucp workers in one process over rc_verbs (RMA lane) + tcp (AM lane and wire-up).
//!
//! rc_verbs endpoints connect endpoint to endpoint, so ucp creates them unconnected and swaps
//! their addresses over the tcp AM lane; rendezvous then reads with `get_zcopy` over rc_verbs.
//! Skips with a note when the machine has no rc_verbs device (run it inside the Soft-RoCE VM:
//! `tests/rdma-vm/ci.sh`). A deadline on every wait is the watchdog: a stuck wire-up or
//! transfer fails the test instead of hanging it.

use std::time::{Duration, Instant};
use ucp::wireup::RndvScheme;
use ucp::{
    Completion, Context, ContextParams, EpHandle, EpParams, Features, Op, UcpConfig, Worker,
    TAG_MASK_EXACT,
};

const DEADLINE: Duration = Duration::from_secs(60);

fn worker() -> Option<Worker> {
    let cfg = UcpConfig {
        tls: vec!["rc_verbs".into(), "tcp".into()],
        rndv_thresh: Some(16 << 10),
        ..Default::default()
    };
    let ctx = match Context::new(ContextParams {
        features: Features::TAG,
        config: Some(cfg),
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipped: no rc_verbs + tcp context: {e}");
            return None;
        }
    };
    if !ctx.resources().iter().any(|r| r.tl_name == "rc_verbs") {
        eprintln!("skipped: no rc_verbs device on this machine (run tests/rdma-vm/ci.sh)");
        return None;
    }
    Some(Worker::new(&ctx).expect("worker"))
}

fn finish(me: &mut Worker, other: &mut Worker, op: Op) -> Completion {
    let mut req = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    let end = Instant::now() + DEADLINE;
    while Instant::now() < end {
        match me.request_take(req) {
            Ok(c) => return c,
            Err(r) => req = r,
        }
        me.progress();
        other.progress();
    }
    panic!("request did not finish within {DEADLINE:?}");
}

/// Progresses both until `ep` of `me` uses its rc_verbs RMA lane (rendezvous by get_zcopy).
fn wait_rma_lane(me: &mut Worker, other: &mut Worker, ep: EpHandle) {
    let end = Instant::now() + DEADLINE;
    while me.ep_proto_config(ep).expect("proto").rndv != RndvScheme::Get {
        assert!(Instant::now() < end, "rc_verbs lane not connected in time");
        me.progress();
        other.progress();
    }
    let info = me.ep_proto_info(ep).expect("proto info");
    assert!(info.contains("rc_verbs"), "{info}");
    assert!(info.contains("tcp"), "{info}");
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Sends `sizes` in order with one tag from `a` to `b` and checks each arrives intact, in order.
fn stream_of_sizes(a: &mut Worker, b: &mut Worker, ab: EpHandle, sizes: &[usize], tag: u64) {
    let recvs: Vec<Op> = sizes
        .iter()
        .map(|&n| b.tag_recv(vec![0; n], tag, TAG_MASK_EXACT).unwrap())
        .collect();
    let sends: Vec<(Op, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let d = pattern(n, i as u8);
            (a.tag_send(ab, tag, &d).unwrap(), d)
        })
        .collect();
    let mut sent = Vec::new();
    for (op, d) in sends {
        let c = finish(a, b, op);
        assert_eq!(c.status, Ok(()), "send of {} bytes", d.len());
        sent.push(d);
    }
    for (op, d) in recvs.into_iter().zip(sent) {
        let c = finish(b, a, op);
        assert_eq!(c.status, Ok(()), "receive of {} bytes", d.len());
        assert_eq!(c.len, d.len());
        assert!(
            c.buf.unwrap() == d,
            "{} bytes differ (or out of order)",
            d.len()
        );
    }
}

#[test]
fn tag_over_rc_verbs_rma_lane_with_tcp_wireup() {
    let (Some(mut a), Some(mut b)) = (worker(), worker()) else {
        return;
    };
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    // Messages sent before the rc_verbs lane is connected go by tcp (eager, or the AM
    // rendezvous pipeline) and still arrive intact and in order.
    stream_of_sizes(&mut a, &mut b, ab, &[8, 100 << 10, 4000], 1);
    wait_rma_lane(&mut a, &mut b, ab);
    let baddr = a.address().to_vec();
    let ba = b.ep_create(&baddr, EpParams::default()).unwrap();
    wait_rma_lane(&mut b, &mut a, ba);
    let get_before = b.stats().rndv_get;
    let sizes = [1, 64 << 10, 17, 1 << 20, 9000, 300 << 10, 0];
    stream_of_sizes(&mut a, &mut b, ab, &sizes, 2);
    // Three of those are above the 16 KiB threshold: each read with get_zcopy over rc_verbs.
    assert_eq!(b.stats().rndv_get - get_before, 3, "{:?}", b.stats());
    let get_before = a.stats().rndv_get;
    stream_of_sizes(&mut b, &mut a, ba, &sizes, 3);
    assert_eq!(a.stats().rndv_get - get_before, 3, "{:?}", a.stats());
}
