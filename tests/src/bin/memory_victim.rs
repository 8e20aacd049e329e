//! The victim process of the forged-pid tests (tests/tests/forged_pid.rs): a process whose
//! memory a lying peer tries to make rucx read or write.
//!
//! `memory_victim plain`: holds a 68 KiB heap buffer filled with a known pattern and prints
//! `VICTIM <pid> <addr> <len> - -`. It uses no rucx at all.
//!
//! `memory_victim rucx`: the same, and it is a rucx process: it opens a cma interface (so it
//! has a grant socket) and allocates a posix and a sysv segment of the same length with the
//! same pattern, printing their remote keys (hex) in place of the dashes. It creates no
//! endpoint to anyone, so it grants no process access to its memory.
//!
//! `memory_victim rucx-nodump`: `rucx`, in a process that made itself non-dumpable (only a
//! tracer with `CAP_SYS_PTRACE` may reach it).
//!
//! It then reads commands from stdin, one per line:
//! - `CHECK`: prints `INTACT` if every buffer still holds the pattern, else `CHANGED <which>`;
//! - `GRANT <dev> <cma-iface>`: creates a cma endpoint to that interface (so the process that
//!   owns it may now reach this one) and prints `GRANTED`;
//! - end of input: exits.
//!
//! A watchdog alarm ends it after 120 s whatever happens.

use std::io::{BufRead, Write};
use ucs::testing::{hex, unhex};
use uct::{Iface, MemoryDomain};

/// Length of every buffer: the 68 KB of the reproduced forged put.
const LEN: usize = 68 * 1024;

/// The pattern byte at offset `i`.
fn pattern(i: usize) -> u8 {
    (i as u32).wrapping_mul(13).wrapping_add(7) as u8
}

fn intact(b: &[u8]) -> bool {
    b.len() == LEN && b.iter().enumerate().all(|(i, &x)| x == pattern(i))
}

fn main() {
    // SAFETY: FFI; alarm only schedules a signal.
    unsafe { libc::alarm(120) };
    let mode = std::env::args().nth(1).unwrap_or_default();
    let heap: Vec<u8> = (0..LEN).map(pattern).collect();
    let mut segments = Vec::new();
    let mut cma = None;
    if mode == "rucx-nodump" {
        // SAFETY: FFI, no pointers.
        let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        assert_eq!(r, 0, "PR_SET_DUMPABLE 0");
    }
    if mode == "rucx" || mode == "rucx-nodump" {
        cma = Some(uct::open("cma", "memory").expect("cma interface"));
        for tl in ["posix", "sysv"] {
            let (md, iface) = uct::open(tl, "memory").expect("shared-memory interface");
            let h = md.mem_alloc(LEN).expect("mem_alloc");
            let data: Vec<u8> = (0..LEN).map(pattern).collect();
            h.write(0, &data).expect("fill the segment");
            let mut k = Vec::new();
            md.rkey_pack(&h, &mut k).expect("rkey_pack");
            segments.push((tl, md, iface, h, k));
        }
    } else if mode != "plain" {
        eprintln!("usage: memory_victim <plain|rucx|rucx-nodump>");
        std::process::exit(2);
    }
    let keys: Vec<String> = match segments.as_slice() {
        [p, s] => vec![hex(&p.4), hex(&s.4)],
        _ => vec!["-".into(), "-".into()],
    };
    println!(
        "VICTIM {} {} {} {} {}",
        std::process::id(),
        heap.as_ptr() as u64,
        LEN,
        keys[0],
        keys[1]
    );
    std::io::stdout().flush().expect("stdout");
    let mut eps = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["CHECK"] => {
                let mut changed = Vec::new();
                if !intact(&heap) {
                    changed.push("heap");
                }
                for (tl, _, _, h, _) in &segments {
                    let mut b = vec![0u8; LEN];
                    h.read(0, &mut b).expect("read the segment");
                    if !intact(&b) {
                        changed.push(tl);
                    }
                }
                if changed.is_empty() {
                    println!("INTACT");
                } else {
                    println!("CHANGED {}", changed.join(","));
                }
            }
            ["GRANT", dev, iface] => {
                let (_, ci) = cma.as_mut().expect("GRANT needs rucx mode");
                let ep = ci
                    .ep_create_connected(&unhex(dev), &unhex(iface))
                    .expect("cma endpoint to the granted process");
                eps.push(ep);
                println!("GRANTED");
            }
            _ => {
                eprintln!("memory_victim: unknown command {line:?}");
                std::process::exit(2);
            }
        }
        std::io::stdout().flush().expect("stdout");
    }
    drop(eps);
    // Keep the heap alive (and its pattern observable) until the end.
    std::hint::black_box(&heap);
}
