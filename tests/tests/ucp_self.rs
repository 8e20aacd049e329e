//! Deterministic two-worker ucp tests in one process over the self transport, with a fake clock.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use ucp::config::RndvSchemeCfg;
use ucp::{
    CloseMode, Completion, Context, ContextParams, EpHandle, EpParams, Error, Features, Op,
    UcpConfig, Worker, TAG_MASK_EXACT,
};
use ucs::time::ManualClock;

const EXACT: u64 = TAG_MASK_EXACT;

/// Active messages a handler received: (user header, data).
type Inbox = Rc<RefCell<Vec<(Vec<u8>, Vec<u8>)>>>;

fn cfg() -> UcpConfig {
    UcpConfig {
        tls: vec!["self".into()],
        keepalive_interval: Some(Duration::from_millis(100)),
        keepalive_timeout: Duration::from_secs(1),
        ..Default::default()
    }
}

fn worker(cfg: UcpConfig, clock: &ManualClock) -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG | Features::WAKEUP,
        config: Some(cfg),
    })
    .expect("context");
    Worker::with_clock(&ctx, clock.clone()).expect("worker")
}

struct Pair {
    clock: ManualClock,
    a: Worker,
    b: Worker,
    ab: EpHandle,
}

fn pair_with(cfg: UcpConfig) -> Pair {
    let clock = ManualClock::new();
    let mut a = worker(cfg.clone(), &clock);
    let b = worker(cfg, &clock);
    let ab = a.ep_create(b.address(), EpParams::default()).expect("ep");
    let mut p = Pair { clock, a, b, ab };
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
    /// Progresses both workers until `op` finishes (bounded: a stuck protocol fails the test).
    fn finish_a(&mut self, op: Op) -> Completion {
        finish(&mut self.a, &mut self.b, op)
    }
    fn finish_b(&mut self, op: Op) -> Completion {
        finish(&mut self.b, &mut self.a, op)
    }
    fn ba(&mut self) -> EpHandle {
        let addr = self.a.address().to_vec();
        self.b
            .ep_create(&addr, EpParams::default())
            .expect("reverse ep")
    }
}

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

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn send_recv(p: &mut Pair, len: usize, tag: u64) {
    let data = pattern(len, tag as u8);
    let r = p.b.tag_recv(vec![0; len], tag, EXACT).unwrap();
    let s = p.a.tag_send(p.ab, tag, &data).unwrap();
    let sc = p.finish_a(s);
    assert_eq!(sc.status, Ok(()), "send {len}");
    let rc = p.finish_b(r);
    assert_eq!(rc.status, Ok(()), "recv {len}");
    assert_eq!(rc.len, len);
    assert_eq!(rc.tag, tag);
    assert!(rc.buf.unwrap() == data, "data of {len} bytes differ");
}

#[test]
fn ucp_self_eager_rndv_crossover_all_boundaries() {
    for scheme in [RndvSchemeCfg::Auto, RndvSchemeCfg::Put, RndvSchemeCfg::Am] {
        let mut p = pair_with(UcpConfig {
            rndv_thresh: Some(20_000),
            rndv_scheme: scheme,
            ..cfg()
        });
        let pc = p.a.ep_proto_config(p.ab).unwrap();
        assert_eq!(pc.rndv_thresh, 20_000);
        let mut sizes = vec![0, 1, pc.bcopy_single_max, pc.first_frag, 3 * pc.middle_frag];
        if let Some(s) = pc.short_max {
            sizes.push(s);
        }
        sizes.push(pc.rndv_thresh);
        sizes.push(1 << 20);
        let mut all = Vec::new();
        for s in sizes {
            all.extend([s.saturating_sub(1), s, s + 1]);
        }
        all.sort_unstable();
        all.dedup();
        let n_rndv = all.iter().filter(|&&l| l >= pc.rndv_thresh).count() as u64;
        for (i, len) in all.into_iter().enumerate() {
            send_recv(&mut p, len, i as u64);
        }
        let (sa, sb) = (p.a.stats(), p.b.stats());
        assert!(
            sa.eager_single > 0 && sa.eager_multi > 0 && sa.rndv_rts == n_rndv,
            "{sa:?}"
        );
        let by_scheme = match scheme {
            RndvSchemeCfg::Auto | RndvSchemeCfg::Get => sb.rndv_get,
            RndvSchemeCfg::Put => sb.rndv_put,
            RndvSchemeCfg::Am => sb.rndv_am,
        };
        assert_eq!(by_scheme, n_rndv, "{scheme:?}: {sb:?}");
    }
}

