//! Rendezvous with traffic both ways between two processes over shared memory (posix + cma):
//! both sides send and receive at once, every size on and around the endpoint's protocol
//! boundaries and the rendezvous read's fragment boundaries, from and into misaligned buffers,
//! with every byte checked; and a peer killed in the middle of a rendezvous gives the survivor
//! an error, not a hang. This test binary re-runs itself as the peer process (selected by
//! `RUCX_RNDV_TEST_ROLE`); every wait has a watchdog.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ucp::wireup::ProtoConfig;
use ucp::{
    Context, ContextParams, EpHandle, EpParams, Features, Op, Request, UcpConfig, Worker,
    TAG_MASK_EXACT,
};
use ucs::testing::{hex, unhex};

const WATCHDOG: Duration = Duration::from_secs(120);
const ROLE: &str = "RUCX_RNDV_TEST_ROLE";
const PEER: &str = "RUCX_RNDV_TEST_PEER";
const FRAG: &str = "RUCX_RNDV_TEST_FRAG";
/// The message of the killed-peer tests: long enough (read in 4 KiB steps) that the kill lands
/// in the middle of the read.
const BIG: usize = 64 << 20;

/// A worker over posix + cma. With `frag` (small read steps, which the model prices at a
/// system call each and so would keep from small rendezvous) the rendezvous goes by get from
/// 8 KiB on, as forced by `RUCX_RNDV_SCHEME=get_zcopy RUCX_RNDV_THRESH=8k`.
fn worker(frag: Option<usize>) -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: vec!["posix".into(), "cma".into()],
            rndv_frag_size: frag,
            rndv_thresh: frag.map(|_| 8192),
            rndv_scheme: if frag.is_some() {
                ucp::config::RndvSchemeCfg::Get
            } else {
                ucp::config::RndvSchemeCfg::Auto
            },
            keepalive_interval: Some(Duration::from_millis(100)),
            keepalive_timeout: Duration::from_secs(2),
            ..Default::default()
        }),
    })
    .expect("context");
    Worker::new(&ctx).expect("worker")
}

fn byte(i: usize, seed: u64) -> u8 {
    (i as u64).wrapping_mul(2654435761).wrapping_add(seed) as u8
}

/// Every size on and around the boundaries of `p` (eager short, bcopy, multi-fragment,
/// rendezvous threshold) and of its rendezvous read steps (one, two and three fragments).
fn sizes(p: &ProtoConfig) -> Vec<usize> {
    let mut v = vec![0, 1, 8];
    let mut around = |n: usize| v.extend([n.saturating_sub(1), n, n + 1]);
    if let Some(s) = p.short_max {
        around(s);
    }
    around(p.bcopy_single_max);
    around(p.first_frag + p.middle_frag);
    around(p.rndv_thresh);
    let f = p.rndv_frag;
    for k in 1..=3 {
        around(k * f);
    }
    v.push(3 * f + 4095);
    v.sort_unstable();
    v.dedup();
    v
}

/// A misaligned offset for message `i` (1..=63 bytes past a 64-byte boundary).
fn skew(i: usize) -> usize {
    1 + (i * 7) % 63
}

/// One side's buffers: each message's send bytes and receive space, misaligned inside one
/// allocation each, filled with the side's pattern (`seed`).
struct Buffers {
    send: Vec<u8>,
    recv: Vec<u8>,
    at: Vec<(usize, usize)>,
}

