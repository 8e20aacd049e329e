//! In-process tests of the tcp transport over loopback.

use super::md::{reg_key, TcpMd};
use super::*;
use crate::ep::{AtomicOp, CompletionId, EpId, PendingId};
use crate::iface::{EventSink, Iface};
use crate::md::{Iov, MemHandle, MemoryDomain, RemoteKey};
use crate::{Endpoint, EventFlags};
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use ucs::{Error, Outcome};

/// Collects everything progress delivers.
#[derive(Default)]
pub(crate) struct Sink {
    pub ams: Vec<(u8, Vec<u8>)>,
    pub comps: Vec<(CompletionId, ucs::Result<u64>)>,
    pub get_data: Vec<(CompletionId, Vec<u8>)>,
    pub pending: Vec<(EpId, PendingId)>,
    pub errors: Vec<(EpId, Error)>,
}

impl EventSink for Sink {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.ams.push((id, data.to_vec()));
    }
    fn completion(&mut self, comp: CompletionId, result: ucs::Result<u64>) {
        self.comps.push((comp, result));
    }
    fn get_bcopy_data(&mut self, comp: CompletionId, data: &[u8]) {
        self.get_data.push((comp, data.to_vec()));
    }
    fn pending(&mut self, ep: EpId, req: PendingId) -> bool {
        self.pending.push((ep, req));
        true
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.errors.push((ep, err));
    }
}

impl Sink {
    fn comp(&self, id: CompletionId) -> Option<&ucs::Result<u64>> {
        self.comps.iter().find(|c| c.0 == id).map(|c| &c.1)
    }
}

fn lo() -> NetIf {
    host_interfaces()
        .unwrap()
        .into_iter()
        .find(|i| i.loopback)
        .expect("a loopback interface")
}

pub(crate) fn open_lo() -> TcpIface {
    TcpIface::open(lo()).unwrap()
}

/// Progresses both interfaces until `done` holds; panics after a watchdog of 20 s.
fn run(
    a: &mut TcpIface,
    sa: &mut Sink,
    b: &mut TcpIface,
    sb: &mut Sink,
    mut done: impl FnMut(&Sink, &Sink) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(sa, sb) {
        a.progress(sa);
        b.progress(sb);
        assert!(Instant::now() < deadline, "watchdog: condition not reached");
    }
}

fn pair() -> (TcpIface, TcpIface, TcpEp) {
    let mut a = open_lo();
    let b = open_lo();
    let ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    (a, b, ep)
}

#[test]
fn am_short_boundaries_and_order() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let sizes = [0usize, 1, 7, MAX_SHORT_PAYLOAD];
    for (i, &n) in sizes.iter().enumerate() {
        let payload: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
        assert_eq!(
            ep.am_short(3, 0x1122_3344_5566_7788 + i as u64, &payload)
                .unwrap(),
            Outcome::DONE
        );
    }
    let err = ep
        .am_short(3, 0, &vec![0u8; MAX_SHORT_PAYLOAD + 1])
        .unwrap_err();
    assert!(matches!(err, Error::MessageTooLong { .. }), "{err}");
    assert!(matches!(
        ep.am_short(32, 0, &[]),
        Err(Error::InvalidParam(_))
    ));
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| {
        sb.ams.len() == sizes.len()
    });
    for (i, &n) in sizes.iter().enumerate() {
        let (id, data) = &sb.ams[i];
        assert_eq!(*id, 3);
        assert_eq!(data.len(), 8 + n);
        assert_eq!(data[..8], (0x1122_3344_5566_7788 + i as u64).to_le_bytes());
        assert!(data[8..]
            .iter()
            .enumerate()
            .all(|(j, &x)| x == (i * 31 + j) as u8));
    }
}

const MAX_SHORT_PAYLOAD: usize = conn::MAX_SHORT - 8;

#[test]
fn am_iov_bcopy_zcopy_deliver_exact_bytes() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    assert_eq!(
        ep.am_short_iov(1, &[b"ab", b"", b"cde"]).unwrap(),
        Outcome::DONE
    );
    let r = ep
        .am_bcopy(2, |buf| {
            assert_eq!(buf.len(), a.attr().am.max_bcopy);
            buf[..5].copy_from_slice(b"hello");
            5
        })
        .unwrap();
    assert_eq!(r, Outcome::Done(5));
    let r = ep
        .am_bcopy(2, |buf| {
            buf.fill(0xab);
            buf.len()
        })
        .unwrap();
    assert_eq!(r, Outcome::Done(a.attr().am.max_bcopy));
    let md = TcpMd::new();
    let m = md.mem_alloc(a.attr().am.max_zcopy).unwrap();
    let pattern: Vec<u8> = (0..m.len()).map(|i| (i * 7) as u8).collect();
    m.write(0, &pattern).unwrap();
    let iov = [
        Iov::new(&m, 0, 100).unwrap(),
        Iov::new(&m, 100, m.len() - 100).unwrap(),
    ];
    let r = ep.am_zcopy(4, b"HDR", &iov, 77).unwrap();
    assert!(matches!(r, Outcome::Done(()) | Outcome::InProgress));
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sb.ams.len() == 4 && (r.is_done() || sa.comp(77).is_some())
    });
    assert_eq!(sb.ams[0], (1, b"abcde".to_vec()));
    assert_eq!(sb.ams[1], (2, b"hello".to_vec()));
    assert_eq!(sb.ams[2].1, vec![0xab; a.attr().am.max_bcopy]);
    assert_eq!(&sb.ams[3].1[..3], b"HDR");
    assert_eq!(&sb.ams[3].1[3..], &pattern[..]);
    let too_big = md.mem_alloc(a.attr().am.max_zcopy + 1).unwrap();
    assert!(ep.am_zcopy(4, b"", &[Iov::whole(&too_big)], 1).is_err());
}

#[test]
fn backpressure_partial_sends_and_pending() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    // Make sure the connection is up before filling it.
    run(&mut a, &mut sa, &mut b, &mut sb, |_, _| {
        ep.am_short(0, 0, b"x").unwrap().is_done()
    });
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    sb.ams.clear();
    // The receiver does not progress: fill kernel buffers and then our send queue.
    let mut sent = 0u32;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = ep
            .am_bcopy(5, |buf| {
                buf[..4].copy_from_slice(&sent.to_le_bytes());
                buf[4..4000].fill(sent as u8);
                4000
            })
            .unwrap();
        match r {
            Outcome::Done(_) => sent += 1,
            Outcome::NoResource => break,
            Outcome::InProgress => unreachable!(),
        }
        assert!(Instant::now() < deadline, "watchdog: never saw NoResource");
    }
    assert!(sent > 10);
    // The full socket makes the queue wait for epoll's "writable" instead of retrying sendmsg.
    {
        let g = a.inner.borrow();
        assert_eq!(g.waiting_out, 1);
        assert!(g.conns.iter().any(|(_, c)| c.wait_out));
    }
    // pending_add accepts the request.
    ep.pending_add(42).unwrap();
    // While a request is pending, new operations queue behind it.
    assert_eq!(ep.am_short(5, 0, b"y").unwrap(), Outcome::NoResource);
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        !sa.pending.is_empty()
    });
    assert_eq!(sa.pending, vec![(ep.id(), 42)]);
    // Everything arrives, complete and in order.
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| {
        sb.ams.len() == sent as usize
    });
    for (i, (id, d)) in sb.ams.iter().enumerate() {
        assert_eq!(*id, 5);
        assert_eq!(d.len(), 4000);
        assert_eq!(u32::from_le_bytes(d[..4].try_into().unwrap()), i as u32);
        assert!(d[4..].iter().all(|&x| x == i as u8));
    }
    // Resources are back: pending_add now says retry at once.
    assert!(matches!(ep.pending_add(43), Err(Error::Busy(_))));
    let inner_a = a.inner.clone();
    run(&mut a, &mut sa, &mut b, &mut sb, |_, _| {
        inner_a.borrow().waiting_out == 0
    });
    assert!(a.inner.borrow().conns.iter().all(|(_, c)| !c.wait_out));
}

