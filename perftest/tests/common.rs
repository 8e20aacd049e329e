//! Helpers for perftest's integration tests: run the binary with a watchdog.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
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
    let mut out = child.stdout.take().expect("stdout piped");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    wait_reading(child, t_out, limit)
}

/// [`wait_with_watchdog`] for a child whose stdout `t_out` already reads.
fn wait_reading(mut child: Child, t_out: std::thread::JoinHandle<String>, limit: Duration) -> Run {
    let deadline = Instant::now() + limit;
    let mut err = child.stderr.take().expect("stderr piped");
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

/// A perftest server started with `-p 0` (the kernel picks its port), stdout and stderr piped.
pub struct Server {
    pub child: Child,
    pub port: u16,
    out: std::thread::JoinHandle<String>,
}

impl Server {
    /// Starts the server and reads its "Listening on port N" line (under a watchdog).
    pub fn start() -> Server {
        let mut child = perftest()
            .args(["-p", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn perftest server");
        let out = child.stdout.take().expect("stdout piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let t_out = std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut all = String::new();
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                if let Some(p) = line.trim().strip_prefix("Listening on port ") {
                    let _ = tx.send(p.parse::<u16>().ok());
                }
                all.push_str(&line);
                line.clear();
            }
            all
        });
        let port = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(p)) => p,
            other => {
                let _ = child.kill();
                panic!("perftest server announced no port: {other:?}");
            }
        };
        Server {
            child,
            port,
            out: t_out,
        }
    }

    /// Kills the server.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the server to exit (under a watchdog) and gives its whole output.
    pub fn finish(self, limit: Duration) -> Run {
        wait_reading(self.child, self.out, limit)
    }
}
