//! rc_verbs tests. Those needing a device print a note and return when none exists (as on a
//! host without RDMA); `tests/rdma-vm/ci.sh` runs them for real on Soft-RoCE inside a VM.

use super::*;
use super::{RcVerbsEp, RcVerbsIface};
use crate::{AtomicOp, Endpoint, EpId, EventFlags, EventSink, Iface, IfaceFlags, Iov};
use crate::{CompletionId, PendingId};
use kit::{Sides, Sink};
use std::ptr::NonNull;
use std::time::{Duration, Instant};
use ucs::config::ConfigVar;
use ucs::Outcome;

fn device() -> Option<String> {
    kit::device::<RcVerbs>()
}

fn cfg() -> RcConfig {
    RcConfig {
        tx_queue_len: 64,
        rx_queue_len: 16,
        seg_size: 2048,
        tx_bufs: 64,
        moderation: 8,
        max_inline: 64,
        cq_len: 1024,
        timeout: ib_timeout_exponent(Duration::from_millis(20)),
        retry_count: 2,
        rnr_retry: 7,
        tm_split: 4096,
    }
}

/// Progresses until `done` holds; the watchdog fails the test after 30 s instead of hanging.
fn wait(
    iface: &mut RcVerbsIface,
    sink: &mut Sink,
    what: &str,
    mut done: impl FnMut(&Sink) -> bool,
) {
    let start = Instant::now();
    while !done(sink) {
        iface.progress(sink);
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
    }
}

struct Pair {
    md: RcVerbsMd,
    iface: RcVerbsIface,
    a: RcVerbsEp,
    b: RcVerbsEp,
}

/// Two endpoints of one interface connected to each other (loopback through the device).
fn pair(dev: &str, cfg: RcConfig) -> Pair {
    let md = RcVerbs::open_md(dev).unwrap();
    let mut iface = RcVerbsIface::open(&md, dev, cfg).unwrap();
    let mut a = iface.ep_create().unwrap();
    let mut b = iface.ep_create().unwrap();
    let da = iface.device_address().to_vec();
    let (aa, ba) = (a.ep_address().unwrap(), b.ep_address().unwrap());
    a.connect_to_ep(&da, &ba).unwrap();
    b.connect_to_ep(&da, &aa).unwrap();
    Pair { md, iface, a, b }
}

#[test]
fn config_vars_are_registered() {
    let _ = RcVerbs::devices();
    for v in RC_VERBS_VARS.iter() {
        assert!(
            ucs::config::find(v.name).is_some(),
            "{} not registered",
            v.name
        );
        assert!(!v.doc.is_empty());
    }
    assert!(ucs::config::find("RUCX_IB_GID_INDEX").is_some());
}

#[test]
fn bad_config_values_name_the_variable() {
    const V: ConfigVar = ConfigVar {
        name: "RC_TEST_ONLY_RANGE",
        default: "5",
        doc: "test",
    };
    assert_eq!(uint_var(&V, 1, 10).unwrap(), 5);
    std::env::set_var("RUCX_RC_TEST_ONLY_RANGE", "11");
    let err = uint_var(&V, 1, 10).unwrap_err().to_string();
    std::env::set_var("RUCX_RC_TEST_ONLY_RANGE", "auto");
    let err_auto = uint_var(&V, 1, 10).unwrap_err().to_string();
    std::env::remove_var("RUCX_RC_TEST_ONLY_RANGE");
    assert!(
        err.contains("RUCX_RC_TEST_ONLY_RANGE") && err.contains("1..=10"),
        "{err}"
    );
    assert!(err_auto.contains("not auto"), "{err_auto}");
}

#[test]
fn config_helpers() {
    assert_eq!(ib_timeout_exponent(Duration::from_secs(1)), 18);
    assert_eq!(ib_timeout_exponent(Duration::ZERO), 1);
    assert_eq!(ib_timeout_exponent(Duration::from_secs(100_000)), 31);
    assert_eq!(split_device("rxe0:1").unwrap(), ("rxe0", 1));
    assert_eq!(split_device("mlx5_0:2").unwrap(), ("mlx5_0", 2));
    assert!(split_device("rxe0").is_err());
    assert!(split_device("rxe0:0").is_err());
    assert!(split_device(":1").is_err());
    assert!(split_device("rxe0:x").is_err());
    assert_eq!(
        gid_text(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 83, 0, 1]),
        "::ffff:10.83.0.1"
    );
}

