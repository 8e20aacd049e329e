//! Shared body of the forged-pid tests: a victim process (`memory_victim`) holds a known
//! pattern; a lying peer names its pid (in a cma interface address, a cma remote key, or a
//! shared-memory segment key) and tries to make rucx read it into a receive or write 68 KB
//! into it. Each test checks that the victim is untouched afterwards (the victim checks its own
//! buffers), that nothing of it reached the receive buffer, and that the operation or the
//! endpoint failed with a clear error.

// Each test binary uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use ucp::{Completion, Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker};
use ucs::testing::{hex, unhex};

/// The victim's buffer length (the reproduced forged put wrote 68 KB).
pub const LEN: usize = 68 * 1024;

/// The victim's pattern byte at offset `i` (as in `memory_victim`).
pub fn pattern(i: usize) -> u8 {
    (i as u32).wrapping_mul(13).wrapping_add(7) as u8
}

/// True when `b` holds a run of the victim's pattern anywhere (16 bytes in a row).
pub fn holds_pattern(b: &[u8]) -> bool {
    let want: Vec<u8> = (0..LEN).map(pattern).collect();
    b.windows(16).any(|w| want.windows(16).any(|p| p == w))
}

/// A running `memory_victim`.
pub struct Victim {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub pid: u32,
    pub addr: u64,
    pub posix_rkey: Option<Vec<u8>>,
    pub sysv_rkey: Option<Vec<u8>>,
}

impl Victim {
    /// Starts one: `plain` (no rucx) or `rucx` (with a grant socket and shared segments).
    pub fn spawn(mode: &str) -> Victim {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memory_victim"))
            .arg(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn memory_victim");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("victim's first line");
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(w.first(), Some(&"VICTIM"), "{line:?}");
        assert_eq!(w[3].parse::<usize>().unwrap(), LEN);
        let key = |s: &str| (s != "-").then(|| unhex(s));
        Victim {
            pid: w[1].parse().unwrap(),
            addr: w[2].parse().unwrap(),
            posix_rkey: key(w[4]),
            sysv_rkey: key(w[5]),
            child,
            stdin,
            stdout,
        }
    }

    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("victim's answer");
        line.trim().to_string()
    }

    /// Asserts that every buffer of the victim still holds its pattern.
    pub fn assert_intact(&mut self) {
        assert_eq!(
            self.ask("CHECK"),
            "INTACT",
            "the victim's memory was changed"
        );
    }

    /// Makes the victim grant the process owning this cma interface access to it.
    pub fn grant(&mut self, dev: &[u8], cma_iface: &[u8]) {
        let a = self.ask(&format!("GRANT {} {}", hex(dev), hex(cma_iface)));
        assert_eq!(a, "GRANTED");
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `address` with its cma interface address replaced by one naming process `pid`.
pub fn forge_cma_pid(address: &[u8], pid: u32) -> Vec<u8> {
    let mut a = ucp::WorkerAddress::decode(address).unwrap();
    let cma = a
        .tls
        .iter_mut()
        .find(|t| t.tl_name == "cma")
        .expect("the worker has a cma interface");
    cma.iface_addr.clear();
    uct::cma::CmaIfaceAddr { pid }.encode(&mut cma.iface_addr);
    a.to_bytes().unwrap()
}

/// Two workers of one context over `am_tl` + cma with rendezvous scheme `scheme`; `s` has an
/// endpoint to `a` made from `a`'s address with its cma pid replaced by `victim`'s (what a
/// peer that lies about its pid sends), and `a` has the endpoint the wire-up made back.
pub fn forged_pair(
    am_tl: &str,
    scheme: ucp::config::RndvSchemeCfg,
    victim: u32,
) -> (Worker, Worker, ucp::EpHandle, ucp::EpHandle) {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: vec![am_tl.into(), "cma".into()],
            rndv_thresh: Some(8192),
            rndv_scheme: scheme,
            keepalive_interval: None,
            ..Default::default()
        }),
    })
    .unwrap();
    let mut a = Worker::new(&ctx).unwrap();
    let mut s = Worker::new(&ctx).unwrap();
    let forged = forge_cma_pid(a.address(), victim);
    let sa = s.ep_create(&forged, EpParams::default()).unwrap();
    pump(&mut s, &mut a);
    let info = s.ep_proto_info(sa).unwrap();
    assert!(
        info.contains("cma"),
        "the forged endpoint must use cma for rendezvous:\n{info}"
    );
    let a_addr = s.address().to_vec();
    let as_ = a.ep_create(&a_addr, EpParams::default()).unwrap();
    (s, a, sa, as_)
}

