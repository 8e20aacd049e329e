//! Unexpected eager messages left in the shared-memory FIFO's receive buffers: two workers of
//! one process over posix. More messages wait than the FIFO has spare buffers (the rest are
//! copied out), they are received out of arrival order (buffers return to the spares in any
//! order), through every way of receiving a waiting message (at once, into raw memory, by a
//! probed message handle, truncated), and the pair keeps working through several rounds, so
//! spares come back and no kept message is overwritten by later traffic.

use ucp::{
    Completion, Context, ContextParams, EpHandle, EpParams, Error, Features, Op, UcpConfig, Worker,
    TAG_MASK_EXACT,
};
use uct::mm::fifo::{NELEMS, SPARE_BUFS};

const EXACT: u64 = TAG_MASK_EXACT;

struct Pair {
    a: Worker,
    b: Worker,
    ab: EpHandle,
}

fn pair() -> Pair {
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
    let mut a = Worker::new(&ctx).expect("worker a");
    let b = Worker::new(&ctx).expect("worker b");
    let ab = a.ep_create(b.address(), EpParams::default()).expect("ep");
    Pair { a, b, ab }
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u64)
                .wrapping_mul(131)
                .wrapping_add(seed.wrapping_mul(7)) as u8
        })
        .collect()
}

fn done(op: Op) -> Completion {
    match op {
        Op::Done(c) => c,
        Op::Pending(_) => panic!("a waiting whole eager message must finish the receive at once"),
    }
}

impl Pair {
    /// Sends `data` with `tag` and progresses both workers until it waits unexpected at B.
    fn send_unexpected(&mut self, tag: u64, data: &[u8]) {
        let s = self.a.tag_send(self.ab, tag, data).expect("send");
        let mut pending = match s {
            Op::Done(c) => {
                assert_eq!(c.status, Ok(()));
                None
            }
            Op::Pending(r) => Some(r),
        };
        for _ in 0..1_000_000 {
            if let Some(r) = pending.take() {
                match self.a.request_take(r) {
                    Ok(c) => assert_eq!(c.status, Ok(())),
                    Err(r) => pending = Some(r),
                }
            }
            if pending.is_none() && self.b.tag_probe(tag, EXACT, false).is_some() {
                return;
            }
            self.a.progress();
            self.b.progress();
        }
        panic!("message {tag} never arrived unexpected");
    }

    fn finish_b(&mut self, op: Op) -> Completion {
        self.finish(op, false)
    }

    /// Progresses both workers until `op` of worker A (`on_a`) or B finishes.
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
}

#[test]
fn more_waiting_messages_than_spare_buffers_all_arrive_intact() {
    let mut p = pair();
    let count = (SPARE_BUFS + 40) as u64;
    let sizes = [49usize, 1000, 4096, 8000];
    for round in 0..3u64 {
        let base = round * 1000;
        for i in 0..count {
            let len = sizes[i as usize % sizes.len()];
            p.send_unexpected(base + i, &pattern(len, base + i));
        }
        // Later traffic through every FIFO element while the messages wait: none may land in
        // a kept buffer.
        for i in 0..NELEMS {
            let tag = 1 << 40 | i;
            let data = pattern(4096, tag);
            let r = p.b.tag_recv(vec![0; 4096], tag, EXACT).expect("recv");
            let s = p.a.tag_send(p.ab, tag, &data).expect("send");
            let c = p.finish_b(r);
            assert_eq!(p.finish(s, true).status, Ok(()));
            assert_eq!(c.status, Ok(()));
            assert_eq!(c.buf.expect("buffer"), data);
        }
        // Out of arrival order: odd tags from the last down, then even tags up.
        let order: Vec<u64> = (0..count)
            .rev()
            .filter(|i| i % 2 == 1)
            .chain((0..count).filter(|i| i % 2 == 0))
            .collect();
        for i in order {
            let tag = base + i;
            let len = sizes[i as usize % sizes.len()];
            let c = done(p.b.tag_recv(vec![0xEE; len + 2], tag, EXACT).expect("recv"));
            assert_eq!(c.status, Ok(()), "message {tag}");
            assert_eq!((c.len, c.tag), (len, tag));
            let buf = c.buf.expect("buffer back");
            assert_eq!(&buf[..len], &pattern(len, tag)[..], "message {tag} changed");
            assert_eq!(&buf[len..], &[0xEE; 2]);
        }
        assert!(p.b.tag_probe(0, 0, false).is_none(), "queue empty again");
    }
}

#[test]
fn kept_message_received_truncated_raw_and_by_probe() {
    let mut p = pair();
    let data = pattern(4096, 3);
    for tag in 1..=4u64 {
        p.send_unexpected(tag, &data);
    }
    let c = done(p.b.tag_recv(vec![0; 1000], 1, EXACT).expect("recv"));
    assert_eq!(
        c.status,
        Err(Error::Truncated {
            len: 4096,
            capacity: 1000
        })
    );
    assert_eq!(c.buf.expect("buffer"), data[..1000].to_vec());

    let mut mem = vec![0u8; 4096];
    // SAFETY: `mem` outlives the receive, which finishes at once.
    let op = unsafe { p.b.tag_recv_raw(mem.as_mut_ptr(), mem.len(), 2, EXACT) }.expect("recv");
    let c = done(op);
    assert_eq!((c.status, c.len), (Ok(()), 4096));
    assert_eq!(mem, data);

    let info = p.b.tag_probe(3, EXACT, true).expect("probe");
    assert_eq!((info.tag, info.len), (3, 4096));
    let c = done(
        p.b.tag_msg_recv(vec![0; 4096], info.msg.expect("removed"))
            .expect("recv"),
    );
    assert_eq!(c.status, Ok(()));
    assert_eq!(c.buf.expect("buffer"), data);

    // Through a request: a probed message received into raw memory.
    let msg =
        p.b.tag_probe(4, EXACT, true)
            .expect("probe")
            .msg
            .expect("removed");
    let mut mem = vec![0u8; 4096];
    // SAFETY: `mem` outlives the receive, finished below before `mem` is read or dropped.
    let op = unsafe { p.b.tag_msg_recv_raw(mem.as_mut_ptr(), mem.len(), msg) }.expect("recv");
    let c = p.finish_b(op);
    assert_eq!((c.status, c.len, c.tag), (Ok(()), 4096, 4));
    assert_eq!(mem, data);
}

#[test]
fn worker_with_kept_messages_closes_cleanly() {
    let mut p = pair();
    for tag in 0..(SPARE_BUFS as u64 / 2) {
        p.send_unexpected(tag, &pattern(4096, tag));
    }
    // Receiving one still works; the rest are dropped with the worker (their buffers with
    // the FIFO segment that outlives the interface while they are kept).
    let c = done(p.b.tag_recv(vec![0; 4096], 5, EXACT).expect("recv"));
    assert_eq!(c.buf.expect("buffer"), pattern(4096, 5));
    let Pair { a, b, ab: _ } = p;
    drop(b);
    drop(a);
}
