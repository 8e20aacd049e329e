//! Logging through `tracing`, level from `RUCX_LOG_LEVEL`, quiet by default.

use crate::config::ConfigVar;

/// `RUCX_LOG_LEVEL`: error, warn (default), info, debug, trace.
pub static LOG_LEVEL: ConfigVar = ConfigVar {
    name: "LOG_LEVEL",
    default: "warn",
    doc: "Logging level: error, warn, info, debug or trace",
};

/// Installs a `tracing` subscriber writing to stderr at `RUCX_LOG_LEVEL`. Idempotent; does
/// nothing if the program already installed a subscriber.
pub fn init() {
    let level = LOG_LEVEL.raw();
    let filter = tracing_subscriber::EnvFilter::try_new(level.trim().to_ascii_lowercase())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
