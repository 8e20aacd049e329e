//! `ucp_config_t`: rucx's [`UcpConfig`] read from `RUCX_*` and from UCX's own variables.
//!
//! For each setting the first of these that is set wins: `RUCX_<NAME>`, then
//! `<env_prefix>_UCX_<NAME>` (when the client passes a prefix), then `UCX_<NAME>`. UCX's
//! values are translated to rucx's meanings:
//!
//! | UCX variable | rucx setting |
//! |---|---|
//! | `UCX_TLS` | `RUCX_TLS`: `all`, `^a,b` (every rucx transport but those), `shm`/`sm`, `self`, `tcp`, `posix`, `sysv`, `cma`, `mm` (posix, sysv), `rc` (rc_verbs with ud_verbs, as UCX's alias brings ud), `rc_verbs`/`rc_mlx5`/`rc_x`/`dc*` (rc_verbs), `ud`/`ud_verbs`/`ud_mlx5`/`ud_x` (ud_verbs), `ib` (rc_verbs, ud_verbs); GPU transports (`cuda*`, `rocm*`, `gdr_copy`, `ze*`) and others rucx lacks are dropped with a warning |
//! | `UCX_NET_DEVICES` | `RUCX_NET_DEVICES` (`all` or a list) |
//! | `UCX_RNDV_THRESH`, `UCX_ZCOPY_THRESH` | same names (sizes, `inf`, `auto`) |
//! | `UCX_RNDV_SCHEME` | same (`get_zcopy`, `put_zcopy`, `auto`) |
//! | `UCX_KEEPALIVE_INTERVAL` | same (a time, or `inf`) |
//!
//! `ucp_config_modify` sets the same names (`TLS`, `NET_DEVICES`, …) on a read configuration.
//! Every other variable of UCX's tables ([`crate::config_vars`]) is read, checked, kept and
//! printed by `ucp_config_print`; a name UCX does not know either is kept as a transport
//! setting, as UCX keeps it.

use crate::ffi::*;
use crate::guard::{ffi, refuse};
use std::ffi::{c_char, CStr};
use std::time::Duration;
use ucp::config::RndvSchemeCfg;
use ucp::UcpConfig;
use ucs::config::{parse_duration, parse_list, parse_size, Size};

/// The settings read from UCX's variables, by rucx name.
pub const MAPPED: [&str; 6] = [
    "TLS",
    "NET_DEVICES",
    "RNDV_THRESH",
    "ZCOPY_THRESH",
    "RNDV_SCHEME",
    "KEEPALIVE_INTERVAL",
];

/// A configuration read by `ucp_config_read`.
pub struct Config {
    /// What `ucp_init` uses.
    pub ucp: UcpConfig,
    /// Variables of UCX's tables set in the environment or by `ucp_config_modify`, by name.
    pub values: std::collections::BTreeMap<String, String>,
    /// Other names `ucp_config_modify` was given (transport settings in UCX).
    pub cached: Vec<(String, String)>,
}

/// The UCX variables of [`crate::config_vars`] set in the environment (`<prefix>_UCX_<NAME>`,
/// then `UCX_<NAME>`), checked; a bad value of a setting rucx does not use is warned about
/// and left out.
pub fn read_values(prefix: Option<&str>) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let vars = crate::config_vars::UCP_VARS
        .iter()
        .chain(crate::config_vars::UCS_VARS);
    for var in vars {
        let prefixed = prefix
            .filter(|p| !p.is_empty())
            .map(|p| format!("{p}_UCX_{}", var.name));
        let found = prefixed
            .and_then(|n| std::env::var(&n).ok().map(|v| (n, v)))
            .or_else(|| {
                let n = format!("UCX_{}", var.name);
                std::env::var(&n).ok().map(|v| (n, v))
            });
        if let Some((env, value)) = found {
            match crate::config_vars::check(var, &value) {
                Ok(()) => {
                    out.insert(var.name.to_string(), value);
                }
                Err(why) => tracing::warn!("{env}={value:?} is not valid ({why}); ignored"),
            }
        }
    }
    out
}

