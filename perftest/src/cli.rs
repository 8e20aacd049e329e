//! The command line, with ucx_perftest's letters.

use crate::params::{Api, Layout, SendMem, TestId, TestParams, MAX_IOV};
use crate::report::OutputOpts;
use clap::Parser;
use ucs::{Error, Result};

/// Default side-channel port (ucx_perftest's).
pub const DEFAULT_PORT: u16 = 13337;

fn tests_help() -> String {
    let mut s = String::from("Tests:\n");
    for &t in TestId::ALL {
        let api = match t.api() {
            Api::Uct => "uct",
            Api::Ucp => "ucp",
        };
        s.push_str(&format!(
            "  {:>13} - {} {}\n",
            t.name(),
            api,
            t.description()
        ));
    }
    s.push_str(
        "\nServer: perftest [-p PORT]      Client: perftest HOST -t TEST [options]\n\
         One command, both sides on this host: perftest --local -t am_lat -x posix -d memory\n",
    );
    s
}

/// `perftest`: the rucx benchmark, compatible with ucx_perftest.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "perftest",
    version,
    about = "rucx benchmark: same tests, flags and output as ucx_perftest",
    after_help = tests_help(),
    args_override_self = true
)]
pub struct Args {
    /// Server to connect to (client mode); without it, run as a server.
    pub host: Option<String>,
    /// Test to run (see the list below).
    #[arg(short = 't', value_name = "TEST")]
    pub test: Option<String>,
    /// Message size, or a comma list of scatter-gather parts (e.g. 16,48,8192).
    #[arg(short = 's', value_name = "SIZE", default_value = "8")]
    pub size: String,
    /// Measured iterations.
    #[arg(short = 'n', value_name = "ITERS", default_value_t = 1_000_000)]
    pub iters: u64,
    /// Warm-up iterations.
    #[arg(short = 'w', value_name = "ITERS", default_value_t = 10_000)]
    pub warmup: u64,
    /// Data layout / send mode: short, shortiov, bcopy, zcopy (uct); contig, iov (ucp).
    #[arg(short = 'D', value_name = "LAYOUT")]
    pub layout: Option<String>,
    /// Transport for uct tests (posix, sysv, cma, tcp, self).
    #[arg(short = 'x', value_name = "TL")]
    pub transport: Option<String>,
    /// Device for uct tests (memory, lo…).
    #[arg(short = 'd', value_name = "DEV")]
    pub device: Option<String>,
    /// Most operations in flight in bandwidth tests.
    #[arg(short = 'O', value_name = "COUNT", default_value_t = 16)]
    pub outstanding: u32,
    /// Flow-control window of active-message bandwidth tests.
    #[arg(short = 'W', value_name = "COUNT", default_value_t = 127)]
    pub window: u32,
    /// CPU list to pin to (comma separated); with --local: server core, client core.
    #[arg(short = 'c', value_name = "CPULIST")]
    pub cores: Option<String>,
    /// TCP port of the side channel.
    #[arg(short = 'p', value_name = "PORT", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Print only the final numbers.
    #[arg(short = 'f')]
    pub final_only: bool,
    /// Print CSV output.
    #[arg(short = 'v')]
    pub csv: bool,
    /// Use thousands separators in integer columns.
    #[arg(short = 'N')]
    pub thousands: bool,
    /// Percentile rank of the first latency column.
    #[arg(short = 'R', value_name = "RANK", default_value_t = 50.0)]
    pub percentile: f64,
    /// Print the final numbers as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Memory the ucp tag tests send from: map (mem_map, as ucx_perftest's ucp_mem_map) or
    /// heap (ordinary vectors, as an application's buffers).
    #[arg(long, value_name = "MEM", default_value = "map")]
    pub mem: String,
    /// Run server and client on this host as two processes pinned to two cores.
    #[arg(long)]
    pub local: bool,
    /// Loopback: one process talks to itself (needed for the `self` transport).
    #[arg(short = 'l')]
    pub loopback: bool,
    /// (internal) server half of --local: print the listening port on stdout, nothing else.
    #[arg(long, hide = true)]
    pub local_server: bool,
}

