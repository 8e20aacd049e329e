//! ucp_hello_world: one tag message each way, following UCX's example of the same name.
//!
//! Server: `ucp_hello_world [-p PORT]`. Client: `ucp_hello_world -n HOST [-p PORT]`.
//! The server sends its worker address over a side TCP connection; the client creates an
//! endpoint and sends its own address as a tag message; the server answers with a test string
//! of `-s` bytes, which the client checks and prints. The server exits after its peer.

use clap::Parser;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use ucp::{Context, ContextParams, EpHandle, EpParams, Features, Op, UcpConfig, Worker};

const TAG: u64 = 0x1337_a880;
const TAG_MASK: u64 = u64::MAX;

#[derive(Parser, Debug)]
#[command(about = "rucx ucp hello world (UCX ucp_hello_world flags)")]
struct Args {
    /// Server host name or IP address (client mode).
    #[arg(short = 'n')]
    server: Option<String>,
    /// Port of the side channel that exchanges addresses.
    #[arg(short = 'p', default_value_t = 13337)]
    port: u16,
    /// Test string length.
    #[arg(short = 's', default_value_t = 16)]
    size: usize,
    /// Seconds to wait for the peer before giving up.
    #[arg(short = 't', default_value_t = 60)]
    timeout: u64,
}

fn test_string(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Progresses until `op` finishes, the endpoint fails, or the deadline passes.
fn wait(
    w: &mut Worker,
    ep: Option<EpHandle>,
    op: Op,
    deadline: Instant,
) -> Result<ucp::Completion, String> {
    let mut req = match op {
        Op::Done(c) => return Ok(c),
        Op::Pending(r) => r,
    };
    loop {
        // The worker sleeps on its event fd while nothing happens (Features::WAKEUP).
        match w.wait_timeout(req, Duration::from_millis(100)) {
            Ok(c) => return Ok(c),
            Err(r) => req = r,
        }
        if let Some(ep) = ep {
            w.ep_status(ep).map_err(|e| format!("peer failed: {e}"))?;
        }
        if Instant::now() > deadline {
            return Err("timed out waiting for the peer".into());
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let cfg = UcpConfig::from_env().map_err(|e| e.to_string())?;
    let ctx = Context::new(ContextParams {
        features: Features::TAG | Features::WAKEUP,
        config: Some(cfg),
    })
    .map_err(|e| e.to_string())?;
    let mut w = Worker::new(&ctx).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    match &args.server {
        None => {
            let l = TcpListener::bind(("0.0.0.0", args.port))
                .map_err(|e| format!("cannot listen on port {}: {e}", args.port))?;
            // `-p 0` lets the kernel pick the port; the line names the port actually bound.
            let bound = l.local_addr().map(|a| a.port()).unwrap_or(args.port);
            eprintln!("[server] waiting for a client on port {bound}");
            let (mut s, peer) = l.accept().map_err(|e| format!("accept: {e}"))?;
            let addr = w.address().to_vec();
            s.write_all(&(addr.len() as u32).to_le_bytes())
                .and_then(|_| s.write_all(&addr))
                .map_err(|e| format!("sending the address to {peer}: {e}"))?;
            // The client's address arrives as the first tag message.
            let op = w
                .tag_recv(vec![0; 64 << 10], TAG, TAG_MASK)
                .map_err(|e| e.to_string())?;
            let client = wait(&mut w, None, op, deadline)?
                .into_recv()
                .map_err(|e| format!("receiving the client address: {e}"))?;
            let ep = w
                .ep_create(client.data(), EpParams::default())
                .map_err(|e| format!("endpoint to the client: {e}"))?;
            let op = w
                .tag_send(ep, TAG, &test_string(args.size))
                .map_err(|e| e.to_string())?;
            wait(&mut w, Some(ep), op, deadline)?
                .into_result()
                .map_err(|e| format!("sending the test string: {e}"))?;
            let op = w.ep_flush(ep).map_err(|e| e.to_string())?;
            wait(&mut w, Some(ep), op, deadline)?
                .into_result()
                .map_err(|e| e.to_string())?;
            // Wait until the client has it (it closes the side channel).
            let mut b = [0u8; 1];
            let _ = s.read(&mut b);
            eprintln!("[server] sent {} bytes to {peer}", args.size);
            Ok(())
        }
        Some(host) => {
            let mut s = TcpStream::connect((host.as_str(), args.port))
                .map_err(|e| format!("cannot connect to {host}:{}: {e}", args.port))?;
            let mut len = [0u8; 4];
            s.read_exact(&mut len)
                .map_err(|e| format!("reading the server address: {e}"))?;
            let len = u32::from_le_bytes(len) as usize;
            if len > ucp::listener::MAX_ADDR_LEN {
                return Err(format!(
                    "the server announced a {len}-byte address (at most {} expected): is the \
                     port right?",
                    ucp::listener::MAX_ADDR_LEN
                ));
            }
            let mut addr = vec![0u8; len];
            s.read_exact(&mut addr)
                .map_err(|e| format!("reading the server address: {e}"))?;
            let ep = w
                .ep_create(&addr, EpParams::default())
                .map_err(|e| format!("endpoint to the server: {e}"))?;
            let my = w.address().to_vec();
            let op = w.tag_send(ep, TAG, &my).map_err(|e| e.to_string())?;
            wait(&mut w, Some(ep), op, deadline)?
                .into_result()
                .map_err(|e| format!("sending our address: {e}"))?;
            let op = w
                .tag_recv(vec![0; args.size], TAG, TAG_MASK)
                .map_err(|e| e.to_string())?;
            let got = wait(&mut w, Some(ep), op, deadline)?
                .into_recv()
                .map_err(|e| format!("receiving the test string: {e}"))?;
            if got.len != args.size {
                return Err(format!(
                    "expected a {}-byte string, got {} bytes (give both sides the same -s)",
                    args.size, got.len
                ));
            }
            let got = got.data();
            if got != test_string(args.size) {
                return Err("the test string arrived corrupted".into());
            }
            println!("UCX data message was received");
            println!("\n\n----- UCP TEST SUCCESS -------\n");
            println!("{}", String::from_utf8_lossy(&got[..got.len().min(256)]));
            println!("\n------------------------------\n");
            drop(s);
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    ucs::log::init_program(&ucp::config::config_tables());
    let args = Args::parse();
    // The message and its copies (sent, received, expected) must fit in memory.
    let need = (args.size as u64).saturating_mul(2);
    if let Err(e) = ucs::limits::check_alloc(&format!("-s {}", args.size), need) {
        eprintln!("ucp_hello_world: {e}");
        return ExitCode::FAILURE;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ucp_hello_world: {e}");
            ExitCode::FAILURE
        }
    }
}