#[test]
fn ucp_self_unexpected_then_posted_keeps_send_order() {
    let mut p = pair_with(UcpConfig {
        rndv_thresh: Some(50_000),
        ..cfg()
    });
    let pc = p.a.ep_proto_config(p.ab).unwrap();
    // Mixed protocols to one tag: eager, multi-fragment, rendezvous, eager.
    let lens = [10, pc.first_frag * 2 + 5, 200_000, 3];
    let mut sends = Vec::new();
    for (i, &l) in lens.iter().enumerate() {
        sends.push(p.a.tag_send(p.ab, 7, &pattern(l, i as u8)).unwrap());
    }
    p.pump(50);
    assert!(p.b.tag_probe(7, EXACT, false).is_some());
    for (i, &l) in lens.iter().enumerate() {
        let r = p.b.tag_recv(vec![0; 300_000], 7, EXACT).unwrap();
        let c = p.finish_b(r);
        assert_eq!(c.status, Ok(()));
        assert_eq!(c.len, l, "message {i} out of order");
        assert!(c.buf.unwrap()[..l] == pattern(l, i as u8)[..]);
    }
    for s in sends {
        assert_eq!(p.finish_a(s).status, Ok(()));
    }
}

#[test]
fn ucp_self_multi_fragment_reassembly_when_posted_midway() {
    let mut p = pair_with(UcpConfig {
        rndv_thresh: Some(usize::MAX),
        ..cfg()
    });
    let pc = p.a.ep_proto_config(p.ab).unwrap();
    let len = pc.first_frag + 40 * pc.middle_frag + 17;
    let data = pattern(len, 9);
    let s = p.a.tag_send(p.ab, 1, &data).unwrap();
    // Let a few fragments arrive unexpected, then post the receive.
    p.b.progress();
    let r = p.b.tag_recv(vec![0; len], 1, EXACT).unwrap();
    let c = p.finish_b(r);
    assert_eq!(c.status, Ok(()));
    assert!(c.buf.unwrap() == data);
    assert_eq!(p.finish_a(s).status, Ok(()));
}

#[test]
fn ucp_self_sync_send_completes_only_when_matched() {
    for len in [5usize, 30_000, 300_000] {
        let mut p = pair_with(UcpConfig {
            rndv_thresh: Some(100_000),
            ..cfg()
        });
        let mut s = match p.a.tag_send_sync(p.ab, 3, &pattern(len, 1)).unwrap() {
            Op::Pending(r) => r,
            Op::Done(_) => panic!("sync send finished before the receiver matched"),
        };
        for _ in 0..100 {
            p.pump(1);
            assert!(
                !p.a.request_test(&s).unwrap(),
                "sync send of {len} finished unmatched"
            );
        }
        let r = p.b.tag_recv(vec![0; len], 3, EXACT).unwrap();
        let c = p.finish_b(r);
        assert_eq!(c.status, Ok(()));
        loop {
            match p.a.request_take(s) {
                Ok(c) => {
                    assert_eq!(c.status, Ok(()));
                    break;
                }
                Err(r) => s = r,
            }
            p.pump(1);
        }
    }
}

