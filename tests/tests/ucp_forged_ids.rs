//! A peer that speaks the protocol but lies: control messages naming requests that are not its
//! own (another endpoint's pending send or matched receive, or a guessed id of a posted
//! receive), sent from a hand-rolled ucp peer through a real uct endpoint over posix and tcp.
//!
//! The defence under test: no panic; the forging endpoint fails (its error handler runs, the
//! worker's `forged_ids` counter says so); the victim request stays pending and later completes
//! correctly with the real peer's data.

#[allow(dead_code)]
#[path = "../../fuzz/src/peer.rs"]
mod peer;

use peer::{pattern, worker, RawPeer, WATCHDOG};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;
use ucp::wire::{am_id, FragHdr, RemoteBuf, ReqHdr, RtrHdr, RtrMode, RtsHdr};
use ucp::{EpHandle, EpParams, Op, Request, Worker, TAG_MASK_EXACT};

const TAG: u64 = 0x7a61_5eed;
const LEN: usize = 100_000;

/// Endpoints whose error handler ran, with the error.
type Failed = Rc<RefCell<Vec<(EpHandle, String)>>>;

fn params(failed: &Failed) -> EpParams {
    let f = failed.clone();
    EpParams {
        err_handler: Some(Box::new(move |ep, e| {
            f.borrow_mut().push((ep, e.to_string()))
        })),
    }
}

/// Progresses until endpoint `ep`'s error handler has run; gives its error.
fn wait_failed(
    w: &mut Worker,
    peers: &mut [&mut RawPeer],
    failed: &Failed,
    ep: EpHandle,
) -> String {
    let start = Instant::now();
    loop {
        w.progress();
        for p in peers.iter_mut() {
            p.poll();
        }
        if let Some((_, e)) = failed.borrow().iter().find(|(h, _)| *h == ep) {
            return e.clone();
        }
        assert!(
            start.elapsed() < WATCHDOG,
            "the forging endpoint did not fail (failures so far: {:?})",
            failed.borrow()
        );
    }
}

fn req_msg(req: u64) -> Vec<u8> {
    ReqHdr { req }.encode().to_vec()
}

fn rtr_put(sreq: u64) -> Vec<u8> {
    let mut b = Vec::new();
    RtrHdr {
        sreq,
        rreq: 1,
        mode: RtrMode::Put,
        buf: RemoteBuf {
            addr: 0x1000,
            tl: "",
            rkey: &[],
        },
    }
    .encode(&mut b);
    b
}

fn rndv_data(rreq: u64) -> Vec<u8> {
    let mut b = FragHdr {
        id: rreq,
        offset: 0,
    }
    .encode()
    .to_vec();
    b.extend_from_slice(&[0xee; 64]);
    b
}

/// Attacker `a` takes a fresh identity, the worker makes an endpoint to it, and it sends
/// message `id`: that endpoint must fail with a protocol error naming the request, and
/// nothing else may change.
fn forge(w: &mut Worker, a: &mut RawPeer, p: &mut RawPeer, failed: &Failed, id: u8, body: &[u8]) {
    a.rename();
    let ep_a = w.ep_create(&a.address(), params(failed)).expect("ep to a");
    let before = w.stats().forged_ids;
    assert!(a.send(w, id, body), "the attacker's message went out");
    let e = wait_failed(w, &mut [a, p], failed, ep_a);
    assert!(e.contains("names request"), "message {id}: {e}");
    assert_eq!(w.stats().forged_ids, before + 1, "message {id} counted");
    assert!(w.ep_status(ep_a).is_err());
}

fn pending(op: Op) -> Request {
    match op {
        Op::Pending(r) => r,
        Op::Done(c) => panic!("finished at once: {c:?}"),
    }
}