#[test]
fn devices_list_or_say_why() {
    match RcVerbs::devices() {
        Ok(devs) => {
            for d in &devs {
                assert!(d.name.contains(':'), "{}", d.name);
                assert!(d.details.contains("MTU"), "{}", d.details);
                assert!(d.details.contains("GID index"), "{}", d.details);
            }
        }
        Err(why) => {
            assert!(why.contains("libibverbs") || why.contains("RDMA"), "{why}");
            let err = crate::registry::open("rc_verbs", "rxe0:1")
                .err()
                .expect("must fail");
            assert!(err.to_string().contains("rc_verbs"), "{err}");
        }
    }
}

#[test]
fn open_rejects_bad_device_names() {
    assert!(matches!(
        RcVerbs::open_md("nonexistent_dev0:1"),
        Err(Error::NoDevice(_))
    ));
    assert!(matches!(RcVerbs::open_md("bad"), Err(Error::NoDevice(_))));
}

#[test]
fn roce_gid_is_ipv4_mapped_v2() {
    let Some(dev) = device() else { return };
    let md = RcVerbs::open_md(&dev).unwrap();
    if md.dev.is_roce() && GID_INDEX.uint_or_auto().unwrap().is_none() {
        assert_eq!(
            &md.dev.gid[..12],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
        );
        println!(
            "{dev}: GID index {} = {}",
            md.dev.gid_index,
            gid_text(&md.dev.gid)
        );
    }
}

#[test]
fn caps_say_what_works() {
    let Some(dev) = device() else { return };
    let p = pair(&dev, cfg());
    let attr = p.iface.attr();
    assert!(attr
        .flags
        .contains(IfaceFlags::AM_SHORT | IfaceFlags::AM_BCOPY | IfaceFlags::AM_ZCOPY));
    assert!(attr
        .flags
        .contains(IfaceFlags::PUT_ZCOPY | IfaceFlags::GET_ZCOPY | IfaceFlags::CONNECT_TO_EP));
    assert!(attr.flags.contains(
        IfaceFlags::TAG_EAGER_SHORT
            | IfaceFlags::TAG_EAGER_BCOPY
            | IfaceFlags::TAG_EAGER_ZCOPY
            | IfaceFlags::TAG_RNDV_ZCOPY
    ));
    assert_eq!(
        attr.tag.eager_max_bcopy,
        2048 - crate::rc_verbs::tag::wire::EagerHdr::LEN
    );
    assert!(!attr.tag.eager_saves_copy);
    assert!(!attr.flags.contains(IfaceFlags::CONNECT_TO_IFACE));
    assert_eq!(attr.am.max_bcopy, 2047);
    assert!(attr.am.max_short >= 8);
    assert_eq!(attr.ep_addr_len, wire::EpAddr::LEN);
    assert_eq!(p.a.ep_address().unwrap().len(), wire::EpAddr::LEN);
    assert!(p.iface.event_fd().is_some());
}

