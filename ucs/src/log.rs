//! Logging through `tracing`, level from `RUCX_LOG_LEVEL`, quiet by default.
//!
//! The level takes UCX's names (`fatal`, `error`, `warn`, `diag`, `info`, `debug`, `trace`,
//! `req`, `data`, `async`, `func`, `poll`) or `off`; a `tracing` filter directive such as
//! `warn,uct=debug` is accepted too.

use crate::config::ConfigVar;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

/// `RUCX_LOG_LEVEL`, as a constant for building variable tables (see [`crate::UCS_VARS`]).
pub const LOG_LEVEL_VAR: ConfigVar = ConfigVar {
    name: "LOG_LEVEL",
    default: "warn",
    doc: "Logging level: fatal, error, warn (default), diag, info, debug, trace, req, data, async, func, poll or off",
};

/// `RUCX_LOG_LEVEL`: error, warn (default), info, debug, trace.
pub static LOG_LEVEL: ConfigVar = LOG_LEVEL_VAR;

/// Parses a UCX log level name into a `tracing` level filter.
pub fn parse_level(text: &str) -> Result<LevelFilter, String> {
    Ok(match text.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => LevelFilter::OFF,
        "fatal" | "error" => LevelFilter::ERROR,
        "warn" | "warning" => LevelFilter::WARN,
        "diag" | "info" | "print" => LevelFilter::INFO,
        "debug" => LevelFilter::DEBUG,
        "trace" | "req" | "data" | "async" | "func" | "poll" => LevelFilter::TRACE,
        _ => {
            return Err(format!(
                "'{text}' is not a log level (accepted: fatal, error, warn, diag, info, debug, \
                 trace, req, data, async, func, poll, off, or a tracing filter such as \
                 'warn,uct=debug')"
            ))
        }
    })
}

/// The filter for a `RUCX_LOG_LEVEL` value: a level name, or a `tracing` directive list. A bad
/// value gives the default (`warn`) and the error text to report.
pub fn filter_for(text: &str) -> (EnvFilter, Option<String>) {
    if let Ok(level) = parse_level(text) {
        return (EnvFilter::default().add_directive(level.into()), None);
    }
    if text.contains('=') {
        if let Ok(filter) = EnvFilter::try_new(text.trim()) {
            return (filter, None);
        }
    }
    let why = parse_level(text).err().unwrap_or_default();
    (
        EnvFilter::default().add_directive(LevelFilter::WARN.into()),
        Some(format!("{}={text:?}: {why}", LOG_LEVEL.env_name())),
    )
}

/// Installs a `tracing` subscriber writing to stderr with `filter`, coloured only when stderr
/// is a terminal (a log written to a file or a pipe carries no escape codes). False when the
/// program already installed a subscriber.
pub fn install(filter: EnvFilter) -> bool {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init()
        .is_ok()
}

/// Installs a `tracing` subscriber writing to stderr at `RUCX_LOG_LEVEL` ([`install`]).
/// Idempotent; does nothing if the program already installed a subscriber. A bad level is
/// reported as a warning and `warn` is used.
pub fn init() {
    let (filter, err) = filter_for(&LOG_LEVEL.raw());
    let installed = install(filter);
    if let (true, Some(err)) = (installed, err) {
        tracing::warn!("{err}; using warn");
    }
}

/// What every rucx binary calls first: registers the variable tables of the layers it uses
/// (`tables`; ucs's own are always known), installs logging at `RUCX_LOG_LEVEL` ([`init`]), and
/// warns once per process about each `RUCX_*` variable no table names, with the closest known
/// name ([`crate::config::check_unknown_env`]). Calling it again registers the tables and does
/// nothing else.
pub fn init_program(tables: &[&'static [ConfigVar]]) {
    for t in tables {
        crate::config::register(t);
    }
    init();
    static CHECKED: std::sync::Once = std::sync::Once::new();
    CHECKED.call_once(|| {
        let set: Vec<String> = crate::config::all_vars()
            .iter()
            .filter(|v| v.is_set())
            .map(|v| format!("{}={}", v.env_name(), v.raw()))
            .collect();
        tracing::debug!(
            "{} (pid {}): {} configuration variables known; set in the environment: {}",
            std::env::args().next().unwrap_or_default(),
            std::process::id(),
            crate::config::all_vars().len(),
            if set.is_empty() {
                "none".to_owned()
            } else {
                set.join(", ")
            }
        );
        crate::config::check_unknown_env();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucx_level_names() {
        assert_eq!(parse_level("warn"), Ok(LevelFilter::WARN));
        assert_eq!(parse_level("FATAL"), Ok(LevelFilter::ERROR));
        assert_eq!(parse_level(" diag "), Ok(LevelFilter::INFO));
        assert_eq!(parse_level("debug"), Ok(LevelFilter::DEBUG));
        assert_eq!(parse_level("poll"), Ok(LevelFilter::TRACE));
        assert_eq!(parse_level("off"), Ok(LevelFilter::OFF));
        let err = parse_level("loud").unwrap_err();
        assert!(err.contains("loud") && err.contains("accepted"), "{err}");
    }

    #[test]
    fn filters_from_values() {
        let (f, err) = filter_for("debug");
        assert!(err.is_none());
        assert_eq!(f.max_level_hint(), Some(LevelFilter::DEBUG));

        let (f, err) = filter_for("warn,uct=trace");
        assert!(err.is_none());
        assert_eq!(f.max_level_hint(), Some(LevelFilter::TRACE));

        let (f, err) = filter_for("shouting");
        assert_eq!(f.max_level_hint(), Some(LevelFilter::WARN));
        let err = err.expect("bad level is reported");
        assert!(
            err.contains("RUCX_LOG_LEVEL") && err.contains("shouting"),
            "{err}"
        );
    }

    #[test]
    fn init_is_idempotent() {
        init();
        init();
        tracing::debug!("quiet by default");
    }

    #[test]
    fn default_is_warn() {
        assert_eq!(LOG_LEVEL.default, "warn");
        assert_eq!(parse_level(LOG_LEVEL.default), Ok(LevelFilter::WARN));
    }
}