/// Finding 1: ATP / RTR / ATS / SYNC_ACK naming another endpoint's pending rendezvous send
/// (with the exact id its real peer got).
fn pending_send_survives(tl: &str) {
    let mut w = worker(tl);
    let failed: Failed = Default::default();
    let mut p = RawPeer::new(tl, &w);
    let mut a = RawPeer::new(tl, &w);
    let ep_p = w.ep_create(&p.address(), params(&failed)).expect("ep to p");
    let data = pattern(LEN, 7);
    let req = pending(w.tag_send(ep_p, TAG, &data).expect("tag_send"));
    let rts = p.wait_for(&mut w, am_id::RTS);
    let h = RtsHdr::decode(&rts).expect("RTS");
    assert_eq!((h.tag, h.len), (TAG, LEN as u64));
    let sreq = h.sreq;

    for (id, body) in [
        (am_id::ATP, req_msg(sreq)),
        (am_id::RTR, rtr_put(sreq)),
        (am_id::ATS, req_msg(sreq)),
        (am_id::SYNC_ACK, req_msg(sreq)),
        (am_id::RNDV_DATA, rndv_data(sreq)),
    ] {
        forge(&mut w, &mut a, &mut p, &failed, id, &body);
        assert!(
            !w.request_test(&req).unwrap(),
            "message {id} touched the victim send"
        );
        assert!(w.ep_status(ep_p).is_ok(), "the real peer's endpoint failed");
    }
    assert_eq!(w.stats().forged_ids, 5);
    assert!(failed.borrow().iter().all(|(h, _)| *h != ep_p));

    // The real peer asks for the data: it arrives whole and the send completes.
    assert!(p.send_rtr_pipeline(&mut w, sreq, 0x77));
    let got = p.recv_rndv_data(&mut w, 0x77, LEN);
    assert!(got == data, "rendezvous data differs");
    let c = w.wait(req);
    assert_eq!(c.status, Ok(()));
}

/// Finding 2 (and 1 for a receive): ATP / ATS / SYNC_ACK / RNDV_DATA naming a posted receive
/// by a guessed id, then naming it by the exact id its real peer got in the RTR.
fn posted_recv_survives(tl: &str) {
    let mut w = worker(tl);
    let failed: Failed = Default::default();
    let mut p = RawPeer::new(tl, &w);
    let mut a = RawPeer::new(tl, &w);
    let ep_p = w.ep_create(&p.address(), params(&failed)).expect("ep to p");
    let req = pending(
        w.tag_recv(vec![0u8; LEN], TAG, TAG_MASK_EXACT)
            .expect("tag_recv"),
    );

    // Guessed ids (internal slot and generation of the first requests): the first message
    // fails the attacker, whatever it names.
    for id in [am_id::ATP, am_id::ATS, am_id::SYNC_ACK, am_id::RNDV_DATA] {
        a.rename();
        let ep_a = w.ep_create(&a.address(), params(&failed)).expect("ep to a");
        for gen in 1..4u64 {
            for slot in 0..4u64 {
                let guess = gen << 32 | slot;
                let body = if id == am_id::RNDV_DATA {
                    rndv_data(guess)
                } else {
                    req_msg(guess)
                };
                a.send(&mut w, id, &body);
            }
        }
        let e = wait_failed(&mut w, &mut [&mut a, &mut p], &failed, ep_a);
        assert!(e.contains("names request"), "{e}");
        assert!(
            !w.request_test(&req).unwrap(),
            "message {id} completed the posted receive"
        );
    }
    assert_eq!(w.stats().forged_ids, 4, "one per forging endpoint");

    // The real peer's RTS matches the receive; the worker answers with an RTR naming it.
    assert!(p.send_rts(&mut w, TAG, 0x55, LEN));
    let rtr = p.wait_for(&mut w, am_id::RTR);
    let h = RtrHdr::decode(&rtr).expect("RTR");
    assert_eq!(h.sreq, 0x55);
    let rreq = h.rreq;
    for (id, body) in [
        (am_id::ATP, req_msg(rreq)),
        (am_id::RNDV_DATA, rndv_data(rreq)),
        (am_id::ATS, req_msg(rreq)),
        (am_id::SYNC_ACK, req_msg(rreq)),
        (am_id::RTR, rtr_put(rreq)),
    ] {
        forge(&mut w, &mut a, &mut p, &failed, id, &body);
        assert!(
            !w.request_test(&req).unwrap(),
            "message {id} touched the victim receive"
        );
        assert!(w.ep_status(ep_p).is_ok(), "the real peer's endpoint failed");
    }
    assert_eq!(w.stats().forged_ids, 9);

    // The real data completes it.
    let data = pattern(LEN, 3);
    assert!(p.send_rndv_data(&mut w, rreq, &data));
    let c = w.wait(req);
    assert_eq!(c.status, Ok(()));
    assert_eq!((c.len, c.tag), (LEN, TAG));
    assert!(c.buf.as_deref() == Some(&data[..]), "received data differs");
    assert!(failed.borrow().iter().all(|(h, _)| *h != ep_p));
}

#[test]
fn posix_forged_ids_on_a_pending_send() {
    pending_send_survives("posix");
}

#[test]
fn tcp_forged_ids_on_a_pending_send() {
    pending_send_survives("tcp");
}

#[test]
fn posix_forged_ids_on_a_posted_receive() {
    posted_recv_survives("posix");
}

#[test]
fn tcp_forged_ids_on_a_posted_receive() {
    posted_recv_survives("tcp");
}