/// What to do, parsed and checked.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Wait for a client on `port`.
    Server {
        /// Side-channel port (0: any free port).
        port: u16,
        /// Print the port and nothing else (server half of `--local`).
        local_server: bool,
        /// CPUs to pin to.
        cores: Vec<usize>,
    },
    /// Run a test against a server.
    Client {
        /// Server host.
        host: String,
        /// Server port.
        port: u16,
        /// The test.
        params: TestParams,
        /// Output format.
        output: OutputOpts,
        /// CPUs to pin to.
        cores: Vec<usize>,
    },
    /// Spawn a server, then run as its client.
    Local {
        /// The test.
        params: TestParams,
        /// Output format.
        output: OutputOpts,
        /// Server core, client core.
        cores: Vec<usize>,
    },
    /// One process, endpoint connected to its own interface.
    Loopback {
        /// The test.
        params: TestParams,
        /// Output format.
        output: OutputOpts,
        /// CPUs to pin to.
        cores: Vec<usize>,
    },
}

/// Parses a `-s` value: one size or a comma list (`8k` style suffixes accepted).
pub fn parse_sizes(text: &str) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let v = ucs::config::parse_size(part)
            .map_err(|why| Error::InvalidParam(format!("-s: {why}")))?;
        match v {
            ucs::config::Size::Bytes(b) => out.push(b),
            ucs::config::Size::Inf => {
                return Err(Error::InvalidParam("-s: a size cannot be inf".into()))
            }
        }
    }
    if out.len() > MAX_IOV {
        return Err(Error::InvalidParam(format!(
            "-s: at most {MAX_IOV} parts, got {}",
            out.len()
        )));
    }
    Ok(out)
}

/// Parses a CPU list (`0,1` or `2`).
pub fn parse_cores(text: &str) -> Result<Vec<usize>> {
    text.split(',')
        .map(|c| {
            c.trim()
                .parse()
                .map_err(|_| Error::InvalidParam(format!("-c: '{c}' is not a CPU number")))
        })
        .collect()
}

