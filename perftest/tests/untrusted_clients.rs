//! perftest's server facing clients that do not play along: idle and half-written side-channel
//! connections, a client asking for more memory than the machine has, and huge sizes and
//! counts on the command line. Logging (`RUCX_LOG_LEVEL`, unknown `RUCX_*` names) is checked
//! here too.

mod common;
use common::*;
use perftest::params::{Layout, TestId, TestParams};
use perftest::wire::{Channel, FrameHeader, Kind};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A `--local-server` perftest (quiet, kernel-picked port) and the port it printed.
fn start_server() -> (Child, u16) {
    let mut server = perftest()
        .args(["--local-server", "-p", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn perftest server");
    let out = server.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).expect("port line");
    let port: u16 = line.trim().parse().expect("the server prints its port");
    (server, port)
}

/// Waits for a child whose stdout was taken, under a watchdog: exit code and stderr.
fn wait_taken(mut child: Child) -> (Option<i32>, String) {
    let mut err = child.stderr.take().expect("stderr piped");
    let t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let end = std::time::Instant::now() + Duration::from_secs(120);
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = t.join().unwrap();
    let st = st.unwrap_or_else(|| panic!("watchdog: {stderr}"));
    (st.code(), stderr)
}

/// True when the server has not closed `s` (a non-blocking read finds nothing, not EOF).
fn still_open(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let r = (&*s).read(&mut b);
    s.set_nonblocking(false).unwrap();
    matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

fn tag_lat_client(port: u16) -> Run {
    run(
        &[
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "tag_lat",
            "-n",
            "1000",
        ],
        Duration::from_secs(120),
    )
}

#[test]
fn idle_and_half_written_connections_do_not_delay_a_real_client() {
    let (server, port) = start_server();
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    for _ in 0..8 {
        // A request header announcing 100 bytes, and 20 of them.
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let h = FrameHeader {
            kind: Kind::Request,
            len: 100,
        };
        s.write_all(&h.encode()).unwrap();
        s.write_all(&[0u8; 20]).unwrap();
        held.push(s);
    }
    let mut client = perftest()
        .args([
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "tag_lat",
            "-n",
            "1000",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The client prints its table header once the server accepted its test and both sides
    // connected: at that point every idle connection must still be open (their deadline is
    // 30 s away), so the server served the client past them, not after them.
    let mut out = BufReader::new(client.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with('+'), "client header: {first:?}");
    for (i, s) in held.iter().enumerate() {
        assert!(
            still_open(s),
            "connection {i} was closed before the client was served"
        );
    }
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let (code, stderr) = wait_taken(client);
    assert_eq!(code, Some(0), "client: {stderr}");
    assert!(
        rest.join().unwrap().contains("Final"),
        "the client's results"
    );
    let (code, stderr) = wait_taken(server);
    assert_eq!(code, Some(0), "server: {stderr}");
}

fn params(size: u64, outstanding: u32) -> TestParams {
    TestParams {
        test: TestId::TagBw,
        layout: Layout::Contig,
        sizes: vec![size],
        iterations: 10,
        warmup: 0,
        outstanding,
        window: 1,
        transport: String::new(),
        device: String::new(),
        mem: Default::default(),
    }
}

#[test]
fn a_client_asking_for_huge_sizes_gets_an_error_and_the_server_keeps_serving() {
    let (server, port) = start_server();
    for (p, needle) in [
        (params(99_999_999_999_999, 1), "exceeds"),
        (params(8, u32::MAX), "-O 4294967295"),
        (params(8, 1 << 30), "-O 1073741824"),
    ] {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut c = Channel::new(s, Duration::from_secs(30)).unwrap();
        let mut b = Vec::new();
        p.encode(&mut b);
        c.send(Kind::Request, &b).unwrap();
        let e = c.expect(Kind::Accept).unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }
    let r = tag_lat_client(port);
    assert_eq!(r.code, Some(0), "client after the refusals: {}", r.stderr);
    let (code, stderr) = wait_taken(server);
    assert_eq!(code, Some(0), "server: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

fn assert_clean_error(args: &[&str], needle: &str) {
    let r = run(args, Duration::from_secs(60));
    assert_eq!(r.code, Some(1), "args {args:?}: {}", r.stderr);
    assert!(r.stderr.contains(needle), "args {args:?}: {}", r.stderr);
    assert!(!r.stderr.contains("panicked") && !r.stderr.contains("memory allocation"));
}

#[test]
fn huge_sizes_and_counts_are_clear_errors() {
    assert_clean_error(
        &["--local", "-t", "tag_lat", "-s", "99999999999999"],
        "limit of 1073741824",
    );
    assert_clean_error(
        &[
            "127.0.0.1",
            "-p",
            "1",
            "-t",
            "tag_lat",
            "-s",
            "99999999999999",
        ],
        "limit of 1073741824",
    );
    assert_clean_error(&["-l", "-t", "tag_bw", "-O", "4000000000"], "-O 4000000000");
    assert_clean_error(&["-l", "-t", "tag_bw", "-W", "4000000000"], "-W 4000000000");
    assert_clean_error(
        &["-l", "-t", "tag_bw", "-n", "99999999999999999999999"],
        "-n",
    );
}

#[test]
fn sizes_beyond_the_memory_limit_name_the_flags_and_the_limit() {
    use std::os::unix::process::CommandExt;
    // 512 MiB messages, 4 in flight: within perftest's caps, beyond a 1 GiB address space.
    let mut cmd = perftest();
    cmd.args(["-l", "-t", "tag_bw", "-s", "512m", "-O", "4"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; the closure touches no locks or allocations.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = wait_with_watchdog(cmd.spawn().unwrap(), Duration::from_secs(60));
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("-s 536870912 with -O 4") && r.stderr.contains("1.0 GiB"),
        "{}",
        r.stderr
    );
}

#[test]
fn log_level_and_unknown_variables_are_honoured() {
    let out = perftest()
        .args(["-l", "-t", "tag_lat", "-n", "10"])
        .env("RUCX_LOG_LEVEL", "debug")
        .env("RUCX_TSL", "posix")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = wait_with_watchdog(out, Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("DEBUG"), "no debug output: {}", r.stderr);
    let warnings: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("unknown environment variable RUCX_TSL"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", r.stderr);
    assert!(
        warnings[0].contains("did you mean RUCX_TLS"),
        "{}",
        warnings[0]
    );

    // Without RUCX_LOG_LEVEL: warnings only.
    let quiet = perftest()
        .args(["-l", "-t", "tag_lat", "-n", "10"])
        .env_remove("RUCX_LOG_LEVEL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = wait_with_watchdog(quiet, Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stderr.contains("DEBUG"), "{}", r.stderr);
}
