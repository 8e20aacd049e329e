//! ucp_client_server: listener/connect, then tag, stream or active-message transfers checked byte
//! for byte, following UCX's example of the same name.
//!
//! Server: `ucp_client_server [-p PORT] [-c tag|stream|am] [-i N] [-s SIZE]` serves one client
//! after another until interrupted. Client: `ucp_client_server -a ADDR [-p PORT] [-c …] [-i N]
//! [-s SIZE]`; both sides take the same `-c`, `-i` and `-s`. Each iteration the client sends
//! `SIZE` bytes, the server checks them and sends them back, and the client checks the echo.

use clap::{Parser, ValueEnum};
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};
use ucp::{
    CloseMode, Completion, Context, ContextParams, EpHandle, EpParams, Features, Listener, Op,
    UcpConfig, Worker,
};

const TAG: u64 = 0xC0FFEE;
const AM_ID: u16 = 1;
/// How often a wait looks at the endpoint's state and the deadline.
const CHECK_PERIOD: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Comm {
    Tag,
    Stream,
    Am,
}

#[derive(Parser, Debug)]
#[command(about = "rucx ucp client/server (UCX ucp_client_server flags)")]
struct Args {
    /// Server IP address to connect to (client mode).
    #[arg(short = 'a')]
    addr: Option<IpAddr>,
    /// Address the server listens on.
    #[arg(short = 'l', default_value = "0.0.0.0")]
    listen: IpAddr,
    /// Port.
    #[arg(short = 'p', default_value_t = 13337)]
    port: u16,
    /// Communication API.
    #[arg(short = 'c', value_enum, default_value_t = Comm::Stream)]
    comm: Comm,
    /// Iterations.
    #[arg(short = 'i', default_value_t = 1)]
    iters: usize,
    /// Message size (accepts k/m/g suffixes).
    #[arg(short = 's', default_value = "16", value_parser = parse_size)]
    size: usize,
    /// Seconds to wait for the peer before giving up.
    #[arg(short = 't', default_value_t = 120)]
    timeout: u64,
}

fn parse_size(s: &str) -> Result<usize, String> {
    match ucs::config::parse_size(s)? {
        ucs::config::Size::Bytes(b) => usize::try_from(b).map_err(|e| e.to_string()),
        ucs::config::Size::Inf => Err("size must be finite".into()),
    }
}

fn pattern(n: usize, iter: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u64).wrapping_mul(131).wrapping_add(iter as u64 * 7) as u8)
        .collect()
}

struct Session {
    w: Worker,
    deadline: Instant,
    am_inbox: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl Session {
    /// Waits for `op`, looking at the endpoint and the deadline every `CHECK_PERIOD` (the
    /// worker sleeps on its event fd in between when nothing happens).
    fn wait(&mut self, ep: EpHandle, op: Op) -> Result<Completion, String> {
        let mut req = match op {
            Op::Done(c) => return Ok(c),
            Op::Pending(r) => r,
        };
        loop {
            match self.w.wait_timeout(req, CHECK_PERIOD) {
                Ok(c) => return Ok(c),
                Err(r) => req = r,
            }
            // The peer may finish and close right after its last message: the endpoint is
            // judged only after progress came and went without finishing the request.
            self.check(ep)?;
        }
    }

    fn progress(&mut self) {
        if self.w.progress() == 0 {
            std::thread::yield_now();
        }
    }

    fn check(&mut self, ep: EpHandle) -> Result<(), String> {
        self.w
            .ep_status(ep)
            .map_err(|e| format!("peer failed: {e}"))?;
        if Instant::now() > self.deadline {
            return Err("timed out waiting for the peer".into());
        }
        Ok(())
    }

    fn send(&mut self, ep: EpHandle, comm: Comm, data: Vec<u8>) -> Result<(), String> {
        let op = match comm {
            Comm::Tag => self.w.tag_send_vec(ep, TAG, data),
            Comm::Stream => self.w.stream_send(ep, &data),
            Comm::Am => self.w.am_send_vec(ep, AM_ID, b"", data),
        }
        .map_err(|e| e.to_string())?;
        self.wait(ep, op)?.into_result().map_err(|e| e.to_string())
    }

    fn recv(&mut self, ep: EpHandle, comm: Comm, size: usize) -> Result<Vec<u8>, String> {
        match comm {
            Comm::Tag => {
                let op = self
                    .w
                    .tag_recv(vec![0; size], TAG, u64::MAX)
                    .map_err(|e| e.to_string())?;
                let got = self.wait(ep, op)?.into_recv();
                Ok(got.map_err(|e| e.to_string())?.into_data())
            }
            Comm::Stream => {
                let op = self.w.stream_recv(ep, vec![0; size]).map_err(|e| {
                    format!(
                        "{e} ({} of {size} stream bytes had arrived)",
                        self.w.stream_available(ep).unwrap_or(0)
                    )
                })?;
                let got = self.wait(ep, op)?.into_recv();
                Ok(got.map_err(|e| e.to_string())?.into_data())
            }
            Comm::Am => {
                let mut progressed = false;
                loop {
                    if let Some(m) = {
                        let mut inbox = self.am_inbox.borrow_mut();
                        (!inbox.is_empty()).then(|| inbox.remove(0))
                    } {
                        return Ok(m);
                    }
                    if progressed {
                        self.check(ep)?;
                    }
                    self.progress();
                    progressed = true;
                }
            }
        }
    }
}

fn check(got: &[u8], want: &[u8], what: &str) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} bytes instead of {}",
            got.len(),
            want.len()
        ));
    }
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => Err(format!("{what}: data differ at byte {i}")),
        None => Ok(()),
    }
}

