//! ucp over rc_verbs (run inside the Soft-RoCE VM by `tests/rdma-vm/ci.sh`).
//!
//! rc_verbs endpoints connect endpoint to endpoint, so ucp wires up over tcp: the worker
//! address and the rc_verbs endpoint addresses go over the tcp lane, then the AM lane (eager,
//! rendezvous control) moves to rc_verbs behind a lane-switch marker and rendezvous reads with
//! `get_zcopy` over rc_verbs. The data path of a tag exchange then runs entirely over rc_verbs.
//!
//! - `tag_over_rc_verbs_two_workers`: two workers in one process, messages before, during and
//!   after the switch.
//! - `mp_*`: two processes (this binary re-runs itself as the peer, selected by
//!   `RUCX_RCV_TEST_ROLE`); the child echoes every message back with its tag, receiving with a
//!   wildcard tag.
//!
//! Every test skips with a note when the machine has no rc_verbs device; the VM check fails if
//! anything skipped. A deadline on every wait is the watchdog: a stuck wire-up or transfer fails
//! the test instead of hanging it.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};
use ucp::wireup::RndvScheme;
use ucp::{
    Completion, Context, ContextParams, EpHandle, EpParams, Features, Op, UcpConfig, Worker,
    TAG_MASK_EXACT,
};
use ucs::testing::{hex, unhex};

const DEADLINE: Duration = Duration::from_secs(90);
const ROLE: &str = "RUCX_RCV_TEST_ROLE";
const PEER: &str = "RUCX_RCV_TEST_PEER";
/// The tag that ends the child's echo loop.
const STOP: u64 = u64::MAX;
/// The child's receive buffer: larger than any message of these tests.
const MAX_MSG: usize = 2 << 20;

fn config(keepalive_timeout: Duration) -> UcpConfig {
    UcpConfig {
        tls: vec!["rc_verbs".into(), "tcp".into()],
        keepalive_interval: Some(Duration::from_millis(200)),
        keepalive_timeout,
        ..Default::default()
    }
}

fn worker_cfg(cfg: UcpConfig) -> Option<Worker> {
    let ctx = match Context::new(ContextParams {
        features: Features::TAG,
        config: Some(cfg),
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipped: no rc_verbs + tcp context: {e}");
            return None;
        }
    };
    if !ctx.resources().iter().any(|r| r.tl_name == "rc_verbs") {
        eprintln!("skipped: no rc_verbs device on this machine (run tests/rdma-vm/ci.sh)");
        return None;
    }
    Some(Worker::new(&ctx).expect("worker"))
}

fn worker() -> Option<Worker> {
    worker_cfg(config(Duration::from_secs(60)))
}

/// Waits for `op`, progressing `me` and the `others`.
fn finish_with(me: &mut Worker, others: &mut [&mut Worker], op: Op, what: &str) -> Completion {
    let mut req = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    let end = Instant::now() + DEADLINE;
    while Instant::now() < end {
        match me.request_take(req) {
            Ok(c) => return c,
            Err(r) => req = r,
        }
        me.progress();
        for o in others.iter_mut() {
            o.progress();
        }
    }
    panic!("watchdog: {what} did not finish within {DEADLINE:?}");
}

fn finish(me: &mut Worker, op: Op, what: &str) -> Completion {
    finish_with(me, &mut [], op, what)
}

/// Progresses until `ep`'s wire-up is complete, then checks that its AM lane is rc_verbs.
fn wait_rc_am_lane(me: &mut Worker, others: &mut [&mut Worker], ep: EpHandle) {
    let end = Instant::now() + DEADLINE;
    while !me.ep_wired_up(ep).expect("endpoint") {
        assert!(Instant::now() < end, "rc_verbs lane not connected in time");
        me.progress();
        for o in others.iter_mut() {
            o.progress();
        }
    }
    let lane = me.ep_am_lane(ep).unwrap();
    assert!(lane.starts_with("rc_verbs/"), "AM lane is {lane}");
    assert_eq!(me.ep_proto_config(ep).unwrap().rndv, RndvScheme::Get);
    let info = me.ep_proto_info(ep).unwrap();
    // Every row (eager and rendezvous) names rc_verbs only: tcp carried just the wire-up.
    assert!(info.contains("eager short"), "{info}");
    assert!(info.contains("rc_verbs"), "{info}");
    assert!(!info.contains("tcp"), "{info}");
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(seed) as u8)
        .collect()
}