/// Translates a `UCX_TLS` value into a `RUCX_TLS` list (empty: all).
pub fn map_tls(value: &str) -> Result<Vec<String>, String> {
    let v = value.trim();
    let (negate, list) = match v.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let mut out: Vec<String> = Vec::new();
    let mut push = |s: &str| {
        if !out.iter().any(|x| x == s) {
            out.push(s.to_owned());
        }
    };
    for item in parse_list(list) {
        let t = item.trim_start_matches('\\').to_ascii_lowercase();
        match t.as_str() {
            "all" if !negate => return Ok(Vec::new()),
            "shm" | "sm" => ucp::config::SHM_TLS.iter().for_each(|s| push(s)),
            "mm" => ["posix", "sysv"].iter().for_each(|s| push(s)),
            "self" | "tcp" | "posix" | "sysv" | "cma" | "rc_verbs" | "ud_verbs" => push(&t),
            "ib" | "rc" => ["rc_verbs", "ud_verbs"].iter().for_each(|s| push(s)),
            x if x.starts_with("ud") => push("ud_verbs"),
            x if x.starts_with("rc") || x.starts_with("dc") => push("rc_verbs"),
            x if x.starts_with("cuda")
                || x.starts_with("rocm")
                || x.starts_with("ze")
                || x == "gdr_copy" =>
            {
                tracing::debug!(
                    "UCX_TLS: {x} moves GPU memory, which rucx does not handle; ignored"
                )
            }
            x => tracing::warn!("UCX_TLS: rucx has no transport '{x}'; ignored"),
        }
    }
    if negate {
        let keep: Vec<String> = uct::TRANSPORT_NAMES
            .iter()
            .filter(|t| !out.iter().any(|x| x == *t))
            .map(|t| t.to_string())
            .collect();
        if keep.is_empty() {
            return Err(format!("'{value}' leaves no transport"));
        }
        return Ok(keep);
    }
    if out.is_empty() {
        return Err(format!("'{value}' names no transport rucx has"));
    }
    Ok(out)
}

fn size_or_auto(v: &str) -> Result<Option<usize>, String> {
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    match parse_size(v)? {
        Size::Inf => Ok(Some(usize::MAX)),
        Size::Bytes(b) => Ok(Some(usize::try_from(b).unwrap_or(usize::MAX))),
    }
}

/// Applies one setting by rucx name (`TLS`, …) with a UCX-syntax value.
pub fn apply(cfg: &mut UcpConfig, name: &str, value: &str) -> Result<(), String> {
    match name {
        "TLS" => cfg.tls = map_tls(value)?,
        "NET_DEVICES" => {
            cfg.net_devices = if value.trim().eq_ignore_ascii_case("all") {
                Vec::new()
            } else {
                parse_list(value)
            }
        }
        "RNDV_THRESH" => cfg.rndv_thresh = size_or_auto(value)?,
        "ZCOPY_THRESH" => cfg.zcopy_thresh = size_or_auto(value)?,
        "RNDV_SCHEME" => {
            cfg.rndv_scheme = match value.trim().to_ascii_lowercase().as_str() {
                "auto" => RndvSchemeCfg::Auto,
                "get_zcopy" => RndvSchemeCfg::Get,
                "put_zcopy" => RndvSchemeCfg::Put,
                "am" => RndvSchemeCfg::Am,
                _ => {
                    return Err(format!(
                        "'{value}' (accepted: get_zcopy, put_zcopy, am, auto)"
                    ))
                }
            }
        }
        "KEEPALIVE_INTERVAL" => {
            cfg.keepalive_interval = if value.trim().eq_ignore_ascii_case("inf") {
                None
            } else {
                let d = parse_duration(value)?;
                if d == Duration::ZERO {
                    return Err("must be positive (or inf)".into());
                }
                Some(d)
            }
        }
        _ => return Err(format!("rucx has no setting {name}")),
    }
    Ok(())
}

/// Reads the configuration: `RUCX_*` first, then `<prefix>_UCX_*`, then `UCX_*`.
pub fn read(prefix: Option<&str>) -> Result<UcpConfig, String> {
    let mut cfg = UcpConfig::from_env().map_err(|e| e.to_string())?;
    // As in UCX, self is loopback inside one worker: a C client may progress each worker from
    // its own thread, which the self transport's per-thread state does not allow.
    cfg.self_across_workers = false;
    for name in MAPPED {
        if std::env::var_os(format!("RUCX_{name}")).is_some() {
            continue;
        }
        let prefixed = prefix
            .filter(|p| !p.is_empty())
            .map(|p| format!("{p}_UCX_{name}"));
        let found = prefixed
            .and_then(|n| std::env::var(&n).ok().map(|v| (n, v)))
            .or_else(|| {
                let n = format!("UCX_{name}");
                std::env::var(&n).ok().map(|v| (n, v))
            });
        if let Some((var, value)) = found {
            apply(&mut cfg, name, &value).map_err(|why| format!("{var}={value:?}: {why}"))?;
        }
    }
    Ok(cfg)
}

