//! tcp benchmarks (ignored by default; benchmarks, not tests):
//!
//! ```text
//! cargo test --release -p rucx-tests --test tcp_bench -- --ignored --nocapture
//! RUCX_BENCH_MODE=ep cargo test --release -p rucx-tests --test tcp_bench pingpong -- --ignored --nocapture
//! ```
//!
//! Two processes pinned to CPUs 0 and 1 (`RUCX_BENCH_CPUS=a,b` to change) talk over tcp on
//! `lo`:
//! - `pingpong_latency`: 8-byte `am_short` ping-pong; the latency is half the round trip, like
//!   `ucx_perftest -t am_lat` (typical = median, as in its "typical" column). Default mode:
//!   connect-to-iface endpoints both ways; `RUCX_BENCH_MODE=ep`: one connect-to-ep pair.
//! - `put_bw_1mib`: 1 MiB `put_zcopy`, 16 in flight, MB/s with MB = 2^20 like ucx_perftest.
//! - `get_bcopy_latency`: 8-byte `get_bcopy`, full round trip per get.
//!
//! UCX 1.13 side by side (server first, then the client with `127.0.0.1`):
//! ```text
//! taskset -c 1 ucx_perftest -x tcp -d lo -t am_lat -n 200000
//! taskset -c 0 ucx_perftest -x tcp -d lo -t am_lat -n 200000 127.0.0.1
//! taskset -c 1 ucx_perftest -x tcp -d lo -t put_bw -D zcopy -s 1048576 -n 2000
//! taskset -c 0 ucx_perftest -x tcp -d lo -t put_bw -D zcopy -s 1048576 -n 2000 127.0.0.1
//! UCX_TLS=tcp UCX_NET_DEVICES=lo ucx_perftest -t ucp_get -s 8 -n 2000 [127.0.0.1]
//! ```
//! (UCX's uct tcp has no get; its ucp get over tcp is the comparison.) Every wait has a
//! watchdog.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use ucs::testing::hex;
use uct::tcp::{TcpEp, TcpIface, TcpTransport};
use uct::{CompletionId, Endpoint, Error, EventSink, Iface, MemoryDomain, Outcome, Transport};

const WARMUP: u64 = 20_000;
const ITERS: u64 = 200_000;

fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("could not pin to CPU {cpu}");
        }
    }
}

