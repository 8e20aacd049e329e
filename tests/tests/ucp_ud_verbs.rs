//! ucp over ud_verbs, alone and as rc_verbs' wire-up transport (run inside the Soft-RoCE VM by
//! `tests/rdma-vm/ci.sh`).
//!
//! - `tag_over_ud_verbs_alone`: `RUCX_TLS=ud_verbs`, two workers in one process: every
//!   protocol size (short, bcopy, multi-fragment eager, rendezvous over the AM pipeline) in
//!   order and intact.
//! - `rc_verbs_wired_up_by_ud_verbs_without_tcp`: `RUCX_TLS=rc_verbs,ud_verbs`: the AM lane
//!   starts on ud_verbs and moves to rc_verbs; no tcp resource is opened and the process holds
//!   no tcp socket (its socket descriptors are checked against `/proc/net/tcp{,6}`); a
//!   rendezvous goes by rc_verbs' tag offload.
//! - `mp_*`: two processes (this binary re-runs itself as the peer) over ud_verbs alone: 300
//!   messages echoed in order through wildcard receives while both sides drop 3% of the
//!   datagrams they receive on purpose (`RUCX_UD_FAULT_DROP`); a peer killed while messages
//!   are in flight fails the endpoint, and every send in flight finishes.
//!
//! Every test skips with a note when the machine has no ud_verbs device; the VM check fails if
//! anything skipped. A deadline on every wait is the watchdog.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ucp::{
    Completion, Context, ContextParams, EpHandle, EpParams, Features, Op, UcpConfig, Worker,
};
use ucs::testing::{hex, unhex};

const DEADLINE: Duration = Duration::from_secs(120);
const ROLE: &str = "RUCX_UDT_ROLE";
const PEER: &str = "RUCX_UDT_PEER";
const STOP: u64 = u64::MAX;

fn config(tls: &[&str], keepalive_timeout: Duration) -> UcpConfig {
    UcpConfig {
        tls: tls.iter().map(|s| s.to_string()).collect(),
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
            eprintln!("skipped: no ud_verbs context: {e}");
            return None;
        }
    };
    if !ctx.resources().iter().any(|r| r.tl_name == "ud_verbs") {
        eprintln!("skipped: no ud_verbs device on this machine (run tests/rdma-vm/ci.sh)");
        return None;
    }
    Some(Worker::new(&ctx).expect("worker"))
}

fn ud_worker() -> Option<Worker> {
    worker_cfg(config(&["ud_verbs"], Duration::from_secs(60)))
}

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

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(seed) as u8)
        .collect()
}

/// Sends `sizes` in order with one tag from `a` to `b`; each must arrive intact and in order.
fn stream_of_sizes(a: &mut Worker, b: &mut Worker, ab: EpHandle, sizes: &[usize], tag: u64) {
    let recvs: Vec<Op> = sizes
        .iter()
        .map(|&n| b.tag_recv(vec![0; n], tag, u64::MAX).unwrap())
        .collect();
    let mut sent = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let d = pattern(n, i as u64);
        let op = a.tag_send(ab, tag, &d).unwrap();
        let c = finish_with(a, &mut [b], op, "send");
        assert_eq!(c.status, Ok(()), "send of {n} bytes");
        sent.push(d);
    }
    for (op, d) in recvs.into_iter().zip(sent) {
        let c = finish_with(b, &mut [a], op, "receive");
        assert_eq!(c.status, Ok(()), "receive of {} bytes", d.len());
        assert_eq!(c.len, d.len());
        assert!(
            c.buf.unwrap() == d,
            "{} bytes differ or out of order",
            d.len()
        );
    }
}

fn wired(me: &mut Worker, others: &mut [&mut Worker], ep: EpHandle) -> String {
    let end = Instant::now() + DEADLINE;
    while !me.ep_wired_up(ep).expect("endpoint") {
        assert!(Instant::now() < end, "watchdog: wire-up");
        me.progress();
        for o in others.iter_mut() {
            o.progress();
        }
    }
    me.ep_am_lane(ep).unwrap()
}

#[test]
fn tag_over_ud_verbs_alone() {
    let (Some(mut a), Some(mut b)) = (ud_worker(), ud_worker()) else {
        return;
    };
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    let lane = wired(&mut a, &mut [&mut b], ab);
    assert!(lane.starts_with("ud_verbs/"), "AM lane is {lane}");
    let info = a.ep_proto_info(ab).unwrap();
    eprintln!("{info}");
    assert!(!info.contains("tcp"), "{info}");
    let p = a.ep_proto_config(ab).unwrap();
    let short = p.short_max.expect("ud_verbs has am_short");
    let sizes = [
        0,
        8,
        short,
        short + 1,
        p.bcopy_single_max,
        p.bcopy_single_max + 1,
        20_000,
        p.rndv_thresh,
        1 << 20,
        3,
    ];
    stream_of_sizes(&mut a, &mut b, ab, &sizes, 7);
    let baddr = a.address().to_vec();
    let ba = b.ep_create(&baddr, EpParams::default()).unwrap();
    stream_of_sizes(&mut b, &mut a, ba, &sizes, 8);
    assert!(a.stats().eager_multi >= 1, "{:?}", a.stats());
}

