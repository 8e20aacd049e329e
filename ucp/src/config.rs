//! ucp configuration: the `RUCX_*` variables this layer reads, as a typed struct.

use std::time::Duration;
use ucs::config::{parse_size, ConfigVar, Size};
use ucs::{Error, Result};

/// `RUCX_TLS`: transports to use.
pub static TLS: ConfigVar = ConfigVar {
    name: "TLS",
    default: "all",
    doc: "Comma-separated transports to use (self, posix, sysv, cma, tcp, rc_verbs; aliases shm, sm = posix,sysv,cma), or all.",
};
/// `RUCX_NET_DEVICES`: network devices to use.
pub static NET_DEVICES: ConfigVar = ConfigVar {
    name: "NET_DEVICES",
    default: "all",
    doc: "Comma-separated network devices to use (lo, eth0…), or all. Shared-memory devices are not filtered.",
};
/// `RUCX_RNDV_THRESH`: message size from which rendezvous is used.
pub static RNDV_THRESH: ConfigVar = ConfigVar {
    name: "RNDV_THRESH",
    default: "auto",
    doc: "Tag message size from which rendezvous is used: a size (8k, 1m, inf) or auto (from the lanes' performance models).",
};
/// `RUCX_ZCOPY_THRESH`: message size from which eager sends of caller-owned vectors go zero-copy.
pub static ZCOPY_THRESH: ConfigVar = ConfigVar {
    name: "ZCOPY_THRESH",
    default: "auto",
    doc: "Eager size from which tag_send_vec sends straight from the caller's vector (am_zcopy) when the AM lane can: a size, inf, or auto (above one bcopy fragment).",
};
/// `RUCX_RNDV_SCHEME`: force a rendezvous data path.
pub static RNDV_SCHEME: ConfigVar = ConfigVar {
    name: "RNDV_SCHEME",
    default: "auto",
    doc: "Rendezvous data path: get_zcopy, put_zcopy, am (pipeline over active messages) or auto (the best the lanes offer).",
};
/// `RUCX_RNDV_AM_MAX`: largest rendezvous moved by the AM pipeline when an RMA lane exists.
pub static RNDV_AM_MAX: ConfigVar = ConfigVar {
    name: "RNDV_AM_MAX",
    default: "auto",
    doc: "With RUCX_RNDV_SCHEME=auto, rendezvous messages up to this size stream through the AM lane (pipeline) instead of get/put_zcopy: a size, 0 (never), inf, or auto (from the lanes' performance models).",
};
/// `RUCX_RNDV_FRAG_SIZE`: bytes a shared-memory rendezvous reads between two progress steps.
pub static RNDV_FRAG_SIZE: ConfigVar = ConfigVar {
    name: "RNDV_FRAG_SIZE",
    default: "auto",
    doc: "Bytes a rendezvous receiver reads from a sender's memory on a shared-memory device (cma, or a mapped segment) in one progress step: a size of at least 4k, or auto.",
};
/// `RUCX_PROTO_INFO`: print the protocol table of every new endpoint configuration.
pub static PROTO_INFO: ConfigVar = ConfigVar {
    name: "PROTO_INFO",
    default: "n",
    doc: "Print the protocol table chosen for each endpoint (size ranges -> protocol -> lanes) to stderr.",
};
/// `RUCX_KEEPALIVE_INTERVAL`: how often each endpoint's transports check their peer.
pub static KEEPALIVE_INTERVAL: ConfigVar = ConfigVar {
    name: "KEEPALIVE_INTERVAL",
    default: "1s",
    doc: "How often each endpoint's transports check that the peer is reachable without \
          needing the peer's application (shared memory: the peer process; tcp: \
          acknowledgements from the peer's kernel; rc_verbs: a write the peer's adapter \
          acknowledges): a time, or inf to disable the checks.",
};
/// `RUCX_KEEPALIVE_TIMEOUT`: application-level silence after which a peer is declared dead
/// (off by default).
pub static KEEPALIVE_TIMEOUT: ConfigVar = ConfigVar {
    name: "KEEPALIVE_TIMEOUT",
    default: "inf",
    doc: "Off (inf) by default. A time: endpoints also send keepalive messages every \
          interval, and a peer whose worker sends nothing for this long fails its endpoints \
          with a timeout - including a live peer that computes without calling progress for \
          that long, so set it only where every peer progresses regularly.",
};
/// `RUCX_AM_LANE_SWITCH`: move the AM lane to rc_verbs once it is connected.
pub static AM_LANE_SWITCH: ConfigVar = ConfigVar {
    name: "AM_LANE_SWITCH",
    default: "y",
    doc: "Once a connect-to-endpoint lane (rc_verbs) to a peer is connected, move the active messages (eager, rendezvous control, AM API) from the wire-up lane (tcp) to it (y/n).",
};

