//! Descriptors per peer process, not per endpoint: one process creates endpoints to K
//! interfaces (posix, sysv) of ONE other process, and K cma endpoints to it, and its count of
//! open descriptors (`/proc/self/fd`) grows by a small constant, not by K. Then the peer is
//! killed and every one of those endpoints still reports the peer's death (they share one pidfd).
//!
//! The peer process is this test binary run again with `--ignored --exact fds_peer_process` and
//! `RUCX_FDS_PEER=1`; it prints the addresses of its interfaces and waits to be killed.
//! cma is part of the test when it opens in this process (it does unless Yama `ptrace_scope` is
//! 2 or 3); the test says so on stderr when it is left out.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ucs::testing::{hex, unhex};
use uct::{CompletionId, EpId, Error, EventSink, Iface};

/// Interfaces of each shared-memory transport in the peer, and cma endpoints to it.
const K: usize = 50;
/// The most descriptors the K endpoints of one transport may add in all (the peer's pidfd, the
/// grant connection, and slack for the first endpoint's lazily made state).
const MAX_GROWTH: usize = 4;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

#[derive(Default)]
struct Inbox {
    errors: Vec<(EpId, Error)>,
}

impl EventSink for Inbox {
    fn am(&mut self, _id: u8, _data: &[u8]) {}
    fn completion(&mut self, _comp: CompletionId, _result: uct::Result<u64>) {}
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.errors.push((ep, err));
    }
}

/// The peer: K posix and K sysv interfaces and one cma interface (when cma opens), their
/// addresses on stdout (`ADDR <tl> <dev> <iface>`), then `READY`; it waits until killed.
#[test]
#[ignore = "the peer process of fds_per_peer_process_not_per_endpoint"]
fn fds_peer_process() {
    assert!(
        std::env::var_os("RUCX_FDS_PEER").is_some(),
        "the peer process of fds_per_peer_process_not_per_endpoint, not a test of its own"
    );
    // SAFETY: alarm only schedules SIGALRM, whose default action ends this process.
    unsafe { libc::alarm(120) };
    let mut keep = Vec::new();
    let mut out = std::io::stdout().lock();
    for tl in ["posix", "sysv"] {
        for _ in 0..K {
            let (md, iface) = uct::open(tl, "memory").expect("open a shared-memory interface");
            writeln!(
                out,
                "ADDR {tl} {} {}",
                hex(iface.device_address()),
                hex(iface.iface_address())
            )
            .unwrap();
            keep.push((md, iface));
        }
    }
    if let Ok((md, iface)) = uct::open("cma", "memory") {
        writeln!(
            out,
            "ADDR cma {} {}",
            hex(iface.device_address()),
            hex(iface.iface_address())
        )
        .unwrap();
        keep.push((md, iface));
    }
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    drop(out);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Kills the peer and aborts the test binary if the test is still running after 120 s.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn new(pid: u32) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(120);
            while Instant::now() < until {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            eprintln!("watchdog: test still running after 120 s, killing peer {pid}");
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn fds_per_peer_process_not_per_endpoint() {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--ignored", "--exact", "fds_peer_process", "--nocapture"])
        .env("RUCX_FDS_PEER", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the peer");
    let _watchdog = Watchdog::new(child.id());
    // The test harness of the peer prints its own lines too; ours start with ADDR or READY.
    let mut addrs: Vec<(String, Vec<u8>, Vec<u8>)> = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.expect("peer output");
        if line.ends_with("READY") {
            break;
        }
        if let Some(i) = line.find("ADDR ") {
            let w: Vec<&str> = line[i..].split_whitespace().collect();
            addrs.push((w[1].to_owned(), unhex(w[2]), unhex(w[3])));
        }
    }

    let mut ifaces = Vec::new();
    for tl in ["posix", "sysv", "cma"] {
        let peer: Vec<_> = addrs.iter().filter(|a| a.0 == tl).collect();
        let iface = match uct::open(tl, "memory") {
            Ok((md, iface)) => (tl, md, iface),
            Err(e) if tl == "cma" => {
                eprintln!("cma left out: it does not open here: {e}");
                continue;
            }
            Err(e) => panic!("open {tl}: {e}"),
        };
        assert!(!peer.is_empty(), "the peer has no {tl} interface");
        ifaces.push((iface, peer));
    }

    let mut all_eps = Vec::new();
    let mut counts = Vec::new();
    for ((tl, _md, iface), peer) in ifaces.iter_mut() {
        let before = open_fds();
        let mut eps = Vec::new();
        for i in 0..K {
            // K endpoints to K interfaces of the peer (cma: K endpoints to its one interface).
            let (_, dev, addr) = peer[i % peer.len()];
            eps.push(
                iface
                    .ep_create_connected(dev, addr)
                    .unwrap_or_else(|e| panic!("{tl} endpoint {i}: {e}")),
            );
        }
        let after = open_fds();
        eprintln!("{tl}: {K} endpoints to one process: {before} -> {after} open descriptors");
        counts.push((*tl, before, after));
        all_eps.push(eps);
    }
    for (tl, before, after) in &counts {
        assert!(
            after - before <= MAX_GROWTH,
            "{tl}: {K} endpoints to one process opened {} descriptors (at most {MAX_GROWTH} \
             expected: one pidfd and one grant connection per peer process)",
            after - before
        );
    }

    // The peer dies: every endpoint of every transport reports it.
    child.kill().expect("kill -9 peer");
    child.wait().expect("reap peer");
    for ((tl, _md, iface), _) in ifaces.iter_mut() {
        let mut inbox = Inbox::default();
        // The watchdog bounds this wait.
        while inbox.errors.len() < K {
            iface.progress(&mut inbox);
        }
        for (ep, err) in &inbox.errors {
            assert!(
                matches!(err, Error::PeerFailure(_)),
                "{tl} endpoint {ep:?}: {err}"
            );
        }
        let mut ids: Vec<u64> = inbox.errors.iter().map(|e| e.0 .0 as u64).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), K, "{tl}: one error per endpoint");
    }
    drop(all_eps);
}
