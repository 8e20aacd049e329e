//! The tag-matching reference model of `ucp_tag_model.rs` run with tag offload on (the
//! default; `RUCX_TM_ENABLE` unset) over tcp (exact receives go to the transport, 20 kB eager
//! messages go as tagged frames, 150 kB ones by `tag_rndv_zcopy`) and over shared memory
//! (posix alone, rendezvous read by the receiving interface with process_vm_readv and the
//! software fallback pipelined over active messages; sysv; posix with cma, the software
//! fallback by get): random sequences of post, send and cancel give the same matches, in the
//! same order, as the naive model, and the offload path is taken (counters). Plus direct checks
//! of the offload path per transport.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::time::{Duration, Instant};
use ucp::{Context, ContextParams, EpParams, Features, Op, Request, UcpConfig, Worker};

#[derive(Debug, Clone)]
enum Step {
    Post { tag: u64, mask: u64 },
    Send { tag: u64, len: usize },
    Cancel { nth: usize },
}

fn step() -> impl Strategy<Value = Step> {
    let tag = 0u64..4;
    let mask = prop_oneof![3 => Just(u64::MAX), 1 => Just(0u64), 1 => Just(!1u64)];
    let len = prop_oneof![Just(8usize), Just(2_000), Just(20_000), Just(150_000)];
    prop_oneof![
        3 => (tag.clone(), mask).prop_map(|(tag, mask)| Step::Post { tag, mask }),
        3 => (tag, len).prop_map(|(tag, len)| Step::Send { tag, len }),
        1 => (0usize..6).prop_map(|nth| Step::Cancel { nth }),
    ]
}

/// What a posted receive ended with, by message index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Msg(u32),
    Canceled,
}

fn body(idx: u32, len: usize) -> Vec<u8> {
    let mut v = vec![(idx % 251) as u8; len];
    v[..4].copy_from_slice(&idx.to_le_bytes());
    v
}

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

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn ucp_tag_model_tcp_offload(steps in proptest::collection::vec(step(), 1..40)) {
        run_model("tcp", steps)?;
    }
    #[test]
    fn ucp_tag_model_shm_offload_on(steps in proptest::collection::vec(step(), 1..40)) {
        run_model("posix", steps)?;
    }
    #[test]
    fn ucp_tag_model_sysv_offload_on(steps in proptest::collection::vec(step(), 1..40)) {
        run_model("sysv", steps)?;
    }
    #[test]
    fn ucp_tag_model_posix_cma_offload_on(steps in proptest::collection::vec(step(), 1..40)) {
        run_model("posix,cma", steps)?;
    }
}

/// Offload counters summed over every model case of a transport list, so a test can assert
/// that the random sequences really went through the transport's matching.
static MODEL_OFFLOAD: std::sync::Mutex<Vec<(String, u64, u64)>> = std::sync::Mutex::new(Vec::new());

fn note_offload(tl: &str, matched: u64, matched_rndv: u64) {
    let mut g = MODEL_OFFLOAD.lock().unwrap_or_else(|e| e.into_inner());
    match g.iter_mut().find(|e| e.0 == tl) {
        Some(e) => {
            e.1 += matched;
            e.2 += matched_rndv;
        }
        None => g.push((tl.to_string(), matched, matched_rndv)),
    }
}

/// The shared-memory model runs, deterministically seeded, do use the transport's matching
/// for both eager messages and rendezvous.
#[test]
fn ucp_tag_model_shm_really_offloads() {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    for tl in ["posix", "sysv", "posix,cma"] {
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: 16,
                ..Config::default()
            },
            TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
        );
        let name = format!("{tl}#det");
        runner
            .run(&proptest::collection::vec(step(), 10..40), |steps| {
                run_model_named(tl, &name, steps)
            })
            .unwrap();
        let g = MODEL_OFFLOAD.lock().unwrap_or_else(|e| e.into_inner());
        let (_, m, r) = g.iter().find(|e| e.0 == name).cloned().expect("counted");
        assert!(m > 0, "{tl}: no receive was matched by the transport");
        assert!(r > 0, "{tl}: no rendezvous was served by the transport");
    }
}