/// The transports the `shm` alias stands for.
pub const SHM_TLS: [&str; 3] = ["posix", "sysv", "cma"];

/// `RUCX_TM_ENABLE`: use transport tag offload.
pub static TM_ENABLE: ConfigVar = ConfigVar {
    name: "TM_ENABLE",
    default: "y",
    doc: "Use transport tag matching (tcp, posix, sysv) for tag messages: y or n.",
};

/// Every ucp variable, for the configuration printer.
pub static ALL_VARS: &[&ConfigVar] = &[
    &TLS,
    &NET_DEVICES,
    &RNDV_THRESH,
    &ZCOPY_THRESH,
    &RNDV_SCHEME,
    &RNDV_AM_MAX,
    &RNDV_FRAG_SIZE,
    &PROTO_INFO,
    &KEEPALIVE_INTERVAL,
    &KEEPALIVE_TIMEOUT,
    &AM_LANE_SWITCH,
    &TM_ENABLE,
];

/// The `RUCX_*` variable tables of ucp and the transports under it, for
/// [`ucs::log::init_program`] (every binary calls it with these) and the configuration printer.
pub fn config_tables() -> Vec<&'static [ConfigVar]> {
    static UCP_TABLE: std::sync::OnceLock<Vec<ConfigVar>> = std::sync::OnceLock::new();
    let ucp = UCP_TABLE.get_or_init(|| ALL_VARS.iter().map(|v| **v).collect());
    let mut out = vec![ucp.as_slice()];
    out.extend(uct::config_tables());
    out
}

/// ucp's configuration, read from the environment by [`UcpConfig::from_env`] or built by hand.
#[derive(Debug, Clone, PartialEq)]
pub struct UcpConfig {
    /// Transports allowed, as written (aliases `shm`/`sm` expand when resources are filtered;
    /// empty: all).
    pub tls: Vec<String>,
    /// Network devices allowed (empty: all).
    pub net_devices: Vec<String>,
    /// Rendezvous threshold override (`None`: from the performance models).
    pub rndv_thresh: Option<usize>,
    /// Eager zero-copy threshold override (`None`: above one bcopy fragment).
    pub zcopy_thresh: Option<usize>,
    /// Rendezvous scheme requested.
    pub rndv_scheme: RndvSchemeCfg,
    /// Largest rendezvous the AM pipeline moves under the auto scheme (`None`: from the
    /// performance models).
    pub rndv_am_max: Option<usize>,
    /// Bytes of one shared-memory rendezvous read step (`None`: the built-in size).
    pub rndv_frag_size: Option<usize>,
    /// Print each endpoint configuration's protocol table.
    pub proto_info: bool,
    /// Period of the endpoints' transport checks (`None`: no checks).
    pub keepalive_interval: Option<Duration>,
    /// Application-level silence after which a peer is declared dead; `Duration::MAX` (the
    /// default) turns it off, and keepalive messages with it.
    pub keepalive_timeout: Duration,
    /// Move the AM lane to a connected connect-to-endpoint lane (rc_verbs).
    pub am_lane_switch: bool,
    /// Let the self transport connect two workers of one thread (true), or only a worker to
    /// itself, as UCX does (false: two workers of one process then go over shared memory or
    /// the network, and each may be progressed from its own thread).
    pub self_across_workers: bool,
}

