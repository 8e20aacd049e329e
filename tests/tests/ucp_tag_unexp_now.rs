//! A receive posted for a message that is already waiting: two workers of one process over real
//! shared memory (posix). A whole eager message finishes the receive at once (`Op::Done`, no
//! request left in the worker), with its data, length and tag, truncation, the synchronous
//! send's acknowledgement, wildcard order, raw buffers and probed messages; messages that are
//! not whole eager ones (fragments, rendezvous) still complete through a request.

use ucp::{
    Completion, Context, ContextParams, EpHandle, EpParams, Error, Features, Op, UcpConfig, Worker,
    TAG_MASK_EXACT,
};

const EXACT: u64 = TAG_MASK_EXACT;

struct Pair {
    a: Worker,
    b: Worker,
    ab: EpHandle,
}

fn pair(tls: &str) -> Pair {
    let cfg = UcpConfig {
        tls: vec![tls.into()],
        keepalive_interval: None,
        self_across_workers: false,
        rndv_thresh: Some(16 << 10),
        ..Default::default()
    };
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(cfg),
    })
    .expect("context");
    let mut a = Worker::new(&ctx).expect("worker a");
    let b = Worker::new(&ctx).expect("worker b");
    let ab = a.ep_create(b.address(), EpParams::default()).expect("ep");
    Pair { a, b, ab }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

impl Pair {
    /// Progresses both workers until a message for `tag` under `mask` waits unexpected at B.
    fn wait_unexpected(&mut self, tag: u64, mask: u64) {
        for _ in 0..1_000_000 {
            if self.b.tag_probe(tag, mask, false).is_some() {
                return;
            }
            self.a.progress();
            self.b.progress();
        }
        panic!("message never arrived unexpected");
    }

    /// Progresses both workers until `op` finishes (bounded: a stuck protocol fails the test).
    fn finish(&mut self, op: Op, on_a: bool) -> Completion {
        let mut req = match op {
            Op::Done(c) => return c,
            Op::Pending(r) => r,
        };
        for _ in 0..1_000_000 {
            let w = if on_a { &mut self.a } else { &mut self.b };
            match w.request_take(req) {
                Ok(c) => return c,
                Err(r) => req = r,
            }
            self.a.progress();
            self.b.progress();
        }
        panic!("request did not finish");
    }

    fn send(&mut self, tag: u64, data: &[u8]) {
        let s = self.a.tag_send(self.ab, tag, data).expect("send");
        let c = self.finish(s, true);
        assert_eq!(c.status, Ok(()));
    }
}

fn done(op: Op) -> Completion {
    match op {
        Op::Done(c) => c,
        Op::Pending(_) => panic!("a waiting whole eager message must finish the receive at once"),
    }
}

#[test]
fn waiting_eager_message_finishes_the_receive_at_once() {
    let mut p = pair("posix");
    for (i, len) in [0usize, 1, 8, 47, 48, 49, 64, 1000, 4000]
        .into_iter()
        .enumerate()
    {
        let tag = 0x100 + i as u64;
        let data = pattern(len, i as u8);
        p.send(tag, &data);
        p.wait_unexpected(tag, EXACT);
        let before = p.b.request_count();
        let c = done(p.b.tag_recv(vec![0xEE; len + 3], tag, EXACT).expect("recv"));
        assert_eq!(p.b.request_count(), before, "no request for {len} bytes");
        assert_eq!(c.status, Ok(()));
        assert_eq!((c.len, c.tag), (len, tag));
        let buf = c.buf.expect("buffer back");
        assert_eq!(buf.len(), len + 3);
        assert_eq!(&buf[..len], &data[..]);
        assert_eq!(&buf[len..], &[0xEE; 3], "bytes past the message untouched");
        assert!(p.b.tag_probe(0, 0, false).is_none(), "queue empty again");
    }
}

