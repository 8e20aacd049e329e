//! Two-process tests of the multi-thread worker over shared memory: several threads of this
//! process share one `MtWorker` and exchange tagged messages with a peer process (this test binary
//! re-run with `RUCX_UCP_MT_ROLE`), whose worker echoes every message back transformed. The peer
//! is a plain `Worker` or, in the second test, another `MtWorker` served by several threads.
//! Every wait has a watchdog, and the child is killed when the test ends.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use ucp::{
    Completion, Context, ContextParams, EpParams, Features, MtRequest, MtWorker, Op, UcpConfig,
    Worker, TAG_MASK_EXACT,
};
use ucs::testing::{hex, unhex};

const WATCHDOG: Duration = Duration::from_secs(120);
const ROLE: &str = "RUCX_UCP_MT_ROLE";
const PEER: &str = "RUCX_UCP_MT_PEER";
const THREADS: u64 = 4;
const MSGS: u64 = 16;
const SIZES: [usize; 7] = [0, 1, 100, 4000, 9000, 70000, 1 << 20];
const REPLY: u64 = 1 << 63;

fn ctx() -> Context {
    Context::new(ContextParams {
        features: Features::TAG | Features::WAKEUP,
        config: Some(UcpConfig {
            tls: vec!["posix".into()],
            keepalive_interval: Some(Duration::from_millis(100)),
            keepalive_timeout: Duration::from_secs(60),
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

fn size_of(tag: u64) -> usize {
    SIZES[((tag >> 32) + tag) as usize % SIZES.len()]
}

fn done(r: MtRequest, what: &str) -> Completion {
    match r.wait_timeout(WATCHDOG) {
        Ok(c) => c,
        Err(_) => panic!("watchdog: {what} did not finish"),
    }
}

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
        assert!(Instant::now() < deadline, "watchdog: peer operation");
    }
}

/// Checks an echoed message and gives the reply's data.
fn echo_data(c: &Completion) -> Vec<u8> {
    assert_eq!(c.status, Ok(()), "peer receive");
    assert_eq!(c.tag & REPLY, 0);
    assert_eq!(c.len, size_of(c.tag));
    let mut buf = c.buf.clone().expect("buffer");
    buf.truncate(c.len);
    assert!(
        buf == pattern(c.len, c.tag),
        "peer: data of tag {:x} differ",
        c.tag
    );
    buf.iter_mut().for_each(|x| *x ^= 0x5a);
    buf
}

/// Waits until the parent closes stdin (it has every reply), with a watchdog.
fn wait_for_parent(mut progress: impl FnMut()) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut l = String::new();
        while std::io::stdin()
            .read_line(&mut l)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
        let _ = tx.send(());
    });
    let deadline = Instant::now() + WATCHDOG;
    while rx.try_recv().is_err() {
        assert!(Instant::now() < deadline, "watchdog: parent never finished");
        progress();
    }
}

/// The peer process: echoes `THREADS * MSGS` messages back, transformed.
#[test]
fn ucp_mt_child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let parent = unhex(&std::env::var(PEER).expect("peer address"));
    if role == "plain" {
        let mut w = Worker::new(&ctx()).expect("worker");
        let ep = w.ep_create(&parent, EpParams::default()).expect("ep");
        println!("ADDR {}", hex(w.address()));
        for _ in 0..THREADS * MSGS {
            let op = w.tag_recv(vec![0; 1 << 21], 0, 0).expect("recv");
            let c = finish(&mut w, op);
            let data = echo_data(&c);
            let op = w.tag_send_vec(ep, c.tag | REPLY, data).expect("send");
            assert_eq!(finish(&mut w, op).status, Ok(()));
        }
        wait_for_parent(|| {
            if w.progress() == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        });
    } else {
        let w = MtWorker::new(&ctx()).expect("mt worker");
        let ep = w.ep_create(&parent, None).expect("ep");
        println!("ADDR {}", hex(w.address()));
        let left = AtomicU64::new(THREADS * MSGS);
        std::thread::scope(|s| {
            for _ in 0..3 {
                let (w, left) = (&w, &left);
                s.spawn(move || {
                    while left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        let c = done(w.tag_recv(vec![0; 1 << 21], 0, 0), "peer recv");
                        let data = echo_data(&c);
                        let s = done(w.tag_send(ep, c.tag | REPLY, data), "peer send");
                        assert_eq!(s.status, Ok(()));
                    }
                });
            }
        });
        wait_for_parent(|| std::thread::sleep(Duration::from_millis(1)));
    }
}

struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_pair(role: &str) {
    let mt = MtWorker::new(&ctx()).expect("mt worker");
    let exe = std::env::current_exe().expect("test exe");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "ucp_mt_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(PEER, hex(mt.address()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let out = child.stdout.take().expect("stdout");
    let mut guard = ChildGuard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if let Some(i) = line.find("ADDR ") {
                let _ = tx.send(line[i + 5..].trim().to_string());
            }
        }
    });
    let addr = unhex(&rx.recv_timeout(WATCHDOG).expect("watchdog: child address"));
    let ep = mt.ep_create(&addr, None).expect("ep to child");
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let mt = &mt;
            s.spawn(move || {
                for i in 0..MSGS {
                    let tag = t << 32 | i;
                    let len = size_of(tag);
                    let rx = mt.tag_recv(vec![0; len], tag | REPLY, TAG_MASK_EXACT);
                    let data = pattern(len, tag);
                    let c = done(mt.tag_send(ep, tag, data.clone()), "send");
                    assert_eq!(c.status, Ok(()), "thread {t} send {i}");
                    let c = done(rx, "receive");
                    assert_eq!(c.status, Ok(()), "thread {t} receive {i}");
                    assert_eq!((c.len, c.tag), (len, tag | REPLY));
                    let want: Vec<u8> = data.iter().map(|x| x ^ 0x5a).collect();
                    assert!(c.buf.unwrap() == want, "thread {t} msg {i}: data differ");
                }
            });
        }
    });
    // Release the child and check it exited cleanly (its own checks passed).
    let mut stdin = guard.0.stdin.take().expect("stdin");
    let _ = stdin.flush();
    drop(stdin);
    let deadline = Instant::now() + WATCHDOG;
    let status = loop {
        if let Some(st) = guard.0.try_wait().expect("child status") {
            break st;
        }
        assert!(Instant::now() < deadline, "watchdog: child did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "child failed: {status}");
}

/// Four threads share one MtWorker and exchange tagged messages (0 B to 1 MiB, every protocol)
/// with a plain worker in another process over shared memory.
#[test]
fn ucp_mt_threads_to_plain_peer_over_shm() {
    run_pair("plain");
}

/// The same against a peer process whose MtWorker is served by three threads.
#[test]
fn ucp_mt_threads_to_mt_peer_over_shm() {
    run_pair("mt");
}

/// Measures (does not assert) the multi-thread path in one process over shared memory: the
/// round-trip latency of one thread's 8-byte tag ping-pong between two MtWorkers, and the
/// message rate of four threads streaming 8-byte tag messages into one. Run with
/// `cargo test --release -p rucx-tests --test ucp_mt -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark: prints numbers"]
fn ucp_mt_bench() {
    let a = MtWorker::new(&ctx()).expect("a");
    let b = MtWorker::new(&ctx()).expect("b");
    let ab = a.ep_create(b.address(), None).expect("ep a->b");
    let ba = b.ep_create(a.address(), None).expect("ep b->a");
    let iters = 20_000u64;
    std::thread::scope(|s| {
        let b = &b;
        s.spawn(move || {
            for i in 0..iters {
                let c = done(b.tag_recv(vec![0; 8], i, TAG_MASK_EXACT), "pong recv");
                let _ = done(b.tag_send(ba, i, c.buf.unwrap()), "pong send");
            }
        });
        let t0 = Instant::now();
        for i in 0..iters {
            let rx = a.tag_recv(vec![0; 8], i, TAG_MASK_EXACT);
            let _ = done(a.tag_send(ab, i, vec![1; 8]), "ping send");
            assert_eq!(done(rx, "ping recv").status, Ok(()));
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
        println!(
            "MtWorker 8 B tag ping-pong: {us:.2} us round trip ({:.2} us one way)",
            us / 2.0
        );
    });
    let per = 50_000u64;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let b = &b;
        s.spawn(move || {
            let mut rxs = Vec::with_capacity(512);
            for i in 0..THREADS * per {
                rxs.push(b.tag_recv(vec![0; 8], 0, 0));
                if rxs.len() == 512 || i + 1 == THREADS * per {
                    for r in rxs.drain(..) {
                        assert_eq!(done(r, "rate recv").status, Ok(()));
                    }
                }
            }
        });
        for t in 0..THREADS {
            let a = &a;
            s.spawn(move || {
                let mut txs = Vec::with_capacity(512);
                for i in 0..per {
                    txs.push(a.tag_send(ab, t << 32 | i, vec![2; 8]));
                    if txs.len() == 512 {
                        for r in txs.drain(..) {
                            assert_eq!(done(r, "rate send").status, Ok(()));
                        }
                    }
                }
                for r in txs {
                    assert_eq!(done(r, "rate send").status, Ok(()));
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "MtWorker 8 B tag message rate, {THREADS} sender threads: {:.0} msg/s",
        (THREADS * per) as f64 / secs
    );
}
