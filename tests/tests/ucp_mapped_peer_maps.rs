//! A receiver reads unexpected rendezvous from a sender's shared segment in place, through
//! mappings its endpoint keeps: they go when the endpoint closes or its peer dies (no segment
//! of a killed peer stays mapped), and a sender that frees a segment and maps a new one is read
//! from the new one. The sender is this test binary re-run as a child process (selected by
//! `RUCX_PM_ROLE`); every wait has a watchdog.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use ucp::{
    CloseMode, Completion, Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker,
    TAG_MASK_EXACT,
};
use ucs::testing::{hex, unhex};

const WATCHDOG: Duration = Duration::from_secs(120);
const ROLE: &str = "RUCX_PM_ROLE";
const PEER: &str = "RUCX_PM_PEER";
const TLS: &str = "RUCX_PM_TLS";
/// Bytes per message: a rendezvous read with get, and larger than the FIFO segment, so the
/// data segments are told from FIFOs by size.
const LEN: usize = 4 << 20;
/// Messages per mapping.
const PER_ROUND: u64 = 3;
/// Mappings the sender sends from, one after the other (each freed before the next).
const ROUNDS: u64 = 2;

fn worker(tls: &str) -> Worker {
    let ctx = Context::new(ContextParams {
        features: Features::TAG | Features::RMA,
        config: Some(UcpConfig {
            tls: tls.split(',').map(String::from).collect(),
            keepalive_interval: Some(Duration::from_millis(100)),
            keepalive_timeout: Duration::from_secs(60),
            ..Default::default()
        }),
    })
    .expect("context");
    Worker::new(&ctx).expect("worker")
}

fn pattern(round: u64) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(round * 7 + 1) as u8)
        .collect()
}

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

/// The sender: per round, once a line comes on stdin, maps a segment, sends `PER_ROUND`
/// messages from it, says `SENT`, waits for the sends, frees the mapping. Then stays until
/// killed or its stdin closes.
#[test]
fn ucp_mapped_peer_maps_child_entry() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    let tls = std::env::var(TLS).expect("tls");
    let mut w = worker(&tls);
    let parent = unhex(&std::env::var(PEER).expect("peer address"));
    let ep = w.ep_create(&parent, EpParams::default()).expect("ep");
    println!("ADDR {}", hex(w.address()));
    let mut go = String::new();
    for round in 0..ROUNDS {
        std::io::stdin().read_line(&mut go).expect("go line");
        let map = w.mem_map(LEN).expect("mem_map");
        assert!(map.is_shared());
        map.write(0, &pattern(round)).unwrap();
        let ops: Vec<Op> = (0..PER_ROUND)
            .map(|i| {
                w.tag_send_mapped(ep, round * PER_ROUND + i, &map, 0, LEN)
                    .expect("send")
            })
            .collect();
        println!("SENT {round}");
        for op in ops {
            assert_eq!(finish(&mut w, op, "send").status, Ok(()));
        }
        drop(map);
    }
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
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(tls: &str, parent: &[u8]) -> (ChildGuard, Receiver<String>) {
    let mut child = Command::new(std::env::current_exe().expect("test exe"))
        .args([
            "--exact",
            "ucp_mapped_peer_maps_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "send")
        .env(TLS, tls)
        .env(PEER, hex(parent))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            for word in ["ADDR ", "SENT "] {
                // libtest may print "test name ... " on the same line first.
                if let Some(i) = line.find(word) {
                    let _ = tx.send(line[i..].trim().to_string());
                }
            }
        }
    });
    (ChildGuard(child), rx)
}

fn next_line(rx: &Receiver<String>, prefix: &str) -> String {
    let l = rx.recv_timeout(WATCHDOG).expect("watchdog: child line");
    assert!(l.starts_with(prefix), "expected {prefix}, got {l}");
    l[prefix.len()..].to_string()
}

/// Ids of process `pid`'s shared segments as `/proc/self/maps` shows them in its inode
/// column: memfd inodes (posix), shmids (sysv).
fn segments_of(pid: u32, tls: &str) -> Vec<u64> {
    if tls.starts_with("sysv") {
        let text = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
        return text
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(4)?.parse::<u32>().ok()? == pid).then_some(f.get(1)?.parse().ok()?)
            })
            .collect();
    }
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:rucx-mm"))
        })
        .filter_map(|e| std::fs::metadata(e.path()).ok().map(|m| m.ino()))
        .collect()
}

/// Our mappings of at least `LEN` bytes of the segments `ids` (the sender's data segments,
/// not its FIFO) of the kind of `tls` (by the mapped file's name, since memfd inodes and
/// shmids are separate number spaces).
fn data_mappings(tls: &str, ids: &[u64]) -> usize {
    let name = if tls.starts_with("sysv") {
        "/SYSV"
    } else {
        "/memfd:rucx-mm"
    };
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let size = f
                .first()
                .and_then(|r| r.split_once('-'))
                .and_then(|(a, b)| {
                    Some(u64::from_str_radix(b, 16).ok()? - u64::from_str_radix(a, 16).ok()?)
                })
                .unwrap_or(0);
            let ino = f.get(4).and_then(|i| i.parse::<u64>().ok());
            size >= LEN as u64
                && ino.is_some_and(|i| ids.contains(&i))
                && f.get(5).is_some_and(|p| p.starts_with(name))
        })
        .count()
}

