//! Taking finished requests: `request_take` and `request_take_recv` on the common receive (the
//! fast path) and on everything else (running, truncated, stale, another worker's).

use crate::{EpHandle, Features, Op, Worker};
use std::time::{Duration, Instant};
use ucs::Error;

const WATCHDOG: Duration = Duration::from_secs(60);

/// Two workers over posix shared memory; the first has an endpoint to the second.
fn pair() -> (Worker, Worker, EpHandle) {
    crate::test_pair::pair(&["posix"], Features::TAG)
}

/// Posts a receive of `cap` bytes for `tag` on `b`; it must not finish at once.
fn post(b: &mut Worker, cap: usize, tag: u64) -> crate::Request {
    match b.tag_recv(vec![0u8; cap], tag, u64::MAX).expect("recv") {
        Op::Pending(r) => r,
        Op::Done(c) => panic!("nothing was sent yet: {:?}", c.status),
    }
}

/// Sends `msg` with `tag` and progresses both workers until `b` has handled an event.
fn deliver(a: &mut Worker, b: &mut Worker, ep: EpHandle, tag: u64, msg: &[u8]) {
    let send = a.tag_send(ep, tag, msg).expect("send");
    let deadline = Instant::now() + WATCHDOG;
    while b.progress() == 0 {
        a.progress();
        assert!(Instant::now() < deadline, "watchdog: nothing arrived");
    }
    let _ = a.complete(send);
}

#[test]
fn take_recv_gives_the_received_bytes_and_frees_the_request() {
    let (mut a, mut b, ep) = pair();
    let r = post(&mut b, 16, 7);
    // Still running: the handle comes back.
    let r = b.request_take_recv(r).expect_err("running");
    deliver(&mut a, &mut b, ep, 7, b"12345678");
    let got = b.request_take_recv(r).expect("finished").expect("received");
    assert_eq!(
        (got.data(), got.tag, got.buf.len()),
        (&b"12345678"[..], 7, 16)
    );
    assert_eq!(b.request_count(), 0);
}

#[test]
fn take_gives_a_whole_completion_of_the_common_receive() {
    let (mut a, mut b, ep) = pair();
    let r = post(&mut b, 8, 3);
    let r = b.request_take(r).expect_err("running");
    deliver(&mut a, &mut b, ep, 3, b"abcdefgh");
    let c = b.request_take(r).expect("finished");
    assert_eq!(c.status, Ok(()));
    assert_eq!(
        (c.buf.as_deref(), c.len, c.tag, c.value),
        (Some(&b"abcdefgh"[..]), 8, 3, 0)
    );
    assert_eq!(b.request_count(), 0);
}

#[test]
fn take_recv_of_a_truncated_receive_gives_the_error() {
    let (mut a, mut b, ep) = pair();
    let r = post(&mut b, 4, 5);
    deliver(&mut a, &mut b, ep, 5, b"0123456789");
    let e = b
        .request_take_recv(r)
        .expect("finished")
        .expect_err("truncated");
    assert!(
        matches!(
            e,
            Error::Truncated {
                len: 10,
                capacity: 4
            }
        ),
        "{e:?}"
    );
    assert_eq!(b.request_count(), 0);
}

#[test]
fn take_recv_of_another_workers_request_leaves_both_alone() {
    let (mut a, mut b, ep) = pair();
    let r = post(&mut b, 8, 9);
    let e = a
        .request_take_recv(r)
        .expect("answered")
        .expect_err("foreign");
    assert!(matches!(e, Error::InvalidParam(_)), "{e:?}");
    // The handle was dropped: `b` releases the receive when it finishes.
    assert_eq!(b.request_count(), 1);
    deliver(&mut a, &mut b, ep, 9, b"released");
    b.progress();
    assert_eq!(b.request_count(), 0);
}

#[test]
fn take_recv_of_a_callback_request_waits_and_then_finds_it_taken() {
    let (mut a, mut b, ep) = pair();
    let r = post(&mut b, 8, 11);
    let seen = std::rc::Rc::new(std::cell::Cell::new(false));
    let s = seen.clone();
    b.request_set_callback(&r, move |c| s.set(c.status.is_ok()))
        .expect("callback");
    let r = b.request_take_recv(r).expect_err("running");
    deliver(&mut a, &mut b, ep, 11, b"callback");
    b.progress();
    assert!(seen.get());
    let e = b
        .request_take_recv(r)
        .expect("answered")
        .expect_err("taken");
    assert!(matches!(e, Error::InvalidParam(_)), "{e:?}");
    assert_eq!(b.request_count(), 0);
}
