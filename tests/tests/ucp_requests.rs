//! Requests as a Rust user sees them, between workers of one process: handles checked against
//! their worker, dropped requests released, typed results, waits with a timeout or asleep on
//! the event fd, and requests awaited as futures.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use ucp::{
    AmoSize, CloseMode, Completion, Context, ContextParams, EpHandle, EpParams, Error, Features,
    Op, OpFuture, UcpConfig, Worker, TAG_MASK_EXACT,
};
use uct::AtomicOp;

const EXACT: u64 = TAG_MASK_EXACT;
const WATCHDOG: Duration = Duration::from_secs(60);

fn worker(tls: &str) -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG
            | Features::RMA
            | Features::AMO64
            | Features::STREAM
            | Features::WAKEUP,
        config: Some(UcpConfig {
            tls: vec![tls.into()],
            ..Default::default()
        }),
    })
    .expect("context");
    Worker::new(&ctx).expect("worker")
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn pump(ws: &mut [&mut Worker], n: usize) {
    for _ in 0..n {
        for w in ws.iter_mut() {
            w.progress();
        }
    }
}

/// Progresses `me` and `other` until `op` finishes (bounded: a stuck protocol fails the test).
fn finish(me: &mut Worker, other: &mut Worker, op: Op) -> Completion {
    let mut req = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    for _ in 0..1_000_000 {
        match me.request_take(req) {
            Ok(c) => return c,
            Err(r) => req = r,
        }
        me.progress();
        other.progress();
    }
    panic!("request did not finish");
}

fn is_invalid<T: std::fmt::Debug>(r: ucp::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidParam(_)))
}

/// Worker A's endpoint handle given to worker C, which has an endpoint of the same index and
/// generation: every call errors, and neither C's endpoint nor A's is touched.
#[test]
fn endpoint_of_another_worker_is_an_error_and_changes_nothing() {
    let mut a = worker("self");
    let mut b = worker("self");
    let mut c = worker("self");
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    let cb = c.ep_create(b.address(), EpParams::default()).unwrap();
    pump(&mut [&mut a, &mut b, &mut c], 8);
    assert_ne!(a.id(), c.id());
    assert!(is_invalid(c.tag_send(ab, 1, b"foreign")));
    assert!(is_invalid(c.ep_status(ab)));
    assert!(is_invalid(c.stream_send(ab, b"foreign")));
    assert!(is_invalid(c.ep_flush(ab)));
    assert!(is_invalid(c.ep_close(ab, CloseMode::Force)));
    pump(&mut [&mut a, &mut b, &mut c], 8);
    // Nothing reached B, and both real endpoints still work.
    assert!(b.tag_probe(0, 0, false).is_none(), "a foreign send arrived");
    c.ep_status(cb).unwrap();
    a.ep_status(ab).unwrap();
    for (w, ep, tag) in [(&mut a, ab, 7u64), (&mut c, cb, 8)] {
        let s = w.tag_send(ep, tag, b"real").unwrap();
        assert!(finish(w, &mut b, s).status.is_ok());
        let r = b.tag_recv(vec![0; 16], tag, EXACT).unwrap();
        let got = finish(&mut b, w, r).into_recv().unwrap();
        assert_eq!((got.data(), got.tag), (&b"real"[..], tag));
    }
    // A message probed on B is valid on B only.
    let s = a.tag_send(ab, 9, b"probed").unwrap();
    assert!(finish(&mut a, &mut b, s).status.is_ok());
    pump(&mut [&mut a, &mut b], 8);
    let msg = b.tag_probe(9, EXACT, true).unwrap().msg.unwrap();
    assert!(is_invalid(c.tag_msg_recv(vec![0; 16], msg)));
}

