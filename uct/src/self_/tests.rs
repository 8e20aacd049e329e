//! Self-specific tests (the generic ones come from the conformance suite, below).

use super::*;
use crate::caps::EventFlags;
use crate::ep::{AtomicOp, Endpoint, EpId, PendingId};
use crate::iface::{EventSink, Iface};
use crate::md::{Iov, MemoryDomain};
use crate::CompletionId;
use std::rc::Rc;
use ucs::{Error, Outcome};

fn open() -> SelfIface {
    SelfIface::open(&IfaceParams {
        device: DEVICE_NAME.into(),
        ..Default::default()
    })
    .unwrap()
}

fn loopback(iface: &mut SelfIface) -> SelfEp {
    let dev = iface.device_address().to_vec();
    let addr = iface.iface_address().to_vec();
    iface.ep_create_connected(&dev, &addr).unwrap()
}

#[derive(Default)]
struct Rec {
    msgs: Vec<(u8, Vec<u8>)>,
    pend: Vec<(EpId, PendingId)>,
}

impl EventSink for Rec {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.msgs.push((id, data.to_vec()));
    }
    fn completion(&mut self, _comp: CompletionId, _result: ucs::Result<u64>) {
        panic!("self never completes asynchronously");
    }
    fn pending(&mut self, ep: EpId, req: PendingId) -> bool {
        self.pend.push((ep, req));
        true
    }
}

#[test]
fn loopback_am_short_and_bcopy() {
    let mut iface = open();
    let mut ep = loopback(&mut iface);
    assert_eq!(ep.am_short(3, 0x1122, b"abc").unwrap(), Outcome::DONE);
    let n = ep
        .am_bcopy(4, |buf| {
            buf[..2].copy_from_slice(b"xy");
            2
        })
        .unwrap();
    assert_eq!(n, Outcome::Done(2));
    let mut rec = Rec::default();
    assert_eq!(iface.progress(&mut rec), 2);
    let mut first = 0x1122u64.to_le_bytes().to_vec();
    first.extend_from_slice(b"abc");
    assert_eq!(rec.msgs, vec![(3, first), (4, b"xy".to_vec())]);
    assert_eq!(iface.progress(&mut rec), 0);
}

#[test]
fn bcopy_pack_claiming_too_much_is_an_error_and_frees_the_slot() {
    let mut iface = open();
    let mut ep = loopback(&mut iface);
    let r = ep.am_bcopy(1, |buf| buf.len() + 1);
    assert!(matches!(r, Err(Error::InvalidParam(_))));
    assert!(ep.am_short(1, 9, &[]).unwrap().is_done());
    let mut rec = Rec::default();
    iface.progress(&mut rec);
    assert_eq!(
        rec.msgs.len(),
        1,
        "the failed message must not be delivered"
    );
    assert_eq!(iface.rx_queued(), 0);
}

/// A sink that sends from inside its callbacks (allowed by the EventSink contract).
struct Echo<'a> {
    ep: &'a mut SelfEp,
    other: &'a mut SelfEp,
    got: Vec<Vec<u8>>,
}

impl EventSink for Echo<'_> {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.got.push(data.to_vec());
        if id == 1 {
            // Reply from inside the callback, with a bcopy whose pack closure sends too (on
            // another endpoint to the same interface).
            let other = &mut *self.other;
            let r = self.ep.am_bcopy(2, |buf| {
                assert!(other.am_short(3, 7, b"nested").unwrap().is_done());
                buf[..5].copy_from_slice(b"reply");
                5
            });
            assert_eq!(r.unwrap(), Outcome::Done(5));
        }
    }
    fn completion(&mut self, _: CompletionId, _: ucs::Result<u64>) {}
}

#[test]
fn callbacks_may_send_reentrantly() {
    let mut iface = open();
    let mut ep = loopback(&mut iface);
    let mut ep2 = loopback(&mut iface);
    let mut ep3 = loopback(&mut iface);
    assert!(ep.am_short(1, 0, b"ping").unwrap().is_done());
    let mut echo = Echo {
        ep: &mut ep2,
        other: &mut ep3,
        got: vec![],
    };
    assert_eq!(iface.progress(&mut echo), 1);
    assert_eq!(iface.progress(&mut echo), 2);
    let mut nested = 7u64.to_le_bytes().to_vec();
    nested.extend_from_slice(b"nested");
    // The bcopy reserved its slot before the nested short was sent, so it comes first.
    assert_eq!(echo.got[1], b"reply");
    assert_eq!(echo.got[2], nested);
}

