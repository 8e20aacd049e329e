//! Server, client, `--local` and loopback runs: the side-channel handshake around a test.

use crate::cli::Mode;
use crate::params::{Api, TestParams};
use crate::report::{self, OutputOpts, Recorder};
use crate::timer::Ticker;
use crate::ucp_test::UcpTest;
use crate::uct_test::{Role, UctTest};
use crate::wire::{
    decode_status, encode_reason, encode_status, AddressInfo, Channel, FrameHeader, Kind,
};
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ucp::acceptor::{Acceptor, Framing};
use ucs::{Error, Result};

/// How long the handshake waits for the peer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one side waits for the other to finish after it finished itself.
const FINISH_TIMEOUT: Duration = Duration::from_secs(120);

/// Pins this process to `cores` (sched_setaffinity). An empty list leaves it unpinned.
pub fn pin_to(cores: &[usize]) -> Result<()> {
    if cores.is_empty() {
        return Ok(());
    }
    let max = libc::CPU_SETSIZE as usize;
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cores {
        if c >= max {
            return Err(Error::InvalidParam(format!("-c: CPU {c} is out of range")));
        }
        // SAFETY: `c` is below CPU_SETSIZE, checked above; `set` is a valid cpu_set_t.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: FFI call with a valid, initialised cpu_set_t of the size passed; pid 0 is this
    // process.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::InvalidParam(format!(
            "-c {}: cannot pin to these CPUs ({e}); this machine has {} online",
            cores
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(","),
            online_cpus()
        )));
    }
    Ok(())
}

/// Number of online CPUs.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Runs what the command line asked for.
pub fn run(mode: Mode) -> Result<()> {
    match mode {
        Mode::Server {
            port,
            local_server,
            cores,
        } => {
            pin_to(&cores)?;
            serve(port, local_server)
        }
        Mode::Client {
            host,
            port,
            params,
            output,
            cores,
        } => {
            pin_to(&cores)?;
            client(&host, port, &params, &output)
        }
        Mode::Local {
            params,
            output,
            cores,
        } => local(&params, &output, &cores),
        Mode::Loopback {
            params,
            output,
            cores,
        } => {
            pin_to(&cores)?;
            loopback(&params, &output)
        }
    }
}

/// One side of a test at either level.
pub enum Test {
    /// A uct test.
    Uct(Box<UctTest>),
    /// A ucp test.
    Ucp(Box<UcpTest>),
}

impl Test {
    /// This side's addresses.
    pub fn local_address(&mut self) -> Result<AddressInfo> {
        match self {
            Test::Uct(t) => t.local_address(),
            Test::Ucp(t) => t.local_address(),
        }
    }
    /// Connects to the peer.
    pub fn connect(&mut self, peer: &AddressInfo) -> Result<()> {
        match self {
            Test::Uct(t) => t.connect(peer),
            Test::Ucp(t) => t.connect(peer),
        }
    }
    /// Server side, before `connect`: lets the client's endpoint arrive first (ucp; a no-op
    /// for uct tests, whose server side already reuses the client's connection).
    pub fn await_peer(&mut self, peer: &AddressInfo) -> Result<()> {
        match self {
            Test::Uct(_) => Ok(()),
            Test::Ucp(t) => t.await_peer(peer),
        }
    }
    /// Progresses the transports once, outside a test loop (handshakes and the final flush of a
    /// peer may need it); what arrives is dropped.
    pub fn progress(&mut self) {
        match self {
            Test::Uct(t) => t.idle_progress(),
            Test::Ucp(t) => t.idle_progress(),
        }
    }
    /// Runs the test.
    pub fn run(
        &mut self,
        role: Role,
        rec: Option<&mut Recorder>,
        chan: Option<&Channel>,
    ) -> Result<()> {
        match self {
            Test::Uct(t) => t.run(role, rec, chan),
            Test::Ucp(t) => t.run(role, rec, chan),
        }
    }
}

/// Opens the test's resources: a uct transport and device, or a ucp context and worker.
pub fn open_test(p: &TestParams) -> Result<Test> {
    match p.test.api() {
        Api::Uct => UctTest::open(p).map(|t| Test::Uct(Box::new(t))),
        Api::Ucp => UcpTest::open(p).map(|t| Test::Ucp(Box::new(t))),
    }
}

