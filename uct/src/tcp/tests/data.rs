//! Data operations: active messages, put/get, atomics, flush, back-pressure and zero-copy.

use super::*;

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
    let r = ep.am_zcopy(4, b"HDR", &iov, CompletionId(77)).unwrap();
    assert!(matches!(r, Outcome::Done(()) | Outcome::InProgress));
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sb.ams.len() == 4 && (r.is_done() || sa.comp(CompletionId(77)).is_some())
    });
    assert_eq!(sb.ams[0], (1, b"abcde".to_vec()));
    assert_eq!(sb.ams[1], (2, b"hello".to_vec()));
    assert_eq!(sb.ams[2].1, vec![0xab; a.attr().am.max_bcopy]);
    assert_eq!(&sb.ams[3].1[..3], b"HDR");
    assert_eq!(&sb.ams[3].1[3..], &pattern[..]);
    let too_big = md.mem_alloc(a.attr().am.max_zcopy + 1).unwrap();
    assert!(ep
        .am_zcopy(4, b"", &[Iov::whole(&too_big)], CompletionId(1))
        .is_err());
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
    ep.pending_add(PendingId(42)).unwrap();
    // While a request is pending, new operations queue behind it.
    assert_eq!(ep.am_short(5, 0, b"y").unwrap(), Outcome::NoResource);
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        !sa.pending.is_empty()
    });
    assert_eq!(sa.pending, vec![(ep.id(), PendingId(42))]);
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
    assert!(matches!(ep.pending_add(PendingId(43)), Err(Error::Busy(_))));
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
    while b.inner.borrow().idle_gated == 0 {
        b.progress(&mut sb);
        assert!(Instant::now() < deadline, "watchdog: never gated");
    }
    assert!(b
        .inner
        .borrow()
        .conns
        .iter()
        .any(|(_, c)| c.rx_gated && c.gate_idle));
    // A quiet connection is not one epoll waits for at every call (that is for payloads).
    assert_eq!(b.inner.borrow().gated, 0);
    // Messages still arrive, complete and in order, and the connection is polled again.
    for i in 1..=50u64 {
        assert!(ep.am_short(0, i, b"after").unwrap().is_done());
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 51);
    for (i, (_, d)) in sb.ams.iter().enumerate() {
        assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), i as u64);
    }
    assert_eq!(b.inner.borrow().gated, 0);
    assert_eq!(b.inner.borrow().idle_gated, 0);
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
    let r = ep.put_zcopy(
        &[Iov::whole(&src)],
        dst.addr() as u64,
        &rk,
        CompletionId(77),
    );
    assert!(!r.unwrap().is_no_resource());
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(CompletionId(77)).is_some()
    });
    assert!(matches!(sa.comp(CompletionId(77)), Some(Ok(_))));
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
            .am_zcopy(
                6,
                &(i as u32).to_le_bytes(),
                &[Iov::whole(m)],
                CompletionId(i as u64),
            )
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
        sb.ams.len() == posted && inflight.iter().all(|c| sa.comp(CompletionId(*c)).is_some())
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
        .put_zcopy(&[Iov::whole(&src)], base + 4096, &rk, CompletionId(1))
        .unwrap();
    assert_eq!(r, Outcome::InProgress);
    let f = ep.flush(CompletionId(2)).unwrap();
    assert_eq!(f, Outcome::InProgress);
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(CompletionId(1)).is_some() && sa.comp(CompletionId(2)).is_some()
    });
    assert!(sa.comp(CompletionId(1)).unwrap().is_ok() && sa.comp(CompletionId(2)).unwrap().is_ok());
    let mut got = vec![0u8; 5];
    target.read(0, &mut got).unwrap();
    assert_eq!(&got, b"short");
    target.read(100, &mut got).unwrap();
    assert_eq!(&got, b"bcopy");
    let mut big = vec![0u8; src.len()];
    target.read(4096, &mut big).unwrap();
    assert!(big == pattern, "put_zcopy data differ");
    // Everything acknowledged: flush is immediate.
    assert_eq!(ep.flush(CompletionId(3)).unwrap(), Outcome::DONE);

    // get_bcopy: data through the sink, then the completion.
    let r = ep
        .get_bcopy(5, base + 100, &rk, CompletionId(10), &mut |_| {
            panic!("not inline")
        })
        .unwrap();
    assert_eq!(r, Outcome::InProgress);
    // get_zcopy of 2 MiB (streamed in chunks) into two pieces.
    let dst = md.mem_alloc(src.len()).unwrap();
    let iov = [
        Iov::new(&dst, 0, 1000).unwrap(),
        Iov::new(&dst, 1000, dst.len() - 1000).unwrap(),
    ];
    assert_eq!(
        ep.get_zcopy(&iov, base + 4096, &rk, CompletionId(11))
            .unwrap(),
        Outcome::InProgress
    );
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(CompletionId(10)).is_some() && sa.comp(CompletionId(11)).is_some()
    });
    assert_eq!(sa.get_data, vec![(CompletionId(10), b"bcopy".to_vec())]);
    assert!(sa.comp(CompletionId(11)).unwrap().is_ok());
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
        ep.atomic64_fetch(AtomicOp::Xor, 1, base, &rk, CompletionId(1))
            .unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic32_fetch(AtomicOp::And, 0x3c, base + 8, &rk, CompletionId(2))
            .unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic_cswap64(14, 99, base, &rk, CompletionId(3))
            .unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic_cswap32(7, 1, base + 8, &rk, CompletionId(4))
            .unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic32_fetch(AtomicOp::Swap, 5, base + 8, &rk, CompletionId(5))
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
    assert_eq!(sa.comp(CompletionId(1)), Some(&Ok(15)));
    assert_eq!(sa.comp(CompletionId(2)), Some(&Ok(0xff)));
    assert_eq!(sa.comp(CompletionId(3)), Some(&Ok(14)));
    assert_eq!(sa.comp(CompletionId(4)), Some(&Ok(0x3c)));
    assert_eq!(sa.comp(CompletionId(5)), Some(&Ok(0x3c)));
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
        ep.put_zcopy(&[Iov::whole(&src)], base, &forged, CompletionId(1))
            .unwrap(),
        Outcome::InProgress
    );
    let dst = md.mem_alloc(64).unwrap();
    assert_eq!(
        ep.get_zcopy(&[Iov::whole(&dst)], base, &forged, CompletionId(2))
            .unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic64_fetch(AtomicOp::Add, 1, base, &forged, CompletionId(3))
            .unwrap(),
        Outcome::InProgress
    );
    // A forged range under a real key (the packed base/len lie about the region).
    let lying = RemoteKey::unmapped(base, 1 << 20, key);
    assert_eq!(
        ep.get_zcopy(&[Iov::whole(&dst)], base + 8192, &lying, CompletionId(4))
            .unwrap(),
        Outcome::InProgress
    );
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comps.len() == 4
    });
    for c in 1..=4 {
        assert!(
            matches!(sa.comp(CompletionId(c)), Some(Err(Error::RemoteAccess(_)))),
            "{c}: {:?}",
            sa.comp(CompletionId(c))
        );
    }
    // put_short with a forged key: reported at the next flush.
    assert!(ep.put_short(b"zz", base, &forged).unwrap().is_done());
    assert_eq!(ep.flush(CompletionId(5)).unwrap(), Outcome::InProgress);
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(CompletionId(5)).is_some()
    });
    assert!(matches!(
        sa.comp(CompletionId(5)),
        Some(Err(Error::RemoteAccess(_)))
    ));
    // Nothing was written anywhere near the target.
    let mut back = vec![0u8; 4096];
    t.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 7));
    // Stale: deregistered memory.
    drop(t);
    assert_eq!(
        ep.get_zcopy(&[Iov::whole(&dst)], base, &rk, CompletionId(6))
            .unwrap(),
        Outcome::InProgress
    );
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(CompletionId(6)).is_some()
    });
    assert!(matches!(
        sa.comp(CompletionId(6)),
        Some(Err(Error::RemoteAccess(_)))
    ));
    // The endpoint still works after refusals.
    assert!(ep.am_short(0, 1, b"ok").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    assert!(sa.errors.is_empty());
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
        assert_eq!(c.flush(CompletionId(1000)).unwrap(), Outcome::InProgress);
        let _ = s;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        server.progress(&mut ss);
        for (c, _, s) in clients.iter_mut() {
            c.progress(s);
        }
        if clients
            .iter()
            .all(|(_, _, s)| s.comp(CompletionId(1000)).is_some())
            && ss.ams.len() == 400
        {
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
        assert_eq!(c.flush(CompletionId(1001)).unwrap(), Outcome::DONE);
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
            .put_zcopy(
                &[Iov::whole(&src)],
                tb.addr() as u64,
                &rkb,
                CompletionId(1000 + na),
            )
            .unwrap();
        let rb = eb
            .put_zcopy(
                &[Iov::whole(&src)],
                ta.addr() as u64,
                &rka,
                CompletionId(5000 + nb),
            )
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

/// A connection's buffers start small and grow with the messages: small active messages leave
/// both sides with a few KiB; a 60 KiB active message (it must fit in the receive buffer
/// whole) grows the receiver's buffer, and every message arrives intact, in order, across the
/// growth; a stream of small messages behind it still arrives. A connection with nothing
/// buffered holds no receive buffer, and one with nothing queued holds no send buffer, also
/// after bcopy messages (packed in the send queue) and a burst the socket could not take at once.
#[test]
fn connection_buffers_grow_on_demand() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    for i in 0..8u8 {
        run(&mut a, &mut sa, &mut b, &mut sb, |_, _| {
            ep.am_short(1, i as u64, &[i; 8]).unwrap().is_done()
        });
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 8);
    let small = 16 * 1024;
    assert!(
        a.connection_buffer_bytes() <= small && b.connection_buffer_bytes() <= small,
        "after small messages: {} and {} buffer bytes",
        a.connection_buffer_bytes(),
        b.connection_buffer_bytes()
    );
    let md = TcpMd::new();
    let m = md.mem_alloc(60 * 1024).unwrap();
    let pattern: Vec<u8> = (0..m.len()).map(|i| (i * 7 + i / 251) as u8).collect();
    m.write(0, &pattern).unwrap();
    let r = ep
        .am_zcopy(2, b"big", &[Iov::whole(&m)], CompletionId(5))
        .unwrap();
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sb.ams.len() == 9 && (r.is_done() || sa.comp(CompletionId(5)).is_some())
    });
    assert_eq!(&sb.ams[8].1[..3], b"big");
    assert_eq!(&sb.ams[8].1[3..], &pattern[..]);
    assert!(
        b.connection_buffer_bytes() >= 60 * 1024,
        "the receiver's buffer did not grow: {}",
        b.connection_buffer_bytes()
    );
    // Everything was consumed: the buffers went back to the interfaces' spares.
    assert_eq!(a.connections_holding_rx() + b.connections_holding_rx(), 0);
    let mut sent = 0u64;
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| {
        if sent < 2000 && ep.am_short(3, sent, b"tail").unwrap().is_done() {
            sent += 1;
        }
        sb.ams.len() == 9 + 2000
    });
    for (i, (id, data)) in sb.ams[9..].iter().enumerate() {
        assert_eq!(*id, 3);
        assert_eq!(&data[..8], &(i as u64).to_le_bytes());
        assert_eq!(&data[8..], b"tail");
    }
    for (i, (_, data)) in sb.ams[..8].iter().enumerate() {
        assert_eq!(&data[8..], &[i as u8; 8]);
    }
    // bcopy packs into the send queue; a burst of them fills the socket so some wait in it.
    let mut packed = 0u64;
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| {
        while packed < 64 {
            let r = ep.am_bcopy(4, |buf| {
                buf[..8].copy_from_slice(&packed.to_le_bytes());
                buf[8..8000].fill(packed as u8);
                8000
            });
            match r.unwrap() {
                Outcome::Done(_) => packed += 1,
                _ => break,
            }
        }
        sb.ams.len() == 9 + 2000 + 64
    });
    for (i, (id, data)) in sb.ams[9 + 2000..].iter().enumerate() {
        assert_eq!(*id, 4);
        assert_eq!(&data[..8], &(i as u64).to_le_bytes());
        assert!(
            data[8..8000].iter().all(|&x| x == i as u8),
            "bcopy {i} differs"
        );
    }
    // Everything left: the send queues went back to the interfaces' spares.
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.connections_holding_tx() + b.connections_holding_tx() > 0 {
        a.progress(&mut sa);
        b.progress(&mut sb);
        assert!(
            Instant::now() < deadline,
            "idle connections still hold send queues"
        );
    }
}

