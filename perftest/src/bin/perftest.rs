//! `perftest`: ucx_perftest-compatible benchmark. Errors are one line on stderr and exit code 1.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    ucs::log::init_program(&ucp::config::config_tables());
    let args = match perftest::Args::try_parse() {
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
            eprintln!("perftest: error: {first} (see perftest --help)");
            return ExitCode::from(1);
        }
    };
    match args.into_mode().and_then(perftest::driver::run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let text = e.to_string().replace('\n', " ");
            eprintln!("perftest: error: {text}");
            ExitCode::from(1)
        }
    }
}