#[test]
fn am_boundary_sizes_arrive_in_order() {
    let Some(dev) = device() else { return };
    let mut p = pair(&dev, cfg());
    let attr = p.iface.attr().clone();
    let mut sink = Sink::default();
    let mut expect: Vec<(u8, Vec<u8>)> = Vec::new();
    let pat = |n: usize, s: u8| {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(7).wrapping_add(s))
            .collect::<Vec<u8>>()
    };
    for n in [0, 1, attr.am.max_short - 8] {
        let body = pat(n, 1);
        assert_eq!(
            p.a.am_short(3, 0x1122_3344_5566_7788, &body).unwrap(),
            Outcome::DONE
        );
        let mut m = 0x1122_3344_5566_7788u64.to_le_bytes().to_vec();
        m.extend_from_slice(&body);
        expect.push((3, m));
    }
    assert!(matches!(
        p.a.am_short(3, 0, &vec![0; attr.am.max_short - 7]),
        Err(Error::MessageTooLong { .. })
    ));
    assert!(p.a.am_short(AM_ID_MAX_FOR_TEST, 0, &[]).is_err());
    let parts: [&[u8]; 3] = [b"ab", b"", b"cde"];
    assert_eq!(p.a.am_short_iov(4, &parts).unwrap(), Outcome::DONE);
    expect.push((4, b"abcde".to_vec()));
    for n in [0, 1, attr.am.max_bcopy] {
        let body = pat(n, 2);
        let r = p.a.am_bcopy(5, |buf| {
            buf[..n].copy_from_slice(&body);
            n
        });
        assert_eq!(r.unwrap(), Outcome::Done(n));
        expect.push((5, body));
    }
    let r = p.a.am_bcopy(5, |buf| buf.len() + 1);
    assert!(matches!(r, Err(Error::MessageTooLong { .. })));
    let mem = p.md.mem_alloc(attr.am.max_zcopy).unwrap();
    mem.write(0, &pat(attr.am.max_zcopy, 3)).unwrap();
    let hdr = pat(attr.am.max_hdr, 4);
    let iov = [
        Iov::new(&mem, 0, 10).unwrap(),
        Iov::new(&mem, 10, attr.am.max_zcopy - 10).unwrap(),
    ];
    assert_eq!(
        p.a.am_zcopy(6, &hdr, &iov, CompletionId(77)).unwrap(),
        Outcome::InProgress
    );
    let mut m = hdr.clone();
    m.extend_from_slice(&pat(attr.am.max_zcopy, 3));
    expect.push((6, m));
    let n = expect.len();
    wait(&mut p.iface, &mut sink, "active messages", |s| {
        s.ams.len() == n && !s.comps.is_empty()
    });
    assert_eq!(sink.ams, expect);
    assert_eq!(sink.comps.len(), 1);
    assert_eq!(sink.comps[0].0, 77);
    assert!(sink.comps[0].1.is_ok());
    assert!(sink.errors.is_empty());
}

const AM_ID_MAX_FOR_TEST: u8 = crate::AM_ID_MAX;

#[test]
fn credits_bound_outstanding_messages_and_pending_resumes() {
    let Some(dev) = device() else { return };
    let c = cfg();
    let rx = c.rx_queue_len as usize;
    let mut p = pair(&dev, c);
    let mut sent = 0;
    loop {
        match p.a.am_short(1, sent as u64, &[]).unwrap() {
            Outcome::Done(()) => sent += 1,
            Outcome::NoResource => break,
            Outcome::InProgress => unreachable!("am_short is never in progress"),
        }
        assert!(
            sent <= rx,
            "sent more messages than the peer has receive buffers"
        );
    }
    assert_eq!(sent, rx, "credits must equal the peer's posted receives");
    p.a.pending_add(PendingId(42)).unwrap();
    assert!(
        p.a.am_short(1, 0, &[]).unwrap().is_no_resource(),
        "pending requests keep order"
    );
    let mut sink = Sink::default();
    wait(
        &mut p.iface,
        &mut sink,
        "credits and pending dispatch",
        |s| !s.pend.is_empty(),
    );
    assert_eq!(sink.pend, vec![(p.a.id(), 42)]);
    assert_eq!(sink.ams.len(), rx);
    for (i, (id, data)) in sink.ams.iter().enumerate() {
        assert_eq!(*id, 1);
        assert_eq!(data[..8], (i as u64).to_le_bytes());
    }
    // Resources are back: more messages go out, and pending_add says so.
    assert!(matches!(
        p.a.pending_add(PendingId(43)),
        Err(Error::Busy(_))
    ));
    for i in 0..(3 * rx) {
        loop {
            match p
                .a
                .am_bcopy(2, |b| {
                    b[..8].copy_from_slice(&(i as u64).to_le_bytes());
                    8
                })
                .unwrap()
            {
                Outcome::Done(_) => break,
                _ => {
                    p.iface.progress(&mut sink);
                }
            }
        }
    }
    wait(&mut p.iface, &mut sink, "second batch", |s| {
        s.ams.len() == 4 * rx
    });
    let second: Vec<u64> = sink.ams[rx..]
        .iter()
        .map(|(_, d)| u64::from_le_bytes(d[..8].try_into().unwrap()))
        .collect();
    assert_eq!(second, (0..3 * rx as u64).collect::<Vec<_>>());
}

