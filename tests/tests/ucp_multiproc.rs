//! Multi-process ucp tests: this test binary re-runs itself as the peer process (selected by
//! `RUCX_UCP_TEST_ROLE`). Every wait has a watchdog, so a broken protocol fails instead of hanging.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ucp::{
    Completion, Context, ContextParams, EpHandle, EpParams, Error, Features, Op, UcpConfig, Worker,
    TAG_MASK_EXACT,
};
use ucs::testing::{hex, unhex};

const WATCHDOG: Duration = Duration::from_secs(120);
const ROLE: &str = "RUCX_UCP_TEST_ROLE";
const PEER: &str = "RUCX_UCP_TEST_PEER";
const TLS: &str = "RUCX_UCP_TEST_TLS";
const RNDV: &str = "RUCX_UCP_TEST_RNDV_THRESH";

/// Silence bound of the killed-peer test. The echo tests use a long one: a debug-build peer
/// verifying 64 MiB does not progress for a while, and must not be declared dead.
const KILL_TIMEOUT: Duration = Duration::from_secs(1);

fn config(tls: &str, keepalive_timeout: Duration) -> UcpConfig {
    UcpConfig {
        tls: tls.split(',').map(String::from).collect(),
        net_devices: vec!["lo".into()],
        rndv_thresh: std::env::var(RNDV)
            .ok()
            .map(|v| v.parse().expect("threshold")),
        keepalive_interval: Some(Duration::from_millis(100)),
        keepalive_timeout,
        ..Default::default()
    }
}

fn worker(tls: &str) -> Worker {
    worker_with(tls, Duration::from_secs(60))
}

fn worker_with(tls: &str, keepalive_timeout: Duration) -> Worker {
    worker_cfg(config(tls, keepalive_timeout))
}

fn worker_cfg(cfg: UcpConfig) -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(cfg),
    })
    .expect("context");
    Worker::new(&ctx).expect("worker")
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u64).wrapping_mul(2654435761).wrapping_add(seed) as u8)
        .collect()
}

/// Waits for `op` with a watchdog.
fn finish(w: &mut Worker, op: Op, what: &str) -> Completion {
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
        assert!(Instant::now() < deadline, "watchdog: {what} did not finish");
    }
}

