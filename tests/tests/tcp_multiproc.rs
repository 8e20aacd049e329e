//! Multi-process tests of the tcp transport: a ping between two processes, a peer killed
//! while an operation is outstanding, and garbage written to an interface's listening port.
//!
//! The peer process is this same test binary re-run with `RUCX_TCP_TEST_ROLE=server` on the
//! `child_entry` test. The namespace script (`tests/netns/run.sh`) runs the same roles in two
//! network namespaces (`RUCX_TCP_TEST_DEV` names the device, `RUCX_TCP_TEST_ADDR_FILE` is where
//! the server writes its address and the client reads it).
//!
//! Every wait has a watchdog, so nothing here can hang.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ucs::testing::{hex, unhex};
use uct::tcp::TcpTransport;
use uct::{
    CompletionId, Endpoint, EpId, Error, EventSink, Iface, Iov, MemoryDomain, Outcome, RemoteKey,
    Transport,
};

const AM_PING: u8 = 1;
const AM_PONG: u8 = 2;
const AM_BYE: u8 = 3;
const AM_FREEZE: u8 = 4;
const WATCHDOG: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Sink {
    ams: Vec<(u8, Vec<u8>)>,
    comps: Vec<(CompletionId, uct::Result<u64>)>,
    errors: Vec<(EpId, Error)>,
}

impl EventSink for Sink {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.ams.push((id, data.to_vec()));
    }
    fn completion(&mut self, comp: CompletionId, result: uct::Result<u64>) {
        self.comps.push((comp, result));
    }
    fn ep_error(&mut self, ep: EpId, err: Error) {
        self.errors.push((ep, err));
    }
}

fn device() -> String {
    std::env::var("RUCX_TCP_TEST_DEV").unwrap_or_else(|_| "lo".into())
}

fn open_iface() -> uct::tcp::TcpIface {
    let md = TcpTransport::open_md(&device()).expect("tcp md");
    TcpTransport::open_iface(
        &md,
        &uct::IfaceParams {
            device: device(),
            ..Default::default()
        },
    )
    .expect("tcp iface")
}

/// "<dev addr hex> <iface addr hex>"
fn address_line(i: &impl Iface) -> String {
    format!("{} {}", hex(i.device_address()), hex(i.iface_address()))
}

fn parse_address(line: &str) -> (Vec<u8>, Vec<u8>) {
    let mut it = line.split_whitespace();
    let dev = unhex(it.next().expect("device address"));
    let ifa = unhex(it.next().expect("iface address"));
    (dev, ifa)
}

/// The server role: answers each ping with a pong on an endpoint to the sender's interface
/// (whose address the ping carries), until "bye". "freeze" makes it stop progressing.
fn server() {
    let mut iface = open_iface();
    let line = address_line(&iface);
    if let Ok(path) = std::env::var("RUCX_TCP_TEST_ADDR_FILE") {
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, &line).expect("write address file");
        std::fs::rename(&tmp, &path).expect("publish address file");
    }
    println!("ADDR {line}");
    std::io::stdout().flush().unwrap();
    let mut sink = Sink::default();
    let mut back: Option<uct::tcp::TcpEp> = None;
    let deadline = Instant::now() + WATCHDOG;
    while Instant::now() < deadline {
        iface.progress(&mut sink);
        for (id, data) in std::mem::take(&mut sink.ams) {
            match id {
                AM_PING => {
                    let text = std::str::from_utf8(&data[8..]).expect("utf8 address");
                    let (dev, ifa) = parse_address(text);
                    if back.is_none() {
                        iface
                            .is_reachable(&dev, Some(&ifa))
                            .expect("client reachable");
                        back = Some(iface.ep_create_connected(&dev, &ifa).expect("ep back"));
                    }
                    let ep = back.as_mut().unwrap();
                    let hdr = u64::from_le_bytes(data[..8].try_into().unwrap());
                    while ep.am_short(AM_PONG, hdr, b"pong").expect("pong") == Outcome::NoResource {
                        iface.progress(&mut sink);
                    }
                }
                AM_FREEZE => loop {
                    std::thread::sleep(Duration::from_secs(1));
                    if Instant::now() > deadline {
                        std::process::exit(3);
                    }
                },
                AM_BYE => {
                    // Let the last pong leave before exiting.
                    if let Some(ep) = back.as_mut() {
                        let d2 = Instant::now() + Duration::from_secs(10);
                        while !matches!(ep.flush(CompletionId(0)), Ok(Outcome::Done(())))
                            && Instant::now() < d2
                        {
                            iface.progress(&mut sink);
                        }
                    }
                    std::process::exit(0);
                }
                _ => {}
            }
        }
    }
    eprintln!("server watchdog expired");
    std::process::exit(2);
}

