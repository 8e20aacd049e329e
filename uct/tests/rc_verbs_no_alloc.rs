//! Proves that rc_verbs' data path and progress allocate nothing after warm-up: a counting
//! global allocator (in this test binary only) counts allocations made by this thread while the
//! measured loop runs. Needs an RDMA device: without one it prints a note and passes (it runs for
//! real inside the Soft-RoCE VM, `tests/rdma-vm/ci.sh`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use ucs::testing::{CountingAlloc, ALLOCS, COUNTING};
use uct::rc_verbs::RcVerbs;
use uct::{
    AtomicOp, CompletionId, Endpoint, EpId, EventSink, Iface, IfaceParams, Iov, MemoryDomain,
};
use uct::{Outcome, PendingId, Transport};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// A sink that allocates nothing: counts.
#[derive(Default)]
struct Tally {
    msgs: usize,
    comps: usize,
    errors: usize,
    gets: usize,
}

impl EventSink for Tally {
    fn am(&mut self, _id: u8, data: &[u8]) {
        self.msgs += 1;
        std::hint::black_box(data);
    }
    fn completion(&mut self, _: CompletionId, r: uct::Result<u64>) {
        self.comps += 1;
        if r.is_err() {
            self.errors += 1;
        }
    }
    fn get_bcopy_data(&mut self, _: CompletionId, data: &[u8]) {
        self.gets += data.len();
    }
    fn pending(&mut self, _: EpId, _: PendingId) -> bool {
        true
    }
    fn ep_error(&mut self, _: EpId, _: uct::Error) {
        self.errors += 1;
    }
}

/// Retries `op` after progress while it gives NoResource (fails after a watchdog); gives
/// whether it ended `InProgress`.
fn retry<T>(
    iface: &mut uct::rc_verbs::RcVerbsIface,
    tally: &mut Tally,
    mut op: impl FnMut() -> uct::Result<Outcome<T>>,
) -> bool {
    let start = Instant::now();
    loop {
        match op().unwrap() {
            Outcome::NoResource => {
                iface.progress(tally);
                assert!(start.elapsed() < Duration::from_secs(30), "watchdog");
            }
            Outcome::InProgress => return true,
            Outcome::Done(_) => return false,
        }
    }
}

#[test]
fn rc_verbs_data_path_and_progress_do_not_allocate() {
    let dev = match RcVerbs::devices() {
        Ok(d) => d[0].name.clone(),
        Err(why) => {
            println!("note: skipped, no rc_verbs device here: {why}");
            return;
        }
    };
    let md = RcVerbs::open_md(&dev).unwrap();
    let mut iface = RcVerbs::open_iface(
        &md,
        &IfaceParams {
            device: dev.clone(),
            ..Default::default()
        },
    )
    .unwrap();
    let mut a = iface.ep_create().unwrap();
    let mut b = iface.ep_create().unwrap();
    let da = iface.device_address().to_vec();
    let (aa, ba) = (a.ep_address().unwrap(), b.ep_address().unwrap());
    a.connect_to_ep(&da, &ba).unwrap();
    b.connect_to_ep(&da, &aa).unwrap();
    let target = md.mem_alloc(8192).unwrap();
    let local = md.mem_alloc(8192).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&target, &mut packed).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let base = rkey.remote_base;
    let payload = [7u8; 32];
    let mut tally = Tally::default();
    let mut comp = 0u64;

    let mut round = |ep: &mut uct::rc_verbs::RcVerbsEp,
                     iface: &mut uct::rc_verbs::RcVerbsIface,
                     tally: &mut Tally| {
        let iov = [Iov::new(&local, 0, 1024).unwrap()];
        retry(iface, tally, || ep.am_short(1, 2, &payload));
        retry(iface, tally, || ep.am_short_iov(1, &[&payload, &payload]));
        retry(iface, tally, || {
            ep.am_bcopy(2, |buf| {
                buf[..100].fill(3);
                100
            })
        });
        comp += 1;
        retry(iface, tally, || {
            ep.am_zcopy(3, b"hdr", &iov, CompletionId(comp))
        });
        retry(iface, tally, || ep.put_short(&payload, base, &rkey));
        retry(iface, tally, || {
            ep.put_bcopy(
                |buf| {
                    buf[..64].fill(1);
                    64
                },
                base + 512,
                &rkey,
            )
        });
        comp += 1;
        retry(iface, tally, || {
            ep.put_zcopy(&iov, base + 1024, &rkey, CompletionId(comp))
        });
        comp += 1;
        retry(iface, tally, || {
            ep.get_bcopy(128, base, &rkey, CompletionId(comp), &mut |_| {})
        });
        comp += 1;
        retry(iface, tally, || {
            ep.get_zcopy(&iov, base, &rkey, CompletionId(comp))
        });
        retry(iface, tally, || {
            ep.atomic64_post(AtomicOp::Add, 1, base + 64, &rkey)
        });
        comp += 1;
        retry(iface, tally, || {
            ep.atomic64_fetch(AtomicOp::Add, 1, base + 64, &rkey, CompletionId(comp))
        });
        comp += 1;
        retry(iface, tally, || {
            ep.atomic_cswap64(0, 1, base + 80, &rkey, CompletionId(comp))
        });
        comp += 1;
        if retry(iface, tally, || ep.flush(CompletionId(comp))) {
            let want = tally.comps + 1;
            let start = Instant::now();
            while tally.comps < want {
                iface.progress(tally);
                assert!(start.elapsed() < Duration::from_secs(30), "watchdog: flush");
            }
        }
        for _ in 0..16 {
            iface.progress(tally);
        }
    };
    // Warm up (first use of lazily grown queues), then count.
    for _ in 0..50 {
        round(&mut a, &mut iface, &mut tally);
    }
    ALLOCS.store(0, Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    for _ in 0..200 {
        round(&mut a, &mut iface, &mut tally);
    }
    COUNTING.with(|c| c.set(false));
    let allocs = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(tally.errors, 0);
    assert!(tally.msgs > 0 && tally.gets > 0);
    assert_eq!(
        allocs, 0,
        "{allocs} allocations in 200 rounds of data operations and progress"
    );
    drop(b);
}
