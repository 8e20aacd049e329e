//! The peer of the ptrace-restricted cma test (tests/tests/cma_ptrace_restricted.rs): a ucp
//! process that made itself non-dumpable, so a process without `CAP_SYS_PTRACE` may not reach
//! its memory with cma.
//!
//! `nodump_echo <tls> <rndv-thresh>`: prints `ADDR <hex worker address>`, reads
//! `PEER <hex worker address>`, creates an endpoint to it, then echoes every message tagged 1
//! back tagged 2, until its stdin closes. A watchdog alarm ends it after 120 s.

use std::io::{BufRead, Write};
use ucp::{Context, ContextParams, EpParams, Features, Op, UcpConfig, Worker};
use ucs::testing::{hex, unhex};

fn complete(w: &mut Worker, op: Op) -> ucp::Completion {
    match op {
        Op::Done(c) => c,
        Op::Pending(r) => w.wait(r),
    }
}

fn main() {
    // SAFETY: FFI; alarm only schedules a signal.
    unsafe { libc::alarm(120) };
    // SAFETY: FFI, no pointers.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) }, 0);
    let args: Vec<String> = std::env::args().collect();
    let ctx = Context::new(ContextParams {
        features: Features::TAG,
        config: Some(UcpConfig {
            tls: args[1].split(',').map(String::from).collect(),
            rndv_thresh: Some(args[2].parse().expect("threshold")),
            keepalive_interval: None,
            ..Default::default()
        }),
    })
    .expect("context");
    let mut w = Worker::new(&ctx).expect("worker");
    println!("ADDR {}", hex(w.address()));
    std::io::stdout().flush().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(|l| l.ok()) {
            let _ = tx.send(line);
        }
    });
    let line = rx.recv().expect("PEER line");
    let peer = unhex(line.strip_prefix("PEER ").expect("PEER <address>"));
    let ep = w.ep_create(&peer, EpParams::default()).expect("endpoint");
    let mut pending: Option<ucp::Request> = None;
    loop {
        let done = match pending.take() {
            None => match w.tag_recv(vec![0u8; 1 << 20], 1, u64::MAX).expect("recv") {
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
            complete(&mut w, s).status.expect("echo send completes");
        }
        w.progress();
        if let Err(std::sync::mpsc::TryRecvError::Disconnected) = rx.try_recv() {
            return;
        }
    }
}
