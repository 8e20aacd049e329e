//! Client/server connection establishment: a listener on ip:port that accepts or rejects, with
//! each side's worker on its own thread (shared memory lanes between them).

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use ucp::{
    CloseMode, Context, ContextParams, EpParams, Error, Features, Listener, Op, UcpConfig, Worker,
    TAG_MASK_EXACT,
};

fn worker() -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: vec!["posix".into(), "cma".into()],
            ..Default::default()
        }),
    })
    .unwrap();
    Worker::new(&ctx).unwrap()
}

fn finish(w: &mut Worker, op: Op) -> ucp::Completion {
    let mut req = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        match w.request_take(req) {
            Ok(c) => return c,
            Err(r) => req = r,
        }
        w.progress();
        assert!(Instant::now() < end, "watchdog");
    }
}

#[test]
fn ucp_listener_reject_then_accept_and_talk() {
    let mut l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr: SocketAddr = l.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        let mut w = worker();
        let e = w.connect(addr, EpParams::default()).unwrap_err();
        assert!(matches!(e, Error::ConnectionReset(_)), "{e}");
        assert!(e.to_string().contains("rejected"), "{e}");
        let ep = w.connect(addr, EpParams::default()).unwrap();
        let op = w.tag_send(ep, 5, b"hello server").unwrap();
        assert_eq!(finish(&mut w, op).status, Ok(()));
        let op = w.tag_recv(vec![0; 12], 6, TAG_MASK_EXACT).unwrap();
        let c = finish(&mut w, op);
        assert_eq!(c.buf.unwrap(), b"hello client");
        w.ep_close(ep, CloseMode::Flush).unwrap();
    });
    let mut w = worker();
    let end = Instant::now() + Duration::from_secs(60);
    let first = loop {
        if let Some(r) = l.poll().unwrap() {
            break r;
        }
        assert!(Instant::now() < end, "watchdog: no request");
        std::thread::sleep(Duration::from_millis(1));
    };
    first.reject().unwrap();
    let second = l
        .wait(Duration::from_secs(60))
        .unwrap()
        .expect("second request");
    assert!(second.peer_addr().ip().is_loopback());
    let ep = w.accept(second, EpParams::default()).unwrap();
    let op = w.tag_recv(vec![0; 12], 5, TAG_MASK_EXACT).unwrap();
    assert_eq!(finish(&mut w, op).buf.unwrap(), b"hello server");
    let op = w.tag_send(ep, 6, b"hello client").unwrap();
    assert_eq!(finish(&mut w, op).status, Ok(()));
    // Keep progressing: the client's flush-close waits for our acknowledgement.
    while !client.is_finished() {
        w.progress();
        assert!(Instant::now() < end, "watchdog: client did not finish");
    }
    client.join().unwrap();
    // The client's flush-close reached us: the endpoint reports the peer closed.
    while w.ep_status(ep).is_ok() {
        w.progress();
        assert!(Instant::now() < end, "watchdog: close not seen");
    }
    assert!(matches!(w.ep_status(ep), Err(Error::ConnectionReset(_))));
}

#[test]
fn ucp_listener_garbage_client_does_not_break_it() {
    use std::io::Write;
    let mut l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let e = l.wait(Duration::from_secs(60)).unwrap_err();
    assert!(e.to_string().contains("magic"), "{e}");
    // Still serving.
    let t = std::thread::spawn(move || {
        let mut w = worker();
        w.connect(addr, EpParams::default()).map(|_| ())
    });
    let r = l.wait(Duration::from_secs(60)).unwrap().expect("request");
    let mut w = worker();
    w.accept(r, EpParams::default()).unwrap();
    t.join().unwrap().unwrap();
}

#[test]
fn ucp_listener_force_close_fails_outstanding_requests() {
    let mut l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let mut w = worker();
        let ep = w.connect(addr, EpParams::default()).unwrap();
        // A sync send nobody matches, then force close: it fails with Canceled.
        let op = w.tag_send_sync(ep, 1, b"never matched").unwrap();
        let Op::Pending(r) = op else {
            panic!("sync send finished")
        };
        w.ep_close(ep, CloseMode::Force).unwrap();
        let c = w.request_take(r).expect("finished by close");
        assert_eq!(c.status, Err(Error::Canceled));
        assert!(
            w.tag_send(ep, 1, b"x").is_err(),
            "closed endpoint handle is stale"
        );
    });
    let r = l.wait(Duration::from_secs(60)).unwrap().expect("request");
    let mut w = worker();
    let _ep = w.accept(r, EpParams::default()).unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    while !t.is_finished() {
        w.progress();
        assert!(Instant::now() < end, "watchdog");
    }
    t.join().unwrap();
}