#[test]
fn ucp_self_cancel_returns_buffer_and_message_goes_unexpected() {
    let mut p = pair_with(cfg());
    let r = match p.b.tag_recv(vec![7; 64], 5, EXACT).unwrap() {
        Op::Pending(r) => r,
        Op::Done(_) => panic!("nothing was sent"),
    };
    assert!(p.b.request_cancel(&r).unwrap());
    let c = p.b.request_take(r).expect("canceled request is finished");
    assert_eq!(c.status, Err(Error::Canceled));
    assert_eq!(c.buf, Some(vec![7; 64]));
    let s = p.a.tag_send(p.ab, 5, b"after cancel").unwrap();
    p.finish_a(s);
    p.pump(5);
    let info = p.b.tag_probe(5, EXACT, true).expect("unexpected message");
    assert_eq!(info.len, 12);
    let op = p.b.tag_msg_recv(vec![0; 12], info.msg.unwrap()).unwrap();
    let c = p.finish_b(op);
    assert_eq!(c.buf.unwrap(), b"after cancel");
    assert!(p.b.tag_probe(5, EXACT, false).is_none());
}

#[test]
fn ucp_self_wildcards_match_in_posting_order_and_truncation_reports_length() {
    let mut p = pair_with(cfg());
    let wild = p.b.tag_recv(vec![0; 100], 0, 0).unwrap();
    let exact = p.b.tag_recv(vec![0; 100], 0x42, EXACT).unwrap();
    let small = p.b.tag_recv(vec![0; 4], 0x43, EXACT).unwrap();
    for (tag, body) in [
        (0x42u64, &b"first"[..]),
        (0x42, b"second"),
        (0x43, b"too long"),
    ] {
        let s = p.a.tag_send(p.ab, tag, body).unwrap();
        p.finish_a(s);
    }
    let c = p.finish_b(wild);
    assert_eq!((c.tag, &c.buf.unwrap()[..c.len]), (0x42, &b"first"[..]));
    let c = p.finish_b(exact);
    assert_eq!(&c.buf.unwrap()[..c.len], b"second");
    let c = p.finish_b(small);
    assert_eq!(
        c.status,
        Err(Error::Truncated {
            len: 8,
            capacity: 4
        })
    );
    assert_eq!(c.len, 8);
}

#[test]
fn ucp_self_keepalive_detects_silent_peer_and_fails_requests() {
    let mut p = pair_with(cfg());
    let seen: Rc<RefCell<Vec<Error>>> = Rc::default();
    let s2 = seen.clone();
    let addr = p.b.address().to_vec();
    let ab =
        p.a.ep_create(
            &addr,
            EpParams {
                err_handler: Some(Box::new(move |_, e| s2.borrow_mut().push(e.clone()))),
            },
        )
        .unwrap();
    assert_eq!(ab, p.ab, "one endpoint per peer");
    // A sync send stays outstanding while b is silent.
    let s = p.a.tag_send_sync(ab, 1, b"x").unwrap();
    // Both alive: keepalives flow, nothing fails however long it runs.
    for _ in 0..30 {
        p.clock.advance(Duration::from_millis(100));
        p.pump(ucp::CLOCK_PERIOD as usize);
    }
    assert_eq!(p.a.ep_status(ab), Ok(()));
    // b goes silent: a detects it within the timeout plus one check interval. A worker reads
    // its clock once per `CLOCK_PERIOD` progress calls, so each step gives it that many.
    for _ in 0..12 {
        p.clock.advance(Duration::from_millis(100));
        for _ in 0..ucp::CLOCK_PERIOD {
            p.a.progress();
        }
    }
    let st = p.a.ep_status(ab);
    assert!(matches!(st, Err(Error::Timeout(_))), "{st:?}");
    assert_eq!(seen.borrow().len(), 1);
    let Op::Pending(s) = s else {
        panic!("sync send done")
    };
    let c = p.a.request_take(s).expect("failed request finished");
    assert!(matches!(c.status, Err(Error::Timeout(_))));
    assert!(matches!(p.a.tag_send(ab, 1, b"y"), Err(Error::Timeout(_))));
}

