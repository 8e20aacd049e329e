//! Shared-memory tag offload when the receiver dies during a rendezvous: the sender's
//! `tag_rndv_zcopy` operations (from shared-segment memory and from ordinary registered
//! memory) complete with `PeerFailure`, and the endpoint reports the failure once. The peer is
//! `tests/src/bin/shm_peer.rs` (it connects back, which grants us access, and never matches
//! the rendezvous); a watchdog kills it and aborts if the test hangs.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ucs::testing::unhex;
use uct::{CompletionId, Endpoint, EpId, Error, EventSink, Iface, Iov, MemoryDomain, Outcome};

#[derive(Default)]
struct Rec {
    comps: Vec<(u64, uct::Result<u64>)>,
    errors: Vec<(EpId, Error)>,
}

impl EventSink for Rec {
    fn am(&mut self, id: u8, _data: &[u8]) {
        panic!("unexpected active message {id}");
    }
    fn completion(&mut self, comp: CompletionId, result: uct::Result<u64>) {
        self.comps.push((comp.0, result));
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.errors.push((ep, err));
    }
}

fn receiver_death_fails_rendezvous(tl: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shm_peer"))
        .arg(tl)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn shm_peer");
    let pid = child.id();
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
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("peer address line");
    let w: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(w.first(), Some(&"ADDR"), "peer said {line:?}");
    let (dev, addr) = (unhex(w[1]), unhex(w[2]));

    let (md, mut iface) = uct::open(tl, "memory").expect("open");
    assert!(iface.attr().flags.contains(uct::IfaceFlags::TAG_RNDV_ZCOPY));
    let mut ep = iface.ep_create_connected(&dev, &addr).expect("connect");
    // The peer connects back, and with that tells us it can read our memory with cma (the
    // ordinary-memory rendezvous needs it; the watchdog bounds the wait).
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(
        stdin,
        "CONNECT {} {}",
        hex(iface.device_address()),
        hex(iface.iface_address())
    )
    .expect("CONNECT");
    stdin.flush().expect("flush");
    while !uct::grant::peer_may_trace_us(pid) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // One rendezvous from shared-segment memory, one from ordinary memory (cma).
    let seg = md.mem_alloc(64 * 1024).expect("mem_alloc");
    let mut heap = vec![7u8; 64 * 1024];
    // SAFETY: `heap` outlives the registration (dropped at the end of the test, after it).
    let reg = unsafe {
        md.mem_reg(
            std::ptr::NonNull::new(heap.as_mut_ptr()).unwrap(),
            heap.len(),
        )
    }
    .expect("mem_reg");
    let mut ops = Vec::new();
    for (comp, m) in [(1u64, &seg), (2, &reg)] {
        match ep
            .tag_rndv_zcopy(9, b"rts", &[Iov::whole(m)], CompletionId(comp))
            .expect("tag_rndv_zcopy")
        {
            Outcome::Done(op) => ops.push(op),
            o => panic!("rendezvous not started: {o:?}"),
        }
    }
    assert!(ops.iter().all(|&op| op != 0) && ops[0] != ops[1]);
    child.kill().expect("kill -9 peer");
    child.wait().expect("reap peer");

    let mut rec = Rec::default();
    let start = Instant::now();
    while rec.comps.len() < 2 {
        iface.progress(&mut rec);
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "watchdog: rendezvous never failed: {:?}",
            rec.comps
        );
    }
    rec.comps.sort_by_key(|c| c.0);
    for (i, (comp, r)) in rec.comps.iter().enumerate() {
        assert_eq!(*comp, i as u64 + 1);
        assert!(matches!(r, Err(Error::PeerFailure(_))), "{tl}: {r:?}");
    }
    assert_eq!(rec.errors.len(), 1, "{tl}: {:?}", rec.errors);
    assert_eq!(rec.errors[0].0, ep.id());
    // The failed operations are gone: canceling them is an error, nothing else completes.
    for &op in &ops {
        assert!(
            ep.tag_rndv_cancel(op).is_err(),
            "failed operation {op} still known"
        );
    }
    for _ in 0..2000 {
        iface.progress(&mut rec);
    }
    assert_eq!(rec.comps.len(), 2);
    drop(ep);
    drop(reg);
    drop(heap);
    done.store(true, Ordering::Relaxed);
}

#[test]
fn shm_tag_rndv_receiver_death_posix() {
    receiver_death_fails_rendezvous("posix");
}

#[test]
fn shm_tag_rndv_receiver_death_sysv() {
    receiver_death_fails_rendezvous("sysv");
}