#[test]
fn waiting_message_larger_than_the_buffer_is_truncated() {
    let mut p = pair("posix");
    let data = pattern(100, 7);
    p.send(5, &data);
    p.wait_unexpected(5, EXACT);
    let c = done(p.b.tag_recv(vec![0; 40], 5, EXACT).expect("recv"));
    assert_eq!(
        c.status,
        Err(Error::Truncated {
            len: 100,
            capacity: 40
        })
    );
    assert_eq!(c.len, 100);
    assert_eq!(c.buf.expect("buffer back"), data[..40].to_vec());
    // The pair keeps working.
    p.send(6, &data);
    let c = p.b.tag_recv(vec![0; 100], 6, EXACT).expect("recv");
    let c = p.finish(c, false);
    assert_eq!(c.status, Ok(()));
    assert_eq!(c.buf.expect("buffer"), data);
}

#[test]
fn sync_send_completes_once_the_waiting_message_is_received() {
    let mut p = pair("posix");
    let data = pattern(16, 3);
    let s = p.a.tag_send_sync(p.ab, 9, &data).expect("send");
    let Op::Pending(mut sreq) = s else {
        panic!("a synchronous send waits for the match")
    };
    p.wait_unexpected(9, EXACT);
    for _ in 0..1000 {
        p.a.progress();
        p.b.progress();
    }
    sreq = p.a.request_take(sreq).expect_err("not matched yet");
    let c = done(p.b.tag_recv(vec![0; 16], 9, EXACT).expect("recv"));
    assert_eq!(c.status, Ok(()));
    assert_eq!(c.buf.expect("buffer"), data);
    let sc = p.finish(Op::Pending(sreq), true);
    assert_eq!(sc.status, Ok(()));
}

#[test]
fn wildcard_takes_the_earliest_waiting_message() {
    let mut p = pair("posix");
    for tag in [0x21u64, 0x12, 0x23] {
        p.send(tag, &tag.to_le_bytes());
    }
    // All three are waiting once the last one is.
    p.wait_unexpected(0x23, EXACT);
    let c = done(p.b.tag_recv(vec![0; 8], 0x20, 0xF0).expect("recv"));
    assert_eq!(c.tag, 0x21);
    let c = done(p.b.tag_recv(vec![0; 8], 0, 0).expect("recv"));
    assert_eq!(c.tag, 0x12);
    assert_eq!(c.buf.expect("buffer"), 0x12u64.to_le_bytes().to_vec());
    let c = done(p.b.tag_recv(vec![0; 8], 0x23, EXACT).expect("recv"));
    assert_eq!(c.tag, 0x23);
    // Nothing is waiting: the next receive is queued and gets the next message.
    let r = p.b.tag_recv(vec![0; 8], 0, 0).expect("recv");
    assert!(matches!(r, Op::Pending(_)));
    p.send(0x77, &[1; 8]);
    let c = p.finish(r, false);
    assert_eq!((c.status, c.tag), (Ok(()), 0x77));
}

#[test]
fn raw_receive_and_probed_message_finish_at_once() {
    let mut p = pair("posix");
    let data = pattern(24, 9);
    p.send(1, &data);
    p.wait_unexpected(1, EXACT);
    let mut mem = vec![0u8; 32];
    // SAFETY: `mem` outlives the receive, which finishes at once.
    let op = unsafe { p.b.tag_recv_raw(mem.as_mut_ptr(), mem.len(), 1, EXACT) }.expect("recv");
    let c = done(op);
    assert_eq!((c.status, c.len, c.buf), (Ok(()), 24, None));
    assert_eq!(&mem[..24], &data[..]);
    assert_eq!(&mem[24..], &[0; 8]);

    p.send(2, &data);
    p.wait_unexpected(2, EXACT);
    let info = p.b.tag_probe(2, EXACT, true).expect("probe");
    assert_eq!((info.tag, info.len), (2, 24));
    let msg = info.msg.expect("removed");
    assert!(p.b.tag_probe(2, EXACT, false).is_none());
    let c = done(p.b.tag_msg_recv(vec![0; 24], msg).expect("recv"));
    assert_eq!(c.status, Ok(()));
    assert_eq!((c.len, c.tag), (24, 2));
    assert_eq!(c.buf.expect("buffer"), data);

    // A probed message received into raw memory goes through a request.
    p.send(3, &data);
    p.wait_unexpected(3, EXACT);
    let msg =
        p.b.tag_probe(3, EXACT, true)
            .expect("probe")
            .msg
            .expect("removed");
    let mut mem = vec![0u8; 20];
    // SAFETY: `mem` outlives the receive, finished below before `mem` is read or dropped.
    let op = unsafe { p.b.tag_msg_recv_raw(mem.as_mut_ptr(), mem.len(), msg) }.expect("recv");
    let c = p.finish(op, false);
    assert_eq!(
        c.status,
        Err(Error::Truncated {
            len: 24,
            capacity: 20
        })
    );
    assert_eq!((c.len, c.tag, c.buf), (24, 3, None));
    assert_eq!(&mem[..], &data[..20]);
}