impl Buffers {
    fn new(sizes: &[usize], seed: u64) -> Buffers {
        let mut at = Vec::new();
        let mut off = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let start = off + skew(i);
            at.push((start, n));
            off = (start + n).next_multiple_of(64);
        }
        let mut send = vec![0u8; off + 64];
        for (i, &(start, n)) in at.iter().enumerate() {
            for (k, b) in send[start..start + n].iter_mut().enumerate() {
                *b = byte(k, seed + i as u64);
            }
        }
        Buffers {
            send,
            recv: vec![0u8; off + 64],
            at,
        }
    }

    /// Posts the receive of message `i` (tag `i`) into its misaligned slot.
    fn post_recv(&mut self, w: &mut Worker, i: usize) -> Op {
        let (start, n) = self.at[i];
        // SAFETY: the slot lies inside `recv`, which outlives every request (the caller waits
        // for all of them before dropping the buffers) and is not touched meanwhile.
        unsafe {
            w.tag_recv_raw(
                self.recv.as_mut_ptr().add(start),
                n,
                i as u64,
                TAG_MASK_EXACT,
            )
        }
        .expect("tag_recv_raw")
    }

    /// Sends message `i` (tag `i`) from its misaligned slot.
    fn send(&self, w: &mut Worker, ep: EpHandle, i: usize) -> Op {
        let (start, n) = self.at[i];
        // SAFETY: as `post_recv`, for `send`, which is never written while requests run.
        unsafe {
            w.tag_send_raw(
                ep,
                i as u64,
                self.send.as_ptr().add(start),
                n,
                ucp::TagSendMode::Standard,
            )
        }
        .expect("tag_send_raw")
    }

    /// Checks every received message against the peer's pattern (`seed`), and that nothing
    /// was written between the slots.
    fn check(&self, sizes: &[usize], seed: u64) {
        let mut covered = vec![false; self.recv.len()];
        for (i, &(start, n)) in self.at.iter().enumerate() {
            assert_eq!(n, sizes[i]);
            for k in 0..n {
                assert_eq!(
                    self.recv[start + k],
                    byte(k, seed + i as u64),
                    "message {i} ({n} bytes) differs at byte {k}"
                );
                covered[start + k] = true;
            }
        }
        for (k, &c) in covered.iter().enumerate() {
            assert!(
                c || self.recv[k] == 0,
                "byte {k} outside every message written"
            );
        }
    }
}

/// Progresses until every request in `ops` finished successfully; a receive (`Some(n)`)
/// with `n` bytes.
fn wait_all(w: &mut Worker, ops: Vec<(Op, Option<usize>)>, what: &str) {
    let mut left: Vec<(Request, Option<usize>)> = Vec::new();
    for (op, n) in ops {
        match op {
            Op::Done(c) => {
                assert_eq!(c.status, Ok(()), "{what}");
                if let Some(n) = n {
                    assert_eq!(c.len, n, "{what}");
                }
            }
            Op::Pending(r) => left.push((r, n)),
        }
    }
    let deadline = Instant::now() + WATCHDOG;
    while !left.is_empty() {
        w.progress();
        let mut i = 0;
        while i < left.len() {
            let (r, n) = left.swap_remove(i);
            match w.request_take(r) {
                Ok(c) => {
                    assert_eq!(c.status, Ok(()), "{what}: a {n:?}-byte operation failed");
                    if let Some(n) = n {
                        assert_eq!(c.len, n, "{what}: {} bytes received, not {n}", c.len);
                    }
                }
                Err(r) => {
                    left.push((r, n));
                    let last = left.len() - 1;
                    left.swap(i, last);
                    i += 1;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "watchdog: {what} did not finish: {:?}",
            w.stats()
        );
    }
}

/// Progresses until `ep` is connected and gives its protocol configuration.
fn connected(w: &mut Worker, ep: EpHandle) -> ProtoConfig {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        w.progress();
        if let Ok(p) = w.ep_proto_config(ep) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "watchdog: endpoint did not connect"
        );
    }
}

/// Seed of the parent's messages; the child's are `CHILD_SEED`.
const PARENT_SEED: u64 = 11;
const CHILD_SEED: u64 = 5000;

