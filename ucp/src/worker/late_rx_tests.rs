//! Messages a shared-memory peer wrote before it exited, read after its endpoint here failed
//! because of that exit (see `late_rx`), in the two orders a real run can produce, each made on
//! purpose: a child process (this test binary again) writes its wire-up, waits, writes one tag
//! message and kills itself, while the test drives the parent's progress step by step.
//!
//! 1. The parent reads the wire-up (its endpoint waits to connect), the child writes and exits,
//!    the queued connect fails (the peer is gone), and only then is the message read.
//! 2. The endpoint is connected; the child writes and exits, and the exit is reported before
//!    the message is read (what the shared-memory transport's periodic look at the peers did
//!    before it learned to read its FIFO first; made here by failing the endpoint as the
//!    transport's report does).

use crate::address::WorkerAddress;
use crate::wire::am_id;
use crate::worker::ep::EpState;
use crate::worker::progress::IDLE_IFACE_PERIOD;
use crate::worker::state::State;
use crate::{Completion, Context, ContextParams, Features, Op, Request, UcpConfig, Worker};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};
use ucs::testing::{hex, unhex};
use ucs::Error;

const ROLE: &str = "RUCX_LATE_RX_TEST_ROLE";
const PEER: &str = "RUCX_LATE_RX_TEST_PEER";
const LEN: &str = "RUCX_LATE_RX_TEST_LEN";
const TAG: u64 = 0x1a7e;
/// An eager message (one fragment over posix).
const EAGER_LEN: usize = 1000;
/// A rendezvous (over the child's threshold, `RNDV_THRESH`).
const RNDV_LEN: usize = 64 << 10;
const RNDV_THRESH: usize = 8 << 10;
const WATCHDOG: Duration = Duration::from_secs(60);
/// Progress calls after which a message that was in the FIFO has surely been read: every
/// interface is polled on each call whose count is a multiple of `IDLE_IFACE_PERIOD`, whatever
/// the clock says (the failed endpoint no longer keeps its interface busy).
const SETTLE_CALLS: u32 = 16 * IDLE_IFACE_PERIOD;

fn ctx() -> Context {
    Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: vec!["posix".into(), "cma".into()],
            keepalive_interval: None,
            rndv_thresh: Some(RNDV_THRESH),
            ..Default::default()
        }),
    })
    .expect("context")
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ 0x5a).collect()
}

/// The child: connects to the parent (its wire-up written), says so, waits for the parent's
/// word, sends one tag message of `LEN` bytes (an eager one waits for its completion) and kills
/// itself.
#[test]
fn late_rx_child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "send_then_die");
    let parent = unhex(&std::env::var(PEER).expect("peer"));
    let len: usize = std::env::var(LEN).expect("len").parse().expect("len");
    let ctx = ctx();
    let mut w = Worker::new(&ctx).expect("worker");
    let ep = w
        .ep_create(&parent, crate::EpParams::default())
        .expect("ep");
    let mut out = std::io::stdout().lock();
    writeln!(out, "ADDR {}", hex(w.address())).expect("stdout");
    out.flush().expect("stdout");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("go");
    let op = w.tag_send(ep, TAG, &pattern(len)).expect("send");
    if len < RNDV_THRESH {
        let c = wait(&mut w, op);
        assert_eq!(c.status, Ok(()), "send before dying");
    }
    // SAFETY: plain syscall; the process ends here.
    unsafe { libc::raise(libc::SIGKILL) };
}

/// The child process, killed and reaped on drop.
struct PeerProc {
    child: Child,
    stdin: ChildStdin,
    addr: Vec<u8>,
}