#[test]
fn ucp_self_reply_over_reverse_endpoint_and_close() {
    let mut p = pair_with(cfg());
    let ba = p.ba();
    let r = p.a.tag_recv(vec![0; 5], 9, EXACT).unwrap();
    let s = p.b.tag_send(ba, 9, b"reply").unwrap();
    p.finish_b(s);
    let c = p.finish_a(r);
    assert_eq!(c.buf.unwrap(), b"reply");
    assert!(p.a.ep_proto_info(p.ab).unwrap().contains("self/memory0"));
    // A message sent just before the close is delivered before the close completes.
    let r = p.b.tag_recv(vec![0; 4], 10, EXACT).unwrap();
    let s = p.a.tag_send(p.ab, 10, b"last").unwrap();
    assert!(s.is_done());
    let op = p.a.ep_close_nb(p.ab, CloseMode::Flush).unwrap();
    let Op::Pending(close) = op else {
        panic!("flush-close waits for the peer's acknowledgement")
    };
    assert!(!p.a.request_test(&close).unwrap());
    p.b.progress(); // b handles "last" and CLOSE, and acknowledges
    let c = p.finish_b(r);
    assert_eq!(c.buf.unwrap(), b"last");
    assert!(p.b.ep_status(ba).is_err(), "peer saw the close");
    let c = p.finish_a(Op::Pending(close));
    assert_eq!(c.status, Ok(()));
    assert!(p.a.ep_status(p.ab).is_err(), "handle is stale after close");
}

#[test]
fn ucp_self_malformed_header_fails_only_that_endpoint() {
    use uct::{Endpoint as _, Iface as _};
    let mut p = pair_with(cfg());
    let clock = p.clock.clone();
    let mut c = worker(cfg(), &clock);
    let cb = c.ep_create(p.b.address(), EpParams::default()).unwrap();
    for _ in 0..4 {
        p.pump(1);
        c.progress();
    }
    let a_addr = p.a.address().to_vec();
    let ba = p.b.ep_create(&a_addr, EpParams::default()).unwrap();
    let c_addr = c.address().to_vec();
    let bc = p.b.ep_create(&c_addr, EpParams::default()).unwrap();
    // A raw transport endpoint forges messages to b.
    let baddr = ucp::WorkerAddress::decode(p.b.address()).unwrap();
    let tl = baddr.tls.iter().find(|t| t.tl_name == "self").unwrap();
    let (_md, mut raw) = uct::open("self", "memory0").unwrap();
    let mut rep = raw
        .ep_create_connected(&tl.device_addr, &tl.iface_addr)
        .unwrap();
    // 1. Garbage from an unknown worker: dropped and counted, nothing fails.
    let out = rep
        .am_short_iov(
            ucp::wire::am_id::EAGER_ONLY,
            &[&0xdead_u64.to_le_bytes(), b"zz"],
        )
        .unwrap();
    assert!(out.is_done());
    p.b.progress();
    assert_eq!(p.b.malformed_dropped(), 1);
    // 2. A truncated header claiming to come from a: b fails its endpoint to a only.
    let a_uuid = p.a.uuid().to_le_bytes();
    let out = rep
        .am_short_iov(ucp::wire::am_id::EAGER_FIRST, &[&a_uuid, &[1, 2, 3]])
        .unwrap();
    assert!(out.is_done());
    p.b.progress();
    let st = p.b.ep_status(ba);
    match &st {
        Err(Error::Wire(t)) => assert!(t.contains("eager first header truncated"), "{t}"),
        other => panic!("expected a wire error, got {other:?}"),
    }
    // b keeps serving c.
    let r = p.b.tag_recv(vec![0; 4], 8, EXACT).unwrap();
    let s = c.tag_send(cb, 8, b"still").unwrap();
    let _ = finish(&mut c, &mut p.b, s);
    let got = finish(&mut p.b, &mut c, r);
    assert_eq!(
        got.status,
        Err(Error::Truncated {
            len: 5,
            capacity: 4
        })
    );
    // A fragment of a message never started is a protocol error too.
    let c_uuid = c.uuid().to_le_bytes();
    let frag = ucp::wire::FragHdr { id: 99, offset: 0 }.encode();
    let out = rep
        .am_short_iov(ucp::wire::am_id::EAGER_MIDDLE, &[&c_uuid, &frag, b"x"])
        .unwrap();
    assert!(out.is_done());
    p.b.progress();
    assert!(matches!(p.b.ep_status(bc), Err(Error::Wire(_))));
}

