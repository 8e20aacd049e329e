//! A peer's exit is reported after the messages it wrote: a child process (this test binary
//! again) connects to our interface, writes a few messages and kills itself; the interface's
//! look at its peers then finds the exit before any of the messages was read, which is the
//! order a progress call produces when the peer writes and exits between its FIFO poll and its
//! periodic peer check.

use super::*;
use crate::ep::Endpoint;
use crate::iface::{EventSink, Iface, IfaceParams};
use crate::transport::Transport;
use crate::{CompletionId, EpId, PendingId};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use ucs::testing::{hex, unhex};
use ucs::Error;

const ROLE: &str = "RUCX_MM_EXIT_TEST_ROLE";
const PEER: &str = "RUCX_MM_EXIT_TEST_PEER";
const WATCHDOG: Duration = Duration::from_secs(60);
/// The child's messages: id and length (inline, in a buffer, and the largest).
const MSGS: [(u8, usize); 3] = [(3, 100), (4, 4000), (5, fifo::BUF_DATA_MAX)];

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn params() -> IfaceParams {
    IfaceParams {
        device: DEVICE.into(),
        ..Default::default()
    }
}

/// What the interface delivered, in order.
#[derive(Debug, PartialEq)]
enum Event {
    Msg(u8, Vec<u8>),
    Error(EpId),
}

#[derive(Default)]
struct Sink(Vec<Event>);

impl EventSink for Sink {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.0.push(Event::Msg(id, data.to_vec()));
    }
    fn completion(&mut self, _comp: CompletionId, _result: ucs::Result<u64>) {
        panic!("shared memory never completes later");
    }
    fn pending(&mut self, _ep: EpId, _req: PendingId) -> bool {
        true
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        assert!(matches!(err, Error::PeerFailure(_)), "{err}");
        self.0.push(Event::Error(ep));
    }
}

/// The child: an interface of its own, an endpoint to the parent's; prints its address, and
/// on the parent's word writes [`MSGS`] and kills itself.
#[test]
fn mm_exit_child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "write_then_die");
    let peer = std::env::var(PEER).expect("peer");
    let (dev, iface) = peer.split_once(' ').expect("two addresses");
    let md = PosixTransport::open_md(DEVICE).expect("md");
    // Kept until the process dies: the parent's endpoint maps its FIFO.
    let mut me = PosixTransport::open_iface(&md, &params()).expect("iface");
    let mut ep = me
        .ep_create_connected(&unhex(dev), &unhex(iface))
        .expect("ep");
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "ADDR {} {}",
        hex(me.device_address()),
        hex(me.iface_address())
    )
    .expect("stdout");
    out.flush().expect("stdout");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("go");
    for (id, len) in MSGS {
        let p = pattern(len, id);
        let r = ep
            .am_bcopy(id, |buf| {
                buf[..len].copy_from_slice(&p);
                len
            })
            .expect("send");
        assert_eq!(r, ucs::Outcome::Done(len));
    }
    // SAFETY: plain syscall; the process ends here.
    unsafe { libc::raise(libc::SIGKILL) };
}

#[test]
fn exited_peer_is_reported_after_the_messages_it_wrote() {
    let md = PosixTransport::open_md(DEVICE).expect("md");
    let mut a = PosixTransport::open_iface(&md, &params()).expect("iface");
    let exe = std::env::current_exe().expect("test exe");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "mm::exit_tests::mm_exit_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "write_then_die")
        .env(
            PEER,
            format!("{} {}", hex(a.device_address()), hex(a.iface_address())),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut stdin = child.stdin.take().expect("stdin");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    let line = out
        .lines()
        .map_while(|l| l.ok())
        .find_map(|l| l.find("ADDR ").map(|i| l[i + 5..].trim().to_string()))
        .expect("the child's address");
    let (dev, iface) = line.split_once(' ').expect("two addresses");
    let ep = a
        .ep_create_connected(&unhex(dev), &unhex(iface))
        .expect("ep to the child");
    stdin.write_all(b"go\n").expect("go");
    stdin.flush().expect("go");
    // SAFETY: FFI into a zeroed siginfo of our own; WNOWAIT leaves the child to be reaped
    // below.
    let rc = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_PID,
            child.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        )
    };
    assert_eq!(rc, 0, "waitid: {}", std::io::Error::last_os_error());

    // The periodic look at the peers, before any poll of the FIFO: it finds the exit.
    let mut sink = Sink::default();
    a.progress_eps(&mut sink, true);
    assert!(
        sink.0.is_empty(),
        "the exit was reported before the messages the peer wrote: {:?}",
        sink.0
    );
    let deadline = Instant::now() + WATCHDOG;
    while !sink.0.iter().any(|e| matches!(e, Event::Error(_))) {
        a.progress(&mut sink);
        assert!(
            Instant::now() < deadline,
            "watchdog: the exit never reported"
        );
    }
    let mut want: Vec<Event> = MSGS
        .iter()
        .map(|&(id, len)| Event::Msg(id, pattern(len, id)))
        .collect();
    want.push(Event::Error(ep.id()));
    assert_eq!(sink.0, want);
    let _ = child.kill();
    let _ = child.wait();
}