#[test]
fn ep_after_iface_drop_gives_errors() {
    let md = SelfMd::new();
    let mem = md.mem_alloc(64).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&mem, &mut packed).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let mut iface = open();
    let mut ep = loopback(&mut iface);
    drop(iface);
    let base = rkey.remote_base;
    assert!(ep.am_short(0, 0, b"x").is_err());
    assert!(ep.am_bcopy(0, |_| 0).is_err());
    assert!(ep.put_short(b"x", base, &rkey).is_err());
    assert!(ep.get_short(&mut [0u8; 1], base, &rkey).is_err());
    assert!(ep.atomic64_post(AtomicOp::Add, 1, base, &rkey).is_err());
    assert!(ep
        .atomic64_fetch(AtomicOp::Add, 1, base, &rkey, CompletionId(0))
        .is_err());
    assert!(ep.flush(CompletionId(0)).is_err());
    assert!(ep.fence().is_err());
    assert!(ep.pending_add(PendingId(1)).is_err());
    assert!(ep.ep_address().is_err());
    let mut purged = 0;
    ep.pending_purge(&mut |_| purged += 1);
    assert_eq!(purged, 0);
    drop(ep); // must not panic
}

#[test]
fn sending_to_a_closed_iface_is_a_peer_failure() {
    let mut a = open();
    let b = open();
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let b_addr = b.iface_address().to_vec();
    drop(b);
    assert!(matches!(ep.am_short(0, 0, &[]), Err(Error::PeerFailure(_))));
    let a_dev = a.device_address().to_vec();
    assert!(a.ep_create_connected(&a_dev, &b_addr).is_err());
    assert!(a.is_reachable(a.device_address(), Some(&b_addr)).is_err());
}

#[test]
fn other_process_and_other_thread_are_unreachable() {
    let mut iface = open();
    let foreign = wire::DeviceAddr {
        pid: std::process::id().wrapping_add(1),
        ..wire::DeviceAddr::local()
    }
    .encode();
    let addr = iface.iface_address().to_vec();
    assert!(iface.is_reachable(&foreign, Some(&addr)).is_err());
    // The same process id with another nonce: a process of another PID namespace.
    let same_pid = wire::DeviceAddr {
        nonce: wire::DeviceAddr::local().nonce ^ 1,
        ..wire::DeviceAddr::local()
    }
    .encode();
    let err = iface.is_reachable(&same_pid, Some(&addr)).unwrap_err();
    assert!(err.contains("same id"), "{err}");
    assert!(matches!(
        iface.ep_create_connected(&same_pid, &addr),
        Err(Error::Unreachable(_))
    ));
    assert!(matches!(
        iface.ep_create_connected(&foreign, &addr),
        Err(Error::Unreachable(_))
    ));
    assert!(iface
        .is_reachable(iface.device_address(), Some(&addr))
        .is_ok());
    let dev = iface.device_address().to_vec();
    let err = std::thread::spawn(move || {
        let mut other = open();
        other.ep_create_connected(&dev, &addr).map(|_| ())
    })
    .join()
    .unwrap();
    assert!(matches!(err, Err(Error::Unreachable(_))));
    // Garbage addresses.
    assert!(matches!(
        iface.ep_create_connected(b"xx", b"yy"),
        Err(Error::Wire(_))
    ));
}

#[test]
fn connect_to_ep_delivers_to_the_peer_eps_iface() {
    let mut a = open();
    let mut b = open();
    let mut ea = a.ep_create().unwrap();
    let mut eb = b.ep_create().unwrap();
    assert!(matches!(
        ea.am_short(0, 0, &[]),
        Err(Error::InvalidParam(_))
    ));
    let (da, db) = (a.device_address().to_vec(), b.device_address().to_vec());
    ea.connect_to_ep(&db, &eb.ep_address().unwrap()).unwrap();
    eb.connect_to_ep(&da, &ea.ep_address().unwrap()).unwrap();
    assert!(ea.am_short(5, 1, b"to b").unwrap().is_done());
    assert!(eb.am_short(6, 2, b"to a").unwrap().is_done());
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    a.progress(&mut ra);
    b.progress(&mut rb);
    assert_eq!(ra.msgs.len(), 1);
    assert_eq!(ra.msgs[0].0, 6);
    assert_eq!(rb.msgs.len(), 1);
    assert_eq!(rb.msgs[0].0, 5);
    // Bad endpoint addresses.
    let mut bad = wire::EpAddr::decode(&eb.ep_address().unwrap()).unwrap();
    bad.ep_id += 100;
    assert!(ea.connect_to_ep(&db, &bad.encode()).is_err());
    assert!(ea.connect_to_ep(&db, &[1, 2, 3]).is_err());
}

