//! cma under Yama, for real: the test sets `/proc/sys/kernel/yama/ptrace_scope` (so it needs
//! root and a kernel with Yama: it runs inside the Soft-RoCE VM, `tests/rdma-vm/ci.sh`, and is
//! `#[ignore]`d elsewhere), then runs two processes without `CAP_SYS_PTRACE` (dropped from the
//! bounding set before `exec`, so root cannot regain it and Yama applies) that exchange
//! rendezvous messages over `posix,cma`, and restores the old value.
//!
//! - scope 1: each process makes the first peer it grants its ptracer (`PR_SET_PTRACER`), so cma
//!   works towards that verified peer: the initiator's endpoint uses cma, every echo arrives
//!   intact, no request fails, and the direction the kernel still forbids falls back with at
//!   most one log line per process;
//! - scope 2: nobody without `CAP_SYS_PTRACE` may trace: cma is unavailable (one log line per
//!   process with the reason), neither endpoint uses it, and every echo still arrives intact
//!   over shared memory (rendezvous through the AM pipeline).
//!
//! Roles (this binary re-run, `CMA_YAMA_ROLE`): `initiator` spawns `echo`, connects to it and
//! checks the echoes; `echo` sends back every message tagged 1 with tag 2.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ucp::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker};
use ucs::testing::{hex, unhex};

const YAMA: &str = "/proc/sys/kernel/yama/ptrace_scope";
const TLS: &str = "posix,cma";
const SIZES: [usize; 3] = [300_000, 2 << 20, 70_000];

fn worker() -> (Context, Worker) {
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: TLS.split(',').map(String::from).collect(),
            rndv_thresh: Some(8192),
            keepalive_interval: None,
            ..Default::default()
        }),
    })
    .expect("context");
    let w = Worker::new(&ctx).expect("worker");
    (ctx, w)
}

/// Whether this process holds `CAP_SYS_PTRACE` in its effective set.
fn has_cap_sys_ptrace() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .expect("CapEff line");
    u64::from_str_radix(eff.trim(), 16).unwrap() & (1 << 19) != 0
}

/// This binary re-run in `role`, with `CAP_SYS_PTRACE` out of its bounding set.
fn child(role: &str, test: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        test,
        "--nocapture",
        "--test-threads=1",
        "--ignored",
    ])
    .env("CMA_YAMA_ROLE", role)
    .env("RUCX_LOG_LEVEL", "info")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe {
        c.pre_exec(|| {
            if libc::prctl(libc::PR_CAPBSET_DROP, 19, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// Reads lines of `out` until one holds `prefix`; gives the rest of that line (the test
/// harness may have printed `test <name> ... ` before it on the same line).
fn expect_line(out: &mut impl BufRead, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the peer ended before `{prefix}`"
        );
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim_end().to_string();
        }
    }
}

fn echo_role() {
    ucs::log::init();
    // SAFETY: FFI; alarm only schedules a signal (a watchdog).
    unsafe { libc::alarm(120) };
    let (_ctx, mut w) = worker();
    println!("ADDR {}", hex(w.address()));
    std::io::stdout().flush().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(|l| l.ok()) {
            let _ = tx.send(line);
        }
    });
    let line = rx.recv().expect("PEER line");
    let peer = unhex(line.strip_prefix("PEER ").expect("PEER <address>"));
    let ep = w.ep_create(&peer, EpParams::default()).expect("endpoint");
    let info = w.ep_proto_info(ep).unwrap();
    println!("EP cma={}", info.contains("cma"));
    std::io::stdout().flush().unwrap();
    let mut pending: Option<ucp::Request> = None;
    loop {
        let done = match pending.take() {
            None => match w.tag_recv(vec![0u8; 4 << 20], 1, u64::MAX).expect("recv") {
                Op::Done(c) => Some(c),
                Op::Pending(r) => {
                    pending = Some(r);
                    None
                }
            },
            Some(r) => match w.request_take(r) {
                Ok(c) => Some(c),
                Err(r) => {
                    pending = Some(r);
                    None
                }
            },
        };
        if let Some(c) = done {
            c.status.expect("echo receive");
            let mut data = c.buf.expect("receive buffer");
            data.truncate(c.len);
            let s = w.tag_send(ep, 2, &data).expect("echo send");
            let c = match s {
                Op::Done(c) => c,
                Op::Pending(r) => w.wait(r),
            };
            c.status.expect("echo send completes");
        }
        w.progress();
        if let Err(std::sync::mpsc::TryRecvError::Disconnected) = rx.try_recv() {
            return;
        }
    }
}