/// The peer process.
#[test]
fn ucp_rndv_both_ways_child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let frag = std::env::var(FRAG).ok().map(|v| v.parse().expect("frag"));
    let mut w = worker(frag);
    let parent = unhex(&std::env::var(PEER).expect("peer address"));
    let ep = w
        .ep_create(&parent, EpParams::default())
        .expect("ep to parent");
    println!("ADDR {}", hex(w.address()));
    std::io::stdout().flush().unwrap();
    let p = connected(&mut w, ep);
    match role.as_str() {
        "both" => {
            // Sends first, then posts its receives: the parent's messages meet receives posted
            // early (the parent's side) and late (unexpected here).
            let sizes = sizes(&p);
            let mut b = Buffers::new(&sizes, CHILD_SEED);
            let mut ops = Vec::new();
            for i in 0..sizes.len() {
                ops.push((b.send(&mut w, ep, i), None));
            }
            for (i, &n) in sizes.iter().enumerate() {
                ops.push((b.post_recv(&mut w, i), Some(n)));
            }
            wait_all(&mut w, ops, "child");
            b.check(&sizes, PARENT_SEED);
            let st = w.stats();
            assert!(st.rndv_get > 0 && st.rndv_am == 0, "{st:?}");
            println!("DONE");
        }
        "big_sender" => {
            let data = vec![0x3cu8; BIG];
            let op = w.tag_send(ep, 1, &data).expect("send");
            println!("SENT");
            std::io::stdout().flush().unwrap();
            let _keep = op;
            loop {
                w.progress();
            }
        }
        "big_receiver" => {
            let op = w.tag_recv(vec![0u8; BIG], 1, TAG_MASK_EXACT).expect("recv");
            let deadline = Instant::now() + WATCHDOG;
            while w.stats().rndv_get == 0 {
                w.progress();
                assert!(
                    Instant::now() < deadline,
                    "watchdog: no rendezvous started: {:?}",
                    w.stats()
                );
            }
            println!("STARTED");
            std::io::stdout().flush().unwrap();
            let _keep = op;
            loop {
                w.progress();
            }
        }
        r => panic!("unknown role {r}"),
    }
}

/// Starts the peer process in `role`, reads its address and connects to it.
/// The peer process, killed when this drops: a failed test leaves no peer spinning behind.
struct Peer(Child);

impl Peer {
    fn kill(&mut self) -> std::io::Result<()> {
        self.0.kill()
    }

    fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.0.wait()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn spawn(
    w: &mut Worker,
    role: &str,
    frag: Option<usize>,
) -> (Peer, EpHandle, BufReader<std::process::ChildStdout>) {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "ucp_rndv_both_ways_child_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .env(PEER, hex(w.address()))
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if let Some(f) = frag {
        cmd.env(FRAG, f.to_string());
    }
    // SAFETY: prctl is async-signal-safe; the closure touches nothing else between fork and
    // exec. The peer dies with the thread that spawned it, even when this process is killed.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = Peer(cmd.spawn().expect("spawn the peer"));
    let mut out = BufReader::new(child.0.stdout.take().expect("stdout"));
    let addr = expect_line(&mut out, "ADDR ");
    let ep = w
        .ep_create(&unhex(&addr), EpParams::default())
        .expect("ep to child");
    (child, ep, out)
}

/// Reads the child's lines until one holding `prefix` (libtest may print "test name ... "
/// before it on the same line); gives the rest of the line after it.
fn expect_line(out: &mut BufReader<std::process::ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("read the child's output");
        assert!(n > 0, "the child ended before printing {prefix:?}");
        if let Some(i) = line.find(prefix) {
            return line[i + prefix.len()..].trim().to_string();
        }
    }
}

fn both_ways(frag: Option<usize>) {
    let mut w = worker(frag);
    let (mut child, ep, mut out) = spawn(&mut w, "both", frag);
    let p = connected(&mut w, ep);
    assert_eq!(p.rndv_am_max, 0, "{p:?}");
    let sizes = sizes(&p);
    let mut b = Buffers::new(&sizes, PARENT_SEED);
    let mut ops = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        ops.push((b.post_recv(&mut w, i), Some(n)));
    }
    for i in 0..sizes.len() {
        ops.push((b.send(&mut w, ep, i), None));
    }
    wait_all(&mut w, ops, "parent");
    b.check(&sizes, CHILD_SEED);
    let st = w.stats();
    assert!(st.rndv_get > 0 && st.rndv_am == 0, "{st:?}");
    // The child checks the bytes it got, says so, and exits; keep progressing meanwhile (its
    // last ATS may still be on the way).
    // Read to the end (a child writing into a closed pipe would fail).
    let done = std::thread::spawn(move || {
        let mut line = String::new();
        let mut done = false;
        while out.read_line(&mut line).unwrap_or(0) > 0 {
            done |= line.contains("DONE");
            line.clear();
        }
        done
    });
    let deadline = Instant::now() + WATCHDOG;
    while !done.is_finished() {
        w.progress();
        assert!(
            Instant::now() < deadline,
            "watchdog: the child did not finish"
        );
    }
    assert!(done.join().unwrap(), "the child did not confirm its data");
    let status = child.wait().expect("wait for the child");
    assert!(status.success(), "child: {status}");
}