#[test]
fn waiting_fragments_and_rendezvous_still_complete_through_a_request() {
    let mut p = pair("posix");
    // Several fragments (above one FIFO element) and a rendezvous (above the threshold).
    for (tag, len) in [(3u64, 12_000usize), (4, 40_000)] {
        let data = pattern(len, tag as u8);
        let s = p.a.tag_send(p.ab, tag, &data).expect("send");
        p.wait_unexpected(tag, EXACT);
        let r = p.b.tag_recv(vec![0; len], tag, EXACT).expect("recv");
        let c = p.finish(r, false);
        assert_eq!(c.status, Ok(()), "{len} bytes");
        assert_eq!((c.len, c.tag), (len, tag));
        assert!(c.buf.expect("buffer") == data, "{len} bytes differ");
        let sc = p.finish(s, true);
        assert_eq!(sc.status, Ok(()));
    }
    assert_eq!(p.b.request_count(), 0);
}

#[test]
fn messages_from_two_senders_alternating_keep_their_order() {
    let mut p = pair("posix");
    let ctx_b_addr = p.b.address().to_vec();
    // A second sender worker on another context, interleaved with the first.
    let cfg = UcpConfig {
        tls: vec!["posix".into()],
        keepalive_interval: None,
        self_across_workers: false,
        ..Default::default()
    };
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(cfg),
    })
    .expect("context");
    let mut c = Worker::new(&ctx).expect("worker c");
    let cb = c.ep_create(&ctx_b_addr, EpParams::default()).expect("ep");
    let mut expect = Vec::new();
    for i in 0..40u64 {
        let tag = 0x500 + i;
        if i.is_multiple_of(3) {
            let op = c.tag_send(cb, tag, &tag.to_le_bytes()).expect("send c");
            assert!(matches!(op, Op::Done(_)), "small send finishes at once");
        } else {
            p.send(tag, &tag.to_le_bytes());
        }
        expect.push(tag);
        // Half of them are posted first, half arrive unexpected.
        if i.is_multiple_of(2) {
            let r = p.b.tag_recv(vec![0; 8], tag, EXACT).expect("recv");
            let mut r = match r {
                Op::Done(_) => panic!("posted before the send"),
                Op::Pending(r) => r,
            };
            let got = loop {
                c.progress();
                match p.b.request_take(r) {
                    Ok(got) => break got,
                    Err(back) => r = back,
                }
                p.a.progress();
                p.b.progress();
            };
            assert_eq!((got.status, got.tag), (Ok(()), tag));
            expect.pop();
        }
    }
    // The rest are received by wildcard: each sender's messages in its send order (most
    // already wait unexpected, the others are posted for).
    let mut got_tags = Vec::new();
    for _ in 0..expect.len() {
        c.progress();
        let r = p.b.tag_recv(vec![0; 8], 0, 0).expect("recv");
        let got = match r {
            Op::Done(got) => got,
            Op::Pending(mut r) => loop {
                c.progress();
                p.a.progress();
                p.b.progress();
                match p.b.request_take(r) {
                    Ok(got) => break got,
                    Err(back) => r = back,
                }
            },
        };
        assert_eq!(got.status, Ok(()));
        assert_eq!(got.buf.expect("buffer"), got.tag.to_le_bytes().to_vec());
        got_tags.push(got.tag);
    }
    let from_c = |t: &u64| (t - 0x500).is_multiple_of(3);
    let seq =
        |v: &[u64], c: bool| -> Vec<u64> { v.iter().copied().filter(|t| from_c(t) == c).collect() };
    assert_eq!(seq(&got_tags, true), seq(&expect, true), "sender C's order");
    assert_eq!(
        seq(&got_tags, false),
        seq(&expect, false),
        "sender A's order"
    );
    assert_eq!(p.b.request_count(), 0);
}