/// A client interface with an endpoint to a server.
struct Client {
    iface: uct::tcp::TcpIface,
    ep: uct::tcp::TcpEp,
    sink: Sink,
    me: String,
}

impl Client {
    fn connect(server_line: &str) -> Client {
        let mut iface = open_iface();
        let (dev, ifa) = parse_address(server_line);
        iface
            .is_reachable(&dev, Some(&ifa))
            .expect("server reachable");
        let ep = iface.ep_create_connected(&dev, &ifa).expect("connect");
        let me = address_line(&iface);
        Client {
            iface,
            ep,
            sink: Sink::default(),
            me,
        }
    }

    fn send(&mut self, id: u8, hdr: u64, payload: &[u8]) {
        let deadline = Instant::now() + WATCHDOG;
        loop {
            match self.ep.am_short(id, hdr, payload).expect("am_short") {
                Outcome::NoResource => {
                    self.iface.progress(&mut self.sink);
                    assert!(Instant::now() < deadline, "watchdog: send");
                }
                _ => return,
            }
        }
    }

    /// `n` ping-pongs, checking each pong's sequence number.
    fn ping(&mut self, n: u64) {
        for seq in 0..n {
            let me = self.me.clone();
            self.send(AM_PING, seq, me.as_bytes());
            let deadline = Instant::now() + WATCHDOG;
            while self.sink.ams.is_empty() {
                self.iface.progress(&mut self.sink);
                assert!(Instant::now() < deadline, "watchdog: no pong {seq}");
            }
            let (id, data) = self.sink.ams.remove(0);
            assert_eq!(id, AM_PONG);
            assert_eq!(u64::from_le_bytes(data[..8].try_into().unwrap()), seq);
            assert_eq!(&data[8..], b"pong");
        }
    }
}

/// A child process, killed and reaped on drop (also when a test panics).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_server() -> (ChildGuard, String) {
    let mut child = ChildGuard(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env("RUCX_TCP_TEST_ROLE", "server")
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn server"),
    );
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("read server stdout");
        assert!(n > 0, "server exited before printing its address");
        // libtest prints "test child_entry ... " before the test's own output.
        if let Some(at) = line.find("ADDR ") {
            return (child, line[at + 5..].trim().to_string());
        }
    }
}

