//! `uct_hello_world`: the uct-level hello world, following UCX's `examples/uct_hello_world.c`
//! step by step.
//!
//! Server: `uct_hello_world -d memory -t posix`
//! Client: `uct_hello_world -d memory -t posix -n localhost [-i|-b|-z] [-s SIZE]`
//!
//! Flow: parse arguments; open the memory domain and interface of `-t` on `-d`; set the
//! active-message handler; exchange device and interface (or endpoint) addresses over a TCP side
//! channel on `-p PORT`; create and connect the endpoint; the client sends one active message
//! with short (`-i`, default), bcopy (`-b`) or zcopy (`-z`); the server progresses until the
//! handler fires and prints the message; a barrier over the side channel; tear down.

use clap::Parser;
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::ptr::NonNull;
use std::rc::Rc;
use std::time::{Duration, Instant};
use uct::CompletionId;
use uct::{
    AmHandlers, AnyEp, AnyIface, AnyMd, Endpoint, Iface, IfaceFlags, Iov, MdFlags, MemoryDomain,
    Outcome,
};

/// Active-message id used for the hello message.
const HELLO_AM_ID: u8 = 0;
/// How long either side waits for its peer before giving up.
const PEER_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Parser, Debug)]
#[command(
    name = "uct_hello_world",
    about = "rucx uct hello world: one active message from client to server",
    disable_help_flag = true
)]
struct Args {
    /// Device to use (e.g. memory, lo, rxe0:1)
    #[arg(short = 'd')]
    device: Option<String>,
    /// Transport to use (e.g. posix, sysv, tcp, rc_verbs)
    #[arg(short = 't')]
    transport: Option<String>,
    /// Server host name or address; without it this process is the server
    #[arg(short = 'n')]
    host: Option<String>,
    /// Side-channel TCP port (server: 0 picks a free one and prints it)
    #[arg(short = 'p', default_value_t = 13337)]
    port: u16,
    /// Send with am_short (default)
    #[arg(short = 'i', group = "mode")]
    short: bool,
    /// Send with am_bcopy
    #[arg(short = 'b', group = "mode")]
    bcopy: bool,
    /// Send with am_zcopy
    #[arg(short = 'z', group = "mode")]
    zcopy: bool,
    /// Message size in bytes
    #[arg(short = 's', default_value_t = 16)]
    size: usize,
    /// Print this help and the available devices and transports
    #[arg(short = 'h')]
    help: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendMode {
    Short,
    Bcopy,
    Zcopy,
}

impl SendMode {
    fn name(self) -> &'static str {
        match self {
            SendMode::Short => "am_short",
            SendMode::Bcopy => "am_bcopy",
            SendMode::Zcopy => "am_zcopy",
        }
    }
}

fn available_resources() -> String {
    let mut text = String::from("Available transports and devices:\n");
    for t in uct::query_transports() {
        match t.devices {
            Ok(devs) => {
                for d in devs {
                    text += &format!(
                        "  -t {:<10} -d {:<12} ({}) {}\n",
                        t.tl_name, d.name, d.dev_type, d.details
                    );
                }
            }
            Err(why) => text += &format!("  -t {:<10} unavailable: {why}\n", t.tl_name),
        }
    }
    text
}

/// The message the client sends: printable, position-dependent, so the server can check it.
fn make_message(size: usize) -> Vec<u8> {
    const TEXT: &[u8] = b"Hello world from rucx! ";
    (0..size).map(|i| TEXT[i % TEXT.len()]).collect()
}

/// Side channel: length-prefixed blobs over TCP.
fn send_blob(sock: &mut TcpStream, blob: &[u8]) -> std::io::Result<()> {
    sock.write_all(&(blob.len() as u32).to_le_bytes())?;
    sock.write_all(blob)
}

fn recv_blob(sock: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    sock.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > 1 << 20 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "side-channel blob over 1 MiB",
        ));
    }
    let mut blob = vec![0; len];
    sock.read_exact(&mut blob)?;
    Ok(blob)
}

