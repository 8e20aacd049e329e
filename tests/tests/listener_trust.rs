//! Listeners facing clients that do not play along, with real processes and sockets:
//!
//! - idle and half-written connections to `ucp_client_server`'s listener while a real client
//!   connects: the client is served, and the idle connections are still open when it is done;
//! - a listener at its descriptor limit (RLIMIT_NOFILE set in the server process): it does not
//!   spin (a handful of log lines), and the refused client's error names the limit;
//! - uct tcp's listening socket at the descriptor limit (this test binary re-run as the child,
//!   `LISTENER_TRUST_ROLE=tcp_limit`): a few log lines, no spin, and the waiting client is
//!   accepted once descriptors free up (a caller sleeping on the interface's event fd learns
//!   from `wake_within` when the pause ends, and arming then reports it); reading the host identity at the limit is an error
//!   naming the limit, not a made-up network namespace;
//! - huge `-s` on the examples, and `RUCX_LOG_LEVEL`/unknown `RUCX_*` names in them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WATCHDOG: Duration = Duration::from_secs(120);

fn bin(name: &str) -> PathBuf {
    let st = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "rucx-examples", "--bin", name])
        .status()
        .expect("cargo build");
    assert!(st.success(), "building {name}");
    let mut p = std::env::current_exe().expect("exe");
    p.pop();
    if p.ends_with("deps") {
        p.pop();
    }
    p.join(name)
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Output of a finished process.
struct Done {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run_to_end(mut c: Command) -> Done {
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    finish(Proc(child))
}

fn finish(mut p: Proc) -> Done {
    let mut out = p.0.stdout.take();
    let mut err = p.0.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let end = Instant::now() + WATCHDOG;
    let st = loop {
        if let Some(st) = p.0.try_wait().expect("wait") {
            break Some(st);
        }
        if Instant::now() > end {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(p);
    let stdout = t_out.join().unwrap();
    let stderr = t_err.join().unwrap();
    let st = st.unwrap_or_else(|| panic!("watchdog\nstdout: {stdout}\nstderr: {stderr}"));
    Done {
        code: st.code(),
        stdout,
        stderr,
    }
}

/// Sets RLIMIT_NOFILE of the process `c` starts.
fn with_nofile(c: &mut Command, n: u64) {
    // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing and takes no lock.
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: n,
                rlim_max: n.max(4096),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A `ucp_client_server` server on a kernel-picked port; its stderr lines go to the channel.
fn start_server(
    setup: impl FnOnce(&mut Command),
) -> (Proc, u16, std::sync::mpsc::Receiver<String>) {
    let mut c = Command::new(bin("ucp_client_server"));
    c.args(["-p", "0", "-l", "127.0.0.1", "-s", "4096", "-i", "3"])
        .env("RUCX_TLS", "posix")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    setup(&mut c);
    let mut p = Proc(c.spawn().expect("spawn server"));
    let err = p.0.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(WATCHDOG).expect("server's first line");
    let port = first
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no port in {first:?}"));
    (p, port, rx)
}

fn client(port: u16) -> Command {
    let mut c = Command::new(bin("ucp_client_server"));
    c.args([
        "-a",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-s",
        "4096",
        "-i",
        "3",
    ])
    .env("RUCX_TLS", "posix");
    c
}

/// True when the other side has not closed `s`.
fn still_open(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 64];
    let r = (&*s).read(&mut b);
    s.set_nonblocking(false).unwrap();
    matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[test]
fn ucp_listener_serves_a_client_past_idle_and_half_written_connections() {
    let (_server, port, _lines) = start_server(|_| {});
    let mut held = Vec::new();
    for i in 0..16 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        if i % 2 == 1 {
            // A connection-request header announcing 200 address bytes, and 30 of them.
            let mut h = b"RUCM\x01\x00".to_vec();
            h.extend_from_slice(&200u32.to_le_bytes());
            h.extend_from_slice(&[7u8; 30]);
            s.write_all(&h).unwrap();
        }
        held.push(s);
    }
    let r = run_to_end(client(port));
    assert_eq!(r.code, Some(0), "client: {}", r.stderr);
    assert!(r.stdout.contains("verified"), "{}", r.stdout);
    for (i, s) in held.iter().enumerate() {
        assert!(
            still_open(s),
            "connection {i} was closed before the client finished"
        );
    }
}

#[test]
fn ucp_listener_at_the_fd_limit_refuses_with_the_limit_and_does_not_spin() {
    let (server, port, lines) = start_server(|c| with_nofile(c, 64));
    // The server may log from the first refused accept on: the window starts before it.
    let window = Instant::now();
    // Idle connections take the server's descriptors until accept fails.
    let mut held = Vec::new();
    for _ in 0..80 {
        held.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    let r = run_to_end(client(port));
    assert_eq!(r.code, Some(1), "client: {}", r.stderr);
    assert!(
        r.stderr.contains("RLIMIT_NOFILE=64"),
        "the client's error names the limit: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("namespace"), "{}", r.stderr);
    // More clients keep arriving for a while: the server logs a line a second at most.
    for _ in 0..200 {
        held.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(500));
    let secs = window.elapsed().as_secs_f64();
    drop(server);
    let logged: Vec<String> = lines.try_iter().collect();
    let limit_lines = logged
        .iter()
        .filter(|l| l.contains("cannot accept"))
        .count();
    assert!(limit_lines >= 1, "the limit is logged: {logged:?}");
    assert!(
        (limit_lines as f64) <= secs + 3.0,
        "{limit_lines} log lines in {secs:.1} s: {logged:?}"
    );
    assert!(
        logged.iter().any(|l| l.contains("RLIMIT_NOFILE=64")),
        "{logged:?}"
    );
}

/// Highest open descriptor number of this process.
fn max_fd() -> i32 {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .max()
        .unwrap_or(2)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn set_nofile(n: u64) {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a valid rlimit struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut cur);
        let lim = libc::rlimit {
            rlim_cur: n.min(cur.rlim_max),
            rlim_max: cur.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}

/// Fills every free descriptor below the limit, so the next open or accept fails with EMFILE.
fn fill_to_limit() -> Vec<std::fs::File> {
    let mut fill = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        fill.push(f);
    }
    fill
}

/// The child: a uct tcp interface whose process runs out of descriptors while clients wait.
fn tcp_limit_child() {
    use uct::tcp::TcpTransport;
    use uct::{Iface, Transport};
    ucs::log::init();
    struct Sink;
    impl uct::EventSink for Sink {
        fn am(&mut self, _: u8, _: &[u8]) {}
        fn completion(&mut self, _: uct::CompletionId, _: uct::Result<u64>) {}
        fn ep_error(&mut self, _: uct::EpId, _: uct::Error) {}
    }
    let normal = ucs::limits::nofile_limit().unwrap();

    // The host identity read at the limit: an error that names it.
    set_nofile(max_fd() as u64 + 1);
    let fill = fill_to_limit();
    match uct::tcp::netns_id() {
        Ok(_) => println!("netns ok"),
        Err(e) => println!("netns error: {e}"),
    }
    drop(fill);
    set_nofile(normal);

    let md = TcpTransport::open_md("lo").expect("md");
    let mut iface = TcpTransport::open_iface(
        &md,
        &uct::IfaceParams {
            device: "lo".into(),
            ..Default::default()
        },
    )
    .expect("iface");
    let a = uct::tcp::IfaceAddr::decode(iface.iface_address()).expect("address");
    println!("port {}", a.port);
    let before = open_fds();
    set_nofile(max_fd() as u64 + 1);
    let fill = fill_to_limit();
    std::io::stdout().flush().unwrap();
    // Clients connect now; progress for 2 s at the limit.
    let end = Instant::now() + Duration::from_secs(2);
    let mut calls = 0u64;
    while Instant::now() < end {
        iface.progress(&mut Sink);
        calls += 1;
    }
    drop(fill);
    println!(
        "progress calls {calls}, accepted at the limit {}",
        open_fds() - before
    );
    set_nofile(normal);
    // A caller sleeping on the event fd sleeps no longer than the interface says (the listening
    // socket is out of the epoll set during the pause, and no timer descriptor ends it); then
    // arming reports the pause over, and progress accepts.
    let within = iface.wake_within();
    println!("wake within {within:?}");
    let mut pfd = libc::pollfd {
        fd: iface.event_fd().expect("tcp has an event fd"),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = within.map_or(-1, |d| d.as_millis() as i32 + 1);
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, ms) };
    let busy = matches!(
        iface.event_arm(uct::EventFlags::RECV),
        Err(uct::Error::Busy(_))
    );
    println!("arm after the pause busy {busy}");
    let end = Instant::now() + Duration::from_secs(30);
    while open_fds() <= before && Instant::now() < end {
        iface.progress(&mut Sink);
    }
    println!("accepted after {}", open_fds() > before);
}

#[test]
fn tcp_accept_at_the_fd_limit_backs_off() {
    if std::env::var("LISTENER_TRUST_ROLE").as_deref() == Ok("tcp_limit") {
        tcp_limit_child();
        return;
    }
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "tcp_accept_at_the_fd_limit_backs_off",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("LISTENER_TRUST_ROLE", "tcp_limit")
    .env("RUCX_LOG_LEVEL", "warn")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut p = Proc(c.spawn().unwrap());
    let out = p.0.stdout.take().unwrap();
    let mut out = BufReader::new(out);
    let mut port = None;
    let mut text = String::new();
    while port.is_none() {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended: {text}");
        text.push_str(&line);
        port = line
            .strip_prefix("port ")
            .map(|p| p.trim().parse::<u16>().unwrap());
    }
    let port = port.unwrap();
    let clients: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    text.push_str(&rest);
    p.0.stdout = None;
    let done = finish(p);
    drop(clients);
    assert!(
        text.contains("netns error") && text.contains("RLIMIT_NOFILE="),
        "host identity at the limit: {text}"
    );
    assert!(!text.contains("netns ok"), "{text}");
    assert!(
        text.contains("accepted after true"),
        "{text}\n{}",
        done.stderr
    );
    assert!(
        text.contains("wake within Some(") && text.contains("arm after the pause busy true"),
        "{text}"
    );
    let limit_lines = done
        .stderr
        .lines()
        .filter(|l| l.contains("cannot accept"))
        .count();
    assert!(
        (1..=4).contains(&limit_lines),
        "{limit_lines} log lines in 2 s: {}",
        done.stderr
    );
    assert!(done.stderr.contains("RLIMIT_NOFILE="), "{}", done.stderr);
}

#[test]
fn examples_refuse_huge_sizes_with_a_clear_error() {
    for (name, args) in [
        ("ucp_client_server", vec!["-p", "0", "-s", "99999999999999"]),
        (
            "ucp_client_server",
            vec!["-a", "127.0.0.1", "-p", "1", "-s", "99999999999999"],
        ),
        ("ucp_hello_world", vec!["-p", "0", "-s", "99999999999999"]),
        (
            "uct_hello_world",
            vec!["-t", "tcp", "-d", "lo", "-p", "0", "-s", "99999999999999"],
        ),
    ] {
        let mut c = Command::new(bin(name));
        c.args(&args);
        let r = run_to_end(c);
        assert_eq!(r.code, Some(1), "{name} {args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("-s 99999999999999") && r.stderr.contains("GiB"),
            "{name} {args:?}: {}",
            r.stderr
        );
    }
}

#[test]
fn examples_honour_log_level_and_report_unknown_variables() {
    for name in ["ucp_client_server", "ucp_hello_world"] {
        let mut c = Command::new(bin(name));
        // A client with nobody to talk to: fails, after logging.
        c.args(["-p", "1"])
            .args(if name == "ucp_client_server" {
                ["-a", "127.0.0.1"]
            } else {
                ["-n", "127.0.0.1"]
            })
            .env("RUCX_LOG_LEVEL", "debug")
            .env("RUCX_TSL", "posix");
        let r = run_to_end(c);
        assert!(r.stderr.contains("DEBUG"), "{name}: {}", r.stderr);
        let w: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.contains("unknown environment variable RUCX_TSL"))
            .collect();
        assert_eq!(w.len(), 1, "{name}: {}", r.stderr);
        assert!(w[0].contains("RUCX_TLS"), "{}", w[0]);
    }
}