#[test]
fn credit_count_from_immediate_data_wraps() {
    use super::state::advance_count;
    assert_eq!(advance_count(0, 0), 0);
    assert_eq!(advance_count(0, 5), 5);
    assert_eq!(advance_count(5, 5), 5);
    assert_eq!(advance_count(0xffff_fffe, 1), 0x1_0000_0001);
    assert_eq!(advance_count(0x7_ffff_ffff, 3), 0x8_0000_0003);
}

#[test]
fn ping_pong_carries_credits_in_immediate_data() {
    let Some(dev) = device() else { return };
    let c = cfg();
    let rx = c.rx_queue_len as usize;
    let mut p = pair(&dev, c);
    let mut sink = Sink::default();
    // Many times the receive queue, one message each way per round: each reply carries the
    // replier's reposted count (batches of reposts included), so credits never run out and
    // no credit write is posted.
    let rounds = 5 * rx;
    for i in 0..rounds {
        assert_eq!(
            p.a.am_short(1, i as u64, &[7; 8]).unwrap(),
            Outcome::DONE,
            "round {i}: a has no credits"
        );
        wait(&mut p.iface, &mut sink, "ping", |s| {
            s.ams.len() == 2 * i + 1
        });
        assert_eq!(
            p.b.am_short(2, i as u64, &[]).unwrap(),
            Outcome::DONE,
            "round {i}: b has no credits"
        );
        wait(&mut p.iface, &mut sink, "pong", |s| {
            s.ams.len() == 2 * i + 2
        });
    }
    for (n, (id, data)) in sink.ams.iter().enumerate() {
        assert_eq!(*id, 1 + (n % 2) as u8);
        assert_eq!(data[..8], ((n / 2) as u64).to_le_bytes());
    }
    let inner = p.a.inner.borrow();
    for ep in [&p.a, &p.b] {
        let st = &inner.eps[ep.key];
        assert_eq!(st.am_sent, rounds as u64);
        assert_eq!(
            st.next_seq as usize, rounds,
            "work requests posted beyond the active messages (credit writes)"
        );
        assert_eq!(st.rx_reposted, rounds as u64);
        // Receives are reposted in batches: the last report may lag by one batch.
        assert!(st.am_credits() >= (rx - inner.rx_batch) as u64);
    }
}

#[test]
fn receives_are_reposted_in_batches() {
    let Some(dev) = device() else { return };
    let mut p = pair(&dev, cfg());
    let batch = p.a.inner.borrow().rx_batch;
    assert!(batch > 1, "the test configuration reposts in batches");
    let mut sink = Sink::default();
    for i in 0..batch - 1 {
        assert_eq!(p.a.am_short(1, i as u64, &[]).unwrap(), Outcome::DONE);
    }
    wait(&mut p.iface, &mut sink, "a batch but one", |s| {
        s.ams.len() == batch - 1
    });
    {
        let inner = p.a.inner.borrow();
        let st = &inner.eps[p.b.key];
        assert_eq!(st.rx_reposted, 0, "reposted before a batch was complete");
        assert_eq!(st.rx_free.len(), batch - 1);
    }
    assert_eq!(p.a.am_short(1, 99, &[]).unwrap(), Outcome::DONE);
    wait(&mut p.iface, &mut sink, "a whole batch", |s| {
        s.ams.len() == batch
    });
    let inner = p.a.inner.borrow();
    let st = &inner.eps[p.b.key];
    assert_eq!(
        st.rx_reposted, batch as u64,
        "one chained repost of the batch"
    );
    assert!(st.rx_free.is_empty());
    // The buffers went back to the queue: a full queue's worth of messages still arrives.
    drop(inner);
    for i in 0..cfg().rx_queue_len as u64 {
        loop {
            match p.a.am_short(1, i, &[]).unwrap() {
                Outcome::Done(()) => break,
                _ => {
                    p.iface.progress(&mut sink);
                }
            }
        }
    }
    let want = batch + cfg().rx_queue_len as usize;
    wait(&mut p.iface, &mut sink, "a queue's worth more", |s| {
        s.ams.len() == want
    });
}

