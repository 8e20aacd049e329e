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
}

fn main() -> ExitCode {
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
    let none = !(args.show_version || args.devices || args.config);
    if args.show_version || none {
        print!("{}", perftest::info::version_text());
    }
    if args.devices {
        print!("{}", perftest::info::devices_text(&uct::query_transports()));
    }
    if args.config {
        print!("{}", perftest::info::config_text());
    }
    ExitCode::SUCCESS
}