/// Gets of a few hundred KiB over 4 KiB socket buffers, in both directions at once, with small
/// messages between them: every one arrives intact, and the kernel never retransmitted (with
/// the buffer sizes set on accepted sockets only, after the window was negotiated, each 300 KB
/// get towards the acceptor took 5.7 s, and the kernel retransmitted).
#[test]
fn small_socket_buffers_gets_both_ways() {
    let small = || {
        let cfg = super::super::sockopt::SockCfg {
            sndbuf: Some(4096),
            rcvbuf: Some(4096),
            congestion: None,
            keepalive: None,
        };
        TcpIface::open_cfg(lo(), cfg).unwrap()
    };
    let (mut a, mut b) = (small(), small());
    let mut ab = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let mut ba = b
        .ep_create_connected(a.device_address(), a.iface_address())
        .unwrap();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let md = TcpMd::new();
    let len = 300_000;
    let src_a = md.mem_alloc(len).unwrap();
    let src_b = md.mem_alloc(len).unwrap();
    let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    src_a.write(0, &pattern).unwrap();
    src_b.write(0, &pattern).unwrap();
    let (rk_a, rk_b) = (rkey_of(&md, &src_a), rkey_of(&md, &src_b));
    for round in 0..10u64 {
        let dst_a = md.mem_alloc(len).unwrap();
        let dst_b = md.mem_alloc(len).unwrap();
        let ca = CompletionId(100 + round * 2);
        let cb = CompletionId(ca.0 + 1);
        assert_eq!(
            ab.get_zcopy(&[Iov::whole(&dst_a)], src_b.addr() as u64, &rk_b, ca)
                .unwrap(),
            Outcome::InProgress
        );
        assert_eq!(
            ba.get_zcopy(&[Iov::whole(&dst_b)], src_a.addr() as u64, &rk_a, cb)
                .unwrap(),
            Outcome::InProgress
        );
        let mut shorts = 0;
        run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
            if shorts < 50 && ab.am_short(1, shorts, b"x").unwrap().is_done() {
                shorts += 1;
            }
            sa.comp(ca).is_some() && sb.comp(cb).is_some()
        });
        assert!(sa.comp(ca).unwrap().is_ok() && sb.comp(cb).unwrap().is_ok());
        let mut back = vec![0u8; len];
        dst_a.read(0, &mut back).unwrap();
        assert!(back == pattern, "get into a differs");
        dst_b.read(0, &mut back).unwrap();
        assert!(back == pattern, "get into b differs");
    }
    for i in [&a, &b] {
        for (_, c) in i.inner.borrow().conns.iter() {
            let Some(s) = c.sock.as_ref() else { continue };
            // SAFETY: an all-zero tcp_info is valid; getsockopt fills at most `len` bytes.
            let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
            // SAFETY: `info` is a writable tcp_info of `len` bytes; the socket is live.
            let r = unsafe {
                libc::getsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(s),
                    libc::IPPROTO_TCP,
                    libc::TCP_INFO,
                    &mut info as *mut libc::tcp_info as *mut libc::c_void,
                    &mut len,
                )
            };
            assert_eq!(r, 0, "TCP_INFO");
            assert_eq!(info.tcpi_total_retrans, 0, "segments retransmitted");
        }
    }
}

