//! End-to-end: the uct_hello_world server/client pair as two real processes, over every
//! shared-memory transport and tcp over loopback, with short, bcopy and zcopy sends of 1 byte and of the transport's
//! maximum for the mode; and the errors users see for bad input.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use uct::Iface;

const BIN: &str = env!("CARGO_BIN_EXE_uct_hello_world");

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

/// Starts the server on a port the kernel picks (`-p 0`), reads the port from its "Waiting for
/// connection on port N" line, then runs the client against it.
fn run_pair(tl: &str, dev: &str, mode: &str, size: usize) -> (Output, Output) {
    let mut server = Command::new(BIN)
        .args(["-d", dev, "-t", tl, "-p", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    // The server's stdout is read on a thread so a hung server cannot block the test: the
    // watchdog below still applies.
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let stdout = server.stdout.take().expect("server stdout");
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut all = String::new();
        let mut line = String::new();
        while lines.read_line(&mut line).unwrap_or(0) > 0 {
            if let Some(rest) = line.trim().strip_prefix("Waiting for connection on port ") {
                let _ = port_tx.send(rest.trim_end_matches('.').parse::<u16>().ok());
            }
            all.push_str(&line);
            line.clear();
        }
        all
    });
    let port = match port_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Some(p)) => p,
        other => {
            let _ = server.kill();
            let mut err = String::new();
            if let Some(mut e) = server.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            let _ = server.wait();
            panic!("{tl}: the server never said its port ({other:?}); stderr: {err}");
        }
    };
    let client = Command::new(BIN)
        .args([
            "-d",
            dev,
            "-t",
            tl,
            "-n",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            mode,
            "-s",
            &size.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    let c = wait_with_watchdog(client, "client");
    let mut s = wait_with_watchdog(server, "server");
    s.stdout = reader.join().expect("server stdout reader").into_bytes();
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
                "{tl} {mode} {size}: client failed: {ce}; server said: {so} {se}"
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