#[test]
fn misaligned_atomics_and_post_swap_are_rejected() {
    let md = SelfMd::new();
    let mem = md.mem_alloc(64).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&mem, &mut packed).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let mut iface = open();
    let mut ep = loopback(&mut iface);
    let base = rkey.remote_base;
    assert!(matches!(
        ep.atomic64_fetch(AtomicOp::Add, 1, base + 4, &rkey, CompletionId(0)),
        Err(Error::InvalidParam(_))
    ));
    assert!(matches!(
        ep.atomic32_post(AtomicOp::Add, 1, base + 2, &rkey),
        Err(Error::InvalidParam(_))
    ));
    assert!(matches!(
        ep.atomic64_post(AtomicOp::Swap, 1, base, &rkey),
        Err(Error::Unsupported(_))
    ));
    assert!(ep
        .atomic32_fetch(AtomicOp::Add, 1, base + 4, &rkey, CompletionId(0))
        .is_ok());
}

#[test]
fn pending_wakes_an_armed_sender_of_another_iface() {
    let mut a = open();
    let mut b = open();
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    while ep.am_short(0, 0, &[]).unwrap() == Outcome::DONE {}
    ep.pending_add(PendingId(42)).unwrap();
    assert_eq!(a.flush(CompletionId(0)).unwrap(), Outcome::NoResource);
    assert_eq!(ep.flush(CompletionId(0)).unwrap(), Outcome::NoResource);
    a.event_arm(EventFlags::SEND_COMP).unwrap();
    let fd = a.event_fd().unwrap();
    assert!(!readable(fd));
    let mut rb = Rec::default();
    b.progress(&mut rb);
    assert_eq!(rb.msgs.len(), RX_RING_LEN);
    assert!(readable(fd), "draining b must wake a's SEND_COMP sleeper");
    assert!(matches!(
        a.event_arm(EventFlags::SEND_COMP),
        Err(Error::Busy(_))
    ));
    let mut ra = Rec::default();
    a.progress(&mut ra);
    assert_eq!(ra.pend, vec![(ep.id(), PendingId(42))]);
    assert_eq!(a.flush(CompletionId(0)).unwrap(), Outcome::DONE);
    a.event_arm(EventFlags::SEND_COMP).unwrap();
}

/// Counts its rings.
#[derive(Default)]
struct Bell(std::cell::Cell<u32>);

impl crate::iface::WorkBell for Bell {
    fn ring(&self) {
        self.0.set(self.0.get() + 1);
    }
}

/// Every way work reaches a self interface rings its bell: a message into its ring (short,
/// bcopy, and a bcopy whose pack fails, which leaves a slot to skip) and a send queued as
/// pending on its endpoint; receiving and idle polls do not ring.
#[test]
fn work_rings_the_bell_of_the_interface_that_gets_it() {
    let mut a = open();
    let mut b = open();
    let (bell_a, bell_b) = (Rc::new(Bell::default()), Rc::new(Bell::default()));
    assert!(a.ring_on_work(bell_a.clone()));
    assert!(b.ring_on_work(bell_b.clone()));
    assert!(
        !a.ring_on_work(Rc::new(Bell::default())),
        "one bell per interface"
    );
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    assert!(ep.am_short(1, 0, b"x").unwrap().is_done());
    assert!(ep.am_bcopy(1, |_| 0).unwrap().is_done());
    assert!(ep.am_bcopy(1, |buf| buf.len() + 1).is_err());
    assert_eq!((bell_a.0.get(), bell_b.0.get()), (0, 3));
    let mut rec = Rec::default();
    assert_eq!(b.progress(&mut rec), 2);
    assert!(b.idle_poll() && a.idle_poll());
    assert_eq!(
        (bell_a.0.get(), bell_b.0.get()),
        (0, 3),
        "polls do not ring"
    );
    while ep.am_short(0, 0, &[]).unwrap() == Outcome::DONE {}
    let rings_b = bell_b.0.get();
    ep.pending_add(PendingId(7)).unwrap();
    assert_eq!(
        bell_a.0.get(),
        1,
        "a pending send is work for the sender's interface"
    );
    assert!(!a.idle_poll());
    assert_eq!(bell_b.0.get(), rings_b);
}

