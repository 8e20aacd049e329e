//! The posix/sysv tag-offload data path allocates nothing after warm-up: a counting global
//! allocator checks the allocations this thread makes while the measured loop posts receives,
//! sends tagged eager messages (short, bcopy, zcopy), rendezvous from shared-segment memory
//! (mapped by the receiver) and from registered heap memory (process_vm_readv), takes
//! unexpected ones, acknowledges and progresses.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use ucs::testing::{CountingAlloc, ALLOCS, COUNTING};
use uct::mm::{MmIface, PosixTransport, SysvTransport};
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
    fn am(&mut self, id: u8, _data: &[u8]) {
        panic!("unexpected active message {id}");
    }
    fn completion(&mut self, comp: CompletionId, result: uct::Result<u64>) {
        assert!(result.is_ok(), "completion {comp} failed: {result:?}");
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

fn no_alloc<T: Transport<Iface = MmIface, Md = uct::mm::MmMd>>() {
    let md = T::open_md("memory").unwrap();
    let p = IfaceParams {
        device: "memory".into(),
        ..Default::default()
    };
    let mut a = T::open_iface(&md, &p).unwrap();
    let mut b = T::open_iface(&md, &p).unwrap();
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let seg_src = md.mem_alloc(64 * 1024).unwrap();
    let mut heap = vec![5u8; 64 * 1024];
    // SAFETY: `heap` is neither moved nor dropped before the registration.
    let heap_src = unsafe {
        md.mem_reg(
            std::ptr::NonNull::new(heap.as_mut_ptr()).unwrap(),
            heap.len(),
        )
    }
    .unwrap();
    let dst = md.mem_alloc(256 * 1024).unwrap();
    let (mut ta, mut tb) = (Tally::default(), Tally::default());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut round = |count: bool, ta: &mut Tally, tb: &mut Tally, i: u64| {
        COUNTING.with(|c| c.set(count));
        let (d0, u0, c0) = (tb.done, tb.unexp, ta.comps);
        let post = |b: &mut MmIface, tag: u64, off: usize, len: usize, ctx: u64| {
            let r = b.tag_recv_zcopy(
                tag,
                u64::MAX,
                &[Iov::new(&dst, off, len).unwrap()],
                TagRecvId(ctx),
            );
            assert!(matches!(r, Ok(Outcome::InProgress)));
        };
        post(&mut b, 1, 0, 8192, 4 * i);
        post(&mut b, 2, 8192, 64 * 1024, 4 * i + 1);
        post(&mut b, 3, 80 * 1024, 64 * 1024, 4 * i + 2);
        post(&mut b, 4, 160 * 1024, 64, 4 * i + 3);
        let z = ep
            .tag_eager_zcopy(
                1,
                i,
                &[Iov::new(&seg_src, 0, 6000).unwrap()],
                CompletionId(0),
            )
            .unwrap();
        assert_eq!(z, Outcome::DONE);
        let r = ep.tag_rndv_zcopy(
            2,
            b"hdr",
            &[Iov::new(&seg_src, 0, 60_000).unwrap()],
            CompletionId(2 * i),
        );
        assert!(matches!(r, Ok(Outcome::Done(_))), "{r:?}");
        let r = ep.tag_rndv_zcopy(
            3,
            b"hdr",
            &[Iov::new(&heap_src, 0, 60_000).unwrap()],
            CompletionId(2 * i + 1),
        );
        assert!(matches!(r, Ok(Outcome::Done(_))), "{r:?}");
        assert_eq!(ep.tag_eager_short(4, b"short").unwrap(), Outcome::DONE);
        let b1 = ep.tag_eager_bcopy(9, i, |buf| {
            buf[..100].fill(1);
            100
        });
        assert_eq!(b1.unwrap(), Outcome::Done(100));
        assert_eq!(ep.tag_eager_short(8, b"unexpected").unwrap(), Outcome::DONE);
        while tb.done < d0 + 4 || tb.unexp < u0 + 2 || ta.comps < c0 + 2 {
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
    assert_eq!(tb.done, 4 * 600);
    assert_eq!(tb.unexp, 2 * 600);
    assert_eq!(ta.comps, 2 * 600);
    assert_eq!(
        allocs, 0,
        "the shared-memory tag path allocated {allocs} times in 500 rounds"
    );
    drop(heap_src);
    drop(heap);
}

#[test]
fn posix_tag_offload_data_path_does_not_allocate() {
    no_alloc::<PosixTransport>();
}

#[test]
fn sysv_tag_offload_data_path_does_not_allocate() {
    no_alloc::<SysvTransport>();
}
