//! Shared body of the `Worker::tag_send_mapped` tests (offload on and off).

// Each test binary uses part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};
use ucp::{Completion, Context, ContextParams, EpParams, Error, Features, Op, UcpConfig, Worker};

const RNDV_THRESH: usize = 100_000;

/// Progresses both workers until both stay idle for a while (bounded by a watchdog).
fn pump(a: &mut Worker, b: &mut Worker) {
    let start = Instant::now();
    let mut idle = 0;
    while idle < 300 {
        let n = a.progress() + b.progress();
        idle = if n == 0 { idle + 1 } else { 0 };
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "watchdog: workers never went idle"
        );
    }
}

fn pair(tl: &str) -> (Worker, Worker, ucp::EpHandle) {
    let ctx = Context::new(ContextParams {
        features: Features::TAG | Features::RMA,
        config: Some(UcpConfig {
            tls: tl.split(',').map(String::from).collect(),
            rndv_thresh: Some(RNDV_THRESH),
            keepalive_interval: None,
            ..Default::default()
        }),
    })
    .unwrap();
    let mut a = Worker::new(&ctx).unwrap();
    let mut b = Worker::new(&ctx).unwrap();
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    pump(&mut a, &mut b);
    (a, b, ab)
}

/// Completes `op` on `w` while progressing both workers (bounded by a watchdog).
fn complete(w: &mut Worker, other: &mut Worker, op: Op, rev: bool) -> Completion {
    let mut r = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    let start = Instant::now();
    loop {
        if rev {
            other.progress();
            w.progress();
        } else {
            w.progress();
            other.progress();
        }
        match w.request_take(r) {
            Ok(c) => return c,
            Err(back) => r = back,
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "watchdog: request never completed"
        );
    }
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

/// Sends `len` bytes at `offset` of a fresh mapping of `tl` to a receive posted before
/// (`expected`) or after the message arrived; checks the data and gives the sender's
/// counter of in-place rendezvous.
fn one(tl: &str, offset: usize, len: usize, expected: bool, drop_map: bool) -> u64 {
    let (mut a, mut b, ab) = pair(tl);
    let map = a.mem_map(offset + len + 64).unwrap();
    // Shared memory allocates a segment; tcp alone gives registered heap memory.
    assert_eq!(
        map.is_shared(),
        tl != "tcp",
        "{tl}: mem_map gave the wrong kind of memory"
    );
    let data = pattern(len as u32, len);
    map.write(offset, &data).unwrap();
    let tag = 0x77;
    let recv = |b: &mut Worker| b.tag_recv(vec![0; len + 5], tag, u64::MAX).unwrap();
    let mut r = if expected { Some(recv(&mut b)) } else { None };
    let s = a.tag_send_mapped(ab, tag, &map, offset, len).unwrap();
    if drop_map {
        // The request keeps the segment mapped.
        drop(map);
    }
    if r.is_none() {
        pump(&mut a, &mut b);
        r = Some(recv(&mut b));
    }
    let c = complete(&mut b, &mut a, r.unwrap(), false);
    assert_eq!(c.status, Ok(()), "{tl} {len}");
    assert_eq!((c.len, c.tag), (len, tag), "{tl} {len}");
    assert!(
        c.buf.unwrap()[..len] == data[..],
        "{tl}: {len} bytes differ"
    );
    let sc = complete(&mut a, &mut b, s, true);
    assert_eq!(sc.status, Ok(()), "{tl}: send of {len}");
    pump(&mut a, &mut b);
    let st = b.stats();
    if len >= RNDV_THRESH && !expected && tl.contains(',') {
        // With cma as the RMA lane, the receiver still reads the segment in place through
        // the shared-memory lane (one copy, no system call), not with a cma read.
        assert_eq!(
            (st.rndv_get, st.rndv_get_mapped, st.rndv_put, st.rndv_am),
            (1, 1, 0, 0),
            "{tl} {len}: {st:?}"
        );
    }
    a.tag_offload_stats().sent_mapped
}

/// Every transport set: eager sizes are copied (no in-place rendezvous), rendezvous sizes are
/// read in place from the segment, or from the heap mapping over tcp (counter), expected and
/// unexpected, the mapping dropped early or not (the request keeps the memory); `offload`
/// says whether the transport's tag matching pulled the expected one.
pub fn mapped_sends_deliver(offload: bool) {
    for tl in ["posix", "sysv", "posix,cma", "sysv,cma", "tcp"] {
        for (len, off) in [(8, 0), (5000, 3), (RNDV_THRESH - 1, 64)] {
            assert_eq!(one(tl, off, len, true, false), 0, "{tl}: eager {len}");
            assert_eq!(one(tl, off, len, false, false), 0, "{tl}: eager {len}");
        }
        for (len, off) in [(RNDV_THRESH, 0), (300_001, 1), (1 << 20, 4096)] {
            for expected in [true, false] {
                assert_eq!(
                    one(tl, off, len, expected, false),
                    1,
                    "{tl}: rendezvous of {len} not sent in place"
                );
            }
        }
        assert_eq!(one(tl, 8, 300_000, true, true), 1, "{tl}: dropped map");
        // An eager message above the bcopy size (tcp sends it in place by tag offload) with
        // the mapping dropped before completion.
        assert_eq!(
            one(tl, 8, 50_000, true, true),
            0,
            "{tl}: dropped map, eager"
        );
        assert_eq!(one(tl, 8, 300_000, false, true), 1, "{tl}: dropped map");
        // The transport pulled an expected rendezvous straight from the segment, or (offload
        // off) nothing went through the transport's matching.
        let (mut a, mut b, ab) = pair(tl);
        let len = 200_000;
        let map = a.mem_map(len).unwrap();
        let data = pattern(5, len);
        map.write(0, &data).unwrap();
        let r = b.tag_recv(vec![0; len], 3, u64::MAX).unwrap();
        let s = a.tag_send_mapped(ab, 3, &map, 0, len).unwrap();
        let c = complete(&mut b, &mut a, r, false);
        assert!(c.status.is_ok() && c.buf.unwrap() == data, "{tl}");
        complete(&mut a, &mut b, s, true).status.unwrap();
        let st = a.tag_offload_stats();
        assert_eq!(st.sent_mapped, 1, "{tl}: {st:?}");
        if offload {
            assert_eq!((st.sent_rndv, st.matched_rndv), (1, 1), "{tl}: {st:?}");
        } else {
            assert_eq!((st.sent_rndv, st.matched_rndv), (0, 0), "{tl}: {st:?}");
        }
    }
}

/// A range outside the mapping (or empty, or overflowing) is a typed error, and nothing is
/// sent.
pub fn bad_ranges_are_errors() {
    let (mut a, mut b, ab) = pair("posix");
    let map = a.mem_map(4096).unwrap();
    for (off, len) in [
        (0, 4097),
        (4096, 1),
        (4000, 200),
        (0, 0),
        (usize::MAX, 2),
        (1, usize::MAX),
    ] {
        match a.tag_send_mapped(ab, 1, &map, off, len) {
            Err(Error::InvalidParam(_)) => {}
            other => panic!("{off}+{len}: {other:?}"),
        }
    }
    pump(&mut a, &mut b);
    assert!(
        b.tag_probe(1, u64::MAX, false).is_none(),
        "something was sent"
    );
    // The worker is still usable.
    let r = b.tag_recv(vec![0; 4096], 1, u64::MAX).unwrap();
    let s = a.tag_send_mapped(ab, 1, &map, 0, 4096).unwrap();
    assert!(complete(&mut b, &mut a, r, false).status.is_ok());
    complete(&mut a, &mut b, s, true).status.unwrap();
}

/// `tag_send_nb` and `tag_send_mapped_nb` give `None` for a send that finished at once (eager
/// sizes) and the request of one still running (rendezvous); the data arrives either way. A bad
/// range or another worker's handle is an error, and nothing is sent.
pub fn nb_sends_deliver() {
    let (mut a, mut b, ab) = pair("posix");
    let ba = b.ep_create(a.address(), EpParams::default()).unwrap();
    pump(&mut a, &mut b);
    let map = a.mem_map(RNDV_THRESH * 2).unwrap();
    for (i, len) in [8, 3000, RNDV_THRESH + 7].into_iter().enumerate() {
        let data = pattern(i as u32, len);
        map.write(0, &data).unwrap();
        for mapped in [false, true] {
            let tag = 0x50 + i as u64;
            let r = b.tag_recv(vec![0; len], tag, u64::MAX).unwrap();
            let s = if mapped {
                a.tag_send_mapped_nb(ab, tag, &map, 0, len).unwrap()
            } else {
                a.tag_send_nb(ab, tag, &data).unwrap()
            };
            assert_eq!(s.is_none(), len < RNDV_THRESH, "{len} mapped {mapped}");
            let c = complete(&mut b, &mut a, r, false);
            assert_eq!(c.status, Ok(()), "{len}");
            assert!(c.buf.unwrap() == data, "{len} mapped {mapped}: data differ");
            if let Some(s) = s {
                complete(&mut a, &mut b, Op::Pending(s), true)
                    .status
                    .unwrap();
            }
        }
    }
    assert!(matches!(
        a.tag_send_mapped_nb(ab, 1, &map, 0, RNDV_THRESH * 2 + 1),
        Err(Error::InvalidParam(_))
    ));
    assert!(matches!(
        a.tag_send_mapped_nb(ba, 1, &map, 0, 8),
        Err(Error::InvalidParam(_))
    ));
    assert!(matches!(
        a.tag_send_nb(ba, 1, b"12345678"),
        Err(Error::InvalidParam(_))
    ));
    pump(&mut a, &mut b);
    assert!(
        b.tag_probe(1, u64::MAX, false).is_none(),
        "something was sent"
    );
}

/// `tag_send_nb` under back-pressure: with the receiver not progressing, sends beyond the FIFO
/// give requests, later eager-size sends queue behind them (none overtakes), and every message
/// arrives in order once the receiver runs. A closed endpoint's handle is then an error.
pub fn nb_sends_keep_order_under_back_pressure() {
    let (mut a, mut b, ab) = pair("posix");
    let n = 3000u32;
    let mut running = Vec::new();
    for i in 0..n {
        if let Some(r) = a.tag_send_nb(ab, 9, &u64::from(i).to_le_bytes()).unwrap() {
            running.push(r);
        }
    }
    assert!(!running.is_empty(), "the FIFO never filled");
    for i in 0..n {
        let r = b.tag_recv(vec![0; 8], 9, u64::MAX).unwrap();
        let c = complete(&mut b, &mut a, r, false);
        assert_eq!(c.status, Ok(()));
        let got = u64::from_le_bytes(c.buf.unwrap()[..8].try_into().unwrap());
        assert_eq!(got, u64::from(i), "message {i} out of order");
    }
    for r in running {
        complete(&mut a, &mut b, Op::Pending(r), true)
            .status
            .unwrap();
    }
    let close = a.ep_close_nb(ab, ucp::CloseMode::Force).unwrap();
    complete(&mut a, &mut b, close, true).status.unwrap();
    assert!(matches!(
        a.tag_send_nb(ab, 9, b"12345678"),
        Err(Error::InvalidParam(_))
    ));
}