#[test]
fn put_get_and_flush() {
    let Some(dev) = device() else { return };
    let mut p = pair(&dev, cfg());
    let mut sink = Sink::default();
    let target = p.md.mem_alloc(8192).unwrap();
    let mut packed = Vec::new();
    p.md.rkey_pack(&target, &mut packed).unwrap();
    let rkey = p.md.rkey_unpack(&packed).unwrap();
    let base = target.addr() as u64;
    assert!(p.md.rkey_unpack(&packed[..5]).is_err());
    assert_eq!(
        p.a.put_short(b"short!", base, &rkey).unwrap(),
        Outcome::DONE
    );
    let r = p.a.put_bcopy(
        |b| {
            b[..5].copy_from_slice(b"bcopy");
            5
        },
        base + 100,
        &rkey,
    );
    assert_eq!(r.unwrap(), Outcome::Done(5));
    let src = p.md.mem_alloc(4000).unwrap();
    let data: Vec<u8> = (0..4000u32).map(|i| (i % 251) as u8).collect();
    src.write(0, &data).unwrap();
    assert_eq!(
        p.a.put_zcopy(&[Iov::whole(&src)], base + 1000, &rkey, CompletionId(5))
            .unwrap(),
        Outcome::InProgress
    );
    assert!(matches!(
        p.a.put_short(b"x", base + 8192, &rkey),
        Err(Error::RemoteAccess(_))
    ));
    match p.a.flush(CompletionId(6)).unwrap() {
        Outcome::InProgress => wait(&mut p.iface, &mut sink, "flush", |s| {
            s.comps.iter().any(|c| c.0 == 6)
        }),
        o => assert_eq!(o, Outcome::DONE),
    }
    assert!(sink.comps.iter().any(|c| c.0 == 5 && c.1.is_ok()));
    let mut got = vec![0u8; 6];
    target.read(0, &mut got).unwrap();
    assert_eq!(got, b"short!");
    target.read(100, &mut got[..5]).unwrap();
    assert_eq!(&got[..5], b"bcopy");
    let mut big = vec![0u8; 4000];
    target.read(1000, &mut big).unwrap();
    assert_eq!(big, data);
    // Reads back.
    let mut unpack = |_: &[u8]| panic!("get_bcopy data come through the sink");
    assert_eq!(
        p.b.get_bcopy(6, base, &rkey, CompletionId(7), &mut unpack)
            .unwrap(),
        Outcome::InProgress
    );
    let dst = p.md.mem_alloc(4000).unwrap();
    assert_eq!(
        p.b.get_zcopy(&[Iov::whole(&dst)], base + 1000, &rkey, CompletionId(8))
            .unwrap(),
        Outcome::InProgress
    );
    wait(&mut p.iface, &mut sink, "gets", |s| {
        s.comps.iter().filter(|c| c.0 == 7 || c.0 == 8).count() == 2
    });
    assert_eq!(sink.gets, vec![(7, b"short!".to_vec())]);
    dst.read(0, &mut big).unwrap();
    assert_eq!(big, data);
    // Interface flush with nothing outstanding is immediate.
    let mut tries = 0;
    loop {
        match p.iface.flush(CompletionId(9)).unwrap() {
            Outcome::Done(()) => break,
            Outcome::InProgress => {
                wait(&mut p.iface, &mut sink, "iface flush", |s| {
                    s.comps.iter().any(|c| c.0 == 9)
                });
                break;
            }
            Outcome::NoResource => {
                p.iface.progress(&mut sink);
                tries += 1;
                assert!(tries < 1_000_000);
            }
        }
    }
    assert!(sink.errors.is_empty(), "{:?}", sink.errors);
}

