//! Frames forged by a process that connects to an interface as a peer interface would: replies
//! that name requests of another connection.

use super::*;

/// A frame of `kind` with the sub-header `sub` and no payload.
fn frame(kind: wire::Kind, sub: &[u8]) -> Vec<u8> {
    assert_eq!(sub.len(), kind.sub_len());
    let mut v = wire::FrameHeader::new(kind, 0, 0).to_bytes().to_vec();
    v.extend_from_slice(sub);
    v
}

/// The frames of a connector that claims to be the interface listening on `port` of
/// 127.0.0.1: its connect-to-iface hello for endpoint number 0.
fn hello(port: u16) -> Vec<u8> {
    let mut sub = [0u8; wire::Hello::LEN];
    wire::Hello {
        mode: wire::HelloMode::Iface,
        src_conn_id: 0,
        dst_conn_id: 0,
        src_ip: 0x7f00_0001,
        src_port: port,
    }
    .encode(&mut sub);
    frame(wire::Kind::Hello, &sub)
}

/// Reads from the non-blocking `s` while progressing `a`, until `done` holds for what was
/// read and whether the connection was closed; panics after a watchdog of 20 s.
fn read_until(
    s: &mut std::net::TcpStream,
    a: &mut TcpIface,
    sa: &mut Sink,
    mut done: impl FnMut(&[u8], bool, &Sink) -> bool,
) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut got, mut closed) = (Vec::new(), false);
    let mut buf = [0u8; 64];
    while !done(&got, closed, sa) {
        a.progress(sa);
        if !closed {
            match s.read(&mut buf) {
                Ok(0) => closed = true,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => closed = true,
            }
        }
        assert!(Instant::now() < deadline, "watchdog: condition not reached");
    }
    got
}

/// Replies that name requests (get and atomic responses, put and flush acks) are looked up in
/// the requests of the connection they arrive on, by kind. A process that completes the
/// handshake as a peer interface (its hello is acknowledged and our endpoint to that
/// interface takes the connection) and then sends replies naming request ids of the victim
/// connection (1, 2, … are its first slots) reaches nothing: its connection fails with "…
/// for unknown request N" (reported once, on the endpoint that took it), no completion is
/// reported, and the victim's get and atomic finish later with the real peer's data.
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
        ep.get_zcopy(&[Iov::whole(&dst)], base, &rk, CompletionId(11))
            .unwrap(),
        Outcome::InProgress
    );
    assert_eq!(
        ep.atomic64_fetch(AtomicOp::Add, 1, base + (32 << 10), &rk, CompletionId(12))
            .unwrap(),
        Outcome::InProgress
    );
    for _ in 0..10 {
        a.progress(&mut sa);
    }
    let ack = |kind: wire::Kind, req_id: u64| {
        let mut sub = [0u8; wire::Ack::LEN];
        wire::Ack {
            req_id,
            status: wire::WireStatus::Ok,
        }
        .encode(&mut sub);
        frame(kind, &sub)
    };
    let mut forged = Vec::new();
    for req_id in 1..=3u64 {
        forged.push((ack(wire::Kind::GetResp, req_id), "get response", req_id));
        forged.push((ack(wire::Kind::PutAck, req_id), "put ack", req_id));
        forged.push((ack(wire::Kind::FlushAck, req_id), "flush ack", req_id));
        let mut sub = [0u8; wire::AtomicResp::LEN];
        wire::AtomicResp {
            req_id,
            status: wire::WireStatus::Ok,
            value: 0xbad,
        }
        .encode(&mut sub);
        forged.push((
            frame(wire::Kind::AtomicResp, &sub),
            "atomic response",
            req_id,
        ));
    }
    let addr = a.listen_addr();
    let dev = a.device_address().to_vec();
    for (bytes, what, req_id) in forged {
        // The interface the forger claims to be: a port of its own, so our endpoint to it is
        // one no other connection serves.
        let claimed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = claimed.local_addr().unwrap().port();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_nonblocking(true).unwrap();
        s.write_all(&hello(port)).unwrap();
        // The hello is acknowledged: the handshake is complete.
        let acked = 8 + wire::HelloAck::LEN;
        let got = read_until(&mut s, &mut a, &mut sa, |got, closed, _| {
            closed || got.len() >= acked
        });
        assert_eq!(got.len(), acked, "the hello was not acknowledged: {got:?}");
        let h = wire::FrameHeader::decode(&got).unwrap();
        assert_eq!(h.kind, wire::Kind::HelloAck);
        let iface = IfaceAddr {
            ip: std::net::Ipv4Addr::LOCALHOST,
            port,
        }
        .encode();
        let forger = a.ep_create_connected(&dev, &iface).unwrap();
        s.write_all(&bytes).unwrap();
        // The forged reply fails the connection it came on, and only that one.
        read_until(&mut s, &mut a, &mut sa, |_, closed, sa| {
            closed && !sa.errors.is_empty()
        });
        assert!(
            sa.comps.is_empty(),
            "a forged reply completed {:?}",
            sa.comps
        );
        let errors = std::mem::take(&mut sa.errors);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            errors[0].0,
            forger.id(),
            "another endpoint failed: {errors:?}"
        );
        let want = format!("{what} for unknown request {req_id}");
        assert!(
            matches!(&errors[0].1, Error::Wire(m) if m.contains(&want)),
            "{:?}, expected {want}",
            errors[0].1
        );
    }
    run(&mut a, &mut sa, &mut b, &mut sb, |sa, _| {
        sa.comp(CompletionId(11)).is_some() && sa.comp(CompletionId(12)).is_some()
    });
    assert_eq!(sa.comp(CompletionId(11)), Some(&Ok(0)));
    assert_eq!(sa.comp(CompletionId(12)), Some(&Ok(41)));
    assert!(sa.errors.is_empty(), "the victim endpoint failed");
    let mut back = vec![0u8; dst.len()];
    dst.read(0, &mut back).unwrap();
    assert!(back == pattern, "get data differ");
}