fn wait_exit(child: &mut ChildGuard) -> std::process::ExitStatus {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > deadline {
            panic!("watchdog: child did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read_address_file() -> String {
    let path = std::env::var("RUCX_TCP_TEST_ADDR_FILE").expect("RUCX_TCP_TEST_ADDR_FILE");
    let deadline = Instant::now() + WATCHDOG;
    loop {
        if let Ok(s) = std::fs::read_to_string(&path) {
            return s;
        }
        assert!(Instant::now() < deadline, "watchdog: no server address");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Entry point of the child processes; does nothing in a normal test run.
#[test]
fn child_entry() {
    match std::env::var("RUCX_TCP_TEST_ROLE").as_deref() {
        Ok("server") => server(),
        Ok("devices") => match TcpTransport::devices() {
            Ok(d) => {
                let names: Vec<String> = d.into_iter().map(|d| d.name).collect();
                println!("DEVICES {}", names.join(","));
            }
            Err(why) => {
                let open = uct::open("tcp", "lo").err().map(|e| e.to_string());
                println!("NODEVICES {why} | open: {open:?}");
            }
        },
        Ok("check-unreachable") => {
            let line = read_address_file();
            let (dev, ifa) = parse_address(line.trim());
            let iface = open_iface();
            let why = iface
                .is_reachable(&dev, Some(&ifa))
                .expect_err("the server must not be reachable from this device");
            println!("{} -> server: unreachable as expected: {why}", device());
        }
        Ok("client") => {
            let line = read_address_file();
            let mut c = Client::connect(line.trim());
            c.ping(100);
            c.send(AM_BYE, 0, b"");
            let d = Instant::now() + Duration::from_secs(10);
            while !matches!(c.ep.flush(CompletionId(0)), Ok(Outcome::Done(())))
                && Instant::now() < d
            {
                c.iface.progress(&mut c.sink);
            }
            println!("tcp ping over {}: 100 round trips OK", device());
        }
        _ => {}
    }
}

#[test]
fn two_process_ping() {
    let (mut child, line) = spawn_server();
    let mut c = Client::connect(&line);
    c.ping(200);
    c.send(AM_BYE, 0, b"");
    assert!(wait_exit(&mut child).success());
}

#[test]
fn killed_peer_becomes_endpoint_error() {
    let (mut child, line) = spawn_server();
    let mut c = Client::connect(&line);
    c.ping(3);
    // Freeze the server, so a get stays outstanding, then kill it.
    c.send(AM_FREEZE, 0, b"");
    let md = TcpTransport::open_md("lo").unwrap();
    let dst = md.mem_alloc(64).unwrap();
    let rk = RemoteKey::unmapped(0x10000, 64, 1 << 32);
    let r =
        c.ep.get_zcopy(&[Iov::whole(&dst)], 0x10000, &rk, CompletionId(77))
            .unwrap();
    assert_eq!(r, Outcome::InProgress);
    child.0.kill().unwrap();
    wait_exit(&mut child);
    let deadline = Instant::now() + WATCHDOG;
    while c.sink.errors.is_empty() || !c.sink.comps.iter().any(|x| x.0 == CompletionId(77)) {
        c.iface.progress(&mut c.sink);
        assert!(Instant::now() < deadline, "watchdog: no endpoint error");
    }
    assert_eq!(c.sink.errors.len(), 1);
    assert_eq!(c.sink.errors[0].0, c.ep.id());
    let comp = c
        .sink
        .comps
        .iter()
        .find(|x| x.0 == CompletionId(77))
        .unwrap();
    assert!(comp.1.is_err(), "{:?}", comp.1);
    assert!(c.ep.am_short(AM_PING, 0, b"").is_err());
}

#[test]
fn garbage_on_listening_port_is_survived() {
    let (mut child, line) = spawn_server();
    let (_, ifa) = parse_address(&line);
    let port = u16::from_le_bytes([ifa[2], ifa[3]]);
    let ip = std::net::Ipv4Addr::new(ifa[4], ifa[5], ifa[6], ifa[7]);
    let garbage: Vec<Vec<u8>> = vec![
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect(),
        vec![1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
        vec![2, 0, 0],
    ];
    for g in garbage {
        let mut s = std::net::TcpStream::connect((ip, port)).unwrap();
        s.set_read_timeout(Some(WATCHDOG)).unwrap();
        s.write_all(&g).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        // The server closes it without sending anything.
        let mut buf = [0u8; 16];
        match s.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("unexpected result from a garbage connection: {other:?}"),
        }
    }
    // And still serves a real client.
    let mut c = Client::connect(&line);
    c.ping(10);
    c.send(AM_BYE, 0, b"");
    assert!(wait_exit(&mut child).success());
}

/// Runs the "devices" role with `RUCX_NET_DEVICES=value` and gives its answer line.
fn devices_with(value: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("RUCX_TCP_TEST_ROLE", "devices")
        .env("RUCX_NET_DEVICES", value)
        .output()
        .expect("run the devices role");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| {
            l.find("DEVICES ")
                .map(|at| l[at.saturating_sub(2)..].to_string())
        })
        .unwrap_or_else(|| panic!("no answer from the devices role: {text}"))
}

#[test]
fn net_devices_variable_restricts_and_rejects_unknown_names() {
    let only_lo = devices_with("lo");
    assert!(only_lo.ends_with("DEVICES lo"), "{only_lo}");
    let bad = devices_with("lo,nosuchdev0");
    assert!(bad.starts_with("NODEVICES"), "{bad}");
    assert!(bad.contains("nosuchdev0"), "{bad}");
    // Opening tcp then fails too, saying why, instead of falling back to another device.
    assert!(
        bad.contains("open: Some(") && bad.contains("unavailable"),
        "{bad}"
    );
}