#[test]
fn quiet_connection_waits_for_epoll_and_still_receives() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    assert!(ep.am_short(0, 0, b"up").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 1);
    // Nothing arrives for a while: b stops polling the socket and waits for epoll.
    let deadline = Instant::now() + Duration::from_secs(20);
    while b.inner.borrow().gated == 0 {
        b.progress(&mut sb);
        assert!(Instant::now() < deadline, "watchdog: never gated");
    }
    assert!(b.inner.borrow().conns.iter().any(|(_, c)| c.rx_gated));
    // Messages still arrive, complete and in order, and the connection is polled again.
    for i in 1..=50u64 {
        assert!(ep.am_short(0, i, b"after").unwrap().is_done());
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 51);
    for (i, (_, d)) in sb.ams.iter().enumerate() {
        assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), i as u64);
    }
    assert_eq!(b.inner.borrow().gated, 0);
    // A large put is received with the connection waiting for epoll in the middle of the
    // payload, and lands whole.
    let md = TcpMd::new();
    let (src, dst) = (
        md.mem_alloc(1 << 20).unwrap(),
        md.mem_alloc(1 << 20).unwrap(),
    );
    let pattern: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    src.write(0, &pattern).unwrap();
    let rk = rkey_of(&md, &dst);
    let r = ep.put_zcopy(&[Iov::whole(&src)], dst.addr() as u64, &rk, 77);
    assert!(!r.unwrap().is_no_resource());
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(77).is_some()
    });
    assert!(matches!(sa.comp(77), Some(Ok(_))));
    let mut got = vec![0u8; 1 << 20];
    dst.read(0, &mut got).unwrap();
    assert!(got == pattern);
    assert!(sa.errors.is_empty() && sb.errors.is_empty());
}

#[test]
fn zcopy_partial_send_keeps_memory_until_taken() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let md = TcpMd::new();
    let len = a.attr().am.max_zcopy;
    let bufs: Vec<MemHandle> = (0..64)
        .map(|i| {
            let m = md.mem_alloc(len).unwrap();
            m.write(0, &vec![i as u8; len]).unwrap();
            m
        })
        .collect();
    let mut inflight = Vec::new();
    let mut posted = 0;
    for (i, m) in bufs.iter().enumerate() {
        let r = ep
            .am_zcopy(6, &(i as u32).to_le_bytes(), &[Iov::whole(m)], i as u64)
            .unwrap();
        match r {
            Outcome::InProgress => inflight.push(i as u64),
            Outcome::Done(()) => {}
            Outcome::NoResource => break,
        }
        posted += 1;
    }
    assert!(
        !inflight.is_empty(),
        "the socket took 64 x 64 KiB without a partial send"
    );
    // Dropping the caller's handles is safe: the transport holds clones until sent.
    drop(bufs);
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sb.ams.len() == posted && inflight.iter().all(|c| sa.comp(*c).is_some())
    });
    for (i, (_, d)) in sb.ams.iter().enumerate() {
        assert_eq!(u32::from_le_bytes(d[..4].try_into().unwrap()), i as u32);
        assert!(
            d[4..].iter().all(|&x| x == i as u8),
            "message {i} corrupted"
        );
    }
    assert!(sa.comps.iter().all(|c| c.1.is_ok()));
}

fn rkey_of(md: &TcpMd, m: &MemHandle) -> RemoteKey {
    let mut v = Vec::new();
    md.rkey_pack(m, &mut v).unwrap();
    md.rkey_unpack(&v).unwrap()
}

#[test]
fn put_get_all_forms_and_flush() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let md = TcpMd::new();
    let target = md.mem_alloc(3 << 20).unwrap();
    let rk = rkey_of(&md, &target);
    let base = target.addr() as u64;
    assert_eq!(ep.put_short(b"short", base, &rk).unwrap(), Outcome::DONE);
    let r = ep
        .put_bcopy(
            |buf| {
                buf[..5].copy_from_slice(b"bcopy");
                5
            },
            base + 100,
            &rk,
        )
        .unwrap();
    assert_eq!(r, Outcome::Done(5));
    let src = md.mem_alloc(2 << 20).unwrap();
    let pattern: Vec<u8> = (0..src.len()).map(|i| (i % 251) as u8).collect();
    src.write(0, &pattern).unwrap();
    let r = ep
        .put_zcopy(&[Iov::whole(&src)], base + 4096, &rk, 1)
        .unwrap();
    assert_eq!(r, Outcome::InProgress);
    let f = ep.flush(2).unwrap();
    assert_eq!(f, Outcome::InProgress);
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(1).is_some() && sa.comp(2).is_some()
    });
    assert!(sa.comp(1).unwrap().is_ok() && sa.comp(2).unwrap().is_ok());
    let mut got = vec![0u8; 5];
    target.read(0, &mut got).unwrap();
    assert_eq!(&got, b"short");
    target.read(100, &mut got).unwrap();
    assert_eq!(&got, b"bcopy");
    let mut big = vec![0u8; src.len()];
    target.read(4096, &mut big).unwrap();
    assert!(big == pattern, "put_zcopy data differ");
    // Everything acknowledged: flush is immediate.
    assert_eq!(ep.flush(3).unwrap(), Outcome::DONE);

    // get_bcopy: data through the sink, then the completion.
    let r = ep
        .get_bcopy(5, base + 100, &rk, 10, &mut |_| panic!("not inline"))
        .unwrap();
    assert_eq!(r, Outcome::InProgress);
    // get_zcopy of 2 MiB (streamed in chunks) into two pieces.
    let dst = md.mem_alloc(src.len()).unwrap();
    let iov = [
        Iov::new(&dst, 0, 1000).unwrap(),
        Iov::new(&dst, 1000, dst.len() - 1000).unwrap(),
    ];
    assert_eq!(
        ep.get_zcopy(&iov, base + 4096, &rk, 11).unwrap(),
        Outcome::InProgress
    );
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(10).is_some() && sa.comp(11).is_some()
    });
    assert_eq!(sa.get_data, vec![(10, b"bcopy".to_vec())]);
    assert!(sa.comp(11).unwrap().is_ok());
    let mut back = vec![0u8; dst.len()];
    dst.read(0, &mut back).unwrap();
    assert!(back == pattern, "get_zcopy data differ");
    // get_short is not offered.
    assert!(matches!(
        ep.get_short(&mut [0u8; 4], base, &rk),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn atomics_32_and_64() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let md = TcpMd::new();
    let t = md.mem_alloc(64).unwrap();
    let rk = rkey_of(&md, &t);
    let base = t.addr() as u64;
    t.write(0, &10u64.to_le_bytes()).unwrap();
    t.write(8, &0xf0u32.to_le_bytes()).unwrap();
    assert!(ep
        .atomic64_post(AtomicOp::Add, 5, base, &rk)
        .unwrap()
        .is_done());
    assert!(ep
        .atomic32_post(AtomicOp::Or, 0x0f, base + 8, &rk)
        .unwrap()
        .is_done());
    assert_eq!(
        ep.atomic64_fetch(AtomicOp::Xor, 1, base, &rk, 1).unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic32_fetch(AtomicOp::And, 0x3c, base + 8, &rk, 2)
            .unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic_cswap64(14, 99, base, &rk, 3).unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic_cswap32(7, 1, base + 8, &rk, 4).unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic32_fetch(AtomicOp::Swap, 5, base + 8, &rk, 5)
            .unwrap(),
        Outcome::InProgress
    );
    assert!(matches!(
        ep.atomic64_post(AtomicOp::Swap, 1, base, &rk),
        Err(Error::InvalidParam(_))
    ));
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comps.len() == 5
    });
    assert_eq!(sa.comp(1), Some(&Ok(15)));
    assert_eq!(sa.comp(2), Some(&Ok(0xff)));
    assert_eq!(sa.comp(3), Some(&Ok(14)));
    assert_eq!(sa.comp(4), Some(&Ok(0x3c)));
    assert_eq!(sa.comp(5), Some(&Ok(0x3c)));
    let mut v = [0u8; 8];
    t.read(0, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 99);
    t.read(8, &mut v[..4]).unwrap();
    assert_eq!(u32::from_le_bytes(v[..4].try_into().unwrap()), 5);
}