/// The peer process: connects to the parent, echoes every message back with the same tag.
#[test]
fn ucp_multiproc_child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    ucs::log::init();
    let tls = std::env::var(TLS).expect("tls");
    let mut w = worker(&tls);
    let parent = unhex(&std::env::var(PEER).expect("peer address"));
    let ep = w
        .ep_create(&parent, EpParams::default())
        .expect("ep to parent");
    if role == "rma" || role == "rma_user" || role == "rma_file" {
        // Serve a mapping until the parent closes our stdin: allocated by ucp (a shared
        // segment when a shared-memory transport is on), the user's own buffer, or the
        // user's shared mapping of a file the parent maps too.
        let map = match role.as_str() {
            "rma" => w.mem_map(1 << 20).expect("mem_map"),
            "rma_user" => w.mem_map_vec(vec![0xEE; 1 << 20]).expect("mem_map_vec"),
            _ => {
                let view = shared_file_view(std::os::unix::process::parent_id());
                // SAFETY: the view stays mapped until the process exits.
                unsafe { w.mem_map_raw(view, 1 << 20) }.expect("mem_map_raw")
            }
        };
        map.write(0, &[0; 64]).unwrap();
        println!(
            "ADDR {} RKEY {} BASE {}",
            hex(w.address()),
            hex(map.rkey_packed()),
            map.address()
        );
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
        while rx.try_recv().is_err() && Instant::now() < deadline {
            if w.progress() == 0 {
                std::thread::yield_now();
            }
        }
        drop(map);
        return;
    }
    if role == "send_then_die" {
        // A client that sends one message, sees it complete, and dies at once (no flush, no
        // more progress): a completed send must not be lost with the process. (The parent
        // progresses once it has our address line.)
        println!("ADDR {}", hex(w.address()));
        let s = w
            .tag_send(ep, SEND_THEN_DIE_TAG, &pattern(SEND_THEN_DIE_LEN, 7))
            .unwrap();
        assert_eq!(finish(&mut w, s, "send before dying").status, Ok(()));
        // SAFETY: plain syscall; the process ends here.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    println!("ADDR {}", hex(w.address()));
    if role == "am" {
        am_child(&mut w, ep);
        return;
    }
    if role == "sleep" {
        // Be a live peer until killed.
        loop {
            w.progress();
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // The parent sends the size list once it knows the endpoint's protocol boundaries.
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin.read_line(&mut line).expect("sizes line");
    let sizes: Vec<usize> = line
        .trim()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("size"))
        .collect();
    for (i, &len) in sizes.iter().enumerate() {
        let r = w.tag_recv(vec![0; len], i as u64, TAG_MASK_EXACT).unwrap();
        let c = finish(&mut w, r, "child receive");
        assert_eq!(c.status, Ok(()), "child recv {len}");
        assert_eq!(c.len, len);
        let buf = c.buf.unwrap();
        assert!(
            buf == pattern(len, i as u64),
            "child: data of {len} bytes differ"
        );
        let s = w.tag_send_vec(ep, i as u64, buf).unwrap();
        assert_eq!(finish(&mut w, s, "child send").status, Ok(()));
    }
    let f = w.flush().unwrap();
    finish(&mut w, f, "child flush");
    // Stay until the parent has the last reply (it closes our stdin to release us).
    let deadline = Instant::now() + WATCHDOG;
    let mut rest = String::new();
    while stdin.read_line(&mut rest).map(|n| n > 0).unwrap_or(false) {
        assert!(Instant::now() < deadline);
    }
    drop(w);
}

thread_local! {
    /// Extra words of this thread's last child address line (`RKEY <hex> BASE <n>` for the
    /// rma role).
    static LAST_EXTRA: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(role: &str, tls: &str, parent: &[u8]) -> (ChildGuard, Vec<u8>) {
    spawn_child_rndv(role, tls, parent, None)
}

fn spawn_child_rndv(
    role: &str,
    tls: &str,
    parent: &[u8],
    rndv: Option<usize>,
) -> (ChildGuard, Vec<u8>) {
    let exe = std::env::current_exe().expect("test exe");
    let mut cmd = Command::new(exe);
    if let Some(r) = rndv {
        cmd.env(RNDV, r.to_string());
    }
    let mut child = cmd
        .args([
            "--exact",
            "ucp_multiproc_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(TLS, tls)
        .env(PEER, hex(parent))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let out = child.stdout.take().expect("stdout");
    let guard = ChildGuard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            // libtest may print "test name ... " on the same line first.
            if let Some(i) = line.find("ADDR ") {
                let _ = tx.send(line[i + 5..].trim().to_string());
            }
        }
    });
    let line = rx.recv_timeout(WATCHDOG).expect("watchdog: child address");
    let mut it = line.split_whitespace();
    let addr = unhex(it.next().expect("address"));
    LAST_EXTRA.with(|e| *e.borrow_mut() = it.map(String::from).collect());
    (guard, addr)
}

fn boundary_sizes(pc: &ucp::wireup::ProtoConfig) -> Vec<usize> {
    let mut v = vec![0, 1];
    for b in pc.boundaries() {
        v.extend([b.saturating_sub(1), b, b + 1]);
    }
    v.push(64 << 20);
    v.sort_unstable();
    v.dedup();
    v
}

/// Gives our worker's protocol counters and how many rendezvous the transport's tag offload
/// moved (sent or matched).
fn echo_test(tls: &str, rndv: Option<usize>) -> (ucp::ProtoStats, u64) {
    let mut w = worker_cfg(UcpConfig {
        rndv_thresh: rndv,
        ..config(tls, Duration::from_secs(60))
    });
    let (mut child, caddr) = spawn_child_rndv("echo", tls, w.address(), rndv);
    let ep: EpHandle = w
        .ep_create(&caddr, EpParams::default())
        .expect("ep to child");
    // Both sides pick the same lanes (same host, same transports), so our endpoint's
    // boundaries are the child's too.
    let sizes = boundary_sizes(&w.ep_proto_config(ep).unwrap());
    let list: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
    {
        use std::io::Write;
        let stdin = child.0.stdin.as_mut().expect("child stdin");
        writeln!(stdin, "{}", list.join(",")).expect("send sizes");
    }
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, i as u64);
        let r = w.tag_recv(vec![0; len], i as u64, TAG_MASK_EXACT).unwrap();
        let s = w.tag_send(ep, i as u64, &data).unwrap();
        assert_eq!(finish(&mut w, s, "send").status, Ok(()), "send {len}");
        let c = finish(&mut w, r, "echo");
        assert_eq!(c.status, Ok(()), "echo {len}");
        assert_eq!(c.len, len);
        assert!(c.buf.unwrap() == data, "echo of {len} bytes differs");
    }
    drop(child.0.stdin.take());
    let st = child.0.wait().expect("child exit");
    assert!(st.success(), "child failed: {st:?}");
    let stats = w.stats();
    assert!(stats.rndv_rts > 0, "{stats:?}");
    if rndv.is_some() {
        // Over tcp, tag offload carries the multi-fragment range as tagged frames.
        let tm = w.tag_offload_stats();
        assert!(stats.eager_multi > 0 || tm.sent > 0, "{stats:?} {tm:?}");
    }
    let tm = w.tag_offload_stats();
    (stats, tm.sent_rndv + tm.matched_rndv)
}

