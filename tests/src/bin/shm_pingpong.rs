//! A quick uct-level benchmark of the shared-memory transports between two processes:
//! 8-byte `am_short` ping-pong latency (half round trip, as ucx_perftest `am_lat` reports it)
//! and one-way message rate (`am_bw`).
//!
//! `shm_pingpong [posix|sysv] [lat|bw] [iterations] [bw message size, 8..=8192]`. The process re-runs itself as the peer,
//! pins itself to core 0 and the peer to core 1, and exchanges addresses over pipes. Build with
//! `--release`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;
use ucs::testing::{hex, unhex};
use uct::{CompletionId, Endpoint, EventSink, Iface, Outcome};

fn pin(core: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; FFI on our own process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Counts messages; remembers the last header.
struct Count {
    n: u64,
    last: u64,
}

impl EventSink for Count {
    #[inline]
    fn am(&mut self, _id: u8, data: &[u8]) {
        self.n += 1;
        if data.len() >= 8 {
            self.last = u64::from_le_bytes(data[..8].try_into().unwrap());
        }
    }
    fn completion(&mut self, _comp: CompletionId, _result: uct::Result<u64>) {}
    fn ep_error(&mut self, ep: uct::EpId, err: uct::Error) {
        eprintln!("endpoint {ep:?} failed: {err}");
        std::process::exit(2);
    }
}

/// Sends `size` bytes with `am_bcopy` (the first 8 are `v`), retrying on back-pressure.
fn send_bcopy(
    iface: &mut uct::AnyIface,
    ep: &mut uct::AnyEp,
    sink: &mut Count,
    v: u64,
    size: usize,
) {
    loop {
        let r = ep
            .am_bcopy(0, |buf| {
                buf[..8].copy_from_slice(&v.to_le_bytes());
                buf[8..size].fill(0x5a);
                size
            })
            .expect("am_bcopy");
        if r.is_done() {
            return;
        }
        iface.progress(sink);
    }
}

#[inline]
fn send(iface: &mut uct::AnyIface, ep: &mut uct::AnyEp, sink: &mut Count, v: u64) {
    loop {
        match ep.am_short(0, v, &[]).expect("am_short") {
            Outcome::Done(()) => return,
            _ => {
                iface.progress(sink);
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let child = args.iter().any(|a| a == "--child");
    let pos: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with("--")).collect();
    let tl = pos.first().map_or("posix", |s| s.as_str()).to_owned();
    let test = pos.get(1).map_or("lat", |s| s.as_str()).to_owned();
    let iters: u64 = pos
        .get(2)
        .map_or(1_000_000, |s| s.parse().expect("iterations"));
    let size: usize = pos.get(3).map_or(8, |s| s.parse().expect("size"));
    assert!((8..=8192).contains(&size), "size must be 8..=8192");
    // SAFETY: alarm only schedules SIGALRM, whose default action ends this process.
    unsafe { libc::alarm(300) };

    let (_md, mut iface) = uct::open(&tl, "memory").expect("open transport");
    let mut sink = Count { n: 0, last: 0 };

    if child {
        pin(1);
        println!(
            "{} {}",
            hex(iface.device_address()),
            hex(iface.iface_address())
        );
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        let mut ep = iface
            .ep_create_connected(&unhex(w[0]), &unhex(w[1]))
            .expect("connect");
        if test == "lat" {
            let mut seen = 0;
            while seen < iters {
                iface.progress(&mut sink);
                if sink.n > seen {
                    seen = sink.n;
                    let v = sink.last;
                    send(&mut iface, &mut ep, &mut sink, v);
                }
            }
        } else {
            while sink.n < iters {
                iface.progress(&mut sink);
            }
            send(&mut iface, &mut ep, &mut sink, u64::MAX);
        }
        // Drain until the parent closes stdin (it has everything it needs).
        let _ = std::io::stdin().lock().read_line(&mut line);
        return;
    }

    pin(0);
    let mut peer = Command::new(std::env::current_exe().unwrap())
        .args([&tl, &test, &iters.to_string(), &size.to_string(), "--child"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn peer");
    let mut out = BufReader::new(peer.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let w: Vec<&str> = line.split_whitespace().collect();
    let mut ep = iface
        .ep_create_connected(&unhex(w[0]), &unhex(w[1]))
        .expect("connect");
    let mut stdin = peer.stdin.take().unwrap();
    writeln!(
        stdin,
        "{} {}",
        hex(iface.device_address()),
        hex(iface.iface_address())
    )
    .unwrap();
    stdin.flush().unwrap();

    if test == "lat" {
        // Timed in batches of 100 round trips: the median batch is the "typical" latency
        // (ucx_perftest's first column), robust to preemption on a shared machine.
        const BATCH: u64 = 100;
        let warmup = (iters / 10).min(100_000);
        let mut batches = Vec::with_capacity((iters / BATCH) as usize + 1);
        let mut t0 = Instant::now();
        let mut tb = t0;
        for i in 0..iters {
            if i == warmup {
                t0 = Instant::now();
                tb = t0;
            }
            send(&mut iface, &mut ep, &mut sink, i);
            while sink.n <= i {
                iface.progress(&mut sink);
            }
            if i > warmup && (i - warmup).is_multiple_of(BATCH) {
                let now = Instant::now();
                batches.push((now - tb).as_secs_f64() / BATCH as f64 / 2.0);
                tb = now;
            }
        }
        let dt = t0.elapsed().as_secs_f64();
        let n = (iters - warmup) as f64;
        batches.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let typical = batches.get(batches.len() / 2).copied().unwrap_or(0.0);
        println!(
            "{tl} am_lat 8 B: typical {:.3} us, average {:.3} us half round trip ({} iterations after {} warm-up)",
            typical * 1e6,
            dt / n / 2.0 * 1e6,
            iters - warmup,
            warmup
        );
    } else {
        // Timed in batches of 1000 sends too: the median batch gives the "typical" rate
        // (ucx_perftest's typical overhead), robust to preemption on a shared machine.
        const BATCH: u64 = 1000;
        let mut batches = Vec::with_capacity((iters / BATCH) as usize + 1);
        let t0 = Instant::now();
        let mut tb = t0;
        for i in 0..iters {
            if size > 8 {
                send_bcopy(&mut iface, &mut ep, &mut sink, i, size);
            } else {
                send(&mut iface, &mut ep, &mut sink, i);
            }
            if (i + 1).is_multiple_of(BATCH) {
                let now = Instant::now();
                batches.push((now - tb).as_secs_f64() / BATCH as f64);
                tb = now;
            }
        }
        while sink.n == 0 {
            iface.progress(&mut sink);
        }
        let dt = t0.elapsed().as_secs_f64();
        batches.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let typical = batches.get(batches.len() / 2).copied().unwrap_or(f64::NAN);
        println!(
            "{tl} am_bw {size} B: typical {:.2} M msg/s ({:.3} us per message, {:.0} MB/s), \
             overall {:.2} M msg/s ({} messages in {:.3} s, receiver acknowledged all)",
            1e-6 / typical,
            typical * 1e6,
            size as f64 / typical / 1e6,
            iters as f64 / dt / 1e6,
            iters,
            dt
        );
    }
    drop(stdin);
    peer.wait().unwrap();
}