#[test]
fn forged_stale_and_out_of_range_rkeys_are_refused() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let md = TcpMd::new();
    let t = md.mem_alloc(4096).unwrap();
    t.write(0, &[7u8; 4096]).unwrap();
    let rk = rkey_of(&md, &t);
    let base = t.addr() as u64;
    let key = reg_key(&t).unwrap();
    // Out of range: refused locally.
    assert!(matches!(
        ep.put_short(b"x", base + 4096, &rk),
        Err(Error::RemoteAccess(_))
    ));
    // Forged key with a plausible range: refused by the target.
    let forged = RemoteKey::unmapped(base, 4096, key ^ (1 << 45));
    let src = md.mem_alloc(64).unwrap();
    assert_eq!(
        ep.put_zcopy(&[Iov::whole(&src)], base, &forged, 1).unwrap(),
        Outcome::InProgress
    );
    let dst = md.mem_alloc(64).unwrap();
    assert_eq!(
        ep.get_zcopy(&[Iov::whole(&dst)], base, &forged, 2).unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic64_fetch(AtomicOp::Add, 1, base, &forged, 3)
            .unwrap(),
        Outcome::InProgress
    );
    // A forged range under a real key (the packed base/len lie about the region).
    let lying = RemoteKey::unmapped(base, 1 << 20, key);
    assert_eq!(
        ep.get_zcopy(&[Iov::whole(&dst)], base + 8192, &lying, 4)
            .unwrap(),
        Outcome::InProgress
    );
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comps.len() == 4
    });
    for c in 1..=4 {
        assert!(
            matches!(sa.comp(c), Some(Err(Error::RemoteAccess(_)))),
            "{c}: {:?}",
            sa.comp(c)
        );
    }
    // put_short with a forged key: reported at the next flush.
    assert!(ep.put_short(b"zz", base, &forged).unwrap().is_done());
    assert_eq!(ep.flush(5).unwrap(), Outcome::InProgress);
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(5).is_some()
    });
    assert!(matches!(sa.comp(5), Some(Err(Error::RemoteAccess(_)))));
    // Nothing was written anywhere near the target.
    let mut back = vec![0u8; 4096];
    t.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 7));
    // Stale: deregistered memory.
    drop(t);
    assert_eq!(
        ep.get_zcopy(&[Iov::whole(&dst)], base, &rk, 6).unwrap(),
        Outcome::InProgress
    );
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(6).is_some()
    });
    assert!(matches!(sa.comp(6), Some(Err(Error::RemoteAccess(_)))));
    // The endpoint still works after refusals.
    assert!(ep.am_short(0, 1, b"ok").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    assert!(sa.errors.is_empty());
}

#[test]
fn connect_to_ep_simultaneous_gives_one_connection() {
    let mut a = open_lo();
    let mut b = open_lo();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let mut ea = a.ep_create().unwrap();
    let mut eb = b.ep_create().unwrap();
    let (addr_a, addr_b) = (ea.ep_address().unwrap(), eb.ep_address().unwrap());
    assert!(matches!(
        ea.am_short(0, 0, b""),
        Err(Error::InvalidParam(_))
    ));
    // Both connect at the same time.
    ea.connect_to_ep(b.device_address(), &addr_b).unwrap();
    eb.connect_to_ep(a.device_address(), &addr_a).unwrap();
    assert!(ea.am_short(1, 1, b"from a").unwrap().is_done());
    assert!(eb.am_short(1, 2, b"from b").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        !sa.ams.is_empty() && !sb.ams.is_empty()
    });
    assert_eq!(&sb.ams[0].1[8..], b"from a");
    assert_eq!(&sa.ams[0].1[8..], b"from b");
    assert_eq!(a.connection_count(), 1);
    assert_eq!(b.connection_count(), 1);
    // Replies go over the same connection.
    for i in 0..10u64 {
        assert!(ea.am_short(2, i, b"").unwrap().is_done());
        assert!(eb.am_short(2, i, b"").unwrap().is_done());
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sa.ams.len() == 11 && sb.ams.len() == 11
    });
    assert_eq!(a.connection_count() + b.connection_count(), 2);
    // A connect-to-iface endpoint has no ep address.
    let e3 = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    assert!(matches!(e3.ep_address(), Err(Error::Unsupported(_))));
}

#[test]
fn peer_death_reports_error_and_fails_outstanding_ops() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let md = TcpMd::new();
    let dst = md.mem_alloc(64).unwrap();
    let rk = RemoteKey::unmapped(0x1000, 64, 1 << 32);
    // Wait until connected, then issue a get that the peer will never answer.
    assert!(ep.am_short(0, 0, b"up").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    assert_eq!(
        ep.get_zcopy(&[Iov::whole(&dst)], 0x1000, &rk, 7).unwrap(),
        Outcome::InProgress
    );
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(20);
    while sa.errors.is_empty() || sa.comp(7).is_none() {
        a.progress(&mut sa);
        assert!(Instant::now() < deadline, "watchdog: no endpoint error");
    }
    assert_eq!(sa.errors.len(), 1);
    assert_eq!(sa.errors[0].0, ep.id());
    assert!(matches!(sa.comp(7), Some(Err(_))));
    assert!(ep.am_short(0, 0, b"").is_err());
    assert!(ep.error().is_some());
}

