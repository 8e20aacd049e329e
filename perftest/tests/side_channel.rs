//! The side channel's codecs through the public API, and a real server refusing bad requests
//! with a reason instead of hanging.

mod common;
use common::*;
use perftest::params::{Layout, TestId, TestParams};
use perftest::wire::{AddressInfo, Channel, FrameHeader, Kind};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn params(test: TestId, device: &str) -> TestParams {
    TestParams {
        test,
        layout: Layout::Short,
        sizes: vec![8],
        iterations: 100,
        warmup: 0,
        outstanding: 16,
        window: 127,
        transport: "posix".into(),
        device: device.into(),
        mem: Default::default(),
    }
}

#[test]
fn codecs_round_trip_and_reject_truncation() {
    let p = params(TestId::AmBw, "memory");
    let mut b = Vec::new();
    p.encode(&mut b);
    assert_eq!(TestParams::decode(&b).unwrap(), p);
    assert!(TestParams::decode(&b[..b.len() - 1]).is_err());
    assert!(TestParams::decode(&b[..TestParams::LEN - 1]).is_err());

    let a = AddressInfo {
        buffer_addr: 1 << 40,
        buffer_len: 64,
        device_addr: vec![7; 8],
        iface_addr: vec![1, 2],
        ep_addr: vec![3],
        rkey: vec![4; 24],
    };
    let mut b = Vec::new();
    a.encode(&mut b).unwrap();
    assert_eq!(AddressInfo::decode(&b).unwrap(), a);
    assert!(AddressInfo::decode(&b[..b.len() - 1]).is_err());

    let h = FrameHeader {
        kind: Kind::Done,
        len: 8,
    };
    assert_eq!(FrameHeader::decode(&h.encode()).unwrap(), h);
    assert!(FrameHeader::decode(&h.encode()[..FrameHeader::LEN - 1]).is_err());
}

fn connect_retry(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("server never listened: {e}"),
        }
    }
}

#[test]
fn server_rejects_unknown_test_and_missing_device() {
    let server = Server::start();
    let port = server.port;

    // An unknown test number: the server answers with a reason.
    let mut c = Channel::new(connect_retry(port), Duration::from_secs(10)).unwrap();
    let mut b = Vec::new();
    params(TestId::AmLat, "memory").encode(&mut b);
    b[0..2].copy_from_slice(&999u16.to_le_bytes());
    c.send(Kind::Request, &b).unwrap();
    let e = c.expect(Kind::Accept).unwrap_err().to_string();
    assert!(e.contains("unknown test number 999"), "{e}");
    drop(c);

    // A device the server does not have.
    let mut c = Channel::new(connect_retry(port), Duration::from_secs(10)).unwrap();
    c.send_params(&params(TestId::AmLat, "no_such_dev"))
        .unwrap();
    let e = c.expect(Kind::Accept).unwrap_err().to_string();
    assert!(e.contains("no_such_dev"), "{e}");
    drop(c);

    // Garbage instead of a frame.
    let mut c = Channel::new(connect_retry(port), Duration::from_secs(10)).unwrap();
    c.send(Kind::Ready, &[]).unwrap();
    let e = c.expect(Kind::Accept).unwrap_err().to_string();
    assert!(e.contains("Request"), "{e}");
    drop(c);

    // The server is still there for a valid client afterwards: run a real test against it.
    let r = run(
        &[
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "am_lat",
            "-x",
            "posix",
            "-d",
            "memory",
            "-n",
            "1000",
            "-v",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let srv = server.finish(Duration::from_secs(60));
    assert_eq!(srv.code, Some(0), "server: {}", srv.stderr);
    assert!(srv.stdout.contains("Accepted connection"), "{}", srv.stdout);
    assert!(
        srv.stdout.contains("active message latency"),
        "{}",
        srv.stdout
    );
}
