//! Tests of the multi-thread mode: many threads on one worker, against a single-thread peer.

use super::*;
use crate::{ContextParams, Features, UcpConfig, TAG_MASK_EXACT};
use std::sync::Mutex;

const WATCHDOG: Duration = Duration::from_secs(60);
const THREADS: u64 = 4;
const MSGS: u64 = 24;
const SIZES: [usize; 6] = [0, 1, 64, 1000, 9000, 70000];
const REPLY: u64 = 1 << 63;

fn ctx(features: Features) -> Context {
    Context::new(ContextParams {
        features: features | Features::WAKEUP,
        config: Some(UcpConfig {
            tls: vec!["posix".into()],
            keepalive_interval: Some(Duration::from_millis(100)),
            keepalive_timeout: Duration::from_secs(30),
            ..Default::default()
        }),
    })
    .expect("context")
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(seed) as u8)
        .collect()
}

fn done(r: MtRequest, what: &str) -> Completion {
    match r.wait_timeout(WATCHDOG) {
        Ok(c) => c,
        Err(_) => panic!("watchdog: {what} did not finish"),
    }
}

/// Waits for a plain worker's operation, with a watchdog.
fn finish(w: &mut Worker, op: Op) -> Completion {
    let mut req = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    let deadline = Instant::now() + WATCHDOG;
    loop {
        match w.request_take(req) {
            Ok(c) => return c,
            Err(r) => req = r,
        }
        if w.progress() == 0 {
            std::thread::yield_now();
        }
        assert!(
            Instant::now() < deadline,
            "watchdog: plain worker operation"
        );
    }
}

/// Several threads share one MtWorker and exchange tagged messages of every protocol size
/// with a plain worker over shared memory, which echoes each one transformed.
#[test]
fn mt_threads_share_worker_tag_echo_over_shm() {
    let mt = MtWorker::new(&ctx(Features::TAG)).expect("mt worker");
    let mut b = Worker::new(&ctx(Features::TAG)).expect("worker");
    let ba = b
        .ep_create(mt.address(), EpParams::default())
        .expect("ep b->a");
    let ab = mt.ep_create(b.address(), None).expect("ep a->b");
    let finished = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (mt, finished) = (&mt, &finished);
            s.spawn(move || {
                let _count = Finished(finished);
                for i in 0..MSGS {
                    let tag = t << 32 | i;
                    let len = SIZES[(i as usize + t as usize) % SIZES.len()];
                    let rx = mt.tag_recv(vec![0; len], tag | REPLY, TAG_MASK_EXACT);
                    let data = pattern(len, tag);
                    let tx = mt.tag_send(ab, tag, data.clone());
                    let c = done(tx, "send");
                    assert_eq!(c.status, Ok(()));
                    assert_eq!(c.buf.as_deref(), Some(&data[..]), "send buffer returned");
                    let c = done(rx, "receive");
                    assert_eq!(c.status, Ok(()), "thread {t} msg {i}");
                    assert_eq!((c.len, c.tag), (len, tag | REPLY));
                    let want: Vec<u8> = data.iter().map(|x| x ^ 0x5a).collect();
                    assert!(c.buf.unwrap() == want, "thread {t} msg {i}: data differ");
                }
            });
        }
        // The plain worker echoes every message back, transformed, on this thread.
        for _ in 0..THREADS * MSGS {
            let op = b.tag_recv(vec![0; 1 << 17], 0, 0).expect("recv");
            let c = finish(&mut b, op);
            assert_eq!(c.status, Ok(()));
            assert_eq!(c.tag & REPLY, 0);
            let mut buf = c.buf.unwrap();
            buf.truncate(c.len);
            assert!(buf == pattern(c.len, c.tag), "echo side: data differ");
            buf.iter_mut().for_each(|x| *x ^= 0x5a);
            let op = b.tag_send_vec(ba, c.tag | REPLY, buf).expect("send");
            assert_eq!(finish(&mut b, op).status, Ok(()));
        }
        // Keep progressing until every sender thread has its reply.
        let deadline = Instant::now() + WATCHDOG;
        while finished.load(Ordering::SeqCst) < THREADS && Instant::now() < deadline {
            b.progress();
            std::thread::yield_now();
        }
    });
}

/// Active messages a handler received: (user header, data).
type Inbox = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;

/// Counts a sender thread as finished when it ends (also by a failed assertion).
struct Finished<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Two MtWorkers, each shared by several threads: ping-pong with tag_send_sync one way.
#[test]
fn mt_two_shared_workers_ping_pong() {
    let a = MtWorker::new(&ctx(Features::TAG)).expect("a");
    let b = MtWorker::new(&ctx(Features::TAG)).expect("b");
    let ab = a.ep_create(b.address(), None).expect("ep a->b");
    let ba = b.ep_create(a.address(), None).expect("ep b->a");
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (a, b) = (&a, &b);
            s.spawn(move || {
                for i in 0..MSGS {
                    let tag = t << 32 | i;
                    let len = SIZES[i as usize % SIZES.len()];
                    let data = pattern(len, tag);
                    let tx = a.tag_send_sync(ab, tag, data.clone());
                    let c = done(b.tag_recv(vec![0; len], tag, TAG_MASK_EXACT), "b recv");
                    assert_eq!(c.status, Ok(()));
                    assert!(c.buf.as_deref() == Some(&data[..]), "a->b data differ");
                    assert_eq!(done(tx, "sync send").status, Ok(()));
                    let tx = b.tag_send(ba, tag, c.buf.unwrap());
                    let c = done(a.tag_recv(vec![0; len], tag, TAG_MASK_EXACT), "a recv");
                    assert!(c.buf.as_deref() == Some(&data[..]), "b->a data differ");
                    assert_eq!(done(tx, "send").status, Ok(()));
                }
            });
        }
    });
}