#[test]
fn garbage_closes_only_that_connection() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let addr = b.listen_addr();
    let cases: Vec<Vec<u8>> = vec![
        // Random bytes.
        (0..200u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
        // A valid hello, then an oversized AM header.
        {
            let mut v = vec![0u8; 8 + wire::Hello::LEN];
            wire::FrameHeader::new(wire::Kind::Hello, 0, 0).encode(&mut v);
            wire::Hello {
                mode: wire::HelloMode::Iface,
                src_conn_id: 99,
                dst_conn_id: 0,
                src_ip: 0x7f00_0001,
                src_port: 1,
            }
            .encode(&mut v[8..]);
            let mut h = wire::FrameHeader::new(wire::Kind::Am, 1, 0).to_bytes();
            h[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
            v.extend_from_slice(&h);
            v
        },
        // A truncated header, then EOF.
        vec![2, 0, 0],
    ];
    for bytes in cases {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(&bytes).unwrap();
        if bytes.len() == 3 {
            s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        s.set_nonblocking(true).unwrap();
        // The interface closes the connection: we read EOF (or a reset).
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 64];
        let mut got = 0;
        loop {
            b.progress(&mut sb);
            match s.read(&mut buf) {
                Ok(0) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
                // At most the answer to a valid hello.
                Ok(n) => {
                    got += n;
                    assert!(
                        got <= 8 + wire::HelloAck::LEN,
                        "the interface sent data to a garbage peer"
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "watchdog: garbage connection not closed"
            );
        }
    }
    // The interface still serves its real peer.
    assert!(ep.am_short(9, 5, b"still here").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    assert_eq!(&sb.ams[0].1[8..], b"still here");
    assert!(sa.errors.is_empty() && sb.errors.is_empty());
}

#[test]
fn event_fd_wakes_on_message() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    assert!(b.attr().event_flags.contains(EventFlags::FD));
    let fd = b.event_fd().unwrap();
    // Get the connection accepted and idle.
    assert!(ep.am_short(0, 0, b"first").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while b.event_arm(EventFlags::RECV).is_err() {
        b.progress(&mut sb);
        assert!(Instant::now() < deadline);
    }
    assert!(ep.am_short(0, 0, b"wake").unwrap().is_done());
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; bounded wait (watchdog).
    let n = unsafe { libc::poll(&mut pfd, 1, 20_000) };
    assert_eq!(n, 1, "the event fd did not become readable");
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 2);
    assert_eq!(&sb.ams[1].1[8..], b"wake");
}

#[test]
fn iface_flush_and_many_to_one() {
    let mut server = open_lo();
    let mut ss = Sink::default();
    let md = TcpMd::new();
    let t = md.mem_alloc(8 * 8).unwrap();
    let rk = rkey_of(&md, &t);
    let mut clients: Vec<(TcpIface, TcpEp, Sink)> = (0..8)
        .map(|_| {
            let mut c = open_lo();
            let ep = c
                .ep_create_connected(server.device_address(), server.iface_address())
                .unwrap();
            (c, ep, Sink::default())
        })
        .collect();
    for (i, (_, ep, _)) in clients.iter_mut().enumerate() {
        for j in 0..50u64 {
            assert!(ep.am_short(1, (i as u64) << 32 | j, b"").unwrap().is_done());
        }
        assert!(ep
            .put_short(
                &(i as u64 + 1).to_le_bytes(),
                t.addr() as u64 + 8 * i as u64,
                &rk
            )
            .unwrap()
            .is_done());
    }
    for (c, _, s) in clients.iter_mut() {
        assert_eq!(c.flush(1000).unwrap(), Outcome::InProgress);
        let _ = s;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        server.progress(&mut ss);
        for (c, _, s) in clients.iter_mut() {
            c.progress(s);
        }
        if clients.iter().all(|(_, _, s)| s.comp(1000).is_some()) && ss.ams.len() == 400 {
            break;
        }
        assert!(Instant::now() < deadline, "watchdog");
    }
    // Per sender, messages arrive in order.
    for i in 0..8u64 {
        let seq: Vec<u64> = ss
            .ams
            .iter()
            .map(|(_, d)| u64::from_le_bytes(d[..8].try_into().unwrap()))
            .filter(|h| h >> 32 == i)
            .map(|h| h & 0xffff_ffff)
            .collect();
        assert_eq!(seq, (0..50).collect::<Vec<_>>());
    }
    // The flush completed after the puts landed.
    for i in 0..8 {
        let mut v = [0u8; 8];
        t.read(8 * i, &mut v).unwrap();
        assert_eq!(u64::from_le_bytes(v), i as u64 + 1);
    }
    for (c, _, _) in clients.iter_mut() {
        assert_eq!(c.flush(1001).unwrap(), Outcome::DONE);
    }
}

#[test]
fn reachability_rules() {
    let a = open_lo();
    let b = open_lo();
    assert_eq!(
        a.is_reachable(b.device_address(), Some(b.iface_address())),
        Ok(())
    );
    // The same loopback address in another network namespace is not reachable.
    let mut other = DevAddr::decode(b.device_address()).unwrap();
    other.netns ^= 1;
    let why = a.is_reachable(&other.encode(), None).unwrap_err();
    assert!(why.contains("namespace"), "{why}");
    // A remote network address is not reachable through lo.
    let remote = DevAddr {
        ip: "10.231.0.2".parse().unwrap(),
        prefix: 24,
        loopback: false,
        netns: 5,
    };
    assert!(a.is_reachable(&remote.encode(), None).is_err());
    // A non-loopback device on another subnet without a route through it.
    let eth = NetIf {
        name: "test0".into(),
        ip: "10.231.0.1".parse().unwrap(),
        prefix: 24,
        loopback: false,
    };
    let same_subnet = DevAddr {
        ip: "10.231.0.77".parse().unwrap(),
        ..remote
    };
    assert_eq!(iface::reachable(&eth, 5, &same_subnet), Ok(()));
    let far = DevAddr {
        ip: "10.232.9.9".parse().unwrap(),
        ..remote
    };
    let why = iface::reachable(&eth, 5, &far).unwrap_err();
    assert!(why.contains("no route from test0"), "{why}");
    assert!(iface::reachable(&eth, 5, &DevAddr::decode(b.device_address()).unwrap()).is_err());
    // Garbage addresses.
    assert!(a.is_reachable(&[1, 2, 3], None).is_err());
    assert!(a.is_reachable(b.device_address(), Some(&[9; 8])).is_err());
}

#[test]
fn net_devices_selection() {
    let ifs = vec![
        NetIf {
            name: "lo".into(),
            ip: "127.0.0.1".parse().unwrap(),
            prefix: 8,
            loopback: true,
        },
        NetIf {
            name: "eth0".into(),
            ip: "10.0.0.1".parse().unwrap(),
            prefix: 24,
            loopback: false,
        },
    ];
    assert_eq!(select_devices(ifs.clone(), &[]).unwrap().len(), 2);
    let only = select_devices(ifs.clone(), &["eth0".into(), "mlx5_0:1".into()]).unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].name, "eth0");
    let err = select_devices(ifs, &["eth7".into()]).unwrap_err();
    assert!(matches!(err, Error::NoDevice(_)));
    let text = err.to_string();
    assert!(text.contains("eth7") && text.contains("lo, eth0"), "{text}");
    // The host has a loopback device and it is listed.
    assert!(TcpTransport::devices()
        .unwrap()
        .iter()
        .any(|d| d.name == "lo"));
}

#[test]
fn socket_buffer_variables() {
    static V: ucs::config::ConfigVar = ucs::config::ConfigVar {
        name: "TEST_TCP_BUFSZ",
        default: "auto",
        doc: "test",
    };
    assert_eq!(sock_buf_size(&V).unwrap(), None);
    std::env::set_var("RUCX_TEST_TCP_BUFSZ", "256k");
    assert_eq!(sock_buf_size(&V).unwrap(), Some(256 * 1024));
    std::env::set_var("RUCX_TEST_TCP_BUFSZ", "lots");
    let e = sock_buf_size(&V).unwrap_err().to_string();
    assert!(e.contains("RUCX_TEST_TCP_BUFSZ"), "{e}");
    std::env::set_var("RUCX_TEST_TCP_BUFSZ", "0");
    assert!(sock_buf_size(&V).is_err());
    std::env::remove_var("RUCX_TEST_TCP_BUFSZ");
    assert_eq!(TCP_SNDBUF.env_name(), "RUCX_TCP_SNDBUF");
    assert_eq!(TCP_RCVBUF.env_name(), "RUCX_TCP_RCVBUF");
    // Known to the configuration registry once the transport was queried.
    let _ = TcpTransport::devices();
    for name in ["RUCX_TCP_SNDBUF", "RUCX_TCP_RCVBUF", "RUCX_NET_DEVICES"] {
        assert!(
            ucs::config::find(name).is_some(),
            "{name} is not registered"
        );
    }
}

#[test]
fn addresses_round_trip_and_reject_garbage() {
    let d = DevAddr {
        ip: "1.2.3.4".parse().unwrap(),
        prefix: 16,
        loopback: false,
        netns: 99,
    };
    assert_eq!(DevAddr::decode(&d.encode()).unwrap(), d);
    assert!(DevAddr::decode(&d.encode()[..15]).is_err());
    let i = IfaceAddr {
        ip: "1.2.3.4".parse().unwrap(),
        port: 4242,
    };
    assert_eq!(IfaceAddr::decode(&i.encode()).unwrap(), i);
    assert!(IfaceAddr::decode(&i.encode()[..7]).is_err());
    let e = EpAddr {
        iface: i,
        conn_id: 77,
    };
    assert_eq!(EpAddr::decode(&e.encode()).unwrap(), e);
    assert!(EpAddr::decode(&e.encode()[..15]).is_err());
    let mut a = open_lo();
    assert!(matches!(
        a.ep_create_connected(&[0; 3], &i.encode()),
        Err(Error::Wire(_))
    ));
}

#[test]
fn registry_opens_tcp_on_lo() {
    let (_md, iface) = crate::open("tcp", "lo").unwrap();
    assert_eq!(iface.tl_name(), "tcp");
    let err = crate::open("tcp", "no-such-dev0")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("no-such-dev0"), "{err}");
}