fn initiator_role(test: &str, log: &str) {
    ucs::log::init();
    // SAFETY: FFI; alarm only schedules a signal (a watchdog).
    unsafe { libc::alarm(150) };
    println!("CAP_SYS_PTRACE {}", has_cap_sys_ptrace());
    let mut c = child("echo", test);
    c.stderr(std::fs::File::create(log).unwrap());
    let mut peer: Child = c.spawn().expect("spawn the echo process");
    let mut stdin = peer.stdin.take().unwrap();
    let mut out = BufReader::new(peer.stdout.take().unwrap());
    let addr = unhex(&expect_line(&mut out, "ADDR "));
    let (_ctx, mut w) = worker();
    writeln!(stdin, "PEER {}", hex(w.address())).unwrap();
    stdin.flush().unwrap();
    // The echo process created its endpoint (and so granted us) before we create ours.
    let echo_cma = expect_line(&mut out, "EP cma=");
    println!("ECHO_EP_CMA {echo_cma}");
    let ep = w.ep_create(&addr, EpParams::default()).expect("endpoint");
    let info = w.ep_proto_info(ep).unwrap();
    println!("INITIATOR_EP_CMA {}", info.contains("cma"));
    eprintln!("initiator protocols:\n{info}");
    for (round, &n) in SIZES.iter().enumerate() {
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + round * 13 + 3) as u8).collect();
        let send = w.tag_send(ep, 1, &data).unwrap();
        let recv = w.tag_recv(vec![0u8; n], 2, u64::MAX).unwrap();
        let start = Instant::now();
        let mut pending = vec![send, recv];
        let mut got = None;
        while !pending.is_empty() {
            w.progress();
            let mut still = Vec::new();
            for op in pending.drain(..) {
                let r = match op {
                    Op::Done(c) => Ok(c),
                    Op::Pending(r) => w.request_take(r),
                };
                match r {
                    Ok(c) => {
                        if let Err(e) = &c.status {
                            println!("ERROR_MID_TRANSFER {e}");
                            std::process::exit(3);
                        }
                        if let Some(b) = c.buf {
                            got = Some(b[..c.len].to_vec());
                        }
                    }
                    Err(r) => still.push(Op::Pending(r)),
                }
            }
            pending = still;
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "watchdog: echo {round} never completed"
            );
        }
        println!("ECHO {n} intact={}", got.as_deref() == Some(&data[..]));
    }
    drop(stdin);
    let st = peer.wait().unwrap();
    println!("ECHO_EXIT {}", st.success());
}

/// Restores the Yama scope when the test ends, however it ends.
struct Scope(String);

impl Drop for Scope {
    fn drop(&mut self) {
        let _ = std::fs::write(YAMA, &self.0);
    }
}

struct Run {
    out: String,
    initiator_log: String,
    echo_log: String,
}