/// How the receiver meets the messages, and how it parts from the sender.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    /// Unexpected (the receives are posted after the messages arrived: ucp's rendezvous reads
    /// them through the endpoint's mappings); then the sender is killed.
    UnexpectedKill,
    /// Unexpected; then the receiver closes the endpoint (the sender lives on).
    UnexpectedClose,
    /// Expected (posted first: the shared-memory interface's tag matching reads them); then
    /// the sender is killed.
    ExpectedKill,
    /// Expected; then the receiver closes the endpoint.
    ExpectedClose,
}

fn peer_maps(tls: &str, mode: Mode) {
    let kill = matches!(mode, Mode::UnexpectedKill | Mode::ExpectedKill);
    let expected = matches!(mode, Mode::ExpectedKill | Mode::ExpectedClose);
    let mut w = worker(tls);
    let (mut child, lines) = spawn(tls, w.address());
    let caddr = unhex(&next_line(&lines, "ADDR "));
    let ep = w.ep_create(&caddr, EpParams::default()).expect("ep");
    let pid = child.0.id();
    let mut ids = Vec::new();
    for round in 0..ROUNDS {
        let post = |w: &mut Worker| -> Vec<Op> {
            (0..PER_ROUND)
                .map(|i| {
                    w.tag_recv(vec![0; LEN], round * PER_ROUND + i, TAG_MASK_EXACT)
                        .unwrap()
                })
                .collect()
        };
        let posted = if expected { post(&mut w) } else { Vec::new() };
        writeln!(child.0.stdin.as_mut().expect("stdin"), "go").expect("go");
        assert_eq!(next_line(&lines, "SENT "), round.to_string());
        ids.extend(segments_of(pid, tls));
        if !expected {
            // Every message of the round arrives before its receive is posted.
            let deadline = Instant::now() + WATCHDOG;
            for i in 0..PER_ROUND {
                while w
                    .tag_probe(round * PER_ROUND + i, TAG_MASK_EXACT, false)
                    .is_none()
                {
                    w.progress();
                    assert!(Instant::now() < deadline, "watchdog: round {round} RTS");
                }
            }
        }
        let want = pattern(round);
        let ops = if expected { posted } else { post(&mut w) };
        for r in ops {
            let c = finish(&mut w, r, "receive");
            assert_eq!((c.status, c.len), (Ok(()), LEN), "{tls} round {round}");
            assert!(
                c.buf.unwrap() == want,
                "{tls} round {round}: data of the freed segment or wrong data"
            );
        }
    }
    let st = w.stats();
    let tm = w.tag_offload_stats();
    let in_place = if expected {
        tm.matched
    } else {
        st.rndv_get_mapped
    };
    assert_eq!(
        in_place,
        ROUNDS * PER_ROUND,
        "{tls} {mode:?}: every rendezvous read in place: {st:?} {tm:?}"
    );
    // Both segments stay mapped (the requests that read them are done).
    assert_eq!(data_mappings(tls, &ids), ROUNDS as usize, "{tls}: {ids:?}");
    if kill {
        child.0.kill().expect("kill child");
        let _ = child.0.wait();
        let deadline = Instant::now() + WATCHDOG;
        while w.ep_status(ep).is_ok() {
            if w.progress() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(Instant::now() < deadline, "watchdog: peer death not found");
        }
    } else {
        w.ep_close(ep, CloseMode::Force).expect("close");
    }
    assert_eq!(
        data_mappings(tls, &ids),
        0,
        "{tls} {mode:?}: a segment of the peer stays mapped after it left"
    );
    if !kill {
        drop(child.0.stdin.take());
        let st = child.0.wait().expect("child exit");
        assert!(st.success(), "child failed: {st:?}");
    }
}

#[test]
fn ucp_posix_peer_segments_unmapped_when_peer_killed() {
    peer_maps("posix,cma", Mode::UnexpectedKill);
}

#[test]
fn ucp_sysv_peer_segments_unmapped_when_peer_killed() {
    peer_maps("sysv,cma", Mode::UnexpectedKill);
}

#[test]
fn ucp_posix_peer_segments_unmapped_when_endpoint_closed() {
    peer_maps("posix,cma", Mode::UnexpectedClose);
}

#[test]
fn ucp_sysv_peer_segments_unmapped_when_endpoint_closed() {
    peer_maps("sysv,cma", Mode::UnexpectedClose);
}

#[test]
fn ucp_posix_expected_rndv_segments_unmapped_when_peer_killed() {
    peer_maps("posix,cma", Mode::ExpectedKill);
}

#[test]
fn ucp_sysv_expected_rndv_segments_unmapped_when_peer_killed() {
    peer_maps("sysv,cma", Mode::ExpectedKill);
}

#[test]
fn ucp_posix_expected_rndv_segments_unmapped_when_endpoint_closed() {
    peer_maps("posix,cma", Mode::ExpectedClose);
}

#[test]
fn ucp_sysv_expected_rndv_segments_unmapped_when_endpoint_closed() {
    peer_maps("sysv,cma", Mode::ExpectedClose);
}