/// `ucs_status_t ucp_config_read(const char *env_prefix, const char *filename,
/// ucp_config_t **config_p)`. `filename` is ignored, as UCX 1.13 does.
///
/// # Safety
/// `env_prefix` NULL or a C string; `config_p` a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_read(
    env_prefix: *const c_char,
    filename: *const c_char,
    config_p: *mut *mut Config,
) -> Status {
    const NAME: &str = "ucp_config_read";
    ffi(NAME, UCS_ERR_NO_MEMORY, || {
        if config_p.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "config_p is NULL");
        }
        if !filename.is_null() {
            // UCX 1.13 does not read it either.
            tracing::debug!("{NAME}: ignoring the configuration file name");
        }
        let prefix = if env_prefix.is_null() {
            None
        } else {
            // SAFETY: the caller passes a C string.
            Some(
                unsafe { CStr::from_ptr(env_prefix) }
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        match read(prefix.as_deref()) {
            Ok(ucp) => {
                let values = read_values(prefix.as_deref());
                let config = Config {
                    ucp,
                    values,
                    cached: Vec::new(),
                };
                // SAFETY: checked non-null above.
                unsafe { *config_p = Box::into_raw(Box::new(config)) };
                UCS_OK
            }
            Err(why) => refuse(NAME, UCS_ERR_INVALID_PARAM, why),
        }
    })
}

/// `void ucp_config_release(ucp_config_t *config)`.
///
/// # Safety
/// `config` from `ucp_config_read`, released once (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn ucp_config_release(config: *mut Config) {
    ffi("ucp_config_release", (), || {
        if !config.is_null() {
            // SAFETY: allocated by ucp_config_read.
            drop(unsafe { Box::from_raw(config) });
        }
    })
}

/// `ucs_status_t ucp_config_modify(ucp_config_t *config, const char *name, const char *value)`:
/// sets a variable (a `UCX_` prefix is accepted) with a UCX-syntax value: one of the mapped
/// settings (`TLS`, `NET_DEVICES`, `RNDV_THRESH`, `ZCOPY_THRESH`, `RNDV_SCHEME`,
/// `KEEPALIVE_INTERVAL`) changes what rucx does; another variable of UCX's tables
/// (`HANDLE_ERRORS`, `LOG_LEVEL`, `CM_USE_ALL_DEVICES`, …) is checked and kept; any other name
/// is kept as a transport setting (`CM_REUSEADDR`, `TCP_…`), as UCX does. A bad value gives
/// `UCS_ERR_INVALID_PARAM`.
///
/// # Safety
/// Valid pointers from the caller.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_modify(
    config: *mut Config,
    name: *const c_char,
    value: *const c_char,
) -> Status {
    const NAME: &str = "ucp_config_modify";
    ffi(NAME, UCS_ERR_INVALID_PARAM, || {
        if config.is_null() || name.is_null() || value.is_null() {
            return refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
        }
        // SAFETY: C strings from the caller.
        let (n, v) = unsafe {
            (
                CStr::from_ptr(name).to_string_lossy().into_owned(),
                CStr::from_ptr(value).to_string_lossy().into_owned(),
            )
        };
        let n = n.strip_prefix("UCX_").unwrap_or(&n).to_ascii_uppercase();
        // SAFETY: a live configuration.
        let c = unsafe { &mut *config };
        if MAPPED.contains(&n.as_str()) {
            if let Err(why) = apply(&mut c.ucp, &n, &v) {
                return refuse(NAME, UCS_ERR_INVALID_PARAM, format!("{n}={v:?}: {why}"));
            }
        } else if let Some(var) = crate::config_vars::find(&n) {
            if let Err(why) = crate::config_vars::check(var, &v) {
                return refuse(NAME, UCS_ERR_INVALID_PARAM, format!("{n}={v:?}: {why}"));
            }
        } else {
            // As UCX: a name of no table is kept for the transports.
            c.cached.retain(|(k, _)| *k != n);
            c.cached.push((n, v));
            return UCS_OK;
        }
        c.values.insert(n, v);
        UCS_OK
    })
}

