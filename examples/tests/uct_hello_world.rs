//! End-to-end: the uct_hello_world server/client pair as two real processes, over every
//! shared-memory transport and tcp over loopback, with short, bcopy and zcopy sends of 1 byte and of the transport's
//! maximum for the mode; and the errors users see for bad input.

use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};
use uct::Iface;

const BIN: &str = env!("CARGO_BIN_EXE_uct_hello_world");
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

fn port() -> u16 {
    // Distinct ports per test process and per call, away from the default 13337.
    let base = 20000 + (std::process::id() % 2000) as u16 * 10;
    base + NEXT_PORT.fetch_add(1, Ordering::Relaxed) % 10
}

/// Waits for a child with a watchdog; kills it and fails the test if it hangs.
fn wait_with_watchdog(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} hung; stdout: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_pair(tl: &str, dev: &str, mode: &str, size: usize) -> (Output, Output) {
    let p = port().to_string();
    let server = Command::new(BIN)
        .args(["-d", dev, "-t", tl, "-p", &p])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let client = Command::new(BIN)
        .args([
            "-d",
            dev,
            "-t",
            tl,
            "-n",
            "127.0.0.1",
            "-p",
            &p,
            mode,
            "-s",
            &size.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    let c = wait_with_watchdog(client, "client");
    let s = wait_with_watchdog(server, "server");
    (s, c)
}

fn max_for(tl: &str, dev: &str, mode: &str) -> usize {
    let (_md, iface) = uct::open(tl, dev).expect("open transport");
    let am = iface.attr().am;
    match mode {
        "-i" => am.max_short,
        "-b" => am.max_bcopy,
        _ => am.max_zcopy,
    }
}

fn check_pairs(tl: &str, dev: &str) {
    for mode in ["-i", "-b", "-z"] {
        let max = max_for(tl, dev, mode);
        for size in [1, max] {
            let (s, c) = run_pair(tl, dev, mode, size);
            let (so, se) = (
                String::from_utf8_lossy(&s.stdout),
                String::from_utf8_lossy(&s.stderr),
            );
            let ce = String::from_utf8_lossy(&c.stderr);
            assert!(
                c.status.success(),
                "{tl} {mode} {size}: client failed: {ce}"
            );
            assert!(
                s.status.success(),
                "{tl} {mode} {size}: server failed: {se}"
            );
            assert!(
                so.contains(&format!("received {size} bytes: \"H")),
                "{tl} {mode} {size}: server printed {so}"
            );
        }
    }
}

#[test]
fn hello_world_pair_over_posix() {
    check_pairs("posix", "memory");
}

#[test]
fn hello_world_pair_over_sysv() {
    check_pairs("sysv", "memory");
}

#[test]
fn hello_world_pair_over_tcp_loopback() {
    check_pairs("tcp", "lo");
}

#[test]
fn oversized_message_is_refused_and_both_sides_exit_nonzero() {
    let max = max_for("posix", "memory", "-i");
    let (s, c) = run_pair("posix", "memory", "-i", max + 1);
    let ce = String::from_utf8_lossy(&c.stderr);
    assert!(!c.status.success());
    assert!(ce.contains("over the am_short limit"), "{ce}");
    assert!(
        !s.status.success(),
        "the server must not wait forever nor succeed"
    );
}

#[test]
fn wrong_transport_or_device_lists_valid_ones() {
    let out = Command::new(BIN)
        .args(["-d", "memory", "-t", "nosuch"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("unknown transport 'nosuch'") && err.contains("posix"),
        "{err}"
    );

    let out = Command::new(BIN)
        .args(["-d", "nodev", "-t", "posix"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("has no device 'nodev'") && err.contains("memory"),
        "{err}"
    );
}

#[test]
fn help_lists_transports_and_devices() {
    let out = Command::new(BIN).arg("-h").output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("-t posix") && text.contains("-d memory"),
        "{text}"
    );
}
