//! The measurement loop allocates nothing: a run of 100 000 iterations makes exactly as many
//! allocations as a run of 1 000 (everything is set up before the loop).

use perftest::params::{Layout, TestId, TestParams};
use perftest::report::{OutputOpts, Recorder};
use perftest::timer::Ticker;
use perftest::uct_test::{Role, UctTest};
use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: AllocLayout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: AllocLayout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: AllocLayout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_of_run(test: TestId, layout: Layout, size: u64, iterations: u64) -> usize {
    let p = TestParams {
        test,
        layout,
        sizes: vec![size],
        iterations,
        warmup: 0,
        outstanding: 16,
        window: 127,
        transport: "self".into(),
        device: "memory0".into(),
        mem: Default::default(),
    };
    let mut t = UctTest::open(&p).expect("open self");
    let me = t.local_address().unwrap();
    t.connect(&me).unwrap();
    let opts = OutputOpts {
        quiet: true,
        ..OutputOpts::default()
    };
    let mut rec = Recorder::new(Ticker::new(), &p, true, opts);
    // Same ring size for both runs, so only the loop can differ.
    let before = ALLOCS.load(Ordering::Relaxed);
    t.run(Role::Loopback, Some(&mut rec), None).unwrap();
    ALLOCS.load(Ordering::Relaxed) - before
}

#[test]
fn measurement_loops_do_not_allocate() {
    if !uct::TRANSPORT_NAMES.contains(&"self") {
        return;
    }
    for (test, layout, size) in [
        (TestId::AmLat, Layout::Short, 8),
        (TestId::AmBw, Layout::Bcopy, 1024),
        (TestId::PutLat, Layout::Zcopy, 64),
        (TestId::GetBw, Layout::Bcopy, 256),
        (TestId::FaddLat, Layout::Short, 8),
    ] {
        let small = allocations_of_run(test, layout, size, 1_000);
        let large = allocations_of_run(test, layout, size, 100_000);
        assert_eq!(
            small, large,
            "{test} -D {layout}: {small} allocations for 1000 iterations, {large} for 100000"
        );
    }
}
