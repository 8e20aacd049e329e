//! ucp_tokio: ucp operations awaited as futures on tokio's current-thread runtime.
//!
//! The worker lives in an `Rc<RefCell<Worker>>` shared by the tasks of one thread. Each operation
//! is wrapped in a [`ucp::OpFuture`], which resolves to its typed result (`.recv()`, `.done()`).
//! A driver task sleeps until the worker's event fd is readable (tokio's `AsyncFd`, after
//! `Worker::arm` said nothing is pending), then progresses the worker until it is idle, which
//! wakes the tasks whose operations finished.
//!
//! Server: `ucp_tokio [-l ADDR] [-p PORT] [-n N] [-s SIZE]` prints `listening on port P` (port 0,
//! the default, lets the kernel pick), serves one client and exits. Client:
//! `ucp_tokio -a ADDR -p PORT [-n N] [-s SIZE]`, with the same `-n` and `-s`. The client sends N
//! tagged messages at once (8 bytes, 4 KiB and SIZE in turn: eager and rendezvous), the server
//! awaits them all at once, checks each one and echoes it, and the client checks the echoes.

use clap::Parser;
use std::cell::RefCell;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::task::LocalSet;
use ucp::{
    CloseMode, Context, ContextParams, EpHandle, EpParams, Features, Listener, OpFuture, UcpConfig,
    Worker, TAG_MASK_EXACT,
};

/// A worker shared by the tasks of one thread.
type Shared = Rc<RefCell<Worker>>;

/// Tag bit of the echoes.
const ECHO: u64 = 1 << 32;
/// Longest sleep of the driver: interfaces without an event fd (cma, self) are polled this
/// often while nothing else happens.
const POLL_PERIOD: Duration = Duration::from_millis(10);
/// Progress calls in a row the driver makes before letting the woken tasks run.
const PROGRESS_BURST: usize = 64;

#[derive(Parser, Debug)]
#[command(about = "rucx ucp operations as futures on tokio")]
struct Args {
    /// Server IP address to connect to (client mode).
    #[arg(short = 'a')]
    addr: Option<IpAddr>,
    /// Address the server listens on.
    #[arg(short = 'l', default_value = "0.0.0.0")]
    listen: IpAddr,
    /// Port (server: 0 lets the kernel pick).
    #[arg(short = 'p', default_value_t = 0)]
    port: u16,
    /// Messages sent at once.
    #[arg(short = 'n', default_value_t = 12)]
    count: usize,
    /// Size of every third message (accepts k/m/g suffixes).
    #[arg(short = 's', default_value = "1m", value_parser = parse_size)]
    size: usize,
    /// Seconds the whole run may take.
    #[arg(short = 't', default_value_t = 120)]
    timeout: u64,
}

fn parse_size(s: &str) -> Result<usize, String> {
    match ucs::config::parse_size(s)? {
        ucs::config::Size::Bytes(b) => usize::try_from(b).map_err(|e| e.to_string()),
        ucs::config::Size::Inf => Err("size must be finite".into()),
    }
}

/// Length of message `i`.
fn len_of(i: usize, size: usize) -> usize {
    [8, 4096, size][i % 3]
}

fn pattern(n: usize, i: usize) -> Vec<u8> {
    (0..n)
        .map(|k| (k as u64).wrapping_mul(131).wrapping_add(i as u64 * 7 + 1) as u8)
        .collect()
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
        Some(k) => Err(format!("{what}: data differ at byte {k}")),
        None => Ok(()),
    }
}

/// The worker's event fd, for `AsyncFd` (the worker keeps owning it).
struct EventFd(RawFd);

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Progresses the worker while it has work, and sleeps on its event fd when it has none.
async fn drive(w: Shared) -> Result<(), String> {
    let efd = w.borrow().efd().map_err(|e| e.to_string())?;
    // SAFETY: the worker owns the fd and keeps it open until it is dropped; this task holds the
    // worker (`w`) for as long as `fd` lives, so the fd stays open and the same throughout.
    let fd = unsafe { AsyncFd::register_with_interest(EventFd(efd), Interest::READABLE) }
        .map_err(|e| format!("registering the worker's event fd with tokio: {e}"))?;
    loop {
        let armed = {
            let mut w = w.borrow_mut();
            let mut busy = 0;
            while busy < PROGRESS_BURST && w.progress() > 0 {
                busy += 1;
            }
            busy < PROGRESS_BURST && w.arm().map_err(|e| e.to_string())?
        };
        if armed {
            if let Ok(guard) = tokio::time::timeout(POLL_PERIOD, fd.readable()).await {
                guard.map_err(|e| e.to_string())?.clear_ready();
            }
        } else {
            tokio::task::yield_now().await;
        }
    }
}

