//! Two ucp workers over tcp, where one waits for the other's wire-up (`Worker::has_ep_to`)
//! before its own `ep_create` (what perftest's server does): both directions ride one TCP
//! connection, and messages stay in order in both directions under load.
//!
//! One test in this binary on purpose: it counts the process's socket descriptors, which
//! another test running in parallel would disturb.

use std::time::{Duration, Instant};
use ucp::{Completion, EpHandle, EpParams, Features, Op, Request, Worker, TAG_MASK_EXACT};

const WATCHDOG: Duration = Duration::from_secs(60);
const MSGS: u64 = 3000;
const TAG: u64 = 0x5eed;

fn worker() -> Worker {
    rucx_tests::tcp_lo_worker(Features::TAG)
}

/// Open socket descriptors of this process (listeners and connection ends).
fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Message `i`: its sequence number, then a pattern; 8 bytes to about 3 KB.
fn message(i: u64, dir: u64) -> Vec<u8> {
    let len = 8 + (i % 7) as usize * 500;
    let mut m = vec![0u8; len];
    m[..8].copy_from_slice(&i.to_le_bytes());
    for (k, b) in m[8..].iter_mut().enumerate() {
        *b = (k as u64 ^ i ^ dir) as u8;
    }
    m
}

/// Posts every send of one direction and every receive of the other, progressing both
/// workers while sends are waiting; returns the pending requests.
fn post(
    from: &mut Worker,
    ep: EpHandle,
    to: &mut Worker,
    dir: u64,
    sends: &mut Vec<Request>,
    recvs: &mut Vec<(u64, Request)>,
) {
    for i in 0..MSGS {
        match to
            .tag_recv(vec![0u8; 4096], TAG, TAG_MASK_EXACT)
            .expect("tag_recv")
        {
            Op::Done(c) => check(dir, i, c),
            Op::Pending(r) => recvs.push((i, r)),
        }
        match from.tag_send(ep, TAG, &message(i, dir)).expect("tag_send") {
            Op::Done(c) => c.status.expect("send"),
            Op::Pending(r) => sends.push(r),
        }
    }
}

/// Takes the finished sends (checking their status) and returns the others.
fn take_done(w: &mut Worker, sends: Vec<Request>) -> Vec<Request> {
    let mut left = Vec::new();
    for r in sends {
        match w.request_take(r) {
            Ok(c) => c.status.expect("send"),
            Err(r) => left.push(r),
        }
    }
    left
}

fn check(dir: u64, i: u64, c: Completion) {
    c.status.expect("receive");
    let buf = c.buf.expect("receive buffer");
    let want = message(i, dir);
    assert_eq!(c.len, want.len(), "direction {dir}: message {i} length");
    let seq = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    assert_eq!(seq, i, "direction {dir}: message {i} arrived out of order");
    assert_eq!(
        &buf[..c.len],
        &want[..],
        "direction {dir}: message {i} data"
    );
}

#[test]
fn ucp_tcp_second_side_waiting_for_wireup_shares_one_connection_in_order() {
    let mut a = worker();
    let mut b = worker();
    assert!(
        b.has_ep_to(&[1, 2, 3]).is_err(),
        "a bad address is an error"
    );
    let (a_addr, b_addr) = (a.address().to_vec(), b.address().to_vec());
    assert!(!b.has_ep_to(&a_addr).expect("has_ep_to"));
    let before = sockets();

    let ab = a.ep_create(&b_addr, EpParams::default()).expect("ep a->b");
    let deadline = Instant::now() + WATCHDOG;
    while !b.has_ep_to(&a_addr).expect("has_ep_to") {
        a.progress();
        b.progress();
        assert!(
            Instant::now() < deadline,
            "watchdog: a's wire-up never reached b"
        );
    }
    let ba = b.ep_create(&a_addr, EpParams::default()).expect("ep b->a");
    while a.ep_proto_config(ab).is_err() || b.ep_proto_config(ba).is_err() {
        a.ep_status(ab).expect("ep a->b");
        b.ep_status(ba).expect("ep b->a");
        a.progress();
        b.progress();
        assert!(
            Instant::now() < deadline,
            "watchdog: endpoints never connected"
        );
    }
    // One TCP connection has two ends in this process; two connections would have four.
    assert_eq!(sockets() - before, 2, "a and b share one tcp connection");

    let (mut sends, mut recvs_b, mut recvs_a) = (Vec::new(), Vec::new(), Vec::new());
    post(&mut a, ab, &mut b, 0, &mut sends, &mut recvs_b);
    let mut sends_b = Vec::new();
    post(&mut b, ba, &mut a, 1, &mut sends_b, &mut recvs_a);
    let (mut recvs_a, mut recvs_b) = (
        std::collections::VecDeque::from(recvs_a),
        std::collections::VecDeque::from(recvs_b),
    );
    while !(sends.is_empty() && sends_b.is_empty() && recvs_a.is_empty() && recvs_b.is_empty()) {
        a.progress();
        b.progress();
        sends = take_done(&mut a, sends);
        sends_b = take_done(&mut b, sends_b);
        for (w, q, dir) in [(&mut b, &mut recvs_b, 0), (&mut a, &mut recvs_a, 1)] {
            while let Some((i, r)) = q.pop_front() {
                match w.request_take(r) {
                    Ok(c) => check(dir, i, c),
                    Err(r) => {
                        q.push_front((i, r));
                        break;
                    }
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "watchdog: messages did not arrive"
        );
    }
    // Still one connection after the load.
    assert_eq!(sockets() - before, 2, "no second connection under load");
}