/// Worker A's requests given to worker C, whose own request has the same slot and generation:
/// every call errors; C's request and A's run on unchanged.
#[test]
fn request_of_another_worker_is_an_error_and_changes_nothing() {
    let mut a = worker("self");
    let mut b = worker("self");
    let mut c = worker("self");
    let ba = b.ep_create(a.address(), EpParams::default()).unwrap();
    let bc = b.ep_create(c.address(), EpParams::default()).unwrap();
    pump(&mut [&mut a, &mut b, &mut c], 8);
    let Op::Pending(ra) = a.tag_recv(vec![0; 64], 5, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    let Op::Pending(rc) = c.tag_recv(vec![0; 64], 5, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    assert_ne!(ra, rc, "requests of two workers compare equal");
    assert!(is_invalid(c.request_test(&ra)));
    assert!(is_invalid(c.request_cancel(&ra)));
    assert!(is_invalid(c.request_set_callback(&ra, |_| {})));
    assert!(is_invalid(c.request_set_token(&ra, 1)));
    // Neither request was canceled, finished or given a callback.
    assert!(!a.request_test(&ra).unwrap());
    assert!(!c.request_test(&rc).unwrap());
    // Taking (or waiting on) a foreign request gives an error at once.
    let Op::Pending(ra2) = a.tag_recv(vec![0; 64], 6, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    assert!(matches!(
        c.request_take(ra2).unwrap().status,
        Err(Error::InvalidParam(_))
    ));
    assert_eq!(c.request_count(), 1);
    // A token request's plain id: only its own worker cancels with it.
    let Op::Pending(ra3) = a.tag_recv(vec![0; 64], 7, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    let (id, done) = a.request_into_token(ra3, 77).unwrap();
    assert!(done.is_none());
    assert!(is_invalid(c.request_cancel_id(id)));
    assert!(a.request_cancel_id(id).unwrap());
    pump(&mut [&mut a], 2);
    let mut out = Vec::new();
    a.take_done_tokens(&mut out);
    assert!(
        matches!(out.as_slice(), [(77, c)] if c.status == Err(Error::Canceled)),
        "{out:?}"
    );
    // Both real receives get their data.
    for (tag, ep, data) in [(5u64, ba, &b"to a"[..]), (5, bc, b"to c")] {
        let s = b.tag_send(ep, tag, data).unwrap();
        let _ = s;
    }
    let got = finish(&mut a, &mut b, Op::Pending(ra)).into_recv().unwrap();
    assert_eq!(got.data(), b"to a");
    let got = finish(&mut c, &mut b, Op::Pending(rc)).into_recv().unwrap();
    assert_eq!(got.data(), b"to c");
    // The foreign take dropped A's second receive, which released it on A: a message to it
    // completes it inside A, which then frees it.
    let s = b.tag_send(ba, 6, b"late").unwrap();
    drop(s);
    pump(&mut [&mut a, &mut b], 16);
    assert_eq!(a.request_count(), 0);
    assert!(
        a.tag_probe(6, EXACT, false).is_none(),
        "the released receive did not match"
    );
}

/// Dropped requests, running or finished, leave nothing behind: after each round the worker
/// holds no request, so slots and their buffers do not grow.
#[test]
fn dropped_requests_release_their_slots_and_buffers() {
    let mut a = worker("self");
    let mut b = worker("self");
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    pump(&mut [&mut a, &mut b], 8);
    let small = pattern(3000, 1);
    let big = pattern(300_000, 2);
    for i in 0..500u64 {
        // A running receive dropped before its message arrives.
        drop(b.tag_recv(vec![0; 4096], i, EXACT).unwrap());
        let s = a.tag_send(ab, i, &small).unwrap();
        drop(s);
        // A receive that finished, then dropped without taking its result.
        let r = b.tag_recv(vec![0; 4096], 1 << 40 | i, EXACT).unwrap();
        drop(a.tag_send(ab, 1 << 40 | i, &small).unwrap());
        pump(&mut [&mut a, &mut b], 4);
        if let Op::Pending(r) = &r {
            assert!(
                b.request_test(r).unwrap(),
                "round {i}: receive did not finish"
            );
        }
        drop(r);
        // A rendezvous send dropped while running: it still delivers its data.
        let s = a.tag_send(ab, 2 << 40 | i, &big).unwrap();
        assert!(!s.is_done(), "a 300 kB send finished at once");
        drop(s);
        let r = b.tag_recv(vec![0; big.len()], 2 << 40 | i, EXACT).unwrap();
        let got = finish(&mut b, &mut a, r).into_recv().unwrap();
        assert!(got.data() == &big[..], "round {i}: rendezvous data differs");
        pump(&mut [&mut a, &mut b], 4);
        assert_eq!(a.request_count(), 0, "round {i}: sender holds requests");
        assert_eq!(b.request_count(), 0, "round {i}: receiver holds requests");
    }
    // The dropped running receives took their messages: nothing is left unexpected.
    assert!(b.tag_probe(0, 0, false).is_none());
}

/// A receive gives its buffer, length and tag; a fetching atomic its value; other operations
/// their status; the wrong accessor is an error, not a panic.
#[test]
fn completions_are_typed_per_operation() {
    let mut a = worker("self");
    let mut b = worker("self");
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    pump(&mut [&mut a, &mut b], 8);
    let s = a.tag_send(ab, 0x55, b"typed").unwrap();
    assert!(finish(&mut a, &mut b, s).into_result().is_ok());
    let r = b.tag_recv(vec![0; 32], 0x50, 0xF0).unwrap();
    let got = b.wait_recv(r).unwrap();
    assert_eq!((got.len, got.tag, got.data()), (5, 0x55, &b"typed"[..]));
    assert_eq!(got.buf.len(), 32);
    assert_eq!(got.into_data(), b"typed");
    // A truncated receive is an error with the real length.
    drop(a.tag_send(ab, 1, &[7; 100]).unwrap());
    pump(&mut [&mut a, &mut b], 8);
    let r = b.tag_recv(vec![0; 10], 1, EXACT).unwrap();
    assert!(matches!(
        b.wait_recv(r),
        Err(Error::Truncated { len: 100, .. })
    ));
    // Atomics: a fetch gives the old value.
    let map = b.mem_map(4096).unwrap();
    map.write(0, &40u64.to_le_bytes()).unwrap();
    let rkey = a.rkey_unpack(ab, map.rkey_packed()).unwrap();
    let op = a
        .atomic_fetch(ab, AtomicOp::Add, AmoSize::U64, 2, map.address(), &rkey)
        .unwrap();
    let op = Op::Done(finish(&mut a, &mut b, op));
    assert_eq!(a.wait_fetch(op).unwrap(), 40);
    let op = a
        .atomic_fetch(ab, AtomicOp::Add, AmoSize::U64, 0, map.address(), &rkey)
        .unwrap();
    assert_eq!(finish(&mut a, &mut b, op).into_value().unwrap(), 42);
    // A send's completion is not a receive.
    let s = a.tag_send(ab, 2, b"x").unwrap();
    assert!(matches!(
        finish(&mut a, &mut b, s).into_recv(),
        Err(Error::InvalidParam(_))
    ));
}

/// `wait_timeout` gives a request back while it runs, and its result once it finished.
#[test]
fn wait_timeout_gives_the_request_back_then_the_result() {
    let mut a = worker("self");
    let mut b = worker("self");
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    pump(&mut [&mut a, &mut b], 8);
    let Op::Pending(r) = b.tag_recv(vec![0; 16], 3, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    let r = b
        .wait_timeout(r, Duration::from_millis(20))
        .expect_err("finished without a message");
    drop(a.tag_send(ab, 3, b"late").unwrap());
    let c = b.wait_timeout(r, Duration::from_secs(60)).unwrap();
    assert_eq!(c.into_recv().unwrap().data(), b"late");
}

/// `wait` in one thread sleeps on its worker's event fd while the sender, another worker in
/// another thread, pauses; each message wakes it with its data.
#[test]
fn wait_sleeps_on_the_event_fd_and_wakes_for_each_message() {
    for tls in ["posix", "tcp"] {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let receiver = std::thread::spawn(move || {
            let mut b = worker(tls);
            tx.send(b.address().to_vec()).unwrap();
            let mut got = Vec::new();
            for i in 0..5u64 {
                let r = b.tag_recv(vec![0; 64], i, EXACT).unwrap();
                go_tx.send(()).unwrap();
                // `wait` itself has no deadline; the watchdog here keeps a lost wakeup from
                // hanging the test.
                let Op::Pending(r) = r else {
                    panic!("{tls}: message {i} was there before it was sent");
                };
                let c = b
                    .wait_timeout(r, WATCHDOG)
                    .expect("watchdog: message never woke the wait");
                got.push(c.into_recv().unwrap().into_data());
            }
            got
        });
        let addr = rx.recv().unwrap();
        let mut a = worker(tls);
        let ab = a.ep_create(&addr, EpParams::default()).unwrap();
        // The sender keeps progressing (wire-up, queued sends) while it pauses.
        let pause = |a: &mut Worker, d: Duration| {
            let end = Instant::now() + d;
            while Instant::now() < end {
                a.progress();
            }
        };
        for i in 0..5u64 {
            loop {
                match go_rx.try_recv() {
                    Ok(()) => break,
                    Err(std::sync::mpsc::TryRecvError::Empty) => {
                        pause(&mut a, Duration::from_millis(1))
                    }
                    Err(e) => panic!("{tls}: the receiver ended early: {e}"),
                }
            }
            // Long enough for the receiver to run out of spins and sleep.
            pause(&mut a, Duration::from_millis(100));
            let s = a
                .tag_send(ab, i, format!("message {i}").as_bytes())
                .unwrap();
            a.complete(s).status.unwrap();
        }
        while !receiver.is_finished() {
            pause(&mut a, Duration::from_millis(1));
        }
        let got = receiver.join().unwrap();
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g, format!("message {i}").as_bytes(), "{tls}");
        }
        a.ep_close(ab, CloseMode::Force).unwrap();
    }
}

struct Flag(AtomicUsize);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// An operation awaited as a future: pending without its message, woken by the `progress()`
/// call that finishes it, then ready with its data; dropping a pending future releases its
/// request.
#[test]
fn op_future_is_woken_by_the_progress_that_finishes_it() {
    let a = Rc::new(RefCell::new(worker("self")));
    let b = Rc::new(RefCell::new(worker("self")));
    let ab: EpHandle = {
        let addr = b.borrow().address().to_vec();
        a.borrow_mut()
            .ep_create(&addr, EpParams::default())
            .unwrap()
    };
    for _ in 0..8 {
        a.borrow_mut().progress();
        b.borrow_mut().progress();
    }
    let flag = Arc::new(Flag(AtomicUsize::new(0)));
    let waker = Waker::from(flag.clone());
    let mut cx = TaskContext::from_waker(&waker);
    let op = b.borrow_mut().tag_recv(vec![0; 32], 11, EXACT).unwrap();
    let mut fut = Box::pin(OpFuture::new(&b, op).recv());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    assert_eq!(flag.0.load(Ordering::SeqCst), 0);
    drop(a.borrow_mut().tag_send(ab, 11, b"awaited").unwrap());
    let woken = Cell::new(false);
    for _ in 0..1000 {
        a.borrow_mut().progress();
        b.borrow_mut().progress();
        if flag.0.load(Ordering::SeqCst) > 0 {
            woken.set(true);
            break;
        }
    }
    assert!(
        woken.get(),
        "progress finished the receive without waking its task"
    );
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(got) => assert_eq!(got.unwrap().data(), b"awaited"),
        Poll::Pending => panic!("woken but not ready"),
    }
    // A pending future dropped: its request is released, and freed once its message came.
    let op = b.borrow_mut().tag_recv(vec![0; 32], 12, EXACT).unwrap();
    let mut fut: Pin<Box<OpFuture>> = Box::pin(OpFuture::new(&b, op));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    drop(fut);
    drop(a.borrow_mut().tag_send(ab, 12, b"nobody").unwrap());
    for _ in 0..16 {
        a.borrow_mut().progress();
        b.borrow_mut().progress();
    }
    assert_eq!(b.borrow().request_count(), 0);
    assert!(b.borrow_mut().tag_probe(12, EXACT, false).is_none());
}

/// Token requests (what the C API uses): an eager receive's result is queued with its token as
/// soon as it finishes and its slot is free at once; `request_into_token_queued` queues the result
/// of a request that had already finished; a request of another worker is refused.
#[test]
fn token_results_are_queued_and_their_slots_freed() {
    let mut a = worker("self");
    let mut b = worker("self");
    let mut c = worker("self");
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    pump(&mut [&mut a, &mut b, &mut c], 8);
    let mut out = Vec::new();
    for i in 0..50u64 {
        // Posted first: finished by the progress call that receives the message.
        let Op::Pending(r) = b.tag_recv(vec![0; 64], i, EXACT).unwrap() else {
            panic!("round {i}: a receive without a message finished");
        };
        b.request_into_token_queued(r, 1000 + i).unwrap();
        assert_eq!(
            b.request_count(),
            1,
            "round {i}: the running receive holds a slot"
        );
        let data = pattern(40, i as u8);
        drop(a.tag_send(ab, i, &data).unwrap());
        for _ in 0..1000 {
            if b.has_done_tokens() {
                break;
            }
            pump(&mut [&mut a, &mut b], 1);
        }
        assert_eq!(
            b.request_count(),
            0,
            "round {i}: the finished token slot is held"
        );
        out.clear();
        b.take_done_tokens(&mut out);
        assert_eq!(out.len(), 1, "round {i}");
        let (token, done) = &out[0];
        assert_eq!(*token, 1000 + i);
        assert_eq!(done.status, Ok(()));
        assert_eq!((done.len, done.tag), (40, i));
        assert_eq!(&done.buf.as_ref().unwrap()[..40], &data[..]);
        assert!(!b.has_done_tokens(), "round {i}: a result was queued twice");
    }
    // Finished before the token is set (kept for request_take meanwhile): queued at once.
    let Op::Pending(r) = b.tag_recv(vec![0; 64], 77, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    drop(a.tag_send(ab, 77, b"late token").unwrap());
    for _ in 0..1000 {
        if b.request_test(&r).unwrap() {
            break;
        }
        pump(&mut [&mut a, &mut b], 1);
    }
    assert!(b.request_test(&r).unwrap(), "the receive did not finish");
    let id = b.request_into_token_queued(r, 5).unwrap();
    assert!(
        !b.request_cancel_id(id).unwrap(),
        "a finished request was canceled"
    );
    out.clear();
    b.take_done_tokens(&mut out);
    assert!(
        matches!(out.as_slice(), [(5, d)] if d.status == Ok(()) && d.len == 10),
        "{out:?}"
    );
    assert_eq!(b.request_count(), 0);
    // Another worker's request is refused and left running on its own worker.
    let Op::Pending(r) = b.tag_recv(vec![0; 8], 78, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    assert!(is_invalid(c.request_into_token_queued(r, 9)));
    assert!(!c.has_done_tokens());
}

/// Hook requests (what the C API uses for operations with nothing left to deliver): an eager
/// receive's result goes to the completion hook, with its token, during the progress call that
/// receives the message, and its slot is free at once; so does a cancel's, inside the cancel
/// call; a request that had already finished is queued as a token's; without a hook the results
/// queue as tokens' do; a request of another worker is refused.
#[test]
fn hook_results_go_to_the_hook_when_they_finish() {
    let mut a = worker("self");
    let mut b = worker("self");
    let mut c = worker("self");
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    pump(&mut [&mut a, &mut b, &mut c], 8);
    let got: Rc<RefCell<Vec<(u64, Completion)>>> = Rc::default();
    let sink = got.clone();
    b.set_completion_hook(Some(Box::new(move |t, c: &Completion| {
        sink.borrow_mut().push((t, c.clone()))
    })));
    let mut buf = vec![0u8; 64];
    for i in 0..20u64 {
        // SAFETY: `buf` outlives the receive, and is read only after it finished.
        let op = unsafe { b.tag_recv_raw(buf.as_mut_ptr(), buf.len(), i, EXACT) }.unwrap();
        let Op::Pending(r) = op else {
            panic!("round {i}: a receive without a message finished");
        };
        b.request_into_hook(r, 500 + i).unwrap();
        assert_eq!(
            b.request_count(),
            1,
            "round {i}: the running receive holds a slot"
        );
        let data = pattern(33, i as u8);
        drop(a.tag_send(ab, i, &data).unwrap());
        for _ in 0..1000 {
            if !got.borrow().is_empty() {
                break;
            }
            pump(&mut [&mut a, &mut b], 1);
        }
        assert_eq!(
            b.request_count(),
            0,
            "round {i}: the finished hook slot is held"
        );
        let mut g = got.borrow_mut();
        assert_eq!(g.len(), 1, "round {i}");
        let (token, done) = g.pop().unwrap();
        assert_eq!(token, 500 + i);
        assert_eq!(done.status, Ok(()));
        assert_eq!((done.len, done.tag, done.buf.is_none()), (33, i, true));
        assert_eq!(&buf[..33], &data[..]);
        assert!(
            !b.has_done_tokens(),
            "round {i}: a hook result was also queued"
        );
    }
    // A cancel finishes the request inside the call: the hook has its result when it returns.
    let Op::Pending(r) = b.tag_recv(vec![0; 8], 90, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    let id = b.request_into_hook(r, 7).unwrap();
    assert!(
        b.request_cancel_id(id).unwrap(),
        "a posted receive was not canceled"
    );
    assert!(
        matches!(got.borrow().as_slice(), [(7, d)] if d.status == Err(Error::Canceled)),
        "{:?}",
        got.borrow()
    );
    got.borrow_mut().clear();
    // Finished before the hook is set: queued as a token's, not given to the hook.
    let Op::Pending(r) = b.tag_recv(vec![0; 64], 77, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    drop(a.tag_send(ab, 77, b"late hook").unwrap());
    for _ in 0..1000 {
        if b.request_test(&r).unwrap() {
            break;
        }
        pump(&mut [&mut a, &mut b], 1);
    }
    assert!(b.request_test(&r).unwrap(), "the receive did not finish");
    b.request_into_hook(r, 8).unwrap();
    assert!(
        got.borrow().is_empty(),
        "the hook ran inside request_into_hook"
    );
    let mut out = Vec::new();
    b.take_done_tokens(&mut out);
    assert!(matches!(out.as_slice(), [(8, d)] if d.len == 9), "{out:?}");
    // Without a hook, hook requests queue as token requests do.
    b.set_completion_hook(None);
    let Op::Pending(r) = b.tag_recv(vec![0; 64], 78, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    b.request_into_hook(r, 9).unwrap();
    drop(a.tag_send(ab, 78, b"no hook").unwrap());
    for _ in 0..1000 {
        if b.has_done_tokens() {
            break;
        }
        pump(&mut [&mut a, &mut b], 1);
    }
    out.clear();
    b.take_done_tokens(&mut out);
    assert!(matches!(out.as_slice(), [(9, d)] if d.len == 7), "{out:?}");
    assert!(got.borrow().is_empty());
    // Another worker's request is refused and left running on its own worker.
    let Op::Pending(r) = b.tag_recv(vec![0; 8], 79, EXACT).unwrap() else {
        panic!("a receive without a message finished");
    };
    assert!(is_invalid(c.request_into_hook(r, 10)));
    assert!(!c.has_done_tokens());
}