/// Whether `p`'s transport only reaches its own process (self): then `--local` runs loopback.
fn process_local(p: &TestParams) -> bool {
    p.test.api() == Api::Uct
        && uct::registry::devices_of(&p.transport)
            .map(|devs| {
                devs.iter()
                    .any(|d| d.name == p.device && d.dev_type == uct::DeviceType::SelfLoop)
            })
            .unwrap_or(false)
}

/// Server: waits for one client, runs its test, and exits (as ucx_perftest's server). A client
/// whose test cannot run here gets the reason, and the server waits for the next one.
pub fn serve(port: u16, local_server: bool) -> Result<()> {
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            Error::InvalidParam(format!(
                "port {port} is in use (another perftest server?); choose another with -p"
            ))
        } else {
            Error::io(format!("listening on port {port}"), e)
        }
    })?;
    let quiet = local_server;
    if local_server || port == 0 {
        // The kernel picked the port: say which (the --local half prints nothing else).
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("listening socket", e))?
            .port();
        if local_server {
            println!("{port}");
        } else {
            println!("Listening on port {port}");
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    let mut acceptor = Acceptor::new(listener, request_framing(), HANDSHAKE_TIMEOUT)?;
    let mut announce = !quiet;
    loop {
        if announce {
            println!("Waiting for connection...");
            announce = false;
        }
        // Sleeps until a connection request is readable (or a pending one's deadline).
        let accepted = match acceptor.wait(Duration::from_secs(1)) {
            Ok(Some(a)) => a,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("perftest: bad request: {e}");
                continue;
            }
        };
        let peer = accepted.peer;
        announce = !quiet;
        if !quiet {
            println!("Accepted connection from {peer}");
        }
        let mut chan = Channel::new(accepted.stream, HANDSHAKE_TIMEOUT)?;
        let params = match TestParams::decode(&accepted.msg[FrameHeader::LEN..]) {
            Ok(p) => p,
            Err(e) => {
                let _ = chan.send_reject(&e.to_string());
                eprintln!("perftest: bad request from {peer}: {e}");
                continue;
            }
        };
        let prepared = params.validate().and_then(|_| open_test(&params));
        let mut test = match prepared {
            Ok(t) => t,
            Err(e) => {
                let reason = format!("server cannot run {}: {e}", params.test);
                let _ = chan.send_reject(&reason);
                eprintln!("perftest: {reason}");
                continue;
            }
        };
        chan.send(Kind::Accept, &[])?;
        if !quiet {
            println!("{}", report::info_box(&params));
        }
        return server_session(&mut test, &mut chan);
    }
}

/// The server's first message from a client is one side-channel `Request` frame; the
/// [`Acceptor`] reads it without blocking and refuses with a `Reject` frame.
fn request_framing() -> Framing {
    Framing {
        header_len: FrameHeader::LEN,
        total_len: |h| {
            let h = FrameHeader::decode(h)?;
            if h.kind != Kind::Request {
                return Err(Error::Wire(format!(
                    "expected a Request message, got {:?}",
                    h.kind
                )));
            }
            Ok(FrameHeader::LEN + h.len as usize)
        },
        refusal: |reason| {
            let mut payload = Vec::new();
            encode_reason(reason, &mut payload);
            let h = FrameHeader {
                kind: Kind::Reject,
                len: payload.len() as u32,
            };
            let mut b = h.encode().to_vec();
            b.extend_from_slice(&payload);
            b
        },
    }
}

fn server_session(test: &mut Test, chan: &mut Channel) -> Result<()> {
    let peer = chan.recv_address()?;
    let mine = test.local_address()?;
    chan.send_address(&mine)?;
    test.await_peer(&peer)?;
    test.connect(&peer)?;
    barrier(test, chan, Kind::Ready, HANDSHAKE_TIMEOUT)?;
    if let Err(e) = test.run(Role::Server, None, Some(chan)) {
        let _ = chan.send(Kind::Done, &encode_status(1));
        return Err(e);
    }
    chan.send(Kind::Done, &encode_status(0))?;
    let status = decode_status(&barrier_wait(test, chan, Kind::Done, FINISH_TIMEOUT)?)?;
    if status != 0 {
        return Err(Error::PeerFailure(format!(
            "the client finished with status {status}"
        )));
    }
    Ok(())
}

