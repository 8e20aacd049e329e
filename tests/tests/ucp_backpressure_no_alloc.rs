//! A ucp sender that outruns its receiver over shared memory allocates nothing once warm: a
//! counting global allocator (counting this thread only) watches sends meet a full FIFO, queue
//! as pending requests and be retried by the sender's progress calls (tagged messages and
//! active messages).

use std::sync::atomic::Ordering;
use ucp::{
    Context, ContextParams, EpHandle, EpParams, Features, Op, Request, UcpConfig, Worker,
    TAG_MASK_EXACT,
};
use ucs::testing::{CountingAlloc, ALLOCS, COUNTING};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// The allocation count is one for the process: the tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Two workers over posix shared memory (no keepalive) and an endpoint from the first to the
/// second.
fn posix_pair(features: Features) -> (Worker, Worker, EpHandle) {
    let cfg = UcpConfig {
        tls: vec!["posix".into()],
        keepalive_interval: None,
        ..Default::default()
    };
    let ctx = Context::new(ContextParams {
        features,
        config: Some(cfg),
    })
    .unwrap();
    let mut a = Worker::new(&ctx).unwrap();
    let b = Worker::new(&ctx).unwrap();
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    (a, b, ab)
}

/// A sender that outruns its receiver over shared memory: the FIFO fills, later sends queue
/// as pending requests, and the sender's progress calls retry them while the FIFO stays full.
/// None of that allocates once warm (the retries used to build a fresh endpoint list on every
/// progress call).
#[test]
fn ucp_alloc_back_pressure_over_posix_allocates_nothing_when_warm() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut a, mut b, ab) = posix_pair(Features::TAG);
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

/// Eager active messages meet the same back-pressure: a send the FIFO cannot take is a
/// request that finishes when the message has gone out (not a copy reported sent at once and
/// queued without bound), so a sender that keeps at most `WINDOW` sends outstanding (as
/// ucx_perftest's `ucp_am_bw` keeps 32) waits for its receiver. The receiver gets every message
/// once and in order, and none of it allocates once warm.
#[test]
fn ucp_am_back_pressure_gives_requests_and_allocates_nothing_when_warm() {
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut a, mut b, ab) = posix_pair(Features::AM);
    const BURST: usize = 2000;
    const WINDOW: usize = 32;
    const ID: u16 = 9;
    // What the handler got: (header byte, data word), and the data buffers to give back.
    type Got = (Vec<(u8, u64)>, Vec<Vec<u8>>);
    let got: Rc<RefCell<Got>> = Rc::new(RefCell::new((
        Vec::with_capacity(BURST),
        Vec::with_capacity(BURST),
    )));
    let g = got.clone();
    b.am_set_handler(ID, move |_ep, hdr, data| {
        let mut g = g.borrow_mut();
        let word = u64::from_le_bytes(data[..8].try_into().unwrap());
        g.0.push((hdr[0], word));
        g.1.push(data);
    });
    let drain = |b: &mut Worker, got: &RefCell<Got>| {
        b.progress();
        let mut g = got.borrow_mut();
        while let Some(d) = g.1.pop() {
            b.am_data_release(d);
        }
    };
    // Waits for send `r` while draining the receiver; gives back the send's data vector.
    let wait_send = |a: &mut Worker, b: &mut Worker, mut r: Request| -> Vec<u8> {
        let c = loop {
            match a.request_take(r) {
                Ok(c) => break c,
                Err(back) => r = back,
            }
            drain(b, &got);
            a.progress();
        };
        assert!(c.status.is_ok(), "{c:?}");
        c.buf.unwrap()
    };
    let mut sbufs: Vec<Vec<u8>> = (0..WINDOW + 1).map(|_| vec![0u8; 8]).collect();
    let mut sends = VecDeque::with_capacity(WINDOW + 1);
    let mut seq = 0u64;
    // Sends BURST messages; gives how many met back-pressure and how often the sender had to
    // wait for its receiver.
    let mut round = |a: &mut Worker, b: &mut Worker| -> (usize, usize) {
        let first = seq;
        let mut pending = 0;
        let mut waited = 0;
        for _ in 0..BURST {
            let mut v = sbufs.pop().unwrap();
            v.copy_from_slice(&seq.to_le_bytes());
            match a.am_send_vec(ab, ID, &[seq as u8], v).unwrap() {
                Op::Done(c) => sbufs.push(c.buf.unwrap()),
                Op::Pending(r) => {
                    sends.push_back(r);
                    pending += 1;
                }
            }
            seq += 1;
            if sends.len() == WINDOW {
                // The sender alone may still move the oldest (its view of the FIFO's free
                // room can be stale); when it cannot, only the receiver frees it.
                for _ in 0..50 {
                    a.progress();
                }
                let r = match a.request_take(sends.pop_front().unwrap()) {
                    Ok(c) => {
                        assert!(c.status.is_ok(), "{c:?}");
                        sbufs.push(c.buf.unwrap());
                        continue;
                    }
                    Err(back) => back,
                };
                waited += 1;
                sbufs.push(wait_send(a, b, r));
            }
        }
        while let Some(r) = sends.pop_front() {
            sbufs.push(wait_send(a, b, r));
        }
        for _ in 0..1_000_000 {
            if got.borrow().0.len() >= BURST {
                break;
            }
            drain(b, &got);
            a.progress();
        }
        let mut g = got.borrow_mut();
        assert_eq!(g.0.len(), BURST, "messages delivered twice");
        for (i, &(h, word)) in g.0.iter().enumerate() {
            let want = first + i as u64;
            assert_eq!((h, word), (want as u8, want), "message {i} of the round");
        }
        g.0.clear();
        (pending, waited)
    };
    for _ in 0..3 {
        round(&mut a, &mut b);
    }
    let before = ALLOCS.load(Ordering::SeqCst);
    COUNTING.with(|c| c.set(true));
    let (mut pending, mut waited) = (0, 0);
    for _ in 0..3 {
        let (p, w) = round(&mut a, &mut b);
        pending += p;
        waited += w;
    }
    COUNTING.with(|c| c.set(false));
    let allocs = ALLOCS.load(Ordering::SeqCst) - before;
    assert!(pending > 0, "no active message met back-pressure");
    assert!(waited > 0, "the sender never had to wait for its receiver");
    assert_eq!(
        allocs, 0,
        "allocations while active messages waited on a full FIFO"
    );
}