/// Socket inodes of this process's descriptors.
fn my_socket_inodes() -> Vec<u64> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Inodes of every tcp socket of this network namespace.
fn tcp_inodes() -> Vec<u64> {
    let mut out = Vec::new();
    for f in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for line in text.lines().skip(1) {
            if let Some(inode) = line.split_whitespace().nth(9).and_then(|s| s.parse().ok()) {
                out.push(inode);
            }
        }
    }
    out
}

#[test]
fn rc_verbs_wired_up_by_ud_verbs_without_tcp() {
    let cfg = || config(&["rc_verbs", "ud_verbs"], Duration::from_secs(60));
    let (Some(mut a), Some(mut b)) = (worker_cfg(cfg()), worker_cfg(cfg())) else {
        return;
    };
    let ab = a.ep_create(b.address(), EpParams::default()).unwrap();
    let lane = wired(&mut a, &mut [&mut b], ab);
    assert!(lane.starts_with("rc_verbs/"), "AM lane is {lane}");
    let baddr = a.address().to_vec();
    let ba = b.ep_create(&baddr, EpParams::default()).unwrap();
    assert!(wired(&mut b, &mut [&mut a], ba).starts_with("rc_verbs/"));
    assert_eq!(a.stats().am_lane_switches, 1, "{:?}", a.stats());
    let info = a.ep_proto_info(ab).unwrap();
    eprintln!("{info}");
    assert!(!info.contains("tcp"), "{info}");
    // Rendezvous whose receives were posted first (and alone: ucp offloads no receive behind
    // a software-only one) go by rc_verbs' tag offload, read by the receiving transport.
    let before = a.tag_offload_stats();
    stream_of_sizes(&mut a, &mut b, ab, &[1 << 20, 200_000], 3);
    let sent = a.tag_offload_stats();
    eprintln!(
        "sender's tag offload: {sent:?}, receiver's: {:?}",
        b.tag_offload_stats()
    );
    assert!(b.tag_offload_stats().posting);
    assert_eq!(sent.sent_rndv - before.sent_rndv, 2, "{sent:?}");
    assert_eq!(sent.matched_rndv - before.matched_rndv, 2, "{sent:?}");
    // Then eager sizes and a software rendezvous (its receive behind small ones).
    stream_of_sizes(&mut a, &mut b, ab, &[8, 5000, 200_000, 0], 4);
    // No tcp: neither resource nor socket.
    let socks = my_socket_inodes();
    let tcp = tcp_inodes();
    let mine: Vec<u64> = socks.iter().copied().filter(|i| tcp.contains(i)).collect();
    assert!(
        mine.is_empty(),
        "this process holds tcp sockets {mine:?} with RUCX_TLS=rc_verbs,ud_verbs"
    );
    eprintln!(
        "{} socket descriptors, none of them tcp ({} tcp sockets in the namespace)",
        socks.len(),
        tcp.len()
    );
}

// ---- two processes ---------------------------------------------------------------------------

/// The peer process: connects to the parent over ud_verbs and echoes every message with its
/// tag (wildcard receives) until STOP.
#[test]
fn mp_ud_child_entry() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    let mut w = ud_worker().expect("ud_verbs in the child");
    let parent = unhex(&std::env::var(PEER).expect("peer address"));
    let ep = w.ep_create(&parent, EpParams::default()).expect("ep");
    println!("ADDR {}", hex(w.address()));
    loop {
        let r = w.tag_recv(vec![0; 1 << 16], 0, 0).unwrap();
        let c = finish_with(&mut w, &mut [], r, "child receive");
        assert_eq!(c.status, Ok(()), "child receive");
        if c.tag == STOP {
            break;
        }
        let mut buf = c.buf.unwrap();
        buf.truncate(c.len);
        let s = w.tag_send_vec(ep, c.tag, buf).unwrap();
        assert_eq!(finish_with(&mut w, &mut [], s, "child send").status, Ok(()));
    }
    let s = w.tag_send(ep, STOP, &[]).unwrap();
    finish_with(&mut w, &mut [], s, "child stop reply");
    let f = w.flush().unwrap();
    finish_with(&mut w, &mut [], f, "child flush");
    let mut rest = String::new();
    while std::io::stdin()
        .read_line(&mut rest)
        .map(|n| n > 0)
        .unwrap_or(false)
    {}
}