/// Sends `kind` and waits for the peer's, progressing the transports meanwhile (a peer may need
/// this side's progress to finish connecting or flushing).
fn barrier(test: &mut Test, chan: &mut Channel, kind: Kind, limit: Duration) -> Result<Vec<u8>> {
    chan.send(kind, &[])?;
    barrier_wait(test, chan, kind, limit)
}

/// Waits for the peer's `kind` message, progressing the transports meanwhile.
fn barrier_wait(
    test: &mut Test,
    chan: &mut Channel,
    kind: Kind,
    limit: Duration,
) -> Result<Vec<u8>> {
    let deadline = Instant::now() + limit;
    loop {
        for _ in 0..64 {
            test.progress();
        }
        if chan.poll_readable()? {
            break;
        }
        std::thread::yield_now();
        if Instant::now() > deadline {
            return Err(Error::Timeout(format!(
                "{} did not send {kind:?} within {} s",
                chan.peer(),
                limit.as_secs()
            )));
        }
    }
    chan.set_timeout(limit)?;
    chan.expect(kind)
}

/// Connects the side channel; a refused connection says how to start a server.
pub fn connect(host: &str, port: u16) -> Result<TcpStream> {
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::Unreachable(format!("cannot resolve '{host}': {e}")))?
        .collect();
    let mut last = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Error::Unreachable(format!(
            "no perftest server at {host}:{port} — start one with `perftest` (or `perftest -p {port}`)"
        )),
        Some(e) => Error::Unreachable(format!("cannot connect to {host}:{port}: {e}")),
        None => Error::Unreachable(format!("'{host}' has no address")),
    })
}

/// Client: checks the test here, hands it to the server, runs it and prints the results.
pub fn client(host: &str, port: u16, p: &TestParams, out: &OutputOpts) -> Result<()> {
    let mut test = open_test(p)?;
    let stream = connect(host, port)?;
    let mut chan = Channel::new(stream, HANDSHAKE_TIMEOUT)?;
    chan.send_params(p)?;
    chan.expect(Kind::Accept).map_err(|e| match e {
        Error::InvalidParam(reason) => Error::Unsupported(reason),
        other => other,
    })?;
    let mine = test.local_address()?;
    chan.send_address(&mine)?;
    let peer = chan.recv_address()?;
    test.connect(&peer)?;
    barrier(&mut test, &mut chan, Kind::Ready, HANDSHAKE_TIMEOUT)?;
    let mut rec = Recorder::new(Ticker::new(), p, false, *out);
    report::print_header(p.test, out);
    let result = test.run(Role::Client, Some(&mut rec), Some(&chan));
    if let Err(e) = result {
        let _ = chan.send(Kind::Done, &encode_status(1));
        return Err(e);
    }
    let row = rec.finish();
    chan.send(Kind::Done, &encode_status(0))?;
    let status = decode_status(&barrier_wait(
        &mut test,
        &mut chan,
        Kind::Done,
        FINISH_TIMEOUT,
    )?)?;
    if status != 0 {
        return Err(Error::PeerFailure(format!(
            "the server finished with status {status}"
        )));
    }
    report::print_final(p, &row, out);
    Ok(())
}

/// Loopback: one process, endpoint connected to its own interface.
pub fn loopback(p: &TestParams, out: &OutputOpts) -> Result<()> {
    let mut test = open_test(p)?;
    let mine = test.local_address()?;
    test.connect(&mine)?;
    let mut rec = Recorder::new(Ticker::new(), p, true, *out);
    report::print_header(p.test, out);
    test.run(Role::Loopback, Some(&mut rec), None)?;
    let row = rec.finish();
    report::print_final(p, &row, out);
    Ok(())
}

/// Kills the server child when the client half is done or fails.
struct ServerChild(Child);

