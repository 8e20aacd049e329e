//! Messages taken by a removing probe and dropped without being received: the worker discards
//! them (their data is released and their senders finish), from any thread; another worker's
//! message is refused.

use std::time::Duration;
use ucp::{
    Completion, Context, ContextParams, EpHandle, EpParams, Error, Features, Op, UcpConfig, Worker,
    TAG_MASK_EXACT,
};
use ucs::time::ManualClock;

const EXACT: u64 = TAG_MASK_EXACT;
/// Rendezvous above this size.
const RNDV: usize = 64 << 10;

fn worker(clock: &ManualClock) -> Worker {
    worker_with(clock, RNDV)
}

fn worker_with(clock: &ManualClock, rndv_thresh: usize) -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: vec!["self".into()],
            rndv_thresh: Some(rndv_thresh),
            keepalive_interval: Some(Duration::from_millis(100)),
            keepalive_timeout: Duration::from_secs(1),
            ..Default::default()
        }),
    })
    .expect("context");
    Worker::with_clock(&ctx, clock.clone()).expect("worker")
}

struct Pair {
    a: Worker,
    b: Worker,
    ab: EpHandle,
}

fn pair(clock: &ManualClock) -> Pair {
    pair_with(clock, RNDV)
}

fn pair_with(clock: &ManualClock, rndv_thresh: usize) -> Pair {
    let mut a = worker_with(clock, rndv_thresh);
    let b = worker_with(clock, rndv_thresh);
    let ab = a.ep_create(b.address(), EpParams::default()).expect("ep");
    let mut p = Pair { a, b, ab };
    p.pump(4);
    p
}

impl Pair {
    fn pump(&mut self, n: usize) {
        for _ in 0..n {
            self.a.progress();
            self.b.progress();
        }
    }

    /// Progresses both workers until `op` (of `a`) finishes (bounded).
    fn finish_a(&mut self, op: Op) -> Completion {
        let mut req = match op {
            Op::Done(c) => return c,
            Op::Pending(r) => r,
        };
        for _ in 0..1_000_000 {
            match self.a.request_take(req) {
                Ok(c) => return c,
                Err(r) => req = r,
            }
            self.pump(1);
        }
        panic!("request did not finish");
    }

    /// Takes the unexpected message `tag` off b's queue with a removing probe (bounded wait).
    fn probe_remove(&mut self, tag: u64) -> ucp::ProbeInfo {
        for _ in 0..1_000_000 {
            if let Some(i) = self.b.tag_probe(tag, EXACT, true) {
                return i;
            }
            self.pump(1);
        }
        panic!("message {tag} did not arrive");
    }
}

#[test]
fn dropped_probed_messages_release_their_data_and_their_senders_finish() {
    let clock = ManualClock::new();
    let mut p = pair(&clock);
    let sizes = [8usize, 1000, 20_000, RNDV * 2];
    for round in 0..200u64 {
        let len = sizes[round as usize % sizes.len()];
        let data = vec![round as u8; len];
        // A synchronous send finishes only once the receiver took the message.
        let s = if round % 2 == 0 {
            p.a.tag_send_sync(p.ab, round, &data).unwrap()
        } else {
            p.a.tag_send(p.ab, round, &data).unwrap()
        };
        let info = p.probe_remove(round);
        assert_eq!(info.len, len);
        drop(info.msg.expect("a removing probe gives the message"));
        let c = p.finish_a(s);
        assert_eq!(c.status, Ok(()), "round {round}: {len} bytes");
        assert!(p.b.tag_probe(round, EXACT, false).is_none());
    }
    p.pump(2 * 16);
    assert_eq!(p.b.unexpected_count(), 0, "no message data is held");
    assert_eq!(p.b.request_count(), 0, "no receive is left running");
}

#[test]
fn a_message_dropped_on_another_thread_is_discarded_by_its_worker() {
    let clock = ManualClock::new();
    let mut p = pair(&clock);
    let s = p.a.tag_send_sync(p.ab, 3, b"elsewhere").unwrap();
    let msg = p.probe_remove(3).msg.unwrap();
    assert_eq!(
        p.b.unexpected_count(),
        1,
        "the probed message holds its data"
    );
    std::thread::spawn(move || drop(msg)).join().unwrap();
    // Discarded at a progress call that reads the clock (one in 16), without any probe.
    let c = p.finish_a(s);
    assert_eq!(c.status, Ok(()));
    assert_eq!(p.b.unexpected_count(), 0);
}