fn side_channel(args: &Args) -> Result<TcpStream, String> {
    let sock = match &args.host {
        Some(host) => {
            let deadline = Instant::now() + PEER_TIMEOUT;
            loop {
                match TcpStream::connect((host.as_str(), args.port)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline && e.kind() == std::io::ErrorKind::ConnectionRefused => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    Err(e) => {
                        return Err(format!(
                            "cannot reach the server at {host}:{}: {e} (start it first: uct_hello_world -d DEV -t TL)",
                            args.port
                        ))
                    }
                }
            }
        }
        None => {
            let listener = TcpListener::bind(("0.0.0.0", args.port)).map_err(|e| {
                format!(
                    "cannot listen on port {}: {e} (choose another with -p)",
                    args.port
                )
            })?;
            // `-p 0` lets the kernel pick a free port; the line names the port actually bound.
            let bound = listener.local_addr().map(|a| a.port()).unwrap_or(args.port);
            println!("Waiting for connection on port {bound}...");
            std::io::Write::flush(&mut std::io::stdout()).ok();
            listener
                .accept()
                .map_err(|e| format!("accept failed: {e}"))?
                .0
        }
    };
    sock.set_nodelay(true).ok();
    sock.set_read_timeout(Some(PEER_TIMEOUT)).ok();
    Ok(sock)
}

/// Exchanges addresses and gives a connected endpoint to the peer.
fn connect(iface: &mut AnyIface, sock: &mut TcpStream) -> Result<AnyEp, String> {
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            "the peer closed the side channel (did it fail? see its output)".to_string()
        }
        _ => format!("side channel: {e}"),
    };
    let flags = iface.attr().flags;
    send_blob(sock, iface.device_address()).map_err(io)?;
    let peer_dev = recv_blob(sock).map_err(io)?;
    if flags.contains(IfaceFlags::CONNECT_TO_IFACE) {
        send_blob(sock, iface.iface_address()).map_err(io)?;
        let peer_iface = recv_blob(sock).map_err(io)?;
        iface
            .is_reachable(&peer_dev, Some(&peer_iface))
            .map_err(|why| format!("peer is unreachable: {why}"))?;
        iface
            .ep_create_connected(&peer_dev, &peer_iface)
            .map_err(|e| format!("connecting the endpoint: {e}"))
    } else if flags.contains(IfaceFlags::CONNECT_TO_EP) {
        let mut ep = iface
            .ep_create()
            .map_err(|e| format!("creating the endpoint: {e}"))?;
        let addr = ep
            .ep_address()
            .map_err(|e| format!("endpoint address: {e}"))?;
        send_blob(sock, &addr).map_err(io)?;
        let peer_ep = recv_blob(sock).map_err(io)?;
        iface
            .is_reachable(&peer_dev, None)
            .map_err(|why| format!("peer is unreachable: {why}"))?;
        ep.connect_to_ep(&peer_dev, &peer_ep)
            .map_err(|e| format!("connecting to the peer endpoint: {e}"))?;
        Ok(ep)
    } else {
        Err(format!(
            "transport {} supports neither connect-to-iface nor connect-to-ep",
            iface.tl_name()
        ))
    }
}

/// Largest message the chosen mode can carry on this interface.
fn max_size(iface: &AnyIface, mode: SendMode) -> usize {
    let am = iface.attr().am;
    match mode {
        SendMode::Short => am.max_short,
        SendMode::Bcopy => am.max_bcopy,
        SendMode::Zcopy => am.max_zcopy,
    }
}

fn check_mode(iface: &AnyIface, mode: SendMode, size: usize) -> Result<(), String> {
    let flag = match mode {
        SendMode::Short => IfaceFlags::AM_SHORT,
        SendMode::Bcopy => IfaceFlags::AM_BCOPY,
        SendMode::Zcopy => IfaceFlags::AM_ZCOPY,
    };
    if !iface.attr().flags.contains(flag) {
        return Err(format!(
            "transport {} does not support {}",
            iface.tl_name(),
            mode.name()
        ));
    }
    let max = max_size(iface, mode);
    if size > max {
        return Err(format!(
            "message size {size} is over the {} limit of {max} bytes on {}/{}",
            mode.name(),
            iface.tl_name(),
            iface.device_name()
        ));
    }
    Ok(())
}