#[test]
fn ucp_self_event_fd_wakeup() {
    let mut p = pair_with(cfg());
    let fd = p.b.efd().unwrap();
    assert!(fd >= 0);
    // Drain everything, then arm: nothing is pending, so arming succeeds.
    p.pump(3);
    let armed = p.b.arm().unwrap();
    assert!(armed);
    let s = p.a.tag_send(p.ab, 1, b"wake").unwrap();
    p.finish_a(s);
    // The message is in b's queue: wait_event returns without sleeping the full timeout, and
    // progress then delivers it.
    p.b.wait_event(Some(Duration::from_secs(30))).unwrap();
    let r = p.b.tag_recv(vec![0; 4], 1, EXACT).unwrap();
    let c = p.finish_b(r);
    assert_eq!(c.buf.unwrap(), b"wake");
}

#[test]
fn ucp_self_active_messages_small_and_rendezvous() {
    for scheme in [RndvSchemeCfg::Auto, RndvSchemeCfg::Put, RndvSchemeCfg::Am] {
        let mut p = pair_with(UcpConfig {
            rndv_scheme: scheme,
            ..cfg()
        });
        let got: Inbox = Rc::default();
        let g = got.clone();
        p.b.am_set_handler(7, move |_, hdr, data| {
            g.borrow_mut().push((hdr.to_vec(), data))
        });
        let sizes = [0usize, 1, 100, 8000, 9000, 300_000];
        for (i, &len) in sizes.iter().enumerate() {
            let op =
                p.a.am_send(p.ab, 7, &[i as u8; 3], &pattern(len, i as u8))
                    .unwrap();
            assert_eq!(p.finish_a(op).status, Ok(()));
        }
        p.pump(20);
        let got = got.borrow();
        assert_eq!(got.len(), sizes.len(), "{scheme:?}");
        for (i, &len) in sizes.iter().enumerate() {
            assert_eq!(got[i].0, vec![i as u8; 3]);
            assert!(got[i].1 == pattern(len, i as u8), "am {len} bytes");
        }
    }
}

#[test]
fn ucp_self_stream_is_ordered_bytes() {
    let mut p = pair_with(cfg());
    let ba = p.ba();
    let mut all = Vec::new();
    for (i, len) in [5usize, 0, 20_000, 1, 70_000].into_iter().enumerate() {
        let d = pattern(len, i as u8);
        all.extend_from_slice(&d);
        let op = p.a.stream_send(p.ab, &d).unwrap();
        assert_eq!(p.finish_a(op).status, Ok(()));
    }
    // Read it back in differently sized pieces.
    let mut got = Vec::new();
    for piece in [3usize, 40_000, 50_003] {
        let op = p.b.stream_recv(ba, vec![0; piece]).unwrap();
        let c = p.finish_b(op);
        assert_eq!(c.status, Ok(()));
        assert_eq!(c.len, piece);
        got.extend_from_slice(&c.buf.unwrap());
    }
    assert!(got == all);
    assert_eq!(p.b.stream_available(ba).unwrap(), 0);
}