fn readable(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn pending_purge_returns_requests() {
    let mut iface = open();
    let mut ep = loopback(&mut iface);
    while ep.am_short(0, 0, &[]).unwrap() == Outcome::DONE {}
    ep.pending_add(PendingId(1)).unwrap();
    ep.pending_add(PendingId(2)).unwrap();
    let mut got = vec![];
    ep.pending_purge(&mut |r| got.push(r));
    assert_eq!(got, vec![PendingId(1), PendingId(2)]);
    assert_eq!(iface.flush(CompletionId(0)).unwrap(), Outcome::DONE);
    let mut rec = Rec::default();
    iface.progress(&mut rec);
    assert!(rec.pend.is_empty());
}

#[test]
fn zcopy_with_too_many_iovs_is_rejected() {
    let md = SelfMd::new();
    let mem = md.mem_alloc(64).unwrap();
    let iov: Vec<Iov<'_>> = (0..MAX_IOV + 1)
        .map(|i| Iov::new(&mem, i, 1).unwrap())
        .collect();
    let mut iface = open();
    let mut ep = loopback(&mut iface);
    assert!(matches!(
        ep.am_zcopy(0, &[], &iov, CompletionId(0)),
        Err(Error::InvalidParam(_))
    ));
    assert!(ep
        .am_zcopy(0, &[], &iov[..MAX_IOV], CompletionId(0))
        .is_ok());
}

#[test]
fn registry_lists_and_opens_self() {
    assert!(crate::TRANSPORT_NAMES.contains(&"self"));
    let (md, iface) = crate::open("self", DEVICE_NAME).unwrap();
    assert_eq!(md.name(), "self");
    assert_eq!(iface.tl_name(), "self");
    assert!(crate::open("self", "memory").is_err());
}

crate::uct_conformance_tests!(conformance, crate::testing::TlPair<SelfTransport>);

/// Records pending retries; says "still no resources" for the requests in `refuse` once each.
#[derive(Default)]
struct Picky {
    order: Vec<PendingId>,
    refuse: Vec<PendingId>,
}

impl EventSink for Picky {
    fn am(&mut self, _: u8, _: &[u8]) {}
    fn completion(&mut self, _: CompletionId, _: ucs::Result<u64>) {}
    fn pending(&mut self, _ep: EpId, req: PendingId) -> bool {
        self.order.push(req);
        if let Some(i) = self.refuse.iter().position(|&r| r == req) {
            self.refuse.remove(i);
            return false;
        }
        true
    }
}

#[test]
fn pending_dispatch_is_round_robin_and_respects_refusal() {
    let mut iface = open();
    let mut a = loopback(&mut iface);
    let mut b = loopback(&mut iface);
    while a.am_short(0, 0, &[]).unwrap() == Outcome::DONE {}
    a.pending_add(PendingId(1)).unwrap();
    a.pending_add(PendingId(2)).unwrap();
    b.pending_add(PendingId(3)).unwrap();
    b.pending_add(PendingId(4)).unwrap();
    let mut sink = Picky::default();
    iface.progress(&mut sink);
    assert_eq!(
        sink.order,
        [1, 3, 2, 4].map(PendingId),
        "one request per endpoint per round"
    );

    while a.am_short(0, 0, &[]).unwrap() == Outcome::DONE {}
    a.pending_add(PendingId(1)).unwrap();
    a.pending_add(PendingId(2)).unwrap();
    b.pending_add(PendingId(3)).unwrap();
    let mut sink = Picky {
        refuse: vec![PendingId(1)],
        ..Default::default()
    };
    iface.progress(&mut sink);
    // 1 was refused: endpoint a is not retried again in this progress call, b goes on.
    assert_eq!(sink.order, [1, 3].map(PendingId));
    assert_eq!(iface.flush(CompletionId(0)).unwrap(), Outcome::NoResource);
    iface.progress(&mut sink);
    assert_eq!(
        sink.order,
        [1, 3, 1, 2].map(PendingId),
        "the refused request stays first"
    );
    assert_eq!(iface.flush(CompletionId(0)).unwrap(), Outcome::DONE);
}

#[test]
fn dropping_a_target_wakes_blocked_senders() {
    let mut a = open();
    let b = open();
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    while ep.am_short(0, 0, &[]).unwrap() == Outcome::DONE {}
    ep.pending_add(PendingId(5)).unwrap();
    a.event_arm(EventFlags::SEND_COMP).unwrap();
    drop(b);
    assert!(readable(a.event_fd().unwrap()));
    let mut rec = Rec::default();
    a.progress(&mut rec);
    assert_eq!(rec.pend, vec![(ep.id(), PendingId(5))]);
    assert!(matches!(ep.am_short(0, 0, &[]), Err(Error::PeerFailure(_))));
}

/// A sink that only counts (for the benchmark).
#[derive(Default)]
struct Count(usize);

impl EventSink for Count {
    fn am(&mut self, _: u8, data: &[u8]) {
        self.0 += data.len();
    }
    fn completion(&mut self, _: CompletionId, _: ucs::Result<u64>) {}
}

/// Prints the self transport's costs. Not a pass/fail test; run it with
/// `cargo test -p uct --release self_::tests::bench -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark; run with --release -- --ignored --nocapture"]
fn bench() {
    use std::time::Instant;
    let md = SelfMd::new();
    let mut iface = open();
    let mut ep = loopback(&mut iface);
    let mut sink = Count::default();
    let n = 2_000_000u32;

    // One-way: send one 8-byte AM, progress until it is delivered.
    let t = Instant::now();
    for i in 0..n {
        assert!(ep.am_short(1, i as u64, &[]).unwrap().is_done());
        iface.progress(&mut sink);
    }
    let lat = t.elapsed().as_secs_f64() / n as f64;
    println!("self am_short 8 B send+deliver: {:.1} ns", lat * 1e9);

    // Rate: bursts of a full ring, then progress.
    let t = Instant::now();
    let mut sent = 0u64;
    while sent < n as u64 {
        while ep.am_short(1, sent, &[]).unwrap().is_done() {
            sent += 1;
        }
        iface.progress(&mut sink);
    }
    let rate = sent as f64 / t.elapsed().as_secs_f64();
    println!("self am_short 8 B message rate: {:.1} M msg/s", rate / 1e6);

    // Put bandwidth with 1 MiB zcopy.
    let len = 1 << 20;
    let src = md.mem_alloc(len).unwrap();
    let dst = md.mem_alloc(len).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&dst, &mut packed).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let iov = [Iov::whole(&src)];
    let iters = 2000;
    let t = Instant::now();
    for _ in 0..iters {
        assert!(ep
            .put_zcopy(&iov, rkey.remote_base, &rkey, CompletionId(0))
            .unwrap()
            .is_done());
    }
    let bw = (iters * len) as f64 / t.elapsed().as_secs_f64();
    println!("self put_zcopy 1 MiB bandwidth: {:.2} GB/s", bw / 1e9);

    // put_short 8 B overhead.
    let t = Instant::now();
    for i in 0..n {
        let v = (i as u64).to_le_bytes();
        assert!(ep.put_short(&v, rkey.remote_base, &rkey).unwrap().is_done());
    }
    let ov = t.elapsed().as_secs_f64() / n as f64;
    println!("self put_short 8 B: {:.1} ns", ov * 1e9);
    assert!(sink.0 > 0);
}

