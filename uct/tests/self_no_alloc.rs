//! Proves that the self transport's data path and progress allocate nothing after warm-up:
//! a counting global allocator (in this test binary only) counts allocations made by this
//! thread while the measured loop runs.

use std::sync::atomic::Ordering;
use ucs::testing::{CountingAlloc, ALLOCS, COUNTING};
use uct::self_::{SelfIface, SelfMd, DEVICE_NAME};
use uct::{
    AtomicOp, CompletionId, Endpoint, EpId, EventFlags, EventSink, Iface, IfaceParams, Iov,
    MemoryDomain,
};
use uct::{Outcome, PendingId};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// A sink that allocates nothing: counts and checksums.
#[derive(Default)]
struct Tally {
    msgs: usize,
    bytes: usize,
    sum: u64,
    pending: usize,
}

impl EventSink for Tally {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.msgs += 1;
        self.bytes += data.len();
        self.sum = self
            .sum
            .wrapping_add(id as u64 + data.first().copied().unwrap_or(0) as u64);
    }
    fn completion(&mut self, _: CompletionId, _: uct::Result<u64>) {}
    fn pending(&mut self, _: EpId, _: PendingId) -> bool {
        self.pending += 1;
        true
    }
}

#[test]
fn data_path_and_progress_do_not_allocate() {
    let md = SelfMd::new();
    let mut iface = SelfIface::open(&IfaceParams {
        device: DEVICE_NAME.into(),
        ..Default::default()
    })
    .unwrap();
    let dev = iface.device_address().to_vec();
    let addr = iface.iface_address().to_vec();
    let mut ep = iface.ep_create_connected(&dev, &addr).unwrap();
    let target = md.mem_alloc(4096).unwrap();
    let local = md.mem_alloc(4096).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&target, &mut packed).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let base = rkey.remote_base;
    let payload = [7u8; 256];
    let mut getbuf = [0u8; 256];
    let mut tally = Tally::default();

    let mut round = |ep: &mut uct::self_::SelfEp, iface: &mut SelfIface, tally: &mut Tally| {
        let iov = [Iov::new(&local, 0, 1024).unwrap()];
        assert!(ep.am_short(1, 2, &payload).unwrap().is_done());
        assert!(ep.am_short_iov(1, &[&payload, &payload]).unwrap().is_done());
        let r = ep.am_bcopy(2, |b| {
            b[..100].fill(3);
            100
        });
        assert_eq!(r.unwrap(), Outcome::Done(100));
        assert!(ep
            .am_zcopy(3, b"hdr", &iov, CompletionId(1))
            .unwrap()
            .is_done());
        assert!(ep.put_short(&payload, base, &rkey).unwrap().is_done());
        assert!(ep
            .put_bcopy(
                |b| {
                    b[..64].fill(1);
                    64
                },
                base + 512,
                &rkey
            )
            .unwrap()
            .is_done());
        assert!(ep
            .put_zcopy(&iov, base + 1024, &rkey, CompletionId(2))
            .unwrap()
            .is_done());
        assert!(ep.get_short(&mut getbuf, base, &rkey).unwrap().is_done());
        let mut seen = 0;
        assert!(ep
            .get_bcopy(128, base, &rkey, CompletionId(3), &mut |d| seen += d.len())
            .unwrap()
            .is_done());
        assert_eq!(seen, 128);
        assert!(ep
            .get_zcopy(&iov, base, &rkey, CompletionId(4))
            .unwrap()
            .is_done());
        assert!(ep
            .atomic64_post(AtomicOp::Add, 1, base + 64, &rkey)
            .unwrap()
            .is_done());
        assert!(ep
            .atomic32_fetch(AtomicOp::Xor, 1, base + 72, &rkey, CompletionId(5))
            .unwrap()
            .is_done());
        assert!(ep
            .atomic_cswap64(0, 1, base + 80, &rkey, CompletionId(6))
            .unwrap()
            .is_done());
        assert!(ep.flush(CompletionId(7)).unwrap().is_done());
        ep.fence().unwrap();
        // Fill the ring, queue a pending request, drain and dispatch it.
        while ep.am_short(4, 0, &[]).unwrap().is_done() {}
        ep.pending_add(PendingId(9)).unwrap();
        iface.event_arm(EventFlags::SEND_COMP).unwrap();
        while iface.progress(tally) > 0 {}
        iface.event_arm(EventFlags::RECV).unwrap();
    };

    // Warm-up.
    for _ in 0..3 {
        round(&mut ep, &mut iface, &mut tally);
    }
    let before = tally.msgs;
    COUNTING.with(|c| c.set(true));
    for _ in 0..200 {
        round(&mut ep, &mut iface, &mut tally);
    }
    COUNTING.with(|c| c.set(false));
    assert!(
        tally.msgs - before >= 200 * 64,
        "the loop really sent messages"
    );
    assert_eq!(tally.pending, 203);
    assert_eq!(
        ALLOCS.load(Ordering::Relaxed),
        0,
        "the self data path allocated after warm-up"
    );
}
