//! Connections: connect-to-ep and connect-to-iface set-up, simultaneous connects, peer death,
//! closes and garbage from the peer.

use super::*;

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
        ep.get_zcopy(&[Iov::whole(&dst)], 0x1000, &rk, CompletionId(7))
            .unwrap(),
        Outcome::InProgress
    );
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(20);
    while sa.errors.is_empty() || sa.comp(CompletionId(7)).is_none() {
        a.progress(&mut sa);
        assert!(Instant::now() < deadline, "watchdog: no endpoint error");
    }
    assert_eq!(sa.errors.len(), 1);
    assert_eq!(sa.errors[0].0, ep.id());
    assert!(matches!(sa.comp(CompletionId(7)), Some(Err(_))));
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
        ba.get_zcopy(&[Iov::whole(&dst)], ta.addr() as u64, &rka, CompletionId(5))
            .unwrap(),
        Outcome::InProgress
    );
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| {
        sb.comp(CompletionId(5)).is_some()
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
    // a's endpoint detached the connection: a new endpoint from a to b dials another one.
    let mut ab2 = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    assert!(ab2.am_short(0, 3, b"again").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 2);
    assert_eq!(&sb.ams[1].1[8..], b"again");
    assert_eq!(a.connection_count(), 2);
    assert_eq!(b.connection_count(), 2);
    // b's endpoint was the last one on the first connection: b closes it at once, and a
    // closes its end when it reads b's close.
    drop(ba);
    assert_eq!(b.connection_count(), 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.connection_count() != 1 {
        a.progress(&mut sa);
        b.progress(&mut sb);
        assert!(
            Instant::now() < deadline,
            "watchdog: a kept the closed connection"
        );
    }
    assert!(ab2.am_short(0, 4, b"still").unwrap().is_done());
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| sb.ams.len() == 3);
    assert!(sa.errors.is_empty() && sb.errors.is_empty());
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
        let r = ab.get_zcopy(&[Iov::whole(&da)], tb.addr() as u64, &rkb, CompletionId(1));
        assert_eq!(r.unwrap(), Outcome::InProgress);
        let r = ba.get_zcopy(&[Iov::whole(&db)], ta.addr() as u64, &rka, CompletionId(2));
        assert_eq!(r.unwrap(), Outcome::InProgress);
        run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
            sa.comp(CompletionId(1)).is_some() && sb.comp(CompletionId(2)).is_some()
        });
        let mut v = [0u8; 16];
        da.read(0, &mut v).unwrap();
        assert_eq!(&v, b"BBBBBBBBBBBBBBBB");
        db.read(0, &mut v).unwrap();
        assert_eq!(&v, b"AAAAAAAAAAAAAAAA");
        assert_eq!(a.connection_count() + b.connection_count(), 2);
    }
}

/// Sends message `seq` of endpoint number `tag`: an `am_short`, an `am_bcopy` or an
/// `am_zcopy` of `zsrc` (by `seq % 3`), each starting with `tag << 32 | seq`. False on
/// back-pressure.
fn send_mixed(ep: &mut TcpEp, zsrc: &MemHandle, tag: u64, seq: u64, zc: &mut u64) -> bool {
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
                &[Iov::new(zsrc, 0, 100).unwrap()],
                CompletionId(*zc),
            )
            .unwrap()
            .is_no_resource()
        }
    }
}