fn pair(tl: &str) -> (Worker, Worker, ucp::EpHandle) {
    pair_with(tl, Some(100_000))
}

/// Two workers of one context over `tl`, `a` connected to `b`; `rndv_thresh` as
/// `RUCX_RNDV_THRESH` (`None`: the default thresholds).
fn pair_with(tl: &str, rndv_thresh: Option<usize>) -> (Worker, Worker, ucp::EpHandle) {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: tl.split(',').map(String::from).collect(),
            net_devices: vec!["lo".into()],
            rndv_thresh,
            keepalive_interval: None,
            // Every rendezvous size by the transport's tag offload (no AM-pipeline range).
            rndv_am_max: Some(0),
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

fn wait(a: &mut Worker, b: &mut Worker, r: Request) -> ucp::Completion {
    let start = Instant::now();
    let mut r = r;
    loop {
        a.progress();
        b.progress();
        match b.request_take(r) {
            Ok(c) => return c,
            Err(back) => r = back,
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "watchdog: receive never completed"
        );
    }
}

/// Over tcp, an exact receive posted first is filled by the transport (tagged frame straight
/// into the buffer); one posted after the message arrived takes it from the unexpected queue;
/// a wildcard receive waiting stops offload, so a later exact receive does not overtake it.
#[test]
fn ucp_tag_offload_is_used_over_tcp() {
    offload_is_used("tcp", &[1025, 8192, 20_000, 99_999]);
}

/// Over shared memory the interface's eager matching saves no copy (`eager_saves_copy` is
/// false: one copy out of the FIFO element either way), so eager messages go by active
/// messages and small receives are not posted; receives that may get a rendezvous are posted,
/// and the interface pulls the rendezvous straight into them.
#[test]
fn ucp_shm_offloads_rendezvous_only() {
    for tl in ["posix", "sysv", "posix,tcp"] {
        let (mut a, mut b, ab) = pair(tl);
        assert!(b.tag_offload_stats().posting, "{tl}: not posting");
        for (i, len) in [1025, 4000, 8176, 50_000].into_iter().enumerate() {
            let r = match b.tag_recv(vec![0; len + 10], 7, u64::MAX).unwrap() {
                Op::Pending(r) => r,
                Op::Done(_) => panic!("nothing was sent yet"),
            };
            assert_eq!(b.tag_offload_stats().posted, 0, "{tl}: {len} posted");
            let data = body(i as u32, len);
            let s = a.tag_send(ab, 7, &data).unwrap();
            let c = wait(&mut a, &mut b, r);
            assert_eq!((c.status, c.len), (Ok(()), len), "{tl}");
            assert!(
                c.buf.unwrap()[..len] == data[..],
                "{tl}: {len} bytes differ"
            );
            if let Op::Pending(r) = s {
                pump(&mut a, &mut b);
                assert_eq!(a.request_take(r).expect("send done").status, Ok(()));
            }
        }
        let st = (a.tag_offload_stats(), b.tag_offload_stats());
        assert_eq!(
            (st.0.sent, st.1.matched),
            (0, 0),
            "{tl}: eager went by offload"
        );
        // Rendezvous sizes (the pair's threshold is 100 000 bytes): posted, pulled.
        for (i, len) in [100_000, 300_001].into_iter().enumerate() {
            let r = match b.tag_recv(vec![0; len], 9, u64::MAX).unwrap() {
                Op::Pending(r) => r,
                Op::Done(_) => panic!("nothing was sent yet"),
            };
            assert_eq!(b.tag_offload_stats().posted, 1, "{tl}: {len} not posted");
            let data = body(i as u32 + 20, len);
            let s = a.tag_send(ab, 9, &data).unwrap();
            let c = wait(&mut a, &mut b, r);
            assert_eq!((c.status, c.len), (Ok(()), len), "{tl}");
            assert!(c.buf.unwrap() == data, "{tl}: {len} bytes differ");
            if let Op::Pending(r) = s {
                pump(&mut a, &mut b);
                assert_eq!(a.request_take(r).expect("send done").status, Ok(()));
            }
            let st = a.tag_offload_stats();
            assert_eq!(
                (st.sent_rndv, st.matched_rndv),
                (i as u64 + 1, i as u64 + 1),
                "{tl}: {st:?}"
            );
        }
    }
}

fn offload_is_used(tl: &str, sizes: &[usize]) {
    let (mut a, mut b, ab) = pair(tl);
    assert!(
        b.tag_offload_stats().posting,
        "{tl} worker does not post to the transport"
    );
    for (i, len) in sizes.iter().copied().enumerate() {
        let r = match b.tag_recv(vec![0; len + 10], 7, u64::MAX).unwrap() {
            Op::Pending(r) => r,
            Op::Done(_) => panic!("nothing was sent yet"),
        };
        assert_eq!(b.tag_offload_stats().posted, 1);
        let data = body(i as u32, len);
        let s = a.tag_send(ab, 7, &data).unwrap();
        let c = wait(&mut a, &mut b, r);
        assert_eq!(c.status, Ok(()));
        assert_eq!((c.len, c.tag), (len, 7));
        assert!(c.buf.unwrap()[..len] == data[..], "{len} bytes differ");
        if let Op::Pending(r) = s {
            pump(&mut a, &mut b);
            assert_eq!(a.request_take(r).expect("send done").status, Ok(()));
        }
        assert_eq!(
            b.tag_offload_stats().matched,
            i as u64 + 1,
            "{len} bytes not matched by {tl}"
        );
    }
    assert_eq!(a.tag_offload_stats().sent, sizes.len() as u64);
    // Unexpected first: the tagged frame goes to ucp's unexpected queue.
    let data = body(9, 30_000);
    let _ = a.tag_send(ab, 8, &data).unwrap();
    pump(&mut a, &mut b);
    let c = match b.tag_recv(vec![0; 30_000], 8, u64::MAX).unwrap() {
        Op::Done(c) => c,
        Op::Pending(r) => wait(&mut a, &mut b, r),
    };
    assert!(c.buf.unwrap() == data);
    assert_eq!(b.tag_offload_stats().matched, sizes.len() as u64);
    // A wildcard receive waits: the exact one after it is not offloaded, and the message goes
    // to the wildcard (posted first).
    let w = match b.tag_recv(vec![0; 30_000], 0, 0).unwrap() {
        Op::Pending(r) => r,
        Op::Done(_) => panic!("queue should be empty"),
    };
    let e = match b.tag_recv(vec![0; 30_000], 5, u64::MAX).unwrap() {
        Op::Pending(r) => r,
        Op::Done(_) => panic!("queue should be empty"),
    };
    assert_eq!(b.tag_offload_stats().posted, 0, "posted behind a wildcard");
    let _ = a.tag_send(ab, 5, &body(1, 5000)).unwrap();
    let c = wait(&mut a, &mut b, w);
    assert_eq!((c.status, c.tag), (Ok(()), 5));
    assert!(b.request_cancel(&e).unwrap());
}

/// Over shared memory a rendezvous goes by `tag_rndv_zcopy`: a posted receive is filled by the
/// receiving interface itself (process_vm_readv) and the send completes by the transport's
/// acknowledgement (no ATS); an unexpected one goes by ucp's software rendezvous (pipelined
/// over active messages with posix alone, get over cma with both) and the sender cancels the
/// transport operation.
#[test]
fn ucp_tag_offload_rendezvous_over_shm() {
    for tl in ["posix", "sysv", "posix,cma"] {
        rendezvous(tl);
    }
}

/// Over tcp, a rendezvous goes by `tag_rndv_zcopy`: a posted receive is filled by the
/// transport (no ATS); an unexpected one goes through ucp's software rendezvous (RTS carried as
/// the header, get, ATS) and the sender cancels the transport operation.
#[test]
fn ucp_tag_offload_rendezvous_over_tcp() {
    rendezvous("tcp");
}

fn rendezvous(tl: &str) {
    let (mut a, mut b, ab) = pair(tl);
    let len = 300_000;
    // Expected.
    let r = match b.tag_recv(vec![0; len], 1, u64::MAX).unwrap() {
        Op::Pending(r) => r,
        Op::Done(_) => panic!("nothing sent yet"),
    };
    let data = body(1, len);
    let s = a.tag_send(ab, 1, &data).unwrap();
    let c = wait(&mut a, &mut b, r);
    assert_eq!((c.status, c.len), (Ok(()), len));
    assert!(c.buf.unwrap() == data);
    if let Op::Pending(r) = s {
        pump(&mut a, &mut b);
        assert_eq!(a.request_take(r).expect("send done").status, Ok(()));
    }
    let st = a.tag_offload_stats();
    assert_eq!((st.sent_rndv, st.matched_rndv), (1, 1), "{tl}: {st:?}");
    // Unexpected: software rendezvous.
    let data = body(2, len);
    let s = a.tag_send(ab, 2, &data).unwrap();
    pump(&mut a, &mut b);
    let c = match b.tag_recv(vec![0; len], 2, u64::MAX).unwrap() {
        Op::Done(c) => c,
        Op::Pending(r) => wait(&mut a, &mut b, r),
    };
    assert_eq!((c.status, c.len), (Ok(()), len));
    assert!(c.buf.unwrap() == data);
    if let Op::Pending(r) = s {
        pump(&mut a, &mut b);
        assert_eq!(a.request_take(r).expect("send done").status, Ok(()));
    }
    let st = a.tag_offload_stats();
    assert_eq!((st.sent_rndv, st.matched_rndv), (2, 1), "{tl}: {st:?}");
    // Nothing left behind: flush completes.
    let f = a.flush().unwrap();
    if let Op::Pending(r) = f {
        let start = Instant::now();
        let mut r = r;
        loop {
            a.progress();
            b.progress();
            match a.request_take(r) {
                Ok(c) => {
                    assert_eq!(c.status, Ok(()));
                    break;
                }
                Err(back) => r = back,
            }
            assert!(start.elapsed() < Duration::from_secs(30), "watchdog: flush");
        }
    }
}

/// `RUCX_PROTO_INFO`'s table shows the offloaded ranges: eager and rendezvous on tcp,
/// rendezvous only on shared memory (where eager matching saves no copy).
#[test]
fn ucp_tag_offload_in_proto_table() {
    for tl in ["tcp", "posix", "sysv"] {
        let (a, _b, ab) = pair(tl);
        let t = a.ep_proto_info(ab).unwrap();
        assert_eq!(t.contains("tag offload eager"), tl == "tcp", "{tl}: {t}");
        assert!(t.contains("tag offload rndv"), "{tl}: {t}");
    }
}

fn run_model(tl: &str, steps: Vec<Step>) -> Result<(), TestCaseError> {
    run_model_named(tl, tl, steps)
}

fn run_model_named(tl: &str, name: &str, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: tl.split(',').map(String::from).collect(),
            net_devices: if tl == "tcp" {
                vec!["lo".into()]
            } else {
                vec![]
            },
            rndv_thresh: Some(100_000),
            keepalive_interval: None,
            // Every rendezvous size by the transport's tag offload (no AM-pipeline range).
            rndv_am_max: Some(0),
            ..Default::default()
        }),
    })
    .unwrap();
    let mut a = Worker::new(&ctx).unwrap();
    let mut b = Worker::new(&ctx).unwrap();
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    pump(&mut a, &mut b);

    // Model state.
    let mut m_expected: Vec<(u64, u64, usize)> = Vec::new(); // tag, mask, recv index
    let mut m_unexp: Vec<(u64, u32)> = Vec::new(); // tag, message index
    let mut m_result: Vec<Option<Got>> = Vec::new();
    // Real state.
    let mut reqs: Vec<Option<Request>> = Vec::new();
    let mut r_result: Vec<Option<Got>> = Vec::new();
    let mut sends = Vec::new();
    let mut next_msg = 0u32;

    for s in steps {
        match s {
            Step::Post { tag, mask } => {
                let i = m_result.len();
                match m_unexp
                    .iter()
                    .position(|&(t, _)| (t & mask) == (tag & mask))
                {
                    Some(u) => m_result.push(Some(Got::Msg(m_unexp.remove(u).1))),
                    None => {
                        m_expected.push((tag, mask, i));
                        m_result.push(None);
                    }
                }
                match b.tag_recv(vec![0; 200_000], tag, mask).unwrap() {
                    Op::Done(c) => {
                        let buf = c.buf.unwrap();
                        reqs.push(None);
                        r_result.push(Some(Got::Msg(u32::from_le_bytes(
                            buf[..4].try_into().unwrap(),
                        ))));
                    }
                    Op::Pending(r) => {
                        reqs.push(Some(r));
                        r_result.push(None);
                    }
                }
            }
            Step::Send { tag, len } => {
                let idx = next_msg;
                next_msg += 1;
                match m_expected
                    .iter()
                    .position(|&(t, m, _)| (t & m) == (tag & m))
                {
                    Some(e) => {
                        let (_, _, ri) = m_expected.remove(e);
                        m_result[ri] = Some(Got::Msg(idx));
                    }
                    None => m_unexp.push((tag, idx)),
                }
                sends.push(a.tag_send(ab, tag, &body(idx, len)).unwrap());
            }
            Step::Cancel { nth } => {
                if m_expected.is_empty() {
                    continue;
                }
                let (_, _, ri) = m_expected.remove(nth % m_expected.len());
                m_result[ri] = Some(Got::Canceled);
                let r = reqs[ri].take().expect("model says pending");
                prop_assert!(
                    b.request_cancel(&r).unwrap(),
                    "real receive {ri} could not be canceled"
                );
                let c = b.request_take(r).unwrap();
                prop_assert_eq!(c.status, Err(ucp::Error::Canceled));
                r_result[ri] = Some(Got::Canceled);
            }
        }
        pump(&mut a, &mut b);
        // Collect real completions.
        for (i, slot) in reqs.iter_mut().enumerate() {
            if let Some(r) = slot.take() {
                match b.request_take(r) {
                    Ok(c) => {
                        prop_assert_eq!(&c.status, &Ok(()));
                        let buf = c.buf.unwrap();
                        let idx = u32::from_le_bytes(buf[..4].try_into().unwrap());
                        prop_assert!(buf[4..c.len].iter().all(|&x| x == (idx % 251) as u8));
                        r_result[i] = Some(Got::Msg(idx));
                    }
                    Err(r) => *slot = Some(r),
                }
            }
        }
        prop_assert_eq!(&r_result, &m_result);
    }
    // Drain the unexpected queue with wildcards: same order as the model's.
    for &(_, idx) in &m_unexp {
        let op = b.tag_recv(vec![0; 200_000], 0, 0).unwrap();
        let c = match op {
            Op::Done(c) => c,
            Op::Pending(r) => {
                pump(&mut a, &mut b);
                b.request_take(r).expect("drained")
            }
        };
        let buf = c.buf.unwrap();
        prop_assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), idx);
    }
    for s in sends {
        if let Op::Pending(r) = s {
            pump(&mut a, &mut b);
            prop_assert_eq!(a.request_take(r).expect("send done").status, Ok(()));
        }
    }
    prop_assert!(
        b.tag_offload_stats().posting,
        "{} does not post receives to the transport",
        tl
    );
    note_offload(
        name,
        b.tag_offload_stats().matched,
        a.tag_offload_stats().matched_rndv,
    );
    Ok(())
}