/// Sends `sizes` in order with one tag from `a` to `b` and checks each arrives intact, in order.
fn stream_of_sizes(a: &mut Worker, b: &mut Worker, ab: EpHandle, sizes: &[usize], tag: u64) {
    let recvs: Vec<Op> = sizes
        .iter()
        .map(|&n| b.tag_recv(vec![0; n], tag, TAG_MASK_EXACT).unwrap())
        .collect();
    let sends: Vec<(Op, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let d = pattern(n, i as u64);
            (a.tag_send(ab, tag, &d).unwrap(), d)
        })
        .collect();
    let mut sent = Vec::new();
    for (op, d) in sends {
        let c = finish_with(a, &mut [b], op, "send");
        assert_eq!(c.status, Ok(()), "send of {} bytes", d.len());
        sent.push(d);
    }
    for (op, d) in recvs.into_iter().zip(sent) {
        let c = finish_with(b, &mut [a], op, "receive");
        assert_eq!(c.status, Ok(()), "receive of {} bytes", d.len());
        assert_eq!(c.len, d.len());
        assert!(
            c.buf.unwrap() == d,
            "{} bytes differ (or out of order)",
            d.len()
        );
    }
}

#[test]
fn tag_over_rc_verbs_two_workers() {
    let (Some(mut a), Some(mut b)) = (worker(), worker()) else {
        return;
    };
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    // Messages sent before and while the rc_verbs lane connects go by tcp, then by rc_verbs
    // behind the lane-switch marker: they still arrive intact and in order.
    stream_of_sizes(&mut a, &mut b, ab, &[8, 100 << 10, 4000], 1);
    wait_rc_am_lane(&mut a, &mut [&mut b], ab);
    let baddr = a.address().to_vec();
    let ba = b.ep_create(&baddr, EpParams::default()).unwrap();
    wait_rc_am_lane(&mut b, &mut [&mut a], ba);
    assert_eq!(a.stats().am_lane_switches, 1, "{:?}", a.stats());
    assert_eq!(b.stats().am_lane_switches, 1, "{:?}", b.stats());
    // After the switch, small messages over rc_verbs take the receive fast path.
    let general_before = b.stats().rx_general;
    stream_of_sizes(&mut a, &mut b, ab, &[8; 32], 4);
    let general = b.stats().rx_general - general_before;
    assert!(
        general < 32,
        "{general} of 32 took the general path: {:?}",
        b.stats()
    );
    let get_before = b.stats().rndv_get;
    let sizes = [1, 64 << 10, 17, 1 << 20, 9000, 600 << 10, 0];
    // Those from the (rc_verbs) threshold up are read with get_zcopy: at least the two above
    // the eager cap of 512 KiB.
    let thresh = a.ep_proto_config(ab).unwrap().rndv_thresh;
    let rndv = sizes.iter().filter(|&&n| n >= thresh).count() as u64;
    assert!(rndv >= 2, "threshold {thresh}");
    stream_of_sizes(&mut a, &mut b, ab, &sizes, 2);
    assert_eq!(b.stats().rndv_get - get_before, rndv, "{:?}", b.stats());
    let get_before = a.stats().rndv_get;
    stream_of_sizes(&mut b, &mut a, ba, &sizes, 3);
    assert_eq!(a.stats().rndv_get - get_before, rndv, "{:?}", a.stats());
}

#[test]
fn switch_while_the_receiver_is_idle() {
    let (Some(mut a), Some(mut b)) = (worker(), worker()) else {
        return;
    };
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    // Progress both until A's AM lane moves, then stop progressing B: A's lane-switch marker
    // and A's next messages (over rc_verbs) are all waiting when B looks again.
    let end = Instant::now() + DEADLINE;
    while !a.ep_wired_up(ab).unwrap() {
        assert!(Instant::now() < end, "watchdog: rc_verbs lane");
        a.progress();
        if !a.ep_wired_up(ab).unwrap() {
            b.progress();
        }
    }
    assert!(a.ep_am_lane(ab).unwrap().starts_with("rc_verbs/"));
    let held_before = b.stats().am_switch_held;
    let msgs: Vec<Vec<u8>> = (0..20u64).map(|i| pattern(8 + i as usize, i)).collect();
    let sends: Vec<Op> = msgs
        .iter()
        .enumerate()
        .map(|(i, d)| a.tag_send(ab, i as u64, d).unwrap())
        .collect();
    for s in sends {
        assert_eq!(finish(&mut a, s, "send").status, Ok(()));
    }
    // Wildcard receives: the order alone says which message is which.
    for (i, d) in msgs.iter().enumerate() {
        let r = b.tag_recv(vec![0; 64], 0, 0).unwrap();
        let c = finish_with(&mut b, &mut [&mut a], r, "receive");
        assert_eq!(c.status, Ok(()));
        assert_eq!(c.tag, i as u64, "out of order");
        assert_eq!(&c.buf.unwrap()[..c.len], &d[..]);
    }
    // Whether B held any depends on which of its interfaces it polled first (the gate's
    // holding itself is unit-tested in `ucp::wireup`); the order above is what must hold.
    eprintln!(
        "{} messages held until the marker",
        b.stats().am_switch_held - held_before
    );
}

