//! Helpers for perftest's integration tests: run the binary with a watchdog.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Output of a finished run.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// The perftest binary.
pub fn perftest() -> Command {
    Command::new(env!("CARGO_BIN_EXE_perftest"))
}

/// Waits for `child`, killing it after `limit` (the watchdog: a test never hangs).
pub fn wait_with_watchdog(mut child: Child, limit: Duration) -> Run {
    let deadline = Instant::now() + limit;
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = t_out.join().unwrap();
    let stderr = t_err.join().unwrap();
    assert!(
        status.is_some(),
        "watchdog: perftest did not finish within {limit:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    Run {
        code: status.and_then(|s| s.code()),
        stdout,
        stderr,
    }
}

/// Runs perftest with `args` under a watchdog.
pub fn run(args: &[&str], limit: Duration) -> Run {
    let child = perftest()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn perftest");
    wait_with_watchdog(child, limit)
}

/// A TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}