#[test]
fn reply_endpoint_reuses_the_incoming_connection() {
    let (mut a, mut b, mut ab) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    assert!(ab.am_short(0, 1, b"a->b").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 1);
    // b answers through an endpoint to a's interface: it rides the connection a opened.
    let mut ba = b
        .ep_create_connected(a.device_address(), a.iface_address())
        .unwrap();
    assert!(ba.am_short(0, 2, b"b->a").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| sa.ams.len() == 1);
    assert_eq!(&sa.ams[0].1[8..], b"b->a");
    assert_eq!(a.connection_count(), 1);
    assert_eq!(b.connection_count(), 1);
    // Requests work in both directions over the shared connection.
    let md = TcpMd::new();
    let ta = md.mem_alloc(16).unwrap();
    ta.write(0, b"AAAAAAAAAAAAAAAA").unwrap();
    let rka = rkey_of(&md, &ta);
    let dst = md.mem_alloc(16).unwrap();
    assert_eq!(
        ba.get_zcopy(&[Iov::whole(&dst)], ta.addr() as u64, &rka, 5)
            .unwrap(),
        Outcome::InProgress
    );
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| {
        sb.comp(5).is_some()
    });
    let mut v = [0u8; 16];
    dst.read(0, &mut v).unwrap();
    assert_eq!(&v, b"AAAAAAAAAAAAAAAA");
    // Destroying a's endpoint does not break b's.
    drop(ab);
    for i in 0..5 {
        assert!(ba.am_short(0, 10 + i, b"").unwrap().is_done());
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| sa.ams.len() == 6);
    assert!(sa.errors.is_empty() && sb.errors.is_empty());
    // A new endpoint from a to b reuses the connection again.
    let mut ab2 = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    assert!(ab2.am_short(0, 3, b"again").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 2);
    assert_eq!(a.connection_count(), 1);
    assert_eq!(b.connection_count(), 1);
}

/// Two interfaces ordered by address: the first one's dials win simultaneous connects.
fn ordered_pair() -> (TcpIface, TcpIface) {
    let a = open_lo();
    let b = open_lo();
    let key = |i: &TcpIface| (u32::from(*i.listen_addr().ip()), i.listen_addr().port());
    if key(&a) < key(&b) {
        (a, b)
    } else {
        (b, a)
    }
}

/// Connections that lost a simultaneous connect and wait for the peer to close them.
fn rejected_count(i: &TcpIface) -> usize {
    let g = i.inner.borrow();
    g.conns
        .iter()
        .filter(|(_, c)| c.rejected && c.sock.is_some())
        .count()
}

/// The sequence numbers (low 32 bits of the AM header) of the messages from endpoint `ep`
/// (high 32 bits), in arrival order.
fn seqs_from(s: &Sink, ep: u64) -> Vec<u64> {
    s.ams
        .iter()
        .map(|(_, d)| u64::from_le_bytes(d[..8].try_into().unwrap()))
        .filter(|h| h >> 32 == ep)
        .map(|h| h & 0xffff_ffff)
        .collect()
}

#[test]
fn simultaneous_connect_to_iface_gives_one_connection_in_order() {
    // Both creation orders, and both sides being the smaller address.
    for flip in [false, true] {
        let (x, y) = ordered_pair();
        let (mut a, mut b) = if flip { (y, x) } else { (x, y) };
        let (mut sa, mut sb) = (Sink::default(), Sink::default());
        let mut ab = a
            .ep_create_connected(b.device_address(), b.iface_address())
            .unwrap();
        let mut ba = b
            .ep_create_connected(a.device_address(), a.iface_address())
            .unwrap();
        // Before the race: both endpoints queue messages while their dials are in flight.
        const N: u64 = 300;
        let (mut na, mut nb) = (0u64, 0u64);
        for _ in 0..20 {
            assert!(ab.am_short(1, na, b"before").unwrap().is_done());
            assert!(ba.am_short(1, nb, b"before").unwrap().is_done());
            na += 1;
            nb += 1;
        }
        // During the race: progress one side at a time, sending from both in between.
        let deadline = Instant::now() + Duration::from_secs(20);
        while na < N || nb < N {
            a.progress(&mut sa);
            if na < N && ab.am_short(1, na, b"during").unwrap().is_done() {
                na += 1;
            }
            b.progress(&mut sb);
            if nb < N && ba.am_short(1, nb, b"during").unwrap().is_done() {
                nb += 1;
            }
            assert!(Instant::now() < deadline, "watchdog: sends never accepted");
        }
        run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
            sa.ams.len() as u64 == N && sb.ams.len() as u64 == N
        });
        // Everything exactly once and in order, in both directions.
        let want: Vec<u64> = (0..N).collect();
        assert_eq!(seqs_from(&sb, 0), want);
        assert_eq!(seqs_from(&sa, 0), want);
        assert!(sa.errors.is_empty() && sb.errors.is_empty());
        // The losing connection closes: one connection on each side.
        let deadline = Instant::now() + Duration::from_secs(20);
        while a.connection_count() + b.connection_count() != 2 {
            a.progress(&mut sa);
            b.progress(&mut sb);
            assert!(
                Instant::now() < deadline,
                "watchdog: losing connection stays open"
            );
        }
        assert_eq!(a.connection_count(), 1);
        assert_eq!(b.connection_count(), 1);
        assert_eq!(rejected_count(&a) + rejected_count(&b), 0);
        // Requests and their responses use that connection in both directions.
        let md = TcpMd::new();
        let (ta, tb) = (md.mem_alloc(16).unwrap(), md.mem_alloc(16).unwrap());
        ta.write(0, b"AAAAAAAAAAAAAAAA").unwrap();
        tb.write(0, b"BBBBBBBBBBBBBBBB").unwrap();
        let (rka, rkb) = (rkey_of(&md, &ta), rkey_of(&md, &tb));
        let (da, db) = (md.mem_alloc(16).unwrap(), md.mem_alloc(16).unwrap());
        let r = ab.get_zcopy(&[Iov::whole(&da)], tb.addr() as u64, &rkb, 1);
        assert_eq!(r.unwrap(), Outcome::InProgress);
        let r = ba.get_zcopy(&[Iov::whole(&db)], ta.addr() as u64, &rka, 2);
        assert_eq!(r.unwrap(), Outcome::InProgress);
        run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
            sa.comp(1).is_some() && sb.comp(2).is_some()
        });
        let mut v = [0u8; 16];
        da.read(0, &mut v).unwrap();
        assert_eq!(&v, b"BBBBBBBBBBBBBBBB");
        db.read(0, &mut v).unwrap();
        assert_eq!(&v, b"AAAAAAAAAAAAAAAA");
        assert_eq!(a.connection_count() + b.connection_count(), 2);
    }
}