#[test]
fn ucp_self_rma_put_get_flush_and_atomics() {
    use ucp::AmoSize;
    use uct::AtomicOp;
    let mut p = pair_with(cfg());
    let map = p.b.mem_map(1 << 20).unwrap();
    let rkey = p.a.rkey_unpack(p.ab, map.rkey_packed()).unwrap();
    let base = map.address();
    let data = pattern(300_000, 3);
    let op = p.a.put(p.ab, &data, base + 100, &rkey).unwrap();
    assert_eq!(p.finish_a(op).status, Ok(()));
    let op = p.a.ep_flush(p.ab).unwrap();
    assert_eq!(p.finish_a(op).status, Ok(()));
    let mut local = vec![0; data.len()];
    map.read(100, &mut local).unwrap();
    assert!(local == data, "put landed");
    let op = p.a.get(p.ab, vec![0; 5000], base + 1000, &rkey).unwrap();
    let c = p.finish_a(op);
    assert_eq!(c.buf.unwrap(), data[900..5900].to_vec());
    // Out of the mapping: typed error, nothing sent.
    assert!(matches!(
        p.a.put(p.ab, &[1; 16], base + (1 << 20) - 8, &rkey),
        Err(Error::RemoteAccess(_))
    ));
    // Atomics on an 8-byte word at offset 0 and a 4-byte word at offset 8.
    map.write(0, &[0; 16]).unwrap();
    let op =
        p.a.atomic_post(p.ab, AtomicOp::Add, AmoSize::U64, 5, base, &rkey)
            .unwrap();
    p.finish_a(op);
    let op =
        p.a.atomic_fetch(p.ab, AtomicOp::Add, AmoSize::U64, 7, base, &rkey)
            .unwrap();
    assert_eq!(p.finish_a(op).value, 5);
    let op =
        p.a.atomic_cswap(p.ab, AmoSize::U64, 12, 100, base, &rkey)
            .unwrap();
    assert_eq!(p.finish_a(op).value, 12);
    let op =
        p.a.atomic_fetch(p.ab, AtomicOp::Swap, AmoSize::U32, 0xAABB, base + 8, &rkey)
            .unwrap();
    assert_eq!(p.finish_a(op).value, 0);
    let op =
        p.a.atomic_fetch(p.ab, AtomicOp::Xor, AmoSize::U32, 0xFF, base + 8, &rkey)
            .unwrap();
    assert_eq!(p.finish_a(op).value, 0xAABB);
    let mut w = [0u8; 12];
    map.read(0, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w[..8].try_into().unwrap()), 100);
    assert_eq!(u32::from_le_bytes(w[8..].try_into().unwrap()), 0xAA44);
    let (hw, emu) = p.a.atomic_counts();
    assert_eq!(
        (hw, emu),
        (5, 0),
        "self has CPU atomics on registered memory"
    );
    assert!(p
        .a
        .atomic_post(p.ab, AtomicOp::Add, AmoSize::U64, 1, base + 4, &rkey)
        .is_err());
}

#[test]
fn ucp_self_truncation_in_every_protocol_keeps_the_pair_working() {
    let mut p = pair_with(UcpConfig {
        rndv_thresh: Some(100_000),
        ..cfg()
    });
    // Multi-fragment eager and rendezvous into a too-small buffer: Truncated with the real
    // length, the sender completes, and the next message still arrives intact.
    for len in [50_000usize, 500_000] {
        let r = p.b.tag_recv(vec![0; 1000], 2, EXACT).unwrap();
        let s = p.a.tag_send(p.ab, 2, &pattern(len, 1)).unwrap();
        let c = p.finish_b(r);
        assert_eq!(
            c.status,
            Err(Error::Truncated {
                len,
                capacity: 1000
            })
        );
        assert_eq!(c.len, len);
        assert_eq!(p.finish_a(s).status, Ok(()), "sender of {len}");
        send_recv(&mut p, 10, 3);
    }
}

#[test]
fn ucp_self_eager_zcopy_from_owned_vectors() {
    let mut p = pair_with(UcpConfig {
        rndv_thresh: Some(200_000),
        ..cfg()
    });
    let pc = p.a.ep_proto_config(p.ab).unwrap();
    let z = pc.zcopy_thresh.expect("self can register and has am_zcopy");
    assert!(p.a.ep_proto_info(p.ab).unwrap().contains("eager zcopy"));
    for (i, len) in [z, z + 1, 3 * pc.middle_frag + 5, 199_999]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        let r = p.b.tag_recv(vec![0; len], 40 + i as u64, EXACT).unwrap();
        let op = if i % 2 == 0 {
            p.a.tag_send_vec(p.ab, 40 + i as u64, data.clone()).unwrap()
        } else {
            p.a.tag_send_sync(p.ab, 40 + i as u64, &data).unwrap()
        };
        let sc = p.finish_a(op);
        assert_eq!(sc.status, Ok(()));
        if i % 2 == 0 {
            assert!(sc.buf.unwrap() == data, "the vector comes back unchanged");
        }
        let c = p.finish_b(r);
        assert_eq!(c.status, Ok(()));
        assert!(c.buf.unwrap() == data, "{len} bytes");
    }
    assert_eq!(
        p.a.stats().eager_zcopy,
        2,
        "only owned vectors go zero-copy"
    );
}