/// Waits (progressing only `w`) until `ep` is wired up and checks its AM lane is rc_verbs.
fn wired_alone(w: &mut Worker, ep: EpHandle) {
    wait_rc_am_lane(w, &mut [], ep);
}

#[test]
fn listener_connection_then_rc_verbs_lanes() {
    // Skip cleanly where there is no rc_verbs (the threads below expect it).
    if worker().is_none() {
        return;
    }
    let mut l = ucp::Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    // The client: connects through the listener (worker addresses over its tcp connection),
    // then the rc_verbs lane connects over the tcp AM lane and takes over.
    let client = std::thread::spawn(move || {
        let mut w = worker().expect("rc_verbs");
        let ep = w.connect(addr, EpParams::default()).unwrap();
        wired_alone(&mut w, ep);
        for (i, n) in [8usize, 5000, 1 << 20].into_iter().enumerate() {
            let d = pattern(n, i as u64);
            let r = w
                .tag_recv(vec![0; n], 100 + i as u64, TAG_MASK_EXACT)
                .unwrap();
            let s = w.tag_send(ep, i as u64, &d).unwrap();
            assert_eq!(finish(&mut w, s, "client send").status, Ok(()));
            let c = finish(&mut w, r, "client receive");
            assert_eq!(c.status, Ok(()));
            assert!(c.buf.unwrap() == d, "reply of {n} bytes differs");
        }
        // The 1 MiB reply came by rendezvous: read by ucp (get_zcopy) or, with tag offload,
        // by the rc_verbs transport straight into the posted receive.
        let tm = w.tag_offload_stats();
        assert!(
            w.stats().rndv_get + tm.matched >= 1,
            "{:?} {tm:?}",
            w.stats()
        );
        w.ep_close(ep, ucp::CloseMode::Flush).unwrap();
    });
    let mut w = worker().expect("rc_verbs");
    let req = l
        .wait(DEADLINE)
        .unwrap()
        .expect("watchdog: no connection request");
    let ep = w.accept(req, EpParams::default()).unwrap();
    wired_alone(&mut w, ep);
    for (i, n) in [8usize, 5000, 1 << 20].into_iter().enumerate() {
        let r = w.tag_recv(vec![0; n], i as u64, TAG_MASK_EXACT).unwrap();
        let c = finish(&mut w, r, "server receive");
        assert_eq!(c.status, Ok(()));
        let s = w.tag_send_vec(ep, 100 + i as u64, c.buf.unwrap()).unwrap();
        assert_eq!(finish(&mut w, s, "server send").status, Ok(()));
    }
    // Serve until the client is done (its close needs our progress).
    while !client.is_finished() {
        w.progress();
    }
    client.join().expect("client thread");
}

// ---- two processes ---------------------------------------------------------------------------

/// The peer process: connects to the parent, reports its AM lane once wired up, and echoes
/// every message back with its tag (receiving with a wildcard) until the STOP tag.
#[test]
fn mp_child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let mut w = worker().expect("rc_verbs in the child");
    let parent = unhex(&std::env::var(PEER).expect("peer address"));
    let ep = w.ep_create(&parent, EpParams::default()).expect("ep");
    println!("ADDR {}", hex(w.address()));
    let end = Instant::now() + DEADLINE;
    while !w.ep_wired_up(ep).expect("endpoint") {
        assert!(Instant::now() < end, "child: rc_verbs lane not connected");
        w.progress();
    }
    println!("LANE {}", w.ep_am_lane(ep).unwrap());
    if role == "sleep" {
        // A live peer until killed.
        loop {
            w.progress();
        }
    }
    loop {
        let r = w.tag_recv(vec![0; MAX_MSG], 0, 0).unwrap();
        let c = finish(&mut w, r, "child receive");
        assert_eq!(c.status, Ok(()), "child receive");
        if c.tag == STOP {
            break;
        }
        let mut buf = c.buf.unwrap();
        buf.truncate(c.len);
        let s = w.tag_send_vec(ep, c.tag, buf).unwrap();
        assert_eq!(finish(&mut w, s, "child send").status, Ok(()));
    }
    let s = w.tag_send(ep, STOP, &[]).unwrap();
    finish(&mut w, s, "child stop reply");
    let st = w.stats();
    println!(
        "STATS switches {} rts {} get {}",
        st.am_lane_switches, st.rndv_rts, st.rndv_get
    );
    let f = w.flush().unwrap();
    finish(&mut w, f, "child flush");
    // Stay until the parent has everything (it closes our stdin to release us).
    let mut rest = String::new();
    while std::io::stdin()
        .read_line(&mut rest)
        .map(|n| n > 0)
        .unwrap_or(false)
    {}
}

struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    addr: Vec<u8>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer {
    /// Starts the child for `role`, connected to `w`.
    fn spawn(role: &str, w: &mut Worker) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "mp_child_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .env(PEER, hex(w.address()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(|l| l.ok()) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut p = Peer {
            child,
            stdin,
            lines: rx,
            addr: Vec::new(),
        };
        let a = p.expect_line(w, "ADDR ");
        p.addr = unhex(&a);
        p
    }

    /// Progresses `w` until the child prints a line starting with `prefix`; gives the rest.
    fn expect_line(&mut self, w: &mut Worker, prefix: &str) -> String {
        let end = Instant::now() + DEADLINE;
        loop {
            match self.lines.try_recv() {
                Ok(l) => {
                    // The first line follows libtest's "test mp_child_entry ... ".
                    if let Some(pos) = l.find(prefix) {
                        return l[pos + prefix.len()..].trim().to_string();
                    }
                    eprintln!("child: {l}");
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
                Err(e) => panic!("child exited before printing {prefix:?}: {e}"),
            }
            assert!(
                Instant::now() < end,
                "watchdog: child never printed {prefix:?}"
            );
            w.progress();
        }
    }

    /// Ends the echo loop, checks the child's lane report and exit.
    fn stop(mut self, w: &mut Worker, ep: EpHandle) -> String {
        let r = w.tag_recv(Vec::new(), STOP, TAG_MASK_EXACT).unwrap();
        let s = w.tag_send(ep, STOP, &[]).unwrap();
        assert_eq!(finish(w, s, "stop").status, Ok(()));
        assert_eq!(finish(w, r, "stop reply").status, Ok(()));
        let stats = self.expect_line(w, "STATS ");
        drop(self.stdin.take());
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "child failed: {st}");
                break;
            }
            assert!(Instant::now() < end, "watchdog: child did not exit");
            w.progress();
        }
        stats
    }
}

/// A parent worker, its child, and an endpoint whose AM lane is rc_verbs on both sides.
fn mp_setup(role: &str, cfg: UcpConfig) -> Option<(Worker, Peer, EpHandle)> {
    let mut w = worker_cfg(cfg)?;
    let mut peer = Peer::spawn(role, &mut w);
    // The child's wire-up created our endpoint to it; ep_create returns that one.
    let ep = w
        .ep_create(&peer.addr.clone(), EpParams::default())
        .unwrap();
    wait_rc_am_lane(&mut w, &mut [], ep);
    let lane = peer.expect_line(&mut w, "LANE ");
    assert!(lane.starts_with("rc_verbs/"), "child's AM lane is {lane}");
    assert_eq!(w.stats().am_lane_switches, 1, "{:?}", w.stats());
    Some((w, peer, ep))
}

/// Sends each of `msgs` (tag, data) without waiting, then checks the echoes: received in order
/// by receives posted with `mask` (0: wildcard), each with its tag and bytes.
fn echo_all(w: &mut Worker, ep: EpHandle, msgs: &[(u64, Vec<u8>)], mask: u64) {
    let recvs: Vec<Op> = msgs
        .iter()
        .map(|(t, d)| w.tag_recv(vec![0; d.len()], *t, mask).unwrap())
        .collect();
    let sends: Vec<Op> = msgs
        .iter()
        .map(|(t, d)| w.tag_send(ep, *t, d).unwrap())
        .collect();
    for s in sends {
        assert_eq!(finish(w, s, "send").status, Ok(()));
    }
    for (i, (r, (t, d))) in recvs.into_iter().zip(msgs).enumerate() {
        let c = finish(w, r, "echo");
        assert_eq!(c.status, Ok(()), "echo {i}");
        assert_eq!(c.tag, *t, "echo {i}: tag (out of order?)");
        assert_eq!(c.len, d.len(), "echo {i}: length");
        assert!(c.buf.unwrap() == *d, "echo {i}: {} bytes differ", d.len());
    }
}

