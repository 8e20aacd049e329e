//! The tcp tag-offload data path allocates nothing after warm-up: a counting global allocator
//! checks the allocations this thread makes while the measured loop posts receives, sends
//! tagged eager (short, zcopy) and rendezvous messages, takes unexpected ones and progresses.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use ucs::testing::{CountingAlloc, ALLOCS, COUNTING};
use uct::tcp::{TcpIface, TcpTransport};
use uct::TagRecvId;
use uct::{
    CompletionId, Endpoint, EpId, Error, EventSink, Iface, IfaceParams, Iov, MemoryDomain, Outcome,
    Transport,
};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[derive(Default)]
struct Tally {
    done: u64,
    unexp: u64,
    comps: u64,
    errors: u64,
}

impl EventSink for Tally {
    fn am(&mut self, _id: u8, _data: &[u8]) {}
    fn completion(&mut self, comp: CompletionId, result: uct::Result<u64>) {
        assert!(result.is_ok(), "completion {comp} failed");
        self.comps += 1;
    }
    fn ep_error(&mut self, _ep: EpId, _err: Error) {
        self.errors += 1;
    }
    fn tag_unexp_eager(&mut self, _tag: u64, _imm: u64, _data: &[u8]) {
        self.unexp += 1;
    }
    fn tag_recv_done(
        &mut self,
        _ctx: TagRecvId,
        _tag: u64,
        _imm: u64,
        _len: usize,
        r: uct::Result<()>,
    ) {
        assert!(r.is_ok(), "tag receive failed: {r:?}");
        self.done += 1;
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
fn tag_offload_data_path_does_not_allocate() {
    let mut a = open();
    let mut b = open();
    let md = TcpTransport::open_md("lo").unwrap();
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let src = md.mem_alloc(64 * 1024).unwrap();
    let dst = md.mem_alloc(128 * 1024).unwrap();
    let (mut ta, mut tb) = (Tally::default(), Tally::default());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut round = |count: bool, ta: &mut Tally, tb: &mut Tally, i: u64| {
        COUNTING.with(|c| c.set(count));
        let (d0, u0, c0) = (tb.done, tb.unexp, ta.comps);
        let post = |b: &mut TcpIface, tag: u64, off: usize, len: usize, ctx: u64| {
            let r = b.tag_recv_zcopy(
                tag,
                u64::MAX,
                &[Iov::new(&dst, off, len).unwrap()],
                TagRecvId(ctx),
            );
            assert!(matches!(r, Ok(Outcome::InProgress)));
        };
        post(&mut b, 1, 0, 32 * 1024, 3 * i);
        post(&mut b, 2, 32 * 1024, 64 * 1024, 3 * i + 1);
        let mut zc = 0;
        for (tag, len) in [(1u64, 30_000usize), (9, 5000)] {
            loop {
                match ep.tag_eager_zcopy(
                    tag,
                    i,
                    &[Iov::new(&src, 0, len).unwrap()],
                    CompletionId(2 * i),
                ) {
                    Ok(Outcome::NoResource) => {
                        a.progress(ta);
                        assert!(Instant::now() < deadline, "watchdog");
                    }
                    Ok(Outcome::InProgress) => {
                        zc += 1;
                        break;
                    }
                    Ok(Outcome::Done(())) => break,
                    Err(e) => panic!("tag_eager_zcopy: {e}"),
                }
            }
        }
        let op = ep
            .tag_rndv_zcopy(
                2,
                b"hdr",
                &[Iov::new(&src, 0, 60_000).unwrap()],
                CompletionId(2 * i + 1),
            )
            .unwrap();
        assert!(matches!(op, Outcome::Done(_)));
        let _ = ep.tag_eager_short(7, b"unexpected");
        while tb.done < d0 + 2 || tb.unexp < u0 + 2 || ta.comps < c0 + 1 + zc {
            a.progress(ta);
            b.progress(tb);
            assert!(Instant::now() < deadline, "watchdog");
        }
        COUNTING.with(|c| c.set(false));
    };
    for i in 0..100 {
        round(false, &mut ta, &mut tb, i);
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for i in 100..600 {
        round(true, &mut ta, &mut tb, i);
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(ta.errors + tb.errors, 0);
    assert_eq!(tb.done, 2 * 600);
    assert_eq!(tb.unexp, 2 * 600);
    assert_eq!(
        allocs, 0,
        "the tcp tag path allocated {allocs} times in 500 rounds"
    );
}