#[test]
fn ucp_self_completion_callbacks_run_in_progress_and_consume_the_request() {
    let mut p = pair_with(cfg());
    let got: Rc<RefCell<Vec<Completion>>> = Rc::default();
    // A pending receive: its callback runs during the progress call that finishes it.
    let r = match p.b.tag_recv(vec![0; 32], 9, EXACT).unwrap() {
        Op::Pending(r) => r,
        Op::Done(_) => panic!("nothing was sent yet"),
    };
    let g = got.clone();
    p.b.request_set_callback(&r, move |c| g.borrow_mut().push(c))
        .unwrap();
    p.pump(3);
    assert!(got.borrow().is_empty(), "no message yet, no callback");
    let s = p.a.tag_send(p.ab, 9, b"called back").unwrap();
    p.finish_a(s);
    for _ in 0..100 {
        if !got.borrow().is_empty() {
            break;
        }
        p.pump(1);
    }
    {
        let done = got.borrow();
        assert_eq!(done.len(), 1, "callback runs exactly once");
        assert_eq!(done[0].status, Ok(()));
        assert_eq!(
            &done[0].buf.as_ref().unwrap()[..done[0].len],
            b"called back"
        );
    }
    // A request that finished before the callback was set: the callback runs at once.
    let s = p.a.tag_send(p.ab, 10, b"early").unwrap();
    p.finish_a(s);
    p.pump(3);
    let op = p.b.tag_recv(vec![0; 8], 10, EXACT).unwrap();
    if let Op::Pending(r) = op {
        p.pump(3);
        let g = got.clone();
        p.b.request_set_callback(&r, move |c| g.borrow_mut().push(c))
            .unwrap();
        for _ in 0..100 {
            if got.borrow().len() == 2 {
                break;
            }
            p.pump(1);
        }
    } else if let Op::Done(c) = op {
        got.borrow_mut().push(c);
    }
    assert_eq!(got.borrow().len(), 2);
    assert_eq!(&got.borrow()[1].buf.as_ref().unwrap()[..5], b"early");
    // A canceled receive reports Canceled through its callback and gives the buffer back.
    let r = match p.b.tag_recv(vec![3; 4], 11, EXACT).unwrap() {
        Op::Pending(r) => r,
        Op::Done(_) => panic!("nothing was sent"),
    };
    let g = got.clone();
    p.b.request_set_callback(&r, move |c| g.borrow_mut().push(c))
        .unwrap();
    assert!(p.b.request_cancel(&r).unwrap());
    p.pump(1);
    assert_eq!(got.borrow().len(), 3);
    assert_eq!(got.borrow()[2].status, Err(Error::Canceled));
    assert_eq!(got.borrow()[2].buf, Some(vec![3; 4]));
    // The request was consumed by its callback: setting another one is an error.
    assert!(p.b.request_set_callback(&r, |_| {}).is_err());
}