impl ServerChild {
    fn finish(mut self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            match self.0.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => {
                    return Err(Error::PeerFailure(format!(
                        "the server process failed ({st})"
                    )))
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    return Err(Error::Timeout(
                        "the server process did not finish after the test".into(),
                    ))
                }
                Err(e) => return Err(Error::io("waiting for the server process", e)),
            }
        }
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `--local`: spawns this program as the server on a free port (pinned to the first core),
/// then runs the client against it (pinned to the second core).
pub fn local(p: &TestParams, out: &OutputOpts, cores: &[usize]) -> Result<()> {
    if process_local(p) {
        // The transport reaches only its own process: run both halves here.
        pin_to(
            cores
                .get(1)
                .or(cores.first())
                .map(std::slice::from_ref)
                .unwrap_or(&[]),
        )?;
        return loopback(p, out);
    }
    // Check the test here first, so a bad test fails before a server is started.
    drop(open_test(p)?);
    let (server_core, client_core) = match cores {
        [] if online_cpus() >= 2 => (Some(0), Some(1)),
        [] => (None, None),
        [one] => (Some(*one), Some(*one)),
        [a, b, ..] => (Some(*a), Some(*b)),
    };
    let exe = std::env::current_exe().map_err(|e| Error::io("finding the perftest binary", e))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--local-server").arg("-p").arg("0");
    if let Some(c) = server_core {
        cmd.arg("-c").arg(c.to_string());
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("starting the server process", e))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::InvalidParam("server process has no stdout".into()))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| Error::InvalidParam("server process has no stderr".into()))?;
    // The server's diagnostics pass through; its final error line is held back, so that one
    // failure is reported once (see `combine_errors`).
    let server_error = std::thread::spawn(move || {
        let mut last = None;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            match line.strip_prefix("perftest: error: ") {
                Some(m) => last = Some(m.to_owned()),
                None => eprintln!("{line}"),
            }
        }
        last
    });
    let child = ServerChild(child);
    let result = local_client(p, out, client_core, stdout, child);
    // The child has exited or been killed: its stderr is closed.
    let server_msg = server_error.join().ok().flatten();
    combine_errors(result, server_msg)
}

/// The client half of `--local`: reads the server's port, runs the client, and waits for the
/// server to finish.
fn local_client(
    p: &TestParams,
    out: &OutputOpts,
    client_core: Option<usize>,
    stdout: std::process::ChildStdout,
    child: ServerChild,
) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let r = BufReader::new(stdout).read_line(&mut line).map(|_| line);
        let _ = tx.send(r);
    });
    let line = rx
        .recv_timeout(HANDSHAKE_TIMEOUT)
        .map_err(|_| Error::Timeout("the server process did not start listening".into()))?
        .map_err(|e| Error::io("reading the server's port", e))?;
    let port: u16 = line.trim().parse().map_err(|_| {
        Error::PeerFailure(format!(
            "the server process did not report its port (said {:?})",
            line.trim()
        ))
    })?;
    if let Some(c) = client_core {
        pin_to(&[c])?;
    }
    client("127.0.0.1", port, p, out)?;
    child.finish(Duration::from_secs(30))
}

/// One error for a `--local` run. When the client failed on its own account (a test it cannot
/// run, bad input), its error stands and the server's (usually the same, or a consequence) is
/// dropped; when the client only saw its peer go away or fall silent, the server's reason is
/// the error.
fn combine_errors(client: Result<()>, server_msg: Option<String>) -> Result<()> {
    match (client, server_msg) {
        (Ok(()), _) => Ok(()),
        (
            Err(
                Error::PeerFailure(_)
                | Error::ConnectionReset(_)
                | Error::Timeout(_)
                | Error::Unreachable(_)
                | Error::Wire(_),
            ),
            Some(m),
        ) => Err(Error::PeerFailure(format!(
            "the server process failed: {m}"
        ))),
        (Err(e), _) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_errors_are_reported_once() {
        let srv = || Some("not supported: no lane".to_string());
        // The client's own error stands.
        let e = combine_errors(Err(Error::Unsupported("client".into())), srv()).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported(ref m) if m == "client"),
            "{e}"
        );
        // The client only saw the server go away: the server's reason is the error.
        let e = combine_errors(Err(Error::ConnectionReset("eof".into())), srv()).unwrap_err();
        assert!(e.to_string().contains("no lane"), "{e}");
        // Nothing from the server: the client's error.
        let e = combine_errors(Err(Error::Timeout("slow".into())), None).unwrap_err();
        assert!(matches!(e, Error::Timeout(_)), "{e}");
        assert!(combine_errors(Ok(()), srv()).is_ok());
    }
}