/// Sends the message, progressing while the transport has no resources.
fn send_message(
    md: &AnyMd,
    iface: &mut AnyIface,
    ep: &mut AnyEp,
    handlers: &mut AmHandlers,
    mode: SendMode,
    msg: &mut [u8],
    completed: &Rc<RefCell<Option<uct::Result<u64>>>>,
) -> Result<(), String> {
    // Registered before the loop so a zcopy retry reuses it; kept until the send completed.
    // As the C example: register the buffer where the domain can, else allocate from it.
    let memh = match mode {
        SendMode::Zcopy if !msg.is_empty() && md.attr().flags.contains(MdFlags::REG) => {
            let ptr = NonNull::new(msg.as_mut_ptr()).expect("non-empty slice");
            // SAFETY: `msg` outlives `memh`, which is dropped at the end of this function, after
            // the send has completed (flush below).
            Some(
                unsafe { md.mem_reg(ptr, msg.len()) }
                    .map_err(|e| format!("registering the message: {e}"))?,
            )
        }
        SendMode::Zcopy if !msg.is_empty() => {
            let memh = md
                .mem_alloc(msg.len())
                .map_err(|e| format!("allocating the message buffer: {e}"))?;
            memh.write(0, msg)
                .map_err(|e| format!("filling the message buffer: {e}"))?;
            Some(memh)
        }
        _ => None,
    };
    let deadline = Instant::now() + PEER_TIMEOUT;
    loop {
        let outcome = match mode {
            SendMode::Short if msg.len() >= 8 => {
                let header = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
                ep.am_short(HELLO_AM_ID, header, &msg[8..])
            }
            SendMode::Short => ep.am_short_iov(HELLO_AM_ID, &[msg]),
            SendMode::Bcopy => ep
                .am_bcopy(HELLO_AM_ID, |buf| {
                    buf[..msg.len()].copy_from_slice(msg);
                    msg.len()
                })
                .map(Outcome::unit),
            SendMode::Zcopy => {
                let iov: Vec<Iov<'_>> = memh.iter().map(Iov::whole).collect();
                ep.am_zcopy(HELLO_AM_ID, &[], &iov, CompletionId(1))
            }
        }
        .map_err(|e| format!("{} failed: {e}", mode.name()))?;
        match outcome {
            Outcome::Done(()) => break,
            Outcome::InProgress => {
                while completed.borrow().is_none() {
                    iface.progress(handlers);
                    if Instant::now() > deadline {
                        return Err(format!(
                            "{} did not complete within {PEER_TIMEOUT:?}",
                            mode.name()
                        ));
                    }
                }
                if let Some(Err(e)) = completed.borrow_mut().take() {
                    return Err(format!("{} completed with an error: {e}", mode.name()));
                }
                break;
            }
            Outcome::NoResource => {
                iface.progress(handlers);
                if Instant::now() > deadline {
                    return Err(format!(
                        "no send resources for {PEER_TIMEOUT:?}: is the peer alive?"
                    ));
                }
            }
        }
    }
    // Wait until the message left this process.
    *completed.borrow_mut() = None;
    loop {
        match ep
            .flush(CompletionId(2))
            .map_err(|e| format!("flush failed: {e}"))?
        {
            Outcome::Done(()) => break,
            Outcome::InProgress => {
                while completed.borrow().is_none() {
                    iface.progress(handlers);
                    if Instant::now() > deadline {
                        return Err("flush did not complete".into());
                    }
                }
                break;
            }
            Outcome::NoResource => {
                iface.progress(handlers);
            }
        }
    }
    drop(memh);
    Ok(())
}