fn run(args: &Args) -> Result<(), String> {
    let cfg = UcpConfig::from_env().map_err(|e| e.to_string())?;
    let ctx = Context::new(ContextParams {
        features: Features::TAG | Features::STREAM | Features::AM | Features::WAKEUP,
        config: Some(cfg),
    })
    .map_err(|e| e.to_string())?;
    let new_session = |timeout: u64| -> Result<Session, String> {
        let mut w = Worker::new(&ctx).map_err(|e| e.to_string())?;
        let inbox: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
        let i2 = inbox.clone();
        w.am_set_handler(AM_ID, move |_, _, data| i2.borrow_mut().push(data));
        Ok(Session {
            w,
            deadline: Instant::now() + Duration::from_secs(timeout),
            am_inbox: inbox,
        })
    };
    match args.addr {
        Some(ip) => {
            let mut s = new_session(args.timeout)?;
            let ep =
                s.w.connect(SocketAddr::new(ip, args.port), EpParams::default())
                    .map_err(|e| e.to_string())?;
            for i in 0..args.iters {
                let data = pattern(args.size, i);
                s.send(ep, args.comm, data.clone())
                    .map_err(|e| format!("iteration {i} send: {e}"))?;
                let echo = s
                    .recv(ep, args.comm, args.size)
                    .map_err(|e| format!("iteration {i} echo: {e}"))?;
                check(&echo, &data, &format!("iteration {i} echo"))?;
            }
            s.w.ep_close(ep, CloseMode::Flush)
                .map_err(|e| format!("close: {e}"))?;
            println!(
                "client: {} iteration(s) of {} bytes over {:?} verified",
                args.iters, args.size, args.comm
            );
            Ok(())
        }
        None => {
            let mut l = Listener::bind(SocketAddr::new(args.listen, args.port))
                .map_err(|e| e.to_string())?;
            eprintln!(
                "server: listening on {}",
                l.local_addr().map_err(|e| e.to_string())?
            );
            loop {
                let req = match l.wait(Duration::from_secs(3600)) {
                    Ok(Some(r)) => r,
                    Ok(None) => continue,
                    Err(e) => {
                        eprintln!("server: bad connection request: {e}");
                        continue;
                    }
                };
                let peer = req.peer_addr();
                // A fresh worker per client keeps one client's failure away from the next.
                let r = (|| -> Result<(), String> {
                    let mut s = new_session(args.timeout)?;
                    let ep =
                        s.w.accept(req, EpParams::default())
                            .map_err(|e| e.to_string())?;
                    for i in 0..args.iters {
                        let got = s.recv(ep, args.comm, args.size)?;
                        check(&got, &pattern(args.size, i), &format!("iteration {i}"))?;
                        s.send(ep, args.comm, got)?;
                    }
                    // Flush-close: the last echo is delivered before the endpoint goes away (the
                    // client may already be closing its side).
                    let _ = s.w.ep_close(ep, CloseMode::Flush);
                    Ok(())
                })();
                match r {
                    Ok(()) => eprintln!(
                        "server: client {peer}: {} iteration(s) of {} bytes verified",
                        args.iters, args.size
                    ),
                    Err(e) => eprintln!("server: client {peer} failed: {e}"),
                }
            }
        }
    }
}

fn main() -> ExitCode {
    ucs::log::init_program(&ucp::config::config_tables());
    let args = Args::parse();
    // The message and its copies (sent, received, expected) must fit in memory.
    let need = (args.size as u64).saturating_mul(3);
    if let Err(e) = ucs::limits::check_alloc(&format!("-s {}", args.size), need) {
        eprintln!("ucp_client_server: {e}");
        return ExitCode::FAILURE;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ucp_client_server: {e}");
            ExitCode::FAILURE
        }
    }
}
