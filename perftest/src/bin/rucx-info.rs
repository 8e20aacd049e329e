//! `rucx-info`: what rucx sees on this machine, like `ucx_info`.

use clap::Parser;
use std::process::ExitCode;

/// `rucx-info`: version, transports and devices, configuration.
#[derive(Parser, Debug)]
#[command(
    name = "rucx-info",
    version,
    about = "Show rucx's version, devices and configuration"
)]
struct Args {
    /// Version and build features.
    #[arg(short = 'v')]
    show_version: bool,
    /// Every memory domain, transport and device with capabilities, limits and performance.
    #[arg(short = 'd')]
    devices: bool,
    /// Every RUCX_* configuration variable with its value, default and meaning.
    #[arg(short = 'c')]
    config: bool,
    /// Lanes and protocols ucp would pick to reach a peer, and why each other transport was
    /// rejected. ADDR: `local` (a peer process on this host, started for the purpose) or a
    /// worker address in hex.
    #[arg(short = 'p', value_name = "ADDR")]
    peer: Option<String>,
    /// The protocol table ucp uses to reach a peer process on this host (RUCX_PROTO_INFO).
    #[arg(short = 'e')]
    proto_table: bool,
    /// (internal) print this process's worker address in hex, then wait for stdin to close.
    #[arg(long, hide = true)]
    print_address: bool,
}

/// A peer process on this host: `rucx-info --print-address`, alive while the handle lives.
struct PeerProcess(std::process::Child);

impl Drop for PeerProcess {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn local_peer() -> ucs::Result<(PeerProcess, Vec<u8>)> {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().map_err(|e| ucs::Error::io("finding rucx-info", e))?;
    let mut child = Command::new(exe)
        .arg("--print-address")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| ucs::Error::io("starting a peer process", e))?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| ucs::Error::InvalidParam("peer has no stdout".into()))?;
    let peer = PeerProcess(child);
    let mut line = String::new();
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .map_err(|e| ucs::Error::io("reading the peer's address", e))?;
    let bytes = perftest::info::from_hex(&line).map_err(|_| {
        ucs::Error::PeerFailure(format!(
            "the peer process did not give an address ({line:?})"
        ))
    })?;
    Ok((peer, bytes))
}

fn print_address() -> ucs::Result<()> {
    use std::io::{Read, Write};
    let ctx = ucp::Context::new(ucp::ContextParams {
        features: ucp::Features::TAG,
        config: None,
    })?;
    let worker = ucp::Worker::new(&ctx)?;
    println!("{}", perftest::info::to_hex(worker.address()));
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(worker);
    Ok(())
}

fn peer_text(addr: &str, table_only: bool) -> ucs::Result<String> {
    let (_peer, bytes) = if addr == "local" {
        let (p, b) = local_peer()?;
        (Some(p), b)
    } else {
        (None, perftest::info::from_hex(addr)?)
    };
    let wa = ucp::WorkerAddress::decode(&bytes)?;
    perftest::info::lanes_text(&wa, table_only)
}

fn main() -> ExitCode {
    ucs::log::init_program(&ucp::config::config_tables());
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("rucx-info: error: {first} (see rucx-info --help)");
            return ExitCode::from(1);
        }
    };
    if args.print_address {
        return match print_address() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rucx-info: error: {e}");
                ExitCode::from(1)
            }
        };
    }
    let none = !(args.show_version
        || args.devices
        || args.config
        || args.peer.is_some()
        || args.proto_table);
    if args.show_version || none {
        print!("{}", perftest::info::version_text());
    }
    if args.devices {
        print!("{}", perftest::info::devices_text(&uct::query_transports()));
    }
    if args.config {
        // Querying the transports registers their variables (RUCX_TCP_*, RUCX_IB_*, ...).
        let _ = uct::query_transports();
        print!("{}", perftest::info::config_text());
    }
    for (addr, table_only) in [
        (args.peer.as_deref(), false),
        (args.proto_table.then_some("local"), true),
    ] {
        let Some(addr) = addr else { continue };
        match peer_text(addr, table_only) {
            Ok(t) => print!("{t}"),
            Err(e) => {
                eprintln!("rucx-info: error: {}", e.to_string().replace('\n', " "));
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