/// posix + cma: the endpoint's protocol table, chosen with both directions busy, reads every
/// rendezvous size with get_zcopy (no AM pipeline range, no tag-offload rendezvous) from a
/// threshold above 8 KiB; the echo sizes include both sides of that threshold (`boundaries`),
/// and every message arrives intact both ways, by ucp's get and never by the pipeline.
#[test]
fn ucp_multiproc_shm_rndv_get_from_the_threshold() {
    use ucp::wireup::RndvScheme;
    let mut w = worker("posix,cma");
    let (_child, caddr) = spawn_child("sleep", "posix,cma", w.address());
    let ep = w.ep_create(&caddr, EpParams::default()).expect("ep");
    let pc = w.ep_proto_config(ep).unwrap();
    assert_eq!(pc.rndv, RndvScheme::Get, "{pc:?}");
    assert_eq!(pc.rndv_am_max, 0, "{pc:?}");
    assert!(pc.rndv_thresh > 8192, "{pc:?}");
    for n in [pc.rndv_thresh, 64 << 10, 64 << 20] {
        assert_eq!(pc.rndv_for(n), RndvScheme::Get, "{n}");
    }
    assert_eq!(pc.tm_rndv_min, usize::MAX, "{pc:?}");
    let info = w.ep_proto_info(ep).unwrap();
    assert!(
        !info.contains("rendezvous RTR + AM pipeline")
            && info.contains("rendezvous get_zcopy")
            && !info.contains("tag offload rndv"),
        "{info}"
    );
    drop(w);
    let (stats, tm_rndv) = echo_test("posix,cma", None);
    assert_eq!(stats.rndv_am, 0, "{stats:?}");
    assert!(stats.rndv_get > 0, "{stats:?}");
    assert_eq!(tm_rndv, 0, "{stats:?}");
}

#[test]
fn ucp_multiproc_shm_posix_tag_sizes() {
    echo_test("posix,cma", None);
}

#[test]
fn ucp_multiproc_shm_posix_multi_fragment_sizes() {
    echo_test("posix,cma", Some(200_000));
}

#[test]
fn ucp_multiproc_tcp_tag_sizes() {
    echo_test("tcp", None);
}

#[test]
fn ucp_multiproc_tcp_multi_fragment_sizes() {
    echo_test("tcp", Some(300_000));
}

#[test]
fn ucp_multiproc_shm_sysv_tag_sizes() {
    echo_test("sysv,cma", None);
}

#[test]
fn ucp_multiproc_shm_killed_peer_fails_endpoint_within_keepalive() {
    killed_peer("posix,cma");
}

#[test]
fn ucp_multiproc_tcp_killed_peer_fails_endpoint_within_keepalive() {
    killed_peer("tcp");
}