/// Progresses both workers until both stay idle for a while (bounded by a watchdog).
pub fn pump(a: &mut Worker, b: &mut Worker) {
    let start = Instant::now();
    let mut idle = 0;
    while idle < 300 {
        let n = a.progress() + b.progress();
        idle = if n == 0 { idle + 1 } else { 0 };
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "watchdog: workers never went idle"
        );
    }
}

/// Completes `op` on `w` while progressing both workers (bounded by a watchdog).
pub fn complete(w: &mut Worker, other: &mut Worker, op: Op) -> Completion {
    let mut r = match op {
        Op::Done(c) => return c,
        Op::Pending(r) => r,
    };
    let start = Instant::now();
    loop {
        w.progress();
        other.progress();
        match w.request_take(r) {
            Ok(c) => return c,
            Err(back) => r = back,
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "watchdog: request never completed"
        );
    }
}

/// Asserts that `err` is cma's refusal to touch process `pid` (not some other failure).
fn assert_refused(err: &ucp::Error, pid: u32) {
    assert!(
        matches!(err, ucp::Error::RemoteAccess(_))
            && err
                .to_string()
                .contains(&format!("refusing cma access of process {pid}")),
        "{err}"
    );
}

/// The forged RTS: `a` sends a rendezvous to `s`, whose endpoint reads "a" with cma at the
/// victim's pid. The receive must fail, hold nothing of the victim, and fail the endpoint.
pub fn forged_read(am_tl: &str) {
    let mut victim = Victim::spawn("rucx");
    let (mut s, mut a, sa, as_) = forged_pair(am_tl, ucp::config::RndvSchemeCfg::Get, victim.pid);
    let recv = s.tag_recv(vec![0u8; LEN], 7, u64::MAX).unwrap();
    let _send = a.tag_send(as_, 7, &vec![0x11u8; LEN]).unwrap();
    let c = complete(&mut s, &mut a, recv);
    let err = c.status.expect_err("the forged rendezvous read must fail");
    assert_refused(&err, victim.pid);
    if let Some(buf) = &c.buf {
        assert!(
            !holds_pattern(buf),
            "the victim's memory reached the receive"
        );
    }
    let st = s.ep_status(sa).expect_err("the endpoint fails");
    assert_refused(&st, victim.pid);
    victim.assert_intact();
}

/// The forged RTR in put mode: `s` sends a 68 KB rendezvous to `a`, whose RTR makes `s` put
/// with cma into "a", i.e. the victim's pid. The send must fail and the victim stay intact.
pub fn forged_write(am_tl: &str) {
    let mut victim = Victim::spawn("rucx");
    let (mut s, mut a, sa, _as) = forged_pair(am_tl, ucp::config::RndvSchemeCfg::Put, victim.pid);
    let _recv = a.tag_recv(vec![0u8; LEN], 9, u64::MAX).unwrap();
    let send = s.tag_send(sa, 9, &vec![0xeeu8; LEN]).unwrap();
    let c = complete(&mut s, &mut a, send);
    let err = c.status.expect_err("the forged rendezvous write must fail");
    assert_refused(&err, victim.pid);
    let st = s.ep_status(sa).expect_err("the endpoint fails");
    assert_refused(&st, victim.pid);
    victim.assert_intact();
}