impl Default for UcpConfig {
    fn default() -> Self {
        UcpConfig {
            tls: Vec::new(),
            net_devices: Vec::new(),
            rndv_thresh: None,
            zcopy_thresh: None,
            rndv_scheme: RndvSchemeCfg::Auto,
            rndv_am_max: None,
            rndv_frag_size: None,
            proto_info: false,
            keepalive_interval: Some(Duration::from_secs(1)),
            keepalive_timeout: Duration::MAX,
            am_lane_switch: true,
            self_across_workers: true,
        }
    }
}

/// The `RUCX_RNDV_SCHEME` choice. A forced scheme the lanes cannot do falls back to the AM
/// pipeline, which always works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RndvSchemeCfg {
    /// The best the lanes offer (get, then put, then AM).
    Auto,
    /// Receiver reads with get_zcopy.
    Get,
    /// Sender writes with put_zcopy after an RTR.
    Put,
    /// Pipeline over active messages.
    Am,
}

impl RndvSchemeCfg {
    fn parse(var: &ConfigVar) -> Result<Self> {
        let v = var.raw();
        match v.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "get_zcopy" | "get" => Ok(Self::Get),
            "put_zcopy" | "put" => Ok(Self::Put),
            "am" => Ok(Self::Am),
            _ => Err(Error::Config(format!(
                "{}={v:?}: accepted: get_zcopy, put_zcopy, am, auto",
                var.env_name()
            ))),
        }
    }
}

fn size_or_auto(var: &ConfigVar) -> Result<Option<usize>> {
    let v = var.raw();
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    match parse_size(&v) {
        Ok(Size::Inf) => Ok(Some(usize::MAX)),
        Ok(Size::Bytes(b)) => Ok(Some(usize::try_from(b).unwrap_or(usize::MAX))),
        Err(why) => Err(Error::Config(format!(
            "{}={v:?}: {why} (or auto)",
            var.env_name()
        ))),
    }
}

/// Smallest `RUCX_RNDV_FRAG_SIZE`: a page.
pub const RNDV_FRAG_MIN: usize = 4096;

fn frag_size(var: &ConfigVar) -> Result<Option<usize>> {
    let v = size_or_auto(var)?;
    if v.is_some_and(|f| f < RNDV_FRAG_MIN) {
        return Err(Error::Config(format!(
            "{}={:?}: a fragment is at least {RNDV_FRAG_MIN} bytes (or auto, or inf)",
            var.env_name(),
            var.raw()
        )));
    }
    Ok(v)
}

/// Expands transport aliases (`shm`, `sm`, `all`) in a `RUCX_TLS` list.
pub fn expand_tls(list: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for t in list {
        match t.as_str() {
            "shm" | "sm" => out.extend(SHM_TLS.map(String::from)),
            "all" => return Vec::new(),
            other => out.push(other.to_owned()),
        }
    }
    out
}