fn killed_peer(tls: &str) {
    for round in 0..3 {
        let mut w = worker_with(tls, KILL_TIMEOUT);
        let (mut child, caddr) = spawn_child("sleep", tls, w.address());
        let ep = w.ep_create(&caddr, EpParams::default()).expect("ep");
        // An outstanding receive tied to the child (a sync send it never matches).
        let s = w.tag_send_sync(ep, 77, b"unmatched").unwrap();
        let r = w.tag_recv(vec![0; 8], 1, TAG_MASK_EXACT).unwrap();
        child.0.kill().expect("kill child");
        let _ = child.0.wait();
        let killed = Instant::now();
        let c = finish(&mut w, s, "failed sync send");
        let detected = killed.elapsed();
        assert!(
            matches!(
                c.status,
                Err(Error::Timeout(_))
                    | Err(Error::PeerFailure(_))
                    | Err(Error::ConnectionReset(_))
                    | Err(Error::Unreachable(_))
            ),
            "round {round}: {:?}",
            c.status
        );
        assert!(w.ep_status(ep).is_err());
        assert!(
            w.tag_send(ep, 1, b"x").is_err(),
            "sends on a failed endpoint fail"
        );
        // The posted wildcard-free receive is not tied to the dead peer: still cancelable.
        let Op::Pending(r) = r else {
            panic!("nothing was sent")
        };
        assert!(w.request_cancel(&r).unwrap());
        let _ = w.request_take(r);
        // Keepalive bound: the timeout plus one check interval (no timing assertion beyond the
        // watchdog; printed for the report).
        eprintln!("round {round}: killed peer detected after {detected:?} (bound {KILL_TIMEOUT:?} + interval)");
    }
}

const SEND_THEN_DIE_TAG: u64 = 0x5e9d;
const SEND_THEN_DIE_LEN: usize = 1000;

/// A peer whose send completed and which then died at once (before its connection was surely
/// up: the send is its first operation): the message arrives.
fn send_then_die(tls: &str) {
    for round in 0..3 {
        let mut w = worker(tls);
        let r = w
            .tag_recv(
                vec![0; SEND_THEN_DIE_LEN],
                SEND_THEN_DIE_TAG,
                TAG_MASK_EXACT,
            )
            .unwrap();
        let (_child, _) = spawn_child("send_then_die", tls, w.address());
        let c = finish(
            &mut w,
            r,
            "the message of a peer that died after its send completed",
        );
        assert_eq!(c.status, Ok(()), "{tls} round {round}");
        assert!(
            c.buf.as_deref() == Some(&pattern(SEND_THEN_DIE_LEN, 7)[..]),
            "{tls} round {round}: data differ"
        );
    }
}

#[test]
fn ucp_multiproc_tcp_completed_send_survives_the_senders_death() {
    send_then_die("tcp");
}

#[test]
fn ucp_multiproc_shm_completed_send_survives_the_senders_death() {
    send_then_die("posix,cma");
}

/// A stopped peer (alive, its process not scheduled, so its application sends nothing) is not
/// dead: with the default configuration (no application-level timeout) every transport check
/// passes, however long it stays stopped, and the endpoint works when it resumes.
fn stopped_peer_is_not_dead(tls: &str) {
    let off = UcpConfig::default().keepalive_timeout;
    assert_eq!(off, Duration::MAX, "off by default");
    let mut w = worker_with(tls, off);
    let (child, caddr) = spawn_child("sleep", tls, w.address());
    let ep = w.ep_create(&caddr, EpParams::default()).expect("ep");
    let f = w.ep_flush(ep).unwrap();
    assert_eq!(finish(&mut w, f, "flush").status, Ok(()));
    // SAFETY: plain syscall on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, libc::SIGSTOP) }, 0);
    // Fifty transport checks (interval 100 ms) while the peer cannot answer anything itself,
    // with a flush outstanding (over tcp it waits for the peer's reply).
    let s = w.tag_send(ep, 5, &pattern(1000, 3)).unwrap();
    let f = w.ep_flush(ep).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if w.progress() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(
        w.ep_status(ep),
        Ok(()),
        "{tls}: a stopped peer was declared dead"
    );
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, libc::SIGCONT) }, 0);
    assert_eq!(finish(&mut w, s, "send to the resumed peer").status, Ok(()));
    assert_eq!(finish(&mut w, f, "flush across the stop").status, Ok(()));
    let f = w.ep_flush(ep).unwrap();
    assert_eq!(finish(&mut w, f, "flush after resume").status, Ok(()));
    drop(child);
}

#[test]
fn ucp_multiproc_shm_stopped_peer_is_not_dead() {
    stopped_peer_is_not_dead("posix,cma");
}

#[test]
fn ucp_multiproc_tcp_stopped_peer_is_not_dead() {
    stopped_peer_is_not_dead("tcp");
}