#[test]
fn many_simultaneous_endpoints_race_without_loss_or_reordering() {
    const EPS: usize = 4;
    const N: u64 = 400;
    let mut a = open_lo();
    let mut b = open_lo();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let md = TcpMd::new();
    let (ta, tb) = (md.mem_alloc(64).unwrap(), md.mem_alloc(64).unwrap());
    ta.write(0, &[0xaa; 64]).unwrap();
    tb.write(0, &[0xbb; 64]).unwrap();
    let (rka, rkb) = (rkey_of(&md, &ta), rkey_of(&md, &tb));
    let dst: Vec<MemHandle> = (0..2 * EPS).map(|_| md.mem_alloc(64).unwrap()).collect();
    let zsrc = md.mem_alloc(256).unwrap();
    zsrc.write(0, &[0x5a; 256]).unwrap();
    // Endpoints created interleaved, some right away (simultaneous dials), some after a
    // little progress (the peer's connection may have arrived already, or be half-way).
    let mut eas = Vec::new();
    let mut ebs = Vec::new();
    for i in 0..EPS {
        eas.push(
            a.ep_create_connected(b.device_address(), b.iface_address())
                .unwrap(),
        );
        for _ in 0..i * 3 {
            a.progress(&mut sa);
            b.progress(&mut sb);
        }
        ebs.push(
            b.ep_create_connected(a.device_address(), a.iface_address())
                .unwrap(),
        );
        // A request issued before the connection is decided: its response must come back.
        let r = eas[i].get_zcopy(
            &[Iov::whole(&dst[i])],
            tb.addr() as u64,
            &rkb,
            100 + i as u64,
        );
        assert_eq!(r.unwrap(), Outcome::InProgress);
        let r = ebs[i].get_zcopy(
            &[Iov::whole(&dst[EPS + i])],
            ta.addr() as u64,
            &rka,
            200 + i as u64,
        );
        assert_eq!(r.unwrap(), Outcome::InProgress);
    }
    // Every endpoint sends N messages (short, bcopy and zcopy mixed), one side progressing
    // at a time; back-pressure just means "try again later".
    let mut next = [[0u64; EPS]; 2];
    let mut zc = 1000u64;
    let send = |ep: &mut TcpEp, tag: u64, seq: u64, zc: &mut u64| -> bool {
        let hdr = tag << 32 | seq;
        match seq % 3 {
            0 => ep.am_short(2, hdr, &[seq as u8; 5]).unwrap().is_done(),
            1 => ep
                .am_bcopy(2, |buf| {
                    buf[..8].copy_from_slice(&hdr.to_le_bytes());
                    buf[8..40].fill(seq as u8);
                    40
                })
                .unwrap()
                .is_done(),
            _ => {
                *zc += 1;
                !ep.am_zcopy(
                    2,
                    &hdr.to_le_bytes(),
                    &[Iov::new(&zsrc, 0, 100).unwrap()],
                    *zc,
                )
                .unwrap()
                .is_no_resource()
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while next.iter().flatten().any(|&n| n < N) {
        a.progress(&mut sa);
        for (i, ep) in eas.iter_mut().enumerate() {
            for _ in 0..3 {
                if next[0][i] < N && send(ep, i as u64, next[0][i], &mut zc) {
                    next[0][i] += 1;
                }
            }
        }
        b.progress(&mut sb);
        for (i, ep) in ebs.iter_mut().enumerate() {
            for _ in 0..3 {
                if next[1][i] < N && send(ep, i as u64, next[1][i], &mut zc) {
                    next[1][i] += 1;
                }
            }
        }
        assert!(Instant::now() < deadline, "watchdog: sends never accepted");
    }
    // Flush every endpoint.
    let mut flushing = Vec::new();
    for (i, ep) in eas.iter_mut().chain(ebs.iter_mut()).enumerate() {
        let id = 300 + i as u64;
        let mut r = ep.flush(id).unwrap();
        while r.is_no_resource() {
            a.progress(&mut sa);
            b.progress(&mut sb);
            r = ep.flush(id).unwrap();
        }
        if !r.is_done() {
            flushing.push(id);
        }
    }
    let total = EPS as u64 * N;
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sa.ams.len() as u64 == total
            && sb.ams.len() as u64 == total
            && flushing
                .iter()
                .all(|&id| sa.comp(id).is_some() || sb.comp(id).is_some())
    });
    let want: Vec<u64> = (0..N).collect();
    for i in 0..EPS as u64 {
        assert_eq!(seqs_from(&sb, i), want, "a's endpoint {i}");
        assert_eq!(seqs_from(&sa, i), want, "b's endpoint {i}");
    }
    // Payloads intact.
    for (_, d) in sa.ams.iter().chain(&sb.ams) {
        let seq = u64::from_le_bytes(d[..8].try_into().unwrap()) & 0xffff_ffff;
        match seq % 3 {
            0 => assert_eq!(&d[8..], &[seq as u8; 5]),
            1 => assert!(d.len() == 40 && d[8..].iter().all(|&x| x == seq as u8)),
            _ => assert!(d.len() == 108 && d[8..].iter().all(|&x| x == 0x5a)),
        }
    }
    for i in 0..EPS {
        let mut v = [0u8; 64];
        assert!(matches!(sa.comp(100 + i as u64), Some(Ok(_))));
        dst[i].read(0, &mut v).unwrap();
        assert_eq!(v, [0xbb; 64]);
        assert!(matches!(sb.comp(200 + i as u64), Some(Ok(_))));
        dst[EPS + i].read(0, &mut v).unwrap();
        assert_eq!(v, [0xaa; 64]);
    }
    assert!(sa.comps.iter().chain(&sb.comps).all(|c| c.1.is_ok()));
    assert!(sa.errors.is_empty() && sb.errors.is_empty());
    // One connection per endpoint pair on each side once the losers closed.
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.connection_count() + b.connection_count() != 2 * EPS {
        a.progress(&mut sa);
        b.progress(&mut sb);
        assert!(
            Instant::now() < deadline,
            "watchdog: losing connections stay open"
        );
    }
    assert_eq!(a.connection_count(), EPS);
    assert_eq!(b.connection_count(), EPS);
}

#[test]
fn peer_death_during_simultaneous_connect_is_an_endpoint_error() {
    // `small`'s dial wins; `big` waits on its own dial, which `small` leaves unanswered.
    let (mut small, mut big) = ordered_pair();
    let (mut ss, mut sb) = (Sink::default(), Sink::default());
    let mut e_big = big
        .ep_create_connected(small.device_address(), small.iface_address())
        .unwrap();
    // big's hello leaves (progress sends it once the connect completed) before small dials.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !big
        .inner
        .borrow()
        .conns
        .iter()
        .any(|(_, c)| c.dialed && c.ctl_len > 0 && c.ctl_sent == c.ctl_len)
    {
        big.progress(&mut sb);
        assert!(Instant::now() < deadline, "watchdog: hello not sent");
    }
    let mut e_small = small
        .ep_create_connected(big.device_address(), big.iface_address())
        .unwrap();
    assert!(e_small.am_short(0, 1, b"held").unwrap().is_done());
    assert!(e_big.am_short(0, 2, b"held").unwrap().is_done());
    let md = TcpMd::new();
    let src = md.mem_alloc(64).unwrap();
    let r = e_big.am_zcopy(0, b"", &[Iov::whole(&src)], 9).unwrap();
    assert_eq!(r, Outcome::InProgress);
    // Only `small` runs: it sees big's hello while its own dial waits, and rejects it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while rejected_count(&small) == 0 {
        small.progress(&mut ss);
        assert!(Instant::now() < deadline, "watchdog: hello never seen");
    }
    assert!(
        ss.ams.is_empty(),
        "nothing is delivered from a rejected connection"
    );
    drop(e_small);
    drop(small);
    let deadline = Instant::now() + Duration::from_secs(20);
    while sb.errors.is_empty() || sb.comp(9).is_none() {
        big.progress(&mut sb);
        assert!(Instant::now() < deadline, "watchdog: no endpoint error");
    }
    assert_eq!(sb.errors.len(), 1);
    assert_eq!(sb.errors[0].0, e_big.id());
    assert!(
        matches!(sb.errors[0].1, Error::ConnectionReset(_)),
        "{}",
        sb.errors[0].1
    );
    assert!(matches!(sb.comp(9), Some(Err(_))));
    assert!(e_big.am_short(0, 3, b"").is_err());
}