impl UcpConfig {
    /// Reads every variable from the environment; a bad value gives [`Error::Config`] naming it.
    pub fn from_env() -> Result<Self> {
        let interval = KEEPALIVE_INTERVAL.duration_or_inf()?;
        if interval == Some(Duration::ZERO) {
            return Err(Error::Config(
                "RUCX_KEEPALIVE_INTERVAL must be positive (or inf to disable)".into(),
            ));
        }
        Ok(UcpConfig {
            tls: TLS.list(),
            net_devices: NET_DEVICES.list(),
            rndv_thresh: size_or_auto(&RNDV_THRESH)?,
            zcopy_thresh: size_or_auto(&ZCOPY_THRESH)?,
            rndv_scheme: RndvSchemeCfg::parse(&RNDV_SCHEME)?,
            rndv_am_max: size_or_auto(&RNDV_AM_MAX)?,
            rndv_frag_size: frag_size(&RNDV_FRAG_SIZE)?,
            proto_info: PROTO_INFO.bool()?,
            keepalive_interval: interval,
            keepalive_timeout: KEEPALIVE_TIMEOUT
                .duration_or_inf()?
                .unwrap_or(Duration::MAX),
            am_lane_switch: AM_LANE_SWITCH.bool()?,
            self_across_workers: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_expand() {
        let l = expand_tls(&["shm".into(), "tcp".into()]);
        assert_eq!(l, vec!["posix", "sysv", "cma", "tcp"]);
        assert!(expand_tls(&["all".into()]).is_empty());
    }

    #[test]
    fn env_overrides_and_errors() {
        // One test touches these variables, so parallel tests do not race on them.
        std::env::set_var("RUCX_RNDV_THRESH", "8k");
        std::env::set_var("RUCX_TLS", "self,tcp");
        std::env::set_var("RUCX_KEEPALIVE_INTERVAL", "inf");
        std::env::set_var("RUCX_RNDV_SCHEME", "put_zcopy");
        std::env::set_var("RUCX_ZCOPY_THRESH", "32k");
        std::env::set_var("RUCX_RNDV_FRAG_SIZE", "256k");
        let c = UcpConfig::from_env().unwrap();
        assert_eq!(c.zcopy_thresh, Some(32 << 10));
        assert_eq!(c.rndv_frag_size, Some(256 << 10));
        std::env::remove_var("RUCX_ZCOPY_THRESH");
        std::env::set_var("RUCX_RNDV_FRAG_SIZE", "100");
        let e = UcpConfig::from_env().unwrap_err().to_string();
        assert!(
            e.contains("RUCX_RNDV_FRAG_SIZE") && e.contains("4096"),
            "{e}"
        );
        std::env::remove_var("RUCX_RNDV_FRAG_SIZE");
        assert_eq!(c.rndv_scheme, RndvSchemeCfg::Put);
        std::env::set_var("RUCX_RNDV_SCHEME", "teleport");
        assert!(UcpConfig::from_env().is_err());
        std::env::remove_var("RUCX_RNDV_SCHEME");
        assert_eq!(c.rndv_thresh, Some(8192));
        assert_eq!(c.tls, vec!["self", "tcp"]);
        assert_eq!(c.keepalive_interval, None);
        std::env::set_var("RUCX_RNDV_THRESH", "lots");
        let e = UcpConfig::from_env().unwrap_err().to_string();
        assert!(e.contains("RUCX_RNDV_THRESH") && e.contains("lots"), "{e}");
        std::env::remove_var("RUCX_RNDV_THRESH");
        std::env::remove_var("RUCX_TLS");
        std::env::remove_var("RUCX_KEEPALIVE_INTERVAL");
        let c = UcpConfig::from_env().unwrap();
        assert_eq!(c.rndv_thresh, None);
        assert!(c.tls.is_empty());
        // Application-level keepalive is off unless asked for: a busy peer is not dead.
        assert_eq!(c.keepalive_timeout, Duration::MAX);
        assert_eq!(c.keepalive_interval, Some(Duration::from_secs(1)));
        std::env::set_var("RUCX_KEEPALIVE_TIMEOUT", "45s");
        let c = UcpConfig::from_env().unwrap();
        assert_eq!(c.keepalive_timeout, Duration::from_secs(45));
        std::env::set_var("RUCX_KEEPALIVE_TIMEOUT", "soon");
        let e = UcpConfig::from_env().unwrap_err().to_string();
        assert!(e.contains("RUCX_KEEPALIVE_TIMEOUT"), "{e}");
        std::env::remove_var("RUCX_KEEPALIVE_TIMEOUT");
    }
}