fn run(args: Args) -> Result<(), String> {
    let (Some(tl), Some(dev)) = (args.transport.as_deref(), args.device.as_deref()) else {
        return Err(format!(
            "both -t TRANSPORT and -d DEVICE are required\n{}",
            available_resources()
        ));
    };
    let mode = match (args.short, args.bcopy, args.zcopy) {
        (_, true, _) => SendMode::Bcopy,
        (_, _, true) => SendMode::Zcopy,
        _ => SendMode::Short,
    };
    let is_server = args.host.is_none();

    // Memory domain and interface on the requested transport and device.
    let (md, mut iface) =
        uct::open(tl, dev).map_err(|e| format!("{e}\n{}", available_resources()))?;
    println!(
        "INFO: rucx uct_hello_world {}, transport {} on device {} ({})",
        if is_server { "server" } else { "client" },
        iface.tl_name(),
        iface.device_name(),
        mode.name()
    );

    // The active-message handler: keep a copy of what arrived.
    let received: Rc<RefCell<Option<Vec<u8>>>> = Rc::default();
    let completed: Rc<RefCell<Option<uct::Result<u64>>>> = Rc::default();
    let mut handlers = AmHandlers::new();
    {
        let received = received.clone();
        handlers
            .set_am_handler(HELLO_AM_ID, move |data| {
                *received.borrow_mut() = Some(data.to_vec())
            })
            .map_err(|e| e.to_string())?;
        let completed = completed.clone();
        handlers.on_completion(move |_, result| *completed.borrow_mut() = Some(result));
    }

    // Address exchange over the side channel, then the endpoint.
    let mut sock = side_channel(&args)?;
    if !is_server {
        // Checked after connecting, so a refused size also ends the server (it sees EOF).
        check_mode(&iface, mode, args.size)?;
    }
    let mut ep = connect(&mut iface, &mut sock)?;

    if is_server {
        let deadline = Instant::now() + PEER_TIMEOUT;
        while received.borrow().is_none() {
            iface.progress(&mut handlers);
            if let Some((_, e)) = handlers.errors.first() {
                return Err(format!("endpoint error while waiting: {e}"));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no message from the client within {PEER_TIMEOUT:?}"
                ));
            }
        }
        let msg = received.borrow_mut().take().unwrap_or_default();
        let expected = make_message(msg.len());
        let shown: String = String::from_utf8_lossy(&msg[..msg.len().min(64)]).into_owned();
        println!(
            "----- UCT TEST SUCCESS ----\n\n[callback] received {} bytes: \"{}{}\"\n\n---------------------------",
            msg.len(),
            shown,
            if msg.len() > 64 { "..." } else { "" }
        );
        if msg != expected {
            return Err(format!(
                "the {} received bytes do not match what the client sends",
                msg.len()
            ));
        }
        sock.write_all(&[1])
            .map_err(|e| format!("side channel barrier: {e}"))?;
        // Two-way barrier: keep the endpoint until the client has torn its side down (it closes
        // the side channel last), so a transport whose client still completes work towards us
        // (e.g. rc_verbs flush acknowledgements) never waits for a vanished peer.
        let mut rest = [0u8; 1];
        let deadline = Instant::now() + PEER_TIMEOUT;
        sock.set_nonblocking(true)
            .map_err(|e| format!("side channel: {e}"))?;
        loop {
            match sock.read(&mut rest) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    iface.progress(&mut handlers);
                    if Instant::now() > deadline {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    } else {
        let mut msg = make_message(args.size);
        send_message(
            &md,
            &mut iface,
            &mut ep,
            &mut handlers,
            mode,
            &mut msg,
            &completed,
        )?;
        println!("INFO: sent {} bytes with {}", args.size, mode.name());
        // Barrier: the server acknowledges after it checked the message. Keep progressing so
        // transports that need the sender's progress (e.g. tcp) finish the delivery.
        sock.set_nonblocking(true)
            .map_err(|e| format!("side channel: {e}"))?;
        let deadline = Instant::now() + PEER_TIMEOUT;
        let mut ack = [0u8; 1];
        loop {
            match sock.read(&mut ack) {
                Ok(1) => break,
                Ok(_) => {
                    return Err("the server closed the side channel before acknowledging".into())
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    iface.progress(&mut handlers);
                    if Instant::now() > deadline {
                        return Err("no acknowledgement from the server".into());
                    }
                }
                Err(e) => return Err(format!("side channel barrier: {e}")),
            }
        }
    }
    // Endpoint, interface and domain go first; the side channel closes last (the server's
    // barrier waits for that).
    drop(ep);
    drop(iface);
    drop(md);
    drop(sock);
    Ok(())
}

fn main() -> ExitCode {
    ucs::log::init_program(&uct::config_tables());
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    if args.help {
        use clap::CommandFactory;
        let mut cmd = Args::command();
        println!("{}\n{}", cmd.render_help(), available_resources());
        return ExitCode::SUCCESS;
    }
    // The message and its copies (sent, received, expected) must fit in memory.
    let need = (args.size as u64).saturating_mul(2);
    if let Err(e) = ucs::limits::check_alloc(&format!("-s {}", args.size), need) {
        eprintln!("uct_hello_world: {e}");
        return ExitCode::FAILURE;
    }
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uct_hello_world: {e}");
            ExitCode::FAILURE
        }
    }
}