// The transport conformance suite, over loopback (TlPair picks `lo` for network transports).
crate::uct_conformance_tests!(conformance, crate::testing::TlPair<TcpTransport>);

#[test]
fn sockets_have_nodelay_and_configured_buffers() {
    let mut a = open_lo();
    let mut b = open_lo();
    // What RUCX_TCP_SNDBUF=192k / RUCX_TCP_RCVBUF=160k give (set here without touching the
    // environment other tests read).
    for i in [&a, &b] {
        let mut g = i.inner.borrow_mut();
        g.sock_cfg.sndbuf = Some(192 * 1024);
        g.sock_cfg.rcvbuf = Some(160 * 1024);
    }
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    assert!(ep.am_short(0, 0, b"x").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    for i in [&a, &b] {
        let g = i.inner.borrow();
        let socks: Vec<_> = g
            .conns
            .iter()
            .filter_map(|(_, c)| c.sock.as_ref())
            .collect();
        assert_eq!(socks.len(), 1);
        for s in socks {
            assert!(s.nodelay().unwrap(), "TCP_NODELAY is off");
            // The kernel doubles the value it was given.
            assert!(s.send_buffer_size().unwrap() >= 192 * 1024);
            assert!(s.recv_buffer_size().unwrap() >= 160 * 1024);
            assert!(s.keepalive().unwrap());
        }
    }
}

#[test]
fn eof_mid_frame_and_reset_become_endpoint_errors() {
    for reset in [false, true] {
        let mut a = open_lo();
        let mut sa = Sink::default();
        // A fake peer interface: a plain listening socket.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let peer = IfaceAddr {
            ip: "127.0.0.1".parse().unwrap(),
            port,
        };
        let dev = a.device_address().to_vec();
        let mut ep = a.ep_create_connected(&dev, &peer.encode()).unwrap();
        let md = TcpMd::new();
        let dst = md.mem_alloc(64).unwrap();
        let rk = RemoteKey::unmapped(0x1000, 64, 1 << 32);
        assert_eq!(
            ep.get_zcopy(&[Iov::whole(&dst)], 0x1000, &rk, 1).unwrap(),
            Outcome::InProgress
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut s = loop {
            a.progress(&mut sa);
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            assert!(Instant::now() < deadline, "watchdog: no connection");
        };
        if reset {
            socket2::SockRef::from(&s)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
        } else {
            // Read the hello, acknowledge it (the endpoint holds the get until then), and read
            // the get request (closing with unread bytes would send a reset instead of a FIN).
            s.set_nonblocking(true).unwrap();
            let want = 8 + wire::Hello::LEN + 8 + wire::GetReq::LEN;
            let mut got = 0;
            let mut acked = false;
            let mut buf = [0u8; 256];
            while got < want {
                if !acked && got >= 8 + wire::Hello::LEN {
                    let mut ack = [0u8; 8 + wire::HelloAck::LEN];
                    wire::FrameHeader::new(wire::Kind::HelloAck, 0, 0).encode(&mut ack);
                    wire::HelloAck { seq: 0 }.encode(&mut ack[8..]);
                    s.write_all(&ack).unwrap();
                    acked = true;
                }
                a.progress(&mut sa);
                match s.read(&mut buf) {
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
                assert!(Instant::now() < deadline, "watchdog: request not received");
            }
            // A get response header announcing 40 body bytes, then only 2 of them.
            let mut f = wire::FrameHeader::new(wire::Kind::GetResp, 0, 24)
                .to_bytes()
                .to_vec();
            f.extend_from_slice(&[1, 0]);
            s.write_all(&f).unwrap();
        }
        drop(s);
        let deadline = Instant::now() + Duration::from_secs(20);
        while sa.errors.is_empty() || sa.comp(1).is_none() {
            a.progress(&mut sa);
            assert!(Instant::now() < deadline, "watchdog: no endpoint error");
        }
        assert_eq!(sa.errors.len(), 1);
        let err = &sa.errors[0].1;
        assert!(matches!(err, Error::ConnectionReset(_)), "{err}");
        if !reset {
            assert!(err.to_string().contains("middle of a frame"), "{err}");
        }
        assert!(matches!(sa.comp(1), Some(Err(Error::ConnectionReset(_)))));
        assert!(ep.flush(2).is_err());
    }
}

#[test]
fn both_sides_flooding_requests_do_not_deadlock() {
    let mut a = open_lo();
    let mut b = open_lo();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let mut ea = a.ep_create().unwrap();
    let mut eb = b.ep_create().unwrap();
    let (addr_a, addr_b) = (ea.ep_address().unwrap(), eb.ep_address().unwrap());
    ea.connect_to_ep(b.device_address(), &addr_b).unwrap();
    eb.connect_to_ep(a.device_address(), &addr_a).unwrap();
    let md = TcpMd::new();
    let (ta, tb) = (
        md.mem_alloc(1 << 20).unwrap(),
        md.mem_alloc(1 << 20).unwrap(),
    );
    let (rka, rkb) = (rkey_of(&md, &ta), rkey_of(&md, &tb));
    // 1 MiB each: far more than the kernel's socket buffers hold, so both send queues fill.
    let src = md.mem_alloc(1 << 20).unwrap();
    assert!(ea.am_short(0, 0, b"").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    // Both sides fill their send queues with puts (requests the other side must answer)
    // before anyone progresses.
    let (mut na, mut nb) = (0u64, 0u64);
    loop {
        let ra = ea
            .put_zcopy(&[Iov::whole(&src)], tb.addr() as u64, &rkb, 1000 + na)
            .unwrap();
        let rb = eb
            .put_zcopy(&[Iov::whole(&src)], ta.addr() as u64, &rka, 5000 + nb)
            .unwrap();
        na += u64::from(!ra.is_no_resource());
        nb += u64::from(!rb.is_no_resource());
        if ra.is_no_resource() && rb.is_no_resource() {
            break;
        }
        assert!(na < 4000 && nb < 4000, "never saw back-pressure");
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sa.comps.len() as u64 == na && sb.comps.len() as u64 == nb
    });
    assert!(sa.comps.iter().chain(&sb.comps).all(|c| c.1.is_ok()));
}

#[test]
fn refused_connect_becomes_unreachable_endpoint_error() {
    let mut a = open_lo();
    let mut sa = Sink::default();
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead = IfaceAddr {
        ip: "127.0.0.1".parse().unwrap(),
        port,
    };
    let dev = a.device_address().to_vec();
    let mut ep = a.ep_create_connected(&dev, &dead.encode()).unwrap();
    // Sends before the connect finished are queued, then fail with the endpoint.
    assert!(ep.am_short(0, 0, b"queued").unwrap().is_done());
    let deadline = Instant::now() + Duration::from_secs(20);
    while sa.errors.is_empty() {
        a.progress(&mut sa);
        assert!(Instant::now() < deadline, "watchdog: no endpoint error");
    }
    assert!(
        matches!(sa.errors[0].1, Error::Unreachable(_)),
        "{}",
        sa.errors[0].1
    );
    assert!(matches!(ep.am_short(0, 0, b""), Err(Error::Unreachable(_))));
}

/// `sendv`'s windows over an iov list cover every byte once, in order, each at most `max`
/// bytes, whatever the piece sizes and the window size.
#[test]
fn iov_windows_cover_the_list_in_order() {
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    for cuts in [
        vec![10_000],
        vec![1, 9_999],
        vec![3_000, 0, 2_000, 5_000],
        vec![4_096, 4_096, 1_808],
        vec![100; 100],
    ] {
        let mut iov = Vec::new();
        let mut at = 0;
        for c in &cuts {
            iov.push(libc::iovec {
                iov_base: data[at..].as_ptr() as *mut libc::c_void,
                iov_len: *c,
            });
            at += c;
        }
        for max in [1, 7, 100, 4_096, 9_999, 10_000, 50_000] {
            let mut got = Vec::new();
            let mut out = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; 32];
            while got.len() < data.len() {
                let (cnt, n) = super::iov::iov_window(&iov, got.len(), max, &mut out);
                assert!(n > 0 && n <= max, "{cuts:?} max {max}: window of {n}");
                let sum: usize = out[..cnt].iter().map(|v| v.iov_len).sum();
                assert_eq!(sum, n);
                for v in &out[..cnt] {
                    // SAFETY: each window entry points into `data`.
                    got.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len)
                    });
                }
            }
            assert_eq!(got, data, "{cuts:?} max {max}");
        }
    }
}