/// A worker with shared memory and tcp whose peer is reachable only by tcp posts its receives
/// to tcp (the interface its endpoint uses), so the tcp transport matches them.
#[test]
fn ucp_tag_offload_follows_the_endpoints_interface() {
    let ctx = |tls: &[&str]| {
        Context::new(ContextParams {
            features: Features::TAG,
            config: Some(UcpConfig {
                tls: tls.iter().map(|s| s.to_string()).collect(),
                net_devices: vec!["lo".into()],
                rndv_thresh: Some(100_000),
                keepalive_interval: None,
                // Every rendezvous size by the transport's tag offload (no AM-pipeline range).
                rndv_am_max: Some(0),
                ..Default::default()
            }),
        })
        .unwrap()
    };
    let (ca, cb) = (ctx(&["tcp"]), ctx(&["posix", "tcp"]));
    let mut a = Worker::new(&ca).unwrap();
    let mut b = Worker::new(&cb).unwrap();
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    pump(&mut a, &mut b);
    // One message so the receiver's reverse endpoint (over tcp) exists.
    let _ = a.tag_send(ab, 99, b"hello").unwrap();
    pump(&mut a, &mut b);
    match b.tag_recv(vec![0; 16], 99, u64::MAX).unwrap() {
        Op::Done(c) => assert_eq!(c.status, Ok(())),
        Op::Pending(r) => {
            wait(&mut a, &mut b, r);
        }
    }
    let len = 20_000;
    let r = match b.tag_recv(vec![0; len], 7, u64::MAX).unwrap() {
        Op::Pending(r) => r,
        Op::Done(_) => panic!("nothing was sent yet"),
    };
    assert_eq!(b.tag_offload_stats().posted, 1);
    let data = body(1, len);
    let _ = a.tag_send(ab, 7, &data).unwrap();
    let c = wait(&mut a, &mut b, r);
    assert_eq!(c.status, Ok(()));
    assert!(c.buf.unwrap()[..len] == data[..]);
    assert_eq!(
        b.tag_offload_stats().matched,
        1,
        "the tcp message was not matched by the tcp transport"
    );
}