/// A stopped (alive but silent) peer: no transport error can fire; only the application-level
/// keepalive (`RUCX_KEEPALIVE_TIMEOUT`, off by default, set here) finds it.
fn silent_peer(tls: &str) {
    for round in 0..3 {
        let mut w = worker_with(tls, KILL_TIMEOUT);
        let (child, caddr) = spawn_child("sleep", tls, w.address());
        let ep = w.ep_create(&caddr, EpParams::default()).expect("ep");
        // Wire-up round trip: the child's keepalives are flowing before it goes silent.
        let f = w.ep_flush(ep).unwrap();
        finish(&mut w, f, "flush");
        let s = w.tag_send_sync(ep, 77, b"unmatched").unwrap();
        // SAFETY: plain syscall on our own child's pid.
        let rc = unsafe { libc::kill(child.0.id() as i32, libc::SIGSTOP) };
        assert_eq!(rc, 0, "SIGSTOP");
        let stopped = Instant::now();
        let c = finish(&mut w, s, "sync send to a silent peer");
        let detected = stopped.elapsed();
        assert!(
            matches!(c.status, Err(Error::Timeout(_))),
            "round {round}: {:?}",
            c.status
        );
        eprintln!("{tls} round {round}: silent peer detected after {detected:?} (bound {KILL_TIMEOUT:?} + interval)");
        drop(child);
    }
}

#[test]
fn ucp_multiproc_shm_silent_peer_detected_by_keepalive() {
    silent_peer("posix,cma");
}

#[test]
fn ucp_multiproc_tcp_silent_peer_detected_by_keepalive() {
    silent_peer("tcp");
}

/// How the parent expects to reach the child's mapping.
#[derive(Debug, Clone, Copy, PartialEq)]
enum RmaPath {
    /// The peer's shared segment mapped here: copies and CPU atomics.
    Mapped,
    /// Registered memory through cma; atomics emulated over active messages.
    Cma,
    /// The network transport's own RMA and atomics.
    Transport,
}

/// The status of an operation that may fail at once or in its completion.
fn status_of(w: &mut Worker, r: Result<Op, Error>, what: &str) -> Result<(), Error> {
    match r {
        Ok(op) => finish(w, op, what).status,
        Err(e) => Err(e),
    }
}

/// Path of the file the rma_file role maps, named after the parent process.
fn shared_file_path(parent: u32) -> String {
    format!("/dev/shm/rucx-test-shfile-{parent}")
}

/// A 1 MiB zero-filled shared mapping of the parent's file (created if it is not there),
/// never unmapped.
fn shared_file_view(parent: u32) -> *mut u8 {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(shared_file_path(parent))
        .expect("open the shared file");
    f.set_len(1 << 20).expect("size the shared file");
    // SAFETY: a fresh shared mapping of an open file.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            1 << 20,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of the shared file");
    p.cast()
}