#[test]
fn atomics_fetch_add_and_cswap() {
    let Some(dev) = device() else { return };
    let mut p = pair(&dev, cfg());
    let attr = p.iface.attr().clone();
    let mut sink = Sink::default();
    let target = p.md.mem_alloc(64).unwrap();
    target.write(8, &100u64.to_ne_bytes()).unwrap();
    let mut packed = Vec::new();
    p.md.rkey_pack(&target, &mut packed).unwrap();
    let rkey = p.md.rkey_unpack(&packed).unwrap();
    let at = target.addr() as u64 + 8;
    if !attr.flags.contains(IfaceFlags::ATOMIC_DEVICE) {
        println!("note: device reports no atomics");
        return;
    }
    assert_eq!(
        p.a.atomic64_fetch(AtomicOp::Add, 5, at, &rkey, CompletionId(1))
            .unwrap(),
        Outcome::InProgress
    );
    wait(&mut p.iface, &mut sink, "fetch-add", |s| s.comps.len() == 1);
    assert_eq!(sink.comps[0], (1, Ok(100)));
    assert_eq!(
        p.a.atomic_cswap64(105, 7, at, &rkey, CompletionId(2))
            .unwrap(),
        Outcome::InProgress
    );
    wait(&mut p.iface, &mut sink, "cswap", |s| s.comps.len() == 2);
    assert_eq!(sink.comps[1], (2, Ok(105)));
    assert_eq!(
        p.a.atomic_cswap64(999, 1, at, &rkey, CompletionId(3))
            .unwrap(),
        Outcome::InProgress
    );
    wait(&mut p.iface, &mut sink, "failed cswap", |s| {
        s.comps.len() == 3
    });
    assert_eq!(sink.comps[2], (3, Ok(7)));
    assert_eq!(
        p.a.atomic64_post(AtomicOp::Add, 3, at, &rkey).unwrap(),
        Outcome::DONE
    );
    if p.a.flush(CompletionId(4)).unwrap() == Outcome::InProgress {
        wait(&mut p.iface, &mut sink, "flush", |s| {
            s.comps.iter().any(|c| c.0 == 4)
        });
    }
    let mut v = [0u8; 8];
    target.read(8, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 10);
    assert!(matches!(
        p.a.atomic64_post(AtomicOp::Xor, 1, at, &rkey),
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        p.a.atomic32_post(AtomicOp::Add, 1, at, &rkey),
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        p.a.atomic64_fetch(AtomicOp::Add, 1, at + 1, &rkey, CompletionId(9)),
        Err(Error::InvalidParam(_))
    ));
}

#[test]
fn bad_rkey_fails_the_endpoint_not_the_process() {
    let Some(dev) = device() else { return };
    let mut p = pair(&dev, cfg());
    let mut sink = Sink::default();
    let target = p.md.mem_alloc(4096).unwrap();
    let base = target.addr() as u64;
    let mut packed = Vec::new();
    p.md.rkey_pack(&target, &mut packed).unwrap();
    let good = p.md.rkey_unpack(&packed).unwrap();
    let bogus = crate::RemoteKey::unmapped(base, 4096, (good.tl_value as u32 ^ 0x00ab_cd00) as u64);
    let src = p.md.mem_alloc(64).unwrap();
    assert_eq!(
        p.a.put_zcopy(&[Iov::whole(&src)], base, &bogus, CompletionId(11))
            .unwrap(),
        Outcome::InProgress
    );
    wait(&mut p.iface, &mut sink, "remote access error", |s| {
        !s.errors.is_empty() && !s.comps.is_empty()
    });
    assert_eq!(sink.comps[0].0, 11);
    assert!(sink.comps[0].1.is_err(), "{:?}", sink.comps);
    // The requester fails; the responder's QP goes to error too and may report it. Once each.
    assert_eq!(sink.errors.iter().filter(|e| e.0 == p.a.id()).count(), 1);
    assert!(sink
        .errors
        .iter()
        .all(|e| e.0 == p.a.id() || e.0 == p.b.id()));
    println!("endpoint error: {}", sink.errors[0].1);
    assert!(
        p.a.am_short(0, 0, &[]).is_err(),
        "a failed endpoint refuses new operations"
    );
    // Reported once, and the interface still works for a fresh pair.
    for _ in 0..100 {
        p.iface.progress(&mut sink);
    }
    assert_eq!(sink.errors.iter().filter(|e| e.0 == p.a.id()).count(), 1);
    assert!(sink.errors.len() <= 2);
    let mut c = p.iface.ep_create().unwrap();
    let mut d = p.iface.ep_create().unwrap();
    let da = p.iface.device_address().to_vec();
    let (ca, dd) = (c.ep_address().unwrap(), d.ep_address().unwrap());
    c.connect_to_ep(&da, &dd).unwrap();
    d.connect_to_ep(&da, &ca).unwrap();
    assert_eq!(c.am_short(2, 9, b"ok").unwrap(), Outcome::DONE);
    wait(&mut p.iface, &mut sink, "message on the new pair", |s| {
        !s.ams.is_empty()
    });
    assert_eq!(sink.ams[0].0, 2);
}