/// Sets Yama's scope to `scope` and runs the initiator (which runs the echo process).
fn run(scope: u32, test: &str) -> Run {
    let old = std::fs::read_to_string(YAMA).unwrap_or_else(|e| {
        panic!("this test needs Yama ({YAMA}: {e}); it runs in tests/rdma-vm/ci.sh")
    });
    let _restore = Scope(old);
    std::fs::write(YAMA, scope.to_string()).expect("setting ptrace_scope needs root");
    assert_eq!(
        std::fs::read_to_string(YAMA).unwrap().trim(),
        scope.to_string()
    );
    let dir = std::env::temp_dir().join(format!("cma-yama-{}-{scope}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let echo_log = dir.join("echo.err");
    let mut c = child("initiator", test);
    c.env("CMA_YAMA_ECHO_LOG", &echo_log)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let o = c.spawn().unwrap().wait_with_output().unwrap();
    let r = Run {
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        initiator_log: String::from_utf8_lossy(&o.stderr).into_owned(),
        echo_log: std::fs::read_to_string(&echo_log).unwrap_or_default(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "--- initiator output\n{}\n--- initiator log\n{}\n--- echo log\n{}",
        r.out, r.initiator_log, r.echo_log
    );
    assert!(o.status.success(), "initiator: {}", o.status);
    assert!(
        r.out.contains("CAP_SYS_PTRACE false"),
        "the capability was not dropped"
    );
    assert!(!r.out.contains("ERROR_MID_TRANSFER"), "a request failed");
    for n in SIZES {
        assert!(
            r.out.contains(&format!("ECHO {n} intact=true")),
            "echo of {n} bytes"
        );
    }
    assert!(r.out.contains("ECHO_EXIT true"), "the echo process failed");
    for (who, log) in [("initiator", &r.initiator_log), ("echo", &r.echo_log)] {
        let lines = log
            .lines()
            .filter(|l| l.contains("cma is not used"))
            .count();
        assert!(lines <= 1, "{who}: {lines} fallback log lines");
        assert!(!log.contains("ERROR"), "{who} logged an error");
    }
    r
}

fn role_dispatch(test: &str) -> bool {
    match std::env::var("CMA_YAMA_ROLE").as_deref() {
        Ok("echo") => echo_role(),
        Ok("initiator") => initiator_role(test, &std::env::var("CMA_YAMA_ECHO_LOG").unwrap()),
        _ => return false,
    }
    true
}

#[test]
#[ignore = "sets Yama's ptrace_scope: needs root and Yama (run by tests/rdma-vm/ci.sh)"]
fn yama_scope_1_cma_towards_the_verified_peer() {
    const NAME: &str = "yama_scope_1_cma_towards_the_verified_peer";
    if role_dispatch(NAME) {
        return;
    }
    let r = run(1, NAME);
    // The echo process granted us first: it made us its ptracer, so our endpoint uses cma.
    assert!(r.out.contains("INITIATOR_EP_CMA true"), "cma not used");
    let ptracer = |log: &str| {
        log.lines()
            .filter(|l| l.contains("yama ptrace_scope is 1: process"))
            .count()
    };
    assert_eq!(ptracer(&r.initiator_log), 1, "initiator PR_SET_PTRACER");
    assert_eq!(ptracer(&r.echo_log), 1, "echo PR_SET_PTRACER");
    // Where the echo process decided before we granted it, it fell back with one line.
    if r.out.contains("ECHO_EP_CMA false") {
        assert_eq!(
            r.echo_log.matches("cma is not used").count(),
            1,
            "the echo's fallback is logged once"
        );
    }
}

#[test]
#[ignore = "sets Yama's ptrace_scope: needs root and Yama (run by tests/rdma-vm/ci.sh)"]
fn yama_scope_2_falls_back_without_cma() {
    const NAME: &str = "yama_scope_2_falls_back_without_cma";
    if role_dispatch(NAME) {
        return;
    }
    let r = run(2, NAME);
    assert!(
        r.out.contains("INITIATOR_EP_CMA false"),
        "cma used at scope 2"
    );
    assert!(r.out.contains("ECHO_EP_CMA false"), "cma used at scope 2");
    // cma is unavailable in both processes, said once in each, with the reason.
    for log in [&r.initiator_log, &r.echo_log] {
        assert_eq!(log.matches("cma is not used").count(), 1, "{log}");
        assert!(log.contains("ptrace_scope is 2"), "{log}");
    }
}