fn rma_test(tls: &str, role: &str, path: RmaPath) {
    use ucp::AmoSize;
    use uct::AtomicOp;
    let mut w = worker(tls);
    // The rma_file role's window is a file both processes map.
    let view = (role == "rma_file").then(|| shared_file_view(std::process::id()));
    let (mut child, caddr) = spawn_child(role, tls, w.address());
    if view.is_some() {
        std::fs::remove_file(shared_file_path(std::process::id())).expect("unlink");
    }
    let extra = LAST_EXTRA.with(|e| e.borrow().clone());
    assert_eq!(extra[0], "RKEY");
    let packed = unhex(&extra[1]);
    let base: u64 = extra[3].parse().expect("base");
    let ep = w.ep_create(&caddr, EpParams::default()).expect("ep");
    let rkey = w.rkey_unpack(ep, &packed).expect("rkey");
    assert_eq!(rkey.is_mapped(), path == RmaPath::Mapped, "{tls} {role}");
    // Small (put_short), odd-sized and fragment-spanning puts land exactly where aimed.
    for (n, at) in [(8usize, 200_000u64), (1, 300_001), (9000, 400_003)] {
        let d = pattern(n, n as u64);
        let op = w.put(ep, &d, base + at, &rkey).unwrap();
        assert_eq!(finish(&mut w, op, "small put").status, Ok(()));
        let op = w.get(ep, vec![0; n + 2], base + at - 1, &rkey).unwrap();
        let got = finish(&mut w, op, "small get").buf.unwrap();
        assert_eq!(&got[1..=n], &d[..], "{n} bytes at {at}");
        let fill = if role == "rma_user" { 0xEE } else { 0 };
        assert_eq!(
            (got[0], got[n + 1]),
            (fill, fill),
            "neighbours of {n} bytes at {at}"
        );
    }
    let data = pattern(700_000, 5);
    let op = w.put(ep, &data, base + 64, &rkey).unwrap();
    assert_eq!(finish(&mut w, op, "put").status, Ok(()));
    let op = w.ep_flush(ep).unwrap();
    assert_eq!(finish(&mut w, op, "flush").status, Ok(()));
    let op = w.get(ep, vec![0; data.len()], base + 64, &rkey).unwrap();
    let c = finish(&mut w, op, "get");
    assert_eq!(c.status, Ok(()));
    assert!(c.buf.unwrap() == data, "get reads back what put wrote");
    let op = w
        .atomic_fetch(ep, AtomicOp::Add, AmoSize::U64, 3, base, &rkey)
        .unwrap();
    assert_eq!(finish(&mut w, op, "fadd").value, 0);
    let op = w
        .atomic_cswap(ep, AmoSize::U64, 3, 40, base, &rkey)
        .unwrap();
    assert_eq!(finish(&mut w, op, "cswap").value, 3);
    let op = w
        .atomic_post(ep, AtomicOp::Or, AmoSize::U32, 0x100, base + 8, &rkey)
        .unwrap();
    finish(&mut w, op, "or");
    let op = w
        .atomic_fetch(ep, AtomicOp::Add, AmoSize::U32, 1, base + 8, &rkey)
        .unwrap();
    assert_eq!(finish(&mut w, op, "fadd32").value, 0x100);
    let op = w.get(ep, vec![0; 16], base, &rkey).unwrap();
    let got = finish(&mut w, op, "get words").buf.unwrap();
    assert_eq!(u64::from_le_bytes(got[..8].try_into().unwrap()), 40);
    assert_eq!(u32::from_le_bytes(got[8..12].try_into().unwrap()), 0x101);
    let (hw, emu) = w.atomic_counts();
    // Outside the mapping: a typed error, at once or in the completion; nothing written.
    let end = base + (1 << 20);
    let r = w.put(ep, &[1; 16], end - 8, &rkey);
    assert!(matches!(
        status_of(&mut w, r, "put past the end"),
        Err(Error::RemoteAccess(_))
    ));
    let r = w.get(ep, vec![0; 16], end - 8, &rkey);
    assert!(matches!(
        status_of(&mut w, r, "get past the end"),
        Err(Error::RemoteAccess(_))
    ));
    let r = w.get(ep, vec![0; 16], base - 16, &rkey);
    assert!(matches!(
        status_of(&mut w, r, "get before the start"),
        Err(Error::RemoteAccess(_))
    ));
    let r = w.atomic_fetch(ep, AtomicOp::Add, AmoSize::U64, 1, end, &rkey);
    assert!(matches!(
        status_of(&mut w, r, "atomic past the end"),
        Err(Error::RemoteAccess(_))
    ));
    if path == RmaPath::Cma {
        assert_eq!(hw, 0);
        assert_eq!(emu, 4);
        // An address outside the mapping is refused with a typed error (the key's bounds
        // are checked here before the target would refuse it).
        let r = w.atomic_fetch(ep, AtomicOp::Add, AmoSize::U64, 1, 8, &rkey);
        let st = status_of(&mut w, r, "bad atomic");
        assert!(matches!(st, Err(Error::RemoteAccess(_))), "{st:?}");
    } else {
        assert_eq!((hw, emu), (4, 0));
    }
    let op = w.get(ep, vec![0; 8], end - 8, &rkey).unwrap();
    let tail = finish(&mut w, op, "last word").buf.unwrap();
    let fill = if role == "rma_user" { 0xEE } else { 0 };
    assert_eq!(tail, vec![fill; 8], "the refused put wrote nothing");
    drop(child.0.stdin.take());
    let st = child.0.wait().expect("child");
    assert!(st.success());
}

#[test]
fn ucp_multiproc_shm_posix_mapped_rma_and_cpu_atomics() {
    rma_test("posix,cma", "rma", RmaPath::Mapped);
}

#[test]
fn ucp_multiproc_shm_sysv_mapped_rma_and_cpu_atomics() {
    rma_test("sysv,cma", "rma", RmaPath::Mapped);
}