/// Server side: awaits all messages at once, checks each one and echoes it.
async fn serve(w: Shared, ep: EpHandle, args: &Args) -> Result<(), String> {
    let mut tasks = Vec::new();
    for i in 0..args.count {
        let w = w.clone();
        let len = len_of(i, args.size);
        tasks.push(tokio::task::spawn_local(async move {
            let op = w
                .borrow_mut()
                .tag_recv(vec![0; len], i as u64, TAG_MASK_EXACT)
                .map_err(|e| e.to_string())?;
            let got = OpFuture::new(&w, op)
                .recv()
                .await
                .map_err(|e| format!("message {i}: {e}"))?;
            check(got.data(), &pattern(len, i), &format!("message {i}"))?;
            let op = w
                .borrow_mut()
                .tag_send_vec(ep, ECHO | i as u64, got.into_data())
                .map_err(|e| e.to_string())?;
            OpFuture::new(&w, op)
                .done()
                .await
                .map_err(|e| format!("echo {i}: {e}"))
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    println!("server: {} messages verified and echoed", args.count);
    Ok(())
}

/// Client side: sends all messages at once and checks every echo.
async fn client(w: Shared, ep: EpHandle, args: &Args) -> Result<(), String> {
    let mut tasks = Vec::new();
    for i in 0..args.count {
        let w = w.clone();
        let len = len_of(i, args.size);
        tasks.push(tokio::task::spawn_local(async move {
            // The echo's receive is posted first, so it never waits in the unexpected queue.
            let echo = w
                .borrow_mut()
                .tag_recv(vec![0; len], ECHO | i as u64, TAG_MASK_EXACT)
                .map_err(|e| e.to_string())?;
            let echo = OpFuture::new(&w, echo);
            let data = pattern(len, i);
            let op = w
                .borrow_mut()
                .tag_send(ep, i as u64, &data)
                .map_err(|e| e.to_string())?;
            OpFuture::new(&w, op)
                .done()
                .await
                .map_err(|e| format!("message {i}: {e}"))?;
            let got = echo.recv().await.map_err(|e| format!("echo {i}: {e}"))?;
            check(got.data(), &data, &format!("echo {i}"))
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    println!(
        "client: {} messages (up to {} bytes) echoed and verified",
        args.count, args.size
    );
    Ok(())
}

async fn run(args: &Args) -> Result<(), String> {
    let cfg = UcpConfig::from_env().map_err(|e| e.to_string())?;
    let ctx = Context::new(ContextParams {
        features: Features::TAG | Features::WAKEUP,
        config: Some(cfg),
    })
    .map_err(|e| e.to_string())?;
    let w: Shared = Rc::new(RefCell::new(Worker::new(&ctx).map_err(|e| e.to_string())?));
    let ep = match args.addr {
        Some(ip) => w
            .borrow_mut()
            .connect(SocketAddr::new(ip, args.port), EpParams::default())
            .map_err(|e| format!("connecting: {e}"))?,
        None => {
            let mut l = Listener::bind(SocketAddr::new(args.listen, args.port))
                .map_err(|e| e.to_string())?;
            let port = l.local_addr().map_err(|e| e.to_string())?.port();
            println!("listening on port {port}");
            let _ = std::io::stdout().flush();
            let req = loop {
                match l.poll() {
                    Ok(Some(r)) => break r,
                    Ok(None) => tokio::time::sleep(Duration::from_millis(10)).await,
                    Err(e) => eprintln!("server: bad connection request: {e}"),
                }
            };
            w.borrow_mut()
                .accept(req, EpParams::default())
                .map_err(|e| format!("accepting: {e}"))?
        }
    };
    let driver = tokio::task::spawn_local(drive(w.clone()));
    let work = async {
        match args.addr {
            Some(_) => client(w.clone(), ep, args).await,
            None => serve(w.clone(), ep, args).await,
        }
    };
    let r = tokio::select! {
        r = work => r,
        d = driver => Err(format!("the worker's driver stopped: {:?}", d)),
    };
    // Flush-close: the last echo is delivered before the endpoint goes away (the peer may
    // already be closing its side, which the server does not count as an error).
    let op = w.borrow_mut().ep_close_nb(ep, CloseMode::Flush);
    if let Ok(op) = op {
        let closed = OpFuture::new(&w, op).done().await;
        if args.addr.is_some() {
            closed.map_err(|e| format!("close: {e}"))?;
        }
    }
    r
}

fn main() -> ExitCode {
    ucs::log::init_program(&ucp::config::config_tables());
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ucp_tokio: cannot start tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    let local = LocalSet::new();
    let limit = Duration::from_secs(args.timeout);
    match local.block_on(&rt, async { tokio::time::timeout(limit, run(&args)).await }) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("ucp_tokio: {e}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("ucp_tokio: timed out after {limit:?}");
            ExitCode::FAILURE
        }
    }
}