/// Probe (keep and remove), cancel of a posted receive, bad endpoints give typed errors.
#[test]
fn mt_probe_cancel_and_errors() {
    let a = MtWorker::new(&ctx(Features::TAG)).expect("a");
    let b = MtWorker::new(&ctx(Features::TAG)).expect("b");
    let ba = b.ep_create(a.address(), None).expect("ep b->a");
    let data = pattern(300, 7);
    let tx = b.tag_send(ba, 0x77, data.clone());
    assert_eq!(done(tx, "send").status, Ok(()));
    let deadline = Instant::now() + WATCHDOG;
    let info = loop {
        if let Some(i) = a.tag_probe(0x70, 0xf0, false).unwrap() {
            break i;
        }
        assert!(Instant::now() < deadline, "watchdog: probe");
        std::thread::yield_now();
    };
    assert_eq!((info.tag, info.len, info.msg.is_none()), (0x77, 300, true));
    let info = a
        .tag_probe(0x77, TAG_MASK_EXACT, true)
        .unwrap()
        .expect("still there");
    assert!(a.tag_probe(0x77, TAG_MASK_EXACT, false).unwrap().is_none());
    let c = done(a.tag_msg_recv(vec![0; 300], info.msg.unwrap()), "msg recv");
    assert_eq!(c.status, Ok(()));
    assert!(c.buf.unwrap() == data);

    let rx = a.tag_recv(vec![9; 16], 0x1234, TAG_MASK_EXACT);
    assert!(!rx.test());
    let rx = rx
        .wait_timeout(Duration::from_millis(20))
        .expect_err("nothing was sent: the receive is still posted");
    assert!(rx.cancel().unwrap(), "posted receive cancels");
    let c = done(rx, "canceled recv");
    assert_eq!(c.status, Err(Error::Canceled));
    assert_eq!(c.buf, Some(vec![9; 16]), "buffer given back");

    let bad = a.ep_create(&[1, 2, 3], None);
    assert!(bad.is_err(), "garbage address gives an error");
    let ep = a.ep_create(b.address(), None).unwrap();
    assert_eq!(
        done(a.ep_close(ep, CloseMode::Force), "close").status,
        Ok(())
    );
    let c = done(a.tag_send(ep, 1, vec![1]), "send on closed ep");
    assert!(
        c.status.is_err(),
        "stale endpoint handle is re-resolved: {c:?}"
    );
}

/// Active messages reach a `Send` handler on the progress thread; streams keep order.
#[test]
fn mt_am_and_stream() {
    let f = Features::TAG | Features::AM | Features::STREAM;
    let a = MtWorker::new(&ctx(f)).expect("a");
    let b = MtWorker::new(&ctx(f)).expect("b");
    let ab = a.ep_create(b.address(), None).expect("ep a->b");
    let ba = b.ep_create(a.address(), None).expect("ep b->a");
    let inbox: Inbox = Arc::default();
    let sink = inbox.clone();
    b.am_set_handler(
        9,
        Box::new(move |_, h, d| sink.lock().unwrap().push((h.to_vec(), d))),
    )
    .unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS as u8 {
            let a = &a;
            s.spawn(move || {
                let c = done(a.am_send(ab, 9, vec![t], pattern(5000, t as u64)), "am");
                assert_eq!(c.status, Ok(()));
            });
        }
    });
    let deadline = Instant::now() + WATCHDOG;
    while inbox.lock().unwrap().len() < THREADS as usize {
        assert!(Instant::now() < deadline, "watchdog: active messages");
        std::thread::yield_now();
    }
    let mut got = inbox.lock().unwrap().clone();
    got.sort();
    for (t, (h, d)) in got.into_iter().enumerate() {
        assert_eq!(h, vec![t as u8]);
        assert!(d == pattern(5000, t as u64), "am data differ");
    }

    let data = pattern(20000, 3);
    let tx = a.stream_send(ab, data[..12000].to_vec());
    let tx2 = a.stream_send(ab, data[12000..].to_vec());
    let c1 = done(b.stream_recv(ba, vec![0; 7000]), "stream recv 1");
    let c2 = done(b.stream_recv(ba, vec![0; 13000]), "stream recv 2");
    assert_eq!((c1.status, c2.status), (Ok(()), Ok(())));
    let mut all = c1.buf.unwrap();
    all.extend(c2.buf.unwrap());
    assert!(all == data, "stream bytes in order");
    assert_eq!(done(tx, "stream send").status, Ok(()));
    assert_eq!(done(tx2, "stream send").status, Ok(()));
}

