//! Stream sends over tcp: long ones go out in zero-copy fragments (64 KiB frames from the
//! sender's memory instead of 8 KiB copies), mixed with short copied ones, and the receiver
//! reads every byte once and in order whatever the sizes of its receives.

use std::time::{Duration, Instant};
use ucp::{Completion, EpParams, Features, Op, Worker};

const WATCHDOG: Duration = Duration::from_secs(60);

fn worker() -> Worker {
    rucx_tests::tcp_lo_worker(Features::STREAM)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// Progresses both workers until `op` of `w` (a or b) completes.
fn finish(a: &mut Worker, b: &mut Worker, on_a: bool, op: Op) -> Completion {
    let mut r = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    let start = Instant::now();
    loop {
        let w = if on_a { &mut *a } else { &mut *b };
        match w.request_take(r) {
            Ok(c) => return c,
            Err(back) => r = back,
        }
        a.progress();
        b.progress();
        assert!(start.elapsed() < WATCHDOG, "request did not complete");
    }
}

#[test]
fn ucp_tcp_stream_long_sends_go_zero_copy_in_order() {
    let mut a = worker();
    let mut b = worker();
    let ab = a
        .ep_create(b.address(), EpParams::default())
        .expect("ep a->b");
    let start = Instant::now();
    while !b.has_ep_to(a.address()).expect("has_ep_to") {
        a.progress();
        b.progress();
        assert!(start.elapsed() < WATCHDOG, "wire-up");
    }
    let ba = b
        .ep_create(a.address(), EpParams::default())
        .expect("ep b->a");
    let sizes = [(1 << 20) + 3, 5, 200_000, 65_535, 1, 70_000, 3 << 20];
    let mut all = Vec::new();
    let mut sends = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let d = pattern(len, i as u8);
        all.extend_from_slice(&d);
        // Every other one from the caller's memory, left alone until it completes.
        if i % 2 == 0 {
            sends.push((a.stream_send(ab, &d).expect("stream_send"), None));
        } else {
            // SAFETY: `d` is kept (in `sends`) and not touched until the send completes.
            let op = unsafe { a.stream_send_raw(ab, d.as_ptr(), d.len()) }.expect("raw send");
            sends.push((op, Some(d)));
        }
    }
    // Read back in pieces of other sizes while the sends go out.
    let mut got = Vec::with_capacity(all.len());
    let mut piece = 1000usize;
    while got.len() < all.len() {
        let n = piece.min(all.len() - got.len());
        let op = b.stream_recv(ba, vec![0; n]).expect("stream_recv");
        let c = finish(&mut a, &mut b, false, op);
        assert_eq!(c.status, Ok(()));
        assert_eq!(c.len, n);
        got.extend_from_slice(&c.buf.expect("buffer"));
        piece = piece * 7 % 400_009 + 1;
    }
    for (op, kept) in sends {
        let c = finish(&mut a, &mut b, true, op);
        assert_eq!(c.status, Ok(()));
        drop(kept);
    }
    assert!(got == all, "stream bytes differ");
    assert_eq!(b.stream_available(ba).unwrap(), 0);
    let zc = a.stats().stream_zcopy;
    assert!(
        zc >= 4,
        "long stream sends went zero-copy {zc} times (of 5 long ones)"
    );
}