#[test]
fn another_workers_message_is_refused_and_goes_back_to_its_worker() {
    let clock = ManualClock::new();
    let mut p = pair(&clock);
    let mut other = worker(&clock);
    for raw in [false, true] {
        let s = p.a.tag_send_sync(p.ab, 9, b"not yours").unwrap();
        let msg = p.probe_remove(9).msg.unwrap();
        let mut buf = [0u8; 16];
        let r = if raw {
            // SAFETY: `buf` outlives the call, which refuses the message without using it.
            unsafe { other.tag_msg_recv_raw(buf.as_mut_ptr(), buf.len(), msg) }
        } else {
            other.tag_msg_recv(vec![0; 16], msg)
        };
        assert!(matches!(r, Err(Error::InvalidParam(_))), "{r:?}");
        assert_eq!(buf, [0; 16], "nothing was written");
        assert_eq!(other.request_count(), 0);
        // Its own worker discards it: the synchronous sender finishes.
        assert_eq!(p.finish_a(s).status, Ok(()));
        assert_eq!(p.b.unexpected_count(), 0);
    }
}

#[test]
fn a_received_probed_message_is_not_discarded_again() {
    let clock = ManualClock::new();
    let mut p = pair(&clock);
    let s = p.a.tag_send(p.ab, 4, b"kept").unwrap();
    p.finish_a(s);
    let msg = p.probe_remove(4).msg.unwrap();
    let s = p.a.tag_send(p.ab, 4, b"next").unwrap();
    p.finish_a(s);
    let c = match p.b.tag_msg_recv(vec![0; 8], msg).unwrap() {
        Op::Done(c) => c,
        Op::Pending(_) => panic!("a whole eager message is received at once"),
    };
    assert_eq!(&c.buf.unwrap()[..c.len], b"kept");
    // The next message with the tag is still there, untouched by any discard.
    p.pump(2 * 16);
    let info = p.b.tag_probe(4, EXACT, false).expect("the next message");
    assert_eq!(info.len, 4);
    assert_eq!(p.b.unexpected_count(), 1);
}

/// A probed message still arriving when the endpoint it comes from is torn down (closed by
/// force here; a failed peer is torn down alike): receiving it gives `PeerFailure`, dropping
/// it discards it, and in both cases the worker keeps nothing of it.
#[test]
fn a_probed_message_whose_endpoint_goes_before_it_is_complete() {
    for receive in [true, false] {
        let clock = ManualClock::new();
        let mut p = pair_with(&clock, usize::MAX);
        // Multi-fragment eager, larger than the transport queue: a sends the rest only when it
        // progresses, which it does not do again.
        let len = 16 << 20;
        let s = p.a.tag_send(p.ab, 5, &vec![5u8; len]).unwrap();
        p.b.progress();
        let info =
            p.b.tag_probe(5, EXACT, true)
                .expect("the first fragment arrived");
        assert_eq!(info.len, len);
        let msg = info.msg.unwrap();
        let addr = p.a.address().to_vec();
        let ba = p.b.ep_create(&addr, EpParams::default()).unwrap();
        drop(p.b.ep_close_nb(ba, ucp::CloseMode::Force).unwrap());
        p.pump(2 * 16);
        if receive {
            let r = p.b.tag_msg_recv(vec![0; len], msg).map(|op| match op {
                Op::Done(c) => (c.status, c.len),
                Op::Pending(_) => (Ok(()), usize::MAX),
            });
            assert!(matches!(r, Err(Error::PeerFailure(_))), "{r:?}");
        } else {
            drop(msg);
            p.b.tag_probe(5, EXACT, false);
        }
        assert_eq!(p.b.unexpected_count(), 0, "nothing of it is held");
        assert_eq!(p.b.request_count(), 0);
        drop(s);
    }
}
