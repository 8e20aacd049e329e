//! A ucp sender that outruns its receiver over shared memory allocates nothing once warm: a
//! counting global allocator (counting this thread only) watches sends meet a full FIFO, queue
//! as pending requests and be retried by the sender's progress calls.

use std::sync::atomic::Ordering;
use ucp::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker, TAG_MASK_EXACT};
use ucs::testing::{CountingAlloc, ALLOCS, COUNTING};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// A sender that outruns its receiver over shared memory: the FIFO fills, later sends queue
/// as pending requests, and the sender's progress calls retry them while the FIFO stays full.
/// None of that allocates once warm (the retries used to build a fresh endpoint list on every
/// progress call).
#[test]
fn ucp_alloc_back_pressure_over_posix_allocates_nothing_when_warm() {
    let cfg = UcpConfig {
        tls: vec!["posix".into()],
        keepalive_interval: None,
        ..Default::default()
    };
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(cfg),
    })
    .unwrap();
    let mut a = Worker::new(&ctx).unwrap();
    let mut b = Worker::new(&ctx).unwrap();
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    // More messages than the receive FIFO holds, so part of every round waits as pending.
    const BURST: usize = 600;
    // Sends give their vectors (no copy into the worker's small buffer pool).
    let mut sbufs: Vec<Vec<u8>> = (0..BURST).map(|_| vec![3u8; 8]).collect();
    let mut bufs: Vec<Vec<u8>> = (0..BURST).map(|_| vec![0u8; 8]).collect();
    let mut recvs = Vec::with_capacity(BURST);
    let mut sends = Vec::with_capacity(BURST);
    let mut round = |a: &mut Worker, b: &mut Worker| -> usize {
        for _ in 0..BURST {
            let buf = bufs.pop().unwrap();
            recvs.push(b.tag_recv(buf, 5, TAG_MASK_EXACT).unwrap());
        }
        for _ in 0..BURST {
            match a.tag_send_vec(ab, 5, sbufs.pop().unwrap()).unwrap() {
                Op::Done(c) => sbufs.push(c.buf.unwrap()),
                Op::Pending(r) => sends.push(r),
            }
        }
        // The receiver has not looked yet: the FIFO stays full while the sender retries.
        let pending = sends.len();
        for _ in 0..100 {
            a.progress();
        }
        while let Some(op) = recvs.pop() {
            let mut r = match op {
                Op::Done(c) => {
                    bufs.push(c.buf.unwrap());
                    continue;
                }
                Op::Pending(r) => r,
            };
            let c = loop {
                match b.request_take(r) {
                    Ok(c) => break c,
                    Err(back) => r = back,
                }
                a.progress();
                b.progress();
            };
            assert!(c.status.is_ok() && c.len == 8, "{c:?}");
            bufs.push(c.buf.unwrap());
        }
        while let Some(s) = sends.pop() {
            let c = a.complete(Op::Pending(s));
            assert!(c.status.is_ok(), "{c:?}");
            sbufs.push(c.buf.unwrap());
        }
        pending
    };
    // Warm-up: pools, request slots and queues reach their steady size.
    for _ in 0..5 {
        round(&mut a, &mut b);
    }
    let before = ALLOCS.load(Ordering::SeqCst);
    COUNTING.with(|c| c.set(true));
    let mut pending = 0;
    for _ in 0..5 {
        pending += round(&mut a, &mut b);
    }
    COUNTING.with(|c| c.set(false));
    let allocs = ALLOCS.load(Ordering::SeqCst) - before;
    assert!(pending > 0, "no send met back-pressure");
    assert_eq!(allocs, 0, "allocations while sends waited on a full FIFO");
}