#[test]
fn ucp_self_token_requests_queue_their_results_and_are_consumed() {
    let mut p = pair_with(cfg());
    let r = match p.b.tag_recv(vec![0; 32], 21, EXACT).unwrap() {
        Op::Pending(r) => r,
        Op::Done(_) => panic!("nothing was sent yet"),
    };
    assert_eq!(p.b.request_set_token(&r, 0xfeed).unwrap(), None);
    let mut out = Vec::new();
    p.pump(3);
    p.b.take_done_tokens(&mut out);
    assert!(out.is_empty(), "no message yet, no result");
    let s = p.a.tag_send(p.ab, 21, b"by token").unwrap();
    p.finish_a(s);
    for _ in 0..100 {
        p.b.take_done_tokens(&mut out);
        if !out.is_empty() {
            break;
        }
        p.pump(1);
    }
    assert_eq!(out.len(), 1, "one result for one request");
    let (token, c) = &out[0];
    assert_eq!(*token, 0xfeed);
    assert_eq!(c.status, Ok(()));
    assert_eq!(&c.buf.as_ref().unwrap()[..c.len], b"by token");
    // Consumed: neither a callback nor another token can be set on it.
    assert!(p.b.request_set_token(&r, 1).is_err());
    assert!(p.b.request_set_callback(&r, |_| {}).is_err());
    // A canceled receive queues Canceled with its buffer.
    let r = match p.b.tag_recv(vec![5; 4], 22, EXACT).unwrap() {
        Op::Pending(r) => r,
        Op::Done(_) => panic!("nothing was sent"),
    };
    assert_eq!(p.b.request_set_token(&r, 7).unwrap(), None);
    assert!(p.b.request_cancel(&r).unwrap());
    p.pump(1);
    out.clear();
    p.b.take_done_tokens(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 7);
    assert_eq!(out[0].1.status, Err(Error::Canceled));
    assert_eq!(out[0].1.buf, Some(vec![5; 4]));
}

/// With the default configuration (no application-level keepalive timeout) a peer that does
/// not call progress for ten minutes of the worker's clock is not declared dead: the
/// outstanding sync send completes once it progresses again.
#[test]
fn ucp_self_busy_peer_is_never_declared_dead_by_default() {
    let mut p = pair_with(UcpConfig {
        keepalive_timeout: UcpConfig::default().keepalive_timeout,
        ..cfg()
    });
    let s = p.a.tag_send_sync(p.ab, 1, b"x").unwrap();
    for _ in 0..6_000 {
        p.clock.advance(Duration::from_millis(100));
        for _ in 0..ucp::CLOCK_PERIOD {
            p.a.progress();
        }
    }
    assert_eq!(p.a.ep_status(p.ab), Ok(()), "a busy peer was declared dead");
    let r = p.b.tag_recv(vec![0; 1], 1, EXACT).unwrap();
    assert_eq!(p.finish_b(r).status, Ok(()));
    assert_eq!(p.finish_a(s).status, Ok(()));
}

/// `fail_tag_recvs` (what the C library does for endpoints without error handling when a
/// peer fails): the receives waiting fail with the error, one posted later that finds no
/// message fails at once, and a message that had arrived is still received.
#[test]
fn ucp_self_fail_tag_recvs_fails_waiting_and_later_receives() {
    let mut p = pair_with(cfg());
    let ba = p.ba();
    let early = p.b.tag_send(ba, 3, b"early").unwrap();
    p.finish_b(early);
    p.pump(8);
    let r1 = p.a.tag_recv(vec![0; 8], 1, EXACT).unwrap();
    let r2 = p.a.tag_recv(vec![0; 8], 2, EXACT).unwrap();
    let err = Error::PeerFailure("worker 0x1 at 10.0.0.2: connection timed out".into());
    assert_eq!(p.a.fail_tag_recvs(err.clone()), 2);
    for r in [r1, r2] {
        let Op::Pending(r) = r else {
            panic!("nothing was sent to these")
        };
        let c = p.a.request_take(r).expect("failed at once");
        assert_eq!(c.status, Err(err.clone()));
        assert!(c.buf.is_some(), "the buffer comes back");
    }
    let got = p.a.tag_recv(vec![0; 8], 3, EXACT).unwrap();
    let c = p.finish_a(got);
    assert_eq!(
        (c.status, c.len),
        (Ok(()), 5),
        "an arrived message is still received"
    );
    let later = p.a.tag_recv(vec![0; 8], 4, EXACT).unwrap();
    let c = match later {
        Op::Pending(r) => p.a.request_take(r).expect("failed at once"),
        Op::Done(c) => c,
    };
    assert_eq!(c.status, Err(err));
}