struct PanicSink;

impl EventSink for PanicSink {
    fn am(&mut self, _: u8, _: &[u8]) {
        panic!("sink panics (on purpose)");
    }
    fn completion(&mut self, _: CompletionId, _: ucs::Result<u64>) {}
}

#[test]
fn a_panicking_pack_or_sink_loses_no_buffer() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let md = SelfMd::new();
    let mem = md.mem_alloc(64).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&mem, &mut packed).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let mut iface = open();
    let mut ep = loopback(&mut iface);
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = ep.am_bcopy(1, |_| panic!("pack panics (on purpose)"));
    }));
    assert!(r.is_err());
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = ep.put_bcopy(|_| panic!("pack panics"), rkey.remote_base, &rkey);
    }));
    assert!(r.is_err());
    assert!(ep.am_short(2, 0, b"x").unwrap().is_done());
    let r = catch_unwind(AssertUnwindSafe(|| iface.progress(&mut PanicSink)));
    assert!(r.is_err());
    // Everything still works, over several turns of the ring.
    let mut rec = Rec::default();
    for round in 0..3 * RX_RING_LEN {
        let r = ep.am_bcopy(3, |b| {
            b[..4].copy_from_slice(&(round as u32).to_le_bytes());
            4
        });
        assert_eq!(r.unwrap(), Outcome::Done(4));
        iface.progress(&mut rec);
    }
    assert_eq!(
        rec.msgs.len(),
        3 * RX_RING_LEN,
        "the panicked messages are not delivered"
    );
    assert_eq!(rec.msgs[5].1, 5u32.to_le_bytes());
    let r = ep.put_bcopy(
        |b| {
            b[..2].copy_from_slice(b"ok");
            2
        },
        rkey.remote_base,
        &rkey,
    );
    assert_eq!(r.unwrap(), Outcome::Done(2));
    let mut got = [0u8; 2];
    mem.read(0, &mut got).unwrap();
    assert_eq!(&got, b"ok");
}
