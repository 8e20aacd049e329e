//! Proves that the tcp transport's data path and progress allocate nothing after warm-up: a
//! counting global allocator (in this test binary only) counts the allocations this thread
//! makes while the measured loop runs AM short/bcopy/zcopy, put short/zcopy, get zcopy,
//! fetching atomics and flush between two interfaces on `lo`, progressing both.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use ucs::testing::{CountingAlloc, ALLOCS, COUNTING};
use uct::tcp::{TcpIface, TcpTransport};
use uct::{
    AtomicOp, CompletionId, Endpoint, EpId, Error, EventSink, Iface, IfaceParams, Iov,
    MemoryDomain, Outcome, Transport,
};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Counts without storing (storing would allocate).
#[derive(Default)]
struct Tally {
    ams: u64,
    am_bytes: u64,
    comps: u64,
    last_comp: u64,
    errors: u64,
}

impl EventSink for Tally {
    fn am(&mut self, _id: u8, data: &[u8]) {
        self.ams += 1;
        self.am_bytes += data.len() as u64;
    }
    fn completion(&mut self, comp: CompletionId, result: uct::Result<u64>) {
        assert!(result.is_ok(), "completion {comp} failed");
        self.comps += 1;
        self.last_comp = comp.0;
    }
    fn ep_error(&mut self, _ep: EpId, _err: Error) {
        self.errors += 1;
    }
}

fn open() -> TcpIface {
    let md = TcpTransport::open_md("lo").unwrap();
    TcpTransport::open_iface(
        &md,
        &IfaceParams {
            device: "lo".into(),
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn data_path_and_progress_do_not_allocate() {
    let mut a = open();
    let mut b = open();
    let md = TcpTransport::open_md("lo").unwrap();
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let src = md.mem_alloc(32 * 1024).unwrap();
    let dst = md.mem_alloc(32 * 1024).unwrap();
    let target = md.mem_alloc(64 * 1024).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&target, &mut packed).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let base = target.addr() as u64;
    let (mut ta, mut tb) = (Tally::default(), Tally::default());
    let deadline = Instant::now() + Duration::from_secs(60);

    let mut round = |count: bool, ta: &mut Tally, tb: &mut Tally, i: u64| {
        COUNTING.with(|c| c.set(count));
        let mut sent = 0;
        let mut go = |r: uct::Result<Outcome<()>>| {
            if !r.unwrap().is_no_resource() {
                sent += 1;
            }
        };
        go(ep.am_short(1, i, b"payload!"));
        go(ep
            .am_bcopy(2, |buf| {
                buf[..64].fill(i as u8);
                64
            })
            .map(|o| o.unit()));
        go(ep.am_zcopy(
            3,
            b"hdr",
            &[Iov::new(&src, 0, 4096).unwrap()],
            CompletionId(10 * i),
        ));
        go(ep.put_short(b"abcdefgh", base, &rkey));
        go(ep.put_zcopy(
            &[Iov::new(&src, 0, 16384).unwrap()],
            base + 4096,
            &rkey,
            CompletionId(10 * i + 1),
        ));
        go(ep.get_zcopy(
            &[Iov::new(&dst, 0, 8192).unwrap()],
            base,
            &rkey,
            CompletionId(10 * i + 2),
        ));
        go(ep
            .atomic64_fetch(
                AtomicOp::Add,
                1,
                base + 32768,
                &rkey,
                CompletionId(10 * i + 3),
            )
            .map(|o| o.unit()));
        let flush = ep.flush(CompletionId(10 * i + 4)).unwrap();
        let want_comp = 10 * i + 4;
        while !(flush.is_done() || ta.last_comp == want_comp) || tb.ams < ta_target(i) {
            a.progress(ta);
            b.progress(tb);
            assert!(Instant::now() < deadline, "watchdog");
        }
        COUNTING.with(|c| c.set(false));
        sent
    };
    fn ta_target(i: u64) -> u64 {
        3 * (i + 1)
    }
    for i in 0..200 {
        assert_eq!(round(false, &mut ta, &mut tb, i), 7, "warm-up round {i}");
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for i in 200..1200 {
        assert_eq!(round(true, &mut ta, &mut tb, i), 7, "round {i}");
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(ta.errors + tb.errors, 0);
    assert_eq!(tb.ams, 3 * 1200);
    assert_eq!(
        allocs, 0,
        "the tcp data path allocated {allocs} times in 1000 rounds"
    );
}