/// `ucs_config_print_flags_t` bits.
const PRINT_CONFIG: u32 = 1;
const PRINT_HEADER: u32 = 2;
const PRINT_DOC: u32 = 4;
const PRINT_HIDDEN: u32 = 8;

/// The text `ucp_config_print` writes.
pub fn print_text(c: &Config, title: &str, flags: u32) -> String {
    let mut out = String::new();
    if flags & PRINT_HEADER != 0 {
        out += &format!("#\n# {title}\n#\n\n");
    }
    if flags & (PRINT_CONFIG | PRINT_DOC | PRINT_HIDDEN) != 0 {
        let vars = crate::config_vars::UCP_VARS
            .iter()
            .chain(crate::config_vars::UCS_VARS);
        for var in vars {
            if flags & PRINT_DOC != 0 {
                out += &format!("#\n# {}\n#\n", var.doc);
            }
            let value = c.values.get(var.name).map_or(var.default, String::as_str);
            out += &format!("UCX_{}={value}\n", var.name);
            if flags & PRINT_DOC != 0 {
                out += "\n";
            }
        }
        if !c.cached.is_empty() {
            out += "\n#\n# Cached UCT settings\n#\n";
            for (k, v) in &c.cached {
                out += &format!("UCX_{k}={v}\n");
            }
        }
    }
    out
}

/// `void ucp_config_print(const ucp_config_t *config, FILE *stream, const char *title,
/// ucs_config_print_flags_t print_flags)`: every variable with its value (`UCX_NAME=value`),
/// with `UCS_CONFIG_PRINT_HEADER` a title block, with `UCS_CONFIG_PRINT_DOC` its meaning.
///
/// # Safety
/// A configuration from `ucp_config_read`, an open `FILE *`, `title` NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_print(
    config: *const Config,
    stream: *mut libc::FILE,
    title: *const c_char,
    print_flags: u32,
) {
    const NAME: &str = "ucp_config_print";
    ffi(NAME, (), || {
        if config.is_null() || stream.is_null() {
            refuse(NAME, UCS_ERR_INVALID_PARAM, "NULL argument");
            return;
        }
        let title = if title.is_null() {
            "UCP configuration".to_string()
        } else {
            // SAFETY: the caller's C string.
            unsafe { CStr::from_ptr(title) }
                .to_string_lossy()
                .into_owned()
        };
        // SAFETY: a live configuration.
        let text = print_text(unsafe { &*config }, &title, print_flags);
        // SAFETY: the caller's open stream (checked non-null).
        unsafe { crate::ctext::write_to(stream, &text) };
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucx_tls_values() {
        assert_eq!(
            map_tls("shm,self").unwrap(),
            ["posix", "sysv", "cma", "self"]
        );
        assert_eq!(map_tls("tcp").unwrap(), ["tcp"]);
        assert!(map_tls("all").unwrap().is_empty());
        assert_eq!(
            map_tls("rc_x,ud_x,sm").unwrap(),
            ["rc_verbs", "ud_verbs", "posix", "sysv", "cma"]
        );
        assert_eq!(map_tls("rc,ud").unwrap(), ["rc_verbs", "ud_verbs"]);
        assert_eq!(map_tls("rc_mlx5").unwrap(), ["rc_verbs"]);
        assert_eq!(map_tls("ud").unwrap(), ["ud_verbs"]);
        assert_eq!(map_tls("ud_verbs,self").unwrap(), ["ud_verbs", "self"]);
        assert_eq!(map_tls("ib").unwrap(), ["rc_verbs", "ud_verbs"]);
        let neg = map_tls("^tcp").unwrap();
        assert!(!neg.contains(&"tcp".to_string()) && neg.contains(&"self".to_string()));
        assert!(map_tls("cuda_copy").is_err());
    }

    #[test]
    fn apply_settings() {
        let mut c = UcpConfig::default();
        apply(&mut c, "RNDV_THRESH", "8k").unwrap();
        assert_eq!(c.rndv_thresh, Some(8192));
        apply(&mut c, "NET_DEVICES", "lo").unwrap();
        assert_eq!(c.net_devices, ["lo"]);
        apply(&mut c, "KEEPALIVE_INTERVAL", "inf").unwrap();
        assert_eq!(c.keepalive_interval, None);
        assert!(apply(&mut c, "RNDV_SCHEME", "teleport").is_err());
        assert!(apply(&mut c, "NOPE", "1").is_err());
    }
}