#[test]
fn event_fd_wakes_on_receive() {
    let Some(dev) = device() else { return };
    let mut p = pair(&dev, cfg());
    let mut sink = Sink::default();
    while p.iface.progress(&mut sink) > 0 {}
    let fd = p.iface.event_fd().unwrap();
    let mut armed = false;
    for _ in 0..1000 {
        match p.iface.event_arm(EventFlags::RECV | EventFlags::SEND_COMP) {
            Ok(()) => {
                armed = true;
                break;
            }
            Err(Error::Busy(_)) => {
                p.iface.progress(&mut sink);
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(armed);
    assert_eq!(p.a.am_short(7, 1, b"wake").unwrap(), Outcome::DONE);
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polling one valid fd with a timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 20_000) };
    assert_eq!(n, 1, "event fd did not become readable");
    wait(&mut p.iface, &mut sink, "message after wake-up", |s| {
        !s.ams.is_empty()
    });
    assert_eq!(sink.ams[0].0, 7);
}

#[test]
fn connect_rejects_garbage_addresses() {
    let Some(dev) = device() else { return };
    let md = RcVerbs::open_md(&dev).unwrap();
    let mut iface = RcVerbsIface::open(&md, &dev, cfg()).unwrap();
    let mut a = iface.ep_create().unwrap();
    let da = iface.device_address().to_vec();
    let aa = a.ep_address().unwrap();
    assert!(matches!(
        a.connect_to_ep(&da[..3], &aa),
        Err(Error::Wire(_))
    ));
    assert!(matches!(
        a.connect_to_ep(&da, &aa[..10]),
        Err(Error::Wire(_))
    ));
    assert!(
        matches!(a.am_short(0, 0, &[]), Err(Error::InvalidParam(_))),
        "not connected yet"
    );
    assert!(iface.ep_create_connected(&da, &[]).is_err());
}

/// The conformance-suite fixture for rc_verbs: two interfaces on the first rc_verbs device
/// (Soft-RoCE in the test VM), endpoints connected endpoint-to-endpoint. Without a device
/// `new` gives `NoDevice` and the suite skips with a note.
pub(crate) struct RcFixture {
    // Field order is drop order: endpoints before their interfaces.
    eps: Vec<RcVerbsEp>,
    peers: Vec<RcVerbsEp>,
    sides: Sides<RcVerbs>,
}

impl crate::testing::Fixture for RcFixture {
    type Md = RcVerbsMd;
    type Iface = RcVerbsIface;
    type Ep = RcVerbsEp;

    fn new() -> Result<Self> {
        let mut fx = RcFixture {
            eps: Vec::new(),
            peers: Vec::new(),
            sides: Sides::open()?,
        };
        let e01 = fx.connect(0, 1)?;
        let e10 = fx.connect(1, 0)?;
        fx.eps = vec![e01, e10];
        Ok(fx)
    }
    fn num_ifaces(&self) -> usize {
        self.sides.len()
    }
    fn add_iface(&mut self) -> Result<usize> {
        self.sides.add()
    }
    fn connect(&mut self, from: usize, to: usize) -> Result<RcVerbsEp> {
        let dev_to = self.sides.iface_ref(to).device_address().to_vec();
        let dev_from = self.sides.iface_ref(from).device_address().to_vec();
        let mut a = self.sides.iface(from).ep_create()?;
        let mut b = self.sides.iface(to).ep_create()?;
        a.connect_to_ep(&dev_to, &b.ep_address()?)?;
        b.connect_to_ep(&dev_from, &a.ep_address()?)?;
        self.peers.push(b);
        Ok(a)
    }
    fn iface(&mut self, i: usize) -> &mut RcVerbsIface {
        self.sides.iface(i)
    }
    fn md(&self, i: usize) -> &RcVerbsMd {
        self.sides.md(i)
    }
    fn ep(&mut self, from: usize) -> &mut RcVerbsEp {
        &mut self.eps[from]
    }
    fn progress<S: EventSink>(&mut self, i: usize, sink: &mut S) -> usize {
        self.sides.iface(i).progress(sink)
    }
}

mod conformance {
    crate::uct_conformance_tests!(suite, crate::rc_verbs::tests::RcFixture);
}

#[test]
fn registration_cache_hits_and_invalidates() {
    let Some(dev) = device() else { return };
    let md = RcVerbs::open_md(&dev).unwrap();
    let Some(before) = md.rcache_stats() else {
        println!("note: RUCX_RCACHE_ENABLE=n: registration cache off");
        return;
    };
    let mut buf = vec![0u8; 3 * 4096];
    let addr = NonNull::new(buf.as_mut_ptr()).unwrap();
    // SAFETY: `buf` outlives every handle below.
    let h1 = unsafe { md.mem_reg(addr, buf.len()) }.unwrap();
    // SAFETY: as above; a sub-range of the same buffer.
    let h2 = unsafe { md.mem_reg(NonNull::new(addr.as_ptr().wrapping_add(100)).unwrap(), 1000) }
        .unwrap();
    let after = md.rcache_stats().unwrap();
    assert_eq!(after.misses, before.misses + 1);
    assert_eq!(after.hits, before.hits + 1);
    let (mut k1, mut k2) = (Vec::new(), Vec::new());
    md.rkey_pack(&h1, &mut k1).unwrap();
    md.rkey_pack(&h2, &mut k2).unwrap();
    let (r1, r2) = (md.rkey_unpack(&k1).unwrap(), md.rkey_unpack(&k2).unwrap());
    assert_eq!(r1.tl_value, r2.tl_value, "the hit reuses the same MR");
    assert_eq!(r2.remote_base, addr.as_ptr() as u64 + 100);
    assert_eq!(r2.len, 1000);
    // Handles can move to other threads and drop there.
    std::thread::spawn(move || drop(h2)).join().unwrap();
    drop(h1);
    assert!(md.invalidate(addr.as_ptr() as usize, buf.len()) >= 1);
    // SAFETY: `buf` outlives the handle.
    let h3 = unsafe { md.mem_reg(addr, 10) }.unwrap();
    assert_eq!(
        md.rcache_stats().unwrap().misses,
        after.misses + 1,
        "invalidated: registers again"
    );
    drop(h3);
}

#[test]
fn full_send_queue_gives_no_resource_then_pending_resumes() {
    let Some(dev) = device() else { return };
    let mut c = cfg();
    c.tx_queue_len = 16;
    c.moderation = 4;
    let mut p = pair(&dev, c);
    let target = p.md.mem_alloc(64).unwrap();
    let mut packed = Vec::new();
    p.md.rkey_pack(&target, &mut packed).unwrap();
    let rkey = p.md.rkey_unpack(&packed).unwrap();
    let base = target.addr() as u64;
    let mut posted = 0u64;
    while p.a.put_short(&posted.to_le_bytes(), base, &rkey).unwrap() == Outcome::DONE {
        posted += 1;
        assert!(posted <= 16, "more writes posted than the send queue holds");
    }
    assert_eq!(
        posted, 16,
        "the send queue depth bounds the posted work requests"
    );
    p.a.pending_add(PendingId(5)).unwrap();
    let mut sink = Sink::default();
    wait(
        &mut p.iface,
        &mut sink,
        "pending dispatch after completions",
        |s| !s.pend.is_empty(),
    );
    assert_eq!(sink.pend, vec![(p.a.id(), 5)]);
    assert_eq!(
        p.a.put_short(&99u64.to_le_bytes(), base, &rkey).unwrap(),
        Outcome::DONE
    );
    if p.a.flush(CompletionId(1)).unwrap() == Outcome::InProgress {
        wait(&mut p.iface, &mut sink, "flush", |s| {
            s.comps.iter().any(|c| c.0 == 1)
        });
    }
    let mut v = [0u8; 8];
    target.read(0, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 99, "writes land in order");
}

pub(crate) mod kit;

mod failure;

mod tag;