/// Over tcp with the default thresholds, tag offload sends eager messages up to 64 KiB (the
/// payload lands straight in the posted buffer, one message instead of a rendezvous round
/// trip) and rendezvous above; a synchronous send keeps the ordinary threshold; the protocol
/// table says so.
#[test]
fn ucp_tcp_offload_eager_reaches_64k() {
    let (mut a, mut b, ab) = pair_with("tcp", None);
    let t = a.ep_proto_info(ab).unwrap();
    assert!(
        t.contains("1025 .. 65536") && t.contains("tag offload eager"),
        "{t}"
    );
    assert!(t.contains("65537 .. "), "{t}");
    let send = |a: &mut Worker, b: &mut Worker, len: usize, sync: bool| {
        let r = match b.tag_recv(vec![0; len], 3, u64::MAX).unwrap() {
            Op::Pending(r) => r,
            Op::Done(_) => panic!("nothing was sent yet"),
        };
        let data = body(len as u32, len);
        let s = if sync {
            a.tag_send_sync(ab, 3, &data).unwrap()
        } else {
            a.tag_send(ab, 3, &data).unwrap()
        };
        let c = wait(a, b, r);
        assert_eq!((c.status, c.len), (Ok(()), len));
        assert!(c.buf.unwrap() == data, "{len} bytes differ");
        if let Op::Pending(r) = s {
            let start = Instant::now();
            let mut r = r;
            loop {
                a.progress();
                b.progress();
                match a.request_take(r) {
                    Ok(c) => break assert_eq!(c.status, Ok(())),
                    Err(back) => r = back,
                }
                assert!(start.elapsed() < Duration::from_secs(30), "watchdog: send");
            }
        }
        a.tag_offload_stats()
    };
    let st = send(&mut a, &mut b, 40_000, false);
    assert_eq!(
        (st.sent, st.sent_rndv),
        (1, 0),
        "40 000 B not eager: {st:?}"
    );
    let st = send(&mut a, &mut b, 65_536, false);
    assert_eq!((st.sent, st.sent_rndv), (2, 0), "64 KiB not eager: {st:?}");
    let st = send(&mut a, &mut b, 65_537, false);
    assert_eq!(
        (st.sent, st.sent_rndv),
        (2, 1),
        "64 KiB + 1 not rendezvous: {st:?}"
    );
    // Synchronous: the ordinary rendezvous threshold (tcp's is below 40 000 B), not offload.
    let before = a.tag_offload_stats();
    let st = send(&mut a, &mut b, 40_000, true);
    assert_eq!(
        (st.sent, st.sent_rndv),
        (before.sent, before.sent_rndv),
        "{st:?}"
    );
}