/// `with` runs on the progress thread; a blocking call from a handler is refused, not a
/// deadlock; dropping the worker ends outstanding requests with `Canceled`.
#[test]
fn mt_with_handler_reentry_and_shutdown() {
    let a = Arc::new(MtWorker::new(&ctx(Features::TAG | Features::AM)).expect("a"));
    let uuid = a.with(|w| w.uuid()).unwrap();
    assert_eq!(uuid, a.uuid());
    let me = std::thread::current().id();
    assert_ne!(a.with(|_| std::thread::current().id()).unwrap(), me);
    let inner = a.clone();
    let r = a.with(move |_| inner.with(|_| ()).map(|_| ())).unwrap();
    assert!(matches!(r, Err(Error::Busy(_))), "{r:?}");
    // `inner` was dropped inside the command: back to one owner.
    let a = Arc::into_inner(a).expect("sole owner");
    let rx = a.tag_recv(vec![0; 8], 5, TAG_MASK_EXACT);
    drop(a);
    let c = done(rx, "receive of a stopped worker");
    assert_eq!(c.status, Err(Error::Canceled));
}

/// RMA from several threads: puts into a peer's mapping, flush, read back; gets; a
/// released mapping id gives a typed error.
#[test]
fn mt_rma_put_get_from_threads() {
    let rma_ctx = || {
        Context::new(ContextParams {
            features: Features::TAG | Features::RMA | Features::WAKEUP,
            config: Some(UcpConfig {
                tls: vec!["posix".into(), "cma".into()],
                ..Default::default()
            }),
        })
        .expect("context")
    };
    let a = MtWorker::new(&rma_ctx()).expect("a");
    let b = MtWorker::new(&rma_ctx()).expect("b");
    let mem = a.mem_map(THREADS as usize * 4096).expect("mem_map");
    assert_eq!(mem.len, THREADS as usize * 4096);
    let ba = b.ep_create(a.address(), None).expect("ep b->a");
    let deadline = Instant::now() + WATCHDOG;
    let rkey = loop {
        match b.rkey_unpack(ba, &mem.rkey) {
            Ok(k) => break k,
            Err(Error::Busy(_)) => assert!(Instant::now() < deadline, "watchdog: wire-up"),
            Err(e) => panic!("rkey_unpack: {e}"),
        }
        std::thread::yield_now();
    };
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (b, rkey) = (&b, rkey.clone());
            let base = mem.address + t * 4096;
            s.spawn(move || {
                let c = done(b.put(ba, pattern(4096, t), base, rkey.clone()), "put");
                assert_eq!(c.status, Ok(()));
                assert_eq!(done(b.ep_flush(ba), "flush").status, Ok(()));
                let c = done(b.get(ba, vec![0; 4096], base, rkey), "get");
                assert_eq!(c.status, Ok(()));
                assert!(c.buf.unwrap() == pattern(4096, t), "get data differ");
            });
        }
    });
    for t in 0..THREADS {
        let got = a.mem_read(&mem, t as usize * 4096, 4096).unwrap();
        assert!(got == pattern(4096, t), "put data of thread {t} differ");
    }
    a.mem_write(&mem, 0, vec![7; 8]).unwrap();
    assert_eq!(a.mem_read(&mem, 0, 8).unwrap(), vec![7; 8]);
    assert!(a.mem_read(&mem, mem.len, 1).is_err(), "out of range read");
    let stale = MtMem {
        id: mem.id,
        address: 0,
        len: 0,
        rkey: Vec::new(),
    };
    a.mem_unmap(mem).unwrap();
    assert!(matches!(a.mem_unmap(stale), Err(Error::InvalidParam(_))));
}

/// A panicking handler stops the worker: waiters get `Canceled`, later calls an error, and
/// nothing hangs.
#[test]
fn mt_panicking_handler_stops_worker_cleanly() {
    let f = Features::TAG | Features::AM;
    let a = MtWorker::new(&ctx(f)).expect("a");
    let b = MtWorker::new(&ctx(f)).expect("b");
    a.am_set_handler(
        3,
        Box::new(|_, _, _| panic!("handler fails (expected by the test)")),
    )
    .unwrap();
    let ab = a.ep_create(b.address(), None).expect("ep a->b");
    let rx = a.tag_recv(vec![0; 8], 1, TAG_MASK_EXACT);
    let ba = b.ep_create(a.address(), None).expect("ep");
    let _ = done(b.am_send(ba, 3, vec![], vec![1, 2, 3]), "am send");
    let c = done(rx, "receive of a stopped worker");
    assert_eq!(c.status, Err(Error::Canceled));
    assert_eq!(a.with(|w| w.uuid()), Err(Error::Canceled));
    let c = done(a.tag_send(ab, 1, vec![]), "send");
    assert_eq!(c.status, Err(Error::Canceled));
}
