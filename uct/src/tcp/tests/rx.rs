//! The receive paths over a raw peer socket: whole active messages at the start of a `recv`
//! go to the sink from the buffer (`rxfast.rs`); a partial frame after them, and other frames
//! behind them in the same bytes, go through the general dispatch, in order.

use super::*;

fn am_frame(id: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; wire::FrameHeader::LEN];
    wire::FrameHeader::new(wire::Kind::Am, id, body.len()).encode(&mut v);
    v.extend_from_slice(body);
    v
}

/// Progresses `a` until `sa` holds `n` active messages (watchdog 20 s).
fn until_ams(a: &mut TcpIface, sa: &mut Sink, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while sa.ams.len() < n {
        a.progress(sa);
        assert!(
            Instant::now() < deadline,
            "watchdog: {n} active messages, got {:?}, errors {:?}",
            sa.ams,
            sa.errors
        );
    }
}

#[test]
fn active_messages_then_partial_and_other_frames_in_order() {
    let mut a = open_lo();
    let mut sa = Sink::default();
    let mut s = std::net::TcpStream::connect(a.listen_addr()).unwrap();
    s.set_nodelay(true).unwrap();
    // Set up: a hello, then one message (the connection is set up once it arrived).
    let mut v = vec![0u8; 8 + wire::Hello::LEN];
    wire::FrameHeader::new(wire::Kind::Hello, 0, 0).encode(&mut v);
    wire::Hello {
        mode: wire::HelloMode::Iface,
        src_conn_id: 5,
        dst_conn_id: 0,
        src_ip: 0x7f00_0001,
        src_port: 1,
    }
    .encode(&mut v[8..]);
    v.extend(am_frame(1, b"first"));
    s.write_all(&v).unwrap();
    until_ams(&mut a, &mut sa, 1);
    // Two whole messages and the first bytes of a third (cut inside its header), in one write.
    let third = am_frame(4, &[7u8; 300]);
    let mut v = am_frame(2, b"two");
    v.extend(am_frame(3, &[]));
    v.extend_from_slice(&third[..5]);
    s.write_all(&v).unwrap();
    until_ams(&mut a, &mut sa, 3);
    for _ in 0..20 {
        a.progress(&mut sa);
    }
    assert_eq!(sa.ams.len(), 3, "a partial frame was delivered");
    // The rest of the third and a fourth message (after a partial frame: the general path).
    let mut v = third[5..].to_vec();
    v.extend(am_frame(5, b"four"));
    s.write_all(&v).unwrap();
    until_ams(&mut a, &mut sa, 5);
    // With nothing buffered: a message, a flush request and a fifth message, in one write.
    let mut v = am_frame(6, b"five");
    let mut f = vec![0u8; 8 + wire::FlushReq::LEN];
    wire::FrameHeader::new(wire::Kind::FlushReq, 0, 0).encode(&mut f);
    wire::FlushReq { req_id: 99 }.encode(&mut f[8..]);
    v.extend(f);
    v.extend(am_frame(7, b"six"));
    s.write_all(&v).unwrap();
    until_ams(&mut a, &mut sa, 7);
    let want: Vec<(u8, Vec<u8>)> = vec![
        (1, b"first".to_vec()),
        (2, b"two".to_vec()),
        (3, Vec::new()),
        (4, vec![7u8; 300]),
        (5, b"four".to_vec()),
        (6, b"five".to_vec()),
        (7, b"six".to_vec()),
    ];
    assert_eq!(sa.ams, want);
    // The flush request between the messages was answered (after the hello ack).
    s.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        a.progress(&mut sa);
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => panic!("the connection closed"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        let (evs, res) = wire::decode_stream([&got[..]], 1 << 16);
        res.unwrap();
        if let Some(last) = evs.get(1) {
            let wire::OwnedEvent::Control(c) = last else {
                panic!("unexpected {last:?}");
            };
            assert!(c.contains("FlushAck") && c.contains("req_id: 99"), "{c}");
            break;
        }
        assert!(Instant::now() < deadline, "watchdog: flush ack");
    }
    assert!(sa.errors.is_empty(), "{:?}", sa.errors);
}