/// Unexpected tagged messages that arrive in pieces are staged whole: a shorter one after a
/// longer one (the staging buffer is reused without zeroing) and a longer one after it come out
/// with exactly their own bytes.
#[test]
fn unexpected_tagged_messages_in_pieces_keep_exact_bytes() {
    let (mut a, mut b, mut ep) = pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let md = TcpMd::new();
    let sizes = [300_000usize, 70_001, 5, 200_000];
    let src = md.mem_alloc(sizes.iter().sum()).unwrap();
    let mut off = 0;
    let mut sent = 0;
    for (i, &n) in sizes.iter().enumerate() {
        // SAFETY: `src` is this test's own allocation of the sum of the sizes.
        let dst = unsafe { std::slice::from_raw_parts_mut(src.addr().add(off), n) };
        for (j, x) in dst.iter_mut().enumerate() {
            *x = (j * 7 + i * 13 + 1) as u8;
        }
        let iov = [Iov::new(&src, off, n).unwrap()];
        loop {
            match ep.tag_eager_zcopy(40 + i as u64, 0, &iov, CompletionId(i as u64)) {
                Ok(Outcome::NoResource) => {
                    a.progress(&mut sa);
                    b.progress(&mut sb);
                }
                Ok(Outcome::InProgress) => break,
                Ok(Outcome::Done(())) => {
                    sent += 1;
                    break;
                }
                Err(e) => panic!("tag_eager_zcopy: {e}"),
            }
        }
        off += n;
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sb.unexp.len() == sizes.len() && sa.comps.len() + sent == sizes.len()
    });
    for (i, &n) in sizes.iter().enumerate() {
        let (tag, data) = &sb.unexp[i];
        assert_eq!(*tag, 40 + i as u64);
        assert_eq!(data.len(), n, "message {i}");
        let bad = data
            .iter()
            .enumerate()
            .position(|(j, &x)| x != (j * 7 + i * 13 + 1) as u8);
        assert_eq!(bad, None, "message {i}: first wrong byte");
    }
}