#[test]
fn mp_eager_small_and_large_and_rndv() {
    let Some((mut w, peer, ep)) = mp_setup("echo", config(Duration::from_secs(60))) else {
        return;
    };
    let p = w.ep_proto_config(ep).unwrap();
    let short = p.short_max.expect("rc_verbs has am_short");
    // Every protocol: short, single bcopy, multi-fragment eager, rendezvous (get_zcopy).
    let sizes = [
        0,
        8,
        short,
        short + 1,
        p.bcopy_single_max,
        p.bcopy_single_max + 1,
        p.first_frag + p.middle_frag + 1,
        p.rndv_thresh - 1,
        p.rndv_thresh,
        2 << 20,
    ];
    let msgs: Vec<(u64, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (i as u64, pattern(n, i as u64)))
        .collect();
    let rndv = sizes.iter().filter(|&&n| n >= p.rndv_thresh).count() as u64;
    assert!(rndv >= 2, "{p:?}");
    let before = w.stats();
    echo_all(&mut w, ep, &msgs, TAG_MASK_EXACT);
    let st = w.stats();
    assert!(st.eager_single > before.eager_single, "{st:?}");
    assert!(st.eager_multi > before.eager_multi, "{st:?}");
    assert_eq!(st.rndv_rts - before.rndv_rts, rndv, "{st:?}");
    // The child's echoes of the rendezvous messages were read with get_zcopy here.
    assert_eq!(st.rndv_get - before.rndv_get, rndv, "{st:?}");
    let child = peer.stop(&mut w, ep);
    let want = format!("switches 1 rts {rndv} get {rndv}");
    assert!(child.starts_with(&want), "child: {child}, want {want}");
}

#[test]
fn mp_many_messages_in_order_wildcard() {
    let Some((mut w, peer, ep)) = mp_setup("echo", config(Duration::from_secs(60))) else {
        return;
    };
    // 400 messages with distinct tags and mixed sizes, all in flight at once; the echoes are
    // received with wildcard receives, so only the order says which is which.
    let msgs: Vec<(u64, Vec<u8>)> = (0..400u64)
        .map(|i| {
            let n = match i % 5 {
                0 => 0,
                1 => 8,
                2 => 200,
                3 => 3000,
                _ => 20000,
            };
            (1000 + i, pattern(n, i))
        })
        .collect();
    echo_all(&mut w, ep, &msgs, 0);
    peer.stop(&mut w, ep);
}

#[test]
fn mp_order_across_the_lane_switch() {
    let Some(mut w) = worker() else {
        return;
    };
    let mut peer = Peer::spawn("echo", &mut w);
    let ep = w
        .ep_create(&peer.addr.clone(), EpParams::default())
        .unwrap();
    // Numbered messages from the first moment: some go over tcp before the switch, the rest
    // over rc_verbs after it; the child receives them with a wildcard and echoes each, so any
    // reordering across the switch shows as a wrong tag.
    let mut sent = 0u64;
    let mut before_switch = None;
    let mut recvs = std::collections::VecDeque::new();
    let end = Instant::now() + DEADLINE;
    loop {
        let wired = w.ep_wired_up(ep).unwrap();
        if wired && before_switch.is_none() {
            before_switch = Some(sent);
        }
        // At least 50 in all and 20 after the switch, however late the switch comes (a slow
        // host once switched only after the 58th).
        if wired && sent >= 50.max(before_switch.unwrap_or(0) + 20) {
            break;
        }
        assert!(Instant::now() < end, "watchdog: lane switch");
        if sent < 5000 {
            let d = pattern(1 + (sent as usize * 37) % 3000, sent);
            recvs.push_back((sent, d.len(), w.tag_recv(vec![0; 4096], 0, 0).unwrap()));
            let s = w.tag_send(ep, sent, &d).unwrap();
            assert_eq!(finish(&mut w, s, "send").status, Ok(()));
            sent += 1;
        }
        w.progress();
    }
    assert!(w.ep_am_lane(ep).unwrap().starts_with("rc_verbs/"));
    // Some went over tcp (before the switch), the rest over rc_verbs.
    let before_switch = before_switch.unwrap();
    assert!(
        before_switch >= 1 && before_switch < sent,
        "{before_switch} of {sent}"
    );
    for (i, len, r) in recvs {
        let c = finish(&mut w, r, "echo");
        assert_eq!(c.status, Ok(()));
        assert_eq!(c.tag, i, "echo out of order");
        assert_eq!(c.len, len);
        assert!(
            c.buf.unwrap()[..len] == pattern(len, i)[..],
            "echo {i} differs"
        );
    }
    eprintln!(
        "{sent} messages, {before_switch} before the switch; {} held here until the child's marker",
        w.stats().am_switch_held
    );
    assert_eq!(w.stats().am_lane_switches, 1);
    let lane = peer.expect_line(&mut w, "LANE ");
    assert!(lane.starts_with("rc_verbs/"), "{lane}");
    peer.stop(&mut w, ep);
}

