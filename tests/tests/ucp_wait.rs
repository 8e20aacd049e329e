//! Sleeping and timers of a ucp worker: a worker sleeping in `wait_event` receives a message from
//! another thread's worker over shared memory, the worker's waker ends a sleep, a sleep never
//! outlasts the next keepalive, and a flush close that gets no acknowledgement ends at its
//! deadline timer.
//!
//! A wait that never returns would hang the test: each test that sleeps starts a watchdog that
//! ends the process with a message after two minutes instead.

use std::sync::mpsc;
use std::time::Duration;
use ucp::{
    CloseMode, Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker, TAG_MASK_EXACT,
};
use ucs::time::ManualClock;

/// Ends the process if the test is still running after two minutes (a wait that never woke).
fn watchdog(what: &'static str) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(120));
        eprintln!("watchdog: {what} did not return within two minutes");
        std::process::exit(101);
    });
}

fn ctx(tls: &str, keepalive: Option<Duration>) -> Context {
    Context::new(ContextParams {
        features: Features::TAG | Features::WAKEUP,
        config: Some(UcpConfig {
            tls: vec![tls.into()],
            keepalive_interval: keepalive,
            keepalive_timeout: Duration::from_secs(60),
            ..Default::default()
        }),
    })
    .expect("context")
}

/// Receives tag `tag` on `b`, sleeping in `wait_event(timeout)` between progress calls; gives
/// the data and the number of sleeps.
fn recv_sleeping(b: &mut Worker, tag: u64, timeout: Option<Duration>) -> (Vec<u8>, usize) {
    let r = b.tag_recv(vec![0; 64], tag, TAG_MASK_EXACT).expect("recv");
    let mut req = match r {
        Op::Done(c) => return (c.buf.unwrap(), 0),
        Op::Pending(r) => r,
    };
    let mut sleeps = 0;
    loop {
        b.progress();
        match b.request_take(req) {
            Ok(c) => {
                assert_eq!(c.status, Ok(()));
                let mut buf = c.buf.unwrap();
                buf.truncate(c.len);
                return (buf, sleeps);
            }
            Err(back) => req = back,
        }
        b.wait_event(timeout).expect("wait_event");
        sleeps += 1;
    }
}

#[test]
fn wait_event_wakes_for_a_message_from_another_thread_over_shared_memory() {
    watchdog("wait_event for a shared-memory message");
    // Keepalive off: only a message can end the receiver's sleep.
    let mut b = Worker::new(&ctx("posix", None)).expect("worker b");
    let (addr_tx, addr_rx) = mpsc::channel::<Vec<u8>>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    addr_tx.send(b.address().to_vec()).unwrap();
    let sender = std::thread::spawn(move || {
        let mut a = Worker::new(&ctx("posix", None)).expect("worker a");
        let addr = addr_rx.recv().unwrap();
        let ep = a.ep_create(&addr, EpParams::default()).expect("ep");
        for (tag, msg) in [(1u64, &b"hello"[..]), (2, b"wake up")] {
            // Send once the receiver is (about to be) asleep.
            go_rx.recv().unwrap();
            let op = a.tag_send(ep, tag, msg).expect("send");
            assert_eq!(a.complete(op).status, Ok(()));
        }
        // Keep the endpoint until the receiver has everything.
        go_rx.recv().unwrap();
    });
    // The first message also brings the sender's wire-up: bounded sleeps.
    go_tx.send(()).unwrap();
    let (m, _) = recv_sleeping(&mut b, 1, Some(Duration::from_millis(50)));
    assert_eq!(m, b"hello");
    // Connected: the receiver sleeps without a limit, and the message alone wakes it.
    go_tx.send(()).unwrap();
    let (m, sleeps) = recv_sleeping(&mut b, 2, None);
    assert_eq!(m, b"wake up");
    assert!(sleeps <= 8, "{sleeps} sleeps for one message");
    go_tx.send(()).unwrap();
    sender.join().unwrap();
}

#[test]
fn the_waker_ends_a_blocked_wait_event_from_another_thread() {
    watchdog("wait_event for the waker");
    let mut w = Worker::new(&ctx("self", None)).expect("worker");
    let waker = w.waker().expect("waker");
    assert!(std::sync::Arc::ptr_eq(&waker, &w.waker().unwrap()));
    w.progress();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        waker.wake().unwrap();
    });
    // Nothing else can end this sleep: no transport events, no timers, no timeout.
    w.wait_event(None).expect("wait_event");
    t.join().unwrap();
}

#[test]
fn wait_event_without_a_timeout_returns_for_the_next_keepalive() {
    watchdog("wait_event with keepalive");
    let mut w = Worker::new(&ctx("self", Some(Duration::from_millis(40)))).expect("worker");
    for _ in 0..3 {
        w.progress();
        // Idle, without a timeout: the keepalive timer bounds the sleep.
        w.wait_event(None).expect("wait_event");
    }
}

#[test]
fn waiting_needs_the_wakeup_feature() {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: vec!["self".into()],
            ..Default::default()
        }),
    })
    .unwrap();
    let mut w = Worker::new(&ctx).unwrap();
    assert!(matches!(w.efd(), Err(ucp::Error::Unsupported(_))));
    assert!(matches!(w.arm(), Err(ucp::Error::Unsupported(_))));
    assert!(matches!(
        w.wait_event(Some(Duration::ZERO)),
        Err(ucp::Error::Unsupported(_))
    ));
}

#[test]
fn a_flush_close_without_acknowledgement_ends_at_its_deadline() {
    let clock = ManualClock::new();
    let cfg = UcpConfig {
        tls: vec!["self".into()],
        keepalive_interval: None,
        keepalive_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(cfg),
    })
    .unwrap();
    let mut a = Worker::with_clock(&ctx, clock.clone()).unwrap();
    let mut b = Worker::with_clock(&ctx, clock.clone()).unwrap();
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    for _ in 0..4 {
        a.progress();
        b.progress();
    }
    // b never progresses again: the CLOSE is never acknowledged.
    let Op::Pending(close) = a.ep_close_nb(ab, CloseMode::Flush).unwrap() else {
        panic!("a flush close waits for the acknowledgement")
    };
    for _ in 0..100 {
        a.progress();
    }
    // A worker reads its clock once per `CLOCK_PERIOD` progress calls: each step gives it that
    // many.
    clock.advance(Duration::from_secs(4));
    for _ in 0..ucp::CLOCK_PERIOD {
        a.progress();
    }
    assert!(
        !a.request_test(&close).expect("own request"),
        "closed before the deadline"
    );
    clock.advance(Duration::from_secs(1));
    for _ in 0..ucp::CLOCK_PERIOD {
        a.progress();
    }
    assert!(
        a.request_test(&close).expect("own request"),
        "the deadline ended the close"
    );
    let Ok(c) = a.request_take(close) else {
        panic!("the close finished")
    };
    assert_eq!(c.status, Ok(()));
    assert!(a.ep_status(ab).is_err());
}
