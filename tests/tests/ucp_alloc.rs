//! The eager tag path allocates nothing per message once warm: a counting global allocator
//! watches a steady-state ping-pong between two workers over the self transport.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use ucp::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker, TAG_MASK_EXACT};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn ucp_alloc_eager_ping_pong_allocates_nothing_when_warm() {
    let cfg = UcpConfig {
        tls: vec!["self".into()],
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
    for _ in 0..4 {
        a.progress();
        b.progress();
    }
    let msg = [7u8; 64];
    let mut buf = Some(vec![0u8; 64]);
    let round = |a: &mut Worker, b: &mut Worker, buf: &mut Option<Vec<u8>>, posted_first: bool| {
        let mut r = None;
        if posted_first {
            r = Some(b.tag_recv(buf.take().unwrap(), 1, TAG_MASK_EXACT).unwrap());
        }
        match a.tag_send(ab, 1, &msg).unwrap() {
            Op::Done(_) => {}
            Op::Pending(_) => panic!("eager send should finish at once"),
        }
        b.progress();
        let r = r.unwrap_or_else(|| b.tag_recv(buf.take().unwrap(), 1, TAG_MASK_EXACT).unwrap());
        let c = b.complete(r);
        assert_eq!(c.len, 64);
        *buf = c.buf;
    };
    // Warm-up: pools, slabs and queues reach their steady size.
    for i in 0..200 {
        round(&mut a, &mut b, &mut buf, i % 2 == 0);
    }
    COUNTING.store(true, Ordering::SeqCst);
    for i in 0..1000 {
        round(&mut a, &mut b, &mut buf, i % 2 == 0);
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst),
        0,
        "allocations on the warm eager path (expected and unexpected receives)"
    );
}