/// Checks that a message of [`send_mixed`] arrived intact.
fn check_mixed(d: &[u8]) {
    let seq = u64::from_le_bytes(d[..8].try_into().unwrap()) & 0xffff_ffff;
    match seq % 3 {
        0 => assert_eq!(&d[8..], &[seq as u8; 5]),
        1 => assert!(d.len() == 40 && d[8..].iter().all(|&x| x == seq as u8)),
        _ => assert!(d.len() == 108 && d[8..].iter().all(|&x| x == 0x5a)),
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
            CompletionId(100 + i as u64),
        );
        assert_eq!(r.unwrap(), Outcome::InProgress);
        let r = ebs[i].get_zcopy(
            &[Iov::whole(&dst[EPS + i])],
            ta.addr() as u64,
            &rka,
            CompletionId(200 + i as u64),
        );
        assert_eq!(r.unwrap(), Outcome::InProgress);
    }
    // Every endpoint sends N messages (short, bcopy and zcopy mixed), one side progressing
    // at a time; back-pressure just means "try again later".
    let mut next = [[0u64; EPS]; 2];
    let mut zc = 1000u64;
    let send = |ep: &mut TcpEp, tag: u64, seq: u64, zc: &mut u64| -> bool {
        send_mixed(ep, &zsrc, tag, seq, zc)
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
        let mut r = ep.flush(CompletionId(id)).unwrap();
        while r.is_no_resource() {
            a.progress(&mut sa);
            b.progress(&mut sb);
            r = ep.flush(CompletionId(id)).unwrap();
        }
        if !r.is_done() {
            flushing.push(id);
        }
    }
    let total = EPS as u64 * N;
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sa.ams.len() as u64 == total
            && sb.ams.len() as u64 == total
            && flushing.iter().all(|&id| {
                sa.comp(CompletionId(id)).is_some() || sb.comp(CompletionId(id)).is_some()
            })
    });
    let want: Vec<u64> = (0..N).collect();
    for i in 0..EPS as u64 {
        assert_eq!(seqs_from(&sb, i), want, "a's endpoint {i}");
        assert_eq!(seqs_from(&sa, i), want, "b's endpoint {i}");
    }
    for (_, d) in sa.ams.iter().chain(&sb.ams) {
        check_mixed(d);
    }
    for i in 0..EPS {
        let mut v = [0u8; 64];
        assert!(matches!(sa.comp(CompletionId(100 + i as u64)), Some(Ok(_))));
        dst[i].read(0, &mut v).unwrap();
        assert_eq!(v, [0xbb; 64]);
        assert!(matches!(sb.comp(CompletionId(200 + i as u64)), Some(Ok(_))));
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
    while !big.inner.borrow().conns.iter().any(|(_, c)| {
        c.dialed && c.state == super::super::conn::ConnState::Handshake && c.ctl.is_none()
    }) {
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
    let r = e_big
        .am_zcopy(0, b"", &[Iov::whole(&src)], CompletionId(9))
        .unwrap();
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
    while sb.errors.is_empty() || sb.comp(CompletionId(9)).is_none() {
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
    assert!(matches!(sb.comp(CompletionId(9)), Some(Err(_))));
    assert!(e_big.am_short(0, 3, b"").is_err());
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
            ep.get_zcopy(&[Iov::whole(&dst)], 0x1000, &rk, CompletionId(1))
                .unwrap(),
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
        while sa.errors.is_empty() || sa.comp(CompletionId(1)).is_none() {
            a.progress(&mut sa);
            assert!(Instant::now() < deadline, "watchdog: no endpoint error");
        }
        assert_eq!(sa.errors.len(), 1);
        let err = &sa.errors[0].1;
        assert!(matches!(err, Error::ConnectionReset(_)), "{err}");
        if !reset {
            assert!(err.to_string().contains("middle of a frame"), "{err}");
        }
        assert!(matches!(
            sa.comp(CompletionId(1)),
            Some(Err(Error::ConnectionReset(_)))
        ));
        assert!(ep.flush(CompletionId(2)).is_err());
    }
}

#[test]
fn refused_connect_becomes_unreachable_endpoint_error() {
    let mut a = open_lo();
    let mut sa = Sink::default();
    // A port nobody listens on: bound by this socket, never listening (so refused), and held
    // until the test ends so no other process can take it.
    let held = ucs::testing::refusing_port().expect("socket");
    let port = held.1;
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

/// Many simultaneous connects (more connections than progress reads directly, so it reads
/// only what epoll reports): after every progress call, a connection holds a receive buffer
/// only while bytes wait in it, also on the side whose dials take the peer's sockets over
/// (the buffer that read the hello moving a connection goes back to the spares at once);
/// once every pair is down to one connection none holds one, and no failed connection is
/// kept.
#[test]
fn simultaneous_connects_leave_no_receive_buffers() {
    const N: usize = 8;
    let (mut a, mut b) = ordered_pair();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    let mut eps = Vec::new();
    for _ in 0..N {
        eps.push(
            a.ep_create_connected(b.device_address(), b.iface_address())
                .unwrap(),
        );
        eps.push(
            b.ep_create_connected(a.device_address(), a.iface_address())
                .unwrap(),
        );
    }
    let up = |i: &TcpIface| {
        let g = i.inner.borrow();
        let live = g.conns.iter().filter(|(_, c)| c.sock.is_some());
        live.clone().count() == N && live.clone().all(|(_, c)| c.is_connected())
    };
    // Connections holding a receive buffer with no bytes in it.
    let idle_rx = |i: &TcpIface| {
        let g = i.inner.borrow();
        let held = g.conns.iter().filter(|(_, c)| c.rx.capacity() > 0);
        held.filter(|(_, c)| !c.rx.has_data()).count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(up(&a) && up(&b)) {
        a.progress(&mut sa);
        assert_eq!(idle_rx(&a), 0, "an empty receive buffer is held (winner)");
        b.progress(&mut sb);
        assert_eq!(idle_rx(&b), 0, "an empty receive buffer is held (adopter)");
        assert!(Instant::now() < deadline, "watchdog: connections not up");
    }
    assert!(sa.errors.is_empty() && sb.errors.is_empty());
    assert_eq!(rejected_count(&a) + rejected_count(&b), 0);
    assert_eq!(
        a.connections_holding_rx(),
        0,
        "the winner holds receive buffers"
    );
    assert_eq!(
        b.connections_holding_rx(),
        0,
        "the adopter holds receive buffers"
    );
    // One more progress call each removes the connections that lost (failed, unowned).
    a.progress(&mut sa);
    b.progress(&mut sb);
    assert_eq!(a.inner.borrow().conns.len(), N);
    assert_eq!(b.inner.borrow().conns.len(), N);
    // Every endpoint still carries messages both ways.
    for (i, ep) in eps.iter_mut().enumerate() {
        let mut sent = false;
        run(&mut a, &mut sa, &mut b, &mut sb, |_, _| {
            sent = sent || ep.am_short(1, i as u64, b"m").unwrap().is_done();
            sent
        });
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sa.ams.len() == N && sb.ams.len() == N
    });
}

/// One accept call takes at most `ACCEPT_BATCH` connections; the rest wait in the backlog and
/// the next progress calls take them.
#[test]
fn accepts_are_batched() {
    use super::accept::ACCEPT_BATCH;
    let mut a = open_lo();
    let mut sa = Sink::default();
    let to = {
        let g = a.inner.borrow();
        std::net::SocketAddrV4::new(g.local.ip, g.local.port)
    };
    let n = 2 * ACCEPT_BATCH + 3;
    let clients: Vec<_> = (0..n)
        .map(|_| std::net::TcpStream::connect(to).unwrap())
        .collect();
    let conns = |i: &TcpIface| i.inner.borrow().conns.len();
    a.inner.borrow_mut().accept_all();
    assert_eq!(conns(&a), ACCEPT_BATCH);
    let deadline = Instant::now() + Duration::from_secs(20);
    while conns(&a) < n {
        a.progress(&mut sa);
        assert!(
            Instant::now() < deadline,
            "watchdog: connections not accepted"
        );
    }
    assert_eq!(conns(&a), n);
    assert!(sa.errors.is_empty());
    drop(clients);
}

/// With `connect_backpressure` (what ucp asks for), an endpoint whose connection is still being
/// made refuses operations with `NoResource` and takes a pending request, dispatched once the
/// connection is up; nothing completes, and nothing is sent, before then.
#[test]
fn connect_backpressure_holds_operations_until_the_connection_is_up() {
    let mut a = open_lo();
    a.inner.borrow_mut().connect_backpressure = true;
    let mut b = open_lo();
    let mut ep = a
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    let (mut sa, mut sb) = (Sink::default(), Sink::default());
    // The acceptor has not progressed: the handshake cannot have finished.
    assert_eq!(ep.am_short(3, 7, b"early").unwrap(), Outcome::NoResource);
    let packed = ep.am_bcopy(3, |buf| {
        buf[..4].copy_from_slice(b"late");
        4
    });
    assert_eq!(packed.unwrap(), Outcome::NoResource);
    ep.pending_add(PendingId(9)).unwrap();
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        !sa.pending.is_empty()
    });
    assert_eq!(sa.pending, vec![(ep.id(), PendingId(9))]);
    assert!(
        sb.ams.is_empty(),
        "nothing left before the connection was up"
    );
    assert_eq!(ep.am_short(3, 7, b"now").unwrap(), Outcome::DONE);
    run(&mut a, &mut sa, &mut b, &mut sb, |_, sb| !sb.ams.is_empty());
    assert_eq!(sb.ams.len(), 1);
    assert_eq!(&sb.ams[0].1[8..], b"now");
    // Without it (the default), a new endpoint queues at once.
    let mut c = open_lo();
    let mut ep2 = c
        .ep_create_connected(b.device_address(), b.iface_address())
        .unwrap();
    assert_eq!(ep2.am_short(3, 8, b"queued").unwrap(), Outcome::DONE);
}