struct Peer {
    child: Child,
    addr: Vec<u8>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(role: &str, w: &mut Worker, drop_share: Option<&str>) -> Peer {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "mp_ud_child_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .env(PEER, hex(w.address()))
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    if let Some(p) = drop_share {
        cmd.env("RUCX_UD_FAULT_DROP", p);
    }
    let mut child = cmd.spawn().expect("spawn child");
    let out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(|l| l.ok()) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let end = Instant::now() + DEADLINE;
    let addr = loop {
        if let Ok(l) = rx.try_recv() {
            if let Some(pos) = l.find("ADDR ") {
                break unhex(l[pos + 5..].trim());
            }
        }
        assert!(Instant::now() < end, "watchdog: child address");
        w.progress();
    };
    Peer { child, addr }
}

#[test]
fn mp_lossy_ud_echo_in_order() {
    // Both processes drop 3% of the datagrams they receive (the child through its
    // environment, this process through its own, read when the interface opens).
    if std::env::var(ROLE).is_ok() || ud_worker().is_none() {
        return;
    }
    std::env::set_var("RUCX_UD_FAULT_DROP", "0.03,seed=11");
    let mut w = ud_worker().expect("ud_verbs");
    let peer = spawn("echo", &mut w, Some("0.03,seed=12"));
    let ep = w
        .ep_create(&peer.addr.clone(), EpParams::default())
        .unwrap();
    let lane = wired(&mut w, &mut [], ep);
    assert!(lane.starts_with("ud_verbs/"), "{lane}");
    let msgs: Vec<(u64, Vec<u8>)> = (0..300u64)
        .map(|i| {
            let n = [0usize, 8, 100, 900, 3000, 20_000][i as usize % 6];
            (1000 + i, pattern(n, i))
        })
        .collect();
    let recvs: Vec<Op> = msgs
        .iter()
        .map(|(_, d)| w.tag_recv(vec![0; d.len()], 0, 0).unwrap())
        .collect();
    for (t, d) in &msgs {
        let s = w.tag_send(ep, *t, d).unwrap();
        assert_eq!(finish_with(&mut w, &mut [], s, "send").status, Ok(()));
    }
    for (i, (r, (t, d))) in recvs.into_iter().zip(&msgs).enumerate() {
        let c = finish_with(&mut w, &mut [], r, "echo");
        assert_eq!(c.status, Ok(()), "echo {i}");
        assert_eq!(c.tag, *t, "echo {i} out of order");
        assert!(c.buf.unwrap()[..c.len] == d[..], "echo {i} differs");
    }
    let r = w.tag_recv(Vec::new(), STOP, u64::MAX).unwrap();
    let s = w.tag_send(ep, STOP, &[]).unwrap();
    finish_with(&mut w, &mut [], s, "stop");
    finish_with(&mut w, &mut [], r, "stop reply");
    std::env::remove_var("RUCX_UD_FAULT_DROP");
    drop(peer);
}

#[test]
fn mp_killed_peer_fails_the_ud_endpoint() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let Some(mut w) = worker_cfg(config(&["ud_verbs"], Duration::from_secs(3))) else {
        return;
    };
    let mut peer = spawn("echo", &mut w, None);
    let ep = w
        .ep_create(&peer.addr.clone(), EpParams::default())
        .unwrap();
    wired(&mut w, &mut [], ep);
    // Mid-transfer: echoes flowing both ways, then the peer is killed while a stream of
    // multi-datagram messages is in flight.
    for i in 0..20u64 {
        let r = w.tag_recv(vec![0; 4000], i, u64::MAX).unwrap();
        let s = w.tag_send(ep, i, &pattern(4000, i)).unwrap();
        assert_eq!(finish_with(&mut w, &mut [], s, "send").status, Ok(()));
        assert_eq!(finish_with(&mut w, &mut [], r, "echo").status, Ok(()));
    }
    let inflight: Vec<Op> = (0..30u64)
        .map(|i| w.tag_send(ep, 100 + i, &pattern(4000, i)).unwrap())
        .collect();
    peer.child.kill().unwrap();
    peer.child.wait().unwrap();
    // Each finishes, delivered before the kill or failed with the endpoint (none hangs), and
    // in order: once one has failed, no later one was delivered.
    let statuses: Vec<_> = inflight
        .into_iter()
        .map(|op| finish_with(&mut w, &mut [], op, "a send in flight at the kill").status)
        .collect();
    let delivered = statuses.iter().take_while(|s| s.is_ok()).count();
    eprintln!("in flight at the kill: {delivered} delivered, then {statuses:?}");
    assert!(
        statuses[delivered..].iter().all(|s| s.is_err()),
        "a send after a failed one completed: {statuses:?}"
    );
    let t0 = Instant::now();
    let end = t0 + DEADLINE;
    let err = loop {
        assert!(Instant::now() < end, "watchdog: dead peer not detected");
        if let Err(e) = w.ep_status(ep) {
            break e;
        }
        match w.tag_send(ep, 5, &[1; 64]) {
            Ok(op) => {
                let _ = finish_with(&mut w, &mut [], op, "send to a dead peer");
            }
            Err(e) => break e,
        }
        w.progress();
    };
    eprintln!("endpoint failed after {:?}: {err}", t0.elapsed());
    assert!(w.tag_send(ep, 6, &[1]).is_err());
    assert!(w.stats().ep_failures >= 1);
}