/// A peer announcing an active-message rendezvous of 1 TiB (the largest the protocol allows)
/// makes the worker allocate the receive buffer: where the kernel refuses (overcommit modes 0
/// and 2 with less memory than that), the allocation failure fails that peer's endpoint with
/// `NoMemory` instead of aborting the process; the other peer's endpoint stays usable.
#[test]
fn posix_huge_am_rendezvous_fails_only_that_endpoint() {
    let tl = "posix";
    let mut w = worker(tl);
    let failed: Failed = Default::default();
    let mut p = RawPeer::new(tl, &w);
    let mut a = RawPeer::new(tl, &w);
    let ep_p = w.ep_create(&p.address(), params(&failed)).expect("ep to p");
    let ep_a = w.ep_create(&a.address(), params(&failed)).expect("ep to a");
    let mut body = ucp::wire::UserAmHdr { id: 1, hdr_len: 0 }.encode().to_vec();
    RtsHdr {
        tag: 0,
        sreq: 9,
        len: 1 << 40,
        buf: RemoteBuf {
            addr: 0,
            tl: "",
            rkey: &[],
        },
    }
    .encode(&mut body);
    assert!(a.send(&mut w, am_id::AM_RTS, &body));
    let overcommit = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    if overcommit.trim() == "1" {
        // The kernel hands out the lazily zeroed terabyte: the worker asks for the data.
        let rtr = a.wait_for(&mut w, am_id::RTR);
        assert_eq!(RtrHdr::decode(&rtr).expect("RTR").sreq, 9);
    } else {
        let e = wait_failed(&mut w, &mut [&mut a, &mut p], &failed, ep_a);
        assert!(e.contains("cannot allocate"), "{e}");
    }
    // The other endpoint still works.
    let req = pending(
        w.tag_recv(vec![0u8; 64], TAG, TAG_MASK_EXACT)
            .expect("tag_recv"),
    );
    let mut m = TAG.to_le_bytes().to_vec();
    m.extend_from_slice(b"still here");
    assert!(p.send(&mut w, am_id::EAGER_ONLY, &m));
    let c = w.wait(req);
    assert_eq!((c.status, c.len), (Ok(()), 10));
    assert!(w.ep_status(ep_p).is_ok());
}

/// A synchronous send in many eager fragments that meets back-pressure: the receiver matches
/// the first fragment and acknowledges at once, before the sender has sent the rest. The
/// acknowledgement is the real one, so the send finishes, but only once every fragment is out:
/// the receiver gets the whole message.
#[test]
fn tcp_early_sync_ack_waits_for_the_last_fragment() {
    let ctx = ucp::Context::new(ucp::ContextParams {
        features: ucp::Features::TAG,
        config: Some(ucp::UcpConfig {
            tls: vec!["tcp".into()],
            net_devices: vec!["lo".into()],
            rndv_thresh: Some(64 << 20),
            keepalive_interval: None,
            ..Default::default()
        }),
    })
    .expect("context");
    let mut w = Worker::new(&ctx).expect("worker");
    let mut p = RawPeer::new("tcp", &w);
    let ep_p = w.ep_create(&p.address(), EpParams::default()).expect("ep");
    let len = 8 << 20;
    let data = pattern(len, 11);
    let req = pending(w.tag_send_sync(ep_p, TAG, &data).expect("send"));
    let mut got = vec![0u8; len];
    let mut have = 0;
    let mut acked = false;
    let start = Instant::now();
    while have < len {
        w.progress();
        p.poll();
        for m in p.take(am_id::EAGER_FIRST) {
            let h = ucp::wire::EagerFirstHdr::decode(&m).expect("first");
            assert_eq!((h.tag, h.total_len), (TAG, len as u64));
            let d = &m[ucp::wire::EagerFirstHdr::LEN..];
            got[..d.len()].copy_from_slice(d);
            have += d.len();
            // Matched: acknowledge now, while most fragments are still to come.
            assert!(p.send(&mut w, am_id::SYNC_ACK, &req_msg(h.sreq)));
            acked = true;
        }
        for m in p.take(am_id::EAGER_MIDDLE) {
            let h = FragHdr::decode(&m).expect("middle");
            let d = &m[FragHdr::LEN..];
            got[h.offset as usize..h.offset as usize + d.len()].copy_from_slice(d);
            have += d.len();
        }
        assert!(
            start.elapsed() < WATCHDOG,
            "the message stopped at {have} of {len} bytes (acknowledged: {acked})"
        );
    }
    assert!(acked && got == data, "message differs");
    let c = w.wait(req);
    assert_eq!(c.status, Ok(()));
    assert_eq!(w.stats().forged_ids, 0);
}