impl PeerProc {
    fn spawn(parent: &[u8], len: usize) -> Self {
        let exe = std::env::current_exe().expect("test exe");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "worker::late_rx_tests::late_rx_child_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, "send_then_die")
            .env(PEER, hex(parent))
            .env(LEN, len.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdin = child.stdin.take().expect("stdin");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut addr = None;
        for line in out.lines().map_while(|l| l.ok()) {
            // libtest may print "test name ... " on the same line first.
            if let Some(i) = line.find("ADDR ") {
                addr = Some(unhex(line[i + 5..].trim()));
                break;
            }
        }
        PeerProc {
            child,
            stdin,
            addr: addr.expect("the child's address"),
        }
    }

    fn uuid(&self) -> u64 {
        WorkerAddress::decode(&self.addr).expect("address").uuid
    }

    /// Lets the child send, and waits until it has exited (left unreaped, as a parent that
    /// does not wait for its child leaves it).
    fn send_and_die(&mut self) {
        self.stdin.write_all(b"go\n").expect("go");
        self.stdin.flush().expect("go");
        // SAFETY: FFI into a zeroed siginfo of our own; WNOWAIT leaves the child a zombie.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                self.child.id() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(rc, 0, "waitid: {}", std::io::Error::last_os_error());
    }
}

impl Drop for PeerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait(w: &mut Worker, op: Op) -> Completion {
    let mut r = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    let deadline = Instant::now() + WATCHDOG;
    loop {
        w.progress();
        match w.request_take(r) {
            Ok(c) => return c,
            Err(q) => r = q,
        }
        assert!(Instant::now() < deadline, "watchdog");
    }
}

fn posted(op: Op) -> Request {
    match op {
        Op::Pending(r) => r,
        Op::Done(c) => panic!("nothing was sent yet: {:?}", c.status),
    }
}

/// Progresses `w` for [`SETTLE_CALLS`] calls or until `r` completes: the completion, or the
/// request when nothing came.
fn settle(w: &mut Worker, mut r: Request) -> Result<Completion, Request> {
    for _ in 0..SETTLE_CALLS {
        w.progress();
        match w.request_take(r) {
            Ok(c) => return Ok(c),
            Err(q) => r = q,
        }
    }
    Err(r)
}

/// The endpoint of peer `uuid` in `w`.
fn ep_of(w: &Worker, uuid: u64) -> Option<usize> {
    w.st.by_uuid.get(&uuid).copied()
}

/// Order 1: the parent reads the child's wire-up, and nothing more of its progress runs (the
/// endpoint the wire-up made waits to connect); the child writes and exits; the queued connect
/// runs and fails; then the parent reads on. Gives the worker, the endpoint and the receive
/// posted for the child's message of `len` bytes.
fn connect_after_exit(len: usize) -> (Worker, usize, Request, PeerProc) {
    let ctx = ctx();
    let mut w = Worker::new(&ctx).expect("worker");
    let r = posted(w.tag_recv(vec![0; len], TAG, u64::MAX).expect("recv"));
    let mut child = PeerProc::spawn(w.address(), len);
    let uuid = child.uuid();
    let deadline = Instant::now() + WATCHDOG;
    let idx = loop {
        w.poll_ifaces(true, true);
        if let Some(idx) = ep_of(&w, uuid) {
            break idx;
        }
        assert!(Instant::now() < deadline, "watchdog: the child's wire-up");
    };
    assert_eq!(w.st.eps[idx].state, EpState::Connecting);
    assert!(w.st.to_connect.contains(&idx), "its connect is queued");
    child.send_and_die();
    w.progress_more();
    assert_eq!(
        w.st.eps[idx].state,
        EpState::Failed,
        "the connect to the exited peer failed"
    );
    (w, idx, r, child)
}

/// Order 2: the endpoint is connected; the child writes and exits; the transport reports the
/// exit before the message is read. Gives the worker, the endpoint and the receive.
fn exit_reported_first(
    len: usize,
    fail: impl FnOnce(&mut State, usize),
) -> (Worker, usize, Request, PeerProc) {
    let ctx = ctx();
    let mut w = Worker::new(&ctx).expect("worker");
    let mut child = PeerProc::spawn(w.address(), len);
    let uuid = child.uuid();
    let deadline = Instant::now() + WATCHDOG;
    let idx = loop {
        w.progress();
        if let Some(idx) = ep_of(&w, uuid).filter(|&i| w.st.eps[i].state == EpState::Ready) {
            break idx;
        }
        assert!(Instant::now() < deadline, "watchdog: wire-up");
    };
    let r = posted(w.tag_recv(vec![0; len], TAG, u64::MAX).expect("recv"));
    child.send_and_die();
    fail(&mut w.st, idx);
    (w, idx, r, child)
}

#[test]
fn message_written_before_exit_arrives_after_the_failed_connect() {
    let (mut w, _, r, _child) = connect_after_exit(EAGER_LEN);
    let c = settle(&mut w, r)
        .unwrap_or_else(|_| panic!("the message the peer wrote before it exited was dropped"));
    assert_eq!(c.status, Ok(()));
    assert_eq!(c.len, EAGER_LEN);
    assert_eq!(c.buf.expect("buffer")[..], pattern(EAGER_LEN)[..]);
    assert_eq!(w.stats().late_delivered, 1);
}

#[test]
fn message_written_before_exit_arrives_after_the_exit_was_reported() {
    // What the transport's sink does when its look at the peers finds the exit.
    let (mut w, idx, r, child) = exit_reported_first(EAGER_LEN, |st, idx| {
        st.fail_ep(
            idx,
            Error::PeerFailure("shared-memory peer process has exited".into()),
        )
    });
    let c = settle(&mut w, r)
        .unwrap_or_else(|_| panic!("the message the peer wrote before it exited was dropped"));
    assert_eq!(c.status, Ok(()));
    assert_eq!(c.buf.expect("buffer")[..], pattern(EAGER_LEN)[..]);
    assert_eq!(w.st.eps[idx].state, EpState::Failed);
    drop(child);
}

/// A message that arrives unexpected after the failure waits in the unexpected queue.
#[test]
fn message_written_before_exit_waits_unexpected() {
    let (mut w, _, r, _child) = connect_after_exit(EAGER_LEN);
    assert!(w.request_cancel(&r).expect("cancel"));
    let c = w.request_take(r).expect("canceled");
    assert_eq!(c.status, Err(Error::Canceled));
    for _ in 0..SETTLE_CALLS {
        w.progress();
    }
    let op = w.tag_recv(vec![0; EAGER_LEN], TAG, u64::MAX).expect("recv");
    let Op::Done(c) = op else {
        panic!("the message the peer wrote before it exited was dropped")
    };
    assert_eq!(c.status, Ok(()));
    assert_eq!(c.buf.expect("buffer")[..], pattern(EAGER_LEN)[..]);
}

/// A rendezvous whose data stayed with the exited peer fails the receive it matches, with the
/// endpoint's error, rather than leaving it waiting.
#[test]
fn rendezvous_of_an_exited_peer_fails_its_receive() {
    let (mut w, idx, r, _child) = connect_after_exit(RNDV_LEN);
    let c = settle(&mut w, r)
        .unwrap_or_else(|_| panic!("the receive matching a dead peer's rendezvous kept waiting"));
    assert_eq!(c.status, Err(w.st.eps[idx].failure()));
    assert!(
        matches!(c.status, Err(Error::Unreachable(_))),
        "{:?}",
        c.status
    );
}

/// A rendezvous of the exited peer that arrives with no receive posted waits unexpected as
/// lost: the receive posted later fails at once with the endpoint's error, with the length and
/// tag announced, rather than waiting for a message that will not come.
#[test]
fn rendezvous_of_an_exited_peer_fails_the_receive_posted_later() {
    let (mut w, idx, r, _child) = connect_after_exit(RNDV_LEN);
    assert!(w.request_cancel(&r).expect("cancel"));
    drop(w.request_take(r));
    for _ in 0..SETTLE_CALLS {
        w.progress();
    }
    assert_eq!(w.stats().unexp_lost, 1);
    assert_eq!(w.stats().late_dropped, 0);
    let op = w.tag_recv(vec![0; RNDV_LEN], TAG, u64::MAX).expect("recv");
    let Op::Done(c) = op else {
        panic!("the receive waits for the dead peer's rendezvous")
    };
    assert_eq!(c.status, Err(w.st.eps[idx].failure()));
    assert_eq!((c.len, c.tag), (RNDV_LEN, TAG));
    assert_eq!(w.unexpected_count(), 0);
}

/// An endpoint that keepalive failed (its peer was silent past the timeout) still delivers
/// the whole messages the peer wrote: a busy peer is not a misbehaving one.
#[test]
fn message_of_a_peer_keepalive_failed_is_delivered() {
    let (mut w, idx, r, _child) = exit_reported_first(EAGER_LEN, |st, idx| {
        st.fail_ep(
            idx,
            Error::Timeout("silent past RUCX_KEEPALIVE_TIMEOUT".into()),
        )
    });
    assert!(matches!(w.st.eps[idx].failure(), Error::Timeout(_)));
    let c = settle(&mut w, r).unwrap_or_else(|_| panic!("the message was dropped"));
    assert_eq!(c.status, Ok(()));
    assert_eq!(c.buf.expect("buffer")[..], pattern(EAGER_LEN)[..]);
    assert_eq!((w.stats().late_delivered, w.stats().late_dropped), (1, 0));
}

/// An endpoint failed because its peer broke the protocol delivers nothing more of it: the
/// message is dropped (and counted, and logged).
#[test]
fn message_of_a_misbehaving_peer_is_dropped_after_its_failure() {
    let (mut w, _, r, child) = exit_reported_first(EAGER_LEN, |st, idx| {
        let uuid = st.eps[idx].uuid;
        st.am_failed(idx, uuid, am_id::SYNC_ACK, Error::Wire("forged".into()))
    });
    let r = settle(&mut w, r).map(|c| c.status).expect_err("delivered");
    assert_eq!(w.stats().late_dropped, 1);
    assert!(w.request_cancel(&r).expect("cancel"));
    drop(child);
}