fn cpus() -> (usize, usize) {
    let v = std::env::var("RUCX_BENCH_CPUS").unwrap_or_else(|_| "0,1".into());
    let mut it = v.split(',').map(|x| x.trim().parse().expect("cpu number"));
    (it.next().unwrap(), it.next().unwrap())
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn open() -> TcpIface {
    let md = TcpTransport::open_md("lo").unwrap();
    TcpTransport::open_iface(
        &md,
        &uct::IfaceParams {
            device: "lo".into(),
            ..Default::default()
        },
    )
    .unwrap()
}

/// Counts messages and remembers the last header.
#[derive(Default)]
struct Count {
    n: u64,
    last: u64,
    addr: Option<Vec<u8>>,
}

impl EventSink for Count {
    fn am(&mut self, _id: u8, data: &[u8]) {
        self.n += 1;
        self.last = u64::from_le_bytes(data[..8].try_into().unwrap());
        if data.len() > 8 {
            self.addr = Some(data[8..].to_vec());
        }
    }
    fn completion(&mut self, _: CompletionId, _: uct::Result<u64>) {}
    fn ep_error(&mut self, _: uct::EpId, err: Error) {
        panic!("endpoint error during the benchmark: {err}");
    }
}

fn send(ep: &mut TcpEp, iface: &mut TcpIface, sink: &mut Count, v: u64, payload: &[u8]) {
    while ep.am_short(0, v, payload).unwrap() == Outcome::NoResource {
        iface.progress(sink);
    }
}

/// `RUCX_BENCH_MODE=ep` uses one two-way connect-to-ep connection instead of a connect-to-iface
/// endpoint in each direction.
fn ep_mode() -> bool {
    std::env::var("RUCX_BENCH_MODE").as_deref() == Ok("ep")
}

fn pong_main() {
    pin(cpus().1);
    let mut iface = open();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut sink = Count::default();
    let mut ep = if ep_mode() {
        let mut ep = iface.ep_create().unwrap();
        println!(
            "ADDR {} {}",
            hex(iface.device_address()),
            hex(&ep.ep_address().unwrap())
        );
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        let mut it = line.split_whitespace();
        let (dev, epa) = (unhex(it.next().unwrap()), unhex(it.next().unwrap()));
        ep.connect_to_ep(&dev, &epa).unwrap();
        ep
    } else {
        println!(
            "ADDR {} {}",
            hex(iface.device_address()),
            hex(iface.iface_address())
        );
        while sink.addr.is_none() {
            iface.progress(&mut sink);
            assert!(Instant::now() < deadline);
        }
        let a = sink.addr.take().unwrap();
        let (dev, ifa) = a.split_at(16);
        iface.ep_create_connected(dev, ifa).unwrap()
    };
    let mut seen = sink.n;
    send(&mut ep, &mut iface, &mut sink, 0, &[]);
    loop {
        iface.progress(&mut sink);
        if sink.n != seen {
            seen = sink.n;
            if sink.last == u64::MAX {
                std::process::exit(0);
            }
            let v = sink.last;
            send(&mut ep, &mut iface, &mut sink, v, &[]);
        }
        if Instant::now() > deadline {
            std::process::exit(2);
        }
    }
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
fn pingpong_latency() {
    if std::env::var("RUCX_BENCH_ROLE").as_deref() == Ok("pong") {
        pong_main();
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "pingpong_latency",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RUCX_BENCH_ROLE", "pong")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let (dev, ifa) = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "pong exited");
        if let Some(at) = line.find("ADDR ") {
            let mut it = line[at + 5..].split_whitespace();
            break (unhex(it.next().unwrap()), unhex(it.next().unwrap()));
        }
    };
    pin(cpus().0);
    let mut iface = open();
    let mut ep = if ep_mode() {
        let mut ep = iface.ep_create().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(
            stdin,
            "{} {}",
            hex(iface.device_address()),
            hex(&ep.ep_address().unwrap())
        )
        .unwrap();
        ep.connect_to_ep(&dev, &ifa).unwrap();
        ep
    } else {
        iface.ep_create_connected(&dev, &ifa).unwrap()
    };
    let mut sink = Count::default();
    let mut me = iface.device_address().to_vec();
    me.extend_from_slice(iface.iface_address());
    send(&mut ep, &mut iface, &mut sink, 0, &me);
    let deadline = Instant::now() + Duration::from_secs(120);
    while sink.n == 0 {
        iface.progress(&mut sink);
        assert!(Instant::now() < deadline);
    }
    let mut rtts: Vec<u64> = Vec::with_capacity(ITERS as usize);
    let mut t0 = Instant::now();
    for i in 1..=WARMUP + ITERS {
        if i == WARMUP + 1 {
            t0 = Instant::now();
        }
        let t = Instant::now();
        send(&mut ep, &mut iface, &mut sink, i, &[]);
        while sink.last != i {
            iface.progress(&mut sink);
        }
        if i > WARMUP {
            rtts.push(t.elapsed().as_nanos() as u64);
        }
        if i % 4096 == 0 {
            assert!(Instant::now() < deadline, "watchdog");
        }
    }
    let el = t0.elapsed();
    send(&mut ep, &mut iface, &mut sink, u64::MAX, &[]);
    let _ = child.wait();
    rtts.sort_unstable();
    let avg_us = el.as_secs_f64() * 1e6 / ITERS as f64 / 2.0;
    let typ_us = rtts[rtts.len() / 2] as f64 / 2e3;
    let p99_us = rtts[rtts.len() * 99 / 100] as f64 / 2e3;
    println!(
        "rucx tcp lo ({}) am_short 8 B ping-pong, one-way (half round trip), {ITERS} iterations on \
         CPUs {:?}: typical {typ_us:.3} us, average {avg_us:.3} us, p99 {p99_us:.3} us",
        if ep_mode() { "connect-to-ep" } else { "connect-to-iface" },
        cpus()
    );
}

const BW_SIZE: usize = 1 << 20;
const BW_ITERS: u64 = 2000;
const BW_WINDOW: u64 = 16;

/// The target of the bandwidth benchmark: registers 1 MiB, prints its address and rkey, and
/// progresses until an AM says "done".
fn bw_target_main() {
    pin(cpus().1);
    let md = TcpTransport::open_md("lo").unwrap();
    let mut iface = open();
    let mem = md.mem_alloc(BW_SIZE).unwrap();
    let mut packed = Vec::new();
    md.rkey_pack(&mem, &mut packed).unwrap();
    println!(
        "ADDR {} {} {}",
        hex(iface.device_address()),
        hex(iface.iface_address()),
        hex(&packed)
    );
    let mut sink = Count::default();
    let deadline = Instant::now() + Duration::from_secs(300);
    while sink.n == 0 {
        iface.progress(&mut sink);
        assert!(Instant::now() < deadline);
    }
    std::process::exit(0);
}

/// Records completions (the bandwidth initiator's window).
#[derive(Default)]
struct Window {
    done: u64,
}

impl EventSink for Window {
    fn am(&mut self, _id: u8, _data: &[u8]) {}
    fn completion(&mut self, comp: CompletionId, r: uct::Result<u64>) {
        r.unwrap_or_else(|e| panic!("put {comp} failed: {e}"));
        self.done += 1;
    }
    fn ep_error(&mut self, _: uct::EpId, err: Error) {
        panic!("endpoint error during the benchmark: {err}");
    }
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
fn put_bw_1mib() {
    if std::env::var("RUCX_BENCH_ROLE").as_deref() == Ok("bw-target") {
        bw_target_main();
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "put_bw_1mib",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RUCX_BENCH_ROLE", "bw-target")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let (dev, ifa, packed) = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "target exited");
        if let Some(at) = line.find("ADDR ") {
            let mut it = line[at + 5..].split_whitespace();
            break (
                unhex(it.next().unwrap()),
                unhex(it.next().unwrap()),
                unhex(it.next().unwrap()),
            );
        }
    };
    pin(cpus().0);
    let md = TcpTransport::open_md("lo").unwrap();
    let mut iface = open();
    let mut ep = iface.ep_create_connected(&dev, &ifa).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let src = md.mem_alloc(BW_SIZE).unwrap();
    let mut w = Window::default();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut posted = 0u64;
    let mut t0 = Instant::now();
    let warm = 100;
    while w.done < BW_ITERS + warm {
        if w.done == warm && posted == warm {
            t0 = Instant::now();
        }
        let limit = if w.done < warm { warm } else { BW_ITERS + warm };
        while posted < limit && posted - w.done < BW_WINDOW {
            let iov = [uct::Iov::whole(&src)];
            match ep
                .put_zcopy(&iov, rkey.remote_base, &rkey, CompletionId(posted))
                .unwrap()
            {
                Outcome::NoResource => break,
                Outcome::Done(()) => {
                    posted += 1;
                    w.done += 1;
                }
                Outcome::InProgress => posted += 1,
            }
        }
        iface.progress(&mut w);
        assert!(Instant::now() < deadline, "watchdog");
    }
    let el = t0.elapsed().as_secs_f64();
    let mut c = Count::default();
    send(&mut ep, &mut iface, &mut c, 1, &[]);
    let _ = child.wait();
    let mb = (BW_ITERS as f64 * BW_SIZE as f64) / el / (1 << 20) as f64;
    println!(
        "rucx tcp lo put_zcopy 1 MiB, window {BW_WINDOW}: {BW_ITERS} puts, {mb:.1} MB/s \
         (MB = 2^20 bytes, like ucx_perftest) on CPUs {:?}",
        cpus()
    );
}

/// Records get completions.
#[derive(Default)]
struct Gets {
    done: u64,
}

impl EventSink for Gets {
    fn am(&mut self, _id: u8, _data: &[u8]) {}
    fn get_bcopy_data(&mut self, _comp: CompletionId, data: &[u8]) {
        assert_eq!(data.len(), 8);
    }
    fn completion(&mut self, comp: CompletionId, r: uct::Result<u64>) {
        r.unwrap_or_else(|e| panic!("get {comp} failed: {e}"));
        self.done += 1;
    }
    fn ep_error(&mut self, _: uct::EpId, err: Error) {
        panic!("endpoint error during the benchmark: {err}");
    }
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
fn get_bcopy_latency() {
    if std::env::var("RUCX_BENCH_ROLE").as_deref() == Ok("bw-target") {
        bw_target_main();
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "get_bcopy_latency",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RUCX_BENCH_ROLE", "bw-target")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let (dev, ifa, packed) = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "target exited");
        if let Some(at) = line.find("ADDR ") {
            let mut it = line[at + 5..].split_whitespace();
            break (
                unhex(it.next().unwrap()),
                unhex(it.next().unwrap()),
                unhex(it.next().unwrap()),
            );
        }
    };
    pin(cpus().0);
    let md = TcpTransport::open_md("lo").unwrap();
    let mut iface = open();
    let mut ep = iface.ep_create_connected(&dev, &ifa).unwrap();
    let rkey = md.rkey_unpack(&packed).unwrap();
    let mut g = Gets::default();
    let deadline = Instant::now() + Duration::from_secs(300);
    let n = 100_000u64;
    let mut lat: Vec<u64> = Vec::with_capacity(n as usize);
    for i in 0..n + 10_000 {
        let t = Instant::now();
        loop {
            let r = ep
                .get_bcopy(8, rkey.remote_base, &rkey, CompletionId(i), &mut |_| {})
                .unwrap();
            if r != Outcome::NoResource {
                break;
            }
            iface.progress(&mut g);
        }
        while g.done <= i {
            iface.progress(&mut g);
        }
        if i >= 10_000 {
            lat.push(t.elapsed().as_nanos() as u64);
        }
        if i % 4096 == 0 {
            assert!(Instant::now() < deadline, "watchdog");
        }
    }
    let mut c = Count::default();
    send(&mut ep, &mut iface, &mut c, 1, &[]);
    let _ = child.wait();
    lat.sort_unstable();
    println!(
        "rucx tcp lo get_bcopy 8 B: {n} gets, typical {:.3} us, p99 {:.3} us per get (a full \
         round trip) on CPUs {:?}",
        lat[lat.len() / 2] as f64 / 1e3,
        lat[lat.len() * 99 / 100] as f64 / 1e3,
        cpus()
    );
}