/// The peer registers its own shared mapping of a file this process maps too (as MPICH's
/// windows in /dev/shm): put, get and atomics go through this process's mapping of the file.
#[test]
fn ucp_multiproc_shm_shared_file_mapped_rma_and_cpu_atomics() {
    rma_test("posix,cma", "rma_file", RmaPath::Mapped);
}

#[test]
fn ucp_multiproc_shm_user_memory_rma_via_cma_and_emulated_atomics() {
    rma_test("posix,cma", "rma_user", RmaPath::Cma);
}

#[test]
fn ucp_multiproc_tcp_rma_and_transport_atomics() {
    rma_test("tcp", "rma", RmaPath::Transport);
}

/// Sizes of the user active messages of the flush test: empty, short, one fragment, and one
/// above the shared-memory rendezvous threshold.
const AM_SIZES: [usize; 4] = [0, 8, 1000, 300_000];
const AM_ID: u16 = 7;

/// The "am" child: receives the parent's active messages, checks them, and answers with one
/// tag message holding how many arrived intact.
fn am_child(w: &mut Worker, ep: EpHandle) {
    use std::cell::RefCell;
    use std::rc::Rc;
    /// (header, data) of each active message received.
    type Inbox = Rc<RefCell<Vec<(Vec<u8>, Vec<u8>)>>>;
    let got: Inbox = Rc::default();
    let g = got.clone();
    w.am_set_handler(AM_ID, move |_, hdr, data| {
        g.borrow_mut().push((hdr.to_vec(), data))
    });
    let deadline = Instant::now() + WATCHDOG;
    while got.borrow().len() < AM_SIZES.len() {
        assert!(Instant::now() < deadline, "watchdog: child active messages");
        if w.progress() == 0 {
            std::thread::yield_now();
        }
    }
    let ok = got
        .borrow()
        .iter()
        .enumerate()
        .filter(|(i, (h, d))| {
            h.as_slice() == [*i as u8; 3] && *d == pattern(AM_SIZES[*i], *i as u64)
        })
        .count();
    let s = w.tag_send(ep, 99, &(ok as u64).to_le_bytes()).unwrap();
    assert_eq!(finish(w, s, "child reply").status, Ok(()));
    let f = w.flush().unwrap();
    finish(w, f, "child flush");
    let mut rest = String::new();
    while std::io::stdin()
        .read_line(&mut rest)
        .map(|n| n > 0)
        .unwrap_or(false)
    {}
}

/// Regression: a worker flush after user active-message sends to another process completes
/// (it used to wait forever), and every message arrives intact and in order.
fn am_flush_test(tls: &str) {
    let mut w = worker(tls);
    let (mut child, caddr) = spawn_child("am", tls, w.address());
    let ep = w
        .ep_create(&caddr, EpParams::default())
        .expect("ep to child");
    let mut ops = Vec::new();
    for (i, &len) in AM_SIZES.iter().enumerate() {
        let data = pattern(len, i as u64);
        ops.push(w.am_send_vec(ep, AM_ID, &[i as u8; 3], data).unwrap());
    }
    let f = w.flush().unwrap();
    assert_eq!(finish(&mut w, f, "worker flush after am").status, Ok(()));
    for op in ops {
        assert_eq!(finish(&mut w, op, "am send").status, Ok(()));
    }
    let f = w.ep_flush(ep).unwrap();
    assert_eq!(finish(&mut w, f, "ep flush after am").status, Ok(()));
    let r = w.tag_recv(vec![0; 8], 99, TAG_MASK_EXACT).unwrap();
    let c = finish(&mut w, r, "child reply");
    assert_eq!(c.status, Ok(()));
    let n = u64::from_le_bytes(c.buf.unwrap()[..8].try_into().unwrap());
    assert_eq!(
        n,
        AM_SIZES.len() as u64,
        "active messages intact at the child"
    );
    drop(child.0.stdin.take());
    let st = child.0.wait().expect("child exit");
    assert!(st.success(), "child failed: {st:?}");
}

#[test]
fn ucp_multiproc_shm_am_then_worker_flush_completes() {
    am_flush_test("posix,cma");
}

#[test]
fn ucp_multiproc_tcp_am_then_worker_flush_completes() {
    am_flush_test("tcp");
}