/// The congestion control a socket uses (`TCP_CONGESTION`).
fn congestion_of(s: &socket2::Socket) -> String {
    use std::os::fd::AsRawFd;
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes and the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    assert_eq!(r, 0, "getsockopt: {}", std::io::Error::last_os_error());
    let end = buf[..len as usize]
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(len as usize);
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// `RUCX_TCP_CONGESTION=auto` (the default) gives loopback connections reno on both sides
/// (unless the kernel refuses it);
/// `system` (here: the configuration with no algorithm) keeps the kernel's default.
#[test]
fn loopback_connections_use_reno_and_system_keeps_the_default() {
    let system = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .unwrap()
        .trim()
        .to_string();
    for keep_system in [false, true] {
        let mut a = open_lo();
        let mut b = open_lo();
        if keep_system {
            for i in [&a, &b] {
                i.inner.borrow_mut().sock_cfg.congestion = None;
            }
        }
        let (mut sa, mut sb) = (Sink::default(), Sink::default());
        let mut ep = a
            .ep_create_connected(b.device_address(), b.iface_address())
            .unwrap();
        assert!(ep.am_short(0, 0, b"x").unwrap().is_done());
        run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
        // Auto falls back to the system's only where the kernel refuses reno (it does not here).
        let refused = a.inner.borrow().sock_cfg.congestion.is_none();
        let want = if keep_system || refused {
            system.as_str()
        } else {
            "reno"
        };
        for i in [&a, &b] {
            let g = i.inner.borrow();
            for (_, c) in g.conns.iter() {
                if let Some(s) = c.sock.as_ref() {
                    assert_eq!(congestion_of(s), want, "keep_system {keep_system}");
                }
            }
        }
    }
}

/// `RUCX_TCP_CONGESTION` values: auto depends on the device, system keeps the kernel's, a
/// name is taken as given, anything else is an error that names the variable.
#[test]
fn congestion_setting_parses() {
    use ucs::config::ConfigVar;
    let lo = NetIf {
        name: "lo".into(),
        ip: "127.0.0.1".parse().unwrap(),
        prefix: 8,
        loopback: true,
    };
    let eth = NetIf {
        name: "eth9".into(),
        ip: "10.0.0.1".parse().unwrap(),
        prefix: 24,
        loopback: false,
    };
    // Variables no one sets, given values through their defaults.
    let var = |v: &'static str| ConfigVar {
        name: "TCP_CONGESTION_TEST_UNSET",
        default: v,
        doc: "",
    };
    assert_eq!(
        congestion_for(&var("auto"), &lo).unwrap().as_deref(),
        Some("reno")
    );
    assert_eq!(congestion_for(&var("auto"), &eth).unwrap(), None);
    assert_eq!(congestion_for(&var("system"), &lo).unwrap(), None);
    assert_eq!(
        congestion_for(&var("cubic"), &eth).unwrap().as_deref(),
        Some("cubic")
    );
    for bad in ["", "re no", "bbr;rm", "averyveryverylongname"] {
        match congestion_for(&var(bad), &lo) {
            Err(Error::Config(m)) => assert!(m.contains("TCP_CONGESTION_TEST_UNSET"), "{m}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

/// Replies that name requests (get and atomic responses, put and flush acks) are looked up in
/// the requests of the connection they arrive on, by kind: a peer on another connection that
/// names request ids of the victim connection (1, 2, … are its first slots) reaches nothing.
/// Its connection is closed, no completion is reported, and the victim's get and atomic
/// finish later with the real peer's data.
#[test]
fn forged_replies_on_another_connection_reach_no_request() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let md = TcpMd::new();
    let target = md.mem_alloc(64 << 10).unwrap();
    let pattern: Vec<u8> = (0..32 << 10).map(|i| (i % 253) as u8).collect();
    target.write(0, &pattern).unwrap();
    target.write(32 << 10, &41u64.to_le_bytes()).unwrap();
    let rk = rkey_of(&md, &target);
    let base = target.addr() as u64;
    let dst = md.mem_alloc(32 << 10).unwrap();
    assert_eq!(
        ep.get_zcopy(&[Iov::whole(&dst)], base, &rk, 11).unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic64_fetch(AtomicOp::Add, 1, base + (32 << 10), &rk, 12)
            .unwrap(),
        Outcome::InProgress
    );
    for _ in 0..10 {
        a.progress(&mut sa);
    }
    let ack = |kind: wire::Kind, req_id: u64| {
        let mut v = vec![0u8; 8 + wire::Ack::LEN];
        wire::FrameHeader::new(kind, 0, wire::Ack::LEN).encode(&mut v);
        wire::Ack {
            req_id,
            status: wire::WireStatus::Ok,
        }
        .encode(&mut v[8..]);
        v
    };
    let mut forged = Vec::new();
    for req_id in 1..=3u64 {
        forged.push(ack(wire::Kind::GetResp, req_id));
        forged.push(ack(wire::Kind::PutAck, req_id));
        forged.push(ack(wire::Kind::FlushAck, req_id));
        let mut v = vec![0u8; 8 + wire::AtomicResp::LEN];
        wire::FrameHeader::new(wire::Kind::AtomicResp, 0, wire::AtomicResp::LEN).encode(&mut v);
        wire::AtomicResp {
            req_id,
            status: wire::WireStatus::Ok,
            value: 0xbad,
        }
        .encode(&mut v[8..]);
        forged.push(v);
    }
    let addr = a.listen_addr();
    for frame in forged {
        let mut v = vec![0u8; 8 + wire::Hello::LEN];
        wire::FrameHeader::new(wire::Kind::Hello, 0, wire::Hello::LEN).encode(&mut v);
        wire::Hello {
            mode: wire::HelloMode::Iface,
            src_conn_id: 77,
            dst_conn_id: 0,
            src_ip: 0x7f00_0001,
            src_port: 1,
        }
        .encode(&mut v[8..]);
        v.extend_from_slice(&frame);
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(&v).unwrap();
        s.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 64];
        loop {
            a.progress(&mut sa);
            match s.read(&mut buf) {
                Ok(0) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
                Ok(_) => {}
            }
            assert!(
                Instant::now() < deadline,
                "watchdog: forging connection not closed"
            );
        }
        assert!(
            sa.comps.is_empty(),
            "a forged reply completed {:?}",
            sa.comps
        );
        assert!(sa.errors.is_empty(), "the victim endpoint failed");
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(11).is_some() && sa.comp(12).is_some()
    });
    assert_eq!(sa.comp(11), Some(&Ok(0)));
    assert_eq!(sa.comp(12), Some(&Ok(41)));
    let mut back = vec![0u8; dst.len()];
    dst.read(0, &mut back).unwrap();
    assert!(back == pattern, "get data differ");
}