#[test]
fn mp_killed_peer_fails_the_endpoint() {
    let Some((mut w, mut peer, ep)) = mp_setup("sleep", config(Duration::from_secs(3))) else {
        return;
    };
    echo_check_alive(&mut w, ep);
    peer.child.kill().unwrap();
    peer.child.wait().unwrap();
    // Sends keep going over rc_verbs until the endpoint reports the failure (rc retry
    // exhausted, the wire-up connection closed, or keepalive silence: whichever comes first).
    let end = Instant::now() + DEADLINE;
    let err = loop {
        assert!(Instant::now() < end, "watchdog: dead peer not detected");
        if let Err(e) = w.ep_status(ep) {
            break e;
        }
        match w.tag_send(ep, 5, &[1; 64]) {
            Ok(op) => {
                let _ = finish(&mut w, op, "send to a dead peer");
            }
            Err(e) => break e,
        }
        w.progress();
    };
    eprintln!("endpoint failed: {err}");
    assert!(w.ep_status(ep).is_err());
    assert!(w.tag_send(ep, 6, &[1]).is_err());
    assert!(w.stats().ep_failures >= 1);
}

/// The sleeping child receives nothing; this only checks the endpoint is usable before the kill.
fn echo_check_alive(w: &mut Worker, ep: EpHandle) {
    assert_eq!(w.ep_status(ep), Ok(()));
    let s = w.tag_send(ep, 4, &[7; 16]).unwrap();
    assert_eq!(finish(w, s, "send to a live peer").status, Ok(()));
}

/// Runs anywhere (no rc_verbs needed): the ordering rule rc_verbs' credit back-pressure first
/// exposed. Rendezvous and eager messages queued behind back-pressure (posix's FIFO fills: the
/// receiver does not progress while 400 are sent) must keep their order, so an RTS sent from
/// the pending queue is never queued again behind later messages.
#[test]
fn backpressure_keeps_rndv_and_eager_in_order() {
    let cfg = || UcpConfig {
        tls: vec!["posix".into()],
        rndv_thresh: Some(4096),
        ..Default::default()
    };
    let ctx = |c| {
        Context::new(ContextParams {
            features: Features::TAG,
            config: Some(c),
        })
        .expect("posix context")
    };
    let (ca, cb) = (ctx(cfg()), ctx(cfg()));
    let mut a = Worker::new(&ca).unwrap();
    let mut b = Worker::new(&cb).unwrap();
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    let msgs: Vec<(u64, Vec<u8>)> = (0..400u64)
        .map(|i| {
            let n = if i % 3 == 0 {
                6000
            } else {
                (i as usize * 13) % 300
            };
            (i, pattern(n, i))
        })
        .collect();
    let sends: Vec<Op> = msgs
        .iter()
        .map(|(t, d)| a.tag_send(ab, *t, d).unwrap())
        .collect();
    for _ in 0..100 {
        a.progress();
    }
    // Wildcard receives: only the order says which message is which.
    for (t, d) in &msgs {
        let r = b.tag_recv(vec![0; 8192], 0, 0).unwrap();
        let c = finish_with(&mut b, &mut [&mut a], r, "receive");
        assert_eq!(c.status, Ok(()));
        assert_eq!(c.tag, *t, "message {t} out of order");
        assert_eq!(&c.buf.unwrap()[..c.len], &d[..], "message {t} differs");
    }
    for s in sends {
        assert_eq!(finish_with(&mut a, &mut [&mut b], s, "send").status, Ok(()));
    }
}