impl Args {
    /// Checks the arguments and decides the mode.
    pub fn into_mode(self) -> Result<Mode> {
        let cores = match &self.cores {
            Some(c) => parse_cores(c)?,
            None => Vec::new(),
        };
        let output = OutputOpts {
            final_only: self.final_only,
            csv: self.csv,
            json: self.json,
            thousands: self.thousands,
            percentile: self.percentile,
            quiet: false,
        };
        if !(0.0..=100.0).contains(&self.percentile) || self.percentile == 0.0 {
            return Err(Error::InvalidParam(format!(
                "-R {} is not a percentile rank in (0, 100]",
                self.percentile
            )));
        }
        let wants_test = self.host.is_some() || self.local || self.loopback;
        let Some(test_name) = self.test.clone() else {
            if wants_test {
                return Err(Error::InvalidParam(
                    "no test given: add -t TEST (for example -t am_lat); perftest --help lists them"
                        .into(),
                ));
            }
            return Ok(Mode::Server {
                port: self.port,
                local_server: self.local_server,
                cores,
            });
        };
        if !wants_test {
            return Err(Error::InvalidParam(format!(
                "-t {test_name} needs a server: give its host (perftest HOST -t {test_name}), or use --local to run both sides here"
            )));
        }
        let test = TestId::from_name(&test_name).ok_or_else(|| {
            let names: Vec<&str> = TestId::ALL.iter().map(|t| t.name()).collect();
            Error::InvalidParam(format!(
                "unknown test '{test_name}'; tests are: {}",
                names.join(", ")
            ))
        })?;
        let layout = match &self.layout {
            Some(l) => Layout::from_name(l).ok_or_else(|| {
                Error::InvalidParam(format!(
                    "unknown data layout '-D {l}'; layouts are: short, shortiov, bcopy, zcopy, contig, iov"
                ))
            })?,
            None => match test.api() {
                Api::Uct => Layout::Short,
                Api::Ucp => Layout::Contig,
            },
        };
        let sizes = parse_sizes(&self.size)?;
        if test.api() == Api::Ucp && (self.transport.is_some() || self.device.is_some()) {
            return Err(Error::InvalidParam(format!(
                "{test} is a ucp test: it takes no -x/-d; choose transports with RUCX_TLS"
            )));
        }
        let mem = SendMem::from_name(&self.mem).ok_or_else(|| {
            Error::InvalidParam(format!("unknown '--mem {}'; accepted: map, heap", self.mem))
        })?;
        let params = TestParams {
            test,
            layout,
            sizes,
            iterations: self.iters,
            warmup: self.warmup,
            outstanding: self.outstanding,
            window: self.window,
            transport: self.transport.clone().unwrap_or_default(),
            device: self.device.clone().unwrap_or_default(),
            mem,
        };
        params.validate()?;
        if self.loopback {
            if self.host.is_some() || self.local {
                return Err(Error::InvalidParam(
                    "-l runs in one process: give no host and no --local".into(),
                ));
            }
            return Ok(Mode::Loopback {
                params,
                output,
                cores,
            });
        }
        if self.local {
            if self.host.is_some() {
                return Err(Error::InvalidParam(
                    "--local starts its own server: give no host".into(),
                ));
            }
            return Ok(Mode::Local {
                params,
                output,
                cores,
            });
        }
        Ok(Mode::Client {
            host: self.host.clone().unwrap_or_default(),
            port: self.port,
            params,
            output,
            cores,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(args: &[&str]) -> Result<Mode> {
        let mut v = vec!["perftest"];
        v.extend_from_slice(args);
        Args::try_parse_from(v)
            .map_err(|e| Error::InvalidParam(e.to_string()))?
            .into_mode()
    }

    #[test]
    fn server_and_client_modes() {
        assert!(matches!(
            mode(&[]).unwrap(),
            Mode::Server { port: 13337, .. }
        ));
        assert!(matches!(
            mode(&["-p", "2000"]).unwrap(),
            Mode::Server { port: 2000, .. }
        ));
        match mode(&[
            "host1", "-t", "am_lat", "-x", "posix", "-d", "memory", "-s", "16,48",
        ])
        .unwrap()
        {
            Mode::Client { host, params, .. } => {
                assert_eq!(host, "host1");
                assert_eq!(params.sizes, vec![16, 48]);
                assert_eq!(params.size(), 64);
                assert_eq!(params.layout, Layout::Short);
            }
            m => panic!("{m:?}"),
        }
        assert!(matches!(
            mode(&["--local", "-t", "tag_lat"]).unwrap(),
            Mode::Local { .. }
        ));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(mode(&["h", "-t", "nope"])
            .unwrap_err()
            .to_string()
            .contains("unknown test"));
        assert!(mode(&["-t", "am_lat", "-x", "posix", "-d", "memory"]).is_err());
        assert!(
            mode(&["h", "-t", "am_lat"]).is_err(),
            "uct test without -x/-d"
        );
        assert!(mode(&["h", "-t", "tag_lat", "-x", "posix"]).is_err());
        assert!(
            mode(&["h", "-t", "am_lat", "-x", "posix", "-d", "memory", "-D", "weird"]).is_err()
        );
        assert!(mode(&["h", "-t", "am_lat", "-x", "posix", "-d", "memory", "-s", "8q"]).is_err());
        assert!(mode(&["h", "-t", "fadd", "-x", "posix", "-d", "memory", "-s", "16"]).is_err());
        assert!(parse_cores("0,x").is_err());
        assert_eq!(parse_cores("0,1").unwrap(), vec![0, 1]);
        assert_eq!(parse_sizes("8k,1").unwrap(), vec![8192, 1]);
    }
}