/// Both sides send and receive every boundary size at once, in the default read steps.
#[test]
fn ucp_rndv_both_ways_every_boundary_size() {
    both_ways(None);
}

/// The same with 4 KiB read steps: many fragments per message, fragment boundaries at small
/// multiples of 4 KiB, reads of several messages interleaved.
#[test]
fn ucp_rndv_both_ways_small_read_steps() {
    both_ways(Some(4096));
}

/// The sender dies while the receiver reads its data in steps: the receive fails, the
/// worker does not hang.
#[test]
fn ucp_rndv_sender_killed_mid_read() {
    let mut w = worker(Some(4096));
    let rop = w.tag_recv(vec![0u8; BIG], 1, TAG_MASK_EXACT).expect("recv");
    let (mut child, ep, out) = spawn(&mut w, "big_sender", Some(4096));
    let Op::Pending(req) = rop else {
        panic!("the receive finished before the data came")
    };
    // Both sides' wire-up needs this worker's progress: read the child's lines on the side.
    let sent = std::thread::spawn(move || {
        let mut out = out;
        expect_line(&mut out, "SENT");
    });
    connected(&mut w, ep);
    let deadline = Instant::now() + WATCHDOG;
    while w.stats().rndv_get == 0 {
        w.progress();
        assert!(
            Instant::now() < deadline,
            "watchdog: the read did not start: {:?}",
            w.stats()
        );
    }
    sent.join().unwrap();
    for _ in 0..100 {
        w.progress();
    }
    assert!(
        !w.request_test(&req).unwrap(),
        "64 MiB read in 100 steps of 4 KiB"
    );
    child.kill().expect("kill the sender");
    child.wait().unwrap();
    let c = loop {
        w.progress();
        if w.request_test(&req).unwrap() {
            match w.request_take(req) {
                Ok(c) => break c,
                Err(_) => panic!("a finished request could not be taken"),
            }
        }
        assert!(
            Instant::now() < deadline,
            "watchdog: the receive hangs after the kill"
        );
    };
    assert!(
        c.status.is_err(),
        "the receive of a dead sender's data succeeded"
    );
}

/// The receiver dies while it reads: the sender's send fails, the worker does not hang.
#[test]
fn ucp_rndv_receiver_killed_mid_read() {
    let mut w = worker(Some(4096));
    let (mut child, ep, out) = spawn(&mut w, "big_receiver", Some(4096));
    connected(&mut w, ep);
    let data = vec![0x5au8; BIG];
    let op = w.tag_send(ep, 1, &data).expect("send");
    let Op::Pending(req) = op else {
        panic!("a 64 MiB send finished at once")
    };
    let started = std::thread::spawn(move || {
        let mut out = out;
        expect_line(&mut out, "STARTED");
    });
    let deadline = Instant::now() + WATCHDOG;
    while !started.is_finished() {
        w.progress();
        assert!(
            Instant::now() < deadline,
            "watchdog: the receiver did not start reading: {:?}",
            w.stats()
        );
    }
    started.join().unwrap();
    assert!(
        !w.request_test(&req).unwrap(),
        "the send finished before the read did"
    );
    child.kill().expect("kill the receiver");
    child.wait().unwrap();
    let c = loop {
        w.progress();
        if w.request_test(&req).unwrap() {
            match w.request_take(req) {
                Ok(c) => break c,
                Err(_) => panic!("a finished request could not be taken"),
            }
        }
        assert!(
            Instant::now() < deadline,
            "watchdog: the send hangs after the kill"
        );
    };
    assert!(c.status.is_err(), "the send to a dead receiver succeeded");
}
