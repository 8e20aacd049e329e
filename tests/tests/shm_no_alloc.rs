//! Proves that the posix and sysv data paths and progress allocate nothing after warm-up: a
//! counting global allocator (in this test binary only) counts allocations made by this thread
//! while the measured loop runs.

use std::sync::atomic::Ordering;
use ucs::testing::{CountingAlloc, ALLOCS, COUNTING};
use uct::mm::{MmEp, MmIface, PosixTransport, SysvTransport};
use uct::CompletionId;
use uct::{
    AtomicOp, Endpoint, EpId, EventFlags, EventSink, Iface, IfaceParams, Iov, MemoryDomain,
    Outcome, PendingId, Transport,
};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// A sink that allocates nothing: counts and checksums.
#[derive(Default)]
struct Tally {
    msgs: usize,
    sum: u64,
    pending: usize,
}

impl EventSink for Tally {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.msgs += 1;
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

fn round(
    ep: &mut MmEp,
    a: &mut MmIface,
    b: &mut MmIface,
    tally: &mut Tally,
    bufs: &mut (uct::MemHandle, uct::MemHandle, uct::RemoteKey),
) {
    let (local, target, rkey) = (&bufs.0, &bufs.1, &bufs.2);
    let base = target.addr() as u64;
    let payload = [7u8; 64];
    let mut getbuf = [0u8; 256];
    let iov = [Iov::new(local, 0, 1024).unwrap()];
    assert!(ep.am_short(1, 2, &payload).unwrap().is_done());
    assert!(ep
        .am_short_iov(1, &[&payload, &payload[..8]])
        .unwrap()
        .is_done());
    let r = ep.am_bcopy(2, |buf| {
        buf[..100].fill(3);
        100
    });
    assert_eq!(r.unwrap(), Outcome::Done(100));
    assert!(ep
        .am_zcopy(3, b"hdr", &iov, CompletionId(1))
        .unwrap()
        .is_done());
    assert!(ep.put_short(&payload, base, rkey).unwrap().is_done());
    assert!(ep
        .put_bcopy(
            |buf| {
                buf[..64].fill(1);
                64
            },
            base + 8192,
            rkey
        )
        .unwrap()
        .is_done());
    // Near the end of the region: the bounce-buffer path.
    assert!(ep
        .put_bcopy(
            |buf| {
                buf[..16].fill(2);
                16
            },
            base + 16384 - 16,
            rkey
        )
        .unwrap()
        .is_done());
    assert!(ep
        .put_zcopy(&iov, base + 1024, rkey, CompletionId(2))
        .unwrap()
        .is_done());
    assert!(ep.get_short(&mut getbuf, base, rkey).unwrap().is_done());
    let mut seen = 0;
    assert!(ep
        .get_bcopy(128, base, rkey, CompletionId(3), &mut |d| seen += d.len())
        .unwrap()
        .is_done());
    assert_eq!(seen, 128);
    assert!(ep
        .get_zcopy(&iov, base, rkey, CompletionId(4))
        .unwrap()
        .is_done());
    assert!(ep
        .atomic64_post(AtomicOp::Add, 1, base + 64, rkey)
        .unwrap()
        .is_done());
    assert!(ep
        .atomic32_fetch(AtomicOp::Xor, 1, base + 72, rkey, CompletionId(5))
        .unwrap()
        .is_done());
    assert!(ep
        .atomic_cswap64(0, 1, base + 80, rkey, CompletionId(6))
        .unwrap()
        .is_done());
    assert!(ep.flush(CompletionId(7)).unwrap().is_done());
    ep.fence().unwrap();
    // Fill the FIFO, queue a pending request, drain and dispatch it.
    while ep.am_short(4, 0, &[]).unwrap().is_done() {}
    ep.pending_add(PendingId(9)).unwrap();
    while b.progress(tally) > 0 {}
    // Enough progress calls on the sender to run its peer-liveness check too.
    for _ in 0..1100 {
        a.progress(tally);
    }
    b.event_arm(EventFlags::RECV).unwrap();
}

fn no_alloc<T: Transport<Md = uct::mm::MmMd, Iface = MmIface, Ep = MmEp>>() {
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
    let local = md.mem_alloc(4096).unwrap();
    let target = md.mem_alloc(16384).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&target, &mut packed).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let mut bufs = (local, target, rkey);
    let mut tally = Tally::default();
    for _ in 0..3 {
        round(&mut ep, &mut a, &mut b, &mut tally, &mut bufs);
    }
    let before = (tally.msgs, tally.pending);
    ALLOCS.store(0, Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    for _ in 0..100 {
        round(&mut ep, &mut a, &mut b, &mut tally, &mut bufs);
    }
    COUNTING.with(|c| c.set(false));
    assert!(
        tally.msgs - before.0 >= 100 * 256,
        "the loop really sent messages"
    );
    assert_eq!(tally.pending - before.1, 100);
    assert_eq!(
        ALLOCS.load(Ordering::Relaxed),
        0,
        "the {} data path allocated after warm-up",
        T::NAME
    );
}

#[test]
fn shm_posix_data_path_and_progress_do_not_allocate() {
    no_alloc::<PosixTransport>();
}

#[test]
fn shm_sysv_data_path_and_progress_do_not_allocate() {
    no_alloc::<SysvTransport>();
}
